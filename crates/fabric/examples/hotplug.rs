//! Orderly hot-plug, as Linux's pciehp drives it: two psmem devices behind a switch
//! whose downstream ports are slots with an attention button and a power controller
//! (`hotplug_power = true`) stream 4 KiB DMA writes. The user presses the first slot's
//! button; the driver blinks the power indicator, powers the slot off, the card is
//! swapped, the driver powers the slot on, waits for the link and restores the device,
//! whose stream then finishes. The example prints the timeline with the slot's
//! registers as lspci decodes them, and what each device lost.
//!
//! `cargo run -p pcielab-fabric --example hotplug`

use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{AddrPattern, DmaOpKind, DmaStream, FabricSim, SimConfig};
use pcielab_fabric::topology::Topology;
use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::Bdf;

const TOPO: &str = "\
[[node]]\nname = \"rc\"\nkind = \"root-complex\"\n\
[[node]]\nname = \"sw\"\nkind = \"switch\"\nports = 2\nhotplug_power = true\n\
[[node]]\nname = \"ep\"\nkind = \"psmem\"\n\
[[node]]\nname = \"ep2\"\nkind = \"psmem\"\n\
[[link]]\nup = \"rc.0\"\ndown = \"sw\"\ngen = 3\nwidth = 8\n\
[[link]]\nup = \"sw.0\"\ndown = \"ep\"\ngen = 3\nwidth = 8\n\
[[link]]\nup = \"sw.1\"\ndown = \"ep2\"\ngen = 3\nwidth = 8\n";

const DMAS: u64 = 2000;
/// Slot Control: Attention Button Pressed Enable, Presence Detect Changed Enable,
/// Hot-Plug Interrupt Enable, Data Link Layer State Changed Enable.
const ENABLES: u32 = 1 | (1 << 3) | (1 << 5) | (1 << 12);
/// Slot Control: Power Controller Control (1: off) and the power indicator field.
const POWER_OFF: u32 = 1 << 10;
const PWR_IND: u32 = 3 << 8;
const PWR_ON: u32 = 1 << 8;
const PWR_BLINK: u32 = 2 << 8;

fn us(t: SimTime) -> f64 {
    t.as_ps() as f64 / 1e6
}

/// The PCI Express capability of `f`, walked with configuration reads.
fn pcie_cap(sim: &mut FabricSim, f: Bdf) -> u16 {
    let mut at = (sim.cfg_read(f, 0x34) & 0xfc) as u16;
    while sim.cfg_read(f, at) & 0xff != 0x10 {
        at = ((sim.cfg_read(f, at) >> 8) & 0xfc) as u16;
        assert!(at != 0, "no PCI Express capability in {f}");
    }
    at
}

/// The driver writes Slot Control (`f` of its current value); Slot Status bits in
/// `clear` are written 1 (cleared).
fn slot_write(sim: &mut FabricSim, port: Bdf, clear: u32, f: impl Fn(u32) -> u32) {
    let at = pcie_cap(sim, port) + 0x18;
    let ctl = sim.cfg_read(port, at) & 0xffff;
    sim.cfg_write(port, at, f(ctl) | clear << 16);
}

/// The port's slot lines as lspci prints them.
fn slot_lines(sim: &FabricSim, port: Bdf) -> String {
    let f = sim.fabric().function_at(port).expect("port");
    let text =
        pcielab_config::decode::describe(sim.fabric().functions[f.0 as usize].config.bytes());
    let mut out = String::new();
    let mut inside = false;
    for l in text.lines() {
        inside = l.starts_with("\tSlt") || (inside && l.starts_with("\t\t"));
        if inside && (l.contains("SltSta") || l.contains("Changed") || l.contains("Control:")) {
            out.push_str(&format!("      {}\n", l.trim()));
        }
    }
    out
}

/// Runs until the host has received `n` interrupts; returns when the last arrived.
fn wait_irqs(sim: &mut FabricSim, n: usize) -> SimTime {
    let limit = sim.now() + SimDuration::from_ms(1);
    while sim.interrupts().len() < n && sim.now() < limit {
        sim.run_for(SimDuration::from_ns(10));
    }
    sim.interrupts().get(n - 1).expect("the slot's MSI").0
}

fn main() {
    let reg = KindRegistry::builtin();
    let topo = Topology::parse(TOPO, "hotplug.toml", &reg).expect("topology");
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
    let port = sim.tree().get(ep).and_then(|n| n.parent).expect("port");
    // pciehp at probe time: events and the interrupt on; the driver saves the device.
    slot_write(&mut sim, port, 0, |c| c | ENABLES);
    let saved = sim.save_below("ep").expect("save");
    sim.run_for(SimDuration::from_us(100));

    let irqs = sim.interrupts().len();
    let t_button = sim.now();
    sim.press_attention_button("ep").expect("button");
    let t_irq = wait_irqs(&mut sim, irqs + 1);
    println!("{:9.3} µs  attention button pressed", us(t_button));
    println!(
        "{:9.3} µs  its MSI reaches the host {:.1} ns later, behind the DMA writes queued \
         ahead of it (posted writes stay in order)\n{}",
        us(t_irq),
        (t_irq.as_ps() - t_button.as_ps()) as f64 / 1000.0,
        slot_lines(&sim, port)
    );
    // The driver acknowledges and blinks the power indicator; pciehp then gives the
    // user 5 s to change their mind (shortened to 50 µs here).
    slot_write(&mut sim, port, 1, |c| (c & !PWR_IND) | PWR_BLINK);
    sim.run_for(SimDuration::from_us(50));
    slot_write(&mut sim, port, 0, |c| c | POWER_OFF | PWR_IND);
    let t_off = sim.now();
    let t_dll = wait_irqs(&mut sim, irqs + 2);
    println!(
        "{:9.3} µs  slot powered off: the link is down at once, its Data Link Layer \
         State Changed MSI arrives {:.1} ns later\n{}",
        us(t_off),
        (t_dll.as_ps() - t_off.as_ps()) as f64 / 1000.0,
        slot_lines(&sim, port)
    );
    slot_write(&mut sim, port, 1 << 8, |c| c);
    // The card is swapped 20 µs later.
    sim.run_for(SimDuration::from_us(20));
    sim.unplug("ep").expect("unplug");
    sim.plug("ep").expect("plug");
    sim.run_for(SimDuration::from_us(1));
    println!(
        "{:9.3} µs  card swapped: presence changed, no link while the slot is off\n{}",
        us(sim.now()),
        slot_lines(&sim, port)
    );
    slot_write(&mut sim, port, 1 << 3, |c| {
        (c & !(POWER_OFF | PWR_IND)) | PWR_ON
    });
    let t_on = sim.now();
    let rec = sim.recover("ep", &saved).expect("recovery");
    println!(
        "{:9.3} µs  slot powered on; the link is up {:.3} µs later (training {} µs)",
        us(t_on),
        us(rec.link_up_at) - us(t_on),
        SimConfig::default().link_training_time.as_ps() / 1_000_000
    );
    println!(
        "{:9.3} µs  after the spec's 100 ms, {} configuration writes ({} failed) restore \
         the device in {:.1} µs",
        us(rec.restore_started_at),
        rec.writes,
        rec.failed_writes,
        us(rec.restored_at) - us(rec.restore_started_at)
    );
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    for name in ["ep", "ep2"] {
        let r = sim.model(name).and_then(|m| m.report()).expect("report");
        let resumed = r["resumed_at_ns"]
            .as_f64()
            .map_or(String::new(), |t| format!(", resumed at {:.3} ms", t / 1e6));
        println!(
            "{name}: {} DMAs done, {} lost{resumed}",
            r["dmas"], r["failed"]
        );
    }
    assert!(sim.errors().iter().all(|e| !e.message.contains("Surprise")));
}
