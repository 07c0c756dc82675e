//! The root complex's IOMMU: per-device page tables, an IOTLB and interrupt remapping.
//!
//! DMA from a device to host memory is translated by the requester's page table
//! (I/O virtual address → physical). The IOTLB caches `entries` translations (LRU);
//! a hit costs `hit_latency`, a miss `miss_latency` (a page walk). An unmapped page is
//! a fault: the request is not performed, a read completes with Unsupported Request,
//! and the fault is recorded. MSI/MSI-X writes (the interrupt address range) pass
//! untranslated.
//!
//! **Virtual machines**: a function assigned to a VM ([`super::FabricSim::assign_vm`])
//! has its DMA translated through the guest's I/O page table nested in the host's:
//! its IOTLB misses cost `IommuConfig::nested_walk` (a two-dimensional walk; zero
//! means the same as `miss_latency`) instead of `miss_latency`, counted in
//! [`IommuStats::nested_walks`]. Its translations are the ones mapped for its
//! requester ID (the guest-physical to host-physical composition is the mapping).
//!
//! **Interrupt remapping** (`IommuConfig::interrupt_remapping`, as Intel VT-d's): a
//! write to the interrupt address range is an interrupt request the IOMMU checks
//! before the host sees it. Only the remappable format passes — address bit 4 set, the
//! handle in address bits 19:5 with bit 15 in address bit 2, plus the data's low 16
//! bits when Sub-Handle Valid (address bit 3) is set ([`remappable_msi_address`]).
//! The handle indexes the interrupt remapping table
//! ([`super::FabricSim::iommu_map_interrupt`]): an entry whose source is the
//! requester delivers the entry's vector as the interrupt's data. A
//! compatibility-format write (what enumeration programs), a missing entry or another
//! requester's entry is blocked and recorded as a fault
//! ([`IommuFaultKind::Interrupt`]): a device cannot forge another's interrupt, or any
//! interrupt, with a DMA write. Host software programs its devices' MSI/MSI-X in the
//! remappable format once remapping is on, as Linux does.

use crate::params::IommuConfig;
use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::Bdf;
use std::collections::{HashMap, HashSet, VecDeque};

impl Default for IommuConfig {
    fn default() -> Self {
        IommuConfig {
            page_size: 4096,
            iotlb_entries: 64,
            hit_latency: SimDuration::ZERO,
            miss_latency: SimDuration::from_ns(200),
            nested_walk: SimDuration::ZERO,
            interrupt_remapping: false,
            pasid: false,
        }
    }
}

/// A fault: who, what address, when, and what kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IommuFault {
    /// When the request reached the IOMMU.
    pub time: SimTime,
    /// The requester.
    pub requester: Bdf,
    /// The untranslated address.
    pub iova: u64,
    /// A DMA translation or an interrupt request.
    pub kind: IommuFaultKind,
    /// The PASID the request carried, if any.
    pub pasid: Option<u32>,
}

/// What an [`IommuFault`] blocked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IommuFaultKind {
    /// A DMA request to an unmapped page.
    Translation,
    /// An interrupt request that remapping refused (compatibility format, no entry,
    /// or another requester's entry).
    Interrupt,
}

/// The MSI address of interrupt remapping handle `handle` (remappable format, no
/// sub-handle): host software programs it, with data 0, into a device's MSI or MSI-X
/// entry once it has mapped the handle ([`super::FabricSim::iommu_map_interrupt`]).
///
/// ```
/// use pcielab_fabric::timed::remappable_msi_address;
/// assert_eq!(remappable_msi_address(7), 0xfee0_00f0);
/// assert_eq!(remappable_msi_address(0x8001), 0xfee0_0034);
/// ```
pub fn remappable_msi_address(handle: u16) -> u64 {
    0xfee0_0000 | ((handle as u64 & 0x7fff) << 5) | (1 << 4) | (((handle as u64) >> 15) << 2)
}

/// An interrupt remapping table entry: the requester allowed to use it and the vector
/// the host's interrupt controller receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Irte {
    pub source: Bdf,
    pub vector: u32,
}

/// IOMMU counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IommuStats {
    /// IOTLB hits.
    pub hits: u64,
    /// IOTLB misses (page walks).
    pub misses: u64,
    /// Faults.
    pub faults: u64,
    /// ATS Translation Requests answered (see the `ats` module).
    pub translation_requests: u64,
    /// IOTLB misses of functions assigned to a virtual machine, which cost a nested
    /// walk (counted in `misses` too).
    pub nested_walks: u64,
}

/// The address space of requests from `bdf` with PASID `pasid` (NONE: without one):
/// the requester ID in the low 16 bits, PASID + 1 above (0: no PASID).
#[inline]
fn space(bdf: Bdf, pasid: u32) -> u64 {
    let p = if pasid == NONE { 0 } else { pasid as u64 + 1 };
    bdf.raw() as u64 | p << 16
}

/// No PASID (the engine's marker).
const NONE: u32 = super::tlp::NONE;

#[derive(Debug, Clone)]
pub(crate) struct Iommu {
    pub cfg: IommuConfig,
    shift: u32,
    /// (address space, page) → physical page; see [`space`].
    tables: HashMap<(u64, u64), u64>,
    /// (address space, page) → when its page walk ends, most recently used first.
    iotlb: VecDeque<((u64, u64), SimTime)>,
    pub stats: IommuStats,
    pub faults: Vec<IommuFault>,
    /// The interrupt remapping table: handle → entry.
    pub irt: HashMap<u16, Irte>,
    /// Functions assigned to a virtual machine: their IOTLB misses cost a nested walk.
    pub vm: HashSet<Bdf>,
}

impl Iommu {
    pub fn new(cfg: IommuConfig) -> Iommu {
        Iommu {
            cfg,
            shift: cfg.page_size.trailing_zeros(),
            tables: HashMap::new(),
            iotlb: VecDeque::new(),
            stats: IommuStats::default(),
            faults: Vec::new(),
            irt: HashMap::new(),
            vm: HashSet::new(),
        }
    }

    /// Maps `[iova, iova + len)` of `bdf` (with PASID `pasid`, or NONE) to `phys`
    /// (whole pages).
    pub fn map(&mut self, bdf: Bdf, pasid: u32, iova: u64, phys: u64, len: u64) {
        let ps = self.cfg.page_size;
        let first = iova >> self.shift;
        let pages = (iova % ps + len).div_ceil(ps);
        let sp = space(bdf, pasid);
        for i in 0..pages {
            self.tables
                .insert((sp, first + i), (phys >> self.shift) + i);
        }
    }

    /// Removes the mapping of `[iova, iova + len)` of `bdf` (with PASID `pasid`, or
    /// NONE; whole pages) and its IOTLB entries.
    pub fn unmap(&mut self, bdf: Bdf, pasid: u32, iova: u64, len: u64) {
        let ps = self.cfg.page_size;
        let first = iova >> self.shift;
        let pages = (iova % ps + len.max(1)).div_ceil(ps);
        let key = space(bdf, pasid);
        for i in 0..pages {
            self.tables.remove(&(key, first + i));
        }
        self.iotlb
            .retain(|&((b, p), _)| b != key || p < first || p >= first + pages);
    }

    /// The translated base of the page holding `iova`, without recording anything.
    pub fn peek(&self, bdf: Bdf, pasid: u32, iova: u64) -> Option<u64> {
        self.tables
            .get(&(space(bdf, pasid), iova >> self.shift))
            .map(|&p| p << self.shift)
    }

    /// Records a blocked request as a fault.
    pub fn fault(&mut self, now: SimTime, bdf: Bdf, pasid: u32, iova: u64) {
        self.record(now, bdf, pasid, iova, IommuFaultKind::Translation);
    }

    fn record(&mut self, now: SimTime, bdf: Bdf, pasid: u32, iova: u64, kind: IommuFaultKind) {
        self.stats.faults += 1;
        self.faults.push(IommuFault {
            time: now,
            requester: bdf,
            iova,
            kind,
            pasid: (pasid != NONE).then_some(pasid),
        });
    }

    /// An interrupt request (a write of `data` to `addr` in the interrupt range) from
    /// `bdf`: the vector to deliver, or `None` when remapping blocks it (recorded as a
    /// fault). Without remapping, `data` itself.
    pub fn remap_interrupt(&mut self, now: SimTime, bdf: Bdf, addr: u64, data: u32) -> Option<u32> {
        if !self.cfg.interrupt_remapping {
            return Some(data);
        }
        let entry = (addr & (1 << 4) != 0)
            .then(|| {
                let mut handle = ((addr >> 5) & 0x7fff) as u16 | (((addr >> 2) & 1) as u16) << 15;
                if addr & (1 << 3) != 0 {
                    handle = handle.wrapping_add(data as u16);
                }
                handle
            })
            .and_then(|h| self.irt.get(&h))
            .filter(|e| e.source == bdf);
        match entry {
            Some(e) => Some(e.vector),
            None => {
                self.record(now, bdf, NONE, addr, IommuFaultKind::Interrupt);
                None
            }
        }
    }

    /// Looks the page up in the IOTLB at `now` (filling it on a miss): the added
    /// latency. A hit on an entry whose page walk is still running waits for the walk
    /// to end (it counts as a hit: no second walk).
    pub fn lookup_latency(&mut self, bdf: Bdf, pasid: u32, iova: u64, now: SimTime) -> SimDuration {
        let key = (space(bdf, pasid), iova >> self.shift);
        if let Some(i) = self.iotlb.iter().position(|(k, _)| *k == key) {
            self.stats.hits += 1;
            let ready = self.iotlb[i].1;
            if i != 0 {
                if let Some(e) = self.iotlb.remove(i) {
                    self.iotlb.push_front(e);
                }
            }
            let wait = if ready > now {
                ready - now
            } else {
                SimDuration::ZERO
            };
            return self.cfg.hit_latency.max(wait);
        }
        self.stats.misses += 1;
        let walk = if !self.vm.is_empty() && self.vm.contains(&bdf) {
            self.stats.nested_walks += 1;
            self.nested_walk()
        } else {
            self.cfg.miss_latency
        };
        if self.tables.contains_key(&key) {
            self.iotlb.push_front((key, now + walk));
            self.iotlb.truncate(self.cfg.iotlb_entries.max(1));
        }
        walk
    }

    /// The cost of a nested walk: `nested_walk`, or `miss_latency` when it is zero.
    pub fn nested_walk(&self) -> SimDuration {
        if self.cfg.nested_walk > SimDuration::ZERO {
            self.cfg.nested_walk
        } else {
            self.cfg.miss_latency
        }
    }

    /// Translates, or records a fault and returns `None`. A request with a PASID
    /// faults when the IOMMU has no PASID support.
    pub fn translate(&mut self, now: SimTime, bdf: Bdf, pasid: u32, iova: u64) -> Option<u64> {
        let found = if pasid != NONE && !self.cfg.pasid {
            None
        } else {
            self.tables.get(&(space(bdf, pasid), iova >> self.shift))
        };
        match found {
            Some(&p) => Some((p << self.shift) | (iova & (self.cfg.page_size - 1))),
            None => {
                self.fault(now, bdf, pasid, iova);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_hits_and_faults() {
        let mut m = Iommu::new(IommuConfig {
            iotlb_entries: 2,
            ..IommuConfig::default()
        });
        let a = Bdf::new(1, 0, 0).unwrap();
        m.map(a, NONE, 0x1000, 0x9000, 0x3000); // iova pages 1,2,3 → phys pages 9,10,11
        assert_eq!(m.translate(SimTime::ZERO, a, NONE, 0x2abc), Some(0xaabc));
        assert_eq!(m.translate(SimTime::ZERO, a, NONE, 0x4000), None);
        assert_eq!(
            m.translate(SimTime::ZERO, Bdf::new(2, 0, 0).unwrap(), NONE, 0x1000),
            None
        );
        assert_eq!(m.stats.faults, 2);
        let miss = IommuConfig::default().miss_latency;
        let t = SimTime::from_ps(1_000_000);
        assert_eq!(m.lookup_latency(a, NONE, 0x1000, t), miss);
        assert_eq!(m.lookup_latency(a, NONE, 0x2000, t), miss);
        let later = t + miss;
        assert_eq!(m.lookup_latency(a, NONE, 0x1000, later), SimDuration::ZERO); // hit, now MRU
        assert_eq!(m.lookup_latency(a, NONE, 0x3000, later), miss); // evicts page 2 (LRU)
        assert_eq!(m.lookup_latency(a, NONE, 0x2000, later), miss);
        assert_eq!((m.stats.hits, m.stats.misses), (1, 4));
        // A hit while the page's walk still runs waits for the walk's end.
        let during = later + SimDuration::from_ns(50);
        assert_eq!(
            m.lookup_latency(a, NONE, 0x2000, during),
            SimDuration::from_ps(miss.as_ps() - 50_000)
        );
        assert_eq!((m.stats.hits, m.stats.misses), (2, 4));
    }
}
