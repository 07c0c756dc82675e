//! ATS: translations requested from the root complex's IOMMU, cached in the device's
//! ATC and used by translated requests that skip the IOMMU; refusals; invalidations
//! and their completions.

use crate::common::{caps, ext_cap, hand_timing, switch_tree, trace_tlps};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::FaultKind;
use pcielab_fabric::timed::{
    AddrPattern, DmaId, DmaOpKind, DmaStream, Endpoint, EpCx, FabricSim, IommuConfig, SimConfig,
};
use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::tlp::{MsgCode, TlpHeader, TlpRepr};
use pcielab_wire::AddressType;

const IOVA: u64 = 0x4000_0000;
const PHYS: u64 = 0x2_0000_0000;
const END: SimTime = SimTime::from_ps(u64::MAX / 2);

fn cfg(ats: bool, iommu: bool) -> SimConfig {
    SimConfig {
        iommu: iommu.then(IommuConfig::default),
        ats,
        ..hand_timing(true)
    }
}

fn sim(ats: bool, iommu: bool) -> FabricSim {
    let mut s = FabricSim::new(
        &switch_tree(3, false),
        &KindRegistry::builtin(),
        cfg(ats, iommu),
    )
    .unwrap();
    if iommu {
        s.iommu_map("ep", IOVA, PHYS, 4 * 4096).unwrap();
    }
    s
}

fn writes(count: u64) -> Box<DmaStream> {
    writes_at(IOVA, count)
}

/// `count` 4 KiB DMA writes, one at a time, over the four pages from `iova`.
fn writes_at(iova: u64, count: u64) -> Box<DmaStream> {
    Box::new(DmaStream::new(
        DmaOpKind::Write,
        4096,
        1,
        count,
        iova,
        4 * 4096,
        AddrPattern::Sequential,
    ))
}

/// TLPs the trace shows on link direction `dir`.
fn on(s: &FabricSim, dir: &str) -> Vec<(u64, TlpRepr<'static>)> {
    let t = s.trace().unwrap();
    trace_tlps(t)
        .filter(|(r, _)| t.dir_names[r.dir as usize] == dir)
        .map(|(r, p)| {
            let payload: &'static [u8] = Box::leak(p.payload.to_vec().into_boxed_slice());
            (r.time_ps, TlpRepr { payload, ..p })
        })
        .collect()
}

fn mem(p: &TlpRepr<'_>) -> Option<(bool, u64, AddressType)> {
    match &p.header {
        TlpHeader::Mem(h) => Some((p.payload.is_empty(), h.address, p.at)),
        _ => None,
    }
}

#[test]
fn a_translation_per_page_then_translated_writes_that_skip_the_iommu() {
    let mut s = sim(true, true);
    s.attach("ep", writes(4)).unwrap();
    s.run_until_idle(END);
    assert!(s.errors().is_empty(), "{:?}", s.errors());
    let a = s.ats_stats("ep").unwrap();
    assert_eq!(
        (a.translation_requests, a.atc_misses, a.atc_hits, a.denied),
        (4, 4, 0, 0)
    );
    // The IOMMU walked each page once, for the Translation Requests; the 16 MWrs
    // never reached its IOTLB.
    let (m, faults) = s.iommu_stats().unwrap();
    assert_eq!((m.translation_requests, m.misses, m.hits), (4, 4, 0));
    assert!(faults.is_empty());
    // The data is at the physical pages.
    let mut b = [0u8; 2];
    s.host_read(PHYS + 3 * 4096 + 4094, &mut b);
    assert_eq!(b, [(4094u64 as u8) ^ 93, (4095u64 as u8) ^ 93]);
    s.host_read(IOVA + 3 * 4096, &mut b);
    assert_eq!(b, [0, 0]);

    // On the wire: per page a Translation Request (MRd, AT=01b, 2 DW) for the
    // untranslated page, then its 16 MWrs at the translated address with AT=10b.
    let up: Vec<_> = on(&s, "ep->sw.0")
        .iter()
        .filter_map(|(_, p)| mem(p))
        .collect();
    assert_eq!(up.len(), 4 + 64, "{up:x?}");
    for k in 0..4u64 {
        let page = &up[k as usize * 17..][..17];
        assert_eq!(
            page[0],
            (true, IOVA + k * 4096, AddressType::TranslationRequest)
        );
        for (i, w) in page[1..].iter().enumerate() {
            assert_eq!(
                *w,
                (
                    false,
                    PHYS + k * 4096 + i as u64 * 256,
                    AddressType::Translated
                )
            );
        }
    }
    // The Translation Completions: one 8-byte entry each, the physical page with R
    // and W, as big-endian DWs.
    let entries: Vec<u64> = on(&s, "sw.0->ep")
        .iter()
        .filter(|(_, p)| matches!(p.header, TlpHeader::Cpl(_)))
        .map(|(_, p)| u64::from_be_bytes(p.payload.try_into().unwrap()))
        .collect();
    assert_eq!(
        entries,
        (0..4).map(|k| (PHYS + k * 4096) | 3).collect::<Vec<_>>()
    );

    // Again over the same pages: all from the ATC, no request.
    s.attach("ep", writes(4)).unwrap();
    s.run_until_idle(END);
    let a = s.ats_stats("ep").unwrap();
    assert_eq!((a.translation_requests, a.atc_hits), (4, 4));
    assert_eq!(s.iommu_stats().unwrap().0.misses, 4);
}

#[test]
fn without_ats_every_write_goes_through_the_iotlb() {
    let mut s = sim(false, true);
    s.attach("ep", writes(4)).unwrap();
    s.run_until_idle(END);
    assert!(s.ats_stats("ep").is_none());
    let (m, _) = s.iommu_stats().unwrap();
    assert_eq!((m.translation_requests, m.misses, m.hits), (0, 4, 60));
    assert!(on(&s, "ep->sw.0")
        .iter()
        .filter_map(|(_, p)| mem(p))
        .all(|(_, a, at)| at == AddressType::Untranslated && (IOVA..IOVA + 4 * 4096).contains(&a)));
}

/// Reads `len` bytes at `addr` once per start; keeps what came back and when.
#[derive(Debug, Default)]
struct Reader {
    addr: u64,
    len: u64,
    got: Vec<(bool, Vec<u8>, SimTime)>,
}

impl Endpoint for Reader {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        cx.dma_read(self.addr, self.len);
    }
    fn dma_done(&mut self, _id: DmaId, ok: bool, data: &[u8], cx: &mut EpCx<'_>) {
        self.got.push((ok, data.to_vec(), cx.now()));
    }
    fn report(&self) -> Option<serde_json::Value> {
        let (ok, _, t) = self.got.last()?;
        Some(serde_json::json!({"ok": ok, "done_ps": t.as_ps()}))
    }
}

/// Latency of a read of `len` bytes at IOVA (at PHYS without an IOMMU, or at `addr`)
/// right after the links trained (ps), and of a second one of the same page.
fn read_latencies(ats: bool, iommu: bool, len: u64) -> (u64, u64) {
    read_latencies_at(ats, iommu, len, if iommu { IOVA } else { PHYS })
}

fn read_latencies_at(ats: bool, iommu: bool, len: u64, addr: u64) -> (u64, u64) {
    let mut s = sim(ats, iommu);
    s.run_for(SimDuration::from_us(5));
    let mut lat = Vec::new();
    for _ in 0..2 {
        let t0 = s.now();
        s.attach(
            "ep",
            Box::new(Reader {
                addr,
                len,
                got: Vec::new(),
            }),
        )
        .unwrap();
        s.run_until_idle(END);
        let r = s.model("ep").unwrap().report().unwrap();
        assert_eq!(r["ok"], true);
        lat.push(r["done_ps"].as_u64().unwrap() - t0.as_ps());
    }
    (lat[0], lat[1])
}

#[test]
fn a_translation_costs_one_small_read_with_a_page_walk_and_a_hit_costs_nothing() {
    let (plain, _) = read_latencies(false, false, 64);
    let (first, second) = read_latencies(true, true, 64);
    // From the ATC the read is as fast as with no IOMMU at all.
    assert_eq!(second, plain);
    // The first waits for one Translation Request: an 8-byte read (below 4 GiB, so a
    // 3-DW header like the request's) whose page walk (200 ns) stands where host
    // memory (80 ns) was.
    let (read8, _) = read_latencies_at(false, false, 8, IOVA);
    let walk = IommuConfig::default().miss_latency.as_ps();
    let memory = SimConfig::default().mem_latency.as_ps();
    assert_eq!(first - plain, read8 - memory + walk);
    // Without ATS the IOTLB lookup is paid on the read itself: a miss (page walk).
    // (The untranslated address is below 4 GiB: compare with a plain read there.)
    let (plain_low, _) = read_latencies_at(false, false, 64, IOVA);
    let (untranslated, hit) = read_latencies(false, true, 64);
    assert_eq!(untranslated - plain_low, walk);
    assert_eq!(hit, plain_low); // IOTLB hit latency 0 by default
}

#[test]
fn an_unmapped_page_is_refused_and_the_dma_fails_without_a_fault() {
    let mut s = sim(true, true);
    s.attach(
        "ep",
        Box::new(Reader {
            addr: IOVA + 16 * 4096,
            len: 64,
            got: Vec::new(),
        }),
    )
    .unwrap();
    s.run_until_idle(END);
    assert_eq!(s.model("ep").unwrap().report().unwrap()["ok"], false);
    let a = s.ats_stats("ep").unwrap();
    assert_eq!((a.translation_requests, a.denied), (1, 1));
    let (m, faults) = s.iommu_stats().unwrap();
    assert_eq!((m.translation_requests, m.faults), (1, 0));
    assert!(faults.is_empty());
    assert!(
        s.errors()
            .iter()
            .any(|e| e.is(FaultKind::Ats) && e.message.contains("refused")),
        "{:?}",
        s.errors()
    );
    // No DMA read went out: only the Translation Request.
    let up: Vec<_> = on(&s, "ep->sw.0")
        .iter()
        .filter_map(|(_, p)| mem(p))
        .collect();
    assert_eq!(
        up,
        vec![(true, IOVA + 16 * 4096, AddressType::TranslationRequest)]
    );
}

#[test]
fn ats_without_an_iommu_is_refused() {
    let e = FabricSim::new(
        &switch_tree(3, false),
        &KindRegistry::builtin(),
        cfg(true, false),
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("ats"), "{e}");
}

#[test]
fn an_unmap_invalidates_the_device_and_its_completion_comes_back() {
    let mut s = sim(true, true);
    s.attach("ep", writes(4)).unwrap();
    s.run_until_idle(END);
    let t0 = s.now();
    s.iommu_unmap("ep", IOVA + 4096, 4096).unwrap();
    s.run_until_idle(END);
    let inv = s.ats_invalidations().to_vec();
    assert_eq!(inv.len(), 1);
    let v = inv[0];
    assert_eq!((v.base, v.size, v.itag, v.sent), (IOVA + 4096, 4096, 0, t0));
    assert_eq!(v.device, s.bdf("ep").unwrap());
    let done = v.completed.expect("completed");
    assert!(done > v.sent);
    let a = s.ats_stats("ep").unwrap();
    assert_eq!((a.invalidations, a.invalidated_entries), (1, 1));

    // On the wire: the Invalidate Request down (by ID, ITag 0, the range as data) and
    // the Invalidate Completion up (ITag vector bit 0, one completion).
    let down: Vec<_> = on(&s, "sw.0->ep")
        .into_iter()
        .filter_map(|(t, p)| match p.header {
            TlpHeader::Msg(m) => Some((t, m, p.payload.to_vec())),
            _ => None,
        })
        .collect();
    assert_eq!(down.len(), 1);
    let (t_req, m, data) = &down[0];
    assert_eq!(m.code, MsgCode::AtsInvalidateRequest);
    assert_eq!(m.fields.destination_id(), s.bdf("ep").unwrap());
    assert_eq!(m.fields.itag(), 0);
    assert_eq!(data, &(IOVA + 4096).to_be_bytes().to_vec());
    let up: Vec<_> = on(&s, "ep->sw.0")
        .into_iter()
        .filter_map(|(t, p)| match p.header {
            TlpHeader::Msg(m) if m.code == MsgCode::AtsInvalidateCompletion => Some((t, m)),
            _ => None,
        })
        .collect();
    assert_eq!(up.len(), 1);
    let (t_cpl, m) = &up[0];
    assert!(t_cpl > t_req);
    assert_eq!(m.fields.itag_vector(), 1);
    assert_eq!(m.fields.completion_count(), 1);
    assert_eq!(m.requester_id, s.bdf("ep").unwrap());

    // The invalidated page is gone (a new request, refused: unmapped); the others
    // are still cached.
    s.attach(
        "ep",
        Box::new(Reader {
            addr: IOVA + 4096 + 100,
            len: 64,
            got: Vec::new(),
        }),
    )
    .unwrap();
    s.run_until_idle(END);
    assert_eq!(s.model("ep").unwrap().report().unwrap()["ok"], false);
    s.attach(
        "ep",
        Box::new(Reader {
            addr: IOVA + 2 * 4096,
            len: 64,
            got: Vec::new(),
        }),
    )
    .unwrap();
    s.run_until_idle(END);
    assert_eq!(s.model("ep").unwrap().report().unwrap()["ok"], true);
    let a = s.ats_stats("ep").unwrap();
    assert_eq!((a.translation_requests, a.denied), (5, 1));
}

#[test]
fn an_invalidation_waits_for_the_dma_that_uses_the_translation() {
    // Two read tags: the DMA's reads go out one after another, so the Invalidate
    // Request reaches the device while the DMA still has reads to make.
    let c = SimConfig {
        dma_tags: 2,
        ..cfg(true, true)
    };
    let mut s = FabricSim::new(&switch_tree(3, false), &KindRegistry::builtin(), c).unwrap();
    s.iommu_map("ep", IOVA, PHYS, 4 * 4096).unwrap();
    s.run_for(SimDuration::from_us(5));
    // A 16 KiB read: 32 MRds of 512 bytes behind 4 translations.
    s.attach(
        "ep",
        Box::new(Reader {
            addr: IOVA,
            len: 4 * 4096,
            got: Vec::new(),
        }),
    )
    .unwrap();
    // Once the reads run (translations in), unmap... a page the DMA still uses.
    let started = s.now();
    while s.ats_stats("ep").unwrap().translation_requests < 4
        || s.now() < started + SimDuration::from_us(2)
    {
        s.run_for(SimDuration::from_ns(100));
    }
    s.iommu_unmap("ep", IOVA, 4096).unwrap();
    s.run_until_idle(END);
    let r = s.model("ep").unwrap().report().unwrap();
    assert_eq!(r["ok"], true);
    let dma_done = SimTime::from_ps(r["done_ps"].as_u64().unwrap());
    let v = s.ats_invalidations()[0];
    let done = v.completed.unwrap();
    // The request reached the device long before the DMA ended; the completion left
    // after it.
    let t = s.trace().unwrap();
    let at_device = trace_tlps(t)
        .find(|(r, p)| {
            t.dir_names[r.dir as usize] == "sw.0->ep" && matches!(p.header, TlpHeader::Msg(_))
        })
        .map(|(r, _)| r.time_ps)
        .unwrap();
    assert!(
        at_device + 2_000_000 < dma_done.as_ps(),
        "{v:?} {dma_done:?}"
    );
    assert!(done > dma_done, "{v:?} {dma_done:?}");
    assert_eq!(s.model("ep").unwrap().report().unwrap()["ok"], true);
}

#[test]
fn ats_runs_are_deterministic() {
    let run = || {
        let mut s = sim(true, true);
        s.attach("ep", writes(8)).unwrap();
        s.run_until_idle(END);
        s.iommu_unmap("ep", IOVA, 2 * 4096).unwrap();
        s.run_until_idle(END);
        let t = s.trace().unwrap();
        t.records
            .iter()
            .map(|r| (r.time_ps, r.dir, t.bytes(r).to_vec()))
            .collect::<Vec<_>>()
    };
    assert_eq!(run(), run());
}

#[test]
fn a_translated_write_from_a_device_without_ats_is_blocked_and_with_ats_trusted() {
    // A device that marks its write translated (AT = 10b) to skip the IOMMU: without
    // ATS enabled it is blocked and recorded as a fault; with ATS the root complex
    // trusts it and the write lands at the address it chose (the known weakness of
    // ATS), and the IOMMU never looks at it.
    for ats in [false, true] {
        let mut s = sim(ats, true);
        s.run_for(SimDuration::from_us(5));
        let victim = 0x3_0000_0000u64;
        s.inject_translated_write("ep", victim, &[0xde, 0xad, 0xbe, 0xef])
            .unwrap();
        s.run_until_idle(END);
        let mut b = [0u8; 4];
        s.host_read(victim, &mut b);
        let (m, faults) = s.iommu_stats().unwrap();
        if ats {
            assert_eq!(b, [0xde, 0xad, 0xbe, 0xef]);
            assert!(faults.is_empty());
        } else {
            assert_eq!(b, [0; 4]);
            assert_eq!(faults.len(), 1);
            assert_eq!(
                (faults[0].iova, faults[0].requester),
                (victim, s.bdf("ep").unwrap())
            );
        }
        assert_eq!(
            m.misses + m.hits,
            0,
            "no IOTLB lookup for a translated request"
        );
        let up: Vec<_> = on(&s, "ep->sw.0")
            .iter()
            .filter_map(|(_, p)| mem(p))
            .collect();
        assert_eq!(up, vec![(false, victim, AddressType::Translated)]);
    }
}

#[test]
fn turning_ats_off_mid_dma_sends_the_rest_untranslated_through_the_iommu() {
    // Two devices with ATS, so the simulator keeps its ATS paths on after one turns off.
    let mut s = sim(true, true);
    s.iommu_map("ep2", IOVA, PHYS, 4096).unwrap();
    s.run_for(SimDuration::from_us(5));
    // One 16 KiB write: its four translations come first, then 64 MWrs.
    s.attach("ep", writes(4)).unwrap();
    let ep = s.bdf("ep").unwrap();
    let at = ext_cap(&s, ep, pcielab_config::caps::id::EXT_ATS);
    // After the first DMA (4 KiB, translated), software clears ATS Enable.
    while s.ats_stats("ep").unwrap().translation_requests < 2 {
        s.run_for(SimDuration::from_ns(50));
    }
    let all = pcielab_wire::ByteEnables::from_bits_truncate(0xf);
    s.config_write(ep, at + 4, 0, all).unwrap();
    s.run_until_idle(END);
    assert!(s.ats_stats("ep").is_none());
    assert!(s.errors().is_empty(), "{:?}", s.errors());
    let (_, faults) = s.iommu_stats().unwrap();
    assert!(faults.is_empty(), "{faults:?}");
    // Every byte landed at the physical pages, translated or not.
    let mut mem4 = vec![0u8; 4 * 4096];
    s.host_read(PHYS, &mut mem4);
    for (i, b) in mem4.iter().enumerate() {
        let (k, o) = (i / 4096, i % 4096);
        assert_eq!(*b, (o as u8) ^ (k as u8).wrapping_mul(31), "byte {i}");
    }
    // Both kinds of write are on the wire: translated ones first, then untranslated.
    let ats: Vec<AddressType> = on(&s, "ep->sw.0")
        .iter()
        .filter_map(|(_, p)| mem(p))
        .filter(|(r, _, _)| !r)
        .map(|(_, _, at)| at)
        .collect();
    assert_eq!(ats.len(), 64);
    let first_untranslated = ats
        .iter()
        .position(|a| *a == AddressType::Untranslated)
        .unwrap();
    assert!(first_untranslated >= 16, "{first_untranslated}");
    assert!(ats[first_untranslated..]
        .iter()
        .all(|a| *a == AddressType::Untranslated));
}

#[test]
fn a_translation_that_never_comes_back_times_out_the_write_waiting_for_it() {
    // ECRC on and a switch that corrupts every TLP's data: the Translation Completion
    // (8 bytes of data) fails its ECRC at the device and is discarded. The write DMA
    // waiting for it fails after the completion timeout, which the device logs.
    let c = SimConfig {
        ecrc: true,
        switch_error_rate: 1.0,
        completion_timeout: SimDuration::from_us(20),
        ..cfg(true, true)
    };
    let mut s = FabricSim::new(&switch_tree(3, false), &KindRegistry::builtin(), c).unwrap();
    s.iommu_map("ep", IOVA, PHYS, 4 * 4096).unwrap();
    s.run_for(SimDuration::from_us(5));
    let t0 = s.now();
    s.attach("ep", writes(1)).unwrap();
    s.run_until_idle(END);
    let r = s.model("ep").unwrap().report().unwrap();
    assert_eq!(
        (r["dmas"].as_u64(), r["failed"].as_u64()),
        (Some(1), Some(1)),
        "{r}"
    );
    assert!(s.now() >= t0 + SimDuration::from_us(20));
    assert!(
        s.errors().iter().any(|e| e.is(FaultKind::CompletionTimeout)
            && e.message == "ep: ATS translation completion timeout"),
        "{:?}",
        s.errors()
    );
    let ep = s.bdf("ep").unwrap();
    let (_, aer) = caps(&mut s, ep);
    let uncorrectable = s.cfg_read(ep, aer + 4);
    assert_eq!(
        uncorrectable & (1 << 19 | 1 << 14),
        1 << 19 | 1 << 14,
        "{uncorrectable:#x}"
    );
    // Nothing was written, and the IOMMU answered the one request.
    let mut b = [0u8; 4];
    s.host_read(PHYS, &mut b);
    assert_eq!(b, [0; 4]);
    assert_eq!(s.iommu_stats().unwrap().0.translation_requests, 1);
}

/// Reads `len` bytes at `addr` once; hands what came back (if it succeeded) out.
#[derive(Debug)]
struct Grab {
    addr: u64,
    len: u64,
    out: std::sync::Arc<std::sync::Mutex<Option<Vec<u8>>>>,
}

impl Endpoint for Grab {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        cx.dma_read(self.addr, self.len);
    }
    fn dma_done(&mut self, _id: DmaId, ok: bool, data: &[u8], _cx: &mut EpCx<'_>) {
        *self.out.lock().unwrap() = ok.then(|| data.to_vec());
    }
}

#[test]
fn a_dma_read_through_ats_returns_the_pages_data() {
    // The completions of a translated read carry translated addresses: the device
    // places their data by the request's address as sent (it once counted from the
    // untranslated address, and a translated read returned zeros as if it succeeded).
    let mut s = sim(true, true);
    let data: Vec<u8> = (0..6000u32).map(|i| (i * 7 + 3) as u8).collect();
    s.host_write(PHYS + 100, &data);
    let out = std::sync::Arc::default();
    let grab = Grab {
        addr: IOVA + 100,
        len: 6000,
        out: std::sync::Arc::clone(&out),
    };
    s.attach("ep", Box::new(grab)).unwrap();
    s.run_until_idle(END);
    let st = s.ats_stats("ep").unwrap();
    assert_eq!(st.translation_requests, 2, "two pages, translated");
    assert_eq!(out.lock().unwrap().as_deref(), Some(&data[..]));
}

/// DMAs that end exactly at the top of the 64-bit I/O virtual address space: the
/// device translates the last pages like any others (the ATC walk used to compute the
/// DMA's end as address + length, which overflows there), and the data lands.
#[test]
fn dmas_ending_at_the_top_of_the_address_space_are_translated() {
    const TOP: u64 = 0u64.wrapping_sub(4 * 4096);
    let mut s = sim(true, true);
    s.iommu_map("ep", TOP, PHYS, 4 * 4096).unwrap();
    s.attach("ep", writes_at(TOP, 4)).unwrap();
    s.run_until_idle(END);
    assert!(s.errors().is_empty(), "{:?}", s.errors());
    let a = s.ats_stats("ep").unwrap();
    assert_eq!((a.translation_requests, a.atc_misses, a.denied), (4, 4, 0));
    // Translated writes only, into the mapped pages.
    let writes: Vec<_> = on(&s, "ep->sw.0")
        .iter()
        .filter_map(|(_, p)| mem(p))
        .filter(|(read, _, _)| !*read)
        .collect();
    assert_eq!(writes.len(), 64, "{writes:?}");
    assert!(writes
        .iter()
        .all(|&(_, a, at)| at == AddressType::Translated && (PHYS..PHYS + 4 * 4096).contains(&a)));
}
