//! [`FabricSim`], the host program's view of the timed simulator, and its
//! configuration checks.

use super::ats::state::AtsInvalidation;
use super::ats::AtsStats;
use super::dpc::state::DpcEvent;
use super::endpoint::{Endpoint, VendorMessage};
use super::engine::Engine;
use super::error::SimError;
use super::event::Ev;
use super::fault::SimFault;
use super::iommu::{IommuFault, IommuStats};
use super::ltr::state::LtrMessage;
use super::packed::{PackedEv, EVENT_KINDS, KIND_SLOTS};
use super::pri::state::PageRequestRecord;
use super::rc::state::{ErrorMessage, HostRead, IntxEvent, PmeMessage, PmeToAck};
use super::stats::{DeviceStats, FunctionDmaStats};
use super::trace::{DirCounters, Trace};
use super::{
    aspm, ats, dll, event, fc, hotplug, iommu, link, link_down, node, poison, pri, rc, regs, route,
    slot, switch, tlp,
};
use crate::params::{BufferCredits, SimConfig};
use crate::phy::LinkTiming;

use crate::functional::{Fabric, FnId, Interrupt, Origin, Role};
use crate::host::enumerate::{enumerate, EnumeratedTree, HostConfig};
use crate::inthash::IntMap;
use crate::kinds::KindRegistry;
use crate::topology::Topology;
use link::state::Dir;
use node::state::{Node, NodeKind};
use pcielab_sim::{Rng, SimBuilder, SimDuration, SimTime, Simulation};
use pcielab_wire::{Bdf, CplStatus};
use slot::state::EpState;
use std::collections::{HashMap, VecDeque};
use tlp::{Kind, Tlp, NONE};

/// The largest bit error rate [`SimConfig::ber`] accepts with Max_Payload_Size `mps`:
/// the one at which the largest TLP (`mps` + 28 bytes on the wire: framing, sequence
/// number, a 4DW header, ECRC and LCRC) is corrupted with probability 0.99, so every
/// TLP gets through after 100 transmissions on average. Above it the replays of a large
/// TLP may never end (at 1e-2, 1 − (1 − BER)^bits rounds to 1).
///
/// ```
/// use pcielab_fabric::timed::max_ber;
/// assert!((max_ber(256) - 2.03e-3).abs() < 1e-5);
/// assert!((max_ber(4096) - 1.395e-4).abs() < 1e-6);
/// ```
pub fn max_ber(mps: u16) -> f64 {
    let bits = (mps as f64 + 28.0) * 8.0;
    1.0 - 0.01f64.powf(1.0 / bits)
}

/// What host software programs when the simulator enumerates the fabric under `cfg`:
/// the default address map, and Max_Read_Request_Size = `cfg.mrrs` in every function,
/// so configuration dumps (`pcielab topo lspci`) show what the simulator sends.
///
/// ```
/// use pcielab_fabric::timed::{host_config, SimConfig};
/// assert_eq!(host_config(&SimConfig::default()).mrrs, Some(512));
/// ```
pub fn host_config(cfg: &SimConfig) -> HostConfig {
    HostConfig {
        mrrs: Some(cfg.mrrs),
        ..HostConfig::default()
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: None,
            mps: 256,
            mrrs: 512,
            rcb: 64,
            replay_buffer: 64,
            switch_latency: SimDuration::from_ns(150),
            cut_through: false,
            rc_latency: SimDuration::from_ns(100),
            mem_latency: SimDuration::from_ns(80),
            mem_per_line: SimDuration::ZERO,
            mem_tail: crate::host::model::LatencyDist::Zero,
            mmio_tail: crate::host::model::LatencyDist::Zero,
            host: crate::host::model::HostCosts::default(),
            cache: crate::host::model::CacheState::Cold,
            llc_lines: 0,
            llc_hit_latency: SimDuration::from_ns(30),
            numa_remote_base: None,
            numa_penalty: SimDuration::from_ns(60),
            ep_latency: SimDuration::ZERO,
            propagation: SimDuration::ZERO,
            port_buffer: BufferCredits {
                hdr: [64, 64, 64],
                data: [512, 512, 512],
            },
            ep_buffer: BufferCredits {
                hdr: [64, 64, 0],
                data: [512, 0, 0],
            },
            rc_infinite_cpl: true,
            error_rate: 0.0,
            ber: 0.0,
            dllp_error_rate: 0.0,
            poison_rate: 0.0,
            ecrc: false,
            switch_error_rate: 0.0,
            fc_update_period: SimDuration::from_us(30),
            retrain_time: SimDuration::from_us(1),
            link_training_time: SimDuration::from_us(100),
            device_ready_wait: SimDuration::from_ms(100),
            device_ready_time: SimDuration::ZERO,
            crs_retry_delay: SimDuration::from_us(10),
            completion_timeout: SimDuration::from_ms(10),
            pme_service_timeout: SimDuration::from_ms(100),
            aspm: 0,
            aspm_l0s_entry: aspm::DEFAULT_L0S_ENTRY,
            n_fts: crate::phy::DEFAULT_N_FTS,
            aspm_l1_entry: aspm::DEFAULT_L1_ENTRY,
            aspm_l1_exit: crate::phy::DEFAULT_L1_EXIT,
            aspm_l1_propagation: aspm::DEFAULT_L1_PROPAGATION,
            aspm_l1ss: false,
            dma_tags: 64,
            p2p_split: None,
            iommu: None,
            ats: false,
            atc_entries: 64,
            pri: false,
            acs: false,
            page_fault_latency: SimDuration::from_us(10),
            trace: false,
            log_writes: false,
            burst: 1,
        }
    }
}

fn check(cfg: &SimConfig) -> Result<(), SimError> {
    let pow2 = |v: u16, lo: u16| v >= lo && v <= 4096 && v.is_power_of_two();
    let p = |what, value: String, allowed| {
        Err(SimError::Param {
            what,
            value,
            allowed,
        })
    };
    if !pow2(cfg.mps, 128) {
        return p(
            "mps",
            cfg.mps.to_string(),
            "128, 256, 512, 1024, 2048, 4096",
        );
    }
    if !pow2(cfg.mrrs, 128) {
        return p(
            "mrrs",
            cfg.mrrs.to_string(),
            "128, 256, 512, 1024, 2048, 4096",
        );
    }
    if cfg.rcb != 64 && cfg.rcb != 128 {
        return p("rcb", cfg.rcb.to_string(), "64 or 128");
    }
    if cfg.replay_buffer == 0 || cfg.replay_buffer > 2048 {
        return p(
            "replay buffer",
            cfg.replay_buffer.to_string(),
            "1..=2048 TLPs",
        );
    }
    if cfg.burst == 0 || cfg.burst > 64 {
        return p("burst", cfg.burst.to_string(), "1..=64 TLPs");
    }
    if cfg.dma_tags == 0 || cfg.dma_tags > 768 {
        return p("dma tags", cfg.dma_tags.to_string(), "1..=768");
    }
    for (what, r) in [
        ("error rate", cfg.error_rate),
        ("dllp error rate", cfg.dllp_error_rate),
    ] {
        if !(0.0..1.0).contains(&r) {
            return p(what, r.to_string(), "0 <= p < 1");
        }
    }
    // A bit error rate is a per-bit probability: bounded so that the largest TLP still
    // gets through (see max_ber).
    if !(0.0..=max_ber(cfg.mps)).contains(&cfg.ber) {
        let bytes = cfg.mps as u32 + 28;
        let pr = 1.0 - (1.0 - cfg.ber.clamp(0.0, 1.0)).powf(bytes as f64 * 8.0);
        return p(
            "bit error rate",
            format!(
                "{} (with MPS {} a {bytes}-byte TLP would be corrupted with probability {pr:.4}; the largest allowed is {:.3e})",
                cfg.ber,
                cfg.mps,
                max_ber(cfg.mps)
            ),
            "0 <= BER with the largest TLP corrupted with probability at most 0.99 (about 2e-3 at MPS 256, 1.4e-4 at MPS 4096); PCIe requires 1e-12",
        );
    }
    if !(0.0..=1.0).contains(&cfg.poison_rate) {
        return p("poison rate", cfg.poison_rate.to_string(), "0 <= p <= 1");
    }
    if !(0.0..=1.0).contains(&cfg.switch_error_rate) {
        return p(
            "switch error rate",
            cfg.switch_error_rate.to_string(),
            "0 <= p <= 1",
        );
    }
    let fc = cfg.fc_update_period;
    if fc != SimDuration::ZERO && !(SimDuration::from_us(1)..=SimDuration::from_ms(1)).contains(&fc)
    {
        return p(
            "fc update period",
            format!("{} ps", fc.as_ps()),
            "0 (off) or 1 µs..=1 ms (the spec's 30 µs, 120 µs with Extended Synch)",
        );
    }
    // Durations with a closed range.
    let us = SimDuration::from_us;
    let ms = SimDuration::from_ms;
    for (what, v, lo, hi, allowed) in [
        (
            "link training time",
            cfg.link_training_time,
            us(1),
            ms(1000),
            "1 µs..=1 s",
        ),
        (
            "device ready time",
            cfg.device_ready_time,
            SimDuration::ZERO,
            ms(1000),
            "0..=1 s (PCIe Base Spec 6.6.1)",
        ),
        (
            "CRS retry delay",
            cfg.crs_retry_delay,
            SimDuration::from_ns(100),
            ms(10),
            "100 ns..=10 ms",
        ),
        (
            "device ready wait",
            cfg.device_ready_wait,
            SimDuration::ZERO,
            ms(1000),
            "0..=1 s",
        ),
        (
            "aspm l0s entry",
            cfg.aspm_l0s_entry,
            SimDuration::from_ns(1),
            ms(1000),
            "1 ns..=1 s (L0s: the spec's at most 7 µs)",
        ),
        (
            "aspm l1 entry",
            cfg.aspm_l1_entry,
            SimDuration::from_ns(1),
            ms(1000),
            "1 ns..=1 s (L0s: the spec's at most 7 µs)",
        ),
        (
            "aspm l1 exit",
            cfg.aspm_l1_exit,
            SimDuration::ZERO,
            ms(1),
            "0..=1 ms",
        ),
        (
            "switch latency",
            cfg.switch_latency,
            SimDuration::ZERO,
            ms(1000),
            "0..=1 s",
        ),
        (
            "propagation",
            cfg.propagation,
            SimDuration::ZERO,
            ms(1),
            "0..=1 ms per link direction (200 km; PCIe's replay timer allows for a few ns)",
        ),
        (
            "aspm l1 propagation",
            cfg.aspm_l1_propagation,
            SimDuration::ZERO,
            us(1),
            "0..=1 µs (the spec's bound)",
        ),
    ] {
        if !(lo..=hi).contains(&v) {
            return p(what, format!("{} ps", v.as_ps()), allowed);
        }
    }
    let pme = cfg.pme_service_timeout;
    if pme != SimDuration::ZERO
        && !(SimDuration::from_us(1)..=SimDuration::from_ms(1000)).contains(&pme)
    {
        return p(
            "pme service timeout",
            format!("{} ps", pme.as_ps()),
            "0 (never re-sent) or 1 µs..=1 s (the spec's 100 ms)",
        );
    }
    if cfg.aspm > 3 {
        return p(
            "aspm",
            cfg.aspm.to_string(),
            "0 (off), 1 (L0s), 2 (L1) or 3 (L0s and L1)",
        );
    }
    if let Some(p2p) = cfg.p2p_split {
        if !p2p.is_power_of_two() || !(4..=4096).contains(&p2p) {
            return p(
                "p2p split",
                p2p.to_string(),
                "a power of two, 4..=4096 bytes",
            );
        }
    }
    if cfg.ats && cfg.iommu.is_none() {
        return p(
            "ats",
            "true without an IOMMU".into(),
            "SimConfig::iommu set: the IOMMU is the translation agent",
        );
    }
    if cfg.pri && !cfg.ats {
        return p(
            "pri",
            "true without ATS".into(),
            "SimConfig::ats set: page requests follow refused translations",
        );
    }
    if cfg.page_fault_latency > SimDuration::from_ms(1000) {
        return p(
            "page fault latency",
            format!("{} ps", cfg.page_fault_latency.as_ps()),
            "0..=1 s",
        );
    }
    if !(1..=65536).contains(&cfg.atc_entries) {
        return p("atc entries", cfg.atc_entries.to_string(), "1..=65536");
    }
    if let Some(m) = cfg.iommu {
        if !m.page_size.is_power_of_two() || !(4096..=1 << 30).contains(&m.page_size) {
            return p(
                "iommu page size",
                m.page_size.to_string(),
                "a power of two, 4096..=1073741824",
            );
        }
        if m.iotlb_entries == 0 {
            return p("iotlb entries", "0".into(), "1 or more");
        }
    }
    Ok(())
}

/// The function that receives (and logs errors of) TLPs on direction `k` (0 down, 1 up)
/// of link `l`.
fn rx_func(
    fabric: &Fabric,
    nodes: &[Node],
    l: &crate::topology::Link,
    to: u32,
    k: usize,
) -> Option<FnId> {
    let find = |p: &dyn Fn(Role) -> bool| {
        fabric
            .functions
            .iter()
            .position(|f| f.node.0 == to && p(f.role))
            .map(|i| FnId(i as u32))
    };
    match (&nodes[to as usize].kind, k) {
        (NodeKind::Rc, _) => find(&|r| r == Role::RootPort { port: l.up_port }),
        (NodeKind::Switch, 0) => find(&|r| r == Role::SwitchUpstream),
        (NodeKind::Switch, _) => find(&|r| r == Role::SwitchDownstream { port: l.up_port }),
        (NodeKind::Ep(_), _) => nodes[to as usize].func,
    }
}

/// Simulator memory per in-flight TLP, in bytes: the TLP record, its slots in an
/// egress queue and the replay buffer, and one pending kernel event (payload bytes,
/// which live in a pooled buffer, not counted).
pub fn bytes_per_inflight_tlp() -> usize {
    core::mem::size_of::<Tlp>()
        + core::mem::size_of::<(u64, u32)>()
        + core::mem::size_of::<(u32, u32)>()
        + core::mem::size_of::<PackedEv>()
        + 24
}

/// A host read in flight ([`FabricSim::mmio_read_start`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HostTicket(u16);

/// A timed simulation of a topology, driven as a host program.
#[derive(Debug)]
pub struct FabricSim {
    pub(super) sim: Simulation<Engine>,
    pub(super) tree: EnumeratedTree,
    pub(super) node_index: HashMap<String, u32>,
    pub(super) dma_next: u64,
    /// Functions assigned to a virtual machine ([`FabricSim::assign_vm`]).
    pub(super) vm: std::collections::HashSet<Bdf>,
}

impl FabricSim {
    /// TLP link traversals so far (TLPs put on any link direction, replays excluded).
    pub fn traversals(&self) -> u64 {
        self.sim.world().dirs.iter().map(|d| d.counters.tlps).sum()
    }

    /// TLP records alive: in egress queues, replay buffers, on the wires, in switches
    /// and in the root complex. Zero once the fabric is idle and every TLP has been
    /// acknowledged (a diagnostic: a leak stays positive; a record freed twice, a bug,
    /// would make it negative).
    pub fn tlps_in_flight(&self) -> i64 {
        let e = self.sim.world();
        e.pool.in_flight()
    }

    /// Builds the functional fabric from `topo`, enumerates it like host software,
    /// and wraps it in the timed model. Each endpoint runs the device model its kind
    /// built (psmem: `pcielab_device::PsMem`), until another one is
    /// [`attach`](Self::attach)ed; MSI-X tables are the fabric's either way. Links
    /// start training at time 0.
    pub fn new(
        topo: &Topology,
        registry: &KindRegistry,
        cfg: SimConfig,
    ) -> Result<FabricSim, SimError> {
        check(&cfg)?;
        let mut fabric =
            Fabric::build(topo, registry).map_err(|e| SimError::Build(e.to_string()))?;
        let tree = enumerate(&mut fabric, &host_config(&cfg))
            .map_err(|e| SimError::Build(e.to_string()))?;
        let seed = cfg.seed.unwrap_or(topo.seed);
        let root_rng = Rng::new(seed);
        let mut nodes = Vec::new();
        let mut node_index = HashMap::new();
        let mut rc_node = NONE;
        for (i, n) in topo.nodes.iter().enumerate() {
            let func = |role: &dyn Fn(Role) -> bool| {
                fabric
                    .functions
                    .iter()
                    .position(|f| f.node.0 as usize == i && role(f.role))
                    .map(|p| FnId(p as u32))
            };
            // The node's role comes from its kind's registration, not its name.
            let role = registry.get(&n.kind).map(|k| k.role);
            let (kind, f) = match role {
                Some(crate::kinds::KindRole::RootComplex) => {
                    rc_node = i as u32;
                    (NodeKind::Rc, func(&|r| r == Role::HostBridge))
                }
                Some(crate::kinds::KindRole::Switch) => {
                    (NodeKind::Switch, func(&|r| r == Role::SwitchUpstream))
                }
                _ => {
                    let f = func(&|r| r == Role::Endpoint);
                    let bdf = f.map(|f| fabric.bdf(f)).unwrap_or(Bdf::from_raw(0));
                    (
                        NodeKind::Ep(Box::new(EpState {
                            model: None,
                            bdf,
                            free_tags: (0..cfg.dma_tags).rev().collect(),
                            tag_map: vec![None; 1024],
                            ops: Vec::new(),
                            free_ops: Vec::new(),
                            sg: Vec::new(),
                            free_sg: Vec::new(),
                            read_queue: VecDeque::new(),
                            rd_hold: 0,
                            held_reads: Vec::new(),
                            tickets: IntMap::default(),
                            state: pcielab_device::DeviceState {
                                next_dma: 0,
                                rng: root_rng.fork(i as u64 + 1),
                            },
                            up_dir: 0,
                            intx_sent: false,
                            timeout_armed: false,
                            timeout_key: None,
                            bus_master: false,
                            raw_reads: IntMap::default(),
                            policy: pcielab_device::DmaPolicy::DEFAULT,
                            timing: pcielab_device::DeviceTiming::NONE,
                            rx_free: SimTime::ZERO,
                            tx_free: SimTime::ZERO,
                            held: VecDeque::new(),
                            draining: false,
                            stats: DeviceStats::default(),
                            funcs: Vec::new(),
                            reorder: Vec::new(),
                            cable: NONE,
                            part: None,
                            fn_stats: Vec::new(),
                        })),
                        f,
                    )
                }
            };
            node_index.insert(n.name.clone(), i as u32);
            nodes.push(Node {
                fifo: pcielab_sim::EventQueue::<()>::new().new_fifo(),
                read_fifo: pcielab_sim::EventQueue::<()>::new().new_fifo(),
                name: n.name.clone(),
                kind,
                func: f,
            });
        }
        if rc_node == NONE {
            return Err(SimError::Build(
                "the topology has no root-complex node".into(),
            ));
        }
        // Ethernet cables between devices (`cable = "NODE"`): each end knows the other.
        for (i, n) in topo.nodes.iter().enumerate() {
            let Some(peer) = n.params.str("cable").filter(|p| !p.is_empty()) else {
                continue;
            };
            let bad = |why: String| {
                SimError::Build(format!(
                    "node {:?} (line {}): key \"cable\": {why}",
                    n.name, n.line
                ))
            };
            let Some(&j) = node_index.get(peer) else {
                return Err(bad(format!("no node is called {peer:?}")));
            };
            if j as usize == i {
                return Err(bad(
                    "a cable from a device to itself (use rx = \"loopback\")".into(),
                ));
            }
            if !matches!(nodes[j as usize].kind, NodeKind::Ep(_)) {
                return Err(bad(format!("{peer:?} is not a device")));
            }
            let back = topo.nodes[j as usize].params.str("cable").unwrap_or("");
            if back != n.name {
                return Err(bad(if back.is_empty() {
                    format!("{peer:?} does not name {:?} back (a cable has two ends: give {peer:?} cable = {:?})", n.name, n.name)
                } else {
                    format!("{peer:?} is cabled to {back:?} (a cable has two ends)")
                }));
            }
            for (a, b) in [(i as u32, j), (j, i as u32)] {
                if let NodeKind::Ep(ep) = &mut nodes[a as usize].kind {
                    ep.cable = b;
                }
            }
        }
        let host_bdf = Bdf::from_raw(0);
        let mut sim_dirs = Vec::new();
        let mut pair_dir = IntMap::default();
        let dummy_fifo = pcielab_sim::EventQueue::<()>::new().new_fifo();
        let mut names = Vec::new();
        for (li, l) in topo.links.iter().enumerate() {
            let up = &topo.nodes[l.up.index()].name;
            let down = &topo.nodes[l.down.index()].name;
            let timing = LinkTiming::new(l.gen, l.width);
            for (k, (from, to, name)) in [
                (l.up.0, l.down.0, format!("{up}.{}->{down}", l.up_port)),
                (l.down.0, l.up.0, format!("{down}->{up}.{}", l.up_port)),
            ]
            .into_iter()
            .enumerate()
            {
                let d = (li * 2 + k) as u16;
                pair_dir.insert((from, to), d);
                let mut buf = match nodes[to as usize].kind {
                    NodeKind::Ep(_) => cfg.ep_buffer,
                    _ => cfg.port_buffer,
                };
                if matches!(nodes[to as usize].kind, NodeKind::Rc) && cfg.rc_infinite_cpl {
                    buf.hdr[2] = 0;
                    buf.data[2] = 0;
                }
                if matches!(nodes[to as usize].kind, NodeKind::Ep(_)) {
                    buf.hdr[2] = 0;
                    buf.data[2] = 0;
                }
                if let NodeKind::Ep(ep) = &mut nodes[from as usize].kind {
                    ep.up_dir = d;
                }
                names.push(name.clone());
                sim_dirs.push(Dir {
                    name,
                    from,
                    to,
                    timing,
                    free_at: 0,
                    free_at_ps: 0,
                    busy: false,
                    last_arrive_ps: 0,
                    deferred_tx: None,
                    fifo: dummy_fifo,
                    tx_fifo: dummy_fifo,
                    prop_ps: cfg.propagation.as_ps(),
                    ack_ps: timing.symbols_ps(timing.ack_limit_symbols(cfg.mps)),
                    fc_ps: timing.symbols_ps(timing.ack_limit_symbols(cfg.mps)),
                    aspm: 0,
                    l0s_exit_ps: timing.l0s_exit_ps(cfg.n_fts),
                    up: false,
                    init_seen: 0,
                    down: false,
                    held: 0,
                    stale_until_ps: 0,
                    train_gen: 0,
                    poison_block: false,
                    egress_block: 0,
                    bme_block: 0,
                    l12: None,
                    q: Default::default(),
                    order: 0,
                    tx_fc: Default::default(),
                    replay: dll::TxReplay::new(
                        cfg.replay_buffer,
                        SimDuration::from_ps(timing.replay_timeout_ps(cfg.mps)),
                    ),
                    burst_tx: (0, 0, 0, 0),
                    burst_ins: (0, 0),
                    postponed: VecDeque::new(),
                    dllq: VecDeque::new(),
                    rx_seq: Default::default(),
                    rx_ack_pending: false,
                    ack_fifo: dummy_fifo,
                    rx_buf: buf,
                    rx_fc: fc::RxCredits::new(&buf),
                    rx_fc_timer: [None; 3],
                    stall_since: None,
                    rstall_since: None,
                    rx_func: rx_func(&fabric, &nodes, l, to, k),
                    fc_refresh: [0; 3],
                    fc_sent_ps: [0; 3],
                    counters: DirCounters::default(),
                });
            }
        }
        let mut sim = SimBuilder::new(Engine {
            cfg: cfg.clone(),
            fabric,
            nodes,
            dirs: sim_dirs,
            pool: Default::default(),
            ready_at: vec![0; topo.nodes.len()],
            eth: Default::default(),
            interrupts: Vec::new(),
            intx_events: Vec::new(),
            error_messages: Vec::new(),
            intx_wires: Default::default(),
            intx_count: Default::default(),
            trace: if cfg.trace {
                Some(Trace::new(names))
            } else {
                None
            },
            write_log: Vec::new(),
            cmds: Vec::new(),
            timed_devices: false,
            scratch: Vec::new(),
            errors: Vec::new(),
            err_rng: root_rng.fork(0),
            last_rx_func: None,
            raw_why: HashMap::new(),
            iommu: cfg.iommu.map(iommu::Iommu::new),
            ecrc: Vec::new(),
            ecrc_any: false,
            ats: Default::default(),
            ats_any: false,
            burst_max: 1,
            cpl_burst_max: 1,
            rd_burst_max: 1,
            scatter_max: 1,
            scatter_fits: Vec::new(),
            aer_records: Default::default(),
            ats_orphans: Vec::new(),
            pme_messages: Vec::new(),
            pme_state: Default::default(),
            vendor_messages: Vec::new(),
            pme_to_acks: Vec::new(),
            turn_off_held: Default::default(),
            dpc_events: Vec::new(),
            ltr_messages: Vec::new(),
            ltr_link: Default::default(),
            rc: rc::state::RootComplex {
                node: rc_node,
                bdf: host_bdf,
                host_tags: (0..256u16).rev().collect(),
                host_fifo: pcielab_sim::EventQueue::<()>::new().new_fifo(),
                host_reqs: IntMap::default(),
                host_done: IntMap::default(),
                host_rng: root_rng.fork(0x4057),
                posted_last: SimTime::ZERO,
                llc_set: Default::default(),
                poison_lines: Default::default(),
                ats_invals: Vec::new(),
                ats_trusted: Vec::new(),
                on_demand: Vec::new(),
                page_requests: Vec::new(),
                llc_fifo: VecDeque::new(),
                p2p_tags: (256..512u16).rev().collect(),
                p2p_tag_map: Default::default(),
                p2p_reads: Default::default(),
                p2p_next: 0,
                root_irq: Default::default(),
                pme_queue: Default::default(),
            },
            routes: route::state::Routes {
                pair_dir,
                route_cache: Default::default(),
                route_last: tlp::NO_ROUTE,
            },
            switches: switch::state::Switches {
                turn_off_wait: Default::default(),
                hotplug_irq: Default::default(),
                ltr_ports: Default::default(),
                ltr_sent: Default::default(),
            },
            event_kinds: [0; KIND_SLOTS],
        })
        .seed(seed)
        .capacity(4096)
        .build();
        for d in 0..sim.world().dirs.len() {
            let f = sim.new_fifo();
            let g = sim.new_fifo();
            let h = sim.new_fifo();
            sim.world_mut().dirs[d].fifo = f;
            sim.world_mut().dirs[d].tx_fifo = g;
            sim.world_mut().dirs[d].ack_fifo = h;
        }
        for n in 0..sim.world().nodes.len() {
            let (f, r) = (sim.new_fifo(), sim.new_fifo());
            sim.world_mut().nodes[n].fifo = f;
            sim.world_mut().nodes[n].read_fifo = r;
        }
        let f = sim.new_fifo();
        sim.world_mut().rc.host_fifo = f;
        sim.world_mut().init_aspm();
        sim.world_mut().init_bus_master();
        sim.world_mut().refresh_funcs();
        sim.world_mut().init_burst();
        if cfg.ecrc {
            sim.world_mut().enable_ecrc();
        }
        if cfg.iommu.is_some_and(|m| m.pasid) {
            sim.world_mut().enable_pasid();
        }
        if cfg.ats {
            sim.world_mut().enable_ats_pri(cfg.pri);
        }
        if cfg.acs {
            sim.world_mut().enable_acs();
        }
        let mut fs = FabricSim {
            sim,
            tree,
            node_index,
            dma_next: 0x1_0000_0000,
            vm: Default::default(),
        };
        // Every endpoint's device model, as its kind built it, runs here.
        for n in 0..fs.sim.world().nodes.len() {
            let w = fs.sim.world_mut();
            let model = w.fabric.devices.get_mut(n).and_then(Option::take);
            if let Some(model) = model {
                let name = w.nodes[n].name.clone();
                fs.install(n as u32, &name, model)?;
            }
        }
        // Link training ends in the InitFC handshake: every receiver advertises its
        // buffers with InitFC1 and InitFC2 for P, NP and Cpl (0 = infinite).
        fs.sim.process(|e, cx| {
            for d in 0..e.dirs.len() {
                e.queue_init_fc(d);
            }
            for d in 0..e.dirs.len() {
                e.try_send(d as u16, cx);
            }
            // The periodic UpdateFC of every receiver with finite credits.
            let period = e.cfg.fc_update_period;
            if period > SimDuration::ZERO {
                for d in 0..e.dirs.len() {
                    if e.dirs[d].finite_classes().next().is_some() {
                        cx.schedule_background_at(cx.now() + period, Ev::FcRefresh(d as u16));
                    }
                }
            }
            for n in 0..e.nodes.len() {
                e.call_ep(n as u32, cx, |m, cx| m.start(cx));
            }
        });
        Ok(fs)
    }

    fn node(&self, name: &str) -> Result<u32, SimError> {
        self.node_index
            .get(name)
            .copied()
            .ok_or_else(|| SimError::UnknownNode(name.to_string()))
    }

    /// Replaces the device model of endpoint node `name`; its `start` runs now.
    pub fn attach(&mut self, name: &str, model: Box<dyn Endpoint>) -> Result<(), SimError> {
        let n = self.node(name)?;
        self.install(n, name, model)?;
        self.sim.process(|e, cx| {
            e.call_ep(n, cx, |m, cx| m.start(cx));
        });
        Ok(())
    }

    /// Makes `model` node `n`'s device model (its DMA policy and timing checked).
    fn install(&mut self, n: u32, name: &str, model: Box<dyn Endpoint>) -> Result<(), SimError> {
        let (policy, timing) = (model.dma_policy(), model.timing());
        let bad = |what: &'static str, e: String| SimError::Param {
            what,
            value: format!("{name}: {e}"),
            allowed: "see pcielab_device::DmaPolicy and DeviceTiming",
        };
        let functions = self
            .sim
            .world()
            .fabric
            .function_capacity(crate::topology::NodeId(n));
        let functions = u16::try_from(functions).unwrap_or(u16::MAX);
        policy
            .check(ats::ATS_TAG_BASE, functions)
            .map_err(|e| bad("device DMA policy", e))?;
        timing.check().map_err(|e| bad("device timing", e))?;
        match &mut self.sim.world_mut().nodes[n as usize].kind {
            NodeKind::Ep(ep) => {
                let retags = policy.tags.is_some() || policy.tags_per_function.is_some();
                if retags && ep.ops.iter().any(|o| o.live) {
                    let e = "its tags cannot change while DMAs are in flight".to_string();
                    return Err(bad("device DMA policy", e));
                }
                if let Some((first, count)) = policy.tags {
                    ep.free_tags = (first..first + count).rev().collect();
                }
                ep.part = policy.tags_per_function.map(|k| {
                    let first = policy.tags.map_or(0, |t| t.0);
                    Box::new(slot::TagPartition::new(first, k, functions))
                });
                ep.model = Some(model);
                ep.policy = policy;
                ep.timing = timing;
                ep.rx_free = SimTime::ZERO;
                ep.tx_free = SimTime::ZERO;
            }
            _ => {
                return Err(SimError::Param {
                    what: "node",
                    value: name.to_string(),
                    allowed: "an endpoint node (not a root complex or switch)",
                })
            }
        }
        let world = self.sim.world_mut();
        world.timed_devices |= !timing.is_none();
        Ok(())
    }

    /// What the simulator counted about endpoint `name`'s device model (backpressure,
    /// its DMA engine's reorder window).
    pub fn device_stats(&self, name: &str) -> Option<DeviceStats> {
        let n = self.node(name).ok()?;
        match &self.sim.world().nodes[n as usize].kind {
            NodeKind::Ep(ep) => Some(DeviceStats {
                held: ep.held.len() as u64,
                ..ep.stats
            }),
            _ => None,
        }
    }

    /// What the simulator counted about each function of endpoint `name`'s device,
    /// by function index (as `EpCx::function` numbers them: 0 the PF, then its VFs):
    /// read requests and stalls with tag ranges per function, Unexpected
    /// Completions, Function Level Resets. Functions with nothing counted yet may
    /// be missing at the end of the list.
    pub fn function_dma_stats(&self, name: &str) -> Option<Vec<FunctionDmaStats>> {
        let n = self.node(name).ok()?;
        match &self.sim.world().nodes[n as usize].kind {
            NodeKind::Ep(ep) => Some(ep.fn_stats.clone()),
            _ => None,
        }
    }

    /// The device model of endpoint `name`.
    pub fn model(&self, name: &str) -> Option<&dyn Endpoint> {
        let n = self.node(name).ok()?;
        match &self.sim.world().nodes[n as usize].kind {
            NodeKind::Ep(ep) => ep.model.as_deref(),
            _ => None,
        }
    }

    /// What enumeration found.
    pub fn tree(&self) -> &EnumeratedTree {
        &self.tree
    }

    /// The functional fabric (configuration spaces, host memory).
    pub fn fabric(&self) -> &Fabric {
        &self.sim.world().fabric
    }

    /// The address enumeration assigned to BAR `bar` of endpoint `name`.
    pub fn bar(&self, name: &str, bar: u8) -> Option<u64> {
        let n = self.node(name).ok()?;
        let f = self.sim.world().nodes[n as usize].func?;
        let bdf = self.fabric().bdf(f);
        self.tree
            .get(bdf)?
            .bars
            .iter()
            .find(|b| b.index == bar)
            .map(|b| b.address)
    }

    /// The requester ID of endpoint `name`.
    pub fn bdf(&self, name: &str) -> Option<Bdf> {
        let n = self.node(name).ok()?;
        let f = self.sim.world().nodes[n as usize].func?;
        Some(self.fabric().bdf(f))
    }

    /// The requester ID of function `index` of endpoint `name`, numbered as its
    /// device model numbers them ([`pcielab_device::Cx::function`]): 0 is function 0,
    /// then the device's other functions, then the VFs host enumeration enabled.
    /// `None` for a function the device does not have (yet).
    ///
    /// ```
    /// use pcielab_fabric::{kinds::KindRegistry, topology::Topology};
    /// use pcielab_fabric::timed::{FabricSim, SimConfig};
    /// let reg = KindRegistry::builtin();
    /// let t = Topology::parse(
    ///     "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n\
    ///      [[node]]\nname=\"dma\"\nkind=\"dma-engine\"\nvfs=2\n\
    ///      [[link]]\nup=\"rc.0\"\ndown=\"dma\"\ngen=3\nwidth=8\n",
    ///     "doc.toml", &reg)?;
    /// let sim = FabricSim::new(&t, &reg, SimConfig::default())?;
    /// assert_eq!(sim.function_bdf("dma", 0), sim.bdf("dma"));
    /// assert_eq!(sim.function_bdf("dma", 2).unwrap().to_string(), "01:00.2");
    /// assert_eq!(sim.function_bdf("dma", 3), None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn function_bdf(&self, name: &str, index: u16) -> Option<Bdf> {
        let n = self.node(name).ok()?;
        let f = match &self.sim.world().nodes[n as usize].kind {
            NodeKind::Ep(ep) if index > 0 => *ep.funcs.get(index as usize)?,
            _ if index == 0 => self.sim.world().nodes[n as usize].func?,
            _ => return None,
        };
        Some(self.fabric().bdf(f))
    }

    /// The address enumeration assigned to BAR `bar` of function `index` of endpoint
    /// `name` (numbered as in [`FabricSim::function_bdf`]; a VF's BAR `n` is its
    /// share of the PF's VF BAR `n`).
    pub fn function_bar(&self, name: &str, index: u16, bar: u8) -> Option<u64> {
        let bdf = self.function_bdf(name, index)?;
        self.tree
            .get(bdf)?
            .bars
            .iter()
            .find(|b| b.index == bar)
            .map(|b| b.address)
    }

    /// The current simulated time.
    pub fn now(&self) -> SimTime {
        self.sim.now()
    }

    /// Kernel events pending (0 when every device and link is idle), the links'
    /// periodic UpdateFC refreshes not counted.
    pub fn pending_events(&self) -> usize {
        self.sim.pending_foreground()
    }

    /// The largest burst of DMA writes in effect (`SimConfig::burst` as capped by the
    /// fabric's buffers, see the `burst` module; 1 when burst mode is off or turned
    /// itself off).
    ///
    /// ```
    /// # use pcielab_fabric::{kinds::KindRegistry, topology::Topology};
    /// # use pcielab_fabric::timed::{FabricSim, SimConfig};
    /// let t = Topology::parse(
    ///     "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n[[node]]\nname=\"ep\"\nkind=\"psmem\"\n\
    ///      [[link]]\nup=\"rc.0\"\ndown=\"ep\"\ngen=3\nwidth=8\n",
    ///     "t.toml",
    ///     &KindRegistry::builtin(),
    /// )
    /// .unwrap();
    /// let cfg = SimConfig { burst: 16, ..SimConfig::default() };
    /// let sim = FabricSim::new(&t, &KindRegistry::builtin(), cfg).unwrap();
    /// assert_eq!(sim.burst_size(), 16); // a whole 4 KiB page of 256-byte writes
    /// ```
    pub fn burst_size(&self) -> u32 {
        self.sim.world().burst_max
    }

    /// The largest burst of completions in effect: the root complex's whole-MPS
    /// completions of one read request, or of a burst of them, travel together (1
    /// when off; at most MRRS / MPS times [`read_burst_size`](Self::read_burst_size);
    /// see the `burst` module).
    pub fn completion_burst_size(&self) -> u32 {
        self.sim.world().cpl_burst_max
    }

    /// The largest burst of read requests in effect: a DMA engine's whole
    /// MRRS-sized requests of one DMA in one 4 KiB page, with consecutive tags,
    /// travel together (1 when off; at most 4096 / MRRS and 8; see the `burst`
    /// module).
    pub fn read_burst_size(&self) -> u32 {
        self.sim.world().rd_burst_max
    }

    /// The largest scatter bursts in effect for small reads of `len` bytes: (read
    /// requests, completions). Burst mode groups the DMA reads of one request each
    /// (DW-aligned, at most MPS, in one page of host memory) that a device asks for
    /// at one instant, each piece with its own address and tag; a burst of requests
    /// is also kept small enough that half the root port's non-posted header credits
    /// stay free (checked when it is formed). (1, 1) when off; see the `burst`
    /// module.
    ///
    /// ```
    /// use pcielab_fabric::timed::{FabricSim, SimConfig};
    /// use pcielab_fabric::kinds::KindRegistry;
    /// use pcielab_fabric::topology::Topology;
    /// let text = "[[node]]\nname = \"rc\"\nkind = \"root-complex\"\n\
    ///             [[node]]\nname = \"ep\"\nkind = \"psmem\"\n\
    ///             [[link]]\nup = \"rc.0\"\ndown = \"ep\"\ngen = 3\nwidth = 8\n";
    /// let reg = KindRegistry::builtin();
    /// let t = Topology::parse(text, "t.toml", &reg)?;
    /// let cfg = SimConfig { burst: 16, ..SimConfig::default() };
    /// let sim = FabricSim::new(&t, &reg, cfg)?;
    /// let (requests, completions) = sim.scatter_burst_sizes(64);
    /// assert!(requests > 1 && completions > 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn scatter_burst_sizes(&self, len: u32) -> (u32, u32) {
        self.sim.world().scatter_fit(len)
    }

    /// Kernel events delivered so far.
    pub fn events(&self) -> u64 {
        self.sim.delivered()
    }

    /// Kernel events handled so far, by kind (those of [`EVENT_KINDS`], in its order;
    /// their sum is [`events`](Self::events)): where a workload's events go.
    ///
    /// ```
    /// # use pcielab_fabric::{kinds::KindRegistry, topology::Topology};
    /// use pcielab_fabric::timed::{FabricSim, SimConfig};
    /// # let t = Topology::parse("[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n[[node]]\nname=\"m\"\nkind=\"psmem\"\n[[link]]\nup=\"rc.0\"\ndown=\"m\"\ngen=3\nwidth=4\n", "t.toml", &KindRegistry::builtin()).unwrap();
    /// let mut sim = FabricSim::new(&t, &KindRegistry::builtin(), SimConfig::default())?;
    /// let bar = sim.bar("m", 0).unwrap();
    /// sim.mmio_read(bar, 4)?; // a read request down, its completion up
    /// let k = sim.events_by_kind();
    /// assert_eq!(k.iter().map(|(_, n)| n).sum::<u64>(), sim.events());
    /// let n = |kind| k.iter().find(|(name, _)| *name == kind).unwrap().1;
    /// assert!(n("arrive-tlp") >= 2 && n("consume") >= 1);
    /// # Ok::<(), pcielab_fabric::timed::SimError>(())
    /// ```
    pub fn events_by_kind(&self) -> Vec<(&'static str, u64)> {
        let mut n = [0u64; EVENT_KINDS.len()];
        for (slot, &count) in self.sim.world().event_kinds.iter().enumerate() {
            n[PackedEv::slot_kind(slot)] += count;
        }
        EVENT_KINDS.iter().copied().zip(n).collect()
    }

    /// Reads a configuration dword (zero simulated time, through ECAM).
    pub fn cfg_read(&mut self, bdf: Bdf, register: u16) -> u32 {
        self.sim
            .world()
            .fabric
            .ecam_read(((bdf.raw() as u64) << 12) | (register & 0xffc) as u64, 4)
    }

    /// Writes a configuration dword (zero simulated time).
    pub fn cfg_write(&mut self, bdf: Bdf, register: u16, value: u32) {
        let e = self.sim.world_mut();
        // The write itself; what it releases (pending MSI-X messages, say) goes out as
        // TLPs from `after_config_write`.
        let mut flr = None;
        if let Ok(r) = e.fabric.route_config(bdf) {
            let all = pcielab_wire::ByteEnables::ALL;
            let scope = e.flr_scope(r.target);
            if e.fabric
                .config_write_fn_flr(r.target, register & 0xffc, value, all)
            {
                flr = Some(scope);
            }
        }
        // A Function Level Reset drops the function's DMAs (see the `flr` module).
        if let Some(scope) = flr {
            self.sim.process(|e, cx| e.function_level_reset(scope, cx));
        }
        let e = self.sim.world_mut();
        // Bus numbers, BARs, windows or enables may have changed.
        e.invalidate_routes();
        // A root port's interrupt may follow (Root Error Command/Status, Root
        // Control/Status, MSI, INTx), a queued PME be delivered, or a device's PME be
        // asserted (PME_En) or withdrawn (PME_Status cleared).
        if let Some(f) = e.fabric.function_at(bdf) {
            self.sim.process(|e, cx| e.after_config_write(f, cx));
        }
    }

    /// A configuration read as the root complex performs it: a CfgRd TLP (Type 1 on
    /// the links before the target's bus, Type 0 on the last one) leaves after the
    /// root complex's latency, and the simulation runs until its completion returns.
    /// `Done` holds the register's four bytes (little endian). A request that routing
    /// cannot deliver travels as far as it goes and comes back as `Failed(Ur)` (host
    /// software reads all-ones); a function on the root complex's own bus (a root
    /// port) answers without crossing a link.
    ///
    /// ```
    /// # use pcielab_fabric::{kinds::KindRegistry, topology::Topology};
    /// # use pcielab_fabric::timed::{FabricSim, HostRead, SimConfig};
    /// let reg = KindRegistry::builtin();
    /// let topo = Topology::parse(
    ///     "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n\
    ///      [[node]]\nname=\"ep\"\nkind=\"psmem\"\n\
    ///      [[link]]\nup=\"rc.0\"\ndown=\"ep\"\ngen=3\nwidth=8\n",
    ///     "doc.toml",
    ///     &reg,
    /// )
    /// .unwrap();
    /// let mut sim = FabricSim::new(&topo, &reg, SimConfig::default()).unwrap();
    /// let ep = sim.bdf("ep").unwrap();
    /// let HostRead::Done { data, issued, done } = sim.config_read(ep, 0).unwrap() else {
    ///     panic!("no completion")
    /// };
    /// assert_eq!(u32::from_le_bytes(data.try_into().unwrap()), sim.cfg_read(ep, 0));
    /// assert!(done > issued);
    /// ```
    pub fn config_read(&mut self, bdf: Bdf, register: u16) -> Result<HostRead, SimError> {
        self.host_cfg(
            Kind::CfgRd,
            bdf,
            register,
            0,
            pcielab_wire::ByteEnables::ALL,
        )
    }

    /// A configuration write as the root complex performs it (non-posted): a CfgWr TLP
    /// carrying `value` under the byte enables `be`; the simulation runs until the
    /// completion returns. The register changes when the request reaches its target
    /// (which also drops the simulator's cached routes). `Done` has no data;
    /// `Failed(Ur)` when no function answers.
    pub fn config_write(
        &mut self,
        bdf: Bdf,
        register: u16,
        value: u32,
        be: pcielab_wire::ByteEnables,
    ) -> Result<HostRead, SimError> {
        self.host_cfg(Kind::CfgWr, bdf, register, value, be)
    }

    /// A configuration request from the root complex, re-issued every
    /// `SimConfig::crs_retry_delay` while its target completes it with Configuration
    /// Request Retry Status (a device still initializing after a reset), for at most
    /// 1 s; `Done` then spans from the first issue. Except with CRS Software Visibility
    /// enabled at the root port (Root Control bit 4) for a read of the Vendor ID: the
    /// root complex then returns 0001h for it, and all ones for the other bytes (PCIe
    /// Base Spec 2.3.2), and software decides when to ask again.
    fn host_cfg(
        &mut self,
        kind: Kind,
        bdf: Bdf,
        register: u16,
        value: u32,
        be: pcielab_wire::ByteEnables,
    ) -> Result<HostRead, SimError> {
        let first = self.now();
        let give_up = first + SimDuration::from_ms(1000);
        loop {
            let r = self.host_cfg_once(kind, bdf, register, value, be)?;
            match r {
                HostRead::Failed(CplStatus::Crs)
                    if kind == Kind::CfgRd
                        && register & 0xffc == 0
                        && be.bits() & 3 == 3
                        && self.crs_visible(bdf) =>
                {
                    return Ok(HostRead::Done {
                        data: vec![0x01, 0x00, 0xff, 0xff],
                        issued: first,
                        done: self.now(),
                    });
                }
                HostRead::Failed(CplStatus::Crs) if self.now() < give_up => {
                    let delay = self.sim.world().cfg.crs_retry_delay;
                    self.run_for(delay);
                }
                HostRead::Done { data, done, .. } => {
                    return Ok(HostRead::Done {
                        data,
                        issued: first,
                        done,
                    })
                }
                r => return Ok(r),
            }
        }
    }

    /// True if the root port that configuration requests to `bdf` leave by has CRS
    /// Software Visibility enabled (Root Control bit 4).
    pub fn crs_visible(&self, bdf: Bdf) -> bool {
        let fabric = self.fabric();
        let Some(&rp) = fabric.route_config_partial(bdf).0.first() else {
            return false;
        };
        let f = &fabric.functions[rp.0 as usize];
        if !matches!(f.role, Role::RootPort { .. }) {
            return false;
        }
        regs::std_cap(fabric, rp, pcielab_config::caps::id::PCIE).is_some_and(|p| {
            f.config.read_u16(p + pcielab_config::caps::pcie_reg::RTCTL) & 0x10 != 0
        })
    }

    fn host_cfg_once(
        &mut self,
        kind: Kind,
        bdf: Bdf,
        register: u16,
        value: u32,
        be: pcielab_wire::ByteEnables,
    ) -> Result<HostRead, SimError> {
        if register >= 4096 {
            return Err(SimError::Param {
                what: "configuration register",
                value: format!("{register:#x}"),
                allowed: "0..=0xfff (byte offset; aligned down to a DW)",
            });
        }
        let tag = self.host_tag()?;
        let delay = self.sim.world().cfg.rc_latency;
        let r: Result<(), SimError> = self.sim.process(|e, cx| {
            let (path, hops, dest) = e
                .route_cfg(bdf)
                .map_err(|err| SimError::Route(err.to_string()))?;
            let host = e.rc.bdf;
            let mut t = Tlp {
                completer: bdf,
                tag,
                detail: tlp::Detail::FirstBe(be.bits()),
                path,
                hops,
                dest,
                ..Tlp::new(kind, host, (register & 0xffc) as u64, 4)
            };
            if kind == Kind::CfgWr {
                t.data = e.pool.alloc_payload(&value.to_le_bytes());
            }
            e.at_source(Origin::Host, &mut t, (hops > 0).then_some(path[0]));
            let id = e.pool.alloc(t);
            let at = cx.now() + delay;
            cx.push_fifo(e.rc.host_fifo, at, event::Ev::HostSend(id));
            Ok(())
        });
        if let Err(e) = r {
            self.sim.world_mut().rc.host_tags.push(tag);
            return Err(e);
        }
        Ok(self.await_completion(tag, if kind == Kind::CfgRd { 4 } else { 0 }))
    }

    fn host_tlp(
        &mut self,
        kind: Kind,
        addr: u64,
        len: u32,
        data: &[u8],
        tag: u16,
        poisoned: bool,
    ) -> Result<(), SimError> {
        let host = self.sim.world().rc.bdf;
        let delay = self.sim.world().cfg.rc_latency;
        let r: Result<(), SimError> = self.sim.process(|e, cx| {
            let p = if data.is_empty() {
                NONE
            } else {
                e.pool.alloc_payload(data)
            };
            let (path, hops, dest) = e
                .route(Origin::Host, kind, addr, host)
                .map_err(|err| SimError::Route(err.to_string()))?;
            let mut t = Tlp {
                kind,
                requester: host,
                completer: host,
                tag,
                addr,
                len,
                detail: tlp::Detail::None,
                data: p,
                path,
                hops,
                at: 0,
                refs: 1,
                dest: match dest {
                    tlp::Dest::Bar {
                        node,
                        func,
                        bar,
                        offset,
                    } => tlp::Dest::Bar {
                        node,
                        func,
                        bar,
                        offset: offset + (addr & 0xfff),
                    },
                    d => d,
                },
                ingress: super::tlp::NO_DIR,
                dma_last: (NONE, NONE),
                hdr_bytes: if addr > u32::MAX as u64 { 16 } else { 12 },
                poisoned,
                td: false,
                addr_type: 0,
                corrupted: false,
                pasid: NONE,
                pieces: 1,
                lent: tlp::NOT_LENT,
                tag_span: 0,
            };
            e.at_source(Origin::Host, &mut t, (hops > 0).then_some(path[0]));
            let id = e.pool.alloc(t);
            let at = cx.now() + delay;
            cx.push_fifo(e.rc.host_fifo, at, event::Ev::HostSend(id));
            Ok(())
        });
        r
    }

    /// An MMIO read of `len` bytes (1..=4096, not crossing 4 KiB) at `addr`: the root
    /// complex sends an MRd (after its latency) and the simulation runs until the
    /// completion returns (or times out).
    pub fn mmio_read(&mut self, addr: u64, len: u32) -> Result<HostRead, SimError> {
        if len == 0 || len > 4096 || (addr & 0xfff) + len as u64 > 4096 {
            return Err(SimError::Param {
                what: "MMIO read length",
                value: format!("{len} at {addr:#x}"),
                allowed: "1..=4096 bytes within one 4 KiB page",
            });
        }
        let t0 = self.sim.now();
        let e = self.sim.world_mut();
        let cpu = e.cfg.host.mmio_read + e.cfg.mmio_tail.sample(&mut e.rc.host_rng);
        if cpu > SimDuration::ZERO {
            // The CPU side of the load (host model): issue, uncore and retirement.
            self.run_for(cpu);
        }
        let tag = self.host_tag()?;
        if let Err(e) = self.host_tlp(Kind::MRd, addr, len, &[], tag, false) {
            self.sim.world_mut().rc.host_tags.push(tag);
            return Err(e);
        }
        let mut r = self.await_completion(tag, len);
        if let HostRead::Done { issued, .. } | HostRead::Poisoned { issued, .. } = &mut r {
            *issued = t0;
        }
        Ok(r)
    }

    /// A doorbell: an MMIO write behind a write barrier, as a driver rings a device.
    /// The host is busy for the host model's doorbell cost (`doorbell_ns`) before the
    /// write leaves; with no cost it is [`FabricSim::mmio_write`].
    pub fn doorbell(&mut self, addr: u64, data: &[u8]) -> Result<(), SimError> {
        let cpu = self.sim.world().cfg.host.doorbell;
        if cpu > SimDuration::ZERO {
            self.run_for(cpu);
        }
        self.host_mem_write(addr, data, false)
    }

    /// Driver work: the host is busy for `ops` times the host model's driver cost per
    /// operation (`driver_ns`) while the fabric runs on.
    pub fn driver_work(&mut self, ops: u64) {
        let per = self.sim.world().cfg.host.driver_op.as_ps();
        if per > 0 && ops > 0 {
            self.run_for(SimDuration::from_ps(per.saturating_mul(ops)));
        }
    }

    /// Host software touches `[addr, addr + len)`: its lines enter the last-level
    /// cache (as far as it holds them), so DMA reads of them hit; nothing happens
    /// without a cache model (`llc_lines` = 0) or while the cache is thrashed.
    pub fn llc_warm(&mut self, addr: u64, len: u64) {
        let e = self.sim.world_mut();
        if e.cfg.llc_lines == 0 || e.cfg.cache == crate::host::model::CacheState::Thrash {
            return;
        }
        for l in addr / 64..addr.saturating_add(len.max(1)).div_ceil(64) {
            e.llc_insert(l);
        }
    }

    /// Empties the last-level cache (a cold start).
    pub fn llc_flush(&mut self) {
        let e = self.sim.world_mut();
        e.rc.llc_set.clear();
        e.rc.llc_fifo.clear();
    }

    /// An MMIO write (posted): MWr TLPs of at most MPS bytes leave the root complex after
    /// its latency. Returns at once (the simulation does not advance), unless the host
    /// model charges CPU time for the store (`mmio_write_ns`): the simulation then runs
    /// that long first.
    pub fn mmio_write(&mut self, addr: u64, data: &[u8]) -> Result<(), SimError> {
        let cpu = self.sim.world().cfg.host.mmio_write;
        if cpu > SimDuration::ZERO {
            // The host model's CPU time of the uncached store.
            self.run_for(cpu);
        }
        self.host_mem_write(addr, data, false)
    }

    /// Like [`FabricSim::mmio_write`], with data the host knows to be bad: every MWr
    /// carries the EP bit. The device that receives one logs Poisoned TLP Received and
    /// drops the data (its model never sees it); every link receiver on the way sets
    /// Detected Parity Error.
    ///
    /// ```
    /// # use pcielab_fabric::{kinds::KindRegistry, topology::Topology};
    /// # use pcielab_fabric::timed::{FabricSim, FaultKind, SimConfig};
    /// # use pcielab_sim::SimTime;
    /// let t = Topology::parse(
    ///     "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n[[node]]\nname=\"m\"\nkind=\"psmem\"\n\
    ///      [[link]]\nup=\"rc.0\"\ndown=\"m\"\ngen=3\nwidth=4\n",
    ///     "doc.toml", &KindRegistry::builtin()).unwrap();
    /// let mut sim = FabricSim::new(&t, &KindRegistry::builtin(), SimConfig::default()).unwrap();
    /// let bar = sim.bar("m", 0).unwrap();
    /// sim.mmio_write_poisoned(bar, &[1, 2, 3, 4]).unwrap();
    /// sim.run_until_idle(SimTime::from_ps(100_000_000));
    /// // The device logged it: AER Uncorrectable Error Status bit 12.
    /// assert!(sim.errors().iter().any(|e| e.is(FaultKind::Poisoned)
    ///     && e.message.contains("poisoned memory write")));
    /// ```
    pub fn mmio_write_poisoned(&mut self, addr: u64, data: &[u8]) -> Result<(), SimError> {
        self.host_mem_write(addr, data, true)
    }

    fn host_mem_write(&mut self, addr: u64, data: &[u8], poisoned: bool) -> Result<(), SimError> {
        let mps = self.sim.world().cfg.mps as u32;
        let split = pcielab_wire::split_write(
            addr,
            data.len() as u64,
            mps,
            pcielab_wire::SplitPolicy::Aligned,
        )
        .map_err(|e| SimError::Route(format!("MMIO write at {addr:#x}: {e}")))?;
        for ch in split {
            let s = ch.offset as usize;
            let d = &data[s..s + ch.len as usize];
            self.host_tlp(Kind::MWr, ch.addr, ch.len, d, 0, poisoned)?;
        }
        Ok(())
    }

    /// A free tag for a non-posted host request.
    fn host_tag(&mut self) -> Result<u16, SimError> {
        self.sim
            .world_mut()
            .rc
            .host_tags
            .pop()
            .ok_or_else(|| SimError::Param {
                what: "outstanding host reads",
                value: "256".into(),
                allowed: "at most 256",
            })
    }

    /// Starts an MMIO read of `len` bytes at `addr` and returns at once, without
    /// running the simulation: a driver that keeps several reads in flight (a head
    /// pointer read per interrupt, say) while it goes on. Same limits as
    /// [`FabricSim::mmio_read`]; no CPU time is charged (the driver charges its own).
    /// [`FabricSim::mmio_read_poll`] takes the result once it is there.
    ///
    /// ```
    /// # use pcielab_fabric::{kinds::KindRegistry, topology::Topology};
    /// # use pcielab_fabric::timed::{FabricSim, SimConfig, HostRead};
    /// # use pcielab_sim::SimTime;
    /// # let t = Topology::parse("[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n[[node]]\nname=\"m\"\nkind=\"psmem\"\n[[link]]\nup=\"rc.0\"\ndown=\"m\"\ngen=3\nwidth=4\n", "t.toml", &KindRegistry::builtin()).unwrap();
    /// let mut sim = FabricSim::new(&t, &KindRegistry::builtin(), SimConfig::default()).unwrap();
    /// let bar = sim.bar("m", 0).unwrap();
    /// let a = sim.mmio_read_start(bar, 4).unwrap();
    /// let b = sim.mmio_read_start(bar + 64, 4).unwrap();
    /// assert!(sim.mmio_read_poll(a).is_none()); // nothing has run yet
    /// sim.run_until_idle(SimTime::from_ps(1_000_000_000));
    /// assert!(matches!(sim.mmio_read_poll(a), Some(HostRead::Done { .. })));
    /// assert!(matches!(sim.mmio_read_poll(b), Some(HostRead::Done { .. })));
    /// assert!(sim.mmio_read_poll(b).is_none()); // taken
    /// ```
    pub fn mmio_read_start(&mut self, addr: u64, len: u32) -> Result<HostTicket, SimError> {
        if len == 0 || len > 4096 || (addr & 0xfff) + len as u64 > 4096 {
            return Err(SimError::Param {
                what: "MMIO read length",
                value: format!("{len} at {addr:#x}"),
                allowed: "1..=4096 bytes within one 4 KiB page",
            });
        }
        let tag = self.host_tag()?;
        if let Err(e) = self.host_tlp(Kind::MRd, addr, len, &[], tag, false) {
            self.sim.world_mut().rc.host_tags.push(tag);
            return Err(e);
        }
        self.expect_completion(tag, len);
        Ok(HostTicket(tag))
    }

    /// True when the read `ticket` ([`FabricSim::mmio_read_start`]) has its result
    /// waiting (a cheap test for [`FabricSim::run_while`]).
    pub fn mmio_read_ready(&self, ticket: HostTicket) -> bool {
        self.sim.world().rc.host_done.contains_key(&ticket.0)
    }

    /// Ethernet frames between devices on cables (`cable` key): (delivered, dropped).
    /// Dropped: sent by a MAC with no cable, or not taken by the device at the end.
    pub fn ethernet_stats(&self) -> (u64, u64) {
        let e = &self.sim.world().eth;
        (e.delivered, e.dropped)
    }

    /// The settings the simulation runs with.
    pub fn config(&self) -> &SimConfig {
        &self.sim.world().cfg
    }

    /// The result of a read started with [`FabricSim::mmio_read_start`], once it is
    /// there (taken: a second call gives `None`).
    pub fn mmio_read_poll(&mut self, ticket: HostTicket) -> Option<HostRead> {
        self.sim.world_mut().rc.host_done.remove(&ticket.0)
    }

    /// Registers the host request with `tag` (expecting `len` bytes of completion
    /// data) and arms its completion timeout.
    fn expect_completion(&mut self, tag: u16, len: u32) {
        let now = self.sim.now();
        let to = self.sim.world().cfg.completion_timeout;
        let key = self.sim.schedule_at(now + to, event::Ev::HostTimeout(tag));
        self.sim.world_mut().rc.host_reqs.insert(
            tag,
            rc::state::HostReq {
                issued: now,
                len,
                data: vec![0; len as usize],
                got: 0,
                timer: Some(key),
                poisoned: false,
            },
        );
    }

    /// Registers the host request with `tag` (expecting `len` bytes of completion
    /// data), arms its completion timeout and runs until it finishes.
    fn await_completion(&mut self, tag: u16, len: u32) -> HostRead {
        self.expect_completion(tag, len);
        self.wait_host(tag)
    }

    /// Waits for the host request with `tag` to finish (or the simulation to run dry).
    fn wait_host(&mut self, tag: u16) -> HostRead {
        loop {
            if let Some(r) = self.sim.world_mut().rc.host_done.remove(&tag) {
                return r;
            }
            if self.sim.step().is_none() {
                return HostRead::Timeout;
            }
        }
    }

    /// A non-posted I/O request from the host: routes it (no claimant: Unsupported
    /// Request, at once), sends it after the root complex's latency and runs until its
    /// completion returns or times out.
    fn host_io(
        &mut self,
        kind: Kind,
        addr: u32,
        data: &[u8],
        len: u32,
    ) -> Result<HostRead, SimError> {
        if len == 0 || (addr & 3) + len > 4 {
            return Err(SimError::Param {
                what: "I/O access length",
                value: format!("{len} at {addr:#x}"),
                allowed: "1..=4 bytes within one DW",
            });
        }
        let host = self.sim.world().rc.bdf;
        match self
            .sim
            .world_mut()
            .route(Origin::Host, kind, addr as u64, host)
        {
            Ok(_) => {}
            Err(crate::functional::RouteError::IoUnclaimed(_)) => {
                return Ok(HostRead::Failed(CplStatus::Ur))
            }
            Err(e) => return Err(SimError::Route(e.to_string())),
        }
        let tag = self.host_tag()?;
        if let Err(e) = self.host_tlp(kind, addr as u64, len, data, tag, false) {
            self.sim.world_mut().rc.host_tags.push(tag);
            return Err(e);
        }
        // The completion carries the whole DW (IORd) or nothing (IOWr).
        Ok(
            match self.await_completion(tag, if kind == Kind::IoRd { 4 } else { 0 }) {
                HostRead::Done { data, issued, done } => {
                    let s = (addr & 3) as usize;
                    HostRead::Done {
                        data: data.get(s..s + len as usize).unwrap_or(&[]).to_vec(),
                        issued,
                        done,
                    }
                }
                r => r,
            },
        )
    }

    /// An I/O read (IORd) of `len` bytes (1..=4, within one DW) at I/O address `addr`:
    /// the root complex sends the IORd (after its latency) and the simulation runs until
    /// the completion returns (or times out), like [`FabricSim::mmio_read`]. The CplD
    /// carries the whole DW; `Done` holds the `len` bytes asked for. An address that no
    /// I/O BAR or bridge I/O window claims gives `Failed(Ur)` at once.
    pub fn io_read(&mut self, addr: u32, len: u32) -> Result<HostRead, SimError> {
        self.host_io(Kind::IoRd, addr, &[], len)
    }

    /// An I/O write (IOWr) of `data` (1..=4 bytes, within one DW) at I/O address `addr`.
    /// I/O writes are non-posted: the simulation runs until the Cpl returns (or the
    /// completion timeout); `Done` has no data and tells when the write was issued and
    /// completed. `Failed(Ur)` when the completer does not support it or no one claims
    /// the address.
    pub fn io_write(&mut self, addr: u32, data: &[u8]) -> Result<HostRead, SimError> {
        self.host_io(Kind::IoWr, addr, data, data.len() as u32)
    }

    /// Allocates a DMA buffer of `len` bytes in host memory (4 KiB aligned) and returns
    /// its address.
    pub fn alloc_dma(&mut self, len: u64) -> u64 {
        let a = self.dma_next;
        self.dma_next += len.div_ceil(4096).max(1) * 4096;
        a
    }

    /// Writes host memory directly (the CPU filling a buffer; no simulated time).
    pub fn host_write(&mut self, addr: u64, data: &[u8]) {
        let e = self.sim.world_mut();
        e.fabric.host_memory.write(addr, data);
        // Whole lines written are good again.
        e.host_written(addr, data.len() as u64, false);
    }

    /// Poisons host memory: the 64-byte lines that `[addr, addr + len)` touches hold
    /// data known to be bad (an uncorrectable ECC error, say). A DMA read that touches
    /// one gets poisoned completions (those carrying its bytes); a write that covers a
    /// whole line clears it (DMA or [`FabricSim::host_write`]); a poisoned DMA write
    /// poisons the lines it touches.
    pub fn poison_host_memory(&mut self, addr: u64, len: u64) {
        self.sim.world_mut().poison_host(addr, len);
    }

    /// True if any 64-byte line of host memory that `[addr, addr + len)` touches is
    /// poisoned.
    pub fn host_memory_poisoned(&self, addr: u64, len: u64) -> bool {
        self.sim.world().host_poisoned(addr, len)
    }

    /// Reads host memory directly.
    pub fn host_read(&self, addr: u64, buf: &mut [u8]) {
        self.sim.world().fabric.host_memory.read(addr, buf);
    }

    /// Runs until an interrupt arrives after the current count, or `timeout` passes.
    /// With the host model's interrupt cost (`irq_ns`), the time returned is when its
    /// handler runs (the arrival plus the cost), and the simulation has run to it. An
    /// interrupt of a function assigned to a virtual machine
    /// ([`FabricSim::assign_vm`]) pays the injection into the guest (`vm_irq_ns`) on
    /// top.
    pub fn wait_interrupt(&mut self, timeout: SimDuration) -> Option<(SimTime, Interrupt)> {
        let seen = self.sim.world().interrupts.len();
        let until = self.sim.now() + timeout;
        loop {
            if let Some(&(at, i)) = self.sim.world().interrupts.get(seen) {
                // The host model's delivery time: the handler runs this much later.
                let host = &self.sim.world().cfg.host;
                let irq = if self.vm.contains(&i.from) {
                    host.irq + host.vm_irq
                } else {
                    host.irq
                };
                if irq > SimDuration::ZERO {
                    let run = (at + irq).saturating_since(self.sim.now());
                    self.run_for(run);
                }
                return Some((at + irq, i));
            }
            match self.sim.next_time() {
                Some(t) if t <= until => {
                    self.sim.step();
                }
                _ => {
                    self.sim.step_until(until);
                    return None;
                }
            }
        }
    }

    /// Runs the simulation for `d` of simulated time.
    pub fn run_for(&mut self, d: SimDuration) {
        let t = self.sim.now() + d;
        self.sim.step_until(t);
    }

    /// Runs until no event is pending (every device idle) but the links' periodic
    /// UpdateFC refreshes, or `limit` is reached.
    pub fn run_until_idle(&mut self, limit: SimTime) {
        while self.sim.pending_foreground() > 0 && self.sim.step_before(limit).is_some() {}
    }

    /// Runs until `done` holds (checked after every event) or `limit` is reached;
    /// true if `done` held.
    pub fn run_while(&mut self, limit: SimTime, mut done: impl FnMut(&FabricSim) -> bool) -> bool {
        loop {
            if done(self) {
                return true;
            }
            if self.sim.step_before(limit).is_none() {
                return false;
            }
        }
    }

    /// Sends a vendor-defined message from the root complex (requester: the host
    /// bridge), after the root complex's latency; it travels while the simulation runs.
    /// Routed by ID to a device, a model's [`Endpoint::vendor_message`] receives it.
    ///
    /// ```
    /// # use pcielab_fabric::{kinds::KindRegistry, topology::Topology};
    /// use pcielab_fabric::timed::{FabricSim, SimConfig, VdmRoute, VendorMessage};
    /// # let t = Topology::parse("[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n[[node]]\nname=\"m\"\nkind=\"psmem\"\n[[link]]\nup=\"rc.0\"\ndown=\"m\"\ngen=3\nwidth=4\n", "t.toml", &KindRegistry::builtin()).unwrap();
    /// let mut sim = FabricSim::new(&t, &KindRegistry::builtin(), SimConfig::default()).unwrap();
    /// let dev = sim.bdf("m").unwrap();
    /// // psmem does not take vendor-defined messages: Type 1 is dropped silently,
    /// // Type 0 is an Unsupported Request the device logs.
    /// let mut m = VendorMessage::new(VdmRoute::Id(dev), 0x1ab4, 7, vec![0; 8]);
    /// m.type1 = false;
    /// sim.send_vendor_message(&m).unwrap();
    /// sim.run_for(pcielab_sim::SimDuration::from_us(1));
    /// assert_eq!(sim.cfg_read(dev, 0x100 + 4) & (1 << 20), 1 << 20);
    /// // Payloads are whole DWs of at most MPS bytes.
    /// assert!(sim.send_vendor_message(&VendorMessage::new(VdmRoute::Id(dev), 1, 0, vec![0; 3])).is_err());
    /// ```
    pub fn send_vendor_message(&mut self, msg: &VendorMessage) -> Result<(), SimError> {
        let host = self.sim.world().rc.bdf;
        let delay = self.sim.world().cfg.rc_latency;
        self.sim
            .process(|e, cx| e.send_vendor(Origin::Host, host, msg, delay, cx))
            .map_err(SimError::Route)
    }

    /// Vendor-defined messages the root complex received (routed to it, or by ID to
    /// the host bridge): (arrival time, requester ID, message).
    pub fn vendor_messages(&self) -> &[(SimTime, Bdf, VendorMessage)] {
        &self.sim.world().vendor_messages
    }

    /// Error messages (ERR_COR, ERR_NONFATAL, ERR_FATAL) the root ports logged, with
    /// the times they arrived. A function sends one when it detects an error it must
    /// report: enable reporting in its Device Control register (or SERR# Enable in
    /// Command) and, for Advisory Non-Fatal errors, unmask ANFE in its AER Correctable
    /// Error Mask (masked at reset).
    pub fn error_messages(&self) -> &[(SimTime, ErrorMessage)] {
        &self.sim.world().error_messages
    }

    /// PM_PME messages the root ports received, with their arrival times (re-sends
    /// included; Root Status records what software sees).
    pub fn pme_messages(&self) -> &[(SimTime, PmeMessage)] {
        &self.sim.world().pme_messages
    }

    /// Sends PME_Turn_Off from root port `root_port` (after the root complex's
    /// latency) and runs until its PME_TO_Ack arrives or `timeout` has passed: the
    /// first step of removing main power (PCIe Base Spec 5.3.3.2.1). Switches copy the
    /// message down every downstream port and answer once all of theirs have; a
    /// device answers at once unless its model holds the answer
    /// ([`Endpoint::pme_turn_off`]). Returns the time the acknowledgement took, or
    /// `None` on timeout (the spec lets the root complex go on after 1–10 ms).
    ///
    /// Link power states (L2/L3 Ready) are not modelled: the links stay usable.
    ///
    /// ```
    /// # use pcielab_fabric::{kinds::KindRegistry, topology::Topology};
    /// use pcielab_fabric::timed::{FabricSim, SimConfig};
    /// use pcielab_sim::SimDuration;
    /// # let t = Topology::parse("[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n[[node]]\nname=\"m\"\nkind=\"psmem\"\n[[link]]\nup=\"rc.0\"\ndown=\"m\"\ngen=3\nwidth=4\n", "t.toml", &KindRegistry::builtin()).unwrap();
    /// let mut sim = FabricSim::new(&t, &KindRegistry::builtin(), SimConfig::default()).unwrap();
    /// let rp = pcielab_wire::Bdf::new(0, 1, 0).unwrap(); // the root port (00:01.0)
    /// let took = sim.pme_turn_off(rp, SimDuration::from_ms(10)).unwrap();
    /// assert!(took.is_some());
    /// assert_eq!(sim.pme_to_acks()[0].1.requester, sim.bdf("m").unwrap());
    /// ```
    pub fn pme_turn_off(
        &mut self,
        root_port: Bdf,
        timeout: SimDuration,
    ) -> Result<Option<SimDuration>, SimError> {
        let e = self.sim.world();
        let is_rp = e.fabric.function_at(root_port).is_some_and(|f| {
            matches!(e.fabric.functions[f.0 as usize].role, Role::RootPort { .. })
        });
        if !is_rp {
            return Err(SimError::Route(format!(
                "PME_Turn_Off: {root_port} is not a root port"
            )));
        }
        let Some(down) = (0..e.dirs.len())
            .filter(|&d| d % 2 == 1)
            .find(|&d| {
                e.dirs[d]
                    .rx_func
                    .is_some_and(|f| e.fabric.bdf(f) == root_port)
            })
            .map(|d| (d ^ 1) as u16)
        else {
            return Err(SimError::Route(format!(
                "PME_Turn_Off: root port {root_port} has no link below it"
            )));
        };
        let before = e.pme_to_acks.len();
        let delay = e.cfg.rc_latency;
        let t0 = self.sim.now();
        self.sim.process(|e, cx| {
            // The root port sends it (its ID is the Requester ID; switches forward it
            // unchanged).
            let id = e
                .pool
                .alloc(e.pm_hop(down, root_port, tlp::MSG_PME_TURN_OFF));
            cx.schedule_in(delay, event::Ev::HostSend(id));
        });
        let got = self.run_while(t0 + timeout, |s| {
            s.pme_to_acks()[before..]
                .iter()
                .any(|(_, a)| a.root_port == root_port)
        });
        Ok(got.then(|| self.sim.now() - t0))
    }

    /// PME_TO_Ack messages the root ports received, with their arrival times.
    pub fn pme_to_acks(&self) -> &[(SimTime, PmeToAck)] {
        &self.sim.world().pme_to_acks
    }

    /// Interrupts the host received, with arrival times.
    pub fn interrupts(&self) -> &[(SimTime, Interrupt)] {
        &self.sim.world().interrupts
    }

    /// INTx virtual-wire changes the root complex saw, with their times (see
    /// [`EpCx::intx`](crate::timed::EpCx::intx)).
    pub fn intx_events(&self) -> &[(SimTime, IntxEvent)] {
        &self.sim.world().intx_events
    }

    /// Counters of every link direction, by name (`rc.0->sw0`, `sw0->rc.0`, …).
    pub fn counters(&self) -> Vec<(String, DirCounters)> {
        self.sim.world().dir_counters(self.sim.now().as_ps())
    }

    /// The trace (when `SimConfig::trace` is set).
    pub fn trace(&self) -> Option<&Trace> {
        self.sim.world().trace.as_ref()
    }

    /// Takes the records of everything sent up to now, leaving a trace (same
    /// direction names) that goes on recording: a long run can stream its trace out
    /// in pieces (`pcielab sim --pcap` does, between
    /// [`run_until_idle`](Self::run_until_idle) steps) instead of holding it all in
    /// memory. In burst mode the pieces of a burst still on the wire stay behind for
    /// the next piece, so the pieces, taken one after the other, are in time order
    /// as a whole. `None` when tracing is off.
    pub fn take_trace(&mut self) -> Option<Trace> {
        let now = self.sim.now().as_ps();
        let t = self.sim.world_mut().trace.as_mut()?;
        let rest = t.split_after(now);
        Some(std::mem::replace(t, rest))
    }

    /// Takes every record traced so far, a burst's pieces that go on the wire after
    /// now included (as the counters count them), leaving an empty trace (same
    /// direction names): the last piece of a run streamed with
    /// [`take_trace`](Self::take_trace). `None` when tracing is off.
    pub fn take_whole_trace(&mut self) -> Option<Trace> {
        let t = self.sim.world_mut().trace.as_mut()?;
        let fresh = Trace::new(t.dir_names.clone());
        Some(std::mem::replace(t, fresh))
    }

    /// Errors the fabric recorded (unexpected completions, unroutable requests, …).
    pub fn errors(&self) -> &[SimFault] {
        &self.sim.world().errors
    }

    /// Host-memory writes in arrival order (with `SimConfig::log_writes`).
    pub fn write_log(&self) -> &[(Bdf, u64, u32)] {
        &self.sim.world().write_log
    }

    /// Maps `[iova, iova + len)` of the DMA of the function whose requester ID is
    /// `bdf` (any function: a VF's own domain, say) to host physical `phys` in the
    /// IOMMU (whole pages). Fails when no IOMMU is configured.
    pub fn iommu_map_function(
        &mut self,
        bdf: Bdf,
        iova: u64,
        phys: u64,
        len: u64,
    ) -> Result<(), SimError> {
        self.iommu_mut()?.map(bdf, NONE, iova, phys, len);
        Ok(())
    }

    /// Removes the mapping of `[iova, iova + len)` of the function whose requester
    /// ID is `bdf` (whole pages) and its IOTLB entries (no ATS invalidation is sent:
    /// see [`FabricSim::iommu_unmap`] for that).
    pub fn iommu_unmap_function(&mut self, bdf: Bdf, iova: u64, len: u64) -> Result<(), SimError> {
        self.iommu_mut()?.unmap(bdf, NONE, iova, len);
        Ok(())
    }

    /// Maps `[iova, iova + len)` of endpoint `name`'s DMA to host physical `phys` in
    /// the IOMMU (whole pages). Fails when no IOMMU is configured.
    pub fn iommu_map(
        &mut self,
        name: &str,
        iova: u64,
        phys: u64,
        len: u64,
    ) -> Result<(), SimError> {
        let bdf = self.endpoint_bdf(name)?;
        self.iommu_mut()?.map(bdf, NONE, iova, phys, len);
        Ok(())
    }

    /// Maps `[iova, iova + len)` of the address space of process `pasid` of endpoint
    /// `name` to host physical `phys` (whole pages): the device's requests with that
    /// PASID ([`EpCx::dma_read_pasid`](super::EpCx::dma_read_pasid),
    /// [`EpCx::dma_write_pasid`](super::EpCx::dma_write_pasid)) use this table,
    /// those without a PASID the one of [`FabricSim::iommu_map`]. Fails when no
    /// IOMMU is configured, when it has no PASID support (`IommuConfig::pasid`), or
    /// when `pasid` does not fit 20 bits.
    ///
    /// ```
    /// use pcielab_fabric::kinds::KindRegistry;
    /// use pcielab_fabric::timed::{FabricSim, IommuConfig, SimConfig};
    /// use pcielab_fabric::topology::Topology;
    /// let reg = KindRegistry::builtin();
    /// let topo = Topology::parse(
    ///     "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n\
    ///      [[node]]\nname=\"ep\"\nkind=\"psmem\"\n\
    ///      [[link]]\nup=\"rc.0\"\ndown=\"ep\"\ngen=3\nwidth=4\n",
    ///     "doc.toml",
    ///     &reg,
    /// )
    /// .unwrap();
    /// let iommu = IommuConfig { pasid: true, ..IommuConfig::default() };
    /// let cfg = SimConfig { iommu: Some(iommu), ..SimConfig::default() };
    /// let mut sim = FabricSim::new(&topo, &reg, cfg).unwrap();
    /// sim.iommu_map_pasid("ep", 5, 0x1000, 0x8000_0000, 4096).unwrap();
    /// assert!(sim.iommu_map_pasid("ep", 1 << 20, 0x1000, 0x8000_0000, 4096).is_err());
    /// ```
    pub fn iommu_map_pasid(
        &mut self,
        name: &str,
        pasid: u32,
        iova: u64,
        phys: u64,
        len: u64,
    ) -> Result<(), SimError> {
        let bdf = self.endpoint_bdf(name)?;
        self.pasid_ok(pasid)?.map(bdf, pasid, iova, phys, len);
        Ok(())
    }

    /// Removes the mapping of `[iova, iova + len)` of process `pasid` of endpoint
    /// `name` (whole pages, with their IOTLB entries). When the device has ATS
    /// enabled, the root complex also sends it an Invalidate Request with that PASID
    /// (see [`FabricSim::iommu_unmap`]).
    pub fn iommu_unmap_pasid(
        &mut self,
        name: &str,
        pasid: u32,
        iova: u64,
        len: u64,
    ) -> Result<(), SimError> {
        self.pasid_ok(pasid)?;
        self.unmap_space(name, pasid, iova, len)
    }

    /// Removes a mapping of `name`'s address space `pasid` (NONE: without a PASID)
    /// and sends the Invalidate Request that goes with it.
    fn unmap_space(&mut self, name: &str, pasid: u32, iova: u64, len: u64) -> Result<(), SimError> {
        let n = self.node(name)?;
        let bdf = self.endpoint_bdf(name)?;
        self.iommu_mut()?.unmap(bdf, pasid, iova, len);
        self.sim.process(|e, cx| {
            e.send_ats_invalidate(n, pasid, iova, len, cx);
        });
        Ok(())
    }

    /// Declares a range of `name`'s address space `pasid` (NONE: without a PASID) as
    /// mapped on demand.
    fn on_demand(
        &mut self,
        name: &str,
        pasid: u32,
        (iova, phys, len): (u64, u64, u64),
    ) -> Result<(), SimError> {
        let device = self.endpoint_bdf(name)?;
        self.iommu_mut()?;
        self.sim
            .world_mut()
            .rc
            .on_demand
            .push(pri::state::OnDemand {
                device,
                pasid,
                iova: iova & !0xfff,
                phys: phys & !0xfff,
                len: len + (iova & 0xfff),
            });
        Ok(())
    }

    /// Like [`FabricSim::iommu_map_on_demand`], in the address space of process
    /// `pasid` of endpoint `name`: a Page Request with that PASID makes a page of it
    /// resident in that PASID's table. Fails as [`FabricSim::iommu_map_pasid`] does.
    pub fn iommu_map_on_demand_pasid(
        &mut self,
        name: &str,
        pasid: u32,
        iova: u64,
        phys: u64,
        len: u64,
    ) -> Result<(), SimError> {
        self.pasid_ok(pasid)?;
        self.on_demand(name, pasid, (iova, phys, len))
    }

    /// The IOMMU if it supports PASID and `pasid` fits 20 bits, or the error that
    /// says which does not hold.
    fn pasid_ok(&mut self, pasid: u32) -> Result<&mut iommu::Iommu, SimError> {
        if pasid >> 20 != 0 {
            return Err(SimError::Param {
                what: "pasid",
                value: format!("{pasid:#x}"),
                allowed: "0..=0xfffff (20 bits)",
            });
        }
        let m = self.iommu_mut()?;
        if !m.cfg.pasid {
            return Err(SimError::Param {
                what: "iommu pasid",
                value: "false".into(),
                allowed: "true (PASID support) to map a PASID's address space",
            });
        }
        Ok(m)
    }

    /// Maps interrupt remapping handle `handle` to `vector` for endpoint `name`: a
    /// remappable-format interrupt request with this handle from that device delivers
    /// `vector` as its data (see the `iommu` module; `IommuConfig::interrupt_remapping`
    /// must be on). Remapping it again replaces the entry.
    pub fn iommu_map_interrupt(
        &mut self,
        name: &str,
        handle: u16,
        vector: u32,
    ) -> Result<(), SimError> {
        let source = self.endpoint_bdf(name)?;
        self.iommu_map_interrupt_function(source, handle, vector)
    }

    /// Like [`FabricSim::iommu_map_interrupt`], for the function with requester ID
    /// `source` (a VF, say): only interrupt requests from that ID may use the handle.
    pub fn iommu_map_interrupt_function(
        &mut self,
        source: Bdf,
        handle: u16,
        vector: u32,
    ) -> Result<(), SimError> {
        let m = self.iommu_mut()?;
        if !m.cfg.interrupt_remapping {
            return Err(SimError::Param {
                what: "iommu interrupt_remapping",
                value: "false".into(),
                allowed: "true (interrupt remapping enabled) to map interrupts",
            });
        }
        m.irt.insert(handle, iommu::Irte { source, vector });
        Ok(())
    }

    /// Removes interrupt remapping handle `handle`: interrupt requests using it are
    /// blocked from now on.
    pub fn iommu_unmap_interrupt(&mut self, handle: u16) -> Result<(), SimError> {
        self.iommu_mut()?.irt.remove(&handle);
        Ok(())
    }

    /// The ID of endpoint `name`, or the error that names it.
    fn endpoint_bdf(&self, name: &str) -> Result<Bdf, SimError> {
        self.bdf(name)
            .ok_or_else(|| SimError::UnknownNode(name.into()))
    }

    /// The IOMMU, or the error that says there is none.
    fn iommu_mut(&mut self) -> Result<&mut iommu::Iommu, SimError> {
        self.sim
            .world_mut()
            .iommu
            .as_mut()
            .ok_or_else(|| SimError::Param {
                what: "iommu",
                value: "none".into(),
                allowed: "SimConfig::iommu set to Some(IommuConfig)",
            })
    }

    /// Removes the IOMMU mapping of `[iova, iova + len)` of endpoint `name`'s DMA (whole
    /// pages, with their IOTLB entries). When the device has ATS enabled, the root
    /// complex also sends it an ATS Invalidate Request now; its progress is in
    /// [`FabricSim::ats_invalidations`]. Fails when no IOMMU is configured.
    pub fn iommu_unmap(&mut self, name: &str, iova: u64, len: u64) -> Result<(), SimError> {
        self.unmap_space(name, NONE, iova, len)
    }

    /// Declares `[iova, iova + len)` of endpoint `name`'s DMA as mapped on demand to
    /// host physical `phys`: host software maps a page of it when the device asks with
    /// a Page Request (PRI), not before. Fails when no IOMMU is configured.
    pub fn iommu_map_on_demand(
        &mut self,
        name: &str,
        iova: u64,
        phys: u64,
        len: u64,
    ) -> Result<(), SimError> {
        self.on_demand(name, NONE, (iova, phys, len))
    }

    /// The Page Requests the host received (PRI), in order, with their answers.
    pub fn page_requests(&self) -> &[PageRequestRecord] {
        &self.sim.world().rc.page_requests
    }

    /// Host software sends endpoint `name` a PRG Response of its own: group index
    /// `prg_index` (0..512) with response `code` (0 Success, 1 Invalid Request, 15
    /// Response Failure, which stops the device's page requests), after the root
    /// complex latency. An index the device has no request outstanding for sets its
    /// Unexpected Page Request Group Index status bit.
    pub fn send_prg_response(
        &mut self,
        name: &str,
        prg_index: u16,
        code: u8,
    ) -> Result<(), SimError> {
        if prg_index >= 512 || code > 15 {
            return Err(SimError::Param {
                what: "PRG response",
                value: format!("index {prg_index}, code {code}"),
                allowed: "index 0..512, code 0..=15",
            });
        }
        let dev = self.endpoint_bdf(name)?;
        self.sim
            .process(|e, cx| e.send_prg_response(dev, 0, prg_index, code, SimDuration::ZERO, cx))
    }

    /// The ATS counters of endpoint `name` (None when it has no ATS enabled).
    pub fn ats_stats(&self, name: &str) -> Option<AtsStats> {
        let n = self.node(name).ok()?;
        self.sim.world().ats_stats(n)
    }

    /// The ATS Invalidate Requests the root complex sent, in order, with the time each
    /// completed.
    pub fn ats_invalidations(&self) -> &[AtsInvalidation] {
        &self.sim.world().rc.ats_invals
    }

    /// The link above node `name` fails (a surprise link down: a cable pulled, a
    /// device that stopped answering) and stays down until [`FabricSim::link_up`].
    /// The link loses what was on it, the port above logs a Surprise Down error (which
    /// may trigger its DPC), and the component below is reset (see the `link_down`
    /// notes in the crate README). Already down: nothing more happens.
    ///
    /// ```
    /// use pcielab_fabric::kinds::KindRegistry;
    /// use pcielab_fabric::timed::{FabricSim, HostRead, SimConfig};
    /// use pcielab_fabric::topology::Topology;
    /// let reg = KindRegistry::builtin();
    /// let topo = Topology::parse(
    ///     "[[node]]\nname = \"rc\"\nkind = \"root-complex\"\n\
    ///      [[node]]\nname = \"ep\"\nkind = \"psmem\"\n\
    ///      [[link]]\nup = \"rc.0\"\ndown = \"ep\"\ngen = 3\nwidth = 4\n",
    ///     "t.toml",
    ///     &reg,
    /// )
    /// .unwrap();
    /// let mut sim = FabricSim::new(&topo, &reg, SimConfig::default()).unwrap();
    /// let bar = sim.bar("ep", 0).unwrap();
    /// sim.link_down("ep").unwrap();
    /// assert!(!sim.link_active("ep").unwrap());
    /// // The root port answers for the missing device: Unsupported Request.
    /// assert!(matches!(sim.mmio_read(bar, 4), Ok(HostRead::Failed(_))));
    /// sim.link_up("ep").unwrap();
    /// sim.run_for(pcielab_sim::SimDuration::from_us(200));
    /// assert!(sim.link_active("ep").unwrap());
    /// ```
    pub fn link_down(&mut self, name: &str) -> Result<(), SimError> {
        let d = self.up_link(name)?;
        self.sim
            .process(|e, cx| e.take_link_down(d, link_down::HELD_SURPRISE, cx));
        Ok(())
    }

    /// The failure [`FabricSim::link_down`] made is over: the link above `name` trains
    /// and is up after `SimConfig::link_training_time`, unless something else (the
    /// port's DPC) still holds it down. The component below comes back reset: host
    /// software configures it again.
    pub fn link_up(&mut self, name: &str) -> Result<(), SimError> {
        let d = self.up_link(name)?;
        self.sim
            .process(|e, cx| e.release_link(d, link_down::HELD_SURPRISE, cx));
        Ok(())
    }

    /// True if the link above node `name` is up (DL_Active).
    pub fn link_active(&self, name: &str) -> Result<bool, SimError> {
        let d = self.up_link(name)?;
        let dir = &self.sim.world().dirs[d as usize];
        Ok(!dir.down && dir.up)
    }

    /// The device below node `name`'s link is removed from its hot-plug slot: the
    /// port's Presence Detect State clears and Presence Detect Changed is set (with
    /// its hot-plug interrupt when enabled), and the link goes down as in
    /// [`FabricSim::link_down`] until [`FabricSim::plug`]; a slot with Hot-Plug
    /// Surprise reports no Surprise Down error. Works on any port; only ports of a
    /// `hotplug = true` node advertise hot-plug.
    pub fn unplug(&mut self, name: &str) -> Result<(), SimError> {
        let d = self.up_link(name)?;
        self.sim.process(|e, cx| {
            if let Some(p) = e.dirs[(d | 1) as usize].rx_func {
                e.slot_event(p, hotplug::SLTSTA_PDC, Some(false), cx);
            }
            e.take_link_down(d, link_down::HELD_ABSENT, cx);
        });
        Ok(())
    }

    /// The device below node `name` is put back into its slot: presence set, Presence
    /// Detect Changed, and the link trains (unless something else holds it down). The
    /// device comes up reset: host software configures it.
    pub fn plug(&mut self, name: &str) -> Result<(), SimError> {
        let d = self.up_link(name)?;
        self.sim.process(|e, cx| {
            if e.dirs[d as usize].held & link_down::HELD_ABSENT == 0 {
                return;
            }
            if let Some(p) = e.dirs[(d | 1) as usize].rx_func {
                e.slot_event(p, hotplug::SLTSTA_PDC, Some(true), cx);
            }
            e.release_link(d, link_down::HELD_ABSENT, cx);
        });
        Ok(())
    }

    /// The attention button of the hot-plug slot above node `name` is pressed (a slot
    /// of a `hotplug_power = true` node): the port sets Attention Button Pressed in
    /// Slot Status and raises its hot-plug interrupt when enabled. Host software then
    /// blinks the power indicator, powers the slot off (Slot Control bit 10) and the
    /// device can be removed, as Linux's pciehp does. An error if the slot has no
    /// attention button.
    pub fn press_attention_button(&mut self, name: &str) -> Result<(), SimError> {
        let d = self.up_link(name)?;
        let pressed = self.sim.process(|e, cx| {
            e.dirs[(d | 1) as usize]
                .rx_func
                .is_some_and(|p| e.attention_button(p, cx))
        });
        if pressed {
            Ok(())
        } else {
            Err(SimError::Route(format!(
                "the slot above {name} has no attention button (hotplug_power = true gives one)"
            )))
        }
    }

    /// The LTR messages the root ports received, with their arrival times.
    pub fn ltr_messages(&self) -> &[(SimTime, LtrMessage)] {
        &self.sim.world().ltr_messages
    }

    /// The Downstream Port Containments so far, in order.
    pub fn dpc_events(&self) -> &[DpcEvent] {
        &self.sim.world().dpc_events
    }

    /// The downward direction of the link above node `name`.
    pub(super) fn up_link(&self, name: &str) -> Result<u16, SimError> {
        let n = self.node(name)?;
        (0..self.sim.world().dirs.len())
            .step_by(2)
            .find(|&x| self.sim.world().dirs[x].to == n)
            .map(|x| x as u16)
            .ok_or_else(|| SimError::UnknownNode(format!("{name} (it has no link above it)")))
    }

    /// IOMMU counters and faults (None without an IOMMU).
    pub fn iommu_stats(&self) -> Option<(IommuStats, &[IommuFault])> {
        self.sim
            .world()
            .iommu
            .as_ref()
            .map(|m| (m.stats, m.faults.as_slice()))
    }

    /// The engine (for tests and tools).
    pub fn engine(&self) -> &Engine {
        self.sim.world()
    }

    /// Sends a memory write of `data` at `addr` from endpoint `name` marked translated
    /// (AT = 10b) whatever its ATS state: a misbehaving or malicious device that skips
    /// the IOMMU. The root complex passes it when the device has had ATS enabled (ATS
    /// trusts the device) and blocks it as an IOMMU fault otherwise.
    pub fn inject_translated_write(
        &mut self,
        name: &str,
        addr: u64,
        data: &[u8],
    ) -> Result<(), SimError> {
        let n = self.node(name)?;
        let f = self.sim.world().nodes[n as usize]
            .func
            .ok_or(SimError::UnknownNode(name.into()))?;
        let me = self.fabric().bdf(f);
        let len = self.payload_len(data, "translated write length")?;
        self.sim.process(|e, cx| {
            let p = e.pool.alloc_payload(data);
            let t = Tlp {
                data: p,
                addr_type: 2,
                ..Tlp::new(Kind::MWr, me, addr, len)
            };
            e.inject(Origin::Function(f), t, me, cx)
                .map(|_| ())
                .map_err(|err| SimError::Route(err.to_string()))
        })
    }

    /// The length of `data` as one TLP's payload (1..=MPS bytes), or the error naming
    /// `what`.
    fn payload_len(&self, data: &[u8], what: &'static str) -> Result<u32, SimError> {
        u32::try_from(data.len())
            .ok()
            .filter(|&l| (1..=self.sim.world().cfg.mps as u32).contains(&l))
            .ok_or_else(|| SimError::Param {
                what,
                value: data.len().to_string(),
                allowed: "1..=MPS bytes",
            })
    }

    /// Sends a successful completion carrying `data` (1..=MPS bytes) with tag `tag`
    /// from the root complex to function `to`, as if it answered a read request of
    /// `to` (a misbehaving completer, or a completion that reaches the wrong
    /// function): the device's DMA engine must match it to a request of `to` or
    /// treat it as an Unexpected Completion.
    pub fn inject_host_completion(
        &mut self,
        to: Bdf,
        tag: u16,
        data: &[u8],
    ) -> Result<(), SimError> {
        let len = self.payload_len(data, "injected completion length")?;
        let host = self.sim.world().rc.bdf;
        self.sim.process(|e, cx| {
            let req = Tlp {
                tag,
                ..Tlp::new(Kind::MRd, to, 0, len)
            };
            let poison = poison::state::Poison::Clean;
            e.send_completions(Origin::Host, host, &req, CplStatus::Sc, data, poison, cx);
        });
        Ok(())
    }

    /// Assigns the function at `bdf` (a PF or a VF) to a virtual machine, as a
    /// hypervisor passing it through to a guest does: its DMA is translated by the
    /// IOMMU through nested page tables, so each of its IOTLB misses costs a nested
    /// walk (`IommuConfig::nested_walk`, knob `nested_walk_ns`; see the `iommu`
    /// notes in the crate README), and each of its interrupts pays the injection into
    /// the guest (`HostCosts::vm_irq`, knob `vm_irq_ns`) on top of `irq_ns` before
    /// the guest's handler runs ([`FabricSim::wait_interrupt`]). Map its guest
    /// addresses with [`FabricSim::iommu_map`] as for any function. Needs the IOMMU
    /// (`iommu = on`): a function is assigned to a VM through it.
    pub fn assign_vm(&mut self, bdf: Bdf) -> Result<(), SimError> {
        if self.fabric().function_at(bdf).is_none() {
            return Err(SimError::Param {
                what: "VM assignment",
                value: bdf.to_string(),
                allowed: "a function that exists",
            });
        }
        let Some(m) = self.sim.world_mut().iommu.as_mut() else {
            return Err(SimError::Param {
                what: "VM assignment",
                value: bdf.to_string(),
                allowed: "a simulator with the IOMMU (iommu = on)",
            });
        };
        m.vm.insert(bdf);
        self.vm.insert(bdf);
        Ok(())
    }

    /// True if the function at `bdf` is assigned to a virtual machine
    /// ([`FabricSim::assign_vm`]).
    pub fn vm_assigned(&self, bdf: Bdf) -> bool {
        self.vm.contains(&bdf)
    }

    /// Injects a completion from endpoint `name` to the host with tag `tag` (a
    /// misbehaving device): the root complex must treat an unknown tag as an Unexpected
    /// Completion.
    pub fn inject_stray_completion(&mut self, name: &str, tag: u16) -> Result<(), SimError> {
        let n = self.node(name)?;
        let f = self.sim.world().nodes[n as usize]
            .func
            .ok_or(SimError::UnknownNode(name.into()))?;
        let me = self.fabric().bdf(f);
        let host = self.sim.world().rc.bdf;
        self.sim.process(|e, cx| {
            let t = Tlp {
                completer: me,
                tag,
                detail: tlp::Detail::Completion {
                    byte_count: 4,
                    status: CplStatus::Sc,
                },
                dest: tlp::Dest::Rc,
                ..Tlp::new(Kind::Cpl, host, 0, 0)
            };
            e.inject(Origin::Function(f), t, host, cx)
                .map(|_| ())
                .map_err(|err| SimError::Route(err.to_string()))
        })
    }
}

#[cfg(test)]
mod tests {
    /// The memory target of the simulator: at most 160 bytes per TLP in flight (a
    /// layout property, not a timing: it cannot vary from run to run).
    #[test]
    fn memory_per_inflight_tlp() {
        let n = super::bytes_per_inflight_tlp();
        eprintln!(
            "sizes: Tlp {} Dest {} Kind {} Cpl {} Bdf {} Detail {}",
            core::mem::size_of::<super::tlp::Tlp>(),
            core::mem::size_of::<super::tlp::Dest>(),
            core::mem::size_of::<super::tlp::Kind>(),
            core::mem::size_of::<pcielab_wire::CplStatus>(),
            core::mem::size_of::<pcielab_wire::Bdf>(),
            core::mem::size_of::<super::tlp::Detail>()
        );
        assert!(n <= 160, "{n} bytes per TLP in flight");
        assert_eq!(core::mem::size_of::<super::tlp::Tlp>(), 96);
        assert!(core::mem::size_of::<super::tlp::Detail>() <= 8);
    }
}
