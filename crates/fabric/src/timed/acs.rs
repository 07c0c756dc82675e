//! Access Control Services (PCIe Base Spec 6.12): peer-to-peer redirection at switch
//! downstream ports.
//!
//! Every root and switch downstream port has the ACS capability (Source Validation,
//! Translation Blocking, P2P Request Redirect, P2P Completion Redirect, Upstream
//! Forwarding). The simulator acts on the two redirects: a TLP that would go from one
//! downstream port of a switch straight to another (a peer-to-peer request, routed by
//! address or by ID, or a completion) instead goes up to the root complex and back
//! down when the port it entered by has P2P Request Redirect (requests) or P2P
//! Completion Redirect (completions) set — the path an IOMMU needs to see, and the one
//! that makes peer-to-peer slow on machines that isolate devices. The root complex
//! turns it around like any peer-to-peer TLP between root ports (after its latency,
//! split into 64-byte pieces with `p2p_split`); the IOMMU does not translate it.
//! `SimConfig::acs` has enumeration set Source Validation, both redirects and Upstream
//! Forwarding on every downstream port, as Linux does when an IOMMU is present; host
//! software may write the ACS Control register itself.
//!
//! Not modelled: Source Validation and Translation Blocking checks (every TLP the
//! fabric makes carries its own requester ID), P2P Egress Control, Direct Translated
//! P2P.

use super::engine::Engine;
use super::tlp::Kind;
use crate::functional::{FnId, Origin, Role, RouteError};
use pcielab_config::caps::id;

/// ACS Control: Source Validation Enable.
pub(crate) const ACS_SV: u16 = 1 << 0;
/// ACS Control: P2P Request Redirect Enable.
pub(crate) const ACS_RR: u16 = 1 << 2;
/// ACS Control: P2P Completion Redirect Enable.
pub(crate) const ACS_CR: u16 = 1 << 3;
/// ACS Control: Upstream Forwarding Enable.
pub(crate) const ACS_UF: u16 = 1 << 4;

impl Engine {
    /// The ACS Control register of port `f` (0 without the capability).
    fn acs_control(&self, f: FnId) -> u16 {
        super::ats::ext_cap(self, f, id::EXT_ACS).map_or(0, |at| {
            self.fabric.functions[f.0 as usize].config.read_u16(at + 6)
        })
    }

    /// The bridges a TLP of `kind` from `origin` crosses: `hops` as routed, or, when it
    /// goes from one downstream port of a switch to another and the first redirects
    /// it, up to the root complex and back down to its destination (`addr` or
    /// `dest_id`).
    pub(crate) fn acs_redirect(
        &self,
        origin: Origin,
        kind: Kind,
        addr: u64,
        dest_id: pcielab_wire::Bdf,
        hops: Vec<FnId>,
    ) -> Result<Vec<FnId>, RouteError> {
        if !matches!(origin, Origin::Function(_)) {
            return Ok(hops);
        }
        let f = &self.fabric.functions;
        let peer = hops.windows(2).position(|w| {
            let (a, b) = (&f[w[0].0 as usize], &f[w[1].0 as usize]);
            matches!(a.role, Role::SwitchDownstream { .. })
                && matches!(b.role, Role::SwitchDownstream { .. })
                && a.node == b.node
        });
        let Some(i) = peer else {
            return Ok(hops);
        };
        let bit = if kind.is_completion() { ACS_CR } else { ACS_RR };
        if self.acs_control(hops[i]) & bit == 0 {
            return Ok(hops);
        }
        let up = self.fabric.route_id(origin, self.rc.bdf)?.hops;
        let down = if kind.routed_by_id() {
            self.fabric.route_id(Origin::Host, dest_id)?.hops
        } else {
            let io = matches!(kind, Kind::IoRd | Kind::IoWr);
            self.fabric
                .route_addr_through_bridges(Origin::Host, addr, io)?
                .hops
        };
        Ok(up.into_iter().chain(down).collect())
    }

    /// Sets Source Validation, both P2P redirects and Upstream Forwarding in every
    /// downstream port with the ACS capability (`SimConfig::acs`).
    pub(crate) fn enable_acs(&mut self) {
        for i in 0..self.fabric.functions.len() {
            let f = FnId(i as u32);
            if !matches!(
                self.fabric.functions[i].role,
                Role::SwitchDownstream { .. } | Role::RootPort { .. }
            ) {
                continue;
            }
            if let Some(at) = super::ats::ext_cap(self, f, id::EXT_ACS) {
                let cs = &mut self.fabric.functions[i].config;
                let v = cs.read_u16(at + 6) | ACS_SV | ACS_RR | ACS_CR | ACS_UF;
                cs.hw_write(at + 6, 2, v as u32);
            }
        }
        self.invalidate_routes();
    }
}
