//! Runs the simulator-speed scenarios once each and prints events, traversals and
//! rates (a quick companion to `cargo bench -p pcielab-fabric --bench sim`, handy
//! under a profiler: `cargo run --release -p pcielab-fabric --example sim_speed`).

use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{AddrPattern, DmaOpKind, DmaStream, FabricSim, SimConfig};
use pcielab_fabric::topology::Topology;
use pcielab_sim::SimTime;
use std::time::Instant;

fn topo(switch: bool, gen: u8, width: u8) -> Topology {
    let mut s = String::from(
        "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n[[node]]\nname=\"ep\"\nkind=\"psmem\"\n",
    );
    if switch {
        s += &format!(
            "[[node]]\nname=\"sw\"\nkind=\"switch\"\nports=1\n\
             [[link]]\nup=\"rc.0\"\ndown=\"sw\"\ngen={gen}\nwidth={width}\n\
             [[link]]\nup=\"sw.0\"\ndown=\"ep\"\ngen={gen}\nwidth={width}\n"
        );
    } else {
        s += &format!("[[link]]\nup=\"rc.0\"\ndown=\"ep\"\ngen={gen}\nwidth={width}\n");
    }
    Topology::parse(&s, "sim_speed.toml", &KindRegistry::builtin()).expect("topology")
}

fn run(name: &str, t: &Topology, op: DmaOpKind, size: u64, count: u64, reps: u32) {
    if let Some(only) = std::env::args().nth(2) {
        if !name.contains(&only) {
            return;
        }
    }
    let mut best = f64::MAX;
    let mut out = (0, 0, SimTime::ZERO);
    for _ in 0..reps {
        let cfg = SimConfig {
            dma_tags: 256,
            ..SimConfig::default()
        };
        let t0 = Instant::now();
        let mut sim = FabricSim::new(t, &KindRegistry::builtin(), cfg).expect("sim");
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
        .expect("attach");
        sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
        best = best.min(t0.elapsed().as_secs_f64());
        out = (sim.events(), sim.traversals(), sim.now());
    }
    let (ev, trav, now) = out;
    println!(
        "{name}: {ev} events, {trav} traversals ({:.2} events/traversal), {:.3} ms wall: \
         {:.2} M traversals/s, {:.1} M events/s, sim/wall {:.3}",
        ev as f64 / trav as f64,
        best * 1e3,
        trav as f64 / best / 1e6,
        ev as f64 / best / 1e6,
        now.as_ps() as f64 * 1e-12 / best
    );
}

fn main() {
    let reps = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    run(
        "gen4x16 via switch, read/write 1 KiB",
        &topo(true, 4, 16),
        DmaOpKind::ReadWrite,
        1024,
        2000,
        reps,
    );
    run(
        "gen3x8 one link, write 4 KiB",
        &topo(false, 3, 8),
        DmaOpKind::Write,
        4096,
        2000,
        reps,
    );
    run(
        "setup only (gen3x8, one 4 KiB write)",
        &topo(false, 3, 8),
        DmaOpKind::Write,
        4096,
        1,
        reps,
    );
}
