//! DLLP parse/emit and LCRC throughput.
//!
//! `cargo bench -p pcielab-wire --bench dllp -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pcielab_wire::dll::DllFrameRepr;
use pcielab_wire::dllp::{DllpRepr, FcClass, FcDllp, FcKind, FcScale, Packet};
use pcielab_wire::SeqNum;

fn dllps() -> [(&'static str, DllpRepr); 2] {
    [
        (
            "ack",
            DllpRepr::Ack {
                seq: SeqNum::new(0x5a5).unwrap(),
            },
        ),
        (
            "updatefc",
            DllpRepr::Fc(FcDllp {
                kind: FcKind::UpdateFc,
                class: FcClass::Np,
                vc: 0,
                hdr_scale: FcScale::X1,
                hdr_fc: 0x42,
                data_scale: FcScale::X1,
                data_fc: 0x123,
            }),
        ),
    ]
}

fn bench_dllp(c: &mut Criterion) {
    let mut g = c.benchmark_group("dllp");
    g.throughput(Throughput::Elements(1));
    g.bench_function("crc16/body", |b| {
        b.iter(|| {
            black_box(pcielab_wire::dllp::crc_body(black_box([
                0x80, 0x41, 0x09, 0x23,
            ])))
        })
    });
    for (name, repr) in dllps() {
        let bytes = repr.to_bytes().unwrap();
        g.bench_function(format!("parse_check/{name}"), |b| {
            b.iter(|| {
                let p = Packet::new_checked(black_box(&bytes[..])).unwrap();
                black_box(DllpRepr::parse(&p).unwrap())
            })
        });
        let mut out = [0u8; 6];
        g.bench_function(format!("emit/{name}"), |b| {
            b.iter(|| {
                black_box(&repr).emit(black_box(&mut out[..])).unwrap();
                black_box(out)
            })
        });
    }
    g.finish();
}

fn bench_lcrc(c: &mut Criterion) {
    let mut g = c.benchmark_group("lcrc");
    let tlp: Vec<u8> = (0..256u32).map(|i| (i * 31 + 7) as u8).collect();
    let repr = DllFrameRepr {
        seq: SeqNum::new(17).unwrap(),
        tlp: &tlp,
    };
    let mut frame = vec![0u8; repr.buffer_len()];
    repr.emit(&mut frame).unwrap();
    g.throughput(Throughput::Bytes(tlp.len() as u64));
    g.bench_function("crc32/256B", |b| {
        b.iter(|| black_box(pcielab_wire::crc::crc32(black_box(&tlp))))
    });
    g.bench_function("dll_frame_parse/256B", |b| {
        b.iter(|| black_box(DllFrameRepr::from_bytes(black_box(&frame)).unwrap()))
    });
    g.bench_function("dll_frame_emit/256B", |b| {
        b.iter(|| black_box(&repr).emit(black_box(&mut frame)).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench_dllp, bench_lcrc);
criterion_main!(benches);
