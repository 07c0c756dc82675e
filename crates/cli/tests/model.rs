//! `pcielab model` end to end, through the built binary.

mod common;
use common::pcielab;

#[test]
fn bw_csv_header_and_reference_row() {
    let (rc, out, err) = pcielab(&[
        "model", "bw", "--gen", "3", "--lanes", "8", "--mps", "256", "--mrrs", "512", "--addr",
        "64", "--sizes", "63:65", "--format", "csv",
    ]);
    assert_eq!(rc, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "size_B,read_gbps,write_gbps,readwrite_gbps");
    // Worked by hand in crates/model/tests/it/tables.rs: 44.103, 42.098, 33.077.
    assert_eq!(lines[2], "64,44.103,42.098,33.077");
    assert_eq!(lines.len(), 4);
}

#[test]
fn bw_json_and_spec_mode() {
    let (rc, out, _) = pcielab(&[
        "model", "bw", "--sizes", "64", "--dllp", "spec", "--format", "json",
    ]);
    assert_eq!(rc, 0);
    // Spec mode, Gen3 x8: no DLLP on the data direction of a write stream:
    // 62.847791 × 64/88 = 45.707 (tables.rs).
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[0]["size_B"], 64);
    let w = v[0]["write_gbps"].as_f64().unwrap();
    assert_eq!(format!("{w:.3}"), "45.707");
}

#[test]
fn bad_input_exits_2_with_one_line() {
    for (args, msg) in [
        (
            vec!["model", "bw", "--mps", "100", "--sizes", "1:2"],
            "invalid MPS 100",
        ),
        (
            vec!["model", "bw", "--mrrs", "8192", "--sizes", "1"],
            "invalid MRRS 8192",
        ),
        (
            vec![
                "model", "bw", "--rcb", "256", "--dllp", "spec", "--sizes", "1",
            ],
            "invalid RCB 256",
        ),
        (
            vec!["model", "bw", "--gen", "7", "--sizes", "1"],
            "invalid PCIe generation 7",
        ),
        (
            vec!["model", "bw", "--lanes", "3", "--sizes", "1"],
            "invalid lane count 3",
        ),
        (
            vec!["model", "bw", "--sizes", "0:64"],
            "sizes must be at least 1 byte",
        ),
        (
            vec!["model", "nic", "--eth", "30"],
            "invalid Ethernet rate (Gb/s) 30",
        ),
        (
            vec!["model", "bw", "--sizes", "64", "--plot", "x.jpg"],
            "must end in .png or .svg",
        ),
        (
            vec![
                "model",
                "bw",
                "--sizes",
                "64",
                "--plot",
                "/nonexistent/x.png",
            ],
            "plot file \"/nonexistent/x.png\": cannot create it: No such file or directory",
        ),
    ] {
        let (rc, out, err) = pcielab(&args);
        assert_eq!(rc, 2, "{args:?}");
        assert!(out.is_empty(), "{args:?}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.starts_with("pcielab: ") && err.contains(msg),
            "{args:?}: {err}"
        );
    }
}

/// Command-line errors (clap's) have the same prefix and status as ours, and a negative
/// number is called a bad value, not an unknown argument.
#[test]
fn command_line_errors_have_one_prefix_and_status_2() {
    for (args, msg) in [
        (
            vec!["model", "bw", "--lanes", "-5"],
            "invalid value '-5' for '--lanes",
        ),
        (
            vec!["model", "bw", "--bogus"],
            "unexpected argument '--bogus'",
        ),
        (
            vec!["sim", "--count", "-5"],
            "invalid value '-5' for '--count",
        ),
    ] {
        let (rc, out, err) = pcielab(&args);
        assert_eq!(rc, 2, "{args:?}");
        assert!(out.is_empty(), "{args:?}");
        assert!(
            err.starts_with("pcielab: ") && err.contains(msg),
            "{args:?}: {err}"
        );
    }
    let (rc, out, _) = pcielab(&["--version"]);
    assert_eq!(rc, 0);
    assert!(out.starts_with("pcielab "), "{out}");
}

#[test]
fn link_nic_latency_and_plots() {
    let (rc, out, _) = pcielab(&["model", "link", "--format", "csv"]);
    assert_eq!(rc, 0);
    assert_eq!(
        out.lines().next(),
        Some("gen,lanes,mps_B,raw_gbps,link_gbps")
    );
    // 6 generations × 6 widths × 6 MPS values.
    assert_eq!(out.lines().count(), 1 + 216);
    // Gen1 x1 MPS 128: 2 × (1 − 16/237 − 4/1538) = 1.860.
    assert!(out.contains("\n1,1,128,2.000,1.860\n"));

    let dir = std::env::temp_dir().join(format!("pcielab-cli-model-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let png = dir.join("nic.png");
    let (rc, out, err) = pcielab(&[
        "model",
        "nic",
        "--nic",
        "batched",
        "--dpdk",
        "--eth",
        "100",
        "--sizes",
        "64:1518:2",
        "--format",
        "csv",
        "--plot",
        png.to_str().unwrap(),
    ]);
    assert_eq!(rc, 0, "{err}");
    assert!(out.starts_with("size_B,eth_gbps,eth_mpps,tx_gbps,rx_gbps,bidir_gbps,"));
    assert_eq!(&std::fs::read(&png).unwrap()[..4], b"\x89PNG");

    let svg = dir.join("lat.svg");
    let (rc, out, _) = pcielab(&[
        "model",
        "latency",
        "--sizes",
        "64",
        "--rc-ns",
        "0",
        "--mem-ns",
        "0",
        "--format",
        "csv",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(rc, 0);
    // Serialisation only: (24 + 84) B × 8 / 57.884766 Gb/s = 14.93 ns; + 88 B write = 27.09.
    assert_eq!(out.lines().nth(1), Some("64,14.93,27.09"));
    assert!(std::fs::read_to_string(&svg)
        .unwrap()
        .contains("Latency (ns)"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `model latency` and `sim` use one set of defaults and one meaning of `--rc-ns` (a DMA
/// read pays it once): on one Gen3 x8 link a 64-byte read agrees within 1 %, and both
/// move by exactly the change in `--rc-ns` (an MMIO read by twice it).
#[test]
fn model_and_sim_latency_agree_and_charge_the_root_complex_alike() {
    let model = |rc: &str| {
        let (rc_, out, err) = pcielab(&[
            "model", "latency", "--gen", "3", "--lanes", "8", "--sizes", "64", "--rc-ns", rc,
            "--format", "json",
        ]);
        assert_eq!(rc_, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v[0]["lat_rd_ns"].as_f64().unwrap()
    };
    let sim = |workload: &str, rc: &str| {
        let mut args = vec![
            "sim",
            "--gen",
            "3",
            "--lanes",
            "8",
            "--workload",
            workload,
            "--size",
            "64",
            "--count",
            "20",
            "--rc-ns",
            rc,
            "--json",
        ];
        if workload == "dma" {
            // One at a time (MMIO reads always are).
            args.extend(["--window", "1"]);
        }
        let (rc_, out, err) = pcielab(&args);
        assert_eq!(rc_, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v[0]["mean_latency_ns"].as_f64().unwrap()
    };
    // Defaults: no --rc-ns given to either.
    let (rc, out, _) = pcielab(&[
        "model", "latency", "--gen", "3", "--lanes", "8", "--sizes", "64", "--format", "json",
    ]);
    assert_eq!(rc, 0);
    let m0: f64 = serde_json::from_str::<serde_json::Value>(&out).unwrap()[0]["lat_rd_ns"]
        .as_f64()
        .unwrap();
    let s0 = sim("dma", "100");
    assert!((m0 - s0).abs() / s0 < 0.01, "model {m0} sim {s0}");
    assert!((model("100") - m0).abs() < 1e-9);
    // +250 ns of root complex: +250 for a DMA read in both, +500 for an MMIO read.
    assert!((model("350") - model("100") - 250.0).abs() < 1e-6);
    assert!((sim("dma", "350") - s0 - 250.0).abs() < 0.5);
    assert!((sim("mmio-lat", "350") - sim("mmio-lat", "100") - 500.0).abs() < 0.5);
}
