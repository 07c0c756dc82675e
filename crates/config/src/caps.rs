//! Capability lists: a builder that places capabilities and links their next pointers,
//! the PCI capabilities (0x40–0xff) and a walker that lists what a space holds.
//!
//! The builder puts PCI capabilities one after another from 0x40 (dword aligned) and
//! extended capabilities from 0x100, writes every header (ID, version, next pointer —
//! all read-only), sets Status.Capabilities List and the Capabilities Pointer, and
//! returns where each one landed. The list always ends with a next pointer of 0.
//!
//! ```text
//! PCI capability header            extended capability header
//! 15        8 7         0          31      20 19  16 15              0
//! +----------+----------+          +---------+------+----------------+
//! |   Next   |    ID    |          |  Next   | Ver  |       ID       |
//! +----------+----------+          +---------+------+----------------+
//! ```
//!
//! ```
//! use pcielab_config::caps::{CapabilityList, MsiCap, PmCap};
//! use pcielab_config::Type0;
//! let mut cs = Type0::default().build().unwrap();
//! let placed = CapabilityList::new()
//!     .with(PmCap::default())
//!     .with(MsiCap { vectors: 4, addr64: true, per_vector_mask: true })
//!     .install(&mut cs)
//!     .unwrap();
//! assert_eq!((placed[0].offset, placed[1].offset), (0x40, 0x48));
//! assert_eq!(cs.read_u8(0x34), 0x40);
//! assert_eq!(cs.read_u16(0x40), 0x4801); // PM, next at 0x48
//! assert_eq!(cs.read_u16(0x48), 0x0005); // MSI, end of list
//! ```

use crate::space::{Access, ConfigSpace};
use pcielab_wire::Generation;

/// A PCI capability (in the first 256 bytes).
pub trait Capability: core::fmt::Debug {
    /// Capability ID.
    fn id(&self) -> u8;
    /// Length in bytes, header included.
    fn size(&self) -> u16;
    /// Defines the registers after the 2-byte header at offset `at`.
    fn install(&self, cs: &mut ConfigSpace, at: u16);
}

/// A PCI Express extended capability (at 0x100 and above).
pub trait ExtCapability: core::fmt::Debug {
    /// Extended capability ID.
    fn id(&self) -> u16;
    /// Capability version.
    fn version(&self) -> u8;
    /// Length in bytes, header included.
    fn size(&self) -> u16;
    /// Defines the registers after the 4-byte header at offset `at`.
    fn install(&self, cs: &mut ConfigSpace, at: u16);
}

/// Where the builder put one capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Placed {
    /// Capability ID.
    pub id: u16,
    /// True for an extended capability.
    pub extended: bool,
    /// Offset of its header.
    pub offset: u16,
    /// Length in bytes.
    pub len: u16,
}

/// The capabilities do not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapSpaceExhausted {
    /// True when the extended area (0x100–0xfff) overflowed, false for 0x40–0xff.
    pub extended: bool,
    /// Bytes that would have been needed past the area's start.
    pub needed: usize,
}

impl core::fmt::Display for CapSpaceExhausted {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.extended {
            write!(
                f,
                "extended capabilities need {} bytes but only 3840 (0x100..0x1000) exist",
                self.needed
            )
        } else {
            write!(
                f,
                "PCI capabilities need {} bytes but only 192 (0x40..0x100) exist",
                self.needed
            )
        }
    }
}

impl std::error::Error for CapSpaceExhausted {}

/// An ordered list of capabilities to install into a header.
#[derive(Debug, Default)]
pub struct CapabilityList {
    pci: Vec<Box<dyn Capability>>,
    ext: Vec<Box<dyn ExtCapability>>,
}

impl CapabilityList {
    /// An empty list.
    pub fn new() -> CapabilityList {
        CapabilityList::default()
    }
    /// Appends a PCI capability.
    pub fn with(mut self, cap: impl Capability + 'static) -> Self {
        self.pci.push(Box::new(cap));
        self
    }
    /// Appends an extended capability.
    pub fn with_ext(mut self, cap: impl ExtCapability + 'static) -> Self {
        self.ext.push(Box::new(cap));
        self
    }
    /// Appends a boxed PCI capability.
    pub fn push(&mut self, cap: Box<dyn Capability>) {
        self.pci.push(cap);
    }
    /// Appends a boxed extended capability.
    pub fn push_ext(&mut self, cap: Box<dyn ExtCapability>) {
        self.ext.push(cap);
    }

    /// Places and links every capability in `cs`.
    pub fn install(&self, cs: &mut ConfigSpace) -> Result<Vec<Placed>, CapSpaceExhausted> {
        let mut placed = Vec::new();
        let mut at: usize = 0x40;
        let mut prev: Option<u16> = None;
        for cap in &self.pci {
            let len = (cap.size().max(2) as usize + 3) & !3;
            if at + len > 0x100 {
                return Err(CapSpaceExhausted {
                    extended: false,
                    needed: at + len - 0x40,
                });
            }
            let off = at as u16;
            cs.define(off, 1, 0xff, Access::Ro, cap.id() as u32);
            cs.define(off + 1, 1, 0xff, Access::Ro, 0);
            match prev {
                Some(p) => cs.define(p + 1, 1, 0xff, Access::Ro, off as u32),
                None => {
                    cs.define(crate::header::reg::CAP_PTR, 1, 0xff, Access::Ro, off as u32);
                    let cl = crate::header::status::CAP_LIST as u32;
                    cs.define(crate::header::reg::STATUS, 2, cl, Access::Ro, cl);
                }
            }
            cap.install(cs, off);
            placed.push(Placed {
                id: cap.id() as u16,
                extended: false,
                offset: off,
                len: cap.size(),
            });
            prev = Some(off);
            at += len;
        }
        let mut at: usize = 0x100;
        let mut prev: Option<u16> = None;
        for cap in &self.ext {
            let len = (cap.size().max(4) as usize + 3) & !3;
            if at + len > 0x1000 {
                return Err(CapSpaceExhausted {
                    extended: true,
                    needed: at + len - 0x100,
                });
            }
            let off = at as u16;
            let hdr = cap.id() as u32 | ((cap.version() as u32 & 0xf) << 16);
            cs.define(off, 4, 0xffff_ffff, Access::Ro, hdr);
            if let Some(p) = prev {
                cs.define(p, 4, 0xfff0_0000, Access::Ro, (off as u32) << 20);
            }
            cap.install(cs, off);
            placed.push(Placed {
                id: cap.id(),
                extended: true,
                offset: off,
                len: cap.size(),
            });
            prev = Some(off);
            at += len;
        }
        Ok(placed)
    }
}

/// Capability IDs and names.
pub mod id {
    /// Power Management.
    pub const PM: u8 = 0x01;
    /// MSI.
    pub const MSI: u8 = 0x05;
    /// Vendor specific.
    pub const VENDOR: u8 = 0x09;
    /// Bridge subsystem vendor ID.
    pub const SSVID: u8 = 0x0d;
    /// PCI Express.
    pub const PCIE: u8 = 0x10;
    /// MSI-X.
    pub const MSIX: u8 = 0x11;
    /// Extended: Advanced Error Reporting.
    pub const EXT_AER: u16 = 0x0001;
    /// Extended: Device Serial Number.
    pub const EXT_DSN: u16 = 0x0003;
    /// Extended: Access Control Services.
    pub const EXT_ACS: u16 = 0x000d;
    /// Extended: Alternative Routing-ID Interpretation.
    pub const EXT_ARI: u16 = 0x000e;
    /// Extended: Address Translation Services.
    pub const EXT_ATS: u16 = 0x000f;
    /// Extended: Single Root I/O Virtualization.
    pub const EXT_SRIOV: u16 = 0x0010;
    /// Extended: Page Request Interface (ATS).
    pub const EXT_PRI: u16 = 0x0013;
    /// Extended: Latency Tolerance Reporting.
    pub const EXT_LTR: u16 = 0x0018;
    /// Extended: Process Address Space ID.
    pub const EXT_PASID: u16 = 0x001b;
    /// Extended: Downstream Port Containment.
    pub const EXT_DPC: u16 = 0x001d;
    /// Extended: L1 PM Substates.
    pub const EXT_L1SS: u16 = 0x001e;

    /// The name of a PCI capability ID.
    pub fn name(id: u8) -> &'static str {
        match id {
            0x01 => "Power Management",
            0x02 => "AGP",
            0x03 => "Vital Product Data",
            0x04 => "Slot Identification",
            0x05 => "MSI",
            0x06 => "CompactPCI Hot Swap",
            0x07 => "PCI-X",
            0x08 => "HyperTransport",
            0x09 => "Vendor Specific",
            0x0a => "Debug port",
            0x0b => "CompactPCI central resource control",
            0x0c => "PCI Hot-plug",
            0x0d => "Subsystem vendor ID (bridge)",
            0x0e => "AGP 8x",
            0x0f => "Secure Device",
            0x10 => "PCI Express",
            0x11 => "MSI-X",
            0x12 => "SATA",
            0x13 => "Advanced Features",
            0x14 => "Enhanced Allocation",
            0x15 => "Flattening Portal Bridge",
            _ => "unknown",
        }
    }

    /// The name of an extended capability ID.
    pub fn ext_name(id: u16) -> &'static str {
        match id {
            0x0001 => "Advanced Error Reporting",
            0x0002 | 0x0009 => "Virtual Channel",
            0x0003 => "Device Serial Number",
            0x0004 => "Power Budgeting",
            0x0005 => "Root Complex Link Declaration",
            0x0006 => "Root Complex Internal Link Control",
            0x0007 => "Root Complex Event Collector Endpoint Association",
            0x0008 => "Multi-Function Virtual Channel",
            0x000a => "RCRB Header",
            0x000b => "Vendor Specific",
            0x000c => "Configuration Access Correlation",
            0x000d => "Access Control Services",
            0x000e => "Alternative Routing-ID Interpretation",
            0x000f => "Address Translation Services",
            0x0010 => "Single Root I/O Virtualization",
            0x0011 => "Multi-Root I/O Virtualization",
            0x0012 => "Multicast",
            0x0013 => "Page Request Interface",
            0x0015 => "Resizable BAR",
            0x0016 => "Dynamic Power Allocation",
            0x0017 => "TPH Requester",
            0x0018 => "Latency Tolerance Reporting",
            0x0019 => "Secondary PCI Express",
            0x001a => "Protocol Multiplexing",
            0x001b => "Process Address Space ID",
            0x001d => "Downstream Port Containment",
            0x001e => "L1 PM Substates",
            0x001f => "Precision Time Measurement",
            0x0023 => "Designated Vendor-Specific",
            0x0024 => "VF Resizable BAR",
            0x0025 => "Data Link Feature",
            0x0026 => "Physical Layer 16.0 GT/s",
            0x0027 => "Lane Margining at the Receiver",
            0x002a => "Physical Layer 32.0 GT/s",
            _ => "unknown",
        }
    }
}

/// One capability found by [`walk`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Found {
    /// Capability ID.
    pub id: u16,
    /// Version (extended capabilities only; 0 otherwise).
    pub version: u8,
    /// True for an extended capability.
    pub extended: bool,
    /// Offset of the header.
    pub offset: u16,
}

/// What went wrong while walking a capability list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalkError {
    /// A next pointer points back to a capability already seen.
    Loop {
        /// Offset of the pointer's capability.
        from: u16,
        /// Where it points.
        to: u16,
    },
    /// A pointer leaves its area (below 0x40 / past 0xff, or below 0x100 for extended).
    OutOfRange {
        /// Offset of the pointer's capability (0x34 for the first).
        from: u16,
        /// Where it points.
        to: u16,
    },
}

impl core::fmt::Display for WalkError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            WalkError::Loop { from, to } => {
                write!(f, "capability at {from:#x} points back to {to:#x} (a loop)")
            }
            WalkError::OutOfRange { from, to } => {
                write!(
                    f,
                    "capability pointer at {from:#x} points to {to:#x}, outside its area"
                )
            }
        }
    }
}

/// The offset of the first capability with ID `id` on the PCI (not extended) list of a
/// dump, or `None` when the list has none before it ends or breaks (a loop, or a
/// pointer outside 0x40..=0xff): what [`walk`] finds first, without building the
/// list. Allocates nothing, so it suits paths taken per TLP or per interrupt.
///
/// ```
/// use pcielab_config::caps::{find, id, CapabilityList, MsixCap, PmCap};
/// use pcielab_config::Type0;
/// let mut cs = Type0::default().build().unwrap();
/// CapabilityList::new()
///     .with(PmCap::default())
///     .with(MsixCap { table_size: 4, table_bir: 2, table_offset: 0, pba_bir: 2, pba_offset: 0x800 })
///     .install(&mut cs)
///     .unwrap();
/// let at = find(cs.bytes(), id::MSIX).unwrap();
/// assert_eq!(cs.bytes()[at as usize], id::MSIX);
/// assert_eq!(find(cs.bytes(), id::MSI), None);
/// ```
pub fn find(bytes: &[u8], id: u8) -> Option<u16> {
    let rd8 = |o: usize| bytes.get(o).copied().unwrap_or(0);
    let status = rd8(6) as u16 | (rd8(7) as u16) << 8;
    if status & crate::header::status::CAP_LIST == 0 || bytes.len() <= 0x40 {
        return None;
    }
    // Offsets are DW-aligned: 48 distinct ones fit in 0x40..=0xff, so a list longer
    // than that has a loop.
    let mut at = (rd8(0x34) & 0xfc) as usize;
    for _ in 0..48 {
        if at < 0x40 {
            return None;
        }
        if rd8(at) == id {
            return Some(at as u16);
        }
        at = (rd8(at + 1) & 0xfc) as usize;
    }
    None
}

/// Walks the PCI and extended capability lists of a dump (64, 256 or 4096 bytes).
///
/// Returns what was found before any error, and the error.
pub fn walk(bytes: &[u8]) -> (Vec<Found>, Option<WalkError>) {
    let rd8 = |o: usize| bytes.get(o).copied().unwrap_or(0);
    let rd32 = |o: usize| u32::from_le_bytes([rd8(o), rd8(o + 1), rd8(o + 2), rd8(o + 3)]);
    let mut found = Vec::new();
    let status = rd8(6) as u16 | (rd8(7) as u16) << 8;
    if status & crate::header::status::CAP_LIST != 0 && bytes.len() > 0x40 {
        let mut seen = [false; 256];
        let mut from = 0x34u16;
        let mut at = (rd8(0x34) & 0xfc) as usize;
        while at != 0 {
            if at < 0x40 {
                return (
                    found,
                    Some(WalkError::OutOfRange {
                        from,
                        to: at as u16,
                    }),
                );
            }
            if seen[at] {
                return (
                    found,
                    Some(WalkError::Loop {
                        from,
                        to: at as u16,
                    }),
                );
            }
            seen[at] = true;
            found.push(Found {
                id: rd8(at) as u16,
                version: 0,
                extended: false,
                offset: at as u16,
            });
            from = at as u16;
            at = (rd8(at + 1) & 0xfc) as usize;
        }
    }
    if bytes.len() > 0x100 {
        // One bit per DW offset below 4 KiB (on the stack: callers may walk often).
        let mut seen = [0u64; 16];
        let mut from = 0x100u16;
        let mut at = 0x100usize;
        loop {
            let hdr = rd32(at);
            if hdr == 0 || hdr == 0xffff_ffff {
                break;
            }
            let (word, bit) = (at / 4 / 64, 1u64 << (at / 4 % 64));
            if seen[word] & bit != 0 {
                return (
                    found,
                    Some(WalkError::Loop {
                        from,
                        to: at as u16,
                    }),
                );
            }
            seen[word] |= bit;
            found.push(Found {
                id: (hdr & 0xffff) as u16,
                version: ((hdr >> 16) & 0xf) as u8,
                extended: true,
                offset: at as u16,
            });
            let next = ((hdr >> 20) & 0xffc) as usize;
            if next == 0 {
                break;
            }
            if next < 0x100 || next >= bytes.len().min(0x1000) {
                return (
                    found,
                    Some(WalkError::OutOfRange {
                        from: at as u16,
                        to: next as u16,
                    }),
                );
            }
            from = at as u16;
            at = next;
        }
    }
    (found, None)
}

// ---------------------------------------------------------------------------------
// Power Management

/// Power Management capability (ID 0x01), version 3, D0 and D3hot only.
///
/// ```text
/// +0  | PMC (RO)              | Next | ID   |
/// +4  | Data | BSE | PMCSR: PME_Status(15, RW1CS) PME_En(8, RWS)
///                          NoSoftReset(3, RO=1) PowerState(1:0, RW) |
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PmCap {
    /// PME can be asserted from D0 and D3hot (PMC bits 11 and 14).
    pub pme: bool,
}

impl Capability for PmCap {
    fn id(&self) -> u8 {
        id::PM
    }
    fn size(&self) -> u16 {
        8
    }
    fn install(&self, cs: &mut ConfigSpace, at: u16) {
        let pme = if self.pme { (1 << 11) | (1 << 14) } else { 0 };
        cs.define(at + 2, 2, 0xffff, Access::Ro, 0x0003 | pme);
        cs.define(at + 4, 4, 0xffff_ffff, Access::RsvdP, 0);
        cs.define(at + 4, 4, 0x0008, Access::Ro, 0x0008);
        cs.define(at + 4, 4, 0x0003, Access::Rw, 0);
        if self.pme {
            cs.define(at + 4, 4, 0x0100, Access::Rw, 0);
        }
        cs.define(at + 4, 4, 0x8000, Access::Rw1c, 0);
        cs.set_sticky(at + 4, 4, 0x8100);
    }
}

// ---------------------------------------------------------------------------------
// MSI

/// MSI capability (ID 0x05).
///
/// ```text
/// +0  | Message Control: PVM(8) 64b(7) MME(6:4,RW) MMC(3:1) En(0,RW) | Next | ID |
/// +4  | Message Address [31:2] (RW)                                             |
/// +8  | Message Upper Address (RW)               (64-bit only)                  |
/// +8/+C | Message Data [15:0] (RW)                                              |
/// +C/+10 | Mask Bits (RW, one per vector)         (per-vector masking only)      |
/// +10/+14 | Pending Bits (RO)                     (per-vector masking only)      |
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsiCap {
    /// Vectors requested: 1, 2, 4, 8, 16 or 32 (rounded up to a power of two).
    pub vectors: u8,
    /// 64-bit message address.
    pub addr64: bool,
    /// Per-vector masking.
    pub per_vector_mask: bool,
}

impl MsiCap {
    /// log2 of the vector count (Multiple Message Capable).
    pub fn mmc(&self) -> u8 {
        let v = (self.vectors.clamp(1, 32) as u32).next_power_of_two();
        v.trailing_zeros() as u8
    }
    /// Offset of Message Data from the header.
    pub fn data_offset(&self) -> u16 {
        if self.addr64 {
            0xc
        } else {
            0x8
        }
    }
    /// Offset of the mask bits from the header (per-vector masking only).
    pub fn mask_offset(&self) -> u16 {
        self.data_offset() + 4
    }
}

impl Capability for MsiCap {
    fn id(&self) -> u8 {
        id::MSI
    }
    fn size(&self) -> u16 {
        let base = if self.addr64 { 0x10 } else { 0x0c };
        if self.per_vector_mask {
            base + 8
        } else {
            base
        }
    }
    fn install(&self, cs: &mut ConfigSpace, at: u16) {
        let ro = ((self.mmc() as u32) << 1)
            | if self.addr64 { 1 << 7 } else { 0 }
            | if self.per_vector_mask { 1 << 8 } else { 0 };
        cs.define(at + 2, 2, 0xffff, Access::RsvdP, 0);
        cs.define(at + 2, 2, 0x018e, Access::Ro, ro);
        cs.define(at + 2, 2, 0x0071, Access::Rw, 0);
        cs.define(at + 4, 4, 0xffff_fffc, Access::Rw, 0);
        if self.addr64 {
            cs.define(at + 8, 4, 0xffff_ffff, Access::Rw, 0);
        }
        cs.define(at + self.data_offset(), 4, 0x0000_ffff, Access::Rw, 0);
        if self.per_vector_mask {
            let n = 1u64 << self.mmc();
            let mask = ((1u64 << n) - 1) as u32;
            cs.define(at + self.mask_offset(), 4, mask, Access::Rw, 0);
        }
    }
}

// ---------------------------------------------------------------------------------
// MSI-X

/// MSI-X capability (ID 0x11). The table and PBA live in a BAR ([`MsixTable`]).
///
/// ```text
/// +0  | Message Control: En(15,RW) FnMask(14,RW) TableSize-1(10:0,RO) | Next | ID |
/// +4  | Table Offset [31:3] | Table BIR [2:0]   (RO)                            |
/// +8  | PBA Offset [31:3]   | PBA BIR [2:0]     (RO)                            |
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsixCap {
    /// Number of table entries, 1..=2048.
    pub table_size: u16,
    /// BAR holding the table.
    pub table_bir: u8,
    /// Offset of the table in that BAR (8-byte aligned).
    pub table_offset: u32,
    /// BAR holding the PBA.
    pub pba_bir: u8,
    /// Offset of the PBA in that BAR (8-byte aligned).
    pub pba_offset: u32,
}

impl Capability for MsixCap {
    fn id(&self) -> u8 {
        id::MSIX
    }
    fn size(&self) -> u16 {
        12
    }
    fn install(&self, cs: &mut ConfigSpace, at: u16) {
        let n = self.table_size.clamp(1, 2048) - 1;
        cs.define(at + 2, 2, 0xffff, Access::RsvdP, 0);
        cs.define(at + 2, 2, 0x07ff, Access::Ro, n as u32);
        cs.define(at + 2, 2, 0xc000, Access::Rw, 0);
        cs.define(
            at + 4,
            4,
            0xffff_ffff,
            Access::Ro,
            (self.table_offset & !7) | (self.table_bir as u32 & 7),
        );
        cs.define(
            at + 8,
            4,
            0xffff_ffff,
            Access::Ro,
            (self.pba_offset & !7) | (self.pba_bir as u32 & 7),
        );
    }
}

/// The MSI-X table and Pending Bit Array a function keeps in BAR memory.
///
/// ```text
/// entry n at table_offset + 16n:
/// +0 Message Address (RW, [1:0] zero)  +4 Upper Address (RW)
/// +8 Message Data (RW)                 +C Vector Control: Mask(0, RW, set at reset)
/// ```
///
/// ```
/// use pcielab_config::caps::MsixTable;
/// let mut t = MsixTable::new(4);
/// t.write(0x10, &0xfee0_0000u32.to_le_bytes());
/// t.write(0x18, &0x41u32.to_le_bytes());
/// t.write(0x1c, &0u32.to_le_bytes()); // unmask vector 1
/// assert_eq!(t.entry(1), Some((0xfee0_0000, 0x41, false)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MsixTable {
    entries: Vec<[u32; 4]>,
    pending: Vec<u64>,
}

impl MsixTable {
    /// A table of `n` entries, each masked (as after reset).
    pub fn new(n: u16) -> MsixTable {
        let n = n.clamp(1, 2048) as usize;
        MsixTable {
            entries: vec![[0, 0, 0, 1]; n],
            pending: vec![0; n.div_ceil(64)],
        }
    }
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// True when the table has no entries (never: at least one).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// Size in bytes of the table (16 per entry).
    pub fn table_bytes(&self) -> u32 {
        16 * self.entries.len() as u32
    }
    /// `(address, data, masked)` of entry `n`.
    pub fn entry(&self, n: usize) -> Option<(u64, u32, bool)> {
        self.entries
            .get(n)
            .map(|e| ((e[1] as u64) << 32 | e[0] as u64, e[2], e[3] & 1 != 0))
    }
    /// Reads table bytes at `offset` (a table offset); bytes outside read 0.
    pub fn read(&self, offset: u64, buf: &mut [u8]) {
        for (i, b) in buf.iter_mut().enumerate() {
            let o = offset + i as u64;
            let (e, w, s) = ((o / 16) as usize, ((o % 16) / 4) as usize, (o % 4) * 8);
            *b = self.entries.get(e).map_or(0, |e| (e[w] >> s) as u8);
        }
    }
    /// Writes table bytes at `offset`; only writable bits change.
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        for (i, &b) in data.iter().enumerate() {
            let o = offset + i as u64;
            let (e, w, s) = ((o / 16) as usize, ((o % 16) / 4) as usize, (o % 4) * 8);
            let Some(e) = self.entries.get_mut(e) else {
                continue;
            };
            let writable: u32 = match w {
                0 => 0xffff_fffc,
                3 => 1,
                _ => 0xffff_ffff,
            };
            let m = writable & (0xff << s);
            e[w] = (e[w] & !m) | (((b as u32) << s) & m);
        }
    }
    /// Reads PBA bytes at `offset` (relative to the PBA).
    pub fn read_pba(&self, offset: u64, buf: &mut [u8]) {
        for (i, b) in buf.iter_mut().enumerate() {
            let o = offset + i as u64;
            *b = self
                .pending
                .get((o / 8) as usize)
                .map_or(0, |q| (q >> ((o % 8) * 8)) as u8);
        }
    }
    /// The pending bit of entry `n`.
    pub fn is_pending(&self, n: usize) -> bool {
        n < self.entries.len() && self.pending[n / 64] >> (n % 64) & 1 != 0
    }
    /// Size in bytes of the Pending Bit Array (whole QWORDs).
    pub fn pba_bytes(&self) -> u32 {
        8 * self.pending.len() as u32
    }
    /// Sets or clears the pending bit of entry `n`.
    pub fn set_pending(&mut self, n: usize, pending: bool) {
        if n < self.entries.len() {
            let (q, b) = (n / 64, n % 64);
            if pending {
                self.pending[q] |= 1 << b;
            } else {
                self.pending[q] &= !(1 << b);
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// PCI Express

/// The Device/Port Type of the PCI Express capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortType {
    /// PCI Express Endpoint (0000b).
    Endpoint,
    /// Legacy PCI Express Endpoint (0001b).
    LegacyEndpoint,
    /// Root Port of a Root Complex (0100b).
    RootPort,
    /// Upstream Port of a switch (0101b).
    UpstreamPort,
    /// Downstream Port of a switch (0110b).
    DownstreamPort,
    /// Root Complex Integrated Endpoint (1001b).
    RcIntegratedEndpoint,
    /// Root Complex Event Collector (1010b).
    RcEventCollector,
}

impl PortType {
    /// The 4-bit encoding.
    pub const fn raw(self) -> u8 {
        match self {
            PortType::Endpoint => 0,
            PortType::LegacyEndpoint => 1,
            PortType::RootPort => 4,
            PortType::UpstreamPort => 5,
            PortType::DownstreamPort => 6,
            PortType::RcIntegratedEndpoint => 9,
            PortType::RcEventCollector => 10,
        }
    }
    /// Decodes the 4-bit encoding.
    pub const fn from_raw(raw: u8) -> Option<PortType> {
        Some(match raw {
            0 => PortType::Endpoint,
            1 => PortType::LegacyEndpoint,
            4 => PortType::RootPort,
            5 => PortType::UpstreamPort,
            6 => PortType::DownstreamPort,
            9 => PortType::RcIntegratedEndpoint,
            10 => PortType::RcEventCollector,
            _ => return None,
        })
    }
    /// True for root and switch downstream ports (they have a slot and link control).
    pub const fn is_downstream(self) -> bool {
        matches!(self, PortType::RootPort | PortType::DownstreamPort)
    }
    /// True for functions that issue and complete requests (endpoints and root ports).
    pub const fn is_requester(self) -> bool {
        !matches!(self, PortType::UpstreamPort | PortType::DownstreamPort)
    }
    /// True for the kinds whose link registers are meaningful.
    pub const fn has_link(self) -> bool {
        !matches!(
            self,
            PortType::RcIntegratedEndpoint | PortType::RcEventCollector
        )
    }
    /// The name lspci prints.
    pub const fn name(self) -> &'static str {
        match self {
            PortType::Endpoint => "Endpoint",
            PortType::LegacyEndpoint => "Legacy Endpoint",
            PortType::RootPort => "Root Port",
            PortType::UpstreamPort => "Upstream Port",
            PortType::DownstreamPort => "Downstream Port",
            PortType::RcIntegratedEndpoint => "Root Complex Integrated Endpoint",
            PortType::RcEventCollector => "Root Complex Event Collector",
        }
    }
}

/// Encodes a payload/read-request size in bytes (128..=4096) as the 3-bit field.
pub fn size_code(bytes: u16) -> u8 {
    let b = bytes.clamp(128, 4096).next_power_of_two().min(4096);
    (b.trailing_zeros() - 7) as u8
}

/// Decodes the 3-bit payload/read-request size field (values above 5 are reserved;
/// they decode as 4096).
pub fn size_from_code(code: u8) -> u16 {
    128u16 << (code.min(5))
}

/// PCI Express capability (ID 0x10), version 2, 0x3c bytes.
///
/// ```text
/// +00 | PCIe Capabilities: SlotImpl(8) Type(7:4) Ver(3:0)=2     | Next | ID |
/// +04 | Device Capabilities: FLR(28) RBER(15) ExtTag(5) MPS(2:0)             |
/// +08 | Device Status (RW1C 3:0)  | Device Control: MRRS(14:12) NoSnoop(11)   |
/// |   |                           | ExtTag(8) MPS(7:5) RO(4) ErrRep(3:0)      |
/// +0C | Link Capabilities: Port#(31:24) BWNot(21) DLLActRep(20) L1Exit(17:15)|
/// |   |            L0sExit(14:12) ASPM(11:10) Width(9:4) MaxSpeed(3:0)        |
/// +10 | Link Status: DLLAct(13) SlotClk(12) Width(9:4) Speed(3:0) | Link Ctl: |
/// |   |                                                 ASPM Control(1:0)     |
/// +14 | Slot Capabilities: Slot#(31:19) NoCmdCpl(18) PowerLimit(16:7)       |
/// +18 | Slot Status: PresDet(6)      | Slot Control                           |
/// +1C | Root Capabilities            | Root Control (root ports)              |
/// +20 | Root Status (root ports)                                              |
/// +24 | Device Capabilities 2: 10bTagReq(17) 10bTagCpl(16) LTR(11)           |
/// |   |   CAS128(9) Atomic64(8) Atomic32(7) AtomicRoute(6) ARIFwd(5) CTo(4:0)|
/// +28 | Device Status 2              | Device Control 2                       |
/// +2C | Link Capabilities 2: Supported Link Speeds Vector (7:1)              |
/// +30 | Link Status 2                | Link Control 2: TargetSpeed(3:0)       |
/// +34 | Slot Capabilities 2   +38 Slot Status 2 | Slot Control 2              |
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PcieCap {
    /// Device/port type.
    pub port_type: PortType,
    /// Largest Max_Payload_Size supported, in bytes (128..=4096).
    pub max_payload: u16,
    /// Extended (8-bit) tags supported.
    pub ext_tag: bool,
    /// 10-bit tags supported (requester and completer).
    pub ten_bit_tag: bool,
    /// Function Level Reset supported (endpoints).
    pub flr: bool,
    /// Highest supported link speed.
    pub max_speed: Generation,
    /// Widest supported link (1, 2, 4, 8, 12, 16, 32).
    pub max_width: u8,
    /// The trained link, if the port's link is up: speed and width.
    pub link: Option<(Generation, u8)>,
    /// Port number (LinkCap bits 31:24).
    pub port_number: u8,
    /// Physical slot number; `Some` marks a slot (downstream and root ports).
    pub slot: Option<u16>,
    /// The slot is hot-plug capable, surprise removal included (Slot Capabilities
    /// Hot-Plug Capable and Hot-Plug Surprise).
    pub hotplug: bool,
    /// With `hotplug`: the slot has a power controller, an attention button and both
    /// indicators, and expects orderly removal (Hot-Plug Surprise clear). The slot is
    /// powered, its power indicator on, at power-up.
    pub hotplug_power: bool,
    /// AtomicOp completer (32/64-bit and 128-bit CAS) supported (Device Capabilities 2
    /// bits 9:7; endpoints and root ports: a root port completes for host memory).
    pub atomics: bool,
    /// LTR mechanism supported.
    pub ltr: bool,
    /// Active State Power Management support (Link Capabilities bits 11:10):
    /// [`ASPM_L0S`] and/or [`ASPM_L1`].
    pub aspm: u8,
    /// End-End TLP Prefixes supported (Device Capabilities 2 bit 21, up to four: bits
    /// 23:22 = 00b), as a function with a PASID capability needs. A root or switch
    /// port then also implements End-End TLP Prefix Blocking (Device Control 2 bit 15).
    pub e2e_prefix: bool,
    /// L0s Exit Latency field (bits 14:12): see [`l0s_exit_code`].
    pub l0s_exit: u8,
    /// L1 Exit Latency field (bits 17:15): see [`l1_exit_code`].
    pub l1_exit: u8,
}

/// Device Control 2: End-End TLP Prefix Blocking (bit 15, root and switch ports with
/// [`PcieCap::e2e_prefix`]): the port does not forward TLPs that carry End-End TLP
/// Prefixes out of its egress.
pub const DEVCTL2_E2E_PREFIX_BLOCKING: u16 = 1 << 15;

/// Device Capabilities 2: AtomicOp Routing Supported (switch and root ports).
pub const DEVCAP2_ATOMIC_ROUTING: u32 = 1 << 6;
/// Device Capabilities 2: 32-bit AtomicOp Completer Supported (FetchAdd, Swap, CAS).
pub const DEVCAP2_ATOMIC_COMPLETER_32: u32 = 1 << 7;
/// Device Capabilities 2: 64-bit AtomicOp Completer Supported (FetchAdd, Swap, CAS).
pub const DEVCAP2_ATOMIC_COMPLETER_64: u32 = 1 << 8;
/// Device Capabilities 2: 128-bit CAS Completer Supported.
pub const DEVCAP2_CAS_COMPLETER_128: u32 = 1 << 9;
/// Device Control 2: AtomicOp Requester Enable (endpoints and root ports): with Bus
/// Master Enable, the function may issue AtomicOp requests.
pub const DEVCTL2_ATOMIC_REQUESTER: u16 = 1 << 6;
/// Device Control 2: AtomicOp Egress Blocking (switch and root ports): AtomicOp
/// requests that would leave by this port are refused (Unsupported Request, AtomicOp
/// Egress Blocked logged).
pub const DEVCTL2_ATOMIC_EGRESS_BLOCKING: u16 = 1 << 7;

/// ASPM L0s (in [`PcieCap::aspm`], and in Link Control's ASPM Control field).
pub const ASPM_L0S: u8 = 1;
/// ASPM L1 (in [`PcieCap::aspm`], and in Link Control's ASPM Control field).
pub const ASPM_L1: u8 = 2;

/// The Link Capabilities L0s Exit Latency code of an exit taking `ps` picoseconds:
/// 0 is less than 64 ns, then 64–128 ns, 128–256 ns, 256–512 ns, 512 ns–1 µs,
/// 1–2 µs, 2–4 µs (6), and 7 is 4 µs or more.
///
/// ```
/// use pcielab_config::caps::l0s_exit_code;
/// assert_eq!(l0s_exit_code(63_999), 0);
/// assert_eq!(l0s_exit_code(64_000), 1);
/// assert_eq!(l0s_exit_code(1_072_500), 5); // 1 µs to less than 2 µs
/// assert_eq!(l0s_exit_code(4_000_000), 7);
/// ```
pub fn l0s_exit_code(ps: u64) -> u8 {
    exit_code(ps, &[64, 128, 256, 512, 1_000, 2_000, 4_000])
}

/// The Link Capabilities L1 Exit Latency code of an exit taking `ps` picoseconds: 0
/// is less than 1 µs, each code up to 6 doubles the bound (6: 32 µs to less than
/// 64 µs), and 7 is 64 µs or more.
///
/// ```
/// use pcielab_config::caps::l1_exit_code;
/// assert_eq!(l1_exit_code(999_999), 0);
/// assert_eq!(l1_exit_code(2_000_000), 2); // 2 µs to less than 4 µs
/// assert_eq!(l1_exit_code(64_000_000), 7);
/// ```
pub fn l1_exit_code(ps: u64) -> u8 {
    exit_code(ps, &[1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000])
}

/// The first code whose upper bound (in ns) `ps` is below; 7 past the last.
fn exit_code(ps: u64, bounds_ns: &[u64; 7]) -> u8 {
    bounds_ns
        .iter()
        .position(|&b| ps < b * 1000)
        .map_or(7, |c| c as u8)
}

impl PcieCap {
    /// A capability of the given type with defaults (256-byte MPS, extended and 10-bit
    /// tags, Gen3 x16 supported, no link, no ASPM).
    pub fn new(port_type: PortType) -> PcieCap {
        PcieCap {
            port_type,
            max_payload: 256,
            ext_tag: true,
            ten_bit_tag: true,
            flr: matches!(port_type, PortType::Endpoint),
            max_speed: Generation::Gen3,
            max_width: 16,
            link: None,
            port_number: 0,
            slot: None,
            hotplug: false,
            hotplug_power: false,
            atomics: false,
            ltr: true,
            aspm: 0,
            l0s_exit: 0,
            l1_exit: 0,
            e2e_prefix: false,
        }
    }
}

/// Register offsets inside the PCI Express capability.
pub mod pcie_reg {
    /// PCI Express Capabilities register.
    pub const CAPS: u16 = 0x02;
    /// Device Capabilities.
    pub const DEVCAP: u16 = 0x04;
    /// Device Control.
    pub const DEVCTL: u16 = 0x08;
    /// Device Status.
    pub const DEVSTA: u16 = 0x0a;
    /// Link Capabilities.
    pub const LNKCAP: u16 = 0x0c;
    /// Link Control.
    pub const LNKCTL: u16 = 0x10;
    /// Link Status.
    pub const LNKSTA: u16 = 0x12;
    /// Slot Capabilities.
    pub const SLTCAP: u16 = 0x14;
    /// Slot Control.
    pub const SLTCTL: u16 = 0x18;
    /// Slot Status.
    pub const SLTSTA: u16 = 0x1a;
    /// Root Control.
    pub const RTCTL: u16 = 0x1c;
    /// Root Capabilities (bit 0: CRS Software Visibility).
    pub const RTCAP: u16 = 0x1e;
    /// Root Status.
    pub const RTSTA: u16 = 0x20;
    /// Device Capabilities 2.
    pub const DEVCAP2: u16 = 0x24;
    /// Device Control 2.
    pub const DEVCTL2: u16 = 0x28;
    /// Link Capabilities 2.
    pub const LNKCAP2: u16 = 0x2c;
    /// Link Control 2.
    pub const LNKCTL2: u16 = 0x30;
    /// Link Status 2.
    pub const LNKSTA2: u16 = 0x32;
}

impl Capability for PcieCap {
    fn id(&self) -> u8 {
        id::PCIE
    }
    fn size(&self) -> u16 {
        0x3c
    }
    fn install(&self, cs: &mut ConfigSpace, at: u16) {
        use pcie_reg::*;
        let t = self.port_type;
        let slot = t.is_downstream() && self.slot.is_some();
        // Everything reserved unless defined below.
        for o in (4..0x3c).step_by(4) {
            cs.define(at + o, 4, 0xffff_ffff, Access::RsvdP, 0);
        }
        cs.define(
            at + CAPS,
            2,
            0xffff,
            Access::Ro,
            2 | (t.raw() as u32) << 4 | if slot { 1 << 8 } else { 0 },
        );
        // Device capabilities / control / status.
        let devcap = size_code(self.max_payload) as u32
            | if self.ext_tag { 1 << 5 } else { 0 }
            | 1 << 15
            | if self.flr { 1 << 28 } else { 0 };
        cs.define(at + DEVCAP, 4, 0xffff_ffff, Access::Ro, devcap);
        let mut devctl_rw = 0x000f | 0x0010 | 0x00e0 | 0x0800 | 0x7000;
        if self.ext_tag {
            devctl_rw |= 0x0100;
        }
        if self.flr {
            // Initiate Function Level Reset: written 1 by software, the device resets
            // the function and the bit reads 0 again (the fabric does both).
            devctl_rw |= 0x8000;
        }
        // Relaxed ordering and no snoop enabled, MRRS 512 B (the spec's reset values);
        // extended tags enabled when supported.
        let devctl_init = 0x0010 | 0x0800 | 0x2000 | if self.ext_tag { 0x0100 } else { 0 };
        cs.define(at + DEVCTL, 2, devctl_rw, Access::Rw, devctl_init);
        cs.define(at + DEVSTA, 2, 0x000f, Access::Rw1c, 0);
        cs.define(at + DEVSTA, 2, 0x0030, Access::Ro, 0);
        // Link.
        if t.has_link() {
            let speed = self.max_speed.number() as u32;
            let width = self.max_width.min(32) as u32;
            let ds = t.is_downstream();
            let lnkcap = speed
                | width << 4
                | ((self.aspm & 3) as u32) << 10
                | ((self.l0s_exit & 7) as u32) << 12
                | ((self.l1_exit & 7) as u32) << 15
                | if ds { (1 << 20) | (1 << 21) } else { 0 }
                | 1 << 22
                | (self.port_number as u32) << 24;
            cs.define(at + LNKCAP, 4, 0xffff_ffff, Access::Ro, lnkcap);
            let mut lnkctl_rw = 0x0003 | 0x0040 | 0x0080 | 0x0200;
            if !ds {
                lnkctl_rw |= 0x0008; // RCB is RW in endpoints, RO in root ports
            }
            if ds {
                lnkctl_rw |= 0x0010 | 0x0c00;
            }
            cs.define(at + LNKCTL, 2, lnkctl_rw, Access::Rw, 0);
            let (cur_speed, cur_width, active) = match self.link {
                Some((g, w)) => (g.number() as u32, w.min(32) as u32, true),
                None => (speed, 0, false),
            };
            let mut lnksta = cur_speed | cur_width << 4 | 1 << 12;
            if ds && active {
                lnksta |= 1 << 13;
            }
            cs.define(at + LNKSTA, 2, 0x3fff, Access::Ro, lnksta);
            if ds {
                cs.define(at + LNKSTA, 2, 0xc000, Access::Rw1c, 0);
            }
            // Link capabilities 2 / control 2 / status 2.
            let vector = ((1u32 << speed) - 1) << 1;
            cs.define(at + LNKCAP2, 4, 0xffff_ffff, Access::Ro, vector);
            cs.define(at + LNKCTL2, 2, 0xffff, Access::Rw, speed);
            let eq = if self.link.is_some_and(|(g, _)| g >= Generation::Gen3) {
                0x1e
            } else {
                0
            };
            cs.define(at + LNKSTA2, 2, 0xffff, Access::Ro, eq);
        }
        if slot {
            let n = self.slot.unwrap_or(0) as u32 & 0x1fff;
            // 25 W slot power limit (value 25, scale 1.0x), no command completed support.
            // Hot-plug: Hot-Plug Capable (bit 6) with Hot-Plug Surprise (5), or with an
            // attention button (0), power controller (1) and attention and power
            // indicators (3, 4).
            let hp = match (self.hotplug, self.hotplug_power) {
                (false, _) => 0,
                (true, false) => (1 << 5) | (1 << 6),
                (true, true) => 0b101_1011,
            };
            let sltcap = hp | (25 << 7) | (1 << 18) | (n << 19);
            cs.define(at + SLTCAP, 4, 0xffff_ffff, Access::Ro, sltcap);
            // Attention indicator Off (11b); power indicator Off (11b), or On (01b) for
            // a powered slot; Power Controller Control 0 (power on); the rest clear.
            let ctl = if self.hotplug && self.hotplug_power {
                0x01c0
            } else {
                0x03c0
            };
            cs.define(at + SLTCTL, 2, 0x1fff, Access::Rw, ctl);
            let present = if self.link.is_some() { 1 << 6 } else { 0 };
            cs.define(at + SLTSTA, 2, 0x0040, Access::Ro, present);
            cs.define(at + SLTSTA, 2, 0x011f, Access::Rw1c, 0);
        }
        if t == PortType::RootPort {
            cs.define(at + RTCTL, 2, 0x001f, Access::Rw, 0);
            // CRS Software Visibility: the root complex can return 0001h for a Vendor
            // ID read that a device answers with CRS (enabled by Root Control bit 4).
            cs.define(at + RTCAP, 2, 0xffff, Access::Ro, 1);
            // PME Requester ID (15:0) and PME Pending (17): set by the port.
            cs.define(at + RTSTA, 4, 0x0002_ffff, Access::Ro, 0);
            cs.define(at + RTSTA, 4, 0x0001_0000, Access::Rw1c, 0);
        }
        // Device capabilities 2 / control 2.
        let req = t.is_requester();
        let mut devcap2 = 0u32;
        let mut devctl2_rw = 0u32;
        if req {
            devcap2 |= 0xf | 1 << 4;
            devctl2_rw |= 0x1f;
        }
        if t.is_downstream() {
            devcap2 |= 1 << 5; // ARI forwarding
            devctl2_rw |= 1 << 5;
        }
        if !req || t == PortType::RootPort {
            devcap2 |= DEVCAP2_ATOMIC_ROUTING;
            devctl2_rw |= DEVCTL2_ATOMIC_EGRESS_BLOCKING as u32;
        }
        if req {
            // AtomicOp Requester Enable: endpoints and root ports.
            devctl2_rw |= DEVCTL2_ATOMIC_REQUESTER as u32;
        }
        if self.atomics && req {
            devcap2 |= DEVCAP2_ATOMIC_COMPLETER_32
                | DEVCAP2_ATOMIC_COMPLETER_64
                | DEVCAP2_CAS_COMPLETER_128;
        }
        if self.ltr {
            devcap2 |= 1 << 11;
            devctl2_rw |= 1 << 10;
        }
        devctl2_rw |= 0x0300; // IDO request/completion enable
        if self.ten_bit_tag {
            devcap2 |= 1 << 16;
            if req {
                devcap2 |= 1 << 17;
                devctl2_rw |= 1 << 12;
            }
        }
        if self.e2e_prefix {
            devcap2 |= 1 << 21; // End-End TLP Prefix Supported; 23:22 = 00b: four
            if matches!(
                t,
                PortType::RootPort | PortType::UpstreamPort | PortType::DownstreamPort
            ) {
                devctl2_rw |= DEVCTL2_E2E_PREFIX_BLOCKING as u32;
            }
        }
        cs.define(at + DEVCAP2, 4, 0xffff_ffff, Access::Ro, devcap2);
        cs.define(at + DEVCTL2, 2, devctl2_rw, Access::Rw, 0);
    }
}

#[cfg(test)]
mod find_tests {
    use super::*;

    proptest::proptest! {
        /// `find` agrees with the first match of `walk` on any dump, loops and
        /// out-of-range pointers included (a few seeded bytes make lists likely).
        #[test]
        fn find_is_walks_first_match(mut bytes in proptest::collection::vec(proptest::num::u8::ANY, 256),
                                     start in 0x40u8..=0xff, id in proptest::num::u8::ANY) {
            bytes[6] |= 0x10; // Capabilities List
            bytes[0x34] = start;
            let want = walk(&bytes)
                .0
                .into_iter()
                .find(|c| !c.extended && c.id == id as u16)
                .map(|c| c.offset);
            proptest::prop_assert_eq!(find(&bytes, id), want);
            // Every ID on the list is found where the walk first saw it.
            for c in walk(&bytes).0.iter().filter(|c| !c.extended) {
                let first = walk(&bytes).0.into_iter().find(|d| !d.extended && d.id == c.id);
                proptest::prop_assert_eq!(find(&bytes, c.id as u8), first.map(|d| d.offset));
            }
        }
    }

    #[test]
    fn a_loop_on_the_extended_list_is_still_reported() {
        let mut b = vec![0u8; 4096];
        // 0x100 → 0x140 → 0x100
        b[0x100..0x104].copy_from_slice(&(0x001u32 | 1 << 16 | 0x140 << 20).to_le_bytes());
        b[0x140..0x144].copy_from_slice(&(0x002u32 | 1 << 16 | 0x100 << 20).to_le_bytes());
        let (found, err) = walk(&b);
        assert_eq!(found.len(), 2);
        assert_eq!(
            err,
            Some(WalkError::Loop {
                from: 0x140,
                to: 0x100
            })
        );
    }
}
