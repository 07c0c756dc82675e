//! Power-management events: a device's PME_Status and PME_En (PMCSR), the PM_PME
//! message and its service-timeout re-sends, the root port's Root Status (PME Status,
//! PME Requester ID, PME Pending) and its PME interrupt (MSI edges, INTx level).

use crate::common::{cap_offset, caps, disable_msi, hand_timing, msi_of, ser_gen3x4, trace_tlps};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::FaultKind;
use pcielab_fabric::timed::{Endpoint, EpCx, FabricSim, SimConfig};
use pcielab_fabric::topology::Topology;
use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::tlp::{MsgCode, MsgRouting, TlpHeader};
use pcielab_wire::Bdf;

/// Signals a PME `delay` after it is attached.
#[derive(Debug)]
struct Waker {
    delay: SimDuration,
}

impl Endpoint for Waker {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        cx.timer(self.delay, 0);
    }
    fn timer(&mut self, _token: u64, cx: &mut EpCx<'_>) {
        cx.pme();
    }
}

/// Attaches to `name` a device that signals a PME `ns` nanoseconds later.
fn wake(sim: &mut FabricSim, name: &str, ns: u64) {
    let delay = SimDuration::from_ns(ns);
    sim.attach(name, Box::new(Waker { delay })).unwrap();
}

const RP: Bdf = match Bdf::new(0, 1, 0) {
    Ok(b) => b,
    Err(_) => panic!("root port BDF"),
};
/// Root Status: PME Status, PME Pending.
const PME_STATUS: u32 = 1 << 16;
const PME_PENDING: u32 = 1 << 17;
/// PMCSR: PME_Status, PME_En.
const PMCSR_STATUS: u32 = 1 << 15;
const PMCSR_EN: u32 = 1 << 8;

/// RC ─ switch ─ ep, ep2 (Gen3 x4, psmem with PME support when `pme`), hand timing,
/// links trained; `tweak` adjusts the configuration.
fn sim(pme: bool, tweak: impl FnOnce(&mut SimConfig)) -> FabricSim {
    let p = if pme { "pme = true\n" } else { "" };
    let text = format!(
        "seed = 3\n[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n\
         [[node]]\nname=\"sw\"\nkind=\"switch\"\nports=2\n\
         [[node]]\nname=\"ep\"\nkind=\"psmem\"\n{p}\
         [[node]]\nname=\"ep2\"\nkind=\"psmem\"\n{p}\
         [[link]]\nup=\"rc.0\"\ndown=\"sw\"\ngen=3\nwidth=4\n\
         [[link]]\nup=\"sw.0\"\ndown=\"ep\"\ngen=3\nwidth=4\n\
         [[link]]\nup=\"sw.1\"\ndown=\"ep2\"\ngen=3\nwidth=4\n"
    );
    let reg = KindRegistry::builtin();
    let topo = Topology::parse(&text, "pme.toml", &reg).unwrap();
    let mut cfg = hand_timing(true);
    tweak(&mut cfg);
    let mut sim = FabricSim::new(&topo, &reg, cfg).unwrap();
    sim.run_for(SimDuration::from_us(5));
    sim
}

/// Offset of the PM capability of `bdf`.
fn pm(sim: &mut FabricSim, bdf: Bdf) -> u16 {
    cap_offset(sim, bdf, 0x01)
}

fn pmcsr(sim: &mut FabricSim, bdf: Bdf) -> u32 {
    let at = pm(sim, bdf);
    sim.cfg_read(bdf, at + 4) & 0xffff
}

/// Writes PMCSR (PowerState D0 kept).
fn set_pmcsr(sim: &mut FabricSim, bdf: Bdf, v: u32) {
    let at = pm(sim, bdf);
    sim.cfg_write(bdf, at + 4, v);
}

fn root_status(sim: &mut FabricSim) -> u32 {
    let (p, _) = caps(sim, RP);
    sim.cfg_read(RP, p + 0x20)
}

/// Sets PME Interrupt Enable in the root port's Root Control.
fn enable_pme_interrupt(sim: &mut FabricSim) {
    let (p, _) = caps(sim, RP);
    let v = sim.cfg_read(RP, p + 0x1c) & 0xffff;
    sim.cfg_write(RP, p + 0x1c, v | 1 << 3);
}

/// Clears PME Status (RW1C).
fn clear_root_status(sim: &mut FabricSim) {
    let (p, _) = caps(sim, RP);
    sim.cfg_write(RP, p + 0x20, PME_STATUS);
}

/// MSIs the root port sent: (time, address, data).
fn root_msis(sim: &FabricSim) -> Vec<(SimTime, u64, u32)> {
    sim.interrupts()
        .iter()
        .filter(|(_, i)| i.from == RP)
        .map(|(t, i)| (*t, i.address, i.data))
        .collect()
}

#[test]
fn pm_pme_reaches_the_root_port_after_the_hand_computed_time_and_raises_its_msi() {
    let mut sim = sim(true, |_| {});
    let ep = sim.bdf("ep").unwrap();
    set_pmcsr(&mut sim, ep, PMCSR_EN);
    enable_pme_interrupt(&mut sim);
    let t0 = sim.now();
    wake(&mut sim, "ep", 200);
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    let got = sim.pme_messages().to_vec();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].1.root_port, got[0].1.requester), (RP, ep));
    // A 4 DW message without data (16 bytes) plus 8 bytes of Gen3 framing, on two
    // links; the switch (150 ns) and the root complex (100 ns) in between.
    let want = 200_000 + 2 * (ser_gen3x4(24) + 5_000) + 150_000 + 100_000;
    assert_eq!((got[0].0 - t0).as_ps(), want);
    // Root Status: PME Status with the requester's ID, nothing pending.
    assert_eq!(root_status(&mut sim), PME_STATUS | ep.raw() as u32);
    // One MSI, at the message's arrival, with the root port's own address and data
    // (the PME vector: Interrupt Message Number 0).
    let (addr, data) = msi_of(&mut sim, RP);
    assert_eq!(root_msis(&sim), [(got[0].0, addr, data)]);
    // The device's PME_Status is set (and stays set until software clears it).
    assert_eq!(
        pmcsr(&mut sim, ep) & (PMCSR_STATUS | PMCSR_EN),
        PMCSR_STATUS | PMCSR_EN
    );
    // On the wire, decoded by the codec: a Msg with code PM_PME routed to the root
    // complex, from ep, on both links up.
    let tr = sim.trace().unwrap();
    let mut links = 0;
    for (_, t) in trace_tlps(tr) {
        if let TlpHeader::Msg(m) = t.header {
            if m.code == MsgCode::PmPme {
                assert_eq!(m.routing, MsgRouting::ToRc);
                assert_eq!(m.requester_id, ep);
                assert!(t.payload.is_empty());
                links += 1;
            }
        }
    }
    assert_eq!(links, 2);
}

#[test]
fn pme_en_gates_the_message_and_setting_it_while_pme_status_is_set_sends_one() {
    let mut sim = sim(true, |_| {});
    let ep = sim.bdf("ep").unwrap();
    wake(&mut sim, "ep", 10);
    sim.run_for(SimDuration::from_us(5));
    // PME_Status is set whatever PME_En says; no message without PME_En.
    assert_eq!(pmcsr(&mut sim, ep) & PMCSR_STATUS, PMCSR_STATUS);
    assert!(sim.pme_messages().is_empty());
    assert_eq!(root_status(&mut sim) & PME_STATUS, 0);
    // Software sets PME_En: the PME is asserted now, and the message goes out.
    let t = sim.now();
    set_pmcsr(&mut sim, ep, PMCSR_EN);
    sim.run_for(SimDuration::from_us(5));
    let got = sim.pme_messages().to_vec();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].1.requester, ep);
    assert_eq!(
        (got[0].0 - t).as_ps(),
        2 * (ser_gen3x4(24) + 5_000) + 150_000 + 100_000
    );
    // PME Interrupt Enable off: no interrupt. Setting it with PME Status already set
    // raises one at once.
    assert!(root_msis(&sim).is_empty());
    enable_pme_interrupt(&mut sim);
    let msis = root_msis(&sim);
    assert_eq!(msis.len(), 1);
    assert_eq!(msis[0].0, sim.now());
}

#[test]
fn an_unserviced_pme_is_resent_every_service_timeout_until_software_clears_pme_status() {
    // Without the periodic UpdateFC every message takes exactly the same time, so the
    // arrivals are exactly one service timeout apart.
    let mut sim = sim(true, |c| {
        c.pme_service_timeout = SimDuration::from_us(10);
        c.fc_update_period = SimDuration::ZERO;
    });
    let ep = sim.bdf("ep").unwrap();
    set_pmcsr(&mut sim, ep, PMCSR_EN);
    enable_pme_interrupt(&mut sim);
    wake(&mut sim, "ep", 10);
    // The re-sends are background work: a run until idle ends after the first message.
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    assert_eq!(sim.pme_messages().len(), 1);
    sim.run_for(SimDuration::from_us(35));
    let times: Vec<u64> = sim.pme_messages().iter().map(|(t, _)| t.as_ps()).collect();
    assert_eq!(times.len(), 4, "{times:?}");
    for w in times.windows(2) {
        assert_eq!(w[1] - w[0], 10_000_000);
    }
    // The root port records the requester once: re-sends are neither queued nor
    // interrupts of their own.
    assert_eq!(root_status(&mut sim), PME_STATUS | ep.raw() as u32);
    assert_eq!(root_msis(&sim).len(), 1);
    // Software clears the device's PME_Status (RW1C, PME_En kept): the re-sends stop.
    set_pmcsr(&mut sim, ep, PMCSR_STATUS | PMCSR_EN);
    assert_eq!(pmcsr(&mut sim, ep) & (PMCSR_STATUS | PMCSR_EN), PMCSR_EN);
    sim.run_for(SimDuration::from_us(50));
    assert_eq!(sim.pme_messages().len(), 4);
    // A new event asserts it again: one more message.
    wake(&mut sim, "ep", 10);
    sim.run_for(SimDuration::from_us(5));
    assert_eq!(sim.pme_messages().len(), 5);
}

#[test]
fn the_default_service_timeout_is_the_spec_100_ms() {
    let mut sim = sim(true, |c| c.fc_update_period = SimDuration::ZERO);
    let ep = sim.bdf("ep").unwrap();
    set_pmcsr(&mut sim, ep, PMCSR_EN);
    wake(&mut sim, "ep", 10);
    sim.run_for(SimDuration::from_ms(250));
    let times: Vec<u64> = sim.pme_messages().iter().map(|(t, _)| t.as_ps()).collect();
    assert_eq!(times.len(), 3, "{times:?}");
    assert_eq!(times[1] - times[0], 100_000_000_000);
    assert_eq!(times[2] - times[1], 100_000_000_000);
}

/// PME enabled in both devices and the root port's PME interrupt; ep signals a PME at
/// 10 ns, ep2 at 1 µs; run until idle.
fn two_wake_ups() -> (FabricSim, Bdf, Bdf) {
    let mut sim = sim(true, |_| {});
    let (ep, ep2) = (sim.bdf("ep").unwrap(), sim.bdf("ep2").unwrap());
    set_pmcsr(&mut sim, ep, PMCSR_EN);
    set_pmcsr(&mut sim, ep2, PMCSR_EN);
    enable_pme_interrupt(&mut sim);
    wake(&mut sim, "ep", 10);
    wake(&mut sim, "ep2", 1000);
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    (sim, ep, ep2)
}

#[test]
fn a_second_pme_waits_as_pending_until_software_clears_pme_status() {
    let (mut sim, ep, ep2) = two_wake_ups();
    assert_eq!(sim.pme_messages().len(), 2);
    // The first requester is recorded; the second is pending.
    assert_eq!(
        root_status(&mut sim),
        PME_STATUS | PME_PENDING | ep.raw() as u32
    );
    assert_eq!(root_msis(&sim).len(), 1);
    // Software services the first (clears PME Status): the port delivers the second,
    // which is a new interrupt.
    clear_root_status(&mut sim);
    assert_eq!(root_status(&mut sim), PME_STATUS | ep2.raw() as u32);
    let msis = root_msis(&sim);
    assert_eq!(msis.len(), 2);
    assert_eq!(msis[1].0, sim.now());
    // Serviced too: nothing left, no interrupt.
    clear_root_status(&mut sim);
    assert_eq!(root_status(&mut sim) & (PME_STATUS | PME_PENDING), 0);
    assert_eq!(root_msis(&sim).len(), 2);
}

#[test]
fn the_pme_interrupt_is_an_intx_level_without_msi() {
    let mut sim = sim(true, |_| {});
    let ep = sim.bdf("ep").unwrap();
    // MSI off on the root port.
    disable_msi(&mut sim, RP);
    set_pmcsr(&mut sim, ep, PMCSR_EN);
    enable_pme_interrupt(&mut sim);
    wake(&mut sim, "ep", 10);
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    let arrival = sim.pme_messages()[0].0;
    let wire = |sim: &FabricSim| -> Vec<(SimTime, bool)> {
        sim.intx_events()
            .iter()
            .filter(|(_, e)| e.from == RP)
            .map(|(t, e)| (*t, e.asserted))
            .collect()
    };
    assert_eq!(wire(&sim), [(arrival, true)]);
    assert!(root_msis(&sim).is_empty());
    assert_eq!(sim.cfg_read(RP, 4) >> 16 & 8, 8, "Interrupt Status");
    clear_root_status(&mut sim);
    let now = sim.now();
    assert_eq!(wire(&sim), [(arrival, true), (now, false)]);
    assert_eq!(sim.cfg_read(RP, 4) >> 16 & 8, 0, "Interrupt Status");
}

#[test]
fn a_device_without_pme_support_signals_nothing_and_the_error_is_recorded() {
    let mut sim = sim(false, |_| {});
    let ep = sim.bdf("ep").unwrap();
    // PME_En is read-only zero without PME support.
    set_pmcsr(&mut sim, ep, PMCSR_EN);
    assert_eq!(pmcsr(&mut sim, ep) & PMCSR_EN, 0);
    wake(&mut sim, "ep", 10);
    sim.run_for(SimDuration::from_us(5));
    assert!(sim.pme_messages().is_empty());
    assert_eq!(pmcsr(&mut sim, ep) & PMCSR_STATUS, 0);
    let errs = sim.errors();
    assert!(
        errs.iter().any(|e| e.is(FaultKind::PowerManagement)
            && e.message.contains("PME")
            && e.message.contains(&ep.to_string())),
        "{errs:?}"
    );
}

#[test]
fn a_bad_service_timeout_is_rejected() {
    let reg = KindRegistry::builtin();
    let topo = crate::common::switch_tree(1, false);
    for bad in [SimDuration::from_ns(500), SimDuration::from_ms(1500)] {
        let cfg = SimConfig {
            pme_service_timeout: bad,
            ..SimConfig::default()
        };
        let Err(e) = FabricSim::new(&topo, &reg, cfg) else {
            panic!("{bad:?} accepted");
        };
        assert!(e.to_string().contains("pme service timeout"), "{e}");
    }
}

/// The real `lspci` (pciutils) decodes what the simulation left in configuration
/// space: the root port's Root Control and Root Status, the device's PMCSR.
#[test]
fn lspci_decodes_root_status_and_pmcsr_after_a_pme() {
    let (sim, ep, ep2) = two_wake_ups();
    let path = std::env::temp_dir().join(format!("pcielab-{}-pme.lspci", std::process::id()));
    std::fs::write(&path, sim.fabric().lspci_dump()).unwrap();
    let out = std::process::Command::new("lspci")
        .arg("-F")
        .arg(&path)
        .arg("-vvv")
        .output()
        .expect("lspci runs (pciutils)");
    let _ = std::fs::remove_file(&path);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let block = |bdf: Bdf| -> String {
        let head = format!("{bdf} ");
        let mut lines = text.lines().skip_while(|l| !l.starts_with(&head));
        let first = lines.next().unwrap_or_else(|| panic!("{bdf} in\n{text}"));
        std::iter::once(first)
            .chain(lines.take_while(|l| l.starts_with(char::is_whitespace)))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let rp = block(RP);
    let want = format!(
        "RootSta: PME ReqID {:04x}, PMEStatus+ PMEPending+",
        ep.raw()
    );
    assert!(rp.contains(&want), "want {want:?} in\n{rp}");
    assert!(rp.contains("PMEIntEna+"), "{rp}");
    // Our own decoder prints the same line.
    let f = sim.fabric().function_at(RP).unwrap();
    let ours =
        pcielab_config::decode::describe(sim.fabric().functions[f.0 as usize].config.bytes());
    assert!(ours.contains(&want), "want {want:?} in\n{ours}");
    assert!(ours.contains("PMEIntEna+"), "{ours}");
    for d in [ep, ep2] {
        let b = block(d);
        assert!(
            b.contains("PME-Enable+") && b.contains(" PME+"),
            "PME_En and PME_Status in\n{b}"
        );
    }
}

// ------------------------------------------------------------ PME_Turn_Off / PME_TO_Ack

/// Holds its PME_TO_Ack for `hold` (as a device finishing its work would), or forever
/// with `None`.
#[derive(Debug)]
struct Holder {
    hold: Option<SimDuration>,
}

impl Endpoint for Holder {
    fn pme_turn_off(&mut self, cx: &mut EpCx<'_>) -> bool {
        if let Some(h) = self.hold {
            cx.timer(h, 7);
        }
        false
    }
    fn timer(&mut self, token: u64, cx: &mut EpCx<'_>) {
        assert_eq!(token, 7);
        cx.pme_to_ack();
    }
}

/// One hop of a 4 DW message without data on Gen3 x4 (16 bytes + 8 of framing) plus
/// the 5 ns of propagation, in ps.
fn msg_hop() -> u64 {
    ser_gen3x4(24) + 5_000
}

/// Turns the root port's tree off; the round trip in ps.
fn turn_off(sim: &mut FabricSim) -> u64 {
    let took = sim.pme_turn_off(RP, SimDuration::from_ms(1)).unwrap();
    took.expect("acknowledged").as_ps()
}

/// The round trip when every device answers at once: the root complex (100 ns), down
/// to the switch (150 ns), down to each device, up to the switch (150 ns), up to the
/// root complex (100 ns): four hops in all, the two device links in parallel.
fn prompt_round_trip() -> u64 {
    100_000 + 4 * msg_hop() + 150_000 + 150_000 + 100_000
}

#[test]
fn pme_turn_off_is_copied_down_both_ports_and_the_switch_sends_one_gathered_ack() {
    let mut sim = sim(false, |_| {});
    let (ep, ep2) = (sim.bdf("ep").unwrap(), sim.bdf("ep2").unwrap());
    assert_eq!(turn_off(&mut sim), prompt_round_trip());
    let acks = sim.pme_to_acks().to_vec();
    let usp = sim.bdf("sw").unwrap();
    assert_eq!(acks.len(), 1, "{acks:?}");
    assert_eq!((acks[0].1.root_port, acks[0].1.requester), (RP, usp));
    // On the wire, decoded by the codec: three PME_Turn_Off (root port to switch,
    // switch to each device), broadcast, all with the root port's ID; three
    // PME_TO_Ack, gathered, from each device and then from the switch's upstream port.
    let mut offs = 0;
    let mut ack_from = Vec::new();
    for (_, t) in trace_tlps(sim.trace().unwrap()) {
        let TlpHeader::Msg(m) = t.header else {
            continue;
        };
        assert!(t.payload.is_empty());
        match m.code {
            MsgCode::PmeTurnOff => {
                assert_eq!((m.routing, m.requester_id), (MsgRouting::Broadcast, RP));
                offs += 1;
            }
            MsgCode::PmeToAck => {
                assert_eq!(m.routing, MsgRouting::Gathered);
                ack_from.push(m.requester_id);
            }
            _ => {}
        }
    }
    assert_eq!(offs, 3);
    ack_from.sort();
    let mut want = vec![ep, ep2, usp];
    want.sort();
    assert_eq!(ack_from, want);
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
}

#[test]
fn the_switch_waits_for_its_slowest_port_and_a_device_may_hold_its_ack() {
    let mut sim = sim(false, |_| {});
    sim.attach(
        "ep2",
        Box::new(Holder {
            hold: Some(SimDuration::from_us(2)),
        }),
    )
    .unwrap();
    // ep answers at once, ep2 2 µs later: the switch's answer waits for ep2's.
    assert_eq!(turn_off(&mut sim), prompt_round_trip() + 2_000_000);
    assert_eq!(sim.pme_to_acks().len(), 1);
}

#[test]
fn a_device_that_never_acknowledges_times_the_turn_off_out() {
    let mut sim = sim(false, |_| {});
    sim.attach("ep", Box::new(Holder { hold: None })).unwrap();
    let t0 = sim.now();
    let to = SimDuration::from_us(50);
    assert_eq!(sim.pme_turn_off(RP, to).unwrap(), None);
    assert!(sim.now() - t0 <= to);
    assert!(sim.pme_to_acks().is_empty());
}

/// Acknowledges without having been asked.
#[derive(Debug)]
struct Eager;

impl Endpoint for Eager {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        cx.pme_to_ack();
    }
}

#[test]
fn bad_turn_off_requests_are_refused_with_the_reason() {
    let mut sim = sim(false, |_| {});
    let ep = sim.bdf("ep").unwrap();
    let e = sim
        .pme_turn_off(ep, SimDuration::from_us(10))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("not a root port") && e.contains(&ep.to_string()),
        "{e}"
    );
    // A PME_TO_Ack with no PME_Turn_Off to answer is not sent; the error names the
    // device.
    sim.attach("ep2", Box::new(Eager)).unwrap();
    sim.run_for(SimDuration::from_us(5));
    let ep2 = sim.bdf("ep2").unwrap();
    assert!(
        sim.errors().iter().any(|x| x.is(FaultKind::PowerManagement)
            && x.message.contains("PME_TO_Ack without a PME_Turn_Off")
            && x.message.contains(&ep2.to_string())),
        "{:?}",
        sim.errors()
    );
    let acks = trace_tlps(sim.trace().unwrap())
        .filter(|(_, t)| matches!(t.header, TlpHeader::Msg(m) if m.code == MsgCode::PmeToAck))
        .count();
    assert_eq!(acks, 0);
}
