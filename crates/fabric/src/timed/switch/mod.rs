//! Ports and switches: a TLP that reached a switch or a root port on its way goes on
//! to its next link direction (the node's latency, store-and-forward or cut-through,
//! was charged when it arrived: `Engine::accepted`); bridges decide whether error
//! messages from below go on (DPC may take them first); a port answers a request it
//! refuses or cannot deliver itself.

use super::engine::*;
use super::node::state::*;
use super::packed::PackedEv;
use super::poison::state::Poison;
use super::tlp::*;
use crate::functional::{FnId, Origin};
use pcielab_sim::Context;
use pcielab_wire::CplStatus;

pub(crate) mod state;

impl Engine {
    /// TLP `id` leaves the switch or root complex it crossed, by its next direction.
    pub(crate) fn forward(&mut self, id: u32, cx: &mut Context<'_, PackedEv>) {
        let t = &self.pool.tlps[id as usize];
        let node = self.dirs[t.path[t.at as usize - 1] as usize].to;
        if t.kind == Kind::ErrMsg
            && ({
                let (ing, req, code) = (t.ingress_or_none(), t.requester, t.msg_code());
                self.dpc_message(ing, req, code, cx) || !self.switch_forwards_error(node, ing)
            })
        {
            self.discard(id, cx);
            return;
        }
        let t = &self.pool.tlps[id as usize];
        if let Some(piece) = self.cfg.p2p_split {
            let splittable = matches!(t.kind, Kind::MRd | Kind::MWr)
                && t.len > piece
                && t.requester != self.rc.bdf
                && matches!(self.nodes[node as usize].kind, NodeKind::Rc);
            if splittable {
                self.p2p_split(id, piece, cx);
                return;
            }
        }
        let d = t.path[t.at as usize];
        if self.cfg.switch_error_rate > 0.0
            && matches!(self.nodes[node as usize].kind, NodeKind::Switch)
        {
            self.maybe_corrupt_inside(id, d);
        }
        self.enqueue(d, id, cx);
    }

    /// True if a Type 1 function passes error messages from its secondary side to its
    /// primary side: SERR# Enable of its Bridge Control register (PCIe Base Spec,
    /// Bridge Control: the bit controls the forwarding of ERR_COR, ERR_NONFATAL and
    /// ERR_FATAL from secondary to primary).
    pub(crate) fn bridge_forwards_errors(&self, f: FnId) -> bool {
        self.fabric.functions[f.0 as usize]
            .config
            .read_u16(pcielab_config::header::reg::BRIDGE_CONTROL)
            & 2
            != 0
    }

    /// True if switch `node` forwards an error message that entered through direction
    /// `ing` (or was sent by one of its downstream ports, `ing` NONE): the message
    /// crosses the downstream port it entered by, then the upstream port, each from
    /// secondary to primary.
    #[cold]
    #[inline(never)]
    pub(crate) fn switch_forwards_error(&self, node: u32, ing: u32) -> bool {
        if !matches!(self.nodes[node as usize].kind, NodeKind::Switch) {
            return true;
        }
        let port = if ing == NONE {
            None
        } else {
            self.dirs[ing as usize].rx_func
        };
        let upstream = self.nodes[node as usize].func;
        port.map_or(true, |f| self.bridge_forwards_errors(f))
            && upstream.map_or(true, |f| self.bridge_forwards_errors(f))
    }

    /// Port `p` answers request `req` itself, without data (a request it refuses or
    /// cannot deliver): a completion with `status`, the port as completer.
    #[cold]
    #[inline(never)]
    pub(crate) fn port_completes(
        &mut self,
        p: FnId,
        req: &Tlp,
        status: CplStatus,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let completer = self.fabric.bdf(p);
        self.send_completions(
            Origin::Function(p),
            completer,
            req,
            status,
            &[],
            Poison::Clean,
            cx,
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::params::SimConfig;
    use crate::timed::testkit::{build, dir, host_write, tlp_times, RC_SW_EP};
    use pcielab_sim::{SimDuration, SimTime};

    /// When the TLP sent on `down` at `t0` has all arrived: (its wire time).
    fn arrival(s: &crate::timed::FabricSim, down: u16, t0: u64, bytes: u64) -> u64 {
        let d = &s.engine().dirs[down as usize];
        let units = d.timing.units(d.timing.tlp_wire_bytes(bytes));
        d.timing.units_to_ps_ceil(d.timing.ps_to_units(t0) + units) + d.prop_ps
    }

    #[test]
    fn a_switch_forwards_a_tlp_its_latency_after_it_has_all_of_it() {
        let lat = SimDuration::from_ns(150);
        let mut s = build(
            RC_SW_EP,
            SimConfig {
                switch_latency: lat,
                ..SimConfig::default()
            },
        );
        let (a, b) = (dir(&s, "rc", "sw"), dir(&s, "sw", "ep"));
        let bar = s.bar("ep", 0).unwrap();
        host_write(&mut s, bar, &[3; 128]);
        s.run_until_idle(SimTime::from_ps(1 << 50));
        let header = if bar > u32::MAX as u64 { 16 } else { 12 };
        let t_in = *tlp_times(&s, a).last().unwrap();
        let t_out = *tlp_times(&s, b).last().unwrap();
        // Store and forward: the whole TLP in, then the switch's latency.
        assert_eq!(t_out, arrival(&s, a, t_in, header + 128) + lat.as_ps());
        let e = s.engine();
        assert_eq!(e.dirs[b as usize].counters.payload_bytes, 128);
    }

    #[test]
    fn a_cut_through_switch_starts_forwarding_once_the_header_is_in() {
        let lat = SimDuration::from_ns(150);
        let cfg = |cut_through| SimConfig {
            switch_latency: lat,
            cut_through,
            ..SimConfig::default()
        };
        let mut out = Vec::new();
        for ct in [false, true] {
            let mut s = build(RC_SW_EP, cfg(ct));
            let (a, b) = (dir(&s, "rc", "sw"), dir(&s, "sw", "ep"));
            let bar = s.bar("ep", 0).unwrap();
            host_write(&mut s, bar, &[3; 256]);
            s.run_until_idle(SimTime::from_ps(1 << 50));
            let t_in = *tlp_times(&s, a).last().unwrap();
            let t_out = *tlp_times(&s, b).last().unwrap();
            out.push(t_out - t_in);
        }
        // Cut-through saves the payload's time on the ingress link (both links are
        // alike: the egress may not end before the ingress does).
        assert!(out[1] < out[0], "{out:?}");
        assert!(out[1] >= lat.as_ps(), "{out:?}");
    }
}
