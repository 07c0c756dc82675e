//! Conversions between TLPs and the DMA rules of [`crate::dma`]: a split chunk becomes an
//! MRd or MWr, a completion chunk becomes a Cpl/CplD, and a received completion becomes
//! the [`CplInfo`] that a [`Reassembler`](crate::dma::Reassembler) accepts.
//!
//! ```
//! use pcielab_wire::dma::{completions, split_read, CplPolicy, Reassembler, SplitPolicy};
//! use pcielab_wire::tlp::TlpRepr;
//! use pcielab_wire::{Bdf, Tag};
//!
//! let (host, dev) = (Bdf::from_raw(0), Bdf::from_raw(0x0100));
//! let memory: Vec<u8> = (0..=255u8).cycle().take(8192).collect();
//! let (addr, len) = (0x0ffa_u64, 300u64);
//! let mut dest = vec![0u8; len as usize];
//! let mut rx = Reassembler::new(dev, 32).unwrap();
//! for (i, chunk) in split_read(addr, len, 128, SplitPolicy::Aligned).unwrap().enumerate() {
//!     let tag = Tag::new(i as u16).unwrap();
//!     let mrd = TlpRepr::mem_read_chunk(dev, tag, &chunk);
//!     rx.issue_chunk(tag, &chunk, Some(host)).unwrap();
//!     // The completer answers the MRd it received.
//!     let base = (chunk.addr & !3) as usize;
//!     for c in completions(chunk.addr, chunk.len, 64, 256, CplPolicy::Maximal).unwrap() {
//!         let data = &memory[base..][c.payload_range()];
//!         let cpld = TlpRepr::completion_chunk(host, mrd.requester_id(), tag, &c, data).unwrap();
//!         let bytes = cpld.to_vec().unwrap();
//!         let info = TlpRepr::parse_bytes(&bytes).unwrap().cpl_info().unwrap();
//!         rx.accept(&info, &mut dest).unwrap();
//!     }
//! }
//! assert_eq!(&dest[..], &memory[addr as usize..(addr + len) as usize]);
//! ```

use super::{CplHeader, MemHeader, MemOp, TlpHeader, TlpRepr};
use crate::dma::{Chunk, CplChunk, CplInfo};
use crate::error::{Error, Result};
use crate::types::{Bdf, CplStatus, Tag};

impl<'a> TlpRepr<'a> {
    /// The MRd for one chunk of [`split_read`](crate::dma::split_read).
    pub fn mem_read_chunk(requester_id: Bdf, tag: Tag, chunk: &Chunk) -> TlpRepr<'a> {
        let sh = chunk.shape;
        let h = MemHeader::new(
            MemOp::Read,
            requester_id,
            tag,
            chunk.addr,
            sh.first_be,
            sh.last_be,
            sh.length_dw,
        );
        TlpRepr::with_header(TlpHeader::Mem(h), &[])
    }

    /// The MWr for one chunk of [`split_write`](crate::dma::split_write); `payload` is the
    /// DW-aligned data (`length_dw * 4` bytes, see [`chunk_payload`]).
    pub fn mem_write_chunk(
        requester_id: Bdf,
        tag: Tag,
        chunk: &Chunk,
        payload: &'a [u8],
    ) -> Result<TlpRepr<'a>> {
        if payload.len() != chunk.shape.length_dw as usize * 4 {
            return Err(Error::Invalid {
                what: "MWr payload length for the chunk",
                value: payload.len() as u64,
                allowed: "exactly length_dw * 4 bytes",
            });
        }
        let sh = chunk.shape;
        let h = MemHeader::new(
            MemOp::Write,
            requester_id,
            tag,
            chunk.addr,
            sh.first_be,
            sh.last_be,
            0,
        );
        Ok(TlpRepr::with_header(TlpHeader::Mem(h), payload))
    }

    /// A successful completion for one [`CplChunk`]; `payload` is the chunk's DW-aligned
    /// data (`length_dw * 4` bytes; empty for a zero-length read's Cpl).
    pub fn completion_chunk(
        completer_id: Bdf,
        requester_id: Bdf,
        tag: Tag,
        c: &CplChunk,
        payload: &'a [u8],
    ) -> Result<TlpRepr<'a>> {
        if c.length_dw == 0 {
            return TlpRepr::completion(
                completer_id,
                requester_id,
                tag,
                CplStatus::Sc,
                c.byte_count,
                c.lower_address,
                &[],
            );
        }
        if payload.len() != c.length_dw as usize * 4 {
            return Err(Error::Invalid {
                what: "CplD payload length for the completion chunk",
                value: payload.len() as u64,
                allowed: "exactly length_dw * 4 bytes",
            });
        }
        Ok(TlpRepr::with_header(
            TlpHeader::Cpl(CplHeader {
                locked: false,
                completer_id,
                status: CplStatus::Sc,
                bcm: false,
                byte_count: c.byte_count,
                requester_id,
                tag,
                lower_address: c.lower_address & 0x7f,
            }),
            payload,
        ))
    }

    /// The fields of a completion that [`Reassembler::accept`](crate::dma::Reassembler::accept)
    /// needs; `None` for TLPs that are not completions.
    pub fn cpl_info(&self) -> Option<CplInfo<'a>> {
        match self.header {
            TlpHeader::Cpl(c) => Some(CplInfo {
                requester_id: c.requester_id,
                completer_id: c.completer_id,
                tag: c.tag,
                status: c.status,
                bcm: c.bcm,
                byte_count: c.byte_count,
                lower_address: c.lower_address,
                length_dw: if self.payload.is_empty() {
                    0
                } else {
                    (self.payload.len() / 4) as u16
                },
                poisoned: self.ep,
                payload: self.payload,
            }),
            _ => None,
        }
    }
}

/// Copies the bytes of `chunk` from `src` (the whole DMA buffer) into `out` as the
/// DW-aligned MWr payload, zero-filling the bytes the byte enables leave out; returns the
/// payload length (`length_dw * 4`).
pub fn chunk_payload(chunk: &Chunk, src: &[u8], out: &mut [u8]) -> Result<usize> {
    let n = chunk.shape.length_dw as usize * 4;
    let lead = (chunk.addr & 3) as usize;
    let start = chunk.offset as usize;
    let end = start + chunk.len as usize;
    if out.len() < n || src.len() < end {
        return Err(Error::BufferTooSmall {
            needed: n.max(end),
            available: out.len().min(src.len()),
        });
    }
    out[..n].fill(0);
    out[lead..lead + chunk.len as usize].copy_from_slice(&src[start..end]);
    Ok(n)
}
