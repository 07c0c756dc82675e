//! Access Control Services: peer-to-peer between two devices below one switch goes
//! straight across the switch, or by the root complex when the downstream ports
//! redirect requests (P2P Request Redirect) and completions (P2P Completion Redirect).

use crate::common::{hand_timing, parent, switch_tree, trace_tlps};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{DmaId, Endpoint, EpCx, FabricSim, SimConfig};
use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::tlp::TlpKind;
use pcielab_wire::Bdf;
use std::sync::{Arc, Mutex};

/// The read's data and latency (ps), once it finished.
type ReadBack = Arc<Mutex<Option<(Vec<u8>, u64)>>>;

/// Writes 64 bytes to the peer's BAR, then reads them back; keeps the read's data and
/// latency.
#[derive(Debug)]
struct Peer {
    bar: u64,
    read_at: SimTime,
    got: ReadBack,
}

fn pattern() -> Vec<u8> {
    (0..64).map(|i| i * 3 + 1).collect()
}

impl Endpoint for Peer {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        cx.dma_write(self.bar, pattern());
    }
    fn dma_done(&mut self, _id: DmaId, ok: bool, data: &[u8], cx: &mut EpCx<'_>) {
        assert!(ok);
        if data.is_empty() {
            self.read_at = cx.now();
            cx.dma_read(self.bar, 64);
        } else {
            let lat = (cx.now() - self.read_at).as_ps();
            *self.got.lock().unwrap() = Some((data.to_vec(), lat));
        }
    }
}

/// Runs the peer write and read from ep to ep2 with `acs` (and `setup` before): the
/// data read back, the read's latency, and the link directions each TLP kind crossed.
fn run(acs: bool, setup: impl Fn(&mut FabricSim)) -> (Vec<u8>, u64, Vec<(TlpKind, String)>) {
    let cfg = SimConfig {
        acs,
        ..hand_timing(true)
    };
    let mut sim = FabricSim::new(&switch_tree(5, false), &KindRegistry::builtin(), cfg).unwrap();
    sim.run_for(SimDuration::from_us(5));
    setup(&mut sim);
    let bar = sim.bar("ep2", 0).unwrap();
    let got: ReadBack = Arc::new(Mutex::new(None));
    sim.attach(
        "ep",
        Box::new(Peer {
            bar,
            read_at: SimTime::ZERO,
            got: got.clone(),
        }),
    )
    .unwrap();
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
    let t = sim.trace().unwrap();
    let path = trace_tlps(t)
        .filter(|(_, p)| matches!(p.kind(), TlpKind::MWr | TlpKind::MRd | TlpKind::CplD))
        .map(|(r, p)| (p.kind(), t.dir_names[r.dir as usize].clone()))
        .collect();
    for r in &t.records {
        eprintln!(
            "TR {} {} {:?} {}",
            r.time_ps,
            t.dir_names[r.dir as usize],
            r.kind,
            t.bytes(r).len()
        );
    }
    let (data, lat) = got.lock().unwrap().clone().expect("the read finished");
    (data, lat, path)
}

fn dirs(path: &[(TlpKind, String)], kind: TlpKind) -> Vec<&str> {
    path.iter()
        .filter(|(k, _)| *k == kind)
        .map(|(_, d)| d.as_str())
        .collect()
}

#[test]
fn redirected_peer_traffic_goes_by_the_root_complex() {
    let (d0, direct, p0) = run(false, |_| {});
    assert_eq!(d0, pattern());
    assert_eq!(dirs(&p0, TlpKind::MWr), ["ep->sw.0", "sw.1->ep2"]);
    assert_eq!(dirs(&p0, TlpKind::MRd), ["ep->sw.0", "sw.1->ep2"]);
    assert_eq!(dirs(&p0, TlpKind::CplD), ["ep2->sw.1", "sw.0->ep"]);

    let (d1, redirected, p1) = run(true, |_| {});
    assert_eq!(d1, pattern());
    let by_rc = ["ep->sw.0", "sw->rc.0", "rc.0->sw", "sw.1->ep2"];
    assert_eq!(dirs(&p1, TlpKind::MWr), by_rc);
    assert_eq!(dirs(&p1, TlpKind::MRd), by_rc);
    assert_eq!(
        dirs(&p1, TlpKind::CplD),
        ["ep2->sw.1", "sw->rc.0", "rc.0->sw", "sw.0->ep"]
    );
    // The request and the completion each cross two more links, the root complex
    // (100 ns) and the switch once more (150 ns).
    let extra = redirected - direct;
    assert!((500_000..1_000_000).contains(&extra), "{extra} ps");
}

#[test]
fn request_redirect_alone_leaves_completions_direct() {
    // Host software sets P2P Request Redirect in the port above ep only.
    let (d, _, p) = run(false, |s: &mut FabricSim| {
        let ep = s.bdf("ep").unwrap();
        let dsp = parent(s, ep);
        let at = acs_cap(s, dsp);
        let v = s.cfg_read(dsp, at + 4);
        s.cfg_write(dsp, at + 4, v | 1 << (16 + 2));
    });
    assert_eq!(d, pattern());
    assert_eq!(
        dirs(&p, TlpKind::MRd),
        ["ep->sw.0", "sw->rc.0", "rc.0->sw", "sw.1->ep2"]
    );
    assert_eq!(dirs(&p, TlpKind::CplD), ["ep2->sw.1", "sw.0->ep"]);
}

#[test]
fn enumeration_sets_the_acs_controls_linux_sets() {
    let cfg = SimConfig {
        acs: true,
        ..hand_timing(false)
    };
    let mut sim = FabricSim::new(&switch_tree(5, false), &KindRegistry::builtin(), cfg).unwrap();
    let ep = sim.bdf("ep").unwrap();
    let dsp = parent(&sim, ep);
    let at = acs_cap(&mut sim, dsp);
    // SrcValid, ReqRedir, CmpltRedir, UpstreamFwd (bits 0, 2, 3, 4).
    assert_eq!(sim.cfg_read(dsp, at + 4) >> 16, 0x1d);
    let text = crate::common::lspci_vvv(&sim, dsp, "acs");
    assert!(
        text.contains("ACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+"),
        "{text}"
    );
}

/// The ACS capability's offset in `f`.
fn acs_cap(s: &mut FabricSim, f: Bdf) -> u16 {
    let mut at = 0x100u16;
    loop {
        let h = s.cfg_read(f, at);
        if h & 0xffff == 0x000d {
            return at;
        }
        at = (h >> 20) as u16;
        assert!(at != 0, "no ACS capability");
    }
}
