//! Extended capabilities (0x100 and above): AER, SR-IOV, ARI, ACS, DSN, LTR, ATS, PRI,
//! PASID.
//!
//! Each type documents its register map; offsets are from the capability header.

use crate::caps::{id, ExtCapability};
use crate::header::Bar;
use crate::space::{Access, ConfigSpace};

/// Uncorrectable error bits implemented by [`AerCap`]: DLP(4), Surprise Down(5),
/// Poisoned TLP(12), FC Protocol(13), Completion Timeout(14), Completer Abort(15),
/// Unexpected Completion(16), Receiver Overflow(17), Malformed TLP(18), ECRC(19),
/// Unsupported Request(20), ACS Violation(21), Uncorrectable Internal(22).
pub const AER_UNCORR_BITS: u32 = 0x007f_f030;
/// Default uncorrectable severity (fatal): DLP, Surprise Down, FC Protocol, Receiver
/// Overflow, Malformed TLP, Uncorrectable Internal.
pub const AER_UNCORR_SEVERITY_DEFAULT: u32 = 0x0046_2030;
/// Uncorrectable error bit Poisoned TLP Egress Blocked (26), implemented by ports with
/// Poisoned TLP Egress Blocking ([`AerCap::egress_blocking`]); non-fatal by default.
pub const AER_UNCORR_POISON_BLOCKED: u32 = 1 << 26;
/// Uncorrectable error bit TLP Prefix Blocked (25), implemented by ports with End-End
/// TLP Prefix Blocking ([`AerCap::prefix_blocking`]); non-fatal by default.
pub const AER_UNCORR_PREFIX_BLOCKED: u32 = 1 << 25;
/// Uncorrectable error bit AtomicOp Egress Blocked (24), implemented by ports with
/// AtomicOp Egress Blocking ([`AerCap::atomic_blocking`]); non-fatal by default.
pub const AER_UNCORR_ATOMIC_BLOCKED: u32 = 1 << 24;
/// Advanced Error Capabilities and Control: TLP Prefix Log Present (bit 11): the TLP
/// Prefix Log (+0x38) holds the End-End TLP Prefixes of the first error's TLP.
pub const AER_CTL_PREFIX_LOG_PRESENT: u32 = 1 << 11;
/// Advanced Error Capabilities and Control: Multiple Header Recording Capable (bit 9).
pub const AER_CTL_MHR_CAPABLE: u32 = 1 << 9;
/// Advanced Error Capabilities and Control: Multiple Header Recording Enable (bit 10):
/// the function records the headers of errors that come while a first error is
/// unserviced, and loads the next into the Header Log when software clears the
/// status bit the First Error Pointer names.
pub const AER_CTL_MHR_ENABLE: u32 = 1 << 10;
/// Correctable error bit Header Log Overflow (15): a header could not be recorded.
pub const AER_CORR_HEADER_LOG_OVERFLOW: u32 = 1 << 15;
/// Correctable error bits: Receiver(0), Bad TLP(6), Bad DLLP(7), REPLAY_NUM Rollover(8),
/// Replay Timer Timeout(12), Advisory Non-Fatal(13), Corrected Internal(14),
/// Header Log Overflow(15).
pub const AER_CORR_BITS: u32 = 0x0000_f1c1;

/// Advanced Error Reporting (ID 0x0001, version 2), 0x48 bytes.
///
/// ```text
/// +00 | Next | Ver | ID                                                      |
/// +04 | Uncorrectable Error Status (RW1CS)                                  |
/// +08 | Uncorrectable Error Mask (RWS)                                      |
/// +0C | Uncorrectable Error Severity (RWS)                                  |
/// +10 | Correctable Error Status (RW1CS)                                    |
/// +14 | Correctable Error Mask (RWS; Advisory Non-Fatal masked at reset)    |
/// +18 | Adv. Cap & Ctl: CTOHdrLogCap(12) TLPPfxPres(11,ROS) MHREn(10,RWS)    |
/// |   |   MHRCap(9) ECRCChkEn(8,RWS) ECRCChkCap(7)                          |
/// |   |                 ECRCGenEn(6,RWS) ECRCGenCap(5) FirstErrPtr(4:0,ROS) |
/// +1C | Header Log (4 DW, ROS)                                              |
/// +2C | Root Error Command (RW, root ports)                                 |
/// +30 | Root Error Status (RW1CS, root ports)                               |
/// +34 | Error Source Identification (ROS, root ports)                       |
/// +38 | TLP Prefix Log (4 DW, ROS)                                          |
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AerCap {
    /// A root port: the root error registers are implemented.
    pub root_port: bool,
    /// The port supports Poisoned TLP Egress Blocking (DPC): the Poisoned TLP Egress
    /// Blocked bit is implemented.
    pub egress_blocking: bool,
    /// The port supports End-End TLP Prefix Blocking: the TLP Prefix Blocked bit is
    /// implemented.
    pub prefix_blocking: bool,
    /// The port supports AtomicOp Egress Blocking (Device Control 2 bit 7): the
    /// AtomicOp Egress Blocked bit is implemented.
    pub atomic_blocking: bool,
}

impl ExtCapability for AerCap {
    fn id(&self) -> u16 {
        id::EXT_AER
    }
    fn version(&self) -> u8 {
        2
    }
    fn size(&self) -> u16 {
        0x48
    }
    fn install(&self, cs: &mut ConfigSpace, at: u16) {
        let mut bits = AER_UNCORR_BITS;
        if self.egress_blocking {
            bits |= AER_UNCORR_POISON_BLOCKED;
        }
        if self.prefix_blocking {
            bits |= AER_UNCORR_PREFIX_BLOCKED;
        }
        if self.atomic_blocking {
            bits |= AER_UNCORR_ATOMIC_BLOCKED;
        }
        cs.define(at + 0x04, 4, bits, Access::Rw1c, 0);
        cs.define(at + 0x08, 4, bits, Access::Rw, 0);
        cs.define(at + 0x0c, 4, bits, Access::Rw, AER_UNCORR_SEVERITY_DEFAULT);
        cs.define(at + 0x10, 4, AER_CORR_BITS, Access::Rw1c, 0);
        cs.define(at + 0x14, 4, AER_CORR_BITS, Access::Rw, 0x2000);
        // ECRC Generation/Check Capable; Multiple Header Recording Capable; Completion
        // Timeout Prefix/Header Log Capable.
        let cap = 0x10a0 | AER_CTL_MHR_CAPABLE;
        cs.define(at + 0x18, 4, cap, Access::Ro, cap);
        cs.define(at + 0x18, 4, 0x0140 | AER_CTL_MHR_ENABLE, Access::Rw, 0);
        for o in (0x04..0x2c).step_by(4) {
            cs.set_sticky(at + o, 4, 0xffff_ffff);
        }
        for o in (0x38..0x48).step_by(4) {
            cs.set_sticky(at + o, 4, 0xffff_ffff);
        }
        if self.root_port {
            cs.define(at + 0x2c, 4, 0x7, Access::Rw, 0);
            cs.define(at + 0x30, 4, 0x7f, Access::Rw1c, 0);
            cs.set_sticky(at + 0x30, 4, 0x7f);
            cs.set_sticky(at + 0x34, 4, 0xffff_ffff);
        }
    }
}

/// Registers and bits of the SR-IOV capability ([`SriovCap`]), as offsets from its
/// header (PCIe Base Specification, 9.3.3).
pub mod sriov {
    /// SR-IOV Control (16 bits).
    pub const CONTROL: u16 = 0x08;
    /// SR-IOV Control: VF Enable. Setting it (with NumVFs written first) makes NumVFs
    /// VFs exist; clearing it removes them.
    pub const VF_ENABLE: u16 = 1 << 0;
    /// SR-IOV Control: VF Memory Space Enable (the VFs' memory BARs decode).
    pub const VF_MSE: u16 = 1 << 3;
    /// SR-IOV Control: ARI Capable Hierarchy (set by software in the lowest PF when the
    /// port above has ARI Forwarding enabled).
    pub const ARI_CAPABLE_HIERARCHY: u16 = 1 << 4;
    /// InitialVFs (16 bits, RO).
    pub const INITIAL_VFS: u16 = 0x0c;
    /// TotalVFs (16 bits, RO).
    pub const TOTAL_VFS: u16 = 0x0e;
    /// NumVFs (16 bits): writable only while VF Enable is clear.
    pub const NUM_VFS: u16 = 0x10;
    /// First VF Offset (16 bits, RO): Routing ID of VF 0 minus the PF's.
    pub const FIRST_VF_OFFSET: u16 = 0x14;
    /// VF Stride (16 bits, RO): Routing ID distance between consecutive VFs.
    pub const VF_STRIDE: u16 = 0x16;
    /// VF Device ID (16 bits, RO): the Device ID software gives every VF.
    pub const VF_DEVICE_ID: u16 = 0x1a;
    /// VF BAR0; VF BAR n is at `VF_BAR0 + 4 * n`.
    pub const VF_BAR0: u16 = 0x24;
}

/// Single Root I/O Virtualization (ID 0x0010, version 1), 0x40 bytes.
///
/// ```text
/// +00 | Next | Ver | ID                                                  |
/// +04 | SR-IOV Capabilities (RO)                                        |
/// +08 | SR-IOV Status (RW1C) | SR-IOV Control: ARIHier(4) VFMSE(3) VFEn(0) (RW) |
/// +0C | TotalVFs (RO)        | InitialVFs (RO)                          |
/// +10 | Function Dep. Link   | NumVFs (RW)                              |
/// +14 | VF Stride (RO)       | First VF Offset (RO)                     |
/// +18 | VF Device ID (RO)    | reserved                                 |
/// +1C | Supported Page Sizes (RO)                                       |
/// +20 | System Page Size (RW, one-hot, 4 KiB at reset)                  |
/// +24 | VF BAR0 .. VF BAR5 (sizing like BARs, per-VF size)              |
/// +3C | VF Migration State Array Offset (RO)                            |
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SriovCap {
    /// TotalVFs (and InitialVFs).
    pub total_vfs: u16,
    /// Routing-ID offset of the first VF from the PF.
    pub first_vf_offset: u16,
    /// Routing-ID distance between VFs.
    pub vf_stride: u16,
    /// Device ID of the VFs.
    pub vf_device_id: u16,
    /// The PF's function number (Function Dependency Link).
    pub function: u8,
    /// VF BARs (per-VF sizes); a 64-bit BAR takes two slots.
    pub vf_bars: [Option<Bar>; 6],
}

impl ExtCapability for SriovCap {
    fn id(&self) -> u16 {
        id::EXT_SRIOV
    }
    fn version(&self) -> u8 {
        1
    }
    fn size(&self) -> u16 {
        0x40
    }
    fn install(&self, cs: &mut ConfigSpace, at: u16) {
        cs.define(at + 0x04, 4, 0xffff_ffff, Access::Ro, 0);
        cs.define(at + 0x08, 2, 0x001f, Access::Rw, 0);
        cs.define(at + 0x0a, 2, 0x0001, Access::Rw1c, 0);
        cs.define(at + 0x0c, 2, 0xffff, Access::Ro, self.total_vfs as u32);
        cs.define(at + 0x0e, 2, 0xffff, Access::Ro, self.total_vfs as u32);
        cs.define(at + 0x10, 2, 0xffff, Access::Rw, 0);
        cs.define(at + 0x12, 2, 0x00ff, Access::Ro, self.function as u32);
        cs.define(
            at + 0x14,
            2,
            0xffff,
            Access::Ro,
            self.first_vf_offset as u32,
        );
        cs.define(at + 0x16, 2, 0xffff, Access::Ro, self.vf_stride as u32);
        cs.define(at + 0x1a, 2, 0xffff, Access::Ro, self.vf_device_id as u32);
        // 4K, 8K, 64K, 256K, 1M, 4M page sizes.
        cs.define(at + 0x1c, 4, 0xffff_ffff, Access::Ro, 0x553);
        cs.define(at + 0x20, 4, 0x553, Access::Rw, 1);
        let mut i = 0;
        while i < 6 {
            let Some(bar) = self.vf_bars[i] else {
                i += 1;
                continue;
            };
            let off = at + 0x24 + 4 * i as u16;
            let size = bar.size();
            cs.define(off, 4, 0xf, Access::Ro, bar.flags());
            cs.define(
                off,
                4,
                (!(size.wrapping_sub(1)) as u32) & !0xf,
                Access::Rw,
                0,
            );
            if bar.slots() == 2 && i < 5 {
                cs.define(
                    off + 4,
                    4,
                    (!(size.wrapping_sub(1)) >> 32) as u32,
                    Access::Rw,
                    0,
                );
            }
            i += bar.slots();
        }
    }
}

/// Alternative Routing-ID Interpretation (ID 0x000e, version 1), 8 bytes.
///
/// ```text
/// +00 | Next | Ver | ID                                                  |
/// +04 | ARI Control (RsvdP) | ARI Capability: Next Function Number(15:8)  |
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AriCap {
    /// Function number of the next function of the device (0 ends the chain).
    pub next_function: u8,
}

impl ExtCapability for AriCap {
    fn id(&self) -> u16 {
        id::EXT_ARI
    }
    fn version(&self) -> u8 {
        1
    }
    fn size(&self) -> u16 {
        8
    }
    fn install(&self, cs: &mut ConfigSpace, at: u16) {
        cs.define(
            at + 4,
            4,
            0xffff_ffff,
            Access::Ro,
            (self.next_function as u32) << 8,
        );
    }
}

/// Access Control Services (ID 0x000d, version 1), 8 bytes, for downstream ports.
///
/// ```text
/// +00 | Next | Ver | ID                                                  |
/// +04 | ACS Control (RW 4:0)  | ACS Capability: UF(4) CR(3) RR(2) TB(1) SV(0) |
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AcsCap;

impl ExtCapability for AcsCap {
    fn id(&self) -> u16 {
        id::EXT_ACS
    }
    fn version(&self) -> u8 {
        1
    }
    fn size(&self) -> u16 {
        8
    }
    fn install(&self, cs: &mut ConfigSpace, at: u16) {
        cs.define(at + 4, 2, 0xffff, Access::Ro, 0x001f);
        cs.define(at + 6, 2, 0xffff, Access::RsvdP, 0);
        cs.define(at + 6, 2, 0x001f, Access::Rw, 0);
    }
}

/// Device Serial Number (ID 0x0003, version 1), 12 bytes.
///
/// ```text
/// +00 | Next | Ver | ID                                                  |
/// +04 | Serial Number, lower DW (RO)                                    |
/// +08 | Serial Number, upper DW (RO)                                    |
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DsnCap {
    /// The 64-bit serial number (an EUI-64).
    pub serial: u64,
}

impl ExtCapability for DsnCap {
    fn id(&self) -> u16 {
        id::EXT_DSN
    }
    fn version(&self) -> u8 {
        1
    }
    fn size(&self) -> u16 {
        12
    }
    fn install(&self, cs: &mut ConfigSpace, at: u16) {
        cs.define(at + 4, 4, 0xffff_ffff, Access::Ro, self.serial as u32);
        cs.define(
            at + 8,
            4,
            0xffff_ffff,
            Access::Ro,
            (self.serial >> 32) as u32,
        );
    }
}

/// Latency Tolerance Reporting (ID 0x0018, version 1), 8 bytes.
///
/// ```text
/// +00 | Next | Ver | ID                                                  |
/// +04 | Max No-Snoop Latency: Scale(12:10) Value(9:0) (RW) | Max Snoop Latency (RW) |
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LtrCap;

impl ExtCapability for LtrCap {
    fn id(&self) -> u16 {
        id::EXT_LTR
    }
    fn version(&self) -> u8 {
        1
    }
    fn size(&self) -> u16 {
        8
    }
    fn install(&self, cs: &mut ConfigSpace, at: u16) {
        cs.define(at + 4, 4, 0xffff_ffff, Access::RsvdP, 0);
        cs.define(at + 4, 4, 0x1fff_1fff, Access::Rw, 0);
    }
}

/// ATS Control: Enable (bit 15 of the register at +06).
pub const ATS_CTL_ENABLE: u16 = 0x8000;

/// Address Translation Services (ID 0x000f, version 1), 8 bytes (PCIe Base Spec,
/// ATS Extended Capability).
///
/// ```text
/// +00 | Next | Ver | ID                                                        |
/// +04 | ATS Control: Enable(15,RW) STU(4:0,RW) | ATS Capability: Page Aligned   |
/// |   |                                        | Request(5) Invalidate Queue     |
/// |   |                                        | Depth(4:0; 0 means 32)          |
/// ```
///
/// The Smallest Translation Unit is 4 KiB << STU: the unit of Translation Requests,
/// Translation Completions and Invalidate Requests.
///
/// ```
/// use pcielab_config::caps::CapabilityList;
/// use pcielab_config::ext_caps::{AtsCap, ATS_CTL_ENABLE};
/// use pcielab_config::header::Type0;
/// let mut cs = Type0::default().build().unwrap();
/// let placed = CapabilityList::new().with_ext(AtsCap { invalidate_queue_depth: 0 }).install(&mut cs).unwrap();
/// let at = placed[0].offset;
/// assert_eq!(cs.read_u16(at + 4), 0x0020); // Page Aligned Request, 32 invalidations
/// cs.write_u16(at + 6, 0x801f); // Enable, STU 31
/// assert_eq!(cs.read_u16(at + 6), ATS_CTL_ENABLE | 0x1f);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AtsCap {
    /// Invalidate Requests the function accepts before it throttles the link
    /// (0 means 32).
    pub invalidate_queue_depth: u8,
}

impl ExtCapability for AtsCap {
    fn id(&self) -> u16 {
        id::EXT_ATS
    }
    fn version(&self) -> u8 {
        1
    }
    fn size(&self) -> u16 {
        8
    }
    fn install(&self, cs: &mut ConfigSpace, at: u16) {
        let cap = 0x0020 | (self.invalidate_queue_depth as u32 & 0x1f);
        cs.define(at + 4, 2, 0xffff, Access::Ro, cap);
        cs.define(at + 6, 2, 0xffff, Access::RsvdP, 0);
        cs.define(at + 6, 2, ATS_CTL_ENABLE as u32 | 0x1f, Access::Rw, 0);
    }
}

/// Page Request Control: Enable (bit 0 of the register at +04).
pub const PRI_CTL_ENABLE: u16 = 1;
/// Page Request Status: Response Failure (bit 0, RW1C).
pub const PRI_STA_RESPONSE_FAILURE: u16 = 1;
/// Page Request Status: Stopped (bit 8): enable clear and no request outstanding.
pub const PRI_STA_STOPPED: u16 = 1 << 8;

/// Page Request Interface (ID 0x0013, version 1), 16 bytes (PCIe Base Spec, ATS
/// chapter): a function with ATS asks the host to make pages resident.
///
/// ```text
/// +00 | Next | Ver | ID                                                        |
/// +04 | Page Request Status: PASID Required(15) Stopped(8)  | Control: Reset(1) |
/// |   |   Unexpected PRG Index(1,RW1C) Response Failure(0,RW1C) | Enable(0,RW) |
/// +08 | Outstanding Page Request Capacity (RO)                                  |
/// +0C | Outstanding Page Request Allocation (RW)                                |
/// ```
///
/// ```
/// use pcielab_config::caps::CapabilityList;
/// use pcielab_config::ext_caps::{PriCap, PRI_STA_STOPPED};
/// use pcielab_config::header::Type0;
/// let mut cs = Type0::default().build().unwrap();
/// let placed = CapabilityList::new().with_ext(PriCap { capacity: 32 }).install(&mut cs).unwrap();
/// let at = placed[0].offset;
/// assert_eq!(cs.read_u16(at + 6), PRI_STA_STOPPED);
/// assert_eq!(cs.read_u32(at + 8), 32);
/// cs.write_u32(at + 0xc, 16);
/// assert_eq!(cs.read_u32(at + 0xc), 16);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PriCap {
    /// Outstanding Page Request Capacity: page requests the function can have
    /// outstanding.
    pub capacity: u32,
}

impl ExtCapability for PriCap {
    fn id(&self) -> u16 {
        id::EXT_PRI
    }
    fn version(&self) -> u8 {
        1
    }
    fn size(&self) -> u16 {
        16
    }
    fn install(&self, cs: &mut ConfigSpace, at: u16) {
        cs.define(at + 4, 2, 0xffff, Access::RsvdP, 0);
        cs.define(at + 4, 2, PRI_CTL_ENABLE as u32, Access::Rw, 0);
        cs.define(at + 6, 2, 0xffff, Access::Ro, PRI_STA_STOPPED as u32);
        cs.define(at + 6, 2, 0x0003, Access::Rw1c, 0);
        cs.define(at + 8, 4, 0xffff_ffff, Access::Ro, self.capacity);
        cs.define(at + 0xc, 4, 0xffff_ffff, Access::Rw, 0);
    }
}

/// PASID Control: PASID Enable (bit 0 of the register at +06).
pub const PASID_CTL_ENABLE: u16 = 1;
/// PASID Control: Execute Permission Enable (bit 1).
pub const PASID_CTL_EXECUTE: u16 = 1 << 1;
/// PASID Control: Privileged Mode Enable (bit 2).
pub const PASID_CTL_PRIVILEGED: u16 = 1 << 2;

/// Process Address Space ID (ID 0x001b, version 1), 8 bytes (PCIe Base Spec, PASID
/// Extended Capability): the function may tag its requests with a PASID TLP prefix,
/// naming the address space they belong to.
///
/// ```text
/// +00 | Next | Ver | ID                                                        |
/// +04 | PASID Control: Privileged Mode     | PASID Capability: Max PASID       |
/// |   |   Enable(2) Execute Permission     |   Width(12:8) Privileged Mode     |
/// |   |   Enable(1) PASID Enable(0)        |   Supported(2) Execute Permission |
/// |   |   (RW when supported)              |   Supported(1)                    |
/// ```
///
/// ```
/// use pcielab_config::caps::CapabilityList;
/// use pcielab_config::ext_caps::{PasidCap, PASID_CTL_ENABLE};
/// use pcielab_config::header::Type0;
/// let mut cs = Type0::default().build().unwrap();
/// let cap = PasidCap { max_width: 20, execute: false, privileged: true };
/// let placed = CapabilityList::new().with_ext(cap).install(&mut cs).unwrap();
/// let at = placed[0].offset;
/// assert_eq!(cs.read_u16(at + 4), 0x1404); // width 20, Privileged Mode Supported
/// cs.write_u16(at + 6, 0x0007); // Execute is not supported: its enable stays 0
/// assert_eq!(cs.read_u16(at + 6), PASID_CTL_ENABLE | 4);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PasidCap {
    /// Max PASID Width: PASIDs are below `1 << max_width` (1..=20).
    pub max_width: u8,
    /// Execute Permission Supported.
    pub execute: bool,
    /// Privileged Mode Supported.
    pub privileged: bool,
}

impl ExtCapability for PasidCap {
    fn id(&self) -> u16 {
        id::EXT_PASID
    }
    fn version(&self) -> u8 {
        1
    }
    fn size(&self) -> u16 {
        8
    }
    fn install(&self, cs: &mut ConfigSpace, at: u16) {
        let cap = ((self.max_width.min(20) as u32) << 8)
            | (self.execute as u32) << 1
            | (self.privileged as u32) << 2;
        cs.define(at + 4, 2, 0xffff, Access::Ro, cap);
        cs.define(at + 6, 2, 0xffff, Access::RsvdP, 0);
        let rw = PASID_CTL_ENABLE as u32
            | if self.execute {
                PASID_CTL_EXECUTE as u32
            } else {
                0
            }
            | if self.privileged {
                PASID_CTL_PRIVILEGED as u32
            } else {
                0
            };
        cs.define(at + 6, 2, rw, Access::Rw, 0);
    }
}

/// DPC Control: DPC Trigger Enable (bits 1:0): 01b on ERR_FATAL, 10b on ERR_NONFATAL
/// or ERR_FATAL.
pub const DPC_CTL_TRIGGER_MASK: u16 = 0x0003;
/// DPC Control: Completion Control (bit 2): completions for contained requests carry
/// Unsupported Request (set) or Completer Abort (clear).
pub const DPC_CTL_CPL_UR: u16 = 1 << 2;
/// DPC Control: DPC Interrupt Enable (bit 3).
pub const DPC_CTL_INT_ENABLE: u16 = 1 << 3;
/// DPC Control: DPC ERR_COR Enable (bit 4).
pub const DPC_CTL_ERR_COR: u16 = 1 << 4;
/// DPC Control: Poisoned TLP Egress Blocking Enable (bit 5).
pub const DPC_CTL_POISON_BLOCK: u16 = 1 << 5;
/// DPC Control: DPC Software Trigger (bit 6; the port clears it as it triggers).
pub const DPC_CTL_SW_TRIGGER: u16 = 1 << 6;
/// DPC Status: DPC Trigger Status (bit 0, RW1C).
pub const DPC_STA_TRIGGER: u16 = 1;
/// DPC Status: DPC Interrupt Status (bit 3, RW1C).
pub const DPC_STA_INT: u16 = 1 << 3;

/// Downstream Port Containment (ID 0x001D, version 1), 12 bytes, without the Root
/// Port extensions (PCIe Base Spec, DPC extended capability): on an uncorrectable
/// error a Downstream Port disables its Link until software releases it.
///
/// ```text
/// +00 | Next | Ver | ID                                                        |
/// +04 | DPC Control (RW): DL_Active ERR_COR Enable(7) Software Trigger(6)      |
/// |   |   Poisoned TLP Egress Blocking Enable(5) ERR_COR Enable(4)            |
/// |   |   Interrupt Enable(3) Completion Control(2) Trigger Enable(1:0)       |
/// |   | DPC Capability (RO): DL_Active ERR_COR Supported(12) RP PIO Log Size |
/// |   |   (11:8) Software Triggering(7) Poisoned TLP Egress Blocking(6)       |
/// |   |   RP Extensions(5) Interrupt Message Number(4:0)                      |
/// +08 | Error Source ID (RO) | DPC Status: RP PIO First Error Pointer(12:8)   |
/// |   |   Trigger Reason Extension(6:5) RP Busy(4) Interrupt Status(3, RW1C)  |
/// |   |   Trigger Reason(2:1) Trigger Status(0, RW1C)                         |
/// ```
///
/// ```
/// use pcielab_config::caps::CapabilityList;
/// use pcielab_config::ext_caps::{DpcCap, DPC_STA_TRIGGER};
/// use pcielab_config::header::Type1;
/// let mut cs = Type1::default().build().unwrap();
/// let placed = CapabilityList::new().with_ext(DpcCap).install(&mut cs).unwrap();
/// let at = placed[0].offset;
/// assert_eq!(cs.read_u16(at + 4), 0x10c0); // DL_Active ERR_COR, SW trigger, poison blocking
/// cs.write_u16(at + 6, 0x0002); // trigger on ERR_NONFATAL or ERR_FATAL
/// assert_eq!(cs.read_u16(at + 6), 0x0002);
/// cs.hw_update(at + 8, 2, 0xffff, 0x0005); // the port triggers (ERR_NONFATAL received)
/// cs.write_u16(at + 8, DPC_STA_TRIGGER); // software releases it
/// assert_eq!(cs.read_u16(at + 8) & DPC_STA_TRIGGER, 0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DpcCap;

impl ExtCapability for DpcCap {
    fn id(&self) -> u16 {
        id::EXT_DPC
    }
    fn version(&self) -> u8 {
        1
    }
    fn size(&self) -> u16 {
        12
    }
    fn install(&self, cs: &mut ConfigSpace, at: u16) {
        // Interrupt Message Number 0, no RP extensions, poisoned TLP egress blocking,
        // software triggering, RP PIO log size 0, DL_Active ERR_COR signalling.
        cs.define(at + 4, 2, 0xffff, Access::Ro, 0x10c0);
        cs.define(at + 6, 2, 0xffff, Access::RsvdP, 0);
        cs.define(at + 6, 2, 0x00ff, Access::Rw, 0);
        cs.define(at + 8, 2, 0xffff, Access::Ro, 0);
        cs.define(
            at + 8,
            2,
            (DPC_STA_TRIGGER | DPC_STA_INT) as u32,
            Access::Rw1c,
            0,
        );
        cs.define(at + 0xa, 2, 0xffff, Access::Ro, 0);
    }
}

/// L1 PM Substates Control 1: ASPM L1.2 Enable (bit 2).
pub const L1SS_ASPM_L12: u32 = 1 << 2;
/// L1 PM Substates Control 1: ASPM L1.1 Enable (bit 3).
pub const L1SS_ASPM_L11: u32 = 1 << 3;

/// L1 PM Substates (ID 0x001E, version 1), 16 bytes: the L1.1 and L1.2 substates of
/// ASPM L1 and PCI-PM L1 (PCIe Base Spec 5.5), all four supported.
///
/// ```text
/// +00 | Next | Ver | ID                                                        |
/// +04 | Capabilities (RO): T_POWER_ON Value(23:19) Scale(17:16)               |
/// |   |   Common_Mode_Restore_Time(15:8, µs) L1 PM Substates(4)               |
/// |   |   ASPM L1.1(3) ASPM L1.2(2) PCI-PM L1.1(1) PCI-PM L1.2(0)            |
/// +08 | Control 1 (RW): LTR_L1.2_THRESHOLD Scale(31:29) Value(25:16)          |
/// |   |   Common_Mode_Restore_Time(15:8) ASPM L1.1(3) ASPM L1.2(2) enables     |
/// +0C | Control 2 (RW): T_POWER_ON Value(7:3) Scale(1:0)                      |
/// ```
///
/// T_POWER_ON scales: 0 = 2 µs, 1 = 10 µs, 2 = 100 µs units.
///
/// ```
/// use pcielab_config::caps::CapabilityList;
/// use pcielab_config::ext_caps::L1ssCap;
/// use pcielab_config::header::Type0;
/// let mut cs = Type0::default().build().unwrap();
/// let cap = L1ssCap { common_mode_restore_us: 10, t_power_on_us: 20 };
/// let at = CapabilityList::new().with_ext(cap).install(&mut cs).unwrap()[0].offset;
/// // T_POWER_ON 20 µs: ten 2 µs units (scale 0), the finest scale that holds it.
/// assert_eq!(cs.read_u32(at + 4), 0x1f | 10 << 8 | 10 << 19);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct L1ssCap {
    /// Port Common_Mode_Restore_Time in µs (0..=255).
    pub common_mode_restore_us: u8,
    /// Port T_POWER_ON in µs (encoded in 2, 10 or 100 µs units, rounded up).
    pub t_power_on_us: u32,
}

/// (scale, value) of a T_POWER_ON of `us` microseconds, rounded up.
pub fn t_power_on_code(us: u32) -> (u32, u32) {
    for (scale, unit) in [(0u32, 2u32), (1, 10), (2, 100)] {
        let v = us.div_ceil(unit);
        if v <= 31 {
            return (scale, v);
        }
    }
    (2, 31)
}

/// Microseconds of a T_POWER_ON (scale, value) code (scale 3 is reserved: 0).
pub fn t_power_on_us(scale: u32, value: u32) -> u32 {
    value * [2, 10, 100, 0][scale as usize & 3]
}

impl ExtCapability for L1ssCap {
    fn id(&self) -> u16 {
        id::EXT_L1SS
    }
    fn version(&self) -> u8 {
        1
    }
    fn size(&self) -> u16 {
        16
    }
    fn install(&self, cs: &mut ConfigSpace, at: u16) {
        let (scale, value) = t_power_on_code(self.t_power_on_us);
        let cap = 0x1f | (self.common_mode_restore_us as u32) << 8 | scale << 16 | value << 19;
        cs.define(at + 4, 4, 0xffff_ffff, Access::Ro, cap);
        cs.define(at + 8, 4, 0xffff_ffff, Access::RsvdP, 0);
        cs.define(at + 8, 4, 0xe3ff_ff0f, Access::Rw, 0);
        cs.define(at + 0xc, 4, 0xffff_ffff, Access::RsvdP, 0);
        cs.define(at + 0xc, 4, 0x0000_00fb, Access::Rw, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::{walk, CapabilityList, MsiCap, MsixCap, PcieCap, PmCap, PortType};
    use crate::header::Type0;

    fn full_list() -> CapabilityList {
        CapabilityList::new()
            .with(PmCap::default())
            .with(MsiCap {
                vectors: 32,
                addr64: true,
                per_vector_mask: true,
            })
            .with(MsixCap {
                table_size: 64,
                table_bir: 2,
                table_offset: 0,
                pba_bir: 2,
                pba_offset: 0x800,
            })
            .with(PcieCap::new(PortType::Endpoint))
            .with_ext(AerCap::default())
            .with_ext(SriovCap {
                total_vfs: 8,
                first_vf_offset: 1,
                vf_stride: 1,
                vf_device_id: 0x1234,
                function: 0,
                vf_bars: [
                    Some(Bar::Mem64 {
                        size: 0x4000,
                        prefetchable: true,
                    }),
                    None,
                    None,
                    None,
                    None,
                    None,
                ],
            })
            .with_ext(AriCap::default())
            .with_ext(AcsCap)
            .with_ext(DsnCap {
                serial: 0x0123_4567_89ab_cdef,
            })
            .with_ext(LtrCap)
    }

    #[test]
    fn layout_never_overlaps_and_chain_ends() {
        let mut cs = Type0::default().build().unwrap();
        let placed = full_list().install(&mut cs).unwrap();
        // Expected offsets by hand: PM 0x40 (8), MSI 0x48 (0x18), MSI-X 0x60 (12),
        // PCIe 0x6c (0x3c) ends at 0xa8; ext: AER 0x100 (0x48), SR-IOV 0x148 (0x40),
        // ARI 0x188 (8), ACS 0x190 (8), DSN 0x198 (12), LTR 0x1a4 (8).
        let offs: Vec<u16> = placed.iter().map(|p| p.offset).collect();
        assert_eq!(
            offs,
            vec![0x40, 0x48, 0x60, 0x6c, 0x100, 0x148, 0x188, 0x190, 0x198, 0x1a4]
        );
        for w in placed.windows(2) {
            if w[0].extended == w[1].extended {
                assert!(w[0].offset + w[0].len <= w[1].offset, "{w:?}");
            }
        }
        let (found, err) = walk(cs.bytes());
        assert_eq!(err, None);
        let ids: Vec<(u16, bool)> = found.iter().map(|f| (f.id, f.extended)).collect();
        assert_eq!(
            ids,
            vec![
                (1, false),
                (5, false),
                (0x11, false),
                (0x10, false),
                (1, true),
                (0x10, true),
                (0xe, true),
                (0xd, true),
                (3, true),
                (0x18, true)
            ]
        );
        // Last PCI capability and last extended capability end their chains.
        assert_eq!(cs.read_u8(0x6c + 1), 0);
        assert_eq!(cs.read_u32(0x1a4) >> 20, 0);
        // Headers are read-only.
        cs.write_u32(0x100, 0);
        assert_eq!(cs.read_u32(0x100), 0x1482_0001);
    }

    #[test]
    fn too_many_caps_is_an_error() {
        let mut list = CapabilityList::new();
        for _ in 0..4 {
            list.push(Box::new(PcieCap::new(PortType::Endpoint)));
        }
        let mut cs = Type0::default().build().unwrap();
        let err = list.install(&mut cs).unwrap_err();
        assert!(!err.extended);
        assert_eq!(err.needed, 4 * 0x3c);
    }

    #[test]
    fn aer_sticky_and_defaults() {
        let mut cs = Type0::default().build().unwrap();
        CapabilityList::new()
            .with_ext(AerCap {
                root_port: true,
                ..AerCap::default()
            })
            .install(&mut cs)
            .unwrap();
        assert_eq!(cs.read_u32(0x10c), 0x0046_2030);
        assert_eq!(cs.read_u32(0x114), 0x2000);
        cs.hw_write(0x104, 4, 0x0010_0000); // UR detected
        cs.write_u32(0x108, 0xffff_ffff);
        assert_eq!(cs.read_u32(0x108), AER_UNCORR_BITS);
        cs.reset();
        assert_eq!(cs.read_u32(0x104), 0x0010_0000, "status is sticky");
        assert_eq!(cs.read_u32(0x108), AER_UNCORR_BITS, "mask is sticky");
        cs.write_u32(0x104, 0x0010_0000);
        assert_eq!(cs.read_u32(0x104), 0);
    }

    #[test]
    fn sriov_vf_bar_sizing() {
        let mut cs = Type0::default().build().unwrap();
        full_list().install(&mut cs).unwrap();
        let vfbar = 0x148 + 0x24;
        cs.write_u32(vfbar, 0xffff_ffff);
        cs.write_u32(vfbar + 4, 0xffff_ffff);
        assert_eq!(cs.read_u32(vfbar), 0xffff_c00c);
        assert_eq!(cs.read_u32(vfbar + 4), 0xffff_ffff);
        cs.write_u16(0x148 + 0x10, 5);
        assert_eq!(cs.read_u16(0x148 + 0x10), 5);
        assert_eq!(cs.read_u16(0x148 + 0x0e), 8);
    }
}
