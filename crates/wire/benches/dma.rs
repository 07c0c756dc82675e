//! DMA helpers: splitting a 64 KiB read into MRds, generating the completions of every
//! MRd, and reassembling them into a buffer.
//!
//! Run with `cargo bench -p pcielab-wire --bench dma`.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use pcielab_wire::dma::{
    completions, split_read, Chunk, CplChunk, CplPolicy, Reassembler, SplitPolicy,
};
use pcielab_wire::{Bdf, Tag};

const LEN: u64 = 64 * 1024;
/// A misaligned start, so the first and last requests and completions are partial.
const ADDR: u64 = 0x1_2345_6004;
const ME: Bdf = Bdf::from_raw(0x0100);
const HOST: Bdf = Bdf::from_raw(0x0000);

fn memory() -> Vec<u8> {
    (0..LEN + 8192).map(|i| (i * 31 + 7) as u8).collect()
}

fn all_completions(mrrs: u32, rcb: u32, mps: u32, policy: CplPolicy) -> Vec<(Chunk, CplChunk)> {
    let mut v = Vec::new();
    for c in split_read(ADDR, LEN, mrrs, SplitPolicy::Aligned).unwrap() {
        for cpl in completions(c.addr, c.len, rcb, mps, policy).unwrap() {
            v.push((c, cpl));
        }
    }
    v
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("dma");
    g.throughput(Throughput::Bytes(LEN));

    g.bench_function("split_read_64KiB_mrrs512", |b| {
        b.iter(|| {
            let mut dws = 0u32;
            for ch in
                split_read(black_box(ADDR), black_box(LEN), 512, SplitPolicy::Aligned).unwrap()
            {
                dws += ch.shape.length_dw as u32 + ch.shape.first_be.bits() as u32;
            }
            dws
        })
    });

    g.bench_function("completions_64KiB_mrrs512_mps256_rcb64", |b| {
        b.iter(|| {
            let mut acc = 0u32;
            for ch in
                split_read(black_box(ADDR), black_box(LEN), 512, SplitPolicy::Aligned).unwrap()
            {
                for cpl in completions(ch.addr, ch.len, 64, 256, CplPolicy::Maximal).unwrap() {
                    acc = acc.wrapping_add(cpl.byte_count as u32 ^ cpl.lower_address as u32);
                }
            }
            acc
        })
    });

    let mem = memory();
    let base = ADDR & !0xfff; // memory[0] is at this address
    for (name, policy, mps) in [
        ("reassemble_64KiB_mps256", CplPolicy::Maximal, 256),
        ("reassemble_64KiB_rcb64_chunks", CplPolicy::RcbChunks, 256),
    ] {
        let cpls = all_completions(512, 64, mps, policy);
        let mut tags = Vec::new();
        let chunks: Vec<Chunk> = split_read(ADDR, LEN, 512, SplitPolicy::Aligned)
            .unwrap()
            .collect();
        // Pre-build the payload of every completion, as a receive ring would hold them.
        let infos: Vec<(usize, std::ops::Range<usize>, Tag, CplChunk)> = cpls
            .iter()
            .map(|(req, cpl)| {
                let i = chunks.iter().position(|c| c.addr == req.addr).unwrap();
                let tag = Tag::new(i as u16).unwrap();
                let r = cpl.payload_range();
                let start = ((req.addr & !3) - base) as usize;
                (i, start + r.start..start + r.end, tag, *cpl)
            })
            .collect();
        for (i, _) in chunks.iter().enumerate() {
            tags.push(Tag::new(i as u16).unwrap());
        }
        eprintln!("{name}: {} MRds, {} completions", chunks.len(), infos.len());
        let mut rx = Reassembler::new(ME, 1024).unwrap();
        let mut dest = vec![0u8; LEN as usize];
        let run = |rx: &mut Reassembler, dest: &mut [u8]| {
            for (ch, &tag) in chunks.iter().zip(&tags) {
                rx.issue_chunk(tag, ch, None).unwrap();
            }
            let mut done = 0;
            for (_, range, tag, cpl) in &infos {
                let info = cpl.info(ME, HOST, *tag, &mem[range.clone()]);
                if rx.accept(black_box(&info), dest).unwrap().is_complete() {
                    done += 1;
                }
            }
            assert_eq!(done, chunks.len());
        };
        // One checked pass before timing.
        run(&mut rx, &mut dest);
        assert_eq!(&dest[..], &mem[(ADDR - base) as usize..][..LEN as usize]);
        g.bench_function(name, |b| b.iter(|| run(&mut rx, &mut dest)));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
