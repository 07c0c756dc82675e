//! The host driver of seed 004's device-to-device streams ([`pcielab_device::d2d`]):
//! it reads the receiver's Rx Address and Rx base credits, programs both devices'
//! stream control registers and the receiver's UDP/IP offload registers by MMIO,
//! starts the stream, grants credits itself when the receiver asks for it (host
//! credits) and tears the stream down. The CPU does nothing per byte: while the
//! stream runs the host only waits for interrupts.
//!
//! Failures end in a [`D2dError`] with both devices' counters ([`D2dCounters`]):
//! a receiver reset while the sender still streams ([`D2dError::PeerReset`]), a sender
//! that waits for credits that never come ([`D2dError::CreditStarved`]), a target
//! address that no device claims ([`D2dError::NoPeer`], found before anything is
//! programmed), an error a device reports ([`D2dError::Device`]). Bytes a receiver
//! refuses are counted in its DROPPED register, never lost unseen.
//!
//! ```
//! use pcielab_fabric::{kinds::KindRegistry, topology::Topology};
//! use pcielab_fabric::timed::{FabricSim, SimConfig};
//! use pcielab_fabric::drivers::d2d::{D2dStream, StreamSpec};
//! let t = Topology::parse(
//!     "[[node]]\nname = \"rc\"\nkind = \"root-complex\"\n\
//!      [[node]]\nname = \"sw\"\nkind = \"switch\"\nports = 2\n\
//!      [[node]]\nname = \"ssd\"\nkind = \"d2d-ssd\"\n\
//!      [[node]]\nname = \"nic\"\nkind = \"d2d-nic\"\n\
//!      [[link]]\nup = \"rc.0\"\ndown = \"sw\"\ngen = 2\nwidth = 4\n\
//!      [[link]]\nup = \"sw.0\"\ndown = \"ssd\"\ngen = 2\nwidth = 4\n\
//!      [[link]]\nup = \"sw.1\"\ndown = \"nic\"\ngen = 2\nwidth = 4\n",
//!     "doc.toml", &KindRegistry::builtin())?;
//! let mut sim = FabricSim::new(&t, &KindRegistry::builtin(), SimConfig::default())?;
//! let mut s = D2dStream::open(&mut sim, StreamSpec::new("ssd", "nic", 64 * 1024))?;
//! let c = s.run(&mut sim)?;
//! assert_eq!((c.sent, c.taken, c.payload_sent), (65536, 65536, 65536));
//! assert_eq!(c.frames, 45); // 44 frames of 1472 bytes and one of 768
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::timed::{FabricSim, HostRead, SimError};
use pcielab_device::d2d::uoe::Template;
use pcielab_device::d2d::{
    reg, RxState, StreamError, TxState, CTL_CLEAR, CTL_PAUSE, CTL_START, ID,
};
use pcielab_sim::{SimDuration, SimTime};

/// How the sender's credit limit grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credits {
    /// The receiver's Rx FSM writes grants to the sender's CREDITS register (a
    /// peer-to-peer write): no CPU work during the stream.
    Peer,
    /// The receiver interrupts the host, which copies its grant to the sender.
    Host,
}

/// One stream to set up.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamSpec {
    /// The sender's node (`d2d-ssd`).
    pub producer: String,
    /// The receiver's node (`d2d-nic`).
    pub consumer: String,
    /// The stream number on both devices.
    pub stream: u8,
    /// Bytes to stream (D2D Transmit Byte Count).
    pub bytes: u64,
    /// Bytes per chunk and credit (Granularity).
    pub chunk: u32,
    /// Data rate, bytes/s (0: as fast as credits allow).
    pub rate: u32,
    /// The sender's first credit limit (`None`: the receiver's Rx base credits); at
    /// least [`StreamSpec::least_credits`].
    pub credits: Option<u32>,
    /// How credits come back.
    pub mode: Credits,
    /// The frames' headers.
    pub uoe: Template,
    /// Where the sender writes, instead of the receiver's Rx Address (a stale or wrong
    /// address); checked against every device's BARs unless `check_target` is false.
    pub target: Option<u64>,
    /// Refuse a `target` that no device's BAR claims (default true).
    pub check_target: bool,
    /// Give up when nothing has happened for this long.
    pub stall_timeout: SimDuration,
}

impl StreamSpec {
    /// Stream 0 of `bytes` bytes in 4 KiB chunks (the paper's example), credits by
    /// peer-to-peer grants, no rate limit, UDP from 10.0.0.1:5000 to 10.0.0.2:5004
    /// with the largest payload.
    pub fn new(producer: &str, consumer: &str, bytes: u64) -> StreamSpec {
        StreamSpec {
            producer: producer.to_string(),
            consumer: consumer.to_string(),
            stream: 0,
            bytes,
            chunk: 4096,
            rate: 0,
            credits: None,
            mode: Credits::Peer,
            uoe: Template::udp(
                [0x02, 0, 0, 0, 0, 0x02],
                [0x02, 0, 0, 0, 0, 0x01],
                [10, 0, 0, 1],
                [10, 0, 0, 2],
                5000,
                5004,
            ),
            target: None,
            check_target: true,
            stall_timeout: SimDuration::from_us(200),
        }
    }
}

impl StreamSpec {
    /// The fewest credits a stream can start with: enough chunks to hold a frame's
    /// payload wherever chunk and frame boundaries fall.
    pub fn least_credits(&self) -> u32 {
        let payload = self.uoe.payload_len().unwrap_or(1) as u64;
        (payload + self.chunk as u64 - 1).div_ceil(self.chunk.max(1) as u64) as u32
    }
}

/// Both devices' counters of a stream, as the host reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct D2dCounters {
    /// Sender state (a [`TxState`] code) and error code.
    pub tx_state: u32,
    /// See `tx_state`.
    pub tx_error: u32,
    /// Bytes the sender wrote.
    pub sent: u64,
    /// Chunks it wrote.
    pub chunks: u64,
    /// Times it waited for credits.
    pub stalls: u64,
    /// Credits it used.
    pub credits_used: u64,
    /// Its credit limit.
    pub credit_limit: u64,
    /// Receiver state (an [`RxState`] code) and error code.
    pub rx_state: u32,
    /// See `rx_state`.
    pub rx_error: u32,
    /// Bytes the receiver took into its Rx Queue.
    pub taken: u64,
    /// Frames it sent.
    pub frames: u64,
    /// Payload bytes it sent in frames.
    pub payload_sent: u64,
    /// Bytes it refused (counted).
    pub dropped: u64,
    /// Bytes in its Rx Queue.
    pub queued: u64,
    /// The credit limit it granted.
    pub granted: u64,
    /// Credit grants the host made (host credits).
    pub host_grants: u64,
    /// When the stream started and when the run ended.
    pub started: SimTime,
    /// See `started`.
    pub ended: SimTime,
}

impl D2dCounters {
    /// Payload bytes per second of simulated time between start and end, Gb/s.
    pub fn gbps(&self) -> f64 {
        let ps = self.ended.saturating_since(self.started).as_ps();
        if ps == 0 {
            0.0
        } else {
            self.payload_sent as f64 * 8.0 * 1000.0 / ps as f64
        }
    }
}

/// Why a stream could not be set up or did not finish.
#[derive(Debug, Clone, PartialEq)]
pub enum D2dError {
    /// The simulator refused an access.
    Sim(SimError),
    /// The node is not a D2D device (its ID register says otherwise).
    NotD2d {
        /// The node.
        node: String,
        /// What its ID register read.
        id: u32,
    },
    /// A setting is out of range.
    Config {
        /// Which.
        what: &'static str,
        /// Its value.
        value: String,
        /// What is allowed.
        allowed: String,
    },
    /// No device's BAR claims the address the sender would write to.
    NoPeer {
        /// The address.
        addr: u64,
    },
    /// The receiver was reset (its stream is idle) while the sender still streamed:
    /// what it refused is in `dropped`.
    PeerReset(Box<D2dCounters>),
    /// The sender waited for credits longer than the stall timeout.
    CreditStarved(Box<D2dCounters>),
    /// A device stopped the stream with an error.
    Device {
        /// The node.
        node: String,
        /// The error.
        error: StreamError,
        /// The counters.
        counters: Box<D2dCounters>,
    },
    /// The sender wrote everything but the receiver never saw some of it: writes to
    /// an address no device claims (the root complex takes them as host memory), or
    /// refused by the fabric (each recorded in `FabricSim::errors`).
    Lost(Box<D2dCounters>),
    /// Nothing happened for the stall timeout, for no reason the counters show.
    Stalled(Box<D2dCounters>),
}

impl From<SimError> for D2dError {
    fn from(e: SimError) -> D2dError {
        D2dError::Sim(e)
    }
}

impl std::fmt::Display for D2dError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            D2dError::Sim(e) => write!(f, "{e}"),
            D2dError::NotD2d { node, id } => {
                write!(
                    f,
                    "{node}: ID register {id:#010x}, not a D2D device ({ID:#010x})"
                )
            }
            D2dError::Config {
                what,
                value,
                allowed,
            } => {
                write!(f, "{what} {value} is not allowed; allowed: {allowed}")
            }
            D2dError::NoPeer { addr } => {
                write!(
                    f,
                    "no device claims address {addr:#x}: the stream would write to nowhere"
                )
            }
            D2dError::PeerReset(c) => write!(
                f,
                "the receiver was reset during the stream: {} bytes sent, {} taken, {} refused",
                c.sent, c.taken, c.dropped
            ),
            D2dError::CreditStarved(c) => write!(
                f,
                "the sender starved for credits: {} of {} credits used, {} bytes sent",
                c.credits_used, c.credit_limit, c.sent
            ),
            D2dError::Device {
                node,
                error,
                counters,
            } => write!(
                f,
                "{node} stopped the stream: {error:?} ({} bytes sent, {} taken, {} refused)",
                counters.sent, counters.taken, counters.dropped
            ),
            D2dError::Lost(c) => write!(
                f,
                "{} bytes written never reached the receiver ({} sent, {} taken, {} refused)",
                c.sent - c.taken - c.dropped,
                c.sent,
                c.taken,
                c.dropped
            ),
            D2dError::Stalled(c) => write!(f, "the stream made no progress: {c:?}"),
        }
    }
}

impl std::error::Error for D2dError {}

/// A stream set up on two devices.
#[derive(Debug)]
pub struct D2dStream {
    spec: StreamSpec,
    ssd: u64,
    nic: u64,
    /// MSI-X data of the two devices' vector for this stream.
    irq_ssd: Option<u32>,
    irq_nic: Option<u32>,
    host_grants: u64,
    started: SimTime,
    irq_seen: usize,
}

fn read64(sim: &mut FabricSim, addr: u64) -> Result<u64, D2dError> {
    match sim.mmio_read(addr, 8)? {
        HostRead::Done { data, .. } if data.len() >= 8 => {
            Ok(u64::from_le_bytes(data[..8].try_into().unwrap_or([0; 8])))
        }
        other => Err(D2dError::Sim(SimError::Param {
            what: "D2D register read",
            value: format!("{addr:#x}: {other:?}"),
            allowed: "a successful completion",
        })),
    }
}

fn write64(sim: &mut FabricSim, addr: u64, v: u64) -> Result<(), D2dError> {
    Ok(sim.mmio_write(addr, &v.to_le_bytes())?)
}

fn msix_data(sim: &FabricSim, node: &str, vector: u8) -> Option<u32> {
    use crate::host::enumerate::Interrupts;
    let f = sim.tree().get(sim.bdf(node)?)?;
    match &f.interrupts {
        Interrupts::MsiX { entries } => entries.get(vector as usize).map(|e| e.1),
        _ => None,
    }
}

impl D2dStream {
    /// Checks both devices and the spec, then programs the stream (not started):
    /// the receiver's chunk, byte count, credit address and offload registers, the
    /// sender's target, rate and granularity, credits and byte count.
    pub fn open(sim: &mut FabricSim, spec: StreamSpec) -> Result<D2dStream, D2dError> {
        let bar = |sim: &FabricSim, n: &str| {
            sim.bar(n, 0)
                .ok_or_else(|| D2dError::Sim(SimError::UnknownNode(n.to_string())))
        };
        let ssd = bar(sim, &spec.producer)?;
        let nic = bar(sim, &spec.consumer)?;
        for (node, base) in [(&spec.producer, ssd), (&spec.consumer, nic)] {
            let v = read64(sim, base + reg::ID)?;
            if v as u32 != ID {
                return Err(D2dError::NotD2d {
                    node: node.clone(),
                    id: v as u32,
                });
            }
            let streams = (v >> 32) as u8;
            if spec.stream >= streams {
                return Err(D2dError::Config {
                    what: "stream",
                    value: spec.stream.to_string(),
                    allowed: format!("0..{streams} ({node} has {streams} streams)"),
                });
            }
        }
        let s = spec.stream;
        let cfg = |what, value: String, allowed: &str| D2dError::Config {
            what,
            value,
            allowed: allowed.to_string(),
        };
        if spec.chunk == 0 || spec.chunk as u64 > pcielab_device::d2d::WINDOW {
            return Err(cfg("chunk", spec.chunk.to_string(), "1..=65536 bytes"));
        }
        if spec.bytes == 0 {
            return Err(cfg("bytes", "0".into(), "at least 1"));
        }
        spec.uoe.payload_len().map_err(|e| {
            cfg(
                "offload registers",
                e.0,
                "IPv4 (IHL 5) over UDP, a payload the MTU holds",
            )
        })?;
        // The receiver first: its chunk decides its base credits.
        let rx = |r| nic + reg::stream(s, r);
        write64(sim, rx(reg::TX_ADDR), CTL_CLEAR)?;
        write64(
            sim,
            rx(reg::RATE_GRAN),
            (spec.chunk as u64) << 32 | spec.rate as u64,
        )?;
        write64(sim, rx(reg::BYTE_COUNT), spec.bytes)?;
        let credit_addr = match spec.mode {
            Credits::Peer => ssd + reg::stream(s, reg::CREDITS),
            Credits::Host => 0,
        };
        write64(sim, rx(reg::CREDIT_ADDR), credit_addr)?;
        for (i, w) in spec.uoe.bytes.chunks_exact(8).enumerate() {
            let v = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
            write64(sim, nic + reg::uoe(s, 8 * i as u64), v)?;
        }
        let rx_addr = read64(sim, rx(reg::RX_ADDR))?;
        let base_credits = read64(sim, rx(reg::CREDITS))? >> 32;
        if base_credits == 0 {
            return Err(cfg(
                "chunk",
                spec.chunk.to_string(),
                "at most the receiver's Rx Queue (it grants no credit otherwise)",
            ));
        }
        // The sender must be able to fill a frame while it waits for credits: with
        // fewer than (payload + chunk − 1) / chunk credits the receiver can hold less
        // than a frame, wait for more data, and grant nothing (a deadlock).
        let payload = spec.uoe.payload_len().unwrap_or(1) as u64;
        let least = (payload + spec.chunk as u64 - 1).div_ceil(spec.chunk as u64);
        let first = spec.credits.map_or(base_credits, |c| c as u64);
        if first < least || first > base_credits {
            return Err(cfg(
                "credits",
                first.to_string(),
                &format!(
                    "{least}..={base_credits}: enough chunks for a {payload}-byte frame, at most the receiver's Rx Queue"
                ),
            ));
        }
        write64(sim, rx(reg::CREDITS), first)?;
        let target = spec.target.unwrap_or(rx_addr);
        if spec.check_target && !claimed(sim, target) {
            return Err(D2dError::NoPeer { addr: target });
        }
        let tx = |r| ssd + reg::stream(s, r);
        write64(sim, tx(reg::TX_ADDR), (target & !7) | CTL_PAUSE)?;
        write64(
            sim,
            tx(reg::RATE_GRAN),
            (spec.chunk as u64) << 32 | spec.rate as u64,
        )?;
        write64(sim, tx(reg::CREDITS), first)?;
        write64(sim, tx(reg::BYTE_COUNT), spec.bytes)?;
        let irq_ssd = msix_data(sim, &spec.producer, s);
        let irq_nic = msix_data(sim, &spec.consumer, s);
        Ok(D2dStream {
            spec,
            ssd,
            nic,
            irq_ssd,
            irq_nic,
            host_grants: 0,
            started: SimTime::ZERO,
            irq_seen: 0,
        })
    }

    /// The spec the stream was opened with.
    pub fn spec(&self) -> &StreamSpec {
        &self.spec
    }

    /// Starts the receiver, then the sender (TX_ADDR bit 0 on each).
    pub fn start(&mut self, sim: &mut FabricSim) -> Result<(), D2dError> {
        let s = self.spec.stream;
        let rx = read64(sim, self.nic + reg::stream(s, reg::TX_ADDR))?;
        write64(sim, self.nic + reg::stream(s, reg::TX_ADDR), rx | CTL_START)?;
        let tx = read64(sim, self.ssd + reg::stream(s, reg::TX_ADDR))? & !7;
        self.started = sim.now();
        self.irq_seen = sim.interrupts().len();
        write64(sim, self.ssd + reg::stream(s, reg::TX_ADDR), tx | CTL_START)?;
        Ok(())
    }

    /// Both devices' counters, read by MMIO.
    pub fn counters(&self, sim: &mut FabricSim) -> Result<D2dCounters, D2dError> {
        let s = self.spec.stream;
        let t = |r| self.ssd + reg::status(s, r);
        let x = |r| self.nic + reg::status(s, r);
        let ts = read64(sim, t(reg::STATE))?;
        let xs = read64(sim, x(reg::STATE))?;
        Ok(D2dCounters {
            tx_state: ts as u32,
            tx_error: (ts >> 32) as u32,
            sent: read64(sim, t(reg::BYTES))?,
            chunks: read64(sim, t(reg::UNITS))?,
            stalls: read64(sim, t(reg::STALLS))?,
            credits_used: read64(sim, t(reg::CREDITS_OUT))?,
            credit_limit: read64(sim, self.ssd + reg::stream(s, reg::CREDITS))? & 0xffff_ffff,
            rx_state: xs as u32,
            rx_error: (xs >> 32) as u32,
            taken: read64(sim, x(reg::BYTES))?,
            frames: read64(sim, x(reg::UNITS))?,
            payload_sent: read64(sim, x(reg::SENT))?,
            dropped: read64(sim, x(reg::DROPPED))?,
            queued: read64(sim, x(reg::QUEUED))?,
            granted: read64(sim, x(reg::CREDITS_OUT))?,
            host_grants: self.host_grants,
            started: self.started,
            ended: sim.now(),
        })
    }

    /// Starts the stream (if not started) and waits, interrupt by interrupt, until
    /// the receiver has sent every byte in frames; grants credits with host credits.
    pub fn run(&mut self, sim: &mut FabricSim) -> Result<D2dCounters, D2dError> {
        if self.started == SimTime::ZERO {
            self.start(sim)?;
        }
        let mut last = (u64::MAX, u64::MAX);
        loop {
            // Every interrupt since the last look (several can arrive at once).
            let n = sim.interrupts().len();
            let mut ours = false;
            for i in self.irq_seen..n {
                let data = sim.interrupts()[i].1.data;
                ours |= Some(data) == self.irq_nic || Some(data) == self.irq_ssd;
            }
            self.irq_seen = n;
            if ours {
                if self.spec.mode == Credits::Host {
                    self.grant(sim)?;
                }
                let c = self.counters(sim)?;
                if let Some(e) = self.verdict(&c, false) {
                    return Err(e);
                }
                if c.rx_state == RxState::Done as u32 && c.tx_state == TxState::Done as u32 {
                    return Ok(c);
                }
                continue;
            }
            if sim.wait_interrupt(self.spec.stall_timeout).is_some() {
                continue;
            }
            let c = self.counters(sim)?;
            if c.rx_state == RxState::Done as u32 && c.tx_state == TxState::Done as u32 {
                return Ok(c);
            }
            // A stream with peer credits raises no interrupt while it runs: quiet is
            // only a stall if the counters stood still too.
            if (c.sent, c.payload_sent) != last {
                last = (c.sent, c.payload_sent);
                continue;
            }
            return Err(self
                .verdict(&c, true)
                .unwrap_or(D2dError::Stalled(Box::new(c))));
        }
    }

    /// Host credits: copies the receiver's grant to the sender.
    pub fn grant(&mut self, sim: &mut FabricSim) -> Result<(), D2dError> {
        let s = self.spec.stream;
        let granted = read64(sim, self.nic + reg::status(s, reg::CREDITS_OUT))?;
        sim.driver_work(1);
        write64(
            sim,
            self.ssd + reg::stream(s, reg::CREDITS),
            granted & 0xffff_ffff,
        )?;
        self.host_grants += 1;
        Ok(())
    }

    /// What the counters say went wrong (`stalled`: nothing happened for the stall
    /// timeout).
    fn verdict(&self, c: &D2dCounters, stalled: bool) -> Option<D2dError> {
        let rx_err = StreamError::from_code(c.rx_error);
        if (c.rx_state == RxState::Idle as u32 || rx_err == Some(StreamError::NotRunning))
            && (c.sent > 0 || c.tx_state != TxState::Done as u32)
        {
            return Some(D2dError::PeerReset(Box::new(*c)));
        }
        if let Some(error) = StreamError::from_code(c.tx_error) {
            return Some(D2dError::Device {
                node: self.spec.producer.clone(),
                error,
                counters: Box::new(*c),
            });
        }
        if let Some(error) = rx_err {
            return Some(D2dError::Device {
                node: self.spec.consumer.clone(),
                error,
                counters: Box::new(*c),
            });
        }
        if stalled && c.tx_state == TxState::Stalled as u32 {
            return Some(D2dError::CreditStarved(Box::new(*c)));
        }
        if stalled && c.tx_state == TxState::Done as u32 && c.sent > c.taken + c.dropped {
            return Some(D2dError::Lost(Box::new(*c)));
        }
        None
    }

    /// Stops the stream on both devices (the sender paused, the receiver's queue
    /// emptied, its refusals counted) and returns the final counters.
    pub fn teardown(self, sim: &mut FabricSim) -> Result<D2dCounters, D2dError> {
        let s = self.spec.stream;
        let tx = read64(sim, self.ssd + reg::stream(s, reg::TX_ADDR))? & !7;
        write64(sim, self.ssd + reg::stream(s, reg::TX_ADDR), tx | CTL_PAUSE)?;
        write64(sim, self.nic + reg::stream(s, reg::TX_ADDR), CTL_CLEAR)?;
        self.counters(sim)
    }
}

/// True if a memory BAR of some enumerated function covers `addr` (an address no
/// device claims goes to the root complex, which takes it as host memory).
fn claimed(sim: &FabricSim, addr: u64) -> bool {
    sim.tree().functions.iter().any(|f| {
        f.bars.iter().any(|b| {
            !matches!(b.bar, pcielab_config::Bar::Io { .. })
                && (b.address..b.address + b.bar.size()).contains(&addr)
        })
    })
}
