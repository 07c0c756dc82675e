//! TLP codec micro-benchmarks: parse + validate and emit of common TLPs.
//!
//! Run: `cargo bench -p pcielab-wire --bench tlp`. Throughput is reported per TLP
//! (elements/s) or per byte where a payload dominates.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use pcielab_wire::tlp::{TlpPacket, TlpRepr};
use pcielab_wire::{Bdf, CplStatus, Tag};

fn cases() -> Vec<(&'static str, Vec<u8>)> {
    let rid = Bdf::from_raw(0x0100);
    let tag = Tag::new(5).unwrap();
    let p64 = vec![0xa5u8; 64];
    let p256 = vec![0x5au8; 256];
    vec![
        (
            "MRd 3DW",
            TlpRepr::mem_read(rid, tag, 0x1000, 32)
                .unwrap()
                .to_vec()
                .unwrap(),
        ),
        (
            "MRd 4DW",
            TlpRepr::mem_read(rid, tag, 0x1_0000_1000, 32)
                .unwrap()
                .to_vec()
                .unwrap(),
        ),
        (
            "MWr 64B",
            TlpRepr::mem_write(rid, tag, 0x1_0000_1000, &p64)
                .unwrap()
                .to_vec()
                .unwrap(),
        ),
        (
            "MWr 256B",
            TlpRepr::mem_write(rid, tag, 0x1_0000_1000, &p256)
                .unwrap()
                .to_vec()
                .unwrap(),
        ),
        (
            "CplD 256B",
            TlpRepr::completion(Bdf::from_raw(0), rid, tag, CplStatus::Sc, 256, 0, &p256)
                .unwrap()
                .to_vec()
                .unwrap(),
        ),
    ]
}

fn parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("tlp/parse+validate");
    g.throughput(Throughput::Elements(1));
    for (name, bytes) in cases() {
        g.bench_function(name, |b| {
            b.iter(|| {
                let p = TlpPacket::new_checked(black_box(&bytes[..])).unwrap();
                black_box(TlpRepr::parse(&p).unwrap())
            })
        });
    }
    g.finish();
    let mut g = c.benchmark_group("tlp/view-only");
    g.throughput(Throughput::Elements(1));
    for (name, bytes) in cases() {
        g.bench_function(name, |b| {
            b.iter(|| {
                let p = TlpPacket::new_checked(black_box(&bytes[..])).unwrap();
                black_box((
                    p.kind(),
                    p.requester_id(),
                    p.tag(),
                    p.address(),
                    p.length_dw(),
                ))
            })
        });
    }
    g.finish();
}

fn emit(c: &mut Criterion) {
    let mut g = c.benchmark_group("tlp/emit");
    g.throughput(Throughput::Elements(1));
    for (name, bytes) in cases() {
        let repr = TlpRepr::parse_bytes(&bytes).unwrap();
        let mut buf = vec![0u8; bytes.len()];
        g.bench_function(name, |b| {
            b.iter(|| black_box(repr).emit(black_box(&mut buf)).unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, parse, emit);
criterion_main!(benches);
