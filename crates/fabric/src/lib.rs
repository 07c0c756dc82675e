//! # pcielab-fabric — topologies, routing and host software
//!
//! ```text
//!   topology file ──► Topology ──► Fabric (hardware, functional routing) ──► timed::FabricSim
//!                                     ▲
//!                                     │ configuration / memory requests only
//!                              host::enumerate ──► EnumeratedTree
//! ```
//!
//! - [`topology`] loads and checks the TOML topology format of `docs/design.md`;
//!   [`kinds`] says which node kinds exist and which keys each takes.
//! - [`functional`] builds the hardware (root complex, switches, endpoints) and routes
//!   configuration, memory, I/O and ID-routed requests by the registers software
//!   programmed — no timing.
//! - [`host`] is host software: [`host::enumerate::enumerate`] numbers buses, sizes and
//!   assigns BARs and windows, sets MPS/MRRS and programs interrupts.
//! - [`report`] turns an enumerated tree into the `lspci -tv`-like tree and JSON.
//! - [`timed`] is the timed simulator on the `pcielab-sim` kernel: links with the
//!   data-link layer and flow control, switches, the root complex, the endpoint API
//!   ([`timed::Endpoint`]) and the host-program API ([`timed::FabricSim`]).
//!
//! ```
//! use pcielab_fabric::{functional::Fabric, kinds::KindRegistry, topology::Topology};
//! use pcielab_fabric::host::enumerate::{enumerate, HostConfig};
//! let reg = KindRegistry::builtin();
//! let topo = Topology::parse(r#"
//! [[node]]
//! name = "rc"
//! kind = "root-complex"
//! [[node]]
//! name = "sw0"
//! kind = "switch"
//! ports = 2
//! [[node]]
//! name = "mem0"
//! kind = "psmem"
//! [[link]]
//! up = "rc.0"
//! down = "sw0"
//! gen = 4
//! width = 16
//! [[link]]
//! up = "sw0.1"
//! down = "mem0"
//! gen = 4
//! width = 4
//! "#, "doc.toml", &reg).unwrap();
//! let mut fabric = Fabric::build(&topo, &reg).unwrap();
//! let tree = enumerate(&mut fabric, &HostConfig::default()).unwrap();
//! // 00:01.0 root port → bus 1: switch upstream port → bus 2: two downstream ports
//! // → buses 3 and 4; mem0 sits on bus 4.
//! let mem0 = tree.functions.iter().find(|f| f.bdf.to_string() == "04:00.0").unwrap();
//! assert_eq!(mem0.link.unwrap().width, 4);
//! ```
#![warn(missing_docs)]

pub mod drivers;
pub mod functional;
pub mod host;
mod inthash;
pub mod kinds;
pub mod msix;
pub mod params;
pub mod phy;
pub mod report;
pub mod timed;
pub mod topology;
