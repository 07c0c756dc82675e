//! The real `lspci` (pciutils) reads our dumps of every example topology.

use crate::common::{bring_up, examples};
use pcielab_fabric::host::enumerate::EnumeratedTree;
use std::collections::BTreeMap;
use std::process::Command;

fn lspci(file: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new("lspci").arg("-F").arg(file).args(args).output().unwrap_or_else(|e| {
        panic!("cannot run `lspci` ({e}); these tests need pciutils (Debian/Ubuntu: apt-get install pciutils)")
    });
    assert!(
        out.status.success(),
        "lspci -F {} {args:?}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("lspci prints UTF-8")
}

fn dump_to_temp(tag: &str, text: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("pcielab-{}-{tag}.lspci", std::process::id()));
    std::fs::write(&p, text).expect("temp file writable");
    p
}

/// Splits `lspci -vvv` output into blocks by function ID.
fn blocks(vvv: &str) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let mut cur: Option<String> = None;
    for line in vvv.lines() {
        if !line.starts_with(char::is_whitespace) && !line.is_empty() {
            let id = line.split_whitespace().next().unwrap_or("").to_string();
            cur = Some(id.clone());
            m.insert(id, String::new());
        } else if let Some(c) = &cur {
            let e = m.get_mut(c).expect("block exists");
            e.push_str(line.trim());
            e.push('\n');
        }
    }
    m
}

fn hex_range(line: &str) -> Option<(u64, u64)> {
    // "Memory behind bridge: c0000000-c00fffff [size=1M] [32-bit]"
    let r = line.split(": ").nth(1)?.split_whitespace().next()?;
    let (a, b) = r.split_once('-')?;
    Some((
        u64::from_str_radix(a, 16).ok()?,
        u64::from_str_radix(b, 16).ok()?,
    ))
}

fn speed(gen: u8) -> &'static str {
    [
        "?", "2.5GT/s", "5GT/s", "8GT/s", "16GT/s", "32GT/s", "64GT/s",
    ][gen as usize]
}

fn check(tag: &str, text: &str) {
    let (topo, fabric, tree): (_, _, EnumeratedTree) = bring_up(text);
    let path = dump_to_temp(tag, &fabric.lspci_dump());
    let vvv = lspci(&path, &["-vvv"]);
    let bl = blocks(&vvv);
    assert_eq!(
        bl.len(),
        tree.functions.len(),
        "{tag}: lspci lists every function\n{vvv}"
    );
    for bad in [
        "Unknown",
        "unknown",
        "broken",
        "<?>",
        "!!!",
        "access denied",
    ] {
        for (id, b) in &bl {
            assert!(!b.contains(bad), "{tag} {id}: lspci printed {bad:?}:\n{b}");
        }
    }
    for f in &tree.functions {
        let b = &bl[&f.bdf.to_string()];
        let id = fabric.function_at(f.bdf).expect("function exists");
        let name = fabric.name(id);
        // The link of the topology file, as lspci decodes LnkSta.
        let node = topo
            .node(&name)
            .or_else(|| topo.node(name.split('.').next().unwrap_or("")));
        let func = &fabric.functions[id.0 as usize];
        if let Some((g, w)) = func.link {
            let want = format!("LnkSta:\tSpeed {}, Width x{}", speed(g.number()), w);
            assert!(b.contains(&want), "{tag} {name}: want {want:?} in\n{b}");
        }
        aspm_agrees(tag, &name, b, func.config.bytes());
        // Links in the file drive the endpoints' LnkSta.
        if let (Some(n), None) = (node, f.buses) {
            if let Some(l) = topo.uplink(n) {
                let want = format!("Speed {}, Width x{}", speed(l.gen.number()), l.width);
                assert!(b.contains(&want), "{tag} {name}: {want}");
            }
        }
        if let Some(r) = f.buses {
            let want = format!(
                "Bus: primary={:02x}, secondary={:02x}, subordinate={:02x}",
                r.primary, r.secondary, r.subordinate
            );
            assert!(b.contains(&want), "{tag} {name}: {want}\n{b}");
        }
        // Every region lspci shows lies inside its parent bridge's window as lspci shows it.
        if let Some(p) = f.parent {
            let pb = &bl[&p.to_string()];
            let windows: Vec<(u64, u64)> = pb
                .lines()
                .filter(|l| l.contains("behind bridge:"))
                .filter_map(hex_range)
                .collect();
            for l in b.lines().filter(|l| l.starts_with("Expansion ROM at")) {
                let addr = l
                    .split_whitespace()
                    .nth(3)
                    .and_then(|s| u64::from_str_radix(s, 16).ok());
                let addr = addr.unwrap_or_else(|| panic!("{tag} {name}: unassigned ROM {l:?}"));
                assert!(
                    windows.iter().any(|&(lo, hi)| lo <= addr && addr <= hi),
                    "{tag} {name}: {l} outside {windows:x?}"
                );
            }
            for l in b.lines().filter(|l| l.starts_with("Region")) {
                // "Region 0: Memory at 4000000000 (64-bit, prefetchable) [size=1M]"
                // pciutils quirk: reading a dump (no sysfs flags), lspci shows the upper
                // half of a 64-bit BAR above 4 GiB as one more, unassigned region.
                let idx: u8 = l[7..]
                    .split(':')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("region index");
                let upper_half = f.bars.iter().any(|x| {
                    x.index + 1 == idx
                        && matches!(x.bar, pcielab_config::Bar::Mem64 { .. })
                        && x.address >> 32 != 0
                });
                if upper_half {
                    assert!(l.contains("<unassigned>"), "{tag} {name}: {l}");
                    continue;
                }
                let addr = l
                    .split(" at ")
                    .nth(1)
                    .and_then(|s| s.split_whitespace().next())
                    .and_then(|s| u64::from_str_radix(s, 16).ok());
                let addr = addr.unwrap_or_else(|| panic!("{tag} {name}: unassigned region {l:?}"));
                assert!(
                    windows.iter().any(|&(lo, hi)| lo <= addr && addr <= hi),
                    "{tag} {name}: {l} outside {windows:x?}"
                );
            }
        }
    }
    let _ = std::fs::remove_file(&path);
}

/// Our decoder and lspci say the same of ASPM support, exit latencies and control
/// (our "ASPM …" phrases of LnkCap and LnkCtl appear in lspci's lines).
fn aspm_agrees(tag: &str, name: &str, lspci_block: &str, bytes: &[u8]) {
    let ours = pcielab_config::decode::describe(bytes);
    for reg in ["LnkCap:", "LnkCtl:"] {
        let Some(our_line) = ours.lines().find(|l| l.trim_start().starts_with(reg)) else {
            continue;
        };
        let phrase = &our_line[our_line.find("ASPM").expect("our line names ASPM")..];
        let theirs = lspci_block
            .lines()
            .find(|l| l.starts_with(reg))
            .unwrap_or_else(|| panic!("{tag} {name}: lspci shows no {reg}\n{lspci_block}"));
        assert!(
            theirs.contains(phrase),
            "{tag} {name}: we say {phrase:?}, lspci says {theirs:?}"
        );
    }
}

/// With the timed simulator's ASPM policy on, lspci reads the enabled states and the
/// exit latencies the simulator advertises (N_FTS 255: more than 4 µs; L1 40 µs:
/// below 64 µs).
#[test]
fn lspci_reads_the_aspm_the_simulator_programs() {
    use pcielab_fabric::kinds::KindRegistry;
    use pcielab_fabric::timed::{FabricSim, SimConfig};
    let topo = crate::common::switch_tree(1, false);
    let cfg = SimConfig {
        aspm: 3,
        n_fts: 255,
        aspm_l1_exit: pcielab_sim::SimDuration::from_us(40),
        ..SimConfig::default()
    };
    let sim = FabricSim::new(&topo, &KindRegistry::builtin(), cfg).unwrap();
    let path = dump_to_temp("aspm", &sim.fabric().lspci_dump());
    let bl = blocks(&lspci(&path, &["-vvv"]));
    let ep = sim.bdf("ep").unwrap().to_string();
    let b = &bl[&ep];
    assert!(
        b.contains("ASPM L0s L1, Exit Latency L0s unlimited, L1 <64us"),
        "{b}"
    );
    assert!(b.contains("LnkCtl:\tASPM L0s L1 Enabled"), "{b}");
    let f = sim.fabric().function_at(sim.bdf("ep").unwrap()).unwrap();
    aspm_agrees(
        "aspm",
        "ep",
        b,
        sim.fabric().functions[f.0 as usize].config.bytes(),
    );
    let _ = std::fs::remove_file(&path);
}

#[test]
fn lspci_decodes_every_example_topology() {
    for p in examples() {
        let text = std::fs::read_to_string(&p).expect("readable");
        check(&p.file_stem().unwrap().to_string_lossy(), &text);
    }
}

/// The tree lspci draws for design.toml: rc.0 → switch (buses 01-06) with four
/// downstream ports, mem0 on bus 04; rc.1 alone on bus 07.
#[test]
fn lspci_tree_of_the_design_example() {
    let text = std::fs::read_to_string(crate::common::examples_dir().join("design.toml"))
        .expect("readable");
    let (_, fabric, _) = bring_up(&text);
    let path = dump_to_temp("tree", &fabric.lspci_dump());
    let t = lspci(&path, &["-t"]);
    let want = "\
-[0000:00]-+-00.0
           +-01.0-[01-06]----00.0-[02-06]--+-00.0-[03]--
           |                               +-01.0-[04]----00.0
           |                               +-02.0-[05]--
           |                               \\-03.0-[06]--
           \\-02.0-[07]--
";
    assert_eq!(t, want);
    let _ = std::fs::remove_file(&path);
}

/// After a refused configuration request, lspci reads the port's First Error Pointer
/// (Unsupported Request, bit 20 = 0x14) and its Header Log; the words it prints are
/// the request's header as the wire codec encodes it.
#[test]
fn lspci_reads_the_first_error_pointer_and_header_log() {
    use pcielab_fabric::kinds::KindRegistry;
    use pcielab_fabric::timed::{FabricSim, SimConfig};
    let topo = crate::common::switch_tree(1, false);
    let mut sim = FabricSim::new(&topo, &KindRegistry::builtin(), SimConfig::default()).unwrap();
    let ep = sim.bdf("ep").unwrap();
    let down = sim.tree().get(ep).unwrap().parent.unwrap();
    let absent = pcielab_wire::Bdf::new(ep.bus(), 7, 0).unwrap();
    sim.config_read(absent, 0x24).unwrap();
    let path = dump_to_temp("aer-log", &sim.fabric().lspci_dump());
    let bl = blocks(&lspci(&path, &["-vvv"]));
    let b = &bl[&down.to_string()];
    // ECRC generation and checking capable, Completion Timeout Prefix/Header Log
    // Capable, Multiple Header Recording capable (not enabled).
    let cap = "First Error Pointer: 14, ECRCGenCap+ ECRCGenEn- ECRCChkCap+ ECRCChkEn-";
    let cap2 = "MultHdrRecCap+ MultHdrRecEn- TLPPfxPres- HdrLogCap+";
    assert!(b.contains(&format!("AERCap:\t{cap}")), "{b}");
    assert!(b.contains(cap2), "{b}");
    assert!(b.contains("UnsupReq+"), "{b}");
    let line = b
        .lines()
        .find(|l| l.starts_with("HeaderLog:"))
        .unwrap_or_else(|| panic!("lspci shows no HeaderLog\n{b}"));
    let words: Vec<u32> = line["HeaderLog:".len()..]
        .split_whitespace()
        .map(|w| u32::from_str_radix(w, 16).expect("hex words"))
        .collect();
    assert_eq!(words.len(), 4, "{line}");
    // The request the host sent, encoded independently by the wire codec: a Type 1
    // CfgRd from the host (00:00.0), tag not compared.
    let host = pcielab_wire::Bdf::new(0, 0, 0).unwrap();
    let want = pcielab_wire::tlp::TlpRepr::with_header(
        pcielab_wire::tlp::TlpHeader::Cfg(pcielab_wire::tlp::CfgHeader {
            write: false,
            type1: true,
            requester_id: host,
            tag: pcielab_wire::Tag::new(0).unwrap(),
            first_be: pcielab_wire::ByteEnables::from_bits_truncate(0xf),
            target: absent,
            register: 0x24 >> 2,
        }),
        &[],
    )
    .to_vec()
    .unwrap();
    let got: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
    // DW1 holds the requester ID (bytes 4-5), the tag (byte 6) and the byte enables.
    let tagless = |b: &[u8]| [&b[..6], &b[7..12]].concat();
    assert_eq!(tagless(&got[..12]), tagless(&want), "{line}");
    assert_eq!(&got[12..], [0; 4]);
    // Our decoder prints the same line.
    let f = sim.fabric().function_at(down).unwrap();
    let ours =
        pcielab_config::decode::describe(sim.fabric().functions[f.0 as usize].config.bytes());
    assert!(ours.contains(line), "{ours}");
    assert!(ours.contains(&format!("AERCap: {cap}")), "{ours}");
    assert!(ours.contains(cap2), "{ours}");
    let _ = std::fs::remove_file(&path);
}

/// lspci's `-vvv` block of `ep`, its lines that start with one of `prefixes` (each
/// checked to be in our decoder's description too), and that description.
fn ep_lines(
    sim: &pcielab_fabric::timed::FabricSim,
    tag: &str,
    prefixes: &[&str],
) -> (String, Vec<String>, String) {
    let path = dump_to_temp(tag, &sim.fabric().lspci_dump());
    let bl = blocks(&lspci(&path, &["-vvv"]));
    let _ = std::fs::remove_file(&path);
    let ep = sim.bdf("ep").unwrap();
    let b = bl[&ep.to_string()].clone();
    let theirs: Vec<String> = b
        .lines()
        .filter(|l| prefixes.iter().any(|p| l.starts_with(p)))
        .map(str::to_string)
        .collect();
    let f = sim.fabric().function_at(ep).unwrap();
    let ours =
        pcielab_config::decode::describe(sim.fabric().functions[f.0 as usize].config.bytes());
    for l in &theirs {
        assert!(ours.contains(l.as_str()), "{l:?} not in\n{ours}");
    }
    (b, theirs, ours)
}

/// lspci reads psmem's ATS and PRI capabilities: disabled at reset, then as the
/// simulator's `ats` and `pri` options and a driver's write of the Smallest
/// Translation Unit leave them; our decoder prints the same lines.
#[test]
fn lspci_reads_the_ats_and_pri_capabilities() {
    use pcielab_fabric::kinds::KindRegistry;
    use pcielab_fabric::timed::{FabricSim, IommuConfig, SimConfig};
    let topo = crate::common::switch_tree(1, false);
    let lines = |sim: &FabricSim, tag: &str| {
        let (b, theirs, _) = ep_lines(
            sim,
            tag,
            &[
                "ATSCap:",
                "ATSCtl:",
                "PRICtl:",
                "PRISta:",
                "Page Request Capacity:",
            ],
        );
        assert!(b.contains("Address Translation Service (ATS)"), "{b}");
        assert!(b.contains("Page Request Interface (PRI)"), "{b}");
        theirs
    };
    let sim = FabricSim::new(&topo, &KindRegistry::builtin(), SimConfig::default()).unwrap();
    assert_eq!(
        lines(&sim, "ats-off"),
        [
            "ATSCap:\tInvalidate Queue Depth: 00",
            "ATSCtl:\tEnable-, Smallest Translation Unit: 00",
            "PRICtl: Enable- Reset-",
            "PRISta: RF- UPRGI- Stopped+",
            "Page Request Capacity: 00000020, Page Request Allocation: 00000000"
        ]
    );
    let cfg = SimConfig {
        iommu: Some(IommuConfig::default()),
        ats: true,
        pri: true,
        ..SimConfig::default()
    };
    let mut sim = FabricSim::new(&topo, &KindRegistry::builtin(), cfg).unwrap();
    let ep = sim.bdf("ep").unwrap();
    // ATS control sits at +6 of the capability.
    let at = crate::common::ext_cap(&sim, ep, pcielab_config::caps::id::EXT_ATS);
    let v = sim.cfg_read(ep, at + 4);
    let all = pcielab_wire::ByteEnables::from_bits_truncate(0xf);
    sim.config_write(ep, at + 4, v | 2 << 16, all).unwrap();
    assert_eq!(
        lines(&sim, "ats-on"),
        [
            "ATSCap:\tInvalidate Queue Depth: 00",
            "ATSCtl:\tEnable+, Smallest Translation Unit: 02",
            "PRICtl: Enable+ Reset-",
            "PRISta: RF- UPRGI- Stopped-",
            "Page Request Capacity: 00000020, Page Request Allocation: 00000020"
        ]
    );
}

/// lspci reads psmem's PASID capability and its End-End TLP Prefix support: PASID
/// disabled without an IOMMU that can use it, enabled by enumeration with one; our
/// decoder prints the same lines.
#[test]
fn lspci_reads_the_pasid_capability() {
    use pcielab_fabric::kinds::KindRegistry;
    use pcielab_fabric::timed::{FabricSim, IommuConfig, SimConfig};
    let topo = crate::common::switch_tree(1, false);
    let lines = |sim: &FabricSim, tag: &str| {
        let (b, theirs, ours) = ep_lines(sim, tag, &["PASIDCap:", "PASIDCtl:"]);
        assert!(b.contains("Process Address Space ID (PASID)"), "{b}");
        assert!(b.contains("EETLPPrefix+, MaxEETLPPrefixes 4"), "{b}");
        assert!(ours.contains("EETLPPrefix+"), "{ours}");
        theirs
    };
    let sim = FabricSim::new(&topo, &KindRegistry::builtin(), SimConfig::default()).unwrap();
    assert_eq!(
        lines(&sim, "pasid-off"),
        [
            "PASIDCap: Exec- Priv-, Max PASID Width: 14",
            "PASIDCtl: Enable- Exec- Priv-"
        ]
    );
    let cfg = SimConfig {
        iommu: Some(IommuConfig {
            pasid: true,
            ..IommuConfig::default()
        }),
        ..SimConfig::default()
    };
    let sim = FabricSim::new(&topo, &KindRegistry::builtin(), cfg).unwrap();
    assert_eq!(
        lines(&sim, "pasid-on"),
        [
            "PASIDCap: Exec- Priv-, Max PASID Width: 14",
            "PASIDCtl: Enable+ Exec- Priv-"
        ]
    );
}

/// The real lspci on the dump of `sriov-4vf` (a psmem PF with `vfs = 4`): it decodes
/// the PF's SR-IOV capability with four VFs enabled, its VF BARs where enumeration put
/// them (inside the root port's windows as lspci reads them), and lists the four VFs as
/// functions 01:00.1 .. 01:00.4 with device ID 0011 (the VF Device ID the capability
/// declares). A VF's own Vendor ID and Device ID read FFFFh; the dump carries the IDs
/// Linux gives the VF (as `lspci` on a Linux host shows them), so lspci names it
/// instead of printing "Illegal Vendor ID".
#[test]
fn lspci_decodes_the_sr_iov_pf_and_lists_its_vfs() {
    let text = std::fs::read_to_string(crate::common::examples_dir().join("sriov-4vf.toml"))
        .expect("readable");
    let (_, fabric, tree) = bring_up(&text);
    let path = dump_to_temp("sriov", &fabric.lspci_dump());
    let vvv = lspci(&path, &["-vvv"]);
    let bl = blocks(&vvv);
    let pf = &bl["01:00.0"];
    assert!(
        pf.contains("Initial VFs: 4, Total VFs: 4, Number of VFs: 4,"),
        "{pf}"
    );
    assert!(
        pf.contains("IOVCtl:\tEnable+ ") && pf.contains(" MSE+ "),
        "{pf}"
    );
    assert!(
        pf.contains("VF offset: 1, stride: 1, Device ID: 0011"),
        "{pf}"
    );
    // The VF BARs lspci reads in the SR-IOV capability: the lines after its header.
    let iov = &pf[pf
        .find("Single Root I/O Virtualization")
        .expect("SR-IOV decoded")..];
    let vf_regions: Vec<u64> = iov
        .lines()
        .filter(|l| l.starts_with("Region"))
        .map(|l| {
            let a = l
                .split(" at ")
                .nth(1)
                .and_then(|s| s.split_whitespace().next());
            u64::from_str_radix(a.expect("an address"), 16).expect("hex")
        })
        .collect();
    let pf_entry = tree.get("01:00.0".parse().unwrap()).unwrap();
    let ours: Vec<u64> = pf_entry.vf_bars.iter().map(|b| b.address).collect();
    assert_eq!(vf_regions, ours, "{iov}");
    // Inside the root port's windows as lspci decodes them, for all four VFs.
    let windows: Vec<(u64, u64)> = bl["00:01.0"]
        .lines()
        .filter(|l| l.contains("behind bridge:"))
        .filter_map(hex_range)
        .collect();
    for b in &pf_entry.vf_bars {
        let end = b.address + b.bar.size() - 1;
        assert!(
            windows.iter().any(|&(lo, hi)| lo <= b.address && end <= hi),
            "VF BAR{} {:#x}..={end:#x} outside {windows:x?}",
            b.index,
            b.address
        );
    }
    // Every VF's BARs lie in the PF's VF BAR window of the same index.
    for vf in tree.functions.iter().filter(|f| f.vf_of.is_some()) {
        for b in &vf.bars {
            let w = pf_entry
                .vf_bars
                .iter()
                .find(|w| w.index == b.index)
                .expect("a VF BAR window");
            assert!(
                w.address <= b.address && b.address + b.bar.size() <= w.address + w.bar.size(),
                "{} BAR{}",
                vf.bdf,
                b.index
            );
        }
    }
    // The VFs as functions, by number and with their IDs.
    let short = lspci(&path, &["-n"]);
    for i in 1..=4 {
        let want = format!("01:00.{i} 0580: 1fee:0011 (rev 01)");
        assert!(short.lines().any(|l| l == want), "{want:?} in\n{short}");
        let b = &bl[&format!("01:00.{i}")];
        assert!(b.contains("MSI-X: Enable+ Count=4 Masked-"), "{b}");
        assert!(b.contains("Vector table: BAR=2 offset=00000000"), "{b}");
        assert!(b.contains("Express (v2) Endpoint"), "{b}");
        assert!(b.contains("BusMaster+"), "{b}");
        assert!(
            b.contains("Alternative Routing-ID Interpretation (ARI)"),
            "{b}"
        );
    }
    assert!(!short.contains("01:00.5"), "{short}");
    let t = lspci(&path, &["-t"]);
    assert_eq!(
        t,
        "\
-[0000:00]-+-00.0
           \\-01.0-[01]--+-00.0
                        +-00.1
                        +-00.2
                        +-00.3
                        \\-00.4
"
    );
    let _ = std::fs::remove_file(&path);
}

/// The real lspci on a `dma-engine` with 10 VFs (seed 003's engine): the PF's SR-IOV
/// capability with ten VFs enabled and VF Device ID 0031, ARI (function numbers past
/// 7), and each VF a processing accelerator with its own two MSI-X vectors in BAR 2
/// and its registers in BAR 0, inside the PF's VF BAR windows.
#[test]
fn lspci_lists_the_dma_engines_ten_vfs() {
    let text = "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n\
                [[node]]\nname=\"dma\"\nkind=\"dma-engine\"\nvfs=10\n\
                [[link]]\nup=\"rc.0\"\ndown=\"dma\"\ngen=3\nwidth=8\n";
    let (_, fabric, tree) = bring_up(text);
    let path = dump_to_temp("dma-engine", &fabric.lspci_dump());
    let vvv = lspci(&path, &["-vvv"]);
    let bl = blocks(&vvv);
    let pf = &bl["01:00.0"];
    let plain = lspci(&path, &[]);
    assert!(
        plain
            .lines()
            .any(|l| l.starts_with("01:00.0 Processing accelerators")),
        "{plain}"
    );
    assert!(
        pf.contains("Initial VFs: 10, Total VFs: 10, Number of VFs: 10,"),
        "{pf}"
    );
    assert!(
        pf.contains("VF offset: 1, stride: 1, Device ID: 0031"),
        "{pf}"
    );
    assert!(
        pf.contains("Alternative Routing-ID Interpretation (ARI)"),
        "{pf}"
    );
    assert!(pf.contains("MSI-X: Enable+ Count=2"), "{pf}");
    let short = lspci(&path, &["-n"]);
    // With ARI, function numbers 8..=10 print as device 1, functions 0..=2.
    let vfs = [
        "00.1", "00.2", "00.3", "00.4", "00.5", "00.6", "00.7", "01.0", "01.1", "01.2",
    ];
    let pf_entry = tree.get("01:00.0".parse().unwrap()).unwrap();
    for v in vfs {
        let want = format!("01:{v} 1200: 1fee:0031 (rev 01)");
        assert!(short.lines().any(|l| l == want), "{want:?} in\n{short}");
        let b = &bl[&format!("01:{v}")];
        assert!(b.contains("MSI-X: Enable+ Count=2 Masked-"), "{b}");
        assert!(b.contains("Vector table: BAR=2 offset=00000000"), "{b}");
        assert!(b.contains("Express (v2) Endpoint"), "{b}");
        let vf = tree.get(format!("01:{v}").parse().unwrap()).unwrap();
        for bar in &vf.bars {
            let w = pf_entry
                .vf_bars
                .iter()
                .find(|w| w.index == bar.index)
                .expect("a VF BAR window");
            assert!(
                w.address <= bar.address
                    && bar.address + bar.bar.size() <= w.address + w.bar.size(),
                "{v} BAR{}",
                bar.index
            );
        }
    }
    assert!(!short.contains("01:01.3"), "{short}");
    let _ = std::fs::remove_file(&path);
}
