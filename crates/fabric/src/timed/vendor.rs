//! Vendor-defined messages: to the root complex, by ID, broadcast and local.

use super::endpoint::{VdmRoute, VendorMessage};
use super::engine::Engine;
use super::event::Ev;
use super::node::state::NodeKind;
use super::packed::PackedEv;
use super::regs::AER_UNSUPPORTED;
use super::tlp::{Dest, Detail, Kind, Tlp, VdmForm, MAX_PATH, NONE};
use crate::functional::Origin;
use pcielab_sim::{Context, SimDuration};
use pcielab_wire::Bdf;

impl Engine {
    /// Sends vendor-defined message `msg` from `origin` as `requester`, after `delay`
    /// (the root complex's latency for host messages).
    pub(crate) fn send_vendor(
        &mut self,
        origin: Origin,
        requester: Bdf,
        msg: &VendorMessage,
        delay: SimDuration,
        cx: &mut Context<'_, PackedEv>,
    ) -> Result<(), String> {
        msg.check(self.cfg.mps as u32)?;
        let (dest, routing) = match msg.route {
            VdmRoute::RootComplex => (self.rc.bdf, 0u16),
            VdmRoute::Id(b) => (b, 2),
            VdmRoute::Broadcast | VdmRoute::Local => {
                return self.send_vendor_hop(origin, requester, msg, delay, cx);
            }
        };
        let t = Tlp {
            completer: dest,
            ..self.vendor_tlp(requester, msg, routing)
        };
        let (addr, p) = (t.addr, t.data);
        let routed = if delay == SimDuration::ZERO {
            self.inject(origin, t, dest, cx).map(|_| ())
        } else {
            self.route(origin, Kind::VendorMsg, addr, dest)
                .map(|(path, hops, d)| {
                    let id = self.pool.alloc(Tlp {
                        path,
                        hops,
                        dest: d,
                        ..t
                    });
                    cx.schedule_in(delay, Ev::HostSend(id));
                })
        };
        routed.map_err(|e| {
            if p != NONE {
                self.pool.free_payload(p);
            }
            format!("vendor-defined message to {dest} not routable: {e}")
        })
    }

    /// Sends a broadcast or local vendor-defined message (one link per TLP, like the
    /// power-management messages): broadcast only from the root complex, down every
    /// root port with a link; local from a device, to the port above it.
    pub(crate) fn send_vendor_hop(
        &mut self,
        origin: Origin,
        requester: Bdf,
        msg: &VendorMessage,
        delay: SimDuration,
        cx: &mut Context<'_, PackedEv>,
    ) -> Result<(), String> {
        let dirs: Vec<u16> = match (origin, msg.route) {
            (Origin::Host, VdmRoute::Broadcast) => self.down_dirs(self.rc.node),
            (Origin::Function(f), VdmRoute::Local) => {
                let node = self.fabric.functions[f.0 as usize].node.0;
                match &self.nodes[node as usize].kind {
                    NodeKind::Ep(ep) => vec![ep.up_dir],
                    _ => Vec::new(),
                }
            }
            (Origin::Host, _) => {
                return Err(
                    "a local vendor-defined message from the root complex names \
                            no receiver: route it by ID to the device below the root port"
                        .into(),
                )
            }
            (Origin::Function(_), _) => {
                return Err("only the root complex sends broadcast vendor-defined messages".into())
            }
        };
        let routing: u16 = if msg.route == VdmRoute::Broadcast {
            3
        } else {
            4
        };
        for d in dirs {
            let id = self.vendor_hop_tlp(d, requester, msg, routing);
            if delay == SimDuration::ZERO {
                self.enqueue(d, id, cx);
            } else {
                cx.schedule_in(delay, Ev::HostSend(id));
            }
        }
        Ok(())
    }

    /// A vendor-defined message TLP over direction `d` only (`routing` 3: broadcast,
    /// 4: local), with its own copy of the payload.
    pub(crate) fn vendor_hop_tlp(
        &mut self,
        d: u16,
        requester: Bdf,
        msg: &VendorMessage,
        routing: u16,
    ) -> u32 {
        let mut path = [0u16; MAX_PATH];
        path[0] = d;
        let t = Tlp {
            path,
            hops: 1,
            dest: Dest::Hop {
                node: self.dirs[d as usize].to,
            },
            ..self.vendor_tlp(requester, msg, routing)
        };
        self.pool.alloc(t)
    }

    /// The TLP of vendor-defined message `msg` from `requester` (`routing`: its r[2:0]),
    /// with its own copy of the payload, not yet routed.
    pub(crate) fn vendor_tlp(&mut self, requester: Bdf, msg: &VendorMessage, routing: u16) -> Tlp {
        let p = if msg.payload.is_empty() {
            NONE
        } else {
            self.pool.alloc_payload(&msg.payload)
        };
        Tlp {
            detail: Detail::Vendor {
                form: VdmForm::new(msg.type1, routing as u8),
                vendor_id: msg.vendor_id,
                data: msg.vendor_data.to_be_bytes(),
            },
            data: p,
            ..Tlp::new(Kind::VendorMsg, requester, 0, msg.payload.len() as u32)
        }
    }

    /// A broadcast or local vendor-defined message reached `node` through direction
    /// `ing`. A switch passes a broadcast down every downstream port with a link
    /// (unchanged) and does not take it itself; a local message ends at the switch's
    /// downstream port, which supports none (Type 0: Unsupported Request, logged by
    /// the port; Type 1: dropped). Devices and the root complex receive it as
    /// [`Engine::vendor_arrived`] says.
    #[cold]
    #[inline(never)]
    pub(crate) fn vendor_hop_arrived(
        &mut self,
        node: u32,
        ing: u32,
        id: u32,
        t: &Tlp,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let broadcast = t.vendor_routing() == 3;
        match &self.nodes[node as usize].kind {
            NodeKind::Switch if broadcast => {
                let msg = self.vendor_message_of(id, t);
                let down = self.down_dirs(node);
                for d in down {
                    let c = self.vendor_hop_tlp(d, t.requester, &msg, 3);
                    self.enqueue(d, c, cx);
                }
            }
            NodeKind::Switch => {
                if t.msg_code() == 0x7e && ing != NONE {
                    if let Some(f) = self.dirs[ing as usize].rx_func {
                        self.signal_error(f, AER_UNSUPPORTED, false, Some(id), cx);
                    }
                }
            }
            _ => self.vendor_arrived(id, t, cx),
        }
    }

    /// The vendor-defined message a TLP carries.
    pub(crate) fn vendor_message_of(&self, id: u32, t: &Tlp) -> VendorMessage {
        let payload = self.payload(id);
        VendorMessage {
            type1: t.msg_code() == 0x7f,
            route: match t.vendor_routing() {
                2 => VdmRoute::Id(t.completer),
                3 => VdmRoute::Broadcast,
                4 => VdmRoute::Local,
                _ => VdmRoute::RootComplex,
            },
            vendor_id: t.vendor_fields().0,
            vendor_data: t.vendor_fields().1,
            payload: payload[..(t.len as usize).min(payload.len())].to_vec(),
        }
    }

    /// A vendor-defined message reached its destination: the root complex records it;
    /// a device model may take it; otherwise a Type 0 message is an Unsupported Request
    /// of the function it was routed to, and a Type 1 message is dropped.
    #[cold]
    #[inline(never)]
    pub(crate) fn vendor_arrived(&mut self, id: u32, t: &Tlp, cx: &mut Context<'_, PackedEv>) {
        let msg = self.vendor_message_of(id, t);
        let from = t.requester;
        let node = match t.dest {
            Dest::Dma { node } => node,
            Dest::Hop { node } if !matches!(self.nodes[node as usize].kind, NodeKind::Rc) => node,
            _ => {
                self.vendor_messages.push((cx.now(), from, msg));
                return;
            }
        };
        let taken = matches!(self.nodes[node as usize].kind, NodeKind::Ep(_))
            && self
                .call_ep(node, cx, |m, cx| m.vendor_message(from, &msg, cx))
                .unwrap_or(false);
        if !taken && !msg.type1 {
            // Routed by ID: the function it names logs it; broadcast: the device's
            // function 0.
            let f = match t.dest {
                Dest::Hop { node } => self.nodes[node as usize].func,
                _ => self.fabric.function_at(t.completer),
            };
            if let Some(f) = f {
                self.signal_error(f, AER_UNSUPPORTED, false, Some(id), cx);
            }
        }
    }
}
