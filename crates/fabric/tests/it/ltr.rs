//! Latency Tolerance Reporting: devices report, switches pass on the most stringent
//! values of their ports, the root port records what arrives.

use crate::common::{caps, hand_timing, switch_tree, trace_tlps};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::FaultKind;
use pcielab_fabric::timed::{ltr_ns, ltr_value, Endpoint, EpCx, FabricSim, SimConfig};
use pcielab_sim::SimDuration;
use pcielab_wire::tlp::{MsgCode, MsgRouting, TlpHeader};
use pcielab_wire::Bdf;

/// A device that reports (snoop µs, no-snoop µs) from a script, one entry every 10 µs.
#[derive(Debug)]
struct Reporter(Vec<(Option<u64>, Option<u64>)>);
impl Endpoint for Reporter {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        for i in 0..self.0.len() {
            cx.timer(SimDuration::from_us(10 * (i as u64 + 1)), i as u64);
        }
    }
    fn timer(&mut self, token: u64, cx: &mut EpCx<'_>) {
        let (s, n) = self.0[token as usize];
        cx.ltr(
            ltr_value(s.map(|us| us * 1000)),
            ltr_value(n.map(|us| us * 1000)),
        );
    }
}

fn enable_ltr(s: &mut FabricSim, f: Bdf) {
    let (p, _) = caps(s, f);
    let v = s.cfg_read(f, p + 0x28);
    s.cfg_write(f, p + 0x28, v | 1 << 10);
}

fn sim(
    ep: Vec<(Option<u64>, Option<u64>)>,
    ep2: Vec<(Option<u64>, Option<u64>)>,
    enable: bool,
) -> FabricSim {
    let cfg = SimConfig {
        trace: true,
        ..hand_timing(true)
    };
    let mut s = FabricSim::new(&switch_tree(1, false), &KindRegistry::builtin(), cfg).unwrap();
    s.attach("ep", Box::new(Reporter(ep))).unwrap();
    s.attach("ep2", Box::new(Reporter(ep2))).unwrap();
    if enable {
        for n in ["ep", "ep2", "sw"] {
            let b = s.bdf(n).unwrap();
            enable_ltr(&mut s, b);
        }
    }
    s
}

/// `us` as an LTR value can carry it, in ns (10 µs is 312 × 32 ns).
fn q(us: u64) -> Option<u64> {
    ltr_ns(ltr_value(Some(us * 1000)))
}

/// (snoop ns, no-snoop ns) of each LTR the root ports received.
fn received(s: &FabricSim) -> Vec<(Option<u64>, Option<u64>)> {
    s.ltr_messages()
        .iter()
        .map(|(_, m)| (ltr_ns(m.snoop), ltr_ns(m.no_snoop)))
        .collect()
}

#[test]
fn a_switch_reports_the_most_stringent_values_of_its_ports() {
    let mut s = sim(
        vec![(Some(10), Some(20)), (Some(10), Some(20))],
        vec![(None, None), (Some(5), None), (Some(30), Some(1))],
        true,
    );
    s.run_for(SimDuration::from_us(15));
    // ep (10, 20) and ep2 (no requirement) at 10 µs: one report, ep's values.
    assert_eq!(received(&s), vec![(q(10), q(20))]);
    let sw = s.bdf("sw").unwrap();
    let rp = crate::common::parent(&s, sw);
    let m = s.ltr_messages()[0].1;
    assert_eq!(
        (m.root_port, m.requester),
        (rp, sw),
        "from the switch's upstream port"
    );
    s.run_for(SimDuration::from_us(10));
    // At 20 µs: ep repeats itself, ep2 asks for 5 µs snoop: (5, 20).
    assert_eq!(received(&s)[1..], [(q(5), q(20))]);
    s.run_for(SimDuration::from_us(10));
    // At 30 µs ep2 relaxes snoop to 30 µs and tightens no-snoop to 1 µs: (10, 1).
    assert_eq!(received(&s)[2..], [(q(10), q(1))]);
    // ep2's link goes down: only ep counts again.
    s.link_down("ep2").unwrap();
    s.run_for(SimDuration::from_us(5));
    assert_eq!(received(&s)[3..], [(q(10), q(20))]);
    assert_eq!(s.ltr_messages().len(), 4, "a repeat changes nothing");
    // On the wire: message code LTR, routed to the receiver only, latencies in bytes
    // 12–15 as the codec reads them.
    let t = s.trace().unwrap();
    let ltr: Vec<_> = trace_tlps(t)
        .filter_map(|(r, p)| match p.header {
            TlpHeader::Msg(m) if m.code == MsgCode::Ltr => {
                Some((t.dir_names[r.dir as usize].clone(), m))
            }
            _ => None,
        })
        .collect();
    assert_eq!(ltr.len(), 5 + 4, "5 from the devices, 4 from the switch");
    for (_, m) in &ltr {
        assert_eq!(m.routing, MsgRouting::Local);
    }
    let up: Vec<_> = ltr.iter().filter(|(d, _)| d == "sw->rc.0").collect();
    assert_eq!(up.len(), 4);
    assert_eq!(
        (
            ltr_ns(up[1].1.fields.ltr_snoop()),
            ltr_ns(up[1].1.fields.ltr_no_snoop())
        ),
        (q(5), q(20))
    );
}

#[test]
fn without_ltr_mechanism_enable_nothing_is_sent() {
    let mut s = sim(vec![(Some(10), Some(20))], vec![], false);
    s.run_for(SimDuration::from_us(15));
    assert!(s.ltr_messages().is_empty());
    assert!(
        s.errors()
            .iter()
            .any(|e| e.is(FaultKind::Ltr) && e.message.contains("LTR Mechanism Enable")),
        "{:?}",
        s.errors()
    );
}
