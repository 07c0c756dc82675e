//! Links going down (DL_Down) and Downstream Port Containment: the port answers for
//! the lost device, the device below is reset, DPC triggers on uncorrectable errors
//! and holds the link disabled until software releases it, and nothing else in the
//! fabric notices.

use crate::common::{caps, ext_cap, hand_timing, lspci_vvv, parent, switch_tree};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::FaultKind;
use pcielab_fabric::timed::{
    AddrPattern, DmaOpKind, DmaStream, DpcReason, ErrorSeverity, FabricSim, HostRead, SimConfig,
};
use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::{Bdf, CplStatus};

const EXT_DPC: u16 = 0x001d;
const POISONED: u32 = 1 << 12;
const SURPRISE_DOWN: u32 = 1 << 5;
const DLLLA: u32 = 1 << 13;
const TRAINING_US: u64 = 50;

fn cfg() -> SimConfig {
    SimConfig {
        link_training_time: SimDuration::from_us(TRAINING_US),
        ..hand_timing(false)
    }
}

fn sim() -> FabricSim {
    let mut s = FabricSim::new(&switch_tree(1, false), &KindRegistry::builtin(), cfg()).unwrap();
    s.run_for(SimDuration::from_us(5));
    s
}

/// Sets Device Control's four error-reporting enables of `f`.
fn report_all(s: &mut FabricSim, f: Bdf) {
    let (p, _) = caps(s, f);
    let dc = s.cfg_read(f, p + 8);
    s.cfg_write(f, p + 8, (dc & 0xffff) | 0xf);
}

/// Writes DPC Control of port `f`.
fn dpc_control(s: &mut FabricSim, f: Bdf, ctl: u16) {
    let at = ext_cap(s, f, EXT_DPC);
    s.cfg_write(f, at + 4, (ctl as u32) << 16);
}

/// (DPC Status, Error Source ID) of port `f`.
fn dpc_status(s: &mut FabricSim, f: Bdf) -> (u16, u16) {
    let at = ext_cap(s, f, EXT_DPC);
    let v = s.cfg_read(f, at + 8);
    (v as u16, (v >> 16) as u16)
}

fn link_status(s: &mut FabricSim, f: Bdf) -> u32 {
    let (p, _) = caps(s, f);
    s.cfg_read(f, p + 0x10) >> 16
}

fn uncorrectable(s: &mut FabricSim, f: Bdf) -> u32 {
    let (_, a) = caps(s, f);
    s.cfg_read(f, a + 4)
}

fn failed(r: HostRead) -> CplStatus {
    match r {
        HostRead::Failed(st) => st,
        r => panic!("expected a failed read, got {r:?}"),
    }
}

/// The registers host software restores after a reset (command, BARs), saved.
fn save(s: &mut FabricSim, f: Bdf) -> Vec<(u16, u32)> {
    (0x10..0x28)
        .step_by(4)
        .chain([0x04])
        .map(|r| (r, s.cfg_read(f, r)))
        .collect()
}

fn restore(s: &mut FabricSim, f: Bdf, saved: &[(u16, u32)]) {
    for &(r, v) in saved {
        s.cfg_write(f, r, v);
    }
}

#[test]
fn an_err_nonfatal_triggers_dpc_which_holds_the_link_until_software_releases_it() {
    let mut s = sim();
    let ep = s.bdf("ep").unwrap();
    let dsp = parent(&s, ep);
    let bar = s.bar("ep", 0).unwrap();
    let bar2 = s.bar("ep2", 0).unwrap();
    let saved = save(&mut s, ep);
    report_all(&mut s, ep);
    assert_eq!(link_status(&mut s, dsp) & DLLLA, DLLLA);
    // Trigger on ERR_NONFATAL or ERR_FATAL; Completer Abort for contained requests.
    dpc_control(&mut s, dsp, 0x0002);
    s.mmio_write(bar, &[1, 2, 3, 4]).unwrap();
    s.mmio_write_poisoned(bar, &[9, 9, 9, 9]).unwrap();
    s.run_for(SimDuration::from_us(5));
    // The device's ERR_NONFATAL was contained at its port, not forwarded.
    let ev = s.dpc_events().to_vec();
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(
        (ev[0].port, ev[0].reason, ev[0].source),
        (dsp, DpcReason::NonFatalMessage, ep)
    );
    assert!(s.error_messages().is_empty(), "{:?}", s.error_messages());
    let (sta, src) = dpc_status(&mut s, dsp);
    assert_eq!(sta & 0x7f, 0b000_0011, "Trigger Status, Reason 01b");
    assert_eq!(src, ep.raw());
    assert!(!s.link_active("ep").unwrap());
    assert_eq!(link_status(&mut s, dsp) & DLLLA, 0, "DL_Active clear");
    // The device was reset: BARs and Command cleared; the sticky AER status kept.
    assert_eq!(s.cfg_read(ep, 0x04) & 0x7, 0);
    assert_eq!(uncorrectable(&mut s, ep) & POISONED, POISONED);
    // The port answers for the link: Completer Abort, then Unsupported Request.
    assert_eq!(failed(s.mmio_read(bar, 4).unwrap()), CplStatus::Ca);
    assert_eq!(failed(s.config_read(ep, 0).unwrap()), CplStatus::Ca);
    dpc_control(&mut s, dsp, 0x0006);
    assert_eq!(failed(s.mmio_read(bar, 4).unwrap()), CplStatus::Ur);
    // Its sibling is untouched.
    s.mmio_write(bar2, &[5, 6, 7, 8]).unwrap();
    let HostRead::Done { data, .. } = s.mmio_read(bar2, 4).unwrap() else {
        panic!("the sibling answers");
    };
    assert_eq!(data, [5, 6, 7, 8]);
    // Held: waiting longer changes nothing.
    s.run_for(SimDuration::from_us(3 * TRAINING_US));
    assert!(!s.link_active("ep").unwrap());
    // Software clears Trigger Status: the link trains and comes back.
    let at = ext_cap(&s, dsp, EXT_DPC);
    s.cfg_write(dsp, at + 8, 1);
    s.run_for(SimDuration::from_ns(TRAINING_US * 1000 - 1));
    assert!(!s.link_active("ep").unwrap(), "still training");
    s.run_for(SimDuration::from_us(2));
    assert!(s.link_active("ep").unwrap());
    assert_eq!(link_status(&mut s, dsp) & DLLLA, DLLLA);
    assert_eq!(dpc_status(&mut s, dsp).0 & 1, 0);
    // Restored, the device works again.
    restore(&mut s, ep, &saved);
    s.mmio_write(bar, &[4, 3, 2, 1]).unwrap();
    let HostRead::Done { data, .. } = s.mmio_read(bar, 4).unwrap() else {
        panic!("the device answers after recovery");
    };
    assert_eq!(data, [4, 3, 2, 1]);
    let other: Vec<_> = s
        .errors()
        .iter()
        .filter(|e| !e.is(FaultKind::Poisoned))
        .collect();
    assert!(other.is_empty(), "{other:?}");
}

#[test]
fn a_surprise_down_is_logged_by_the_port_and_its_requests_get_unsupported_request() {
    let mut s = sim();
    let ep = s.bdf("ep").unwrap();
    let dsp = parent(&s, ep);
    let rp = parent(&s, parent(&s, dsp));
    report_all(&mut s, dsp);
    let bar = s.bar("ep", 0).unwrap();
    s.link_down("ep").unwrap();
    assert_eq!(uncorrectable(&mut s, dsp) & SURPRISE_DOWN, SURPRISE_DOWN);
    s.run_for(SimDuration::from_us(5));
    let m = s.error_messages().to_vec();
    assert_eq!(m.len(), 1, "{m:?}");
    assert_eq!(
        (m[0].1.root_port, m[0].1.source, m[0].1.severity),
        (rp, dsp, ErrorSeverity::Fatal)
    );
    // The port answers at once (no completion timeout): RC, switch, and back.
    let t0 = s.now();
    assert_eq!(failed(s.mmio_read(bar, 4).unwrap()), CplStatus::Ur);
    assert!(s.now() - t0 < SimDuration::from_us(2), "{:?}", s.now() - t0);
    let c = s.counters();
    let down = c.iter().find(|(n, _)| n == "sw.0->ep").unwrap();
    assert_eq!(down.1.link_downs, 1);
    assert_eq!(down.1.link_down_drops, 1, "the MMIO read");
    // The failure is over: the link trains again.
    s.link_up("ep").unwrap();
    s.run_for(SimDuration::from_us(TRAINING_US + 2));
    assert!(s.link_active("ep").unwrap());
}

#[test]
fn a_surprise_down_under_dpc_is_contained_and_the_link_stays_disabled() {
    let mut s = sim();
    let ep = s.bdf("ep").unwrap();
    let dsp = parent(&s, ep);
    report_all(&mut s, dsp);
    dpc_control(&mut s, dsp, 0x0001); // ERR_FATAL only: Surprise Down is fatal
    s.link_down("ep").unwrap();
    s.run_for(SimDuration::from_us(5));
    let ev = s.dpc_events().to_vec();
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].reason, DpcReason::PortError);
    assert!(s.error_messages().is_empty(), "contained: not signalled");
    assert_eq!(dpc_status(&mut s, dsp).0 & 0x7f, 0b000_0001, "Reason 00b");
    // The cable is back, but DPC still holds the link.
    s.link_up("ep").unwrap();
    s.run_for(SimDuration::from_us(2 * TRAINING_US));
    assert!(!s.link_active("ep").unwrap());
    let at = ext_cap(&s, dsp, EXT_DPC);
    s.cfg_write(dsp, at + 8, 1);
    s.run_for(SimDuration::from_us(TRAINING_US + 2));
    assert!(s.link_active("ep").unwrap());
}

#[test]
fn a_root_port_software_trigger_takes_down_the_switch_and_its_links() {
    let mut s = sim();
    let ep = s.bdf("ep").unwrap();
    let sw_up = parent(&s, parent(&s, ep));
    let rp = parent(&s, sw_up);
    let bar2 = s.bar("ep2", 0).unwrap();
    let irqs = s.interrupts().len();
    // Trigger enabled, interrupt enabled, software trigger.
    dpc_control(&mut s, rp, 0x0001 | 0x0008 | 0x0040);
    let (sta, _) = dpc_status(&mut s, rp);
    assert_eq!(
        sta & 0x7f,
        0b010_1111,
        "Trigger, Reason 11b, INT, Extension 01b"
    );
    assert_eq!(s.dpc_events()[0].reason, DpcReason::Software);
    // Software Trigger reads back 0 (the port cleared it).
    let at = ext_cap(&s, rp, EXT_DPC);
    assert_eq!(s.cfg_read(rp, at + 4) >> 16 & 0x40, 0);
    assert_eq!(s.interrupts().len(), irqs + 1, "the root port's DPC MSI");
    for name in ["sw", "ep", "ep2"] {
        assert!(!s.link_active(name).unwrap(), "{name}");
    }
    assert_eq!(failed(s.mmio_read(bar2, 4).unwrap()), CplStatus::Ca);
    // Released: the root port's link trains, then the switch's downstream links.
    s.cfg_write(rp, at + 8, 0x9);
    s.run_for(SimDuration::from_us(TRAINING_US + 2));
    assert!(s.link_active("sw").unwrap());
    assert!(
        !s.link_active("ep2").unwrap(),
        "the switch trains its links next"
    );
    s.run_for(SimDuration::from_us(TRAINING_US));
    assert!(s.link_active("ep").unwrap() && s.link_active("ep2").unwrap());
}

#[test]
fn dma_of_a_lost_device_is_dropped_and_its_neighbour_loses_no_byte() {
    let count = 400u64;
    let size = 1024u64;
    let mut s = FabricSim::new(&switch_tree(2, false), &KindRegistry::builtin(), cfg()).unwrap();
    let base = s.alloc_dma(count * 4096);
    let base2 = s.alloc_dma(count * 4096);
    let stream = |b| {
        DmaStream::new(
            DmaOpKind::Write,
            size,
            8,
            count,
            b,
            count * 4096,
            AddrPattern::Sequential,
        )
    };
    s.attach("ep", Box::new(stream(base))).unwrap();
    s.attach("ep2", Box::new(stream(base2))).unwrap();
    s.run_for(SimDuration::from_us(20));
    s.link_down("ep").unwrap();
    s.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    let report = |s: &FabricSim, n: &str| s.model(n).unwrap().report().unwrap();
    let r1 = report(&s, "ep");
    let r2 = report(&s, "ep2");
    assert_eq!(r2["dmas"], count, "{r2}");
    assert_eq!(r2["failed"], 0, "{r2}");
    assert!(r1["failed"].as_u64().unwrap() > 0, "{r1}");
    assert!(r1["dmas"].as_u64().unwrap() < count, "{r1}");
    // Every byte of the neighbour's DMAs is in host memory (DMA i writes
    // (k as u8) ^ (i as u8) * 31 at slot i).
    let mut buf = vec![0u8; size as usize];
    for i in 0..count {
        s.host_read(base2 + i * 4096, &mut buf);
        for (k, b) in buf.iter().enumerate() {
            assert_eq!(
                *b,
                (k as u8) ^ (i as u8).wrapping_mul(31),
                "DMA {i} byte {k}"
            );
        }
    }
    assert!(s.errors().is_empty(), "{:?}", s.errors());
}

#[test]
fn link_down_runs_are_deterministic() {
    let run = || {
        let mut s = FabricSim::new(
            &switch_tree(3, false),
            &KindRegistry::builtin(),
            SimConfig {
                trace: true,
                ..cfg()
            },
        )
        .unwrap();
        let base = s.alloc_dma(1 << 20);
        s.attach(
            "ep",
            Box::new(DmaStream::new(
                DmaOpKind::ReadWrite,
                2048,
                8,
                200,
                base,
                1 << 20,
                AddrPattern::Random,
            )),
        )
        .unwrap();
        s.run_for(SimDuration::from_us(10));
        s.link_down("ep").unwrap();
        s.run_for(SimDuration::from_us(1));
        s.link_up("ep").unwrap();
        s.run_until_idle(SimTime::from_ps(u64::MAX / 2));
        (
            s.trace().unwrap().hash(),
            s.trace().unwrap().to_text().len(),
        )
    };
    assert_eq!(run(), run());
}

/// The real `lspci` decodes the triggered port's DPC registers as our decoder does.
#[test]
fn lspci_decodes_a_triggered_dpc() {
    let mut s = sim();
    let ep = s.bdf("ep").unwrap();
    let dsp = parent(&s, ep);
    report_all(&mut s, ep);
    dpc_control(&mut s, dsp, 0x0002 | 0x0004);
    let bar = s.bar("ep", 0).unwrap();
    s.mmio_write_poisoned(bar, &[9, 9, 9, 9]).unwrap();
    s.run_for(SimDuration::from_us(5));
    let text = lspci_vvv(&s, dsp, "dpc");
    let want = [
        "DpcCtl:\tTrigger:2 Cmpl+ INT- ErrCor- PoisonedTLP- SwTrigger- DL_ActiveErr-".to_string(),
        "DpcSta:\tTrigger+ Reason:01 INT- RPBusy- TriggerExt:00 RP PIO ErrPtr:00".to_string(),
        format!("Source:\t{:04x}", ep.raw()),
    ];
    let f = s.fabric().function_at(dsp).unwrap();
    let ours = pcielab_config::decode::describe(s.fabric().functions[f.0 as usize].config.bytes());
    for w in &want {
        assert!(text.contains(w.as_str()), "lspci: want {w:?} in\n{text}");
        assert!(ours.contains(w.as_str()), "ours: want {w:?} in\n{ours}");
    }
    assert!(
        text.contains("LnkSta:") && !text.contains("DLActive+"),
        "{text}"
    );
}

mod random {
    use super::*;
    use proptest::prelude::*;

    /// One thing that happens to the fabric at some time.
    #[derive(Debug, Clone)]
    enum Act {
        /// A failure of the link above the node, over after `us`.
        Fail(&'static str, u64),
        /// DPC on the port above the node: Trigger Enable, then a software trigger,
        /// released after `us`.
        Contain(&'static str, u16, u64),
        /// A poisoned MMIO write to the device (ERR_NONFATAL if it reports).
        Poison(&'static str),
    }

    fn act() -> impl Strategy<Value = (u64, Act)> {
        let node = prop_oneof![Just("ep"), Just("ep2"), Just("sw")];
        let dev = prop_oneof![Just("ep"), Just("ep2")];
        (
            0u64..40,
            prop_oneof![
                (node.clone(), 0u64..200).prop_map(|(n, us)| Act::Fail(n, us)),
                (node, 1u16..=2, 0u64..200).prop_map(|(n, t, us)| Act::Contain(n, t, us)),
                dev.prop_map(Act::Poison),
            ],
        )
    }

    fn op() -> impl Strategy<Value = DmaOpKind> {
        prop_oneof![
            Just(DmaOpKind::Read),
            Just(DmaOpKind::Write),
            Just(DmaOpKind::ReadWrite)
        ]
    }

    /// Runs the scenario; returns (trace hash, TLP records alive at the end).
    fn run(acts: &[(u64, Act)], ops: (DmaOpKind, DmaOpKind), seed: u64) -> (u64, i64) {
        let mut s = FabricSim::new(
            &switch_tree(seed, false),
            &KindRegistry::builtin(),
            SimConfig {
                trace: true,
                link_training_time: SimDuration::from_us(5),
                completion_timeout: SimDuration::from_us(200),
                ..hand_timing(true)
            },
        )
        .unwrap();
        for (name, op) in [("ep", ops.0), ("ep2", ops.1)] {
            let base = s.alloc_dma(1 << 20);
            let st = DmaStream::new(op, 1500, 8, 150, base, 1 << 20, AddrPattern::Random);
            s.attach(name, Box::new(st)).unwrap();
        }
        s.run_for(SimDuration::from_us(2));
        // The port above each node, found before any reset renumbers the buses.
        let ports: std::collections::HashMap<&str, Bdf> = ["sw", "ep", "ep2"]
            .into_iter()
            .map(|n| (n, parent(&s, s.bdf(n).unwrap())))
            .collect();
        for f in ["ep", "ep2"] {
            let b = s.bdf(f).unwrap();
            report_all(&mut s, b);
        }
        let mut acts = acts.to_vec();
        acts.sort_by_key(|a| a.0);
        let mut releases: Vec<(u64, &'static str, bool)> = Vec::new();
        for (at, a) in acts {
            let t = SimTime::from_ps(at * 1_000_000);
            if t > s.now() {
                s.run_for(t - s.now());
            }
            match a {
                Act::Fail(n, us) => {
                    s.link_down(n).unwrap();
                    releases.push((at + us, n, false));
                }
                Act::Contain(n, trig, us) => {
                    // A port inside a switch in reset is not reachable (its bus
                    // numbers are gone until software sets them again).
                    if s.fabric().function_at(ports[n]).is_some() {
                        dpc_control(&mut s, ports[n], trig | 0x40);
                    }
                    releases.push((at + us, n, true));
                }
                Act::Poison(n) => {
                    if let Some(bar) = s.bar(n, 0) {
                        let _ = s.mmio_write_poisoned(bar, &[1, 2, 3, 4]);
                    }
                }
            }
        }
        releases.sort();
        for (at, n, dpc) in releases {
            let t = SimTime::from_ps(at * 1_000_000);
            if t > s.now() {
                s.run_for(t - s.now());
            }
            if dpc {
                let port = ports[n];
                if s.fabric().function_at(port).is_some() {
                    let at = ext_cap(&s, port, EXT_DPC);
                    s.cfg_write(port, at + 8, 0x9);
                }
            } else {
                s.link_up(n).unwrap();
            }
        }
        // Any port whose DPC an error message triggered: released too.
        let triggered: Vec<Bdf> = s.dpc_events().iter().map(|e| e.port).collect();
        for p in triggered {
            if s.fabric().function_at(p).is_some() {
                let at = ext_cap(&s, p, EXT_DPC);
                s.cfg_write(p, at + 8, 0x9);
            }
        }
        s.run_until_idle(SimTime::from_ps(u64::MAX / 2));
        for n in ["sw", "ep", "ep2"] {
            assert!(s.link_active(n).unwrap(), "{n} is back");
        }
        (s.trace().unwrap().hash(), s.tlps_in_flight())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
        /// Failures, containments and releases at random times under random DMA
        /// traffic: no panic, every link back at the end, no TLP record leaked or
        /// freed twice, and the same trace from the same inputs.
        #[test]
        fn random_failures_leave_a_clean_fabric(
            acts in prop::collection::vec(act(), 1..5),
            ops in (op(), op()),
            seed in 0u64..1000,
        ) {
            let a = run(&acts, ops, seed);
            prop_assert_eq!(a.1, 0, "TLP records alive at the end");
            prop_assert_eq!(a, run(&acts, ops, seed));
        }
    }
}

/// A device that asserts its INTx pin once the link is up.
#[derive(Debug)]
struct Asserts;
impl pcielab_fabric::timed::Endpoint for Asserts {
    fn start(&mut self, cx: &mut pcielab_fabric::timed::EpCx<'_>) {
        cx.timer(SimDuration::from_us(2), 0);
    }
    fn timer(&mut self, _t: u64, cx: &mut pcielab_fabric::timed::EpCx<'_>) {
        cx.intx(true);
    }
}

#[test]
fn a_lost_device_s_intx_wire_is_deasserted_by_its_port() {
    let mut s = FabricSim::new(&switch_tree(4, false), &KindRegistry::builtin(), cfg()).unwrap();
    s.attach("ep", Box::new(Asserts)).unwrap();
    s.run_for(SimDuration::from_us(10));
    let ev = s.intx_events().to_vec();
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert!(ev[0].1.asserted);
    let dsp = parent(&s, s.bdf("ep").unwrap());
    s.link_down("ep").unwrap();
    s.run_for(SimDuration::from_us(5));
    let ev = s.intx_events().to_vec();
    assert_eq!(ev.len(), 2, "{ev:?}");
    let (pin, asserted, from) = (ev[1].1.pin, ev[1].1.asserted, ev[1].1.from);
    assert_eq!(
        (pin, asserted),
        (ev[0].1.pin, false),
        "the same pin, deasserted"
    );
    // The switch's upstream port sends it, on behalf of the downstream port's wire.
    assert_eq!(from, parent(&s, dsp));
}

#[test]
fn poisoned_tlp_egress_blocking_keeps_poison_off_the_link_and_may_trigger_dpc() {
    const BLOCKED: u32 = 1 << 26;
    let mut s = sim();
    let ep = s.bdf("ep").unwrap();
    let dsp = parent(&s, ep);
    report_all(&mut s, ep);
    report_all(&mut s, dsp);
    let bar = s.bar("ep", 0).unwrap();
    // Blocking alone: the TLP stops at the port, which reports it; the link stays up.
    dpc_control(&mut s, dsp, 0x0020);
    s.mmio_write(bar, &[1, 2, 3, 4]).unwrap();
    s.mmio_write_poisoned(bar, &[9, 9, 9, 9]).unwrap();
    s.run_for(SimDuration::from_us(5));
    assert_eq!(uncorrectable(&mut s, dsp) & BLOCKED, BLOCKED);
    assert_eq!(
        uncorrectable(&mut s, ep) & POISONED,
        0,
        "the device never saw it"
    );
    let (_, a) = caps(&mut s, dsp);
    assert_eq!(s.cfg_read(dsp, a + 0x18) & 0x1f, 26, "First Error Pointer");
    assert_eq!(
        s.cfg_read(dsp, a + 0x1c) >> 24,
        0x60,
        "header log: MWr, 4 DW"
    );
    let m = s.error_messages().to_vec();
    assert_eq!(m.len(), 1, "{m:?}");
    assert_eq!(
        (m[0].1.source, m[0].1.severity),
        (dsp, ErrorSeverity::NonFatal)
    );
    assert!(s.link_active("ep").unwrap());
    let c = s.counters();
    assert_eq!(
        c.iter()
            .find(|(n, _)| n == "sw.0->ep")
            .unwrap()
            .1
            .poison_blocked,
        1
    );
    let HostRead::Done { data, .. } = s.mmio_read(bar, 4).unwrap() else {
        panic!("the device still answers");
    };
    assert_eq!(data, [1, 2, 3, 4]);
    // With DPC armed for non-fatal errors the blocked TLP contains the link, silently.
    s.cfg_write(dsp, a + 4, BLOCKED); // clear the status: a new first error
    dpc_control(&mut s, dsp, 0x0022);
    s.mmio_write_poisoned(bar, &[9, 9, 9, 9]).unwrap();
    s.run_for(SimDuration::from_us(5));
    assert_eq!(s.dpc_events().len(), 1);
    assert_eq!(s.dpc_events()[0].reason, DpcReason::PortError);
    assert_eq!(s.error_messages().len(), 1, "not signalled");
    assert!(!s.link_active("ep").unwrap());
}

#[test]
fn saved_configuration_brings_a_reset_switch_and_its_devices_back() {
    let mut s = sim();
    let ep = s.bdf("ep").unwrap();
    let ep2 = s.bdf("ep2").unwrap();
    let dsp = parent(&s, ep);
    let dsp2 = parent(&s, ep2);
    let up = parent(&s, dsp);
    let rp = parent(&s, up);
    let (bar, bar2) = (s.bar("ep", 0).unwrap(), s.bar("ep2", 0).unwrap());
    // Parents first: their bus numbers route the restoring requests.
    let order = [up, dsp, dsp2, ep, ep2];
    let saved: Vec<_> = order.iter().map(|&b| s.save_config(b).unwrap()).collect();
    assert!(
        saved[0].dwords.iter().any(|&(at, _)| at == 0x18),
        "bus numbers saved"
    );
    dpc_control(&mut s, rp, 0x0001 | 0x0004 | 0x0040);
    assert!(
        s.fabric().function_at(ep).is_none(),
        "the switch forgot its buses"
    );
    let at = ext_cap(&s, rp, EXT_DPC);
    s.cfg_write(rp, at + 8, 1);
    s.run_for(SimDuration::from_us(2 * TRAINING_US + 5));
    assert!(s.link_active("ep").unwrap() && s.link_active("ep2").unwrap());
    // Before the restore the device does not decode its BAR: the switch refuses.
    assert!(matches!(
        s.mmio_read(bar, 4),
        Ok(HostRead::Failed(_)) | Err(_)
    ));
    let t0 = s.now();
    for sv in &saved {
        assert_eq!(s.restore_config(sv).unwrap(), 0, "{}", sv.bdf);
    }
    let writes: usize = saved.iter().map(|sv| sv.dwords.len()).sum();
    assert!(s.now() > t0, "{writes} configuration writes take time");
    for (b, a) in [(bar, [1u8, 2, 3, 4]), (bar2, [5, 6, 7, 8])] {
        s.mmio_write(b, &a).unwrap();
        let HostRead::Done { data, .. } = s.mmio_read(b, 4).unwrap() else {
            panic!("{b:#x} answers after the restore");
        };
        assert_eq!(data, a);
    }
    // Saving again gives what was saved (the read-write state is all back).
    for sv in &saved {
        assert_eq!(&s.save_config(sv.bdf).unwrap(), sv);
    }
}
