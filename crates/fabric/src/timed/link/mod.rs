//! A link direction: the transmitter (egress queues and their ordering, the credit
//! gate, the replay buffer, DLLP scheduling, serialization on the wire) and the
//! receiver (the sequence check, Ack/Nak, flow-control accounting and UpdateFC). The
//! state machines themselves are `fc` and `dll`; this module drives them with events.

use super::bus_master::BME_USP;
use super::dll::RxVerdict;
use super::engine::*;
use super::event::*;
use super::link::state::*;
use super::packed::PackedEv;
use super::regs::*;
use super::tlp::*;
use super::trace::{DirCounters, TraceKind};
use pcielab_sim::{Context, FifoId, SimDuration, SimTime};
use pcielab_wire::dllp::{FcClass as DFc, FcDllp, FcKind, FcScale};
use pcielab_wire::DllpRepr;
use pcielab_wire::SeqNum;

pub(crate) mod state;

impl Engine {
    #[inline]
    pub(crate) fn enqueue(&mut self, d: u16, id: u32, cx: &mut Context<'_, PackedEv>) {
        let dir = &self.dirs[d as usize];
        if (dir.down | dir.poison_block | (dir.egress_block != 0) | (dir.bme_block & BME_USP != 0))
            && self.egress_gate(d, id, cx)
        {
            return;
        }
        let t = &self.pool.tlps[id as usize];
        let (class, dc) = (
            t.class(),
            t.data_credits() as u32 | ((t.pieces as u32 - 1) << Q_PIECES_SHIFT),
        );
        let dir = &mut self.dirs[d as usize];
        dir.order += 1;
        let o = dir.order;
        dir.q[class].push_back((o, id, dc));
        self.try_send(d, cx);
    }

    /// TLP `id` is about to join the queue of direction `d`, whose link is down,
    /// whose port blocks poisoned TLPs or whose switch upstream port has Bus Master
    /// Enable clear: true if it was handled here instead.
    #[cold]
    #[inline(never)]
    pub(crate) fn egress_gate(&mut self, d: u16, id: u32, cx: &mut Context<'_, PackedEv>) -> bool {
        if self.dirs[d as usize].down {
            self.tlp_at_down_link(d, id, cx);
            return true;
        }
        if self.dirs[d as usize].bme_block & BME_USP != 0 && self.bme_egress(d, id, cx) {
            return true;
        }
        if self.dirs[d as usize].poison_block && self.pool.tlps[id as usize].poisoned {
            self.poison_egress_blocked(d, id, cx);
            return true;
        }
        let block = self.dirs[d as usize].egress_block;
        if block & super::pasid::BLOCK_PREFIX != 0 && self.pool.tlps[id as usize].pasid != NONE {
            self.prefix_egress_blocked(d, id, cx);
            return true;
        }
        if block & super::pasid::BLOCK_ATOMIC != 0
            && self.pool.tlps[id as usize].kind == Kind::Atomic
        {
            self.atomic_egress_blocked(d, id, cx);
            return true;
        }
        false
    }

    /// A wire item sent before its link went down arrives: lost with the link.
    #[cold]
    #[inline(never)]
    pub(crate) fn lost_with_link(&mut self, w: Wire) {
        if let Wire::Tlp { id, .. } = w {
            self.release(id);
        }
    }

    /// True if the transmitter of `d` has the credits of class `c` for a queue entry
    /// whose packed credits (see [`Q_PIECES_SHIFT`]) are `packed`: one header per
    /// TLP it stands for, and its data.
    #[inline]
    pub(crate) fn has_credits(&self, d: usize, c: usize, packed: u32) -> bool {
        let (data_credits, more_hdrs) = (packed & Q_DATA_MASK, (packed >> Q_PIECES_SHIFT) as u64);
        self.dirs[d]
            .tx_fc
            .can_send(c, 1 + more_hdrs, data_credits as u64)
    }

    /// Picks the next TLP under the ordering rules: nothing passes an older posted
    /// request; within a class FIFO; otherwise the oldest TLP that has credits.
    #[inline]
    pub(crate) fn pick(&self, d: usize) -> Option<(usize, bool)> {
        let dir = &self.dirs[d];
        let p_head = dir.q[P].front().map(|x| x.0);
        let mut best: Option<(u64, usize)> = None;
        let mut blocked = false;
        for c in [P, NP, CPL] {
            if let Some(&(o, _, dc)) = dir.q[c].front() {
                if c != P {
                    if let Some(po) = p_head {
                        if po < o {
                            continue; // may not pass the older posted request
                        }
                    }
                }
                if self.has_credits(d, c, dc) {
                    if best.map_or(true, |(bo, _)| o < bo) {
                        best = Some((o, c));
                    }
                } else {
                    blocked = true;
                }
            }
        }
        match best {
            Some((_, c)) => Some((c, blocked)),
            None => {
                if blocked {
                    Some((usize::MAX, true))
                } else {
                    None
                }
            }
        }
    }

    /// True if the direction has something it may want to send.
    #[inline]
    pub(crate) fn has_work(&self, d: usize) -> bool {
        let dir = &self.dirs[d];
        !dir.dllq.is_empty() || dir.replay.replaying() || dir.q.iter().any(|q| !q.is_empty())
    }

    /// Makes sure a wake-up (TxDone) is pending for when the wire frees. Without
    /// propagation delay the last transmission arrives exactly then: its arrival stands
    /// for the TxDone, which keeps the sequence number it would have been scheduled
    /// with (see [`Engine::resolve_deferred_tx`]), so the event order is unchanged.
    #[inline]
    pub(crate) fn wake_when_free(&mut self, d: u16, cx: &mut Context<'_, PackedEv>) {
        let dir = &mut self.dirs[d as usize];
        if !dir.busy {
            dir.busy = true;
            if dir.prop_ps == 0 && dir.last_arrive_ps == dir.free_at_ps {
                dir.deferred_tx = Some((dir.free_at_ps, cx.reserve_seq()));
                return;
            }
            let t = SimTime::from_ps(dir.free_at_ps);
            let txf = dir.tx_fifo;
            cx.push_fifo(txf, t, Ev::TxDone(d));
        }
    }

    /// At an arrival on `d` at the time of a deferred TxDone: the TxDone's work runs
    /// inline when no pending event comes before its place in the order, else it is
    /// scheduled there.
    #[inline]
    pub(crate) fn resolve_deferred_tx(&mut self, d: u16, cx: &mut Context<'_, PackedEv>) {
        let Some((at, seq)) = self.dirs[d as usize].deferred_tx else {
            return;
        };
        if cx.now().as_ps() != at {
            return;
        }
        self.dirs[d as usize].deferred_tx = None;
        let t = SimTime::from_ps(at);
        if cx.nothing_before(t, seq) {
            self.dirs[d as usize].busy = false;
            self.try_send(d, cx);
        } else {
            cx.schedule_reserved(t, seq, Ev::TxDone(d));
        }
    }

    pub(crate) fn try_send(&mut self, d: u16, cx: &mut Context<'_, PackedEv>) {
        let di = d as usize;
        if self.dirs[di].busy || self.dirs[di].down {
            return;
        }
        let now = cx.now();
        // The wire is still sending: come back when it is free (only then: an idle
        // direction costs no events).
        if self.dirs[di].free_at_ps > now.as_ps() {
            if self.has_work(di) {
                self.wake_when_free(d, cx);
            }
            return;
        }
        // 1. DLLPs.
        if let Some((dl, background)) = self.dirs[di].dllq.pop_front() {
            if self.dirs[di].aspm != 0 {
                self.aspm_wake(d, now.as_ps());
            }
            // The InitFC handshake repeats until it succeeds: modelled as never lost.
            let init = matches!(dl, Dllp::Fc { kind, .. } if kind != FcKind::UpdateFc);
            let bad = !init
                && self.cfg.dllp_error_rate > 0.0
                && self.err_rng.chance(self.cfg.dllp_error_rate);
            let bytes = self.dirs[di].timing.dllp_wire_bytes();
            match dl {
                Dllp::Ack(_) => self.dirs[di].counters.acks += 1,
                Dllp::Nak(_) => self.dirs[di].counters.naks += 1,
                Dllp::Fc { .. } => self.dirs[di].counters.fc_dllps += 1,
            }
            if let Some(tr) = self.trace.as_mut() {
                let raw = dllp_repr(dl).to_bytes().unwrap_or([0; 6]);
                let start = now.max(SimTime::from_ps(self.dirs[di].free_at_ps));
                tr.push(start, d, TraceKind::Dllp, &raw);
            }
            self.transmit_as(d, bytes, Wire::Dllp { d: dl, bad }, background, cx);
            return;
        }
        // 2. Replays.
        if self.dirs[di].replay.replaying() {
            if let Some((seq, id)) = self.dirs[di].replay.next_replay() {
                // (A burst is retransmitted as its TLPs.)
                self.dirs[di].counters.replays += self.pool.tlps[id as usize].pieces.max(1) as u64;
                if self.dirs[di].aspm != 0 {
                    self.aspm_wake(d, now.as_ps());
                }
                self.send_tlp(d, seq, id, true, cx);
                return;
            }
        }
        // 3. New TLPs.
        if !self.dirs[di].up {
            return;
        }
        let pick = self.pick(di);
        // Room in the replay buffer for every TLP of the entry picked.
        let need = match pick {
            Some((c, _)) if c != usize::MAX => self.dirs[di].q[c]
                .front()
                .map_or(1, |e| 1 + (e.2 >> Q_PIECES_SHIFT)),
            _ => 1,
        };
        let full = !self.dirs[di].replay.has_room(need as usize);
        // Stall accounting.
        let waiting = pick.is_some();
        if full && waiting {
            self.dirs[di].rstall_since.get_or_insert(now);
            return;
        } else if let Some(s) = self.dirs[di].rstall_since.take() {
            self.dirs[di].counters.replay_stall_ps += (now - s).as_ps();
        }
        match pick {
            Some((c, _)) if c != usize::MAX => {
                if let Some(s) = self.dirs[di].stall_since.take() {
                    self.dirs[di].counters.credit_stall_ps += (now - s).as_ps();
                }
                let Some((_, id, packed)) = self.dirs[di].q[c].pop_front() else {
                    return;
                };
                let dc = (packed & Q_DATA_MASK) as u64;
                let n = 1 + (packed >> Q_PIECES_SHIFT) as u64;
                let payload = self.pool.tlps[id as usize].payload_bytes() as u64;
                let dir = &mut self.dirs[di];
                dir.tx_fc.consume(c, n, dc);
                let seq = dir.replay.push(id, n as u32);
                self.pool.hold(id);
                let dir = &mut self.dirs[di];
                dir.counters.tlps += n;
                dir.counters.payload_bytes += payload;
                dir.counters.poisoned += self.pool.tlps[id as usize].poisoned as u64 * n;
                match c {
                    P => dir.counters.posted += n,
                    NP => dir.counters.non_posted += n,
                    _ => dir.counters.completions += n,
                }
                if dir.aspm != 0 {
                    self.aspm_wake(d, now.as_ps());
                }
                if self.dirs[di].replay.deadline.is_none() {
                    // The timer runs from the transmission (after any ASPM exit); for
                    // a burst, from its last TLP's (see the `burst` module).
                    let mut start = now.max(SimTime::from_ps(self.dirs[di].free_at_ps));
                    if n > 1 {
                        start += self.burst_lead(di, id);
                    }
                    self.arm_replay_at(d, start, cx);
                }
                // Put it on the wire first (the direction is then busy, so anything the
                // follow-ups below queue here waits its turn).
                self.send_tlp(d, seq, id, false, cx);
                // The TLP leaves the ingress buffer it sat in: return those credits.
                let ing = self.pool.tlps[id as usize].ingress;
                if ing != NO_DIR {
                    self.pool.tlps[id as usize].ingress = NO_DIR;
                    self.return_credits(ing, c, n, dc, cx);
                }
                let (dn, op) = self.pool.tlps[id as usize].dma_last;
                if dn != NONE {
                    self.pool.tlps[id as usize].dma_last = (NONE, NONE);
                    self.dma_write_left(dn, op, cx);
                }
            }
            Some(_) => {
                self.dirs[di].stall_since.get_or_insert(now);
            }
            None => {}
        }
    }

    pub(crate) fn send_tlp(
        &mut self,
        d: u16,
        seq: u32,
        id: u32,
        replay: bool,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let di = d as usize;
        let bytes = self.wire_bytes(di, id);
        let p = if self.cfg.ber > 0.0 {
            // Any of the TLP's bits flipped: 1 - (1 - BER)^bits.
            1.0 - (1.0 - self.cfg.ber).powf((bytes * 8) as f64)
        } else {
            self.cfg.error_rate
        };
        if !replay {
            self.dirs[di].counters.tlp_bytes += bytes;
        }
        let bad = p > 0.0 && self.err_rng.chance(p);
        if bad {
            self.dirs[di].counters.corrupted += 1;
        }
        if self.trace.is_some() && self.pool.tlps[id as usize].pieces > 1 {
            self.trace_burst(d, seq, id, replay, bad, cx.now());
        } else if self.trace.is_some() {
            let raw = self.tlp_bytes_raw(id);
            if let Some(tr) = self.trace.as_mut() {
                tr.push(
                    cx.now().max(SimTime::from_ps(self.dirs[di].free_at_ps)),
                    d,
                    TraceKind::Tlp {
                        seq: (seq & 0xfff) as u16,
                        replay,
                        corrupted: bad,
                    },
                    &raw,
                );
            }
        }
        if replay {
            // A new wire copy; a first transmission takes over the queue's reference.
            self.pool.hold(id);
        }
        let pieces = self.pool.tlps[id as usize].pieces as u64;
        if pieces > 1 {
            self.transmit(d, bytes, Wire::Tlp { id, seq, bad }, cx);
            // Where the burst lies on the wire, for DLLPs that go between its pieces.
            let dir = &mut self.dirs[di];
            let units = dir.timing.units(bytes);
            dir.burst_tx = (
                dir.free_at - units,
                units / pieces as u128,
                pieces as u32,
                seq,
            );
            dir.burst_ins = (0, 0);
        } else {
            self.transmit(d, bytes, Wire::Tlp { id, seq, bad }, cx);
        }
    }

    #[inline(always)]
    pub(crate) fn transmit(&mut self, d: u16, bytes: u64, w: Wire, cx: &mut Context<'_, PackedEv>) {
        self.transmit_as(d, bytes, w, false, cx);
    }

    /// [`Engine::transmit`]; with `background`, the arrival is a background event
    /// unless it also stands for the wire's TxDone (then it is work: the transmitter
    /// has more to send).
    #[inline(always)]
    pub(crate) fn transmit_as(
        &mut self,
        d: u16,
        bytes: u64,
        w: Wire,
        background: bool,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let dir = &mut self.dirs[d as usize];
        let now_ps = cx.now().as_ps();
        let now_u = dir.timing.ps_to_units(now_ps);
        // Back to back (the wire freed less than a picosecond ago, i.e. at this event's
        // rounded-up time): start exactly where the last transmission ended, so that
        // rounding to picoseconds never accumulates.
        let (start, start_ps) = if now_u < dir.free_at + dir.timing.units_per_ps() {
            (dir.free_at, dir.free_at_ps)
        } else {
            (now_u, now_ps)
        };
        let end = start + dir.timing.units(bytes);
        let end_ps = dir.timing.units_to_ps_ceil(end);
        dir.free_at = end;
        dir.free_at_ps = end_ps;
        dir.counters.wire_bytes += bytes;
        dir.counters.busy_ps += end_ps.saturating_sub(start_ps);
        let fifo = dir.fifo;
        let arrive = end_ps + dir.prop_ps;
        dir.last_arrive_ps = arrive;
        if self.has_work(d as usize) && !self.dirs[d as usize].busy {
            // The wire's TxDone is due at `end_ps`: with no propagation delay that is the
            // arrival's time, and it would be scheduled right after the arrival, so the
            // arrival carries it (see `WireItem`).
            let dir = &mut self.dirs[d as usize];
            if dir.prop_ps == 0 {
                dir.busy = true;
                cx.push_fifo(
                    fifo,
                    SimTime::from_ps(arrive),
                    Ev::Arrive(d, WireItem(w, true)),
                );
            } else {
                self.push_arrival(fifo, arrive, d, w, background, cx);
                self.wake_when_free(d, cx);
            }
        } else {
            self.push_arrival(fifo, arrive, d, w, background, cx);
        }
    }

    /// Schedules the arrival of `w` on `d` at `arrive` (ps), as a background event when
    /// `background`.
    #[inline(always)]
    fn push_arrival(
        &mut self,
        fifo: FifoId,
        arrive: u64,
        d: u16,
        w: Wire,
        background: bool,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let ev = Ev::Arrive(d, WireItem(w, false));
        if background {
            cx.push_fifo_background(fifo, SimTime::from_ps(arrive), ev);
        } else {
            cx.push_fifo(fifo, SimTime::from_ps(arrive), ev);
        }
    }

    pub(crate) fn queue_dllp(
        &mut self,
        d: u16,
        dl: Dllp,
        front: bool,
        cx: &mut Context<'_, PackedEv>,
    ) {
        self.queue_dllp_as(d, dl, front, false, cx);
    }

    /// [`Engine::queue_dllp`]; with `background`, the DLLP's arrival is a background
    /// event (a periodic UpdateFC).
    pub(crate) fn queue_dllp_as(
        &mut self,
        d: u16,
        dl: Dllp,
        front: bool,
        background: bool,
        cx: &mut Context<'_, PackedEv>,
    ) {
        if self.dirs[d as usize].down {
            return; // DL_Down: the data link layer sends nothing
        }
        if self.dirs[d as usize].timing.dllp_wire_bytes() == 0 {
            // Flit mode: DLLPs ride in every flit's DLP bytes; deliver them directly.
            let arrive = cx.now().as_ps() + self.dirs[d as usize].prop_ps;
            let fifo = self.dirs[d as usize].fifo;
            self.push_arrival(
                fifo,
                arrive,
                d,
                Wire::Dllp { d: dl, bad: false },
                background,
                cx,
            );
            return;
        }
        if self.bursts_on() && self.dllp_into_burst(d, dl, background, cx) {
            return;
        }
        let q = &mut self.dirs[d as usize].dllq;
        if front {
            // ACK/NAK replace an older ACK/NAK still waiting.
            q.retain(|x| !matches!(x.0, Dllp::Ack(_) | Dllp::Nak(_)));
            q.push_front((dl, background));
        } else {
            q.push_back((dl, background));
        }
        self.try_send(d, cx);
    }

    pub(crate) fn arrive(&mut self, d: u16, w: Wire, cx: &mut Context<'_, PackedEv>) {
        let di = d as usize;
        if cx.now().as_ps() < self.dirs[di].stale_until_ps {
            self.lost_with_link(w);
            return;
        }
        match w {
            Wire::Dllp { bad: true, .. } => {
                // A DLLP with a bad CRC is discarded: Bad DLLP.
                if let Some(f) = self.dirs[di].rx_func {
                    self.signal_correctable(f, AER_CORR_BAD_DLLP, cx);
                }
            }
            Wire::Dllp { d: dl, .. } => self.dllp_arrived(d ^ 1, dl, cx),
            Wire::Tlp { id, seq, bad } => {
                let n = self.pool.tlps[id as usize].pieces as u32;
                let dir = &mut self.dirs[di];
                let verdict = dir.rx_seq.receive(seq, bad, n);
                if let RxVerdict::Reject { nak } = verdict {
                    if let Some(s) = nak {
                        self.queue_dllp(d ^ 1, Dllp::Nak(s), true, cx);
                    }
                    self.release(id);
                    // A bad LCRC, or a sequence number neither expected nor a duplicate:
                    // Bad TLP.
                    if let Some(f) = self.dirs[di].rx_func {
                        self.signal_correctable(f, AER_CORR_BAD_TLP, cx);
                    }
                } else if let RxVerdict::Duplicate { ack } = verdict {
                    dir.counters.duplicates += self.pool.tlps[id as usize].pieces.max(1) as u64;
                    self.release(id);
                    self.queue_dllp(d ^ 1, Dllp::Ack(ack), true, cx);
                } else {
                    let (c, dc) = {
                        let t = &self.pool.tlps[id as usize];
                        (t.class(), t.data_credits())
                    };
                    let dir = &mut self.dirs[di];
                    if !dir.rx_ack_pending {
                        dir.rx_ack_pending = true;
                        let at = cx.now() + SimDuration::from_ps(dir.ack_ps);
                        let f = dir.ack_fifo;
                        cx.push_fifo(f, at, Ev::AckTimer(d));
                    }
                    let dir = &mut self.dirs[di];
                    dir.rx_fc.received(c, n as u64, dc);
                    self.accepted(d, id, cx);
                }
            }
        }
    }

    /// A DLLP for the transmitter of direction `d` (it arrived on `d ^ 1`).
    pub(crate) fn dllp_arrived(&mut self, d: u16, dl: Dllp, cx: &mut Context<'_, PackedEv>) {
        let di = d as usize;
        match dl {
            Dllp::Ack(s) | Dllp::Nak(s) => {
                let mut popped = 0usize;
                while let Some((seq, id)) = self.dirs[di].replay.front() {
                    // The last sequence number of the entry (a burst has several).
                    let n = self.pool.tlps[id as usize].pieces as u32;
                    if !super::dll::acked(seq, n, s) {
                        break;
                    }
                    self.dirs[di].replay.pop(n);
                    self.release(id);
                    popped += 1;
                }
                let dir = &mut self.dirs[di];
                if dir.replay.released(popped) {
                    // The replay timer restarts if TLPs remain, else stops (for a
                    // burst still on the wire, from its last piece: see `burst`).
                    if dir.replay.is_empty() {
                        dir.replay.deadline = None;
                    } else if self.bursts_on() {
                        let from = self.replay_restart(d, cx.now());
                        self.arm_replay_at(d, from, cx);
                    } else {
                        self.arm_replay(d, cx);
                    }
                }
                if matches!(dl, Dllp::Nak(_)) && !self.dirs[di].replay.is_empty() {
                    self.start_replay(d, cx);
                }
                self.try_send(d, cx);
            }
            Dllp::Fc {
                kind,
                class,
                hdr,
                data,
            } => {
                let c = class as usize % 3;
                let dir = &mut self.dirs[di];
                if kind == FcKind::UpdateFc || !dir.up {
                    dir.tx_fc.advertised(c, hdr, data, kind != FcKind::UpdateFc);
                }
                if kind == FcKind::InitFc2 {
                    dir.init_seen += 1;
                    if dir.init_seen >= 3 {
                        dir.up = true;
                    }
                }
                self.try_send(d, cx);
            }
        }
    }

    pub(crate) fn start_replay(&mut self, d: u16, cx: &mut Context<'_, PackedEv>) {
        let dir = &mut self.dirs[d as usize];
        // REPLAY_NUM rolled over: the physical layer retrains the link (Recovery);
        // both directions carry nothing for `retrain_time`.
        let retrain = dir.replay.start();
        if retrain {
            dir.counters.retrains += 1;
        }
        if retrain {
            let until = cx.now().as_ps() + self.cfg.retrain_time.as_ps();
            for x in [d as usize, (d ^ 1) as usize] {
                let t = &mut self.dirs[x];
                t.free_at = t.free_at.max(t.timing.ps_to_units(until));
                t.free_at_ps = t.timing.units_to_ps_ceil(t.free_at);
            }
        }
        self.arm_replay(d, cx);
        // The transmitter's port (it receives on the other direction) logs the rollover.
        if retrain {
            if let Some(f) = self.dirs[(d ^ 1) as usize].rx_func {
                self.signal_correctable(f, AER_CORR_REPLAY_ROLLOVER, cx);
            }
        }
    }

    /// (Re)starts the replay timer: the deadline moves; at most one event is pending,
    /// and it re-arms itself when it finds the deadline later than its own time.
    pub(crate) fn arm_replay(&mut self, d: u16, cx: &mut Context<'_, PackedEv>) {
        self.arm_replay_at(d, cx.now(), cx);
    }

    /// (Re)starts the replay timer from `from`.
    pub(crate) fn arm_replay_at(&mut self, d: u16, from: SimTime, cx: &mut Context<'_, PackedEv>) {
        if let Some(at) = self.dirs[d as usize].replay.arm(from) {
            cx.schedule_at(at, Ev::ReplayTimer(d));
        }
    }

    /// The receiver of `d` frees credits of class `c`: `hdr` headers (TLPs) and
    /// `data` data credits.
    pub(crate) fn return_credits(
        &mut self,
        d: u16,
        c: usize,
        hdr: u64,
        data: u64,
        cx: &mut Context<'_, PackedEv>,
    ) {
        // A transmitter short of what its largest TLP needs gets UpdateFC now: for
        // posted writes and completions in burst mode, a whole burst.
        let burst = match c {
            P => self.burst_max as u64,
            CPL => self.cpl_burst_max as u64,
            _ => 1,
        };
        let mps_credits = (self.cfg.mps as u64).div_ceil(16) * burst;
        let dir = &mut self.dirs[d as usize];
        if !dir.finite(c) {
            return; // infinite: nothing to advertise
        }
        // Credits the transmitter still had before this release.
        let (avail_h, avail_d) = dir.rx_fc.available(c);
        dir.rx_fc.release(c, hdr, data);
        dir.fc_refresh[c] = 0;
        let urgent = (dir.rx_buf.hdr[c] != 0 && avail_h < burst)
            || (dir.rx_buf.data[c] != 0 && avail_d < mps_credits);
        if urgent {
            if let Some(k) = dir.rx_fc_timer[c].take() {
                cx.cancel(k);
            }
            self.send_update_fc(d, c, cx);
        } else if dir.rx_fc_timer[c].is_none() {
            let f = dir.fc_ps;
            dir.rx_fc_timer[c] =
                Some(cx.schedule_in(SimDuration::from_ps(f), Ev::FcTimer(d, c as u8)));
        }
    }

    pub(crate) fn send_update_fc(&mut self, d: u16, c: usize, cx: &mut Context<'_, PackedEv>) {
        self.send_update_fc_as(d, c, false, cx);
    }

    /// [`Engine::send_update_fc`]; with `background` (the periodic refresh), the
    /// UpdateFC's arrival is a background event.
    pub(crate) fn send_update_fc_as(
        &mut self,
        d: u16,
        c: usize,
        background: bool,
        cx: &mut Context<'_, PackedEv>,
    ) {
        self.dirs[d as usize].fc_sent_ps[c] = cx.now().as_ps();
        let (hdr, data) = self.dirs[d as usize].rx_fc.limits(c);
        let dl = Dllp::Fc {
            kind: FcKind::UpdateFc,
            class: c as u8,
            hdr,
            data,
        };
        self.queue_dllp_as(d ^ 1, dl, false, background, cx);
        if self.cfg.dllp_error_rate > 0.0 {
            // DLLPs can be lost: repeat the (cumulative, idempotent) UpdateFC like the
            // spec's periodic FC update, until it was sent 8 times unchanged (then the
            // link idles; a loss probability p leaves a stall with probability p^8).
            let dir = &mut self.dirs[d as usize];
            if dir.rx_fc_timer[c].is_none() && dir.fc_refresh[c] < 8 {
                dir.fc_refresh[c] += 1;
                let f = dir.fc_ps;
                dir.rx_fc_timer[c] =
                    Some(cx.schedule_in(SimDuration::from_ps(4 * f), Ev::FcTimer(d, c as u8)));
            }
        }
    }

    /// The periodic UpdateFC of the receiver of `d`: every finite class that went a
    /// whole period without one gets one now; the next check is due when the earliest
    /// class's period ends.
    #[cold]
    #[inline(never)]
    pub(crate) fn fc_refresh(&mut self, d: u16, cx: &mut Context<'_, PackedEv>) {
        let period = self.cfg.fc_update_period.as_ps();
        let now = cx.now().as_ps();
        // UpdateFC goes out on the other direction; it waits while that one sleeps.
        let up = (d ^ 1) as usize;
        if self.dirs[up].aspm != 0 && self.low_power(up, now).any() {
            cx.schedule_background_at(SimTime::from_ps(now + period), Ev::FcRefresh(d));
            return;
        }
        for c in 0..3 {
            let dir = &self.dirs[d as usize];
            if dir.finite(c) && dir.fc_sent_ps[c] + period <= now {
                // Maintenance: its arrival is no work a run waits for (with a long
                // propagation delay, refreshes in flight would otherwise never let
                // an idle fabric be idle).
                self.send_update_fc_as(d, c, true, cx);
            }
        }
        let dir = &self.dirs[d as usize];
        if let Some(next) = dir
            .finite_classes()
            .map(|c| dir.fc_sent_ps[c] + period)
            .min()
        {
            cx.schedule_background_at(SimTime::from_ps(next), Ev::FcRefresh(d));
        }
    }

    /// The TLP leaves the receive buffer it sat in: those credits return. Returns the
    /// direction it had arrived on (NONE if it held no buffer).
    #[inline]
    pub(crate) fn leave_ingress(&mut self, id: u32, cx: &mut Context<'_, PackedEv>) -> u32 {
        let (ing, c, n, dc) = {
            let t = &self.pool.tlps[id as usize];
            (t.ingress, t.class(), t.pieces as u64, t.data_credits())
        };
        if ing == NO_DIR {
            return NONE;
        }
        self.pool.tlps[id as usize].ingress = NO_DIR;
        self.return_credits(ing, c, n, dc, cx);
        ing as u32
    }
}

impl Engine {
    /// Every direction's counters at `now` (ps): a low-power state still going on
    /// counts as entered, with its residency so far.
    pub(crate) fn dir_counters(&self, now: u64) -> Vec<(String, DirCounters)> {
        (0..self.dirs.len())
            .map(|d| {
                let mut c = self.dirs[d].counters;
                let st = self.low_power(d, now);
                if let Some(l0s_at) = st.l0s {
                    c.l0s_entries += 1;
                    c.l0s_ps += st.l1.unwrap_or(now) - l0s_at;
                }
                if let Some(l1_at) = st.l1 {
                    c.l1_entries += 1;
                    c.l1_ps += now - l1_at;
                }
                (self.dirs[d].name.clone(), c)
            })
            .collect()
    }
}

pub(crate) fn dllp_repr(d: Dllp) -> DllpRepr {
    match d {
        Dllp::Ack(s) => DllpRepr::Ack {
            seq: SeqNum::from_bits_truncate(s as u16),
        },
        Dllp::Nak(s) => DllpRepr::Nak {
            seq: SeqNum::from_bits_truncate(s as u16),
        },
        Dllp::Fc {
            kind,
            class,
            hdr,
            data,
        } => DllpRepr::Fc(FcDllp {
            kind,
            class: [DFc::P, DFc::Np, DFc::Cpl][class as usize % 3],
            vc: 0,
            hdr_scale: FcScale::NotActive,
            hdr_fc: (hdr & 0xff) as u8,
            data_scale: FcScale::NotActive,
            data_fc: (data & 0xfff) as u16,
        }),
    }
}

#[cfg(test)]
mod tests {
    use crate::params::SimConfig;
    use crate::timed::testkit::{build, dir, host_write, tlp_times, RC_EP};
    use crate::timed::tlp::P;
    use crate::timed::trace::TraceKind;
    use pcielab_sim::{SimDuration, SimTime};

    const IDLE: SimTime = SimTime::from_ps(1 << 50);

    #[test]
    fn a_tlp_takes_its_wire_time_and_the_receiver_acknowledges_it() {
        let mut s = build(RC_EP, SimConfig::default());
        let (down, up) = (dir(&s, "rc", "ep"), dir(&s, "ep", "rc"));
        let bar = s.bar("ep", 0).unwrap();
        let before = s.engine().dirs[down as usize].counters;
        let acks = s.engine().dirs[up as usize].counters.acks;
        host_write(&mut s, bar, &[7; 64]);
        s.run_until_idle(IDLE);
        let e = s.engine();
        let d = &e.dirs[down as usize];
        assert_eq!(d.counters.tlps - before.tlps, 1);
        assert_eq!(d.counters.payload_bytes - before.payload_bytes, 64);
        // The direction carried that TLP only (a 3- or 4-DW header and 64 bytes, framed),
        // for its wire time.
        let header = if bar > u32::MAX as u64 { 16 } else { 12 };
        let wire = d.timing.tlp_wire_bytes(header + 64);
        assert_eq!(d.counters.tlp_bytes - before.tlp_bytes, wire);
        assert_eq!(d.counters.wire_bytes - before.wire_bytes, wire);
        let t0 = *tlp_times(&s, down).last().unwrap();
        let end = d
            .timing
            .units_to_ps_ceil(d.timing.ps_to_units(t0) + d.timing.units(wire));
        assert_eq!(d.counters.busy_ps - before.busy_ps, end - t0);
        // The receiver acknowledged it once it had it all, and the transmitter's replay
        // buffer let it go.
        assert_eq!(e.dirs[up as usize].counters.acks, acks + 1);
        let tr = e.trace.as_ref().unwrap();
        let ack_at = tr
            .records
            .iter()
            .filter(|r| r.dir == up && matches!(r.kind, TraceKind::Dllp) && r.time_ps > t0)
            .map(|r| r.time_ps)
            .next()
            .expect("an ACK");
        assert!(
            ack_at >= end + d.prop_ps,
            "ACK at {ack_at} before arrival {end}"
        );
        assert!(d.replay.is_empty());
    }

    #[test]
    fn a_transmitter_without_credits_holds_its_tlp_until_the_receiver_advertises_more() {
        let mut s = build(RC_EP, SimConfig::default());
        let down = dir(&s, "rc", "ep");
        let bar = s.bar("ep", 0).unwrap();
        let sent = s.engine().dirs[down as usize].counters.tlps;
        // The receiver's posted buffer looks full to the transmitter.
        s.sim.world_mut().dirs[down as usize]
            .tx_fc
            .consume(P, 1 << 20, 1 << 20);
        host_write(&mut s, bar, &[1; 64]);
        s.run_for(SimDuration::from_us(20));
        let d = &s.engine().dirs[down as usize];
        assert_eq!(d.counters.tlps, sent, "sent without credits");
        assert_eq!(d.q[P].len(), 1, "held in the posted queue");
        // An UpdateFC that covers it lets it go.
        s.sim.process(|e, cx| {
            e.dirs[down as usize]
                .tx_fc
                .advertised(P, 1 << 21, 1 << 21, false);
            e.try_send(down, cx);
        });
        s.run_until_idle(IDLE);
        let d = &s.engine().dirs[down as usize];
        assert_eq!(d.counters.tlps, sent + 1);
        assert!(d.q[P].is_empty());
    }
}
