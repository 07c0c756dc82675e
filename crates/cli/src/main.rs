//! The `pcielab` command-line tool: glue only; all logic lives in the library crates.
//!
//! Errors print one line on standard error and exit with status 2.
//!
//! Doc comments here are `--help` text, written for a terminal rather than rustdoc.
#![allow(rustdoc::broken_intra_doc_links)]

mod bench_cmd;
mod cfg_cmd;
mod demo;
mod dllp_cmd;
mod dump_cmd;
mod examples;
mod format;
mod host_args;
mod model_cmd;
mod nettlp_cmd;
mod progress;
mod repro_cmd;
mod sim_capture;
mod sim_cmd;
mod sim_inject;
mod sim_nic;
mod sim_sriov;
mod snic_cmd;
mod tlp_cmd;
mod topo_cmd;
mod units;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
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
    #[command(allow_negative_numbers = true)]
    Model(model_cmd::ModelArgs),
    /// Topology files: enumerate, print the tree, dump configuration spaces.
    Topo(topo_cmd::TopoArgs),
    /// Configuration-space dumps (lspci -xxxx format).
    Cfg(cfg_cmd::CfgArgs),
    /// Print a pcapng/pcap capture of TLPs and DLLPs: lines, JSON or statistics.
    #[command(allow_negative_numbers = true)]
    Dump(dump_cmd::DumpArgs),
    /// NetTLP software adapter host (root complex + host memory), or a command to one.
    #[command(allow_negative_numbers = true)]
    Adapter(nettlp_cmd::AdapterArgs),
    /// NetTLP pseudo memory device behind BAR4.
    #[command(allow_negative_numbers = true)]
    Psmem(nettlp_cmd::PsmemArgs),
    /// NetTLP DMA throughput and latency benchmark.
    #[command(allow_negative_numbers = true)]
    Tlpperf(nettlp_cmd::TlpperfArgs),
    /// One NetTLP DMA read or write.
    #[command(subcommand)]
    Dma(nettlp_cmd::DmaCmd),
    /// NetTLP adapter host with the simple-nic host driver: send and receive packets.
    Snic(snic_cmd::SnicArgs),
    /// NetTLP simple-nic device behind BAR4, its MAC side a loopback plug, a TAP
    /// interface or nothing.
    #[command(name = "snic-device")]
    SnicDevice(snic_cmd::SnicDeviceArgs),
    /// Run the timed fabric simulator on a topology with a built-in workload.
    #[command(allow_negative_numbers = true, after_help = sim_cmd::EXAMPLES)]
    Sim(Box<sim_cmd::SimArgs>),
    /// pcie-bench's DMA suite (LAT_RD, LAT_WRRD, BW_RD, BW_WR, BW_RDWR) on the simulator or
    /// over NetTLP: one row per configuration.
    #[command(after_help = bench_cmd::EXAMPLES)]
    Bench(Box<bench_cmd::BenchArgs>),
    /// Host profiles (named sets of host-model knobs with their sources) and knobs.
    #[command(subcommand)]
    Host(host_args::HostCmd),
    /// The source papers' published numbers beside pcielab's, one row per quantity.
    Repro(repro_cmd::ReproArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell), e.g.
    /// `pcielab completions bash > ~/.local/share/bash-completion/completions/pcielab`.
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), e.g. `pcielab man > pcielab.1 && man ./pcielab.1`;
    /// with --dir, write it and one page per subcommand (pcielab-sim.1 and so on) there.
    Man {
        /// Write pcielab.1 and every pcielab-SUBCOMMAND.1 into this directory.
        #[arg(long, value_name = "DIR")]
        dir: Option<std::path::PathBuf>,
    },
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

/// Like [`each_input`] for decoders that give each input as text and as a JSON record:
/// prints the text (table), one JSON object per line (json), or a CSV of all records
/// (csv, written once every input is decoded).
pub fn each_record(
    inline: Option<&str>,
    file: Option<&str>,
    format: format::Format,
    mut f: impl FnMut(&str, &str) -> Result<(String, serde_json::Value), Failure>,
) -> Result<(), Failure> {
    let inputs: Vec<(String, String)> = match (inline, file) {
        (Some(v), _) => vec![(v.to_string(), String::new())],
        (None, Some(path)) => read_lines(path)?
            .into_iter()
            .map(|(n, line)| (line, format!("{path}:{n}: ")))
            .collect(),
        (None, None) => Vec::new(),
    };
    let mut records = Vec::new();
    for (text, at) in inputs {
        let (line, v) = f(&text, &at)?;
        match format {
            format::Format::Table => println!("{line}"),
            format::Format::Json => println!("{v}"),
            format::Format::Csv => records.push(v),
        }
    }
    if format == format::Format::Csv {
        print!("{}", format::records_to_csv(&records));
    }
    Ok(())
}

/// Parses a JSON text, or says where it is broken.
pub fn parse_json(text: &str, where_: &str) -> Result<serde_json::Value, Failure> {
    serde_json::from_str(text).map_err(|e| fail(format!("{where_}invalid JSON: {e}")))
}

/// Command-line errors as every other error: one `pcielab:` prefix, exit status 2
/// (help and version go to stdout with status 0, as clap prints them).
fn clap_exit(e: clap::Error) -> ExitCode {
    if !e.use_stderr() {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    let text = e.render().to_string();
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    eprint!("pcielab: {text}");
    if !text.ends_with('\n') {
        eprintln!();
    }
    ExitCode::from(2)
}

/// Restores the default action of SIGPIPE, so a command whose reader went away
/// (`pcielab demo | head -1`) ends quietly as other Unix tools do, instead of
/// panicking in `println!` (Rust ignores SIGPIPE, making the write fail).
fn default_sigpipe() {
    // SAFETY: signal() with SIG_DFL installs no handler and touches no Rust state; it
    // runs first thing in main, before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// `pcielab completions SHELL`: the completion script on standard output.
fn completions(shell: clap_complete::Shell) -> Result<(), Failure> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "pcielab", &mut out);
    topo_cmd::write_stdout(&String::from_utf8_lossy(&out))
}

/// `pcielab man`: the manual page, roff on standard output, or every page into `dir`.
fn man_page(dir: Option<&std::path::Path>) -> Result<(), Failure> {
    if let Some(d) = dir {
        return std::fs::create_dir_all(d)
            .and_then(|()| clap_mangen::generate_to(Cli::command(), d))
            .map_err(|e| fail(format!("{}: {e}", d.display())));
    }
    let mut out = Vec::new();
    // As `generate_to` makes it: no `help` subcommand (it has no page).
    clap_mangen::Man::new(Cli::command().disable_help_subcommand(true))
        .render(&mut out)
        .map_err(|e| fail(format!("man page: {e}")))?;
    topo_cmd::write_stdout(&String::from_utf8_lossy(&out))
}

/// The flags given on the command line of subcommand `sub` (long names; the id of a
/// positional argument), not those left at their defaults.
fn given_flags(sub: &str, m: &clap::ArgMatches) -> Vec<String> {
    let cmd = Cli::command();
    let Some(c) = cmd.find_subcommand(sub) else {
        return Vec::new();
    };
    c.get_arguments()
        .filter(|arg| m.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine))
        .map(|arg| {
            arg.get_long()
                .map_or_else(|| arg.get_id().to_string(), str::to_string)
        })
        .collect()
}

fn main() -> ExitCode {
    let matches = match Cli::command().try_get_matches() {
        Ok(m) => m,
        Err(e) => return clap_exit(e),
    };
    let mut cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => return clap_exit(e),
    };
    if let (Command::Sim(a), Some(("sim", m))) = (&mut cli.command, matches.subcommand()) {
        a.given = given_flags("sim", m);
    }
    // Not for the servers (adapter, psmem, snic-device): they write to sockets, and a
    // peer that goes away must not end them.
    if !matches!(
        cli.command,
        Command::Adapter(_) | Command::Psmem(_) | Command::SnicDevice(_)
    ) {
        default_sigpipe();
    }
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
        Command::SnicDevice(a) => snic_cmd::run_snic_device(&a),
        Command::Sim(a) => sim_cmd::run(&a),
        Command::Bench(a) => bench_cmd::run(&a),
        Command::Host(c) => host_args::run(&c)
            .map(|out| print!("{out}"))
            .map_err(Failure),
        Command::Repro(a) => repro_cmd::run(&a),
        Command::Completions { shell } => completions(shell),
        Command::Man { dir } => man_page(dir.as_deref()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(msg)) => {
            eprintln!("pcielab: {msg}");
            ExitCode::from(2)
        }
    }
}
