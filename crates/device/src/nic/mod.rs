//! The descriptor-ring NIC of pcie-bench (seed 001, §5–6) as a device model: transmit
//! and receive rings in host memory, doorbells, descriptor fetch and write-back by DMA,
//! packet data by DMA, MSI-X per queue with interrupt moderation, several queue pairs,
//! and a MAC with an Ethernet line rate.
//!
//! Two variants, as pcie-bench's NIC model analyses them ([`NicConfig::simple`] and
//! [`NicConfig::batched`]); they differ only in their settings:
//!
//! | per packet                      | simple        | batched (82599-like)       |
//! |---------------------------------|---------------|----------------------------|
//! | transmit descriptor fetch       | 1 descriptor  | 40 descriptors per read    |
//! | transmit descriptor write-back  | none          | 8 descriptors per write    |
//! | receive descriptor fetch        | 1 per packet  | 1 per packet               |
//! | receive descriptor write-back   | 1 per packet  | 1 per packet               |
//! | MSI-X per path                  | every packet  | every 32 packets (or none) |
//!
//! What the host does (doorbells, head pointer reads, polling) is its driver's choice;
//! `pcielab_fabric::drivers::nic` is the driver that goes with this device.
//!
//! # Registers (BAR 0, 16 KiB, little endian)
//!
//! ```text
//!   0x000  u32  CTRL         bit 0: enable (doorbells are taken only while set)
//!   0x004  u32  QUEUES       queue pairs (read only)
//!   0x008  u32  IRQ_EVERY    packets per interrupt and path (0: no interrupts)
//!   0x00c  u32  IRQ_DELAY    moderation timer, ns: a pending interrupt fires this
//!                            long after its first packet at the latest (0: never)
//!   0x010  u64  TX_PACKETS   0x018 TX_BYTES   0x020 RX_PACKETS   0x028 RX_BYTES
//!   0x030  u64  RX_DROPPED   frames lost for want of a receive buffer
//!   0x038  u64  ERRORS       malformed descriptors, bad doorbells, failed DMAs
//!   queue pair q at 0x100 + 0x40 × q:
//!   +0x00  u64  TX_BASE      +0x08 u32 TX_SIZE (entries)   +0x0c u32 TX_TAIL (doorbell)
//!   +0x10  u32  TX_HEAD      (read only: descriptors done)
//!   +0x18  u64  RX_BASE      +0x20 u32 RX_SIZE (entries)   +0x24 u32 RX_TAIL (doorbell)
//!   +0x28  u32  RX_HEAD      (read only: buffers filled)
//! ```
//!
//! A descriptor is 16 bytes: `u64` buffer address, `u16` length (transmit: the
//! packet's; receive: the buffer's, written back as the packet's), `u8` command
//! (bit 0: end of packet), `u8` status (bit 0: descriptor done, bit 1: error), and
//! 4 reserved bytes. Transmit queue q raises MSI-X vector 2q, receive queue q vector
//! 2q + 1.
//!
//! # Example
//!
//! ```
//! use pcielab_device::nic::{Nic, NicConfig};
//! let nic = Nic::new(NicConfig::batched(2));
//! assert_eq!(nic.config().queues, 2);
//! assert_eq!(nic.config().tx_desc_fetch, 40);
//! ```

mod mac;

pub use mac::{Ethernet, FrameSizes, FCS, IFG, MAX_FRAME, MIN_FRAME, PREAMBLE};

use crate::model::{Cx, DeviceModel, DmaId, DmaPolicy, ReadReply};
use crate::optable::OpTable;
use crate::DeviceTiming;
use pcielab_sim::{SimDuration, SimTime};
use std::collections::VecDeque;

/// Bytes of one descriptor.
pub const DESC: u64 = 16;
/// Size of the register BAR.
pub const BAR_SIZE: u64 = 16 * 1024;
/// Offset of queue pair 0's registers; each pair has [`QUEUE_STRIDE`] bytes.
pub const QUEUE_BASE: u64 = 0x100;
/// Bytes of registers per queue pair.
pub const QUEUE_STRIDE: u64 = 0x40;
/// Most queue pairs a NIC has.
pub const MAX_QUEUES: u16 = 64;
/// Descriptor command bit: end of packet.
pub const CMD_EOP: u8 = 1;
/// Descriptor status bit: done.
pub const STATUS_DD: u8 = 1;
/// Descriptor status bit: error (a malformed descriptor, a failed DMA).
pub const STATUS_ERR: u8 = 2;

/// Register offsets.
pub mod reg {
    /// Control: bit 0 enables the NIC.
    pub const CTRL: u64 = 0x000;
    /// Queue pairs (read only).
    pub const QUEUES: u64 = 0x004;
    /// Packets per interrupt and path.
    pub const IRQ_EVERY: u64 = 0x008;
    /// Interrupt moderation timer, ns.
    pub const IRQ_DELAY: u64 = 0x00c;
    /// Counters (read only, u64): transmitted packets.
    pub const TX_PACKETS: u64 = 0x010;
    /// Transmitted packet bytes (FCS not counted).
    pub const TX_BYTES: u64 = 0x018;
    /// Received packets.
    pub const RX_PACKETS: u64 = 0x020;
    /// Received packet bytes.
    pub const RX_BYTES: u64 = 0x028;
    /// Frames dropped for want of a receive buffer.
    pub const RX_DROPPED: u64 = 0x030;
    /// Errors.
    pub const ERRORS: u64 = 0x038;
    /// In a queue pair: transmit ring base.
    pub const TX_BASE: u64 = 0x00;
    /// Transmit ring entries.
    pub const TX_SIZE: u64 = 0x08;
    /// Transmit tail (doorbell).
    pub const TX_TAIL: u64 = 0x0c;
    /// Transmit head (read only).
    pub const TX_HEAD: u64 = 0x10;
    /// Receive ring base.
    pub const RX_BASE: u64 = 0x18;
    /// Receive ring entries.
    pub const RX_SIZE: u64 = 0x20;
    /// Receive tail (doorbell).
    pub const RX_TAIL: u64 = 0x24;
    /// Receive head (read only).
    pub const RX_HEAD: u64 = 0x28;
}

/// Where received frames come from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RxSource {
    /// Nothing arrives (a transmit-only NIC).
    Off,
    /// Frames arrive at the MAC's line rate, spread over the queues in turn; a frame
    /// that finds no buffer is dropped and counted.
    LineRate(FrameSizes),
    /// A frame arrives whenever a receive buffer is ready: what PCIe and the host
    /// allow, with no line rate (to measure PCIe's limit).
    Saturate(FrameSizes),
    /// Transmitted frames come back on the receive side of the same queue (MAC
    /// loopback).
    Loopback,
}

/// How a NIC is built.
#[derive(Debug, Clone, PartialEq)]
pub struct NicConfig {
    /// Queue pairs (1..=64).
    pub queues: u16,
    /// Transmit descriptors per descriptor read.
    pub tx_desc_fetch: u32,
    /// Transmit descriptors per write-back (0: no write-back; the host reads the head
    /// register).
    pub tx_writeback: u32,
    /// Packets per interrupt and path at reset (0: no interrupts); the driver may
    /// change it (`IRQ_EVERY`).
    pub irq_every: u32,
    /// Interrupt moderation timer at reset (`IRQ_DELAY`).
    pub irq_delay: SimDuration,
    /// How long a partial batch of transmit descriptors waits for the rest before the
    /// NIC fetches what it has.
    pub fetch_wait: SimDuration,
    /// Transmit packets being read at once per queue.
    pub tx_inflight: u32,
    /// Transmit descriptor reads in flight at once per queue.
    pub fetch_inflight: u32,
    /// Received packets being written at once per queue: more frames wait in the
    /// receive FIFO, so that the NIC's descriptor reads are not stuck behind a long
    /// queue of its own writes.
    pub rx_inflight: u32,
    /// Bytes the receive FIFO holds per queue; a frame arriving to a full FIFO is
    /// dropped and counted.
    pub rx_fifo: u64,
    /// The MAC's line rate; `None`: the MAC takes frames as fast as they come.
    pub eth: Option<Ethernet>,
    /// Where received frames come from.
    pub rx_source: RxSource,
    /// The NIC's core clock, datapath and latencies (the timed simulator charges them).
    pub timing: DeviceTiming,
    /// The tags of its read requests: `count` tags from 0 (`None`: the host's pool).
    pub tags: Option<u16>,
    /// Sent frames go out on the cable to another device (`Cx::ethernet_send`).
    pub cable: bool,
    /// The BAR its registers are in (0; NetTLP serves a device's registers in BAR 4).
    pub bar: u8,
}

impl NicConfig {
    /// pcie-bench's simple NIC: one descriptor fetch per packet, no transmit
    /// write-back, an interrupt per packet and path.
    pub fn simple(queues: u16) -> NicConfig {
        NicConfig {
            queues,
            tx_desc_fetch: 1,
            tx_writeback: 0,
            irq_every: 1,
            irq_delay: SimDuration::ZERO,
            fetch_wait: SimDuration::ZERO,
            tx_inflight: 64,
            fetch_inflight: 32,
            rx_inflight: 8,
            rx_fifo: 512 * 1024,
            eth: None,
            rx_source: RxSource::Off,
            timing: DeviceTiming::NONE,
            tags: None,
            cable: false,
            bar: 0,
        }
    }

    /// The descriptor-batching NIC of pcie-bench's model (Intel 82599-like): 40
    /// descriptors per fetch, write-back of 8, an interrupt per 32 packets (moderation
    /// timer 100 µs).
    pub fn batched(queues: u16) -> NicConfig {
        NicConfig {
            tx_desc_fetch: 40,
            tx_writeback: 8,
            irq_every: 32,
            irq_delay: SimDuration::from_us(100),
            fetch_wait: SimDuration::from_us(2),
            ..NicConfig::simple(queues)
        }
    }

    /// Checks the settings.
    pub fn check(&self) -> Result<(), String> {
        if self.queues == 0 || self.queues > MAX_QUEUES {
            return Err(format!(
                "{} queue pairs are not allowed; allowed: 1..={MAX_QUEUES}",
                self.queues
            ));
        }
        if self.tx_desc_fetch == 0 || self.tx_desc_fetch > 256 {
            return Err(format!(
                "tx_desc_fetch {} is not allowed; allowed: 1..=256 descriptors",
                self.tx_desc_fetch
            ));
        }
        if self.tx_writeback > 256 {
            return Err(format!(
                "tx_writeback {} is not allowed; allowed: 0..=256 descriptors",
                self.tx_writeback
            ));
        }
        if self.rx_inflight == 0 {
            return Err("rx_inflight 0 would never receive; allowed: at least 1".into());
        }
        if self.fetch_inflight == 0 {
            return Err("fetch_inflight 0 would never fetch; allowed: at least 1".into());
        }
        if self.tx_inflight == 0 {
            return Err("tx_inflight 0 would never send; allowed: at least 1".into());
        }
        Ok(())
    }
}

/// Counters of a NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NicStats {
    /// Packets transmitted (left the MAC).
    pub tx_packets: u64,
    /// Packet bytes transmitted (FCS not counted).
    pub tx_bytes: u64,
    /// Packets received into host buffers.
    pub rx_packets: u64,
    /// Packet bytes received.
    pub rx_bytes: u64,
    /// Frames dropped because the receive FIFO was full (no buffers posted in time).
    pub rx_dropped: u64,
    /// Frames dropped because they did not fit their buffer.
    pub rx_oversize: u64,
    /// Descriptors that were malformed (length 0 or over the limit).
    pub bad_descriptors: u64,
    /// Doorbells that were out of range, on an unset ring or while disabled.
    pub bad_doorbells: u64,
    /// DMAs that failed (an Unsupported Request, an IOMMU fault, a timeout).
    pub dma_errors: u64,
    /// Register accesses of the wrong size or outside the registers.
    pub bad_registers: u64,
    /// Descriptor reads issued.
    pub desc_reads: u64,
    /// Descriptor write-backs issued.
    pub writebacks: u64,
    /// MSI-X messages raised.
    pub interrupts: u64,
    /// DMAs that finished after their ring was set up anew (dropped).
    pub stale_dmas: u64,
    /// Picoseconds the MAC's transmit side sat idle between frames (after the first).
    pub mac_idle_ps: u64,
}

/// One transmit descriptor slot taken by the NIC.
#[derive(Debug, Clone, Copy, Default)]
struct TxSlot {
    addr: u64,
    len: u16,
    cmd: u8,
    done: bool,
    error: bool,
}

#[derive(Debug, Default)]
struct Ring {
    base: u64,
    size: u32,
    tail: u32,
    /// Next descriptor to fetch.
    fetch: u32,
    /// Descriptors done, in ring order (what `HEAD` reads).
    head: u32,
}

impl Ring {
    /// The host address of descriptor `idx`. A ring that runs past the top of the
    /// 64-bit address space saturates there instead of wrapping to low memory: the DMA
    /// then runs past 2^64 and fails as any DMA to a bad address does (counted).
    fn desc_addr(&self, idx: u32) -> u64 {
        self.base.saturating_add(idx as u64 * DESC)
    }

    /// Where descriptor `idx` sits counting from the head (its slot in the queue's
    /// in-order lists).
    fn pos(&self, idx: u32) -> usize {
        ((idx + self.size - self.head) % self.size) as usize
    }

    fn avail(&self) -> u32 {
        if self.size == 0 {
            0
        } else {
            (self.tail + self.size - self.fetch) % self.size
        }
    }
}

#[derive(Debug, Default)]
struct Moderation {
    pending: u32,
    /// The generation of the armed timer (`None`: none armed); an interrupt raised
    /// by count starts a new generation, so an older timer does nothing.
    armed: Option<u16>,
    generation: u16,
}

#[derive(Debug, Default)]
struct Queue {
    tx: Ring,
    rx: Ring,
    /// Transmit slots from `tx.head` on, fetched or not yet (`None` until fetched).
    tx_slots: VecDeque<Option<TxSlot>>,
    /// Fetched transmit descriptors whose packet is not read yet (ring indices).
    tx_ready: VecDeque<u32>,
    tx_reading: u32,
    tx_fetching: u32,
    fetch_timer: bool,
    /// A partial batch of transmit descriptors is not fetched before this (the last
    /// doorbell plus `fetch_wait`).
    fetch_deadline: SimTime,
    /// Done transmit descriptors not written back yet.
    tx_wb_pending: u32,
    /// Their status bytes.
    tx_wb_status: Vec<u8>,
    tx_irq: Moderation,
    /// Receive descriptors fetched, by ring index from `rx.head`; `None` until fetched.
    rx_slots: VecDeque<Option<(u64, u16)>>,
    /// Receive descriptors being fetched.
    rx_fetching: u32,
    rx_irq: Moderation,
    /// Frames waiting for a buffer and a write slot: their bytes (loopback) or
    /// only their length (generated), FCS stripped.
    rx_fifo: VecDeque<(Option<Vec<u8>>, u64)>,
    rx_fifo_bytes: u64,
    /// Packet writes not yet out of the NIC.
    rx_writing: u32,
    /// Loopback: bytes of frames read for transmission and not yet in the FIFO.
    loop_reserved: u64,
    /// Generation of each ring: setting its size starts a new one, and DMAs of an
    /// older one are dropped when they finish.
    tx_gen: u32,
    rx_gen: u32,
}

#[derive(Debug, Clone, Copy)]
enum Op {
    TxFetch {
        q: u16,
        gen: u32,
        first: u32,
        n: u32,
    },
    TxData {
        q: u16,
        gen: u32,
        slot: u32,
    },
    RxFetch {
        q: u16,
        gen: u32,
        idx: u32,
    },
    RxData {
        q: u16,
    },
    Write,
}

const T_FETCH: u64 = 1;
const T_TX_IRQ: u64 = 2;
const T_RX_IRQ: u64 = 3;
const T_MAC_TX: u64 = 4;
const T_RX_FRAME: u64 = 5;

fn token(kind: u64, q: u16) -> u64 {
    (kind << 32) | q as u64
}

/// The NIC. See the [module documentation](self).
#[derive(Debug)]
pub struct Nic {
    cfg: NicConfig,
    enabled: bool,
    irq_every: u32,
    irq_delay: SimDuration,
    queues: Vec<Queue>,
    ops: OpTable<Op>,
    stats: NicStats,
    /// Frames on the MAC's transmit side: (departure, queue, slot, frame bytes).
    mac_tx: VecDeque<(SimTime, u16, u32, u32, Vec<u8>)>,
    mac_busy: SimTime,
    /// Receive source: frames offered so far, and the queue the next one goes to.
    rx_frames: u64,
    rx_next_queue: u16,
    rx_running: bool,
}

impl Nic {
    /// A NIC with the settings of `cfg`.
    ///
    /// # Panics
    /// When `cfg` does not pass [`NicConfig::check`] (kind builders check it first and
    /// name the offending key).
    pub fn new(cfg: NicConfig) -> Nic {
        if let Err(e) = cfg.check() {
            panic!("NicConfig: {e}");
        }
        Nic {
            irq_every: cfg.irq_every,
            irq_delay: cfg.irq_delay,
            queues: (0..cfg.queues).map(|_| Queue::default()).collect(),
            cfg,
            enabled: false,
            ops: OpTable::default(),
            stats: NicStats::default(),
            mac_tx: VecDeque::new(),
            mac_busy: SimTime::ZERO,
            rx_frames: 0,
            rx_next_queue: 0,
            rx_running: false,
        }
    }

    /// The settings it was built with.
    pub fn config(&self) -> &NicConfig {
        &self.cfg
    }

    /// Its counters.
    pub fn stats(&self) -> NicStats {
        self.stats
    }

    fn dma_read(&mut self, cx: &mut Cx<'_>, addr: u64, len: u64, op: Op) {
        let id = cx.dma_read(addr, len);
        self.ops.insert(id, op);
    }

    fn dma_write(&mut self, cx: &mut Cx<'_>, addr: u64, data: Vec<u8>) {
        let id = cx.dma_write(addr, data);
        self.ops.insert(id, Op::Write);
    }

    // ---- transmit ---------------------------------------------------------------

    fn tx_fetch(&mut self, q: u16, cx: &mut Cx<'_>) {
        let batch = self.cfg.tx_desc_fetch;
        loop {
            let qu = &mut self.queues[q as usize];
            let avail = qu.tx.avail();
            if avail == 0 || qu.tx_fetching >= self.cfg.fetch_inflight {
                return;
            }
            // Slots fetched but not done count against the ring too.
            let n = avail.min(batch).min(qu.tx.size - qu.tx.fetch);
            if n < batch && n == avail {
                // A partial batch waits while the queue has work (more descriptors
                // will come) and until the host has stopped posting for `fetch_wait`;
                // an idle queue then fetches what there is.
                let idle = qu.tx_fetching == 0 && qu.tx_slots.is_empty();
                if !idle {
                    return;
                }
                let now = cx.now();
                if now < qu.fetch_deadline {
                    if !qu.fetch_timer {
                        qu.fetch_timer = true;
                        cx.timer(qu.fetch_deadline.saturating_since(now), token(T_FETCH, q));
                    }
                    return;
                }
            }
            let first = qu.tx.fetch;
            qu.tx.fetch = (first + n) % qu.tx.size;
            qu.tx_fetching += 1;
            let addr = qu.tx.desc_addr(first);
            self.stats.desc_reads += 1;
            self.dma_read(
                cx,
                addr,
                n as u64 * DESC,
                Op::TxFetch {
                    q,
                    gen: self.queues[q as usize].tx_gen,
                    first,
                    n,
                },
            );
        }
    }

    fn tx_fetched(&mut self, q: u16, first: u32, n: u32, ok: bool, data: &[u8], cx: &mut Cx<'_>) {
        let qu = &mut self.queues[q as usize];
        qu.tx_fetching -= 1;
        for i in 0..n {
            let idx = (first + i) % qu.tx.size;
            let pos = qu.tx.pos(idx);
            let mut slot = TxSlot::default();
            if ok && data.len() >= ((i + 1) as u64 * DESC) as usize {
                let d = &data[(i as u64 * DESC) as usize..((i + 1) as u64 * DESC) as usize];
                slot.addr = u64::from_le_bytes(d[0..8].try_into().unwrap());
                slot.len = u16::from_le_bytes([d[8], d[9]]);
                slot.cmd = d[10];
                if slot.len == 0 || slot.len as u64 > 9018 - FCS {
                    self.stats.bad_descriptors += 1;
                    slot.error = true;
                }
            } else {
                slot.error = true;
            }
            while qu.tx_slots.len() <= pos {
                qu.tx_slots.push_back(None);
            }
            // A bad descriptor has nothing to send: done at once, with an error status.
            slot.done = slot.error;
            qu.tx_slots[pos] = Some(slot);
            if !slot.error {
                qu.tx_ready.push_back(idx);
            }
        }
        if !ok {
            self.stats.dma_errors += 1;
        }
        self.tx_retire(q, cx);
        self.tx_data(q, cx);
        self.tx_fetch(q, cx);
    }

    fn tx_data(&mut self, q: u16, cx: &mut Cx<'_>) {
        loop {
            let qu = &mut self.queues[q as usize];
            if qu.tx_reading >= self.cfg.tx_inflight {
                return;
            }
            let Some(&idx) = qu.tx_ready.front() else {
                return;
            };
            let pos = qu.tx.pos(idx);
            let Some(Some(s)) = qu.tx_slots.get(pos) else {
                qu.tx_ready.pop_front();
                continue;
            };
            let (addr, len) = (s.addr, s.len as u64);
            if self.cfg.rx_source == RxSource::Loopback {
                // MAC loopback with flow control (802.3x PAUSE): a frame is read only
                // when the receive FIFO has room for it and for every frame already
                // on its way, so loopback never drops.
                if qu.rx_fifo_bytes + qu.loop_reserved + len > self.cfg.rx_fifo {
                    return;
                }
                qu.loop_reserved += len;
            }
            qu.tx_ready.pop_front();
            qu.tx_reading += 1;
            let gen = qu.tx_gen;
            self.dma_read(cx, addr, len, Op::TxData { q, gen, slot: idx });
        }
    }

    fn tx_data_done(&mut self, q: u16, idx: u32, ok: bool, data: &[u8], cx: &mut Cx<'_>) {
        let qu = &mut self.queues[q as usize];
        qu.tx_reading -= 1;
        if !ok {
            self.stats.dma_errors += 1;
            if self.cfg.rx_source == RxSource::Loopback {
                let pos = qu.tx.pos(idx);
                if let Some(Some(s)) = qu.tx_slots.get(pos) {
                    qu.loop_reserved = qu.loop_reserved.saturating_sub(s.len as u64);
                }
            }
            self.tx_slot_done(q, idx, true, cx);
            self.tx_data(q, cx);
            return;
        }
        let frame = data.len() as u64 + FCS;
        match self.cfg.eth {
            None => {
                let keep = self.tx_keep(data, cx);
                self.tx_sent(q, idx, data.len() as u64, keep, cx);
            }
            Some(eth) => {
                let start = self.mac_busy.max(cx.now());
                if self.stats.tx_packets > 0 || !self.mac_tx.is_empty() {
                    self.stats.mac_idle_ps += start.saturating_since(self.mac_busy).as_ps();
                }
                let at = start + eth.frame_time(frame);
                self.mac_busy = at;
                // The frame's bytes are kept only for loopback; its length is in its
                // slot.
                let keep = self.tx_keep(data, cx);
                if self.mac_tx.is_empty() {
                    cx.timer(at.saturating_since(cx.now()), token(T_MAC_TX, 0));
                }
                let gen = self.queues[q as usize].tx_gen;
                self.mac_tx.push_back((at, q, gen, idx, keep));
            }
        }
        self.tx_data(q, cx);
    }

    /// The bytes of a frame read for sending that go further (loopback, a cable), in
    /// a buffer the simulator had spare; none otherwise.
    fn tx_keep(&self, data: &[u8], cx: &mut Cx<'_>) -> Vec<u8> {
        if self.cfg.rx_source == RxSource::Loopback || self.cfg.cable {
            let mut b = cx.buffer(data.len());
            b.extend_from_slice(data);
            b
        } else {
            Vec::new()
        }
    }

    /// A frame of `read` bytes (as read from host memory; `data` holds them where they
    /// go further, see [`Nic::tx_keep`]) left the MAC.
    fn tx_sent(&mut self, q: u16, idx: u32, read: u64, data: Vec<u8>, cx: &mut Cx<'_>) {
        let qu = &mut self.queues[q as usize];
        let pos = qu.tx.pos(idx);
        let len = match qu.tx_slots.get(pos) {
            Some(Some(s)) => s.len as u64,
            _ => read,
        };
        self.stats.tx_packets += 1;
        self.stats.tx_bytes += len;
        match (self.cfg.cable, self.cfg.rx_source == RxSource::Loopback) {
            (true, false) => cx.ethernet_send(data),
            (cable, true) => {
                if cable {
                    cx.ethernet_send(data.clone());
                }
                let n = data.len() as u64;
                self.rx_arrive(q, Some(data), n, cx);
            }
            (false, false) => {}
        }
        self.tx_slot_done(q, idx, false, cx);
    }

    fn tx_slot_done(&mut self, q: u16, idx: u32, error: bool, cx: &mut Cx<'_>) {
        let qu = &mut self.queues[q as usize];
        let pos = qu.tx.pos(idx);
        if let Some(Some(s)) = qu.tx_slots.get_mut(pos) {
            s.done = true;
            s.error |= error;
        }
        self.tx_retire(q, cx);
    }

    /// Moves the head over done slots, writes descriptors back and raises interrupts.
    fn tx_retire(&mut self, q: u16, cx: &mut Cx<'_>) {
        let wb = self.cfg.tx_writeback;
        let mut retired = 0;
        loop {
            let qu = &mut self.queues[q as usize];
            let Some(Some(s)) = qu.tx_slots.front().copied() else {
                break;
            };
            if !s.done {
                break;
            }
            qu.tx_slots.pop_front();
            let idx = qu.tx.head;
            qu.tx.head = (idx + 1) % qu.tx.size;
            retired += 1;
            if wb > 0 {
                qu.tx_wb_pending += 1;
                qu.tx_wb_status
                    .push(STATUS_DD | if s.error { STATUS_ERR } else { 0 });
                // Write back when the batch is full or the ring wraps.
                if qu.tx_wb_pending == wb || qu.tx.head == 0 {
                    self.tx_writeback(q, cx);
                }
            }
        }
        if retired > 0 {
            self.moderate(q, false, retired, cx);
            let qu = &self.queues[q as usize];
            if qu.tx_slots.is_empty() && qu.tx_fetching == 0 {
                // Idle: a partial batch may go now.
                self.tx_fetch(q, cx);
            }
        }
    }

    /// Writes back the done transmit descriptors not written back yet.
    fn tx_writeback(&mut self, q: u16, cx: &mut Cx<'_>) {
        let qu = &mut self.queues[q as usize];
        let n = qu.tx_wb_pending;
        if n == 0 {
            return;
        }
        qu.tx_wb_pending = 0;
        let first = (qu.tx.head + qu.tx.size - n) % qu.tx.size;
        let addr = qu.tx.desc_addr(first);
        let mut buf = cx.buffer((n as u64 * DESC) as usize);
        buf.resize((n as u64 * DESC) as usize, 0);
        // Each descriptor comes back with only its status byte set (the driver knows
        // the other fields), as the 82599's write-back does.
        for (d, &st) in buf.chunks_exact_mut(DESC as usize).zip(&qu.tx_wb_status) {
            d[11] = st;
        }
        qu.tx_wb_status.clear();
        self.stats.writebacks += 1;
        self.dma_write(cx, addr, buf);
    }

    // ---- receive ----------------------------------------------------------------

    fn rx_fetch(&mut self, q: u16, cx: &mut Cx<'_>) {
        loop {
            let qu = &mut self.queues[q as usize];
            if qu.rx.avail() == 0 || qu.rx_fetching >= 64 {
                return;
            }
            let idx = qu.rx.fetch;
            qu.rx.fetch = (idx + 1) % qu.rx.size;
            qu.rx_fetching += 1;
            let addr = qu.rx.desc_addr(idx);
            self.stats.desc_reads += 1;
            let gen = qu.rx_gen;
            self.dma_read(cx, addr, DESC, Op::RxFetch { q, gen, idx });
        }
    }

    fn rx_fetched(&mut self, q: u16, idx: u32, ok: bool, data: &[u8], cx: &mut Cx<'_>) {
        let qu = &mut self.queues[q as usize];
        qu.rx_fetching -= 1;
        let pos = qu.rx.pos(idx);
        while qu.rx_slots.len() <= pos {
            qu.rx_slots.push_back(None);
        }
        let desc = if ok && data.len() >= DESC as usize {
            let addr = u64::from_le_bytes(data[0..8].try_into().unwrap());
            let len = u16::from_le_bytes([data[8], data[9]]);
            if len == 0 {
                self.stats.bad_descriptors += 1;
            }
            (addr, len)
        } else {
            self.stats.dma_errors += 1;
            (0, 0)
        };
        qu.rx_slots[pos] = Some(desc);
        self.rx_pump(q, cx);
        self.rx_fetch(q, cx);
    }

    /// Buffers ready at the head of queue `q`'s receive ring.
    fn rx_ready(&self, q: u16) -> bool {
        let qu = &self.queues[q as usize];
        matches!(qu.rx_slots.front(), Some(Some(_)))
    }

    /// Puts one frame of `len` bytes of packet data (FCS stripped) into the next
    /// buffer of queue `q` (the caller has checked there is one: [`Nic::rx_ready`]).
    fn rx_put(&mut self, q: u16, data: Option<Vec<u8>>, len: u64, cx: &mut Cx<'_>) {
        let qu = &mut self.queues[q as usize];
        let Some(Some((addr, buflen))) = qu.rx_slots.front().copied() else {
            return;
        };
        qu.rx_slots.pop_front();
        let idx = qu.rx.head;
        qu.rx.head = (idx + 1) % qu.rx.size;
        let wb_addr = qu.rx.desc_addr(idx);
        let mut status = STATUS_DD;
        let mut out_len = len as u16;
        if buflen == 0 {
            status |= STATUS_ERR;
            out_len = 0;
        } else if len > buflen as u64 {
            self.stats.rx_oversize += 1;
            status |= STATUS_ERR;
            out_len = 0;
        } else {
            let data = match data {
                Some(d) => d,
                None => {
                    let mut b = cx.buffer(len as usize);
                    b.resize(len as usize, 0);
                    // A recognisable frame: its sequence number first.
                    let n = self.rx_frames.to_le_bytes();
                    let k = b.len().min(8);
                    b[..k].copy_from_slice(&n[..k]);
                    b
                }
            };
            self.stats.rx_packets += 1;
            self.stats.rx_bytes += len;
            self.queues[q as usize].rx_writing += 1;
            let id = cx.dma_write(addr, data);
            self.ops.insert(id, Op::RxData { q });
        }
        let mut wb = cx.buffer(DESC as usize);
        wb.resize(DESC as usize, 0);
        wb[0..8].copy_from_slice(&addr.to_le_bytes());
        wb[8..10].copy_from_slice(&out_len.to_le_bytes());
        wb[10] = CMD_EOP;
        wb[11] = status;
        self.stats.writebacks += 1;
        self.dma_write(cx, wb_addr, wb);
        self.moderate(q, true, 1, cx);
    }

    /// A frame arrives at queue `q`'s receive FIFO (dropped and counted when full).
    fn rx_arrive(&mut self, q: u16, data: Option<Vec<u8>>, len: u64, cx: &mut Cx<'_>) {
        let qu = &mut self.queues[q as usize];
        if self.cfg.rx_source == RxSource::Loopback {
            qu.loop_reserved = qu.loop_reserved.saturating_sub(len);
        }
        if qu.rx_fifo_bytes + len > self.cfg.rx_fifo {
            self.stats.rx_dropped += 1;
            return;
        }
        qu.rx_fifo_bytes += len;
        qu.rx_fifo.push_back((data, len));
        self.rx_pump(q, cx);
    }

    /// Moves frames from the FIFO into ready buffers while write slots are free; a
    /// saturating source offers a new frame whenever the FIFO is empty.
    fn rx_pump(&mut self, q: u16, cx: &mut Cx<'_>) {
        while self.rx_ready(q) && self.queues[q as usize].rx_writing < self.cfg.rx_inflight {
            let qu = &mut self.queues[q as usize];
            let (data, len) = match qu.rx_fifo.pop_front() {
                Some((d, len)) => {
                    qu.rx_fifo_bytes -= len;
                    (d, len)
                }
                None => match self.cfg.rx_source {
                    RxSource::Saturate(sizes) if self.enabled => {
                        let len = sizes.nth(self.rx_frames) - FCS;
                        self.rx_frames += 1;
                        (None, len)
                    }
                    _ => return,
                },
            };
            self.rx_put(q, data, len, cx);
            if self.cfg.rx_source == RxSource::Loopback {
                self.tx_data(q, cx);
            }
        }
    }

    /// The line-rate source: one frame now, the next one a frame time later.
    fn rx_line(&mut self, cx: &mut Cx<'_>) {
        let RxSource::LineRate(sizes) = self.cfg.rx_source else {
            return;
        };
        let Some(eth) = self.cfg.eth else {
            return;
        };
        if !self.enabled {
            self.rx_running = false;
            return;
        }
        let frame = sizes.nth(self.rx_frames);
        self.rx_frames += 1;
        let q = self.rx_next_queue;
        self.rx_next_queue = (q + 1) % self.cfg.queues;
        self.rx_arrive(q, None, frame - FCS, cx);
        cx.timer(eth.frame_time(frame), token(T_RX_FRAME, 0));
    }

    // ---- interrupts -------------------------------------------------------------

    fn moderate(&mut self, q: u16, rx: bool, packets: u32, cx: &mut Cx<'_>) {
        let every = self.irq_every;
        if every == 0 {
            return;
        }
        let delay = self.irq_delay;
        let qu = &mut self.queues[q as usize];
        let m = if rx { &mut qu.rx_irq } else { &mut qu.tx_irq };
        m.pending += packets;
        if m.pending >= every {
            m.pending %= every;
            m.generation = m.generation.wrapping_add(1);
            m.armed = None;
            self.raise(q, rx, cx);
        }
        let qu = &mut self.queues[q as usize];
        let m = if rx { &mut qu.rx_irq } else { &mut qu.tx_irq };
        if m.pending > 0 && m.armed.is_none() && delay > SimDuration::ZERO {
            // The timer runs from the first packet not yet signalled.
            m.armed = Some(m.generation);
            let kind = if rx { T_RX_IRQ } else { T_TX_IRQ };
            cx.timer(delay, token(kind, q) | (m.generation as u64) << 16);
        }
    }

    fn irq_timer(&mut self, q: u16, rx: bool, generation: u16, cx: &mut Cx<'_>) {
        let qu = &mut self.queues[q as usize];
        let m = if rx { &mut qu.rx_irq } else { &mut qu.tx_irq };
        if m.armed != Some(generation) {
            return; // an interrupt by count came first
        }
        m.armed = None;
        if m.pending > 0 {
            m.pending = 0;
            m.generation = m.generation.wrapping_add(1);
            self.raise(q, rx, cx);
        }
    }

    /// Raises a queue's interrupt; a transmit interrupt first writes back what is
    /// done, so the host finds every descriptor it is told about.
    fn raise(&mut self, q: u16, rx: bool, cx: &mut Cx<'_>) {
        if !rx {
            self.tx_writeback(q, cx);
        }
        self.stats.interrupts += 1;
        cx.msix(2 * q + rx as u16);
    }

    // ---- registers --------------------------------------------------------------

    fn read_reg(&self, off: u64) -> Option<u64> {
        let s = &self.stats;
        Some(match off {
            reg::CTRL => self.enabled as u64,
            reg::QUEUES => self.cfg.queues as u64,
            reg::IRQ_EVERY => self.irq_every as u64,
            reg::IRQ_DELAY => self.irq_delay.as_ps() / 1000,
            reg::TX_PACKETS => s.tx_packets,
            reg::TX_BYTES => s.tx_bytes,
            reg::RX_PACKETS => s.rx_packets,
            reg::RX_BYTES => s.rx_bytes,
            reg::RX_DROPPED => s.rx_dropped,
            reg::ERRORS => s.bad_descriptors + s.bad_doorbells + s.dma_errors + s.rx_oversize,
            o if o >= QUEUE_BASE => {
                let q = ((o - QUEUE_BASE) / QUEUE_STRIDE) as usize;
                let qu = self.queues.get(q)?;
                match (o - QUEUE_BASE) % QUEUE_STRIDE {
                    reg::TX_BASE => qu.tx.base,
                    reg::TX_SIZE => qu.tx.size as u64,
                    reg::TX_TAIL => qu.tx.tail as u64,
                    reg::TX_HEAD => qu.tx.head as u64,
                    reg::RX_BASE => qu.rx.base,
                    reg::RX_SIZE => qu.rx.size as u64,
                    reg::RX_TAIL => qu.rx.tail as u64,
                    reg::RX_HEAD => qu.rx.head as u64,
                    _ => return None,
                }
            }
            _ => return None,
        })
    }

    fn write_reg(&mut self, off: u64, v: u64, len: usize, cx: &mut Cx<'_>) {
        let wide = |ok: bool, s: &mut NicStats| {
            if !ok {
                s.bad_registers += 1;
            }
            ok
        };
        match off {
            reg::CTRL if wide(len == 4, &mut self.stats) => {
                let was = self.enabled;
                self.enabled = v & 1 != 0;
                if self.enabled && !was {
                    self.start_sources(cx);
                }
            }
            reg::IRQ_EVERY if wide(len == 4, &mut self.stats) => self.irq_every = v as u32,
            reg::IRQ_DELAY if wide(len == 4, &mut self.stats) => {
                self.irq_delay = SimDuration::from_ns(v)
            }
            o if o >= QUEUE_BASE && ((o - QUEUE_BASE) / QUEUE_STRIDE) < self.cfg.queues as u64 => {
                let q = ((o - QUEUE_BASE) / QUEUE_STRIDE) as u16;
                let r = (o - QUEUE_BASE) % QUEUE_STRIDE;
                let enabled = self.enabled;
                let qu = &mut self.queues[q as usize];
                match r {
                    reg::TX_BASE | reg::RX_BASE if len == 8 => {
                        let ring = if r == reg::TX_BASE {
                            &mut qu.tx
                        } else {
                            &mut qu.rx
                        };
                        ring.base = v;
                    }
                    reg::TX_SIZE | reg::RX_SIZE if len == 4 => {
                        let tx = r == reg::TX_SIZE;
                        let ring = if tx { &mut qu.tx } else { &mut qu.rx };
                        // A new size resets the ring (the driver sets it while the
                        // queue is idle).
                        *ring = Ring {
                            base: ring.base,
                            size: (v as u32).min(1 << 16),
                            ..Ring::default()
                        };
                        if tx {
                            qu.tx_gen = qu.tx_gen.wrapping_add(1);
                            qu.tx_slots.clear();
                            qu.tx_ready.clear();
                            qu.tx_wb_pending = 0;
                            qu.tx_wb_status.clear();
                            qu.tx_fetching = 0;
                            qu.tx_reading = 0;
                            qu.loop_reserved = 0;
                        } else {
                            qu.rx_gen = qu.rx_gen.wrapping_add(1);
                            qu.rx_slots.clear();
                            qu.rx_fetching = 0;
                        }
                    }
                    reg::TX_TAIL | reg::RX_TAIL if len == 4 => {
                        let tx = r == reg::TX_TAIL;
                        let ring = if tx { &mut qu.tx } else { &mut qu.rx };
                        if !enabled || ring.size == 0 || v as u32 >= ring.size {
                            self.stats.bad_doorbells += 1;
                            return;
                        }
                        ring.tail = v as u32;
                        if tx {
                            qu.fetch_deadline = cx.now() + self.cfg.fetch_wait;
                            self.tx_fetch(q, cx);
                        } else {
                            self.rx_fetch(q, cx);
                        }
                    }
                    _ => self.stats.bad_registers += 1,
                }
            }
            _ => self.stats.bad_registers += 1,
        }
    }

    fn start_sources(&mut self, cx: &mut Cx<'_>) {
        for q in 0..self.cfg.queues {
            self.rx_pump(q, cx);
        }
        if let RxSource::LineRate(_) = self.cfg.rx_source {
            if !self.rx_running && self.cfg.eth.is_some() {
                self.rx_running = true;
                cx.timer(SimDuration::ZERO, token(T_RX_FRAME, 0));
            }
        }
    }
}

impl DeviceModel for Nic {
    fn mem_read(&mut self, bar: u8, offset: u64, buf: &mut [u8], _cx: &mut Cx<'_>) -> ReadReply {
        buf.fill(0);
        if bar != self.cfg.bar {
            self.stats.bad_registers += 1;
            return ReadReply::Now;
        }
        // A u64 register is read whole or by halves, a u32 register whole.
        let v = match (buf.len(), offset % 8) {
            (8, 0) => self.read_reg(offset),
            (4, 0) => self.read_reg(offset),
            (4, 4) => self
                .read_reg(offset)
                .or_else(|| self.read_reg(offset - 4).map(|v| v >> 32)),
            _ => None,
        };
        match v {
            Some(v) => {
                let n = buf.len();
                buf.copy_from_slice(&v.to_le_bytes()[..n]);
            }
            None => self.stats.bad_registers += 1,
        }
        ReadReply::Now
    }

    fn mem_write(&mut self, bar: u8, offset: u64, data: &[u8], cx: &mut Cx<'_>) {
        if bar != self.cfg.bar || !matches!(data.len(), 4 | 8) || offset % data.len() as u64 != 0 {
            self.stats.bad_registers += 1;
            return;
        }
        let mut b = [0u8; 8];
        b[..data.len()].copy_from_slice(data);
        self.write_reg(offset, u64::from_le_bytes(b), data.len(), cx);
    }

    fn dma_done(&mut self, id: DmaId, ok: bool, data: &[u8], cx: &mut Cx<'_>) {
        let Some(op) = self.ops.remove(&id) else {
            return;
        };
        match op {
            // A DMA for a ring the driver has since set up anew is of no use.
            Op::TxFetch { q, gen, .. } | Op::TxData { q, gen, .. }
                if gen != self.queues[q as usize].tx_gen =>
            {
                self.stats.stale_dmas += 1
            }
            Op::RxFetch { q, gen, .. } if gen != self.queues[q as usize].rx_gen => {
                self.stats.stale_dmas += 1
            }
            Op::TxFetch { q, first, n, .. } => self.tx_fetched(q, first, n, ok, data, cx),
            Op::TxData { q, slot, .. } => self.tx_data_done(q, slot, ok, data, cx),
            Op::RxFetch { q, idx, .. } => self.rx_fetched(q, idx, ok, data, cx),
            Op::RxData { q } => {
                if !ok {
                    self.stats.dma_errors += 1;
                }
                self.queues[q as usize].rx_writing -= 1;
                self.rx_pump(q, cx);
            }
            Op::Write => {
                if !ok {
                    self.stats.dma_errors += 1;
                }
            }
        }
    }

    fn timer(&mut self, tok: u64, cx: &mut Cx<'_>) {
        let q = (tok & 0xffff) as u16;
        match tok >> 32 {
            T_FETCH => {
                self.queues[q as usize].fetch_timer = false;
                self.tx_fetch(q, cx);
            }
            T_TX_IRQ => self.irq_timer(q, false, (tok >> 16) as u16, cx),
            T_RX_IRQ => self.irq_timer(q, true, (tok >> 16) as u16, cx),
            T_MAC_TX => {
                let now = cx.now();
                while let Some((at, ..)) = self.mac_tx.front() {
                    if *at > now {
                        let d = at.saturating_since(now);
                        cx.timer(d, token(T_MAC_TX, 0));
                        break;
                    }
                    let (_, q, gen, idx, data) = self.mac_tx.pop_front().unwrap();
                    if gen != self.queues[q as usize].tx_gen {
                        continue; // its ring was set up anew
                    }
                    let n = data.len() as u64;
                    self.tx_sent(q, idx, n, data, cx);
                }
            }
            T_RX_FRAME => self.rx_line(cx),
            _ => {}
        }
    }

    fn timing(&self) -> DeviceTiming {
        self.cfg.timing
    }

    fn dma_policy(&self) -> DmaPolicy {
        DmaPolicy {
            tags: self.cfg.tags.map(|n| (0, n)),
            ..DmaPolicy::DEFAULT
        }
    }

    fn ethernet_receive(&mut self, frame: Vec<u8>, cx: &mut Cx<'_>) -> bool {
        // Frames from the cable spread over the queues in turn.
        if !self.enabled {
            self.stats.rx_dropped += 1;
            return true;
        }
        let q = self.rx_next_queue;
        self.rx_next_queue = (q + 1) % self.cfg.queues;
        let len = frame.len() as u64;
        self.rx_arrive(q, Some(frame), len, cx);
        true
    }

    fn reset(&mut self, _cx: &mut Cx<'_>) {
        *self = Nic::new(self.cfg.clone());
    }

    fn report(&self) -> Option<serde_json::Value> {
        let s = &self.stats;
        Some(serde_json::json!({
            "tx_packets": s.tx_packets,
            "tx_bytes": s.tx_bytes,
            "rx_packets": s.rx_packets,
            "rx_bytes": s.rx_bytes,
            "rx_dropped": s.rx_dropped,
            "rx_oversize": s.rx_oversize,
            "bad_descriptors": s.bad_descriptors,
            "bad_doorbells": s.bad_doorbells,
            "bad_registers": s.bad_registers,
            "dma_errors": s.dma_errors,
            "desc_reads": s.desc_reads,
            "writebacks": s.writebacks,
            "interrupts": s.interrupts,
            "stale_dmas": s.stale_dmas,
            "mac_idle_ps": s.mac_idle_ps,
        }))
    }

    fn progress(&self) -> Option<u64> {
        Some(self.stats.tx_packets + self.stats.rx_packets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Command, DeviceState};
    use pcielab_sim::Rng;
    use pcielab_wire::Bdf;
    use proptest::prelude::*;

    /// A host that answers the NIC's DMA reads from a byte pattern, lets writes
    /// finish, and fires timers in order.
    struct Host {
        nic: Nic,
        state: DeviceState,
        spare: Vec<Vec<u8>>,
        now: SimTime,
        reads: VecDeque<(DmaId, u64)>,
        writes: VecDeque<DmaId>,
        timers: Vec<(SimTime, u64)>,
        msix: u64,
    }

    impl Host {
        fn new(cfg: NicConfig) -> Host {
            Host {
                nic: Nic::new(cfg),
                state: DeviceState {
                    next_dma: 0,
                    rng: Rng::new(1),
                },
                spare: Vec::new(),
                now: SimTime::ZERO,
                reads: VecDeque::new(),
                writes: VecDeque::new(),
                timers: Vec::new(),
                msix: 0,
            }
        }

        fn call(&mut self, f: impl FnOnce(&mut Nic, &mut Cx<'_>)) {
            let mut cmds = Vec::new();
            let mut cx = Cx::new(
                self.now,
                (0, Bdf::new(1, 0, 0).unwrap()),
                &mut cmds,
                &mut self.state,
                None,
                &mut self.spare,
            );
            f(&mut self.nic, &mut cx);
            for c in cmds {
                match c {
                    Command::DmaRead { id, len, .. } => self.reads.push_back((id, len)),
                    Command::DmaWrite { id, .. } => self.writes.push_back(id),
                    Command::Timer { at, token } => self.timers.push((at, token)),
                    Command::Msix(v) => {
                        assert!(v < 2 * self.nic.cfg.queues, "vector {v}");
                        self.msix += 1;
                    }
                    _ => {}
                }
            }
        }
    }

    #[derive(Debug, Clone)]
    enum Step {
        Write(u64, u64, bool),
        Read(u64, bool),
        /// Answer the oldest read: `ok`, with bytes from a pattern seeded by the value.
        Answer(bool, u64),
        FinishWrite(bool),
        Timer,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            // Doorbells of either queue pair, in range or not.
            (0u64..2, any::<bool>(), 0u64..10).prop_map(|(q, tx, v)| Step::Write(
                QUEUE_BASE + q * QUEUE_STRIDE + if tx { reg::TX_TAIL } else { reg::RX_TAIL },
                v,
                false
            )),
            // Mostly the real registers of queue pair 0 and 1, sometimes anywhere.
            (
                prop_oneof![
                    Just(0u64),
                    Just(8),
                    Just(12),
                    (0u64..8).prop_map(|r| 0x100 + r * 8),
                    (0u64..8).prop_map(|r| 0x140 + r * 4),
                    0u64..0x4000,
                ],
                prop_oneof![Just(1u64), 0u64..300, Just(0x1_0000_0000), any::<u64>()],
                any::<bool>()
            )
                .prop_map(|(o, v, wide)| Step::Write(o, v, wide)),
            (0u64..0x4000, any::<bool>()).prop_map(|(o, w)| Step::Read(o, w)),
            (prop::bool::weighted(0.9), any::<u64>()).prop_map(|(ok, s)| Step::Answer(ok, s)),
            any::<bool>().prop_map(Step::FinishWrite),
            Just(Step::Timer),
        ]
    }

    proptest! {
        /// Whatever the host writes and whatever the DMAs bring back, the NIC never
        /// panics, raises only its own vectors and keeps its head registers inside
        /// their rings.
        #[test]
        fn any_program_is_survived(
            batched in any::<bool>(),
            rx in 0u8..4,
            steps in prop::collection::vec(step(), 1..300),
        ) {
            let mut cfg = if batched { NicConfig::batched(2) } else { NicConfig::simple(2) };
            cfg.rx_source = match rx {
                0 => RxSource::Off,
                1 => RxSource::Saturate(FrameSizes::Imix),
                2 => RxSource::Loopback,
                _ => RxSource::LineRate(FrameSizes::Fixed(64)),
            };
            cfg.eth = Some(Ethernet::new(100.0).unwrap());
            let mut h = Host::new(cfg);
            // Set up both queue pairs with small rings (so they wrap), then enable.
            for q in 0..2u64 {
                let r = QUEUE_BASE + q * QUEUE_STRIDE;
                for (o, v, w) in [
                    (reg::TX_BASE, 0x1000_0000 + q * 0x1_0000, 8),
                    (reg::TX_SIZE, 4 + q * 4, 4),
                    (reg::RX_BASE, 0x2000_0000 + q * 0x1_0000, 8),
                    (reg::RX_SIZE, 8, 4),
                ] {
                    let data = v.to_le_bytes()[..w].to_vec();
                    h.call(|n, cx| n.mem_write(0, r + o, &data, cx));
                }
            }
            h.call(|n, cx| n.mem_write(0, reg::CTRL, &1u32.to_le_bytes(), cx));
            for s in steps {
                h.now += SimDuration::from_ns(10);
                match s {
                    Step::Write(o, v, wide) => {
                        let data = if wide { v.to_le_bytes().to_vec() } else { (v as u32).to_le_bytes().to_vec() };
                        h.call(|n, cx| n.mem_write(0, o, &data, cx));
                    }
                    Step::Read(o, wide) => {
                        let mut buf = vec![0u8; if wide { 8 } else { 4 }];
                        h.call(|n, cx| { n.mem_read(0, o, &mut buf, cx); });
                    }
                    Step::Answer(ok, seed) => {
                        if let Some((id, len)) = h.reads.pop_front() {
                            let mut r = Rng::new(seed);
                            let mut data: Vec<u8> = (0..len.min(1 << 16)).map(|_| r.next_u64() as u8).collect();
                            if seed % 2 == 0 {
                                // Well-formed descriptors: a buffer and a sane length.
                                for d in data.chunks_exact_mut(16) {
                                    d[0..8].copy_from_slice(&0x3000_0000u64.to_le_bytes());
                                    d[8..10].copy_from_slice(&(60 + (seed % 1400) as u16).to_le_bytes());
                                }
                            }
                            h.call(|n, cx| n.dma_done(id, ok, &data, cx));
                        }
                    }
                    Step::FinishWrite(ok) => {
                        if let Some(id) = h.writes.pop_front() {
                            h.call(|n, cx| n.dma_done(id, ok, &[], cx));
                        }
                    }
                    Step::Timer => {
                        if let Some(i) = (0..h.timers.len()).min_by_key(|&i| h.timers[i].0) {
                            let (at, tok) = h.timers.swap_remove(i);
                            h.now = h.now.max(at);
                            h.call(|n, cx| n.timer(tok, cx));
                        }
                    }
                }
                for q in &h.nic.queues {
                    prop_assert!(q.tx.size == 0 || q.tx.head < q.tx.size);
                    prop_assert!(q.rx.size == 0 || q.rx.head < q.rx.size);
                    prop_assert!(q.rx_fifo_bytes <= h.nic.cfg.rx_fifo);
                }
            }
        }
    }
}
