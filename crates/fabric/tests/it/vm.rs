//! The host model's virtualization costs: a function assigned to a virtual machine
//! (`FabricSim::assign_vm`) pays a nested walk for each IOTLB miss (`nested_walk_ns`,
//! 0 = the same as `page_walk_ns`) and the injection of each interrupt into the guest
//! (`vm_irq_ns`, on top of `irq_ns`); a function not assigned pays neither. The
//! device is the `sriov-4vf` example: VF 1 assigned, VF 2 not, in the same run.

use pcielab_fabric::host::model::apply_knob;
use pcielab_fabric::timed::{DmaId, Endpoint, EpCx, FabricSim, SimConfig};
use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::Bdf;
use std::cell::RefCell;
use std::rc::Rc;

/// (function, start, end, data) of each DMA read.
type Reads = Rc<RefCell<Vec<(u16, SimTime, SimTime, Vec<u8>)>>>;

/// A write of (address, length) to a function's BAR 0 reads that much as the
/// function; a write of 8 bytes or fewer raises the function's MSI-X vector 0.
#[derive(Debug, Default)]
struct Probe {
    started: Vec<(DmaId, SimTime)>,
    reads: Reads,
}

impl Endpoint for Probe {
    fn mem_write(&mut self, _bar: u8, _off: u64, data: &[u8], cx: &mut EpCx<'_>) {
        if data.len() <= 8 {
            cx.msix(0);
            return;
        }
        let addr = u64::from_le_bytes(data[..8].try_into().unwrap());
        let len = u64::from_le_bytes(data[8..16].try_into().unwrap());
        let id = cx.dma_read(addr, len);
        self.started.push((id, cx.now()));
    }
    fn dma_done(&mut self, id: DmaId, ok: bool, data: &[u8], cx: &mut EpCx<'_>) {
        assert!(ok);
        let at = self.started.iter().find(|s| s.0 == id).unwrap().1;
        self.reads
            .borrow_mut()
            .push((cx.function(), at, cx.now(), data.to_vec()));
    }
}

/// The simulator on `sriov-4vf` with `knobs`, a `Probe` attached, and the BDFs of
/// functions 0..=4.
fn setup(knobs: &[(&str, &str)]) -> (FabricSim, Vec<Bdf>, Reads) {
    let mut cfg = SimConfig::default();
    for (k, v) in knobs {
        apply_knob(&mut cfg, k, v).unwrap();
    }
    let (mut sim, bdfs) = crate::common::sim_sriov_4vf(cfg);
    let reads = Reads::default();
    let probe = Probe {
        started: Vec::new(),
        reads: reads.clone(),
    };
    sim.attach("nic", Box::new(probe)).unwrap();
    (sim, bdfs, reads)
}

fn bar0(sim: &FabricSim, bdf: Bdf) -> u64 {
    sim.tree().get(bdf).unwrap().bars[0].address
}

/// One 64-byte read of guest address `GVA` by `bdf` (mapped to a buffer of its own,
/// so its first access misses the IOTLB): its latency, and the bytes are checked.
const GVA: u64 = 0x4000_0000;
fn one_read(sim: &mut FabricSim, bdf: Bdf, reads: &Reads, fill: u8) -> SimDuration {
    let phys = sim.alloc_dma(4096);
    sim.host_write(phys, &[fill; 64]);
    sim.iommu_map_function(bdf, GVA, phys, 4096).unwrap();
    let mut go = GVA.to_le_bytes().to_vec();
    go.extend(64u64.to_le_bytes());
    let bar = bar0(sim, bdf);
    sim.mmio_write(bar, &go).unwrap();
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
    let r = reads.borrow_mut().pop().expect("the read finished");
    assert_eq!(r.3, [fill; 64]);
    r.2 - r.1
}

#[test]
fn a_vm_functions_iotlb_miss_costs_the_nested_walk() {
    let knobs = [("page_walk_ns", "200"), ("nested_walk_ns", "900")];
    let (mut sim, bdfs, reads) = setup(&knobs);
    sim.assign_vm(bdfs[1]).unwrap();
    assert!(sim.vm_assigned(bdfs[1]) && !sim.vm_assigned(bdfs[2]));
    let vm = one_read(&mut sim, bdfs[1], &reads, 0x11);
    let native = one_read(&mut sim, bdfs[2], &reads, 0x22);
    // The same read, one IOTLB miss each: 900 ns against 200 ns.
    assert_eq!(
        vm.as_ps() - native.as_ps(),
        SimDuration::from_ns(700).as_ps(),
        "{vm} vs {native}"
    );
    let (st, _) = sim.iommu_stats().unwrap();
    assert_eq!((st.misses, st.nested_walks), (2, 1), "{st:?}");

    // nested_walk_ns = 0: the same as page_walk_ns.
    let (mut sim, bdfs, reads) = setup(&[("page_walk_ns", "200")]);
    sim.assign_vm(bdfs[1]).unwrap();
    let vm = one_read(&mut sim, bdfs[1], &reads, 0x33);
    let native = one_read(&mut sim, bdfs[2], &reads, 0x44);
    assert_eq!(vm, native);
    assert_eq!(sim.iommu_stats().unwrap().0.nested_walks, 1);
}

#[test]
fn a_vm_functions_interrupt_pays_the_injection() {
    let knobs = [("iommu", "on"), ("irq_ns", "500"), ("vm_irq_ns", "3000")];
    let (mut sim, bdfs, _) = setup(&knobs);
    sim.assign_vm(bdfs[1]).unwrap();
    for (bdf, cost) in [(bdfs[1], 3500), (bdfs[2], 500)] {
        let bar = bar0(&sim, bdf);
        sim.mmio_write(bar, &[1]).unwrap();
        let (handler, irq) = sim
            .wait_interrupt(SimDuration::from_us(100))
            .expect("an interrupt");
        assert_eq!(irq.from, bdf);
        let arrived = sim.interrupts().last().unwrap().0;
        assert_eq!(handler - arrived, SimDuration::from_ns(cost), "{bdf}");
        assert_eq!(sim.now(), handler, "the simulation ran to the handler");
    }
}

#[test]
fn vm_assignment_needs_the_iommu_and_a_function() {
    let (mut sim, bdfs, _) = setup(&[]);
    let e = sim.assign_vm(bdfs[1]).unwrap_err().to_string();
    assert!(e.contains("iommu"), "{e}");
    let (mut sim, _, _) = setup(&[("iommu", "on")]);
    let e = sim
        .assign_vm(Bdf::new(9, 0, 0).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("09:00.0"), "{e}");
}
