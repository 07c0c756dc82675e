//! The device side (LibTLP's role): DMA reads and writes into host memory through an
//! adapter, with many requests in flight.
//!
//! ```text
//!   Device ──(pool)──► Channel ── tags t0..tk, one socket each, bound local:0x3000+t,
//!                       │         connected to adapter:0x3000+t (only it can answer)
//!                       │  split_read (MRRS, 4 KiB) ─► MRd per free tag ─► sendmmsg
//!                       │  poll the tags in flight ─► recvmmsg ─► Reassembler::accept
//!                       ▼  (tag + requester + completer, Byte Count, Lower Address)
//!                   caller's buffer
//! ```
//!
//! Failure modes, all values of [`DmaError`]: no completion for `timeout` after the last
//! progress of a read ([`DmaError::Timeout`]); Unsupported Request and Completer Abort
//! ([`DmaError::UnsupportedRequest`], [`DmaError::CompleterAbort`]); any other malformed
//! or inconsistent completion ([`DmaError::Completion`]). A completion that belongs to no
//! outstanding read (late, duplicated, for another requester) is counted in
//! [`ChannelStats::stale`] and never written into a buffer. Tags whose reads were abandoned
//! are quarantined for one timeout before reuse, and every tag's socket is drained before a
//! new read is issued on it, so a stale completion cannot complete a later read.
//!
//! Posted writes are fire-and-forget, as in NetTLP. With
//! [`DeviceConfig::acked_writes`] each MWr asks the adapter for an acknowledgement (a
//! pcielab extension carried in the NetTLP header's `tstamp`, which real adapters
//! ignore), and `dma_write` retransmits until every write is acknowledged.

use crate::capture::Capture;
use crate::frame::{self, NetTlpHeader, ACK_REFUSED, ACK_REPLY, ACK_REQUEST, HEADER_LEN};
use crate::sys::{self, RecvBatch, SendBatch};
use pcielab_wire::dma::{
    split_read, split_write, Chunk, CplError, CplOutcome, Reassembler, SplitPolicy,
};
use pcielab_wire::tlp::{chunk_payload, TlpRepr};
use pcielab_wire::{Bdf, Tag};
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// How a device reaches its adapter.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    /// The adapter's address (the software adapter host listens on 127.0.0.1).
    pub adapter: Ipv4Addr,
    /// The local address to bind (the device's side of the link).
    pub local: Ipv4Addr,
    /// Requester ID: the adapter's BDF (completions are routed to it).
    pub requester: Bdf,
    /// Tags to use, `first..end` within 0..=256 (one UDP port each).
    pub tags: std::ops::Range<u16>,
    /// Tags per channel.
    pub tags_per_channel: u16,
    /// Reads one channel keeps in flight (at most `tags_per_channel`). Keeping it below
    /// the tag count leaves spare tags, so a tag is reused only after the others have
    /// been used (round robin): a late duplicate completion then finds its tag idle
    /// (and drained before reuse) instead of matching a new read.
    pub max_in_flight: u16,
    /// Max_Read_Request_Size (128..=4096).
    pub mrrs: u32,
    /// Max_Payload_Size for writes (128..=4096).
    pub mps: u32,
    /// Completion timeout: time without progress after which a read fails.
    pub timeout: Duration,
    /// Completer ID to require in completions (None: the first completion fixes it).
    pub completer: Option<Bdf>,
    /// Ask for and wait for write acknowledgements (pcielab extension).
    pub acked_writes: bool,
    /// Time before an unacknowledged write is sent again.
    pub ack_timeout: Duration,
    /// Retransmissions before a write fails.
    pub ack_retries: u32,
    /// Writes in flight before waiting for acknowledgements.
    pub ack_window: usize,
    /// Where to record datagrams.
    pub capture: Option<Arc<dyn Capture>>,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            adapter: Ipv4Addr::new(127, 0, 0, 1),
            local: Ipv4Addr::new(127, 0, 0, 2),
            requester: Bdf::from_raw(0x1b00),
            tags: 0..32,
            tags_per_channel: 16,
            max_in_flight: 8,
            mrrs: 512,
            mps: 256,
            timeout: Duration::from_millis(500),
            completer: None,
            acked_writes: false,
            ack_timeout: Duration::from_millis(20),
            ack_retries: 50,
            ack_window: 64,
            capture: None,
        }
    }
}

/// Why a DMA failed.
#[derive(Debug)]
pub enum DmaError {
    /// A socket operation failed.
    Io {
        /// What was being done.
        what: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The request was invalid (size, MRRS/MPS, tags).
    Invalid(pcielab_wire::Error),
    /// No completion came for `waited`.
    Timeout {
        /// Address of the read that did not complete.
        addr: u64,
        /// Its length.
        len: u32,
        /// Its tag.
        tag: u16,
        /// How long it waited without progress.
        waited: Duration,
    },
    /// The completer answered Unsupported Request (address not claimed).
    UnsupportedRequest {
        /// Address of the read.
        addr: u64,
        /// Its tag.
        tag: u16,
    },
    /// The completer answered Completer Abort.
    CompleterAbort {
        /// Address of the read.
        addr: u64,
        /// Its tag.
        tag: u16,
    },
    /// A completion was inconsistent (poisoned, wrong Byte Count, ...).
    Completion {
        /// Address of the read.
        addr: u64,
        /// What was wrong.
        error: CplError,
    },
    /// The adapter received an acknowledged write and refused it (outside its memory
    /// windows): nothing was written.
    WriteRefused {
        /// Address of the refused write.
        addr: u64,
    },
    /// Writes were not acknowledged after all retransmissions.
    WriteNotAcked {
        /// Address of the first unacknowledged write.
        addr: u64,
        /// Unacknowledged writes.
        pending: usize,
    },
}

impl fmt::Display for DmaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DmaError::Io { what, source } => write!(f, "{what}: {source}"),
            DmaError::Invalid(e) => write!(f, "invalid DMA request: {e}"),
            DmaError::Timeout { addr, len, tag, waited } => write!(
                f,
                "completion timeout: read of {len} B at {addr:#x} (tag {tag}) got no completion for {} ms; is the adapter running?",
                waited.as_millis()
            ),
            DmaError::UnsupportedRequest { addr, tag } => {
                write!(f, "unsupported request: read at {addr:#x} (tag {tag}) is outside the host's memory windows")
            }
            DmaError::CompleterAbort { addr, tag } => {
                write!(f, "completer abort: read at {addr:#x} (tag {tag})")
            }
            DmaError::Completion { addr, error } => {
                write!(f, "bad completion for the read at {addr:#x}: {error}")
            }
            DmaError::WriteRefused { addr } => write!(
                f,
                "the adapter refused the write at {addr:#x} (outside its memory windows): nothing was written"
            ),
            DmaError::WriteNotAcked { addr, pending } => write!(
                f,
                "{pending} write(s) from {addr:#x} not acknowledged; does the adapter run with --ack-writes?"
            ),
        }
    }
}

impl std::error::Error for DmaError {}

impl From<pcielab_wire::Error> for DmaError {
    fn from(e: pcielab_wire::Error) -> Self {
        DmaError::Invalid(e)
    }
}

fn io_err(what: &'static str) -> impl FnOnce(io::Error) -> DmaError {
    move |source| DmaError::Io { what, source }
}

/// Counters of one channel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChannelStats {
    /// MRds sent.
    pub mrd: u64,
    /// MWrs sent (retransmissions included).
    pub mwr: u64,
    /// Completions accepted.
    pub cpl: u64,
    /// Completions for no outstanding read (late, duplicate, foreign), dropped.
    pub stale: u64,
    /// Datagrams that were not NetTLP completions, dropped.
    pub junk: u64,
    /// Write retransmissions.
    pub retransmits: u64,
    /// Datagrams the kernel refused to send.
    pub send_failures: u64,
}

impl ChannelStats {
    fn add(&mut self, o: &ChannelStats) {
        self.mrd += o.mrd;
        self.mwr += o.mwr;
        self.cpl += o.cpl;
        self.stale += o.stale;
        self.junk += o.junk;
        self.retransmits += o.retransmits;
        self.send_failures += o.send_failures;
    }
}

#[derive(Debug)]
struct TagSock {
    tag: u8,
    sock: UdpSocket,
    quarantine: Option<Instant>,
    /// Read in flight on this tag: (addr, len, last progress).
    busy: Option<(u64, u32, Instant)>,
}

/// A set of tags owned by one caller at a time: issues DMAs with up to one read per tag
/// in flight. Obtain one from [`Device::channel`] or create one with [`Channel::open`].
#[derive(Debug)]
pub struct Channel {
    cfg: DeviceConfig,
    tags: Vec<TagSock>,
    tx: UdpSocket,
    reasm: Reassembler,
    rx: RecvBatch,
    out: SendBatch,
    next: usize,
    seq: u16,
    stats: ChannelStats,
    scratch: Vec<u8>,
    fds: Vec<i32>,
    fd_tag: Vec<usize>,
    ready: Vec<usize>,
    staging: Vec<u8>,
    spare: Vec<usize>,
    tx_port: u16,
}

impl Channel {
    /// Opens the sockets of `tags` (each `< 256`).
    pub fn open(cfg: &DeviceConfig, tags: &[u8]) -> Result<Channel, DmaError> {
        let mut v = Vec::with_capacity(tags.len());
        for &t in tags {
            let port = frame::device_port(t);
            let sock = sys::udp_socket(
                SocketAddrV4::new(cfg.local, port),
                Some(SocketAddrV4::new(cfg.adapter, port)),
            )
            .map_err(io_err(
                "binding a tag socket (is the tag's port 0x3000+tag free?)",
            ))?;
            v.push((t, sock));
        }
        let tx = sys::udp_socket(SocketAddrV4::new(cfg.local, 0), None)
            .map_err(io_err("binding the send socket"))?;
        Channel::from_sockets(cfg, v, tx)
    }

    /// A channel over sockets the caller opened: `(tag, socket)` pairs whose sockets
    /// receive that tag's completions, and `tx` to send from (it may be a clone of one of
    /// them, as LibTLP sends from the tag's port). The sockets are made non-blocking.
    pub fn from_sockets(
        cfg: &DeviceConfig,
        tags: Vec<(u8, UdpSocket)>,
        tx: UdpSocket,
    ) -> Result<Channel, DmaError> {
        if tags.is_empty() {
            return Err(DmaError::Invalid(pcielab_wire::Error::Invalid {
                what: "channel tag count",
                value: 0,
                allowed: "at least one tag",
            }));
        }
        let tx_port = match tx.local_addr() {
            Ok(std::net::SocketAddr::V4(a)) => a.port(),
            _ => 0,
        };
        let mut v = Vec::with_capacity(tags.len());
        for (tag, sock) in tags {
            sock.set_nonblocking(true)
                .map_err(io_err("setting a tag socket non-blocking"))?;
            v.push(TagSock {
                tag,
                sock,
                quarantine: None,
                busy: None,
            });
        }
        Ok(Channel {
            cfg: cfg.clone(),
            tags: v,
            tx,
            reasm: Reassembler::new(cfg.requester, 256)?,
            rx: RecvBatch::new(16),
            out: SendBatch::new(),
            next: 0,
            seq: 0,
            stats: ChannelStats::default(),
            scratch: Vec::new(),
            fds: Vec::new(),
            fd_tag: Vec::new(),
            ready: Vec::new(),
            staging: Vec::new(),
            spare: Vec::new(),
            tx_port,
        })
    }

    /// Reads with Max_Read_Request_Size `mrrs` instead of the configured one.
    pub fn set_mrrs(&mut self, mrrs: u32) {
        self.cfg.mrrs = mrrs;
    }

    /// Writes with Max_Payload_Size `mps` instead of the configured one.
    pub fn set_mps(&mut self, mps: u32) {
        self.cfg.mps = mps;
    }

    /// The channel's counters.
    pub fn stats(&self) -> ChannelStats {
        self.stats
    }

    fn adapter_port(&self, tag: u8) -> SocketAddrV4 {
        SocketAddrV4::new(self.cfg.adapter, frame::device_port(tag))
    }

    /// Whether tag `i` can be used at `now`: not in flight, and out of quarantine (which
    /// ends then).
    fn tag_free(&mut self, i: usize, now: Instant) -> bool {
        let t = &mut self.tags[i];
        if t.busy.is_some() {
            return false;
        }
        match t.quarantine {
            Some(q) if now < q => false,
            _ => {
                t.quarantine = None;
                true
            }
        }
    }

    /// Takes the next free tag (round robin), draining anything left on its socket.
    fn take_tag(&mut self, now: Instant) -> Option<usize> {
        let n = self.tags.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            if !self.tag_free(i, now) {
                continue;
            }
            self.next = (i + 1) % n;
            self.drain(i);
            return Some(i);
        }
        None
    }

    /// Takes up to `want` free tags (round robin) into `out`, draining anything left on
    /// their sockets: one `poll` over all of them, then a receive only on those that hold
    /// something (so a stale completion cannot complete a later read).
    fn take_tags(&mut self, now: Instant, want: usize, out: &mut Vec<usize>) {
        out.clear();
        let n = self.tags.len();
        let mut k = 0;
        while out.len() < want && k < n {
            let i = (self.next + k) % n;
            k += 1;
            if !self.tag_free(i, now) {
                continue;
            }
            out.push(i);
        }
        if let Some(&last) = out.last() {
            self.next = (last + 1) % n;
        } else {
            return;
        }
        self.fds.clear();
        self.fds
            .extend(out.iter().map(|&i| self.tags[i].sock.as_raw_fd()));
        let mut ready = std::mem::take(&mut self.ready);
        if sys::poll_readable(&self.fds, Duration::ZERO, &mut ready).is_err() {
            // Cannot tell: drain them all.
            ready.clear();
            ready.extend(0..out.len());
        }
        for &r in &ready {
            self.drain(out[r]);
        }
        self.ready = ready;
    }

    fn drain(&mut self, i: usize) {
        let fd = self.tags[i].sock.as_raw_fd();
        for _ in 0..64 {
            match self.rx.recv(fd) {
                Ok(0) | Err(_) => break,
                Ok(n) => self.stats.stale += n as u64,
            }
        }
    }

    fn capture_tx(&self) {
        if let Some(c) = &self.cfg.capture {
            for (fd, dst, b) in self.out.iter_fds() {
                // The source port is the tag's (== dst port) unless sent from `tx`.
                let port = if fd == self.tx.as_raw_fd() {
                    self.tx_port
                } else {
                    dst.port()
                };
                c.datagram(SocketAddrV4::new(self.cfg.local, port), dst, b, false);
            }
        }
    }

    /// The socket of `tag` (the send socket if the channel does not own that tag).
    fn tag_fd(&self, tag: u8) -> i32 {
        self.tags
            .iter()
            .find(|t| t.tag == tag)
            .map(|t| t.sock.as_raw_fd())
            .unwrap_or_else(|| self.tx.as_raw_fd())
    }

    fn flush(&mut self) {
        self.capture_tx();
        self.stats.send_failures += self.out.flush() as u64;
    }

    /// Reads `buf.len()` bytes of host memory at `addr` into `buf`.
    ///
    /// Splits at MRRS and 4 KiB boundaries, keeps one read per tag in flight and
    /// reassembles completions in any order. Returns the number of bytes read
    /// (`buf.len()`), or the first error.
    pub fn dma_read(&mut self, addr: u64, buf: &mut [u8]) -> Result<usize, DmaError> {
        let mut op = self.start_read(addr, buf.len())?;
        loop {
            if let Poll::Ready(r) = self.read_step(&mut op, buf, true) {
                return r;
            }
        }
    }

    /// The asynchronous flavour of [`dma_read`](Self::dma_read): a future that works with
    /// any executor (a shared background thread `poll`s the sockets of reads that wait and
    /// wakes their tasks). Dropping it abandons the read (its tags are quarantined).
    ///
    /// ```no_run
    /// # use pcielab_nettlp::device::{Device, DeviceConfig};
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// let dev = Device::open(DeviceConfig::default())?;
    /// let mut ch = dev.channel();
    /// let mut buf = vec![0u8; 9000];
    /// ch.dma_read_async(0x1003, &mut buf).await?;
    /// # Ok(()) }
    /// ```
    pub fn dma_read_async<'a>(&'a mut self, addr: u64, buf: &'a mut [u8]) -> ReadFuture<'a> {
        ReadFuture {
            ch: self,
            addr,
            buf,
            op: None,
        }
    }

    /// Streams DMA reads of `size` bytes each with up to `window` reads in flight: the
    /// pipelined pattern, where upstream LibTLP waits one round trip per read.
    ///
    /// `next` gives the address of each read (`None`: issue no more); `done` is called
    /// once per finished read, in completion order, with its address, its bytes and its
    /// latency (first MRd sent to last completion taken), and returns `false` to stop
    /// issuing new reads. The reads in flight then finish before this returns the number
    /// of reads completed. A read larger than MRRS takes one tag per MRRS piece; every
    /// piece goes out on its own tag (round robin over the channel's tags, one UDP port
    /// `0x3000 + tag` each, as NetTLP spreads them), and the channel's
    /// [`DeviceConfig::max_in_flight`] bounds the MRds in flight.
    ///
    /// On the first error the reads in flight are abandoned (their tags quarantined, as
    /// in [`dma_read`](Self::dma_read)) and the error is returned; `done` has then been
    /// called for every read that finished before it.
    ///
    /// ```no_run
    /// # use pcielab_nettlp::device::{Device, DeviceConfig};
    /// let dev = Device::open(DeviceConfig::default())?;
    /// let mut ch = dev.channel();
    /// let mut addrs = (0..1000u64).map(|i| 0x10000 + 64 * i);
    /// let mut sum = 0u64;
    /// let n = ch.dma_read_stream(64, 8, || addrs.next(), |r| {
    ///     sum += r.data.iter().map(|&b| b as u64).sum::<u64>();
    ///     true
    /// })?;
    /// assert_eq!(n, 1000);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn dma_read_stream(
        &mut self,
        size: usize,
        window: usize,
        mut next: impl FnMut() -> Option<u64>,
        mut done: impl FnMut(StreamRead<'_>) -> bool,
    ) -> Result<u64, DmaError> {
        if size == 0 {
            return Ok(0);
        }
        let window = window.max(1);
        let mut staging = std::mem::take(&mut self.staging);
        staging.clear();
        staging.resize(
            window
                .checked_mul(size)
                .ok_or(DmaError::Invalid(pcielab_wire::Error::Invalid {
                    what: "stream window × read size",
                    value: size as u64,
                    allowed: "a product that fits in memory",
                }))?,
            0,
        );
        let r = self.stream_loop(size, window, &mut staging, &mut next, &mut done);
        self.staging = staging;
        r
    }

    fn stream_loop(
        &mut self,
        size: usize,
        window: usize,
        staging: &mut [u8],
        next: &mut dyn FnMut() -> Option<u64>,
        done: &mut dyn FnMut(StreamRead<'_>) -> bool,
    ) -> Result<u64, DmaError> {
        let mut slots: Vec<StreamSlot> = (0..window).map(|_| StreamSlot::default()).collect();
        // The slot each busy tag's MRd belongs to.
        let mut tag_slot: Vec<Option<usize>> = vec![None; self.tags.len()];
        let limit = (self.cfg.max_in_flight.max(1) as usize).min(self.tags.len());
        let mut in_flight = 0usize;
        let mut issuing = true;
        let mut completed = 0u64;
        let mut free: Vec<usize> = (0..window).rev().collect();
        // Slots with pieces not yet sent, in the order their reads started.
        let mut pending: VecDeque<usize> = VecDeque::with_capacity(window);
        loop {
            let now = Instant::now();
            // Start reads in free slots.
            while issuing && !free.is_empty() {
                let Some(addr) = next() else {
                    issuing = false;
                    break;
                };
                let s = free.pop().unwrap_or(0);
                let slot = &mut slots[s];
                slot.chunks.clear();
                match split_read(addr, size as u64, self.cfg.mrrs, SplitPolicy::Aligned) {
                    Ok(sp) => slot.chunks.extend(sp),
                    Err(e) => {
                        free.push(s);
                        self.abandon(&mut in_flight);
                        return Err(e.into());
                    }
                }
                slot.addr = addr;
                slot.sent = 0;
                slot.left = 0;
                slot.started = now;
                pending.push_back(s);
            }
            // Send pieces on free tags, oldest read first.
            let want: usize = pending
                .iter()
                .map(|&s| slots[s].chunks.len() - slots[s].sent)
                .sum::<usize>()
                .min(limit.saturating_sub(in_flight));
            let mut tags = std::mem::take(&mut self.spare);
            self.take_tags(now, want, &mut tags);
            let mut tags_iter = tags.drain(..);
            while in_flight < limit {
                let Some(&s) = pending.front() else { break };
                if slots[s].sent == slots[s].chunks.len() {
                    pending.pop_front();
                    continue;
                }
                let Some(i) = tags_iter.next() else { break };
                let mut chunk = slots[s].chunks[slots[s].sent];
                chunk.offset += (s * size) as u64;
                if let Err(e) = self.send_mrd(i, &chunk, now, true) {
                    self.abandon(&mut in_flight);
                    return Err(e);
                }
                slots[s].sent += 1;
                slots[s].left += 1;
                tag_slot[i] = Some(s);
                in_flight += 1;
            }
            drop(tags_iter);
            self.spare = tags;
            if !self.out.is_empty() {
                self.flush();
            }
            if in_flight == 0 {
                if !issuing && pending.is_empty() {
                    return Ok(completed);
                }
                if !pending.is_empty() {
                    // Every free tag is quarantined: wait for the first to come out.
                    let until = self
                        .tags
                        .iter()
                        .filter_map(|t| t.quarantine)
                        .min()
                        .unwrap_or(now);
                    std::thread::sleep(until.saturating_duration_since(Instant::now()));
                }
                continue;
            }
            // Completions on the tags in flight.
            let oldest = self.gather_busy(now);
            let mut ready = std::mem::take(&mut self.ready);
            let wait = (oldest + self.cfg.timeout).saturating_duration_since(Instant::now());
            if let Err(e) = sys::poll_readable(&self.fds, wait, &mut ready) {
                self.ready = ready;
                self.abandon(&mut in_flight);
                return Err(DmaError::Io {
                    what: "polling tag sockets",
                    source: e,
                });
            }
            let mut failure = None;
            for &r in &ready {
                let i = self.fd_tag[r];
                if let Err(e) = self.receive(i, staging, &mut in_flight) {
                    failure.get_or_insert(e);
                }
            }
            self.ready = ready;
            // Pieces that finished: their tag is no longer busy.
            let done_at = Instant::now();
            for (i, ts) in tag_slot.iter_mut().enumerate() {
                let Some(s) = *ts else { continue };
                if self.tags[i].busy.is_some() {
                    continue;
                }
                *ts = None;
                let slot = &mut slots[s];
                slot.left = slot.left.saturating_sub(1);
                if slot.left > 0 || slot.sent < slot.chunks.len() {
                    continue;
                }
                free.push(s);
                completed += 1;
                let keep = done(StreamRead {
                    addr: slot.addr,
                    data: &staging[s * size..(s + 1) * size],
                    latency: done_at.duration_since(slot.started),
                });
                if !keep {
                    issuing = false;
                }
            }
            if let Some(e) = failure {
                self.abandon(&mut in_flight);
                return Err(e);
            }
            if let Some(e) = self.timed_out() {
                self.abandon(&mut in_flight);
                return Err(e);
            }
        }
    }

    fn start_read(&mut self, addr: u64, len: usize) -> Result<ReadOp, DmaError> {
        let split = split_read(addr, len as u64, self.cfg.mrrs, SplitPolicy::Aligned)?.peekable();
        Ok(ReadOp {
            split,
            in_flight: 0,
            len,
        })
    }

    /// The sockets a waiting read needs and when it must be looked at again (its
    /// completion timeout, or the end of a tag quarantine).
    fn wait_set(&self) -> (Vec<RawFd>, Instant) {
        let now = Instant::now();
        let mut fds = Vec::new();
        let mut deadline = now + self.cfg.timeout;
        for t in &self.tags {
            if let Some((_, _, since)) = t.busy {
                fds.push(t.sock.as_raw_fd());
                deadline = deadline.min(since + self.cfg.timeout);
            } else if let Some(q) = t.quarantine {
                deadline = deadline.min(q);
            }
        }
        (fds, deadline)
    }

    /// One round of a read: issue MRds on free tags, take the completions that arrived,
    /// check the completion timeout. With `block`, waits (in `poll`, or asleep while all
    /// free tags are quarantined) until something happens or the timeout is due.
    fn read_step(
        &mut self,
        op: &mut ReadOp,
        buf: &mut [u8],
        block: bool,
    ) -> Poll<Result<usize, DmaError>> {
        match self.read_round(op, buf, block) {
            Ok(true) => Poll::Ready(Ok(op.len)),
            Ok(false) => Poll::Pending,
            Err(e) => {
                self.abandon(&mut op.in_flight);
                Poll::Ready(Err(e))
            }
        }
    }

    fn read_round(
        &mut self,
        op: &mut ReadOp,
        buf: &mut [u8],
        block: bool,
    ) -> Result<bool, DmaError> {
        if buf.len() < op.len {
            return Err(DmaError::Invalid(pcielab_wire::Error::BufferTooSmall {
                needed: op.len,
                available: buf.len(),
            }));
        }
        let timeout = self.cfg.timeout;
        let now = Instant::now();
        let limit = (self.cfg.max_in_flight.max(1) as usize).min(self.tags.len());
        while op.split.peek().is_some() && op.in_flight < limit {
            let Some(i) = self.take_tag(now) else { break };
            let chunk = op.split.next().unwrap_or_else(unreachable_chunk);
            self.send_mrd(i, &chunk, now, false)?;
            op.in_flight += 1;
        }
        if !self.out.is_empty() {
            self.flush();
        }
        if op.in_flight == 0 {
            if op.split.peek().is_none() {
                return Ok(true);
            }
            // Every free tag is in quarantine: wait for the first to come out.
            if block {
                let until = self
                    .tags
                    .iter()
                    .filter_map(|t| t.quarantine)
                    .min()
                    .unwrap_or(now);
                std::thread::sleep(until.saturating_duration_since(Instant::now()));
            }
            return Ok(false);
        }
        // Completions on the tags in flight (waiting for them when blocking).
        let oldest = self.gather_busy(now);
        let mut ready = std::mem::take(&mut self.ready);
        if block {
            let wait = (oldest + timeout).saturating_duration_since(Instant::now());
            sys::poll_readable(&self.fds, wait, &mut ready)
                .map_err(io_err("polling tag sockets"))?;
        } else {
            ready.clear();
            ready.extend(0..self.fds.len());
        }
        let mut failure = None;
        for &r in &ready {
            let i = self.fd_tag[r];
            if let Err(e) = self.receive(i, buf, &mut op.in_flight) {
                failure.get_or_insert(e);
            }
        }
        self.ready = ready;
        if let Some(e) = failure {
            return Err(e);
        }
        // Completion timeout: a read with no progress for `timeout`.
        if let Some(e) = self.timed_out() {
            return Err(e);
        }
        Ok(op.in_flight == 0 && op.split.peek().is_none())
    }

    /// Queues the MRd of `chunk` on tag `i` and marks the tag busy. It leaves from the
    /// tag's own socket (source port == destination port, as LibTLP), or with `batched`
    /// from the channel's send socket, so that the MRds of many tags leave in one
    /// `sendmmsg` (the adapter routes by destination port and answers to `0x3000 + tag`
    /// whatever the source port, as the NetTLP adapter does).
    fn send_mrd(
        &mut self,
        i: usize,
        chunk: &Chunk,
        now: Instant,
        batched: bool,
    ) -> Result<(), DmaError> {
        let tag = self.tags[i].tag;
        self.reasm.issue_chunk(
            Tag::from_bits_truncate(tag as u16),
            chunk,
            self.cfg.completer,
        )?;
        let mrd = TlpRepr::mem_read_chunk(
            self.cfg.requester,
            Tag::from_bits_truncate(tag as u16),
            chunk,
        );
        let dst = self.adapter_port(tag);
        let fd = if batched {
            self.tx.as_raw_fd()
        } else {
            self.tags[i].sock.as_raw_fd()
        };
        self.out.push_with(fd, dst, HEADER_LEN + 16, |b| {
            frame::emit_datagram(NetTlpHeader::default(), &mrd, b)
        })?;
        self.tags[i].busy = Some((chunk.addr, chunk.len, now));
        self.stats.mrd += 1;
        Ok(())
    }

    /// The completion timeout of the first read with no progress for `timeout`.
    fn timed_out(&self) -> Option<DmaError> {
        let now = Instant::now();
        let timeout = self.cfg.timeout;
        let t = self
            .tags
            .iter()
            .find(|t| matches!(t.busy, Some((_, _, s)) if now.duration_since(s) >= timeout))?;
        let (addr, len, since) = t.busy.unwrap_or((0, 0, now));
        Some(DmaError::Timeout {
            addr,
            len,
            tag: t.tag as u16,
            waited: now.duration_since(since),
        })
    }

    /// Cancels every read in flight and quarantines its tag for one timeout.
    /// Puts the sockets of the tags in flight in `fds` (their tag indexes in `fd_tag`)
    /// and returns when the oldest of them was sent (`now` if none is).
    fn gather_busy(&mut self, now: Instant) -> Instant {
        self.fds.clear();
        self.fd_tag.clear();
        let mut oldest = now;
        for (i, t) in self.tags.iter().enumerate() {
            if let Some((_, _, since)) = t.busy {
                self.fds.push(t.sock.as_raw_fd());
                self.fd_tag.push(i);
                oldest = oldest.min(since);
            }
        }
        oldest
    }

    fn abandon(&mut self, in_flight: &mut usize) {
        let until = Instant::now() + self.cfg.timeout;
        for t in &mut self.tags {
            if t.busy.take().is_some() {
                self.reasm.cancel(Tag::from_bits_truncate(t.tag as u16));
                t.quarantine = Some(until);
            }
        }
        *in_flight = 0;
    }

    /// Receives what is queued on tag `i` and feeds completions to the reassembler.
    fn receive(&mut self, i: usize, buf: &mut [u8], in_flight: &mut usize) -> Result<(), DmaError> {
        let fd = self.tags[i].sock.as_raw_fd();
        let n = match self.rx.recv(fd) {
            Ok(n) => n,
            // ICMP port unreachable: nobody listens; keep waiting for the timeout.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => return Ok(()),
            Err(e) => {
                return Err(DmaError::Io {
                    what: "receiving completions",
                    source: e,
                })
            }
        };
        let mut first_err = None;
        for k in 0..n {
            let (src, bytes, trunc) = self.rx.get(k);
            if let Some(c) = &self.cfg.capture {
                let dst = SocketAddrV4::new(self.cfg.local, frame::device_port(self.tags[i].tag));
                c.datagram(src, dst, bytes, true);
            }
            if trunc || bytes.len() < HEADER_LEN + 12 {
                self.stats.junk += 1;
                continue;
            }
            let Ok((tlp, _)) = frame::parse_tlp_lenient(&bytes[HEADER_LEN..], &mut self.scratch)
            else {
                self.stats.junk += 1;
                continue;
            };
            let Some(info) = tlp.cpl_info() else {
                self.stats.junk += 1;
                continue;
            };
            match self.reasm.accept(&info, buf) {
                Ok(out) => {
                    self.stats.cpl += 1;
                    let t = info.tag.value();
                    if let Some(j) = self.tags.iter().position(|x| x.tag as u16 == t) {
                        match out {
                            CplOutcome::Complete { .. } => {
                                if self.tags[j].busy.take().is_some() {
                                    *in_flight -= 1;
                                }
                            }
                            CplOutcome::Partial { .. } => {
                                if let Some(b) = &mut self.tags[j].busy {
                                    b.2 = Instant::now();
                                }
                            }
                        }
                    }
                }
                Err(e) if e.ends_request() => {
                    let t = info.tag.value();
                    let addr = self
                        .tags
                        .iter()
                        .find(|x| x.tag as u16 == t)
                        .and_then(|x| x.busy.map(|b| b.0))
                        .unwrap_or(0);
                    let err = match e {
                        CplError::UnsupportedRequest { .. } => {
                            DmaError::UnsupportedRequest { addr, tag: t }
                        }
                        CplError::CompleterAbort { .. } => {
                            DmaError::CompleterAbort { addr, tag: t }
                        }
                        other => DmaError::Completion { addr, error: other },
                    };
                    first_err.get_or_insert(err);
                }
                Err(_) => self.stats.stale += 1,
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Writes `data` to host memory at `addr` (split at MPS and 4 KiB boundaries).
    ///
    /// Without acknowledgements this returns once every MWr is handed to the kernel (as
    /// in NetTLP, a write may still be lost); with [`DeviceConfig::acked_writes`] it
    /// returns once the adapter acknowledged every MWr.
    pub fn dma_write(&mut self, addr: u64, data: &[u8]) -> Result<usize, DmaError> {
        if data.is_empty() {
            return Ok(0);
        }
        let split = split_write(addr, data.len() as u64, self.cfg.mps, SplitPolicy::Aligned)?;
        // One tag (and socket) per call, so the MWrs leave in `sendmmsg` batches from
        // port 0x3000 + tag; calls rotate over the tags.
        let tag = self.tags[self.next % self.tags.len()].tag;
        self.next = (self.next + 1) % self.tags.len();
        if !self.cfg.acked_writes {
            for chunk in split {
                self.queue_write(&chunk, data, tag, NetTlpHeader::default())?;
                if self.out.len() >= 32 {
                    self.flush();
                }
            }
            self.flush();
            return Ok(data.len());
        }
        // Acknowledged writes: window of `ack_window` unacknowledged MWrs.
        let mut pending: Vec<(u16, Chunk, u8, Instant, u32)> = Vec::new();
        let mut split = split.peekable();
        loop {
            while split.peek().is_some() && pending.len() < self.cfg.ack_window.max(1) {
                let chunk = split.next().unwrap_or_else(unreachable_chunk);
                self.seq = self.seq.wrapping_add(1);
                let h = NetTlpHeader {
                    seq: self.seq,
                    tstamp: ACK_REQUEST,
                };
                self.queue_write(&chunk, data, tag, h)?;
                pending.push((self.seq, chunk, tag, Instant::now(), 0));
            }
            self.flush();
            if pending.is_empty() {
                return Ok(data.len());
            }
            self.collect_acks(&mut pending)?;
            let now = Instant::now();
            let mut resend = Vec::new();
            for p in pending.iter_mut() {
                if now.duration_since(p.3) >= self.cfg.ack_timeout {
                    if p.4 >= self.cfg.ack_retries {
                        return Err(DmaError::WriteNotAcked {
                            addr: p.1.addr,
                            pending: pending.len(),
                        });
                    }
                    p.4 += 1;
                    p.3 = now;
                    resend.push((p.0, p.1, p.2));
                }
            }
            for (seq, chunk, tag) in resend {
                self.stats.retransmits += 1;
                self.queue_write(
                    &chunk,
                    data,
                    tag,
                    NetTlpHeader {
                        seq,
                        tstamp: ACK_REQUEST,
                    },
                )?;
            }
        }
    }

    fn queue_write(
        &mut self,
        chunk: &Chunk,
        data: &[u8],
        tag: u8,
        h: NetTlpHeader,
    ) -> Result<(), DmaError> {
        let n = chunk.shape.length_dw as usize * 4;
        let mut payload = [0u8; 4096];
        chunk_payload(chunk, data, &mut payload[..n])?;
        let mwr = TlpRepr::mem_write_chunk(
            self.cfg.requester,
            Tag::from_bits_truncate(tag as u16),
            chunk,
            &payload[..n],
        )?;
        let dst = self.adapter_port(tag);
        let fd = self.tag_fd(tag);
        self.out
            .push_with(fd, dst, HEADER_LEN + mwr.buffer_len(), |b| {
                frame::emit_datagram(h, &mwr, b)
            })?;
        self.stats.mwr += 1;
        Ok(())
    }

    fn collect_acks(
        &mut self,
        pending: &mut Vec<(u16, Chunk, u8, Instant, u32)>,
    ) -> Result<(), DmaError> {
        self.fds.clear();
        self.fds
            .extend(self.tags.iter().map(|t| t.sock.as_raw_fd()));
        let mut ready = std::mem::take(&mut self.ready);
        sys::poll_readable(&self.fds, self.cfg.ack_timeout, &mut ready)
            .map_err(io_err("polling for acknowledgements"))?;
        for &r in &ready {
            let fd = self.fds[r];
            let n = self.rx.recv(fd).unwrap_or(0);
            for k in 0..n {
                let (_, b, _) = self.rx.get(k);
                match NetTlpHeader::parse(b) {
                    Ok(h) if b.len() == HEADER_LEN && h.tstamp == ACK_REPLY => {
                        pending.retain(|p| p.0 != h.seq);
                    }
                    Ok(h) if b.len() == HEADER_LEN && h.tstamp == ACK_REFUSED => {
                        if let Some(p) = pending.iter().find(|p| p.0 == h.seq) {
                            let addr = p.1.addr;
                            self.ready = ready;
                            return Err(DmaError::WriteRefused { addr });
                        }
                        self.stats.junk += 1;
                    }
                    _ => self.stats.junk += 1,
                }
            }
        }
        self.ready = ready;
        Ok(())
    }
}

fn unreachable_chunk() -> Chunk {
    // `peek` said there was one; keep a harmless value rather than panicking.
    Chunk {
        addr: 0,
        len: 0,
        offset: 0,
        shape: pcielab_wire::dma::Shape::zero_length(),
    }
}

/// One read of [`Channel::dma_read_stream`] that finished.
#[derive(Debug)]
pub struct StreamRead<'a> {
    /// Its host address.
    pub addr: u64,
    /// Its bytes.
    pub data: &'a [u8],
    /// From its first MRd sent to its last completion taken.
    pub latency: Duration,
}

/// A read of a stream in progress: its pieces, how many went out, how many are in flight.
#[derive(Debug)]
struct StreamSlot {
    addr: u64,
    chunks: Vec<Chunk>,
    sent: usize,
    left: usize,
    started: Instant,
}

impl Default for StreamSlot {
    fn default() -> Self {
        StreamSlot {
            addr: 0,
            chunks: Vec::new(),
            sent: 0,
            left: 0,
            started: Instant::now(),
        }
    }
}

/// The state of a read in progress (shared by the blocking and async flavours).
#[derive(Debug)]
struct ReadOp {
    split: std::iter::Peekable<pcielab_wire::dma::Split>,
    in_flight: usize,
    len: usize,
}

/// The future of [`Channel::dma_read_async`]; resolves to the bytes read.
#[derive(Debug)]
pub struct ReadFuture<'a> {
    ch: &'a mut Channel,
    addr: u64,
    buf: &'a mut [u8],
    op: Option<ReadOp>,
}

impl Future for ReadFuture<'_> {
    type Output = Result<usize, DmaError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if this.op.is_none() {
            match this.ch.start_read(this.addr, this.buf.len()) {
                Ok(op) => this.op = Some(op),
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        let Some(op) = this.op.as_mut() else {
            return Poll::Ready(Ok(0));
        };
        match this.ch.read_step(op, this.buf, false) {
            Poll::Ready(r) => {
                this.op = None;
                Poll::Ready(r)
            }
            Poll::Pending => {
                let (fds, deadline) = this.ch.wait_set();
                crate::poller::register(fds, deadline, cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl Drop for ReadFuture<'_> {
    fn drop(&mut self) {
        if let Some(mut op) = self.op.take() {
            self.ch.abandon(&mut op.in_flight);
        }
    }
}

/// A NetTLP device: a pool of [`Channel`]s over its tags, shareable between threads.
///
/// ```no_run
/// use pcielab_nettlp::device::{Device, DeviceConfig};
/// let dev = Device::open(DeviceConfig::default())?;
/// let mut buf = vec![0u8; 10_000];
/// dev.dma_read(0x1003, &mut buf)?;          // any size and alignment
/// dev.dma_write(0x9001, b"hello")?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Device {
    cfg: DeviceConfig,
    pool: Mutex<Vec<Channel>>,
    cv: Condvar,
    retired: Mutex<ChannelStats>,
}

impl Device {
    /// Opens the sockets of every tag in `cfg.tags`, grouped into channels of
    /// `cfg.tags_per_channel`.
    pub fn open(cfg: DeviceConfig) -> Result<Device, DmaError> {
        if cfg.tags.start >= cfg.tags.end || cfg.tags.end > 256 {
            return Err(DmaError::Invalid(pcielab_wire::Error::Invalid {
                what: "tag range",
                value: cfg.tags.end as u64,
                allowed: "a non-empty range within 0..256 (ports 0x3000..0x30ff)",
            }));
        }
        let per = cfg.tags_per_channel.max(1) as usize;
        let tags: Vec<u8> = cfg.tags.clone().map(|t| t as u8).collect();
        let mut pool = Vec::new();
        for group in tags.chunks(per) {
            pool.push(Channel::open(&cfg, group)?);
        }
        Ok(Device {
            cfg,
            pool: Mutex::new(pool),
            cv: Condvar::new(),
            retired: Mutex::new(ChannelStats::default()),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &DeviceConfig {
        &self.cfg
    }

    /// Takes a channel from the pool (waits while all are in use).
    pub fn channel(&self) -> ChannelGuard<'_> {
        let mut g = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(c) = g.pop() {
                return ChannelGuard {
                    dev: self,
                    ch: Some(c),
                };
            }
            g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// [`Channel::dma_read`] on a pooled channel.
    pub fn dma_read(&self, addr: u64, buf: &mut [u8]) -> Result<usize, DmaError> {
        self.channel().dma_read(addr, buf)
    }

    /// [`Channel::dma_write`] on a pooled channel.
    pub fn dma_write(&self, addr: u64, data: &[u8]) -> Result<usize, DmaError> {
        self.channel().dma_write(addr, data)
    }

    /// Counters summed over all channels (those in use are not counted).
    pub fn stats(&self) -> ChannelStats {
        let mut s = *self.retired.lock().unwrap_or_else(|p| p.into_inner());
        for c in self.pool.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            s.add(&c.stats);
        }
        s
    }
}

/// A channel borrowed from a [`Device`]; returned to the pool on drop.
#[derive(Debug)]
pub struct ChannelGuard<'a> {
    dev: &'a Device,
    ch: Option<Channel>,
}

impl std::ops::Deref for ChannelGuard<'_> {
    type Target = Channel;
    fn deref(&self) -> &Channel {
        self.ch
            .as_ref()
            .unwrap_or_else(|| unreachable!("channel present until drop"))
    }
}

impl std::ops::DerefMut for ChannelGuard<'_> {
    fn deref_mut(&mut self) -> &mut Channel {
        self.ch
            .as_mut()
            .unwrap_or_else(|| unreachable!("channel present until drop"))
    }
}

impl Drop for ChannelGuard<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.ch.take() {
            self.dev
                .pool
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(c);
            self.dev.cv.notify_one();
        }
    }
}
