//! Speed and memory of the simulated SR-IOV DMA engine (seed 003) with many VFs
//! streaming at once (one thread): Gen3 x8, MPS 256, MRRS 4096, every VF moving 64 KiB transfers
//! one after the other (set-up, doorbell, interrupt) in one direction. Elements =
//! bytes moved. After the criterion measurements, longer runs print simulated time /
//! wall time with 64 VFs streaming (target: at least 1/20, a ratio ≥ 0.05), and the
//! resident memory each VF adds (a process-wide figure from /proc: a new simulation
//! with 8, 16, 32 and 64 VFs is built and kept while the next is measured).
//! Building the simulation (topology, enumeration, the drivers' set-up) is not timed.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use pcielab_fabric::drivers::dma_engine::{run, Dir, DmaDriverConfig, DmaFunction};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{FabricSim, SimConfig};
use pcielab_fabric::topology::Topology;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call goes to the system allocator unchanged; only a counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: the caller's layout, passed on.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            LIVE.fetch_add(l.size(), Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from this allocator, that is from `System`, with `l`.
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`, and the caller's new size.
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            LIVE.fetch_add(new, Ordering::Relaxed);
            LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const SIZE: u64 = 64 * 1024;

fn build(vfs: u16) -> (FabricSim, Vec<DmaFunction>) {
    build_with(vfs, 1)
}

fn build_with(vfs: u16, burst: u8) -> (FabricSim, Vec<DmaFunction>) {
    let text = format!(
        "[[node]]\nname = \"rc\"\nkind = \"root-complex\"\n\
         [[node]]\nname = \"dma\"\nkind = \"dma-engine\"\nvfs = {vfs}\n\
         [[link]]\nup = \"rc.0\"\ndown = \"dma\"\ngen = 3\nwidth = 8\n"
    );
    let reg = KindRegistry::builtin();
    let t = Topology::parse(&text, "dma-bench.toml", &reg).unwrap();
    let cfg = SimConfig {
        // The paper's settings (seed 003 §IV.A, §V): MPS 256, read requests of 4 KiB.
        mps: 256,
        mrrs: 4096,
        burst,
        ..SimConfig::default()
    };
    let mut sim = FabricSim::new(&t, &reg, cfg).unwrap();
    let c = DmaDriverConfig {
        check: false,
        ..DmaDriverConfig::default()
    };
    let fns = (1..=vfs)
        .map(|i| DmaFunction::open(&mut sim, "dma", i, c.clone()).unwrap())
        .collect();
    (sim, fns)
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("dma_engine_16vf_64k");
    let count = 4u64;
    g.throughput(Throughput::Bytes(16 * count * SIZE));
    for dir in [Dir::D2h, Dir::H2d] {
        g.bench_function(dir.name(), |b| {
            b.iter_batched(
                || build(16),
                |(mut sim, mut fns)| run(&mut sim, &mut fns, dir, SIZE, count).unwrap(),
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
    real_time();
    memory();
}

/// 64 VFs streaming: simulated time over wall time.
fn real_time() {
    let count = 16u64;
    for (dir, burst) in [(Dir::D2h, 1), (Dir::H2d, 1), (Dir::D2h, 16), (Dir::H2d, 16)] {
        let (mut sim, mut fns) = build_with(64, burst);
        let (e0, s0) = (sim.events(), sim.now());
        let t = Instant::now();
        let r = run(&mut sim, &mut fns, dir, SIZE, count).unwrap();
        let wall = t.elapsed().as_secs_f64();
        let simulated = (sim.now().as_ps() - s0.as_ps()) as f64 * 1e-12;
        let bytes: u64 = r.iter().map(|x| x.bytes).sum();
        println!(
            "dma-engine, 64 VFs streaming {} ({count} × 64 KiB each, {:.1} MiB in all), {}: \
             {:.2} Gb/s together, {:.1} µs simulated in {:.1} ms wall: {:.3} × real time \
             (target ≥ 0.05); {:.1} kernel events per KiB",
            dir.name(),
            bytes as f64 / (1 << 20) as f64,
            if burst == 1 {
                "exact".to_string()
            } else {
                format!("burst {burst}")
            },
            bytes as f64 * 8.0 / simulated / 1e9,
            simulated * 1e6,
            wall * 1e3,
            simulated / wall,
            (sim.events() - e0) as f64 / (bytes as f64 / 1024.0),
        );
    }
}

/// Heap bytes a simulation holds with `vfs` VFs after each streamed two D2H
/// transfers (its host memory holds their 64 KiB buffers), and what each VF adds.
fn memory() {
    let mut last: Option<(u16, usize)> = None;
    for vfs in [8u16, 16, 32, 64] {
        let before = LIVE.load(Ordering::Relaxed);
        let (mut sim, mut fns) = build(vfs);
        let built = LIVE.load(Ordering::Relaxed).saturating_sub(before);
        run(&mut sim, &mut fns, Dir::D2h, SIZE, 2).unwrap();
        let held = LIVE.load(Ordering::Relaxed).saturating_sub(before);
        let step = last.map(|(v, m)| (held as f64 - m as f64) / (vfs - v) as f64 / 1024.0);
        println!(
            "dma-engine memory, {vfs} VFs: {:.1} KiB on the heap once built, {:.1} KiB after \
             streaming, {:.1} KiB per VF; each VF more: {} (64 KiB of it is its buffer's data \
             in host memory)",
            built as f64 / 1024.0,
            held as f64 / 1024.0,
            held as f64 / 1024.0 / vfs as f64,
            step.map_or("-".to_string(), |x| format!("{x:.1} KiB")),
        );
        last = Some((vfs, held));
        drop((sim, fns));
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = bench
}
criterion_main!(benches);
