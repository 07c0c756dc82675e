//! Configuration requests at their target: the function's configuration space, or the
//! Unsupported Request of a port that cannot take them; and what a configuration
//! write changes in the simulator.

use super::engine::Engine;
use super::packed::PackedEv;
use super::regs::*;
use super::tlp::*;
use crate::functional::{FnId, Origin, Role};
use pcielab_sim::Context;
use pcielab_wire::CplStatus;

impl Engine {
    /// A configuration request reached `node`: the target function's configuration
    /// space answers, with the target's ID as Completer ID (a write also invalidates
    /// the cached routes: bus numbers, BARs, windows and enables may have changed).
    /// `func` NONE: `refuser` (a port or the device below the last bridge; NONE: the
    /// root complex) answers Unsupported Request with its own ID and logs it.
    pub(crate) fn config_request(
        &mut self,
        node: u32,
        func: u32,
        refuser: u32,
        id: u32,
        t: &Tlp,
        cx: &mut Context<'_, PackedEv>,
    ) {
        // Who answers: the target function, or the refusing function.
        let answerer = match (func, refuser) {
            (NONE, NONE) => None,
            (NONE, r) => Some(FnId(r)),
            (f, _) => Some(FnId(f)),
        };
        let completer = answerer.map_or(self.rc.bdf, |f| self.fabric.bdf(f));
        let origin = match answerer {
            Some(f) if node != self.rc.node => Origin::Function(f),
            _ => Origin::Host,
        };
        // A poisoned configuration write is discarded: Unsupported Request (2.7.2.2).
        if func == NONE || (t.kind == Kind::CfgWr && t.poisoned) {
            if let Some(f) = answerer {
                self.signal_error(f, AER_UNSUPPORTED, true, Some(id), cx);
            }
            self.send_io_completion(origin, completer, t, CplStatus::Ur, None, false, cx);
            return;
        }
        // A component still initializing after a reset: Configuration Request Retry
        // Status (the root complex re-issues the request).
        if self
            .ready_at
            .get(node as usize)
            .is_some_and(|&r| cx.now().as_ps() < r)
        {
            self.send_io_completion(origin, completer, t, CplStatus::Crs, None, false, cx);
            return;
        }
        let f = FnId(func);
        let be = pcielab_wire::ByteEnables::from_bits_truncate(t.first_be());
        let reg = (t.addr as u16) & 0xffc;
        if t.kind == Kind::CfgWr {
            let mut dw = [0u8; 4];
            let p = self.payload(id);
            let n = p.len().min(4);
            dw[..n].copy_from_slice(&p[..n]);
            let scope = self.flr_scope(f);
            if self
                .fabric
                .config_write_fn_flr(f, reg, u32::from_le_bytes(dw), be)
            {
                self.function_level_reset(scope, cx);
            }
            self.invalidate_routes();
            self.after_config_write(f, cx);
            self.send_io_completion(origin, completer, t, CplStatus::Sc, None, false, cx);
        } else {
            let v = self.fabric.functions[func as usize].config.read_u32(reg);
            let v = v.to_le_bytes();
            self.send_io_completion(origin, completer, t, CplStatus::Sc, Some(&v), false, cx);
        }
    }

    /// What follows a configuration write to function `f`: a root port delivers its
    /// next queued PME once software has cleared PME Status, and re-evaluates its
    /// interrupt (Root Error Command/Status, Root Control/Status, MSI, INTx); a
    /// function signalling PME re-evaluates PME_Status and PME_En.
    pub(crate) fn after_config_write(&mut self, f: FnId, cx: &mut Context<'_, PackedEv>) {
        let Some(func) = self.fabric.functions.get(f.0 as usize) else {
            return;
        };
        if matches!(func.role, Role::RootPort { .. }) {
            self.root_port_interrupt(f, cx);
            // A PME delivered now is a new rising condition (software cleared PME
            // Status, which the evaluation above saw).
            if self.pme_deliver_queued(f) {
                self.root_port_interrupt(f, cx);
            }
        }
        if self.pme_state.contains_key(&f.0) {
            self.pme_check(f, cx);
        }
        if self.is_link_port(f) {
            self.refresh_aspm();
        }
        self.refresh_ecrc(f);
        self.refresh_bus_master(f, cx);
        self.refresh_ats(f, cx);
        self.dpc_config_written(f, cx);
        self.msix_send_released(f, cx);
        self.refresh_egress_blocking(f);
        self.aer_records_written(f);
        // A root port's hot-plug interrupt was evaluated with its others above.
        if matches!(
            self.fabric.functions[f.0 as usize].role,
            Role::SwitchDownstream { .. }
        ) {
            self.hotplug_check(f, cx);
        }
        if matches!(
            self.fabric.functions[f.0 as usize].role,
            Role::RootPort { .. } | Role::SwitchDownstream { .. } | Role::SwitchUpstream
        ) {
            self.port_control_written(f, cx);
        }
    }
}
