//! Saving a function's configuration and restoring it after a reset, as host software
//! does around a Function Level Reset, a DPC recovery or a link that came back (Linux:
//! `pci_save_state` / `pci_restore_state`).

use super::error::SimError;
use super::rc::state::HostRead;
use super::sim::FabricSim;
use pcielab_config::space::Access;
use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::{Bdf, ByteEnables};

/// What [`FabricSim::recover`] did, with its times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovery {
    /// When the link came up (Data Link Layer Link Active), as seen after the event
    /// that trained it.
    pub link_up_at: SimTime,
    /// When the first configuration write went out (after the device-ready wait and,
    /// with CRS Software Visibility, the Vendor ID poll).
    pub restore_started_at: SimTime,
    /// When the last configuration write completed.
    pub restored_at: SimTime,
    /// Configuration writes made.
    pub writes: u32,
    /// Of them, those that did not complete successfully.
    pub failed_writes: u32,
}

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

    /// Saves every function below the link above node `name` — the component there
    /// and everything beneath it (bridges and devices of a switch) — parents first,
    /// the order [`FabricSim::restore_config`] needs. Zero time; take it while the
    /// component is configured, as Linux's drivers save their state at probe time.
    pub fn save_below(&self, name: &str) -> Result<Vec<SavedConfig>, SimError> {
        let d = self.up_link(name)?;
        let port = self.sim.world().dirs[(d | 1) as usize]
            .rx_func
            .ok_or_else(|| SimError::UnknownNode(format!("{name} (no port above it)")))?;
        let port = self.fabric().bdf(port);
        let tree = self.tree();
        let depth_below = |bdf: Bdf| -> Option<u32> {
            let mut depth = 0;
            let mut at = tree.get(bdf)?.parent;
            while let Some(p) = at {
                if p == port {
                    return Some(depth);
                }
                depth += 1;
                at = tree.get(p)?.parent;
            }
            None
        };
        let mut below: Vec<(u32, Bdf)> = tree
            .functions
            .iter()
            .filter_map(|f| depth_below(f.bdf).map(|k| (k, f.bdf)))
            .collect();
        below.sort();
        below
            .into_iter()
            .map(|(_, b)| self.save_config(b))
            .collect()
    }

    /// Host software recovers the component below the link above node `name` after it
    /// was reset (the link went down and came back: a failure, a Downstream Port
    /// Containment, a hot-plug), as Linux's error recovery does:
    ///
    /// 1. the simulation runs until the link is up (Data Link Layer Link Active), for
    ///    at most 2 s of simulated time;
    /// 2. then for `SimConfig::device_ready_wait` (100 ms by default, PCIe Base Spec
    ///    6.6.1); with CRS Software Visibility enabled at the root port it then reads
    ///    the first function's Vendor ID until it is no longer 0001h (the device has
    ///    stopped answering CRS), sleeping 1, 2, 4 … ms in between, for at most 1 s;
    /// 3. then `saved` ([`FabricSim::save_below`], parents first) is written back with
    ///    configuration requests ([`FabricSim::restore_config`]).
    ///
    /// A device model hears Bus Master Enable come back on
    /// ([`Endpoint::bus_master`](super::Endpoint::bus_master)) and may resume: a
    /// [`DmaStream`](super::DmaStream) issues the DMAs it had left.
    ///
    /// ```
    /// # use pcielab_fabric::{kinds::KindRegistry, topology::Topology};
    /// use pcielab_fabric::timed::{FabricSim, HostRead, SimConfig};
    /// use pcielab_sim::SimDuration;
    /// # let t = Topology::parse("[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n[[node]]\nname=\"m\"\nkind=\"psmem\"\n[[link]]\nup=\"rc.0\"\ndown=\"m\"\ngen=3\nwidth=4\n", "t.toml", &KindRegistry::builtin()).unwrap();
    /// let mut sim = FabricSim::new(&t, &KindRegistry::builtin(), SimConfig::default()).unwrap();
    /// let bar = sim.bar("m", 0).unwrap();
    /// let saved = sim.save_below("m").unwrap();
    /// sim.link_down("m").unwrap();
    /// sim.run_for(SimDuration::from_us(10));
    /// sim.link_up("m").unwrap();
    /// let r = sim.recover("m", &saved).unwrap();
    /// assert_eq!(r.failed_writes, 0);
    /// assert!(r.restore_started_at >= r.link_up_at + SimDuration::from_ms(100));
    /// // The device decodes its BAR again.
    /// assert!(matches!(sim.mmio_read(bar, 4), Ok(HostRead::Done { .. })));
    /// ```
    pub fn recover(&mut self, name: &str, saved: &[SavedConfig]) -> Result<Recovery, SimError> {
        self.up_link(name)?;
        let limit = self.now() + SimDuration::from_ms(2000);
        if !self.run_while(limit, |s| s.link_active(name).unwrap_or(false)) {
            let left = limit - self.now();
            self.run_for(left);
            return Err(SimError::Recovery(format!(
                "the link above {name} is still down at {} ns (something still holds it \
                 down: DPC until its Trigger Status is cleared, an unplugged device, or a \
                 link failure not yet over)",
                self.now().as_ps() / 1000
            )));
        }
        let link_up_at = self.now();
        let wait = self.sim.world().cfg.device_ready_wait;
        self.run_for(wait);
        // With CRS Software Visibility, poll the Vendor ID until the device is ready,
        // sleeping 1, 2, 4 … ms in between (Linux's `pci_dev_wait`), for at most 1 s.
        if let Some(first) = saved.first() {
            if self.crs_visible(first.bdf) {
                let mut delay = SimDuration::from_ms(1);
                let give_up = self.now() + SimDuration::from_ms(1000);
                loop {
                    let r = self.config_read(first.bdf, 0)?;
                    if !matches!(&r, HostRead::Done { data, .. } if data[..2] == [1, 0]) {
                        break;
                    }
                    if self.now() >= give_up {
                        return Err(SimError::Recovery(format!(
                            "{} still not ready (CRS) 1 s after the wait",
                            first.bdf
                        )));
                    }
                    self.run_for(delay);
                    delay = delay + delay;
                }
            }
        }
        let restore_started_at = self.now();
        let (mut writes, mut failed_writes) = (0, 0);
        for sv in saved {
            writes += sv.dwords.len() as u32;
            failed_writes += self.restore_config(sv)?;
        }
        Ok(Recovery {
            link_up_at,
            restore_started_at,
            restored_at: self.now(),
            writes,
            failed_writes,
        })
    }
}
