//! Transaction Layer Packets: every TLP kind of the non-Flit PCIe Base Specification.
//!
//! Two levels, as in smoltcp:
//! * [`TlpPacket`] — a zero-copy view over bytes, with getters (and setters on mutable
//!   buffers) for every field; [`TlpPacket::new_checked`] validates untrusted input;
//! * [`TlpRepr`] — a typed, `Copy` description that borrows only its payload, with
//!   [`TlpRepr::parse`], [`TlpRepr::emit`] and [`TlpRepr::buffer_len`].
//!
//! Receiver-side rules that make a TLP *Malformed* (as opposed to undecodable) live in
//! [`check`]. Text output (`Display`) is one tcpdump-style line.
//!
//! # Contract
//! * `TlpPacket::new_checked` succeeds ⇒ no getter of that packet panics.
//! * `TlpRepr::parse` never panics; it fails with an [`Error`](crate::Error) naming the
//!   field, value and byte offset, or the length that was needed.
//! * `TlpRepr::emit` never panics; on a buffer of at least `buffer_len()` bytes it succeeds
//!   for every representation that [`TlpRepr::validate`] accepts.
//! * `parse(emit(r)) == r` for every valid `r`, and `emit(parse(b)) == b` for every `b`
//!   that parses, except that reserved bits are written as zero.
//!
//! ```
//! use pcielab_wire::tlp::{TlpRepr, TlpKind};
//! // A 3 DW MRd of 16 DW at 0x1000 from 01:00.0, tag 7.
//! let bytes = [0x00, 0x00, 0x00, 0x10, 0x01, 0x00, 0x07, 0xff, 0x00, 0x00, 0x10, 0x00];
//! let tlp = TlpRepr::parse_bytes(&bytes).unwrap();
//! assert_eq!(tlp.kind(), TlpKind::MRd);
//! assert_eq!(tlp.length_dw(), 16);
//! assert_eq!(tlp.to_string(), "MRd 3DW 01:00.0 tag 7 addr 0x1000 len 16DW BE f/f TC0");
//! ```

pub mod check;
mod dma_glue;
mod kind;
mod msg;
mod packet;
mod prefix;
mod repr;

pub use dma_glue::chunk_payload;
pub use kind::{FcClass, Fmt, Routing, TlpKind};
pub use msg::{MsgCode, MsgFields, MsgRouting};
pub use packet::TlpPacket;
pub use prefix::{Prefix, PrefixKind, Prefixes, MAX_PREFIXES};
pub use repr::{
    CfgHeader, CplHeader, IoHeader, MemHeader, MemOp, MsgHeader, ParseOptions, TlpHeader, TlpRepr,
};

use core::fmt;

/// Writes an address as hexadecimal with `_` every four digits (`0x1_2345_6780`).
pub fn fmt_addr(f: &mut impl fmt::Write, addr: u64) -> fmt::Result {
    let digits = if addr == 0 {
        1
    } else {
        (64 - addr.leading_zeros()).div_ceil(4)
    };
    f.write_str("0x")?;
    for i in (0..digits).rev() {
        let d = (addr >> (i * 4)) & 0xf;
        f.write_char(char::from_digit(d as u32, 16).unwrap_or('?'))?;
        if i != 0 && i % 4 == 0 {
            f.write_char('_')?;
        }
    }
    Ok(())
}

impl fmt::Display for TlpRepr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = self.kind();
        match self.header {
            TlpHeader::Mem(m) => {
                write!(
                    f,
                    "{} {} {} tag {} addr ",
                    kind,
                    if m.four_dw { "4DW" } else { "3DW" },
                    m.requester_id,
                    m.tag
                )?;
                fmt_addr(f, m.address)?;
                write!(
                    f,
                    " len {}DW BE {}/{}",
                    self.length_dw(),
                    m.first_be,
                    m.last_be
                )?;
                if self.th {
                    write!(f, " TH PH {}", m.ph)?;
                }
            }
            TlpHeader::Io(h) => {
                write!(f, "{} {} tag {} addr ", kind, h.requester_id, h.tag)?;
                fmt_addr(f, h.address as u64)?;
                write!(f, " BE {}", h.first_be)?;
            }
            TlpHeader::Cfg(h) => {
                write!(
                    f,
                    "{} {} tag {} -> {} reg {} ({:#05x}) BE {}",
                    kind,
                    h.requester_id,
                    h.tag,
                    h.target,
                    h.register,
                    h.register as u32 * 4,
                    h.first_be
                )?;
            }
            TlpHeader::Msg(h) => {
                write!(
                    f,
                    "{} {} {} {} tag {}",
                    kind,
                    h.routing.name(),
                    h.code,
                    h.requester_id,
                    h.tag
                )?;
                match h.routing {
                    MsgRouting::ByAddress => {
                        f.write_str(" addr ")?;
                        fmt_addr(f, h.fields.u64())?;
                    }
                    MsgRouting::ById => write!(f, " -> {}", h.fields.destination_id())?,
                    _ => {}
                }
                if matches!(
                    h.code,
                    MsgCode::VendorDefinedType0 | MsgCode::VendorDefinedType1
                ) {
                    write!(f, " vendor {:#06x}", h.fields.vendor_id())?;
                }
                if !self.payload.is_empty() {
                    write!(f, " len {}DW", self.length_dw())?;
                }
            }
            TlpHeader::Cpl(c) => {
                write!(
                    f,
                    "{} {} -> {} tag {} {} bc {} la {:#04x}",
                    kind,
                    c.completer_id,
                    c.requester_id,
                    c.tag,
                    c.status,
                    c.byte_count,
                    c.lower_address
                )?;
                if c.bcm {
                    f.write_str(" BCM")?;
                }
                if !self.payload.is_empty() {
                    write!(f, " len {}DW", self.length_dw())?;
                }
            }
        }
        write!(f, " TC{}", self.tc.value())?;
        if self.attr.ro {
            f.write_str(" RO")?;
        }
        if self.attr.ns {
            f.write_str(" NS")?;
        }
        if self.attr.ido {
            f.write_str(" IDO")?;
        }
        if self.ln {
            f.write_str(" LN")?;
        }
        if self.ep {
            f.write_str(" EP")?;
        }
        if self.td {
            f.write_str(" TD")?;
        }
        if self.at != crate::types::AddressType::Untranslated {
            write!(f, " AT{}", self.at.raw())?;
        }
        for p in self.prefixes.as_slice() {
            write!(f, " [{p}]")?;
        }
        Ok(())
    }
}
