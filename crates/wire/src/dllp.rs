//! Data Link Layer Packets (DLLPs), non-Flit mode.
//!
//! A DLLP is always 6 bytes: a 1-byte DLLP Type, 3 bytes whose meaning depends on the
//! type, and a 16-bit CRC.
//!
//! ```text
//!  byte 0          byte 1          byte 2          byte 3          bytes 4-5
//! +---------------+---------------+---------------+---------------+---------------+
//! | DLLP Type     |            type-specific content (24 bits)    | 16-bit CRC    |
//! +---------------+---------------+---------------+---------------+---------------+
//!
//! Ack / Nak        | 00h / 10h     | reserved      | rsvd | AckNak_Seq_Num[11:0]   |
//! InitFC1/InitFC2/ | kind,class,VC | HdrScale|HdrFC[7:2] | HdrFC[1:0]|DataScale|DataFC[11:0]
//! UpdateFC         | (VC = bits 2:0)
//! PM_* / NOP       | type          | reserved                                      |
//! Vendor-specific  | 30h           | vendor defined (24 bits)                      |
//! Data_Link_Feature| 02h           | Ack(bit 7) | Feature Support[22:0]            |
//! ```
//!
//! The DLLP CRC uses the polynomial `100Bh` with seed `FFFFh`; the bytes are fed into the
//! LFSR bit 0 first, the remainder is complemented, and remainder bit 15 becomes bit 0 of
//! byte 4 (…, bit 8 becomes bit 7 of byte 4, bit 7 becomes bit 0 of byte 5, …). That is the
//! reflected CRC with polynomial `D008h` stored little-endian, which is how [`crc`]
//! computes it.
//!
//! # Safety contract
//!
//! * [`Packet::new_checked`] (or [`Packet::check_len`]) accepts exactly 6 bytes; once it has
//!   succeeded **no getter or setter of [`Packet`] panics**, whatever the bytes hold.
//! * [`Packet::new_unchecked`] skips the check; getters may then panic on a short buffer.
//! * [`DllpRepr::parse`] never panics: it returns [`Error::Crc`] for a CRC mismatch and
//!   [`Error::Field`] naming `"DLLP Type"` (offset 0) for a reserved type encoding.
//! * [`DllpRepr::emit`] never panics: it returns [`Error::BufferTooSmall`] for a short buffer
//!   and [`Error::Invalid`] for a field out of range.
//! * Nothing here allocates.
//!
//! Reserved bits are ignored on receive (as the spec requires) and written as zero.
//!
//! ```
//! use pcielab_wire::dllp::{DllpRepr, Packet};
//! use pcielab_wire::SeqNum;
//!
//! let ack = DllpRepr::Ack { seq: SeqNum::new(0x123).unwrap() };
//! let bytes = ack.to_bytes().unwrap();
//! assert_eq!(&bytes[..4], &[0x00, 0x00, 0x01, 0x23]);
//! let packet = Packet::new_checked(&bytes[..]).unwrap();
//! assert_eq!(DllpRepr::parse(&packet).unwrap(), ack);
//! ```

use core::fmt;

use crate::error::{Error, Result};
use crate::types::SeqNum;

/// Length of every DLLP in bytes, CRC included.
pub const DLLP_LEN: usize = 6;
/// Length of a DLLP without its CRC.
pub const DLLP_BODY_LEN: usize = 4;

mod field {
    #![allow(dead_code)]
    use core::ops::Range;

    /// DLLP Type (byte 0); for flow-control DLLPs bits 2:0 hold the VC ID.
    pub const TYPE: usize = 0;
    /// The 24 type-specific bits.
    pub const CONTENT: Range<usize> = 1..4;
    /// Ack/Nak: 4 reserved bits and AckNak_Seq_Num[11:0].
    pub const SEQ: Range<usize> = 2..4;
    /// Flow control: HdrScale (bits 7:6) and HdrFC[7:2] (bits 5:0).
    pub const FC_HDR_HI: usize = 1;
    /// Flow control: HdrFC[1:0] (bits 7:6), DataScale (bits 5:4), DataFC[11:8] (bits 3:0).
    pub const FC_MID: usize = 2;
    /// Flow control: DataFC[7:0].
    pub const FC_DATA_LO: usize = 3;
    /// Data_Link_Feature: Feature Ack is bit 7 of this byte.
    pub const FEATURE_ACK: usize = 1;
    /// The DLLP CRC.
    pub const CRC: Range<usize> = 4..6;
}

/// Byte offset of the DLLP CRC, as reported in [`Error::Crc`].
pub const CRC_OFFSET: usize = field::CRC.start;

// ---------------------------------------------------------------------------------------
// CRC

const fn crc16_table() -> [u16; 256] {
    // Reflected form of 100Bh.
    const POLY_REFLECTED: u16 = 0xd008;
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u16;
        let mut bit = 0;
        while bit < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ POLY_REFLECTED
            } else {
                c >> 1
            };
            bit += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
}

/// Slicing-by-4 tables: `T[0]` is the byte-at-a-time table, `T[k][i]` advances `T[k-1][i]`
/// by one more zero byte.
const fn crc16_tables() -> [[u16; 256]; 4] {
    let t0 = crc16_table();
    let mut t = [t0; 4];
    let mut k = 1;
    while k < 4 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t0[(prev & 0xff) as usize];
            i += 1;
        }
        k += 1;
    }
    t
}

static CRC16_TABLES: [[u16; 256]; 4] = crc16_tables();
static CRC16_TABLE: [u16; 256] = CRC16_TABLES[0];

/// [`crc`] of exactly the 4 body bytes of a DLLP, four independent table look-ups.
#[inline]
pub fn crc_body(body: [u8; 4]) -> u16 {
    let t = &CRC16_TABLES;
    let x = 0xffff ^ u16::from_le_bytes([body[0], body[1]]);
    !(t[3][(x & 0xff) as usize]
        ^ t[2][(x >> 8) as usize]
        ^ t[1][body[2] as usize]
        ^ t[0][body[3] as usize])
}

/// The 16-bit DLLP CRC of `body` (bytes 0–3 of a DLLP), returned as the value whose
/// little-endian bytes are DLLP bytes 4 and 5.
///
/// ```
/// use pcielab_wire::dllp::crc;
/// // An Ack of sequence number 0: bytes 00 00 00 00, CRC bytes b3 62
/// // (the value cocotbext-pcie computes for the same DLLP).
/// assert_eq!(crc(&[0, 0, 0, 0]).to_le_bytes(), [0xb3, 0x62]);
/// ```
#[inline]
pub fn crc(body: &[u8]) -> u16 {
    let mut c: u16 = 0xffff;
    for &b in body {
        c = (c >> 8) ^ CRC16_TABLE[((c ^ b as u16) & 0xff) as usize];
    }
    !c
}

// ---------------------------------------------------------------------------------------
// Code points

/// The credit class a flow-control DLLP refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FcClass {
    /// Posted requests (P).
    P,
    /// Non-posted requests (NP).
    Np,
    /// Completions (Cpl).
    Cpl,
}

impl FcClass {
    /// All three classes.
    pub const ALL: [FcClass; 3] = [FcClass::P, FcClass::Np, FcClass::Cpl];
    /// The spec's suffix: `P`, `NP` or `Cpl`.
    pub fn name(self) -> &'static str {
        match self {
            FcClass::P => "P",
            FcClass::Np => "NP",
            FcClass::Cpl => "Cpl",
        }
    }
}

/// Which flow-control DLLP: initialisation (two phases) or update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FcKind {
    /// InitFC1 (flow-control initialisation, first phase).
    InitFc1,
    /// InitFC2 (flow-control initialisation, second phase).
    InitFc2,
    /// UpdateFC.
    UpdateFc,
}

impl FcKind {
    /// All three kinds.
    pub const ALL: [FcKind; 3] = [FcKind::InitFc1, FcKind::InitFc2, FcKind::UpdateFc];
    /// The spec's name: `InitFC1`, `InitFC2` or `UpdateFC`.
    pub fn name(self) -> &'static str {
        match self {
            FcKind::InitFc1 => "InitFC1",
            FcKind::InitFc2 => "InitFC2",
            FcKind::UpdateFc => "UpdateFC",
        }
    }
}

/// The HdrScale / DataScale field of a flow-control DLLP (Scaled Flow Control, PCIe 4.0+).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FcScale {
    /// `00b`: Scaled Flow Control not active; credits are unscaled.
    #[default]
    NotActive,
    /// `01b`: scale factor 1.
    X1,
    /// `10b`: scale factor 4.
    X4,
    /// `11b`: scale factor 16.
    X16,
}

impl FcScale {
    /// From the 2-bit field (upper bits ignored).
    pub const fn from_raw(raw: u8) -> FcScale {
        match raw & 3 {
            0 => FcScale::NotActive,
            1 => FcScale::X1,
            2 => FcScale::X4,
            _ => FcScale::X16,
        }
    }
    /// The 2-bit encoding.
    pub const fn raw(self) -> u8 {
        match self {
            FcScale::NotActive => 0,
            FcScale::X1 => 1,
            FcScale::X4 => 2,
            FcScale::X16 => 3,
        }
    }
    /// Credits per unit of the HdrFC/DataFC field: 1, 1, 4 or 16.
    pub const fn factor(self) -> u32 {
        match self {
            FcScale::NotActive | FcScale::X1 => 1,
            FcScale::X4 => 4,
            FcScale::X16 => 16,
        }
    }
}

/// The decoded DLLP Type byte. Reserved encodings decode as `Reserved(raw)` so nothing
/// is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DllpType {
    /// `0000_0000` Ack.
    Ack,
    /// `0000_0001` MRInit (MR-IOV).
    MrInit,
    /// `0000_0010` Data_Link_Feature.
    DataLinkFeature,
    /// `0001_0000` Nak.
    Nak,
    /// `0010_0000` PM_Enter_L1.
    PmEnterL1,
    /// `0010_0001` PM_Enter_L23.
    PmEnterL23,
    /// `0010_0011` PM_Active_State_Request_L1.
    PmActiveStateRequestL1,
    /// `0010_0100` PM_Request_Ack.
    PmRequestAck,
    /// `0011_0000` Vendor-specific.
    VendorSpecific,
    /// `0011_0001` NOP.
    Nop,
    /// InitFC1/InitFC2/UpdateFC for P/NP/Cpl; the low 3 bits of the byte are the VC ID.
    Fc(FcKind, FcClass),
    /// `0111_0vvv` MRInitFC1 (MR-IOV).
    MrInitFc1,
    /// `1111_0vvv` MRInitFC2 (MR-IOV).
    MrInitFc2,
    /// `1011_0vvv` MRUpdateFC (MR-IOV).
    MrUpdateFc,
    /// Any other encoding (reserved in non-Flit mode).
    Reserved(u8),
}

impl DllpType {
    /// Decodes a DLLP Type byte.
    pub const fn from_byte(b: u8) -> DllpType {
        match b {
            0x00 => DllpType::Ack,
            0x01 => DllpType::MrInit,
            0x02 => DllpType::DataLinkFeature,
            0x10 => DllpType::Nak,
            0x20 => DllpType::PmEnterL1,
            0x21 => DllpType::PmEnterL23,
            0x23 => DllpType::PmActiveStateRequestL1,
            0x24 => DllpType::PmRequestAck,
            0x30 => DllpType::VendorSpecific,
            0x31 => DllpType::Nop,
            _ if b & 0x08 == 0 => match b >> 4 {
                0x4 => DllpType::Fc(FcKind::InitFc1, FcClass::P),
                0x5 => DllpType::Fc(FcKind::InitFc1, FcClass::Np),
                0x6 => DllpType::Fc(FcKind::InitFc1, FcClass::Cpl),
                0x7 => DllpType::MrInitFc1,
                0xc => DllpType::Fc(FcKind::InitFc2, FcClass::P),
                0xd => DllpType::Fc(FcKind::InitFc2, FcClass::Np),
                0xe => DllpType::Fc(FcKind::InitFc2, FcClass::Cpl),
                0xf => DllpType::MrInitFc2,
                0x8 => DllpType::Fc(FcKind::UpdateFc, FcClass::P),
                0x9 => DllpType::Fc(FcKind::UpdateFc, FcClass::Np),
                0xa => DllpType::Fc(FcKind::UpdateFc, FcClass::Cpl),
                0xb => DllpType::MrUpdateFc,
                _ => DllpType::Reserved(b),
            },
            _ => DllpType::Reserved(b),
        }
    }

    /// The type byte with a VC ID of 0 for the flow-control types.
    pub const fn to_byte(self) -> u8 {
        match self {
            DllpType::Ack => 0x00,
            DllpType::MrInit => 0x01,
            DllpType::DataLinkFeature => 0x02,
            DllpType::Nak => 0x10,
            DllpType::PmEnterL1 => 0x20,
            DllpType::PmEnterL23 => 0x21,
            DllpType::PmActiveStateRequestL1 => 0x23,
            DllpType::PmRequestAck => 0x24,
            DllpType::VendorSpecific => 0x30,
            DllpType::Nop => 0x31,
            DllpType::Fc(kind, class) => {
                let k = match kind {
                    FcKind::InitFc1 => 0x40,
                    FcKind::InitFc2 => 0xc0,
                    FcKind::UpdateFc => 0x80,
                };
                let c = match class {
                    FcClass::P => 0x00,
                    FcClass::Np => 0x10,
                    FcClass::Cpl => 0x20,
                };
                k | c
            }
            DllpType::MrInitFc1 => 0x70,
            DllpType::MrInitFc2 => 0xf0,
            DllpType::MrUpdateFc => 0xb0,
            DllpType::Reserved(b) => b,
        }
    }

    /// True for the types whose low 3 bits carry a VC ID.
    pub const fn has_vc(self) -> bool {
        matches!(
            self,
            DllpType::Fc(..) | DllpType::MrInitFc1 | DllpType::MrInitFc2 | DllpType::MrUpdateFc
        )
    }
}

impl fmt::Display for DllpType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DllpType::Ack => f.write_str("Ack"),
            DllpType::MrInit => f.write_str("MRInit"),
            DllpType::DataLinkFeature => f.write_str("Data_Link_Feature"),
            DllpType::Nak => f.write_str("Nak"),
            DllpType::PmEnterL1 => f.write_str("PM_Enter_L1"),
            DllpType::PmEnterL23 => f.write_str("PM_Enter_L23"),
            DllpType::PmActiveStateRequestL1 => f.write_str("PM_Active_State_Request_L1"),
            DllpType::PmRequestAck => f.write_str("PM_Request_Ack"),
            DllpType::VendorSpecific => f.write_str("Vendor-specific"),
            DllpType::Nop => f.write_str("NOP"),
            DllpType::Fc(kind, class) => write!(f, "{}-{}", kind.name(), class.name()),
            DllpType::MrInitFc1 => f.write_str("MRInitFC1"),
            DllpType::MrInitFc2 => f.write_str("MRInitFC2"),
            DllpType::MrUpdateFc => f.write_str("MRUpdateFC"),
            DllpType::Reserved(b) => write!(f, "reserved({b:#04x})"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Zero-copy view

/// A read/write view of a 6-byte DLLP buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the buffer holds exactly one DLLP (6 bytes).
    ///
    /// ```
    /// use pcielab_wire::{dllp::Packet, Error};
    /// assert!(matches!(
    ///     Packet::new_checked(&[0u8; 5][..]),
    ///     Err(Error::Truncated { needed: 6, available: 5, .. })
    /// ));
    /// ```
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < DLLP_LEN {
            Err(Error::Truncated {
                what: "DLLP",
                needed: DLLP_LEN,
                available: len,
            })
        } else if len > DLLP_LEN {
            Err(Error::Trailing {
                what: "DLLP (always 6 bytes)",
                expected: DLLP_LEN,
                available: len,
            })
        } else {
            Ok(())
        }
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    fn b(&self, i: usize) -> u8 {
        self.buffer.as_ref()[i]
    }

    /// The DLLP Type byte as received (VC ID included for flow-control DLLPs).
    #[inline]
    pub fn type_raw(&self) -> u8 {
        self.b(field::TYPE)
    }

    /// The decoded DLLP Type.
    #[inline]
    pub fn dllp_type(&self) -> DllpType {
        DllpType::from_byte(self.type_raw())
    }

    /// The 24 type-specific bits (bytes 1–3, big-endian).
    #[inline]
    pub fn content(&self) -> u32 {
        let d = self.buffer.as_ref();
        u32::from_be_bytes([0, d[1], d[2], d[3]])
    }

    /// Ack/Nak: AckNak_Seq_Num.
    #[inline]
    pub fn seq(&self) -> SeqNum {
        let d = &self.buffer.as_ref()[field::SEQ];
        SeqNum::from_bits_truncate(u16::from_be_bytes([d[0], d[1]]))
    }

    /// Flow control: VC ID (bits 2:0 of the type byte).
    #[inline]
    pub fn vc(&self) -> u8 {
        self.type_raw() & 0x7
    }

    /// Flow control: HdrScale.
    #[inline]
    pub fn hdr_scale(&self) -> FcScale {
        FcScale::from_raw(self.b(field::FC_HDR_HI) >> 6)
    }

    /// Flow control: HdrFC (8 bits).
    #[inline]
    pub fn hdr_fc(&self) -> u8 {
        ((self.b(field::FC_HDR_HI) & 0x3f) << 2) | (self.b(field::FC_MID) >> 6)
    }

    /// Flow control: DataScale.
    #[inline]
    pub fn data_scale(&self) -> FcScale {
        FcScale::from_raw(self.b(field::FC_MID) >> 4)
    }

    /// Flow control: DataFC (12 bits).
    #[inline]
    pub fn data_fc(&self) -> u16 {
        (((self.b(field::FC_MID) & 0xf) as u16) << 8) | self.b(field::FC_DATA_LO) as u16
    }

    /// Data_Link_Feature: Feature Ack (bit 23 of the content).
    #[inline]
    pub fn feature_ack(&self) -> bool {
        self.b(field::FEATURE_ACK) & 0x80 != 0
    }

    /// Data_Link_Feature: Feature Support (bits 22:0; bit 0 is Scaled Flow Control).
    #[inline]
    pub fn feature_support(&self) -> u32 {
        self.content() & 0x7f_ffff
    }

    /// The CRC as stored in bytes 4–5 (little-endian value, see [`crc`]).
    #[inline]
    pub fn crc(&self) -> u16 {
        let d = &self.buffer.as_ref()[field::CRC];
        u16::from_le_bytes([d[0], d[1]])
    }

    /// The CRC computed over bytes 0–3.
    #[inline]
    pub fn compute_crc(&self) -> u16 {
        let d = self.buffer.as_ref();
        crc_body([d[0], d[1], d[2], d[3]])
    }

    /// True when the stored CRC matches.
    #[inline]
    pub fn verify_crc(&self) -> bool {
        self.crc() == self.compute_crc()
    }

    /// Checks the CRC, returning [`Error::Crc`] on a mismatch.
    pub fn check_crc(&self) -> Result<()> {
        let (found, computed) = (self.crc(), self.compute_crc());
        if found == computed {
            Ok(())
        } else {
            Err(Error::Crc {
                what: "DLLP CRC",
                found: found as u32,
                computed: computed as u32,
                offset: CRC_OFFSET,
            })
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    #[inline]
    fn bm(&mut self, i: usize) -> &mut u8 {
        &mut self.buffer.as_mut()[i]
    }

    /// Sets the DLLP Type byte (for flow-control DLLPs this includes the VC ID).
    #[inline]
    pub fn set_type_raw(&mut self, value: u8) {
        *self.bm(field::TYPE) = value;
    }

    /// Sets the 24 type-specific bits (upper 8 bits of `value` ignored).
    #[inline]
    pub fn set_content(&mut self, value: u32) {
        let b = value.to_be_bytes();
        self.buffer.as_mut()[field::CONTENT].copy_from_slice(&b[1..]);
    }

    /// Ack/Nak: sets AckNak_Seq_Num (and clears the 4 reserved bits above it).
    #[inline]
    pub fn set_seq(&mut self, seq: SeqNum) {
        self.buffer.as_mut()[field::SEQ].copy_from_slice(&seq.value().to_be_bytes());
    }

    /// Flow control: sets the VC ID (low 3 bits of `vc`).
    #[inline]
    pub fn set_vc(&mut self, vc: u8) {
        let t = self.type_raw();
        *self.bm(field::TYPE) = (t & !0x7) | (vc & 0x7);
    }

    /// Flow control: sets HdrScale.
    #[inline]
    pub fn set_hdr_scale(&mut self, s: FcScale) {
        let b = self.b(field::FC_HDR_HI);
        *self.bm(field::FC_HDR_HI) = (b & 0x3f) | (s.raw() << 6);
    }

    /// Flow control: sets HdrFC.
    #[inline]
    pub fn set_hdr_fc(&mut self, v: u8) {
        let hi = self.b(field::FC_HDR_HI);
        *self.bm(field::FC_HDR_HI) = (hi & 0xc0) | (v >> 2);
        let mid = self.b(field::FC_MID);
        *self.bm(field::FC_MID) = (mid & 0x3f) | ((v & 3) << 6);
    }

    /// Flow control: sets DataScale.
    #[inline]
    pub fn set_data_scale(&mut self, s: FcScale) {
        let b = self.b(field::FC_MID);
        *self.bm(field::FC_MID) = (b & 0xcf) | (s.raw() << 4);
    }

    /// Flow control: sets DataFC (low 12 bits of `v`).
    #[inline]
    pub fn set_data_fc(&mut self, v: u16) {
        let b = self.b(field::FC_MID);
        *self.bm(field::FC_MID) = (b & 0xf0) | ((v >> 8) as u8 & 0xf);
        *self.bm(field::FC_DATA_LO) = v as u8;
    }

    /// Data_Link_Feature: sets Feature Ack and Feature Support (low 23 bits).
    #[inline]
    pub fn set_feature(&mut self, ack: bool, support: u32) {
        self.set_content(((ack as u32) << 23) | (support & 0x7f_ffff));
    }

    /// Writes the CRC computed over bytes 0–3 into bytes 4–5.
    #[inline]
    pub fn fill_crc(&mut self) {
        let c = self.compute_crc();
        self.buffer.as_mut()[field::CRC].copy_from_slice(&c.to_le_bytes());
    }
}

// ---------------------------------------------------------------------------------------
// Owned representation

/// The content of an InitFC1, InitFC2 or UpdateFC DLLP.
///
/// ```
/// use pcielab_wire::dllp::{FcClass, FcDllp, FcKind, FcScale};
/// let fc = FcDllp {
///     kind: FcKind::InitFc1, class: FcClass::Np, vc: 0,
///     hdr_scale: FcScale::X4, hdr_fc: 10, data_scale: FcScale::NotActive, data_fc: 0,
/// };
/// assert_eq!(fc.hdr_credits(), 40);
/// assert!(fc.data_infinite());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FcDllp {
    /// InitFC1, InitFC2 or UpdateFC.
    pub kind: FcKind,
    /// P, NP or Cpl.
    pub class: FcClass,
    /// VC ID, 0..=7.
    pub vc: u8,
    /// HdrScale.
    pub hdr_scale: FcScale,
    /// HdrFC (8 bits).
    pub hdr_fc: u8,
    /// DataScale.
    pub data_scale: FcScale,
    /// DataFC, 0..=4095.
    pub data_fc: u16,
}

impl FcDllp {
    /// Header credits with the scale applied (`HdrFC × factor`).
    pub const fn hdr_credits(&self) -> u32 {
        self.hdr_fc as u32 * self.hdr_scale.factor()
    }
    /// Data credits (units of 4 DW) with the scale applied (`DataFC × factor`).
    pub const fn data_credits(&self) -> u32 {
        self.data_fc as u32 * self.data_scale.factor()
    }
    /// True for an InitFC1/InitFC2 that advertises infinite header credits (HdrFC = 0).
    /// An UpdateFC value of 0 is an ordinary counter value and never means infinite.
    pub const fn hdr_infinite(&self) -> bool {
        !matches!(self.kind, FcKind::UpdateFc) && self.hdr_fc == 0
    }
    /// True for an InitFC1/InitFC2 that advertises infinite data credits (DataFC = 0).
    pub const fn data_infinite(&self) -> bool {
        !matches!(self.kind, FcKind::UpdateFc) && self.data_fc == 0
    }
}

/// One DLLP, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DllpRepr {
    /// Ack of every TLP up to and including `seq`.
    Ack {
        /// AckNak_Seq_Num.
        seq: SeqNum,
    },
    /// Nak: TLPs after `seq` must be replayed.
    Nak {
        /// AckNak_Seq_Num.
        seq: SeqNum,
    },
    /// InitFC1 / InitFC2 / UpdateFC.
    Fc(FcDllp),
    /// PM_Enter_L1.
    PmEnterL1,
    /// PM_Enter_L23.
    PmEnterL23,
    /// PM_Active_State_Request_L1.
    PmActiveStateRequestL1,
    /// PM_Request_Ack.
    PmRequestAck,
    /// Vendor-specific DLLP with its 24 vendor-defined bits.
    VendorSpecific {
        /// Bytes 1–3 as a big-endian 24-bit value.
        data: u32,
    },
    /// NOP.
    Nop,
    /// Data_Link_Feature.
    DataLinkFeature {
        /// Feature Ack.
        ack: bool,
        /// Feature Support bits 22:0 (bit 0: Scaled Flow Control).
        support: u32,
    },
    /// One of the MR-IOV DLLPs (MRInit, MRInitFC1, MRInitFC2, MRUpdateFC), kept opaque.
    MrIov {
        /// The type byte as received (VC ID included).
        type_byte: u8,
        /// Bytes 1–3 as a big-endian 24-bit value.
        content: u32,
    },
}

impl DllpRepr {
    /// Parses a DLLP after checking its CRC.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<DllpRepr> {
        packet.check_len()?;
        packet.check_crc()?;
        Self::parse_ignoring_crc(packet)
    }

    /// Parses a DLLP without looking at its CRC.
    pub fn parse_ignoring_crc<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<DllpRepr> {
        packet.check_len()?;
        Ok(match packet.dllp_type() {
            DllpType::Ack => DllpRepr::Ack { seq: packet.seq() },
            DllpType::Nak => DllpRepr::Nak { seq: packet.seq() },
            DllpType::Fc(kind, class) => DllpRepr::Fc(FcDllp {
                kind,
                class,
                vc: packet.vc(),
                hdr_scale: packet.hdr_scale(),
                hdr_fc: packet.hdr_fc(),
                data_scale: packet.data_scale(),
                data_fc: packet.data_fc(),
            }),
            DllpType::PmEnterL1 => DllpRepr::PmEnterL1,
            DllpType::PmEnterL23 => DllpRepr::PmEnterL23,
            DllpType::PmActiveStateRequestL1 => DllpRepr::PmActiveStateRequestL1,
            DllpType::PmRequestAck => DllpRepr::PmRequestAck,
            DllpType::VendorSpecific => DllpRepr::VendorSpecific {
                data: packet.content(),
            },
            DllpType::Nop => DllpRepr::Nop,
            DllpType::DataLinkFeature => DllpRepr::DataLinkFeature {
                ack: packet.feature_ack(),
                support: packet.feature_support(),
            },
            DllpType::MrInit | DllpType::MrInitFc1 | DllpType::MrInitFc2 | DllpType::MrUpdateFc => {
                DllpRepr::MrIov {
                    type_byte: packet.type_raw(),
                    content: packet.content(),
                }
            }
            DllpType::Reserved(raw) => {
                return Err(Error::Field {
                    field: "DLLP Type",
                    value: raw as u64,
                    offset: field::TYPE,
                    reason: "reserved DLLP type encoding",
                })
            }
        })
    }

    /// Parses 6 bytes, checking length and CRC.
    ///
    /// ```
    /// use pcielab_wire::{dllp::DllpRepr, Error};
    /// // A reserved DLLP Type (0x03) with a correct CRC.
    /// let mut b = [0x03, 0, 0, 0, 0, 0];
    /// let c = pcielab_wire::dllp::crc(&b[..4]).to_le_bytes();
    /// b[4..].copy_from_slice(&c);
    /// assert!(matches!(
    ///     DllpRepr::from_bytes(&b),
    ///     Err(Error::Field { field: "DLLP Type", value: 3, offset: 0, .. })
    /// ));
    /// ```
    #[inline]
    pub fn from_bytes(bytes: &[u8]) -> Result<DllpRepr> {
        Self::parse(&Packet::new_checked(bytes)?)
    }

    /// The DLLP Type (with VC 0 for the flow-control types).
    pub fn dllp_type(&self) -> DllpType {
        match *self {
            DllpRepr::Ack { .. } => DllpType::Ack,
            DllpRepr::Nak { .. } => DllpType::Nak,
            DllpRepr::Fc(fc) => DllpType::Fc(fc.kind, fc.class),
            DllpRepr::PmEnterL1 => DllpType::PmEnterL1,
            DllpRepr::PmEnterL23 => DllpType::PmEnterL23,
            DllpRepr::PmActiveStateRequestL1 => DllpType::PmActiveStateRequestL1,
            DllpRepr::PmRequestAck => DllpType::PmRequestAck,
            DllpRepr::VendorSpecific { .. } => DllpType::VendorSpecific,
            DllpRepr::Nop => DllpType::Nop,
            DllpRepr::DataLinkFeature { .. } => DllpType::DataLinkFeature,
            DllpRepr::MrIov { type_byte, .. } => DllpType::from_byte(type_byte),
        }
    }

    /// Bytes needed to emit: always [`DLLP_LEN`].
    pub const fn buffer_len(&self) -> usize {
        DLLP_LEN
    }

    /// Writes the DLLP, CRC included, into `packet`.
    pub fn emit_into<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) -> Result<()> {
        let len = packet.buffer.as_ref().len();
        if len < DLLP_LEN {
            return Err(Error::BufferTooSmall {
                needed: DLLP_LEN,
                available: len,
            });
        }
        let (type_byte, content) = self.encode()?;
        let c = content.to_be_bytes();
        let body = [type_byte, c[1], c[2], c[3]];
        let crc = crc_body(body).to_le_bytes();
        packet.buffer.as_mut()[..DLLP_LEN]
            .copy_from_slice(&[body[0], body[1], body[2], body[3], crc[0], crc[1]]);
        Ok(())
    }

    /// Writes the DLLP, CRC included, into the first 6 bytes of `buf`.
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        self.emit_into(&mut Packet::new_unchecked(buf))
    }

    /// The 6 bytes of the DLLP.
    #[inline]
    pub fn to_bytes(&self) -> Result<[u8; DLLP_LEN]> {
        let mut b = [0u8; DLLP_LEN];
        self.emit(&mut b)?;
        Ok(b)
    }

    #[inline]
    fn encode(&self) -> Result<(u8, u32)> {
        fn check(what: &'static str, value: u32, max: u32, allowed: &'static str) -> Result<()> {
            if value > max {
                Err(Error::Invalid {
                    what,
                    value: value as u64,
                    allowed,
                })
            } else {
                Ok(())
            }
        }
        Ok(match *self {
            DllpRepr::Ack { seq } => (0x00, seq.value() as u32),
            DllpRepr::Nak { seq } => (0x10, seq.value() as u32),
            DllpRepr::Fc(fc) => {
                check("VC ID", fc.vc as u32, 7, "0..=7")?;
                check("DataFC", fc.data_fc as u32, 0xfff, "0..=4095 (12 bits)")?;
                let content = ((fc.hdr_scale.raw() as u32) << 22)
                    | ((fc.hdr_fc as u32) << 14)
                    | ((fc.data_scale.raw() as u32) << 12)
                    | fc.data_fc as u32;
                (DllpType::Fc(fc.kind, fc.class).to_byte() | fc.vc, content)
            }
            DllpRepr::PmEnterL1 => (0x20, 0),
            DllpRepr::PmEnterL23 => (0x21, 0),
            DllpRepr::PmActiveStateRequestL1 => (0x23, 0),
            DllpRepr::PmRequestAck => (0x24, 0),
            DllpRepr::VendorSpecific { data } => {
                check("Vendor-specific DLLP content", data, 0xff_ffff, "24 bits")?;
                (0x30, data)
            }
            DllpRepr::Nop => (0x31, 0),
            DllpRepr::DataLinkFeature { ack, support } => {
                check("Feature Support", support, 0x7f_ffff, "23 bits")?;
                (0x02, ((ack as u32) << 23) | support)
            }
            DllpRepr::MrIov { type_byte, content } => {
                match DllpType::from_byte(type_byte) {
                    DllpType::MrInit
                    | DllpType::MrInitFc1
                    | DllpType::MrInitFc2
                    | DllpType::MrUpdateFc => {}
                    _ => {
                        return Err(Error::Invalid {
                            what: "MR-IOV DLLP Type",
                            value: type_byte as u64,
                            allowed: "01h, 70h-77h, F0h-F7h, B0h-B7h",
                        })
                    }
                }
                check("MR-IOV DLLP content", content, 0xff_ffff, "24 bits")?;
                (type_byte, content)
            }
        })
    }
}

impl fmt::Display for DllpRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DllpRepr::Ack { seq } => write!(f, "Ack seq {seq}"),
            DllpRepr::Nak { seq } => write!(f, "Nak seq {seq}"),
            DllpRepr::Fc(fc) => write!(
                f,
                "{}-{} VC{} hdr {} (scale {}) data {} (scale {})",
                fc.kind.name(),
                fc.class.name(),
                fc.vc,
                fc.hdr_fc,
                fc.hdr_scale.raw(),
                fc.data_fc,
                fc.data_scale.raw()
            ),
            DllpRepr::VendorSpecific { data } => write!(f, "Vendor-specific {data:#08x}"),
            DllpRepr::DataLinkFeature { ack, support } => {
                write!(
                    f,
                    "Data_Link_Feature ack {} support {support:#08x}",
                    ack as u8
                )
            }
            DllpRepr::MrIov { type_byte, content } => {
                write!(f, "{} {content:#08x}", DllpType::from_byte(type_byte))
            }
            other => write!(f, "{}", other.dllp_type()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Bit-serial LFSR written from the spec's description: polynomial 100Bh, seed FFFFh,
    /// each byte fed bit 0 first, remainder complemented, remainder bit 15 mapped to bit 0
    /// of byte 4 … bit 8 to bit 7 of byte 4, bit 7 to bit 0 of byte 5 … bit 0 to bit 7.
    fn serial_reference(data: &[u8]) -> [u8; 2] {
        let mut lfsr: u16 = 0xffff;
        for &byte in data {
            for bit in 0..8 {
                let input = (byte >> bit) & 1;
                let top = (lfsr >> 15) as u8 & 1;
                lfsr <<= 1;
                if input ^ top == 1 {
                    lfsr ^= 0x100b;
                }
            }
        }
        let rem = !lfsr;
        let mut out = [0u8; 2];
        for (i, o) in out.iter_mut().enumerate() {
            for j in 0..8 {
                *o |= (((rem >> (15 - 8 * i - j)) & 1) as u8) << j;
            }
        }
        out
    }

    #[test]
    fn crc_matches_serial_lfsr() {
        let mut x: u32 = 0x1234_5678;
        for _ in 0..2000 {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let body = x.to_be_bytes();
            assert_eq!(
                crc(&body).to_le_bytes(),
                serial_reference(&body),
                "{body:02x?}"
            );
        }
    }

    fn with_crc(body: [u8; 4]) -> [u8; 6] {
        let c = serial_reference(&body);
        [body[0], body[1], body[2], body[3], c[0], c[1]]
    }

    #[test]
    fn every_type_byte_decodes_as_table_3_1() {
        let mut reserved = 0;
        for b in 0..=255u8 {
            let t = DllpType::from_byte(b);
            if let DllpType::Reserved(r) = t {
                assert_eq!(r, b);
                reserved += 1;
            } else {
                // Round trip modulo the VC bits.
                let vc = if t.has_vc() { b & 7 } else { 0 };
                assert_eq!(t.to_byte() | vc, b, "{t}");
            }
        }
        // 10 fixed encodings + 12 VC-carrying groups of 8 are defined.
        assert_eq!(256 - reserved, 10 + 12 * 8);
        assert_eq!(
            DllpType::from_byte(0x5b),
            DllpType::Reserved(0x5b),
            "bit 3 set"
        );
        assert_eq!(
            DllpType::from_byte(0xa7),
            DllpType::Fc(FcKind::UpdateFc, FcClass::Cpl)
        );
    }

    #[test]
    fn hand_encoded_ack_nak() {
        // Ack 0xabc: type 00, byte 1 reserved, then 0x0a, 0xbc.
        let b = with_crc([0x00, 0x00, 0x0a, 0xbc]);
        assert_eq!(
            DllpRepr::from_bytes(&b).unwrap(),
            DllpRepr::Ack {
                seq: SeqNum::new(0xabc).unwrap()
            }
        );
        assert_eq!(
            DllpRepr::Ack {
                seq: SeqNum::new(0xabc).unwrap()
            }
            .to_bytes()
            .unwrap(),
            b
        );
        let b = with_crc([0x10, 0x00, 0x0f, 0xff]);
        assert_eq!(
            DllpRepr::from_bytes(&b).unwrap(),
            DllpRepr::Nak {
                seq: SeqNum::new(4095).unwrap()
            }
        );
        // Reserved bits above the sequence number are ignored on receive.
        let b = with_crc([0x10, 0xff, 0xff, 0xff]);
        assert_eq!(
            DllpRepr::from_bytes(&b).unwrap(),
            DllpRepr::Nak {
                seq: SeqNum::new(4095).unwrap()
            }
        );
    }

    #[test]
    fn hand_encoded_fc() {
        // UpdateFC-NP VC5, HdrScale 10b, HdrFC 0b1010_0111, DataScale 01b, DataFC 0x9c3:
        // byte1 = 10 101001 = 0xa9, byte2 = 11 01 1001 = 0xd9, byte3 = 0xc3.
        let b = with_crc([0x95, 0xa9, 0xd9, 0xc3]);
        let fc = FcDllp {
            kind: FcKind::UpdateFc,
            class: FcClass::Np,
            vc: 5,
            hdr_scale: FcScale::X4,
            hdr_fc: 0xa7,
            data_scale: FcScale::X1,
            data_fc: 0x9c3,
        };
        assert_eq!(DllpRepr::from_bytes(&b).unwrap(), DllpRepr::Fc(fc));
        assert_eq!(DllpRepr::Fc(fc).to_bytes().unwrap(), b);
        assert_eq!(fc.hdr_credits(), 0xa7 * 4);
        assert_eq!(fc.data_credits(), 0x9c3);
        assert!(!fc.hdr_infinite());
        // Setters reach the same bytes starting from a dirty buffer.
        let mut buf = [0xffu8; 6];
        let mut p = Packet::new_checked(&mut buf[..]).unwrap();
        p.set_type_raw(0x90);
        p.set_vc(5);
        p.set_hdr_scale(FcScale::X4);
        p.set_hdr_fc(0xa7);
        p.set_data_scale(FcScale::X1);
        p.set_data_fc(0x9c3);
        p.fill_crc();
        assert_eq!(buf, b);
    }

    #[test]
    fn infinite_and_scaled_credits() {
        let mut fc = FcDllp {
            kind: FcKind::InitFc1,
            class: FcClass::Cpl,
            vc: 0,
            hdr_scale: FcScale::NotActive,
            hdr_fc: 0,
            data_scale: FcScale::X16,
            data_fc: 0x100,
        };
        assert!(fc.hdr_infinite());
        assert!(!fc.data_infinite());
        assert_eq!(fc.data_credits(), 0x1000);
        fc.kind = FcKind::UpdateFc;
        assert!(!fc.hdr_infinite(), "UpdateFC 0 is a counter value");
        assert_eq!(fc.hdr_credits(), 0);
    }

    #[test]
    fn hand_encoded_others() {
        let cases: [([u8; 4], DllpRepr); 7] = [
            ([0x20, 0, 0, 0], DllpRepr::PmEnterL1),
            ([0x21, 0, 0, 0], DllpRepr::PmEnterL23),
            ([0x23, 0, 0, 0], DllpRepr::PmActiveStateRequestL1),
            ([0x24, 0, 0, 0], DllpRepr::PmRequestAck),
            ([0x31, 0, 0, 0], DllpRepr::Nop),
            (
                [0x30, 0x12, 0x34, 0x56],
                DllpRepr::VendorSpecific { data: 0x12_3456 },
            ),
            (
                [0x02, 0x80, 0x00, 0x01],
                DllpRepr::DataLinkFeature {
                    ack: true,
                    support: 1,
                },
            ),
        ];
        for (body, repr) in cases {
            let b = with_crc(body);
            assert_eq!(DllpRepr::from_bytes(&b).unwrap(), repr, "{body:02x?}");
            assert_eq!(repr.to_bytes().unwrap(), b, "{repr}");
        }
        let b = with_crc([0x73, 1, 2, 3]);
        assert_eq!(
            DllpRepr::from_bytes(&b).unwrap(),
            DllpRepr::MrIov {
                type_byte: 0x73,
                content: 0x01_0203
            }
        );
    }

    #[test]
    fn errors_name_what_and_where() {
        let good = DllpRepr::Nop.to_bytes().unwrap();
        for n in 0..6 {
            assert_eq!(
                DllpRepr::from_bytes(&good[..n]),
                Err(Error::Truncated {
                    what: "DLLP",
                    needed: 6,
                    available: n
                })
            );
        }
        let mut long = [0u8; 7];
        long[..6].copy_from_slice(&good);
        assert!(matches!(
            DllpRepr::from_bytes(&long),
            Err(Error::Trailing {
                expected: 6,
                available: 7,
                ..
            })
        ));
        // Every single-bit error is caught by the CRC.
        for bit in 0..48 {
            let mut bad = good;
            bad[bit / 8] ^= 1 << (bit % 8);
            match DllpRepr::from_bytes(&bad) {
                Err(Error::Crc {
                    what: "DLLP CRC",
                    offset: 4,
                    found,
                    computed,
                }) => assert_ne!(found, computed),
                other => panic!("bit {bit}: {other:?}"),
            }
        }
        // Reserved type, ignoring CRC.
        let r = [0x48u8, 0, 0, 0, 0, 0];
        assert_eq!(
            DllpRepr::parse_ignoring_crc(&Packet::new_checked(&r[..]).unwrap()),
            Err(Error::Field {
                field: "DLLP Type",
                value: 0x48,
                offset: 0,
                reason: "reserved DLLP type encoding"
            })
        );
    }

    #[test]
    fn emit_rejects_out_of_range() {
        let fc = FcDllp {
            kind: FcKind::InitFc2,
            class: FcClass::P,
            vc: 8,
            hdr_scale: FcScale::X1,
            hdr_fc: 1,
            data_scale: FcScale::X1,
            data_fc: 1,
        };
        assert!(matches!(
            DllpRepr::Fc(fc).to_bytes(),
            Err(Error::Invalid { what: "VC ID", .. })
        ));
        let fc = FcDllp {
            vc: 0,
            data_fc: 0x1000,
            ..fc
        };
        assert!(matches!(
            DllpRepr::Fc(fc).to_bytes(),
            Err(Error::Invalid { what: "DataFC", .. })
        ));
        assert!(DllpRepr::VendorSpecific { data: 1 << 24 }
            .to_bytes()
            .is_err());
        assert!(DllpRepr::DataLinkFeature {
            ack: false,
            support: 1 << 23
        }
        .to_bytes()
        .is_err());
        assert!(DllpRepr::MrIov {
            type_byte: 0x31,
            content: 0
        }
        .to_bytes()
        .is_err());
        assert_eq!(
            DllpRepr::Nop.emit(&mut [0u8; 5]),
            Err(Error::BufferTooSmall {
                needed: 6,
                available: 5
            })
        );
    }

    /// Bits of bytes 1..4 that carry information for a given type byte (hand-written
    /// from the layouts in the module doc); everything else is reserved.
    fn meaningful_content_mask(type_byte: u8) -> u32 {
        match type_byte {
            0x00 | 0x10 => 0x00_0fff,
            0x30 => 0xff_ffff,
            0x02 => 0xff_ffff,
            0x01 => 0xff_ffff,
            b if b & 0x08 == 0 && (0x4..=0xf).contains(&(b >> 4)) && b >> 4 != 0x3 => 0xff_ffff,
            _ => 0,
        }
    }

    fn arb_fc() -> impl Strategy<Value = FcDllp> {
        (
            0usize..3,
            0usize..3,
            0u8..8,
            0u8..4,
            any::<u8>(),
            0u8..4,
            0u16..4096,
        )
            .prop_map(|(k, c, vc, hs, hdr_fc, ds, data_fc)| FcDllp {
                kind: FcKind::ALL[k],
                class: FcClass::ALL[c],
                vc,
                hdr_scale: FcScale::from_raw(hs),
                hdr_fc,
                data_scale: FcScale::from_raw(ds),
                data_fc,
            })
    }

    pub(crate) fn arb_dllp() -> impl Strategy<Value = DllpRepr> {
        let seq = (0u16..4096).prop_map(|v| SeqNum::new(v).unwrap());
        prop_oneof![
            seq.clone().prop_map(|seq| DllpRepr::Ack { seq }),
            seq.prop_map(|seq| DllpRepr::Nak { seq }),
            arb_fc().prop_map(DllpRepr::Fc),
            Just(DllpRepr::PmEnterL1),
            Just(DllpRepr::PmEnterL23),
            Just(DllpRepr::PmActiveStateRequestL1),
            Just(DllpRepr::PmRequestAck),
            (0u32..1 << 24).prop_map(|data| DllpRepr::VendorSpecific { data }),
            Just(DllpRepr::Nop),
            (any::<bool>(), 0u32..1 << 23)
                .prop_map(|(ack, support)| DllpRepr::DataLinkFeature { ack, support }),
            (
                prop_oneof![Just(0x01u8), 0x70u8..0x78, 0xf0u8..0xf8, 0xb0u8..0xb8],
                0u32..1 << 24
            )
                .prop_map(|(type_byte, content)| DllpRepr::MrIov { type_byte, content }),
        ]
    }

    proptest! {
        #[test]
        fn emit_then_parse_is_identity(repr in arb_dllp()) {
            let b = repr.to_bytes().unwrap();
            prop_assert_eq!(DllpRepr::from_bytes(&b).unwrap(), repr);
        }

        #[test]
        fn parse_then_emit_is_identity(body in any::<[u8; 4]>()) {
            let b = with_crc(body);
            if let Ok(repr) = DllpRepr::from_bytes(&b) {
                let mask = meaningful_content_mask(body[0]);
                let content = u32::from_be_bytes([0, body[1], body[2], body[3]]) & mask;
                let c = content.to_be_bytes();
                let canonical = with_crc([body[0], c[1], c[2], c[3]]);
                prop_assert_eq!(repr.to_bytes().unwrap(), canonical);
            } else {
                prop_assert!(matches!(DllpType::from_byte(body[0]), DllpType::Reserved(_)));
            }
        }

        #[test]
        fn getters_never_panic_after_check(bytes in proptest::collection::vec(any::<u8>(), 0..10)) {
            if let Ok(p) = Packet::new_checked(&bytes[..]) {
                let _ = (p.type_raw(), p.dllp_type(), p.content(), p.seq(), p.vc());
                let _ = (p.hdr_scale(), p.hdr_fc(), p.data_scale(), p.data_fc());
                let _ = (p.feature_ack(), p.feature_support(), p.crc(), p.verify_crc());
                let _ = DllpRepr::parse(&p);
                let _ = DllpRepr::parse_ignoring_crc(&p);
            } else {
                prop_assert!(bytes.len() != DLLP_LEN);
            }
            let _ = DllpRepr::from_bytes(&bytes);
        }
    }
}

/// JSON form of DLLPs (feature `json`), for the CLI's `pcielab dllp decode|encode`.
///
/// Keys: `kind` (`Ack`, `Nak`, `InitFC1`, `InitFC2`, `UpdateFC`, `PM_Enter_L1`,
/// `PM_Enter_L23`, `PM_Active_State_Request_L1`, `PM_Request_Ack`, `Vendor`, `NOP`,
/// `Data_Link_Feature`, `MR-IOV`), then per kind: `seq`; `fc_class` (`P`, `NP`, `Cpl`),
/// `vc`, `hdr_scale`, `hdr_fc`, `data_scale`, `data_fc`; `vendor_data`; `feature_ack`,
/// `feature_support`; `type`, `content` (MR-IOV). Numbers may also be `"0x…"` strings.
///
/// ```
/// use pcielab_wire::dllp::{json, DllpRepr};
/// use pcielab_wire::SeqNum;
/// let ack = DllpRepr::Ack { seq: SeqNum::new(9).unwrap() };
/// let v = json::to_json(&ack);
/// assert_eq!(v.to_string(), r#"{"kind":"Ack","seq":9}"#);
/// assert_eq!(json::from_json(&v).unwrap(), ack);
/// ```
#[cfg(feature = "json")]
pub mod json {
    use super::{DllpRepr, FcClass, FcDllp, FcKind, FcScale};
    use crate::types::SeqNum;
    use serde_json::{json, Map, Value};

    /// The JSON object of a DLLP.
    pub fn to_json(d: &DllpRepr) -> Value {
        match *d {
            DllpRepr::Ack { seq } => json!({"kind": "Ack", "seq": seq.value()}),
            DllpRepr::Nak { seq } => json!({"kind": "Nak", "seq": seq.value()}),
            DllpRepr::Fc(fc) => json!({
                "kind": fc.kind.name(),
                "fc_class": fc.class.name(),
                "vc": fc.vc,
                "hdr_scale": fc.hdr_scale.raw(),
                "hdr_fc": fc.hdr_fc,
                "data_scale": fc.data_scale.raw(),
                "data_fc": fc.data_fc,
            }),
            DllpRepr::PmEnterL1 => json!({"kind": "PM_Enter_L1"}),
            DllpRepr::PmEnterL23 => json!({"kind": "PM_Enter_L23"}),
            DllpRepr::PmActiveStateRequestL1 => json!({"kind": "PM_Active_State_Request_L1"}),
            DllpRepr::PmRequestAck => json!({"kind": "PM_Request_Ack"}),
            DllpRepr::VendorSpecific { data } => json!({"kind": "Vendor", "vendor_data": data}),
            DllpRepr::Nop => json!({"kind": "NOP"}),
            DllpRepr::DataLinkFeature { ack, support } => json!({
                "kind": "Data_Link_Feature",
                "feature_ack": ack,
                "feature_support": support,
            }),
            DllpRepr::MrIov { type_byte, content } => {
                json!({"kind": "MR-IOV", "type": type_byte, "content": content})
            }
        }
    }

    /// [`uint`], 0 when the key is absent.
    fn uint_or_0(m: &Map<String, Value>, k: &str, max: u64) -> Result<u64, String> {
        if m.contains_key(k) {
            uint(m, k, max)
        } else {
            Ok(0)
        }
    }

    fn uint(m: &Map<String, Value>, k: &str, max: u64) -> Result<u64, String> {
        let v = m.get(k).ok_or_else(|| format!("field \"{k}\": missing"))?;
        let n = match v {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s
                .strip_prefix("0x")
                .and_then(|h| u64::from_str_radix(&h.replace('_', ""), 16).ok())
                .or_else(|| s.parse().ok()),
            _ => None,
        }
        .ok_or_else(|| format!("field \"{k}\": {v} is not a non-negative integer"))?;
        if n > max {
            return Err(format!("field \"{k}\": {n} is out of range (max {max})"));
        }
        Ok(n)
    }

    /// A DLLP from its JSON object; errors name the key and what is wrong.
    pub fn from_json(v: &Value) -> Result<DllpRepr, String> {
        let m = v
            .as_object()
            .ok_or_else(|| "a DLLP must be a JSON object".to_string())?;
        let kind = m
            .get("kind")
            .and_then(Value::as_str)
            .ok_or_else(|| "field \"kind\": missing or not a string".to_string())?;
        let seq = |m: &Map<String, Value>| -> Result<SeqNum, String> {
            Ok(SeqNum::from_bits_truncate(uint(m, "seq", 0xfff)? as u16))
        };
        // The text form's name (`UpdateFC-P`) names the class too.
        let (family, class_in_kind) = match kind.split_once('-') {
            Some((f, c)) if ["InitFC1", "InitFC2", "UpdateFC"].contains(&f) => (f, Some(c)),
            _ => (kind, None),
        };
        let fc_kind = match family {
            "InitFC1" => Some(FcKind::InitFc1),
            "InitFC2" => Some(FcKind::InitFc2),
            "UpdateFC" => Some(FcKind::UpdateFc),
            _ => None,
        };
        if let Some(kind) = fc_kind {
            let given = m.get("fc_class").and_then(Value::as_str);
            if let (Some(a), Some(b)) = (class_in_kind, given) {
                if a != b {
                    return Err(format!(
                        "field \"fc_class\": {b:?} disagrees with the class in \"kind\" ({a:?})"
                    ));
                }
            }
            let class = match class_in_kind.or(given) {
                Some("P") => FcClass::P,
                Some("NP") => FcClass::Np,
                Some("Cpl") => FcClass::Cpl,
                _ => return Err("field \"fc_class\": must be \"P\", \"NP\" or \"Cpl\" (or the kind written as UpdateFC-P)".into()),
            };
            return Ok(DllpRepr::Fc(FcDllp {
                kind,
                class,
                // VC 0 and no scaling unless said (as in the text form, where they
                // are only shown when set).
                vc: uint_or_0(m, "vc", 7)? as u8,
                hdr_scale: FcScale::from_raw(uint_or_0(m, "hdr_scale", 3)? as u8),
                hdr_fc: uint(m, "hdr_fc", 0xff)? as u8,
                data_scale: FcScale::from_raw(uint_or_0(m, "data_scale", 3)? as u8),
                data_fc: uint(m, "data_fc", 0xfff)? as u16,
            }));
        }
        Ok(match kind {
            "Ack" => DllpRepr::Ack { seq: seq(m)? },
            "Nak" => DllpRepr::Nak { seq: seq(m)? },
            "PM_Enter_L1" => DllpRepr::PmEnterL1,
            "PM_Enter_L23" => DllpRepr::PmEnterL23,
            "PM_Active_State_Request_L1" => DllpRepr::PmActiveStateRequestL1,
            "PM_Request_Ack" => DllpRepr::PmRequestAck,
            "Vendor" => DllpRepr::VendorSpecific {
                data: uint(m, "vendor_data", 0xff_ffff)? as u32,
            },
            "NOP" => DllpRepr::Nop,
            "Data_Link_Feature" => DllpRepr::DataLinkFeature {
                ack: m
                    .get("feature_ack")
                    .and_then(Value::as_bool)
                    .ok_or_else(|| "field \"feature_ack\": missing or not a boolean".to_string())?,
                support: uint(m, "feature_support", 0x7f_ffff)? as u32,
            },
            "MR-IOV" => {
                let type_byte = uint(m, "type", 0xff)? as u8;
                let repr = DllpRepr::MrIov {
                    type_byte,
                    content: uint(m, "content", 0xff_ffff)? as u32,
                };
                repr.to_bytes().map_err(|_| {
                    format!("field \"type\": {type_byte:#04x} is not an MR-IOV DLLP type")
                })?;
                repr
            }
            other => return Err(format!("field \"kind\": unknown DLLP kind \"{other}\"")),
        })
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn json_round_trip(d in crate::dllp::tests::arb_dllp()) {
                prop_assert_eq!(from_json(&to_json(&d)).unwrap(), d);
            }
        }

        #[test]
        fn json_errors_name_the_key() {
            // The text form's name round-trips: "UpdateFC-P" as printed is a kind.
            for (kind, class) in FcKind::ALL
                .into_iter()
                .flat_map(|k| FcClass::ALL.map(|c| (k, c)))
            {
                let d = DllpRepr::Fc(FcDllp {
                    kind,
                    class,
                    vc: 2,
                    hdr_scale: FcScale::NotActive,
                    hdr_fc: 17,
                    data_scale: FcScale::NotActive,
                    data_fc: 300,
                });
                {
                    let name = crate::dllp::DllpType::Fc(kind, class).to_string();
                    let mut j = to_json(&d);
                    j["kind"] = json!(name);
                    j.as_object_mut().unwrap().remove("fc_class");
                    assert_eq!(from_json(&j), Ok(d), "{name}");
                }
            }
            let e = from_json(&json!({"kind": "UpdateFC-P", "fc_class": "NP"})).unwrap_err();
            assert!(e.contains("disagrees"), "{e}");
            let e = from_json(&json!({"kind": "UpdateFC", "fc_class": "P", "vc": 8})).unwrap_err();
            assert!(e.contains("\"vc\""), "{e}");
            let e = from_json(&json!({"kind": "Ack"})).unwrap_err();
            assert!(e.contains("\"seq\": missing"), "{e}");
            let e = from_json(&json!({"kind": "Bogus"})).unwrap_err();
            assert!(e.contains("Bogus"), "{e}");
            let e = from_json(&json!({"kind": "MR-IOV", "type": 0x31, "content": 0})).unwrap_err();
            assert!(e.contains("\"type\""), "{e}");
            assert_eq!(
                from_json(&json!({"kind": "Nak", "seq": "0xfff"})).unwrap(),
                DllpRepr::Nak {
                    seq: SeqNum::new(0xfff).unwrap()
                }
            );
            assert_eq!(
                from_json(
                    &json!({"kind": "UpdateFC", "fc_class": "Cpl", "vc": 1, "hdr_scale": 2,
                    "hdr_fc": 3, "data_scale": 0, "data_fc": 4095})
                )
                .unwrap(),
                DllpRepr::Fc(FcDllp {
                    kind: FcKind::UpdateFc,
                    class: FcClass::Cpl,
                    vc: 1,
                    hdr_scale: FcScale::X4,
                    hdr_fc: 3,
                    data_scale: FcScale::NotActive,
                    data_fc: 4095
                })
            );
        }
    }
}
