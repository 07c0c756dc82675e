//! Routing: the path of link directions a TLP takes, from the functional fabric's
//! routes (memory, ID and configuration routing), cached per page; and putting a TLP
//! on its path.

use super::engine::Engine;
use super::event::*;
use super::node::state::NodeKind;
use super::packed::PackedEv;
use super::tlp::*;
use crate::functional::{FnId, Origin, Role, RouteError, Target};
use pcielab_sim::Context;
use pcielab_wire::Bdf;

pub(crate) mod state;

impl Engine {
    // ---------------------------------------------------------------- routing
    /// Path (directions) from `from_node` for a TLP, via the functional fabric.
    pub(crate) fn route(
        &mut self,
        origin: Origin,
        kind: Kind,
        addr: u64,
        dest_id: Bdf,
    ) -> Result<Route, RouteError> {
        let onode = match origin {
            Origin::Host => self.rc.node,
            Origin::Function(f) => self.fabric.functions[f.0 as usize].node.0,
        };
        let key = match kind {
            // Completions and error messages go to a function by ID (messages: the host bridge).
            // Completions apart from messages (ACS redirects them by different bits).
            k if k.routed_by_id() => (
                onode,
                1u64 << 63 | (k.is_completion() as u64) << 32 | dest_id.raw() as u64,
            ),
            // I/O BARs are as small as 4 bytes and share pages: one entry per DW. Bit 62
            // keeps the keys apart from memory pages (at most 2^52) and completions.
            Kind::IoRd | Kind::IoWr => (onode, 1u64 << 62 | (addr & 0xffff_fffc)),
            _ => (onode, addr >> 12),
        };
        if self.routes.route_last.0 == key {
            return Ok(self.routes.route_last.1);
        }
        if let Some(r) = self.routes.route_cache.get(&key) {
            self.routes.route_last = (key, *r);
            return Ok(*r);
        }
        let (hops, dest_node, dest) = match kind {
            k if k.routed_by_id() => {
                let r = self.fabric.route_id(origin, dest_id)?;
                let f = &self.fabric.functions[r.target.0 as usize];
                let d = if f.role == Role::HostBridge {
                    Dest::Rc
                } else {
                    Dest::Dma { node: f.node.0 }
                };
                (r.hops, f.node.0, d)
            }
            _ => {
                // A bridge with Bus Master Enable clear refuses the request when it
                // gets there (see the `bus_master` module), not at the requester.
                let r = if matches!(kind, Kind::IoRd | Kind::IoWr) {
                    let a = u32::try_from(addr)
                        .map_err(|_| RouteError::NotRoutable("I/O address above 4 GiB"))?;
                    self.fabric
                        .route_addr_through_bridges(origin, a as u64, true)?
                } else {
                    match self.fabric.route_addr_through_bridges(origin, addr, false) {
                        Ok(r) => r,
                        Err(e) => return self.route_to_down_port(origin, addr).ok_or(e),
                    }
                };
                match r.target {
                    Target::HostMemory(_) => (r.hops, self.rc.node, Dest::HostMemory),
                    Target::Bar {
                        function,
                        bar,
                        offset,
                    } => {
                        let n = self.fabric.functions[function.0 as usize].node.0;
                        let Some(func) = self.fn_index(n, function) else {
                            return Err(RouteError::Refused(self.fabric.bdf(function)));
                        };
                        // The cache is per page: store the page's base offset.
                        (
                            r.hops,
                            n,
                            Dest::Bar {
                                node: n,
                                func,
                                bar,
                                offset: offset - (addr & 0xfff),
                            },
                        )
                    }
                }
            }
        };
        // A peer-to-peer TLP between two downstream ports of a switch goes by the root
        // complex when the port it enters by redirects it (ACS; see the `acs` module).
        let hops = self.acs_redirect(origin, kind, addr, dest_id, hops)?;
        if let (Some(_), Origin::Function(f), Dest::Bar { .. }) = (&self.iommu, origin, dest) {
            // A device's request for a peer that crosses the root complex, or for
            // another function of its own device (its DMA engine sends every request
            // on its link), passes the IOMMU at the root complex: untranslated, the
            // address is an I/O virtual address of the requester's domain. Unmapped,
            // it ends at the root complex, which faults it as any unmapped DMA
            // (Unsupported Request for a read, dropped for a write); mapped to
            // itself, it goes on to the peer (P2P by an identity mapping of the
            // peer's BAR); mapped elsewhere, to the root complex, which translates
            // it. Not cached: mappings change.
            let crosses_rc = hops.iter().any(|h| {
                matches!(
                    self.fabric.functions[h.0 as usize].role,
                    Role::RootPort { .. }
                )
            });
            if crosses_rc || dest_node == onode {
                let bdf = self.fabric.bdf(f);
                // Mapped to itself: the peer's BAR (P2P). Mapped elsewhere: not the
                // peer's address at all (a guest's memory, say); the root complex
                // translates it.
                let identity =
                    self.iommu.as_ref().and_then(|m| m.peek(bdf, NONE, addr)) == Some(addr);
                let r = if identity {
                    let (path, n) = self.dir_path(&self.node_seq(onode, &hops, dest_node))?;
                    (path, n, dest)
                } else {
                    // Up the bridges above the requester to the root complex.
                    let mut up = Vec::new();
                    let mut bus = self.fabric.functions[f.0 as usize].bus;
                    while let Some(p) = self.fabric.buses[bus.0 as usize].parent {
                        up.push(p);
                        bus = self.fabric.functions[p.0 as usize].bus;
                    }
                    let rc = self.rc.node;
                    let (path, n) = self.dir_path(&self.node_seq(onode, &up, rc))?;
                    (path, n, Dest::HostMemory)
                };
                return Ok(r);
            }
        }
        let (path, n) = self.dir_path(&self.node_seq(onode, &hops, dest_node))?;
        let r = (path, n, dest);
        self.routes.route_cache.insert(key, r);
        self.routes.route_last = (key, r);
        Ok(r)
    }

    /// The nodes a TLP from `onode` crosses through the bridge functions `hops`, ending
    /// at `last` (consecutive duplicates merged).
    pub(crate) fn node_seq(&self, onode: u32, hops: &[FnId], last: u32) -> Vec<u32> {
        let mut seq: Vec<u32> = vec![onode];
        let nodes = hops
            .iter()
            .map(|h| self.fabric.functions[h.0 as usize].node.0)
            .chain([last]);
        for n in nodes {
            if seq.last() != Some(&n) {
                seq.push(n);
            }
        }
        seq
    }

    /// The link directions between consecutive nodes of `seq`.
    pub(crate) fn dir_path(&self, seq: &[u32]) -> Result<([u16; MAX_PATH], u8), RouteError> {
        let mut path = [0u16; MAX_PATH];
        let mut n = 0u8;
        for w in seq.windows(2) {
            let d = *self
                .routes
                .pair_dir
                .get(&(w[0], w[1]))
                .ok_or(RouteError::NotRoutable(
                    "no link between consecutive nodes of the route",
                ))?;
            if n as usize >= MAX_PATH {
                return Err(RouteError::NotRoutable("route longer than 8 links"));
            }
            path[n as usize] = d;
            n += 1;
        }
        Ok((path, n))
    }

    /// Route of a configuration request from the host to `target` (not cached: the
    /// bus numbers it follows change while software enumerates). A request that
    /// routing cannot deliver ends where it stops: on the bus the last bridge forwarded
    /// it to (the device there answers Unsupported Request), or at that bridge when it
    /// is a root or downstream port that must not forward a Type 0 request to a device
    /// number other than 0, or when nothing sits below it; with no bridge at all, at
    /// the root complex.
    pub(crate) fn route_cfg(&self, target: Bdf) -> Result<Route, RouteError> {
        let fab = &self.fabric;
        let node_of = |f: FnId| fab.functions[f.0 as usize].node.0;
        let (hops, r) = fab.route_config_partial(target);
        let (dest_node, func, refuser) = match r {
            Ok(f) => (node_of(f), f.0, NONE),
            Err(e) => match hops.last() {
                None => (self.rc.node, NONE, NONE),
                Some(&b) => {
                    let port = matches!(
                        fab.functions[b.0 as usize].role,
                        Role::RootPort { .. } | Role::SwitchDownstream { .. }
                    );
                    let port_refuses =
                        port && matches!(e, RouteError::NoFunction(_)) && target.device() != 0;
                    let below = fab.functions[b.0 as usize]
                        .secondary
                        .and_then(|s| fab.buses[s.0 as usize].functions.first().copied());
                    match below {
                        Some(f) if !port_refuses => (node_of(f), NONE, f.0),
                        _ => (node_of(b), NONE, b.0),
                    }
                }
            },
        };
        let mut seq: Vec<u32> = vec![self.rc.node];
        for h in &hops {
            let n = node_of(*h);
            if *seq.last().unwrap_or(&NONE) != n {
                seq.push(n);
            }
        }
        if *seq.last().unwrap_or(&NONE) != dest_node {
            seq.push(dest_node);
        }
        let (path, n) = self.dir_path(&seq)?;
        // Type 0 on the last link when the target is on the bus that link is: an
        // endpoint function or a switch's upstream port (a switch's downstream ports
        // sit on its internal bus, reached by a Type 1 request the upstream port
        // converts).
        let type0_last = func != NONE
            && n > 0
            && !matches!(
                fab.functions[func as usize].role,
                Role::SwitchDownstream { .. } | Role::RootPort { .. } | Role::HostBridge
            );
        Ok((
            path,
            n,
            Dest::Config {
                node: dest_node,
                func,
                refuser,
                type0_last,
            },
        ))
    }

    pub(crate) fn fix_dest(dest: Dest, addr: u64) -> Dest {
        match dest {
            Dest::Bar {
                node,
                func,
                bar,
                offset,
            } => Dest::Bar {
                node,
                func,
                bar,
                offset: offset + (addr & 0xfff),
            },
            d => d,
        }
    }

    /// Forgets every cached route (after a configuration write: routing may change).
    pub(crate) fn invalidate_routes(&mut self) {
        self.routes.route_cache.clear();
        self.routes.route_last = NO_ROUTE;
        self.refresh_funcs();
    }

    pub(crate) fn origin_of(&self, node: u32) -> Origin {
        match self.nodes[node as usize].func {
            Some(f) => Origin::Function(f),
            None => Origin::Host,
        }
    }

    pub(crate) fn ep_bdf(&self, node: u32) -> Bdf {
        match &self.nodes[node as usize].kind {
            NodeKind::Ep(ep) => ep.bdf,
            _ => self.rc.bdf,
        }
    }

    /// Creates a TLP and hands it to the first direction of its path (or consumes it
    /// locally when the path is empty). Inlined: the caller's TLP is then written
    /// straight into the pool (a copy of a just-built struct stalls on its stores).
    #[inline(always)]
    pub(crate) fn inject(
        &mut self,
        origin: Origin,
        mut t: Tlp,
        dest_id: Bdf,
        cx: &mut Context<'_, PackedEv>,
    ) -> Result<u32, RouteError> {
        let (path, hops, dest) = self.route(origin, t.kind, t.addr, dest_id)?;
        self.at_source(origin, &mut t, (hops > 0).then_some(path[0]));
        Ok(self.launch(t, (path, hops, dest), cx))
    }

    /// Puts routed TLP `t` in the pool at the start of its route: its id.
    #[inline(always)]
    pub(crate) fn place(&mut self, mut t: Tlp, (path, hops, dest): Route) -> u32 {
        t.path = path;
        t.hops = hops;
        t.at = 0;
        t.dest = Self::fix_dest(dest, t.addr);
        t.refs = 1;
        t.ingress = NO_DIR;
        self.pool.alloc(t)
    }

    /// Sends `t` on its route as it is (no poisoning or ECRC marking at the source):
    /// the TLP's id.
    #[inline(always)]
    pub(crate) fn launch(&mut self, t: Tlp, route: Route, cx: &mut Context<'_, PackedEv>) -> u32 {
        let hops = route.1;
        let path0 = route.0[0];
        let id = self.place(t, route);
        if hops == 0 {
            cx.schedule_now(Ev::Consume(id));
        } else {
            self.enqueue(path0, id, cx);
        }
        id
    }

    /// A TLP that crosses one link only, direction `d`, to `dest` at its receiver: a
    /// message handled hop by hop (`code` in `Detail::Msg`).
    pub(crate) fn one_link_tlp(
        &self,
        d: u16,
        kind: Kind,
        requester: Bdf,
        code: u8,
        dest: Dest,
    ) -> Tlp {
        let mut path = [0u16; MAX_PATH];
        path[0] = d;
        Tlp {
            detail: Detail::Msg(code),
            path,
            hops: 1,
            dest,
            ..Tlp::new(kind, requester, 0, 0)
        }
    }

    /// The directions down from `node` (one per downstream link).
    pub(crate) fn down_dirs(&self, node: u32) -> Vec<u16> {
        (0..self.dirs.len())
            .filter(|&d| d % 2 == 0 && self.dirs[d].from == node)
            .map(|d| d as u16)
            .collect()
    }

    /// The direction up from `node` (to its upstream neighbour), if it has one.
    pub(crate) fn up_dir(&self, node: u32) -> Option<u16> {
        (0..self.dirs.len())
            .find(|&d| d % 2 == 1 && self.dirs[d].from == node)
            .map(|d| d as u16)
    }
}

#[cfg(test)]
mod tests {
    use crate::functional::Origin;
    use crate::params::SimConfig;
    use crate::timed::testkit::{build, dir, RC_SW_EP};
    use crate::timed::tlp::{Dest, Kind};
    use pcielab_wire::Bdf;

    #[test]
    fn a_memory_route_lists_its_directions_and_is_computed_once_per_page() {
        let mut s = build(RC_SW_EP, SimConfig::default());
        let (a, b) = (dir(&s, "rc", "sw"), dir(&s, "sw", "ep"));
        let bar = s.bar("ep", 0).unwrap();
        let e = s.sim.world_mut();
        let ep = e.nodes.iter().position(|n| n.name == "ep").unwrap() as u32;
        let (path, hops, dest) = e
            .route(Origin::Host, Kind::MWr, bar + 8, Bdf::default())
            .unwrap();
        assert_eq!((hops, &path[..2]), (2, &[a, b][..]));
        assert!(
            matches!(dest, Dest::Bar { node, bar: 0, .. } if node == ep),
            "{dest:?}"
        );
        // The page's route is cached: another address of that page finds it there, and
        // a fabric change (new BARs, say) drops the cache.
        assert_eq!(e.routes.route_cache.len(), 1);
        e.route(Origin::Host, Kind::MWr, bar + 0x100, Bdf::default())
            .unwrap();
        assert_eq!(e.routes.route_cache.len(), 1);
        e.invalidate_routes();
        assert!(e.routes.route_cache.is_empty());
        // An address no one claims has no route.
        assert!(e
            .route(Origin::Host, Kind::MWr, 0xdead_0000_0000, Bdf::default())
            .is_err());
    }
}
