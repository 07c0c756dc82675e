//! The host model: profiles calibrated to published host measurements (pcie-bench's
//! Xeons, gem5's Table II), cache and NUMA states, and the CPU costs host programs
//! pay. Published numbers are quoted with their place in the paper.

use pcielab_fabric::host::model::{apply_knob, profile, CacheState};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{
    AddrPattern, DmaOpKind, DmaStream, FabricSim, HostRead, SimConfig, StreamReport,
};
use pcielab_fabric::topology::Topology;
use pcielab_sim::{SimDuration, SimTime};

fn one_link(gen: u8, width: u8) -> Topology {
    let s = format!(
        "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n[[node]]\nname=\"ep\"\nkind=\"psmem\"\n\
         [[link]]\nup=\"rc.0\"\ndown=\"ep\"\ngen={gen}\nwidth={width}\n"
    );
    Topology::parse(&s, "host.toml", &KindRegistry::builtin()).unwrap()
}

fn with_profile(name: &str) -> SimConfig {
    let mut c = SimConfig::default();
    profile(name).unwrap().apply(&mut c).unwrap();
    c
}

/// pcie-bench's LAT_RD: `count` DMA reads of `size` bytes one at a time over an
/// 8 KiB buffer on Gen3 x8 (seed 001 §6.1), warmed first when the profile says so.
fn lat_rd(cfg: SimConfig, size: u64, count: u64, region: u64, warm: bool) -> StreamReport {
    let mut sim = FabricSim::new(&one_link(3, 8), &KindRegistry::builtin(), cfg).unwrap();
    let base = sim.alloc_dma(region);
    if warm {
        sim.llc_warm(base, region);
    }
    sim.attach(
        "ep",
        Box::new(DmaStream::new(
            DmaOpKind::Read,
            size,
            1,
            count,
            base,
            region,
            AddrPattern::Sequential,
        )),
    )
    .unwrap();
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    let m = sim.model("ep").unwrap().report().unwrap();
    StreamReport {
        dmas: m["dmas"].as_u64().unwrap(),
        min_latency_ns: m["min_latency_ns"].as_f64().unwrap(),
        median_latency_ns: m["median_latency_ns"].as_f64().unwrap(),
        p90_latency_ns: m["p90_latency_ns"].as_f64().unwrap(),
        p99_latency_ns: m["p99_latency_ns"].as_f64().unwrap(),
        p999_latency_ns: m["p999_latency_ns"].as_f64().unwrap(),
        max_latency_ns: m["max_latency_ns"].as_f64().unwrap(),
        mean_latency_ns: m["mean_latency_ns"].as_f64().unwrap(),
        ..StreamReport::default()
    }
}

fn within(got: f64, want: f64, tol: f64) -> bool {
    (got - want).abs() <= want * tol
}

#[test]
fn xeon_e5_profile_gives_pcie_bench_64b_read_latency() {
    // Seed 001 §6.2 (Fig. 6, NFP6000-HSW, warm caches): min 520 ns, median 547 ns,
    // 99.9 % of 2 million reads within 80 ns of the minimum, max 947 ns.
    let r = lat_rd(with_profile("xeon-e5-haswell"), 64, 50_000, 8192, true);
    eprintln!("{r:?}");
    assert_eq!(r.dmas, 50_000);
    assert!(
        within(r.min_latency_ns, 520.0, 0.05),
        "min {}",
        r.min_latency_ns
    );
    assert!(
        within(r.median_latency_ns, 547.0, 0.05),
        "median {}",
        r.median_latency_ns
    );
    // The tail: 99 % inside the published 80 ns band; the 99.9th percentile sits on
    // the cliff where the band ends (the profile puts quantile 0.999 at exactly +80 ns
    // and rises linearly to +427 ns at 1), so its sampled value lands a little above
    // +80; a maximum in the published order (above the band, below twice 947 ns).
    assert!(r.p99_latency_ns - r.min_latency_ns <= 80.0, "{r:?}");
    assert!(r.p999_latency_ns - r.min_latency_ns <= 160.0, "{r:?}");
    assert!(
        r.max_latency_ns > r.p999_latency_ns && r.max_latency_ns < 2.0 * 947.0,
        "{r:?}"
    );
    // The spec profile has no tail at all: min and median are the same.
    let s = lat_rd(with_profile("spec"), 64, 2_000, 8192, false);
    assert!(
        (s.median_latency_ns - s.min_latency_ns).abs() < 0.01,
        "{s:?}"
    );
}

#[test]
fn xeon_e3_profile_has_the_published_long_tail() {
    // Seed 001 §6.2 (NFP6000-HSW-E3): min 493, median 1213, p90 about twice the
    // median, p99 5707, p99.9 11987 ns, maximum 5.8 ms.
    let r = lat_rd(with_profile("xeon-e3-haswell"), 64, 50_000, 8192, false);
    eprintln!("{r:?}");
    assert!(within(r.min_latency_ns, 493.0, 0.05), "{r:?}");
    assert!(within(r.median_latency_ns, 1213.0, 0.05), "{r:?}");
    assert!(within(r.p90_latency_ns, 2426.0, 0.10), "{r:?}");
    assert!(within(r.p99_latency_ns, 5707.0, 0.10), "{r:?}");
    // Past p99.9 the paper saw "most latencies beyond being larger than 1ms up to a
    // maximum latency of 5.8ms": the profile rises linearly from 11.5 µs to 5.8 ms
    // over the last 0.1 %, so the sampled p99.9 (the 50th largest of 50,000) lies
    // anywhere on that cliff; it is at least the published value's order.
    assert!(
        r.p999_latency_ns > 0.8 * 11987.0 && r.p999_latency_ns < 5.8e6,
        "{r:?}"
    );
    assert!(r.max_latency_ns > 1e6 && r.max_latency_ns <= 5.8e6, "{r:?}");
}

#[test]
fn gem5_profile_reproduces_table_ii_within_ten_percent() {
    // Seed 002 Table II: MMIO read latency 318, 358, 398, 438, 517 ns for root
    // complex latency 50, 75, 100, 125, 150 ns; NIC on a root port (Gen2 x1).
    for (rc, paper) in [
        (50u64, 318.0),
        (75, 358.0),
        (100, 398.0),
        (125, 438.0),
        (150, 517.0),
    ] {
        let mut cfg = with_profile("gem5-table2");
        apply_knob(&mut cfg, "rc_ns", &rc.to_string()).unwrap();
        let mut sim = FabricSim::new(&one_link(2, 1), &KindRegistry::builtin(), cfg).unwrap();
        // After link training and the InitFC handshake, as a kernel module runs.
        sim.run_for(SimDuration::from_us(10));
        let bar = sim.bar("ep", 0).unwrap();
        let HostRead::Done { issued, done, .. } = sim.mmio_read(bar, 4).unwrap() else {
            panic!("MMIO read failed");
        };
        let ns = (done - issued).as_ps() as f64 / 1000.0;
        eprintln!("rc {rc} ns: {ns:.1} ns (paper {paper})");
        assert!(within(ns, paper, 0.10), "rc {rc}: {ns} vs {paper}");
        // Without the profile's CPU cost the fabric alone is 2 × rc + about 96 ns.
        let mut bare = SimConfig::default();
        apply_knob(&mut bare, "rc_ns", &rc.to_string()).unwrap();
        let mut sim = FabricSim::new(&one_link(2, 1), &KindRegistry::builtin(), bare).unwrap();
        sim.run_for(SimDuration::from_us(10));
        let bar = sim.bar("ep", 0).unwrap();
        let HostRead::Done {
            issued: i2,
            done: d2,
            ..
        } = sim.mmio_read(bar, 4).unwrap()
        else {
            panic!("MMIO read failed");
        };
        let fabric = (d2 - i2).as_ps() as f64 / 1000.0;
        // Request and completion each cross the root complex once; the rest is the
        // link: the MRd's 20 and the CplD's 24 wire bytes at 2 ns a byte on Gen2 x1
        // (88 ns), plus 8.252 ns of the link model's other timing, which this test pins
        // rather than derives (a change of it shows here).
        assert!(
            (fabric - (2 * rc) as f64 - 96.252).abs() < 0.001,
            "{fabric}"
        );
        let cpu = profile("gem5-table2")
            .unwrap()
            .get("mmio_read_ns")
            .unwrap()
            .parse::<f64>()
            .unwrap();
        assert!(
            (ns - fabric - cpu).abs() < 1e-6,
            "the CPU cost is charged once: {ns} {fabric}"
        );
    }
}

#[test]
fn spec_profile_is_the_default_config() {
    assert_eq!(with_profile("spec"), SimConfig::default());
}

#[test]
fn cache_states_and_numa_move_read_latency_as_configured() {
    let e5 = with_profile("xeon-e5-haswell");
    let quiet = |mut c: SimConfig| {
        apply_knob(&mut c, "mem_tail", "zero").unwrap();
        c
    };
    // Every DMA starts on its own page (DmaStream's default alignment): 128 reads over
    // 512 KiB touch each line once.
    let region = 128 * 4096;
    let warm = lat_rd(quiet(e5.clone()), 64, 128, region, true).median_latency_ns;
    // Cold: nothing cached at the start; read once, every line misses.
    let cold = lat_rd(quiet(e5.clone()), 64, 128, region, false).median_latency_ns;
    let mut thrash_cfg = quiet(e5.clone());
    thrash_cfg.cache = CacheState::Thrash;
    let thrash = lat_rd(thrash_cfg, 64, 128, region, true).median_latency_ns;
    let mut remote = quiet(e5.clone());
    apply_knob(&mut remote, "numa", "remote").unwrap();
    let far = lat_rd(remote, 64, 128, region, true).median_latency_ns;
    let gap = e5.mem_latency.as_ns_f64() - e5.llc_hit_latency.as_ns_f64();
    eprintln!("warm {warm} cold {cold} thrash {thrash} remote {far}");
    assert!(
        (cold - warm - gap).abs() < 0.01,
        "cold pays the miss: {cold} {warm}"
    );
    assert!(
        (thrash - warm - gap).abs() < 0.01,
        "thrash misses though warmed"
    );
    assert!((far - warm - e5.numa_penalty.as_ns_f64()).abs() < 0.01);
}

#[test]
fn tails_are_seeded() {
    let run = |seed| {
        let mut c = with_profile("xeon-e3-haswell");
        c.seed = Some(seed);
        lat_rd(c, 64, 2_000, 8192, false)
    };
    let (a, b, c) = (run(1), run(1), run(2));
    assert_eq!(a.p99_latency_ns, b.p99_latency_ns);
    assert_eq!(a.mean_latency_ns, b.mean_latency_ns);
    assert_ne!(a.mean_latency_ns, c.mean_latency_ns);
}

#[test]
fn cpu_costs_are_charged_where_host_software_pays_them() {
    let mut cfg = SimConfig::default();
    for (k, v) in [
        ("mmio_write_ns", "40"),
        ("doorbell_ns", "70"),
        ("driver_ns", "25"),
        ("irq_ns", "900"),
    ] {
        apply_knob(&mut cfg, k, v).unwrap();
    }
    let mut sim = FabricSim::new(&one_link(3, 4), &KindRegistry::builtin(), cfg).unwrap();
    let bar = sim.bar("ep", 0).unwrap();
    let t0 = sim.now();
    sim.mmio_write(bar, &[1, 2, 3, 4]).unwrap();
    assert_eq!(
        (sim.now() - t0).as_ps(),
        40_000,
        "a store costs the CPU 40 ns"
    );
    let t1 = sim.now();
    sim.doorbell(bar, &[5, 6, 7, 8]).unwrap();
    assert_eq!((sim.now() - t1).as_ps(), 70_000);
    let t2 = sim.now();
    sim.driver_work(4);
    assert_eq!((sim.now() - t2).as_ps(), 100_000);
    sim.run_for(SimDuration::from_us(1));
    // Both writes arrived (the costs delay, never drop).
    let HostRead::Done { data, .. } = sim.mmio_read(bar, 4).unwrap() else {
        panic!()
    };
    assert_eq!(data, vec![5, 6, 7, 8]);

    // Interrupt delivery: the handler runs irq_ns after the MSI-X write arrives.
    crate::common::unmask_msix_vector1(&mut sim, "ep");
    sim.run_for(SimDuration::from_us(1));
    let irq = crate::common::MsixTimer {
        first: SimDuration::from_us(2),
        every: SimDuration::ZERO,
        times: 1,
    };
    sim.attach("ep", Box::new(irq)).unwrap();
    let (handler, _) = sim
        .wait_interrupt(SimDuration::from_us(10))
        .expect("an interrupt");
    let arrived = sim.interrupts().last().unwrap().0;
    assert_eq!((handler - arrived).as_ps(), 900_000);
    assert!(sim.now() >= handler);
}

#[test]
fn topology_host_table_applies_and_flags_errors_with_their_line() {
    let text = "seed = 1\n[host]\nprofile = \"xeon-e5-haswell\"\nmem_ns = 500\n\
                [[node]]\nname=\"rc\"\nkind=\"root-complex\"\n";
    let t = Topology::parse(text, "h.toml", &KindRegistry::builtin()).unwrap();
    let mut c = SimConfig::default();
    t.host_config(&mut c).unwrap();
    assert_eq!(
        c.mem_latency,
        SimDuration::from_ns(500),
        "knobs override the profile"
    );
    assert_eq!(c.cache, CacheState::Warm);
    for (bad, want) in [
        (
            "[host]\nprofile = \"xeon\"\n",
            "h.toml:2: key \"profile\": [host]: unknown host profile",
        ),
        (
            "[host]\nrc_ns = \"fast\"\n",
            "h.toml:2: key \"rc_ns\": [host]: rc_ns = \"fast\": not a number",
        ),
        (
            "[host]\nwarp = 9\n",
            "h.toml:2: key \"warp\": [host]: unknown host knob",
        ),
        ("host = 3\n", "h.toml:1: key \"host\": must be a table"),
    ] {
        let e = Topology::parse(bad, "h.toml", &KindRegistry::builtin())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with(want), "{bad:?}: {e}");
    }
}

#[test]
fn mmio_tail_delays_reads_by_seeded_draws() {
    let lat = |tail: &str| {
        let mut cfg = SimConfig::default();
        apply_knob(&mut cfg, "mmio_tail", tail).unwrap();
        let mut sim = FabricSim::new(&one_link(3, 8), &KindRegistry::builtin(), cfg).unwrap();
        sim.run_for(SimDuration::from_us(10));
        let bar = sim.bar("ep", 0).unwrap();
        (0..400)
            .map(|_| match sim.mmio_read(bar, 4).unwrap() {
                HostRead::Done { issued, done, .. } => (done - issued).as_ps() as f64 / 1000.0,
                r => panic!("{r:?}"),
            })
            .collect::<Vec<f64>>()
    };
    let base = lat("zero");
    let tail = lat("exp:1:100");
    assert!(
        base.iter().all(|&x| (x - base[0]).abs() < 1e-9),
        "no tail: constant"
    );
    let extra: f64 = tail.iter().zip(&base).map(|(t, b)| t - b).sum::<f64>() / 400.0;
    assert!((extra - 100.0).abs() < 15.0, "mean extra {extra}");
    assert!(tail.iter().zip(&base).all(|(t, b)| t >= b));
}
