//! `pcielab cfg …`: configuration-space dumps.

use clap::{Args, Subcommand};
use pcielab_config::decode::describe;
use pcielab_config::lspci::parse_dump;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `pcielab cfg`.
#[derive(Args, Debug)]
pub struct CfgArgs {
    #[command(subcommand)]
    command: CfgCommand,
}

#[derive(Subcommand, Debug)]
enum CfgCommand {
    /// Decode `lspci -x`/`-xxx`/`-xxxx` output (one or many functions): header and
    /// capabilities. FILE `-` reads standard input.
    Decode {
        /// The dump.
        file: PathBuf,
    },
}

/// Runs `pcielab cfg`.
pub fn run(args: CfgArgs) -> ExitCode {
    let CfgCommand::Decode { file } = args.command;
    let mut text = String::new();
    let read = if file.as_os_str() == "-" {
        std::io::stdin().read_to_string(&mut text).map(|_| ())
    } else {
        std::fs::read_to_string(&file).map(|t| text = t)
    };
    if let Err(e) = read {
        eprintln!("error: {}: {e}", file.display());
        return ExitCode::FAILURE;
    }
    let entries = match parse_dump(&text) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: {}:{e}", file.display());
            return ExitCode::FAILURE;
        }
    };
    if entries.is_empty() {
        eprintln!(
            "error: {}: no bb:dd.f address line found; expected lspci -x/-xxx/-xxxx output",
            file.display()
        );
        return ExitCode::FAILURE;
    }
    for e in entries {
        let addr = match e.domain {
            Some(d) => format!("{d:04x}:{}", e.bdf),
            None => e.bdf.to_string(),
        };
        println!("{addr} ({} bytes) {}", e.bytes.len(), e.description);
        for line in describe(&e.bytes).lines() {
            println!("\t{line}");
        }
        println!();
    }
    ExitCode::SUCCESS
}
