//! Timed-simulator speed (one thread).
//!
//! * `gen4x16_via_switch_traversals`: a Gen4 x16 DMA read/write stream (1 KiB DMAs)
//!   from an endpoint through one switch to the root complex; elements = TLP link
//!   traversals (target ≥ 10 M/s).
//! * `gen4x16_via_switch_write4k_traversals`, `…_read4k_traversals`: the same path
//!   with 4 KiB DMA writes only, or reads only.
//! * `gen3x8_saturated_traversals`: one saturated Gen3 x8 link (4 KiB DMA writes); the
//!   bench also prints simulated time / wall time (target ≥ 1).
//! * bytes per in-flight TLP are printed (target ≤ 256), and kernel events per
//!   traversal.
//!
//! Under a profiler: `cargo bench -p pcielab-fabric --bench sim -- --profile-time 5
//! gen3x8` (or callgrind on the bench binary with the same arguments).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{
    bytes_per_inflight_tlp, AddrPattern, DmaOpKind, DmaStream, FabricSim, SimConfig,
};
use pcielab_fabric::topology::Topology;
use pcielab_sim::SimTime;

fn topo(switch: bool, gen: u8, width: u8) -> Topology {
    let s = if switch {
        format!(
            "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n[[node]]\nname=\"sw\"\nkind=\"switch\"\nports=1\n\
             [[node]]\nname=\"ep\"\nkind=\"psmem\"\n\
             [[link]]\nup=\"rc.0\"\ndown=\"sw\"\ngen={gen}\nwidth={width}\n\
             [[link]]\nup=\"sw.0\"\ndown=\"ep\"\ngen={gen}\nwidth={width}\n"
        )
    } else {
        format!(
            "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n[[node]]\nname=\"ep\"\nkind=\"psmem\"\n\
             [[link]]\nup=\"rc.0\"\ndown=\"ep\"\ngen={gen}\nwidth={width}\n"
        )
    };
    Topology::parse(&s, "bench.toml", &KindRegistry::builtin()).unwrap()
}

/// Runs one scenario: (TLP link traversals, simulated time, kernel events).
fn run(t: &Topology, op: DmaOpKind, size: u64, count: u64) -> (u64, SimTime, u64) {
    let cfg = SimConfig {
        dma_tags: 256,
        ..SimConfig::default()
    };
    let mut sim = FabricSim::new(t, &KindRegistry::builtin(), cfg).unwrap();
    let base = sim.alloc_dma(1 << 22);
    sim.attach(
        "ep",
        Box::new(DmaStream::new(
            op,
            size,
            32,
            count,
            base,
            1 << 22,
            AddrPattern::Sequential,
        )),
    )
    .unwrap();
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    (sim.traversals(), sim.now(), sim.events())
}

fn bench(c: &mut Criterion) {
    eprintln!("bytes per in-flight TLP: {}", bytes_per_inflight_tlp());
    let mut g = c.benchmark_group("timed");
    g.sample_size(10);
    let t = topo(true, 4, 16);
    let (trav, _, ev) = run(&t, DmaOpKind::ReadWrite, 1024, 2000);
    eprintln!(
        "gen4x16 via switch: {trav} traversals, {ev} events ({:.2} per traversal)",
        ev as f64 / trav as f64
    );
    g.throughput(Throughput::Elements(trav));
    g.bench_function("gen4x16_via_switch_traversals", |b| {
        b.iter(|| run(&t, DmaOpKind::ReadWrite, 1024, 2000))
    });
    for (name, op, size) in [
        (
            "gen4x16_via_switch_write4k_traversals",
            DmaOpKind::Write,
            4096,
        ),
        (
            "gen4x16_via_switch_read4k_traversals",
            DmaOpKind::Read,
            4096,
        ),
    ] {
        let (trav, _, _) = run(&t, op, size, 2000);
        g.throughput(Throughput::Elements(trav));
        g.bench_function(name, |b| b.iter(|| run(&t, op, size, 2000)));
    }
    let t = topo(false, 3, 8);
    let (trav, sim_t, ev) = run(&t, DmaOpKind::Write, 4096, 2000);
    eprintln!(
        "gen3x8 saturated: {trav} traversals, {ev} events ({:.2} per traversal)",
        ev as f64 / trav as f64
    );
    let t0 = std::time::Instant::now();
    let reps = 5;
    for _ in 0..reps {
        run(&t, DmaOpKind::Write, 4096, 2000);
    }
    let wall = t0.elapsed().as_secs_f64() / reps as f64;
    eprintln!(
        "gen3x8 saturated: {:.3} us simulated in {:.3} us wall: sim/wall = {:.2}",
        sim_t.as_ps() as f64 / 1e6,
        wall * 1e6,
        sim_t.as_ps() as f64 * 1e-12 / wall
    );
    g.throughput(Throughput::Elements(trav));
    g.bench_function("gen3x8_saturated_traversals", |b| {
        b.iter(|| run(&t, DmaOpKind::Write, 4096, 2000))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
