//! Data-link layer rules (PCIe Base Spec 3.6) as pieces that know nothing of the fabric:
//! the receiver's sequence check ([`RxSeq`]) and the transmitter's rule for what an
//! Ack or Nak releases from the replay buffer ([`acked`]).
//!
//! Sequence numbers are cumulative `u32` counters here (the wire's are 12 bits: the
//! simulator never lets a link run 2^31 TLPs ahead, so plain comparison is exact). A
//! unit may stand for several TLPs (a burst), taking as many sequence numbers.

/// What the receiver does with a TLP it got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RxVerdict {
    /// The next expected one: pass it to the transaction layer (and acknowledge it
    /// when the ACK timer runs).
    Accept,
    /// Already received (a replay): discard it and send Ack for the last good one.
    Duplicate {
        /// The sequence number to acknowledge.
        ack: u32,
    },
    /// A bad LCRC or a sequence number ahead of the expected one: discard it (a Bad
    /// TLP) and send a Nak, once until a good TLP arrives.
    Reject {
        /// The sequence number to Nak (the last good one), if a Nak is due.
        nak: Option<u32>,
    },
}

/// The receiver's sequence state: NEXT_RCV_SEQ and whether a Nak is outstanding.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RxSeq {
    next: u32,
    nak_sent: bool,
}

impl RxSeq {
    /// A TLP unit with sequence number `seq`, standing for `n` TLPs, arrived (`bad`:
    /// its LCRC failed).
    #[inline]
    pub fn receive(&mut self, seq: u32, bad: bool, n: u32) -> RxVerdict {
        if bad || seq > self.next {
            let nak = (!self.nak_sent).then(|| {
                self.nak_sent = true;
                self.last_good()
            });
            RxVerdict::Reject { nak }
        } else if seq < self.next {
            RxVerdict::Duplicate {
                ack: self.last_good(),
            }
        } else {
            self.next += n;
            self.nak_sent = false;
            RxVerdict::Accept
        }
    }

    /// The last sequence number received in order (what an Ack carries).
    #[inline]
    pub fn last_good(&self) -> u32 {
        self.next.wrapping_sub(1)
    }
}

/// Whether an Ack or Nak for sequence number `s` releases a replay-buffer entry that
/// starts at `first` and stands for `n` TLPs: all of its sequence numbers are at or
/// before `s`.
#[inline]
pub(crate) fn acked(first: u32, n: u32, s: u32) -> bool {
    first.wrapping_add(n) <= s.wrapping_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_tlps_are_accepted_and_acknowledged_by_the_last() {
        let mut rx = RxSeq::default();
        assert_eq!(rx.last_good(), u32::MAX, "nothing received: Ack of -1");
        assert_eq!(rx.receive(0, false, 1), RxVerdict::Accept);
        assert_eq!(rx.receive(1, false, 4), RxVerdict::Accept, "a burst of 4");
        assert_eq!(rx.last_good(), 4);
        assert_eq!(rx.receive(5, false, 1), RxVerdict::Accept);
    }

    #[test]
    fn a_bad_or_early_tlp_is_naked_once_until_a_good_one_arrives() {
        let mut rx = RxSeq::default();
        rx.receive(0, false, 1);
        assert_eq!(rx.receive(1, true, 1), RxVerdict::Reject { nak: Some(0) });
        // The TLPs sent behind it arrive ahead of the expected number: no second Nak.
        assert_eq!(rx.receive(2, false, 1), RxVerdict::Reject { nak: None });
        assert_eq!(rx.receive(3, false, 1), RxVerdict::Reject { nak: None });
        // The replay starts again from 1.
        assert_eq!(rx.receive(1, false, 1), RxVerdict::Accept);
        // A new error after that gets a new Nak.
        assert_eq!(rx.receive(2, true, 1), RxVerdict::Reject { nak: Some(1) });
    }

    #[test]
    fn a_replayed_tlp_already_received_is_a_duplicate() {
        let mut rx = RxSeq::default();
        for s in 0..3 {
            rx.receive(s, false, 1);
        }
        assert_eq!(rx.receive(1, false, 1), RxVerdict::Duplicate { ack: 2 });
        assert_eq!(rx.last_good(), 2, "a duplicate changes nothing");
        // A duplicate with a bad LCRC is bad first.
        assert_eq!(rx.receive(1, true, 1), RxVerdict::Reject { nak: Some(2) });
    }

    #[test]
    fn acks_release_whole_entries_only() {
        // An entry of one TLP at 5 is released by Ack 5 and later, not by Ack 4.
        assert!(acked(5, 1, 5));
        assert!(acked(5, 1, 9));
        assert!(!acked(5, 1, 4));
        // A burst of 4 at 8 (sequence numbers 8..=11) needs Ack 11.
        assert!(!acked(8, 4, 10));
        assert!(acked(8, 4, 11));
        // Ack of -1 (nothing received yet) releases nothing from 0.
        assert!(!acked(0, 1, u32::MAX));
    }
}
