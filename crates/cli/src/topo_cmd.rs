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
    /// format of `lspci -xxxx` (read it back with `lspci -F OUT -vvv` or `-t`). SR-IOV
    /// VFs carry the IDs Linux gives them (the PF's Vendor ID and VF Device ID; their
    /// own ID registers read FFFFh).
    Lspci {
        #[command(flatten)]
        src: Source,
    },
    /// Enumerate and print the tree, with the names of the topology file.
    Tree {
        #[command(flatten)]
        src: Source,
    },
    /// Enumerate and print the tree in detail.
    Show {
        #[command(flatten)]
        src: Source,
        /// Output format: table (each function decoded), csv (one row per function:
        /// the JSON's scalar fields, nested ones as a.b) or json (`{"functions": [...]}`).
        #[arg(long, value_enum, conflicts_with = "json")]
        format: Option<crate::format::Format>,
        /// Same as --format json.
        #[arg(long)]
        json: bool,
    },
    /// List the example topologies built into pcielab (name and description); use
    /// one with `--example NAME` here or in `pcielab sim`.
    ListExamples,
}

/// Where a topology comes from: a file, or a built-in example.
#[derive(Args, Debug)]
struct Source {
    /// Topology file (TOML).
    #[arg(required_unless_present = "example", conflicts_with = "example")]
    file: Option<PathBuf>,
    /// A built-in example topology instead of a file (`pcielab topo list-examples`).
    #[arg(long, value_name = "NAME")]
    example: Option<String>,
}

fn load(src: &Source) -> Result<(Fabric, EnumeratedTree), String> {
    let reg = KindRegistry::builtin();
    let topo = match (&src.file, &src.example) {
        (_, Some(name)) => {
            let ex = crate::examples::get(name).map_err(|f| f.0)?;
            Topology::parse(ex.text, &crate::examples::label(name), &reg)
        }
        (Some(file), None) => Topology::load(file, &reg),
        (None, None) => return Err("a topology file or --example NAME is needed".into()),
    }
    .map_err(|e| e.to_string())?;
    let mut fabric = Fabric::build(&topo, &reg).map_err(|e| e.to_string())?;
    // As the simulator enumerates (same MRRS), so the dump shows what `sim` sends.
    let hc = pcielab_fabric::timed::host_config(&pcielab_fabric::timed::SimConfig::default());
    let tree = enumerate(&mut fabric, &hc)
        .map_err(|e| format!("{}: enumeration failed: {e}", topo.file))?;
    Ok((fabric, tree))
}

/// Runs `pcielab topo`.
pub fn run(args: &TopoArgs) -> Result<(), Failure> {
    let result = match &args.command {
        TopoCommand::Lspci { src } => load(src).map(|(f, _)| f.lspci_dump()),
        TopoCommand::Tree { src } => load(src).map(|(f, t)| tree_text(&f, &t)),
        TopoCommand::ListExamples => Ok(crate::examples::list()),
        TopoCommand::Show { src, format, json } => load(src).map(|(f, t)| {
            let format = crate::format::effective(*format, *json, false);
            if format == crate::format::Format::Json {
                let mut s = serde_json::to_string_pretty(&tree_json(&f, &t)).unwrap_or_default();
                s.push('\n');
                s
            } else if format == crate::format::Format::Csv {
                let v = tree_json(&f, &t);
                let rows = v["functions"].as_array().cloned().unwrap_or_default();
                crate::format::records_to_csv(&rows)
            } else {
                t.functions
                    .iter()
                    .filter_map(|e| f.function_at(e.bdf))
                    .map(|id| {
                        // A VF's own ID registers read FFFFh: say what software calls it.
                        let vf = match (f.functions[id.0 as usize].vf, f.vf_ids(id)) {
                            (Some(v), Some((vendor, device))) => format!(
                                "SR-IOV VF {} of {}: [{vendor:04x}:{device:04x}] (PF's Vendor ID, VF Device ID)\n",
                                v.index,
                                f.bdf(v.pf)
                            ),
                            _ => String::new(),
                        };
                        format!(
                            "{} {}\n{vf}{}\n",
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
