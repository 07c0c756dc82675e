//! Pipelined DMA reads against one-read-in-flight (upstream tlpperf's pattern), side by
//! side in one run, through the same software adapter (one worker thread, in this
//! process, on a random 127.x.y.z pair of its own).
//!
//! For each read size (64, 256, 1024 B; MRRS 4096, so one MRd per read, as upstream
//! LibTLP sends it) window 1 and each pipelined window run in alternating slices
//! (`ROUNDS` × `SLICE` each), so all see the same machine load; the bench prints reads/s
//! and p50/p99 latency of each and its ratio to window 1. Then posted writes from two
//! threads: MWr sent against MWr applied by the adapter (the loss, which must be 0).
//!
//! `cargo bench -p pcielab-nettlp --bench pipeline` (environment `PIPELINE_WINDOWS`,
//! default `2,4,8`; `PIPELINE_SLICE_MS`, default 500; `PIPELINE_ROUNDS`, default 6).

use pcielab_nettlp::adapter::{Adapter, AdapterConfig};
use pcielab_nettlp::device::{Device, DeviceConfig};
use pcielab_nettlp::perf::{self, percentile, Direction, Pattern, PerfConfig, PerfResult};
use std::net::Ipv4Addr;
use std::time::Duration;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn own_addrs() -> (Ipv4Addr, Ipv4Addr) {
    pcielab_nettlp::loopback::random_pair()
}

fn merge(into: &mut PerfResult, r: PerfResult) {
    into.ops += r.ops;
    into.bytes += r.bytes;
    into.tlps += r.tlps;
    into.errors += r.errors;
    into.elapsed += r.elapsed;
    if into.first_error.is_none() {
        into.first_error = r.first_error;
    }
    into.latencies_ns.extend(r.latencies_ns);
}

fn main() {
    // `cargo test --benches` runs this with --bench absent: do a short smoke run then.
    let quick = !std::env::args().any(|a| a == "--bench");
    let windows: Vec<usize> = std::env::var("PIPELINE_WINDOWS")
        .unwrap_or_else(|_| "2,4,8".into())
        .split(',')
        .filter_map(|w| w.trim().parse().ok())
        .map(|w: usize| w.clamp(1, 64))
        .collect();
    let window = windows.iter().copied().max().unwrap_or(1);
    let slice = Duration::from_millis(if quick {
        50
    } else {
        env("PIPELINE_SLICE_MS", 500)
    });
    let rounds = if quick { 1 } else { env("PIPELINE_ROUNDS", 6) };
    let (ad, dv) = own_addrs();
    let a = Adapter::start(AdapterConfig::on(ad, dv)).expect("adapter starts");
    let tags = (2 * window).max(2) as u16;
    let dev = Device::open(DeviceConfig {
        adapter: ad,
        local: dv,
        tags: 0..2 * tags,
        tags_per_channel: tags,
        max_in_flight: window as u16,
        mrrs: 4096,
        ..DeviceConfig::default()
    })
    .expect("device opens");
    println!(
        "pipeline: adapter {ad} (1 worker), device {dv}; windows {windows:?} vs 1; {rounds} x {} ms slices each, alternating",
        slice.as_millis()
    );
    let modes: Vec<usize> = std::iter::once(1).chain(windows.iter().copied()).collect();
    for size in [64usize, 256, 1024] {
        let mut res: Vec<PerfResult> = modes.iter().map(|_| PerfResult::default()).collect();
        for _ in 0..rounds {
            for (k, &w) in modes.iter().enumerate() {
                let cfg = PerfConfig {
                    direction: Direction::Read,
                    size,
                    region: 0x10_0000,
                    region_size: 8 << 20,
                    pattern: Pattern::Seq,
                    threads: 1,
                    duration: slice,
                    count: 0,
                    window: w,
                    stop: None,
                };
                let r = perf::run(&dev, &cfg).expect("tlpperf");
                merge(&mut res[k], r);
            }
        }
        for r in &mut res {
            r.latencies_ns.sort_unstable();
        }
        let us = |r: &PerfResult, p: f64| percentile(&r.latencies_ns, p) as f64 / 1e3;
        let base = res[0].ops_per_s().max(1e-9);
        for (k, &w) in modes.iter().enumerate() {
            let r = &res[k];
            println!(
                "pipeline read {size:>4} B window {w:>2}: {:>9.0} reads/s, p50 {:>7.1} us, p99 {:>7.1} us, {:.2}x window 1, {} errors",
                r.ops_per_s(),
                us(r, 50.0),
                us(r, 99.0),
                r.ops_per_s() / base,
                r.errors
            );
        }
    }
    // Posted writes under load: two threads, every MWr must be applied.
    let before = a.stats().mwr;
    let cfg = PerfConfig {
        direction: Direction::Write,
        size: 4096,
        region: 0x100_0000,
        region_size: 8 << 20,
        pattern: Pattern::Seq,
        threads: 2,
        duration: slice * 2,
        count: 0,
        window: 1,
        stop: None,
    };
    let sent_before = dev.stats().mwr;
    let r = perf::run(&dev, &cfg).expect("tlpperf writes");
    let sent = dev.stats().mwr - sent_before;
    let mut applied = a.stats().mwr - before;
    for _ in 0..200 {
        if applied >= sent {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
        applied = a.stats().mwr - before;
    }
    println!(
        "pipeline posted writes, 2 threads, 4096 B (16 MWr each): {:.0} MWr/s sent, {sent} sent, {applied} applied, {} lost",
        r.tlps_per_s(),
        sent.saturating_sub(applied)
    );
}
