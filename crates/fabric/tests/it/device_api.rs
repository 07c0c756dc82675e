//! The device-model API in the timed simulator: completions consumed as they arrive
//! (out of order across tags), the engine's reorder window and its stall, the
//! device's own tags, backpressure (a device that defers writes under a full buffer),
//! and device timing (core clock × datapath width, per-operation cycles).

use pcielab_device::DmaPolicy;
use pcielab_fabric::host::model::apply_knob;
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{
    DeviceTiming, DmaId, Endpoint, EpCx, FabricSim, HostRead, Incoming, SimConfig,
};
use pcielab_fabric::topology::Topology;
use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::tlp::{MemOp, TlpHeader, TlpRepr};
use std::cell::RefCell;
use std::rc::Rc;

fn one_link() -> Topology {
    let s = "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n[[node]]\nname=\"ep\"\nkind=\"psmem\"\n\
             [[link]]\nup=\"rc.0\"\ndown=\"ep\"\ngen=3\nwidth=8\n";
    Topology::parse(s, "dev.toml", &KindRegistry::builtin()).unwrap()
}

/// A host whose memory reads take a random extra time (an exponential tail with a
/// 300 ns mean on every read), so completions of different requests overtake each
/// other.
fn jittery() -> SimConfig {
    let mut c = SimConfig {
        mrrs: 256,
        ..SimConfig::default()
    };
    apply_knob(&mut c, "mem_tail", "exp:1:300").unwrap();
    c
}

fn pattern(i: u64) -> u8 {
    (i.wrapping_mul(13) ^ (i >> 7)) as u8
}

#[derive(Debug, Default)]
struct Seen {
    /// (offset, length) of each call to `completion`, in call order.
    pieces: Vec<(u64, usize)>,
    /// The bytes, placed at their offsets.
    data: Vec<u8>,
    done: Vec<(DmaId, bool, Vec<u8>)>,
}

impl Seen {
    /// A call to `completion`: its piece, and its bytes at their offset.
    fn piece(&mut self, offset: u64, data: &[u8]) {
        self.pieces.push((offset, data.len()));
        self.data[offset as usize..offset as usize + data.len()].copy_from_slice(data);
    }
}

/// Reads `len` bytes at `addr` in one DMA with `policy`, recording every call.
#[derive(Debug)]
struct Reader {
    addr: u64,
    len: u64,
    policy: DmaPolicy,
    seen: Rc<RefCell<Seen>>,
}

impl Endpoint for Reader {
    fn dma_policy(&self) -> DmaPolicy {
        self.policy
    }
    fn start(&mut self, cx: &mut EpCx<'_>) {
        self.seen.borrow_mut().data = vec![0; self.len as usize];
        cx.dma_read(self.addr, self.len);
    }
    fn completion(&mut self, _id: DmaId, offset: u64, data: &[u8], _cx: &mut EpCx<'_>) {
        self.seen.borrow_mut().piece(offset, data);
    }
    fn dma_done(&mut self, id: DmaId, ok: bool, data: &[u8], _cx: &mut EpCx<'_>) {
        self.seen.borrow_mut().done.push((id, ok, data.to_vec()));
    }
}

fn read_with(policy: DmaPolicy, len: u64, trace: bool) -> (Rc<RefCell<Seen>>, FabricSim) {
    let cfg = SimConfig { trace, ..jittery() };
    let mut sim = FabricSim::new(&one_link(), &KindRegistry::builtin(), cfg).unwrap();
    let addr = sim.alloc_dma(len);
    let bytes: Vec<u8> = (0..len).map(pattern).collect();
    sim.host_write(addr, &bytes);
    let seen = Rc::new(RefCell::new(Seen::default()));
    let r = Reader {
        addr,
        len,
        policy,
        seen: seen.clone(),
    };
    sim.attach("ep", Box::new(r)).unwrap();
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
    (seen, sim)
}

#[test]
fn completions_arrive_out_of_order_and_are_consumed_as_they_come() {
    let len = 16 * 1024;
    let policy = DmaPolicy {
        per_completion: true,
        ..DmaPolicy::DEFAULT
    };
    let (seen, _) = read_with(policy, len, false);
    let s = seen.borrow();
    // Every byte once, each call a whole completion (RCB-sized or smaller pieces of a
    // 256 B request), and the calls not in address order.
    let total: usize = s.pieces.iter().map(|p| p.1).sum();
    assert_eq!(total as u64, len);
    let mut sorted = s.pieces.clone();
    sorted.sort();
    let mut at = 0;
    for (o, n) in &sorted {
        assert_eq!(*o, at, "gap or overlap in {sorted:?}");
        at += *n as u64;
    }
    let out_of_order = s.pieces.windows(2).filter(|w| w[1].0 < w[0].0).count();
    assert!(
        out_of_order > 0,
        "no completion overtook another: {:?}",
        s.pieces
    );
    assert!(s
        .data
        .iter()
        .enumerate()
        .all(|(i, &b)| b == pattern(i as u64)));
    assert_eq!(s.done.len(), 1);
    assert!(s.done[0].1);
    assert_eq!(s.done[0].2, s.data);
}

#[test]
fn without_the_policy_no_completion_calls() {
    let (seen, _) = read_with(DmaPolicy::DEFAULT, 4096, false);
    let s = seen.borrow();
    assert!(s.pieces.is_empty());
    assert_eq!(s.done.len(), 1);
    assert!(s.done[0]
        .2
        .iter()
        .enumerate()
        .all(|(i, &b)| b == pattern(i as u64)));
}

#[test]
fn the_reorder_window_releases_in_order_and_stalls_when_full() {
    let len = 16 * 1024;
    // A 1 KiB window: four 256 B requests at most ahead of the in-order point.
    let policy = DmaPolicy {
        reorder: Some(1024),
        ..DmaPolicy::DEFAULT
    };
    let (seen, sim) = read_with(policy, len, false);
    let s = seen.borrow();
    let mut at = 0;
    for (o, n) in &s.pieces {
        assert_eq!(*o, at, "released out of order: {:?}", s.pieces);
        at += *n as u64;
    }
    assert_eq!(at, len);
    assert!(s
        .data
        .iter()
        .enumerate()
        .all(|(i, &b)| b == pattern(i as u64)));
    // Some completion arrived early and waited (fewer calls than completions), and
    // the window was full at times: never more than 1 KiB requested past the in-order
    // point, so never more than four 256 B requests in flight.
    let st = sim.device_stats("ep").unwrap();
    assert!(
        (s.pieces.len() as u64) < st.completions,
        "{} calls, {st:?}",
        s.pieces.len()
    );
    assert!(st.window_stalls > 0, "the window never filled: {st:?}");
    assert!(st.max_reads_in_flight <= 4, "{st:?}");
}

/// The tags of every memory read request on the trace.
fn read_tags(sim: &FabricSim) -> Vec<u16> {
    let tr = sim.trace().unwrap();
    tr.records
        .iter()
        .filter(|r| matches!(r.kind, pcielab_fabric::timed::TraceKind::Tlp { .. }))
        .filter_map(|r| TlpRepr::parse_bytes(tr.bytes(r)).ok())
        .filter(|t| matches!(t.header, TlpHeader::Mem(m) if m.op == MemOp::Read))
        .map(|t| t.tag().value())
        .collect()
}

#[test]
fn the_device_chooses_its_tags() {
    let policy = DmaPolicy {
        tags: Some((100, 4)),
        ..DmaPolicy::DEFAULT
    };
    let (seen, sim) = read_with(policy, 8192, true);
    assert!(seen.borrow().done[0].1);
    let tags = read_tags(&sim);
    assert_eq!(tags.len(), 32, "8 KiB in 256 B requests");
    assert!(tags.iter().all(|t| (100..104).contains(t)), "{tags:?}");
    // The default pool starts at 0.
    let (_, sim) = read_with(DmaPolicy::DEFAULT, 8192, true);
    assert!(read_tags(&sim).contains(&0));
    // A policy outside the host's tag space is refused when attaching.
    let mut sim = FabricSim::new(&one_link(), &KindRegistry::builtin(), jittery()).unwrap();
    let seen = Rc::new(RefCell::new(Seen::default()));
    let bad = Reader {
        addr: 0,
        len: 4,
        policy: DmaPolicy {
            tags: Some((760, 16)),
            ..DmaPolicy::DEFAULT
        },
        seen,
    };
    let e = sim.attach("ep", Box::new(bad)).unwrap_err().to_string();
    assert!(e.contains("760") && e.contains("ep"), "{e}");
}

#[derive(Debug, Default)]
struct Buffer {
    /// Writes taken, in order: (offset, first byte).
    taken: Vec<(u64, u8)>,
    /// Entries in the buffer now.
    fill: usize,
    refused: u64,
    /// The device was full when a write came.
    full_seen: bool,
}

/// A device with a receive buffer of `slots` writes that it drains one entry per
/// `service` (a timer); when full it refuses writes, and says it is ready once it has
/// room again.
#[derive(Debug)]
struct Slow {
    slots: usize,
    service: SimDuration,
    st: Rc<RefCell<Buffer>>,
}

impl Endpoint for Slow {
    fn accept(&mut self, what: Incoming, _cx: &mut EpCx<'_>) -> bool {
        let mut st = self.st.borrow_mut();
        assert!(
            matches!(what, Incoming::Write { bar: 0, len: 4, .. }),
            "{what:?}"
        );
        if st.fill >= self.slots {
            st.refused += 1;
            st.full_seen = true;
            return false;
        }
        true
    }
    fn mem_write(&mut self, _bar: u8, offset: u64, data: &[u8], cx: &mut EpCx<'_>) {
        let mut st = self.st.borrow_mut();
        assert!(st.fill < self.slots, "given a write while full");
        st.taken.push((offset, data[0]));
        st.fill += 1;
        if st.fill == 1 {
            cx.timer(self.service, 0);
        }
    }
    fn timer(&mut self, _token: u64, cx: &mut EpCx<'_>) {
        let mut st = self.st.borrow_mut();
        let was_full = st.fill == self.slots;
        st.fill -= 1;
        if st.fill > 0 {
            cx.timer(self.service, 0);
        }
        if was_full {
            cx.ready();
        }
    }
}

fn posted_writes(slots: usize, n: u64) -> (Rc<RefCell<Buffer>>, FabricSim, u64) {
    let cfg = SimConfig {
        trace: true,
        ..SimConfig::default()
    };
    let mut sim = FabricSim::new(&one_link(), &KindRegistry::builtin(), cfg).unwrap();
    let st = Rc::new(RefCell::new(Buffer::default()));
    let dev = Slow {
        slots,
        service: SimDuration::from_ns(500),
        st: st.clone(),
    };
    sim.attach("ep", Box::new(dev)).unwrap();
    sim.run_for(SimDuration::from_us(5)); // links trained
    let bar = sim.bar("ep", 0).unwrap();
    for i in 0..n {
        sim.mmio_write(bar + 4 * i, &[i as u8, 0, 0, 0]).unwrap();
    }
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    // When the last MWr went on the wire.
    let tr = sim.trace().unwrap();
    let last = tr
        .records
        .iter()
        .filter(|r| matches!(r.kind, pcielab_fabric::timed::TraceKind::Tlp { .. }))
        .filter(|r| {
            TlpRepr::parse_bytes(tr.bytes(r))
                .is_ok_and(|t| matches!(t.header, TlpHeader::Mem(m) if m.op == MemOp::Write))
        })
        .map(|r| r.time_ps)
        .max()
        .unwrap();
    (st, sim, last)
}

#[test]
fn a_full_device_defers_writes_and_nothing_is_lost_or_reordered() {
    let n = 64;
    let (st, sim, _) = posted_writes(4, n);
    let st = st.borrow();
    assert!(st.full_seen && st.refused > 0);
    assert_eq!(st.taken.len() as u64, n, "every write taken once");
    for (i, &(off, b)) in st.taken.iter().enumerate() {
        assert_eq!((off, b), (4 * i as u64, i as u8), "in order");
    }
    let ds = sim.device_stats("ep").unwrap();
    assert_eq!(ds.held, 0);
    assert_eq!(ds.refusals, st.refused);
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
    // Draining 64 writes at one per 500 ns takes at least 63 × 500 ns after the first.
    assert!(sim.now().as_ps() >= 63 * 500_000, "{:?}", sim.now());
}

#[test]
fn held_writes_keep_their_credits_so_the_sender_stalls() {
    // Enough writes to use up the device port's posted credits while the device holds
    // them: the host's writes then wait for credits, which return only as the
    // device takes writes. With a device that never fills up, they do not wait.
    let n = 200;
    let (_, sim_fast, posted_fast) = posted_writes(usize::MAX, n);
    let (st, sim_slow, posted_slow) = posted_writes(2, n);
    assert_eq!(st.borrow().taken.len() as u64, n);
    assert!(sim_fast.errors().is_empty() && sim_slow.errors().is_empty());
    // The root port sent its last write much later to the full device: it waited for
    // credits, which returned at the device's pace (one write per 500 ns), so the last
    // write left about (n - credits) × 500 ns after the first.
    assert!(
        posted_slow > posted_fast + 100 * 500_000,
        "last MWr sent at {posted_fast} ps (fast) and {posted_slow} ps (slow)"
    );
}

/// Answers every BAR read at once and writes 4 KiB when written to, with a 250 MHz
/// × 256-bit datapath and some cycles per operation.
#[derive(Debug)]
struct Timed {
    timing: DeviceTiming,
}

impl Endpoint for Timed {
    fn timing(&self) -> DeviceTiming {
        self.timing
    }
    fn mem_read(
        &mut self,
        _bar: u8,
        _off: u64,
        buf: &mut [u8],
        _cx: &mut EpCx<'_>,
    ) -> pcielab_fabric::timed::ReadReply {
        buf.fill(7);
        pcielab_fabric::timed::ReadReply::Now
    }
}

fn read_latency(timing: DeviceTiming, len: u32) -> u64 {
    let mut sim =
        FabricSim::new(&one_link(), &KindRegistry::builtin(), SimConfig::default()).unwrap();
    sim.attach("ep", Box::new(Timed { timing })).unwrap();
    sim.run_for(SimDuration::from_us(5));
    let bar = sim.bar("ep", 0).unwrap();
    match sim.mmio_read(bar, len).unwrap() {
        HostRead::Done { issued, done, data } => {
            assert_eq!(data, vec![7; len as usize]);
            (done - issued).as_ps()
        }
        r => panic!("{r:?}"),
    }
}

#[test]
fn device_timing_is_charged() {
    let t = DeviceTiming {
        clock_mhz: 250,
        datapath_bits: 256,
        read_cycles: 10,
        write_cycles: 2,
        completion_cycles: 3,
        request_cycles: 4,
    };
    // A BAR read of 64 B: 10 cycles + 2 data cycles at 4 ns = 48 ns more than with no
    // device timing; of 4 B: 10 + 1 cycles.
    let base = read_latency(DeviceTiming::NONE, 64);
    assert_eq!(read_latency(t, 64) - base, 12 * 4_000);
    let base4 = read_latency(DeviceTiming::NONE, 4);
    assert_eq!(read_latency(t, 4) - base4, 11 * 4_000);
    // A bad declaration is refused when attaching.
    let mut sim =
        FabricSim::new(&one_link(), &KindRegistry::builtin(), SimConfig::default()).unwrap();
    let bad = DeviceTiming {
        datapath_bits: 12,
        ..t
    };
    let e = sim
        .attach("ep", Box::new(Timed { timing: bad }))
        .unwrap_err();
    assert!(e.to_string().contains("12 bits"), "{e}");
}

#[derive(Debug, Default)]
struct Raises {
    /// BAR writes the model saw.
    writes: Rc<RefCell<Vec<(u8, u64)>>>,
}

impl Endpoint for Raises {
    fn mem_write(&mut self, bar: u8, offset: u64, _data: &[u8], _cx: &mut EpCx<'_>) {
        self.writes.borrow_mut().push((bar, offset));
    }
    fn timer(&mut self, vector: u64, cx: &mut EpCx<'_>) {
        cx.msix(vector as u16);
    }
    fn mem_read(
        &mut self,
        _bar: u8,
        _off: u64,
        _buf: &mut [u8],
        cx: &mut EpCx<'_>,
    ) -> pcielab_fabric::timed::ReadReply {
        // A read of BAR0 + 8 * v raises vector v 100 ns later.
        cx.timer(SimDuration::from_ns(100), _off / 8);
        pcielab_fabric::timed::ReadReply::Now
    }
}

/// MSI-X is programmed only by the host's writes to the function's MSI-X BAR, after
/// the model is attached; the model never sees them; masked vectors go pending and
/// are sent when unmasked, through the table or the Function Mask.
#[test]
fn msix_is_programmed_through_bar_writes_only() {
    let mut sim =
        FabricSim::new(&one_link(), &KindRegistry::builtin(), SimConfig::default()).unwrap();
    let writes = Rc::new(RefCell::new(Vec::new()));
    sim.attach(
        "ep",
        Box::new(Raises {
            writes: writes.clone(),
        }),
    )
    .unwrap();
    sim.run_for(SimDuration::from_us(5));
    let bar0 = sim.bar("ep", 0).unwrap();
    let tbl = sim.bar("ep", 2).unwrap(); // psmem: MSI-X table at 0, PBA after 4 entries
    let pba = tbl + 4 * 16;
    let bdf = sim.bdf("ep").unwrap();
    let raise = |sim: &mut FabricSim, v: u64| {
        sim.mmio_read(bar0 + 8 * v, 4).unwrap();
        sim.run_for(SimDuration::from_us(2));
    };
    let pending = |sim: &mut FabricSim| match sim.mmio_read(pba, 8).unwrap() {
        HostRead::Done { data, .. } => u64::from_le_bytes(data.try_into().unwrap()),
        r => panic!("{r:?}"),
    };
    // Program vector 2 by hand through the BAR: address, data, masked.
    let entry = tbl + 2 * 16;
    sim.mmio_write(entry, &0xfee0_1000u32.to_le_bytes())
        .unwrap();
    sim.mmio_write(entry + 4, &0u32.to_le_bytes()).unwrap();
    sim.mmio_write(entry + 8, &0xabcdu32.to_le_bytes()).unwrap();
    sim.mmio_write(entry + 12, &1u32.to_le_bytes()).unwrap();
    sim.run_for(SimDuration::from_us(1));
    // The table reads back through the BAR.
    match sim.mmio_read(entry + 8, 4).unwrap() {
        HostRead::Done { data, .. } => assert_eq!(data, 0xabcdu32.to_le_bytes()),
        r => panic!("{r:?}"),
    }
    let n0 = sim.interrupts().len();
    // Masked: raising sets the pending bit, sends nothing.
    raise(&mut sim, 2);
    assert_eq!(sim.interrupts().len(), n0);
    assert_eq!(pending(&mut sim), 1 << 2);
    // Unmasking sends it at once, with the programmed data; the bit clears.
    sim.mmio_write(entry + 12, &0u32.to_le_bytes()).unwrap();
    sim.run_for(SimDuration::from_us(2));
    let got = &sim.interrupts()[n0..];
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (got[0].1.from, got[0].1.address, got[0].1.data),
        (bdf, 0xfee0_1000, 0xabcd)
    );
    assert_eq!(pending(&mut sim), 0);
    // Unmasked: raising sends.
    raise(&mut sim, 2);
    assert_eq!(sim.interrupts().len(), n0 + 2);
    // The Function Mask (MSI-X Message Control bit 14) holds every vector pending;
    // clearing it sends them.
    let cap = msix_cap(&mut sim, bdf);
    let ctl = sim.cfg_read(bdf, cap);
    sim.cfg_write(bdf, cap, ctl | 0x4000 << 16);
    raise(&mut sim, 2);
    assert_eq!(sim.interrupts().len(), n0 + 2);
    assert_eq!(pending(&mut sim), 1 << 2);
    sim.cfg_write(bdf, cap, ctl & !(0x4000 << 16));
    sim.run_for(SimDuration::from_us(2));
    assert_eq!(sim.interrupts().len(), n0 + 3);
    assert_eq!(pending(&mut sim), 0);
    // The model saw none of the table's writes.
    assert!(writes.borrow().is_empty(), "{:?}", writes.borrow());
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
}

/// The offset of `bdf`'s MSI-X capability, found with configuration reads.
fn msix_cap(sim: &mut FabricSim, bdf: pcielab_wire::Bdf) -> u16 {
    let mut at = (sim.cfg_read(bdf, 0x34) & 0xfc) as u16;
    while at != 0 {
        let h = sim.cfg_read(bdf, at);
        if h & 0xff == 0x11 {
            return at;
        }
        at = ((h >> 8) & 0xfc) as u16;
    }
    panic!("no MSI-X capability");
}

/// Starts a read and a write DMA that run past the top of the 64-bit address space.
#[derive(Debug)]
struct PastTheTop {
    seen: Rc<RefCell<Seen>>,
}

impl Endpoint for PastTheTop {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        cx.dma_read(u64::MAX - 15, 64);
        cx.dma_write(u64::MAX - 7, vec![0xa5; 16]);
        // Ending exactly at the top is fine.
        cx.dma_read(u64::MAX - 15, 16);
    }
    fn dma_done(&mut self, id: DmaId, ok: bool, data: &[u8], _cx: &mut EpCx<'_>) {
        self.seen.borrow_mut().done.push((id, ok, data.to_vec()));
    }
}

/// A DMA that would run past 2^64 fails: the device hears so (it is not left waiting),
/// the fault log names the device, the address and the length, and nothing wraps to
/// low memory.
#[test]
fn a_dma_past_the_top_of_the_address_space_fails_and_the_device_hears_it() {
    let mut sim =
        FabricSim::new(&one_link(), &KindRegistry::builtin(), SimConfig::default()).unwrap();
    let seen = Rc::new(RefCell::new(Seen::default()));
    let mut low = vec![0u8; 64];
    sim.host_read(0, &mut low);
    sim.attach("ep", Box::new(PastTheTop { seen: seen.clone() }))
        .unwrap();
    let limit = sim.now() + SimDuration::from_ms(1);
    sim.run_until_idle(limit);
    assert!(sim.now() < limit, "the simulation did not come to rest");
    let s = seen.borrow();
    let oks: Vec<bool> = s.done.iter().map(|d| d.1).collect();
    assert_eq!(oks.len(), 3, "every DMA ends: {oks:?}");
    assert_eq!(oks.iter().filter(|ok| !**ok).count(), 2, "{oks:?}");
    let past: Vec<_> = sim
        .errors()
        .iter()
        .filter(|f| f.message.contains("runs past 2^64"))
        .collect();
    assert_eq!(past.len(), 2, "{:?}", sim.errors());
    assert!(past[0].message.starts_with("ep: "), "{}", past[0].message);
    assert!(past
        .iter()
        .any(|f| f.message.contains("64 bytes at 0xfffffffffffffff0")));
    let mut after = vec![0u8; 64];
    sim.host_read(0, &mut after);
    assert_eq!(after, low);
}

/// Segments of the scatter-gather tests: a small one, one that crosses a 4 KiB
/// boundary (two requests), an empty one and one larger than MRRS.
fn segments(base: u64) -> Vec<(u64, u64)> {
    vec![
        (base, 64),
        (base + 2048, 64),
        (base + 4096 - 40, 100),
        (base + 6000, 0),
        (base + 8192, 700),
    ]
}

/// Gives its DMAs either as one scatter-gather DMA or as a DMA per segment, all in
/// one call (reads, or writes of `pattern` bytes).
#[derive(Debug)]
struct Gather {
    segs: Vec<(u64, u64)>,
    sg: bool,
    write: bool,
    policy: DmaPolicy,
    seen: Rc<RefCell<Seen>>,
}

impl Endpoint for Gather {
    fn dma_policy(&self) -> DmaPolicy {
        self.policy
    }
    fn start(&mut self, cx: &mut EpCx<'_>) {
        let total: u64 = self.segs.iter().map(|s| s.1).sum();
        self.seen.borrow_mut().data = vec![0; total as usize];
        let data: Vec<u8> = (0..total).map(|i| pattern(i + 5)).collect();
        match (self.sg, self.write) {
            (true, false) => {
                cx.dma_read_sg(&self.segs);
            }
            (true, true) => {
                cx.dma_write_sg(&self.segs, data);
            }
            (false, write) => {
                let mut at = 0usize;
                for &(addr, len) in &self.segs {
                    if write {
                        cx.dma_write(addr, data[at..at + len as usize].to_vec());
                    } else {
                        cx.dma_read(addr, len);
                    }
                    at += len as usize;
                }
            }
        }
    }
    fn completion(&mut self, id: DmaId, offset: u64, data: &[u8], _cx: &mut EpCx<'_>) {
        assert_eq!(id, DmaId(0), "every completion is the one DMA's");
        self.seen.borrow_mut().piece(offset, data);
    }
    fn dma_done(&mut self, id: DmaId, ok: bool, data: &[u8], _cx: &mut EpCx<'_>) {
        self.seen.borrow_mut().done.push((id, ok, data.to_vec()));
    }
}

/// Runs a [`Gather`] on one link with the trace on; returns what it saw, the trace's
/// hash, the simulator and the base of the host buffer.
fn gather(sg: bool, write: bool) -> (Rc<RefCell<Seen>>, u64, FabricSim, u64) {
    let cfg = SimConfig {
        trace: true,
        ..SimConfig::default()
    };
    gather_with(sg, write, DmaPolicy::DEFAULT, cfg)
}

fn gather_with(
    sg: bool,
    write: bool,
    policy: DmaPolicy,
    cfg: SimConfig,
) -> (Rc<RefCell<Seen>>, u64, FabricSim, u64) {
    let mut sim = FabricSim::new(&one_link(), &KindRegistry::builtin(), cfg).unwrap();
    let base = sim.alloc_dma(16 * 1024);
    let bytes: Vec<u8> = (0..16 * 1024).map(pattern).collect();
    sim.host_write(base, &bytes);
    let seen = Rc::new(RefCell::new(Seen::default()));
    let g = Gather {
        segs: segments(base),
        sg,
        write,
        policy,
        seen: seen.clone(),
    };
    sim.attach("ep", Box::new(g)).unwrap();
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
    let hash = sim.trace().expect("trace on").hash();
    (seen, hash, sim, base)
}

/// A scatter-gather read puts the same TLPs on the wire at the same times as a read
/// per segment given in one call, and the device hears once, with every segment's
/// bytes back to back.
#[test]
fn a_scatter_gather_read_is_its_segments_reads_with_one_dma_done() {
    let (sg, sg_hash, _, _) = gather(true, false);
    let (each, each_hash, _, _) = gather(false, false);
    assert_eq!(sg_hash, each_hash, "the traces differ");
    let (sg, each) = (sg.borrow(), each.borrow());
    assert_eq!(each.done.len(), 5);
    assert_eq!(sg.done.len(), 1, "one dma_done");
    let (_, ok, data) = &sg.done[0];
    assert!(ok);
    assert_eq!(data, &gathered());
    let separate: Vec<u8> = each.done.iter().flat_map(|d| d.2.clone()).collect();
    assert_eq!(data, &separate);
}

/// The bytes of a scatter-gather read of [`segments`]: the pattern the host memory
/// was filled with, at each segment's offset from the buffer's base, in segment order.
fn gathered() -> Vec<u8> {
    segments(0)
        .into_iter()
        .flat_map(|(addr, len)| (addr..addr + len).map(pattern))
        .collect()
}

/// With completions as they come, a scatter-gather read's offsets count in the whole
/// list's data: every byte arrives once, at its place, under the one DMA's id;
/// `dma_done` still comes once. With a
/// reorder window, each segment's data comes in address order.
#[test]
fn a_scatter_gather_reads_completions_count_offsets_in_the_whole_list() {
    let total = gathered().len();
    for reorder in [None, Some(512)] {
        let policy = DmaPolicy {
            per_completion: true,
            reorder,
            ..DmaPolicy::DEFAULT
        };
        let cfg = SimConfig {
            trace: true,
            ..jittery()
        };
        let (seen, _, _, _) = gather_with(true, false, policy, cfg);
        let s = seen.borrow();
        assert_eq!(s.data, gathered(), "reorder {reorder:?}");
        let mut sorted = s.pieces.clone();
        sorted.sort();
        let mut at = 0u64;
        for (off, len) in &sorted {
            assert_eq!(
                *off, at,
                "a gap or an overlap at {at} (reorder {reorder:?})"
            );
            at += *len as u64;
        }
        assert_eq!(at, total as u64);
        assert_eq!(s.done.len(), 1, "one dma_done");
        assert!(s.done[0].1);
        if reorder.is_some() {
            // Within the 700-byte segment (the last 700 bytes), in order.
            let last: Vec<u64> = s
                .pieces
                .iter()
                .filter(|p| p.0 >= total as u64 - 700)
                .map(|p| p.0)
                .collect();
            assert!(last.windows(2).all(|w| w[0] < w[1]), "{last:?}");
        }
    }
}

/// A scatter-gather write: the same TLPs as a write per segment, the same host
/// memory afterwards, one dma_done.
#[test]
fn a_scatter_gather_write_is_its_segments_writes_with_one_dma_done() {
    let (sg, sg_hash, sg_sim, base) = gather(true, true);
    let (each, each_hash, each_sim, _) = gather(false, true);
    assert_eq!(sg_hash, each_hash, "the traces differ");
    assert_eq!(sg.borrow().done.len(), 1);
    assert!(sg.borrow().done[0].1);
    assert_eq!(each.borrow().done.len(), 5);
    let (mut a, mut b) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    sg_sim.host_read(base, &mut a);
    each_sim.host_read(base, &mut b);
    assert_eq!(a, b);
    // The first segment holds the first bytes of the data.
    let first: Vec<u8> = (0..64).map(|i| pattern(i + 5)).collect();
    assert_eq!(a[..64], first[..]);
}

/// Bad scatter-gather DMAs fail, named in the fault log, and the device hears so:
/// a write whose segments do not add up to its data, segments of more than 4 GiB,
/// a segment past 2^64 (which fails the whole DMA, after the others ran). An empty
/// one succeeds at once.
#[derive(Debug)]
struct BadGather {
    seen: Rc<RefCell<Seen>>,
}

impl Endpoint for BadGather {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        cx.dma_write_sg(&[(0x1000, 64)], vec![0; 60]);
        cx.dma_read_sg(&[(0x1000, u32::MAX as u64), (0x2000, 2)]);
        cx.dma_read_sg(&[(0x1000, 64), (u64::MAX - 15, 64)]);
        cx.dma_read_sg(&[]);
    }
    fn dma_done(&mut self, id: DmaId, ok: bool, data: &[u8], _cx: &mut EpCx<'_>) {
        self.seen.borrow_mut().done.push((id, ok, data.to_vec()));
    }
}

#[test]
fn bad_scatter_gather_dmas_fail_named_and_the_device_hears_it() {
    let mut sim =
        FabricSim::new(&one_link(), &KindRegistry::builtin(), SimConfig::default()).unwrap();
    let seen = Rc::new(RefCell::new(Seen::default()));
    sim.attach("ep", Box::new(BadGather { seen: seen.clone() }))
        .unwrap();
    let limit = sim.now() + SimDuration::from_ms(1);
    sim.run_until_idle(limit);
    assert!(sim.now() < limit, "the simulation did not come to rest");
    let mut done = seen.borrow().done.clone();
    done.sort_by_key(|d| d.0);
    let oks: Vec<(u64, bool, usize)> = done.iter().map(|d| (d.0 .0, d.1, d.2.len())).collect();
    assert_eq!(
        oks,
        [(0, false, 0), (1, false, 0), (2, false, 128), (3, true, 0)]
    );
    let msgs: Vec<&str> = sim.errors().iter().map(|f| f.message.as_str()).collect();
    assert!(
        msgs.iter()
            .any(|m| m.contains("segments add up to 64 bytes, its data has 60")),
        "{msgs:?}"
    );
    assert!(
        msgs.iter().any(|m| m.contains("more than 4 GiB")),
        "{msgs:?}"
    );
    assert!(
        msgs.iter().any(|m| m.contains("runs past 2^64")),
        "{msgs:?}"
    );
}
