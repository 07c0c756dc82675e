//! AtomicOps: FetchAdd, Swap and CAS (32, 64, 128 bits) from a device to host memory,
//! the values the root complex leaves and returns, the CAS operand order, the bytes on
//! the wire; what stops one (Requester Enable clear, misalignment, a root port that
//! completes none, AtomicOp Egress Blocking, an endpoint as the target); the real
//! lspci reading the capability and control bits.

use crate::common::fault_text;
use crate::common::{caps, hand_timing, lspci_vvv, parent, trace_tlps, trained_sim};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::FaultKind;
use pcielab_fabric::timed::{AtomicOp, DmaId, Endpoint, EpCx, FabricSim};
use pcielab_fabric::topology::Topology;
use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::tlp::{TlpHeader, TlpKind};
use pcielab_wire::Bdf;
use std::sync::{Arc, Mutex};

/// AER Uncorrectable Error Status bits.
const UNSUPPORTED: u32 = 1 << 20;
const ATOMIC_BLOCKED: u32 = 1 << 24;

type Results = Arc<Mutex<Vec<(bool, Vec<u8>)>>>;

/// A device that issues its AtomicOps one after the other (each when the previous one
/// finished) and keeps (ok, original value) of each.
#[derive(Debug)]
struct Atomics {
    ops: Vec<(u64, AtomicOp)>,
    next: usize,
    got: Results,
}

impl Atomics {
    fn issue(&mut self, cx: &mut EpCx<'_>) {
        if let Some(&(addr, op)) = self.ops.get(self.next) {
            self.next += 1;
            cx.atomic(addr, op);
        }
    }
}

impl Endpoint for Atomics {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        self.issue(cx);
    }
    fn dma_done(&mut self, _id: DmaId, ok: bool, data: &[u8], cx: &mut EpCx<'_>) {
        self.got.lock().unwrap().push((ok, data.to_vec()));
        self.issue(cx);
    }
}

fn run(sim: &mut FabricSim, ops: Vec<(u64, AtomicOp)>) -> Vec<(bool, Vec<u8>)> {
    let got: Results = Arc::default();
    sim.attach(
        "ep",
        Box::new(Atomics {
            ops,
            next: 0,
            got: got.clone(),
        }),
    )
    .unwrap();
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    let g = got.lock().unwrap().clone();
    g
}

fn uncorrectable(sim: &mut FabricSim, f: Bdf) -> u32 {
    let (_, a) = caps(sim, f);
    sim.cfg_read(f, a + 4)
}

fn mem(sim: &FabricSim, addr: u64, n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n];
    sim.host_read(addr, &mut b);
    b
}

#[test]
fn fetch_add_swap_and_cas_leave_and_return_the_right_values() {
    let mut sim = trained_sim(5, true);
    let b = sim.alloc_dma(4096);
    sim.enable_atomic_ops_to_root("ep", &[4, 8, 16]).unwrap();
    sim.host_write(b, &0xffff_fffeu32.to_le_bytes());
    sim.host_write(b + 4, &0x0bad_cafeu32.to_le_bytes());
    sim.host_write(b + 8, &7u64.to_le_bytes());
    sim.host_write(b + 16, &0x1234u32.to_le_bytes());
    sim.host_write(b + 24, &5u64.to_le_bytes());
    let big = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210u128;
    sim.host_write(b + 32, &big.to_le_bytes());
    let ops = vec![
        (b, AtomicOp::FetchAdd32(5)),
        (b + 8, AtomicOp::FetchAdd64(1 << 40)),
        (b + 16, AtomicOp::Swap32(0xdead)),
        // Fails: the target holds 5.
        (
            b + 24,
            AtomicOp::Cas64 {
                compare: 99,
                swap: 1,
            },
        ),
        // At 8 mod 16: the swap value travels first.
        (
            b + 24,
            AtomicOp::Cas64 {
                compare: 5,
                swap: 42,
            },
        ),
        (
            b + 32,
            AtomicOp::Cas128 {
                compare: big,
                swap: 3,
            },
        ),
        // At 4 mod 8: swap first again.
        (
            b + 4,
            AtomicOp::Cas32 {
                compare: 0x0bad_cafe,
                swap: 0x600d_f00d,
            },
        ),
    ];
    let got = run(&mut sim, ops);
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
    let olds: Vec<Vec<u8>> = got
        .iter()
        .map(|(ok, d)| {
            assert!(ok);
            d.clone()
        })
        .collect();
    assert_eq!(
        olds,
        vec![
            0xffff_fffeu32.to_le_bytes().to_vec(),
            7u64.to_le_bytes().to_vec(),
            0x1234u32.to_le_bytes().to_vec(),
            5u64.to_le_bytes().to_vec(),
            5u64.to_le_bytes().to_vec(),
            big.to_le_bytes().to_vec(),
            0x0bad_cafeu32.to_le_bytes().to_vec(),
        ]
    );
    assert_eq!(mem(&sim, b, 4), 3u32.to_le_bytes(), "wrapped");
    assert_eq!(mem(&sim, b + 4, 4), 0x600d_f00du32.to_le_bytes());
    assert_eq!(mem(&sim, b + 8, 8), (7u64 + (1 << 40)).to_le_bytes());
    assert_eq!(mem(&sim, b + 16, 4), 0xdeadu32.to_le_bytes());
    assert_eq!(mem(&sim, b + 24, 8), 42u64.to_le_bytes());
    assert_eq!(mem(&sim, b + 32, 16), 3u128.to_le_bytes());

    // On the wire: the codec reads each request's kind, address and payload, and each
    // completion's Byte Count is the operand size.
    let t = sim.trace().unwrap();
    let reqs: Vec<(TlpKind, u64, Vec<u8>)> = trace_tlps(t)
        .filter(|(r, _)| t.dir_names[r.dir as usize] == "ep->sw.0")
        .filter_map(|(_, p)| match p.header {
            TlpHeader::Mem(h) => Some((p.kind(), h.address, p.payload.to_vec())),
            _ => None,
        })
        .collect();
    let mut cas64 = 42u64.to_le_bytes().to_vec();
    cas64.extend(5u64.to_le_bytes());
    assert_eq!(reqs.len(), 7, "{reqs:?}");
    assert_eq!(reqs[0], (TlpKind::FetchAdd, b, 5u32.to_le_bytes().to_vec()));
    assert_eq!(reqs[2].0, TlpKind::Swap);
    assert_eq!(reqs[4], (TlpKind::CAS, b + 24, cas64));
    assert_eq!(reqs[5].2.len(), 32);
    let counts: Vec<u16> = trace_tlps(t)
        .filter(|(r, _)| t.dir_names[r.dir as usize] == "sw.0->ep")
        .filter_map(|(_, p)| match p.header {
            TlpHeader::Cpl(h) => Some(h.byte_count),
            _ => None,
        })
        .collect();
    assert_eq!(counts, [4, 8, 4, 8, 8, 16, 4]);
}

#[test]
fn nothing_is_sent_without_requester_enable_or_alignment() {
    let mut sim = trained_sim(5, true);
    let b = sim.alloc_dma(4096);
    let got = run(&mut sim, vec![(b, AtomicOp::FetchAdd32(1))]);
    assert_eq!(got, [(false, vec![])]);
    assert!(sim.errors().iter().any(|e| e.is(FaultKind::Atomic)
        && e.message
            .contains("AtomicOp Requester Enable is clear: not issued")));

    let mut sim = trained_sim(5, true);
    let b = sim.alloc_dma(4096);
    sim.enable_atomic_ops_to_root("ep", &[8]).unwrap();
    let got = run(&mut sim, vec![(b + 4, AtomicOp::Swap64(1))]);
    assert_eq!(got, [(false, vec![])]);
    let e = fault_text(&sim, FaultKind::Atomic);
    assert!(e.contains("not aligned to its 8-byte operand"), "{e}");
    let t = sim.trace().unwrap();
    assert_eq!(
        trace_tlps(t)
            .filter(|(_, p)| matches!(p.kind(), TlpKind::FetchAdd | TlpKind::Swap | TlpKind::CAS))
            .count(),
        0
    );
}

#[test]
fn a_root_port_that_completes_none_answers_unsupported_request() {
    let text = "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\natomics=false\n\
        [[node]]\nname=\"ep\"\nkind=\"psmem\"\n\
        [[link]]\nup=\"rc.0\"\ndown=\"ep\"\ngen=3\nwidth=4\n";
    let reg = KindRegistry::builtin();
    let topo = Topology::parse(text, "t.toml", &reg).unwrap();
    let mut sim = FabricSim::new(&topo, &reg, hand_timing(false)).unwrap();
    sim.run_for(SimDuration::from_us(5));
    let b = sim.alloc_dma(4096);
    let ep = sim.bdf("ep").unwrap();
    let rp = parent(&sim, ep);
    let e = sim.enable_atomic_ops_to_root("ep", &[4]).unwrap_err();
    assert_eq!(e, format!("root port {rp} completes no 32-bit AtomicOps"));
    // Enabled anyway, by hand: the root complex refuses it.
    let (p, _) = caps(&mut sim, ep);
    let v = sim.cfg_read(ep, p + 0x28);
    sim.cfg_write(ep, p + 0x28, v | 1 << 6);
    sim.host_write(b, &[9; 4]);
    let got = run(&mut sim, vec![(b, AtomicOp::FetchAdd32(1))]);
    assert_eq!(got, [(false, vec![0; 4])]);
    assert_eq!(mem(&sim, b, 4), [9; 4], "memory untouched");
    assert_eq!(uncorrectable(&mut sim, rp) & UNSUPPORTED, UNSUPPORTED);
    let e = fault_text(&sim, FaultKind::Atomic);
    assert!(
        e.contains("the root port completes no 32-bit FetchAdd"),
        "{e}"
    );
}

#[test]
fn egress_blocking_at_the_switch_upstream_port_refuses_it() {
    let mut sim = trained_sim(5, false);
    let b = sim.alloc_dma(4096);
    let ep = sim.bdf("ep").unwrap();
    let usp = parent(&sim, parent(&sim, ep));
    sim.enable_atomic_ops_to_root("ep", &[8]).unwrap();
    let (p, _) = caps(&mut sim, usp);
    let v = sim.cfg_read(usp, p + 0x28);
    sim.cfg_write(usp, p + 0x28, v | 1 << 7);
    // Linux's check now refuses too.
    let e = sim.enable_atomic_ops_to_root("ep", &[8]).unwrap_err();
    assert_eq!(e, format!("switch upstream port {usp} blocks AtomicOps"));
    let got = run(&mut sim, vec![(b, AtomicOp::Swap64(5))]);
    assert_eq!(got, [(false, vec![0; 8])]);
    assert_eq!(mem(&sim, b, 8), [0; 8]);
    assert_eq!(
        uncorrectable(&mut sim, usp) & ATOMIC_BLOCKED,
        ATOMIC_BLOCKED
    );
    assert!(sim.errors().iter().any(|e| e.is(FaultKind::Atomic)
        && e.message
            .contains("AtomicOp Egress Blocking: Unsupported Request")));
}

#[test]
fn an_endpoint_target_answers_unsupported_request() {
    let mut sim = trained_sim(5, false);
    sim.enable_atomic_ops_to_root("ep", &[4]).unwrap();
    let bar = sim.bar("ep2", 0).unwrap();
    let ep2 = sim.bdf("ep2").unwrap();
    let got = run(&mut sim, vec![(bar, AtomicOp::FetchAdd32(1))]);
    assert_eq!(got, [(false, vec![0; 4])]);
    assert_eq!(uncorrectable(&mut sim, ep2) & UNSUPPORTED, UNSUPPORTED);
    assert!(sim
        .errors()
        .iter()
        .any(|e| e.is(FaultKind::Atomic) && e.message.contains("the device does not complete it")));
}

#[test]
fn a_psmem_with_atomics_completes_peer_atomic_ops_on_its_memory() {
    // ep2 completes AtomicOps (psmem key atomics = true): ep's FetchAdd and CAS on
    // ep2's BAR go across the switch, peer to peer.
    let text = "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n\
        [[node]]\nname=\"sw\"\nkind=\"switch\"\nports=2\n\
        [[node]]\nname=\"ep\"\nkind=\"psmem\"\n\
        [[node]]\nname=\"ep2\"\nkind=\"psmem\"\natomics=true\n\
        [[link]]\nup=\"rc.0\"\ndown=\"sw\"\ngen=3\nwidth=4\n\
        [[link]]\nup=\"sw.0\"\ndown=\"ep\"\ngen=3\nwidth=4\n\
        [[link]]\nup=\"sw.1\"\ndown=\"ep2\"\ngen=3\nwidth=4\n";
    let reg = KindRegistry::builtin();
    let topo = Topology::parse(text, "t.toml", &reg).unwrap();
    let mut sim = FabricSim::new(&topo, &reg, hand_timing(true)).unwrap();
    sim.run_for(SimDuration::from_us(5));
    sim.enable_atomic_ops_to_root("ep", &[8]).unwrap();
    let bar = sim.bar("ep2", 0).unwrap();
    sim.mmio_write(bar + 0x40, &100u64.to_le_bytes()).unwrap();
    // The posted write lands before the device starts.
    sim.run_for(SimDuration::from_us(2));
    let ep2 = sim.bdf("ep2").unwrap();
    assert!(lspci_vvv(&sim, ep2, "atomic-ep2").contains("AtomicOpsCap: 32bit+ 64bit+ 128bitCAS+"));
    let got = run(
        &mut sim,
        vec![
            (bar + 0x40, AtomicOp::FetchAdd64(5)),
            (
                bar + 0x40,
                AtomicOp::Cas64 {
                    compare: 105,
                    swap: 7,
                },
            ),
        ],
    );
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
    assert_eq!(
        got,
        [
            (true, 100u64.to_le_bytes().to_vec()),
            (true, 105u64.to_le_bytes().to_vec())
        ]
    );
    let r = sim.mmio_read(bar + 0x40, 8).unwrap();
    let pcielab_fabric::timed::HostRead::Done { data, .. } = r else {
        panic!("{r:?}")
    };
    assert_eq!(data, 7u64.to_le_bytes());
    // Peer to peer: the requests never reach the root complex.
    let t = sim.trace().unwrap();
    let dirs: Vec<&str> = trace_tlps(t)
        .filter(|(_, p)| p.kind() == TlpKind::FetchAdd || p.kind() == TlpKind::CAS)
        .map(|(r, _)| t.dir_names[r.dir as usize].as_str())
        .collect();
    assert_eq!(dirs, ["ep->sw.0", "sw.1->ep2", "ep->sw.0", "sw.1->ep2"]);
}

#[test]
fn the_real_lspci_reads_the_atomicop_bits() {
    let mut sim = trained_sim(5, false);
    let ep = sim.bdf("ep").unwrap();
    let dsp = parent(&sim, ep);
    let usp = parent(&sim, dsp);
    let rp = parent(&sim, usp);
    let rp_text = lspci_vvv(&sim, rp, "atomic-rp");
    assert!(
        rp_text.contains("AtomicOpsCap: Routing+ 32bit+ 64bit+ 128bitCAS+"),
        "{rp_text}"
    );
    let dsp_text = lspci_vvv(&sim, dsp, "atomic-dsp");
    assert!(dsp_text.contains("AtomicOpsCap: Routing+"), "{dsp_text}");
    assert!(lspci_vvv(&sim, ep, "atomic-ep0").contains("AtomicOpsCtl: ReqEn-"));
    sim.enable_atomic_ops_to_root("ep", &[4, 8, 16]).unwrap();
    let ep_text = lspci_vvv(&sim, ep, "atomic-ep1");
    assert!(ep_text.contains("AtomicOpsCtl: ReqEn+"), "{ep_text}");
    let (p, _) = caps(&mut sim, usp);
    let v = sim.cfg_read(usp, p + 0x28);
    sim.cfg_write(usp, p + 0x28, v | 1 << 7);
    let usp_text = lspci_vvv(&sim, usp, "atomic-usp");
    assert!(usp_text.contains("AtomicOpsCtl: EgressBlck+"), "{usp_text}");
}

#[test]
fn a_fetch_add_takes_a_reads_time_plus_its_operand_on_each_link_up() {
    use pcielab_fabric::timed::{AddrPattern, DmaOpKind, DmaStream};
    // One 8-byte FetchAdd and one 8-byte read, alone on the trained switch tree: the
    // same path, the same host memory latency (a read of 8 bytes), the same CplD back;
    // the request carries 8 bytes more on each of its two links up (Gen3 x4: 8 × 8
    // bits × 130/128 × 376/375 / 32 Gb/s = 2036.67 ps each, rounded up to the ps).
    let lat = |op| {
        let mut sim = trained_sim(5, false);
        let base = sim.alloc_dma(4096);
        sim.enable_atomic_ops_to_root("ep", &[8]).unwrap();
        sim.attach(
            "ep",
            Box::new(DmaStream::new(
                op,
                8,
                1,
                1,
                base,
                4096,
                AddrPattern::Sequential,
            )),
        )
        .unwrap();
        sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
        assert!(sim.errors().is_empty(), "{:?}", sim.errors());
        let r = sim.model("ep").unwrap().report().unwrap();
        assert_eq!(r["failed"], 0);
        (r["mean_latency_ns"].as_f64().unwrap() * 1000.0).round() as u64
    };
    let (atomic, read) = (lat(DmaOpKind::FetchAdd), lat(DmaOpKind::Read));
    let d = atomic - read;
    assert!((4073..=4075).contains(&d), "{atomic} - {read} = {d} ps");
}

#[test]
fn poisoned_operands_leave_the_target_alone() {
    use pcielab_fabric::timed::SimConfig;
    // Every TLP with data is poisoned where it is made: the FetchAdd's operand too.
    let cfg = SimConfig {
        poison_rate: 1.0,
        ..hand_timing(false)
    };
    let mut sim = FabricSim::new(
        &crate::common::switch_tree(5, false),
        &KindRegistry::builtin(),
        cfg,
    )
    .unwrap();
    sim.run_for(SimDuration::from_us(5));
    let b = sim.alloc_dma(4096);
    sim.host_write(b, &7u32.to_le_bytes());
    sim.enable_atomic_ops_to_root("ep", &[4]).unwrap();
    let got = run(&mut sim, vec![(b, AtomicOp::FetchAdd32(1))]);
    assert_eq!(got, [(false, vec![0; 4])]);
    assert_eq!(mem(&sim, b, 4), 7u32.to_le_bytes());
    assert!(sim
        .errors()
        .iter()
        .any(|e| e.is(FaultKind::Poisoned) && e.message.contains("poisoned AtomicOp received")));
}
