//! The timed fabric's world: link directions with DLL and flow control, nodes (root
//! complex, switches, endpoints), routing, the root complex's host side, and the
//! event handlers. More `impl Engine` blocks live beside it: `dma` (the endpoint DMA
//! engine), `aer` (error logging and signalling), `interrupts` (root-port interrupts,
//! INTx, MSI/MSI-X), `pm` (PME and PME_Turn_Off), `vendor` (vendor-defined messages)
//! and the cross-cutting features listed in ARCHITECTURE.md.

use super::endpoint::{EpCmd, ReadReply, ReadTicket, VendorMessage};
use super::event::*;
use super::fault::{FaultKind, SimFault};
use super::packed::PackedEv;
use super::poison::state::Poison;
use super::pool::TlpPool;
use super::regs::*;
use super::slot::state::EpState;
use super::tlp::*;
use super::trace::{DirCounters, Trace};
use crate::functional::{Fabric, FnId, Interrupt, Origin, Role, RouteError, Target, MSI_RANGE};
use crate::params::BufferCredits;
use crate::params::SimConfig;
use crate::phy::LinkTiming;
use pcielab_sim::{Context, EventKey, FifoId, Rng, SimDuration, SimTime, World};
use pcielab_wire::dllp::{FcClass as DFc, FcDllp, FcScale};
use pcielab_wire::dma::{completions, CplPolicy};
use pcielab_wire::tlp::TlpRepr;
use pcielab_wire::{Bdf, CplStatus, DllpRepr, SeqNum, Tag};
use std::collections::{HashMap, HashSet, VecDeque};

/// A transmit-queue entry packs its data credits (low 24 bits) with the number of
/// TLPs it stands for less one (high 8 bits; see the `burst` module).
pub(crate) const Q_PIECES_SHIFT: u32 = 24;
/// The data-credit bits of a packed queue entry.
pub(crate) const Q_DATA_MASK: u32 = (1 << Q_PIECES_SHIFT) - 1;

pub(crate) use crate::inthash::{IntBuild, IntMap};
#[derive(Debug)]
pub(crate) struct Dir {
    pub name: String,
    #[allow(dead_code)]
    pub from: u32,
    pub to: u32,
    pub timing: LinkTiming,
    pub free_at: u128,
    /// `free_at` rounded up to whole picoseconds (kept with it: no division per use).
    pub free_at_ps: u64,
    pub busy: bool,
    /// When the last transmission arrives at the receiver.
    pub last_arrive_ps: u64,
    /// A TxDone due at (time, reserved sequence number) that the arrival of the last
    /// transmission (at that same time, without propagation delay) stands for.
    pub deferred_tx: Option<(u64, u64)>,
    /// FIFO stream of arrivals at the receiver (times never decrease).
    pub fifo: FifoId,
    /// FIFO stream of the transmitter's TxDone events (times never decrease).
    pub tx_fifo: FifoId,
    pub prop_ps: u64,
    pub ack_ps: u64,
    pub fc_ps: u64,
    /// ASPM states enabled: L0s for this direction's transmitter, L1 for the link
    /// (`ASPM_L0S`, `ASPM_L1`; see the `aspm` module).
    pub aspm: u8,
    /// How long this transmitter takes to leave L0s.
    pub l0s_exit_ps: u64,
    pub up: bool,
    pub init_seen: u8,
    /// The link is down (DL_Down: disabled, or training): nothing is transmitted and
    /// TLPs routed onto it are handled as the `link_down` module says.
    pub down: bool,
    /// Why the link is held down (`link_down::HELD_*` bits); it trains once none is
    /// left. Kept on the downward direction of a link.
    pub held: u8,
    /// Arrivals before this time were sent before the link went down: discarded.
    pub stale_until_ps: u64,
    /// Counts the link's trainings (a `LinkTrained` event of an older one is stale).
    pub train_gen: u32,
    /// The port transmitting on this (downward) direction blocks poisoned TLPs (DPC
    /// Poisoned TLP Egress Blocking Enable).
    pub poison_block: bool,
    /// The port transmitting on this direction blocks End-End TLP Prefixes (Device
    /// Control 2 End-End TLP Prefix Blocking; see the `pasid` module).
    pub egress_block: u8,
    /// Bus Master Enable is clear at a port of this (upward) direction
    /// (`bus_master::BME_*`): memory and I/O requests are not forwarded upstream.
    pub bme_block: u8,
    /// ASPM L1.2 enabled at both ends of the link (kept on its downward direction):
    /// (the extra exit time from L1.2 in ps: T_POWER_ON + Common_Mode_Restore_Time;
    /// LTR_L1.2_THRESHOLD in ns).
    pub l12: Option<(u64, u64)>,
    // transaction-layer egress queues: (order, tlp)
    /// Per class: (order, TLP, its data credits) — the transmitter decides without
    /// touching the TLPs.
    pub q: [VecDeque<(u64, u32, u32)>; 3],
    pub order: u64,
    /// The transmitter's flow-control gate.
    pub tx_fc: super::fc::TxCredits,
    // DLL tx
    /// The replay buffer and replay timer (see `dll::TxReplay`).
    pub replay: super::dll::TxReplay,
    /// The last burst put on the wire (burst mode), in wire units: (first piece's
    /// start, one piece's wire time, pieces, first sequence number), for DLLPs that go
    /// between its pieces (see `Engine::dllp_into_burst`).
    pub burst_tx: (u128, u128, u32, u32),
    /// DLLPs sent between the pieces of that burst, in wire units: (the time they
    /// added to it, when the last of them ends).
    pub burst_ins: (u128, u128),
    /// Bursts whose arrival the DLLPs sent between their pieces postpone, in wire
    /// order: (first sequence number, picoseconds).
    pub postponed: VecDeque<(u32, u64)>,
    pub dllq: VecDeque<Dllp>,
    // DLL rx (receiver at `to`)
    /// The receiver's sequence check (NEXT_RCV_SEQ, Nak outstanding).
    pub rx_seq: super::dll::RxSeq,
    pub rx_ack_pending: bool,
    /// FIFO stream of the receiver's ACK-latency timer events.
    pub ack_fifo: FifoId,
    // FC rx
    pub rx_buf: BufferCredits,
    /// The receiver's flow-control accounting.
    pub rx_fc: super::fc::RxCredits,
    pub rx_fc_timer: [Option<EventKey>; 3],
    // stalls
    pub stall_since: Option<SimTime>,
    pub rstall_since: Option<SimTime>,
    /// The function that logs errors in TLPs received on this direction (AER).
    pub rx_func: Option<FnId>,
    /// UpdateFC refreshes sent with unchanged values (for lossy DLLPs).
    pub fc_refresh: [u8; 3],
    /// When the receiver last sent UpdateFC for each class (ps; the periodic refresh
    /// counts from there).
    pub fc_sent_ps: [u64; 3],
    pub counters: DirCounters,
}

impl Dir {
    /// The classes whose receive buffer (of this direction's receiver) is finite in
    /// headers or data: the ones UpdateFC is sent for.
    pub(crate) fn finite_classes(&self) -> impl Iterator<Item = usize> + '_ {
        (0..3).filter(|&c| self.finite(c))
    }

    /// True if class `c` of this direction's receive buffer is finite.
    pub(crate) fn finite(&self, c: usize) -> bool {
        self.rx_buf.hdr[c] != 0 || self.rx_buf.data[c] != 0
    }
}

#[derive(Debug)]
pub(crate) enum NodeKind {
    Rc,
    Switch,
    Ep(Box<EpState>),
}

impl NodeKind {
    /// The device timing of an endpoint's model (none for other nodes).
    pub(crate) fn ep_timing(&self) -> pcielab_device::DeviceTiming {
        match self {
            NodeKind::Ep(ep) => ep.timing,
            _ => pcielab_device::DeviceTiming::NONE,
        }
    }
}

#[derive(Debug)]
pub(crate) struct Node {
    pub name: String,
    /// FIFO stream of the node's Forward/Consume events.
    pub fifo: FifoId,
    pub kind: NodeKind,
    /// Functional function of the node (endpoint function 0; switch upstream port).
    pub func: Option<FnId>,
}

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

/// Frames on the Ethernet cables between devices, and their counters.
#[derive(Debug, Default)]
pub(crate) struct EthCables {
    /// Frames on their way: (the receiving node, the frame); `None`: a free slot.
    pub frames: Vec<Option<(u32, Vec<u8>)>>,
    pub free: Vec<u32>,
    /// Frames a device took.
    pub delivered: u64,
    /// Frames out of a MAC with no cable, or that the receiving device did not take.
    pub dropped: u64,
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

/// The timed fabric (a [`World`] of the kernel).
#[derive(Debug)]
pub struct Engine {
    pub(crate) cfg: SimConfig,
    /// The functional fabric (enumerated): configuration spaces and routing.
    pub fabric: Fabric,
    pub(crate) nodes: Vec<Node>,
    pub(crate) dirs: Vec<Dir>,
    /// TLP records and payload buffers in flight.
    pub(crate) pool: TlpPool,
    pub(crate) pair_dir: HashMap<(u32, u32), u16>,
    pub(crate) route_cache: IntMap<(u32, u64), Route>,
    /// The last route looked up, with its key (consecutive TLPs of a DMA share a page).
    pub(crate) route_last: ((u32, u64), Route),
    pub(crate) rc_node: u32,
    pub(crate) host_bdf: Bdf,
    pub(crate) host_tags: Vec<u16>,
    /// Per node: until when (ps) it is initializing after a reset and answers
    /// configuration requests with CRS (`SimConfig::device_ready_time`).
    pub(crate) ready_at: Vec<u64>,
    pub(crate) host_reqs: HashMap<u16, HostReq>,
    pub(crate) host_done: HashMap<u16, HostRead>,
    /// Ethernet frames between devices on cables.
    pub(crate) eth: EthCables,
    /// Interrupts delivered to the host's sink, with their arrival times.
    pub interrupts: Vec<(SimTime, Interrupt)>,
    /// INTx changes seen by the root complex.
    pub intx_events: Vec<(SimTime, IntxEvent)>,
    /// Error messages the root ports received (or logged for themselves).
    pub error_messages: Vec<(SimTime, ErrorMessage)>,
    /// Asserted INTx virtual wires: (receiving node, ingress direction, pin).
    pub intx_wires: HashSet<(u32, u32, u8)>,
    /// Asserted wires per (receiving node, root-port direction or NONE, mapped pin).
    pub intx_count: HashMap<(u32, u32, u8), u32>,
    /// The trace, when enabled.
    pub trace: Option<Trace>,
    /// Writes the root complex performed into host memory (address, length) when
    /// `SimConfig::log_writes` is set.
    pub write_log: Vec<(Bdf, u64, u32)>,
    pub(crate) cmds: Vec<EpCmd>,
    /// Some attached device model declared its own timing (see `device_arrival`).
    pub(crate) timed_devices: bool,
    pub(crate) scratch: Vec<u8>,
    /// Errors seen (unexpected completions, malformed TLPs, unroutable requests).
    pub errors: Vec<SimFault>,
    pub(crate) err_rng: Rng,
    /// Draws of the host model (memory latency tail); separate from `err_rng` so that
    /// host effects never move error injection.
    pub(crate) host_rng: Rng,
    /// Function that received the TLP being consumed (for AER logging).
    pub(crate) last_rx_func: Option<FnId>,
    /// Why a raw TLP in flight (its id) is not carried (see the `raw` module).
    pub(crate) raw_why: HashMap<u32, String>,
    /// The IOMMU, when configured.
    pub(crate) iommu: Option<super::iommu::Iommu>,
    /// Time of the last posted request the root complex consumed (posted requests
    /// stay in order even when IOMMU latencies differ).
    pub(crate) rc_posted_last: SimTime,
    /// Cached host-memory lines (LLC / DDIO model).
    pub(crate) llc_set: std::collections::HashSet<u64, IntBuild>,
    /// Poisoned 64-byte lines of host memory (line numbers; see the `poison` module).
    pub(crate) poison_lines: std::collections::HashSet<u64, IntBuild>,
    /// Per function: ECRC generation (1) and check (2) enabled (see `ecrc`).
    pub(crate) ecrc: Vec<u8>,
    /// Some function has an ECRC enable set.
    pub(crate) ecrc_any: bool,
    /// ATS state of devices with ATS enabled, by node (see `ats`).
    pub(crate) ats: IntMap<u32, super::ats::state::AtsDevice>,
    /// Some device has ATS enabled.
    pub(crate) ats_any: bool,
    /// The most TLPs a burst may stand for (1: burst mode off; see `burst`).
    pub(crate) burst_max: u32,
    /// The largest burst of completions (see the `burst` module).
    pub(crate) cpl_burst_max: u32,
    /// Most memory read requests of one DMA sent as one burst (1: none).
    pub(crate) rd_burst_max: u32,
    /// Invalidations the root complex sent, in order.
    pub(crate) ats_invals: Vec<super::ats::state::AtsInvalidation>,
    /// AER Multiple Header Recording: per function, the errors recorded behind the
    /// one in the Header Log, oldest first (see [`record_first_error`]).
    pub(crate) aer_records: IntMap<u32, VecDeque<(u32, LoggedHeader)>>,
    /// Devices whose translated requests the IOMMU accepts (ATS was enabled).
    pub(crate) ats_trusted: Vec<Bdf>,
    /// Translation Requests outstanding when their device turned ATS off: (node, tag).
    pub(crate) ats_orphans: Vec<(u32, u16)>,
    /// Ranges host software maps when a device asks (PRI), and the Page Requests the
    /// host received.
    pub(crate) on_demand: Vec<super::pri::state::OnDemand>,
    pub(crate) page_requests: Vec<super::pri::state::PageRequestRecord>,
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
    /// PM_PME messages the root ports received.
    pub pme_messages: Vec<(SimTime, PmeMessage)>,
    /// Per root port (function index): requesters whose PM_PME arrived while PME
    /// Status was set (delivered one by one as software clears it).
    pub(crate) pme_queue: IntMap<u32, VecDeque<Bdf>>,
    /// Per function signalling PME: asserted (PME_Status and PME_En) as last
    /// evaluated, and the pending re-send.
    pub(crate) pme_state: IntMap<u32, (bool, Option<EventKey>)>,
    /// Vendor-defined messages the root complex received: (time, requester, message).
    pub vendor_messages: Vec<(SimTime, Bdf, VendorMessage)>,
    /// PME_TO_Ack messages the root ports received.
    pub pme_to_acks: Vec<(SimTime, PmeToAck)>,
    /// Per switch node that forwarded PME_Turn_Off: the directions (upstream, from its
    /// downstream ports) whose PME_TO_Ack it still waits for.
    pub(crate) turn_off_wait: IntMap<u32, Vec<u16>>,
    /// Endpoint nodes that received PME_Turn_Off and have not acknowledged it yet.
    pub(crate) turn_off_held: HashSet<u32>,
    /// Downstream Port Containments, in order (see the `dpc` module).
    pub(crate) dpc_events: Vec<super::dpc::state::DpcEvent>,
    /// Per switch downstream port (function index): its hot-plug interrupt condition
    /// as last evaluated.
    pub(crate) hotplug_irq: IntMap<u32, bool>,
    /// LTR messages the root ports received (see the `ltr` module).
    pub(crate) ltr_messages: super::ltr::state::LtrLog,
    /// Per (switch node, upward direction of a downstream port's link): the last LTR
    /// values received there; per switch: the values it last reported.
    pub(crate) ltr_ports: HashMap<(u32, u32), (u16, u16)>,
    pub(crate) ltr_sent: IntMap<u32, (u16, u16)>,
    /// Per upward link direction: the last LTR values sent over it (for L1.2).
    pub(crate) ltr_link: IntMap<u32, (u16, u16)>,
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

pub(crate) fn dllp_repr(d: Dllp) -> DllpRepr {
    match d {
        Dllp::Ack(s) => DllpRepr::Ack {
            seq: SeqNum::from_bits_truncate(s as u16),
        },
        Dllp::Nak(s) => DllpRepr::Nak {
            seq: SeqNum::from_bits_truncate(s as u16),
        },
        Dllp::Fc {
            kind,
            class,
            hdr,
            data,
        } => DllpRepr::Fc(FcDllp {
            kind,
            class: [DFc::P, DFc::Np, DFc::Cpl][class as usize % 3],
            vc: 0,
            hdr_scale: FcScale::NotActive,
            hdr_fc: (hdr & 0xff) as u8,
            data_scale: FcScale::NotActive,
            data_fc: (data & 0xfff) as u16,
        }),
    }
}

impl Engine {
    // ---------------------------------------------------------------- TLP pool
    /// Drops one holder of TLP `id` (see [`TlpPool::release`]), taking back the host
    /// page lent to it when it goes.
    #[inline]
    pub(crate) fn release(&mut self, id: u32) {
        if let Some(page) = self.pool.release(id) {
            self.fabric.host_memory.end_loan(page);
        }
    }

    /// The payload of TLP `id`: its buffer, or the host page lent to it.
    pub(crate) fn payload(&self, id: u32) -> &[u8] {
        let t = &self.pool.tlps[id as usize];
        if t.lent != NOT_LENT {
            return self.loaned_payload(t.lent);
        }
        self.pool.own_payload(id)
    }

    /// The payload of a TLP whose buffer became the host-memory page at `page`.
    #[cold]
    #[inline(never)]
    fn loaned_payload(&self, page: u64) -> &[u8] {
        self.fabric.host_memory.loaned(page).unwrap_or(&[])
    }

    /// The header of TLP `id` as it travels (3 or 4 DWs; a 3-DW header is followed by
    /// zeros), for the AER Header Log.
    #[cold]
    pub(crate) fn tlp_header(&self, id: u32) -> LoggedHeader {
        // (A burst's first TLP, in burst mode.)
        let raw = self.piece_bytes(id).swap_remove(0);
        let t = &self.pool.tlps[id as usize];
        // A raw TLP's prefixes (Fmt 100b) come first: the first End-End one is logged.
        let raw_prefixes = if t.kind == Kind::Raw {
            super::tlp::prefix_dws(&raw)
        } else {
            0
        };
        let (prefix, raw) = if raw_prefixes > 0 {
            let first_e2e = raw
                .chunks_exact(4)
                .take(raw_prefixes)
                .find(|p| p[0] & 0x10 != 0)
                .map(|p| [p[0], p[1], p[2], p[3]]);
            (first_e2e, &raw[raw_prefixes * 4..])
        } else if t.pasid != NONE && raw.len() >= 4 {
            (Some([raw[0], raw[1], raw[2], raw[3]]), &raw[4..])
        } else {
            (None, &raw[..])
        };
        // Fmt bit 0 (byte 0, bit 5): a 4-DW header.
        let n = if raw.first().is_some_and(|b| b & 0x20 != 0) {
            16
        } else {
            12
        };
        let mut header = [0u8; 16];
        let n = n.min(raw.len());
        header[..n].copy_from_slice(&raw[..n]);
        LoggedHeader { header, prefix }
    }

    /// Raw bytes of a TLP for the trace.
    pub(crate) fn tlp_bytes_raw(&self, id: u32) -> Vec<u8> {
        Self::tlp_bytes_of(&self.pool.tlps[id as usize], self.payload(id))
    }

    /// Raw bytes of TLP `t` carrying `payload` (one TLP: `t.pieces` is not looked at).
    pub(crate) fn tlp_bytes_of(t: &Tlp, payload: &[u8]) -> Vec<u8> {
        let tag = Tag::new(t.tag & 0x3ff).unwrap_or_else(|_| Tag::new(0).expect("tag 0"));
        // The payload as it travels: whole DWs, the first byte at `addr & 3`.
        let front = (t.addr & 3) as usize;
        let dws = t.dw_span() as usize;
        let mut data = vec![0u8; if payload.is_empty() { 0 } else { dws * 4 }];
        if !data.is_empty() {
            let n = payload.len().min(data.len() - front);
            data[front..front + n].copy_from_slice(&payload[..n]);
        }
        // A switch flipped the lowest bit of the first payload byte after the digest
        // was computed: the digest is that of the original data.
        let corrupted = t.td && t.corrupted && !data.is_empty();
        if corrupted {
            data[front] ^= 1;
        }
        let shape = pcielab_wire::request_shape(t.addr, t.len.clamp(1, 4096)).ok();
        let set_be = |r: &mut TlpRepr<'_>| {
            if let (Some(sh), pcielab_wire::tlp::TlpHeader::Mem(h)) = (shape, &mut r.header) {
                h.first_be = sh.first_be;
                h.last_be = sh.last_be;
            }
        };
        let r = match t.kind {
            Kind::MRd => TlpRepr::mem_read(t.requester, tag, t.addr, dws.clamp(1, 1024) as u16)
                .map(|mut r| {
                    set_be(&mut r);
                    r
                }),
            Kind::TransReq => TlpRepr::mem_read(t.requester, tag, t.addr, 2).map(|mut r| {
                r.at = pcielab_wire::AddressType::TranslationRequest;
                r
            }),
            Kind::AtsInv | Kind::AtsInvCpl | Kind::PageReq | Kind::PrgResp => {
                Ok(super::tlp::message_repr(t, tag, &data))
            }
            // Returned as they are above.
            Kind::Raw => return payload.to_vec(),
            Kind::Atomic => Ok(super::tlp::request_repr(t, tag, &data)),
            Kind::MWr => TlpRepr::mem_write(t.requester, tag, t.addr, &data).map(|mut r| {
                set_be(&mut r);
                r
            }),
            Kind::Cpl | Kind::CplD => TlpRepr::completion(
                t.completer,
                t.requester,
                tag,
                t.status(),
                t.byte_count().max(1),
                (t.addr & 0x7f) as u8,
                &data,
            ),
            Kind::IoRd | Kind::IoWr => {
                let be = shape.map_or(0xf, |sh| sh.first_be.bits());
                Ok(TlpRepr::with_header(
                    pcielab_wire::tlp::TlpHeader::Io(pcielab_wire::tlp::IoHeader {
                        write: t.kind == Kind::IoWr,
                        requester_id: t.requester,
                        tag,
                        first_be: pcielab_wire::ByteEnables::from_bits_truncate(be),
                        address: t.addr as u32 & !3,
                    }),
                    if t.kind == Kind::IoWr { &data[..] } else { &[] },
                ))
            }
            Kind::CfgRd | Kind::CfgWr => {
                let type0 = matches!(
                    t.dest,
                    Dest::Config {
                        type0_last: true,
                        ..
                    }
                ) && t.at as usize + 1 >= t.hops as usize;
                Ok(TlpRepr::with_header(
                    pcielab_wire::tlp::TlpHeader::Cfg(pcielab_wire::tlp::CfgHeader {
                        write: t.kind == Kind::CfgWr,
                        type1: !type0,
                        requester_id: t.requester,
                        tag,
                        first_be: pcielab_wire::ByteEnables::from_bits_truncate(t.first_be()),
                        target: t.completer,
                        register: (t.addr as u16 & 0xffc) >> 2,
                    }),
                    if t.kind == Kind::CfgWr {
                        &data[..]
                    } else {
                        &[]
                    },
                ))
            }
            Kind::Intx | Kind::ErrMsg | Kind::PmMsg | Kind::PmHop => Ok(TlpRepr::with_header(
                pcielab_wire::tlp::TlpHeader::Msg(pcielab_wire::tlp::MsgHeader {
                    requester_id: t.requester,
                    tag,
                    code: pcielab_wire::tlp::MsgCode::from_raw(t.msg_code()),
                    routing: match (t.kind, t.msg_code()) {
                        (Kind::Intx, _) => pcielab_wire::tlp::MsgRouting::Local,
                        (Kind::PmHop, super::tlp::MSG_LTR) => pcielab_wire::tlp::MsgRouting::Local,
                        (Kind::PmHop, MSG_PME_TURN_OFF) => pcielab_wire::tlp::MsgRouting::Broadcast,
                        (Kind::PmHop, _) => pcielab_wire::tlp::MsgRouting::Gathered,
                        _ => pcielab_wire::tlp::MsgRouting::ToRc,
                    },
                    fields: pcielab_wire::tlp::MsgFields(
                        if let Detail::Ltr {
                            snoop: s,
                            no_snoop: n,
                        } = t.detail
                        {
                            // Bytes 12–13 No-Snoop Latency, 14–15 Snoop Latency.
                            let mut f = [0u8; 8];
                            f[4..6].copy_from_slice(&n.to_be_bytes());
                            f[6..8].copy_from_slice(&s.to_be_bytes());
                            f
                        } else {
                            [0; 8]
                        },
                    ),
                }),
                &[],
            )),
            Kind::VendorMsg => {
                let by_id = t.vendor_routing() == 2;
                let mut f = [0u8; 8];
                if by_id {
                    f[0..2].copy_from_slice(&t.completer.raw().to_be_bytes());
                }
                let (vendor_id, vendor_data) = t.vendor_fields();
                f[2..4].copy_from_slice(&vendor_id.to_be_bytes());
                f[4..8].copy_from_slice(&vendor_data.to_be_bytes());
                Ok(TlpRepr::with_header(
                    pcielab_wire::tlp::TlpHeader::Msg(pcielab_wire::tlp::MsgHeader {
                        requester_id: t.requester,
                        tag,
                        code: pcielab_wire::tlp::MsgCode::from_raw(t.msg_code()),
                        routing: pcielab_wire::tlp::MsgRouting::from_raw(t.vendor_routing())
                            .unwrap_or(pcielab_wire::tlp::MsgRouting::ToRc),
                        fields: pcielab_wire::tlp::MsgFields(f),
                    }),
                    &data,
                ))
            }
        };
        // The PASID prefix DW comes first.
        let pre = if t.pasid != NONE { 4 } else { 0 };
        r.and_then(|mut r| {
            r.ep = t.poisoned;
            r.td = t.td;
            if t.addr_type == 2 {
                r.at = pcielab_wire::AddressType::Translated;
            }
            if t.pasid != NONE {
                r.prefixes = pcielab_wire::tlp::Prefixes::from_slice(&[
                    pcielab_wire::tlp::Prefix::new_pasid(t.pasid, false, false),
                ])?;
            }
            r.to_vec()
        })
        .map(|mut out| {
            if corrupted {
                // Now the bit flips, after the digest of the original was computed.
                let hdr = if out[pre] & 0x20 != 0 { 16 } else { 12 };
                if let Some(b) = out.get_mut(pre + hdr + front) {
                    *b ^= 1;
                }
            }
            out
        })
        .unwrap_or_default()
    }

    // ---------------------------------------------------------------- routing
    /// Path (directions) from `from_node` for a TLP, via the functional fabric.
    pub(crate) fn route(
        &mut self,
        origin: Origin,
        kind: Kind,
        addr: u64,
        dest_id: Bdf,
    ) -> Result<Route, RouteError> {
        let onode = match origin {
            Origin::Host => self.rc_node,
            Origin::Function(f) => self.fabric.functions[f.0 as usize].node.0,
        };
        let key = match kind {
            // Completions and error messages go to a function by ID (messages: the host bridge).
            // Completions apart from messages (ACS redirects them by different bits).
            k if k.routed_by_id() => (
                onode,
                1u64 << 63 | (k.is_completion() as u64) << 32 | dest_id.raw() as u64,
            ),
            // I/O BARs are as small as 4 bytes and share pages: one entry per DW. Bit 62
            // keeps the keys apart from memory pages (at most 2^52) and completions.
            Kind::IoRd | Kind::IoWr => (onode, 1u64 << 62 | (addr & 0xffff_fffc)),
            _ => (onode, addr >> 12),
        };
        if self.route_last.0 == key {
            return Ok(self.route_last.1);
        }
        if let Some(r) = self.route_cache.get(&key) {
            self.route_last = (key, *r);
            return Ok(*r);
        }
        let (hops, dest_node, dest) = match kind {
            k if k.routed_by_id() => {
                let r = self.fabric.route_id(origin, dest_id)?;
                let f = &self.fabric.functions[r.target.0 as usize];
                let d = if f.role == Role::HostBridge {
                    Dest::Rc
                } else {
                    Dest::Dma { node: f.node.0 }
                };
                (r.hops, f.node.0, d)
            }
            _ => {
                // A bridge with Bus Master Enable clear refuses the request when it
                // gets there (see the `bus_master` module), not at the requester.
                let r = if matches!(kind, Kind::IoRd | Kind::IoWr) {
                    let a = u32::try_from(addr)
                        .map_err(|_| RouteError::NotRoutable("I/O address above 4 GiB"))?;
                    self.fabric
                        .route_addr_through_bridges(origin, a as u64, true)?
                } else {
                    match self.fabric.route_addr_through_bridges(origin, addr, false) {
                        Ok(r) => r,
                        Err(e) => return self.route_to_down_port(origin, addr).ok_or(e),
                    }
                };
                match r.target {
                    Target::HostMemory(_) => (r.hops, self.rc_node, Dest::HostMemory),
                    Target::Bar {
                        function,
                        bar,
                        offset,
                    } => {
                        let n = self.fabric.functions[function.0 as usize].node.0;
                        let Some(func) = self.fn_index(n, function) else {
                            return Err(RouteError::Refused(self.fabric.bdf(function)));
                        };
                        // The cache is per page: store the page's base offset.
                        (
                            r.hops,
                            n,
                            Dest::Bar {
                                node: n,
                                func,
                                bar,
                                offset: offset - (addr & 0xfff),
                            },
                        )
                    }
                }
            }
        };
        // A peer-to-peer TLP between two downstream ports of a switch goes by the root
        // complex when the port it enters by redirects it (ACS; see the `acs` module).
        let hops = self.acs_redirect(origin, kind, addr, dest_id, hops)?;
        if let (Some(_), Origin::Function(f), Dest::Bar { .. }) = (&self.iommu, origin, dest) {
            // A device's request for a peer that crosses the root complex, or for
            // another function of its own device (its DMA engine sends every request
            // on its link), passes the IOMMU at the root complex: untranslated, the
            // address is an I/O virtual address of the requester's domain. Unmapped,
            // it ends at the root complex, which faults it as any unmapped DMA
            // (Unsupported Request for a read, dropped for a write); mapped to
            // itself, it goes on to the peer (P2P by an identity mapping of the
            // peer's BAR); mapped elsewhere, to the root complex, which translates
            // it. Not cached: mappings change.
            let crosses_rc = hops.iter().any(|h| {
                matches!(
                    self.fabric.functions[h.0 as usize].role,
                    Role::RootPort { .. }
                )
            });
            if crosses_rc || dest_node == onode {
                let bdf = self.fabric.bdf(f);
                // Mapped to itself: the peer's BAR (P2P). Mapped elsewhere: not the
                // peer's address at all (a guest's memory, say); the root complex
                // translates it.
                let identity =
                    self.iommu.as_ref().and_then(|m| m.peek(bdf, NONE, addr)) == Some(addr);
                let r = if identity {
                    let (path, n) = self.dir_path(&self.node_seq(onode, &hops, dest_node))?;
                    (path, n, dest)
                } else {
                    // Up the bridges above the requester to the root complex.
                    let mut up = Vec::new();
                    let mut bus = self.fabric.functions[f.0 as usize].bus;
                    while let Some(p) = self.fabric.buses[bus.0 as usize].parent {
                        up.push(p);
                        bus = self.fabric.functions[p.0 as usize].bus;
                    }
                    let rc = self.rc_node;
                    let (path, n) = self.dir_path(&self.node_seq(onode, &up, rc))?;
                    (path, n, Dest::HostMemory)
                };
                return Ok(r);
            }
        }
        let (path, n) = self.dir_path(&self.node_seq(onode, &hops, dest_node))?;
        let r = (path, n, dest);
        self.route_cache.insert(key, r);
        self.route_last = (key, r);
        Ok(r)
    }

    /// The nodes a TLP from `onode` crosses through the bridge functions `hops`, ending
    /// at `last` (consecutive duplicates merged).
    pub(crate) fn node_seq(&self, onode: u32, hops: &[FnId], last: u32) -> Vec<u32> {
        let mut seq: Vec<u32> = vec![onode];
        let nodes = hops
            .iter()
            .map(|h| self.fabric.functions[h.0 as usize].node.0)
            .chain([last]);
        for n in nodes {
            if seq.last() != Some(&n) {
                seq.push(n);
            }
        }
        seq
    }

    /// The link directions between consecutive nodes of `seq`.
    pub(crate) fn dir_path(&self, seq: &[u32]) -> Result<([u16; MAX_PATH], u8), RouteError> {
        let mut path = [0u16; MAX_PATH];
        let mut n = 0u8;
        for w in seq.windows(2) {
            let d = *self
                .pair_dir
                .get(&(w[0], w[1]))
                .ok_or(RouteError::NotRoutable(
                    "no link between consecutive nodes of the route",
                ))?;
            if n as usize >= MAX_PATH {
                return Err(RouteError::NotRoutable("route longer than 8 links"));
            }
            path[n as usize] = d;
            n += 1;
        }
        Ok((path, n))
    }

    /// Route of a configuration request from the host to `target` (not cached: the
    /// bus numbers it follows change while software enumerates). A request that
    /// routing cannot deliver ends where it stops: on the bus the last bridge forwarded
    /// it to (the device there answers Unsupported Request), or at that bridge when it
    /// is a root or downstream port that must not forward a Type 0 request to a device
    /// number other than 0, or when nothing sits below it; with no bridge at all, at
    /// the root complex.
    pub(crate) fn route_cfg(&self, target: Bdf) -> Result<Route, RouteError> {
        let fab = &self.fabric;
        let node_of = |f: FnId| fab.functions[f.0 as usize].node.0;
        let (hops, r) = fab.route_config_partial(target);
        let (dest_node, func, refuser) = match r {
            Ok(f) => (node_of(f), f.0, NONE),
            Err(e) => match hops.last() {
                None => (self.rc_node, NONE, NONE),
                Some(&b) => {
                    let port = matches!(
                        fab.functions[b.0 as usize].role,
                        Role::RootPort { .. } | Role::SwitchDownstream { .. }
                    );
                    let port_refuses =
                        port && matches!(e, RouteError::NoFunction(_)) && target.device() != 0;
                    let below = fab.functions[b.0 as usize]
                        .secondary
                        .and_then(|s| fab.buses[s.0 as usize].functions.first().copied());
                    match below {
                        Some(f) if !port_refuses => (node_of(f), NONE, f.0),
                        _ => (node_of(b), NONE, b.0),
                    }
                }
            },
        };
        let mut seq: Vec<u32> = vec![self.rc_node];
        for h in &hops {
            let n = node_of(*h);
            if *seq.last().unwrap_or(&NONE) != n {
                seq.push(n);
            }
        }
        if *seq.last().unwrap_or(&NONE) != dest_node {
            seq.push(dest_node);
        }
        let (path, n) = self.dir_path(&seq)?;
        // Type 0 on the last link when the target is on the bus that link is: an
        // endpoint function or a switch's upstream port (a switch's downstream ports
        // sit on its internal bus, reached by a Type 1 request the upstream port
        // converts).
        let type0_last = func != NONE
            && n > 0
            && !matches!(
                fab.functions[func as usize].role,
                Role::SwitchDownstream { .. } | Role::RootPort { .. } | Role::HostBridge
            );
        Ok((
            path,
            n,
            Dest::Config {
                node: dest_node,
                func,
                refuser,
                type0_last,
            },
        ))
    }

    pub(crate) fn fix_dest(dest: Dest, addr: u64) -> Dest {
        match dest {
            Dest::Bar {
                node,
                func,
                bar,
                offset,
            } => Dest::Bar {
                node,
                func,
                bar,
                offset: offset + (addr & 0xfff),
            },
            d => d,
        }
    }

    /// Creates a TLP and hands it to the first direction of its path (or consumes it
    /// locally when the path is empty). Inlined: the caller's TLP is then written
    /// straight into the pool (a copy of a just-built struct stalls on its stores).
    #[inline(always)]
    pub(crate) fn inject(
        &mut self,
        origin: Origin,
        mut t: Tlp,
        dest_id: Bdf,
        cx: &mut Context<'_, PackedEv>,
    ) -> Result<u32, RouteError> {
        let (path, hops, dest) = self.route(origin, t.kind, t.addr, dest_id)?;
        self.at_source(origin, &mut t, (hops > 0).then_some(path[0]));
        Ok(self.launch(t, (path, hops, dest), cx))
    }

    /// Puts routed TLP `t` in the pool at the start of its route: its id.
    #[inline(always)]
    pub(crate) fn place(&mut self, mut t: Tlp, (path, hops, dest): Route) -> u32 {
        t.path = path;
        t.hops = hops;
        t.at = 0;
        t.dest = Self::fix_dest(dest, t.addr);
        t.refs = 1;
        t.ingress = NO_DIR;
        self.pool.alloc(t)
    }

    /// Sends `t` on its route as it is (no poisoning or ECRC marking at the source):
    /// the TLP's id.
    #[inline(always)]
    pub(crate) fn launch(&mut self, t: Tlp, route: Route, cx: &mut Context<'_, PackedEv>) -> u32 {
        let hops = route.1;
        let path0 = route.0[0];
        let id = self.place(t, route);
        if hops == 0 {
            cx.schedule_now(Ev::Consume(id));
        } else {
            self.enqueue(path0, id, cx);
        }
        id
    }

    // ---------------------------------------------------------------- transmitter

    // ---------------------------------------------------------------- receiver

    /// A TLP passed the data-link checks at the receiver of `d`.
    pub(crate) fn accepted(&mut self, d: u16, id: u32, cx: &mut Context<'_, PackedEv>) {
        let node = self.dirs[d as usize].to;
        if self.pool.tlps[id as usize].poisoned {
            self.parity_detected(d);
        }
        let t = &mut self.pool.tlps[id as usize];
        t.ingress = d;
        t.at += 1;
        if self.dirs[d as usize].bme_block & BME_PORT != 0 {
            self.bme_ingress(id);
        }
        let t = &self.pool.tlps[id as usize];
        let last = t.at >= t.hops;
        let lat = match self.nodes[node as usize].kind {
            NodeKind::Switch => self.cfg.switch_latency,
            NodeKind::Rc => self.cfg.rc_latency,
            NodeKind::Ep(_) => SimDuration::ZERO,
        };
        if last {
            let (dest, kind, addr, len, req) = (t.dest, t.kind, t.addr, t.len as u64, t.requester);
            let pasid = t.pasid;
            let translated = t.addr_type == 2;
            let extra = match (dest, kind) {
                (Dest::HostMemory, Kind::MRd) => self.memory_read_latency(addr, len),
                (Dest::HostMemory, Kind::Atomic) => {
                    let size =
                        super::tlp::operand_size(self.pool.tlps[id as usize].atomic_kind(), len);
                    self.memory_read_latency(addr, size)
                }
                (Dest::Rc, Kind::TransReq) => {
                    self.translation_latency(req, pasid, addr, cx.now() + lat)
                }
                (Dest::Bar { .. }, Kind::MRd | Kind::IoRd | Kind::IoWr | Kind::Atomic) => {
                    self.cfg.ep_latency
                }
                (Dest::Config { node, .. }, _)
                    if matches!(self.nodes[node as usize].kind, NodeKind::Ep(_)) =>
                {
                    self.cfg.ep_latency
                }
                _ => SimDuration::ZERO,
            };
            let mut at = cx.now() + lat + extra;
            if self.timed_devices {
                at = self.device_arrival(dest, kind, len, at);
            }
            if dest == Dest::HostMemory {
                let msi = (MSI_RANGE.0..=MSI_RANGE.1).contains(&addr);
                // A translated request (ATS) passes the IOMMU without a lookup.
                if let (Some(m), false, false) = (self.iommu.as_mut(), translated, msi) {
                    at += m.lookup_latency(req, pasid, addr, cx.now() + lat);
                }
                // Posted writes take effect in order, an interrupt message too: it
                // never overtakes a write that waits for its translation.
                if kind == Kind::MWr {
                    at = at.max(self.rc_posted_last);
                    self.rc_posted_last = at;
                }
            }
            // Per-node FIFO: a constant latency keeps times in order; a varying one
            // (memory reads, IOTLB misses) falls back to the heap inside push_fifo.
            let f = self.nodes[node as usize].fifo;
            cx.push_fifo(f, at, Ev::Consume(id));
        } else {
            let mut at = cx.now() + lat;
            if self.cfg.cut_through && matches!(self.nodes[node as usize].kind, NodeKind::Switch) {
                // Cut-through: the latency runs from the arrival of the header (the
                // first 16 bytes after framing); the egress may not finish before the
                // ingress does, so it starts no earlier than now − its own duration.
                let tb = t.tlp_bytes();
                let hdr = (t.hdr_bytes as u64).min(tb);
                let din = &self.dirs[d as usize].timing;
                let ser_in = din.units_to_ps_ceil(din.units(din.tlp_wire_bytes(tb)));
                let ser_hdr = din.units_to_ps_ceil(din.units(hdr + 4));
                let dout = &self.dirs[t.path[t.at as usize] as usize].timing;
                let ser_out = dout.units_to_ps_ceil(dout.units(dout.tlp_wire_bytes(tb)));
                let now = cx.now().as_ps();
                let hdr_arrival = now.saturating_sub(ser_in - ser_hdr.min(ser_in));
                let t0 = (hdr_arrival + lat.as_ps()).max(now.saturating_sub(ser_out));
                at = SimTime::from_ps(t0.max(now.saturating_sub(ser_in)));
            }
            let f = self.nodes[node as usize].fifo;
            cx.push_fifo(f, at, Ev::Forward(id));
        }
    }

    /// A TLP ends at the node it reached without being forwarded or consumed: its
    /// receive-buffer credits return and its record is freed.
    #[cold]
    #[inline(never)]
    pub(crate) fn discard(&mut self, id: u32, cx: &mut Context<'_, PackedEv>) {
        self.leave_ingress(id, cx);
        self.release(id);
    }

    /// A TLP reached its consumer.
    fn consume(&mut self, id: u32, cx: &mut Context<'_, PackedEv>) {
        if let Dest::Bar { node, .. } = self.pool.tlps[id as usize].dest {
            if self.device_holds(node, id, cx) {
                return;
            }
        }
        self.consume_taken(id, cx);
    }

    /// Request `id` reaches its consumer, which takes it.
    pub(crate) fn consume_taken(&mut self, id: u32, cx: &mut Context<'_, PackedEv>) {
        // The consumer frees the receive buffer.
        let ing = self.leave_ingress(id, cx);
        self.last_rx_func = if ing != NONE {
            self.dirs[ing as usize].rx_func
        } else {
            None
        };
        // Data corrupted on the way: the ECRC check (if any) fails here.
        if self.pool.tlps[id as usize].corrupted && self.ecrc_failed(id, cx) {
            self.release(id);
            return;
        }
        if let (Dest::HostMemory, Kind::MWr) = {
            let t = &self.pool.tlps[id as usize];
            (t.dest, t.kind)
        } {
            self.host_write(id, cx);
            self.release(id);
            return;
        }
        let t = self.pool.tlps[id as usize].clone();
        match (t.dest, t.kind) {
            (Dest::Refused, _) => self.refused_upstream(id, cx),
            (Dest::HostMemory, Kind::MRd) => {
                let host = self.host_bdf;
                let phys = self.dma_target(id, cx.now());
                match phys {
                    Some(p) => {
                        let mut buf = std::mem::take(&mut self.scratch);
                        buf.resize(t.len as usize, 0);
                        self.fabric.host_memory.read(p, &mut buf);
                        // Without poisoned lines (the usual case) the completions
                        // need no line lookups.
                        let poison = if self.poison_lines.is_empty() {
                            Poison::Clean
                        } else {
                            Poison::HostLines(p)
                        };
                        self.send_completions(
                            Origin::Host,
                            host,
                            &t,
                            CplStatus::Sc,
                            &buf,
                            poison,
                            cx,
                        );
                        self.scratch = buf;
                    }
                    None => {
                        self.fault(
                            FaultKind::IommuFault,
                            format!("IOMMU fault: read by {} at {:#x}", t.requester, t.addr),
                        );
                        self.send_completions(
                            Origin::Host,
                            host,
                            &t,
                            CplStatus::Ur,
                            &[],
                            Poison::Clean,
                            cx,
                        );
                    }
                }
            }
            (Dest::Intx { node }, Kind::Intx) => {
                self.intx_arrived(node, ing, t.requester, t.msg_code(), cx)
            }
            (Dest::Rc, Kind::Cpl | Kind::CplD) => self.host_completion(id, cx),
            (Dest::Dma { node }, Kind::Cpl | Kind::CplD) => self.dma_completion(node, id, cx),
            (Dest::Bar { node, .. }, Kind::MWr) if t.poisoned => {
                // The device drops poisoned data and logs it.
                let f = self.nodes[node as usize].func;
                self.poisoned_received(f, false, "memory write", id, cx);
            }
            (
                Dest::Bar {
                    node,
                    func,
                    bar,
                    offset,
                },
                Kind::MWr,
            ) => {
                let data = self.payload(id).to_vec();
                let n = (t.len as usize).min(data.len());
                if self.msix_bar_write((node, func), (bar, offset), &data[..n], cx) {
                    // The function's MSI-X table: the fabric's, not the model's.
                } else {
                    let d = &data[..n];
                    self.call_ep_fn(node, func, cx, |m, cx| m.mem_write(bar, offset, d, cx));
                }
            }
            (
                Dest::Bar {
                    node,
                    func,
                    bar,
                    offset,
                },
                Kind::MRd,
            ) => {
                let mut buf = vec![0u8; t.len as usize];
                let reply = if self.msix_bar_read((node, func), (bar, offset), &mut buf) {
                    Some(ReadReply::Now)
                } else {
                    let b = &mut buf;
                    self.call_ep_fn(node, func, cx, |m, cx| m.mem_read(bar, offset, b, cx))
                };
                let (me, origin) = self.completer_of(node, func);
                match reply {
                    Some(r @ (ReadReply::Now | ReadReply::Poisoned)) => {
                        let poison = Poison::all_if(r == ReadReply::Poisoned);
                        self.send_completions(origin, me, &t, CplStatus::Sc, &buf, poison, cx)
                    }
                    Some(ReadReply::Later(ReadTicket(k))) => self.park_ticket((node, func), k, &t),
                    _ => {
                        self.completer_ur(node, id, cx);
                        let clean = Poison::Clean;
                        self.send_completions(origin, me, &t, CplStatus::Ur, &[], clean, cx)
                    }
                }
            }
            (Dest::Bar { node, .. }, Kind::IoWr) if t.poisoned => {
                // A poisoned I/O write is discarded: Unsupported Request.
                let (me, origin) = (self.ep_bdf(node), self.origin_of(node));
                self.completer_ur(node, id, cx);
                self.send_io_completion(origin, me, &t, CplStatus::Ur, None, false, cx)
            }
            (
                Dest::Bar {
                    node,
                    func,
                    bar,
                    offset,
                },
                Kind::IoRd | Kind::IoWr,
            ) => {
                let write = t.kind == Kind::IoWr;
                let mut buf = if write {
                    let d = self.payload(id);
                    d[..(t.len as usize).min(d.len())].to_vec()
                } else {
                    vec![0u8; t.len as usize]
                };
                let reply = if write {
                    let b = &buf;
                    self.call_ep_fn(node, func, cx, |m, cx| m.io_write(bar, offset, b, cx))
                } else {
                    let b = &mut buf;
                    self.call_ep_fn(node, func, cx, |m, cx| m.io_read(bar, offset, b, cx))
                };
                let (me, origin) = self.completer_of(node, func);
                match reply {
                    Some(r @ (ReadReply::Now | ReadReply::Poisoned)) => {
                        let data = (!write).then_some(&buf[..]);
                        let ep = r == ReadReply::Poisoned && !write;
                        self.send_io_completion(origin, me, &t, CplStatus::Sc, data, ep, cx)
                    }
                    Some(ReadReply::Later(ReadTicket(k))) => self.park_ticket((node, func), k, &t),
                    _ => {
                        self.completer_ur(node, id, cx);
                        self.send_io_completion(origin, me, &t, CplStatus::Ur, None, false, cx)
                    }
                }
            }
            (Dest::Rc, Kind::ErrMsg) => {
                // The root port logs what it receives from its secondary side when its
                // Bridge Control lets error messages through.
                let ing = self
                    .last_rx_func
                    .and_then(|rp| self.dirs.iter().position(|x| x.rx_func == Some(rp)));
                let contained =
                    ing.is_some_and(|d| self.dpc_message(d as u32, t.requester, t.msg_code(), cx));
                if let Some(rp) = self.last_rx_func.filter(|_| !contained) {
                    if self.bridge_forwards_errors(rp) {
                        self.root_error(rp, t.requester, t.msg_code(), cx);
                    }
                }
            }
            (
                Dest::Config {
                    node,
                    func,
                    refuser,
                    ..
                },
                Kind::CfgRd | Kind::CfgWr,
            ) => self.config_request(node, func, refuser, id, &t, cx),
            (Dest::Rc | Dest::Dma { .. }, Kind::VendorMsg) => self.vendor_arrived(id, &t, cx),
            (Dest::Hop { node }, Kind::VendorMsg) => self.vendor_hop_arrived(node, ing, id, &t, cx),
            (Dest::Hop { node }, Kind::PmHop) if t.msg_code() == super::tlp::MSG_LTR => {
                let values = match t.detail {
                    Detail::Ltr { snoop, no_snoop } => (snoop, no_snoop),
                    _ => (0, 0),
                };
                if ing != NONE && ing % 2 == 1 {
                    self.ltr_arrived(node, ing, t.requester, values, cx);
                }
            }
            (Dest::Hop { node }, Kind::PmHop) => {
                self.pm_hop_arrived(node, ing, t.requester, t.msg_code(), cx)
            }
            (Dest::Rc, Kind::TransReq) => self.translation_request(&t, cx),
            (Dest::Dma { node }, Kind::AtsInv) => self.ats_invalidate_request(node, id, cx),
            (Dest::Rc, Kind::AtsInvCpl) => self.ats_invalidate_completion(&t, cx),
            (Dest::Rc, Kind::PageReq) => self.host_page_request(&t, cx),
            (Dest::Dma { node }, Kind::PrgResp) => self.prg_response(node, id, cx),
            (Dest::Rc, Kind::PmMsg) => {
                if let Some(rp) = self.last_rx_func {
                    self.root_pme(rp, t.requester, cx);
                }
            }
            _ => self.consume_rare(id, &t, cx),
        }
        self.release(id);
    }

    /// `consume` for the kinds off the hot path (kept out of its dispatch): raw TLPs,
    /// AtomicOps, and TLPs that reach a consumer that takes none of their kind.
    #[cold]
    #[inline(never)]
    fn consume_rare(&mut self, id: u32, t: &Tlp, cx: &mut Context<'_, PackedEv>) {
        match (t.dest, t.kind) {
            (_, Kind::Raw) => self.raw_arrived(id, cx),
            (Dest::HostMemory, Kind::Atomic) => self.host_atomic(id, cx),
            (
                Dest::Bar {
                    node,
                    func,
                    bar,
                    offset,
                },
                Kind::Atomic,
            ) => self.device_atomic((node, func, bar, offset), id, cx),
            _ => {
                // A completion routed to a BAR, a request to the RC's completion sink…
                self.fault(
                    FaultKind::NotRoutable,
                    format!("{:?} TLP with destination {:?} dropped", t.kind, t.dest),
                );
            }
        }
    }

    /// A configuration request reached `node`: the target function's configuration
    /// space answers, with the target's ID as Completer ID (a write also invalidates
    /// the cached routes: bus numbers, BARs, windows and enables may have changed).
    /// `func` NONE: `refuser` (a port or the device below the last bridge; NONE: the
    /// root complex) answers Unsupported Request with its own ID and logs it.
    fn config_request(
        &mut self,
        node: u32,
        func: u32,
        refuser: u32,
        id: u32,
        t: &Tlp,
        cx: &mut Context<'_, PackedEv>,
    ) {
        // Who answers: the target function, or the refusing function.
        let answerer = match (func, refuser) {
            (NONE, NONE) => None,
            (NONE, r) => Some(FnId(r)),
            (f, _) => Some(FnId(f)),
        };
        let completer = answerer.map_or(self.host_bdf, |f| self.fabric.bdf(f));
        let origin = match answerer {
            Some(f) if node != self.rc_node => Origin::Function(f),
            _ => Origin::Host,
        };
        // A poisoned configuration write is discarded: Unsupported Request (2.7.2.2).
        if func == NONE || (t.kind == Kind::CfgWr && t.poisoned) {
            if let Some(f) = answerer {
                self.signal_error(f, AER_UNSUPPORTED, true, Some(id), cx);
            }
            self.send_io_completion(origin, completer, t, CplStatus::Ur, None, false, cx);
            return;
        }
        // A component still initializing after a reset: Configuration Request Retry
        // Status (the root complex re-issues the request).
        if self
            .ready_at
            .get(node as usize)
            .is_some_and(|&r| cx.now().as_ps() < r)
        {
            self.send_io_completion(origin, completer, t, CplStatus::Crs, None, false, cx);
            return;
        }
        let f = FnId(func);
        let be = pcielab_wire::ByteEnables::from_bits_truncate(t.first_be());
        let reg = (t.addr as u16) & 0xffc;
        if t.kind == Kind::CfgWr {
            let mut dw = [0u8; 4];
            let p = self.payload(id);
            let n = p.len().min(4);
            dw[..n].copy_from_slice(&p[..n]);
            let scope = self.flr_scope(f);
            if self
                .fabric
                .config_write_fn_flr(f, reg, u32::from_le_bytes(dw), be)
            {
                self.function_level_reset(scope, cx);
            }
            self.invalidate_routes();
            self.after_config_write(f, cx);
            self.send_io_completion(origin, completer, t, CplStatus::Sc, None, false, cx);
        } else {
            let v = self.fabric.functions[func as usize].config.read_u32(reg);
            let v = v.to_le_bytes();
            self.send_io_completion(origin, completer, t, CplStatus::Sc, Some(&v), false, cx);
        }
    }

    /// What follows a configuration write to function `f`: a root port delivers its
    /// next queued PME once software has cleared PME Status, and re-evaluates its
    /// interrupt (Root Error Command/Status, Root Control/Status, MSI, INTx); a
    /// function signalling PME re-evaluates PME_Status and PME_En.
    pub(crate) fn after_config_write(&mut self, f: FnId, cx: &mut Context<'_, PackedEv>) {
        let Some(func) = self.fabric.functions.get(f.0 as usize) else {
            return;
        };
        if matches!(func.role, Role::RootPort { .. }) {
            self.root_port_interrupt(f, cx);
            // A PME delivered now is a new rising condition (software cleared PME
            // Status, which the evaluation above saw).
            if self.pme_deliver_queued(f) {
                self.root_port_interrupt(f, cx);
            }
        }
        if self.pme_state.contains_key(&f.0) {
            self.pme_check(f, cx);
        }
        if self.is_link_port(f) {
            self.refresh_aspm();
        }
        self.refresh_ecrc(f);
        self.refresh_bus_master(f, cx);
        self.refresh_ats(f, cx);
        self.dpc_config_written(f, cx);
        self.msix_send_released(f, cx);
        self.refresh_egress_blocking(f);
        self.aer_records_written(f);
        // A root port's hot-plug interrupt was evaluated with its others above.
        if matches!(
            self.fabric.functions[f.0 as usize].role,
            Role::SwitchDownstream { .. }
        ) {
            self.hotplug_check(f, cx);
        }
        if matches!(
            self.fabric.functions[f.0 as usize].role,
            Role::RootPort { .. } | Role::SwitchDownstream { .. } | Role::SwitchUpstream
        ) {
            self.port_control_written(f, cx);
        }
    }

    /// Forgets every cached route (after a configuration write: routing may change).
    pub(crate) fn invalidate_routes(&mut self) {
        self.route_cache.clear();
        self.route_last = NO_ROUTE;
        self.refresh_funcs();
    }

    pub(crate) fn origin_of(&self, node: u32) -> Origin {
        match self.nodes[node as usize].func {
            Some(f) => Origin::Function(f),
            None => Origin::Host,
        }
    }

    pub(crate) fn ep_bdf(&self, node: u32) -> Bdf {
        match &self.nodes[node as usize].kind {
            NodeKind::Ep(ep) => ep.bdf,
            _ => self.host_bdf,
        }
    }

    /// A TLP that crosses one link only, direction `d`, to `dest` at its receiver: a
    /// message handled hop by hop (`code` in `Detail::Msg`).
    pub(crate) fn one_link_tlp(
        &self,
        d: u16,
        kind: Kind,
        requester: Bdf,
        code: u8,
        dest: Dest,
    ) -> Tlp {
        let mut path = [0u16; MAX_PATH];
        path[0] = d;
        Tlp {
            detail: Detail::Msg(code),
            path,
            hops: 1,
            dest,
            ..Tlp::new(kind, requester, 0, 0)
        }
    }

    /// Answers read request `req` with completions split at RCB/MPS.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send_completions(
        &mut self,
        origin: Origin,
        completer: Bdf,
        req: &Tlp,
        status: CplStatus,
        data: &[u8],
        poison: Poison,
        cx: &mut Context<'_, PackedEv>,
    ) {
        if req.pieces > 1 && req.kind == Kind::MRd {
            self.answer_read_burst(origin, completer, req, status, data, poison, cx);
            return;
        }
        let base = Tlp {
            completer,
            tag: req.tag,
            detail: Detail::Completion {
                byte_count: req.len.min(4096) as u16,
                status,
            },
            dest: Dest::Rc,
            ..Tlp::new(Kind::Cpl, req.requester, req.addr, 0)
        };
        if status != CplStatus::Sc || data.is_empty() {
            let _ = self.inject(origin, base, req.requester, cx);
            return;
        }
        let Ok(it) = completions(
            req.addr,
            req.len,
            self.cfg.rcb as u32,
            self.cfg.mps as u32,
            CplPolicy::Maximal,
        ) else {
            self.fault(
                FaultKind::Split,
                format!(
                    "cannot split completions of a read at {:#x} len {}",
                    req.addr, req.len
                ),
            );
            return;
        };
        // Burst mode: the root complex's whole-MPS completions of a memory read go
        // together (see the `burst` module).
        let group = self.cpl_burst_max > 1
            && origin == Origin::Host
            && req.kind == Kind::MRd
            && req.pasid == NONE
            && matches!(poison, Poison::Clean);
        let mps = self.cfg.mps as u32;
        let mut it = it.peekable();
        while let Some(ch) = it.next() {
            let (mut len, mut pieces) = (ch.len, 1u32);
            if group && ch.len == mps && ch.addr & 3 == 0 {
                while pieces < self.cpl_burst_max {
                    match it.peek() {
                        Some(n) if n.len == mps => {
                            len += mps;
                            pieces += 1;
                            it.next();
                        }
                        _ => break,
                    }
                }
            }
            let s = ch.offset as usize;
            let e = (s + len as usize).min(data.len());
            let p = self.pool.alloc_payload(data.get(s..e).unwrap_or(&[]));
            let mut t = base.clone();
            t.kind = Kind::CplD;
            t.addr = ch.addr;
            t.len = len;
            t.set_byte_count(ch.byte_count);
            t.data = p;
            t.pieces = pieces as u8;
            t.poisoned = self.completion_poisoned(poison, s as u64, len as u64);
            if let Err(e) = self.inject(origin, t, req.requester, cx) {
                self.fault(
                    FaultKind::NotRoutable,
                    format!("completion not routable: {e}"),
                );
            }
        }
    }

    /// Answers I/O request `req`: a Cpl (IOWr, or an error status) or a CplD of one DW
    /// with `data` in its byte lanes (IORd). Byte Count is 4 and Lower Address 0, as
    /// for every completion of a request other than a memory read.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send_io_completion(
        &mut self,
        origin: Origin,
        completer: Bdf,
        req: &Tlp,
        status: CplStatus,
        data: Option<&[u8]>,
        poisoned: bool,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let mut t = Tlp {
            completer,
            tag: req.tag,
            detail: Detail::Completion {
                byte_count: 4,
                status,
            },
            dest: Dest::Rc,
            ..Tlp::new(Kind::Cpl, req.requester, 0, 0)
        };
        if let (CplStatus::Sc, Some(d)) = (status, data) {
            let mut dw = [0u8; 4];
            let front = (req.addr & 3) as usize;
            let n = d.len().min(4 - front);
            dw[front..front + n].copy_from_slice(&d[..n]);
            t.kind = Kind::CplD;
            t.len = 4;
            t.data = self.pool.alloc_payload(&dw);
            t.poisoned = poisoned;
        }
        if let Err(e) = self.inject(origin, t, req.requester, cx) {
            self.fault(
                FaultKind::NotRoutable,
                format!("completion not routable: {e}"),
            );
        }
    }

    /// Records a fault (see [`super::fault`]).
    #[cold]
    pub(crate) fn fault(&mut self, kind: FaultKind, message: impl Into<String>) {
        self.errors.push(SimFault::new(kind, message));
    }

    // ---------------------------------------------------------------- endpoints

    /// The directions down from `node` (one per downstream link).
    pub(crate) fn down_dirs(&self, node: u32) -> Vec<u16> {
        (0..self.dirs.len())
            .filter(|&d| d % 2 == 0 && self.dirs[d].from == node)
            .map(|d| d as u16)
            .collect()
    }

    /// The direction up from `node` (to its upstream neighbour), if it has one.
    pub(crate) fn up_dir(&self, node: u32) -> Option<u16> {
        (0..self.dirs.len())
            .find(|&d| d % 2 == 1 && self.dirs[d].from == node)
            .map(|d| d as u16)
    }

    // ---------------------------------------------------------------- host

    /// Every direction's counters at `now` (ps): a low-power state still going on
    /// counts as entered, with its residency so far.
    pub(crate) fn dir_counters(&self, now: u64) -> Vec<(String, DirCounters)> {
        (0..self.dirs.len())
            .map(|d| {
                let mut c = self.dirs[d].counters;
                let st = self.low_power(d, now);
                if let Some(l0s_at) = st.l0s {
                    c.l0s_entries += 1;
                    c.l0s_ps += st.l1.unwrap_or(now) - l0s_at;
                }
                if let Some(l1_at) = st.l1 {
                    c.l1_entries += 1;
                    c.l1_ps += now - l1_at;
                }
                (self.dirs[d].name.clone(), c)
            })
            .collect()
    }
}

impl World for Engine {
    type Event = PackedEv;
    fn handle(&mut self, ev: PackedEv, cx: &mut Context<'_, PackedEv>) {
        match ev.unpack() {
            Ev::TxDone(d) => {
                self.dirs[d as usize].busy = false;
                self.try_send(d, cx);
            }
            Ev::Arrive(d, WireItem(w, tx_done)) => {
                if self.dirs[d as usize].postponed.is_empty() || !self.postpone(d, w, cx) {
                    self.arrive(d, w, cx);
                }
                if tx_done {
                    // The wire's TxDone, due now right after the arrival (nothing runs
                    // in between: the same as delivering it as the next event).
                    self.dirs[d as usize].busy = false;
                    self.try_send(d, cx);
                } else {
                    self.resolve_deferred_tx(d, cx);
                }
            }
            Ev::AckTimer(d) => {
                let dir = &mut self.dirs[d as usize];
                dir.rx_ack_pending = false;
                let s = dir.rx_seq.last_good();
                self.queue_dllp(d ^ 1, Dllp::Ack(s), true, cx);
            }
            Ev::FcTimer(d, c) => {
                self.dirs[d as usize].rx_fc_timer[c as usize] = None;
                self.send_update_fc(d, c as usize, cx);
            }
            Ev::FcRefresh(d) => self.fc_refresh(d, cx),
            Ev::ReplayTimer(d) => {
                let now = cx.now();
                let dir = &mut self.dirs[d as usize];
                // The timer does not run while the link cannot transmit (a replay in
                // progress, or Recovery after a retrain): it restarts once the wire is
                // free.
                let wire_free = SimTime::from_ps(dir.free_at_ps);
                match dir.replay.fire(now, wire_free) {
                    Ok(false) => return,
                    Err(t) => {
                        cx.schedule_at(t, Ev::ReplayTimer(d));
                        return;
                    }
                    Ok(true) => {}
                }
                let dir = &mut self.dirs[d as usize];
                if !dir.replay.is_empty() {
                    dir.counters.replay_timeouts += 1;
                    self.start_replay(d, cx);
                    self.try_send(d, cx);
                    if let Some(f) = self.dirs[(d ^ 1) as usize].rx_func {
                        self.signal_correctable(f, AER_CORR_REPLAY_TIMEOUT, cx);
                    }
                }
            }
            Ev::Forward(id) => self.forward(id, cx),
            Ev::Consume(id) => self.consume(id, cx),
            Ev::EpTimer(n, tok) => {
                self.call_ep(n, cx, |m, cx| m.timer(tok, cx));
            }
            Ev::EthFrame(slot) => self.ethernet_arrive(slot, cx),
            Ev::DmaTimeout(n, _) => self.dma_timeout(n, cx),
            Ev::HostTimeout(tag) => {
                if self.host_reqs.remove(&tag).is_some() {
                    self.host_done.insert(tag, HostRead::Timeout);
                    self.host_tags.push(tag);
                }
            }
            Ev::HostSend(id) => {
                if self.pool.tlps[id as usize].kind == Kind::PrgResp {
                    self.prg_response_leaves(id, cx.now());
                }
                let t = &self.pool.tlps[id as usize];
                if t.hops > 0 {
                    let d = t.path[0];
                    self.enqueue(d, id, cx);
                } else {
                    cx.schedule_now(Ev::Consume(id));
                }
            }
            Ev::EpComplete(_) => {}
            Ev::PmeResend(f) => self.pme_resend(FnId(f), cx),
            Ev::LinkTrained(d, gen) => self.link_trained(d, gen, cx),
        }
    }
}

/// The root port or switch downstream port that receives on this (upward) direction
/// has Bus Master Enable clear.
pub(crate) const BME_PORT: u8 = 1;
