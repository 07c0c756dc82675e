//! Golden trace hashes: scenarios that cover the simulator's features (exact and burst
//! mode, lossy links and BER, poisoning, ECRC, ASPM, link failure with and without DPC,
//! IOMMU/ATS/PRI/PASID, peer to peer with and without ACS and splitting, MMIO,
//! enumeration, injected TLPs, cut-through, AtomicOps, the host model's tails, the NIC
//! and the SR-IOV DMA engine with their drivers), each
//! run with `pcielab sim --trace` and reduced to a 64-bit FNV-1a hash of the trace
//! file and the stdout.
//!
//! The hashes in `golden/trace-hashes.txt` were recorded before the fabric was
//! restructured (issue 25): a move of code must keep every one. A deliberate change of
//! behaviour re-records them in its own commit that says why:
//! `PCIELAB_BLESS=1 cargo test -p pcielab-cli --test golden`.

mod common;
use common::pcielab;
use std::collections::BTreeMap;
use std::path::PathBuf;

fn fnv(h: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *h ^= b as u64;
        *h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
}

/// The arguments of a command line.
fn words(line: &'static str) -> Vec<&'static str> {
    line.split_whitespace().collect()
}

/// The scenarios: name and `pcielab sim` arguments after the topology.
fn scenarios() -> Vec<(&'static str, Vec<&'static str>)> {
    let d = |op: &'static str, dev: &'static str, size: &'static str, count: &'static str| {
        vec![
            "--workload",
            "dma",
            "--op",
            op,
            "--device",
            dev,
            "--size",
            size,
            "--count",
            count,
        ]
    };
    let with = |mut a: Vec<&'static str>, extra: &[&'static str]| {
        a.extend_from_slice(extra);
        a
    };
    vec![
        ("exact-read-4k", d("read", "mem0", "4096", "60")),
        ("exact-write-1000", d("write", "mem1", "1000", "80")),
        ("exact-rw-gen4x16", d("rw", "mem3", "4096", "60")),
        (
            "exact-read-unaligned-random",
            with(
                d("read", "mem2", "777", "60"),
                &["--pattern", "random", "--window", "4"],
            ),
        ),
        (
            "burst-read",
            with(d("read", "mem3", "4096", "100"), &["--burst", "16"]),
        ),
        (
            "burst-write",
            with(d("write", "mem0", "4096", "100"), &["--burst", "16"]),
        ),
        (
            "burst-rw-mrrs4096",
            with(
                d("rw", "mem3", "4096", "100"),
                &["--burst", "16", "--mrrs", "4096"],
            ),
        ),
        (
            "lossy-lcrc",
            with(d("rw", "mem0", "1024", "60"), &["--error-rate", "0.05"]),
        ),
        (
            "ber",
            with(d("write", "mem3", "4096", "40"), &["--ber", "1e-4"]),
        ),
        (
            "poison",
            with(d("rw", "mem0", "512", "40"), &["--poison-rate", "0.05"]),
        ),
        (
            "ecrc-switch-errors",
            with(
                d("write", "mem0", "512", "40"),
                &["--ecrc", "--switch-error-rate", "0.05"],
            ),
        ),
        (
            "aspm-l0s-l1",
            vec![
                "--workload",
                "mmio-lat",
                "--count",
                "4",
                "--aspm",
                "l0s-l1",
                "--gap-us",
                "20",
            ],
        ),
        (
            "aspm-l1ss",
            vec![
                "--workload",
                "mmio-lat",
                "--count",
                "3",
                "--aspm",
                "l1",
                "--l1ss",
                "--gap-us",
                "40",
            ],
        ),
        (
            "dpc-recover",
            with(
                d("write", "mem1", "1024", "60"),
                &[
                    "--fail",
                    "mem1@2",
                    "--recover-us",
                    "20",
                    "--dpc",
                    "--ready-wait-us",
                    "10",
                ],
            ),
        ),
        (
            "surprise-down-recover",
            with(
                d("read", "mem0", "1024", "60"),
                &[
                    "--fail",
                    "mem0@2",
                    "--recover-us",
                    "20",
                    "--ready-wait-us",
                    "10",
                ],
            ),
        ),
        (
            "iommu-small-iotlb",
            with(
                d("read", "mem0", "4096", "40"),
                &[
                    "--iommu",
                    "--iotlb-entries",
                    "8",
                    "--pattern",
                    "random",
                    "--window",
                    "4",
                ],
            ),
        ),
        (
            "ats",
            with(d("read", "mem0", "4096", "40"), &["--iommu", "--ats"]),
        ),
        (
            "pri",
            with(
                d("write", "mem0", "4096", "20"),
                &["--iommu", "--ats", "--pri", "--page-fault-us", "2"],
            ),
        ),
        (
            "pasid",
            with(
                d("read", "mem0", "2048", "30"),
                &["--iommu", "--pasid", "5"],
            ),
        ),
        (
            "p2p-switch",
            with(d("write", "mem0", "1024", "40"), &["--peer", "mem1"]),
        ),
        (
            "p2p-acs",
            with(
                d("read", "mem0", "1024", "40"),
                &["--peer", "mem1", "--acs"],
            ),
        ),
        (
            "p2p-rc-split",
            with(
                d("write", "mem0", "1024", "40"),
                &["--peer", "mem3", "--p2p-split", "64"],
            ),
        ),
        (
            "mmio-lat",
            vec!["--workload", "mmio-lat", "--count", "5", "--size", "64"],
        ),
        ("enumerate", vec!["--workload", "enumerate"]),
        (
            "inject-malformed",
            vec![
                "--workload",
                "inject",
                "--device",
                "mem0",
                "--tlp",
                "40000001000000000000000000000000",
            ],
        ),
        (
            "cut-through",
            with(d("write", "mem0", "4096", "40"), &["--cut-through"]),
        ),
        ("atomic-fetchadd", d("atomic", "mem3", "8", "40")),
        (
            "small-replay-buffer",
            with(
                d("rw", "mem2", "4096", "40"),
                &["--replay-buffer", "4", "--fc-update-us", "0"],
            ),
        ),
        (
            "host-e3-tail",
            with(
                d("read", "mem3", "64", "200"),
                &["--host", "xeon-e3-haswell", "--window", "1"],
            ),
        ),
        (
            "sweep-default",
            vec!["--sizes", "64:256:x4", "--count", "20"],
        ),
        // The device models with their drivers, on one link of their own (not the
        // built-in example): three runs per frame size, one per transfer size.
        (
            "nic-batched-linux",
            words("--gen 3 --lanes 8 --workload nic --nic batched --sizes 64,1518 --packets 160"),
        ),
        (
            "nic-dpdk-gen4",
            words(
                "--gen 4 --lanes 4 --workload nic --nic batched --dpdk --sizes 128 --packets 160",
            ),
        ),
        (
            "nic-simple",
            words("--gen 3 --lanes 8 --workload nic --nic simple --sizes 64 --packets 160"),
        ),
        (
            "sriov-write",
            words(
                "--gen 3 --lanes 8 --workload sriov --vfs 2 --op write --sizes 16K,100K --count 2",
            ),
        ),
        (
            "sriov-read-vm",
            words("--gen 3 --lanes 8 --workload sriov --vfs 2 --vm --sizes 16K --count 2"),
        ),
    ]
}

fn hashes_file() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/trace-hashes.txt")
}

fn run(name: &str, args: &[&str]) -> u64 {
    let dir = std::env::temp_dir().join(format!("pcielab-golden-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join(format!("{name}.trace"));
    // The built-in example, so that no path of the checkout reaches the output (or
    // the scenario's own link).
    let mut a = vec!["sim", "--seed", "7", "--trace", trace.to_str().unwrap()];
    if !args.contains(&"--gen") {
        a.extend(["--example", "sim-default"]);
    }
    a.extend_from_slice(args);
    let (rc, out, err) = pcielab(&a);
    assert!(
        !out.contains(env!("CARGO_MANIFEST_DIR")),
        "{name}: a path in the output"
    );
    assert_eq!(rc, 0, "{name}: {err}");
    let text = std::fs::read(&trace).unwrap_or_else(|e| panic!("{name}: no trace: {e}"));
    assert!(
        text.len() > 100,
        "{name}: a trace of {} bytes compares nothing",
        text.len()
    );
    std::fs::remove_file(&trace).ok();
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    fnv(&mut h, &text);
    fnv(&mut h, out.as_bytes());
    h
}

#[test]
fn golden_trace_hashes_are_unchanged() {
    let got: BTreeMap<&str, u64> = scenarios().iter().map(|(n, a)| (*n, run(n, a))).collect();
    assert!(got.len() >= 20);
    if std::env::var_os("PCIELAB_BLESS").is_some() {
        let mut s = String::from(
            "# scenario fnv1a64(trace file ++ stdout); see crates/cli/tests/golden.rs\n",
        );
        for (n, h) in &got {
            s.push_str(&format!("{n} {h:016x}\n"));
        }
        std::fs::write(hashes_file(), s).unwrap();
        return;
    }
    let text = std::fs::read_to_string(hashes_file()).expect("golden/trace-hashes.txt");
    let want: BTreeMap<String, u64> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (n, h) = l.split_once(' ').unwrap();
            (n.to_string(), u64::from_str_radix(h.trim(), 16).unwrap())
        })
        .collect();
    let mut bad = Vec::new();
    for (n, h) in &got {
        match want.get(*n) {
            Some(w) if w == h => {}
            Some(w) => bad.push(format!("{n}: {h:016x}, recorded {w:016x}")),
            None => bad.push(format!("{n}: not recorded")),
        }
    }
    for n in want.keys() {
        if !got.contains_key(n.as_str()) {
            bad.push(format!("{n}: recorded but no longer run"));
        }
    }
    assert!(bad.is_empty(), "trace hashes changed:\n{}", bad.join("\n"));
}
