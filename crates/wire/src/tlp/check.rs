//! Receiver-side checks: which TLPs the spec calls *Malformed*.
//!
//! [`TlpRepr::parse`](super::TlpRepr::parse) rejects what cannot be decoded at all (truncated
//! input, reserved Fmt/Type, a payload that does not match Length). A receiver must also
//! reject TLPs that decode but break a transaction-layer rule; [`check_rx`] classifies
//! them so a simulated port can react like hardware (drop, log the header, set the
//! Malformed TLP bit of its AER status).
//!
//! ```
//! use pcielab_wire::tlp::check::{check_rx, RxRules, Rule};
//! use pcielab_wire::tlp::TlpRepr;
//! use pcielab_wire::{Bdf, Tag};
//! let data = [0u8; 512];
//! let mwr = TlpRepr::mem_write(Bdf::from_raw(0x100), Tag::new(0).unwrap(), 0x1000, &data).unwrap();
//! let bytes = mwr.to_vec().unwrap();
//! let err = check_rx(&bytes, &RxRules { mps: 256, ..RxRules::default() }).unwrap_err();
//! assert_eq!(err.rule, Rule::MaxPayloadSize);
//! ```

use super::{MemOp, MsgCode, TlpHeader, TlpPacket, TlpRepr};
use crate::dma::Shape;
use crate::error::Error;
use core::fmt;

/// The receiver's configuration that the rules depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxRules {
    /// Max_Payload_Size programmed in the receiver, in bytes.
    pub mps: u16,
    /// Check ECRC when TD is set.
    pub check_ecrc: bool,
    /// Apply the rules a receiver *may* check on memory requests: no 4 KiB crossing and
    /// the byte-enable rules (see [`Shape::check`]).
    pub check_request_rules: bool,
}

impl Default for RxRules {
    fn default() -> Self {
        RxRules {
            mps: 4096,
            check_ecrc: true,
            check_request_rules: true,
        }
    }
}

/// Which rule a TLP breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    /// It cannot be decoded (truncated, reserved Fmt/Type, payload vs Length).
    Undecodable,
    /// ECRC mismatch (an ECRC error rather than Malformed in AER terms).
    Ecrc,
    /// The payload is larger than Max_Payload_Size.
    MaxPayloadSize,
    /// A memory request crosses a 4 KiB boundary.
    Crosses4KiB,
    /// An illegal combination of byte enables.
    ByteEnables,
    /// TC, attributes, AT or Length break the rules for I/O and configuration requests.
    IoConfigRules,
    /// A message uses a routing or TC its code does not allow.
    MessageRules,
    /// An AtomicOp has an operand size or alignment the spec does not allow.
    AtomicOperand,
    /// More than four End-End TLP prefixes.
    TooManyPrefixes,
}

/// A Malformed TLP: the rule, the field, its value and the byte offset of the field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed {
    /// The rule broken.
    pub rule: Rule,
    /// Spec name of the field.
    pub field: &'static str,
    /// Its value.
    pub value: u64,
    /// Byte offset of the field in the TLP.
    pub offset: usize,
    /// The decode error, for [`Rule::Undecodable`] and [`Rule::Ecrc`].
    pub error: Option<Error>,
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.error {
            Some(e) => write!(f, "malformed TLP ({:?}): {e}", self.rule),
            None => write!(
                f,
                "malformed TLP ({:?}): {} = {:#x} at byte {}",
                self.rule, self.field, self.value, self.offset
            ),
        }
    }
}

impl std::error::Error for Malformed {}

fn bad(rule: Rule, field: &'static str, value: u64, offset: usize) -> Malformed {
    Malformed {
        rule,
        field,
        value,
        offset,
        error: None,
    }
}

/// Checks one received TLP against the transaction-layer receive rules.
pub fn check_rx(bytes: &[u8], rules: &RxRules) -> Result<(), Malformed> {
    let decode_err = |e: Error| {
        let (field, value, offset) = match e {
            Error::Field {
                field,
                value,
                offset,
                ..
            } => (field, value, offset),
            Error::Crc { found, offset, .. } => ("ECRC", found as u64, offset),
            _ => ("Length", bytes.len() as u64, 0),
        };
        Malformed {
            rule: if matches!(e, Error::Crc { .. }) {
                Rule::Ecrc
            } else {
                Rule::Undecodable
            },
            field,
            value,
            offset,
            error: Some(e),
        }
    };
    let pkt = TlpPacket::new_checked(bytes).map_err(decode_err)?;
    let repr = TlpRepr::parse_with(
        &pkt,
        super::ParseOptions {
            check_ecrc: rules.check_ecrc,
        },
    )
    .map_err(decode_err)?;
    let h0 = pkt.header_offset();
    let e2e = repr
        .prefix_list()
        .iter()
        .filter(|p| p.kind().is_end_to_end())
        .count();
    if e2e > 4 {
        return Err(bad(
            Rule::TooManyPrefixes,
            "End-End TLP Prefix count",
            e2e as u64,
            0,
        ));
    }
    let kind = repr.kind();
    let len_bytes = repr.length_dw() as u64 * 4;
    if kind.has_data() && repr.payload.len() > rules.mps as usize {
        return Err(bad(
            Rule::MaxPayloadSize,
            "Length",
            repr.length_dw() as u64,
            h0 + 2,
        ));
    }
    match repr.header {
        TlpHeader::Mem(m) => {
            let addr_off = h0 + 8;
            match m.op {
                MemOp::FetchAdd | MemOp::Swap | MemOp::Cas => {
                    let n = repr.length_dw();
                    let ok = match m.op {
                        MemOp::Cas => matches!(n, 2 | 4 | 8),
                        _ => matches!(n, 1 | 2),
                    };
                    if !ok {
                        return Err(bad(Rule::AtomicOperand, "Length", n as u64, h0 + 2));
                    }
                    // Operand size: the whole payload for FetchAdd/Swap, half for CAS.
                    let operand = if m.op == MemOp::Cas {
                        len_bytes / 2
                    } else {
                        len_bytes
                    };
                    if m.address % operand != 0 {
                        return Err(bad(Rule::AtomicOperand, "Address", m.address, addr_off));
                    }
                }
                _ => {
                    // Reads with TH set carry the Steering Tag in the byte-enable byte.
                    let st_in_be = repr.th && !kind.has_data();
                    if rules.check_request_rules && !st_in_be {
                        let shape = Shape {
                            length_dw: repr.length_dw(),
                            first_be: m.first_be,
                            last_be: m.last_be,
                        };
                        if let Err(Error::Field {
                            field,
                            value,
                            offset,
                            ..
                        }) = shape.check(m.address)
                        {
                            let rule = if field == "Address" {
                                Rule::Crosses4KiB
                            } else {
                                Rule::ByteEnables
                            };
                            return Err(bad(rule, field, value, h0 + offset));
                        }
                    }
                }
            }
        }
        TlpHeader::Io(_) | TlpHeader::Cfg(_) => {
            if repr.tc.value() != 0 {
                return Err(bad(
                    Rule::IoConfigRules,
                    "TC",
                    repr.tc.value() as u64,
                    h0 + 1,
                ));
            }
            if repr.attr.ro || repr.attr.ns {
                return Err(bad(
                    Rule::IoConfigRules,
                    "Attr",
                    (repr.attr.ro as u64) << 1 | repr.attr.ns as u64,
                    h0 + 2,
                ));
            }
            if repr.at.raw() != 0 {
                return Err(bad(Rule::IoConfigRules, "AT", repr.at.raw() as u64, h0 + 2));
            }
            if pkt.last_be().bits() != 0 {
                return Err(bad(
                    Rule::IoConfigRules,
                    "Last DW BE",
                    pkt.last_be().bits() as u64,
                    h0 + 7,
                ));
            }
        }
        TlpHeader::Msg(h) => {
            if let Some(want) = h.code.required_routing() {
                if want != h.routing {
                    return Err(bad(
                        Rule::MessageRules,
                        "Message routing",
                        h.routing.raw() as u64,
                        h0,
                    ));
                }
            }
            let tc0_only = !matches!(
                h.code,
                MsgCode::VendorDefinedType0 | MsgCode::VendorDefinedType1 | MsgCode::Unknown(_)
            );
            if tc0_only && repr.tc.value() != 0 {
                return Err(bad(
                    Rule::MessageRules,
                    "TC",
                    repr.tc.value() as u64,
                    h0 + 1,
                ));
            }
        }
        TlpHeader::Cpl(_) => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tlp::{CfgHeader, MemHeader, MsgFields, MsgHeader, MsgRouting};
    use crate::{Bdf, ByteEnables, Tag, TrafficClass};

    fn rid() -> Bdf {
        Bdf::from_raw(0x0100)
    }

    fn mem(op: MemOp, addr: u64, first: u8, last: u8, len: u16) -> MemHeader {
        MemHeader {
            op,
            requester_id: rid(),
            tag: Tag::new(1).unwrap(),
            first_be: ByteEnables::new(first).unwrap(),
            last_be: ByteEnables::new(last).unwrap(),
            address: addr,
            four_dw: false,
            ph: 0,
            read_len_dw: len,
        }
    }

    fn rule_of(t: &TlpRepr<'_>, rules: &RxRules) -> Option<Rule> {
        check_rx(&t.to_vec().unwrap(), rules).err().map(|m| m.rule)
    }

    #[test]
    fn good_requests_pass() {
        let r = TlpRepr::with_header(TlpHeader::Mem(mem(MemOp::Read, 0x1000, 0xf, 0xf, 16)), &[]);
        assert_eq!(rule_of(&r, &RxRules::default()), None);
        // Zero-length read.
        let r = TlpRepr::with_header(TlpHeader::Mem(mem(MemOp::Read, 0x1000, 0, 0, 1)), &[]);
        assert_eq!(rule_of(&r, &RxRules::default()), None);
        // QW-aligned 2 DW with non-contiguous BEs.
        let r = TlpRepr::with_header(
            TlpHeader::Mem(mem(MemOp::Read, 0x1008, 0b0101, 0b1010, 2)),
            &[],
        );
        assert_eq!(rule_of(&r, &RxRules::default()), None);
    }

    #[test]
    fn each_rule_fires() {
        let d = RxRules::default();
        let r = TlpRepr::with_header(TlpHeader::Mem(mem(MemOp::Read, 0xff8, 0xf, 0xf, 4)), &[]);
        assert_eq!(rule_of(&r, &d), Some(Rule::Crosses4KiB));
        let r = TlpRepr::with_header(TlpHeader::Mem(mem(MemOp::Read, 0x1000, 0xf, 0xf, 1)), &[]);
        assert_eq!(rule_of(&r, &d), Some(Rule::ByteEnables));
        let r = TlpRepr::with_header(
            TlpHeader::Mem(mem(MemOp::Read, 0x1000, 0b0101, 0xf, 4)),
            &[],
        );
        assert_eq!(rule_of(&r, &d), Some(Rule::ByteEnables));
        let r = TlpRepr::with_header(
            TlpHeader::Mem(mem(MemOp::Read, 0x1004, 0b0101, 0b0011, 2)),
            &[],
        );
        assert_eq!(rule_of(&r, &d), Some(Rule::ByteEnables));
        let r = TlpRepr::with_header(TlpHeader::Mem(mem(MemOp::Read, 0x1000, 0xf, 0x0, 3)), &[]);
        assert_eq!(rule_of(&r, &d), Some(Rule::ByteEnables));
        let data = [0u8; 12];
        let r = TlpRepr::with_header(
            TlpHeader::Mem(mem(MemOp::FetchAdd, 0x1000, 0xf, 0xf, 0)),
            &data,
        );
        assert_eq!(rule_of(&r, &d), Some(Rule::AtomicOperand));
        let data = [0u8; 8];
        let r = TlpRepr::with_header(TlpHeader::Mem(mem(MemOp::Swap, 0x1004, 0xf, 0xf, 0)), &data);
        assert_eq!(rule_of(&r, &d), Some(Rule::AtomicOperand));
        let data = [0u8; 16];
        let r = TlpRepr::with_header(TlpHeader::Mem(mem(MemOp::Cas, 0x1008, 0xf, 0xf, 0)), &data);
        assert_eq!(rule_of(&r, &d), None);
        let mut cfg = TlpRepr::with_header(
            TlpHeader::Cfg(CfgHeader {
                write: false,
                type1: false,
                requester_id: rid(),
                tag: Tag::new(0).unwrap(),
                first_be: ByteEnables::ALL,
                target: Bdf::from_raw(0x0200),
                register: 4,
            }),
            &[],
        );
        assert_eq!(rule_of(&cfg, &d), None);
        cfg.tc = TrafficClass::new(1).unwrap();
        assert_eq!(rule_of(&cfg, &d), Some(Rule::IoConfigRules));
        let msg = TlpRepr::with_header(
            TlpHeader::Msg(MsgHeader {
                requester_id: rid(),
                tag: Tag::new(0).unwrap(),
                code: MsgCode::ErrFatal,
                routing: MsgRouting::Broadcast,
                fields: MsgFields([0; 8]),
            }),
            &[],
        );
        assert_eq!(rule_of(&msg, &d), Some(Rule::MessageRules));
        let mut bytes = TlpRepr::mem_write(rid(), Tag::new(0).unwrap(), 0, &[1, 2, 3, 4]).unwrap();
        bytes.td = true;
        let mut v = bytes.to_vec().unwrap();
        assert!(check_rx(&v, &d).is_ok());
        v[12] ^= 1;
        assert_eq!(check_rx(&v, &d).unwrap_err().rule, Rule::Ecrc);
        assert_eq!(check_rx(&v[..10], &d).unwrap_err().rule, Rule::Undecodable);
    }
}
