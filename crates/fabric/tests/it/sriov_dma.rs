//! The timed DMA engine of an SR-IOV device with tag ranges per function
//! (`DmaPolicy::tags_per_function`): each function's read requests carry only its
//! own tags, go out round-robin across functions, a function whose reorder window is
//! full does not hold up another, and a completion that reaches a function with a tag
//! that is not one of its requests is an Unexpected Completion of that function. Also
//! Function Level Reset of one VF while another streams.
//!
//! The device is the `sriov-4vf` example (a psmem PF with TotalVFs = 4, all enabled:
//! function indices 0 the PF, 1..=4 VFs 01:00.1..01:00.4) with a test model attached.

use pcielab_config::caps::{id, pcie_reg, walk};
use pcielab_config::header::{command, reg};
use pcielab_device::DmaPolicy;
use pcielab_fabric::functional::FnId;
use pcielab_fabric::timed::{
    DmaId, Endpoint, EpCx, FabricSim, FaultKind, FunctionDmaStats, HostRead, SimConfig, TraceKind,
};
use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::tlp::{MemOp, TlpHeader, TlpRepr};
use pcielab_wire::{Bdf, ByteEnables};
use std::cell::RefCell;
use std::rc::Rc;

/// What the model saw: (function, DMA, ok, data, when) of every `dma_done`, and the
/// functions `function_reset` was called for.
#[derive(Debug, Default)]
struct Log {
    done: Vec<(u16, DmaId, bool, Vec<u8>, SimTime)>,
    resets: Vec<u16>,
}

/// Starts one read DMA per `(function, address, length)` when it starts, each as
/// its function (`act_as`), and logs what comes back.
#[derive(Debug)]
struct Streams {
    policy: DmaPolicy,
    reads: Vec<(u16, u64, u64)>,
    log: Rc<RefCell<Log>>,
}

impl Endpoint for Streams {
    fn dma_policy(&self) -> DmaPolicy {
        self.policy
    }
    fn start(&mut self, cx: &mut EpCx<'_>) {
        for &(f, addr, len) in &self.reads {
            cx.act_as(f);
            cx.dma_read(addr, len);
        }
    }
    /// A write of (address, length) to a function's BAR 0: a read DMA of that
    /// function.
    fn mem_write(&mut self, _bar: u8, _off: u64, data: &[u8], cx: &mut EpCx<'_>) {
        let addr = u64::from_le_bytes(data[..8].try_into().unwrap());
        let len = u64::from_le_bytes(data[8..16].try_into().unwrap());
        cx.dma_read(addr, len);
    }
    fn dma_done(&mut self, id: DmaId, ok: bool, data: &[u8], cx: &mut EpCx<'_>) {
        let now = cx.now();
        self.log
            .borrow_mut()
            .done
            .push((cx.function(), id, ok, data.to_vec(), now));
    }
    fn function_reset(&mut self, cx: &mut EpCx<'_>) {
        self.log.borrow_mut().resets.push(cx.function());
    }
}

fn pattern(f: u16, i: u64) -> u8 {
    (i.wrapping_mul(7) ^ (i >> 8) ^ (u64::from(f) * 0x35)) as u8
}

/// The simulator on `sriov-4vf` and the BDF of each function by index (0 the PF).
fn sim_4vf(cfg: SimConfig) -> (FabricSim, Vec<Bdf>) {
    let (sim, bdfs) = crate::common::sim_sriov_4vf(cfg);
    assert_eq!(bdfs.len(), 5);
    (sim, bdfs)
}

/// Host memory above `REMOTE` answers 20 µs late (holds a function's reads in flight).
const REMOTE: u64 = 1 << 36;

fn remote_cfg() -> SimConfig {
    SimConfig {
        numa_remote_base: Some(REMOTE),
        numa_penalty: SimDuration::from_us(20),
        ..cfg()
    }
}

/// Attaches a `Streams` model reading `len` bytes for each `(function, address)`;
/// host memory there holds the function's pattern.
fn streams(
    sim: &mut FabricSim,
    policy: DmaPolicy,
    reads: &[(u16, u64, u64)],
) -> Result<Rc<RefCell<Log>>, String> {
    for &(f, addr, len) in reads {
        let bytes: Vec<u8> = (0..len).map(|i| pattern(f, i)).collect();
        sim.host_write(addr, &bytes);
    }
    let log = Rc::new(RefCell::new(Log::default()));
    let m = Streams {
        policy,
        reads: reads.to_vec(),
        log: log.clone(),
    };
    sim.attach("nic", Box::new(m)).map_err(|e| e.to_string())?;
    Ok(log)
}

/// (requester, tag) of every memory read request on the trace, in order.
fn read_requests(sim: &FabricSim) -> Vec<(Bdf, u16)> {
    let tr = sim.trace().unwrap();
    tr.records
        .iter()
        .filter(|r| matches!(r.kind, TraceKind::Tlp { .. }))
        .filter_map(|r| TlpRepr::parse_bytes(tr.bytes(r)).ok())
        .filter_map(|t| match t.header {
            TlpHeader::Mem(m) if m.op == MemOp::Read => Some((m.requester_id, m.tag.value())),
            _ => None,
        })
        .collect()
}

fn stats(sim: &FabricSim, i: usize) -> FunctionDmaStats {
    let s = sim.function_dma_stats("nic").unwrap();
    s.get(i).copied().unwrap_or_default()
}

fn tpf(k: u16) -> DmaPolicy {
    DmaPolicy {
        tags_per_function: Some(k),
        ..DmaPolicy::DEFAULT
    }
}

fn cfg() -> SimConfig {
    SimConfig {
        trace: true,
        mrrs: 256,
        ..SimConfig::default()
    }
}

#[test]
fn each_vf_uses_its_own_tags_and_requests_go_round_robin() {
    let (mut sim, bdfs) = sim_4vf(cfg());
    let reads: Vec<(u16, u64, u64)> = (1..=4u16).map(|f| (f, sim.alloc_dma(4096), 4096)).collect();
    let log = streams(&mut sim, tpf(4), &reads).unwrap();
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
    let reqs = read_requests(&sim);
    // 4 KiB in 256-byte requests: 16 per VF.
    assert_eq!(reqs.len(), 64);
    for f in 1..=4u16 {
        let mine: Vec<u16> = reqs
            .iter()
            .filter(|r| r.0 == bdfs[f as usize])
            .map(|r| r.1)
            .collect();
        assert_eq!(mine.len(), 16, "function {f}");
        let range = 4 * f..4 * f + 4;
        assert!(
            mine.iter().all(|t| range.contains(t)),
            "function {f}: tags {mine:?} outside {range:?}"
        );
        assert_eq!(stats(&sim, f as usize).requests, 16);
    }
    // Round-robin: while every VF has tags, one request of each in turn.
    let order: Vec<usize> = reqs
        .iter()
        .map(|r| bdfs.iter().position(|&b| b == r.0).unwrap())
        .collect();
    assert_eq!(
        order[..16],
        [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4],
        "{order:?}"
    );
    // Every VF got its own bytes.
    let log = log.borrow();
    assert_eq!(log.done.len(), 4);
    for (f, _, ok, data, _) in &log.done {
        assert!(ok);
        assert!(
            data.iter()
                .enumerate()
                .all(|(i, &b)| b == pattern(*f, i as u64)),
            "function {f}'s data"
        );
    }

    // Without the ranges: one queue and one pool for the device; the first DMA's
    // requests all go first, with tags from 0.
    let (mut sim, bdfs) = sim_4vf(cfg());
    let reads: Vec<(u16, u64, u64)> = (1..=4u16).map(|f| (f, sim.alloc_dma(4096), 4096)).collect();
    streams(&mut sim, DmaPolicy::DEFAULT, &reads).unwrap();
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    let reqs = read_requests(&sim);
    assert!(reqs[..8].iter().all(|r| r.0 == bdfs[1]), "{reqs:?}");
    assert!(sim
        .function_dma_stats("nic")
        .unwrap()
        .iter()
        .all(|s| s.requests == 0));
}

/// VF 1 reads NUMA-remote memory 20 µs away through a 512-byte reorder window: its
/// window is full after two requests until the first completion returns. VF 2 reads
/// local memory meanwhile.
fn window_case(policy: DmaPolicy) -> (FabricSim, Rc<RefCell<Log>>) {
    let remote = REMOTE;
    let (mut sim, _) = sim_4vf(remote_cfg());
    let local = sim.alloc_dma(16384);
    let log = streams(&mut sim, policy, &[(1, remote, 4096), (2, local, 16384)]).unwrap();
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
    (sim, log)
}

fn done_at(log: &Log, f: u16) -> SimTime {
    let d = log.done.iter().find(|d| d.0 == f).expect("done");
    assert!(d.2, "function {f} failed");
    assert!(
        d.3.iter()
            .enumerate()
            .all(|(i, &b)| b == pattern(f, i as u64)),
        "function {f}'s data"
    );
    d.4
}

#[test]
fn a_vf_with_a_full_window_does_not_stall_another() {
    let window = DmaPolicy {
        reorder: Some(512),
        ..tpf(8)
    };
    let (sim, log) = window_case(window);
    let log = log.borrow();
    let (vf1, vf2) = (done_at(&log, 1), done_at(&log, 2));
    // VF 2's 16 KiB are in long before VF 1's first completion could be.
    assert!(
        vf2 < SimTime::from_ps(SimDuration::from_us(20).as_ps()),
        "{vf2}"
    );
    assert!(
        vf1 > SimTime::from_ps(SimDuration::from_us(20).as_ps()),
        "{vf1}"
    );
    let s1 = stats(&sim, 1);
    assert!(s1.window_stalls > 0, "{s1:?}");
    assert_eq!((s1.requests, stats(&sim, 2).requests), (16, 64));

    // One device-wide queue: VF 2's DMA waits behind VF 1's stalled one.
    let (_, log) = window_case(DmaPolicy {
        reorder: Some(512),
        ..DmaPolicy::DEFAULT
    });
    let log = log.borrow();
    let (_, vf2) = (done_at(&log, 1), done_at(&log, 2));
    assert!(
        vf2 > SimTime::from_ps(SimDuration::from_us(20).as_ps()),
        "{vf2}"
    );
}

#[test]
fn a_completion_with_another_functions_tag_is_unexpected() {
    let remote = REMOTE;
    let (mut sim, bdfs) = sim_4vf(remote_cfg());
    // VF 2 (tags 8..12) has four reads in flight for 20 µs.
    let log = streams(&mut sim, tpf(4), &[(2, remote, 4096)]).unwrap();
    sim.run_for(SimDuration::from_us(2));
    let in_flight: Vec<u16> = read_requests(&sim).iter().map(|r| r.1).collect();
    assert_eq!(in_flight, [8, 9, 10, 11]);
    // Tag 8 at VF 1: VF 2's tag, reaching the wrong function.
    sim.inject_host_completion(bdfs[1], 8, &[0xee; 64]).unwrap();
    // Tag 4 at VF 1: its own range, but no request of its in flight.
    sim.inject_host_completion(bdfs[1], 4, &[0xee; 64]).unwrap();
    // Tag 0 at VF 2: the PF's range.
    sim.inject_host_completion(bdfs[2], 0, &[0xee; 64]).unwrap();
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    let unexpected: Vec<&str> = sim
        .errors()
        .iter()
        .filter(|e| e.is(FaultKind::UnexpectedCompletion))
        .map(|e| e.message.as_str())
        .collect();
    assert_eq!(unexpected.len(), 3, "{:?}", sim.errors());
    assert!(
        unexpected[0].contains("tag 8") && unexpected[0].contains("function 1 (its tags are 4..8)"),
        "{unexpected:?}"
    );
    assert!(unexpected[2].contains("tag 0") && unexpected[2].contains("function 2"));
    assert_eq!(sim.errors().len(), 3, "{:?}", sim.errors());
    assert_eq!(stats(&sim, 1).unexpected_completions, 2);
    assert_eq!(stats(&sim, 2).unexpected_completions, 1);
    // VF 2's read is whole and right: the stray bytes went nowhere.
    let log = log.borrow();
    assert_eq!(log.done.len(), 1);
    done_at(&log, 2);
}

#[test]
fn a_layout_past_the_tag_space_is_refused() {
    let (mut sim, _) = sim_4vf(cfg());
    // 5 functions (the PF and TotalVFs 4) × 200 tags > the 768 for device DMA.
    let e = streams(&mut sim, tpf(200), &[]).unwrap_err();
    assert!(
        e.contains("5 functions") && e.contains("1000") && e.contains("768") && e.contains("nic"),
        "{e}"
    );
    let (mut sim, _) = sim_4vf(cfg());
    streams(&mut sim, tpf(150), &[]).unwrap();
}

/// The offset of capability `want` (a standard one) of the function at `bdf`.
fn cap_of(sim: &FabricSim, bdf: Bdf, want: u8) -> u16 {
    let fab = sim.fabric();
    let f = fab.function_at(bdf).unwrap();
    walk(fab.functions[f.0 as usize].config.bytes())
        .0
        .iter()
        .find(|c| !c.extended && c.id == u16::from(want))
        .map(|c| c.offset)
        .unwrap()
}

/// VF 2 is reset (Initiate FLR through a configuration write TLP) while its 16 KiB
/// read of memory 20 µs away has requests in flight and VF 1 streams 64 KiB: VF 1's
/// bytes all arrive right; VF 2's DMA is dropped (no `dma_done`), its late
/// completions are discarded and counted, and its tags come back only when they have
/// arrived, so a new read of VF 2 started at once waits for them and gets its own
/// bytes.
#[test]
fn flr_of_one_vf_mid_transfer_leaves_the_others_running() {
    let remote = REMOTE;
    let (mut sim, bdfs) = sim_4vf(remote_cfg());
    let local = sim.alloc_dma(65536);
    let log = streams(&mut sim, tpf(4), &[(1, local, 65536), (2, remote, 16384)]).unwrap();
    sim.run_for(SimDuration::from_us(2));
    let vf2 = bdfs[2];
    let before: Vec<u16> = read_requests(&sim)
        .iter()
        .filter(|r| r.0 == vf2)
        .map(|r| r.1)
        .collect();
    assert_eq!(before, [8, 9, 10, 11], "VF 2's reads in flight");
    let cmd = sim.cfg_read(vf2, reg::COMMAND);
    assert_ne!(cmd & u32::from(command::BUS_MASTER), 0);
    let msix = cap_of(&sim, vf2, id::MSIX);
    assert_ne!(sim.cfg_read(vf2, msix) & 1 << 31, 0, "MSI-X enabled");
    let devctl = cap_of(&sim, vf2, id::PCIE) + pcie_reg::DEVCTL;
    let dw = sim.cfg_read(vf2, devctl & !3);
    let flr = dw | 0x8000 << (8 * (devctl & 3));
    let flr_at = sim.now().as_ps();
    let r = sim
        .config_write(vf2, devctl & !3, flr, ByteEnables::ALL)
        .unwrap();
    assert!(matches!(r, HostRead::Done { .. }), "{r:?}");
    // Its configuration space is back to defaults; it is still VF 2.
    assert_eq!(
        sim.cfg_read(vf2, reg::COMMAND) & u32::from(command::BUS_MASTER),
        0
    );
    assert_eq!(sim.cfg_read(vf2, msix) & 1 << 31, 0, "MSI-X disabled");
    let f2 = sim.fabric().function_at(vf2).unwrap();
    assert!(sim.fabric().functions[f2.0 as usize].vf.is_some());
    assert_eq!(log.borrow().resets, [2]);
    // The driver enables it again and starts a new read at once.
    sim.cfg_write(vf2, reg::COMMAND, cmd);
    let fresh = sim.alloc_dma(4096);
    let want: Vec<u8> = (0..4096).map(|i| pattern(9, i)).collect();
    sim.host_write(fresh, &want);
    let bar = sim.tree().get(vf2).unwrap().bars[0].address;
    let mut go = fresh.to_le_bytes().to_vec();
    go.extend(4096u64.to_le_bytes());
    sim.mmio_write(bar, &go).unwrap();
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());

    let log = log.borrow();
    done_at(&log, 1);
    let vf2_done: Vec<_> = log.done.iter().filter(|d| d.0 == 2).collect();
    assert_eq!(vf2_done.len(), 1, "only the new read finishes");
    assert!(vf2_done[0].2);
    assert_eq!(vf2_done[0].3, want, "the new read got its own bytes");
    // From the trace: VF 2's read requests and completions after the FLR.
    let tr = sim.trace().unwrap();
    // A completion to VF 2 after the FLR whose data is not a piece of the new read's
    // bytes answers an old request.
    let of_new_read = |p: &[u8]| want.windows(p.len()).any(|w| w == p);
    let mut new_mrd = None;
    let mut late = 0;
    for r in &tr.records {
        if !matches!(r.kind, TraceKind::Tlp { .. }) || r.time_ps <= flr_at {
            continue;
        }
        let Ok(t) = TlpRepr::parse_bytes(tr.bytes(r)) else {
            continue;
        };
        match t.header {
            TlpHeader::Mem(m) if m.op == MemOp::Read && m.requester_id == vf2 => {
                new_mrd.get_or_insert(r.time_ps);
            }
            TlpHeader::Cpl(c) if c.requester_id == vf2 && !of_new_read(t.payload) => late += 1,
            _ => {}
        }
    }
    let new_mrd = new_mrd.expect("the new read went out");
    // The new read waited for the late completions (20 µs away) to free its tags.
    assert!(
        new_mrd > flr_at + SimDuration::from_us(15).as_ps(),
        "new read at {new_mrd} ps, FLR at {flr_at} ps"
    );
    let s2 = stats(&sim, 2);
    assert!(late > 0);
    assert_eq!(s2.flr_late_completions, late, "{s2:?}");
    assert_eq!((s2.flrs, s2.flr_dropped_dmas), (1, 1), "{s2:?}");
    assert!(s2.tag_stalls > 0, "{s2:?}");
    assert_eq!(stats(&sim, 1).flrs, 0);
}

/// An FLR of the PF (a zero-time `cfg_write`) clears its VF Enable: the VFs go, and
/// VF 1's read in flight is dropped with them (no `dma_done`); the model hears of the
/// PF's reset. The completions of VF 1's requests find no function 01:00.1 at the root
/// complex any more: it records them as not routable (the fabric routes completions
/// to functions that exist), so none reaches the device.
#[test]
fn flr_of_the_pf_drops_its_vfs_dmas() {
    let remote = REMOTE;
    let (mut sim, bdfs) = sim_4vf(remote_cfg());
    let log = streams(&mut sim, tpf(4), &[(1, remote, 4096)]).unwrap();
    sim.run_for(SimDuration::from_us(2));
    let pf = bdfs[0];
    assert_eq!(read_requests(&sim).len(), 4, "VF 1's reads in flight");
    let devctl = cap_of(&sim, pf, id::PCIE) + pcie_reg::DEVCTL;
    let dw = sim.cfg_read(pf, devctl & !3);
    sim.cfg_write(pf, devctl & !3, dw | 0x8000 << (8 * (devctl & 3)));
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    let f = sim.fabric().function_at(pf).unwrap();
    assert!(sim.fabric().vfs_of(f).is_empty(), "the VFs went");
    assert!(!sim.errors().is_empty());
    for e in sim.errors() {
        assert!(
            e.is(FaultKind::NotRoutable) && e.message.contains("01:00.1"),
            "{e:?}"
        );
    }
    let log = log.borrow();
    assert!(log.done.is_empty(), "{:?}", log.done);
    assert_eq!(log.resets, [0]);
    let (s0, s1) = (stats(&sim, 0), stats(&sim, 1));
    assert_eq!((s0.flrs, s1.flr_dropped_dmas), (1, 1), "{s0:?} {s1:?}");
    assert_eq!(s1.flr_late_completions, 0, "{s1:?}");
}

/// The functional fabric tells the device model of an FLR too, about the function
/// that was reset.
#[test]
fn the_functional_fabric_calls_function_reset() {
    let (_, mut fabric, _) = crate::common::bring_up_file("sriov-4vf.toml");
    let pf = (0..fabric.functions.len() as u32)
        .map(FnId)
        .find(|&f| fabric.name(f) == "nic")
        .unwrap();
    let vf = fabric.vfs_of(pf)[2];
    let bdf = fabric.bdf(vf);
    let node = fabric.functions[vf.0 as usize].node;
    let log = Rc::new(RefCell::new(Log::default()));
    fabric.devices[node.0 as usize] = Some(Box::new(Streams {
        policy: DmaPolicy::DEFAULT,
        reads: Vec::new(),
        log: log.clone(),
    }));
    let devctl = {
        let c = walk(fabric.functions[vf.0 as usize].config.bytes())
            .0
            .iter()
            .find(|c| !c.extended && c.id == u16::from(id::PCIE))
            .unwrap()
            .offset;
        c + pcie_reg::DEVCTL
    };
    // Another write to Device Control is no reset.
    fabric
        .config_write(bdf, devctl & !3, 0, ByteEnables::ALL)
        .unwrap();
    assert!(log.borrow().resets.is_empty());
    fabric
        .config_write(
            bdf,
            devctl & !3,
            0x8000 << (8 * (devctl & 3)),
            ByteEnables::ALL,
        )
        .unwrap();
    // VF 3 (index 3: the PF is 0).
    assert_eq!(log.borrow().resets, [3]);
    assert_eq!(fabric.vfs_of(pf).len(), 4, "a VF's FLR leaves the VFs");
}
