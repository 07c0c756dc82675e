//! Speed of the simulated pcie-bench NIC (one thread): 64-byte frames on a 100 GbE MAC
//! in loopback (every frame is sent and received), Gen3 x8, with the simple NIC, the
//! batched NIC with the Linux driver and with DPDK, and the last in burst mode
//! (`SimConfig::burst` 16, where the DMA engine's small reads of one instant travel
//! as scatter bursts). Elements = packets (each sent and
//! received). After the criterion measurements, a longer run of each prints simulated
//! time / wall time (target: at least 1/20, i.e. a ratio ≥ 0.05) and the kernel events
//! per packet by kind. Building the simulation (topology, enumeration, the driver's
//! set-up) is not timed.
//!
//! Instructions per packet, which unlike wall time do not swing with the machine's
//! load: `NIC_BENCH_ONLY=batched_dpdk NIC_BENCH_PACKETS=N` makes the longer run one
//! variant of N packets each way, so two runs under callgrind differ by N packets:
//!
//! ```text
//! cargo bench -p pcielab-fabric --bench nic --no-run
//! B=$(ls -t target/release/deps/nic-* | grep -v '\.d$' | head -1)
//! for n in 0 6000; do NIC_BENCH_ONLY=batched_dpdk NIC_BENCH_PACKETS=$n \
//!   valgrind --tool=callgrind --callgrind-out-file=/dev/null $B --bench zzz; done
//! # (I refs of the second − I refs of the first) / 6000 = instructions per packet
//! # (the last "I refs" line of each run is the bench's own process)
//! ```
//!
//! `scripts/nic-profile.sh VARIANT N` does this and splits the count by part of the
//! simulator (kernel, link layer, DMA engine, NIC, driver ...).
//!
//! Last, the exact model's floor under the NIC: on the same link, with no NIC, no
//! driver and no descriptors, a bare stream of 64-byte DMA writes and one of 64-byte
//! DMA reads (a psmem endpoint's engine, 32 in flight), wall time per DMA, best of 3.
//! A 64-byte packet sent and received costs at least one of each (its data), so the
//! DPDK run's simulated time per packet over their sum bounds the ratio that the
//! exact model can reach, whatever the NIC, the driver and the descriptors cost.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use pcielab_fabric::drivers::nic::{NicDriver, NicDriverConfig};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{AddrPattern, DmaOpKind, DmaStream, FabricSim, SimConfig};
use pcielab_fabric::topology::Topology;
use pcielab_sim::SimTime;
use std::time::Instant;

const VARIANTS: [(&str, &str); 4] = [
    ("simple", "simple"),
    ("batched_linux", "batched"),
    ("batched_dpdk", "batched"),
    ("batched_dpdk_burst", "batched"),
];

fn build(name: &str, model: &str) -> (FabricSim, NicDriver) {
    let text = format!(
        "[[node]]\nname = \"rc\"\nkind = \"root-complex\"\n\
         [[node]]\nname = \"nic\"\nkind = \"nic\"\nmodel = \"{model}\"\neth_gbps = 100\n\
         rx = \"loopback\"\nrx_fifo = \"16KiB\"\n\
         [[link]]\nup = \"rc.0\"\ndown = \"nic\"\ngen = 3\nwidth = 8\n"
    );
    let reg = KindRegistry::builtin();
    let t = Topology::parse(&text, "nic-bench.toml", &reg).unwrap();
    let cfg = SimConfig {
        mps: 256,
        mrrs: 512,
        burst: if name.ends_with("_burst") { 16 } else { 1 },
        ..SimConfig::default()
    };
    let mut sim = FabricSim::new(&t, &reg, cfg).unwrap();
    let mut drv = match name {
        "simple" => NicDriverConfig::simple(),
        "batched_linux" => NicDriverConfig::linux(),
        _ => NicDriverConfig::dpdk(),
    };
    drv.frames = pcielab_device::nic::FrameSizes::Fixed(64);
    drv.keep_received = false;
    let d = NicDriver::open(&mut sim, "nic", drv).unwrap();
    (sim, d)
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("nic_100g_64b_loopback");
    let n = 3200u64;
    g.throughput(Throughput::Elements(n));
    for (name, model) in VARIANTS {
        g.bench_function(name, |b| {
            b.iter_batched(
                || build(name, model),
                |(mut sim, mut d)| d.run(&mut sim, n, n).unwrap(),
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
    let per_packet = real_time();
    // (Not when profiling one variant: the profile counts that variant alone.)
    if std::env::var("NIC_BENCH_ONLY").is_err() {
        floor(per_packet);
    }
}

/// Longer runs: simulated time over wall time. Returns the DPDK variant's simulated
/// time per packet (each way), in seconds, when it ran.
fn real_time() -> Option<f64> {
    let mut dpdk = None;
    let only = std::env::var("NIC_BENCH_ONLY").ok();
    let n = std::env::var("NIC_BENCH_PACKETS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64_000u64);
    for (name, model) in VARIANTS {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let (mut sim, mut d) = build(name, model);
        let (e0, t0) = (sim.events(), tlps(&sim));
        let k0 = sim.events_by_kind();
        let t = Instant::now();
        let r = d.run(&mut sim, n, n).unwrap();
        let wall = t.elapsed().as_secs_f64();
        let simulated = r.elapsed.as_ps() as f64 * 1e-12;
        let per = |x: u64| x as f64 / n.max(1) as f64;
        if name == "batched_dpdk" {
            dpdk = Some(simulated / n.max(1) as f64);
        }
        println!(
            "nic {name}, 100 GbE, 64 B, loopback, {n} packets each way: {:.3} Mpps each way \
             simulated, {:.1} µs simulated in {:.1} ms wall: {:.3} × real time (target ≥ 0.05); \
             per packet sent and received: {:.1} TLPs, {:.1} kernel events",
            r.tx_pps / 1e6,
            simulated * 1e6,
            wall * 1e3,
            simulated / wall,
            per(tlps(&sim) - t0),
            per(sim.events() - e0),
        );
        // Where the events go: per packet sent and received, by kind.
        let kinds: Vec<String> = sim
            .events_by_kind()
            .iter()
            .zip(&k0)
            .filter(|((_, n), (_, n0))| n > n0)
            .map(|((name, n), (_, n0))| format!("{name} {:.2}", per(n - n0)))
            .collect();
        println!("  events per packet by kind: {}", kinds.join(", "));
    }
    dpdk
}

/// The exact model's floor: wall time per 64-byte DMA of a bare DMA stream on the NIC's
/// link (Gen3 x8, MPS 256, MRRS 512), writes and reads, best of 3; with the DPDK run's
/// simulated time per packet, the highest ratio the exact model could reach.
fn floor(dpdk_per_packet: Option<f64>) {
    let text = "[[node]]\nname = \"rc\"\nkind = \"root-complex\"\n\
                [[node]]\nname = \"ep\"\nkind = \"psmem\"\n\
                [[link]]\nup = \"rc.0\"\ndown = \"ep\"\ngen = 3\nwidth = 8\n";
    let reg = KindRegistry::builtin();
    let t = Topology::parse(text, "nic-floor.toml", &reg).unwrap();
    let count = 200_000u64;
    let mut ns = [f64::MAX; 2];
    for _ in 0..3 {
        for (k, op) in [DmaOpKind::Write, DmaOpKind::Read].into_iter().enumerate() {
            let cfg = SimConfig {
                mps: 256,
                mrrs: 512,
                ..SimConfig::default()
            };
            let mut sim = FabricSim::new(&t, &reg, cfg).unwrap();
            let base = sim.alloc_dma(1 << 22);
            let s = DmaStream::new(op, 64, 32, count, base, 1 << 22, AddrPattern::Sequential);
            sim.attach("ep", Box::new(s)).unwrap();
            let t0 = Instant::now();
            sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
            ns[k] = ns[k].min(t0.elapsed().as_secs_f64() * 1e9 / count as f64);
        }
    }
    println!(
        "exact-model floor, Gen3 x8, bare 64 B DMA streams ({count} DMAs, 32 in flight, best \
         of 3): {:.0} ns wall per write, {:.0} ns per read",
        ns[0], ns[1]
    );
    if let Some(p) = dpdk_per_packet {
        println!(
            "  a packet sent and received (DPDK, {:.1} ns simulated) costs at least one of \
             each: the exact model stays below {:.3} × real time (target ≥ 0.05)",
            p * 1e9,
            p * 1e9 / (ns[0] + ns[1])
        );
    }
}

fn tlps(sim: &FabricSim) -> u64 {
    sim.counters().iter().map(|(_, c)| c.tlps).sum()
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = bench
}
criterion_main!(benches);
