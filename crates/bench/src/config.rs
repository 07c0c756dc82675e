//! The parameters of one benchmark ([`BenchConfig`]) and its result ([`Row`]).

use std::fmt;

/// A pcie-bench test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Test {
    /// One DMA read at a time; the latency of each.
    LatRd,
    /// A DMA write, then a DMA read of the same address; the latency of the pair (the
    /// read cannot pass the posted write, so it returns once the write is in memory).
    LatWrRd,
    /// DMA reads with many in flight: throughput.
    BwRd,
    /// DMA writes with many in flight: throughput.
    BwWr,
    /// Alternating DMA reads and writes with many in flight: throughput of both.
    BwRdWr,
}

impl Test {
    /// Every test, in pcie-bench's order.
    pub const ALL: [Test; 5] = [
        Test::LatRd,
        Test::LatWrRd,
        Test::BwRd,
        Test::BwWr,
        Test::BwRdWr,
    ];

    /// pcie-bench's name (`LAT_RD`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Test::LatRd => "LAT_RD",
            Test::LatWrRd => "LAT_WRRD",
            Test::BwRd => "BW_RD",
            Test::BwWr => "BW_WR",
            Test::BwRdWr => "BW_RDWR",
        }
    }

    /// Parses a name, in any case (`LAT_RD`, `lat_rd`, `lat-rd`).
    ///
    /// ```
    /// use pcielab_bench::Test;
    /// assert_eq!(Test::parse("lat-wrrd").unwrap(), Test::LatWrRd);
    /// assert!(Test::parse("LAT_WR").unwrap_err().contains("LAT_RD"));
    /// ```
    pub fn parse(s: &str) -> Result<Test, String> {
        let u = s.trim().to_ascii_uppercase().replace('-', "_");
        Test::ALL
            .into_iter()
            .find(|t| t.name() == u)
            .ok_or_else(|| {
                format!("unknown test {s:?}; allowed: LAT_RD, LAT_WRRD, BW_RD, BW_WR, BW_RDWR")
            })
    }

    /// Whether it is a latency test (one DMA, or one write-read pair, at a time).
    pub fn is_latency(self) -> bool {
        matches!(self, Test::LatRd | Test::LatWrRd)
    }
}

impl fmt::Display for Test {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How the DMAs pick their addresses in the host buffer window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pattern {
    /// One slot after the other, wrapping at the end of the window.
    Seq,
    /// Uniformly random slots (seeded).
    Random,
}

impl Pattern {
    /// `seq` or `random`.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Seq => "seq",
            Pattern::Random => "random",
        }
    }
    /// Parses `seq` (or `sequential`) or `random` (or `rand`).
    pub fn parse(s: &str) -> Result<Pattern, String> {
        match s.trim() {
            "seq" | "sequential" => Ok(Pattern::Seq),
            "random" | "rand" => Ok(Pattern::Random),
            _ => Err(format!("unknown pattern {s:?}; allowed: seq, random")),
        }
    }
}

/// The host cache state for the window (pcie-bench's warm, cold and thrashed caches).
pub use pcielab_fabric::host::model::CacheState as Cache;

/// Where the host buffer lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Numa {
    /// On the node of the device's root complex.
    Local,
    /// On the other node (every DMA read pays the host profile's `numa_ns`).
    Remote,
}

impl Numa {
    /// `local` or `remote`.
    pub fn name(self) -> &'static str {
        match self {
            Numa::Local => "local",
            Numa::Remote => "remote",
        }
    }
    /// Parses `local` or `remote`.
    pub fn parse(s: &str) -> Result<Numa, String> {
        match s.trim() {
            "local" => Ok(Numa::Local),
            "remote" => Ok(Numa::Remote),
            _ => Err(format!(
                "unknown NUMA placement {s:?}; allowed: local, remote"
            )),
        }
    }
}

/// Largest transfer size, bytes.
pub const MAX_SIZE: u64 = 1 << 20;
/// Largest host buffer window, bytes.
pub const MAX_WINDOW: u64 = 1 << 30;
/// Most transactions of one configuration.
pub const MAX_N: u64 = 10_000_000;

/// One benchmark configuration: pcie-bench's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BenchConfig {
    /// The test.
    pub test: Test,
    /// Bytes per DMA.
    pub size: u64,
    /// Start offset of every DMA from its 64-byte-aligned slot (unaligned DMAs):
    /// 0..4096.
    pub offset: u64,
    /// Host buffer window, bytes: the DMAs stay inside it. At least `offset + size`.
    pub window: u64,
    /// Address pattern.
    pub pattern: Pattern,
    /// Cache state.
    pub cache: Cache,
    /// IOMMU on (the device's addresses are translated, with the IOTLB of the host
    /// configuration) or off.
    pub iommu: bool,
    /// NUMA node of the window.
    pub numa: Numa,
    /// Transactions (DMAs; write-read pairs for `LAT_WRRD`).
    pub n: u64,
}

impl BenchConfig {
    /// A configuration of `test` with pcie-bench's baseline settings: 64 B DMAs,
    /// aligned, an 8 KiB window, sequential, warm cache, no IOMMU, local node, 1000
    /// transactions.
    pub fn new(test: Test) -> BenchConfig {
        BenchConfig {
            test,
            size: 64,
            offset: 0,
            window: 8192,
            pattern: Pattern::Seq,
            cache: Cache::Warm,
            iommu: false,
            numa: Numa::Local,
            n: 1000,
        }
    }

    /// Checks the parameters; the error names the parameter, its value and what is
    /// allowed.
    ///
    /// ```
    /// use pcielab_bench::{BenchConfig, Test};
    /// let mut c = BenchConfig::new(Test::LatRd);
    /// assert!(c.validate().is_ok());
    /// c.offset = 4096;
    /// assert!(c.validate().unwrap_err().contains("offset"));
    /// ```
    pub fn validate(&self) -> Result<(), String> {
        if self.size == 0 || self.size > MAX_SIZE {
            return Err(format!("size {}: allowed 1..={MAX_SIZE} bytes", self.size));
        }
        if self.offset >= 4096 {
            return Err(format!(
                "offset {}: allowed 0..=4095 bytes (a start offset within a page)",
                self.offset
            ));
        }
        if self.window > MAX_WINDOW {
            return Err(format!(
                "window {}: allowed at most {MAX_WINDOW} bytes",
                self.window
            ));
        }
        if self.window < self.offset + self.size {
            return Err(format!(
                "window {} B is smaller than the transfer: offset {} + size {} = {} B must fit in it",
                self.window,
                self.offset,
                self.size,
                self.offset + self.size
            ));
        }
        if self.n == 0 || self.n > MAX_N {
            return Err(format!("n {}: allowed 1..={MAX_N} transactions", self.n));
        }
        Ok(())
    }

    /// Stride between the slots of the window: the size rounded up to a cache line.
    pub fn stride(&self) -> u64 {
        self.size.next_multiple_of(64)
    }

    /// Slots in the window: DMA `k` starts at `slot × stride + offset`.
    pub fn slots(&self) -> u64 {
        ((self.window - self.offset.min(self.window)) / self.stride()).max(1)
    }

    /// A short name for files and messages: `LAT_RD-64B-off0-win8192-seq-warm-iommu_off-local`.
    pub fn label(&self) -> String {
        format!(
            "{}-{}B-off{}-win{}-{}-{}-iommu_{}-{}",
            self.test.name(),
            self.size,
            self.offset,
            self.window,
            self.pattern.name(),
            self.cache.name(),
            if self.iommu { "on" } else { "off" },
            self.numa.name()
        )
    }

    /// A seed for this configuration from a base seed: the same configuration gets
    /// the same seed whatever else runs beside it.
    pub fn seed(&self, base: u64) -> u64 {
        // FNV-1a over the label and n, then SplitMix64's finaliser with the base.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.label().bytes().chain(self.n.to_le_bytes()) {
            h ^= b as u64;
            h = h.wrapping_mul(0x100_0000_01b3);
        }
        let mut x = h ^ base.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        x ^= x >> 30;
        x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^= x >> 27;
        x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }
}

/// One result row: the contract's columns
/// `test,size_B,offset_B,window_B,pattern,cache,iommu,n,min_ns,median_ns,p90_ns,p99_ns,p999_ns,max_ns,gbps`,
/// then `numa`.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The test.
    pub test: Test,
    /// Bytes per DMA.
    pub size: u64,
    /// Start offset.
    pub offset: u64,
    /// Window, bytes.
    pub window: u64,
    /// `seq` or `random`.
    pub pattern: String,
    /// `warm`, `cold`, `thrash`, or `host` over NetTLP (the adapter host's own state).
    pub cache: String,
    /// `on`, `off`, or `host` over NetTLP.
    pub iommu: String,
    /// `local`, `remote`, or `host` over NetTLP.
    pub numa: String,
    /// Transactions measured.
    pub n: u64,
    /// Latency statistics, ns: for a latency test of each transaction, for a
    /// bandwidth test of each DMA under load (issue to done).
    pub min_ns: f64,
    /// Median (nearest rank).
    pub median_ns: f64,
    /// 90th percentile.
    pub p90_ns: f64,
    /// 99th percentile.
    pub p99_ns: f64,
    /// 99.9th percentile.
    pub p999_ns: f64,
    /// Maximum.
    pub max_ns: f64,
    /// Throughput, Gb/s: for a bandwidth test the steady state's payload rate; for a
    /// latency test the payload moved one transaction at a time over the run (for
    /// `LAT_WRRD` the bytes read), so a serial rate.
    pub gbps: f64,
    /// Transactions that failed (completion timeout or error); 0 in a sane run.
    pub failed: u64,
}

/// The row's column names, in order (the contract's, then `numa` and `failed`).
pub const COLUMNS: [&str; 17] = [
    "test",
    "size_B",
    "offset_B",
    "window_B",
    "pattern",
    "cache",
    "iommu",
    "n",
    "min_ns",
    "median_ns",
    "p90_ns",
    "p99_ns",
    "p999_ns",
    "max_ns",
    "gbps",
    "numa",
    "failed",
];

impl Row {
    /// The statistics of `lat_ps` (any order), ps → ns, by nearest rank.
    pub(crate) fn stats(lat_ps: &[u64]) -> [f64; 6] {
        let mut v = lat_ps.to_vec();
        v.sort_unstable();
        let p = |q: f64| pcielab_fabric::timed::percentile_ns(&v, q);
        [p(0.0), p(0.5), p(0.9), p(0.99), p(0.999), p(1.0)]
    }

    /// The row from a configuration, its statistics and rate.
    pub(crate) fn from_parts(c: &BenchConfig, s: [f64; 6], gbps: f64, failed: u64) -> Row {
        Row {
            test: c.test,
            size: c.size,
            offset: c.offset,
            window: c.window,
            pattern: c.pattern.name().into(),
            cache: c.cache.name().into(),
            iommu: if c.iommu { "on" } else { "off" }.into(),
            numa: c.numa.name().into(),
            n: c.n,
            min_ns: s[0],
            median_ns: s[1],
            p90_ns: s[2],
            p99_ns: s[3],
            p999_ns: s[4],
            max_ns: s[5],
            gbps,
            failed,
        }
    }

    /// The cells in [`COLUMNS`] order, as text (latencies with one decimal, Gb/s
    /// with three).
    pub fn cells(&self) -> Vec<String> {
        vec![
            self.test.name().into(),
            self.size.to_string(),
            self.offset.to_string(),
            self.window.to_string(),
            self.pattern.clone(),
            self.cache.clone(),
            self.iommu.clone(),
            self.n.to_string(),
            format!("{:.1}", self.min_ns),
            format!("{:.1}", self.median_ns),
            format!("{:.1}", self.p90_ns),
            format!("{:.1}", self.p99_ns),
            format!("{:.1}", self.p999_ns),
            format!("{:.1}", self.max_ns),
            format!("{:.3}", self.gbps),
            self.numa.clone(),
            self.failed.to_string(),
        ]
    }

    /// Whether min ≤ median ≤ p90 ≤ p99 ≤ p99.9 ≤ max and every number is finite
    /// and not negative.
    pub fn ordered(&self) -> bool {
        let v = [
            self.min_ns,
            self.median_ns,
            self.p90_ns,
            self.p99_ns,
            self.p999_ns,
            self.max_ns,
        ];
        v.iter().all(|x| x.is_finite() && *x >= 0.0)
            && v.windows(2).all(|w| w[0] <= w[1])
            && self.gbps.is_finite()
            && self.gbps >= 0.0
    }
}
