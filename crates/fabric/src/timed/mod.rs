//! The timed fabric simulator: PCIe on the `pcielab-sim` kernel.
//!
//! ```text
//!   Topology ──► Fabric (functional, enumerated by host::enumerate)
//!                   │ routing (route_memory / route_id) and configuration spaces
//!                   ▼
//!   FabricSim ── Simulation<Engine>
//!      nodes: root complex │ switches │ endpoints (dyn Endpoint + DMA engine)
//!      every topology link = two directions, each with
//!        PHY   exact serialization (gen × width, encoding, framing, SKP), propagation
//!        DLL   sequence numbers, replay buffer, ACK coalescing (ACK latency limit),
//!              replay timer (3 × ACK limit), NAK + replay, REPLAY_NUM rollover
//!        FC    P/NP/Cpl × hdr/data credits, InitFC1/2, UpdateFC (latency limit, or
//!              at once when the transmitter is nearly out), infinite credits
//! ```
//!
//! A TLP is routed once, where it is created, by the functional fabric; the route
//! becomes the list of link directions it crosses. Switches and the root complex hold it
//! in the ingress port's receive buffer (whose credits return when it leaves), add their
//! latency (store-and-forward), and queue it at the egress port, where the transmitter
//! applies the ordering rules (nothing passes an older posted request; FIFO per class;
//! otherwise oldest first, which is first-come first-served — fair — between ingress
//! ports).
//!
//! ## Host program
//! [`FabricSim`] is the host's view: configuration access (through the functional
//! fabric, in zero simulated time), MMIO reads and writes that travel as TLPs, DMA
//! buffers in host memory, waiting for interrupts or time. Calls that need an answer
//! run the simulation until it arrives:
//!
//! ```
//! use pcielab_fabric::{kinds::KindRegistry, topology::Topology};
//! use pcielab_fabric::timed::{FabricSim, HostRead, SimConfig};
//! let reg = KindRegistry::builtin();
//! let topo = Topology::parse("[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n[[node]]\nname=\"m\"\nkind=\"psmem\"\n\
//!     [[link]]\nup=\"rc.0\"\ndown=\"m\"\ngen=3\nwidth=4\n", "doc.toml", &reg).unwrap();
//! let mut sim = FabricSim::new(&topo, &reg, SimConfig::default()).unwrap();
//! let bar0 = sim.bar("m", 0).unwrap();
//! sim.mmio_write(bar0 + 8, &[1, 2, 3, 4]).unwrap();
//! match sim.mmio_read(bar0 + 8, 4).unwrap() {
//!     HostRead::Done { data, issued, done } => {
//!         assert_eq!(data, [1, 2, 3, 4]);
//!         assert!(done > issued);
//!     }
//!     other => panic!("{other:?}"),
//! }
//! ```

mod acs;
mod aer;
pub(crate) mod aspm;
mod atomic;
mod ats;
mod burst;
mod bus_master;
mod bytes;
mod cfg_access;
mod completer;
mod dll;
mod dma;
mod dpc;
mod ecrc;
mod endpoint;
mod engine;
mod error;
mod event;
mod fault;
mod fc;
mod flr;
mod hotplug;
mod interrupts;
mod iommu;
mod link;
mod link_down;
mod ltr;
mod node;
mod packed;
mod pasid;
mod pm;
pub(crate) mod poison;
mod pool;
mod pri;
mod raw;
mod rc;
mod regs;
mod route;
mod saved_config;
mod sim;
mod slot;
mod stats;
mod switch;
#[cfg(test)]
mod testkit;
mod tlp;
mod trace;
mod vendor;
mod wire_bus;
mod workload;

pub use crate::params::{BufferCredits, IommuConfig, SimConfig};
pub use crate::phy::LinkTiming;
pub use ats::state::{AtsInvalidation, AtsStats};
pub use dpc::state::{DpcEvent, DpcReason};
pub use endpoint::{
    DmaId, Endpoint, EpCx, Incoming, PsMem, ReadReply, ReadTicket, VdmRoute, VendorMessage,
};
pub use engine::Engine;
pub use error::SimError;
pub use event::{Ev, WireItem};
pub use fault::{FaultKind, SimFault};
pub use iommu::{remappable_msi_address, IommuFault, IommuFaultKind, IommuStats};
pub use ltr::state::{ltr_ns, ltr_value, LtrMessage};
pub use packed::{PackedEv, EVENT_KINDS};
pub use pcielab_device::AtomicOp;
pub use pcielab_device::{DeviceTiming, ReorderWindow};
pub use pri::state::PageRequestRecord;
pub use rc::state::{ErrorMessage, HostRead, IntxEvent, PmeMessage, PmeToAck};
pub use regs::ErrorSeverity;
pub use saved_config::{Recovery, SavedConfig};
pub use sim::{bytes_per_inflight_tlp, host_config, max_ber, FabricSim, HostTicket};
pub use stats::{DeviceStats, FunctionDmaStats};
pub use trace::{DirCounters, Trace, TraceKind, TraceRecord};
pub use wire_bus::{WireBus, WireBusStats};
pub use workload::{percentile_ns, AddrPattern, DmaOpKind, DmaStream, StreamReport};
