//! A device fails under load and Downstream Port Containment isolates it: two psmem
//! devices behind a switch stream 4 KiB DMA writes; the first one's link fails (a
//! surprise down) while its port has DPC enabled. The example prints the timeline a
//! driver would see (the port's DPC interrupt, the port answering for the lost
//! device, the release, the link's return and the recovery that restores the device,
//! whose stream then finishes) and the neighbour's throughput.
//!
//! `cargo run -p pcielab-fabric --example dpc`

use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{AddrPattern, DmaOpKind, DmaStream, FabricSim, HostRead, SimConfig};
use pcielab_fabric::topology::Topology;
use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::Bdf;

const TOPO: &str = "\
[[node]]\nname = \"rc\"\nkind = \"root-complex\"\n\
[[node]]\nname = \"sw\"\nkind = \"switch\"\nports = 2\n\
[[node]]\nname = \"ep\"\nkind = \"psmem\"\n\
[[node]]\nname = \"ep2\"\nkind = \"psmem\"\n\
[[link]]\nup = \"rc.0\"\ndown = \"sw\"\ngen = 3\nwidth = 8\n\
[[link]]\nup = \"sw.0\"\ndown = \"ep\"\ngen = 3\nwidth = 8\n\
[[link]]\nup = \"sw.1\"\ndown = \"ep2\"\ngen = 3\nwidth = 8\n";

const DMAS: u64 = 4000;

fn ns(t: SimTime) -> f64 {
    t.as_ps() as f64 / 1000.0
}

/// The offset of extended capability `id` of `f`, walked with configuration reads.
fn ext_cap(sim: &mut FabricSim, f: Bdf, id: u32) -> u16 {
    let mut at = 0x100u16;
    loop {
        let h = sim.cfg_read(f, at);
        if h & 0xffff == id {
            return at;
        }
        at = (h >> 20) as u16;
        assert!(at != 0, "no capability {id:#x} in {f}");
    }
}

fn build(fail: bool) -> (FabricSim, f64) {
    let reg = KindRegistry::builtin();
    let topo = Topology::parse(TOPO, "dpc.toml", &reg).expect("topology");
    let cfg = SimConfig {
        dma_tags: 128,
        ..SimConfig::default()
    };
    let mut sim = FabricSim::new(&topo, &reg, cfg).expect("simulation");
    for name in ["ep", "ep2"] {
        let base = sim.alloc_dma(1 << 22);
        let s = DmaStream::new(
            DmaOpKind::Write,
            4096,
            16,
            DMAS,
            base,
            1 << 22,
            AddrPattern::Sequential,
        );
        sim.attach(name, Box::new(s)).expect("attach");
    }
    let ep = sim.bdf("ep").expect("ep");
    let dsp = sim.tree().get(ep).and_then(|n| n.parent).expect("port");
    let dpc = ext_cap(&mut sim, dsp, 0x1d);
    // DPC: trigger on ERR_FATAL, interrupt (the port's MSI), Unsupported Request for
    // contained requests.
    sim.cfg_write(dsp, dpc + 4, (0x0001 | 0x0004 | 0x0008) << 16);
    let bar = sim.bar("ep", 0).expect("bar");
    // What the driver saved at probe time, to restore after a reset.
    let saved = sim.save_below("ep").expect("save");
    sim.run_for(SimDuration::from_us(100));
    let mut ep2_alone_from = None;
    if fail {
        let irqs = sim.interrupts().len();
        let t_fail = sim.now();
        sim.link_down("ep").expect("link down");
        ep2_alone_from = Some(t_fail);
        let ev = sim.dpc_events()[0];
        // The driver's DPC interrupt handler runs when the port's MSI arrives.
        let limit = sim.now() + SimDuration::from_us(100);
        while sim.interrupts().len() == irqs && sim.now() < limit {
            sim.run_for(SimDuration::from_ns(10));
        }
        let t_irq = sim
            .interrupts()
            .get(irqs)
            .map(|i| i.0)
            .expect("the port's DPC MSI");
        let (sta, src) = {
            let v = sim.cfg_read(dsp, dpc + 8);
            (v & 0xffff, v >> 16)
        };
        let before = sim.now();
        let r = sim.mmio_read(bar, 4).expect("mmio");
        let answered = sim.now();
        println!("surprise down of ep at {:.1} ns", ns(t_fail));
        println!(
            "  DPC of {} triggered at {:.1} ns: {:?}, DPC Status {sta:#06x}, Error Source {src:#06x}",
            ev.port,
            ns(ev.at),
            ev.reason
        );
        println!(
            "  its MSI reached the host after {:.1} ns",
            ns(t_irq) - ns(t_fail)
        );
        let st = match r {
            HostRead::Failed(s) => format!("{s:?}"),
            r => format!("{r:?}"),
        };
        println!(
            "  an MMIO read of the lost device: {st} from the port after {:.1} ns",
            ns(answered) - ns(before)
        );
        // The device comes back (say it was reseated) 10 µs later: DPC still holds the
        // link disabled. The driver releases the port after its recovery, 200 µs on.
        sim.run_for(SimDuration::from_us(10));
        sim.link_up("ep").expect("link up");
        sim.run_for(SimDuration::from_us(190));
        let t_rel = sim.now();
        sim.cfg_write(dsp, dpc + 8, 0x9);
        // Recovery: wait for the link, then the spec's 100 ms, then restore.
        let rec = sim.recover("ep", &saved).expect("recovery");
        println!(
            "  released at {:.1} µs; the link was up again {:.1} µs later (training {} µs)",
            ns(t_rel) / 1000.0,
            (ns(rec.link_up_at) - ns(t_rel)) / 1000.0,
            SimConfig::default().link_training_time.as_ps() / 1_000_000
        );
        println!(
            "  restored 100 ms later with {} configuration writes ({} failed) in {:.1} µs",
            rec.writes,
            rec.failed_writes,
            (ns(rec.restored_at) - ns(rec.restore_started_at)) / 1000.0
        );
    }
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    let r = sim.model("ep2").and_then(|m| m.report()).expect("report");
    let gbps = r["gbps"].as_f64().unwrap_or(0.0);
    if let Some(t) = ep2_alone_from {
        let r1 = sim.model("ep").and_then(|m| m.report()).expect("report");
        println!(
            "ep: {} DMAs done, {} of them lost in the failure (from {:.1} µs on it was gone; \
             it resumed at {:.3} ms)",
            r1["dmas"],
            r1["failed"],
            ns(t) / 1000.0,
            r1["resumed_at_ns"].as_f64().unwrap_or(0.0) / 1e6
        );
        println!("ep2: {} DMAs, {} failed", r["dmas"], r["failed"]);
    }
    (sim, gbps)
}

fn main() {
    let (_, both) = build(false);
    let (_, with_failure) = build(true);
    println!(
        "ep2's DMA write throughput: {both:.1} Gb/s sharing the switch's uplink with ep, \
         {with_failure:.1} Gb/s in the run where ep fails (it then has the uplink alone)"
    );
}
