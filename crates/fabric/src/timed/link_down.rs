//! Links going down and coming back (PCIe Base Spec 2.9, "Link Status Dependencies").
//!
//! A link is *down* (DL_Down) from the moment it fails or is disabled until it has
//! trained again and finished the InitFC handshake. While it is down:
//!
//! * neither direction transmits; what was queued, waiting in the replay buffer or on
//!   the wire is lost (arrivals sent before the failure are discarded);
//! * the Downstream Port above it completes every non-posted request routed onto the
//!   link with Unsupported Request (Completer Abort or Unsupported Request while DPC
//!   contains the link, as its Completion Control says) and discards posted requests
//!   and completions;
//! * the component below is reset (a DL_Down Upstream Port is a hot reset): every
//!   function's configuration space returns to its defaults (sticky bits, such as the
//!   AER status, keep their values), a device's DMA state is dropped and its model is
//!   told ([`super::Endpoint::reset`]); a switch's downstream links go down with it and
//!   train again once it is back;
//! * the port's Data Link Layer Link Active bit (Link Status) is clear, and the INTx
//!   virtual wires the link had asserted are deasserted.
//!
//! A link is held down for reasons (`HELD_*`): a failure outside the fabric
//! ([`super::FabricSim::link_down`] until [`super::FabricSim::link_up`]), Downstream
//! Port Containment (until software clears DPC Trigger Status), a parent switch in
//! reset, a removed device (hot-plug), and host software through the port above: its
//! Secondary Bus Reset bit (Bridge Control bit 6: a hot reset of the link and what is
//! below, PCIe Base Spec 7.5.1.3.13) or Link Disable bit (Link Control bit 4), each
//! until cleared, the Secondary Bus Reset bit of a switch upstream port (its
//! downstream ports are reset and every link below them held), and a hot-plug slot's
//! Power Controller Control (powered off). Once no reason is
//! left it trains for `SimConfig::link_training_time`, then runs the InitFC handshake
//! as at power-on. A failure or a removal, but not a link that DPC or software took
//! down, is a Surprise Down error for the port above (AER uncorrectable bit 5).

use super::engine::Engine;
use super::event::{Dllp, Ev};
use super::node::state::NodeKind;
use super::packed::PackedEv;
use super::regs::std_cap;
use super::tlp::{Dest, Route, Tlp, NP};
use crate::functional::{FnId, Origin, Role};
use pcielab_sim::{Context, SimTime};
use pcielab_wire::dllp::FcKind;
use pcielab_wire::{Bdf, CplStatus};

/// Held down by a failure outside the fabric (a surprise link down).
pub(crate) const HELD_SURPRISE: u8 = 1;
/// Held down (disabled) by Downstream Port Containment.
pub(crate) const HELD_DPC: u8 = 2;
/// Held down because the switch above it is in reset.
pub(crate) const HELD_PARENT: u8 = 4;
/// Held down because its device was removed from the slot (hot-plug).
pub(crate) const HELD_ABSENT: u8 = 8;
/// Held in hot reset by the port's Secondary Bus Reset bit.
pub(crate) const HELD_SBR: u8 = 16;
/// Held disabled by the port's Link Disable bit.
pub(crate) const HELD_DISABLED: u8 = 32;
/// Held in hot reset by the Secondary Bus Reset bit of the switch upstream port above
/// the link's downstream port.
pub(crate) const HELD_UP_SBR: u8 = 64;
/// Held down because its hot-plug slot is powered off (Power Controller Control).
pub(crate) const HELD_POWER: u8 = 128;

/// Bridge Control: Secondary Bus Reset.
const BRCTL_SBR: u16 = 1 << 6;
/// Link Control: Link Disable.
const LNKCTL_DISABLE: u16 = 1 << 4;

/// AER Uncorrectable Error Status: Surprise Down Error.
pub(crate) const AER_SURPRISE_DOWN: u32 = 1 << 5;

/// Link Status: Data Link Layer Link Active.
const LNKSTA_DLLLA: u32 = 1 << 13;

impl Engine {
    /// The link of downward direction `d` goes down for reason `why` (see the module
    /// documentation). Already down: the reason is added and any training restarts
    /// once every reason is gone.
    pub(crate) fn take_link_down(&mut self, d: u16, why: u8, cx: &mut Context<'_, PackedEv>) {
        let d = d & !1;
        let di = d as usize;
        self.dirs[di].held |= why;
        if self.dirs[di].down {
            // Training (or already held): it starts over when released.
            self.dirs[di].train_gen = self.dirs[di].train_gen.wrapping_add(1);
            return;
        }
        self.dirs[di].counters.link_downs += 1;
        for x in [d, d | 1] {
            self.purge_direction(x, cx);
        }
        let port = self.dirs[di | 1].rx_func;
        if let Some(p) = port {
            self.set_link_active(p, false, cx);
        }
        // The port deasserts the INTx virtual wires its link had asserted.
        let mut wires: Vec<(u32, u32, u8)> = self
            .intx_wires
            .iter()
            .copied()
            .filter(|w| w.1 == (di | 1) as u32)
            .collect();
        wires.sort_unstable();
        let from = port.map_or(Bdf::from_raw(0), |p| self.fabric.bdf(p));
        for (node, ing, pin) in wires {
            self.intx_arrived(node, ing, from, 0x24 + pin - 1, cx);
        }
        // A failure (not a disabled link) is a Surprise Down error for the port; it may
        // trigger DPC, which then holds the link too.
        if why & (HELD_SURPRISE | HELD_ABSENT) != 0 {
            // A hot-plug slot with surprise removal expects it: no error.
            if let Some(p) = port.filter(|&p| !self.hotplug_surprise(p)) {
                self.signal_error(p, AER_SURPRISE_DOWN, false, None, cx);
            }
        }
        self.ltr_forget((di | 1) as u32, cx);
        let below = self.dirs[di].to;
        self.reset_component(below, cx);
        self.invalidate_routes();
    }

    /// After a configuration write to root port or switch downstream port `f`: its
    /// Secondary Bus Reset and Link Disable bits hold the link below it down while set
    /// and release it when cleared. For a switch upstream port, see
    /// [`Engine::upstream_sbr_written`].
    pub(crate) fn port_control_written(&mut self, f: FnId, cx: &mut Context<'_, PackedEv>) {
        if matches!(
            self.fabric.functions[f.0 as usize].role,
            Role::SwitchUpstream
        ) {
            self.upstream_sbr_written(f, cx);
            return;
        }
        let Some(x) = (0..self.dirs.len())
            .step_by(2)
            .find(|&x| self.dirs[x | 1].rx_func == Some(f))
        else {
            return;
        };
        let cs = &self.fabric.functions[f.0 as usize].config;
        let sbr = cs.read_u16(pcielab_config::header::reg::BRIDGE_CONTROL) & BRCTL_SBR != 0;
        let disabled = std_cap(&self.fabric, f, pcielab_config::caps::id::PCIE).is_some_and(|p| {
            cs.read_u16(p + pcielab_config::caps::pcie_reg::LNKCTL) & LNKCTL_DISABLE != 0
        });
        let off = self.slot_powered_off(f);
        for (on, why) in [
            (sbr, HELD_SBR),
            (disabled, HELD_DISABLED),
            (off, HELD_POWER),
        ] {
            let held = self.dirs[x].held & why != 0;
            if on && !held {
                self.take_link_down(x as u16, why, cx);
            } else if !on && held {
                self.release_link(x as u16, why, cx);
            }
        }
    }

    /// Secondary Bus Reset of switch upstream port `f` (Bridge Control bit 6) resets the
    /// switch's internal bus: when the bit becomes set, every downstream port of the
    /// switch returns to its defaults (as at a reset; sticky bits keep their values)
    /// and the link below each is in hot reset, with the component below it, until
    /// the bit is cleared. The upstream port and its own link are not affected.
    fn upstream_sbr_written(&mut self, f: FnId, cx: &mut Context<'_, PackedEv>) {
        let node = self.fabric.functions[f.0 as usize].node.0;
        let sbr = self.fabric.functions[f.0 as usize]
            .config
            .read_u16(pcielab_config::header::reg::BRIDGE_CONTROL)
            & BRCTL_SBR
            != 0;
        let links: Vec<usize> = (0..self.dirs.len())
            .step_by(2)
            .filter(|&x| self.dirs[x].from == node)
            .collect();
        let held = links.iter().any(|&x| self.dirs[x].held & HELD_UP_SBR != 0);
        if sbr && !held {
            for &x in &links {
                self.take_link_down(x as u16, HELD_UP_SBR, cx);
            }
            let ports: Vec<FnId> = links
                .iter()
                .filter_map(|&x| self.dirs[x | 1].rx_func)
                .collect();
            for &p in &ports {
                self.fabric.functions[p.0 as usize].config.reset();
            }
            self.invalidate_routes();
            for p in ports {
                self.after_config_write(p, cx);
            }
        } else if !sbr && held {
            for x in links {
                self.release_link(x as u16, HELD_UP_SBR, cx);
            }
        }
    }

    /// Reason `why` no longer holds the link of downward direction `d`: with no reason
    /// left it trains, and is up after `link_training_time`.
    pub(crate) fn release_link(&mut self, d: u16, why: u8, cx: &mut Context<'_, PackedEv>) {
        let di = (d & !1) as usize;
        if self.dirs[di].held & why == 0 {
            return;
        }
        self.dirs[di].held &= !why;
        if self.dirs[di].held != 0 || !self.dirs[di].down {
            return;
        }
        self.dirs[di].train_gen = self.dirs[di].train_gen.wrapping_add(1);
        let gen = self.dirs[di].train_gen;
        // Nothing sent before the failure may still be on the wire when it is up.
        let stale = self.dirs[di]
            .stale_until_ps
            .max(self.dirs[di | 1].stale_until_ps);
        let at = (cx.now() + self.cfg.link_training_time).max(SimTime::from_ps(stale));
        cx.schedule_at(at, Ev::LinkTrained(di as u16, gen));
    }

    /// Training of the link of downward direction `d` ended: DL_Up once the InitFC
    /// handshake is done (as at power-on); links below a switch that was in reset
    /// start training.
    pub(crate) fn link_trained(&mut self, d: u16, gen: u32, cx: &mut Context<'_, PackedEv>) {
        let di = (d & !1) as usize;
        if gen != self.dirs[di].train_gen || self.dirs[di].held != 0 || !self.dirs[di].down {
            return; // a stale training
        }
        for x in [di, di | 1] {
            self.dirs[x].down = false;
            let now = cx.now().as_ps();
            let t = &mut self.dirs[x];
            t.free_at = t.free_at.max(t.timing.ps_to_units(now));
            t.free_at_ps = t.timing.units_to_ps_ceil(t.free_at);
        }
        for x in [di, di | 1] {
            self.queue_init_fc(x);
        }
        self.invalidate_routes();
        self.try_send(di as u16, cx);
        self.try_send((di | 1) as u16, cx);
        if let Some(p) = self.dirs[di | 1].rx_func {
            self.set_link_active(p, true, cx);
        }
        let below = self.dirs[di].to;
        // The component below was reset: it initializes from now on.
        let ready = cx.now() + self.cfg.device_ready_time;
        self.ready_at[below as usize] = ready.as_ps();
        if matches!(self.nodes[below as usize].kind, NodeKind::Switch) {
            for x in (0..self.dirs.len()).step_by(2) {
                if self.dirs[x].from == below {
                    self.release_link(x as u16, HELD_PARENT, cx);
                }
            }
        }
    }

    /// The receiver of direction `x` advertises its buffers: InitFC1 and InitFC2 for
    /// P, NP and Cpl (0 = infinite), queued on the opposite direction.
    pub(crate) fn queue_init_fc(&mut self, x: usize) {
        for kind in [FcKind::InitFc1, FcKind::InitFc2] {
            for c in 0..3 {
                let dl = Dllp::Fc {
                    kind,
                    class: c as u8,
                    hdr: self.dirs[x].rx_buf.hdr[c],
                    data: self.dirs[x].rx_buf.data[c],
                };
                self.dirs[x ^ 1].dllq.push_back((dl, false));
            }
        }
    }

    /// Direction `x` goes down: its queues, replay buffer and DLLPs are dropped (the
    /// downward direction answers non-posted requests first), its data link and flow
    /// control state return to their power-on values.
    fn purge_direction(&mut self, x: u16, cx: &mut Context<'_, PackedEv>) {
        let xi = x as usize;
        let now = cx.now();
        {
            let dir = &mut self.dirs[xi];
            dir.down = true;
            dir.up = false;
            dir.init_seen = 0;
            dir.stale_until_ps = dir.stale_until_ps.max(dir.last_arrive_ps + 1);
            if let Some(s) = dir.stall_since.take() {
                dir.counters.credit_stall_ps += (now - s).as_ps();
            }
            if let Some(s) = dir.rstall_since.take() {
                dir.counters.replay_stall_ps += (now - s).as_ps();
            }
        }
        let mut queued: Vec<(u64, u32)> = Vec::new();
        for c in 0..3 {
            queued.extend(self.dirs[xi].q[c].drain(..).map(|(o, id, _)| (o, id)));
        }
        queued.sort_unstable();
        for (_, id) in queued {
            self.tlp_at_down_link(x, id, cx);
        }
        let replay = self.dirs[xi].replay.clear();
        for (_, id) in replay {
            self.release(id);
        }
        for c in 0..3 {
            if let Some(k) = self.dirs[xi].rx_fc_timer[c].take() {
                cx.cancel(k);
            }
        }
        // TLPs this direction delivered into a switch's receive buffer no longer hold
        // credits of the new link (its receiver starts from its full buffer).
        for t in self.pool.tlps.iter_mut() {
            if t.ingress == x {
                t.ingress = super::tlp::NO_DIR;
            }
        }
        let dir = &mut self.dirs[xi];
        dir.dllq.clear();
        dir.rx_seq = Default::default();
        dir.rx_ack_pending = false;
        dir.tx_fc = Default::default();
        dir.rx_fc = super::fc::RxCredits::new(&dir.rx_buf);
        dir.fc_refresh = [0; 3];
    }

    /// TLP `id` is routed onto direction `d` while its link is down: a non-posted
    /// request going down from a Downstream Port is completed by the port (Unsupported
    /// Request; while DPC contains the link, as its Completion Control says);
    /// everything else is discarded.
    pub(crate) fn tlp_at_down_link(&mut self, d: u16, id: u32, cx: &mut Context<'_, PackedEv>) {
        // (Counted in TLPs: a burst is several.)
        let pieces = self.pool.tlps[id as usize].pieces.max(1) as u64;
        self.dirs[d as usize].counters.link_down_drops += pieces;
        let port = self.dirs[(d ^ 1) as usize].rx_func;
        let t: &Tlp = &self.pool.tlps[id as usize];
        if d & 1 == 0 && t.class() == NP {
            if let Some(p) = port {
                let req = t.clone();
                let status = self.dpc_completion_status(p).unwrap_or(CplStatus::Ur);
                self.port_completes(p, &req, status, cx);
            }
        }
        self.discard(id, cx);
    }

    /// The component below a link that went down is reset (see the module
    /// documentation).
    fn reset_component(&mut self, node: u32, cx: &mut Context<'_, PackedEv>) {
        let funcs: Vec<FnId> = (0..self.fabric.functions.len())
            .filter(|&i| self.fabric.functions[i].node.0 == node)
            .map(|i| FnId(i as u32))
            .collect();
        for &f in &funcs {
            let func = &mut self.fabric.functions[f.0 as usize];
            func.config.reset();
            if let Some(m) = func.msix.as_mut() {
                m.reset();
            }
        }
        let tags = self.cfg.dma_tags;
        // Requests the device held back are lost with the reset, like every other TLP
        // in its buffers; the model hears of the reset.
        let held = match &mut self.nodes[node as usize].kind {
            NodeKind::Ep(ep) => std::mem::take(&mut ep.held),
            _ => Default::default(),
        };
        for id in held {
            self.discard(id, cx);
        }
        if let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind {
            for (i, op) in ep.ops.iter_mut().enumerate() {
                if op.live {
                    op.live = false;
                    op.buf = Vec::new();
                    ep.free_ops.push(i as u32);
                }
            }
            ep.tag_map.iter_mut().for_each(|e| *e = None);
            let (first, count) = ep.policy.tags.unwrap_or((0, tags));
            ep.free_tags = (first..first + count).rev().collect();
            ep.read_queue.clear();
            if let Some(p) = ep.part.as_mut() {
                for i in 0..p.free.len() as u16 {
                    p.refill(i, |_| false);
                    p.queues[i as usize].clear();
                }
                p.next = 0;
            }
            ep.tickets.clear();
            ep.raw_reads.clear();
            ep.intx_sent = false;
            // Cleared with the Command register, without a `bus_master` call: the
            // model hears of the reset itself.
            ep.bus_master = false;
            ep.timeout_armed = false;
            if let Some(k) = ep.timeout_key.take() {
                cx.cancel(k);
            }
        }
        self.call_ep(node, cx, |m, cx| m.reset(cx));
        // A switch in reset forgets the LTR values it gathered and reported.
        self.switches.ltr_ports.retain(|k, _| k.0 != node);
        self.switches.ltr_sent.remove(&node);
        for &f in &funcs {
            self.after_config_write(f, cx);
        }
        if matches!(self.nodes[node as usize].kind, NodeKind::Switch) {
            for x in (0..self.dirs.len()).step_by(2) {
                if self.dirs[x].from == node {
                    self.take_link_down(x as u16, HELD_PARENT, cx);
                }
            }
        }
        // The reset cleared VF Enable: the PFs' VFs go, as after a Function Level
        // Reset (VFs are created after every other function, so no other ID moves).
        let pfs: Vec<FnId> = funcs
            .iter()
            .copied()
            .filter(|f| self.fabric.functions[f.0 as usize].sriov.is_some())
            .collect();
        if !pfs.is_empty() {
            for pf in pfs {
                self.fabric.sync_vfs(pf);
            }
            self.invalidate_routes();
        }
    }

    /// A memory request for `addr` that nothing claims (the device is gone) but whose
    /// way leads through a Downstream Port with a down link that claims it: routed
    /// onto that link, where the port answers it. Not cached (the link comes back).
    pub(crate) fn route_to_down_port(&self, origin: Origin, addr: u64) -> Option<Route> {
        for x in (0..self.dirs.len()).step_by(2) {
            if !self.dirs[x].down {
                continue;
            }
            let Some(p) = self.dirs[x | 1].rx_func else {
                continue;
            };
            if !self.fabric.memory_window_claims(p, addr) {
                continue;
            }
            let onode = match origin {
                Origin::Host => self.rc.node,
                Origin::Function(f) => self.fabric.functions[f.0 as usize].node.0,
            };
            let r = self.fabric.route_id(origin, self.fabric.bdf(p)).ok()?;
            let port_node = self.fabric.functions[p.0 as usize].node.0;
            let mut seq = self.node_seq(onode, &r.hops, port_node);
            seq.push(self.dirs[x].to);
            let (path, n) = self.dir_path(&seq).ok()?;
            return Some((path, n, Dest::Rc));
        }
        None
    }

    /// Sets or clears Data Link Layer Link Active in port `p`'s Link Status; a port
    /// with a slot records the change in Slot Status (see the `hotplug` module).
    fn set_link_active(&mut self, p: FnId, active: bool, cx: &mut Context<'_, PackedEv>) {
        let Some(pcie) = super::regs::std_cap(&self.fabric, p, pcielab_config::caps::id::PCIE)
        else {
            return;
        };
        let cs = &mut self.fabric.functions[p.0 as usize].config;
        let at = pcie + pcielab_config::caps::pcie_reg::LNKSTA;
        let v = if active { LNKSTA_DLLLA } else { 0 };
        cs.hw_update(at, 2, LNKSTA_DLLLA, v);
        self.slot_event(p, super::hotplug::SLTSTA_DLLSC, None, cx);
    }

    /// The downward direction of the link whose port (above it) is function `p`.
    pub(crate) fn port_link(&self, p: FnId) -> Option<u16> {
        (0..self.dirs.len())
            .step_by(2)
            .find(|&x| self.dirs[x | 1].rx_func == Some(p))
            .map(|x| x as u16)
    }
}
