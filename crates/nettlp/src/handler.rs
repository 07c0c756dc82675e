//! Serving TLPs addressed to the device (host accesses to BAR4 and friends), LibTLP's
//! `nettlp_run_cb` role, without its limits: one socket per host-side port
//! `0x4000 + n`, spread over several threads, batched receive and send, completions
//! built and split by the library.
//!
//! ```text
//!   adapter:0x4000+n ──MRd──► thread (n mod T) ─► Handler::read(addr, &mut buf)
//!                    ◄─CplD── split at RCB/MPS with Byte Count and Lower Address
//!                    ──MWr──► Handler::write(addr, data)   (each run of enabled bytes)
//!                    ──Cpl──► Handler::completion(&tlp)    ──other──► Handler::other
//! ```
//!
//! ```no_run
//! use pcielab_nettlp::handler::{serve, Handler, ServeConfig};
//! use pcielab_wire::CplStatus;
//! use std::sync::Arc;
//! struct Zeros;
//! impl Handler for Zeros {
//!     fn read(&self, _addr: u64, out: &mut [u8]) -> Result<(), CplStatus> {
//!         out.fill(0);
//!         Ok(())
//!     }
//! }
//! let server = serve(ServeConfig::default(), Arc::new(Zeros))?;
//! server.stop();
//! # Ok::<(), std::io::Error>(())
//! ```

use crate::capture::Capture;
use crate::frame::{self, NetTlpHeader, HEADER_LEN, HOST_PORTS};
use crate::sys::{self, RecvBatch, SendBatch};
use pcielab_wire::dma::{completions, request_shape, CplPolicy};
use pcielab_wire::tlp::{MemOp, TlpHeader, TlpRepr};
use pcielab_wire::{Bdf, ByteEnables, CplStatus};
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// What a device does with TLPs addressed to it. Every method has a default, so a
/// handler implements only what it needs. Methods run on several threads at once.
pub trait Handler: Send + Sync + 'static {
    /// A memory read of `out.len()` bytes at `addr` (the first enabled byte). Fill `out`
    /// and return `Ok`, or return the completion status to answer (UR, CA).
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), CplStatus> {
        let _ = (addr, out);
        Err(CplStatus::Ur)
    }
    /// A memory write of `data` at `addr` (one call per contiguous run of enabled bytes).
    fn write(&self, addr: u64, data: &[u8]) {
        let _ = (addr, data);
    }
    /// A completion (Cpl or CplD) received on a host-side port.
    fn completion(&self, tlp: &TlpRepr<'_>) {
        let _ = tlp;
    }
    /// Any other TLP.
    fn other(&self, tlp: &TlpRepr<'_>) {
        let _ = tlp;
    }
}

/// How [`serve`] binds and answers.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The adapter's address.
    pub adapter: Ipv4Addr,
    /// The local address.
    pub local: Ipv4Addr,
    /// Completer ID put in completions (the adapter's BDF).
    pub completer: Bdf,
    /// Threads (1..=16); ports are spread round robin.
    pub threads: usize,
    /// Max_Payload_Size of completions.
    pub mps: u32,
    /// Read Completion Boundary (64 or 128).
    pub rcb: u32,
    /// Where to record datagrams.
    pub capture: Option<Arc<dyn Capture>>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            adapter: Ipv4Addr::new(127, 0, 0, 1),
            local: Ipv4Addr::new(127, 0, 0, 2),
            completer: Bdf::from_raw(0x1b00),
            threads: 4,
            mps: 256,
            rcb: 64,
            capture: None,
        }
    }
}

/// Counters of a [`Server`].
#[derive(Debug, Default)]
pub struct ServeStats {
    /// MRds answered.
    pub mrd: AtomicU64,
    /// MWrs applied.
    pub mwr: AtomicU64,
    /// Completions passed to the handler.
    pub cpl: AtomicU64,
    /// Other TLPs passed to the handler.
    pub other: AtomicU64,
    /// Datagrams dropped as malformed.
    pub malformed: AtomicU64,
    /// Datagrams from a source other than the adapter.
    pub foreign: AtomicU64,
}

/// Running server threads; [`Server::stop`] (or drop) stops and joins them.
#[derive(Debug)]
pub struct Server {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    stats: Arc<ServeStats>,
}

impl Server {
    /// The counters.
    pub fn stats(&self) -> &ServeStats {
        &self.stats
    }

    /// Stops the threads (within ~50 ms) and waits for them.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Binds `local:0x4000..0x400f` and serves `handler` on `cfg.threads` threads.
pub fn serve<H: Handler>(cfg: ServeConfig, handler: Arc<H>) -> io::Result<Server> {
    if !(1..=16).contains(&cfg.threads) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("threads must be 1..=16, got {}", cfg.threads),
        ));
    }
    let mut socks: Vec<Vec<UdpSocket>> = (0..cfg.threads).map(|_| Vec::new()).collect();
    for n in 0..HOST_PORTS {
        let port = frame::host_port(n);
        let s = sys::udp_socket(
            SocketAddrV4::new(cfg.local, port),
            Some(SocketAddrV4::new(cfg.adapter, port)),
        )
        .map_err(|e| io::Error::new(e.kind(), format!("binding {}:{port:#x}: {e}", cfg.local)))?;
        s.set_nonblocking(true)?;
        socks[n as usize % cfg.threads].push(s);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let stats = Arc::new(ServeStats::default());
    let mut threads = Vec::new();
    for (i, set) in socks.into_iter().enumerate() {
        let (cfg, handler, stop, stats) =
            (cfg.clone(), handler.clone(), stop.clone(), stats.clone());
        threads.push(
            std::thread::Builder::new()
                .name(format!("nettlp-serve-{i}"))
                .spawn(move || worker(&cfg, &*handler, &set, &stop, &stats))?,
        );
    }
    Ok(Server {
        stop,
        threads,
        stats,
    })
}

fn worker<H: Handler>(
    cfg: &ServeConfig,
    h: &H,
    socks: &[UdpSocket],
    stop: &AtomicBool,
    stats: &ServeStats,
) {
    let fds: Vec<i32> = socks.iter().map(|s| s.as_raw_fd()).collect();
    let mut ready = Vec::new();
    let mut rx = RecvBatch::new(32);
    let mut out = SendBatch::new();
    let mut scratch = Vec::new();
    let mut data = vec![0u8; 4096 + 8];
    while !stop.load(Ordering::Relaxed) {
        if sys::poll_readable(&fds, Duration::from_millis(50), &mut ready).is_err() {
            continue;
        }
        for &r in &ready {
            let s = &socks[r];
            let local = match s.local_addr() {
                Ok(std::net::SocketAddr::V4(a)) => a,
                _ => continue,
            };
            for _round in 0..8 {
                let n = rx.recv(s.as_raw_fd()).unwrap_or_default();
                if n == 0 {
                    break;
                }
                for k in 0..n {
                    let (src, bytes, trunc) = rx.get(k);
                    if let Some(c) = &cfg.capture {
                        c.datagram(src, local, bytes, true);
                    }
                    if *src.ip() != cfg.adapter {
                        stats.foreign.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    if trunc || bytes.len() < HEADER_LEN + 12 {
                        stats.malformed.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let Ok((tlp, _)) = frame::parse_tlp_lenient(&bytes[HEADER_LEN..], &mut scratch)
                    else {
                        stats.malformed.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    let dst = SocketAddrV4::new(cfg.adapter, local.port());
                    dispatch(cfg, h, &tlp, s.as_raw_fd(), dst, &mut out, &mut data, stats);
                }
            }
            if !out.is_empty() {
                if let Some(c) = &cfg.capture {
                    for (d, b) in out.iter() {
                        c.datagram(local, d, b, false);
                    }
                }
                out.flush();
            }
        }
    }
}

/// Calls `f(offset, len)` for each contiguous run of enabled bytes of a request of
/// `len_dw` DWs (offsets from the DW address), without allocating: only the first and
/// last DW can have disabled bytes.
pub(crate) fn for_each_run(
    first: ByteEnables,
    last: ByteEnables,
    len_dw: u32,
    mut f: impl FnMut(u32, u32),
) {
    fn step<F: FnMut(u32, u32)>(
        run: &mut Option<(u32, u32)>,
        start: u32,
        n: u32,
        on: bool,
        f: &mut F,
    ) {
        if on {
            match run {
                Some((s, l)) if *s + *l == start => *l += n,
                _ => {
                    if let Some((s, l)) = run.take() {
                        f(s, l);
                    }
                    *run = Some((start, n));
                }
            }
        } else if let Some((s, l)) = run.take() {
            f(s, l);
        }
    }
    if len_dw == 0 {
        return;
    }
    let mut run = None;
    let fb = first.bits();
    for b in 0..4 {
        step(&mut run, b, 1, fb & (1 << b) != 0, &mut f);
    }
    if len_dw > 2 {
        step(&mut run, 4, (len_dw - 2) * 4, true, &mut f);
    }
    if len_dw > 1 {
        let (base, lb) = ((len_dw - 1) * 4, last.bits());
        for b in 0..4 {
            step(&mut run, base + b, 1, lb & (1 << b) != 0, &mut f);
        }
    }
    if let Some((s, l)) = run {
        f(s, l);
    }
}

/// Contiguous runs of enabled bytes of a request: (byte offset from the DW address, len).
#[cfg(test)]
fn enabled_runs(first: ByteEnables, last: ByteEnables, len_dw: u32) -> Vec<(u32, u32)> {
    let mut v = Vec::new();
    for_each_run(first, last, len_dw, |o, n| v.push((o, n)));
    v
}

/// First enabled byte and byte count of a memory read (0 bytes for a zero-length read).
pub fn read_extent(first: ByteEnables, last: ByteEnables, len_dw: u32) -> (u32, u32) {
    if first.bits() == 0 {
        return (0, 0);
    }
    let lo = first.first().unwrap_or(0);
    let hi = if len_dw == 1 {
        first.last().unwrap_or(3) + 1
    } else {
        (len_dw - 1) * 4 + last.last().unwrap_or(3) + 1
    };
    (lo, hi.saturating_sub(lo))
}

#[allow(clippy::too_many_arguments)]
fn dispatch<H: Handler>(
    cfg: &ServeConfig,
    h: &H,
    tlp: &TlpRepr<'_>,
    fd: i32,
    dst: SocketAddrV4,
    out: &mut SendBatch,
    data: &mut [u8],
    stats: &ServeStats,
) {
    match tlp.header {
        TlpHeader::Mem(m) if m.op == MemOp::Read => {
            stats.mrd.fetch_add(1, Ordering::Relaxed);
            let (lo, len) = read_extent(m.first_be, m.last_be, m.read_len_dw as u32);
            let addr = m.address + lo as u64;
            let lead = (addr & 3) as usize;
            let status = if len == 0 {
                Ok(())
            } else if request_shape(addr, len).is_err() {
                Err(CplStatus::Ur)
            } else {
                data[..lead + len as usize + 4].fill(0);
                h.read(addr, &mut data[lead..lead + len as usize])
            };
            answer(
                cfg,
                tlp,
                m.requester_id,
                addr,
                len,
                status,
                data,
                fd,
                dst,
                out,
            );
        }
        TlpHeader::Mem(m) if m.op == MemOp::Write => {
            stats.mwr.fetch_add(1, Ordering::Relaxed);
            for_each_run(
                m.first_be,
                m.last_be,
                (tlp.payload.len() / 4) as u32,
                |off, n| {
                    let s = off as usize;
                    h.write(m.address + off as u64, &tlp.payload[s..s + n as usize]);
                },
            );
        }
        TlpHeader::Cpl(_) => {
            stats.cpl.fetch_add(1, Ordering::Relaxed);
            h.completion(tlp);
        }
        _ => {
            stats.other.fetch_add(1, Ordering::Relaxed);
            h.other(tlp);
        }
    }
}

/// Queues the completions answering a read (`data` holds the bytes at their DW offset).
#[allow(clippy::too_many_arguments)]
pub(crate) fn answer(
    cfg: &ServeConfig,
    req: &TlpRepr<'_>,
    requester: Bdf,
    addr: u64,
    len: u32,
    status: Result<(), CplStatus>,
    data: &[u8],
    fd: i32,
    dst: SocketAddrV4,
    out: &mut SendBatch,
) {
    let tag = req.tag();
    let mut push = |t: &TlpRepr<'_>| {
        let mut t = *t;
        t.tc = req.tc;
        t.attr = req.attr;
        let _ = out.push_with(fd, dst, HEADER_LEN + t.buffer_len(), |b| {
            frame::emit_datagram(NetTlpHeader::default(), &t, b)
        });
    };
    match status {
        Err(st) => {
            let bc = len.clamp(1, 4096) as u16;
            if let Ok(t) = TlpRepr::completion(
                cfg.completer,
                requester,
                tag,
                st,
                bc,
                (addr & 0x7f) as u8,
                &[],
            ) {
                push(&t);
            }
        }
        Ok(()) => {
            let Ok(cpls) = completions(addr, len, cfg.rcb, cfg.mps, CplPolicy::Maximal) else {
                return;
            };
            for c in cpls {
                let r = c.payload_range();
                let Some(payload) = data.get(r) else { return };
                if let Ok(t) = TlpRepr::completion_chunk(cfg.completer, requester, tag, &c, payload)
                {
                    push(&t);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn be(b: u8) -> ByteEnables {
        ByteEnables::from_bits_truncate(b)
    }

    #[test]
    fn runs_by_hand() {
        assert_eq!(enabled_runs(be(0xf), be(0), 1), vec![(0, 4)]);
        assert_eq!(enabled_runs(be(0x6), be(0), 1), vec![(1, 2)]);
        assert_eq!(enabled_runs(be(0xc), be(0x3), 3), vec![(2, 8)]);
        // Non-contiguous First BE 0b1001 in a 1-DW write: two runs.
        assert_eq!(enabled_runs(be(0x9), be(0), 1), vec![(0, 1), (3, 1)]);
        // 2 DW, first 0b0101, last 0b1010: four single bytes at 0, 2, 5, 7.
        assert_eq!(
            enabled_runs(be(0x5), be(0xa), 2),
            vec![(0, 1), (2, 1), (5, 1), (7, 1)]
        );
        // A long write: one run over the middle DWs.
        assert_eq!(enabled_runs(be(0xf), be(0xf), 64), vec![(0, 256)]);
        // First 0xE: 3 bytes; 62 middle DWs: 248; last 0x1: 1 → 252 bytes from offset 1.
        assert_eq!(enabled_runs(be(0xe), be(0x1), 64), vec![(1, 252)]);
    }

    #[test]
    fn read_extent_by_hand() {
        // 0x2011, 6 bytes: DW 0x2010, len 2, first 0xE, last 0x7.
        assert_eq!(read_extent(be(0xe), be(0x7), 2), (1, 6));
        // 7 bytes at ...3: len 3, first 0x8, last 0x3.
        assert_eq!(read_extent(be(0x8), be(0x3), 3), (3, 7));
        assert_eq!(read_extent(be(0xf), be(0xf), 64), (0, 256));
        assert_eq!(read_extent(be(0x2), be(0), 1), (1, 1));
        assert_eq!(read_extent(be(0), be(0), 1), (0, 0));
    }
}
