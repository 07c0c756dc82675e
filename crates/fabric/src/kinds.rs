//! Node kinds: which keys each kind takes (with types and defaults) and how an endpoint
//! kind builds its functions. Later issues register new kinds here without touching
//! the loader.
//!
//! Built-in kinds and their keys (every kind also takes `name` and `kind`; the user
//! documentation of every key is the table in `docs/design.md`, which a test compares
//! with this registry):
//!
//! | kind | key | type | default | meaning |
//! |------|-----|------|---------|---------|
//! | all | `max_gen` | 1..=6 | the link's | highest generation the node's ports support |
//! | all | `max_width` | 1,2,4,8,16,32 | the link's | widest link the node's ports support |
//! | all | `mps` | 128..=4096 | 256 (psmem 512) | Max_Payload_Size supported, bytes |
//! | all | `aspm` | "none", "l0s", "l1", "l0s-l1" | "l0s-l1" | ASPM states the node's ports support (software enables them in Link Control) |
//! | all | `vendor_id`, `device_id` | 0..=0xffff | 0x1fee, per kind | identification |
//! | root-complex | `ports` | 1..=31 | 1 | root ports (devices 1..=ports on bus 0) |
//! | root-complex | `hotplug` | bool | false | root ports are hot-plug slots with surprise removal (`FabricSim::unplug`/`plug`) |
//! | root-complex | `hotplug_power` | bool | false | root ports are hot-plug slots with a power controller, an attention button and indicators, for orderly removal (`FabricSim::press_attention_button`); implies `hotplug` |
//! | root-complex | `atomics` | bool | true | root ports complete 32- and 64-bit AtomicOps and 128-bit CAS for host memory (Device Capabilities 2) |
//! | switch | `ports` | 1..=32 | 1 | downstream ports |
//! | switch | `hotplug` | bool | false | downstream ports are hot-plug slots with surprise removal |
//! | switch | `hotplug_power` | bool | false | downstream ports are hot-plug slots with a power controller, an attention button and indicators; implies `hotplug` |
//! | psmem | `bar_size` | power of two | "1MiB" | memory BAR size |
//! | psmem | `prefetchable` | bool | true | memory BAR prefetchable |
//! | psmem | `bar64` | bool | true | memory BAR is 64-bit |
//! | psmem | `msix_vectors` | 1..=2048 | 4 | MSI-X table entries (own 32-bit BAR) |
//! | psmem | `io_size` | 0 or 4..=256 | 0 | I/O BAR size (0: none) |
//! | psmem | `rom_size` | 0 or a power of two ≥ 2048 | 0 | expansion ROM size (0: none) |
//! | psmem | `sriov_vfs` | 0..=255 | 0 | TotalVFs of an SR-IOV capability (0: none) |
//! | psmem | `vfs` | 0..=TotalVFs | 0 | VFs host enumeration enables (as writing `sriov_numvfs` does); with `vfs` > 0 and no `sriov_vfs`, TotalVFs = `vfs` |
//! | psmem | `pme` | bool | false | the PM capability advertises PME from D0 and D3hot (PME_En writable) |
//! | psmem | `atomics` | bool | false | the memory BAR completes 32- and 64-bit AtomicOps and 128-bit CAS from peers (Device Capabilities 2) |
//! | simple-nic | `mac` | "loopback", "none" | "loopback" | the MAC side: frames sent come back, or are dropped (counted) |
//! | simple-nic | `ring_entries` | 1..=65536 | 1024 | descriptors per ring (larger indexes refused, counted) |
//! | simple-nic | `max_frame` | 1..=65536 | 4096 | largest frame, bytes |
//! | simple-nic | `rx_fifo` | 0..=4096 | 64 | frames kept while no RX buffer is posted (0: dropped at once) |
//! | d2d-ssd, d2d-nic | `streams`, `clock_mhz`, `datapath_bits`, `tlp_cycles` | see [`d2d`] | 4, 125, 64, 17 | streams, PCIe datapath (seed 004 §IV) |
//! | d2d-ssd | `media_latency_ns`, `media_mbps`, `inflight`, `seed` | see [`d2d`] | 0, 10240, 2, 0 | media model, chunks in flight, content |
//! | d2d-nic | `rx_queue`, `eth_gbps`, `tx_frames`, `uoe_mhz`, `uoe_bits`, `cable` | see [`d2d`] | 128 KiB, 10, 4, 160, 64, "" | Rx Queue, MAC, offload engine, cable |
//!
//! ```
//! use pcielab_fabric::kinds::KindRegistry;
//! let reg = KindRegistry::builtin();
//! assert_eq!(
//!     reg.names(),
//!     vec!["root-complex", "switch", "psmem", "nic", "simple-nic", "dma-engine", "d2d-ssd", "d2d-nic"]
//! );
//! ```

use pcielab_config::caps::{CapabilityList, MsiCap, MsixCap, MsixTable, PcieCap, PmCap};
use pcielab_config::ext_caps::{
    AerCap, AriCap, AtsCap, DsnCap, LtrCap, PasidCap, PriCap, SriovCap,
};
use pcielab_config::header::VfHeader;
use pcielab_config::{Bar, Ids, Type0, PCIELAB_VENDOR_ID};
use std::collections::BTreeMap;

mod builtin;
pub mod d2d;
pub mod dma_engine;

/// A value of a kind-specific key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParamValue {
    /// An integer (sizes are integers in bytes).
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// A string.
    Str(String),
}

impl ParamValue {
    /// The integer, if it is one.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            ParamValue::Int(n) => Some(*n),
            _ => None,
        }
    }
}

/// The checked keys of one node, defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Params {
    values: BTreeMap<String, (ParamValue, usize)>,
}

impl Params {
    /// Sets a key (with the line it came from, 0 for a default).
    pub fn set(&mut self, key: &str, value: ParamValue, line: usize) {
        self.values.insert(key.to_string(), (value, line));
    }
    /// True when the key is set.
    pub fn contains(&self, key: &str) -> bool {
        self.values.contains_key(key)
    }
    /// An integer key.
    pub fn int(&self, key: &str) -> Option<i64> {
        self.values.get(key).and_then(|(v, _)| v.as_int())
    }
    /// A boolean key.
    pub fn bool(&self, key: &str) -> Option<bool> {
        match self.values.get(key) {
            Some((ParamValue::Bool(b), _)) => Some(*b),
            _ => None,
        }
    }
    /// A string key.
    pub fn str(&self, key: &str) -> Option<&str> {
        match self.values.get(key) {
            Some((ParamValue::Str(s), _)) => Some(s),
            _ => None,
        }
    }
    /// The line a key was written on (0 for defaults).
    pub fn line(&self, key: &str) -> usize {
        self.values.get(key).map_or(0, |(_, l)| *l)
    }
    /// Every key and value.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &ParamValue)> {
        self.values.iter().map(|(k, (v, _))| (k.as_str(), v))
    }
}

/// The type of a key, which also says what is allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    /// An integer in `min..=max`.
    Int {
        /// Smallest allowed.
        min: i64,
        /// Largest allowed.
        max: i64,
    },
    /// `true` or `false`.
    Bool,
    /// A string.
    Str,
    /// A byte size: an integer or a string like `"64KiB"`.
    Size {
        /// Smallest allowed.
        min: u64,
        /// Largest allowed.
        max: u64,
        /// Must be a power of two.
        pow2: bool,
    },
    /// A PCIe generation 1..=6.
    Gen,
    /// One of the listed strings.
    Choice(&'static [&'static str]),
    /// A link width: 1, 2, 4, 8, 16 or 32.
    Width,
}

fn human(n: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if n >= 1 << shift && n % (1 << shift) == 0 {
            return format!("{} {unit}", n >> shift);
        }
    }
    format!("{n} B")
}

impl KeyType {
    /// What is allowed, in words.
    pub fn describe(&self) -> String {
        match *self {
            KeyType::Int { min, max } => format!("an integer in {min}..={max}"),
            KeyType::Bool => "true or false".into(),
            KeyType::Str => "a string".into(),
            KeyType::Size { min, max, pow2 } => format!(
                "{} from {} to {} (e.g. \"64KiB\", \"16MiB\")",
                if pow2 { "a power of two" } else { "a size" },
                human(min),
                human(max)
            ),
            KeyType::Gen => "1..=6".into(),
            KeyType::Width => "1, 2, 4, 8, 16, 32".into(),
            KeyType::Choice(names) => names
                .iter()
                .map(|n| format!("{n:?}"))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

/// One key a kind accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySpec {
    /// Key name.
    pub name: &'static str,
    /// Type and range.
    pub ty: KeyType,
    /// Default value; `None` means "absent unless given".
    pub default: Option<ParamValue>,
    /// One line of documentation.
    pub doc: &'static str,
}

/// What an endpoint kind gets to build its functions.
#[derive(Debug)]
pub struct EndpointCtx<'a> {
    /// The node's name.
    pub name: &'a str,
    /// The node's keys, defaults filled in.
    pub params: &'a Params,
    /// A PCI Express capability already filled in for this node's link and limits
    /// (type Endpoint, MPS supported, speed/width supported and trained).
    pub pcie: PcieCap,
    /// A serial number unique in the topology (for a Device Serial Number capability).
    pub serial: u64,
}

/// Why an endpoint kind cannot build a node: the key at fault (if one is) and what is
/// wrong. The loader adds the file and the key's line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindError {
    /// The key at fault.
    pub key: Option<&'static str>,
    /// What is wrong and what is allowed.
    pub message: String,
}

impl KindError {
    /// An error about one key.
    pub fn key(key: &'static str, message: impl Into<String>) -> KindError {
        KindError {
            key: Some(key),
            message: message.into(),
        }
    }
}

impl From<String> for KindError {
    fn from(message: String) -> KindError {
        KindError { key: None, message }
    }
}

/// The L1 PM Substates timing of every port (an assumption; Linux programs the larger
/// of a link's two ends).
pub(crate) const PORT_L1SS: pcielab_config::ext_caps::L1ssCap = pcielab_config::ext_caps::L1ssCap {
    common_mode_restore_us: 10,
    t_power_on_us: 10,
};

/// A function as an endpoint kind builds it.
#[derive(Debug)]
pub struct HwFunction {
    /// Device and function number (`device << 3 | function`) on its bus.
    pub devfn: u8,
    /// Its configuration space, capabilities installed.
    pub config: pcielab_config::ConfigSpace,
    /// The BARs its header declares (what the fabric decodes).
    pub bars: [Option<Bar>; 6],
    /// For a PF with an SR-IOV capability: what its VFs are made of.
    pub vfs: Option<VfTemplate>,
}

/// What the VFs of a PF are made of (SR-IOV): the fabric creates one function from it
/// per VF when software sets VF Enable in the PF's SR-IOV capability, and removes them
/// when software clears it.
#[derive(Debug, Clone)]
pub struct VfTemplate {
    /// The configuration space each VF starts with (header from
    /// [`pcielab_config::header::VfHeader`], capabilities installed).
    pub config: pcielab_config::ConfigSpace,
    /// The VF BARs of the PF's SR-IOV capability, with per-VF sizes: VF BAR `n` of VF
    /// `i` decodes `[base + i * size, base + (i + 1) * size)`, where `base` is what
    /// software wrote to VF BAR `n` of the capability.
    pub bars: [Option<Bar>; 6],
}

/// What an endpoint kind builds for a node: the device's functions (configuration
/// spaces, BARs, SR-IOV templates) and its model, the one
/// [`pcielab_device::DeviceModel`] that every host runs (the functional fabric, the
/// timed simulator, the NetTLP device runtime).
#[derive(Debug)]
pub struct Device {
    /// Its functions, function 0 first.
    pub functions: Vec<HwFunction>,
    /// Its behaviour behind every function's BARs (calls say which function with
    /// [`pcielab_device::Cx::function`]). `None`: requests to its BARs end in
    /// Unsupported Request.
    pub model: Option<Box<dyn pcielab_device::DeviceModel>>,
}

impl Device {
    /// A single-function device: function 0 with configuration space `config`, its
    /// `bars` and, for an SR-IOV PF, its `vfs`, behind `model`.
    pub fn single(
        config: pcielab_config::ConfigSpace,
        bars: [Option<Bar>; 6],
        vfs: Option<VfTemplate>,
        model: impl pcielab_device::DeviceModel + 'static,
    ) -> Device {
        Device {
            functions: vec![HwFunction {
                devfn: 0,
                config,
                bars,
                vfs,
            }],
            model: Some(Box::new(model)),
        }
    }
}

/// Builds the device of an endpoint kind, or says why it cannot.
pub type EndpointBuilder = fn(&EndpointCtx<'_>) -> Result<Device, KindError>;

/// What a kind is in the hierarchy.
#[derive(Debug, Clone, Copy)]
pub enum KindRole {
    /// The root complex: host bridge and root ports on bus 0.
    RootComplex,
    /// A switch: an upstream port and `ports` downstream ports.
    Switch,
    /// An endpoint device built by the function.
    Endpoint(EndpointBuilder),
}

/// A registered kind.
#[derive(Debug, Clone)]
pub struct KindSpec {
    /// The `kind = "…"` name.
    pub name: &'static str,
    /// Role in the hierarchy.
    pub role: KindRole,
    /// Keys accepted besides `name` and `kind`.
    pub keys: Vec<KeySpec>,
    /// One line of documentation.
    pub doc: &'static str,
}

/// The kinds a topology file may use.
#[derive(Debug, Clone, Default)]
pub struct KindRegistry {
    kinds: Vec<KindSpec>,
}

fn key(name: &'static str, ty: KeyType, default: Option<ParamValue>, doc: &'static str) -> KeySpec {
    KeySpec {
        name,
        ty,
        default,
        doc,
    }
}

/// An integer key in `min..=max` with a default.
pub(crate) fn int_key(
    name: &'static str,
    min: i64,
    max: i64,
    default: i64,
    doc: &'static str,
) -> KeySpec {
    key(
        name,
        KeyType::Int { min, max },
        Some(ParamValue::Int(default)),
        doc,
    )
}

/// The values of the `aspm` key: the Active State Power Management states a node's
/// ports support.
pub const ASPM_CHOICES: &[&str] = &["none", "l0s", "l1", "l0s-l1"];

/// The keys every kind accepts, with the kind's default MPS and device ID.
pub fn common_keys(mps: i64, device_id: i64) -> Vec<KeySpec> {
    vec![
        key(
            "max_gen",
            KeyType::Gen,
            None,
            "highest generation the ports support (default: the link's)",
        ),
        key(
            "max_width",
            KeyType::Width,
            None,
            "widest link the ports support (default: the link's)",
        ),
        key(
            "mps",
            KeyType::Size {
                min: 128,
                max: 4096,
                pow2: true,
            },
            Some(ParamValue::Int(mps)),
            "largest Max_Payload_Size supported, in bytes",
        ),
        key(
            "aspm",
            KeyType::Choice(ASPM_CHOICES),
            Some(ParamValue::Str("l0s-l1".into())),
            "ASPM states the ports support (Link Capabilities); software enables them",
        ),
        int_key(
            "vendor_id",
            0,
            0xfffe,
            PCIELAB_VENDOR_ID as i64,
            "PCI vendor ID",
        ),
        int_key("device_id", 0, 0xffff, device_id, "PCI device ID"),
    ]
}

/// Device IDs of the built-in hardware.
pub mod device_ids {
    /// Host bridge of the root complex.
    pub const HOST_BRIDGE: u16 = 0x0001;
    /// Root port.
    pub const ROOT_PORT: u16 = 0x0002;
    /// Switch upstream port.
    pub const SWITCH_UP: u16 = 0x0003;
    /// Switch downstream port.
    pub const SWITCH_DOWN: u16 = 0x0004;
    /// psmem.
    pub const PSMEM: u16 = 0x0010;
    /// psmem virtual function.
    pub const PSMEM_VF: u16 = 0x0011;
    /// The pcie-bench NIC (`nic`).
    pub const NIC: u16 = 0x0020;
    /// simple-nic (NetTLP's simple NIC; upstream's board is 3776:8022).
    pub const SIMPLE_NIC: u16 = 0x0022;
    /// The SR-IOV DMA engine of seed 003 (`dma-engine`), physical function.
    pub const DMA_ENGINE: u16 = 0x0030;
    /// The SR-IOV DMA engine's virtual function.
    pub const DMA_ENGINE_VF: u16 = 0x0031;
    /// The D2D sender of seed 004 (`d2d-ssd`).
    pub const D2D_SSD: u16 = 0x0040;
    /// The D2D receiver of seed 004 (`d2d-nic`).
    pub const D2D_NIC: u16 = 0x0041;
}

impl KindRegistry {
    /// An empty registry.
    pub fn new() -> KindRegistry {
        KindRegistry::default()
    }

    /// Adds (or replaces) a kind.
    pub fn register(&mut self, spec: KindSpec) {
        self.kinds.retain(|k| k.name != spec.name);
        self.kinds.push(spec);
    }

    /// The kind called `name`.
    pub fn get(&self, name: &str) -> Option<&KindSpec> {
        self.kinds.iter().find(|k| k.name == name)
    }

    /// True if `kind` is a registered endpoint kind (a device, not a root complex or
    /// a switch).
    pub fn is_endpoint(&self, kind: &str) -> bool {
        matches!(self.get(kind).map(|k| k.role), Some(KindRole::Endpoint(_)))
    }

    /// Every kind name, in registration order.
    pub fn names(&self) -> Vec<&'static str> {
        self.kinds.iter().map(|k| k.name).collect()
    }
}

/// The configuration space of a single-function Ethernet controller (class 020000)
/// with `bars` (its MSI-X table and PBA in BAR2, `vectors` entries): PM, MSI-X, PCI
/// Express, AER, DSN. The node's `vendor_id`/`device_id` keys, else pcielab's IDs.
fn ethernet_function(
    ctx: &EndpointCtx<'_>,
    device_id: u16,
    bars: [Option<Bar>; 6],
    vectors: u16,
) -> Result<pcielab_config::ConfigSpace, KindError> {
    function_with_class(ctx, device_id, 0x02_0000, bars, vectors)
}

/// [`ethernet_function`] with another class code.
fn function_with_class(
    ctx: &EndpointCtx<'_>,
    device_id: u16,
    class_code: u32,
    bars: [Option<Bar>; 6],
    vectors: u16,
) -> Result<pcielab_config::ConfigSpace, KindError> {
    let (mut cs, _) = type0_header(ctx, device_id, class_code, bars)?;
    device_caps(ctx, vectors)
        .install(&mut cs)
        .map_err(|e| e.to_string())?;
    Ok(cs)
}

/// The Type 0 header of a single-function device of `ctx`'s node with `bars`: the
/// node's `vendor_id`/`device_id` keys, else pcielab's vendor ID and `device_id`.
fn type0_header(
    ctx: &EndpointCtx<'_>,
    device_id: u16,
    class_code: u32,
    bars: [Option<Bar>; 6],
) -> Result<(pcielab_config::ConfigSpace, Ids), KindError> {
    let p = ctx.params;
    let ids = Ids {
        vendor_id: p.int("vendor_id").unwrap_or(PCIELAB_VENDOR_ID as i64) as u16,
        device_id: p.int("device_id").unwrap_or(device_id as i64) as u16,
        revision: 1,
        class_code,
    };
    let cs = Type0 {
        ids,
        bars,
        rom_size: None,
        subsystem_vendor: ids.vendor_id,
        subsystem_id: ids.device_id,
        interrupt_pin: 1,
        multi_function: false,
    }
    .build()
    .map_err(|e| e.to_string())?;
    Ok((cs, ids))
}

/// An MSI-X capability of `vectors` entries with its table at 0 of BAR 2 and the PBA
/// after it.
fn msix_in_bar2(vectors: u16) -> MsixCap {
    MsixCap {
        table_size: vectors,
        table_bir: 2,
        table_offset: 0,
        pba_bir: 2,
        pba_offset: MsixTable::new(vectors).table_bytes(),
    }
}

/// The capabilities a device function of pcielab starts with: PM, MSI-X
/// ([`msix_in_bar2`]), PCI Express (`ctx`'s), AER, DSN.
fn device_caps(ctx: &EndpointCtx<'_>, vectors: u16) -> CapabilityList {
    CapabilityList::new()
        .with(PmCap { pme: false })
        .with(msix_in_bar2(vectors))
        .with(PcieCap { ..ctx.pcie })
        .with_ext(AerCap::default())
        .with_ext(DsnCap { serial: ctx.serial })
}

/// The settings of a `nic` node.
pub fn nic_config(p: &Params) -> Result<pcielab_device::nic::NicConfig, KindError> {
    use pcielab_device::nic::{Ethernet, FrameSizes, NicConfig, RxSource};
    let queues = p.int("queues").unwrap_or(1) as u16;
    let mut c = match p.str("model").unwrap_or("simple") {
        "batched" => NicConfig::batched(queues),
        _ => NicConfig::simple(queues),
    };
    if let Some(v) = p.int("tx_desc_fetch") {
        c.tx_desc_fetch = v as u32;
    }
    if let Some(v) = p.int("rx_fifo") {
        c.rx_fifo = v as u64;
    }
    if let Some(v) = p.int("tx_writeback") {
        c.tx_writeback = v as u32;
    }
    if let Some(v) = p.int("irq_every") {
        c.irq_every = v as u32;
    }
    if let Some(v) = p.int("irq_delay_ns") {
        c.irq_delay = pcielab_sim::SimDuration::from_ns(v as u64);
    }
    let eth = p.int("eth_gbps").unwrap_or(40);
    c.eth = if eth == 0 {
        None
    } else {
        Some(Ethernet::new(eth as f64).map_err(|e| KindError::key("eth_gbps", e))?)
    };
    let sizes = FrameSizes::parse(p.str("frame").unwrap_or("64"))
        .map_err(|e| KindError::key("frame", e))?;
    c.cable = !p.str("cable").unwrap_or("").is_empty();
    c.rx_source = match p.str("rx").unwrap_or("off") {
        "line-rate" => {
            if c.eth.is_none() {
                return Err(KindError::key(
                    "rx",
                    "a line-rate source needs a line rate: eth_gbps is 0",
                ));
            }
            RxSource::LineRate(sizes)
        }
        "saturate" => RxSource::Saturate(sizes),
        "loopback" => RxSource::Loopback,
        _ => RxSource::Off,
    };
    let clock = p.int("clock_mhz").unwrap_or(0) as u32;
    let bits = p.int("datapath_bits").unwrap_or(0) as u32;
    if (clock == 0) != (bits == 0) {
        return Err(KindError::key(
            "clock_mhz",
            format!("clock_mhz {clock} and datapath_bits {bits}: give both or neither"),
        ));
    }
    c.timing = pcielab_device::DeviceTiming {
        clock_mhz: clock,
        datapath_bits: bits,
        ..pcielab_device::DeviceTiming::NONE
    };
    c.tags = match p.int("dma_tags").unwrap_or(0) {
        0 => None,
        n => Some(n as u16),
    };
    c.check().map_err(|e| KindError::key("queues", e))?;
    Ok(c)
}

fn build_nic(ctx: &EndpointCtx<'_>) -> Result<Device, KindError> {
    let cfg = nic_config(ctx.params)?;
    let vectors = 2 * cfg.queues;
    let mut bars = [None; 6];
    // Registers: a 32-bit non-prefetchable BAR (below 4 GiB, as Linux places a NIC's
    // register BAR), MSI-X table and PBA in BAR 2.
    bars[0] = Some(Bar::Mem32 {
        size: pcielab_device::nic::BAR_SIZE as u32,
        prefetchable: false,
    });
    bars[2] = Some(Bar::Mem32 {
        size: msix_bar_size(vectors) as u32,
        prefetchable: false,
    });
    let cs = ethernet_function(ctx, device_ids::NIC, bars, vectors)?;
    Ok(Device::single(
        cs,
        bars,
        None,
        pcielab_device::nic::Nic::new(cfg),
    ))
}

/// The memory of each VF of psmem: VF BAR0/1, 64-bit prefetchable.
pub const PSMEM_VF_MEMORY: u64 = 16 * 1024;

/// The MSI-X BAR size of `vectors` vectors: table, then PBA, at least 4 KiB.
fn msix_bar_size(vectors: u16) -> u64 {
    let table = MsixTable::new(vectors).table_bytes() as u64;
    (table + (vectors as u64).div_ceil(64) * 8)
        .next_power_of_two()
        .max(4096)
}

fn build_psmem(ctx: &EndpointCtx<'_>) -> Result<Device, KindError> {
    let p = ctx.params;
    let size = p.int("bar_size").unwrap_or(1 << 20) as u64;
    let pref = p.bool("prefetchable").unwrap_or(true);
    let is64 = p.bool("bar64").unwrap_or(true);
    let vectors = p.int("msix_vectors").unwrap_or(4) as u16;
    let io_size = p.int("io_size").unwrap_or(0) as u32;
    let sriov_vfs = p.int("sriov_vfs").unwrap_or(0) as u16;
    let enabled_vfs = p.int("vfs").unwrap_or(0) as u16;
    // TotalVFs: `sriov_vfs` when given, else `vfs`.
    let vfs = if p.line("sriov_vfs") > 0 {
        if enabled_vfs > sriov_vfs {
            return Err(KindError::key(
                "vfs",
                format!(
                    "{enabled_vfs} VFs cannot be enabled: sriov_vfs (TotalVFs) is {sriov_vfs}; allowed: 0..={sriov_vfs}"
                ),
            ));
        }
        sriov_vfs
    } else {
        sriov_vfs.max(enabled_vfs)
    };
    if io_size != 0 && !(io_size.is_power_of_two() && io_size >= 4) {
        return Err(KindError::key(
            "io_size",
            format!(
                "{io_size} is not allowed; allowed: 0 (no I/O BAR) or a power of two from 4 to 256"
            ),
        ));
    }
    let rom = p.int("rom_size").unwrap_or(0) as u64;
    if rom != 0 && !(rom.is_power_of_two() && rom >= 2048) {
        return Err(KindError::key(
            "rom_size",
            format!("{rom} is not allowed; allowed: 0 (no ROM) or a power of two of at least 2048"),
        ));
    }
    let mut bars = [None; 6];
    let mem = if is64 {
        Bar::Mem64 {
            size,
            prefetchable: pref,
        }
    } else {
        if size > 1 << 31 {
            return Err(KindError::key(
                "bar_size",
                format!("{size} needs bar64 = true (a 32-bit BAR holds at most 2 GiB)"),
            ));
        }
        Bar::Mem32 {
            size: size as u32,
            prefetchable: pref,
        }
    };
    bars[0] = Some(mem);
    let msix_bar = mem.slots() as u8;
    let table = MsixTable::new(vectors);
    let pba_offset = table.table_bytes() as u64;
    let msix_size = msix_bar_size(vectors);
    bars[msix_bar as usize] = Some(Bar::Mem32 {
        size: msix_size as u32,
        prefetchable: false,
    });
    let io_bar = if io_size > 0 {
        let i = msix_bar + 1;
        bars[i as usize] = Some(Bar::Io { size: io_size });
        Some(i)
    } else {
        None
    };
    let ids = Ids {
        vendor_id: p.int("vendor_id").unwrap_or(PCIELAB_VENDOR_ID as i64) as u16,
        device_id: p.int("device_id").unwrap_or(device_ids::PSMEM as i64) as u16,
        revision: 1,
        class_code: 0x05_8000, // memory controller, other
    };
    let mut cs = Type0 {
        ids,
        bars,
        rom_size: match p.int("rom_size").unwrap_or(0) {
            0 => None,
            n => Some(n as u32),
        },
        subsystem_vendor: ids.vendor_id,
        subsystem_id: ids.device_id,
        interrupt_pin: 1,
        multi_function: false,
    }
    .build()
    .map_err(|e| e.to_string())?;
    let mut list = CapabilityList::new()
        .with(PmCap {
            pme: p.bool("pme").unwrap_or(false),
        })
        .with(MsiCap {
            vectors: 1,
            addr64: true,
            per_vector_mask: true,
        })
        .with(MsixCap {
            table_size: vectors,
            table_bir: msix_bar,
            table_offset: 0,
            pba_bir: msix_bar,
            pba_offset: pba_offset as u32,
        })
        .with(PcieCap {
            e2e_prefix: true,
            atomics: p.bool("atomics").unwrap_or(false),
            ..ctx.pcie
        })
        .with_ext(AerCap::default())
        .with_ext(DsnCap { serial: ctx.serial })
        .with_ext(LtrCap)
        .with_ext(AtsCap::default())
        .with_ext(PriCap { capacity: 32 })
        .with_ext(PasidCap {
            max_width: 20,
            execute: false,
            privileged: false,
        })
        .with_ext(PORT_L1SS);
    // VF BARs: the PF's layout scaled down (memory in VF BAR0/1, MSI-X in VF BAR2).
    let vf_bars = [
        Some(Bar::Mem64 {
            size: PSMEM_VF_MEMORY,
            prefetchable: true,
        }),
        None,
        Some(Bar::Mem32 {
            size: msix_bar_size(vectors) as u32,
            prefetchable: false,
        }),
        None,
        None,
        None,
    ];
    let mut template = None;
    if vfs > 0 {
        // The PF is function 0; with First VF Offset 1 and VF Stride 1, VF i is
        // function i + 1 of the PF's bus (ARI function numbers): up to 255 VFs fit.
        list = list
            .with_ext(AriCap { next_function: 0 })
            .with_ext(SriovCap {
                total_vfs: vfs,
                first_vf_offset: 1,
                vf_stride: 1,
                vf_device_id: device_ids::PSMEM_VF,
                function: 0,
                vf_bars,
            });
        template = Some(psmem_vf(ctx, ids, vectors, vf_bars)?);
    }
    list.install(&mut cs).map_err(|e| e.to_string())?;
    let layout = pcielab_device::PsMemLayout {
        mem_bar: 0,
        size,
        io: io_bar.map(|b| (b, io_size)),
    };
    let model = match template {
        Some(_) => {
            let vf = pcielab_device::PsMemLayout {
                mem_bar: 0,
                size: PSMEM_VF_MEMORY,
                io: None,
            };
            pcielab_device::PsMem::with_vfs(layout, vf)
        }
        None => pcielab_device::PsMem::new(layout),
    };
    Ok(Device::single(cs, bars, template, model))
}

/// The MAC sides of a `simple-nic` node.
pub const SNIC_MACS: &[&str] = &["loopback", "none"];

/// `simple-nic`: `pcielab_device::snic::SimpleNic` behind BAR4 (64-bit, 16 KiB), its
/// MSI-X table (2 vectors: TX, RX) in BAR2, as on NetTLP's board.
fn build_simple_nic(ctx: &EndpointCtx<'_>) -> Result<Device, KindError> {
    use pcielab_device::snic::{Loopback, NoMac, SimpleNic, SnicMac, SnicParams};
    let p = ctx.params;
    let vectors = 2;
    let mut bars = [None; 6];
    bars[2] = Some(Bar::Mem32 {
        size: msix_bar_size(vectors) as u32,
        prefetchable: false,
    });
    bars[4] = Some(Bar::Mem64 {
        size: 16 * 1024,
        prefetchable: false,
    });
    let cs = ethernet_function(ctx, device_ids::SIMPLE_NIC, bars, vectors)?;
    let mac: Box<dyn SnicMac> = match p.str("mac").unwrap_or("loopback") {
        "none" => Box::new(NoMac),
        _ => Box::new(Loopback::default()),
    };
    let params = SnicParams {
        bar: 4,
        tx_vector: 0,
        rx_vector: 1,
        ring_entries: p.int("ring_entries").unwrap_or(1024) as u32,
        max_frame: p.int("max_frame").unwrap_or(4096) as u32,
        rx_fifo: p.int("rx_fifo").unwrap_or(64) as usize,
    };
    Ok(Device::single(cs, bars, None, SimpleNic::new(params, mac)))
}

/// The configuration space of a psmem VF (PCIe Base Specification, 9.3.4): the VF
/// header, a PCI Express capability (Endpoint, the PF's link, Function Level Reset),
/// MSI-X with its table at 0 of VF BAR2 and the PBA after it, and ARI.
fn psmem_vf(
    ctx: &EndpointCtx<'_>,
    pf: Ids,
    vectors: u16,
    bars: [Option<Bar>; 6],
) -> Result<VfTemplate, KindError> {
    let mut cs = VfHeader {
        class_code: pf.class_code,
        revision: pf.revision,
        subsystem_vendor: pf.vendor_id,
        subsystem_id: device_ids::PSMEM_VF,
    }
    .build();
    CapabilityList::new()
        .with(MsixCap {
            table_size: vectors,
            table_bir: 2,
            table_offset: 0,
            pba_bir: 2,
            pba_offset: MsixTable::new(vectors).table_bytes(),
        })
        .with(PcieCap {
            flr: true,
            ..ctx.pcie
        })
        .with_ext(AriCap { next_function: 0 })
        .install(&mut cs)
        .map_err(|e| e.to_string())?;
    Ok(VfTemplate { config: cs, bars })
}
