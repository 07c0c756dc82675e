//! Checked configuration values: lanes, MPS, MRRS, RCB, address width, accounting mode,
//! and the [`PcieConfig`] that bundles them.

use crate::error::{Error, Result};
use core::fmt;
use pcielab_wire::Generation;

/// Which accounting the model uses.
///
/// See the crate documentation for every difference between the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mode {
    /// Reproduces the published pcie-bench model (`pcie-bench/pcie-model`) number for
    /// number, including its simplifications and its two table typos.
    #[default]
    Compat,
    /// Follows the PCIe Base Specification: DLLPs charged per direction as the latency
    /// timers send them, per lane, Gen6 FLIT accounting,
    /// DW-granular payloads, 4 KiB and RCB splitting from the start address.
    Spec,
}

impl Mode {
    /// The CLI spelling: `pcie-bench` or `spec`.
    pub const fn name(self) -> &'static str {
        match self {
            Mode::Compat => "pcie-bench",
            Mode::Spec => "spec",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A link width: x1, x2, x4, x8, x16 or x32.
///
/// ```
/// use pcielab_model::Lanes;
/// assert_eq!(Lanes::new(8).unwrap().count(), 8);
/// assert!(Lanes::new(3).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Lanes(u8);

impl Lanes {
    /// Every width the specification defines, narrowest first.
    pub const ALL: [Lanes; 6] = [Lanes(1), Lanes(2), Lanes(4), Lanes(8), Lanes(16), Lanes(32)];

    /// Checks a lane count.
    pub fn new(n: u32) -> Result<Lanes> {
        match n {
            1 | 2 | 4 | 8 | 16 | 32 => Ok(Lanes(n as u8)),
            _ => Err(Error::Invalid {
                what: "lane count",
                value: n as u64,
                allowed: "1, 2, 4, 8, 16, 32",
            }),
        }
    }
    /// The number of lanes.
    pub const fn count(self) -> u32 {
        self.0 as u32
    }
    /// Index 0..=5 into per-width tables.
    pub(crate) const fn index(self) -> usize {
        self.0.trailing_zeros() as usize
    }
}

/// Checks a size that must be a power of two between `lo` and `hi`.
fn pow2_in(what: &'static str, allowed: &'static str, v: u32, lo: u32, hi: u32) -> Result<u16> {
    if v.is_power_of_two() && (lo..=hi).contains(&v) {
        Ok(v as u16)
    } else {
        Err(Error::Invalid {
            what,
            value: v as u64,
            allowed,
        })
    }
}

/// Maximum Payload Size in bytes: 128, 256, 512, 1024, 2048 or 4096.
///
/// ```
/// use pcielab_model::Mps;
/// assert_eq!(Mps::new(256).unwrap().bytes(), 256);
/// assert!(Mps::new(64).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Mps(u16);

impl Mps {
    /// Every MPS the specification defines.
    pub const ALL: [Mps; 6] = [
        Mps(128),
        Mps(256),
        Mps(512),
        Mps(1024),
        Mps(2048),
        Mps(4096),
    ];
    /// Checks an MPS value.
    pub fn new(bytes: u32) -> Result<Mps> {
        pow2_in("MPS", "128, 256, 512, 1024, 2048, 4096", bytes, 128, 4096).map(Mps)
    }
    /// The size in bytes.
    pub const fn bytes(self) -> u32 {
        self.0 as u32
    }
    /// Index 0..=5 into per-MPS tables.
    pub(crate) const fn index(self) -> usize {
        (self.0.trailing_zeros() - 7) as usize
    }
}

/// Maximum Read Request Size in bytes: 128, 256, 512, 1024, 2048 or 4096.
///
/// ```
/// use pcielab_model::Mrrs;
/// assert_eq!(Mrrs::new(512).unwrap().bytes(), 512);
/// assert!(Mrrs::new(8192).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Mrrs(u16);

impl Mrrs {
    /// Checks an MRRS value.
    pub fn new(bytes: u32) -> Result<Mrrs> {
        pow2_in("MRRS", "128, 256, 512, 1024, 2048, 4096", bytes, 128, 4096).map(Mrrs)
    }
    /// The size in bytes.
    pub const fn bytes(self) -> u32 {
        self.0 as u32
    }
}

/// Read Completion Boundary in bytes.
///
/// The specification allows 64 and 128 (Link Control register, RCB bit). The published
/// pcie-bench model also accepts 256 and 512; [`Rcb::new_compat`] does too, and
/// [`PcieConfig::check`] rejects them in [`Mode::Spec`].
///
/// ```
/// use pcielab_model::Rcb;
/// assert_eq!(Rcb::new(64).unwrap().bytes(), 64);
/// assert!(Rcb::new(256).is_err());
/// assert!(Rcb::new_compat(256).is_ok());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rcb(u16);

impl Rcb {
    /// Checks an RCB value against the specification (64 or 128).
    pub fn new(bytes: u32) -> Result<Rcb> {
        pow2_in("RCB", "64, 128", bytes, 64, 128).map(Rcb)
    }
    /// Checks an RCB value against the set the published model accepts (64..=512).
    pub fn new_compat(bytes: u32) -> Result<Rcb> {
        pow2_in("RCB", "64, 128, 256, 512", bytes, 64, 512).map(Rcb)
    }
    /// The size in bytes.
    pub const fn bytes(self) -> u32 {
        self.0 as u32
    }
}

/// Width of the addresses in memory requests: 32-bit (3DW header) or 64-bit (4DW header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AddrWidth {
    /// 32-bit addresses, 3DW request headers.
    Bits32,
    /// 64-bit addresses, 4DW request headers.
    #[default]
    Bits64,
}

impl AddrWidth {
    /// From 32 or 64.
    pub fn from_bits(bits: u32) -> Result<AddrWidth> {
        match bits {
            32 => Ok(AddrWidth::Bits32),
            64 => Ok(AddrWidth::Bits64),
            _ => Err(Error::Invalid {
                what: "address width",
                value: bits as u64,
                allowed: "32, 64",
            }),
        }
    }
    /// Bytes of a memory request header (MRd/MWr) with this address width.
    pub const fn request_header_bytes(self) -> u32 {
        match self {
            AddrWidth::Bits32 => 12,
            AddrWidth::Bits64 => 16,
        }
    }
}

/// A PCIe link and device configuration: everything the bandwidth model needs.
///
/// ```
/// use pcielab_model::{PcieConfig, Mode};
/// use pcielab_wire::Generation;
/// let cfg = PcieConfig::new(Generation::Gen3, 8).unwrap();
/// assert_eq!((cfg.mps.bytes(), cfg.mrrs.bytes(), cfg.rcb.bytes()), (256, 512, 64));
/// assert_eq!(cfg.mode, Mode::Compat);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PcieConfig {
    /// Link generation.
    pub gen: Generation,
    /// Link width.
    pub lanes: Lanes,
    /// Maximum Payload Size.
    pub mps: Mps,
    /// Maximum Read Request Size.
    pub mrrs: Mrrs,
    /// Read Completion Boundary.
    pub rcb: Rcb,
    /// Completers return read data in RCB-sized completions instead of MPS-sized ones
    /// (observed on several older chipsets).
    pub rcb_chunks: bool,
    /// Address width of memory requests.
    pub addr: AddrWidth,
    /// Every TLP carries a 4-byte ECRC digest.
    pub ecrc: bool,
    /// Accounting mode.
    pub mode: Mode,
}

impl PcieConfig {
    /// A configuration with the pcie-bench defaults: MPS 256, MRRS 512, RCB 64,
    /// RCB chunks off, 64-bit addresses, no ECRC, compatibility mode.
    pub fn new(gen: Generation, lanes: u32) -> Result<PcieConfig> {
        Ok(PcieConfig {
            gen,
            lanes: Lanes::new(lanes)?,
            mps: Mps(256),
            mrrs: Mrrs(512),
            rcb: Rcb(64),
            rcb_chunks: false,
            addr: AddrWidth::Bits64,
            ecrc: false,
            mode: Mode::Compat,
        })
    }

    /// Checks the combination: in [`Mode::Spec`] the RCB must be one the specification
    /// allows (64 or 128).
    pub fn check(&self) -> Result<()> {
        if self.mode == Mode::Spec {
            Rcb::new(self.rcb.bytes())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_values() {
        for (n, ok) in [
            (0, false),
            (1, true),
            (3, false),
            (12, false),
            (32, true),
            (64, false),
        ] {
            assert_eq!(Lanes::new(n).is_ok(), ok, "lanes {n}");
        }
        for (n, ok) in [
            (0, false),
            (64, false),
            (100, false),
            (128, true),
            (4096, true),
            (8192, false),
        ] {
            assert_eq!(Mps::new(n).is_ok(), ok, "mps {n}");
            assert_eq!(Mrrs::new(n).is_ok(), ok, "mrrs {n}");
        }
        assert_eq!(
            Rcb::new(32).unwrap_err().to_string(),
            "invalid RCB 32: allowed 64, 128"
        );
        assert!(Rcb::new(128).is_ok() && Rcb::new(256).is_err());
        assert!(Rcb::new_compat(512).is_ok() && Rcb::new_compat(1024).is_err());
        assert!(AddrWidth::from_bits(48).is_err());
        assert_eq!(Lanes::new(16).unwrap().index(), 4);
        assert_eq!(Mps::new(4096).unwrap().index(), 5);
    }

    #[test]
    fn spec_mode_rejects_non_spec_rcb() {
        let mut cfg = PcieConfig::new(Generation::Gen3, 8).unwrap();
        cfg.rcb = Rcb::new_compat(256).unwrap();
        assert!(cfg.check().is_ok());
        cfg.mode = Mode::Spec;
        assert_eq!(
            cfg.check().unwrap_err().to_string(),
            "invalid RCB 256: allowed 64, 128"
        );
    }
}
