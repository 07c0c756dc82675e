//! Power-management messages: PM_PME (a device's wake-up request, the root port's
//! PME state) and the hop-by-hop PME_Turn_Off/PME_TO_Ack.

use super::engine::Engine;
use super::event::Ev;
use super::fault::FaultKind;
use super::node::state::NodeKind;
use super::packed::PackedEv;
use super::rc::state::{PmeMessage, PmeToAck};
use super::regs::{
    err_caps, pm_cap, set_bits, PMCSR_PME_EN, PMCSR_PME_STATUS, RTSTA_PME_PENDING, RTSTA_PME_STATUS,
};
use super::tlp::Detail;
use super::tlp::{Dest, Kind, Tlp, NONE};
use super::tlp::{MSG_PME_TO_ACK, MSG_PME_TURN_OFF, MSG_PM_PME};
use crate::functional::{FnId, Origin};
use pcielab_sim::{Context, EventKey, SimDuration};
use pcielab_wire::Bdf;

impl Engine {
    /// Function `f` signals a power-management event (PCIe Base Spec 5.3.3): PME_Status
    /// is set in its PMCSR (whatever PME_En says), then PM_PME goes out if PME_En is
    /// set. Without PME support in its PM capability (PMC bits 15:11) nothing happens
    /// but an error record.
    #[cold]
    #[inline(never)]
    pub(crate) fn device_pme(&mut self, f: FnId, cx: &mut Context<'_, PackedEv>) {
        let me = self.fabric.bdf(f);
        let Some(pm) = pm_cap(&self.fabric, f) else {
            self.fault(
                FaultKind::PowerManagement,
                format!("{me}: PME signalled without a PM capability"),
            );
            return;
        };
        let cs = &mut self.fabric.functions[f.0 as usize].config;
        if cs.read_u16(pm + 2) & 0xf800 == 0 {
            self.fault(
                FaultKind::PowerManagement,
                format!("{me}: PME signalled but the PM capability supports PME from no state"),
            );
            return;
        }
        set_bits(cs, pm + 4, 2, PMCSR_PME_STATUS);
        // From now on, configuration writes to the function re-evaluate its PME.
        self.pme_state.entry(f.0).or_insert((false, None));
        self.pme_check(f, cx);
    }

    /// Re-evaluates function `f`'s PME: asserted while PME_Status and PME_En are both
    /// set. When it becomes asserted, PM_PME is sent and the PME service timeout
    /// starts; when it is no longer asserted, the pending re-send is dropped.
    pub(crate) fn pme_check(&mut self, f: FnId, cx: &mut Context<'_, PackedEv>) {
        let Some(pm) = pm_cap(&self.fabric, f) else {
            return;
        };
        let v = self.fabric.functions[f.0 as usize].config.read_u16(pm + 4) as u32;
        let asserted = v & (PMCSR_PME_STATUS | PMCSR_PME_EN) == PMCSR_PME_STATUS | PMCSR_PME_EN;
        let (was, timer) = self.pme_state.get(&f.0).copied().unwrap_or((false, None));
        if asserted == was {
            return;
        }
        if let Some(k) = timer {
            cx.cancel(k);
        }
        let timer = if asserted {
            self.send_pm_pme(f, cx);
            self.arm_pme_resend(f, cx)
        } else {
            None
        };
        self.pme_state.insert(f.0, (asserted, timer));
    }

    pub(crate) fn arm_pme_resend(
        &mut self,
        f: FnId,
        cx: &mut Context<'_, PackedEv>,
    ) -> Option<EventKey> {
        let to = self.cfg.pme_service_timeout;
        (to > SimDuration::ZERO)
            .then(|| cx.schedule_background_at(cx.now() + to, Ev::PmeResend(f.0)))
    }

    /// Function `f`'s PME service timeout expired with its PME still asserted (a
    /// de-assertion cancels the timer): PM_PME again (PCIe Base Spec 5.3.3.3.1).
    #[cold]
    #[inline(never)]
    pub(crate) fn pme_resend(&mut self, f: FnId, cx: &mut Context<'_, PackedEv>) {
        if let Some(&(true, _)) = self.pme_state.get(&f.0) {
            self.send_pm_pme(f, cx);
            let timer = self.arm_pme_resend(f, cx);
            self.pme_state.insert(f.0, (true, timer));
        }
    }

    /// Sends PM_PME (Msg, routed to the root complex) from function `f`.
    pub(crate) fn send_pm_pme(&mut self, f: FnId, cx: &mut Context<'_, PackedEv>) {
        let me = self.fabric.bdf(f);
        let host = self.rc.bdf;
        let t = Tlp {
            detail: Detail::Msg(MSG_PM_PME),
            ..Tlp::new(Kind::PmMsg, me, 0, 0)
        };
        if let Err(e) = self.inject(Origin::Function(f), t, host, cx) {
            self.fault(
                FaultKind::NotRoutable,
                format!("{me}: PM_PME not routable: {e}"),
            );
        }
    }

    /// Root port `rp` received PM_PME from `requester` (PCIe Base Spec 7.5.3.14): with
    /// PME Status clear, PME Status is set and PME Requester ID records the requester;
    /// otherwise the PME waits (PME Pending) until software clears PME Status. A
    /// requester already recorded or waiting is not queued twice (its re-sends).
    #[cold]
    #[inline(never)]
    pub(crate) fn root_pme(&mut self, rp: FnId, requester: Bdf, cx: &mut Context<'_, PackedEv>) {
        let root_port = self.fabric.bdf(rp);
        self.pme_messages.push((
            cx.now(),
            PmeMessage {
                root_port,
                requester,
            },
        ));
        let (Some(p), _) = err_caps(&self.fabric, rp) else {
            return;
        };
        let reg = p + pcielab_config::caps::pcie_reg::RTSTA;
        let cs = &mut self.fabric.functions[rp.0 as usize].config;
        let st = cs.read_u32(reg);
        if st & RTSTA_PME_STATUS == 0 {
            cs.hw_write(
                reg,
                4,
                (st & RTSTA_PME_PENDING) | RTSTA_PME_STATUS | requester.raw() as u32,
            );
        } else if st & 0xffff != requester.raw() as u32 {
            let q = self.rc.pme_queue.entry(rp.0).or_default();
            if !q.contains(&requester) {
                q.push_back(requester);
            }
            cs.hw_write(reg, 4, st | RTSTA_PME_PENDING);
        }
        self.root_port_interrupt(rp, cx);
    }

    /// Root port `rp`: once software has cleared PME Status, the next queued PME is
    /// delivered (PME Status set again with its requester; returns true); PME Pending
    /// stays set while more wait.
    pub(crate) fn pme_deliver_queued(&mut self, rp: FnId) -> bool {
        let (Some(p), _) = err_caps(&self.fabric, rp) else {
            return false;
        };
        let reg = p + pcielab_config::caps::pcie_reg::RTSTA;
        let cs = &mut self.fabric.functions[rp.0 as usize].config;
        let st = cs.read_u32(reg);
        if st & RTSTA_PME_STATUS != 0 {
            return false;
        }
        let Some(q) = self.rc.pme_queue.get_mut(&rp.0) else {
            return false;
        };
        let next = q.pop_front();
        let pending = if q.is_empty() { 0 } else { RTSTA_PME_PENDING };
        let v = match next {
            Some(r) => RTSTA_PME_STATUS | pending | r.raw() as u32,
            None => st & 0xffff,
        };
        if v != st {
            cs.hw_write(reg, 4, v);
        }
        next.is_some()
    }

    /// Sends a hop-by-hop power-management message (`code`) as `requester` over
    /// direction `d` (to its receiver).
    pub(crate) fn send_pm_hop(
        &mut self,
        d: u16,
        requester: Bdf,
        code: u8,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let id = self.pool.alloc(self.pm_hop(d, requester, code));
        self.enqueue(d, id, cx);
    }

    /// The TLP of a hop-by-hop power-management message over direction `d`.
    pub(crate) fn pm_hop(&self, d: u16, requester: Bdf, code: u8) -> Tlp {
        let dest = Dest::Hop {
            node: self.dirs[d as usize].to,
        };
        self.one_link_tlp(d, Kind::PmHop, requester, code, dest)
    }

    /// Device `node` acknowledges PME_Turn_Off: PME_TO_Ack from its upstream port
    /// (function 0).
    pub(crate) fn send_pme_to_ack(&mut self, node: u32, cx: &mut Context<'_, PackedEv>) {
        let NodeKind::Ep(ep) = &self.nodes[node as usize].kind else {
            return;
        };
        let (d, me) = (ep.up_dir, self.ep_bdf(node));
        self.send_pm_hop(d, me, MSG_PME_TO_ACK, cx);
    }

    /// A hop-by-hop power-management message (`code`) from `requester` reached `node`
    /// through direction `ing` (PCIe Base Spec 5.3.3.2.1):
    /// - PME_Turn_Off at a switch: a copy goes down every downstream port with a link
    ///   (the Requester ID unchanged: the message is forwarded), and the switch then
    ///   waits for each of those ports' PME_TO_Ack; with no link below it answers at
    ///   once.
    /// - PME_Turn_Off at a device: its model's [`Endpoint::pme_turn_off`] decides
    ///   whether PME_TO_Ack goes up now or when the model calls
    ///   [`EpCx::pme_to_ack`](super::endpoint::EpCx::pme_to_ack).
    /// - PME_TO_Ack at a switch: once the last awaited port has answered, one
    ///   PME_TO_Ack goes up from the switch's upstream port.
    /// - PME_TO_Ack at the root complex: the root port records it.
    #[cold]
    #[inline(never)]
    pub(crate) fn pm_hop_arrived(
        &mut self,
        node: u32,
        ing: u32,
        requester: Bdf,
        code: u8,
        cx: &mut Context<'_, PackedEv>,
    ) {
        if ing == NONE {
            return;
        }
        let upstream = ing % 2 == 1;
        match (&self.nodes[node as usize].kind, code, upstream) {
            (NodeKind::Switch, MSG_PME_TURN_OFF, false) => {
                let down = self.down_dirs(node);
                self.switches
                    .turn_off_wait
                    .insert(node, down.iter().map(|&d| d ^ 1).collect());
                if down.is_empty() {
                    self.switch_acks(node, cx);
                }
                for d in down {
                    self.send_pm_hop(d, requester, MSG_PME_TURN_OFF, cx);
                }
            }
            (NodeKind::Ep(_), MSG_PME_TURN_OFF, false) => {
                let held = self
                    .call_ep(node, cx, |m, cx| m.pme_turn_off(cx))
                    .is_some_and(|ack| !ack);
                if held {
                    self.turn_off_held.insert(node);
                } else {
                    self.send_pme_to_ack(node, cx);
                }
            }
            (NodeKind::Switch, MSG_PME_TO_ACK, true) => {
                let Some(w) = self.switches.turn_off_wait.get_mut(&node) else {
                    return; // no PME_Turn_Off outstanding: nothing to gather
                };
                w.retain(|&d| d as u32 != ing);
                if w.is_empty() {
                    self.switches.turn_off_wait.remove(&node);
                    self.switch_acks(node, cx);
                }
            }
            (NodeKind::Rc, MSG_PME_TO_ACK, true) => {
                let root_port = self.dirs[ing as usize]
                    .rx_func
                    .map_or(self.rc.bdf, |f| self.fabric.bdf(f));
                self.pme_to_acks.push((
                    cx.now(),
                    PmeToAck {
                        root_port,
                        requester,
                    },
                ));
            }
            _ => {
                let name = self.nodes[node as usize].name.clone();
                self.fault(
                    FaultKind::PowerManagement,
                    format!(
                        "{name}: power-management message {code:#04x} from {requester} \
                     arrived in the wrong direction; dropped"
                    ),
                );
            }
        }
    }

    /// Switch `node` has PME_TO_Ack from every downstream port: one goes up from its
    /// upstream port.
    pub(crate) fn switch_acks(&mut self, node: u32, cx: &mut Context<'_, PackedEv>) {
        let Some(d) = self.up_dir(node) else {
            return;
        };
        let me = self.nodes[node as usize]
            .func
            .map_or(self.rc.bdf, |f| self.fabric.bdf(f));
        self.send_pm_hop(d, me, MSG_PME_TO_ACK, cx);
    }
}
