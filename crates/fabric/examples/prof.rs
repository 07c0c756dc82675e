use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{AddrPattern, DmaOpKind, DmaStream, FabricSim, SimConfig};
use pcielab_fabric::topology::Topology;
use pcielab_sim::SimTime;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let (sw, gen, width, op, size) = match a[1].as_str() {
        "w4k" => (true, 4, 16, DmaOpKind::Write, 4096),
        "r4k" => (true, 4, 16, DmaOpKind::Read, 4096),
        "rw1k" => (true, 4, 16, DmaOpKind::ReadWrite, 1024),
        _ => (false, 3, 8, DmaOpKind::Write, 4096),
    };
    let s = if sw {
        format!("[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n[[node]]\nname=\"sw\"\nkind=\"switch\"\nports=1\n[[node]]\nname=\"ep\"\nkind=\"psmem\"\n[[link]]\nup=\"rc.0\"\ndown=\"sw\"\ngen={gen}\nwidth={width}\n[[link]]\nup=\"sw.0\"\ndown=\"ep\"\ngen={gen}\nwidth={width}\n")
    } else {
        format!("[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n[[node]]\nname=\"ep\"\nkind=\"psmem\"\n[[link]]\nup=\"rc.0\"\ndown=\"ep\"\ngen={gen}\nwidth={width}\n")
    };
    let t = Topology::parse(&s, "b.toml", &KindRegistry::builtin()).unwrap();
    let reps: usize = a.get(2).and_then(|x| x.parse().ok()).unwrap_or(1);
    let count: u64 = a.get(3).and_then(|x| x.parse().ok()).unwrap_or(2000);
    for _ in 0..reps {
        let mut sim = FabricSim::new(
            &t,
            &KindRegistry::builtin(),
            SimConfig {
                dma_tags: 256,
                ..SimConfig::default()
            },
        )
        .unwrap();
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
        let t0 = std::time::Instant::now();
        sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
        let w = t0.elapsed().as_secs_f64();
        println!(
            "{} trav {} ev {:.2} M/s",
            sim.traversals(),
            sim.events(),
            sim.traversals() as f64 / w / 1e6
        );
    }
}
