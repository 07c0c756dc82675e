//! Capture statistics: packet and byte counts per kind and per interface, and
//! request→completion latency percentiles and histogram.
//!
//! ```
//! use pcielab_capture::stats::Latencies;
//! let mut l = Latencies::default();
//! for v in [40, 10, 30, 20] { l.push(v); }
//! assert_eq!(l.percentile(50.0), Some(20)); // nearest rank: ceil(0.5 * 4) = 2nd smallest
//! assert_eq!(l.percentile(100.0), Some(40));
//! ```

use std::collections::BTreeMap;

/// Packets and bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Count {
    /// Packets.
    pub packets: u64,
    /// Bytes (TLP or DLLP bytes, without the encapsulation).
    pub bytes: u64,
}

impl Count {
    /// Adds one packet of `bytes` bytes.
    pub fn add(&mut self, bytes: usize) {
        self.packets += 1;
        self.bytes += bytes as u64;
    }
}

/// Request→completion latencies in picoseconds.
#[derive(Debug, Clone, Default)]
pub struct Latencies {
    values: Vec<u128>,
    sorted: bool,
}

impl Latencies {
    /// Adds a latency.
    pub fn push(&mut self, ps: u128) {
        self.values.push(ps);
        self.sorted = false;
    }

    /// Number of latencies.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    fn sort(&mut self) {
        if !self.sorted {
            self.values.sort_unstable();
            self.sorted = true;
        }
    }

    /// The `p`-th percentile (0 < p ≤ 100) by the nearest-rank method: the smallest value
    /// with at least p % of the values at or below it. `None` when empty.
    pub fn percentile(&mut self, p: f64) -> Option<u128> {
        if self.values.is_empty() {
            return None;
        }
        self.sort();
        let n = self.values.len();
        let rank = ((p / 100.0) * n as f64).ceil() as usize;
        Some(self.values[rank.clamp(1, n) - 1])
    }

    /// Smallest and largest.
    pub fn min_max(&mut self) -> Option<(u128, u128)> {
        self.sort();
        Some((*self.values.first()?, *self.values.last()?))
    }

    /// Mean, rounded down.
    pub fn mean(&self) -> Option<u128> {
        if self.values.is_empty() {
            return None;
        }
        Some(self.values.iter().sum::<u128>() / self.values.len() as u128)
    }

    /// A histogram of `bins` equal-width bins from the minimum to the maximum: each entry is
    /// `(low, high, count)`, a value `v` falling in the bin with `low <= v < high` (the last
    /// bin includes its `high`).
    pub fn histogram(&mut self, bins: usize) -> Vec<(u128, u128, u64)> {
        let Some((lo, hi)) = self.min_max() else {
            return Vec::new();
        };
        let bins = bins.max(1);
        let width = (hi - lo).div_ceil(bins as u128).max(1);
        let mut out: Vec<(u128, u128, u64)> = (0..bins as u128)
            .map(|i| (lo + i * width, lo + (i + 1) * width, 0))
            .take_while(|&(l, _, _)| l <= hi)
            .collect();
        let last = out.len() - 1;
        for &v in &self.values {
            let i = (((v - lo) / width) as usize).min(last);
            out[i].2 += 1;
        }
        out
    }
}

/// Statistics of a capture.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Per kind (TLP kind name, DLLP type name, `malformed`, `other`).
    pub per_kind: BTreeMap<String, Count>,
    /// Per interface name.
    pub per_interface: BTreeMap<String, Count>,
    /// Latency of each request to its last completion.
    pub latencies: Latencies,
    /// Completions with no pending request.
    pub unmatched_completions: u64,
    /// Requests that never got their last completion.
    pub missing_completions: u64,
    /// Data-link retransmissions (TLPs marked as replays by a simulation capture).
    pub dll_replays: u64,
}

impl Stats {
    /// Counts one packet of `bytes` bytes of kind `kind` on `interface`.
    pub fn count(&mut self, kind: &str, interface: &str, bytes: usize) {
        self.per_kind
            .entry(kind.to_string())
            .or_default()
            .add(bytes);
        self.per_interface
            .entry(interface.to_string())
            .or_default()
            .add(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_nearest_rank() {
        let mut l = Latencies::default();
        for v in 1..=10u128 {
            l.push(v * 100);
        }
        // Nearest rank: p90 of 10 values is the 9th, p99 the 10th, p10 the 1st.
        assert_eq!(l.percentile(90.0), Some(900));
        assert_eq!(l.percentile(99.0), Some(1000));
        assert_eq!(l.percentile(10.0), Some(100));
        assert_eq!(l.mean(), Some(550));
        assert_eq!(Latencies::default().percentile(50.0), None);
    }

    #[test]
    fn histogram_counts_every_value_once() {
        let mut l = Latencies::default();
        for v in [0u128, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10] {
            l.push(v);
        }
        // Range 0..=10 in 5 bins of width 2: [0,2) [2,4) [4,6) [6,8) [8,10] -> 2,2,2,2,3.
        let h = l.histogram(5);
        let counts: Vec<u64> = h.iter().map(|b| b.2).collect();
        assert_eq!(counts, vec![2, 2, 2, 2, 3]);
        assert_eq!(h[0].0, 0);
        let mut one = Latencies::default();
        one.push(7);
        assert_eq!(one.histogram(4), vec![(7, 8, 1)]);
    }
}
