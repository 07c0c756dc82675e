//! Hot-plug slots (PCIe Base Spec 6.7): a root port or switch downstream port of a node
//! with `hotplug = true` is a hot-plug slot that allows surprise removal (Slot
//! Capabilities Hot-Plug Capable and Hot-Plug Surprise).
//!
//! * [`super::FabricSim::unplug`] removes the device below a port: Presence Detect
//!   State clears and Presence Detect Changed is set, the link goes down (held down
//!   until the device is back) and the component is reset.
//!   [`super::FabricSim::plug`] puts it back: presence set, the link trains.
//! * Every change of the port's Data Link Layer Link Active bit sets Data Link Layer
//!   State Changed in Slot Status (a port with a slot).
//! * The hot-plug interrupt: with Hot-Plug Interrupt Enable, Presence Detect Changed
//!   (with its enable) or Data Link Layer State Changed (with its enable) raise the
//!   port's MSI (PCI Express Capabilities' Interrupt Message Number; a root port's
//!   INTx without MSI) when the condition becomes true.
//! * A port with Hot-Plug Surprise does not report Surprise Down errors (the spec:
//!   a removal there is expected).
//! * Orderly hot-plug (`hotplug_power = true`): the slot has an attention button, a
//!   power controller and attention and power indicators, and no Hot-Plug Surprise.
//!   [`super::FabricSim::press_attention_button`] sets Attention Button Pressed (an
//!   interrupt with its enable). Power Controller Control (Slot Control bit 10) set
//!   powers the slot off: the link goes down, the device below is reset, and nothing
//!   logs a Surprise Down; cleared, the slot is powered again and the link trains if
//!   a device is present. A device plugged into a slot that is off stays down until
//!   software powers the slot. The indicators are Slot Control fields software sets;
//!   nothing reads them.
//!
//! Not modelled: MRL sensors, power faults, electromechanical interlocks, Command
//! Completed (slots advertise No Command Completed Support).

use super::engine::Engine;
use super::packed::PackedEv;
use crate::functional::{FnId, Role};
use pcielab_config::caps::pcie_reg::{SLTCAP, SLTCTL, SLTSTA};
use pcielab_sim::Context;

/// Slot Status: Presence Detect Changed.
pub(crate) const SLTSTA_PDC: u16 = 1 << 3;
/// Slot Status: Presence Detect State.
const SLTSTA_PDS: u16 = 1 << 6;
/// Slot Status: Data Link Layer State Changed.
pub(crate) const SLTSTA_DLLSC: u16 = 1 << 8;
/// Slot Status: Attention Button Pressed.
const SLTSTA_ABP: u16 = 1 << 0;
/// Slot Capabilities: Attention Button Present, Power Controller Present.
const SLTCAP_ABP: u32 = 1 << 0;
const SLTCAP_PCP: u32 = 1 << 1;
/// Slot Control: Attention Button Pressed Enable, Presence Detect Changed Enable,
/// Hot-Plug Interrupt Enable, Power Controller Control (1: off), Data Link Layer State
/// Changed Enable.
const SLTCTL_ABPE: u16 = 1 << 0;
const SLTCTL_PDCE: u16 = 1 << 3;
const SLTCTL_PCC: u16 = 1 << 10;
const SLTCTL_HPIE: u16 = 1 << 5;
const SLTCTL_DLLSCE: u16 = 1 << 12;

/// The hot-plug interrupt condition of a port's configuration space and its vector.
pub(crate) fn interrupt_condition(cs: &pcielab_config::ConfigSpace) -> (bool, u16) {
    let Some(p) = pcielab_config::caps::walk(cs.bytes())
        .0
        .iter()
        .find(|c| !c.extended && c.id == pcielab_config::caps::id::PCIE as u16)
        .map(|c| c.offset)
    else {
        return (false, 0);
    };
    if cs.read_u16(p + 2) & (1 << 8) == 0 {
        return (false, 0); // no slot
    }
    let ctl = cs.read_u16(p + SLTCTL);
    let sta = cs.read_u16(p + SLTSTA);
    let cond = ctl & SLTCTL_HPIE != 0
        && ((ctl & SLTCTL_PDCE != 0 && sta & SLTSTA_PDC != 0)
            || (ctl & SLTCTL_DLLSCE != 0 && sta & SLTSTA_DLLSC != 0)
            || (ctl & SLTCTL_ABPE != 0 && sta & SLTSTA_ABP != 0));
    (cond, (cs.read_u16(p + 2) >> 9) & 0x1f)
}

impl Engine {
    /// The PCI Express capability of port `p` if it has a slot.
    fn slot_cap(&self, p: FnId) -> Option<u16> {
        let at = super::regs::std_cap(&self.fabric, p, pcielab_config::caps::id::PCIE)?;
        let cs = &self.fabric.functions[p.0 as usize].config;
        (cs.read_u16(at + 2) & (1 << 8) != 0).then_some(at)
    }

    /// True if port `p` is a hot-plug slot with surprise removal.
    pub(crate) fn hotplug_surprise(&self, p: FnId) -> bool {
        self.slot_cap(p).is_some_and(|at| {
            self.fabric.functions[p.0 as usize]
                .config
                .read_u32(at + SLTCAP)
                & (1 << 5)
                != 0
        })
    }

    /// True if port `p`'s slot has a power controller and its Power Controller Control
    /// says off.
    pub(crate) fn slot_powered_off(&self, p: FnId) -> bool {
        self.slot_cap(p).is_some_and(|at| {
            let cs = &self.fabric.functions[p.0 as usize].config;
            cs.read_u32(at + SLTCAP) & SLTCAP_PCP != 0 && cs.read_u16(at + SLTCTL) & SLTCTL_PCC != 0
        })
    }

    /// The attention button of port `p`'s slot is pressed: Attention Button Pressed
    /// is set (with the hot-plug interrupt when enabled). False if the slot has no
    /// button.
    pub(crate) fn attention_button(&mut self, p: FnId, cx: &mut Context<'_, PackedEv>) -> bool {
        let has = self.slot_cap(p).is_some_and(|at| {
            self.fabric.functions[p.0 as usize]
                .config
                .read_u32(at + SLTCAP)
                & SLTCAP_ABP
                != 0
        });
        if has {
            self.slot_event(p, SLTSTA_ABP, None, cx);
        }
        has
    }

    /// Slot Status of port `p` gains the change bits `changed`; Presence Detect State
    /// becomes `present` when given. The hot-plug interrupt follows.
    pub(crate) fn slot_event(
        &mut self,
        p: FnId,
        changed: u16,
        present: Option<bool>,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let Some(at) = self.slot_cap(p) else {
            return;
        };
        let cs = &mut self.fabric.functions[p.0 as usize].config;
        let mut v = cs.read_u16(at + SLTSTA) | changed;
        if let Some(pr) = present {
            v = if pr { v | SLTSTA_PDS } else { v & !SLTSTA_PDS };
        }
        cs.hw_write(at + SLTSTA, 2, v as u32);
        self.hotplug_check(p, cx);
    }

    /// Re-evaluates port `p`'s hot-plug interrupt (after a slot event or a
    /// configuration write): a root port through its interrupt logic; a switch
    /// downstream port sends its MSI when the condition becomes true.
    pub(crate) fn hotplug_check(&mut self, p: FnId, cx: &mut Context<'_, PackedEv>) {
        let role = self.fabric.functions[p.0 as usize].role;
        if matches!(role, Role::RootPort { .. }) {
            self.root_port_interrupt(p, cx);
            return;
        }
        if !matches!(role, Role::SwitchDownstream { .. }) {
            return;
        }
        let (cond, vector) = interrupt_condition(&self.fabric.functions[p.0 as usize].config);
        let was = self.switches.hotplug_irq.insert(p.0, cond).unwrap_or(false);
        if cond && !was {
            self.port_msi(p, vector, "hot-plug", cx);
        }
    }

    /// Port `p` (a switch downstream port) sends MSI `vector` upstream, if MSI is on.
    pub(crate) fn port_msi(
        &mut self,
        p: FnId,
        vector: u16,
        what: &str,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let msg = self.fabric.msi_message(p, vector as u8);
        let me = self.fabric.bdf(p);
        self.send_message_write(p, me, msg, &format!("{}: {what} MSI", me), cx);
    }
}
