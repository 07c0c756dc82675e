//! The suite on the timed simulator: one fresh simulation per configuration.

use crate::config::{BenchConfig, Cache, Numa, Pattern, Row, Test};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{
    AddrPattern, DmaId, DmaOpKind, DmaStream, Endpoint, EpCx, FabricSim, IommuConfig, ReadReply,
    SimConfig,
};
use pcielab_fabric::topology::Topology;
use pcielab_sim::{SimDuration, SimTime};
use std::cell::RefCell;
use std::rc::Rc;

/// Where the device sees the window when the IOMMU is on (an I/O virtual address the
/// IOMMU maps to the window).
pub const IOVA_BASE: u64 = 0x10_0000_0000;

/// The topology of pcie-bench's setup: a root complex with one Gen3 x8 port and one
/// psmem endpoint, `mem0`.
pub const GEN3_X8: &str = "seed = 1\n\
[[node]]\nname = \"rc\"\nkind = \"root-complex\"\nports = 1\n\
[[node]]\nname = \"mem0\"\nkind = \"psmem\"\n\
[[link]]\nup = \"rc.0\"\ndown = \"mem0\"\ngen = 3\nwidth = 8\n";

/// What the suite runs on: a topology, the simulator's configuration (host profile
/// and knobs applied) and the endpoint that plays the DMA device.
#[derive(Debug, Clone)]
pub struct SimTarget {
    /// The topology.
    pub topo: Topology,
    /// Simulator configuration. Each run takes a copy and sets the configuration's
    /// cache state, IOMMU, NUMA placement and seed in it.
    pub cfg: SimConfig,
    /// The DMA device: an endpoint of `topo`.
    pub device: String,
    /// The IOMMU used by configurations with `iommu` on (`cfg.iommu` if set, else
    /// the default IOMMU: 64 IOTLB entries, 200 ns page walks, 4 KiB pages).
    pub iommu: IommuConfig,
    /// DMAs in flight in the bandwidth tests. Default 32.
    pub inflight: u32,
    /// Base seed; each configuration's seed is [`BenchConfig::seed`] of it.
    pub seed: u64,
}

impl SimTarget {
    /// pcie-bench's setup ([`GEN3_X8`], device `mem0`) with `cfg`.
    pub fn gen3_x8(cfg: SimConfig) -> SimTarget {
        let reg = KindRegistry::builtin();
        let topo = Topology::parse(GEN3_X8, "Gen3 x8 single link", &reg)
            .expect("the built-in topology parses");
        SimTarget::new(topo, cfg, None).expect("the built-in topology has mem0")
    }

    /// A target on `topo`; `device` defaults to its first endpoint. The error says
    /// what is wrong (no endpoint, an unknown device).
    pub fn new(topo: Topology, cfg: SimConfig, device: Option<&str>) -> Result<SimTarget, String> {
        let reg = KindRegistry::builtin();
        let eps: Vec<String> = topo
            .nodes
            .iter()
            .filter(|n| reg.is_endpoint(&n.kind))
            .map(|n| n.name.clone())
            .collect();
        let device = match device {
            Some(d) if eps.iter().any(|e| e == d) => d.to_string(),
            Some(d) => {
                return Err(format!(
                    "device {d:?}: not an endpoint of {}; endpoints: {}",
                    topo.file,
                    eps.join(", ")
                ))
            }
            None => eps
                .first()
                .cloned()
                .ok_or_else(|| format!("{}: the topology has no endpoint", topo.file))?,
        };
        let seed = cfg.seed.unwrap_or(topo.seed);
        Ok(SimTarget {
            iommu: cfg.iommu.unwrap_or_default(),
            topo,
            cfg,
            device,
            inflight: 32,
            seed,
        })
    }

    /// Runs one configuration. The latencies (ps, in completion order) come back
    /// with the row, for plots.
    pub fn run(&self, c: &BenchConfig) -> crate::grid::Outcome {
        c.validate()?;
        let mut cfg = self.cfg.clone();
        cfg.seed = Some(c.seed(self.seed));
        cfg.cache = c.cache;
        cfg.iommu = c.iommu.then_some(self.iommu);
        cfg.numa_remote_base = match c.numa {
            Numa::Local => None,
            Numa::Remote => Some(0),
        };
        cfg.trace = false;
        let reg = KindRegistry::builtin();
        let mut sim = FabricSim::new(&self.topo, &reg, cfg)
            .map_err(|e| format!("{}: {e}", self.topo.file))?;
        let phys = sim.alloc_dma(c.window);
        if c.cache == Cache::Warm {
            // Host software touched the window first, as pcie-bench's driver does.
            sim.llc_warm(phys, c.window);
        }
        let base = if c.iommu {
            sim.iommu_map(&self.device, IOVA_BASE, phys, c.window)
                .map_err(|e| e.to_string())?;
            IOVA_BASE
        } else {
            phys
        };
        if c.test.is_latency() {
            let out = Rc::new(RefCell::new(LatOut::default()));
            let eng = LatEngine {
                wrrd: c.test == Test::LatWrRd,
                size: c.size,
                n: c.n,
                base,
                stride: c.stride(),
                slots: c.slots(),
                offset: c.offset,
                random: c.pattern == Pattern::Random,
                issued: 0,
                read: None,
                out: out.clone(),
            };
            sim.attach(&self.device, Box::new(eng))
                .map_err(|e| e.to_string())?;
            run_to_idle(&mut sim);
            let o = out.borrow();
            if o.lats.len() as u64 != c.n {
                return Err(format!(
                    "{}: {} of {} transactions finished",
                    c.label(),
                    o.lats.len(),
                    c.n
                ));
            }
            let elapsed = o.last.as_ps().saturating_sub(o.first.as_ps());
            let bytes = c.size * c.n;
            let gbps = if elapsed == 0 {
                0.0
            } else {
                bytes as f64 * 8000.0 / elapsed as f64
            };
            Ok((
                Row::from_parts(c, Row::stats(&o.lats), gbps, o.failed),
                o.lats.clone(),
            ))
        } else {
            let op = match c.test {
                Test::BwRd => DmaOpKind::Read,
                Test::BwWr => DmaOpKind::Write,
                _ => DmaOpKind::ReadWrite,
            };
            let window = self.inflight.max(1);
            let pattern = match c.pattern {
                Pattern::Seq => AddrPattern::Sequential,
                Pattern::Random => AddrPattern::Random,
            };
            // Slots of a stride inside [base + offset, base + window): the stream's
            // region is the window less the offset, its offset the configuration's.
            let mut st = DmaStream::new(
                op,
                c.size,
                window,
                c.n,
                base,
                c.slots() * c.stride(),
                pattern,
            );
            // `new` rounds a region up to a page; the window may be smaller.
            st.region = c.slots() * c.stride();
            st.align = 64;
            st.offset = c.offset;
            let out = Rc::new(RefCell::new(None));
            sim.attach(
                &self.device,
                Box::new(Shared {
                    inner: st,
                    out: out.clone(),
                }),
            )
            .map_err(|e| e.to_string())?;
            run_to_idle(&mut sim);
            let done = out.borrow_mut().take();
            let (rep, lats) =
                done.ok_or_else(|| format!("{}: the stream did not finish", c.label()))?;
            Ok((
                Row::from_parts(c, Row::stats(&lats), rep.gbps, rep.failed),
                lats,
            ))
        }
    }
}

/// Runs until nothing is left to do (a completion timeout, if any, included).
fn run_to_idle(sim: &mut FabricSim) {
    while sim.pending_events() > 0 {
        let before = sim.events();
        sim.run_until_idle(sim.now() + SimDuration::from_us(10_000));
        if sim.events() == before && sim.pending_events() > 0 {
            sim.run_while(SimTime::from_ps(u64::MAX / 2), |s| s.events() > before);
        }
    }
}

#[derive(Debug, Default)]
struct LatOut {
    lats: Vec<u64>,
    failed: u64,
    first: SimTime,
    last: SimTime,
}

/// The latency tests' device: one read (or one write and one read of the same
/// address) at a time.
#[derive(Debug)]
struct LatEngine {
    wrrd: bool,
    size: u64,
    n: u64,
    base: u64,
    stride: u64,
    slots: u64,
    offset: u64,
    random: bool,
    issued: u64,
    /// The read in flight and when its transaction began.
    read: Option<(DmaId, SimTime)>,
    out: Rc<RefCell<LatOut>>,
}

impl LatEngine {
    fn issue(&mut self, cx: &mut EpCx<'_>) {
        if self.issued >= self.n {
            return;
        }
        let slot = if self.random {
            cx.rng().below(self.slots)
        } else {
            self.issued % self.slots
        };
        let addr = self.base + slot * self.stride + self.offset;
        let t0 = cx.now();
        if self.issued == 0 {
            self.out.borrow_mut().first = t0;
        }
        if self.wrrd {
            let n = self.size as usize;
            let mut data = cx.buffer(n);
            let m = self.issued as u8;
            data.extend((0..n).map(|k| (k as u8) ^ m));
            cx.dma_write(addr, data);
        }
        let id = cx.dma_read(addr, self.size);
        self.read = Some((id, t0));
        self.issued += 1;
    }
}

impl Endpoint for LatEngine {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        self.issue(cx);
    }
    fn mem_read(&mut self, _bar: u8, _off: u64, buf: &mut [u8], _cx: &mut EpCx<'_>) -> ReadReply {
        buf.fill(0);
        ReadReply::Now
    }
    fn dma_done(&mut self, id: DmaId, ok: bool, _data: &[u8], cx: &mut EpCx<'_>) {
        match self.read {
            Some((r, t0)) if r == id => {
                self.read = None;
                let now = cx.now();
                {
                    let mut o = self.out.borrow_mut();
                    o.lats.push((now - t0).as_ps());
                    o.last = now;
                    if !ok {
                        o.failed += 1;
                    }
                }
                self.issue(cx);
            }
            // The write of a pair: done when handed to the link; a failure counts.
            _ if !ok => self.out.borrow_mut().failed += 1,
            _ => {}
        }
    }
}

/// A finished stream's report and latencies.
type Finished = Option<(pcielab_fabric::timed::StreamReport, Vec<u64>)>;

/// A [`DmaStream`] that hands its report and latencies out when it finishes.
#[derive(Debug)]
struct Shared {
    inner: DmaStream,
    out: Rc<RefCell<Finished>>,
}

impl Shared {
    fn publish(&mut self) {
        if self.inner.finished() {
            let mut o = self.out.borrow_mut();
            if o.is_none() {
                *o = Some((self.inner.report(), self.inner.latencies_ps().to_vec()));
            }
        }
    }
}

impl Endpoint for Shared {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        self.inner.start(cx);
    }
    fn mem_read(&mut self, bar: u8, off: u64, buf: &mut [u8], cx: &mut EpCx<'_>) -> ReadReply {
        self.inner.mem_read(bar, off, buf, cx)
    }
    fn dma_done(&mut self, id: DmaId, ok: bool, data: &[u8], cx: &mut EpCx<'_>) {
        self.inner.dma_done(id, ok, data, cx);
        self.publish();
    }
    fn reset(&mut self, cx: &mut EpCx<'_>) {
        self.inner.reset(cx);
        self.publish();
    }
    fn bus_master(&mut self, enabled: bool, cx: &mut EpCx<'_>) {
        self.inner.bus_master(enabled, cx);
    }
}
