//! Hot-plug slots: surprise removal and insertion, Slot Status, the hot-plug
//! interrupt, and what the real `lspci` reads from the slot.

use crate::common::{caps, hand_timing, lspci_vvv, parent};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{FabricSim, SimConfig};
use pcielab_fabric::topology::Topology;
use pcielab_sim::SimDuration;
use pcielab_wire::Bdf;

const PDC: u32 = 1 << 3;
const PDS: u32 = 1 << 6;
const DLLSC: u32 = 1 << 8;
const SURPRISE_DOWN: u32 = 1 << 5;

fn sim(hotplug: bool) -> FabricSim {
    let text = format!(
        "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\nhotplug={hotplug}\n\
         [[node]]\nname=\"sw\"\nkind=\"switch\"\nports=2\nhotplug={hotplug}\n\
         [[node]]\nname=\"ep\"\nkind=\"psmem\"\n\
         [[node]]\nname=\"ep2\"\nkind=\"psmem\"\n\
         [[link]]\nup=\"rc.0\"\ndown=\"sw\"\ngen=3\nwidth=4\n\
         [[link]]\nup=\"sw.0\"\ndown=\"ep\"\ngen=3\nwidth=4\n\
         [[link]]\nup=\"sw.1\"\ndown=\"ep2\"\ngen=3\nwidth=4\n"
    );
    let topo = Topology::parse(&text, "hp.toml", &KindRegistry::builtin()).unwrap();
    let cfg = SimConfig {
        link_training_time: SimDuration::from_us(20),
        ..hand_timing(false)
    };
    let mut s = FabricSim::new(&topo, &KindRegistry::builtin(), cfg).unwrap();
    s.run_for(SimDuration::from_us(5));
    s
}

/// (Slot Control, Slot Status) of port `p`.
fn slot(s: &mut FabricSim, p: Bdf) -> (u32, u32) {
    let (at, _) = caps(s, p);
    let v = s.cfg_read(p, at + 0x18);
    (v & 0xffff, v >> 16)
}

/// Enables the hot-plug interrupt for presence and data-link-layer changes.
fn enable_hotplug_irq(s: &mut FabricSim, p: Bdf) {
    let (at, _) = caps(s, p);
    let v = s.cfg_read(p, at + 0x18) & 0xffff;
    s.cfg_write(p, at + 0x18, v | (1 << 3) | (1 << 5) | (1 << 12));
}

/// Clears Slot Status change bits `bits` (write 1 to clear).
fn clear_slot(s: &mut FabricSim, p: Bdf, bits: u32) {
    let (at, _) = caps(s, p);
    let v = s.cfg_read(p, at + 0x18) & 0xffff;
    s.cfg_write(p, at + 0x18, v | bits << 16);
}

fn uncorrectable(s: &mut FabricSim, f: Bdf) -> u32 {
    let (_, a) = caps(s, f);
    s.cfg_read(f, a + 4)
}

#[test]
fn surprise_removal_and_insertion_raise_the_slot_s_interrupts() {
    let mut s = sim(true);
    let ep = s.bdf("ep").unwrap();
    let dsp = parent(&s, ep);
    enable_hotplug_irq(&mut s, dsp);
    assert_eq!(
        slot(&mut s, dsp).1 & (PDS | PDC | DLLSC),
        PDS,
        "present, nothing changed"
    );
    let irqs = s.interrupts().len();
    s.unplug("ep").unwrap();
    s.run_for(SimDuration::from_us(5));
    assert_eq!(slot(&mut s, dsp).1 & (PDS | PDC | DLLSC), PDC | DLLSC);
    assert_eq!(s.interrupts().len(), irqs + 1, "one MSI for the removal");
    assert!(!s.link_active("ep").unwrap());
    assert_eq!(
        uncorrectable(&mut s, dsp) & SURPRISE_DOWN,
        0,
        "expected removal: no error"
    );
    // The driver acknowledges; the slot stays empty, whatever the training time.
    clear_slot(&mut s, dsp, PDC | DLLSC);
    s.run_for(SimDuration::from_us(100));
    assert!(!s.link_active("ep").unwrap());
    assert_eq!(s.interrupts().len(), irqs + 1);
    // Insertion: presence at once (an MSI), the link after training (another MSI once
    // the driver acknowledged the first).
    s.plug("ep").unwrap();
    s.run_for(SimDuration::from_us(1));
    assert_eq!(slot(&mut s, dsp).1 & (PDS | PDC | DLLSC), PDS | PDC);
    assert_eq!(s.interrupts().len(), irqs + 2);
    clear_slot(&mut s, dsp, PDC);
    s.run_for(SimDuration::from_us(25));
    assert!(s.link_active("ep").unwrap());
    assert_eq!(slot(&mut s, dsp).1 & (PDS | PDC | DLLSC), PDS | DLLSC);
    assert_eq!(s.interrupts().len(), irqs + 3);
    // link_up does not bring back a device that is not there.
    s.unplug("ep").unwrap();
    s.link_up("ep").unwrap();
    s.run_for(SimDuration::from_us(50));
    assert!(!s.link_active("ep").unwrap());
}

#[test]
fn a_removal_from_a_port_without_hot_plug_is_a_surprise_down_error() {
    let mut s = sim(false);
    let ep = s.bdf("ep").unwrap();
    let dsp = parent(&s, ep);
    s.unplug("ep").unwrap();
    assert_eq!(uncorrectable(&mut s, dsp) & SURPRISE_DOWN, SURPRISE_DOWN);
    // Presence is still reported (the slot's bits exist), the change latched.
    assert_eq!(slot(&mut s, dsp).1 & (PDS | PDC), PDC);
}

#[test]
fn lspci_reads_the_hot_plug_slot() {
    let mut s = sim(true);
    let ep = s.bdf("ep").unwrap();
    let dsp = parent(&s, ep);
    s.unplug("ep").unwrap();
    s.run_for(SimDuration::from_us(2));
    let text = lspci_vvv(&s, dsp, "hp");
    for want in [
        "HotPlug+ Surprise+",
        "PresDet-",
        "Changed: MRL- PresDet+ LinkState+",
    ] {
        assert!(text.contains(want), "want {want:?} in\n{text}");
    }
}
