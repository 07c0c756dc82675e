//! `TlpRepr`: an owned, typed description of a TLP that borrows only its payload.

use super::kind::{Fmt, TlpKind};
use super::msg::{MsgCode, MsgFields, MsgRouting};
use super::packet::TlpPacket;
use super::prefix::{Prefix, Prefixes};
use crate::error::{Error, Result};
use crate::types::{AddressType, Attr, Bdf, ByteEnables, CplStatus, Tag, TrafficClass};

/// The operation of a memory request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemOp {
    /// MRd.
    Read,
    /// MRdLk.
    ReadLocked,
    /// MWr.
    Write,
    /// FetchAdd AtomicOp.
    FetchAdd,
    /// Swap AtomicOp.
    Swap,
    /// CAS AtomicOp.
    Cas,
}

impl TlpKind {
    /// The memory operation of MRd, MRdLk, MWr and the AtomicOps; `None` for other kinds.
    pub const fn mem_op(self) -> Option<MemOp> {
        Some(match self {
            TlpKind::MRd => MemOp::Read,
            TlpKind::MRdLk => MemOp::ReadLocked,
            TlpKind::MWr => MemOp::Write,
            TlpKind::FetchAdd => MemOp::FetchAdd,
            TlpKind::Swap => MemOp::Swap,
            TlpKind::CAS => MemOp::Cas,
            _ => return None,
        })
    }
}

/// Memory request header (MRd, MRdLk, MWr, AtomicOps).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MemHeader {
    /// Operation.
    pub op: MemOp,
    /// Requester ID.
    pub requester_id: Bdf,
    /// Tag (for MWr with TH set, `ST[7:0]`).
    pub tag: Tag,
    /// First DW byte enables (for MRd with TH set, part of `ST[7:0]`).
    pub first_be: ByteEnables,
    /// Last DW byte enables.
    pub last_be: ByteEnables,
    /// Address (DW aligned; the low two bits are ignored).
    pub address: u64,
    /// 4 DW header (64-bit address) when true.
    pub four_dw: bool,
    /// Processing Hint (meaningful when TH is set).
    pub ph: u8,
    /// Requested length in DW for reads (1..=1024); ignored for kinds with data,
    /// whose length is the payload's.
    pub read_len_dw: u16,
}

impl MemHeader {
    /// A memory request header at a DW-aligned address (the low two bits are dropped),
    /// with a 4 DW header exactly when the address needs 64 bits, and no processing hint.
    pub const fn new(
        op: MemOp,
        requester_id: Bdf,
        tag: Tag,
        address: u64,
        first_be: ByteEnables,
        last_be: ByteEnables,
        read_len_dw: u16,
    ) -> MemHeader {
        let address = address & !3;
        MemHeader {
            op,
            requester_id,
            tag,
            first_be,
            last_be,
            address,
            four_dw: address > u32::MAX as u64,
            ph: 0,
            read_len_dw,
        }
    }

    /// Byte enables for `len_dw` whole DWs: First BE 1111b, Last BE 1111b (0000b for 1 DW).
    pub const fn whole_dws(len_dw: usize) -> (ByteEnables, ByteEnables) {
        let last = if len_dw == 1 {
            ByteEnables::NONE
        } else {
            ByteEnables::ALL
        };
        (ByteEnables::ALL, last)
    }
}

/// I/O request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IoHeader {
    /// IOWr when true, IORd otherwise.
    pub write: bool,
    /// Requester ID.
    pub requester_id: Bdf,
    /// Tag.
    pub tag: Tag,
    /// First DW byte enables (Last DW BE is 0000b).
    pub first_be: ByteEnables,
    /// 32-bit I/O address (DW aligned).
    pub address: u32,
}

/// Configuration request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CfgHeader {
    /// CfgWr when true, CfgRd otherwise.
    pub write: bool,
    /// Type 1 (to be converted by a bridge) when true, Type 0 otherwise.
    pub type1: bool,
    /// Requester ID.
    pub requester_id: Bdf,
    /// Tag.
    pub tag: Tag,
    /// First DW byte enables (Last DW BE is 0000b).
    pub first_be: ByteEnables,
    /// Target function (the future Completer ID).
    pub target: Bdf,
    /// Register number, a DW index 0..=1023 (byte offset / 4).
    pub register: u16,
}

/// Message request header (Msg, MsgD: data when the payload is not empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MsgHeader {
    /// Requester ID.
    pub requester_id: Bdf,
    /// Tag.
    pub tag: Tag,
    /// Message code.
    pub code: MsgCode,
    /// Routing subfield.
    pub routing: MsgRouting,
    /// Header bytes 8..16 (address, destination ID or message-specific fields).
    pub fields: MsgFields,
}

/// Completion header (Cpl/CplD/CplLk/CplDLk: data when the payload is not empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CplHeader {
    /// Completion for a locked read.
    pub locked: bool,
    /// Completer ID.
    pub completer_id: Bdf,
    /// Completion status.
    pub status: CplStatus,
    /// Byte Count Modified.
    pub bcm: bool,
    /// Remaining byte count including this completion, 1..=4096.
    pub byte_count: u16,
    /// Requester ID.
    pub requester_id: Bdf,
    /// Tag.
    pub tag: Tag,
    /// Lower Address (7 bits).
    pub lower_address: u8,
}

/// The kind-specific part of a TLP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TlpHeader {
    /// Memory requests and AtomicOps.
    Mem(MemHeader),
    /// I/O requests.
    Io(IoHeader),
    /// Configuration requests.
    Cfg(CfgHeader),
    /// Messages.
    Msg(MsgHeader),
    /// Completions.
    Cpl(CplHeader),
}

/// A TLP: common DW0 fields, a kind-specific header, prefixes and a borrowed payload.
///
/// ```
/// use pcielab_wire::tlp::{TlpRepr, TlpKind};
/// use pcielab_wire::{Bdf, Tag};
///
/// let data = [0u8; 16];
/// let tlp = TlpRepr::mem_write(Bdf::new(1, 0, 0).unwrap(), Tag::new(5).unwrap(), 0x1_2345_6780, &data).unwrap();
/// let mut buf = vec![0u8; tlp.buffer_len()];
/// tlp.emit(&mut buf).unwrap();
/// let back = TlpRepr::parse_bytes(&buf).unwrap();
/// assert_eq!(back, tlp);
/// assert_eq!(back.kind(), TlpKind::MWr);
/// assert_eq!(back.to_string(), "MWr 4DW 01:00.0 tag 5 addr 0x1_2345_6780 len 4DW BE f/f TC0");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TlpRepr<'a> {
    /// Prefixes in front of the header.
    pub prefixes: Prefixes,
    /// Kind-specific header.
    pub header: TlpHeader,
    /// Traffic class.
    pub tc: TrafficClass,
    /// Attributes.
    pub attr: Attr,
    /// Lightweight Notification.
    pub ln: bool,
    /// TLP Processing Hints.
    pub th: bool,
    /// TLP Digest: `emit` appends a computed ECRC, `parse` checks it.
    pub td: bool,
    /// Poisoned.
    pub ep: bool,
    /// Address Type.
    pub at: AddressType,
    /// Data payload, a multiple of 4 bytes (1..=1024 DW) for kinds with data, else empty.
    pub payload: &'a [u8],
}

/// Options for [`TlpRepr::parse_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseOptions {
    /// Check the ECRC when TD is set (default true).
    pub check_ecrc: bool,
}

impl Default for ParseOptions {
    fn default() -> Self {
        ParseOptions { check_ecrc: true }
    }
}

impl<'a> TlpRepr<'a> {
    /// A TLP with default DW0 fields around `header`.
    pub const fn with_header(header: TlpHeader, payload: &'a [u8]) -> TlpRepr<'a> {
        TlpRepr {
            prefixes: Prefixes::EMPTY,
            header,
            tc: TrafficClass::TC0,
            attr: Attr::NONE,
            ln: false,
            th: false,
            td: false,
            ep: false,
            at: AddressType::Untranslated,
            payload,
        }
    }

    /// A memory read of `len_dw` DW at a DW-aligned address, all bytes enabled.
    pub fn mem_read(requester_id: Bdf, tag: Tag, address: u64, len_dw: u16) -> Result<TlpRepr<'a>> {
        check_range("read length in DW", len_dw as u64, 1, 1024, "1..=1024")?;
        let (first, last) = MemHeader::whole_dws(len_dw as usize);
        let h = MemHeader::new(MemOp::Read, requester_id, tag, address, first, last, len_dw);
        Ok(TlpRepr::with_header(TlpHeader::Mem(h), &[]))
    }

    /// A memory write of whole DWs at a DW-aligned address, all bytes enabled.
    pub fn mem_write(
        requester_id: Bdf,
        tag: Tag,
        address: u64,
        data: &'a [u8],
    ) -> Result<TlpRepr<'a>> {
        check_payload(data)?;
        let (first, last) = MemHeader::whole_dws(data.len() / 4);
        let h = MemHeader::new(MemOp::Write, requester_id, tag, address, first, last, 0);
        Ok(TlpRepr::with_header(TlpHeader::Mem(h), data))
    }

    /// A completion (with data when `data` is not empty).
    #[allow(clippy::too_many_arguments)]
    pub fn completion(
        completer_id: Bdf,
        requester_id: Bdf,
        tag: Tag,
        status: CplStatus,
        byte_count: u16,
        lower_address: u8,
        data: &'a [u8],
    ) -> Result<TlpRepr<'a>> {
        if !data.is_empty() {
            check_payload(data)?;
        }
        check_range("byte count", byte_count as u64, 1, 4096, "1..=4096")?;
        Ok(TlpRepr::with_header(
            TlpHeader::Cpl(CplHeader {
                locked: false,
                completer_id,
                status,
                bcm: false,
                byte_count,
                requester_id,
                tag,
                lower_address: lower_address & 0x7f,
            }),
            data,
        ))
    }

    /// The TLP kind.
    pub fn kind(&self) -> TlpKind {
        let data = !self.payload.is_empty();
        match self.header {
            TlpHeader::Mem(m) => match m.op {
                MemOp::Read => TlpKind::MRd,
                MemOp::ReadLocked => TlpKind::MRdLk,
                MemOp::Write => TlpKind::MWr,
                MemOp::FetchAdd => TlpKind::FetchAdd,
                MemOp::Swap => TlpKind::Swap,
                MemOp::Cas => TlpKind::CAS,
            },
            TlpHeader::Io(h) => {
                if h.write {
                    TlpKind::IOWr
                } else {
                    TlpKind::IORd
                }
            }
            TlpHeader::Cfg(h) => match (h.type1, h.write) {
                (false, false) => TlpKind::CfgRd0,
                (false, true) => TlpKind::CfgWr0,
                (true, false) => TlpKind::CfgRd1,
                (true, true) => TlpKind::CfgWr1,
            },
            TlpHeader::Msg(_) => {
                if data {
                    TlpKind::MsgD
                } else {
                    TlpKind::Msg
                }
            }
            TlpHeader::Cpl(c) => match (c.locked, data) {
                (false, false) => TlpKind::Cpl,
                (false, true) => TlpKind::CplD,
                (true, false) => TlpKind::CplLk,
                (true, true) => TlpKind::CplDLk,
            },
        }
    }

    /// True when the header is 4 DW.
    pub fn is_4dw(&self) -> bool {
        match self.header {
            TlpHeader::Mem(m) => m.four_dw,
            TlpHeader::Msg(_) => true,
            _ => false,
        }
    }

    /// The Fmt field.
    pub fn fmt(&self) -> Fmt {
        Fmt::new(self.is_4dw(), self.kind().has_data())
    }

    /// The Type field.
    pub fn type_raw(&self) -> u8 {
        match self.header {
            TlpHeader::Msg(m) => 0b10000 | m.routing.raw(),
            _ => self.kind().type_base(),
        }
    }

    /// The Length field in DW (1..=1024; 0 for Msg and Cpl without data).
    pub fn length_dw(&self) -> u16 {
        if !self.payload.is_empty() {
            return (self.payload.len() / 4) as u16;
        }
        match self.header {
            TlpHeader::Mem(m) => m.read_len_dw,
            TlpHeader::Io(_) | TlpHeader::Cfg(_) => 1,
            TlpHeader::Msg(_) | TlpHeader::Cpl(_) => 0,
        }
    }

    /// The tag.
    pub fn tag(&self) -> Tag {
        match self.header {
            TlpHeader::Mem(h) => h.tag,
            TlpHeader::Io(h) => h.tag,
            TlpHeader::Cfg(h) => h.tag,
            TlpHeader::Msg(h) => h.tag,
            TlpHeader::Cpl(h) => h.tag,
        }
    }

    /// The requester ID.
    pub fn requester_id(&self) -> Bdf {
        match self.header {
            TlpHeader::Mem(h) => h.requester_id,
            TlpHeader::Io(h) => h.requester_id,
            TlpHeader::Cfg(h) => h.requester_id,
            TlpHeader::Msg(h) => h.requester_id,
            TlpHeader::Cpl(h) => h.requester_id,
        }
    }

    /// Bytes of the TLP on the transaction layer: prefixes, header, payload, digest.
    pub fn buffer_len(&self) -> usize {
        self.prefixes.len() * 4
            + if self.is_4dw() { 16 } else { 12 }
            + self.payload.len()
            + if self.td { 4 } else { 0 }
    }

    /// Parses a checked packet; the ECRC is checked when TD is set.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &TlpPacket<&'a T>) -> Result<TlpRepr<'a>> {
        Self::parse_with(packet, ParseOptions::default())
    }

    /// Checks `bytes` and parses them.
    pub fn parse_bytes(bytes: &'a [u8]) -> Result<TlpRepr<'a>> {
        Self::parse_checked(bytes, ParseOptions::default())
    }

    /// Parses with options.
    ///
    /// This is the hot path of every receiver: it reads the header as big-endian words
    /// and decodes fields with shifts, without allocating.
    pub fn parse_with<T: AsRef<[u8]> + ?Sized>(
        packet: &TlpPacket<&'a T>,
        opts: ParseOptions,
    ) -> Result<TlpRepr<'a>> {
        let outer: &'a T = packet.into_inner_ref();
        Self::parse_checked(outer.as_ref(), opts)
    }

    #[inline]
    fn parse_checked(bytes: &'a [u8], opts: ParseOptions) -> Result<TlpRepr<'a>> {
        let p = TlpPacket::new_checked(bytes)?;
        let h0 = p.header_offset();
        if opts.check_ecrc && bytes[h0 + 2] & 0x80 != 0 {
            p.check_ecrc()?;
        }
        let mut prefixes = Prefixes::EMPTY;
        for i in 0..h0 / 4 {
            let w = [
                bytes[i * 4],
                bytes[i * 4 + 1],
                bytes[i * 4 + 2],
                bytes[i * 4 + 3],
            ];
            if let Some(x) = Prefix::from_bytes(w) {
                prefixes.push(x)?;
            }
        }
        let hdr = &bytes[h0..];
        // check_len guarantees at least 12 header bytes (16 for 4 DW headers).
        let h12: &[u8; 12] = hdr[..12].try_into().map_err(|_| Error::Truncated {
            what: "3 DW TLP header",
            needed: h0 + 12,
            available: bytes.len(),
        })?;
        let word = |i: usize| u32::from_be_bytes([h12[i], h12[i + 1], h12[i + 2], h12[i + 3]]);
        let dw0 = word(0);
        let dw1 = word(4);
        let dw2 = word(8);
        let fmt = (dw0 >> 29) as u8;
        let ty = ((dw0 >> 24) & 0x1f) as u8;
        let kind = TlpKind::from_byte0(hdr[0]).ok_or(Error::Field {
            field: "Fmt/Type",
            value: hdr[0] as u64,
            offset: h0,
            reason: "reserved or deprecated Fmt/Type encoding",
        })?;
        let four = fmt & 1 != 0;
        let length_raw = (dw0 & 0x3ff) as u16;
        let length_dw = if length_raw == 0 { 1024 } else { length_raw };
        let tag_hi = (((dw0 >> 23) & 1) << 9 | ((dw0 >> 19) & 1) << 8) as u16;
        let req_tag = Tag::from_bits_truncate(tag_hi | ((dw1 >> 8) & 0xff) as u16);
        let req_id = Bdf::from_raw((dw1 >> 16) as u16);
        let first_be = ByteEnables::from_bits_truncate(dw1 as u8);
        let last_be = ByteEnables::from_bits_truncate((dw1 >> 4) as u8);
        let header = match kind {
            TlpKind::MRd
            | TlpKind::MRdLk
            | TlpKind::MWr
            | TlpKind::FetchAdd
            | TlpKind::Swap
            | TlpKind::CAS => {
                let op = kind.mem_op().unwrap_or(MemOp::Read);
                let (address, ph) = if four {
                    let lo = u32::from_be_bytes([hdr[12], hdr[13], hdr[14], hdr[15]]);
                    (((dw2 as u64) << 32) | (lo & !3) as u64, (lo & 3) as u8)
                } else {
                    ((dw2 & !3) as u64, (dw2 & 3) as u8)
                };
                TlpHeader::Mem(MemHeader {
                    op,
                    requester_id: req_id,
                    tag: req_tag,
                    first_be,
                    last_be,
                    address,
                    four_dw: four,
                    ph,
                    read_len_dw: if kind.has_data() { 0 } else { length_dw },
                })
            }
            TlpKind::IORd | TlpKind::IOWr => {
                reserved_len(length_raw, h0)?;
                TlpHeader::Io(IoHeader {
                    write: kind == TlpKind::IOWr,
                    requester_id: req_id,
                    tag: req_tag,
                    first_be,
                    address: dw2 & !3,
                })
            }
            TlpKind::CfgRd0 | TlpKind::CfgWr0 | TlpKind::CfgRd1 | TlpKind::CfgWr1 => {
                reserved_len(length_raw, h0)?;
                TlpHeader::Cfg(CfgHeader {
                    write: kind.has_data(),
                    type1: matches!(kind, TlpKind::CfgRd1 | TlpKind::CfgWr1),
                    requester_id: req_id,
                    tag: req_tag,
                    first_be,
                    target: Bdf::from_raw((dw2 >> 16) as u16),
                    register: ((dw2 >> 2) & 0x3ff) as u16,
                })
            }
            TlpKind::Msg | TlpKind::MsgD => {
                let mut f = [0u8; 8];
                f.copy_from_slice(&hdr[8..16]);
                TlpHeader::Msg(MsgHeader {
                    requester_id: req_id,
                    tag: req_tag,
                    code: MsgCode::from_raw(dw1 as u8),
                    routing: MsgRouting::from_raw(ty & 7).ok_or(Error::Field {
                        field: "Message routing subfield",
                        value: (ty & 7) as u64,
                        offset: h0,
                        reason: "reserved routing",
                    })?,
                    fields: MsgFields(f),
                })
            }
            TlpKind::Cpl | TlpKind::CplD | TlpKind::CplLk | TlpKind::CplDLk => {
                let bc = (dw1 & 0xfff) as u16;
                TlpHeader::Cpl(CplHeader {
                    locked: matches!(kind, TlpKind::CplLk | TlpKind::CplDLk),
                    completer_id: req_id,
                    status: CplStatus::from_raw((dw1 >> 13) as u8 & 7),
                    bcm: dw1 & (1 << 12) != 0,
                    byte_count: if bc == 0 { 4096 } else { bc },
                    requester_id: Bdf::from_raw((dw2 >> 16) as u16),
                    tag: Tag::from_bits_truncate(tag_hi | ((dw2 >> 8) & 0xff) as u16),
                    lower_address: (dw2 & 0x7f) as u8,
                })
            }
        };
        let hl = if four { 16 } else { 12 };
        let n = if kind.has_data() {
            length_dw as usize * 4
        } else {
            0
        };
        let payload: &'a [u8] = &bytes[h0 + hl..h0 + hl + n];
        Ok(TlpRepr {
            prefixes,
            header,
            tc: TrafficClass::new(((dw0 >> 20) & 7) as u8).unwrap_or_default(),
            attr: Attr {
                ro: dw0 & (1 << 13) != 0,
                ns: dw0 & (1 << 12) != 0,
                ido: dw0 & (1 << 18) != 0,
            },
            ln: dw0 & (1 << 17) != 0,
            th: dw0 & (1 << 16) != 0,
            td: dw0 & (1 << 15) != 0,
            ep: dw0 & (1 << 14) != 0,
            at: AddressType::from_raw(((dw0 >> 10) & 3) as u8),
            payload,
        })
    }

    /// Checks that the representation is encodable: payload size and alignment, address
    /// width, read length, byte count.
    pub fn validate(&self) -> Result<()> {
        self.header_words().map(|_| ())
    }

    /// Validates and computes the header DWs (and the header length in bytes) in one pass.
    #[inline]
    fn header_words(&self) -> Result<([u32; 4], usize)> {
        let plen = self.payload.len();
        if plen != 0 && (plen % 4 != 0 || plen > 4096) {
            return Err(bad_payload(plen));
        }
        let tag = self.tag().value() as u32;
        let tag_lo = (tag & 0xff) << 8;
        let req = |rid: Bdf, first: ByteEnables, last: ByteEnables| {
            (rid.raw() as u32) << 16 | tag_lo | (last.bits() as u32) << 4 | first.bits() as u32
        };
        let need_data = |want: bool, what: &'static str| -> Result<()> {
            match (want, plen) {
                (true, 0) => Err(Error::Invalid {
                    what,
                    value: 0,
                    allowed: "1..=1024 DW of payload",
                }),
                (false, n) if n != 0 => Err(Error::Invalid {
                    what,
                    value: n as u64,
                    allowed: "no payload",
                }),
                _ => Ok(()),
            }
        };
        let mut w = [0u32; 4];
        // (Fmt with data bit, Type, 4 DW header, Length)
        let (ty, four, len_dw): (u8, bool, u32) = match self.header {
            TlpHeader::Mem(m) => {
                let (ty, data) = match m.op {
                    MemOp::Read => (0b00000, false),
                    MemOp::ReadLocked => (0b00001, false),
                    MemOp::Write => (0b00000, true),
                    MemOp::FetchAdd => (0b01100, true),
                    MemOp::Swap => (0b01101, true),
                    MemOp::Cas => (0b01110, true),
                };
                need_data(data, "payload of a memory request")?;
                if !m.four_dw && m.address > u32::MAX as u64 {
                    return Err(Error::Invalid {
                        what: "address of a 3 DW header",
                        value: m.address,
                        allowed: "below 4 GiB (use a 4 DW header)",
                    });
                }
                let len = if data {
                    plen as u32 / 4
                } else {
                    check_range(
                        "read length in DW",
                        m.read_len_dw as u64,
                        1,
                        1024,
                        "1..=1024",
                    )?;
                    m.read_len_dw as u32
                };
                check_range("PH", m.ph as u64, 0, 3, "0..=3")?;
                w[1] = req(m.requester_id, m.first_be, m.last_be);
                let lo = (m.address as u32 & !3) | m.ph as u32;
                if m.four_dw {
                    w[2] = (m.address >> 32) as u32;
                    w[3] = lo;
                } else {
                    w[2] = lo;
                }
                (ty, m.four_dw, len)
            }
            TlpHeader::Io(h) => {
                if h.write != (plen == 4) {
                    return Err(Error::Invalid {
                        what: "I/O request payload length",
                        value: plen as u64,
                        allowed: "4 bytes for IOWr, none for IORd",
                    });
                }
                w[1] = req(h.requester_id, h.first_be, ByteEnables::NONE);
                w[2] = h.address & !3;
                (0b00010, false, 1)
            }
            TlpHeader::Cfg(h) => {
                if h.write != (plen == 4) {
                    return Err(Error::Invalid {
                        what: "configuration request payload length",
                        value: plen as u64,
                        allowed: "4 bytes for CfgWr, none for CfgRd",
                    });
                }
                check_range("register number", h.register as u64, 0, 1023, "0..=1023")?;
                w[1] = req(h.requester_id, h.first_be, ByteEnables::NONE);
                w[2] = (h.target.raw() as u32) << 16 | (h.register as u32) << 2;
                (if h.type1 { 0b00101 } else { 0b00100 }, false, 1)
            }
            TlpHeader::Msg(h) => {
                w[1] = (h.requester_id.raw() as u32) << 16 | tag_lo | h.code.raw() as u32;
                let f = h.fields.0;
                w[2] = u32::from_be_bytes([f[0], f[1], f[2], f[3]]);
                w[3] = u32::from_be_bytes([f[4], f[5], f[6], f[7]]);
                (0b10000 | h.routing.raw(), true, plen as u32 / 4)
            }
            TlpHeader::Cpl(c) => {
                check_range("byte count", c.byte_count as u64, 1, 4096, "1..=4096")?;
                check_range("lower address", c.lower_address as u64, 0, 127, "0..=127")?;
                w[1] = (c.completer_id.raw() as u32) << 16
                    | (c.status.raw() as u32) << 13
                    | (c.bcm as u32) << 12
                    | (c.byte_count as u32 & 0xfff);
                w[2] = (c.requester_id.raw() as u32) << 16 | tag_lo | c.lower_address as u32;
                (
                    if c.locked { 0b01011 } else { 0b01010 },
                    false,
                    plen as u32 / 4,
                )
            }
        };
        let fmt = (four as u32) | ((plen != 0) as u32) << 1;
        w[0] = fmt << 29
            | (ty as u32) << 24
            | ((tag >> 9) & 1) << 23
            | (self.tc.value() as u32) << 20
            | ((tag >> 8) & 1) << 19
            | (self.attr.ido as u32) << 18
            | (self.ln as u32) << 17
            | (self.th as u32) << 16
            | (self.td as u32) << 15
            | (self.ep as u32) << 14
            | (self.attr.ro as u32) << 13
            | (self.attr.ns as u32) << 12
            | (self.at.raw() as u32) << 10
            | (len_dw & 0x3ff);
        Ok((w, if four { 16 } else { 12 }))
    }

    /// Writes the TLP into `buf`, which must hold at least [`buffer_len`](Self::buffer_len)
    /// bytes; returns the number of bytes written. Never panics.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let (words, hl) = self.header_words()?;
        let np = self.prefixes.len() * 4;
        let n = np + hl + self.payload.len() + if self.td { 4 } else { 0 };
        if buf.len() < n {
            return Err(Error::BufferTooSmall {
                needed: n,
                available: buf.len(),
            });
        }
        let buf = &mut buf[..n];
        for (i, pf) in self.prefixes.as_slice().iter().enumerate() {
            buf[i * 4..i * 4 + 4].copy_from_slice(&pf.to_bytes());
        }
        let mut hdr = [0u8; 16];
        for (i, w) in words.iter().enumerate() {
            hdr[i * 4..i * 4 + 4].copy_from_slice(&w.to_be_bytes());
        }
        buf[np..np + hl].copy_from_slice(&hdr[..hl]);
        buf[np + hl..np + hl + self.payload.len()].copy_from_slice(self.payload);
        if self.td {
            TlpPacket::new_unchecked(&mut *buf).fill_ecrc();
        }
        Ok(n)
    }

    /// Emits into a new vector (convenience for tools and tests; allocates).
    pub fn to_vec(&self) -> Result<Vec<u8>> {
        let mut v = vec![0u8; self.buffer_len()];
        self.emit(&mut v)?;
        Ok(v)
    }

    /// The prefixes as a slice.
    pub fn prefix_list(&self) -> &[Prefix] {
        self.prefixes.as_slice()
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> TlpPacket<&'a T> {
    /// The borrowed buffer with its full lifetime.
    pub fn into_inner_ref(&self) -> &'a T {
        let copy: TlpPacket<&'a T> = *self;
        copy.into_inner()
    }
}

fn check_range(what: &'static str, v: u64, lo: u64, hi: u64, allowed: &'static str) -> Result<()> {
    if v < lo || v > hi {
        return Err(Error::Invalid {
            what,
            value: v,
            allowed,
        });
    }
    Ok(())
}

#[cold]
#[inline(never)]
fn bad_payload(len: usize) -> Error {
    Error::Invalid {
        what: "payload length in bytes",
        value: len as u64,
        allowed: "a multiple of 4 from 4 to 4096",
    }
}

fn check_payload(data: &[u8]) -> Result<()> {
    if data.is_empty() || data.len() % 4 != 0 || data.len() > 4096 {
        return Err(bad_payload(data.len()));
    }
    Ok(())
}

fn reserved_len(length_raw: u16, h0: usize) -> Result<()> {
    if length_raw != 1 {
        return Err(Error::Field {
            field: "Length",
            value: length_raw as u64,
            offset: h0 + 2,
            reason: "I/O and configuration requests must have Length 1",
        });
    }
    Ok(())
}
