//! Latency of single DMA transactions, as pcie-bench's LAT_RD and LAT_WRRD measure them.
//!
//! ```text
//!  LAT_RD(size)   = device + ser(first MRd) + hops × switch + root complex + memory
//!                   + hops × switch + ser(all completions)
//!  LAT_WRRD(size) = ser(all MWr of the write) + LAT_RD(size)
//!  ser(bytes)     = bytes × 8 / link bandwidth (Gb/s → ns)
//! ```
//!
//! Assumptions: switches forward cut-through (their latency is a parameter; store-and-
//! forward would add one TLP serialisation per hop); read requests beyond the first leave
//! while earlier completions are still arriving, so only the first request's serialisation
//! is on the critical path; completions stream back to back. LAT_WRRD issues the read
//! after the last write TLP has left; the read's completion cannot pass the posted write
//! (PCIe ordering), and the write's memory commit is taken to overlap the read's own
//! root-complex and memory time. The fixed latencies are parameters: measure them or take
//! them from the seeds. The defaults are `pcielab sim`'s (root complex 100 ns, memory
//! 80 ns, switch 150 ns), so that the model and the simulator answer alike by default:
//! a 64-byte read on one Gen3 x8 link is 194.9 ns here and 194.1 ns simulated.

use crate::bw::Model;
use crate::error::{Error, Result};

/// Fixed latencies of the path, nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencyParams {
    /// Time in the device between deciding to issue the request and its first bit.
    pub device_ns: f64,
    /// Switches between device and root complex.
    pub switch_hops: u32,
    /// Latency of one switch, per traversal.
    pub switch_ns: f64,
    /// Root complex latency, charged once as the simulator charges a DMA read (its
    /// request on the way in; memory answers it). Default 100 ns, `pcielab sim`'s.
    pub rc_ns: f64,
    /// Host memory access latency.
    pub mem_ns: f64,
}

impl Default for LatencyParams {
    fn default() -> Self {
        LatencyParams {
            device_ns: 0.0,
            switch_hops: 0,
            switch_ns: 150.0,
            rc_ns: 100.0,
            mem_ns: 80.0,
        }
    }
}

impl LatencyParams {
    fn check(&self) -> Result<()> {
        for (what, v) in [
            ("device latency (ns)", self.device_ns),
            ("switch latency (ns)", self.switch_ns),
            ("root complex latency (ns)", self.rc_ns),
            ("memory latency (ns)", self.mem_ns),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(Error::NotFinite { what });
            }
        }
        Ok(())
    }
}

/// LAT_RD and LAT_WRRD for one transfer size.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LatencyPoint {
    /// Transfer size, bytes.
    pub size: u64,
    /// Latency of a DMA read, ns.
    pub lat_rd_ns: f64,
    /// Latency of a DMA write followed by a DMA read of the same size, ns.
    pub lat_wrrd_ns: f64,
}

/// Evaluates the latency model at address 0.
///
/// ```
/// use pcielab_model::{latency::{self, LatencyParams}, Model, PcieConfig};
/// use pcielab_wire::Generation;
/// let m = Model::new(PcieConfig::new(Generation::Gen3, 8)?)?;
/// let p = LatencyParams { device_ns: 0.0, switch_hops: 0, switch_ns: 0.0, rc_ns: 0.0, mem_ns: 0.0 };
/// // Only serialisation left: MRd 24 B + CplD 84 B = 108 B at 57.885 Gb/s = 14.93 ns.
/// let l = latency::evaluate(&m, &p, 64)?;
/// assert!((l.lat_rd_ns - 14.926).abs() < 1e-3);
/// # Ok::<(), pcielab_model::Error>(())
/// ```
pub fn evaluate(model: &Model, p: &LatencyParams, size: u64) -> Result<LatencyPoint> {
    p.check()?;
    Model::check_size(size)?;
    if p.switch_hops > 1024 {
        return Err(Error::Invalid {
            what: "switch hops",
            value: p.switch_hops as u64,
            allowed: "0..=1024",
        });
    }
    let bits_per_ns = model.link_gbps();
    let ser = |bytes: u64| (bytes * 8) as f64 / bits_per_ns;
    let r = model.read_traffic(0, size);
    let w = model.write_traffic(0, size);
    let first_req = r.req_bytes / r.req_tlps.max(1);
    let lat_rd = p.device_ns
        + ser(first_req)
        + 2.0 * p.switch_hops as f64 * p.switch_ns
        + p.rc_ns
        + p.mem_ns
        + ser(r.cpl_bytes);
    Ok(LatencyPoint {
        size,
        lat_rd_ns: lat_rd,
        lat_wrrd_ns: ser(w.req_bytes) + lat_rd,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PcieConfig;
    use pcielab_wire::Generation;

    #[test]
    fn latency_by_hand() {
        // Gen1 x1 MPS 256 (link 2 × (1 − 16/416 − 4/1538) = 1.917875 Gb/s), read 512 B:
        // MRd 24 B; MRRS 512 → 1 request; 2 CplD of 20 + 256 → 552 B.
        // ser = (24 + 552) × 8 / 1.917885 = 2402.66 ns; + 2 hops × 100 × 2 + 300 + 80 + 10.
        let m = Model::new(PcieConfig::new(Generation::Gen1, 1).unwrap()).unwrap();
        let p = LatencyParams {
            device_ns: 10.0,
            switch_hops: 2,
            switch_ns: 100.0,
            rc_ns: 300.0,
            mem_ns: 80.0,
        };
        let l = evaluate(&m, &p, 512).unwrap();
        let link = 2.0 * (1.0 - 16.0 / 416.0 - 4.0 / 1538.0);
        let want_rd = 576.0 * 8.0 / link + 400.0 + 300.0 + 80.0 + 10.0;
        assert!((l.lat_rd_ns - want_rd).abs() < 1e-9);
        assert!((want_rd - 3192.66).abs() < 0.01);
        // Write 512 B: 2 MWr of 24 + 256 = 560 B.
        assert!((l.lat_wrrd_ns - (want_rd + 560.0 * 8.0 / link)).abs() < 1e-9);
    }

    #[test]
    fn bad_parameters() {
        let m = Model::new(PcieConfig::new(Generation::Gen3, 8).unwrap()).unwrap();
        let p = LatencyParams {
            mem_ns: -1.0,
            ..LatencyParams::default()
        };
        assert_eq!(
            evaluate(&m, &p, 64).unwrap_err().to_string(),
            "invalid memory latency (ns): must be a finite number ≥ 0"
        );
        assert!(evaluate(&m, &LatencyParams::default(), 0).is_err());
    }
}
