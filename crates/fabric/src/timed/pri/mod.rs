//! The Page Request Interface (PCIe Base Spec, ATS chapter): a device whose
//! Translation Request was refused (the page is not resident) asks the host to make
//! it resident, and asks again for the translation when the host says it did.
//!
//! ```text
//!   device (ATS + PRI enabled)                       root complex / host software
//!   Translation Completion: no access
//!     ── Page Request (Msg 04h to the RC: page, R/W, Last, PRG index) ──►
//!                                       page-fault handling (page_fault_latency):
//!                                       a page of an on-demand region is mapped
//!     ◄── PRG Response (Msg 05h by ID: PRG index, Success or Invalid Request) ──
//!   Success: Translation Request again; otherwise the DMA fails
//! ```
//!
//! * **Enable.** [`SimConfig::pri`](super::SimConfig) sets PRI Enable and an
//!   Outstanding Page Request Allocation equal to the capacity on every function with
//!   the capability (psmem: 32) when the simulation starts; configuration writes
//!   change both later. Each Page Request is a group of one page (Last set); a device
//!   has at most its allocation (up to 512 group indices) outstanding, and units past
//!   that wait for an index.
//! * **Host.** [`FabricSim::iommu_map_on_demand`](super::FabricSim::iommu_map_on_demand)
//!   declares I/O virtual ranges that software maps when a device asks (demand
//!   paging, shared virtual memory). A Page Request for a page in such a range is
//!   answered Success after `page_fault_latency` (plus the root complex latency),
//!   when the IOMMU mapping appears; any other page gets Invalid Request. Every
//!   request is recorded ([`FabricSim::page_requests`](super::FabricSim::page_requests)).
//! * A unit refused again after a Success fails its DMAs (no loop), as does any
//!   response other than Success; Response Failure also sets the capability's
//!   Response Failure status bit and stops the device's page requests. A response for
//!   a group index the device has not outstanding sets Unexpected PRG Index. Host
//!   software can send responses of its own
//!   ([`FabricSim::send_prg_response`](super::FabricSim::send_prg_response)); those map
//!   nothing.
//!
//! Not modelled: multi-page groups, Stop Markers, and the PRG Response
//! timeout.

use super::ats::{ext_cap, Pending, PAGING};
use super::engine::Engine;
use super::fault::FaultKind;
use super::packed::PackedEv;
use super::tlp::{Detail, Kind, Tlp, NONE};
use crate::functional::{FnId, Origin};
use pcielab_config::ext_caps::{PRI_CTL_ENABLE, PRI_STA_RESPONSE_FAILURE, PRI_STA_STOPPED};
use pcielab_sim::{Context, SimDuration, SimTime};
use pcielab_wire::Bdf;

pub(crate) mod state;
pub(crate) use state::*;

impl Engine {
    /// Sets PRI Enable and the allocation (= capacity) on every function with PRI.
    pub(crate) fn enable_pri(&mut self) {
        for i in 0..self.fabric.functions.len() {
            let f = FnId(i as u32);
            if let Some(a) = ext_cap(self, f, pcielab_config::caps::id::EXT_PRI) {
                let cs = &mut self.fabric.functions[i].config;
                let cap = cs.read_u32(a + 8);
                cs.hw_write(a + 0xc, 4, cap);
                let v = cs.read_u16(a + 4);
                cs.hw_write(a + 4, 2, (v | PRI_CTL_ENABLE) as u32);
                self.pri_configured(f);
            }
        }
    }

    /// Re-reads function `f`'s PRI enable and allocation (its device must have ATS
    /// enabled to use them).
    pub(crate) fn pri_configured(&mut self, f: FnId) {
        let Some(a) = ext_cap(self, f, pcielab_config::caps::id::EXT_PRI) else {
            return;
        };
        let func = &self.fabric.functions[f.0 as usize];
        let node = func.node.0;
        let on = func.config.read_u16(a + 4) & PRI_CTL_ENABLE != 0;
        let alloc = func.config.read_u32(a + 0xc).min(512) as u16;
        let stopped = !on;
        let sta = func.config.read_u16(a + 6);
        let sta = if stopped {
            sta | PRI_STA_STOPPED
        } else {
            sta & !PRI_STA_STOPPED
        };
        self.fabric.functions[f.0 as usize]
            .config
            .hw_write(a + 6, 2, sta as u32);
        let Some(dev) = self.ats.get_mut(&node) else {
            return;
        };
        match (on, dev.prg_free.is_some()) {
            (true, false) => dev.prg_free = Some((0..alloc).rev().collect()),
            (false, true) => dev.prg_free = None,
            _ => {}
        }
    }

    /// A Translation Request of `node`'s device for `p` was refused: true if PRI takes
    /// over (a Page Request went out or waits for a group index); false if the
    /// refusal stands (PRI off, or the page was made resident once already).
    pub(super) fn page_request(
        &mut self,
        node: u32,
        p: &Pending,
        cx: &mut Context<'_, PackedEv>,
    ) -> bool {
        let Some(dev) = self.ats.get_mut(&node) else {
            return false;
        };
        let Some(free) = dev.prg_free.as_mut() else {
            return false;
        };
        if p.paged {
            return false;
        }
        let prg = free.pop().unwrap_or(NONE as u16);
        dev.pending.push(Pending {
            tag: PAGING,
            prg,
            ..p.clone()
        });
        if prg != NONE as u16 {
            self.send_page_request(node, (p.unit, p.pasid), prg, p.rw, cx);
        }
        true
    }

    /// Sends the Page Request for `page` of PASID `pasid`'s address space (or NONE).
    fn send_page_request(
        &mut self,
        node: u32,
        (page, pasid): (u64, u32),
        prg: u16,
        rw: u8,
        cx: &mut Context<'_, PackedEv>,
    ) {
        // Function 0's PRI: VFs must not implement the capability and share their PF's
        // (PCIe r5.0 §9.3.7.11).
        let Some(f) = self.nodes[node as usize].func else {
            return;
        };
        let Some(dev) = self.ats.get_mut(&node) else {
            return;
        };
        dev.stats.page_requests += 1;
        let me = dev.bdf;
        let host = self.rc.bdf;
        let t = Tlp {
            completer: host,
            detail: Detail::PageRequest { prg, rw: rw & 3 },
            pasid,
            ..Tlp::new(Kind::PageReq, me, page & !0xfff, 0)
        };
        if let Err(e) = self.inject(Origin::Function(f), t, host, cx) {
            self.fault(
                FaultKind::NotRoutable,
                format!("Page Request not routable: {e}"),
            );
        }
    }

    /// The host received Page Request `t`: it answers after the page-fault handling
    /// time (and the root complex's latency), Success for a page of an on-demand
    /// range of that device, Invalid Request otherwise.
    pub(crate) fn host_page_request(&mut self, t: &Tlp, cx: &mut Context<'_, PackedEv>) {
        let (dev, page, pasid) = (t.requester, t.addr & !0xfff, t.pasid);
        let Detail::PageRequest { prg, rw } = t.detail else {
            return;
        };
        let known = self.rc.on_demand.iter().any(|r| {
            r.device == dev && r.pasid == pasid && page >= r.iova && page - r.iova < r.len
        });
        let code = if known { PRG_SUCCESS } else { PRG_INVALID };
        self.rc.page_requests.push(PageRequestRecord {
            device: dev,
            page,
            pasid: (pasid != NONE).then_some(pasid),
            prg_index: prg,
            read: rw & 1 != 0,
            write: rw & 2 != 0,
            received: cx.now(),
            answered: None,
            response: code,
        });
        let fault = self.cfg.page_fault_latency;
        if let Err(e) = self.send_prg_response(dev, page, prg, code, fault, cx) {
            self.fault(FaultKind::PageRequest, e.to_string());
        }
    }

    /// Sends device `dev` a PRG Response for group `prg` (about `page`) with `code`,
    /// `after` software's time plus the root complex latency.
    pub(crate) fn send_prg_response(
        &mut self,
        dev: Bdf,
        page: u64,
        prg: u16,
        code: u8,
        after: SimDuration,
        cx: &mut Context<'_, PackedEv>,
    ) -> Result<(), super::error::SimError> {
        let host = self.rc.bdf;
        let resp = Tlp {
            completer: dev,
            detail: Detail::PrgResponse {
                prg: prg & 0x1ff,
                code: code & 0xf,
            },
            ..Tlp::new(Kind::PrgResp, host, page, 0)
        };
        let (path, hops, dest) = self
            .route(Origin::Host, Kind::PrgResp, page, dev)
            .map_err(|e| super::error::SimError::Route(format!("PRG Response to {dev}: {e}")))?;
        let mut resp = Tlp {
            path,
            hops,
            dest,
            ..resp
        };
        self.at_source(Origin::Host, &mut resp, (hops > 0).then_some(path[0]));
        let id = self.pool.alloc(resp);
        cx.schedule_in(after + self.cfg.rc_latency, super::event::Ev::HostSend(id));
        Ok(())
    }

    /// PRG Response `id` leaves the root complex: software has mapped the page (on
    /// Success), now.
    pub(crate) fn prg_response_leaves(&mut self, id: u32, now: SimTime) {
        let t = &self.pool.tlps[id as usize];
        let Detail::PrgResponse { prg, code } = t.detail else {
            return;
        };
        let (dev, page) = (t.completer, t.addr);
        // The request's address space (PRG Responses carry no PASID: PRG Response
        // PASID Required is clear).
        let pasid = self
            .rc
            .page_requests
            .iter()
            .rev()
            .find(|r| r.device == dev && r.prg_index == prg && r.answered.is_none())
            .map_or(NONE, |r| r.pasid.unwrap_or(NONE));
        if code == PRG_SUCCESS {
            let r = self
                .rc
                .on_demand
                .iter()
                .find(|r| {
                    r.device == dev && r.pasid == pasid && page >= r.iova && page - r.iova < r.len
                })
                .copied();
            if let (Some(r), Some(m)) = (r, self.iommu.as_mut()) {
                m.map(dev, pasid, page, r.phys + (page - r.iova), 4096);
            }
        }
        if let Some(rec) = self
            .rc
            .page_requests
            .iter_mut()
            .rev()
            .find(|r| r.device == dev && r.prg_index == prg && r.answered.is_none())
        {
            rec.answered = Some(now);
        }
    }

    /// PRG Response `id` reached `node`'s device.
    pub(crate) fn prg_response(&mut self, node: u32, id: u32, cx: &mut Context<'_, PackedEv>) {
        let Detail::PrgResponse { prg, code } = self.pool.tlps[id as usize].detail else {
            return;
        };
        let Some(dev) = self.ats.get_mut(&node) else {
            return;
        };
        let Some(i) = dev
            .pending
            .iter()
            .position(|p| p.tag == PAGING && p.prg == prg)
        else {
            // No group with that index outstanding: Unexpected PRG Index (status bit 1).
            if let Some(f) = self.nodes[node as usize].func {
                if let Some(a) = ext_cap(self, f, pcielab_config::caps::id::EXT_PRI) {
                    super::regs::set_bits(
                        &mut self.fabric.functions[f.0 as usize].config,
                        a + 6,
                        2,
                        2,
                    );
                }
            }
            return;
        };
        let mut p = dev.pending.remove(i);
        if let Some(free) = dev.prg_free.as_mut() {
            free.push(prg);
        }
        // A unit waiting for a group index takes this one.
        if let Some(w) = dev
            .pending
            .iter_mut()
            .find(|p| p.tag == PAGING && p.prg == NONE as u16)
        {
            w.prg = prg;
            if let Some(free) = dev.prg_free.as_mut() {
                free.retain(|&x| x != prg);
            }
            let (unit, pasid, rw) = (w.unit, w.pasid, w.rw);
            self.send_page_request(node, (unit, pasid), prg, rw, cx);
        }
        let Some(dev) = self.ats.get_mut(&node) else {
            return;
        };
        if code == PRG_SUCCESS {
            dev.stats.pages_made_resident += 1;
            p.paged = true;
            p.prg = NONE as u16;
            p.tag = NONE as u16;
            p.stale = false;
            let (unit, pasid) = (p.unit, p.pasid);
            dev.pending.push(p);
            self.send_translation_request(node, unit, pasid, cx);
            return;
        }
        dev.stats.page_requests_failed += 1;
        if code == PRG_FAILURE {
            // Response Failure: the device stops asking.
            dev.prg_free = None;
            if let Some(f) = self.nodes[node as usize].func {
                if let Some(a) = ext_cap(self, f, pcielab_config::caps::id::EXT_PRI) {
                    super::regs::set_bits(
                        &mut self.fabric.functions[f.0 as usize].config,
                        a + 6,
                        2,
                        PRI_STA_RESPONSE_FAILURE as u32,
                    );
                }
            }
        }
        let name = self.nodes[node as usize].name.clone();
        self.fault(
            FaultKind::PageRequest,
            format!(
                "{name}: Page Request for {:#x} answered with code {code}",
                p.unit
            ),
        );
        for (oi, did) in p.waiters {
            self.translation_arrived(node, oi, did, Some(None), cx);
        }
    }
}
