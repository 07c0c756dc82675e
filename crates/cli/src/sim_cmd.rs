//! `pcielab sim FILE.toml --workload NAME …`: run the timed simulator.

use crate::format::Format;
use crate::progress::Progress;
use crate::sim_capture::SimCapture;
use crate::{fail, Failure};
use clap::{Args, ValueEnum};
use pcielab_fabric::drivers::RunStage;
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{
    AddrPattern, DmaOpKind, DmaStream, DpcReason, FabricSim, HostRead, IommuConfig, Recovery,
    SimConfig,
};
use pcielab_fabric::topology::Topology;
use pcielab_sim::{SimDuration, SimTime};
use serde_json::{json, Value};
use std::path::PathBuf;

/// Built-in workloads.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// A DMA stream from one endpoint (psmem-style engine): --op, --size, --window, --count.
    /// A DMA's latency runs from its issue to its end: for a read, its last completion
    /// byte back at the device (a round trip); for a write (posted), its last MWr
    /// handed to the device's own link as its transmission starts, so only the time
    /// it waited in the device (behind earlier writes, DLLPs or for credits).
    Dma,
    /// MMIO read latency of every endpoint's BAR 0 (--count reads of --size bytes).
    MmioLat,
    /// The default scenario: DMA read/write bandwidth over --sizes for every endpoint
    /// (--count DMAs per size), then MMIO read latency of every endpoint (always 10
    /// reads of 4 bytes; --workload mmio-lat for other counts and sizes).
    Sweep,
    /// Linux-style enumeration (scan, BAR sizing, address assignment, enabling) by
    /// configuration requests that travel the links as CfgRd/CfgWr TLPs: the functions
    /// found, the requests made and how long it took.
    Enumerate,
    /// The device (--device) sends the TLPs given with --tlp HEX, byte for byte, on its
    /// link: what the port above did with each (Malformed, Unsupported Request,
    /// carried), the completions that came back, and the AER status left.
    Inject,
    /// pcie-bench's NIC (--nic simple|batched, --dpdk) with its driver on one link
    /// (--gen, --lanes; default Gen3 x8), per frame size of --sizes: the columns of
    /// `pcielab model nic`, measured, with the model's prediction beside them.
    Nic,
    /// Seed 003's SR-IOV DMA engine (a `dma-engine` node: --device, else the first; or
    /// one on --gen/--lanes with --vfs VFs): every function (PF and VFs) runs --count
    /// transfers of each size of --sizes at once, one after the other, set up by its
    /// driver, started by a doorbell and ended by its interrupt (--op read: host to
    /// device, write: device to host; --vm: the VFs in VMs through the IOMMU).
    Sriov,
}

/// Which NIC `--workload nic` runs.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum NicChoice {
    /// pcie-bench's simple NIC: a descriptor read and an interrupt per packet.
    Simple,
    /// The descriptor-batching NIC (82599-like) with the Linux driver (--dpdk: DPDK).
    Batched,
}

/// DMA direction.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Device reads host memory.
    Read,
    /// Device writes host memory.
    Write,
    /// Alternating reads and writes.
    Rw,
    /// FetchAdd AtomicOps on 4- or 8-byte counters in host memory (--size 4 or 8;
    /// --workload dma). The device is enabled as Linux's pci_enable_atomic_ops_to_root
    /// does.
    Atomic,
}

/// Active State Power Management the host enables.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aspm {
    /// Disabled (Link Control's reset value).
    Off,
    /// L0s on every transmitter whose link supports it at both ends.
    L0s,
    /// L1 on every link whose two ends support it.
    L1,
    /// Both.
    #[value(name = "l0s-l1")]
    L0sL1,
}

impl Aspm {
    fn bits(self) -> u8 {
        match self {
            Aspm::Off => 0,
            Aspm::L0s => 1,
            Aspm::L1 => 2,
            Aspm::L0sL1 => 3,
        }
    }
}

/// Address pattern.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Consecutive page-aligned slots.
    Seq,
    /// Random page-aligned slots (seeded).
    Random,
}

impl SimArgs {
    /// The output format (`--format`, `--json`, `--csv`).
    pub(crate) fn out_format(&self) -> Format {
        crate::format::effective(self.format, self.json, self.csv)
    }
}

/// Examples at the end of `pcielab sim --help`.
pub const EXAMPLES: &str = "\
Examples:
  pcielab sim                                     the built-in default: sweep every endpoint
  pcielab sim topo.toml --sizes 64:4K:x2          the same on your topology
  pcielab sim --gen 4 --lanes 16 --workload dma --op write   one Gen4 x16 link, no file
  pcielab sim --workload dma --device mem3 --op write --size 4K --count 2000
  pcielab sim --workload dma --op rw --error-rate 0.05 --pcap lossy.pcapng
  pcielab sim --workload mmio-lat --count 100 --aspm l1 --gap-us 20
  pcielab sim --workload dma --device mem1 --fail mem1@20 --recover-us 150 --dpc
  pcielab sim --workload dma --op read --window 1 --iommu --iotlb-entries 8 --ats
  pcielab sim --workload enumerate --json
  pcielab sim --workload sriov --vfs 8 --op write --sizes 64K,1M";

/// Arguments of `pcielab sim`.
#[derive(Args, Debug)]
pub struct SimArgs {
    /// Topology file (TOML). Without it: the built-in default scenario, a root complex
    /// with a Gen3 x8 switch and three endpoints below root port 0 and a Gen4 x16
    /// endpoint on root port 1 (the same as examples/topologies/sim-default.toml).
    #[arg(conflicts_with = "example")]
    pub(crate) file: Option<PathBuf>,
    /// A built-in example topology instead of a file (`pcielab topo list-examples`).
    #[arg(long, value_name = "NAME", conflicts_with_all = ["gen", "lanes"])]
    pub(crate) example: Option<String>,
    /// Instead of a file: one link of this generation (1..=6) from the root complex to
    /// one psmem endpoint, mem0 (with --lanes; default 3).
    #[arg(long, value_name = "GEN", conflicts_with = "file")]
    pub(crate) gen: Option<u8>,
    /// Instead of a file: one link of this width (1, 2, 4, 8, 12, 16, 32) from the root
    /// complex to one psmem endpoint, mem0 (with --gen; default 8).
    #[arg(long, value_name = "N", conflicts_with = "file")]
    pub(crate) lanes: Option<u8>,
    /// Workload to run.
    #[arg(help_heading = "Workload", long, value_enum, default_value = "sweep")]
    workload: Workload,
    /// --workload nic: which NIC.
    #[arg(
        help_heading = "NIC (--workload nic)",
        long,
        value_enum,
        default_value = "simple"
    )]
    pub(crate) nic: NicChoice,
    /// --workload nic: the Ethernet line rate, Gb/s (for the eth_* columns; the NIC's
    /// MAC takes frames as fast as PCIe brings them, to measure what PCIe allows).
    #[arg(help_heading = "NIC (--workload nic)", long, default_value_t = 40)]
    pub(crate) eth: u32,
    /// --workload nic with --nic batched: DPDK's poll-mode driver.
    #[arg(help_heading = "NIC (--workload nic)", long)]
    pub(crate) dpdk: bool,
    /// --workload nic: packets per run (rounded up to a multiple of 160).
    #[arg(help_heading = "NIC (--workload nic)", long, default_value_t = 4000)]
    pub(crate) packets: u64,
    /// --workload nic: also draw measured and predicted bandwidth to this .png or .svg.
    #[arg(help_heading = "NIC (--workload nic)", long, value_name = "FILE")]
    pub(crate) plot: Option<std::path::PathBuf>,
    /// --workload sriov without a file: the dma-engine's VFs.
    #[arg(
        help_heading = "SR-IOV DMA engine (--workload sriov)",
        long,
        default_value_t = 4
    )]
    pub(crate) vfs: u16,
    /// --workload sriov: the VFs are used by VMs (guest-physical addresses through the
    /// IOMMU, nested walks, injected interrupts); implies an IOMMU.
    #[arg(help_heading = "SR-IOV DMA engine (--workload sriov)", long)]
    pub(crate) vm: bool,
    /// Endpoint node that runs the DMA stream (default: the first endpoint).
    #[arg(help_heading = "Workload", long)]
    pub(crate) device: Option<String>,
    /// DMA direction.
    #[arg(help_heading = "Workload", long, value_enum, default_value = "read")]
    pub(crate) op: Op,
    /// Bytes per DMA (dma; default 4096) or per MMIO read (mmio-lat; default 4).
    /// For --op rw the Gb/s column counts both directions. Units allowed (4K, 0x1000).
    #[arg(help_heading = "Workload", long, value_parser = crate::units::parse_bytes)]
    size: Option<u64>,
    /// Transfer sizes for the sweep, as in `pcielab model`: N, A:B (every size), A:B:STEP
    /// or A:B:xFACTOR (x2: powers of two from A); sizes take units (4K, 0x1000).
    #[arg(help_heading = "Workload", long, default_value = "64:4096:x2")]
    pub(crate) sizes: String,
    /// DMAs in flight.
    #[arg(help_heading = "Workload", long, default_value_t = 16)]
    window: u32,
    /// Outstanding read tags of each DMA engine (1..=768).
    #[arg(help_heading = "Workload", long, default_value_t = 64)]
    tags: u16,
    /// DMAs (dma; sweep: per size and direction) or MMIO reads (mmio-lat) to run;
    /// transfers per function and size (sriov: default 8).
    #[arg(help_heading = "Workload", long, default_value_t = 200)]
    pub(crate) count: u64,
    /// Address pattern.
    #[arg(help_heading = "Workload", long, value_enum, default_value = "seq")]
    pattern: Pattern,
    /// Host buffer size for the DMA stream in bytes (units allowed: 4MiB).
    #[arg(help_heading = "Workload", long, default_value = "4MiB", value_parser = crate::units::parse_bytes)]
    region: u64,
    /// Max_Payload_Size (bytes).
    #[arg(help_heading = "Link and fabric", long, default_value = "256", value_parser = crate::units::parse_bytes_u16)]
    pub(crate) mps: u16,
    /// Max_Read_Request_Size (bytes).
    #[arg(help_heading = "Link and fabric", long, default_value = "512", value_parser = crate::units::parse_bytes_u16)]
    pub(crate) mrrs: u16,
    /// Read Completion Boundary (64 or 128).
    #[arg(help_heading = "Link and fabric", long, default_value = "64", value_parser = crate::units::parse_bytes_u16)]
    rcb: u16,
    /// Switch latency (ns, 0..=1000000000).
    #[arg(help_heading = "Link and fabric", long, default_value_t = 150, value_parser = clap::value_parser!(u64).range(0..=1_000_000_000))]
    switch_ns: u64,
    /// The host model: profile and knobs.
    #[command(flatten)]
    pub host: crate::host_args::HostArgs,
    /// Propagation delay per link (ns, 0..=1000000: a link of 200 km; PCIe's replay
    /// timer allows for a few ns, so beyond about 100 ns every TLP is replayed).
    #[arg(help_heading = "Link and fabric", long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    prop_ns: u64,
    /// Replay buffer capacity (TLPs).
    #[arg(help_heading = "Link and fabric", long, default_value_t = 64)]
    replay_buffer: usize,
    /// Burst mode: DMA engines send up to N back-to-back MPS writes to host memory, and
    /// their read requests, as one unit, and the root complex groups its completions
    /// likewise (far faster on long DMA streams; the same TLPs, with coarser data-link
    /// and flow-control granularity; off with error injection, ECRC, cut-through,
    /// IOMMU or ASPM). 1 = every TLP on its own (the exact model); 1..=64.
    #[arg(help_heading = "Link and fabric", long, default_value_t = 1)]
    burst: u8,
    /// Longest time (µs) a receiver goes without UpdateFC for a class with finite
    /// credits: the spec's periodic refresh (30; 120 with Extended Synch; 0 = off, as
    /// the analytic model assumes).
    #[arg(help_heading = "Link and fabric", long, default_value_t = 30)]
    fc_update_us: u64,
    /// Probability of an LCRC error per TLP (0 <= p < 1).
    #[arg(
        help_heading = "Errors, failures and recovery",
        long,
        default_value_t = 0.0
    )]
    error_rate: f64,
    /// Probability that a TLP with data leaves its source poisoned (EP set; 0 <= p <= 1):
    /// receivers log Poisoned TLP Received, DMA reads that get one fail.
    #[arg(
        help_heading = "Errors, failures and recovery",
        long,
        default_value_t = 0.0
    )]
    poison_rate: f64,
    /// ECRC on: every function with AER generates and checks the end-to-end TLP digest
    /// (4 more bytes per TLP).
    #[arg(help_heading = "Errors, failures and recovery", long)]
    ecrc: bool,
    /// Probability that a switch corrupts the data of a TLP it forwards (0 <= p <= 1):
    /// only ECRC catches it; without --ecrc the data arrives corrupted.
    #[arg(
        help_heading = "Errors, failures and recovery",
        long,
        default_value_t = 0.0
    )]
    switch_error_rate: f64,
    /// Switches forward cut-through (from the header) instead of store-and-forward.
    #[arg(help_heading = "Link and fabric", long)]
    cut_through: bool,
    /// Active State Power Management the host enables on every link whose two ends
    /// support it (links go to L0s after 7 µs idle, to L1 after 8 µs).
    #[arg(
        help_heading = "Power management",
        long,
        value_enum,
        default_value = "off"
    )]
    aspm: Aspm,
    /// With --aspm l1 or l0s-l1: the L1.1/L1.2 substates too, programmed as Linux does
    /// (a link in L1 sleeps in L1.2 unless the device's LTR forbids it; leaving L1.2
    /// costs T_POWER_ON + Common_Mode_Restore_Time, 20 µs, more).
    #[arg(help_heading = "Power management", long)]
    l1ss: bool,
    /// Idle time before each MMIO read in µs (mmio-lat), long enough for --aspm
    /// links to fall asleep (0..=1000000).
    #[arg(help_heading = "Workload", long, default_value_t = 0)]
    gap_us: u64,
    /// The root complex splits peer-to-peer requests into pieces of this many bytes.
    #[arg(help_heading = "Link and fabric", long)]
    p2p_split: Option<u32>,
    /// A TLP as hex for --workload inject (repeatable; `pcielab tlp encode` makes one).
    #[arg(help_heading = "Workload", long = "tlp", value_name = "HEX")]
    tlps: Vec<String>,
    /// Peer-to-peer (--workload dma): the stream targets this endpoint's memory BAR
    /// instead of host memory.
    #[arg(help_heading = "Workload", long)]
    peer: Option<String>,
    /// Access Control Services: every downstream port redirects peer-to-peer requests
    /// and completions by the root complex (as Linux sets it with an IOMMU).
    #[arg(help_heading = "Workload", long)]
    acs: bool,
    /// An IOMMU in the root complex: the DMA workloads then use I/O virtual addresses
    /// (from 0x10_0000_0000) mapped page by page to their host buffer, and every
    /// untranslated request is looked up in the IOTLB.
    #[arg(help_heading = "IOMMU, ATS and PRI", long)]
    iommu: bool,
    /// IOTLB entries (LRU), with --iommu.
    #[arg(help_heading = "IOMMU, ATS and PRI", long, default_value_t = 64)]
    iotlb_entries: usize,
    /// Page-walk (IOTLB miss) latency in ns, with --iommu.
    #[arg(help_heading = "IOMMU, ATS and PRI", long, default_value_t = 200)]
    page_walk_ns: u64,
    /// IOMMU page size in bytes (a power of two, 4096..=1073741824), with --iommu.
    #[arg(help_heading = "IOMMU, ATS and PRI", long, default_value_t = 4096)]
    iommu_page: u64,
    /// ATS: devices with the ATS capability ask the IOMMU for translations, cache them
    /// and send translated requests that skip the IOTLB (needs --iommu).
    #[arg(help_heading = "IOMMU, ATS and PRI", long)]
    ats: bool,
    /// PASID (needs --iommu): the DMA workloads run in the address space of process N
    /// (0..=1048575): every request carries a PASID TLP prefix (Translation and Page
    /// Requests too, with --ats and --pri) and the IOMMU translates it by that PASID's
    /// table.
    #[arg(help_heading = "IOMMU, ATS and PRI", long, value_name = "N")]
    pasid: Option<u32>,
    /// Entries of each device's Address Translation Cache, with --ats (1..=65536).
    #[arg(help_heading = "IOMMU, ATS and PRI", long, default_value_t = 64)]
    atc_entries: usize,
    /// PRI (needs --ats): the DMA buffer is mapped on demand, page by page, when the
    /// device asks with a Page Request (demand paging); each costs --page-fault-us.
    #[arg(help_heading = "IOMMU, ATS and PRI", long)]
    pri: bool,
    /// Host time to handle one Page Request (an I/O page fault) in µs, with --pri
    /// (0..=1000000).
    #[arg(help_heading = "IOMMU, ATS and PRI", long, default_value_t = 10)]
    page_fault_us: u64,
    /// A link fails during the DMA run (--workload dma): NODE@US, the link above NODE
    /// goes down US µs into the run (a surprise down); the port above answers for it,
    /// the device below is reset and its DMAs in flight are lost.
    #[arg(
        help_heading = "Errors, failures and recovery",
        long,
        value_name = "NODE@US"
    )]
    fail: Option<String>,
    /// With --fail: the failed link comes back this many µs after the failure (and,
    /// with --dpc, the host releases the containment then). Host software then
    /// recovers the reset component as Linux does: it waits for the link, waits
    /// --ready-wait-us, restores the configuration it saved before the failure, and
    /// the DMA stream resumes with the DMAs it had left.
    #[arg(
        help_heading = "Errors, failures and recovery",
        long,
        value_name = "US"
    )]
    recover_us: Option<u64>,
    /// With --recover-us: how long host software waits after the link is back before
    /// it configures the device again, in µs (0..=1000000; PCIe Base Spec 6.6.1:
    /// at least 100 ms, unless the device reports readiness earlier).
    #[arg(
        help_heading = "Errors, failures and recovery",
        long,
        value_name = "US",
        default_value_t = 100_000
    )]
    ready_wait_us: u64,
    /// How long a reset device takes to initialize once its link is back, in µs
    /// (0..=1000000): until then it answers configuration requests with Configuration
    /// Request Retry Status and the root complex re-issues them every 10 µs.
    #[arg(
        help_heading = "Errors, failures and recovery",
        long,
        value_name = "US",
        default_value_t = 0
    )]
    device_ready_us: u64,
    /// Downstream Port Containment armed on every root port and switch downstream
    /// port: an ERR_NONFATAL or ERR_FATAL (a Surprise Down among them) disables the
    /// port's link, contained requests get Unsupported Request.
    #[arg(help_heading = "Errors, failures and recovery", long)]
    dpc: bool,
    /// Bit error rate (replaces --error-rate when non-zero): a TLP of b wire bits is
    /// corrupted with probability 1-(1-BER)^b; at most the rate that corrupts the
    /// largest TLP with probability 0.99 (about 2e-3 at MPS 256, 1.4e-4 at MPS 4096).
    #[arg(
        help_heading = "Errors, failures and recovery",
        long,
        default_value_t = 0.0
    )]
    ber: f64,
    /// RNG seed (default: the topology's).
    #[arg(help_heading = "Output", long)]
    pub(crate) seed: Option<u64>,
    /// Output format: table, csv (floats at the table's precision) or json (an array of
    /// records).
    #[arg(help_heading = "Output", long, value_enum, conflicts_with_all = ["json", "csv"])]
    format: Option<Format>,
    /// Same as --format json.
    #[arg(help_heading = "Output", long, conflicts_with = "csv")]
    json: bool,
    /// Same as --format csv.
    #[arg(help_heading = "Output", long)]
    csv: bool,
    /// Capture every TLP and DLLP of every run to this pcapng file (`.pcap`: classic
    /// pcap, no interface names); read it with `pcielab dump` or Wireshark with
    /// dissector/pcielab.lua. Capturing does not change any result.
    #[arg(help_heading = "Output", long, value_name = "FILE")]
    pcap: Option<PathBuf>,
    /// Largest --pcap file (bytes; 4K, 512M, 1GiB, 0x1000 ...; 0 = no limit): capture
    /// stops at the packet that reaches it, the file stays valid, the run goes on, and
    /// stderr says how many TLPs/DLLPs were left out.
    #[arg(help_heading = "Output", long, value_name = "SIZE", default_value = "1GiB", value_parser = crate::units::parse_bytes)]
    pcap_max: u64,
    /// Write the simulator's own trace (one line per TLP/DLLP: time in ps, link
    /// direction, kind, bytes in hex) to this file.
    #[arg(help_heading = "Output", long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// The flags given on the command line (long names), filled in by `main`: a flag
    /// that the workload does not use is an error, not silently ignored.
    #[arg(skip)]
    pub(crate) given: Vec<String>,
}

/// Parses `--sizes` (see [`crate::units::parse_size_range`]): 1 B to 1 MiB, at most
/// 10,000 sizes.
fn parse_sizes(s: &str) -> Result<Vec<u64>, Failure> {
    crate::units::parse_size_range(s, 1 << 20, 10_000).map_err(fail)
}

struct Ctx {
    topo: Topology,
    reg: KindRegistry,
    cfg: SimConfig,
}

impl Ctx {
    fn new_sim(&self) -> Result<FabricSim, Failure> {
        FabricSim::new(&self.topo, &self.reg, self.cfg.clone())
            .map_err(|e| fail(format!("{}: {e}", self.topo.file)))
    }
    fn endpoints(&self) -> Vec<String> {
        self.topo
            .nodes
            .iter()
            .filter(|n| self.reg.is_endpoint(&n.kind))
            .map(|n| n.name.clone())
            .collect()
    }
}

/// The spec-mode analytic model's saturated bandwidth (Gb/s) for `op` of `size` bytes
/// over the narrowest link between `device` and the root complex (None when the model
/// does not cover the configuration).
fn model_gbps(ctx: &Ctx, device: &str, op: Op, size: u64) -> Option<f64> {
    use pcielab_model::{Mode, Model, Mps, Mrrs, PcieConfig, Rcb};
    let t = &ctx.topo;
    let mut node = t.nodes.iter().position(|n| n.name == device)?;
    let mut best: Option<f64> = None;
    for _ in 0..t.nodes.len() {
        let Some(l) = t.links.iter().find(|l| l.down.0 as usize == node) else {
            break;
        };
        let mut c = PcieConfig::new(l.gen, l.width as u32).ok()?;
        c.mode = Mode::Spec;
        c.mps = Mps::new(ctx.cfg.mps as u32).ok()?;
        c.mrrs = Mrrs::new(ctx.cfg.mrrs as u32).ok()?;
        c.rcb = Rcb::new(ctx.cfg.rcb as u32).ok()?;
        let m = Model::new(c).ok()?;
        let g = match op {
            Op::Read => m.read(size),
            Op::Write => m.write(size),
            // Both directions at once: the per-direction rate, twice.
            Op::Rw => m.read_write(size).map(|x| 2.0 * x),
            // The model has no AtomicOps.
            Op::Atomic => return None,
        }
        .ok()?;
        best = Some(best.map_or(g, |b: f64| b.min(g)));
        node = l.up.0 as usize;
    }
    best
}

fn dma_row(
    ctx: &Ctx,
    a: &SimArgs,
    device: &str,
    op: Op,
    size: u64,
    cap: &mut Option<SimCapture>,
) -> Result<Value, Failure> {
    let mut sim = ctx.new_sim()?;
    let mut base = sim.alloc_dma(a.region);
    let mut region = a.region;
    if let Some(peer) = &a.peer {
        if peer == device {
            return Err(fail(format!("--peer {peer:?}: the device itself")));
        }
        // Peer to peer: the stream's buffer is the peer's memory BAR.
        let bar = sim
            .bdf(peer)
            .and_then(|b| sim.tree().get(b))
            .and_then(|n| {
                n.bars
                    .iter()
                    .find(|b| b.index == 0 && !matches!(b.bar, pcielab_config::Bar::Io { .. }))
            })
            .ok_or_else(|| fail(format!("--peer {peer:?}: no endpoint with a memory BAR 0")))?;
        base = bar.address;
        region = region.min(bar.bar.size());
    } else if ctx.cfg.cache == pcielab_fabric::host::model::CacheState::Warm {
        // Host software touched the buffer first (pcie-bench warms it before a test).
        sim.llc_warm(base, region);
    }
    if ctx.cfg.iommu.is_some() {
        // The device sees I/O virtual addresses; the IOMMU maps them to the buffer
        // (with --pri, page by page as the device asks).
        match (a.pasid, a.pri) {
            (Some(p), true) => sim.iommu_map_on_demand_pasid(device, p, IOVA_BASE, base, a.region),
            (Some(p), false) => sim.iommu_map_pasid(device, p, IOVA_BASE, base, a.region),
            (None, true) => sim.iommu_map_on_demand(device, IOVA_BASE, base, a.region),
            (None, false) => sim.iommu_map(device, IOVA_BASE, base, a.region),
        }
        .map_err(|e| fail(e.to_string()))?;
        base = IOVA_BASE;
    }
    let kind = match op {
        Op::Read => DmaOpKind::Read,
        Op::Write => DmaOpKind::Write,
        Op::Rw => DmaOpKind::ReadWrite,
        Op::Atomic => {
            sim.enable_atomic_ops_to_root(device, &[size as u32])
                .map_err(|e| fail(format!("--op atomic: {e}")))?;
            DmaOpKind::FetchAdd
        }
    };
    let pattern = match a.pattern {
        Pattern::Seq => AddrPattern::Sequential,
        Pattern::Random => AddrPattern::Random,
    };
    // Exactly --count DMAs, never more in flight than there are DMAs.
    let count = a.count;
    let window = a.window.min(u32::try_from(count).unwrap_or(u32::MAX));
    sim.attach(
        device,
        Box::new({
            let mut st = DmaStream::new(kind, size, window, count, base, region, pattern);
            st.pasid = a.pasid;
            st
        }),
    )
    .map_err(|e| fail(e.to_string()))?;
    if a.dpc {
        arm_dpc(&mut sim);
    }
    let failure = match parse_fail(a)? {
        None => {
            match cap.as_mut() {
                None => run_with_progress(&mut sim, device, count),
                Some(c) => {
                    let label = format!("dma {} {size} B from {device}", op_name(op));
                    run_captured(&mut sim, c, &label)?;
                }
            }
            None
        }
        Some((node, at_us)) => {
            let label = format!(
                "dma {} {size} B from {device}, link above {node} fails at {at_us} us",
                op_name(op)
            );
            if let Some(c) = cap.as_mut() {
                begin_run(&sim, c, &label)?;
            }
            advance(&mut sim, cap, SimTime::from_ps(at_us * 1_000_000))?;
            // What host software saved while the component was configured.
            let saved = sim
                .save_below(&node)
                .map_err(|e| fail(format!("--fail: {e}")))?;
            let t_fail = sim.now();
            sim.link_down(&node)
                .map_err(|e| fail(format!("--fail: {e}")))?;
            let mut recovery = None;
            if let Some(r) = a.recover_us {
                advance(&mut sim, cap, t_fail + SimDuration::from_us(r))?;
                sim.link_up(&node).map_err(|e| fail(e.to_string()))?;
                release_dpc(&mut sim);
                recovery = Some(sim.recover(&node, &saved).map_err(|e| e.to_string()));
            }
            advance(&mut sim, cap, SimTime::from_ps(u64::MAX / 2))?;
            if let Some(c) = cap.as_mut() {
                end_run(&mut sim, c)?;
            }
            Some(failure_report(&sim, &node, t_fail, a.recover_us, recovery))
        }
    };
    let rep = sim
        .model(device)
        .and_then(|m| m.report())
        .ok_or_else(|| fail(format!("{device}: no report")))?;
    let c = sim.counters();
    let links: Vec<Value> = c
        .iter()
        .map(|(name, k)| {
            json!({
                "link": name, "tlps": k.tlps, "payload_bytes": k.payload_bytes,
                "wire_bytes": k.wire_bytes, "acks": k.acks, "naks": k.naks,
                "fc_dllps": k.fc_dllps, "replays": k.replays,
                "replay_timeouts": k.replay_timeouts, "retrains": k.retrains,
                "poisoned": k.poisoned, "internal_errors": k.internal_errors,
                "credit_stall_ns": k.credit_stall_ps as f64 / 1000.0,
                "busy_ns": k.busy_ps as f64 / 1000.0,
                "l0s_entries": k.l0s_entries, "l0s_ns": k.l0s_ps as f64 / 1000.0,
                "l1_entries": k.l1_entries, "l1_ns": k.l1_ps as f64 / 1000.0,
                "utilization": (k.busy_ps as f64 / sim.now().as_ps().max(1) as f64),
            })
        })
        .collect();
    let replays: u64 = c.iter().map(|x| x.1.replays).sum();
    let stall: u64 = c.iter().map(|x| x.1.credit_stall_ps).sum();
    let iommu = sim.iommu_stats().map(|(m, faults)| {
        json!({
            "iotlb_hits": m.hits, "iotlb_misses": m.misses, "faults": faults.len(),
            "translation_requests": m.translation_requests,
        })
    });
    let ats = sim.ats_stats(device).map(|x| {
        json!({
            "atc_hits": x.atc_hits, "atc_misses": x.atc_misses,
            "translation_requests": x.translation_requests, "denied": x.denied,
            "evictions": x.evictions, "page_requests": x.page_requests,
            "pages_made_resident": x.pages_made_resident,
        })
    });
    let mut row = json!({
        "workload": "dma", "device": device,
        "op": op_name(op), "size_B": size, "window": window, "peer": a.peer,
        // No steady state (count <= window): no rate to show.
        "gbps": if rep["steady"] == false { Value::Null } else { rep["gbps"].clone() },
        "model_gbps": if a.peer.is_some() { None } else { model_gbps(ctx, device, op, size) },
        "mean_latency_ns": rep["mean_latency_ns"],
        "min_latency_ns": rep["min_latency_ns"], "max_latency_ns": rep["max_latency_ns"],
        "median_latency_ns": rep["median_latency_ns"], "p90_latency_ns": rep["p90_latency_ns"],
        "p99_latency_ns": rep["p99_latency_ns"], "p999_latency_ns": rep["p999_latency_ns"],
        "dmas": rep["dmas"], "failed": rep["failed"], "replays": replays,
        "credit_stall_ns": stall as f64 / 1000.0,
        "elapsed_ns": rep["elapsed_ps"].as_f64().unwrap_or(0.0) / 1000.0, "events": sim.events(),
        "burst": sim.burst_size(), "completion_burst": sim.completion_burst_size(), "read_burst": sim.read_burst_size(), "links": links, "iommu": iommu, "ats": ats,
    });
    if let Some(mut f) = failure {
        // When the device's DMA stream took up its work again after the recovery.
        f["resumed_at_ns"] = rep["resumed_at_ns"].clone();
        row["failure"] = f;
    }
    Ok(row)
}

/// Runs a DMA stream until the fabric is idle, with a progress bar counting its DMAs
/// (see [`Progress`]); the run is the same as in one piece (the capture test compares
/// chunked and whole runs).
fn run_with_progress(sim: &mut FabricSim, device: &str, count: u64) {
    let mut bar = Progress::new("DMAs", count);
    let done = |sim: &FabricSim| sim.model(device).and_then(|m| m.progress()).unwrap_or(0);
    // Chunks of 1 ms of simulated time: a check of the wall clock every few thousand
    // DMAs at most.
    let chunk = SimDuration::from_us(1000);
    while sim.pending_events() > 0 {
        run_idle_chunk(sim, chunk);
        bar.set(done(sim));
    }
    bar.finish();
}

/// Runs `sim` towards idle for up to `chunk` of simulated time, and at least one event:
/// when the next event is further away than `chunk` (a completion timeout with the
/// periodic UpdateFC off), a chunk alone would deliver nothing and leave the time
/// where it was.
fn run_idle_chunk(sim: &mut FabricSim, chunk: SimDuration) {
    let before = sim.events();
    sim.run_until_idle(sim.now() + chunk);
    if sim.events() == before && sim.pending_events() > 0 {
        sim.run_while(SimTime::from_ps(u64::MAX / 2), |s| s.events() > before);
    }
}

/// `--fail NODE@US`, checked.
fn parse_fail(a: &SimArgs) -> Result<Option<(String, u64)>, Failure> {
    let Some(spec) = &a.fail else {
        return Ok(None);
    };
    let (node, us) = spec
        .rsplit_once('@')
        .ok_or_else(|| fail(format!("--fail {spec:?}: expected NODE@US, e.g. ep1@50")))?;
    let us: u64 = us
        .parse()
        .ok()
        .filter(|&u| u <= 1_000_000)
        .ok_or_else(|| fail(format!("--fail {spec:?}: US must be 0..=1000000 (µs)")))?;
    Ok(Some((node.to_string(), us)))
}

/// Runs `sim` up to `until` (or until idle if nothing is left), draining its trace
/// into `cap` every [`CHUNK_PS`].
fn advance(
    sim: &mut FabricSim,
    cap: &mut Option<SimCapture>,
    until: SimTime,
) -> Result<(), Failure> {
    let idle_end = until.as_ps() >= u64::MAX / 2;
    while sim.now() < until {
        if idle_end && sim.pending_events() == 0 {
            break;
        }
        let step = (until - sim.now()).as_ps().min(CHUNK_PS);
        if idle_end {
            run_idle_chunk(sim, SimDuration::from_ps(step));
        } else {
            sim.run_for(SimDuration::from_ps(step));
        }
        if let Some(c) = cap.as_mut() {
            if let Some(t) = sim.take_trace() {
                c.records(&t)?;
            }
        }
    }
    Ok(())
}

/// The DPC capability offset of every root port and switch downstream port.
fn dpc_ports(sim: &FabricSim) -> Vec<(pcielab_wire::Bdf, u16)> {
    let fabric = sim.fabric();
    (0..fabric.functions.len())
        .filter_map(|i| {
            let f = &fabric.functions[i];
            let cap = pcielab_config::caps::walk(f.config.bytes())
                .0
                .into_iter()
                .find(|c| c.extended && c.id == pcielab_config::caps::id::EXT_DPC)?;
            Some((
                fabric.bdf(pcielab_fabric::functional::FnId(i as u32)),
                cap.offset,
            ))
        })
        .collect()
}

/// --dpc: DPC Trigger Enable 10b (ERR_NONFATAL or ERR_FATAL), DPC Interrupt Enable,
/// Completion Control (Unsupported Request) on every port with DPC.
fn arm_dpc(sim: &mut FabricSim) {
    for (bdf, at) in dpc_ports(sim) {
        sim.cfg_write(bdf, at + 4, (0x0002 | 0x0004 | 0x0008) << 16);
    }
}

/// The host releases every triggered port (clears DPC Trigger and Interrupt Status).
fn release_dpc(sim: &mut FabricSim) {
    let ports: Vec<_> = sim.dpc_events().iter().map(|e| e.port).collect();
    for (bdf, at) in dpc_ports(sim) {
        if ports.contains(&bdf) {
            sim.cfg_write(bdf, at + 8, 0x9);
        }
    }
}

/// The "failure" object of a DMA row.
fn failure_report(
    sim: &FabricSim,
    node: &str,
    at: SimTime,
    recover_us: Option<u64>,
    recovery: Option<Result<Recovery, String>>,
) -> Value {
    let c = sim.counters();
    let downs: u64 = c.iter().map(|x| x.1.link_downs).sum();
    let drops: u64 = c.iter().map(|x| x.1.link_down_drops).sum();
    let dpc: Vec<Value> = sim
        .dpc_events()
        .iter()
        .map(|e| {
            json!({
                "at_ns": e.at.as_ps() as f64 / 1000.0, "port": e.port.to_string(),
                "reason": format!("{:?}", e.reason),
                "source": matches!(e.reason, DpcReason::NonFatalMessage | DpcReason::FatalMessage)
                    .then(|| e.source.to_string()),
            })
        })
        .collect();
    let ns = |t: SimTime| t.as_ps() as f64 / 1000.0;
    let recovery = recovery.map(|r| match r {
        Ok(r) => json!({
            "link_up_at_ns": ns(r.link_up_at), "restore_started_at_ns": ns(r.restore_started_at),
            "restored_at_ns": ns(r.restored_at), "config_writes": r.writes,
            "failed_writes": r.failed_writes,
        }),
        Err(e) => json!({ "error": e }),
    });
    json!({
        "node": node, "at_ns": ns(at), "recover_us": recover_us,
        "link_downs": downs, "tlps_dropped": drops, "dpc": dpc,
        "link_active_at_end": sim.link_active(node).unwrap_or(false),
        "recovery": recovery,
    })
}

/// Where the DMA workloads' I/O virtual addresses start with --iommu: above 4 GiB,
/// below the 64-bit BAR window (0x40_0000_0000), so they route to the root complex.
const IOVA_BASE: u64 = 0x10_0000_0000;

/// Runs `sim` until idle like `run_until_idle`, streaming its trace to `cap` every
/// [`CHUNK_PS`] of simulated time so that memory stays bounded.
fn run_captured(sim: &mut FabricSim, cap: &mut SimCapture, label: &str) -> Result<(), Failure> {
    begin_run(sim, cap, label)?;
    let limit = u64::MAX / 2;
    let mut until = sim.now().as_ps();
    while sim.pending_events() > 0 && until < limit {
        until = until.saturating_add(CHUNK_PS).min(limit);
        sim.run_until_idle(SimTime::from_ps(until));
        if let Some(t) = sim.take_trace() {
            cap.records(&t)?;
        }
    }
    end_run(sim, cap)
}

/// Starts a captured run: one interface per link direction of `sim`.
pub(crate) fn begin_run(sim: &FabricSim, cap: &mut SimCapture, label: &str) -> Result<(), Failure> {
    let names = sim.trace().map(|t| t.dir_names.clone()).unwrap_or_default();
    cap.begin_run(label, &names)
}

/// Ends a captured run: writes what the trace still holds.
fn end_run(sim: &mut FabricSim, cap: &mut SimCapture) -> Result<(), Failure> {
    if let Some(t) = sim.take_whole_trace() {
        cap.records(&t)?;
    }
    cap.end_run(sim.now().as_ps());
    Ok(())
}

/// An observer of a driver's runs (see `pcielab_fabric::drivers::Observer`) that
/// streams their trace into `cap`: one capture run per driver run, the trace taken at
/// every step so that memory stays bounded.
pub(crate) fn capture_to(
    cap: &mut SimCapture,
) -> impl FnMut(&mut FabricSim, RunStage<'_>) -> Result<(), String> + '_ {
    move |sim, stage| {
        match stage {
            RunStage::Begin(label) => begin_run(sim, cap, label),
            RunStage::Step => match sim.take_trace() {
                Some(t) => cap.records(&t),
                None => Ok(()),
            },
            RunStage::End => end_run(sim, cap),
        }
        .map_err(|Failure(m)| m)
    }
}

/// Most MMIO reads per endpoint of `--workload mmio-lat`.
const MAX_MMIO_READS: u64 = 100_000;

/// Simulated time between two trace drains of a captured run (20 µs).
const CHUNK_PS: u64 = 20_000_000;

fn op_name(op: Op) -> &'static str {
    match op {
        Op::Read => "read",
        Op::Write => "write",
        Op::Rw => "rw",
        Op::Atomic => "atomic",
    }
}

fn mmio_rows(ctx: &Ctx, a: &SimArgs, cap: &mut Option<SimCapture>) -> Result<Vec<Value>, Failure> {
    let mut sim = ctx.new_sim()?;
    if let Some(c) = cap.as_mut() {
        let size = a.size.unwrap_or(4).clamp(1, 4096);
        begin_run(&sim, c, &format!("mmio-lat {size} B"))?;
    }
    sim.run_for(SimDuration::from_us(2));
    let size = a.size.unwrap_or(4).clamp(1, 4096) as u32;
    let mut rows = Vec::new();
    let eps = ctx.endpoints();
    let reads = a.count.clamp(1, MAX_MMIO_READS);
    let mut progress = Progress::new("MMIO reads", eps.len() as u64 * reads);
    for (k, ep) in eps.into_iter().enumerate() {
        let Some(bar) = sim.bar(&ep, 0) else { continue };
        let (mut sum, mut min, mut max, mut n) = (0u64, u64::MAX, 0u64, 0u64);
        for i in 0..reads {
            progress.set(k as u64 * reads + i);
            if a.gap_us > 0 {
                sim.run_for(SimDuration::from_us(a.gap_us));
            }
            match sim
                .mmio_read(bar, size)
                .map_err(|e| fail(format!("{ep}: {e}")))?
            {
                HostRead::Done { issued, done, .. } => {
                    let l = (done - issued).as_ps();
                    sum += l;
                    min = min.min(l);
                    max = max.max(l);
                    n += 1;
                }
                other => return Err(fail(format!("{ep}: MMIO read failed: {other:?}"))),
            }
            if let (Some(c), Some(t)) = (cap.as_mut(), sim.take_trace()) {
                c.records(&t)?;
            }
        }
        let n = n.max(1);
        rows.push(json!({
            "workload": "mmio-lat", "device": ep, "size_B": size, "reads": n,
            "mean_latency_ns": sum as f64 / n as f64 / 1000.0,
            "min_latency_ns": min as f64 / 1000.0, "max_latency_ns": max as f64 / 1000.0,
        }));
    }
    if let Some(c) = cap.as_mut() {
        end_run(&mut sim, c)?;
    }
    Ok(rows)
}

/// Enumerates again, this time over the links, and reports what host software found
/// and did; the tree must be the one the simulator found through ECAM when it was built.
fn enumerate_rows(ctx: &Ctx, cap: &mut Option<SimCapture>) -> Result<Vec<Value>, Failure> {
    use pcielab_fabric::host::enumerate::{enumerate, HostConfig};
    let mut sim = ctx.new_sim()?;
    if let Some(c) = cap.as_mut() {
        begin_run(&sim, c, "enumerate")?;
    }
    sim.run_for(SimDuration::from_us(2)); // links up
    let ecam = sim.tree().clone();
    let t0 = sim.now();
    let hc = HostConfig {
        mrrs: Some(ctx.cfg.mrrs),
        ..HostConfig::default()
    };
    let mut bus = sim.wire_bus();
    let tree = enumerate(&mut bus, &hc).map_err(|e| fail(format!("enumeration: {e}")))?;
    let stats = bus.stats();
    if let Some(e) = bus.error() {
        return Err(fail(format!("enumeration: {e}")));
    }
    let took = sim.now() - t0;
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    if let Some(c) = cap.as_mut() {
        end_run(&mut sim, c)?;
    }
    // The whole tree, SR-IOV VFs included (this enumeration disables and enables
    // them again, as Linux does when sriov_numvfs is written anew).
    let same =
        tree.functions.len() == ecam.functions.len()
            && tree.functions.iter().zip(&ecam.functions).all(|(a, b)| {
                (a.bdf, &a.bars, a.buses, a.vf_of) == (b.bdf, &b.bars, b.buses, b.vf_of)
            });
    let mut rows: Vec<Value> = tree
        .functions
        .iter()
        .map(|f| {
            let kind = match (f.port_type, f.header_type & 0x7f) {
                (Some(p), _) => format!("{p:?}"),
                (None, 1) => "Bridge".into(),
                (None, _) if f.class_code >> 8 == 0x0600 => "HostBridge".into(),
                (None, _) => "Function".into(),
            };
            let bars: Vec<String> = f
                .bars
                .iter()
                .map(|b| format!("{}@{:#x}", b.index, b.address))
                .collect();
            json!({
                "workload": "enumerate", "bdf": f.bdf.to_string(),
                "parent": f.parent.map(|p| p.to_string()),
                "type": kind,
                "vendor_id": format!("{:04x}", f.vendor_id),
                "device_id": format!("{:04x}", f.device_id),
                "class": format!("{:06x}", f.class_code),
                "bars": bars.join(" "),
            })
        })
        .collect();
    rows.push(json!({
        "workload": "enumerate-total", "functions": tree.functions.len(),
        "config_reads": stats.config_reads, "config_writes": stats.config_writes,
        "unsupported": stats.unsupported, "timeouts": stats.timeouts,
        "memory_writes": stats.memory_writes,
        "time_us": took.as_ps() as f64 / 1e6,
        "same_as_ecam": same,
    }));
    Ok(rows)
}

fn fmt_table(rows: &[Value]) -> String {
    let mut s = String::new();
    let dma: Vec<&Value> = rows.iter().filter(|r| r["workload"] == "dma").collect();
    if !dma.is_empty() {
        s.push_str(
            "DMA bandwidth after the first window; model: the spec-mode analytic bound of the\n",
        );
        s.push_str(
            "narrowest link on the device's path (reached when enough DMAs are in flight)\n",
        );
        s.push_str(&format!(
            "{:<10} {:<6} {:>8} {:>10} {:>10} {:>12} {:>10} {:>8} {:>7}\n",
            "device",
            "op",
            "size_B",
            "Gb/s",
            "model",
            "mean_lat_ns",
            "max_lat_ns",
            "replays",
            "failed"
        ));
        for r in dma {
            let model = r["model_gbps"]
                .as_f64()
                .map_or("-".to_string(), |m| format!("{m:.3}"));
            let gbps = r["gbps"]
                .as_f64()
                .map_or("-".to_string(), |g| format!("{g:.3}"));
            s.push_str(&format!(
                "{:<10} {:<6} {:>8} {:>10} {:>10} {:>12.1} {:>10.1} {:>8} {:>7}\n",
                r["device"].as_str().unwrap_or(""),
                r["op"].as_str().unwrap_or(""),
                r["size_B"].as_u64().unwrap_or(0),
                gbps,
                model,
                r["mean_latency_ns"].as_f64().unwrap_or(0.0),
                r["max_latency_ns"].as_f64().unwrap_or(0.0),
                r["replays"].as_u64().unwrap_or(0),
                r["failed"].as_u64().unwrap_or(0)
            ));
        }
    }
    if let [r] = rows {
        if r["workload"] == "dma" {
            let f = |k: &str| r[k].as_f64().unwrap_or(0.0);
            s.push_str(&format!(
                "latency: min {:.1}, median {:.1}, p90 {:.1}, p99 {:.1}, p99.9 {:.1}, max {:.1} ns over {} DMAs\n",
                f("min_latency_ns"),
                f("median_latency_ns"),
                f("p90_latency_ns"),
                f("p99_latency_ns"),
                f("p999_latency_ns"),
                f("max_latency_ns"),
                r["dmas"].as_u64().unwrap_or(0)
            ));
        }
        if let Some(m) = r["failure"].as_object() {
            let n = |k: &str| m.get(k).and_then(Value::as_u64).unwrap_or(0);
            s.push_str(&format!(
                "\nFailure: the link above {} went down at {:.1} ns ({} link(s) down in all, {} TLPs dropped); {} of {} DMAs failed; link {} at the end\n",
                m.get("node").and_then(Value::as_str).unwrap_or(""),
                m.get("at_ns").and_then(Value::as_f64).unwrap_or(0.0),
                n("link_downs"),
                n("tlps_dropped"),
                r["failed"].as_u64().unwrap_or(0),
                r["dmas"].as_u64().unwrap_or(0),
                if m.get("link_active_at_end").and_then(Value::as_bool).unwrap_or(false) {
                    "up"
                } else {
                    "down"
                }
            ));
            if let Some(rc) = m.get("recovery").and_then(Value::as_object) {
                let t = |k: &str| rc.get(k).and_then(Value::as_f64).unwrap_or(0.0);
                match rc.get("error").and_then(Value::as_str) {
                    Some(e) => s.push_str(&format!("Recovery failed: {e}\n")),
                    None => s.push_str(&format!(
                        "Recovery: link up at {:.1} ns; configuration restored from {:.1} to {:.1} ns ({} writes, {} failed); DMA resumed at {}\n",
                        t("link_up_at_ns"),
                        t("restore_started_at_ns"),
                        t("restored_at_ns"),
                        rc.get("config_writes").and_then(Value::as_u64).unwrap_or(0),
                        rc.get("failed_writes").and_then(Value::as_u64).unwrap_or(0),
                        m.get("resumed_at_ns")
                            .and_then(Value::as_f64)
                            .map_or("never".to_string(), |x| format!("{x:.1} ns"))
                    )),
                }
            }
            for e in m.get("dpc").and_then(Value::as_array).into_iter().flatten() {
                s.push_str(&format!(
                    "DPC: port {} triggered at {:.1} ns ({}{})\n",
                    e["port"].as_str().unwrap_or(""),
                    e["at_ns"].as_f64().unwrap_or(0.0),
                    e["reason"].as_str().unwrap_or(""),
                    e["source"]
                        .as_str()
                        .map(|x| format!(", from {x}"))
                        .unwrap_or_default()
                ));
            }
        }
        if let Some(m) = r["iommu"].as_object() {
            let n = |k: &str| m.get(k).and_then(Value::as_u64).unwrap_or(0);
            s.push_str(&format!(
                "\nIOMMU: {} IOTLB hits, {} misses (page walks), {} faults, {} translation requests\n",
                n("iotlb_hits"),
                n("iotlb_misses"),
                n("faults"),
                n("translation_requests")
            ));
        }
        if let Some(m) = r["ats"].as_object() {
            let n = |k: &str| m.get(k).and_then(Value::as_u64).unwrap_or(0);
            s.push_str(&format!(
                "ATS ({}): {} ATC hits, {} misses, {} translation requests, {} refused, {} evictions\n",
                r["device"].as_str().unwrap_or(""),
                n("atc_hits"),
                n("atc_misses"),
                n("translation_requests"),
                n("denied"),
                n("evictions")
            ));
            if n("page_requests") > 0 {
                s.push_str(&format!(
                    "PRI ({}): {} page requests, {} pages made resident\n",
                    r["device"].as_str().unwrap_or(""),
                    n("page_requests"),
                    n("pages_made_resident")
                ));
            }
        }
        if let Some(links) = r["links"].as_array() {
            s.push_str("\nPer link direction (whole run)\n");
            s.push_str(&format!(
                "{:<14} {:>8} {:>12} {:>7} {:>7} {:>7} {:>8} {:>6}\n",
                "link", "TLPs", "payload_B", "ACKs", "FC", "NAKs", "replays", "util"
            ));
            for l in links {
                s.push_str(&format!(
                    "{:<14} {:>8} {:>12} {:>7} {:>7} {:>7} {:>8} {:>5.1}%\n",
                    l["link"].as_str().unwrap_or(""),
                    l["tlps"].as_u64().unwrap_or(0),
                    l["payload_bytes"].as_u64().unwrap_or(0),
                    l["acks"].as_u64().unwrap_or(0),
                    l["fc_dllps"].as_u64().unwrap_or(0),
                    l["naks"].as_u64().unwrap_or(0),
                    l["replays"].as_u64().unwrap_or(0),
                    l["utilization"].as_f64().unwrap_or(0.0) * 100.0
                ));
            }
        }
    }
    let found: Vec<&Value> = rows
        .iter()
        .filter(|r| r["workload"] == "enumerate")
        .collect();
    if !found.is_empty() {
        s.push_str("Enumeration over the links (CfgRd/CfgWr TLPs): scan, BAR sizing, assignment\n");
        s.push_str(&format!(
            "{:<8} {:<8} {:<20} {:<9} {:<6} {}\n",
            "bdf", "parent", "type", "id", "class", "BARs (index@address)"
        ));
        for r in found {
            let line = format!(
                "{:<8} {:<8} {:<20} {:<9} {:<6} {}",
                r["bdf"].as_str().unwrap_or(""),
                r["parent"].as_str().unwrap_or("-"),
                r["type"].as_str().unwrap_or(""),
                format!(
                    "{}:{}",
                    r["vendor_id"].as_str().unwrap_or(""),
                    r["device_id"].as_str().unwrap_or("")
                ),
                r["class"].as_str().unwrap_or(""),
                r["bars"].as_str().unwrap_or("")
            );
            s.push_str(line.trim_end());
            s.push('\n');
        }
    }
    for r in rows.iter().filter(|r| r["workload"] == "enumerate-total") {
        s.push_str(&format!(
            "\n{} functions; {} configuration reads and {} writes ({} Unsupported Request, \
             {} timeouts), {} memory writes, in {:.3} us of simulated time; same tree as \
             through ECAM: {}\n",
            r["functions"],
            r["config_reads"],
            r["config_writes"],
            r["unsupported"],
            r["timeouts"],
            r["memory_writes"],
            r["time_us"].as_f64().unwrap_or(0.0),
            if r["same_as_ecam"] == true {
                "yes"
            } else {
                "NO"
            }
        ));
    }
    let lat: Vec<&Value> = rows
        .iter()
        .filter(|r| r["workload"] == "mmio-lat")
        .collect();
    if !lat.is_empty() {
        if !s.is_empty() {
            s.push('\n');
        }
        s.push_str("MMIO read latency (host → BAR 0 → host)\n");
        s.push_str(&format!(
            "{:<10} {:>8} {:>8} {:>10} {:>10} {:>10}\n",
            "device", "size_B", "reads", "mean_ns", "min_ns", "max_ns"
        ));
        for r in lat {
            s.push_str(&format!(
                "{:<10} {:>8} {:>8} {:>10.1} {:>10.1} {:>10.1}\n",
                r["device"].as_str().unwrap_or(""),
                r["size_B"].as_u64().unwrap_or(0),
                r["reads"].as_u64().unwrap_or(0),
                r["mean_latency_ns"].as_f64().unwrap_or(0.0),
                r["min_latency_ns"].as_f64().unwrap_or(0.0),
                r["max_latency_ns"].as_f64().unwrap_or(0.0)
            ));
        }
    }
    s
}

/// Decimals of a CSV column holding floats: the precision the table shows.
fn csv_decimals(col: &str) -> Option<usize> {
    match col {
        "gbps" | "model_gbps" | "time_us" => Some(3),
        c if c.ends_with("_ns") => Some(1),
        _ => None,
    }
}

fn fmt_csv(rows: &[Value]) -> String {
    let enumerate = [
        "workload",
        "bdf",
        "parent",
        "type",
        "vendor_id",
        "device_id",
        "class",
        "bars",
        "functions",
        "config_reads",
        "config_writes",
        "unsupported",
        "timeouts",
        "memory_writes",
        "time_us",
        "same_as_ecam",
    ];
    let dma = [
        "workload",
        "device",
        "op",
        "size_B",
        "gbps",
        "model_gbps",
        "mean_latency_ns",
        "min_latency_ns",
        "max_latency_ns",
        "replays",
        "dmas",
        "failed",
        "reads",
        "median_latency_ns",
        "p99_latency_ns",
    ];
    let cols: &[&str] = if rows.iter().any(|r| {
        r["workload"]
            .as_str()
            .is_some_and(|w| w.starts_with("enumerate"))
    }) {
        &enumerate
    } else {
        &dma
    };
    let mut s = cols.join(",");
    s.push('\n');
    for r in rows {
        let f: Vec<String> = cols
            .iter()
            .map(|c| match (&r[*c], csv_decimals(c)) {
                (Value::Null, _) => String::new(),
                (Value::String(x), _) => x.clone(),
                (Value::Number(n), Some(d)) if n.is_f64() => {
                    format!("{:.*}", d, n.as_f64().unwrap_or(0.0))
                }
                (v, _) => v.to_string(),
            })
            .collect();
        s.push_str(&f.join(","));
        s.push('\n');
    }
    s
}

/// The built-in default scenario.
const DEFAULT_TOPOLOGY: &str = include_str!("../../../examples/topologies/sim-default.toml");
const DEFAULT_NAME: &str = "built-in default (examples/topologies/sim-default.toml)";

fn topo_name(a: &SimArgs) -> String {
    match (&a.file, &a.example) {
        (_, Some(name)) => crate::examples::label(name),
        (Some(f), None) => f.display().to_string(),
        (None, None) if a.gen.is_some() || a.lanes.is_some() => {
            let (g, n) = (a.gen.unwrap_or(3), a.lanes.unwrap_or(8));
            format!("one link from --gen/--lanes (rc.0 - mem0, Gen{g} x{n})")
        }
        (None, None) => DEFAULT_NAME.to_string(),
    }
}

/// The topology of `--gen G --lanes N`: a root complex with one port and one psmem
/// endpoint, mem0, on a Gen G xN link.
fn one_link(gen: u8, lanes: u8) -> Result<String, Failure> {
    if !(1..=6).contains(&gen) {
        return Err(fail(format!("--gen {gen}: allowed 1..=6")));
    }
    if ![1, 2, 4, 8, 12, 16, 32].contains(&lanes) {
        return Err(fail(format!(
            "--lanes {lanes}: allowed 1, 2, 4, 8, 12, 16, 32"
        )));
    }
    Ok(format!(
        "seed = 1\n\
         [[node]]\nname = \"rc\"\nkind = \"root-complex\"\nports = 1\n\
         [[node]]\nname = \"mem0\"\nkind = \"psmem\"\n\
         [[link]]\nup = \"rc.0\"\ndown = \"mem0\"\ngen = {gen}\nwidth = {lanes}\n"
    ))
}

/// Runs `pcielab sim`.
/// The simulator's settings from the flags, with the host layers (profile, the file's
/// `[host]` knobs, host flags) applied for `topo`.
pub(crate) fn build_config(a: &SimArgs, topo: &Topology) -> Result<SimConfig, Failure> {
    let cfg = SimConfig {
        seed: a.seed,
        mps: a.mps,
        mrrs: a.mrrs,
        rcb: a.rcb,
        replay_buffer: a.replay_buffer,
        burst: a.burst,
        switch_latency: SimDuration::from_ns(a.switch_ns),
        propagation: SimDuration::from_ns(a.prop_ns),
        fc_update_period: SimDuration::from_ps(a.fc_update_us.saturating_mul(1_000_000)),
        device_ready_wait: SimDuration::from_ps(a.ready_wait_us.saturating_mul(1_000_000)),
        device_ready_time: SimDuration::from_ps(a.device_ready_us.saturating_mul(1_000_000)),
        error_rate: a.error_rate,
        poison_rate: a.poison_rate,
        ecrc: a.ecrc,
        switch_error_rate: a.switch_error_rate,
        ber: a.ber,
        cut_through: a.cut_through,
        p2p_split: a.p2p_split,
        acs: a.acs,
        iommu: a.iommu.then(|| IommuConfig {
            page_size: a.iommu_page,
            iotlb_entries: a.iotlb_entries,
            miss_latency: SimDuration::from_ns(a.page_walk_ns),
            pasid: a.pasid.is_some(),
            ..IommuConfig::default()
        }),
        ats: a.ats,
        atc_entries: a.atc_entries,
        pri: a.pri,
        page_fault_latency: SimDuration::from_ps(a.page_fault_us.saturating_mul(1_000_000)),
        dma_tags: a.tags,
        aspm: a.aspm.bits(),
        aspm_l1ss: a.l1ss,
        ..SimConfig::default()
    };
    let mut cfg = cfg;
    let flags_iommu = cfg.iommu;
    a.host.apply(topo, &mut cfg).map_err(fail)?;
    if flags_iommu.is_some() {
        // --iommu and its flags are explicit: they win over the host layers.
        cfg.iommu = flags_iommu;
    }
    Ok(cfg)
}

pub fn run(a: &SimArgs) -> Result<(), Failure> {
    check_flags(a)?;
    if a.workload == Workload::Nic {
        return crate::sim_nic::run(a);
    }
    if a.workload == Workload::Sriov {
        return crate::sim_sriov::run(a);
    }
    let reg = KindRegistry::builtin();
    let topo = match (&a.file, &a.example) {
        (_, Some(name)) => Topology::parse(crate::examples::get(name)?.text, &topo_name(a), &reg),
        (Some(f), None) => Topology::load(f, &reg),
        (None, None) if a.gen.is_some() || a.lanes.is_some() => {
            let text = one_link(a.gen.unwrap_or(3), a.lanes.unwrap_or(8))?;
            Topology::parse(&text, &topo_name(a), &reg)
        }
        (None, None) => Topology::parse(DEFAULT_TOPOLOGY, DEFAULT_NAME, &reg),
    }
    .map_err(|e| fail(e.to_string()))?;
    if a.window == 0 {
        return Err(fail("--window 0: at least one DMA must be in flight"));
    }
    match (a.workload, a.size) {
        (_, Some(0)) => return Err(fail("--size 0: allowed 1 or more bytes")),
        (Workload::MmioLat, Some(s)) if s > 4096 => {
            return Err(fail(format!("--size {s}: an MMIO read is 1..=4096 bytes")))
        }
        (_, Some(s)) if s > 1 << 30 => {
            return Err(fail(format!("--size {s}: allowed 1..=1073741824 bytes")))
        }
        _ => {}
    }
    if a.count == 0 {
        return Err(fail("--count 0: allowed 1 or more"));
    }
    if a.workload == Workload::MmioLat && a.count > MAX_MMIO_READS {
        return Err(fail(format!(
            "--count {}: --workload mmio-lat makes at most {MAX_MMIO_READS} reads per endpoint",
            a.count
        )));
    }
    let tlps = match a.workload {
        Workload::Inject => {
            if a.out_format() == Format::Csv {
                return Err(fail("--csv: --workload inject prints a table or --json"));
            }
            crate::sim_inject::parse_tlps(&a.tlps)?
        }
        _ => Vec::new(),
    };
    if a.peer.is_some() {
        // (--peer with another workload: check_flags.)
        if a.iommu {
            return Err(fail(
                "--peer with --iommu: the IOMMU does not translate peer-to-peer requests",
            ));
        }
    }
    if a.op == Op::Atomic && !matches!(a.size, None | Some(4) | Some(8)) {
        return Err(fail(format!(
            "--size {}: an atomic counter is 4 or 8 bytes",
            a.size.unwrap_or(0)
        )));
    }
    if a.pri && !a.ats {
        return Err(fail(
            "--pri needs --ats (page requests follow refused translations)",
        ));
    }
    if a.ats && !a.iommu {
        return Err(fail(
            "--ats needs --iommu (the IOMMU is the translation agent that answers ATS)",
        ));
    }
    if let Some(p) = a.pasid {
        if !a.iommu {
            return Err(fail(
                "--pasid needs --iommu (the IOMMU translates by the PASID's table)",
            ));
        }
        if p >> 20 != 0 {
            return Err(fail(format!("--pasid {p}: allowed 0..=1048575 (20 bits)")));
        }
    }
    if a.page_fault_us > 1_000_000 {
        return Err(fail(format!(
            "--page-fault-us {}: allowed 0..=1000000",
            a.page_fault_us
        )));
    }
    if a.recover_us.is_some() && a.fail.is_none() {
        return Err(fail("--recover-us needs --fail NODE@US"));
    }
    if a.recover_us.is_some_and(|r| r > 1_000_000) {
        return Err(fail("--recover-us: allowed 0..=1000000 (µs)"));
    }
    if a.device_ready_us > 1_000_000 {
        return Err(fail(format!(
            "--device-ready-us {}: allowed 0..=1000000 (µs)",
            a.device_ready_us
        )));
    }
    if a.ready_wait_us > 1_000_000 {
        return Err(fail(format!(
            "--ready-wait-us {}: allowed 0..=1000000 (µs)",
            a.ready_wait_us
        )));
    }
    parse_fail(a)?;
    if a.l1ss && a.aspm.bits() & 2 == 0 {
        return Err(fail(
            "--l1ss needs --aspm l1 or l0s-l1 (the substates are part of L1)",
        ));
    }
    if a.gap_us > 1_000_000 {
        return Err(fail(format!("--gap-us {}: allowed 0..=1000000", a.gap_us)));
    }
    let mut cfg = build_config(a, &topo)?;
    cfg.trace = a.captures();
    let ctx = Ctx { topo, reg, cfg };
    // Validates parameters and the topology once, with a clear message.
    let probe = ctx.new_sim()?;
    if let Some((node, _)) = parse_fail(a)? {
        probe
            .link_active(&node)
            .map_err(|e| fail(format!("--fail: {e}")))?;
    }
    drop(probe);
    let eps = ctx.endpoints();
    if eps.is_empty() {
        return Err(fail(format!(
            "{}: the topology has no endpoint to run a workload on",
            topo_name(a)
        )));
    }
    let device = match &a.device {
        Some(d) if eps.contains(d) => d.clone(),
        Some(d) => {
            return Err(fail(format!(
                "--device {d:?}: not an endpoint of the topology; endpoints: {}",
                eps.join(", ")
            )))
        }
        None => eps[0].clone(),
    };
    let aspm = match a.aspm {
        Aspm::Off => String::new(),
        x => format!(
            ", ASPM {}",
            x.to_possible_value()
                .map(|v| v.get_name().to_string())
                .unwrap_or_default()
        ),
    };
    let iommu = if a.iommu {
        format!(
            ", IOMMU (IOTLB {}, walk {} ns, page {} B{})",
            a.iotlb_entries,
            a.page_walk_ns,
            a.iommu_page,
            match (a.ats, a.pri, a.pasid) {
                (true, true, _) => format!(
                    ", ATS with ATC {}, PRI with {} us page faults",
                    a.atc_entries, a.page_fault_us
                ),
                (true, false, _) => format!(", ATS with ATC {}", a.atc_entries),
                _ => String::new(),
            } + &a.pasid.map_or(String::new(), |p| format!(", PASID {p}"))
        )
    } else {
        String::new()
    };
    let header = format!(
        "{}: MPS {} MRRS {} RCB {}, switch {} ns, root complex {} ns, memory {} ns, host {}, window {}, tags {}, seed {}{aspm}{iommu}\n\n",
        topo_name(a), a.mps, a.mrrs, a.rcb, a.switch_ns, ctx.cfg.rc_latency.as_ns_f64(),
        ctx.cfg.mem_latency.as_ns_f64(), a.host.profile_name(&ctx.topo), a.window, a.tags,
        a.seed.unwrap_or(ctx.topo.seed)
    );
    let comment = format!(
        "pcielab sim, workload {:?}, topology {}\n{}",
        a.workload,
        header.trim_end(),
        topology_summary(&ctx.topo)
    );
    let mut cap = a.open_capture(&comment)?;
    let mut rows = Vec::new();
    match a.workload {
        Workload::Dma => rows.push(dma_row(
            &ctx,
            a,
            &device,
            a.op,
            a.size.unwrap_or(if a.op == Op::Atomic { 8 } else { 4096 }),
            &mut cap,
        )?),
        Workload::MmioLat => rows = mmio_rows(&ctx, a, &mut cap)?,
        Workload::Enumerate => rows = enumerate_rows(&ctx, &mut cap)?,
        Workload::Nic => unreachable!("--workload nic returns at the start of run"),
        Workload::Sriov => unreachable!("--workload sriov returns at the start of run"),
        Workload::Inject => {
            let mut sim = ctx.new_sim()?;
            sim.run_for(SimDuration::from_us(2)); // links up
            let label = format!("inject from {device}");
            rows = crate::sim_inject::inject_rows(&mut sim, &device, tlps, |sim| {
                match cap.as_mut() {
                    None => {
                        sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
                        Ok(())
                    }
                    Some(c) => run_captured(sim, c, &label),
                }
            })?;
        }
        Workload::Sweep => {
            let sizes = parse_sizes(&a.sizes)?;
            let targets: Vec<String> = match &a.device {
                Some(_) => vec![device.clone()],
                None => eps.clone(),
            };
            let total = targets.len() * sizes.len() * 2 + 1;
            let mut bar = Progress::new("sweep", total as u64);
            let mut done = 0;
            for ep in &targets {
                for op in [Op::Read, Op::Write] {
                    for &size in &sizes {
                        rows.push(dma_row(&ctx, a, ep, op, size, &mut cap)?);
                        done += 1;
                        bar.set(done);
                    }
                }
            }
            let lat_args = SimArgs {
                size: Some(4),
                count: 10,
                ..a.clone_for_lat()
            };
            rows.extend(mmio_rows(&ctx, &lat_args, &mut cap)?);
            bar.finish();
        }
    }
    let captured = match cap {
        Some(c) => Some(c.finish()?),
        None => None,
    };
    let rows_for_warnings: Vec<Value> = rows
        .iter()
        .filter(|r| r["workload"] == "dma")
        .map(|r| {
            json!({
                "workload": "dma", "device": r["device"], "op": r["op"],
                "size_B": r["size_B"], "dmas": r["dmas"], "failed": r["failed"],
                "gbps": r["gbps"],
            })
        })
        .collect();
    let out = if a.out_format() == Format::Json {
        let mut s = serde_json::to_string_pretty(&Value::Array(rows)).unwrap_or_default();
        s.push('\n');
        s
    } else if a.out_format() == Format::Csv {
        fmt_csv(&rows)
    } else if a.workload == Workload::Inject {
        header + &crate::sim_inject::fmt_inject(&rows)
    } else {
        header + &fmt_table(&rows)
    };
    print!("{out}");
    for w in failure_warnings(&rows_for_warnings) {
        eprintln!("{w}");
    }
    if rows_for_warnings.iter().any(|r| r["gbps"].is_null()) {
        eprintln!(
            "pcielab: note: a DMA stream of no more DMAs than --window ({}) has no steady \
             state, so no rate is shown (Gb/s '-', null in JSON); raise --count above the \
             window for one",
            a.window
        );
    }
    if let Some(line) = captured {
        eprintln!("{line}");
    }
    Ok(())
}

/// One stderr line per DMA row in which operations failed: a run with failures says
/// so whatever the output format.
fn failure_warnings(rows: &[Value]) -> Vec<String> {
    rows.iter()
        .filter(|r| r["workload"] == "dma" && r["failed"].as_u64().unwrap_or(0) > 0)
        .map(|r| {
            format!(
                "pcielab: warning: {} {} {} B: {} of {} DMAs failed (poisoned or error \
                 completions, completion timeouts or a link failure); their bytes and \
                 latencies are included in Gb/s and the latency columns",
                r["device"].as_str().unwrap_or(""),
                r["op"].as_str().unwrap_or(""),
                r["size_B"].as_u64().unwrap_or(0),
                r["failed"].as_u64().unwrap_or(0),
                r["dmas"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// Nodes and links of the topology, one per line, for the capture's comment block.
fn topology_summary(t: &Topology) -> String {
    let mut s = String::new();
    for n in &t.nodes {
        s.push_str(&format!("node {} ({})\n", n.name, n.kind));
    }
    for l in &t.links {
        let name = |id: pcielab_fabric::topology::NodeId| {
            t.nodes.get(id.0 as usize).map_or("?", |n| n.name.as_str())
        };
        s.push_str(&format!(
            "link {}.{} - {} {} x{}\n",
            name(l.up),
            l.up_port,
            name(l.down),
            l.gen,
            l.width
        ));
    }
    s
}

impl SimArgs {
    fn clone_for_lat(&self) -> SimArgs {
        SimArgs {
            file: self.file.clone(),
            example: self.example.clone(),
            gen: self.gen,
            lanes: self.lanes,
            workload: self.workload,
            nic: self.nic,
            vfs: self.vfs,
            vm: self.vm,
            eth: self.eth,
            dpdk: self.dpdk,
            packets: self.packets,
            plot: self.plot.clone(),
            device: self.device.clone(),
            op: self.op,
            size: self.size,
            sizes: self.sizes.clone(),
            window: self.window,
            tags: self.tags,
            count: self.count,
            pattern: self.pattern,
            region: self.region,
            mps: self.mps,
            mrrs: self.mrrs,
            rcb: self.rcb,
            switch_ns: self.switch_ns,
            host: self.host.clone(),
            prop_ns: self.prop_ns,
            replay_buffer: self.replay_buffer,
            burst: self.burst,
            fc_update_us: self.fc_update_us,
            error_rate: self.error_rate,
            poison_rate: self.poison_rate,
            ecrc: self.ecrc,
            switch_error_rate: self.switch_error_rate,
            ber: self.ber,
            cut_through: self.cut_through,
            aspm: self.aspm,
            gap_us: self.gap_us,
            p2p_split: self.p2p_split,
            peer: None,
            tlps: Vec::new(),
            acs: self.acs,
            iommu: self.iommu,
            iotlb_entries: self.iotlb_entries,
            page_walk_ns: self.page_walk_ns,
            iommu_page: self.iommu_page,
            ats: self.ats,
            pasid: self.pasid,
            atc_entries: self.atc_entries,
            pri: self.pri,
            page_fault_us: self.page_fault_us,
            fail: None,
            recover_us: None,
            ready_wait_us: 100_000,
            device_ready_us: 0,
            l1ss: self.l1ss,
            dpc: self.dpc,
            seed: self.seed,
            format: self.format,
            json: self.json,
            csv: self.csv,
            pcap: self.pcap.clone(),
            pcap_max: self.pcap_max,
            trace: self.trace.clone(),
            given: self.given.clone(),
        }
    }

    /// Whether `flag` (its long name) was given on the command line.
    pub(crate) fn given(&self, flag: &str) -> bool {
        self.given.iter().any(|g| g == flag)
    }

    /// Whether --pcap or --trace asks for a capture (the simulation must trace).
    pub(crate) fn captures(&self) -> bool {
        self.pcap.is_some() || self.trace.is_some()
    }

    /// The capture --pcap and --trace ask for (limited by --pcap-max), `comment` in
    /// its header; `None` without them.
    pub(crate) fn open_capture(&self, comment: &str) -> Result<Option<SimCapture>, Failure> {
        let mut cap = SimCapture::open(self.pcap.as_deref(), self.trace.as_deref(), comment)?;
        if let Some(c) = cap.as_mut() {
            c.set_pcap_max(self.pcap_max);
        }
        Ok(cap)
    }
}

/// The flags that only some workloads use, each with those workloads; every other
/// flag (topology, link and fabric, errors, IOMMU, host, output) applies to them all.
const WORKLOAD_FLAGS: &[(&str, &[Workload])] = {
    use Workload::*;
    &[
        ("nic", &[Nic]),
        ("eth", &[Nic]),
        ("dpdk", &[Nic]),
        ("packets", &[Nic]),
        ("plot", &[Nic]),
        ("vfs", &[Sriov]),
        ("vm", &[Sriov]),
        ("device", &[Dma, Sweep, Inject, Nic, Sriov]),
        ("op", &[Dma, Sriov]),
        ("size", &[Dma, MmioLat]),
        ("sizes", &[Sweep, Nic, Sriov]),
        ("window", &[Dma, Sweep]),
        ("count", &[Dma, MmioLat, Sweep, Sriov]),
        ("pattern", &[Dma, Sweep]),
        ("region", &[Dma, Sweep]),
        ("gap-us", &[MmioLat, Sweep]),
        ("tlp", &[Inject]),
        ("peer", &[Dma]),
        ("fail", &[Dma]),
        ("recover-us", &[Dma]),
        ("dpc", &[Dma, Sweep]),
    ]
};

fn workload_name(w: Workload) -> String {
    w.to_possible_value()
        .map(|v| v.get_name().to_string())
        .unwrap_or_default()
}

/// Refuses a flag given for a workload that does not use it (it would be ignored).
fn check_flags(a: &SimArgs) -> Result<(), Failure> {
    if a.op == Op::Atomic && a.workload != Workload::Dma {
        return Err(fail("--op atomic works with --workload dma"));
    }
    for (flag, uses) in WORKLOAD_FLAGS {
        if a.given(flag) && !uses.contains(&a.workload) {
            let names: Vec<String> = uses.iter().map(|&w| workload_name(w)).collect();
            return Err(fail(format!(
                "--{flag} does not apply to --workload {}: it is used by --workload {}",
                workload_name(a.workload),
                names.join(", ")
            )));
        }
    }
    if a.given("pcap-max") && a.pcap.is_none() {
        return Err(fail(
            "--pcap-max limits the file of --pcap FILE, which is not given",
        ));
    }
    Ok(())
}
