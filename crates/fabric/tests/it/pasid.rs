//! PASID: a device's DMA in a process's address space carries a PASID TLP prefix, the
//! IOMMU translates it by that process's table, a port with End-End TLP Prefix
//! Blocking refuses it, and every rule a device could break is refused and named.

use crate::common::fault_text;
use crate::common::{switch_tree, trace_tlps};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::FaultKind;
use pcielab_fabric::timed::{
    DirCounters, Endpoint, EpCx, FabricSim, IommuConfig, IommuFaultKind, SimConfig,
};
use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::tlp::{PrefixKind, TlpKind};
use std::sync::{Arc, Mutex};

/// A DMA a [`Script`] device issues at 10, 20, 30 … µs (one step each).
#[derive(Debug, Clone, Copy)]
enum Step {
    /// 256 bytes of `fill` at `addr`, with a PASID or without.
    Write(u64, u8, Option<u32>),
    /// 256 bytes at `addr`.
    Read(u64, Option<u32>),
}

/// What the device saw: per finished DMA, (ok, its first byte).
type Seen = Arc<Mutex<Vec<(bool, u8)>>>;

#[derive(Debug)]
struct Script(Vec<Step>, Seen);

impl Endpoint for Script {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        for i in 0..self.0.len() as u64 {
            cx.timer(SimDuration::from_us(10 * (i + 1)), i);
        }
    }
    fn timer(&mut self, token: u64, cx: &mut EpCx<'_>) {
        match self.0[token as usize] {
            Step::Write(addr, fill, None) => {
                cx.dma_write(addr, vec![fill; 256]);
            }
            Step::Write(addr, fill, Some(p)) => {
                cx.dma_write_pasid(addr, vec![fill; 256], p);
            }
            Step::Read(addr, None) => {
                cx.dma_read(addr, 256);
            }
            Step::Read(addr, Some(p)) => {
                cx.dma_read_pasid(addr, 256, p);
            }
        }
    }
    fn dma_done(
        &mut self,
        _id: pcielab_fabric::timed::DmaId,
        ok: bool,
        data: &[u8],
        _cx: &mut EpCx<'_>,
    ) {
        self.1
            .lock()
            .unwrap()
            .push((ok, data.first().copied().unwrap_or(0)));
    }
}

/// The switch tree with an IOMMU (`pasid`: with PASID support; `ats`, `pri` on or off),
/// tracing.
fn new_sim(pasid: bool, ats: bool, pri: bool) -> FabricSim {
    let cfg = SimConfig {
        iommu: Some(IommuConfig {
            pasid,
            ..IommuConfig::default()
        }),
        ats,
        pri,
        trace: true,
        ..SimConfig::default()
    };
    FabricSim::new(&switch_tree(1, false), &KindRegistry::builtin(), cfg).unwrap()
}

/// [`new_sim`] without ATS; `ep` runs `steps` once `setup` has run.
fn sim(pasid: bool, setup: impl FnOnce(&mut FabricSim), steps: Vec<Step>) -> (FabricSim, Seen) {
    let mut s = new_sim(pasid, false, false);
    setup(&mut s);
    let seen = Seen::default();
    s.attach("ep", Box::new(Script(steps, seen.clone())))
        .unwrap();
    (s, seen)
}

fn up_counters(s: &FabricSim) -> DirCounters {
    s.counters()
        .into_iter()
        .find(|(n, _)| n.starts_with("ep->"))
        .unwrap()
        .1
}

const IOVA: u64 = 0x10_0000;

#[test]
fn each_pasid_has_its_own_address_space() {
    let mut phys = [0u64; 3];
    let (mut s, seen) = sim(
        true,
        |s| {
            for p in &mut phys {
                *p = s.alloc_dma(4096);
            }
            s.iommu_map_pasid("ep", 5, IOVA, phys[0], 4096).unwrap();
            s.iommu_map_pasid("ep", 9, IOVA, phys[1], 4096).unwrap();
            s.iommu_map("ep", IOVA, phys[2], 4096).unwrap();
        },
        vec![
            Step::Write(IOVA, 0xaa, Some(5)),
            Step::Write(IOVA, 0xbb, Some(9)),
            Step::Write(IOVA, 0xcc, None),
            Step::Read(IOVA, Some(9)),
            Step::Read(IOVA + 0x1000, Some(5)),
            Step::Read(IOVA, Some(7)),
        ],
    );
    s.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    // The same I/O virtual address, three physical pages.
    for (p, fill) in phys.iter().zip([0xaa, 0xbb, 0xcc]) {
        let mut b = [0u8; 256];
        s.host_read(*p, &mut b);
        assert_eq!(b, [fill; 256], "page {p:#x}");
    }
    // The read in PASID 9's space returns its data; unmapped pages and an unknown
    // PASID fault (UR: the DMA fails).
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            (true, 0),
            (true, 0),
            (true, 0),
            (true, 0xbb),
            (false, 0),
            (false, 0)
        ]
    );
    let (stats, faults) = s.iommu_stats().unwrap();
    assert_eq!(stats.faults, 2);
    let ep = s.bdf("ep").unwrap();
    let f: Vec<_> = faults
        .iter()
        .map(|f| (f.requester, f.iova, f.kind, f.pasid))
        .collect();
    assert_eq!(
        f,
        [
            (ep, IOVA + 0x1000, IommuFaultKind::Translation, Some(5)),
            (ep, IOVA, IommuFaultKind::Translation, Some(7))
        ]
    );
    // On the wire (decoded by the codec): every request from ep carries the PASID
    // prefix of its DMA, the write without one none, and completions none.
    let trace = s.trace().unwrap();
    let mut from_ep = Vec::new();
    for (_, r) in trace_tlps(trace) {
        let pasid = r
            .prefixes
            .as_slice()
            .iter()
            .find(|p| p.kind() == PrefixKind::Pasid)
            .and_then(|p| p.pasid())
            .map(|(p, _, _)| p);
        match r.kind() {
            TlpKind::MWr | TlpKind::MRd if r.requester_id() == ep => {
                from_ep.push((r.kind(), pasid))
            }
            TlpKind::CplD | TlpKind::Cpl => assert_eq!(pasid, None),
            _ => {}
        }
    }
    // Each request appears once per link it crosses (ep → switch → root complex).
    let want = [
        (TlpKind::MWr, Some(5)),
        (TlpKind::MWr, Some(9)),
        (TlpKind::MWr, None),
        (TlpKind::MRd, Some(9)),
        (TlpKind::MRd, Some(5)),
        (TlpKind::MRd, Some(7)),
    ];
    let twice: Vec<_> = want.iter().flat_map(|w| [*w, *w]).collect();
    assert_eq!(from_ep, twice);
}

#[test]
fn the_prefix_costs_one_dw_on_the_wire() {
    // The same write with and without a PASID: the device's link carries 4 more bytes,
    // and is busy 4 bytes' time longer: Gen3 x4, 4 × 8 bits × 130/128 (encoding) ×
    // 376/375 (SKP) / 32 Gb/s = 1018.33 ps, each busy time rounded up to the ps.
    let run = |pasid: Option<u32>| {
        let (mut s, _) = sim(
            true,
            |s| {
                let p = s.alloc_dma(4096);
                s.iommu_map_pasid("ep", 3, IOVA, p, 4096).unwrap();
                s.iommu_map("ep", IOVA, p, 4096).unwrap();
            },
            vec![Step::Write(IOVA, 1, pasid)],
        );
        s.run_until_idle(SimTime::from_ps(u64::MAX / 2));
        up_counters(&s)
    };
    let (with, without) = (run(Some(3)), run(None));
    assert_eq!((with.tlps, without.tlps), (1, 1));
    assert_eq!(with.wire_bytes - without.wire_bytes, 4);
    let d = with.busy_ps - without.busy_ps;
    assert!((1018..=1019).contains(&d), "{d} ps");
}

#[test]
fn a_device_may_not_use_a_pasid_it_was_not_given() {
    // An IOMMU without PASID support: enumeration leaves PASID Enable clear.
    let (mut s, seen) = sim(false, |_| {}, vec![Step::Write(IOVA, 1, Some(3))]);
    s.run_for(SimDuration::from_us(15));
    assert_eq!(seen.lock().unwrap().clone(), [(false, 0)]);
    assert_eq!(up_counters(&s).tlps, 0);
    let e = fault_text(&s, FaultKind::Pasid);
    assert!(
        e.contains("ep: DMA with PASID 0x3 while PASID Enable is clear"),
        "{e}"
    );
    let e = s
        .iommu_map_pasid("ep", 3, IOVA, 0, 4096)
        .unwrap_err()
        .to_string();
    assert!(e.contains("iommu pasid"), "{e}");

    // Software enables PASID anyway: the width is checked, then the IOMMU, which
    // cannot translate PASIDs, faults the request.
    let ep = s.bdf("ep").unwrap();
    let at = crate::common::ext_cap(&s, ep, pcielab_config::caps::id::EXT_PASID);
    let v = s.cfg_read(ep, at + 4);
    assert_eq!(
        v & 0xffff,
        0x1400,
        "Max PASID Width 20, no Execute/Privileged"
    );
    s.cfg_write(ep, at + 4, v | 1 << 16);
    let seen2 = Seen::default();
    s.attach(
        "ep",
        Box::new(Script(
            vec![
                Step::Write(IOVA, 1, Some(1 << 20)),
                Step::Write(IOVA, 1, Some(3)),
            ],
            seen2.clone(),
        )),
    )
    .unwrap();
    s.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    let e = fault_text(&s, FaultKind::Pasid);
    assert!(
        e.contains("ep: DMA with PASID 0x100000 beyond Max PASID Width 20"),
        "{e}"
    );
    assert_eq!(up_counters(&s).tlps, 1);
    let faults = s.iommu_stats().unwrap().1.to_vec();
    assert_eq!(faults.len(), 1);
    assert_eq!((faults[0].iova, faults[0].pasid), (IOVA, Some(3)));
}

#[test]
fn a_port_with_prefix_blocking_refuses_pasid_requests_and_logs_the_prefix() {
    let (mut s, seen) = sim(
        true,
        |s| {
            let p = s.alloc_dma(8192);
            s.iommu_map_pasid("ep", 0x12345, IOVA, p, 8192).unwrap();
            s.iommu_map("ep", IOVA, p, 8192).unwrap();
        },
        vec![
            Step::Write(IOVA, 1, Some(0x12345)),
            Step::Read(IOVA, Some(0x12345)),
            Step::Read(IOVA, None),
        ],
    );
    // The switch's upstream port blocks End-End TLP Prefixes on their way up.
    let usp = crate::common::parent(&s, crate::common::parent(&s, s.bdf("ep").unwrap()));
    let (pcie, aer) = crate::common::caps(&mut s, usp);
    let ctl2 = s.cfg_read(usp, pcie + 0x28);
    s.cfg_write(usp, pcie + 0x28, ctl2 | 1 << 15);
    s.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    // The write is dropped, the PASID read completed with UR, the plain read passes.
    assert_eq!(
        seen.lock().unwrap().clone(),
        [(true, 0), (false, 0), (true, 0)]
    );
    let up: Vec<_> = s
        .counters()
        .into_iter()
        .filter(|(n, _)| n.starts_with("sw->"))
        .map(|(_, c)| c)
        .collect();
    assert_eq!(up.len(), 1);
    assert_eq!((up[0].prefix_blocked, up[0].tlps), (2, 1));
    assert_eq!(s.iommu_stats().unwrap().0.faults, 0);
    // AER of the upstream port: TLP Prefix Blocked (bit 25) first, the header of the
    // blocked write, and its prefix in the TLP Prefix Log (TLPPfxPres).
    assert_eq!(s.cfg_read(usp, aer + 4), 1 << 25);
    let ctl = s.cfg_read(usp, aer + 0x18);
    assert_eq!((ctl & 0x1f, ctl >> 11 & 1), (25, 1));
    let write = trace_tlps(s.trace().unwrap())
        .find(|(_, r)| r.kind() == TlpKind::MWr)
        .map(|(rec, _)| s.trace().unwrap().bytes(rec).to_vec())
        .unwrap();
    let dw = |b: &[u8], i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    assert_eq!(s.cfg_read(usp, aer + 0x38), dw(&write, 0));
    assert_eq!(dw(&write, 0), 0x9100_0000 | 0x12345, "PASID prefix DW");
    for i in 0..3 {
        assert_eq!(
            s.cfg_read(usp, aer + 0x1c + 4 * i as u16),
            dw(&write, 4 + 4 * i)
        );
    }
    // The real lspci reads the same (pciutils 3.9 does not name UESta bit 25).
    let l = crate::common::lspci_vvv(&s, usp, "pasid-blocked");
    assert!(l.contains("First Error Pointer: 19"), "{l}");
    assert!(l.contains("TLPPfxPres+"), "{l}");
    assert!(l.contains("EETLPPrefix+, MaxEETLPPrefixes 4"), "{l}");
}

#[test]
fn ats_translates_and_invalidates_per_pasid() {
    // ATS on: the same I/O virtual address is translated once per address space (no
    // PASID, PASID 4), and each DMA goes out translated to its own page; the PASID
    // write carries its prefix, as does its Translation Request.
    let mut s = new_sim(true, true, false);
    let (a, b) = (s.alloc_dma(4096), s.alloc_dma(4096));
    s.iommu_map("ep", IOVA, a, 4096).unwrap();
    s.iommu_map_pasid("ep", 4, IOVA, b, 4096).unwrap();
    let seen = Seen::default();
    let steps = vec![
        Step::Write(IOVA, 0x11, None),
        Step::Write(IOVA, 0x44, Some(4)),
        Step::Read(IOVA, Some(4)),
        // After the host takes PASID 4's page back (at 35 µs):
        Step::Read(IOVA, None),
        Step::Read(IOVA, Some(4)),
    ];
    s.attach("ep", Box::new(Script(steps, seen.clone())))
        .unwrap();
    s.run_for(SimDuration::from_us(35));
    assert_eq!(s.ats_stats("ep").unwrap().translation_requests, 2);
    s.iommu_unmap_pasid("ep", 4, IOVA, 4096).unwrap();
    s.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    // The plain read still hits the ATC; PASID 4's is asked again and refused.
    assert_eq!(
        seen.lock().unwrap().clone(),
        [(true, 0), (true, 0), (true, 0x44), (true, 0x11), (false, 0)]
    );
    let st = s.ats_stats("ep").unwrap();
    assert_eq!((st.translation_requests, st.denied), (3, 1));
    assert_eq!((st.invalidations, st.invalidated_entries), (1, 1));
    let inv = s.ats_invalidations().to_vec();
    assert_eq!(inv.len(), 1);
    assert_eq!(inv[0].pasid, Some(4));
    assert!(inv[0].completed.is_some());
    let e = fault_text(&s, FaultKind::Ats);
    assert!(
        e.contains("ep: ATS translation of 0x100000 (PASID 0x4) refused"),
        "{e}"
    );
    let (mut x, mut y) = ([0u8; 256], [0u8; 256]);
    s.host_read(a, &mut x);
    s.host_read(b, &mut y);
    assert_eq!((x, y), ([0x11; 256], [0x44; 256]));
    // On the device's link: each request with its address, AT and PASID.
    let ep = s.bdf("ep").unwrap();
    let up = s
        .trace()
        .unwrap()
        .dir_names
        .iter()
        .position(|n| n.starts_with("ep->"));
    let reqs: Vec<_> = trace_tlps(s.trace().unwrap())
        .filter(|(rec, r)| Some(rec.dir as usize) == up && r.requester_id() == ep)
        .filter_map(|(_, r)| {
            let pasid = r
                .prefixes
                .as_slice()
                .first()
                .and_then(|p| p.pasid())
                .map(|p| p.0);
            match r.header {
                pcielab_wire::tlp::TlpHeader::Mem(h) => Some((r.kind(), r.at, h.address, pasid)),
                _ => None,
            }
        })
        .collect();
    use pcielab_wire::AddressType::{Translated as Tx, TranslationRequest as Tr};
    assert_eq!(
        reqs,
        [
            (TlpKind::MRd, Tr, IOVA, None),
            (TlpKind::MWr, Tx, a, None),
            (TlpKind::MRd, Tr, IOVA, Some(4)),
            (TlpKind::MWr, Tx, b, Some(4)),
            (TlpKind::MRd, Tx, b, Some(4)),
            (TlpKind::MRd, Tx, a, None),
            (TlpKind::MRd, Tr, IOVA, Some(4)),
        ]
    );
}

#[test]
fn page_requests_carry_the_pasid_and_fill_its_table() {
    // PRI: PASID 6's buffer is mapped on demand, PASID 8 has none. The first write
    // faults its page in (a Page Request with PASID 6), the second is refused.
    let mut s = new_sim(true, true, true);
    let b = s.alloc_dma(4096);
    s.iommu_map_on_demand_pasid("ep", 6, IOVA, b, 4096).unwrap();
    let seen = Seen::default();
    let steps = vec![
        Step::Write(IOVA, 0x66, Some(6)),
        Step::Write(IOVA, 0x88, Some(8)),
    ];
    s.attach("ep", Box::new(Script(steps, seen.clone())))
        .unwrap();
    s.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    assert_eq!(seen.lock().unwrap().clone(), [(true, 0), (false, 0)]);
    let mut y = [0u8; 256];
    s.host_read(b, &mut y);
    assert_eq!(y, [0x66; 256]);
    let pr: Vec<_> = s
        .page_requests()
        .iter()
        .map(|r| (r.page, r.pasid, r.response))
        .collect();
    assert_eq!(pr, [(IOVA, Some(6), 0), (IOVA, Some(8), 1)]);
    // The Page Requests on the wire carry their PASID; PRG Responses none.
    let ep = s.bdf("ep").unwrap();
    let msgs: Vec<_> = trace_tlps(s.trace().unwrap())
        .filter(|(_, r)| matches!(r.kind(), TlpKind::Msg))
        .filter_map(|(_, r)| match r.header {
            pcielab_wire::tlp::TlpHeader::Msg(h) if h.code.raw() == 4 || h.code.raw() == 5 => {
                let pasid = r
                    .prefixes
                    .as_slice()
                    .first()
                    .and_then(|p| p.pasid())
                    .map(|p| p.0);
                Some((h.code.raw(), r.requester_id() == ep, pasid))
            }
            _ => None,
        })
        .collect();
    // Each message crosses two links (both requests go out before the first answer).
    let mut msgs = msgs;
    msgs.sort();
    let want = [(4, true, Some(6)), (4, true, Some(8)), (5, false, None)];
    let mut twice: Vec<_> = want.iter().flat_map(|w| [*w, *w]).collect();
    twice.extend([(5, false, None); 2]);
    twice.sort();
    assert_eq!(msgs, twice);
}
