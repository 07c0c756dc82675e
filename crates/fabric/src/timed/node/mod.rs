//! A TLP at a node: the receiver accepts it (the node's latency, store-and-forward or
//! cut-through), then the node forwards it or hands it to its consumer — host memory,
//! a device's BAR or DMA engine, a port, the root complex.

use super::endpoint::{ReadReply, ReadTicket};
use super::engine::Engine;
use super::event::*;
use super::fault::FaultKind;
use super::link::state::BME_PORT;
use super::node::state::NodeKind;
use super::packed::PackedEv;
use super::poison::state::Poison;
use super::tlp::*;
use crate::functional::{Origin, MSI_RANGE};
use pcielab_sim::{Context, SimDuration, SimTime};
use pcielab_wire::CplStatus;

pub(crate) mod state;

impl Engine {
    /// A TLP passed the data-link checks at the receiver of `d`.
    pub(crate) fn accepted(&mut self, d: u16, id: u32, cx: &mut Context<'_, PackedEv>) {
        let node = self.dirs[d as usize].to;
        if self.pool.tlps[id as usize].poisoned {
            self.parity_detected(d);
        }
        let t = &mut self.pool.tlps[id as usize];
        t.ingress = d;
        t.at += 1;
        if self.dirs[d as usize].bme_block & BME_PORT != 0 {
            self.bme_ingress(id);
        }
        let t = &self.pool.tlps[id as usize];
        let last = t.at >= t.hops;
        let lat = match self.nodes[node as usize].kind {
            NodeKind::Switch => self.cfg.switch_latency,
            NodeKind::Rc => self.cfg.rc_latency,
            NodeKind::Ep(_) => SimDuration::ZERO,
        };
        if last {
            let (dest, kind, addr, len, req) = (t.dest, t.kind, t.addr, t.len as u64, t.requester);
            let pasid = t.pasid;
            let translated = t.addr_type == 2;
            let extra = match (dest, kind) {
                (Dest::HostMemory, Kind::MRd) => self.memory_read_latency(addr, len),
                (Dest::HostMemory, Kind::Atomic) => {
                    let size =
                        super::tlp::operand_size(self.pool.tlps[id as usize].atomic_kind(), len);
                    self.memory_read_latency(addr, size)
                }
                (Dest::Rc, Kind::TransReq) => {
                    self.translation_latency(req, pasid, addr, cx.now() + lat)
                }
                (Dest::Bar { .. }, Kind::MRd | Kind::IoRd | Kind::IoWr | Kind::Atomic) => {
                    self.cfg.ep_latency
                }
                (Dest::Config { node, .. }, _)
                    if matches!(self.nodes[node as usize].kind, NodeKind::Ep(_)) =>
                {
                    self.cfg.ep_latency
                }
                _ => SimDuration::ZERO,
            };
            let mut at = cx.now() + lat + extra;
            if self.timed_devices {
                at = self.device_arrival(dest, kind, len, at);
            }
            if dest == Dest::HostMemory {
                let msi = (MSI_RANGE.0..=MSI_RANGE.1).contains(&addr);
                // A translated request (ATS) passes the IOMMU without a lookup.
                if let (Some(m), false, false) = (self.iommu.as_mut(), translated, msi) {
                    at += m.lookup_latency(req, pasid, addr, cx.now() + lat);
                }
                // Posted writes take effect in order, an interrupt message too: it
                // never overtakes a write that waits for its translation.
                if kind == Kind::MWr {
                    at = at.max(self.rc.posted_last);
                    self.rc.posted_last = at;
                }
            }
            // Per-node FIFOs: a constant latency keeps times in order; a varying one
            // (a latency distribution, IOTLB misses) falls back to the heap inside
            // push_fifo. Requests with an access latency of their own have a stream
            // of their own (see `Node::read_fifo`).
            let n = &self.nodes[node as usize];
            let f = if extra == SimDuration::ZERO {
                n.fifo
            } else {
                n.read_fifo
            };
            cx.push_fifo(f, at, Ev::Consume(id));
        } else {
            let mut at = cx.now() + lat;
            if self.cfg.cut_through && matches!(self.nodes[node as usize].kind, NodeKind::Switch) {
                // Cut-through: the latency runs from the arrival of the header (the
                // first 16 bytes after framing); the egress may not finish before the
                // ingress does, so it starts no earlier than now − its own duration.
                let tb = t.tlp_bytes();
                let hdr = (t.hdr_bytes as u64).min(tb);
                let din = &self.dirs[d as usize].timing;
                let ser_in = din.units_to_ps_ceil(din.units(din.tlp_wire_bytes(tb)));
                let ser_hdr = din.units_to_ps_ceil(din.units(hdr + 4));
                let dout = &self.dirs[t.path[t.at as usize] as usize].timing;
                let ser_out = dout.units_to_ps_ceil(dout.units(dout.tlp_wire_bytes(tb)));
                let now = cx.now().as_ps();
                let hdr_arrival = now.saturating_sub(ser_in - ser_hdr.min(ser_in));
                let t0 = (hdr_arrival + lat.as_ps()).max(now.saturating_sub(ser_out));
                at = SimTime::from_ps(t0.max(now.saturating_sub(ser_in)));
            }
            let f = self.nodes[node as usize].fifo;
            cx.push_fifo(f, at, Ev::Forward(id));
        }
    }

    /// A TLP ends at the node it reached without being forwarded or consumed: its
    /// receive-buffer credits return and its record is freed.
    #[cold]
    #[inline(never)]
    pub(crate) fn discard(&mut self, id: u32, cx: &mut Context<'_, PackedEv>) {
        self.leave_ingress(id, cx);
        self.release(id);
    }

    /// A TLP reached its consumer.
    pub(crate) fn consume(&mut self, id: u32, cx: &mut Context<'_, PackedEv>) {
        if let Dest::Bar { node, .. } = self.pool.tlps[id as usize].dest {
            if self.device_holds(node, id, cx) {
                return;
            }
        }
        self.consume_taken(id, cx);
    }

    /// Request `id` reaches its consumer, which takes it.
    pub(crate) fn consume_taken(&mut self, id: u32, cx: &mut Context<'_, PackedEv>) {
        // The consumer frees the receive buffer.
        let ing = self.leave_ingress(id, cx);
        self.last_rx_func = if ing != NONE {
            self.dirs[ing as usize].rx_func
        } else {
            None
        };
        // Data corrupted on the way: the ECRC check (if any) fails here.
        if self.pool.tlps[id as usize].corrupted && self.ecrc_failed(id, cx) {
            self.release(id);
            return;
        }
        if let (Dest::HostMemory, Kind::MWr) = {
            let t = &self.pool.tlps[id as usize];
            (t.dest, t.kind)
        } {
            self.host_write(id, cx);
            self.release(id);
            return;
        }
        let t = self.pool.tlps[id as usize].clone();
        match (t.dest, t.kind) {
            (Dest::Refused, _) => self.refused_upstream(id, cx),
            (Dest::HostMemory, Kind::MRd) if t.scatter() != NONE => {
                self.answer_scatter_read(id, cx)
            }
            (Dest::HostMemory, Kind::MRd) => {
                let host = self.rc.bdf;
                let phys = self.dma_target(id, cx.now());
                match phys {
                    Some(p) => {
                        let mut buf = std::mem::take(&mut self.scratch);
                        buf.resize(t.len as usize, 0);
                        self.fabric.host_memory.read(p, &mut buf);
                        // Without poisoned lines (the usual case) the completions
                        // need no line lookups.
                        let poison = if self.rc.poison_lines.is_empty() {
                            Poison::Clean
                        } else {
                            Poison::HostLines(p)
                        };
                        self.send_completions(
                            Origin::Host,
                            host,
                            &t,
                            CplStatus::Sc,
                            &buf,
                            poison,
                            cx,
                        );
                        self.scratch = buf;
                    }
                    None => {
                        self.fault(
                            FaultKind::IommuFault,
                            format!("IOMMU fault: read by {} at {:#x}", t.requester, t.addr),
                        );
                        self.send_completions(
                            Origin::Host,
                            host,
                            &t,
                            CplStatus::Ur,
                            &[],
                            Poison::Clean,
                            cx,
                        );
                    }
                }
            }
            (Dest::Intx { node }, Kind::Intx) => {
                self.intx_arrived(node, ing, t.requester, t.msg_code(), cx)
            }
            (Dest::Rc, Kind::Cpl | Kind::CplD) => self.host_completion(id, cx),
            (Dest::Dma { node }, Kind::Cpl | Kind::CplD) => self.dma_completion(node, id, cx),
            (Dest::Bar { node, .. }, Kind::MWr) if t.poisoned => {
                // The device drops poisoned data and logs it.
                let f = self.nodes[node as usize].func;
                self.poisoned_received(f, false, "memory write", id, cx);
            }
            (
                Dest::Bar {
                    node,
                    func,
                    bar,
                    offset,
                },
                Kind::MWr,
            ) => {
                let data = self.payload(id).to_vec();
                let n = (t.len as usize).min(data.len());
                if self.msix_bar_write((node, func), (bar, offset), &data[..n], cx) {
                    // The function's MSI-X table: the fabric's, not the model's.
                } else {
                    let d = &data[..n];
                    self.call_ep_fn(node, func, cx, |m, cx| m.mem_write(bar, offset, d, cx));
                }
            }
            (
                Dest::Bar {
                    node,
                    func,
                    bar,
                    offset,
                },
                Kind::MRd,
            ) => {
                let mut buf = vec![0u8; t.len as usize];
                let reply = if self.msix_bar_read((node, func), (bar, offset), &mut buf) {
                    Some(ReadReply::Now)
                } else {
                    let b = &mut buf;
                    self.call_ep_fn(node, func, cx, |m, cx| m.mem_read(bar, offset, b, cx))
                };
                let (me, origin) = self.completer_of(node, func);
                match reply {
                    Some(r @ (ReadReply::Now | ReadReply::Poisoned)) => {
                        let poison = Poison::all_if(r == ReadReply::Poisoned);
                        self.send_completions(origin, me, &t, CplStatus::Sc, &buf, poison, cx)
                    }
                    Some(ReadReply::Later(ReadTicket(k))) => self.park_ticket((node, func), k, &t),
                    _ => {
                        self.completer_ur(node, id, cx);
                        let clean = Poison::Clean;
                        self.send_completions(origin, me, &t, CplStatus::Ur, &[], clean, cx)
                    }
                }
            }
            (Dest::Bar { node, .. }, Kind::IoWr) if t.poisoned => {
                // A poisoned I/O write is discarded: Unsupported Request.
                let (me, origin) = (self.ep_bdf(node), self.origin_of(node));
                self.completer_ur(node, id, cx);
                self.send_io_completion(origin, me, &t, CplStatus::Ur, None, false, cx)
            }
            (
                Dest::Bar {
                    node,
                    func,
                    bar,
                    offset,
                },
                Kind::IoRd | Kind::IoWr,
            ) => {
                let write = t.kind == Kind::IoWr;
                let mut buf = if write {
                    let d = self.payload(id);
                    d[..(t.len as usize).min(d.len())].to_vec()
                } else {
                    vec![0u8; t.len as usize]
                };
                let reply = if write {
                    let b = &buf;
                    self.call_ep_fn(node, func, cx, |m, cx| m.io_write(bar, offset, b, cx))
                } else {
                    let b = &mut buf;
                    self.call_ep_fn(node, func, cx, |m, cx| m.io_read(bar, offset, b, cx))
                };
                let (me, origin) = self.completer_of(node, func);
                match reply {
                    Some(r @ (ReadReply::Now | ReadReply::Poisoned)) => {
                        let data = (!write).then_some(&buf[..]);
                        let ep = r == ReadReply::Poisoned && !write;
                        self.send_io_completion(origin, me, &t, CplStatus::Sc, data, ep, cx)
                    }
                    Some(ReadReply::Later(ReadTicket(k))) => self.park_ticket((node, func), k, &t),
                    _ => {
                        self.completer_ur(node, id, cx);
                        self.send_io_completion(origin, me, &t, CplStatus::Ur, None, false, cx)
                    }
                }
            }
            (Dest::Rc, Kind::ErrMsg) => {
                // The root port logs what it receives from its secondary side when its
                // Bridge Control lets error messages through.
                let ing = self
                    .last_rx_func
                    .and_then(|rp| self.dirs.iter().position(|x| x.rx_func == Some(rp)));
                let contained =
                    ing.is_some_and(|d| self.dpc_message(d as u32, t.requester, t.msg_code(), cx));
                if let Some(rp) = self.last_rx_func.filter(|_| !contained) {
                    if self.bridge_forwards_errors(rp) {
                        self.root_error(rp, t.requester, t.msg_code(), cx);
                    }
                }
            }
            (
                Dest::Config {
                    node,
                    func,
                    refuser,
                    ..
                },
                Kind::CfgRd | Kind::CfgWr,
            ) => self.config_request(node, func, refuser, id, &t, cx),
            (Dest::Rc | Dest::Dma { .. }, Kind::VendorMsg) => self.vendor_arrived(id, &t, cx),
            (Dest::Hop { node }, Kind::VendorMsg) => self.vendor_hop_arrived(node, ing, id, &t, cx),
            (Dest::Hop { node }, Kind::PmHop) if t.msg_code() == super::tlp::MSG_LTR => {
                let values = match t.detail {
                    Detail::Ltr { snoop, no_snoop } => (snoop, no_snoop),
                    _ => (0, 0),
                };
                if ing != NONE && ing % 2 == 1 {
                    self.ltr_arrived(node, ing, t.requester, values, cx);
                }
            }
            (Dest::Hop { node }, Kind::PmHop) => {
                self.pm_hop_arrived(node, ing, t.requester, t.msg_code(), cx)
            }
            (Dest::Rc, Kind::TransReq) => self.translation_request(&t, cx),
            (Dest::Dma { node }, Kind::AtsInv) => self.ats_invalidate_request(node, id, cx),
            (Dest::Rc, Kind::AtsInvCpl) => self.ats_invalidate_completion(&t, cx),
            (Dest::Rc, Kind::PageReq) => self.host_page_request(&t, cx),
            (Dest::Dma { node }, Kind::PrgResp) => self.prg_response(node, id, cx),
            (Dest::Rc, Kind::PmMsg) => {
                if let Some(rp) = self.last_rx_func {
                    self.root_pme(rp, t.requester, cx);
                }
            }
            _ => self.consume_rare(id, &t, cx),
        }
        self.release(id);
    }

    /// `consume` for the kinds off the hot path (kept out of its dispatch): raw TLPs,
    /// AtomicOps, and TLPs that reach a consumer that takes none of their kind.
    #[cold]
    #[inline(never)]
    pub(crate) fn consume_rare(&mut self, id: u32, t: &Tlp, cx: &mut Context<'_, PackedEv>) {
        match (t.dest, t.kind) {
            (_, Kind::Raw) => self.raw_arrived(id, cx),
            (Dest::HostMemory, Kind::Atomic) => self.host_atomic(id, cx),
            (
                Dest::Bar {
                    node,
                    func,
                    bar,
                    offset,
                },
                Kind::Atomic,
            ) => self.device_atomic((node, func, bar, offset), id, cx),
            _ => {
                // A completion routed to a BAR, a request to the RC's completion sink…
                self.fault(
                    FaultKind::NotRoutable,
                    format!("{:?} TLP with destination {:?} dropped", t.kind, t.dest),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::params::SimConfig;
    use crate::timed::testkit::{build, RC_EP};
    use crate::timed::HostRead;
    use pcielab_sim::SimDuration;

    /// The round trip of a host read of the device's BAR, in ps.
    fn read_time(ep_latency_ns: u64) -> u64 {
        let mut s = build(
            RC_EP,
            SimConfig {
                ep_latency: SimDuration::from_ns(ep_latency_ns),
                ..SimConfig::default()
            },
        );
        let bar = s.bar("ep", 0).unwrap();
        s.mmio_write(bar, &[9; 4]).unwrap();
        match s.mmio_read(bar, 4).unwrap() {
            HostRead::Done { data, issued, done } => {
                assert_eq!(data, [9; 4]);
                (done - issued).as_ps()
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_device_takes_a_request_its_latency_after_it_arrived() {
        // The read request waits out the device's latency before it is consumed, and
        // so does its completion; nothing else in the round trip changes.
        assert_eq!(read_time(400) - read_time(0), 400_000);
    }
}
