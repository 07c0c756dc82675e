//! The root complex: host memory (its access latency, the LLC/DDIO model, writes
//! with page loans), completions of host requests, and peer-to-peer requests it
//! splits.

use super::engine::*;
use super::fault::FaultKind;
use super::packed::PackedEv;
use super::poison::state::Poison;
use super::rc::state::*;
use super::regs::*;
use super::tlp::*;
use crate::functional::{Interrupt, Origin, MSI_RANGE};
use pcielab_sim::{Context, SimDuration};
use pcielab_wire::CplStatus;

pub(crate) mod state;

impl Engine {
    /// Host memory latency of a DMA read of `len` bytes at `addr`: the fixed part (or
    /// the LLC hit latency when every line is cached), plus the per-line part, plus
    /// the NUMA-remote penalty. Missing lines are brought into the LLC.
    pub(crate) fn memory_read_latency(&mut self, addr: u64, len: u64) -> SimDuration {
        let first = addr / 64;
        let lines = (addr % 64 + len).div_ceil(64).max(1);
        let thrash = self.cfg.cache == crate::host::model::CacheState::Thrash;
        let mut all_hit = self.cfg.llc_lines > 0 && !thrash;
        if self.cfg.llc_lines > 0 && !thrash {
            for l in first..first + lines {
                if !self.rc.llc_set.contains(&l) {
                    all_hit = false;
                    self.llc_insert(l);
                }
            }
        }
        let base = if all_hit {
            self.cfg.llc_hit_latency
        } else {
            self.cfg.mem_latency
        };
        let remote = match self.cfg.numa_remote_base {
            Some(b) if addr >= b => self.cfg.numa_penalty,
            _ => SimDuration::ZERO,
        };
        let tail = self.cfg.mem_tail.sample(&mut self.rc.host_rng);
        base + SimDuration::from_ps(self.cfg.mem_per_line.as_ps() * lines) + remote + tail
    }

    /// Puts a line into the LLC (FIFO replacement), as DDIO does for DMA writes.
    pub(crate) fn llc_insert(&mut self, line: u64) {
        if self.cfg.llc_lines == 0 || !self.rc.llc_set.insert(line) {
            return;
        }
        self.rc.llc_fifo.push_back(line);
        while self.rc.llc_fifo.len() > self.cfg.llc_lines {
            if let Some(old) = self.rc.llc_fifo.pop_front() {
                self.rc.llc_set.remove(&old);
            }
        }
    }

    /// The root complex splits a peer-to-peer request into `piece`-byte requests (as
    /// NetTLP observed on an Intel root complex: a 512-byte MRd became eight 64-byte
    /// MRds with new tags, and the completions were rebuilt into MPS-sized ones).
    pub(crate) fn p2p_split(&mut self, id: u32, piece: u32, cx: &mut Context<'_, PackedEv>) {
        let t = self.pool.tlps[id as usize].clone();
        // The original leaves the root port's receive buffer.
        if t.ingress != NO_DIR {
            self.pool.tlps[id as usize].ingress = NO_DIR;
            self.return_credits(t.ingress, t.class(), 1, t.data_credits(), cx);
        }
        let host = self.rc.bdf;
        let mut off = 0u32;
        let key = self.rc.p2p_next;
        if t.kind == Kind::MRd {
            self.rc.p2p_next += 1;
            self.rc.p2p_reads.insert(
                key,
                P2pRead {
                    orig: t.clone(),
                    data: vec![0; t.len as usize],
                    pending: 0,
                    poisoned: false,
                },
            );
        }
        while off < t.len {
            let a = t.addr + off as u64;
            let n = (piece - (a % piece as u64) as u32).min(t.len - off);
            let mut p = t.clone();
            p.addr = a;
            p.len = n;
            p.ingress = NO_DIR;
            p.dma_last = (NONE, NONE);
            if t.kind == Kind::MWr {
                let data = self
                    .payload(id)
                    .get(off as usize..(off + n) as usize)
                    .unwrap_or(&[])
                    .to_vec();
                p.data = self.pool.alloc_payload(&data);
            } else {
                let Some(tag) = self.rc.p2p_tags.pop() else {
                    self.fault(
                        FaultKind::NotRoutable,
                        "root complex: no tag left to split a peer read",
                    );
                    break;
                };
                p.requester = host;
                p.tag = tag;
                p.data = NONE;
                self.rc.p2p_tag_map.insert(tag, (key, off));
                if let Some(r) = self.rc.p2p_reads.get_mut(&key) {
                    r.pending += n;
                }
            }
            p.hdr_bytes = if a > u32::MAX as u64 { 16 } else { 12 };
            if let Err(e) = self.inject(Origin::Host, p, host, cx) {
                self.fault(
                    FaultKind::NotRoutable,
                    format!("split peer request not routable: {e}"),
                );
            }
            off += n;
        }
        self.release(id);
    }

    /// A completion for a split peer read came back to the root complex.
    pub(crate) fn p2p_completion(&mut self, id: u32, cx: &mut Context<'_, PackedEv>) {
        let t = self.pool.tlps[id as usize].clone();
        let Some((key, off)) = self.rc.p2p_tag_map.get(&t.tag).copied() else {
            return;
        };
        let payload = self.payload(id).to_vec();
        // A piece is done when its last completion (Byte Count = its own length) arrives.
        if t.status() != CplStatus::Sc || t.byte_count() as u32 <= t.len {
            self.rc.p2p_tag_map.remove(&t.tag);
            self.rc.p2p_tags.push(t.tag);
        }
        let Some(r) = self.rc.p2p_reads.get_mut(&key) else {
            return;
        };
        r.poisoned |= t.poisoned;
        let piece_off = off as usize + (t.addr.wrapping_sub(r.orig.addr + off as u64)) as usize;
        let n = payload.len().min(t.len as usize);
        if t.status() == CplStatus::Sc {
            let end = (piece_off + n).min(r.data.len());
            let s = piece_off.min(end);
            r.data[s..end].copy_from_slice(&payload[..end - s]);
        }
        r.pending = r.pending.saturating_sub(if t.status() == CplStatus::Sc {
            t.len
        } else {
            r.pending
        });
        if r.pending == 0 {
            if let Some(r) = self.rc.p2p_reads.remove(&key) {
                let status = if t.status() == CplStatus::Sc {
                    CplStatus::Sc
                } else {
                    t.status()
                };
                let data = r.data;
                // The rebuilt completions carry the poison of any piece.
                let poison = Poison::all_if(r.poisoned);
                let (c, orig) = (t.completer, &r.orig);
                self.send_completions(Origin::Host, c, orig, status, &data, poison, cx);
            }
        }
    }

    /// A posted write reached host memory (or the MSI address range).
    #[inline]
    pub(crate) fn host_write(&mut self, id: u32, cx: &mut Context<'_, PackedEv>) {
        let (addr, len, req, pd, poisoned) = {
            let t = &self.pool.tlps[id as usize];
            (t.addr, t.len, t.requester, t.data, t.poisoned)
        };
        if poisoned {
            self.poisoned_received(self.last_rx_func, false, "memory write", id, cx);
        }
        let data: &[u8] = if pd == NONE {
            &[]
        } else {
            &self.pool.payloads[pd as usize]
        };
        let n = (len as usize).min(data.len());
        if (MSI_RANGE.0..=MSI_RANGE.1).contains(&addr) {
            if poisoned {
                return; // no interrupt from poisoned data
            }
            let mut v = [0u8; 4];
            for (x, y) in v.iter_mut().zip(data) {
                *x = *y;
            }
            let mut v = u32::from_le_bytes(v);
            if let Some(m) = self.iommu.as_mut() {
                match m.remap_interrupt(cx.now(), req, addr, v) {
                    Some(vector) => v = vector,
                    None => return, // blocked by interrupt remapping (a fault)
                }
            }
            self.interrupts.push((
                cx.now(),
                Interrupt {
                    from: req,
                    address: addr,
                    data: v,
                },
            ));
        } else if let Some(phys) = self.dma_target(id, cx.now()) {
            // A whole, aligned page: its buffer becomes the page (no copy). Links may
            // still hold the TLP for retransmission: the page is then on loan to it
            // until it is released.
            let whole_page = n == 4096 && phys & 0xfff == 0 && !poisoned && pd != NONE;
            let loan = self.pool.tlps[id as usize].refs > 1;
            if whole_page
                && self.fabric.host_memory.write_page_from(
                    phys,
                    &mut self.pool.payloads[pd as usize],
                    loan,
                )
            {
                if loan {
                    self.pool.tlps[id as usize].lent = phys;
                }
            } else {
                let data: &[u8] = if pd == NONE {
                    &[]
                } else {
                    &self.pool.payloads[pd as usize]
                };
                self.fabric.host_memory.write(phys, &data[..n]);
            }
            // Nothing to track while no line is poisoned (the usual case).
            if poisoned || !self.rc.poison_lines.is_empty() {
                self.host_written(phys, n as u64, poisoned);
            }
            if self.cfg.llc_lines > 0 {
                let (a, n) = (addr, n as u64);
                for l in a / 64..(a + n.max(1)).div_ceil(64) {
                    self.llc_insert(l);
                }
            }
            if self.cfg.log_writes {
                self.write_log.push((req, addr, len));
            }
        } else {
            self.fault(
                FaultKind::IommuFault,
                format!("IOMMU fault: write by {} at {:#x} dropped", req, addr),
            );
        }
    }

    pub(crate) fn host_completion(&mut self, id: u32, cx: &mut Context<'_, PackedEv>) {
        if self
            .rc
            .p2p_tag_map
            .contains_key(&self.pool.tlps[id as usize].tag)
        {
            self.p2p_completion(id, cx);
            return;
        }
        let t = self.pool.tlps[id as usize].clone();
        let payload = self.payload(id).to_vec();
        let Some(req) = self.rc.host_reqs.get_mut(&t.tag) else {
            self.fault(
                FaultKind::UnexpectedCompletion,
                format!("root complex: unexpected completion for tag {}", t.tag),
            );
            if let Some(f) = self.last_rx_func {
                self.signal_error(f, AER_UNEXPECTED_CPL, true, Some(id), cx);
            }
            return;
        };
        if t.status() != CplStatus::Sc {
            if let Some(r) = self.rc.host_reqs.remove(&t.tag) {
                if let Some(k) = r.timer {
                    cx.cancel(k);
                }
            }
            self.rc
                .host_done
                .insert(t.tag, HostRead::Failed(t.status()));
            self.rc.host_tags.push(t.tag);
            return;
        }
        if t.len > req.len - req.got.min(req.len) {
            let expected = req.len - req.got.min(req.len);
            self.fault(
                FaultKind::MalformedCompletion,
                format!(
                    "root complex: malformed completion (tag {}: {} bytes, {expected} expected)",
                    t.tag, t.len
                ),
            );
            if let Some(f) = self.last_rx_func {
                self.signal_error(f, AER_MALFORMED, false, Some(id), cx);
            }
            return;
        }
        let n = payload
            .len()
            .min(req.data.len().saturating_sub(req.got as usize));
        let g = req.got as usize;
        req.data[g..g + n].copy_from_slice(&payload[..n]);
        req.got += t.len;
        req.poisoned |= t.poisoned;
        let finished = req.got >= req.len;
        if t.poisoned {
            self.poisoned_received(self.last_rx_func, false, "completion", id, cx);
        }
        if finished {
            if let Some(r) = self.rc.host_reqs.remove(&t.tag) {
                if let Some(k) = r.timer {
                    cx.cancel(k);
                }
                let mut data = r.data;
                data.truncate(r.len as usize);
                let (issued, done) = (r.issued, cx.now());
                let read = if r.poisoned {
                    HostRead::Poisoned { data, issued, done }
                } else {
                    HostRead::Done { data, issued, done }
                };
                self.rc.host_done.insert(t.tag, read);
            }
            self.rc.host_tags.push(t.tag);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::functional::Origin;
    use crate::params::SimConfig;
    use crate::timed::testkit::{build, dir, tlp_times, RC_EP};
    use crate::timed::tlp::{Kind, Tlp};
    use pcielab_sim::{SimDuration, SimTime};

    #[test]
    fn host_memory_answers_a_read_after_its_latency_in_pieces_that_end_on_the_rcb() {
        let cfg = SimConfig {
            rcb: 64,
            mps: 256,
            rc_latency: SimDuration::from_ns(100),
            mem_latency: SimDuration::from_ns(80),
            ..SimConfig::default()
        };
        let mut s = build(RC_EP, cfg);
        let (up, down) = (dir(&s, "ep", "rc"), dir(&s, "rc", "ep"));
        let base = s.alloc_dma(4096) + 0x20;
        let cpls = s.engine().dirs[down as usize].counters.completions;
        let node = s
            .engine()
            .nodes
            .iter()
            .position(|n| n.name == "ep")
            .unwrap() as u32;
        s.sim.process(|e, cx| {
            let f = e.nodes[node as usize].func.expect("a function");
            let t = Tlp {
                tag: 5,
                ..Tlp::new(Kind::MRd, e.ep_bdf(node), base, 512)
            };
            let host = e.rc.bdf;
            e.inject(Origin::Function(f), t, host, cx)
                .expect("routable");
        });
        s.run_until_idle(SimTime::from_ps(1 << 50));
        let e = s.engine();
        let d = &e.dirs[down as usize];
        let n = (d.counters.completions - cpls) as usize;
        assert!(n >= 2, "{n} completions");
        // The request's arrival at the root complex, then its latency and memory's.
        let t_req = *tlp_times(&s, up).last().unwrap();
        let u = &e.dirs[up as usize];
        let hdr = if base > u32::MAX as u64 { 16 } else { 12 };
        let arrive = u.timing.units_to_ps_ceil(
            u.timing.ps_to_units(t_req) + u.timing.units(u.timing.tlp_wire_bytes(hdr)),
        ) + u.prop_ps;
        let tr = e.trace.as_ref().unwrap();
        let recs: Vec<_> = tr
            .records
            .iter()
            .filter(|r| r.dir == down && r.time_ps > t_req)
            .filter(|r| matches!(r.kind, crate::timed::TraceKind::Tlp { .. }))
            .collect();
        assert_eq!(recs.len(), n);
        assert!(
            recs[0].time_ps >= arrive + 180_000,
            "{} < {}",
            recs[0].time_ps,
            arrive
        );
        // 512 bytes in all (more than MPS: so in pieces); every completion but the last
        // ends on a 64-byte boundary (Lower Address + length), none carries more than
        // MPS.
        let mut total = 0;
        for (i, r) in recs.iter().enumerate() {
            let b = tr.bytes(r);
            let len = b.len() - 12;
            let lower = (b[11] & 0x7f) as usize;
            assert!(len <= 256);
            if i + 1 < recs.len() {
                assert_eq!((lower + len) % 64, 0, "completion {i}: {lower:#x} + {len}");
            }
            total += len;
        }
        assert_eq!(total, 512);
    }
}
