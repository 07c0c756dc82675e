//! Data-link layer rules (PCIe Base Spec 3.6) as pieces that know nothing of the fabric:
//! the receiver's sequence check ([`RxSeq`]), the transmitter's replay buffer and
//! replay timer ([`TxReplay`]: room, entries, the replay cursor, REPLAY_NUM and its
//! rollover, the timer's deadline) and its rule for what an Ack or Nak releases
//! ([`acked`]).
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

use pcielab_sim::{SimDuration, SimTime};
use std::collections::VecDeque;

/// The transmitter's replay buffer and replay timer. Entries are `(first sequence
/// number, TLP id)`; an entry may stand for several TLPs (a burst), and the buffer's
/// capacity counts TLPs. The timer is a deadline; the caller keeps at most one timer
/// event pending (see [`TxReplay::arm`]).
#[derive(Debug, Clone)]
pub(crate) struct TxReplay {
    /// NEXT_TRANSMIT_SEQ.
    pub next_seq: u32,
    entries: VecDeque<(u32, u32)>,
    held: usize,
    cap: usize,
    /// The entry a replay in progress sends next.
    pos: Option<usize>,
    /// REPLAY_NUM.
    num: u8,
    /// The replay timeout.
    timeout: SimDuration,
    /// When the replay timer expires (None: not running).
    pub deadline: Option<SimTime>,
    /// A timer event is pending (it re-arms itself if the deadline moved).
    pub armed: bool,
}

impl TxReplay {
    /// An empty buffer for `cap` TLPs with replay timeout `timeout`.
    pub fn new(cap: usize, timeout: SimDuration) -> TxReplay {
        TxReplay {
            next_seq: 0,
            entries: VecDeque::new(),
            held: 0,
            cap,
            pos: None,
            num: 0,
            timeout,
            deadline: None,
            armed: false,
        }
    }

    /// Sets the replay timeout (ASPM adds the exit latency to it).
    pub fn set_timeout(&mut self, timeout: SimDuration) {
        self.timeout = timeout;
    }

    /// The capacity in TLPs.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// True if `n` more TLPs fit.
    #[inline]
    pub fn has_room(&self, n: usize) -> bool {
        self.held + n <= self.cap
    }

    /// True if nothing awaits acknowledgement.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The oldest entry.
    #[inline]
    pub fn front(&self) -> Option<(u32, u32)> {
        self.entries.front().copied()
    }

    /// Sends entry `id` of `n` TLPs: it takes the next `n` sequence numbers (the
    /// first is returned) and stays until acknowledged.
    #[inline]
    pub fn push(&mut self, id: u32, n: u32) -> u32 {
        let seq = self.next_seq;
        self.next_seq += n;
        self.entries.push_back((seq, id));
        self.held += n as usize;
        seq
    }

    /// Removes the oldest entry (acknowledged), of `n` TLPs.
    #[inline]
    pub fn pop(&mut self, n: u32) {
        self.entries.pop_front();
        self.held -= n as usize;
    }

    /// After an Ack or Nak released `popped` entries: REPLAY_NUM resets and a replay
    /// in progress skips them. True if entries were released.
    pub fn released(&mut self, popped: usize) -> bool {
        if popped == 0 {
            return false;
        }
        self.num = 0;
        if let Some(p) = self.pos {
            self.pos = p.checked_sub(popped).or(Some(0));
            if self.entries.is_empty() {
                self.pos = None;
            }
        }
        true
    }

    /// A replay starts (a Nak, or the timer expired): from the oldest entry. True if
    /// REPLAY_NUM rolled over (the fourth replay in a row without progress): the
    /// link retrains.
    pub fn start(&mut self) -> bool {
        self.pos = Some(0);
        self.num += 1;
        if self.num >= 4 {
            self.num = 0;
            return true;
        }
        false
    }

    /// The next entry a replay in progress sends, if one is.
    #[inline]
    pub fn next_replay(&mut self) -> Option<(u32, u32)> {
        let pos = self.pos?;
        match self.entries.get(pos).copied() {
            Some(e) => {
                self.pos = (pos + 1 < self.entries.len()).then_some(pos + 1);
                Some(e)
            }
            None => {
                self.pos = None;
                None
            }
        }
    }

    /// True while a replay is in progress.
    pub fn replaying(&self) -> bool {
        self.pos.is_some()
    }

    /// (Re)starts the timer from `from`. True if the caller must schedule a timer
    /// event at the deadline (none is pending).
    #[inline]
    pub fn arm(&mut self, from: SimTime) -> Option<SimTime> {
        let at = from + self.timeout;
        self.deadline = Some(at);
        (!std::mem::replace(&mut self.armed, true)).then_some(at)
    }

    /// The timer event came at `now`, with the wire free from `wire_free`. The timer
    /// does not run while the link cannot transmit, so it restarts from then. Returns
    /// `Ok(true)` if it expired, `Ok(false)` if it is stopped, `Err(t)` if it runs on
    /// to `t` (schedule the event again).
    pub fn fire(&mut self, now: SimTime, wire_free: SimTime) -> Result<bool, SimTime> {
        self.armed = false;
        if self.deadline.is_some() && wire_free > now {
            self.deadline = Some(wire_free + self.timeout);
        }
        match self.deadline {
            None => Ok(false),
            Some(t) if t > now => {
                self.armed = true;
                Err(t)
            }
            Some(_) => {
                self.deadline = None;
                Ok(true)
            }
        }
    }

    /// Everything goes (the link went down): the entries are returned, sequence
    /// numbers start over, the timer stops.
    pub fn clear(&mut self) -> Vec<(u32, u32)> {
        self.held = 0;
        self.pos = None;
        self.deadline = None;
        self.num = 0;
        self.next_seq = 0;
        self.entries.drain(..).collect()
    }
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

    #[test]
    fn the_replay_buffer_fills_releases_and_replays() {
        let us = SimDuration::from_us;
        let mut tx = TxReplay::new(4, us(1));
        assert!(tx.is_empty() && tx.has_room(4) && !tx.has_room(5));
        assert_eq!(tx.push(10, 1), 0);
        assert_eq!(
            tx.push(11, 2),
            1,
            "a burst of two takes two sequence numbers"
        );
        assert_eq!(tx.push(12, 1), 3);
        assert!(!tx.has_room(1), "four TLPs held");
        // Ack 1 releases the first entry only (the burst ends at 2).
        let mut popped = 0;
        while let Some((seq, id)) = tx.front() {
            let n = if id == 11 { 2 } else { 1 };
            if !acked(seq, n, 1) {
                break;
            }
            tx.pop(n);
            popped += 1;
        }
        assert_eq!(popped, 1);
        assert!(tx.released(popped));
        assert!(tx.has_room(1) && !tx.has_room(2));
        // A replay sends what is left, oldest first, then stops.
        assert!(!tx.start());
        assert!(tx.replaying());
        assert_eq!(tx.next_replay(), Some((1, 11)));
        // An Ack during the replay releases the burst: the cursor steps back with it.
        tx.pop(2);
        assert!(tx.released(1));
        assert_eq!(tx.next_replay(), Some((3, 12)));
        assert_eq!(tx.next_replay(), None);
        assert!(!tx.replaying());
        assert_eq!(tx.clear(), vec![(3, 12)]);
        assert_eq!(tx.next_seq, 0);
        assert!(tx.has_room(4));
    }

    #[test]
    fn replay_num_rolls_over_on_the_fourth_replay_without_progress() {
        let mut tx = TxReplay::new(8, SimDuration::from_us(1));
        tx.push(1, 1);
        assert!(!tx.start());
        assert!(!tx.start());
        assert!(!tx.start());
        assert!(tx.start(), "the fourth: retrain");
        assert!(!tx.start(), "REPLAY_NUM started over");
        // Progress resets it.
        tx.push(2, 1);
        tx.pop(1);
        assert!(tx.released(1));
        assert!(!tx.start() && !tx.start() && !tx.start());
        assert!(tx.start());
    }

    #[test]
    fn the_replay_timer_keeps_one_event_and_waits_for_the_wire() {
        let t = |ns: u64| SimTime::from_ps(ns * 1000);
        let mut tx = TxReplay::new(8, SimDuration::from_ns(100));
        assert_eq!(tx.arm(t(0)), Some(t(100)), "the first arming schedules");
        assert_eq!(tx.arm(t(50)), None, "a restart only moves the deadline");
        // The event at 100 finds the deadline at 150: it runs on.
        assert_eq!(tx.fire(t(100), t(0)), Err(t(150)));
        // At 150 the wire is busy until 180: the timer restarts from there.
        assert_eq!(tx.fire(t(150), t(180)), Err(t(280)));
        assert_eq!(tx.fire(t(280), t(0)), Ok(true), "expired");
        assert_eq!(tx.deadline, None);
        assert_eq!(tx.fire(t(300), t(0)), Ok(false), "stopped");
        assert_eq!(tx.arm(t(300)), Some(t(400)));
    }
}
