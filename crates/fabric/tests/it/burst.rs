//! Burst mode (`SimConfig::burst`) against the exact model: the same TLPs on every
//! link, the same bytes in host memory, the same saturated throughput; off where it
//! would change what is modelled.

use crate::timed::{one_link, with_switch};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{
    AddrPattern, DmaId, DmaOpKind, DmaStream, Endpoint, EpCx, FabricSim, LinkTiming, SimConfig,
    SimError, TraceKind, TraceRecord,
};
use pcielab_fabric::topology::Topology;
use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::Generation;
use std::collections::BTreeMap;

/// Runs `count` DMA writes of `size` bytes (window 16) from `ep` with `cfg` and
/// `burst`; returns the finished simulation and the DMA buffer's base.
fn run_writes(t: &Topology, cfg: &SimConfig, burst: u8, size: u64, count: u64) -> (FabricSim, u64) {
    run_dma(t, cfg, burst, DmaOpKind::Write, size, count)
}

/// [`run_writes`] with DMAs of kind `op`.
fn run_dma(
    t: &Topology,
    cfg: &SimConfig,
    burst: u8,
    op: DmaOpKind,
    size: u64,
    count: u64,
) -> (FabricSim, u64) {
    let cfg = SimConfig {
        burst,
        dma_tags: 256,
        ..cfg.clone()
    };
    let mut sim = FabricSim::new(t, &KindRegistry::builtin(), cfg).unwrap();
    let region = 1 << 20;
    let base = sim.alloc_dma(region);
    let stream = DmaStream::new(op, size, 16, count, base, region, AddrPattern::Sequential);
    sim.attach("ep", Box::new(stream)).unwrap();
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
    (sim, base)
}

/// Per direction name: the TLPs of the trace in order, as (sequence number, bytes)
/// (also for `scatter.rs`).
pub(crate) fn tlps_by_dir(sim: &FabricSim) -> BTreeMap<String, Vec<(u16, Vec<u8>)>> {
    let t = sim.trace().expect("trace on");
    let mut m: BTreeMap<String, Vec<(u16, Vec<u8>)>> = BTreeMap::new();
    for r in &t.records {
        if let pcielab_fabric::timed::TraceKind::Tlp { seq, .. } = r.kind {
            m.entry(t.dir_name(r).to_string())
                .or_default()
                .push((seq, t.bytes(r).to_vec()));
        }
    }
    m
}

#[test]
fn bursts_carry_the_same_tlps_and_bytes_as_the_exact_model() {
    // 1000-byte writes (three whole 256-byte TLPs and a 232-byte one: a burst of three
    // and a single TLP) and 4 KiB writes (one burst of 16), through a switch.
    for size in [1000u64, 4096] {
        let cfg = SimConfig {
            trace: true,
            ..SimConfig::default()
        };
        let t = with_switch(3, 4);
        let (exact, base) = run_writes(&t, &cfg, 1, size, 48);
        let (burst, base_b) = run_writes(&t, &cfg, 16, size, 48);
        assert_eq!(base, base_b);
        // Every byte, computed independently of the workload code: byte k of DMA i is
        // k ^ (i * 31) (mod 256); DMA i starts at base + i * 4096.
        for i in 0..48u64 {
            let mut got = vec![0u8; size as usize];
            burst.host_read(base + i * 4096, &mut got);
            let want: Vec<u8> = (0..size)
                .map(|k| (k as u8) ^ (i as u8).wrapping_mul(31))
                .collect();
            assert_eq!(got, want, "size {size}, DMA {i}");
        }
        // The same TLPs, with the same sequence numbers, in the same order on every
        // link direction.
        let (a, b) = (tlps_by_dir(&exact), tlps_by_dir(&burst));
        assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
        for (dir, tlps) in &a {
            assert_eq!(tlps.len(), b[dir].len(), "size {size}, {dir}");
            assert!(tlps == &b[dir], "size {size}: TLPs differ on {dir}");
        }
        // Counters per direction: the same TLPs and payload.
        let (ca, cb) = (exact.counters(), burst.counters());
        for ((na, x), (nb, y)) in ca.iter().zip(cb.iter()) {
            assert_eq!(na, nb);
            assert_eq!(
                (x.tlps, x.posted, x.payload_bytes),
                (y.tlps, y.posted, y.payload_bytes),
                "{na}"
            );
        }
        // Burst mode did group them: fewer kernel events (half as many for whole
        // pages of 16 TLPs).
        let factor = if size == 4096 { 2 } else { 1 };
        assert!(
            burst.events() * factor < exact.events(),
            "size {size}: {} events in burst mode, {} exact",
            burst.events(),
            exact.events()
        );
    }
}

#[test]
fn read_completions_in_bursts_are_the_exact_models_tlps() {
    // 4 KiB reads (MRRS 512: eight MRds, each answered by two whole 256-byte CplDs,
    // one burst of two) and 1000-byte reads from an unaligned address (partial
    // completions go alone), through a switch, with MRRS 512 and 4096.
    for (size, mrrs) in [(4096u64, 512u16), (1000, 512), (4096, 4096)] {
        let cfg = SimConfig {
            trace: true,
            mrrs,
            ..SimConfig::default()
        };
        let t = with_switch(3, 4);
        let (exact, _) = run_dma(&t, &cfg, 1, DmaOpKind::Read, size, 48);
        let (burst, _) = run_dma(&t, &cfg, 16, DmaOpKind::Read, size, 48);
        let what = format!("{size}-byte reads, MRRS {mrrs}");
        // MRRS 512: a page's eight read requests go in bursts too (with consecutive
        // tags, here the engine's first ones, handed out from the top down).
        assert_eq!(burst.read_burst_size() > 1, mrrs == 512, "{what}");
        // … and their completions in bursts that answer several of them (more than
        // one request's two 256-byte completions).
        if mrrs == 512 {
            assert!(burst.completion_burst_size() > 2, "{what}");
        }
        let (a, b) = (tlps_by_dir(&exact), tlps_by_dir(&burst));
        assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
        for (dir, tlps) in &a {
            assert_eq!(tlps.len(), b[dir].len(), "{what}, {dir}");
            assert!(tlps == &b[dir], "{what}: TLPs differ on {dir}");
        }
        for ((na, x), (_, y)) in exact.counters().iter().zip(burst.counters().iter()) {
            assert_eq!(
                (x.tlps, x.completions, x.payload_bytes),
                (y.tlps, y.completions, y.payload_bytes),
                "{what}: {na}"
            );
        }
        assert!(
            burst.events() < exact.events(),
            "{what}: {} events in burst mode, {} exact",
            burst.events(),
            exact.events()
        );
    }
}

/// What a [`ReadOnce`] got: whether the DMA succeeded, and its bytes.
type ReadResult = std::rc::Rc<std::cell::RefCell<Option<(bool, Vec<u8>)>>>;

/// Reads `len` bytes at `addr` by DMA once and keeps what comes back.
#[derive(Debug, Default)]
struct ReadOnce {
    addr: u64,
    len: u64,
    got: ReadResult,
}

impl Endpoint for ReadOnce {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        cx.dma_read(self.addr, self.len);
    }
    fn dma_done(&mut self, _id: DmaId, ok: bool, data: &[u8], _cx: &mut EpCx<'_>) {
        *self.got.borrow_mut() = Some((ok, data.to_vec()));
    }
}

#[test]
fn a_dma_read_in_bursts_returns_host_memory() {
    // 64 KiB from an address 0x40 into a page: whole and partial completions mixed.
    let cfg = SimConfig {
        mrrs: 4096,
        burst: 16,
        ..SimConfig::default()
    };
    let mut sim = FabricSim::new(&with_switch(3, 4), &KindRegistry::builtin(), cfg).unwrap();
    assert!(sim.completion_burst_size() > 1);
    let base = sim.alloc_dma(1 << 17);
    let want: Vec<u8> = (0..1u64 << 16).map(|k| (k * 7 + (k >> 8)) as u8).collect();
    sim.host_write(base + 0x40, &want);
    let dev = ReadOnce {
        addr: base + 0x40,
        len: 1 << 16,
        ..ReadOnce::default()
    };
    let got = dev.got.clone();
    sim.attach("ep", Box::new(dev)).unwrap();
    let exact_events = {
        let cfg = SimConfig {
            mrrs: 4096,
            ..SimConfig::default()
        };
        let mut e = FabricSim::new(&with_switch(3, 4), &KindRegistry::builtin(), cfg).unwrap();
        let base = e.alloc_dma(1 << 17);
        e.host_write(base + 0x40, &want);
        let dev = ReadOnce {
            addr: base + 0x40,
            len: 1 << 16,
            ..ReadOnce::default()
        };
        e.attach("ep", Box::new(dev)).unwrap();
        e.run_until_idle(SimTime::from_ps(u64::MAX / 2));
        e.events()
    };
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
    let (ok, data) = got.borrow_mut().take().expect("the read finished");
    assert!(ok);
    assert!(data == want, "the bytes read differ from host memory");
    assert!(
        sim.events() * 2 < exact_events,
        "{} vs {exact_events}",
        sim.events()
    );
}

#[test]
fn burst_pieces_are_traced_at_the_times_the_exact_model_sends_them() {
    // The first DMA finds the link idle: the exact model sends its 16 TLPs back to
    // back, and the burst's pieces must be traced at exactly those times, with
    // consecutive sequence numbers.
    let cfg = SimConfig {
        trace: true,
        ..SimConfig::default()
    };
    let up_tlps = |sim: &FabricSim| -> Vec<(u64, u16)> {
        let t = sim.trace().unwrap();
        t.records
            .iter()
            .filter(|r| t.dir_name(r) == "ep->rc.0")
            .filter_map(|r| match r.kind {
                pcielab_fabric::timed::TraceKind::Tlp { seq, .. } => Some((r.time_ps, seq)),
                _ => None,
            })
            .collect()
    };
    let (exact, _) = run_writes(&one_link(3, 4), &cfg, 1, 4096, 4);
    let (burst, _) = run_writes(&one_link(3, 4), &cfg, 16, 4096, 4);
    let (a, b) = (up_tlps(&exact), up_tlps(&burst));
    assert_eq!(a.len(), 64);
    assert_eq!(b.len(), 64);
    assert_eq!(a[..16], b[..16]);
    // Later pieces: consecutive sequence numbers, each piece one TLP time after the
    // one before it (back to back within a burst).
    let seqs: Vec<u16> = b.iter().map(|x| x.1).collect();
    assert_eq!(seqs, (0..64).collect::<Vec<u16>>());
    let step = a[1].0 - a[0].0;
    for burst in b.chunks(16) {
        for w in burst.windows(2) {
            assert!(
                w[1].0 - w[0].0 >= step - 1 && w[1].0 - w[0].0 <= step + 1,
                "{w:?}"
            );
        }
    }
}

#[test]
fn burst_traces_are_in_time_order_and_stream_out_whole() {
    // A burst's pieces are recorded when the burst starts, with their own later
    // times; other directions' TLPs and DLLPs sent meanwhile must still come before
    // them in the trace, as in the exact model's. Read/write mixes at Gen3 x8 (write
    // bursts of 16, completion bursts of 2) directly and through a switch.
    let cfg = SimConfig {
        trace: true,
        ..SimConfig::default()
    };
    for (what, t) in [("one link", one_link(3, 8)), ("switch", with_switch(3, 8))] {
        let (exact, _) = run_dma(&t, &cfg, 1, DmaOpKind::ReadWrite, 4096, 64);
        let (burst, _) = run_dma(&t, &cfg, 16, DmaOpKind::ReadWrite, 4096, 64);
        assert!(burst.burst_size() > 1 && burst.completion_burst_size() > 1);
        for sim in [&exact, &burst] {
            let times: Vec<u64> = sim
                .trace()
                .unwrap()
                .records
                .iter()
                .map(|r| r.time_ps)
                .collect();
            assert!(times.len() > 1000, "{what}");
            if let Some(i) = times.windows(2).position(|w| w[1] < w[0]) {
                panic!(
                    "{what}: record {} at {} ps after one at {} ps",
                    i + 1,
                    times[i + 1],
                    times[i]
                );
            }
        }
        // Streamed out in pieces (every 2 µs, as `pcielab sim --pcap` does every 20):
        // the pieces, one after the other, are the whole trace of the same run.
        let whole = burst.trace().unwrap().clone();
        let run = SimConfig {
            burst: 16,
            dma_tags: 256,
            ..cfg.clone()
        };
        let mut sim = FabricSim::new(&t, &KindRegistry::builtin(), run).unwrap();
        let base = sim.alloc_dma(1 << 20);
        let stream = DmaStream::new(
            DmaOpKind::ReadWrite,
            4096,
            16,
            64,
            base,
            1 << 20,
            AddrPattern::Sequential,
        );
        sim.attach("ep", Box::new(stream)).unwrap();
        let mut got: Vec<(u64, u16, Vec<u8>)> = Vec::new();
        let mut until = SimTime::ZERO;
        let piece = |t: pcielab_fabric::timed::Trace, got: &mut Vec<_>| {
            for r in &t.records {
                got.push((r.time_ps, r.dir, t.bytes(r).to_vec()));
            }
        };
        while sim.pending_events() > 0 {
            until += SimDuration::from_us(2);
            sim.run_until_idle(until);
            let t = sim.take_trace().unwrap();
            // Nothing taken lies after now: a burst still on the wire waits.
            assert!(t.records.iter().all(|r| r.time_ps <= sim.now().as_ps()));
            piece(t, &mut got);
        }
        piece(sim.take_whole_trace().unwrap(), &mut got);
        let want: Vec<(u64, u16, Vec<u8>)> = whole
            .records
            .iter()
            .map(|r| (r.time_ps, r.dir, whole.bytes(r).to_vec()))
            .collect();
        assert_eq!(got.len(), want.len(), "{what}");
        assert!(got == want, "{what}: streamed trace differs");
    }
}

#[test]
fn dllps_go_between_a_bursts_pieces_and_postpone_its_arrival() {
    // A read/write mix from a device on a Gen3 x4 link below a switch whose link to
    // the root complex is Gen3 x16: write bursts go up while completions come down,
    // so the device's ACKs for the completions go up between the pieces of its write
    // bursts, as the exact model sends them after the TLP on the wire. Each moves the
    // burst's later pieces on by its wire time, so the burst ends, and arrives, that
    // much later. The wider link above drains each burst before the next one is in,
    // so the switch (store and forward, 150 ns) forwards every burst exactly 150 ns
    // after its last piece is in: never earlier.
    let topo = Topology::parse(
        "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n\
         [[node]]\nname=\"sw\"\nkind=\"switch\"\nports=1\n\
         [[node]]\nname=\"ep\"\nkind=\"psmem\"\n\
         [[link]]\nup=\"rc.0\"\ndown=\"sw\"\ngen=3\nwidth=16\n\
         [[link]]\nup=\"sw.0\"\ndown=\"ep\"\ngen=3\nwidth=4\n",
        "t.toml",
        &KindRegistry::builtin(),
    )
    .unwrap();
    let cfg = SimConfig {
        trace: true,
        ..SimConfig::default()
    };
    let (sim, _) = run_dma(&topo, &cfg, 16, DmaOpKind::ReadWrite, 4096, 64);
    let b = sim.burst_size() as u64;
    assert!(b > 1, "no write bursts");
    let t = sim.trace().unwrap();
    let timing = LinkTiming::new(Generation::Gen3, 4);
    let dir = |name: &str| -> Vec<&TraceRecord> {
        t.records.iter().filter(|r| t.dir_name(r) == name).collect()
    };
    let (ing, egr) = (dir("ep->sw.0"), dir("sw->rc.0"));
    // 64-bit MWr (Fmt/Type 0x60; DLLPs are 6 bytes): address in bytes 8..16.
    let mwr_addr = |r: &TraceRecord| -> Option<u64> {
        let b = t.bytes(r);
        (b.len() > 16 && b[0] == 0x60).then(|| u64::from_be_bytes(b[8..16].try_into().unwrap()))
    };
    let seq = |r: &TraceRecord| match r.kind {
        TraceKind::Tlp { seq, .. } => Some(seq),
        TraceKind::Dllp => None,
    };
    // DLLPs between two pieces of one burst (consecutive sequence numbers, MWrs).
    let inside = ing
        .windows(3)
        .filter(|w| {
            seq(w[1]).is_none()
                && matches!((seq(w[0]), seq(w[2])), (Some(a), Some(c)) if c == a + 1)
                && mwr_addr(w[0]).is_some()
                && mwr_addr(w[2]).is_some()
        })
        .count();
    assert!(inside > 10, "{inside} DLLPs between pieces");
    // The wire never carries two records at once.
    let wire_ps = |r: &TraceRecord| {
        let bytes = match r.kind {
            TraceKind::Tlp { .. } => timing.tlp_wire_bytes(t.bytes(r).len() as u64),
            TraceKind::Dllp => timing.dllp_wire_bytes(),
        };
        timing.units_to_ps_ceil(timing.units(bytes))
    };
    for w in ing.windows(2) {
        let end = w[0].time_ps + wire_ps(w[0]);
        assert!(end <= w[1].time_ps + 1, "overlap at {} ps", w[1].time_ps);
    }
    let end_in: BTreeMap<u64, u64> = ing
        .iter()
        .filter_map(|r| mwr_addr(r).map(|a| (a, r.time_ps + wire_ps(r))))
        .collect();
    let (mut checked, mut exact) = (0, 0);
    for r in &egr {
        let Some(a) = mwr_addr(r) else { continue };
        // The first piece of its burst: bursts group `b` MPS chunks of a page.
        if (a % 4096) % (b * 256) != 0 {
            continue;
        }
        let Some(&in_at) = end_in.get(&(a + (b - 1) * 256)) else {
            continue;
        };
        let slack = r.time_ps as i64 - (in_at + 150_000) as i64;
        assert!(slack >= -1, "burst at {a:#x} forwarded {} ps early", -slack);
        checked += 1;
        exact += (slack <= 1) as u32;
    }
    // Most bursts found the wider link idle (forwarded exactly 150 ns after).
    assert!(checked >= 30 && exact * 2 > checked, "{exact} of {checked}");
}

#[test]
fn a_refused_burst_signals_an_error_per_tlp_as_the_exact_model() {
    // The switch's downstream port above the device has Bus Master Enable clear: it
    // refuses every request from below (Unsupported Request: posted writes logged,
    // read requests answered with UR). Whole-page write and read bursts must be
    // refused TLP by TLP as the exact model refuses them: the same error messages.
    let run = |burst: u8| {
        let cfg = SimConfig {
            burst,
            dma_tags: 256,
            ..SimConfig::default()
        };
        let t = with_switch(3, 4);
        let mut sim = FabricSim::new(&t, &KindRegistry::builtin(), cfg).unwrap();
        let ep = sim.bdf("ep").unwrap();
        let dsp = crate::common::parent(&sim, ep);
        // Every error reported (Device Control bits 0-3), Advisory Non-Fatal unmasked.
        let (p, a) = crate::common::caps(&mut sim, dsp);
        let dc = sim.cfg_read(dsp, p + 8);
        sim.cfg_write(dsp, p + 8, (dc & 0xffff) | 0xf);
        sim.cfg_write(dsp, a + 0x14, 0);
        let cmd = sim.cfg_read(dsp, 0x04) & 0xffff;
        sim.cfg_write(dsp, 0x04, cmd & !(1 << 2));
        let base = sim.alloc_dma(1 << 20);
        let stream = DmaStream::new(
            DmaOpKind::ReadWrite,
            4096,
            4,
            16,
            base,
            1 << 20,
            AddrPattern::Sequential,
        );
        sim.attach("ep", Box::new(stream)).unwrap();
        sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
        let msgs: Vec<String> = sim
            .error_messages()
            .iter()
            .map(|(_, m)| format!("{:?} {}", m.severity, m.source))
            .collect();
        (sim.burst_size(), sim.read_burst_size(), msgs)
    };
    let (_, _, exact) = run(1);
    let (b, rd, burst) = run(16);
    assert!(b > 1 && rd > 1, "no bursts: {b} {rd}");
    // Eight DMA writes of 16 TLPs and eight reads of 8 requests, all refused.
    assert!(exact.len() >= 8 * 16 + 8 * 8, "{}", exact.len());
    assert_eq!(burst, exact);
}

/// Every link of the throughput tests: one link or through a switch, Gen1–Gen6,
/// x1/x4/x8/x16, MPS 128/256/512 (144), as (label, through a switch, MPS, topology).
fn links() -> impl Iterator<Item = (String, bool, u16, Topology)> {
    [false, true].into_iter().flat_map(|sw| {
        (1u8..=6).flat_map(move |gen| {
            [1u8, 4, 8, 16].into_iter().flat_map(move |width| {
                [128u16, 256, 512].map(|mps| {
                    let t = if sw {
                        with_switch(gen, width)
                    } else {
                        one_link(gen, width)
                    };
                    (
                        format!("switch {sw} Gen{gen} x{width} MPS {mps}"),
                        sw,
                        mps,
                        t,
                    )
                })
            })
        })
    })
}

#[test]
fn bursts_keep_the_saturated_write_throughput() {
    // Every link, four (switch, root complex) latency pairs: 576 pairs of runs.
    let mut formed = 0;
    for (link, sw, mps, t) in links() {
        for (swl, rcl) in [(150, 100), (50, 50), (50, 150), (300, 20)] {
            let cfg = SimConfig {
                mps,
                switch_latency: SimDuration::from_ns(swl),
                rc_latency: SimDuration::from_ns(rcl),
                ..SimConfig::default()
            };
            let (exact, _) = run_writes(&t, &cfg, 1, 4096, 128);
            let (burst, _) = run_writes(&t, &cfg, 16, 4096, 128);
            formed += (burst.burst_size() > 1) as u32;
            same_throughput(&exact, &burst, sw, &format!("{link} {swl}/{rcl} ns"));
        }
    }
    // Bursts form in most (517; links whose buffers bound the exact model's
    // throughput too, at Gen5/Gen6 x8-x16, keep single TLPs).
    assert!(formed >= 500, "bursts formed in {formed} of 576");
}

/// The same TLPs on every direction as the exact model, no more waiting for credits
/// or replay-buffer room (give or take 100 ns and 0.1 % of the run), and an end at
/// most the store and forward of a last burst's extra pieces per hop (plus 1 µs)
/// later.
fn same_throughput(exact: &FabricSim, burst: &FabricSim, switch: bool, what: &str) {
    let slack = 100_000 + exact.now().as_ps() / 1000;
    for ((name, x), (_, y)) in exact.counters().iter().zip(burst.counters().iter()) {
        assert_eq!(
            (x.tlps, x.payload_bytes, x.replays),
            (y.tlps, y.payload_bytes, y.replays),
            "{what}: {name}"
        );
        let (sx, sy) = (
            x.credit_stall_ps + x.replay_stall_ps,
            y.credit_stall_ps + y.replay_stall_ps,
        );
        assert!(
            sy <= sx + slack,
            "{what}: {name}: stalled {sy} ps in bursts, {sx} ps exact"
        );
    }
    let (te, tb) = (exact.now().as_ps(), burst.now().as_ps());
    let c = exact.counters();
    // The longest TLP time of any direction (the bursts' pieces are MPS-sized).
    let one_tlp = c
        .iter()
        .map(|(_, x)| x.busy_ps / x.tlps.max(1))
        .max()
        .unwrap_or(0);
    let hops = 1 + switch as u64;
    let extra = burst.burst_size().max(burst.completion_burst_size()) as u64 - 1;
    let bound = hops * extra * one_tlp + 1_000_000;
    // It may also end earlier, by at most the wire time of the DLLPs it did not send
    // (ACKs and UpdateFCs go per burst: with reads and writes mixed they share the
    // wire with data) and 1 µs (the last ACK and UpdateFC timers differ).
    let saved = c
        .iter()
        .zip(burst.counters().iter())
        .map(|((_, x), (_, y))| {
            let dllp_bytes = x.wire_bytes.saturating_sub(y.wire_bytes);
            (dllp_bytes as u128 * x.busy_ps as u128 / x.wire_bytes.max(1) as u128) as u64
        })
        .max()
        .unwrap_or(0);
    assert!(
        tb + saved + 1_000_000 >= te && tb <= te + bound,
        "{what}: exact {te} ps, burst {tb} ps, bound {bound}, DLLP time saved {saved} ps"
    );
}

#[test]
fn bursts_keep_the_saturated_read_throughput() {
    // Reads and read/write mixes with MRRS 512 and 4096 (completion bursts of up to
    // 16 TLPs going down while read requests, and write bursts, go up: the ACKs and
    // UpdateFCs of each go between the other's pieces) on every link: 576 pairs of
    // runs, no more stall and no replay the exact model does not have.
    let mut formed = 0;
    for (link, sw, mps, t) in links() {
        for (op, mrrs) in [
            (DmaOpKind::Read, 512u16),
            (DmaOpKind::ReadWrite, 512),
            (DmaOpKind::Read, 4096),
            (DmaOpKind::ReadWrite, 4096),
        ] {
            let cfg = SimConfig {
                mps,
                mrrs,
                ..SimConfig::default()
            };
            let (exact, _) = run_dma(&t, &cfg, 1, op, 4096, 128);
            let (burst, _) = run_dma(&t, &cfg, 16, op, 4096, 128);
            formed += (burst.completion_burst_size() > 1) as u32;
            same_throughput(&exact, &burst, sw, &format!("{link} {op:?} MRRS {mrrs}"));
        }
    }
    assert!(formed >= 300, "completion bursts formed in {formed} of 576");
}

#[test]
fn a_gen3_x8_stream_into_the_root_complex_goes_page_by_page() {
    // The burst-size rule (see the `burst` module) at the bench's saturated link:
    // credits come back well within one 4 KiB burst's wire time (about 580 ns), so
    // two bursts in the 8 KiB default buffer suffice.
    let (burst, _) = run_writes(&one_link(3, 8), &SimConfig::default(), 16, 4096, 64);
    assert_eq!(burst.burst_size(), 16);
    let (exact, _) = run_writes(&one_link(3, 8), &SimConfig::default(), 1, 4096, 64);
    same_throughput(&exact, &burst, false, "Gen3 x8");
    // Through a switch at Gen4 x16 (the other bench path), smaller.
    let (burst, _) = run_writes(&with_switch(4, 16), &SimConfig::default(), 16, 4096, 64);
    assert!(
        (2..16).contains(&burst.burst_size()),
        "{}",
        burst.burst_size()
    );
}

#[test]
fn burst_mode_is_off_where_it_would_change_the_model() {
    // With LCRC errors injected, burst 16 runs the exact model: the same trace.
    let cfg = SimConfig {
        seed: Some(5),
        error_rate: 0.02,
        trace: true,
        ..SimConfig::default()
    };
    let t = with_switch(2, 4);
    let (a, _) = run_writes(&t, &cfg, 1, 4096, 16);
    let (b, _) = run_writes(&t, &cfg, 16, 4096, 16);
    assert_eq!(a.trace().unwrap().hash(), b.trace().unwrap().hash());
    assert_eq!(a.events(), b.events());
}

#[test]
fn burst_mode_is_deterministic_and_validated() {
    let cfg = SimConfig {
        trace: true,
        ..SimConfig::default()
    };
    let t = with_switch(4, 8);
    let (a, _) = run_writes(&t, &cfg, 8, 4096, 32);
    let (b, _) = run_writes(&t, &cfg, 8, 4096, 32);
    assert_eq!(a.trace().unwrap().hash(), b.trace().unwrap().hash());
    for bad in [0u8, 65] {
        let cfg = SimConfig {
            burst: bad,
            ..SimConfig::default()
        };
        match FabricSim::new(&t, &KindRegistry::builtin(), cfg) {
            Err(SimError::Param { what, .. }) => assert_eq!(what, "burst"),
            other => panic!("burst {bad}: {:?}", other.err()),
        }
    }
}

/// Writes and reads of the last 16 KiB below 2^64 in burst mode: the bursts that end
/// at the top of the address space (whose end, address + length, does not fit in 64
/// bits) go out as they would anywhere else or one TLP at a time, and every DMA ends
/// without a fault.
#[test]
fn bursts_at_the_top_of_the_address_space() {
    for op in [DmaOpKind::Write, DmaOpKind::Read] {
        let cfg = SimConfig {
            burst: 16,
            ..SimConfig::default()
        };
        let mut sim = FabricSim::new(&one_link(3, 8), &KindRegistry::builtin(), cfg).unwrap();
        let region = 4 * 4096;
        let base = 0u64.wrapping_sub(region);
        let stream = DmaStream::new(op, 4096, 16, 8, base, region, AddrPattern::Sequential);
        sim.attach("ep", Box::new(stream)).unwrap();
        sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
        assert!(sim.errors().is_empty(), "{op:?}: {:?}", sim.errors());
        let r = sim.model("ep").unwrap().report().unwrap();
        assert_eq!(
            (r["dmas"].as_u64(), r["failed"].as_u64()),
            (Some(8), Some(0)),
            "{op:?}: {r}"
        );
    }
}
