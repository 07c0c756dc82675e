//! tlpperf: DMA throughput and latency through an adapter.
//!
//! Each thread takes its own [`Channel`](crate::device::Channel) and repeats DMAs of
//! `size` bytes for `duration` (or `count` DMAs), at a fixed address, sequentially
//! through a region, or at random 4 KiB-aligned offsets. Reads are timed one by one for
//! the latency percentiles (from the first MRd sent to the last completion taken).
//!
//! Reads are pipelined: [`PerfConfig::window`] reads are kept in flight per thread
//! ([`Channel::dma_read_stream`](crate::device::Channel::dma_read_stream)). A window of 1
//! is upstream tlpperf's pattern, one loopback round trip per read.
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
    /// Reads in flight per thread (1: one round trip per read, as upstream tlpperf).
    pub window: usize,
    /// Stop early when this becomes true (checked between DMAs), e.g. on a signal.
    pub stop: Option<&'static std::sync::atomic::AtomicBool>,
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
    /// True when the run was stopped early by [`PerfConfig::stop`].
    pub interrupted: bool,
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

impl PerfResult {
    /// The figures as one JSON object: `ops`, `bytes`, `tlps`, `elapsed_s`, `ops_per_s`,
    /// `tlps_per_s`, `gbps`, `p50_us`, `p99_us`, `p999_us` (0 without latencies),
    /// `errors`, `first_error` (null or a string) and `interrupted`.
    pub fn to_json(&self) -> String {
        let l = &self.latencies_ns;
        let us = |p: f64| percentile(l, p) as f64 / 1e3;
        let err = match &self.first_error {
            None => "null".to_string(),
            Some(e) => format!("\"{}\"", json_escape(e)),
        };
        format!(
            "{{\"ops\":{},\"bytes\":{},\"tlps\":{},\"elapsed_s\":{:.6},\"ops_per_s\":{:.1},\"tlps_per_s\":{:.1},\"gbps\":{:.6},\"p50_us\":{:.3},\"p99_us\":{:.3},\"p999_us\":{:.3},\"errors\":{},\"first_error\":{},\"interrupted\":{}}}",
            self.ops,
            self.bytes,
            self.tlps,
            self.elapsed.as_secs_f64(),
            self.ops_per_s(),
            self.tlps_per_s(),
            self.gbps(),
            us(50.0),
            us(99.0),
            us(99.9),
            self.errors,
            err,
            self.interrupted
        )
    }
}

fn json_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o
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
        r.interrupted |= x.interrupted;
    }
    r.latencies_ns.sort_unstable();
    Ok(r)
}

/// Addresses of one thread's DMAs, by pattern.
struct Addrs {
    region: u64,
    size: u64,
    span: u64,
    pattern: Pattern,
    rng: u64,
    off: u64,
}

impl Addrs {
    fn next(&mut self) -> u64 {
        self.region
            + match self.pattern {
                Pattern::Fix => 0,
                Pattern::Seq => {
                    let a = self.off;
                    self.off = (self.off + self.size) % self.span;
                    a
                }
                Pattern::Random => {
                    self.rng ^= self.rng << 13;
                    self.rng ^= self.rng >> 7;
                    self.rng ^= self.rng << 17;
                    (self.rng % self.span) & !0xfff
                }
            }
    }
}

const MAX_LATENCIES: usize = 4_000_000;

fn one_thread(dev: &Device, cfg: &PerfConfig, t: u64) -> PerfResult {
    let mut ch = dev.channel();
    let mut buf = vec![0x5au8; cfg.size];
    let mut r = PerfResult::default();
    let before = ch.stats();
    let mut addrs = Addrs {
        region: cfg.region,
        size: cfg.size as u64,
        span: cfg.region_size.saturating_sub(cfg.size as u64).max(1),
        pattern: cfg.pattern,
        rng: 0x9e37_79b9_7f4a_7c15u64 ^ (t + 1),
        off: 0,
    };
    let deadline = Instant::now() + cfg.duration;
    let stopped = || {
        cfg.stop
            .is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed))
    };
    let mut i = 0u64;
    if cfg.direction == Direction::Read && cfg.window > 1 {
        // Pipelined: `window` reads in flight; restarted after an error.
        while (cfg.count == 0 || i < cfg.count) && Instant::now() < deadline && !stopped() {
            let mut issued = 0u64;
            let res = ch.dma_read_stream(
                cfg.size,
                cfg.window,
                || {
                    if (cfg.count != 0 && i + issued >= cfg.count)
                        || (issued & 63 == 0 && (Instant::now() >= deadline || stopped()))
                    {
                        return None;
                    }
                    issued += 1;
                    Some(addrs.next())
                },
                |d| {
                    r.ops += 1;
                    r.bytes += d.data.len() as u64;
                    if r.latencies_ns.len() < MAX_LATENCIES {
                        r.latencies_ns.push(d.latency.as_nanos() as u64);
                    }
                    true
                },
            );
            i += issued;
            if let Err(e) = res {
                r.errors += 1;
                if r.first_error.is_none() {
                    r.first_error = Some(e.to_string());
                }
                if r.errors > 100 {
                    break;
                }
            }
        }
    } else {
        while (cfg.count == 0 || i < cfg.count)
            && (i & 63 != 0 || (Instant::now() < deadline && !stopped()))
        {
            i += 1;
            let addr = addrs.next();
            let t0 = Instant::now();
            let res = match cfg.direction {
                Direction::Read => ch.dma_read(addr, &mut buf),
                Direction::Write => ch.dma_write(addr, &buf),
            };
            match res {
                Ok(n) => {
                    r.ops += 1;
                    r.bytes += n as u64;
                    if cfg.direction == Direction::Read && r.latencies_ns.len() < MAX_LATENCIES {
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
    }
    r.interrupted = stopped();
    let after = ch.stats();
    r.tlps = (after.mrd - before.mrd) + (after.mwr - before.mwr);
    r
}
