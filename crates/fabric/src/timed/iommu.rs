//! The root complex's IOMMU: per-device page tables and an IOTLB.
//!
//! DMA from a device to host memory is translated by the requester's page table
//! (I/O virtual address → physical). The IOTLB caches `entries` translations (LRU);
//! a hit costs `hit_latency`, a miss `miss_latency` (a page walk). An unmapped page is
//! a fault: the request is not performed, a read completes with Unsupported Request,
//! and the fault is recorded. MSI/MSI-X writes (the interrupt address range) pass
//! untranslated (interrupt remapping is not modelled).

use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::Bdf;
use std::collections::{HashMap, VecDeque};

/// IOMMU parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IommuConfig {
    /// Page size in bytes (a power of two, 4 KiB..=1 GiB). Default 4096.
    pub page_size: u64,
    /// IOTLB entries. Default 64.
    pub iotlb_entries: usize,
    /// Added latency of an IOTLB hit. Default 0.
    pub hit_latency: SimDuration,
    /// Added latency of an IOTLB miss (page walk). Default 200 ns.
    pub miss_latency: SimDuration,
}

impl Default for IommuConfig {
    fn default() -> Self {
        IommuConfig {
            page_size: 4096,
            iotlb_entries: 64,
            hit_latency: SimDuration::ZERO,
            miss_latency: SimDuration::from_ns(200),
        }
    }
}

/// A translation fault: who, what address, when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IommuFault {
    /// When the request reached the IOMMU.
    pub time: SimTime,
    /// The requester.
    pub requester: Bdf,
    /// The untranslated address.
    pub iova: u64,
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
}

#[derive(Debug, Clone)]
pub(crate) struct Iommu {
    pub cfg: IommuConfig,
    shift: u32,
    tables: HashMap<(u16, u64), u64>,
    /// (requester, page) → when its page walk ends, most recently used first.
    iotlb: VecDeque<((u16, u64), SimTime)>,
    pub stats: IommuStats,
    pub faults: Vec<IommuFault>,
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
        }
    }

    /// Maps `[iova, iova + len)` of `bdf` to `phys` (whole pages).
    pub fn map(&mut self, bdf: Bdf, iova: u64, phys: u64, len: u64) {
        let ps = self.cfg.page_size;
        let first = iova >> self.shift;
        let pages = (iova % ps + len).div_ceil(ps);
        for i in 0..pages {
            self.tables
                .insert((bdf.raw(), first + i), (phys >> self.shift) + i);
        }
    }

    /// Removes the mapping of `[iova, iova + len)` of `bdf` (whole pages) and its
    /// IOTLB entries.
    pub fn unmap(&mut self, bdf: Bdf, iova: u64, len: u64) {
        let ps = self.cfg.page_size;
        let first = iova >> self.shift;
        let pages = (iova % ps + len.max(1)).div_ceil(ps);
        for i in 0..pages {
            self.tables.remove(&(bdf.raw(), first + i));
        }
        let key = bdf.raw();
        self.iotlb
            .retain(|&((b, p), _)| b != key || p < first || p >= first + pages);
    }

    /// The translated base of the page holding `iova`, without recording anything.
    pub fn peek(&self, bdf: Bdf, iova: u64) -> Option<u64> {
        self.tables
            .get(&(bdf.raw(), iova >> self.shift))
            .map(|&p| p << self.shift)
    }

    /// Records a blocked request as a fault.
    pub fn fault(&mut self, now: SimTime, bdf: Bdf, iova: u64) {
        self.stats.faults += 1;
        self.faults.push(IommuFault {
            time: now,
            requester: bdf,
            iova,
        });
    }

    /// Looks the page up in the IOTLB at `now` (filling it on a miss): the added
    /// latency. A hit on an entry whose page walk is still running waits for the walk
    /// to end (it counts as a hit: no second walk).
    pub fn lookup_latency(&mut self, bdf: Bdf, iova: u64, now: SimTime) -> SimDuration {
        let key = (bdf.raw(), iova >> self.shift);
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
        if self.tables.contains_key(&key) {
            self.iotlb.push_front((key, now + self.cfg.miss_latency));
            self.iotlb.truncate(self.cfg.iotlb_entries.max(1));
        }
        self.cfg.miss_latency
    }

    /// Translates, or records a fault and returns `None`.
    pub fn translate(&mut self, now: SimTime, bdf: Bdf, iova: u64) -> Option<u64> {
        match self.tables.get(&(bdf.raw(), iova >> self.shift)) {
            Some(&p) => Some((p << self.shift) | (iova & (self.cfg.page_size - 1))),
            None => {
                self.fault(now, bdf, iova);
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
        m.map(a, 0x1000, 0x9000, 0x3000); // iova pages 1,2,3 → phys pages 9,10,11
        assert_eq!(m.translate(SimTime::ZERO, a, 0x2abc), Some(0xaabc));
        assert_eq!(m.translate(SimTime::ZERO, a, 0x4000), None);
        assert_eq!(
            m.translate(SimTime::ZERO, Bdf::new(2, 0, 0).unwrap(), 0x1000),
            None
        );
        assert_eq!(m.stats.faults, 2);
        let miss = IommuConfig::default().miss_latency;
        let t = SimTime::from_ps(1_000_000);
        assert_eq!(m.lookup_latency(a, 0x1000, t), miss);
        assert_eq!(m.lookup_latency(a, 0x2000, t), miss);
        let later = t + miss;
        assert_eq!(m.lookup_latency(a, 0x1000, later), SimDuration::ZERO); // hit, now MRU
        assert_eq!(m.lookup_latency(a, 0x3000, later), miss); // evicts page 2 (LRU)
        assert_eq!(m.lookup_latency(a, 0x2000, later), miss);
        assert_eq!((m.stats.hits, m.stats.misses), (1, 4));
        // A hit while the page's walk still runs waits for the walk's end.
        let during = later + SimDuration::from_ns(50);
        assert_eq!(
            m.lookup_latency(a, 0x2000, during),
            SimDuration::from_ps(miss.as_ps() - 50_000)
        );
        assert_eq!((m.stats.hits, m.stats.misses), (2, 4));
    }
}
