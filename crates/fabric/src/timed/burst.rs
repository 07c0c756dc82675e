//! Burst mode (`SimConfig::burst`): a DMA engine's back-to-back memory writes and read
//! requests, and the root complex's completions of one read request, travel as one
//! unit.
//!
//! A saturated DMA write stream puts one MPS-sized MWr after another on every link of
//! its path. In the exact model each of them is its own record, queue entry, wire
//! transmission, arrival event, sequence number, replay-buffer entry, credit return
//! and host-memory write. In burst mode the DMA engine groups up to `burst`
//! consecutive MPS-sized writes of one DMA that lie in one 4 KiB page of host memory
//! into one record (`Tlp::pieces` TLPs of `len / pieces` bytes each), and the fabric
//! handles it as a unit that stands for that many TLPs. Likewise the root complex
//! groups the consecutive whole-MPS completions (CplD) of one memory read request
//! from host memory (each piece keeps its own Byte Count and Lower Address), and the
//! DMA engine the whole MRRS-sized read requests (MRd) of one DMA in one page whose
//! tags, taken from its free list as the exact model's engine takes them, happen to
//! be consecutive (the record keeps the first tag and their direction in
//! `Tlp::tag_span`). The root complex answers such a burst with completion bursts
//! that each answer several of its requests (`tag_span`: pieces per request; each
//! piece its own tag and Byte Count), or, where they may not, each request as if it
//! had come alone:
//!
//! * **Wire**: the pieces are serialized back to back, each with its own header,
//!   framing, sequence number and LCRC: the wire time is exactly that of the same TLPs
//!   sent back to back (integer accounting, no rounding drift), and the trace and
//!   captures hold one record per piece with its own start time and sequence number.
//! * **Data link layer**: the burst takes `pieces` consecutive sequence numbers and
//!   `pieces` places in the replay buffer; the receiver takes it when its last piece
//!   has arrived, so ACKs cover whole bursts. The replay timer of a burst runs from
//!   its last piece's transmission (also when an ACK restarts it while the burst is
//!   still on the wire).
//! * **DLLPs go between the pieces**, as the exact model sends a DLLP after the TLP
//!   on the wire: one queued on a direction that is sending a burst goes out at the
//!   end of the piece on the wire (or right after the DLLPs already sent there). It is
//!   sent and its arrival scheduled at once; the burst's later pieces, its end, the
//!   wire's next transmission and the burst's arrival all move on by its wire time,
//!   and so do the pieces' trace records.
//! * **Flow control**: it needs (and returns) one header credit per piece and the data
//!   credits of all of them; a receiver sends UpdateFC at once when its transmitter is
//!   short of a whole burst's credits.
//! * **Switches and the root complex** store and forward the whole burst; the root
//!   complex writes a write burst's data to host memory in one piece, and a DMA engine
//!   takes a completion burst as the completions it stands for (a device that sent
//!   the read as a raw TLP gets each completion's bytes).
//!
//! What changes against the exact model, by design: the receiver of each link sees a
//! burst's earlier pieces only when its last piece arrives (up to `pieces - 1` TLP
//! times later), and ACKs and UpdateFCs are per burst (fewer DLLPs: where reads and
//! writes share a direction, its data gets their wire time). Throughput of saturated
//! streams is the same (the wire carries the same TLPs); latency through each
//! store-and-forward hop grows by the burst's extra pieces. The tests compare both
//! modes (`tests/it/burst.rs`).
//!
//! Burst mode turns itself off (`Engine::burst_max` = `cpl_burst_max` = 1) where its
//! coarser granularity would change what is modelled: error injection of any kind
//! (LCRC, BER, DLLP, poisoning, switch-internal errors), ECRC, cut-through switches,
//! peer-to-peer splitting, an IOMMU, ATS/PRI and ASPM. Only writes to host memory are
//! grouped (never peer-to-peer writes, the MSI range, poisoned or PASID writes), only
//! the root complex's successful, clean completions of memory reads, and only plain
//! read requests to host memory (no AtomicOps, no PASID, none that straddle the NUMA
//! boundary; none at all with a per-line memory latency or the LLC model, where the
//! pieces' latencies would differ).
//!
//! **Burst size.** A burst is at most a quarter of any replay buffer, and small
//! enough that no transmitter waits for credits where single TLPs would not. A
//! transmitter wants to start a burst as the one before ends; the receiver then holds
//! that one and every earlier one whose credits are not back yet (`credit lag`: the
//! receiving node's latency, the UpdateFC's trip back — after at most one TLP on the
//! wire the other way, burst or not — and the UpdateFC timer). So with bursts of `b`
//! TLPs of `T` wire time each, each finite buffer of the class (headers and data)
//! must hold `ceil(lag / (b·T)) + 1` bursts. Writes (going up) and completions
//! (going down, at most MRRS / MPS times the read-request burst) are sized each on
//! its own. Read requests (at most 8, and 4096 / MRRS) go up no faster than their
//! completions come down, so for them `T` is the wire time of one request's
//! completions, and only header credits count. At Gen3 x8, MPS 256, into the root
//! complex with the default 8 KiB buffers this allows a whole 4 KiB page of writes
//! (16), of completions (16) and of read requests (8, MRRS 512); through a switch at
//! Gen4 x16, writes and completions in 4s and read requests in 8s. A first rule,
//! bursts of a quarter of the buffer, left a Gen4 x16, MPS 512 stream through a
//! switch 13 % slower (its transmitter waited out UpdateFC timers); a second, four
//! bursts beside the bytes carried during the receiver's latency, was safe but
//! allowed only 7 at Gen3 x8. While DLLPs waited for a burst's end, write and
//! completion bursts had to be sized together (each delayed the other's UpdateFCs),
//! and reads through a switch at Gen4 x16 got no completion bursts. `tests/it/burst.rs`
//! compares the stall time, replays and end of both modes over 6 generations, 4 widths,
//! 3 payload sizes and several latencies, with and without a switch, for writes, reads
//! and read/write mixes with MRRS 512 and 4096.
//!
//! **Scatter bursts.** A device model such as the NIC asks for many small reads at
//! one instant (a batch of descriptors, then the frames they point to), each its own
//! DMA at its own address. In burst mode the DMA engine builds each of their read
//! requests as the exact model does (tag included) but holds them while the model's
//! calls of that instant run, and while it takes a burst of completions; when the
//! hold ends, or before the device sends any other TLP, it sends runs of reads of one
//! length by one function, each one completion of clean host memory (DW-aligned, at
//! most MPS, in one page; see `Engine::scatter_piece`), as one record:
//! `Detail::Scatter` names its piece list in the pool, each piece's address and tag.
//! The root complex answers it with scatter bursts of completions, each piece its
//! own tag, Lower Address and Byte Count, and the engine takes them piece by piece as
//! if they had come alone. A scatter burst is sized as the other read bursts are
//! (requests go up no faster than their one completion each comes down;
//! `Engine::scatter_limits`), and it leaves half the root port's non-posted header
//! credits free when it is formed, so that the device's other reads are not held up
//! behind it. Its pieces are the exact model's TLPs, in the same order, with the same
//! sequence numbers: `tests/it/scatter.rs` compares the TLPs on every link with the
//! exact model's, and `tests/it/nic.rs` the NIC's bytes and throughput.

use super::engine::Engine;
use super::event::{Dllp, Ev, Wire, WireItem};
use super::fault::FaultKind;
use super::link::dllp_repr;
use super::node::state::NodeKind;
use super::packed::PackedEv;
use super::poison::state::Poison;
use super::tlp::Detail;
use super::tlp::{Dest, Kind, Tlp, CPL, NONE, NP, P, TAGS_DOWN};
use super::trace::TraceKind;
use crate::functional::{FnId, Origin, MSI_RANGE};
use crate::phy::LinkTiming;
use pcielab_sim::{Context, SimDuration, SimTime};
use pcielab_wire::Bdf;
use pcielab_wire::CplStatus;

impl Engine {
    /// Sets `burst_max` and `cpl_burst_max` from the configuration and the fabric's
    /// buffers (at build).
    pub(crate) fn init_burst(&mut self) {
        let c = &self.cfg;
        let exact_only = c.error_rate > 0.0
            || c.ber > 0.0
            || c.dllp_error_rate > 0.0
            || c.poison_rate > 0.0
            || c.switch_error_rate > 0.0
            || c.ecrc
            || c.cut_through
            || c.p2p_split.is_some()
            || c.iommu.is_some()
            || c.ats
            || c.pri
            || c.aspm != 0;
        self.burst_max = 1;
        self.cpl_burst_max = 1;
        self.scatter_max = 1;
        if c.burst <= 1 || exact_only {
            return;
        }
        let replay = self
            .dirs
            .iter()
            .map(|d| d.replay.capacity() as u64 / 4)
            .min();
        let start = (c.burst as u64).min(replay.unwrap_or(1)).max(1);
        // Read requests: those of one DMA in one page (at most 8 with MRRS 512), where
        // the root complex's memory latency is the same for each (no per-line part,
        // no LLC model).
        let mut rd = start.min((4096 / c.mrrs.max(1) as u64).max(1)).min(8);
        self.scatter_fits.clear();
        self.scatter_max = start.min(u8::MAX as u64) as u32;
        if c.mem_per_line.as_ps() > 0 || c.llc_lines > 0 || !c.mem_tail.is_zero() {
            rd = 1;
            self.scatter_max = 1;
        }
        while rd > 1 && !self.read_bursts_fit(rd) {
            rd -= 1;
        }
        // Writes go up in bursts, completions down (those of one request, or of
        // several requests of a burst); the DLLPs that return credits go between the
        // pieces of bursts the other way, so each is sized on its own.
        let per_read = (c.mrrs / c.mps).max(1) as u64;
        let (mut p, mut cpl) = (start, start.min(per_read * rd));
        while p > 1 && !self.bursts_fit(P, p) {
            p -= 1;
        }
        while cpl > 1 && !self.bursts_fit(CPL, cpl) {
            cpl -= 1;
        }
        self.burst_max = p as u32;
        self.cpl_burst_max = cpl as u32;
        self.rd_burst_max = rd as u32;
    }

    /// Whether bursts of `b` read requests never make a transmitter wait for
    /// non-posted header credits where single requests would not. Requests go up at
    /// most as fast as their completions come down (MRRS bytes each): a burst of `b`
    /// every `b` completion times, and the receiver holds those whose credits are not
    /// back yet, as in [`Engine::bursts_fit`].
    fn read_bursts_fit(&self, b: u64) -> bool {
        let (mrrs, mps) = (self.cfg.mrrs as u64, self.cfg.mps as u64);
        // One request's completions: MPS-sized ones, or one of MRRS bytes (3-DW header).
        self.read_bursts_fit_for(b, mrrs.div_ceil(mps), 12 + mrrs.min(mps), true)
    }

    /// [`Engine::read_bursts_fit`] for requests answered by `per_read` completions
    /// of `cpl_bytes` (header and data) each; on the links above endpoints only if
    /// `first_hops`.
    fn read_bursts_fit_for(&self, b: u64, per_read: u64, cpl_bytes: u64, first_hops: bool) -> bool {
        self.dirs.iter().enumerate().all(|(di, d)| {
            let hdr_buf = d.rx_buf.hdr[NP] as u64;
            if di & 1 == 0 || hdr_buf == 0 {
                return true; // requests go up; infinite credits
            }
            if !first_hops && matches!(self.nodes[d.from as usize].kind, NodeKind::Ep(_)) {
                return true; // (sized when the burst is formed)
            }
            let t = &self.dirs[di ^ 1].timing;
            let cpl_ps = per_read * wire_ps(t, t.tlp_wire_bytes(cpl_bytes));
            let held = self.credit_lag_ps(di).div_ceil(b * cpl_ps);
            (held + 1) * b <= hdr_buf
        })
    }

    /// Burst mode is on (writes, read requests or completions may travel in bursts).
    #[inline]
    pub(crate) fn bursts_on(&self) -> bool {
        self.burst_max
            .max(self.cpl_burst_max)
            .max(self.rd_burst_max)
            > 1
    }

    /// The largest scatter bursts of read requests and of their completions for
    /// pieces of `len` bytes (1: none), sized as the other bursts are: requests go
    /// up no faster than their one completion each (3-DW header, `len` bytes) comes
    /// down, and completions are sized for their own wire time and data.
    pub(crate) fn scatter_limits(&mut self, len: u32) -> (u32, u32) {
        if self.scatter_max <= 1 {
            return (1, 1);
        }
        if let Some(&(_, rd, cpl)) = self.scatter_fits.iter().find(|f| f.0 == len) {
            return (rd, cpl);
        }
        let fit = self.scatter_fit(len);
        self.scatter_fits.push((len, fit.0, fit.1));
        fit
    }

    /// [`Engine::scatter_limits`], worked out anew.
    pub(crate) fn scatter_fit(&self, len: u32) -> (u32, u32) {
        if self.scatter_max <= 1 {
            return (1, 1);
        }
        let (bytes, start) = (12 + len as u64, self.scatter_max as u64);
        let mut rd = start;
        while rd > 1 && !self.read_bursts_fit_for(rd, 1, bytes, false) {
            rd -= 1;
        }
        let mut cpl = start;
        while cpl > 1 && !self.bursts_fit_for(CPL, cpl, bytes, len as u64) {
            cpl -= 1;
        }
        (rd as u32, cpl as u32)
    }

    /// Whether a read of `len` bytes at `addr` from `f` may be a piece of a scatter
    /// burst whose first piece is at `first`: one whole completion of clean host
    /// memory (DW-aligned, at most MPS, in one page), the same header size as the
    /// first piece's, and on the same side of the NUMA boundary.
    pub(crate) fn scatter_piece(
        &mut self,
        (f, me): (FnId, Bdf),
        (addr, len): (u64, u32),
        first: u64,
    ) -> bool {
        let l = len as u64;
        let fits = len > 0
            && len <= self.cfg.mps as u32
            && (addr | l) & 3 == 0
            && (addr & 0xfff) + l <= 4096
            && (addr > u32::MAX as u64) == (first > u32::MAX as u64);
        let numa = self
            .cfg
            .numa_remote_base
            .is_some_and(|b| (addr >= b) != (first >= b) || (addr >= b) != (addr + l > b));
        fits && !numa && self.host_span(f, me, Kind::MRd, (addr, addr + l))
    }

    /// Answers scatter burst `id` of read requests to host memory (see
    /// [`Engine::scatter_piece`]): each piece with one completion of the data at its
    /// own address, with its own tag, Lower Address and Byte Count, in scatter bursts
    /// of completions as large as [`Engine::scatter_limits`] allows; each piece as if
    /// it had come alone where lines of host memory are poisoned.
    pub(crate) fn answer_scatter_read(&mut self, id: u32, cx: &mut Context<'_, PackedEv>) {
        let t = self.pool.tlps[id as usize].clone();
        let plen = t.len / t.pieces.max(1) as u32;
        let own = t.scatter() as usize;
        let list = std::mem::take(&mut self.pool.scatter[own]);
        let host = self.rc.bdf;
        let (_, per) = self.scatter_limits(plen);
        let mut buf = std::mem::take(&mut self.scratch);
        if per < 2 || !self.rc.poison_lines.is_empty() {
            for &(addr, tag) in &list {
                let piece = Tlp {
                    tag,
                    addr,
                    len: plen,
                    pieces: 1,
                    detail: Detail::None,
                    ..t.clone()
                };
                buf.clear();
                buf.resize(plen as usize, 0);
                self.fabric.host_memory.read(addr, &mut buf);
                let poison = if self.rc.poison_lines.is_empty() {
                    Poison::Clean
                } else {
                    Poison::HostLines(addr)
                };
                self.send_completions(Origin::Host, host, &piece, CplStatus::Sc, &buf, poison, cx);
            }
        } else {
            for group in list.chunks(per as usize) {
                buf.clear();
                buf.resize(plen as usize * group.len(), 0);
                for (&(addr, _), d) in group.iter().zip(buf.chunks_exact_mut(plen as usize)) {
                    self.fabric.host_memory.read(addr, d);
                }
                let sc = self.pool.alloc_scatter();
                self.pool.scatter[sc as usize].extend_from_slice(group);
                let (addr, tag) = group[0];
                let c = Tlp {
                    kind: Kind::CplD,
                    completer: host,
                    tag,
                    len: plen * group.len() as u32,
                    detail: Detail::Scatter(sc),
                    dest: Dest::Rc,
                    data: self.pool.alloc_payload(&buf),
                    pieces: group.len() as u8,
                    ..Tlp::new(Kind::Cpl, t.requester, addr, 0)
                };
                if let Err(e) = self.inject(Origin::Host, c, t.requester, cx) {
                    self.pool.free_scatter(sc);
                    self.fault(
                        FaultKind::NotRoutable,
                        format!("completion not routable: {e}"),
                    );
                }
            }
        }
        self.scratch = buf;
        self.pool.scatter[own] = list;
    }

    /// Wire time of an MPS-sized TLP (4-DW header) on direction `di`.
    fn mps_tlp_ps(&self, di: usize) -> u64 {
        let t = &self.dirs[di].timing;
        wire_ps(t, t.tlp_wire_bytes(16 + self.cfg.mps as u64))
    }

    /// Whether bursts of `b` TLPs of class `c` (P: writes, which travel upstream;
    /// CPL: completions, downstream) never make a transmitter wait for credits where
    /// single TLPs would not.
    ///
    /// A transmitter wants to start a burst as the one before ends. The receiver then
    /// holds that one and every earlier one whose credits are not back yet (sent less
    /// than `lag` ago): the buffer must also have room for the new one.
    fn bursts_fit(&self, c: usize, b: u64) -> bool {
        let mps = self.cfg.mps as u64;
        self.bursts_fit_for(c, b, 16 + mps, mps)
    }

    /// [`Engine::bursts_fit`] for pieces of `bytes` (header and data) carrying
    /// `data` bytes each.
    fn bursts_fit_for(&self, c: usize, b: u64, bytes: u64, data: u64) -> bool {
        self.dirs.iter().enumerate().all(|(di, d)| {
            // Even directions go downstream, odd ones upstream.
            if (di & 1 == 1) != (c == P) {
                return true;
            }
            let hdr_buf = d.rx_buf.hdr[c] as u64;
            let data_buf = d.rx_buf.data[c] as u64 * 16;
            if hdr_buf == 0 && data_buf == 0 {
                return true; // infinite credits: nothing to wait for
            }
            let lag = self.credit_lag_ps(di);
            let t = &self.dirs[di].timing;
            let held = lag.div_ceil(b * wire_ps(t, t.tlp_wire_bytes(bytes)));
            let need = (held + 1) * b;
            let data = data.div_ceil(16) * 16;
            (hdr_buf == 0 || need <= hdr_buf) && (data_buf == 0 || need * data <= data_buf)
        })
    }

    /// The time from the end of a TLP's (or burst's) arrival at the receiver of
    /// direction `di` until its transmitter can count the credits it frees again:
    /// the receiving node's latency, the UpdateFC DLLP's trip back (propagation both
    /// ways, its wire time, and at most one MPS-sized TLP it may wait behind on the
    /// reverse direction), and the receiver's UpdateFC timer (an UpdateFC that is not
    /// urgent waits for it).
    fn credit_lag_ps(&self, di: usize) -> u64 {
        let c = &self.cfg;
        let d = &self.dirs[di];
        let rev = &self.dirs[di ^ 1];
        let hold_ps = match self.nodes[d.to as usize].kind {
            NodeKind::Switch => c.switch_latency.as_ps(),
            NodeKind::Rc => c.rc_latency.as_ps(),
            NodeKind::Ep(_) => c.ep_latency.as_ps(),
        };
        let dllp = wire_ps(&rev.timing, rev.timing.dllp_wire_bytes());
        hold_ps + 2 * d.prop_ps + self.mps_tlp_ps(di ^ 1) + dllp + d.fc_ps
    }

    /// How many MPS-sized DMA writes, the first of which is at `addr` with `len`
    /// bytes and `rest` bytes of the DMA after it, `node`'s function `f` may send as
    /// one burst: 1 unless burst mode is on and they are whole-MPS writes to host
    /// memory in one 4 KiB page. (Writes are split at MPS-aligned addresses: after a
    /// whole-MPS one, every following one is whole until the last.)
    pub(crate) fn burst_pieces(
        &mut self,
        f: FnId,
        me: Bdf,
        (addr, len): (u64, u32),
        rest: u64,
    ) -> u32 {
        let mps = self.cfg.mps as u64;
        if self.burst_max <= 1 || len as u64 != mps {
            return 1;
        }
        let in_page = (4096 - (addr & 0xfff)) / mps;
        let n = (self.burst_max as u64).min(in_page).min(1 + rest / mps);
        if n <= 1 {
            return 1;
        }
        let Some(end) = addr.checked_add(n * mps) else {
            return 1; // (the DMA ends at the top of the address space)
        };
        if self.host_span(f, me, Kind::MWr, (addr, end)) {
            n as u32
        } else {
            1
        }
    }

    /// How many whole MRRS-sized read requests, the first of which is at `addr` with
    /// `rest` bytes of the DMA after it and tag `tag`, `node`'s function `f` may send
    /// as one burst, with the tags on top of `free` (popped last first): 1 unless
    /// burst mode groups reads, they lie in one 4 KiB page of host memory, and the
    /// tags they would take are consecutive (returns the count, and whether the tags
    /// go down).
    pub(crate) fn read_burst_pieces(
        &mut self,
        (f, me): (FnId, Bdf),
        (addr, len, rest): (u64, u32, u64),
        tag: u16,
        free: &[u16],
    ) -> (u32, bool) {
        let mrrs = self.cfg.mrrs as u64;
        if self.rd_burst_max <= 1 || len as u64 != mrrs || addr % mrrs != 0 {
            return (1, false);
        }
        let in_page = (4096 - (addr & 0xfff)) / mrrs;
        let n = (self.rd_burst_max as u64)
            .min(in_page)
            .min(1 + rest / mrrs)
            .min(1 + free.len() as u64);
        // The tags the exact model's engine would take next, in that order.
        let next = |i: u64| free[free.len() - i as usize] as u32;
        let (t, down) = (tag as u32, n > 1 && next(1) + 1 == tag as u32);
        let nth = |k: u64| {
            if down {
                t.wrapping_sub(k as u32)
            } else {
                t + k as u32
            }
        };
        let mut k = 1;
        while k < n && next(k) == nth(k) {
            k += 1;
        }
        let Some(end) = addr.checked_add(k * mrrs) else {
            return (1, false); // (the DMA ends at the top of the address space)
        };
        let numa_split = self
            .cfg
            .numa_remote_base
            .is_some_and(|b| (addr >= b) != (end > b));
        if k > 1 && !numa_split && self.host_span(f, me, Kind::MRd, (addr, end)) {
            (k as u32, down)
        } else {
            (1, false)
        }
    }

    /// Whether `[addr, end)` (within one page: routes go by page) is host memory for
    /// requests of `kind` from `f`, clear of the interrupt range.
    fn host_span(&mut self, f: FnId, me: Bdf, kind: Kind, (addr, end): (u64, u64)) -> bool {
        let host = matches!(
            self.route(Origin::Function(f), kind, addr, me),
            Ok((_, _, Dest::HostMemory))
        );
        host && (end <= MSI_RANGE.0 || addr > MSI_RANGE.1)
    }

    /// A DLLP about to be queued on direction `d` while a burst is on its wire goes
    /// between the burst's pieces, at the end of the piece on the wire (or right after
    /// the DLLPs already sent there), as the exact model sends it after the TLP on the
    /// wire: it is sent and its arrival scheduled now, the wire's next transmission
    /// starts its wire time later, and so does the burst's arrival (`postponed`).
    /// Returns false (the DLLP queues as usual) unless a burst is on the wire with
    /// more than its last piece to go, nothing queued behind it.
    pub(crate) fn dllp_into_burst(
        &mut self,
        d: u16,
        dl: Dllp,
        background: bool,
        cx: &mut Context<'_, PackedEv>,
    ) -> bool {
        let now = cx.now().as_ps();
        let dir = &mut self.dirs[d as usize];
        let (start, piece, pieces, seq) = dir.burst_tx;
        let (shift, ins_end) = dir.burst_ins;
        // (Wire units from here on: no rounding.)
        let end = start + piece * pieces as u128 + shift;
        if pieces < 2 || end != dir.free_at || now >= dir.free_at_ps || !dir.dllq.is_empty() {
            return false;
        }
        // The piece boundaries lie `shift` after the burst's own, once DLLPs went in.
        let from = dir.timing.ps_to_units(now).max(ins_end).max(start + shift);
        let k = (from - start - shift).div_ceil(piece.max(1)).max(1);
        if k >= pieces as u128 {
            return false; // the last piece is on the wire: the DLLP follows the burst
        }
        let at = start + shift + k * piece;
        let bytes = dir.timing.dllp_wire_bytes();
        let units = dir.timing.units(bytes);
        let old_free_ps = dir.free_at_ps;
        dir.free_at += units;
        dir.free_at_ps = dir.timing.units_to_ps_ceil(dir.free_at);
        dir.burst_ins = (shift + units, at + units);
        let at_ps = dir.timing.units_to_ps_ceil(at);
        let done_ps = dir.timing.units_to_ps_ceil(at + units);
        let moved_ps = dir.free_at_ps - old_free_ps;
        match dir.postponed.back_mut() {
            Some(b) if b.0 == seq => b.1 += moved_ps,
            _ => dir.postponed.push_back((seq, moved_ps)),
        }
        dir.counters.wire_bytes += bytes;
        dir.counters.busy_ps += done_ps - at_ps;
        match dl {
            Dllp::Ack(_) => dir.counters.acks += 1,
            Dllp::Nak(_) => dir.counters.naks += 1,
            Dllp::Fc { .. } => dir.counters.fc_dllps += 1,
        }
        let arrive = done_ps + dir.prop_ps;
        if let Some(tr) = self.trace.as_mut() {
            // The burst's later pieces move on by the DLLP's wire time.
            let half = dir.timing.units_to_ps_ceil(piece / 2);
            tr.shift_dir_after(d, at_ps.saturating_sub(half), moved_ps);
            let raw = dllp_repr(dl).to_bytes().unwrap_or([0; 6]);
            tr.push(SimTime::from_ps(at_ps), d, TraceKind::Dllp, &raw);
        }
        let item = WireItem(Wire::Dllp { d: dl, bad: false }, false);
        if background {
            cx.schedule_background_at(SimTime::from_ps(arrive), Ev::Arrive(d, item));
        } else {
            cx.schedule_at(SimTime::from_ps(arrive), Ev::Arrive(d, item));
        }
        true
    }

    /// A TLP arrives on `d`: when it is a burst that DLLPs went between, its arrival is
    /// scheduled again that much later (returns true; the wire's own work at this
    /// instant goes on).
    #[cold]
    #[inline(never)]
    pub(crate) fn postpone(&mut self, d: u16, w: Wire, cx: &mut Context<'_, PackedEv>) -> bool {
        let Wire::Tlp { seq, .. } = w else {
            return false;
        };
        let dir = &mut self.dirs[d as usize];
        match dir.postponed.front() {
            Some(&(s, ps)) if s == seq => {
                dir.postponed.pop_front();
                let item = WireItem(w, false);
                cx.schedule_in(SimDuration::from_ps(ps), Ev::Arrive(d, item));
                true
            }
            _ => false,
        }
    }

    /// When the replay timer of `d`, restarted at `now` by an ACK with TLPs left
    /// unacknowledged, starts to run: at the last piece of the oldest of them when it
    /// is a burst still on the wire (its receiver acknowledges it only once the last
    /// piece is in, where the exact model's receiver acknowledges each TLP), else now.
    pub(crate) fn replay_restart(&self, d: u16, now: SimTime) -> SimTime {
        let dir = &self.dirs[d as usize];
        let (start, piece, pieces, seq) = dir.burst_tx;
        match dir.replay.front() {
            Some((s, _)) if pieces > 1 && s == seq => {
                let last = start + dir.burst_ins.0 + piece * (pieces as u128 - 1);
                now.max(SimTime::from_ps(dir.timing.units_to_ps_ceil(last)))
            }
            _ => now,
        }
    }

    /// Answers burst of read requests `req` (`data`: all it asked for): with
    /// completion bursts that each answer several whole requests where the completion
    /// burst size allows two or more and every completion is a whole MPS of clean
    /// host memory, else each piece as if it had come alone (its own tag and share of
    /// the data).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn answer_read_burst(
        &mut self,
        origin: Origin,
        completer: Bdf,
        req: &Tlp,
        status: CplStatus,
        data: &[u8],
        poison: Poison,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let n = req.pieces as u32;
        let plen = req.len / n;
        let mps = self.cfg.mps as u32;
        let per = plen / mps.max(1);
        let reqs = self.cpl_burst_max / per.max(1);
        let whole = plen % mps == 0 && req.addr % mps as u64 == 0 && (1..0x80).contains(&per);
        if !whole
            || req.scatter() != NONE
            || reqs < 2
            || origin != Origin::Host
            || status != CplStatus::Sc
            || !matches!(poison, Poison::Clean)
            || req.pasid != NONE
            || data.len() != req.len as usize
        {
            for i in 0..n {
                let (addr, tag) = match req.scatter() {
                    NONE => (req.addr + (i * plen) as u64, req.piece_tag(i)),
                    sc => self.pool.scatter[sc as usize][i as usize],
                };
                let piece = Tlp {
                    tag,
                    addr,
                    len: plen,
                    pieces: 1,
                    tag_span: 0,
                    detail: Detail::None,
                    ..req.clone()
                };
                let (s, e) = ((i * plen) as usize, ((i + 1) * plen) as usize);
                let d = data.get(s..e.min(data.len())).unwrap_or(&[]);
                let poison = match poison {
                    Poison::HostLines(p) => Poison::HostLines(p + (i * plen) as u64),
                    other => other,
                };
                self.send_completions(origin, completer, &piece, status, d, poison, cx);
            }
            return;
        }
        let mut r = 0;
        while r < n {
            let k = reqs.min(n - r);
            let (s, e) = ((r * plen) as usize, ((r + k) * plen) as usize);
            let t = Tlp {
                kind: Kind::CplD,
                completer,
                tag: req.piece_tag(r),
                len: k * plen,
                detail: Detail::Completion {
                    byte_count: plen as u16,
                    status,
                },
                dest: Dest::Rc,
                data: self.pool.alloc_payload(&data[s..e]),
                pieces: (k * per) as u8,
                tag_span: per as u8 | (req.tag_span & TAGS_DOWN),
                ..Tlp::new(Kind::Cpl, req.requester, req.addr + (r * plen) as u64, 0)
            };
            if let Err(e) = self.inject(origin, t, req.requester, cx) {
                self.fault(
                    FaultKind::NotRoutable,
                    format!("completion not routable: {e}"),
                );
            }
            r += k;
        }
    }

    /// Wire bytes of TLP record `id` on direction `di` (all its pieces).
    #[inline(always)]
    pub(crate) fn wire_bytes(&self, di: usize, id: u32) -> u64 {
        let t = &self.pool.tlps[id as usize];
        let timing = &self.dirs[di].timing;
        // Framing, sequence number and LCRC per piece.
        let framing = timing.tlp_wire_bytes(0);
        t.tlp_bytes() + framing * t.pieces as u64
    }

    /// For a burst on direction `di`: the time from its first piece's start of
    /// transmission to its last piece's.
    #[cold]
    pub(crate) fn burst_lead(&self, di: usize, id: u32) -> SimDuration {
        let n = self.pool.tlps[id as usize].pieces as u64;
        let timing = &self.dirs[di].timing;
        let piece = self.wire_bytes(di, id) / n;
        SimDuration::from_ps(timing.units_to_ps_ceil(timing.units(piece * (n - 1))))
    }

    /// The TLPs record `id` stands for, as raw bytes (one unless it is a burst): each
    /// piece its own address, length and, for completions, Byte Count.
    pub(crate) fn piece_bytes(&self, id: u32) -> Vec<Vec<u8>> {
        let t = &self.pool.tlps[id as usize];
        let payload = self.payload(id);
        let n = t.pieces.max(1) as u32;
        if n == 1 {
            return vec![Self::tlp_bytes_of(t, payload)];
        }
        let plen = t.len / n;
        if t.scatter() != NONE {
            // Each piece at its own address, with its own tag; a completion returns
            // all its request asked for.
            let list = &self.pool.scatter[t.scatter() as usize];
            return list
                .iter()
                .zip(
                    payload
                        .chunks(plen as usize)
                        .map(Some)
                        .chain(std::iter::repeat(None)),
                )
                .map(|(&(addr, tag), data)| {
                    let mut piece = t.clone();
                    piece.pieces = 1;
                    piece.detail = Detail::None;
                    piece.addr = addr;
                    piece.len = plen;
                    piece.tag = tag;
                    if t.kind.is_completion() {
                        piece.set_byte_count(plen as u16);
                    }
                    Self::tlp_bytes_of(&piece, data.unwrap_or(&[]))
                })
                .collect();
        }
        (0..n)
            .map(|i| {
                let mut piece = t.clone();
                piece.pieces = 1;
                piece.addr = t.addr + (i * plen) as u64;
                piece.len = plen;
                if t.kind.is_completion() {
                    // The bytes still to come, this completion's included.
                    piece.set_byte_count(t.piece_byte_count(i));
                }
                piece.tag = t.piece_tag(i);
                piece.tag_span = 0;
                let (s, e) = ((i * plen) as usize, ((i + 1) * plen) as usize);
                let data = payload.get(s..e.min(payload.len())).unwrap_or(&[]);
                Self::tlp_bytes_of(&piece, data)
            })
            .collect()
    }

    /// Records every piece of burst `id`, about to be sent on `d` with first sequence
    /// number `seq`, in the trace: its own bytes, start time and sequence number.
    #[cold]
    #[inline(never)]
    pub(crate) fn trace_burst(
        &mut self,
        d: u16,
        seq: u32,
        id: u32,
        replay: bool,
        bad: bool,
        now: SimTime,
    ) {
        let di = d as usize;
        let n = self.pool.tlps[id as usize].pieces as u32;
        let piece_units = {
            let timing = &self.dirs[di].timing;
            timing.units(self.wire_bytes(di, id) / n as u64)
        };
        // Where the transmission starts, in the wire's units (as `transmit` decides).
        let dir = &self.dirs[di];
        let now_u = dir.timing.ps_to_units(now.as_ps());
        let start_u = if now_u < dir.free_at + dir.timing.units_per_ps() {
            dir.free_at
        } else {
            now_u
        };
        let first_ps = now.max(SimTime::from_ps(dir.free_at_ps));
        let records: Vec<(SimTime, u32, Vec<u8>)> = self
            .piece_bytes(id)
            .into_iter()
            .enumerate()
            .map(|(i, raw)| {
                let at = if i == 0 {
                    first_ps
                } else {
                    let u = start_u + piece_units * i as u128;
                    SimTime::from_ps(dir.timing.units_to_ps_ceil(u))
                };
                (at, seq.wrapping_add(i as u32), raw)
            })
            .collect();
        if let Some(tr) = self.trace.as_mut() {
            for (at, s, raw) in records {
                let kind = TraceKind::Tlp {
                    seq: (s & 0xfff) as u16,
                    replay,
                    corrupted: bad,
                };
                tr.push(at, d, kind, &raw);
            }
        }
    }
}

/// Wire time of `bytes` on a link direction, rounded up to the picosecond.
fn wire_ps(t: &LinkTiming, bytes: u64) -> u64 {
    t.units_to_ps_ceil(t.units(bytes))
}
