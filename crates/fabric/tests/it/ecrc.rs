//! ECRC: the digest every TLP carries when its originator generates it, the data a
//! switch corrupts on the way (which the link CRC cannot see), and what the ultimate
//! receiver does when its check is on (ECRC Error, the TLP discarded) or off (the
//! corrupted data delivered).

use crate::common::{caps, hand_timing, switch_tree, trace_tlps};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::FaultKind;
use pcielab_fabric::timed::{
    AddrPattern, DmaId, DmaOpKind, DmaStream, Endpoint, EpCx, FabricSim, HostRead, SimConfig,
    TraceKind,
};
use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::tlp::{TlpKind, TlpPacket};
use pcielab_wire::{Bdf, ByteEnables, CplStatus};

/// AER Uncorrectable Error Status: ECRC Error.
const ECRC_ERROR: u32 = 1 << 19;
/// AER Uncorrectable Error Status: Completion Timeout.
const COMPLETION_TIMEOUT: u32 = 1 << 14;

/// Writes 4 × 1 KiB of known bytes (MPS 256: 16 MWr TLPs).
#[derive(Debug)]
struct Writer {
    base: u64,
    done: u32,
}

fn pattern() -> Vec<u8> {
    (0..4096u32).map(|i| (i * 7 + i / 256) as u8).collect()
}

impl Endpoint for Writer {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        let p = pattern();
        for k in 0..4 {
            cx.dma_write(
                self.base + k * 1024,
                p[k as usize * 1024..][..1024].to_vec(),
            );
        }
    }
    fn dma_done(&mut self, _id: DmaId, ok: bool, _data: &[u8], _cx: &mut EpCx<'_>) {
        assert!(ok, "posted writes always go out");
        self.done += 1;
    }
}

fn sim(ecrc: bool, switch_error_rate: f64) -> FabricSim {
    let cfg = SimConfig {
        ecrc,
        switch_error_rate,
        completion_timeout: SimDuration::from_us(20),
        ..hand_timing(true)
    };
    FabricSim::new(&switch_tree(5, false), &KindRegistry::builtin(), cfg).unwrap()
}

fn write_run(ecrc: bool, switch_error_rate: f64) -> (FabricSim, Vec<u8>, u64) {
    let mut s = sim(ecrc, switch_error_rate);
    let base = s.alloc_dma(4096);
    s.attach("ep", Box::new(Writer { base, done: 0 })).unwrap();
    s.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    let mut mem = vec![0u8; 4096];
    s.host_read(base, &mut mem);
    (s, mem, base)
}

fn internal_errors(s: &FabricSim, link: &str) -> u64 {
    s.counters()
        .into_iter()
        .find(|(l, _)| l == link)
        .map(|(_, c)| c.internal_errors)
        .unwrap()
}

#[test]
fn ecrc_costs_four_bytes_on_every_tlp_and_changes_no_data() {
    let (s, mem, _) = write_run(true, 0.0);
    assert_eq!(mem, pattern());
    assert!(s.errors().is_empty(), "{:?}", s.errors());
    let t = s.trace().unwrap();
    let mut n = 0;
    for (r, p) in trace_tlps(t) {
        // Every TLP, requests and completions of either side, carries a correct digest.
        assert!(p.td, "{p:?}");
        let b = t.bytes(r);
        assert!(TlpPacket::new_unchecked(b).check_ecrc().is_ok());
        n += 1;
    }
    assert!(n >= 32, "{n}");
    // 16 MWr of 256 bytes with a 3-DW header and the digest: 272 bytes each, on each
    // link up.
    let up = |s: &FabricSim| {
        s.counters()
            .into_iter()
            .find(|(l, _)| l == "ep->sw.0")
            .map(|(_, c)| (c.tlps, c.wire_bytes))
            .unwrap()
    };
    let (plain, without, _) = write_run(false, 0.0);
    assert_eq!(without, pattern());
    let (tlps_on, bytes_on) = up(&s);
    let (tlps_off, bytes_off) = up(&plain);
    assert_eq!(tlps_on, tlps_off);
    assert_eq!(bytes_on - bytes_off, 4 * tlps_on);
}

#[test]
fn without_ecrc_a_switch_corrupts_data_silently() {
    let (s, mem, _) = write_run(false, 1.0);
    // Every MWr went through the switch corrupted: the lowest bit of its first byte.
    assert_eq!(internal_errors(&s, "sw->rc.0"), 16);
    assert_eq!(internal_errors(&s, "ep->sw.0"), 0);
    let mut want = pattern();
    for k in 0..16 {
        want[k * 256] ^= 1;
    }
    assert_eq!(mem, want);
    // Nobody noticed.
    assert!(s.errors().is_empty(), "{:?}", s.errors());
}

#[test]
fn with_ecrc_the_root_port_catches_and_drops_every_corrupted_write() {
    let (mut s, mem, base) = write_run(true, 1.0);
    assert_eq!(internal_errors(&s, "sw->rc.0"), 16);
    assert_eq!(mem, vec![0u8; 4096], "no corrupted byte reached memory");
    let failed = s
        .errors()
        .iter()
        .filter(|e| e.is(FaultKind::Ecrc) && e.message.contains("ECRC check failed"))
        .count();
    assert_eq!(failed, 16, "{:?}", s.errors());
    // The root port logs ECRC Error, first, with the first write's header.
    let rp = Bdf::new(0, 1, 0).unwrap();
    let ep = s.bdf("ep").unwrap();
    let (_, a) = caps(&mut s, rp);
    assert_eq!(s.cfg_read(rp, a + 4) & ECRC_ERROR, ECRC_ERROR);
    assert_eq!(s.cfg_read(rp, a + 0x18) & 0x1f, 19);
    let log: Vec<u8> = (0..4u16)
        .flat_map(|i| s.cfg_read(rp, a + 0x1c + 4 * i).to_be_bytes())
        .collect();
    let p = TlpPacket::new_unchecked(&log[..]);
    assert_eq!(p.kind(), Some(TlpKind::MWr));
    assert_eq!((p.requester_id(), p.address(), p.td()), (ep, base, true));
    // On the wire above the switch the digests fail (the original data's digest), below
    // they hold.
    let t = s.trace().unwrap();
    let mut seen = 0;
    for r in &t.records {
        let p = TlpPacket::new_unchecked(t.bytes(r));
        if !matches!(r.kind, TraceKind::Tlp { .. }) || p.kind() != Some(TlpKind::MWr) {
            continue;
        }
        let ok = p.check_ecrc().is_ok();
        assert_eq!(ok, t.dir_names[r.dir as usize] == "ep->sw.0");
        seen += 1;
    }
    assert_eq!(seen, 32);
}

/// Reads 1 KiB once.
#[derive(Debug, Default)]
struct Reader {
    base: u64,
    ok: Option<bool>,
}

impl Endpoint for Reader {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        cx.dma_read(self.base, 1024);
    }
    fn dma_done(&mut self, _id: DmaId, ok: bool, _data: &[u8], _cx: &mut EpCx<'_>) {
        self.ok = Some(ok);
    }
    fn report(&self) -> Option<serde_json::Value> {
        Some(serde_json::json!({ "ok": self.ok }))
    }
}

/// One 1 KiB DMA read through a switch that corrupts everything, ECRC on; `setup`
/// runs first. Returns the simulation and whether the read succeeded.
fn read_run(setup: impl Fn(&mut FabricSim)) -> (FabricSim, serde_json::Value) {
    let mut s = sim(true, 1.0);
    setup(&mut s);
    let base = s.alloc_dma(4096);
    s.host_write(base, &pattern());
    s.attach("ep", Box::new(Reader { base, ok: None })).unwrap();
    s.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    let ok = s.model("ep").unwrap().report().unwrap()["ok"].clone();
    (s, ok)
}

#[test]
fn a_corrupted_completion_is_dropped_and_the_read_times_out() {
    let (mut s, ok) = read_run(|_| {});
    assert_eq!(ok, serde_json::json!(false));
    assert!(internal_errors(&s, "sw.0->ep") > 0);
    // The device logs the ECRC Error first (with a CplD's header), then the timeout.
    let ep = s.bdf("ep").unwrap();
    let (_, a) = caps(&mut s, ep);
    let unc = s.cfg_read(ep, a + 4);
    assert_eq!(
        unc & (ECRC_ERROR | COMPLETION_TIMEOUT),
        ECRC_ERROR | COMPLETION_TIMEOUT
    );
    assert_eq!(s.cfg_read(ep, a + 0x18) & 0x1f, 19);
    let dw0 = s.cfg_read(ep, a + 0x1c);
    assert_eq!(dw0 >> 24, 0x4a, "CplD: Fmt 010, Type 01010");
    // Checking off at the device: the same run delivers the corrupted data.
    let (mut s, ok) = read_run(|s| {
        let (_, a) = caps(s, ep);
        let ctl = s.cfg_read(ep, a + 0x18);
        s.cfg_write(ep, a + 0x18, ctl & !(1 << 8));
    });
    assert_eq!(ok, serde_json::json!(true));
    assert_eq!(s.cfg_read(ep, a + 4) & ECRC_ERROR, 0);
}

#[test]
fn a_corrupted_configuration_write_is_answered_with_completer_abort() {
    let mut s = sim(true, 1.0);
    let ep = s.bdf("ep").unwrap();
    let before = s.cfg_read(ep, 0x3c);
    let r = s
        .config_write(ep, 0x3c, 0x0000_00aa, ByteEnables::ALL)
        .unwrap();
    assert_eq!(r, HostRead::Failed(CplStatus::Ca));
    assert_eq!(s.cfg_read(ep, 0x3c), before, "not applied");
    let (_, a) = caps(&mut s, ep);
    assert_eq!(s.cfg_read(ep, a + 4) & ECRC_ERROR, ECRC_ERROR);
    // Generation off at the root port: no digest, so nothing to check; the write lands
    // with its data corrupted (0xaa → 0xab).
    let rp = Bdf::new(0, 1, 0).unwrap();
    let (_, ra) = caps(&mut s, rp);
    let ctl = s.cfg_read(rp, ra + 0x18);
    s.cfg_write(rp, ra + 0x18, ctl & !(1 << 6));
    s.cfg_write(ep, a + 4, ECRC_ERROR);
    let r = s
        .config_write(ep, 0x3c, 0x0000_00aa, ByteEnables::ALL)
        .unwrap();
    assert!(matches!(r, HostRead::Done { .. }), "{r:?}");
    assert_eq!(s.cfg_read(ep, 0x3c) & 0xff, 0xab);
    assert_eq!(s.cfg_read(ep, a + 4) & ECRC_ERROR, 0);
}

#[test]
fn ecrc_stream_results_are_reproducible_and_rates_are_checked() {
    let run = || {
        let mut s = sim(true, 0.3);
        let base = s.alloc_dma(1 << 16);
        s.attach(
            "ep",
            Box::new(DmaStream::new(
                DmaOpKind::Write,
                1024,
                4,
                40,
                base,
                1 << 16,
                AddrPattern::Sequential,
            )),
        )
        .unwrap();
        s.run_until_idle(SimTime::from_ps(u64::MAX / 2));
        (internal_errors(&s, "sw->rc.0"), s.errors().len())
    };
    let a = run();
    assert!(a.0 > 0 && a.0 < 160, "{a:?}");
    assert_eq!(a.1 as u64, a.0);
    assert_eq!(run(), a);
    let bad = SimConfig {
        switch_error_rate: 1.5,
        ..SimConfig::default()
    };
    let e = FabricSim::new(&switch_tree(5, false), &KindRegistry::builtin(), bad).unwrap_err();
    assert!(e.to_string().contains("switch error rate"), "{e}");
}
