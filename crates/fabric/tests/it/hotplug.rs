//! Hot-plug slots: surprise removal and insertion, orderly removal through the
//! attention button and the power controller, Slot Status, the hot-plug interrupt, and
//! what the real `lspci` reads from the slot.

use crate::common::{caps, check_write_slots, hand_timing, lspci_vvv, parent, write_stream};
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
    sim_with(&format!("hotplug={hotplug}"))
}

/// The switch tree with `slots` (a node key) on the root complex and the switch.
fn sim_with(slots: &str) -> FabricSim {
    let text = format!(
        "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n{slots}\n\
         [[node]]\nname=\"sw\"\nkind=\"switch\"\nports=2\n{slots}\n\
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

const ABP: u32 = 1 << 0;
const PCC: u32 = 1 << 10;
/// Slot Control's power indicator field (bits 9:8): On, Blink, Off.
const PWR_ON: u32 = 1 << 8;
const PWR_BLINK: u32 = 2 << 8;
const PWR_OFF: u32 = 3 << 8;

/// Writes Slot Control of `p` (Slot Status written as 0: nothing cleared).
fn slot_control(s: &mut FabricSim, p: Bdf, f: impl Fn(u32) -> u32) {
    let (at, _) = caps(s, p);
    let v = s.cfg_read(p, at + 0x18) & 0xffff;
    s.cfg_write(p, at + 0x18, f(v));
}

#[test]
fn orderly_removal_through_the_attention_button_and_the_power_controller() {
    let count = 300;
    let mut s = sim_with("hotplug_power=true");
    let base = s.alloc_dma(count * 4096);
    s.attach("ep", write_stream(base, count)).unwrap();
    let ep = s.bdf("ep").unwrap();
    let dsp = parent(&s, ep);
    let saved = s.save_below("ep").unwrap();
    let (ctl, _) = slot(&mut s, dsp);
    assert_eq!(ctl & (PCC | PWR_OFF), PWR_ON, "powered, power indicator on");
    // The driver enables the button, presence and link events and the interrupt.
    slot_control(&mut s, dsp, |v| v | 1 | (1 << 3) | (1 << 5) | (1 << 12));
    s.run_for(SimDuration::from_us(20));
    let irqs = s.interrupts().len();
    s.press_attention_button("ep").unwrap();
    s.run_for(SimDuration::from_us(2));
    assert_ne!(slot(&mut s, dsp).1 & ABP, 0);
    assert_eq!(s.interrupts().len(), irqs + 1, "the button's MSI");
    // Acknowledge, blink (the user's 5 s to change their mind, shortened), power off.
    clear_slot(&mut s, dsp, ABP);
    slot_control(&mut s, dsp, |v| (v & !PWR_OFF) | PWR_BLINK);
    s.run_for(SimDuration::from_us(10));
    assert!(
        s.link_active("ep").unwrap(),
        "still running while the light blinks"
    );
    slot_control(&mut s, dsp, |v| v | PCC | PWR_OFF);
    assert!(!s.link_active("ep").unwrap(), "powered off");
    s.run_for(SimDuration::from_us(2));
    assert_eq!(slot(&mut s, dsp).1 & DLLSC, DLLSC);
    assert_eq!(s.interrupts().len(), irqs + 2, "the link change's MSI");
    assert_eq!(s.cfg_read(ep, 0x10) & !0xf, 0, "the device lost its state");
    clear_slot(&mut s, dsp, DLLSC);
    // Removed and put back while the slot is off: presence changes, the link stays
    // down, and nothing is an error.
    s.unplug("ep").unwrap();
    s.plug("ep").unwrap();
    s.run_for(SimDuration::from_us(100));
    assert_eq!(slot(&mut s, dsp).1 & (PDS | PDC), PDS | PDC);
    assert!(!s.link_active("ep").unwrap(), "no power, no link");
    assert_eq!(uncorrectable(&mut s, dsp) & SURPRISE_DOWN, 0);
    clear_slot(&mut s, dsp, PDC);
    // Power on: the link trains, the driver configures the device, DMA resumes.
    let t = s.now();
    slot_control(&mut s, dsp, |v| (v & !(PCC | PWR_OFF)) | PWR_ON);
    let r = s.recover("ep", &saved).unwrap();
    assert!(r.link_up_at >= t + SimDuration::from_us(20), "{r:?}");
    assert!(r.link_up_at < t + SimDuration::from_us(21), "{r:?}");
    assert_eq!(r.failed_writes, 0, "{r:?}");
    s.run_until_idle(pcielab_sim::SimTime::from_ps(u64::MAX / 2));
    let rep = s.model("ep").unwrap().report().unwrap();
    assert_eq!(rep["dmas"], count, "{rep}");
    let failed = rep["failed"].as_u64().unwrap();
    assert!(
        (1..=8).contains(&failed),
        "the window in flight at power-off: {rep}"
    );
    // Every DMA after power-on landed.
    check_write_slots(&s, base, 150..count);
    assert_eq!(uncorrectable(&mut s, dsp) & SURPRISE_DOWN, 0);
    // A surprise slot has no button.
    let mut s = sim(true);
    let e = s.press_attention_button("ep").unwrap_err().to_string();
    assert!(e.contains("no attention button"), "{e}");
}

#[test]
fn a_surprise_removal_from_a_powered_orderly_slot_is_an_error() {
    let mut s = sim_with("hotplug_power=true");
    let dsp = parent(&s, s.bdf("ep").unwrap());
    s.unplug("ep").unwrap();
    assert_eq!(uncorrectable(&mut s, dsp) & SURPRISE_DOWN, SURPRISE_DOWN);
}

#[test]
fn lspci_reads_the_orderly_hot_plug_slot_as_our_decoder_does() {
    let mut s = sim_with("hotplug_power=true");
    let ep = s.bdf("ep").unwrap();
    let dsp = parent(&s, ep);
    s.press_attention_button("ep").unwrap();
    slot_control(&mut s, dsp, |v| v | 1 | (1 << 5) | PCC | PWR_OFF);
    s.run_for(SimDuration::from_us(2));
    let text = lspci_vvv(&s, dsp, "hp-power");
    let f = s.fabric().function_at(dsp).unwrap();
    let ours = pcielab_config::decode::describe(s.fabric().functions[f.0 as usize].config.bytes());
    for want in [
        "SltCap: AttnBtn+ PwrCtrl+ MRL- AttnInd+ PwrInd+ HotPlug+ Surprise-",
        "Slot #",
        "Interlock- NoCompl+",
        "SltCtl: Enable: AttnBtn+ PwrFlt- MRL- PresDet- CmdCplt- HPIrq+ LinkChg-",
        "Control: AttnInd Off, PwrInd Off, Power+ Interlock-",
        "SltSta: Status: AttnBtn+ PowerFlt- MRL- CmdCplt- PresDet+ Interlock-",
        "Changed: MRL- PresDet- LinkState+",
    ] {
        let norm = |t: &str| t.replace(":\t", ": ");
        assert!(
            norm(&text).contains(want),
            "lspci: want {want:?} in\n{text}"
        );
        assert!(ours.contains(want), "ours: want {want:?} in\n{ours}");
    }
}
