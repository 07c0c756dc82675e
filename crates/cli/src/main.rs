//! The `pcielab` command-line tool: glue only; all logic lives in the library crates.
//!
//! Errors print one line on standard error and exit with status 2.
//!
//! Doc comments here are `--help` text, written for a terminal rather than rustdoc.
#![allow(rustdoc::broken_intra_doc_links)]

mod cfg_cmd;
mod demo;
mod dllp_cmd;
mod dump_cmd;
mod model_cmd;
mod nettlp_cmd;
mod sim_capture;
mod sim_cmd;
mod sim_inject;
mod snic_cmd;
mod tlp_cmd;
mod topo_cmd;

use clap::{Parser, Subcommand};
use std::io::BufRead;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(name = "pcielab", version, about = "A software PCIe lab", long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Decode and print the built-in set of packets covering every TLP and DLLP kind.
    Demo(demo::DemoArgs),
    /// Decode and encode Transaction Layer Packets.
    #[command(subcommand)]
    Tlp(tlp_cmd::TlpCmd),
    /// Decode and encode Data Link Layer Packets.
    #[command(subcommand)]
    Dllp(dllp_cmd::DllpCmd),
    /// The analytic model: bandwidth, link rates, NICs, latency (pcie-bench compatible).
    Model(model_cmd::ModelArgs),
    /// Topology files: enumerate, print the tree, dump configuration spaces.
    Topo(topo_cmd::TopoArgs),
    /// Configuration-space dumps (lspci -xxxx format).
    Cfg(cfg_cmd::CfgArgs),
    /// Print a pcapng/pcap capture of TLPs and DLLPs: lines, JSON or statistics.
    Dump(dump_cmd::DumpArgs),
    /// NetTLP software adapter host (root complex + host memory), or a command to one.
    Adapter(nettlp_cmd::AdapterArgs),
    /// NetTLP pseudo memory device behind BAR4.
    Psmem(nettlp_cmd::PsmemArgs),
    /// NetTLP DMA throughput and latency benchmark.
    Tlpperf(nettlp_cmd::TlpperfArgs),
    /// One NetTLP DMA read or write.
    #[command(subcommand)]
    Dma(nettlp_cmd::DmaCmd),
    /// NetTLP adapter host with the simple-nic host driver: send and receive packets.
    Snic(snic_cmd::SnicArgs),
    /// Run the timed fabric simulator on a topology with a built-in workload.
    Sim(sim_cmd::SimArgs),
}

/// A command failure: the one line to print.
#[derive(Debug)]
pub struct Failure(pub String);

/// Builds a failure.
pub fn fail(msg: impl Into<String>) -> Failure {
    Failure(msg.into())
}

/// Reads the non-blank, non-comment lines of a file (or stdin for "-"), with line numbers.
pub fn read_lines(path: &str) -> Result<Vec<(usize, String)>, Failure> {
    let text = if path == "-" {
        let mut s = String::new();
        for line in std::io::stdin().lock().lines() {
            let line = line.map_err(|e| fail(format!("stdin: {e}")))?;
            s.push_str(&line);
            s.push('\n');
        }
        s
    } else {
        std::fs::read_to_string(path).map_err(|e| fail(format!("{path}: {e}")))?
    };
    Ok(text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim().to_string()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .collect())
}

/// Runs `f` on one inline value or on every line of a file, printing each result;
/// errors from a file name the file and line (`F:N: …`).
pub fn each_input(
    inline: Option<&str>,
    file: Option<&str>,
    mut f: impl FnMut(&str, &str) -> Result<String, Failure>,
) -> Result<(), Failure> {
    if let Some(v) = inline {
        println!("{}", f(v, "")?);
    } else if let Some(path) = file {
        for (n, line) in read_lines(path)? {
            println!("{}", f(&line, &format!("{path}:{n}: "))?);
        }
    }
    Ok(())
}

/// Parses a JSON text, or says where it is broken.
pub fn parse_json(text: &str, where_: &str) -> Result<serde_json::Value, Failure> {
    serde_json::from_str(text).map_err(|e| fail(format!("{where_}invalid JSON: {e}")))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(a) => demo::run(&a),
        Command::Tlp(c) => tlp_cmd::run(&c),
        Command::Dllp(c) => dllp_cmd::run(&c),
        Command::Dump(a) => dump_cmd::run(&a),
        Command::Model(args) => return model_cmd::run(args),
        Command::Topo(a) => topo_cmd::run(&a),
        Command::Cfg(a) => cfg_cmd::run(&a),
        Command::Adapter(a) => nettlp_cmd::run_adapter(&a),
        Command::Psmem(a) => nettlp_cmd::run_psmem(&a),
        Command::Tlpperf(a) => nettlp_cmd::run_tlpperf(&a),
        Command::Dma(c) => nettlp_cmd::run_dma(&c),
        Command::Snic(a) => snic_cmd::run_snic(&a),
        Command::Sim(a) => sim_cmd::run(&a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(msg)) => {
            eprintln!("pcielab: {msg}");
            ExitCode::from(2)
        }
    }
}
