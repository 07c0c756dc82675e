//! The events of the timed fabric ([`Ev`]) and what travels on a link direction
//! ([`Wire`]: a TLP by its pool id, or a DLLP).

use pcielab_wire::dllp::FcKind;

/// A DLLP in the simulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dllp {
    Ack(u32),
    Nak(u32),
    /// The credit counters are cumulative `u64`s; a DLLP carries their low 32 bits
    /// (the wire carries 8 and 12), which the transmitter widens against its limit
    /// (see [`widen`]): the events stay small.
    Fc {
        kind: FcKind,
        class: u8,
        hdr: u32,
        data: u32,
    },
}

/// The cumulative counter whose low 32 bits are `low`, at or above `near` (a counter
/// only grows, and never by 2^32 between two DLLPs).
#[inline]
pub(crate) fn widen(near: u64, low: u32) -> u64 {
    near + low.wrapping_sub(near as u32) as u64
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wire {
    Tlp { id: u32, seq: u32, bad: bool },
    Dllp { d: Dllp, bad: bool },
}

/// Events of the timed fabric (the queue stores them packed: see [`PackedEv`](super::PackedEv)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ev {
    /// The wire of a direction is free again.
    TxDone(u16),
    /// Something arrives at the receiver of a direction.
    Arrive(u16, WireItem),
    /// The receiver of a direction must send an ACK.
    AckTimer(u16),
    /// The receiver of a direction must send UpdateFC for a class.
    FcTimer(u16, u8),
    /// The transmitter's replay timer expired.
    ReplayTimer(u16),
    /// The periodic UpdateFC of the receiver of a direction is due (a background event).
    FcRefresh(u16),
    /// A node finished processing a TLP it forwards.
    Forward(u32),
    /// A TLP reached its consumer (after the node's latency).
    Consume(u32),
    /// A device timer.
    EpTimer(u32, u64),
    /// An Ethernet frame (by its slot in `Engine::eth`) reaches its cable's end.
    EthFrame(u32),
    /// An endpoint's completion-timeout sweep.
    DmaTimeout(u32, u32),
    /// A host request's completion timeout.
    HostTimeout(u16),
    /// The root complex sends a host request it has prepared.
    HostSend(u32),
    /// A delayed endpoint completion is ready.
    EpComplete(u32),
    /// A function's PME service timeout: it re-sends PM_PME if its PME is still
    /// asserted (a background event).
    PmeResend(u32),
    /// A link (its downward direction) finished training: (direction, training count).
    LinkTrained(u16, u32),
}

/// Opaque wire item of an [`Ev::Arrive`].
///
/// The flag: the transmitter of the direction frees at the arrival's instant and has
/// more to send, so the arrival stands for the `TxDone` too (the wire's `TxDone` would
/// have been scheduled right after the arrival, at the same time: it is delivered right
/// after it with [`Context::then`](pcielab_sim::Context::then), without heap work).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireItem(pub(crate) Wire, pub(crate) bool);
