//! Interrupts: a root port's AER/PME interrupt, INTx virtual wires (switches
//! aggregate and swizzle them) and MSI/MSI-X writes sent over the links.

use super::engine::Engine;
use super::fault::FaultKind;
use super::node::state::NodeKind;
use super::packed::PackedEv;
use super::rc::state::{IntxEvent, RootIrq};
use super::regs::{err_caps, RTCTL_PME_IE, RTSTA_PME_STATUS};
use super::tlp::{Dest, Kind, Tlp, NONE};
use crate::functional::{FnId, Interrupt, Origin, Role};
use pcielab_sim::Context;
use pcielab_wire::Bdf;

impl Engine {
    /// Re-evaluates the interrupt of root port `rp`. Two conditions share it:
    ///
    /// * AER (PCIe Base Spec 6.2.4.1.2): an error-reporting enable of Root Error
    ///   Command is set together with its "received" bit of Root Error Status
    ///   (Correctable ↔ ERR_COR Received, Non-Fatal ↔ Non-Fatal Error Messages
    ///   Received, Fatal ↔ Fatal Error Messages Received);
    /// * PME (7.5.3.12–14): PME Interrupt Enable in Root Control with PME Status in
    ///   Root Status.
    ///
    /// With MSI or MSI-X enabled, a message is sent each time a condition becomes
    /// true (AER: vector Advanced Error Interrupt Message Number; PME: the Interrupt
    /// Message Number of the PCI Express Capabilities register); otherwise the port's
    /// virtual INTx wire follows either condition (unless Interrupt Disable is set),
    /// and so does Interrupt Status. Called after the root port logs an error or
    /// receives a PME, and after every configuration write to it.
    #[cold]
    #[inline(never)]
    pub(crate) fn root_port_interrupt(&mut self, rp: FnId, cx: &mut Context<'_, PackedEv>) {
        use pcielab_config::header::reg;
        let Some(func) = self.fabric.functions.get(rp.0 as usize) else {
            return;
        };
        if !matches!(func.role, Role::RootPort { .. }) {
            return;
        }
        let (pcie, aer) = err_caps(&self.fabric, rp);
        let cs = &self.fabric.functions[rp.0 as usize].config;
        let aer_st = aer.map_or(0, |a| cs.read_u32(a + 0x30));
        let aer_cond = aer.is_some_and(|a| {
            let cmd = cs.read_u32(a + 0x2c);
            (cmd & 1 != 0 && aer_st & 1 != 0)
                || (cmd & 2 != 0 && aer_st & 0x20 != 0)
                || (cmd & 4 != 0 && aer_st & 0x40 != 0)
        });
        let pme_cond = pcie.is_some_and(|p| {
            use pcielab_config::caps::pcie_reg::{RTCTL, RTSTA};
            cs.read_u16(p + RTCTL) & RTCTL_PME_IE != 0
                && cs.read_u32(p + RTSTA) & RTSTA_PME_STATUS != 0
        });
        let pme_vector = pcie.map_or(0, |p| (cs.read_u16(p + 2) >> 9) & 0x1f);
        let (dpc_cond, dpc_vector) = super::dpc::interrupt_condition(cs);
        let (hp_cond, hp_vector) = super::hotplug::interrupt_condition(cs);
        let cond = aer_cond || pme_cond || dpc_cond || hp_cond;
        // Which message mechanism is on: MSI (Message Control bit 0) or MSI-X (bit 15).
        let enabled = |id: u8, bit: u16| {
            pcielab_config::caps::walk(cs.bytes())
                .0
                .iter()
                .find(|c| !c.extended && c.id == id as u16)
                .is_some_and(|c| cs.read_u16(c.offset + 2) & bit != 0)
        };
        let msix = enabled(pcielab_config::caps::id::MSIX, 0x8000);
        let msi = msix || enabled(pcielab_config::caps::id::MSI, 1);
        let intx_off = cs.read_u16(reg::COMMAND) & 0x400 != 0;
        let pin = cs.read(reg::INT_PIN, 1) as u8;
        let was = self.rc.root_irq.get(&rp.0).copied().unwrap_or_default();
        let me = self.fabric.bdf(rp);
        // Interrupt Status (Status bit 3) reflects a pending INTx, whatever Interrupt
        // Disable says.
        let status = cs.read_u16(reg::STATUS);
        let want = if msi || !cond {
            status & !8
        } else {
            status | 8
        };
        if want != status {
            let cs = &mut self.fabric.functions[rp.0 as usize].config;
            cs.hw_write(reg::STATUS, 2, want as u32);
        }
        let level = !msi && cond && !intx_off && pin != 0;
        if msi {
            let mut vectors = [None, None, None, None];
            if aer_cond && !was.aer {
                vectors[0] = Some(((aer_st >> 27) as u16, "AER"));
            }
            if pme_cond && !was.pme {
                vectors[1] = Some((pme_vector, "PME"));
            }
            if dpc_cond && !was.dpc {
                vectors[2] = Some((dpc_vector, "DPC"));
            }
            if hp_cond && !was.hotplug {
                vectors[3] = Some((hp_vector, "hot-plug"));
            }
            for (vector, what) in vectors.into_iter().flatten() {
                let before = self.fabric.interrupts.len();
                let r = if msix {
                    self.fabric.raise_msix(rp, vector)
                } else {
                    self.fabric.raise_msi(rp, vector as u8)
                };
                if r.is_err() {
                    self.fault(
                        FaultKind::Interrupt,
                        format!("{me}: {what} interrupt failed"),
                    );
                }
                // The root port is part of the root complex: its message reaches the
                // interrupt sink without crossing a link.
                let new: Vec<Interrupt> = self.fabric.interrupts.drain(before..).collect();
                for i in new {
                    self.interrupts.push((cx.now(), i));
                }
            }
        }
        if level != was.wire {
            self.intx_events.push((
                cx.now(),
                IntxEvent {
                    root_port: me,
                    pin,
                    asserted: level,
                    from: me,
                },
            ));
        }
        self.rc.root_irq.insert(
            rp.0,
            RootIrq {
                aer: aer_cond,
                pme: pme_cond,
                dpc: dpc_cond,
                hotplug: hp_cond,
                wire: level,
            },
        );
    }

    /// Sends an INTx message (`code` 0x20–0x27) from `from` to its upstream neighbour,
    /// as `requester`.
    pub(crate) fn send_intx(
        &mut self,
        from: u32,
        requester: Bdf,
        code: u8,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let Some(d) = self.up_dir(from) else {
            return;
        };
        let dest = Dest::Intx {
            node: self.dirs[d as usize].to,
        };
        let id = self
            .pool
            .alloc(self.one_link_tlp(d, Kind::Intx, requester, code, dest));
        self.enqueue(d, id, cx);
    }

    /// An INTx message reached `node` through direction `ing`. Each receiver keeps the
    /// virtual wires of its downstream ports: a switch maps pin P of the device below
    /// downstream port D (device number D on its internal bus) to pin
    /// `(P - 1 + D) mod 4 + 1`, and sends Assert/Deassert upstream only when the OR of
    /// the wires mapped to a pin changes; the root complex reports the change of a root port's pin to the
    /// host. A repeated Assert (or Deassert) of the same wire changes nothing.
    pub(crate) fn intx_arrived(
        &mut self,
        node: u32,
        ing: u32,
        requester: Bdf,
        code: u8,
        cx: &mut Context<'_, PackedEv>,
    ) {
        if !(0x20..=0x27).contains(&code) || ing == NONE {
            return;
        }
        let assert = code < 0x24;
        let pin_in = (code & 3) + 1;
        let port = self.dirs[ing as usize].rx_func;
        let pin_out = match self.nodes[node as usize].kind {
            NodeKind::Switch => {
                let dev = port.map_or(0, |f| self.fabric.functions[f.0 as usize].devfn >> 3);
                (pin_in - 1 + dev) % 4 + 1
            }
            _ => pin_in,
        };
        let wire = (node, ing, pin_in);
        let changed = if assert {
            self.intx_wires.insert(wire)
        } else {
            self.intx_wires.remove(&wire)
        };
        if !changed {
            return;
        }
        // A switch ORs the wires of all its downstream ports; the root complex keeps
        // each root port's wires apart.
        let group = match self.nodes[node as usize].kind {
            NodeKind::Switch => NONE,
            _ => ing,
        };
        let count = self.intx_count.entry((node, group, pin_out)).or_insert(0);
        let before = *count;
        if assert {
            *count += 1;
        } else {
            *count = count.saturating_sub(1);
        }
        let after = *count;
        if (before == 0) == (after == 0) {
            return;
        }
        match self.nodes[node as usize].kind {
            NodeKind::Switch => {
                let me = self.nodes[node as usize]
                    .func
                    .map_or(self.rc.bdf, |f| self.fabric.bdf(f));
                let code = if assert { 0x20 } else { 0x24 } + (pin_out - 1);
                self.send_intx(node, me, code, cx);
            }
            NodeKind::Rc => {
                let root_port = port.map_or(self.rc.bdf, |f| self.fabric.bdf(f));
                self.intx_events.push((
                    cx.now(),
                    IntxEvent {
                        root_port,
                        pin: pin_out,
                        asserted: assert,
                        from: requester,
                    },
                ));
            }
            NodeKind::Ep(_) => {}
        }
    }

    /// A device asserts (or deasserts) its INTx pin: the Interrupt Status bit follows
    /// the request; the message goes out unless Interrupt Disable is set (a pending
    /// assertion is withdrawn with Deassert when the device deasserts).
    pub(crate) fn device_intx(&mut self, node: u32, assert: bool, cx: &mut Context<'_, PackedEv>) {
        let Some(f) = self.nodes[node as usize].func else {
            return;
        };
        let (pin, disabled) = {
            let c = &mut self.fabric.functions[f.0 as usize].config;
            let status = c.read_u16(0x06);
            let status = if assert {
                status | 1 << 3
            } else {
                status & !(1 << 3)
            };
            let cmd = c.read_u16(0x04);
            c.hw_write(0x06, 2, status as u32);
            (c.read_u8(0x3d), cmd & (1 << 10) != 0)
        };
        let name = self.nodes[node as usize].name.clone();
        if !(1..=4).contains(&pin) {
            self.fault(
                FaultKind::Interrupt,
                format!("{name}: INTx requested but its Interrupt Pin register is {pin} (no INTx)"),
            );
            return;
        }
        let me = self.ep_bdf(node);
        let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind else {
            return;
        };
        let send = if assert {
            !disabled && !ep.intx_sent
        } else {
            ep.intx_sent
        };
        if send {
            ep.intx_sent = assert;
            let code = if assert { 0x20 } else { 0x24 } + (pin - 1);
            self.send_intx(node, me, code, cx);
        }
    }

    pub(crate) fn send_msi(
        &mut self,
        node: u32,
        f: FnId,
        v: u32,
        msix: bool,
        cx: &mut Context<'_, PackedEv>,
    ) {
        // The functional fabric decides address and data (and pending bits); the write
        // goes out as a TLP, routed as any memory write: a bridge above with Bus
        // Master Enable clear refuses it on its way.
        let what = if msix { "MSI-X" } else { "MSI" };
        if !self.bus_master_set(f) {
            self.fault(
                FaultKind::BusMasterDisabled,
                format!(
                    "{}: {what} with Bus Master Enable clear (PCIe Base Spec 7.5.1.1.3): not sent",
                    self.nodes[node as usize].name
                ),
            );
            return;
        }
        let msg = if msix {
            self.fabric.msix_message(f, v as u16)
        } else {
            self.fabric.msi_message(f, v as u8)
        };
        let me = self.fabric.bdf(f);
        let Ok((address, data)) = msg else {
            return; // disabled or pending
        };
        // The message leaves through the device's transmit datapath like its DMA
        // writes, behind them: posted writes stay in order, so an interrupt never
        // overtakes the data (or the status write-back) it announces.
        let p = self.pool.alloc_payload(&data.to_le_bytes());
        let t = Tlp {
            data: p,
            ..Tlp::new(Kind::MWr, me, address, 4)
        };
        if let Err(e) = self.inject_device(node, Origin::Function(f), t, me, cx) {
            let name = &self.nodes[node as usize].name;
            self.fault(
                FaultKind::NotRoutable,
                format!("{name}: {what} write not routable: {e}"),
            );
        }
    }

    /// A read of BAR `bar` at `offset` of `node`'s function that falls in its MSI-X
    /// table or PBA: true, with `buf` filled (see [`crate::msix`]).
    pub(crate) fn msix_bar_read(
        &self,
        (node, func): (u32, u16),
        (bar, offset): (u8, u64),
        buf: &mut [u8],
    ) -> bool {
        let Some(f) = self.fn_of(node, func) else {
            return false;
        };
        self.fabric.functions[f.0 as usize]
            .msix
            .as_ref()
            .is_some_and(|m| m.read(bar, offset, buf))
    }

    /// A write of BAR `bar` at `offset` of `node`'s function that falls in its MSI-X
    /// table or PBA: true, applied; messages it unmasked go out.
    pub(crate) fn msix_bar_write(
        &mut self,
        (node, func): (u32, u16),
        (bar, offset): (u8, u64),
        data: &[u8],
        cx: &mut Context<'_, PackedEv>,
    ) -> bool {
        let Some(f) = self.fn_of(node, func) else {
            return false;
        };
        let hit = self.fabric.functions[f.0 as usize]
            .msix
            .as_mut()
            .is_some_and(|m| m.write(bar, offset, data));
        if hit {
            self.msix_send_released(f, cx);
        }
        hit
    }

    /// Sends the MSI-X messages of function `f` that were pending and are unmasked
    /// now (while Bus Master Enable is set; otherwise they stay pending).
    pub(crate) fn msix_send_released(&mut self, f: FnId, cx: &mut Context<'_, PackedEv>) {
        if self.fabric.functions[f.0 as usize].msix.is_none() || !self.bus_master_set(f) {
            return;
        }
        let me = self.fabric.bdf(f);
        for msg in self.fabric.msix_release(f) {
            self.send_message_write(f, me, Ok(msg), "MSI-X", cx);
        }
    }

    /// Sends an MSI/MSI-X message write of function `f` (`requester`) as an MWr TLP;
    /// routed like any memory write, it may be refused on its way (a bridge with Bus
    /// Master Enable clear). `what` names it in errors.
    pub(crate) fn send_message_write(
        &mut self,
        f: FnId,
        requester: Bdf,
        msg: Result<(u64, u32), crate::functional::Signal>,
        what: &str,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let Ok((address, data)) = msg else {
            return; // disabled or pending
        };
        let p = self.pool.alloc_payload(&data.to_le_bytes());
        let t = Tlp {
            data: p,
            ..Tlp::new(Kind::MWr, requester, address, 4)
        };
        if let Err(e) = self.inject(Origin::Function(f), t, requester, cx) {
            self.fault(
                FaultKind::NotRoutable,
                format!("{what} write not routable: {e}"),
            );
        }
    }
}
