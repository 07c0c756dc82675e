//! Error signalling: what a function logs when it detects an error (AER status, Device
//! Status), when it sends ERR_COR/ERR_NONFATAL/ERR_FATAL (masks, severities, reporting
//! enables), and what the root port logs (Root Error Status, Error Source ID).

use crate::common::{hand_timing, switch_tree, Chatty};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{
    AddrPattern, DmaOpKind, DmaStream, ErrorSeverity, FabricSim, HostRead, SimConfig, TraceKind,
};
use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::tlp::{MsgCode, MsgRouting, TlpHeader, TlpRepr};
use pcielab_wire::Bdf;

/// (PCI Express capability, AER capability) offsets of `bdf`, found with config reads.
fn caps(sim: &mut FabricSim, bdf: Bdf) -> (u16, u16) {
    let mut pcie = 0;
    let mut at = (sim.cfg_read(bdf, 0x34) & 0xfc) as u16;
    while at != 0 {
        let h = sim.cfg_read(bdf, at);
        if h & 0xff == 0x10 {
            pcie = at;
        }
        at = ((h >> 8) & 0xfc) as u16;
    }
    let mut aer = 0x100u16;
    loop {
        let h = sim.cfg_read(bdf, aer);
        if h & 0xffff == 1 {
            break;
        }
        aer = (h >> 20) as u16;
        assert!(aer != 0, "no AER in {bdf}");
    }
    assert!(pcie != 0, "no PCI Express capability in {bdf}");
    (pcie, aer)
}

fn dev_status(sim: &mut FabricSim, bdf: Bdf) -> u32 {
    let (p, _) = caps(sim, bdf);
    sim.cfg_read(bdf, p + 8) >> 16
}

/// A device whose single DMA read outlives the completion timeout: the read times out
/// (Completion Timeout) and its completion then arrives unexpected.
fn late_completion(report: bool, trace: bool) -> (FabricSim, Bdf, Bdf) {
    let cfg = SimConfig {
        completion_timeout: SimDuration::from_ns(500),
        mem_latency: SimDuration::from_us(2),
        ..hand_timing(trace)
    };
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
        .any(|e| e.contains("completion timeout")));
    assert!(sim
        .errors()
        .iter()
        .any(|e| e.contains("unexpected completion")));
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
    for r in &t.records {
        if !matches!(r.kind, TraceKind::Tlp { .. }) {
            continue;
        }
        if let TlpHeader::Msg(h) = TlpRepr::parse_bytes(t.bytes(r)).unwrap().header {
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
    assert!(t
        .records
        .iter()
        .filter(|r| matches!(r.kind, TraceKind::Tlp { .. }))
        .all(|r| !matches!(
            TlpRepr::parse_bytes(t.bytes(r)).unwrap().header,
            TlpHeader::Msg(_)
        )));
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
    let mut sim = FabricSim::new(
        &switch_tree(5, false),
        &KindRegistry::builtin(),
        hand_timing(false),
    )
    .unwrap();
    let ep = sim.bdf("ep").unwrap();
    let down = sim.tree().get(ep).unwrap().parent.unwrap();
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
