//! Vendor-defined messages: routed to the root complex or by ID (host → device, device
//! → root complex, device → device), with and without payload; what an unsupporting
//! receiver does (Type 0: Unsupported Request, Type 1: silently dropped); the bytes on
//! the wire; bad payloads.

use crate::common::{caps, dev_status, ser_gen3x4, trace_tlps, trained_sim};
use pcielab_fabric::timed::FaultKind;
use pcielab_fabric::timed::{Endpoint, EpCx, FabricSim, VdmRoute, VendorMessage};
use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::tlp::{MsgCode, MsgRouting, TlpHeader};
use pcielab_wire::Bdf;
use std::sync::{Arc, Mutex};

/// A device that sends `send` when attached and records (and takes, if `takes`) what
/// it receives.
#[derive(Debug, Default)]
struct Mctp {
    send: Option<VendorMessage>,
    takes: bool,
    got: Arc<Mutex<Vec<(SimTime, Bdf, VendorMessage)>>>,
}

impl Endpoint for Mctp {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        if let Some(m) = self.send.take() {
            cx.vendor_message(m);
        }
    }
    fn vendor_message(&mut self, from: Bdf, msg: &VendorMessage, cx: &mut EpCx<'_>) -> bool {
        self.got.lock().unwrap().push((cx.now(), from, msg.clone()));
        self.takes
    }
}

/// The switch tree with its links initialized (the InitFC handshakes done).
fn sim(trace: bool) -> FabricSim {
    trained_sim(5, trace)
}

/// AER Uncorrectable Error Status of `bdf`.
fn uncorrectable(sim: &mut FabricSim, bdf: Bdf) -> u32 {
    let (_, aer) = caps(sim, bdf);
    sim.cfg_read(bdf, aer + 4)
}

#[test]
fn a_device_message_reaches_the_root_complex_after_the_hand_computed_time() {
    let mut sim = sim(true);
    let ep = sim.bdf("ep").unwrap();
    let msg = VendorMessage::new(
        VdmRoute::RootComplex,
        0x1ab4,
        0xdead_beef,
        (1..=8).collect(),
    );
    let t0 = sim.now();
    sim.attach(
        "ep",
        Box::new(Mctp {
            send: Some(msg.clone()),
            ..Mctp::default()
        }),
    )
    .unwrap();
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    let got = sim.vendor_messages().to_vec();
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].1, &got[0].2), (ep, &msg));
    // 4 DW header + 2 DW payload + 8 bytes of Gen3 framing, on two links; the switch
    // (150 ns) and the root complex (100 ns) in between; 5 ns propagation per link.
    let want = 2 * (ser_gen3x4(32) + 5_000) + 150_000 + 100_000;
    assert_eq!((got[0].0 - t0).as_ps(), want);
    // On the wire (decoded by the codec from the trace): a MsgD, Vendor_Defined_Type_1,
    // routed to the root complex, with the Vendor ID, vendor data and payload.
    let t = sim.trace().unwrap();
    let mut seen = 0;
    for (_, p) in trace_tlps(t) {
        if let TlpHeader::Msg(h) = p.header {
            assert_eq!(h.code, MsgCode::VendorDefinedType1);
            assert_eq!(h.routing, MsgRouting::ToRc);
            assert_eq!(h.requester_id, ep);
            assert_eq!(h.fields.vendor_id(), 0x1ab4);
            assert_eq!(h.fields.vendor_data(), 0xdead_beef);
            assert_eq!(p.payload, &msg.payload[..]);
            seen += 1;
        }
    }
    assert_eq!(seen, 2, "one per link");
}

#[test]
fn messages_routed_by_id_reach_the_device_model() {
    let mut sim = sim(true);
    let (ep, ep2) = (sim.bdf("ep").unwrap(), sim.bdf("ep2").unwrap());
    let got = Arc::new(Mutex::new(Vec::new()));
    sim.attach(
        "ep2",
        Box::new(Mctp {
            takes: true,
            got: got.clone(),
            ..Mctp::default()
        }),
    )
    .unwrap();
    // Host → ep2, without payload (a Msg): after the root complex's latency.
    let m = VendorMessage::new(VdmRoute::Id(ep2), 0x8086, 42, vec![]);
    let t0 = sim.now();
    sim.send_vendor_message(&m).unwrap();
    // ep → ep2, peer to peer through the switch, Type 0 with payload.
    let p2p = VendorMessage {
        type1: false,
        ..VendorMessage::new(VdmRoute::Id(ep2), 0x8086, 43, vec![9; 16])
    };
    sim.attach(
        "ep",
        Box::new(Mctp {
            send: Some(p2p.clone()),
            ..Mctp::default()
        }),
    )
    .unwrap();
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    let got = got.lock().unwrap().clone();
    assert_eq!(got.len(), 2, "{got:?}");
    let host = Bdf::new(0, 0, 0).unwrap();
    let from_host = got.iter().find(|g| g.1 == host).unwrap();
    assert_eq!(from_host.2, m);
    // Root complex 100 ns, then down two links (4 DW + 8 framing each) and the switch.
    let want = 100_000 + 2 * (ser_gen3x4(24) + 5_000) + 150_000;
    assert_eq!((from_host.0 - t0).as_ps(), want);
    let from_ep = got.iter().find(|g| g.1 == ep).unwrap();
    assert_eq!(from_ep.2, p2p);
    // Taken: nothing logged; the root complex saw neither.
    assert_eq!(uncorrectable(&mut sim, ep2) & (1 << 20), 0);
    assert!(sim.vendor_messages().is_empty());
    // The peer message stayed below the switch (routed by ID, never on the RC link).
    let t = sim.trace().unwrap();
    let links: Vec<_> = trace_tlps(t)
        .filter_map(|(r, p)| match p.header {
            TlpHeader::Msg(h) if h.requester_id == ep => {
                assert_eq!(
                    (h.routing, h.fields.destination_id()),
                    (MsgRouting::ById, ep2)
                );
                assert_eq!(h.code, MsgCode::VendorDefinedType0);
                Some(t.dir_names[r.dir as usize].clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(links, ["ep->sw.0", "sw.1->ep2"]);
}

#[test]
fn an_unsupporting_receiver_reports_type_0_and_drops_type_1() {
    for (type1, ur) in [(true, 0), (false, 1 << 20)] {
        let mut sim = sim(false);
        let ep = sim.bdf("ep").unwrap();
        let got = Arc::new(Mutex::new(Vec::new()));
        sim.attach(
            "ep",
            Box::new(Mctp {
                takes: false,
                got: got.clone(),
                ..Mctp::default()
            }),
        )
        .unwrap();
        let m = VendorMessage {
            type1,
            ..VendorMessage::new(VdmRoute::Id(ep), 0x1234, 1, vec![0; 4])
        };
        sim.send_vendor_message(&m).unwrap();
        sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
        assert_eq!(got.lock().unwrap().len(), 1, "offered to the model");
        assert_eq!(uncorrectable(&mut sim, ep) & (1 << 20), ur, "type1 {type1}");
        // Unsupported Request Detected in Device Status follows the AER bit.
        assert_eq!(dev_status(&mut sim, ep) & 8, ur >> 17, "URD");
    }
}

#[test]
fn bad_payloads_and_destinations_are_errors() {
    let mut sim = sim(false);
    let ep = sim.bdf("ep").unwrap();
    for payload in [vec![0u8; 3], vec![0u8; 260]] {
        let e = sim
            .send_vendor_message(&VendorMessage::new(VdmRoute::Id(ep), 1, 0, payload))
            .unwrap_err()
            .to_string();
        assert!(e.contains("vendor-defined message payload"), "{e}");
    }
    let nobody = Bdf::new(0x40, 0, 0).unwrap();
    let e = sim
        .send_vendor_message(&VendorMessage::new(VdmRoute::Id(nobody), 1, 0, vec![]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("not routable"), "{e}");
    // A device's bad message is recorded, not sent, and nothing panics.
    sim.attach(
        "ep",
        Box::new(Mctp {
            send: Some(VendorMessage::new(VdmRoute::RootComplex, 1, 0, vec![0; 6])),
            ..Mctp::default()
        }),
    )
    .unwrap();
    sim.run_for(SimDuration::from_us(1));
    assert!(sim.vendor_messages().is_empty());
    assert!(sim.errors().iter().any(|e| e.is(FaultKind::VendorMessage)
        && e.message
            .contains("ep: vendor-defined message payload of 6 bytes")));
}

#[test]
fn a_broadcast_reaches_every_device_copied_by_the_switch() {
    let mut sim = sim(true);
    let (ep, ep2) = (sim.bdf("ep").unwrap(), sim.bdf("ep2").unwrap());
    let host = Bdf::new(0, 0, 0).unwrap();
    let (got, got2) = (Arc::default(), Arc::default());
    for (name, g) in [("ep", &got), ("ep2", &got2)] {
        let m = Mctp {
            takes: true,
            got: Arc::clone(g),
            ..Mctp::default()
        };
        sim.attach(name, Box::new(m)).unwrap();
    }
    // An MCTP-style discovery broadcast with one DW of payload.
    let msg = VendorMessage::new(VdmRoute::Broadcast, 0x1ab4, 0x0a0b_0c0d, vec![1, 2, 3, 4]);
    let t0 = sim.now();
    sim.send_vendor_message(&msg).unwrap();
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    // The root complex (100 ns), a hop, the switch (150 ns), a hop: 4 DW header + 1 DW
    // payload + 8 bytes of framing per hop, 5 ns propagation.
    let want = 100_000 + 2 * (ser_gen3x4(28) + 5_000) + 150_000;
    for (g, dev) in [(&got, ep), (&got2, ep2)] {
        let g = g.lock().unwrap().clone();
        assert_eq!(g.len(), 1, "{dev}: {g:?}");
        assert_eq!((g[0].1, &g[0].2), (host, &msg), "{dev}");
        assert_eq!((g[0].0 - t0).as_ps(), want, "{dev}");
    }
    // On the wire: three copies (root port to switch, switch to each device), each a
    // MsgD routed "broadcast from the root complex" with the same fields and payload.
    let mut copies = 0;
    for (_, p) in trace_tlps(sim.trace().unwrap()) {
        if let TlpHeader::Msg(h) = p.header {
            assert_eq!(h.code, MsgCode::VendorDefinedType1);
            assert_eq!((h.routing, h.requester_id), (MsgRouting::Broadcast, host));
            assert_eq!(&h.fields.0[2..8], &[0x1a, 0xb4, 0x0a, 0x0b, 0x0c, 0x0d]);
            assert_eq!(p.payload, &[1, 2, 3, 4]);
            copies += 1;
        }
    }
    assert_eq!(copies, 3);
    assert!(sim.vendor_messages().is_empty(), "the root complex sent it");
}

#[test]
fn an_unsupported_type_0_broadcast_is_logged_by_each_device() {
    let mut sim = sim(false);
    let m = VendorMessage {
        type1: false,
        ..VendorMessage::new(VdmRoute::Broadcast, 0x1ab4, 0, vec![])
    };
    sim.send_vendor_message(&m).unwrap();
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    for name in ["ep", "ep2"] {
        let b = sim.bdf(name).unwrap();
        assert_eq!(uncorrectable(&mut sim, b) & (1 << 20), 1 << 20, "{name}");
    }
    // The switch forwards it without taking it.
    let sw = sim.bdf("sw").unwrap();
    assert_eq!(uncorrectable(&mut sim, sw) & (1 << 20), 0);
}

#[test]
fn a_local_message_ends_at_the_port_above_the_device() {
    for type1 in [true, false] {
        let mut sim = sim(true);
        let ep = sim.bdf("ep").unwrap();
        let port = crate::common::parent(&sim, ep);
        let m = VendorMessage {
            type1,
            ..VendorMessage::new(VdmRoute::Local, 0x1ab4, 5, vec![])
        };
        sim.attach(
            "ep",
            Box::new(Mctp {
                send: Some(m),
                ..Mctp::default()
            }),
        )
        .unwrap();
        sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
        // One link only: the switch's downstream port receives it and supports none.
        let on_wire: Vec<_> = trace_tlps(sim.trace().unwrap())
            .filter_map(|(_, p)| match p.header {
                TlpHeader::Msg(h) => Some((h.routing, h.requester_id)),
                _ => None,
            })
            .collect();
        assert_eq!(on_wire, [(MsgRouting::Local, ep)], "type1 {type1}");
        assert!(sim.vendor_messages().is_empty());
        let ur = if type1 { 0 } else { 1 << 20 };
        assert_eq!(
            uncorrectable(&mut sim, port) & (1 << 20),
            ur,
            "type1 {type1}"
        );
        assert!(sim.errors().is_empty(), "{:?}", sim.errors());
    }
}

#[test]
fn a_local_message_below_a_root_port_reaches_the_root_complex() {
    let text = "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n\
                [[node]]\nname=\"m\"\nkind=\"psmem\"\n\
                [[link]]\nup=\"rc.0\"\ndown=\"m\"\ngen=3\nwidth=4\n";
    let reg = pcielab_fabric::kinds::KindRegistry::builtin();
    let topo = pcielab_fabric::topology::Topology::parse(text, "t.toml", &reg).unwrap();
    let mut sim = FabricSim::new(&topo, &reg, crate::common::hand_timing(false)).unwrap();
    sim.run_for(SimDuration::from_us(5));
    let m = VendorMessage::new(VdmRoute::Local, 0x1ab4, 9, vec![0; 8]);
    let t0 = sim.now();
    sim.attach(
        "m",
        Box::new(Mctp {
            send: Some(m.clone()),
            ..Mctp::default()
        }),
    )
    .unwrap();
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    let got = sim.vendor_messages().to_vec();
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].1, &got[0].2), (sim.bdf("m").unwrap(), &m));
    assert_eq!((got[0].0 - t0).as_ps(), ser_gen3x4(32) + 5_000 + 100_000);
}

#[test]
fn broadcast_and_local_are_refused_from_the_wrong_side() {
    let mut sim = sim(false);
    let e = sim
        .send_vendor_message(&VendorMessage::new(VdmRoute::Local, 1, 0, vec![]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("local vendor-defined message from the root complex"),
        "{e}"
    );
    sim.attach(
        "ep",
        Box::new(Mctp {
            send: Some(VendorMessage::new(VdmRoute::Broadcast, 1, 0, vec![])),
            ..Mctp::default()
        }),
    )
    .unwrap();
    sim.run_for(SimDuration::from_us(1));
    assert!(
        sim.errors().iter().any(|e| e.is(FaultKind::VendorMessage)
            && e.message
                .contains("ep: only the root complex sends broadcast")),
        "{:?}",
        sim.errors()
    );
}
