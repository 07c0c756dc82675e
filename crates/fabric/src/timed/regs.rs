//! Registers and capabilities the components read and write: capability lookup, AER
//! status and header logging, power-management and message codes.

use crate::functional::{Fabric, FnId};
use crate::inthash::IntMap;
use pcielab_config::ext_caps::{AER_CTL_MHR_ENABLE, AER_CTL_PREFIX_LOG_PRESENT};
use std::collections::VecDeque;

/// What AER logs of a TLP: its header (Header Log) and its End-End TLP Prefix (TLP
/// Prefix Log), if it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LoggedHeader {
    pub header: [u8; 16],
    pub prefix: Option<[u8; 4]>,
}

/// Severity of an error message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorSeverity {
    /// ERR_COR (a correctable error, or an Advisory Non-Fatal Error).
    Correctable,
    /// ERR_NONFATAL.
    NonFatal,
    /// ERR_FATAL.
    Fatal,
}

impl ErrorSeverity {
    /// The message code.
    pub fn code(self) -> u8 {
        match self {
            ErrorSeverity::Correctable => 0x30,
            ErrorSeverity::NonFatal => 0x31,
            ErrorSeverity::Fatal => 0x33,
        }
    }
    pub(crate) fn from_code(c: u8) -> Option<ErrorSeverity> {
        match c {
            0x30 => Some(ErrorSeverity::Correctable),
            0x31 => Some(ErrorSeverity::NonFatal),
            0x33 => Some(ErrorSeverity::Fatal),
            _ => None,
        }
    }
}

/// AER Uncorrectable Error Status bits.
pub(crate) const AER_UNEXPECTED_CPL: u32 = 1 << 16;
/// AER Uncorrectable Error Status: Unsupported Request.
pub(crate) const AER_UNSUPPORTED: u32 = 1 << 20;
/// AER Uncorrectable Error Status: Completion Timeout.
pub(crate) const AER_COMPLETION_TIMEOUT: u32 = 1 << 14;
/// Malformed TLP.
pub(crate) const AER_MALFORMED: u32 = 1 << 18;

/// Sets an AER Uncorrectable Error Status bit of function `f` (if it has AER).
/// Offsets of the PCI Express capability and the AER extended capability of `f`.
pub(crate) fn err_caps(fabric: &Fabric, f: FnId) -> (Option<u16>, Option<u16>) {
    let Some(func) = fabric.functions.get(f.0 as usize) else {
        return (None, None);
    };
    let caps = pcielab_config::caps::walk(func.config.bytes()).0;
    let pcie = caps
        .iter()
        .find(|c| !c.extended && c.id == pcielab_config::caps::id::PCIE as u16)
        .map(|c| c.offset);
    let aer = caps
        .iter()
        .find(|c| c.extended && c.id == 1)
        .map(|c| c.offset);
    (pcie, aer)
}

/// Sets `bits` in the `len`-byte register at `off` as the hardware does (status bits
/// that software clears by writing 1).
pub(crate) fn set_bits(cs: &mut pcielab_config::ConfigSpace, off: u16, len: usize, bits: u32) {
    let v = cs.read(off, len);
    cs.hw_write(off, len, v | bits);
}

/// The PM capability of function `f` (its offset).
pub(crate) fn pm_cap(fabric: &Fabric, f: FnId) -> Option<u16> {
    std_cap(fabric, f, pcielab_config::caps::id::PM)
}

/// The offset of function `f`'s standard (not extended) capability `id`.
pub(crate) fn std_cap(fabric: &Fabric, f: FnId, id: u8) -> Option<u16> {
    let func = fabric.functions.get(f.0 as usize)?;
    pcielab_config::caps::walk(func.config.bytes())
        .0
        .iter()
        .find(|c| !c.extended && c.id == id as u16)
        .map(|c| c.offset)
}

/// PMCSR: PME_Status (RW1CS).
pub(crate) const PMCSR_PME_STATUS: u32 = 1 << 15;
/// PMCSR: PME_En (RWS).
pub(crate) const PMCSR_PME_EN: u32 = 1 << 8;
/// Root Control: PME Interrupt Enable.
pub(crate) const RTCTL_PME_IE: u16 = 1 << 3;
/// Root Status: PME Status (RW1C); bits 15:0 are the PME Requester ID.
pub(crate) const RTSTA_PME_STATUS: u32 = 1 << 16;
/// Root Status: PME Pending (RO).
pub(crate) const RTSTA_PME_PENDING: u32 = 1 << 17;

/// AER Correctable Error Status: Advisory Non-Fatal Error.
pub(crate) const AER_CORR_ANFE: u32 = 1 << 13;
/// AER Correctable Error Status: Bad TLP (LCRC or sequence number).
pub(crate) const AER_CORR_BAD_TLP: u32 = 1 << 6;
/// AER Correctable Error Status: Bad DLLP (CRC).
pub(crate) const AER_CORR_BAD_DLLP: u32 = 1 << 7;
/// AER Correctable Error Status: REPLAY_NUM Rollover.
pub(crate) const AER_CORR_REPLAY_ROLLOVER: u32 = 1 << 8;
/// AER Correctable Error Status: Replay Timer Timeout.
pub(crate) const AER_CORR_REPLAY_TIMEOUT: u32 = 1 << 12;

/// What function `f` records for the uncorrectable error `bit` it detected, and the
/// message it must send (PCIe Base Spec 6.2.6, the error-logging flow): the AER
/// Uncorrectable Error Status bit; severity from the Uncorrectable Error Severity
/// register; for an `advisory` case (an Unexpected Completion or a Completion Timeout at
/// a requester) of Non-Fatal severity, an Advisory Non-Fatal Error: the Correctable
/// Error Detected bit of Device Status and the ANFE bit of Correctable Error Status,
/// signalled with ERR_COR when ANFE is unmasked and Correctable Error Reporting is
/// enabled; otherwise the Fatal or Non-Fatal Error Detected bit, signalled with
/// ERR_FATAL/ERR_NONFATAL when the error is unmasked and its reporting enable (Device
/// Control) or SERR# Enable (Command) is set.
pub(crate) fn log_error(
    fabric: &mut Fabric,
    records: &mut IntMap<u32, VecDeque<(u32, LoggedHeader)>>,
    f: FnId,
    bit: u32,
    advisory: bool,
    header: Option<LoggedHeader>,
    overflow: &mut bool,
) -> Option<ErrorSeverity> {
    let (pcie, aer) = err_caps(fabric, f);
    let func = fabric.functions.get_mut(f.0 as usize)?;
    let cs = &mut func.config;
    if let Some(a) = aer {
        // No room to record its header: Header Log Overflow, which the caller signals.
        *overflow = !record_first_error(cs, a, bit, header, records.entry(f.0).or_default());
        set_bits(cs, a + 4, 4, bit);
    }
    let fatal = match aer {
        Some(a) => cs.read_u32(a + 0x0c) & bit != 0,
        None => pcielab_config::ext_caps::AER_UNCORR_SEVERITY_DEFAULT & bit != 0,
    };
    let masked = aer.is_some_and(|a| cs.read_u32(a + 8) & bit != 0);
    let devctl = pcie.map_or(0, |p| {
        cs.read_u16(p + pcielab_config::caps::pcie_reg::DEVCTL)
    });
    let serr = cs.read_u16(pcielab_config::header::reg::COMMAND) & 0x100 != 0;
    let devsta = pcie.map(|p| p + pcielab_config::caps::pcie_reg::DEVSTA);
    if bit == AER_UNSUPPORTED {
        if let Some(d) = devsta {
            set_bits(cs, d, 2, 8); // Unsupported Request Detected
        }
    }
    if advisory && !fatal {
        if let Some(d) = devsta {
            set_bits(cs, d, 2, 1);
        }
        if let Some(a) = aer {
            set_bits(cs, a + 0x10, 4, AER_CORR_ANFE);
        }
        let anfe_masked = aer.is_some_and(|a| cs.read_u32(a + 0x14) & AER_CORR_ANFE != 0);
        return (!anfe_masked && devctl & 1 != 0).then_some(ErrorSeverity::Correctable);
    }
    // Device Status "detected" and Device Control "reporting enable" share the bit.
    let (flag, sev) = if fatal {
        (4, ErrorSeverity::Fatal)
    } else {
        (2, ErrorSeverity::NonFatal)
    };
    if let Some(d) = devsta {
        set_bits(cs, d, 2, flag);
    }
    (!masked && (devctl as u32 & flag != 0 || serr)).then_some(sev)
}

/// Headers a function with Multiple Header Recording enabled keeps behind the one in
/// its Header Log.
pub(crate) const AER_HEADER_RECORDS: usize = 4;

/// First Error Pointer and Header Log (PCIe Base Spec 7.8.4.7–7.8.4.8): an unmasked
/// uncorrectable error `bit` becomes the first error when the Uncorrectable Error
/// Status bit the pointer names is clear (software has serviced the last first error,
/// or there was none); its TLP's header is then logged, the byte holding Fmt/Type in
/// bits 31:24 of the first Header Log DW (a Completion Timeout logs the request that
/// timed out: functions set Completion Timeout Prefix/Header Log Capable). An error
/// without a header (a timed-out ATS Translation Request) leaves zeros. A masked error
/// is recorded in neither. Without Multiple Header Recording, the log stays locked
/// until the first error's status bit is cleared; with it, an error that comes while
/// the first is unserviced is recorded behind it (up to [`AER_HEADER_RECORDS`]; see
/// `Engine::aer_records_written`). Returns false when there was no room to record it
/// (Header Log Overflow).
pub(crate) fn record_first_error(
    cs: &mut pcielab_config::ConfigSpace,
    aer: u16,
    bit: u32,
    header: Option<LoggedHeader>,
    records: &mut VecDeque<(u32, LoggedHeader)>,
) -> bool {
    let status = cs.read_u32(aer + 4);
    let masked = cs.read_u32(aer + 8) & bit != 0;
    let ctl = cs.read_u32(aer + 0x18);
    if masked {
        return true;
    }
    if status & (1 << (ctl & 0x1f)) != 0 {
        // A first error is unserviced: with Multiple Header Recording this one is
        // recorded behind it, while there is room (else: Header Log Overflow).
        if ctl & AER_CTL_MHR_ENABLE == 0 {
            return true;
        }
        if records.len() >= AER_HEADER_RECORDS {
            return false;
        }
        records.push_back((bit, header.unwrap_or(LoggedHeader::ZERO)));
        return true;
    }
    load_header_log(cs, aer, bit, header);
    true
}

/// Puts error `bit` with `header` into the First Error Pointer, Header Log and TLP
/// Prefix Log of the AER capability at `aer`.
pub(crate) fn load_header_log(
    cs: &mut pcielab_config::ConfigSpace,
    aer: u16,
    bit: u32,
    header: Option<LoggedHeader>,
) {
    let ctl = cs.read_u32(aer + 0x18);
    let prefix = header.and_then(|h| h.prefix);
    let present = if prefix.is_some() {
        AER_CTL_PREFIX_LOG_PRESENT
    } else {
        0
    };
    cs.hw_write(
        aer + 0x18,
        4,
        (ctl & !(0x1f | AER_CTL_PREFIX_LOG_PRESENT)) | bit.trailing_zeros() | present,
    );
    let h = header.map_or([0; 16], |h| h.header);
    for (i, dw) in h.chunks_exact(4).enumerate() {
        let v = u32::from_be_bytes([dw[0], dw[1], dw[2], dw[3]]);
        cs.hw_write(aer + 0x1c + 4 * i as u16, 4, v);
    }
    // The TLP Prefix Log: the prefix in its first DW, the rest zero.
    let p = prefix.map_or(0, u32::from_be_bytes);
    cs.hw_write(aer + 0x38, 4, p);
    for o in [0x3c, 0x40, 0x44] {
        cs.hw_write(aer + o, 4, 0);
    }
}

impl LoggedHeader {
    /// Nothing logged (an error without a TLP).
    pub(crate) const ZERO: LoggedHeader = LoggedHeader {
        header: [0; 16],
        prefix: None,
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcielab_config::caps::CapabilityList;
    use pcielab_config::ext_caps::AerCap;
    use pcielab_config::ConfigSpace;
    use pcielab_wire::ByteEnables;

    const UR: u32 = 1 << 20;
    const CA: u32 = 1 << 15;

    /// A configuration space with AER; the capability's offset.
    fn with_aer() -> (ConfigSpace, u16) {
        let mut cs = ConfigSpace::new();
        let placed = CapabilityList::new()
            .with_ext(AerCap::default())
            .install(&mut cs)
            .unwrap();
        (cs, placed[0].offset)
    }

    fn header(b: u8) -> Option<LoggedHeader> {
        Some(LoggedHeader {
            header: [b; 16],
            prefix: None,
        })
    }

    /// As hardware sets it: the error's status bit.
    fn set_status(cs: &mut ConfigSpace, aer: u16, bit: u32) {
        let s = cs.read_u32(aer + 4);
        cs.hw_write(aer + 4, 4, s | bit);
    }

    #[test]
    fn the_first_error_locks_the_header_log_until_it_is_serviced() {
        let (mut cs, aer) = with_aer();
        let mut q = VecDeque::new();
        assert!(record_first_error(&mut cs, aer, UR, header(0xaa), &mut q));
        set_status(&mut cs, aer, UR);
        assert_eq!(cs.read_u32(aer + 0x18) & 0x1f, 20, "First Error Pointer");
        assert_eq!(cs.read_u32(aer + 0x1c).to_be_bytes()[0], 0xaa);
        // A second error, the first unserviced, without Multiple Header Recording:
        // not recorded, and no overflow.
        assert!(record_first_error(&mut cs, aer, CA, header(0xbb), &mut q));
        assert_eq!(cs.read_u32(aer + 0x18) & 0x1f, 20);
        assert_eq!(cs.read_u32(aer + 0x1c).to_be_bytes()[0], 0xaa);
        assert!(q.is_empty());
    }

    #[test]
    fn multiple_header_recording_queues_errors_until_it_overflows() {
        let (mut cs, aer) = with_aer();
        let ctl = cs.read_u32(aer + 0x18);
        cs.write(aer + 0x18, ctl | AER_CTL_MHR_ENABLE, ByteEnables::ALL);
        let mut q = VecDeque::new();
        assert!(record_first_error(&mut cs, aer, UR, header(1), &mut q));
        set_status(&mut cs, aer, UR);
        for i in 0..AER_HEADER_RECORDS as u8 {
            assert!(record_first_error(&mut cs, aer, CA, header(2 + i), &mut q));
        }
        assert_eq!(q.len(), AER_HEADER_RECORDS);
        assert_eq!(q[0], (CA, header(2).unwrap()));
        // No room left: Header Log Overflow.
        assert!(!record_first_error(&mut cs, aer, CA, header(9), &mut q));
        // A masked error is recorded nowhere.
        cs.write(aer + 8, CA, ByteEnables::ALL);
        assert!(record_first_error(&mut cs, aer, CA, header(9), &mut q));
        assert_eq!(q.len(), AER_HEADER_RECORDS);
    }
}
