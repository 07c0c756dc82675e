//! NetTLP on loopback: DMA read latency and throughput through the software adapter, and
//! the adapter's capacity for posted writes (TLPs/s). Adapter on 127.0.0.1, device on
//! 127.0.0.2, both in this process (so the numbers include both sides sharing the CPUs).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use pcielab_nettlp::adapter::{Adapter, AdapterConfig};
use pcielab_nettlp::device::{Device, DeviceConfig};
use std::time::{Duration, Instant};

fn dma(c: &mut Criterion) {
    let a = Adapter::start(AdapterConfig::default()).expect("adapter");
    let dev = Device::open(DeviceConfig {
        tags: 0..32,
        tags_per_channel: 16,
        max_in_flight: 8,
        ..DeviceConfig::default()
    })
    .expect("device");
    let mut g = c.benchmark_group("nettlp_dma_read");
    g.measurement_time(Duration::from_secs(3));
    for size in [64usize, 256, 4096, 65536] {
        let mut buf = vec![0u8; size];
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::from_parameter(size), &size, |b, _| {
            let mut ch = dev.channel();
            b.iter(|| ch.dma_read(0x1000, &mut buf).expect("read"));
        });
    }
    g.finish();

    // Posted writes: TLPs/s the adapter applies (counted by the adapter, not the sender).
    let mut g = c.benchmark_group("nettlp_adapter_mwr");
    g.measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(1024));
    g.bench_function("1024x64B", |b| {
        let mut ch = dev.channel();
        let data = [7u8; 64];
        b.iter_custom(|iters| {
            let before = a.stats().mwr;
            let t0 = Instant::now();
            for _ in 0..iters {
                for k in 0..1024u64 {
                    ch.dma_write(0x10_0000 + k * 64, &data).expect("write");
                }
            }
            // Wait (bounded) until the adapter has handled what arrived.
            let want = before + iters * 1024;
            let end = Instant::now() + Duration::from_secs(1);
            let mut last = a.stats().mwr;
            while last < want && Instant::now() < end {
                std::thread::sleep(Duration::from_micros(200));
                let now = a.stats().mwr;
                if now == last {
                    break;
                }
                last = now;
            }
            // Scale the time to the writes actually applied (lost ones do not count).
            let applied = (a.stats().mwr - before).max(1);
            t0.elapsed().mul_f64((iters * 1024) as f64 / applied as f64)
        });
    });
    g.finish();
}

criterion_group!(benches, dma);
criterion_main!(benches);
