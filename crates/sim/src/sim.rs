//! The simulation: a world of models, its event queue, the clock and the RNG.

use crate::queue::{EventKey, EventQueue, FifoId};
use crate::rng::Rng;
use crate::time::{SimDuration, SimTime};
use std::time::{Duration, Instant};

/// A set of models that handles the events of one simulation.
///
/// The world is the wiring: it owns the model structs and forwards each event to the
/// model input (a method taking `(&mut self, msg, cx)`) that it addresses. Models never
/// hold references to each other; they name their peers by ids that the world resolves.
pub trait World {
    /// The event (message) type. Keep it small: it is stored once per pending event.
    /// The scheduling methods take anything that converts into it, so a world may
    /// store a compact encoding while its models build a readable enum.
    type Event;
    /// Handles one event delivered at `cx.now()`.
    fn handle(&mut self, event: Self::Event, cx: &mut Context<'_, Self::Event>);
}

/// What a model sees while it handles an event: the time, the scheduler and the RNG.
#[derive(Debug)]
pub struct Context<'a, E> {
    now: SimTime,
    queue: &'a mut EventQueue<E>,
    rng: &'a mut Rng,
    stop: &'a mut bool,
}

impl<E> Context<'_, E> {
    /// The current simulated time.
    pub fn now(&self) -> SimTime {
        self.now
    }
    /// Schedules `event` at absolute time `at` (an `at` in the past is delivered now,
    /// after the events already due now).
    pub fn schedule_at<T>(&mut self, at: SimTime, event: T) -> EventKey
    where
        E: From<T>,
    {
        self.queue.schedule(at.max(self.now), E::from(event))
    }
    /// Schedules a background event at `at` (delivered in order like any other, but
    /// not counted by [`Simulation::pending_foreground`]: periodic maintenance that
    /// re-arms itself forever, such as a link's flow-control refresh).
    pub fn schedule_background_at<T>(&mut self, at: SimTime, event: T) -> EventKey
    where
        E: From<T>,
    {
        self.queue
            .schedule_background(at.max(self.now), E::from(event))
    }
    /// Schedules `event` after `delay`.
    pub fn schedule_in<T>(&mut self, delay: SimDuration, event: T) -> EventKey
    where
        E: From<T>,
    {
        self.queue.schedule(self.now + delay, E::from(event))
    }
    /// Schedules `event` at `at` on a FIFO stream (see [`EventQueue::push_fifo`]). An
    /// event due now takes the zero-delay fast path ([`EventQueue::push_now`]).
    #[inline(always)]
    pub fn push_fifo<T>(&mut self, fifo: FifoId, at: SimTime, event: T)
    where
        E: From<T>,
    {
        let event = E::from(event);
        if at <= self.now {
            self.queue.push_now(self.now, event)
        } else {
            self.queue.push_fifo(fifo, at, event)
        }
    }
    /// [`push_fifo`](Self::push_fifo) for a background event (see
    /// [`EventQueue::push_fifo_background`]): periodic maintenance whose consequences
    /// (a DLLP of a periodic refresh on its way, say) are no work a run waits for.
    pub fn push_fifo_background<T>(&mut self, fifo: FifoId, at: SimTime, event: T)
    where
        E: From<T>,
    {
        let event = E::from(event);
        if at <= self.now {
            self.queue.schedule_background(self.now, event);
        } else {
            self.queue.push_fifo_background(fifo, at, event)
        }
    }
    /// Schedules `event` now, after the events already due now (like
    /// `schedule_in(SimDuration::ZERO, event)`, but cannot be cancelled and usually
    /// costs no heap work: see [`EventQueue::push_now`]).
    #[inline]
    pub fn schedule_now<T>(&mut self, event: T)
    where
        E: From<T>,
    {
        self.queue.push_now(self.now, E::from(event))
    }
    /// Delivers `event` right after the current one, at the current time, before every
    /// other pending event: as if it had been scheduled together with the current event
    /// (see [`EventQueue::push_next`]).
    #[inline]
    pub fn then<T>(&mut self, event: T)
    where
        E: From<T>,
    {
        self.queue.push_next(self.now, E::from(event))
    }
    /// Takes the sequence number an event scheduled now would get, without scheduling
    /// it (see [`EventQueue::reserve_seq`]): the event can be scheduled later in the
    /// same place with [`schedule_reserved`](Self::schedule_reserved), or its work
    /// done inline when [`nothing_before`](Self::nothing_before) allows.
    #[inline]
    pub fn reserve_seq(&mut self) -> u64 {
        self.queue.reserve_seq()
    }
    /// True if no pending event comes before `(at, seq)`.
    #[inline]
    pub fn nothing_before(&self, at: SimTime, seq: u64) -> bool {
        self.queue.nothing_before(at, seq)
    }
    /// Schedules `event` at `at` with a sequence number from
    /// [`reserve_seq`](Self::reserve_seq); `(at, seq)` must come after the current
    /// event. Cannot be cancelled.
    pub fn schedule_reserved<T>(&mut self, at: SimTime, seq: u64, event: T)
    where
        E: From<T>,
    {
        self.queue.schedule_reserved(at, seq, E::from(event))
    }
    /// Cancels a pending event; false if it was already delivered or cancelled.
    pub fn cancel(&mut self, key: EventKey) -> bool {
        self.queue.cancel(key)
    }
    /// True if the event of `key` is pending.
    pub fn is_pending(&self, key: EventKey) -> bool {
        self.queue.is_pending(key)
    }
    /// The simulation's seeded RNG.
    pub fn rng(&mut self) -> &mut Rng {
        self.rng
    }
    /// Asks [`Simulation::run`] to return after this event.
    pub fn stop(&mut self) {
        *self.stop = true;
    }
}

/// How simulated time relates to wall time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Clock {
    /// Deliver events as fast as the CPU allows.
    AsFastAsPossible,
    /// Never run ahead of wall time: simulated time advances at most `ratio` times as
    /// fast as wall time (1.0 = real time), for hybrid runs with real peers.
    Paced {
        /// Simulated seconds per wall second.
        ratio: f64,
    },
}

/// Builds a [`Simulation`].
///
/// ```
/// use pcielab_sim::{Context, SimBuilder, SimDuration, SimTime, World};
///
/// /// A model: counts ticks and re-arms itself every 10 ns, 5 times.
/// #[derive(Debug, Default)]
/// struct Ticker { ticks: u32 }
/// impl Ticker {
///     fn tick(&mut self, cx: &mut Context<'_, Ev>) {
///         self.ticks += 1;
///         if self.ticks < 5 { cx.schedule_in(SimDuration::from_ns(10), Ev::Tick); }
///     }
/// }
/// #[derive(Debug)]
/// enum Ev { Tick }
/// /// The wiring.
/// #[derive(Debug, Default)]
/// struct Bench { ticker: Ticker }
/// impl World for Bench {
///     type Event = Ev;
///     fn handle(&mut self, ev: Ev, cx: &mut Context<'_, Ev>) {
///         match ev { Ev::Tick => self.ticker.tick(cx) }
///     }
/// }
///
/// let mut sim = SimBuilder::new(Bench::default()).seed(1).build();
/// sim.schedule_at(SimTime::ZERO, Ev::Tick);
/// sim.run();
/// assert_eq!(sim.world().ticker.ticks, 5);
/// assert_eq!(sim.now(), SimTime::from_ps(40_000));
/// ```
#[derive(Debug)]
pub struct SimBuilder<W: World> {
    world: W,
    seed: u64,
    clock: Clock,
    capacity: usize,
}

impl<W: World> SimBuilder<W> {
    /// A builder around `world` (seed 0, as fast as possible).
    pub fn new(world: W) -> SimBuilder<W> {
        SimBuilder {
            world,
            seed: 0,
            clock: Clock::AsFastAsPossible,
            capacity: 1024,
        }
    }
    /// The RNG seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
    /// The clock.
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }
    /// Pending events to make room for up front.
    pub fn capacity(mut self, n: usize) -> Self {
        self.capacity = n;
        self
    }
    /// The simulation, at time zero.
    pub fn build(self) -> Simulation<W> {
        Simulation {
            world: self.world,
            queue: EventQueue::with_capacity(self.capacity),
            rng: Rng::new(self.seed),
            now: SimTime::ZERO,
            clock: self.clock,
            wall_start: None,
            stop: false,
            delivered: 0,
        }
    }
}

/// A running simulation.
#[derive(Debug)]
pub struct Simulation<W: World> {
    world: W,
    queue: EventQueue<W::Event>,
    rng: Rng,
    now: SimTime,
    clock: Clock,
    wall_start: Option<(Instant, SimTime)>,
    stop: bool,
    delivered: u64,
}

impl<W: World> Simulation<W> {
    /// The current simulated time.
    pub fn now(&self) -> SimTime {
        self.now
    }
    /// The world.
    pub fn world(&self) -> &W {
        &self.world
    }
    /// The world, mutably (between events).
    pub fn world_mut(&mut self) -> &mut W {
        &mut self.world
    }
    /// Events delivered so far.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }
    /// Pending events.
    pub fn pending(&self) -> usize {
        self.queue.len()
    }
    /// Pending events other than background events (see
    /// [`Context::schedule_background_at`]).
    pub fn pending_foreground(&self) -> usize {
        self.queue.foreground_len()
    }
    /// Time of the next pending event.
    pub fn next_time(&mut self) -> Option<SimTime> {
        self.queue.peek_time()
    }
    /// Creates a FIFO stream for events whose times never decrease.
    pub fn new_fifo(&mut self) -> FifoId {
        self.queue.new_fifo()
    }
    /// Schedules an event from outside the models (an input).
    pub fn schedule_at<T>(&mut self, at: SimTime, event: T) -> EventKey
    where
        W::Event: From<T>,
    {
        self.queue.schedule(at.max(self.now), W::Event::from(event))
    }
    /// Cancels a pending event.
    pub fn cancel(&mut self, key: EventKey) -> bool {
        self.queue.cancel(key)
    }

    /// Runs `f` on the world with a context at the current time: how a host program
    /// calls a model input directly.
    pub fn process<R>(&mut self, f: impl FnOnce(&mut W, &mut Context<'_, W::Event>) -> R) -> R {
        let mut cx = Context {
            now: self.now,
            queue: &mut self.queue,
            rng: &mut self.rng,
            stop: &mut self.stop,
        };
        f(&mut self.world, &mut cx)
    }

    #[inline]
    fn pace(&mut self, t: SimTime) {
        if let Clock::Paced { ratio } = self.clock {
            if !(ratio.is_finite() && ratio > 0.0) {
                return;
            }
            let (w0, s0) = *self.wall_start.get_or_insert((Instant::now(), self.now));
            let sim_s = (t - s0).as_ps() as f64 * 1e-12 / ratio;
            let target = w0 + Duration::from_secs_f64(sim_s.min(1e9));
            let now = Instant::now();
            if target > now {
                std::thread::sleep(target - now);
            }
        }
    }

    /// Delivers the next event, if any; returns its time.
    #[inline]
    pub fn step(&mut self) -> Option<SimTime> {
        self.step_before(SimTime::MAX)
    }

    /// Delivers the next event if it is due at or before `limit`; returns its time
    /// (`None`: nothing pending that early, and the time does not move).
    #[inline]
    pub fn step_before(&mut self, limit: SimTime) -> Option<SimTime> {
        let (t, ev) = self.queue.pop_before(limit)?;
        if !matches!(self.clock, Clock::AsFastAsPossible) {
            self.pace(t);
        }
        self.now = t;
        self.delivered += 1;
        let mut cx = Context {
            now: t,
            queue: &mut self.queue,
            rng: &mut self.rng,
            stop: &mut self.stop,
        };
        self.world.handle(ev, &mut cx);
        Some(t)
    }

    /// Delivers every event due at or before `until`, then sets the time to `until`
    /// (if it is later than now). Returns the number of events delivered. Stops early
    /// (without advancing to `until`) when a model calls [`Context::stop`].
    pub fn step_until(&mut self, until: SimTime) -> u64 {
        let start = self.delivered;
        self.stop = false;
        while self.step_before(until).is_some() {
            if self.stop {
                return self.delivered - start;
            }
        }
        if until > self.now && until != SimTime::MAX {
            self.pace(until);
            self.now = until;
        }
        self.delivered - start
    }

    /// Runs until no event is pending or a model calls [`Context::stop`]. Returns the
    /// number of events delivered.
    pub fn run(&mut self) -> u64 {
        let start = self.delivered;
        self.stop = false;
        while self.step().is_some() {
            if self.stop {
                break;
            }
        }
        self.delivered - start
    }
}
