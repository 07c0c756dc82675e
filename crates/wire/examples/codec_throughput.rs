//! A whole-codec throughput command: parses, checks and emits a mix of TLPs in a loop and
//! prints operations per second. Run it under `valgrind --tool=callgrind` to get
//! instruction counts that do not depend on machine load:
//!
//! ```sh
//! cargo run --release -p pcielab-wire --example codec_throughput -- 2000000
//! ```

use pcielab_wire::tlp::{TlpPacket, TlpRepr};
use pcielab_wire::{Bdf, CplStatus, Tag};
use std::hint::black_box;
use std::time::Instant;

fn main() {
    let iters: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2_000_000);
    let rid = Bdf::from_raw(0x0100);
    let tag = Tag::new(5).unwrap();
    let p256 = vec![0x5au8; 256];
    let cases: Vec<(&str, Vec<u8>)> = vec![
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
    ];
    println!(
        "{:<12} {:>14} {:>14} {:>14}",
        "TLP", "view Mops/s", "parse Mops/s", "emit Mops/s"
    );
    for (name, bytes) in &cases {
        let t = Instant::now();
        for _ in 0..iters {
            let p = TlpPacket::new_checked(black_box(&bytes[..])).unwrap();
            black_box((
                p.kind(),
                p.requester_id(),
                p.tag(),
                p.address(),
                p.length_dw(),
            ));
        }
        let view = iters as f64 / t.elapsed().as_secs_f64() / 1e6;
        let t = Instant::now();
        for _ in 0..iters {
            black_box(TlpRepr::parse_bytes(black_box(&bytes[..])).unwrap());
        }
        let parse = iters as f64 / t.elapsed().as_secs_f64() / 1e6;
        let repr = TlpRepr::parse_bytes(bytes).unwrap();
        let mut out = vec![0u8; bytes.len()];
        let t = Instant::now();
        for _ in 0..iters {
            black_box(black_box(&repr).emit(black_box(&mut out)).unwrap());
        }
        let emit = iters as f64 / t.elapsed().as_secs_f64() / 1e6;
        println!("{name:<12} {view:>14.1} {parse:>14.1} {emit:>14.1}");
    }
}
