//! Splitting a DMA into memory requests (MRds by MRRS, MWrs by MPS, never across 4 KiB).
//!
//! The size limit applies to the Length field (whole DWs), not to the byte count, so a
//! misaligned start takes bytes away from the first request. Two cut policies:
//!
//! ```text
//!  read of 600 bytes from 0x0f0, MRRS 256
//!
//!  Aligned: cut at multiples of MRRS (as DMA engines do, so every request but
//!           the first starts MRRS-aligned; 4 KiB boundaries are MRRS multiples)
//!    0x0f0 ─┤0x100        ├0x200        ├0x300 ─┤0x348
//!           │ 16 B │ 256 B        │ 256 B       │ 72 B │
//!
//!  Naive:   each request as long as MRRS (in DWs) and the 4 KiB boundary allow
//!    0x0f0 ──────────────┤0x1f0 ───────────┤0x2f0 ─┤0x348
//!           │ 256 B              │ 256 B          │ 88 B │
//! ```
//!
//! Both policies produce requests that obey every rule; `Aligned` is the default because
//! it keeps completions on RCB boundaries and memory accesses on cache-line boundaries.

use super::be::{shape_of, Shape};
use super::check_size;
use crate::error::{Error, Result};
use core::iter::FusedIterator;

/// Where a splitter cuts a DMA into requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SplitPolicy {
    /// Cut at every multiple of the size limit: the first request runs up to the first
    /// aligned address, every later one starts aligned (what real DMA engines do).
    #[default]
    Aligned,
    /// Make each request as long as the size limit (counted in DWs) and the next 4 KiB
    /// boundary allow, whatever the alignment.
    Naive,
}

/// One memory request of a split DMA.
///
/// ```
/// use pcielab_wire::dma::{split_write, SplitPolicy};
/// let mut it = split_write(0x1001, 300, 128, SplitPolicy::Aligned)?;
/// let c = it.next().unwrap();
/// assert_eq!((c.addr, c.len, c.offset), (0x1001, 127, 0));
/// assert_eq!((c.shape.length_dw, c.shape.first_be.bits(), c.shape.last_be.bits()), (32, 0xe, 0xf));
/// # Ok::<(), pcielab_wire::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Chunk {
    /// Address of the first byte of this request.
    pub addr: u64,
    /// Bytes moved by this request (1..=4096).
    pub len: u32,
    /// Offset of the first byte in the DMA's buffer (`addr - dma_start`).
    pub offset: u64,
    /// Length and byte enables for the header.
    pub shape: Shape,
}

/// Iterator over the requests of a DMA; see [`split_read`] and [`split_write`].
#[derive(Debug, Clone)]
pub struct Split {
    addr: u64,
    remaining: u64,
    offset: u64,
    max: u32,
    policy: SplitPolicy,
}

/// Splits a DMA read of `len` bytes from `addr` into MRds of at most `mrrs` bytes of
/// Length (Max_Read_Request_Size: 128, 256, … 4096), none crossing a 4 KiB boundary.
///
/// `len` 0 gives no request (use [`Shape::zero_length`] to build a zero-length read).
/// Fails for an invalid MRRS or when the range runs past the end of the 64-bit address
/// space. Allocation-free.
///
/// ```
/// use pcielab_wire::dma::{split_read, SplitPolicy};
/// let cuts: Vec<(u64, u32)> = split_read(0x0f0, 600, 256, SplitPolicy::Aligned)?
///     .map(|c| (c.addr, c.len))
///     .collect();
/// assert_eq!(cuts, [(0x0f0, 16), (0x100, 256), (0x200, 256), (0x300, 72)]);
/// let cuts: Vec<(u64, u32)> = split_read(0x0f0, 600, 256, SplitPolicy::Naive)?
///     .map(|c| (c.addr, c.len))
///     .collect();
/// assert_eq!(cuts, [(0x0f0, 256), (0x1f0, 256), (0x2f0, 88)]);
/// # Ok::<(), pcielab_wire::Error>(())
/// ```
pub fn split_read(addr: u64, len: u64, mrrs: u32, policy: SplitPolicy) -> Result<Split> {
    Split::new(
        addr,
        len,
        check_size("Max_Read_Request_Size", mrrs)?,
        policy,
    )
}

/// Splits a DMA write of `len` bytes to `addr` into MWrs whose payload (Length in DWs)
/// is at most `mps` bytes (Max_Payload_Size: 128, 256, … 4096), none crossing a 4 KiB
/// boundary. Same policies and errors as [`split_read`].
///
/// ```
/// use pcielab_wire::dma::{split_write, SplitPolicy};
/// // A misaligned 128-byte write needs 33 DWs, more than MPS 128 allows in one MWr.
/// let lens: Vec<u32> = split_write(0x2, 128, 128, SplitPolicy::Naive)?.map(|c| c.len).collect();
/// assert_eq!(lens, [126, 2]);
/// # Ok::<(), pcielab_wire::Error>(())
/// ```
pub fn split_write(addr: u64, len: u64, mps: u32, policy: SplitPolicy) -> Result<Split> {
    Split::new(addr, len, check_size("Max_Payload_Size", mps)?, policy)
}

impl Split {
    fn new(addr: u64, len: u64, max: u32, policy: SplitPolicy) -> Result<Split> {
        if len > 0 && addr.checked_add(len - 1).is_none() {
            return Err(Error::Invalid {
                what: "DMA address (address + length runs past 2^64)",
                value: addr,
                allowed: "address + length <= 2^64",
            });
        }
        Ok(Split {
            addr,
            remaining: len,
            offset: 0,
            max,
            policy,
        })
    }

    /// Bytes not yet handed out.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// Skips the next `bytes` bytes (at most what remains) without building their
    /// requests. When they end on a request boundary (whole requests, as in the
    /// example) the requests that follow are the ones iterating would have given.
    ///
    /// ```
    /// use pcielab_wire::dma::{split_write, SplitPolicy};
    /// let mut s = split_write(0x1000, 1024, 256, SplitPolicy::Aligned)?;
    /// s.next();
    /// s.skip_bytes(512); // the second and third MWr
    /// let c = s.next().unwrap();
    /// assert_eq!((c.addr, c.len, c.offset), (0x1300, 256, 768));
    /// assert_eq!(s.next(), None);
    /// # Ok::<(), pcielab_wire::Error>(())
    /// ```
    pub fn skip_bytes(&mut self, bytes: u64) {
        let n = bytes.min(self.remaining);
        self.addr = self.addr.wrapping_add(n);
        self.offset += n;
        self.remaining -= n;
    }
}

impl Iterator for Split {
    type Item = Chunk;

    #[inline]
    fn next(&mut self) -> Option<Chunk> {
        if self.remaining == 0 {
            return None;
        }
        let max = self.max as u64;
        let room = match self.policy {
            SplitPolicy::Aligned => max - (self.addr & (max - 1)),
            SplitPolicy::Naive => {
                let by_size = max - (self.addr & 3);
                let by_page = super::PAGE - (self.addr & (super::PAGE - 1));
                by_size.min(by_page)
            }
        };
        let n = room.min(self.remaining) as u32;
        let chunk = Chunk {
            addr: self.addr,
            len: n,
            offset: self.offset,
            shape: shape_of(self.addr, n),
        };
        self.addr = self.addr.wrapping_add(n as u64);
        self.offset += n as u64;
        self.remaining -= n as u64;
        Some(chunk)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        // At least remaining/max requests; the aligned policy and the naive one each add
        // at most one short request at the start and one per page.
        let lo = self.remaining.div_ceil(self.max as u64);
        let hi = lo + 1 + self.remaining / super::PAGE + 1;
        (
            usize::try_from(lo).unwrap_or(usize::MAX),
            usize::try_from(hi).ok(),
        )
    }
}

impl FusedIterator for Split {}

#[cfg(test)]
mod tests {
    use super::*;

    fn cuts(it: Split) -> Vec<(u64, u32, u64)> {
        it.map(|c| (c.addr, c.len, c.offset)).collect()
    }

    #[test]
    fn skipping_whole_requests_leaves_the_same_rest() {
        for (addr, len, max) in [
            (0x0u64, 8192u64, 256u32),
            (0xf80, 5000, 128),
            (0x10, 4096, 512),
        ] {
            for policy in [SplitPolicy::Aligned, SplitPolicy::Naive] {
                let all = cuts(split_write(addr, len, max, policy).unwrap());
                for k in 0..all.len() {
                    let mut s = split_write(addr, len, max, policy).unwrap();
                    let skipped: u64 = all[..k].iter().map(|c| c.1 as u64).sum();
                    s.skip_bytes(skipped);
                    assert_eq!(
                        cuts(s),
                        all[k..],
                        "{addr:#x} {len} {max} {policy:?} skip {k}"
                    );
                }
            }
        }
    }

    #[test]
    fn aligned_cuts_by_hand() {
        assert_eq!(
            cuts(split_read(0x0, 512, 128, SplitPolicy::Aligned).unwrap()),
            [
                (0x0, 128, 0),
                (0x80, 128, 128),
                (0x100, 128, 256),
                (0x180, 128, 384)
            ]
        );
        assert_eq!(
            cuts(split_read(0xfff, 2, 4096, SplitPolicy::Aligned).unwrap()),
            [(0xfff, 1, 0), (0x1000, 1, 1)]
        );
        assert_eq!(
            cuts(split_read(0x7f, 130, 128, SplitPolicy::Aligned).unwrap()),
            [(0x7f, 1, 0), (0x80, 128, 1), (0x100, 1, 129)]
        );
    }

    #[test]
    fn naive_cuts_by_hand() {
        // 4 KiB boundary cuts a naive request short.
        assert_eq!(
            cuts(split_read(0xf80, 512, 512, SplitPolicy::Naive).unwrap()),
            [(0xf80, 128, 0), (0x1000, 384, 128)]
        );
        // Misalignment eats into the DW budget: 0x3 + 128 bytes = 33 DWs > 32.
        assert_eq!(
            cuts(split_read(0x3, 300, 128, SplitPolicy::Naive).unwrap()),
            [(0x3, 125, 0), (0x80, 128, 125), (0x100, 47, 253)]
        );
    }

    #[test]
    fn empty_and_edges() {
        assert_eq!(
            split_read(0x10, 0, 128, SplitPolicy::Aligned)
                .unwrap()
                .next(),
            None
        );
        // The very last page of the address space.
        let v = cuts(split_read(u64::MAX - 4095, 4096, 4096, SplitPolicy::Naive).unwrap());
        assert_eq!(v, [(u64::MAX - 4095, 4096, 0)]);
        assert!(split_read(u64::MAX - 4095, 4097, 4096, SplitPolicy::Naive).is_err());
        assert!(split_read(0, 10, 100, SplitPolicy::Naive).is_err());
        assert!(split_write(0, 10, 8192, SplitPolicy::Naive).is_err());
        assert!(matches!(
            split_write(0, 10, 64, SplitPolicy::Naive),
            Err(Error::Invalid {
                what: "Max_Payload_Size",
                value: 64,
                ..
            })
        ));
    }

    #[test]
    fn large_dma_counts() {
        // 1 MiB aligned at 4 KiB with MRRS 512: exactly 2048 requests of 512 bytes.
        let v: Vec<Chunk> = split_read(0x10_0000, 1 << 20, 512, SplitPolicy::Aligned)
            .unwrap()
            .collect();
        assert_eq!(v.len(), 2048);
        assert!(v.iter().all(|c| c.len == 512 && c.shape.length_dw == 128));
        let it = split_read(0x10_0001, 1 << 20, 512, SplitPolicy::Aligned).unwrap();
        let (lo, hi) = it.size_hint();
        let n = it.count();
        assert_eq!(n, 2049);
        assert!(lo <= n && n <= hi.unwrap());
    }
}
