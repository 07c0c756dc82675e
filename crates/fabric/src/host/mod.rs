//! Host software: what an operating system does to a PCIe hierarchy.
//!
//! Host software sees the fabric only through [`HostBus`]: configuration reads and
//! writes (ECAM) and memory reads and writes. It never looks at the hardware models,
//! so it runs unchanged against the functional fabric, the timed simulator or a real
//! device behind NetTLP.

pub mod enumerate;
pub mod model;

use crate::functional::{Fabric, Origin};
use pcielab_wire::{Bdf, ByteEnables};

/// The host's view of the fabric.
pub trait HostBus {
    /// Reads the dword at `register` of `bdf`; all-ones when no function answers.
    fn cfg_read(&mut self, bdf: Bdf, register: u16) -> u32;
    /// Writes the dword at `register` of `bdf` with byte enables; dropped when no
    /// function answers.
    fn cfg_write(&mut self, bdf: Bdf, register: u16, value: u32, be: ByteEnables);
    /// A memory write from the host; `Err` names why it was not delivered.
    fn mem_write(&mut self, addr: u64, data: &[u8]) -> Result<(), String>;
    /// A memory read from the host.
    fn mem_read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), String>;
    /// How many VFs host software is asked to enable in the SR-IOV PF at `pf` (on
    /// Linux, what a user writes to its `sriov_numvfs`). The default: none.
    fn requested_vfs(&mut self, _pf: Bdf) -> u16 {
        0
    }
}

/// The functional fabric seen through its ECAM window.
impl HostBus for Fabric {
    fn cfg_read(&mut self, bdf: Bdf, register: u16) -> u32 {
        self.ecam_read(((bdf.raw() as u64) << 12) | (register & 0xffc) as u64, 4)
    }
    fn cfg_write(&mut self, bdf: Bdf, register: u16, value: u32, be: ByteEnables) {
        let _ = self.config_write(bdf, register, value, be);
    }
    fn mem_write(&mut self, addr: u64, data: &[u8]) -> Result<(), String> {
        self.memory_write(Origin::Host, addr, data)
            .map_err(|e| e.to_string())
    }
    fn mem_read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), String> {
        self.memory_read(Origin::Host, addr, buf)
            .map_err(|e| e.to_string())
    }
    /// The `vfs` key of the PF's node.
    fn requested_vfs(&mut self, pf: Bdf) -> u16 {
        self.function_at(pf)
            .and_then(|f| self.functions[f.0 as usize].sriov.as_ref())
            .map_or(0, |s| s.requested)
    }
}
