//! `pcielab topo …`: load a topology file, enumerate it, print it.

use crate::{fail, Failure};
use clap::{Args, Subcommand};
use pcielab_fabric::functional::Fabric;
use pcielab_fabric::host::enumerate::{enumerate, EnumeratedTree};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::report::{tree_json, tree_text};
use pcielab_fabric::topology::Topology;
use std::path::PathBuf;

/// Arguments of `pcielab topo`.
#[derive(Args, Debug)]
pub struct TopoArgs {
    #[command(subcommand)]
    command: TopoCommand,
}

#[derive(Subcommand, Debug)]
enum TopoCommand {
    /// Enumerate and print every function's 4096-byte configuration space in the
    /// format of `lspci -xxxx` (read it back with `lspci -F OUT -vvv` or `-t`).
    Lspci {
        /// Topology file (TOML).
        file: PathBuf,
    },
    /// Enumerate and print the tree, with the names of the topology file.
    Tree {
        /// Topology file (TOML).
        file: PathBuf,
    },
    /// Enumerate and print the tree in detail.
    Show {
        /// Topology file (TOML).
        file: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

fn load(file: &std::path::Path) -> Result<(Fabric, EnumeratedTree), String> {
    let reg = KindRegistry::builtin();
    let topo = Topology::load(file, &reg).map_err(|e| e.to_string())?;
    let mut fabric = Fabric::build(&topo, &reg).map_err(|e| e.to_string())?;
    // As the simulator enumerates (same MRRS), so the dump shows what `sim` sends.
    let hc = pcielab_fabric::timed::host_config(&pcielab_fabric::timed::SimConfig::default());
    let tree = enumerate(&mut fabric, &hc)
        .map_err(|e| format!("{}: enumeration failed: {e}", file.display()))?;
    Ok((fabric, tree))
}

/// Runs `pcielab topo`.
pub fn run(args: &TopoArgs) -> Result<(), Failure> {
    let result = match &args.command {
        TopoCommand::Lspci { file } => load(file).map(|(f, _)| f.lspci_dump()),
        TopoCommand::Tree { file } => load(file).map(|(f, t)| tree_text(&f, &t)),
        TopoCommand::Show { file, json } => load(file).map(|(f, t)| {
            if *json {
                let mut s = serde_json::to_string_pretty(&tree_json(&f, &t)).unwrap_or_default();
                s.push('\n');
                s
            } else {
                t.functions
                    .iter()
                    .filter_map(|e| f.function_at(e.bdf))
                    .map(|id| {
                        format!(
                            "{} {}\n{}\n",
                            f.bdf(id),
                            f.name(id),
                            pcielab_config::decode::describe(
                                f.functions[id.0 as usize].config.bytes()
                            )
                        )
                    })
                    .collect()
            }
        }),
    };
    let text = result.map_err(fail)?;
    write_stdout(&text)
}

/// Writes to standard output; a closed pipe (`| head`) is not an error.
pub fn write_stdout(text: &str) -> Result<(), Failure> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(fail(format!("stdout: {e}"))),
        _ => Ok(()),
    }
}
