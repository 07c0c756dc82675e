//! SR-IOV VFs in the functional fabric: host enumeration enables the `vfs = N` of a
//! psmem node (NumVFs, then VF Enable and VF MSE, as Linux's `sriov_numvfs` does), and
//! each VF is a function of its own: its Routing ID, its configuration space (PCIe
//! Base Specification 9.3.4), its slice of the PF's VF BARs, its memory and its MSI-X
//! table. Expected values are worked out here from the SR-IOV capability's fields, not
//! taken from the enumerator.

use crate::common::{bring_up, bring_up_file};
use pcielab_config::caps::{id, walk};
use pcielab_config::ext_caps::sriov;
use pcielab_config::header::{command, reg};
use pcielab_config::Bar;
use pcielab_fabric::functional::{Fabric, FnId, Origin, RouteError, Target, TlpDestination};
use pcielab_fabric::host::enumerate::{EnumeratedTree, Interrupts};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::topology::Topology;
use pcielab_wire::tlp::TlpRepr;
use pcielab_wire::types::CplStatus;
use pcielab_wire::{Bdf, ByteEnables, Tag};

/// The `sriov-4vf` example topology and a simulator built from it with `cfg`.
fn sriov_4vf_sim(
    cfg: pcielab_fabric::timed::SimConfig,
) -> (Topology, pcielab_fabric::timed::FabricSim) {
    let text = std::fs::read_to_string(crate::common::examples_dir().join("sriov-4vf.toml"))
        .expect("readable");
    let reg = KindRegistry::builtin();
    let topo = Topology::parse(&text, "sriov-4vf.toml", &reg).unwrap();
    let sim = pcielab_fabric::timed::FabricSim::new(&topo, &reg, cfg).unwrap();
    (topo, sim)
}

/// The name of the topology's psmem node (the PF of `sriov-4vf`).
fn psmem_node(topo: &Topology) -> String {
    let n = topo.nodes.iter().find(|n| n.kind == "psmem");
    n.expect("a psmem node").name.clone()
}

fn pf_of(fabric: &Fabric) -> (FnId, Bdf, u16) {
    let pf = (0..fabric.functions.len() as u32)
        .map(FnId)
        .find(|&f| fabric.name(f) == "nic")
        .expect("the PF");
    let cap = ext_cap(fabric, pf, id::EXT_SRIOV).expect("SR-IOV capability");
    (pf, fabric.bdf(pf), cap)
}

fn ext_cap(fabric: &Fabric, f: FnId, want: u16) -> Option<u16> {
    walk(fabric.functions[f.0 as usize].config.bytes())
        .0
        .iter()
        .find(|c| c.extended && c.id == want)
        .map(|c| c.offset)
}

/// The BDF of VF `i` from the PF's First VF Offset and VF Stride (9.3.3.9, 9.3.3.10),
/// read through configuration reads as software does.
fn vf_bdf(fabric: &Fabric, pf: Bdf, cap: u16, i: u16) -> Bdf {
    let dw = fabric
        .config_read(pf, cap + sriov::FIRST_VF_OFFSET)
        .unwrap();
    let (offset, stride) = (dw & 0xffff, dw >> 16);
    Bdf::from_raw((pf.raw() as u32 + offset + i as u32 * stride) as u16)
}

/// Base address of VF BAR `n` of the PF (64-bit when the next slot holds its upper half).
fn pf_vf_bar(fabric: &Fabric, pf: Bdf, cap: u16, n: u16, is64: bool) -> u64 {
    let lo = fabric
        .config_read(pf, cap + sriov::VF_BAR0 + 4 * n)
        .unwrap() as u64
        & !0xf;
    let hi = if is64 {
        fabric
            .config_read(pf, cap + sriov::VF_BAR0 + 4 * n + 4)
            .unwrap() as u64
    } else {
        0
    };
    lo | hi << 32
}

fn four_vfs() -> (Fabric, EnumeratedTree) {
    let (_, fabric, tree) = bring_up_file("sriov-4vf.toml");
    (fabric, tree)
}

#[test]
fn four_vfs_enumerate_each_with_its_own_routing_id() {
    let (fabric, tree) = four_vfs();
    let (pf, pfb, cap) = pf_of(&fabric);
    assert_eq!(pfb.to_string(), "01:00.0");
    // The SR-IOV capability as software left it.
    let ctl = fabric.config_read(pfb, cap + sriov::CONTROL).unwrap() as u16;
    assert_eq!(
        ctl & (sriov::VF_ENABLE | sriov::VF_MSE),
        sriov::VF_ENABLE | sriov::VF_MSE
    );
    let counts = fabric.config_read(pfb, cap + sriov::INITIAL_VFS).unwrap();
    assert_eq!(
        (counts & 0xffff, counts >> 16),
        (4, 4),
        "InitialVFs, TotalVFs"
    );
    assert_eq!(
        fabric.config_read(pfb, cap + sriov::NUM_VFS).unwrap() & 0xffff,
        4
    );
    let vfs = fabric.vfs_of(pf).to_vec();
    assert_eq!(vfs.len(), 4);
    // Per-VF sizes: VF BAR0 16 KiB (64-bit prefetchable), VF BAR2 4 KiB (MSI-X).
    let vf_bar0 = pf_vf_bar(&fabric, pfb, cap, 0, true);
    let vf_bar2 = pf_vf_bar(&fabric, pfb, cap, 2, false);
    let pf_entry = tree.get(pfb).unwrap();
    assert_eq!(pf_entry.vf_bars[0].address, vf_bar0);
    assert_eq!(pf_entry.vf_bars[0].bar.size(), 4 * (16 << 10));
    assert_eq!(pf_entry.vf_bars[1].address, vf_bar2);
    let mut seen_bdfs = Vec::new();
    let mut vectors = Vec::new();
    for (i, &vf) in vfs.iter().enumerate() {
        let want = vf_bdf(&fabric, pfb, cap, i as u16);
        // First VF Offset 1, VF Stride 1: 01:00.1 .. 01:00.4.
        assert_eq!(want.to_string(), format!("01:00.{}", i + 1));
        assert_eq!(fabric.bdf(vf), want);
        assert_eq!(fabric.name(vf), format!("nic.vf{i}"));
        seen_bdfs.push(want);
        let e = tree.get(want).expect("the VF is in the tree");
        assert_eq!(e.vf_of, Some((pfb, i as u16)));
        assert_eq!(e.parent, pf_entry.parent);
        // IDs as software gives them: PF's Vendor ID, VF Device ID of the capability.
        let vf_dev = fabric
            .config_read(pfb, (cap + sriov::VF_DEVICE_ID) & !3)
            .unwrap()
            >> 16;
        assert_eq!((e.vendor_id as u32, e.device_id as u32), (0x1fee, vf_dev));
        assert_eq!(vf_dev, 0x0011);
        // VF BAR n of VF i = PF's VF BAR n + i × per-VF size.
        let bars: Vec<(u8, u64, u64)> = e
            .bars
            .iter()
            .map(|b| (b.index, b.address, b.bar.size()))
            .collect();
        assert_eq!(
            bars,
            [
                (0, vf_bar0 + i as u64 * (16 << 10), 16 << 10),
                (2, vf_bar2 + i as u64 * 4096, 4096)
            ]
        );
        // MSI-X programmed through the VF's own table, Bus Master Enable set.
        let Interrupts::MsiX { entries } = &e.interrupts else {
            panic!("VF {i}: MSI-X not programmed: {:?}", e.interrupts);
        };
        assert_eq!(entries.len(), 4);
        vectors.extend(entries.iter().map(|x| x.1));
        let cmd = fabric.config_read(want, reg::COMMAND).unwrap() as u16;
        assert_eq!(cmd & command::BUS_MASTER, command::BUS_MASTER);
    }
    seen_bdfs.dedup();
    assert_eq!(seen_bdfs.len(), 4, "distinct Routing IDs");
    // Every vector of the tree is distinct (PF and VFs).
    let mut all: Vec<u32> = tree
        .functions
        .iter()
        .flat_map(|f| match &f.interrupts {
            Interrupts::MsiX { entries } => entries.iter().map(|e| e.1).collect(),
            Interrupts::Msi { data, .. } => data.clone(),
            Interrupts::None => Vec::new(),
        })
        .collect();
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n);
    // The tree lists the VFs right after their PF.
    let order: Vec<String> = tree.functions.iter().map(|f| f.bdf.to_string()).collect();
    assert_eq!(
        order,
        ["00:00.0", "00:01.0", "01:00.0", "01:00.1", "01:00.2", "01:00.3", "01:00.4"]
    );
}

#[test]
fn a_vfs_configuration_space_reads_as_the_specification_says() {
    let (mut fabric, _) = four_vfs();
    let (pf, pfb, cap) = pf_of(&fabric);
    let vfb = vf_bdf(&fabric, pfb, cap, 1);
    let vf = fabric.vfs_of(pf)[1];
    // 9.3.4.1.1/2: Vendor ID and Device ID read FFFFh; the function is there all the
    // same (Revision ID and Class Code are the PF's).
    assert_eq!(fabric.config_read(vfb, 0).unwrap(), 0xffff_ffff);
    assert_eq!(fabric.ecam_read((vfb.raw() as u64) << 12, 2), 0xffff);
    assert_eq!(
        fabric.config_read(vfb, reg::REVISION).unwrap(),
        fabric.config_read(pfb, reg::REVISION).unwrap()
    );
    // Header type 0, single function; no INTx (Interrupt Pin 0).
    assert_eq!(fabric.config_read(vfb, 0x0c).unwrap() >> 16 & 0xff, 0);
    assert_eq!(fabric.config_read(vfb, 0x3c).unwrap() >> 8 & 0xff, 0);
    let all = ByteEnables::ALL;
    // BARs and the expansion ROM are read-only zero.
    for off in (0x10..=0x24).step_by(4).chain([0x30]) {
        fabric.config_write(vfb, off, 0xffff_ffff, all).unwrap();
        assert_eq!(
            fabric.config_read(vfb, off).unwrap(),
            0,
            "register {off:#x}"
        );
    }
    // Command: only Bus Master Enable can be set (I/O Space, Memory Space, Interrupt
    // Disable and the error-reporting enables are the PF's or do not apply).
    fabric.config_write(vfb, reg::COMMAND, 0xffff, all).unwrap();
    assert_eq!(
        fabric.config_read(vfb, reg::COMMAND).unwrap() as u16,
        command::BUS_MASTER
    );
    // Capabilities: MSI-X (table and PBA in VF BAR2), PCI Express Endpoint with FLR,
    // ARI; no SR-IOV capability of its own, no MSI.
    let caps = walk(fabric.functions[vf.0 as usize].config.bytes()).0;
    let ids: Vec<(bool, u16)> = caps.iter().map(|c| (c.extended, c.id)).collect();
    assert_eq!(
        ids,
        [
            (false, id::MSIX as u16),
            (false, id::PCIE as u16),
            (true, id::EXT_ARI)
        ]
    );
    let msix = caps[0].offset;
    let table = fabric.config_read(vfb, msix + 4).unwrap();
    assert_eq!((table & 7, table & !7), (2, 0));
    let pba = fabric.config_read(vfb, msix + 8).unwrap();
    assert_eq!((pba & 7, pba & !7), (2, 4 * 16));
    let pcie = caps[1].offset;
    let pcie_caps = fabric.config_read(vfb, pcie).unwrap() >> 16;
    assert_eq!(
        (pcie_caps >> 4) & 0xf,
        0,
        "Device/Port Type: PCI Express Endpoint"
    );
    let devcap = fabric.config_read(vfb, pcie + 4).unwrap();
    assert_ne!(devcap & 1 << 28, 0, "Function Level Reset Capability");
}

#[test]
fn a_memory_write_to_vf_2_lands_in_vf_2_only() {
    let (mut fabric, tree) = four_vfs();
    let (pf, pfb, _) = pf_of(&fabric);
    let vfs = fabric.vfs_of(pf).to_vec();
    let bar0s: Vec<u64> = vfs
        .iter()
        .map(|&v| tree.get(fabric.bdf(v)).unwrap().bars[0].address)
        .collect();
    let bar0 = |i: usize| bar0s[i];
    let data = *b"written to VF 2!";
    fabric
        .memory_write(Origin::Host, bar0(2) + 0x100, &data)
        .unwrap();
    let r = fabric.route_memory(Origin::Host, bar0(2) + 0x100).unwrap();
    assert_eq!(
        r.target,
        Target::Bar {
            function: vfs[2],
            bar: 0,
            offset: 0x100
        }
    );
    let read = |fabric: &mut Fabric, a: u64| {
        let mut b = [0u8; 16];
        fabric.memory_read(Origin::Host, a, &mut b).unwrap();
        b
    };
    assert_eq!(read(&mut fabric, bar0(2) + 0x100), data);
    for i in [0, 1, 3] {
        assert_eq!(read(&mut fabric, bar0(i) + 0x100), [0; 16], "VF {i}");
    }
    let pf_bar0 = tree.get(pfb).unwrap().bars[0].address;
    assert_eq!(read(&mut fabric, pf_bar0 + 0x100), [0; 16], "PF");
    // VF 2's memory is 16 KiB: the next byte is VF 3's offset 0.
    let r = fabric
        .route_memory(Origin::Host, bar0(2) + (16 << 10))
        .unwrap();
    assert_eq!(
        r.target,
        Target::Bar {
            function: vfs[3],
            bar: 0,
            offset: 0
        }
    );
    // VF MSE off in the PF: no VF decodes.
    let (_, _, cap) = pf_of(&fabric);
    let ctl = fabric.config_read(pfb, cap + sriov::CONTROL).unwrap();
    fabric
        .config_write(
            pfb,
            cap + sriov::CONTROL,
            ctl & !(sriov::VF_MSE as u32),
            ByteEnables::from_bits_truncate(0b0011),
        )
        .unwrap();
    assert!(fabric.route_memory(Origin::Host, bar0(2)).is_err());
}

#[test]
fn configuration_requests_reach_each_vf() {
    let (mut fabric, _) = four_vfs();
    let (pf, pfb, cap) = pf_of(&fabric);
    let vfs = fabric.vfs_of(pf).to_vec();
    for (i, &vf) in vfs.iter().enumerate() {
        let b = vf_bdf(&fabric, pfb, cap, i as u16);
        let r = fabric.route_config(b).unwrap();
        assert_eq!(r.target, vf, "VF {i}");
        assert_eq!(fabric.name(r.hops[0]), "rc.0");
    }
    // A write to VF 1's Command reaches VF 1 only.
    let b1 = vf_bdf(&fabric, pfb, cap, 1);
    fabric
        .config_write(b1, reg::COMMAND, 0, ByteEnables::from_bits_truncate(0b0011))
        .unwrap();
    for i in 0..4 {
        let b = vf_bdf(&fabric, pfb, cap, i);
        let bme = fabric.config_read(b, reg::COMMAND).unwrap() as u16 & command::BUS_MASTER;
        assert_eq!(bme != 0, i != 1, "VF {i}");
    }
    // Function numbers past the last VF are absent.
    let past = vf_bdf(&fabric, pfb, cap, 4);
    assert_eq!(
        fabric.config_read(past, 0),
        Err(RouteError::NoFunction(past))
    );
}

#[test]
fn requests_and_completions_are_routed_to_and_from_each_vf_by_its_id() {
    let (mut fabric, tree) = four_vfs();
    let (pf, pfb, cap) = pf_of(&fabric);
    let vfs = fabric.vfs_of(pf).to_vec();
    let host = Bdf::new(0, 0, 0).unwrap();
    for (i, &vf) in vfs.iter().enumerate() {
        let b = vf_bdf(&fabric, pfb, cap, i as u16);
        // A completion for the VF's read, from the host: by the VF's ID.
        let cpl = TlpRepr::completion(host, b, Tag::new(3).unwrap(), CplStatus::Sc, 4, 0, &[0; 4])
            .unwrap();
        let r = fabric.route_tlp(Origin::Host, &cpl).unwrap();
        assert_eq!(
            r.target,
            TlpDestination::Function {
                function: vf,
                bar: None
            }
        );
        // From the PF to the VF (ID routing between functions of the device).
        assert_eq!(fabric.route_id(Origin::Function(pf), b).unwrap().target, vf);
        // The VF's DMA reaches host memory, and its MSI-X message carries its ID.
        fabric
            .memory_write(
                Origin::Function(vf),
                0x1000 * (i as u64 + 1),
                &[i as u8 + 1],
            )
            .unwrap();
        let mut got = [0u8];
        fabric.host_memory.read(0x1000 * (i as u64 + 1), &mut got);
        assert_eq!(got[0], i as u8 + 1);
        let Interrupts::MsiX { entries } = &tree.get(b).unwrap().interrupts else {
            panic!("MSI-X")
        };
        let before = fabric.interrupts.len();
        fabric.raise_msix(vf, 2).unwrap();
        let irq = fabric.interrupts[before];
        assert_eq!(
            (irq.from, irq.address, irq.data),
            (b, entries[2].0, entries[2].1)
        );
    }
}

#[test]
fn a_vfs_msix_table_is_its_own_and_masks_as_the_spec_says() {
    let (mut fabric, tree) = four_vfs();
    let (pf, _, _) = pf_of(&fabric);
    let vf = fabric.vfs_of(pf)[0];
    let vb = fabric.bdf(vf);
    let table = tree.get(vb).unwrap().bars[1].address;
    // Mask vector 1 through the VF's BAR (Vector Control, +12 of the entry).
    fabric
        .memory_write(Origin::Host, table + 16 + 12, &1u32.to_le_bytes())
        .unwrap();
    assert_eq!(
        fabric.raise_msix(vf, 1).unwrap(),
        pcielab_fabric::functional::Signal::Pending
    );
    // The PBA (after the 4-entry table) shows it pending; VF 1's does not.
    let pba = |fabric: &mut Fabric, f: FnId| {
        let t = tree.get(fabric.bdf(f)).unwrap().bars[1].address;
        let mut b = [0u8; 8];
        fabric.memory_read(Origin::Host, t + 64, &mut b).unwrap();
        u64::from_le_bytes(b)
    };
    assert_eq!(pba(&mut fabric, vf), 0b10);
    let other = fabric.vfs_of(pf)[1];
    assert_eq!(pba(&mut fabric, other), 0);
    assert_eq!(
        fabric.raise_msix(other, 1).unwrap(),
        pcielab_fabric::functional::Signal::Sent
    );
}

#[test]
fn clearing_vf_enable_removes_the_vfs_and_numvfs_is_held_while_enabled() {
    let (mut fabric, _) = four_vfs();
    let (pf, pfb, cap) = pf_of(&fabric);
    let with_vfs = fabric.functions.len();
    let w16 = |fabric: &mut Fabric, off: u16, v: u16| {
        let lane = off & 2;
        fabric
            .config_write(
                pfb,
                off & !3,
                (v as u32) << (8 * lane),
                ByteEnables::from_bits_truncate(0b11 << lane),
            )
            .unwrap();
    };
    let r16 = |fabric: &Fabric, off: u16| {
        (fabric.config_read(pfb, off & !3).unwrap() >> (8 * (off & 2))) as u16
    };
    // NumVFs cannot change while VF Enable is set.
    w16(&mut fabric, cap + sriov::NUM_VFS, 2);
    assert_eq!(r16(&fabric, cap + sriov::NUM_VFS), 4);
    let vf2 = vf_bdf(&fabric, pfb, cap, 2);
    let ctl = r16(&fabric, cap + sriov::CONTROL);
    w16(&mut fabric, cap + sriov::CONTROL, ctl & !sriov::VF_ENABLE);
    assert_eq!(fabric.vfs_of(pf).len(), 0);
    assert_eq!(fabric.functions.len(), with_vfs - 4);
    assert_eq!(fabric.function_at(vf2), None);
    assert_eq!(
        fabric.ecam_read(((vf2.raw() as u64) << 12) | 8, 4),
        0xffff_ffff
    );
    // Now NumVFs is writable: enable 2.
    w16(&mut fabric, cap + sriov::NUM_VFS, 2);
    w16(&mut fabric, cap + sriov::CONTROL, ctl);
    assert_eq!(fabric.vfs_of(pf).len(), 2);
    assert!(fabric.function_at(vf_bdf(&fabric, pfb, cap, 1)).is_some());
    assert_eq!(fabric.function_at(vf2), None);
    // NumVFs above TotalVFs (undefined in the specification): at most TotalVFs exist.
    w16(&mut fabric, cap + sriov::CONTROL, ctl & !sriov::VF_ENABLE);
    w16(&mut fabric, cap + sriov::NUM_VFS, 9);
    w16(&mut fabric, cap + sriov::CONTROL, ctl);
    assert_eq!(fabric.vfs_of(pf).len(), 4);
    // A Function Level Reset of the PF clears VF Enable: the VFs go.
    let pcie = walk(fabric.functions[pf.0 as usize].config.bytes())
        .0
        .iter()
        .find(|c| !c.extended && c.id == id::PCIE as u16)
        .unwrap()
        .offset;
    w16(&mut fabric, pcie + 8, 0x8000);
    assert_eq!(fabric.vfs_of(pf).len(), 0);
    assert_eq!(fabric.functions.len(), with_vfs - 4);
}

/// 64 VFs of one PF on one bus (ARI function numbers 1..=64, device numbers above 0
/// below a root port: the port's ARI Forwarding Enable lets them through).
#[test]
fn sixty_four_vfs_fit_on_the_pfs_bus() {
    let (_, fabric, tree) = bring_up(
        "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n\
         [[node]]\nname=\"nic\"\nkind=\"psmem\"\nsriov_vfs=128\nvfs=64\n\
         [[link]]\nup=\"rc.0\"\ndown=\"nic\"\ngen=4\nwidth=16\n",
    );
    let (pf, pfb, cap) = pf_of(&fabric);
    assert_eq!(fabric.vfs_of(pf).len(), 64);
    for i in 0..64u16 {
        let b = vf_bdf(&fabric, pfb, cap, i);
        assert_eq!((b.bus(), b.raw() & 0xff), (1, i + 1));
        assert_eq!(tree.get(b).unwrap().vf_of, Some((pfb, i)));
        assert_eq!(fabric.function_at(b), Some(fabric.vfs_of(pf)[i as usize]));
    }
    // The PF's VF BAR0 window holds TotalVFs (128) × 16 KiB.
    assert_eq!(
        tree.get(pfb).unwrap().vf_bars[0].bar.size(),
        128 * (16 << 10)
    );
    let vf63 = tree.get(vf_bdf(&fabric, pfb, cap, 63)).unwrap();
    assert!(matches!(vf63.bars[0].bar, Bar::Mem64 { size, .. } if size == 16 << 10));
}

/// The `vfs` key: TotalVFs follows it unless `sriov_vfs` is given; more VFs than
/// `sriov_vfs` is an error naming the key and its line.
#[test]
fn the_vfs_key_and_its_errors() {
    let reg = KindRegistry::builtin();
    let text = |extra: &str| {
        format!(
            "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n\
             [[node]]\nname=\"nic\"\nkind=\"psmem\"\n{extra}\n\
             [[link]]\nup=\"rc.0\"\ndown=\"nic\"\ngen=3\nwidth=4\n"
        )
    };
    let t = Topology::parse(&text("sriov_vfs = 2\nvfs = 3"), "t.toml", &reg).unwrap();
    let e = Fabric::build(&t, &reg).unwrap_err();
    assert_eq!((e.key.as_deref(), e.line), (Some("vfs"), 8), "{e}");
    assert!(e.to_string().contains("sriov_vfs (TotalVFs) is 2"), "{e}");
    // vfs = 0 with SR-IOV: the capability, no VFs.
    let (_, fabric, tree) = bring_up(&text("sriov_vfs = 2"));
    let (pf, _, _) = pf_of(&fabric);
    assert!(fabric.vfs_of(pf).is_empty());
    assert!(tree.functions.iter().all(|f| f.vf_of.is_none()));
    // vfs alone: TotalVFs = vfs.
    let (_, fabric, _) = bring_up(&text("vfs = 3"));
    let (pf, pfb, cap) = pf_of(&fabric);
    assert_eq!(fabric.config_read(pfb, cap + 0xc).unwrap() >> 16, 3);
    assert_eq!(fabric.vfs_of(pf).len(), 3);
    // Out of range.
    let e = Topology::parse(&text("vfs = 256"), "t.toml", &reg).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("vfs"), "{e}");
}

/// In the timed simulator each VF is a function of its own: an MMIO write to a VF's
/// BAR lands in that VF's memory only (psmem's VFs), and reads back over the links.
#[test]
fn in_the_timed_simulator_each_vf_has_its_own_bar() {
    use pcielab_fabric::timed::{FabricSim, HostRead, SimConfig};
    let (_, mut sim) = sriov_4vf_sim(SimConfig::default());
    let (pf, pfb, _) = pf_of(sim.fabric());
    let vfs = sim.fabric().vfs_of(pf).to_vec();
    assert_eq!(vfs.len(), 4);
    let bar = |sim: &FabricSim, b: Bdf| sim.tree().get(b).unwrap().bars[0].address;
    let vf_bdfs: Vec<Bdf> = vfs.iter().map(|&f| sim.fabric().bdf(f)).collect();
    for (i, &b) in vf_bdfs.iter().enumerate() {
        sim.mmio_write(bar(&sim, b) + 0x40, &[0x50 + i as u8; 8])
            .unwrap();
    }
    sim.run_for(pcielab_sim::SimDuration::from_us(5));
    let read = |sim: &mut FabricSim, a: u64| match sim.mmio_read(a, 8).unwrap() {
        HostRead::Done { data, .. } => data,
        r => panic!("{r:?}"),
    };
    for (i, &b) in vf_bdfs.iter().enumerate() {
        let a = bar(&sim, b) + 0x40;
        assert_eq!(read(&mut sim, a), vec![0x50 + i as u8; 8], "VF {i}");
    }
    let a = bar(&sim, pfb) + 0x40;
    assert_eq!(
        read(&mut sim, a),
        vec![0; 8],
        "the PF's memory is untouched"
    );
}

/// A device model on a 4-VF node: a write to VF i's BAR makes the device DMA 64 bytes
/// from host memory as that VF and raise the VF's own MSI-X vector 0. Every read
/// request carries the VF's requester ID, and every completion comes back to it.
#[test]
fn each_vf_dmas_with_its_own_requester_id() {
    use pcielab_fabric::timed::{DmaId, Endpoint, EpCx, SimConfig, TraceKind};
    use std::cell::RefCell;
    use std::rc::Rc;
    /// (function index, its requester ID as the model saw it, DMA ok, first byte).
    type Done = (u16, Bdf, bool, u8);
    #[derive(Debug, Default)]
    struct Vfs {
        done: Rc<RefCell<Vec<Done>>>,
        pending: Vec<(DmaId, u16, Bdf)>,
    }
    impl Endpoint for Vfs {
        fn mem_write(&mut self, _bar: u8, _off: u64, data: &[u8], cx: &mut EpCx<'_>) {
            // The call is about the function whose BAR was written: the DMA is its.
            let addr = u64::from_le_bytes(data[..8].try_into().unwrap());
            let id = cx.dma_read(addr, 64);
            self.pending.push((id, cx.function(), cx.bdf()));
        }
        fn dma_done(&mut self, id: DmaId, ok: bool, data: &[u8], cx: &mut EpCx<'_>) {
            let at = self.pending.iter().position(|p| p.0 == id).unwrap();
            let (_, func, bdf) = self.pending.swap_remove(at);
            // The call is about the function whose DMA finished: its vector 0.
            assert_eq!((cx.function(), cx.bdf()), (func, bdf));
            cx.msix(0);
            self.done
                .borrow_mut()
                .push((func, bdf, ok, data.first().copied().unwrap_or(0)));
        }
    }
    let cfg = SimConfig {
        trace: true,
        ..SimConfig::default()
    };
    let (topo, mut sim) = sriov_4vf_sim(cfg);
    let (pf, pfb, _) = pf_of(sim.fabric());
    let vfs = sim.fabric().vfs_of(pf).to_vec();
    let vf_bdfs: Vec<Bdf> = vfs.iter().map(|&f| sim.fabric().bdf(f)).collect();
    let name = psmem_node(&topo);
    let done = Rc::new(RefCell::new(Vec::new()));
    sim.attach(
        &name,
        Box::new(Vfs {
            done: done.clone(),
            pending: Vec::new(),
        }),
    )
    .unwrap();
    sim.run_for(pcielab_sim::SimDuration::from_us(5));
    let buf = sim.alloc_dma(4096);
    for i in 0..4u64 {
        sim.host_write(buf + 64 * i, &[0xa0 + i as u8; 64]);
    }
    let n0 = sim.interrupts().len();
    // Each VF, then the PF, is told where to read.
    for (i, &b) in vf_bdfs.iter().enumerate() {
        let bar = sim.tree().get(b).unwrap().bars[0].address;
        sim.mmio_write(bar, &(buf + 64 * i as u64).to_le_bytes())
            .unwrap();
    }
    let pf_bar = sim.tree().get(pfb).unwrap().bars[0].address;
    sim.mmio_write(pf_bar, &buf.to_le_bytes()).unwrap();
    sim.run_for(pcielab_sim::SimDuration::from_us(20));
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
    let mut got = done.borrow().clone();
    got.sort();
    let want: Vec<Done> = std::iter::once((0, pfb, true, 0xa0))
        .chain((0..4).map(|i| (1 + i as u16, vf_bdfs[i], true, 0xa0 + i as u8)))
        .collect();
    assert_eq!(got, want);
    // On the wire: five read requests, one per function, each with that function's
    // requester ID; their completions are addressed to the same IDs.
    let tr = sim.trace().unwrap();
    let tlps: Vec<TlpRepr<'_>> = tr
        .records
        .iter()
        .filter(|r| matches!(r.kind, TraceKind::Tlp { replay: false, .. }))
        .filter_map(|r| TlpRepr::parse_bytes(tr.bytes(r)).ok())
        .collect();
    let mut readers: Vec<Bdf> = tlps
        .iter()
        .filter(|t| {
            matches!(t.header, pcielab_wire::tlp::TlpHeader::Mem(m)
                if m.op == pcielab_wire::tlp::MemOp::Read && (buf..buf + 4096).contains(&m.address))
        })
        .map(|t| t.requester_id())
        .collect();
    readers.sort();
    readers.dedup();
    let mut all = vf_bdfs.clone();
    all.push(pfb);
    all.sort();
    assert_eq!(readers, all, "read requests by requester ID");
    let mut cpl_to: Vec<Bdf> = tlps
        .iter()
        .filter_map(|t| match t.header {
            pcielab_wire::tlp::TlpHeader::Cpl(c) => Some(c.requester_id),
            _ => None,
        })
        .filter(|r| all.contains(r))
        .collect();
    cpl_to.sort();
    cpl_to.dedup();
    assert_eq!(cpl_to, all, "completions by requester ID");
    // Five MSI-X messages, each from its own function (enumeration programmed each
    // function's table; the VFs' vectors follow the PF's).
    let irqs = &sim.interrupts()[n0..];
    let mut from: Vec<Bdf> = irqs.iter().map(|(_, i)| i.from).collect();
    from.sort();
    assert_eq!(from, all, "{irqs:?}");
    let mut data: Vec<u32> = irqs.iter().map(|(_, i)| i.data).collect();
    data.sort();
    data.dedup();
    assert_eq!(data.len(), 5, "distinct vectors: {irqs:?}");
}

/// A device whose VFs would not all fit on its bus (First VF Offset 255, VF Stride 1,
/// two VFs: VF 1's Routing ID is on the next bus): VF 0 (01:1f.7) exists, VF 1 is not
/// created, and enumeration stops with an error that says why.
#[test]
fn a_vf_beyond_the_pfs_bus_is_a_clear_error() {
    use pcielab_config::caps::CapabilityList;
    use pcielab_config::ext_caps::{AriCap, SriovCap};
    use pcielab_config::header::VfHeader;
    use pcielab_config::Type0;
    use pcielab_fabric::functional::{HwFunction, VfTemplate};
    use pcielab_fabric::host::enumerate::{enumerate, EnumError, HostConfig};
    use pcielab_fabric::kinds::{
        common_keys, Device, EndpointCtx, KeySpec, KeyType, KindError, KindRole, KindSpec,
        ParamValue,
    };
    fn build(ctx: &EndpointCtx<'_>) -> Result<Device, KindError> {
        let mut cs = Type0::default().build().map_err(|e| e.to_string())?;
        CapabilityList::new()
            .with(ctx.pcie)
            .with_ext(AriCap { next_function: 0 })
            .with_ext(SriovCap {
                total_vfs: 2,
                first_vf_offset: 255,
                vf_stride: 1,
                vf_device_id: 0x99,
                function: 0,
                vf_bars: [None; 6],
            })
            .install(&mut cs)
            .map_err(|e| e.to_string())?;
        let mut vf = VfHeader {
            class_code: 0xff_0000,
            revision: 0,
            subsystem_vendor: 0x1fee,
            subsystem_id: 0x99,
        }
        .build();
        CapabilityList::new()
            .with(ctx.pcie)
            .install(&mut vf)
            .map_err(|e| e.to_string())?;
        Ok(Device {
            functions: vec![HwFunction {
                devfn: 0,
                config: cs,
                bars: [None; 6],
                vfs: Some(VfTemplate {
                    config: vf,
                    bars: [None; 6],
                }),
            }],
            model: None,
        })
    }
    let mut reg = KindRegistry::builtin();
    let mut keys = vec![KeySpec {
        name: "vfs",
        ty: KeyType::Int { min: 0, max: 2 },
        default: Some(ParamValue::Int(0)),
        doc: "VFs to enable",
    }];
    keys.extend(common_keys(128, 0x42));
    reg.register(KindSpec {
        name: "far",
        role: KindRole::Endpoint(build),
        keys,
        doc: "VFs that do not fit on one bus",
    });
    let text = "[[node]]\nname = \"rc\"\nkind = \"root-complex\"\n\
                [[node]]\nname = \"nic\"\nkind = \"far\"\nvfs = 2\n\
                [[link]]\nup = \"rc.0\"\ndown = \"nic\"\ngen = 2\nwidth = 1\n";
    let topo = Topology::parse(text, "t.toml", &reg).unwrap();
    let mut fabric = Fabric::build(&topo, &reg).unwrap();
    let e = enumerate(&mut fabric, &HostConfig::default()).unwrap_err();
    let EnumError::Sriov { function, reason } = &e else {
        panic!("{e}")
    };
    assert_eq!(function.to_string(), "01:00.0");
    assert!(
        reason.contains("VF 1 would have Routing ID 0x0200, beyond bus 01"),
        "{e}"
    );
    let (pf, _, _) = pf_of(&fabric);
    assert_eq!(fabric.vfs_of(pf).len(), 1);
    let vf0: Bdf = "01:1f.7".parse().unwrap();
    assert_eq!(fabric.function_at(vf0), Some(fabric.vfs_of(pf)[0]));
    assert_eq!(fabric.name(fabric.vfs_of(pf)[0]), "nic.vf0");
    // A device without a model: its VF's BAR has nobody behind it.
    assert!(fabric
        .device(fabric.functions[pf.0 as usize].node)
        .is_none());
}

/// Peer-to-peer inside the device: the PF writes to VF 1's memory and VF 3 reads it,
/// each request claimed on the device's bus (no hop), each VF answering for its own BAR.
#[test]
fn the_pf_and_the_vfs_reach_each_other_on_their_bus() {
    let (mut fabric, tree) = four_vfs();
    let (pf, _, _) = pf_of(&fabric);
    let vfs = fabric.vfs_of(pf).to_vec();
    let bar0 = |f: FnId, fabric: &Fabric| tree.get(fabric.bdf(f)).unwrap().bars[0].address;
    let a1 = bar0(vfs[1], &fabric);
    let r = fabric.route_memory(Origin::Function(pf), a1 + 8).unwrap();
    assert!(r.hops.is_empty(), "{:?}", r.hops);
    assert_eq!(
        r.target,
        Target::Bar {
            function: vfs[1],
            bar: 0,
            offset: 8
        }
    );
    fabric
        .memory_write(Origin::Function(pf), a1 + 8, b"from PF")
        .unwrap();
    let mut got = [0u8; 7];
    fabric
        .memory_read(Origin::Function(vfs[3]), a1 + 8, &mut got)
        .unwrap();
    assert_eq!(&got, b"from PF");
    // A VF's request for its own BAR is not claimed on the bus by itself.
    assert!(fabric.route_memory(Origin::Function(vfs[1]), a1).is_err());
}

/// A link that goes down resets the device below it: VF Enable is cleared, so the
/// VFs go (as after a Function Level Reset of the PF), and the simulator's view of the
/// device's functions follows.
#[test]
fn a_reset_below_a_link_that_went_down_removes_the_vfs() {
    use pcielab_fabric::timed::SimConfig;
    use pcielab_sim::SimDuration;
    let (topo, mut sim) = sriov_4vf_sim(SimConfig::default());
    let (pf, _, _) = pf_of(sim.fabric());
    let vf0 = sim.fabric().bdf(sim.fabric().vfs_of(pf)[0]);
    let vf0_bar = sim.tree().get(vf0).unwrap().bars[0].address;
    let name = psmem_node(&topo);
    sim.run_for(SimDuration::from_us(5));
    sim.link_down(&name).unwrap();
    sim.run_for(SimDuration::from_us(50));
    sim.link_up(&name).unwrap();
    sim.run_for(SimDuration::from_ms(1));
    assert!(sim.fabric().vfs_of(pf).is_empty(), "the VFs are gone");
    assert_eq!(sim.fabric().function_at(vf0), None);
    // Their BAR space is nobody's now.
    let r = sim.mmio_read(vf0_bar, 4);
    assert!(
        !matches!(r, Ok(pcielab_fabric::timed::HostRead::Done { .. })),
        "{r:?}"
    );
}

/// With ATS on, the PF (whose ATS capability is enabled) translates through its ATC,
/// while a VF, which has no ATS capability, sends untranslated requests with its own
/// requester ID, translated by the IOMMU in its own domain: never through the PF's
/// ATC, never as a Translation Request of its own.
#[test]
fn with_ats_on_a_vf_without_ats_dmas_untranslated_under_its_own_id() {
    use pcielab_fabric::timed::{DmaId, Endpoint, EpCx, IommuConfig, SimConfig};
    use pcielab_wire::tlp::{MemOp, TlpHeader};
    use pcielab_wire::AddressType;
    use std::cell::RefCell;
    use std::rc::Rc;
    const IOVA: u64 = 0x4000_0000;
    /// (function index, DMA ok, the bytes read).
    type Done = Vec<(u16, bool, Vec<u8>)>;
    #[derive(Debug, Default)]
    struct Reader {
        done: Rc<RefCell<Done>>,
        pending: Vec<(DmaId, u16)>,
    }
    impl Endpoint for Reader {
        fn mem_write(&mut self, _bar: u8, _off: u64, _data: &[u8], cx: &mut EpCx<'_>) {
            // A write to a function's BAR: that function reads 64 bytes at IOVA.
            let id = cx.dma_read(IOVA, 64);
            self.pending.push((id, cx.function()));
        }
        fn dma_done(&mut self, id: DmaId, ok: bool, data: &[u8], _cx: &mut EpCx<'_>) {
            let at = self.pending.iter().position(|p| p.0 == id).unwrap();
            let (_, f) = self.pending.swap_remove(at);
            self.done.borrow_mut().push((f, ok, data.to_vec()));
        }
    }
    let cfg = SimConfig {
        trace: true,
        ats: true,
        iommu: Some(IommuConfig::default()),
        ..SimConfig::default()
    };
    let (topo, mut sim) = sriov_4vf_sim(cfg);
    let name = psmem_node(&topo);
    let bdfs: Vec<Bdf> = (0..5)
        .map(|i| sim.function_bdf(&name, i).unwrap())
        .collect();
    // Each function's IOVA maps to its own page, filled with its own byte.
    let base = sim.alloc_dma(5 * 4096);
    for i in 0..5u16 {
        let page = base + 4096 * i as u64;
        sim.host_write(page, &[0x50 + i as u8; 64]);
        sim.iommu_map_function(bdfs[i as usize], IOVA, page, 4096)
            .unwrap();
    }
    let done = Rc::new(RefCell::new(Vec::new()));
    sim.attach(
        &name,
        Box::new(Reader {
            done: done.clone(),
            pending: Vec::new(),
        }),
    )
    .unwrap();
    for i in [0u16, 2] {
        let bar = sim.function_bar(&name, i, 0).unwrap();
        sim.mmio_write(bar, &[1, 0, 0, 0]).unwrap();
    }
    sim.run_until_idle(pcielab_sim::SimTime::from_ps(u64::MAX / 2));
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
    let mut got = done.borrow().clone();
    got.sort_by_key(|d| d.0);
    assert_eq!(got.len(), 2);
    for (f, ok, data) in &got {
        assert!(*ok, "function {f}");
        assert_eq!(
            data,
            &vec![0x50 + *f as u8; 64],
            "function {f} read its own page"
        );
    }
    // On the wire: the PF asked for a translation and read translated; VF 2 (function
    // 2) only read, untranslated, under its own ID.
    let t = sim.trace().unwrap();
    let reads: Vec<(Bdf, AddressType)> = crate::common::trace_tlps(t)
        .filter_map(|(_, p)| match p.header {
            TlpHeader::Mem(m) if m.op == MemOp::Read => Some((m.requester_id, p.at)),
            _ => None,
        })
        .collect();
    let of =
        |b: Bdf| -> Vec<AddressType> { reads.iter().filter(|r| r.0 == b).map(|r| r.1).collect() };
    assert_eq!(
        of(bdfs[0]),
        [AddressType::TranslationRequest, AddressType::Translated]
    );
    assert_eq!(of(bdfs[2]), [AddressType::Untranslated]);
    assert_eq!(sim.ats_stats(&name).unwrap().translation_requests, 1);
}
