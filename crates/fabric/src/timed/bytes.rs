//! A TLP's bytes as they travel: for the trace, the AER Header Log and ECRC.

use super::engine::Engine;
use super::regs::*;
use super::tlp::*;
use pcielab_wire::tlp::TlpRepr;
use pcielab_wire::Tag;

impl Engine {
    /// The header of TLP `id` as it travels (3 or 4 DWs; a 3-DW header is followed by
    /// zeros), for the AER Header Log.
    #[cold]
    pub(crate) fn tlp_header(&self, id: u32) -> LoggedHeader {
        // (A burst's first TLP, in burst mode.)
        let raw = self.piece_bytes(id).swap_remove(0);
        let t = &self.pool.tlps[id as usize];
        // A raw TLP's prefixes (Fmt 100b) come first: the first End-End one is logged.
        let raw_prefixes = if t.kind == Kind::Raw {
            super::tlp::prefix_dws(&raw)
        } else {
            0
        };
        let (prefix, raw) = if raw_prefixes > 0 {
            let first_e2e = raw
                .chunks_exact(4)
                .take(raw_prefixes)
                .find(|p| p[0] & 0x10 != 0)
                .map(|p| [p[0], p[1], p[2], p[3]]);
            (first_e2e, &raw[raw_prefixes * 4..])
        } else if t.pasid != NONE && raw.len() >= 4 {
            (Some([raw[0], raw[1], raw[2], raw[3]]), &raw[4..])
        } else {
            (None, &raw[..])
        };
        // Fmt bit 0 (byte 0, bit 5): a 4-DW header.
        let n = if raw.first().is_some_and(|b| b & 0x20 != 0) {
            16
        } else {
            12
        };
        let mut header = [0u8; 16];
        let n = n.min(raw.len());
        header[..n].copy_from_slice(&raw[..n]);
        LoggedHeader { header, prefix }
    }

    /// Raw bytes of a TLP for the trace.
    pub(crate) fn tlp_bytes_raw(&self, id: u32) -> Vec<u8> {
        Self::tlp_bytes_of(&self.pool.tlps[id as usize], self.payload(id))
    }

    /// Raw bytes of TLP `t` carrying `payload` (one TLP: `t.pieces` is not looked at).
    pub(crate) fn tlp_bytes_of(t: &Tlp, payload: &[u8]) -> Vec<u8> {
        let tag = Tag::new(t.tag & 0x3ff).unwrap_or_else(|_| Tag::new(0).expect("tag 0"));
        // The payload as it travels: whole DWs, the first byte at `addr & 3`.
        let front = (t.addr & 3) as usize;
        let dws = t.dw_span() as usize;
        let mut data = vec![0u8; if payload.is_empty() { 0 } else { dws * 4 }];
        if !data.is_empty() {
            let n = payload.len().min(data.len() - front);
            data[front..front + n].copy_from_slice(&payload[..n]);
        }
        // A switch flipped the lowest bit of the first payload byte after the digest
        // was computed: the digest is that of the original data.
        let corrupted = t.td && t.corrupted && !data.is_empty();
        if corrupted {
            data[front] ^= 1;
        }
        let shape = pcielab_wire::request_shape(t.addr, t.len.clamp(1, 4096)).ok();
        let set_be = |r: &mut TlpRepr<'_>| {
            if let (Some(sh), pcielab_wire::tlp::TlpHeader::Mem(h)) = (shape, &mut r.header) {
                h.first_be = sh.first_be;
                h.last_be = sh.last_be;
            }
        };
        let r = match t.kind {
            Kind::MRd => TlpRepr::mem_read(t.requester, tag, t.addr, dws.clamp(1, 1024) as u16)
                .map(|mut r| {
                    set_be(&mut r);
                    r
                }),
            Kind::TransReq => TlpRepr::mem_read(t.requester, tag, t.addr, 2).map(|mut r| {
                r.at = pcielab_wire::AddressType::TranslationRequest;
                r
            }),
            Kind::AtsInv | Kind::AtsInvCpl | Kind::PageReq | Kind::PrgResp => {
                Ok(super::tlp::message_repr(t, tag, &data))
            }
            // Returned as they are above.
            Kind::Raw => return payload.to_vec(),
            Kind::Atomic => Ok(super::tlp::request_repr(t, tag, &data)),
            Kind::MWr => TlpRepr::mem_write(t.requester, tag, t.addr, &data).map(|mut r| {
                set_be(&mut r);
                r
            }),
            Kind::Cpl | Kind::CplD => TlpRepr::completion(
                t.completer,
                t.requester,
                tag,
                t.status(),
                t.byte_count().max(1),
                (t.addr & 0x7f) as u8,
                &data,
            ),
            Kind::IoRd | Kind::IoWr => {
                let be = shape.map_or(0xf, |sh| sh.first_be.bits());
                Ok(TlpRepr::with_header(
                    pcielab_wire::tlp::TlpHeader::Io(pcielab_wire::tlp::IoHeader {
                        write: t.kind == Kind::IoWr,
                        requester_id: t.requester,
                        tag,
                        first_be: pcielab_wire::ByteEnables::from_bits_truncate(be),
                        address: t.addr as u32 & !3,
                    }),
                    if t.kind == Kind::IoWr { &data[..] } else { &[] },
                ))
            }
            Kind::CfgRd | Kind::CfgWr => {
                let type0 = matches!(
                    t.dest,
                    Dest::Config {
                        type0_last: true,
                        ..
                    }
                ) && t.at as usize + 1 >= t.hops as usize;
                Ok(TlpRepr::with_header(
                    pcielab_wire::tlp::TlpHeader::Cfg(pcielab_wire::tlp::CfgHeader {
                        write: t.kind == Kind::CfgWr,
                        type1: !type0,
                        requester_id: t.requester,
                        tag,
                        first_be: pcielab_wire::ByteEnables::from_bits_truncate(t.first_be()),
                        target: t.completer,
                        register: (t.addr as u16 & 0xffc) >> 2,
                    }),
                    if t.kind == Kind::CfgWr {
                        &data[..]
                    } else {
                        &[]
                    },
                ))
            }
            Kind::Intx | Kind::ErrMsg | Kind::PmMsg | Kind::PmHop => Ok(TlpRepr::with_header(
                pcielab_wire::tlp::TlpHeader::Msg(pcielab_wire::tlp::MsgHeader {
                    requester_id: t.requester,
                    tag,
                    code: pcielab_wire::tlp::MsgCode::from_raw(t.msg_code()),
                    routing: match (t.kind, t.msg_code()) {
                        (Kind::Intx, _) => pcielab_wire::tlp::MsgRouting::Local,
                        (Kind::PmHop, super::tlp::MSG_LTR) => pcielab_wire::tlp::MsgRouting::Local,
                        (Kind::PmHop, MSG_PME_TURN_OFF) => pcielab_wire::tlp::MsgRouting::Broadcast,
                        (Kind::PmHop, _) => pcielab_wire::tlp::MsgRouting::Gathered,
                        _ => pcielab_wire::tlp::MsgRouting::ToRc,
                    },
                    fields: pcielab_wire::tlp::MsgFields(
                        if let Detail::Ltr {
                            snoop: s,
                            no_snoop: n,
                        } = t.detail
                        {
                            // Bytes 12–13 No-Snoop Latency, 14–15 Snoop Latency.
                            let mut f = [0u8; 8];
                            f[4..6].copy_from_slice(&n.to_be_bytes());
                            f[6..8].copy_from_slice(&s.to_be_bytes());
                            f
                        } else {
                            [0; 8]
                        },
                    ),
                }),
                &[],
            )),
            Kind::VendorMsg => {
                let by_id = t.vendor_routing() == 2;
                let mut f = [0u8; 8];
                if by_id {
                    f[0..2].copy_from_slice(&t.completer.raw().to_be_bytes());
                }
                let (vendor_id, vendor_data) = t.vendor_fields();
                f[2..4].copy_from_slice(&vendor_id.to_be_bytes());
                f[4..8].copy_from_slice(&vendor_data.to_be_bytes());
                Ok(TlpRepr::with_header(
                    pcielab_wire::tlp::TlpHeader::Msg(pcielab_wire::tlp::MsgHeader {
                        requester_id: t.requester,
                        tag,
                        code: pcielab_wire::tlp::MsgCode::from_raw(t.msg_code()),
                        routing: pcielab_wire::tlp::MsgRouting::from_raw(t.vendor_routing())
                            .unwrap_or(pcielab_wire::tlp::MsgRouting::ToRc),
                        fields: pcielab_wire::tlp::MsgFields(f),
                    }),
                    &data,
                ))
            }
        };
        // The PASID prefix DW comes first.
        let pre = if t.pasid != NONE { 4 } else { 0 };
        r.and_then(|mut r| {
            r.ep = t.poisoned;
            r.td = t.td;
            if t.addr_type == 2 {
                r.at = pcielab_wire::AddressType::Translated;
            }
            if t.pasid != NONE {
                r.prefixes = pcielab_wire::tlp::Prefixes::from_slice(&[
                    pcielab_wire::tlp::Prefix::new_pasid(t.pasid, false, false),
                ])?;
            }
            r.to_vec()
        })
        .map(|mut out| {
            if corrupted {
                // Now the bit flips, after the digest of the original was computed.
                let hdr = if out[pre] & 0x20 != 0 { 16 } else { 12 };
                if let Some(b) = out.get_mut(pre + hdr + front) {
                    *b ^= 1;
                }
            }
            out
        })
        .unwrap_or_default()
    }
}
