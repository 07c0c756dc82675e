//! Grids of configurations and running them on every core.

use crate::config::{BenchConfig, Cache, Numa, Pattern, Row, Test};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

/// Transactions of a latency test in [`Grid::full`]: ten times the 1000 latencies
/// pcie-bench's NetFPGA implementation records per test, so the 99.9th percentile is
/// not the maximum.
pub const FULL_LAT_N: u64 = 10_000;
/// DMAs of a bandwidth test in [`Grid::full`] (pcie-bench performs 1 million on the
/// NetFPGA and 8 million on the NFP; the simulator's steady state begins after the
/// first window of DMAs in flight, and 20,000 keep the full grid well under 10
/// minutes on 2 cores).
pub const FULL_BW_N: u64 = 20_000;

/// A grid: every combination of the lists, tests outermost.
#[derive(Debug, Clone, PartialEq)]
pub struct Grid {
    /// Tests.
    pub tests: Vec<Test>,
    /// Transfer sizes, bytes.
    pub sizes: Vec<u64>,
    /// Start offsets, bytes.
    pub offsets: Vec<u64>,
    /// Host buffer windows, bytes.
    pub windows: Vec<u64>,
    /// Address patterns.
    pub patterns: Vec<Pattern>,
    /// Cache states.
    pub caches: Vec<Cache>,
    /// IOMMU off (false) and/or on (true).
    pub iommus: Vec<bool>,
    /// NUMA placements.
    pub numas: Vec<Numa>,
    /// Transactions of a latency test.
    pub lat_n: u64,
    /// DMAs of a bandwidth test.
    pub bw_n: u64,
}

impl Grid {
    /// One configuration of each test with pcie-bench's baseline settings
    /// ([`BenchConfig::new`]; 10,000 transactions of a latency test, 50,000 DMAs of a
    /// bandwidth test).
    pub fn baseline() -> Grid {
        let b = BenchConfig::new(Test::LatRd);
        Grid {
            tests: Test::ALL.to_vec(),
            sizes: vec![b.size],
            offsets: vec![b.offset],
            windows: vec![b.window],
            patterns: vec![b.pattern],
            caches: vec![b.cache],
            iommus: vec![b.iommu],
            numas: vec![b.numa],
            lat_n: 10_000,
            bw_n: 50_000,
        }
    }

    /// The grid of `--all`: 5 tests × 6 sizes (64 B to 2 KiB, powers of two) × 2
    /// offsets (0, 1: aligned and not) × 7 windows (4 KiB to 16 MiB, powers of four)
    /// × 2 patterns × 3 cache states = 2520 configurations (pcie-bench's full run is
    /// about 2500 tests), IOMMU off, local node, [`FULL_LAT_N`] and [`FULL_BW_N`]
    /// transactions.
    ///
    /// ```
    /// assert_eq!(pcielab_bench::Grid::full().configs().len(), 2520);
    /// ```
    pub fn full() -> Grid {
        Grid {
            tests: Test::ALL.to_vec(),
            sizes: vec![64, 128, 256, 512, 1024, 2048],
            offsets: vec![0, 1],
            windows: (0..7).map(|k| 4096u64 << (2 * k)).collect(),
            patterns: vec![Pattern::Seq, Pattern::Random],
            caches: vec![Cache::Warm, Cache::Cold, Cache::Thrash],
            iommus: vec![false],
            numas: vec![Numa::Local],
            lat_n: FULL_LAT_N,
            bw_n: FULL_BW_N,
        }
    }

    /// Every configuration, in a fixed order (test, size, offset, window, pattern,
    /// cache, IOMMU, NUMA; each list in the order given).
    pub fn configs(&self) -> Vec<BenchConfig> {
        let mut v = Vec::new();
        for &test in &self.tests {
            for &size in &self.sizes {
                for &offset in &self.offsets {
                    for &window in &self.windows {
                        for &pattern in &self.patterns {
                            for &cache in &self.caches {
                                for &iommu in &self.iommus {
                                    for &numa in &self.numas {
                                        v.push(BenchConfig {
                                            test,
                                            size,
                                            offset,
                                            window,
                                            pattern,
                                            cache,
                                            iommu,
                                            numa,
                                            n: if test.is_latency() {
                                                self.lat_n
                                            } else {
                                                self.bw_n
                                            },
                                        });
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        v
    }
}

/// What running one configuration gives: its row and its latencies (ps, in
/// completion order), or why it could not run.
pub type Outcome = Result<(Row, Vec<u64>), String>;

/// The default number of jobs: every core.
pub fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Runs `run` on each configuration with `jobs` threads (each takes the next
/// configuration not yet taken), calling `progress(done, total)` on the calling
/// thread as results arrive. Results come back in the configurations' order, so
/// they do not depend on `jobs` when `run` depends only on its configuration.
/// Latencies are kept only when `keep_latencies` is set (for plots).
pub fn run_parallel<F>(
    configs: &[BenchConfig],
    jobs: usize,
    keep_latencies: bool,
    run: F,
    mut progress: impl FnMut(usize, usize),
) -> Vec<Outcome>
where
    F: Fn(&BenchConfig) -> Outcome + Sync,
{
    let total = configs.len();
    let mut out: Vec<Option<Outcome>> = vec![None; total];
    let next = AtomicUsize::new(0);
    let jobs = jobs.clamp(1, total.max(1));
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel();
        for _ in 0..jobs {
            let tx = tx.clone();
            let (next, run) = (&next, &run);
            s.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let r = run(&configs[i])
                    .map(|(row, lats)| (row, if keep_latencies { lats } else { Vec::new() }));
                if tx.send((i, r)).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        let mut done = 0;
        for (i, r) in rx {
            out[i] = Some(r);
            done += 1;
            progress(done, total);
        }
    });
    out.into_iter()
        .map(|r| r.unwrap_or_else(|| Err("a worker thread stopped early".into())))
        .collect()
}
