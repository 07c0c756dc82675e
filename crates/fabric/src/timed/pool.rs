//! The pool of TLPs in flight: their records and payload buffers, both reused, so that
//! a simulation in its steady state allocates nothing per TLP.
//!
//! ```text
//!   alloc(t) ──► id (a free record, or a new one)      refs: holders of the TLP
//!   alloc_payload(bytes) / adopt_payload(vec) ──► the buffer index for Tlp::data
//!   release(id) ──► refs − 1; at 0 the record and its buffer are free again, and a
//!                   host page lent to it (Tlp::lent) is handed back to the caller
//! ```
//!
//! A TLP whose payload became a host-memory page (a DMA write the root complex took
//! without copying) keeps the page's address in `Tlp::lent`; the pool does not own host
//! memory, so `release` returns that page and the caller ends the loan.

use super::tlp::{Detail, Tlp, NONE, NOT_LENT};

/// The holder count at which a record is pinned (see [`TlpPool::hold`]).
pub(crate) const PINNED: u8 = u8::MAX;

/// Most spare DMA buffers the pool keeps (for `EpCx::buffer` and DMA reads).
const SPARE_BUFFERS: usize = 64;
/// The largest spare buffer kept (bytes of capacity).
const SPARE_MAX: usize = 64 * 1024;

/// TLP records and payload buffers, by index.
#[derive(Debug, Default)]
pub(crate) struct TlpPool {
    /// The records (free ones included).
    pub tlps: Vec<Tlp>,
    free_tlps: Vec<u32>,
    /// The payload buffers (free ones included).
    pub payloads: Vec<Vec<u8>>,
    free_payloads: Vec<u32>,
    /// Buffers of written DMAs' payloads and of finished DMA reads, for
    /// `EpCx::buffer` and new DMA reads (at most `SPARE_BUFFERS`, each at most
    /// `SPARE_MAX`).
    pub spare_bufs: Vec<Vec<u8>>,
    /// The piece lists of scatter bursts (`Detail::Scatter`): each piece's address and
    /// tag (free ones included).
    pub scatter: Vec<Vec<(u64, u16)>>,
    free_scatter: Vec<u32>,
}

/// Stores `item` in `items`, in a free slot (an index from `free`) when there is one,
/// else at the end; returns its index. The slot tables of the engine (TLP records,
/// DMA ops, scatter-gather DMAs, frames on cables) reuse slots this way.
#[inline(always)]
pub(crate) fn put_in_slot<T>(items: &mut Vec<T>, free: &mut Vec<u32>, item: T) -> u32 {
    match free.pop() {
        Some(i) => {
            items[i as usize] = item;
            i
        }
        None => {
            items.push(item);
            (items.len() - 1) as u32
        }
    }
}

impl TlpPool {
    /// A copy of `bytes` in a payload buffer; returns its index.
    #[inline]
    pub fn alloc_payload(&mut self, bytes: &[u8]) -> u32 {
        match self.free_payloads.pop() {
            Some(i) => {
                let b = &mut self.payloads[i as usize];
                b.clear();
                b.extend_from_slice(bytes);
                i
            }
            None => {
                self.payloads.push(bytes.to_vec());
                (self.payloads.len() - 1) as u32
            }
        }
    }

    /// Takes `bytes` as a payload without copying them (the slot's previous buffer
    /// is kept as a spare).
    #[inline]
    pub fn adopt_payload(&mut self, bytes: Vec<u8>) -> u32 {
        match self.free_payloads.pop() {
            Some(i) => {
                let old = std::mem::replace(&mut self.payloads[i as usize], bytes);
                self.keep_spare(old);
                i
            }
            None => {
                self.payloads.push(bytes);
                (self.payloads.len() - 1) as u32
            }
        }
    }

    /// An empty spare buffer (a new one when there is none).
    #[inline]
    fn spare(&mut self) -> Vec<u8> {
        let mut buf = self.spare_bufs.pop().unwrap_or_default();
        buf.clear();
        buf
    }

    /// `len` zero bytes, in a spare buffer when there is one (a DMA read's buffer,
    /// which [`keep_spare`](Self::keep_spare) takes back once the device has seen it).
    #[inline]
    pub fn zeroed_buffer(&mut self, len: usize) -> Vec<u8> {
        let mut buf = self.spare();
        buf.resize(len, 0);
        buf
    }

    /// A copy of `data` in a spare buffer (one allocated when there is none).
    pub fn spare_copy(&mut self, data: &[u8]) -> Vec<u8> {
        let mut buf = self.spare();
        buf.extend_from_slice(data);
        buf
    }

    /// Keeps `buf` as a spare buffer (for `EpCx::buffer` and DMA reads) unless there
    /// are enough, it has no allocation, or it is larger than `SPARE_MAX` (a large
    /// DMA's buffer is not held on to).
    #[inline]
    pub fn keep_spare(&mut self, buf: Vec<u8>) {
        if self.spare_bufs.len() < SPARE_BUFFERS && (1..=SPARE_MAX).contains(&buf.capacity()) {
            self.spare_bufs.push(buf);
        }
    }

    /// Frees payload buffer `p` (one no TLP holds).
    #[inline]
    pub fn free_payload(&mut self, p: u32) {
        self.free_payloads.push(p);
    }

    /// An empty piece list for a scatter burst (a free one reused); returns its index
    /// for `Detail::Scatter`. The record that takes it frees it with itself.
    #[inline]
    pub fn alloc_scatter(&mut self) -> u32 {
        match self.free_scatter.pop() {
            Some(i) => {
                self.scatter[i as usize].clear();
                i
            }
            None => {
                self.scatter.push(Vec::new());
                (self.scatter.len() - 1) as u32
            }
        }
    }

    /// Frees piece list `i` (its record went, or its TLP was not routable).
    #[cold]
    #[inline(never)]
    pub fn free_scatter(&mut self, i: u32) {
        self.free_scatter.push(i);
    }

    /// Stores TLP `t`; returns its id.
    #[inline(always)]
    pub fn alloc(&mut self, t: Tlp) -> u32 {
        put_in_slot(&mut self.tlps, &mut self.free_tlps, t)
    }

    /// One more holder of TLP `id` (a wire copy, the replay buffer). The count sticks
    /// at its largest value ([`PINNED`]): a record held that many times at once (a
    /// replay storm on a link far longer than its replay timer allows) is then never
    /// freed, so that no copy still on a wire can ever point to a record reused by
    /// another TLP.
    #[inline]
    pub fn hold(&mut self, id: u32) {
        let t = &mut self.tlps[id as usize];
        t.refs = t.refs.saturating_add(1);
    }

    /// Drops one holder of TLP `id`. When it was the last, the record and its payload
    /// buffer are free again, and the host page lent to it, if any, is returned for
    /// the caller to take back. A pinned record (see [`TlpPool::hold`]) stays.
    #[inline(always)]
    #[must_use = "a lent host page must be handed back"]
    pub fn release(&mut self, id: u32) -> Option<u64> {
        let t = &mut self.tlps[id as usize];
        if t.refs == PINNED {
            return None;
        }
        t.refs = t.refs.saturating_sub(1);
        if t.refs != 0 {
            return None;
        }
        let lent = (t.lent != NOT_LENT).then(|| std::mem::replace(&mut t.lent, NOT_LENT));
        if t.data != NONE {
            self.free_payloads.push(t.data);
            t.data = NONE;
        }
        if let Detail::Scatter(sc) = t.detail {
            t.detail = Detail::None;
            self.free_scatter(sc);
        }
        self.free_tlps.push(id);
        lent
    }

    /// The payload buffer of TLP `id` (empty without one; a lent payload lives in host
    /// memory, not here).
    #[inline]
    pub fn own_payload(&self, id: u32) -> &[u8] {
        match self.tlps[id as usize].data {
            NONE => &[],
            d => &self.payloads[d as usize],
        }
    }

    /// TLP records in use (negative only if a record was freed twice, a bug).
    pub fn in_flight(&self) -> i64 {
        self.tlps.len() as i64 - self.free_tlps.len() as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timed::tlp::Kind;
    use pcielab_wire::Bdf;

    fn write(len: u32) -> Tlp {
        Tlp {
            refs: 1,
            ..Tlp::new(Kind::MWr, Bdf::new(1, 0, 0).unwrap(), 0x1000, len)
        }
    }

    #[test]
    fn a_record_held_too_often_is_pinned_never_freed_under_its_copies() {
        let mut p = TlpPool::default();
        let a = p.alloc(write(0));
        // Held 300 times more (copies of a replay storm): the count sticks at PINNED.
        for _ in 0..300 {
            p.hold(a);
        }
        assert_eq!(p.tlps[a as usize].refs, PINNED);
        // Released by every holder (more than the count can say): never freed, so a
        // new record never takes its place while copies may still be on a wire.
        for _ in 0..400 {
            assert_eq!(p.release(a), None);
        }
        assert_eq!(p.in_flight(), 1);
        assert_ne!(p.alloc(write(0)), a);
        // Below the limit, holders are counted exactly.
        let b = p.alloc(write(0));
        for _ in 0..253 {
            p.hold(b);
        }
        for _ in 0..253 {
            let _ = p.release(b);
        }
        assert_eq!(p.in_flight(), 3);
        let _ = p.release(b);
        assert_eq!(p.in_flight(), 2);
    }

    #[test]
    fn records_and_buffers_are_reused_once_released() {
        let mut p = TlpPool::default();
        let d = p.alloc_payload(&[1, 2, 3, 4]);
        let a = p.alloc(Tlp {
            data: d,
            ..write(4)
        });
        let b = p.alloc(write(0));
        assert_eq!((a, b, p.in_flight()), (0, 1, 2));
        assert_eq!(p.own_payload(a), [1, 2, 3, 4]);
        assert_eq!(p.own_payload(b), [] as [u8; 0]);
        assert_eq!(p.release(a), None);
        assert_eq!(p.in_flight(), 1);
        // The freed record and buffer come back, the buffer with the new bytes only.
        let d2 = p.alloc_payload(&[9]);
        assert_eq!(d2, d);
        let c = p.alloc(Tlp {
            data: d2,
            ..write(1)
        });
        assert_eq!(c, a);
        assert_eq!(p.own_payload(c), [9]);
        assert_eq!((p.tlps.len(), p.payloads.len()), (2, 1));
    }

    #[test]
    fn a_record_is_freed_by_its_last_holder_and_hands_back_its_lent_page() {
        let mut p = TlpPool::default();
        let a = p.alloc(Tlp {
            refs: 2,
            lent: 0x7000,
            ..write(64)
        });
        assert_eq!(p.release(a), None, "one holder is left");
        assert_eq!(p.in_flight(), 1);
        assert_eq!(p.release(a), Some(0x7000));
        assert_eq!(p.in_flight(), 0);
        assert_eq!(p.tlps[a as usize].lent, NOT_LENT);
    }

    #[test]
    fn adopted_buffers_keep_the_old_one_as_a_spare() {
        let mut p = TlpPool::default();
        let d = p.alloc_payload(&[0; 64]);
        p.free_payload(d);
        let d2 = p.adopt_payload(vec![5; 8]);
        assert_eq!(d2, d);
        assert_eq!(p.payloads[d as usize], [5; 8]);
        assert_eq!(p.spare_bufs.len(), 1);
        assert!(p.spare_bufs[0].capacity() >= 64);
        // At most SPARE_BUFFERS spares are kept.
        for _ in 0..2 * SPARE_BUFFERS {
            let i = p.alloc_payload(&[1]);
            p.free_payload(i);
            p.adopt_payload(vec![2]);
        }
        assert_eq!(p.spare_bufs.len(), SPARE_BUFFERS);
    }

    #[test]
    fn a_zeroed_buffer_reuses_a_spare_and_holds_only_zeros() {
        let mut p = TlpPool::default();
        p.keep_spare(vec![7; 100]);
        let b = p.zeroed_buffer(40);
        assert_eq!(b, [0; 40]);
        assert!(b.capacity() >= 100, "the spare was reused");
        assert!(p.spare_bufs.is_empty());
        assert_eq!(p.zeroed_buffer(3), [0; 3]);
    }

    #[test]
    fn spares_are_bounded_in_size_and_number() {
        let mut p = TlpPool::default();
        p.keep_spare(Vec::new());
        p.keep_spare(Vec::with_capacity(SPARE_MAX + 1));
        assert!(p.spare_bufs.is_empty(), "no allocation, or too large");
        for _ in 0..SPARE_BUFFERS + 3 {
            p.keep_spare(vec![0; 64]);
        }
        assert_eq!(p.spare_bufs.len(), SPARE_BUFFERS);
    }
}
