//! Active State Power Management: L0s and L1 entered after idle time, the exit
//! latencies added to the first transmissions after it (hand-computed), what enables
//! them (Link Control at each end, masked by Link Capabilities), and the counters.

use crate::common::{caps, hand_timing, latency, ser_gen3x4, switch_tree};
use pcielab_config::caps::{ASPM_L0S, ASPM_L1};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{DirCounters, FabricSim, SimConfig, SimError};
use pcielab_fabric::topology::Topology;
use pcielab_sim::SimDuration;
use pcielab_wire::Bdf;

/// Gen3 L0s exit with the default N_FTS of 64: an EIEOS, 64 FTS ordered sets and an
/// SDS, 66 blocks of 130 bits at 125 ps.
const L0S_EXIT: u64 = 66 * 130 * 125;
/// The default L1 exit latency.
const L1_EXIT: u64 = 2_000_000;

/// The MMIO read latency of [`switch_tree`] with [`hand_timing`] on awake links (the
/// sum of `mmio_read_latency_is_the_hand_computed_sum`): 24 wire bytes each way.
fn awake_read() -> u64 {
    100_000 + 2 * (ser_gen3x4(24) + 5_000) + 150_000 // RC, two links down, switch
        + 40_000 // endpoint
        + 2 * (ser_gen3x4(24) + 5_000) + 150_000 + 100_000 // back up
}

fn sim_with(topo: &Topology, tweak: impl FnOnce(&mut SimConfig)) -> FabricSim {
    let mut cfg = hand_timing(false);
    tweak(&mut cfg);
    FabricSim::new(topo, &KindRegistry::builtin(), cfg).unwrap()
}

fn sim(aspm: u8) -> FabricSim {
    sim_with(&switch_tree(1, false), |c| c.aspm = aspm)
}

/// One MMIO read of `ep`'s BAR 0 after `idle_us` of idle: its latency in ps.
fn read_after(sim: &mut FabricSim, idle_us: u64) -> u64 {
    sim.run_for(SimDuration::from_us(idle_us));
    let bar = sim.bar("ep", 0).unwrap();
    latency(&sim.mmio_read(bar, 4).unwrap())
}

fn counters(sim: &FabricSim, name: &str) -> DirCounters {
    sim.counters()
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no direction {name}"))
        .1
}

const DIRS: [&str; 4] = ["rc.0->sw", "sw->rc.0", "sw.0->ep", "ep->sw.0"];

#[test]
fn without_aspm_an_idle_link_costs_nothing() {
    let mut s = sim(0);
    assert_eq!(read_after(&mut s, 100), awake_read());
    for d in DIRS {
        let c = counters(&s, d);
        assert_eq!((c.l0s_entries, c.l1_entries), (0, 0), "{d}");
    }
}

#[test]
fn l1_adds_its_exit_latency_on_each_sleeping_link_of_the_path() {
    let mut s = sim(ASPM_L1);
    // The request wakes the RC–switch link, then the switch–device link: 2 µs each.
    // The completion follows within the entry idle time of both: nothing more.
    assert_eq!(read_after(&mut s, 100), awake_read() + 2 * L1_EXIT);
    // Right after, the links are awake.
    assert_eq!(read_after(&mut s, 1), awake_read());
    // Asleep again after more than the 8 µs entry idle time.
    assert_eq!(read_after(&mut s, 20), awake_read() + 2 * L1_EXIT);
    for d in DIRS {
        let c = counters(&s, d);
        assert_eq!(
            c.l1_entries, 2,
            "{d}: the link's L1 shows on both directions"
        );
        assert_eq!(c.l0s_entries, 0, "{d}");
        assert_eq!(c.replays, 0, "{d}");
    }
    // Residency: an idle link accumulates exactly the time it sleeps.
    s.run_for(SimDuration::from_us(50));
    let a = counters(&s, "rc.0->sw");
    s.run_for(SimDuration::from_us(10));
    let b = counters(&s, "rc.0->sw");
    assert_eq!(b.l1_entries, 3);
    assert_eq!(b.l1_ps - a.l1_ps, 10_000_000);
}

#[test]
fn l0s_wakes_each_direction_separately_and_an_ack_can_wake_one_early() {
    let mut s = sim(ASPM_L0S);
    // Every direction has idled past 7 µs. Down: the RC's transmitter leaves L0s, then
    // the switch's towards the device. The device's answer (40 ns later) wakes its
    // transmitter. The switch's transmitter towards the RC is already awake: the ACK
    // for the request (214 symbol times after it arrived) woke it, 2.4 µs before the
    // completion gets there. Three exits.
    assert_eq!(read_after(&mut s, 100), awake_read() + 3 * L0S_EXIT);
    assert_eq!(read_after(&mut s, 1), awake_read());
    for d in DIRS {
        let c = counters(&s, d);
        assert_eq!(c.l0s_entries, 1, "{d}");
        assert_eq!(c.l1_entries, 0, "{d}");
        // The replay timers include the other direction's L0s exit (RxL0sAdjustment):
        // every ACK here came late, none of them too late.
        assert_eq!(c.replays, 0, "{d}");
        assert_eq!(c.replay_timeouts, 0, "{d}");
    }
}

/// Sets or clears ASPM Control bits in `bdf`'s Link Control.
fn set_aspm(s: &mut FabricSim, bdf: Bdf, bits: u8) {
    let (pcie, _) = caps(s, bdf);
    let v = s.cfg_read(bdf, pcie + 0x10);
    s.cfg_write(bdf, pcie + 0x10, (v & !3) | bits as u32);
}

#[test]
fn l0s_is_per_transmitter_and_l1_needs_both_ends() {
    let mut s = sim(0);
    let ep = s.bdf("ep").unwrap();
    // L0s at the device only: its transmitter alone sleeps.
    set_aspm(&mut s, ep, ASPM_L0S);
    assert_eq!(read_after(&mut s, 100), awake_read() + L0S_EXIT);
    assert_eq!(counters(&s, "ep->sw.0").l0s_entries, 1);
    assert_eq!(counters(&s, "sw.0->ep").l0s_entries, 0);
    // L1 at the device only: not enough.
    set_aspm(&mut s, ep, ASPM_L1);
    assert_eq!(read_after(&mut s, 100), awake_read());
    assert_eq!(counters(&s, "ep->sw.0").l1_entries, 0);
    // And at the switch's downstream port above it too: that link sleeps.
    let port = parent_port(&s, ep);
    set_aspm(&mut s, port, ASPM_L1);
    assert_eq!(read_after(&mut s, 100), awake_read() + L1_EXIT);
    assert_eq!(counters(&s, "ep->sw.0").l1_entries, 1);
    assert_eq!(counters(&s, "rc.0->sw").l1_entries, 0);
    // Disabled again: nothing.
    set_aspm(&mut s, port, 0);
    assert_eq!(read_after(&mut s, 100), awake_read());
}

/// The downstream port whose secondary bus is `bdf`'s bus.
fn parent_port(s: &FabricSim, bdf: Bdf) -> Bdf {
    let f = s.fabric();
    let func = f.function_at(bdf).unwrap();
    let bus = f.functions[func.0 as usize].bus;
    let parent = f.buses[bus.0 as usize].parent.unwrap();
    f.bdf(parent)
}

#[test]
fn ports_advertise_support_and_the_exit_latencies_and_the_policy_enables_them() {
    let s = sim(ASPM_L0S | ASPM_L1);
    for name in ["ep"] {
        let bdf = s.bdf(name).unwrap();
        for f in [bdf, parent_port(&s, bdf)] {
            let mut s2 = sim(ASPM_L0S | ASPM_L1);
            let (pcie, _) = caps(&mut s2, f);
            let lnkcap = s2.cfg_read(f, pcie + 0x0c);
            assert_eq!((lnkcap >> 10) & 3, 3, "{f}: L0s and L1 supported");
            // L0s exit 1.0725 µs: "1 µs to less than 2 µs" (101b); L1 2 µs: "2 µs to
            // less than 4 µs" (010b).
            assert_eq!((lnkcap >> 12) & 7, 0b101, "{f}");
            assert_eq!((lnkcap >> 15) & 7, 0b010, "{f}");
            assert_eq!(s2.cfg_read(f, pcie + 0x10) & 3, 3, "{f}: both enabled");
        }
    }
    // Another N_FTS and L1 exit are advertised as such.
    let mut s = sim_with(&switch_tree(1, false), |c| {
        c.n_fts = 255; // 257 blocks: 4.18 µs, "more than 4 µs"
        c.aspm_l1_exit = SimDuration::from_us(40); // 32..64 µs
    });
    let ep = s.bdf("ep").unwrap();
    let (pcie, _) = caps(&mut s, ep);
    let lnkcap = s.cfg_read(ep, pcie + 0x0c);
    assert_eq!(((lnkcap >> 12) & 7, (lnkcap >> 15) & 7), (7, 6));
    assert_eq!(s.cfg_read(ep, pcie + 0x10) & 3, 0, "reset value: disabled");
}

#[test]
fn a_device_without_l1_support_keeps_its_link_awake() {
    let text = "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n\
         [[node]]\nname=\"sw\"\nkind=\"switch\"\nports=2\n\
         [[node]]\nname=\"ep\"\nkind=\"psmem\"\naspm=\"l0s\"\n\
         [[node]]\nname=\"ep2\"\nkind=\"psmem\"\n\
         [[link]]\nup=\"rc.0\"\ndown=\"sw\"\ngen=3\nwidth=4\n\
         [[link]]\nup=\"sw.0\"\ndown=\"ep\"\ngen=3\nwidth=4\n\
         [[link]]\nup=\"sw.1\"\ndown=\"ep2\"\ngen=3\nwidth=4\n";
    let topo = Topology::parse(text, "t.toml", &KindRegistry::builtin()).unwrap();
    let mut s = sim_with(&topo, |c| c.aspm = ASPM_L1);
    let ep = s.bdf("ep").unwrap();
    let (pcie, _) = caps(&mut s, ep);
    assert_eq!((s.cfg_read(ep, pcie + 0x0c) >> 10) & 3, 1, "L0s only");
    assert_eq!(s.cfg_read(ep, pcie + 0x10) & 3, 0, "the policy left it off");
    // The RC–switch link does not sleep either: a switch's upstream port asks for L1
    // only once every link below it is in L1, and ep's never is.
    assert_eq!(read_after(&mut s, 100), awake_read());
    // With ep's link down, the switch's other link decides: both links sleep.
    s.link_down("ep").unwrap();
    let bar2 = s.bar("ep2", 0).unwrap();
    s.run_for(SimDuration::from_us(100));
    assert_eq!(
        latency(&s.mmio_read(bar2, 4).unwrap()),
        awake_read() + 2 * L1_EXIT
    );
}

#[test]
fn gen6_flit_mode_has_no_l0s() {
    let text = "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n\
         [[node]]\nname=\"ep\"\nkind=\"psmem\"\n\
         [[link]]\nup=\"rc.0\"\ndown=\"ep\"\ngen=6\nwidth=4\n";
    let topo = Topology::parse(text, "t.toml", &KindRegistry::builtin()).unwrap();
    let read = |aspm: u8| {
        let mut s = sim_with(&topo, |c| c.aspm = aspm);
        s.run_for(SimDuration::from_us(100));
        let bar = s.bar("ep", 0).unwrap();
        let l = latency(&s.mmio_read(bar, 4).unwrap());
        (l, counters(&s, "rc.0->ep"))
    };
    let (awake, _) = read(0);
    let (l0s, c) = read(ASPM_L0S);
    assert_eq!(l0s, awake);
    assert_eq!(c.l0s_entries, 0);
    let (l1, c) = read(ASPM_L1);
    assert_eq!(l1, awake + L1_EXIT);
    assert_eq!(c.l1_entries, 1);
}

#[test]
fn an_idle_link_in_l1_is_not_woken_by_the_periodic_update_fc() {
    let fc = |aspm: u8| {
        let mut s = sim(aspm);
        s.run_for(SimDuration::from_us(20));
        let before: u64 = DIRS.iter().map(|d| counters(&s, d).fc_dllps).sum();
        s.run_for(SimDuration::from_us(300));
        let after: u64 = DIRS.iter().map(|d| counters(&s, d).fc_dllps).sum();
        (after - before, counters(&s, "rc.0->sw").l1_entries)
    };
    let (awake_fc, _) = fc(0);
    assert!(
        awake_fc >= 10,
        "the 30 µs refresh runs on an awake link: {awake_fc}"
    );
    assert_eq!(
        fc(ASPM_L1),
        (0, 1),
        "asleep: deferred, and the link sleeps on"
    );
}

#[test]
fn bad_aspm_parameters_are_refused_with_the_allowed_values() {
    let topo = switch_tree(1, false);
    let build = |tweak: &dyn Fn(&mut SimConfig)| {
        let mut cfg = SimConfig::default();
        tweak(&mut cfg);
        FabricSim::new(&topo, &KindRegistry::builtin(), cfg).unwrap_err()
    };
    let e = build(&|c| c.aspm = 4);
    assert!(matches!(e, SimError::Param { what: "aspm", .. }), "{e}");
    assert_eq!(
        e.to_string(),
        "aspm 4 is not allowed; allowed: 0 (off), 1 (L0s), 2 (L1) or 3 (L0s and L1)"
    );
    let e = build(&|c| c.aspm_l0s_entry = SimDuration::ZERO);
    assert!(e.to_string().starts_with("aspm l0s entry 0 ps"), "{e}");
    let e = build(&|c| c.aspm_l1_entry = SimDuration::from_ms(2000));
    assert!(e.to_string().starts_with("aspm l1 entry"), "{e}");
    let e = build(&|c| c.aspm_l1_exit = SimDuration::from_ms(2));
    assert_eq!(
        e.to_string(),
        "aspm l1 exit 2000000000 ps is not allowed; allowed: 0..=1 ms"
    );
    let e = build(&|c| c.aspm_l1_propagation = SimDuration::from_ns(1001));
    assert_eq!(
        e.to_string(),
        "aspm l1 propagation 1001000 ps is not allowed; allowed: 0..=1 µs (the spec's bound)"
    );
}

/// A device's one 64-byte DMA read after 100 µs of idle: (when it was issued, when its
/// MRd started on each link of `links`, in ps).
fn dma_read_starts(
    topo: &Topology,
    tweak: impl FnOnce(&mut SimConfig),
    links: &[&str],
) -> (u64, Vec<u64>) {
    let mut s = sim_with(topo, |c| {
        c.trace = true;
        tweak(c)
    });
    s.run_for(SimDuration::from_us(100));
    let t0 = s.now().as_ps();
    let base = s.alloc_dma(4096);
    s.attach(
        "ep",
        Box::new(pcielab_fabric::timed::DmaStream::new(
            pcielab_fabric::timed::DmaOpKind::Read,
            64,
            1,
            1,
            base,
            4096,
            pcielab_fabric::timed::AddrPattern::Sequential,
        )),
    )
    .unwrap();
    s.run_until_idle(pcielab_sim::SimTime::from_ps(u64::MAX / 2));
    let t = s.trace().unwrap();
    let starts = links
        .iter()
        .map(|l| {
            crate::common::trace_tlps(t)
                .find(|(r, p)| {
                    t.dir_names[r.dir as usize] == *l
                        && matches!(&p.header, pcielab_wire::tlp::TlpHeader::Mem(_))
                })
                .unwrap_or_else(|| panic!("no MRd on {l}"))
                .0
                .time_ps
        })
        .collect();
    (t0, starts)
}

#[test]
fn a_switch_starts_waking_its_upstream_link_when_a_link_below_it_wakes() {
    let topo = switch_tree(1, false);
    let links = ["ep->sw.0", "sw->rc.0"];
    // Awake: the MRd crosses the device's link and the switch.
    let (t0, awake) = dma_read_starts(&topo, |_| {}, &links);
    let hop = awake[1] - awake[0];
    assert!(hop < 400_000, "{hop}");
    for (prop, gap) in [
        (None, 1_000_000),        // the default: the spec's bound, 1 µs
        (Some(400_000), 400_000), // the upstream exit ends after the MRd is ready
        (Some(0), hop),           // both exits together: the switch is the wait
    ] {
        let (t1, st) = dma_read_starts(
            &topo,
            |c| {
                c.aspm = ASPM_L1;
                if let Some(p) = prop {
                    c.aspm_l1_propagation = SimDuration::from_ps(p);
                }
            },
            &links,
        );
        assert_eq!(t1, t0);
        // The device's link wakes first (the device's own awake start is at t0 too).
        assert_eq!(awake[0], t0, "{prop:?}");
        assert_eq!(st[0], t0 + L1_EXIT, "{prop:?}");
        // The link above began its exit `prop` after: the MRd waits for whichever of
        // the two comes last. Without propagation it would be L1_EXIT + hop.
        assert_eq!(st[1] - st[0], gap, "{prop:?}");
    }
}

#[test]
fn the_exit_propagates_up_through_each_switch_of_a_nested_tree() {
    let topo = Topology::parse(
        "seed = 1\n[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n\
         [[node]]\nname=\"top\"\nkind=\"switch\"\nports=1\n\
         [[node]]\nname=\"mid\"\nkind=\"switch\"\nports=1\n\
         [[node]]\nname=\"ep\"\nkind=\"psmem\"\n\
         [[link]]\nup=\"rc.0\"\ndown=\"top\"\ngen=3\nwidth=4\n\
         [[link]]\nup=\"top.0\"\ndown=\"mid\"\ngen=3\nwidth=4\n\
         [[link]]\nup=\"mid.0\"\ndown=\"ep\"\ngen=3\nwidth=4\n",
        "nested.toml",
        &KindRegistry::builtin(),
    )
    .unwrap();
    let links = ["ep->mid.0", "mid->top.0", "top->rc.0"];
    let (t0, st) = dma_read_starts(&topo, |c| c.aspm = ASPM_L1, &links);
    // 1 µs per switch: the links above begin their exits at t0 + 1 µs and t0 + 2 µs.
    assert_eq!(
        st,
        [
            t0 + L1_EXIT,
            t0 + L1_EXIT + 1_000_000,
            t0 + L1_EXIT + 2_000_000
        ]
    );
}

// ------------------------------------------------------------ L1 PM Substates

/// A device that answers BAR reads with zeros and reports its latency tolerance
/// (snoop and no-snoop, µs) 1 µs after the start.
#[derive(Debug)]
struct Tolerates(u64);
impl pcielab_fabric::timed::Endpoint for Tolerates {
    fn start(&mut self, cx: &mut pcielab_fabric::timed::EpCx<'_>) {
        cx.timer(SimDuration::from_us(1), 0);
    }
    fn timer(&mut self, _t: u64, cx: &mut pcielab_fabric::timed::EpCx<'_>) {
        let v = pcielab_fabric::timed::ltr_value(Some(self.0 * 1000));
        cx.ltr(v, v);
    }
    fn mem_read(
        &mut self,
        _bar: u8,
        _off: u64,
        buf: &mut [u8],
        _cx: &mut pcielab_fabric::timed::EpCx<'_>,
    ) -> pcielab_fabric::timed::ReadReply {
        buf.fill(0);
        pcielab_fabric::timed::ReadReply::Now
    }
}

/// Every port's T_POWER_ON and Common_Mode_Restore_Time (10 µs each): an L1.2 exit
/// takes this much longer than an L1 exit.
const L12_EXTRA: u64 = 20_000_000;

/// A device directly on a root port (Gen3 x4), with ASPM as `aspm` and L1 PM Substates
/// when `l1ss`; `ltr_us`: the device reports that latency tolerance.
fn l1ss_sim(aspm: u8, l1ss: bool, ltr_us: Option<u64>) -> FabricSim {
    let text = "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n\
         [[node]]\nname=\"ep\"\nkind=\"psmem\"\n\
         [[link]]\nup=\"rc.0\"\ndown=\"ep\"\ngen=3\nwidth=4\n";
    let topo = Topology::parse(text, "t.toml", &KindRegistry::builtin()).unwrap();
    let mut s = sim_with(&topo, |c| {
        c.aspm = aspm;
        c.aspm_l1ss = l1ss;
    });
    if let Some(us) = ltr_us {
        s.attach("ep", Box::new(Tolerates(us))).unwrap();
        let b = s.bdf("ep").unwrap();
        let (p, _) = caps(&mut s, b);
        let v = s.cfg_read(b, p + 0x28);
        s.cfg_write(b, p + 0x28, v | 1 << 10); // LTR Mechanism Enable
    }
    s
}

#[test]
fn l1_2_adds_t_power_on_and_common_mode_restore_unless_the_ltr_forbids_it() {
    let awake = read_after(&mut l1ss_sim(0, false, None), 100);
    // L1 alone: its exit.
    assert_eq!(
        read_after(&mut l1ss_sim(ASPM_L1, false, None), 100),
        awake + L1_EXIT
    );
    // L1.2 with no latency reported (no requirement): T_POWER_ON and the common-mode
    // restore time on top.
    let mut s = l1ss_sim(ASPM_L1, true, None);
    assert_eq!(read_after(&mut s, 100), awake + L1_EXIT + L12_EXTRA);
    for d in ["rc.0->ep", "ep->rc.0"] {
        assert_eq!(counters(&s, d).l1_2_exits, 1, "{d}");
    }
    // The same for a device that reported the same awake latency with a timed model.
    let awake_model = read_after(&mut l1ss_sim(0, false, Some(100)), 100);
    // It tolerates 100 µs (above the 26 µs threshold): L1.2.
    let mut s = l1ss_sim(ASPM_L1, true, Some(100));
    assert_eq!(read_after(&mut s, 100), awake_model + L1_EXIT + L12_EXTRA);
    // It tolerates 5 µs only: the link stays in L1.1, as fast to leave as L1.
    let mut s = l1ss_sim(ASPM_L1, true, Some(5));
    assert_eq!(read_after(&mut s, 100), awake_model + L1_EXIT);
    assert_eq!(counters(&s, "rc.0->ep").l1_2_exits, 0);
    // Behind a switch each link of the path pays its L1.2 exit once: while the lower
    // link wakes, the upper one stays awake (its switch's port below is not in L1).
    let mut s = sim_with(&switch_tree(1, false), |c| {
        c.aspm = ASPM_L1;
        c.aspm_l1ss = true;
    });
    assert_eq!(
        read_after(&mut s, 100),
        awake_read() + 2 * (L1_EXIT + L12_EXTRA)
    );
}

#[test]
fn lspci_reads_the_l1_substates_the_host_programmed() {
    let s = l1ss_sim(ASPM_L1, true, None);
    let ep = s.bdf("ep").unwrap();
    let rp = crate::common::parent(&s, ep);
    for (f, t_cm) in [(rp, 10), (ep, 0)] {
        let text = crate::common::lspci_vvv(&s, f, "l1ss");
        // 2 + 4 + 10 + 10 µs, as an LTR value can hold it: 812 × 32 ns.
        for want in [
            "L1SubCtl1: PCI-PM_L1.2- PCI-PM_L1.1- ASPM_L1.2+ ASPM_L1.1+".to_string(),
            format!("T_CommonMode={t_cm}us LTR1.2_Threshold=25984ns"),
            "L1SubCtl2: T_PwrOn=10us".to_string(),
        ] {
            assert!(text.contains(&want), "{f}: want {want:?} in\n{text}");
        }
        let fid = s.fabric().function_at(f).unwrap();
        let ours =
            pcielab_config::decode::describe(s.fabric().functions[fid.0 as usize].config.bytes());
        assert!(ours.contains("ASPM_L1.2+ ASPM_L1.1+"), "{ours}");
    }
}
