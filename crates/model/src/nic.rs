//! NIC models: the PCIe traffic a NIC generates per packet, and the packet rate and
//! bandwidth PCIe then allows, against the Ethernet line rate.
//!
//! Two models, both following pcie-bench (seed 001, §3 and its public model):
//!
//! * [`NicKind::Simple`] — every packet costs, on transmit: a doorbell (tail pointer)
//!   write by the host, a 16-byte descriptor read, the packet read, an MSI, a head pointer
//!   read by the host; on receive: a doorbell write, a descriptor read, the packet write,
//!   a 16-byte descriptor write-back, an MSI, a head pointer read.
//! * [`NicKind::Batched`] — an Intel 82599-style NIC: transmit descriptors fetched in
//!   batches (40), write-backs batched (8), free-list doorbells batched (32), head pointer
//!   reads every 8 received packets, interrupt moderation (one MSI per 32 packets); in
//!   DPDK polling mode the host rings the transmit doorbell once per 32 packets and there
//!   are no interrupts and no head pointer reads.
//!
//! Directions are from the device: "down" is host → device, "up" is device → host.
//! NIC transmit moves packet data down (by DMA reads), NIC receive moves it up (by DMA
//! writes).
//!
//! In [`Mode::Spec`] the MMIO requests (doorbells and head pointer reads to the NIC's
//! register BAR, MSIs to 0xfee0_0000) have 3DW headers: a register BAR is
//! non-prefetchable, so Linux places it below 4 GiB, and x86's MSI window is there too.
//! Compat mode counts them with the configured (64-bit) header, as the published model
//! does.
//!
//! In [`Mode::Compat`] the published model is reproduced including one slip: on the
//! receive path its packet-write line assigns instead of adding, so the receive path's
//! descriptor read request (one MRd header per packet) is dropped from the upstream
//! bytes. Spec mode counts it.

use crate::bw::{solve, Model};
use crate::config::{AddrWidth, Mode};
use crate::error::{Error, Result};
use crate::eth::{Ethernet, FCS};

/// Descriptor size, bytes (16 for both models, as in the 82599's advanced descriptors).
pub const DESC_BYTES: u64 = 16;
/// Doorbell / head pointer register size, bytes.
pub const PTR_BYTES: u64 = 4;
/// MSI message data, bytes.
pub const MSI_BYTES: u64 = 4;
/// Largest batch (least common multiple of the batch sizes) the batched NIC accounts.
pub const MAX_BATCH: u64 = 1 << 20;
/// Largest frame the NIC models accept, bytes (far above any jumbo frame).
pub const MAX_FRAME: u64 = 1 << 20;

/// Batching parameters of the descriptor-batching NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Batching {
    /// Transmit descriptors fetched per descriptor read (82599: up to 40).
    pub tx_desc_fetch: u32,
    /// Transmit descriptors written back per write-back (Linux WTHRESH: 8).
    pub tx_writeback: u32,
    /// Packets per host transmit doorbell (Linux: 1; DPDK: 32).
    pub host_tx_batch: u32,
    /// Free-list buffers per host receive doorbell (32).
    pub host_free_batch: u32,
    /// Received packets per host head pointer read (8).
    pub host_rx_batch: u32,
    /// Packets per interrupt (interrupt moderation); 0 means no interrupts.
    pub irq_every: u32,
    /// DPDK polling mode: no interrupts and no head pointer reads; the host checks the
    /// descriptors' done bits instead.
    pub dpdk: bool,
}

impl Batching {
    /// The published model's Linux ixgbe settings.
    pub const LINUX: Batching = Batching {
        tx_desc_fetch: 40,
        tx_writeback: 8,
        host_tx_batch: 1,
        host_free_batch: 32,
        host_rx_batch: 8,
        irq_every: 32,
        dpdk: false,
    };
    /// The published model's DPDK poll-mode settings.
    pub const DPDK: Batching = Batching {
        host_tx_batch: 32,
        irq_every: 0,
        dpdk: true,
        ..Batching::LINUX
    };

    fn check(&self) -> Result<()> {
        for (what, v) in [
            ("transmit descriptor fetch batch", self.tx_desc_fetch),
            ("transmit write-back batch", self.tx_writeback),
            ("host transmit batch", self.host_tx_batch),
            ("host free-list batch", self.host_free_batch),
            ("host receive batch", self.host_rx_batch),
        ] {
            if v == 0 {
                return Err(Error::Zero { what });
            }
        }
        Ok(())
    }
}

/// Which NIC to model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NicKind {
    /// pcie-bench's simple NIC: every step for every packet.
    Simple,
    /// Descriptor-batching NIC.
    Batched(Batching),
}

/// One point of the NIC curves, for frames of `frame` bytes (FCS included; the NIC
/// strips the FCS, so `frame − 4` bytes cross PCIe per packet).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct NicPoint {
    /// Ethernet frame size, bytes.
    pub frame: u64,
    /// Gb/s of packet data the host must move to sustain line rate.
    pub eth_gbps: f64,
    /// Packets per second at line rate, millions.
    pub eth_mpps: f64,
    /// Packet data bandwidth PCIe allows for transmit only, Gb/s.
    pub tx_gbps: f64,
    /// Packet data bandwidth PCIe allows for receive only, Gb/s.
    pub rx_gbps: f64,
    /// Packet data bandwidth per direction when transmitting and receiving at once, Gb/s.
    pub bidir_gbps: f64,
    /// PCIe link bytes per packet host → device, transmit and receive path together.
    pub down_bytes_per_pkt: f64,
    /// PCIe link bytes per packet device → host, transmit and receive path together.
    pub up_bytes_per_pkt: f64,
}

impl NicPoint {
    /// Packets per second (millions) for a data rate of `gbps` at this frame size.
    pub fn mpps(&self, gbps: f64) -> f64 {
        gbps * 1e3 / (self.frame.saturating_sub(FCS).max(1) * 8) as f64
    }
}

/// Link bytes per batch of packets, by path (transmit/receive) and by direction.
#[derive(Debug, Clone, Copy, Default)]
struct Paths {
    tx_down: u64,
    tx_up: u64,
    rx_down: u64,
    rx_up: u64,
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}
fn lcm(a: u64, b: u64) -> u64 {
    a / gcd(a, b) * b
}

/// Evaluates a NIC model for frames of `frame` bytes (64..=1518 for standard Ethernet;
/// any size ≥ 5 is accepted) on the PCIe configuration of `model`.
///
/// ```
/// use pcielab_model::{nic, eth::Ethernet, Model, PcieConfig};
/// use pcielab_wire::Generation;
/// let m = Model::new(PcieConfig::new(Generation::Gen3, 8)?)?;
/// let p = nic::evaluate(&m, nic::NicKind::Simple, Ethernet::new(40)?, 1518)?;
/// assert!(p.bidir_gbps > p.eth_gbps * 0.9);
/// # Ok::<(), pcielab_model::Error>(())
/// ```
pub fn evaluate(model: &Model, kind: NicKind, eth: Ethernet, frame: u64) -> Result<NicPoint> {
    if frame <= FCS || frame > MAX_FRAME {
        return Err(Error::Invalid {
            what: "frame size",
            value: frame,
            allowed: "5..=1048576 bytes (64..=1518 for standard Ethernet)",
        });
    }
    let mode = model.config().mode;
    let pkt = frame - FCS;
    let wr = |n: u64| model.write_traffic(0, n).req_bytes;
    let rd = |n: u64| {
        let t = model.read_traffic(0, n);
        (t.req_bytes, t.cpl_bytes)
    };
    // MMIO: doorbells and head pointer reads go to the NIC's register BAR, MSIs to
    // the interrupt window at 0xfee0_0000 (x86). Spec mode puts both below 4 GiB, as
    // Linux places a non-prefetchable register BAR, so their requests have 3DW
    // headers; compat mode counts every request with the configured header.
    let mmio_saving = if mode == Mode::Spec && model.config().addr == AddrWidth::Bits64 {
        4
    } else {
        0
    };
    let (ptr_req, ptr_cpl) = rd(PTR_BYTES);
    let ptr_req = ptr_req - mmio_saving;
    let mmio_wr = |n: u64| wr(n) - mmio_saving;
    let (desc_req, desc_cpl) = rd(DESC_BYTES);
    let (data_req, data_cpl) = rd(pkt);
    let mut p = Paths::default();
    let batch: u64 = match kind {
        NicKind::Simple => {
            // Transmit: doorbell, descriptor read, packet read, MSI, head pointer read.
            p.tx_down += mmio_wr(PTR_BYTES) + desc_cpl + data_cpl + ptr_req;
            p.tx_up += desc_req + data_req + mmio_wr(MSI_BYTES) + ptr_cpl;
            // Receive: doorbell, descriptor read, packet write, write-back, MSI, head read.
            p.rx_down += mmio_wr(PTR_BYTES) + desc_cpl + ptr_req;
            p.rx_up += desc_req;
            if mode == Mode::Compat {
                p.rx_up = 0; // the published model's "=" on the packet write
            }
            p.rx_up += wr(pkt) + wr(DESC_BYTES) + mmio_wr(MSI_BYTES) + ptr_cpl;
            1
        }
        NicKind::Batched(b) => {
            b.check()?;
            // Account one batch of lcm(all batch sizes) packets in whole TLPs, as the
            // published model does (160 packets for its settings).
            let mut n = 1u64;
            for v in [
                b.tx_desc_fetch,
                b.tx_writeback,
                b.host_tx_batch,
                b.host_free_batch,
                b.host_rx_batch,
                b.irq_every,
            ] {
                if v > 0 {
                    n = lcm(n, v as u64);
                }
                if n > MAX_BATCH {
                    return Err(Error::Invalid {
                        what: "least common multiple of the NIC batch sizes",
                        value: n,
                        allowed: "at most 1048576",
                    });
                }
            }
            let per = |every: u32| if every == 0 { 0 } else { n / every as u64 };
            // Transmit path.
            let (fetch_req, fetch_cpl) = rd(DESC_BYTES * b.tx_desc_fetch as u64);
            p.tx_down += mmio_wr(PTR_BYTES) * per(b.host_tx_batch);
            p.tx_up += fetch_req * per(b.tx_desc_fetch);
            p.tx_down += fetch_cpl * per(b.tx_desc_fetch);
            p.tx_up += data_req * n;
            p.tx_down += data_cpl * n;
            p.tx_up += wr(DESC_BYTES * b.tx_writeback as u64) * per(b.tx_writeback);
            if !b.dpdk {
                p.tx_up += mmio_wr(MSI_BYTES) * per(b.irq_every);
                p.tx_down += ptr_req * per(b.host_tx_batch);
                p.tx_up += ptr_cpl * per(b.host_tx_batch);
            }
            // Receive path (free-list descriptors are read one per packet).
            p.rx_down += mmio_wr(PTR_BYTES) * per(b.host_free_batch);
            p.rx_up += desc_req * n;
            p.rx_down += desc_cpl * n;
            if mode == Mode::Compat {
                p.rx_up = 0; // the published model's "=" on the packet write
            }
            p.rx_up += wr(pkt) * n;
            p.rx_up += wr(DESC_BYTES) * n;
            if !b.dpdk {
                p.rx_up += mmio_wr(MSI_BYTES) * per(b.irq_every);
                p.rx_down += ptr_req * per(b.host_rx_batch);
                p.rx_up += ptr_cpl * per(b.host_rx_batch);
            }
            n
        }
    };
    let link = model.link_gbps();
    let data = pkt * batch;
    // Transmit only: data flows down (received by the device).
    let (_, tx_gbps) = solve(link, link, p.tx_up, p.tx_down, data);
    // Receive only: data flows up.
    let (rx_gbps, _) = solve(link, link, p.rx_up, p.rx_down, data);
    let (bidir_gbps, _) = solve(link, link, p.tx_up + p.rx_up, p.tx_down + p.rx_down, data);
    let eth_gbps = eth.host_gbps(mode, frame);
    Ok(NicPoint {
        frame,
        eth_gbps,
        eth_mpps: eth_gbps * 1e3 / (pkt * 8) as f64,
        tx_gbps,
        rx_gbps,
        bidir_gbps,
        down_bytes_per_pkt: (p.tx_down + p.rx_down) as f64 / batch as f64,
        up_bytes_per_pkt: (p.tx_up + p.rx_up) as f64 / batch as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PcieConfig;
    use pcielab_wire::Generation;

    fn model(mode: Mode) -> Model {
        let mut c = PcieConfig::new(Generation::Gen3, 8).unwrap();
        c.mode = mode;
        Model::new(c).unwrap()
    }

    #[test]
    fn simple_nic_bytes_by_hand() {
        // Gen3 x8 MPS 256 MRRS 512 64-bit: MWr/MRd 24 B overhead, CplD 20 B.
        // Frame 64 → 60 B packet.
        // Compat (every request 4DW):
        // TX down: doorbell 24+4, desc cpl 20+16, packet cpl 20+60, head MRd 24
        //          = 28 + 36 + 80 + 24 = 168
        // TX up:   desc MRd 24, packet MRd 24, MSI 24+4, head cpl 20+4 = 100
        // RX down: doorbell 28, desc cpl 36, head MRd 24 = 88
        // RX up:   (desc MRd 24 dropped by the published model's "=") packet 24+60,
        //          wb 24+16, MSI 28, head cpl 24 = 84 + 40 + 28 + 24 = 176
        // Spec: the RX descriptor read request counts (+24), and the MMIO requests
        // (doorbells, head MRds, MSIs) have 3DW headers (−4 each):
        // down: 2 doorbells + 2 head MRds = −16; up: 2 MSIs = −8.
        let c = evaluate(
            &model(Mode::Compat),
            NicKind::Simple,
            Ethernet::new(40).unwrap(),
            64,
        )
        .unwrap();
        assert_eq!(c.down_bytes_per_pkt, 168.0 + 88.0);
        assert_eq!(c.up_bytes_per_pkt, 100.0 + 176.0);
        let s = evaluate(
            &model(Mode::Spec),
            NicKind::Simple,
            Ethernet::new(40).unwrap(),
            64,
        )
        .unwrap();
        assert_eq!(s.down_bytes_per_pkt, 168.0 + 88.0 - 16.0);
        assert_eq!(s.up_bytes_per_pkt, 100.0 + 176.0 + 24.0 - 8.0);
    }

    #[test]
    fn batched_nic_bytes_by_hand() {
        // Linux settings, batch of lcm(40, 8, 1, 32, 8, 32) = 160 packets; 1516-byte frames,
        // 1512 B packets (whole DWs: 3 MRd at MRRS 512, 6 CplD / 6 MWr at MPS 256).
        // Per batch, TX path (spec mode: MMIO requests 3DW, 4 bytes less):
        //  down: doorbells 160×(28−4), 4 descriptor fetches (640 B: 3 CplD at MPS 256 →
        //        3×20+640) = 4×700, packet completions 160×(6×20+1512), head MRd
        //        160×(24−4)
        //  up:   4 fetch MRd (640 B: 2 requests at MRRS 512) 4×48, packet MRd 160×(3×24),
        //        20 write-backs of 128 B 20×(24+128), 5 MSI 5×(28−4), head cpl 160×24
        let b = NicKind::Batched(Batching::LINUX);
        let p = evaluate(&model(Mode::Spec), b, Ethernet::new(40).unwrap(), 1516).unwrap();
        let tx_down = 160 * 24 + 4 * 700 + 160 * (6 * 20 + 1512) + 160 * 20;
        let tx_up = 4 * 48 + 160 * 72 + 20 * 152 + 5 * 24 + 160 * 24;
        // RX path: down: 5 doorbells ×24, desc cpl 160×36, head MRd 20×20
        //          up: desc MRd 160×24, packet 160×(6×24+1512), wb 160×40, 5 MSI ×24,
        //              head cpl 20×24
        let rx_down = 5 * 24 + 160 * 36 + 20 * 20;
        let rx_up = 160 * 24 + 160 * (6 * 24 + 1512) + 160 * 40 + 5 * 24 + 20 * 24;
        assert_eq!(p.down_bytes_per_pkt, (tx_down + rx_down) as f64 / 160.0);
        assert_eq!(p.up_bytes_per_pkt, (tx_up + rx_up) as f64 / 160.0);
        // Compat: every request 4DW (and no RX descriptor MRd).
        let c = evaluate(&model(Mode::Compat), b, Ethernet::new(40).unwrap(), 1516).unwrap();
        let mmio_down = 160 + 160 + 5 + 20; // doorbells and head MRds
        assert_eq!(
            c.down_bytes_per_pkt,
            (tx_down + rx_down + 4 * mmio_down) as f64 / 160.0
        );
        // DPDK: doorbell every 32, no MSI, no head reads.
        let d = evaluate(
            &model(Mode::Spec),
            NicKind::Batched(Batching::DPDK),
            Ethernet::new(40).unwrap(),
            1516,
        )
        .unwrap();
        let tx_down = 5 * 24 + 4 * 700 + 160 * (6 * 20 + 1512);
        let rx_down = 5 * 24 + 160 * 36;
        assert_eq!(d.down_bytes_per_pkt, (tx_down + rx_down) as f64 / 160.0);
        assert!(d.bidir_gbps > p.bidir_gbps);
    }

    #[test]
    fn bad_input() {
        let m = model(Mode::Spec);
        let e = Ethernet::new(10).unwrap();
        assert!(evaluate(&m, NicKind::Simple, e, 4).is_err());
        assert!(evaluate(&m, NicKind::Simple, e, u64::MAX).is_err());
        assert!(evaluate(&m, NicKind::Batched(Batching::LINUX), e, MAX_FRAME).is_ok());
        let mut b = Batching::LINUX;
        b.tx_writeback = 0;
        assert_eq!(
            evaluate(&m, NicKind::Batched(b), e, 64)
                .unwrap_err()
                .to_string(),
            "invalid transmit write-back batch 0: must be at least 1"
        );
    }
}
