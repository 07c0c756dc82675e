//! A link direction's state (below the engine): its transmitter (egress queues, the
//! credit gate, the replay buffer and timer), its receiver (sequence numbers, Ack/Nak
//! and UpdateFC state) and its wire, with the flow-control and data-link state
//! machines of `fc` and `dll`.

use crate::functional::FnId;
use crate::params::BufferCredits;
use crate::phy::LinkTiming;
use crate::timed::event::*;
use crate::timed::trace::DirCounters;
use pcielab_sim::{EventKey, FifoId, SimTime};
use std::collections::VecDeque;

/// A transmit-queue entry packs its data credits (low 24 bits) with the number of
/// TLPs it stands for less one (high 8 bits; see the `burst` module).
pub(crate) const Q_PIECES_SHIFT: u32 = 24;

/// The data-credit bits of a packed queue entry.
pub(crate) const Q_DATA_MASK: u32 = (1 << Q_PIECES_SHIFT) - 1;

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
    pub tx_fc: crate::timed::fc::TxCredits,
    // DLL tx
    /// The replay buffer and replay timer (see `dll::TxReplay`).
    pub replay: crate::timed::dll::TxReplay,
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
    /// DLLPs waiting for the wire, each with its background flag: an UpdateFC of the
    /// periodic refresh travels as a background event (its arrival is no work a run
    /// waits for: see `Engine::fc_refresh`).
    pub dllq: VecDeque<(Dllp, bool)>,
    // DLL rx (receiver at `to`)
    /// The receiver's sequence check (NEXT_RCV_SEQ, Nak outstanding).
    pub rx_seq: crate::timed::dll::RxSeq,
    pub rx_ack_pending: bool,
    /// FIFO stream of the receiver's ACK-latency timer events.
    pub ack_fifo: FifoId,
    // FC rx
    pub rx_buf: BufferCredits,
    /// The receiver's flow-control accounting.
    pub rx_fc: crate::timed::fc::RxCredits,
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

/// The root port or switch downstream port that receives on this (upward) direction
/// has Bus Master Enable clear.
pub(crate) const BME_PORT: u8 = 1;
