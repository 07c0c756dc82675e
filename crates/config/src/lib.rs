//! # pcielab-config — the configuration space of a PCIe function
//!
//! A [`ConfigSpace`] is 4 KiB of registers whose every bit has an [`Access`] type,
//! enforced on each configuration write. Headers are built with [`Type0`] and
//! [`Type1`]; capabilities are placed and linked by [`caps::CapabilityList`];
//! [`lspci`] writes and reads the text format of `lspci -xxxx`, and [`decode`]
//! prints a dump the way a person wants to read it.
//!
//! ```
//! use pcielab_config::caps::{CapabilityList, PcieCap, PortType};
//! use pcielab_config::{Bar, Type0};
//!
//! let mut bars = [None; 6];
//! bars[0] = Some(Bar::Mem32 { size: 4096, prefetchable: false });
//! let mut cs = Type0 { bars, ..Type0::default() }.build().unwrap();
//! CapabilityList::new()
//!     .with(PcieCap::new(PortType::Endpoint))
//!     .install(&mut cs)
//!     .unwrap();
//! // Host software sizes BAR0: write all-ones, read back the mask.
//! cs.write_u32(0x10, 0xffff_ffff);
//! assert_eq!(cs.read_u32(0x10), 0xffff_f000);
//! assert_eq!(cs.read_u8(0x34), 0x40); // capability pointer
//! ```
//!
//! The crate knows nothing of topology or routing; `pcielab-fabric` builds functions
//! from a topology and enumerates them like host software.
#![warn(missing_docs)]

pub mod caps;
pub mod decode;
pub mod ext_caps;
pub mod header;
pub mod lspci;
pub mod space;

pub use header::{Bar, BridgeWindows, HeaderError, Ids, Type0, Type1};
pub use space::{Access, ConfigSpace, CONFIG_SPACE_SIZE};

/// The vendor ID pcielab's software devices use unless told otherwise.
///
/// 0x1fee is not assigned by PCI-SIG to pcielab (nor listed in pci.ids); it is a placeholder that real
/// `lspci` prints as an unknown vendor. Change it per device in the topology file.
pub const PCIELAB_VENDOR_ID: u16 = 0x1fee;
