//! Downstream Port Containment (PCIe Base Spec 6.2.10): a root port or switch
//! downstream port with the DPC capability ([`pcielab_config::ext_caps::DpcCap`])
//! disables its link on an uncorrectable error, so that nothing the failed device
//! sends or receives spreads, until software releases it.
//!
//! DPC triggers, when DPC Trigger Enable is 01b (ERR_FATAL) or 10b (ERR_NONFATAL or
//! ERR_FATAL), on:
//!
//! * an ERR_FATAL or ERR_NONFATAL message the port receives from its link (Trigger
//!   Reason 10b or 01b): the requester is recorded in Error Source ID and the message
//!   is not forwarded;
//! * an unmasked uncorrectable error the port itself detects with a matching severity
//!   (Reason 00b), a Surprise Down among them: it is logged in AER as usual but not
//!   signalled;
//! * a write of 1 to DPC Software Trigger (Reason 11b, Reason Extension 01b).
//!
//! Triggering sets DPC Trigger Status (and DPC Interrupt Status with DPC Interrupt
//! Enable: the port's MSI, the root port's INTx otherwise; ERR_COR with DPC ERR_COR
//! Enable) and takes the link down (see the `link_down` module): the port answers
//! non-posted requests for the link with Completer Abort, or Unsupported Request with
//! Completion Control set. Clearing DPC Trigger Status lets the link train again.
//!
//! With Poisoned TLP Egress Blocking Enable the port does not send poisoned TLPs down
//! its link: it logs Poisoned TLP Egress Blocked (AER uncorrectable bit 26, with the
//! TLP's header; non-fatal by default), which triggers DPC like any error of its own,
//! answers a blocked non-posted request with Unsupported Request and drops the rest.
//!
//! Not modelled: the Root Port Programmed I/O extensions, DL_Active ERR_COR
//! signalling, and the port's INTx for a switch downstream port.

use super::ats::ext_cap;
use super::engine::Engine;
use super::link_down::HELD_DPC;
use super::packed::PackedEv;
use super::regs::ErrorSeverity;
use crate::functional::{FnId, Role};
use pcielab_config::caps::id::EXT_DPC;
use pcielab_config::ext_caps::{
    AER_UNCORR_POISON_BLOCKED, DPC_CTL_CPL_UR, DPC_CTL_ERR_COR, DPC_CTL_INT_ENABLE,
    DPC_CTL_POISON_BLOCK, DPC_CTL_SW_TRIGGER, DPC_CTL_TRIGGER_MASK, DPC_STA_INT, DPC_STA_TRIGGER,
};
use pcielab_config::ConfigSpace;
use pcielab_sim::Context;
use pcielab_wire::{Bdf, CplStatus};

pub(crate) mod state;
pub(crate) use state::*;

/// The DPC interrupt condition of a root port's configuration space (DPC Interrupt
/// Enable and DPC Interrupt Status) and its vector (DPC Interrupt Message Number).
pub(crate) fn interrupt_condition(cs: &ConfigSpace) -> (bool, u16) {
    let Some(at) = pcielab_config::caps::walk(cs.bytes())
        .0
        .iter()
        .find(|c| c.extended && c.id == EXT_DPC)
        .map(|c| c.offset)
    else {
        return (false, 0);
    };
    let cond =
        cs.read_u16(at + 6) & DPC_CTL_INT_ENABLE != 0 && cs.read_u16(at + 8) & DPC_STA_INT != 0;
    (cond, cs.read_u16(at + 4) & 0x1f)
}

impl Engine {
    /// The DPC capability of a Downstream Port (root port or switch downstream port).
    fn dpc_cap(&self, f: FnId) -> Option<u16> {
        let func = self.fabric.functions.get(f.0 as usize)?;
        if !matches!(
            func.role,
            Role::RootPort { .. } | Role::SwitchDownstream { .. }
        ) {
            return None;
        }
        ext_cap(self, f, EXT_DPC)
    }

    /// True if `f`'s DPC is enabled for an error of severity `fatal`.
    fn dpc_armed_for(&self, f: FnId, at: u16, fatal: bool) -> bool {
        let cs = &self.fabric.functions[f.0 as usize].config;
        match cs.read_u16(at + 6) & DPC_CTL_TRIGGER_MASK {
            1 => fatal,
            2 => true,
            _ => false,
        }
    }

    /// Port `f` detected the uncorrectable error `bit` (already logged): true if DPC
    /// triggers on it, which then does not signal it.
    pub(crate) fn dpc_port_error(
        &mut self,
        f: FnId,
        bit: u32,
        cx: &mut Context<'_, PackedEv>,
    ) -> bool {
        let Some(at) = self.dpc_cap(f) else {
            return false;
        };
        let aer = super::regs::err_caps(&self.fabric, f).1;
        let cs = &self.fabric.functions[f.0 as usize].config;
        let (masked, fatal) = match aer {
            Some(a) => (
                cs.read_u32(a + 8) & bit != 0,
                cs.read_u32(a + 0x0c) & bit != 0,
            ),
            None => (
                false,
                pcielab_config::ext_caps::AER_UNCORR_SEVERITY_DEFAULT & bit != 0,
            ),
        };
        if masked || !self.dpc_armed_for(f, at, fatal) {
            return false;
        }
        self.dpc_trigger(f, at, DpcReason::PortError, Bdf::from_raw(0), cx);
        true
    }

    /// An error message from `requester` entered a Downstream Port through direction
    /// `ing` (its link's upward direction): true if the port's DPC contains it (the
    /// message goes no further).
    pub(crate) fn dpc_message(
        &mut self,
        ing: u32,
        requester: Bdf,
        code: u8,
        cx: &mut Context<'_, PackedEv>,
    ) -> bool {
        if ing == super::tlp::NONE {
            return false;
        }
        let Some(f) = self.dirs[ing as usize].rx_func else {
            return false;
        };
        let Some(at) = self.dpc_cap(f) else {
            return false;
        };
        let reason = match ErrorSeverity::from_code(code) {
            Some(ErrorSeverity::Fatal) => DpcReason::FatalMessage,
            Some(ErrorSeverity::NonFatal) => DpcReason::NonFatalMessage,
            _ => return false,
        };
        if !self.dpc_armed_for(f, at, reason == DpcReason::FatalMessage) {
            return false;
        }
        self.dpc_trigger(f, at, reason, requester, cx);
        true
    }

    /// DPC of port `f` (capability at `at`) triggers, unless it already has.
    fn dpc_trigger(
        &mut self,
        f: FnId,
        at: u16,
        reason: DpcReason,
        source: Bdf,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let cs = &mut self.fabric.functions[f.0 as usize].config;
        if cs.read_u16(at + 8) & DPC_STA_TRIGGER != 0 {
            return;
        }
        let ctl = cs.read_u16(at + 6);
        let (r, ext) = reason.bits();
        let mut sta = DPC_STA_TRIGGER | r << 1 | ext << 5;
        if ctl & DPC_CTL_INT_ENABLE != 0 {
            sta |= DPC_STA_INT;
        }
        cs.hw_update(at + 8, 2, 0x007f, sta as u32);
        cs.hw_write(at + 0xa, 2, source.raw() as u32);
        let port = self.fabric.bdf(f);
        self.dpc_events.push(DpcEvent {
            at: cx.now(),
            port,
            reason,
            source,
        });
        if ctl & DPC_CTL_INT_ENABLE != 0 {
            self.dpc_interrupt(f, cx);
        }
        if ctl & DPC_CTL_ERR_COR != 0 {
            self.send_error_message(f, ErrorSeverity::Correctable, cx);
        }
        if let Some(d) = self.port_link(f) {
            self.take_link_down(d, HELD_DPC, cx);
        }
    }

    /// The DPC interrupt of port `f`: a root port's goes through its interrupt logic
    /// (MSI, or INTx); a switch downstream port sends its MSI when MSI is enabled.
    fn dpc_interrupt(&mut self, f: FnId, cx: &mut Context<'_, PackedEv>) {
        if matches!(
            self.fabric.functions[f.0 as usize].role,
            Role::RootPort { .. }
        ) {
            self.root_port_interrupt(f, cx);
            return;
        }
        let (_, vector) = interrupt_condition(&self.fabric.functions[f.0 as usize].config);
        self.port_msi(f, vector, "DPC", cx);
    }

    /// After a configuration write to `f`: Poisoned TLP Egress Blocking Enable, DPC
    /// Software Trigger, and the release of a contained link once DPC Trigger Status is
    /// clear.
    pub(crate) fn dpc_config_written(&mut self, f: FnId, cx: &mut Context<'_, PackedEv>) {
        let Some(at) = self.dpc_cap(f) else {
            return;
        };
        let ctl = self.fabric.functions[f.0 as usize].config.read_u16(at + 6);
        if let Some(d) = self.port_link(f) {
            self.dirs[d as usize].poison_block = ctl & DPC_CTL_POISON_BLOCK != 0;
        }
        let cs = &mut self.fabric.functions[f.0 as usize].config;
        if ctl & DPC_CTL_SW_TRIGGER != 0 {
            cs.hw_update(at + 6, 2, DPC_CTL_SW_TRIGGER as u32, 0);
            if ctl & DPC_CTL_TRIGGER_MASK != 0 {
                self.dpc_trigger(f, at, DpcReason::Software, Bdf::from_raw(0), cx);
                return;
            }
        }
        let cs = &self.fabric.functions[f.0 as usize].config;
        if cs.read_u16(at + 8) & DPC_STA_TRIGGER == 0 {
            if let Some(d) = self.port_link(f) {
                self.release_link(d, HELD_DPC, cx);
            }
        }
    }

    /// The port transmitting on downward direction `d` blocks poisoned TLP `id`
    /// (Poisoned TLP Egress Blocking; see the module documentation).
    #[cold]
    #[inline(never)]
    pub(crate) fn poison_egress_blocked(
        &mut self,
        d: u16,
        id: u32,
        cx: &mut Context<'_, PackedEv>,
    ) {
        self.dirs[d as usize].counters.poison_blocked += 1;
        self.refuse_at_egress(d, id, AER_UNCORR_POISON_BLOCKED, cx);
    }

    /// The port transmitting on direction `d` refuses TLP `id` at its egress: it
    /// completes a non-posted request with UR, logs uncorrectable error `bit` with the
    /// TLP's header, and the TLP goes no further.
    pub(crate) fn refuse_at_egress(
        &mut self,
        d: u16,
        id: u32,
        bit: u32,
        cx: &mut Context<'_, PackedEv>,
    ) {
        if let Some(p) = self.dirs[(d ^ 1) as usize].rx_func {
            let t = self.pool.tlps[id as usize].clone();
            if t.class() == super::tlp::NP {
                self.port_completes(p, &t, CplStatus::Ur, cx);
            }
            self.signal_error(p, bit, false, Some(id), cx);
        }
        self.discard(id, cx);
    }

    /// The completion status port `p` gives requests for its link while DPC contains
    /// it (Completion Control), or None if it does not.
    pub(crate) fn dpc_completion_status(&self, p: FnId) -> Option<CplStatus> {
        let at = self.dpc_cap(p)?;
        let cs = &self.fabric.functions[p.0 as usize].config;
        if cs.read_u16(at + 8) & DPC_STA_TRIGGER == 0 {
            return None;
        }
        Some(if cs.read_u16(at + 6) & DPC_CTL_CPL_UR != 0 {
            CplStatus::Ur
        } else {
            CplStatus::Ca
        })
    }
}
