//! The `pcielab` command-line tool: glue only; all logic lives in the library crates.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod model_cmd;

#[derive(Parser, Debug)]
#[command(name = "pcielab", version, about = "A software PCIe lab")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the built-in demonstration set of packets.
    Demo,
    /// The analytic model: bandwidth, link rates, NICs, latency (pcie-bench compatible).
    Model(model_cmd::ModelArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Demo => {
            println!("pcielab");
            ExitCode::SUCCESS
        }
        Command::Model(args) => model_cmd::run(args),
    }
}
