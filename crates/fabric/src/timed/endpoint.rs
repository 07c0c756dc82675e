//! The endpoint API: how a device model plugs into the timed fabric. It is the
//! device-model API of the `pcielab-device` crate under the timed fabric's names:
//! [`Endpoint`] is [`pcielab_device::DeviceModel`] and [`EpCx`] is
//! [`pcielab_device::Cx`], so a device written for one host runs on the others.
//!
//! ```
//! use pcielab_fabric::timed::{Endpoint, EpCx, ReadReply, DmaId};
//! /// A device with one 32-bit scratch register at BAR0 + 0 that DMAs 64 bytes from
//! /// host address 0x1000 when written, then raises MSI-X vector 0.
//! #[derive(Debug, Default)]
//! struct Scratch { reg: u32 }
//! impl Endpoint for Scratch {
//!     fn mem_read(&mut self, _bar: u8, _off: u64, buf: &mut [u8], _cx: &mut EpCx<'_>) -> ReadReply {
//!         for (b, v) in buf.iter_mut().zip(self.reg.to_le_bytes()) { *b = v; }
//!         ReadReply::Now
//!     }
//!     fn mem_write(&mut self, _bar: u8, _off: u64, data: &[u8], cx: &mut EpCx<'_>) {
//!         self.reg = data.iter().rev().fold(0, |a, &b| a << 8 | b as u32);
//!         cx.dma_read(0x1000, 64);
//!     }
//!     fn dma_done(&mut self, _id: DmaId, _ok: bool, _data: &[u8], cx: &mut EpCx<'_>) {
//!         cx.msix(0);
//!     }
//! }
//! ```

pub use pcielab_device::{
    Command as EpCmd, Cx as EpCx, DeviceModel as Endpoint, DmaId, Incoming, PsMem, ReadReply,
    ReadTicket, VdmRoute, VendorMessage,
};
