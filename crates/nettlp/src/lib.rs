//! NetTLP compatibility for pcielab: the wire protocol, a LibTLP-style device library, a
//! software adapter host, psmem and tlpperf.
//!
//! NetTLP carries PCIe TLPs in UDP between a device implemented in software and a host
//! (through an FPGA adapter, or through [`adapter::Adapter`], which emulates the adapter,
//! the root complex and host memory):
//!
//! ```text
//!   device side (127.0.0.2)                        adapter host (127.0.0.1)
//!   device::Device ── MRd/MWr on 0x3000+tag ──────► adapter::Adapter ─► HostMemory
//!                  ◄─ CplD split at RCB/MPS ───────
//!   handler::serve ◄─ host MRd/MWr on 0x4000+n ──── Adapter::mmio_read/mmio_write
//!                  ── CplD ──────────────────────►
//!   client::*      ◄─► messaging 0x2FFF, configuration 0x4001/0x5001
//! ```
//!
//! * [`frame`] — the 6-byte header, ports, messaging and configuration packets;
//! * [`device`] — DMA of any size and alignment, many reads in flight, typed errors;
//! * [`handler`] — serving BAR4 accesses on several threads;
//! * [`adapter`] — the software adapter host; [`control`] — its command socket;
//! * [`psmem`], [`perf`] — the pseudo memory device and tlpperf;
//! * [`snic`] — a host driver for the simple-nic device; [`snic_device`] — the
//!   simple-nic device itself (`pcielab_device::snic::SimpleNic`) served, its MAC side
//!   a loopback plug or a TAP interface;
//! * [`capture`] — pcap output; [`sys`] — batched UDP I/O.
//!
//! A whole session on loopback:
//!
//! ```no_run
//! use pcielab_nettlp::{adapter::*, device::*, handler::*, psmem::Psmem};
//! use std::sync::Arc;
//! let a = Adapter::start(AdapterConfig::default())?;
//! let mem = Arc::new(Psmem::new(a.config().bar4, 1 << 20));
//! let _server = serve(ServeConfig::default(), mem)?;
//! a.mmio_write(0x10, b"abcd")?;
//! let mut b = [0u8; 4];
//! a.mmio_read(0x10, &mut b)?;
//! assert_eq!(&b, b"abcd");
//! let dev = Device::open(DeviceConfig::default())?;
//! dev.dma_write(0x1001, &[7; 5000])?;
//! let mut r = vec![0u8; 5000];
//! dev.dma_read(0x1001, &mut r)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

pub mod adapter;
pub mod capture;
pub mod client;
pub mod control;
pub mod device;
pub mod frame;
pub mod handler;
pub mod hosted;
pub mod loopback;
pub mod memory;
pub mod perf;
mod poller;
pub mod psmem;
pub mod snic;
pub mod snic_device;
pub mod sys;
