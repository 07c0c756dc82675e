//! The device-model API of pcielab: one trait, [`DeviceModel`], for a PCIe device,
//! and the context, [`Cx`], through which it acts. Three hosts run the same model:
//!
//! * the timed simulator (`pcielab_fabric::timed::FabricSim`), which charges link,
//!   switch, root-complex and device time ([`DeviceTiming`]);
//! * the functional fabric (`pcielab_fabric::functional::Fabric`), in zero time;
//! * the NetTLP device runtime (`pcielab_nettlp::handler::serve` with
//!   `pcielab_nettlp::handler::ModelHandler`), over UDP against a real host.
//!
//! Also here: [`PsMem`], the pseudo-memory device (written once, for all three hosts),
//! [`snic::SimpleNic`], NetTLP's simple-nic with its BAR4 layout and a pluggable MAC side,
//! [`ReorderWindow`] for devices that consume completions out of order and release
//! data in order, and the shared request types ([`AtomicOp`], [`VendorMessage`]).
//!
//! `docs/devices.md` in the repository is the tutorial: a two-function device written
//! from scratch, run in the simulator.

mod atomic;
pub mod d2d;
pub mod dma_engine;
mod message;
mod model;
pub mod nic;
mod optable;
mod psmem;
mod reorder;
pub mod snic;
mod timing;

pub use atomic::AtomicOp;
pub use message::{VdmRoute, VendorMessage};
pub use model::{
    sg_total, Command, Cx, DeviceModel, DeviceState, DmaId, DmaPolicy, Incoming, ReadReply,
    ReadTicket, SgError,
};
pub use psmem::{OutOfRange, PsMem, PsMemLayout};
pub use reorder::{ReorderError, ReorderWindow};
pub use timing::DeviceTiming;
