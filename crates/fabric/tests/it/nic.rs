//! The pcie-bench NIC (`kind = "nic"`) with its host driver, against pcie-bench's
//! NIC model (`pcielab_model::nic`).

use pcielab_device::nic::FrameSizes;
use pcielab_fabric::drivers::nic::{NicDriver, NicDriverConfig, NicRun};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{FabricSim, SimConfig};
use pcielab_fabric::topology::Topology;
use pcielab_model::nic::{evaluate, Batching, NicKind};
use pcielab_model::{eth::Ethernet, Mode, Model, PcieConfig};
use pcielab_wire::Generation;

fn topo(keys: &str) -> Topology {
    let text = format!(
        "[[node]]\nname = \"rc\"\nkind = \"root-complex\"\n\
         [[node]]\nname = \"nic\"\nkind = \"nic\"\n{keys}\n\
         [[link]]\nup = \"rc.0\"\ndown = \"nic\"\ngen = 3\nwidth = 8\n"
    );
    Topology::parse(&text, "nic.toml", &KindRegistry::builtin()).unwrap()
}

fn sim(keys: &str) -> FabricSim {
    sim_burst(keys, 1)
}

/// [`sim`] with burst size `burst` (1: the exact model).
fn sim_burst(keys: &str, burst: u8) -> FabricSim {
    let cfg = SimConfig {
        mps: 256,
        mrrs: 512,
        burst,
        ..SimConfig::default()
    };
    FabricSim::new(&topo(keys), &KindRegistry::builtin(), cfg).unwrap()
}

fn model() -> Model {
    let mut c = PcieConfig::new(Generation::Gen3, 8).unwrap();
    c.mode = Mode::Spec;
    Model::new(c).unwrap()
}

/// Runs `tx` packets out and `rx` in, of `frame` bytes, with the MAC taking frames as
/// fast as PCIe brings them (what the model's PCIe figures are about). Both ways at
/// once, the MAC loops every sent frame back, so both directions carry the same packet
/// rate (what the model's bidirectional figure assumes).
fn run(variant: &str, frame: u64, tx: u64, rx: u64) -> NicRun {
    run_burst(variant, frame, (tx, rx), 1).0
}

/// [`run`] with burst size `burst`; also returns the kernel events the run took.
fn run_burst(variant: &str, frame: u64, (tx, rx): (u64, u64), burst: u8) -> (NicRun, u64) {
    let (keys, mut drv) = match variant {
        "simple" => ("model = \"simple\"", NicDriverConfig::simple()),
        "linux" => ("model = \"batched\"", NicDriverConfig::linux()),
        _ => ("model = \"batched\"", NicDriverConfig::dpdk()),
    };
    let rx_source = if tx > 0 && rx > 0 {
        "loopback\"\nrx_fifo = \"16KiB"
    } else {
        "saturate"
    };
    let keys = format!("{keys}\neth_gbps = 0\nrx = \"{rx_source}\"\nframe = \"{frame}\"\n");
    let mut s = sim_burst(&keys, burst);
    drv.frames = FrameSizes::Fixed(frame);
    drv.keep_received = false;
    let mut d = NicDriver::open(&mut s, "nic", drv).unwrap();
    let e0 = s.events();
    let r = d.run(&mut s, tx, rx).unwrap();
    assert!(s.errors().is_empty(), "{:?}", s.errors());
    (r, s.events() - e0)
}

/// Asserts that `got` is within `tol` (relative) of `want`, both in Gb/s and named
/// in the messages; prints and returns the relative difference.
fn assert_close(what: &str, (wn, want): (&str, f64), (gn, got): (&str, f64), tol: f64) -> f64 {
    let rel = got / want - 1.0;
    eprintln!(
        "{what}: {gn} {got:.3} {wn} {want:.3} ({:+.3} %)",
        rel * 100.0
    );
    assert!(
        rel.abs() < tol,
        "{what}: {gn} {got:.3} Gb/s, {wn} {want:.3} Gb/s"
    );
    rel
}

fn kind(variant: &str) -> NicKind {
    match variant {
        "simple" => NicKind::Simple,
        "linux" => NicKind::Batched(Batching::LINUX),
        _ => NicKind::Batched(Batching::DPDK),
    }
}

const VARIANTS: [&str; 3] = ["simple", "linux", "dpdk"];

/// PCIe bytes per packet, each direction, equal the model's exactly (spec mode), for
/// the simple NIC, the batched NIC with the Linux driver and with DPDK, from 64 to 1518
/// bytes (odd sizes included: their last DW is partly used).
#[test]
fn bytes_per_packet_equal_the_model() {
    let m = model();
    let mut checked = 0;
    for v in VARIANTS {
        for frame in [64u64, 65, 127, 128, 200, 512, 1024, 1517, 1518] {
            // A whole number of the batched NIC's batches (lcm of its batch sizes: 160).
            let n = 640;
            let r = run(v, frame, n, n);
            assert_eq!((r.tx_packets, r.rx_packets), (n, n));
            let p = evaluate(&m, kind(v), Ethernet::new(40).unwrap(), frame).unwrap();
            assert_eq!(
                r.down_tlp_bytes as f64 / n as f64,
                p.down_bytes_per_pkt,
                "{v} {frame} B host → device"
            );
            assert_eq!(
                r.up_tlp_bytes as f64 / n as f64,
                p.up_bytes_per_pkt,
                "{v} {frame} B device → host"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 27);
}

/// Throughput, transmit only, receive only and both ways, within 2 % of the model, at
/// Gen3 x8, MPS 256; the Ethernet columns agree with the model's own (an independent
/// implementation of the line rate) at 40 and 100 GbE.
#[test]
fn throughput_within_two_percent_of_the_model() {
    let m = model();
    let mut worst = (0.0f64, String::new());
    for v in VARIANTS {
        for frame in [64u64, 128, 256, 512, 1024, 1518] {
            let p = evaluate(&m, kind(v), Ethernet::new(40).unwrap(), frame).unwrap();
            let n = 4000;
            let tx = run(v, frame, n, 0).tx_gbps;
            let rx = run(v, frame, 0, n).rx_gbps;
            let both = run(v, frame, n, n);
            let bidir = both.tx_gbps.min(both.rx_gbps);
            for (what, sim, model) in [
                ("tx", tx, p.tx_gbps),
                ("rx", rx, p.rx_gbps),
                ("bidir", bidir, p.bidir_gbps),
            ] {
                let what = format!("{v} {frame} B {what}");
                let rel = assert_close(&what, ("model", model), ("sim", sim), 0.02);
                if rel.abs() > worst.0 {
                    worst = (rel.abs(), what);
                }
            }
            for eth in [40u32, 100] {
                let p = evaluate(&m, kind(v), Ethernet::new(eth).unwrap(), frame).unwrap();
                let e = pcielab_device::nic::Ethernet::new(eth as f64).unwrap();
                assert!(
                    (e.data_gbps(frame) - p.eth_gbps).abs() < 1e-9,
                    "{eth} GbE {frame} B"
                );
            }
        }
    }
    eprintln!("worst: {:.2} % ({})", worst.0 * 100.0, worst.1);
}

/// Burst mode (where the NIC's small reads of one instant, its receive descriptor
/// fetches above all, travel as scatter bursts) against the exact model: the same
/// PCIe bytes each way, the same packets, steady-state throughput within 1 %, and for the batched
/// NIC with DPDK at 64 B fewer kernel events.
#[test]
fn burst_mode_keeps_the_nics_bytes_and_throughput() {
    for v in VARIANTS {
        for frame in [64u64, 128, 512, 1518] {
            // Long enough for the steady state (a short run's rates are its start's).
            let n = 4000;
            let (e, ev_e) = run_burst(v, frame, (n, n), 1);
            let (b, ev_b) = run_burst(v, frame, (n, n), 16);
            let what = format!("{v} {frame} B");
            assert_eq!((b.tx_packets, b.rx_packets), (n, n), "{what}");
            assert_eq!(
                (b.down_tlp_bytes, b.up_tlp_bytes),
                (e.down_tlp_bytes, e.up_tlp_bytes),
                "{what}"
            );
            for (dir, x, y) in [("tx", e.tx_gbps, b.tx_gbps), ("rx", e.rx_gbps, b.rx_gbps)] {
                assert_close(&format!("{what} {dir}"), ("exact", x), ("burst", y), 0.01);
            }
            if v == "dpdk" && frame == 64 {
                assert!(ev_b * 10 < ev_e * 9, "{what}: {ev_b} events, exact {ev_e}");
            }
        }
    }
}

/// MAC loopback: every frame sent comes back into a receive buffer, byte for byte and in
/// order, at 40 GbE with IMIX sizes; several queue pairs each raise their own vectors.
#[test]
fn loopback_returns_every_frame() {
    let mut s = sim("model = \"batched\"\nqueues = 2\nrx = \"loopback\"\neth_gbps = 40\n");
    let mut cfg = NicDriverConfig::linux();
    cfg.frames = FrameSizes::Imix;
    let mut d = NicDriver::open(&mut s, "nic", cfg).unwrap();
    let r = d.run(&mut s, 960, 960).unwrap();
    assert_eq!((r.tx_packets, r.rx_packets, r.errors), (960, 960, 0));
    assert_eq!(r.tx_bytes, r.rx_bytes);
    // Frames carry their number in their first 8 bytes: each came back once, whole.
    for p in d.received() {
        let n = u64::from_le_bytes(p[..8].try_into().unwrap());
        assert_eq!(p.len() as u64, FrameSizes::Imix.nth(n) - 4, "frame {n}");
        assert!(p[8..].iter().all(|&b| b == 0), "frame {n}");
    }
    let mut all: Vec<u64> = d
        .received()
        .iter()
        .map(|p| u64::from_le_bytes(p[..8].try_into().unwrap()))
        .collect();
    all.sort_unstable();
    assert_eq!(all, (0..960).collect::<Vec<_>>());
    // 40 GbE with IMIX (mean 353.8 B frames) is below what PCIe allows: the run takes
    // at least the frames' wire time.
    let wire: u64 = (0..960).map(|i| FrameSizes::Imix.nth(i) + 20).sum();
    assert!(r.elapsed.as_ps() as f64 >= wire as f64 * 8.0 / 40.0 * 1000.0 / 2.0);
    // Interrupts came from four vectors (two per queue pair).
    let vectors: std::collections::BTreeSet<u32> =
        s.interrupts().iter().map(|(_, i)| i.data).collect();
    assert_eq!(vectors.len(), 4, "{vectors:?}");
}

/// A line-rate source at 40 GbE with 64-byte frames offers more than the simple NIC can
/// take over Gen3 x8: the receive FIFO overflows and the drops are counted; with
/// 1518-byte frames nothing is dropped and the NIC keeps line rate.
#[test]
fn line_rate_source_drops_what_pcie_cannot_take() {
    let report = |s: &FabricSim| s.model("nic").unwrap().report().unwrap();
    for (frame, drops) in [(64u64, true), (1518, false)] {
        let mut s = sim(&format!(
            "model = \"simple\"\nrx = \"line-rate\"\neth_gbps = 40\nframe = \"{frame}\"\nrx_fifo = \"64KiB\"\n"
        ));
        let mut cfg = NicDriverConfig::simple();
        cfg.keep_received = false;
        let mut d = NicDriver::open(&mut s, "nic", cfg).unwrap();
        let r = d.run(&mut s, 0, 3000).unwrap();
        let j = report(&s);
        let dropped = j["rx_dropped"].as_u64().unwrap();
        let line = pcielab_device::nic::Ethernet::new(40.0)
            .unwrap()
            .data_gbps(frame);
        eprintln!(
            "{frame} B: {:.3} Gb/s of {line:.3}, {dropped} dropped",
            r.rx_gbps
        );
        if drops {
            assert!(dropped > 0);
            assert!(r.rx_gbps < 0.75 * line, "{} vs {line}", r.rx_gbps);
        } else {
            assert_eq!(dropped, 0);
            assert!(
                (r.rx_gbps / line - 1.0).abs() < 0.01,
                "{} vs {line}",
                r.rx_gbps
            );
        }
    }
}

/// Interrupt moderation: a burst shorter than the moderation count is signalled by the
/// moderation timer, and the driver sees every packet done.
#[test]
fn moderation_timer_signals_a_short_burst() {
    let mut s = sim("model = \"batched\"\neth_gbps = 40\nirq_delay_ns = 20000\n");
    let mut d = NicDriver::open(&mut s, "nic", NicDriverConfig::linux()).unwrap();
    let t0 = s.now();
    let r = d.run(&mut s, 5, 0).unwrap();
    assert_eq!(r.tx_packets, 5);
    assert_eq!(r.interrupts, 1);
    assert!(
        r.elapsed.as_ps() >= 20_000_000,
        "{:?}",
        s.now().saturating_since(t0)
    );
}

/// A descriptor that points where the NIC may not go: with an IOMMU the read faults,
/// the NIC gets an error completion and counts it, the host's fault log has it, and
/// the other packets go on. Nothing panics and no byte lands outside the buffers.
#[test]
fn descriptor_outside_host_memory_faults_and_is_counted() {
    use pcielab_fabric::timed::IommuConfig;
    let cfg = SimConfig {
        mps: 256,
        mrrs: 512,
        iommu: Some(IommuConfig::default()),
        ..SimConfig::default()
    };
    let keys = "model = \"batched\"\neth_gbps = 0\nrx = \"saturate\"\n";
    let mut s = FabricSim::new(&topo(keys), &KindRegistry::builtin(), cfg).unwrap();
    let mut d = NicDriver::open(&mut s, "nic", NicDriverConfig::linux()).unwrap();
    // Normal traffic first.
    let r = d.run(&mut s, 80, 80).unwrap();
    assert_eq!((r.tx_packets, r.rx_packets, r.errors), (80, 80, 0));
    let bar = s.bar("nic", 0).unwrap();
    let reg64 = |s: &mut FabricSim, off: u64| match s.mmio_read(bar + off, 8).unwrap() {
        pcielab_fabric::timed::HostRead::Done { data, .. } => {
            u64::from_le_bytes(data[..8].try_into().unwrap())
        }
        other => panic!("{other:?}"),
    };
    let stray = 0x7_0000_0000u64;
    let faults_before = s.iommu_stats().unwrap().1.len();
    // A receive buffer outside what the driver mapped: the frame's write is posted, so
    // the NIC cannot know; the IOMMU drops it and logs the fault.
    let (rx_base, rx_tail) = (
        reg64(&mut s, 0x100 + 0x18),
        reg64(&mut s, 0x100 + 0x20) >> 32,
    );
    let mut desc = [0u8; 16];
    desc[0..8].copy_from_slice(&stray.to_le_bytes());
    desc[8..10].copy_from_slice(&2048u16.to_le_bytes());
    s.host_write(rx_base + rx_tail * 16, &desc);
    s.mmio_write(
        bar + 0x100 + 0x24,
        &((rx_tail as u32 + 1) % 256).to_le_bytes(),
    )
    .unwrap();
    s.run_for(pcielab_sim::SimDuration::from_us(50));
    let faults = s.iommu_stats().unwrap().1.len();
    assert!(
        faults > faults_before,
        "no IOMMU fault for the stray receive buffer"
    );
    // A transmit packet outside: the read gets an error completion; the NIC counts it
    // and reports the descriptor done with its error bit.
    let (tx_base, tx_tail) = (reg64(&mut s, 0x100), reg64(&mut s, 0x100 + 0x08) >> 32);
    let mut desc = [0u8; 16];
    desc[0..8].copy_from_slice(&(stray + 0x10000).to_le_bytes());
    desc[8..10].copy_from_slice(&60u16.to_le_bytes());
    s.host_write(tx_base + tx_tail * 16, &desc);
    s.mmio_write(
        bar + 0x100 + 0x0c,
        &((tx_tail as u32 + 1) % 240).to_le_bytes(),
    )
    .unwrap();
    s.run_for(pcielab_sim::SimDuration::from_us(300));
    let j = s.model("nic").unwrap().report().unwrap();
    assert_eq!(j["dma_errors"].as_u64(), Some(1), "{j}");
    assert!(s.iommu_stats().unwrap().1.len() > faults);
    let mut wb = [0u8; 16];
    s.host_read(tx_base + tx_tail * 16, &mut wb);
    assert_eq!(wb[11], 3, "done with the error bit: {wb:?}");
    // Not a byte landed outside the buffers.
    let mut buf = vec![0u8; 0x20000];
    s.host_read(stray, &mut buf);
    assert!(
        buf.iter().all(|&b| b == 0),
        "bytes landed outside the buffers"
    );
}

/// Rings that run past the top of the 64-bit address space: a descriptor there cannot
/// be fetched (its DMA would run past 2^64), which the NIC counts; no descriptor address
/// wraps to low memory, and nothing panics (address arithmetic used to overflow).
#[test]
fn rings_past_the_top_of_the_address_space_fail_counted_without_wrapping() {
    let mut s = sim("model = \"batched\"\neth_gbps = 0\nrx = \"loopback\"\n");
    let bar = s.bar("nic", 0).unwrap();
    // Room for 16 descriptors below 2^64; descriptor 16 would wrap to address 0.
    let top = 0xffff_ffff_ffff_ff00u64;
    for (base, size) in [(0x100, 0x108), (0x118, 0x120)] {
        s.mmio_write(bar + base, &top.to_le_bytes()).unwrap();
        s.mmio_write(bar + size, &64u32.to_le_bytes()).unwrap();
    }
    s.mmio_write(bar, &1u32.to_le_bytes()).unwrap();
    // Where wrapped descriptors would be read: ones that describe a real packet and a
    // real buffer, so that reading them would show.
    let buf = s.alloc_dma(0x10000);
    for i in 0..48u64 {
        let mut d = [0u8; 16];
        d[0..8].copy_from_slice(&(buf + i * 1024).to_le_bytes());
        d[8..10].copy_from_slice(&1000u16.to_le_bytes());
        d[10] = 1; // end of packet
        s.host_write(i * 16, &d);
    }
    let low = |s: &FabricSim| {
        let mut m = vec![0u8; 48 * 16];
        s.host_read(0, &mut m);
        m
    };
    let before = low(&s);
    // 40 descriptors posted on each ring.
    s.mmio_write(bar + 0x124, &40u32.to_le_bytes()).unwrap();
    s.mmio_write(bar + 0x10c, &40u32.to_le_bytes()).unwrap();
    let limit = s.now() + pcielab_sim::SimDuration::from_ms(10);
    s.run_until_idle(limit);
    assert!(s.now() < limit, "the simulation did not come to rest");
    let j = s.model("nic").unwrap().report().unwrap();
    assert!(j["dma_errors"].as_u64().unwrap() >= 2, "{j}");
    assert_eq!(j["tx_packets"].as_u64(), Some(0), "{j}");
    assert_eq!(j["rx_packets"].as_u64(), Some(0), "{j}");
    assert_eq!(
        low(&s),
        before,
        "descriptors at address 0 were written back"
    );
}

/// The NIC's own DMA engine settings: its tags (`dma_tags`) and its datapath
/// (`clock_mhz` × `datapath_bits`), which the simulator charges. A 125 MHz × 64-bit
/// datapath (8 Gb/s) caps what a Gen3 x8 link would otherwise carry.
#[test]
fn the_nic_declares_its_tags_and_timing() {
    use pcielab_wire::tlp::{MemOp, TlpHeader, TlpRepr};
    let run_with = |extra: &str| {
        let cfg = SimConfig {
            mps: 256,
            mrrs: 512,
            trace: true,
            ..SimConfig::default()
        };
        let keys = format!("model = \"batched\"\neth_gbps = 0\n{extra}");
        let mut s = FabricSim::new(&topo(&keys), &KindRegistry::builtin(), cfg).unwrap();
        let mut drv = NicDriverConfig::dpdk();
        drv.frames = FrameSizes::Fixed(1518);
        let mut d = NicDriver::open(&mut s, "nic", drv).unwrap();
        let r = d.run(&mut s, 640, 0).unwrap();
        let tr = s.trace().unwrap();
        let nic = s.bdf("nic").unwrap();
        let tags: Vec<u16> = tr
            .records
            .iter()
            .filter(|r| matches!(r.kind, pcielab_fabric::timed::TraceKind::Tlp { .. }))
            .filter_map(|r| TlpRepr::parse_bytes(tr.bytes(r)).ok())
            .filter(|t| matches!(t.header, TlpHeader::Mem(m) if m.op == MemOp::Read && m.requester_id == nic))
            .map(|t| t.tag().value())
            .collect();
        (r.tx_gbps, tags)
    };
    let (fast, tags) = run_with("dma_tags = 8\n");
    assert!(!tags.is_empty());
    assert!(tags.iter().all(|&t| t < 8), "{tags:?}");
    let (slow, _) = run_with("clock_mhz = 125\ndatapath_bits = 64\n");
    assert!(fast > 40.0, "{fast}");
    assert!(slow < 8.0 && slow > 6.0, "{slow}");
}

fn cabled(keys_a: &str, keys_b: &str) -> FabricSim {
    let text = format!(
        "[[node]]\nname = \"rc\"\nkind = \"root-complex\"\nports = 2\n\
         [[node]]\nname = \"a\"\nkind = \"nic\"\ncable = \"b\"\n{keys_a}\n\
         [[node]]\nname = \"b\"\nkind = \"nic\"\ncable = \"a\"\n{keys_b}\n\
         [[link]]\nup = \"rc.0\"\ndown = \"a\"\ngen = 3\nwidth = 8\n\
         [[link]]\nup = \"rc.1\"\ndown = \"b\"\ngen = 3\nwidth = 8\n"
    );
    let t = Topology::parse(&text, "cable.toml", &KindRegistry::builtin()).unwrap();
    let cfg = SimConfig {
        mps: 256,
        mrrs: 512,
        ..SimConfig::default()
    };
    FabricSim::new(&t, &KindRegistry::builtin(), cfg).unwrap()
}

/// `measure_in` on a NIC cabled to another measures it alone: the peer gets none of
/// its frames (before, each run sent every frame down the cable too, to a NIC with no
/// driver that dropped them), and the result is that of the same NIC without a cable.
#[test]
fn measure_in_runs_a_cabled_nic_alone() {
    use pcielab_fabric::drivers::nic::{measure_in, measure_in_observed, NicVariant};
    use pcielab_fabric::drivers::RunStage;
    let text = |cable_a: &str, cable_b: &str| {
        format!(
            "[[node]]\nname = \"rc\"\nkind = \"root-complex\"\nports = 2\n\
             [[node]]\nname = \"a\"\nkind = \"nic\"\n{cable_a}\n\
             [[node]]\nname = \"b\"\nkind = \"nic\"\n{cable_b}\n\
             [[link]]\nup = \"rc.0\"\ndown = \"a\"\ngen = 3\nwidth = 8\n\
             [[link]]\nup = \"rc.1\"\ndown = \"b\"\ngen = 3\nwidth = 8\n"
        )
    };
    let reg = KindRegistry::builtin();
    let cabled = Topology::parse(&text("cable = \"b\"", "cable = \"a\""), "c.toml", &reg).unwrap();
    let alone = Topology::parse(&text("", ""), "a.toml", &reg).unwrap();
    let cfg = SimConfig {
        mps: 256,
        mrrs: 512,
        ..SimConfig::default()
    };
    let mut peer_rx = Vec::new();
    let got = measure_in_observed(
        &cabled,
        "a",
        &cfg,
        NicVariant::Batched,
        128,
        320,
        &mut |sim, stage| {
            if matches!(stage, RunStage::End) {
                let r = sim.model("b").and_then(|m| m.report()).expect("b's report");
                peer_rx.push((r["rx_packets"].as_u64(), r["rx_dropped"].as_u64()));
            }
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(peer_rx, vec![(Some(0), Some(0)); 3], "the peer saw frames");
    let want = measure_in(&alone, "a", &cfg, NicVariant::Batched, 128, 320).unwrap();
    assert_eq!(format!("{got:?}"), format!("{want:?}"));
    assert!(got.bidir_gbps > 0.0);
}

/// Two NICs with their MACs cabled together, each sending to the other at once: every
/// frame arrives once, byte for byte, and 1518-byte frames run at 40GbE line rate
/// (which PCIe Gen3 x8 allows); nothing is dropped.
#[test]
fn two_cabled_nics_exchange_frames_at_line_rate() {
    use pcielab_fabric::drivers::nic::run_together;
    let mut s = cabled(
        "model = \"batched\"\neth_gbps = 40",
        "model = \"simple\"\neth_gbps = 40\nqueues = 2",
    );
    let mut cfg_a = NicDriverConfig::linux();
    cfg_a.frames = FrameSizes::Fixed(1518);
    let mut cfg_b = NicDriverConfig::simple();
    cfg_b.frames = FrameSizes::Fixed(1518);
    let mut a = NicDriver::open(&mut s, "a", cfg_a).unwrap();
    let mut b = NicDriver::open(&mut s, "b", cfg_b).unwrap();
    let n = 1920;
    let runs = run_together(&mut s, &mut [(&mut a, n, n), (&mut b, n, n)]).unwrap();
    for (name, r) in ["a", "b"].iter().zip(&runs) {
        assert_eq!((r.tx_packets, r.rx_packets, r.errors), (n, n, 0), "{name}");
    }
    // The one-queue NIC sends at line rate and receives what the other sends.
    let line = pcielab_device::nic::Ethernet::new(40.0)
        .unwrap()
        .data_gbps(1518);
    let r = &runs[0];
    assert!(
        (r.tx_gbps / line - 1.0).abs() < 0.01,
        "a: {} of {line}",
        r.tx_gbps
    );
    assert!(
        (r.rx_gbps / line - 1.0).abs() < 0.03,
        "a: {} of {line}",
        r.rx_gbps
    );
    for d in [&a, &b] {
        let mut seq: Vec<u64> = d
            .received()
            .iter()
            .map(|p| {
                assert_eq!(p.len(), 1514);
                assert!(p[8..].iter().all(|&x| x == 0));
                u64::from_le_bytes(p[..8].try_into().unwrap())
            })
            .collect();
        seq.sort_unstable();
        assert_eq!(seq, (0..n).collect::<Vec<_>>(), "{}", d.name());
    }
    assert_eq!(s.ethernet_stats(), (2 * n, 0));
}

/// A cable must join two devices, each end at most once; errors name the node, its line
/// and the key.
#[test]
fn cable_errors_name_the_node_and_key() {
    let reg = KindRegistry::builtin();
    let build = |a: &str, b: &str| {
        let text = format!(
            "[[node]]\nname = \"rc\"\nkind = \"root-complex\"\nports = 3\n\
             [[node]]\nname = \"a\"\nkind = \"nic\"\n{a}\n\
             [[node]]\nname = \"b\"\nkind = \"nic\"\n{b}\n\
             [[node]]\nname = \"c\"\nkind = \"nic\"\n\
             [[link]]\nup = \"rc.0\"\ndown = \"a\"\ngen = 3\nwidth = 8\n\
             [[link]]\nup = \"rc.1\"\ndown = \"b\"\ngen = 3\nwidth = 8\n\
             [[link]]\nup = \"rc.2\"\ndown = \"c\"\ngen = 3\nwidth = 8\n"
        );
        let t = Topology::parse(&text, "c.toml", &reg).unwrap();
        FabricSim::new(&t, &reg, SimConfig::default())
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    let e = build("cable = \"nowhere\"", "");
    assert!(
        e.contains("node \"a\" (line 5): key \"cable\": no node is called \"nowhere\""),
        "{e}"
    );
    let e = build("cable = \"a\"", "");
    assert!(e.contains("to itself"), "{e}");
    let e = build("cable = \"rc\"", "");
    assert!(e.contains("\"rc\" is not a device"), "{e}");
    let e = build("cable = \"b\"", "cable = \"c\"");
    assert!(e.contains("\"b\" is cabled to \"c\""), "{e}");
    let e = build("cable = \"b\"", "");
    assert!(e.contains("\"b\" does not name \"a\" back"), "{e}");
}
/// With one or two queue pairs and 1518-byte frames at 40GbE, the transmit side keeps
/// the MAC busy from the first frame to the last (no idle time between frames): the
/// NIC sends at line rate. The host's view of the rate (from its interrupts, 32 packets
/// apart per queue) is within 1 % of it.
#[test]
fn the_mac_never_idles_at_line_rate() {
    let line = pcielab_device::nic::Ethernet::new(40.0)
        .unwrap()
        .data_gbps(1518);
    for queues in [1, 2] {
        let mut s = sim(&format!(
            "model = \"batched\"\nqueues = {queues}\neth_gbps = 40\n"
        ));
        let mut c = NicDriverConfig::linux();
        c.frames = FrameSizes::Fixed(1518);
        let mut d = NicDriver::open(&mut s, "nic", c).unwrap();
        let r = d.run(&mut s, 4000, 0).unwrap();
        let j = s.model("nic").unwrap().report().unwrap();
        assert_eq!(j["tx_packets"].as_u64(), Some(4000));
        assert_eq!(j["mac_idle_ps"].as_u64(), Some(0), "{queues} queues: {j}");
        assert!(
            (r.tx_gbps / line - 1.0).abs() < 0.01,
            "{queues} queues: {} of {line}",
            r.tx_gbps
        );
    }
}
