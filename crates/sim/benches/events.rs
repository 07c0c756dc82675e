//! Events delivered per second by the kernel (one thread).
//!
//! * `hold_1k`: the classic hold model — 1024 pending heap events; each delivered event
//!   schedules one more at a pseudo-random later time.
//! * `fifo`: 64 FIFO streams (fixed-latency links) each re-arming itself.
//! * `cancel`: every event schedules two timers and cancels one (the replay-timer pattern).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pcielab_sim::{Context, FifoId, SimBuilder, SimDuration, SimTime, World};

const N: u64 = 100_000;

#[derive(Debug)]
enum Ev {
    Hold(u32),
    Fifo(u32),
    Timer,
}

#[derive(Debug)]
struct W {
    fifos: Vec<FifoId>,
    left: u64,
    cancel: bool,
}

impl World for W {
    type Event = Ev;
    fn handle(&mut self, ev: Ev, cx: &mut Context<'_, Ev>) {
        if self.left == 0 {
            return;
        }
        self.left -= 1;
        match ev {
            Ev::Hold(i) => {
                let d = 1 + cx.rng().below(1_000_000);
                if self.cancel {
                    let k = cx.schedule_in(SimDuration::from_ps(d + 7), Ev::Timer);
                    cx.cancel(k);
                }
                cx.schedule_in(SimDuration::from_ps(d), Ev::Hold(i));
            }
            Ev::Fifo(i) => {
                let f = self.fifos[i as usize];
                let at = cx.now() + SimDuration::from_ps(1000 + i as u64);
                cx.push_fifo(f, at, Ev::Fifo(i));
            }
            Ev::Timer => {}
        }
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("events");
    g.throughput(Throughput::Elements(N));
    for (name, cancel) in [("hold_1k", false), ("hold_1k_cancel", true)] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let w = W {
                    fifos: vec![],
                    left: N,
                    cancel,
                };
                let mut sim = SimBuilder::new(w).seed(1).capacity(4096).build();
                for i in 0..1024 {
                    sim.schedule_at(SimTime::from_ps(i), Ev::Hold(i as u32));
                }
                sim.run()
            })
        });
    }
    g.bench_function("fifo_64", |b| {
        b.iter(|| {
            let w = W {
                fifos: vec![],
                left: N,
                cancel: false,
            };
            let mut sim = SimBuilder::new(w).seed(1).build();
            let fifos: Vec<_> = (0..64).map(|_| sim.new_fifo()).collect();
            for (i, f) in fifos.iter().enumerate() {
                sim.process(|_, cx| {
                    cx.push_fifo(*f, SimTime::from_ps(i as u64), Ev::Fifo(i as u32))
                });
            }
            sim.world_mut().fifos = fifos;
            sim.run()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
