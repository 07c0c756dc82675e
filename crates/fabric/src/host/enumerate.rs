//! Enumeration and resource assignment, the way Linux does it.
//!
//! 1. **Scan** depth first from bus 0: read the Vendor ID of function 0 of every device
//!    (all-ones means absent), all eight functions of multi-function devices; give each
//!    bridge the next bus number as its secondary bus, subordinate 0xff while its
//!    subtree is scanned, then the highest bus found below it.
//! 2. **Size** every BAR: Memory/I/O decode off, write all-ones, read back, restore.
//! 3. **Assign** bottom up then top down: each bridge's window is the sum of what lies
//!    below it, placed largest alignment first (BARs then need no padding; a child
//!    window whose size is not a multiple of its alignment may), rounded to 1 MiB
//!    (memory) or 4 KiB (I/O). Non-prefetchable BARs, 32-bit
//!    prefetchable BARs and 64-bit non-prefetchable BARs go to the 32-bit memory window;
//!    64-bit prefetchable BARs to the 64-bit prefetchable window; I/O BARs to the I/O
//!    window. Empty windows are disabled (base above limit). If the host's apertures
//!    are too small, nothing is assigned and the error says how much was needed.
//! 4. **MPS / MRRS**: below each root port, MPS is the largest size every function of
//!    the subtree supports; MRRS is set to `HostConfig::mrrs` or, by default, to MPS.
//!    Expansion ROMs are sized and assigned like 32-bit BARs and left disabled; SR-IOV
//!    VF BARs get per-VF size × TotalVFs, aligned to the per-VF size.
//! 5. **Enable** Memory Space (I/O Space) where a function has such BARs or windows,
//!    and Bus Master everywhere; program MSI-X (every table entry, unmasked) or else
//!    MSI (all vectors the function asks for) with consecutive vectors; set SERR#
//!    Enable in every bridge's Bridge Control (error messages from below are forwarded).
//! 6. **VFs**: in every SR-IOV PF for which [`HostBus::requested_vfs`] asks for N > 0
//!    VFs (the node's `vfs` key), as Linux's `sriov_numvfs` does: ARI Forwarding Enable
//!    in the port above (when it supports ARI forwarding) and ARI Capable Hierarchy in
//!    the PF, NumVFs = N, then VF Enable and VF MSE. VF `i` (Routing ID PF + First VF
//!    Offset + `i` × VF Stride) gets VF BAR n at the PF's VF BAR n + `i` × per-VF size;
//!    its MSI-X is programmed like any function's (vectors after those of every other
//!    function) and Bus Master Enable set. VFs follow their PF in the tree. Topologies
//!    without `vfs` enumerate exactly as before.
//!
//! ```
//! use pcielab_fabric::{functional::Fabric, kinds::KindRegistry, topology::Topology};
//! use pcielab_fabric::host::enumerate::{enumerate, HostConfig};
//! let reg = KindRegistry::builtin();
//! let t = Topology::parse(
//!     "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n[[node]]\nname=\"m\"\nkind=\"psmem\"\n\
//!      [[link]]\nup=\"rc.0\"\ndown=\"m\"\ngen=4\nwidth=8\n", "doc.toml", &reg).unwrap();
//! let mut fabric = Fabric::build(&t, &reg).unwrap();
//! let tree = enumerate(&mut fabric, &HostConfig::default()).unwrap();
//! let ep = tree.functions.iter().find(|f| f.bdf.to_string() == "01:00.0").unwrap();
//! assert_eq!(ep.bars[0].address, 0x40_0000_0000); // 1 MiB prefetchable 64-bit BAR
//! ```

use crate::host::HostBus;
use pcielab_config::caps::{id, pcie_reg, size_code, size_from_code, walk, Found, PortType};
use pcielab_config::ext_caps::sriov;
use pcielab_config::header::{command, reg};
use pcielab_config::{Bar, BridgeWindows, ConfigSpace};
use pcielab_wire::{Bdf, ByteEnables};

/// The host's address map and policies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostConfig {
    /// 32-bit non-prefetchable MMIO aperture `[base, limit]`.
    pub mem32: (u64, u64),
    /// 64-bit prefetchable MMIO aperture `[base, limit]`.
    pub pref64: (u64, u64),
    /// I/O aperture `[base, limit]`.
    pub io: (u32, u32),
    /// Address MSI/MSI-X messages are written to.
    pub msi_address: u64,
    /// First interrupt vector handed out.
    pub first_vector: u32,
    /// Max_Read_Request_Size to program; `None`: equal to MPS.
    pub mrrs: Option<u16>,
}

impl Default for HostConfig {
    /// mem32 0xc000_0000..=0xfebf_ffff, pref64 0x40_0000_0000..=0x7f_ffff_ffff (256 GiB),
    /// I/O 0x1000..=0xffff, MSI at 0xfee0_0000 (x86 local APIC), vectors from 0x30.
    fn default() -> Self {
        HostConfig {
            mem32: (0xc000_0000, 0xfebf_ffff),
            pref64: (0x40_0000_0000, 0x7f_ffff_ffff),
            io: (0x1000, 0xffff),
            msi_address: 0xfee0_0000,
            first_vector: 0x30,
            mrrs: None,
        }
    }
}

/// Why enumeration stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnumError {
    /// No bus number left for the secondary bus of a bridge.
    BusNumbersExhausted {
        /// The bridge that needed one.
        bridge: Bdf,
    },
    /// An aperture is too small for what lies below it (nothing was assigned).
    AddressSpaceExhausted {
        /// `"memory"`, `"prefetchable memory"` or `"I/O"`.
        space: &'static str,
        /// Bytes needed.
        needed: u64,
        /// Bytes in the aperture.
        available: u64,
    },
    /// A memory write while programming MSI-X failed.
    Memory {
        /// The function being programmed.
        function: Bdf,
        /// Why.
        reason: String,
    },
    /// The VFs asked for could not be enabled.
    Sriov {
        /// The PF.
        function: Bdf,
        /// Why.
        reason: String,
    },
}

impl core::fmt::Display for EnumError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            EnumError::BusNumbersExhausted { bridge } => {
                write!(f, "bus numbers exhausted: no bus number left for the secondary bus of bridge {bridge}")
            }
            EnumError::AddressSpaceExhausted { space, needed, available } => write!(
                f,
                "{space} address space exhausted: the hierarchy needs {needed:#x} bytes but the host aperture has {available:#x}; nothing was assigned"
            ),
            EnumError::Memory { function, reason } => write!(f, "programming MSI-X of {function}: {reason}"),
            EnumError::Sriov { function, reason } => write!(f, "enabling the VFs of {function}: {reason}"),
        }
    }
}

impl std::error::Error for EnumError {}

/// A BAR and the address host software gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AssignedBar {
    /// BAR index (0..=5).
    pub index: u8,
    /// Kind and size, as sizing found it.
    pub bar: Bar,
    /// Assigned base address.
    pub address: u64,
}

/// Bus numbers of a bridge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BusRange {
    /// Primary bus.
    pub primary: u8,
    /// Secondary bus.
    pub secondary: u8,
    /// Subordinate bus.
    pub subordinate: u8,
}

/// The link as the function's PCI Express capability reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkState {
    /// Negotiated generation (LnkSta), 0 when unknown.
    pub gen: u8,
    /// Negotiated width (LnkSta).
    pub width: u8,
    /// Highest generation supported (LnkCap).
    pub max_gen: u8,
    /// Widest link supported (LnkCap).
    pub max_width: u8,
}

/// Interrupts programmed for a function.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Interrupts {
    /// None programmed.
    #[default]
    None,
    /// MSI: address and the data of each vector.
    Msi {
        /// Message address.
        address: u64,
        /// Data values, one per vector.
        data: Vec<u32>,
    },
    /// MSI-X: address and data of each table entry.
    MsiX {
        /// `(address, data)` per entry.
        entries: Vec<(u64, u32)>,
    },
}

/// One function of the enumerated tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnumFunction {
    /// Its ID.
    pub bdf: Bdf,
    /// The bridge above it (None on bus 0).
    pub parent: Option<Bdf>,
    /// Vendor ID.
    pub vendor_id: u16,
    /// Device ID.
    pub device_id: u16,
    /// Class code (24 bits).
    pub class_code: u32,
    /// Header type (without the multi-function bit).
    pub header_type: u8,
    /// PCI Express device/port type, if it has the capability.
    pub port_type: Option<PortType>,
    /// Assigned BARs.
    pub bars: Vec<AssignedBar>,
    /// Assigned VF BARs of an SR-IOV capability (size: per-VF size × TotalVFs).
    pub vf_bars: Vec<AssignedBar>,
    /// Assigned expansion ROM (left disabled, as Linux leaves it), with index 0.
    pub rom: Option<AssignedBar>,
    /// Bus numbers (bridges).
    pub buses: Option<BusRange>,
    /// Windows (bridges).
    pub windows: Option<BridgeWindows>,
    /// Link state (PCI Express functions).
    pub link: Option<LinkState>,
    /// Programmed Max_Payload_Size in bytes.
    pub mps: Option<u16>,
    /// Programmed Max_Read_Request_Size in bytes.
    pub mrrs: Option<u16>,
    /// Capabilities found.
    pub caps: Vec<Found>,
    /// Interrupts programmed.
    pub interrupts: Interrupts,
    /// For a VF: its PF and its VF number (0-based). A VF's `vendor_id` and `device_id`
    /// are what software gives it (the PF's Vendor ID and the PF's VF Device ID; the
    /// VF's own registers read FFFFh), its `bars` lie in the PF's `vf_bars`.
    pub vf_of: Option<(Bdf, u16)>,
}

/// The result of enumeration, in depth-first order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EnumeratedTree {
    /// Every function found.
    pub functions: Vec<EnumFunction>,
}

impl EnumeratedTree {
    /// The function with this ID.
    pub fn get(&self, bdf: Bdf) -> Option<&EnumFunction> {
        self.functions.iter().find(|f| f.bdf == bdf)
    }
    /// The functions directly below `bdf` (or on bus 0 for `None`).
    pub fn children(&self, parent: Option<Bdf>) -> impl Iterator<Item = &EnumFunction> {
        self.functions.iter().filter(move |f| f.parent == parent)
    }
}

/// Internal index of the expansion ROM among a function's resources.
const ROM_INDEX: u8 = 0xff;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Io = 0,
    Mem = 1,
    Pref = 2,
}

const KINDS: [Kind; 3] = [Kind::Io, Kind::Mem, Kind::Pref];

impl Kind {
    fn of(bar: Bar) -> Kind {
        match bar {
            Bar::Io { .. } => Kind::Io,
            Bar::Mem64 {
                prefetchable: true, ..
            } => Kind::Pref,
            _ => Kind::Mem,
        }
    }
    fn granularity(self) -> u64 {
        match self {
            Kind::Io => 0x1000,
            _ => 0x10_0000,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Kind::Io => "I/O",
            Kind::Mem => "memory",
            Kind::Pref => "prefetchable memory",
        }
    }
}

#[derive(Debug, Clone)]
struct Dev {
    bdf: Bdf,
    parent: Option<usize>,
    header_type: u8,
    /// (index, BAR, alignment); index 6 + k is VF BAR k of the SR-IOV capability,
    /// whose size is per-VF size × TotalVFs.
    bars: Vec<(u8, Bar, u64)>,
    sriov: Option<u16>,
    /// Per kind: (size, alignment) of the bridge window.
    window: [(u64, u64); 3],
    assigned: Vec<AssignedBar>,
    pcie: Option<u16>,
    interrupts: Interrupts,
    /// For a VF: (index of its PF in `devs`, VF number).
    vf: Option<(usize, u16)>,
}

struct Host<'a, B: HostBus> {
    bus: &'a mut B,
    cfg: &'a HostConfig,
    devs: Vec<Dev>,
}

fn be_for(offset: u16, len: u16) -> ByteEnables {
    ByteEnables::from_bits_truncate((((1u16 << len) - 1) << (offset & 3)) as u8)
}

impl<B: HostBus> Host<'_, B> {
    fn r32(&mut self, bdf: Bdf, off: u16) -> u32 {
        self.bus.cfg_read(bdf, off & !3)
    }
    fn r16(&mut self, bdf: Bdf, off: u16) -> u16 {
        (self.r32(bdf, off) >> (8 * (off & 2))) as u16
    }
    fn r8(&mut self, bdf: Bdf, off: u16) -> u8 {
        (self.r32(bdf, off) >> (8 * (off & 3))) as u8
    }
    fn w32(&mut self, bdf: Bdf, off: u16, v: u32) {
        self.bus.cfg_write(bdf, off & !3, v, ByteEnables::ALL);
    }
    fn w16(&mut self, bdf: Bdf, off: u16, v: u16) {
        self.bus.cfg_write(
            bdf,
            off & !3,
            (v as u32) << (8 * (off & 2)),
            be_for(off & !1, 2),
        );
    }
    fn w8(&mut self, bdf: Bdf, off: u16, v: u8) {
        self.bus
            .cfg_write(bdf, off & !3, (v as u32) << (8 * (off & 3)), be_for(off, 1));
    }

    fn scan_bus(&mut self, busnr: u8, parent: Option<usize>) -> Result<u8, EnumError> {
        let mut max = busnr;
        let mut bridges = Vec::new();
        for dev in 0..32u8 {
            let Ok(f0) = Bdf::new(busnr, dev, 0) else {
                continue;
            };
            let id0 = self.r32(f0, 0);
            if id0 & 0xffff == 0xffff {
                continue;
            }
            let multi = self.r8(f0, reg::HEADER_TYPE) & 0x80 != 0;
            for func in 0..if multi { 8 } else { 1 } {
                let Ok(bdf) = Bdf::new(busnr, dev, func) else {
                    continue;
                };
                if self.r16(bdf, 0) == 0xffff {
                    continue;
                }
                let header_type = self.r8(bdf, reg::HEADER_TYPE) & 0x7f;
                let idx = self.devs.len();
                self.devs.push(Dev {
                    bdf,
                    parent,
                    header_type,
                    bars: Vec::new(),
                    window: [(0, 0); 3],
                    assigned: Vec::new(),
                    pcie: None,
                    sriov: None,
                    interrupts: Interrupts::None,
                    vf: None,
                });
                if header_type == 1 {
                    bridges.push(idx);
                }
            }
        }
        for b in bridges {
            let bdf = self.devs[b].bdf;
            let Some(sec) = max.checked_add(1) else {
                return Err(EnumError::BusNumbersExhausted { bridge: bdf });
            };
            // primary, secondary, subordinate = 0xff while scanning below.
            self.bus.cfg_write(
                bdf,
                reg::PRIMARY_BUS,
                0x00ff_0000 | (sec as u32) << 8 | busnr as u32,
                ByteEnables::from_bits_truncate(0b0111),
            );
            let sub = self.scan_bus(sec, Some(b))?;
            self.w8(bdf, reg::SUBORDINATE_BUS, sub);
            max = sub;
        }
        Ok(max)
    }

    fn size_bars(&mut self, i: usize) {
        let bdf = self.devs[i].bdf;
        let n = if self.devs[i].header_type == 0 { 6 } else { 2 };
        let cmd = self.r16(bdf, reg::COMMAND);
        self.w16(bdf, reg::COMMAND, cmd & !(command::MEMORY | command::IO));
        let mut k = 0;
        while k < n {
            let off = reg::BAR0 + 4 * k as u16;
            let orig = self.r32(bdf, off);
            self.w32(bdf, off, 0xffff_ffff);
            let lo = self.r32(bdf, off);
            self.w32(bdf, off, orig);
            let is64 = lo & 1 == 0 && (lo >> 1) & 3 == 2 && k + 1 < n;
            let hi = if is64 {
                let oh = self.r32(bdf, off + 4);
                self.w32(bdf, off + 4, 0xffff_ffff);
                let h = self.r32(bdf, off + 4);
                self.w32(bdf, off + 4, oh);
                h
            } else {
                0
            };
            if let Some(bar) = Bar::from_sizing(lo, hi) {
                self.devs[i].bars.push((k as u8, bar, bar.size()));
            }
            k += if is64 { 2 } else { 1 };
        }
        // Expansion ROM: sized like a 32-bit memory BAR, assigned, left disabled.
        let rom = if self.devs[i].header_type == 0 {
            reg::ROM0
        } else {
            reg::ROM1
        };
        let orig = self.r32(bdf, rom);
        self.w32(bdf, rom, 0xffff_f800);
        let mask = self.r32(bdf, rom) & 0xffff_f800;
        self.w32(bdf, rom, orig);
        if mask != 0 {
            let size = (!mask).wrapping_add(1);
            let bar = Bar::Mem32 {
                size,
                prefetchable: false,
            };
            self.devs[i].bars.push((ROM_INDEX, bar, size as u64));
        }
        if self.devs[i].header_type == 0 {
            self.size_vf_bars(i);
        }
        self.w16(bdf, reg::COMMAND, cmd);
    }

    /// Finds an extended capability with configuration reads only.
    fn ext_cap(&mut self, bdf: Bdf, want: u16) -> Option<u16> {
        let mut at = 0x100u16;
        for _ in 0..960 {
            let hdr = self.r32(bdf, at);
            if hdr == 0 || hdr == 0xffff_ffff {
                return None;
            }
            if hdr & 0xffff == want as u32 {
                return Some(at);
            }
            let next = ((hdr >> 20) & 0xffc) as u16;
            if next < 0x100 {
                return None;
            }
            at = next;
        }
        None
    }

    /// Sizes the VF BARs of an SR-IOV capability: the resource is per-VF size ×
    /// TotalVFs, aligned to the per-VF size (as Linux reserves it).
    fn size_vf_bars(&mut self, i: usize) {
        let bdf = self.devs[i].bdf;
        let Some(cap) = self.ext_cap(bdf, id::EXT_SRIOV) else {
            return;
        };
        self.devs[i].sriov = Some(cap);
        let total = self.r16(bdf, cap + 0x0e) as u64;
        if total == 0 {
            return;
        }
        let mut k = 0;
        while k < 6 {
            let off = cap + 0x24 + 4 * k as u16;
            let orig = self.r32(bdf, off);
            self.w32(bdf, off, 0xffff_ffff);
            let lo = self.r32(bdf, off);
            self.w32(bdf, off, orig);
            let is64 = lo & 1 == 0 && (lo >> 1) & 3 == 2 && k < 5;
            let hi = if is64 {
                let oh = self.r32(bdf, off + 4);
                self.w32(bdf, off + 4, 0xffff_ffff);
                let h = self.r32(bdf, off + 4);
                self.w32(bdf, off + 4, oh);
                h
            } else {
                0
            };
            if let Some(bar) = Bar::from_sizing(lo, hi) {
                let per_vf = bar.size();
                let whole = match bar {
                    Bar::Mem64 { prefetchable, .. } => Bar::Mem64 {
                        size: per_vf * total,
                        prefetchable,
                    },
                    Bar::Mem32 { prefetchable, .. } => Bar::Mem32 {
                        size: (per_vf * total) as u32,
                        prefetchable,
                    },
                    Bar::Io { .. } => Bar::Io {
                        size: (per_vf * total) as u32,
                    },
                };
                self.devs[i].bars.push((6 + k as u8, whole, per_vf));
            }
            k += if is64 { 2 } else { 1 };
        }
    }

    fn children(&self, parent: Option<usize>) -> Vec<usize> {
        (0..self.devs.len())
            .filter(|&j| self.devs[j].parent == parent)
            .collect()
    }

    /// Items (size, align, what) of `kind` directly below `parent`.
    fn items(&self, parent: Option<usize>, kind: Kind) -> Vec<(u64, u64, usize, Option<u8>)> {
        let mut items = Vec::new();
        for j in self.children(parent) {
            for &(k, bar, align) in &self.devs[j].bars {
                if Kind::of(bar) == kind {
                    items.push((bar.size(), align, j, Some(k)));
                }
            }
            let (s, a) = self.devs[j].window[kind as usize];
            if s > 0 {
                items.push((s, a, j, None));
            }
        }
        // Largest alignment first; stable for equal alignments (discovery order).
        items.sort_by_key(|it| core::cmp::Reverse(it.1));
        items
    }

    fn compute_windows(&mut self) {
        for i in (0..self.devs.len()).rev() {
            if self.devs[i].header_type != 1 {
                continue;
            }
            for kind in KINDS {
                let items = self.items(Some(i), kind);
                // Pack as `assign` will: a child window's size need not be a multiple of
                // its alignment, so alignment padding can follow it.
                let total = items
                    .iter()
                    .fold(0u64, |at, it| at.div_ceil(it.1) * it.1 + it.0);
                if total > 0 {
                    let g = kind.granularity();
                    let align = items.iter().map(|it| it.1).max().unwrap_or(g).max(g);
                    self.devs[i].window[kind as usize] = (total.div_ceil(g) * g, align);
                }
            }
        }
    }

    fn assign(&mut self, parent: Option<usize>, kind: Kind, base: u64) {
        let mut at = base;
        for (size, align, j, bar) in self.items(parent, kind) {
            at = at.div_ceil(align) * align;
            let bdf = self.devs[j].bdf;
            match bar {
                Some(k) => {
                    let off = match (k, self.devs[j].sriov) {
                        (ROM_INDEX, _) if self.devs[j].header_type == 0 => reg::ROM0,
                        (ROM_INDEX, _) => reg::ROM1,
                        (6..=11, Some(cap)) => cap + 0x24 + 4 * (k - 6) as u16,
                        _ => reg::BAR0 + 4 * k as u16,
                    };
                    let b = self.devs[j].bars.iter().find(|x| x.0 == k).map(|x| x.1);
                    self.w32(bdf, off, at as u32);
                    if let Some(Bar::Mem64 { .. }) = b {
                        self.w32(bdf, off + 4, (at >> 32) as u32);
                    }
                    if let Some(bar) = b {
                        self.devs[j].assigned.push(AssignedBar {
                            index: k,
                            bar,
                            address: at,
                        });
                    }
                }
                None => {
                    let end = at + size - 1;
                    match kind {
                        Kind::Mem => {
                            self.w16(bdf, reg::MEM_BASE, ((at >> 16) & 0xfff0) as u16);
                            self.w16(bdf, reg::MEM_LIMIT, ((end >> 16) & 0xfff0) as u16);
                        }
                        Kind::Pref => {
                            self.w16(bdf, reg::PREF_BASE, ((at >> 16) & 0xfff0) as u16);
                            self.w16(bdf, reg::PREF_LIMIT, ((end >> 16) & 0xfff0) as u16);
                            self.w32(bdf, reg::PREF_BASE_UPPER, (at >> 32) as u32);
                            self.w32(bdf, reg::PREF_LIMIT_UPPER, (end >> 32) as u32);
                        }
                        Kind::Io => {
                            self.w8(bdf, reg::IO_BASE, ((at >> 8) & 0xf0) as u8);
                            self.w8(bdf, reg::IO_LIMIT, ((end >> 8) & 0xf0) as u8);
                            self.w16(bdf, reg::IO_BASE_UPPER, (at >> 16) as u16);
                            self.w16(bdf, reg::IO_LIMIT_UPPER, (end >> 16) as u16);
                        }
                    }
                    self.assign(Some(j), kind, at);
                }
            }
            at += size;
        }
    }

    fn disable_windows(&mut self, i: usize) {
        let bdf = self.devs[i].bdf;
        let w = self.devs[i].window;
        if w[Kind::Mem as usize].0 == 0 {
            self.w32(bdf, reg::MEM_BASE, 0x0000_fff0);
        }
        if w[Kind::Pref as usize].0 == 0 {
            self.w32(bdf, reg::PREF_BASE, 0x0000_fff0);
            self.w32(bdf, reg::PREF_BASE_UPPER, 0);
            self.w32(bdf, reg::PREF_LIMIT_UPPER, 0);
        }
        if w[Kind::Io as usize].0 == 0 {
            self.w16(bdf, reg::IO_BASE, 0x00f0);
            self.w32(bdf, reg::IO_BASE_UPPER, 0);
        }
    }

    fn find_caps(&mut self, bdf: Bdf) -> (Vec<Found>, ConfigSpace) {
        // Read what host software needs, as Linux does, not the whole 4 KiB: the header,
        // the header DW of each capability along the two lists, and the PCI Express
        // capability's registers; the rest of the copy stays zero. Each DW is read once.
        let mut cs = ConfigSpace::new();
        let read = |h: &mut Self, cs: &mut ConfigSpace, off: u16| {
            let v = h.r32(bdf, off);
            cs.hw_write(off, 4, v);
            v
        };
        for off in (0..0x40u16).step_by(4) {
            read(self, &mut cs, off);
        }
        let mut pcie = None;
        if cs.read_u16(reg::STATUS) & 0x10 != 0 {
            let mut at = (cs.read_u8(reg::CAP_PTR) & 0xfc) as u16;
            let mut guard = 0;
            while at >= 0x40 && guard < 48 {
                let v = read(self, &mut cs, at);
                if v as u8 == id::PCIE {
                    pcie = Some(at);
                }
                at = ((v >> 8) & 0xfc) as u16;
                guard += 1;
            }
        }
        if let Some(p) = pcie {
            // PCI Express Capability structure (version 2): 0x3C bytes.
            for off in (p + 4..(p + 0x3c).min(0x100)).step_by(4) {
                read(self, &mut cs, off);
            }
            // Extended capabilities exist only on PCI Express functions.
            let mut at = 0x100u16;
            let mut guard = 0;
            while guard < 96 {
                let v = read(self, &mut cs, at);
                let next = ((v >> 20) & 0xffc) as u16;
                if v == 0 || v == u32::MAX || next < 0x100 {
                    break;
                }
                at = next;
                guard += 1;
            }
        }
        let (found, _) = walk(cs.bytes());
        (found, cs)
    }

    fn cap(&mut self, bdf: Bdf, want: u8) -> Option<u16> {
        // Walk the PCI capability list with config reads only.
        if self.r16(bdf, reg::STATUS) & 0x10 == 0 {
            return None;
        }
        let mut at = (self.r8(bdf, reg::CAP_PTR) & 0xfc) as u16;
        let mut guard = 0;
        while at >= 0x40 && guard < 48 {
            let hdr = self.r16(bdf, at);
            if (hdr & 0xff) as u8 == want {
                return Some(at);
            }
            at = (hdr >> 8) & 0xfc;
            guard += 1;
        }
        None
    }

    fn program_mps(&mut self) {
        for i in 0..self.devs.len() {
            let bdf = self.devs[i].bdf;
            self.devs[i].pcie = self.cap(bdf, id::PCIE);
        }
        // Root ports: functions on bus 0 that are PCIe root ports.
        let roots: Vec<usize> = (0..self.devs.len())
            .filter(|&i| {
                self.devs[i].parent.is_none()
                    && self.devs[i].pcie.is_some_and(|p| {
                        let bdf = self.devs[i].bdf;
                        (self.r16(bdf, p + pcie_reg::CAPS) >> 4) & 0xf
                            == PortType::RootPort.raw() as u16
                    })
            })
            .collect();
        for r in roots {
            let mut subtree = vec![r];
            let mut k = 0;
            while k < subtree.len() {
                let p = subtree[k];
                subtree.extend(self.children(Some(p)));
                k += 1;
            }
            let mut mps = 4096u16;
            for &j in &subtree {
                if let Some(p) = self.devs[j].pcie {
                    let bdf = self.devs[j].bdf;
                    let cap = self.r32(bdf, p + pcie_reg::DEVCAP);
                    mps = mps.min(size_from_code((cap & 7) as u8));
                }
            }
            let mrrs = self.cfg.mrrs.unwrap_or(mps);
            for &j in &subtree {
                if let Some(p) = self.devs[j].pcie {
                    let bdf = self.devs[j].bdf;
                    let ctl = self.r16(bdf, p + pcie_reg::DEVCTL);
                    let ctl = (ctl & !0x70e0)
                        | (size_code(mps) as u16) << 5
                        | (size_code(mrrs) as u16) << 12;
                    self.w16(bdf, p + pcie_reg::DEVCTL, ctl);
                }
            }
        }
    }

    fn enable(&mut self, vector: &mut u32) -> Result<(), EnumError> {
        for i in 0..self.devs.len() {
            let bdf = self.devs[i].bdf;
            let mut cmd = self.r16(bdf, reg::COMMAND) | command::BUS_MASTER;
            let d = &self.devs[i];
            let mem = d.bars.iter().any(|b| !matches!(b.1, Bar::Io { .. }))
                || d.window[1].0 > 0
                || d.window[2].0 > 0;
            let io = d.bars.iter().any(|b| matches!(b.1, Bar::Io { .. })) || d.window[0].0 > 0;
            if mem {
                cmd |= command::MEMORY;
            }
            if io {
                cmd |= command::IO;
            }
            // Interrupts: MSI-X if present, else MSI.
            if let Some(c) = self.cap(bdf, id::MSIX) {
                self.program_msix(i, c, cmd, vector)?;
            } else if let Some(c) = self.cap(bdf, id::MSI) {
                let ctl = self.r16(bdf, c + 2);
                let mmc = (ctl >> 1) & 7;
                let n = 1u32 << mmc;
                *vector = vector.div_ceil(n) * n; // multiple-message data must be aligned
                let a64 = ctl & 0x80 != 0;
                self.w32(bdf, c + 4, self.cfg.msi_address as u32);
                let data_off = if a64 {
                    self.w32(bdf, c + 8, (self.cfg.msi_address >> 32) as u32);
                    c + 0xc
                } else {
                    c + 8
                };
                self.w16(bdf, data_off, *vector as u16);
                self.w16(bdf, c + 2, (ctl & !0x70) | mmc << 4 | 1);
                self.devs[i].interrupts = Interrupts::Msi {
                    address: self.cfg.msi_address,
                    data: (*vector..*vector + n).collect(),
                };
                *vector += n;
            }
            self.w16(bdf, reg::COMMAND, cmd);
            if self.devs[i].header_type == 1 {
                // As Linux does: a bridge forwards ERR_COR/ERR_NONFATAL/ERR_FATAL from
                // its secondary side only with SERR# Enable set in Bridge Control.
                let bc = self.r16(bdf, reg::BRIDGE_CONTROL);
                if bc & 2 == 0 {
                    self.w16(bdf, reg::BRIDGE_CONTROL, bc | 2);
                }
            }
        }
        Ok(())
    }

    /// Programs the MSI-X capability at `c` of function `i`: every table entry gets
    /// the host's MSI address and the next vector, unmasked; then MSI-X Enable.
    /// `cmd` is written first (memory decode must be on for the table writes).
    fn program_msix(
        &mut self,
        i: usize,
        c: u16,
        cmd: u16,
        vector: &mut u32,
    ) -> Result<(), EnumError> {
        let bdf = self.devs[i].bdf;
        let ctl = self.r16(bdf, c + 2);
        let n = (ctl & 0x7ff) as u32 + 1;
        let table = self.r32(bdf, c + 4);
        let bir = (table & 7) as u8;
        let base = self.devs[i]
            .assigned
            .iter()
            .find(|b| b.index == bir)
            .map(|b| b.address);
        if let Some(base) = base {
            self.w16(bdf, reg::COMMAND, cmd);
            let mut entries = Vec::new();
            for k in 0..n {
                let at = base + (table & !7) as u64 + 16 * k as u64;
                let mut e = [0u8; 16];
                e[0..8].copy_from_slice(&self.cfg.msi_address.to_le_bytes());
                e[8..12].copy_from_slice(&vector.to_le_bytes());
                self.bus
                    .mem_write(at, &e)
                    .map_err(|reason| EnumError::Memory {
                        function: bdf,
                        reason,
                    })?;
                entries.push((self.cfg.msi_address, *vector));
                *vector += 1;
            }
            self.w16(bdf, c + 2, (ctl & !0x4000) | 0x8000);
            self.devs[i].interrupts = Interrupts::MsiX { entries };
        }
        Ok(())
    }

    /// Enables the VFs [`HostBus::requested_vfs`] asks for in every SR-IOV PF (see the
    /// module documentation, step 6), then programs each VF's MSI-X and Bus Master.
    fn enable_vfs(&mut self, vector: &mut u32) -> Result<(), EnumError> {
        let pfs: Vec<usize> = (0..self.devs.len())
            .filter(|&i| self.devs[i].sriov.is_some())
            .collect();
        let first_vf = self.devs.len();
        for i in pfs {
            let bdf = self.devs[i].bdf;
            let want = self.bus.requested_vfs(bdf);
            let Some(cap) = self.devs[i].sriov.filter(|_| want > 0) else {
                continue;
            };
            let err = |reason: String| EnumError::Sriov {
                function: bdf,
                reason,
            };
            let total = self.r16(bdf, cap + sriov::TOTAL_VFS);
            if want > total {
                return Err(err(format!("{want} VFs asked for, TotalVFs is {total}")));
            }
            let mut ctl = self.r16(bdf, cap + sriov::CONTROL);
            if ctl & sriov::VF_ENABLE != 0 {
                // Enabled before (software enumerating again): disable them first, as
                // Linux does before it changes sriov_numvfs.
                ctl &= !(sriov::VF_ENABLE | sriov::VF_MSE);
                self.w16(bdf, cap + sriov::CONTROL, ctl);
            }
            // ARI, as Linux does: ARI Forwarding in the port above when it supports it,
            // and then ARI Capable Hierarchy in the PF (before NumVFs: it may change
            // First VF Offset and VF Stride).
            if let Some(p) = self.devs[i].parent {
                let pb = self.devs[p].bdf;
                if let Some(pc) = self.cap(pb, id::PCIE) {
                    if self.r32(pb, pc + pcie_reg::DEVCAP2) & (1 << 5) != 0 {
                        let c2 = self.r16(pb, pc + pcie_reg::DEVCTL2);
                        self.w16(pb, pc + pcie_reg::DEVCTL2, c2 | 1 << 5);
                        ctl |= sriov::ARI_CAPABLE_HIERARCHY;
                        self.w16(bdf, cap + sriov::CONTROL, ctl);
                    }
                }
            }
            self.w16(bdf, cap + sriov::NUM_VFS, want);
            let offset = self.r16(bdf, cap + sriov::FIRST_VF_OFFSET) as u32;
            let stride = self.r16(bdf, cap + sriov::VF_STRIDE) as u32;
            self.w16(
                bdf,
                cap + sriov::CONTROL,
                ctl | sriov::VF_ENABLE | sriov::VF_MSE,
            );
            // VF BAR n of VF k: the PF's VF BAR n + k × per-VF size.
            let vf_bars: Vec<(u8, Bar, u64)> = self.devs[i]
                .bars
                .iter()
                .filter(|b| (6..12).contains(&b.0))
                .filter_map(|&(k, whole, per_vf)| {
                    let a = self.devs[i].assigned.iter().find(|x| x.index == k)?;
                    let bar = match whole {
                        Bar::Mem64 { prefetchable, .. } => Bar::Mem64 {
                            size: per_vf,
                            prefetchable,
                        },
                        Bar::Mem32 { prefetchable, .. } => Bar::Mem32 {
                            size: per_vf as u32,
                            prefetchable,
                        },
                        Bar::Io { .. } => Bar::Io {
                            size: per_vf as u32,
                        },
                    };
                    Some((k - 6, bar, a.address))
                })
                .collect();
            for k in 0..want {
                let rid = bdf.raw() as u32 + offset + k as u32 * stride;
                if rid > 0xffff || rid >> 8 != bdf.bus() as u32 {
                    return Err(err(format!(
                        "VF {k} would have Routing ID {rid:#06x}, beyond bus {:02x} (VFs on other buses are not supported)",
                        bdf.bus()
                    )));
                }
                let vbdf = Bdf::from_raw(rid as u16);
                // A VF's Vendor ID reads FFFFh: its Revision ID/Class Code say it is there.
                if self.r32(vbdf, reg::REVISION) == 0xffff_ffff {
                    return Err(err(format!(
                        "VF {k} ({vbdf}) does not answer configuration requests"
                    )));
                }
                let assigned = vf_bars
                    .iter()
                    .map(|&(n, bar, base)| AssignedBar {
                        index: n,
                        bar,
                        address: base + k as u64 * bar.size(),
                    })
                    .collect();
                self.devs.push(Dev {
                    bdf: vbdf,
                    parent: self.devs[i].parent,
                    header_type: 0,
                    bars: Vec::new(),
                    sriov: None,
                    window: [(0, 0); 3],
                    assigned,
                    pcie: None,
                    interrupts: Interrupts::None,
                    vf: Some((i, k)),
                });
            }
        }
        for v in first_vf..self.devs.len() {
            let vbdf = self.devs[v].bdf;
            // Memory Space does not apply to VFs (VF MSE in the PF does).
            let cmd = self.r16(vbdf, reg::COMMAND) | command::BUS_MASTER;
            if let Some(c) = self.cap(vbdf, id::MSIX) {
                self.program_msix(v, c, cmd, vector)?;
            }
            self.w16(vbdf, reg::COMMAND, cmd);
        }
        Ok(())
    }

    fn describe(&mut self, i: usize) -> EnumFunction {
        let bdf = self.devs[i].bdf;
        let (caps, cs) = self.find_caps(bdf);
        let d = &self.devs[i];
        let pcie = caps
            .iter()
            .find(|c| !c.extended && c.id == id::PCIE as u16)
            .map(|c| c.offset);
        let port_type =
            pcie.and_then(|p| PortType::from_raw(((cs.read_u16(p + 2) >> 4) & 0xf) as u8));
        let link = pcie
            .filter(|_| port_type.is_some_and(|t| t.has_link()))
            .map(|p| {
                let cap = cs.read_u32(p + pcie_reg::LNKCAP);
                let sta = cs.read_u16(p + pcie_reg::LNKSTA);
                LinkState {
                    gen: (sta & 0xf) as u8,
                    width: ((sta >> 4) & 0x3f) as u8,
                    max_gen: (cap & 0xf) as u8,
                    max_width: ((cap >> 4) & 0x3f) as u8,
                }
            });
        let devctl = pcie.map(|p| cs.read_u16(p + pcie_reg::DEVCTL));
        let bridge = d.header_type == 1;
        let vf_of = d.vf.map(|(pf, k)| (self.devs[pf].bdf, k));
        // A VF's IDs as software gives them: the PF's Vendor ID and VF Device ID.
        let (vendor_id, device_id) = match d.vf {
            Some((pf, _)) => {
                let pb = self.devs[pf].bdf;
                let cap = self.devs[pf].sriov.unwrap_or(0);
                let v = self.r16(pb, reg::VENDOR_ID);
                (v, self.r16(pb, cap + sriov::VF_DEVICE_ID))
            }
            None => (cs.read_u16(reg::VENDOR_ID), cs.read_u16(reg::DEVICE_ID)),
        };
        let d = &self.devs[i];
        EnumFunction {
            bdf,
            parent: d.parent.map(|p| self.devs[p].bdf),
            vendor_id,
            device_id,
            class_code: cs.read(reg::CLASS, 3),
            header_type: d.header_type,
            port_type,
            bars: {
                let mut b: Vec<AssignedBar> =
                    d.assigned.iter().copied().filter(|b| b.index < 6).collect();
                b.sort_by_key(|b| b.index);
                b
            },
            rom: d
                .assigned
                .iter()
                .find(|b| b.index == ROM_INDEX)
                .map(|b| AssignedBar { index: 0, ..*b }),
            vf_bars: {
                let mut b: Vec<AssignedBar> = d
                    .assigned
                    .iter()
                    .filter(|b| (6..12).contains(&b.index))
                    .map(|b| AssignedBar {
                        index: b.index - 6,
                        ..*b
                    })
                    .collect();
                b.sort_by_key(|b| b.index);
                b
            },
            buses: bridge.then(|| BusRange {
                primary: cs.read_u8(reg::PRIMARY_BUS),
                secondary: cs.read_u8(reg::SECONDARY_BUS),
                subordinate: cs.read_u8(reg::SUBORDINATE_BUS),
            }),
            windows: bridge.then(|| BridgeWindows::read(&cs)),
            link,
            mps: devctl.map(|c| size_from_code(((c >> 5) & 7) as u8)),
            mrrs: devctl.map(|c| size_from_code(((c >> 12) & 7) as u8)),
            caps,
            interrupts: d.interrupts.clone(),
            vf_of,
        }
    }
}

/// Enumerates the hierarchy behind `bus` and assigns its resources.
pub fn enumerate<B: HostBus>(bus: &mut B, cfg: &HostConfig) -> Result<EnumeratedTree, EnumError> {
    let mut h = Host {
        bus,
        cfg,
        devs: Vec::new(),
    };
    h.scan_bus(0, None)?;
    for i in 0..h.devs.len() {
        h.size_bars(i);
    }
    h.compute_windows();
    // Check every aperture before writing any address.
    for kind in KINDS {
        let items = h.items(None, kind);
        let (base, limit) = match kind {
            Kind::Io => (cfg.io.0 as u64, cfg.io.1 as u64),
            Kind::Mem => cfg.mem32,
            Kind::Pref => cfg.pref64,
        };
        let mut at = base;
        for it in &items {
            at = at.div_ceil(it.1) * it.1 + it.0;
        }
        let available = (limit + 1).saturating_sub(base);
        if at - base > available || (at > 0 && at - 1 > limit) {
            return Err(EnumError::AddressSpaceExhausted {
                space: kind.name(),
                needed: items
                    .iter()
                    .fold(0u64, |at, it| at.div_ceil(it.1) * it.1 + it.0),
                available,
            });
        }
    }
    for i in 0..h.devs.len() {
        if h.devs[i].header_type == 1 {
            h.disable_windows(i);
        }
    }
    h.assign(None, Kind::Io, cfg.io.0 as u64);
    h.assign(None, Kind::Mem, cfg.mem32.0);
    h.assign(None, Kind::Pref, cfg.pref64.0);
    h.program_mps();
    let mut vector = cfg.first_vector;
    h.enable(&mut vector)?;
    let scanned = h.devs.len();
    h.enable_vfs(&mut vector)?;
    // Depth-first order, each PF's VFs right after it.
    let mut functions = Vec::with_capacity(h.devs.len());
    for i in 0..scanned {
        functions.push(h.describe(i));
        for v in scanned..h.devs.len() {
            if h.devs[v].vf.is_some_and(|(pf, _)| pf == i) {
                functions.push(h.describe(v));
            }
        }
    }
    Ok(EnumeratedTree { functions })
}
