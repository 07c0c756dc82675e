//! Raw TLPs: bytes a device model built itself ([`EpCx::send_raw`]).
//!
//! A real device's transaction layer can get a TLP wrong; the port at the other end
//! of its link is the first receiver and checks it (PCIe Base Spec 2.3.1: Malformed
//! TLPs; 2.2.8: messages; 6.2.7: error classification). Here the device's bytes cross
//! its link and that port:
//!
//! * finds them **Malformed** (`wire::tlp::check::check_rx` with the fabric's
//!   Max_Payload_Size and the request rules): it discards the TLP and signals a
//!   Malformed TLP (uncorrectable, fatal by default) with the header in its Header Log
//!   and the first End-End prefix in its TLP Prefix Log;
//! * or the TLP is valid and one the fabric carries — a memory read or write
//!   (untranslated or translated, with a PASID prefix or not), an AtomicOp, a
//!   completion, a vendor-defined message: it goes on as one of the fabric's own TLPs
//!   with the
//!   device's fields (requester ID, tag, address and byte enables, EP, TD; a digest
//!   that does not match marks the TLP as corrupted, for the ECRC check where it
//!   ends);
//! * or it is valid but the fabric does not carry it (I/O, configuration and locked
//!   requests from below, other messages, writes with non-contiguous byte enables, a
//!   TLP it cannot route): the port answers a non-posted request with
//!   Unsupported Request status and logs the Unsupported Request (advisory, as a
//!   completer does); a posted one is dropped. Either way the simulator records why.
//!
//! Completions of a read sent this way go to the device's
//! [`Endpoint::raw_completion`] (unless its DMA engine holds the tag).
//!
//! [`EpCx::send_raw`]: super::EpCx::send_raw
//! [`Endpoint::raw_completion`]: super::Endpoint::raw_completion

use super::endpoint::{VdmRoute, VendorMessage};
use super::engine::Engine;
use super::fault::FaultKind;
use super::node::state::NodeKind;
use super::packed::PackedEv;
use super::regs::{AER_MALFORMED, AER_UNSUPPORTED};
use super::tlp::{AtomicKind, Detail};
use super::tlp::{Dest, Kind, Tlp, MAX_PATH, NONE, NP, P};
use crate::functional::{FnId, Origin};
use pcielab_sim::{Context, SimDuration};
use pcielab_wire::dma::Shape;
use pcielab_wire::tlp::check::{check_rx, RxRules};
use pcielab_wire::tlp::{MemOp, MsgCode, MsgRouting, ParseOptions, TlpHeader, TlpPacket, TlpRepr};
use pcielab_wire::{AddressType, Bdf, CplStatus};

/// The longest raw TLP sent: four prefixes, a 4-DW header, 4096 bytes of data and a
/// digest.
pub(crate) const MAX_RAW_TLP: usize = 16 + 16 + 4096 + 4;

/// `b` decoded, without checking its digest.
fn parse(b: &[u8]) -> pcielab_wire::Result<TlpRepr<'_>> {
    let opts = ParseOptions { check_ecrc: false };
    TlpPacket::new_checked(b).and_then(|p| TlpRepr::parse_with(&p, opts))
}

/// What a valid raw TLP becomes.
enum Carried {
    /// One of the fabric's TLPs, routed towards this ID (by ID, or by address).
    Tlp(Tlp, Bdf),
    /// A vendor-defined message from this requester.
    Vendor(Bdf, VendorMessage),
    /// Not carried, and why.
    No(String),
}

impl Engine {
    /// The receive rules of the port at the other end of a device's link.
    fn raw_rules(&self) -> RxRules {
        RxRules {
            mps: self.cfg.mps,
            check_ecrc: false,
            check_request_rules: true,
        }
    }

    /// Device `node` sends `bytes` on its link (see the module notes).
    pub(crate) fn send_raw(&mut self, node: u32, bytes: Vec<u8>, cx: &mut Context<'_, PackedEv>) {
        let name = self.nodes[node as usize].name.clone();
        let (Some(f), NodeKind::Ep(ep)) = (
            self.nodes[node as usize].func,
            &self.nodes[node as usize].kind,
        ) else {
            return;
        };
        let up = ep.up_dir;
        if bytes.len() < 12 || bytes.len() > MAX_RAW_TLP {
            self.fault(
                FaultKind::RawTlp,
                format!(
                    "{name}: a raw TLP of {} bytes: a TLP has 12 to {MAX_RAW_TLP} bytes; not sent",
                    bytes.len()
                ),
            );
            return;
        }
        let why = match check_rx(&bytes, &self.raw_rules()) {
            Err(_) => None,
            Ok(()) => match self.raw_carried(&bytes) {
                Carried::Tlp(t, to) => match self.route(Origin::Function(f), t.kind, t.addr, to) {
                    Ok(route) => {
                        self.launch_raw(node, t, route, cx);
                        return;
                    }
                    Err(e) => Some(format!("not routable: {e}")),
                },
                Carried::Vendor(requester, msg) => {
                    match self.send_vendor(
                        Origin::Function(f),
                        requester,
                        &msg,
                        SimDuration::ZERO,
                        cx,
                    ) {
                        Ok(()) => return,
                        Err(e) => Some(e),
                    }
                }
                Carried::No(why) => Some(why),
            },
        };
        let len = bytes.len() as u32;
        // All its bytes take posted data credits: more than the port's buffer holds
        // could never be sent (a real transmitter would wait for ever).
        let need = len.div_ceil(16);
        let buf = self.dirs[up as usize].rx_buf.data[P];
        if buf != 0 && need > buf {
            self.fault(FaultKind::RawTlp, format!(
                "{name}: a raw TLP of {len} bytes needs {need} posted data credits; the port above holds {buf}: never sent"
            ));
            return;
        }
        // Malformed or not carried: the bytes cross the link and the port handles them
        // (it answers a valid non-posted request: the device hears of that answer).
        if why.is_some() {
            if let Ok(r) = parse(&bytes) {
                if r.kind().is_non_posted() {
                    self.expect_raw_completion(node, r.tag().value(), 4);
                }
            }
        }
        let data = self.pool.alloc_payload(&bytes);
        let to = self.dirs[up as usize].to;
        let mut path = [0u16; MAX_PATH];
        path[0] = up;
        let t = Tlp {
            data,
            path,
            hops: 1,
            dest: Dest::Hop { node: to },
            ..Tlp::new(Kind::Raw, self.ep_bdf(node), 0, len)
        };
        let id = self.launch(t, (path, 1, Dest::Hop { node: to }), cx);
        match why {
            Some(w) => {
                self.raw_why.insert(id, w);
            }
            None => {
                self.raw_why.remove(&id);
            }
        }
    }

    /// Sends a carried raw TLP: a read's tag is remembered (its completions go to the
    /// device model), a completion for a device's DMA engine gets the full address
    /// its Lower Address stands for.
    fn launch_raw(
        &mut self,
        node: u32,
        mut t: Tlp,
        route: super::tlp::Route,
        cx: &mut Context<'_, PackedEv>,
    ) {
        match (t.kind, route.2) {
            (Kind::MRd, _) => self.expect_raw_completion(node, t.tag, t.len),
            (Kind::Atomic, _) => {
                let size = super::tlp::operand_size(t.atomic_kind(), t.len as u64);
                self.expect_raw_completion(node, t.tag, size as u32);
            }
            (Kind::Cpl | Kind::CplD, Dest::Dma { node: to }) => {
                if let NodeKind::Ep(ep) = &self.nodes[to as usize].kind {
                    if let Some(Some((_, _, _, got, wire))) = ep.tag_map.get(t.tag as usize) {
                        let next = wire + *got as u64;
                        t.addr = (next & !0x7f) | (t.addr & 0x7f);
                    }
                }
            }
            _ => {}
        }
        self.launch(t, route, cx);
    }

    /// Device `node` sent a raw non-posted request with `tag` for `len` bytes: its
    /// completions go to the device model, unless the DMA engine holds the tag.
    fn expect_raw_completion(&mut self, node: u32, tag: u16, len: u32) {
        if let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind {
            let held = ep.tag_map.get(tag as usize).is_some_and(|e| e.is_some());
            if !held {
                ep.raw_reads.insert(tag, len);
            }
        }
    }

    /// What valid raw bytes become.
    fn raw_carried(&mut self, bytes: &[u8]) -> Carried {
        let Ok(r) = parse(bytes) else {
            return Carried::No("cannot be decoded".into());
        };
        let bad_digest = r.td
            && TlpPacket::new_checked(bytes)
                .map(|p| p.check_ecrc().is_err())
                .unwrap_or(true);
        let pasid = r
            .prefix_list()
            .iter()
            .find_map(|p| p.pasid())
            .map_or(NONE, |(p, _, _)| p);
        // A memory request of `kind` for `len` bytes at `addr` with the device's fields.
        let request = |kind, h: &pcielab_wire::tlp::MemHeader, addr, len| Tlp {
            tag: h.tag.value(),
            poisoned: r.ep,
            td: r.td,
            corrupted: bad_digest,
            addr_type: if r.at == AddressType::Translated {
                2
            } else {
                0
            },
            pasid,
            ..Tlp::new(kind, h.requester_id, addr, len)
        };
        match r.header {
            TlpHeader::Mem(h) => {
                let write = match h.op {
                    MemOp::Read => false,
                    MemOp::Write => true,
                    MemOp::ReadLocked => {
                        return Carried::No(
                            "MRdLk requests are not carried (only the root complex locks)".into(),
                        )
                    }
                    op => {
                        // An AtomicOp: the operands are the payload (check_rx checked
                        // their size and alignment).
                        let code = match op {
                            MemOp::FetchAdd => AtomicKind::FetchAdd,
                            MemOp::Swap => AtomicKind::Swap,
                            _ => AtomicKind::Cas,
                        };
                        let n = r.payload.len() as u32;
                        let t = Tlp {
                            detail: Detail::Atomic(code),
                            data: self.pool.alloc_payload(r.payload),
                            ..request(Kind::Atomic, &h, h.address, n)
                        };
                        return Carried::Tlp(t, h.requester_id);
                    }
                };
                if r.at == AddressType::TranslationRequest {
                    return Carried::No("ATS Translation Requests sent raw are not carried".into());
                }
                let shape = Shape {
                    length_dw: r.length_dw(),
                    first_be: h.first_be,
                    last_be: h.last_be,
                };
                let contiguous = if shape.length_dw == 1 {
                    h.first_be.is_contiguous()
                } else {
                    h.first_be.last() == Some(3)
                        && h.last_be.first() == Some(0)
                        && h.first_be.is_contiguous()
                        && h.last_be.is_contiguous()
                };
                if write && (!contiguous || h.first_be.bits() == 0) {
                    return Carried::No(format!(
                        "a memory write with byte enables {:04b}/{:04b}: the simulator writes contiguous bytes only",
                        h.first_be.bits(),
                        h.last_be.bits()
                    ));
                }
                let front = shape.first_byte();
                let len = shape.byte_count();
                let kind = if write { Kind::MWr } else { Kind::MRd };
                let mut t = request(kind, &h, h.address + front as u64, len);
                if write {
                    let s = front as usize;
                    let e = (s + len as usize).min(r.payload.len());
                    t.data = self.pool.alloc_payload(&r.payload[s.min(e)..e]);
                }
                Carried::Tlp(t, h.requester_id)
            }
            TlpHeader::Cpl(h) => {
                let front = (h.lower_address & 3) as usize;
                let bc = if h.byte_count == 0 {
                    4096
                } else {
                    h.byte_count as u32
                };
                let len = bc.min(r.payload.len().saturating_sub(front) as u32);
                let kind = if r.payload.is_empty() {
                    Kind::Cpl
                } else {
                    Kind::CplD
                };
                let mut t = Tlp::new(kind, h.requester_id, h.lower_address as u64, len);
                t.completer = h.completer_id;
                t.tag = h.tag.value();
                t.detail = Detail::Completion {
                    byte_count: h.byte_count,
                    status: h.status,
                };
                t.poisoned = r.ep;
                t.td = r.td;
                t.corrupted = bad_digest;
                t.dest = Dest::Rc;
                if kind == Kind::CplD {
                    t.data = self
                        .pool
                        .alloc_payload(&r.payload[front..front + len as usize]);
                }
                Carried::Tlp(t, h.requester_id)
            }
            TlpHeader::Msg(h)
                if matches!(
                    h.code,
                    MsgCode::VendorDefinedType0 | MsgCode::VendorDefinedType1
                ) =>
            {
                let route = match h.routing {
                    MsgRouting::ToRc => VdmRoute::RootComplex,
                    MsgRouting::ById => VdmRoute::Id(h.fields.destination_id()),
                    MsgRouting::Broadcast => VdmRoute::Broadcast,
                    MsgRouting::Local => VdmRoute::Local,
                    other => {
                        return Carried::No(format!(
                            "a vendor-defined message routed {other:?} is not carried"
                        ))
                    }
                };
                Carried::Vendor(
                    h.requester_id,
                    VendorMessage {
                        type1: h.code == MsgCode::VendorDefinedType1,
                        route,
                        vendor_id: h.fields.vendor_id(),
                        vendor_data: h.fields.vendor_data(),
                        payload: r.payload.to_vec(),
                    },
                )
            }
            TlpHeader::Msg(h) => Carried::No(format!(
                "{} messages sent raw are not carried",
                h.code.name().unwrap_or("unknown")
            )),
            TlpHeader::Io(_) => {
                Carried::No("I/O requests from below are not carried (no I/O space above)".into())
            }
            TlpHeader::Cfg(_) => {
                Carried::No("configuration requests travel only downstream".into())
            }
        }
    }

    /// A raw TLP the fabric does not carry reached the port at the other end of the
    /// device's link (see the module notes).
    #[cold]
    #[inline(never)]
    pub(crate) fn raw_arrived(&mut self, id: u32, cx: &mut Context<'_, PackedEv>) {
        let why = self.raw_why.remove(&id);
        let Some(port) = self.last_rx_func else {
            return;
        };
        let who = self.fabric.bdf(port);
        let from = self.pool.tlps[id as usize].requester;
        let bytes = self.payload(id).to_vec();
        if let Err(m) = check_rx(&bytes, &self.raw_rules()) {
            self.fault(
                FaultKind::RawTlp,
                format!("{who}: {m} (from {from}): discarded"),
            );
            self.signal_error(port, AER_MALFORMED, false, Some(id), cx);
            return;
        }
        let why = why.unwrap_or_else(|| "not carried".into());
        let Ok(r) = parse(&bytes) else {
            return;
        };
        let kind = r.kind();
        let fate = if kind.is_non_posted() {
            "completed with Unsupported Request"
        } else {
            "dropped"
        };
        self.fault(
            FaultKind::RawTlp,
            format!("{who}: {kind:?} from {from}: {why}; {fate}"),
        );
        if kind.is_non_posted() {
            // The port completes it with Unsupported Request (with the requester's
            // ID and tag) and logs it as a completer does.
            let req = Tlp {
                tag: r.tag().value(),
                ..Tlp::new(Kind::IoRd, r.requester_id(), 0, 4)
            };
            debug_assert_eq!(req.class(), NP);
            self.port_completes(port, &req, CplStatus::Ur, cx);
            self.signal_error(port, AER_UNSUPPORTED, true, Some(id), cx);
        }
    }

    /// A completion for a read device `node` sent raw: to the device model.
    #[cold]
    #[inline(never)]
    pub(crate) fn raw_read_completion(
        &mut self,
        node: u32,
        id: u32,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let (tag, status, len, poisoned) = {
            let t = &self.pool.tlps[id as usize];
            (t.tag, t.status(), t.len, t.poisoned)
        };
        // A burst of completions (burst mode) reaches the device as its TLPs.
        let pieces = self.piece_bytes(id);
        if let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind {
            if let Some(left) = ep.raw_reads.get_mut(&tag) {
                *left = left.saturating_sub(len);
                if status != CplStatus::Sc || *left == 0 {
                    ep.raw_reads.remove(&tag);
                }
            }
        }
        if poisoned {
            let f: Option<FnId> = self.nodes[node as usize].func;
            self.poisoned_received(f, true, "completion", id, cx);
        }
        for bytes in pieces {
            self.call_ep(node, cx, |m, cx| m.raw_completion(&bytes, cx));
        }
    }
}
