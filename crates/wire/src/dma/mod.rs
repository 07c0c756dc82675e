//! DMA on the wire: byte enables, request splitting, completion splitting and reassembly.
//!
//! A DMA engine moves a byte range of any alignment. PCIe moves whole DWs (4 bytes)
//! and marks the bytes that matter with byte enables; it caps every request at
//! Max_Read_Request_Size (reads) or Max_Payload_Size (writes), forbids any request to
//! cross a 4 KiB boundary, and lets a completer answer one read with several
//! completions that end on Read Completion Boundary (RCB) multiples. This module holds
//! those rules as plain arithmetic on plain values (addresses, lengths, IDs), so it
//! works with any TLP representation:
//!
//! ```text
//!   DMA read of [addr, addr+len)
//!        │
//!        │ split_read(addr, len, mrrs, policy)        ─► Chunk  (one MRd each:
//!        ▼                                               addr, len, Length, First/Last BE)
//!   MRd  MRd  MRd …      (≤ MRRS, never across 4 KiB)
//!        │
//!        │ completions(chunk.addr, chunk.len, rcb, mps, policy)
//!        ▼                                            ─► CplChunk (one CplD each:
//!   CplD CplD …          (≤ MPS, end on RCB multiples)   Byte Count, Lower Address, Length)
//!        │
//!        │ Reassembler::accept(&CplInfo, &mut dest)    ─► bytes land in `dest`;
//!        ▼                                               CplError for every fault
//!   dest[offset .. offset+len] == memory[addr .. addr+len]
//! ```
//!
//! * [`request_shape`] — Length and First/Last DW Byte Enables of one request
//!   ([`Shape`]), with the spec's rules (1-DW requests have Last BE `0000`;
//!   [`Shape::zero_length`] for zero-length reads; no 4 KiB crossing).
//! * [`split_read`] / [`split_write`] — the MRds / MWrs of a DMA ([`Chunk`]s),
//!   allocation-free iterators; [`SplitPolicy`] chooses between naive and aligned cuts.
//! * [`completions`] — how a completer may answer one MRd ([`CplChunk`]s), with
//!   [`CplPolicy`] choosing maximal completions or one per RCB block.
//! * [`Reassembler`] — the requester's side: tracks outstanding reads by tag with O(1)
//!   work and no allocation per completion, checks every completion, copies its data into
//!   the caller's buffer and reports [`CplError`]s as typed values.
//!
//! Addresses are byte addresses (`u64`); lengths are byte counts. Nothing here panics
//! on bad input: sizes, lengths and addresses are checked and rejected with an
//! [`Error`] naming the value and what is allowed.
//!
//! A whole round trip:
//!
//! ```
//! use pcielab_wire::dma::{completions, split_read, CplPolicy, Reassembler, SplitPolicy};
//! use pcielab_wire::{Bdf, Tag};
//!
//! let memory: Vec<u8> = (0..8192u32).map(|i| (i * 7) as u8).collect(); // host memory at 0
//! let (addr, len) = (0x0ffe_u64, 300u64); // crosses the 4 KiB boundary at 0x1000
//! let me = Bdf::new(1, 0, 0)?;
//! let host = Bdf::new(0, 0, 0)?;
//! let mut rx = Reassembler::new(me, 32)?;
//! let mut dest = vec![0u8; len as usize];
//!
//! let mut done = 0;
//! for (i, chunk) in split_read(addr, len, 256, SplitPolicy::Aligned)?.enumerate() {
//!     let tag = Tag::new(i as u16)?;
//!     rx.issue_chunk(tag, &chunk, None)?;
//!     for c in completions(chunk.addr, chunk.len, 64, 128, Default::default())? {
//!         // The completer reads whole DWs from its memory.
//!         let dw_base = (chunk.addr & !3) as usize;
//!         let r = c.payload_range();
//!         let payload = &memory[dw_base + r.start..dw_base + r.end];
//!         if rx.accept(&c.info(me, host, tag, payload), &mut dest)?.is_complete() {
//!             done += 1;
//!         }
//!     }
//! }
//! assert_eq!(done, 3); // 0xffe..0x1000, 0x1000..0x1100, 0x1100..0x112a
//! assert_eq!(&dest[..], &memory[0x0ffe..0x0ffe + 300]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod be;
mod cpl;
mod reassembly;
mod split;

#[cfg(test)]
mod sweep_tests;

pub use be::{request_shape, Shape};
pub use cpl::{completions, Completions, CplChunk, CplPolicy};
pub use reassembly::{CplError, CplInfo, CplOutcome, Reassembler};
pub use split::{split_read, split_write, Chunk, Split, SplitPolicy};

use crate::error::{Error, Result};

/// The 4 KiB boundary no request may cross.
pub const PAGE: u64 = 4096;

/// Checks a Max_Payload_Size / Max_Read_Request_Size value: a power of two in 128..=4096.
pub(crate) fn check_size(what: &'static str, value: u32) -> Result<u32> {
    if value.is_power_of_two() && (128..=4096).contains(&value) {
        Ok(value)
    } else {
        Err(Error::Invalid {
            what,
            value: value as u64,
            allowed: "128, 256, 512, 1024, 2048 or 4096 bytes",
        })
    }
}

/// Checks a Read Completion Boundary: 64 or 128 bytes.
pub(crate) fn check_rcb(value: u32) -> Result<u32> {
    if value == 64 || value == 128 {
        Ok(value)
    } else {
        Err(Error::Invalid {
            what: "Read Completion Boundary",
            value: value as u64,
            allowed: "64 or 128 bytes",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_checked() {
        for ok in [128, 256, 512, 1024, 2048, 4096] {
            assert_eq!(check_size("MPS", ok), Ok(ok));
        }
        for bad in [0, 1, 64, 127, 129, 384, 8192, u32::MAX] {
            assert!(
                matches!(check_size("MPS", bad), Err(Error::Invalid { what: "MPS", value, .. }) if value == bad as u64)
            );
        }
        assert_eq!(check_rcb(64), Ok(64));
        assert_eq!(check_rcb(128), Ok(128));
        for bad in [0, 32, 256] {
            assert!(check_rcb(bad).is_err());
        }
    }
}
