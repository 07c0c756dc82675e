//! Timed-simulator speed (one thread). Each iteration simulates 2000 DMAs; building
//! the simulation (topology, enumeration) is not timed.
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
//! * after the criterion measurements, the same four streams ten times longer
//!   (steady state: host-memory pages reused rather than first touched), printed.
//!
//! Under a profiler: `cargo bench -p pcielab-fabric --bench sim -- --profile-time 5
//! gen3x8` (or callgrind on the bench binary with the same arguments).

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
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

/// Burst size of the burst-mode runs (`SimConfig::burst`): a 4 KiB page of 256-byte
/// writes.
const BURST: u8 = 16;

/// Builds one scenario (topology, enumeration, the DMA stream attached): not timed.
/// `burst` is `SimConfig::burst` (1: the exact model).
fn build(t: &Topology, op: DmaOpKind, size: u64, count: u64, burst: u8) -> FabricSim {
    let cfg = SimConfig {
        dma_tags: 256,
        burst,
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
    sim
}

/// Runs a built scenario to the end (timed); the simulation is returned so that it is
/// dropped outside the measurement.
fn drive(mut sim: FabricSim) -> FabricSim {
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    sim
}

/// Measures one scenario: per iteration, the simulation of `count` DMAs of `size`.
fn scenario(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    t: &Topology,
    op: DmaOpKind,
    size: u64,
    burst: u8,
) -> (u64, SimTime) {
    let done = drive(build(t, op, size, COUNT, burst));
    let (trav, ev) = (done.traversals(), done.events());
    eprintln!(
        "{name}: {trav} traversals, {ev} events ({:.2} per traversal)",
        ev as f64 / trav as f64
    );
    g.throughput(Throughput::Elements(trav));
    g.bench_function(name, |b| {
        b.iter_batched(
            || build(t, op, size, COUNT, burst),
            drive,
            BatchSize::LargeInput,
        )
    });
    (trav, done.now())
}

/// DMAs per measured run.
const COUNT: u64 = 2000;

fn bench(c: &mut Criterion) {
    eprintln!("bytes per in-flight TLP: {}", bytes_per_inflight_tlp());
    let mut g = c.benchmark_group("timed");
    g.sample_size(10);
    let sw = topo(true, 4, 16);
    let direct = topo(false, 3, 8);
    // The exact model, then burst mode (names end in `_burst16`).
    for burst in [1, BURST] {
        let sfx = if burst == 1 {
            String::new()
        } else {
            format!("_burst{burst}")
        };
        for (name, op, size) in [
            ("gen4x16_via_switch_traversals", DmaOpKind::ReadWrite, 1024),
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
            scenario(&mut g, &format!("{name}{sfx}"), &sw, op, size, burst);
        }
        let name = format!("gen3x8_saturated_traversals{sfx}");
        let (_, sim_t) = scenario(&mut g, &name, &direct, DmaOpKind::Write, 4096, burst);
        // Simulated time over the wall time of the run alone (setup excluded), best of 5.
        let mut wall = f64::MAX;
        for _ in 0..5 {
            let sim = build(&direct, DmaOpKind::Write, 4096, COUNT, burst);
            let t0 = std::time::Instant::now();
            let done = drive(sim);
            wall = wall.min(t0.elapsed().as_secs_f64());
            drop(done);
        }
        eprintln!(
            "gen3x8 saturated (burst {burst}): {:.3} us simulated in {:.3} us wall: sim/wall = {:.2}",
            sim_t.as_ps() as f64 / 1e6,
            wall * 1e6,
            sim_t.as_ps() as f64 * 1e-12 / wall
        );
    }
    g.finish();
    steady_state();
}

/// The same streams run ten times longer (best of 3, printed), in the exact model and
/// in burst mode alternately: the DMA window of host memory (4 MiB) is then reused, so
/// the first-touch page allocations that weigh on the short runs above are amortised,
/// as in any long simulation.
fn steady_state() {
    let sw = topo(true, 4, 16);
    let direct = topo(false, 3, 8);
    let runs: [(&str, &Topology, DmaOpKind, u64); 4] = [
        (
            "gen4x16 via switch, 1 KiB read/write",
            &sw,
            DmaOpKind::ReadWrite,
            1024,
        ),
        (
            "gen4x16 via switch, 4 KiB writes",
            &sw,
            DmaOpKind::Write,
            4096,
        ),
        (
            "gen4x16 via switch, 4 KiB reads",
            &sw,
            DmaOpKind::Read,
            4096,
        ),
        (
            "gen3x8 saturated, 4 KiB writes",
            &direct,
            DmaOpKind::Write,
            4096,
        ),
    ];
    for (name, t, op, size) in runs {
        // [exact, burst]: best traversals/s and simulated/wall time.
        let mut best = [(0f64, 0f64); 2];
        for _ in 0..3 {
            for (k, burst) in [1, BURST].into_iter().enumerate() {
                let sim = build(t, op, size, 10 * COUNT, burst);
                let t0 = std::time::Instant::now();
                let done = drive(sim);
                let wall = t0.elapsed().as_secs_f64();
                best[k].0 = best[k].0.max(done.traversals() as f64 / wall);
                best[k].1 = best[k].1.max(done.now().as_ps() as f64 * 1e-12 / wall);
                drop(done);
            }
        }
        for (k, burst) in [1, BURST].into_iter().enumerate() {
            // Simulated over wall time only means something for the saturated link.
            let rt = if std::ptr::eq(t, &direct) {
                format!(", sim/wall = {:.2}", best[k].1)
            } else {
                String::new()
            };
            eprintln!(
                "steady state ({} DMAs, burst {burst:2}) {name}: {:.2} M traversals/s{rt}",
                10 * COUNT,
                best[k].0 / 1e6
            );
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
