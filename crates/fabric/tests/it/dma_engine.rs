//! The SR-IOV DMA engine of seed 003 (`kind = "dma-engine"`) with its PF and VF
//! drivers: every function moves its own stream with its own requester ID, the
//! reorder window fills and stalls, and nothing reaches another function.

use pcielab_device::dma_engine::{reg, STREAM_HASH_START};
use pcielab_fabric::drivers::dma_engine::{run, run_observed, Dir, DmaDriverConfig, DmaFunction};
use pcielab_fabric::drivers::RunStage;
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{FabricSim, IommuConfig, SimConfig, SimError};
use pcielab_fabric::topology::Topology;
use pcielab_wire::tlp::{MemOp, TlpHeader};
use pcielab_wire::Bdf;
use std::collections::{BTreeMap, BTreeSet};

pub(crate) fn topo(keys: &str) -> Topology {
    let text = format!(
        "[[node]]\nname = \"rc\"\nkind = \"root-complex\"\n\
         [[node]]\nname = \"dma\"\nkind = \"dma-engine\"\n{keys}\n\
         [[link]]\nup = \"rc.0\"\ndown = \"dma\"\ngen = 3\nwidth = 8\n"
    );
    Topology::parse(&text, "dma.toml", &KindRegistry::builtin()).unwrap()
}

pub(crate) fn sim_with(keys: &str, cfg: SimConfig) -> FabricSim {
    FabricSim::new(&topo(keys), &KindRegistry::builtin(), cfg).unwrap()
}

fn gen3() -> SimConfig {
    SimConfig {
        mps: 256,
        mrrs: 512,
        ..SimConfig::default()
    }
}

fn open_all(s: &mut FabricSim, n: u16, cfg: DmaDriverConfig) -> Vec<DmaFunction> {
    (0..n)
        .map(|i| DmaFunction::open(s, "dma", i, cfg.clone()).unwrap())
        .collect()
}

/// The engine's counters of function `f` (its report).
fn report(s: &FabricSim, f: u16) -> serde_json::Value {
    let r = s.model("dma").unwrap().report().unwrap();
    r["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["function"] == f)
        .cloned()
        .unwrap_or(serde_json::Value::Null)
}

#[test]
fn four_vfs_and_the_pf_each_move_their_own_stream_with_their_own_id() {
    let cfg = SimConfig {
        trace: true,
        ..gen3()
    };
    // Each function owns 8 tags, as the paper routes completions by tag.
    let mut s = sim_with("vfs = 4\nchunk = 8192\ntags_per_function = 8", cfg);
    let mut fns = open_all(&mut s, 5, DmaDriverConfig::default());
    let ids: Vec<Bdf> = fns.iter().map(|f| f.bdf()).collect();
    assert_eq!(
        ids.iter().map(|b| b.to_string()).collect::<Vec<_>>(),
        ["01:00.0", "01:00.1", "01:00.2", "01:00.3", "01:00.4"]
    );
    let h2d = run(&mut s, &mut fns, Dir::H2d, 48 * 1024, 3).unwrap();
    let d2h = run(&mut s, &mut fns, Dir::D2h, 40 * 1024 + 12, 3).unwrap();
    for (i, f) in fns.iter_mut().enumerate() {
        assert_eq!((h2d[i].bytes, h2d[i].errors), (3 * 48 * 1024, 0));
        assert_eq!((d2h[i].bytes, d2h[i].errors), (3 * (40 * 1024 + 12), 0));
        // The engine took exactly what this function's driver sent, in order, and the
        // driver found the function's own stream in its D2H buffer.
        assert_eq!(f.read_reg(&mut s, reg::H2D_HASH).unwrap(), f.h2d_hash());
        assert_ne!(f.h2d_hash(), STREAM_HASH_START);
        assert_eq!(f.read_reg(&mut s, reg::H2D_GAPS).unwrap(), 0);
        assert_eq!(f.d2h_mismatches(), 0);
        assert_eq!(report(&s, i as u16)["dma_errors"], 0);
    }
    // On the wire: the function's buffer is read and written by that function's ID
    // only, and completions go back to the ID that asked.
    let tr = s.trace().unwrap();
    let mut readers = BTreeMap::<Bdf, u64>::new();
    let mut writers = BTreeSet::new();
    let mut cpl_to = BTreeSet::new();
    for (r, t) in tr.first_tlps() {
        // What the device sends (the host's register accesses go the other way).
        if !tr.dir_name(r).starts_with("dma->") {
            continue;
        }
        match t.header {
            TlpHeader::Mem(m) if m.op == MemOp::Read => {
                *readers.entry(t.requester_id()).or_default() += 1;
                let i = ids.iter().position(|&b| b == t.requester_id()).unwrap() as u16;
                let tag = t.tag().value();
                assert!(
                    (8 * i..8 * i + 8).contains(&tag),
                    "function {i} used tag {tag}"
                );
            }
            TlpHeader::Mem(m)
                if m.op == MemOp::Write && !(0xfee0_0000..0xfef0_0000).contains(&m.address) =>
            {
                writers.insert(t.requester_id());
            }
            _ => {}
        }
    }
    // Completions come down to the ID that asked.
    for (r, t) in tr.first_tlps() {
        if let TlpHeader::Cpl(c) = t.header {
            if !tr.dir_name(r).starts_with("dma->") {
                cpl_to.insert(c.requester_id);
            }
        }
    }
    let all: BTreeSet<Bdf> = ids.iter().copied().collect();
    assert_eq!(readers.keys().copied().collect::<BTreeSet<_>>(), all);
    assert_eq!(writers, all);
    assert_eq!(cpl_to, all);
}

/// 1 MiB transfers on Gen3 x8, MPS 256: D2H is bounded by the link's posted-write
/// goodput, H2D by the completions'.
#[test]
fn one_mib_transfers_run_near_the_links_limit() {
    let mut s = sim_with("window = 65536", gen3());
    let mut f = open_all(&mut s, 1, DmaDriverConfig::default());
    let d2h = run(&mut s, &mut f, Dir::D2h, 1 << 20, 4).unwrap()[0].gbps;
    let h2d = run(&mut s, &mut f, Dir::H2d, 1 << 20, 4).unwrap()[0].gbps;
    eprintln!("1 MiB: D2H {d2h:.2} Gb/s, H2D {h2d:.2} Gb/s");
    // Gen3 x8: 8 GT/s × 8 lanes × 128/130 = 63.0 Gb/s; 256-byte writes carry
    // 256 of 256 + 24 bytes (header 16, sequence number and LCRC 6, framing 2): 57.6.
    assert!(d2h > 50.0 && d2h < 57.6, "{d2h}");
    assert!(h2d > 45.0 && h2d < 57.6, "{h2d}");
}

/// An observer of a run is called between its steps, at least every 20 µs of simulated
/// time: a 1 MiB transfer at ~57 Gb/s takes ~150 µs, so it is called several times per
/// transfer, and draining the trace there leaves every record to it exactly once. An
/// observer's error stops the run with its message.
#[test]
fn an_observer_sees_the_run_in_steps_and_can_stop_it() {
    let traced = SimConfig {
        trace: true,
        ..gen3()
    };
    let (mut a, mut b) = (sim_with("", traced.clone()), sim_with("", traced));
    let mut fa = open_all(&mut a, 1, DmaDriverConfig::default());
    let mut fb = open_all(&mut b, 1, DmaDriverConfig::default());
    let plain = run(&mut a, &mut fa, Dir::D2h, 1 << 20, 2).unwrap();
    let whole = a.take_whole_trace().unwrap().records.len();
    let (mut steps, mut drained) = (0, 0);
    let observed = run_observed(&mut b, &mut fb, Dir::D2h, 1 << 20, 2, &mut |sim, stage| {
        assert_eq!(stage, RunStage::Step);
        steps += 1;
        drained += sim.take_trace().unwrap().records.len();
        Ok(())
    })
    .unwrap();
    drained += b.take_whole_trace().unwrap().records.len();
    assert_eq!(observed, plain);
    assert!(steps >= 2 * 6, "{steps} steps");
    assert_eq!(drained, whole);
    assert!(whole > 2 * 4096, "{whole}");
    // Stopped at its third step.
    let mut c = sim_with("", gen3());
    let mut fc = open_all(&mut c, 1, DmaDriverConfig::default());
    let mut n = 0;
    let e = run_observed(&mut c, &mut fc, Dir::D2h, 1 << 20, 2, &mut |_, _| {
        n += 1;
        if n == 3 {
            Err("disk full".into())
        } else {
            Ok(())
        }
    })
    .unwrap_err();
    assert_eq!(e, SimError::Observer("disk full".into()));
    assert_eq!(n, 3);
}

/// Completions of the engine's read requests come back out of order across tags
/// (host memory with a seeded latency tail); the reorder window keeps the data in
/// order, and a window smaller than the round trip fills and stalls.
#[test]
fn the_reorder_window_takes_completions_out_of_order_and_stalls_when_full() {
    let mut results = Vec::new();
    for window in [1024, 16384] {
        let mut c = SimConfig {
            trace: true,
            ..gen3()
        };
        pcielab_fabric::host::model::apply_knob(&mut c, "mem_tail", "exp:1:300").unwrap();
        let mut s = sim_with(&format!("window = {window}\nchunk = 65536"), c);
        let mut f = open_all(&mut s, 1, DmaDriverConfig::default());
        let r = run(&mut s, &mut f, Dir::H2d, 256 * 1024, 2).unwrap()[0].clone();
        assert_eq!(r.errors, 0);
        // In order at the FPGA application: no gap, and the driver's hash.
        assert_eq!(f[0].read_reg(&mut s, reg::H2D_GAPS).unwrap(), 0);
        assert_eq!(
            f[0].read_reg(&mut s, reg::H2D_HASH).unwrap(),
            f[0].h2d_hash()
        );
        // On the wire: a completion for a later request (by address) ahead of one
        // for an earlier request still owed.
        let tr = s.trace().unwrap();
        let mut reqs = BTreeMap::new(); // tag -> address of the request in flight
        let mut out_of_order = 0;
        for (r, t) in tr.first_tlps() {
            match t.header {
                TlpHeader::Mem(m) if m.op == MemOp::Read && tr.dir_name(r) == "dma->rc.0" => {
                    reqs.insert(t.tag().value(), (m.address, 0u32));
                }
                TlpHeader::Cpl(c) if c.requester_id == f[0].bdf() => {
                    let tag = c.tag.value();
                    let Some(&(addr, _)) = reqs.get(&tag) else {
                        continue;
                    };
                    if reqs.values().any(|&(a, _)| a < addr) {
                        out_of_order += 1;
                    }
                    if u32::from(c.byte_count) == u32::from(t.length_dw()) * 4 {
                        reqs.remove(&tag); // the request's last completion
                    }
                }
                _ => {}
            }
        }
        let st = s.device_stats("dma").unwrap();
        eprintln!(
            "window {window}: {:.2} Gb/s, {out_of_order} completions ahead of an earlier request's, {} stalls, {} reads in flight at most",
            r.gbps, st.window_stalls, st.max_reads_in_flight
        );
        assert!(out_of_order > 0, "window {window}");
        results.push((r.gbps, st.window_stalls, st.max_reads_in_flight));
    }
    let ((small, small_stalls, small_max), (big, _, big_max)) = (results[0], results[1]);
    // 1 KiB: no more than 1 KiB asked for past the in-order point, so at most four
    // requests in flight (the window reopens by 256-byte completions, and a request
    // never asks past it); a full window stalls, and a round trip per KiB caps
    // throughput far below the 16 KiB window's.
    assert!(small_max <= 4 && big_max > 16, "{small_max} {big_max}");
    assert!(small_stalls > 100, "{small_stalls}");
    assert!(small < big / 2.0, "{small} vs {big}");
}

mod isolation {
    //! VF isolation through the IOMMU, as property tests over random programs: each VF
    //! is a guest's, its driver maps its own rings and buffer in the VF's domain, and
    //! a guest may write any address into its descriptors and anything into its own
    //! MSI-X table.
    use super::*;
    use pcielab_device::dma_engine::{CTRL_ENABLE, STATUS_DONE, STATUS_ERR};
    use pcielab_fabric::drivers::dma_engine::Vm;
    use pcielab_fabric::timed::{remappable_msi_address, IommuFaultKind};
    use pcielab_sim::SimDuration;
    use proptest::prelude::*;

    const VFS: u16 = 3;
    const BUF: u64 = 16 * 1024;

    /// Where a descriptor of a VF points.
    #[derive(Debug, Clone, Copy)]
    enum Target {
        /// Its own buffer (mapped in its domain).
        Own,
        /// Another VF's buffer, by that VF's address for it.
        OtherBuffer(u16),
        /// Host memory no one mapped.
        Unmapped,
        /// Another function's registers (a VF's or the PF's BAR 0).
        OtherRegisters(u16),
    }

    #[derive(Debug, Clone)]
    enum Step {
        Transfer {
            vf: u16,
            d2h: bool,
            target: Target,
            len: u64,
        },
        /// The guest of `vf` points its MSI-X entry at `victim`'s handle, then raises it.
        ForgeInterrupt { vf: u16, victim: u16 },
    }

    fn step() -> impl Strategy<Value = Step> {
        let target = prop_oneof![
            Just(Target::Own),
            (1..=VFS).prop_map(Target::OtherBuffer),
            Just(Target::Unmapped),
            (0..=VFS).prop_map(Target::OtherRegisters),
        ];
        prop_oneof![
            3 => (1..=VFS, any::<bool>(), target, 1u64..BUF)
                .prop_map(|(vf, d2h, target, len)| Step::Transfer { vf, d2h, target, len }),
            1 => (1..=VFS, 1..=VFS).prop_map(|(vf, victim)| Step::ForgeInterrupt { vf, victim }),
        ]
    }

    struct World {
        s: FabricSim,
        fns: Vec<DmaFunction>,
        /// Each VF's buffer: host address, its own (guest) address.
        bufs: Vec<(u64, u64)>,
        unmapped: u64,
    }

    fn world(vm: bool) -> World {
        let iommu = IommuConfig {
            interrupt_remapping: true,
            ..IommuConfig::default()
        };
        let cfg = SimConfig {
            iommu: Some(iommu),
            ..gen3()
        };
        let mut s = sim_with(&format!("vfs = {VFS}\nchunk = 4096"), cfg);
        let mut fns = Vec::new();
        let mut bufs = Vec::new();
        for vf in 1..=VFS {
            let c = DmaDriverConfig {
                check: false,
                // Every guest's memory starts at the same guest-physical address.
                vm: vm.then_some(Vm {
                    guest_base: 0x4000_0000,
                }),
                ..DmaDriverConfig::default()
            };
            let mut f = DmaFunction::open(&mut s, "dma", vf, c).unwrap();
            let b = f.buffer(&mut s, BUF).unwrap();
            bufs.push(b);
            fns.push(f);
        }
        let unmapped = s.alloc_dma(BUF);
        // Known contents everywhere a DMA could land.
        for (i, &(h, _)) in bufs.iter().enumerate() {
            s.host_write(h, &vec![0x10 + i as u8; BUF as usize]);
        }
        s.host_write(unmapped, &vec![0xee; BUF as usize]);
        World {
            s,
            fns,
            bufs,
            unmapped,
        }
    }

    fn snapshot(w: &World) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for &a in w.bufs.iter().map(|(h, _)| h).chain([&w.unmapped]) {
            let mut b = vec![0u8; BUF as usize];
            w.s.host_read(a, &mut b);
            out.push(b);
        }
        out
    }

    fn regs(w: &mut World, f: u16) -> Vec<u64> {
        let bar = w.s.function_bar("dma", f, 0).unwrap();
        [reg::CTRL, 0x100, 0x108, 0x140, 0x148]
            .iter()
            .map(|&o| match w.s.mmio_read(bar + o, 4).unwrap() {
                pcielab_fabric::timed::HostRead::Done { data, .. } => {
                    u32::from_le_bytes(data[..4].try_into().unwrap()) as u64
                }
                other => panic!("{other:?}"),
            })
            .collect()
    }

    fn check(w: &mut World, steps: Vec<Step>) -> Result<(), TestCaseError> {
        let all_regs: Vec<Vec<u64>> = (0..=VFS).map(|f| regs(w, f)).collect();
        let mut irq_seen = w.s.interrupts().len();
        // Each VF's own interrupt data (remapped vectors), to tell whose is whose.
        let mut faults_seen = w.s.iommu_stats().unwrap().1.len();
        for st in steps {
            let before = snapshot(w);
            let h2d_before: Vec<u64> = (0..VFS as usize)
                .map(|i| w.fns[i].read_reg(&mut w.s, reg::H2D_BYTES).unwrap())
                .collect();
            match st {
                Step::Transfer {
                    vf,
                    d2h,
                    target,
                    len,
                } => {
                    let i = (vf - 1) as usize;
                    let addr = match target {
                        Target::Own => w.bufs[i].1,
                        Target::OtherBuffer(o) => w.bufs[(o - 1) as usize].1,
                        Target::Unmapped => w.unmapped,
                        // Another function's: the PF's when the pick is itself.
                        Target::OtherRegisters(o) => {
                            let o = if o == vf { 0 } else { o };
                            w.s.function_bar("dma", o, 0).unwrap()
                        }
                    };
                    let own = addr == w.bufs[i].1 && len <= BUF;
                    let dir = if d2h { Dir::D2h } else { Dir::H2d };
                    let idx = w.fns[i].post(&mut w.s, dir, addr, len).unwrap();
                    w.s.run_for(SimDuration::from_us(60));
                    let status = w.fns[i].descriptor_status(&w.s, dir, idx);
                    prop_assert!(status & STATUS_DONE != 0, "{st:?}: not done");
                    let after = snapshot(w);
                    let faults = w.s.iommu_stats().unwrap().1[faults_seen..].to_vec();
                    faults_seen += faults.len();
                    let me = w.fns[i].bdf();
                    // Memory: only the VF's own buffer may change, and only by its D2H.
                    for (k, (b, a)) in before.iter().zip(&after).enumerate() {
                        let mine = k == i && own && d2h;
                        prop_assert!(mine || b == a, "{st:?}: region {k} changed");
                    }
                    let h2d_now = w.fns[i].read_reg(&mut w.s, reg::H2D_BYTES).unwrap();
                    if own {
                        prop_assert!(status & STATUS_ERR == 0, "{st:?}: own buffer failed");
                        prop_assert!(faults.is_empty(), "{st:?}: {faults:?}");
                        if !d2h {
                            prop_assert_eq!(h2d_now - h2d_before[i], len);
                        }
                    } else {
                        // Out of its domain (wherever the same number points for
                        // another function): a fault of this VF at the IOMMU, nothing
                        // read; a read ends with the error bit (Unsupported Request).
                        prop_assert!(!faults.is_empty(), "{st:?}: no fault");
                        prop_assert!(faults
                            .iter()
                            .all(|f| f.requester == me && f.kind == IommuFaultKind::Translation));
                        prop_assert_eq!(h2d_now, h2d_before[i], "{:?}: bytes read", st);
                        if !d2h {
                            prop_assert!(status & STATUS_ERR != 0, "{st:?}: read not failed");
                        }
                    }
                }
                Step::ForgeInterrupt { vf, victim } => {
                    let i = (vf - 1) as usize;
                    let me = w.fns[i].bdf();
                    let theirs = w.fns[(victim - 1) as usize].bdf();
                    // The victim's handle for its D2H engine, as its driver made it.
                    let handle = ((theirs.raw() as u32 * 2 + 1) & 0x7fff) as u16;
                    let tbl = w.s.function_bar("dma", vf, 2).unwrap();
                    let a = remappable_msi_address(handle);
                    let mut e = Vec::new();
                    e.extend_from_slice(&(a as u32).to_le_bytes());
                    e.extend_from_slice(&((a >> 32) as u32).to_le_bytes());
                    e.extend_from_slice(&[0; 8]);
                    w.s.mmio_write(tbl + 16, &e).unwrap();
                    let idx = w.fns[i].post(&mut w.s, Dir::D2h, w.bufs[i].1, 64).unwrap();
                    w.s.run_for(SimDuration::from_us(30));
                    prop_assert!(
                        w.fns[i].descriptor_status(&w.s, Dir::D2h, idx) & STATUS_DONE != 0
                    );
                    let faults = w.s.iommu_stats().unwrap().1[faults_seen..].to_vec();
                    faults_seen += faults.len();
                    if vf != victim {
                        prop_assert!(
                            faults
                                .iter()
                                .any(|f| f.requester == me && f.kind == IommuFaultKind::Interrupt),
                            "{st:?}: {faults:?}"
                        );
                    }
                    // Its own entry back, as its driver had it.
                    let mine = ((me.raw() as u32 * 2 + 1) & 0x7fff) as u16;
                    let a = remappable_msi_address(mine);
                    e.clear();
                    e.extend_from_slice(&(a as u32).to_le_bytes());
                    e.extend_from_slice(&((a >> 32) as u32).to_le_bytes());
                    e.extend_from_slice(&[0; 8]);
                    w.s.mmio_write(tbl + 16, &e).unwrap();
                }
            }
            // Every interrupt delivered came from the function its vector belongs to.
            for (_, irq) in &w.s.interrupts()[irq_seen..] {
                let owner = ((irq.data - 0x1_0000) / 2) as u16;
                prop_assert_eq!(
                    owner,
                    irq.from.raw(),
                    "vector {:#x} from {}",
                    irq.data,
                    irq.from
                );
            }
            irq_seen = w.s.interrupts().len();
        }
        // No function's registers changed but by its own driver (none wrote them).
        for f in 0..=VFS {
            let now = regs(w, f);
            prop_assert_eq!(&now, &all_regs[f as usize], "function {} registers", f);
            if f > 0 {
                prop_assert_eq!(now[0] as u32 & CTRL_ENABLE, CTRL_ENABLE);
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
        /// Host use (identity-mapped domains).
        #[test]
        fn a_vf_reaches_nothing_outside_its_domain(steps in prop::collection::vec(step(), 1..10)) {
            let mut w = world(false);
            check(&mut w, steps)?;
        }

        /// In VMs: every guest uses the same guest-physical addresses, each mapped to
        /// its own host memory in its VF's domain.
        #[test]
        fn guests_with_the_same_addresses_stay_apart(steps in prop::collection::vec(step(), 1..10)) {
            let mut w = world(true);
            check(&mut w, steps)?;
        }
    }
}

/// A VF reset (Function Level Reset) in the middle of its transfer: its DMAs are
/// dropped and counted, another VF's transfer completes with the right bytes, and the
/// reset VF works again once its driver restores and sets it up.
#[test]
fn a_vf_reset_mid_transfer_spares_the_other_vf() {
    use pcielab_config::caps::{id, pcie_reg};
    use pcielab_wire::ByteEnables;
    let mut s = sim_with("vfs = 2", gen3());
    let mut f = [
        DmaFunction::open(&mut s, "dma", 1, DmaDriverConfig::default()).unwrap(),
        DmaFunction::open(&mut s, "dma", 2, DmaDriverConfig::default()).unwrap(),
    ];
    let mb = 1 << 20;
    let (h1, d1) = f[0].buffer(&mut s, mb).unwrap();
    let (_, d2) = f[1].buffer(&mut s, mb).unwrap();
    let i1 = f[0].post(&mut s, Dir::D2h, d1, mb).unwrap();
    let i2 = f[1].post(&mut s, Dir::H2d, d2, mb).unwrap();
    s.run_for(pcielab_sim::SimDuration::from_us(10));
    let vf2 = f[1].bdf();
    let saved = s.save_config(vf2).unwrap();
    let pcie = {
        let fab = s.fabric();
        let cs = &fab.functions[fab.function_at(vf2).unwrap().0 as usize].config;
        pcielab_config::caps::walk(cs.bytes())
            .0
            .iter()
            .find(|c| !c.extended && c.id == u16::from(id::PCIE))
            .map(|c| c.offset)
            .unwrap()
    };
    let devctl = pcie + pcie_reg::DEVCTL;
    let dw = s.cfg_read(vf2, devctl & !3);
    s.config_write(
        vf2,
        devctl & !3,
        dw | 0x8000 << (8 * (devctl & 3)),
        ByteEnables::ALL,
    )
    .unwrap();
    s.run_for(pcielab_sim::SimDuration::from_us(400));
    // VF 1: done, its stream in its buffer.
    assert_eq!(
        f[0].descriptor_status(&s, Dir::D2h, i1),
        pcielab_device::dma_engine::STATUS_DONE
    );
    let mut got = vec![0u8; mb as usize];
    s.host_read(h1, &mut got);
    let mut want = vec![0u8; mb as usize];
    pcielab_device::dma_engine::fill_pattern(1, 0, &mut want);
    assert!(got == want, "VF 1's data");
    // VF 2: never done, its DMAs dropped, the engine reset and disabled.
    assert_eq!(f[1].descriptor_status(&s, Dir::H2d, i2), 0);
    assert_eq!(report(&s, 2)["resets"], 1);
    assert_eq!(report(&s, 1)["resets"], 0);
    let st = &s.function_dma_stats("dma").unwrap()[2];
    assert!(st.flr_dropped_dmas >= 1, "{st:?}");
    assert!((report(&s, 2)["h2d_bytes"].as_u64().unwrap()) < mb);
    // Restored and set up again, it moves a whole stream.
    s.restore_config(&saved).unwrap();
    let mut g = vec![DmaFunction::open(&mut s, "dma", 2, DmaDriverConfig::default()).unwrap()];
    let r = run(&mut s, &mut g, Dir::H2d, 64 * 1024, 2).unwrap();
    assert_eq!((r[0].bytes, r[0].errors), (128 * 1024, 0));
    assert_eq!(
        g[0].read_reg(&mut s, reg::H2D_HASH).unwrap(),
        g[0].h2d_hash()
    );
}
