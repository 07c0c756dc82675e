//! The SR-IOV DMA engine of seed 003 (Zazo et al., a PCIe DMA engine for NetFPGA
//! SUME with SR-IOV and PCI passthrough) as a device model: one physical function and
//! up to 64 virtual functions, each with its own host-to-device (H2D) and
//! device-to-host (D2H) engines, descriptor rings in host memory, doorbells in the
//! function's BAR, completion write-back, and MSI-X vectors per engine and function.
//!
//! What the paper describes and how it is modelled:
//!
//! * **Every function has its own DMA logic** (§IV.C, Fig. 4): its registers in its
//!   own BAR 0, its own rings, its own MSI-X table (BAR 2), its own requester ID. The
//!   host's DMA engine sends every request with the requester ID of the function that
//!   asked, so the IOMMU translates it in that function's domain, and completions are
//!   routed back to that function by its BDF and matched by tag.
//! * **Tags identify the function** (§IV.B): with [`DmaEngineConfig::tags_per_function`]
//!   function `i` uses the tags `i × k .. (i + 1) × k` only.
//! * **The window for completions out of order** (§IV.A): a read request's
//!   completions come back in address order, but completions of different requests
//!   need not. The engine keeps a reorder window of [`DmaEngineConfig::window`] bytes
//!   per transfer: it sends no read request for data more than that past the in-order
//!   point (a full window stalls, counted by the simulator as `window_stalls`) and the
//!   data leaves the window in order.
//! * **Descriptors** hold a 64-bit address, a 64-bit size and an interrupt flag
//!   (§IV.C). The paper keeps them in the FPGA's memory behind a BAR; here, as in
//!   most DMA engines since, they are rings in host memory that the engine fetches by
//!   DMA, with a doorbell (tail) register, so the host never writes a descriptor by
//!   MMIO. Fetching costs one 32-byte read per batch of up to
//!   [`DmaEngineConfig::fetch_batch`] descriptors.
//! * **The FPGA application** behind the engines is the paper's test design (§IV.E):
//!   on D2H it produces a stream of 32-bit integers, on H2D it checks that the integers
//!   it receives follow each other with no gap. Here word `w` of function `f`'s stream
//!   is [`pattern_word`]`(f, w)`; the H2D side also keeps a 64-bit hash of every byte
//!   it took, so a test can compare it with what the host sent. This is the function's
//!   test mode (`CTRL` bit 2); outside it the application takes H2D data unchecked and
//!   produces zeros, which costs the simulation nothing per byte.
//!
//! # Registers (BAR 0 of each function, 4 KiB, little endian)
//!
//! ```text
//!   0x000  u32  ID         bits 0..15: the function's index (0: the PF), bit 16: a VF
//!   0x004  u32  CTRL       bit 0: enable (doorbells are taken only while set)
//!                          bit 1: reset this function's engines and test streams (write 1; reads 0)
//!                          bit 2: test mode: D2H carries the test stream, H2D is checked
//!                          (gaps counted, bytes hashed); without it D2H carries zeros
//!   0x008  u32  QUEUES     engine pairs (read only)
//!   0x00c  u32  STATUS     bit 0: a transfer is in progress, bit 1: an error was seen
//!   0x010  u64  H2D_BYTES  0x018 D2H_BYTES (read only)
//!   0x020  u64  ERRORS     malformed descriptors, bad doorbells, failed DMAs
//!   0x028  u64  H2D_HASH   hash of every byte taken host to device in test mode, in order,
//!                          since the last reset
//!   0x030  u64  H2D_GAPS   pattern words out of sequence (in test mode)
//!   engine e at 0x100 + 0x40 × e: e = 2q is H2D queue q, e = 2q + 1 is D2H queue q
//!   +0x00  u64  BASE       ring base address (host memory)
//!   +0x08  u32  SIZE       ring entries (1..=65536); writing BASE or SIZE sets the ring up anew
//!   +0x0c  u32  TAIL       doorbell: descriptors up to TAIL (exclusive) are ready
//!   +0x10  u32  HEAD       descriptors done (read only)
//! ```
//!
//! A descriptor is 32 bytes: `u64` address, `u64` size (1..=[`DmaEngineConfig::max_transfer`]),
//! `u32` flags (bit 0: raise the engine's interrupt when done), `u32` status (written
//! back by the engine: bit 0 done, bit 1 error), 8 reserved bytes. Engine `e` of a
//! function raises that function's MSI-X vector `e`.
//!
//! # Example
//!
//! ```
//! use pcielab_device::dma_engine::{DmaEngine, DmaEngineConfig};
//! // A PF and 4 VFs, one engine pair each, a 16 KiB reorder window.
//! let cfg = DmaEngineConfig { functions: 5, ..DmaEngineConfig::default() };
//! let dev = DmaEngine::new(cfg);
//! assert_eq!(dev.function_stats(4).unwrap().h2d_bytes, 0);
//! assert!(dev.function_stats(5).is_none());
//! ```

use crate::model::{Cx, DeviceModel, DmaId, DmaPolicy, ReadReply};
use crate::optable::OpTable;
use crate::DeviceTiming;
use std::collections::VecDeque;

/// Bytes of one descriptor.
pub const DESC: u64 = 32;
/// Size of each function's register BAR.
pub const BAR_SIZE: u64 = 4096;
/// Offset of engine 0's registers; each engine has [`ENGINE_STRIDE`] bytes.
pub const ENGINE_BASE: u64 = 0x100;
/// Bytes of registers per engine.
pub const ENGINE_STRIDE: u64 = 0x40;
/// Most engine pairs a function has.
pub const MAX_QUEUES: u16 = 8;
/// Most functions (the PF and 64 VFs... and room for more PFs' VFs).
pub const MAX_FUNCTIONS: u16 = 256;
/// Most descriptors a ring has.
pub const MAX_RING: u32 = 65536;
/// Descriptor flag: raise the engine's interrupt when the descriptor is done.
pub const FLAG_IRQ: u32 = 1;
/// Descriptor status: done.
pub const STATUS_DONE: u32 = 1;
/// Descriptor status: error (a malformed descriptor or a failed DMA).
pub const STATUS_ERR: u32 = 2;
/// Offset of the status word in a descriptor.
pub const DESC_STATUS: u64 = 0x14;

/// Register offsets.
pub mod reg {
    /// The function's index and VF bit (read only).
    pub const ID: u64 = 0x000;
    /// Control.
    pub const CTRL: u64 = 0x004;
    /// Engine pairs (read only).
    pub const QUEUES: u64 = 0x008;
    /// Status (read only).
    pub const STATUS: u64 = 0x00c;
    /// Bytes taken host to device (u64, read only).
    pub const H2D_BYTES: u64 = 0x010;
    /// Bytes written device to host (u64, read only).
    pub const D2H_BYTES: u64 = 0x018;
    /// Errors (u64, read only).
    pub const ERRORS: u64 = 0x020;
    /// Hash of the H2D stream (u64, read only).
    pub const H2D_HASH: u64 = 0x028;
    /// H2D pattern gaps (u64, read only).
    pub const H2D_GAPS: u64 = 0x030;
    /// In an engine: ring base.
    pub const BASE: u64 = 0x00;
    /// Ring entries.
    pub const SIZE: u64 = 0x08;
    /// Tail (doorbell).
    pub const TAIL: u64 = 0x0c;
    /// Head (read only).
    pub const HEAD: u64 = 0x10;
}

/// CTRL bit: enable.
pub const CTRL_ENABLE: u32 = 1;
/// CTRL bit: reset the function's engines.
pub const CTRL_RESET: u32 = 2;
/// CTRL bit: test mode (D2H carries the test stream; H2D is checked and hashed).
pub const CTRL_CHECK: u32 = 4;

/// Word `w` of function `function`'s test stream (the paper's integers, with the
/// function in the top byte so that streams of different functions differ).
///
/// ```
/// use pcielab_device::dma_engine::pattern_word;
/// assert_eq!(pattern_word(0, 5), 5);
/// assert_eq!(pattern_word(3, 5), 0x0300_0005);
/// ```
pub fn pattern_word(function: u16, w: u64) -> u32 {
    ((function as u32) << 24) ^ (w as u32 & 0x00ff_ffff)
}

/// Fills `buf` with function `function`'s test stream from byte `offset` (a multiple
/// of 4) on.
pub fn fill_pattern(function: u16, offset: u64, buf: &mut [u8]) {
    for (i, c) in buf.chunks_mut(4).enumerate() {
        let v = pattern_word(function, offset / 4 + i as u64).to_le_bytes();
        c.copy_from_slice(&v[..c.len()]);
    }
}

/// The hash the engine keeps of a byte stream ([`reg::H2D_HASH`]): 64-bit FNV-1a.
///
/// ```
/// use pcielab_device::dma_engine::{stream_hash, STREAM_HASH_START};
/// assert_eq!(stream_hash(STREAM_HASH_START, b""), STREAM_HASH_START);
/// assert_eq!(stream_hash(stream_hash(STREAM_HASH_START, b"ab"), b"c"),
///            stream_hash(STREAM_HASH_START, b"abc"));
/// ```
pub fn stream_hash(mut h: u64, data: &[u8]) -> u64 {
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The hash of an empty stream.
pub const STREAM_HASH_START: u64 = 0xcbf2_9ce4_8422_2325;

/// How a DMA engine is built.
#[derive(Debug, Clone, PartialEq)]
pub struct DmaEngineConfig {
    /// Functions the model serves: the PF and its VFs (1 + TotalVFs, at most
    /// [`MAX_FUNCTIONS`]).
    pub functions: u16,
    /// H2D/D2H engine pairs per function (1..=[`MAX_QUEUES`]; the paper's default is 1).
    pub queues: u16,
    /// The reorder window of each H2D transfer, bytes (the paper's window of N read
    /// requests of MRRS bytes is N × MRRS); `None`: no window (data is taken when a
    /// whole transfer chunk is in).
    pub window: Option<u32>,
    /// Largest transfer of one H2D read DMA, bytes: a descriptor larger than this is
    /// read in pieces of this size, one after the other (at most
    /// [`DmaEngineConfig::inflight`] at a time).
    pub chunk: u64,
    /// Transfer pieces an engine keeps in flight.
    pub inflight: u32,
    /// Descriptors per descriptor fetch.
    pub fetch_batch: u32,
    /// Largest size a descriptor may give, bytes.
    pub max_transfer: u64,
    /// Tags of the device's read requests, from 0 (`None`: the host's pool).
    pub tags: Option<u16>,
    /// Tags per function (function `i` uses `i × k ..`): `None`, one pool for all.
    pub tags_per_function: Option<u16>,
    /// Core clock and datapath.
    pub timing: DeviceTiming,
}

impl Default for DmaEngineConfig {
    /// One function, one engine pair, a 16 KiB window, 64 KiB pieces, 4 in flight,
    /// fetches of 8 descriptors, transfers up to 1 GiB, the host's tags, no device
    /// time.
    fn default() -> Self {
        DmaEngineConfig {
            functions: 1,
            queues: 1,
            window: Some(16 * 1024),
            chunk: 64 * 1024,
            inflight: 4,
            fetch_batch: 8,
            max_transfer: 1 << 30,
            tags: None,
            tags_per_function: None,
            timing: DeviceTiming::NONE,
        }
    }
}

impl DmaEngineConfig {
    /// Checks the settings; the error names the field and what is allowed.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=MAX_FUNCTIONS).contains(&self.functions) {
            return Err(format!(
                "functions = {}: allowed 1..={MAX_FUNCTIONS}",
                self.functions
            ));
        }
        if !(1..=MAX_QUEUES).contains(&self.queues) {
            return Err(format!(
                "queues = {}: allowed 1..={MAX_QUEUES}",
                self.queues
            ));
        }
        if self.window == Some(0) {
            return Err("window = 0: allowed 1 byte or more (or no window)".into());
        }
        if self.chunk == 0 || self.chunk > 1 << 30 {
            return Err(format!("chunk = {}: allowed 1..=1 GiB", self.chunk));
        }
        if !(1..=64).contains(&self.inflight) {
            return Err(format!("inflight = {}: allowed 1..=64", self.inflight));
        }
        if !(1..=64).contains(&self.fetch_batch) {
            return Err(format!(
                "fetch_batch = {}: allowed 1..=64",
                self.fetch_batch
            ));
        }
        if self.max_transfer == 0 {
            return Err("max_transfer = 0: allowed 1 byte or more".into());
        }
        if let Some(k) = self.tags_per_function {
            let need = k as u32 * self.functions as u32;
            if k == 0 || self.tags.is_some_and(|t| need > t as u32) {
                return Err(format!(
                    "tags_per_function = {k}: {} functions need {need} tags, {} available",
                    self.functions,
                    self.tags
                        .map_or("the host's".to_string(), |t| t.to_string())
                ));
            }
        }
        Ok(())
    }
}

/// One function's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FunctionStats {
    /// Bytes taken host to device, in order.
    pub h2d_bytes: u64,
    /// Bytes written device to host.
    pub d2h_bytes: u64,
    /// Descriptors done (both directions, errors included).
    pub descriptors: u64,
    /// Descriptors refused as malformed (size 0 or over the maximum, an address
    /// that wraps).
    pub bad_descriptors: u64,
    /// Doorbells refused (a tail at or past the ring's size, a ring not set up, the
    /// function disabled).
    pub bad_doorbells: u64,
    /// BAR accesses refused (a width or offset the registers do not have).
    pub bad_registers: u64,
    /// DMAs that failed (Unsupported Request, IOMMU fault, completion timeout, bus
    /// mastering off).
    pub dma_errors: u64,
    /// DMAs that finished after their engine was reset (their data dropped).
    pub stale_dmas: u64,
    /// Engine resets (CTRL bit 1 or a Function Level Reset).
    pub resets: u64,
    /// Interrupts raised.
    pub interrupts: u64,
    /// H2D pattern words out of sequence (with CTRL bit 2).
    pub h2d_gaps: u64,
    /// Hash of the H2D stream ([`stream_hash`]).
    pub h2d_hash: u64,
}

impl FunctionStats {
    fn errors(&self) -> u64 {
        self.bad_descriptors + self.bad_doorbells + self.dma_errors
    }
}

/// A descriptor as fetched.
#[derive(Debug, Clone, Copy)]
struct Desc {
    idx: u32,
    addr: u64,
    len: u64,
    flags: u32,
    /// Malformed: done at once with the error bit.
    bad: bool,
}

/// A descriptor being carried out.
#[derive(Debug)]
struct Active {
    desc: Desc,
    /// Bytes handed to DMAs so far.
    issued: u64,
    /// Pieces in flight.
    pending: u32,
    error: bool,
}

/// One engine (one direction of one queue of one function).
#[derive(Debug, Default)]
struct Engine {
    base: u64,
    size: u32,
    tail: u32,
    /// Descriptors done.
    head: u32,
    /// Next descriptor to fetch.
    fetch: u32,
    fetching: bool,
    /// Raised on every set-up and reset: DMAs of an older generation are stale.
    gen: u16,
    fetched: VecDeque<Desc>,
    active: VecDeque<Active>,
    /// H2D pieces finished out of order, waiting for the ones before them:
    /// (sequence number, length, data in test mode).
    early: Vec<(u64, u64, Vec<u8>)>,
    /// H2D: sequence number of the next piece to issue and of the next to take.
    next_seq: u64,
    take_seq: u64,
    /// Pieces in flight.
    inflight: u32,
}

impl Engine {
    fn ready(&self) -> bool {
        self.size > 0
    }
}

/// One function's state.
#[derive(Debug, Default)]
struct Function {
    ctrl: u32,
    engines: Vec<Engine>,
    stats: FunctionStats,
    /// Next H2D word expected (pattern check) and the partial word carried over.
    h2d_word: u64,
    carry: Vec<u8>,
    /// D2H stream offset of the next byte produced.
    d2h_offset: u64,
    error_seen: bool,
}

/// What a DMA in flight is for.
#[derive(Debug, Clone, Copy)]
enum Op {
    Fetch {
        f: u16,
        e: u16,
        gen: u16,
        first: u32,
        n: u32,
    },
    /// An H2D piece: its descriptor's place in `active` is found by index; `seq`
    /// orders the pieces of the engine.
    Read {
        f: u16,
        e: u16,
        gen: u16,
        idx: u32,
        seq: u64,
    },
    /// A D2H piece.
    Write {
        f: u16,
        e: u16,
        gen: u16,
        idx: u32,
        len: u64,
    },
    /// A status write-back.
    Status { f: u16 },
}

impl Op {
    fn function(&self) -> u16 {
        match *self {
            Op::Fetch { f, .. } | Op::Read { f, .. } | Op::Write { f, .. } | Op::Status { f } => f,
        }
    }
}

/// The SR-IOV DMA engine. See the [module documentation](self).
#[derive(Debug)]
pub struct DmaEngine {
    cfg: DmaEngineConfig,
    functions: Vec<Function>,
    ops: OpTable<Op>,
}

impl DmaEngine {
    /// An engine with the settings of `cfg`.
    ///
    /// # Panics
    /// When `cfg` does not pass [`DmaEngineConfig::check`] (kind builders check it
    /// first and name the offending key).
    pub fn new(cfg: DmaEngineConfig) -> DmaEngine {
        if let Err(e) = cfg.check() {
            panic!("DmaEngineConfig: {e}");
        }
        let functions = (0..cfg.functions)
            .map(|_| Function::fresh(cfg.queues))
            .collect();
        DmaEngine {
            cfg,
            functions,
            ops: OpTable::default(),
        }
    }

    /// The settings it was built with.
    pub fn config(&self) -> &DmaEngineConfig {
        &self.cfg
    }

    /// Function `f`'s counters (`None` past the last function).
    pub fn function_stats(&self, f: u16) -> Option<FunctionStats> {
        self.functions.get(f as usize).map(|x| x.stats)
    }

    /// DMAs in flight (all functions).
    pub fn dmas_in_flight(&self) -> usize {
        self.ops.len()
    }

    fn engine(&mut self, f: u16, e: u16) -> &mut Engine {
        &mut self.functions[f as usize].engines[e as usize]
    }

    // ---- descriptors ----------------------------------------------------------------

    fn fetch(&mut self, f: u16, e: u16, cx: &mut Cx<'_>) {
        let batch = self.cfg.fetch_batch;
        let room = (self.cfg.inflight as usize).max(batch as usize) * 2;
        let en = self.engine(f, e);
        if en.fetching || !en.ready() || en.fetch == en.tail || en.fetched.len() >= room {
            return;
        }
        // Up to a batch, not past the tail or the end of the ring.
        let avail = if en.tail > en.fetch {
            en.tail - en.fetch
        } else {
            en.size - en.fetch
        };
        let n = avail.min(batch);
        let first = en.fetch;
        en.fetching = true;
        // Saturating: a ring or buffer past the top of the address space makes a DMA that
        // runs past 2^64, which fails (counted) rather than wrapping to low memory.
        let addr = en.base.saturating_add(first as u64 * DESC);
        let gen = en.gen;
        cx.act_as(f);
        let id = cx.dma_read(addr, n as u64 * DESC);
        self.ops.insert(
            id,
            Op::Fetch {
                f,
                e,
                gen,
                first,
                n,
            },
        );
    }

    fn fetched(
        &mut self,
        (f, e): (u16, u16),
        (first, n): (u32, u32),
        ok: bool,
        data: &[u8],
        cx: &mut Cx<'_>,
    ) {
        let max = self.cfg.max_transfer;
        let func = &mut self.functions[f as usize];
        let en = &mut func.engines[e as usize];
        en.fetching = false;
        if !ok {
            // The ring cannot be read: the engine stops here until it is set up anew.
            func.stats.dma_errors += 1;
            func.error_seen = true;
            return;
        }
        for i in 0..n {
            let d = &data[(i as u64 * DESC) as usize..((i as u64 + 1) * DESC) as usize];
            let addr = u64::from_le_bytes(d[0..8].try_into().unwrap());
            let len = u64::from_le_bytes(d[8..16].try_into().unwrap());
            let flags = u32::from_le_bytes(d[16..20].try_into().unwrap());
            let bad = len == 0 || len > max || addr.checked_add(len).is_none();
            en.fetched.push_back(Desc {
                idx: (first + i) % en.size,
                addr,
                len,
                flags,
                bad,
            });
        }
        en.fetch = (first + n) % en.size;
        self.run(f, e, cx);
        self.fetch(f, e, cx);
    }

    /// Starts what the engine can: descriptors into pieces, pieces into DMAs.
    fn run(&mut self, f: u16, e: u16, cx: &mut Cx<'_>) {
        let (chunk, inflight) = (self.cfg.chunk, self.cfg.inflight);
        let h2d = e % 2 == 0;
        loop {
            let en = self.engine(f, e);
            // The descriptor to work on: the newest active one with bytes left, else
            // the next fetched one.
            let want_new = en.active.back().map_or(true, |a| a.issued >= a.desc.len);
            if want_new {
                let Some(desc) = en.fetched.pop_front() else {
                    break;
                };
                en.active.push_back(Active {
                    desc,
                    issued: 0,
                    pending: 0,
                    error: desc.bad,
                });
                if desc.bad {
                    let a = en.active.back_mut().unwrap();
                    a.issued = a.desc.len;
                    self.functions[f as usize].stats.bad_descriptors += 1;
                    self.functions[f as usize].error_seen = true;
                    continue;
                }
            }
            let en = self.engine(f, e);
            if en.inflight >= inflight {
                break;
            }
            let gen = en.gen;
            let a = en.active.back_mut().unwrap();
            let off = a.issued;
            let piece = chunk.min(a.desc.len - off);
            a.issued += piece;
            a.pending += 1;
            let (addr, idx) = (a.desc.addr.saturating_add(off), a.desc.idx);
            en.inflight += 1;
            cx.act_as(f);
            if h2d {
                let seq = en.next_seq;
                en.next_seq += 1;
                let id = cx.dma_read(addr, piece);
                self.ops.insert(
                    id,
                    Op::Read {
                        f,
                        e,
                        gen,
                        idx,
                        seq,
                    },
                );
            } else {
                let func = &mut self.functions[f as usize];
                let mut data = cx.buffer(piece as usize);
                data.resize(piece as usize, 0);
                // The test stream in test mode; zeros otherwise (nothing to check).
                if func.ctrl & CTRL_CHECK != 0 {
                    fill_pattern(f, func.d2h_offset, &mut data);
                }
                func.d2h_offset += piece;
                let id = cx.dma_write(addr, data);
                self.ops.insert(
                    id,
                    Op::Write {
                        f,
                        e,
                        gen,
                        idx,
                        len: piece,
                    },
                );
            }
        }
        self.retire(f, e, cx);
    }

    /// A piece of descriptor `idx` finished.
    fn piece_done(&mut self, f: u16, e: u16, idx: u32, ok: bool, cx: &mut Cx<'_>) {
        let func = &mut self.functions[f as usize];
        if !ok {
            func.stats.dma_errors += 1;
            func.error_seen = true;
        }
        let en = &mut func.engines[e as usize];
        en.inflight -= 1;
        if let Some(a) = en.active.iter_mut().find(|a| a.desc.idx == idx) {
            a.pending -= 1;
            a.error |= !ok;
        }
        self.run(f, e, cx);
        self.fetch(f, e, cx);
    }

    /// Descriptors done, in order: status written back, head moved, interrupt.
    fn retire(&mut self, f: u16, e: u16, cx: &mut Cx<'_>) {
        loop {
            let func = &mut self.functions[f as usize];
            let en = &mut func.engines[e as usize];
            let Some(a) = en.active.front() else {
                return;
            };
            if a.pending > 0 || a.issued < a.desc.len {
                return;
            }
            let a = en.active.pop_front().unwrap();
            en.head = (a.desc.idx + 1) % en.size;
            let status = STATUS_DONE | if a.error { STATUS_ERR } else { 0 };
            let at = en
                .base
                .saturating_add(a.desc.idx as u64 * DESC + DESC_STATUS);
            func.stats.descriptors += 1;
            cx.act_as(f);
            let mut data = cx.buffer(4);
            data.extend_from_slice(&status.to_le_bytes());
            let id = cx.dma_write(at, data);
            self.ops.insert(id, Op::Status { f });
            if a.desc.flags & FLAG_IRQ != 0 {
                self.functions[f as usize].stats.interrupts += 1;
                cx.msix(e);
            }
        }
    }

    /// H2D data of piece `seq`: taken in order.
    fn h2d_data(&mut self, f: u16, e: u16, seq: u64, data: &[u8]) {
        let func = &mut self.functions[f as usize];
        let en = &mut func.engines[e as usize];
        if seq != en.take_seq {
            // Early: kept until the pieces before it are in (its bytes only in test
            // mode, where they are checked).
            let keep = if func.ctrl & CTRL_CHECK != 0 {
                data.to_vec()
            } else {
                Vec::new()
            };
            en.early.push((seq, data.len() as u64, keep));
            return;
        }
        en.take_seq += 1;
        func.take(f, data.len() as u64, data);
        loop {
            let en = &mut self.functions[f as usize].engines[e as usize];
            let Some(i) = en.early.iter().position(|x| x.0 == en.take_seq) else {
                return;
            };
            let (_, len, d) = en.early.swap_remove(i);
            en.take_seq += 1;
            self.functions[f as usize].take(f, len, &d);
        }
    }

    fn reset_function(&mut self, f: u16) {
        let func = &mut self.functions[f as usize];
        for en in &mut func.engines {
            let gen = en.gen.wrapping_add(1);
            *en = Engine {
                gen,
                ..Engine::default()
            };
        }
        func.ctrl &= !CTRL_ENABLE;
        func.stats.resets += 1;
        // The test streams start over; the counters go on.
        func.carry.clear();
        func.h2d_word = 0;
        func.d2h_offset = 0;
        func.stats.h2d_hash = STREAM_HASH_START;
    }

    // ---- registers ------------------------------------------------------------------

    fn read_reg(&self, f: u16, off: u64) -> Option<u64> {
        let func = &self.functions[f as usize];
        let s = &func.stats;
        Some(match off {
            reg::ID => f as u64 | if f > 0 { 1 << 16 } else { 0 },
            reg::CTRL => func.ctrl as u64,
            reg::QUEUES => self.cfg.queues as u64,
            reg::STATUS => {
                let busy = func
                    .engines
                    .iter()
                    .any(|e| !e.active.is_empty() || e.fetching || e.fetch != e.tail);
                busy as u64 | (func.error_seen as u64) << 1
            }
            reg::H2D_BYTES => s.h2d_bytes,
            reg::D2H_BYTES => s.d2h_bytes,
            reg::ERRORS => s.errors(),
            reg::H2D_HASH => s.h2d_hash,
            reg::H2D_GAPS => s.h2d_gaps,
            o if o >= ENGINE_BASE => {
                let e = ((o - ENGINE_BASE) / ENGINE_STRIDE) as usize;
                let en = func.engines.get(e)?;
                match (o - ENGINE_BASE) % ENGINE_STRIDE {
                    reg::BASE => en.base,
                    reg::SIZE => en.size as u64,
                    reg::TAIL => en.tail as u64,
                    reg::HEAD => en.head as u64,
                    _ => return None,
                }
            }
            _ => return None,
        })
    }

    fn write_reg(&mut self, f: u16, off: u64, v: u64, len: usize, cx: &mut Cx<'_>) {
        let func = &mut self.functions[f as usize];
        match off {
            reg::CTRL if len == 4 => {
                if v as u32 & CTRL_RESET != 0 {
                    self.reset_function(f);
                }
                let func = &mut self.functions[f as usize];
                func.ctrl = v as u32 & (CTRL_ENABLE | CTRL_CHECK);
                if func.ctrl & CTRL_ENABLE != 0 {
                    for e in 0..func.engines.len() as u16 {
                        self.fetch(f, e, cx);
                    }
                }
            }
            o if o >= ENGINE_BASE
                && ((o - ENGINE_BASE) / ENGINE_STRIDE) < func.engines.len() as u64 =>
            {
                let e = ((o - ENGINE_BASE) / ENGINE_STRIDE) as u16;
                let en = &mut func.engines[e as usize];
                match ((o - ENGINE_BASE) % ENGINE_STRIDE, len) {
                    (reg::BASE, 8) => {
                        let gen = en.gen.wrapping_add(1);
                        let size = en.size;
                        *en = Engine {
                            gen,
                            size,
                            base: v,
                            ..Engine::default()
                        };
                    }
                    (reg::SIZE, 4) => {
                        let v = v as u32;
                        if v == 0 || v > MAX_RING {
                            func.stats.bad_registers += 1;
                            return;
                        }
                        let gen = en.gen.wrapping_add(1);
                        let base = en.base;
                        *en = Engine {
                            gen,
                            base,
                            size: v,
                            ..Engine::default()
                        };
                    }
                    (reg::TAIL, 4) => {
                        let t = v as u32;
                        if !en.ready() || t >= en.size || func.ctrl & CTRL_ENABLE == 0 {
                            func.stats.bad_doorbells += 1;
                            func.error_seen = true;
                            return;
                        }
                        en.tail = t;
                        self.fetch(f, e, cx);
                    }
                    _ => func.stats.bad_registers += 1,
                }
            }
            _ => func.stats.bad_registers += 1,
        }
    }
}

impl Function {
    fn fresh(queues: u16) -> Function {
        Function {
            engines: (0..queues * 2).map(|_| Engine::default()).collect(),
            stats: FunctionStats {
                h2d_hash: STREAM_HASH_START,
                ..FunctionStats::default()
            },
            ..Function::default()
        }
    }

    /// `len` bytes reached the FPGA application from the host, in order; `data` holds
    /// them in test mode (outside it, only the count matters).
    fn take(&mut self, f: u16, len: u64, data: &[u8]) {
        self.stats.h2d_bytes += len;
        if self.ctrl & CTRL_CHECK == 0 {
            return;
        }
        self.stats.h2d_hash = stream_hash(self.stats.h2d_hash, data);
        let mut rest = data;
        if !self.carry.is_empty() {
            let k = (4 - self.carry.len()).min(rest.len());
            self.carry.extend_from_slice(&rest[..k]);
            rest = &rest[k..];
            if self.carry.len() < 4 {
                return;
            }
            let w = u32::from_le_bytes(self.carry[..4].try_into().unwrap());
            self.carry.clear();
            self.check_word(f, w);
        }
        let mut words = rest.chunks_exact(4);
        for c in &mut words {
            self.check_word(f, u32::from_le_bytes(c.try_into().unwrap()));
        }
        self.carry.extend_from_slice(words.remainder());
    }

    fn check_word(&mut self, f: u16, w: u32) {
        if w != pattern_word(f, self.h2d_word) {
            self.stats.h2d_gaps += 1;
        }
        self.h2d_word += 1;
    }
}

impl DeviceModel for DmaEngine {
    fn mem_read(&mut self, bar: u8, offset: u64, buf: &mut [u8], cx: &mut Cx<'_>) -> ReadReply {
        buf.fill(0);
        let f = cx.function();
        if f as usize >= self.functions.len() {
            return ReadReply::Unsupported;
        }
        if bar != 0 {
            self.functions[f as usize].stats.bad_registers += 1;
            return ReadReply::Now;
        }
        // A u64 register is read whole or by halves, a u32 register whole.
        let v = match (buf.len(), offset % 8) {
            (8, 0) | (4, 0) => self.read_reg(f, offset),
            (4, 4) => self
                .read_reg(f, offset)
                .or_else(|| self.read_reg(f, offset - 4).map(|v| v >> 32)),
            _ => None,
        };
        match v {
            Some(v) => {
                let n = buf.len();
                buf.copy_from_slice(&v.to_le_bytes()[..n]);
            }
            None => self.functions[f as usize].stats.bad_registers += 1,
        }
        ReadReply::Now
    }

    fn mem_write(&mut self, bar: u8, offset: u64, data: &[u8], cx: &mut Cx<'_>) {
        let f = cx.function();
        let Some(func) = self.functions.get_mut(f as usize) else {
            return;
        };
        if bar != 0 || !matches!(data.len(), 4 | 8) || offset % data.len() as u64 != 0 {
            func.stats.bad_registers += 1;
            return;
        }
        let mut b = [0u8; 8];
        b[..data.len()].copy_from_slice(data);
        self.write_reg(f, offset, u64::from_le_bytes(b), data.len(), cx);
    }

    fn dma_done(&mut self, id: DmaId, ok: bool, data: &[u8], cx: &mut Cx<'_>) {
        let Some(op) = self.ops.remove(&id) else {
            return;
        };
        match op {
            Op::Fetch { f, e, gen, .. }
            | Op::Read { f, e, gen, .. }
            | Op::Write { f, e, gen, .. }
                if gen != self.engine(f, e).gen =>
            {
                self.functions[f as usize].stats.stale_dmas += 1
            }
            Op::Fetch { f, e, first, n, .. } => self.fetched((f, e), (first, n), ok, data, cx),
            Op::Read { f, e, idx, seq, .. } => {
                if ok {
                    self.h2d_data(f, e, seq, data);
                } else {
                    // The data is lost: the stream moves on without it (the descriptor
                    // reports the error), so later pieces are not held back.
                    self.h2d_data(f, e, seq, &[]);
                }
                self.piece_done(f, e, idx, ok, cx);
            }
            Op::Write { f, e, idx, len, .. } => {
                if ok {
                    // A posted write left the device: its bytes are on their way.
                    self.functions[f as usize].stats.d2h_bytes += len;
                }
                self.piece_done(f, e, idx, ok, cx);
            }
            Op::Status { f } => {
                if !ok {
                    self.functions[f as usize].stats.dma_errors += 1;
                }
            }
        }
    }

    fn timing(&self) -> DeviceTiming {
        self.cfg.timing
    }

    fn dma_policy(&self) -> DmaPolicy {
        DmaPolicy {
            tags: self.cfg.tags.map(|n| (0, n)),
            per_completion: false,
            reorder: self.cfg.window,
            tags_per_function: self.cfg.tags_per_function,
        }
    }

    fn reset(&mut self, _cx: &mut Cx<'_>) {
        let stats: Vec<FunctionStats> = self.functions.iter().map(|f| f.stats).collect();
        *self = DmaEngine::new(self.cfg.clone());
        for (f, s) in self.functions.iter_mut().zip(stats) {
            f.stats = FunctionStats {
                resets: s.resets + 1,
                ..s
            };
        }
    }

    fn function_reset(&mut self, cx: &mut Cx<'_>) {
        // A Function Level Reset of one function (its DMAs are gone without
        // `dma_done`): its engines start over, disabled; the others run on.
        let f = cx.function();
        if (f as usize) < self.functions.len() {
            self.reset_function(f);
            self.ops.forget(|op| op.function() == f);
        }
    }

    fn report(&self) -> Option<serde_json::Value> {
        let per: Vec<serde_json::Value> = self
            .functions
            .iter()
            .enumerate()
            .filter(|(_, f)| f.stats != Function::fresh(1).stats)
            .map(|(i, f)| {
                let s = &f.stats;
                serde_json::json!({
                    "function": i,
                    "h2d_bytes": s.h2d_bytes,
                    "d2h_bytes": s.d2h_bytes,
                    "descriptors": s.descriptors,
                    "bad_descriptors": s.bad_descriptors,
                    "bad_doorbells": s.bad_doorbells,
                    "bad_registers": s.bad_registers,
                    "dma_errors": s.dma_errors,
                    "stale_dmas": s.stale_dmas,
                    "resets": s.resets,
                    "interrupts": s.interrupts,
                    "h2d_gaps": s.h2d_gaps,
                })
            })
            .collect();
        Some(serde_json::json!({ "functions": per }))
    }

    fn progress(&self) -> Option<u64> {
        Some(self.functions.iter().map(|f| f.stats.descriptors).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Command, DeviceState};
    use pcielab_sim::{Rng, SimTime};
    use pcielab_wire::Bdf;
    use proptest::prelude::*;

    const MEM: u64 = 0x1000_0000;
    /// A DMA not yet answered: id, function, address, read length or write data.
    type Pending = (DmaId, u16, u64, Result<u64, Vec<u8>>);
    const MEM_SIZE: usize = 1 << 20;

    /// A host with 1 MiB of memory at [`MEM`]: it carries out the engine's DMAs (in
    /// an order the test chooses), and records interrupts and which function asked.
    struct Host {
        dev: DmaEngine,
        state: DeviceState,
        spare: Vec<Vec<u8>>,
        mem: Vec<u8>,
        /// DMAs not yet answered: (id, function, read: (addr, len) | write: (addr, data)).
        pending: Vec<Pending>,
        irqs: Vec<(u16, u16)>,
    }

    impl Host {
        fn new(cfg: DmaEngineConfig) -> Host {
            Host {
                dev: DmaEngine::new(cfg),
                state: DeviceState {
                    next_dma: 0,
                    rng: Rng::new(1),
                },
                spare: Vec::new(),
                mem: vec![0; MEM_SIZE],
                pending: Vec::new(),
                irqs: Vec::new(),
            }
        }

        fn call(&mut self, f: u16, op: impl FnOnce(&mut DmaEngine, &mut Cx<'_>)) {
            let mut cmds = Vec::new();
            let mut cx = Cx::new(
                SimTime::ZERO,
                (f, Bdf::new(1, 0, 0).unwrap()),
                &mut cmds,
                &mut self.state,
                None,
                &mut self.spare,
            );
            op(&mut self.dev, &mut cx);
            let mut acting = f;
            for c in cmds {
                match c {
                    Command::As(g) => acting = g,
                    Command::DmaRead { id, addr, len, .. } => {
                        self.pending.push((id, acting, addr, Ok(len)))
                    }
                    Command::DmaWrite { id, addr, data, .. } => {
                        self.pending.push((id, acting, addr, Err(data)))
                    }
                    Command::Msix(v) => self.irqs.push((acting, v)),
                    other => panic!("unexpected command {other:?}"),
                }
            }
        }

        fn write(&mut self, f: u16, off: u64, v: u64, wide: bool) {
            let data = if wide {
                v.to_le_bytes().to_vec()
            } else {
                (v as u32).to_le_bytes().to_vec()
            };
            self.call(f, |d, cx| d.mem_write(0, off, &data, cx));
        }

        fn read(&mut self, f: u16, off: u64) -> u64 {
            // u64 registers and the u32 ones at 8-byte offsets whole; the others as u32.
            let mut buf = [0u8; 8];
            let n = if off % 8 == 0 { 8 } else { 4 };
            self.call(f, |d, cx| {
                d.mem_read(0, off, &mut buf[..n], cx);
            });
            u64::from_le_bytes(buf)
        }

        fn range(addr: u64, len: u64) -> Option<std::ops::Range<usize>> {
            let s = addr.checked_sub(MEM)?;
            let e = s.checked_add(len)?;
            (e <= MEM_SIZE as u64).then_some(s as usize..e as usize)
        }

        /// Carries out pending DMA `i`.
        fn answer(&mut self, i: usize) {
            let (id, f, addr, what) = self.pending.remove(i);
            match what {
                Ok(len) => {
                    let (ok, data) = match Host::range(addr, len) {
                        Some(r) => (true, self.mem[r].to_vec()),
                        None => (false, vec![0; len as usize]),
                    };
                    self.call(f, |d, cx| d.dma_done(id, ok, &data, cx));
                }
                Err(data) => {
                    let ok = match Host::range(addr, data.len() as u64) {
                        Some(r) => {
                            self.mem[r].copy_from_slice(&data);
                            true
                        }
                        None => false,
                    };
                    self.call(f, |d, cx| d.dma_done(id, ok, &[], cx));
                }
            }
        }

        /// Answers DMAs, newest first when `reverse` (out of order), until none is left.
        fn drain(&mut self, reverse: bool) {
            while !self.pending.is_empty() {
                let i = if reverse { self.pending.len() - 1 } else { 0 };
                self.answer(i);
            }
        }

        fn desc(&mut self, ring: u64, idx: u64, addr: u64, len: u64, flags: u32) {
            let at = (ring - MEM + idx * DESC) as usize;
            self.mem[at..at + 8].copy_from_slice(&addr.to_le_bytes());
            self.mem[at + 8..at + 16].copy_from_slice(&len.to_le_bytes());
            self.mem[at + 16..at + 20].copy_from_slice(&flags.to_le_bytes());
            self.mem[at + 20..at + 24].fill(0);
        }

        fn status(&self, ring: u64, idx: u64) -> u32 {
            let at = (ring - MEM + idx * DESC + DESC_STATUS) as usize;
            u32::from_le_bytes(self.mem[at..at + 4].try_into().unwrap())
        }

        /// Sets up engine `e` of function `f` with a ring of `size` at `ring`.
        fn ring(&mut self, f: u16, e: u64, ring: u64, size: u64) {
            let r = ENGINE_BASE + e * ENGINE_STRIDE;
            self.write(f, r + reg::BASE, ring, true);
            self.write(f, r + reg::SIZE, size, false);
        }
    }

    fn cfg(functions: u16) -> DmaEngineConfig {
        DmaEngineConfig {
            functions,
            chunk: 4096,
            ..DmaEngineConfig::default()
        }
    }

    #[test]
    fn each_function_moves_its_own_stream_both_ways() {
        let mut h = Host::new(cfg(3));
        // Function f: H2D ring at +0x1000·f, D2H ring at +0x8000 + 0x1000·f, data
        // buffers from +0x4_0000 (H2D) and +0x8_0000 (D2H), 64 KiB per function.
        for f in 0..3u16 {
            let fo = f as u64;
            let (h2d_ring, d2h_ring) = (MEM + 0x1000 * fo, MEM + 0x8000 + 0x1000 * fo);
            let (src, dst) = (
                MEM + 0x4_0000 + 0x1_0000 * fo,
                MEM + 0x8_0000 + 0x1_0000 * fo,
            );
            h.ring(f, 0, h2d_ring, 4);
            h.ring(f, 1, d2h_ring, 4);
            // The host's buffer holds the function's pattern.
            let r = Host::range(src, 0x1_0000).unwrap();
            fill_pattern(f, 0, &mut h.mem[r]);
            // Three descriptors each way (ragged sizes), the last with an interrupt.
            let sizes = [10_000u64, 4, 0x1_0000 - 10_004];
            let mut off = 0;
            for (i, &n) in sizes.iter().enumerate() {
                let flags = if i == 2 { FLAG_IRQ } else { 0 };
                h.desc(h2d_ring, i as u64, src + off, n, flags);
                h.desc(d2h_ring, i as u64, dst + off, n, flags);
                off += n;
            }
            h.write(f, reg::CTRL, (CTRL_ENABLE | CTRL_CHECK) as u64, false);
            h.write(f, ENGINE_BASE + reg::TAIL, 3, false);
            h.write(f, ENGINE_BASE + ENGINE_STRIDE + reg::TAIL, 3, false);
        }
        // Requests of every function were asked for as that function.
        assert!((0..3).all(|f| h.pending.iter().any(|p| p.1 == f)));
        h.drain(true);
        for f in 0..3u16 {
            let fo = f as u64;
            let s = h.dev.function_stats(f).unwrap();
            assert_eq!(
                (s.h2d_bytes, s.d2h_bytes),
                (0x1_0000, 0x1_0000),
                "function {f}"
            );
            assert_eq!((s.h2d_gaps, s.errors(), s.descriptors), (0, 0, 6));
            let src = Host::range(MEM + 0x4_0000 + 0x1_0000 * fo, 0x1_0000).unwrap();
            assert_eq!(
                s.h2d_hash,
                stream_hash(STREAM_HASH_START, &h.mem[src.clone()])
            );
            let dst = Host::range(MEM + 0x8_0000 + 0x1_0000 * fo, 0x1_0000).unwrap();
            assert_eq!(h.mem[dst], h.mem[src], "D2H wrote function {f}'s pattern");
            for i in 0..3 {
                assert_eq!(h.status(MEM + 0x1000 * fo, i), STATUS_DONE);
                assert_eq!(h.status(MEM + 0x8000 + 0x1000 * fo, i), STATUS_DONE);
            }
            assert_eq!(h.read(f, ENGINE_BASE + reg::HEAD), 3);
            assert_eq!(
                h.read(f, reg::ID) & 0xffff_ffff,
                fo | if f > 0 { 1 << 16 } else { 0 }
            );
        }
        let mut irqs = h.irqs.clone();
        irqs.sort();
        assert_eq!(irqs, [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]);
    }

    #[test]
    fn rings_wrap_and_bad_input_is_counted_not_followed() {
        let mut h = Host::new(cfg(1));
        let ring = MEM;
        h.ring(0, 1, ring, 3);
        h.write(0, reg::CTRL, (CTRL_ENABLE | CTRL_CHECK) as u64, false);
        // Five rounds of two descriptors on a 3-entry ring: indexes wrap.
        let mut tail = 0u64;
        for round in 0..5u64 {
            for k in 0..2 {
                let idx = (tail + k) % 3;
                h.desc(ring, idx, MEM + 0x1_0000 + (round * 2 + k) * 512, 512, 0);
            }
            tail = (tail + 2) % 3;
            h.write(0, ENGINE_BASE + ENGINE_STRIDE + reg::TAIL, tail, false);
            h.drain(false);
        }
        let s = h.dev.function_stats(0).unwrap();
        assert_eq!((s.d2h_bytes, s.descriptors, s.errors()), (5120, 10, 0));
        let mut want = vec![0u8; 5120];
        fill_pattern(0, 0, &mut want);
        assert_eq!(h.mem[0x1_0000..0x1_0000 + 5120], want[..]);
        // A tail past the ring, a size of 0, an unknown register: counted, ignored.
        h.write(0, ENGINE_BASE + ENGINE_STRIDE + reg::TAIL, 3, false);
        h.write(0, ENGINE_BASE + ENGINE_STRIDE + reg::SIZE, 0, false);
        h.write(0, 0x0ff0, 1, false);
        h.write(0, reg::CTRL + 1, 1, false);
        assert!(h.pending.is_empty());
        // Malformed descriptors (size 0, size over the maximum, wrapping address) and
        // one the host cannot serve: each done with the error bit, the next runs.
        h.desc(ring, tail, MEM, 0, 0);
        h.desc(ring, (tail + 1) % 3, u64::MAX - 4, 64, 0);
        h.write(
            0,
            ENGINE_BASE + ENGINE_STRIDE + reg::TAIL,
            (tail + 2) % 3,
            false,
        );
        h.drain(false);
        tail = (tail + 2) % 3;
        h.desc(ring, tail, 0x10, 64, FLAG_IRQ);
        h.desc(ring, (tail + 1) % 3, MEM + 0x2_0000, 8, 0);
        h.write(
            0,
            ENGINE_BASE + ENGINE_STRIDE + reg::TAIL,
            (tail + 2) % 3,
            false,
        );
        h.drain(false);
        let s = h.dev.function_stats(0).unwrap();
        assert_eq!(s.bad_doorbells, 1);
        assert_eq!(s.bad_registers, 3);
        assert_eq!(s.bad_descriptors, 2);
        assert_eq!(s.dma_errors, 1);
        assert_eq!(s.d2h_bytes, 5120 + 8);
        assert_eq!(h.status(ring, tail), STATUS_DONE | STATUS_ERR);
        assert_eq!(h.status(ring, (tail + 1) % 3), STATUS_DONE);
        assert_eq!(
            h.irqs,
            [(0, 1)],
            "the failed descriptor still raised its interrupt"
        );
        assert_eq!(h.read(0, reg::STATUS) & 2, 2, "the error bit is set");
    }

    #[test]
    fn reset_drops_one_function_and_spares_the_others() {
        let mut h = Host::new(cfg(3));
        for f in [1u16, 2] {
            let ring = MEM + 0x1000 * f as u64;
            h.ring(f, 1, ring, 4);
            h.desc(ring, 0, MEM + 0x1_0000 * (f as u64 + 1), 0x8000, FLAG_IRQ);
            h.write(f, reg::CTRL, CTRL_ENABLE as u64, false);
            h.write(f, ENGINE_BASE + ENGINE_STRIDE + reg::TAIL, 1, false);
        }
        // Fetch both descriptors; the pieces go out.
        h.answer(0);
        h.answer(0);
        assert!(h.pending.len() >= 4);
        // Function 2 resets with its pieces in flight.
        h.write(2, reg::CTRL, CTRL_RESET as u64, false);
        h.drain(false);
        let (s1, s2) = (
            h.dev.function_stats(1).unwrap(),
            h.dev.function_stats(2).unwrap(),
        );
        assert_eq!(
            (s1.d2h_bytes, s1.descriptors, s1.stale_dmas),
            (0x8000, 1, 0)
        );
        assert_eq!((s2.d2h_bytes, s2.descriptors, s2.resets), (0, 0, 1));
        assert!(s2.stale_dmas >= 1);
        assert_eq!(h.irqs, [(1, 1)]);
        assert_eq!(h.read(2, reg::CTRL), 0, "the reset function is disabled");
        assert_eq!(h.read(2, ENGINE_BASE + ENGINE_STRIDE + reg::SIZE), 0);
        assert_eq!(h.dev.dmas_in_flight(), 0);
    }

    #[test]
    fn a_wrong_word_is_a_gap() {
        let mut h = Host::new(cfg(1));
        h.ring(0, 0, MEM, 2);
        fill_pattern(0, 0, &mut h.mem[0x1_0000..0x1_0000 + 4096]);
        h.mem[0x1_0000 + 402] ^= 1;
        h.desc(MEM, 0, MEM + 0x1_0000, 4096, 0);
        h.write(0, reg::CTRL, (CTRL_ENABLE | CTRL_CHECK) as u64, false);
        h.write(0, ENGINE_BASE + reg::TAIL, 1, false);
        h.drain(true);
        assert_eq!(h.dev.function_stats(0).unwrap().h2d_gaps, 1);
        assert_eq!(h.read(0, reg::H2D_GAPS), 1);
    }

    #[test]
    fn check_names_the_setting() {
        let bad = [
            DmaEngineConfig {
                functions: 0,
                ..cfg(1)
            },
            DmaEngineConfig {
                queues: 9,
                ..cfg(1)
            },
            DmaEngineConfig {
                window: Some(0),
                ..cfg(1)
            },
            DmaEngineConfig {
                inflight: 0,
                ..cfg(1)
            },
            DmaEngineConfig {
                tags: Some(8),
                tags_per_function: Some(4),
                ..cfg(3)
            },
        ];
        for (c, word) in bad.iter().zip([
            "functions",
            "queues",
            "window",
            "inflight",
            "tags_per_function",
        ]) {
            let e = c.check().unwrap_err();
            assert!(e.starts_with(word), "{e}");
        }
        assert!(DmaEngineConfig {
            tags: Some(12),
            tags_per_function: Some(4),
            ..cfg(3)
        }
        .check()
        .is_ok());
    }

    #[derive(Debug, Clone)]
    enum Step {
        Write(u16, u64, u64, bool),
        Read(u16, u64),
        Answer(usize),
        Desc(u16, u64, u64, u64),
    }

    fn step() -> impl Strategy<Value = Step> {
        let reg = prop_oneof![
            Just(reg::CTRL),
            (0u64..4).prop_map(|e| ENGINE_BASE + e * ENGINE_STRIDE + reg::TAIL),
            (0u64..4).prop_map(|e| ENGINE_BASE + e * ENGINE_STRIDE + reg::BASE),
            (0u64..4).prop_map(|e| ENGINE_BASE + e * ENGINE_STRIDE + reg::SIZE),
            0u64..0x1000,
        ];
        prop_oneof![
            (
                0u16..4,
                reg,
                prop_oneof![0u64..8, Just(MEM), any::<u64>()],
                any::<bool>()
            )
                .prop_map(|(f, o, v, w)| Step::Write(f, o, v, w)),
            (0u16..4, 0u64..0x1000).prop_map(|(f, o)| Step::Read(f, o)),
            any::<usize>().prop_map(Step::Answer),
            (
                0u16..4,
                0u64..8,
                prop_oneof![Just(MEM + 0x8000), any::<u64>()],
                0u64..20_000
            )
                .prop_map(|(f, i, a, l)| Step::Desc(f, i, a, l)),
        ]
    }

    proptest! {
        /// Whatever the host programs and however its DMAs end, the engine never
        /// panics, every DMA and interrupt comes from a function whose own registers
        /// set it up, and heads stay inside their rings.
        #[test]
        fn any_program_is_survived(steps in prop::collection::vec(step(), 1..300)) {
            let mut h = Host::new(DmaEngineConfig { functions: 3, queues: 2, chunk: 1024, ..DmaEngineConfig::default() });
            let mut touched = [false; 4];
            for s in steps {
                match s {
                    Step::Write(f, o, v, w) => {
                        if (f as usize) < 3 { touched[f as usize] = true; }
                        h.write(f, o, v, w);
                    }
                    Step::Read(f, o) => { h.read(f, o); }
                    Step::Answer(i) => if !h.pending.is_empty() {
                        let n = h.pending.len();
                        h.answer(i % n);
                    },
                    Step::Desc(f, i, a, l) => h.desc(MEM + 0x1000 * f as u64, i, a, l, FLAG_IRQ),
                }
                for &(_, f, ..) in &h.pending {
                    prop_assert!(touched[f as usize], "function {f} DMAs unprogrammed");
                }
                for &(f, v) in &h.irqs {
                    prop_assert!(touched[f as usize] && v < 4, "vector {v} of function {f}");
                }
                for f in 0..3 {
                    for e in 0..4 {
                        let r = ENGINE_BASE + e * ENGINE_STRIDE;
                        let (head, size) = (h.read(f, r + reg::HEAD), h.read(f, r + reg::SIZE) & 0xffff_ffff);
                        prop_assert!(head == 0 || head < size);
                    }
                }
            }
            h.drain(false);
            prop_assert_eq!(h.dev.dmas_in_flight(), 0);
        }
    }
}
