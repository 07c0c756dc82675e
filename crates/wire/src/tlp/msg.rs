//! Message requests: the routing subfield, message codes and the message-specific
//! fields of header DW2–DW3.
//!
//! ```text
//!  byte:   0        1        2        3
//!  DW0  | Fmt|Type (10rrr) | ... common ...     | Length      |
//!  DW1  | Requester ID     | Tag    | Message Code |
//!  DW2  | address[63:32] or destination ID (by ID) or message specific |
//!  DW3  | address[31:0]  or message specific                           |
//! ```

use crate::types::Bdf;
use core::fmt;

/// The routing subfield `r[2:0]` of a message's Type field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MsgRouting {
    /// 000b: routed to the root complex.
    ToRc,
    /// 001b: routed by address.
    ByAddress,
    /// 010b: routed by ID.
    ById,
    /// 011b: broadcast from the root complex.
    Broadcast,
    /// 100b: local, terminates at the receiver.
    Local,
    /// 101b: gathered and routed to the root complex.
    Gathered,
}

impl MsgRouting {
    /// All six routings.
    pub const ALL: [MsgRouting; 6] = [
        MsgRouting::ToRc,
        MsgRouting::ByAddress,
        MsgRouting::ById,
        MsgRouting::Broadcast,
        MsgRouting::Local,
        MsgRouting::Gathered,
    ];
    /// Decodes `r[2:0]`; 110b and 111b are reserved.
    pub const fn from_raw(raw: u8) -> Option<MsgRouting> {
        match raw {
            0 => Some(MsgRouting::ToRc),
            1 => Some(MsgRouting::ByAddress),
            2 => Some(MsgRouting::ById),
            3 => Some(MsgRouting::Broadcast),
            4 => Some(MsgRouting::Local),
            5 => Some(MsgRouting::Gathered),
            _ => None,
        }
    }
    /// The 3-bit encoding.
    pub const fn raw(self) -> u8 {
        match self {
            MsgRouting::ToRc => 0,
            MsgRouting::ByAddress => 1,
            MsgRouting::ById => 2,
            MsgRouting::Broadcast => 3,
            MsgRouting::Local => 4,
            MsgRouting::Gathered => 5,
        }
    }
    /// The JSON name (`to_rc`, `by_address`, …).
    pub const fn name(self) -> &'static str {
        match self {
            MsgRouting::ToRc => "to_rc",
            MsgRouting::ByAddress => "by_address",
            MsgRouting::ById => "by_id",
            MsgRouting::Broadcast => "broadcast",
            MsgRouting::Local => "local",
            MsgRouting::Gathered => "gathered",
        }
    }
    /// Parses the JSON name.
    pub fn from_name(s: &str) -> Option<MsgRouting> {
        MsgRouting::ALL.iter().copied().find(|r| r.name() == s)
    }
}

macro_rules! msg_codes {
    ($( $(#[$doc:meta])* $var:ident = $val:expr, $name:expr; )*) => {
        /// A message code. Codes this codec does not know decode as `Unknown(raw)`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum MsgCode {
            $( $(#[$doc])* $var, )*
            /// A code not listed above, kept as found.
            Unknown(u8),
        }
        impl MsgCode {
            /// Decodes the 8-bit code.
            pub const fn from_raw(raw: u8) -> MsgCode {
                match raw {
                    $( $val => MsgCode::$var, )*
                    other => MsgCode::Unknown(other),
                }
            }
            /// The 8-bit code.
            pub const fn raw(self) -> u8 {
                match self {
                    $( MsgCode::$var => $val, )*
                    MsgCode::Unknown(v) => v,
                }
            }
            /// The spec's name, or `None` for an unknown code.
            pub const fn name(self) -> Option<&'static str> {
                match self {
                    $( MsgCode::$var => Some($name), )*
                    MsgCode::Unknown(_) => None,
                }
            }
            /// Every known code.
            pub const KNOWN: &'static [MsgCode] = &[ $( MsgCode::$var, )* ];
        }
    };
}

msg_codes! {
    /// Unlock (broadcast).
    Unlock = 0x00, "Unlock";
    /// ATS Invalidate Request (MsgD, by ID).
    AtsInvalidateRequest = 0x01, "ATS_Invalidate_Request";
    /// ATS Invalidate Completion (by ID).
    AtsInvalidateCompletion = 0x02, "ATS_Invalidate_Completion";
    /// ATS Page Request (to RC).
    PageRequest = 0x04, "Page_Request";
    /// ATS PRG Response (by ID).
    PrgResponse = 0x05, "PRG_Response";
    /// Latency Tolerance Reporting (local).
    Ltr = 0x10, "LTR";
    /// Optimized Buffer Flush/Fill (local).
    Obff = 0x12, "OBFF";
    /// PM_Active_State_Nak (local).
    PmActiveStateNak = 0x14, "PM_Active_State_Nak";
    /// PM_PME (to RC).
    PmPme = 0x18, "PM_PME";
    /// PME_Turn_Off (broadcast).
    PmeTurnOff = 0x19, "PME_Turn_Off";
    /// PME_TO_Ack (gathered).
    PmeToAck = 0x1b, "PME_TO_Ack";
    /// Assert_INTA.
    AssertIntA = 0x20, "Assert_INTA";
    /// Assert_INTB.
    AssertIntB = 0x21, "Assert_INTB";
    /// Assert_INTC.
    AssertIntC = 0x22, "Assert_INTC";
    /// Assert_INTD.
    AssertIntD = 0x23, "Assert_INTD";
    /// Deassert_INTA.
    DeassertIntA = 0x24, "Deassert_INTA";
    /// Deassert_INTB.
    DeassertIntB = 0x25, "Deassert_INTB";
    /// Deassert_INTC.
    DeassertIntC = 0x26, "Deassert_INTC";
    /// Deassert_INTD.
    DeassertIntD = 0x27, "Deassert_INTD";
    /// ERR_COR (to RC).
    ErrCor = 0x30, "ERR_COR";
    /// ERR_NONFATAL (to RC).
    ErrNonFatal = 0x31, "ERR_NONFATAL";
    /// ERR_FATAL (to RC).
    ErrFatal = 0x33, "ERR_FATAL";
    /// Set_Slot_Power_Limit (MsgD, local).
    SetSlotPowerLimit = 0x50, "Set_Slot_Power_Limit";
    /// PTM Request (local).
    PtmRequest = 0x52, "PTM_Request";
    /// PTM Response / ResponseD (local).
    PtmResponse = 0x53, "PTM_Response";
    /// Vendor_Defined Type 0 (an unsupporting receiver reports UR).
    VendorDefinedType0 = 0x7e, "Vendor_Defined_Type_0";
    /// Vendor_Defined Type 1 (an unsupporting receiver drops it silently).
    VendorDefinedType1 = 0x7f, "Vendor_Defined_Type_1";
}

impl MsgCode {
    /// Looks a code up by its spec name.
    pub fn from_name(name: &str) -> Option<MsgCode> {
        MsgCode::KNOWN
            .iter()
            .copied()
            .find(|c| c.name() == Some(name))
    }
    /// The routing the spec requires for this code, when it fixes one.
    /// Vendor-defined messages may use any routing; unknown codes have none.
    pub const fn required_routing(self) -> Option<MsgRouting> {
        use MsgCode::*;
        match self {
            Unlock | PmeTurnOff => Some(MsgRouting::Broadcast),
            AtsInvalidateRequest | AtsInvalidateCompletion | PrgResponse => Some(MsgRouting::ById),
            PageRequest | PmPme | ErrCor | ErrNonFatal | ErrFatal => Some(MsgRouting::ToRc),
            Ltr | Obff | PmActiveStateNak | SetSlotPowerLimit | PtmRequest | PtmResponse => {
                Some(MsgRouting::Local)
            }
            PmeToAck => Some(MsgRouting::Gathered),
            AssertIntA | AssertIntB | AssertIntC | AssertIntD | DeassertIntA | DeassertIntB
            | DeassertIntC | DeassertIntD => Some(MsgRouting::Local),
            VendorDefinedType0 | VendorDefinedType1 | Unknown(_) => None,
        }
    }
}

impl fmt::Display for MsgCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "Msg_{:#04x}", self.raw()),
        }
    }
}

/// Typed views of the message-specific bytes 8..16 of a message header
/// (`dw23` below is those 8 bytes, big-endian as on the wire).
///
/// ```text
/// Vendor_Defined:  [8..10] destination ID (by ID)  [10..12] Vendor ID  [12..16] vendor data
/// LTR:             [12..14] No-Snoop Latency       [14..16] Snoop Latency
/// OBFF:            [15] bits 3:0 OBFF code
/// PTM ResponseD:   [8..16] PTM Master Time (64 bits)
/// ATS Inv Req:     [8..10] destination ID          [15] bits 4:0 ITag
/// ATS Inv Cpl:     [8..10] destination ID  [11] bits 2:0 CC  [12..16] ITag vector
/// Page Request:    [8..16] page address[63:12] | PRG index (11:3) | L (2) W (1) R (0)
/// PRG Response:    [8..10] destination ID  [10..12] response code (15:12), PRG index (8:0)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MsgFields(pub [u8; 8]);

impl MsgFields {
    fn u16_at(&self, i: usize) -> u16 {
        u16::from_be_bytes([self.0[i], self.0[i + 1]])
    }
    fn u32_at(&self, i: usize) -> u32 {
        u32::from_be_bytes([self.0[i], self.0[i + 1], self.0[i + 2], self.0[i + 3]])
    }
    /// The 64-bit value of DW2:DW3 (the address of address-routed messages, the PTM
    /// Master Time of a PTM ResponseD).
    pub fn u64(&self) -> u64 {
        u64::from_be_bytes(self.0)
    }
    /// Destination ID of ID-routed messages (bytes 8–9).
    pub fn destination_id(&self) -> Bdf {
        Bdf::from_raw(self.u16_at(0))
    }
    /// Vendor ID of a Vendor_Defined message (bytes 10–11).
    pub fn vendor_id(&self) -> u16 {
        self.u16_at(2)
    }
    /// Vendor-defined data of a Vendor_Defined message (bytes 12–15).
    pub fn vendor_data(&self) -> u32 {
        self.u32_at(4)
    }
    /// LTR No-Snoop Latency register value (bytes 12–13).
    pub fn ltr_no_snoop(&self) -> u16 {
        self.u16_at(4)
    }
    /// LTR Snoop Latency register value (bytes 14–15).
    pub fn ltr_snoop(&self) -> u16 {
        self.u16_at(6)
    }
    /// OBFF code (byte 15, bits 3:0).
    pub fn obff_code(&self) -> u8 {
        self.0[7] & 0xf
    }
    /// ATS Invalidate Request ITag (byte 15, bits 4:0).
    pub fn itag(&self) -> u8 {
        self.0[7] & 0x1f
    }
    /// ATS Invalidate Completion Count (byte 11, bits 2:0).
    pub fn completion_count(&self) -> u8 {
        self.0[3] & 7
    }
    /// ATS Invalidate Completion ITag vector (bytes 12–15).
    pub fn itag_vector(&self) -> u32 {
        self.u32_at(4)
    }
    /// Page Request page address (bits 63:12 of DW2:DW3).
    pub fn page_address(&self) -> u64 {
        self.u64() & !0xfff
    }
    /// Page Request Group index (9 bits): for a Page Request bits 11:3 of DW3,
    /// for a PRG Response bits 8:0 of bytes 10–11.
    pub fn prg_index(&self, code: MsgCode) -> u16 {
        match code {
            MsgCode::PrgResponse => self.u16_at(2) & 0x1ff,
            _ => (self.u16_at(6) >> 3) & 0x1ff,
        }
    }
    /// Page Request flags (DW3 bits 0, 1, 2): (Read Access Requested, Write Access
    /// Requested, Last Request in PRG).
    pub fn page_request_flags(&self) -> (bool, bool, bool) {
        let v = self.u16_at(6);
        (v & 1 != 0, v & 2 != 0, v & 4 != 0)
    }
    /// PRG Response code (bytes 10–11, bits 15:12).
    pub fn prg_response_code(&self) -> u8 {
        (self.u16_at(2) >> 12) as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_unknown_kept() {
        for raw in 0..=255u8 {
            let c = MsgCode::from_raw(raw);
            assert_eq!(c.raw(), raw);
            if let Some(n) = c.name() {
                assert_eq!(MsgCode::from_name(n), Some(c));
            }
        }
        assert_eq!(MsgCode::from_raw(0x99), MsgCode::Unknown(0x99));
        assert_eq!(MsgCode::from_raw(0x7e), MsgCode::VendorDefinedType0);
    }

    #[test]
    fn routing_round_trip() {
        for r in 0..8 {
            match MsgRouting::from_raw(r) {
                Some(x) => {
                    assert_eq!(x.raw(), r);
                    assert_eq!(MsgRouting::from_name(x.name()), Some(x));
                }
                None => assert!(r >= 6),
            }
        }
    }

    #[test]
    fn field_views() {
        let f = MsgFields([0x01, 0x08, 0x1a, 0xf4, 0x90, 0x05, 0x88, 0x0a]);
        assert_eq!(f.destination_id().to_string(), "01:01.0");
        assert_eq!(f.vendor_id(), 0x1af4);
        assert_eq!(f.vendor_data(), 0x9005_880a);
        assert_eq!(f.ltr_no_snoop(), 0x9005);
        assert_eq!(f.ltr_snoop(), 0x880a);
        assert_eq!(f.obff_code(), 0xa);
    }

    #[test]
    fn page_request_and_prg_response_fields_sit_where_the_spec_puts_them() {
        // Page Request, DW3: Page Address[31:12] | PRG Index (11:3) | L (2) W (1) R (0).
        // Page 0x1_2345_6000, group 0x1a5, last, write, no read.
        let dw3: u32 = 0x3456_6000 | 0x1a5 << 3 | 0b110;
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&1u32.to_be_bytes());
        b[4..].copy_from_slice(&dw3.to_be_bytes());
        let f = MsgFields(b);
        assert_eq!(f.page_address(), 0x1_3456_6000);
        assert_eq!(f.prg_index(MsgCode::PageRequest), 0x1a5);
        assert_eq!(f.page_request_flags(), (false, true, true));
        // PRG Response, bytes 10-11: Response Code (15:12) | PRG Index (8:0).
        let f = MsgFields([0x03, 0x00, 0xf0, 0x42, 0, 0, 0, 0]);
        assert_eq!(f.destination_id().to_string(), "03:00.0");
        assert_eq!(f.prg_index(MsgCode::PrgResponse), 0x42);
        assert_eq!(f.prg_response_code(), 0xf);
    }
}
