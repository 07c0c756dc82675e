//! Bandwidth points evaluated per second (target: ≥ 1 M points/s per core).
//!
//! A point is one transfer size evaluated for read, write and read/write bandwidth
//! (`Model::point`). Each iteration sweeps sizes 1..=4096, so criterion's
//! elements/s is points/s on one core.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use pcielab_model::{Mode, Model, PcieConfig};
use pcielab_wire::Generation;

const SIZES: u64 = 4096;

fn sweep(c: &mut Criterion) {
    let mut g = c.benchmark_group("bw_points");
    g.throughput(Throughput::Elements(SIZES));
    for mode in [Mode::Compat, Mode::Spec] {
        let mut cfg = PcieConfig::new(Generation::Gen3, 8).unwrap();
        cfg.mode = mode;
        let m = Model::new(cfg).unwrap();
        g.bench_function(format!("gen3x8_1..4096_{mode}"), |b| {
            b.iter(|| {
                let mut acc = 0.0;
                for size in 1..=SIZES {
                    let p = m.point(black_box(size)).unwrap();
                    acc += p.read_gbps + p.write_gbps + p.readwrite_gbps;
                }
                acc
            })
        });
        g.bench_function(format!("gen3x8_unaligned_1..4096_{mode}"), |b| {
            b.iter(|| {
                let mut acc = 0.0;
                for size in 1..=SIZES {
                    let p = m
                        .point_at(black_box(size * 7 % 4096), black_box(size))
                        .unwrap();
                    acc += p.read_gbps;
                }
                acc
            })
        });
    }
    // Building a model (table look-ups) and evaluating one point: the cost of a sweep
    // over configurations rather than sizes.
    g.throughput(Throughput::Elements(1));
    g.bench_function("new_model_plus_point", |b| {
        b.iter(|| {
            let m = Model::new(PcieConfig::new(black_box(Generation::Gen4), 16).unwrap()).unwrap();
            m.point(black_box(1500)).unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, sweep);
criterion_main!(benches);
