//! Wake-up events (PME), end to end, the way a driver developer would watch them:
//!
//! 1. host software sets PME_En in two devices' PMCSR and PME Interrupt Enable in the
//!    root port's Root Control (as Linux's PCIe PME service driver does);
//! 2. both devices signal a PME (a "wake on LAN" packet, say); each sends a PM_PME
//!    message up through the switch;
//! 3. the root port records the first requester in Root Status and raises its MSI; the
//!    second waits (PME Pending);
//! 4. the "PME driver" reads the requester ID, clears the device's PME_Status and the
//!    port's PME Status, which delivers the second PME and a second MSI;
//! 5. a device whose PME_Status software forgets to clear re-sends PM_PME every PME
//!    service timeout (100 ms);
//! 6. before removing power, the root port sends PME_Turn_Off: the switch copies it
//!    to both devices and answers with one PME_TO_Ack once both have answered.
//!
//! Run: `cargo run -p pcielab-fabric --example pme`

use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{Endpoint, EpCx, FabricSim, SimConfig};
use pcielab_fabric::topology::Topology;
use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::Bdf;

/// Two wake-capable devices (psmem with `pme = true`) below a switch.
const TOPOLOGY: &str = include_str!("../../../examples/topologies/wake.toml");

/// A device that wakes the host `after` it is attached.
#[derive(Debug)]
struct WakeOnLan {
    after: SimDuration,
}

impl Endpoint for WakeOnLan {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        cx.timer(self.after, 0);
    }
    fn timer(&mut self, _token: u64, cx: &mut EpCx<'_>) {
        cx.pme();
    }
}

/// Offset of capability `id` of `f`, found as software does.
fn cap(sim: &mut FabricSim, f: Bdf, id: u32) -> u16 {
    let mut at = (sim.cfg_read(f, 0x34) & 0xfc) as u16;
    while at != 0 {
        let h = sim.cfg_read(f, at);
        if h & 0xff == id {
            return at;
        }
        at = ((h >> 8) & 0xfc) as u16;
    }
    panic!("{f} has no capability {id:#x}");
}

fn main() {
    let reg = KindRegistry::builtin();
    let topo = Topology::parse(TOPOLOGY, "wake.toml", &reg).expect("valid topology");
    let mut sim = FabricSim::new(&topo, &reg, SimConfig::default()).expect("valid fabric");
    let rp = Bdf::new(0, 1, 0).expect("root port");
    let nics = [sim.bdf("nic").expect("nic"), sim.bdf("nic2").expect("nic2")];

    // 1. Software enables PME in the devices and the root port's PME interrupt.
    for &n in &nics {
        let pm = cap(&mut sim, n, 0x01);
        sim.cfg_write(n, pm + 4, 1 << 8);
    }
    let pcie = cap(&mut sim, rp, 0x10);
    sim.cfg_write(rp, pcie + 0x1c, 1 << 3);
    println!(
        "PME_En set in {} and {}; PME Interrupt Enable set in {rp}",
        nics[0], nics[1]
    );

    // 2. Both devices wake the host, 1 µs apart.
    for (name, us) in [("nic", 1), ("nic2", 2)] {
        let after = SimDuration::from_us(us);
        sim.attach(name, Box::new(WakeOnLan { after }))
            .expect("attached");
    }
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    for (t, m) in sim.pme_messages() {
        println!(
            "{:>9.3} us  PM_PME from {} reaches root port {}",
            t.as_ps() as f64 / 1e6,
            m.requester,
            m.root_port
        );
    }
    assert_eq!(sim.pme_messages().len(), 2);

    // 3. and 4. The PME driver services the port until nothing is pending.
    let msis = |sim: &FabricSim| {
        sim.interrupts()
            .iter()
            .filter(|(_, i)| i.from == rp)
            .count()
    };
    let mut served = Vec::new();
    loop {
        let st = sim.cfg_read(rp, pcie + 0x20);
        if st & 1 << 16 == 0 {
            break;
        }
        let who = Bdf::from_raw((st & 0xffff) as u16);
        println!(
            "interrupts so far: {}; Root Status {st:#010x}: PME from {who}{}",
            msis(&sim),
            if st & 1 << 17 != 0 {
                ", another pending"
            } else {
                ""
            }
        );
        // Clear the device's PME_Status (RW1C, PME_En kept), then the port's.
        let pm = cap(&mut sim, who, 0x01);
        sim.cfg_write(who, pm + 4, 1 << 15 | 1 << 8);
        sim.cfg_write(rp, pcie + 0x20, 1 << 16);
        served.push(who);
    }
    assert_eq!(served, nics, "both served, in arrival order");
    assert_eq!(msis(&sim), 2, "one MSI per delivered PME");

    // 5. nic wakes the host again, but nobody clears its PME_Status this time.
    sim.attach(
        "nic",
        Box::new(WakeOnLan {
            after: SimDuration::from_us(1),
        }),
    )
    .expect("attached");
    let before = sim.pme_messages().len();
    sim.run_for(SimDuration::from_ms(250));
    let again: Vec<f64> = sim.pme_messages()[before..]
        .iter()
        .map(|(t, _)| t.as_ps() as f64 / 1e9)
        .collect();
    println!("unserviced PME of {}: PM_PME at {again:.3?} ms", nics[0]);
    assert_eq!(again.len(), 3, "sent, then re-sent at 100 ms and 200 ms");

    // 6. The system suspends: PME_Turn_Off, answered (gathered by the switch) by one
    // PME_TO_Ack from the switch's upstream port.
    let took = sim
        .pme_turn_off(rp, SimDuration::from_ms(10))
        .expect("a root port")
        .expect("acknowledged within 10 ms");
    let (_, ack) = sim.pme_to_acks()[0];
    println!(
        "PME_Turn_Off from {rp}: PME_TO_Ack from {} after {:.0} ns",
        ack.requester,
        took.as_ps() as f64 / 1e3
    );
    assert_eq!(ack.requester, sim.bdf("sw").expect("switch"));
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
}
