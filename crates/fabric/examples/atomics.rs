//! AtomicOps: two devices below one switch share counters in host memory.
//!
//! 1. **A spinlock from CAS.** Each device takes a lock with a 64-bit CAS (0 → 1),
//!    increments a plain counter with an ordinary DMA read and write, and releases the
//!    lock with a Swap (→ 0); a CAS that finds the lock taken is retried 200 ns later.
//!    It also counts its rounds with a FetchAdd on a second counter. No increment is
//!    lost: both counters end at 2 × ROUNDS.
//! 2. **The same increments without the lock** (read, then write): the two devices'
//!    read-modify-writes interleave and updates are lost.
//!
//! Host software enables the devices as Linux's `pci_enable_atomic_ops_to_root` does.
//!
//! Run: `cargo run -p pcielab-fabric --example atomics`

use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{AtomicOp, DmaId, Endpoint, EpCx, FabricSim, SimConfig};
use pcielab_fabric::topology::Topology;
use pcielab_sim::{SimDuration, SimTime};
use std::sync::{Arc, Mutex};

/// Two Gen3 x4 devices below a Gen3 x8 switch.
const TOPOLOGY: &str = "seed = 3
[[node]]
name = \"rc\"
kind = \"root-complex\"
[[node]]
name = \"sw\"
kind = \"switch\"
ports = 2
[[node]]
name = \"a\"
kind = \"psmem\"
[[node]]
name = \"b\"
kind = \"psmem\"
[[link]]
up = \"rc.0\"
down = \"sw\"
gen = 3
width = 8
[[link]]
up = \"sw.0\"
down = \"a\"
gen = 3
width = 4
[[link]]
up = \"sw.1\"
down = \"b\"
gen = 3
width = 4
";

const ROUNDS: u32 = 50;

/// What a worker waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Acquire,
    Read,
    Write,
    Release,
    Count,
    RacyRead,
    RacyWrite,
    Done,
}

/// Per device: CAS attempts, CAS that found the lock taken, FetchAdd latency sum (ns).
#[derive(Debug, Default, Clone, Copy)]
struct Stats {
    cas: u64,
    busy: u64,
    fetch_add_ns: f64,
    finished_at: Option<SimTime>,
}

#[derive(Debug)]
struct Worker {
    /// Host addresses: the lock, the plain counter, the FetchAdd counter, the counter
    /// incremented without the lock.
    lock: u64,
    plain: u64,
    counter: u64,
    racy: u64,
    step: Step,
    round: u32,
    since: SimTime,
    stats: Arc<Mutex<Stats>>,
}

impl Worker {
    fn acquire(&mut self, cx: &mut EpCx<'_>) {
        self.step = Step::Acquire;
        self.stats.lock().unwrap().cas += 1;
        cx.atomic(
            self.lock,
            AtomicOp::Cas64 {
                compare: 0,
                swap: 1,
            },
        );
    }
    fn next_round(&mut self, cx: &mut EpCx<'_>) {
        self.round += 1;
        if self.round < ROUNDS {
            self.acquire(cx);
        } else if self.round < 2 * ROUNDS {
            self.step = Step::RacyRead;
            cx.dma_read(self.racy, 8);
        } else {
            self.step = Step::Done;
            self.stats.lock().unwrap().finished_at = Some(cx.now());
        }
    }
}

fn le(d: &[u8]) -> u64 {
    u64::from_le_bytes(d.try_into().expect("8 bytes"))
}

impl Endpoint for Worker {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        self.acquire(cx);
    }
    fn timer(&mut self, _token: u64, cx: &mut EpCx<'_>) {
        self.acquire(cx);
    }
    fn dma_done(&mut self, _id: DmaId, ok: bool, data: &[u8], cx: &mut EpCx<'_>) {
        assert!(ok, "{:?} failed", self.step);
        match self.step {
            Step::Acquire if le(data) == 0 => {
                self.step = Step::Read;
                cx.dma_read(self.plain, 8);
            }
            Step::Acquire => {
                self.stats.lock().unwrap().busy += 1;
                cx.timer(SimDuration::from_ns(200), 0);
            }
            Step::Read => {
                self.step = Step::Write;
                cx.dma_write(self.plain, (le(data) + 1).to_le_bytes().to_vec());
            }
            Step::Write => {
                // Posted, so it reaches memory before the Swap behind it.
                self.step = Step::Release;
                cx.atomic(self.lock, AtomicOp::Swap64(0));
            }
            Step::Release => {
                self.step = Step::Count;
                self.since = cx.now();
                cx.atomic(self.counter, AtomicOp::FetchAdd64(1));
            }
            Step::Count => {
                self.stats.lock().unwrap().fetch_add_ns +=
                    (cx.now() - self.since).as_ps() as f64 / 1000.0;
                self.next_round(cx);
            }
            Step::RacyRead => {
                self.step = Step::RacyWrite;
                cx.dma_write(self.racy, (le(data) + 1).to_le_bytes().to_vec());
            }
            Step::RacyWrite => self.next_round(cx),
            Step::Done => {}
        }
    }
}

fn main() {
    let reg = KindRegistry::builtin();
    let topo = Topology::parse(TOPOLOGY, "atomics.toml", &reg).expect("topology");
    let mut sim = FabricSim::new(&topo, &reg, SimConfig::default()).expect("simulation");
    let base = sim.alloc_dma(4096);
    let (lock, plain, counter, racy) = (base, base + 64, base + 128, base + 192);
    let mut stats = Vec::new();
    for name in ["a", "b"] {
        sim.enable_atomic_ops_to_root(name, &[8])
            .expect("AtomicOps to the root");
        let s = Arc::new(Mutex::new(Stats::default()));
        stats.push(s.clone());
        let w = Worker {
            lock,
            plain,
            counter,
            racy,
            step: Step::Acquire,
            round: 0,
            since: SimTime::ZERO,
            stats: s,
        };
        sim.attach(name, Box::new(w)).expect("attach");
    }
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
    let read = |a| {
        let mut b = [0u8; 8];
        sim.host_read(a, &mut b);
        u64::from_le_bytes(b)
    };
    let (p, c, r) = (read(plain), read(counter), read(racy));
    println!("two devices, {ROUNDS} rounds each with the lock and {ROUNDS} without");
    for (name, s) in ["a", "b"].iter().zip(&stats) {
        let s = *s.lock().unwrap();
        println!(
            "  {name}: {} CAS ({} found the lock taken), FetchAdd round trip {:.1} ns, done at {:.2} us",
            s.cas,
            s.busy,
            s.fetch_add_ns / ROUNDS as f64,
            s.finished_at.map_or(0.0, |t| t.as_ps() as f64 / 1e6)
        );
    }
    println!(
        "counter under the CAS lock: {p} (want {}), FetchAdd counter: {c}, without the lock: {r} ({} updates lost)",
        2 * ROUNDS,
        2 * ROUNDS as u64 - r
    );
    assert_eq!(p, 2 * ROUNDS as u64, "the lock lost an update");
    assert_eq!(c, 2 * ROUNDS as u64, "FetchAdd lost an update");
    assert!(r < 2 * ROUNDS as u64, "the racy increments lost nothing");
}
