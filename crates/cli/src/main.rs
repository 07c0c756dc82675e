//! The `pcielab` command-line tool: glue only; all logic lives in the library crates.

use clap::{Parser, Subcommand};

mod cfg_cmd;
mod topo_cmd;
use std::process::ExitCode;

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
    /// Topology files: enumerate, print the tree, dump configuration spaces.
    Topo(topo_cmd::TopoArgs),
    /// Configuration-space dumps (lspci -xxxx format).
    Cfg(cfg_cmd::CfgArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Demo => {
            println!("pcielab");
            ExitCode::SUCCESS
        }
        Command::Topo(args) => topo_cmd::run(args),
        Command::Cfg(args) => cfg_cmd::run(args),
    }
}
