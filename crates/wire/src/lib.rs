//! # pcielab-wire — the PCIe transaction and data-link layers on the wire
//!
//! Zero-copy views and owned representations of every TLP and DLLP of the PCIe Base
//! Specification (non-Flit mode), data-link framing (sequence number + LCRC), ECRC and
//! DLLP CRCs, and the rules that split DMA into TLPs and reassemble completions.
//!
//! `wire` knows nothing of time and depends on no other pcielab crate.
#![warn(missing_docs)]

pub mod crc;
pub mod dll;
pub mod dllp;
pub mod dma;
pub mod error;
pub mod phy;
pub mod size;
pub mod types;

pub use dll::{DllFrameRepr, LcrcStatus};
pub use dllp::{DllpRepr, DllpType, FcClass, FcDllp, FcKind, FcScale};
pub use dma::{
    completions, request_shape, split_read, split_write, Chunk, CplChunk, CplError, CplInfo,
    CplOutcome, CplPolicy, Reassembler, Shape, SplitPolicy,
};
pub use error::{Error, Result};
pub use phy::StpToken;
pub use types::{
    AddressType, Attr, Bdf, ByteEnables, CplStatus, Generation, SeqNum, Tag, TrafficClass,
};
#[cfg(feature = "json")]
pub mod json;
pub mod tlp;
