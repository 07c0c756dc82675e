//! Request ↔ completion matching over a capture.
//!
//! A non-posted request (MRd, MRdLk, IORd/IOWr, CfgRd/Wr, AtomicOps) is pending from the
//! frame it is seen in until its last completion. Completions are matched by
//! (link, Requester ID, Tag), where the link joins the two directions of one interface pair:
//! interfaces named `a->b` and `b->a` are one link; any other name is a link on its own (a
//! NetTLP capture on one Ethernet port sees both directions on one interface).
//!
//! A completion is the last of its request when it carries no data (UR, CA, CRS and the
//! completions of writes) or when its data reaches the end of the remaining Byte Count:
//! `(Lower Address & 3) + Byte Count <= Length × 4`.
//!
//! ```
//! use pcielab_capture::transactions::{Matcher, Role};
//! use pcielab_wire::tlp::TlpRepr;
//! use pcielab_wire::{Bdf, Tag, CplStatus};
//! let rid = Bdf::new(1, 0, 0).unwrap();
//! let mrd = TlpRepr::mem_read(rid, Tag::new(3).unwrap(), 0x1000, 1).unwrap();
//! let data = [1, 2, 3, 4];
//! let cpl = TlpRepr::completion(Bdf::from_raw(0), rid, Tag::new(3).unwrap(),
//!                               CplStatus::Sc, 4, 0, &data).unwrap();
//! let mut m = Matcher::new();
//! assert_eq!(m.observe(1, "rc.0->ep0", 100, &mrd), Role::Request { tag_in_use_by: None });
//! match m.observe(2, "ep0->rc.0", 350, &cpl) {
//!     Role::Completion(c) => { assert_eq!(c.request_frame, 1); assert_eq!(c.latency_ps, 250); assert!(c.last); }
//!     other => panic!("{other:?}"),
//! }
//! assert_eq!(m.outstanding().count(), 0);
//! ```

use pcielab_wire::tlp::{TlpHeader, TlpKind, TlpRepr};
use pcielab_wire::Bdf;
use std::collections::{HashMap, VecDeque};

/// The link an interface name belongs to: `a->b` and `b->a` give the same key.
pub fn link_key(interface: &str) -> String {
    match interface.split_once("->") {
        Some((a, b)) => {
            let (a, b) = (a.trim(), b.trim());
            if a <= b {
                format!("{a}<->{b}")
            } else {
                format!("{b}<->{a}")
            }
        }
        None => interface.to_string(),
    }
}

/// What a completion was matched to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CplMatch {
    /// Frame number of the request.
    pub request_frame: u64,
    /// Kind of the request.
    pub request_kind: TlpKind,
    /// Completion time − request time, in picoseconds (0 if the completion is earlier).
    pub latency_ps: u128,
    /// Whether this completion finishes the request.
    pub last: bool,
    /// 1 for the first completion of the request, 2 for the second, …
    pub index: u32,
}

/// The role of a TLP in a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A posted request (MWr, Msg, MsgD): no completion expected.
    Posted,
    /// A non-posted request; `tag_in_use_by` is the frame of the latest earlier request with
    /// the same link, requester and tag that is still waiting for completions (a tag reused
    /// while outstanding, or the same request seen twice). Completions then go to the oldest.
    Request {
        /// The earlier request still outstanding.
        tag_in_use_by: Option<u64>,
    },
    /// A completion matched to its request.
    Completion(CplMatch),
    /// A completion with no pending request.
    Unmatched,
    /// A data-link retransmission of a TLP already seen on this link direction (marked by
    /// the capture, see [`crate::DLL_REPLAY_COMMENT`]); the caller does not pass it to
    /// [`Matcher::observe`], so it neither opens nor answers a request.
    DllReplay,
}

/// A request that never got (all of) its completions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outstanding {
    /// Frame number of the request.
    pub frame: u64,
    /// Its kind.
    pub kind: TlpKind,
    /// Its time.
    pub time_ps: u128,
    /// Completions seen (none were the last).
    pub completions: u32,
    /// Its link key.
    pub link: String,
    /// Requester ID.
    pub requester_id: Bdf,
    /// Tag.
    pub tag: u16,
}

#[derive(Debug, Clone)]
struct Pending {
    frame: u64,
    kind: TlpKind,
    time_ps: u128,
    completions: u32,
}

/// Matches completions to requests, in capture order.
#[derive(Debug, Default)]
pub struct Matcher {
    /// Outstanding requests per (link, requester, tag), oldest first.
    pending: HashMap<(String, u16, u16), VecDeque<Pending>>,
}

/// Whether a completion is the last one of its request (see the module docs).
pub fn is_last_completion(tlp: &TlpRepr<'_>) -> bool {
    match tlp.header {
        TlpHeader::Cpl(c) => {
            if tlp.payload.is_empty() {
                return true;
            }
            let carried = tlp.length_dw() as u32 * 4;
            (c.lower_address as u32 & 3) + c.byte_count as u32 <= carried
        }
        _ => false,
    }
}

impl Matcher {
    /// An empty matcher.
    pub fn new() -> Matcher {
        Matcher::default()
    }

    /// Records `tlp`, seen in `frame` on interface `interface` at `time_ps`, and says what
    /// it is.
    pub fn observe(
        &mut self,
        frame: u64,
        interface: &str,
        time_ps: u128,
        tlp: &TlpRepr<'_>,
    ) -> Role {
        let kind = tlp.kind();
        let link = link_key(interface);
        if let TlpHeader::Cpl(c) = tlp.header {
            let key = (link, c.requester_id.raw(), c.tag.value());
            let last = is_last_completion(tlp);
            let Some(queue) = self.pending.get_mut(&key) else {
                return Role::Unmatched;
            };
            let Some(p) = queue.front_mut() else {
                return Role::Unmatched;
            };
            p.completions += 1;
            let m = CplMatch {
                request_frame: p.frame,
                request_kind: p.kind,
                latency_ps: time_ps.saturating_sub(p.time_ps),
                last,
                index: p.completions,
            };
            if last {
                queue.pop_front();
                if queue.is_empty() {
                    self.pending.remove(&key);
                }
            }
            return Role::Completion(m);
        }
        if !kind.is_non_posted() {
            return Role::Posted;
        }
        let key = (link, tlp.requester_id().raw(), tlp.tag().value());
        let new = Pending {
            frame,
            kind,
            time_ps,
            completions: 0,
        };
        let queue = self.pending.entry(key).or_default();
        let tag_in_use_by = queue.back().map(|p| p.frame);
        queue.push_back(new);
        Role::Request { tag_in_use_by }
    }

    /// Requests without their last completion, in frame order.
    pub fn outstanding(&self) -> impl Iterator<Item = Outstanding> + '_ {
        let mut v: Vec<Outstanding> = self
            .pending
            .iter()
            .flat_map(|((link, rid, tag), q)| {
                q.iter().map(move |p| Outstanding {
                    frame: p.frame,
                    kind: p.kind,
                    time_ps: p.time_ps,
                    completions: p.completions,
                    link: link.clone(),
                    requester_id: Bdf::from_raw(*rid),
                    tag: *tag,
                })
            })
            .collect();
        v.sort_by_key(|o| o.frame);
        v.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcielab_wire::{CplStatus, Tag};

    fn rid() -> Bdf {
        Bdf::new(2, 0, 0).unwrap()
    }

    #[test]
    fn link_key_pairs_directions() {
        assert_eq!(link_key("rc.0->sw0"), link_key("sw0->rc.0"));
        assert_eq!(link_key("rc.0->sw0"), "rc.0<->sw0");
        assert_ne!(link_key("rc.0->sw0"), link_key("sw0.1->mem0"));
        assert_eq!(link_key("pcap"), "pcap");
    }

    #[test]
    fn split_completion_of_unaligned_read() {
        // MRd of 128 bytes at 0x1004: 32 DW. Completions on RCB 64: first 60 bytes
        // (la 0x04, bc 128, 15 DW), then 64 bytes (la 0x40, bc 68, 16 DW) , then 4 bytes
        // (la 0x80, bc 4, 1 DW).
        let t = Tag::new(9).unwrap();
        let mrd = TlpRepr::mem_read(rid(), t, 0x1004, 32).unwrap();
        let d60 = [0u8; 60];
        let d64 = [0u8; 64];
        let d4 = [0u8; 4];
        let c = Bdf::from_raw(0);
        let c1 = TlpRepr::completion(c, rid(), t, CplStatus::Sc, 128, 0x04, &d60).unwrap();
        let c2 = TlpRepr::completion(c, rid(), t, CplStatus::Sc, 68, 0x40, &d64).unwrap();
        let c3 = TlpRepr::completion(c, rid(), t, CplStatus::Sc, 4, 0x80, &d4).unwrap();
        assert!(!is_last_completion(&c1));
        assert!(!is_last_completion(&c2));
        assert!(is_last_completion(&c3));
        let mut m = Matcher::new();
        m.observe(10, "pcap", 1000, &mrd);
        let r1 = m.observe(11, "pcap", 1500, &c1);
        let r3 = {
            m.observe(12, "pcap", 1600, &c2);
            m.observe(13, "pcap", 1700, &c3)
        };
        assert!(matches!(
            r1,
            Role::Completion(CplMatch {
                request_frame: 10,
                last: false,
                index: 1,
                latency_ps: 500,
                ..
            })
        ));
        assert!(matches!(
            r3,
            Role::Completion(CplMatch {
                request_frame: 10,
                last: true,
                index: 3,
                latency_ps: 700,
                ..
            })
        ));
        assert_eq!(m.observe(14, "pcap", 1800, &c3), Role::Unmatched);
    }

    #[test]
    fn ur_completion_without_data_finishes() {
        let t = Tag::new(1).unwrap();
        let mrd = TlpRepr::mem_read(rid(), t, 0x1000, 4).unwrap();
        let ur =
            TlpRepr::completion(Bdf::from_raw(0), rid(), t, CplStatus::Ur, 16, 0, &[]).unwrap();
        let mut m = Matcher::new();
        m.observe(1, "a->b", 0, &mrd);
        assert!(matches!(
            m.observe(2, "b->a", 10, &ur),
            Role::Completion(CplMatch { last: true, .. })
        ));
    }

    #[test]
    fn other_link_does_not_match_and_reused_tags_queue() {
        let t = Tag::new(1).unwrap();
        let mrd = TlpRepr::mem_read(rid(), t, 0x1000, 1).unwrap();
        let d = [0u8; 4];
        let cpl = TlpRepr::completion(Bdf::from_raw(0), rid(), t, CplStatus::Sc, 4, 0, &d).unwrap();
        let mut m = Matcher::new();
        m.observe(1, "a->b", 0, &mrd);
        assert_eq!(m.observe(2, "c->d", 5, &cpl), Role::Unmatched);
        assert_eq!(
            m.observe(3, "a->b", 6, &mrd),
            Role::Request {
                tag_in_use_by: Some(1)
            }
        );
        let out: Vec<u64> = m.outstanding().map(|o| o.frame).collect();
        assert_eq!(out, vec![1, 3]);
        // Completions go to the oldest request first.
        assert!(matches!(
            m.observe(4, "b->a", 10, &cpl),
            Role::Completion(CplMatch {
                request_frame: 1,
                latency_ps: 10,
                ..
            })
        ));
        assert!(matches!(
            m.observe(5, "b->a", 11, &cpl),
            Role::Completion(CplMatch {
                request_frame: 3,
                latency_ps: 5,
                ..
            })
        ));
        assert_eq!(m.outstanding().count(), 0);
    }
}
