//! The host driver of the pcie-bench NIC ([`pcielab_device::nic`]): a host program
//! that sets up the rings, posts packets and buffers, rings doorbells, handles
//! interrupts (or polls, DPDK-style), reads head pointers and recycles descriptors,
//! while the timed simulator runs the NIC and the fabric.
//!
//! What the host does per packet is its [`NicDriverConfig`]: pcie-bench's simple NIC
//! driver rings a doorbell per packet and reads a head pointer per interrupt; the
//! Linux driver of the batched NIC rings a transmit doorbell per packet and reads the
//! transmit head per doorbell, posts free buffers 32 at a time and reads the receive
//! head every 8 packets; DPDK polls the descriptors' done bits, rings the transmit
//! doorbell per 32 packets and takes no interrupts. CPU costs come from the host model
//! (`SimConfig::host`): `driver_ns` per packet, `doorbell_ns` per doorbell and
//! `irq_ns` per interrupt. With an IOMMU the driver maps its rings and buffers for the
//! NIC, and nothing else.
//!
//! ```
//! use pcielab_fabric::{kinds::KindRegistry, topology::Topology};
//! use pcielab_fabric::timed::{FabricSim, SimConfig};
//! use pcielab_fabric::drivers::nic::{NicDriver, NicDriverConfig};
//! let t = Topology::parse(
//!     "[[node]]\nname = \"rc\"\nkind = \"root-complex\"\n\
//!      [[node]]\nname = \"nic\"\nkind = \"nic\"\nrx = \"loopback\"\n\
//!      [[link]]\nup = \"rc.0\"\ndown = \"nic\"\ngen = 3\nwidth = 8\n",
//!     "doc.toml", &KindRegistry::builtin())?;
//! let mut sim = FabricSim::new(&t, &KindRegistry::builtin(), SimConfig::default())?;
//! let mut drv = NicDriver::open(&mut sim, "nic", NicDriverConfig::simple())?;
//! // Send 10 frames of 128 bytes; the MAC loops them back into receive buffers.
//! let r = drv.run(&mut sim, 10, 10)?;
//! assert_eq!((r.tx_packets, r.rx_packets), (10, 10));
//! assert_eq!(drv.received()[3].len(), 124); // the FCS stays on the wire
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use super::{Observer, RunStage};
use crate::host::enumerate::Interrupts;
use crate::timed::{DirCounters, FabricSim, HostRead, HostTicket, SimError};
use pcielab_device::nic::{
    reg, FrameSizes, CMD_EOP, DESC, FCS, QUEUE_BASE, QUEUE_STRIDE, STATUS_DD,
};
use pcielab_sim::{SimDuration, SimTime};
use std::collections::{HashMap, VecDeque};

/// When the driver reads a transmit queue's head register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxHeadRead {
    /// On every transmit interrupt, to learn which descriptors are done (a NIC
    /// without transmit write-back).
    PerInterrupt,
    /// With every transmit doorbell (the Linux driver of pcie-bench's model).
    PerDoorbell,
    /// Never (the done bits of written-back descriptors tell).
    Never,
}

/// What the host does, per packet and per queue.
#[derive(Debug, Clone, PartialEq)]
pub struct NicDriverConfig {
    /// Transmit ring entries per queue.
    pub tx_ring: u32,
    /// Receive ring entries per queue.
    pub rx_ring: u32,
    /// Bytes per packet buffer.
    pub buf_size: u32,
    /// Frames the host sends (FCS included; the host writes `frame − 4` bytes).
    pub frames: FrameSizes,
    /// Packets per transmit doorbell.
    pub tx_doorbell_every: u32,
    /// Free buffers per receive doorbell.
    pub rx_doorbell_every: u32,
    /// When the transmit head is read.
    pub tx_head: TxHeadRead,
    /// Received packets per receive head read (0: never).
    pub rx_head_every: u32,
    /// Poll the rings instead of taking interrupts (DPDK); the driver sets the NIC's
    /// `IRQ_EVERY` to 0.
    pub poll: bool,
    /// How often a polling driver looks at its rings.
    pub poll_interval: SimDuration,
    /// `IRQ_EVERY` to program (`None`: leave the NIC's).
    pub irq_every: Option<u32>,
    /// Keep the bytes of received packets (for [`NicDriver::received`]).
    pub keep_received: bool,
    /// Give up when nothing has happened for this long.
    pub stall_timeout: SimDuration,
}

impl NicDriverConfig {
    /// pcie-bench's simple NIC driver: a doorbell per packet and per buffer, a head
    /// read per interrupt (transmit) and per packet (receive).
    pub fn simple() -> NicDriverConfig {
        NicDriverConfig {
            tx_ring: 256,
            rx_ring: 256,
            buf_size: 2048,
            frames: FrameSizes::Fixed(128),
            tx_doorbell_every: 1,
            rx_doorbell_every: 1,
            tx_head: TxHeadRead::PerInterrupt,
            rx_head_every: 1,
            poll: false,
            poll_interval: SimDuration::from_ns(500),
            irq_every: None,
            keep_received: true,
            stall_timeout: SimDuration::from_us(500),
        }
    }

    /// The Linux driver of the batched NIC in pcie-bench's model: a transmit doorbell
    /// per packet with a head read each, free buffers posted 32 at a time, the
    /// receive head read every 8 packets, an interrupt per 32 packets. Its transmit
    /// ring (240 descriptors, 3,840 bytes) holds six fetches of 40 in one 4 KiB page.
    pub fn linux() -> NicDriverConfig {
        NicDriverConfig {
            tx_ring: 240,
            rx_ring: 256,
            tx_doorbell_every: 1,
            rx_doorbell_every: 32,
            tx_head: TxHeadRead::PerDoorbell,
            rx_head_every: 8,
            ..NicDriverConfig::simple()
        }
    }

    /// DPDK's poll-mode driver on the batched NIC: transmit doorbell per 32 packets,
    /// free buffers 32 at a time, no interrupts, no head reads.
    pub fn dpdk() -> NicDriverConfig {
        NicDriverConfig {
            tx_doorbell_every: 32,
            tx_head: TxHeadRead::Never,
            rx_head_every: 0,
            poll: true,
            irq_every: Some(0),
            ..NicDriverConfig::linux()
        }
    }
}

/// What a run measured.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NicRun {
    /// Packets sent and seen done by the host.
    pub tx_packets: u64,
    /// Packets received by the host.
    pub rx_packets: u64,
    /// Packet bytes sent (FCS not counted).
    pub tx_bytes: u64,
    /// Packet bytes received.
    pub rx_bytes: u64,
    /// Steady-state transmit rate, packets per second (between the host's
    /// observations nearest to a quarter and three quarters of the run).
    pub tx_pps: f64,
    /// Steady-state receive rate, packets per second.
    pub rx_pps: f64,
    /// Steady-state transmit packet data rate, Gb/s.
    pub tx_gbps: f64,
    /// Steady-state receive packet data rate, Gb/s.
    pub rx_gbps: f64,
    /// TLP bytes on the wire host → device during the run (first transmissions,
    /// framing included, DLLPs not counted), on the NIC's link.
    pub down_tlp_bytes: u64,
    /// TLP bytes device → host.
    pub up_tlp_bytes: u64,
    /// Wire bytes host → device, DLLPs and replays included.
    pub down_wire_bytes: u64,
    /// Wire bytes device → host.
    pub up_wire_bytes: u64,
    /// Doorbells rung.
    pub doorbells: u64,
    /// Head register reads.
    pub head_reads: u64,
    /// Interrupts handled.
    pub interrupts: u64,
    /// Descriptors the NIC returned with an error status.
    pub errors: u64,
    /// Simulated time of the run.
    pub elapsed: SimDuration,
}

/// One ring as the host keeps it (transmit or receive).
#[derive(Debug, Default)]
struct HostRing {
    base: u64,
    bufs: u64,
    /// Next descriptor to fill (the tail the host will write).
    next: u32,
    /// Oldest descriptor not yet seen done.
    clean: u32,
    /// Descriptors posted and not yet seen done.
    inflight: u32,
    /// Descriptors filled since the last doorbell.
    unrung: u32,
    /// Receive: packets processed since the last head read.
    since_head: u32,
    /// Packets seen done.
    done: u64,
}

#[derive(Debug, Clone, Copy)]
enum Pending {
    TxHead(u16),
    RxHead(u16),
}

/// The driver: the rings and buffers it owns, and its counters.
#[derive(Debug)]
pub struct NicDriver {
    name: String,
    bar: u64,
    cfg: NicDriverConfig,
    queues: u16,
    tx: Vec<HostRing>,
    rx: Vec<HostRing>,
    /// MSI-X message data → vector.
    vectors: HashMap<u32, u16>,
    irq_seen: usize,
    reads: VecDeque<(HostTicket, Pending)>,
    reads_wanted: VecDeque<Pending>,
    received: Vec<Vec<u8>>,
    sent_frames: u64,
    /// A packet being written (reused).
    scratch: Vec<u8>,
    /// Per queue: a transmit / receive interrupt came (reused).
    irq_flags: Vec<(bool, bool)>,
}

fn ring_bytes(entries: u32) -> u64 {
    entries as u64 * DESC
}

impl NicDriver {
    /// Sets up the NIC `name` of `sim` (enumerated, MSI-X programmed): rings and
    /// buffers in host memory, ring registers, interrupt settings, enable.
    pub fn open(
        sim: &mut FabricSim,
        name: &str,
        cfg: NicDriverConfig,
    ) -> Result<NicDriver, SimError> {
        let bad = |what: &'static str, value: String, allowed: &'static str| SimError::Param {
            what,
            value,
            allowed,
        };
        let bar = sim
            .bar(name, 0)
            .ok_or_else(|| bad("NIC", name.to_string(), "a node of kind nic"))?;
        let bdf = sim
            .bdf(name)
            .ok_or_else(|| bad("NIC", name.to_string(), "a node of kind nic"))?;
        for (what, v) in [("tx_ring", cfg.tx_ring), ("rx_ring", cfg.rx_ring)] {
            if !(2..=65536).contains(&v) {
                return Err(bad(what, v.to_string(), "2..=65536 descriptors"));
            }
        }
        if cfg.buf_size < 64
            || cfg.buf_size > 65535
            || (cfg.frames.max() - FCS) > cfg.buf_size as u64
        {
            return Err(bad(
                "buf_size",
                cfg.buf_size.to_string(),
                "64..=65535 bytes, at least the largest frame less its FCS",
            ));
        }
        if cfg.tx_doorbell_every == 0 || cfg.rx_doorbell_every == 0 {
            return Err(bad("doorbell batch", "0".into(), "at least 1"));
        }
        let queues = match sim.mmio_read(bar + reg::QUEUES, 4)? {
            HostRead::Done { data, .. } => u32::from_le_bytes(data[..4].try_into().unwrap()) as u16,
            other => {
                return Err(bad(
                    "NIC",
                    format!("{name}: QUEUES read gave {other:?}"),
                    "a NIC that answers",
                ))
            }
        };
        let mut vectors = HashMap::new();
        if let Some(f) = sim.tree().get(bdf) {
            if let Interrupts::MsiX { entries } = &f.interrupts {
                for (i, &(_, data)) in entries.iter().enumerate() {
                    vectors.insert(data, i as u16);
                }
            }
        }
        let mut d = NicDriver {
            name: name.to_string(),
            bar,
            queues,
            tx: Vec::new(),
            rx: Vec::new(),
            vectors,
            irq_seen: sim.interrupts().len(),
            reads: VecDeque::new(),
            reads_wanted: VecDeque::new(),
            received: Vec::new(),
            sent_frames: 0,
            scratch: Vec::new(),
            irq_flags: Vec::new(),
            cfg,
        };
        for q in 0..queues {
            let regs = bar + QUEUE_BASE + q as u64 * QUEUE_STRIDE;
            // Rings in pages of their own, buffers after them.
            let tx_base = sim.alloc_dma(ring_bytes(d.cfg.tx_ring));
            let tx_bufs = sim.alloc_dma(d.cfg.tx_ring as u64 * d.cfg.buf_size as u64);
            let rx_base = sim.alloc_dma(ring_bytes(d.cfg.rx_ring));
            let rx_bufs = sim.alloc_dma(d.cfg.rx_ring as u64 * d.cfg.buf_size as u64);
            if sim.config().iommu.is_some() {
                // With an IOMMU the driver maps what the NIC may touch (identity).
                for (a, len) in [
                    (tx_base, ring_bytes(d.cfg.tx_ring)),
                    (tx_bufs, d.cfg.tx_ring as u64 * d.cfg.buf_size as u64),
                    (rx_base, ring_bytes(d.cfg.rx_ring)),
                    (rx_bufs, d.cfg.rx_ring as u64 * d.cfg.buf_size as u64),
                ] {
                    sim.iommu_map(name, a, a, len.div_ceil(4096) * 4096)?;
                }
            }
            sim.host_write(tx_base, &vec![0; ring_bytes(d.cfg.tx_ring) as usize]);
            sim.host_write(rx_base, &vec![0; ring_bytes(d.cfg.rx_ring) as usize]);
            sim.mmio_write(regs + reg::TX_BASE, &tx_base.to_le_bytes())?;
            sim.mmio_write(regs + reg::TX_SIZE, &d.cfg.tx_ring.to_le_bytes())?;
            sim.mmio_write(regs + reg::RX_BASE, &rx_base.to_le_bytes())?;
            sim.mmio_write(regs + reg::RX_SIZE, &d.cfg.rx_ring.to_le_bytes())?;
            d.tx.push(HostRing {
                base: tx_base,
                bufs: tx_bufs,
                ..HostRing::default()
            });
            d.rx.push(HostRing {
                base: rx_base,
                bufs: rx_bufs,
                ..HostRing::default()
            });
        }
        let every = if d.cfg.poll { Some(0) } else { d.cfg.irq_every };
        if let Some(e) = every {
            sim.mmio_write(bar + reg::IRQ_EVERY, &e.to_le_bytes())?;
        }
        sim.mmio_write(bar + reg::CTRL, &1u32.to_le_bytes())?;
        // Let the set-up writes land before anything is counted.
        sim.run_for(SimDuration::from_us(2));
        d.irq_seen = sim.interrupts().len();
        Ok(d)
    }

    /// The packets received so far (with `keep_received`), FCS stripped.
    pub fn received(&self) -> &[Vec<u8>] {
        &self.received
    }

    /// The name of the NIC's node.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// TLP and wire bytes of the NIC's link so far: (down TLP, up TLP, down wire, up
    /// wire); directions are named `"<up>.<port>-><nic>"` and `"<nic>-><up>.<port>"`.
    fn counters(&self, sim: &FabricSim) -> (u64, u64, u64, u64) {
        let (down, up) = (format!("->{}", self.name), format!("{}->", self.name));
        let (mut d, mut u) = (DirCounters::default(), DirCounters::default());
        for (n, c) in sim.counters() {
            if n.ends_with(&down) {
                d = c;
            } else if n.starts_with(&up) {
                u = c;
            }
        }
        (d.tlp_bytes, u.tlp_bytes, d.wire_bytes, u.wire_bytes)
    }

    /// Sends `tx` packets and receives `rx` (posting exactly `rx` buffers), then waits
    /// until the host has seen all of them done and every head read is back.
    pub fn run(&mut self, sim: &mut FabricSim, tx: u64, rx: u64) -> Result<NicRun, SimError> {
        let mut runs = run_together(sim, &mut [(self, tx, rx)])?;
        Ok(runs.pop().unwrap_or_default())
    }

    /// Starts a run: what it has to do, its counters, the link counters at its start.
    fn begin(&mut self, sim: &FabricSim, tx: u64, rx: u64) -> RunState {
        // Each queue pair gets its share, so that with loopback every queue has as many
        // buffers as frames.
        let nq = self.queues as u64;
        let share = |total: u64, q: usize| total / nq + ((q as u64) < total % nq) as u64;
        RunState {
            tx,
            rx,
            t0: sim.now(),
            c0: self.counters(sim),
            r: NicRun::default(),
            tx_quota: (0..nq as usize).map(|q| share(tx, q)).collect(),
            rx_quota: (0..nq as usize).map(|q| share(rx, q)).collect(),
            tx_posted: vec![0; nq as usize],
            rx_posted: vec![0; nq as usize],
            tx_obs: vec![Vec::new(); nq as usize],
            rx_obs: vec![Vec::new(); nq as usize],
            last_progress: sim.now(),
            last_count: 0,
        }
    }

    /// Posts what the rings have room for and issues the head reads it wants.
    fn post(&mut self, sim: &mut FabricSim, st: &mut RunState) -> Result<(), SimError> {
        let r = &mut st.r;
        for q in 0..self.queues as usize {
            let ring = self.cfg.tx_ring;
            let mut filled = 0;
            while st.tx_posted[q] < st.tx_quota[q]
                && self.tx[q].inflight + self.tx[q].unrung < ring - 1
            {
                let frame = self.cfg.frames.nth(self.sent_frames);
                let len = frame - FCS;
                let t = &mut self.tx[q];
                let slot = t.next;
                let buf = t.bufs + slot as u64 * self.cfg.buf_size as u64;
                // The packet: its number first, so that loopback can be checked.
                let p = &mut self.scratch;
                p.clear();
                p.resize(len as usize, 0);
                let n = self.sent_frames.to_le_bytes();
                let k = p.len().min(8);
                p[..k].copy_from_slice(&n[..k]);
                sim.host_write(buf, p);
                let mut desc = [0u8; 16];
                desc[0..8].copy_from_slice(&buf.to_le_bytes());
                desc[8..10].copy_from_slice(&(len as u16).to_le_bytes());
                desc[10] = CMD_EOP;
                let t = &mut self.tx[q];
                sim.host_write(t.base + slot as u64 * DESC, &desc);
                t.next = (slot + 1) % ring;
                t.unrung += 1;
                st.tx_posted[q] += 1;
                self.sent_frames += 1;
                r.tx_bytes += len;
                filled += 1;
                if t.unrung >= self.cfg.tx_doorbell_every || st.tx_posted[q] == st.tx_quota[q] {
                    self.tx_doorbell(sim, q as u16, r)?;
                }
            }
            if filled > 0 {
                sim.driver_work(filled);
            }
            let ring = self.cfg.rx_ring;
            while st.rx_posted[q] < st.rx_quota[q]
                && self.rx[q].inflight + self.rx[q].unrung < ring - 1
            {
                let t = &mut self.rx[q];
                let slot = t.next;
                let buf = t.bufs + slot as u64 * self.cfg.buf_size as u64;
                let mut desc = [0u8; 16];
                desc[0..8].copy_from_slice(&buf.to_le_bytes());
                desc[8..10].copy_from_slice(&(self.cfg.buf_size as u16).to_le_bytes());
                sim.host_write(t.base + slot as u64 * DESC, &desc);
                t.next = (slot + 1) % ring;
                t.unrung += 1;
                st.rx_posted[q] += 1;
                if t.unrung >= self.cfg.rx_doorbell_every || st.rx_posted[q] == st.rx_quota[q] {
                    let tail = t.next;
                    t.inflight += t.unrung;
                    t.unrung = 0;
                    let regs = self.bar + QUEUE_BASE + q as u64 * QUEUE_STRIDE;
                    sim.doorbell(regs + reg::RX_TAIL, &tail.to_le_bytes())?;
                    r.doorbells += 1;
                }
            }
        }
        self.issue_reads(sim)
    }

    /// True when everything is sent, received and every head read is back.
    fn finished(&self, st: &RunState) -> bool {
        st.r.tx_packets >= st.tx
            && st.r.rx_packets >= st.rx
            && self.reads.is_empty()
            && self.reads_wanted.is_empty()
    }

    /// Handles what happened: its interrupts, head reads back, done descriptors.
    fn service(&mut self, sim: &mut FabricSim, st: &mut RunState) -> Result<(), SimError> {
        let host = sim.config().host;
        let r = &mut st.r;
        let n = sim.interrupts().len();
        let mut flags = std::mem::take(&mut self.irq_flags);
        flags.clear();
        flags.resize(self.queues as usize, (false, false));
        for i in self.irq_seen..n {
            let (_, irq) = sim.interrupts()[i];
            // Only this NIC's vectors (another device's interrupts are not ours).
            let Some(&v) = self.vectors.get(&irq.data) else {
                continue;
            };
            let q = (v / 2) as usize;
            if q < self.queues as usize {
                if v % 2 == 0 {
                    flags[q].0 = true;
                } else {
                    flags[q].1 = true;
                }
            }
            r.interrupts += 1;
            if host.irq > SimDuration::ZERO {
                sim.run_for(host.irq);
            }
        }
        self.irq_seen = n;
        // Head reads that came back, in the order they were issued (a later value is
        // never taken before an earlier one).
        while let Some(&(t, what)) = self.reads.front() {
            let Some(done) = sim.mmio_read_poll(t) else {
                break;
            };
            self.reads.pop_front();
            match done {
                // Without write-back the head register is how the host learns which
                // packets are sent; otherwise the done bits tell.
                HostRead::Done { data, .. } => {
                    if let Pending::TxHead(q) = what {
                        if self.cfg.tx_head == TxHeadRead::PerInterrupt {
                            let head = u32::from_le_bytes(data[..4].try_into().unwrap());
                            self.tx_clean_to(q as usize, head, r);
                        }
                    }
                }
                other => {
                    return Err(SimError::Param {
                        what: "NIC head register read",
                        value: format!("{}: {other:?}", self.name),
                        allowed: "a successful completion",
                    })
                }
            }
        }
        for (q, &(tx_irq, rx_irq)) in flags.iter().enumerate() {
            // Transmit: per interrupt, a head read (no write-back) or a look at the
            // done bits; polling looks every time.
            if tx_irq && self.cfg.tx_head == TxHeadRead::PerInterrupt {
                self.reads_wanted.push_back(Pending::TxHead(q as u16));
            }
            if (tx_irq || self.cfg.poll) && self.cfg.tx_head != TxHeadRead::PerInterrupt {
                self.tx_clean_dd(sim, q, r);
            }
            if rx_irq || self.cfg.poll {
                self.rx_clean(sim, q, r);
            }
        }
        self.irq_flags = flags;
        let now = sim.now();
        for q in 0..self.queues as usize {
            let (t, x) = (self.tx[q].done, self.rx[q].done);
            if t != st.tx_obs[q].last().map_or(0, |o| o.1) {
                st.tx_obs[q].push((now, t));
            }
            if x != st.rx_obs[q].last().map_or(0, |o| o.1) {
                st.rx_obs[q].push((now, x));
            }
        }
        let count = r.tx_packets + r.rx_packets;
        if count != st.last_count {
            st.last_count = count;
            st.last_progress = now;
        } else if now.saturating_since(st.last_progress) > self.cfg.stall_timeout
            && self.reads.is_empty()
            && !self.finished(st)
        {
            return Err(self.stalled(sim, st.tx, st.rx, &st.r));
        }
        Ok(())
    }

    /// Ends a run: the link counters and the steady-state rates.
    fn end(&self, sim: &FabricSim, st: RunState) -> NicRun {
        let mut r = st.r;
        let c1 = self.counters(sim);
        r.down_tlp_bytes = c1.0 - st.c0.0;
        r.up_tlp_bytes = c1.1 - st.c0.1;
        r.down_wire_bytes = c1.2 - st.c0.2;
        r.up_wire_bytes = c1.3 - st.c0.3;
        r.elapsed = sim.now().saturating_since(st.t0);
        // The steady state: between a quarter and three quarters of each direction's
        // packets, and where both directions run, only while both do.
        let (mut w0, mut w1) = (SimTime::ZERO, SimTime::MAX);
        for (obs, quota) in [(&st.tx_obs, &st.tx_quota), (&st.rx_obs, &st.rx_quota)] {
            for (o, &total) in obs.iter().zip(quota.iter()) {
                if total > 0 && !o.is_empty() {
                    w0 = w0.max(time_of(o, total / 4));
                    w1 = w1.min(time_of(o, 3 * total / 4));
                }
            }
        }
        let sum = |obs: &[Vec<(SimTime, u64)>], quota: &[u64]| -> f64 {
            obs.iter()
                .zip(quota)
                .map(|(o, &total)| rate(o, total, w0, w1))
                .sum()
        };
        r.tx_pps = sum(&st.tx_obs, &st.tx_quota);
        r.rx_pps = sum(&st.rx_obs, &st.rx_quota);
        let mean = |bytes: u64, n: u64| if n == 0 { 0.0 } else { bytes as f64 / n as f64 };
        r.tx_gbps = r.tx_pps * mean(r.tx_bytes, r.tx_packets) * 8.0 / 1e9;
        r.rx_gbps = r.rx_pps * mean(r.rx_bytes, r.rx_packets) * 8.0 / 1e9;
        r
    }

    fn stalled(&self, sim: &FabricSim, tx: u64, rx: u64, r: &NicRun) -> SimError {
        let dev = sim
            .model(&self.name)
            .and_then(|m| m.report())
            .map(|j| j.to_string())
            .unwrap_or_default();
        SimError::Param {
            what: "NIC run",
            value: format!(
                "{}: stalled at {} of {tx} packets sent and {} of {rx} received (NIC counters: {dev})",
                self.name, r.tx_packets, r.rx_packets
            ),
            allowed: "a NIC that makes progress",
        }
    }

    fn tx_doorbell(&mut self, sim: &mut FabricSim, q: u16, r: &mut NicRun) -> Result<(), SimError> {
        let t = &mut self.tx[q as usize];
        let tail = t.next;
        t.inflight += t.unrung;
        t.unrung = 0;
        let regs = self.bar + QUEUE_BASE + q as u64 * QUEUE_STRIDE;
        sim.doorbell(regs + reg::TX_TAIL, &tail.to_le_bytes())?;
        r.doorbells += 1;
        if self.cfg.tx_head == TxHeadRead::PerDoorbell {
            self.reads_wanted.push_back(Pending::TxHead(q));
        }
        Ok(())
    }

    fn issue_reads(&mut self, sim: &mut FabricSim) -> Result<(), SimError> {
        while let Some(&what) = self.reads_wanted.front() {
            let addr = match what {
                Pending::TxHead(q) => {
                    self.bar + QUEUE_BASE + q as u64 * QUEUE_STRIDE + reg::TX_HEAD
                }
                Pending::RxHead(q) => {
                    self.bar + QUEUE_BASE + q as u64 * QUEUE_STRIDE + reg::RX_HEAD
                }
            };
            if self.reads.len() >= 200 {
                return Ok(()); // the host's read tags are all out: later
            }
            let t = sim.mmio_read_start(addr, 4)?;
            self.reads.push_back((t, what));
            self.reads_wanted.pop_front();
        }
        Ok(())
    }

    /// The transmit head read back as `head`: descriptors before it are done.
    fn tx_clean_to(&mut self, q: usize, head: u32, r: &mut NicRun) {
        let ring = self.cfg.tx_ring;
        let t = &mut self.tx[q];
        if head >= ring {
            return;
        }
        let n = (head + ring - t.clean) % ring;
        if n > t.inflight {
            return; // an old value
        }
        t.clean = head;
        t.inflight -= n;
        t.done += n as u64;
        r.tx_packets += n as u64;
    }

    /// Transmit descriptors written back with their done bit.
    fn tx_clean_dd(&mut self, sim: &mut FabricSim, q: usize, r: &mut NicRun) {
        let ring = self.cfg.tx_ring;
        let mut b = [0u8; 16];
        loop {
            let t = &mut self.tx[q];
            if t.inflight == 0 {
                return;
            }
            let at = t.base + t.clean as u64 * DESC;
            sim.host_read(at, &mut b);
            if b[11] & STATUS_DD == 0 {
                return;
            }
            if b[11] & !STATUS_DD != 0 {
                r.errors += 1;
            }
            sim.host_write(at, &[0u8; 16]);
            let t = &mut self.tx[q];
            t.clean = (t.clean + 1) % ring;
            t.inflight -= 1;
            self.tx[q].done += 1;
            r.tx_packets += 1;
        }
    }

    fn rx_clean(&mut self, sim: &mut FabricSim, q: usize, r: &mut NicRun) {
        let ring = self.cfg.rx_ring;
        let mut b = [0u8; 16];
        let mut n = 0;
        loop {
            let t = &mut self.rx[q];
            if t.inflight == 0 {
                break;
            }
            let at = t.base + t.clean as u64 * DESC;
            sim.host_read(at, &mut b);
            if b[11] & STATUS_DD == 0 {
                break;
            }
            let len = u16::from_le_bytes([b[8], b[9]]) as u64;
            if b[11] & !STATUS_DD != 0 {
                r.errors += 1;
            } else if self.cfg.keep_received {
                let mut p = vec![0u8; len as usize];
                sim.host_read(u64::from_le_bytes(b[0..8].try_into().unwrap()), &mut p);
                self.received.push(p);
            }
            sim.host_write(at, &[0u8; 16]);
            let t = &mut self.rx[q];
            t.clean = (t.clean + 1) % ring;
            t.inflight -= 1;
            t.done += 1;
            r.rx_packets += 1;
            r.rx_bytes += len;
            n += 1;
            if self.cfg.rx_head_every > 0 {
                t.since_head += 1;
                if t.since_head == self.cfg.rx_head_every {
                    t.since_head = 0;
                    self.reads_wanted.push_back(Pending::RxHead(q as u16));
                }
            }
        }
        if n > 0 {
            sim.driver_work(n);
        }
    }
}

/// One driver's run in progress.
#[derive(Debug)]
struct RunState {
    tx: u64,
    rx: u64,
    t0: SimTime,
    c0: (u64, u64, u64, u64),
    r: NicRun,
    tx_quota: Vec<u64>,
    rx_quota: Vec<u64>,
    tx_posted: Vec<u64>,
    rx_posted: Vec<u64>,
    /// Per queue: (time, packets done) whenever the host saw more done. Rates are
    /// taken per queue (each queue's own observations lag it consistently) and added.
    tx_obs: Vec<Vec<(SimTime, u64)>>,
    rx_obs: Vec<Vec<(SimTime, u64)>>,
    last_progress: SimTime,
    last_count: u64,
}

/// Runs several drivers at once (each `(driver, packets to send, packets to
/// receive)`), as one host with several NICs: for NICs cabled to each other, or
/// several NICs sharing a link. Returns each driver's run, in order.
///
/// ```
/// use pcielab_fabric::{kinds::KindRegistry, topology::Topology};
/// use pcielab_fabric::timed::{FabricSim, SimConfig};
/// use pcielab_fabric::drivers::nic::{run_together, NicDriver, NicDriverConfig};
/// // Two NICs on two root ports, their MACs cabled together.
/// let t = Topology::parse(
///     "[[node]]\nname = \"rc\"\nkind = \"root-complex\"\nports = 2\n\
///      [[node]]\nname = \"a\"\nkind = \"nic\"\ncable = \"b\"\n\
///      [[node]]\nname = \"b\"\nkind = \"nic\"\ncable = \"a\"\n\
///      [[link]]\nup = \"rc.0\"\ndown = \"a\"\ngen = 3\nwidth = 8\n\
///      [[link]]\nup = \"rc.1\"\ndown = \"b\"\ngen = 3\nwidth = 8\n",
///     "doc.toml", &KindRegistry::builtin())?;
/// let mut sim = FabricSim::new(&t, &KindRegistry::builtin(), SimConfig::default())?;
/// let mut a = NicDriver::open(&mut sim, "a", NicDriverConfig::simple())?;
/// let mut b = NicDriver::open(&mut sim, "b", NicDriverConfig::simple())?;
/// let runs = run_together(&mut sim, &mut [(&mut a, 20, 0), (&mut b, 0, 20)])?;
/// assert_eq!((runs[0].tx_packets, runs[1].rx_packets), (20, 20));
/// assert_eq!(b.received().len(), 20);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn run_together(
    sim: &mut FabricSim,
    drivers: &mut [(&mut NicDriver, u64, u64)],
) -> Result<Vec<NicRun>, SimError> {
    run_together_observed(sim, drivers, &mut |_, _| Ok(()))
}

/// [`run_together`], calling `observe` with [`RunStage::Step`] each time the drivers
/// have handled what the simulation brought them (an interrupt, a poll, a head
/// read); the caller that set the simulation up calls `Begin` and `End` itself.
pub fn run_together_observed(
    sim: &mut FabricSim,
    drivers: &mut [(&mut NicDriver, u64, u64)],
    observe: &mut Observer<'_>,
) -> Result<Vec<NicRun>, SimError> {
    let mut states: Vec<RunState> = drivers
        .iter_mut()
        .map(|(d, tx, rx)| d.begin(sim, *tx, *rx))
        .collect();
    loop {
        for ((d, ..), st) in drivers.iter_mut().zip(states.iter_mut()) {
            d.post(sim, st)?;
        }
        if drivers
            .iter()
            .zip(&states)
            .all(|((d, ..), st)| d.finished(st))
        {
            break;
        }
        // Run until something needs a host: an interrupt, or the oldest head read of
        // a driver back; polling drivers look at their rings every poll interval.
        let seen = drivers.iter().map(|(d, ..)| d.irq_seen).min().unwrap_or(0);
        let fronts: Vec<HostTicket> = drivers
            .iter()
            .filter_map(|(d, ..)| d.reads.front().map(|r| r.0))
            .collect();
        let poll = drivers
            .iter()
            .filter(|(d, ..)| d.cfg.poll)
            .map(|(d, ..)| d.cfg.poll_interval)
            .min();
        let stall = drivers
            .iter()
            .map(|(d, ..)| d.cfg.stall_timeout)
            .max()
            .unwrap_or(SimDuration::ZERO);
        let limit = sim.now() + poll.unwrap_or(stall);
        let any = sim.run_while(limit, |s| {
            s.interrupts().len() > seen || fronts.iter().any(|&t| s.mmio_read_ready(t))
        });
        if !any && sim.pending_events() == 0 && poll.is_none() {
            let stuck = drivers
                .iter()
                .zip(&states)
                .find(|((d, ..), st)| !d.finished(st))
                .unwrap_or((&drivers[0], &states[0]));
            let ((d, ..), st) = stuck;
            return Err(d.stalled(sim, st.tx, st.rx, &st.r));
        }
        for ((d, ..), st) in drivers.iter_mut().zip(states.iter_mut()) {
            d.service(sim, st)?;
        }
        observe(sim, RunStage::Step).map_err(SimError::Observer)?;
    }
    Ok(drivers
        .iter()
        .zip(states)
        .map(|((d, ..), st)| d.end(sim, st))
        .collect())
}

/// When the host had seen `count` packets (the first observation at or past it).
fn time_of(obs: &[(SimTime, u64)], count: u64) -> SimTime {
    obs.iter()
        .find(|o| o.1 >= count)
        .or(obs.last())
        .map_or(SimTime::ZERO, |o| o.0)
}

/// Packets seen by time `t`, interpolated between the host's observations.
fn count_at(obs: &[(SimTime, u64)], t: SimTime) -> f64 {
    let i = obs.partition_point(|o| o.0 <= t);
    if i == 0 {
        return 0.0;
    }
    let (t0, c0) = obs[i - 1];
    match obs.get(i) {
        None => c0 as f64,
        Some(&(t1, c1)) => {
            let f = (t - t0).as_ps() as f64 / (t1 - t0).as_ps().max(1) as f64;
            c0 as f64 + f * (c1 - c0) as f64
        }
    }
}

/// Packets per second between `w0` and `w1` (the whole run when the window is empty).
fn rate(obs: &[(SimTime, u64)], total: u64, w0: SimTime, w1: SimTime) -> f64 {
    if obs.len() < 2 || total == 0 {
        return 0.0;
    }
    let (a, b) = if w1 > w0 {
        (w0, w1)
    } else {
        (obs[0].0, obs[obs.len() - 1].0)
    };
    let dt = (b - a).as_ps() as f64 * 1e-12;
    if dt <= 0.0 {
        return 0.0;
    }
    (count_at(obs, b) - count_at(obs, a)) / dt
}

/// Which NIC and driver [`measure`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NicVariant {
    /// pcie-bench's simple NIC with its driver.
    Simple,
    /// The batched NIC with the Linux driver.
    Batched,
    /// The batched NIC with DPDK's poll-mode driver.
    Dpdk,
}

impl NicVariant {
    /// The topology keys of the NIC and the driver's settings.
    pub fn setup(self) -> (&'static str, NicDriverConfig) {
        match self {
            NicVariant::Simple => ("simple", NicDriverConfig::simple()),
            NicVariant::Batched => ("batched", NicDriverConfig::linux()),
            NicVariant::Dpdk => ("batched", NicDriverConfig::dpdk()),
        }
    }
}

/// What [`measure`] found for one frame size: the columns of `pcielab model nic`,
/// measured.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct NicPoint {
    /// Frame size, bytes (FCS included).
    pub frame: u64,
    /// Packet data rate, transmit only, Gb/s.
    pub tx_gbps: f64,
    /// Packet data rate, receive only, Gb/s.
    pub rx_gbps: f64,
    /// Packet data rate per direction, both at once (the lower of the two), Gb/s.
    pub bidir_gbps: f64,
    /// PCIe TLP bytes per packet host → device, transmit and receive together.
    pub down_bytes_per_pkt: f64,
    /// PCIe TLP bytes per packet device → host.
    pub up_bytes_per_pkt: f64,
}

/// Packets per [`measure`] run are rounded up to a multiple of this: every batch size
/// of the batched NIC and its drivers divides it, so the bytes per packet are exact.
pub const MEASURE_QUANTUM: u64 = 160;

/// Measures a NIC on a link from the root complex (`link`: the link's keys, e.g.
/// `"gen = 3\nwidth = 8"`) with the MAC taking frames as fast as PCIe brings them:
/// `packets` packets of `frame` bytes transmit only, receive only, and both ways (MAC
/// loopback, so both directions carry the same packet rate).
///
/// ```
/// use pcielab_fabric::drivers::nic::{measure, NicVariant};
/// use pcielab_fabric::timed::SimConfig;
/// let cfg = SimConfig { mps: 256, mrrs: 512, ..SimConfig::default() };
/// let p = measure("gen = 3\nwidth = 8", &cfg, NicVariant::Dpdk, 1518, 320)?;
/// assert!(p.tx_gbps > 50.0 && p.tx_gbps < 63.0);
/// assert_eq!(p.down_bytes_per_pkt, 1691.0); // as `pcielab model nic --mode spec` says
/// # Ok::<(), pcielab_fabric::timed::SimError>(())
/// ```
pub fn measure(
    link: &str,
    cfg: &crate::timed::SimConfig,
    variant: NicVariant,
    frame: u64,
    packets: u64,
) -> Result<NicPoint, SimError> {
    measure_observed(link, cfg, variant, frame, packets, &mut |_, _| Ok(()))
}

/// The topology of [`measure`]: the root complex and one NIC on a link of `link`'s keys.
fn measure_topology(link: &str) -> Result<crate::topology::Topology, SimError> {
    let text = format!(
        "[[node]]\nname = \"rc\"\nkind = \"root-complex\"\n\
         [[node]]\nname = \"nic\"\nkind = \"nic\"\n\
         [[link]]\nup = \"rc.0\"\ndown = \"nic\"\n{link}\n"
    );
    let reg = crate::kinds::KindRegistry::builtin();
    crate::topology::Topology::parse(&text, "nic-measure.toml", &reg).map_err(|e| SimError::Param {
        what: "NIC measurement topology",
        value: e.to_string(),
        allowed: "valid link keys",
    })
}

/// [`measure`] on the NIC node `nic` of a topology of one's own (switches, other
/// devices, any links): its `model`, MAC and receive source are set for each run, a
/// cable to another NIC is taken off (it runs alone), its other keys are kept.
pub fn measure_in(
    topo: &crate::topology::Topology,
    nic: &str,
    cfg: &crate::timed::SimConfig,
    variant: NicVariant,
    frame: u64,
    packets: u64,
) -> Result<NicPoint, SimError> {
    measure_in_observed(topo, nic, cfg, variant, frame, packets, &mut |_, _| Ok(()))
}

/// [`measure`], with an observer of its three runs (see [`Observer`]): each begins
/// with [`RunStage::Begin`] (once the driver has set the NIC up), steps as
/// [`run_together_observed`]'s do, and ends with [`RunStage::End`].
pub fn measure_observed(
    link: &str,
    cfg: &crate::timed::SimConfig,
    variant: NicVariant,
    frame: u64,
    packets: u64,
    observe: &mut Observer<'_>,
) -> Result<NicPoint, SimError> {
    let topo = measure_topology(link)?;
    measure_in_observed(&topo, "nic", cfg, variant, frame, packets, observe)
}

/// [`measure_in`], with an observer of its three runs (see [`measure_observed`]).
pub fn measure_in_observed(
    topo: &crate::topology::Topology,
    nic: &str,
    cfg: &crate::timed::SimConfig,
    variant: NicVariant,
    frame: u64,
    packets: u64,
    observe: &mut Observer<'_>,
) -> Result<NicPoint, SimError> {
    use crate::kinds::ParamValue;
    let packets = packets.max(1).div_ceil(MEASURE_QUANTUM) * MEASURE_QUANTUM;
    let (model, mut drv) = variant.setup();
    drv.frames = FrameSizes::parse(&frame.to_string()).map_err(|_| SimError::Param {
        what: "frame size",
        value: frame.to_string(),
        allowed: "64..=9018 bytes",
    })?;
    drv.buf_size = drv.buf_size.max((frame - FCS) as u32);
    drv.keep_received = false;
    let Some(at) = topo
        .nodes
        .iter()
        .position(|n| n.name == nic && n.kind == "nic")
    else {
        return Err(SimError::Param {
            what: "NIC node",
            value: nic.to_string(),
            allowed: "a node of kind nic in the topology",
        });
    };
    let name = match variant {
        NicVariant::Simple => "simple NIC",
        NicVariant::Batched => "batched NIC, Linux driver",
        NicVariant::Dpdk => "batched NIC, DPDK",
    };
    let mut one = |tx: u64, rx: u64| -> Result<NicRun, SimError> {
        let mut t = topo.clone();
        let p = &mut t.nodes[at].params;
        let s = |v: &str| ParamValue::Str(v.to_string());
        let both = tx > 0 && rx > 0;
        p.set("model", s(model), 0);
        p.set("eth_gbps", ParamValue::Int(0), 0);
        p.set("rx", s(if both { "loopback" } else { "saturate" }), 0);
        p.set("frame", s(&frame.to_string()), 0);
        if both {
            p.set("rx_fifo", ParamValue::Int(16 * 1024), 0);
        }
        // The NIC alone: a cable would send every frame to the NIC at its other end
        // too. Both ends go (a cable names its peer, which names it back).
        if let Some(peer) = p.str("cable").filter(|c| !c.is_empty()).map(str::to_string) {
            p.set("cable", s(""), 0);
            if let Some(o) = t.nodes.iter_mut().find(|n| n.name == peer) {
                o.params.set("cable", s(""), 0);
            }
        }
        let reg = crate::kinds::KindRegistry::builtin();
        let mut sim = FabricSim::new(&t, &reg, cfg.clone())?;
        let mut d = NicDriver::open(&mut sim, nic, drv.clone())?;
        let what = match (tx, rx) {
            (_, 0) => "transmit only",
            (0, _) => "receive only",
            _ => "both ways (MAC loopback)",
        };
        let label = format!("{name}, {frame} B frames, {packets} packets {what}");
        observe(&mut sim, RunStage::Begin(&label)).map_err(SimError::Observer)?;
        let r = run_together_observed(&mut sim, &mut [(&mut d, tx, rx)], observe)?;
        observe(&mut sim, RunStage::End).map_err(SimError::Observer)?;
        Ok(r.into_iter().next().unwrap_or_default())
    };
    let tx = one(packets, 0)?;
    let rx = one(0, packets)?;
    let both = one(packets, packets)?;
    Ok(NicPoint {
        frame,
        tx_gbps: tx.tx_gbps,
        rx_gbps: rx.rx_gbps,
        bidir_gbps: both.tx_gbps.min(both.rx_gbps),
        down_bytes_per_pkt: both.down_tlp_bytes as f64 / packets as f64,
        up_bytes_per_pkt: both.up_tlp_bytes as f64 / packets as f64,
    })
}
