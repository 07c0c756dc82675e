//! The timed fabric's world: link directions with DLL and flow control, nodes (root
//! complex, switches, endpoints), routing, the root complex's host side, and the
//! event handlers. More `impl Engine` blocks live beside it: `dma` (the endpoint DMA
//! engine), `aer` (error logging and signalling), `interrupts` (root-port interrupts,
//! INTx, MSI/MSI-X), `pm` (PME and PME_Turn_Off), `vendor` (vendor-defined messages)
//! and the cross-cutting features listed in ARCHITECTURE.md.

use super::endpoint::{EpCmd, VendorMessage};
use super::event::*;
use super::fault::{FaultKind, SimFault};
use super::link::state::Dir;
use super::node::state::Node;
use super::packed::{PackedEv, KIND_SLOTS};
use super::pool::TlpPool;
use super::rc::state::{ErrorMessage, HostRead, IntxEvent, PmeMessage, PmeToAck, RootComplex};
use super::regs::*;
use super::route::state::Routes;
use super::slot::state::EthCables;
use super::switch::state::Switches;
use super::tlp::*;
use super::trace::Trace;
use crate::functional::{Fabric, FnId, Interrupt};
use crate::params::SimConfig;
use pcielab_sim::{Context, EventKey, Rng, SimTime, World};
use pcielab_wire::Bdf;
use std::collections::{HashMap, HashSet, VecDeque};

pub(crate) use crate::inthash::IntMap;

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
    /// Per node: until when (ps) it is initializing after a reset and answers
    /// configuration requests with CRS (`SimConfig::device_ready_time`).
    pub(crate) ready_at: Vec<u64>,
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
    /// Function that received the TLP being consumed (for AER logging).
    pub(crate) last_rx_func: Option<FnId>,
    /// Why a raw TLP in flight (its id) is not carried (see the `raw` module).
    pub(crate) raw_why: HashMap<u32, String>,
    /// The IOMMU, when configured.
    pub(crate) iommu: Option<super::iommu::Iommu>,
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
    /// Most small read requests of several DMAs sent as one scatter burst, before
    /// sizing by their length and the link's credits (1: none; see the `burst`
    /// module).
    pub(crate) scatter_max: u32,
    /// Scatter burst sizes by piece length: (bytes, most read requests, most
    /// completions), worked out when a length is first seen.
    pub(crate) scatter_fits: Vec<(u32, u32, u32)>,
    /// AER Multiple Header Recording: per function, the errors recorded behind the
    /// one in the Header Log, oldest first (see [`record_first_error`]).
    pub(crate) aer_records: IntMap<u32, VecDeque<(u32, LoggedHeader)>>,
    /// Translation Requests outstanding when their device turned ATS off: (node, tag).
    pub(crate) ats_orphans: Vec<(u32, u16)>,
    /// PM_PME messages the root ports received.
    pub pme_messages: Vec<(SimTime, PmeMessage)>,
    /// Per function signalling PME: asserted (PME_Status and PME_En) as last
    /// evaluated, and the pending re-send.
    pub(crate) pme_state: IntMap<u32, (bool, Option<EventKey>)>,
    /// Vendor-defined messages the root complex received: (time, requester, message).
    pub vendor_messages: Vec<(SimTime, Bdf, VendorMessage)>,
    /// PME_TO_Ack messages the root ports received.
    pub pme_to_acks: Vec<(SimTime, PmeToAck)>,
    /// Endpoint nodes that received PME_Turn_Off and have not acknowledged it yet.
    pub(crate) turn_off_held: HashSet<u32>,
    /// Downstream Port Containments, in order (see the `dpc` module).
    pub(crate) dpc_events: Vec<super::dpc::state::DpcEvent>,
    /// LTR messages the root ports received (see the `ltr` module).
    pub(crate) ltr_messages: super::ltr::state::LtrLog,
    /// Per upward link direction: the last LTR values sent over it (for L1.2).
    pub(crate) ltr_link: IntMap<u32, (u16, u16)>,
    /// The root complex's state: its host side (requests in flight, memory and its cache,
    /// split peer reads), root ports' interrupt and PME state, and the host side of ATS and
    /// PRI.
    pub(crate) rc: RootComplex,
    /// Routing state: the direction between adjacent nodes and the routes computed so far.
    pub(crate) routes: Routes,
    /// What switches keep: PME_Turn_Off handshakes, LTR values of their ports, hot-plug
    /// interrupt conditions.
    pub(crate) switches: Switches,
    /// Events handled, by [`PackedEv::kind_slot`].
    pub(crate) event_kinds: [u64; KIND_SLOTS],
}

impl Engine {
    // ---------------------------------------------------------------- TLP pool
    /// Drops one holder of TLP `id` (see [`TlpPool::release`]), taking back the host
    /// page lent to it when it goes.
    #[inline(never)]
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

    // ---------------------------------------------------------------- transmitter

    // ---------------------------------------------------------------- receiver

    /// Records a fault (see [`super::fault`]).
    #[cold]
    pub(crate) fn fault(&mut self, kind: FaultKind, message: impl Into<String>) {
        self.errors.push(SimFault::new(kind, message));
    }

    // ---------------------------------------------------------------- endpoints

    // ---------------------------------------------------------------- host
}

impl World for Engine {
    type Event = PackedEv;
    fn handle(&mut self, ev: PackedEv, cx: &mut Context<'_, PackedEv>) {
        self.event_kinds[ev.kind_slot()] += 1;
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
                if self.rc.host_reqs.remove(&tag).is_some() {
                    self.rc.host_done.insert(tag, HostRead::Timeout);
                    self.rc.host_tags.push(tag);
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
