//! A host driver for the NetTLP simple-nic device, run on the software adapter host, so
//! the upstream simple-nic device (or any device with its BAR4 layout) can be driven
//! without scripting the control socket by hand.
//!
//! The simple-nic model (from "PCIe performance for end host networking", SIGCOMM 2018,
//! as NetTLP's simple-nic implements it) has a packed BAR4 of registers and rings of
//! 16-byte descriptors in host memory:
//!
//! ```text
//!   BAR4 + 0   u64 tx_desc_base   host address of the TX descriptor ring
//!   BAR4 + 8   u64 rx_desc_base   host address of the RX descriptor ring
//!   BAR4 + 16  u32 tx_desc_idx    written by the host: "send the packet of descriptor idx"
//!   BAR4 + 20  u32 rx_desc_idx    written by the host: "descriptor idx is a free buffer"
//!   BAR4 + 24  u32 enabled        1 when the driver has set the device up
//!   descriptor: u64 addr, u64 length (little endian)
//! ```
//!
//! TX: the driver puts the packet and its descriptor in host memory and writes the index;
//! the device DMA-reads the descriptor and the packet, sends it, and raises the TX
//! interrupt (MSI-X, vector 0 by default). RX: the driver posts a free buffer's
//! descriptor by writing its index; the device DMA-writes a packet into the buffer,
//! writes the descriptor back with the packet's length and raises the RX interrupt
//! (vector 1). The upstream device keeps one RX buffer at a time, so the driver posts one
//! and posts the next after each packet.
//!
//! ```no_run
//! use pcielab_nettlp::adapter::{Adapter, AdapterConfig};
//! use pcielab_nettlp::snic::{SnicConfig, SnicDriver};
//! use std::time::Duration;
//! let a = Adapter::start(AdapterConfig::default())?;
//! let mut nic = SnicDriver::open(&a, SnicConfig::default())?;
//! nic.send(b"a frame")?;                       // returns after the TX interrupt
//! if let Some(p) = nic.recv(Duration::from_secs(1))? {
//!     println!("received {} bytes", p.len());
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::adapter::{Adapter, Interrupt, MmioError};
use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

/// BAR4 offset of `tx_desc_base`.
pub const TX_DESC_BASE: u64 = 0;
/// BAR4 offset of `rx_desc_base`.
pub const RX_DESC_BASE: u64 = 8;
/// BAR4 offset of `tx_desc_idx`.
pub const TX_DESC_IDX: u64 = 16;
/// BAR4 offset of `rx_desc_idx`.
pub const RX_DESC_IDX: u64 = 20;
/// BAR4 offset of `enabled`.
pub const ENABLED: u64 = 24;
/// Bytes of one descriptor (`addr`, `length`).
pub const DESC_LEN: u64 = 16;

/// Where the driver keeps its rings and buffers, and which interrupts it waits for.
#[derive(Debug, Clone)]
pub struct SnicConfig {
    /// Host memory the driver owns: the two rings, then the TX and RX buffers.
    pub base: u64,
    /// Descriptors per ring.
    pub entries: u32,
    /// Bytes per packet buffer (the largest packet).
    pub buf_size: u32,
    /// MSI-X vector of the TX interrupt.
    pub tx_vector: usize,
    /// MSI-X vector of the RX interrupt.
    pub rx_vector: usize,
    /// How long `send` waits for the TX interrupt.
    pub timeout: Duration,
}

impl Default for SnicConfig {
    fn default() -> Self {
        SnicConfig {
            base: 0x0800_0000,
            entries: 64,
            buf_size: 2048,
            tx_vector: 0,
            rx_vector: 1,
            timeout: Duration::from_secs(1),
        }
    }
}

impl SnicConfig {
    /// Checks the layout against the adapter's host memory: non-zero sizes, and the
    /// rings and buffers (from `base` on) inside one memory window.
    /// [`SnicDriver::open`] checks this too; a caller may check first, before it waits
    /// for the device.
    ///
    /// ```
    /// use pcielab_nettlp::memory::{HostMemory, Window};
    /// use pcielab_nettlp::snic::SnicConfig;
    /// let mem = HostMemory::new(vec![Window { base: 0, size: 1 << 30 }]);
    /// assert!(SnicConfig::default().check(&mem).is_ok());
    /// let far = SnicConfig { base: u64::MAX - 0xff, ..SnicConfig::default() };
    /// assert!(far.check(&mem).is_err());
    /// ```
    pub fn check(&self, mem: &crate::memory::HostMemory) -> Result<(), SnicError> {
        if self.entries == 0 || self.buf_size == 0 || self.buf_size > 1 << 20 {
            return Err(SnicError::Config(format!(
                "entries {} and buf_size {} must be non-zero (buf_size at most 1 MiB)",
                self.entries, self.buf_size
            )));
        }
        // Two rings of 16-byte descriptors, then (from the next 4 KiB page) a TX and an
        // RX buffer per entry; past 2^64 it cannot lie in memory.
        let rings = 2 * DESC_LEN * self.entries as u64;
        let bufs = 2 * self.entries as u64 * self.buf_size as u64;
        let end = self
            .base
            .checked_add(rings)
            .and_then(|e| e.checked_add(0xfff))
            .map(|e| e & !0xfff)
            .and_then(|e| e.checked_add(bufs));
        match end {
            Some(end) if mem.contains(self.base, end - self.base) => Ok(()),
            Some(end) => Err(SnicError::Config(format!(
                "{:#x}..{end:#x} (the rings and buffers) is outside the adapter's host memory windows",
                self.base
            ))),
            None => Err(SnicError::Config(format!(
                "the rings and buffers of {} entries of {} bytes from {:#x} run past 2^64",
                self.entries, self.buf_size, self.base
            ))),
        }
    }
}

/// Why a simple-nic operation failed.
#[derive(Debug)]
pub enum SnicError {
    /// A register access to BAR4 failed.
    Mmio(MmioError),
    /// The device raised no interrupt in time.
    Timeout {
        /// What was waited for.
        what: &'static str,
        /// How long.
        waited: Duration,
    },
    /// The packet does not fit a buffer, or is empty (`len` 0).
    TooLong {
        /// Its length.
        len: usize,
        /// The buffer size.
        max: u32,
    },
    /// The device wrote back a descriptor whose length exceeds the buffer.
    BadDescriptor {
        /// Ring index.
        index: u32,
        /// Length written back.
        len: u64,
    },
    /// The configuration is unusable.
    Config(String),
}

impl fmt::Display for SnicError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnicError::Mmio(e) => write!(f, "simple-nic register access: {e}"),
            SnicError::Timeout { what, waited } => write!(
                f,
                "simple-nic: no {what} interrupt within {} ms; is the device running?",
                waited.as_millis()
            ),
            SnicError::TooLong { len: 0, .. } => {
                write!(f, "simple-nic: an empty packet (a frame has at least 1 byte)")
            }
            SnicError::TooLong { len, max } => {
                write!(f, "simple-nic: a {len}-byte packet does not fit a {max}-byte buffer")
            }
            SnicError::BadDescriptor { index, len } => write!(
                f,
                "simple-nic: RX descriptor {index} written back with length {len}, more than the buffer"
            ),
            SnicError::Config(m) => write!(f, "simple-nic configuration: {m}"),
        }
    }
}

impl std::error::Error for SnicError {}

impl From<MmioError> for SnicError {
    fn from(e: MmioError) -> Self {
        SnicError::Mmio(e)
    }
}

/// Counters of a driver.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnicStats {
    /// Packets sent (TX interrupt seen).
    pub tx_packets: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Interrupts seen for other vectors (kept for their waiters, the oldest dropped
    /// beyond 1024).
    pub other_irqs: u64,
}

/// The host side of a simple-nic device behind an [`Adapter`].
#[derive(Debug)]
pub struct SnicDriver<'a> {
    adapter: &'a Adapter,
    cfg: SnicConfig,
    tx_idx: u32,
    rx_idx: u32,
    rx_posted: bool,
    pending: VecDeque<Interrupt>,
    stats: SnicStats,
}

impl<'a> SnicDriver<'a> {
    /// Lays out the rings and buffers at `cfg.base`, and writes the ring addresses and
    /// `enabled = 1` to the device's BAR4.
    pub fn open(adapter: &'a Adapter, cfg: SnicConfig) -> Result<SnicDriver<'a>, SnicError> {
        cfg.check(adapter.memory())?;
        let d = SnicDriver {
            adapter,
            cfg,
            tx_idx: 0,
            rx_idx: 0,
            rx_posted: false,
            pending: VecDeque::new(),
            stats: SnicStats::default(),
        };
        let zero = vec![0u8; (2 * DESC_LEN * d.cfg.entries as u64) as usize];
        adapter.memory().write(d.cfg.base, &zero);
        adapter.mmio_write(TX_DESC_BASE, &d.tx_ring().to_le_bytes())?;
        adapter.mmio_write(RX_DESC_BASE, &d.rx_ring().to_le_bytes())?;
        adapter.mmio_write(ENABLED, &1u32.to_le_bytes())?;
        Ok(d)
    }

    fn tx_ring(&self) -> u64 {
        self.cfg.base
    }
    fn rx_ring(&self) -> u64 {
        self.cfg.base + DESC_LEN * self.cfg.entries as u64
    }
    /// TX buffer `i` (page-aligned area after the rings).
    fn tx_buf(&self, i: u32) -> u64 {
        let start = (self.cfg.base + 2 * DESC_LEN * self.cfg.entries as u64 + 0xfff) & !0xfff;
        start + i as u64 * self.cfg.buf_size as u64
    }
    fn rx_buf(&self, i: u32) -> u64 {
        self.tx_buf(self.cfg.entries) + i as u64 * self.cfg.buf_size as u64
    }

    /// The counters.
    pub fn stats(&self) -> SnicStats {
        self.stats
    }

    fn write_desc(&self, at: u64, addr: u64, len: u64) {
        let mut d = [0u8; DESC_LEN as usize];
        d[..8].copy_from_slice(&addr.to_le_bytes());
        d[8..].copy_from_slice(&len.to_le_bytes());
        self.adapter.memory().write(at, &d);
    }

    /// Waits for an interrupt of `vector`, keeping the others for later.
    fn wait_vector(&mut self, vector: usize, timeout: Duration) -> bool {
        if let Some(i) = self.pending.iter().position(|x| x.vector == Some(vector)) {
            self.pending.remove(i);
            return true;
        }
        let end = Instant::now() + timeout;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let Some(irq) = self.adapter.wait_interrupt(left) else {
                return false;
            };
            if irq.vector == Some(vector) {
                return true;
            }
            self.stats.other_irqs += 1;
            if self.pending.len() >= 1024 {
                self.pending.pop_front();
            }
            self.pending.push_back(irq);
        }
    }

    /// Sends one packet: buffer and descriptor in host memory, the index to
    /// `tx_desc_idx`, then waits for the TX interrupt.
    pub fn send(&mut self, pkt: &[u8]) -> Result<(), SnicError> {
        if pkt.is_empty() || pkt.len() > self.cfg.buf_size as usize {
            return Err(SnicError::TooLong {
                len: pkt.len(),
                max: self.cfg.buf_size,
            });
        }
        let i = self.tx_idx % self.cfg.entries;
        let buf = self.tx_buf(i);
        self.adapter.memory().write(buf, pkt);
        self.write_desc(self.tx_ring() + DESC_LEN * i as u64, buf, pkt.len() as u64);
        self.adapter.mmio_write(TX_DESC_IDX, &i.to_le_bytes())?;
        self.tx_idx = self.tx_idx.wrapping_add(1);
        if !self.wait_vector(self.cfg.tx_vector, self.cfg.timeout) {
            return Err(SnicError::Timeout {
                what: "TX",
                waited: self.cfg.timeout,
            });
        }
        self.stats.tx_packets += 1;
        Ok(())
    }

    /// Posts the next free RX buffer to the device (`recv` does it when needed).
    pub fn post_rx(&mut self) -> Result<(), SnicError> {
        let i = self.rx_idx % self.cfg.entries;
        self.write_desc(
            self.rx_ring() + DESC_LEN * i as u64,
            self.rx_buf(i),
            self.cfg.buf_size as u64,
        );
        self.adapter.mmio_write(RX_DESC_IDX, &i.to_le_bytes())?;
        self.rx_posted = true;
        Ok(())
    }

    /// Waits up to `timeout` for a received packet (`None` when none came); then posts
    /// the next buffer, so the device can take the next packet.
    pub fn recv(&mut self, timeout: Duration) -> Result<Option<Vec<u8>>, SnicError> {
        if !self.rx_posted {
            self.post_rx()?;
        }
        if !self.wait_vector(self.cfg.rx_vector, timeout) {
            return Ok(None);
        }
        let i = self.rx_idx % self.cfg.entries;
        let mut d = [0u8; DESC_LEN as usize];
        self.adapter
            .memory()
            .read(self.rx_ring() + DESC_LEN * i as u64, &mut d);
        let mut len = [0u8; 8];
        len.copy_from_slice(&d[8..]);
        let len = u64::from_le_bytes(len);
        if len > self.cfg.buf_size as u64 {
            return Err(SnicError::BadDescriptor { index: i, len });
        }
        let mut pkt = vec![0u8; len as usize];
        self.adapter.memory().read(self.rx_buf(i), &mut pkt);
        self.rx_idx = self.rx_idx.wrapping_add(1);
        self.stats.rx_packets += 1;
        self.post_rx()?;
        Ok(Some(pkt))
    }
}
