//! Credit-based flow control of one link direction (PCIe Base Spec 2.6.1), as two
//! state machines that know nothing of the fabric, its events or its TLPs:
//!
//! - [`TxCredits`], the transmitter's gate: CREDIT_LIMIT (from the receiver's InitFC
//!   and UpdateFC DLLPs) against CREDITS_CONSUMED, per class (P, NP, Cpl), for headers
//!   and data; an InitFC advertising 0 makes that kind infinite;
//! - [`RxCredits`], the receiver's accounting: CREDITS_ALLOCATED (the buffer, plus what
//!   was freed) and CREDITS_RECEIVED.
//!
//! Counters are cumulative `u64`s. A DLLP carries the low 32 bits of a limit, which
//! [`widen`] turns back into the counter (wider than the spec's 8-bit header and
//! 12-bit data fields; the arithmetic is the same modular rule).

use super::event::widen;
use crate::params::BufferCredits;

/// The transmitter's side of flow control for the three classes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TxCredits {
    limit: [Credits; 3],
    consumed: [Credits; 3],
    /// Infinite (advertised as 0 in InitFC): `[header, data]` per class.
    inf: [[bool; 2]; 3],
}

impl TxCredits {
    /// Whether an entry of class `c` needing `hdrs` header credits (one per TLP it
    /// stands for, at least 1) and `data` data credits may be sent now.
    #[inline]
    pub fn can_send(&self, c: usize, hdrs: u64, data: u64) -> bool {
        let h_ok = self.inf[c][0] || self.consumed[c].hdr + hdrs <= self.limit[c].hdr;
        let d_ok = self.inf[c][1] || self.consumed[c].data + data <= self.limit[c].data;
        h_ok && d_ok
    }

    /// Header credits of class `c` left to send with (`u64::MAX` when infinite).
    #[inline]
    pub fn header_room(&self, c: usize) -> u64 {
        if self.inf[c][0] {
            return u64::MAX;
        }
        self.limit[c].hdr.saturating_sub(self.consumed[c].hdr)
    }

    /// Counts an entry as sent.
    #[inline]
    pub fn consume(&mut self, c: usize, hdrs: u64, data: u64) {
        self.consumed[c].hdr += hdrs;
        self.consumed[c].data += data;
    }

    /// The receiver advertised limits for class `c` (the low 32 bits of its
    /// cumulative counters): an InitFC (`init`, where 0 means infinite) or an UpdateFC.
    pub fn advertised(&mut self, c: usize, hdr: u32, data: u32, init: bool) {
        if init && hdr == 0 {
            self.inf[c][0] = true;
        }
        if init && data == 0 {
            self.inf[c][1] = true;
        }
        self.limit[c].hdr = widen(self.limit[c].hdr, hdr);
        self.limit[c].data = widen(self.limit[c].data, data);
    }
}

/// The receiver's side of flow control for the three classes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RxCredits {
    alloc: [Credits; 3],
    recv: [Credits; 3],
}

impl RxCredits {
    /// A receiver with `buf` (0 = infinite, which allocates nothing to advertise).
    pub fn new(buf: &BufferCredits) -> RxCredits {
        RxCredits {
            alloc: [0, 1, 2].map(|c| Credits {
                hdr: buf.hdr[c] as u64,
                data: buf.data[c] as u64,
            }),
            recv: Default::default(),
        }
    }

    /// A TLP entry of class `c` arrived: `hdrs` header and `data` data credits.
    #[inline]
    pub fn received(&mut self, c: usize, hdrs: u64, data: u64) {
        self.recv[c].hdr += hdrs;
        self.recv[c].data += data;
    }

    /// Credits of class `c` the transmitter still has: (headers, data).
    pub fn available(&self, c: usize) -> (u64, u64) {
        (
            self.alloc[c].hdr.saturating_sub(self.recv[c].hdr),
            self.alloc[c].data.saturating_sub(self.recv[c].data),
        )
    }

    /// The receiver's buffer freed `hdr` headers and `data` data credits of class `c`.
    pub fn release(&mut self, c: usize, hdr: u64, data: u64) {
        self.alloc[c].hdr += hdr;
        self.alloc[c].data += data;
    }

    /// What an UpdateFC for class `c` carries: the low 32 bits of CREDITS_ALLOCATED.
    pub fn limits(&self, c: usize) -> (u32, u32) {
        (self.alloc[c].hdr as u32, self.alloc[c].data as u32)
    }
}

/// Flow-control state of one class: (header, data) counters.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Credits {
    pub hdr: u64,
    pub data: u64,
}

impl BufferCredits {
    /// Infinite credits for every class.
    pub const INFINITE: BufferCredits = BufferCredits {
        hdr: [0; 3],
        data: [0; 3],
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: usize = 0;
    const CPL: usize = 2;

    #[test]
    fn nothing_is_sent_before_the_first_initfc() {
        let tx = TxCredits::default();
        assert!(!tx.can_send(P, 1, 0));
        assert!(!tx.can_send(CPL, 1, 1));
    }

    #[test]
    fn the_gate_opens_to_the_limit_and_not_beyond() {
        let mut tx = TxCredits::default();
        // 4 headers and 32 data credits (512 bytes) of posted buffer.
        tx.advertised(P, 4, 32, true);
        assert!(tx.can_send(P, 1, 16));
        tx.consume(P, 1, 16);
        assert!(tx.can_send(P, 1, 16));
        tx.consume(P, 1, 16);
        // Data exhausted, headers left: a header-only TLP still goes, one with data not.
        assert!(tx.can_send(P, 1, 0));
        assert!(!tx.can_send(P, 1, 1));
        tx.consume(P, 2, 0);
        assert!(!tx.can_send(P, 1, 0), "headers exhausted");
        // An entry of several TLPs (a burst) needs a header for each.
        tx.advertised(P, 7, 64, false);
        assert!(tx.can_send(P, 3, 32));
        assert!(!tx.can_send(P, 4, 0));
    }

    #[test]
    fn initfc_zero_means_infinite_but_updatefc_zero_does_not() {
        let mut tx = TxCredits::default();
        tx.advertised(CPL, 0, 0, true);
        assert!(tx.can_send(CPL, 1000, 1 << 30));
        let mut tx = TxCredits::default();
        tx.advertised(P, 0, 0, false);
        assert!(!tx.can_send(P, 1, 0));
        // Header infinite, data finite.
        let mut tx = TxCredits::default();
        tx.advertised(P, 0, 8, true);
        assert!(tx.can_send(P, 500, 8));
        assert!(!tx.can_send(P, 1, 9));
    }

    #[test]
    fn limits_wrap_in_their_field_and_stay_monotonic() {
        let mut tx = TxCredits::default();
        tx.advertised(P, u32::MAX - 1, u32::MAX - 1, true);
        tx.consume(P, u32::MAX as u64 - 2, 0);
        assert!(tx.can_send(P, 1, 0));
        assert!(!tx.can_send(P, 2, 0));
        // The counter passes 2^32: the DLLP carries 3, the limit becomes 2^32 + 3.
        tx.advertised(P, 3, 3, false);
        assert!(tx.can_send(P, 6, 0));
        assert!(!tx.can_send(P, 7, 0));
    }

    #[test]
    fn the_receiver_advertises_what_it_allocated() {
        let buf = BufferCredits {
            hdr: [8, 4, 0],
            data: [64, 0, 0],
        };
        let mut rx = RxCredits::new(&buf);
        assert_eq!(rx.limits(P), (8, 64));
        assert_eq!(rx.available(P), (8, 64));
        rx.received(P, 3, 48);
        assert_eq!(rx.available(P), (5, 16));
        rx.release(P, 2, 32);
        assert_eq!(rx.limits(P), (10, 96));
        assert_eq!(rx.available(P), (7, 48));
        // More received than allocated (a misbehaving transmitter) never underflows.
        rx.received(P, 100, 1000);
        assert_eq!(rx.available(P), (0, 0));
    }

    #[test]
    fn a_transmitter_and_a_receiver_agree_end_to_end() {
        // Receiver with 2 headers and 16 data credits; the transmitter learns them by
        // InitFC, sends until blocked, the receiver frees and sends UpdateFC.
        let buf = BufferCredits {
            hdr: [2, 2, 2],
            data: [16, 16, 16],
        };
        let mut rx = RxCredits::new(&buf);
        let mut tx = TxCredits::default();
        let (h, d) = rx.limits(P);
        tx.advertised(P, h, d, true);
        let mut sent = 0;
        while tx.can_send(P, 1, 8) {
            tx.consume(P, 1, 8);
            rx.received(P, 1, 8);
            sent += 1;
        }
        assert_eq!(sent, 2);
        for round in 0..1000 {
            rx.release(P, 1, 8);
            let (h, d) = rx.limits(P);
            tx.advertised(P, h, d, false);
            assert!(tx.can_send(P, 1, 8), "round {round}");
            tx.consume(P, 1, 8);
            rx.received(P, 1, 8);
            assert!(!tx.can_send(P, 1, 8), "round {round}");
        }
    }
}
