//! Speed of a simulated D2D stream (one thread): a `d2d-ssd` streams into a `d2d-nic`
//! across a switch (Gen2 x4, the kinds' defaults: 125 MHz 64-bit PCIe datapaths, 10GbE
//! MAC), 4 KiB chunks, peer-to-peer credit grants, 1,472-byte UDP frames. Elements =
//! stream bytes. After the criterion measurements, a longer steady stream prints
//! simulated time / wall time (target: at least 1/10, a ratio ≥ 0.1). Building the
//! simulation and setting the stream up is not timed.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use pcielab_fabric::drivers::d2d::{D2dStream, StreamSpec};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{FabricSim, SimConfig};
use pcielab_fabric::topology::Topology;
use std::time::Instant;

fn build(bytes: u64) -> (FabricSim, D2dStream) {
    let text = "[[node]]\nname = \"rc\"\nkind = \"root-complex\"\n\
         [[node]]\nname = \"sw\"\nkind = \"switch\"\nports = 2\n\
         [[node]]\nname = \"ssd\"\nkind = \"d2d-ssd\"\n\
         [[node]]\nname = \"nic\"\nkind = \"d2d-nic\"\n\
         [[link]]\nup = \"rc.0\"\ndown = \"sw\"\ngen = 2\nwidth = 4\n\
         [[link]]\nup = \"sw.0\"\ndown = \"ssd\"\ngen = 2\nwidth = 4\n\
         [[link]]\nup = \"sw.1\"\ndown = \"nic\"\ngen = 2\nwidth = 4\n";
    let reg = KindRegistry::builtin();
    let t = Topology::parse(text, "d2d-bench.toml", &reg).unwrap();
    let mut sim = FabricSim::new(&t, &reg, SimConfig::default()).unwrap();
    let s = D2dStream::open(&mut sim, StreamSpec::new("ssd", "nic", bytes)).unwrap();
    (sim, s)
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("d2d_stream_switch");
    let n = 1 << 20;
    g.throughput(Throughput::Bytes(n));
    g.bench_function("1MiB", |b| {
        b.iter_batched(
            || build(n),
            |(mut sim, mut s)| s.run(&mut sim).unwrap(),
            BatchSize::PerIteration,
        )
    });
    g.finish();
    real_time();
}

/// A longer stream: simulated time over wall time.
fn real_time() {
    let n = 64u64 << 20;
    let (mut sim, mut s) = build(n);
    let e0 = sim.events();
    let t = Instant::now();
    let r = s.run(&mut sim).unwrap();
    let wall = t.elapsed().as_secs_f64();
    let simulated = r.ended.saturating_since(r.started).as_ps() as f64 * 1e-12;
    println!(
        "d2d stream, {} MiB across a switch: {:.0} Mb/s simulated, {} frames, {:.1} µs simulated \
         in {:.1} ms wall: {:.3} × real time (target ≥ 0.1); {:.1} kernel events per frame",
        n >> 20,
        r.gbps() * 1000.0,
        r.frames,
        simulated * 1e6,
        wall * 1e3,
        simulated / wall,
        (sim.events() - e0) as f64 / r.frames as f64,
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
