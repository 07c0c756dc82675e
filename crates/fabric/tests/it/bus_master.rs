//! Bus Master Enable (PCIe Base Spec 7.5.1.1.3) and host recovery after a reset: a
//! function with the bit clear issues no DMA and no MSI-X; a bridge with it clear
//! forwards no memory request upstream (Unsupported Request), MSI-X writes included,
//! but still forwards peer-to-peer traffic below it; host software restores a reset component after the
//! link is back and the spec's 100 ms, and the DMA stream resumes.

use crate::common::{
    caps, check_write_slots, hand_timing, lspci_vvv, parent, switch_tree, write_stream,
};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::FaultKind;
use pcielab_fabric::timed::{DmaId, Endpoint, EpCx, FabricSim, HostRead, SimConfig, SimError};
use pcielab_fabric::topology::Topology;
use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::Bdf;

const BUS_MASTER: u32 = 1 << 2;
const UNSUPPORTED: u32 = 1 << 20;
const TRAINING_US: u64 = 50;

/// What a [`Probe`] does at 10, 20, 30 … µs after it is attached (one step each).
#[derive(Debug, Clone, Copy)]
enum Step {
    /// A 64-byte DMA write of 0x5a bytes.
    Write(u64),
    /// A 64-byte DMA read.
    Read(u64),
    /// MSI-X vector 0.
    Msix,
}

/// A device that runs a script of steps and logs, in ns, what came back.
#[derive(Debug, Default)]
struct Probe {
    steps: Vec<Step>,
    log: Vec<(u64, String)>,
}

impl Endpoint for Probe {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        for i in 0..self.steps.len() as u64 {
            cx.timer(SimDuration::from_us(10 * (i + 1)), i);
        }
    }
    fn timer(&mut self, token: u64, cx: &mut EpCx<'_>) {
        match self.steps[token as usize] {
            Step::Write(a) => {
                cx.dma_write(a, vec![0x5a; 64]);
            }
            Step::Read(a) => {
                cx.dma_read(a, 64);
            }
            Step::Msix => cx.msix(0),
        }
    }
    fn dma_done(&mut self, _id: DmaId, ok: bool, _data: &[u8], cx: &mut EpCx<'_>) {
        self.log
            .push((cx.now().as_ps() / 1000, format!("done {ok}")));
    }
    fn bus_master(&mut self, enabled: bool, cx: &mut EpCx<'_>) {
        self.log
            .push((cx.now().as_ps() / 1000, format!("bus master {enabled}")));
    }
    fn report(&self) -> Option<serde_json::Value> {
        Some(serde_json::json!(self.log))
    }
}

fn log(s: &FabricSim, name: &str) -> Vec<(u64, String)> {
    serde_json::from_value(s.model(name).unwrap().report().unwrap()).unwrap()
}

fn set_bus_master(s: &mut FabricSim, f: Bdf, on: bool) {
    let cmd = s.cfg_read(f, 0x04) & 0xffff;
    let cmd = if on {
        cmd | BUS_MASTER
    } else {
        cmd & !BUS_MASTER
    };
    s.cfg_write(f, 0x04, cmd);
}

fn uncorrectable(s: &mut FabricSim, f: Bdf) -> u32 {
    let (_, a) = caps(s, f);
    s.cfg_read(f, a + 4)
}

fn one_link() -> Topology {
    Topology::parse(
        "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n[[node]]\nname=\"ep\"\nkind=\"psmem\"\n\
         [[link]]\nup=\"rc.0\"\ndown=\"ep\"\ngen=3\nwidth=4\n",
        "t.toml",
        &KindRegistry::builtin(),
    )
    .unwrap()
}

fn cfg() -> SimConfig {
    SimConfig {
        link_training_time: SimDuration::from_us(TRAINING_US),
        ..hand_timing(false)
    }
}

/// Posted TLPs the device sent up its link.
fn posted_up(s: &FabricSim, name: &str) -> u64 {
    let c = s.counters();
    c.iter()
        .find(|(n, _)| n.starts_with(&format!("{name}->")))
        .unwrap()
        .1
        .posted
}

#[test]
fn a_device_without_bus_master_enable_issues_no_dma_and_no_msix() {
    let mut s = FabricSim::new(&one_link(), &KindRegistry::builtin(), cfg()).unwrap();
    let base = s.alloc_dma(4096);
    let ep = s.bdf("ep").unwrap();
    let probe = Probe {
        steps: vec![
            Step::Write(base),
            Step::Read(base),
            Step::Msix,
            Step::Write(base + 64),
            Step::Msix,
        ],
        ..Probe::default()
    };
    let t0 = s.now().as_ps() / 1000;
    s.attach("ep", Box::new(probe)).unwrap();
    s.run_for(SimDuration::from_us(5));
    set_bus_master(&mut s, ep, false);
    let irqs = s.interrupts().len();
    let posted = posted_up(&s, "ep");
    s.run_for(SimDuration::from_us(30));
    // Both DMAs failed at the instant they were asked for; nothing went up the link.
    let l = log(&s, "ep");
    let t5 = l[0].0;
    assert_eq!(
        l,
        vec![
            (t5, "bus master false".to_string()),
            (t0 + 10_000, "done false".to_string()),
            (t0 + 20_000, "done false".to_string()),
        ]
    );
    assert_eq!(posted_up(&s, "ep"), posted);
    assert_eq!(s.interrupts().len(), irqs);
    let mut b = [0u8; 64];
    s.host_read(base, &mut b);
    assert_eq!(b, [0; 64]);
    let e = s.errors().to_vec();
    assert_eq!(e.len(), 3, "{e:?}");
    assert!(e[0].is(FaultKind::BusMasterDisabled), "{e:?}");
    assert!(
        e[0].message.contains("DMA with Bus Master Enable clear"),
        "{e:?}"
    );
    assert!(e[2].is(FaultKind::BusMasterDisabled), "{e:?}");
    assert!(
        e[2].message.contains("MSI-X with Bus Master Enable clear"),
        "{e:?}"
    );
    // Set again: the next write and interrupt go out.
    set_bus_master(&mut s, ep, true);
    s.run_for(SimDuration::from_us(30));
    let l = log(&s, "ep");
    assert_eq!(l[3].1, "bus master true");
    assert_eq!(l[4].1, "done true");
    assert_eq!(s.interrupts().len(), irqs + 1);
    s.host_read(base + 64, &mut b);
    assert_eq!(b, [0x5a; 64]);
    assert_eq!(s.errors().len(), 3);
}

#[test]
fn a_bridge_without_bus_master_enable_refuses_upstream_requests_only() {
    let mut s = FabricSim::new(&switch_tree(1, false), &KindRegistry::builtin(), cfg()).unwrap();
    let base = s.alloc_dma(4096);
    let ep = s.bdf("ep").unwrap();
    let dsp = parent(&s, ep);
    let usp = parent(&s, dsp);
    let bar2 = s.bar("ep2", 0).unwrap();
    let probe = Probe {
        steps: vec![
            Step::Write(base),
            Step::Read(base),
            Step::Write(bar2),
            Step::Write(base + 64),
            Step::Read(base + 64),
        ],
        ..Probe::default()
    };
    let t0 = s.now().as_ps() / 1000;
    s.attach("ep", Box::new(probe)).unwrap();
    set_bus_master(&mut s, dsp, false);
    s.run_for(SimDuration::from_us(25));
    // The downstream port refused the write (posted: logged, nothing else) and
    // answered the read with Unsupported Request at once (no completion timeout).
    assert_ne!(uncorrectable(&mut s, dsp) & UNSUPPORTED, 0);
    assert_eq!(uncorrectable(&mut s, usp) & UNSUPPORTED, 0);
    let mut b = [0u8; 64];
    s.host_read(base, &mut b);
    assert_eq!(b, [0; 64]);
    let l = log(&s, "ep");
    assert_eq!(l[0], (t0 + 10_000, "done true".to_string()), "posted");
    assert_eq!(l[1].1, "done false");
    assert!(l[1].0 < t0 + 21_000, "UR, not a timeout: {l:?}");
    // Now the switch's upstream port refuses: peer-to-peer below it still works.
    let (_, a) = caps(&mut s, dsp);
    s.cfg_write(dsp, a + 4, UNSUPPORTED);
    set_bus_master(&mut s, dsp, true);
    set_bus_master(&mut s, usp, false);
    s.run_for(SimDuration::from_us(30));
    let HostRead::Done { data, .. } = s.mmio_read(bar2, 4).unwrap() else {
        panic!("ep2 answers");
    };
    assert_eq!(data, [0x5a; 4], "the peer-to-peer write arrived");
    assert_ne!(uncorrectable(&mut s, usp) & UNSUPPORTED, 0);
    assert_eq!(uncorrectable(&mut s, dsp) & UNSUPPORTED, 0);
    s.host_read(base + 64, &mut b);
    assert_eq!(b, [0; 64]);
    let l = log(&s, "ep");
    assert_eq!(l.len(), 5, "{l:?}");
    assert_eq!(l[4].1, "done false");
    assert!(l[4].0 < t0 + 51_000, "UR, not a timeout: {l:?}");
    // The device itself misbehaved in no way.
    assert!(s.errors().is_empty(), "{:?}", s.errors());
}

#[test]
fn an_msix_through_a_bridge_without_bus_master_enable_is_refused_there() {
    let mut s = FabricSim::new(&switch_tree(1, false), &KindRegistry::builtin(), cfg()).unwrap();
    let ep = s.bdf("ep").unwrap();
    let dsp = parent(&s, ep);
    let probe = Probe {
        steps: vec![Step::Msix, Step::Msix],
        ..Probe::default()
    };
    s.attach("ep", Box::new(probe)).unwrap();
    set_bus_master(&mut s, dsp, false);
    let irqs = s.interrupts().len();
    let posted = posted_up(&s, "ep");
    s.run_for(SimDuration::from_us(15));
    // The device sent it (its own bit is set); the port refused it as a memory write
    // from below: Unsupported Request, no interrupt.
    assert_eq!(posted_up(&s, "ep"), posted + 1);
    assert_ne!(uncorrectable(&mut s, dsp) & UNSUPPORTED, 0);
    assert_eq!(s.interrupts().len(), irqs);
    assert!(s.errors().is_empty(), "{:?}", s.errors());
    set_bus_master(&mut s, dsp, true);
    s.run_for(SimDuration::from_us(10));
    assert_eq!(s.interrupts().len(), irqs + 1);
    assert_eq!(s.interrupts()[irqs].1.from, ep);
}

#[test]
fn a_device_reset_by_a_link_failure_is_restored_and_its_stream_resumes() {
    let count = 400;
    let mut s = FabricSim::new(&one_link(), &KindRegistry::builtin(), cfg()).unwrap();
    let base = s.alloc_dma(count * 4096);
    s.attach("ep", write_stream(base, count)).unwrap();
    s.run_for(SimDuration::from_us(20));
    let saved = s.save_below("ep").unwrap();
    assert_eq!(saved.len(), 1);
    assert_eq!(saved[0].bdf, s.bdf("ep").unwrap());
    s.link_down("ep").unwrap();
    s.run_for(SimDuration::from_us(30));
    s.link_up("ep").unwrap();
    let up_called = s.now();
    let r = s.recover("ep", &saved).unwrap();
    // Trained, then the InitFC handshake.
    let trained = up_called + SimDuration::from_us(TRAINING_US);
    assert!(
        r.link_up_at > trained && r.link_up_at < trained + SimDuration::from_us(1),
        "{r:?}"
    );
    assert_eq!(
        r.restore_started_at,
        r.link_up_at + SimDuration::from_ms(100)
    );
    assert_eq!(r.failed_writes, 0);
    assert_eq!(r.writes as usize, saved[0].dwords.len());
    s.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    let rep = s.model("ep").unwrap().report().unwrap();
    assert_eq!(rep["dmas"], count, "{rep}");
    let failed = rep["failed"].as_u64().unwrap();
    assert!((1..=8).contains(&failed), "the window in flight: {rep}");
    // It resumed when the Command register (written last) set Bus Master Enable.
    let resumed = rep["resumed_at_ns"].as_f64().unwrap();
    let ns = |t: SimTime| t.as_ps() as f64 / 1000.0;
    assert!(
        resumed > ns(r.restore_started_at) && resumed <= ns(r.restored_at),
        "{rep} {r:?}"
    );
    // The DMAs after the failure (20 µs of 1 KiB writes at Gen3 x4 are < 100 DMAs)
    // wrote every byte.
    check_write_slots(&s, base, 100..count);
    assert_eq!(s.save_below("ep").unwrap(), saved);
    assert!(s.errors().is_empty(), "{:?}", s.errors());
}

#[test]
fn a_reset_switch_is_restored_parents_first_and_both_streams_resume() {
    let count = 300;
    let mut s = FabricSim::new(&switch_tree(1, false), &KindRegistry::builtin(), cfg()).unwrap();
    let (b1, b2) = (s.alloc_dma(count * 4096), s.alloc_dma(count * 4096));
    s.attach("ep", write_stream(b1, count)).unwrap();
    s.attach("ep2", write_stream(b2, count)).unwrap();
    s.run_for(SimDuration::from_us(20));
    let saved = s.save_below("sw").unwrap();
    let ep = s.bdf("ep").unwrap();
    let usp = parent(&s, parent(&s, ep));
    let order: Vec<Bdf> = saved.iter().map(|x| x.bdf).collect();
    assert_eq!(order.len(), 5, "{order:?}");
    assert_eq!(order[0], usp, "the upstream port first");
    assert_eq!(&order[3..], &[ep, s.bdf("ep2").unwrap()], "devices last");
    s.link_down("sw").unwrap();
    s.run_for(SimDuration::from_us(10));
    s.link_up("sw").unwrap();
    let r = s.recover("sw", &saved).unwrap();
    assert_eq!(r.failed_writes, 0, "{r:?}");
    s.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    for (name, base) in [("ep", b1), ("ep2", b2)] {
        let rep = s.model(name).unwrap().report().unwrap();
        assert_eq!(rep["dmas"], count, "{name}: {rep}");
        assert!(rep["failed"].as_u64().unwrap() > 0, "{name}: {rep}");
        assert!(rep["resumed_at_ns"].is_number(), "{name}: {rep}");
        check_write_slots(&s, base, 100..count);
    }
    assert_eq!(s.save_below("sw").unwrap(), saved);
}

#[test]
fn recovery_waits_for_the_link_and_says_when_it_never_comes() {
    let mut s = FabricSim::new(&one_link(), &KindRegistry::builtin(), cfg()).unwrap();
    s.attach("ep", Box::new(Probe::default())).unwrap();
    let saved = s.save_below("ep").unwrap();
    s.link_down("ep").unwrap();
    let t = s.now();
    let e = s.recover("ep", &saved).unwrap_err();
    assert!(matches!(e, SimError::Recovery(_)), "{e}");
    assert!(e.to_string().contains("still down"), "{e}");
    assert!(s.now() >= t + SimDuration::from_ms(2000));
    // The reset cleared Bus Master Enable without telling the model; the restore set
    // it again and did.
    s.link_up("ep").unwrap();
    s.recover("ep", &saved).unwrap();
    assert_eq!(
        log(&s, "ep").into_iter().map(|x| x.1).collect::<Vec<_>>(),
        vec!["bus master true".to_string()]
    );
    assert!(s.recover("nope", &saved).is_err());
    assert!(s.save_below("rc").is_err());
}

/// One link; a device that needs 5 ms to initialize after a reset, a 1 ms ready
/// wait, traced; a stream of `count` writes running for 5 µs. Returns its buffer.
fn slow_device(count: u64) -> (FabricSim, u64) {
    let mut s = FabricSim::new(
        &one_link(),
        &KindRegistry::builtin(),
        SimConfig {
            device_ready_time: SimDuration::from_ms(5),
            device_ready_wait: SimDuration::from_ms(1),
            trace: true,
            ..cfg()
        },
    )
    .unwrap();
    let base = s.alloc_dma(count * 4096);
    s.attach("ep", write_stream(base, count)).unwrap();
    s.run_for(SimDuration::from_us(5));
    (s, base)
}

#[test]
fn a_device_still_initializing_answers_crs_and_the_root_complex_retries() {
    let count = 100;
    let (mut s, base) = slow_device(count);
    let saved = s.save_below("ep").unwrap();
    s.link_down("ep").unwrap();
    s.run_for(SimDuration::from_us(10));
    s.link_up("ep").unwrap();
    let r = s.recover("ep", &saved).unwrap();
    assert_eq!(r.failed_writes, 0, "{r:?}");
    assert_eq!(r.restore_started_at, r.link_up_at + SimDuration::from_ms(1));
    // Ready 5 ms after training (just before DL_Active): the first write was
    // re-issued until then (every 10 µs plus its round trip), the other 26 follow.
    let ready = r.link_up_at + SimDuration::from_ms(5);
    assert!(r.restored_at + SimDuration::from_us(1) > ready, "{r:?}");
    assert!(r.restored_at < ready + SimDuration::from_us(50), "{r:?}");
    // On the wire: a Cpl with status CRS (010b) for every early try.
    let crs = crs_completions(&s);
    assert!((300..=400).contains(&crs), "{crs} CRS completions in 4 ms");
    s.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    let rep = s.model("ep").unwrap().report().unwrap();
    assert_eq!(rep["dmas"], count, "{rep}");
    check_write_slots(&s, base, 60..count);
}

/// Counts the Cpl TLPs with status CRS (010b) in the trace.
fn crs_completions(s: &FabricSim) -> usize {
    let tr = s.trace().unwrap();
    tr.records
        .iter()
        .map(|x| tr.bytes(x))
        .filter(|b| b.len() >= 12 && b[0] == 0x0a && b[6] >> 5 == 2)
        .count()
}

#[test]
fn with_crs_software_visibility_recovery_polls_the_vendor_id_as_linux_does() {
    let count = 100;
    let (mut s, _) = slow_device(count);
    let ep = s.bdf("ep").unwrap();
    let rp = parent(&s, ep);
    assert!(!s.crs_visible(ep));
    // Root Control (the low half of DW 0x1c of the PCIe capability): CRS SV Enable.
    let (p, _) = caps(&mut s, rp);
    let v = s.cfg_read(rp, p + 0x1c) & 0xffff;
    s.cfg_write(rp, p + 0x1c, v | 0x10);
    assert!(s.crs_visible(ep));
    // The real lspci sees the capability and the enable, as our decoder does.
    let text = lspci_vvv(&s, rp, "crs");
    let f = s.fabric().function_at(rp).unwrap();
    let ours = pcielab_config::decode::describe(s.fabric().functions[f.0 as usize].config.bytes());
    for want in ["RootCap: CRSVisible+", "PMEIntEna- CRSVisible+"] {
        assert!(text.contains(want), "{want} in\n{text}");
        assert!(ours.contains(want), "{want} in\n{ours}");
    }
    let saved = s.save_below("ep").unwrap();
    s.link_down("ep").unwrap();
    s.run_for(SimDuration::from_us(10));
    s.link_up("ep").unwrap();
    let r = s.recover("ep", &saved).unwrap();
    // Polls 1, 2 and 4 ms after the link came up read 0001h (the device answers CRS
    // until 5 ms); the one at 8 ms reads the device's ID, and the restore follows.
    let at8 = r.link_up_at + SimDuration::from_ms(8);
    assert!(
        r.restore_started_at > at8 && r.restore_started_at < at8 + SimDuration::from_us(5),
        "{r:?}"
    );
    assert_eq!(crs_completions(&s), 3);
    assert_eq!(r.failed_writes, 0);
    s.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    assert_eq!(s.model("ep").unwrap().report().unwrap()["dmas"], count);
}

#[test]
fn recovery_parameters_out_of_range_are_refused() {
    for (c, what) in [
        (
            SimConfig {
                device_ready_wait: SimDuration::from_ms(1001),
                ..cfg()
            },
            "device ready wait",
        ),
        (
            SimConfig {
                device_ready_time: SimDuration::from_ms(1001),
                ..cfg()
            },
            "device ready time",
        ),
        (
            SimConfig {
                crs_retry_delay: SimDuration::from_ns(10),
                ..cfg()
            },
            "CRS retry delay",
        ),
    ] {
        let e = FabricSim::new(&one_link(), &KindRegistry::builtin(), c).unwrap_err();
        assert!(e.to_string().contains(what), "{e}");
    }
}
