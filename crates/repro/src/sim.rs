//! What the experiments share: topologies, host profiles with the sources of their
//! values, and DMA streams on the timed simulator with every latency kept.

use crate::{input, Input};
use pcielab_fabric::host::model::{apply_knob, profile};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{
    AddrPattern, DmaId, DmaOpKind, DmaStream, Endpoint, EpCx, FabricSim, ReadReply, SimConfig,
    StreamReport,
};
use pcielab_fabric::topology::Topology;
use pcielab_sim::SimTime;
use std::cell::RefCell;
use std::rc::Rc;

/// Parses a topology written by an experiment.
pub fn topology(text: &str, name: &str) -> Result<Topology, String> {
    Topology::parse(text, name, &KindRegistry::builtin()).map_err(|e| e.to_string())
}

/// One root port and one psmem endpoint, `mem0`, on a Gen `gen` x`lanes` link: the
/// topology of `pcielab sim --gen G --lanes N`.
pub fn one_link(gen: u8, lanes: u8) -> Result<Topology, String> {
    topology(
        &format!(
            "seed = 1\n\
             [[node]]\nname = \"rc\"\nkind = \"root-complex\"\nports = 1\n\
             [[node]]\nname = \"mem0\"\nkind = \"psmem\"\n\
             [[link]]\nup = \"rc.0\"\ndown = \"mem0\"\ngen = {gen}\nwidth = {lanes}\n"
        ),
        &format!("gen{gen}-x{lanes}.toml"),
    )
}

/// Applies host profile `name` (if any) and then the overrides to `cfg`; returns one
/// input per knob set, with the profile's source for each of its values.
pub fn host(
    cfg: &mut SimConfig,
    name: Option<&str>,
    overrides: &[(String, String)],
) -> Result<Vec<Input>, String> {
    let mut inputs = Vec::new();
    if let Some(n) = name {
        let p = profile(n)?;
        p.apply(cfg)?;
        inputs.push(input(
            "host",
            n,
            "host profile (crates/fabric/data/hosts.toml)",
        ));
        for (k, v, src) in &p.knobs {
            inputs.push(input(k, v, &format!("host profile {n}: {src}")));
        }
    }
    for (k, v) in overrides {
        apply_knob(cfg, k, v)?;
        inputs.retain(|i| &i.name != k);
        inputs.push(input(k, v, "override"));
    }
    Ok(inputs)
}

/// The simulator's default of a knob that neither the profile nor an override set,
/// as an input (source: the simulator's default), for the knobs a row depends on.
pub fn defaults(inputs: &mut Vec<Input>, cfg: &SimConfig, knobs: &[&str]) {
    for k in knobs {
        if inputs.iter().any(|i| i.name == *k) {
            continue;
        }
        let ns = |d: pcielab_sim::SimDuration| format!("{}", d.as_ps() as f64 / 1000.0);
        let v = match *k {
            "rc_ns" => ns(cfg.rc_latency),
            "mem_ns" => ns(cfg.mem_latency),
            "mmio_read_ns" => ns(cfg.host.mmio_read),
            "ep_ns" => ns(cfg.ep_latency),
            "mem_tail" => cfg.mem_tail.to_string(),
            "cache" => cfg.cache.name().to_string(),
            _ => continue,
        };
        inputs.push(input(k, v, "simulator default (SimConfig)"));
    }
}

/// A DMA stream that also hands its latencies out when it is done (the simulator
/// owns the endpoint; this keeps a shared copy).
#[derive(Debug)]
struct Recorder {
    inner: DmaStream,
    lats: Rc<RefCell<Vec<u64>>>,
}

impl Endpoint for Recorder {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        self.inner.start(cx);
    }
    fn mem_read(&mut self, bar: u8, offset: u64, buf: &mut [u8], cx: &mut EpCx<'_>) -> ReadReply {
        self.inner.mem_read(bar, offset, buf, cx)
    }
    fn dma_done(&mut self, id: DmaId, ok: bool, data: &[u8], cx: &mut EpCx<'_>) {
        self.inner.dma_done(id, ok, data, cx);
        if self.inner.finished() {
            *self.lats.borrow_mut() = self.inner.latencies_ps().to_vec();
        }
    }
    fn reset(&mut self, cx: &mut EpCx<'_>) {
        self.inner.reset(cx);
    }
    fn bus_master(&mut self, enabled: bool, cx: &mut EpCx<'_>) {
        self.inner.bus_master(enabled, cx);
    }
    fn report(&self) -> Option<serde_json::Value> {
        Endpoint::report(&self.inner)
    }
}

/// A DMA stream to run.
#[derive(Debug, Clone, Copy)]
pub struct Stream {
    /// Read, write or both.
    pub op: DmaOpKind,
    /// Bytes per DMA.
    pub size: u64,
    /// DMAs in flight.
    pub window: u32,
    /// DMAs in all.
    pub count: u64,
    /// Host buffer bytes.
    pub region: u64,
}

/// What a stream gave.
#[derive(Debug, Clone)]
pub struct StreamResult {
    /// The stream's report.
    pub report: StreamReport,
    /// Every DMA's latency, ps, sorted.
    pub lats: Vec<u64>,
    /// Replay timeouts over every link direction.
    pub replay_timeouts: u64,
    /// TLPs sent over every link direction.
    pub tlps: u64,
}

impl StreamResult {
    /// The `q` quantile of the latency (nearest rank), ns.
    pub fn quantile_ns(&self, q: f64) -> f64 {
        pcielab_fabric::timed::percentile_ns(&self.lats, q)
    }
}

/// Runs `s` from endpoint `dev` into a fresh buffer of host memory (warmed first when
/// the configuration's cache state is warm, as pcie-bench warms its buffer), until the
/// fabric is idle.
pub fn dma(topo: &Topology, cfg: &SimConfig, dev: &str, s: Stream) -> Result<StreamResult, String> {
    let mut sim = FabricSim::new(topo, &KindRegistry::builtin(), cfg.clone())
        .map_err(|e| format!("{}: {e}", topo.file))?;
    let base = sim.alloc_dma(s.region);
    if cfg.cache == pcielab_fabric::host::model::CacheState::Warm {
        sim.llc_warm(base, s.region);
    }
    let lats = Rc::new(RefCell::new(Vec::new()));
    let window = s.window.min(u32::try_from(s.count).unwrap_or(u32::MAX));
    sim.attach(
        dev,
        Box::new(Recorder {
            inner: DmaStream::new(
                s.op,
                s.size,
                window,
                s.count,
                base,
                s.region,
                AddrPattern::Sequential,
            ),
            lats: lats.clone(),
        }),
    )
    .map_err(|e| e.to_string())?;
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    let rep = sim
        .model(dev)
        .and_then(|m| m.report())
        .ok_or_else(|| format!("{dev}: no report"))?;
    let f = |k: &str| rep[k].as_f64().unwrap_or(0.0);
    let u = |k: &str| rep[k].as_u64().unwrap_or(0);
    let report = StreamReport {
        dmas: u("dmas"),
        failed: u("failed"),
        bytes: u("bytes"),
        elapsed_ps: u("elapsed_ps"),
        gbps: f("gbps"),
        steady: rep["steady"].as_bool().unwrap_or(false),
        mean_latency_ns: f("mean_latency_ns"),
        min_latency_ns: f("min_latency_ns"),
        max_latency_ns: f("max_latency_ns"),
        median_latency_ns: f("median_latency_ns"),
        p90_latency_ns: f("p90_latency_ns"),
        p99_latency_ns: f("p99_latency_ns"),
        p999_latency_ns: f("p999_latency_ns"),
        resumed_at: None,
    };
    if report.failed > 0 || report.dmas < s.count {
        return Err(format!(
            "{dev}: {} of {} DMAs done, {} failed: {:?}",
            report.dmas,
            s.count,
            report.failed,
            sim.errors()
        ));
    }
    let mut lats = lats.take();
    lats.sort_unstable();
    let c = sim.counters();
    Ok(StreamResult {
        report,
        lats,
        replay_timeouts: c.iter().map(|x| x.1.replay_timeouts).sum(),
        tlps: c.iter().map(|x| x.1.tlps).sum(),
    })
}
