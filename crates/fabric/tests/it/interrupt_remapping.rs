//! Interrupt remapping in the IOMMU: only remappable-format interrupt requests whose
//! handle maps to an entry for the requester reach the host, with the entry's vector;
//! everything else in the interrupt address range is blocked and recorded, so a device
//! cannot forge interrupts with DMA writes. Without remapping it can.

use crate::common::switch_tree;
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{
    remappable_msi_address, Endpoint, EpCx, FabricSim, IommuConfig, IommuFaultKind, SimConfig,
};
use pcielab_sim::SimDuration;

/// What a [`Script`] device does at 10, 20, 30 … µs (one step each).
#[derive(Debug, Clone, Copy)]
enum Step {
    Nothing,
    /// An MSI-X vector.
    Msix(u16),
    /// A 4-byte DMA write of `data` at `addr`.
    Write(u64, u32),
}

#[derive(Debug)]
struct Script(Vec<Step>);

impl Endpoint for Script {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        for i in 0..self.0.len() as u64 {
            cx.timer(SimDuration::from_us(10 * (i + 1)), i);
        }
    }
    fn timer(&mut self, token: u64, cx: &mut EpCx<'_>) {
        match self.0[token as usize] {
            Step::Nothing => {}
            Step::Msix(v) => cx.msix(v),
            Step::Write(addr, data) => {
                cx.dma_write(addr, data.to_le_bytes().to_vec());
            }
        }
    }
}

/// Two psmem devices behind a switch, an IOMMU with or without interrupt remapping;
/// `setup` runs before the scripts are attached (the host programs the MSI-X tables
/// while psmem's own model still answers the BAR).
fn sim(
    remapping: bool,
    setup: impl FnOnce(&mut FabricSim),
    ep: Vec<Step>,
    ep2: Vec<Step>,
) -> FabricSim {
    let cfg = SimConfig {
        iommu: Some(IommuConfig {
            interrupt_remapping: remapping,
            ..IommuConfig::default()
        }),
        ..SimConfig::default()
    };
    let mut s = FabricSim::new(&switch_tree(1, false), &KindRegistry::builtin(), cfg).unwrap();
    setup(&mut s);
    s.attach("ep", Box::new(Script(ep))).unwrap();
    s.attach("ep2", Box::new(Script(ep2))).unwrap();
    s
}

/// Programs MSI-X entry `v` of `name` (psmem: the table at BAR 2) with `addr`/`data`,
/// unmasked.
fn program_msix(s: &mut FabricSim, name: &str, v: u64, addr: u64, data: u32) {
    let tbl = s.bar(name, 2).unwrap();
    let mut e = Vec::new();
    e.extend_from_slice(&(addr as u32).to_le_bytes());
    e.extend_from_slice(&((addr >> 32) as u32).to_le_bytes());
    e.extend_from_slice(&data.to_le_bytes());
    e.extend_from_slice(&0u32.to_le_bytes());
    s.mmio_write(tbl + 16 * v, &e).unwrap();
    // The posted write lands before anything else happens.
    s.run_for(SimDuration::from_us(1));
}

#[test]
fn remapping_delivers_mapped_interrupts_and_blocks_everything_else() {
    use Step::*;
    let handle_7 = remappable_msi_address(7);
    // The driver maps handle 7 to vector 0x41 for ep and programs its MSI-X entry 1 in
    // the remappable format; entry 0 stays as enumeration programmed it.
    let mut s = sim(
        true,
        |s| {
            s.iommu_map_interrupt("ep", 7, 0x41).unwrap();
            program_msix(s, "ep", 1, handle_7, 0);
        },
        vec![Msix(0), Msix(1), Nothing, Nothing, Msix(1)],
        vec![
            Nothing,
            Nothing,
            Write(handle_7, 0),
            Write(0xfee0_0000, 0x99),
        ],
    );
    let (ep, ep2) = (s.bdf("ep").unwrap(), s.bdf("ep2").unwrap());
    let fault = |s: &FabricSim, i: usize| {
        let f = s.iommu_stats().unwrap().1[i];
        (f.requester, f.iova, f.kind)
    };
    // 10 µs: vector 0 in the compatibility format: blocked.
    s.run_for(SimDuration::from_us(15));
    assert!(s.interrupts().is_empty());
    assert_eq!(fault(&s, 0), (ep, 0xfee0_0000, IommuFaultKind::Interrupt));
    // 20 µs: vector 1 is delivered, with the entry's vector.
    s.run_for(SimDuration::from_us(10));
    let irqs = s.interrupts().to_vec();
    assert_eq!(irqs.len(), 1, "{:?}", s.iommu_stats());
    assert_eq!(
        (irqs[0].1.from, irqs[0].1.address, irqs[0].1.data),
        (ep, handle_7, 0x41)
    );
    // 30, 40 µs: ep2 forges ep's interrupt, then a compatibility-format one: blocked.
    s.run_for(SimDuration::from_us(20));
    assert_eq!(s.interrupts().len(), 1);
    assert_eq!(fault(&s, 1), (ep2, handle_7, IommuFaultKind::Interrupt));
    assert_eq!(fault(&s, 2), (ep2, 0xfee0_0000, IommuFaultKind::Interrupt));
    // 50 µs: the handle was taken back: blocked.
    s.iommu_unmap_interrupt(7).unwrap();
    s.run_for(SimDuration::from_us(10));
    assert_eq!(s.interrupts().len(), 1);
    assert_eq!(fault(&s, 3), (ep, handle_7, IommuFaultKind::Interrupt));
    assert_eq!(s.iommu_stats().unwrap().0.faults, 4);
}

#[test]
fn a_sub_handle_selects_the_entry_with_the_data() {
    // Sub-Handle Valid (address bit 3): handle = address handle + data[15:0].
    let addr = remappable_msi_address(16) | (1 << 3);
    let mut s = sim(
        true,
        |s| {
            s.iommu_map_interrupt("ep", 19, 0x55).unwrap();
            program_msix(s, "ep", 0, addr, 3);
        },
        vec![Step::Msix(0)],
        vec![],
    );
    s.run_for(SimDuration::from_us(15));
    let irqs = s.interrupts().to_vec();
    assert_eq!(irqs.len(), 1, "{:?}", s.iommu_stats());
    assert_eq!(irqs[0].1.data, 0x55);
}

#[test]
fn without_remapping_a_dma_write_forges_an_interrupt() {
    let mut s = sim(false, |_| {}, vec![], vec![Step::Write(0xfee0_0000, 0x99)]);
    let ep2 = s.bdf("ep2").unwrap();
    s.run_for(SimDuration::from_us(15));
    let irqs = s.interrupts().to_vec();
    assert_eq!(irqs.len(), 1);
    assert_eq!((irqs[0].1.from, irqs[0].1.data), (ep2, 0x99));
    let e = s
        .iommu_map_interrupt("ep", 1, 0x41)
        .unwrap_err()
        .to_string();
    assert!(e.contains("interrupt_remapping"), "{e}");
}
