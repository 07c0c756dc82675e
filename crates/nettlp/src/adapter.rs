//! The software adapter host: the NetTLP adapter, the root complex and host memory in one
//! process, so NetTLP devices run with no FPGA.
//!
//! ```text
//!             127.0.0.1 (adapter)                          127.0.0.2 (device)
//!   0x3000+t  ◄── MRd/MWr from the device ──────────────  LibTLP / Channel
//!             ──► CplD split at RCB/MPS, or UR ─────────►  (to 0x3000 + tag)
//!   0x4000+n  ──► host MRd/MWr to BAR4 (mmio_read/write) ► psmem, Handler
//!             ◄── CplD from the device ─────────────────
//!   0x2FFF    ◄─► messaging API (BAR4, device ID, MSI-X table)
//!   0x4001/0x5001 ◄─► configuration API (6-byte packets)
//! ```
//!
//! Worker threads each own a share of the sockets (epoll) and receive and send in batches
//! (`recvmmsg`/`sendmmsg`). Only allow-listed peers are served; every dropped datagram
//! is counted by reason ([`AdapterStats`]) and the first few of each reason are logged.
//! Each worker also adds its own CPU time (user and kernel) to the stats, so the adapter's
//! capacity per core is `tlps_handled() / cpu_ns()` under any load (the `adapter` bench
//! measures it; [`Adapter::handle_datagram`] runs the per-datagram work without sockets).
//! Device writes to MSI-X addresses are reported as [`Interrupt`]s, not stored.
//!
//! ```no_run
//! use pcielab_nettlp::adapter::{Adapter, AdapterConfig};
//! let a = Adapter::start(AdapterConfig::default())?;
//! a.memory().write(0x1000, b"hello");
//! let mut b = [0u8; 4];
//! a.mmio_read(0, &mut b)?; // a host read of BAR4 offset 0, answered by the device
//! a.stop();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::capture::Capture;
use crate::frame::{
    self, CfgPacket, MsgRequest, MsixEntry, NetTlpHeader, PortClass, ACK_REPLY, ACK_REQUEST,
    CFG_PACKET_LEN, CFG_PORT_ADAPTER, CFG_PORT_LIBTLP, HEADER_LEN, MSG_PORT, MSIX_ENTRIES,
};
use crate::handler::{for_each_run, read_extent};
use crate::memory::{HostMemory, Window};
use crate::sys::{self, Epoll, RecvBatch, SendBatch};
use pcielab_wire::dma::{
    completions, request_shape, split_read, split_write, CplError, CplPolicy, Reassembler,
    SplitPolicy,
};
use pcielab_wire::tlp::{chunk_payload, MemOp, TlpHeader, TlpRepr};
use pcielab_wire::{Bdf, ByteEnables, CplStatus, Tag};
use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How completions are shaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Compat {
    /// Like a real root complex: cut at RCB multiples, at most MPS each.
    #[default]
    Strict,
    /// Avoids the upstream LibTLP reassembly bug: a read that does not start DW-aligned
    /// is answered with a single CplD (still never one 4096-byte CplD).
    Libtlp,
}

/// Deterministic fault injection on the completions the adapter sends (for tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Faults {
    /// Drop every n-th completion (0: never).
    pub drop_cpl_every: u32,
    /// Send every n-th completion twice (0: never).
    pub dup_cpl_every: u32,
}

/// Configuration of the software adapter host.
#[derive(Debug, Clone)]
pub struct AdapterConfig {
    /// Address the adapter binds (its side of the link).
    pub listen: Ipv4Addr,
    /// The device host: host-issued requests go there.
    pub device: Ipv4Addr,
    /// Peers accepted (the device is added automatically).
    pub allow: Vec<Ipv4Addr>,
    /// Host memory windows devices may access; outside them reads get UR.
    pub windows: Vec<Window>,
    /// Max_Payload_Size of completions (128..=4096).
    pub mps: u32,
    /// Read Completion Boundary (64 or 128).
    pub rcb: u32,
    /// Completion shaping.
    pub compat: Compat,
    /// BAR4 physical address reported by the messaging API.
    pub bar4: u64,
    /// The adapter's BDF (device ID reported by the messaging API; completer ID of
    /// device-side completions).
    pub device_id: Bdf,
    /// The root complex's BDF (completer of host memory reads; requester of MMIO).
    pub root_id: Bdf,
    /// MSI-X table reported by the messaging API.
    pub msix: [MsixEntry; MSIX_ENTRIES],
    /// Worker threads.
    pub threads: usize,
    /// Answer write-acknowledgement requests (pcielab extension).
    pub ack_writes: bool,
    /// Fault injection.
    pub faults: Faults,
    /// Completion timeout of host MMIO reads.
    pub mmio_timeout: Duration,
    /// Serve the configuration API on 0x5001 too.
    pub cfg_port_5001: bool,
    /// Send every host MMIO request on port 0x4000 (tags ≡ 0 mod 16), so a device
    /// handles them in order; otherwise spread them over 0x4000-0x400F by tag, as the
    /// hardware does (then a read may overtake an earlier posted write).
    pub mmio_ordered: bool,
    /// Log dropped datagrams (first few per reason) on standard error.
    pub log: bool,
    /// Where to record datagrams.
    pub capture: Option<Arc<dyn Capture>>,
}

impl Default for AdapterConfig {
    fn default() -> Self {
        let mut msix = [MsixEntry::default(); MSIX_ENTRIES];
        for (i, e) in msix.iter_mut().enumerate() {
            e.addr = 0xfee0_0000 + ((i as u64) << 12);
            e.data = 0x4020 + i as u32;
        }
        AdapterConfig {
            listen: Ipv4Addr::new(127, 0, 0, 1),
            device: Ipv4Addr::new(127, 0, 0, 2),
            allow: Vec::new(),
            windows: vec![Window {
                base: 0,
                size: 1 << 30,
            }],
            mps: 256,
            rcb: 64,
            compat: Compat::Strict,
            bar4: 0x2_0000_0000,
            device_id: Bdf::from_raw(0x1b00),
            root_id: Bdf::from_raw(0),
            msix,
            threads: 1,
            ack_writes: false,
            faults: Faults::default(),
            mmio_timeout: Duration::from_millis(500),
            cfg_port_5001: true,
            mmio_ordered: true,
            log: false,
            capture: None,
        }
    }
}

macro_rules! counters {
    ($( $(#[$m:meta])* $name:ident ),* $(,)?) => {
        #[derive(Debug, Default)]
        struct Counters { $( $name: AtomicU64, )* }
        /// A snapshot of the adapter's counters.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct AdapterStats { $( $(#[$m])* pub $name: u64, )* }
        impl Counters {
            fn snapshot(&self) -> AdapterStats {
                AdapterStats { $( $name: self.$name.load(Ordering::Relaxed), )* }
            }
        }
        impl AdapterStats {
            /// `(name, value)` of every counter.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![ $( (stringify!($name), self.$name), )* ]
            }
        }
    };
}

counters! {
    /// Datagrams received.
    rx_datagrams,
    /// `recvmmsg` calls that returned datagrams (`rx_datagrams / rx_batches` is the
    /// average batch).
    rx_batches,
    /// TLPs received and parsed.
    rx_tlps,
    /// MRds served from host memory.
    mrd,
    /// MWrs applied to host memory.
    mwr,
    /// Completions (CplD/Cpl) sent for device reads.
    cpl_sent,
    /// UR completions sent (reads outside the windows).
    ur_sent,
    /// MSI-X interrupts seen.
    interrupts,
    /// Messaging API requests answered.
    msg_requests,
    /// Configuration API requests answered.
    cfg_requests,
    /// Host MMIO requests sent to the device.
    mmio_sent,
    /// Completions received for host MMIO reads.
    mmio_cpl,
    /// Write acknowledgements sent.
    acks_sent,
    /// Dropped: source not on the allow-list.
    drop_not_allowed,
    /// Dropped: datagram too short or truncated TLP.
    drop_truncated,
    /// Dropped: TLP that does not parse.
    drop_malformed,
    /// Dropped: TLP kind the adapter does not bridge (Msg, Cfg, IO, atomics, locked).
    drop_unsupported,
    /// Dropped: datagram on a port that does not carry it.
    drop_wrong_port,
    /// Dropped: MWr outside the memory windows.
    drop_mwr_outside,
    /// Dropped: completion for no outstanding host read.
    drop_unexpected_cpl,
    /// Dropped: bad messaging or configuration request.
    drop_bad_request,
    /// Completions dropped by fault injection.
    fault_dropped,
    /// Completions duplicated by fault injection.
    fault_duplicated,
    /// Datagrams the kernel refused to send.
    send_failures,
    /// CPU time the worker threads spent in user mode, in nanoseconds (all workers
    /// together; updated at most every millisecond while busy, and when idle).
    cpu_user_ns,
    /// CPU time the worker threads spent in the kernel (system calls, and the loopback
    /// network stack work done on their behalf), in nanoseconds.
    cpu_sys_ns,
}

impl AdapterStats {
    /// Total dropped datagrams.
    pub fn dropped(&self) -> u64 {
        self.drop_not_allowed
            + self.drop_truncated
            + self.drop_malformed
            + self.drop_unsupported
            + self.drop_wrong_port
            + self.drop_mwr_outside
            + self.drop_unexpected_cpl
            + self.drop_bad_request
    }

    /// TLPs the adapter handled: TLPs received and parsed plus completions sent.
    pub fn tlps_handled(&self) -> u64 {
        self.rx_tlps + self.cpl_sent
    }

    /// CPU time of the worker threads (user + kernel), in nanoseconds.
    pub fn cpu_ns(&self) -> u64 {
        self.cpu_user_ns + self.cpu_sys_ns
    }

    /// The counters as one JSON object.
    pub fn to_json(&self) -> String {
        let parts: Vec<String> = self
            .fields()
            .iter()
            .map(|(k, v)| format!("\"{k}\":{v}"))
            .collect();
        format!("{{{}}}", parts.join(","))
    }
}

/// Interrupts kept for [`Adapter::interrupts_since`].
const IRQ_LOG: usize = 4096;

/// An MSI-X interrupt: a device MWr to an MSI address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interrupt {
    /// The vector whose table entry matches address and data, if any.
    pub vector: Option<usize>,
    /// Address written.
    pub addr: u64,
    /// Data written (little endian DW).
    pub data: u32,
}

impl fmt::Display for Interrupt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.vector {
            Some(v) => write!(
                f,
                "MSI-X vector {v} (addr {:#x} data {:#x})",
                self.addr, self.data
            ),
            None => write!(
                f,
                "MSI write to {:#x} data {:#x} (no matching vector)",
                self.addr, self.data
            ),
        }
    }
}

/// Why a host MMIO access failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MmioError {
    /// The device did not complete within the completion timeout (a real CPU would
    /// read all-ones).
    Timeout {
        /// BAR4 offset.
        offset: u64,
    },
    /// The device answered with an error or an inconsistent completion.
    Completion(CplError),
    /// Bad size or offset.
    Invalid(String),
    /// Sending failed.
    Io(String),
}

impl fmt::Display for MmioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MmioError::Timeout { offset } => write!(
                f,
                "completion timeout: no answer from the device for the read of BAR4+{offset:#x} (a CPU would read all-ones); is the device running?"
            ),
            MmioError::Completion(e) => write!(f, "device completion: {e}"),
            MmioError::Invalid(s) => write!(f, "invalid MMIO access: {s}"),
            MmioError::Io(s) => write!(f, "sending the MMIO request: {s}"),
        }
    }
}

impl std::error::Error for MmioError {}

#[derive(Debug)]
struct HostReads {
    reasm: Reassembler,
    buf: Vec<u8>,
    pending: usize,
    err: Option<CplError>,
    next_tag: u16,
}

struct Inner {
    cfg: AdapterConfig,
    /// Smallest and largest non-zero MSI-X table address (the table is scanned only for
    /// writes inside this range).
    msix_span: (u64, u64),
    allow: Vec<Ipv4Addr>,
    mem: Arc<HostMemory>,
    socks: Vec<(u16, UdpSocket)>,
    stats: Counters,
    stop: AtomicBool,
    host: Mutex<HostReads>,
    host_cv: Condvar,
    mmio: Mutex<()>,
    irqs: Mutex<Vec<Interrupt>>,
    irq_cv: Condvar,
    /// Every interrupt in arrival order (the last `IRQ_LOG` of them), for observers
    /// that must not take them from `irqs`: (sequence number of the first kept, log).
    irq_log: Mutex<(u64, std::collections::VecDeque<Interrupt>)>,
    config_space: Mutex<[u8; 4096]>,
    cpl_counter: AtomicU64,
    logged: Mutex<std::collections::HashMap<&'static str, u64>>,
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inner")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

/// Per-thread working buffers of the adapter's datagram handling (see
/// [`Adapter::handle_datagram`]).
#[derive(Debug)]
pub struct Buffers {
    scratch: Vec<u8>,
    data: Vec<u8>,
}

impl Buffers {
    /// Buffers large enough for any NetTLP datagram.
    pub fn new() -> Buffers {
        Buffers {
            scratch: Vec::with_capacity(4096 + 16),
            data: vec![0u8; 4096 + 16],
        }
    }
}

impl Default for Buffers {
    fn default() -> Self {
        Buffers::new()
    }
}

/// A running software adapter host.
#[derive(Debug)]
pub struct Adapter {
    inner: Arc<Inner>,
    threads: Vec<JoinHandle<()>>,
}

fn sock_index(port: u16, has_5001: bool) -> Option<usize> {
    match port {
        0x3000..=0x30ff => Some((port - 0x3000) as usize),
        0x4000..=0x400f => Some(256 + (port - 0x4000) as usize),
        MSG_PORT => Some(272),
        CFG_PORT_ADAPTER if has_5001 => Some(273),
        _ => None,
    }
}

impl Adapter {
    /// Binds every port and starts the workers.
    pub fn start(cfg: AdapterConfig) -> io::Result<Adapter> {
        if !(1..=64).contains(&cfg.threads) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("threads must be 1..=64, got {}", cfg.threads),
            ));
        }
        // Check MPS and RCB once, so completion shaping cannot fail later.
        completions(0, 4, cfg.rcb, cfg.mps, CplPolicy::Maximal)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let mut ports: Vec<u16> = (0x3000..=0x30ff).chain(0x4000..=0x400f).collect();
        ports.push(MSG_PORT);
        if cfg.cfg_port_5001 {
            ports.push(CFG_PORT_ADAPTER);
        }
        let mut socks = Vec::with_capacity(ports.len());
        for p in ports {
            let s = sys::udp_socket(SocketAddrV4::new(cfg.listen, p), None).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "binding {}:{p:#x}: {e} (is another adapter running?)",
                        cfg.listen
                    ),
                )
            })?;
            s.set_nonblocking(true)?;
            socks.push((p, s));
        }
        let mut allow = cfg.allow.clone();
        allow.push(cfg.device);
        let mut cs = [0u8; 4096];
        cs[0..2].copy_from_slice(&0x3776u16.to_le_bytes());
        cs[2..4].copy_from_slice(&0x8022u16.to_le_bytes());
        cs[0x0a] = 0x80; // class: other memory controller (05/80)
        cs[0x0b] = 0x05;
        cs[0x20..0x24].copy_from_slice(&((cfg.bar4 as u32) | 0xc).to_le_bytes());
        cs[0x24..0x28].copy_from_slice(&((cfg.bar4 >> 32) as u32).to_le_bytes());
        let msix_span = cfg
            .msix
            .iter()
            .filter(|e| e.addr != 0)
            .fold((u64::MAX, 0), |(lo, hi), e| {
                (lo.min(e.addr), hi.max(e.addr))
            });
        let inner = Arc::new(Inner {
            msix_span,
            mem: Arc::new(HostMemory::new(cfg.windows.clone())),
            allow,
            socks,
            stats: Counters::default(),
            stop: AtomicBool::new(false),
            host: Mutex::new(HostReads {
                reasm: Reassembler::new(cfg.root_id, 256)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?,
                buf: Vec::new(),
                pending: 0,
                err: None,
                next_tag: 0,
            }),
            host_cv: Condvar::new(),
            mmio: Mutex::new(()),
            irqs: Mutex::new(Vec::new()),
            irq_cv: Condvar::new(),
            irq_log: Mutex::new((0, std::collections::VecDeque::new())),
            config_space: Mutex::new(cs),
            cpl_counter: AtomicU64::new(0),
            logged: Mutex::new(Default::default()),
            cfg,
        });
        let n = inner.cfg.threads;
        let mut threads = Vec::new();
        for w in 0..n {
            let ep = Epoll::new()?;
            for (i, (_, s)) in inner.socks.iter().enumerate() {
                if i % n == w {
                    ep.add(s.as_raw_fd(), i as u64)?;
                }
            }
            let inner = inner.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("adapter-{w}"))
                    .spawn(move || worker(&inner, ep))?,
            );
        }
        Ok(Adapter { inner, threads })
    }

    /// The emulated host memory.
    pub fn memory(&self) -> &Arc<HostMemory> {
        &self.inner.mem
    }

    /// The configuration.
    pub fn config(&self) -> &AdapterConfig {
        &self.inner.cfg
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> AdapterStats {
        self.inner.stats.snapshot()
    }

    /// Interrupts seen so far (oldest first), removing them.
    pub fn take_interrupts(&self) -> Vec<Interrupt> {
        std::mem::take(&mut *self.inner.irqs.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Interrupts from sequence number `from` on (0 is the first the adapter saw), and
    /// the sequence number after the last: an observer's view that leaves them for
    /// [`Adapter::take_interrupts`] and [`Adapter::wait_interrupt`]. Only the last
    /// 4096 are kept.
    pub fn interrupts_since(&self, from: u64) -> (Vec<Interrupt>, u64) {
        let l = self.inner.irq_log.lock().unwrap_or_else(|p| p.into_inner());
        let skip = from.saturating_sub(l.0) as usize;
        let next = l.0 + l.1.len() as u64;
        (l.1.iter().skip(skip).copied().collect(), next)
    }

    /// Waits up to `timeout` for an interrupt and removes it.
    pub fn wait_interrupt(&self, timeout: Duration) -> Option<Interrupt> {
        let deadline = Instant::now() + timeout;
        let mut g = self.inner.irqs.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if !g.is_empty() {
                return Some(g.remove(0));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            g = self
                .inner
                .irq_cv
                .wait_timeout(g, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// The bus address of BAR4 + `offset`.
    fn bar4_addr(&self, offset: u64) -> Result<u64, MmioError> {
        self.inner
            .cfg
            .bar4
            .checked_add(offset)
            .ok_or_else(|| MmioError::Invalid("offset overflows".into()))
    }

    /// A host read of `buf.len()` bytes of BAR4 at `offset`, answered by the device.
    pub fn mmio_read(&self, offset: u64, buf: &mut [u8]) -> Result<(), MmioError> {
        if buf.is_empty() {
            return Ok(());
        }
        let inner = &self.inner;
        let _one = inner.mmio.lock().unwrap_or_else(|p| p.into_inner());
        let addr = self.bar4_addr(offset)?;
        let chunks: Vec<_> = split_read(addr, buf.len() as u64, 128, SplitPolicy::Aligned)
            .map_err(|e| MmioError::Invalid(e.to_string()))?
            .collect();
        // In waves of 16 reads: 16 distinct tags even when all use one port.
        for (w, wave) in chunks.chunks(16).enumerate() {
            let mut out = SendBatch::new();
            {
                let mut h = inner.host.lock().unwrap_or_else(|p| p.into_inner());
                if w == 0 {
                    h.buf.clear();
                    h.buf.resize(buf.len(), 0);
                }
                h.err = None;
                h.pending = 0;
                for chunk in wave {
                    let tag = inner.next_host_tag(&mut h);
                    h.reasm.cancel(tag);
                    h.reasm
                        .issue_chunk(tag, chunk, Some(inner.cfg.device_id))
                        .map_err(|e| MmioError::Invalid(e.to_string()))?;
                    h.pending += 1;
                    let mrd = TlpRepr::mem_read_chunk(inner.cfg.root_id, tag, chunk);
                    inner.queue_host(&mut out, tag.value(), &mrd)?;
                }
            }
            inner.flush(&mut out, None);
            let deadline = Instant::now() + inner.cfg.mmio_timeout;
            let mut h = inner.host.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if let Some(e) = h.err.take() {
                    cancel_all(&mut h);
                    return Err(MmioError::Completion(e));
                }
                if h.pending == 0 {
                    break;
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    cancel_all(&mut h);
                    return Err(MmioError::Timeout { offset });
                }
                h = inner
                    .host_cv
                    .wait_timeout(h, left)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        }
        let h = inner.host.lock().unwrap_or_else(|p| p.into_inner());
        buf.copy_from_slice(&h.buf[..buf.len()]);
        Ok(())
    }

    /// A host write of `data` to BAR4 at `offset` (posted: returns once sent).
    pub fn mmio_write(&self, offset: u64, data: &[u8]) -> Result<(), MmioError> {
        if data.is_empty() {
            return Ok(());
        }
        let inner = &self.inner;
        let _one = inner.mmio.lock().unwrap_or_else(|p| p.into_inner());
        let addr = self.bar4_addr(offset)?;
        let split = split_write(addr, data.len() as u64, inner.cfg.mps, SplitPolicy::Aligned)
            .map_err(|e| MmioError::Invalid(e.to_string()))?;
        let mut out = SendBatch::new();
        let mut payload = [0u8; 4096];
        for chunk in split {
            let tag = {
                let mut h = inner.host.lock().unwrap_or_else(|p| p.into_inner());
                inner.next_host_tag(&mut h)
            };
            let n = chunk.shape.length_dw as usize * 4;
            chunk_payload(&chunk, data, &mut payload[..n])
                .map_err(|e| MmioError::Invalid(e.to_string()))?;
            let mwr = TlpRepr::mem_write_chunk(inner.cfg.root_id, tag, &chunk, &payload[..n])
                .map_err(|e| MmioError::Invalid(e.to_string()))?;
            inner.queue_host(&mut out, tag.value(), &mwr)?;
        }
        inner.flush(&mut out, None);
        Ok(())
    }

    /// Handles one datagram as a worker would, without any socket: `bytes` arrived from
    /// `src` on the adapter's port `port`; the replies (completions, acknowledgements,
    /// API answers) are queued on `out`, not sent. For measuring the user-space cost of
    /// the adapter's per-datagram work.
    ///
    /// ```no_run
    /// use pcielab_nettlp::adapter::{Adapter, AdapterConfig, Buffers};
    /// use pcielab_nettlp::sys::SendBatch;
    /// use std::net::{Ipv4Addr, SocketAddrV4};
    /// let a = Adapter::start(AdapterConfig::default())?;
    /// let (mut out, mut bufs) = (SendBatch::new(), Buffers::new());
    /// // An MRd of one DW at 0x1000, tag 0, from 127.0.0.2: one CplD is queued.
    /// let mut d = vec![0u8; 6];
    /// d.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0x0f, 0, 0, 0x10, 0]);
    /// a.handle_datagram(0x3000, SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 0x3000), &d, &mut out, &mut bufs);
    /// assert_eq!(out.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn handle_datagram(
        &self,
        port: u16,
        src: SocketAddrV4,
        bytes: &[u8],
        out: &mut SendBatch,
        bufs: &mut Buffers,
    ) {
        let inner = &self.inner;
        inner.stats.rx_datagrams.fetch_add(1, Ordering::Relaxed);
        inner.handle(
            port,
            src,
            bytes,
            false,
            out,
            &mut bufs.scratch,
            &mut bufs.data,
        );
    }

    /// Asks the workers to stop and waits for them.
    pub fn stop(mut self) {
        self.shutdown();
    }

    /// True once [`Adapter::request_stop`] was called (e.g. by the control socket).
    pub fn stop_requested(&self) -> bool {
        self.inner.stop.load(Ordering::Relaxed)
    }

    /// Asks the workers to stop without waiting.
    pub fn request_stop(&self) {
        self.inner.stop.store(true, Ordering::Relaxed);
    }

    fn shutdown(&mut self) {
        self.inner.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Adapter {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn cancel_all(h: &mut HostReads) {
    for t in 0..256u16 {
        h.reasm.cancel(Tag::from_bits_truncate(t));
    }
    h.pending = 0;
}

impl Inner {
    /// The next host tag: with `mmio_ordered`, tags with low nibble 0, so every host
    /// request uses port 0x4000 and the device sees them in issue order (a read then
    /// cannot pass an earlier posted write, as in PCIe).
    fn next_host_tag(&self, h: &mut HostReads) -> Tag {
        let t = h.next_tag;
        let step = if self.cfg.mmio_ordered { 16 } else { 1 };
        h.next_tag = (h.next_tag + step) % 256;
        Tag::from_bits_truncate(t)
    }

    fn sock(&self, port: u16) -> Option<&UdpSocket> {
        sock_index(port, self.cfg.cfg_port_5001)
            .and_then(|i| self.socks.get(i))
            .map(|(_, s)| s)
    }

    fn queue_host(
        &self,
        out: &mut SendBatch,
        tag: u16,
        tlp: &TlpRepr<'_>,
    ) -> Result<(), MmioError> {
        let port = frame::host_port(tag);
        let s = self
            .sock(port)
            .ok_or_else(|| MmioError::Io(format!("no socket for port {port:#x}")))?;
        out.push_with(
            s.as_raw_fd(),
            SocketAddrV4::new(self.cfg.device, port),
            HEADER_LEN + tlp.buffer_len(),
            |b| frame::emit_datagram(NetTlpHeader::default(), tlp, b),
        )
        .map_err(|e| MmioError::Invalid(e.to_string()))?;
        self.stats.mmio_sent.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn flush(&self, out: &mut SendBatch, src_port: Option<u16>) {
        if out.is_empty() {
            return;
        }
        if let Some(c) = &self.cfg.capture {
            for (d, b) in out.iter() {
                let port = src_port.unwrap_or(d.port());
                c.datagram(SocketAddrV4::new(self.cfg.listen, port), d, b, true);
            }
        }
        let failed = out.flush();
        self.stats
            .send_failures
            .fetch_add(failed as u64, Ordering::Relaxed);
    }

    fn drop_dgram(&self, counter: &AtomicU64, reason: &'static str, src: SocketAddrV4, port: u16) {
        counter.fetch_add(1, Ordering::Relaxed);
        if self.cfg.log {
            let mut l = self.logged.lock().unwrap_or_else(|p| p.into_inner());
            let n = l.entry(reason).or_insert(0);
            *n += 1;
            if *n <= 10 || n.is_power_of_two() {
                eprintln!("adapter: dropped datagram from {src} to port {port:#x}: {reason} (#{n} of this kind)");
            }
        }
    }

    /// Handles one received datagram; replies are queued on `out`. The caller counts it
    /// in `rx_datagrams` (per batch).
    #[allow(clippy::too_many_arguments)]
    fn handle(
        &self,
        port: u16,
        src: SocketAddrV4,
        bytes: &[u8],
        trunc: bool,
        out: &mut SendBatch,
        scratch: &mut Vec<u8>,
        data: &mut [u8],
    ) {
        let st = &self.stats;
        if !self.allow.contains(src.ip()) {
            return self.drop_dgram(
                &st.drop_not_allowed,
                "peer not on the allow-list",
                src,
                port,
            );
        }
        if trunc {
            return self.drop_dgram(
                &st.drop_truncated,
                "datagram larger than any NetTLP datagram",
                src,
                port,
            );
        }
        match frame::classify_port(port) {
            PortClass::Messaging => return self.messaging(port, src, bytes, out),
            PortClass::Config => return self.config(port, src, bytes, out),
            _ => {}
        }
        if port == CFG_PORT_LIBTLP && bytes.len() == CFG_PACKET_LEN {
            return self.config(port, src, bytes, out);
        }
        if bytes.len() < HEADER_LEN + 12 {
            return self.drop_dgram(
                &st.drop_truncated,
                "shorter than the NetTLP header and a 3DW TLP",
                src,
                port,
            );
        }
        let hdr = NetTlpHeader::parse(bytes).unwrap_or_default();
        let (tlp, _) = match frame::parse_tlp_lenient(&bytes[HEADER_LEN..], scratch) {
            Ok(t) => t,
            Err(pcielab_wire::Error::Truncated { .. }) => {
                return self.drop_dgram(&st.drop_truncated, "truncated TLP", src, port)
            }
            Err(_) => return self.drop_dgram(&st.drop_malformed, "TLP does not parse", src, port),
        };
        st.rx_tlps.fetch_add(1, Ordering::Relaxed);
        match tlp.header {
            TlpHeader::Mem(m) if m.op == MemOp::Read => self.serve_read(
                src,
                &tlp,
                m.requester_id,
                m.address,
                m.first_be,
                m.last_be,
                m.read_len_dw as u32,
                out,
                data,
            ),
            TlpHeader::Mem(m) if m.op == MemOp::Write => {
                self.apply_write(src, port, m.address, m.first_be, m.last_be, tlp.payload);
                if self.cfg.ack_writes && hdr.tstamp == ACK_REQUEST {
                    let p = frame::device_port(tlp.tag().value() as u8);
                    if let Some(s) = self.sock(p) {
                        let mut b = [0u8; HEADER_LEN];
                        let _ = NetTlpHeader {
                            seq: hdr.seq,
                            tstamp: ACK_REPLY,
                        }
                        .emit(&mut b);
                        out.push(s.as_raw_fd(), SocketAddrV4::new(*src.ip(), p), &b);
                        st.acks_sent.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            TlpHeader::Cpl(_) => {
                if !matches!(frame::classify_port(port), PortClass::HostIssued { .. }) {
                    return self.drop_dgram(
                        &st.drop_wrong_port,
                        "completion on a device-side port",
                        src,
                        port,
                    );
                }
                let Some(info) = tlp.cpl_info() else { return };
                let mut h = self.host.lock().unwrap_or_else(|p| p.into_inner());
                let h = &mut *h;
                match h.reasm.accept(&info, &mut h.buf) {
                    Ok(o) => {
                        st.mmio_cpl.fetch_add(1, Ordering::Relaxed);
                        if o.is_complete() {
                            h.pending = h.pending.saturating_sub(1);
                            self.host_cv.notify_all();
                        }
                    }
                    Err(e) if e.ends_request() => {
                        st.mmio_cpl.fetch_add(1, Ordering::Relaxed);
                        h.err.get_or_insert(e);
                        self.host_cv.notify_all();
                    }
                    Err(_) => self.drop_dgram(
                        &st.drop_unexpected_cpl,
                        "completion for no outstanding host read",
                        src,
                        port,
                    ),
                }
            }
            _ => self.drop_dgram(
                &st.drop_unsupported,
                "TLP kind not bridged by the adapter (only MRd, MWr, Cpl, CplD)",
                src,
                port,
            ),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn serve_read(
        &self,
        src: SocketAddrV4,
        req: &TlpRepr<'_>,
        requester: Bdf,
        dw_addr: u64,
        first: ByteEnables,
        last: ByteEnables,
        len_dw: u32,
        out: &mut SendBatch,
        data: &mut [u8],
    ) {
        let st = &self.stats;
        let tag = req.tag();
        let port = frame::device_port(tag.value() as u8);
        let Some(sock) = self.sock(port) else { return };
        let dst = SocketAddrV4::new(*src.ip(), port);
        let (lo, len) = read_extent(first, last, len_dw);
        let addr = dw_addr + lo as u64;
        let completer = self.cfg.root_id;
        let ok =
            len == 0 || (request_shape(addr, len).is_ok() && self.mem.contains(addr, len as u64));
        let mut send = |t: &TlpRepr<'_>| {
            let mut t = *t;
            t.tc = req.tc;
            t.attr = req.attr;
            let f = self.cfg.faults;
            let n = if f == Faults::default() {
                0 // no fault injection: no shared counter to bump
            } else {
                self.cpl_counter.fetch_add(1, Ordering::Relaxed) + 1
            };
            if f.drop_cpl_every > 0 && n % f.drop_cpl_every as u64 == 0 {
                st.fault_dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
            let copies = if f.dup_cpl_every > 0 && n % f.dup_cpl_every as u64 == 0 {
                st.fault_duplicated.fetch_add(1, Ordering::Relaxed);
                2
            } else {
                1
            };
            for _ in 0..copies {
                let _ = out.push_with(sock.as_raw_fd(), dst, HEADER_LEN + t.buffer_len(), |b| {
                    frame::emit_datagram(NetTlpHeader::default(), &t, b)
                });
                st.cpl_sent.fetch_add(1, Ordering::Relaxed);
            }
        };
        if !ok {
            st.ur_sent.fetch_add(1, Ordering::Relaxed);
            if let Ok(t) = TlpRepr::completion(
                completer,
                requester,
                tag,
                CplStatus::Ur,
                len.clamp(1, 4096) as u16,
                (addr & 0x7f) as u8,
                &[],
            ) {
                send(&t);
            }
            return;
        }
        st.mrd.fetch_add(1, Ordering::Relaxed);
        let lead = (addr & 3) as usize;
        let n = (lead + len as usize + 3) & !3;
        if len > 0 {
            self.mem.read(addr & !3, &mut data[..n.max(4)]);
        }
        let mps = match self.cfg.compat {
            Compat::Libtlp if addr & 3 != 0 => 4096,
            _ => self.cfg.mps,
        };
        let Ok(cpls) = completions(addr, len, self.cfg.rcb, mps, CplPolicy::Maximal) else {
            return;
        };
        for c in cpls {
            let Some(payload) = data.get(c.payload_range()) else {
                return;
            };
            if let Ok(t) = TlpRepr::completion_chunk(completer, requester, tag, &c, payload) {
                send(&t);
            }
        }
    }

    fn apply_write(
        &self,
        src: SocketAddrV4,
        port: u16,
        dw_addr: u64,
        first: ByteEnables,
        last: ByteEnables,
        payload: &[u8],
    ) {
        let st = &self.stats;
        let len_dw = (payload.len() / 4) as u32;
        // MSI-X: the x86 interrupt address range, or a programmed table address.
        let is_msi = (0xfee0_0000..0xfef0_0000).contains(&dw_addr)
            || ((self.msix_span.0..=self.msix_span.1).contains(&dw_addr)
                && self
                    .cfg
                    .msix
                    .iter()
                    .any(|e| e.addr == dw_addr && e.addr != 0));
        if is_msi {
            let data = u32::from_le_bytes([payload[0], payload[1], payload[2], payload[3]]);
            let vector = self
                .cfg
                .msix
                .iter()
                .position(|e| e.addr == dw_addr && e.data == data);
            st.interrupts.fetch_add(1, Ordering::Relaxed);
            let irq = Interrupt {
                vector,
                addr: dw_addr,
                data,
            };
            if self.cfg.log {
                eprintln!("adapter: interrupt: {irq} from {src}");
            }
            {
                let mut l = self.irq_log.lock().unwrap_or_else(|p| p.into_inner());
                l.1.push_back(irq);
                if l.1.len() > IRQ_LOG {
                    l.1.pop_front();
                    l.0 += 1;
                }
            }
            let mut g = self.irqs.lock().unwrap_or_else(|p| p.into_inner());
            if g.len() < 65536 {
                g.push(irq);
            }
            self.irq_cv.notify_all();
            return;
        }
        let (lo, len) = read_extent(first, last, len_dw);
        let addr = dw_addr + lo as u64;
        if len == 0 {
            return;
        }
        if !self.mem.contains(addr, len as u64) {
            return self.drop_dgram(
                &st.drop_mwr_outside,
                "MWr outside the memory windows",
                src,
                port,
            );
        }
        st.mwr.fetch_add(1, Ordering::Relaxed);
        if first.bits() == 0xf && (len_dw == 1 || last.bits() == 0xf) {
            // Every byte enabled (the common case): one copy.
            return self.mem.write(dw_addr, &payload[..len_dw as usize * 4]);
        }
        for_each_run(first, last, len_dw, |off, n| {
            let o = off as usize;
            self.mem
                .write(dw_addr + off as u64, &payload[o..o + n as usize]);
        });
    }

    fn messaging(&self, port: u16, src: SocketAddrV4, bytes: &[u8], out: &mut SendBatch) {
        let Ok(req) = MsgRequest::parse(bytes) else {
            return self.drop_dgram(
                &self.stats.drop_bad_request,
                "bad messaging API request",
                src,
                port,
            );
        };
        let Some(s) = self.sock(MSG_PORT) else { return };
        self.stats.msg_requests.fetch_add(1, Ordering::Relaxed);
        match req {
            MsgRequest::GetBar4Addr => out.push(s.as_raw_fd(), src, &self.cfg.bar4.to_le_bytes()),
            MsgRequest::GetDevId => {
                out.push(s.as_raw_fd(), src, &self.cfg.device_id.raw().to_le_bytes())
            }
            MsgRequest::GetMsixTable => out.push(
                s.as_raw_fd(),
                src,
                &frame::encode_msix_table(&self.cfg.msix),
            ),
        }
    }

    fn config(&self, port: u16, src: SocketAddrV4, bytes: &[u8], out: &mut SendBatch) {
        let Ok(p) = CfgPacket::parse(bytes) else {
            return self.drop_dgram(
                &self.stats.drop_bad_request,
                "bad configuration API packet",
                src,
                port,
            );
        };
        self.stats.cfg_requests.fetch_add(1, Ordering::Relaxed);
        let mut cs = self.config_space.lock().unwrap_or_else(|e| e.into_inner());
        let off = p.dw_addr as usize * 4;
        if p.write {
            // Vendor/device ID, revision/class and header type are read-only.
            if !matches!(p.dw_addr, 0 | 2 | 3) {
                let v = p.data.to_le_bytes();
                for (i, b) in v.iter().enumerate() {
                    if p.byte_mask & (1 << i) != 0 {
                        cs[off + i] = *b;
                    }
                }
            }
            return;
        }
        let v = u32::from_le_bytes([cs[off], cs[off + 1], cs[off + 2], cs[off + 3]]);
        let reply = CfgPacket { data: v, ..p }.to_bytes();
        if let Some(s) = self.sock(port) {
            out.push(s.as_raw_fd(), src, &reply);
        }
    }
}

/// Adds the calling thread's CPU time since `last` to the counters.
fn account_cpu(st: &Counters, last: &mut (Duration, Duration)) {
    let now = sys::thread_cpu_times();
    let du = now.0.saturating_sub(last.0).as_nanos() as u64;
    let ds = now.1.saturating_sub(last.1).as_nanos() as u64;
    st.cpu_user_ns.fetch_add(du, Ordering::Relaxed);
    st.cpu_sys_ns.fetch_add(ds, Ordering::Relaxed);
    *last = now;
}

fn worker(inner: &Inner, mut ep: Epoll) {
    let mut keys = Vec::new();
    let mut rx = RecvBatch::new(32);
    let mut out = SendBatch::new();
    let mut bufs = Buffers::new();
    let mut cpu = sys::thread_cpu_times();
    let mut cpu_at = Instant::now();
    while !inner.stop.load(Ordering::Relaxed) {
        if ep.wait(Duration::from_millis(50), &mut keys).is_err() {
            continue;
        }
        if keys.is_empty() {
            // Idle: bring the CPU counters up to date.
            account_cpu(&inner.stats, &mut cpu);
            cpu_at = Instant::now();
            continue;
        }
        for &k in &keys {
            let Some((port, s)) = inner.socks.get(k as usize) else {
                continue;
            };
            for _round in 0..4 {
                let n = rx.recv(s.as_raw_fd()).unwrap_or(0);
                if n > 0 {
                    inner.stats.rx_batches.fetch_add(1, Ordering::Relaxed);
                    inner
                        .stats
                        .rx_datagrams
                        .fetch_add(n as u64, Ordering::Relaxed);
                }
                for i in 0..n {
                    let (src, bytes, trunc) = rx.get(i);
                    if let Some(c) = &inner.cfg.capture {
                        c.datagram(
                            src,
                            SocketAddrV4::new(inner.cfg.listen, *port),
                            bytes,
                            false,
                        );
                    }
                    inner.handle(
                        *port,
                        src,
                        bytes,
                        trunc,
                        &mut out,
                        &mut bufs.scratch,
                        &mut bufs.data,
                    );
                }
                if out.len() >= 64 {
                    inner.flush(&mut out, None);
                }
                if n < 32 {
                    break;
                }
            }
        }
        // One sendmmsg for the answers to every socket of this wake-up.
        if !out.is_empty() {
            inner.flush(&mut out, None);
        }
        // While busy, at most one getrusage per millisecond.
        if cpu_at.elapsed() >= Duration::from_millis(1) {
            account_cpu(&inner.stats, &mut cpu);
            cpu_at = Instant::now();
        }
    }
    account_cpu(&inner.stats, &mut cpu);
}
