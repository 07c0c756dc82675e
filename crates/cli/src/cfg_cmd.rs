//! `pcielab cfg …`: configuration-space dumps.

use crate::{fail, Failure};
use clap::{Args, Subcommand};
use pcielab_config::decode::describe;
use pcielab_config::lspci::parse_dump;
use std::io::Read;
use std::path::PathBuf;

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
pub fn run(args: &CfgArgs) -> Result<(), Failure> {
    let CfgCommand::Decode { file } = &args.command;
    let mut text = String::new();
    let read = if file.as_os_str() == "-" {
        std::io::stdin().read_to_string(&mut text).map(|_| ())
    } else {
        std::fs::read_to_string(file).map(|t| text = t)
    };
    read.map_err(|e| fail(format!("{}: {e}", file.display())))?;
    let entries = parse_dump(&text).map_err(|e| fail(format!("{}: {e}", file.display())))?;
    if entries.is_empty() {
        return Err(fail(format!(
            "{}: no bb:dd.f address line found; expected lspci -x/-xxx/-xxxx output",
            file.display()
        )));
    }
    let mut out = String::new();
    for e in entries {
        let addr = match e.domain {
            Some(d) => format!("{d:04x}:{}", e.bdf),
            None => e.bdf.to_string(),
        };
        out += &format!("{addr} ({} bytes) {}\n", e.bytes.len(), e.description);
        for line in describe(&e.bytes).lines() {
            out += &format!("\t{line}\n");
        }
        out.push('\n');
    }
    crate::topo_cmd::write_stdout(&out)
}
