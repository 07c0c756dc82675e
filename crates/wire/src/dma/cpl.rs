//! Answering one memory read with completions, as the spec lets a completer split it.
//!
//! Rules (PCIe Base Specification, "Completion rules" and "Read Completion Boundary"):
//! * the data of one read may come in several completions, in address order;
//! * every completion but the last ends on a multiple of the RCB (64 or 128 bytes), so the
//!   first one may be short (it ends at the first RCB boundary after the start), and every
//!   later one starts RCB-aligned;
//! * no completion carries more than Max_Payload_Size bytes of payload (whole DWs);
//! * Byte Count = bytes still to be returned, including this completion's (4096 is
//!   encoded as 0); the first completion's Byte Count is what the request's Length and
//!   byte enables give ([`Shape::byte_count`](super::Shape::byte_count));
//! * Lower Address = low 7 bits of the address of the first byte this completion returns;
//!   for the first completion that is the first *enabled* byte (DW address + index of the
//!   lowest set First BE bit), for later ones the RCB-aligned start.
//!
//! ```text
//!  MRd 0x1054, 300 bytes, RCB 64, MPS 128
//!
//!     0x1054          0x10c0           0x1140     0x1180
//!  Maximal │   108 B     │     128 B      │   64 B   │
//!          BC 300 LA 0x54  BC 192 LA 0x40   BC 64 LA 0x40
//!          27 DW           32 DW            16 DW
//!  (the first completion ends at the last RCB multiple its MPS allows: 0x1040 + 128)
//!
//!  RcbChunks (one completion per 64-byte block)
//!          │ 44 │  64  │  64  │  64  │  64  │
//!             0x1080 0x10c0 0x1100 0x1140
//! ```
//!
//! A zero-length read is answered with one completion of 1 DW (content undefined),
//! Byte Count 1 and Lower Address bits \[1:0\] = 0.

use super::be::request_shape;
use super::reassembly::CplInfo;
use super::{check_rcb, check_size};
use crate::error::{Error, Result};
use crate::types::{Bdf, CplStatus, Tag};
use core::iter::FusedIterator;
use core::ops::Range;

/// How a completer cuts the data of one read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CplPolicy {
    /// As few completions as the rules allow: each as long as MPS allows, cut on an RCB
    /// boundary, the last one wherever the data ends.
    #[default]
    Maximal,
    /// One completion per RCB block (e.g. the 64-byte completions of many root complexes).
    RcbChunks,
}

/// One completion of a read: the header fields and where its data comes from.
///
/// ```
/// use pcielab_wire::dma::{completions, CplPolicy};
/// let v: Vec<_> = completions(0x1054, 300, 64, 128, CplPolicy::Maximal)?.collect();
/// let fields: Vec<(u16, u8, u16)> =
///     v.iter().map(|c| (c.byte_count, c.lower_address, c.length_dw)).collect();
/// assert_eq!(fields, [(300, 0x54, 27), (192, 0x40, 32), (64, 0x40, 16)]);
/// // Payload of the first completion: bytes 0..108 of the DW-aligned data at 0x1054.
/// assert_eq!(v[0].payload_range(), 0..108);
/// assert_eq!(v[1].payload_range(), 108..236);
/// # Ok::<(), pcielab_wire::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CplChunk {
    /// Address of the first byte this completion returns.
    pub addr: u64,
    /// Bytes this completion returns (0 only for a zero-length read).
    pub len: u32,
    /// Offset of the first returned byte from the start of the request.
    pub offset: u32,
    /// Byte Count, decoded (1..=4096): bytes left to return including these.
    pub byte_count: u16,
    /// Lower Address (7 bits).
    pub lower_address: u8,
    /// Length of the payload in DW (1..=1024).
    pub length_dw: u16,
    /// Offset of the first payload DW from the request's DW-aligned start address
    /// (`req_addr & !3`); a multiple of 4.
    pub dw_offset: u32,
}

impl CplChunk {
    /// The Byte Count field as encoded (4096 → 0).
    pub const fn byte_count_raw(&self) -> u16 {
        self.byte_count & 0xfff
    }

    /// Byte range of the payload within the request's DW-aligned data (the bytes from
    /// `req_addr & !3`). Its length is `length_dw * 4`.
    pub fn payload_range(&self) -> Range<usize> {
        let s = self.dw_offset as usize;
        s..s + self.length_dw as usize * 4
    }

    /// True for the last completion of the read (Byte Count covers only its own bytes).
    pub const fn is_last(&self) -> bool {
        self.byte_count as u32 <= self.len || self.len == 0
    }

    /// A successful-completion description for [`Reassembler::accept`](super::Reassembler::accept)
    /// carrying `payload` (which must be `length_dw * 4` bytes).
    pub fn info<'a>(
        &self,
        requester_id: Bdf,
        completer_id: Bdf,
        tag: Tag,
        payload: &'a [u8],
    ) -> CplInfo<'a> {
        CplInfo {
            requester_id,
            completer_id,
            tag,
            status: CplStatus::Sc,
            bcm: false,
            byte_count: self.byte_count,
            lower_address: self.lower_address,
            length_dw: self.length_dw,
            poisoned: false,
            payload,
        }
    }
}

/// Iterator over the completions of one read; see [`completions`].
#[derive(Debug, Clone)]
pub struct Completions {
    base: u64,
    /// Offset of the request's first byte within its 4 KiB page.
    page_off: u32,
    len: u32,
    pos: u32,
    rcb: u32,
    mps: u32,
    policy: CplPolicy,
    zero_length_pending: bool,
}

/// The completions with which a completer answers a memory read of `len` bytes at
/// `addr` (as [`split_read`](super::split_read) produced it), with Read Completion
/// Boundary `rcb` (64 or 128) and Max_Payload_Size `mps` (128..=4096).
///
/// `len` 0 stands for a zero-length read. Fails for an invalid RCB or MPS, for `len`
/// over 4096, and for a range that crosses a 4 KiB boundary (no valid read does).
/// Allocation-free.
///
/// ```
/// use pcielab_wire::dma::{completions, CplPolicy};
/// // 64-byte completions for a 256-byte read at an aligned address.
/// let bcs: Vec<u16> =
///     completions(0x4000, 256, 64, 256, CplPolicy::RcbChunks)?.map(|c| c.byte_count).collect();
/// assert_eq!(bcs, [256, 192, 128, 64]);
/// // A whole page in one completion with MPS 4096: Byte Count 4096, encoded 0.
/// let c = completions(0x4000, 4096, 128, 4096, CplPolicy::Maximal)?.next().unwrap();
/// assert_eq!((c.byte_count, c.byte_count_raw(), c.length_dw), (4096, 0, 1024));
/// # Ok::<(), pcielab_wire::Error>(())
/// ```
pub fn completions(
    addr: u64,
    len: u32,
    rcb: u32,
    mps: u32,
    policy: CplPolicy,
) -> Result<Completions> {
    let rcb = check_rcb(rcb)?;
    let mps = check_size("Max_Payload_Size", mps)?;
    if len > 0 {
        request_shape(addr, len)?;
    } else if addr & 3 != 0 {
        return Err(Error::Invalid {
            what: "zero-length read address",
            value: addr,
            allowed: "a DW-aligned address",
        });
    }
    Ok(Completions {
        base: addr,
        page_off: (addr & 0xfff) as u32,
        len,
        pos: 0,
        rcb,
        mps,
        policy,
        zero_length_pending: len == 0,
    })
}

impl Iterator for Completions {
    type Item = CplChunk;

    #[inline]
    fn next(&mut self) -> Option<CplChunk> {
        if self.zero_length_pending {
            self.zero_length_pending = false;
            return Some(CplChunk {
                addr: self.base,
                len: 0,
                offset: 0,
                byte_count: 1,
                lower_address: (self.base & 0x7c) as u8,
                length_dw: 1,
                dw_offset: 0,
            });
        }
        if self.pos >= self.len {
            return None;
        }
        // Work on offsets within the 4 KiB page: the request does not cross it.
        let s = self.page_off + self.pos;
        let end = self.page_off + self.len;
        let s_dw = s & !3;
        let block = s & !(self.rcb - 1);
        let e = match self.policy {
            CplPolicy::Maximal => {
                if end.next_multiple_of(4) - s_dw <= self.mps {
                    end
                } else {
                    block + self.mps
                }
            }
            CplPolicy::RcbChunks => end.min(block + self.rcb),
        };
        let n = e - s;
        let chunk = CplChunk {
            addr: self.base.wrapping_add(self.pos as u64),
            len: n,
            offset: self.pos,
            byte_count: (self.len - self.pos) as u16,
            lower_address: (s & 0x7f) as u8,
            length_dw: ((e.next_multiple_of(4) - s_dw) / 4) as u16,
            dw_offset: s_dw - (self.page_off & !3),
        };
        self.pos += n;
        Some(chunk)
    }
}

impl FusedIterator for Completions {}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(it: Completions) -> Vec<(u32, u16, u8, u16, u32)> {
        it.map(|c| {
            (
                c.len,
                c.byte_count,
                c.lower_address,
                c.length_dw,
                c.dw_offset,
            )
        })
        .collect()
    }

    #[test]
    fn by_hand_maximal() {
        // 0x1054 + 300 = 0x1180. RCB 64, MPS 128: the first may run to 0x1040 + 128,
        // later ones 128 bytes each from 0x10c0.
        assert_eq!(
            f(completions(0x1054, 300, 64, 128, CplPolicy::Maximal).unwrap()),
            [
                (108, 300, 0x54, 27, 0),
                (128, 192, 0x40, 32, 108),
                (64, 64, 0x40, 16, 236)
            ]
        );
        assert_eq!(
            f(completions(0x1054, 300, 64, 128, CplPolicy::RcbChunks).unwrap()),
            [
                (44, 300, 0x54, 11, 0),
                (64, 256, 0x00, 16, 44),
                (64, 192, 0x40, 16, 108),
                (64, 128, 0x00, 16, 172),
                (64, 64, 0x40, 16, 236)
            ]
        );
        // RCB 128: cut at 0x1080 (first), then 0x1100: 0x4c, 128, 96.
        assert_eq!(
            f(completions(0x1034, 300, 128, 128, CplPolicy::Maximal).unwrap()),
            [
                (76, 300, 0x34, 19, 0),
                (128, 224, 0x00, 32, 76),
                (96, 96, 0x00, 24, 204)
            ]
        );
        // Misaligned but the whole remainder fits in MPS by DWs: one completion.
        // 0x1006..0x1084 is DWs 0x1004..0x1084 = 128 bytes.
        assert_eq!(
            f(completions(0x1006, 0x7e, 64, 128, CplPolicy::Maximal).unwrap()),
            [(0x7e, 0x7e, 0x06, 32, 0)]
        );
        // One byte more needs 33 DWs: cut at the largest RCB multiple within
        // 0x1004 + 128 = 0x1084, which is 0x1080.
        assert_eq!(
            f(completions(0x1006, 0x7f, 64, 128, CplPolicy::Maximal).unwrap()),
            [(0x7a, 0x7f, 0x06, 31, 0), (5, 5, 0x00, 2, 0x7c)]
        );
    }

    #[test]
    fn by_hand_rcb_chunks() {
        assert_eq!(
            f(completions(0x2ffd, 3, 64, 512, CplPolicy::RcbChunks).unwrap()),
            [(3, 3, 0x7d, 1, 0)]
        );
        assert_eq!(
            f(completions(0x207f, 66, 64, 512, CplPolicy::RcbChunks).unwrap()),
            [
                (1, 66, 0x7f, 1, 0),
                (64, 65, 0x00, 16, 4),
                (1, 1, 0x40, 1, 68)
            ]
        );
    }

    #[test]
    fn zero_length_read() {
        assert_eq!(
            f(completions(0x1234, 0, 64, 128, CplPolicy::Maximal).unwrap()),
            [(0, 1, 0x34, 1, 0)]
        );
        assert!(completions(0x1235, 0, 64, 128, CplPolicy::Maximal).is_err());
    }

    #[test]
    fn rejects_bad_parameters() {
        assert!(completions(0, 4, 32, 128, CplPolicy::Maximal).is_err());
        assert!(completions(0, 4, 64, 64, CplPolicy::Maximal).is_err());
        assert!(completions(0, 4097, 64, 128, CplPolicy::Maximal).is_err());
        assert!(completions(0xff0, 17, 64, 128, CplPolicy::Maximal).is_err());
        assert!(completions(u64::MAX - 3, 4, 64, 128, CplPolicy::Maximal).is_ok());
    }

    #[test]
    fn helpers() {
        let c = completions(0x1000, 8, 64, 128, CplPolicy::Maximal)
            .unwrap()
            .next()
            .unwrap();
        assert!(c.is_last());
        assert_eq!(c.payload_range(), 0..8);
        assert_eq!(c.byte_count_raw(), 8);
        let id = Bdf::from_raw(0x0100);
        let info = c.info(id, Bdf::from_raw(0), Tag::new(3).unwrap(), &[0; 8]);
        assert_eq!(info.byte_count, 8);
        assert_eq!(info.status, CplStatus::Sc);
    }
}
