//! tlpperf: DMA throughput and latency through an adapter.
//!
//! Each thread takes its own [`Channel`](crate::device::Channel) and repeats DMAs of
//! `size` bytes for `duration` (or `count` DMAs), at a fixed address, sequentially
//! through a region, or at random 4 KiB-aligned offsets. Reads are timed one by one for
//! the latency percentiles.
//!
//! ```
//! use pcielab_nettlp::perf::percentile;
//! let mut v = vec![5u64, 1, 4, 2, 3];
//! v.sort_unstable();
//! assert_eq!(percentile(&v, 50.0), 3);
//! assert_eq!(percentile(&v, 100.0), 5);
//! ```

use crate::device::{Device, DmaError};
use std::fmt;
use std::time::{Duration, Instant};

/// Direction of the DMAs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// DMA reads (MRd + CplD).
    Read,
    /// DMA writes (posted MWr).
    Write,
}

/// Address pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// Always the region start.
    Fix,
    /// Sequential through the region.
    Seq,
    /// Random 4 KiB-aligned offsets in the region.
    Random,
}

/// A tlpperf run.
#[derive(Debug, Clone)]
pub struct PerfConfig {
    /// Direction.
    pub direction: Direction,
    /// Bytes per DMA.
    pub size: usize,
    /// Region start.
    pub region: u64,
    /// Region size.
    pub region_size: u64,
    /// Pattern.
    pub pattern: Pattern,
    /// Threads.
    pub threads: usize,
    /// Stop after this long.
    pub duration: Duration,
    /// Stop after this many DMAs per thread (0: by duration only).
    pub count: u64,
}

/// Results of a run.
#[derive(Debug, Clone, Default)]
pub struct PerfResult {
    /// DMAs completed.
    pub ops: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// TLPs sent by the device (MRd or MWr).
    pub tlps: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// Errors (the first is kept).
    pub errors: u64,
    /// First error text.
    pub first_error: Option<String>,
    /// Sorted per-DMA latencies in nanoseconds (reads only).
    pub latencies_ns: Vec<u64>,
}

/// The `p`-th percentile of sorted values (nearest rank).
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl PerfResult {
    /// Payload throughput in Gb/s.
    pub fn gbps(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.elapsed.as_secs_f64().max(1e-9) / 1e9
    }
    /// TLPs per second sent by the device.
    pub fn tlps_per_s(&self) -> f64 {
        self.tlps as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
    /// DMAs per second.
    pub fn ops_per_s(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

impl fmt::Display for PerfResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} DMAs, {} B in {:.3} s: {:.3} Gb/s, {:.0} TLPs/s, {:.0} DMAs/s",
            self.ops,
            self.bytes,
            self.elapsed.as_secs_f64(),
            self.gbps(),
            self.tlps_per_s(),
            self.ops_per_s()
        )?;
        if !self.latencies_ns.is_empty() {
            let l = &self.latencies_ns;
            write!(
                f,
                "; latency p50 {:.1} us, p99 {:.1} us, p999 {:.1} us",
                percentile(l, 50.0) as f64 / 1e3,
                percentile(l, 99.0) as f64 / 1e3,
                percentile(l, 99.9) as f64 / 1e3
            )?;
        }
        if self.errors > 0 {
            write!(
                f,
                "; {} errors (first: {})",
                self.errors,
                self.first_error.as_deref().unwrap_or("?")
            )?;
        }
        Ok(())
    }
}

/// Runs tlpperf on `dev`.
pub fn run(dev: &Device, cfg: &PerfConfig) -> Result<PerfResult, DmaError> {
    let threads = cfg.threads.max(1);
    let start = Instant::now();
    let results: Vec<PerfResult> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| s.spawn(move || one_thread(dev, cfg, t as u64)))
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let mut r = PerfResult {
        elapsed: start.elapsed(),
        ..Default::default()
    };
    for x in results {
        r.ops += x.ops;
        r.bytes += x.bytes;
        r.tlps += x.tlps;
        r.errors += x.errors;
        if r.first_error.is_none() {
            r.first_error = x.first_error;
        }
        r.latencies_ns.extend(x.latencies_ns);
    }
    r.latencies_ns.sort_unstable();
    Ok(r)
}

fn one_thread(dev: &Device, cfg: &PerfConfig, t: u64) -> PerfResult {
    let mut ch = dev.channel();
    let mut buf = vec![0x5au8; cfg.size];
    let mut r = PerfResult::default();
    let before = ch.stats();
    let span = cfg.region_size.saturating_sub(cfg.size as u64).max(1);
    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (t + 1);
    let mut off = 0u64;
    let deadline = Instant::now() + cfg.duration;
    let mut i = 0u64;
    while (cfg.count == 0 || i < cfg.count) && (i & 63 != 0 || Instant::now() < deadline) {
        i += 1;
        let addr = cfg.region
            + match cfg.pattern {
                Pattern::Fix => 0,
                Pattern::Seq => {
                    let a = off;
                    off = (off + cfg.size as u64) % span;
                    a
                }
                Pattern::Random => {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    (rng % span) & !0xfff
                }
            };
        let t0 = Instant::now();
        let res = match cfg.direction {
            Direction::Read => ch.dma_read(addr, &mut buf),
            Direction::Write => ch.dma_write(addr, &buf),
        };
        match res {
            Ok(n) => {
                r.ops += 1;
                r.bytes += n as u64;
                if cfg.direction == Direction::Read && r.latencies_ns.len() < 4_000_000 {
                    r.latencies_ns.push(t0.elapsed().as_nanos() as u64);
                }
            }
            Err(e) => {
                r.errors += 1;
                if r.first_error.is_none() {
                    r.first_error = Some(e.to_string());
                }
                if r.errors > 100 {
                    break;
                }
            }
        }
    }
    let after = ch.stats();
    r.tlps = (after.mrd - before.mrd) + (after.mwr - before.mwr);
    r
}
