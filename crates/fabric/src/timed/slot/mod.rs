//! The device slot: where a device model sits in the simulator. The slot holds the
//! model and its state ([`EpState`]): its functions by index, its DMA engine's policy
//! and ops (the engine itself is `dma`), requests it refused (backpressure), its
//! timing's datapaths, its counters. Calls into the model go through
//! [`Engine::call_ep_fn`], which applies the commands the model gave afterwards.

use super::endpoint::{Endpoint, EpCmd, EpCx, Incoming};
use super::engine::Engine;
use super::event::Ev;
use super::fault::FaultKind;
use super::node::state::NodeKind;
use super::packed::PackedEv;
use super::poison::state::Poison;
use super::pool::put_in_slot;
use super::slot::state::DmaDir;
use super::tlp::{Dest, Kind, Tlp};
use crate::functional::{FnId, Origin, RouteError};
use pcielab_sim::{Context, SimDuration, SimTime};
use pcielab_wire::{Bdf, CplStatus};

pub(crate) mod state;
pub(crate) use state::*;

impl Engine {
    /// A frame out of `node`'s MAC: to the device at the other end of its cable, at
    /// once (the sender timed it on the wire); without a cable it is dropped, counted
    /// and the first one reported.
    pub(crate) fn ethernet_send(
        &mut self,
        node: u32,
        frame: Vec<u8>,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let peer = match &self.nodes[node as usize].kind {
            NodeKind::Ep(ep) => ep.cable,
            _ => super::tlp::NONE,
        };
        if peer == super::tlp::NONE {
            self.eth.dropped += 1;
            if self.eth.dropped == 1 {
                let name = &self.nodes[node as usize].name;
                self.fault(
                    FaultKind::DeviceCommand,
                    format!(
                        "{name}: an Ethernet frame out of a MAC with no cable (dropped, counted)"
                    ),
                );
            }
            return;
        }
        let eth = &mut self.eth;
        let slot = put_in_slot(&mut eth.frames, &mut eth.free, Some((peer, frame)));
        cx.schedule_at(cx.now(), Ev::EthFrame(slot));
    }

    /// A frame reaches the device at its cable's end.
    pub(crate) fn ethernet_arrive(&mut self, slot: u32, cx: &mut Context<'_, PackedEv>) {
        let Some((peer, frame)) = self
            .eth
            .frames
            .get_mut(slot as usize)
            .and_then(Option::take)
        else {
            return;
        };
        self.eth.free.push(slot);
        match self.call_ep(peer, cx, |m, cx| m.ethernet_receive(frame, cx)) {
            Some(true) => self.eth.delivered += 1,
            _ => self.eth.dropped += 1,
        }
    }

    pub(crate) fn call_ep<R>(
        &mut self,
        node: u32,
        cx: &mut Context<'_, PackedEv>,
        f: impl FnOnce(&mut dyn Endpoint, &mut EpCx<'_>) -> R,
    ) -> Option<R> {
        self.call_ep_fn(node, 0, cx, f)
    }

    /// Calls `node`'s device model about its function `index` (see `EpState::funcs`).
    pub(crate) fn call_ep_fn<R>(
        &mut self,
        node: u32,
        index: u16,
        cx: &mut Context<'_, PackedEv>,
        f: impl FnOnce(&mut dyn Endpoint, &mut EpCx<'_>) -> R,
    ) -> Option<R> {
        let mut cmds = std::mem::take(&mut self.cmds);
        let func = self.fn_of(node, index);
        // Function 0's ID is cached; others are looked up (bus numbers can change).
        let bdf = match (&self.nodes[node as usize].kind, func) {
            (NodeKind::Ep(ep), _) if index == 0 => ep.bdf,
            (_, Some(f)) => self.fabric.bdf(f),
            (_, None) => self.rc.bdf,
        };
        let r = {
            let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind else {
                self.cmds = cmds;
                return None;
            };
            let ep = &mut **ep;
            let Some(model) = ep.model.as_mut() else {
                self.cmds = cmds;
                return None;
            };
            let config = func
                .and_then(|f| self.fabric.functions.get_mut(f.0 as usize))
                .map(|f| &mut f.config);
            let mut ecx = EpCx::new(
                cx.now(),
                (index, bdf),
                &mut cmds,
                &mut ep.state,
                config,
                &mut self.pool.spare_bufs,
            );
            f(&mut **model, &mut ecx)
        };
        // With tag ranges per function, the engine's arbiter sees every read the call
        // queued before it sends the first request (so the functions' requests go
        // out round-robin from the start).
        let part = self.hold_reads(node, true);
        let held = self.scatter_max > 1 && self.hold_scatter(node, true);
        let mut acting = index;
        for c in cmds.drain(..) {
            match c {
                EpCmd::As(i) => acting = i,
                c => self.apply(node, acting, c, cx),
            }
        }
        self.cmds = cmds;
        if part && self.hold_reads(node, false) {
            self.issue_reads(node, cx);
        }
        if held && self.hold_scatter(node, false) {
            self.send_held_reads(node, cx);
        }
        Some(r)
    }

    /// Burst mode with scatter bursts: holds (`true`) or releases one hold of
    /// `node`'s read requests (see `EpState::rd_hold`); true if held, and on release
    /// if no hold is left. Otherwise false, nothing held.
    #[inline]
    pub(crate) fn hold_scatter(&mut self, node: u32, hold: bool) -> bool {
        if self.scatter_max <= 1 {
            return false;
        }
        let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind else {
            return false;
        };
        step_hold(&mut ep.rd_hold, hold)
    }

    /// Burst mode with scatter bursts: sends the read requests `node` holds before
    /// command `c` when it is not one that asks for reads (so that no other TLP of
    /// the device passes them).
    #[cold]
    #[inline(never)]
    fn flush_held_reads(&mut self, node: u32, c: &EpCmd, cx: &mut Context<'_, PackedEv>) {
        let reads = matches!(
            c,
            EpCmd::Timer { .. } | EpCmd::DmaRead { .. } | EpCmd::DmaReadSg { .. }
        );
        if !reads
            && matches!(&self.nodes[node as usize].kind,
                NodeKind::Ep(ep) if !ep.held_reads.is_empty())
        {
            self.send_held_reads(node, cx);
        }
    }

    /// With tag ranges per function: holds (`true`) or releases one hold of
    /// `node`'s read requests; true if the engine is partitioned and (on release)
    /// no hold is left. Without them: false, nothing held.
    fn hold_reads(&mut self, node: u32, hold: bool) -> bool {
        let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind else {
            return false;
        };
        let Some(p) = ep.part.as_mut() else {
            return false;
        };
        step_hold(&mut p.holds, hold)
    }

    /// Function `index` of `node`'s device.
    #[inline]
    pub(crate) fn fn_of(&self, node: u32, index: u16) -> Option<FnId> {
        match &self.nodes[node as usize].kind {
            NodeKind::Ep(ep) if index > 0 => ep.funcs.get(index as usize).copied(),
            _ => self.nodes[node as usize].func,
        }
    }

    /// The index of function `f` on `node`'s device.
    pub(crate) fn fn_index(&self, node: u32, f: FnId) -> Option<u16> {
        match &self.nodes[node as usize].kind {
            NodeKind::Ep(ep) => ep.funcs.iter().position(|&g| g == f).map(|i| i as u16),
            _ => None,
        }
    }

    /// Refreshes every device's list of functions (VFs come and go with VF Enable).
    pub(crate) fn refresh_funcs(&mut self) {
        for n in 0..self.nodes.len() {
            if let NodeKind::Ep(ep) = &self.nodes[n].kind {
                let list = self
                    .fabric
                    .device_functions(crate::topology::NodeId(n as u32));
                if ep.funcs != list {
                    if let NodeKind::Ep(ep) = &mut self.nodes[n].kind {
                        ep.funcs = list;
                    }
                }
            }
        }
    }

    pub(crate) fn apply(
        &mut self,
        node: u32,
        acting: u16,
        c: EpCmd,
        cx: &mut Context<'_, PackedEv>,
    ) {
        if self.scatter_max > 1 {
            self.flush_held_reads(node, &c, cx);
        }
        match c {
            EpCmd::Timer { at, token } => {
                cx.schedule_at(at, Ev::EpTimer(node, token));
            }
            EpCmd::DmaRead {
                id,
                addr,
                len,
                pasid,
            } => {
                let (at, none) = ((addr, len, pasid), Vec::new());
                self.new_dma((node, acting), id, DmaDir::Read, at, none, cx)
            }
            EpCmd::DmaWrite {
                id,
                addr,
                data,
                poisoned,
                pasid,
            } => {
                let len = data.len() as u64;
                let dir = DmaDir::Write { poisoned };
                self.new_dma((node, acting), id, dir, (addr, len, pasid), data, cx);
            }
            EpCmd::DmaReadSg { id, segs } => self.new_sg_dma((node, acting), id, segs, None, cx),
            EpCmd::DmaWriteSg { id, segs, data } => {
                self.new_sg_dma((node, acting), id, segs, Some(data), cx)
            }
            EpCmd::Complete {
                ticket,
                data,
                poisoned,
            } => {
                let tk = match &mut self.nodes[node as usize].kind {
                    NodeKind::Ep(ep) => ep.tickets.remove(&ticket.0),
                    _ => None,
                };
                if let Some((req, tag, addr, len, kind, func)) = tk {
                    let (me, origin) = self.completer_of(node, func);
                    // The request being answered, as the completion code expects it.
                    let t = Tlp {
                        completer: me,
                        tag,
                        dest: Dest::Rc,
                        ..Tlp::new(kind, req, addr, len)
                    };
                    if matches!(kind, Kind::IoRd | Kind::IoWr) {
                        let d = (kind == Kind::IoRd).then_some(&data[..]);
                        let ep = poisoned && kind == Kind::IoRd;
                        self.send_io_completion(origin, me, &t, CplStatus::Sc, d, ep, cx);
                    } else if data.len() > len as usize {
                        // A device bug: more data than asked. Send it as one CplD; the
                        // requester classifies it as Malformed.
                        let p = self.pool.alloc_payload(&data);
                        let mut c = t.clone();
                        c.kind = Kind::CplD;
                        c.len = data.len() as u32;
                        c.set_byte_count(len.min(4096) as u16);
                        c.data = p;
                        c.poisoned = poisoned;
                        if let Err(e) = self.inject(origin, c, req, cx) {
                            self.fault(
                                FaultKind::NotRoutable,
                                format!("completion not routable: {e}"),
                            );
                        }
                    } else {
                        let mut d = data;
                        d.resize(len as usize, 0);
                        let poison = Poison::all_if(poisoned);
                        self.send_completions(origin, me, &t, CplStatus::Sc, &d, poison, cx);
                    }
                } else {
                    self.fault(
                        FaultKind::DeviceCommand,
                        format!("completion for unknown ticket {}", ticket.0),
                    );
                }
            }
            EpCmd::Msix(v) => {
                if let Some(f) = self.fn_of(node, acting) {
                    self.send_msi(node, f, v as u32, true, cx);
                }
            }
            EpCmd::Msi(v) => {
                if let Some(f) = self.fn_of(node, acting) {
                    self.send_msi(node, f, v as u32, false, cx);
                }
            }
            EpCmd::Intx(assert) => self.device_intx(node, assert, cx),
            EpCmd::Raw(bytes) => self.send_raw(node, bytes, cx),
            EpCmd::Atomic { id, addr, op } => self.new_atomic(node, id, addr, *op, cx),
            EpCmd::Pme => {
                if let Some(f) = self.nodes[node as usize].func {
                    self.device_pme(f, cx);
                }
            }
            EpCmd::Ltr(snoop, no_snoop) => self.send_ltr(node, (snoop, no_snoop), cx),
            EpCmd::PmeToAck => {
                if self.turn_off_held.remove(&node) {
                    self.send_pme_to_ack(node, cx);
                } else {
                    let me = self.ep_bdf(node);
                    self.fault(
                        FaultKind::PowerManagement,
                        format!("{me}: PME_TO_Ack without a PME_Turn_Off to answer"),
                    );
                }
            }
            EpCmd::Vendor(msg) => {
                let Some(f) = self.nodes[node as usize].func else {
                    return;
                };
                let me = self.ep_bdf(node);
                if let Err(e) =
                    self.send_vendor(Origin::Function(f), me, &msg, SimDuration::ZERO, cx)
                {
                    let name = &self.nodes[node as usize].name;
                    self.fault(FaultKind::VendorMessage, format!("{name}: {e}"));
                }
            }
            EpCmd::Ready => self.device_ready(node, cx),
            EpCmd::Ethernet(frame) => self.ethernet_send(node, frame, cx),
            other => {
                let name = &self.nodes[node as usize].name;
                self.fault(
                    FaultKind::DeviceCommand,
                    format!("{name}: the simulator does not carry out {other:?}"),
                );
            }
        }
    }

    /// What a device model is asked before it takes request `id` to its BAR.
    pub(crate) fn incoming(&self, id: u32) -> Option<Incoming> {
        let t = &self.pool.tlps[id as usize];
        let Dest::Bar { bar, offset, .. } = t.dest else {
            return None;
        };
        match t.kind {
            Kind::MWr if !t.poisoned => Some(Incoming::Write {
                bar,
                offset,
                len: t.len,
            }),
            Kind::MRd => Some(Incoming::Read {
                bar,
                offset,
                len: t.len,
            }),
            _ => None,
        }
    }

    /// Backpressure: true if `node`'s device model does not take request `id` now
    /// (it refused it, or holds older ones). The request stays in the receive buffer
    /// of the device's port, its credits with it, until [`EpCmd::Ready`].
    #[inline(never)]
    pub(crate) fn device_holds(
        &mut self,
        node: u32,
        id: u32,
        cx: &mut Context<'_, PackedEv>,
    ) -> bool {
        let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind else {
            return false;
        };
        if ep.model.is_none() {
            return false;
        }
        if !ep.held.is_empty() {
            // Nothing passes a held request (posted writes stay in order; reads do
            // not pass writes).
            ep.held.push_back(id);
            return true;
        }
        let Some(what) = self.incoming(id) else {
            return false;
        };
        if self.call_ep(node, cx, |m, cx| m.accept(what, cx)) == Some(false) {
            if let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind {
                ep.held.push_back(id);
                ep.stats.refusals += 1;
            }
            return true;
        }
        false
    }

    /// `node`'s device can take requests again: offer the held ones, oldest first.
    #[cold]
    #[inline(never)]
    pub(crate) fn device_ready(&mut self, node: u32, cx: &mut Context<'_, PackedEv>) {
        match &mut self.nodes[node as usize].kind {
            NodeKind::Ep(ep) if !ep.draining => ep.draining = true,
            _ => return,
        }
        while let Some(id) = match &self.nodes[node as usize].kind {
            NodeKind::Ep(ep) => ep.held.front().copied(),
            _ => None,
        } {
            if let Some(what) = self.incoming(id) {
                if self.call_ep(node, cx, |m, cx| m.accept(what, cx)) == Some(false) {
                    if let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind {
                        ep.stats.refusals += 1;
                    }
                    break;
                }
            }
            if let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind {
                ep.held.pop_front();
            }
            self.consume_taken(id, cx);
        }
        if let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind {
            ep.draining = false;
        }
    }

    /// When a request or completion arriving at `at` reaches a device with its own
    /// timing (see [`pcielab_device::DeviceTiming`]): a BAR read answers after the
    /// device's read time, a BAR write and a DMA completion pass its receive
    /// datapath first.
    pub(crate) fn device_arrival(
        &mut self,
        dest: Dest,
        kind: Kind,
        len: u64,
        at: SimTime,
    ) -> SimTime {
        match (dest, kind) {
            (Dest::Bar { node, .. }, Kind::MRd | Kind::IoRd) => {
                match &self.nodes[node as usize].kind {
                    NodeKind::Ep(ep) if !ep.timing.is_none() => {
                        let c = ep.timing.read_cycles as u64 + ep.timing.data_cycles(len);
                        at + ep.timing.time(c)
                    }
                    _ => at,
                }
            }
            (Dest::Bar { node, .. }, Kind::MWr) => {
                let c = self.nodes[node as usize].kind.ep_timing().write_cycles;
                self.device_rx(node, at, (c, len))
            }
            (Dest::Dma { node }, Kind::Cpl | Kind::CplD) => {
                let c = self.nodes[node as usize].kind.ep_timing().completion_cycles;
                self.device_rx(node, at, (c, len))
            }
            _ => at,
        }
    }

    /// The receive datapath of `node`'s device takes `cycles` cycles plus those of
    /// `bytes` bytes, from `from` or when it is free: when it is done (`from` without
    /// device timing).
    pub(crate) fn device_rx(
        &mut self,
        node: u32,
        from: SimTime,
        (cycles, bytes): (u32, u64),
    ) -> SimTime {
        match &mut self.nodes[node as usize].kind {
            NodeKind::Ep(ep) if !ep.timing.is_none() => {
                let c = cycles as u64 + ep.timing.data_cycles(bytes);
                let at = ep.rx_free.max(from) + ep.timing.time(c);
                ep.rx_free = at;
                at
            }
            _ => from,
        }
    }

    /// Like [`Engine::inject`], for a TLP that `node`'s DMA engine sends: with device
    /// timing, it leaves once the device's transmit datapath has moved it (its
    /// `request_cycles` plus its data's cycles, after the TLPs before it). Inlined like
    /// `inject`, with the timed case out of line.
    #[inline(always)]
    pub(crate) fn inject_device(
        &mut self,
        node: u32,
        origin: Origin,
        t: Tlp,
        dest_id: Bdf,
        cx: &mut Context<'_, PackedEv>,
    ) -> Result<u32, RouteError> {
        if self.timed_devices && !self.nodes[node as usize].kind.ep_timing().is_none() {
            return self.inject_device_timed(node, origin, t, dest_id, cx);
        }
        self.inject(origin, t, dest_id, cx)
    }

    #[cold]
    #[inline(never)]
    pub(crate) fn inject_device_timed(
        &mut self,
        node: u32,
        origin: Origin,
        mut t: Tlp,
        dest_id: Bdf,
        cx: &mut Context<'_, PackedEv>,
    ) -> Result<u32, RouteError> {
        let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind else {
            return self.inject(origin, t, dest_id, cx);
        };
        let bytes = if t.kind == Kind::MWr { t.len as u64 } else { 0 };
        let cycles = ep.timing.request_cycles as u64 + ep.timing.data_cycles(bytes);
        let at = ep.tx_free.max(cx.now()) + ep.timing.time(cycles);
        ep.tx_free = at;
        let route = self.route(origin, t.kind, t.addr, dest_id)?;
        self.at_source(origin, &mut t, (route.1 > 0).then_some(route.0[0]));
        let id = self.place(t, route);
        cx.schedule_at(at, Ev::HostSend(id));
        Ok(id)
    }

    /// A device model will complete request `t` later under ticket `k`.
    pub(crate) fn park_ticket(&mut self, (node, func): (u32, u16), k: u64, t: &Tlp) {
        if let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind {
            ep.tickets
                .insert(k, (t.requester, t.tag, t.addr, t.len, t.kind, func));
        }
    }

    /// The completer ID and origin of `node`'s function `func` (its index).
    pub(crate) fn completer_of(&self, node: u32, func: u16) -> (Bdf, Origin) {
        match self.fn_of(node, func) {
            Some(f) if func > 0 => (self.fabric.bdf(f), Origin::Function(f)),
            _ => (self.ep_bdf(node), self.origin_of(node)),
        }
    }
}

/// Adds a hold to counter `holds` (`hold`; then always true) or takes one away (true
/// when none is left).
#[inline]
fn step_hold(holds: &mut u32, hold: bool) -> bool {
    if hold {
        *holds += 1;
        true
    } else {
        *holds = holds.saturating_sub(1);
        *holds == 0
    }
}
