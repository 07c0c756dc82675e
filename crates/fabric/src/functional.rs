//! The functional fabric: PCIe hardware (root complex, switches, endpoints) and its
//! routing rules, without timing.
//!
//! ```text
//!            host ── ECAM / memory / I/O
//!                 │
//!   bus 0  ───────┼──────────────────────────────   root bus (BusId 0)
//!          00:00.0 host bridge   00:01.0 root port   00:02.0 root port
//!                                    │ secondary bus
//!                              ┌─────┴─────┐
//!                              │ switch up │  (Type 1, devfn 0 on the link bus)
//!                              └─────┬─────┘
//!               internal bus ────────┼──────────────
//!                            ds port 0      ds port 1      (Type 1, device = port)
//!                               │               │
//!                          endpoint 0      endpoint 1       (Type 0, devfn 0)
//! ```
//!
//! Routing follows the registers host software programmed, exactly like hardware:
//!
//! - **Configuration** requests by bus number: a bridge forwards a Type 1 request whose
//!   bus is in `secondary..=subordinate`; the bridge whose secondary bus matches
//!   converts it to Type 0 for the device on that bus. Below a root or downstream port
//!   only device 0 exists (no ARI forwarding).
//! - **Memory and I/O** requests by address: a function claims an address inside one of
//!   its BARs when Memory (I/O) Space is enabled; a bridge forwards downstream what lies
//!   in its windows (Memory/I/O Space enabled) and upstream what does not (Bus Master
//!   enabled). Addresses no one claims end in Unsupported Request; from a function,
//!   requests that reach the root bus unclaimed go to host memory.
//! - **Completions and ID-routed messages** by the destination ID's bus number.
//! - The host reaches configuration space through the **ECAM** window
//!   ([`ECAM_BASE`], 1 MiB per bus) or [`Fabric::ecam_read`]; absent functions read
//!   all-ones.
//! - **Interrupts**: [`Fabric::raise_msix`] / [`Fabric::raise_msi`] send the message a
//!   function's registers describe (or set its pending bit when masked); writes that
//!   reach the root complex in [`MSI_RANGE`] are recorded in [`Fabric::interrupts`].
//! - [`Fabric::route_tlp`] routes a [`TlpRepr`] by its kind and returns the ports it
//!   crosses, so the timed simulator can reuse the same decisions.
//!
//! Hardware models live here; host software (enumeration) is in [`crate::host`] and only
//! uses configuration and memory requests.

use crate::kinds::{device_ids, EndpointCtx, KindRegistry, KindRole};
use crate::topology::{Link, NodeId, Topology, TopologyError};
use pcielab_config::caps::{
    l0s_exit_code, l1_exit_code, CapabilityList, MsiCap, PcieCap, PmCap, PortType, ASPM_L0S,
    ASPM_L1,
};
use pcielab_config::ext_caps::{sriov, AcsCap, AerCap, DpcCap};

use pcielab_config::header::{command, reg};
use pcielab_config::{Bar, BridgeWindows, ConfigSpace, Ids, Type0, Type1, PCIELAB_VENDOR_ID};
use pcielab_device::{DeviceModel, ReadReply};
use pcielab_wire::tlp::{MsgRouting, TlpHeader, TlpRepr};
use pcielab_wire::{Bdf, ByteEnables, Generation};

/// A request the completer does not support (it answers Unsupported Request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unsupported;

pub use crate::kinds::{HwFunction, VfTemplate};

/// The SR-IOV state of a PF in the fabric.
#[derive(Debug, Clone)]
pub struct Sriov {
    /// Offset of the SR-IOV capability in the PF's configuration space.
    pub cap: u16,
    /// What each VF is made of.
    pub template: VfTemplate,
    /// The number of VFs host software is asked to enable (the node's `vfs` key; Linux:
    /// what a user writes to `sriov_numvfs`).
    pub requested: u16,
    /// The VFs that exist now, in VF order (empty while VF Enable is clear).
    pub vfs: Vec<FnId>,
}

/// Which PF a VF belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VfOf {
    /// The PF.
    pub pf: FnId,
    /// The VF's number, 0-based (VF `index` has Routing ID PF + First VF Offset +
    /// `index` × VF Stride).
    pub index: u16,
}

/// Index of a function in [`Fabric::functions`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FnId(pub u32);

/// Index of a (physical) bus in [`Fabric::buses`]; its bus *number* is what software
/// programmed into the bridge above it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BusId(pub u32);

/// What a function is in the hierarchy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The root complex's host bridge (00:00.0).
    HostBridge,
    /// A root port.
    RootPort {
        /// Port index in the topology file.
        port: u8,
    },
    /// A switch upstream port.
    SwitchUpstream,
    /// A switch downstream port.
    SwitchDownstream {
        /// Port index in the topology file.
        port: u8,
    },
    /// An endpoint function.
    Endpoint,
}

/// One function of the fabric.
#[derive(Debug)]
pub struct Function {
    /// The topology node it belongs to.
    pub node: NodeId,
    /// Its role.
    pub role: Role,
    /// The bus it sits on.
    pub bus: BusId,
    /// `device << 3 | function`.
    pub devfn: u8,
    /// Configuration space.
    pub config: ConfigSpace,
    /// BARs the header declares (bridges: BAR0/1 only).
    pub bars: [Option<Bar>; 6],
    /// The bus below a bridge.
    pub secondary: Option<BusId>,
    /// Its MSI-X table and PBA (see [`crate::msix`]), if it has the capability.
    pub msix: Option<crate::msix::MsixRegion>,
    /// The link above this function's device, for ports and endpoints: (gen, width).
    pub link: Option<(Generation, u8)>,
    /// For a PF with an SR-IOV capability: its VFs (boxed: most functions have none,
    /// and routing walks this vector).
    pub sriov: Option<Box<Sriov>>,
    /// For a VF: its PF. A VF's `bars` are the per-VF VF BARs of the PF's SR-IOV
    /// capability.
    pub vf: Option<VfOf>,
}

/// One bus.
#[derive(Debug, Clone, Default)]
pub struct Bus {
    /// The bridge above (None for the root bus).
    pub parent: Option<FnId>,
    /// Functions on this bus.
    pub functions: Vec<FnId>,
}

/// Why a request could not be delivered (the requester sees Unsupported Request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteError {
    /// No bridge forwards to this bus number.
    NoBus(u8),
    /// The bus exists but no function answers at this ID.
    NoFunction(Bdf),
    /// No BAR or window claims this memory address.
    MemoryUnclaimed(u64),
    /// No BAR or window claims this I/O address.
    IoUnclaimed(u32),
    /// A function or bridge on the path has Bus Master disabled.
    BusMasterDisabled(Bdf),
    /// The claiming function refused the request.
    Refused(Bdf),
    /// The request cannot travel this way (e.g. a configuration request from a
    /// function: only the root complex issues them).
    NotRoutable(&'static str),
}

impl core::fmt::Display for RouteError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RouteError::NoBus(b) => {
                write!(f, "unsupported request: no bridge forwards to bus {b:02x}")
            }
            RouteError::NoFunction(b) => write!(f, "unsupported request: no function {b}"),
            RouteError::MemoryUnclaimed(a) => write!(
                f,
                "unsupported request: no BAR or window claims memory address {a:#x}"
            ),
            RouteError::IoUnclaimed(a) => write!(
                f,
                "unsupported request: no BAR or window claims I/O address {a:#x}"
            ),
            RouteError::BusMasterDisabled(b) => {
                write!(f, "request dropped: Bus Master is disabled in {b}")
            }
            RouteError::Refused(b) => write!(f, "unsupported request: {b} refused the access"),
            RouteError::NotRoutable(why) => write!(f, "not routable: {why}"),
        }
    }
}

impl std::error::Error for RouteError {}

/// Who sends a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Origin {
    /// Host software through the root complex.
    Host,
    /// A function (DMA, peer-to-peer).
    Function(FnId),
}

/// Where a memory or I/O request lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// A function's BAR at an offset.
    Bar {
        /// The function.
        function: FnId,
        /// BAR index.
        bar: u8,
        /// Offset inside the BAR.
        offset: u64,
    },
    /// Host memory behind the root complex.
    HostMemory(u64),
}

/// The path of a request: bridges crossed in order, and the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route<T> {
    /// Bridges (ports) the request crosses, in order.
    pub hops: Vec<FnId>,
    /// The destination.
    pub target: T,
}

/// Where a TLP ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TlpDestination {
    /// A function; for memory and I/O requests, the BAR and offset that claimed it.
    Function {
        /// The function.
        function: FnId,
        /// `(bar, offset)` for memory and I/O requests.
        bar: Option<(u8, u64)>,
    },
    /// Host memory behind the root complex (DMA).
    HostMemory(u64),
    /// The root complex itself (messages to the RC, completions to the host).
    RootComplex,
    /// The receiver of the first link (Local messages).
    Receiver,
    /// Every function below the root complex (Broadcast messages from the host).
    Broadcast,
}

/// Address spaces a BAR or window decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Space {
    Mem,
    Io,
}

/// Base of the ECAM window in the host's physical address space (256 MiB: 256 buses).
pub const ECAM_BASE: u64 = 0xb000_0000;
/// Size of the ECAM window.
pub const ECAM_SIZE: u64 = 256 << 20;
/// The range of addresses the root complex takes as MSI/MSI-X writes (x86 local APIC).
pub const MSI_RANGE: (u64, u64) = (0xfee0_0000, 0xfeef_ffff);

/// An MSI or MSI-X write the root complex received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Interrupt {
    /// The function that sent it.
    pub from: Bdf,
    /// Message address.
    pub address: u64,
    /// Message data.
    pub data: u32,
}

/// What happened to an interrupt a function raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Signal {
    /// The message write went out (and reached the root complex if it was an MSI address).
    Sent,
    /// The vector (or the whole function) is masked: the pending bit is set instead.
    Pending,
    /// The mechanism is not enabled (MSI/MSI-X Enable clear) or the vector does not exist.
    Disabled,
}

/// Sparse host memory behind the root complex (DMA target).
///
/// A whole-page write can hand over its buffer instead of copying it (the timed
/// simulator's root complex does this with a 4 KiB write's payload). When the writer
/// may still need those bytes (a TLP that a link may have to retransmit), the page is
/// *on loan*: before anything overwrites it, its bytes are kept aside for the
/// lender, so a retransmission always sends what was written.
#[derive(Debug, Clone, Default)]
pub struct HostMemory {
    pages: crate::inthash::IntMap<u64, Page>,
}

/// A page of host memory, and its loan (see [`HostMemory`]).
#[derive(Debug, Clone)]
struct Page {
    data: Box<[u8; 4096]>,
    loan: Loan,
}

#[derive(Debug, Clone)]
enum Loan {
    /// Not on loan.
    None,
    /// On loan, and `data` still holds the lender's bytes.
    Live,
    /// On loan; the lender's bytes, copied before `data` was overwritten.
    Saved(Box<[u8; 4096]>),
}

impl HostMemory {
    /// Reads bytes (never-written bytes read 0). Page by page; addresses wrap at 2^64.
    pub fn read(&self, addr: u64, buf: &mut [u8]) {
        let mut done = 0usize;
        while done < buf.len() {
            let a = addr.wrapping_add(done as u64);
            let off = (a & 0xfff) as usize;
            let n = (4096 - off).min(buf.len() - done);
            let dst = &mut buf[done..done + n];
            match self.pages.get(&(a >> 12)) {
                Some(p) => dst.copy_from_slice(&p.data[off..off + n]),
                None => dst.fill(0),
            }
            done += n;
        }
    }
    /// Writes bytes. Page by page; addresses wrap at 2^64.
    pub fn write(&mut self, addr: u64, data: &[u8]) {
        let mut done = 0usize;
        while done < data.len() {
            let a = addr.wrapping_add(done as u64);
            let off = (a & 0xfff) as usize;
            let n = (4096 - off).min(data.len() - done);
            let p = self.pages.entry(a >> 12).or_insert_with(|| Page {
                data: Box::new([0; 4096]),
                loan: Loan::None,
            });
            if let Loan::Live = p.loan {
                // The lender's bytes, before they are overwritten.
                p.loan = Loan::Saved(p.data.clone());
            }
            p.data[off..off + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
    }
    /// Writes the page at `addr` (4 KiB aligned) with the 4096 bytes of `buf` by
    /// taking `buf` as the page's storage; `buf` gets the page's old storage (its
    /// contents are then meaningless), or an empty vector. With `loan`, the page goes
    /// on loan (see [`HostMemory::loaned`]). Returns false, and changes nothing,
    /// unless `addr` is aligned, `buf` holds exactly 4096 bytes in a 4096-byte
    /// allocation and the page is not on loan already: then write it as usual.
    pub(crate) fn write_page_from(&mut self, addr: u64, buf: &mut Vec<u8>, loan: bool) -> bool {
        if addr & 0xfff != 0 || buf.len() != 4096 || buf.capacity() != 4096 {
            return false;
        }
        let loan = if loan { Loan::Live } else { Loan::None };
        match self.pages.entry(addr >> 12) {
            std::collections::hash_map::Entry::Occupied(mut e) => {
                let p = e.get_mut();
                if !matches!(p.loan, Loan::None) {
                    return false;
                }
                let Ok(new) = Box::<[u8; 4096]>::try_from(std::mem::take(buf).into_boxed_slice())
                else {
                    return false; // not reached: the length was checked
                };
                let old = std::mem::replace(&mut p.data, new);
                *buf = (old as Box<[u8]>).into_vec();
                p.loan = loan;
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                let Ok(data) = Box::<[u8; 4096]>::try_from(std::mem::take(buf).into_boxed_slice())
                else {
                    return false;
                };
                e.insert(Page { data, loan });
            }
        }
        true
    }
    /// The bytes a loan of the page at `addr` handed over (whatever was written to the
    /// page since), or None if the page is not on loan.
    pub(crate) fn loaned(&self, addr: u64) -> Option<&[u8]> {
        let p = self.pages.get(&(addr >> 12))?;
        match &p.loan {
            Loan::None => None,
            Loan::Live => Some(&p.data[..]),
            Loan::Saved(saved) => Some(&saved[..]),
        }
    }
    /// Ends the loan of the page at `addr` (its lender no longer needs the bytes).
    pub(crate) fn end_loan(&mut self, addr: u64) {
        if let Some(p) = self.pages.get_mut(&(addr >> 12)) {
            p.loan = Loan::None;
        }
    }
}

/// The functional fabric built from a topology.
///
/// ```
/// use pcielab_fabric::{functional::Fabric, kinds::KindRegistry, topology::Topology};
/// use pcielab_wire::Bdf;
/// let t = Topology::parse(
///     "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n[[node]]\nname=\"m\"\nkind=\"psmem\"\n\
///      [[link]]\nup=\"rc.0\"\ndown=\"m\"\ngen=3\nwidth=4\n",
///     "doc.toml", &KindRegistry::builtin()).unwrap();
/// let fabric = Fabric::build(&t, &KindRegistry::builtin()).unwrap();
/// // Before enumeration only bus 0 is reachable: host bridge and root port 00:01.0.
/// assert_eq!(fabric.config_read(Bdf::new(0, 1, 0).unwrap(), 0).unwrap() & 0xffff, 0x1fee);
/// assert!(fabric.config_read(Bdf::new(1, 0, 0).unwrap(), 0).is_err());
/// ```
#[derive(Debug)]
pub struct Fabric {
    /// Every function.
    pub functions: Vec<Function>,
    /// Every bus; `BusId(0)` is the root bus.
    pub buses: Vec<Bus>,
    /// Node names, indexed by `NodeId`.
    pub node_names: Vec<String>,
    /// Host memory (target of DMA that leaves the root complex).
    pub host_memory: HostMemory,
    /// MSI/MSI-X writes received by the root complex, in order.
    pub interrupts: Vec<Interrupt>,
    /// The device model of each endpoint node, indexed by `NodeId` (see
    /// [`Fabric::device`]); the timed simulator takes them over.
    pub devices: Vec<Option<Box<dyn DeviceModel>>>,
    /// What the functional fabric gives device models to act through; the commands
    /// they give here are not carried out (this fabric has no time), only counted.
    scratch: Scratch,
}

/// The functional fabric's context for device calls.
#[derive(Debug)]
struct Scratch {
    cmds: Vec<pcielab_device::Command>,
    state: pcielab_device::DeviceState,
    spare: Vec<Vec<u8>>,
    dropped: u64,
}

fn port_cap(
    port_type: PortType,
    params: &crate::kinds::Params,
    link: Option<&Link>,
    port_number: u8,
    slot: Option<u16>,
) -> PcieCap {
    let mut c = PcieCap::new(port_type);
    c.max_speed = params
        .int("max_gen")
        .and_then(|g| Generation::from_number(g as u8).ok())
        .or(link.map(|l| l.gen))
        .unwrap_or(Generation::Gen3);
    c.max_width = params
        .int("max_width")
        .map(|w| w as u8)
        .or(link.map(|l| l.width))
        .unwrap_or(16);
    c.max_payload = params.int("mps").unwrap_or(256) as u16;
    c.link = link.map(|l| (l.gen, l.width));
    // ASPM: the states the node supports, with the exit latencies of the timed
    // simulator's defaults (it rewrites them from its own configuration).
    c.aspm = match params.str("aspm") {
        Some("none") => 0,
        Some("l0s") => ASPM_L0S,
        Some("l1") => ASPM_L1,
        _ => ASPM_L0S | ASPM_L1,
    };
    let timing = crate::phy::LinkTiming::new(
        link.map_or(c.max_speed, |l| l.gen),
        link.map_or(c.max_width, |l| l.width),
    );
    c.l0s_exit = l0s_exit_code(timing.l0s_exit_ps(crate::phy::DEFAULT_N_FTS));
    c.l1_exit = l1_exit_code(crate::phy::DEFAULT_L1_EXIT.as_ps());
    c.port_number = port_number;
    c.slot = slot;
    c.hotplug_power = slot.is_some() && params.bool("hotplug_power").unwrap_or(false);
    c.hotplug = c.hotplug_power || (slot.is_some() && params.bool("hotplug").unwrap_or(false));
    // Root ports complete AtomicOps for host memory unless the root complex says not.
    c.atomics = port_type == PortType::RootPort && params.bool("atomics").unwrap_or(true);
    // Ports forward End-End TLP Prefixes (PASID); endpoints support them when they
    // implement PASID (psmem sets it).
    c.e2e_prefix = matches!(
        port_type,
        PortType::RootPort | PortType::UpstreamPort | PortType::DownstreamPort
    );
    c
}

fn ids(params: &crate::kinds::Params, device_id: u16, class_code: u32) -> Ids {
    Ids {
        vendor_id: params.int("vendor_id").unwrap_or(PCIELAB_VENDOR_ID as i64) as u16,
        device_id,
        revision: 1,
        class_code,
    }
}

fn bridge(
    params: &crate::kinds::Params,
    device_id: u16,
    caps: CapabilityList,
) -> Result<ConfigSpace, String> {
    let mut cs = Type1 {
        ids: ids(params, device_id, 0x06_0400),
        bars: [None; 2],
        rom_size: None,
        interrupt_pin: 1,
        multi_function: false,
    }
    .build()
    .map_err(|e| e.to_string())?;
    caps.install(&mut cs).map_err(|e| e.to_string())?;
    Ok(cs)
}

impl Fabric {
    /// Builds the hardware of a checked topology (nothing is programmed yet: bus
    /// numbers, BARs and windows are zero, as after reset).
    pub fn build(topo: &Topology, registry: &KindRegistry) -> Result<Fabric, TopologyError> {
        let mut f = Fabric {
            functions: Vec::new(),
            buses: vec![Bus::default()],
            node_names: topo.nodes.iter().map(|n| n.name.clone()).collect(),
            host_memory: HostMemory::default(),
            interrupts: Vec::new(),
            devices: topo.nodes.iter().map(|_| None).collect(),
            scratch: Scratch {
                cmds: Vec::new(),
                state: pcielab_device::DeviceState {
                    next_dma: 0,
                    rng: pcielab_sim::Rng::new(0),
                },
                spare: Vec::new(),
                dropped: 0,
            },
        };
        let root = topo
            .nodes
            .iter()
            .position(|n| {
                matches!(
                    registry.get(&n.kind).map(|k| &k.role),
                    Some(KindRole::RootComplex)
                )
            })
            .map(|i| NodeId(i as u32))
            .ok_or_else(|| TopologyError {
                file: topo.file.clone(),
                line: 0,
                key: None,
                message: "no root complex".into(),
            })?;
        let node = &topo.nodes[root.index()];
        let err = |line: usize, m: String| TopologyError {
            file: topo.file.clone(),
            line,
            key: None,
            message: m,
        };
        let hb = Type0 {
            ids: ids(
                &node.params,
                node.params.int("device_id").unwrap_or(1) as u16,
                0x06_0000,
            ),
            interrupt_pin: 0,
            ..Type0::default()
        }
        .build()
        .map_err(|e| err(node.line, e.to_string()))?;
        f.add(
            root,
            Role::HostBridge,
            BusId(0),
            0,
            hb,
            [None; 6],
            None,
            None,
        );
        let mut slot = 0u16;
        let ports = node.params.int("ports").unwrap_or(1) as u8;
        for p in 0..ports {
            let link = topo.downlink(root, p);
            slot += 1;
            let caps = CapabilityList::new()
                .with(PmCap::default())
                .with(MsiCap {
                    vectors: 1,
                    addr64: true,
                    per_vector_mask: false,
                })
                .with(port_cap(
                    PortType::RootPort,
                    &node.params,
                    link,
                    p + 1,
                    Some(slot),
                ))
                .with_ext(AerCap {
                    root_port: true,
                    egress_blocking: true,
                    prefix_blocking: true,
                    atomic_blocking: true,
                })
                .with_ext(AcsCap)
                .with_ext(DpcCap)
                .with_ext(crate::kinds::PORT_L1SS);
            let cs =
                bridge(&node.params, device_ids::ROOT_PORT, caps).map_err(|m| err(node.line, m))?;
            let below = f.new_bus();
            let rp = f.add(
                root,
                Role::RootPort { port: p },
                BusId(0),
                (p + 1) << 3,
                cs,
                [None; 6],
                Some(below),
                link,
            );
            f.buses[below.0 as usize].parent = Some(rp);
            if let Some(l) = link {
                f.attach(topo, registry, l, below, &mut slot)?;
            }
        }
        Ok(f)
    }

    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        node: NodeId,
        role: Role,
        bus: BusId,
        devfn: u8,
        config: ConfigSpace,
        bars: [Option<Bar>; 6],
        secondary: Option<BusId>,
        link: Option<&Link>,
    ) -> FnId {
        let id = FnId(self.functions.len() as u32);
        let msix = crate::msix::MsixRegion::from_config(&config);
        self.functions.push(Function {
            node,
            role,
            bus,
            devfn,
            config,
            bars,
            secondary,
            msix,
            link: link.map(|l| (l.gen, l.width)),
            sriov: None,
            vf: None,
        });
        self.buses[bus.0 as usize].functions.push(id);
        id
    }

    fn new_bus(&mut self) -> BusId {
        self.buses.push(Bus::default());
        BusId(self.buses.len() as u32 - 1)
    }

    fn attach(
        &mut self,
        topo: &Topology,
        registry: &KindRegistry,
        link: &Link,
        bus: BusId,
        slot: &mut u16,
    ) -> Result<(), TopologyError> {
        let id = link.down;
        let node = &topo.nodes[id.index()];
        let err = |m: String| TopologyError {
            file: topo.file.clone(),
            line: node.line,
            key: None,
            message: format!("node {:?}: {m}", node.name),
        };
        let Some(spec) = registry.get(&node.kind) else {
            return Err(err(format!("unknown kind {:?}", node.kind)));
        };
        match spec.role {
            KindRole::RootComplex => Err(err("a root complex cannot sit below a link".into())),
            KindRole::Switch => {
                let caps = CapabilityList::new()
                    .with(PmCap::default())
                    .with(port_cap(
                        PortType::UpstreamPort,
                        &node.params,
                        Some(link),
                        0,
                        None,
                    ))
                    .with_ext(AerCap {
                        prefix_blocking: true,
                        atomic_blocking: true,
                        ..AerCap::default()
                    })
                    .with_ext(crate::kinds::PORT_L1SS);
                let dev = node
                    .params
                    .int("device_id")
                    .unwrap_or(device_ids::SWITCH_UP as i64) as u16;
                let cs = bridge(&node.params, dev, caps).map_err(err)?;
                let internal = self.new_bus();
                let up = self.add(
                    id,
                    Role::SwitchUpstream,
                    bus,
                    0,
                    cs,
                    [None; 6],
                    Some(internal),
                    Some(link),
                );
                self.buses[internal.0 as usize].parent = Some(up);
                let ports = node.params.int("ports").unwrap_or(1) as u8;
                for p in 0..ports {
                    let dl = topo.downlink(id, p);
                    *slot += 1;
                    let caps = CapabilityList::new()
                        .with(PmCap::default())
                        .with(MsiCap {
                            vectors: 1,
                            addr64: true,
                            per_vector_mask: false,
                        })
                        .with(port_cap(
                            PortType::DownstreamPort,
                            &node.params,
                            dl,
                            p,
                            Some(*slot),
                        ))
                        .with_ext(AerCap {
                            root_port: false,
                            egress_blocking: true,
                            prefix_blocking: true,
                            atomic_blocking: true,
                        })
                        .with_ext(AcsCap)
                        .with_ext(DpcCap)
                        .with_ext(crate::kinds::PORT_L1SS);
                    let cs = bridge(&node.params, device_ids::SWITCH_DOWN, caps).map_err(err)?;
                    let below = self.new_bus();
                    let ds = self.add(
                        id,
                        Role::SwitchDownstream { port: p },
                        internal,
                        p << 3,
                        cs,
                        [None; 6],
                        Some(below),
                        dl,
                    );
                    self.buses[below.0 as usize].parent = Some(ds);
                    if let Some(dl) = dl {
                        self.attach(topo, registry, dl, below, slot)?;
                    }
                }
                Ok(())
            }
            KindRole::Endpoint(build) => {
                let ctx = EndpointCtx {
                    name: &node.name,
                    params: &node.params,
                    pcie: port_cap(PortType::Endpoint, &node.params, Some(link), 0, None),
                    serial: 0x5043_494c_0000_0000 | id.0 as u64,
                };
                let funcs = build(&ctx).map_err(|e| TopologyError {
                    file: topo.file.clone(),
                    line: match e.key.map(|k| node.params.line(k)) {
                        Some(l) if l > 0 => l,
                        _ => node.line,
                    },
                    key: e.key.map(str::to_string),
                    message: format!("node {:?}: {}", node.name, e.message),
                })?;
                self.devices[id.0 as usize] = funcs.model;
                for hf in funcs.functions {
                    let fid = self.add(
                        id,
                        Role::Endpoint,
                        bus,
                        hf.devfn,
                        hf.config,
                        hf.bars,
                        None,
                        Some(link),
                    );
                    if let Some(template) = hf.vfs {
                        let cap = find_ext_cap(
                            &self.functions[fid.0 as usize].config,
                            pcielab_config::caps::id::EXT_SRIOV,
                        )
                        .ok_or_else(|| {
                            err(format!(
                                "function {} declares VFs but has no SR-IOV capability",
                                hf.devfn
                            ))
                        })?;
                        self.functions[fid.0 as usize].sriov = Some(Box::new(Sriov {
                            cap,
                            template,
                            requested: node.params.int("vfs").unwrap_or(0) as u16,
                            vfs: Vec::new(),
                        }));
                    }
                }
                Ok(())
            }
        }
    }

    /// The bus number software gave `bus` (0 for the root bus).
    pub fn bus_number(&self, bus: BusId) -> u8 {
        match self.buses[bus.0 as usize].parent {
            None => 0,
            Some(p) => self.functions[p.0 as usize]
                .config
                .read_u8(reg::SECONDARY_BUS),
        }
    }

    /// The ID of a function, as currently numbered.
    pub fn bdf(&self, f: FnId) -> Bdf {
        let func = &self.functions[f.0 as usize];
        Bdf::from_raw(((self.bus_number(func.bus) as u16) << 8) | func.devfn as u16)
    }

    /// A readable name: `rc` (host bridge), `rc.0` (root port 0), `sw0` (upstream
    /// port), `sw0.2` (downstream port 2), `mem0` (endpoint; `mem0.f` for function f > 0),
    /// `mem0.vf3` (VF 3 of `mem0`'s PF; `mem0.f.vf3` when the PF is function f > 0).
    pub fn name(&self, f: FnId) -> String {
        let func = &self.functions[f.0 as usize];
        let n = &self.node_names[func.node.index()];
        if let Some(vf) = func.vf {
            return format!("{}.vf{}", self.name(vf.pf), vf.index);
        }
        match func.role {
            Role::RootPort { port } | Role::SwitchDownstream { port } => format!("{n}.{port}"),
            Role::Endpoint if func.devfn != 0 => format!("{n}.{}", func.devfn),
            _ => n.clone(),
        }
    }

    /// True when port `f` has ARI Forwarding Enable set (Device Control 2, bit 5).
    fn ari_forwarding(&self, f: FnId) -> bool {
        let cs = &self.functions[f.0 as usize].config;
        find_cap(cs, pcielab_config::caps::id::PCIE).is_some_and(|p| {
            cs.read_u16(p + pcielab_config::caps::pcie_reg::DEVCTL2) & (1 << 5) != 0
        })
    }

    fn is_bridge(&self, f: FnId) -> bool {
        self.functions[f.0 as usize].secondary.is_some()
    }

    fn cmd(&self, f: FnId) -> u16 {
        self.functions[f.0 as usize].config.read_u16(reg::COMMAND)
    }

    /// Routes a configuration request from the host to `bdf`.
    pub fn route_config(&self, bdf: Bdf) -> Result<Route<FnId>, RouteError> {
        let (hops, r) = self.route_config_partial(bdf);
        r.map(|target| Route { hops, target })
    }

    /// Routes a configuration request from the host to `bdf` as far as it goes: the
    /// bridges it crosses and either its target or why the last of them (the root
    /// complex when none) cannot deliver it, which is where the request ends with an
    /// Unsupported Request completion.
    pub fn route_config_partial(&self, bdf: Bdf) -> (Vec<FnId>, Result<FnId, RouteError>) {
        let mut bus = BusId(0);
        let mut hops = Vec::new();
        loop {
            if self.bus_number(bus) == bdf.bus() {
                let devfn = (bdf.raw() & 0xff) as u8;
                let below_port = self.buses[bus.0 as usize].parent.is_some_and(|p| {
                    matches!(
                        self.functions[p.0 as usize].role,
                        Role::RootPort { .. } | Role::SwitchDownstream { .. }
                    )
                });
                if below_port && bdf.device() != 0 {
                    // Only function numbers 0..=7 of device 0, unless the port above
                    // has ARI Forwarding enabled (8-bit function numbers).
                    let ari = self.buses[bus.0 as usize]
                        .parent
                        .is_some_and(|p| self.ari_forwarding(p));
                    if !ari {
                        return (hops, Err(RouteError::NoFunction(bdf)));
                    }
                }
                let r = self.buses[bus.0 as usize]
                    .functions
                    .iter()
                    .find(|&&f| self.functions[f.0 as usize].devfn == devfn)
                    .copied()
                    .ok_or(RouteError::NoFunction(bdf));
                return (hops, r);
            }
            let next = self.buses[bus.0 as usize]
                .functions
                .iter()
                .copied()
                .find(|&f| {
                    let cs = &self.functions[f.0 as usize].config;
                    self.is_bridge(f) && {
                        let (sec, sub) = (
                            cs.read_u8(reg::SECONDARY_BUS),
                            cs.read_u8(reg::SUBORDINATE_BUS),
                        );
                        sec != 0 && sec <= bdf.bus() && bdf.bus() <= sub
                    }
                });
            match next {
                Some(b) => {
                    hops.push(b);
                    bus = self.functions[b.0 as usize].secondary.unwrap_or(bus);
                }
                None => return (hops, Err(RouteError::NoBus(bdf.bus()))),
            }
        }
    }

    /// Reads the dword at `register` (a byte offset, aligned down) of `bdf`.
    pub fn config_read(&self, bdf: Bdf, register: u16) -> Result<u32, RouteError> {
        let r = self.route_config(bdf)?;
        Ok(self.functions[r.target.0 as usize]
            .config
            .read_u32(register & 0xffc))
    }

    /// Writes the dword at `register` of `bdf` with byte enables.
    pub fn config_write(
        &mut self,
        bdf: Bdf,
        register: u16,
        value: u32,
        be: ByteEnables,
    ) -> Result<(), RouteError> {
        let r = self.route_config(bdf)?;
        self.config_write_fn(r.target, register, value, be);
        // Clearing the Function Mask sends what was pending.
        for (address, d) in self.msix_release(r.target) {
            self.memory_write(Origin::Function(r.target), address, &d.to_le_bytes())?;
        }
        Ok(())
    }

    /// Writes the dword at `register` of function `f` with byte enables, as a
    /// configuration write that reached it does: the register's write rules apply, a
    /// Function Level Reset runs, and the function's model sees the write.
    pub fn config_write_fn(&mut self, f: FnId, register: u16, value: u32, be: ByteEnables) {
        self.config_write_fn_flr(f, register, value, be);
    }

    /// [`Fabric::config_write_fn`], telling whether the write started a Function
    /// Level Reset of `f`: its configuration space is back to its defaults (a VF
    /// stays a VF; a PF's VF Enable clears, so its VFs go), and its device model's
    /// [`DeviceModel::function_reset`] has been called about it.
    pub fn config_write_fn_flr(
        &mut self,
        f: FnId,
        register: u16,
        value: u32,
        be: ByteEnables,
    ) -> bool {
        let mut flr = false;
        let func = &mut self.functions[f.0 as usize];
        // SR-IOV: NumVFs is writable only while VF Enable is clear (9.3.3.7: a write
        // while it is set has undefined results; here it is ignored).
        let frozen_numvfs = func.sriov.as_ref().and_then(|s| {
            let at = s.cap + sriov::NUM_VFS;
            let enabled = func.config.read_u16(s.cap + sriov::CONTROL) & sriov::VF_ENABLE != 0;
            (enabled && register & 0xffc == at & 0xffc).then(|| (at, func.config.read_u16(at)))
        });
        func.config.write(register & 0xffc, value, be);
        if let Some((at, old)) = frozen_numvfs {
            func.config.hw_write(at, 2, old as u32);
        }
        // Function Level Reset: Initiate FLR (Device Control bit 15) written as 1.
        if let Some(p) = find_cap(&func.config, pcielab_config::caps::id::PCIE) {
            let devctl = p + pcielab_config::caps::pcie_reg::DEVCTL;
            if func.config.read_u16(devctl) & 0x8000 != 0 {
                func.config.reset();
                func.config.hw_update(devctl, 2, 0x8000, 0);
                if let Some(m) = func.msix.as_mut() {
                    m.reset();
                }
                flr = true;
            }
        }
        if flr {
            // Told while the function's index is still what it was.
            self.call_device(f, |m, cx| m.function_reset(cx));
        }
        if self.functions[f.0 as usize].sriov.is_some() {
            self.sync_vfs(f);
        }
        flr
    }

    /// Makes the VFs of PF `f` what its SR-IOV Control says: when VF Enable is set
    /// and no VF exists, creates min(NumVFs, TotalVFs) VFs (NumVFs above TotalVFs is
    /// undefined in the specification); when it is clear, removes them. VF `i` has
    /// Routing ID PF + First VF Offset + `i` × VF Stride; a VF whose Routing ID would
    /// leave the PF's bus (or land on another function) is not created.
    pub(crate) fn sync_vfs(&mut self, f: FnId) {
        let func = &self.functions[f.0 as usize];
        let Some(s) = func.sriov.as_ref() else {
            return;
        };
        let cs = &func.config;
        let enabled = cs.read_u16(s.cap + sriov::CONTROL) & sriov::VF_ENABLE != 0;
        // Nothing to do when the VFs exist exactly when VF Enable is set.
        if enabled != s.vfs.is_empty() {
            return;
        }
        if !enabled {
            let gone = s.vfs.clone();
            self.remove_functions(&gone);
            if let Some(s) = self.functions[f.0 as usize].sriov.as_mut() {
                s.vfs.clear();
            }
            return;
        }
        let n = cs
            .read_u16(s.cap + sriov::NUM_VFS)
            .min(cs.read_u16(s.cap + sriov::TOTAL_VFS));
        let offset = cs.read_u16(s.cap + sriov::FIRST_VF_OFFSET) as u32;
        let stride = cs.read_u16(s.cap + sriov::VF_STRIDE) as u32;
        let (node, bus, pf_devfn, link) = (func.node, func.bus, func.devfn as u32, func.link);
        let template = s.template.clone();
        let mut made = Vec::new();
        for i in 0..n {
            let devfn = pf_devfn + offset + i as u32 * stride;
            let taken = |d: u32| {
                self.buses[bus.0 as usize]
                    .functions
                    .iter()
                    .any(|&g| self.functions[g.0 as usize].devfn as u32 == d)
            };
            if devfn > 0xff || (i > 0 && stride == 0) || taken(devfn) {
                break;
            }
            let id = FnId(self.functions.len() as u32);
            self.functions.push(Function {
                node,
                role: Role::Endpoint,
                bus,
                devfn: devfn as u8,
                msix: crate::msix::MsixRegion::from_config(&template.config),
                config: template.config.clone(),
                bars: template.bars,
                secondary: None,
                link,
                sriov: None,
                vf: Some(VfOf { pf: f, index: i }),
            });
            self.buses[bus.0 as usize].functions.push(id);
            made.push(id);
        }
        if let Some(s) = self.functions[f.0 as usize].sriov.as_mut() {
            s.vfs = made;
        }
    }

    /// Removes functions (VFs) from the fabric. Function IDs above a removed one move
    /// down to close the gap (bridges and PFs, created before any VF, keep theirs).
    fn remove_functions(&mut self, gone: &[FnId]) {
        if gone.is_empty() {
            return;
        }
        let mut sorted = gone.to_vec();
        sorted.sort_unstable();
        let remap = |x: FnId| FnId(x.0 - sorted.partition_point(|g| g.0 < x.0) as u32);
        for g in sorted.iter().rev() {
            self.functions.remove(g.0 as usize);
        }
        for b in &mut self.buses {
            b.functions.retain(|x| sorted.binary_search(x).is_err());
            for x in &mut b.functions {
                *x = remap(*x);
            }
            b.parent = b.parent.map(remap);
        }
        for func in &mut self.functions {
            if let Some(v) = func.vf.as_mut() {
                v.pf = remap(v.pf);
            }
            if let Some(s) = func.sriov.as_mut() {
                for x in &mut s.vfs {
                    *x = remap(*x);
                }
            }
        }
    }

    /// The VFs of PF `pf` that exist now, in VF order (none unless VF Enable is set).
    pub fn vfs_of(&self, pf: FnId) -> &[FnId] {
        self.functions[pf.0 as usize]
            .sriov
            .as_ref()
            .map_or(&[], |s| &s.vfs[..])
    }

    /// ECAM read: `offset` from the ECAM base (bus << 20 | dev << 15 | fn << 12 | reg),
    /// `len` 1, 2 or 4 bytes. Absent functions read all-ones.
    pub fn ecam_read(&self, offset: u64, len: usize) -> u32 {
        let bdf = Bdf::from_raw(((offset >> 12) & 0xffff) as u16);
        let reg_off = (offset & 0xfff) as u16;
        let ones = if len >= 4 {
            u32::MAX
        } else {
            (1u32 << (8 * len)) - 1
        };
        match self.config_read(bdf, reg_off) {
            Ok(dw) => (dw >> (8 * (reg_off & 3))) & ones,
            Err(_) => ones,
        }
    }

    /// ECAM write of `len` bytes; writes to absent functions are dropped.
    pub fn ecam_write(&mut self, offset: u64, len: usize, value: u32) {
        let bdf = Bdf::from_raw(((offset >> 12) & 0xffff) as u16);
        let reg_off = (offset & 0xfff) as u16;
        let lane = reg_off & 3;
        if !matches!(len, 1 | 2 | 4) || lane as usize + len > 4 {
            return;
        }
        let be = ByteEnables::from_bits_truncate((((1u16 << len) - 1) << lane) as u8);
        let _ = self.config_write(bdf, reg_off, value << (8 * lane), be);
    }

    /// The BAR of `f` that decodes `addr`, as `(bar, offset)`.
    fn bar_claim(&self, f: FnId, addr: u64, space: Space) -> Option<(u8, u64)> {
        let func = &self.functions[f.0 as usize];
        let enable = match space {
            Space::Mem => command::MEMORY,
            Space::Io => command::IO,
        };
        if self.cmd(f) & enable == 0 {
            return None;
        }
        for (i, bar) in func.bars.iter().enumerate() {
            let Some(bar) = bar else { continue };
            let is_io = matches!(bar, Bar::Io { .. });
            if is_io != (space == Space::Io) {
                continue;
            }
            let off = reg::BAR0 + 4 * i as u16;
            let lo = func.config.read_u32(off) as u64;
            let base = match bar {
                Bar::Io { .. } => lo & !3,
                Bar::Mem32 { .. } => lo & !0xf,
                Bar::Mem64 { .. } => (lo & !0xf) | (func.config.read_u32(off + 4) as u64) << 32,
            };
            if addr >= base && addr - base < bar.size() {
                return Some((i as u8, addr - base));
            }
        }
        None
    }

    /// The VF of PF `pf` whose VF BAR decodes `addr`, with `(bar, offset)`: VF BAR n
    /// of VF i is `[base + i × size, base + (i + 1) × size)`, `base` being VF BAR n of
    /// the PF's SR-IOV capability, and decodes while the PF's SR-IOV Control has VF
    /// Enable and VF MSE set. VFs have no I/O space.
    fn vf_claim(&self, pf: FnId, addr: u64, space: Space) -> Option<(FnId, (u8, u64))> {
        let func = &self.functions[pf.0 as usize];
        let s = func.sriov.as_ref()?;
        let on = sriov::VF_ENABLE | sriov::VF_MSE;
        if s.vfs.is_empty()
            || space == Space::Io
            || func.config.read_u16(s.cap + sriov::CONTROL) & on != on
        {
            return None;
        }
        for (n, bar) in s.template.bars.iter().enumerate() {
            let Some(bar) = bar else { continue };
            let off = s.cap + sriov::VF_BAR0 + 4 * n as u16;
            let lo = func.config.read_u32(off) as u64;
            let base = match bar {
                Bar::Io { .. } => continue,
                Bar::Mem32 { .. } => lo & !0xf,
                Bar::Mem64 { .. } => (lo & !0xf) | (func.config.read_u32(off + 4) as u64) << 32,
            };
            let size = bar.size();
            if addr < base {
                continue;
            }
            let i = (addr - base) / size;
            if let Some(&vf) = s.vfs.get(i as usize) {
                return Some((vf, (n as u8, addr - base - i * size)));
            }
        }
        None
    }

    /// True if bridge `f`'s memory windows (non-prefetchable or prefetchable) claim
    /// `addr` (with Memory Space Enable set).
    pub(crate) fn memory_window_claims(&self, f: FnId, addr: u64) -> bool {
        self.window_claim(f, addr, Space::Mem)
    }

    fn window_claim(&self, f: FnId, addr: u64, space: Space) -> bool {
        let cs = &self.functions[f.0 as usize].config;
        let w = BridgeWindows::read(cs);
        let cmd = self.cmd(f);
        let inside = |r: Option<(u64, u64)>| r.is_some_and(|(b, l)| b <= addr && addr <= l);
        match space {
            Space::Mem => cmd & command::MEMORY != 0 && (inside(w.mem) || inside(w.pref)),
            Space::Io => cmd & command::IO != 0 && inside(w.io.map(|(b, l)| (b as u64, l as u64))),
        }
    }

    fn claim_on_bus(
        &self,
        bus: BusId,
        addr: u64,
        space: Space,
        except: Option<FnId>,
    ) -> Option<(FnId, Option<(u8, u64)>)> {
        for &f in &self.buses[bus.0 as usize].functions {
            if self.is_bridge(f) {
                if Some(f) != except && self.window_claim(f, addr, space) {
                    return Some((f, None));
                }
                continue;
            }
            if self.functions[f.0 as usize].vf.is_some() {
                // A VF's BARs are decoded through its PF (below).
                continue;
            }
            if Some(f) != except {
                if let Some(c) = self.bar_claim(f, addr, space) {
                    return Some((f, Some(c)));
                }
            }
            // The PF's VFs, also for a request from the PF itself.
            if let Some((vf, c)) = self.vf_claim(f, addr, space) {
                if Some(vf) != except {
                    return Some((vf, Some(c)));
                }
            }
        }
        None
    }

    fn route_addr(
        &self,
        from: Origin,
        addr: u64,
        space: Space,
        check_bridges: bool,
    ) -> Result<Route<Target>, RouteError> {
        let unclaimed = || match space {
            Space::Mem => RouteError::MemoryUnclaimed(addr),
            Space::Io => RouteError::IoUnclaimed(addr as u32),
        };
        let mut hops = Vec::new();
        let mut bus = BusId(0);
        let mut except = None;
        if let Origin::Function(src) = from {
            if self.cmd(src) & command::BUS_MASTER == 0 {
                return Err(RouteError::BusMasterDisabled(self.bdf(src)));
            }
            bus = self.functions[src.0 as usize].bus;
            except = Some(src);
            // Upstream until some function or bridge on the bus claims the address.
            loop {
                if self.claim_on_bus(bus, addr, space, except).is_some() {
                    break;
                }
                let Some(up) = self.buses[bus.0 as usize].parent else {
                    return match space {
                        Space::Mem => Ok(Route {
                            hops,
                            target: Target::HostMemory(addr),
                        }),
                        Space::Io => Err(unclaimed()),
                    };
                };
                if self.window_claim(up, addr, space) {
                    return Err(unclaimed()); // inside the bridge's window, yet unclaimed below
                }
                if check_bridges && self.cmd(up) & command::BUS_MASTER == 0 {
                    return Err(RouteError::BusMasterDisabled(self.bdf(up)));
                }
                hops.push(up);
                except = Some(up);
                bus = self.functions[up.0 as usize].bus;
            }
        }
        // Downstream.
        loop {
            match self.claim_on_bus(bus, addr, space, except) {
                Some((f, Some((bar, offset)))) => {
                    return Ok(Route {
                        hops,
                        target: Target::Bar {
                            function: f,
                            bar,
                            offset,
                        },
                    })
                }
                Some((f, None)) => {
                    hops.push(f);
                    bus = self.functions[f.0 as usize].secondary.unwrap_or(bus);
                    except = None;
                }
                None => return Err(unclaimed()),
            }
        }
    }

    /// Routes a memory request from `from` to `addr`.
    pub fn route_memory(&self, from: Origin, addr: u64) -> Result<Route<Target>, RouteError> {
        self.route_addr(from, addr, Space::Mem, true)
    }

    /// Routes a memory request (`io` false) or an I/O request from `from` to `addr`
    /// like [`Fabric::route_memory`] and [`Fabric::route_io`], except that a bridge
    /// on the way up with Bus Master Enable clear does not refuse it here: the route
    /// goes through it, for a timed simulation in which the request travels to that
    /// bridge and is refused there (Unsupported Request). The requester's own Bus
    /// Master Enable is checked.
    pub fn route_addr_through_bridges(
        &self,
        from: Origin,
        addr: u64,
        io: bool,
    ) -> Result<Route<Target>, RouteError> {
        let space = if io { Space::Io } else { Space::Mem };
        self.route_addr(from, addr, space, false)
    }

    /// Routes an I/O request.
    pub fn route_io(&self, from: Origin, addr: u32) -> Result<Route<Target>, RouteError> {
        self.route_addr(from, addr as u64, Space::Io, true)
    }

    /// Routes a completion or ID-routed message from `from` to `dest` by bus number.
    pub fn route_id(&self, from: Origin, dest: Bdf) -> Result<Route<FnId>, RouteError> {
        let Origin::Function(src) = from else {
            return self.route_config(dest);
        };
        let mut hops = Vec::new();
        let mut bus = self.functions[src.0 as usize].bus;
        loop {
            let n = self.bus_number(bus);
            let covers = match self.buses[bus.0 as usize].parent {
                None => true,
                Some(p) => {
                    let cs = &self.functions[p.0 as usize].config;
                    n <= dest.bus() && dest.bus() <= cs.read_u8(reg::SUBORDINATE_BUS)
                }
            };
            if covers {
                break;
            }
            let up = self.buses[bus.0 as usize].parent.unwrap_or(FnId(0));
            hops.push(up);
            bus = self.functions[up.0 as usize].bus;
        }
        // From here the request goes down like a configuration request.
        let mut r = self.route_from_bus(bus, dest)?;
        hops.append(&mut r.hops);
        Ok(Route {
            hops,
            target: r.target,
        })
    }

    fn route_from_bus(&self, start: BusId, bdf: Bdf) -> Result<Route<FnId>, RouteError> {
        let mut bus = start;
        let mut hops = Vec::new();
        loop {
            if self.bus_number(bus) == bdf.bus() {
                let devfn = (bdf.raw() & 0xff) as u8;
                return self.buses[bus.0 as usize]
                    .functions
                    .iter()
                    .find(|&&f| self.functions[f.0 as usize].devfn == devfn)
                    .map(|&f| Route { hops, target: f })
                    .ok_or(RouteError::NoFunction(bdf));
            }
            let next = self.buses[bus.0 as usize]
                .functions
                .iter()
                .copied()
                .find(|&f| {
                    let cs = &self.functions[f.0 as usize].config;
                    self.is_bridge(f)
                        && cs.read_u8(reg::SECONDARY_BUS) != 0
                        && cs.read_u8(reg::SECONDARY_BUS) <= bdf.bus()
                        && bdf.bus() <= cs.read_u8(reg::SUBORDINATE_BUS)
                });
            match next {
                Some(b) => {
                    hops.push(b);
                    bus = self.functions[b.0 as usize].secondary.unwrap_or(bus);
                }
                None => return Err(RouteError::NoBus(bdf.bus())),
            }
        }
    }

    /// Routes a TLP by its kind: configuration requests by target bus (Type 1 hops end
    /// at the bridge that converts to Type 0, the last hop), memory and I/O requests and
    /// address-routed messages by address, completions by requester ID, ID-routed
    /// messages by destination ID, messages to the root complex upward.
    ///
    /// ```
    /// use pcielab_fabric::{functional::*, kinds::KindRegistry, topology::Topology};
    /// use pcielab_fabric::host::enumerate::{enumerate, HostConfig};
    /// use pcielab_wire::{tlp::TlpRepr, Bdf, Tag};
    /// let reg = KindRegistry::builtin();
    /// let t = Topology::parse("[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n[[node]]\nname=\"m\"\nkind=\"psmem\"\n\
    ///     [[link]]\nup=\"rc.0\"\ndown=\"m\"\ngen=3\nwidth=4\n", "doc.toml", &reg).unwrap();
    /// let mut f = Fabric::build(&t, &reg).unwrap();
    /// enumerate(&mut f, &HostConfig::default()).unwrap();
    /// let host = Bdf::new(0, 0, 0).unwrap();
    /// let rd = TlpRepr::mem_read(host, Tag::new(1).unwrap(), 0x40_0000_0010, 1).unwrap();
    /// let r = f.route_tlp(Origin::Host, &rd).unwrap();
    /// assert_eq!(f.name(r.hops[0]), "rc.0");
    /// assert!(matches!(r.target, TlpDestination::Function { bar: Some((0, 0x10)), .. }));
    /// ```
    pub fn route_tlp(
        &self,
        from: Origin,
        tlp: &TlpRepr<'_>,
    ) -> Result<Route<TlpDestination>, RouteError> {
        let by_addr = |r: Route<Target>| Route {
            hops: r.hops,
            target: match r.target {
                Target::Bar {
                    function,
                    bar,
                    offset,
                } => TlpDestination::Function {
                    function,
                    bar: Some((bar, offset)),
                },
                Target::HostMemory(a) => TlpDestination::HostMemory(a),
            },
        };
        let by_id = |r: Route<FnId>| Route {
            hops: r.hops,
            target: if self.functions[r.target.0 as usize].role == Role::HostBridge {
                TlpDestination::RootComplex
            } else {
                TlpDestination::Function {
                    function: r.target,
                    bar: None,
                }
            },
        };
        match tlp.header {
            TlpHeader::Cfg(h) => match from {
                Origin::Host => self.route_config(h.target).map(by_id),
                Origin::Function(_) => Err(RouteError::NotRoutable(
                    "configuration requests come only from the root complex",
                )),
            },
            TlpHeader::Mem(h) => self.route_memory(from, h.address & !3).map(by_addr),
            TlpHeader::Io(h) => self.route_io(from, h.address & !3).map(by_addr),
            TlpHeader::Cpl(h) => self.route_id(from, h.requester_id).map(by_id),
            TlpHeader::Msg(h) => match h.routing {
                MsgRouting::ById => self.route_id(from, h.fields.destination_id()).map(by_id),
                MsgRouting::ByAddress => self.route_memory(from, h.fields.u64()).map(by_addr),
                MsgRouting::Local => Ok(Route {
                    hops: Vec::new(),
                    target: TlpDestination::Receiver,
                }),
                MsgRouting::ToRc | MsgRouting::Gathered => match from {
                    Origin::Host => Err(RouteError::NotRoutable(
                        "a message to the root complex from the root complex",
                    )),
                    Origin::Function(f) => {
                        let mut hops = Vec::new();
                        let mut bus = self.functions[f.0 as usize].bus;
                        while let Some(up) = self.buses[bus.0 as usize].parent {
                            hops.push(up);
                            bus = self.functions[up.0 as usize].bus;
                        }
                        Ok(Route {
                            hops,
                            target: TlpDestination::RootComplex,
                        })
                    }
                },
                MsgRouting::Broadcast => match from {
                    Origin::Host => Ok(Route {
                        hops: Vec::new(),
                        target: TlpDestination::Broadcast,
                    }),
                    Origin::Function(_) => Err(RouteError::NotRoutable(
                        "broadcast messages come only from the root complex",
                    )),
                },
            },
        }
    }

    /// A memory read from `from` at `addr`.
    pub fn memory_read(
        &mut self,
        from: Origin,
        addr: u64,
        buf: &mut [u8],
    ) -> Result<(), RouteError> {
        if from == Origin::Host && (ECAM_BASE..ECAM_BASE + ECAM_SIZE).contains(&addr) {
            for (i, b) in buf.iter_mut().enumerate() {
                *b = self.ecam_read(addr - ECAM_BASE + i as u64, 1) as u8;
            }
            return Ok(());
        }
        match self.route_memory(from, addr)?.target {
            Target::HostMemory(a) => {
                self.host_memory.read(a, buf);
                Ok(())
            }
            Target::Bar {
                function,
                bar,
                offset,
            } => {
                let func = &mut self.functions[function.0 as usize];
                if func.msix.as_ref().is_some_and(|m| m.read(bar, offset, buf)) {
                    return Ok(());
                }
                match self.call_device(function, |m, cx| m.mem_read(bar, offset, buf, cx)) {
                    Some(ReadReply::Now) => Ok(()),
                    _ => Err(RouteError::Refused(self.bdf(function))),
                }
            }
        }
    }

    /// A memory write from `from` at `addr`.
    ///
    /// From the host, addresses in the ECAM window are configuration writes. From a
    /// function, writes that reach the root complex in [`MSI_RANGE`] are interrupts,
    /// recorded in [`Fabric::interrupts`].
    pub fn memory_write(&mut self, from: Origin, addr: u64, data: &[u8]) -> Result<(), RouteError> {
        if from == Origin::Host && (ECAM_BASE..ECAM_BASE + ECAM_SIZE).contains(&addr) {
            for (i, &b) in data.iter().enumerate() {
                self.ecam_write(addr - ECAM_BASE + i as u64, 1, b as u32);
            }
            return Ok(());
        }
        match self.route_memory(from, addr)?.target {
            Target::HostMemory(a) => {
                match from {
                    Origin::Function(f) if (MSI_RANGE.0..=MSI_RANGE.1).contains(&a) => {
                        let mut d = [0u8; 4];
                        for (x, y) in d.iter_mut().zip(data) {
                            *x = *y;
                        }
                        self.interrupts.push(Interrupt {
                            from: self.bdf(f),
                            address: a,
                            data: u32::from_le_bytes(d),
                        });
                    }
                    _ => self.host_memory.write(a, data),
                }
                Ok(())
            }
            Target::Bar {
                function,
                bar,
                offset,
            } => {
                let func = &mut self.functions[function.0 as usize];
                if func
                    .msix
                    .as_mut()
                    .is_some_and(|m| m.write(bar, offset, data))
                {
                    // Unmasking a vector sends what was pending.
                    for (address, d) in self.msix_release(function) {
                        self.memory_write(Origin::Function(function), address, &d.to_le_bytes())?;
                    }
                    return Ok(());
                }
                self.call_device(function, |m, cx| m.mem_write(bar, offset, data, cx))
                    .ok_or_else(|| RouteError::Refused(self.bdf(function)))
            }
        }
    }

    /// Raises MSI-X vector `vector` of function `f` the way its hardware would: the
    /// table entry's address and data if MSI-X is enabled and neither the function nor
    /// the vector is masked; otherwise the pending bit is set.
    pub fn raise_msix(&mut self, f: FnId, vector: u16) -> Result<Signal, RouteError> {
        let msg = self.msix_message(f, vector);
        self.send_message(f, msg)
    }

    /// Delivers function `f`'s interrupt message write, if there is one.
    fn send_message(
        &mut self,
        f: FnId,
        msg: Result<(u64, u32), Signal>,
    ) -> Result<Signal, RouteError> {
        match msg {
            Ok((address, data)) => {
                self.memory_write(Origin::Function(f), address, &data.to_le_bytes())?;
                Ok(Signal::Sent)
            }
            Err(s) => Ok(s),
        }
    }

    /// What raising MSI-X vector `vector` of function `f` sends: `Ok((address, data))`
    /// for the message write (the caller delivers it), or why nothing is sent
    /// (`Pending`: the pending bit is now set; `Disabled`).
    pub fn msix_message(&mut self, f: FnId, vector: u16) -> Result<(u64, u32), Signal> {
        let cs = &self.functions[f.0 as usize].config;
        let Some(cap) = find_cap(cs, pcielab_config::caps::id::MSIX) else {
            return Err(Signal::Disabled);
        };
        let ctl = cs.read_u16(cap + 2);
        if ctl & 0x8000 == 0 || vector > ctl & 0x7ff {
            return Err(Signal::Disabled);
        }
        let Some(region) = self.functions[f.0 as usize].msix.as_mut() else {
            return Err(Signal::Disabled);
        };
        let table = &mut region.table;
        let Some((address, data, masked)) = table.entry(vector as usize) else {
            return Err(Signal::Disabled);
        };
        if masked || ctl & 0x4000 != 0 {
            table.set_pending(vector as usize, true);
            return Err(Signal::Pending);
        }
        table.set_pending(vector as usize, false);
        Ok((address, data))
    }

    /// How many functions node `node`'s device can have: its own endpoint functions
    /// plus the TotalVFs of each of them that has an SR-IOV capability (whether or
    /// not the VFs are enabled now), as [`Fabric::device_functions`] numbers them.
    pub fn function_capacity(&self, node: NodeId) -> u32 {
        self.functions
            .iter()
            .filter(|f| f.node == node && f.vf.is_none() && f.role == Role::Endpoint)
            .map(|f| {
                1 + f.sriov.as_ref().map_or(0, |s| {
                    u32::from(f.config.read_u16(s.cap + sriov::TOTAL_VFS))
                })
            })
            .sum()
    }

    /// The functions of device (topology node) `node` in the order its model numbers
    /// them ([`pcielab_device::Cx::function`]): its own functions by function number,
    /// then the VFs of each PF in order.
    pub fn device_functions(&self, node: NodeId) -> Vec<FnId> {
        let mut own: Vec<FnId> = (0..self.functions.len())
            .map(|i| FnId(i as u32))
            .filter(|f| {
                let func = &self.functions[f.0 as usize];
                func.node == node && func.vf.is_none() && func.role == Role::Endpoint
            })
            .collect();
        own.sort_by_key(|f| self.functions[f.0 as usize].devfn);
        let vfs: Vec<FnId> = own
            .iter()
            .flat_map(|&pf| self.vfs_of(pf).iter().copied())
            .collect();
        own.extend(vfs);
        own
    }

    /// The device model of endpoint node `node`, if it has one.
    pub fn device(&mut self, node: NodeId) -> Option<&mut (dyn DeviceModel + 'static)> {
        self.devices.get_mut(node.0 as usize)?.as_deref_mut()
    }

    /// Commands device models gave the functional fabric, which it does not carry out
    /// (DMA, interrupts, timers: the timed simulator does).
    pub fn dropped_device_commands(&self) -> u64 {
        self.scratch.dropped
    }

    /// Calls the device model of function `f`'s node about `f` (zero time; commands
    /// it gives are counted in [`Fabric::dropped_device_commands`]). `None` when the
    /// node has no model.
    pub fn call_device<R>(
        &mut self,
        f: FnId,
        call: impl FnOnce(&mut dyn DeviceModel, &mut pcielab_device::Cx<'_>) -> R,
    ) -> Option<R> {
        let node = self.functions[f.0 as usize].node;
        let index = self.device_functions(node).iter().position(|&g| g == f)? as u16;
        let bdf = self.bdf(f);
        let model = self.devices.get_mut(node.0 as usize)?.as_deref_mut()?;
        let func = &mut self.functions[f.0 as usize];
        let sc = &mut self.scratch;
        let mut cx = pcielab_device::Cx::new(
            pcielab_sim::SimTime::ZERO,
            (index, bdf),
            &mut sc.cmds,
            &mut sc.state,
            Some(&mut func.config),
            &mut sc.spare,
        );
        let r = call(model, &mut cx);
        sc.dropped += sc.cmds.len() as u64;
        sc.cmds.clear();
        Some(r)
    }

    /// The MSI-X messages of function `f` that were pending and may go now (software
    /// unmasked their vectors or the function, see [`crate::msix`]); their pending
    /// bits clear. The caller sends them.
    pub fn msix_release(&mut self, f: FnId) -> Vec<(u64, u32)> {
        let func = &mut self.functions[f.0 as usize];
        match func.msix.as_mut() {
            Some(m) => m.release_pending(&func.config),
            None => Vec::new(),
        }
    }

    /// Raises MSI vector `vector` (0-based, below the enabled count) of function `f`:
    /// Message Data with the vector number in its low bits, unless masked.
    pub fn raise_msi(&mut self, f: FnId, vector: u8) -> Result<Signal, RouteError> {
        let msg = self.msi_message(f, vector);
        self.send_message(f, msg)
    }

    /// What raising MSI vector `vector` of function `f` sends: `Ok((address, data))`
    /// for the message write (the caller delivers it), or why nothing is sent
    /// (`Pending`: the pending bit is now set; `Disabled`).
    pub fn msi_message(&mut self, f: FnId, vector: u8) -> Result<(u64, u32), Signal> {
        let cs = &mut self.functions[f.0 as usize].config;
        let Some(cap) = find_cap(cs, pcielab_config::caps::id::MSI) else {
            return Err(Signal::Disabled);
        };
        let ctl = cs.read_u16(cap + 2);
        let enabled = 1u32 << ((ctl >> 4) & 7);
        if ctl & 1 == 0 || vector as u32 >= enabled {
            return Err(Signal::Disabled);
        }
        let a64 = ctl & 0x80 != 0;
        let mut address = cs.read_u32(cap + 4) as u64;
        if a64 {
            address |= (cs.read_u32(cap + 8) as u64) << 32;
        }
        let data_off = if a64 { cap + 0xc } else { cap + 8 };
        let data = (cs.read_u16(data_off) as u32 & !(enabled - 1)) | vector as u32;
        if ctl & 0x100 != 0 {
            let mask = cs.read_u32(data_off + 4);
            if mask & (1 << vector) != 0 {
                let pend = cs.read_u32(data_off + 8);
                cs.hw_write(data_off + 8, 4, pend | 1 << vector);
                return Err(Signal::Pending);
            }
        }
        Ok((address, data))
    }

    /// The function at `bdf`, as currently numbered.
    pub fn function_at(&self, bdf: Bdf) -> Option<FnId> {
        self.route_config(bdf).ok().map(|r| r.target)
    }

    /// Every function's configuration space in `lspci -xxxx` format, ordered by ID.
    pub fn lspci_dump(&self) -> String {
        let mut ids: Vec<(Bdf, FnId)> = (0..self.functions.len())
            .map(|i| FnId(i as u32))
            .filter(|&f| self.function_at(self.bdf(f)) == Some(f))
            .map(|f| (self.bdf(f), f))
            .collect();
        ids.sort();
        let mut out = String::new();
        for (bdf, f) in ids {
            let cs = &self.functions[f.0 as usize].config;
            let class = cs.read(reg::CLASS, 3);
            let desc = format!(
                "{}: pcielab {}",
                pcielab_config::decode::class_name(class),
                self.name(f)
            );
            match self.vf_ids(f) {
                // A VF's Vendor ID and Device ID read FFFFh; the dump shows the IDs
                // Linux gives the VF (PF's Vendor ID, VF Device ID), as `lspci` on a
                // Linux host names it.
                Some((vendor, device)) => {
                    let mut bytes = *cs.bytes();
                    bytes[0..2].copy_from_slice(&vendor.to_le_bytes());
                    bytes[2..4].copy_from_slice(&device.to_le_bytes());
                    pcielab_config::lspci::write_dump(&mut out, None, bdf, &desc, &bytes);
                }
                None => pcielab_config::lspci::write_dump(&mut out, None, bdf, &desc, cs.bytes()),
            }
        }
        out
    }

    /// For a VF: the Vendor ID and Device ID software gives it (its PF's Vendor ID
    /// and the VF Device ID of the PF's SR-IOV capability); its own registers read
    /// FFFFh.
    pub fn vf_ids(&self, f: FnId) -> Option<(u16, u16)> {
        let vf = self.functions[f.0 as usize].vf?;
        let pf = &self.functions[vf.pf.0 as usize];
        let cap = pf.sriov.as_ref()?.cap;
        Some((
            pf.config.read_u16(reg::VENDOR_ID),
            pf.config.read_u16(cap + sriov::VF_DEVICE_ID),
        ))
    }
}

/// Finds an extended capability by walking the list in `cs`.
fn find_ext_cap(cs: &ConfigSpace, id: u16) -> Option<u16> {
    pcielab_config::caps::walk(cs.bytes())
        .0
        .into_iter()
        .find(|c| c.extended && c.id == id)
        .map(|c| c.offset)
}

/// Finds a PCI capability by walking the list in `cs`.
fn find_cap(cs: &ConfigSpace, id: u8) -> Option<u16> {
    pcielab_config::caps::find(cs.bytes(), id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Topology;

    fn page_of(b: u8) -> Vec<u8> {
        let mut v = Vec::with_capacity(4096);
        v.resize(4096, b);
        v
    }

    #[test]
    fn a_whole_page_write_hands_its_buffer_over() {
        let mut m = HostMemory::default();
        m.write(0x2000, &[7; 16]);
        let mut buf = page_of(1);
        assert!(m.write_page_from(0x2000, &mut buf, false));
        // The buffer now holds the page's old storage.
        assert_eq!(&buf[..16], &[7; 16]);
        let mut got = [0u8; 4096];
        m.read(0x2000, &mut got);
        assert_eq!(got, [1; 4096]);
        // A page never written before: the buffer comes back empty.
        let mut buf = page_of(2);
        assert!(m.write_page_from(0x9000, &mut buf, false));
        assert!(buf.is_empty());
        // Not aligned, not 4096 bytes, or a larger allocation: refused, unchanged.
        let mut large = Vec::with_capacity(8192);
        large.resize(4096, 3);
        for (addr, mut b) in [
            (0x2004, page_of(3)),
            (0x2000, vec![3; 4095]),
            (0x2000, large),
        ] {
            assert!(!m.write_page_from(addr, &mut b, false));
            assert!(!b.is_empty());
        }
        m.read(0x2000, &mut got);
        assert_eq!(got, [1; 4096]);
        assert_eq!(m.loaned(0x2000), None);
    }

    #[test]
    fn a_page_on_loan_keeps_the_lenders_bytes() {
        let mut m = HostMemory::default();
        let mut buf = page_of(5);
        assert!(m.write_page_from(0x4000, &mut buf, true));
        assert_eq!(m.loaned(0x4000), Some(&[5u8; 4096][..]));
        assert_eq!(m.loaned(0x4fff), Some(&[5u8; 4096][..]));
        // A second whole-page write while on loan is refused (it is written as usual).
        let mut again = page_of(6);
        assert!(!m.write_page_from(0x4000, &mut again, true));
        // Overwriting part of the page: the lender still sees its bytes, readers the new.
        m.write(0x4ffe, &[9, 9, 9, 9]);
        assert_eq!(m.loaned(0x4000), Some(&[5u8; 4096][..]));
        let mut got = [0u8; 4];
        m.read(0x4ffc, &mut got);
        assert_eq!(got, [5, 5, 9, 9]);
        m.read(0x5000, &mut got);
        assert_eq!(got, [9, 9, 0, 0]);
        // A copy keeps its loans apart.
        let c = m.clone();
        m.end_loan(0x4000);
        assert_eq!(m.loaned(0x4000), None);
        assert_eq!(c.loaned(0x4000), Some(&[5u8; 4096][..]));
        // Then whole-page writes hand buffers over again.
        assert!(m.write_page_from(0x4000, &mut again, false));
    }

    #[test]
    fn unprogrammed_fabric_sees_only_bus_zero() {
        let t = Topology::parse(
            "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\nports=3\n",
            "t.toml",
            &KindRegistry::builtin(),
        )
        .unwrap();
        let f = Fabric::build(&t, &KindRegistry::builtin()).unwrap();
        assert_eq!(f.functions.len(), 4);
        // 00:00.0 host bridge, 00:01.0..00:03.0 root ports; 00:04.0 absent.
        assert_eq!(f.ecam_read(0, 4), 0x0001_1fee);
        assert_eq!(f.ecam_read(3 << 15, 2), 0x1fee);
        assert_eq!(f.ecam_read(4 << 15, 4), 0xffff_ffff);
        assert_eq!(f.ecam_read(4 << 15, 1), 0xff);
        assert_eq!(f.ecam_read(0xe, 1), 0x00); // header type 0
        assert_eq!(f.ecam_read((1 << 15) | 0xe, 1), 0x01);
        assert_eq!(
            f.route_memory(Origin::Host, 0x1000),
            Err(RouteError::MemoryUnclaimed(0x1000))
        );
    }
}
