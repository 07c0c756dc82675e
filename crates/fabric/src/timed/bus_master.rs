//! Bus Master Enable (PCIe Base Spec 7.5.1.1.3, Command register bit 2).
//!
//! * **A function** with the bit clear issues no memory or I/O requests: a DMA its
//!   model asks for fails at once (the simulator records the error) and its MSI and
//!   MSI-X writes are not sent. The device model hears of every change of the bit
//!   ([`super::Endpoint::bus_master`]), so that a device that was reset resumes once
//!   host software has configured it again.
//! * **A bridge** with the bit clear forwards no memory or I/O requests upstream: such
//!   a request received on the secondary side of a root port or a switch downstream
//!   port, or reaching a switch upstream port from the switch's internal bus, is an
//!   Unsupported Request of that port — a non-posted one is completed with UR — and
//!   the port logs it. MSI and MSI-X writes are memory writes: one from below travels
//!   to the bridge and is refused there. Completions and messages pass.
//!
//! Enumeration sets the bit everywhere, as Linux's drivers do; a reset (a link that
//! went down) clears it. The engine keeps the bit cached: per endpoint, and per
//! upward link direction as the `BME_*` flags, so the hot path tests one byte.

use super::engine::Engine;
use super::fault::FaultKind;
use super::link::state::BME_PORT;
use super::node::state::NodeKind;
use super::packed::PackedEv;
use super::regs::AER_UNSUPPORTED;
use super::tlp::{Dest, Kind, NP};
use crate::functional::{FnId, Role};
use pcielab_config::header::{command, reg};
use pcielab_sim::Context;
use pcielab_wire::CplStatus;

/// The switch upstream port that transmits on this (upward) direction has Bus Master
/// Enable clear.
pub(crate) const BME_USP: u8 = 2;

/// A request that Bus Master Enable governs: memory and I/O requests (ATS
/// Translation Requests are memory reads).
#[inline]
fn governed(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::MRd | Kind::MWr | Kind::IoRd | Kind::IoWr | Kind::TransReq | Kind::Atomic
    )
}

impl Engine {
    /// True if function `f` has Bus Master Enable set.
    pub(crate) fn bus_master_set(&self, f: FnId) -> bool {
        self.fabric.functions[f.0 as usize]
            .config
            .read_u16(reg::COMMAND)
            & command::BUS_MASTER
            != 0
    }

    /// Fills the caches from the configuration spaces at the start (no model hears
    /// of it).
    pub(crate) fn init_bus_master(&mut self) {
        for i in 0..self.fabric.functions.len() {
            self.cache_bus_master(FnId(i as u32));
        }
        for n in 0..self.nodes.len() {
            let on = self.nodes[n].func.is_some_and(|f| self.bus_master_set(f));
            if let NodeKind::Ep(ep) = &mut self.nodes[n].kind {
                ep.bus_master = on;
            }
        }
    }

    /// Updates the per-direction flags of bridge function `f`.
    fn cache_bus_master(&mut self, f: FnId) {
        let on = self.bus_master_set(f);
        let set = |flags: &mut u8, bit: u8| {
            if on {
                *flags &= !bit;
            } else {
                *flags |= bit;
            }
        };
        match self.fabric.functions[f.0 as usize].role {
            Role::RootPort { .. } | Role::SwitchDownstream { .. } => {
                for u in (1..self.dirs.len()).step_by(2) {
                    if self.dirs[u].rx_func == Some(f) {
                        set(&mut self.dirs[u].bme_block, BME_PORT);
                    }
                }
            }
            Role::SwitchUpstream => {
                let node = self.fabric.functions[f.0 as usize].node.0;
                if let Some(u) = self.up_dir(node) {
                    set(&mut self.dirs[u as usize].bme_block, BME_USP);
                }
            }
            _ => {}
        }
    }

    /// After a configuration write to (or the reset of) function `f`: the caches
    /// follow its Bus Master Enable, and the device model hears of a change.
    pub(crate) fn refresh_bus_master(&mut self, f: FnId, cx: &mut Context<'_, PackedEv>) {
        self.cache_bus_master(f);
        let node = self.fabric.functions[f.0 as usize].node.0;
        if self.nodes[node as usize].func != Some(f) {
            return;
        }
        let on = self.bus_master_set(f);
        let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind else {
            return;
        };
        if ep.bus_master == on {
            return;
        }
        ep.bus_master = on;
        self.call_ep(node, cx, |m, cx| m.bus_master(on, cx));
    }

    /// A DMA asked for while the device's Bus Master Enable is clear: recorded; the
    /// caller fails it.
    #[cold]
    #[inline(never)]
    pub(crate) fn dma_without_bus_master(&mut self, node: u32) {
        self.fault(
            FaultKind::BusMasterDisabled,
            format!(
                "{}: DMA with Bus Master Enable clear (PCIe Base Spec 7.5.1.1.3): not issued",
                self.nodes[node as usize].name
            ),
        );
    }

    /// TLP `id` was accepted on an upward direction whose receiving port (a root port
    /// or a switch downstream port) has Bus Master Enable clear: a memory or I/O
    /// request ends at that port, which refuses it after the node's latency
    /// ([`Engine::refused_upstream`]).
    #[cold]
    #[inline(never)]
    pub(crate) fn bme_ingress(&mut self, id: u32) {
        let t = &mut self.pool.tlps[id as usize];
        if governed(t.kind) {
            t.dest = Dest::Refused;
            t.hops = t.at;
        }
    }

    /// The port a refused request arrived at (see [`Engine::bme_ingress`]) answers it;
    /// the caller (`consume`) frees it.
    #[cold]
    #[inline(never)]
    pub(crate) fn refused_upstream(&mut self, id: u32, cx: &mut Context<'_, PackedEv>) {
        if let Some(port) = self.last_rx_func {
            self.refuse(port, id, cx);
        }
    }

    /// TLP `id` is about to leave a switch upstream port with Bus Master Enable clear
    /// on (upward) direction `d`: true if it is a request, which is then handled here.
    #[cold]
    #[inline(never)]
    pub(crate) fn bme_egress(&mut self, d: u16, id: u32, cx: &mut Context<'_, PackedEv>) -> bool {
        let node = self.dirs[d as usize].from;
        let Some(usp) = self.nodes[node as usize].func else {
            return false;
        };
        if !governed(self.pool.tlps[id as usize].kind) {
            return false;
        }
        self.refuse(usp, id, cx);
        self.discard(id, cx);
        true
    }

    /// Bridge `port` refuses request `id` (a memory or I/O request it may not forward
    /// upstream): an Unsupported Request — completed with UR status if non-posted,
    /// logged by the port (advisory for a non-posted request, as for any completer of
    /// an Unsupported Request; each TLP of a burst). The caller frees the TLP.
    fn refuse(&mut self, port: FnId, id: u32, cx: &mut Context<'_, PackedEv>) {
        let t = self.pool.tlps[id as usize].clone();
        let non_posted = t.class() == NP;
        if non_posted {
            self.port_completes(port, &t, CplStatus::Ur, cx);
        }
        for _ in 0..t.pieces.max(1) {
            self.signal_error(port, AER_UNSUPPORTED, non_posted, Some(id), cx);
        }
    }
}
