//! psmem: pseudo memory behind a BAR, like NetTLP's psmem. The one implementation,
//! hosted by the functional fabric, the timed simulator and the NetTLP runtime.

use crate::model::{Cx, DeviceModel, ReadReply};
use std::collections::BTreeMap;

const PAGE: u64 = 4096;

/// Where psmem's memory and optional I/O space sit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PsMemLayout {
    /// The memory BAR's number.
    pub mem_bar: u8,
    /// Bytes of memory (the BAR's size).
    pub size: u64,
    /// The I/O BAR's number and size (at most 256 bytes), if it has one.
    pub io: Option<(u8, u32)>,
}

/// An access outside psmem's memory or I/O space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfRange;

/// Pseudo memory: a memory BAR backed by sparse 4 KiB pages (bytes never written read
/// as 0) and an optional I/O BAR of up to 256 bytes (bytes past its end read as FFh).
///
/// ```
/// use pcielab_device::{PsMem, PsMemLayout};
/// let mut m = PsMem::new(PsMemLayout { mem_bar: 0, size: 1 << 20, io: None });
/// m.write(0, 4094, &[1, 2, 3, 4]).unwrap(); // across a page boundary
/// let mut b = [0u8; 6];
/// m.read(0, 4093, &mut b).unwrap();
/// assert_eq!(b, [0, 1, 2, 3, 4, 0]);
/// assert!(m.read(0, (1 << 20) - 2, &mut b).is_err()); // past the end
/// assert!(m.read(2, 0, &mut b).is_err());             // not its BAR
/// ```
///
/// With SR-IOV ([`PsMem::with_vfs`]) each VF is a psmem of its own (the VF layout),
/// created when the VF is first accessed: a call about function `i` > 0
/// ([`Cx::function`]) goes to VF `i - 1`.
#[derive(Debug, Clone)]
pub struct PsMem {
    layout: PsMemLayout,
    pages: BTreeMap<u64, Box<[u8; PAGE as usize]>>,
    io: Vec<u8>,
    vf_layout: Option<PsMemLayout>,
    vfs: Vec<PsMem>,
}

/// Pieces (page, offset in page, length) of `len` bytes at `offset`.
fn pieces(offset: u64, len: usize) -> impl Iterator<Item = (u64, usize, usize)> {
    let end = offset + len as u64;
    let mut at = offset;
    std::iter::from_fn(move || {
        (at < end).then(|| {
            let po = at % PAGE;
            let n = (PAGE - po).min(end - at);
            let piece = (at / PAGE, po as usize, n as usize);
            at += n;
            piece
        })
    })
}

impl PsMem {
    /// Zeroed memory with this layout.
    pub fn new(layout: PsMemLayout) -> PsMem {
        PsMem {
            layout,
            pages: BTreeMap::new(),
            io: vec![0; layout.io.map_or(0, |(_, n)| n.min(256) as usize)],
            vf_layout: None,
            vfs: Vec::new(),
        }
    }

    /// Zeroed memory with this layout, whose SR-IOV VFs each have memory laid out as
    /// `vf`.
    pub fn with_vfs(layout: PsMemLayout, vf: PsMemLayout) -> PsMem {
        PsMem {
            vf_layout: Some(vf),
            ..PsMem::new(layout)
        }
    }

    /// The psmem that function `index` of the device is: itself (0), or a VF's.
    /// `None` for a function it does not have.
    pub fn function(&mut self, index: u16) -> Option<&mut PsMem> {
        if index == 0 {
            return Some(self);
        }
        let vf = self.vf_layout?;
        let i = index as usize - 1;
        if i >= self.vfs.len() {
            self.vfs.resize_with(i + 1, || PsMem::new(vf));
        }
        self.vfs.get_mut(i)
    }

    /// The layout.
    pub fn layout(&self) -> PsMemLayout {
        self.layout
    }

    fn in_memory(&self, bar: u8, offset: u64, len: usize) -> bool {
        bar == self.layout.mem_bar
            && offset
                .checked_add(len as u64)
                .is_some_and(|end| end <= self.layout.size)
    }

    /// Reads `buf.len()` bytes at `offset` in BAR `bar`.
    pub fn read(&self, bar: u8, offset: u64, buf: &mut [u8]) -> Result<(), OutOfRange> {
        if !self.in_memory(bar, offset, buf.len()) {
            return Err(OutOfRange);
        }
        let mut done = 0;
        for (page, po, n) in pieces(offset, buf.len()) {
            match self.pages.get(&page) {
                Some(p) => buf[done..done + n].copy_from_slice(&p[po..po + n]),
                None => buf[done..done + n].fill(0),
            }
            done += n;
        }
        Ok(())
    }

    /// Writes `data` at `offset` in BAR `bar`.
    pub fn write(&mut self, bar: u8, offset: u64, data: &[u8]) -> Result<(), OutOfRange> {
        if !self.in_memory(bar, offset, data.len()) {
            return Err(OutOfRange);
        }
        let mut done = 0;
        for (page, po, n) in pieces(offset, data.len()) {
            let p = self
                .pages
                .entry(page)
                .or_insert_with(|| Box::new([0; PAGE as usize]));
            p[po..po + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
        Ok(())
    }

    /// Reads the I/O BAR `bar` (bytes past the I/O space read as FFh).
    pub fn io_read(&self, bar: u8, offset: u64, buf: &mut [u8]) -> Result<(), OutOfRange> {
        if self.layout.io.map(|(b, _)| b) != Some(bar) {
            return Err(OutOfRange);
        }
        for (i, b) in buf.iter_mut().enumerate() {
            *b = usize::try_from(offset)
                .ok()
                .and_then(|o| self.io.get(o + i))
                .copied()
                .unwrap_or(0xff);
        }
        Ok(())
    }

    /// Writes the I/O BAR `bar` (bytes past the I/O space are dropped).
    pub fn io_write(&mut self, bar: u8, offset: u64, data: &[u8]) -> Result<(), OutOfRange> {
        if self.layout.io.map(|(b, _)| b) != Some(bar) {
            return Err(OutOfRange);
        }
        for (i, &b) in data.iter().enumerate() {
            if let Some(slot) = usize::try_from(offset)
                .ok()
                .and_then(|o| self.io.get_mut(o + i))
            {
                *slot = b;
            }
        }
        Ok(())
    }

    /// Bytes of memory actually allocated (whole pages written to).
    pub fn resident(&self) -> u64 {
        self.pages.len() as u64 * PAGE
    }
}

fn reply(r: Option<Result<(), OutOfRange>>) -> ReadReply {
    match r {
        Some(Ok(())) => ReadReply::Now,
        _ => ReadReply::Unsupported,
    }
}

impl DeviceModel for PsMem {
    fn mem_read(&mut self, bar: u8, offset: u64, buf: &mut [u8], cx: &mut Cx<'_>) -> ReadReply {
        reply(
            self.function(cx.function())
                .map(|m| m.read(bar, offset, buf)),
        )
    }
    fn mem_write(&mut self, bar: u8, offset: u64, data: &[u8], cx: &mut Cx<'_>) {
        // A write outside the memory is dropped (posted: nobody to tell but a log).
        if let Some(m) = self.function(cx.function()) {
            let _ = m.write(bar, offset, data);
        }
    }
    fn io_read(&mut self, bar: u8, offset: u64, buf: &mut [u8], cx: &mut Cx<'_>) -> ReadReply {
        reply(
            self.function(cx.function())
                .map(|m| PsMem::io_read(m, bar, offset, buf)),
        )
    }
    fn io_write(&mut self, bar: u8, offset: u64, data: &[u8], cx: &mut Cx<'_>) -> ReadReply {
        reply(
            self.function(cx.function())
                .map(|m| PsMem::io_write(m, bar, offset, data)),
        )
    }
    fn reset(&mut self, _cx: &mut Cx<'_>) {
        // Memory contents survive a reset, like DRAM behind a reset controller.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn mem() -> PsMem {
        PsMem::new(PsMemLayout {
            mem_bar: 0,
            size: 64 << 10,
            io: Some((4, 16)),
        })
    }

    #[test]
    fn io_space() {
        let mut m = mem();
        m.io_write(4, 14, &[7, 8, 9]).unwrap(); // the third byte falls off the end
        let mut b = [0u8; 4];
        PsMem::io_read(&m, 4, 13, &mut b).unwrap();
        assert_eq!(b, [0, 7, 8, 0xff]);
        assert!(m.io_write(0, 0, &[1]).is_err());
        assert_eq!(m.resident(), 0);
    }

    proptest! {
        /// psmem behaves like a flat byte array of its size, for any writes and reads.
        #[test]
        fn like_a_flat_array(ops in proptest::collection::vec(
            (any::<bool>(), 0u64..(66 << 10), 0usize..9000, any::<u8>()), 1..60)) {
            let mut m = mem();
            let mut flat = vec![0u8; 64 << 10];
            for (write, off, len, v) in ops {
                let fits = off as usize + len <= flat.len();
                if write {
                    let data: Vec<u8> = (0..len).map(|i| v.wrapping_add(i as u8)).collect();
                    prop_assert_eq!(m.write(0, off, &data).is_ok(), fits);
                    if fits { flat[off as usize..off as usize + len].copy_from_slice(&data); }
                } else {
                    let mut b = vec![0xaa; len];
                    prop_assert_eq!(m.read(0, off, &mut b).is_ok(), fits);
                    if fits { prop_assert_eq!(&b[..], &flat[off as usize..off as usize + len]); }
                }
            }
        }
    }
}
