//! The D2D receiver: a NIC with the D2D Rx FSM, its Rx Queues and the UDP/IP offload
//! engine (seed 004, §III-C, Fig. 5, Table II).

use super::uoe::{Template, BLOCK};
use super::{read_bytes, reg, write_regs, RxState, StreamError, CTL_CLEAR, CTL_START, ID, WINDOW};
use crate::model::{Cx, DeviceModel, DmaId, ReadReply};
use crate::nic::{Ethernet, FCS};
use crate::DeviceTiming;
use pcielab_sim::{SimDuration, SimTime};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// How a receiver is built.
#[derive(Debug, Clone, PartialEq)]
pub struct D2dNicConfig {
    /// Streams (1..=16).
    pub streams: u8,
    /// Rx Queue bytes per stream (the paper's example: 32 credits of 4 KB).
    pub rx_queue: u64,
    /// The MAC's line rate (the paper's NetFPGA: 10GbE).
    pub eth: Ethernet,
    /// Frames the legacy Transmit Packet Queue holds (formed, waiting for the MAC).
    pub tx_frames: usize,
    /// The offload engine's clock, MHz, and stream width, bits (§IV-A: a 64-bit
    /// AXI-Stream at 160 MHz): forming a frame takes its bytes' cycles.
    pub uoe_mhz: u32,
    /// See `uoe_mhz`.
    pub uoe_bits: u32,
    /// Frames go out on the device's cable (`Cx::ethernet_send`); otherwise to an
    /// internal sink that counts them.
    pub cable: bool,
    /// The PCIe datapath.
    pub timing: DeviceTiming,
}

impl Default for D2dNicConfig {
    fn default() -> D2dNicConfig {
        D2dNicConfig {
            streams: 4,
            rx_queue: 128 * 1024,
            eth: Ethernet::new(10.0).unwrap_or_else(|_| unreachable!()),
            tx_frames: 4,
            uoe_mhz: 160,
            uoe_bits: 64,
            cable: false,
            timing: super::pcie_timing(125, 64, super::PAPER_TLP_CYCLES),
        }
    }
}

/// A frame the receiver sent, as a [`FrameTap`] keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TappedFrame {
    /// The stream.
    pub stream: u8,
    /// When the offload engine handed it to the MAC (formed).
    pub formed: SimTime,
    /// When its last bit left the MAC.
    pub sent: SimTime,
    /// The frame, FCS not included.
    pub bytes: Vec<u8>,
}

/// A shared list of the frames a receiver sends (for tests and tools that look at
/// the frames; the simulator owns the device).
#[derive(Debug, Clone, Default)]
pub struct FrameTap(pub Arc<Mutex<Vec<TappedFrame>>>);

impl FrameTap {
    /// Takes the frames kept so far.
    pub fn take(&self) -> Vec<TappedFrame> {
        self.0
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default()
    }
}

#[derive(Debug, Default, Clone)]
struct RxStream {
    regs: [u64; 6],
    uoe: Template,
    state: u32,
    error: u32,
    gen: u64,
    queue: VecDeque<u8>,
    /// Bytes taken into the queue.
    taken: u64,
    /// Bytes moved out of the queue into frames.
    drained: u64,
    /// Payload bytes sent.
    sent: u64,
    frames: u64,
    dropped: u64,
    granted: u64,
    /// A frame is being formed.
    calc: bool,
    payload: usize,
    /// The credit limit the stream started with.
    first: u64,
}

/// The D2D receiver (`kind = "d2d-nic"`).
///
/// ```
/// use pcielab_device::d2d::{D2dNic, D2dNicConfig};
/// let nic = D2dNic::new(D2dNicConfig::default());
/// assert_eq!(nic.config().rx_queue, 128 * 1024);
/// ```
#[derive(Debug)]
pub struct D2dNic {
    cfg: D2dNicConfig,
    streams: Vec<RxStream>,
    /// Formed frames waiting for the MAC: (stream, generation, formed at, frame, payload bytes).
    txq: VecDeque<(u8, u64, SimTime, Vec<u8>, u64)>,
    mac_busy: bool,
    /// Credit grants in flight: (DMA, stream).
    grants: Vec<(DmaId, u8)>,
    errors: u64,
    frames_out: u64,
    frame_bytes_out: u64,
    tap: Option<FrameTap>,
    frame: Vec<u8>,
}

const T_CALC: u64 = 0;
const T_MAC: u64 = 1;

impl D2dNic {
    /// A receiver with `cfg` (streams clamped to 1..=16).
    pub fn new(mut cfg: D2dNicConfig) -> D2dNic {
        cfg.streams = cfg.streams.clamp(1, super::MAX_STREAMS);
        cfg.tx_frames = cfg.tx_frames.max(1);
        D2dNic {
            streams: vec![RxStream::default(); cfg.streams as usize],
            cfg,
            txq: VecDeque::new(),
            mac_busy: false,
            grants: Vec::new(),
            errors: 0,
            frames_out: 0,
            frame_bytes_out: 0,
            tap: None,
            frame: Vec::new(),
        }
    }

    /// Keeps every frame sent in `tap` too.
    pub fn with_tap(mut self, tap: FrameTap) -> D2dNic {
        self.tap = Some(tap);
        self
    }

    /// Its configuration.
    pub fn config(&self) -> &D2dNicConfig {
        &self.cfg
    }

    fn base_credits(&self, t: &RxStream) -> u64 {
        match t.regs[2] >> 32 {
            0 => 0,
            c => self.cfg.rx_queue / c,
        }
    }

    fn reg(&self, off: u64, bar_base: u64) -> u64 {
        let n = self.cfg.streams as u64;
        match off {
            0 => ID as u64 | n << 32,
            8 => self.errors,
            o if (reg::STREAM_BASE..reg::STREAM_BASE + n * reg::STREAM_STRIDE).contains(&o) => {
                let r = o - reg::STREAM_BASE;
                let s = (r / reg::STREAM_STRIDE) as u8;
                let t = &self.streams[s as usize];
                match r % reg::STREAM_STRIDE {
                    reg::RX_ADDR => bar_base + reg::rxq(s),
                    reg::CREDITS => (self.base_credits(t) << 32) | (t.regs[3] & 0xffff_ffff),
                    w => t.regs[(w / 8) as usize],
                }
            }
            o if (reg::STATUS_BASE..reg::STATUS_BASE + n * reg::STATUS_STRIDE).contains(&o) => {
                let r = o - reg::STATUS_BASE;
                let t = &self.streams[(r / reg::STATUS_STRIDE) as usize];
                match r % reg::STATUS_STRIDE {
                    reg::STATE => t.state as u64 | (t.error as u64) << 32,
                    reg::BYTES => t.taken,
                    reg::UNITS => t.frames,
                    reg::DROPPED => t.dropped,
                    reg::QUEUED => t.queue.len() as u64,
                    reg::CREDITS_OUT => t.granted,
                    reg::SENT => t.sent,
                    _ => 0,
                }
            }
            o if (reg::UOE_BASE..reg::UOE_BASE + n * reg::UOE_STRIDE).contains(&o) => {
                let r = o - reg::UOE_BASE;
                self.streams[(r / reg::UOE_STRIDE) as usize]
                    .uoe
                    .reg((r % reg::UOE_STRIDE) as usize)
            }
            _ => 0,
        }
    }

    fn set_reg(&mut self, off: u64, v: u64, cx: &mut Cx<'_>) {
        let n = self.cfg.streams as u64;
        if (reg::STREAM_BASE..reg::STREAM_BASE + n * reg::STREAM_STRIDE).contains(&off) {
            let r = off - reg::STREAM_BASE;
            let s = (r / reg::STREAM_STRIDE) as u8;
            match r % reg::STREAM_STRIDE {
                reg::TX_ADDR => {
                    self.streams[s as usize].regs[0] = v & !7;
                    if v & CTL_START != 0 {
                        self.start(s, cx);
                    } else if v & CTL_CLEAR != 0 {
                        let t = &mut self.streams[s as usize];
                        t.dropped += t.queue.len() as u64;
                        t.queue.clear();
                    }
                }
                reg::RX_ADDR => {}
                w => self.streams[s as usize].regs[(w / 8) as usize] = v,
            }
        } else if (reg::UOE_BASE..reg::UOE_BASE + n * reg::UOE_STRIDE).contains(&off) {
            let r = off - reg::UOE_BASE;
            let (s, w) = (
                (r / reg::UOE_STRIDE) as usize,
                (r % reg::UOE_STRIDE) as usize,
            );
            if w + 8 <= BLOCK {
                self.streams[s].uoe.bytes[w..w + 8].copy_from_slice(&v.to_le_bytes());
            }
        }
    }

    fn fail(&mut self, s: u8, e: StreamError, cx: &mut Cx<'_>) {
        let t = &mut self.streams[s as usize];
        if t.error == 0 {
            t.error = e as u32;
        }
        self.errors += 1;
        cx.msix(s as u16);
    }

    /// Reset and start (TX_ADDR bit 0): empty the queue, check the registers.
    fn start(&mut self, s: u8, cx: &mut Cx<'_>) {
        // Grants count from the sender's first limit (CREDITS bits 31:0, as the driver
        // gave it), else from the Rx base credits.
        let base = {
            let t = &self.streams[s as usize];
            match t.regs[3] & 0xffff_ffff {
                0 => self.base_credits(t),
                n => n.min(self.base_credits(t)),
            }
        };
        let t = &mut self.streams[s as usize];
        let (regs, uoe) = (t.regs, t.uoe.clone());
        *t = RxStream {
            regs,
            uoe,
            gen: t.gen + 1,
            granted: base,
            first: base,
            ..RxStream::default()
        };
        self.txq.retain(|f| f.0 != s);
        let chunk = regs[2] >> 32;
        if chunk == 0 || chunk > self.cfg.rx_queue.min(WINDOW) || regs[4] == 0 {
            self.streams[s as usize].state = RxState::Error as u32;
            self.fail(s, StreamError::BadConfig, cx);
            return;
        }
        match self.streams[s as usize].uoe.payload_len() {
            Ok(p) => {
                let t = &mut self.streams[s as usize];
                t.payload = p;
                t.state = RxState::Fetch as u32;
            }
            Err(_) => {
                self.streams[s as usize].state = RxState::Error as u32;
                self.fail(s, StreamError::BadHeaders, cx);
            }
        }
    }

    /// A write into stream `s`'s window at `rel`.
    fn take(&mut self, s: u8, rel: u64, data: &[u8], cx: &mut Cx<'_>) {
        let cap = self.cfg.rx_queue;
        let t = &mut self.streams[s as usize];
        let running = [RxState::Fetch, RxState::Calc, RxState::Send];
        let why = if !running.iter().any(|x| *x as u32 == t.state) {
            Some(StreamError::NotRunning)
        } else if rel != t.taken % WINDOW {
            Some(StreamError::OutOfOrder)
        } else if t.taken + data.len() as u64 > t.regs[4] {
            Some(StreamError::TooMuch)
        } else if t.queue.len() as u64 + data.len() as u64 > cap {
            Some(StreamError::Overflow)
        } else {
            None
        };
        if let Some(e) = why {
            t.dropped += data.len() as u64;
            self.fail(s, e, cx);
            return;
        }
        t.queue.extend(data);
        t.taken += data.len() as u64;
        self.pump(s, cx);
    }

    /// The Rx FSM: Fetch (a frame's worth queued, or the stream's tail), Calc.
    fn pump(&mut self, s: u8, cx: &mut Cx<'_>) {
        let full = self.txq.len() >= self.cfg.tx_frames;
        let t = &mut self.streams[s as usize];
        if t.calc || full || t.state == RxState::Error as u32 || t.state == RxState::Idle as u32 {
            return;
        }
        let tail = t.taken == t.regs[4];
        let n = if t.queue.len() >= t.payload {
            t.payload
        } else if tail && !t.queue.is_empty() {
            t.queue.len()
        } else {
            if tail && t.drained == t.regs[4] && t.state != RxState::Done as u32 {
                t.state = RxState::Done as u32;
            }
            return;
        };
        t.calc = true;
        t.state = RxState::Calc as u32;
        // Forming takes the frame's bytes through the engine's stream.
        let bytes = (t.uoe.header_len() + n) as u64 * 8;
        let cycles = bytes.div_ceil(self.cfg.uoe_bits.max(8) as u64);
        let ps = cycles * 1_000_000 / self.cfg.uoe_mhz.max(1) as u64;
        cx.timer(
            SimDuration::from_ps(ps),
            t.gen << 16 | (s as u64) << 8 | T_CALC,
        );
    }

    /// Calc done: the frame is formed from the queue's head, the queue space is free
    /// (credits), the frame goes to the Transmit Packet Queue.
    fn formed(&mut self, s: u8, cx: &mut Cx<'_>) {
        let now = cx.now();
        let t = &mut self.streams[s as usize];
        t.calc = false;
        let n = t.payload.min(t.queue.len());
        let (a, b) = t.queue.as_slices();
        let mut payload = Vec::with_capacity(n);
        payload.extend_from_slice(&a[..n.min(a.len())]);
        if n > a.len() {
            payload.extend_from_slice(&b[..n - a.len()]);
        }
        t.queue.drain(..n);
        t.drained += n as u64;
        let mut frame = std::mem::take(&mut self.frame);
        let built = t
            .uoe
            .build(&payload, t.frames, now.as_ps() / 1000, &mut frame);
        let gen = t.gen;
        if built.is_err() {
            t.dropped += n as u64;
            t.state = RxState::Error as u32;
            self.frame = frame;
            self.fail(s, StreamError::BadHeaders, cx);
            return;
        }
        t.frames += 1;
        t.state = RxState::Send as u32;
        self.txq.push_back((s, gen, now, frame.clone(), n as u64));
        self.frame = frame;
        self.grant(s, cx);
        self.mac(cx);
        self.pump(s, cx);
    }

    /// Grants the credits that whole drained chunks freed.
    fn grant(&mut self, s: u8, cx: &mut Cx<'_>) {
        let t = &self.streams[s as usize];
        let chunk = (t.regs[2] >> 32).max(1);
        let want = t.first + t.drained / chunk;
        let t = &mut self.streams[s as usize];
        if want <= t.granted {
            return;
        }
        t.granted = want;
        let addr = t.regs[5];
        if addr != 0 {
            let id = cx.dma_write(addr, (want as u32).to_le_bytes().to_vec());
            self.grants.push((id, s));
        } else {
            cx.msix(s as u16);
        }
    }

    /// The MAC: the next formed frame goes on the wire.
    fn mac(&mut self, cx: &mut Cx<'_>) {
        if self.mac_busy || self.txq.is_empty() {
            return;
        }
        let len = self.txq[0].3.len() as u64 + FCS;
        self.mac_busy = true;
        cx.timer(self.cfg.eth.frame_time(len.max(64)), T_MAC);
    }

    fn sent(&mut self, cx: &mut Cx<'_>) {
        self.mac_busy = false;
        let Some((s, gen, formed, frame, n)) = self.txq.pop_front() else {
            return;
        };
        self.frames_out += 1;
        self.frame_bytes_out += frame.len() as u64;
        let t = &mut self.streams[s as usize];
        if t.gen == gen {
            t.sent += n;
            if t.sent == t.regs[4] && t.taken == t.regs[4] {
                t.state = RxState::Done as u32;
                cx.msix(s as u16);
            } else if t.state == RxState::Send as u32 && !t.calc {
                t.state = RxState::Fetch as u32;
            }
        }
        if let Some(tap) = &self.tap {
            if let Ok(mut v) = tap.0.lock() {
                v.push(TappedFrame {
                    stream: s,
                    formed,
                    sent: cx.now(),
                    bytes: frame.clone(),
                });
            }
        }
        if self.cfg.cable {
            cx.ethernet_send(frame);
        }
        self.mac(cx);
        for s in 0..self.cfg.streams {
            self.pump(s, cx);
        }
    }

    /// The base address of BAR 0 as software programmed it (0 without a configuration
    /// space: RX_ADDR then reads as an offset in the BAR).
    fn bar_base(cx: &mut Cx<'_>) -> u64 {
        let Some(c) = cx.config() else {
            return 0;
        };
        let lo = c.read_u32(0x10);
        let hi = if lo & 0b110 == 0b100 {
            c.read_u32(0x14)
        } else {
            0
        };
        (hi as u64) << 32 | (lo & !0xf) as u64
    }
}

impl DeviceModel for D2dNic {
    fn mem_read(&mut self, bar: u8, off: u64, buf: &mut [u8], cx: &mut Cx<'_>) -> ReadReply {
        if bar != 0 {
            return ReadReply::Unsupported;
        }
        let base = D2dNic::bar_base(cx);
        read_bytes(off, buf, |o| self.reg(o, base));
        ReadReply::Now
    }

    fn mem_write(&mut self, bar: u8, off: u64, data: &[u8], cx: &mut Cx<'_>) {
        if bar != 0 {
            return;
        }
        if off >= reg::RXQ_BASE {
            let s = (off - reg::RXQ_BASE) / WINDOW;
            let rel = (off - reg::RXQ_BASE) % WINDOW;
            if s < self.cfg.streams as u64 && rel + data.len() as u64 <= WINDOW {
                self.take(s as u8, rel, data, cx);
            } else {
                // Past the windows, or across two: refused, counted on the device.
                self.errors += 1;
            }
            return;
        }
        let mut sets = Vec::new();
        write_regs(off, data, |o| self.reg(o, 0), |o, v, _| sets.push((o, v)));
        for (o, v) in sets {
            self.set_reg(o, v, cx);
        }
    }

    fn timer(&mut self, tok: u64, cx: &mut Cx<'_>) {
        if tok == T_MAC {
            self.sent(cx);
            return;
        }
        let s = (tok >> 8 & 0xff) as u8;
        match self.streams.get(s as usize) {
            Some(t) if t.gen == tok >> 16 => self.formed(s, cx),
            _ => {}
        }
    }

    fn dma_done(&mut self, id: DmaId, ok: bool, _data: &[u8], cx: &mut Cx<'_>) {
        let Some(i) = self.grants.iter().position(|g| g.0 == id) else {
            return;
        };
        let (_, s) = self.grants.swap_remove(i);
        if !ok {
            self.fail(s, StreamError::DmaFailed, cx);
        }
    }

    fn reset(&mut self, _cx: &mut Cx<'_>) {
        for t in &mut self.streams {
            *t = RxStream {
                gen: t.gen + 1,
                ..RxStream::default()
            };
        }
        self.txq.clear();
        self.mac_busy = false;
        self.grants.clear();
    }

    fn timing(&self) -> DeviceTiming {
        self.cfg.timing
    }

    fn report(&self) -> Option<serde_json::Value> {
        let streams: Vec<serde_json::Value> = self
            .streams
            .iter()
            .map(|t| {
                serde_json::json!({
                    "state": t.state, "error": t.error, "taken": t.taken, "frames": t.frames,
                    "sent": t.sent, "dropped": t.dropped, "queued": t.queue.len(),
                    "granted": t.granted,
                })
            })
            .collect();
        Some(serde_json::json!({
            "errors": self.errors, "frames": self.frames_out,
            "frame_bytes": self.frame_bytes_out, "streams": streams,
        }))
    }

    fn progress(&self) -> Option<u64> {
        Some(self.frames_out)
    }
}
