//! The endpoint DMA engine: DMAs split into requests (MPS, MRRS, 4 KiB), tags,
//! completions reassembled, the completion timeout.

use super::endpoint::DmaId;
use super::engine::Engine;
use super::event::Ev;
use super::fault::FaultKind;
use super::node::state::NodeKind;
use super::packed::PackedEv;
use super::pool::put_in_slot;
use super::regs::{AER_COMPLETION_TIMEOUT, AER_MALFORMED, AER_UNEXPECTED_CPL};
use super::slot::state::{DmaDir, DmaOp, HeldRead, SgDma};
use super::tlp::{piece_tag_at, Kind, Tlp, NONE, TAGS_DOWN};
use super::tlp::{Detail, NP};
use crate::functional::{FnId, Origin, RouteError};
use pcielab_device::sg_total;
use pcielab_sim::{Context, SimTime};
use pcielab_wire::dma::{split_read, split_write, SplitPolicy};
use pcielab_wire::CplStatus;

/// What one function's turn in the partitioned read loop did.
enum Issue {
    /// It sent a request.
    Sent,
    /// It has nothing it can send now.
    Idle,
    /// Stop the loop (the DMA failed and was finished).
    Stop,
}

impl Engine {
    /// Starts DMA `id` of `node`'s function `func` (its index on the device): `len`
    /// bytes at `addr`, in the address space of `pasid` when given.
    pub(crate) fn new_dma(
        &mut self,
        (node, func): (u32, u16),
        id: DmaId,
        dir: DmaDir,
        at: (u64, u64, Option<u32>),
        data: Vec<u8>,
        cx: &mut Context<'_, PackedEv>,
    ) {
        self.new_dma_in((node, func), id, dir, at, data, (NONE, 0), cx);
    }

    /// Starts scatter-gather DMA `id` of `node`'s function `func`: a DMA of each
    /// segment `(addr, len)` in turn, as separate DMAs given in one call would be
    /// (writes: `data` holds the segments' bytes back to back), and one `dma_done`
    /// when the last is done (reads: the segments' data back to back; `ok` only if
    /// every segment succeeded).
    pub(crate) fn new_sg_dma(
        &mut self,
        (node, func): (u32, u16),
        id: DmaId,
        segs: Vec<(u64, u64)>,
        data: Option<Vec<u8>>,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let total = match sg_total(&segs, data.as_ref().map(Vec::len)) {
            Ok(t) => t,
            Err(why) => {
                let name = &self.nodes[node as usize].name;
                let message = format!("{name}: scatter-gather DMA refused: {why}");
                self.fault(FaultKind::DeviceCommand, message);
                self.call_ep_fn(node, func, cx, |m, cx| m.dma_done(id, false, &[], cx));
                return;
            }
        };
        if segs.is_empty() {
            self.call_ep_fn(node, func, cx, |m, cx| m.dma_done(id, true, &[], cx));
            return;
        }
        let buf = match data {
            Some(_) => Vec::new(),
            None => self.pool.zeroed_buffer(total as usize),
        };
        let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind else {
            return;
        };
        let sg = SgDma {
            id,
            left: segs.len() as u32,
            ok: true,
            reset: false,
            buf,
            func,
        };
        let g = put_in_slot(&mut ep.sg, &mut ep.free_sg, sg);
        let mut off = 0u64;
        for (addr, len) in segs {
            let (dir, bytes) = match &data {
                Some(d) => {
                    let s = &d[off as usize..(off + len) as usize];
                    (DmaDir::Write { poisoned: false }, self.pool.spare_copy(s))
                }
                None => (DmaDir::Read, Vec::new()),
            };
            self.new_dma_in(
                (node, func),
                id,
                dir,
                (addr, len, None),
                bytes,
                // (`off` < 4 GiB: the total was checked above.)
                (g, off as u32),
                cx,
            );
            off += len;
        }
        if let Some(d) = data {
            self.pool.keep_spare(d);
        }
    }

    /// [`Engine::new_dma`] of a DMA that is segment `sg` (scatter-gather DMA, offset
    /// of its bytes there) of a scatter-gather DMA, or of none (`NONE`).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn new_dma_in(
        &mut self,
        (node, func): (u32, u16),
        id: DmaId,
        dir: DmaDir,
        (addr, len, pasid): (u64, u64, Option<u32>),
        mut data: Vec<u8>,
        (sg, sg_off): (u32, u32),
        cx: &mut Context<'_, PackedEv>,
    ) {
        let now = cx.now();
        // Function 0's Bus Master Enable is cached; another function's is read.
        let bme = func == 0
            || self
                .fn_of(node, func)
                .is_some_and(|f| self.bus_master_set(f));
        let pasid_ok = match pasid {
            Some(p) => self.pasid_allowed(node, p),
            None => true,
        };
        let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind else {
            return;
        };
        let (write, poisoned, atomic) = match dir {
            DmaDir::Read => (false, false, None),
            DmaDir::Write { poisoned } => (true, poisoned, None),
            DmaDir::Atomic(code) => (false, false, Some(code)),
        };
        let op = DmaOp {
            id,
            write,
            poisoned,
            addr,
            len,
            issued: 0,
            done_bytes: 0,
            atomic: atomic.map(|code| (code, std::mem::take(&mut data))),
            buf: if write { data } else { Vec::new() },
            last_progress: now,
            ok: true,
            live: true,
            outstanding: 0,
            xlate: Vec::new(),
            xlate_wait: 0,
            pasid: pasid.unwrap_or(NONE),
            func,
            reset: false,
            sg,
            sg_off,
        };
        let oi = put_in_slot(&mut ep.ops, &mut ep.free_ops, op);
        if let Some(r) = ep.reorder.get_mut(oi as usize) {
            // The slot's reorder state starts over with the new DMA.
            r.0 = 0;
            r.1.clear();
        }
        if !ep.bus_master || !bme {
            ep.ops[oi as usize].ok = false;
            self.dma_without_bus_master(node);
            self.finish_dma(node, oi, cx);
            return;
        }
        if !pasid_ok {
            ep.ops[oi as usize].ok = false;
            self.finish_dma(node, oi, cx);
            return;
        }
        if len == 0 {
            self.finish_dma(node, oi, cx);
            return;
        }
        if addr.checked_add(len - 1).is_none() {
            // It would run past the top of the 64-bit address space, where no request
            // can go.
            let why = format!("a DMA of {len} bytes at {addr:#x} runs past 2^64");
            self.fail_dma(node, oi, FaultKind::Split, why, cx);
            return;
        }
        // With ATS on, the DMA starts once the device holds its translations (of its
        // PASID's address space when it has one).
        if self.ats_any && self.ats_gate(node, oi, cx) {
            return;
        }
        self.dma_go(node, oi, cx);
    }

    /// DMA `oi` of `node` fails before any of its requests goes out: the fault log says
    /// why (`why`, after the node's name), and the device hears that it failed.
    fn fail_dma(
        &mut self,
        node: u32,
        oi: u32,
        kind: FaultKind,
        why: String,
        cx: &mut Context<'_, PackedEv>,
    ) {
        if let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind {
            ep.ops[oi as usize].ok = false;
        }
        let name = &self.nodes[node as usize].name;
        let message = format!("{name}: {why}");
        self.fault(kind, message);
        self.finish_dma(node, oi, cx);
    }

    /// Starts DMA `oi` of `node`: its writes go out, its reads join the read queue.
    pub(crate) fn dma_go(&mut self, node: u32, oi: u32, cx: &mut Context<'_, PackedEv>) {
        let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind else {
            return;
        };
        let (write, len) = (ep.ops[oi as usize].write, ep.ops[oi as usize].len);
        if ep.ops[oi as usize].reset {
            // Its function was reset while it waited for translations.
            self.finish_dma(node, oi, cx);
            return;
        }
        if write {
            self.issue_writes(node, oi, cx);
        } else {
            if let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind {
                ep.ops[oi as usize].buf = self.pool.zeroed_buffer(len as usize);
                match &mut ep.part {
                    None => ep.read_queue.push_back(oi),
                    Some(p) => {
                        let func = ep.ops[oi as usize].func;
                        match p.queues.get_mut(func as usize) {
                            Some(q) => q.push_back(oi),
                            None => {
                                // A function past the layout the policy was checked for.
                                let why =
                                    format!("DMA read of function {func}, which has no tag range");
                                self.fail_dma(node, oi, FaultKind::DeviceCommand, why, cx);
                                return;
                            }
                        }
                    }
                }
            }
            self.arm_dma_timeout(node, cx);
            self.issue_reads(node, cx);
        }
    }

    /// Makes sure `node`'s completion-timeout sweep is pending.
    pub(crate) fn arm_dma_timeout(&mut self, node: u32, cx: &mut Context<'_, PackedEv>) {
        let to = self.cfg.completion_timeout;
        if let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind {
            if !ep.timeout_armed {
                ep.timeout_armed = true;
                ep.timeout_key = Some(cx.schedule_in(to, Ev::DmaTimeout(node, 0)));
            }
        }
    }

    pub(crate) fn issue_writes(&mut self, node: u32, oi: u32, cx: &mut Context<'_, PackedEv>) {
        let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind else {
            return;
        };
        let (addr, len) = (ep.ops[oi as usize].addr, ep.ops[oi as usize].len);
        let (poisoned, pasid) = (ep.ops[oi as usize].poisoned, ep.ops[oi as usize].pasid);
        let mut buf = std::mem::take(&mut ep.ops[oi as usize].buf);
        let func = ep.ops[oi as usize].func;
        let me0 = ep.bdf;
        let Some(f) = self.fn_of(node, func) else {
            return;
        };
        // Function 0's ID is cached; another function's is looked up.
        let me = if func == 0 { me0 } else { self.fabric.bdf(f) };
        let Ok(split) = split_write(addr, len, self.cfg.mps as u32, SplitPolicy::Aligned) else {
            // Not lost: the device hears that it failed.
            let why = format!("DMA write at {addr:#x} len {len} cannot be split");
            self.fail_dma(node, oi, FaultKind::Split, why, cx);
            return;
        };
        if poisoned {
            self.master_data_parity(f);
        }
        let mut chunks = split;
        while let Some(ch) = chunks.next() {
            // Burst mode: the following whole-MPS chunks may go with this one.
            let (mut len, mut pieces) = (ch.len, 1);
            if self.burst_max > 1 && !poisoned && pasid == NONE {
                pieces = self.burst_pieces(f, me, (ch.addr, ch.len), chunks.remaining());
                let more = (pieces - 1) * ch.len;
                chunks.skip_bytes(more as u64);
                len += more;
            }
            let last = chunks.remaining() == 0;
            let s = ch.offset as usize;
            let p = if s == 0 && len as usize == buf.len() {
                // One TLP (or burst) carries the whole buffer: it becomes the payload.
                self.pool.adopt_payload(std::mem::take(&mut buf))
            } else {
                self.pool.alloc_payload(&buf[s..s + len as usize])
            };
            let (addr, addr_type) = self.dma_address(node, oi, ch.addr);
            let t = Tlp {
                data: p,
                dma_last: if last { (node, oi) } else { (NONE, NONE) },
                poisoned,
                addr_type,
                pasid,
                pieces: pieces as u8,
                ..Tlp::new(Kind::MWr, me, addr, len)
            };
            if let Err(e) = self.inject_device(node, Origin::Function(f), t, me, cx) {
                self.fault(
                    FaultKind::NotRoutable,
                    format!("DMA write not routable: {e}"),
                );
                if let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind {
                    ep.ops[oi as usize].ok = false;
                }
                self.finish_dma(node, oi, cx);
                return;
            }
        }
    }

    pub(crate) fn dma_write_left(&mut self, node: u32, oi: u32, cx: &mut Context<'_, PackedEv>) {
        if let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind {
            let l = ep.ops[oi as usize].len;
            ep.ops[oi as usize].done_bytes = l;
        }
        self.finish_dma(node, oi, cx);
    }

    pub(crate) fn issue_reads(&mut self, node: u32, cx: &mut Context<'_, PackedEv>) {
        let Some(f) = self.nodes[node as usize].func else {
            return;
        };
        if matches!(&self.nodes[node as usize].kind, NodeKind::Ep(ep) if ep.part.is_some()) {
            self.issue_reads_per_function(node, f, cx);
            return;
        }
        let (mrrs, mps) = (self.cfg.mrrs as u64, self.cfg.mps);
        let _ = mps;
        loop {
            let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind else {
                return;
            };
            let Some(&oi) = ep.read_queue.front() else {
                return;
            };
            let Some(tag) = ep.free_tags.pop() else {
                return;
            };
            let window = ep.policy.reorder;
            let op = &mut ep.ops[oi as usize];
            // Next request: up to MRRS, not crossing an MRRS-aligned boundary or 4 KiB.
            let a = op.addr + op.issued;
            let mut rem = op.len - op.issued;
            if let Some(w) = window {
                // No request for data past the reorder window: a full window stalls.
                let delivered = ep.reorder.get(oi as usize).map_or(0, |r| r.0);
                let room = (delivered + u64::from(w)).saturating_sub(op.issued);
                if room == 0 {
                    ep.free_tags.push(tag);
                    ep.stats.window_stalls += 1;
                    return;
                }
                rem = rem.min(room);
            }
            let Ok(mut sp) = split_read(a, rem, mrrs as u32, SplitPolicy::Aligned) else {
                // (`new_dma` refuses DMAs past 2^64, so this does not happen; were it
                // to, the DMA fails rather than waiting forever.)
                ep.free_tags.push(tag);
                ep.read_queue.pop_front();
                op.ok = false;
                if op.outstanding == 0 {
                    self.finish_dma(node, oi, cx);
                }
                continue;
            };
            let Some(ch) = sp.next() else {
                ep.free_tags.push(tag);
                ep.read_queue.pop_front();
                continue;
            };
            let off = op.issued;
            // The function the DMA belongs to (function 0 unless the device said).
            let (f, me) = match op.func {
                0 => (f, ep.bdf),
                i => match ep.funcs.get(i as usize) {
                    Some(&g) => (g, self.fabric.bdf(g)),
                    None => (f, ep.bdf),
                },
            };
            // Burst mode: the next whole requests of the DMA in the same page go as
            // one burst when the tags they would take are consecutive (see `burst`).
            let burst = self.rd_burst_max > 1 && window.is_none();
            let (n, down) = if burst && op.atomic.is_none() && op.pasid == NONE {
                let rest = op.len - op.issued - ch.len as u64;
                let k = ep.free_tags.len().min(8);
                let mut top = [0u16; 8];
                top[..k].copy_from_slice(&ep.free_tags[ep.free_tags.len() - k..]);
                self.read_burst_pieces((f, me), (a, ch.len, rest), tag, &top[..k])
            } else {
                (1, false)
            };
            let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind else {
                return;
            };
            let len = ch.len * n;
            for _ in 1..n {
                ep.free_tags.pop();
            }
            let op = &mut ep.ops[oi as usize];
            op.issued += len as u64;
            op.outstanding += n;
            ep.stats.max_reads_in_flight = ep.stats.max_reads_in_flight.max(op.outstanding);
            if op.issued >= op.len {
                ep.read_queue.pop_front();
            }
            let mut t = self.read_request(node, oi, tag, off, len);
            if t.kind == Kind::Atomic {
                t.data = self.atomic_operands(node, oi);
            }
            t.pieces = n as u8;
            if n > 1 {
                t.tag_span = 1 | if down { TAGS_DOWN } else { 0 };
            }
            // Completions count their addresses from the request's, as sent (the
            // translated one when the DMA holds an ATS translation).
            if let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind {
                for i in 0..n {
                    let d = (i * ch.len) as u64;
                    ep.tag_map[t.piece_tag(i) as usize] =
                        Some((oi, off + d, ch.len, 0, t.addr + d));
                }
                if ep.rd_hold > 0 {
                    // Built as the exact model builds it (its tag taken now), sent
                    // with the others once the hold ends (see `burst`).
                    ep.held_reads.push(HeldRead { oi, f, me, t });
                    continue;
                }
            }
            if !self.send_read(node, HeldRead { oi, f, me, t }, cx) {
                return;
            }
        }
    }

    /// Sends read request `r.t` of DMA `r.oi` of `node` (`pieces` of them from
    /// consecutive tags when it is a burst); false if it is not routable, the DMA
    /// then failed.
    #[inline(always)]
    fn send_read(&mut self, node: u32, r: HeldRead, cx: &mut Context<'_, PackedEv>) -> bool {
        let HeldRead { oi, f, me, t } = r;
        let tags = (t.tag, t.tag_span, t.pieces.max(1) as u32);
        let Err(e) = self.inject_device(node, Origin::Function(f), t, me, cx) else {
            return true;
        };
        self.read_not_routable(node, oi, tags, e, cx);
        false
    }

    /// Read request of DMA `oi` of `node` with `tags` (first tag, `Tlp::tag_span`,
    /// pieces) was not routable: a fault, then [`Engine::fail_read`].
    #[cold]
    #[inline(never)]
    fn read_not_routable(
        &mut self,
        node: u32,
        oi: u32,
        tags: (u16, u8, u32),
        e: RouteError,
        cx: &mut Context<'_, PackedEv>,
    ) {
        self.fault(
            FaultKind::NotRoutable,
            format!("DMA read not routable: {e}"),
        );
        self.fail_read(node, oi, tags, cx);
    }

    /// The read request of DMA `oi` of `node` with `tags` (first tag,
    /// `Tlp::tag_span`, pieces) did not go out: its tags go back and the DMA fails.
    fn fail_read(
        &mut self,
        node: u32,
        oi: u32,
        (tag, span, n): (u16, u8, u32),
        cx: &mut Context<'_, PackedEv>,
    ) {
        if let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind {
            for i in (0..n).rev() {
                let tag = piece_tag_at(tag, span, i);
                ep.tag_map[tag as usize] = None;
                ep.free_tags.push(tag);
            }
            ep.ops[oi as usize].ok = false;
            ep.read_queue.retain(|&x| x != oi);
        }
        self.finish_dma(node, oi, cx);
    }

    /// Sends the read requests `node`'s holds kept back (see `EpState::rd_hold`), in
    /// the order they were built: runs of small reads of one length as scatter
    /// bursts (each piece its own address and tag; see [`Engine::scatter_piece`]),
    /// as long as [`Engine::scatter_limits`] allows and half the root port's
    /// non-posted header credits stay free after the burst; the others alone.
    pub(crate) fn send_held_reads(&mut self, node: u32, cx: &mut Context<'_, PackedEv>) {
        let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind else {
            return;
        };
        let mut held = std::mem::take(&mut ep.held_reads);
        let mut i = 0;
        while i < held.len() {
            let k = self.scatter_run(node, &held[i..]);
            if k < 2 {
                self.send_read(node, held[i].clone(), cx);
                i += 1;
                continue;
            }
            let run = &held[i..i + k];
            let sc = self.pool.alloc_scatter();
            let pieces = run.iter().map(|r| (r.t.addr, r.t.tag));
            self.pool.scatter[sc as usize].extend(pieces);
            let t = Tlp {
                len: run[0].t.len * k as u32,
                pieces: k as u8,
                detail: Detail::Scatter(sc),
                ..run[0].t.clone()
            };
            self.send_scatter_read(node, t, run, cx);
            i += k;
        }
        held.clear();
        if let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind {
            // (Reads built while these went out wait for the next time.)
            held.append(&mut ep.held_reads);
            ep.held_reads = held;
        }
    }

    /// How many of `reads`, from the first, go as one scatter burst (1: the first
    /// goes alone): small memory reads of one length by one function, each a piece
    /// ([`Engine::scatter_piece`]), as many as [`Engine::scatter_limits`] and the
    /// root port's credits allow.
    fn scatter_run(&mut self, node: u32, reads: &[HeldRead]) -> usize {
        let r = &reads[0];
        let plain = |t: &Tlp| t.kind == Kind::MRd && t.pieces == 1 && t.pasid == NONE;
        if reads.len() < 2 || !plain(&r.t) || reads[1].t.len != r.t.len {
            return 1;
        }
        let (len, first, who) = (r.t.len, r.t.addr, (r.f, r.me));
        let up = match &self.nodes[node as usize].kind {
            NodeKind::Ep(ep) => &self.dirs[ep.up_dir as usize],
            _ => return 1,
        };
        let half = up.rx_buf.hdr[NP] as u64 / 2;
        let room = up.tx_fc.header_room(NP).saturating_sub(half);
        let most = (self.scatter_limits(len).0 as u64)
            .min(room)
            .min(reads.len() as u64) as usize;
        if most < 2 || !self.scatter_piece(who, (first, len), first) {
            return 1;
        }
        let mut k = 1;
        while k < most {
            let n = &reads[k];
            let same =
                plain(&n.t) && n.t.len == len && n.t.requester == r.t.requester && n.f == r.f;
            if !same || !self.scatter_piece(who, (n.t.addr, len), first) {
                break;
            }
            k += 1;
        }
        k
    }

    /// Sends scatter burst `t` of the held read requests `run` (one piece each, sent
    /// by `run[0]`'s function); where it is not routable, each of their DMAs fails.
    fn send_scatter_read(
        &mut self,
        node: u32,
        t: Tlp,
        run: &[HeldRead],
        cx: &mut Context<'_, PackedEv>,
    ) {
        let (sc, f, me) = (t.scatter(), run[0].f, run[0].me);
        let Err(e) = self.inject_device(node, Origin::Function(f), t, me, cx) else {
            return;
        };
        self.fault(
            FaultKind::NotRoutable,
            format!("DMA read not routable: {e}"),
        );
        let pieces = std::mem::take(&mut self.pool.scatter[sc as usize]);
        self.pool.free_scatter(sc);
        for (r, &(_, tag)) in run.iter().zip(&pieces) {
            self.fail_read(node, r.oi, (tag, 0, 1), cx);
        }
    }

    /// `issue_reads` with tag ranges per function (`DmaPolicy::tags_per_function`):
    /// passes over the functions round-robin from the one whose turn it is, one
    /// request of each function that can send one (its oldest DMA's next request, a
    /// tag of its own free, room in that DMA's reorder window), until a pass sends
    /// nothing. A function out of tags or window room waits alone. No bursts.
    fn issue_reads_per_function(&mut self, node: u32, f0: FnId, cx: &mut Context<'_, PackedEv>) {
        let mrrs = self.cfg.mrrs as u32;
        let nfn = match &mut self.nodes[node as usize].kind {
            NodeKind::Ep(ep) => match &mut ep.part {
                Some(p) if p.holds > 0 => return,
                Some(p) => {
                    p.calls += 1;
                    p.queues.len() as u16
                }
                None => return,
            },
            _ => return,
        };
        loop {
            let mut sent = false;
            let start = match &self.nodes[node as usize].kind {
                NodeKind::Ep(ep) => ep.part.as_ref().map_or(0, |p| p.next),
                _ => return,
            };
            for step in 0..nfn {
                let i = (start + step) % nfn;
                match self.issue_one_read(node, f0, i, mrrs, cx) {
                    Issue::Sent => {
                        sent = true;
                        if let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind {
                            if let Some(p) = &mut ep.part {
                                p.next = (i + 1) % nfn;
                            }
                        }
                    }
                    Issue::Idle => {}
                    Issue::Stop => return,
                }
            }
            if !sent {
                return;
            }
        }
    }

    /// Sends function `i`'s next read request (partitioned engine).
    fn issue_one_read(
        &mut self,
        node: u32,
        f0: FnId,
        i: u16,
        mrrs: u32,
        cx: &mut Context<'_, PackedEv>,
    ) -> Issue {
        let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind else {
            return Issue::Stop;
        };
        let ep = &mut **ep;
        let Some(p) = ep.part.as_mut() else {
            return Issue::Stop;
        };
        let (oi, tag, a, rem, off) = loop {
            let Some(&oi) = p.queues[i as usize].front() else {
                return Issue::Idle;
            };
            let op = &ep.ops[oi as usize];
            if op.issued >= op.len {
                p.queues[i as usize].pop_front();
                continue;
            }
            let a = op.addr + op.issued;
            let mut rem = op.len - op.issued;
            if let Some(w) = ep.policy.reorder {
                let delivered = ep.reorder.get(oi as usize).map_or(0, |r| r.0);
                let room = (delivered + u64::from(w)).saturating_sub(op.issued);
                if room == 0 {
                    if p.stall_call[i as usize] != p.calls {
                        p.stall_call[i as usize] = p.calls;
                        ep.fn_stats_mut(i).window_stalls += 1;
                        ep.stats.window_stalls += 1;
                    }
                    return Issue::Idle;
                }
                rem = rem.min(room);
            }
            let Some(tag) = p.free[i as usize].pop() else {
                if p.stall_call[i as usize] != p.calls {
                    p.stall_call[i as usize] = p.calls;
                    ep.fn_stats_mut(i).tag_stalls += 1;
                }
                return Issue::Idle;
            };
            break (oi, tag, a, rem, op.issued);
        };
        let ch = match split_read(a, rem, mrrs, SplitPolicy::Aligned) {
            Ok(mut sp) => sp.next(),
            Err(_) => None,
        };
        let Some(ch) = ch else {
            // (`new_dma` refuses DMAs past 2^64, so this does not happen; were it to,
            // the DMA fails rather than waiting forever.)
            p.free[i as usize].push(tag);
            p.queues[i as usize].pop_front();
            let op = &mut ep.ops[oi as usize];
            op.ok = false;
            if op.outstanding == 0 {
                self.finish_dma(node, oi, cx);
                return Issue::Stop;
            }
            return Issue::Idle;
        };
        let op = &mut ep.ops[oi as usize];
        op.issued += u64::from(ch.len);
        op.outstanding += 1;
        let (outstanding, finished) = (op.outstanding, op.issued >= op.len);
        if finished {
            p.queues[i as usize].pop_front();
        }
        ep.stats.max_reads_in_flight = ep.stats.max_reads_in_flight.max(outstanding);
        ep.fn_stats_mut(i).requests += 1;
        let (f, me) = match i {
            0 => (f0, ep.bdf),
            i => match ep.funcs.get(i as usize) {
                Some(&g) => (g, self.fabric.bdf(g)),
                None => (f0, ep.bdf),
            },
        };
        let mut t = self.read_request(node, oi, tag, off, ch.len);
        if t.kind == Kind::Atomic {
            t.data = self.atomic_operands(node, oi);
        }
        if let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind {
            ep.tag_map[tag as usize] = Some((oi, off, ch.len, 0, t.addr));
        }
        if let Err(e) = self.inject_device(node, Origin::Function(f), t, me, cx) {
            self.fault(
                FaultKind::NotRoutable,
                format!("DMA read not routable: {e}"),
            );
            if let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind {
                ep.tag_map[tag as usize] = None;
                ep.free_tag(tag);
                ep.ops[oi as usize].ok = false;
                ep.unqueue(oi);
            }
            self.finish_dma(node, oi, cx);
            return Issue::Stop;
        }
        Issue::Sent
    }

    /// With tag ranges per function: true if completion `id` (carrying `tag`) is for
    /// a request of the function it reached (its Requester ID); otherwise it is an
    /// Unexpected Completion of that function (PCIe Base Spec 2.3.2), discarded,
    /// counted and logged in that function's AER registers, never given to another
    /// function.
    fn completion_for_its_function(
        &mut self,
        node: u32,
        id: u32,
        tag: u16,
        pieces: u32,
        cx: &mut Context<'_, PackedEv>,
    ) -> bool {
        let to = self.pool.tlps[id as usize].requester;
        let NodeKind::Ep(ep) = &self.nodes[node as usize].kind else {
            return false;
        };
        let recv_fn = if to == ep.bdf {
            self.nodes[node as usize].func
        } else {
            self.fabric.function_at(to)
        };
        let recv = recv_fn.and_then(|g| {
            if Some(g) == self.nodes[node as usize].func {
                Some(0)
            } else {
                ep.funcs.iter().position(|&x| x == g).map(|i| i as u16)
            }
        });
        let owner = ep.part.as_ref().and_then(|p| p.owner(tag));
        let entry = ep.tag_map.get(tag as usize).copied().flatten();
        if entry.is_some_and(|e| ep.ops[e.0 as usize].reset) {
            // A late completion of a request from before an FLR (its function may be
            // gone with its PF's): discarded and counted as such.
            return true;
        }
        let asked_by = entry.map(|e| ep.ops[e.0 as usize].func);
        if recv.is_some() && owner == recv && asked_by == recv {
            return true;
        }
        if asked_by.is_none() && ep.raw_reads.contains_key(&tag) {
            // A read the device sent as a raw TLP: its own business.
            return true;
        }
        let name = self.nodes[node as usize].name.clone();
        let who = match recv {
            Some(i) => format!("function {i}"),
            None => format!("{to}"),
        };
        let range = match (recv, &ep.part) {
            (Some(i), Some(p)) => format!(
                " (its tags are {}..{})",
                p.first + i * p.per,
                p.first + (i + 1) * p.per
            ),
            _ => String::new(),
        };
        if let (NodeKind::Ep(ep), Some(i)) = (&mut self.nodes[node as usize].kind, recv) {
            ep.fn_stats_mut(i).unexpected_completions += 1;
        }
        self.fault(
            FaultKind::UnexpectedCompletion,
            format!("{name}: unexpected completion for tag {tag} at {who}{range}"),
        );
        if let Some(g) = recv_fn.or(self.nodes[node as usize].func) {
            for _ in 0..pieces {
                self.signal_error(g, AER_UNEXPECTED_CPL, true, Some(id), cx);
            }
        }
        false
    }

    pub(crate) fn dma_completion(&mut self, node: u32, id: u32, cx: &mut Context<'_, PackedEv>) {
        if (self.ats_any || !self.ats_orphans.is_empty())
            && self.translation_completion(node, id, cx)
        {
            return;
        }
        let t = &self.pool.tlps[id as usize];
        if t.scatter() != NONE {
            self.scatter_completion(node, id, cx);
            return;
        }
        let per = (t.tag_span & !TAGS_DOWN) as u32;
        if per == 0 {
            let (tag, addr, len) = (t.tag, t.addr, t.len);
            self.dma_completion_part(node, id, (tag, addr, len, 0), t.pieces as u32, cx);
            return;
        }
        // A burst of completions that answers several requests (see `burst`): each
        // request's share in turn, as if its completions had come alone.
        let plen = t.len / t.pieces.max(1) as u32 * per;
        for r in 0..t.pieces as u32 / per {
            let t = &self.pool.tlps[id as usize];
            let part = (
                t.piece_tag(r * per),
                t.addr + (r * plen) as u64,
                plen,
                r * plen,
            );
            self.dma_completion_part(node, id, part, per, cx);
        }
    }

    /// Scatter burst of completions `id` (see `burst`) reached `node`'s DMA engine:
    /// each piece in turn, as if it had come alone; the reads that the DMAs they
    /// finish lead to go out together after the last.
    #[cold]
    #[inline(never)]
    fn scatter_completion(&mut self, node: u32, id: u32, cx: &mut Context<'_, PackedEv>) {
        let held = self.hold_scatter(node, true);
        let t = &self.pool.tlps[id as usize];
        let (plen, sc) = (t.len / t.pieces.max(1) as u32, t.scatter() as usize);
        for i in 0..t.pieces as usize {
            let (addr, tag) = self.pool.scatter[sc][i];
            let part = (tag, addr, plen, i as u32 * plen);
            self.dma_completion_part(node, id, part, 1, cx);
        }
        if held && self.hold_scatter(node, false) {
            self.send_held_reads(node, cx);
        }
    }

    /// Completion record `id` (or the part of it that answers one request: `tag`,
    /// `len` bytes at `addr`, from byte `from` of its payload; `pieces` TLPs) reached
    /// `node`'s DMA engine.
    fn dma_completion_part(
        &mut self,
        node: u32,
        id: u32,
        (tag, addr, len, from): (u16, u64, u32, u32),
        pieces: u32,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let partitioned =
            matches!(&self.nodes[node as usize].kind, NodeKind::Ep(ep) if ep.part.is_some());
        if partitioned && !self.completion_for_its_function(node, id, tag, pieces, cx) {
            return;
        }
        let now = cx.now();
        let (status, poisoned) = {
            let t = &self.pool.tlps[id as usize];
            (t.status(), t.poisoned)
        };
        let pd = self.pool.tlps[id as usize].data;
        let payload: &[u8] = if pd == NONE {
            &[]
        } else {
            let p = &self.pool.payloads[pd as usize];
            p.get(from as usize..).unwrap_or(&[])
        };
        let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind else {
            return;
        };
        let entry = ep.tag_map.get(tag as usize).copied().flatten();
        let Some((oi, off, clen, got, wire)) = entry else {
            if ep.raw_reads.contains_key(&tag) {
                // A read the device sent as a raw TLP.
                self.raw_read_completion(node, id, cx);
                return;
            }
            // Unexpected Completion (PCIe Base Spec 2.3.2): discard, log in AER (each
            // TLP of a burst).
            let name = self.nodes[node as usize].name.clone();
            self.fault(
                FaultKind::UnexpectedCompletion,
                format!("{name}: unexpected completion for tag {tag}"),
            );
            if let Some(f) = self.nodes[node as usize].func {
                for _ in 0..pieces {
                    self.signal_error(f, AER_UNEXPECTED_CPL, true, Some(id), cx);
                }
            }
            return;
        };
        if status == CplStatus::Sc && len > clen - got {
            // More data than the request has left: Malformed TLP (2.3.2), discarded.
            let name = self.nodes[node as usize].name.clone();
            self.fault(
                FaultKind::MalformedCompletion,
                format!(
                    "{name}: malformed completion (tag {tag}: {len} bytes, {} expected)",
                    clen - got
                ),
            );
            if let Some(f) = self.nodes[node as usize].func {
                self.signal_error(f, AER_MALFORMED, false, Some(id), cx);
            }
            return;
        }
        // Its data's place in the request; data outside the request is a Malformed TLP
        // too (never clipped silently).
        let start = addr.wrapping_sub(wire);
        if status == CplStatus::Sc && start.saturating_add(u64::from(len)) > u64::from(clen) {
            let name = self.nodes[node as usize].name.clone();
            self.fault(FaultKind::MalformedCompletion, format!(
                "{name}: malformed completion (tag {tag}: data at {addr:#x} outside the request at {wire:#x}, {clen} bytes)"
            ));
            if let Some(f) = self.nodes[node as usize].func {
                self.signal_error(f, AER_MALFORMED, false, Some(id), cx);
            }
            return;
        }
        let wants = ep.policy.per_completion || ep.policy.reorder.is_some();
        let dead = ep.ops[oi as usize].reset;
        let poisoned = poisoned && !dead;
        if dead {
            // A request from before its function's FLR: the data goes nowhere.
            let func = ep.ops[oi as usize].func;
            ep.fn_stats_mut(func).flr_late_completions += u64::from(pieces);
        }
        let op = &mut ep.ops[oi as usize];
        op.last_progress = now;
        let mut done_req = false;
        let mut deliver = None;
        if status != CplStatus::Sc {
            op.ok = false;
            done_req = true;
        } else {
            let start = start as usize;
            let n = (len as usize).min(payload.len());
            let dst = (off as usize + start).min(op.buf.len());
            let end = (dst + n).min(op.buf.len());
            if poisoned {
                // The request runs to its end; the DMA fails and keeps no bad data.
                op.ok = false;
            } else {
                op.buf[dst..end].copy_from_slice(&payload[..end - dst]);
                if wants && end > dst {
                    deliver = Some((dst as u64, end as u64));
                    ep.stats.completions += 1;
                }
            }
            let g = got + n as u32;
            op.done_bytes += n as u64;
            if g >= clen {
                done_req = true;
            } else {
                ep.tag_map[tag as usize] = Some((oi, off, clen, g, wire));
            }
        }
        if poisoned {
            if let Some(f) = self.nodes[node as usize].func {
                self.master_data_parity(f);
                self.poisoned_received(Some(f), true, "completion", id, cx);
            }
        } else if let Some(range) = deliver {
            self.deliver_data(node, oi, range, cx);
        }
        let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind else {
            return;
        };
        if done_req {
            ep.tag_map[tag as usize] = None;
            ep.free_tag(tag);
            let op = &mut ep.ops[oi as usize];
            op.outstanding = op.outstanding.saturating_sub(1);
            let all_issued = op.issued >= op.len || !op.ok;
            if op.live && op.outstanding == 0 && all_issued && (op.done_bytes >= op.len || !op.ok) {
                if !op.ok {
                    ep.unqueue(oi);
                }
                self.finish_dma(node, oi, cx);
            }
        }
        self.issue_reads(node, cx);
    }

    /// Hands bytes `[start, end)` of read DMA `oi` that just arrived to the device
    /// ([`super::Endpoint::completion`]): at once, or with a reorder window, once
    /// everything before them has arrived (then with whatever followed them).
    #[cold]
    #[inline(never)]
    fn deliver_data(
        &mut self,
        node: u32,
        oi: u32,
        (start, end): (u64, u64),
        cx: &mut Context<'_, PackedEv>,
    ) {
        let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind else {
            return;
        };
        let in_order = ep.policy.reorder.is_some();
        let op = &mut ep.ops[oi as usize];
        let (from, to) = if in_order {
            if ep.reorder.len() <= oi as usize {
                ep.reorder.resize_with(oi as usize + 1, Default::default);
            }
            let (delivered, early) = &mut ep.reorder[oi as usize];
            if start != *delivered {
                let at = early.partition_point(|&(s, _)| s < start);
                early.insert(at, (start, end));
                return;
            }
            let mut to = end;
            while let Some(&(s, e)) = early.first() {
                if s != to {
                    break;
                }
                to = e;
                early.remove(0);
            }
            *delivered = to;
            (start, to)
        } else {
            (start, end)
        };
        // (A segment of a scatter-gather DMA: its offset counts in the whole DMA's data.)
        let (id, func, at) = (op.id, op.func, from + op.sg_off as u64);
        let buf = std::mem::take(&mut op.buf);
        let piece = &buf[from as usize..to as usize];
        self.call_ep_fn(node, func, cx, |m, cx| m.completion(id, at, piece, cx));
        if let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind {
            ep.ops[oi as usize].buf = buf;
        }
    }

    /// The endpoint's completion-timeout sweep: one pending timer per endpoint (at the
    /// earliest deadline), so DMAs add no heap entries of their own.
    pub(crate) fn dma_timeout(&mut self, node: u32, cx: &mut Context<'_, PackedEv>) {
        let to = self.cfg.completion_timeout;
        let now = cx.now();
        let tags = self.cfg.dma_tags;
        let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind else {
            return;
        };
        let mut expired = Vec::new();
        let mut next: Option<SimTime> = None;
        for (i, op) in ep.ops.iter().enumerate() {
            if !op.live || !op.awaits_completions() {
                continue;
            }
            let deadline = op.last_progress + to;
            if deadline <= now {
                expired.push(i as u32);
            } else {
                next = Some(next.map_or(deadline, |n| n.min(deadline)));
            }
        }
        match next {
            Some(t) => ep.timeout_key = Some(cx.schedule_at(t, Ev::DmaTimeout(node, 0))),
            None => {
                ep.timeout_armed = false;
                ep.timeout_key = None;
            }
        }
        if expired.is_empty() {
            return;
        }
        // The request each expired DMA waited on longest (its lowest offset still
        // outstanding), for the Header Log: (tag, offset, length).
        let oldest: Vec<Option<(u16, u64, u32)>> = expired
            .iter()
            .map(|&oi| {
                ep.tag_map
                    .iter()
                    .enumerate()
                    .filter_map(|(t, e)| match e {
                        Some((o, off, len, ..)) if *o == oi => Some((t as u16, *off, *len)),
                        _ => None,
                    })
                    .min_by_key(|&(_, off, _)| off)
            })
            .collect();
        for &oi in &expired {
            ep.ops[oi as usize].ok = false;
            for e in ep.tag_map.iter_mut() {
                if matches!(e, Some((o, ..)) if *o == oi) {
                    *e = None;
                }
            }
            ep.unqueue(oi);
        }
        // Tags of timed-out requests return to the pool (late completions are then
        // Unexpected Completions).
        if let Some(p) = &mut ep.part {
            let map = &ep.tag_map;
            for i in 0..p.free.len() as u16 {
                p.refill(i, |t| map.get(t as usize).is_some_and(|e| e.is_some()));
            }
        } else {
            let mut free: Vec<u16> = (0..tags)
                .filter(|&t| ep.tag_map.get(t as usize).is_some_and(|e| e.is_none()))
                .collect();
            free.reverse();
            ep.free_tags = free;
        }
        let name = self.nodes[node as usize].name.clone();
        for (oi, req) in expired.into_iter().zip(oldest) {
            if matches!(&self.nodes[node as usize].kind, NodeKind::Ep(ep) if ep.ops[oi as usize].reset)
            {
                // Dropped by an FLR: its completions can no longer come; its tags are
                // free again and it ends silently.
                self.finish_dma(node, oi, cx);
                continue;
            }
            let (what, translating) = match &self.nodes[node as usize].kind {
                NodeKind::Ep(ep) if ep.ops[oi as usize].xlate_wait > 0 => ("ATS translation", true),
                _ => ("DMA read", false),
            };
            self.fault(
                FaultKind::CompletionTimeout,
                format!("{name}: {what} completion timeout"),
            );
            if let Some(f) = self.nodes[node as usize].func {
                // Completion Timeout Prefix/Header Log Capable: the timed-out read
                // request's header is logged (rebuilt as it was sent).
                let req = req.filter(|_| !translating).map(|(tag, off, len)| {
                    let t = self.read_request(node, oi, tag, off, len);
                    self.pool.alloc(t)
                });
                self.signal_error(f, AER_COMPLETION_TIMEOUT, true, req, cx);
                if let Some(id) = req {
                    self.release(id);
                }
            }
            self.finish_dma(node, oi, cx);
        }
        if self.ats_any {
            self.ats_forget_dead(node);
        }
    }

    /// The read request DMA `oi` of `node` sends with `tag` for `len` bytes at offset
    /// `off` (also rebuilt for the Header Log when it times out).
    #[inline]
    fn read_request(&self, node: u32, oi: u32, tag: u16, off: u64, len: u32) -> Tlp {
        let NodeKind::Ep(ep) = &self.nodes[node as usize].kind else {
            unreachable!("DMAs belong to endpoints")
        };
        let op = &ep.ops[oi as usize];
        let (addr, addr_type) = self.dma_address(node, oi, op.addr + off);
        let me = match op.func {
            0 => ep.bdf,
            i => self.fn_of(node, i).map_or(ep.bdf, |f| self.fabric.bdf(f)),
        };
        let t = Tlp {
            tag,
            addr_type,
            pasid: op.pasid,
            ..Tlp::new(Kind::MRd, me, addr, len)
        };
        match &op.atomic {
            None => t,
            // An AtomicOp: its operands are the payload (see `atomic_operands`).
            // (The header is as long as the read's: 4 DW above 4 GiB.)
            Some((code, operands)) => Tlp {
                kind: Kind::Atomic,
                len: operands.len() as u32,
                detail: Detail::Atomic(*code),
                ..t
            },
        }
    }

    pub(crate) fn finish_dma(&mut self, node: u32, oi: u32, cx: &mut Context<'_, PackedEv>) {
        let done = {
            let NodeKind::Ep(ep) = &mut self.nodes[node as usize].kind else {
                return;
            };
            let op = &mut ep.ops[oi as usize];
            if !op.live {
                return;
            }
            op.live = false;
            let data = if op.write {
                Vec::new()
            } else {
                std::mem::take(&mut op.buf)
            };
            let (id, ok, func, silent) = (op.id, op.ok, op.func, op.reset);
            let (sg, sg_off) = (op.sg, op.sg_off);
            op.xlate.clear();
            ep.free_ops.push(oi);
            if ep.timeout_armed && !ep.ops.iter().any(|o| o.live && o.awaits_completions()) {
                if let Some(k) = ep.timeout_key.take() {
                    cx.cancel(k);
                }
                ep.timeout_armed = false;
            }
            if sg != NONE {
                // A segment of a scatter-gather DMA: the DMA is done with its last.
                let g = &mut ep.sg[sg as usize];
                let s = sg_off as usize;
                if let Some(dst) = g.buf.get_mut(s..s + data.len()) {
                    dst.copy_from_slice(&data);
                }
                self.pool.keep_spare(data);
                g.ok &= ok;
                g.reset |= silent;
                g.left -= 1;
                if g.left > 0 {
                    None
                } else {
                    ep.free_sg.push(sg);
                    Some((g.id, g.ok, std::mem::take(&mut g.buf), g.func, g.reset))
                }
            } else {
                Some((id, ok, data, func, silent))
            }
        };
        if self.ats_any {
            self.ats_dma_finished(node, cx);
        }
        // (None: a segment of a scatter-gather DMA that has more to finish.)
        let Some((id, ok, data, func, silent)) = done else {
            return;
        };
        if silent {
            // Dropped by a Function Level Reset: the model was told then.
            return;
        }
        self.call_ep_fn(node, func, cx, |m, cx| m.dma_done(id, ok, &data, cx));
        self.pool.keep_spare(data);
    }
}
