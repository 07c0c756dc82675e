//! Process Address Space IDs (PCIe Base Spec: the PASID Extended Capability and the
//! PASID End-End TLP Prefix).
//!
//! * **A device** asks for a DMA in a process's address space with
//!   [`super::EpCx::dma_read_pasid`] or [`super::EpCx::dma_write_pasid`]. Each of its
//!   requests then carries a PASID TLP prefix: one more DW on the wire, in the trace
//!   and in the capture. The function must have PASID Enable set and the PASID must be
//!   below `1 << Max PASID Width`; otherwise nothing is sent, the DMA fails and the
//!   simulator records an error that says which rule was broken. Completions carry no
//!   prefix.
//! * **Enumeration** sets PASID Enable on every function with the capability when the
//!   IOMMU supports PASID (`IommuConfig::pasid`), as Linux does.
//! * **The IOMMU** translates a request with a PASID by the table of its (requester,
//!   PASID) — [`super::FabricSim::iommu_map_pasid`] — see the `iommu` module.
//!   Without an IOMMU the prefix is carried and ignored.
//! * **ATS and PRI** work per address space: a DMA's Translation Requests and Page
//!   Requests carry its PASID, the device's ATC keeps translations per PASID, and
//!   [`super::FabricSim::iommu_unmap_pasid`] sends an Invalidate Request with the
//!   PASID, which takes back that PASID's translations only (one without a PASID, those
//!   obtained without one). Pages of [`super::FabricSim::iommu_map_on_demand_pasid`]
//!   are made resident in the PASID's table. PRG Responses carry no PASID (PRG
//!   Response PASID Required is clear).
//! * **Ports** forward End-End TLP Prefixes. A root or switch port with End-End TLP
//!   Prefix Blocking set (Device Control 2 bit 15) forwards none out of its egress: a
//!   posted request is dropped, a non-posted one is completed with Unsupported
//!   Request by the port, and the port logs TLP Prefix Blocked (AER uncorrectable bit
//!   25) with the TLP's header and its prefix in the TLP Prefix Log.
//!
//! Not modelled: the Execute and Privileged Mode bits, Global Invalidate, and PASIDs on
//! completions.

use super::engine::Engine;
use super::fault::FaultKind;
use super::packed::PackedEv;
use super::regs::err_caps;
use crate::functional::{FnId, Role};
use pcielab_config::caps::{
    id, pcie_reg, DEVCTL2_ATOMIC_EGRESS_BLOCKING, DEVCTL2_E2E_PREFIX_BLOCKING,
};
use pcielab_config::ext_caps::{AER_UNCORR_PREFIX_BLOCKED, PASID_CTL_ENABLE};
use pcielab_sim::Context;

/// `Dir::egress_block`: the transmitting port blocks End-End TLP Prefixes.
pub(crate) const BLOCK_PREFIX: u8 = 1;
/// `Dir::egress_block`: the transmitting port blocks AtomicOps (see `atomic`).
pub(crate) const BLOCK_ATOMIC: u8 = 2;

impl Engine {
    /// True if endpoint `node`'s function may tag a request with `pasid` (its PASID
    /// capability enabled, `pasid` within its width); otherwise records why not.
    #[cold]
    #[inline(never)]
    pub(crate) fn pasid_allowed(&mut self, node: u32, pasid: u32) -> bool {
        let name = &self.nodes[node as usize].name;
        // Function 0's PASID capability governs every function of the device: VFs must
        // not implement one and share their PF's configuration (PCIe r5.0 §9.3.7.14).
        let Some(f) = self.nodes[node as usize].func else {
            return false;
        };
        let Some(at) = super::ats::ext_cap(self, f, id::EXT_PASID) else {
            self.fault(FaultKind::Pasid, format!(
                "{name}: DMA with PASID {pasid:#x}, but the function has no PASID capability: not issued"
            ));
            return false;
        };
        let cs = &self.fabric.functions[f.0 as usize].config;
        let width = (cs.read_u16(at + 4) >> 8) & 0x1f;
        if cs.read_u16(at + 6) & PASID_CTL_ENABLE == 0 {
            self.fault(
                FaultKind::Pasid,
                format!(
                    "{name}: DMA with PASID {pasid:#x} while PASID Enable is clear: not issued"
                ),
            );
            return false;
        }
        if pasid >> width != 0 {
            self.fault(
                FaultKind::Pasid,
                format!(
                    "{name}: DMA with PASID {pasid:#x} beyond Max PASID Width {width}: not issued"
                ),
            );
            return false;
        }
        true
    }

    /// Sets PASID Enable on every function with the PASID capability (an IOMMU with
    /// PASID support; see the module documentation).
    pub(crate) fn enable_pasid(&mut self) {
        for i in 0..self.fabric.functions.len() {
            if let Some(at) = super::ats::ext_cap(self, FnId(i as u32), id::EXT_PASID) {
                let cs = &mut self.fabric.functions[i].config;
                let v = cs.read_u16(at + 6);
                cs.hw_write(at + 6, 2, (v | PASID_CTL_ENABLE) as u32);
            }
        }
    }

    /// The link direction port `f` transmits on, away from its switch or root complex:
    /// a root or downstream port's downward direction, an upstream port's upward one.
    fn egress_dir(&self, f: FnId) -> Option<u16> {
        match self.fabric.functions[f.0 as usize].role {
            Role::RootPort { .. } | Role::SwitchDownstream { .. } => self.port_link(f),
            Role::SwitchUpstream => self.up_dir(self.fabric.functions[f.0 as usize].node.0),
            _ => None,
        }
    }

    /// Re-reads End-End TLP Prefix Blocking and AtomicOp Egress Blocking of port `f`
    /// (after a configuration write or a reset).
    pub(crate) fn refresh_egress_blocking(&mut self, f: FnId) {
        let Some(d) = self.egress_dir(f) else {
            return;
        };
        let (Some(p), _) = err_caps(&self.fabric, f) else {
            return;
        };
        let ctl2 = self.fabric.functions[f.0 as usize]
            .config
            .read_u16(p + pcie_reg::DEVCTL2);
        self.dirs[d as usize].egress_block = if ctl2 & DEVCTL2_E2E_PREFIX_BLOCKING != 0 {
            BLOCK_PREFIX
        } else {
            0
        } | if ctl2 & DEVCTL2_ATOMIC_EGRESS_BLOCKING != 0 {
            BLOCK_ATOMIC
        } else {
            0
        };
    }

    /// TLP `id`, which carries a PASID prefix, was about to leave through direction `d`,
    /// whose transmitting port blocks End-End TLP Prefixes: the port completes a
    /// non-posted request with UR, logs TLP Prefix Blocked, and the TLP goes no further.
    #[cold]
    #[inline(never)]
    pub(crate) fn prefix_egress_blocked(
        &mut self,
        d: u16,
        id: u32,
        cx: &mut Context<'_, PackedEv>,
    ) {
        self.dirs[d as usize].counters.prefix_blocked += 1;
        self.refuse_at_egress(d, id, AER_UNCORR_PREFIX_BLOCKED, cx);
    }
}
