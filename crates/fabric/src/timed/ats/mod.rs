//! Address Translation Services (PCIe Base Spec, ATS chapter): a device asks the
//! root complex's translation agent for translations, keeps them in its Address
//! Translation Cache (ATC) and sends translated requests, which pass the IOMMU
//! without a lookup; the host takes translations back with Invalidate Requests.
//!
//! ```text
//!   device (ATS Enable set)                         root complex (IOMMU = translation agent)
//!   DMA at untranslated address A
//!     ATC miss ── Translation Request (MRd, AT=01b, 2 DW) ──►  IOTLB lookup / page walk
//!              ◄── Translation Completion (CplD, 8 bytes) ──   entry: translated page, S, R, W
//!     MRd/MWr at the translated address, AT=10b ─────────────►  no IOMMU lookup
//!   host unmaps: ◄── Invalidate Request (MsgD 01h, ITag) ──
//!     drops the ATC entries, waits for its DMAs that use them,
//!              ── Invalidate Completion (Msg 02h) ───────────►  recorded with its time
//! ```
//!
//! * **Enable.** [`SimConfig::ats`](super::SimConfig) sets ATS Enable on every function
//!   with the capability when the simulation starts; a configuration write that
//!   clears it turns the device's ATS off (its ATC is dropped), one that changes the
//!   Smallest Translation Unit (STU) drops the ATC too.
//! * **Translation.** A DMA starts once its device holds a translation for every
//!   STU-sized unit it touches: units that miss the ATC are requested (one
//!   Translation Request per unit, tags 768..1023 of the device, so the DMA tags stay
//!   free); DMAs that need a unit already requested wait for the same completion.
//!   The request reaches the root complex whatever its address; the IOMMU answers
//!   after its IOTLB hit or miss latency with one Translation Completion entry of the
//!   IOMMU's page size. An unmapped page gets an entry with neither Read nor Write
//!   access: the DMA fails (counted as `denied`; it is not an IOMMU fault).
//! * **Translated requests** carry AT = 10b and the translated address (visible in
//!   traces and captures). The root complex passes them untranslated when their
//!   requester has had ATS enabled (ATS trusts the device; the IOMMU's permission is
//!   not revoked when the device later turns ATS off); from any other function they
//!   are blocked and recorded as IOMMU faults
//!   ([`FabricSim::inject_translated_write`](super::FabricSim::inject_translated_write)
//!   plays a device that tries). A device that turns ATS off drops its ATC: its
//!   running DMAs go on untranslated, and completions of Translation Requests still
//!   out are absorbed.
//! * **Invalidation.** [`FabricSim::iommu_unmap`](super::FabricSim::iommu_unmap)
//!   removes the mapping and, for a device with ATS enabled, sends an Invalidate
//!   Request for the smallest aligned power-of-two range (at least the STU) that
//!   covers it. The device drops the entries it overlaps and marks translations it is
//!   still waiting for as stale (their completions are not cached: the unit is
//!   requested again); it sends the Invalidate Completion once no running DMA uses a
//!   translation in the range. Being posted, the completion cannot pass the device's
//!   earlier writes.
//! * **Timeouts.** Translation Requests are non-posted: a DMA (read or write) still
//!   waiting for a translation after `completion_timeout` fails, and the device logs
//!   Completion Timeout; translations no running DMA waits for are then given up
//!   (tags return, a late completion is an Unexpected Completion).
//!
//! Entry and range encoding: a 64-bit value sent as two big-endian DWs (bits 63:32
//! first): address bits 63:12, S (bit 11), and for entries W (bit 1) and R (bit 0).
//! With S set, the size is 8 KiB << (the number of ones from bit 12 up).
//!
//! PASID: see the `pasid` module (translations are kept per PASID).
//!
//! Not modelled: Global Invalidate, the Execute, Privileged and No-Snoop
//! attributes, an Invalidate Queue Depth limit, and ATS for peer-to-peer DMA (the Page
//! Request Interface is in `pri`).

use super::engine::Engine;
use super::fault::FaultKind;
use super::node::state::NodeKind;
use super::packed::PackedEv;
use super::poison::state::Poison;
use super::tlp::{Detail, Kind, Tlp, NONE};
use crate::functional::{FnId, Origin};
use pcielab_config::ext_caps::ATS_CTL_ENABLE;
use pcielab_sim::{Context, SimDuration, SimTime};

use pcielab_wire::{Bdf, CplStatus};

pub(crate) mod state;
pub(crate) use state::*;

/// The ATS capability of function `f`: its offset.
pub(crate) fn ext_cap(e: &Engine, f: FnId, id: u16) -> Option<u16> {
    let func = e.fabric.functions.get(f.0 as usize)?;
    pcielab_config::caps::walk(func.config.bytes())
        .0
        .iter()
        .find(|c| c.extended && c.id == id)
        .map(|c| c.offset)
}

fn ats_cap(e: &Engine, f: FnId) -> Option<u16> {
    ext_cap(e, f, pcielab_config::caps::id::EXT_ATS)
}

impl Engine {
    /// Sets ATS Enable on every function with the ATS capability (`SimConfig::ats`).
    pub(crate) fn enable_ats(&mut self) {
        for i in 0..self.fabric.functions.len() {
            let f = FnId(i as u32);
            if let Some(a) = ats_cap(self, f) {
                let cs = &mut self.fabric.functions[i].config;
                let v = cs.read_u16(a + 6);
                cs.hw_write(a + 6, 2, (v | ATS_CTL_ENABLE) as u32);
                self.ats_configured(f, None);
            }
        }
    }

    /// Re-reads the ATS Control register of function `f` (after a configuration
    /// write).
    pub(crate) fn refresh_ats(&mut self, f: FnId, cx: &mut Context<'_, PackedEv>) {
        if ats_cap(self, f).is_some() {
            self.ats_configured(f, Some(cx));
        }
    }

    /// Enables ATS and then PRI (`SimConfig::ats`, `SimConfig::pri`).
    pub(crate) fn enable_ats_pri(&mut self, pri: bool) {
        self.enable_ats();
        if pri {
            self.enable_pri();
        }
    }

    fn ats_configured(&mut self, f: FnId, cx: Option<&mut Context<'_, PackedEv>>) {
        let Some(a) = ats_cap(self, f) else {
            return;
        };
        let func = &self.fabric.functions[f.0 as usize];
        let ctl = func.config.read_u16(a + 6);
        let node = func.node.0;
        // Only the function a device's DMA engine issues from.
        if self.nodes[node as usize].func != Some(f) {
            return;
        }
        let (on, stu) = (ctl & ATS_CTL_ENABLE != 0, PAGE << (ctl & 0x1f));
        let bdf = self.fabric.bdf(f);
        match (on, self.ats.get(&node).map(|d| d.stu)) {
            (true, Some(s)) if s == stu => {}
            (true, Some(_)) => {
                if let Some(d) = self.ats.get_mut(&node) {
                    d.stu = stu;
                    d.atc.clear();
                }
            }
            (true, None) => {
                self.ats.insert(node, AtsDevice::new(bdf, stu));
                // The IOMMU accepts its translated requests from now on (as a driver
                // enables the device's ATS and the IOMMU's device TLB together; turning
                // the device's ATS off later does not revoke it here).
                if !self.rc.ats_trusted.contains(&bdf) {
                    self.rc.ats_trusted.push(bdf);
                }
            }
            (false, Some(_)) => {
                // ATS off: the ATC goes; running DMAs go on untranslated (through the
                // IOMMU), and so do those waiting for translations.
                if let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind {
                    for op in ep.ops.iter_mut() {
                        op.xlate.clear();
                    }
                }
                let d = self.ats.remove(&node);
                // Translation Requests still out: their completions are absorbed.
                for p in d.iter().flat_map(|d| d.pending.iter()) {
                    if p.tag >= ATS_TAG_BASE && p.tag < ATS_TAG_BASE + ATS_TAGS {
                        self.ats_orphans.push((node, p.tag));
                    }
                }
                if let (Some(d), Some(cx)) = (d, cx) {
                    for p in d.pending {
                        for (oi, id) in p.waiters {
                            self.translation_arrived(node, oi, id, None, cx);
                        }
                    }
                }
            }
            (false, None) => {}
        }
        self.pri_configured(f);
        self.ats_any = !self.ats.is_empty();
    }

    /// True if `req` is a device with ATS enabled (its translated requests pass).
    fn ats_trusts(&self, req: Bdf) -> bool {
        self.rc.ats_trusted.contains(&req)
    }

    /// The host-memory address a DMA request `id` reaching the root complex uses: its
    /// own when there is no IOMMU or when it is translated (from a device with ATS
    /// enabled), else the IOMMU's translation; None (recorded as a fault) when that
    /// fails or when a device without ATS enabled sends a translated request.
    pub(crate) fn dma_target(&mut self, id: u32, now: SimTime) -> Option<u64> {
        let t = &self.pool.tlps[id as usize];
        let (req, addr, translated) = (t.requester, t.addr, t.addr_type == 2);
        let pasid = t.pasid;
        if self.iommu.is_none() {
            return Some(addr);
        }
        if translated {
            if self.ats_trusts(req) {
                return Some(addr);
            }
            if let Some(m) = self.iommu.as_mut() {
                m.fault(now, req, pasid, addr);
            }
            return None;
        }
        self.iommu
            .as_mut()
            .and_then(|m| m.translate(now, req, pasid, addr))
    }

    /// The IOMMU's added latency for a Translation Request (IOTLB hit or page walk).
    pub(crate) fn translation_latency(
        &mut self,
        req: Bdf,
        pasid: u32,
        addr: u64,
        now: SimTime,
    ) -> SimDuration {
        match self.iommu.as_mut() {
            Some(m) => m.lookup_latency(req, pasid, addr, now),
            None => SimDuration::ZERO,
        }
    }

    /// Called as DMA `oi` of `node` starts: true if it must wait for translations
    /// (requested here); false if it may go now (its translations are in `xlate`, or
    /// the device has no ATS).
    pub(crate) fn ats_gate(&mut self, node: u32, oi: u32, cx: &mut Context<'_, PackedEv>) -> bool {
        let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind else {
            return false;
        };
        let Some(dev) = self.ats.get_mut(&node) else {
            return false;
        };
        let op = &mut ep.ops[oi as usize];
        // The ATC is function 0's (the function whose ATS capability is enabled). Other
        // functions, VFs among them, have no ATS capability: their DMAs go
        // untranslated, under their own requester IDs, through the IOMMU.
        if op.func != 0 {
            return false;
        }
        // `last`: the DMA's last byte (it has one: empty DMAs end before this), so
        // that a DMA ending at the top of the address space does not overflow.
        let (id, last, sp) = (op.id, op.addr + (op.len.max(1) - 1), op.pasid);
        let mut unit = op.addr & !(dev.stu - 1);
        let mut missing = Vec::new();
        loop {
            let next = match dev
                .atc
                .iter()
                .position(|&(b, _, s, p)| p == sp && b <= unit && unit - b < s)
            {
                Some(i) => {
                    dev.stats.atc_hits += 1;
                    let e = dev.atc[i];
                    if i != 0 {
                        dev.atc.remove(i);
                        dev.atc.push_front(e);
                    }
                    let x = (e.0, e.1, e.2);
                    if !op.xlate.contains(&x) {
                        op.xlate.push(x);
                    }
                    let past = e.0.checked_add(e.2);
                    past.zip(unit.checked_add(dev.stu)).map(|(a, b)| a.max(b))
                }
                None => {
                    dev.stats.atc_misses += 1;
                    missing.push(unit);
                    unit.checked_add(dev.stu)
                }
            };
            match next {
                Some(n) if n <= last => unit = n,
                _ => break,
            }
        }
        if missing.is_empty() {
            return false;
        }
        op.xlate_wait = missing.len() as u32;
        let rw = if op.write { 2 } else { 1 };
        // Translation Requests are non-posted: the completion timeout covers them.
        self.arm_dma_timeout(node, cx);
        for u in missing {
            let dev = self.ats.get_mut(&node).expect("checked above");
            match dev
                .pending
                .iter_mut()
                .find(|p| p.unit == u && p.pasid == sp && !p.stale)
            {
                Some(p) => {
                    p.waiters.push((oi, id));
                    p.rw |= rw;
                }
                None => {
                    dev.pending.push(Pending {
                        unit: u,
                        pasid: sp,
                        tag: NONE as u16,
                        waiters: vec![(oi, id)],
                        stale: false,
                        rw,
                        prg: NONE as u16,
                        paged: false,
                    });
                    self.send_translation_request(node, u, sp, cx);
                }
            }
        }
        true
    }

    /// Sends the Translation Request of `unit` (of PASID `pasid`'s address space, or
    /// NONE) when a tag is free (else it waits for one: see `translation_completion`).
    pub(super) fn send_translation_request(
        &mut self,
        node: u32,
        unit: u64,
        pasid: u32,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let Some(f) = self.nodes[node as usize].func else {
            return;
        };
        let Some(dev) = self.ats.get_mut(&node) else {
            return;
        };
        let Some(tag) = dev.free_tags.pop() else {
            return;
        };
        if let Some(p) = dev
            .pending
            .iter_mut()
            .find(|p| p.unit == unit && p.pasid == pasid && p.tag == NONE as u16)
        {
            p.tag = tag;
        }
        dev.stats.translation_requests += 1;
        let me = dev.bdf;
        let host = self.rc.bdf;
        let t = Tlp {
            tag,
            pasid,
            ..Tlp::new(Kind::TransReq, me, unit, 8)
        };
        if let Err(e) = self.inject(Origin::Function(f), t, host, cx) {
            self.fault(
                FaultKind::NotRoutable,
                format!("Translation Request not routable: {e}"),
            );
        }
    }

    /// The translation agent answers Translation Request `t` (the IOMMU's latency is
    /// already paid): one entry for the page, or an entry without access when the
    /// page is not mapped; Unsupported Request without an IOMMU.
    pub(crate) fn translation_request(&mut self, t: &Tlp, cx: &mut Context<'_, PackedEv>) {
        let host = self.rc.bdf;
        let Some(m) = self.iommu.as_mut() else {
            self.send_completions(Origin::Host, host, t, CplStatus::Ur, &[], Poison::Clean, cx);
            return;
        };
        m.stats.translation_requests += 1;
        let ps = m.cfg.page_size;
        // A PASID's space when the request carries one (none without PASID support).
        let found = if t.pasid != NONE && !m.cfg.pasid {
            None
        } else {
            m.peek(t.requester, t.pasid, t.addr)
        };
        let v = match found {
            Some(p) => encode_range(p, ps, 3),
            None => encode_range(t.addr, ps, 0),
        };
        let data = v.to_be_bytes();
        self.send_completions(
            Origin::Host,
            host,
            t,
            CplStatus::Sc,
            &data,
            Poison::Clean,
            cx,
        );
    }

    /// A completion for `node`'s device: true if it was the answer to one of its
    /// Translation Requests (handled here).
    pub(crate) fn translation_completion(
        &mut self,
        node: u32,
        id: u32,
        cx: &mut Context<'_, PackedEv>,
    ) -> bool {
        let (tag, status) = (
            self.pool.tlps[id as usize].tag,
            self.pool.tlps[id as usize].status(),
        );
        if tag < ATS_TAG_BASE {
            return false;
        }
        if let Some(i) = self.ats_orphans.iter().position(|&x| x == (node, tag)) {
            // Asked before the device's ATS was turned off: dropped.
            self.ats_orphans.swap_remove(i);
            return true;
        }
        let Some(dev) = self.ats.get_mut(&node) else {
            return false;
        };
        let Some(i) = dev
            .pending
            .iter()
            .position(|p| p.tag == tag && tag != PAGING)
        else {
            return false;
        };
        let p = dev.pending.remove(i);
        dev.free_tags.push(tag);
        // A unit waiting for a tag takes this one.
        if let Some((w, wp)) = dev
            .pending
            .iter()
            .find(|p| p.tag == NONE as u16)
            .map(|p| (p.unit, p.pasid))
        {
            self.send_translation_request(node, w, wp, cx);
        }
        if p.stale {
            // Invalidated while in flight: not cached; ask again.
            if let Some(dev) = self.ats.get_mut(&node) {
                dev.pending.push(Pending {
                    stale: false,
                    tag: NONE as u16,
                    ..p
                });
                self.send_translation_request(node, p.unit, p.pasid, cx);
            }
            return true;
        }
        let payload = self.payload(id);
        let entry = (status == CplStatus::Sc && payload.len() >= 8).then(|| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&payload[..8]);
            decode_range(u64::from_be_bytes(b))
        });
        let atc_cap = self.cfg.atc_entries;
        let granted = match entry {
            Some((base, size, r, w)) if r || w => {
                let Some(dev) = self.ats.get_mut(&node) else {
                    return true;
                };
                // The entry covers the unit's page (its size may exceed the STU).
                let ubase = p.unit & !(size - 1);
                let e = (ubase, base, size, p.pasid);
                dev.atc.retain(|x| *x != e);
                dev.atc.push_front(e);
                while dev.atc.len() > atc_cap {
                    dev.atc.pop_back();
                    dev.stats.evictions += 1;
                }
                Some((ubase, base, size))
            }
            _ => {
                // With PRI the device asks the host to make the page resident first.
                if entry.is_some() && self.page_request(node, &p, cx) {
                    return true;
                }
                if let Some(dev) = self.ats.get_mut(&node) {
                    dev.stats.denied += 1;
                }
                let name = self.nodes[node as usize].name.clone();
                let space = if p.pasid == NONE {
                    String::new()
                } else {
                    format!(" (PASID {:#x})", p.pasid)
                };
                self.fault(
                    FaultKind::Ats,
                    format!("{name}: ATS translation of {:#x}{space} refused", p.unit),
                );
                None
            }
        };
        for (oi, did) in p.waiters {
            self.translation_arrived(node, oi, did, Some(granted), cx);
        }
        true
    }

    /// A translation DMA `oi` (id `did`) waited for arrived (`Some(Some(e))`), was
    /// refused (`Some(None)`), or ATS went off (`None`: the DMA goes untranslated).
    pub(super) fn translation_arrived(
        &mut self,
        node: u32,
        oi: u32,
        did: super::endpoint::DmaId,
        got: Option<Option<(u64, u64, u64)>>,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind else {
            return;
        };
        let Some(op) = ep.ops.get_mut(oi as usize) else {
            return;
        };
        if !op.live || op.id != did || op.xlate_wait == 0 {
            return; // finished meanwhile (failed, or timed out)
        }
        match got {
            Some(Some(e)) => {
                if !op.xlate.contains(&e) {
                    op.xlate.push(e);
                }
            }
            Some(None) => {
                op.ok = false;
                op.xlate_wait = 0;
                self.finish_dma(node, oi, cx);
                return;
            }
            None => op.xlate.clear(),
        }
        op.xlate_wait -= 1;
        if op.xlate_wait == 0 {
            op.last_progress = cx.now();
            self.dma_go(node, oi, cx);
        }
    }

    /// The address DMA `oi` of `node` puts on the wire for untranslated address `a`,
    /// and the AT field: translated (2) when the DMA holds a translation for it.
    #[inline]
    pub(crate) fn dma_address(&self, node: u32, oi: u32, a: u64) -> (u64, u8) {
        if !self.ats_any {
            return (a, 0);
        }
        let NodeKind::Ep(ep) = &self.nodes[node as usize].kind else {
            return (a, 0);
        };
        let op = &ep.ops[oi as usize];
        if op.xlate.is_empty() {
            return (a, 0);
        }
        match op.xlate.iter().find(|&&(b, _, s)| b <= a && a - b < s) {
            Some(&(b, p, _)) => (p + (a - b), 2),
            None => (a, 0),
        }
    }

    /// The host takes back translations of `[iova, iova + len)` from `node`'s device
    /// (after the IOMMU unmapped them): an Invalidate Request goes out when the device
    /// has ATS enabled. Returns false when it has not.
    pub(crate) fn send_ats_invalidate(
        &mut self,
        node: u32,
        pasid: u32,
        iova: u64,
        len: u64,
        cx: &mut Context<'_, PackedEv>,
    ) -> bool {
        let Some(dev) = self.ats.get(&node) else {
            return false;
        };
        let (dest, stu) = (dev.bdf, dev.stu);
        let end = iova.saturating_add(len.max(1));
        let mut size = stu;
        // (A region that reaches the top of the address space covers the end.)
        while size < 1 << 62
            && (iova & !(size - 1))
                .checked_add(size)
                .is_some_and(|e| e < end)
        {
            size *= 2;
        }
        let base = iova & !(size - 1);
        let itag = (self.rc.ats_invals.len() % 32) as u8;
        let data = encode_range(base, size, 0).to_be_bytes();
        let p = self.pool.alloc_payload(&data);
        let host = self.rc.bdf;
        let t = Tlp {
            completer: dest,
            detail: Detail::Itag(itag),
            data: p,
            pasid,
            ..Tlp::new(Kind::AtsInv, host, base, 8)
        };
        self.rc.ats_invals.push(AtsInvalidation {
            device: dest,
            pasid: (pasid != NONE).then_some(pasid),
            base,
            size,
            itag,
            sent: cx.now(),
            completed: None,
        });
        if let Err(e) = self.inject(Origin::Host, t, dest, cx) {
            self.fault(
                FaultKind::NotRoutable,
                format!("Invalidate Request to {dest} not routable: {e}"),
            );
        }
        true
    }

    /// An Invalidate Request `id` reached `node`'s device.
    pub(crate) fn ats_invalidate_request(
        &mut self,
        node: u32,
        id: u32,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let (itag, from, sp) = {
            let t = &self.pool.tlps[id as usize];
            (t.itag() & 0x1f, t.requester, t.pasid)
        };
        let payload = self.payload(id);
        let mut b = [0u8; 8];
        let n = payload.len().min(8);
        b[..n].copy_from_slice(&payload[..n]);
        let (base, size, _, _) = decode_range(u64::from_be_bytes(b));
        let overlaps = |b: u64, s: u64| b < base.saturating_add(size) && base < b.saturating_add(s);
        let Some(dev) = self.ats.get_mut(&node) else {
            // ATS is off: nothing cached; complete at once.
            self.send_invalidate_completion(node, itag, from, cx);
            return;
        };
        dev.stats.invalidations += 1;
        let before = dev.atc.len();
        // Only the translations of the request's address space: its PASID's, or
        // those obtained without a PASID.
        dev.atc.retain(|&(b, _, s, p)| p != sp || !overlaps(b, s));
        dev.stats.invalidated_entries += (before - dev.atc.len()) as u64;
        let stu = dev.stu;
        for p in dev.pending.iter_mut() {
            if p.pasid == sp && overlaps(p.unit, stu) {
                p.stale = true;
            }
        }
        dev.parked.push((base, size, sp, itag, from));
        self.ats_dma_finished(node, cx);
    }

    /// Sends the Invalidate Completions of `node`'s device whose ranges no running
    /// DMA uses any more.
    pub(crate) fn ats_dma_finished(&mut self, node: u32, cx: &mut Context<'_, PackedEv>) {
        let Some(dev) = self.ats.get_mut(&node) else {
            return;
        };
        if dev.parked.is_empty() {
            return;
        }
        let NodeKind::Ep(ep) = &self.nodes[node as usize].kind else {
            return;
        };
        let in_use = |base: u64, size: u64, sp: u32| {
            ep.ops.iter().any(|op| {
                op.live
                    && op.pasid == sp
                    && op.xlate.iter().any(|&(b, _, s)| {
                        b < base.saturating_add(size) && base < b.saturating_add(s)
                    })
            })
        };
        let mut done = Vec::new();
        dev.parked.retain(|&(b, s, sp, itag, from)| {
            if in_use(b, s, sp) {
                true
            } else {
                done.push((itag, from));
                false
            }
        });
        for (itag, from) in done {
            self.send_invalidate_completion(node, itag, from, cx);
        }
    }

    fn send_invalidate_completion(
        &mut self,
        node: u32,
        itag: u8,
        to: Bdf,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let Some(f) = self.nodes[node as usize].func else {
            return;
        };
        let me = self.fabric.bdf(f);
        let t = Tlp {
            completer: to,
            detail: Detail::Itag(itag),
            ..Tlp::new(Kind::AtsInvCpl, me, 0, 0)
        };
        if let Err(e) = self.inject(Origin::Function(f), t, to, cx) {
            self.fault(
                FaultKind::NotRoutable,
                format!("Invalidate Completion not routable: {e}"),
            );
        }
    }

    /// An Invalidate Completion reached the root complex: the oldest open invalidation
    /// of that device with its ITag is complete.
    pub(crate) fn ats_invalidate_completion(&mut self, t: &Tlp, cx: &mut Context<'_, PackedEv>) {
        let now = cx.now();
        let itag = t.itag() & 0x1f;
        match self
            .rc
            .ats_invals
            .iter_mut()
            .find(|v| v.device == t.requester && v.itag == itag && v.completed.is_none())
        {
            Some(v) => v.completed = Some(now),
            None => self.fault(
                FaultKind::Ats,
                format!(
                    "Invalidate Completion from {} for ITag {itag} that no request is waiting for",
                    t.requester
                ),
            ),
        }
    }

    /// After a completion-timeout sweep: translations no running DMA waits for any more
    /// are given up (their tags and group indices return; a late completion is then an
    /// Unexpected Completion).
    pub(crate) fn ats_forget_dead(&mut self, node: u32) {
        let NodeKind::Ep(ep) = &self.nodes[node as usize].kind else {
            return;
        };
        let Some(dev) = self.ats.get_mut(&node) else {
            return;
        };
        let alive = |&(oi, id): &(u32, super::endpoint::DmaId)| {
            ep.ops
                .get(oi as usize)
                .is_some_and(|op| op.live && op.id == id)
        };
        let (dead, kept): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut dev.pending)
            .into_iter()
            .partition(|p| !p.waiters.iter().any(alive));
        dev.pending = kept;
        for p in dead {
            if (ATS_TAG_BASE..ATS_TAG_BASE + ATS_TAGS).contains(&p.tag) {
                dev.free_tags.push(p.tag);
            }
            if let (Some(free), true) = (dev.prg_free.as_mut(), p.prg != NONE as u16) {
                free.push(p.prg);
            }
        }
    }

    /// The ATS counters of `node`'s device (None when ATS is off there).
    pub(crate) fn ats_stats(&self, node: u32) -> Option<AtsStats> {
        self.ats.get(&node).map(|d| d.stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_encoding_round_trips_and_follows_the_size_rule() {
        // 4 KiB: S clear.
        assert_eq!(encode_range(0x1234_5000, 4096, 3), 0x1234_5003);
        // 8 KiB: S set, bit 12 clear.
        assert_eq!(encode_range(0x1234_4000, 8192, 1), 0x1234_4801);
        // 2 MiB: S set, bits 12..=19 set, bit 20 clear.
        assert_eq!(
            encode_range(0x4020_0000, 2 << 20, 0),
            0x4020_0000 | 0xff000 | 0x800
        );
        for shift in 12..40 {
            let size = 1u64 << shift;
            let base = (0x77u64 << 40) | (size * 3);
            for rw in 0..4 {
                let v = encode_range(base, size, rw);
                assert_eq!(
                    decode_range(v),
                    (base, size, rw & 1 != 0, rw & 2 != 0),
                    "{size:#x}"
                );
            }
        }
    }
}
