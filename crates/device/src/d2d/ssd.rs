//! The D2D sender: a storage device with the D2D Tx FSM (seed 004, §III-B, Fig. 4).

use super::{
    media_fill, read_bytes, reg, write_regs, StreamError, TxState, CTL_PAUSE, CTL_START, ID, WINDOW,
};
use crate::model::{Cx, DeviceModel, DmaId, ReadReply};
use crate::DeviceTiming;
use pcielab_sim::{SimDuration, SimTime};

/// How a sender is built.
#[derive(Debug, Clone, PartialEq)]
pub struct D2dSsdConfig {
    /// Streams (1..=16).
    pub streams: u8,
    /// Media latency per chunk read.
    pub media_latency: SimDuration,
    /// Media bandwidth, Mb/s (0: no limit).
    pub media_mbps: u64,
    /// Chunk writes in flight at once per stream (the media reads the next chunk
    /// while the last one's writes go out).
    pub inflight: u32,
    /// The media's content seed: stream `s` carries [`super::media_byte`]`(seed ^ s, i)`.
    pub seed: u64,
    /// The PCIe datapath.
    pub timing: DeviceTiming,
}

impl Default for D2dSsdConfig {
    /// The paper's emulated SSD (§IV-B, §IV-C): data arrives over a 64-bit AXI stream
    /// at 160 MHz (10,240 Mb/s), no further media latency; a 125 MHz, 64-bit PCIe
    /// datapath with [`super::PAPER_TLP_CYCLES`] cycles per TLP.
    fn default() -> D2dSsdConfig {
        D2dSsdConfig {
            streams: 4,
            media_latency: SimDuration::ZERO,
            media_mbps: 64 * 160,
            inflight: 2,
            seed: 0,
            timing: super::pcie_timing(125, 64, super::PAPER_TLP_CYCLES),
        }
    }
}

#[derive(Debug, Default, Clone)]
struct TxStream {
    regs: [u64; 6],
    state: u32,
    error: u32,
    /// Bumped by every reset: timers and DMAs of an older stream are ignored.
    gen: u64,
    /// Bytes read from the media (and written or being written).
    read: u64,
    /// Bytes whose writes went out.
    written: u64,
    chunks: u64,
    stalls: u64,
    failed: u64,
    credits_used: u64,
    writes: u32,
    media_busy: bool,
    waiting: bool,
    paused: bool,
    next_slot: SimTime,
    /// When the stream was started (TX_ADDR bit 0 taken).
    started: SimTime,
}

/// The D2D sender (`kind = "d2d-ssd"`).
///
/// ```
/// use pcielab_device::d2d::{D2dSsd, D2dSsdConfig};
/// let ssd = D2dSsd::new(D2dSsdConfig::default());
/// assert_eq!(ssd.config().streams, 4);
/// ```
#[derive(Debug)]
pub struct D2dSsd {
    cfg: D2dSsdConfig,
    streams: Vec<TxStream>,
    /// Writes in flight: (DMA, stream, generation, bytes).
    dmas: Vec<(DmaId, u8, u64, u64)>,
    errors: u64,
}

const T_MEDIA: u64 = 0;
const T_SLOT: u64 = 1;

fn token(s: u8, gen: u64, kind: u64) -> u64 {
    gen << 16 | (s as u64) << 8 | kind
}

impl D2dSsd {
    /// A sender with `cfg` (streams clamped to 1..=16, in-flight chunks to at least 1).
    pub fn new(mut cfg: D2dSsdConfig) -> D2dSsd {
        cfg.streams = cfg.streams.clamp(1, super::MAX_STREAMS);
        cfg.inflight = cfg.inflight.max(1);
        D2dSsd {
            streams: vec![TxStream::default(); cfg.streams as usize],
            cfg,
            dmas: Vec::new(),
            errors: 0,
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &D2dSsdConfig {
        &self.cfg
    }

    fn reg(&self, off: u64) -> u64 {
        let n = self.cfg.streams as u64;
        match off {
            0 => ID as u64 | (self.cfg.streams as u64) << 32,
            8 => self.errors,
            o if (reg::STREAM_BASE..reg::STREAM_BASE + n * reg::STREAM_STRIDE).contains(&o) => {
                let r = o - reg::STREAM_BASE;
                let t = &self.streams[(r / reg::STREAM_STRIDE) as usize];
                t.regs[((r % reg::STREAM_STRIDE) / 8) as usize]
            }
            o if (reg::STATUS_BASE..reg::STATUS_BASE + n * reg::STATUS_STRIDE).contains(&o) => {
                let r = o - reg::STATUS_BASE;
                let t = &self.streams[(r / reg::STATUS_STRIDE) as usize];
                match r % reg::STATUS_STRIDE {
                    reg::STATE => t.state as u64 | (t.error as u64) << 32,
                    reg::BYTES => t.written,
                    reg::UNITS => t.chunks,
                    reg::STALLS => t.stalls,
                    reg::DROPPED => t.failed,
                    reg::CREDITS_OUT => t.credits_used,
                    _ => 0,
                }
            }
            _ => 0,
        }
    }

    fn set_reg(&mut self, off: u64, v: u64, mask: u64, cx: &mut Cx<'_>) {
        let n = self.cfg.streams as u64;
        if !(reg::STREAM_BASE..reg::STREAM_BASE + n * reg::STREAM_STRIDE).contains(&off) {
            return; // read-only or unused: ignored
        }
        let r = off - reg::STREAM_BASE;
        let s = (r / reg::STREAM_STRIDE) as u8;
        let which = r % reg::STREAM_STRIDE;
        let t = &mut self.streams[s as usize];
        match which {
            reg::TX_ADDR => {
                t.regs[0] = v & !7;
                if v & CTL_START != 0 {
                    self.start(s, cx);
                } else if v & CTL_PAUSE != 0 {
                    t.paused = true;
                    if t.state != TxState::Done as u32 && t.state != TxState::Error as u32 {
                        t.state = TxState::Paused as u32;
                    }
                } else if t.paused {
                    t.paused = false;
                    if t.state == TxState::Paused as u32 {
                        t.state = TxState::Send as u32;
                        self.pump(s, cx);
                    }
                }
            }
            reg::RX_ADDR => {}
            reg::CREDITS => {
                // Only the limit (bits 31:0) is the sender's; a grant may write 4 bytes.
                t.regs[3] = v & 0xffff_ffff;
                if mask & 0xffff_ffff != 0 && t.state == TxState::Stalled as u32 {
                    self.pump(s, cx);
                }
            }
            _ => t.regs[(which / 8) as usize] = v,
        }
    }

    fn fail(&mut self, s: u8, e: StreamError, cx: &mut Cx<'_>) {
        let t = &mut self.streams[s as usize];
        if t.error == 0 {
            t.error = e as u32;
        }
        t.state = TxState::Error as u32;
        self.errors += 1;
        cx.msix(s as u16);
    }

    fn start(&mut self, s: u8, cx: &mut Cx<'_>) {
        let t = &mut self.streams[s as usize];
        let regs = t.regs;
        *t = TxStream {
            regs,
            gen: t.gen + 1,
            state: TxState::Init as u32,
            next_slot: cx.now(),
            started: cx.now(),
            ..TxStream::default()
        };
        let chunk = regs[2] >> 32;
        if regs[0] == 0 || chunk == 0 || chunk > WINDOW || regs[4] == 0 {
            self.fail(s, StreamError::BadConfig, cx);
            return;
        }
        self.streams[s as usize].state = TxState::Parse as u32;
        self.pump(s, cx);
    }

    fn media_time(&self, len: u64) -> SimDuration {
        let bw = if self.cfg.media_mbps == 0 {
            0
        } else {
            (len * 8 * 1_000_000).div_ceil(self.cfg.media_mbps)
        };
        self.cfg.media_latency + SimDuration::from_ps(bw)
    }

    /// The Tx FSM: Check (done?), credits, the rate's time slot, Send the next chunk.
    fn pump(&mut self, s: u8, cx: &mut Cx<'_>) {
        let inflight = self.cfg.inflight;
        let t = &mut self.streams[s as usize];
        let live = [
            TxState::Parse,
            TxState::Send,
            TxState::Wait,
            TxState::Stalled,
        ];
        if !live.iter().any(|x| *x as u32 == t.state) || t.paused {
            return;
        }
        let count = t.regs[4];
        if t.read >= count {
            if t.writes == 0 && !t.media_busy {
                t.state = TxState::Done as u32;
                cx.msix(s as u16);
            }
            return;
        }
        if t.media_busy || t.writes >= inflight {
            return;
        }
        let limit = t.regs[3] & 0xffff_ffff;
        if t.credits_used >= limit {
            if t.state != TxState::Stalled as u32 {
                t.stalls += 1;
                t.state = TxState::Stalled as u32;
                cx.msix(s as u16);
            }
            return;
        }
        if cx.now() < t.next_slot {
            t.state = TxState::Wait as u32;
            if !t.waiting {
                t.waiting = true;
                let d = t.next_slot.saturating_since(cx.now());
                cx.timer(d, token(s, t.gen, T_SLOT));
            }
            return;
        }
        let chunk = t.regs[2] >> 32;
        let rate = t.regs[2] & 0xffff_ffff;
        let len = chunk.min(count - t.read);
        t.credits_used += 1;
        t.media_busy = true;
        t.state = TxState::Send as u32;
        if rate > 0 {
            let ps = (chunk as u128 * 1_000_000_000_000 / rate as u128).min(u64::MAX as u128);
            t.next_slot = cx.now() + SimDuration::from_ps(ps as u64);
        }
        let gen = t.gen;
        let d = self.media_time(len);
        cx.timer(d, token(s, gen, T_MEDIA));
    }

    /// The media read of the next chunk is done: write it to the receiver.
    fn send_chunk(&mut self, s: u8, cx: &mut Cx<'_>) {
        let seed = self.cfg.seed ^ s as u64;
        let t = &mut self.streams[s as usize];
        t.media_busy = false;
        let chunk = t.regs[2] >> 32;
        let len = chunk.min(t.regs[4] - t.read);
        let (base, gen) = (t.regs[0], t.gen);
        let mut at = t.read;
        let end = t.read + len;
        while at < end {
            // Split where the receiver's window wraps.
            let off = at % WINDOW;
            let n = (end - at).min(WINDOW - off);
            let mut data = cx.buffer(n as usize);
            data.resize(n as usize, 0);
            media_fill(seed, at, &mut data);
            // (Saturating: a window past 2^64 fails as a bad DMA, never wraps to 0.)
            let id = cx.dma_write(base.saturating_add(off), data);
            self.dmas.push((id, s, gen, n));
            self.streams[s as usize].writes += 1;
            at += n;
        }
        let t = &mut self.streams[s as usize];
        t.read = end;
        t.chunks += 1;
        self.pump(s, cx);
    }
}

impl DeviceModel for D2dSsd {
    fn mem_read(&mut self, bar: u8, off: u64, buf: &mut [u8], _cx: &mut Cx<'_>) -> ReadReply {
        if bar != 0 {
            return ReadReply::Unsupported;
        }
        read_bytes(off, buf, |o| self.reg(o));
        ReadReply::Now
    }

    fn mem_write(&mut self, bar: u8, off: u64, data: &[u8], cx: &mut Cx<'_>) {
        if bar != 0 {
            return;
        }
        let mut sets = Vec::new();
        write_regs(off, data, |o| self.reg(o), |o, v, m| sets.push((o, v, m)));
        for (o, v, m) in sets {
            self.set_reg(o, v, m, cx);
        }
    }

    fn timer(&mut self, tok: u64, cx: &mut Cx<'_>) {
        let s = (tok >> 8 & 0xff) as u8;
        let Some(t) = self.streams.get_mut(s as usize) else {
            return;
        };
        if t.gen != tok >> 16 {
            return;
        }
        match tok & 0xff {
            T_MEDIA => self.send_chunk(s, cx),
            _ => {
                t.waiting = false;
                self.pump(s, cx);
            }
        }
    }

    fn dma_done(&mut self, id: DmaId, ok: bool, _data: &[u8], cx: &mut Cx<'_>) {
        let Some(i) = self.dmas.iter().position(|d| d.0 == id) else {
            return;
        };
        let (_, s, gen, n) = self.dmas.swap_remove(i);
        let t = &mut self.streams[s as usize];
        if t.gen != gen {
            return;
        }
        t.writes = t.writes.saturating_sub(1);
        if ok {
            t.written += n;
            self.pump(s, cx);
        } else {
            t.failed += 1;
            self.fail(s, StreamError::DmaFailed, cx);
        }
    }

    fn reset(&mut self, _cx: &mut Cx<'_>) {
        for t in &mut self.streams {
            *t = TxStream {
                gen: t.gen + 1,
                ..TxStream::default()
            };
        }
        self.dmas.clear();
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
                    "state": t.state, "error": t.error, "bytes": t.written,
                    "chunks": t.chunks, "stalls": t.stalls, "failed": t.failed,
                    "credits_used": t.credits_used, "started_ps": t.started.as_ps(),
                })
            })
            .collect();
        Some(serde_json::json!({ "errors": self.errors, "streams": streams }))
    }

    fn progress(&self) -> Option<u64> {
        Some(self.streams.iter().map(|t| t.written).sum())
    }
}
