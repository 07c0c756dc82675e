//! Enumeration of hand-checked topologies: bus numbers, addresses, MPS, interrupts,
//! routing of every request type, and the errors of exhaustion.

use crate::common::{bring_up, bring_up_file};
use pcielab_config::header::command;
use pcielab_fabric::functional::{Fabric, Origin, RouteError, Target};
use pcielab_fabric::host::enumerate::{enumerate, EnumError, HostConfig, Interrupts};
use pcielab_fabric::kinds::{KindRegistry, ParamValue};
use pcielab_fabric::topology::Topology;
use pcielab_wire::{Bdf, ByteEnables};

fn b(s: &str) -> Bdf {
    s.parse().unwrap()
}

/// design.toml by hand: rc ports 00:01.0 and 00:02.0; below rc.0 the switch takes
/// bus 1 (upstream port), bus 2 (internal), buses 3..=6 (its four downstream ports);
/// mem0 sits below port 1, on bus 4; rc.1 gets bus 7.
#[test]
fn design_example_bus_numbers_addresses_and_mps() {
    let (_, fabric, tree) = bring_up_file("design.toml");
    let ids: Vec<String> = tree.functions.iter().map(|f| f.bdf.to_string()).collect();
    assert_eq!(
        ids,
        [
            "00:00.0", "00:01.0", "00:02.0", "01:00.0", "02:00.0", "02:01.0", "02:02.0", "02:03.0",
            "04:00.0"
        ]
    );
    let bus = |s: &str| {
        tree.get(b(s))
            .unwrap()
            .buses
            .map(|r| (r.primary, r.secondary, r.subordinate))
    };
    assert_eq!(bus("00:01.0"), Some((0, 1, 6)));
    assert_eq!(bus("01:00.0"), Some((1, 2, 6)));
    assert_eq!(bus("02:01.0"), Some((2, 4, 4)));
    assert_eq!(bus("02:03.0"), Some((2, 6, 6)));
    assert_eq!(bus("00:02.0"), Some((0, 7, 7)));
    let mem0 = tree.get(b("04:00.0")).unwrap();
    assert_eq!(fabric.name(fabric.function_at(mem0.bdf).unwrap()), "mem0");
    // BAR0: 1 MiB 64-bit prefetchable at the start of the 64-bit aperture; BAR2: the
    // 4 KiB MSI-X BAR at the start of the 32-bit aperture.
    let bars: Vec<(u8, u64, u64)> = mem0
        .bars
        .iter()
        .map(|x| (x.index, x.bar.size(), x.address))
        .collect();
    assert_eq!(bars, [(0, 1 << 20, 0x40_0000_0000), (2, 4096, 0xc000_0000)]);
    for br in ["00:01.0", "01:00.0", "02:01.0"] {
        let w = tree.get(b(br)).unwrap().windows.unwrap();
        assert_eq!(w.mem, Some((0xc000_0000, 0xc00f_ffff)), "{br}");
        assert_eq!(w.pref, Some((0x40_0000_0000, 0x40_000f_ffff)), "{br}");
        assert_eq!(w.io, None, "{br}");
    }
    let w = tree.get(b("02:00.0")).unwrap().windows.unwrap();
    assert_eq!((w.mem, w.pref, w.io), (None, None, None));
    // MPS: rc and switch support 256, psmem 512 → 256 everywhere below rc.0; MRRS = MPS.
    for f in ["00:01.0", "01:00.0", "02:01.0", "04:00.0"] {
        assert_eq!(tree.get(b(f)).unwrap().mps, Some(256), "{f}");
        assert_eq!(tree.get(b(f)).unwrap().mrrs, Some(256), "{f}");
    }
    // Interrupts in discovery order: rc.0 0x30, rc.1 0x31, sw0.0..3 0x32..0x35,
    // mem0's four MSI-X entries 0x36..0x39.
    assert_eq!(
        tree.get(b("00:02.0")).unwrap().interrupts,
        Interrupts::Msi {
            address: 0xfee0_0000,
            data: vec![0x31]
        }
    );
    assert_eq!(
        tree.get(b("02:03.0")).unwrap().interrupts,
        Interrupts::Msi {
            address: 0xfee0_0000,
            data: vec![0x35]
        }
    );
    assert_eq!(
        mem0.interrupts,
        Interrupts::MsiX {
            entries: (0x36..=0x39).map(|d| (0xfee0_0000, d)).collect()
        }
    );
    let link = mem0.link.unwrap();
    assert_eq!(
        (link.gen, link.width, link.max_gen, link.max_width),
        (3, 8, 3, 8)
    );
}

#[test]
fn routing_of_every_request_type() {
    let (_, mut fabric, _) = bring_up_file("design.toml");
    let names = |f: &Fabric, hops: &[pcielab_fabric::functional::FnId]| -> Vec<String> {
        hops.iter().map(|&h| f.name(h)).collect()
    };
    // Configuration: Type 1 through rc.0, sw0, sw0.1; Type 0 at mem0.
    let r = fabric.route_config(b("04:00.0")).unwrap();
    assert_eq!(names(&fabric, &r.hops), ["rc.0", "sw0", "sw0.1"]);
    assert_eq!(fabric.config_read(b("04:00.0"), 0).unwrap(), 0x0010_1fee);
    // Absent functions: all-ones through ECAM; only device 0 below a port.
    assert_eq!(
        fabric.ecam_read((b("04:01.0").raw() as u64) << 12, 4),
        0xffff_ffff
    );
    assert_eq!(
        fabric.route_config(b("04:01.0")),
        Err(RouteError::NoFunction(b("04:01.0")))
    );
    assert_eq!(
        fabric.ecam_read((b("03:00.0").raw() as u64) << 12, 2),
        0xffff
    );
    assert_eq!(fabric.route_config(b("08:00.0")), Err(RouteError::NoBus(8)));
    // Memory from the host into mem0's BAR and back.
    fabric
        .memory_write(Origin::Host, 0x40_0000_1234, b"pcielab")
        .unwrap();
    let mut buf = [0u8; 7];
    fabric
        .memory_read(Origin::Host, 0x40_0000_1234, &mut buf)
        .unwrap();
    assert_eq!(&buf, b"pcielab");
    let r = fabric.route_memory(Origin::Host, 0x40_000f_ffff).unwrap();
    assert_eq!(names(&fabric, &r.hops), ["rc.0", "sw0", "sw0.1"]);
    assert!(matches!(
        r.target,
        Target::Bar {
            bar: 0,
            offset: 0xf_ffff,
            ..
        }
    ));
    // Just past the BAR: nothing claims it.
    assert_eq!(
        fabric.route_memory(Origin::Host, 0x40_0010_0000),
        Err(RouteError::MemoryUnclaimed(0x40_0010_0000))
    );
    assert_eq!(
        fabric.route_memory(Origin::Host, 0x1000),
        Err(RouteError::MemoryUnclaimed(0x1000))
    );
    // The MSI-X table as host software programmed it: entry 2 = 0xfee00000 / 0x38.
    let mut e = [0u8; 16];
    fabric
        .memory_read(Origin::Host, 0xc000_0020, &mut e)
        .unwrap();
    assert_eq!(u32::from_le_bytes(e[0..4].try_into().unwrap()), 0xfee0_0000);
    assert_eq!(u32::from_le_bytes(e[8..12].try_into().unwrap()), 0x38);
    assert_eq!(
        u32::from_le_bytes(e[12..16].try_into().unwrap()),
        0,
        "unmasked"
    );
    // DMA from mem0 to host memory goes up through sw0.1, sw0, rc.0.
    let mem0 = fabric.function_at(b("04:00.0")).unwrap();
    let r = fabric.route_memory(Origin::Function(mem0), 0x1000).unwrap();
    assert_eq!(names(&fabric, &r.hops), ["sw0.1", "sw0", "rc.0"]);
    assert_eq!(r.target, Target::HostMemory(0x1000));
    fabric
        .memory_write(Origin::Function(mem0), 0x1000, &[1, 2, 3])
        .unwrap();
    let mut hb = [0u8; 3];
    fabric.host_memory.read(0x1000, &mut hb);
    assert_eq!(hb, [1, 2, 3]);
    // Completions to the host's ID go up and end at the host bridge.
    let r = fabric
        .route_id(Origin::Function(mem0), b("00:00.0"))
        .unwrap();
    assert_eq!(names(&fabric, &r.hops), ["sw0.1", "sw0", "rc.0"]);
    assert_eq!(fabric.name(r.target), "rc");
    // Bus Master off in the endpoint: its requests are dropped.
    let cmd = fabric.config_read(b("04:00.0"), 4).unwrap() as u16;
    fabric
        .config_write(
            b("04:00.0"),
            4,
            (cmd & !command::BUS_MASTER) as u32,
            ByteEnables::new(0b0011).unwrap(),
        )
        .unwrap();
    assert_eq!(
        fabric.route_memory(Origin::Function(mem0), 0x1000),
        Err(RouteError::BusMasterDisabled(b("04:00.0")))
    );
    // Memory Space off in the switch: the host can no longer reach mem0.
    let cmd = fabric.config_read(b("01:00.0"), 4).unwrap() as u16;
    fabric
        .config_write(
            b("01:00.0"),
            4,
            (cmd & !command::MEMORY) as u32,
            ByteEnables::new(0b0011).unwrap(),
        )
        .unwrap();
    assert!(fabric.route_memory(Origin::Host, 0x40_0000_0000).is_err());
}

#[test]
fn peer_to_peer_and_io_in_nested_switches() {
    let (_, fabric, tree) = bring_up_file("nested-switches.toml");
    let id = |name: &str| {
        (0..fabric.functions.len() as u32)
            .map(pcielab_fabric::functional::FnId)
            .find(|&f| fabric.name(f) == name)
            .unwrap()
    };
    let c = tree.get(fabric.bdf(id("mem-c"))).unwrap();
    let r = fabric
        .route_memory(Origin::Function(id("mem-a")), c.bars[0].address + 8)
        .unwrap();
    let hops: Vec<String> = r.hops.iter().map(|&h| fabric.name(h)).collect();
    assert_eq!(hops, ["sw1.0", "sw1", "sw0.0", "sw0.1"]);
    assert_eq!(
        r.target,
        Target::Bar {
            function: id("mem-c"),
            bar: 0,
            offset: 8
        }
    );
    // mem-c's SR-IOV VF BAR0: 16 KiB per VF × 8 VFs, 64-bit prefetchable, in the
    // prefetchable window of sw0.1.
    let vf = c.vf_bars[0];
    assert_eq!(
        (vf.index, vf.bar.size(), vf.address % (16 << 10)),
        (0, 128 << 10, 0)
    );
    let w = tree.get(fabric.bdf(id("sw0.1"))).unwrap().windows.unwrap();
    let (lo, hi) = w.pref.unwrap();
    assert!(lo <= vf.address && vf.address + (128 << 10) - 1 <= hi);
    // mem-b's 32-byte I/O BAR is the only I/O resource: at the I/O aperture's base.
    let bb = tree.get(fabric.bdf(id("mem-b"))).unwrap();
    let io = bb
        .bars
        .iter()
        .find(|x| matches!(x.bar, pcielab_config::Bar::Io { .. }))
        .unwrap();
    assert_eq!(io.address, 0x1000);
    let r = fabric.route_io(Origin::Host, 0x1010).unwrap();
    assert_eq!(
        r.target,
        Target::Bar {
            function: id("mem-b"),
            bar: io.index,
            offset: 0x10
        }
    );
    assert_eq!(
        fabric.route_io(Origin::Host, 0x1020),
        Err(RouteError::IoUnclaimed(0x1020))
    );
    // mem-d below rc.1: 16 MiB prefetchable 32-bit BAR0 first (largest alignment), then
    // the 64 KiB expansion ROM, then the 4 KiB MSI-X BAR, all in the 32-bit window.
    let d = tree.get(fabric.bdf(id("mem-d"))).unwrap();
    let rom = d.rom.expect("ROM assigned");
    assert_eq!((rom.address, rom.bar.size()), (0xc100_0000, 64 << 10));
    assert_eq!(
        d.bars.iter().map(|x| x.address).collect::<Vec<_>>(),
        [0xc000_0000, 0xc101_0000]
    );
    let rom_reg = fabric.config_read(d.bdf, 0x30).unwrap();
    assert_eq!(rom_reg, 0xc100_0000, "assigned and left disabled");
    // mem-b supports only 128-byte payloads: everything below rc.0 runs at 128.
    assert_eq!(tree.get(fabric.bdf(id("mem-a"))).unwrap().mps, Some(128));
    assert_eq!(tree.get(fabric.bdf(id("mem-d"))).unwrap().mps, Some(256));
}

const ONE: &str = "[[node]]\nname = \"rc\"\nkind = \"root-complex\"\n\
                   [[node]]\nname = \"m\"\nkind = \"psmem\"\nBARCFG\n\
                   [[link]]\nup = \"rc.0\"\ndown = \"m\"\ngen = 3\nwidth = 4\n";

fn try_enumerate(text: &str) -> Result<(), EnumError> {
    let reg = KindRegistry::builtin();
    let topo = Topology::parse(text, "t.toml", &reg).unwrap();
    let mut fabric = Fabric::build(&topo, &reg).unwrap();
    enumerate(&mut fabric, &HostConfig::default()).map(|_| ())
}

#[test]
fn exhausted_address_space_is_a_clear_error() {
    let e = try_enumerate(&ONE.replace("BARCFG", "bar_size = \"512GiB\"")).unwrap_err();
    assert_eq!(
        e,
        EnumError::AddressSpaceExhausted {
            space: "prefetchable memory",
            needed: 512 << 30,
            available: 256 << 30
        }
    );
    assert!(e.to_string().contains("nothing was assigned"));
    // 1 GiB non-prefetchable 32-bit BAR + 4 KiB MSI-X → the rc.0 window needs 1 GiB + 1 MiB;
    // the aperture 0xc0000000..=0xfebfffff has 0x3ec00000 bytes.
    let e = try_enumerate(&ONE.replace(
        "BARCFG",
        "bar_size = \"1GiB\"\nbar64 = false\nprefetchable = false",
    ))
    .unwrap_err();
    assert_eq!(
        e,
        EnumError::AddressSpaceExhausted {
            space: "memory",
            needed: 0x4010_0000,
            available: 0x3ec0_0000
        }
    );
    // 256 GiB fills the 64-bit aperture exactly, and fits.
    assert_eq!(
        try_enumerate(&ONE.replace("BARCFG", "bar_size = \"256GiB\"")),
        Ok(())
    );
}

#[test]
fn exhausted_bus_numbers_is_a_clear_error() {
    // 1 + 8 root ports + 7 × (1 + 32) + (1 + 15) = 256 buses: fits exactly.
    let mut text = String::from("[[node]]\nname = \"rc\"\nkind = \"root-complex\"\nports = 8\n");
    for i in 0..8 {
        let ports = if i == 7 { 15 } else { 32 };
        text += &format!("[[node]]\nname = \"s{i}\"\nkind = \"switch\"\nports = {ports}\n[[link]]\nup = \"rc.{i}\"\ndown = \"s{i}\"\ngen = 1\nwidth = 1\n");
    }
    let (_, _, tree) = bring_up(&text);
    let last = tree
        .functions
        .iter()
        .filter_map(|f| f.buses)
        .map(|r| r.subordinate)
        .max();
    assert_eq!(last, Some(255));
    // One more downstream port needs bus 256: the loader refuses it, and so does
    // enumeration when the hardware has it anyway.
    assert!(Topology::parse(
        &text.replace("ports = 15", "ports = 16"),
        "t.toml",
        &KindRegistry::builtin()
    )
    .is_err());
    let reg = KindRegistry::builtin();
    let mut topo = Topology::parse(&text, "t.toml", &reg).unwrap();
    let s7 = topo.node("s7").unwrap();
    topo.nodes[s7.index()]
        .params
        .set("ports", ParamValue::Int(16), 0);
    let mut fabric = Fabric::build(&topo, &reg).unwrap();
    let e = enumerate(&mut fabric, &HostConfig::default()).unwrap_err();
    // s7's downstream ports are 0x??:00.0 … :0f.0 on its internal bus; the 16th (device
    // 0x0f) finds no bus number left.
    match e {
        EnumError::BusNumbersExhausted { bridge } => assert_eq!(bridge.device(), 15, "{bridge}"),
        other => panic!("{other}"),
    }
}

/// Found by the property test: a child window of 5 MiB aligned to 4 MiB is followed by
/// 3 MiB of padding before the next 4 MiB-aligned item, so the parent window must be
/// 12 MiB, not 4 + 5 = 9 MiB.
#[test]
fn window_size_counts_alignment_padding() {
    let text = "[[node]]\nname = \"rc\"\nkind = \"root-complex\"\n\
        [[node]]\nname = \"sw0\"\nkind = \"switch\"\nports = 2\n\
        [[node]]\nname = \"sw1\"\nkind = \"switch\"\nports = 2\n\
        [[node]]\nname = \"a\"\nkind = \"psmem\"\nbar_size = \"4MiB\"\n\
        [[node]]\nname = \"b\"\nkind = \"psmem\"\nbar_size = \"1MiB\"\n\
        [[node]]\nname = \"c\"\nkind = \"psmem\"\nbar_size = \"4MiB\"\n\
        [[link]]\nup = \"rc.0\"\ndown = \"sw0\"\ngen = 3\nwidth = 4\n\
        [[link]]\nup = \"sw0.0\"\ndown = \"sw1\"\ngen = 3\nwidth = 4\n\
        [[link]]\nup = \"sw1.0\"\ndown = \"a\"\ngen = 3\nwidth = 4\n\
        [[link]]\nup = \"sw1.1\"\ndown = \"b\"\ngen = 3\nwidth = 4\n\
        [[link]]\nup = \"sw0.1\"\ndown = \"c\"\ngen = 3\nwidth = 4\n";
    let (_, _, tree) = bring_up(text);
    // Buses: rc.0 → 1 (sw0 up), 2 (sw0 internal), 3 (sw0.0) → sw1: 4 (internal),
    // 5 (a), 6 (b); 7 (sw0.1, c).
    let pref = |s: &str| tree.get(b(s)).unwrap().windows.unwrap().pref;
    assert_eq!(pref("00:01.0"), Some((0x40_0000_0000, 0x40_00bf_ffff)));
    assert_eq!(pref("01:00.0"), Some((0x40_0000_0000, 0x40_00bf_ffff)));
    assert_eq!(pref("02:00.0"), Some((0x40_0000_0000, 0x40_004f_ffff)));
    assert_eq!(pref("02:01.0"), Some((0x40_0080_0000, 0x40_00bf_ffff)));
    assert_eq!(
        tree.get(b("07:00.0")).unwrap().bars[0].address,
        0x40_0080_0000
    );
    assert_eq!(
        tree.get(b("05:00.0")).unwrap().bars[0].address,
        0x40_0000_0000
    );
    assert_eq!(
        tree.get(b("06:00.0")).unwrap().bars[0].address,
        0x40_0040_0000
    );
}

#[test]
fn tlps_route_by_kind() {
    use pcielab_fabric::functional::TlpDestination;
    use pcielab_wire::tlp::TlpRepr;
    use pcielab_wire::{CplStatus, Tag};
    let (_, fabric, _) = bring_up_file("design.toml");
    let tag = Tag::new(3).unwrap();
    let host = b("00:00.0");
    let mem0 = fabric.function_at(b("04:00.0")).unwrap();
    let names = |hops: &[pcielab_fabric::functional::FnId]| -> Vec<String> {
        hops.iter().map(|&h| fabric.name(h)).collect()
    };
    // MRd from the host to mem0's BAR0.
    let rd = TlpRepr::mem_read(host, tag, 0x40_0000_0100, 4).unwrap();
    let r = fabric.route_tlp(Origin::Host, &rd).unwrap();
    assert_eq!(names(&r.hops), ["rc.0", "sw0", "sw0.1"]);
    assert_eq!(
        r.target,
        TlpDestination::Function {
            function: mem0,
            bar: Some((0, 0x100))
        }
    );
    // The completion goes back up to the root complex by requester ID.
    let cpl = TlpRepr::completion(b("04:00.0"), host, tag, CplStatus::Sc, 16, 0, &[0; 16]).unwrap();
    let r = fabric.route_tlp(Origin::Function(mem0), &cpl).unwrap();
    assert_eq!(names(&r.hops), ["sw0.1", "sw0", "rc.0"]);
    assert_eq!(r.target, TlpDestination::RootComplex);
    // An MWr from mem0 (DMA) lands in host memory.
    let wr = TlpRepr::mem_write(b("04:00.0"), tag, 0x8000, &[0; 8]).unwrap();
    assert_eq!(
        fabric
            .route_tlp(Origin::Function(mem0), &wr)
            .unwrap()
            .target,
        TlpDestination::HostMemory(0x8000)
    );
    // A configuration read: Type 1 through rc.0 and sw0; sw0.1 (the last hop, whose
    // secondary bus is 04) converts it to Type 0 for mem0.
    let cfg = TlpRepr::with_header(
        pcielab_wire::tlp::TlpHeader::Cfg(pcielab_wire::tlp::CfgHeader {
            write: false,
            type1: true,
            requester_id: host,
            tag,
            first_be: ByteEnables::ALL,
            target: b("04:00.0"),
            register: 0,
        }),
        &[],
    );
    let r = fabric.route_tlp(Origin::Host, &cfg).unwrap();
    assert_eq!(names(&r.hops), ["rc.0", "sw0", "sw0.1"]);
    assert_eq!(
        r.target,
        TlpDestination::Function {
            function: mem0,
            bar: None
        }
    );
    assert!(matches!(
        fabric.route_tlp(Origin::Function(mem0), &cfg),
        Err(RouteError::NotRoutable(_))
    ));
    // An MRd nobody claims: Unsupported Request.
    let ur = TlpRepr::mem_read(host, tag, 0x1000, 1).unwrap();
    assert_eq!(
        fabric.route_tlp(Origin::Host, &ur),
        Err(RouteError::MemoryUnclaimed(0x1000))
    );
}

/// A kind registered from outside (as later issues will): a two-function device. The
/// loader takes its keys, the host scans both functions of the multi-function device.
#[test]
fn registered_kind_with_two_functions() {
    use pcielab_config::caps::CapabilityList;
    use pcielab_config::{Bar, Type0};
    use pcielab_fabric::functional::HwFunction;
    use pcielab_fabric::kinds::{
        common_keys, Device, EndpointCtx, KeySpec, KeyType, KindError, KindRole, KindSpec,
    };
    fn build(ctx: &EndpointCtx<'_>) -> Result<Device, KindError> {
        let size = ctx.params.int("window").unwrap_or(4096) as u32;
        (0..2u8)
            .map(|f| {
                let mut bars = [None; 6];
                bars[0] = Some(Bar::Mem32 {
                    size,
                    prefetchable: false,
                });
                let mut cs = Type0 {
                    bars,
                    multi_function: true,
                    ..Type0::default()
                }
                .build()
                .map_err(|e| e.to_string())?;
                CapabilityList::new()
                    .with(ctx.pcie)
                    .install(&mut cs)
                    .map_err(|e| e.to_string())?;
                Ok(HwFunction {
                    devfn: f,
                    config: cs,
                    bars,
                    vfs: None,
                })
            })
            .collect::<Result<Vec<_>, KindError>>()
            .map(|functions| Device {
                functions,
                model: None,
            })
    }
    let mut reg = KindRegistry::builtin();
    let mut keys = vec![KeySpec {
        name: "window",
        ty: KeyType::Size {
            min: 16,
            max: 1 << 20,
            pow2: true,
        },
        default: Some(ParamValue::Int(4096)),
        doc: "BAR0 size of each function",
    }];
    keys.extend(common_keys(128, 0x42));
    reg.register(KindSpec {
        name: "dual",
        role: KindRole::Endpoint(build),
        keys,
        doc: "two functions",
    });
    let text = "[[node]]\nname = \"rc\"\nkind = \"root-complex\"\n\
                [[node]]\nname = \"d\"\nkind = \"dual\"\nwindow = \"64KiB\"\n\
                [[link]]\nup = \"rc.0\"\ndown = \"d\"\ngen = 2\nwidth = 1\n";
    let topo = Topology::parse(text, "t.toml", &reg).unwrap();
    let e = Topology::parse(&text.replace("window", "windw"), "t.toml", &reg).unwrap_err();
    assert_eq!(e.to_string(), "t.toml:7: key \"windw\": unknown key for kind \"dual\"; allowed: name, kind, window, max_gen, max_width, mps, aspm, vendor_id, device_id");
    let mut fabric = Fabric::build(&topo, &reg).unwrap();
    let tree = enumerate(&mut fabric, &HostConfig::default()).unwrap();
    let f0 = tree.get(b("01:00.0")).unwrap();
    let f1 = tree.get(b("01:00.1")).unwrap();
    // Two 64 KiB BARs in one 1 MiB window, function 0 first.
    assert_eq!(
        (f0.bars[0].address, f1.bars[0].address),
        (0xc000_0000, 0xc001_0000)
    );
    assert_eq!(
        fabric.name(fabric.function_at(b("01:00.1")).unwrap()),
        "d.1"
    );
    assert_eq!(f1.mps, Some(128));
}

/// Interrupts as host software programmed them, raised by the hardware, arriving at the
/// root complex; and the host's ECAM window.
#[test]
fn interrupts_and_ecam_window() {
    use pcielab_fabric::functional::{Interrupt, Signal, ECAM_BASE};
    let (_, mut fabric, _) = bring_up_file("design.toml");
    let mem0 = fabric.function_at(b("04:00.0")).unwrap();
    // MSI-X vector 2 of mem0 was programmed with data 0x38 (see the design test).
    assert_eq!(fabric.raise_msix(mem0, 2), Ok(Signal::Sent));
    assert_eq!(
        fabric.interrupts,
        [Interrupt {
            from: b("04:00.0"),
            address: 0xfee0_0000,
            data: 0x38
        }]
    );
    // The host masks vector 1 (Vector Control at table offset 0x1c): it goes pending.
    fabric
        .memory_write(Origin::Host, 0xc000_001c, &1u32.to_le_bytes())
        .unwrap();
    assert_eq!(fabric.raise_msix(mem0, 1), Ok(Signal::Pending));
    let mut pba = [0u8; 8];
    fabric
        .memory_read(Origin::Host, 0xc000_0040, &mut pba)
        .unwrap();
    assert_eq!(u64::from_le_bytes(pba), 0b10);
    assert_eq!(
        fabric.raise_msix(mem0, 4),
        Ok(Signal::Disabled),
        "only vectors 0..=3 exist"
    );
    // Root port 00:02.0 got MSI data 0x31.
    let rp1 = fabric.function_at(b("00:02.0")).unwrap();
    assert_eq!(fabric.raise_msi(rp1, 0), Ok(Signal::Sent));
    assert_eq!(
        fabric.interrupts.last(),
        Some(&Interrupt {
            from: b("00:02.0"),
            address: 0xfee0_0000,
            data: 0x31
        })
    );
    // ECAM: bus 4, device 0, function 0 at ECAM_BASE + (4 << 20).
    let mut id = [0u8; 4];
    fabric
        .memory_read(Origin::Host, ECAM_BASE + (4 << 20), &mut id)
        .unwrap();
    assert_eq!(u32::from_le_bytes(id), 0x0010_1fee);
    fabric
        .memory_read(Origin::Host, ECAM_BASE + (4 << 20) + (1 << 15), &mut id)
        .unwrap();
    assert_eq!(id, [0xff; 4], "absent device");
    // An ECAM write: clear Bus Master of mem0 (Command at offset 4); its MSI-X then
    // cannot reach the root complex.
    fabric
        .memory_write(Origin::Host, ECAM_BASE + (4 << 20) + 4, &[0x02])
        .unwrap();
    assert_eq!(
        fabric.raise_msix(mem0, 0),
        Err(RouteError::BusMasterDisabled(b("04:00.0")))
    );
}

/// Function Level Reset: Initiate FLR clears the function's non-sticky state (Command,
/// BARs, MSI-X) but keeps sticky AER bits, and reads back 0.
#[test]
fn function_level_reset() {
    let (_, mut fabric, tree) = bring_up_file("design.toml");
    let mem0 = tree.get(b("04:00.0")).unwrap();
    let pcie = mem0
        .caps
        .iter()
        .find(|c| !c.extended && c.id == 0x10)
        .unwrap()
        .offset;
    let aer = mem0
        .caps
        .iter()
        .find(|c| c.extended && c.id == 0x1)
        .unwrap()
        .offset;
    let id = fabric.function_at(mem0.bdf).unwrap();
    // A sticky error status bit the hardware set (Unsupported Request, bit 20).
    fabric.functions[id.0 as usize]
        .config
        .hw_write(aer + 4, 4, 1 << 20);
    assert_eq!(
        fabric.config_read(mem0.bdf, 4).unwrap() & 0x6,
        0x6,
        "memory + bus master on"
    );
    let devctl = fabric.config_read(mem0.bdf, pcie + 8).unwrap();
    fabric
        .config_write(
            mem0.bdf,
            pcie + 8,
            devctl | 0x8000,
            ByteEnables::new(0b0011).unwrap(),
        )
        .unwrap();
    assert_eq!(
        fabric.config_read(mem0.bdf, 4).unwrap() & 0xffff,
        0,
        "Command cleared"
    );
    assert_eq!(
        fabric.config_read(mem0.bdf, 0x10).unwrap(),
        0x0000_000c,
        "BAR0 back to its flags"
    );
    assert_eq!(
        fabric.config_read(mem0.bdf, pcie + 8).unwrap() & 0x8000,
        0,
        "Initiate FLR reads 0"
    );
    assert_eq!(
        fabric.config_read(mem0.bdf, aer + 4).unwrap(),
        1 << 20,
        "sticky AER status kept"
    );
    assert_eq!(
        fabric.route_memory(Origin::Host, 0x40_0000_0000),
        Err(RouteError::MemoryUnclaimed(0x40_0000_0000))
    );
}

/// Errors a kind's builder finds name the key and the line it was written on.
#[test]
fn builder_errors_name_the_key_line() {
    let text = ONE.replace("BARCFG", "msix_vectors = 8\nio_size = 3");
    let reg = KindRegistry::builtin();
    let topo = Topology::parse(&text, "t.toml", &reg).unwrap();
    let e = Fabric::build(&topo, &reg).unwrap_err();
    // Line 1-3 rc, 4 [[node]], 5 name, 6 kind, 7 msix_vectors, 8 io_size.
    assert_eq!(
        e.to_string(),
        "t.toml:8: key \"io_size\": node \"m\": 3 is not allowed; allowed: 0 (no I/O BAR) or a power of two from 4 to 256"
    );
}

/// Host software reads only the header, the capability headers along both lists and
/// the PCI Express capability, yet finds every capability a walk of the whole space
/// finds (checked on every example topology, an SR-IOV function included).
#[test]
fn sparse_capability_reads_find_what_a_full_walk_finds() {
    for file in [
        "design.toml",
        "all-links.toml",
        "nested-switches.toml",
        "sim-default.toml",
    ] {
        let (_, fabric, tree) = bring_up_file(file);
        let mut ext = 0;
        for f in &tree.functions {
            let id = fabric.function_at(f.bdf).unwrap();
            let full = pcielab_config::caps::walk(fabric.functions[id.0 as usize].config.bytes()).0;
            assert_eq!(f.caps, full, "{file} {}", f.bdf);
            ext += full.iter().filter(|c| c.extended).count();
        }
        assert!(ext > 0, "{file}: no extended capability to check");
    }
}
