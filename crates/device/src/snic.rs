//! The NetTLP simple-nic as a [`DeviceModel`]: the NIC of "PCIe performance for end host
//! networking" (SIGCOMM 2018) in the form NetTLP's `simple-nic` gives it, with that
//! project's BAR4 register layout, so a host driver written for it (the adapter host's
//! `pcielab_nettlp::snic::SnicDriver`) drives this model over NetTLP.
//!
//! ```text
//!   BAR4 + 0   u64 tx_desc_base   host address of the TX descriptor ring
//!   BAR4 + 8   u64 rx_desc_base   host address of the RX descriptor ring
//!   BAR4 + 16  u32 tx_desc_idx    written: "send the packet of TX descriptor idx"
//!   BAR4 + 20  u32 rx_desc_idx    written: "RX descriptor idx is a free buffer"
//!   BAR4 + 24  u32 enabled        written 1 by the driver when it has set the device up
//!   descriptor (16 bytes, little endian): u64 addr, u64 length
//! ```
//!
//! **TX.** A write of `idx` to `tx_desc_idx` makes the device DMA-read the descriptor
//! at `tx_desc_base + 16 * idx`, then `length` bytes of packet at `addr`, hand the frame
//! to its MAC side ([`SnicMac::transmit`]) and raise the TX MSI-X vector (0). As
//! upstream does, every doorbell is answered with one TX interrupt, whether the frame
//! went out or not (a driver waiting for it never hangs); the counters of
//! [`SimpleNic::stats`] and [`DeviceModel::report`] say which. Doorbells are served one
//! at a time, in the order they were written, so frames leave in ring order.
//!
//! **RX.** A write of `idx` to `rx_desc_idx` makes the device DMA-read that RX
//! descriptor: a free buffer at `addr` of `length` bytes. A frame from the MAC side goes
//! into the oldest posted buffer: DMA write of the frame to `addr`, DMA write of the
//! descriptor back with `length` set to the frame's length, then the RX MSI-X vector
//! (1). Upstream's driver posts one buffer at a time and the next after each packet;
//! this model keeps a queue of posted buffers (up to the ring's size), which for one at
//! a time is the same thing. Frames that arrive while no buffer is posted wait in a
//! receive FIFO of [`SnicParams::rx_fifo`] frames, like a NIC's packet buffer; once it
//! is full they are dropped and counted ([`SnicStats::rx_dropped_no_buffer`]). With
//! `rx_fifo = 0` a frame with no posted buffer is dropped at once, as upstream's device
//! does.
//!
//! **Bad input** is counted, never fatal, and the last problem is kept as text
//! ([`SimpleNic::last_error`]): a register write of the wrong size or to no register, a
//! descriptor index at or past [`SnicParams::ring_entries`] or with no ring base set, a
//! TX descriptor of length 0 or over [`SnicParams::max_frame`], an RX descriptor of
//! length 0 (a buffer that holds nothing; upstream's device ignores an RX descriptor's
//! length, this model uses it as the buffer's size and refuses frames that do not fit
//! it), more doorbells outstanding than the ring has entries, and DMA failures.
//!
//! Reads of BAR4 return the registers as last written (upstream's device answers none;
//! the values are useful to a debugger). The `enabled` register is kept and reported;
//! as upstream, the device does not wait for it.
//!
//! ```
//! use pcielab_device::snic::{Loopback, SimpleNic, SnicParams};
//! let nic = SimpleNic::new(SnicParams::default(), Box::new(Loopback::default()));
//! assert_eq!(nic.stats().tx_frames, 0);
//! ```

use crate::model::{Cx, DeviceModel, DmaId, ReadReply};
use std::collections::VecDeque;
use std::fmt;

/// BAR4 offset of `tx_desc_base` (u64).
pub const TX_DESC_BASE: u64 = 0;
/// BAR4 offset of `rx_desc_base` (u64).
pub const RX_DESC_BASE: u64 = 8;
/// BAR4 offset of `tx_desc_idx` (u32).
pub const TX_DESC_IDX: u64 = 16;
/// BAR4 offset of `rx_desc_idx` (u32).
pub const RX_DESC_IDX: u64 = 20;
/// BAR4 offset of `enabled` (u32).
pub const ENABLED: u64 = 24;
/// Bytes of the register block (`struct snic_bar4`, packed).
pub const REGS_LEN: u64 = 28;
/// Bytes of one descriptor (`addr`, `length`).
pub const DESC_LEN: u64 = 16;

/// The MAC side of a [`SimpleNic`]: where the frames it sends go and where the frames it
/// receives come from. Frames can also be handed to the device directly with
/// [`SimpleNic::receive`] (a TAP reader thread does that).
pub trait SnicMac: fmt::Debug + Send {
    /// Puts a frame the device sends on the wire; `Err` says why it was not sent (the
    /// device counts it in [`SnicStats::tx_mac_dropped`]).
    fn transmit(&mut self, frame: &[u8]) -> Result<(), String>;
    /// A frame that arrived from the wire, if any. The device takes them after every
    /// call its host makes into it. Default: none.
    fn poll(&mut self) -> Option<Vec<u8>> {
        None
    }
}

/// A MAC with nothing attached: every frame sent is dropped, and counted by the device
/// (`tx_mac_dropped`).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoMac;

impl SnicMac for NoMac {
    fn transmit(&mut self, _frame: &[u8]) -> Result<(), String> {
        Err("no MAC attached: the frame is dropped".to_string())
    }
}

/// A loopback plug: every frame sent comes back as a received frame, in order. At most
/// `limit` frames wait (4096 by default); more are refused (`tx_mac_dropped`).
#[derive(Debug)]
pub struct Loopback {
    queue: VecDeque<Vec<u8>>,
    limit: usize,
}

impl Default for Loopback {
    fn default() -> Self {
        Loopback {
            queue: VecDeque::new(),
            limit: 4096,
        }
    }
}

impl SnicMac for Loopback {
    fn transmit(&mut self, frame: &[u8]) -> Result<(), String> {
        if self.queue.len() >= self.limit {
            return Err(format!("loopback: {} frames already waiting", self.limit));
        }
        self.queue.push_back(frame.to_vec());
        Ok(())
    }
    fn poll(&mut self) -> Option<Vec<u8>> {
        self.queue.pop_front()
    }
}

/// An in-memory MAC for tests and embedding: frames sent are kept in `sent`; frames
/// pushed to `incoming` are received. Clones share the queues.
#[derive(Debug, Clone, Default)]
pub struct QueueMac {
    inner: std::sync::Arc<std::sync::Mutex<QueueMacInner>>,
}

#[derive(Debug, Default)]
struct QueueMacInner {
    sent: VecDeque<Vec<u8>>,
    incoming: VecDeque<Vec<u8>>,
}

impl QueueMac {
    fn lock(&self) -> std::sync::MutexGuard<'_, QueueMacInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// Takes the frames the device has sent so far, oldest first.
    pub fn take_sent(&self) -> Vec<Vec<u8>> {
        self.lock().sent.drain(..).collect()
    }
    /// Queues a frame for the device to receive (at its next call).
    pub fn push_incoming(&self, frame: Vec<u8>) {
        self.lock().incoming.push_back(frame);
    }
}

impl SnicMac for QueueMac {
    fn transmit(&mut self, frame: &[u8]) -> Result<(), String> {
        self.lock().sent.push_back(frame.to_vec());
        Ok(())
    }
    fn poll(&mut self) -> Option<Vec<u8>> {
        self.lock().incoming.pop_front()
    }
}

/// How a [`SimpleNic`] is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnicParams {
    /// The BAR of the registers (NetTLP: 4).
    pub bar: u8,
    /// MSI-X vector of the TX interrupt (upstream: 0).
    pub tx_vector: u16,
    /// MSI-X vector of the RX interrupt (upstream: 1).
    pub rx_vector: u16,
    /// Descriptors per ring: indexes at or past it are refused. Upstream has no such
    /// register (its driver's rings have one entry); 1024 by default.
    pub ring_entries: u32,
    /// The largest frame, bytes: longer TX descriptors are refused, longer frames from
    /// the MAC are dropped. 4096 by default (upstream's TX buffer).
    pub max_frame: u32,
    /// Frames kept while no RX buffer is posted (0: dropped at once, as upstream).
    /// 64 by default.
    pub rx_fifo: usize,
}

impl Default for SnicParams {
    fn default() -> Self {
        SnicParams {
            bar: 4,
            tx_vector: 0,
            rx_vector: 1,
            ring_entries: 1024,
            max_frame: 4096,
            rx_fifo: 64,
        }
    }
}

/// Counters of a [`SimpleNic`]. Every doorbell, post and frame ends in exactly one of
/// them (see the field notes), so nothing is lost silently.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnicStats {
    /// Writes to `tx_desc_idx` (of the right size).
    pub tx_doorbells: u64,
    /// Frames handed to the MAC and sent.
    pub tx_frames: u64,
    /// Bytes of those frames.
    pub tx_bytes: u64,
    /// Frames the MAC refused (no MAC attached, TAP write failed, ...).
    pub tx_mac_dropped: u64,
    /// Doorbells with no TX ring base set, or an index at or past the ring's size.
    pub tx_bad_index: u64,
    /// TX descriptors of length 0 or over `max_frame`.
    pub tx_bad_length: u64,
    /// TX descriptor or packet reads that failed.
    pub tx_dma_errors: u64,
    /// Doorbells refused because `ring_entries` were already waiting.
    pub tx_overruns: u64,
    /// TX interrupts raised (one per doorbell served).
    pub tx_irqs: u64,
    /// Writes to `rx_desc_idx` (of the right size).
    pub rx_posts: u64,
    /// Posts with no RX ring base set, or an index at or past the ring's size.
    pub rx_bad_index: u64,
    /// RX descriptors of length 0.
    pub rx_bad_length: u64,
    /// Posts refused because `ring_entries` buffers were already posted.
    pub rx_overruns: u64,
    /// Frames that arrived from the MAC.
    pub rx_arrived: u64,
    /// Frames written to host memory, their descriptor written back and the RX
    /// interrupt raised.
    pub rx_frames: u64,
    /// Bytes of those frames.
    pub rx_bytes: u64,
    /// Frames dropped: no buffer posted and the receive FIFO full.
    pub rx_dropped_no_buffer: u64,
    /// Frames dropped: empty, longer than `max_frame` or than the posted buffer.
    pub rx_dropped_bad_size: u64,
    /// RX descriptor reads, frame or descriptor write-backs that failed.
    pub rx_dma_errors: u64,
    /// Register writes of the wrong size.
    pub bad_size_writes: u64,
    /// Writes to no register (past `enabled`).
    pub unknown_writes: u64,
}

impl SnicStats {
    /// Everything counted as bad input or failure (the sum of the error counters).
    pub fn errors(&self) -> u64 {
        self.tx_mac_dropped
            + self.tx_bad_index
            + self.tx_bad_length
            + self.tx_dma_errors
            + self.tx_overruns
            + self.rx_bad_index
            + self.rx_bad_length
            + self.rx_overruns
            + self.rx_dropped_no_buffer
            + self.rx_dropped_bad_size
            + self.rx_dma_errors
            + self.bad_size_writes
            + self.unknown_writes
    }

    /// The counters as a JSON object (field names as here).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "tx_doorbells": self.tx_doorbells,
            "tx_frames": self.tx_frames,
            "tx_bytes": self.tx_bytes,
            "tx_mac_dropped": self.tx_mac_dropped,
            "tx_bad_index": self.tx_bad_index,
            "tx_bad_length": self.tx_bad_length,
            "tx_dma_errors": self.tx_dma_errors,
            "tx_overruns": self.tx_overruns,
            "tx_irqs": self.tx_irqs,
            "rx_posts": self.rx_posts,
            "rx_bad_index": self.rx_bad_index,
            "rx_bad_length": self.rx_bad_length,
            "rx_overruns": self.rx_overruns,
            "rx_arrived": self.rx_arrived,
            "rx_frames": self.rx_frames,
            "rx_bytes": self.rx_bytes,
            "rx_dropped_no_buffer": self.rx_dropped_no_buffer,
            "rx_dropped_bad_size": self.rx_dropped_bad_size,
            "rx_dma_errors": self.rx_dma_errors,
            "bad_size_writes": self.bad_size_writes,
            "unknown_writes": self.unknown_writes,
        })
    }
}

/// A posted RX buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RxBuf {
    /// Where its descriptor is (written back after the frame).
    desc: u64,
    addr: u64,
    cap: u64,
}

/// What the TX engine is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tx {
    Idle,
    /// Reading the descriptor of ring index `idx`.
    Desc {
        id: DmaId,
        idx: u32,
    },
    /// Reading the frame.
    Data {
        id: DmaId,
    },
}

/// What the RX engine is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rx {
    Idle,
    /// Writing a frame of `len` bytes into `buf`.
    Data {
        id: DmaId,
        buf: RxBuf,
        len: u64,
    },
    /// Writing the descriptor back.
    Desc {
        id: DmaId,
        len: u64,
    },
}

/// The simple-nic device model (see the module documentation).
#[derive(Debug)]
pub struct SimpleNic {
    params: SnicParams,
    mac: Box<dyn SnicMac>,
    tx_base: u64,
    rx_base: u64,
    tx_idx: u32,
    rx_idx: u32,
    enabled: u32,
    /// Doorbells waiting for the TX engine.
    tx_queue: VecDeque<u32>,
    tx: Tx,
    /// Posts waiting for their descriptor read.
    post_queue: VecDeque<u32>,
    /// The descriptor read in flight: its DMA and the descriptor's address.
    post: Option<(DmaId, u64)>,
    /// Posted buffers no frame has claimed yet (oldest first).
    posted: VecDeque<RxBuf>,
    /// Frames waiting for a buffer (never non-empty while `posted` is).
    fifo: VecDeque<Vec<u8>>,
    /// Frames with their buffer, waiting for the RX engine.
    rx_work: VecDeque<(RxBuf, Vec<u8>)>,
    rx: Rx,
    stats: SnicStats,
    last_error: Option<String>,
}

fn le64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

impl SimpleNic {
    /// A device with `params`, its frames going to and coming from `mac`.
    pub fn new(params: SnicParams, mac: Box<dyn SnicMac>) -> SimpleNic {
        SimpleNic {
            params,
            mac,
            tx_base: 0,
            rx_base: 0,
            tx_idx: 0,
            rx_idx: 0,
            enabled: 0,
            tx_queue: VecDeque::new(),
            tx: Tx::Idle,
            post_queue: VecDeque::new(),
            post: None,
            posted: VecDeque::new(),
            fifo: VecDeque::new(),
            rx_work: VecDeque::new(),
            rx: Rx::Idle,
            stats: SnicStats::default(),
            last_error: None,
        }
    }

    /// The parameters.
    pub fn params(&self) -> &SnicParams {
        &self.params
    }

    /// The counters.
    pub fn stats(&self) -> SnicStats {
        self.stats
    }

    /// The last problem counted (bad input, DMA failure, a frame dropped), as text.
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    /// The value the driver last wrote to `enabled`.
    pub fn enabled(&self) -> u32 {
        self.enabled
    }

    /// The ring bases the driver wrote: (TX, RX).
    pub fn ring_bases(&self) -> (u64, u64) {
        (self.tx_base, self.rx_base)
    }

    /// RX buffers posted and not yet filled, and frames waiting in the receive FIFO.
    pub fn rx_backlog(&self) -> (usize, usize) {
        (self.posted.len() + self.rx_work.len(), self.fifo.len())
    }

    /// The MAC side (to inspect a [`QueueMac`], say).
    pub fn mac(&mut self) -> &mut dyn SnicMac {
        self.mac.as_mut()
    }

    fn error(&mut self, msg: String) {
        self.last_error = Some(msg);
    }

    /// A frame arrived from the MAC side: into the oldest posted buffer, else into the
    /// receive FIFO, else dropped (counted).
    pub fn receive(&mut self, frame: Vec<u8>, cx: &mut Cx<'_>) {
        self.accept_frame(frame);
        self.start_rx(cx);
    }

    fn accept_frame(&mut self, frame: Vec<u8>) {
        self.stats.rx_arrived += 1;
        if frame.is_empty() || frame.len() as u64 > u64::from(self.params.max_frame) {
            self.stats.rx_dropped_bad_size += 1;
            let msg = format!(
                "RX: a {}-byte frame dropped (frames are 1..={} bytes)",
                frame.len(),
                self.params.max_frame
            );
            self.error(msg);
            return;
        }
        if let Some(buf) = self.posted.pop_front() {
            self.fill(buf, frame);
        } else if self.fifo.len() < self.params.rx_fifo {
            self.fifo.push_back(frame);
        } else {
            self.stats.rx_dropped_no_buffer += 1;
            let msg = format!(
                "RX: a {}-byte frame dropped: no RX buffer posted and {} frames waiting",
                frame.len(),
                self.fifo.len()
            );
            self.error(msg);
        }
    }

    /// Gives `frame` to `buf`, or drops it if it does not fit (the buffer stays posted).
    fn fill(&mut self, buf: RxBuf, frame: Vec<u8>) {
        if frame.len() as u64 > buf.cap {
            self.stats.rx_dropped_bad_size += 1;
            let msg = format!(
                "RX: a {}-byte frame dropped: the posted buffer at {:#x} holds {} bytes",
                frame.len(),
                buf.addr,
                buf.cap
            );
            self.error(msg);
            self.posted.push_front(buf);
        } else {
            self.rx_work.push_back((buf, frame));
        }
    }

    /// Takes the frames the MAC has, then keeps both engines busy.
    fn pump(&mut self, cx: &mut Cx<'_>) {
        while let Some(f) = self.mac.poll() {
            self.accept_frame(f);
        }
        self.start_tx(cx);
        self.start_post(cx);
        self.start_rx(cx);
    }

    /// The ring entry `idx` of the ring at `base`, if the index is good.
    fn entry(&self, base: u64, idx: u32) -> Result<u64, String> {
        if base == 0 {
            return Err("its ring base is not set (0)".to_string());
        }
        if idx >= self.params.ring_entries {
            return Err(format!(
                "index {idx} is past the ring's {} entries",
                self.params.ring_entries
            ));
        }
        base.checked_add(DESC_LEN * u64::from(idx))
            .filter(|a| a.checked_add(DESC_LEN).is_some())
            .ok_or_else(|| format!("descriptor {idx} of the ring at {base:#x} is past 2^64"))
    }

    fn start_tx(&mut self, cx: &mut Cx<'_>) {
        while self.tx == Tx::Idle {
            let Some(idx) = self.tx_queue.pop_front() else {
                return;
            };
            match self.entry(self.tx_base, idx) {
                Ok(at) => {
                    let id = cx.dma_read(at, DESC_LEN);
                    self.tx = Tx::Desc { id, idx };
                }
                Err(why) => {
                    self.stats.tx_bad_index += 1;
                    self.error(format!("TX doorbell {idx}: {why}"));
                    self.tx_irq(cx);
                }
            }
        }
    }

    fn tx_irq(&mut self, cx: &mut Cx<'_>) {
        self.stats.tx_irqs += 1;
        cx.msix(self.params.tx_vector);
    }

    fn start_post(&mut self, cx: &mut Cx<'_>) {
        while self.post.is_none() {
            let Some(idx) = self.post_queue.pop_front() else {
                return;
            };
            match self.entry(self.rx_base, idx) {
                Ok(at) => {
                    let id = cx.dma_read(at, DESC_LEN);
                    self.post = Some((id, at));
                }
                Err(why) => {
                    self.stats.rx_bad_index += 1;
                    self.error(format!("RX post {idx}: {why}"));
                }
            }
        }
    }

    fn start_rx(&mut self, cx: &mut Cx<'_>) {
        if self.rx != Rx::Idle {
            return;
        }
        if let Some((buf, frame)) = self.rx_work.pop_front() {
            let len = frame.len() as u64;
            let id = cx.dma_write(buf.addr, frame);
            self.rx = Rx::Data { id, buf, len };
        }
    }

    fn reg_write(&mut self, offset: u64, data: &[u8]) {
        let n = data.len();
        let u32_of = |d: &[u8]| u32::from_le_bytes([d[0], d[1], d[2], d[3]]);
        let set_half = |reg: &mut u64, high: bool, d: &[u8]| {
            let v = u64::from(u32_of(d));
            *reg = if high {
                (*reg & 0xffff_ffff) | v << 32
            } else {
                (*reg & !0xffff_ffff) | v
            };
        };
        match (offset, n) {
            (TX_DESC_BASE, 8) => self.tx_base = le64(data),
            (RX_DESC_BASE, 8) => self.rx_base = le64(data),
            // 64-bit registers written as two 32-bit halves (lo_hi_writeq).
            (0 | 4, 4) => set_half(&mut self.tx_base, offset == 4, data),
            (8 | 12, 4) => set_half(&mut self.rx_base, offset == 12, data),
            (TX_DESC_IDX, 4) => {
                self.stats.tx_doorbells += 1;
                let idx = u32_of(data);
                self.tx_idx = idx;
                let waiting = self.tx_queue.len() + usize::from(self.tx != Tx::Idle);
                if waiting >= self.params.ring_entries as usize {
                    self.stats.tx_overruns += 1;
                    self.error(format!(
                        "TX doorbell {idx} refused: {waiting} doorbells already waiting"
                    ));
                } else {
                    self.tx_queue.push_back(idx);
                }
            }
            (RX_DESC_IDX, 4) => {
                self.stats.rx_posts += 1;
                let idx = u32_of(data);
                self.rx_idx = idx;
                let posted = self.post_queue.len()
                    + usize::from(self.post.is_some())
                    + self.posted.len()
                    + self.rx_work.len()
                    + usize::from(self.rx != Rx::Idle);
                if posted >= self.params.ring_entries as usize {
                    self.stats.rx_overruns += 1;
                    self.error(format!(
                        "RX post {idx} refused: {posted} buffers already posted"
                    ));
                } else {
                    self.post_queue.push_back(idx);
                }
            }
            (ENABLED, 4) => self.enabled = u32_of(data),
            (o, _) if o < REGS_LEN => {
                self.stats.bad_size_writes += 1;
                self.error(format!(
                    "a {n}-byte write at BAR offset {o:#x} fits no register there (tx/rx_desc_base take 8 or 4+4 bytes, the others 4)"
                ));
            }
            (o, _) => {
                self.stats.unknown_writes += 1;
                self.error(format!(
                    "a {n}-byte write at BAR offset {o:#x}, past the registers (0..{REGS_LEN:#x})"
                ));
            }
        }
    }

    fn regs_image(&self) -> [u8; REGS_LEN as usize] {
        let mut r = [0u8; REGS_LEN as usize];
        r[0..8].copy_from_slice(&self.tx_base.to_le_bytes());
        r[8..16].copy_from_slice(&self.rx_base.to_le_bytes());
        r[16..20].copy_from_slice(&self.tx_idx.to_le_bytes());
        r[20..24].copy_from_slice(&self.rx_idx.to_le_bytes());
        r[24..28].copy_from_slice(&self.enabled.to_le_bytes());
        r
    }
}

impl DeviceModel for SimpleNic {
    fn mem_read(&mut self, bar: u8, offset: u64, buf: &mut [u8], _cx: &mut Cx<'_>) -> ReadReply {
        let end = offset.checked_add(buf.len() as u64);
        match end {
            Some(end) if bar == self.params.bar && end <= REGS_LEN => {
                let img = self.regs_image();
                buf.copy_from_slice(&img[offset as usize..end as usize]);
                ReadReply::Now
            }
            _ => ReadReply::Unsupported,
        }
    }

    fn mem_write(&mut self, bar: u8, offset: u64, data: &[u8], cx: &mut Cx<'_>) {
        if bar != self.params.bar {
            self.stats.unknown_writes += 1;
            self.error(format!(
                "a {}-byte write to BAR{bar}, which has no registers",
                data.len()
            ));
            return;
        }
        self.reg_write(offset, data);
        self.pump(cx);
    }

    fn dma_done(&mut self, id: DmaId, ok: bool, data: &[u8], cx: &mut Cx<'_>) {
        match self.tx {
            Tx::Desc { id: want, idx } if want == id => {
                self.tx = Tx::Idle;
                let (addr, len) = if ok && data.len() == DESC_LEN as usize {
                    (le64(&data[..8]), le64(&data[8..]))
                } else {
                    self.stats.tx_dma_errors += 1;
                    self.error(format!("TX: reading descriptor {idx} failed"));
                    self.tx_irq(cx);
                    self.pump(cx);
                    return;
                };
                if len == 0 || len > u64::from(self.params.max_frame) {
                    self.stats.tx_bad_length += 1;
                    self.error(format!(
                        "TX descriptor {idx}: length {len} (frames are 1..={} bytes)",
                        self.params.max_frame
                    ));
                    self.tx_irq(cx);
                } else {
                    let id = cx.dma_read(addr, len);
                    self.tx = Tx::Data { id };
                }
                self.pump(cx);
                return;
            }
            Tx::Data { id: want } if want == id => {
                self.tx = Tx::Idle;
                if !ok {
                    self.stats.tx_dma_errors += 1;
                    self.error(format!("TX: reading a {}-byte frame failed", data.len()));
                } else {
                    match self.mac.transmit(data) {
                        Ok(()) => {
                            self.stats.tx_frames += 1;
                            self.stats.tx_bytes += data.len() as u64;
                        }
                        Err(why) => {
                            self.stats.tx_mac_dropped += 1;
                            self.error(format!("TX: {why}"));
                        }
                    }
                }
                self.tx_irq(cx);
                self.pump(cx);
                return;
            }
            _ => {}
        }
        if let Some((want, at)) = self.post {
            if want == id {
                self.post = None;
                if !ok || data.len() != DESC_LEN as usize {
                    self.stats.rx_dma_errors += 1;
                    self.error(format!("RX: reading the descriptor at {at:#x} failed"));
                } else {
                    let (addr, cap) = (le64(&data[..8]), le64(&data[8..]));
                    if cap == 0 {
                        self.stats.rx_bad_length += 1;
                        self.error(format!(
                            "RX descriptor at {at:#x}: a buffer of length 0 (at {addr:#x})"
                        ));
                    } else {
                        let buf = RxBuf {
                            desc: at,
                            addr,
                            cap,
                        };
                        self.posted.push_back(buf);
                        // Frames that waited take the buffers in order.
                        while !self.posted.is_empty() {
                            let Some(f) = self.fifo.pop_front() else {
                                break;
                            };
                            let b = self.posted.pop_front().expect("not empty");
                            self.fill(b, f);
                        }
                    }
                }
                self.pump(cx);
                return;
            }
        }
        match self.rx {
            Rx::Data { id: want, buf, len } if want == id => {
                if ok {
                    let mut d = cx.buffer(DESC_LEN as usize);
                    d.extend_from_slice(&buf.addr.to_le_bytes());
                    d.extend_from_slice(&len.to_le_bytes());
                    let id = cx.dma_write(buf.desc, d);
                    self.rx = Rx::Desc { id, len };
                } else {
                    self.rx = Rx::Idle;
                    self.stats.rx_dma_errors += 1;
                    self.error(format!(
                        "RX: writing a {len}-byte frame to {:#x} failed",
                        buf.addr
                    ));
                }
            }
            Rx::Desc { id: want, len } if want == id => {
                self.rx = Rx::Idle;
                if ok {
                    self.stats.rx_frames += 1;
                    self.stats.rx_bytes += len;
                    cx.msix(self.params.rx_vector);
                } else {
                    self.stats.rx_dma_errors += 1;
                    self.error("RX: writing a descriptor back failed".to_string());
                }
            }
            _ => {
                // Not ours (a DMA from before a reset): nothing to do.
                return;
            }
        }
        self.pump(cx);
    }

    fn reset(&mut self, _cx: &mut Cx<'_>) {
        let (params, stats, last) = (self.params, self.stats, self.last_error.take());
        let mac = std::mem::replace(&mut self.mac, Box::new(NoMac));
        *self = SimpleNic::new(params, mac);
        self.stats = stats;
        self.last_error = last;
    }

    fn report(&self) -> Option<serde_json::Value> {
        let mut v = self.stats.to_json();
        v["errors"] = self.stats.errors().into();
        v["enabled"] = self.enabled.into();
        v["rx_posted_buffers"] = (self.posted.len() + self.rx_work.len()).into();
        v["rx_fifo_frames"] = self.fifo.len().into();
        v["last_error"] = self.last_error.clone().into();
        Some(v)
    }

    fn progress(&self) -> Option<u64> {
        Some(self.stats.tx_frames + self.stats.rx_frames)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Command, DeviceState};
    use pcielab_sim::{Rng, SimTime};
    use pcielab_wire::Bdf;

    /// A host for the model: flat memory of 1 MiB at address 0 (DMA outside it fails),
    /// carrying out the model's commands at once, in order, and recording its MSI-X
    /// vectors. DMA reads of addresses in `fail_reads` fail.
    struct Host {
        mem: Vec<u8>,
        state: DeviceState,
        irqs: Vec<u16>,
        fail_reads: Vec<u64>,
        /// DMA writes seen: (address, length).
        writes: Vec<(u64, usize)>,
    }

    const MEM: usize = 1 << 20;
    const TX_RING: u64 = 0x1000;
    const RX_RING: u64 = 0x2000;
    const TX_BUF: u64 = 0x1_0000;
    const RX_BUF: u64 = 0x8_0000;

    impl Host {
        fn new() -> Host {
            Host {
                mem: vec![0; MEM],
                state: DeviceState {
                    next_dma: 0,
                    rng: Rng::new(1),
                },
                irqs: Vec::new(),
                fail_reads: Vec::new(),
                writes: Vec::new(),
            }
        }
        fn call(&mut self, nic: &mut SimpleNic, f: impl FnOnce(&mut SimpleNic, &mut Cx<'_>)) {
            let (mut cmds, mut spare) = (Vec::new(), Vec::new());
            let bdf = Bdf::new(1, 0, 0).unwrap();
            {
                let mut cx = Cx::new(
                    SimTime::ZERO,
                    (0, bdf),
                    &mut cmds,
                    &mut self.state,
                    None,
                    &mut spare,
                );
                f(nic, &mut cx);
            }
            let mut todo: VecDeque<Command> = cmds.into();
            while let Some(c) = todo.pop_front() {
                let (id, ok, data) = match c {
                    Command::DmaRead { id, addr, len, .. } => {
                        let r = (addr as usize)..(addr + len) as usize;
                        match self.mem.get(r) {
                            Some(d) if !self.fail_reads.contains(&addr) => (id, true, d.to_vec()),
                            _ => (id, false, vec![0; len as usize]),
                        }
                    }
                    Command::DmaWrite { id, addr, data, .. } => {
                        self.writes.push((addr, data.len()));
                        let r = (addr as usize)..addr as usize + data.len();
                        let ok = match self.mem.get_mut(r) {
                            Some(m) => {
                                m.copy_from_slice(&data);
                                true
                            }
                            None => false,
                        };
                        (id, ok, Vec::new())
                    }
                    Command::Msix(v) => {
                        self.irqs.push(v);
                        continue;
                    }
                    other => panic!("unexpected command {other:?}"),
                };
                let mut more = Vec::new();
                {
                    let mut cx = Cx::new(
                        SimTime::ZERO,
                        (0, bdf),
                        &mut more,
                        &mut self.state,
                        None,
                        &mut spare,
                    );
                    nic.dma_done(id, ok, &data, &mut cx);
                }
                todo.extend(more);
            }
        }
        fn write(&mut self, nic: &mut SimpleNic, off: u64, data: &[u8]) {
            self.call(nic, |n, cx| n.mem_write(4, off, data, cx));
        }
        fn desc(&mut self, at: u64, addr: u64, len: u64) {
            self.mem[at as usize..at as usize + 8].copy_from_slice(&addr.to_le_bytes());
            self.mem[at as usize + 8..at as usize + 16].copy_from_slice(&len.to_le_bytes());
        }
        fn read_desc(&self, at: u64) -> (u64, u64) {
            let d = &self.mem[at as usize..at as usize + 16];
            (le64(&d[..8]), le64(&d[8..]))
        }
        /// A driver's setup: ring bases and enabled.
        fn setup(&mut self, nic: &mut SimpleNic) {
            self.write(nic, TX_DESC_BASE, &TX_RING.to_le_bytes());
            self.write(nic, RX_DESC_BASE, &RX_RING.to_le_bytes());
            self.write(nic, ENABLED, &1u32.to_le_bytes());
        }
        /// Puts `frame` in TX buffer `i`, its descriptor in the ring, rings the doorbell.
        fn send(&mut self, nic: &mut SimpleNic, i: u32, frame: &[u8]) {
            let buf = TX_BUF + 0x1000 * u64::from(i);
            self.mem[buf as usize..buf as usize + frame.len()].copy_from_slice(frame);
            self.desc(TX_RING + 16 * u64::from(i), buf, frame.len() as u64);
            self.write(nic, TX_DESC_IDX, &i.to_le_bytes());
        }
        /// Posts RX buffer `i` of `cap` bytes.
        fn post(&mut self, nic: &mut SimpleNic, i: u32, cap: u64) {
            self.desc(
                RX_RING + 16 * u64::from(i),
                RX_BUF + 0x1000 * u64::from(i),
                cap,
            );
            self.write(nic, RX_DESC_IDX, &i.to_le_bytes());
        }
        /// The frame in RX buffer `i`, by its written-back descriptor.
        fn received(&self, i: u32) -> Vec<u8> {
            let (addr, len) = self.read_desc(RX_RING + 16 * u64::from(i));
            assert_eq!(
                addr,
                RX_BUF + 0x1000 * u64::from(i),
                "descriptor {i} keeps its address"
            );
            self.mem[addr as usize..(addr + len) as usize].to_vec()
        }
    }

    fn frame(k: usize, len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + k * 13) as u8).collect()
    }

    #[test]
    fn tx_reads_descriptor_then_frame_and_raises_vector_0() {
        let mac = QueueMac::default();
        let mut nic = SimpleNic::new(SnicParams::default(), Box::new(mac.clone()));
        let mut h = Host::new();
        h.setup(&mut nic);
        assert_eq!(nic.ring_bases(), (TX_RING, RX_RING));
        assert_eq!(nic.enabled(), 1);
        let frames: Vec<Vec<u8>> = [60, 61, 1514, 1, 4096]
            .iter()
            .enumerate()
            .map(|(k, &n)| frame(k, n))
            .collect();
        for (i, f) in frames.iter().enumerate() {
            h.send(&mut nic, i as u32, f);
        }
        assert_eq!(mac.take_sent(), frames);
        assert_eq!(h.irqs, vec![0; 5]);
        let s = nic.stats();
        assert_eq!(
            (s.tx_doorbells, s.tx_frames, s.tx_irqs, s.errors()),
            (5, 5, 5, 0)
        );
        assert_eq!(s.tx_bytes, 60 + 61 + 1514 + 1 + 4096);
        // Reads of BAR4 give the registers back.
        let mut b = [0u8; 28];
        let mut r = ReadReply::Unsupported;
        h.call(&mut nic, |n, cx| r = n.mem_read(4, 0, &mut b, cx));
        assert_eq!(r, ReadReply::Now);
        assert_eq!(le64(&b[0..8]), TX_RING);
        assert_eq!(le64(&b[8..16]), RX_RING);
        assert_eq!(&b[16..20], &4u32.to_le_bytes());
        assert_eq!(&b[24..28], &1u32.to_le_bytes());
        let mut b = [0u8; 4];
        h.call(&mut nic, |n, cx| r = n.mem_read(4, 26, &mut b, cx));
        assert_eq!(r, ReadReply::Unsupported, "past the registers");
    }

    #[test]
    fn rx_fills_posted_buffers_in_order_and_writes_descriptors_back() {
        let mac = QueueMac::default();
        let mut nic = SimpleNic::new(SnicParams::default(), Box::new(mac.clone()));
        let mut h = Host::new();
        h.setup(&mut nic);
        h.post(&mut nic, 0, 2048);
        h.post(&mut nic, 1, 2048);
        assert_eq!(nic.rx_backlog(), (2, 0));
        let (a, b) = (frame(1, 64), frame(2, 1500));
        h.call(&mut nic, |n, cx| {
            n.receive(a.clone(), cx);
            n.receive(b.clone(), cx);
        });
        assert_eq!(h.received(0), a);
        assert_eq!(h.received(1), b);
        assert_eq!(h.irqs, vec![1, 1]);
        // Frame, then its descriptor, for each (upstream's order).
        assert_eq!(
            h.writes,
            vec![
                (RX_BUF, 64),
                (RX_RING, 16),
                (RX_BUF + 0x1000, 1500),
                (RX_RING + 16, 16)
            ]
        );
        let s = nic.stats();
        assert_eq!(
            (
                s.rx_posts,
                s.rx_arrived,
                s.rx_frames,
                s.rx_bytes,
                s.errors()
            ),
            (2, 2, 2, 1564, 0)
        );
    }

    #[test]
    fn frames_wait_in_the_fifo_until_a_buffer_comes_then_are_dropped_and_counted() {
        let params = SnicParams {
            rx_fifo: 2,
            ..SnicParams::default()
        };
        let mut nic = SimpleNic::new(params, Box::new(NoMac));
        let mut h = Host::new();
        h.setup(&mut nic);
        h.call(&mut nic, |n, cx| {
            for k in 0..3 {
                n.receive(frame(k, 100 + k), cx);
            }
        });
        let s = nic.stats();
        assert_eq!(
            (s.rx_arrived, s.rx_dropped_no_buffer, s.rx_frames),
            (3, 1, 0)
        );
        assert!(nic.last_error().unwrap().contains("no RX buffer posted"));
        assert_eq!(nic.rx_backlog(), (0, 2));
        h.post(&mut nic, 0, 2048);
        assert_eq!(h.received(0), frame(0, 100));
        h.post(&mut nic, 1, 2048);
        assert_eq!(h.received(1), frame(1, 101));
        assert_eq!(h.irqs, vec![1, 1]);
        // Upstream's behaviour: no FIFO, a frame with no buffer is dropped at once.
        let mut up = SimpleNic::new(
            SnicParams {
                rx_fifo: 0,
                ..SnicParams::default()
            },
            Box::new(NoMac),
        );
        h.setup(&mut up);
        h.call(&mut up, |n, cx| n.receive(frame(9, 60), cx));
        assert_eq!(up.stats().rx_dropped_no_buffer, 1);
    }

    #[test]
    fn loopback_brings_tx_frames_back_on_rx() {
        let mut nic = SimpleNic::new(SnicParams::default(), Box::new(Loopback::default()));
        let mut h = Host::new();
        h.setup(&mut nic);
        for k in 0..4u32 {
            h.post(&mut nic, k, 2048);
        }
        let frames: Vec<Vec<u8>> = (0..4).map(|k| frame(k, 60 + 333 * k)).collect();
        for (k, f) in frames.iter().enumerate() {
            h.send(&mut nic, k as u32, f);
        }
        for (k, f) in frames.iter().enumerate() {
            assert_eq!(&h.received(k as u32), f, "frame {k}");
        }
        assert_eq!(h.irqs, vec![0, 1, 0, 1, 0, 1, 0, 1]);
        assert_eq!(nic.stats().errors(), 0);
    }

    #[test]
    fn bad_input_is_counted_and_answered_never_fatal() {
        let mut nic = SimpleNic::new(
            SnicParams {
                ring_entries: 8,
                max_frame: 2048,
                ..SnicParams::default()
            },
            Box::new(NoMac),
        );
        let mut h = Host::new();
        // Doorbell and post before the rings are set: counted, TX still answered.
        h.write(&mut nic, TX_DESC_IDX, &0u32.to_le_bytes());
        h.write(&mut nic, RX_DESC_IDX, &0u32.to_le_bytes());
        assert_eq!((nic.stats().tx_bad_index, nic.stats().rx_bad_index), (1, 1));
        assert_eq!(h.irqs, vec![0]);
        h.setup(&mut nic);
        // Index past the ring.
        h.write(&mut nic, TX_DESC_IDX, &8u32.to_le_bytes());
        h.write(&mut nic, RX_DESC_IDX, &9u32.to_le_bytes());
        assert_eq!((nic.stats().tx_bad_index, nic.stats().rx_bad_index), (2, 2));
        assert!(nic
            .last_error()
            .unwrap()
            .contains("past the ring's 8 entries"));
        // TX length 0 and over max_frame; RX buffer of length 0.
        h.desc(TX_RING, TX_BUF, 0);
        h.write(&mut nic, TX_DESC_IDX, &0u32.to_le_bytes());
        h.desc(TX_RING + 16, TX_BUF, 2049);
        h.write(&mut nic, TX_DESC_IDX, &1u32.to_le_bytes());
        assert_eq!(nic.stats().tx_bad_length, 2);
        h.post(&mut nic, 0, 0);
        assert_eq!(nic.stats().rx_bad_length, 1);
        assert_eq!(nic.rx_backlog(), (0, 0));
        // Writes of the wrong size, or to no register.
        h.write(&mut nic, TX_DESC_IDX, &[1, 0]);
        h.write(&mut nic, TX_DESC_IDX, &[0; 8]);
        h.write(&mut nic, TX_DESC_BASE, &[0; 2]);
        h.write(&mut nic, 0x100, &[0; 4]);
        h.call(&mut nic, |n, cx| n.mem_write(0, 0, &[0; 4], cx));
        assert_eq!(
            (nic.stats().bad_size_writes, nic.stats().unknown_writes),
            (3, 2)
        );
        assert_eq!(
            nic.ring_bases(),
            (TX_RING, RX_RING),
            "bad writes change nothing"
        );
        // DMA failures: the descriptor is outside host memory, then the frame is.
        h.write(&mut nic, TX_DESC_BASE, &(MEM as u64 - 16).to_le_bytes());
        h.write(&mut nic, TX_DESC_IDX, &1u32.to_le_bytes());
        h.write(&mut nic, TX_DESC_BASE, &TX_RING.to_le_bytes());
        h.desc(TX_RING + 32, MEM as u64, 64);
        h.write(&mut nic, TX_DESC_IDX, &2u32.to_le_bytes());
        assert_eq!(nic.stats().tx_dma_errors, 2);
        // An RX buffer outside host memory: the frame write fails, counted.
        h.desc(RX_RING + 16, MEM as u64, 2048);
        h.write(&mut nic, RX_DESC_IDX, &1u32.to_le_bytes());
        h.call(&mut nic, |n, cx| n.receive(frame(0, 64), cx));
        // A descriptor read that fails.
        h.fail_reads.push(RX_RING + 32);
        h.post(&mut nic, 2, 2048);
        assert_eq!(nic.stats().rx_dma_errors, 2);
        // Frames that are empty, too long for max_frame or for the posted buffer.
        h.post(&mut nic, 3, 100);
        h.call(&mut nic, |n, cx| {
            n.receive(Vec::new(), cx);
            n.receive(frame(0, 2049), cx);
            n.receive(frame(0, 101), cx);
            n.receive(frame(0, 100), cx);
        });
        assert_eq!(nic.stats().rx_dropped_bad_size, 3);
        assert_eq!(
            h.received(3),
            frame(0, 100),
            "the buffer waited for a frame that fits"
        );
        // Every doorbell was answered by one TX interrupt (sent or not), and no frame
        // went out: there is no MAC.
        let s = nic.stats();
        assert_eq!(s.tx_irqs, s.tx_doorbells);
        assert_eq!(s.tx_doorbells, 6);
        assert_eq!((s.tx_frames, s.rx_frames), (0, 1));
        let r = nic.report().unwrap();
        assert_eq!(r["errors"], s.errors());
        assert_eq!(r["tx_dma_errors"], 2);
        assert!(r["last_error"].as_str().is_some());
    }

    #[test]
    fn no_mac_counts_dropped_frames_and_overruns_are_refused() {
        let mut nic = SimpleNic::new(
            SnicParams {
                ring_entries: 2,
                ..SnicParams::default()
            },
            Box::new(NoMac),
        );
        let mut h = Host::new();
        h.setup(&mut nic);
        h.send(&mut nic, 0, &frame(0, 64));
        let s = nic.stats();
        assert_eq!((s.tx_frames, s.tx_mac_dropped, s.tx_irqs), (0, 1, 1));
        assert!(nic.last_error().unwrap().contains("no MAC"));
        // Posts beyond the ring's size are refused.
        for i in 0..3 {
            h.post(&mut nic, i % 2, 2048);
        }
        assert_eq!(nic.stats().rx_overruns, 1);
        assert_eq!(nic.rx_backlog(), (2, 0));
    }

    proptest::proptest! {
        /// Whatever the host writes to any register and whatever the descriptors and
        /// frames hold, the device never panics, answers every doorbell it took with
        /// one TX interrupt, and accounts for every frame that arrived.
        #[test]
        fn any_input_is_answered_or_counted(
            ops in proptest::collection::vec(
                (0u8..4, 0u64..40, proptest::collection::vec(proptest::prelude::any::<u8>(), 0..10), 0u32..12, 0u64..5000),
                1..80,
            ),
            fifo in 0usize..4,
            set_up in proptest::prelude::any::<bool>(),
        ) {
            let params = SnicParams { ring_entries: 8, max_frame: 3000, rx_fifo: fifo, ..SnicParams::default() };
            let mut nic = SimpleNic::new(params, Box::new(Loopback::default()));
            let mut h = Host::new();
            if set_up {
                h.setup(&mut nic);
            }
            for (kind, off, bytes, idx, len) in ops {
                match kind {
                    // A raw register write of any size at any offset.
                    0 => h.write(&mut nic, off, &bytes),
                    // A descriptor with any length (and an address maybe outside memory).
                    1 => {
                        let ring = if idx % 2 == 0 { TX_RING } else { RX_RING };
                        let addr = if len % 7 == 0 { MEM as u64 - 8 } else { TX_BUF };
                        h.desc(ring + 16 * u64::from(idx % 8), addr, len);
                    }
                    // A doorbell or a post with any index.
                    2 => {
                        let reg = if len % 2 == 0 { TX_DESC_IDX } else { RX_DESC_IDX };
                        h.write(&mut nic, reg, &idx.to_le_bytes());
                    }
                    // A frame of any length from the wire.
                    _ => h.call(&mut nic, |n, cx| n.receive(frame(idx as usize, len as usize), cx)),
                }
            }
            let s = nic.stats();
            // The fake host finishes every DMA at once: nothing is left in flight.
            proptest::prop_assert_eq!(s.tx_irqs + s.tx_overruns, s.tx_doorbells);
            proptest::prop_assert_eq!(h.irqs.iter().filter(|&&v| v == 0).count() as u64, s.tx_irqs);
            let (_, waiting) = nic.rx_backlog();
            // Frames that arrived: received, dropped (counted) or waiting in the FIFO;
            // a frame whose write failed is an RX DMA error (so are failed posts).
            let accounted = s.rx_frames + s.rx_dropped_no_buffer + s.rx_dropped_bad_size + waiting as u64;
            proptest::prop_assert!(accounted <= s.rx_arrived);
            proptest::prop_assert!(s.rx_arrived <= accounted + s.rx_dma_errors);
            proptest::prop_assert_eq!(h.irqs.iter().filter(|&&v| v == 1).count() as u64, s.rx_frames);
        }
    }

    #[test]
    fn halves_of_the_base_registers_and_reset() {
        let mut nic = SimpleNic::new(SnicParams::default(), Box::new(NoMac));
        let mut h = Host::new();
        h.write(&mut nic, 0, &0x1234_5678u32.to_le_bytes());
        h.write(&mut nic, 4, &0x9abcu32.to_le_bytes());
        h.write(&mut nic, 12, &1u32.to_le_bytes());
        h.write(&mut nic, 8, &0x40u32.to_le_bytes());
        assert_eq!(nic.ring_bases(), (0x9abc_1234_5678, 0x1_0000_0040));
        h.call(&mut nic, |n, cx| n.reset(cx));
        assert_eq!(nic.ring_bases(), (0, 0));
        assert_eq!(nic.stats().errors(), 0);
    }
}
