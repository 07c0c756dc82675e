//! # pcielab-capture — TLP and DLLP captures that Wireshark, tcpdump and NetTLP tools read
//!
//! Every TLP is written as an Ethernet/IPv4/UDP frame carrying NetTLP's 6-byte header and
//! the TLP bytes ([`encap`]); DLLPs travel the same way on their own UDP port
//! ([`encap::DLLP_PORT`]). In pcapng each link direction of a simulation is an interface
//! with a readable name (`rc.0->sw0`) and picosecond timestamps, and the section header
//! carries a comment describing the topology.
//!
//! ```
//! use pcielab_capture::{CaptureWriter, Format};
//! let mut w = CaptureWriter::new(Vec::new(), Format::Pcapng, "rc.0 -> mem0").unwrap();
//! let down = w.add_interface("rc.0->mem0").unwrap();
//! // MRd 3DW, 1 DW at 0x1000, requester 00:00.0, tag 1.
//! w.write_tlp(down, 2_500, &[0, 0, 0, 1, 0, 0, 1, 0x0f, 0, 0, 0x10, 0]).unwrap();
//! let file = w.finish().unwrap();
//! assert!(file.len() > 60);
//! ```
#![warn(missing_docs)]

pub mod decode;
pub mod encap;
pub mod reader;
pub mod stats;
pub mod transactions;
pub mod writer;

pub use reader::{FileFormat, Interface, Payload, ReadError, ReadErrorKind, Reader, Record};
pub use writer::{CaptureWriter, Format, IfId, UdpMeta, WriteError};
