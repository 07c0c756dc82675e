//! Shared virtual addressing: one device working for two processes at once, each in
//! its own address space (a PASID), through an IOMMU with ATS and PRI — the way an
//! accelerator driver using SVA sees it.
//!
//! 1. Process 1's buffer is not resident: the device's first touch of each page is
//!    refused, asked for with a Page Request carrying PASID 1, and made resident after
//!    the host's page fault. Process 2's buffer is pinned: one Translation Request per
//!    page. Both use the same virtual addresses.
//! 2. A second pass finds every translation of both processes in the device's ATC.
//! 3. Process 2 exits: the host unmaps its buffer; one Invalidate Request with PASID 2
//!    takes its translations back, and process 1's stay cached.
//!
//! Run: `cargo run -p pcielab-fabric --example sva`

use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{DmaId, Endpoint, EpCx, FabricSim, IommuConfig, SimConfig};
use pcielab_fabric::topology::Topology;
use pcielab_sim::{SimDuration, SimTime};
use std::sync::{Arc, Mutex};

/// A Gen4 x8 accelerator below a switch.
const TOPOLOGY: &str = "seed = 5
[[node]]
name = \"rc\"
kind = \"root-complex\"
[[node]]
name = \"sw\"
kind = \"switch\"
ports = 1
[[node]]
name = \"acc\"
kind = \"psmem\"
[[link]]
up = \"rc.0\"
down = \"sw\"
gen = 4
width = 8
[[link]]
up = \"sw.0\"
down = \"acc\"
gen = 4
width = 8
";

/// The virtual address both processes' buffers start at.
const VA: u64 = 0x7f00_0000_0000;
const PAGES: u64 = 16;

/// Per PASID: DMAs finished, failed, and the sum of their latencies (ns).
type Tally = Arc<Mutex<[(u64, u64, f64); 2]>>;

/// Writes 4 KiB to every page of both processes, alternating PASIDs 1 and 2, four
/// DMAs in flight.
#[derive(Debug)]
struct Accelerator {
    next: u64,
    issued: std::collections::HashMap<DmaId, (usize, SimTime)>,
    tally: Tally,
}

impl Accelerator {
    fn issue(&mut self, cx: &mut EpCx<'_>) {
        while self.issued.len() < 4 && self.next < 2 * PAGES {
            let (p, page) = ((self.next % 2) as usize, self.next / 2);
            let data = vec![p as u8 + 1; 4096];
            let id = cx.dma_write_pasid(VA + page * 4096, data, p as u32 + 1);
            self.issued.insert(id, (p, cx.now()));
            self.next += 1;
        }
    }
}

impl Endpoint for Accelerator {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        self.issue(cx);
    }
    fn dma_done(&mut self, id: DmaId, ok: bool, _data: &[u8], cx: &mut EpCx<'_>) {
        if let Some((p, t0)) = self.issued.remove(&id) {
            let mut t = self.tally.lock().expect("tally");
            if ok {
                t[p].0 += 1;
                t[p].2 += (cx.now() - t0).as_ps() as f64 / 1000.0;
            } else {
                t[p].1 += 1;
            }
        }
        self.issue(cx);
    }
}

/// Runs one pass over both buffers and prints a line per process.
fn pass(sim: &mut FabricSim, what: &str) -> Result<(), Box<dyn std::error::Error>> {
    let tally = Tally::default();
    let t0 = sim.now();
    sim.attach(
        "acc",
        Box::new(Accelerator {
            next: 0,
            issued: Default::default(),
            tally: tally.clone(),
        }),
    )?;
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    let a = sim.ats_stats("acc").ok_or("ATS is off")?;
    let t = *tally.lock().expect("tally");
    println!(
        "{what}: {:.1} us; so far {} translation requests, {} page requests, {} ATC hits",
        (sim.now() - t0).as_ps() as f64 / 1e6,
        a.translation_requests,
        a.page_requests,
        a.atc_hits
    );
    for (p, (ok, failed, lat)) in t.iter().enumerate() {
        println!(
            "  PASID {}: {ok:>2} writes done, {failed:>2} failed, mean latency {:>8.0} ns",
            p + 1,
            if *ok > 0 { lat / *ok as f64 } else { 0.0 }
        );
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let reg = KindRegistry::builtin();
    let topo = Topology::parse(TOPOLOGY, "sva-example.toml", &reg)?;
    let cfg = SimConfig {
        iommu: Some(IommuConfig {
            pasid: true,
            ..IommuConfig::default()
        }),
        ats: true,
        pri: true,
        page_fault_latency: SimDuration::from_us(5),
        ..SimConfig::default()
    };
    let mut sim = FabricSim::new(&topo, &reg, cfg)?;
    let (buf1, buf2) = (sim.alloc_dma(PAGES * 4096), sim.alloc_dma(PAGES * 4096));
    // Process 1 is paged in on demand; process 2 pinned its buffer.
    sim.iommu_map_on_demand_pasid("acc", 1, VA, buf1, PAGES * 4096)?;
    sim.iommu_map_pasid("acc", 2, VA, buf2, PAGES * 4096)?;
    println!(
        "an accelerator writes {PAGES} pages of 4 KiB for each of two processes (PASIDs 1 and 2)"
    );
    println!("at the same virtual addresses; Gen4 x8, ATS, PRI with 5 us page faults\n");
    pass(&mut sim, "1. first touch")?;
    pass(&mut sim, "2. again")?;
    // Each process's data is in its own buffer.
    for (p, buf) in [(1u8, buf1), (2, buf2)] {
        let mut b = vec![0u8; (PAGES * 4096) as usize];
        sim.host_read(buf, &mut b);
        assert!(b.iter().all(|&x| x == p), "process {p}'s buffer");
    }
    // Process 2 exits.
    sim.iommu_unmap_pasid("acc", 2, VA, PAGES * 4096)?;
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    let v = *sim.ats_invalidations().last().ok_or("no invalidation")?;
    let done = v.completed.ok_or("the invalidation never completed")?;
    let a = sim.ats_stats("acc").ok_or("ATS is off")?;
    println!(
        "\nprocess 2 exits: Invalidate Request with PASID {:?} for {:#x}+{:#x}, completed after {:.0} ns; {} ATC entries dropped",
        v.pasid,
        v.base,
        v.size,
        (done - v.sent).as_ps() as f64 / 1000.0,
        a.invalidated_entries
    );
    pass(&mut sim, "3. after the exit")?;
    Ok(())
}
