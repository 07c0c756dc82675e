//! Type 0 (endpoint) and Type 1 (PCI-to-PCI bridge) configuration headers and BARs.
//!
//! ```text
//! Type 0 header                              Type 1 header
//! 31        16 15         0                  31        16 15         0
//! +-----------+-----------+ 00               +-----------+-----------+ 00
//! | Device ID | Vendor ID |                  | Device ID | Vendor ID |
//! +-----------+-----------+ 04               +-----------+-----------+ 04
//! |  Status   |  Command  |                  |  Status   |  Command  |
//! +-----------+-----+-----+ 08               +-----------+-----+-----+ 08
//! |  Class code     | Rev |                  |  Class code     | Rev |
//! +-----+-----+-----+-----+ 0c               +-----+-----+-----+-----+ 0c
//! |BIST |HType| Lat | CLS |                  |BIST |HType| Lat | CLS |
//! +-----+-----+-----+-----+ 10               +-----------------------+ 10
//! |   BAR0 .. BAR5        |                  |   BAR0, BAR1          |
//! |                       |                  +-----+-----+-----+-----+ 18
//! |                       |                  |SecLt| Sub | Sec | Pri |
//! |                       |                  +-----------+-----+-----+ 1c
//! |                       |                  | Sec status|IOLim|IOBas|
//! +-----------------------+ 28               +-----------+-----------+ 20
//! |   CardBus CIS ptr     |                  | Mem limit | Mem base  |
//! +-----------+-----------+ 2c               +-----------+-----------+ 24
//! | Subsys ID | SubVendor |                  | Pf limit  | Pf base   |
//! +-----------+-----------+ 30               +-----------------------+ 28, 2c
//! | Expansion ROM BAR     |                  | Pf base/limit upper 32|
//! +-----------------+-----+ 34               +-----------+-----------+ 30
//! |      reserved   | Cap |                  | IO lim up | IO base up|
//! +-----------------+-----+ 38               +-----------------+-----+ 34
//! |      reserved         |                  |      reserved   | Cap |
//! +-----+-----+-----+-----+ 3c               +-----------------------+ 38
//! |MaxLt|MinGt| Pin |Line |                  | Expansion ROM BAR     |
//! +-----+-----+-----+-----+                  +-----------+-----+-----+ 3c
//!                                            | Bridge ctl| Pin |Line |
//!                                            +-----------+-----+-----+
//! ```
//!
//! BARs implement the sizing protocol by their write masks: the address bits below the
//! BAR's size are read-only zero, so writing all-ones and reading back gives the size.

use crate::space::{Access, ConfigSpace};

/// Register offsets of the common header.
pub mod reg {
    /// Vendor ID.
    pub const VENDOR_ID: u16 = 0x00;
    /// Device ID.
    pub const DEVICE_ID: u16 = 0x02;
    /// Command.
    pub const COMMAND: u16 = 0x04;
    /// Status.
    pub const STATUS: u16 = 0x06;
    /// Revision ID.
    pub const REVISION: u16 = 0x08;
    /// Class code (3 bytes from 0x09: programming interface, subclass, base class).
    pub const CLASS: u16 = 0x09;
    /// Cache Line Size.
    pub const CACHE_LINE: u16 = 0x0c;
    /// Header Type.
    pub const HEADER_TYPE: u16 = 0x0e;
    /// First BAR.
    pub const BAR0: u16 = 0x10;
    /// Subsystem vendor ID (Type 0).
    pub const SUBSYSTEM_VENDOR: u16 = 0x2c;
    /// Subsystem ID (Type 0).
    pub const SUBSYSTEM_ID: u16 = 0x2e;
    /// Expansion ROM BAR (Type 0).
    pub const ROM0: u16 = 0x30;
    /// Capabilities pointer.
    pub const CAP_PTR: u16 = 0x34;
    /// Interrupt line.
    pub const INT_LINE: u16 = 0x3c;
    /// Interrupt pin.
    pub const INT_PIN: u16 = 0x3d;
    /// Primary bus number (Type 1).
    pub const PRIMARY_BUS: u16 = 0x18;
    /// Secondary bus number (Type 1).
    pub const SECONDARY_BUS: u16 = 0x19;
    /// Subordinate bus number (Type 1).
    pub const SUBORDINATE_BUS: u16 = 0x1a;
    /// I/O base (Type 1).
    pub const IO_BASE: u16 = 0x1c;
    /// I/O limit (Type 1).
    pub const IO_LIMIT: u16 = 0x1d;
    /// Secondary status (Type 1).
    pub const SEC_STATUS: u16 = 0x1e;
    /// Memory base (Type 1).
    pub const MEM_BASE: u16 = 0x20;
    /// Memory limit (Type 1).
    pub const MEM_LIMIT: u16 = 0x22;
    /// Prefetchable memory base (Type 1).
    pub const PREF_BASE: u16 = 0x24;
    /// Prefetchable memory limit (Type 1).
    pub const PREF_LIMIT: u16 = 0x26;
    /// Prefetchable base, upper 32 bits (Type 1).
    pub const PREF_BASE_UPPER: u16 = 0x28;
    /// Prefetchable limit, upper 32 bits (Type 1).
    pub const PREF_LIMIT_UPPER: u16 = 0x2c;
    /// I/O base, upper 16 bits (Type 1).
    pub const IO_BASE_UPPER: u16 = 0x30;
    /// I/O limit, upper 16 bits (Type 1).
    pub const IO_LIMIT_UPPER: u16 = 0x32;
    /// Expansion ROM BAR (Type 1).
    pub const ROM1: u16 = 0x38;
    /// Bridge control (Type 1).
    pub const BRIDGE_CONTROL: u16 = 0x3e;
}

/// Command register bits.
pub mod command {
    /// I/O Space Enable.
    pub const IO: u16 = 1 << 0;
    /// Memory Space Enable.
    pub const MEMORY: u16 = 1 << 1;
    /// Bus Master Enable.
    pub const BUS_MASTER: u16 = 1 << 2;
    /// Parity Error Response.
    pub const PARITY: u16 = 1 << 6;
    /// SERR# Enable.
    pub const SERR: u16 = 1 << 8;
    /// Interrupt Disable.
    pub const INTX_DISABLE: u16 = 1 << 10;
}

/// Status register bits.
pub mod status {
    /// Interrupt Status (RO).
    pub const INTERRUPT: u16 = 1 << 3;
    /// Capabilities List (RO).
    pub const CAP_LIST: u16 = 1 << 4;
    /// Master Data Parity Error (RW1C).
    pub const MASTER_PARITY: u16 = 1 << 8;
    /// Signaled Target Abort (RW1C).
    pub const SIG_TARGET_ABORT: u16 = 1 << 11;
    /// Received Target Abort (RW1C).
    pub const RCV_TARGET_ABORT: u16 = 1 << 12;
    /// Received Master Abort (RW1C).
    pub const RCV_MASTER_ABORT: u16 = 1 << 13;
    /// Signaled System Error (RW1C).
    pub const SIG_SYSTEM_ERROR: u16 = 1 << 14;
    /// Detected Parity Error (RW1C).
    pub const DETECTED_PARITY: u16 = 1 << 15;
    /// All the RW1C error bits.
    pub const ERRORS: u16 = MASTER_PARITY
        | SIG_TARGET_ABORT
        | RCV_TARGET_ABORT
        | RCV_MASTER_ABORT
        | SIG_SYSTEM_ERROR
        | DETECTED_PARITY;
}

/// What a BAR decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bar {
    /// 32-bit memory BAR of `size` bytes (a power of two, at least 16).
    Mem32 {
        /// Size in bytes.
        size: u32,
        /// Prefetchable.
        prefetchable: bool,
    },
    /// 64-bit memory BAR (occupies two BAR slots) of `size` bytes (power of two, ≥ 16).
    Mem64 {
        /// Size in bytes.
        size: u64,
        /// Prefetchable.
        prefetchable: bool,
    },
    /// I/O BAR of `size` bytes (a power of two, 4..=256).
    Io {
        /// Size in bytes.
        size: u32,
    },
}

impl Bar {
    /// The size in bytes.
    pub const fn size(self) -> u64 {
        match self {
            Bar::Mem32 { size, .. } | Bar::Io { size } => size as u64,
            Bar::Mem64 { size, .. } => size,
        }
    }
    /// Number of BAR slots (dwords) it occupies.
    pub const fn slots(self) -> usize {
        match self {
            Bar::Mem64 { .. } => 2,
            _ => 1,
        }
    }
    /// True for prefetchable memory.
    pub const fn prefetchable(self) -> bool {
        matches!(
            self,
            Bar::Mem32 {
                prefetchable: true,
                ..
            } | Bar::Mem64 {
                prefetchable: true,
                ..
            }
        )
    }
    /// The read-only low bits of the BAR (type flags).
    pub const fn flags(self) -> u32 {
        match self {
            Bar::Io { .. } => 0x1,
            Bar::Mem32 { prefetchable, .. } => {
                if prefetchable {
                    0x8
                } else {
                    0
                }
            }
            Bar::Mem64 { prefetchable, .. } => {
                if prefetchable {
                    0xc
                } else {
                    0x4
                }
            }
        }
    }
    /// Decodes what sizing read back: `lo` (and `hi` for 64-bit BARs) after writing
    /// all-ones. Returns `None` for an unimplemented BAR (reads back 0).
    ///
    /// ```
    /// use pcielab_config::Bar;
    /// assert_eq!(Bar::from_sizing(0xfff0_0008, 0), Some(Bar::Mem32 { size: 1 << 20, prefetchable: true }));
    /// assert_eq!(Bar::from_sizing(0x0000_000c, 0xffff_fffe), Some(Bar::Mem64 { size: 1 << 33, prefetchable: true }));
    /// assert_eq!(Bar::from_sizing(0xffff_ffe1, 0), Some(Bar::Io { size: 32 }));
    /// ```
    pub fn from_sizing(lo: u32, hi: u32) -> Option<Bar> {
        if lo & 1 == 1 {
            let mask = lo & 0xffff_fffc;
            if mask == 0 {
                return None;
            }
            // Devices may implement only 16 address bits of I/O.
            let mask = mask | 0xffff_0000;
            return Some(Bar::Io {
                size: (!mask).wrapping_add(1),
            });
        }
        let prefetchable = lo & 0x8 != 0;
        match (lo >> 1) & 3 {
            2 => {
                let mask = ((hi as u64) << 32) | (lo & 0xffff_fff0) as u64;
                if mask == 0 {
                    return None;
                }
                Some(Bar::Mem64 {
                    size: (!mask).wrapping_add(1),
                    prefetchable,
                })
            }
            _ => {
                let mask = lo & 0xffff_fff0;
                if mask == 0 {
                    return None;
                }
                Some(Bar::Mem32 {
                    size: (!mask).wrapping_add(1),
                    prefetchable,
                })
            }
        }
    }

    fn validate(self, index: usize, slots: usize) -> Result<(), HeaderError> {
        let size = self.size();
        let ok = match self {
            Bar::Io { size } => size.is_power_of_two() && (4..=256).contains(&size),
            _ => size.is_power_of_two() && size >= 16,
        };
        if !ok {
            return Err(HeaderError::BarSize {
                index,
                size,
                allowed: match self {
                    Bar::Io { .. } => "a power of two from 4 to 256 bytes",
                    _ => "a power of two of at least 16 bytes",
                },
            });
        }
        if index + self.slots() > slots {
            return Err(HeaderError::BarSlot { index, slots });
        }
        Ok(())
    }
}

/// Why a header could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    /// A BAR size is not allowed.
    BarSize {
        /// BAR index.
        index: usize,
        /// Size given.
        size: u64,
        /// What is allowed.
        allowed: &'static str,
    },
    /// A BAR does not fit in the header's BAR slots (a 64-bit BAR in the last slot,
    /// or two BARs in one slot).
    BarSlot {
        /// BAR index.
        index: usize,
        /// Number of BAR slots of the header.
        slots: usize,
    },
    /// The expansion ROM size is not a power of two of at least 2 KiB.
    RomSize(u32),
}

impl core::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            HeaderError::BarSize {
                index,
                size,
                allowed,
            } => write!(f, "BAR{index}: size {size} is not allowed; use {allowed}"),
            HeaderError::BarSlot { index, slots } => write!(
                f,
                "BAR{index}: does not fit in the {slots} BAR slots (a 64-bit BAR takes two; slots may not overlap)"
            ),
            HeaderError::RomSize(s) => write!(
                f,
                "expansion ROM size {s} is not a power of two of at least 2048 bytes"
            ),
        }
    }
}

impl std::error::Error for HeaderError {}

/// Identification common to both header types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ids {
    /// Vendor ID.
    pub vendor_id: u16,
    /// Device ID.
    pub device_id: u16,
    /// Revision ID.
    pub revision: u8,
    /// Class code: base class << 16 | subclass << 8 | programming interface.
    pub class_code: u32,
}

fn common(cs: &mut ConfigSpace, ids: Ids, header_type: u8) {
    cs.define(reg::VENDOR_ID, 2, 0xffff, Access::Ro, ids.vendor_id as u32);
    cs.define(reg::DEVICE_ID, 2, 0xffff, Access::Ro, ids.device_id as u32);
    let cmd_rw = command::IO
        | command::MEMORY
        | command::BUS_MASTER
        | command::PARITY
        | command::SERR
        | command::INTX_DISABLE;
    cs.define(reg::COMMAND, 2, 0xffff, Access::RsvdP, 0);
    cs.define(reg::COMMAND, 2, cmd_rw as u32, Access::Rw, 0);
    cs.define(reg::STATUS, 2, 0xffff, Access::RsvdZ, 0);
    cs.define(
        reg::STATUS,
        2,
        (status::INTERRUPT | status::CAP_LIST) as u32,
        Access::Ro,
        0,
    );
    cs.define(reg::STATUS, 2, status::ERRORS as u32, Access::Rw1c, 0);
    cs.define(reg::REVISION, 1, 0xff, Access::Ro, ids.revision as u32);
    cs.define(reg::CLASS, 3, 0xff_ffff, Access::Ro, ids.class_code);
    cs.define(reg::CACHE_LINE, 1, 0xff, Access::Rw, 0);
    cs.define(reg::HEADER_TYPE, 1, 0xff, Access::Ro, header_type as u32);
    cs.define(reg::INT_LINE, 1, 0xff, Access::Rw, 0);
}

/// Subsystem Vendor ID and Subsystem ID (read-only) of a Type 0 header.
fn define_subsystem(cs: &mut ConfigSpace, vendor: u16, id: u16) {
    cs.define(reg::SUBSYSTEM_VENDOR, 2, 0xffff, Access::Ro, vendor as u32);
    cs.define(reg::SUBSYSTEM_ID, 2, 0xffff, Access::Ro, id as u32);
}

fn install_bars(
    cs: &mut ConfigSpace,
    bars: &[Option<Bar>],
    slots: usize,
) -> Result<(), HeaderError> {
    let mut used = vec![false; slots];
    for (i, bar) in bars.iter().enumerate() {
        let Some(bar) = *bar else { continue };
        bar.validate(i, slots)?;
        for slot in used.iter_mut().skip(i).take(bar.slots()) {
            if *slot {
                return Err(HeaderError::BarSlot { index: i, slots });
            }
            *slot = true;
        }
        let off = reg::BAR0 + 4 * i as u16;
        let size = bar.size();
        let low_flags_mask = match bar {
            Bar::Io { .. } => 0x3,
            _ => 0xf,
        };
        cs.define(off, 4, low_flags_mask, Access::Ro, bar.flags());
        let lo_rw = (!(size.wrapping_sub(1)) as u32) & !low_flags_mask;
        cs.define(off, 4, lo_rw, Access::Rw, 0);
        if let Bar::Mem64 { .. } = bar {
            let hi_rw = (!(size.wrapping_sub(1)) >> 32) as u32;
            cs.define(off + 4, 4, hi_rw, Access::Rw, 0);
        }
    }
    Ok(())
}

fn install_rom(cs: &mut ConfigSpace, at: u16, size: Option<u32>) -> Result<(), HeaderError> {
    if let Some(size) = size {
        if !size.is_power_of_two() || size < 2048 {
            return Err(HeaderError::RomSize(size));
        }
        cs.define(at, 4, !(size - 1) & 0xffff_f800, Access::Rw, 0);
        cs.define(at, 4, 1, Access::Rw, 0);
    }
    Ok(())
}

/// A Type 0 (endpoint) header.
///
/// ```
/// use pcielab_config::{Bar, Ids, Type0};
/// let cs = Type0 {
///     ids: Ids { vendor_id: 0x1af4, device_id: 0x1000, revision: 1, class_code: 0x058000 },
///     bars: [Some(Bar::Mem64 { size: 1 << 20, prefetchable: true }), None, None, None, None, None],
///     ..Type0::default()
/// }
/// .build()
/// .unwrap();
/// let mut cs = cs;
/// cs.write_u32(0x10, 0xffff_ffff);
/// cs.write_u32(0x14, 0xffff_ffff);
/// assert_eq!(cs.read_u32(0x10), 0xfff0_000c);
/// assert_eq!(cs.read_u32(0x14), 0xffff_ffff);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Type0 {
    /// Identification.
    pub ids: Ids,
    /// BAR0..BAR5; a 64-bit BAR takes its slot and the next, which must be `None`.
    pub bars: [Option<Bar>; 6],
    /// Expansion ROM size in bytes, if any.
    pub rom_size: Option<u32>,
    /// Subsystem vendor ID.
    pub subsystem_vendor: u16,
    /// Subsystem ID.
    pub subsystem_id: u16,
    /// Interrupt pin (0 none, 1 INTA … 4 INTD).
    pub interrupt_pin: u8,
    /// Multi-function device (Header Type bit 7).
    pub multi_function: bool,
}

impl Default for Type0 {
    fn default() -> Self {
        Type0 {
            ids: Ids {
                vendor_id: crate::PCIELAB_VENDOR_ID,
                device_id: 0,
                revision: 0,
                class_code: 0xff_0000,
            },
            bars: [None; 6],
            rom_size: None,
            subsystem_vendor: 0,
            subsystem_id: 0,
            interrupt_pin: 1,
            multi_function: false,
        }
    }
}

impl Type0 {
    /// Builds the configuration space with this header and no capabilities.
    pub fn build(&self) -> Result<ConfigSpace, HeaderError> {
        let mut cs = ConfigSpace::new();
        common(
            &mut cs,
            self.ids,
            if self.multi_function { 0x80 } else { 0 },
        );
        install_bars(&mut cs, &self.bars, 6)?;
        define_subsystem(&mut cs, self.subsystem_vendor, self.subsystem_id);
        install_rom(&mut cs, reg::ROM0, self.rom_size)?;
        cs.define(
            reg::INT_PIN,
            1,
            0xff,
            Access::Ro,
            self.interrupt_pin.min(4) as u32,
        );
        Ok(cs)
    }
}

/// The Type 0 header of an SR-IOV Virtual Function (PCIe Base Specification, 9.3.4.1):
/// Vendor ID and Device ID read FFFFh (software takes the PF's Vendor ID and the VF
/// Device ID of the PF's SR-IOV capability); the BARs and the expansion ROM read zero
/// (a VF's BARs are the VF BARs of the PF's SR-IOV capability); in the Command
/// register only Bus Master Enable is read-write (Memory Space: the PF's VF MSE
/// applies; parity and SERR# reporting: the PF's); no INTx (Interrupt Pin 0).
///
/// ```
/// use pcielab_config::header::{command, reg, VfHeader};
/// let mut cs = VfHeader { class_code: 0x058000, revision: 1, subsystem_vendor: 0x1fee, subsystem_id: 0x11 }
///     .build();
/// assert_eq!(cs.read_u32(reg::VENDOR_ID), 0xffff_ffff);
/// cs.write_u16(reg::COMMAND, 0xffff);
/// assert_eq!(cs.read_u16(reg::COMMAND), command::BUS_MASTER);
/// cs.write_u32(reg::BAR0, 0xffff_ffff);
/// assert_eq!(cs.read_u32(reg::BAR0), 0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VfHeader {
    /// Class code (a VF's is its PF's).
    pub class_code: u32,
    /// Revision ID.
    pub revision: u8,
    /// Subsystem Vendor ID (a VF's is its PF's).
    pub subsystem_vendor: u16,
    /// Subsystem ID.
    pub subsystem_id: u16,
}

impl VfHeader {
    /// Builds the configuration space with this header and no capabilities.
    pub fn build(&self) -> ConfigSpace {
        let mut cs = ConfigSpace::new();
        common(
            &mut cs,
            Ids {
                vendor_id: 0xffff,
                device_id: 0xffff,
                revision: self.revision,
                class_code: self.class_code,
            },
            0,
        );
        cs.define(reg::COMMAND, 2, 0xffff, Access::RsvdP, 0);
        cs.define(reg::COMMAND, 2, command::BUS_MASTER as u32, Access::Rw, 0);
        cs.define(reg::INT_LINE, 1, 0xff, Access::Ro, 0);
        define_subsystem(&mut cs, self.subsystem_vendor, self.subsystem_id);
        cs
    }
}

/// A Type 1 (PCI-to-PCI bridge) header, as used by root ports and switch ports.
///
/// Bus numbers, the I/O window (32-bit), the memory window and the 64-bit
/// prefetchable window are all writable; their low bits report the decode width.
///
/// ```
/// use pcielab_config::{Type1, header::reg};
/// let mut cs = Type1::default().build().unwrap();
/// cs.write_u32(reg::PRIMARY_BUS as u16, 0x00ff_0100); // pri 0, sec 1, sub 0xff
/// assert_eq!(cs.read_u8(reg::SECONDARY_BUS), 1);
/// cs.write_u16(reg::MEM_BASE, 0xffff);
/// assert_eq!(cs.read_u16(reg::MEM_BASE), 0xfff0);
/// assert_eq!(cs.read_u16(reg::PREF_BASE) & 0xf, 1); // 64-bit prefetchable window
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Type1 {
    /// Identification (class is normally 0x060400, PCI-to-PCI bridge).
    pub ids: Ids,
    /// BAR0, BAR1.
    pub bars: [Option<Bar>; 2],
    /// Expansion ROM size, if any.
    pub rom_size: Option<u32>,
    /// Interrupt pin (0 none, 1 INTA … 4 INTD).
    pub interrupt_pin: u8,
    /// Multi-function device.
    pub multi_function: bool,
}

impl Default for Type1 {
    fn default() -> Self {
        Type1 {
            ids: Ids {
                vendor_id: crate::PCIELAB_VENDOR_ID,
                device_id: 0,
                revision: 0,
                class_code: 0x06_0400,
            },
            bars: [None; 2],
            rom_size: None,
            interrupt_pin: 1,
            multi_function: false,
        }
    }
}

impl Type1 {
    /// Builds the configuration space with this header and no capabilities.
    pub fn build(&self) -> Result<ConfigSpace, HeaderError> {
        let mut cs = ConfigSpace::new();
        let ht = 0x01 | if self.multi_function { 0x80 } else { 0 };
        common(&mut cs, self.ids, ht);
        install_bars(&mut cs, &self.bars, 2)?;
        cs.define(reg::PRIMARY_BUS, 3, 0xff_ffff, Access::Rw, 0);
        // I/O base/limit: bits 7:4 address, bits 3:0 = 1 (32-bit I/O decode).
        cs.define(reg::IO_BASE, 2, 0x0f0f, Access::Ro, 0x0101);
        cs.define(reg::IO_BASE, 2, 0xf0f0, Access::Rw, 0);
        cs.define(reg::SEC_STATUS, 2, status::ERRORS as u32, Access::Rw1c, 0);
        cs.define(reg::MEM_BASE, 4, 0xfff0_fff0, Access::Rw, 0);
        // Prefetchable base/limit: bits 3:0 = 1 (64-bit decode).
        cs.define(reg::PREF_BASE, 4, 0x000f_000f, Access::Ro, 0x0001_0001);
        cs.define(reg::PREF_BASE, 4, 0xfff0_fff0, Access::Rw, 0);
        cs.define(reg::PREF_BASE_UPPER, 4, 0xffff_ffff, Access::Rw, 0);
        cs.define(reg::PREF_LIMIT_UPPER, 4, 0xffff_ffff, Access::Rw, 0);
        cs.define(reg::IO_BASE_UPPER, 4, 0xffff_ffff, Access::Rw, 0);
        install_rom(&mut cs, reg::ROM1, self.rom_size)?;
        cs.define(
            reg::INT_PIN,
            1,
            0xff,
            Access::Ro,
            self.interrupt_pin.min(4) as u32,
        );
        // Bridge control: parity, SERR, ISA, VGA, VGA16, secondary bus reset.
        cs.define(reg::BRIDGE_CONTROL, 2, 0x005f, Access::Rw, 0);
        Ok(cs)
    }
}

/// The programmed window of a bridge, decoded from its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BridgeWindows {
    /// I/O window `[base, limit]` inclusive, if enabled (base ≤ limit).
    pub io: Option<(u32, u32)>,
    /// Memory window.
    pub mem: Option<(u64, u64)>,
    /// Prefetchable memory window.
    pub pref: Option<(u64, u64)>,
}

impl BridgeWindows {
    /// Reads the windows programmed in a Type 1 header.
    pub fn read(cs: &ConfigSpace) -> BridgeWindows {
        let io_base = ((cs.read_u8(reg::IO_BASE) as u32 & 0xf0) << 8)
            | ((cs.read_u16(reg::IO_BASE_UPPER) as u32) << 16);
        let io_limit = ((cs.read_u8(reg::IO_LIMIT) as u32 & 0xf0) << 8)
            | 0xfff
            | ((cs.read_u16(reg::IO_LIMIT_UPPER) as u32) << 16);
        let mem_base = ((cs.read_u16(reg::MEM_BASE) as u64) & 0xfff0) << 16;
        let mem_limit = (((cs.read_u16(reg::MEM_LIMIT) as u64) & 0xfff0) << 16) | 0xf_ffff;
        let pref_base = (((cs.read_u16(reg::PREF_BASE) as u64) & 0xfff0) << 16)
            | ((cs.read_u32(reg::PREF_BASE_UPPER) as u64) << 32);
        let pref_limit = (((cs.read_u16(reg::PREF_LIMIT) as u64) & 0xfff0) << 16)
            | 0xf_ffff
            | ((cs.read_u32(reg::PREF_LIMIT_UPPER) as u64) << 32);
        BridgeWindows {
            io: (io_base <= io_limit).then_some((io_base, io_limit)),
            mem: (mem_base <= mem_limit).then_some((mem_base, mem_limit)),
            pref: (pref_base <= pref_limit).then_some((pref_base, pref_limit)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size_bar(cs: &mut ConfigSpace, off: u16, is64: bool) -> (u32, u32) {
        cs.write_u32(off, 0xffff_ffff);
        let lo = cs.read_u32(off);
        let hi = if is64 {
            cs.write_u32(off + 4, 0xffff_ffff);
            cs.read_u32(off + 4)
        } else {
            0
        };
        (lo, hi)
    }

    #[test]
    fn bar_sizing_every_kind() {
        // (bar, expected low dword after all-ones, expected high dword)
        let cases = [
            (
                Bar::Mem32 {
                    size: 4096,
                    prefetchable: false,
                },
                0xffff_f000u32,
                0u32,
            ),
            (
                Bar::Mem32 {
                    size: 16,
                    prefetchable: true,
                },
                0xffff_fff8,
                0,
            ),
            (
                Bar::Mem64 {
                    size: 1 << 21,
                    prefetchable: false,
                },
                0xffe0_0004,
                0xffff_ffff,
            ),
            (
                Bar::Mem64 {
                    size: 1 << 36,
                    prefetchable: true,
                },
                0x0000_000c,
                0xffff_fff0,
            ),
            (Bar::Io { size: 256 }, 0xffff_ff01, 0),
            (Bar::Io { size: 4 }, 0xffff_fffd, 0),
        ];
        for (bar, lo, hi) in cases {
            let mut bars = [None; 6];
            bars[2] = Some(bar);
            let mut cs = Type0 {
                bars,
                ..Type0::default()
            }
            .build()
            .unwrap();
            let got = size_bar(&mut cs, 0x18, bar.slots() == 2);
            assert_eq!(got, (lo, hi), "{bar:?}");
            assert_eq!(Bar::from_sizing(got.0, got.1), Some(bar));
            // Programming an address keeps the flags and the aligned address bits.
            cs.write_u32(0x18, 0x1234_5678);
            let flag_bits = if matches!(bar, Bar::Io { .. }) {
                0x3
            } else {
                0xf
            };
            assert_eq!(
                cs.read_u32(0x18),
                (0x1234_5678 & lo & !flag_bits) | bar.flags(),
                "{bar:?}"
            );
        }
        // Unimplemented BARs read back 0.
        let mut cs = Type0::default().build().unwrap();
        assert_eq!(size_bar(&mut cs, 0x10, false), (0, 0));
        assert_eq!(Bar::from_sizing(0, 0), None);
    }

    #[test]
    fn rom_bar_sizing() {
        let mut cs = Type0 {
            rom_size: Some(64 * 1024),
            ..Type0::default()
        }
        .build()
        .unwrap();
        cs.write_u32(reg::ROM0, 0xffff_fffe);
        assert_eq!(cs.read_u32(reg::ROM0), 0xffff_0000);
        cs.write_u32(reg::ROM0, 0xffff_ffff);
        assert_eq!(cs.read_u32(reg::ROM0), 0xffff_0001);
        assert!(Type0 {
            rom_size: Some(1000),
            ..Type0::default()
        }
        .build()
        .is_err());
    }

    #[test]
    fn bad_bars_are_rejected() {
        let mut bars = [None; 6];
        bars[5] = Some(Bar::Mem64 {
            size: 4096,
            prefetchable: false,
        });
        let err = Type0 {
            bars,
            ..Type0::default()
        }
        .build()
        .unwrap_err();
        assert_eq!(err, HeaderError::BarSlot { index: 5, slots: 6 });
        let mut bars = [None; 6];
        bars[0] = Some(Bar::Mem32 {
            size: 3000,
            prefetchable: false,
        });
        assert!(matches!(
            Type0 {
                bars,
                ..Type0::default()
            }
            .build(),
            Err(HeaderError::BarSize { index: 0, .. })
        ));
        let mut bars = [None; 6];
        bars[0] = Some(Bar::Mem64 {
            size: 4096,
            prefetchable: false,
        });
        bars[1] = Some(Bar::Io { size: 8 });
        assert!(Type0 {
            bars,
            ..Type0::default()
        }
        .build()
        .is_err());
    }

    #[test]
    fn command_status_semantics() {
        let mut cs = Type0::default().build().unwrap();
        cs.write_u32(reg::COMMAND, 0xffff_ffff);
        // Command: only IO, MEM, BM, parity, SERR, INTx disable are writable; status
        // error bits are RW1C and start clear.
        assert_eq!(cs.read_u16(reg::COMMAND), 0x0547);
        assert_eq!(cs.read_u16(reg::STATUS), 0);
        cs.hw_update(reg::STATUS, 2, 0xffff, 0x2000 | 0x0010);
        cs.write_u16(reg::STATUS, 0x0010);
        assert_eq!(cs.read_u16(reg::STATUS), 0x2010);
        cs.write_u16(reg::STATUS, 0x2000);
        assert_eq!(cs.read_u16(reg::STATUS), 0x0010);
        cs.write_u16(reg::VENDOR_ID, 0);
        assert_eq!(cs.read_u16(reg::VENDOR_ID), crate::PCIELAB_VENDOR_ID);
    }

    #[test]
    fn bridge_windows_decode() {
        let mut cs = Type1::default().build().unwrap();
        assert_eq!(cs.read_u8(reg::HEADER_TYPE), 1);
        cs.write_u16(reg::MEM_BASE, 0xc010);
        cs.write_u16(reg::MEM_LIMIT, 0xc0f0);
        cs.write_u16(reg::PREF_BASE, 0x0000);
        cs.write_u16(reg::PREF_LIMIT, 0x0ff0);
        cs.write_u32(reg::PREF_BASE_UPPER, 0x80);
        cs.write_u32(reg::PREF_LIMIT_UPPER, 0x80);
        cs.write_u8(reg::IO_BASE, 0x20);
        cs.write_u8(reg::IO_LIMIT, 0x20);
        let w = BridgeWindows::read(&cs);
        assert_eq!(w.mem, Some((0xc010_0000, 0xc0ff_ffff)));
        assert_eq!(w.pref, Some((0x80_0000_0000, 0x80_0fff_ffff)));
        assert_eq!(w.io, Some((0x2000, 0x2fff)));
        // A base above its limit disables the window.
        cs.write_u16(reg::MEM_BASE, 0xfff0);
        cs.write_u16(reg::MEM_LIMIT, 0x0000);
        assert_eq!(BridgeWindows::read(&cs).mem, None);
    }
}
