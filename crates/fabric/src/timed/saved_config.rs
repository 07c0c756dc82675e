//! Saving a function's configuration and restoring it after a reset, as host software
//! does around a Function Level Reset, a DPC recovery or a link that came back (Linux:
//! `pci_save_state` / `pci_restore_state`).

use super::{FabricSim, HostRead, SimError};
use pcielab_config::space::Access;
use pcielab_wire::{Bdf, ByteEnables};

/// The software-writable configuration registers of one function, as saved by
/// [`FabricSim::save_config`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedConfig {
    /// The function.
    pub bdf: Bdf,
    /// (DW offset, value with only its read-write bits kept), ascending.
    pub dwords: Vec<(u16, u32)>,
}

/// Bits software must not write back: Function Level Reset (Device Control bit 15),
/// Retrain Link (Link Control bit 5), Secondary Bus Reset (Bridge Control bit 6) and
/// DPC Software Trigger act when written as 1.
fn action_bits(cs: &pcielab_config::ConfigSpace, at: u16) -> u32 {
    let mut m = 0u32;
    let walk = pcielab_config::caps::walk(cs.bytes()).0;
    for c in &walk {
        let off = c.offset;
        if !c.extended && c.id == pcielab_config::caps::id::PCIE as u16 {
            if at == off + pcielab_config::caps::pcie_reg::DEVCTL {
                m |= 0x8000;
            }
            if at == off + pcielab_config::caps::pcie_reg::LNKCTL {
                m |= 0x20;
            }
        }
        if c.extended && c.id == pcielab_config::caps::id::EXT_DPC && at == off + 4 {
            m |= (pcielab_config::ext_caps::DPC_CTL_SW_TRIGGER as u32) << 16;
        }
    }
    if at == 0x3c && cs.read_u8(0x0e) & 0x7f == 1 {
        m |= 0x40 << 16;
    }
    m
}

impl FabricSim {
    /// Saves the read-write registers of function `bdf` (zero time): every DW of its
    /// configuration space with a read-write bit, the bits that trigger actions
    /// (Function Level Reset, Retrain Link, Secondary Bus Reset, DPC Software Trigger)
    /// cleared.
    pub fn save_config(&self, bdf: Bdf) -> Result<SavedConfig, SimError> {
        let fabric = self.fabric();
        let f = fabric
            .function_at(bdf)
            .ok_or_else(|| SimError::Route(format!("no function at {bdf}")))?;
        let cs = &fabric.functions[f.0 as usize].config;
        let mut dwords = Vec::new();
        for at in (0..4096u16).step_by(4) {
            let mut rw = 0u32;
            for bit in 0..32u8 {
                let (o, b) = (at + (bit / 8) as u16, bit % 8);
                if cs.access_of(o, b) == Access::Rw {
                    rw |= 1 << bit;
                }
            }
            rw &= !action_bits(cs, at);
            if rw != 0 {
                dwords.push((at, cs.read_u32(at) & rw));
            }
        }
        Ok(SavedConfig { bdf, dwords })
    }

    /// Writes a saved configuration back with configuration requests over the links
    /// (each runs until its completion), as host software restores a function after
    /// a reset: the capabilities first, then the header from the top down, Command
    /// last, so that the function decodes its BARs only once they are set. Status bits
    /// (write 1 to clear) are written as 0. Restore bridges before the functions
    /// behind them (their bus numbers route the requests). Returns how many writes
    /// failed (0: all done).
    pub fn restore_config(&mut self, saved: &SavedConfig) -> Result<u32, SimError> {
        let mut order: Vec<(u16, u32)> = saved
            .dwords
            .iter()
            .copied()
            .filter(|d| d.0 >= 0x40)
            .collect();
        let mut header: Vec<(u16, u32)> = saved
            .dwords
            .iter()
            .copied()
            .filter(|d| d.0 < 0x40)
            .collect();
        header.sort_by_key(|d| std::cmp::Reverse(d.0));
        order.extend(header);
        let mut failed = 0;
        for (at, v) in order {
            match self.config_write(saved.bdf, at, v, ByteEnables::ALL)? {
                HostRead::Done { .. } => {}
                _ => failed += 1,
            }
        }
        Ok(failed)
    }
}
