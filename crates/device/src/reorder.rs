//! A reorder window: completions that arrive out of order leave in order.

use std::collections::BTreeMap;

/// Why [`ReorderWindow::insert`] refused a piece of data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReorderError {
    /// The piece ends more than the window's depth past the in-order point: the
    /// device should not have asked for it yet (see [`ReorderWindow::room`]).
    Full {
        /// The piece's offset.
        offset: u64,
        /// Its length.
        len: u64,
        /// The in-order point.
        next: u64,
        /// The window's depth in bytes.
        depth: u64,
    },
    /// The piece overlaps data already released or already held.
    Overlap {
        /// The piece's offset.
        offset: u64,
        /// Its length.
        len: u64,
    },
}

impl std::fmt::Display for ReorderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReorderError::Full {
                offset,
                len,
                next,
                depth,
            } => write!(
                f,
                "{len} B at offset {offset} ends past the reorder window ({depth} B from {next})"
            ),
            ReorderError::Overlap { offset, len } => {
                write!(f, "{len} B at offset {offset} overlap data already there")
            }
        }
    }
}

impl std::error::Error for ReorderError {}

/// Holds data that arrived ahead of the in-order point (at most `depth` bytes past
/// it) and releases it in order, as a DMA engine's completion reorder buffer does.
/// A device asks for data only while [`ReorderWindow::room`] allows, so a full window
/// stalls its requests.
///
/// ```
/// use pcielab_device::ReorderWindow;
/// let mut w = ReorderWindow::new(1024);
/// w.insert(256, vec![2; 256]).unwrap(); // arrived first, but is second
/// assert!(w.pop().is_none());           // waits for offset 0
/// w.insert(0, vec![1; 256]).unwrap();
/// assert_eq!(w.pop(), Some((0, vec![1; 256])));
/// assert_eq!(w.pop(), Some((256, vec![2; 256])));
/// assert_eq!(w.next(), 512);
/// assert_eq!(w.room(512), 1024);
/// assert!(w.insert(1536, vec![0; 4]).is_err()); // past the window
/// ```
#[derive(Debug, Clone)]
pub struct ReorderWindow {
    depth: u64,
    next: u64,
    held: BTreeMap<u64, Vec<u8>>,
    held_bytes: u64,
    peak: u64,
}

impl ReorderWindow {
    /// A window of `depth` bytes starting at offset 0.
    pub fn new(depth: u64) -> ReorderWindow {
        ReorderWindow {
            depth,
            next: 0,
            held: BTreeMap::new(),
            held_bytes: 0,
            peak: 0,
        }
    }

    /// The window's depth in bytes.
    pub fn depth(&self) -> u64 {
        self.depth
    }

    /// The in-order point: every byte before it has been released.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// Bytes held out of order now.
    pub fn held(&self) -> u64 {
        self.held_bytes
    }

    /// The most bytes ever held at once.
    pub fn peak(&self) -> u64 {
        self.peak
    }

    /// How many bytes from `from` the device may ask for now without overrunning the
    /// window (0: the window is full; the device must wait for the in-order point to
    /// move).
    pub fn room(&self, from: u64) -> u64 {
        (self.next + self.depth).saturating_sub(from)
    }

    /// Takes `data`, which belongs at `offset`.
    pub fn insert(&mut self, offset: u64, data: Vec<u8>) -> Result<(), ReorderError> {
        let len = data.len() as u64;
        let end = offset + len;
        if end > self.next + self.depth {
            return Err(ReorderError::Full {
                offset,
                len,
                next: self.next,
                depth: self.depth,
            });
        }
        let before = self.held.range(..end).next_back();
        let overlaps = offset < self.next
            || before.is_some_and(|(&o, d)| o + d.len() as u64 > offset && o < end);
        if overlaps {
            return Err(ReorderError::Overlap { offset, len });
        }
        if len > 0 {
            self.held.insert(offset, data);
            self.held_bytes += len;
            self.peak = self.peak.max(self.held_bytes);
        }
        Ok(())
    }

    /// Releases the piece at the in-order point, if it is there.
    pub fn pop(&mut self) -> Option<(u64, Vec<u8>)> {
        let data = self.held.remove(&self.next)?;
        let at = self.next;
        self.next += data.len() as u64;
        self.held_bytes -= data.len() as u64;
        Some((at, data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn overlap_and_full() {
        let mut w = ReorderWindow::new(512);
        w.insert(128, vec![0; 128]).unwrap();
        assert!(matches!(
            w.insert(192, vec![0; 8]),
            Err(ReorderError::Overlap { .. })
        ));
        assert!(matches!(
            w.insert(100, vec![0; 40]),
            Err(ReorderError::Overlap { .. })
        ));
        let e = w.insert(500, vec![0; 13]).unwrap_err();
        assert!(e.to_string().contains("past the reorder window"), "{e}");
        assert_eq!(w.room(256), 256);
        w.insert(0, vec![0; 128]).unwrap();
        assert_eq!(w.pop().unwrap().0, 0);
        assert_eq!(w.pop().unwrap().0, 128);
        assert!(matches!(
            w.insert(0, vec![0; 8]),
            Err(ReorderError::Overlap { .. })
        ));
        assert_eq!(w.peak(), 256);
        assert_eq!(w.held(), 0);
    }

    proptest! {
        /// Pieces of a stream inserted in any order within the window come out as the
        /// stream, byte for byte, and the window never holds more than its depth.
        #[test]
        fn any_order_comes_out_in_order(
            sizes in proptest::collection::vec(1usize..300, 1..40),
            seed in any::<u64>(),
            depth in 300u64..4000,
        ) {
            let mut offs = Vec::new();
            let mut at = 0u64;
            for &s in &sizes {
                offs.push((at, s));
                at += s as u64;
            }
            let total = at;
            let byte = |i: u64| (i.wrapping_mul(31) ^ (i >> 8)) as u8;
            let mut w = ReorderWindow::new(depth);
            let mut pending: Vec<(u64, usize)> = Vec::new();
            let mut out = Vec::new();
            let mut rng = seed | 1;
            let mut issued = 0;
            while out.len() < total as usize {
                // Issue what the window has room for, then deliver a random one.
                while issued < offs.len() {
                    let (o, s) = offs[issued];
                    if w.room(o) < s as u64 { break; }
                    pending.push((o, s));
                    issued += 1;
                }
                prop_assert!(!pending.is_empty());
                rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
                let (o, s) = pending.swap_remove((rng % pending.len() as u64) as usize);
                w.insert(o, (o..o + s as u64).map(byte).collect()).unwrap();
                prop_assert!(w.held() <= depth);
                while let Some((at, d)) = w.pop() {
                    prop_assert_eq!(at, out.len() as u64);
                    out.extend(d);
                }
            }
            prop_assert!(out.iter().enumerate().all(|(i, &b)| b == byte(i as u64)));
        }
    }
}
