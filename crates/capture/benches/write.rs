//! Capture cost: TLPs per second written to pcapng (into memory, so the disk is not
//! measured), and read back + decoded.
//!
//! `cargo bench -p pcielab-capture --bench write -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pcielab_capture::decode::decode;
use pcielab_capture::{CaptureWriter, Format, Reader};
use pcielab_wire::tlp::TlpRepr;
use pcielab_wire::{Bdf, Tag};

const BATCH: u64 = 1024;

fn tlps() -> [(&'static str, Vec<u8>); 2] {
    let rid = Bdf::new(1, 0, 0).unwrap();
    let data = [0x5au8; 256];
    [
        (
            "mrd-3dw",
            TlpRepr::mem_read(rid, Tag::new(7).unwrap(), 0x1000, 64)
                .unwrap()
                .to_vec()
                .unwrap(),
        ),
        (
            "mwr-256B",
            TlpRepr::mem_write(rid, Tag::new(0).unwrap(), 0x1_0000_0000, &data)
                .unwrap()
                .to_vec()
                .unwrap(),
        ),
    ]
}

fn bench_write(c: &mut Criterion) {
    let mut g = c.benchmark_group("capture");
    g.throughput(Throughput::Elements(BATCH));
    for (name, tlp) in tlps() {
        for (fname, format) in [("pcapng", Format::Pcapng), ("pcap", Format::Pcap)] {
            // One writer for the whole run into a sink: the steady-state cost per TLP.
            let mut w = CaptureWriter::new(std::io::sink(), format, "bench").unwrap();
            let i = w.add_interface("rc.0->ep0").unwrap();
            let mut t = 0u64;
            g.bench_function(format!("write/{fname}/{name}"), |b| {
                b.iter(|| {
                    for _ in 0..BATCH {
                        t += 1250;
                        w.write_tlp(i, t, black_box(&tlp)).unwrap();
                    }
                })
            });
        }
        // Read + decode a file of BATCH such TLPs.
        let mut w = CaptureWriter::new(Vec::new(), Format::Pcapng, "bench").unwrap();
        let i = w.add_interface("rc.0->ep0").unwrap();
        for n in 0..BATCH {
            w.write_tlp(i, n * 1250, &tlp).unwrap();
        }
        let file = w.finish().unwrap();
        assert_eq!(Reader::new(&file).unwrap().count() as u64, BATCH);
        g.bench_function(format!("read-decode/pcapng/{name}"), |b| {
            b.iter(|| {
                let mut n = 0;
                for rec in Reader::new(black_box(&file)).unwrap() {
                    let rec = rec.unwrap();
                    black_box(decode(&rec));
                    n += 1;
                }
                assert_eq!(n, BATCH);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_write);
criterion_main!(benches);
