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
    self, cmd_op, cmd_reg, CfgPacket, CmdPacket, MsgRequest, MsixEntry, NetTlpHeader, PortClass,
    ACK_REFUSED, ACK_REPLY, ACK_REQUEST, CFG_PACKET_LEN, CFG_PORT_ADAPTER, CFG_PORT_LIBTLP,
    CMD_PORT, HEADER_LEN, MSG_PORT, MSIX_ENTRIES,
};
use crate::handler::{for_each_run, read_extent};
use crate::memory::{HostMemory, Window};
use crate::sys::{self, Epoll, RecvBatch, SendBatch};
use pcielab_config::caps::{CapabilityList, MsixCap, PcieCap, PortType};
use pcielab_config::{Bar, ConfigSpace, Ids, Type0};
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
    /// Shaped for upstream LibTLP's completion reassembly (`libtlp_read_cpld`), which
    /// counts a completion that is not the last as Length × 4 bytes (too many by
    /// `Lower Address & 3` in the first completion of an unaligned read) and reads the
    /// Length field 0 (1024 DW) as 0. So a read that does not start DW-aligned and spans
    /// fewer than 1024 DWs is answered with one CplD (which LibTLP places exactly); any
    /// other read is split as [`Compat::Strict`], like a root complex. An unaligned read
    /// spanning 1024 DWs (4093–4095 bytes) has no answer LibTLP reassembles exactly: it
    /// gets the root complex's split, with which LibTLP returns instead of timing out
    /// (its data is shifted by `addr & 3`, as against hardware).
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
    /// Peers accepted besides the defaults: the device, and, when `listen` is a loopback
    /// address, `listen` itself and 127.0.0.1 (the source the kernel gives an unbound
    /// socket talking to a loopback address, as the upstream tools use). See
    /// [`AdapterConfig::allowed`].
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
    /// Serve the adapter command port 0x5002 (adapter registers, see [`CmdPacket`]).
    pub cmd_port_5002: bool,
    /// Size of BAR4 in the adapter function's configuration space (a power of two,
    /// ≥ 16 KiB; BAR sizing reads it back).
    pub bar4_size: u64,
    /// Log each refused source address once (on standard error), whatever `log` says.
    pub log_refused: bool,
    /// Send every host MMIO request on port 0x4000 (tags ≡ 0 mod 16), so a device
    /// handles them in order; otherwise spread them over 0x4000-0x400F by tag, as the
    /// hardware does (then a read may overtake an earlier posted write).
    pub mmio_ordered: bool,
    /// Log dropped datagrams (first few per reason) on standard error.
    pub log: bool,
    /// Where to record datagrams.
    pub capture: Option<Arc<dyn Capture>>,
}

impl AdapterConfig {
    /// Every source address the adapter serves (and its control socket accepts): `allow`,
    /// the device and, for a loopback `listen`, `listen` and 127.0.0.1.
    pub fn allowed(&self) -> Vec<Ipv4Addr> {
        let mut v = self.allow.clone();
        v.push(self.device);
        if self.listen.is_loopback() {
            v.push(self.listen);
            v.push(Ipv4Addr::LOCALHOST);
        }
        v.sort();
        v.dedup();
        v
    }
}

impl AdapterConfig {
    /// The default configuration, listening on `listen` for a device on `device`
    /// (e.g. a pair from [`crate::loopback::random_pair`]).
    ///
    /// ```
    /// use pcielab_nettlp::adapter::AdapterConfig;
    /// use std::net::Ipv4Addr;
    /// let c = AdapterConfig::on(Ipv4Addr::new(127, 9, 9, 1), Ipv4Addr::new(127, 9, 9, 2));
    /// assert_eq!(c.device, Ipv4Addr::new(127, 9, 9, 2));
    /// ```
    pub fn on(listen: Ipv4Addr, device: Ipv4Addr) -> AdapterConfig {
        AdapterConfig {
            listen,
            device,
            ..AdapterConfig::default()
        }
    }
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
            cmd_port_5002: true,
            bar4_size: 1 << 20,
            log_refused: true,
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
                AdapterStats { $( $name: self.$name.load(Ordering::Acquire), )* }
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
    /// Datagrams received and handled. Each is counted once its TLP has taken effect
    /// (its write applied, its drop counted), so a reader that sees `n` here sees the
    /// effects of those `n` datagrams.
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
    /// Interrupts not queued for `take_interrupts` because 65,536 were pending.
    irqs_overflowed,
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
    /// Adapter command port (0x5002) requests handled.
    cmd_requests,
    /// Single-DW MWrs short of payload completed with zeros under the one documented
    /// tolerance ([`frame::LIBTLP_SHORT_WRITE`]); applied.
    libtlp_short_writes,
    /// 1-DW MWrs with First DW BE 0 (a legal zero-length write): nothing written.
    zero_length_writes,
    /// Dropped: source not on the allow-list.
    drop_not_allowed,
    /// Dropped: datagram too short or truncated TLP.
    drop_truncated,
    /// Dropped: TLP that does not parse.
    drop_malformed,
    /// Dropped, never applied: a TLP whose bytes disagree with its Length field (payload
    /// short of Length, or bytes after the TLP) — Malformed, as PCIe receivers drop it.
    drop_length_mismatch,
    /// Dropped, never applied: a memory request whose byte enables PCIe forbids (First DW
    /// BE 0 or Last DW BE 0 with Length > 1; Last DW BE not 0 with Length 1) — Malformed.
    drop_bad_byte_enables,
    /// Dropped: TLP kind the adapter does not bridge (Msg, Cfg, IO, atomics, locked).
    drop_unsupported,
    /// Dropped: datagram on a port that does not carry it.
    drop_wrong_port,
    /// Dropped: MWr outside the memory windows.
    drop_mwr_outside,
    /// Dropped: a completion that no outstanding host read takes (its tag is not
    /// outstanding or already finished, it names another requester or another
    /// completer than the adapter's device ID, or it carries more data than asked).
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
            + self.drop_length_mismatch
            + self.drop_bad_byte_enables
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
/// Pending interrupts kept for [`Adapter::take_interrupts`] (more are counted in
/// `irqs_overflowed`).
const PENDING_IRQS: usize = 65536;

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
        /// The last completion the adapter dropped while the read waited (one from
        /// another completer than the adapter's device ID, for a tag not outstanding, a
        /// duplicate ...): what a device that did answer got wrong.
        dropped: Option<CplError>,
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
            MmioError::Timeout {
                offset,
                dropped: None,
            } => write!(
                f,
                "completion timeout: no answer from the device for the read of BAR4+{offset:#x} (a CPU would read all-ones); is the device running?"
            ),
            MmioError::Timeout {
                offset,
                dropped: Some(e),
            } => {
                write!(
                    f,
                    "completion timeout: no usable answer from the device for the read of BAR4+{offset:#x} (a CPU would read all-ones); the adapter dropped a completion meanwhile: {e}"
                )?;
                if let CplError::CompleterIdMismatch { expected, .. } = e {
                    write!(
                        f,
                        " (the device must complete with the adapter's device ID, {expected}: start it without an ID so that it asks the adapter, or give both the same)"
                    )?;
                }
                Ok(())
            }
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
    /// The last completion dropped since the current access began (for its timeout
    /// error).
    dropped: Option<CplError>,
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
    /// Pending interrupts: (how many were ever removed, queue).
    irqs: Mutex<(u64, std::collections::VecDeque<Interrupt>)>,
    irq_cv: Condvar,
    /// Every interrupt in arrival order (the last `IRQ_LOG` of them), for observers
    /// that must not take them from `irqs`: (sequence number of the first kept, log).
    irq_log: Mutex<(u64, std::collections::VecDeque<Interrupt>)>,
    config_space: Mutex<ConfigSpace>,
    /// The port of each socket (by file descriptor), for the capture.
    fd_port: std::collections::HashMap<i32, u16>,
    /// Refused sources already logged (each is logged once).
    refused: Mutex<std::collections::HashSet<Ipv4Addr>>,
    cmd_regs: Mutex<CmdRegs>,
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

fn sock_index(port: u16, has_5001: bool, has_5002: bool) -> Option<usize> {
    match port {
        0x3000..=0x30ff => Some((port - 0x3000) as usize),
        0x4000..=0x400f => Some(256 + (port - 0x4000) as usize),
        MSG_PORT => Some(272),
        CFG_PORT_ADAPTER if has_5001 => Some(273),
        CMD_PORT if has_5002 => Some(273 + usize::from(has_5001)),
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
        if cfg.cmd_port_5002 {
            ports.push(CMD_PORT);
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
        let allow = cfg.allowed();
        let cs = adapter_config_space(&cfg)?;
        let fd_port = socks.iter().map(|(p, s)| (s.as_raw_fd(), *p)).collect();
        let cmd_regs = CmdRegs::new(&cfg);
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
                dropped: None,
                next_tag: 0,
            }),
            host_cv: Condvar::new(),
            mmio: Mutex::new(()),
            irqs: Mutex::new((0, std::collections::VecDeque::new())),
            irq_cv: Condvar::new(),
            irq_log: Mutex::new((0, std::collections::VecDeque::new())),
            config_space: Mutex::new(cs),
            fd_port,
            refused: Mutex::new(Default::default()),
            cmd_regs: Mutex::new(cmd_regs),
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

    /// The adapter function's configuration space as the configuration API serves it
    /// now (4 KiB).
    pub fn config_space(&self) -> Vec<u8> {
        let cs = self
            .inner
            .config_space
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        cs.bytes().to_vec()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> AdapterStats {
        self.inner.stats.snapshot()
    }

    /// Interrupts seen so far (oldest first), removing them.
    pub fn take_interrupts(&self) -> Vec<Interrupt> {
        let mut g = self.inner.irqs.lock().unwrap_or_else(|p| p.into_inner());
        g.0 += g.1.len() as u64;
        g.1.drain(..).collect()
    }

    /// The pending interrupts (oldest first) without removing them, and a mark for
    /// [`Adapter::remove_interrupts_through`]: a reader that must deliver them first
    /// (the control socket) removes them only once delivered.
    pub fn peek_interrupts(&self) -> (Vec<Interrupt>, u64) {
        let g = self.inner.irqs.lock().unwrap_or_else(|p| p.into_inner());
        (g.1.iter().copied().collect(), g.0 + g.1.len() as u64)
    }

    /// Removes the pending interrupts up to `mark` (from [`Adapter::peek_interrupts`]);
    /// ones removed since by others are not removed twice, later ones stay.
    pub fn remove_interrupts_through(&self, mark: u64) {
        let mut g = self.inner.irqs.lock().unwrap_or_else(|p| p.into_inner());
        while g.0 < mark && g.1.pop_front().is_some() {
            g.0 += 1;
        }
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
            if let Some(i) = g.1.pop_front() {
                g.0 += 1;
                return Some(i);
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
                    h.dropped = None;
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
                    let dropped = h.dropped.take();
                    return Err(MmioError::Timeout { offset, dropped });
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
        inner.handle(
            port,
            src,
            bytes,
            false,
            out,
            &mut bufs.scratch,
            &mut bufs.data,
        );
        inner.stats.rx_datagrams.fetch_add(1, Ordering::Release);
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

/// Why a memory request's byte enables make it Malformed (PCIe Base 6.0 §2.2.5), if
/// they do: with Length 1 the Last DW BE must be 0 (a First DW BE of 0 is a legal
/// zero-length request); with Length > 1 neither may be 0.
fn bad_byte_enables(first: ByteEnables, last: ByteEnables, len_dw: u32) -> Option<&'static str> {
    match len_dw {
        0 | 1 if last.bits() != 0 => {
            Some("1-DW memory request with a non-zero Last DW BE (Malformed; not applied)")
        }
        0 | 1 => None,
        _ if first.bits() == 0 => {
            Some("memory request of more than 1 DW with First DW BE 0 (Malformed; not applied)")
        }
        _ if last.bits() == 0 => {
            Some("memory request of more than 1 DW with Last DW BE 0 (Malformed; not applied)")
        }
        _ => None,
    }
}

/// Number of MSI-X vectors of the adapter function (the messaging API reports 16).
const MSIX_VECTORS: u16 = MSIX_ENTRIES as u16;

/// The adapter function's configuration space, as the FPGA's PCIe hard IP serves it:
/// a Type 0 header (3776:8022, class 05/80, no legacy interrupt pin), BAR2 (64-bit,
/// 16 KiB: the MSI-X table at 0 and the PBA at 0x1000) and BAR4 (64-bit prefetchable,
/// `bar4_size`), a PCI Express capability (Endpoint, Gen2 x8 like the KC705 board,
/// MPS 256 supported) and an MSI-X capability (16 vectors, enabled). BAR4 holds
/// `bar4`, BAR2 the next `bar4_size`-aligned address after BAR4; memory space and bus
/// mastering are enabled, as the host left them.
pub fn adapter_config_space(cfg: &AdapterConfig) -> io::Result<ConfigSpace> {
    let bad = |e: String| io::Error::new(io::ErrorKind::InvalidInput, e);
    let size = cfg.bar4_size;
    if !size.is_power_of_two() || size < 16 << 10 {
        return Err(bad(format!(
            "bar4_size must be a power of two of at least 16 KiB, got {size:#x}"
        )));
    }
    if cfg.bar4 % size != 0 {
        return Err(bad(format!(
            "BAR4 address {:#x} is not aligned to its size {size:#x} (a BAR is naturally aligned; change the address or the size)",
            cfg.bar4
        )));
    }
    let mut bars = [None; 6];
    bars[2] = Some(Bar::Mem64 {
        size: 16 << 10,
        prefetchable: false,
    });
    bars[4] = Some(Bar::Mem64 {
        size,
        prefetchable: true,
    });
    let mut cs = Type0 {
        ids: Ids {
            vendor_id: 0x3776,
            device_id: 0x8022,
            revision: 0,
            class_code: 0x05_8000,
        },
        bars,
        interrupt_pin: 0,
        ..Type0::default()
    }
    .build()
    .map_err(|e| bad(e.to_string()))?;
    let mut pcie = PcieCap::new(PortType::Endpoint);
    pcie.max_payload = 256;
    pcie.max_speed = pcielab_wire::Generation::Gen2;
    pcie.max_width = 8;
    pcie.link = Some((pcielab_wire::Generation::Gen2, 8));
    let placed = CapabilityList::new()
        .with(pcie)
        .with(MsixCap {
            table_size: MSIX_VECTORS,
            table_bir: 2,
            table_offset: 0,
            pba_bir: 2,
            pba_offset: 0x1000,
        })
        .install(&mut cs)
        .map_err(|e| bad(e.to_string()))?;
    // BAR2 right after BAR4 (both naturally aligned), or below it at the top of memory.
    let bar2 = match cfg.bar4.checked_add(size) {
        Some(a) if a.checked_add(16 << 10).is_some() => a,
        _ => cfg.bar4 - (16 << 10),
    };
    cs.write_u32(0x18, bar2 as u32);
    cs.write_u32(0x1c, (bar2 >> 32) as u32);
    cs.write_u32(0x20, cfg.bar4 as u32);
    cs.write_u32(0x24, (cfg.bar4 >> 32) as u32);
    cs.write_u16(0x04, 0x0006); // Memory Space, Bus Master
    if let Some(m) = placed
        .iter()
        .find(|p| !p.extended && p.id == pcielab_config::caps::id::MSIX as u16)
    {
        cs.write_u16(m.offset + 2, 0x8000); // MSI-X Enable
    }
    Ok(cs)
}

/// The adapter registers of the command port (initial values as the adapter RTL's,
/// addresses from the configuration).
#[derive(Debug, Clone)]
struct CmdRegs {
    dst_mac: u64,
    src_mac: u64,
    dst_ip: u32,
    src_ip: u32,
    dst_port: u16,
    src_port: u16,
    requester: u16,
}

impl CmdRegs {
    fn new(cfg: &AdapterConfig) -> CmdRegs {
        CmdRegs {
            dst_mac: 0xffff_ffff_ffff,
            src_mac: 0x0011_2233_4455,
            dst_ip: u32::from(cfg.device),
            src_ip: u32::from(cfg.listen),
            dst_port: 0x3776,
            src_port: 0x3776,
            requester: cfg.device_id.raw(),
        }
    }

    /// The register's value, or None for an address the adapter does not have.
    fn read(&self, reg: u8) -> Option<u32> {
        Some(match reg {
            cmd_reg::MAGIC => 0x0123_4567,
            cmd_reg::DST_MAC_LOW => self.dst_mac as u32,
            cmd_reg::DST_MAC_HIGH => (self.dst_mac >> 32) as u32 & 0xffff,
            cmd_reg::SRC_MAC_LOW => self.src_mac as u32,
            cmd_reg::SRC_MAC_HIGH => (self.src_mac >> 32) as u32 & 0xffff,
            cmd_reg::DST_IP => self.dst_ip,
            cmd_reg::SRC_IP => self.src_ip,
            cmd_reg::DST_PORT => self.dst_port as u32,
            cmd_reg::SRC_PORT => self.src_port as u32,
            cmd_reg::REQUESTER_ID => self.requester as u32,
            _ => return None,
        })
    }

    /// Writes a register; false for read-only and unknown ones.
    fn write(&mut self, reg: u8, v: u32) -> bool {
        let lo = |m: u64| (m & !0xffff_ffff) | v as u64;
        let hi = |m: u64| (m & 0xffff_ffff) | ((v as u64 & 0xffff) << 32);
        match reg {
            cmd_reg::DST_MAC_LOW => self.dst_mac = lo(self.dst_mac),
            cmd_reg::DST_MAC_HIGH => self.dst_mac = hi(self.dst_mac),
            cmd_reg::SRC_MAC_LOW => self.src_mac = lo(self.src_mac),
            cmd_reg::SRC_MAC_HIGH => self.src_mac = hi(self.src_mac),
            cmd_reg::DST_IP => self.dst_ip = v,
            cmd_reg::SRC_IP => self.src_ip = v,
            cmd_reg::DST_PORT => self.dst_port = v as u16,
            cmd_reg::SRC_PORT => self.src_port = v as u16,
            _ => return false,
        }
        true
    }
}

impl Inner {
    /// Logs the first datagram of a refused source (once per address, at most 1024
    /// addresses), so a missing `--allow` is visible.
    fn log_refused(&self, src: SocketAddrV4, port: u16) {
        if !self.cfg.log_refused {
            return;
        }
        let mut seen = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() >= 1024 || !seen.insert(*src.ip()) {
            return;
        }
        eprintln!(
            "adapter: refusing datagrams from {} (first one to port {port:#x}): not on the allow-list {:?}; add `--allow {}` to serve it. Further datagrams from it are only counted (drop_not_allowed).",
            src.ip(),
            self.allow,
            src.ip()
        );
    }

    fn command(&self, port: u16, src: SocketAddrV4, bytes: &[u8], out: &mut SendBatch) {
        let st = &self.stats;
        let p = match CmdPacket::parse(bytes) {
            Ok(p) => p,
            Err(_) => {
                return self.drop_dgram(
                    &st.drop_bad_request,
                    "adapter command packet shorter than 6 bytes",
                    src,
                    port,
                )
            }
        };
        let mut regs = self.cmd_regs.lock().unwrap_or_else(|e| e.into_inner());
        match p.opcode {
            cmd_op::REG_READ => match regs.read(p.dw_addr) {
                Some(value) => {
                    st.cmd_requests.fetch_add(1, Ordering::Relaxed);
                    if let Some(s) = self.sock(CMD_PORT) {
                        out.push(s.as_raw_fd(), src, &CmdPacket { value, ..p }.to_bytes());
                    }
                }
                None => self.drop_dgram(
                    &st.drop_bad_request,
                    "adapter command: read of an unknown register",
                    src,
                    port,
                ),
            },
            cmd_op::REG_WRITE => {
                if regs.write(p.dw_addr, p.value) {
                    st.cmd_requests.fetch_add(1, Ordering::Relaxed);
                } else {
                    self.drop_dgram(
                        &st.drop_bad_request,
                        "adapter command: write to a read-only or unknown register",
                        src,
                        port,
                    )
                }
            }
            _ => self.drop_dgram(
                &st.drop_bad_request,
                "adapter command: opcode not implemented (0x10 read, 0x11 write)",
                src,
                port,
            ),
        }
    }

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
        sock_index(port, self.cfg.cfg_port_5001, self.cfg.cmd_port_5002)
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
            for (fd, d, b) in out.iter_fds() {
                // The port of the socket that sends it (messaging and configuration
                // replies go from 0x2FFF/0x4001/0x5001/0x5002 to the asker's port).
                let port = src_port
                    .or_else(|| self.fd_port.get(&fd).copied())
                    .unwrap_or(d.port());
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
            self.log_refused(src, port);
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
            PortClass::Command => return self.command(port, src, bytes, out),
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
        let (tlp, fix) = match frame::parse_tlp_exact(&bytes[HEADER_LEN..], scratch) {
            Ok(t) => t,
            Err(pcielab_wire::Error::Trailing { .. })
            | Err(pcielab_wire::Error::Truncated {
                what: "TLP payload (Length field)",
                ..
            }) => {
                return self.drop_dgram(
                    &st.drop_length_mismatch,
                    "TLP bytes disagree with its Length field (Malformed; not applied)",
                    src,
                    port,
                )
            }
            Err(pcielab_wire::Error::Truncated { .. }) => {
                return self.drop_dgram(&st.drop_truncated, "truncated TLP", src, port)
            }
            Err(_) => return self.drop_dgram(&st.drop_malformed, "TLP does not parse", src, port),
        };
        st.rx_tlps.fetch_add(1, Ordering::Relaxed);
        if let TlpHeader::Mem(m) = tlp.header {
            let len_dw = if m.op == MemOp::Write {
                (tlp.payload.len() / 4) as u32
            } else {
                m.read_len_dw as u32
            };
            if let Some(why) = bad_byte_enables(m.first_be, m.last_be, len_dw) {
                return self.drop_dgram(&st.drop_bad_byte_enables, why, src, port);
            }
        }
        if fix.padded > 0 {
            st.libtlp_short_writes.fetch_add(1, Ordering::Relaxed);
        }
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
                let applied =
                    self.apply_write(src, port, m.address, m.first_be, m.last_be, tlp.payload);
                if self.cfg.ack_writes && hdr.tstamp == ACK_REQUEST {
                    let p = frame::device_port(tlp.tag().value() as u8);
                    if let Some(s) = self.sock(p) {
                        let mut b = [0u8; HEADER_LEN];
                        // A write that was dropped is answered as refused, not acknowledged.
                        let _ = NetTlpHeader {
                            seq: hdr.seq,
                            tstamp: if applied { ACK_REPLY } else { ACK_REFUSED },
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
                    Err(e) => {
                        let why = match e {
                            CplError::CompleterIdMismatch { .. } => {
                                "completion from a completer other than the adapter's device ID"
                            }
                            CplError::RequesterIdMismatch { .. } => {
                                "completion for another requester than the root complex"
                            }
                            CplError::DuplicateCompletion { .. } => {
                                "completion for a host read that has already finished"
                            }
                            CplError::DestinationTooSmall { .. } => {
                                "completion with more data than its host read asked for"
                            }
                            _ => "completion for no outstanding host read",
                        };
                        h.dropped = Some(e);
                        self.drop_dgram(&st.drop_unexpected_cpl, why, src, port)
                    }
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
            Compat::Libtlp if addr & 3 != 0 && n < 4096 => 4096,
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
    ) -> bool {
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
            if g.1.len() < PENDING_IRQS {
                g.1.push_back(irq);
            } else {
                st.irqs_overflowed.fetch_add(1, Ordering::Relaxed);
            }
            self.irq_cv.notify_all();
            return true;
        }
        let (lo, len) = read_extent(first, last, len_dw);
        let addr = dw_addr + lo as u64;
        if len == 0 {
            // A 1-DW write with First DW BE 0: legal, writes nothing.
            st.zero_length_writes.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        if !self.mem.contains(addr, len as u64) {
            self.drop_dgram(
                &st.drop_mwr_outside,
                "MWr outside the memory windows",
                src,
                port,
            );
            return false;
        }
        if first.bits() == 0xf && (len_dw == 1 || last.bits() == 0xf) {
            // Every byte enabled (the common case): one copy.
            self.mem.write(dw_addr, &payload[..len_dw as usize * 4]);
        } else {
            for_each_run(first, last, len_dw, |off, n| {
                let o = off as usize;
                self.mem
                    .write(dw_addr + off as u64, &payload[o..o + n as usize]);
            });
        }
        // Counted once applied: a reader that sees it sees the write in memory.
        st.mwr.fetch_add(1, Ordering::Release);
        true
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
        let off = p.dw_addr * 4;
        if p.write {
            // Every bit's access type applies (RO, RW, RW1C, BAR sizing masks).
            cs.write(off, p.data, ByteEnables::from_bits_truncate(p.byte_mask));
            return;
        }
        let v = cs.read_u32(off);
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
                if n > 0 {
                    // Counted once handled (see `rx_datagrams`).
                    inner.stats.rx_batches.fetch_add(1, Ordering::Relaxed);
                    inner
                        .stats
                        .rx_datagrams
                        .fetch_add(n as u64, Ordering::Release);
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
