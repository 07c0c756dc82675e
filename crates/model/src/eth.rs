//! Ethernet line rates, and the NetTLP encapsulation limit.
//!
//! On the wire every frame is preceded by 7 bytes of preamble and a 1-byte start-of-frame
//! delimiter and followed by at least 12 bytes of inter-frame gap; a frame (destination
//! MAC through FCS) is at least 64 bytes. A host NIC moves the frame without its 4-byte
//! FCS across PCIe.
//!
//! ```text
//!  | preamble 7 | SFD 1 | dst 6 | src 6 | type 2 | payload ≥46 | FCS 4 | IFG 12 |
//!                       '-------------- frame (64..1518) -------------'
//! ```

use crate::config::Mode;
use crate::error::{Error, Result};

/// Preamble plus start-of-frame delimiter, bytes.
pub const PREAMBLE_SFD: u64 = 8;
/// Standard inter-frame gap, bytes.
pub const IFG: u64 = 12;
/// Frame check sequence, bytes.
pub const FCS: u64 = 4;
/// Minimum frame size (header through FCS), bytes.
pub const MIN_FRAME: u64 = 64;
/// Bytes of headers and FCS NetTLP adds around a TLP: Ethernet 14, FCS 4, IPv4 20,
/// UDP 8, NetTLP 6 (seed 000, §3 "Encapsulation Overhead").
pub const NETTLP_PKT_HDR: u64 = 52;
/// Preamble and inter-frame gap counted by NetTLP, bytes.
pub const NETTLP_ETH_GAP: u64 = 20;

/// An Ethernet link of a standard rate.
///
/// ```
/// use pcielab_model::eth::Ethernet;
/// let e = Ethernet::new(10)?;
/// // 64-byte frames at 10 Gb/s: 10e9 / ((64 + 20) × 8) = 14.88 Mpps
/// assert!((e.frames_per_s(64) - 14_880_952.38).abs() < 0.01);
/// # Ok::<(), pcielab_model::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ethernet {
    gbps: u32,
}

impl Ethernet {
    /// The standard rates: 1, 10, 25, 40, 50, 100, 200, 400 Gb/s.
    pub fn new(gbps: u32) -> Result<Ethernet> {
        match gbps {
            1 | 10 | 25 | 40 | 50 | 100 | 200 | 400 => Ok(Ethernet { gbps }),
            _ => Err(Error::Invalid {
                what: "Ethernet rate (Gb/s)",
                value: gbps as u64,
                allowed: "1, 10, 25, 40, 50, 100, 200, 400",
            }),
        }
    }
    /// Line rate, Gb/s.
    pub const fn gbps(self) -> u32 {
        self.gbps
    }
    fn rate_bps(self) -> f64 {
        self.gbps as f64 * 1e9
    }
    /// Frames per second at line rate; frames shorter than 64 bytes are padded to 64.
    pub fn frames_per_s(self, frame: u64) -> f64 {
        let wire = frame.max(MIN_FRAME) + PREAMBLE_SFD + IFG;
        self.rate_bps() / (wire * 8) as f64
    }
    /// Gb/s the host must move across PCIe to keep up with line rate when the NIC strips
    /// the FCS: frames/s × (frame − 4) × 8.
    ///
    /// In [`Mode::Compat`] this is the published model's "line rate (− FCS)" curve, which
    /// treats the stripped packet (frame − 4 bytes) as if it were the whole frame on the
    /// wire: rate × (frame − 4) / (frame − 4 + 20), 4 bytes per frame too generous (for
    /// frames from 68 bytes on; below that its minimum-payload padding hides the slip).
    ///
    /// ```
    /// use pcielab_model::{eth::Ethernet, Mode};
    /// let e = Ethernet::new(40)?;
    /// // spec: 40 × 1514 / 1538 = 39.3758; pcie-bench: 40 × 1514 / 1534 = 39.4785
    /// assert!((e.host_gbps(Mode::Spec, 1518) - 39.37581).abs() < 1e-5);
    /// assert!((e.host_gbps(Mode::Compat, 1518) - 39.47849).abs() < 1e-5);
    /// // 64-byte frames: both 40 × 60 / 84 = 28.571
    /// assert!((e.host_gbps(Mode::Compat, 64) - e.host_gbps(Mode::Spec, 64)).abs() < 1e-12);
    /// # Ok::<(), pcielab_model::Error>(())
    /// ```
    pub fn host_gbps(self, mode: Mode, frame: u64) -> f64 {
        let pkt = frame.saturating_sub(FCS);
        match mode {
            Mode::Spec => self.frames_per_s(frame) * (pkt * 8) as f64 / 1e9,
            Mode::Compat => {
                // The published model's Ethernet config (VLAN-tagged, 18-byte header,
                // 42-byte minimum payload) applied to a frame of `pkt` bytes.
                let payload = pkt.saturating_sub(18 + FCS).max(42);
                let s = PREAMBLE_SFD + 18 + payload + FCS + IFG;
                let pps = self.rate_bps() / (s * 8) as f64;
                pps * pkt as f64 * 8.0 / (1000.0 * 1000.0 * 1000.0)
            }
        }
    }
}

/// NetTLP's DMA throughput limit over Ethernet (seed 000):
/// `eth × data / (tlp_hdr + data + 52 + 20)` Gb/s.
///
/// ```
/// // 10 GbE, 256-byte payload, 12-byte 3DW MWr header: 10 × 256 / 340 = 7.53 Gb/s
/// let t = pcielab_model::eth::nettlp_dma_gbps(10.0, 12, 256);
/// assert_eq!(format!("{t:.2}"), "7.53");
/// ```
pub fn nettlp_dma_gbps(eth_gbps: f64, tlp_hdr: u64, data: u64) -> f64 {
    eth_gbps * data as f64 / (tlp_hdr + data + NETTLP_PKT_HDR + NETTLP_ETH_GAP) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_errors() {
        for r in [10, 25, 40, 100, 200, 400] {
            assert_eq!(Ethernet::new(r).unwrap().gbps(), r);
        }
        assert_eq!(
            Ethernet::new(20).unwrap_err().to_string(),
            "invalid Ethernet rate (Gb/s) 20: allowed 1, 10, 25, 40, 50, 100, 200, 400"
        );
    }

    #[test]
    fn line_rate_by_hand() {
        // 1518-byte frames at 100 GbE: 100e9 / (1538 × 8) = 8,127,438.23 frames/s;
        // host data 1514 B each: 8127438.23 × 1514 × 8 = 98.4395 Gb/s.
        let e = Ethernet::new(100).unwrap();
        assert!((e.frames_per_s(1518) - 8_127_438.23).abs() < 0.01);
        assert!((e.host_gbps(Mode::Spec, 1518) - 98.439_531).abs() < 1e-5);
        // Runt frames are padded: 40-byte frames go at the 64-byte rate.
        assert_eq!(e.frames_per_s(40), e.frames_per_s(64));
        // 400 GbE, 64 B: 400e9 / 672 = 595.238 Mpps.
        assert!((Ethernet::new(400).unwrap().frames_per_s(64) / 1e6 - 595.238_095).abs() < 1e-5);
    }

    #[test]
    fn nettlp_by_hand() {
        // 10 × 256 / (12 + 256 + 52 + 20) = 2560 / 340 = 7.5294
        assert!((nettlp_dma_gbps(10.0, 12, 256) - 7.529_411_76).abs() < 1e-8);
        // 4DW header, 128 B: 10 × 128 / 216 = 5.9259
        assert!((nettlp_dma_gbps(10.0, 16, 128) - 5.925_925_9).abs() < 1e-6);
    }
}
