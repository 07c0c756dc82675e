//! `pcielab bench [TOPOLOGY] --test ...`: pcie-bench's suite on the simulator or over
//! NetTLP (`crates/bench`).

use crate::format::{csv_field, Format};
use crate::progress::Progress;
use crate::{fail, Failure};
use clap::{Args, ValueEnum};
use pcielab_bench::{
    default_jobs, run_parallel, BenchConfig, Cache, Grid, NettlpTarget, Numa, Outcome, Pattern,
    Row, SimTarget, Test, COLUMNS,
};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::SimConfig;
use pcielab_fabric::topology::Topology;
use pcielab_sim::SimDuration;
use std::net::Ipv4Addr;
use std::path::PathBuf;

/// `--help` examples.
pub const EXAMPLES: &str = "\
Examples:
  pcielab bench --host xeon-e5-haswell --test LAT_RD -n 100000     pcie-bench's Fig. 6 (64 B reads)
  pcielab bench --test BW_RD,BW_WR --size 64:2048:x2 --format csv  bandwidth vs size, Gen3 x8
  pcielab bench --host xeon-e5-haswell --test LAT_RD --cache warm,cold,thrash --window 4K,64M
  pcielab bench --test LAT_RD --iommu off,on --iotlb-entries 8 --pattern random --window 64M
  pcielab bench --host xeon-e5-haswell --numa local,remote --test LAT_RD,LAT_WRRD
  pcielab bench --all --format csv > all.csv                       the 2520-configuration grid
  pcielab bench --example sim-default --device mem3 --test BW_RDWR --size 1500   any topology, endpoint
  pcielab bench --test LAT_RD --plot plots/                         CDF and histogram (SVG)
  pcielab bench --nettlp 127.0.0.1 --local 127.0.0.2 --test LAT_RD  over NetTLP (pcielab adapter)";

/// Plot file format.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlotFormat {
    /// Vector.
    Svg,
    /// Bitmap, 1024×640.
    Png,
}

/// Arguments of `pcielab bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Topology file (TOML). Without it: pcie-bench's setup, a root complex with one
    /// Gen3 x8 link to one psmem endpoint, mem0.
    #[arg(conflicts_with = "example")]
    file: Option<PathBuf>,
    /// A built-in example topology instead of a file (`pcielab topo list-examples`).
    #[arg(long, value_name = "NAME")]
    example: Option<String>,
    /// The endpoint that plays pcie-bench's device (default: the first endpoint).
    #[arg(long, value_name = "NODE")]
    device: Option<String>,
    /// Tests, comma-separated: LAT_RD (one DMA read at a time), LAT_WRRD (a write then
    /// a read of the same address, timed as a pair), BW_RD, BW_WR, BW_RDWR (many DMAs
    /// in flight) [default: all five; with --all the grid's]
    #[arg(long, value_name = "LIST")]
    test: Option<String>,
    /// Transfer sizes in bytes: a comma-separated list of N, A:B, A:B:STEP or A:B:xF
    /// (e.g. 64,1500 or 64:2048:x2) [default: 64]
    #[arg(long, value_name = "LIST")]
    size: Option<String>,
    /// Start offsets of the DMAs from their cache-line-aligned slots, 0..=4095 bytes,
    /// as --size [default: 0]
    #[arg(long, value_name = "LIST")]
    offset: Option<String>,
    /// Host buffer windows the DMAs spread over (at least offset + size), as --size,
    /// e.g. 4K,64M [default: 8K]
    #[arg(long, value_name = "LIST")]
    window: Option<String>,
    /// Access patterns: seq, random [default: seq]
    #[arg(long, value_name = "LIST")]
    pattern: Option<String>,
    /// IOMMU: off, on (comma-separated for both) [default: the host's, off]
    #[arg(long, value_name = "LIST")]
    iommu: Option<String>,
    /// Transactions per configuration [default: 10000 for latency tests, 50000 for
    /// bandwidth tests; with --all 10000 and 20000]
    #[arg(short = 'n', long, value_name = "N")]
    n: Option<u64>,
    /// pcie-bench's full run: 5 tests × 6 sizes × 2 offsets × 7 windows × 2 patterns ×
    /// 3 cache states = 2520 configurations; the lists given override the grid's.
    #[arg(long)]
    all: bool,
    /// DMAs in flight in the bandwidth tests (1..=1024) [default: 32 on the simulator,
    /// 8 over NetTLP]
    #[arg(long, value_name = "N")]
    inflight: Option<u32>,
    /// IOTLB entries of the IOMMU (with --iommu on) [default: 64]
    #[arg(long, value_name = "N")]
    iotlb_entries: Option<usize>,
    /// IOTLB miss (page walk) latency, ns [default: 200]
    #[arg(long, value_name = "NS")]
    page_walk_ns: Option<u64>,
    /// IOMMU page size [default: 4K]
    #[arg(long, value_name = "BYTES", value_parser = crate::units::parse_bytes)]
    iommu_page: Option<u64>,
    /// Base seed; each configuration's seed derives from it and its parameters
    /// [default: the topology's]
    #[arg(long)]
    seed: Option<u64>,
    /// Parallel jobs (each configuration is its own simulation) [default: every core;
    /// 1 over NetTLP]
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
    /// Output format: table, csv or json; one row per configuration
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// Write a latency CDF and histogram of every latency test's configuration into
    /// this directory (created if missing).
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// Plot file format.
    #[arg(long, value_enum, default_value = "svg")]
    plot_format: PlotFormat,
    /// Run over NetTLP against the adapter at this address (`pcielab adapter` or a
    /// NetTLP FPGA adapter) instead of the simulator; timed by the wall clock.
    #[arg(long, value_name = "ADAPTER_IP", conflicts_with_all = ["file", "example", "device"])]
    nettlp: Option<Ipv4Addr>,
    /// With --nettlp: the device's local address.
    #[arg(
        long,
        value_name = "IP",
        default_value = "127.0.0.2",
        requires = "nettlp"
    )]
    local: Ipv4Addr,
    /// With --nettlp: host address of the window's start.
    #[arg(long, value_name = "ADDR", default_value = "0", value_parser = crate::units::parse_bytes, requires = "nettlp")]
    base: u64,
    /// With --nettlp: wait for write acknowledgements (`pcielab adapter --ack-writes`);
    /// LAT_WRRD then checks that each read returns the bytes just written.
    #[arg(long, requires = "nettlp")]
    acked: bool,
    /// The host model: profile and knobs. --cache (warm, cold, thrash) and --numa
    /// (local, remote) take comma-separated lists here [default: the host's].
    #[command(flatten)]
    host: crate::host_args::HostArgs,
}

/// Parses a list of N, A:B, A:B:STEP and A:B:xF items, each value in `min..=max`.
fn parse_list(flag: &str, s: &str, min: u64, max: u64) -> Result<Vec<u64>, Failure> {
    let mut out = Vec::new();
    for item in s.split(',') {
        let item = item.trim();
        let bad = |why: String| {
            fail(format!(
                "--{flag} {s:?}: {item:?}: {why} (items: N, A:B, A:B:STEP or A:B:xF, e.g. 64:2048:x2)"
            ))
        };
        let num = |p: &str| crate::units::parse_bytes(p.trim()).map_err(&bad);
        let parts: Vec<&str> = item.split(':').collect();
        let (from, to) = match parts.as_slice() {
            [one] => (num(one)?, num(one)?),
            [a, b] | [a, b, _] => (num(a)?, num(b)?),
            _ => return Err(bad("too many ':'".into())),
        };
        for v in [from, to] {
            if v < min || v > max {
                return Err(bad(format!("{v} is outside {min}..={max}")));
            }
        }
        if to < from {
            return Err(bad(format!("{to} is less than {from}")));
        }
        match parts.get(2).map(|x| x.trim()) {
            Some(f) if f.starts_with(['x', 'X']) => {
                let k: u64 = f[1..]
                    .parse()
                    .ok()
                    .filter(|&k| k >= 2)
                    .ok_or_else(|| bad(format!("factor {f:?} must be x2 or more")))?;
                if from == 0 {
                    return Err(bad("a geometric range cannot start at 0".into()));
                }
                let mut x = from;
                while x <= to {
                    out.push(x);
                    x = match x.checked_mul(k) {
                        Some(y) => y,
                        None => break,
                    };
                }
            }
            step => {
                let step = match step {
                    Some(t) => num(t)?,
                    None => 1,
                };
                if step == 0 {
                    return Err(bad("STEP must be at least 1".into()));
                }
                if (to - from) / step >= 10_000 {
                    return Err(bad("more than 10,000 values".into()));
                }
                out.extend((from..=to).step_by(step as usize));
            }
        }
        if out.len() > 10_000 {
            return Err(bad("more than 10,000 values".into()));
        }
    }
    Ok(out)
}

/// Parses a comma-separated list of names with `f`.
fn parse_names<T>(
    flag: &str,
    s: &str,
    f: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, Failure> {
    s.split(',')
        .map(|x| f(x.trim()).map_err(|e| fail(format!("--{flag}: {e}"))))
        .collect()
}

fn topology(a: &BenchArgs) -> Result<Topology, Failure> {
    let reg = KindRegistry::builtin();
    match (&a.file, &a.example) {
        (_, Some(name)) => Topology::parse(
            crate::examples::get(name)?.text,
            &crate::examples::label(name),
            &reg,
        ),
        (Some(f), None) => Topology::load(f, &reg),
        (None, None) => Topology::parse(
            pcielab_bench::sim::GEN3_X8,
            "Gen3 x8 single link (rc.0 - mem0)",
            &reg,
        ),
    }
    .map_err(|e| fail(e.to_string()))
}

/// Runs `pcielab bench`.
pub fn run(a: &BenchArgs) -> Result<(), Failure> {
    let mut grid = if a.all {
        Grid::full()
    } else {
        Grid::baseline()
    };
    if let Some(s) = &a.test {
        grid.tests = parse_names("test", s, Test::parse)?;
    }
    if let Some(s) = &a.size {
        grid.sizes = parse_list("size", s, 1, pcielab_bench::config::MAX_SIZE)?;
    }
    if let Some(s) = &a.offset {
        grid.offsets = parse_list("offset", s, 0, 4095)?;
    }
    if let Some(s) = &a.window {
        grid.windows = parse_list("window", s, 1, pcielab_bench::config::MAX_WINDOW)?;
    }
    if let Some(s) = &a.pattern {
        grid.patterns = parse_names("pattern", s, Pattern::parse)?;
    }
    if let Some(n) = a.n {
        if n == 0 || n > pcielab_bench::config::MAX_N {
            return Err(fail(format!(
                "-n {n}: allowed 1..={} transactions",
                pcielab_bench::config::MAX_N
            )));
        }
        grid.lat_n = n;
        grid.bw_n = n;
    }
    if a.inflight.is_some_and(|w| !(1..=1024).contains(&w)) {
        return Err(fail("--inflight: allowed 1..=1024"));
    }
    if a.jobs == Some(0) {
        return Err(fail("--jobs 0: allowed 1 or more"));
    }
    let iommu_list = a
        .iommu
        .as_deref()
        .map(|s| {
            parse_names("iommu", s, |x| match x {
                "on" => Ok(true),
                "off" => Ok(false),
                _ => Err(format!("{x:?}: expected on or off")),
            })
        })
        .transpose()?;
    let cache_list = a
        .host
        .cache
        .as_deref()
        .map(|s| parse_names("cache", s, Cache::parse))
        .transpose()?;
    let numa_list = a
        .host
        .numa
        .as_deref()
        .map(|s| parse_names("numa", s, Numa::parse))
        .transpose()?;
    let plot_ext = match a.plot_format {
        PlotFormat::Svg => "svg",
        PlotFormat::Png => "png",
    };
    if let Some(dir) = &a.plot {
        std::fs::create_dir_all(dir).map_err(|e| fail(format!("--plot {}: {e}", dir.display())))?;
    }

    let (configs, results) = if let Some(adapter) = a.nettlp {
        let host_given = a.host.host.is_some() || !a.host.knobs().is_empty();
        if host_given || iommu_list.is_some() || a.iotlb_entries.is_some() {
            return Err(fail(
                "--nettlp runs against a real host: its cache, IOMMU, NUMA placement and \
                 timing are the adapter host's, so --host, its knobs, --cache, --numa and \
                 --iommu do not apply",
            ));
        }
        let configs = grid.configs();
        validate(&configs)?;
        let requester = pcielab_nettlp::client::get_dev_id(adapter, a.local).unwrap_or(0x1b00);
        let mut t = NettlpTarget::open(
            pcielab_nettlp::device::DeviceConfig {
                adapter,
                local: a.local,
                requester: pcielab_wire::Bdf::from_raw(requester),
                tags: 0..32,
                tags_per_channel: 32,
                max_in_flight: 16,
                acked_writes: a.acked,
                ..Default::default()
            },
            a.base,
        )
        .map_err(fail)?;
        if let Some(w) = a.inflight {
            t.inflight = w as usize;
        }
        if let Some(s) = a.seed {
            t.seed = s;
        }
        // One at a time: concurrent runs would disturb each other's wall-clock timing.
        let jobs = a.jobs.unwrap_or(1);
        let results = run_all(&configs, jobs, a.plot.is_some(), |c| t.run(c));
        (configs, results)
    } else {
        let topo = topology(a)?;
        let mut cfg = SimConfig::default();
        let mut host = a.host.clone();
        host.cache = None;
        host.numa = None;
        host.apply(&topo, &mut cfg).map_err(fail)?;
        cfg.seed = a.seed.or(cfg.seed);
        // Lists not given: the grid's with --all, else the host's own setting.
        match cache_list {
            Some(l) => grid.caches = l,
            None if !a.all => grid.caches = vec![cfg.cache],
            None => {}
        }
        match numa_list {
            Some(l) => grid.numas = l,
            None if !a.all => {
                grid.numas = vec![if cfg.numa_remote_base.is_some() {
                    Numa::Remote
                } else {
                    Numa::Local
                }]
            }
            None => {}
        }
        match iommu_list {
            Some(l) => grid.iommus = l,
            None if !a.all => grid.iommus = vec![cfg.iommu.is_some()],
            None => {}
        }
        let mut iommu = cfg.iommu.unwrap_or_default();
        if let Some(e) = a.iotlb_entries {
            if !(1..=1 << 20).contains(&e) {
                return Err(fail(format!("--iotlb-entries {e}: allowed 1..=1048576")));
            }
            iommu.iotlb_entries = e;
        }
        if let Some(ns) = a.page_walk_ns {
            iommu.miss_latency = SimDuration::from_ns(ns);
        }
        if let Some(p) = a.iommu_page {
            iommu.page_size = p;
        }
        // The IOMMU's own checks (page size) before any run.
        let probe = SimConfig {
            iommu: Some(iommu),
            ..cfg.clone()
        };
        pcielab_fabric::timed::FabricSim::new(&topo, &KindRegistry::builtin(), probe)
            .map_err(|e| fail(format!("{}: {e}", topo.file)))?;
        let mut t = SimTarget::new(topo, cfg, a.device.as_deref()).map_err(fail)?;
        t.iommu = iommu;
        if let Some(w) = a.inflight {
            t.inflight = w;
        }
        let configs = grid.configs();
        validate(&configs)?;
        let jobs = a.jobs.unwrap_or_else(default_jobs);
        let results = run_all(&configs, jobs, a.plot.is_some(), |c| t.run(c));
        (configs, results)
    };

    let mut rows = Vec::with_capacity(results.len());
    for (c, r) in configs.iter().zip(results) {
        let (row, lats) = r.map_err(fail)?;
        if let Some(dir) = &a.plot {
            if c.test.is_latency() && !lats.is_empty() {
                pcielab_bench::plot::write_plots(dir, plot_ext, c, &lats)
                    .map_err(|e| fail(e.to_string()))?;
            }
        }
        rows.push(row);
    }
    print!("{}", render(&rows, a.format));
    Ok(())
}

/// Checks every configuration before any runs; the error names the first bad one.
fn validate(configs: &[BenchConfig]) -> Result<(), Failure> {
    if configs.is_empty() {
        return Err(fail("no configuration to run (an empty list)"));
    }
    for c in configs {
        c.validate()
            .map_err(|e| fail(format!("{}: {e}", c.label())))?;
    }
    Ok(())
}

fn run_all(
    configs: &[BenchConfig],
    jobs: usize,
    keep: bool,
    f: impl Fn(&BenchConfig) -> Outcome + Sync,
) -> Vec<Outcome> {
    let mut bar = Progress::new("configurations", configs.len() as u64);
    let r = run_parallel(configs, jobs, keep, f, |done, _| bar.set(done as u64));
    bar.finish();
    r
}

fn render(rows: &[Row], format: Format) -> String {
    let cells: Vec<Vec<String>> = rows.iter().map(Row::cells).collect();
    match format {
        Format::Csv => {
            let mut out = COLUMNS.join(",") + "\n";
            for r in &cells {
                let line: Vec<String> = r.iter().map(|c| csv_field(c)).collect();
                out.push_str(&line.join(","));
                out.push('\n');
            }
            out
        }
        Format::Json => {
            let v: Vec<serde_json::Value> = rows
                .iter()
                .map(|r| {
                    serde_json::json!({
                        "test": r.test.name(), "size_B": r.size, "offset_B": r.offset,
                        "window_B": r.window, "pattern": r.pattern, "cache": r.cache,
                        "iommu": r.iommu, "n": r.n, "min_ns": r.min_ns,
                        "median_ns": r.median_ns, "p90_ns": r.p90_ns, "p99_ns": r.p99_ns,
                        "p999_ns": r.p999_ns, "max_ns": r.max_ns, "gbps": r.gbps,
                        "numa": r.numa, "failed": r.failed,
                    })
                })
                .collect();
            serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
        }
        Format::Table => {
            let mut w: Vec<usize> = COLUMNS.iter().map(|c| c.len()).collect();
            for r in &cells {
                for (i, c) in r.iter().enumerate() {
                    w[i] = w[i].max(c.len());
                }
            }
            let line = |r: &[String]| -> String {
                let v: Vec<String> = r
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        // Text columns to the left, numbers to the right.
                        if matches!(i, 0 | 4 | 5 | 6 | 15) {
                            format!("{c:<w$}", w = w[i])
                        } else {
                            format!("{c:>w$}", w = w[i])
                        }
                    })
                    .collect();
                v.join("  ").trim_end().to_string() + "\n"
            };
            let head: Vec<String> = COLUMNS.iter().map(|c| c.to_string()).collect();
            let mut out = line(&head);
            for r in &cells {
                out.push_str(&line(r));
            }
            out
        }
    }
}
