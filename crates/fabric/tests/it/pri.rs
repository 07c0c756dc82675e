//! PRI: a refused translation becomes a Page Request; host software makes the page
//! resident after its page-fault time and answers with a PRG Response; the device
//! asks for the translation again and its DMA goes on.

use crate::common::{ext_cap, hand_timing, ser_gen3x4, switch_tree, trace_tlps};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::FaultKind;
use pcielab_fabric::timed::{
    AddrPattern, DmaId, DmaOpKind, DmaStream, Endpoint, EpCx, FabricSim, IommuConfig, SimConfig,
};
use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::tlp::{MsgCode, MsgHeader, TlpHeader};

const IOVA: u64 = 0x4000_0000;
const PHYS: u64 = 0x2_0000_0000;
const END: SimTime = SimTime::from_ps(u64::MAX / 2);
const FAULT_NS: u64 = 3_000;

fn cfg(pri: bool) -> SimConfig {
    SimConfig {
        iommu: Some(IommuConfig::default()),
        ats: true,
        pri,
        page_fault_latency: SimDuration::from_ns(FAULT_NS),
        ..hand_timing(true)
    }
}

/// The switch tree with PRI on and four pages of IOVA mapped on demand.
fn sim() -> FabricSim {
    let mut s =
        FabricSim::new(&switch_tree(3, false), &KindRegistry::builtin(), cfg(true)).unwrap();
    s.iommu_map_on_demand("ep", IOVA, PHYS, 4 * 4096).unwrap();
    s
}

/// The messages of link direction `dir`: (first-bit time, header).
fn messages(s: &FabricSim, dir: &str) -> Vec<(u64, MsgHeader)> {
    let t = s.trace().unwrap();
    trace_tlps(t)
        .filter(|(r, _)| t.dir_names[r.dir as usize] == dir)
        .filter_map(|(r, p)| match p.header {
            TlpHeader::Msg(m) => Some((r.time_ps, m)),
            _ => None,
        })
        .collect()
}

#[test]
fn page_requests_make_the_pages_resident_and_the_writes_go_on() {
    let mut s = sim();
    s.attach(
        "ep",
        Box::new(DmaStream::new(
            DmaOpKind::Write,
            4096,
            1,
            4,
            IOVA,
            4 * 4096,
            AddrPattern::Sequential,
        )),
    )
    .unwrap();
    s.run_until_idle(END);
    assert!(s.errors().is_empty(), "{:?}", s.errors());
    // Every page: refused, paged in, translated.
    let a = s.ats_stats("ep").unwrap();
    assert_eq!(
        (
            a.translation_requests,
            a.denied,
            a.page_requests,
            a.pages_made_resident
        ),
        (8, 0, 4, 4)
    );
    let mut b = [0u8; 2];
    s.host_read(PHYS + 3 * 4096 + 4094, &mut b);
    assert_eq!(b, [(4094u64 as u8) ^ 93, (4095u64 as u8) ^ 93]);
    // The host answered each after its page-fault time and the root complex latency.
    let recs = s.page_requests().to_vec();
    assert_eq!(recs.len(), 4);
    for (k, r) in recs.iter().enumerate() {
        assert_eq!(r.page, IOVA + k as u64 * 4096);
        assert_eq!((r.read, r.write, r.response), (false, true, 0));
        let took = r.answered.unwrap() - r.received;
        assert_eq!(took.as_ps(), (FAULT_NS + 100) * 1000);
    }
    // On the wire: a Page Request up for each page (write access, last of its group),
    // a PRG Response down with Success and the same group index.
    let ep = s.bdf("ep").unwrap();
    let up = messages(&s, "ep->sw.0");
    let down = messages(&s, "sw.0->ep");
    assert_eq!((up.len(), down.len()), (4, 4));
    for (k, ((tu, u), (td, d))) in up.iter().zip(&down).enumerate() {
        assert_eq!(u.code, MsgCode::PageRequest);
        assert_eq!(u.requester_id, ep);
        assert_eq!(u.fields.page_address(), IOVA + k as u64 * 4096);
        assert_eq!(u.fields.page_request_flags(), (false, true, true));
        let prg = u.fields.prg_index(MsgCode::PageRequest);
        assert_eq!(d.code, MsgCode::PrgResponse);
        assert_eq!(d.fields.destination_id(), ep);
        assert_eq!(d.fields.prg_index(MsgCode::PrgResponse), prg);
        assert_eq!(d.fields.prg_response_code(), 0);
        // Hand-computed, from the request's first bit on the device's link to the
        // response's first bit on it: both are 4-DW messages without data (16 + 8 =
        // 24 wire bytes) on Gen3 x4. Up: the link, 5 ns, the switch (150 ns), the
        // link, 5 ns, the root complex (100 ns); the page fault; down: the root
        // complex (100 ns), the link, 5 ns, the switch (150 ns).
        let ser = ser_gen3x4(24);
        let want = 3 * ser + (3 * 5 + 2 * 150 + 2 * 100 + FAULT_NS) * 1000;
        assert_eq!(td - tu, want, "page {k}");
    }
}

/// Reads 64 bytes at `addr` once; reports whether it worked.
#[derive(Debug)]
struct Reader {
    addr: u64,
    ok: Option<bool>,
}

impl Endpoint for Reader {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        cx.dma_read(self.addr, 64);
    }
    fn dma_done(&mut self, _id: DmaId, ok: bool, _data: &[u8], _cx: &mut EpCx<'_>) {
        self.ok = Some(ok);
    }
    fn report(&self) -> Option<serde_json::Value> {
        Some(serde_json::json!({ "ok": self.ok? }))
    }
}

#[test]
fn a_page_outside_the_on_demand_ranges_gets_invalid_request_and_the_read_fails() {
    let mut s = sim();
    s.attach(
        "ep",
        Box::new(Reader {
            addr: IOVA + 64 * 4096,
            ok: None,
        }),
    )
    .unwrap();
    s.run_until_idle(END);
    assert_eq!(s.model("ep").unwrap().report().unwrap()["ok"], false);
    let r = s.page_requests()[0];
    assert_eq!(
        (r.page, r.read, r.write, r.response),
        (IOVA + 64 * 4096, true, false, 1)
    );
    assert_eq!(pri_counts(&s), (1, 1, 0));
    assert!(
        s.errors()
            .iter()
            .any(|e| e.is(FaultKind::PageRequest) && e.message.contains("answered with code 1")),
        "{:?}",
        s.errors()
    );
    // Still unmapped: the IOMMU recorded no mapping and no fault.
    let (m, faults) = s.iommu_stats().unwrap();
    assert!(faults.is_empty());
    assert_eq!(m.translation_requests, 1);
}

#[test]
fn reads_of_a_paged_in_page_hit_the_atc() {
    let mut s = sim();
    for _ in 0..3 {
        s.attach(
            "ep",
            Box::new(Reader {
                addr: IOVA + 4096 + 8,
                ok: None,
            }),
        )
        .unwrap();
        s.run_until_idle(END);
        assert_eq!(s.model("ep").unwrap().report().unwrap()["ok"], true);
    }
    let a = s.ats_stats("ep").unwrap();
    assert_eq!(
        (a.page_requests, a.translation_requests, a.atc_hits),
        (1, 2, 2)
    );
}

#[test]
fn pri_without_ats_is_refused() {
    let c = SimConfig {
        ats: false,
        ..cfg(true)
    };
    let e = FabricSim::new(&switch_tree(3, false), &KindRegistry::builtin(), c)
        .err()
        .unwrap();
    assert!(e.to_string().contains("pri"), "{e}");
}

/// The device's PRI counters: (page requests, failed, pages made resident).
fn pri_counts(s: &FabricSim) -> (u64, u64, u64) {
    let a = s.ats_stats("ep").unwrap();
    (
        a.page_requests,
        a.page_requests_failed,
        a.pages_made_resident,
    )
}

/// The device's PRI status register.
fn pri_status(s: &mut FabricSim) -> u16 {
    let ep = s.bdf("ep").unwrap();
    let at = ext_cap(s, ep, pcielab_config::caps::id::EXT_PRI);
    (s.cfg_read(ep, at + 4) >> 16) as u16
}

#[test]
fn response_failure_stops_page_requests_and_a_stray_index_is_flagged() {
    // A page fault that takes 1 ms: host software answers the group with Response
    // Failure first.
    let c = SimConfig {
        page_fault_latency: SimDuration::from_ms(1),
        ..cfg(true)
    };
    let mut s = FabricSim::new(&switch_tree(3, false), &KindRegistry::builtin(), c).unwrap();
    s.iommu_map_on_demand("ep", IOVA, PHYS, 4 * 4096).unwrap();
    s.attach(
        "ep",
        Box::new(Reader {
            addr: IOVA,
            ok: None,
        }),
    )
    .unwrap();
    while s.page_requests().is_empty() {
        s.run_for(SimDuration::from_ns(100));
    }
    assert_eq!(pri_status(&mut s) & 3, 0);
    let prg = s.page_requests()[0].prg_index;
    s.send_prg_response("ep", prg, 0xf).unwrap();
    s.run_until_idle(END);
    assert_eq!(s.model("ep").unwrap().report().unwrap()["ok"], false);
    assert_eq!(pri_counts(&s), (1, 1, 0));
    // Response Failure is latched; the software's own Success answer, 1 ms later, finds
    // no group outstanding: Unexpected PRG Index.
    assert_eq!(pri_status(&mut s) & 3, 3);
    // Page requests stopped: the next refusal fails at once.
    s.attach(
        "ep",
        Box::new(Reader {
            addr: IOVA + 4096,
            ok: None,
        }),
    )
    .unwrap();
    s.run_until_idle(END);
    assert_eq!(s.model("ep").unwrap().report().unwrap()["ok"], false);
    assert_eq!(s.ats_stats("ep").unwrap().page_requests, 1);
    assert!(s.send_prg_response("ep", 512, 0).is_err());
}
