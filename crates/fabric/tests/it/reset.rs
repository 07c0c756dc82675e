//! Resets host software asks for through a port: Secondary Bus Reset (Bridge Control
//! bit 6, a hot reset of the link and everything below; at a switch upstream port, of
//! the switch's downstream ports and everything below them) and Link Disable (Link
//! Control bit 4). The link is down while the bit is set, trains once it is cleared, nothing
//! logs a Surprise Down, and host recovery brings the devices and their DMA back.

use crate::common::{caps, check_write_slots, hand_timing, parent, switch_tree, write_stream};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{FabricSim, SimConfig};
use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::Bdf;

const TRAINING_US: u64 = 50;
const SURPRISE_DOWN: u32 = 1 << 5;

fn sim(count: u64) -> (FabricSim, u64, u64) {
    let cfg = SimConfig {
        link_training_time: SimDuration::from_us(TRAINING_US),
        device_ready_wait: SimDuration::from_ms(1),
        ..hand_timing(false)
    };
    let mut s = FabricSim::new(&switch_tree(1, false), &KindRegistry::builtin(), cfg).unwrap();
    let (b1, b2) = (s.alloc_dma(count * 4096), s.alloc_dma(count * 4096));
    for (name, base) in [("ep", b1), ("ep2", b2)] {
        s.attach(name, write_stream(base, count)).unwrap();
    }
    (s, b1, b2)
}

/// Sets or clears `bit` of the 16-bit register at `at` (in a DW's upper half when
/// `high`).
fn write_bit(s: &mut FabricSim, f: Bdf, at: u16, high: bool, bit: u32, on: bool) {
    let v = s.cfg_read(f, at);
    let (keep, shift) = if high {
        (v & 0xffff_0000, 16)
    } else {
        (v & 0xffff, 0)
    };
    let reg = keep >> shift;
    let reg = if on { reg | bit } else { reg & !bit };
    // The other half (status bits: write 1 to clear) is written as 0.
    s.cfg_write(f, at, reg << shift);
}

fn report(s: &FabricSim, name: &str) -> serde_json::Value {
    s.model(name).unwrap().report().unwrap()
}

fn uncorrectable(s: &mut FabricSim, f: Bdf) -> u32 {
    let (_, a) = caps(s, f);
    s.cfg_read(f, a + 4)
}

#[test]
fn secondary_bus_reset_resets_the_device_below_until_cleared() {
    let count = 300;
    let (mut s, _, b2) = sim(count);
    let ep = s.bdf("ep").unwrap();
    let dsp = parent(&s, ep);
    let saved = s.save_below("ep").unwrap();
    let bar0 = s.cfg_read(ep, 0x10);
    assert_ne!(bar0, 0);
    s.run_for(SimDuration::from_us(20));
    // Bridge Control is the upper half of DW 0x3c.
    write_bit(&mut s, dsp, 0x3c, true, 1 << 6, true);
    assert!(!s.link_active("ep").unwrap());
    s.run_for(SimDuration::from_us(5 * TRAINING_US));
    assert!(!s.link_active("ep").unwrap(), "held while the bit is set");
    assert_eq!(s.cfg_read(ep, 0x10) & !0xf, 0, "the device below was reset");
    assert_eq!(uncorrectable(&mut s, dsp) & SURPRISE_DOWN, 0, "no error");
    write_bit(&mut s, dsp, 0x3c, true, 1 << 6, false);
    let t = s.now();
    let r = s.recover("ep", &saved).unwrap();
    assert!(
        r.link_up_at >= t + SimDuration::from_us(TRAINING_US),
        "{r:?}"
    );
    assert_eq!(r.failed_writes, 0);
    assert_eq!(s.cfg_read(ep, 0x10), bar0);
    s.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    let (r1, r2) = (report(&s, "ep"), report(&s, "ep2"));
    assert_eq!(r1["dmas"], count, "{r1}");
    assert!(r1["failed"].as_u64().unwrap() > 0, "{r1}");
    assert_eq!(r2["dmas"], count, "{r2}");
    assert_eq!(r2["failed"], 0, "the neighbour lost nothing: {r2}");
    // The neighbour's data is all there.
    check_write_slots(&s, b2, 0..count);
    assert!(s.errors().is_empty(), "{:?}", s.errors());
}

#[test]
fn link_disable_at_a_root_port_takes_the_switch_and_its_devices_down() {
    let count = 200;
    let (mut s, _, _) = sim(count);
    let ep = s.bdf("ep").unwrap();
    let usp = parent(&s, parent(&s, ep));
    let rp = parent(&s, usp);
    let saved = s.save_below("sw").unwrap();
    s.run_for(SimDuration::from_us(20));
    let (p, _) = caps(&mut s, rp);
    write_bit(&mut s, rp, p + 0x10, false, 1 << 4, true);
    for n in ["sw", "ep", "ep2"] {
        assert!(!s.link_active(n).unwrap(), "{n}");
    }
    s.run_for(SimDuration::from_us(5 * TRAINING_US));
    assert!(!s.link_active("sw").unwrap(), "disabled until cleared");
    assert_eq!(uncorrectable(&mut s, rp) & SURPRISE_DOWN, 0, "no error");
    write_bit(&mut s, rp, p + 0x10, false, 1 << 4, false);
    // The root port's link trains, then the switch's.
    s.run_for(SimDuration::from_us(TRAINING_US + 1));
    assert!(s.link_active("sw").unwrap());
    assert!(!s.link_active("ep").unwrap());
    s.run_for(SimDuration::from_us(TRAINING_US));
    assert!(s.link_active("ep").unwrap() && s.link_active("ep2").unwrap());
    let r = s.recover("sw", &saved).unwrap();
    assert_eq!(r.failed_writes, 0, "{r:?}");
    s.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    for n in ["ep", "ep2"] {
        let r = report(&s, n);
        assert_eq!(r["dmas"], count, "{n}: {r}");
        assert!(r["resumed_at_ns"].is_number(), "{n}: {r}");
    }
    // The saved state never holds the reset bits, so a restore cannot re-trigger one.
    assert!(saved.iter().all(|sv| sv
        .dwords
        .iter()
        .all(|&(at, v)| at != 0x3c || v & (1 << 22) == 0)));
}

#[test]
fn secondary_bus_reset_at_a_switch_upstream_port_resets_its_downstream_ports_and_below() {
    let count = 200;
    let (mut s, b1, b2) = sim(count);
    let ep = s.bdf("ep").unwrap();
    let dsp = parent(&s, ep);
    let usp = parent(&s, dsp);
    let saved = s.save_below("sw").unwrap();
    let (usp_buses, dsp_buses) = (s.cfg_read(usp, 0x18), s.cfg_read(dsp, 0x18));
    assert_ne!(dsp_buses & 0xffff00, 0);
    s.run_for(SimDuration::from_us(20));
    write_bit(&mut s, usp, 0x3c, true, 1 << 6, true);
    s.run_for(SimDuration::from_us(5 * TRAINING_US));
    assert!(
        s.link_active("sw").unwrap(),
        "the upstream port's own link stays up"
    );
    for n in ["ep", "ep2"] {
        assert!(!s.link_active(n).unwrap(), "{n}: held while the bit is set");
    }
    assert_eq!(
        s.cfg_read(usp, 0x18),
        usp_buses,
        "the upstream port keeps its state"
    );
    assert_eq!(s.cfg_read(dsp, 0x18), 0, "the downstream port was reset");
    assert_eq!(s.cfg_read(dsp, 0x04) & 0x7, 0, "its Command register too");
    assert_eq!(uncorrectable(&mut s, dsp) & SURPRISE_DOWN, 0, "no error");
    write_bit(&mut s, usp, 0x3c, true, 1 << 6, false);
    let t = s.now();
    s.run_for(SimDuration::from_us(TRAINING_US + 1));
    for n in ["ep", "ep2"] {
        assert!(
            s.link_active(n).unwrap(),
            "{n}: trained after the bit was cleared"
        );
    }
    let r = s.recover("sw", &saved).unwrap();
    assert_eq!(r.failed_writes, 0, "{r:?}");
    assert!(r.restore_started_at >= t + SimDuration::from_ms(1), "{r:?}");
    assert_eq!(s.cfg_read(dsp, 0x18), dsp_buses);
    s.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    for (n, base) in [("ep", b1), ("ep2", b2)] {
        let r = report(&s, n);
        assert_eq!(r["dmas"], count, "{n}: {r}");
        assert!(r["resumed_at_ns"].is_number(), "{n}: {r}");
        let failed = r["failed"].as_u64().unwrap();
        // The DMAs after the last one lost are all in host memory.
        check_write_slots(&s, base, 100..count);
        assert!(failed > 0 && failed <= 8, "{n}: {r}");
    }
}
