//! # pcielab-capture — TLP and DLLP captures that Wireshark, tcpdump and NetTLP tools read
//!
//! Every TLP is written as an Ethernet/IPv4/UDP frame carrying NetTLP's 6-byte header and
//! the TLP bytes ([`encap`]); DLLPs travel the same way on their own UDP port
//! ([`encap::DLLP_PORT`]). In pcapng each link direction of a simulation is an interface
//! with a readable name (`rc.0->sw0`) and picosecond timestamps, and the section header
//! carries a comment describing the topology.
//!
//! ```text
//!  simulator / NetTLP tools ──► CaptureWriter ──► run.pcapng ──► Reader ──► decode ──► Matcher
//!                                 (writer)                      (reader)   (decode)  (transactions)
//!                                                   │
//!                                                   └──► Wireshark / tshark + dissector/pcielab.lua
//! ```
//!
//! A whole round: write a read request and its completion on the two directions of a link,
//! read them back, decode, and match the completion to its request.
//!
//! ```
//! use pcielab_capture::decode::decode;
//! use pcielab_capture::transactions::{Matcher, Role};
//! use pcielab_capture::writer::link_names;
//! use pcielab_capture::{CaptureWriter, Format, Reader};
//!
//! let mut w = CaptureWriter::new(Vec::new(), Format::Pcapng, "rc.0 -> mem0, x8 Gen3").unwrap();
//! let [down_name, up_name] = link_names("rc.0", "mem0");
//! let down = w.add_interface(&down_name).unwrap();
//! let up = w.add_interface(&up_name).unwrap();
//! // MRd 3DW, 1 DW at 0x1000, requester 00:00.0, tag 1; then its CplD from 01:00.0.
//! w.write_tlp(down, 2_500, &[0, 0, 0, 1, 0, 0, 1, 0x0f, 0, 0, 0x10, 0]).unwrap();
//! let cpld = [0x4a, 0, 0, 1, 0x01, 0, 0, 4, 0, 0, 1, 0, 0xde, 0xad, 0xbe, 0xef];
//! w.write_tlp(up, 802_500, &cpld).unwrap();
//! let file = w.finish().unwrap();
//!
//! let mut reader = Reader::new(&file).unwrap();
//! let mut matcher = Matcher::new();
//! let mut roles = Vec::new();
//! while let Some(rec) = reader.next_record() {
//!     let rec = rec.unwrap();
//!     let name = reader.interfaces()[rec.interface].name.clone();
//!     let tlp = decode(&rec).tlp().map(|t| matcher.observe(rec.frame, &name, rec.time_ps, &t));
//!     roles.push(tlp.unwrap());
//! }
//! match roles[1] {
//!     Role::Completion(c) => {
//!         assert_eq!(c.request_frame, 1);
//!         assert_eq!(c.latency_ps, 800_000);
//!         assert!(c.last);
//!     }
//!     other => panic!("{other:?}"),
//! }
//! ```
#![warn(missing_docs)]

pub mod decode;
pub mod encap;
pub mod reader;
pub mod stats;
pub mod transactions;
pub mod writer;

/// Packet comment that starts a data-link retransmission's record in a simulation capture
/// (`DLL replay (seq 20)`): the TLP is a copy, sent again from the replay buffer, of one
/// sent earlier on the same link direction. `pcielab dump` and the dissector show it as a
/// replay and keep it out of request/completion matching.
pub const DLL_REPLAY_COMMENT: &str = "DLL replay";

/// What a simulation capture's packet comment says of a TLP whose LCRC was corrupted on
/// the wire (error injection): the receiver discards it, and a replay follows.
pub const LCRC_CORRUPTED_COMMENT: &str =
    "LCRC corrupted on the wire (injected): the receiver discards it";

/// Whether a packet comment marks a TLP corrupted on the wire (see
/// [`LCRC_CORRUPTED_COMMENT`]).
pub fn is_lcrc_corrupted(comment: Option<&[u8]>) -> bool {
    let needle = LCRC_CORRUPTED_COMMENT.as_bytes();
    comment.is_some_and(|c| c.windows(needle.len()).any(|w| w == needle))
}

/// Whether a packet comment marks a data-link retransmission (see [`DLL_REPLAY_COMMENT`]).
pub fn is_dll_replay(comment: Option<&[u8]>) -> bool {
    comment.is_some_and(|c| c.starts_with(DLL_REPLAY_COMMENT.as_bytes()))
}

pub use reader::{
    FileFormat, Interface, Payload, ReadError, ReadErrorKind, Reader, Record, StreamReader,
};
pub use writer::{CaptureWriter, Format, IfId, UdpMeta, WriteError};
