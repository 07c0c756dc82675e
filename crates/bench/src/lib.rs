//! pcie-bench's DMA benchmark suite (seed 001, §4–6) on pcielab's timed simulator and
//! over NetTLP.
//!
//! pcie-bench measures a host's PCIe implementation from a programmable device with
//! five tests:
//!
//! | test | what the device does | what is measured |
//! | --- | --- | --- |
//! | `LAT_RD` | one DMA read at a time | the latency of each read |
//! | `LAT_WRRD` | a DMA write, then a read of the same address | the latency of the pair |
//! | `BW_RD` | DMA reads, many in flight | throughput |
//! | `BW_WR` | DMA writes, many in flight | throughput |
//! | `BW_RDWR` | alternating reads and writes, many in flight | throughput |
//!
//! Each test varies the transfer size, the start offset (unaligned DMAs), the host
//! buffer window the DMAs spread over, the access pattern (sequential or random), the
//! cache state of the window (warm, cold, thrashed), the IOMMU (on or off), the NUMA
//! node of the window and the number of transactions: a [`BenchConfig`]. A run gives
//! one [`Row`] with the latency distribution (min, median, p90, p99, p99.9, max) and
//! the throughput.
//!
//! [`SimTarget`] runs a configuration on the simulator (a fresh, seeded simulation
//! each, so rows do not depend on what else runs or on the thread count);
//! [`NettlpTarget`] runs it over NetTLP, timed by the wall clock. [`Grid`] spans lists
//! of parameters ([`Grid::full`] is the 2520-configuration grid of `pcielab bench
//! --all`) and [`run_parallel`] runs them on every core.
//!
//! ```
//! use pcielab_bench::{BenchConfig, SimTarget, Test};
//! use pcielab_fabric::timed::SimConfig;
//! let mut cfg = SimConfig::default();
//! pcielab_fabric::host::model::profile("xeon-e5-haswell").unwrap().apply(&mut cfg).unwrap();
//! let target = SimTarget::gen3_x8(cfg);
//! let (row, _lat) = target.run(&BenchConfig::new(Test::LatRd)).unwrap();
//! assert!(row.min_ns > 500.0 && row.median_ns < 560.0, "{row:?}");
//! ```

pub mod config;
pub mod grid;
pub mod nettlp;
pub mod plot;
pub mod sim;

pub use config::{BenchConfig, Cache, Numa, Pattern, Row, Test, COLUMNS};
pub use grid::{default_jobs, run_parallel, Grid, Outcome};
pub use nettlp::NettlpTarget;
pub use sim::SimTarget;
