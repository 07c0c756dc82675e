//! ATS against a small IOTLB, the way an IOMMU researcher would look at it:
//!
//! 1. a device streams 4 KiB DMA reads over 64 random pages of its IOVA space through
//!    an IOMMU whose IOTLB holds 8 entries: most DMAs pay a page walk, which one DMA
//!    at a time (window 1) shows in its latency and eight in flight hide;
//! 2. the same with ATS on: the device caches translations in its own ATC (64
//!    entries), asks once per page, and its translated reads skip the IOMMU;
//! 3. the host unmaps a page: the root complex sends an ATS Invalidate Request and
//!    the device's Invalidate Completion comes back, with its round-trip time;
//! 4. demand paging with PRI: first touches of pages cost a page fault each.
//!
//! Run: `cargo run -p pcielab-fabric --example ats`

use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{AddrPattern, DmaOpKind, DmaStream, FabricSim, IommuConfig, SimConfig};
use pcielab_fabric::topology::Topology;
use pcielab_sim::{SimDuration, SimTime};

/// A Gen3 x8 device below a switch.
const TOPOLOGY: &str = "seed = 3
[[node]]
name = \"rc\"
kind = \"root-complex\"
[[node]]
name = \"sw\"
kind = \"switch\"
ports = 1
[[node]]
name = \"nic\"
kind = \"psmem\"
[[link]]
up = \"rc.0\"
down = \"sw\"
gen = 3
width = 8
[[link]]
up = \"sw.0\"
down = \"nic\"
gen = 3
width = 8
";

const IOVA: u64 = 0x1_0000_0000;
const PHYS: u64 = 0x8_0000_0000;
const PAGES: u64 = 64;

fn run(ats: bool, window: u32) -> Result<FabricSim, Box<dyn std::error::Error>> {
    let reg = KindRegistry::builtin();
    let topo = Topology::parse(TOPOLOGY, "ats-example.toml", &reg)?;
    let cfg = SimConfig {
        iommu: Some(IommuConfig {
            iotlb_entries: 8,
            miss_latency: SimDuration::from_ns(300),
            ..IommuConfig::default()
        }),
        ats,
        atc_entries: 64,
        ..SimConfig::default()
    };
    let mut sim = FabricSim::new(&topo, &reg, cfg)?;
    sim.iommu_map("nic", IOVA, PHYS, PAGES * 4096)?;
    sim.attach(
        "nic",
        Box::new(DmaStream::new(
            DmaOpKind::Read,
            4096,
            window,
            2000,
            IOVA,
            PAGES * 4096,
            AddrPattern::Random,
        )),
    )?;
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    Ok(sim)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "2000 DMA reads of 4 KiB over {PAGES} random pages, IOTLB 8 entries, page walk 300 ns"
    );
    println!(
        "{:<6} {:<6} {:>8} {:>10} {:>10} {:>9} {:>9} {:>9}",
        "mode", "window", "Gb/s", "mean ns", "max ns", "walks", "IOTLB hit", "ATC hit"
    );
    for (ats, window) in [(false, 1), (true, 1), (false, 8), (true, 8)] {
        let sim = run(ats, window)?;
        let r = sim
            .model("nic")
            .and_then(|m| m.report())
            .ok_or("no report")?;
        let (m, faults) = sim.iommu_stats().ok_or("no IOMMU")?;
        assert!(faults.is_empty(), "{faults:?}");
        let atc = sim.ats_stats("nic").map_or(0, |a| a.atc_hits);
        println!(
            "{:<6} {:<6} {:>8.2} {:>10.0} {:>10.0} {:>9} {:>9} {:>9}",
            if ats { "ATS" } else { "IOTLB" },
            window,
            r["gbps"].as_f64().unwrap_or(0.0),
            r["mean_latency_ns"].as_f64().unwrap_or(0.0),
            r["max_latency_ns"].as_f64().unwrap_or(0.0),
            m.misses,
            m.hits,
            atc
        );
        if ats && window == 8 {
            let a = sim.ats_stats("nic").ok_or("ATS off")?;
            println!(
                "ATS: {} Translation Requests, {} ATC misses, {} evictions",
                a.translation_requests, a.atc_misses, a.evictions
            );
            let mut sim = sim;
            sim.iommu_unmap("nic", IOVA + 5 * 4096, 4096)?;
            sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
            let v = sim.ats_invalidations()[0];
            let done = v.completed.ok_or("invalidation never completed")?;
            println!(
                "unmap of page 5: Invalidate Request (ITag {}) for {:#x}+{:#x}, completed after {:.0} ns",
                v.itag,
                v.base,
                v.size,
                (done - v.sent).as_ps() as f64 / 1000.0
            );
        }
    }
    demand_paging()?;
    Ok(())
}

/// 4. Demand paging with PRI: the buffer is mapped only when the device first touches a
///    page (a Page Request, 10 µs of host page-fault handling, a PRG Response); a second
///    pass over the same pages finds every translation in the ATC.
fn demand_paging() -> Result<(), Box<dyn std::error::Error>> {
    let reg = KindRegistry::builtin();
    let topo = Topology::parse(TOPOLOGY, "ats-example.toml", &reg)?;
    let cfg = SimConfig {
        iommu: Some(IommuConfig::default()),
        ats: true,
        pri: true,
        page_fault_latency: SimDuration::from_us(10),
        ..SimConfig::default()
    };
    let mut sim = FabricSim::new(&topo, &reg, cfg)?;
    sim.iommu_map_on_demand("nic", IOVA, PHYS, 16 * 4096)?;
    println!("\ndemand paging (PRI, 10 us page faults): 16 sequential 4 KiB reads, twice");
    for pass in ["first touch", "again"] {
        sim.attach(
            "nic",
            Box::new(DmaStream::new(
                DmaOpKind::Read,
                4096,
                1,
                16,
                IOVA,
                16 * 4096,
                AddrPattern::Sequential,
            )),
        )?;
        sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
        let r = sim
            .model("nic")
            .and_then(|m| m.report())
            .ok_or("no report")?;
        let a = sim.ats_stats("nic").ok_or("ATS off")?;
        println!(
            "{pass:<12} mean {:>8.0} ns per DMA; {} page requests, {} translation requests so far",
            r["mean_latency_ns"].as_f64().unwrap_or(0.0),
            a.page_requests,
            a.translation_requests
        );
    }
    Ok(())
}
