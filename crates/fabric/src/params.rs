//! The simulator's parameters: [`SimConfig`] and the types its fields use. Plain data,
//! below every module that reads or sets them (the topology loader, the host model's
//! knobs and profiles, the timed simulator), so none of those depends on another to
//! name them. Their defaults and behaviour live with the code that uses them
//! (`timed`, `host::model`).

use pcielab_sim::SimDuration;

/// Simulator parameters. Defaults are documented on each field.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// RNG seed (error injection, endpoint RNG streams). Default: the topology's seed.
    pub seed: Option<u64>,
    /// Max_Payload_Size in bytes. Default 256.
    pub mps: u16,
    /// Max_Read_Request_Size in bytes. Default 512.
    pub mrrs: u16,
    /// Read Completion Boundary in bytes. Default 64.
    pub rcb: u16,
    /// Replay buffer capacity in TLPs per link direction. Default 64.
    pub replay_buffer: usize,
    /// Switch forwarding latency: after the whole TLP is received (store-and-forward),
    /// or after its header with `cut_through`. 0..=1 s. Default 150 ns.
    pub switch_latency: SimDuration,
    /// Switches forward cut-through (from the header) instead of store-and-forward.
    /// Default false.
    pub cut_through: bool,
    /// Root-complex latency, charged once per crossing: to every TLP that enters the
    /// root complex from a link and to every request the host sends down; not to a
    /// completion the root complex makes from host memory. So a DMA read pays it once
    /// (its request on the way in; memory then answers) and an MMIO read twice (its
    /// request out, its completion in). Default 100 ns.
    pub rc_latency: SimDuration,
    /// Host memory access: fixed part. Default 80 ns.
    pub mem_latency: SimDuration,
    /// Host memory access: per 64-byte cache line. Default 0.
    pub mem_per_line: SimDuration,
    /// Seeded extra latency of each DMA read's memory access, drawn once per read
    /// request (all its completions wait for it) on top of `mem_latency` or
    /// `llc_hit_latency`: the host's latency tail (see [`crate::host::model`]).
    /// Default zero (no draw is made).
    pub mem_tail: LatencyDist,
    /// Seeded extra latency of each host MMIO read (the CPU and uncore side of the
    /// load, on top of `host.mmio_read`): the host's MMIO tail. Only reads are delayed,
    /// never posted writes, so PCIe ordering holds. Default zero (no draw is made).
    pub mmio_tail: LatencyDist,
    /// CPU and driver time of host software. Default all zero.
    pub host: HostCosts,
    /// State of the last-level cache for DMA buffers (with `llc_lines` > 0): `Warm`
    /// asks workloads to warm their buffers first, `Thrash` makes every DMA read
    /// miss. Default `Cold`.
    pub cache: CacheState,
    /// Last-level-cache lines that DMA writes allocate into (DDIO) and DMA reads fill
    /// (FIFO replacement); 0 disables the cache model. Default 0.
    pub llc_lines: usize,
    /// Latency of a DMA read whose lines are all in the LLC (replaces `mem_latency`).
    /// Default 30 ns.
    pub llc_hit_latency: SimDuration,
    /// Host addresses at or above this are on the remote NUMA node. Default None.
    pub numa_remote_base: Option<u64>,
    /// Added latency of a DMA read from the remote NUMA node. Default 60 ns.
    pub numa_penalty: SimDuration,
    /// Endpoint completer latency for BAR reads and I/O requests (IORd and IOWr). Default 0.
    pub ep_latency: SimDuration,
    /// Propagation delay per link direction. 0..=1 ms (the replay timer allows for a
    /// few ns: beyond about 100 ns every TLP is replayed until its ACK is back).
    /// Default 0.
    pub propagation: SimDuration,
    /// Receive buffers of root ports and switch ports (0 = infinite). Default 64
    /// headers and 512 data credits (8 KiB) per class.
    pub port_buffer: BufferCredits,
    /// Receive buffers of endpoints. Completions are infinite as the spec requires of
    /// endpoints. Default P 64/512, NP 64 headers and infinite data.
    pub ep_buffer: BufferCredits,
    /// Root-complex completion credits are infinite (the host accepts every completion
    /// it asked for). Default true.
    pub rc_infinite_cpl: bool,
    /// Probability that a TLP's LCRC is corrupted on the wire. Default 0.
    pub error_rate: f64,
    /// Bit error rate: when non-zero, a TLP of `b` wire bits is corrupted with
    /// probability `1 − (1 − ber)^b` (replaces `error_rate`). `0..=`[`max_ber`](crate::timed::max_ber)`(mps)`.
    /// Default 0.
    pub ber: f64,
    /// Probability that a DLLP's CRC is corrupted (InitFC excepted: the handshake
    /// repeats until it succeeds). Default 0.
    pub dllp_error_rate: f64,
    /// Probability that a TLP with data (memory, I/O and configuration writes, and
    /// completions with data; not messages) leaves its source poisoned: the EP bit set,
    /// as for data found bad inside a device (see [`FabricSim::poison_host_memory`](crate::timed::FabricSim::poison_host_memory) and
    /// the `poison` notes in the crate README for what receivers do). Default 0.
    pub poison_rate: f64,
    /// ECRC on: after enumeration every function with AER gets ECRC Generation Enable
    /// and ECRC Check Enable set (as Linux's `pci=ecrc=on`); software may change them
    /// later with configuration writes. Every TLP then carries a 4-byte digest. Default
    /// false.
    pub ecrc: bool,
    /// Probability that a switch corrupts the data of a TLP it forwards (an internal
    /// error that the per-link LCRC cannot see; only ECRC catches it, see the `ecrc`
    /// notes in the crate README). Default 0.
    pub switch_error_rate: f64,
    /// The longest time a receiver goes without sending UpdateFC for a class with
    /// finite credits (PCIe Base Spec 2.6.1.2: at least every 30 µs, 120 µs with
    /// Extended Synch): an idle link still carries these refreshes. They are background
    /// events: [`FabricSim::run_until_idle`](crate::timed::FabricSim::run_until_idle) returns once only they are left. Zero
    /// turns them off; otherwise 1 µs..=1 ms. Default 30 µs.
    pub fc_update_period: SimDuration,
    /// How long a link retrains (Recovery) after REPLAY_NUM rolls over; neither
    /// direction transmits meanwhile. Default 1 µs.
    pub retrain_time: SimDuration,
    /// How long a link trains after it comes back (DL_Down to the InitFC handshake:
    /// see [`FabricSim::link_down`](crate::timed::FabricSim::link_down) and the `dpc` notes in the crate README).
    /// 1 µs..=1 s. Default 100 µs: about the shortest Gen1 training (Polling.Active
    /// alone sends 1024 TS1 ordered sets, 65.5 µs at 2.5 GT/s); links that equalize
    /// (Gen3 and later) take milliseconds.
    pub link_training_time: SimDuration,
    /// How long host software waits after a link below a port comes back (training
    /// complete) before its first configuration request to the device there, in
    /// [`FabricSim::recover`](crate::timed::FabricSim::recover): PCIe Base Spec 6.6.1 asks for at least 100 ms (Linux
    /// waits that long); a device that reports readiness earlier (Readiness
    /// Notifications) allows less. 0..=1 s. Default 100 ms.
    pub device_ready_wait: SimDuration,
    /// How long a component that was reset (its link went down: a failure, DPC, a
    /// hot-plug, a Secondary Bus Reset) takes to initialize once its link is back: until
    /// then its functions complete configuration requests with Configuration Request
    /// Retry Status (CRS), and the root complex re-issues them every
    /// `crs_retry_delay` (PCIe Base Spec 2.3.1, 6.6.1: at most 1 s). 0..=1 s. Default
    /// 0: ready at once.
    pub device_ready_time: SimDuration,
    /// How long the root complex waits before it re-issues a configuration request
    /// completed with CRS (implementation specific). 100 ns..=10 ms. Default 10 µs.
    pub crs_retry_delay: SimDuration,
    /// Completion timeout (host MMIO reads and device DMA reads). Default 10 ms.
    pub completion_timeout: SimDuration,
    /// PME service timeout (PCIe Base Spec 5.3.3.3.1: 100 ms, +50 %/−5 %): a function
    /// re-sends PM_PME while software has not cleared its PME_Status for this long.
    /// The re-sends are background events. Zero: never re-sent; otherwise
    /// 1 µs..=1 s. Default 100 ms.
    pub pme_service_timeout: SimDuration,
    /// Active State Power Management the host enables when the simulation starts:
    /// [`ASPM_L0S`](pcielab_config::caps::ASPM_L0S) and/or
    /// [`ASPM_L1`](pcielab_config::caps::ASPM_L1), written to the ASPM Control field of
    /// Link Control at both ends of every link whose two ends support the state (as
    /// Linux's `powersave` policy does). 0 leaves Link Control at its reset value,
    /// ASPM disabled; software may also write Link Control itself at any time.
    /// Default 0.
    pub aspm: u8,
    /// Idle time after which a transmitter whose port enables L0s enters L0s (PCIe
    /// Base Spec 5.4.1.1: no more than 7 µs); 1 ns..=1 s. Default 7 µs.
    pub aspm_l0s_entry: SimDuration,
    /// Fast Training Sequences a transmitter sends to leave L0s (N_FTS, which the
    /// receiver asks for in training): see [`LinkTiming::l0s_exit_ps`](crate::phy::LinkTiming::l0s_exit_ps). Default 64.
    pub n_fts: u8,
    /// Idle time (nothing sent either way) after which a link whose two ends enable
    /// L1 enters L1. Implementation-specific (the spec sets no value; this default is
    /// an assumption); 1 ns..=1 s. A value above `fc_update_period` lets the periodic
    /// UpdateFC keep an idle link in L0 unless its directions sleep in L0s. Default 8 µs.
    pub aspm_l1_entry: SimDuration,
    /// How long a link takes to leave L1 (through Recovery, both directions), which
    /// the ports advertise as their L1 Exit Latency; 0..=1 ms. Default 2 µs.
    pub aspm_l1_exit: SimDuration,
    /// How long after an L1 exit begins on a link below a switch the switch begins one
    /// on its upstream link, so that a device's request does not meet the links above
    /// it asleep one after the other (PCIe Base Spec 5.4.1.2.2: at most 1 µs, per
    /// switch); 0..=1 µs. Exits are not propagated downstream (nor does the spec ask
    /// it). Default 1 µs.
    pub aspm_l1_propagation: SimDuration,
    /// With `aspm` including L1: the host also enables the ASPM L1.1 and L1.2
    /// substates on every link whose two ends have the L1 PM Substates capability,
    /// programming them as Linux does (T_POWER_ON and Common_Mode_Restore_Time the
    /// larger of the two ends', LTR_L1.2_THRESHOLD 2 + 4 µs plus both; see the `aspm`
    /// module). Default false.
    pub aspm_l1ss: bool,
    /// Tags of each endpoint's DMA engine (1..=768). Default 64.
    pub dma_tags: u16,
    /// The root complex splits peer-to-peer requests between its root ports into
    /// pieces of this many bytes (NetTLP saw 64 on an Intel root complex) and rebuilds
    /// read completions at RCB/MPS. None: forwarded whole. Default None.
    pub p2p_split: Option<u32>,
    /// The root complex's IOMMU (None: DMA addresses are physical). Default None.
    pub iommu: Option<IommuConfig>,
    /// ATS on: every function with the ATS capability gets ATS Enable set when the
    /// simulation starts (software may change it later with configuration writes).
    /// A device with ATS enabled asks the root complex's translation agent (the
    /// IOMMU) for translations, caches them in its ATC and sends translated requests,
    /// which pass the IOMMU without a lookup (see the `ats` notes in the crate
    /// README). Needs `iommu`. Default false.
    pub ats: bool,
    /// Entries of each device's Address Translation Cache (LRU); 1..=65536. Default 64.
    pub atc_entries: usize,
    /// PRI on (needs `ats`): every function with the Page Request Interface gets PRI
    /// Enable and an allocation equal to its capacity; a device whose translation is
    /// refused asks the host to make the page resident (see the `pri` notes in the
    /// crate README, and [`FabricSim::iommu_map_on_demand`](crate::timed::FabricSim::iommu_map_on_demand)). Default false.
    pub pri: bool,
    /// Host software's time to handle a Page Request (the I/O page fault) before its
    /// PRG Response leaves, on top of the root complex latency; 0..=1 s. An assumption
    /// (the spec sets none): default 10 µs.
    pub page_fault_latency: SimDuration,
    /// Access Control Services: enumeration sets Source Validation, P2P Request
    /// Redirect, P2P Completion Redirect and Upstream Forwarding in every downstream
    /// port with the ACS capability, as Linux does when an IOMMU isolates devices:
    /// peer-to-peer traffic between ports of a switch then goes by the root complex
    /// (see the `acs` notes in the crate README). Default false.
    pub acs: bool,
    /// Record every TLP/DLLP with its bytes. Default false.
    pub trace: bool,
    /// Record host-memory writes (requester, address, length) in order. Default false.
    pub log_writes: bool,
    /// Burst mode: a DMA engine sends up to this many back-to-back memory writes
    /// (MPS each, within one 4 KiB page, to host memory), and its read requests
    /// (MRRS each, in one page), as one unit that every link, switch and the root
    /// complex handle at once, and the root complex answers reads with completions
    /// grouped the same way — far fewer events per TLP, at the price of a coarser
    /// data-link and flow-control granularity (see the `burst` module). 1 = off
    /// (every TLP on its own, the exact model); 1..=64. Default 1.
    pub burst: u8,
}

/// Receive-buffer sizes of a port in credits (0 = infinite).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferCredits {
    /// `[P, NP, Cpl]` header credits (one per TLP).
    pub hdr: [u32; 3],
    /// `[P, NP, Cpl]` data credits (16 bytes each).
    pub data: [u32; 3],
}

/// IOMMU parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IommuConfig {
    /// Page size in bytes (a power of two, 4 KiB..=1 GiB). Default 4096.
    pub page_size: u64,
    /// IOTLB entries. Default 64.
    pub iotlb_entries: usize,
    /// Added latency of an IOTLB hit. Default 0.
    pub hit_latency: SimDuration,
    /// Added latency of an IOTLB miss (page walk). Default 200 ns.
    pub miss_latency: SimDuration,
    /// Added latency of an IOTLB miss of a function assigned to a virtual machine
    /// ([`FabricSim::assign_vm`](crate::timed::FabricSim::assign_vm)): a nested
    /// (two-dimensional) walk of the guest's I/O page table through the host's.
    /// Zero (the default) means "the same as `miss_latency`": the simulator does not
    /// guess the ratio (without paging-structure caches a 4-level nested walk makes
    /// up to 24 memory references to a native walk's 4, but walk caches hide much of
    /// that; set it from a measurement).
    pub nested_walk: SimDuration,
    /// Interrupt remapping (see the module documentation). Default off.
    pub interrupt_remapping: bool,
    /// PASID support: per-process tables for requests with a PASID prefix (see the
    /// module documentation); enumeration then enables PASID on every function with
    /// the capability, as Linux does for an IOMMU that can use it. Default off.
    pub pasid: bool,
}

/// A latency distribution: a fixed part is kept elsewhere (`mem_ns`, `rc_ns`); this
/// is the seeded extra on top of it.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum LatencyDist {
    /// No extra latency (the spec profile).
    #[default]
    Zero,
    /// An empirical distribution given by its quantiles: `(p, extra_ps)` with `p`
    /// rising from 0 to 1 and the extra not falling. A sample is the inverse CDF at a
    /// uniform `u`, linear between the points.
    Quantiles(Vec<(f64, u64)>),
    /// With probability `p`, an exponential extra of mean `mean_ps`; otherwise 0.
    Exp {
        /// Probability of a tail event.
        p: f64,
        /// Mean of the exponential, ps.
        mean_ps: u64,
    },
}

/// The state of the host's last-level cache for the DMA buffers (pcie-bench's
/// cache states).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheState {
    /// The buffers start outside the cache; DMA reads fill it and DMA writes allocate
    /// in it (DDIO) as they go. The default.
    #[default]
    Cold,
    /// Host software touched the buffers before the run: they start in the cache (as
    /// far as it holds them); workloads warm their buffers with
    /// [`FabricSim::llc_warm`](crate::timed::FabricSim::llc_warm).
    Warm,
    /// Another core sweeps the cache all the time: every DMA read misses.
    Thrash,
}

/// CPU and driver time of host software. All zero by default (the spec profile).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HostCosts {
    /// CPU time of an MMIO read beyond the fabric: from the load's issue to its
    /// request entering the root complex and from the completion to the load's
    /// retirement. [`FabricSim::mmio_read`](crate::timed::FabricSim::mmio_read)
    /// charges it before the request leaves and counts it in the latency.
    pub mmio_read: SimDuration,
    /// CPU time of a posted MMIO write (an uncached store): the host is busy this long
    /// before the write leaves.
    pub mmio_write: SimDuration,
    /// CPU time of a doorbell: an MMIO write behind a write barrier
    /// ([`FabricSim::doorbell`](crate::timed::FabricSim::doorbell)).
    pub doorbell: SimDuration,
    /// From an MSI/MSI-X write reaching the root complex to its handler running
    /// ([`FabricSim::wait_interrupt`](crate::timed::FabricSim::wait_interrupt)).
    pub irq: SimDuration,
    /// For an interrupt of a function assigned to a virtual machine
    /// ([`FabricSim::assign_vm`](crate::timed::FabricSim::assign_vm)): the
    /// hypervisor's injection of it into the guest, on top of `irq`, before the
    /// guest's handler runs.
    pub vm_irq: SimDuration,
    /// Driver time per operation (per descriptor, per packet, per request): host
    /// programs charge it with
    /// [`FabricSim::driver_work`](crate::timed::FabricSim::driver_work).
    pub driver_op: SimDuration,
}
