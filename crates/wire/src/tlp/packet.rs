//! `TlpPacket`: a zero-copy view of a TLP in a byte buffer.
//!
//! ```text
//!          +0        +1                 +2                  +3
//!  DW0  |Fmt|Type |T9 TC T8 A2 LN TH |TD EP RO NS AT Len98| Length[7:0]   |
//!  req  | Requester ID               | Tag               | LastBE|1stBE  |
//!  cpl  | Completer ID               |Status BCM ByteCnt | ByteCount[7:0]|
//!  cpl  | Requester ID               | Tag               |R|Lower Address|
//!  mem  | Address[31:2] (3DW) or Address[63:32], Address[31:2] (4DW) | PH |
//!  cfg  | Bus | Dev/Fn             | Ext Reg           | Reg | 00      |
//!  msg  | ... Message Code in byte 7; bytes 8..16 routing/message specific |
//! ```
//! Prefixes (Fmt = 100b) come before DW0; offsets in `field` are relative to DW0.
//!
//! # Safety contract
//! [`TlpPacket::new_checked`] (or a successful [`TlpPacket::check_len`]) guarantees that the
//! buffer holds exactly one TLP: every prefix, the whole header its Fmt asks for, the
//! payload its Length asks for and the digest its TD bit asks for, with a Fmt/Type that
//! names a TLP kind. After that no getter panics. On an unchecked buffer getters may
//! panic on short input; use `new_checked` for anything untrusted.

use super::kind::{Fmt, TlpKind};
use super::msg::{MsgCode, MsgFields, MsgRouting};
use super::prefix::{Prefix, MAX_PREFIXES};
use crate::error::{Error, Result};
use crate::types::{AddressType, Attr, Bdf, ByteEnables, CplStatus, Tag, TrafficClass};

mod field {
    pub const FMT_TYPE: usize = 0;
    pub const FLAGS1: usize = 1;
    pub const FLAGS2: usize = 2;
    pub const LEN_LO: usize = 3;
    pub const REQ_ID: core::ops::Range<usize> = 4..6;
    pub const REQ_TAG: usize = 6;
    pub const BE: usize = 7;
    pub const CPL_ID: core::ops::Range<usize> = 4..6;
    pub const CPL_STATUS: usize = 6;
    pub const CPL_BC_LO: usize = 7;
    pub const CPL_REQ_ID: core::ops::Range<usize> = 8..10;
    pub const CPL_TAG: usize = 10;
    pub const CPL_LA: usize = 11;
    pub const ADDR32: core::ops::Range<usize> = 8..12;
    pub const ADDR64: core::ops::Range<usize> = 8..16;
    pub const CFG_TARGET: core::ops::Range<usize> = 8..10;
    pub const CFG_EXT_REG: usize = 10;
    pub const CFG_REG: usize = 11;
    pub const MSG_CODE: usize = 7;
    pub const MSG_FIELDS: core::ops::Range<usize> = 8..16;
}

/// A read/write view of a TLP (optionally preceded by prefixes) in a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

/// Counts the prefixes at the front of `b` without reading past its end.
#[inline]
fn count_prefixes(b: &[u8]) -> usize {
    match b.first() {
        Some(&x) if x >> 5 == 0b100 => {}
        _ => return 0,
    }
    let mut n = 0;
    while n * 4 < b.len() && b[n * 4] >> 5 == 0b100 {
        n += 1;
    }
    n
}

impl<T: AsRef<[u8]>> TlpPacket<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> TlpPacket<T> {
        TlpPacket { buffer }
    }

    /// Wraps a buffer and checks it (see the module's safety contract).
    pub fn new_checked(buffer: T) -> Result<TlpPacket<T>> {
        let p = TlpPacket::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the buffer holds exactly one TLP whose Fmt/Type names a kind.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        let np = count_prefixes(b);
        if np > MAX_PREFIXES {
            return Err(Error::Field {
                field: "TLP Prefix count",
                value: np as u64,
                offset: 0,
                reason: "more than 8 TLP prefixes",
            });
        }
        let h = np * 4;
        if b.len() < h + 4 {
            return Err(Error::Truncated {
                what: if np > 0 && b.len() < h {
                    "TLP prefix"
                } else {
                    "TLP header DW0"
                },
                needed: if b.len() < h { h } else { h + 4 },
                available: b.len(),
            });
        }
        let b0 = b[h];
        if TlpKind::from_byte0(b0).is_none() {
            return Err(Error::Field {
                field: "Fmt/Type",
                value: b0 as u64,
                offset: h,
                reason: "reserved or deprecated Fmt/Type encoding",
            });
        }
        // Fmt bit 0 (byte 0 bit 5): 4 DW header; Fmt bit 1 (bit 6): data payload.
        let four = b0 & 0x20 != 0;
        let hdr_end = h + if four { 16 } else { 12 };
        if b.len() < hdr_end {
            return Err(Error::Truncated {
                what: if four {
                    "4 DW TLP header"
                } else {
                    "3 DW TLP header"
                },
                needed: hdr_end,
                available: b.len(),
            });
        }
        let mut end = hdr_end;
        if b0 & 0x40 != 0 {
            let raw = ((b[h + 2] & 3) as usize) << 8 | b[h + 3] as usize;
            end += if raw == 0 { 4096 } else { raw * 4 };
            if b.len() < end {
                return Err(Error::Truncated {
                    what: "payload of the Length field",
                    needed: end,
                    available: b.len(),
                });
            }
        }
        if b[h + 2] & 0x80 != 0 {
            end += 4;
            if b.len() < end {
                return Err(Error::Truncated {
                    what: "ECRC digest (TD set)",
                    needed: end,
                    available: b.len(),
                });
            }
        }
        if b.len() > end {
            return Err(Error::Trailing {
                what: "Fmt, Length and TD",
                expected: end,
                available: b.len(),
            });
        }
        Ok(())
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The underlying bytes (prefixes, header, payload, digest).
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Number of prefixes before the header.
    pub fn prefix_count(&self) -> usize {
        count_prefixes(self.buffer.as_ref())
    }

    /// Byte offset of header DW0.
    pub fn header_offset(&self) -> usize {
        self.prefix_count() * 4
    }

    /// Prefix `i`.
    pub fn prefix(&self, i: usize) -> Option<Prefix> {
        let b = self.buffer.as_ref();
        if i >= self.prefix_count() {
            return None;
        }
        Prefix::from_bytes([b[i * 4], b[i * 4 + 1], b[i * 4 + 2], b[i * 4 + 3]])
    }

    /// Iterates over the prefixes.
    pub fn prefixes(&self) -> impl Iterator<Item = Prefix> + '_ {
        (0..self.prefix_count()).filter_map(move |i| self.prefix(i))
    }

    #[inline]
    fn hdr(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[self.header_offset()..]
    }

    #[inline]
    fn u16_at(&self, r: core::ops::Range<usize>) -> u16 {
        let h = self.hdr();
        u16::from_be_bytes([h[r.start], h[r.start + 1]])
    }

    /// The raw Fmt field.
    pub fn fmt_raw(&self) -> u8 {
        self.hdr()[field::FMT_TYPE] >> 5
    }
    /// The Fmt field (`None` if reserved).
    pub fn fmt(&self) -> Option<Fmt> {
        Fmt::from_raw(self.fmt_raw())
    }
    /// The raw Type field.
    pub fn type_raw(&self) -> u8 {
        self.hdr()[field::FMT_TYPE] & 0x1f
    }
    /// The TLP kind (`None` for reserved Fmt/Type; never `None` after `check_len`).
    pub fn kind(&self) -> Option<TlpKind> {
        TlpKind::from_byte0(self.hdr()[field::FMT_TYPE])
    }
    /// Header length in bytes (12 or 16).
    pub fn header_len(&self) -> usize {
        if self.fmt_raw() & 1 != 0 {
            16
        } else {
            12
        }
    }
    /// Traffic class.
    pub fn tc(&self) -> TrafficClass {
        TrafficClass::new((self.hdr()[field::FLAGS1] >> 4) & 7).unwrap_or_default()
    }
    /// Attributes (RO, NS, IDO).
    pub fn attr(&self) -> Attr {
        let h = self.hdr();
        Attr {
            ro: h[field::FLAGS2] & 0x20 != 0,
            ns: h[field::FLAGS2] & 0x10 != 0,
            ido: h[field::FLAGS1] & 0x04 != 0,
        }
    }
    /// Lightweight Notification bit.
    pub fn ln(&self) -> bool {
        self.hdr()[field::FLAGS1] & 0x02 != 0
    }
    /// TLP Processing Hints present.
    pub fn th(&self) -> bool {
        self.hdr()[field::FLAGS1] & 0x01 != 0
    }
    /// TLP Digest (ECRC) present.
    pub fn td(&self) -> bool {
        self.hdr()[field::FLAGS2] & 0x80 != 0
    }
    /// Poisoned (EP).
    pub fn ep(&self) -> bool {
        self.hdr()[field::FLAGS2] & 0x40 != 0
    }
    /// Address Type.
    pub fn at(&self) -> AddressType {
        AddressType::from_raw((self.hdr()[field::FLAGS2] >> 2) & 3)
    }
    /// The raw 10-bit Length field (0 means 1024 DW).
    pub fn length_raw(&self) -> u16 {
        let h = self.hdr();
        (((h[field::FLAGS2] & 3) as u16) << 8) | h[field::LEN_LO] as u16
    }
    /// Length in DW, decoded (1..=1024).
    pub fn length_dw(&self) -> u16 {
        match self.length_raw() {
            0 => 1024,
            n => n,
        }
    }
    fn is_cpl(&self) -> bool {
        matches!(self.type_raw(), 0b01010 | 0b01011) && self.fmt_raw() & 1 == 0
    }
    /// The 10-bit tag (T9, T8 and the Tag byte of requests or completions).
    pub fn tag(&self) -> Tag {
        let h = self.hdr();
        let lo = if self.is_cpl() {
            h[field::CPL_TAG]
        } else {
            h[field::REQ_TAG]
        };
        let t9 = (h[field::FLAGS1] >> 7) as u16 & 1;
        let t8 = (h[field::FLAGS1] >> 3) as u16 & 1;
        Tag::from_bits_truncate((t9 << 9) | (t8 << 8) | lo as u16)
    }
    /// Requester ID (bytes 4–5 of requests, 8–9 of completions).
    pub fn requester_id(&self) -> Bdf {
        Bdf::from_raw(if self.is_cpl() {
            self.u16_at(field::CPL_REQ_ID)
        } else {
            self.u16_at(field::REQ_ID)
        })
    }
    /// Completer ID of completions.
    pub fn completer_id(&self) -> Bdf {
        Bdf::from_raw(self.u16_at(field::CPL_ID))
    }
    /// First DW Byte Enables of requests.
    pub fn first_be(&self) -> ByteEnables {
        ByteEnables::from_bits_truncate(self.hdr()[field::BE])
    }
    /// Last DW Byte Enables of requests.
    pub fn last_be(&self) -> ByteEnables {
        ByteEnables::from_bits_truncate(self.hdr()[field::BE] >> 4)
    }
    /// Address of memory and I/O requests and address-routed messages (low two bits
    /// cleared; they carry PH when TH is set).
    pub fn address(&self) -> u64 {
        let h = self.hdr();
        if self.header_len() == 16 {
            let r = field::ADDR64;
            let mut a = [0u8; 8];
            a.copy_from_slice(&h[r]);
            u64::from_be_bytes(a) & !3
        } else {
            let r = field::ADDR32;
            (u32::from_be_bytes([h[r.start], h[r.start + 1], h[r.start + 2], h[r.start + 3]]) & !3)
                as u64
        }
    }
    /// Processing Hint (the low two bits of the last address DW).
    pub fn ph(&self) -> u8 {
        let h = self.hdr();
        h[self.header_len() - 1] & 3
    }
    /// Completion status.
    pub fn status(&self) -> CplStatus {
        CplStatus::from_raw(self.hdr()[field::CPL_STATUS] >> 5)
    }
    /// Byte Count Modified.
    pub fn bcm(&self) -> bool {
        self.hdr()[field::CPL_STATUS] & 0x10 != 0
    }
    /// The raw 12-bit Byte Count (0 means 4096).
    pub fn byte_count_raw(&self) -> u16 {
        let h = self.hdr();
        (((h[field::CPL_STATUS] & 0xf) as u16) << 8) | h[field::CPL_BC_LO] as u16
    }
    /// Byte Count, decoded (1..=4096).
    pub fn byte_count(&self) -> u16 {
        match self.byte_count_raw() {
            0 => 4096,
            n => n,
        }
    }
    /// Lower Address (7 bits) of completions.
    pub fn lower_address(&self) -> u8 {
        self.hdr()[field::CPL_LA] & 0x7f
    }
    /// Target ID of configuration requests (bus, device, function).
    pub fn cfg_target(&self) -> Bdf {
        Bdf::from_raw(self.u16_at(field::CFG_TARGET))
    }
    /// Register number (DW index 0..=1023: Extended Register Number and Register Number).
    pub fn cfg_register(&self) -> u16 {
        let h = self.hdr();
        (((h[field::CFG_EXT_REG] & 0xf) as u16) << 6) | (h[field::CFG_REG] >> 2) as u16
    }
    /// Message code.
    pub fn msg_code(&self) -> MsgCode {
        MsgCode::from_raw(self.hdr()[field::MSG_CODE])
    }
    /// Message routing (`None` for a reserved subfield).
    pub fn msg_routing(&self) -> Option<MsgRouting> {
        MsgRouting::from_raw(self.type_raw() & 7)
    }
    /// Message-specific header bytes 8..16 (messages always have 4 DW headers; on a
    /// 3 DW header the missing bytes read as zero).
    pub fn msg_fields(&self) -> MsgFields {
        let mut f = [0u8; 8];
        let end = self.header_len().min(field::MSG_FIELDS.end);
        let n = end - field::MSG_FIELDS.start;
        f[..n].copy_from_slice(&self.hdr()[field::MSG_FIELDS.start..end]);
        MsgFields(f)
    }
    /// The header bytes (12 or 16), without prefixes.
    pub fn header(&self) -> &[u8] {
        let hl = self.header_len();
        &self.hdr()[..hl]
    }
    /// The data payload (empty for kinds without data).
    pub fn payload(&self) -> &[u8] {
        let h = self.hdr();
        let hl = self.header_len();
        if self.fmt_raw() & 2 != 0 {
            &h[hl..hl + self.length_dw() as usize * 4]
        } else {
            &h[hl..hl]
        }
    }
    /// The ECRC digest, when TD is set (the value whose little-endian bytes are on the wire).
    pub fn ecrc(&self) -> Option<u32> {
        if !self.td() {
            return None;
        }
        let b = self.buffer.as_ref();
        let n = b.len();
        Some(u32::from_le_bytes([b[n - 4], b[n - 3], b[n - 2], b[n - 1]]))
    }
    /// Computes the ECRC of this TLP: over the End-End prefixes, header and payload, with
    /// the variant bits (Type bit 0 and EP) taken as 1. Local prefixes are not covered.
    pub fn compute_ecrc(&self) -> u32 {
        let b = self.buffer.as_ref();
        let h0 = self.header_offset();
        let mut hasher = crc32fast::Hasher::new();
        for i in 0..self.prefix_count() {
            let p = &b[i * 4..i * 4 + 4];
            if p[0] & 0x10 != 0 {
                hasher.update(p);
            }
        }
        let hdr = self.header();
        let mut first = [0u8; 4];
        first.copy_from_slice(&hdr[..4]);
        first[0] |= 0x01;
        first[2] |= 0x40;
        hasher.update(&first);
        hasher.update(&hdr[4..]);
        hasher.update(self.payload());
        let _ = h0;
        hasher.finalize()
    }
    /// Checks the ECRC, when present.
    pub fn check_ecrc(&self) -> Result<()> {
        if let Some(found) = self.ecrc() {
            let computed = self.compute_ecrc();
            if found != computed {
                return Err(Error::Crc {
                    what: "ECRC",
                    found,
                    computed,
                    offset: self.buffer.as_ref().len() - 4,
                });
            }
        }
        Ok(())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TlpPacket<T> {
    fn hdr_mut(&mut self) -> &mut [u8] {
        let off = self.header_offset();
        &mut self.buffer.as_mut()[off..]
    }
    /// Sets Fmt and Type.
    pub fn set_fmt_type(&mut self, fmt: u8, ty: u8) {
        self.hdr_mut()[field::FMT_TYPE] = (fmt << 5) | (ty & 0x1f);
    }
    /// Sets the DW0 flag bits other than Fmt/Type/Length/tag.
    #[allow(clippy::too_many_arguments)]
    pub fn set_dw0_flags(
        &mut self,
        tc: TrafficClass,
        attr: Attr,
        ln: bool,
        th: bool,
        td: bool,
        ep: bool,
        at: AddressType,
    ) {
        let h = self.hdr_mut();
        h[field::FLAGS1] = (h[field::FLAGS1] & 0x88)
            | (tc.value() << 4)
            | ((attr.ido as u8) << 2)
            | ((ln as u8) << 1)
            | th as u8;
        h[field::FLAGS2] = (h[field::FLAGS2] & 0x03)
            | ((td as u8) << 7)
            | ((ep as u8) << 6)
            | ((attr.ro as u8) << 5)
            | ((attr.ns as u8) << 4)
            | (at.raw() << 2);
    }
    /// Sets the raw Length field (1024 DW is written as 0).
    pub fn set_length_dw(&mut self, dw: u16) {
        let raw = dw & 0x3ff;
        let h = self.hdr_mut();
        h[field::FLAGS2] = (h[field::FLAGS2] & !3) | (raw >> 8) as u8;
        h[field::LEN_LO] = raw as u8;
    }
    /// Sets T9/T8 and the tag byte (at the request or completion position).
    pub fn set_tag(&mut self, tag: Tag) {
        let cpl = self.is_cpl();
        let v = tag.value();
        let h = self.hdr_mut();
        h[field::FLAGS1] =
            (h[field::FLAGS1] & 0x77) | (((v >> 9) as u8 & 1) << 7) | (((v >> 8) as u8 & 1) << 3);
        h[if cpl { field::CPL_TAG } else { field::REQ_TAG }] = v as u8;
    }
    fn set_u16(&mut self, r: core::ops::Range<usize>, v: u16) {
        self.hdr_mut()[r].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the requester ID.
    pub fn set_requester_id(&mut self, id: Bdf) {
        let r = if self.is_cpl() {
            field::CPL_REQ_ID
        } else {
            field::REQ_ID
        };
        self.set_u16(r, id.raw());
    }
    /// Sets the completer ID of a completion.
    pub fn set_completer_id(&mut self, id: Bdf) {
        self.set_u16(field::CPL_ID, id.raw());
    }
    /// Sets both byte-enable fields.
    pub fn set_byte_enables(&mut self, first: ByteEnables, last: ByteEnables) {
        self.hdr_mut()[field::BE] = (last.bits() << 4) | first.bits();
    }
    /// Sets the address (and PH in the low two bits).
    pub fn set_address(&mut self, addr: u64, ph: u8) {
        let four = self.header_len() == 16;
        let h = self.hdr_mut();
        if four {
            h[field::ADDR64].copy_from_slice(&((addr & !3) | (ph & 3) as u64).to_be_bytes());
        } else {
            h[field::ADDR32]
                .copy_from_slice(&(((addr as u32) & !3) | (ph & 3) as u32).to_be_bytes());
        }
    }
    /// Sets status, BCM and Byte Count (4096 is written as 0) of a completion.
    pub fn set_completion_fields(&mut self, status: CplStatus, bcm: bool, byte_count: u16, la: u8) {
        let bc = byte_count & 0xfff;
        let h = self.hdr_mut();
        h[field::CPL_STATUS] = (status.raw() << 5) | ((bcm as u8) << 4) | (bc >> 8) as u8;
        h[field::CPL_BC_LO] = bc as u8;
        h[field::CPL_LA] = la & 0x7f;
    }
    /// Sets the target and register number of a configuration request.
    pub fn set_cfg_target(&mut self, target: Bdf, register: u16) {
        self.set_u16(field::CFG_TARGET, target.raw());
        let h = self.hdr_mut();
        h[field::CFG_EXT_REG] = ((register >> 6) & 0xf) as u8;
        h[field::CFG_REG] = ((register & 0x3f) as u8) << 2;
    }
    /// Sets the message code.
    pub fn set_msg_code(&mut self, code: MsgCode) {
        self.hdr_mut()[field::MSG_CODE] = code.raw();
    }
    /// Sets message header bytes 8..16.
    pub fn set_msg_fields(&mut self, f: MsgFields) {
        self.hdr_mut()[field::MSG_FIELDS].copy_from_slice(&f.0);
    }
    /// Mutable payload.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        let n = if self.fmt_raw() & 2 != 0 {
            self.length_dw() as usize * 4
        } else {
            0
        };
        &mut self.hdr_mut()[hl..hl + n]
    }
    /// Computes the ECRC and writes it into the digest (TD must be set).
    pub fn fill_ecrc(&mut self) {
        if self.td() {
            let c = self.compute_ecrc();
            let b = self.buffer.as_mut();
            let n = b.len();
            b[n - 4..].copy_from_slice(&c.to_le_bytes());
        }
    }
}
