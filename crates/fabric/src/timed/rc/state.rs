//! What the root complex keeps (below the engine): host requests in flight and their
//! results, the split peer-to-peer reads, root ports' interrupt conditions, and the
//! messages and interrupts it received.

use crate::inthash::{IntBuild, IntMap};
use crate::timed::regs::*;
use crate::timed::tlp::*;
use pcielab_sim::Rng;
use pcielab_sim::{EventKey, FifoId, SimTime};
use pcielab_wire::{Bdf, CplStatus};
use std::collections::VecDeque;

/// A host (root-complex) request waiting for its completion.
#[derive(Debug, Clone)]
pub(crate) struct HostReq {
    pub issued: SimTime,
    pub len: u32,
    pub data: Vec<u8>,
    pub got: u32,
    pub timer: Option<EventKey>,
    /// A completion of it was poisoned.
    pub poisoned: bool,
}

/// A change of a root port's INTx virtual wire, as the root complex sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntxEvent {
    /// The root port it came through.
    pub root_port: Bdf,
    /// The pin at the root port (1 = INTA … 4 = INTD), after the switches' swizzle.
    pub pin: u8,
    /// Asserted (true) or deasserted.
    pub asserted: bool,
    /// Requester ID of the message that changed it (the endpoint, or the upstream port
    /// of the last switch on the way).
    pub from: Bdf,
}

/// An error message as a root port logged it (Root Error Status, Error Source
/// Identification).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorMessage {
    /// The root port that logged it.
    pub root_port: Bdf,
    /// The function that detected the error (the message's Requester ID).
    pub source: Bdf,
    /// ERR_COR, ERR_NONFATAL or ERR_FATAL.
    pub severity: ErrorSeverity,
}

/// A PM_PME message as a root port received it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PmeMessage {
    /// The root port that received it.
    pub root_port: Bdf,
    /// The function that signalled the event (the message's Requester ID).
    pub requester: Bdf,
}

/// A PME_TO_Ack as a root port received it: the answer to its PME_Turn_Off once
/// every device below has acknowledged (switches gather their ports' answers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PmeToAck {
    /// The root port that received it.
    pub root_port: Bdf,
    /// The Requester ID: the upstream port of the device or switch below it.
    pub requester: Bdf,
}

/// A root port's interrupt state (see [`Engine::root_port_interrupt`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RootIrq {
    /// The AER condition as last evaluated.
    pub aer: bool,
    /// The PME condition as last evaluated.
    pub pme: bool,
    /// The DPC condition as last evaluated.
    pub dpc: bool,
    /// The hot-plug condition as last evaluated.
    pub hotplug: bool,
    /// The virtual INTx wire is asserted.
    pub wire: bool,
}

/// The result of a host read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostRead {
    /// Data returned, with the time the host issued and received it.
    Done {
        /// The bytes.
        data: Vec<u8>,
        /// Issue time.
        issued: SimTime,
        /// Completion time.
        done: SimTime,
    },
    /// Every completion came back, at least one with poisoned data (EP): the bytes as
    /// they came, with the times (the root port logged Poisoned TLP Received).
    Poisoned {
        /// The bytes.
        data: Vec<u8>,
        /// Issue time.
        issued: SimTime,
        /// Completion time.
        done: SimTime,
    },
    /// A completion with a non-successful status.
    Failed(CplStatus),
    /// No completion before the completion timeout.
    Timeout,
}

/// A peer read the root complex split.
#[derive(Debug, Clone)]
pub(crate) struct P2pRead {
    pub orig: Tlp,
    pub data: Vec<u8>,
    pub pending: u32,
    /// A completion of a piece was poisoned.
    pub poisoned: bool,
}

/// The root complex's state: its host side (requests in flight, memory and its cache, split
/// peer reads), root ports' interrupt and PME state, and the host side of ATS and PRI.
#[derive(Debug)]
pub(crate) struct RootComplex {
    pub(crate) node: u32,
    pub(crate) bdf: Bdf,
    pub(crate) host_tags: Vec<u16>,
    /// FIFO stream of the host's requests (MMIO and configuration) leaving after the
    /// root complex's latency: a constant delay keeps them in order.
    pub(crate) host_fifo: FifoId,
    pub(crate) host_reqs: IntMap<u16, HostReq>,
    pub(crate) host_done: IntMap<u16, HostRead>,
    /// Draws of the host model (memory latency tail); separate from `err_rng` so that
    /// host effects never move error injection.
    pub(crate) host_rng: Rng,
    /// Time of the last posted request the root complex consumed (posted requests
    /// stay in order even when IOMMU latencies differ).
    pub(crate) posted_last: SimTime,
    /// Cached host-memory lines (LLC / DDIO model).
    pub(crate) llc_set: std::collections::HashSet<u64, IntBuild>,
    /// Poisoned 64-byte lines of host memory (line numbers; see the `poison` module).
    pub(crate) poison_lines: std::collections::HashSet<u64, IntBuild>,
    /// Invalidations the root complex sent, in order.
    pub(crate) ats_invals: Vec<crate::timed::ats::state::AtsInvalidation>,
    /// Devices whose translated requests the IOMMU accepts (ATS was enabled).
    pub(crate) ats_trusted: Vec<Bdf>,
    /// Ranges host software maps when a device asks (PRI), and the Page Requests the
    /// host received.
    pub(crate) on_demand: Vec<crate::timed::pri::state::OnDemand>,
    pub(crate) page_requests: Vec<crate::timed::pri::state::PageRequestRecord>,
    pub(crate) llc_fifo: VecDeque<u64>,
    /// Tags the root complex uses for split peer reads (256..512), and their state.
    pub(crate) p2p_tags: Vec<u16>,
    pub(crate) p2p_tag_map: IntMap<u16, (u64, u32)>,
    pub(crate) p2p_reads: IntMap<u64, P2pRead>,
    pub(crate) p2p_next: u64,
    /// Per root port (function index): its AER and PME interrupt conditions as last
    /// evaluated (an MSI is sent when one becomes true) and whether its virtual INTx
    /// wire is asserted.
    pub(crate) root_irq: IntMap<u32, RootIrq>,
    /// Per root port (function index): requesters whose PM_PME arrived while PME
    /// Status was set (delivered one by one as software clears it).
    pub(crate) pme_queue: IntMap<u32, VecDeque<Bdf>>,
}
