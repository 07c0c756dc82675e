//! Configuration requests as TLPs in the timed simulator: hand-computed latencies,
//! Type 0/Type 1 on the right links, Unsupported Request where routing ends, Linux-style
//! enumeration over the links giving the same tree as over ECAM, and cached routes
//! dropped when software reprograms the fabric.

use crate::common::{latency, parent, ser_gen3x4, trace_tlps, trained_sim};
use pcielab_fabric::host::enumerate::{enumerate, HostConfig};
use pcielab_fabric::host::HostBus;
use pcielab_fabric::timed::{FabricSim, HostRead, SimError};
use pcielab_sim::SimDuration;
use pcielab_wire::tlp::TlpHeader;
use pcielab_wire::{Bdf, ByteEnables, CplStatus};

fn new_sim(trace: bool) -> FabricSim {
    trained_sim(3, trace)
}

/// The switch's ports from the enumerated tree: (upstream, downstream port 0).
fn switch_ports(sim: &FabricSim) -> (Bdf, Bdf) {
    let ep = sim.bdf("ep").unwrap();
    let down = parent(sim, ep);
    let up = parent(sim, down);
    (up, down)
}

#[test]
fn config_reads_and_writes_take_the_hand_computed_time() {
    let mut sim = new_sim(false);
    let ep = sim.bdf("ep").unwrap();
    let (up, down) = switch_ports(&sim);
    let root_port = parent(&sim, up);

    // CfgRd: 12-byte header + 8 bytes of framing, sequence number and LCRC = 20 wire
    // bytes down; the CplD with one DW: 24 up. CfgWr carries the DW down (24), its Cpl
    // comes back in 20.
    let through_switch = 100_000 // RC out
        + 2 * (ser_gen3x4(20) + 5_000) + 150_000 // two links, switch
        + 40_000 // endpoint
        + 2 * (ser_gen3x4(24) + 5_000) + 150_000 // two links, switch
        + 100_000; // RC in
    let r = sim.config_read(ep, 0).unwrap();
    assert_eq!(latency(&r), through_switch);
    let HostRead::Done { data, .. } = &r else {
        unreachable!()
    };
    assert_eq!(
        u32::from_le_bytes(data[..].try_into().unwrap()),
        sim.cfg_read(ep, 0)
    );
    sim.run_for(SimDuration::from_us(5));
    let w = sim
        .config_write(
            ep,
            0x3c,
            0x0000_00a5,
            ByteEnables::from_bits_truncate(0b0001),
        )
        .unwrap();
    assert_eq!(latency(&w), through_switch);
    assert_eq!(
        sim.cfg_read(ep, 0x3c) & 0xff,
        0xa5,
        "Interrupt Line written"
    );

    // The switch answers for its own ports after its latency: one link each way.
    sim.run_for(SimDuration::from_us(5));
    let one_link =
        100_000 + (ser_gen3x4(20) + 5_000) + 150_000 + (ser_gen3x4(24) + 5_000) + 100_000;
    for port in [up, down] {
        let r = sim.config_read(port, 0).unwrap();
        assert_eq!(latency(&r), one_link, "{port}");
        sim.run_for(SimDuration::from_us(5));
    }
    // A root port is on the root complex's own bus: no link, the RC's latency only.
    let r = sim.config_read(root_port, 0).unwrap();
    assert_eq!(latency(&r), 100_000);
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
}

#[test]
fn traced_config_requests_are_type1_until_the_targets_bus() {
    let mut sim = new_sim(true);
    let ep = sim.bdf("ep").unwrap();
    let (up, down) = switch_ports(&sim);
    let names = sim.trace().unwrap().dir_names.clone();
    let dir = |n: &str| names.iter().position(|x| x == n).unwrap() as u16;
    // (target, write) → the (direction, Type 1?) pairs it is seen on.
    type Seen = Vec<(u16, bool)>;
    let cases: [(Bdf, bool, Seen); 4] = [
        (
            ep,
            false,
            vec![(dir("rc.0->sw"), true), (dir("sw.0->ep"), false)],
        ),
        (
            ep,
            true,
            vec![(dir("rc.0->sw"), true), (dir("sw.0->ep"), false)],
        ),
        (up, false, vec![(dir("rc.0->sw"), false)]),
        (down, true, vec![(dir("rc.0->sw"), true)]),
    ];
    for (target, write, want) in cases {
        sim.take_trace();
        let r = if write {
            sim.config_write(target, 0x3c, 0x11, ByteEnables::from_bits_truncate(1))
        } else {
            sim.config_read(target, 0x10)
        }
        .unwrap();
        assert!(matches!(r, HostRead::Done { .. }), "{target}: {r:?}");
        let t = sim.take_trace().unwrap();
        let mut seen = Vec::new();
        let mut completions = Vec::new();
        for (rec, p) in trace_tlps(&t) {
            match p.header {
                TlpHeader::Cfg(h) => {
                    assert_eq!(h.target, target);
                    assert_eq!(h.write, write);
                    assert_eq!(p.payload.len(), if write { 4 } else { 0 });
                    if write {
                        assert_eq!(h.register, 0x3c >> 2);
                        assert_eq!(h.first_be.bits(), 1);
                        assert_eq!(p.payload[0], 0x11);
                    } else {
                        assert_eq!((h.register, h.first_be.bits()), (0x10 >> 2, 0xf));
                    }
                    seen.push((rec.dir, h.type1));
                }
                TlpHeader::Cpl(h) => {
                    assert_eq!(h.status, CplStatus::Sc);
                    assert_eq!(h.completer_id, target, "the target completes");
                    assert_eq!((h.byte_count, h.lower_address), (4, 0));
                    completions.push(p.payload.len());
                }
                h => panic!("unexpected {h:?}"),
            }
        }
        assert_eq!(seen, want, "{target} write={write}");
        let n = want.len();
        assert_eq!(completions, vec![if write { 0 } else { 4 }; n]);
    }
}

#[test]
fn requests_nobody_takes_end_where_routing_stops_with_ur() {
    let mut sim = new_sim(true);
    let ep = sim.bdf("ep").unwrap();
    let (_, down) = switch_ports(&sim);
    let sw_bus = down.bus();
    let names = sim.trace().unwrap().dir_names.clone();
    let dir = |n: &str| names.iter().position(|x| x == n).unwrap() as u16;
    let cases = [
        // Function 5 of the endpoint: the endpoint itself answers UR.
        (
            Bdf::new(ep.bus(), 0, 5).unwrap(),
            vec![dir("rc.0->sw"), dir("sw.0->ep")],
        ),
        // Device 3 below the downstream port: the port must not forward it.
        (Bdf::new(ep.bus(), 3, 0).unwrap(), vec![dir("rc.0->sw")]),
        // A device on the switch's internal bus that is not there.
        (Bdf::new(sw_bus, 7, 0).unwrap(), vec![dir("rc.0->sw")]),
        // A bus no bridge forwards to: the root complex answers at once.
        (Bdf::new(0x77, 0, 0).unwrap(), vec![]),
    ];
    for (target, want) in cases {
        sim.take_trace();
        assert_eq!(
            sim.config_read(target, 0).unwrap(),
            HostRead::Failed(CplStatus::Ur),
            "{target}"
        );
        assert_eq!(
            sim.config_write(target, 4, 0, ByteEnables::ALL).unwrap(),
            HostRead::Failed(CplStatus::Ur),
            "{target}"
        );
        let t = sim.take_trace().unwrap();
        let mut reqs = Vec::new();
        let mut urs = 0;
        for (rec, p) in trace_tlps(&t) {
            match p.header {
                TlpHeader::Cfg(h) if !h.write => reqs.push(rec.dir),
                TlpHeader::Cfg(_) => {}
                TlpHeader::Cpl(h) => {
                    assert_eq!(h.status, CplStatus::Ur);
                    urs += 1;
                }
                h => panic!("{h:?}"),
            }
        }
        assert_eq!(reqs, want, "{target}");
        assert_eq!(urs, 2 * want.len(), "{target}");
    }
    // Through the host-software view, absent functions read all-ones.
    let mut bus = sim.wire_bus();
    assert_eq!(bus.cfg_read(Bdf::new(ep.bus(), 0, 5).unwrap(), 0), u32::MAX);
    assert_eq!(bus.stats().unsupported, 1);
    assert_ne!(bus.cfg_read(ep, 0), u32::MAX);
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
    assert!(matches!(
        sim.config_read(ep, 0x1000),
        Err(SimError::Param { .. })
    ));
}

#[test]
fn enumeration_over_the_links_finds_the_same_tree_and_takes_time() {
    let run = || {
        let mut sim = new_sim(true);
        let before = sim.tree().clone();
        let t0 = sim.now();
        let mut bus = sim.wire_bus();
        let tree = enumerate(&mut bus, &HostConfig::default()).unwrap();
        let stats = bus.stats();
        assert!(bus.error().is_none());
        let took = sim.now() - t0;
        // The tree matches the one found through ECAM when the simulation was built
        // (every address is assigned again, the same way).
        assert_eq!(tree.functions.len(), before.functions.len());
        for (a, b) in tree.functions.iter().zip(&before.functions) {
            assert_eq!((a.bdf, &a.bars, a.buses), (b.bdf, &b.bars, b.buses));
        }
        let t = sim.take_trace().unwrap();
        let cfg_tlps = trace_tlps(&t)
            .filter(|(_, p)| matches!(p.header, TlpHeader::Cfg(_)))
            .count();
        // The DMA and MMIO still work on the re-programmed fabric.
        let bar = sim.bar("ep", 0).unwrap();
        sim.mmio_write(bar, &[1, 2, 3, 4]).unwrap();
        let r = sim.mmio_read(bar, 4).unwrap();
        assert!(matches!(&r, HostRead::Done { data, .. } if data == &[1, 2, 3, 4]));
        assert!(sim.errors().is_empty(), "{:?}", sim.errors());
        (stats, took, cfg_tlps, t.hash())
    };
    let (stats, took, cfg_tlps, hash) = run();
    assert!(
        stats.config_reads > 50 && stats.config_writes > 20,
        "{stats:?}"
    );
    assert!(stats.unsupported > 0, "probing absent devices gets UR");
    assert_eq!(stats.timeouts, 0);
    // Every request crossed at least one link, except those for the root ports and the
    // bus numbers no bridge forwards yet.
    assert!(cfg_tlps as u64 > (stats.config_reads + stats.config_writes) / 2);
    // Each request is a full round trip of a few hundred ns at least.
    assert!(
        took.as_ps() > (stats.config_reads + stats.config_writes) * 200_000,
        "{took:?}"
    );
    // Deterministic.
    assert_eq!(run(), (stats, took, cfg_tlps, hash));
}

#[test]
fn reprogramming_the_fabric_drops_cached_routes() {
    for timed in [false, true] {
        let mut sim = new_sim(false);
        let ep = sim.bdf("ep").unwrap();
        let bar = sim.bar("ep", 0).unwrap();
        assert!(matches!(
            sim.mmio_read(bar, 4).unwrap(),
            HostRead::Done { .. }
        ));
        // Memory Space Enable off: the BAR no longer claims its addresses.
        let cmd = sim.cfg_read(ep, 4);
        if timed {
            let w = sim
                .config_write(ep, 4, cmd & !0x2, ByteEnables::ALL)
                .unwrap();
            assert!(matches!(w, HostRead::Done { .. }));
        } else {
            sim.cfg_write(ep, 4, cmd & !0x2);
        }
        assert!(
            matches!(sim.mmio_read(bar, 4), Err(SimError::Route(_))),
            "timed={timed}"
        );
        sim.cfg_write(ep, 4, cmd);
        assert!(matches!(
            sim.mmio_read(bar, 4).unwrap(),
            HostRead::Done { .. }
        ));
    }
}
