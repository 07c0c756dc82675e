//! Built-in workloads: a pcie-bench/psmem-style DMA stream engine.

use super::endpoint::{DmaId, Endpoint, EpCx, ReadReply};
use pcielab_sim::SimTime;

/// Direction of the DMAs of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DmaOpKind {
    /// Device reads host memory (MRd out, CplD back).
    Read,
    /// Device writes host memory (MWr).
    Write,
    /// Alternating reads and writes.
    ReadWrite,
    /// FetchAdd AtomicOps adding 1 to a counter at each address (`size` 4: 32-bit
    /// counters, any other size: 64-bit ones, 8 bytes counted per DMA). The device
    /// needs AtomicOp Requester Enable (`FabricSim::enable_atomic_ops_to_root`).
    FetchAdd,
}

/// How a stream picks addresses inside its window of host memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrPattern {
    /// One transfer after the other, wrapping at the end of the region.
    Sequential,
    /// Uniformly random transfer-size-aligned slots (seeded).
    Random,
}

/// Results of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StreamReport {
    /// DMAs finished.
    pub dmas: u64,
    /// DMAs that failed (timeout or error completion).
    pub failed: u64,
    /// Bytes moved by the measured DMAs (the steady state, see [`DmaStream`]).
    pub bytes: u64,
    /// Measured interval in picoseconds.
    pub elapsed_ps: u64,
    /// Throughput of the measured DMAs, Gb/s.
    pub gbps: f64,
    /// Whether the stream had a steady state to measure (more DMAs than its window).
    /// When it did not, `gbps` is all its bytes over the whole run, which is no link
    /// rate: a write is done when the engine hands it to the link, so a single short
    /// write gives a rate far above the link's.
    pub steady: bool,
    /// Mean DMA latency (issue to done), ns.
    pub mean_latency_ns: f64,
    /// Shortest DMA latency, ns.
    pub min_latency_ns: f64,
    /// Longest DMA latency, ns.
    pub max_latency_ns: f64,
    /// Median DMA latency (nearest rank), ns.
    pub median_latency_ns: f64,
    /// 90th percentile of the DMA latency (nearest rank), ns.
    pub p90_latency_ns: f64,
    /// 99th percentile of the DMA latency (nearest rank), ns.
    pub p99_latency_ns: f64,
    /// 99.9th percentile of the DMA latency (nearest rank), ns.
    pub p999_latency_ns: f64,
    /// When the stream last resumed after its device was reset (host software set Bus
    /// Master Enable again), if it did.
    pub resumed_at: Option<SimTime>,
}

/// A device that keeps `window` DMAs of `size` bytes in flight until `count` are done.
///
/// Throughput is measured in the steady state: from the end of the first `window` DMAs
/// (the ramp-up) to the completion at which the last DMA is issued (after it the window
/// drains and the link is no longer saturated), or to the last completion when the
/// stream is too short to have a steady state (`count` ≤ 2 × `window` or so). A stream
/// of no more DMAs than its window has no steady state at all: its throughput is all
/// its bytes over the whole run, from the first issue to the last completion.
///
/// If the device is reset (its link went down), the DMAs in flight are lost and
/// counted as failed, and the stream pauses; it resumes with the DMAs it had left when
/// host software sets Bus Master Enable again (see `FabricSim::recover`), as a driver
/// restarts its queues in its error-recovery `resume` step. Clearing Bus Master
/// Enable pauses it too (the DMAs in flight finish).
#[derive(Debug, Clone)]
pub struct DmaStream {
    /// Read, write or both.
    pub op: DmaOpKind,
    /// Bytes per DMA.
    pub size: u64,
    /// DMAs in flight.
    pub window: u32,
    /// DMAs in total.
    pub count: u64,
    /// Host buffer base address.
    pub base: u64,
    /// Host buffer size (addresses stay inside `[base, base + region)`).
    pub region: u64,
    /// Address pattern.
    pub pattern: AddrPattern,
    /// Offset added to every address (unaligned transfers). Default 0.
    pub offset: u64,
    /// Transfers start at multiples of `size` rounded up to this alignment. Default
    /// 4096 (every transfer starts on a page, as the analytic model assumes).
    pub align: u64,
    /// The PASID every DMA carries ([`EpCx::dma_read_pasid`]), or None. Default None.
    pub pasid: Option<u32>,
    issued: u64,
    inflight: crate::inthash::IntMap<DmaId, (SimTime, u64)>,
    done: u64,
    failed: u64,
    warm_at: Option<SimTime>,
    measured_bytes: u64,
    /// (time, measured bytes) when the last DMA was issued, the end of the steady state.
    steady_end: Option<(SimTime, u64)>,
    last: SimTime,
    /// When the first DMA was issued.
    first_issue: Option<SimTime>,
    /// Bytes of every finished DMA.
    total_bytes: u64,
    lat_sum: u128,
    lat_min: u64,
    lat_max: u64,
    /// Every finished DMA's latency, ps, in completion order.
    lats: Vec<u64>,
    /// Not issuing: the device was reset or Bus Master Enable is clear.
    paused: bool,
    resumed_at: Option<SimTime>,
}

impl DmaStream {
    /// A stream; `region` is rounded up to at least one transfer.
    pub fn new(
        op: DmaOpKind,
        size: u64,
        window: u32,
        count: u64,
        base: u64,
        region: u64,
        pattern: AddrPattern,
    ) -> DmaStream {
        DmaStream {
            op,
            size: size.max(1),
            window: window.max(1),
            count,
            base,
            region: region.max(size.max(1).next_multiple_of(4096)),
            pattern,
            offset: 0,
            align: 4096,
            pasid: None,
            issued: 0,
            inflight: Default::default(),
            done: 0,
            failed: 0,
            warm_at: None,
            measured_bytes: 0,
            steady_end: None,
            last: SimTime::ZERO,
            first_issue: None,
            total_bytes: 0,
            lat_sum: 0,
            lat_min: u64::MAX,
            lat_max: 0,
            lats: Vec::new(),
            paused: false,
            resumed_at: None,
        }
    }

    /// True once every DMA has finished.
    pub fn finished(&self) -> bool {
        self.done >= self.count
    }

    /// The results so far.
    pub fn report(&self) -> StreamReport {
        let (start, end, bytes) = if self.count <= self.window as u64 {
            let start = self.first_issue.unwrap_or(SimTime::ZERO);
            (start, self.last.max(start), self.total_bytes)
        } else {
            let start = self.warm_at.unwrap_or(SimTime::ZERO);
            match self.steady_end {
                Some((t, b)) if b > 0 && t > start => (start, t, b),
                _ => (start, self.last.max(start), self.measured_bytes),
            }
        };
        let elapsed = (end - start).as_ps();
        let n = self.done.max(1) as f64;
        let mut sorted = self.lats.clone();
        sorted.sort_unstable();
        let pct = |q: f64| percentile_ns(&sorted, q);
        StreamReport {
            dmas: self.done,
            failed: self.failed,
            bytes,
            elapsed_ps: elapsed,
            gbps: if elapsed == 0 {
                0.0
            } else {
                bytes as f64 * 8.0 * 1000.0 / elapsed as f64
            },
            steady: self.count > self.window as u64,
            mean_latency_ns: self.lat_sum as f64 / n / 1000.0,
            min_latency_ns: if self.lat_min == u64::MAX {
                0.0
            } else {
                self.lat_min as f64 / 1000.0
            },
            max_latency_ns: self.lat_max as f64 / 1000.0,
            median_latency_ns: pct(0.5),
            p90_latency_ns: pct(0.9),
            p99_latency_ns: pct(0.99),
            p999_latency_ns: pct(0.999),
            resumed_at: self.resumed_at,
        }
    }

    /// Every finished DMA's latency (issue to done), ps, in completion order (failed
    /// ones included); for CDFs and histograms.
    pub fn latencies_ps(&self) -> &[u64] {
        &self.lats
    }

    fn issue(&mut self, cx: &mut EpCx<'_>) {
        while !self.paused && self.issued < self.count && (self.inflight.len() as u32) < self.window
        {
            let stride = self.size.next_multiple_of(self.align.max(1));
            let slots = (self.region / stride).max(1);
            let slot = match self.pattern {
                AddrPattern::Sequential => self.issued % slots,
                AddrPattern::Random => cx.rng().below(slots),
            };
            let addr = self.base + slot * stride + self.offset;
            let write = match self.op {
                DmaOpKind::Read | DmaOpKind::FetchAdd => false,
                DmaOpKind::Write => true,
                DmaOpKind::ReadWrite => self.issued % 2 == 1,
            };
            let id = if self.op == DmaOpKind::FetchAdd {
                if self.size == 4 {
                    cx.atomic(addr, pcielab_device::AtomicOp::FetchAdd32(1))
                } else {
                    cx.atomic(addr, pcielab_device::AtomicOp::FetchAdd64(1))
                }
            } else if write {
                let n = self.size as usize;
                let mut data = cx.buffer(n);
                fill_pattern(&mut data, n, (self.issued as u8).wrapping_mul(31));
                match self.pasid {
                    Some(p) => cx.dma_write_pasid(addr, data, p),
                    None => cx.dma_write(addr, data),
                }
            } else {
                match self.pasid {
                    Some(p) => cx.dma_read_pasid(addr, self.size, p),
                    None => cx.dma_read(addr, self.size),
                }
            };
            let bytes = match self.op {
                DmaOpKind::FetchAdd if self.size != 4 => 8,
                _ => self.size,
            };
            self.inflight.insert(id, (cx.now(), bytes));
            self.first_issue.get_or_insert(cx.now());
            self.issued += 1;
        }
    }
}

/// Appends `n` bytes to `data`, byte k being `k ^ m` (mod 256): a 256-byte period,
/// appended a whole period at a time.
fn fill_pattern(data: &mut Vec<u8>, n: usize, m: u8) {
    let mut period = [0u8; 256];
    for (k, b) in period.iter_mut().enumerate() {
        *b = k as u8 ^ m;
    }
    data.reserve(n);
    for _ in 0..n / 256 {
        data.extend_from_slice(&period);
    }
    data.extend_from_slice(&period[..n % 256]);
}

impl Endpoint for DmaStream {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        self.issue(cx);
    }
    fn mem_read(
        &mut self,
        _bar: u8,
        _offset: u64,
        buf: &mut [u8],
        _cx: &mut EpCx<'_>,
    ) -> ReadReply {
        buf.fill(0);
        ReadReply::Now
    }
    fn dma_done(&mut self, id: DmaId, ok: bool, _data: &[u8], cx: &mut EpCx<'_>) {
        let Some((t0, bytes)) = self.inflight.remove(&id) else {
            return;
        };
        let now = cx.now();
        self.done += 1;
        self.total_bytes += bytes;
        if !ok {
            self.failed += 1;
        }
        let lat = (now - t0).as_ps();
        self.lat_sum += lat as u128;
        self.lat_min = self.lat_min.min(lat);
        self.lat_max = self.lat_max.max(lat);
        self.lats.push(lat);
        if self.done == self.window as u64 || (self.count <= self.window as u64 && self.done == 1) {
            self.warm_at = Some(now);
        } else if self.warm_at.is_some() {
            self.measured_bytes += bytes;
        }
        self.last = now;
        self.issue(cx);
        if self.issued >= self.count && self.warm_at.is_some() && self.steady_end.is_none() {
            self.steady_end = Some((now, self.measured_bytes));
        }
    }
    /// The device was reset (its link went down): the DMAs in flight are lost
    /// (counted as failed) and the stream pauses until host software configures the
    /// device again.
    fn reset(&mut self, _cx: &mut EpCx<'_>) {
        let lost = self.inflight.len() as u64;
        self.inflight.clear();
        self.done += lost;
        self.failed += lost;
        self.paused = true;
    }
    fn bus_master(&mut self, enabled: bool, cx: &mut EpCx<'_>) {
        if !enabled {
            self.paused = true;
        } else if self.paused {
            self.paused = false;
            self.resumed_at = Some(cx.now());
            self.issue(cx);
        }
    }
    fn progress(&self) -> Option<u64> {
        Some(self.done)
    }
    fn report(&self) -> Option<serde_json::Value> {
        let r = DmaStream::report(self);
        Some(serde_json::json!({
            "dmas": r.dmas, "failed": r.failed, "bytes": r.bytes, "elapsed_ps": r.elapsed_ps,
            "gbps": r.gbps, "steady": r.steady, "mean_latency_ns": r.mean_latency_ns,
            "min_latency_ns": r.min_latency_ns, "max_latency_ns": r.max_latency_ns,
            "median_latency_ns": r.median_latency_ns, "p90_latency_ns": r.p90_latency_ns,
            "p99_latency_ns": r.p99_latency_ns, "p999_latency_ns": r.p999_latency_ns,
            "resumed_at_ns": r.resumed_at.map(|t| t.as_ps() as f64 / 1000.0),
        }))
    }
}

/// The `q` quantile (0..=1) of ascending `sorted` ps values by nearest rank, in ns
/// (0 when empty).
///
/// ```
/// use pcielab_fabric::timed::percentile_ns;
/// let v: Vec<u64> = (1..=1000).map(|i| i * 1000).collect();
/// assert_eq!(percentile_ns(&v, 0.5), 500.0);
/// assert_eq!(percentile_ns(&v, 0.999), 999.0);
/// assert_eq!(percentile_ns(&v, 1.0), 1000.0);
/// assert_eq!(percentile_ns(&[], 0.5), 0.0);
/// ```
pub fn percentile_ns(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1] as f64 / 1000.0
}
