//! A completer answers a request: completions split at the Read Completion Boundary
//! and Max_Payload_Size, and the completion of an I/O or configuration write.

use super::engine::Engine;
use super::fault::FaultKind;
use super::packed::PackedEv;
use super::poison::state::Poison;
use super::tlp::*;
use crate::functional::Origin;
use pcielab_sim::Context;
use pcielab_wire::dma::{completions, CplPolicy};
use pcielab_wire::{Bdf, CplStatus};

impl Engine {
    /// Answers read request `req` with completions split at RCB/MPS.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send_completions(
        &mut self,
        origin: Origin,
        completer: Bdf,
        req: &Tlp,
        status: CplStatus,
        data: &[u8],
        poison: Poison,
        cx: &mut Context<'_, PackedEv>,
    ) {
        if req.pieces > 1 && req.kind == Kind::MRd {
            self.answer_read_burst(origin, completer, req, status, data, poison, cx);
            return;
        }
        let base = Tlp {
            completer,
            tag: req.tag,
            detail: Detail::Completion {
                byte_count: req.len.min(4096) as u16,
                status,
            },
            dest: Dest::Rc,
            ..Tlp::new(Kind::Cpl, req.requester, req.addr, 0)
        };
        if status != CplStatus::Sc || data.is_empty() {
            let _ = self.inject(origin, base, req.requester, cx);
            return;
        }
        let Ok(it) = completions(
            req.addr,
            req.len,
            self.cfg.rcb as u32,
            self.cfg.mps as u32,
            CplPolicy::Maximal,
        ) else {
            self.fault(
                FaultKind::Split,
                format!(
                    "cannot split completions of a read at {:#x} len {}",
                    req.addr, req.len
                ),
            );
            return;
        };
        // Burst mode: the root complex's whole-MPS completions of a memory read go
        // together (see the `burst` module).
        let group = self.cpl_burst_max > 1
            && origin == Origin::Host
            && req.kind == Kind::MRd
            && req.pasid == NONE
            && matches!(poison, Poison::Clean);
        let mps = self.cfg.mps as u32;
        let mut it = it.peekable();
        while let Some(ch) = it.next() {
            let (mut len, mut pieces) = (ch.len, 1u32);
            if group && ch.len == mps && ch.addr & 3 == 0 {
                while pieces < self.cpl_burst_max {
                    match it.peek() {
                        Some(n) if n.len == mps => {
                            len += mps;
                            pieces += 1;
                            it.next();
                        }
                        _ => break,
                    }
                }
            }
            let s = ch.offset as usize;
            let e = (s + len as usize).min(data.len());
            let p = self.pool.alloc_payload(data.get(s..e).unwrap_or(&[]));
            let mut t = base.clone();
            t.kind = Kind::CplD;
            t.addr = ch.addr;
            t.len = len;
            t.set_byte_count(ch.byte_count);
            t.data = p;
            t.pieces = pieces as u8;
            t.poisoned = self.completion_poisoned(poison, s as u64, len as u64);
            if let Err(e) = self.inject(origin, t, req.requester, cx) {
                self.fault(
                    FaultKind::NotRoutable,
                    format!("completion not routable: {e}"),
                );
            }
        }
    }

    /// Answers I/O request `req`: a Cpl (IOWr, or an error status) or a CplD of one DW
    /// with `data` in its byte lanes (IORd). Byte Count is 4 and Lower Address 0, as
    /// for every completion of a request other than a memory read.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send_io_completion(
        &mut self,
        origin: Origin,
        completer: Bdf,
        req: &Tlp,
        status: CplStatus,
        data: Option<&[u8]>,
        poisoned: bool,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let mut t = Tlp {
            completer,
            tag: req.tag,
            detail: Detail::Completion {
                byte_count: 4,
                status,
            },
            dest: Dest::Rc,
            ..Tlp::new(Kind::Cpl, req.requester, 0, 0)
        };
        if let (CplStatus::Sc, Some(d)) = (status, data) {
            let mut dw = [0u8; 4];
            let front = (req.addr & 3) as usize;
            let n = d.len().min(4 - front);
            dw[front..front + n].copy_from_slice(&d[..n]);
            t.kind = Kind::CplD;
            t.len = 4;
            t.data = self.pool.alloc_payload(&dw);
            t.poisoned = poisoned;
        }
        if let Err(e) = self.inject(origin, t, req.requester, cx) {
            self.fault(
                FaultKind::NotRoutable,
                format!("completion not routable: {e}"),
            );
        }
    }
}
