//! The Ethernet side of a NIC: line-rate timing of frames on the wire (preamble and
//! start-of-frame delimiter, inter-frame gap) and the frame sizes a packet source
//! offers.

use pcielab_sim::SimDuration;

/// Bytes of preamble and start-of-frame delimiter before every frame (IEEE 802.3).
pub const PREAMBLE: u64 = 8;
/// Bytes of the minimum inter-frame gap after every frame (IEEE 802.3: 96 bit times).
pub const IFG: u64 = 12;
/// Bytes of the frame check sequence at the end of every frame. A NIC strips it: a
/// frame of `F` bytes moves `F − 4` bytes across PCIe.
pub const FCS: u64 = 4;
/// The smallest Ethernet frame (FCS included).
pub const MIN_FRAME: u64 = 64;
/// The largest standard Ethernet frame without a VLAN tag (FCS included).
pub const MAX_FRAME: u64 = 1518;

/// An Ethernet line rate.
///
/// ```
/// use pcielab_device::nic::Ethernet;
/// let e = Ethernet::new(40.0).unwrap();
/// // A 64-byte frame takes 64 + 8 + 12 bytes of wire time: 84 × 8 bit / 40 Gb/s = 16.8 ns.
/// assert_eq!(e.frame_time(64).as_ps(), 16_800);
/// // 1518-byte frames: 3.251 million frames per second at 40 GbE (1538 bytes of wire time
/// // each), 39.376 Gb/s of packet data
/// // (the FCS stays on the wire).
/// assert!((e.max_pps(1518) / 1e6 - 3.251).abs() < 1e-3);
/// assert!((e.data_gbps(1518) - 39.376).abs() < 0.001);
/// assert!(Ethernet::new(0.0).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ethernet {
    gbps: f64,
}

impl Ethernet {
    /// A line rate of `gbps` Gb/s (more than 0, at most 1600).
    pub fn new(gbps: f64) -> Result<Ethernet, String> {
        if !(gbps > 0.0 && gbps <= 1600.0) {
            return Err(format!(
                "Ethernet line rate {gbps} Gb/s is not allowed; allowed: more than 0, at most 1600"
            ));
        }
        Ok(Ethernet { gbps })
    }

    /// The line rate, Gb/s.
    pub fn gbps(&self) -> f64 {
        self.gbps
    }

    /// Wire time of one frame of `frame` bytes (FCS included), with its preamble and
    /// inter-frame gap, rounded to the picosecond.
    pub fn frame_time(&self, frame: u64) -> SimDuration {
        let bits = (frame + PREAMBLE + IFG) * 8;
        SimDuration::from_ps((bits as f64 * 1000.0 / self.gbps).round() as u64)
    }

    /// Frames per second the line carries at `frame` bytes.
    pub fn max_pps(&self, frame: u64) -> f64 {
        self.gbps * 1e9 / ((frame + PREAMBLE + IFG) * 8) as f64
    }

    /// Gb/s of packet data (the frame less its FCS, what crosses PCIe) at line rate.
    pub fn data_gbps(&self, frame: u64) -> f64 {
        self.max_pps(frame) * (frame.saturating_sub(FCS) * 8) as f64 / 1e9
    }
}

/// The sizes of the frames a packet source offers, FCS included.
///
/// ```
/// use pcielab_device::nic::FrameSizes;
/// let imix = FrameSizes::parse("imix").unwrap();
/// // The simple IMIX: 7 × 64 B, 4 × 594 B, 1 × 1518 B, interleaved.
/// let twelve: Vec<u64> = (0..12).map(|i| imix.nth(i)).collect();
/// assert_eq!(twelve.iter().filter(|&&s| s == 64).count(), 7);
/// assert_eq!(twelve.iter().filter(|&&s| s == 594).count(), 4);
/// assert_eq!(twelve.iter().sum::<u64>(), 7 * 64 + 4 * 594 + 1518);
/// assert_eq!(FrameSizes::parse("128").unwrap().nth(5), 128);
/// assert!(FrameSizes::parse("63").is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameSizes {
    /// Every frame has this many bytes.
    Fixed(u64),
    /// The simple IMIX: 64, 594 and 1518-byte frames in the ratio 7 : 4 : 1.
    Imix,
}

/// One period of the simple IMIX, interleaved so that no size comes in a long run.
const IMIX: [u64; 12] = [64, 594, 64, 64, 594, 64, 1518, 64, 594, 64, 64, 594];

impl FrameSizes {
    /// Parses `imix` or a frame size in bytes (64..=9018: jumbo frames included).
    pub fn parse(s: &str) -> Result<FrameSizes, String> {
        if s.eq_ignore_ascii_case("imix") {
            return Ok(FrameSizes::Imix);
        }
        match s.trim().parse::<u64>() {
            Ok(n) if (MIN_FRAME..=9018).contains(&n) => Ok(FrameSizes::Fixed(n)),
            _ => Err(format!(
                "frame size {s:?} is not allowed; allowed: imix or 64..=9018 bytes"
            )),
        }
    }

    /// The size of frame number `i` of the source.
    pub fn nth(&self, i: u64) -> u64 {
        match *self {
            FrameSizes::Fixed(n) => n,
            FrameSizes::Imix => IMIX[(i % IMIX.len() as u64) as usize],
        }
    }

    /// The mean frame size, bytes.
    pub fn mean(&self) -> f64 {
        match *self {
            FrameSizes::Fixed(n) => n as f64,
            FrameSizes::Imix => IMIX.iter().sum::<u64>() as f64 / IMIX.len() as f64,
        }
    }

    /// The largest frame the source offers.
    pub fn max(&self) -> u64 {
        match *self {
            FrameSizes::Fixed(n) => n,
            FrameSizes::Imix => MAX_FRAME,
        }
    }
}

impl std::fmt::Display for FrameSizes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameSizes::Fixed(n) => write!(f, "{n}"),
            FrameSizes::Imix => f.write_str("imix"),
        }
    }
}
