//! Data poisoning: where poisoned TLPs come from (poisoned host memory, a device's
//! poisoned DMA write or read reply, a poisoned MMIO write, `poison_rate`), what every
//! link receiver on the way sets (Detected Parity Error), and what the ultimate
//! receiver logs (AER Poisoned TLP Received, bit 12) and does with the data.

use crate::common::{caps, dev_status, hand_timing, parent, switch_tree, trace_tlps};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::FaultKind;
use pcielab_fabric::timed::{
    AddrPattern, DmaId, DmaOpKind, DmaStream, Endpoint, EpCx, ErrorSeverity, FabricSim, HostRead,
    ReadReply, ReadTicket, SimConfig,
};
use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::tlp::TlpHeader;
use pcielab_wire::Bdf;

/// Status register: Detected Parity Error.
const DETECTED_PARITY: u32 = 1 << 15;
/// Status register: Master Data Parity Error.
const MASTER_PARITY: u32 = 1 << 8;
/// AER Uncorrectable Error Status: Poisoned TLP Received.
const POISONED: u32 = 1 << 12;
/// AER Correctable Error Status: Advisory Non-Fatal Error.
const ANFE: u32 = 1 << 13;

fn status(sim: &mut FabricSim, f: Bdf) -> u32 {
    sim.cfg_read(f, 0x04) >> 16
}

fn sec_status(sim: &mut FabricSim, f: Bdf) -> u32 {
    sim.cfg_read(f, 0x1c) >> 16
}

fn uncorrectable(sim: &mut FabricSim, f: Bdf) -> u32 {
    let (_, a) = caps(sim, f);
    sim.cfg_read(f, a + 4)
}

fn correctable(sim: &mut FabricSim, f: Bdf) -> u32 {
    let (_, a) = caps(sim, f);
    sim.cfg_read(f, a + 0x10)
}

/// Sets Device Control's four error-reporting enables of `f` and unmasks Advisory
/// Non-Fatal.
fn report_all(sim: &mut FabricSim, f: Bdf) {
    let (p, a) = caps(sim, f);
    let dc = sim.cfg_read(f, p + 8);
    sim.cfg_write(f, p + 8, (dc & 0xffff) | 0xf);
    sim.cfg_write(f, a + 0x14, 0);
}

/// Sets Parity Error Response in `f`'s Command register.
fn parity_response(sim: &mut FabricSim, f: Bdf) {
    let c = sim.cfg_read(f, 0x04) & 0xffff;
    sim.cfg_write(f, 0x04, c | 1 << 6);
}

fn sim(trace: bool) -> FabricSim {
    sim_with(hand_timing(trace))
}

/// [`switch_tree`] with `cfg`.
fn sim_with(cfg: SimConfig) -> FabricSim {
    FabricSim::new(&switch_tree(3, false), &KindRegistry::builtin(), cfg).unwrap()
}

/// A traced [`sim`], Parity Error Response set in the device, with the functions on
/// its path: [device, switch downstream port, switch upstream port, root port].
fn traced_with_parity() -> (FabricSim, [Bdf; 4]) {
    let mut s = sim(true);
    let ep = s.bdf("ep").unwrap();
    let dp = parent(&s, ep);
    let up = parent(&s, dp);
    parity_response(&mut s, ep);
    (s, [ep, dp, up, Bdf::new(0, 1, 0).unwrap()])
}

fn counters(sim: &FabricSim, link: &str) -> pcielab_fabric::timed::DirCounters {
    sim.counters()
        .into_iter()
        .find(|(n, _)| n == link)
        .unwrap_or_else(|| panic!("no link {link}"))
        .1
}

/// A DMA-read stream of one 4 KiB read at `base`; returns its report.
fn one_read(sim: &mut FabricSim, base: u64) -> serde_json::Value {
    sim.attach(
        "ep",
        Box::new(DmaStream::new(
            DmaOpKind::Read,
            4096,
            1,
            1,
            base,
            4096,
            AddrPattern::Sequential,
        )),
    )
    .unwrap();
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    sim.model("ep").unwrap().report().unwrap()
}

#[test]
fn poisoned_host_memory_fails_the_read_and_only_the_completion_carrying_it_is_poisoned() {
    let (mut s, [ep, dp, up, rp]) = traced_with_parity();
    let base = s.alloc_dma(4096);
    s.host_write(base, &[0x5a; 4096]);
    s.poison_host_memory(base + 0x840, 1);
    assert!(s.host_memory_poisoned(base + 0x800, 0x80));
    assert!(!s.host_memory_poisoned(base + 0x880, 0x780));
    let r = one_read(&mut s, base);
    assert_eq!(
        (r["dmas"].as_u64(), r["failed"].as_u64()),
        (Some(1), Some(1))
    );
    // 4 KiB at MRRS 512 and MPS 256: 16 CplDs on each link down, one of them poisoned
    // (the one carrying bytes 0x800..0x900).
    let t = s.trace().unwrap();
    let mut cpl = std::collections::BTreeMap::<String, (u32, u32)>::new();
    for (rec, p) in trace_tlps(t) {
        if let TlpHeader::Cpl(_) = p.header {
            let e = cpl
                .entry(t.dir_names[rec.dir as usize].clone())
                .or_default();
            e.0 += 1;
            e.1 += p.ep as u32;
        }
    }
    let want: std::collections::BTreeMap<String, (u32, u32)> = [
        ("rc.0->sw".to_string(), (16, 1)),
        ("sw.0->ep".to_string(), (16, 1)),
    ]
    .into();
    assert_eq!(cpl, want);
    assert_eq!(counters(&s, "rc.0->sw").poisoned, 1);
    assert_eq!(counters(&s, "sw.0->ep").poisoned, 1);
    assert_eq!(counters(&s, "ep->sw.0").poisoned, 0);
    // The requester: Poisoned TLP Received as an Advisory Non-Fatal Error (severity
    // Non-Fatal by default), Correctable Error Detected; Detected Parity Error, and
    // Master Data Parity Error since Parity Error Response is set.
    assert_eq!(uncorrectable(&mut s, ep) & POISONED, POISONED);
    assert_eq!(correctable(&mut s, ep) & ANFE, ANFE);
    assert_eq!(dev_status(&mut s, ep) & 0b111, 0b001);
    assert_eq!(
        status(&mut s, ep) & (DETECTED_PARITY | MASTER_PARITY),
        DETECTED_PARITY | MASTER_PARITY
    );
    // On the way down: the switch's upstream port received it on its primary side
    // (Status); the downstream port only sent it on, as did the root port.
    assert_eq!(status(&mut s, up) & DETECTED_PARITY, DETECTED_PARITY);
    assert_eq!(sec_status(&mut s, dp) & DETECTED_PARITY, 0);
    assert_eq!(status(&mut s, dp) & DETECTED_PARITY, 0);
    assert_eq!(sec_status(&mut s, rp) & DETECTED_PARITY, 0);
    // Only the requester logs in AER.
    for f in [up, dp, rp] {
        assert_eq!(uncorrectable(&mut s, f) & POISONED, 0, "{f}");
    }
    assert!(s
        .errors()
        .iter()
        .any(|e| e.is(FaultKind::Poisoned) && e.message.contains("poisoned completion")));
}

#[test]
fn without_parity_error_response_master_data_parity_stays_clear() {
    let mut s = sim(false);
    let ep = s.bdf("ep").unwrap();
    let base = s.alloc_dma(4096);
    s.poison_host_memory(base, 4096);
    let r = one_read(&mut s, base);
    assert_eq!(r["failed"].as_u64(), Some(1));
    assert_eq!(
        status(&mut s, ep) & (DETECTED_PARITY | MASTER_PARITY),
        DETECTED_PARITY
    );
    // Every completion poisoned.
    assert_eq!(counters(&s, "sw.0->ep").poisoned, 16);
}

#[test]
fn a_whole_line_written_clean_is_no_longer_poisoned() {
    let mut s = sim(false);
    let base = s.alloc_dma(4096);
    s.poison_host_memory(base, 192); // lines 0, 1, 2
    s.host_write(base + 0x10, &[1; 0x70]); // line 1 whole, line 0 in part
    assert!(s.host_memory_poisoned(base, 0x40));
    assert!(!s.host_memory_poisoned(base + 0x40, 0x40));
    assert!(s.host_memory_poisoned(base + 0x80, 1));
    let r = one_read(&mut s, base + 0x40);
    // Bytes 0x40..0x1040: lines 1 (clean) and 2 (poisoned): it fails.
    assert_eq!(r["failed"].as_u64(), Some(1));
}

/// A device that, on start, DMA-writes 100 poisoned bytes, then (after a while) reads
/// them back and records how the read ended.
#[derive(Debug, Default)]
struct PoisonWriter {
    base: u64,
    read_ok: Option<bool>,
}

impl Endpoint for PoisonWriter {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        cx.dma_write_poisoned(self.base + 0x10, vec![0xee; 100]);
    }
    fn dma_done(&mut self, id: DmaId, ok: bool, _data: &[u8], cx: &mut EpCx<'_>) {
        if id == DmaId(0) {
            assert!(ok, "the write itself goes out");
            cx.dma_read(self.base, 256);
        } else {
            self.read_ok = Some(ok);
        }
    }
    fn report(&self) -> Option<serde_json::Value> {
        Some(serde_json::json!({ "read_ok": self.read_ok }))
    }
}

#[test]
fn a_poisoned_dma_write_poisons_host_memory_and_the_root_port_logs_it() {
    let (mut s, [ep, dp, up, rp]) = traced_with_parity();
    report_all(&mut s, rp);
    let base = s.alloc_dma(4096);
    s.attach(
        "ep",
        Box::new(PoisonWriter {
            base,
            read_ok: None,
        }),
    )
    .unwrap();
    s.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    // The data is in memory, and lines 0 and 1 (bytes 0x10..0x74) are poisoned.
    let mut b = [0u8; 100];
    s.host_read(base + 0x10, &mut b);
    assert_eq!(b, [0xee; 100]);
    assert!(s.host_memory_poisoned(base, 0x80));
    assert!(s.host_memory_poisoned(base + 0x40, 1));
    assert!(!s.host_memory_poisoned(base + 0x80, 0x1000 - 0x80));
    // The read back of those bytes failed.
    let r = s.model("ep").unwrap().report().unwrap();
    assert_eq!(r["read_ok"], serde_json::json!(false));
    // Every MWr on the wire up has EP set.
    let t = s.trace().unwrap();
    let mwr: Vec<(String, bool)> = trace_tlps(t)
        .filter(|(_, p)| matches!(&p.header, TlpHeader::Mem(h) if h.op == pcielab_wire::tlp::MemOp::Write))
        .map(|(r, p)| (t.dir_names[r.dir as usize].clone(), p.ep))
        .collect();
    assert_eq!(
        mwr,
        [
            ("ep->sw.0".to_string(), true),
            ("sw->rc.0".to_string(), true)
        ]
    );
    // The writer: Master Data Parity Error (Parity Error Response set), no AER.
    assert_eq!(status(&mut s, ep) & MASTER_PARITY, MASTER_PARITY);
    // Link receivers on the way up take it on their secondary side.
    assert_eq!(sec_status(&mut s, dp) & DETECTED_PARITY, DETECTED_PARITY);
    assert_eq!(sec_status(&mut s, rp) & DETECTED_PARITY, DETECTED_PARITY);
    // The switch's upstream port took the poisoned completions of the read back.
    assert_eq!(status(&mut s, up) & DETECTED_PARITY, DETECTED_PARITY);
    // The root port logs Poisoned TLP Received, Non-Fatal, and signals it to itself:
    // Root Error Status ERR_FATAL/NONFATAL Received and Non-Fatal Error Messages
    // Received, with its own ID as the source.
    assert_eq!(uncorrectable(&mut s, rp) & POISONED, POISONED);
    assert_eq!(dev_status(&mut s, rp) & 0b111, 0b010);
    let (_, ra) = caps(&mut s, rp);
    assert_eq!(s.cfg_read(rp, ra + 0x30) & 0x24, 0x24);
    assert_eq!(s.cfg_read(rp, ra + 0x34) >> 16, rp.raw() as u32);
    let msgs = s.error_messages().to_vec();
    // The write, then each of the read's poisoned completions goes to the device: the
    // device's advisory errors stay with it (its reporting is off).
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert_eq!(
        (msgs[0].1.root_port, msgs[0].1.source, msgs[0].1.severity),
        (rp, rp, ErrorSeverity::NonFatal)
    );
}

#[test]
fn a_poisoned_mmio_write_is_dropped_by_the_device_which_reports_it() {
    let mut s = sim(false);
    let ep = s.bdf("ep").unwrap();
    let rp = Bdf::new(0, 1, 0).unwrap();
    report_all(&mut s, ep);
    let bar = s.bar("ep", 0).unwrap();
    s.mmio_write(bar, &[1, 2, 3, 4]).unwrap();
    s.mmio_write_poisoned(bar, &[9, 9, 9, 9]).unwrap();
    let HostRead::Done { data, .. } = s.mmio_read(bar, 4).unwrap() else {
        panic!("read failed");
    };
    assert_eq!(data, [1, 2, 3, 4], "the poisoned data was not written");
    assert_eq!(uncorrectable(&mut s, ep) & POISONED, POISONED);
    assert_eq!(correctable(&mut s, ep) & ANFE, 0, "not advisory");
    assert_eq!(dev_status(&mut s, ep) & 0b111, 0b010);
    assert_eq!(status(&mut s, ep) & DETECTED_PARITY, DETECTED_PARITY);
    let msgs = s.error_messages().to_vec();
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert_eq!(
        (msgs[0].1.root_port, msgs[0].1.source, msgs[0].1.severity),
        (rp, ep, ErrorSeverity::NonFatal)
    );
    // Severity Fatal: the next one is ERR_FATAL.
    let (_, a) = caps(&mut s, ep);
    let sev = s.cfg_read(ep, a + 0x0c);
    s.cfg_write(ep, a + 0x0c, sev | POISONED);
    s.mmio_write_poisoned(bar, &[9, 9, 9, 9]).unwrap();
    s.run_for(SimDuration::from_us(5));
    let last = s.error_messages().last().unwrap().1;
    assert_eq!((last.source, last.severity), (ep, ErrorSeverity::Fatal));
    // Masked: logged, not signalled.
    s.cfg_write(ep, a + 8, POISONED);
    let n = s.error_messages().len();
    s.mmio_write_poisoned(bar, &[9, 9, 9, 9]).unwrap();
    s.run_for(SimDuration::from_us(5));
    assert_eq!(s.error_messages().len(), n);
}

/// A device whose BAR 0 reads come back poisoned: at once at offset 0, later (with a
/// ticket) elsewhere.
#[derive(Debug, Default)]
struct BadRam;

impl Endpoint for BadRam {
    fn mem_read(&mut self, _bar: u8, off: u64, buf: &mut [u8], cx: &mut EpCx<'_>) -> ReadReply {
        buf.fill(0xab);
        if off == 0 {
            ReadReply::Poisoned
        } else {
            cx.timer(SimDuration::from_ns(50), off);
            ReadReply::Later(ReadTicket(off))
        }
    }
    fn timer(&mut self, token: u64, cx: &mut EpCx<'_>) {
        cx.complete_poisoned(ReadTicket(token), vec![0xcd; 8]);
    }
}

#[test]
fn a_device_answering_with_poisoned_data_makes_the_host_read_poisoned() {
    let mut s = sim(false);
    let ep = s.bdf("ep").unwrap();
    let rp = Bdf::new(0, 1, 0).unwrap();
    s.attach("ep", Box::new(BadRam)).unwrap();
    let bar = s.bar("ep", 0).unwrap();
    match s.mmio_read(bar, 8).unwrap() {
        HostRead::Poisoned { data, issued, done } => {
            assert_eq!(data, [0xab; 8]);
            assert!(done > issued);
        }
        other => panic!("{other:?}"),
    }
    match s.mmio_read(bar + 0x100, 8).unwrap() {
        HostRead::Poisoned { data, .. } => assert_eq!(data, [0xcd; 8]),
        other => panic!("{other:?}"),
    }
    // The root port, the ultimate receiver, logs it; the device only sent it.
    assert_eq!(uncorrectable(&mut s, rp) & POISONED, POISONED);
    assert_eq!(sec_status(&mut s, rp) & DETECTED_PARITY, DETECTED_PARITY);
    assert_eq!(uncorrectable(&mut s, ep) & POISONED, 0);
    assert_eq!(status(&mut s, ep) & DETECTED_PARITY, 0);
}

#[test]
fn poison_rate_one_poisons_every_tlp_with_data_and_nothing_else() {
    let mut s = sim_with(SimConfig {
        poison_rate: 1.0,
        ..hand_timing(false)
    });
    let base = s.alloc_dma(1 << 16);
    s.attach(
        "ep",
        Box::new(DmaStream::new(
            DmaOpKind::ReadWrite,
            1024,
            4,
            20,
            base,
            1 << 16,
            AddrPattern::Sequential,
        )),
    )
    .unwrap();
    s.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    let r = s.model("ep").unwrap().report().unwrap();
    // Reads (10 of 20) fail; writes go out.
    assert_eq!(
        (r["dmas"].as_u64(), r["failed"].as_u64()),
        (Some(20), Some(10))
    );
    let up = counters(&s, "ep->sw.0");
    let down = counters(&s, "sw.0->ep");
    // Up: 10 × 4 MWr (poisoned) and 10 × 2 MRd (no data); down: 10 × 4 CplD.
    assert_eq!((up.tlps, up.poisoned), (60, 40));
    assert_eq!((down.tlps, down.poisoned), (40, 40));
    // The writes went to the odd 4 KiB slots, and poisoned them; the reads' slots stay
    // clean.
    for k in 0..16u64 {
        assert_eq!(
            s.host_memory_poisoned(base + 4096 * k, 1024),
            k % 2 == 1,
            "slot {k}"
        );
    }
}

#[test]
fn poison_rate_is_seeded_and_validated() {
    let run = |seed: u64| {
        let cfg = SimConfig {
            poison_rate: 0.3,
            seed: Some(seed),
            ..hand_timing(true)
        };
        let mut s = sim_with(cfg);
        let base = s.alloc_dma(1 << 16);
        let r = one_read(&mut s, base);
        let t = s.take_trace().unwrap();
        (
            r,
            t.records.len(),
            t.records.iter().map(|x| x.time_ps).collect::<Vec<_>>(),
            counters(&s, "sw.0->ep").poisoned,
        )
    };
    let a = run(1);
    assert_eq!(a, run(1));
    assert!(a.3 > 0 && a.3 < 16, "{}", a.3);
    let bad = SimConfig {
        poison_rate: 1.5,
        ..SimConfig::default()
    };
    let e = FabricSim::new(&switch_tree(3, false), &KindRegistry::builtin(), bad).unwrap_err();
    assert!(e.to_string().contains("poison rate"), "{e}");
}

#[test]
fn a_poisoned_configuration_write_is_refused() {
    let mut s = sim_with(SimConfig {
        poison_rate: 1.0,
        ..hand_timing(false)
    });
    let ep = s.bdf("ep").unwrap();
    let before = s.cfg_read(ep, 0x3c) & 0xff;
    let r = s
        .config_write(ep, 0x3c, before ^ 0x5a, pcielab_wire::ByteEnables::ALL)
        .unwrap();
    assert_eq!(r, HostRead::Failed(pcielab_wire::CplStatus::Ur));
    assert_eq!(s.cfg_read(ep, 0x3c) & 0xff, before, "not written");
    // The completer logs the Unsupported Request (which takes precedence).
    assert_eq!(uncorrectable(&mut s, ep) & (1 << 20 | POISONED), 1 << 20);
}

/// A memory whose byte at one offset of BAR 0 is bad: reads that include it come back
/// poisoned.
#[derive(Debug)]
struct BadLine(u64);

impl Endpoint for BadLine {
    fn mem_read(&mut self, _bar: u8, off: u64, buf: &mut [u8], _cx: &mut EpCx<'_>) -> ReadReply {
        buf.fill(7);
        if (off..off + buf.len() as u64).contains(&self.0) {
            ReadReply::Poisoned
        } else {
            ReadReply::Now
        }
    }
}

#[test]
fn a_peer_read_rebuilt_by_the_root_complex_keeps_the_poison_of_any_piece() {
    let topo = pcielab_fabric::topology::Topology::parse(
        "seed = 1\n[[node]]\nname=\"rc\"\nkind=\"root-complex\"\nports=2\n\
         [[node]]\nname=\"a\"\nkind=\"psmem\"\n[[node]]\nname=\"b\"\nkind=\"psmem\"\n\
         [[link]]\nup=\"rc.0\"\ndown=\"a\"\ngen=3\nwidth=8\n\
         [[link]]\nup=\"rc.1\"\ndown=\"b\"\ngen=3\nwidth=8\n",
        "p2p.toml",
        &KindRegistry::builtin(),
    )
    .unwrap();
    for (split, want) in [(None, (0, 2, 2)), (Some(64), (0, 1, 2))] {
        let cfg = SimConfig {
            p2p_split: split,
            ..SimConfig::default()
        };
        let mut s = FabricSim::new(&topo, &KindRegistry::builtin(), cfg).unwrap();
        let peer = s.bar("b", 0).unwrap();
        s.attach("b", Box::new(BadLine(0x40))).unwrap();
        s.attach(
            "a",
            Box::new(DmaStream::new(
                DmaOpKind::Read,
                512,
                1,
                1,
                peer,
                4096,
                AddrPattern::Sequential,
            )),
        )
        .unwrap();
        s.run_until_idle(SimTime::from_ps(u64::MAX / 2));
        let r = s.model("a").unwrap().report().unwrap();
        assert_eq!(r["failed"].as_u64(), Some(1), "{split:?}");
        // Whole: b answers 512 bytes at once, both CplDs poisoned. Split: b answers
        // eight 64-byte reads, one poisoned; both rebuilt CplDs carry it.
        let got = (
            counters(&s, "rc.1->b").poisoned,
            counters(&s, "b->rc.1").poisoned,
            counters(&s, "rc.0->a").poisoned,
        );
        assert_eq!(got, want, "{split:?}");
        let a = s.bdf("a").unwrap();
        assert_eq!(uncorrectable(&mut s, a) & POISONED, POISONED);
        // The root complex only passed it on.
        let rp = Bdf::new(0, 2, 0).unwrap();
        assert_eq!(uncorrectable(&mut s, rp) & POISONED, 0);
    }
}
