//! Active State Power Management, the way a driver developer would turn it on and
//! watch what it costs:
//!
//! 1. host software walks every link, reads ASPM Support and the exit latencies from
//!    Link Capabilities at both ends (as `lspci -vv` shows them), and enables L1 where
//!    both ends support it, the upstream port first (PCIe Base Spec 5.4.1.3);
//! 2. MMIO reads of a device behind the switch and of one on a root port, after idle
//!    gaps shorter and longer than the 8 µs L1 entry time: each sleeping link on the
//!    path adds its 2 µs exit;
//! 3. the same with L0s enabled too, and the time each link spent asleep.
//!
//! Run: `cargo run -p pcielab-fabric --example aspm`

use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{FabricSim, HostRead, SimConfig};
use pcielab_fabric::topology::Topology;
use pcielab_sim::SimDuration;
use pcielab_wire::Bdf;

/// A switch with three devices below root port 0, one device on root port 1.
const TOPOLOGY: &str = include_str!("../../../examples/topologies/sim-default.toml");

/// Offset of the PCI Express capability of `f`, found as software does.
fn pcie_cap(sim: &mut FabricSim, f: Bdf) -> u16 {
    let mut at = (sim.cfg_read(f, 0x34) & 0xfc) as u16;
    while at != 0 {
        let h = sim.cfg_read(f, at);
        if h & 0xff == 0x10 {
            return at;
        }
        at = ((h >> 8) & 0xfc) as u16;
    }
    panic!("{f} has no PCI Express capability");
}

const L0S_EXIT: [&str; 8] = [
    "<64ns", "<128ns", "<256ns", "<512ns", "<1us", "<2us", "<4us", ">4us",
];
const L1_EXIT: [&str; 8] = [
    "<1us", "<2us", "<4us", "<8us", "<16us", "<32us", "<64us", ">64us",
];

/// Link Capabilities of `f`: (ASPM support bits, L0s exit, L1 exit).
fn link_caps(sim: &mut FabricSim, f: Bdf) -> (u32, &'static str, &'static str) {
    let c = pcie_cap(sim, f);
    let lnkcap = sim.cfg_read(f, c + 0x0c);
    (
        (lnkcap >> 10) & 3,
        L0S_EXIT[((lnkcap >> 12) & 7) as usize],
        L1_EXIT[((lnkcap >> 15) & 7) as usize],
    )
}

/// Writes ASPM Control (Link Control bits 1:0) of `f`.
fn set_aspm(sim: &mut FabricSim, f: Bdf, bits: u32) {
    let c = pcie_cap(sim, f);
    let v = sim.cfg_read(f, c + 0x10);
    sim.cfg_write(f, c + 0x10, (v & !3) | bits);
}

/// Every link as (upstream port, device below it): the functions whose parent is a
/// port, with the port.
fn links(sim: &FabricSim) -> Vec<(Bdf, Bdf)> {
    sim.tree()
        .functions
        .iter()
        .filter(|f| f.port_type.is_some())
        .filter_map(|f| {
            let p = sim.tree().get(f.parent?)?;
            // A device's upstream port sits on the secondary bus of a root or
            // downstream port; switch-internal buses have no link.
            use pcielab_config::caps::PortType::{DownstreamPort, RootPort};
            matches!(p.port_type, Some(RootPort | DownstreamPort)).then_some((p.bdf, f.bdf))
        })
        .collect()
}

fn support(bits: u32) -> &'static str {
    ["none", "L0s", "L1", "L0s L1"][bits as usize]
}

/// Latency in ns of one 4-byte read of `dev`'s BAR 0.
fn read(sim: &mut FabricSim, dev: &str) -> f64 {
    let bar = sim.bar(dev, 0).expect("BAR 0 assigned");
    match sim.mmio_read(bar, 4).expect("routable") {
        HostRead::Done { issued, done, .. } => (done - issued).as_ps() as f64 / 1000.0,
        other => panic!("read failed: {other:?}"),
    }
}

/// Latency in ns of a read of `dev` that follows another one after `gap_ns` of idle
/// (the first read wakes whatever slept before; its last ACKs follow it by about
/// 0.2 µs, so a transmitter idles a little less than the gap).
fn read_after(sim: &mut FabricSim, dev: &str, gap_ns: u64) -> f64 {
    read(sim, dev);
    sim.run_for(SimDuration::from_ns(gap_ns));
    read(sim, dev)
}

fn table(sim: &mut FabricSim, title: &str) {
    println!("\n{title}");
    println!(
        "{:>8} {:>14} {:>14}",
        "idle_us", "mem0_ns (2 links)", "mem3_ns (1 link)"
    );
    for gap in [1_000, 5_000, 7_500, 9_000, 50_000] {
        let a = read_after(sim, "mem0", gap);
        let b = read_after(sim, "mem3", gap);
        println!("{:>8.1} {a:>17.1} {b:>16.1}", gap as f64 / 1000.0);
    }
}

fn main() {
    let reg = KindRegistry::builtin();
    let topo = Topology::parse(TOPOLOGY, "sim-default.toml", &reg).expect("valid topology");
    // The periodic UpdateFC (every 30 µs for each class with finite credits) would
    // restart an awake link's idle time at moments unrelated to the reads; off here so
    // that the idle time is the gap between reads. (It never wakes a sleeping link.)
    let cfg = SimConfig {
        fc_update_period: SimDuration::ZERO,
        ..SimConfig::default()
    };
    let mut sim = FabricSim::new(&topo, &reg, cfg).expect("valid fabric");
    sim.run_for(SimDuration::from_us(2)); // links trained

    println!("1. Links and what their ends support (Link Capabilities)");
    let links = links(&sim);
    for &(port, dev) in &links {
        let (a, a0, a1) = link_caps(&mut sim, port);
        let (b, b0, b1) = link_caps(&mut sim, dev);
        println!(
            "  {port} <-> {dev}: port ASPM {} (L0s {a0}, L1 {a1}), device ASPM {} (L0s {b0}, L1 {b1})",
            support(a),
            support(b)
        );
    }
    table(&mut sim, "2. ASPM disabled (Link Control's reset value)");

    // L1 where both ends support it: upstream port first, then the device.
    for &(port, dev) in &links {
        let both = link_caps(&mut sim, port).0 & link_caps(&mut sim, dev).0;
        if both & 2 != 0 {
            set_aspm(&mut sim, port, 2);
            set_aspm(&mut sim, dev, 2);
        }
    }
    table(
        &mut sim,
        "3. L1 enabled: links idle for 8 µs sleep; each adds 2 µs when woken",
    );
    println!("   (mem0 is behind the switch: both of its links sleep and wake in turn)");

    for &(port, dev) in &links {
        let both = link_caps(&mut sim, port).0 & link_caps(&mut sim, dev).0;
        set_aspm(&mut sim, port, both);
        set_aspm(&mut sim, dev, both);
    }
    table(
        &mut sim,
        "4. L0s and L1 enabled: after 7 µs a transmitter is in L0s (its exit: N_FTS \
         training sequences), after 8 µs the link in L1",
    );
    println!(
        "   (at 7.5 µs every transmitter on the paths is in L0s: mem3 pays two Gen4 exits \
         of 536.25 ns. mem0's request pays the RC's Gen3 exit, 1072.5 ns, then reaches \
         the switch's link to mem0, which by then has idled 8 µs: L1, 2 µs; the \
         switch's ACK of the request woke its own way up before the completion came)"
    );

    println!("\n5. Time asleep per link direction (whole run)");
    println!(
        "{:<12} {:>9} {:>12} {:>9} {:>12}",
        "direction", "L0s", "L0s_us", "L1", "L1_us"
    );
    for (name, c) in sim.counters() {
        println!(
            "{name:<12} {:>9} {:>12.3} {:>9} {:>12.3}",
            c.l0s_entries,
            c.l0s_ps as f64 / 1e6,
            c.l1_entries,
            c.l1_ps as f64 / 1e6
        );
    }
}
