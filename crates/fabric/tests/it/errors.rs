//! Error signalling: what a function logs when it detects an error (AER status, Device
//! Status), when it sends ERR_COR/ERR_NONFATAL/ERR_FATAL (masks, severities, reporting
//! enables), and what the root port logs (Root Error Status, Error Source ID).

use crate::common::{
    caps, dev_status, disable_msi, hand_sim, hand_timing, msi_of, parent, switch_tree, trace_tlps,
    Chatty,
};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::FaultKind;
use pcielab_fabric::timed::{
    AddrPattern, DmaOpKind, DmaStream, ErrorSeverity, FabricSim, HostRead, SimConfig,
};
use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::tlp::{MsgCode, MsgRouting, TlpHeader};
use pcielab_wire::Bdf;

/// A device whose single DMA read outlives the completion timeout: the read times out
/// (Completion Timeout) and its completion then arrives unexpected.
fn late_completion(report: bool, trace: bool) -> (FabricSim, Bdf, Bdf) {
    late_completion_with(report, trace, |_| {})
}

/// [`late_completion`], with `setup` configuring the fabric before the DMA.
fn late_completion_with(
    report: bool,
    trace: bool,
    setup: impl Fn(&mut FabricSim),
) -> (FabricSim, Bdf, Bdf) {
    let mut cfg = SimConfig {
        completion_timeout: SimDuration::from_ns(500),
        mem_latency: SimDuration::from_us(2),
        ..hand_timing(trace)
    };
    // One posted header credit per port: a credit the fabric failed to return would
    // stall every later posted TLP through that port.
    cfg.port_buffer.hdr[0] = 1;
    let mut sim = FabricSim::new(&switch_tree(5, false), &KindRegistry::builtin(), cfg).unwrap();
    let ep = sim.bdf("ep").unwrap();
    let rp = Bdf::new(0, 1, 0).unwrap();
    if report {
        // Correctable Error Reporting Enable, and Advisory Non-Fatal unmasked.
        let (p, a) = caps(&mut sim, ep);
        let dc = sim.cfg_read(ep, p + 8);
        sim.cfg_write(ep, p + 8, (dc & 0xffff) | 1);
        sim.cfg_write(ep, a + 0x14, 0);
    }
    setup(&mut sim);
    let base = sim.alloc_dma(4096);
    sim.attach(
        "ep",
        Box::new(DmaStream::new(
            DmaOpKind::Read,
            64,
            1,
            1,
            base,
            4096,
            AddrPattern::Sequential,
        )),
    )
    .unwrap();
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    (sim, ep, rp)
}

#[test]
fn late_completion_is_logged_as_advisory_and_reported_with_err_cor() {
    let (mut sim, ep, rp) = late_completion(true, true);
    assert!(sim
        .errors()
        .iter()
        .any(|e| e.is(FaultKind::CompletionTimeout) && e.message.contains("completion timeout")));
    assert!(sim
        .errors()
        .iter()
        .any(|e| e.is(FaultKind::UnexpectedCompletion)
            && e.message.contains("unexpected completion")));
    // The endpoint: Completion Timeout (bit 14) and Unexpected Completion (bit 16) in
    // Uncorrectable Error Status, both Non-Fatal by default, so Advisory Non-Fatal
    // (Correctable Error Status bit 13) and Correctable Error Detected in Device Status.
    let (_, a) = caps(&mut sim, ep);
    assert_eq!(
        sim.cfg_read(ep, a + 4) & (1 << 14 | 1 << 16),
        1 << 14 | 1 << 16
    );
    assert_eq!(sim.cfg_read(ep, a + 0x10) & (1 << 13), 1 << 13);
    assert_eq!(dev_status(&mut sim, ep) & 0b111, 0b001);
    // Two ERR_COR messages reached root port 00:01.0, from the endpoint.
    let msgs = sim.error_messages().to_vec();
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    for (_, m) in &msgs {
        assert_eq!((m.root_port, m.source), (rp, ep));
        assert_eq!(m.severity, ErrorSeverity::Correctable);
    }
    // Root Error Status: ERR_COR Received and Multiple ERR_COR Received; the source ID
    // of the first in Error Source Identification [15:0].
    let (_, ra) = caps(&mut sim, rp);
    assert_eq!(sim.cfg_read(rp, ra + 0x30) & 0x7f, 0b11);
    assert_eq!(sim.cfg_read(rp, ra + 0x34) & 0xffff, ep.raw() as u32);
    // On the wire: ERR_COR, routed to the root complex, on both links up.
    let t = sim.trace().unwrap();
    let mut seen = Vec::new();
    for (r, p) in trace_tlps(t) {
        if let TlpHeader::Msg(h) = p.header {
            assert_eq!(h.code, MsgCode::ErrCor);
            assert_eq!(h.routing, MsgRouting::ToRc);
            assert_eq!(h.requester_id, ep);
            seen.push(t.dir_names[r.dir as usize].clone());
        }
    }
    assert_eq!(seen, ["ep->sw.0", "sw->rc.0", "ep->sw.0", "sw->rc.0"]);
    // The messages arrive in order, each a switch traversal after it left.
    assert!(msgs[0].0 < msgs[1].0);
}

#[test]
fn without_reporting_enabled_errors_are_only_logged() {
    let (mut sim, ep, rp) = late_completion(false, true);
    let (_, a) = caps(&mut sim, ep);
    assert_eq!(
        sim.cfg_read(ep, a + 4) & (1 << 14 | 1 << 16),
        1 << 14 | 1 << 16
    );
    assert_eq!(dev_status(&mut sim, ep) & 1, 1);
    assert!(sim.error_messages().is_empty());
    let (_, ra) = caps(&mut sim, rp);
    assert_eq!(sim.cfg_read(rp, ra + 0x30) & 0x7f, 0);
    let t = sim.trace().unwrap();
    assert!(trace_tlps(t).all(|(_, p)| !matches!(p.header, TlpHeader::Msg(_))));
}

/// An MMIO read answered with too much data: the root port receives a Malformed TLP
/// (Fatal by default). `setup` configures the root port first.
fn malformed_at_root_port(setup: impl Fn(&mut FabricSim, Bdf, u16, u16)) -> (FabricSim, Bdf) {
    let cfg = SimConfig {
        completion_timeout: SimDuration::from_us(50),
        ..SimConfig::default()
    };
    let mut sim = FabricSim::new(&switch_tree(5, false), &KindRegistry::builtin(), cfg).unwrap();
    let rp = Bdf::new(0, 1, 0).unwrap();
    let (p, a) = caps(&mut sim, rp);
    setup(&mut sim, rp, p, a);
    sim.attach("ep", Box::new(Chatty)).unwrap();
    let bar = sim.bar("ep", 0).unwrap();
    assert_eq!(sim.mmio_read(bar, 4).unwrap(), HostRead::Timeout);
    (sim, rp)
}

#[test]
fn malformed_tlp_is_fatal_and_the_root_port_logs_its_own_err_fatal() {
    // Fatal Error Reporting Enable on the root port.
    let (mut sim, rp) = malformed_at_root_port(|sim, rp, p, _| {
        let dc = sim.cfg_read(rp, p + 8);
        sim.cfg_write(rp, p + 8, (dc & 0xffff) | 4);
    });
    let (_, a) = caps(&mut sim, rp);
    assert_eq!(sim.cfg_read(rp, a + 4) & (1 << 18), 1 << 18);
    assert_eq!(
        dev_status(&mut sim, rp) & 0b111,
        0b100,
        "Fatal Error Detected"
    );
    let msgs = sim.error_messages().to_vec();
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert_eq!((msgs[0].1.root_port, msgs[0].1.source), (rp, rp));
    assert_eq!(msgs[0].1.severity, ErrorSeverity::Fatal);
    // ERR_FATAL/NONFATAL Received, First Uncorrectable Fatal, Fatal Error Messages
    // Received; the source in Error Source Identification [31:16].
    assert_eq!(sim.cfg_read(rp, a + 0x30) & 0x7f, 0x04 | 0x10 | 0x40);
    assert_eq!(sim.cfg_read(rp, a + 0x34) >> 16, rp.raw() as u32);
}

#[test]
fn masks_severity_and_serr_decide_the_message() {
    // Masked in Uncorrectable Error Mask: logged in Device Status, no message.
    let (mut sim, rp) = malformed_at_root_port(|sim, rp, p, a| {
        let dc = sim.cfg_read(rp, p + 8);
        sim.cfg_write(rp, p + 8, (dc & 0xffff) | 4);
        sim.cfg_write(rp, a + 8, 1 << 18);
    });
    assert_eq!(dev_status(&mut sim, rp) & 0b100, 0b100);
    assert!(sim.error_messages().is_empty());
    // SERR# Enable in Command reports it without the Device Control enable.
    let (sim, _) = malformed_at_root_port(|sim, rp, _, _| {
        let cmd = sim.cfg_read(rp, 4);
        sim.cfg_write(rp, 4, (cmd & 0xffff) | 0x100);
    });
    assert_eq!(sim.error_messages().len(), 1);
    assert_eq!(sim.error_messages()[0].1.severity, ErrorSeverity::Fatal);
    // Severity set to Non-Fatal: ERR_NONFATAL, and Non-Fatal Error Detected.
    let (mut sim, rp) = malformed_at_root_port(|sim, rp, p, a| {
        let dc = sim.cfg_read(rp, p + 8);
        sim.cfg_write(rp, p + 8, (dc & 0xffff) | 2);
        let sev = sim.cfg_read(rp, a + 0x0c);
        sim.cfg_write(rp, a + 0x0c, sev & !(1 << 18));
    });
    assert_eq!(dev_status(&mut sim, rp) & 0b111, 0b010);
    let msgs = sim.error_messages().to_vec();
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert_eq!(msgs[0].1.severity, ErrorSeverity::NonFatal);
    let (_, a) = caps(&mut sim, rp);
    assert_eq!(sim.cfg_read(rp, a + 0x30) & 0x7f, 0x04 | 0x20);
}

#[test]
fn a_completer_answering_ur_logs_it_and_may_report_err_cor() {
    let mut sim = hand_sim(5, false);
    let ep = sim.bdf("ep").unwrap();
    let down = parent(&sim, ep);
    let rp = Bdf::new(0, 1, 0).unwrap();
    // A Type 0 request to device 3 below the downstream port: the port answers UR and
    // logs Unsupported Request Detected (Device Status bit 3) and AER status bit 20.
    let absent = Bdf::new(ep.bus(), 3, 0).unwrap();
    assert!(matches!(
        sim.config_read(absent, 0).unwrap(),
        HostRead::Failed(pcielab_wire::CplStatus::Ur)
    ));
    let (_, a) = caps(&mut sim, down);
    assert_eq!(dev_status(&mut sim, down) & 0b1001, 0b1001);
    assert_eq!(sim.cfg_read(down, a + 4) & (1 << 20), 1 << 20);
    assert!(sim.error_messages().is_empty(), "not enabled: no message");
    // The endpoint itself took nothing.
    assert_eq!(dev_status(&mut sim, ep) & 0b1000, 0);
    // With Correctable Error Reporting and ANFE unmasked on the port: ERR_COR from it.
    let (p, _) = caps(&mut sim, down);
    let dc = sim.cfg_read(down, p + 8);
    sim.cfg_write(down, p + 8, (dc & 0xffff) | 1);
    sim.cfg_write(down, a + 0x14, 0);
    sim.config_read(absent, 0).unwrap();
    sim.run_for(SimDuration::from_us(2));
    let msgs = sim.error_messages().to_vec();
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert_eq!((msgs[0].1.root_port, msgs[0].1.source), (rp, down));
    assert_eq!(msgs[0].1.severity, ErrorSeverity::Correctable);
}

/// The links an error message (a TLP of the Msg format) was seen on, in order.
fn message_links(sim: &FabricSim) -> Vec<String> {
    let t = sim.trace().unwrap();
    trace_tlps(t)
        .filter(|(_, p)| matches!(p.header, TlpHeader::Msg(_)))
        .map(|(r, _)| t.dir_names[r.dir as usize].clone())
        .collect()
}

/// Runs `count` DMA writes of `size` bytes (`window` in flight) from "ep" to the end
/// and checks that every one finished without error.
fn write_stream(sim: &mut FabricSim, size: u64, window: u32, count: u64) {
    let region = (size * count).next_power_of_two().max(4096);
    let base = sim.alloc_dma(region);
    let s = DmaStream::new(
        DmaOpKind::Write,
        size,
        window,
        count,
        base,
        region,
        AddrPattern::Sequential,
    );
    sim.attach("ep", Box::new(s)).unwrap();
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    let rep = sim.model("ep").unwrap().report().unwrap();
    assert_eq!(
        (rep["dmas"].as_u64(), rep["failed"].as_u64()),
        (Some(count), Some(0))
    );
}

/// Clears SERR# Enable (bit 1) in the Bridge Control register of `bdf`.
fn block_errors(sim: &mut FabricSim, bdf: Bdf) {
    let v = sim.cfg_read(bdf, 0x3c);
    sim.cfg_write(bdf, 0x3c, v & !(2 << 16));
}

#[test]
fn bridge_control_serr_enable_gates_forwarding_at_every_bridge() {
    let (sim, ep, rp) = late_completion(true, true);
    let down = parent(&sim, ep);
    let up = parent(&sim, down);
    assert_eq!(sim.tree().get(up).unwrap().parent, Some(rp));
    // Enumeration set SERR# Enable in every bridge, as Linux does.
    let mut s = sim;
    for b in [rp, up, down] {
        assert_eq!(s.cfg_read(b, 0x3c) >> 16 & 2, 2, "{b}");
    }
    assert_eq!(s.error_messages().len(), 2);
    // Cleared in the downstream port or the upstream port: the switch drops the
    // messages after the first link; cleared in the root port: they cross both links
    // and the root port does not log them. The endpoint logs its errors either way.
    for (blocked, links) in [
        (down, vec!["ep->sw.0"; 2]),
        (up, vec!["ep->sw.0"; 2]),
        (rp, vec!["ep->sw.0", "sw->rc.0", "ep->sw.0", "sw->rc.0"]),
    ] {
        let (mut sim, ep, rp) = late_completion_with(true, true, |sim| block_errors(sim, blocked));
        assert!(sim.error_messages().is_empty(), "blocked at {blocked}");
        assert_eq!(message_links(&sim), links, "blocked at {blocked}");
        let (_, a) = caps(&mut sim, ep);
        assert_eq!(sim.cfg_read(ep, a + 0x10) & (1 << 13), 1 << 13);
        let (_, ra) = caps(&mut sim, rp);
        assert_eq!(sim.cfg_read(rp, ra + 0x30) & 0x7f, 0);
        // The dropped messages' credits came back (one posted header credit per port):
        // posted writes still flow through the switch.
        write_stream(&mut sim, 64, 1, 4);
    }
}

#[test]
fn a_downstream_ports_own_message_needs_the_upstream_ports_serr_enable() {
    let mut sim = hand_sim(5, false);
    let ep = sim.bdf("ep").unwrap();
    let down = parent(&sim, ep);
    let up = parent(&sim, down);
    let (p, a) = caps(&mut sim, down);
    let dc = sim.cfg_read(down, p + 8);
    sim.cfg_write(down, p + 8, (dc & 0xffff) | 1);
    sim.cfg_write(down, a + 0x14, 0);
    // The port's own ERR_COR (it answers UR for an absent device) does not cross its
    // own Bridge Control gate (it is sent on its primary side), only the upstream
    // port's.
    block_errors(&mut sim, down);
    let absent = Bdf::new(ep.bus(), 3, 0).unwrap();
    sim.config_read(absent, 0).unwrap();
    sim.run_for(SimDuration::from_us(2));
    assert_eq!(sim.error_messages().len(), 1);
    block_errors(&mut sim, up);
    sim.config_read(absent, 0).unwrap();
    sim.run_for(SimDuration::from_us(2));
    assert_eq!(
        sim.error_messages().len(),
        1,
        "the upstream port dropped it"
    );
    assert_eq!(sim.cfg_read(down, a + 0x10) & (1 << 13), 1 << 13);
}

fn from(sim: &FabricSim, f: Bdf) -> Vec<(u64, u32)> {
    sim.interrupts()
        .iter()
        .filter(|(_, i)| i.from == f)
        .map(|(_, i)| (i.address, i.data))
        .collect()
}

#[test]
fn root_error_command_raises_one_msi_per_rising_condition() {
    // Correctable Error Reporting Enable in Root Error Command before the errors: two
    // ERR_COR arrive, one MSI (the condition rises once; the second finds ERR_COR
    // Received still set).
    let (mut sim, _, rp) = late_completion_with(true, false, |sim| {
        let rp = Bdf::new(0, 1, 0).unwrap();
        let (_, ra) = caps(sim, rp);
        sim.cfg_write(rp, ra + 0x2c, 1);
    });
    let msi = msi_of(&mut sim, rp);
    assert_eq!(sim.error_messages().len(), 2);
    assert_eq!(from(&sim, rp), [msi]);
    // The interrupt came with the first message.
    let first = sim.error_messages()[0].0;
    let t = sim
        .interrupts()
        .iter()
        .find(|(_, i)| i.from == rp)
        .unwrap()
        .0;
    assert_eq!(t, first);
    // Software clears the status (RW1C): no interrupt; enabling Non-Fatal reporting
    // with nothing received: none either.
    let (_, ra) = caps(&mut sim, rp);
    sim.cfg_write(rp, ra + 0x30, 0x7f);
    assert_eq!(sim.cfg_read(rp, ra + 0x30) & 0x7f, 0);
    sim.cfg_write(rp, ra + 0x2c, 3);
    assert_eq!(from(&sim, rp).len(), 1);

    // Reporting disabled during the errors: no interrupt; enabling it while ERR_COR
    // Received is set raises one at once; enabling another kind does not.
    let (mut sim, _, rp) = late_completion(true, false);
    assert!(from(&sim, rp).is_empty());
    let (_, ra) = caps(&mut sim, rp);
    sim.cfg_write(rp, ra + 0x2c, 4);
    assert!(
        from(&sim, rp).is_empty(),
        "Fatal enable: nothing fatal received"
    );
    sim.cfg_write(rp, ra + 0x2c, 5);
    let msi = msi_of(&mut sim, rp);
    assert_eq!(from(&sim, rp), [msi]);
    assert_eq!(sim.interrupts().last().unwrap().0, sim.now());
    // Interrupt Status stays clear in MSI mode.
    assert_eq!(sim.cfg_read(rp, 4) >> 16 & 8, 0);
}

#[test]
fn root_error_command_drives_intx_without_msi() {
    let rp0 = Bdf::new(0, 1, 0).unwrap();
    // MSI off on the root port: the virtual INTx wire follows the condition.
    let (mut sim, _, rp) = late_completion_with(true, false, |sim| {
        disable_msi(sim, rp0);
        let (_, ra) = caps(sim, rp0);
        sim.cfg_write(rp0, ra + 0x2c, 1);
    });
    assert!(from(&sim, rp).is_empty(), "no MSI");
    let pin = (sim.cfg_read(rp, 0x3c) >> 8 & 0xff) as u8;
    assert_eq!(pin, 1);
    let ev: Vec<_> = sim
        .intx_events()
        .iter()
        .filter(|(_, e)| e.from == rp)
        .collect();
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert!(ev[0].1.asserted);
    assert_eq!((ev[0].1.root_port, ev[0].1.pin), (rp, pin));
    assert_eq!(ev[0].0, sim.error_messages()[0].0);
    assert_eq!(sim.cfg_read(rp, 4) >> 16 & 8, 8, "Interrupt Status");
    // Interrupt Disable drops the wire but not Interrupt Status; clearing it raises
    // the wire again; clearing the status deasserts it.
    let cmd = sim.cfg_read(rp, 4) & 0xffff;
    sim.cfg_write(rp, 4, cmd | 0x400);
    sim.cfg_write(rp, 4, cmd);
    let (_, ra) = caps(&mut sim, rp);
    sim.cfg_write(rp, ra + 0x30, 0x7f);
    let ev: Vec<bool> = sim
        .intx_events()
        .iter()
        .filter(|(_, e)| e.from == rp)
        .map(|(_, e)| e.asserted)
        .collect();
    assert_eq!(ev, [true, false, true, false]);
    assert_eq!(sim.cfg_read(rp, 4) >> 16 & 8, 0, "Interrupt Status cleared");
}

/// A lossy write stream through the switch: (the simulation, ep, its downstream port,
/// the upstream port, the root port). `setup` configures the fabric first.
fn lossy_stream(setup: impl Fn(&mut FabricSim, [Bdf; 4])) -> (FabricSim, [Bdf; 4]) {
    let cfg = SimConfig {
        error_rate: 0.3,
        dllp_error_rate: 0.2,
        ..hand_timing(false)
    };
    let mut sim = FabricSim::new(&switch_tree(11, false), &KindRegistry::builtin(), cfg).unwrap();
    let ep = sim.bdf("ep").unwrap();
    let down = parent(&sim, ep);
    let up = parent(&sim, down);
    let rp = Bdf::new(0, 1, 0).unwrap();
    let f = [ep, down, up, rp];
    setup(&mut sim, f);
    write_stream(&mut sim, 1024, 8, 64);
    (sim, f)
}

fn correctable(sim: &mut FabricSim, f: Bdf) -> u32 {
    let (_, a) = caps(sim, f);
    sim.cfg_read(f, a + 0x10)
}

#[test]
fn link_errors_are_logged_as_correctable_errors_where_they_are_detected() {
    let (mut sim, [ep, down, up, rp]) = lossy_stream(|_, _| {});
    let c: std::collections::HashMap<String, _> = sim.counters().into_iter().collect();
    // (direction, its receiver, its transmitter)
    for (dir, rx, tx) in [
        ("ep->sw.0", down, ep),
        ("sw.0->ep", ep, down),
        ("sw->rc.0", rp, up),
        ("rc.0->sw", up, rp),
    ] {
        let k = &c[dir];
        let (rs, ts) = (correctable(&mut sim, rx), correctable(&mut sim, tx));
        // Bad TLP where corrupted TLPs were received, Replay Timer Timeout and
        // REPLAY_NUM Rollover at the transmitter that had them.
        assert_eq!(rs & 1 << 6 != 0, k.corrupted > 0, "{dir}: {rs:#x} {k:?}");
        if k.replay_timeouts > 0 {
            assert_ne!(ts & 1 << 12, 0, "{dir}: {ts:#x}");
        }
        if k.retrains > 0 {
            assert_ne!(ts & 1 << 8, 0, "{dir}: {ts:#x}");
        }
        // DLLPs travel both ways: with a fifth of them lost, every port saw Bad DLLPs.
        assert_ne!(rs & 1 << 7, 0, "{dir}: Bad DLLP at {rx}");
        assert_eq!(
            dev_status(&mut sim, rx) & 1,
            1,
            "Correctable Error Detected"
        );
    }
    let total = |f: fn(&pcielab_fabric::timed::DirCounters) -> u64| c.values().map(f).sum::<u64>();
    assert!(total(|k| k.corrupted) > 10 && total(|k| k.replay_timeouts) > 0);
    // Reporting is off: nothing was sent.
    assert!(sim.error_messages().is_empty());
}

#[test]
fn correctable_link_errors_send_err_cor_when_enabled_and_unmasked() {
    // Correctable Error Reporting on the downstream port and the root port; Bad TLP
    // masked on the downstream port.
    let enable = |sim: &mut FabricSim, f: Bdf| {
        let (p, _) = caps(sim, f);
        let dc = sim.cfg_read(f, p + 8);
        sim.cfg_write(f, p + 8, (dc & 0xffff) | 1);
    };
    let (sim, [_, down, _, rp]) = lossy_stream(|sim, [_, down, _, rp]| {
        enable(sim, down);
        enable(sim, rp);
        let (_, a) = caps(sim, down);
        sim.cfg_write(down, a + 0x14, 0x2000 | 1 << 6);
    });
    let msgs = sim.error_messages().to_vec();
    assert!(!msgs.is_empty());
    let from = |f: Bdf| msgs.iter().filter(|(_, m)| m.source == f).count();
    assert!(msgs
        .iter()
        .all(|(_, m)| m.severity == ErrorSeverity::Correctable && m.root_port == rp));
    assert!(from(down) > 0, "the port's Bad DLLPs and replay errors");
    assert!(from(rp) > 0, "the root port logs its own");
    assert_eq!(from(down) + from(rp), msgs.len());
    // The masked Bad TLP was logged but not reported: unmasked, the port sends many
    // more messages (one per Bad TLP too).
    let mut sim = sim;
    assert_ne!(correctable(&mut sim, down) & 1 << 6, 0);
    let (unmasked, _) = lossy_stream(|sim, [_, down, _, rp]| {
        enable(sim, down);
        enable(sim, rp);
    });
    let n = unmasked
        .error_messages()
        .iter()
        .filter(|(_, m)| m.source == down)
        .count();
    assert!(n > from(down) + 10, "unmasked {n}, masked {}", from(down));
}

/// The four Header Log DWs and the First Error Pointer of `f`.
fn header_log(sim: &mut FabricSim, f: Bdf) -> ([u32; 4], u32) {
    let (_, a) = caps(sim, f);
    let log = std::array::from_fn(|i| sim.cfg_read(f, a + 0x1c + 4 * i as u16));
    (log, sim.cfg_read(f, a + 0x18) & 0x1f)
}

/// The configuration request a Header Log holds: (type 1, target, register).
fn logged_cfg(log: [u32; 4]) -> (bool, Bdf, u16) {
    let bytes: Vec<u8> = log.iter().flat_map(|w| w.to_be_bytes()).collect();
    // A 3-DW header: the wire codec reads it from the first 12 bytes.
    let p = pcielab_wire::tlp::TlpRepr::parse_bytes(&bytes[..12])
        .unwrap_or_else(|e| panic!("{e}: {log:08x?}"));
    let TlpHeader::Cfg(h) = p.header else {
        panic!("not a configuration request: {:?}", p.header)
    };
    (h.type1, h.target, h.register)
}

#[test]
fn the_header_log_keeps_the_first_error_until_software_clears_it() {
    let cfg = hand_timing(true);
    let mut sim = FabricSim::new(&switch_tree(5, false), &KindRegistry::builtin(), cfg).unwrap();
    let ep = sim.bdf("ep").unwrap();
    let down = parent(&sim, ep);
    let (_, a) = caps(&mut sim, down);
    assert_eq!(
        header_log(&mut sim, down),
        ([0; 4], 0),
        "nothing logged yet"
    );
    let absent = |dev| Bdf::new(ep.bus(), dev, 0).unwrap();
    // The downstream port answers UR for device 3 below it: First Error Pointer 20
    // (Unsupported Request) and the header of the request it refused.
    sim.config_read(absent(3), 0x10).unwrap();
    let (log, fep) = header_log(&mut sim, down);
    assert_eq!(fep, 20);
    assert_eq!(logged_cfg(log), (true, absent(3), 0x10 >> 2));
    // The logged header is the request's header as it crossed the link into the switch.
    let t = sim.trace().unwrap();
    let (r, _) = trace_tlps(t)
        .filter(|(_, p)| matches!(p.header, TlpHeader::Cfg(h) if h.target == absent(3)))
        .last()
        .expect("the request is in the trace");
    let wire: Vec<u8> = log.iter().flat_map(|w| w.to_be_bytes()).collect();
    assert_eq!(&wire[..12], &t.bytes(r)[..12]);
    assert_eq!(
        &wire[12..],
        [0; 4],
        "a 3-DW header leaves the fourth DW zero"
    );
    // A second UR while bit 20 is still set: status unchanged, the log locked.
    sim.config_read(absent(4), 0x14).unwrap();
    assert_eq!(header_log(&mut sim, down), (log, 20));
    // Software clears Unsupported Request (RW1C): the next error takes the log.
    sim.cfg_write(down, a + 4, 1 << 20);
    assert_eq!(sim.cfg_read(down, a + 4) & (1 << 20), 0);
    sim.config_read(absent(5), 0x18).unwrap();
    let (log, fep) = header_log(&mut sim, down);
    assert_eq!((fep, logged_cfg(log)), (20, (true, absent(5), 0x18 >> 2)));
    // Masked: the status bit is set, but neither the pointer nor the log moves.
    sim.cfg_write(down, a + 4, 1 << 20);
    sim.cfg_write(down, a + 8, 1 << 20);
    sim.config_read(absent(6), 0x1c).unwrap();
    assert_eq!(sim.cfg_read(down, a + 4) & (1 << 20), 1 << 20);
    assert_eq!(header_log(&mut sim, down), (log, 20));
}

#[test]
fn a_completion_timeout_logs_the_request_that_timed_out() {
    // Completion Timeout (bit 14) comes first: the log holds the read request as it
    // went on the wire (Completion Timeout Prefix/Header Log Capable); the Unexpected
    // Completion (bit 16) that follows finds the log taken.
    let (mut sim, ep, _) = late_completion(false, true);
    let (_, a) = caps(&mut sim, ep);
    assert_eq!(
        sim.cfg_read(ep, a + 4) & (1 << 14 | 1 << 16),
        1 << 14 | 1 << 16
    );
    assert_eq!(sim.cfg_read(ep, a + 0x18) & (1 << 12), 1 << 12, "HdrLogCap");
    let (log, fep) = header_log(&mut sim, ep);
    assert_eq!(fep, 14);
    let t = sim.trace().unwrap();
    let (r, p) = trace_tlps(t)
        .find(|(_, p)| matches!(p.header, TlpHeader::Mem(h) if h.requester_id == ep))
        .expect("the read request is in the trace");
    let TlpHeader::Mem(h) = p.header else {
        unreachable!()
    };
    let n = if h.four_dw { 16 } else { 12 };
    let wire: Vec<u8> = log.iter().flat_map(|w| w.to_be_bytes()).collect();
    assert_eq!(&wire[..n], &t.bytes(r)[..n]);
    assert!(wire[n..].iter().all(|&b| b == 0));
    // Without the timeout's status bit the pointer is free again: the late completion
    // of a second run is then logged with its header (a CplD to the endpoint).
    let (mut sim, ep, _) = late_completion_with(false, false, |sim| {
        let ep = sim.bdf("ep").unwrap();
        let (_, a) = caps(sim, ep);
        sim.cfg_write(ep, a + 8, 1 << 14); // Completion Timeout masked
    });
    let (log, fep) = header_log(&mut sim, ep);
    assert_eq!(fep, 16);
    // A header without its payload: read with the packet view's field accessors.
    let bytes: Vec<u8> = log.iter().flat_map(|w| w.to_be_bytes()).collect();
    let p = pcielab_wire::tlp::TlpPacket::new_unchecked(&bytes[..]);
    assert_eq!(p.kind(), Some(pcielab_wire::tlp::TlpKind::CplD));
    assert_eq!(p.header_len(), 12);
    assert_eq!(p.requester_id(), ep);
    assert_eq!(p.status(), pcielab_wire::CplStatus::Sc);
    assert_eq!(p.length_dw(), 16, "the 64-byte read's completion");
}

/// The Header Log of `f` as 16 bytes.
fn header_log_bytes(s: &mut FabricSim, f: Bdf, aer: u16) -> Vec<u8> {
    (0..4)
        .flat_map(|i| s.cfg_read(f, aer + 0x1c + 4 * i).to_be_bytes())
        .collect()
}

#[test]
fn multiple_header_recording_keeps_the_headers_of_later_errors() {
    // Six poisoned writes reach ep: with Multiple Header Recording enabled the first
    // is in the Header Log, the next four are recorded behind it, the sixth overflows
    // (Header Log Overflow, a correctable error). Each time software clears the
    // Poisoned TLP status bit, the next recorded header moves into the log.
    let cfg = SimConfig {
        trace: true,
        ..SimConfig::default()
    };
    let mut s = FabricSim::new(&switch_tree(1, false), &KindRegistry::builtin(), cfg).unwrap();
    let ep = s.bdf("ep").unwrap();
    let (_, a) = caps(&mut s, ep);
    let ctl = s.cfg_read(ep, a + 0x18);
    assert_eq!(ctl & (1 << 9), 1 << 9, "Multiple Header Recording Capable");
    s.cfg_write(ep, a + 0x18, ctl | 1 << 10);
    let bar = s.bar("ep", 0).unwrap();
    for i in 0..6u64 {
        s.mmio_write_poisoned(bar + 0x40 * i, &[9; 4]).unwrap();
    }
    s.run_for(SimDuration::from_us(5));
    // The writes as ep received them, encoded by the codec.
    let writes: Vec<Vec<u8>> = trace_tlps(s.trace().unwrap())
        .filter(|(rec, r)| {
            r.kind() == pcielab_wire::tlp::TlpKind::MWr
                && s.trace().unwrap().dir_names[rec.dir as usize].ends_with("->ep")
        })
        .map(|(rec, _)| s.trace().unwrap().bytes(rec)[..12].to_vec())
        .collect();
    assert_eq!(writes.len(), 6);
    const POISONED: u32 = 1 << 12;
    const OVERFLOW: u32 = 1 << 15;
    assert_eq!(s.cfg_read(ep, a + 4) & POISONED, POISONED);
    assert_eq!(s.cfg_read(ep, a + 0x10) & OVERFLOW, OVERFLOW);
    for (i, w) in writes.iter().enumerate().take(5) {
        assert_eq!(s.cfg_read(ep, a + 0x18) & 0x1f, 12, "First Error Pointer");
        assert_eq!(&header_log_bytes(&mut s, ep, a)[..12], &w[..], "header {i}");
        s.cfg_write(ep, a + 4, POISONED);
    }
    // The sixth was not recorded: the status bit stays clear and the log as it was.
    assert_eq!(s.cfg_read(ep, a + 4) & POISONED, 0);
    assert_eq!(&header_log_bytes(&mut s, ep, a)[..12], &writes[4][..]);
    // Without Multiple Header Recording only the first is kept.
    s.cfg_write(ep, a + 0x18, ctl & !(1 << 10));
    s.cfg_write(ep, a + 0x10, OVERFLOW);
    for i in 0..3u64 {
        s.mmio_write_poisoned(bar + 0x40 * i, &[9; 4]).unwrap();
    }
    s.run_for(SimDuration::from_us(5));
    s.cfg_write(ep, a + 4, POISONED);
    s.run_for(SimDuration::from_us(1));
    assert_eq!(
        s.cfg_read(ep, a + 4) & POISONED,
        0,
        "nothing recorded behind"
    );
    assert_eq!(
        s.cfg_read(ep, a + 0x10) & OVERFLOW,
        0,
        "no overflow without recording"
    );
}
