//! INTx: Assert/Deassert messages from devices, the switch's swizzle and virtual-wire
//! aggregation, Interrupt Status and Interrupt Disable, what the root complex reports.

use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::FaultKind;
use pcielab_fabric::timed::{Endpoint, EpCx, FabricSim, SimConfig, TraceKind};
use pcielab_fabric::topology::Topology;
use pcielab_sim::SimDuration;
use pcielab_wire::tlp::{MsgRouting, TlpHeader, TlpRepr};
use pcielab_wire::Bdf;

/// rc.0 — sw (5 downstream ports: a on 0, b on 1, e on 4); rc.1 — d.
fn topo() -> Topology {
    let s = "seed = 3\n\
        [[node]]\nname=\"rc\"\nkind=\"root-complex\"\nports=2\n\
        [[node]]\nname=\"sw\"\nkind=\"switch\"\nports=5\n\
        [[node]]\nname=\"a\"\nkind=\"psmem\"\n[[node]]\nname=\"b\"\nkind=\"psmem\"\n\
        [[node]]\nname=\"e\"\nkind=\"psmem\"\n[[node]]\nname=\"d\"\nkind=\"psmem\"\n\
        [[link]]\nup=\"rc.0\"\ndown=\"sw\"\ngen=3\nwidth=4\n\
        [[link]]\nup=\"sw.0\"\ndown=\"a\"\ngen=3\nwidth=4\n\
        [[link]]\nup=\"sw.1\"\ndown=\"b\"\ngen=3\nwidth=4\n\
        [[link]]\nup=\"sw.4\"\ndown=\"e\"\ngen=3\nwidth=4\n\
        [[link]]\nup=\"rc.1\"\ndown=\"d\"\ngen=3\nwidth=4\n";
    Topology::parse(s, "intx.toml", &KindRegistry::builtin()).unwrap()
}

/// Asserts or deasserts INTx at the times (ns) it is given.
#[derive(Debug)]
struct Pin(Vec<(u64, bool)>);

impl Endpoint for Pin {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        for (i, (t, _)) in self.0.iter().enumerate() {
            cx.timer(SimDuration::from_ns(*t), i as u64);
        }
    }
    fn timer(&mut self, token: u64, cx: &mut EpCx<'_>) {
        cx.intx(self.0[token as usize].1);
    }
}

fn sim() -> FabricSim {
    let cfg = SimConfig {
        trace: true,
        ..SimConfig::default()
    };
    FabricSim::new(&topo(), &KindRegistry::builtin(), cfg).unwrap()
}

/// (direction, message code) of every INTx message on the wire.
fn messages(sim: &FabricSim) -> Vec<(String, u8)> {
    let t = sim.trace().unwrap();
    t.records
        .iter()
        .filter(|r| matches!(r.kind, TraceKind::Tlp { replay: false, .. }))
        .filter_map(|r| {
            let tlp = TlpRepr::parse_bytes(t.bytes(r)).unwrap();
            match tlp.header {
                TlpHeader::Msg(m) => {
                    assert_eq!(m.routing, MsgRouting::Local);
                    Some((t.dir_name(r).to_string(), m.code.raw()))
                }
                _ => None,
            }
        })
        .collect()
}

const INTX_STATUS: u32 = 1 << 19; // Status bit 3 in the Command/Status dword
const INTX_DISABLE: u32 = 1 << 10;

#[test]
fn switch_swizzles_and_aggregates_virtual_wires() {
    let mut s = sim();
    // a (sw port 0) and e (sw port 4) both map INTA to INTA at the root port; b (port 1)
    // maps INTA to INTB; d sits directly on root port 1.
    s.attach("a", Box::new(Pin(vec![(1000, true), (3000, false)])))
        .unwrap();
    s.attach(
        "e",
        Box::new(Pin(vec![(2000, true), (2100, true), (4000, false)])),
    )
    .unwrap();
    s.attach("b", Box::new(Pin(vec![(1500, true), (5000, false)])))
        .unwrap();
    s.attach("d", Box::new(Pin(vec![(1200, true)]))).unwrap();
    s.run_for(SimDuration::from_us(10));
    assert!(s.errors().is_empty(), "{:?}", s.errors());
    let msgs = messages(&s);
    let on = |dir: &str| -> Vec<u8> { msgs.iter().filter(|m| m.0 == dir).map(|m| m.1).collect() };
    // Each device sends Assert_INTA (0x20) once (e's second assert is a no-op) and
    // Deassert_INTA (0x24); d never deasserts.
    assert_eq!(on("a->sw.0"), vec![0x20, 0x24]);
    assert_eq!(on("e->sw.4"), vec![0x20, 0x24]);
    assert_eq!(on("b->sw.1"), vec![0x20, 0x24]);
    assert_eq!(on("d->rc.1"), vec![0x20]);
    // The switch: INTA asserted by a, INTB (b, swizzled), INTA stays asserted while e
    // holds it after a deasserts, then INTA deasserted, then INTB deasserted.
    assert_eq!(on("sw->rc.0"), vec![0x20, 0x21, 0x24, 0x25]);
    // What the host saw: (root port, pin, asserted) in time order.
    let rp0 = Bdf::new(0, 1, 0).unwrap();
    let rp1 = Bdf::new(0, 2, 0).unwrap();
    let ev: Vec<(Bdf, u8, bool)> = s
        .intx_events()
        .iter()
        .map(|(_, e)| (e.root_port, e.pin, e.asserted))
        .collect();
    assert_eq!(
        ev,
        vec![
            (rp0, 1, true),
            (rp1, 1, true),
            (rp0, 2, true),
            (rp0, 1, false),
            (rp0, 2, false)
        ]
    );
    // Times: a's assert crosses two links and the switch after its 1000 ns timer.
    let t0 = s.intx_events()[0].0.as_ps();
    assert!(t0 > 1_000_000 && t0 < 1_000_000 + 1_000_000, "{t0}");
    // The Interrupt Status bit follows each device's pin.
    let d = s.bdf("d").unwrap();
    let a = s.bdf("a").unwrap();
    assert_eq!(s.cfg_read(d, 4) & INTX_STATUS, INTX_STATUS);
    assert_eq!(s.cfg_read(a, 4) & INTX_STATUS, 0);
}

#[test]
fn interrupt_disable_holds_the_message_but_not_the_status() {
    let mut s = sim();
    s.run_for(SimDuration::from_ns(100));
    let d = s.bdf("d").unwrap();
    let cmd = s.cfg_read(d, 4) & 0xffff;
    s.cfg_write(d, 4, cmd | INTX_DISABLE);
    s.attach("d", Box::new(Pin(vec![(1000, true), (2000, false)])))
        .unwrap();
    s.run_for(SimDuration::from_ns(1500));
    assert_eq!(s.cfg_read(d, 4) & INTX_STATUS, INTX_STATUS);
    s.run_for(SimDuration::from_us(5));
    assert!(messages(&s).is_empty(), "{:?}", messages(&s));
    assert!(s.intx_events().is_empty());
    assert_eq!(s.cfg_read(d, 4) & INTX_STATUS, 0);
}

#[test]
fn a_function_without_an_interrupt_pin_gets_an_error_not_a_message() {
    let mut s = sim();
    s.run_for(SimDuration::from_ns(100));
    // The Interrupt Pin register is read-only to the host; the device model clears it
    // through its own (hardware) access to the configuration space.
    #[derive(Debug)]
    struct NoPin;
    impl Endpoint for NoPin {
        fn start(&mut self, cx: &mut EpCx<'_>) {
            if let Some(c) = cx.config() {
                c.hw_write(0x3d, 1, 0);
            }
            cx.timer(SimDuration::from_ns(10), 0);
        }
        fn timer(&mut self, _t: u64, cx: &mut EpCx<'_>) {
            cx.intx(true);
        }
    }
    s.attach("d", Box::new(NoPin)).unwrap();
    s.run_for(SimDuration::from_us(2));
    assert!(
        s.errors()
            .iter()
            .any(|e| e.is(FaultKind::Interrupt) && e.message.contains("Interrupt Pin")),
        "{:?}",
        s.errors()
    );
    assert!(messages(&s).is_empty());
}
