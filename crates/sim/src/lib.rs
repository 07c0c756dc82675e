//! # pcielab-sim — a deterministic discrete-event kernel
//!
//! Knows nothing of PCIe. A simulation is a [`World`] (a struct owning the model structs
//! and wiring them together) that handles events of one type; the kernel orders the
//! events, keeps the time and owns the seeded RNG.
//!
//! ```text
//!   SimBuilder::new(world).seed(s).clock(c).build()  ──►  Simulation
//!        │ schedule_at / process (inputs from outside)
//!        ▼
//!   EventQueue ──(time, seq) order──► World::handle(event, &mut Context) ──► model input
//!        ▲                                                    │
//!        └──────── cx.schedule_in / push_fifo / cancel ◄──────┘
//! ```
//!
//! ## Ordering guarantees
//! * Events are delivered in increasing `(time, seq)`; `seq` counts schedule calls, so
//!   simultaneous events are delivered in the order they were scheduled.
//! * FIFO streams ([`EventQueue::push_fifo`]) obey the same order; a push that would
//!   go back in time on its stream takes the heap path instead.
//! * A cancelled event is never delivered; a stale key cancels nothing.
//! * An event scheduled with a reserved sequence number
//!   ([`EventQueue::schedule_reserved`]) is delivered exactly where it would have been
//!   had it been scheduled when the number was reserved.
//! * Background events ([`EventQueue::schedule_background`]) are ordered like the
//!   others; they only do not count as pending work
//!   ([`Simulation::pending_foreground`]).
//! * Time never goes backwards: scheduling in the past means "now, after what is due".
//! * The only randomness is the seeded [`Rng`], so a run is a pure function of its
//!   inputs and seed.
//!
//! See [`SimBuilder`] for a complete example.
#![warn(missing_docs)]

pub mod queue;
pub mod rng;
pub mod sim;
pub mod time;

pub use queue::{EventKey, EventQueue, FifoId};
pub use rng::Rng;
pub use sim::{Clock, Context, SimBuilder, Simulation, World};
pub use time::{SimDuration, SimTime};
