//! The suite over NetTLP: the DMAs are real TLPs in UDP to an adapter (`pcielab
//! adapter` or a NetTLP FPGA adapter), timed by the wall clock, as NetTLP's port of
//! pcie-bench measured a real host.
//!
//! The host's cache, IOMMU and NUMA placement are whatever the adapter's host has:
//! rows say `host` in those columns.

use crate::config::{BenchConfig, Pattern, Row, Test};
use pcielab_nettlp::device::{Device, DeviceConfig};
use pcielab_sim::Rng;
use std::time::Instant;

/// An adapter to run the suite against.
#[derive(Debug)]
pub struct NettlpTarget {
    dev: Device,
    /// Host address of the window's start.
    pub base: u64,
    /// Reads in flight in `BW_RD` (pipelined over the channel's tags). Default 8.
    pub inflight: usize,
    /// Base seed of the random pattern.
    pub seed: u64,
}

impl NettlpTarget {
    /// Opens the device side of `cfg` (its tag sockets on `cfg.local`); the DMAs use
    /// host memory from `base`.
    pub fn open(cfg: DeviceConfig, base: u64) -> Result<NettlpTarget, String> {
        let (adapter, local) = (cfg.adapter, cfg.local);
        let dev = Device::open(cfg)
            .map_err(|e| format!("NetTLP device on {local} for adapter {adapter}: {e}"))?;
        Ok(NettlpTarget {
            dev,
            base,
            inflight: 8,
            seed: 1,
        })
    }

    /// Runs one configuration; latencies are wall-clock ns × 1000 (ps), as the
    /// simulator's.
    pub fn run(&self, c: &BenchConfig) -> crate::grid::Outcome {
        c.validate()?;
        let mut ch = self.dev.channel();
        let mut rng = Rng::new(c.seed(self.seed));
        let (stride, slots) = (c.stride(), c.slots());
        let mut k = 0u64;
        let mut next_addr = move || {
            let slot = match c.pattern {
                Pattern::Seq => k % slots,
                Pattern::Random => rng.below(slots),
            };
            k += 1;
            self.base + slot * stride + c.offset
        };
        let size = c.size as usize;
        let mut buf = vec![0u8; size];
        let data: Vec<u8> = (0..size).map(|i| i as u8 ^ 0xa5).collect();
        let mut lats: Vec<u64> = Vec::with_capacity(c.n.min(1 << 20) as usize);
        let err = |e: pcielab_nettlp::device::DmaError| format!("{}: {e}", c.label());
        let start = Instant::now();
        match c.test {
            Test::LatRd => {
                for _ in 0..c.n {
                    let a = next_addr();
                    let t = Instant::now();
                    ch.dma_read(a, &mut buf).map_err(err)?;
                    lats.push(t.elapsed().as_nanos() as u64 * 1000);
                }
            }
            Test::LatWrRd => {
                for _ in 0..c.n {
                    let a = next_addr();
                    let t = Instant::now();
                    ch.dma_write(a, &data).map_err(err)?;
                    ch.dma_read(a, &mut buf).map_err(err)?;
                    lats.push(t.elapsed().as_nanos() as u64 * 1000);
                    // With acknowledged writes the write is in memory before the read
                    // goes out, so the read must return it.
                    if self.dev.config().acked_writes && buf != data {
                        return Err(format!(
                            "{}: the read at {a:#x} did not return the bytes just written",
                            c.label()
                        ));
                    }
                }
            }
            Test::BwRd => {
                let mut left = c.n;
                ch.dma_read_stream(
                    size,
                    self.inflight,
                    || {
                        (left > 0).then(|| {
                            left -= 1;
                            next_addr()
                        })
                    },
                    |r| {
                        lats.push(r.latency.as_nanos() as u64 * 1000);
                        true
                    },
                )
                .map_err(err)?;
            }
            Test::BwWr => {
                for _ in 0..c.n {
                    let a = next_addr();
                    let t = Instant::now();
                    ch.dma_write(a, &data).map_err(err)?;
                    lats.push(t.elapsed().as_nanos() as u64 * 1000);
                }
            }
            Test::BwRdWr => {
                for i in 0..c.n {
                    let a = next_addr();
                    let t = Instant::now();
                    if i % 2 == 0 {
                        ch.dma_read(a, &mut buf).map_err(err)?;
                    } else {
                        ch.dma_write(a, &data).map_err(err)?;
                    }
                    lats.push(t.elapsed().as_nanos() as u64 * 1000);
                }
            }
        }
        let secs = start.elapsed().as_secs_f64().max(1e-9);
        let bytes = c.size * lats.len() as u64;
        let mut row = Row::from_parts(c, Row::stats(&lats), bytes as f64 * 8.0 / secs / 1e9, 0);
        row.n = lats.len() as u64;
        row.cache = "host".into();
        row.iommu = "host".into();
        row.numa = "host".into();
        Ok((row, lats))
    }
}
