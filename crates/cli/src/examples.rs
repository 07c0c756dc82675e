//! The example topologies of `examples/topologies/`, built into the binary so that
//! `pcielab sim --example NAME` and `pcielab topo … --example NAME` work outside the
//! source tree.

use crate::{fail, Failure};

/// One built-in example topology.
#[derive(Debug, Clone, Copy)]
pub struct Example {
    /// The file name without `.toml`.
    pub name: &'static str,
    /// One line: what the example shows.
    pub about: &'static str,
    /// The TOML text.
    pub text: &'static str,
}

macro_rules! example {
    ($name:literal, $about:literal) => {
        Example {
            name: $name,
            about: $about,
            text: include_str!(concat!("../../../examples/topologies/", $name, ".toml")),
        }
    };
}

/// Every file of `examples/topologies/`, in name order (a test checks the list
/// against the directory).
pub const EXAMPLES: &[Example] = &[
    example!(
        "all-links",
        "every generation (Gen1-Gen6) and width (x1-x32); endpoints with less ASPM support"
    ),
    example!(
        "d2d",
        "device-to-device streaming (seed 004): a D2D sender and a D2D NIC below one switch"
    ),
    example!(
        "design",
        "a root complex, a 4-port switch and one psmem endpoint (the docs' example)"
    ),
    example!(
        "nested-switches",
        "a switch below a switch; 32/64-bit, prefetchable, I/O, ROM and SR-IOV BARs"
    ),
    example!(
        "sim-default",
        "the default simulation: Gen3 x8 switch with Gen3 x8, Gen3 x4, Gen2 x4 endpoints; Gen4 x16 endpoint"
    ),
    example!(
        "sriov-4vf",
        "a psmem SR-IOV PF with four VFs enabled by enumeration (vfs = 4), each its own function"
    ),
    example!(
        "sriov-dma",
        "seed 003's SR-IOV DMA engine as the paper tested it: a PF and a VF on Gen3 x8, tags per function"
    ),
    example!(
        "sriov-dma-64vf",
        "seed 003's SR-IOV DMA engine with 64 VFs (ARI), each its own function, rings and MSI-X"
    ),
    example!(
        "wake",
        "two wake-capable (PME) psmem endpoints below a switch"
    ),
];

/// The example called `name`, or an error listing the names.
pub fn get(name: &str) -> Result<&'static Example, Failure> {
    EXAMPLES.iter().find(|e| e.name == name).ok_or_else(|| {
        fail(format!(
            "--example {name:?}: no such example; examples: {} (`pcielab topo list-examples`)",
            names().join(", ")
        ))
    })
}

/// The example names.
pub fn names() -> Vec<&'static str> {
    EXAMPLES.iter().map(|e| e.name).collect()
}

/// The name a topology built from example `name` carries in messages and headers.
pub fn label(name: &str) -> String {
    format!("example {name} (examples/topologies/{name}.toml)")
}

/// `pcielab topo list-examples`: one line per example, name and description.
pub fn list() -> String {
    let w = EXAMPLES.iter().map(|e| e.name.len()).max().unwrap_or(0);
    EXAMPLES
        .iter()
        .map(|e| format!("{:<w$}  {}\n", e.name, e.about))
        .collect()
}
