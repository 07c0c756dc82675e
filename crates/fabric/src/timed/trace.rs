//! Observability: per-link-direction counters and a timestamped TLP/DLLP trace.

use pcielab_sim::SimTime;

/// What a trace record holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TraceKind {
    /// A TLP (the bytes are the TLP: header, payload; no sequence number or LCRC).
    Tlp {
        /// Data-link sequence number it was sent with.
        seq: u16,
        /// True for a retransmission from the replay buffer.
        replay: bool,
        /// True when error injection corrupted its LCRC on the wire.
        corrupted: bool,
    },
    /// A DLLP (the 6 bytes of the DLLP, CRC included).
    Dllp,
}

/// One TLP or DLLP put on a link direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceRecord {
    /// When its first bit went on the wire, in picoseconds.
    pub time_ps: u64,
    /// Link direction index (see [`Trace::dir_names`]).
    pub dir: u16,
    /// TLP or DLLP.
    pub kind: TraceKind,
    start: u32,
    len: u32,
}

/// Every TLP and DLLP of a run, in time order, with raw bytes.
///
/// Records are ordered by [`TraceRecord::time_ps`] (when their first bit went on the
/// wire); records of the same time stay in the order they were sent. In burst mode
/// (`SimConfig::burst`) a burst's pieces are recorded when the burst starts, each
/// with its own later start time: [`Trace::push`] files them among the records of the
/// other directions by time, so the trace reads as the exact model's would.
///
/// Bytes live in one shared buffer (no allocation per record once it has grown). The
/// capture crate can turn this into pcapng: one interface per direction name.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// Direction names, indexed by [`TraceRecord::dir`], e.g. `rc.0->sw0`.
    pub dir_names: Vec<String>,
    /// The records, in time order.
    pub records: Vec<TraceRecord>,
    data: Vec<u8>,
}

impl Trace {
    /// An empty trace for directions named `dir_names`.
    pub fn new(dir_names: Vec<String>) -> Trace {
        Trace {
            dir_names,
            ..Trace::default()
        }
    }
    /// Adds a record: after every record of the same or an earlier time, before
    /// those of later times (only a burst's later pieces are recorded ahead of time,
    /// so this moves past a few records at most).
    pub fn push(&mut self, time: SimTime, dir: u16, kind: TraceKind, bytes: &[u8]) {
        let start = self.data.len() as u32;
        self.data.extend_from_slice(bytes);
        let r = TraceRecord {
            time_ps: time.as_ps(),
            dir,
            kind,
            start,
            len: bytes.len() as u32,
        };
        let rs = &mut self.records;
        let mut at = rs.len();
        while at > 0 && rs[at - 1].time_ps > r.time_ps {
            at -= 1;
        }
        rs.insert(at, r);
    }

    /// Moves the TLP records of direction `dir` at `from_ps` or later on by `by_ps`
    /// (a burst's later pieces, when a DLLP goes between them), keeping time order.
    pub(crate) fn shift_dir_after(&mut self, dir: u16, from_ps: u64, by_ps: u64) {
        let first = self.records.partition_point(|r| r.time_ps < from_ps);
        let tail = &mut self.records[first..];
        let tlp = |r: &TraceRecord| matches!(r.kind, TraceKind::Tlp { .. });
        for r in tail.iter_mut().filter(|r| r.dir == dir && tlp(r)) {
            r.time_ps += by_ps;
        }
        tail.sort_by_key(|r| r.time_ps);
    }

    /// Splits off the records of times after `now_ps` (a burst's pieces not yet on
    /// the wire at `now_ps`) into a new trace with the same direction names: `self`
    /// keeps what was sent up to `now_ps`.
    pub fn split_after(&mut self, now_ps: u64) -> Trace {
        let cut = self.records.partition_point(|r| r.time_ps <= now_ps);
        let mut rest = Trace::new(self.dir_names.clone());
        for r in self.records.drain(cut..).collect::<Vec<_>>() {
            let bytes = self
                .data
                .get(r.start as usize..(r.start + r.len) as usize)
                .unwrap_or(&[]);
            rest.push(SimTime::from_ps(r.time_ps), r.dir, r.kind, bytes);
        }
        rest
    }
    /// The raw bytes of a record.
    pub fn bytes(&self, r: &TraceRecord) -> &[u8] {
        self.data
            .get(r.start as usize..(r.start + r.len) as usize)
            .unwrap_or(&[])
    }
    /// The TLPs as first sent (replays left out), decoded by the codec, with their
    /// records; a TLP whose bytes do not decode (a raw TLP a device built) is left
    /// out.
    pub fn first_tlps(
        &self,
    ) -> impl Iterator<Item = (&TraceRecord, pcielab_wire::tlp::TlpRepr<'_>)> + '_ {
        self.records
            .iter()
            .filter(|r| matches!(r.kind, TraceKind::Tlp { replay: false, .. }))
            .filter_map(|r| {
                pcielab_wire::tlp::TlpRepr::parse_bytes(self.bytes(r))
                    .ok()
                    .map(|t| (r, t))
            })
    }

    /// The name of a record's direction.
    pub fn dir_name(&self, r: &TraceRecord) -> &str {
        self.dir_names.get(r.dir as usize).map_or("?", |s| s)
    }
    /// A 64-bit FNV-1a hash of every record (time, direction, kind, bytes): equal
    /// hashes mean identical traces (used by the determinism test).
    pub fn hash(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |b: &[u8]| {
            for &x in b {
                h ^= x as u64;
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
        };
        for r in &self.records {
            eat(&r.time_ps.to_le_bytes());
            eat(&r.dir.to_le_bytes());
            match r.kind {
                TraceKind::Tlp {
                    seq,
                    replay,
                    corrupted,
                } => eat(&[
                    1,
                    seq as u8,
                    (seq >> 8) as u8,
                    replay as u8,
                    corrupted as u8,
                ]),
                TraceKind::Dllp => eat(&[2]),
            }
            eat(self.bytes(r));
        }
        h
    }
    /// One line per record: `time_ps dir kind hex`.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        for r in &self.records {
            let kind = match r.kind {
                TraceKind::Tlp {
                    seq,
                    replay,
                    corrupted,
                } => format!(
                    "TLP seq={seq}{}{}",
                    if replay { " replay" } else { "" },
                    if corrupted { " bad-lcrc" } else { "" }
                ),
                TraceKind::Dllp => "DLLP".to_string(),
            };
            let hex: String = self.bytes(r).iter().map(|b| format!("{b:02x}")).collect();
            s.push_str(&format!(
                "{} {} {} {}\n",
                r.time_ps,
                self.dir_name(r),
                kind,
                hex
            ));
        }
        s
    }
}

/// Counters of one link direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirCounters {
    /// TLPs transmitted (first transmissions).
    pub tlps: u64,
    /// Posted TLPs (MWr, messages) transmitted.
    pub posted: u64,
    /// Non-posted TLPs (MRd, configuration, I/O) transmitted.
    pub non_posted: u64,
    /// Completions transmitted.
    pub completions: u64,
    /// Payload bytes of first transmissions.
    pub payload_bytes: u64,
    /// Wire bytes of everything transmitted (TLPs with framing, replays, DLLPs).
    pub wire_bytes: u64,
    /// Wire bytes of the first transmissions of TLPs (framing included; no replays,
    /// no DLLPs): what a model that counts TLPs only (pcie-bench's) predicts.
    pub tlp_bytes: u64,
    /// ACK DLLPs transmitted.
    pub acks: u64,
    /// NAK DLLPs transmitted.
    pub naks: u64,
    /// InitFC/UpdateFC DLLPs transmitted.
    pub fc_dllps: u64,
    /// TLP retransmissions from the replay buffer.
    pub replays: u64,
    /// Replay timer expiries.
    pub replay_timeouts: u64,
    /// REPLAY_NUM rollovers (the link would retrain).
    pub retrains: u64,
    /// TLPs whose LCRC error injection corrupted.
    pub corrupted: u64,
    /// TLPs transmitted with poisoned data (EP set; first transmissions).
    pub poisoned: u64,
    /// TLPs whose data the switch sending them on this direction corrupted
    /// (`SimConfig::switch_error_rate`).
    pub internal_errors: u64,
    /// TLPs the receiver discarded as duplicates.
    pub duplicates: u64,
    /// Picoseconds during which a TLP was waiting for flow-control credits.
    pub credit_stall_ps: u64,
    /// Picoseconds during which the replay buffer was full with a TLP waiting.
    pub replay_stall_ps: u64,
    /// Picoseconds the wire was busy.
    pub busy_ps: u64,
    /// Times this direction's transmitter entered ASPM L0s.
    pub l0s_entries: u64,
    /// Picoseconds this direction's transmitter spent in L0s.
    pub l0s_ps: u64,
    /// Times the link entered ASPM L1 (shown on both of its directions).
    pub l1_entries: u64,
    /// Picoseconds the link spent in L1 (shown on both of its directions).
    pub l1_ps: u64,
    /// Times the link left L1 from its L1.2 substate (shown on both of its
    /// directions).
    pub l1_2_exits: u64,
    /// Times the link went down (DL_Down; counted on its downward direction).
    pub link_downs: u64,
    /// TLPs routed onto this direction while its link was down, or lost from its
    /// queues when it went down (non-posted requests going down were answered by the
    /// port above).
    pub link_down_drops: u64,
    /// Poisoned TLPs the port blocked instead of sending them on this direction
    /// (Poisoned TLP Egress Blocking).
    pub poison_blocked: u64,
    /// TLPs with an End-End TLP Prefix (PASID) the port blocked instead of sending them
    /// on this direction (End-End TLP Prefix Blocking).
    pub prefix_blocked: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ps: u64) -> SimTime {
        SimTime::from_ps(ps)
    }

    #[test]
    fn records_are_filed_by_time_and_keep_their_bytes() {
        let mut t = Trace::new(vec!["a".into(), "b".into()]);
        // A burst of three pieces recorded ahead of time on direction 0, then what
        // direction 1 sends meanwhile (one record at a piece's very time).
        for (i, ps) in [10u64, 20, 30].into_iter().enumerate() {
            let kind = TraceKind::Tlp {
                seq: i as u16,
                replay: false,
                corrupted: false,
            };
            t.push(at(ps), 0, kind, &[i as u8; 4]);
        }
        t.push(at(15), 1, TraceKind::Dllp, &[0xa; 6]);
        t.push(at(20), 1, TraceKind::Dllp, &[0xb; 6]);
        t.push(at(40), 1, TraceKind::Dllp, &[0xc; 6]);
        let got: Vec<(u64, u16, Vec<u8>)> = t
            .records
            .iter()
            .map(|r| (r.time_ps, r.dir, t.bytes(r).to_vec()))
            .collect();
        let want = vec![
            (10, 0, vec![0; 4]),
            (15, 1, vec![0xa; 6]),
            (20, 0, vec![1; 4]),
            (20, 1, vec![0xb; 6]),
            (30, 0, vec![2; 4]),
            (40, 1, vec![0xc; 6]),
        ];
        assert_eq!(got, want);
        // Split at 20: what follows goes to the new trace, bytes and all.
        let rest = t.split_after(20);
        assert_eq!(t.records.len(), 4);
        assert_eq!(rest.dir_names, t.dir_names);
        let rest_got: Vec<(u64, u16, Vec<u8>)> = rest
            .records
            .iter()
            .map(|r| (r.time_ps, r.dir, rest.bytes(r).to_vec()))
            .collect();
        assert_eq!(rest_got, want[4..].to_vec());
        let seq2 = TraceKind::Tlp {
            seq: 2,
            replay: false,
            corrupted: false,
        };
        assert_eq!(rest.records[0].kind, seq2);
    }
}
