//! Latency Tolerance Reporting (PCIe Base Spec 6.18): a device tells the platform how
//! long its reads and writes may wait (snoop and no-snoop latency) with LTR messages,
//! so that power management can sleep that long.
//!
//! * A device sends one with [`super::EpCx::ltr`], only while LTR Mechanism Enable
//!   (Device Control 2 bit 10) of its function 0 is set; otherwise nothing is sent and
//!   the simulator records the error.
//! * The message terminates at the receiver (routing 100b). A switch keeps the last
//!   values of each downstream port and reports upstream, from its upstream port and
//!   with its enable set, the most stringent of them (the smallest latency with the
//!   Requirement bit set; no requirement if no port has one) whenever that changes.
//!   A port whose link goes down no longer counts.
//! * The root port records it: [`super::FabricSim::ltr_messages`].
//!
//! Values are the registers' 16-bit form: Requirement (15), Scale (12:10: 1, 32,
//! 1024, 32768, 1048576 or 33554432 ns) and Value (9:0); [`ltr_value`] encodes one.

use super::engine::Engine;
use super::fault::FaultKind;
use super::packed::PackedEv;
use super::tlp::{Tlp, MSG_LTR};
use pcielab_sim::Context;
use pcielab_wire::Bdf;

pub(crate) mod state;
pub(crate) use state::*;

/// Device Control 2: LTR Mechanism Enable.
const DEVCTL2_LTR_ENABLE: u16 = 1 << 10;

impl Engine {
    /// True if function `f`'s LTR Mechanism Enable is set.
    fn ltr_enabled(&self, f: crate::functional::FnId) -> bool {
        super::regs::std_cap(&self.fabric, f, pcielab_config::caps::id::PCIE).is_some_and(|p| {
            self.fabric.functions[f.0 as usize]
                .config
                .read_u16(p + pcielab_config::caps::pcie_reg::DEVCTL2)
                & DEVCTL2_LTR_ENABLE
                != 0
        })
    }

    /// Node `node` (a device, or a switch through its upstream port) sends LTR with
    /// `(snoop, no_snoop)` if its function's LTR Mechanism Enable is set.
    pub(crate) fn send_ltr(
        &mut self,
        node: u32,
        values: (u16, u16),
        cx: &mut Context<'_, PackedEv>,
    ) {
        let (Some(f), Some(d)) = (self.nodes[node as usize].func, self.up_dir(node)) else {
            return;
        };
        let me = self.fabric.bdf(f);
        if !self.ltr_enabled(f) {
            self.fault(
                FaultKind::Ltr,
                format!("{me}: LTR not sent: LTR Mechanism Enable is clear"),
            );
            return;
        }
        // A one-link message like the power-management ones.
        let t = Tlp {
            detail: super::tlp::Detail::Ltr {
                snoop: values.0,
                no_snoop: values.1,
            },
            ..self.pm_hop(d, me, MSG_LTR)
        };
        let id = self.pool.alloc(t);
        self.enqueue(d, id, cx);
    }

    /// An LTR message from `requester` with `values` reached `node` through upward
    /// direction `ing`.
    pub(crate) fn ltr_arrived(
        &mut self,
        node: u32,
        ing: u32,
        requester: Bdf,
        values: (u16, u16),
        cx: &mut Context<'_, PackedEv>,
    ) {
        self.ltr_link.insert(ing, values);
        if matches!(
            self.nodes[node as usize].kind,
            super::node::state::NodeKind::Rc
        ) {
            let root_port = self.dirs[ing as usize]
                .rx_func
                .map_or(self.rc.bdf, |f| self.fabric.bdf(f));
            self.ltr_messages.push((
                cx.now(),
                LtrMessage {
                    root_port,
                    requester,
                    snoop: values.0,
                    no_snoop: values.1,
                },
            ));
            return;
        }
        self.switches.ltr_ports.insert((node, ing), values);
        self.ltr_aggregate(node, cx);
    }

    /// Switch `node` reports the most stringent values of its downstream ports
    /// upstream when they changed.
    pub(crate) fn ltr_aggregate(&mut self, node: u32, cx: &mut Context<'_, PackedEv>) {
        let mut agg = (0u16, 0u16);
        let mut ports: Vec<_> = self
            .switches
            .ltr_ports
            .iter()
            .filter(|(k, _)| k.0 == node)
            .map(|(k, v)| (k.1, *v))
            .collect();
        ports.sort_unstable();
        for (_, v) in ports {
            agg = (stricter(agg.0, v.0), stricter(agg.1, v.1));
        }
        if self.switches.ltr_sent.get(&node) == Some(&agg) {
            return;
        }
        self.switches.ltr_sent.insert(node, agg);
        self.send_ltr(node, agg, cx);
    }

    /// The link whose upward direction is `ing` went down: a switch above forgets
    /// that port's LTR.
    pub(crate) fn ltr_forget(&mut self, ing: u32, cx: &mut Context<'_, PackedEv>) {
        let node = self.dirs[ing as usize].to;
        self.ltr_link.remove(&ing);
        if self.switches.ltr_ports.remove(&(node, ing)).is_some() {
            self.ltr_aggregate(node, cx);
        }
    }
}
