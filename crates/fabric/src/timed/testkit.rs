//! For the components' unit tests: a small fabric built and enumerated by
//! [`FabricSim`], whose engine a test drives directly (a TLP put on a route, a
//! component's state read back).

use super::engine::Engine;
use super::sim::FabricSim;
use super::tlp::{Kind, Tlp};
use crate::functional::Origin;
use crate::kinds::KindRegistry;
use crate::params::SimConfig;
use crate::topology::Topology;
use pcielab_sim::SimTime;
use pcielab_wire::Bdf;

/// A root complex and a `psmem` device on a Gen3 x4 link.
pub(crate) const RC_EP: &str = "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n\
    [[node]]\nname=\"ep\"\nkind=\"psmem\"\n\
    [[link]]\nup=\"rc.0\"\ndown=\"ep\"\ngen=3\nwidth=4\n";

/// The same with a switch between them (both links Gen3 x4).
pub(crate) const RC_SW_EP: &str = "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n\
    [[node]]\nname=\"sw\"\nkind=\"switch\"\nports=1\n\
    [[node]]\nname=\"ep\"\nkind=\"psmem\"\n\
    [[link]]\nup=\"rc.0\"\ndown=\"sw\"\ngen=3\nwidth=4\n\
    [[link]]\nup=\"sw.0\"\ndown=\"ep\"\ngen=3\nwidth=4\n";

/// The fabric of `text`, enumerated, with its links trained and idle, tracing.
pub(crate) fn build(text: &str, cfg: SimConfig) -> FabricSim {
    let reg = KindRegistry::builtin();
    let t = Topology::parse(text, "unit.toml", &reg).expect("topology");
    let mut s = FabricSim::new(&t, &reg, SimConfig { trace: true, ..cfg }).expect("simulation");
    s.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    s
}

/// The link direction from node `from` to node `to` (by name).
pub(crate) fn dir(s: &FabricSim, from: &str, to: &str) -> u16 {
    let e = s.engine();
    let n = |name: &str| e.nodes.iter().position(|x| x.name == name).expect("node") as u32;
    e.routes.pair_dir[&(n(from), n(to))]
}

/// Puts a memory write of `data` at `addr` from the host on its route; its TLP id.
pub(crate) fn host_write(s: &mut FabricSim, addr: u64, data: &[u8]) -> u32 {
    s.sim.process(|e: &mut Engine, cx| {
        let p = e.pool.alloc_payload(data);
        let t = Tlp {
            data: p,
            ..Tlp::new(Kind::MWr, e.rc.bdf, addr, data.len() as u32)
        };
        e.inject(Origin::Host, t, Bdf::default(), cx)
            .expect("routable")
    })
}

/// The times (ps) of the TLPs the trace saw on direction `d`, in order.
pub(crate) fn tlp_times(s: &FabricSim, d: u16) -> Vec<u64> {
    let tr = s.engine().trace.as_ref().expect("tracing");
    tr.records
        .iter()
        .filter(|r| r.dir == d && matches!(r.kind, super::trace::TraceKind::Tlp { .. }))
        .map(|r| r.time_ps)
        .collect()
}
