//! Integration tests of the kernel: ordering against a sorted-list oracle, stop,
//! step_until, pacing, determinism.

use pcielab_sim::{Clock, Context, EventQueue, SimBuilder, SimDuration, SimTime, World};
use proptest::prelude::*;

#[derive(Debug, Clone, Copy)]
enum Op {
    Heap(u64),
    Fifo(u8, u64),
    Cancel(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u64..50).prop_map(Op::Heap),
        (0u8..3, 0u64..20).prop_map(|(f, d)| Op::Fifo(f, d)),
        (0usize..64).prop_map(Op::Cancel),
    ]
}

proptest! {
    /// The queue's output equals a stable sort by (time, insertion index) of the
    /// non-cancelled events (the oracle is a plain Vec sort).
    #[test]
    fn queue_matches_sorted_oracle(ops in proptest::collection::vec(op(), 0..200)) {
        let mut q = EventQueue::new();
        let fifos = [q.new_fifo(), q.new_fifo(), q.new_fifo()];
        let mut fifo_time = [0u64; 3];
        let mut oracle: Vec<(u64, usize, bool)> = Vec::new(); // (time, id, cancelled)
        let mut keys = Vec::new();
        for o in ops {
            let id = oracle.len();
            match o {
                Op::Heap(t) => {
                    keys.push((q.schedule(SimTime::from_ps(t), id), id));
                    oracle.push((t, id, false));
                }
                Op::Fifo(f, d) => {
                    fifo_time[f as usize] += d;
                    q.push_fifo(fifos[f as usize], SimTime::from_ps(fifo_time[f as usize]), id);
                    oracle.push((fifo_time[f as usize], id, false));
                }
                Op::Cancel(i) => {
                    if let Some(&(k, kid)) = keys.get(i) {
                        let was = !oracle[kid].2;
                        prop_assert_eq!(q.cancel(k), was);
                        oracle[kid].2 = true;
                    }
                }
            }
        }
        let mut want: Vec<_> = oracle.iter().filter(|e| !e.2).map(|e| (e.0, e.1)).collect();
        want.sort();
        prop_assert_eq!(q.len(), want.len());
        let got: Vec<_> = std::iter::from_fn(|| q.pop()).map(|(t, id)| (t.as_ps(), id)).collect();
        prop_assert_eq!(got, want);
    }
}

#[derive(Debug, Clone, Copy)]
enum Step {
    /// Schedule after a delay from the current time.
    Heap(u64),
    /// Push on a FIFO stream, a delay after its last event or the current time.
    Fifo(u8, u64),
    Cancel(usize),
    Pop,
}

/// Delays around the queue's internal thresholds: a few picoseconds, either side of
/// 4 µs, and milliseconds (timeouts).
fn delay() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..50,
        3_999_900u64..4_000_100,
        1_000_000_000u64..1_000_000_100,
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        delay().prop_map(Step::Heap),
        (0u8..3, delay()).prop_map(|(f, d)| Step::Fifo(f, d)),
        (0usize..64).prop_map(Step::Cancel),
        Just(Step::Pop),
        Just(Step::Pop),
    ]
}

proptest! {
    /// Pops interleaved with schedules, FIFO pushes and cancellations, at delays from
    /// picoseconds to milliseconds: every pop returns the earliest pending event by
    /// (time, insertion), as a sorted set of the pending events says.
    #[test]
    fn interleaved_pops_match_the_pending_set(steps in proptest::collection::vec(step(), 0..300)) {
        let mut q = EventQueue::new();
        let fifos = [q.new_fifo(), q.new_fifo(), q.new_fifo()];
        let mut fifo_time = [0u64; 3];
        let mut pending = std::collections::BTreeSet::new(); // (time, id)
        let mut keys = Vec::new();
        let mut now = 0u64;
        for (id, s) in steps.into_iter().enumerate() {
            match s {
                Step::Heap(d) => {
                    keys.push((q.schedule(SimTime::from_ps(now + d), id), now + d, id));
                    pending.insert((now + d, id));
                }
                Step::Fifo(f, d) => {
                    let t = fifo_time[f as usize].max(now) + d;
                    fifo_time[f as usize] = t;
                    q.push_fifo(fifos[f as usize], SimTime::from_ps(t), id);
                    pending.insert((t, id));
                }
                Step::Cancel(i) => {
                    if let Some(&(k, t, kid)) = keys.get(i) {
                        prop_assert_eq!(q.cancel(k), pending.remove(&(t, kid)));
                    }
                }
                Step::Pop => {
                    let want = pending.pop_first();
                    let got = q.pop().map(|(t, id)| (t.as_ps(), id));
                    prop_assert_eq!(got, want);
                    if let Some((t, _)) = got {
                        now = t;
                    }
                }
            }
            prop_assert_eq!(q.len(), pending.len());
        }
        let rest: Vec<_> = std::iter::from_fn(|| q.pop()).map(|(t, id)| (t.as_ps(), id)).collect();
        prop_assert_eq!(rest, pending.into_iter().collect::<Vec<_>>());
    }
}

#[derive(Debug, Default)]
struct Log {
    seen: Vec<(u64, u32)>,
    stop_at: Option<u32>,
}

impl World for Log {
    type Event = u32;
    fn handle(&mut self, ev: u32, cx: &mut Context<'_, u32>) {
        self.seen.push((cx.now().as_ps(), ev));
        if Some(ev) == self.stop_at {
            cx.stop();
        }
        if ev < 3 {
            let d = cx.rng().below(100);
            cx.schedule_in(SimDuration::from_ps(d), ev + 10);
        }
    }
}

#[test]
fn step_until_and_stop() {
    let mut sim = SimBuilder::new(Log {
        stop_at: Some(2),
        ..Log::default()
    })
    .build();
    for i in 0..5u32 {
        sim.schedule_at(SimTime::from_ps(1000 * i as u64), i);
    }
    assert_eq!(sim.step_until(SimTime::from_ps(999)), 2); // events 0 and 10 (d < 100)
    assert_eq!(sim.now(), SimTime::from_ps(999));
    let n = sim.run(); // stops after event 2
    assert_eq!(sim.world().seen.last().unwrap().1, 2);
    assert_eq!(sim.now(), SimTime::from_ps(2000));
    assert!(n >= 2);
    sim.run();
    assert_eq!(sim.pending(), 0);
    // Time never goes backwards: scheduling in the past delivers now.
    let now = sim.now();
    sim.schedule_at(SimTime::ZERO, 7u32);
    sim.step();
    assert_eq!(sim.world().seen.last().unwrap(), &(now.as_ps(), 7));
}

#[test]
fn same_seed_same_run_other_seed_differs() {
    let run = |seed| {
        let mut sim = SimBuilder::new(Log::default()).seed(seed).build();
        for i in 0..3u32 {
            sim.schedule_at(SimTime::ZERO, i);
        }
        sim.run();
        sim.world().seen.clone()
    };
    assert_eq!(run(5), run(5));
    assert_ne!(run(5), run(6));
}

#[test]
fn paced_clock_does_not_run_ahead_of_wall_time() {
    // 20 ms of simulated time at ratio 1.0 must take at least 20 ms of wall time.
    let mut sim = SimBuilder::new(Log::default())
        .clock(Clock::Paced { ratio: 1.0 })
        .build();
    sim.schedule_at(SimTime::from_ps(20_000_000_000), 9u32);
    let t0 = std::time::Instant::now();
    sim.process(|_, _| ()); // no-op input
    sim.schedule_at(SimTime::ZERO, 8u32);
    sim.run();
    assert!(t0.elapsed() >= std::time::Duration::from_millis(20));
}
