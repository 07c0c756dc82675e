//! Burst mode (`SimConfig::burst`): a DMA engine's back-to-back memory writes travel as
//! one unit.
//!
//! A saturated DMA write stream puts one MPS-sized MWr after another on every link of
//! its path. In the exact model each of them is its own record, queue entry, wire
//! transmission, arrival event, sequence number, replay-buffer entry, credit return
//! and host-memory write. In burst mode the DMA engine groups up to `burst`
//! consecutive MPS-sized writes of one DMA that lie in one 4 KiB page of host memory
//! into one record (`Tlp::pieces` TLPs of `len / pieces` bytes each), and the fabric
//! handles it as a unit that stands for that many TLPs:
//!
//! * **Wire**: the pieces are serialized back to back, each with its own header,
//!   framing, sequence number and LCRC: the wire time is exactly that of the same TLPs
//!   sent back to back (integer accounting, no rounding drift), and the trace and
//!   captures hold one record per piece with its own start time and sequence number.
//! * **Data link layer**: the burst takes `pieces` consecutive sequence numbers and
//!   `pieces` places in the replay buffer; the receiver takes it when its last piece
//!   has arrived, so ACKs cover whole bursts. The replay timer of a burst runs from
//!   its last piece's transmission.
//! * **Flow control**: it needs (and returns) one header credit per piece and the data
//!   credits of all of them; a receiver sends UpdateFC at once when its transmitter is
//!   short of a whole burst's credits.
//! * **Switches and the root complex** store and forward the whole burst, and the root
//!   complex writes its data to host memory in one piece, after its last TLP arrived.
//!
//! What changes against the exact model, by design: the receiver of each link sees a
//! burst's earlier pieces only when its last piece arrives (up to `pieces - 1` TLP
//! times later), a DLLP to be sent on a direction that is sending a burst waits for
//! the burst's end, and ACKs and UpdateFCs are per burst. Throughput of saturated
//! streams is the same (the wire carries the same bytes); latency through each
//! store-and-forward hop grows by the burst's extra pieces. The tests compare both
//! modes (`tests/it/burst.rs`).
//!
//! Burst mode turns itself off (`Engine::burst_max` = 1) where its coarser granularity
//! would change what is modelled: error injection of any kind (LCRC, BER, DLLP,
//! poisoning, switch-internal errors), ECRC, cut-through switches, peer-to-peer
//! splitting, an IOMMU, ATS/PRI and ASPM. Only writes to host memory are grouped
//! (never peer-to-peer writes, the MSI range, poisoned or PASID writes). A burst is
//! at most a quarter of any replay buffer and of any finite posted header buffer on
//! the way, and four bursts must fit in each finite posted data buffer beside the
//! bytes its link carries while the receiver holds a TLP (its node's latency). A
//! receiver holds a whole burst from the start of its arrival
//! until it passes it on, and with less room the transmitter above it waits for
//! credits where single TLPs flow: with bursts of a quarter of the default 8 KiB
//! buffer at Gen4 x16, MPS 512, a write stream through a switch ran 13 % slower (a
//! test now guards this).

use super::engine::{Dest, Engine, Kind, NodeKind, P};
use super::trace::TraceKind;
use crate::functional::{FnId, Origin, MSI_RANGE};
use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::Bdf;

impl Engine {
    /// Sets `burst_max` from the configuration and the fabric's buffers (at build).
    pub(crate) fn init_burst(&mut self) {
        let c = &self.cfg;
        let exact_only = c.error_rate > 0.0
            || c.ber > 0.0
            || c.dllp_error_rate > 0.0
            || c.poison_rate > 0.0
            || c.switch_error_rate > 0.0
            || c.ecrc
            || c.cut_through
            || c.p2p_split.is_some()
            || c.iommu.is_some()
            || c.ats
            || c.pri
            || c.aspm != 0;
        if c.burst <= 1 || exact_only {
            self.burst_max = 1;
            return;
        }
        let mps = c.mps as u64;
        let mut max = c.burst as u64;
        for d in &self.dirs {
            max = max.min((d.replay_cap as u64 / 4).max(1));
            if d.rx_buf.hdr[P] != 0 {
                max = max.min((d.rx_buf.hdr[P] as u64 / 4).max(1));
            }
            if d.rx_buf.data[P] != 0 {
                // The receiver holds each TLP for its node's latency: the bytes the
                // link carries meanwhile must fit beside four bursts, or bursts would
                // stall where single TLPs do not (two or three were not enough).
                let hold_ps = match self.nodes[d.to as usize].kind {
                    NodeKind::Switch => c.switch_latency.as_ps(),
                    NodeKind::Rc => c.rc_latency.as_ps(),
                    NodeKind::Ep(_) => c.ep_latency.as_ps(),
                };
                let units_per_byte = d.timing.units(1).max(1);
                let in_flight = (hold_ps as u128 * d.timing.units_per_ps() / units_per_byte) as u64;
                let room = (d.rx_buf.data[P] as u64 * 16).saturating_sub(in_flight);
                max = max.min((room / (4 * mps)).max(1));
            }
        }
        self.burst_max = max as u32;
    }

    /// How many of the DMA write chunks `(addr, len)` at the front of `chunks`, the
    /// first of which is at `addr` with `len` bytes, `node`'s function `f` may send as
    /// one burst: 1 unless burst mode is on and they are whole-MPS writes to host
    /// memory in one 4 KiB page.
    pub(crate) fn burst_pieces(
        &mut self,
        f: FnId,
        me: Bdf,
        (addr, len): (u64, u32),
        mut more: impl Iterator<Item = (u64, u32)>,
    ) -> u32 {
        let mps = self.cfg.mps as u32;
        if self.burst_max <= 1 || len != mps {
            return 1;
        }
        let mut n = 1u32;
        let mut end = addr + len as u64;
        while n < self.burst_max {
            match more.next() {
                Some((a, l)) if l == mps && a == end && (a >> 12) == (addr >> 12) => {
                    n += 1;
                    end += l as u64;
                }
                _ => break,
            }
        }
        if n == 1 {
            return 1;
        }
        // Host memory at both ends, clear of the interrupt range.
        let host = |e: &mut Engine, a: u64| {
            matches!(
                e.route(Origin::Function(f), Kind::MWr, a, me),
                Ok((_, _, Dest::HostMemory))
            )
        };
        let clear_of_msi = end <= MSI_RANGE.0 || addr > MSI_RANGE.1;
        if clear_of_msi && host(self, addr) && host(self, end - 1) {
            n
        } else {
            1
        }
    }

    /// Wire bytes of TLP record `id` on direction `di` (all its pieces).
    #[inline(always)]
    pub(crate) fn wire_bytes(&self, di: usize, id: u32) -> u64 {
        let t = &self.tlps[id as usize];
        let timing = &self.dirs[di].timing;
        // Framing, sequence number and LCRC per piece.
        let framing = timing.tlp_wire_bytes(0);
        t.tlp_bytes() + framing * t.pieces as u64
    }

    /// For a burst on direction `di`: the time from its first piece's start of
    /// transmission to its last piece's.
    #[cold]
    pub(crate) fn burst_lead(&self, di: usize, id: u32) -> SimDuration {
        let n = self.tlps[id as usize].pieces as u64;
        let timing = &self.dirs[di].timing;
        let piece = self.wire_bytes(di, id) / n;
        SimDuration::from_ps(timing.units_to_ps_ceil(timing.units(piece * (n - 1))))
    }

    /// Records every piece of burst `id`, about to be sent on `d` with first sequence
    /// number `seq`, in the trace: its own bytes, start time and sequence number.
    #[cold]
    #[inline(never)]
    pub(crate) fn trace_burst(
        &mut self,
        d: u16,
        seq: u32,
        id: u32,
        replay: bool,
        bad: bool,
        now: SimTime,
    ) {
        let di = d as usize;
        let t = &self.tlps[id as usize];
        let n = t.pieces as u32;
        let plen = t.len / n;
        let piece_units = {
            let timing = &self.dirs[di].timing;
            timing.units(self.wire_bytes(di, id) / n as u64)
        };
        // Where the transmission starts, in the wire's units (as `transmit` decides).
        let dir = &self.dirs[di];
        let now_u = dir.timing.ps_to_units(now.as_ps());
        let start_u = if now_u < dir.free_at + dir.timing.units_per_ps() {
            dir.free_at
        } else {
            now_u
        };
        let first_ps = now.max(SimTime::from_ps(dir.free_at_ps));
        let payload = self.payload(id);
        let mut records = Vec::with_capacity(n as usize);
        for i in 0..n {
            let mut piece = t.clone();
            piece.pieces = 1;
            piece.addr = t.addr + (i * plen) as u64;
            piece.len = plen;
            let (s, e) = ((i * plen) as usize, ((i + 1) * plen) as usize);
            let data = payload.get(s..e.min(payload.len())).unwrap_or(&[]);
            let raw = Self::tlp_bytes_of(&piece, data);
            let at = if i == 0 {
                first_ps
            } else {
                let u = start_u + piece_units * i as u128;
                SimTime::from_ps(dir.timing.units_to_ps_ceil(u))
            };
            records.push((at, seq.wrapping_add(i), raw));
        }
        if let Some(tr) = self.trace.as_mut() {
            for (at, s, raw) in records {
                let kind = TraceKind::Tlp {
                    seq: (s & 0xfff) as u16,
                    replay,
                    corrupted: bad,
                };
                tr.push(at, d, kind, &raw);
            }
        }
    }
}
