//! Host software over the timed simulator's links.

use super::rc::state::HostRead;
use super::sim::FabricSim;
use crate::host::HostBus;
use pcielab_sim::SimTime;
use pcielab_wire::{Bdf, ByteEnables, CplStatus};

/// What host software did through a [`WireBus`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WireBusStats {
    /// Configuration reads (CfgRd TLPs).
    pub config_reads: u64,
    /// Configuration writes (CfgWr TLPs).
    pub config_writes: u64,
    /// Configuration requests answered with Unsupported Request (no function there).
    pub unsupported: u64,
    /// Configuration requests that got no completion before the completion timeout.
    pub timeouts: u64,
    /// Memory writes (each one or more MWr TLPs).
    pub memory_writes: u64,
    /// Memory reads (each one or more MRd TLPs).
    pub memory_reads: u64,
}

/// [`HostBus`] over the timed simulator: every configuration access is a CfgRd/CfgWr
/// TLP and every memory access MRd/MWr TLPs, each taking simulated time, so host
/// software such as [`enumerate`](crate::host::enumerate::enumerate) runs over the
/// links (and shows up in the trace and in captures).
///
/// ```
/// use pcielab_fabric::host::enumerate::{enumerate, HostConfig};
/// # use pcielab_fabric::{kinds::KindRegistry, topology::Topology};
/// # use pcielab_fabric::timed::{FabricSim, SimConfig};
/// # let reg = KindRegistry::builtin();
/// # let topo = Topology::parse(
/// #     "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n\
/// #      [[node]]\nname=\"ep\"\nkind=\"psmem\"\n\
/// #      [[link]]\nup=\"rc.0\"\ndown=\"ep\"\ngen=2\nwidth=1\n",
/// #     "doc.toml",
/// #     &reg,
/// # )
/// # .unwrap();
/// let mut sim = FabricSim::new(&topo, &reg, SimConfig::default()).unwrap();
/// let mut bus = sim.wire_bus();
/// let tree = enumerate(&mut bus, &HostConfig::default()).unwrap();
/// let stats = bus.stats();
/// assert!(stats.config_reads > 0 && stats.unsupported > 0);
/// assert!(tree.functions.len() >= 2);
/// assert!(sim.now().as_ps() > 0);
/// ```
#[derive(Debug)]
pub struct WireBus<'a> {
    sim: &'a mut FabricSim,
    stats: WireBusStats,
    started: SimTime,
    error: Option<String>,
}

impl FabricSim {
    /// Host software's view of the simulated fabric through real TLPs (see
    /// [`WireBus`]); [`FabricSim::cfg_read`]/[`cfg_write`](FabricSim::cfg_write) are
    /// the zero-time (ECAM backdoor) alternative.
    pub fn wire_bus(&mut self) -> WireBus<'_> {
        let started = self.now();
        WireBus {
            sim: self,
            stats: WireBusStats::default(),
            started,
            error: None,
        }
    }
}

impl WireBus<'_> {
    /// What was done so far.
    pub fn stats(&self) -> WireBusStats {
        self.stats
    }
    /// Simulated time since the bus was made.
    pub fn elapsed(&self) -> pcielab_sim::SimDuration {
        self.sim.now() - self.started
    }
    /// The first request that could not be made at all (a parameter error), if any;
    /// such a request reads as all-ones, like a request nobody answers.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }
    /// The simulator.
    pub fn sim(&mut self) -> &mut FabricSim {
        self.sim
    }

    fn note(&mut self, r: &Result<HostRead, super::error::SimError>) {
        match r {
            Ok(HostRead::Failed(CplStatus::Ur)) => self.stats.unsupported += 1,
            Ok(HostRead::Timeout) => self.stats.timeouts += 1,
            Err(e) if self.error.is_none() => self.error = Some(e.to_string()),
            _ => {}
        }
    }
}

impl HostBus for WireBus<'_> {
    fn cfg_read(&mut self, bdf: Bdf, register: u16) -> u32 {
        self.stats.config_reads += 1;
        let r = self.sim.config_read(bdf, register);
        self.note(&r);
        match r {
            Ok(HostRead::Done { data, .. }) if data.len() == 4 => {
                u32::from_le_bytes([data[0], data[1], data[2], data[3]])
            }
            _ => u32::MAX,
        }
    }
    fn cfg_write(&mut self, bdf: Bdf, register: u16, value: u32, be: ByteEnables) {
        self.stats.config_writes += 1;
        let r = self.sim.config_write(bdf, register, value, be);
        self.note(&r);
    }
    fn mem_write(&mut self, addr: u64, data: &[u8]) -> Result<(), String> {
        self.stats.memory_writes += 1;
        self.sim.mmio_write(addr, data).map_err(|e| e.to_string())
    }
    /// The `vfs` key of the PF's node: what the host program was asked to enable (on
    /// Linux, what a user writes to `sriov_numvfs`), read from the topology, not from
    /// the device.
    fn requested_vfs(&mut self, pf: Bdf) -> u16 {
        let fabric = self.sim.fabric();
        fabric
            .function_at(pf)
            .and_then(|f| fabric.functions[f.0 as usize].sriov.as_ref())
            .map_or(0, |s| s.requested)
    }
    fn mem_read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), String> {
        self.stats.memory_reads += 1;
        let mut done = 0usize;
        while done < buf.len() {
            let a = addr + done as u64;
            let n = (buf.len() - done).min((4096 - (a & 0xfff)) as usize);
            match self.sim.mmio_read(a, n as u32).map_err(|e| e.to_string())? {
                HostRead::Done { data, .. } => buf[done..done + n].copy_from_slice(&data[..n]),
                HostRead::Poisoned { .. } => {
                    return Err(format!("memory read at {a:#x}: poisoned data"))
                }
                HostRead::Failed(s) => return Err(format!("memory read at {a:#x}: {s:?}")),
                HostRead::Timeout => return Err(format!("memory read at {a:#x}: timeout")),
            }
            done += n;
        }
        Ok(())
    }
}
