//! `pcielab topo …` and `pcielab cfg decode` end to end.

mod common;
use common::example;
use std::process::{Command, Output};

fn pcielab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pcielab"))
        .args(args)
        .output()
        .expect("the pcielab binary runs")
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).expect("UTF-8")
}

#[test]
fn topo_lspci_prints_every_function_in_4096_bytes() {
    let text = stdout(&pcielab(&["topo", "lspci", &example("design.toml")]));
    // 9 functions (host bridge, 2 root ports, switch up + 4 down, mem0), each one
    // address line, 256 hex lines and a blank line.
    assert_eq!(text.lines().count(), 9 * 258);
    let headers: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("pcielab"))
        .map(|l| &l[..7])
        .collect();
    assert_eq!(
        headers,
        [
            "00:00.0", "00:01.0", "00:02.0", "01:00.0", "02:00.0", "02:01.0", "02:02.0", "02:03.0",
            "04:00.0"
        ]
    );
    assert!(text.contains("04:00.0 Memory controller: pcielab mem0\n00: ee 1f 10 00 "));
}

#[test]
fn topo_tree_and_json() {
    let tree = stdout(&pcielab(&["topo", "tree", &example("design.toml")]));
    assert!(
        tree.contains("`-- 04:00.0 mem0  Endpoint Gen3 x8"),
        "{tree}"
    );
    let json = stdout(&pcielab(&[
        "topo",
        "show",
        &example("design.toml"),
        "--json",
    ]));
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let f = v["functions"].as_array().expect("functions array");
    assert_eq!(f.len(), 9);
    let mem0 = f.iter().find(|x| x["name"] == "mem0").expect("mem0 listed");
    assert_eq!(mem0["bdf"], "04:00.0");
    assert_eq!(mem0["parent"], "02:01.0");
    assert_eq!(mem0["link"]["gen"], 3);
    assert_eq!(mem0["bars"][0]["address"], "0x4000000000");
    assert_eq!(mem0["interrupts"]["kind"], "msix");
}

#[test]
fn topo_errors_name_file_line_and_key() {
    let dir = std::env::temp_dir().join(format!("pcielab-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "[[node]]\nname = \"rc\"\nkind = \"root-complex\"\nwheels = 4\n",
    )
    .expect("write");
    let o = pcielab(&["topo", "tree", &bad.display().to_string()]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bad.toml:4: key \"wheels\": unknown key for kind \"root-complex\"; allowed: name, kind, ports"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cfg_decode_reads_our_own_dump_back() {
    let dir = std::env::temp_dir().join(format!("pcielab-cli-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let dump = dir.join("dump.txt");
    std::fs::write(
        &dump,
        stdout(&pcielab(&[
            "topo",
            "lspci",
            &example("nested-switches.toml"),
        ])),
    )
    .expect("write");
    let text = stdout(&pcielab(&["cfg", "decode", &dump.display().to_string()]));
    assert!(
        text.contains("00:01.0 (4096 bytes) PCI bridge: pcielab rc.0"),
        "{text}"
    );
    // mem-c: AER at 0x100 (0x48 bytes), DSN 0x148 (12), LTR 0x154 (8), ATS 0x15c (8),
    // PRI 0x164 (16), PASID 0x174 (8), L1 PM Substates 0x17c (16), ARI 0x18c (8),
    // SR-IOV 0x194.
    assert!(
        text.contains("Capabilities: [174 v1] Process Address Space ID\n\t\tPASIDCap: Exec- Priv-, Max PASID Width: 14"),
        "{text}"
    );
    assert!(
        text.contains("Capabilities: [194 v1] Single Root I/O Virtualization"),
        "{text}"
    );
    assert!(
        text.contains("Capabilities: [15c v1] Address Translation Services\n\t\tATSCap:\tInvalidate Queue Depth: 00\n\t\tATSCtl:\tEnable-, Smallest Translation Unit: 00"),
        "{text}"
    );
    assert!(
        text.contains("LnkSta: Speed 5GT/s, Width x1"),
        "mem-b's Gen2 x1 link\n{text}"
    );
    let o = pcielab(&["cfg", "decode", &dir.join("missing").display().to_string()]);
    assert_eq!(o.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The configuration dump shows the Max_Read_Request_Size that `sim` sends with its
/// defaults: every function's Device Control, decoded by hand from the dump's bytes.
#[test]
fn topo_lspci_shows_the_mrrs_sim_uses() {
    let f = example("sim-default.toml");
    let sim = stdout(&pcielab(&[
        "sim",
        &f,
        "--workload",
        "mmio-lat",
        "--count",
        "1",
    ]));
    let mrrs: u32 = sim
        .split("MRRS ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{sim}"));
    let text = stdout(&pcielab(&["topo", "lspci", &f]));
    // Each function: an address line, then "xxx: b0 b1 ... b15" lines.
    let mut checked = 0;
    for func in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let mut bytes = Vec::new();
        for line in func.lines().skip(1) {
            let (_, hex) = line.split_once(": ").unwrap();
            bytes.extend(
                hex.split_whitespace()
                    .map(|b| u8::from_str_radix(b, 16).unwrap()),
            );
        }
        // Walk the capability list (pointer at 0x34) to the PCI Express one (ID 0x10);
        // Device Control is at +8, MRRS in bits 14:12 (128 << code).
        let mut p = bytes[0x34] as usize;
        while p != 0 && bytes[p] != 0x10 {
            p = bytes[p + 1] as usize;
        }
        if p == 0 {
            continue;
        }
        let devctl = u16::from_le_bytes([bytes[p + 8], bytes[p + 9]]);
        assert_eq!(
            128u32 << ((devctl >> 12) & 7),
            mrrs,
            "{}",
            func.lines().next().unwrap()
        );
        checked += 1;
    }
    assert!(checked >= 10, "{checked} functions with a PCIe capability");
}

/// `topo show --format csv|json` (`--json` an alias): one CSV row per function, in the
/// JSON's order.
#[test]
fn topo_show_formats() {
    let f = example("design.toml");
    let json = stdout(&pcielab(&["topo", "show", &f, "--format", "json"]));
    assert_eq!(json, stdout(&pcielab(&["topo", "show", &f, "--json"])));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let funcs = v["functions"].as_array().unwrap();
    let csv = stdout(&pcielab(&["topo", "show", &f, "--format", "csv"]));
    let mut lines = csv.lines().map(csv_fields);
    let head = lines.next().unwrap();
    let at = head.iter().position(|c| c == "bdf").unwrap();
    let bdfs: Vec<String> = lines
        .map(|l| {
            assert_eq!(l.len(), head.len(), "{l:?}");
            l[at].clone()
        })
        .collect();
    let want: Vec<String> = funcs
        .iter()
        .map(|x| x["bdf"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(bdfs, want);
    assert_eq!(want.len(), 9);
}

/// The fields of one CSV line (RFC 4180 quoting: "" is a quote inside a quoted field).
fn csv_fields(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                out.last_mut().unwrap().push('"');
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(String::new()),
            (c, _) => out.last_mut().unwrap().push(c),
        }
    }
    out
}

/// `topo tree`, `topo show` (table and JSON) and `topo lspci` list every VF of the
/// `sriov-4vf` example (a psmem PF with `vfs = 4`): functions 01:00.1 .. 01:00.4 (First
/// VF Offset 1, VF Stride 1), each with its 16 KiB slice of the PF's VF BAR0.
#[test]
fn topo_lists_every_vf() {
    let tree = stdout(&pcielab(&["topo", "tree", "--example", "sriov-4vf"]));
    let pf = tree
        .lines()
        .find(|l| l.contains("01:00.0 nic "))
        .unwrap_or_else(|| panic!("{tree}"));
    // "VF-BAR0 4000100000 (64 KiB for all VFs)": the window of the four VFs.
    let window = pf
        .split("VF-BAR0 ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| u64::from_str_radix(s, 16).ok())
        .unwrap_or_else(|| panic!("{pf}"));
    for i in 0..4u64 {
        let want = format!(
            "01:00.{} nic.vf{i}  Endpoint (VF {i} of 01:00.0) Gen3 x8 BAR0 {:x} (64-bit pref, 16 KiB)",
            i + 1,
            window + i * (16 << 10)
        );
        assert!(tree.contains(&want), "{want:?} in\n{tree}");
    }
    let json = stdout(&pcielab(&[
        "topo",
        "show",
        "--example",
        "sriov-4vf",
        "--json",
    ]));
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let vfs: Vec<&serde_json::Value> = v["functions"]
        .as_array()
        .expect("functions")
        .iter()
        .filter(|f| f.get("vf_of").is_some())
        .collect();
    assert_eq!(vfs.len(), 4);
    for (i, f) in vfs.iter().enumerate() {
        assert_eq!(f["vf_of"]["pf"], "01:00.0");
        assert_eq!(f["vf_of"]["index"], i);
        assert_eq!(f["bdf"], format!("01:00.{}", i + 1));
        assert_eq!(
            (&f["vendor_id"], &f["device_id"]),
            (&"1fee".into(), &"0011".into())
        );
    }
    let table = stdout(&pcielab(&["topo", "show", "--example", "sriov-4vf"]));
    assert!(
        table.contains("01:00.3 nic.vf2\nSR-IOV VF 2 of 01:00.0: [1fee:0011]"),
        "{table}"
    );
    let dump = stdout(&pcielab(&["topo", "lspci", "--example", "sriov-4vf"]));
    for i in 0..4 {
        let head = format!(
            "01:00.{} Memory controller: pcielab nic.vf{i}\n00: ee 1f 11 00 ",
            i + 1
        );
        assert!(dump.contains(&head), "{head:?}");
    }
    // Topologies without VFs list none.
    let json = stdout(&pcielab(&[
        "topo",
        "show",
        "--example",
        "nested-switches",
        "--json",
    ]));
    assert!(!json.contains("vf_of"));
}
