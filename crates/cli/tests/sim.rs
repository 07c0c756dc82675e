//! `pcielab sim` end to end, through the built binary.

mod common;
use common::{example, pcielab};

#[test]
fn default_scenario_prints_a_report() {
    let f = example("sim-default.toml");
    let (rc, out, err) = pcielab(&["sim", &f, "--sizes", "256:512:x2"]);
    assert_eq!(rc, 0, "{err}");
    assert!(out.contains("DMA bandwidth"), "{out}");
    assert!(out.contains("MMIO read latency"), "{out}");
    // Four endpoints × read/write × two sizes, and four latency rows.
    assert_eq!(
        out.lines().filter(|l| l.starts_with("mem")).count(),
        4 * 2 * 2 + 4,
        "{out}"
    );
}

/// `pcielab sim` on the default scenario: 4 KiB DMA writes from mem3 (Gen4 x16 on a
/// root port) with `extra` arguments, as JSON.
fn mem3_write_stream(extra: &[&str]) -> serde_json::Value {
    let f = example("sim-default.toml");
    let mut args = vec![
        "sim",
        &f,
        "--workload",
        "dma",
        "--device",
        "mem3",
        "--op",
        "write",
        "--size",
        "4096",
        "--json",
    ];
    args.extend_from_slice(extra);
    let (rc, out, err) = pcielab(&args);
    assert_eq!(rc, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

#[test]
fn dma_json_write_rate_is_the_link_rate() {
    // mem3: Gen4 x16 directly on the root port. 256-byte writes above 4 GiB: 256 + 16
    // header + 8 framing = 280 bytes per TLP. Gen4 x16 carries 16 GT/s × 16 × 128/130
    // = 252.06 Gb/s, less one SKP block in 376: 251.39 Gb/s; × 256/280 = 229.83 Gb/s.
    let v = mem3_write_stream(&[]);
    let g = v[0]["gbps"].as_f64().unwrap();
    let want = 16.0 * 16.0 * 128.0 / 130.0 * 375.0 / 376.0 * 256.0 / 280.0;
    assert!((g - want).abs() / want < 1e-3, "{g} vs {want}");
    // The row carries the spec-mode bound of the link (which charges each direction the
    // DLLPs it really carries): the simulation reaches it.
    let m = v[0]["model_gbps"].as_f64().unwrap();
    assert!((g - m).abs() / m < 0.005, "{g} vs {m}");
    // Per-link counters: 5 links × 2 directions; mem3's upstream direction is the busy one.
    let links = v[0]["links"].as_array().unwrap();
    assert_eq!(links.len(), 10);
    let up = links.iter().find(|l| l["link"] == "mem3->rc.1").unwrap();
    assert!(up["utilization"].as_f64().unwrap() > 0.9, "{up}");
    assert_eq!(up["tlps"], 200 * 4096 / 256);
}

#[test]
fn burst_mode_keeps_the_link_rate() {
    // The same write stream as above with --burst 16: the same TLPs cross the link
    // (counted per TLP), at the same rate within 0.2 % (the drain of its last burst).
    let f = example("sim-default.toml");
    let run = |burst: &str| {
        let v = mem3_write_stream(&["--burst", burst]);
        let up = v[0]["links"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["link"] == "mem3->rc.1")
            .unwrap()
            .clone();
        (v[0]["gbps"].as_f64().unwrap(), up["tlps"].as_u64().unwrap())
    };
    let (exact, tlps) = run("1");
    let (burst, burst_tlps) = run("16");
    assert_eq!(tlps, 200 * 4096 / 256);
    assert_eq!(burst_tlps, tlps);
    assert!((burst - exact).abs() / exact < 2e-3, "{burst} vs {exact}");
    for bad in ["0", "65"] {
        let (rc, _, err) = pcielab(&["sim", &f, "--burst", bad]);
        assert_eq!(rc, 2, "{err}");
        assert!(err.contains(&format!("burst {bad}")), "{err}");
    }
}

#[test]
fn mmio_csv() {
    let f = example("sim-default.toml");
    let (rc, out, err) = pcielab(&["sim", &f, "--workload", "mmio-lat", "--count", "3", "--csv"]);
    assert_eq!(rc, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "workload,device,op,size_B,gbps,model_gbps,mean_latency_ns,min_latency_ns,max_latency_ns,replays,dmas,failed,reads,median_latency_ns,p99_latency_ns"
    );
    // Floats at the precision the table shows (latencies: 0.1 ns); the read count is there.
    let f: Vec<&str> = lines[1].split(',').collect();
    assert_eq!(
        f[6].split_once('.').map(|x| x.1.len()),
        Some(1),
        "{}",
        lines[1]
    );
    assert_eq!(f[12], "3", "{}", lines[1]);
    assert_eq!(lines.len(), 5);
    assert!(lines[1].starts_with("mmio-lat,mem0,,4,,,"));
}

#[test]
fn bad_input_exits_2_with_one_line() {
    let f = example("sim-default.toml");
    for (args, what) in [
        (vec!["sim", &f, "--mps", "100"], "mps 100"),
        (vec!["sim", &f, "--device", "nope"], "--device \"nope\""),
        (vec!["sim", &f, "--sizes", "5:1"], "--sizes"),
        (vec!["sim", &f, "--window", "0"], "--window 0"),
        (
            vec!["sim", &f, "--workload", "mmio-lat", "--count", "200000"],
            "at most 100000 reads",
        ),
        (
            vec!["sim", &f, "--workload", "mmio-lat", "--size", "5000"],
            "--size 5000",
        ),
        (vec!["sim", &f, "--error-rate", "2"], "error rate 2"),
        (vec!["sim", &f, "--poison-rate", "1.5"], "poison rate 1.5"),
        (
            vec!["sim", &f, "--switch-error-rate", "2"],
            "switch error rate 2",
        ),
        (
            vec!["sim", &f, "--fc-update-us", "5000"],
            "fc update period",
        ),
        (vec!["sim", "no-such-file.toml"], "no-such-file.toml"),
        (vec!["sim", &f, "--gap-us", "2000000"], "--gap-us 2000000"),
        (vec!["sim", &f, "--ats"], "--iommu"),
        (
            vec!["sim", &f, "--iommu", "--iommu-page", "5000"],
            "iommu page size",
        ),
        (
            vec!["sim", &f, "--iommu", "--iotlb-entries", "0"],
            "iotlb entries",
        ),
        (
            vec!["sim", &f, "--iommu", "--ats", "--atc-entries", "0"],
            "atc entries",
        ),
        (vec!["sim", &f, "--iommu", "--pri"], "--pri needs --ats"),
        (vec!["sim", &f, "--pasid", "3"], "--pasid needs --iommu"),
        (
            vec!["sim", &f, "--iommu", "--pasid", "1048576"],
            "--pasid 1048576: allowed 0..=1048575",
        ),
        (
            vec![
                "sim",
                &f,
                "--iommu",
                "--ats",
                "--pri",
                "--page-fault-us",
                "2000000",
            ],
            "--page-fault-us 2000000",
        ),
        (
            vec!["sim", &f, "--workload", "dma", "--fail", "mem0"],
            "NODE@US",
        ),
        (
            vec!["sim", &f, "--workload", "dma", "--fail", "nope@5"],
            "no node named \"nope\"",
        ),
        (
            vec!["sim", &f, "--workload", "dma", "--fail", "rc@5"],
            "no link above it",
        ),
        (vec!["sim", &f, "--fail", "mem0@5"], "--workload dma"),
        (
            vec!["sim", &f, "--aspm", "l0s", "--l1ss"],
            "--l1ss needs --aspm l1",
        ),
        (
            vec!["sim", &f, "--workload", "dma", "--recover-us", "5"],
            "--recover-us needs --fail",
        ),
        (
            vec!["sim", &f, "--ready-wait-us", "1000001"],
            "--ready-wait-us 1000001",
        ),
        (
            vec!["sim", &f, "--device-ready-us", "1000001"],
            "--device-ready-us 1000001",
        ),
        (
            vec!["sim", &f, "--op", "atomic"],
            "--op atomic works with --workload dma",
        ),
        (
            vec!["sim", &f, "--peer", "mem1"],
            "--peer does not apply to --workload sweep: it is used by --workload dma",
        ),
        (
            vec!["sim", &f, "--workload", "inject"],
            "--workload inject needs at least one --tlp HEX",
        ),
        (
            vec!["sim", &f, "--workload", "inject", "--tlp", "40zz"],
            "--tlp #1: bad hex",
        ),
        (
            vec!["sim", &f, "--tlp", "00"],
            "--tlp does not apply to --workload sweep: it is used by --workload inject",
        ),
        (
            vec!["sim", &f, "--workload", "inject", "--tlp", "00", "--csv"],
            "--csv: --workload inject prints a table or --json",
        ),
        (
            vec!["sim", &f, "--workload", "dma", "--peer", "mem0"],
            "--peer \"mem0\": the device itself",
        ),
        (
            vec!["sim", &f, "--workload", "dma", "--peer", "nope"],
            "--peer \"nope\": no endpoint with a memory BAR 0",
        ),
        (
            vec!["sim", &f, "--workload", "dma", "--peer", "mem1", "--iommu"],
            "the IOMMU does not translate peer-to-peer requests",
        ),
        (
            vec![
                "sim",
                &f,
                "--workload",
                "dma",
                "--op",
                "atomic",
                "--size",
                "16",
            ],
            "--size 16: an atomic counter is 4 or 8 bytes",
        ),
    ] {
        let (rc, out, err) = pcielab(&args);
        assert_eq!(rc, 2, "{args:?}: {out}{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(what), "{args:?}: {err}");
    }
}

#[test]
fn the_periodic_updatefc_can_be_turned_off() {
    // One link direction's UpdateFC DLLPs of a 4 KiB write stream (≈ 0.3 ms): with the
    // 30 µs refresh, the device's receiver (no TLPs reach it) sends some; without, none
    // after the handshake's InitFCs.
    let fc = |period: &str| -> u64 {
        let (rc, out, err) = pcielab(&[
            "sim",
            "--workload",
            "dma",
            "--device",
            "mem3",
            "--op",
            "write",
            "--size",
            "4096",
            "--count",
            "2000",
            "--json",
            "--fc-update-us",
            period,
        ]);
        assert_eq!(rc, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let links = v[0]["links"].as_array().unwrap();
        let up = links
            .iter()
            .find(|l| l["link"].as_str().unwrap().starts_with("mem3"))
            .unwrap();
        up["fc_dllps"].as_u64().unwrap()
    };
    let (on, off) = (fc("30"), fc("0"));
    assert_eq!(off, 6, "InitFC1 and InitFC2 for three classes");
    assert!(on > off + 10, "{on} with the refresh");
}

#[test]
fn no_file_runs_the_built_in_default() {
    let (rc, out, err) = pcielab(&["sim", "--workload", "mmio-lat", "--count", "2", "--json"]);
    assert_eq!(rc, 0, "{err}");
    let f = example("sim-default.toml");
    let (rc, same, err) = pcielab(&[
        "sim",
        &f,
        "--workload",
        "mmio-lat",
        "--count",
        "2",
        "--json",
    ]);
    assert_eq!(rc, 0, "{err}");
    assert_eq!(out, same);
}

#[test]
fn enumerate_over_the_links_reports_the_tree_and_the_requests() {
    let f = example("sim-default.toml");
    let (rc, out, err) = pcielab(&["sim", &f, "--workload", "enumerate", "--json"]);
    assert_eq!(rc, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = v.as_array().unwrap();
    let total = rows.last().unwrap();
    assert_eq!(total["workload"], "enumerate-total");
    assert_eq!(total["same_as_ecam"], true);
    // Host bridge, two root ports, the switch (1 upstream + 3 downstream ports) and four
    // endpoints.
    assert_eq!(total["functions"], 11);
    assert_eq!(rows.len(), 12);
    let endpoints = rows.iter().filter(|r| r["type"] == "Endpoint").count();
    assert_eq!(endpoints, 4);
    assert!(total["unsupported"].as_u64().unwrap() > 0);
    assert!(total["time_us"].as_f64().unwrap() > 100.0, "{total}");
    // The table says the same in words.
    let (rc, out, err) = pcielab(&["sim", &f, "--workload", "enumerate"]);
    assert_eq!(rc, 0, "{err}");
    assert!(out.contains("same tree as through ECAM: yes"), "{out}");
    assert!(out.contains("DownstreamPort"), "{out}");
    // And the CSV has one line per function plus the total.
    let (rc, out, err) = pcielab(&["sim", &f, "--workload", "enumerate", "--csv"]);
    assert_eq!(rc, 0, "{err}");
    assert!(out.starts_with("workload,bdf,parent,type,"), "{out}");
    assert_eq!(out.lines().count(), 1 + 12, "{out}");
}

/// With SR-IOV VFs, enumeration over the links enables them again (disabling them
/// first, as Linux does when `sriov_numvfs` is written anew) and finds the same tree
/// as through ECAM, VFs included.
#[test]
fn enumerate_over_the_links_enables_the_vfs_too() {
    let (rc, out, err) = pcielab(&[
        "sim",
        "--example",
        "sriov-4vf",
        "--workload",
        "enumerate",
        "--json",
    ]);
    assert_eq!(rc, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = v.as_array().unwrap();
    let total = rows.last().unwrap().clone();
    assert_eq!(total["same_as_ecam"], true, "{total}");
    assert_eq!(
        total["functions"], 7,
        "host bridge, root port, PF, 4 VFs: {total}"
    );
    let vfs = rows.iter().filter(|r| r["device_id"] == "0011").count();
    assert_eq!(vfs, 4, "{out}");
}

#[test]
fn aspm_adds_the_exit_latencies_of_the_sleeping_links_to_mmio_reads() {
    // Reads after 20 µs of idle: past the 7 µs L0s and 8 µs L1 entry times.
    let mean = |aspm: &str| mmio_means(&["--gap-us", "20", "--aspm", aspm]);
    let off = mean("off");
    let added = |aspm: &str| -> Vec<f64> {
        mean(aspm)
            .iter()
            .zip(&off)
            .map(|(a, b)| ((a - b) * 10.0).round() / 10.0)
            .collect()
    };
    // mem0..mem2 sit behind the switch (two links), mem3 on root port 1 (one link);
    // L1 exit 2 µs per sleeping link.
    assert_eq!(added("l1"), [4000.0, 4000.0, 4000.0, 2000.0]);
    // L0s exit with N_FTS 64: Gen3 66 blocks × 16.25 ns = 1072.5 ns, Gen4 536.25 ns,
    // Gen2 65 × 4 symbols × 2 ns = 520 ns. Behind the switch, three transmitters wake
    // (RC, switch down, device up); the switch's transmitter towards the RC was woken
    // by its ACK of the request before the completion came. mem3: two.
    assert_eq!(
        added("l0s"),
        [
            3.0 * 1072.5,
            3.0 * 1072.5,
            1072.5 + 2.0 * 520.0,
            2.0 * 536.25
        ]
    );
    // With both, the links are in L1 by then.
    assert_eq!(added("l0s-l1"), added("l1"));
    let (rc, _, err) = pcielab(&["sim", "--aspm", "l2"]);
    assert_eq!(rc, 2);
    assert!(
        err.contains("[possible values: off, l0s, l1, l0s-l1]"),
        "{err}"
    );
}

#[test]
fn demand_paging_costs_one_page_fault_per_page_touched() {
    // 8 writes of 4 KiB over a 32 KiB buffer mapped on demand: every page is touched
    // once, so 8 page requests, each answered after the 5 µs page fault.
    let f = example("sim-default.toml");
    let run = |pri: bool| {
        let mut args = vec![
            "sim",
            &f,
            "--workload",
            "dma",
            "--device",
            "mem3",
            "--op",
            "write",
            "--size",
            "4096",
            "--count",
            "8",
            "--window",
            "1",
            "--region",
            "32768",
            "--iommu",
            "--ats",
            "--json",
        ];
        if pri {
            args.extend(["--pri", "--page-fault-us", "5"]);
        }
        first_row(&args)
    };
    let paged = run(true);
    assert_eq!(paged["ats"]["page_requests"], 8, "{paged}");
    assert_eq!(paged["ats"]["pages_made_resident"], 8);
    assert_eq!(paged["failed"], 0);
    let mapped = run(false);
    assert_eq!(mapped["ats"]["page_requests"], 0);
    // Every DMA (window 1) waits for its page fault: at least 5 µs more each.
    let lat = |v: &serde_json::Value| v["mean_latency_ns"].as_f64().unwrap();
    assert!(lat(&paged) - lat(&mapped) > 5000.0, "{paged} {mapped}");
}

#[test]
fn a_failed_link_under_dpc_is_contained_and_comes_back() {
    let f = example("sim-default.toml");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "sim",
            &f,
            "--workload",
            "dma",
            "--device",
            "mem1",
            "--op",
            "write",
            "--count",
            "300",
            "--json",
        ];
        args.extend_from_slice(extra);
        first_row(&args)
    };
    let r = run(&["--fail", "mem1@20", "--recover-us", "150", "--dpc"]);
    let fl = &r["failure"];
    assert_eq!(fl["node"], "mem1");
    assert_eq!(fl["at_ns"], 20000.0);
    assert_eq!(fl["link_active_at_end"], true, "{fl}");
    let dpc = fl["dpc"].as_array().unwrap();
    assert_eq!(dpc.len(), 1, "{fl}");
    assert_eq!(dpc[0]["reason"], "PortError", "Surprise Down at the port");
    let failed = r["failed"].as_u64().unwrap();
    assert!((1..=16).contains(&failed), "the window in flight: {r}");
    // The host restored the device, whose stream then did the DMAs it had left.
    assert_eq!(r["dmas"], 300, "{r}");
    let rc = &fl["recovery"];
    let t = |k: &str| rc[k].as_f64().unwrap();
    // Failed at 20 µs, back 150 µs later, trained in 100 µs (then InitFC).
    let trained = 20_000.0 + 150_000.0 + 100_000.0;
    assert!(t("link_up_at_ns") > trained, "{rc}");
    assert!(t("link_up_at_ns") < trained + 1_000.0, "{rc}");
    assert_eq!(
        t("restore_started_at_ns"),
        t("link_up_at_ns") + 100e6,
        "{rc}"
    );
    assert_eq!(rc["failed_writes"], 0, "{rc}");
    let resumed = fl["resumed_at_ns"].as_f64().unwrap();
    assert!(
        resumed > t("restore_started_at_ns") && resumed <= t("restored_at_ns"),
        "{fl}"
    );
    // A shorter device-ready wait (as Readiness Notifications allow), then also a
    // device that needs 3 ms to initialize: the restore waits for it (CRS, retried).
    for device_ready in ["0", "3000"] {
        let r = run(&[
            "--fail",
            "mem1@20",
            "--recover-us",
            "150",
            "--ready-wait-us",
            "1000",
            "--device-ready-us",
            device_ready,
        ]);
        let rc = &r["failure"]["recovery"];
        let t = |k: &str| rc[k].as_f64().unwrap();
        assert_eq!(t("restore_started_at_ns"), t("link_up_at_ns") + 1e6, "{rc}");
        let ready = t("link_up_at_ns") + 1e3 * device_ready.parse::<f64>().unwrap();
        let late = t("restored_at_ns") - ready.max(t("restore_started_at_ns"));
        assert!(late > -1e3 && late < 50e3, "{rc}");
        assert_eq!(rc["failed_writes"], 0, "{rc}");
        assert_eq!(r["dmas"], 300, "{r}");
    }
    // Without DPC the port only logs the Surprise Down; without recovery it stays down
    // and the stream stays paused.
    let r = run(&["--fail", "mem1@20"]);
    assert_eq!(r["failure"]["dpc"].as_array().unwrap().len(), 0);
    assert_eq!(r["failure"]["link_active_at_end"], false);
    assert!(r["failure"]["recovery"].is_null());
    assert!(r["failure"]["resumed_at_ns"].is_null());
    assert!(r["dmas"].as_u64().unwrap() < 300, "{r}");
    // Without --fail the row has no failure object.
    assert!(run(&[]).get("failure").is_none());
}

/// Runs `pcielab` with `args` (which ask for --json) and returns the first row.
fn first_row(args: &[&str]) -> serde_json::Value {
    let (rc, out, err) = pcielab(args);
    assert_eq!(rc, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v[0].clone()
}

#[test]
fn l1_substates_add_t_power_on_and_the_common_mode_restore_time_per_link() {
    // Reads after 40 µs of idle; every link of the path sleeps in L1.2 (no device
    // reports a latency tolerance) and pays 2 µs + 20 µs to wake.
    let mean = |extra: &[&str]| {
        let mut args = vec!["--gap-us", "40"];
        args.extend_from_slice(extra);
        mmio_means(&args)
    };
    let off = mean(&[]);
    let l12: Vec<f64> = mean(&["--aspm", "l1", "--l1ss"])
        .iter()
        .zip(&off)
        .map(|(a, b)| ((a - b) * 10.0).round() / 10.0)
        .collect();
    assert_eq!(l12, [44000.0, 44000.0, 44000.0, 22000.0]);
}

/// Mean latencies of three MMIO reads per endpoint of the default scenario, with
/// `extra` arguments.
fn mmio_means(extra: &[&str]) -> Vec<f64> {
    let mut args = vec!["sim", "--workload", "mmio-lat", "--count", "3", "--json"];
    args.extend_from_slice(extra);
    let (rc, out, err) = pcielab(&args);
    assert_eq!(rc, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| r["mean_latency_ns"].as_f64().unwrap())
        .collect()
}

#[test]
fn atomic_counters_cost_a_read_plus_their_operand_upstream() {
    // mem0, one at a time: an 8-byte FetchAdd's round trip is an 8-byte read's plus
    // the operand's wire time on the two Gen3 x8 links up (8 × 8 × 130/128 × 376/375
    // / 64 Gb/s = 1.018 ns each).
    let f = example("sim-default.toml");
    let row = |op: &str| {
        first_row(&[
            "sim",
            &f,
            "--workload",
            "dma",
            "--op",
            op,
            "--size",
            "8",
            "--window",
            "1",
            "--count",
            "50",
            "--json",
        ])
    };
    let (a, r) = (row("atomic"), row("read"));
    assert_eq!(
        (a["op"].as_str(), a["failed"].as_u64()),
        (Some("atomic"), Some(0))
    );
    assert!(a["model_gbps"].is_null());
    let d = a["mean_latency_ns"].as_f64().unwrap() - r["mean_latency_ns"].as_f64().unwrap();
    assert!((d - 2.036).abs() < 0.01, "{d} ns");
}

#[test]
fn peer_to_peer_streams_cross_the_switch_or_go_by_the_root_complex_with_acs() {
    // mem0 (Gen3 x8) writes 4 KiB DMAs into mem1's BAR (Gen3 x4) below the same switch:
    // the Gen3 x4 link's TLP rate, 32 GT/s × 128/130 × 375/376 × 256/280 = 28.73 Gb/s
    // (256 payload bytes, a 4DW header and 8 framing bytes). Directly, only the two
    // device links carry the TLPs; with --acs the switch sends them up to the root
    // complex and back, at the same rate.
    let f = example("sim-default.toml");
    let run = |extra: &[&str], op: &str, size: &str| {
        let mut args = vec![
            "sim",
            &f,
            "--workload",
            "dma",
            "--device",
            "mem0",
            "--peer",
            "mem1",
            "--op",
            op,
            "--size",
            size,
            "--json",
        ];
        args.extend(extra);
        first_row(&args)
    };
    let busy = |row: &serde_json::Value| -> Vec<String> {
        row["links"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["tlps"].as_u64() == Some(200 * 16))
            .map(|l| l["link"].as_str().unwrap().to_string())
            .collect()
    };
    let want = 32.0 * 128.0 / 130.0 * 375.0 / 376.0 * 256.0 / 280.0;
    let direct = run(&[], "write", "4096");
    let g = direct["gbps"].as_f64().unwrap();
    assert!((g - want).abs() / want < 1e-3, "{g} vs {want}");
    assert!(direct["model_gbps"].is_null());
    assert_eq!(busy(&direct), ["mem0->sw0.0", "sw0.1->mem1"]);
    let acs = run(&["--acs"], "write", "4096");
    let g = acs["gbps"].as_f64().unwrap();
    assert!((g - want).abs() / want < 1e-3, "{g} vs {want}");
    assert_eq!(
        busy(&acs),
        ["rc.0->sw0", "sw0->rc.0", "mem0->sw0.0", "sw0.1->mem1"]
    );
    // One 64-byte read at a time: the detour costs the root complex and the switch
    // once more each way, plus four more link crossings.
    let lat = |extra: &[&str]| {
        let mut e = vec!["--window", "1", "--count", "50"];
        e.extend(extra);
        run(&e, "read", "64")["mean_latency_ns"].as_f64().unwrap()
    };
    let (d, a) = (lat(&[]), lat(&["--acs"]));
    assert!(a - d > 400.0 && a - d < 700.0, "{d} -> {a} ns");
}

#[test]
fn injected_tlps_show_what_the_port_does_with_each() {
    // From mem0 (03:00.0), hand-made: a 1-DW write of deadbeef to host memory at
    // 0x1000, a 1-DW read of it back (tag 5), a CfgRd0 (configuration requests never
    // travel upstream), and a write whose Length (2 DW) exceeds its data (1 DW).
    let f = example("sim-default.toml");
    let (rc, out, err) = pcielab(&[
        "sim",
        &f,
        "--workload",
        "inject",
        "--tlp",
        "40000001_0300010f_00001000_deadbeef",
        "--tlp",
        "00000001_0300050f_00001000",
        "--tlp",
        "04000001_03000a0f_00000000",
        "--tlp",
        "40000002_0300010f_00001000_deadbeef",
        "--json",
    ]);
    assert_eq!(rc, 0, "{err}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    let of = |w: &str| {
        rows.iter()
            .filter(|r| r["workload"] == w)
            .collect::<Vec<_>>()
    };
    let sent = of("inject");
    assert_eq!(sent.len(), 4);
    assert!(sent[3]["tlp"].as_str().unwrap().starts_with("undecodable"));
    // The port answers the CfgRd with UR; the root complex answers the read with the
    // data the write left.
    let back = of("inject-completion");
    assert_eq!(back.len(), 2, "{back:?}");
    assert!(back[0]["tlp"]
        .as_str()
        .unwrap()
        .contains("Cpl 02:00.0 -> 03:00.0 tag 10 UR"));
    assert!(back[1]["tlp"]
        .as_str()
        .unwrap()
        .contains("CplD 00:00.0 -> 03:00.0 tag 5 SC"));
    assert!(
        back[1]["hex"].as_str().unwrap().ends_with("deadbeef"),
        "{}",
        back[1]
    );
    let res = of("inject-result")[0];
    // Malformed TLP (bit 18) and Unsupported Request (bit 20) at the switch port.
    assert_eq!(res["port"], "02:00.0");
    assert_eq!(res["port_uncorrectable"], "00140000");
    assert_eq!(res["port_errors"], "MalfTLP UnsupReq");
    let rec = res["recorded"].to_string();
    assert!(
        rec.contains(
            "configuration requests travel only downstream; completed with Unsupported Request"
        ),
        "{rec}"
    );
    assert!(rec.contains("malformed TLP (Undecodable)"), "{rec}");
    // The table says the same.
    let (rc, text, _) = pcielab(&[
        "sim",
        &f,
        "--workload",
        "inject",
        "--tlp",
        "04000001_03000a0f_00000000",
    ]);
    assert_eq!(rc, 0);
    assert!(
        text.contains("AER uncorrectable status: port 02:00.0 00100000 (UnsupReq)"),
        "{text}"
    );
}

/// Failed DMAs show in the table, the CSV and the JSON alike, and the run says so on
/// stderr whatever the format.
#[test]
fn failed_dmas_show_in_every_format_and_on_stderr() {
    let f = example("sim-default.toml");
    let base = [
        "sim",
        &f,
        "--workload",
        "dma",
        "--count",
        "50",
        "--poison-rate",
        "0.05",
    ];
    let run = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        let (rc, out, err) = pcielab(&args);
        assert_eq!(rc, 0, "{err}");
        (out, err)
    };
    let (json, err_json) = run(&["--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let failed = v[0]["failed"].as_u64().unwrap();
    assert!(failed > 0 && failed < 50, "{json}");
    let warning = format!("{failed} of 50 DMAs failed");
    assert!(err_json.contains(&warning), "{err_json}");
    let (table, err_table) = run(&[]);
    let head = table.lines().find(|l| l.starts_with("device ")).unwrap();
    assert_eq!(head.split_whitespace().last(), Some("failed"), "{table}");
    let row = table.lines().find(|l| l.starts_with("mem0 ")).unwrap();
    assert_eq!(
        row.split_whitespace().last(),
        Some(failed.to_string().as_str()),
        "{table}"
    );
    assert!(err_table.contains(&warning), "{err_table}");
    let (csv, err_csv) = run(&["--csv"]);
    let cols: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let vals: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
    let at = |c: &str| vals[cols.iter().position(|x| *x == c).unwrap()];
    assert_eq!(at("failed"), failed.to_string(), "{csv}");
    assert_eq!(at("dmas"), "50", "{csv}");
    // Gb/s at the table's precision.
    assert_eq!(
        at("gbps").split_once('.').map(|x| x.1.len()),
        Some(3),
        "{csv}"
    );
    assert!(err_csv.contains(&warning), "{err_csv}");
    // Without failures, no warning.
    let (rc, _, err) = pcielab(&["sim", &f, "--workload", "dma", "--count", "50"]);
    assert_eq!(rc, 0);
    assert!(!err.contains("warning"), "{err}");
}

/// `--count` DMAs run, never more, and the window is capped at the count (a window of
/// 100,000 for 10 DMAs used to raise the count to 200,000).
#[test]
fn the_count_is_exact_and_caps_the_window() {
    let f = example("sim-default.toml");
    for (count, window, want_window) in [(10, "100000", 10), (5, "16", 5), (40, "16", 16)] {
        let c = count.to_string();
        let (rc, out, err) = pcielab(&[
            "sim",
            &f,
            "--workload",
            "dma",
            "--count",
            &c,
            "--window",
            window,
            "--json",
        ]);
        assert_eq!(rc, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v[0]["dmas"], count, "{out}");
        assert_eq!(v[0]["window"], want_window, "{out}");
        // A stream no longer than its window has no steady state: no rate (null), and
        // stderr says why; a longer one has its rate, below the link's bound.
        if count <= 16 {
            assert!(v[0]["gbps"].is_null(), "{out}");
            assert!(err.contains("no steady state"), "{err}");
        } else {
            let g = v[0]["gbps"].as_f64().unwrap();
            let m = v[0]["model_gbps"].as_f64().unwrap();
            assert!(g > 0.0 && g < m * 1.01, "{g} vs {m}");
            assert!(!err.contains("no steady state"), "{err}");
        }
    }
}

/// A bit error rate that would make a large TLP's replays endless is refused; the
/// largest allowed one finishes. At MPS 256 the largest TLP is 284 bytes on the wire
/// and BER 2.03e-3 corrupts it with probability 1 - (1 - 2.03e-3)^2272 = 0.99.
#[test]
fn the_bit_error_rate_is_bounded() {
    let f = example("sim-default.toml");
    let bad = [
        ("0.01", "256"),
        ("0.5", "256"),
        ("0.999", "256"),
        ("3e-3", "256"),
        ("-0.5", "256"),
        ("2e-4", "4096"),
    ];
    for (ber, mps) in bad {
        let (rc, out, err) = pcielab(&[
            "sim",
            &f,
            "--workload",
            "dma",
            "--count",
            "2",
            "--ber",
            ber,
            "--mps",
            mps,
        ]);
        assert_eq!(rc, 2, "--ber {ber}: {out}{err}");
        assert!(
            err.contains("bit error rate") && err.contains("the largest allowed"),
            "{err}"
        );
    }
    for (ber, mps) in [("2e-3", "256"), ("1.3e-4", "4096")] {
        let (rc, out, err) = pcielab(&[
            "sim",
            &f,
            "--workload",
            "dma",
            "--count",
            "4",
            "--ber",
            ber,
            "--mps",
            mps,
            "--mrrs",
            "4096",
            "--json",
        ]);
        assert_eq!(rc, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v[0]["dmas"], 4, "{out}");
        assert!(v[0]["replays"].as_u64().unwrap() > 0, "{out}");
    }
}

/// `--pcap-max` stops the capture at the packet that reaches the limit: the file stays
/// valid and holds exactly the first packets, and stderr says how many were left out.
#[test]
fn pcap_max_bounds_the_capture_and_says_what_it_left_out() {
    let f = example("sim-default.toml");
    let dir = std::env::temp_dir().join(format!("pcielab-pcap-max-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let run = |name: &str, max: &str| {
        let p = dir.join(name);
        let ps = p.to_str().unwrap().to_string();
        let (rc, _, err) = pcielab(&[
            "sim",
            &f,
            "--workload",
            "dma",
            "--device",
            "mem3",
            "--op",
            "write",
            "--count",
            "300",
            "--pcap",
            &ps,
            "--pcap-max",
            max,
        ]);
        assert_eq!(rc, 0, "{err}");
        (p, err)
    };
    let (whole, err) = run("whole.pcapng", "0");
    assert!(!err.contains("warning"), "{err}");
    let total: u64 = err
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{err}"));
    let (cut, err) = run("cut.pcapng", "64K");
    let size = std::fs::metadata(&cut).unwrap().len();
    // At most one packet (a 4 KiB MWr in its frame and block) past the limit.
    assert!((65536..65536 + 4096 + 200).contains(&size), "{size}");
    let dropped: u64 = err
        .split("the last ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{err}"));
    assert!(dropped > 0 && dropped < total, "{err}");
    let (rc, out, e) = pcielab(&["dump", cut.to_str().unwrap()]);
    assert_eq!(rc, 0, "{e}");
    let kept = out.lines().filter(|l| !l.starts_with('#')).count() as u64;
    assert_eq!(kept + dropped, total, "{err}");
    // The kept packets are the whole capture's first ones.
    let (_, all, _) = pcielab(&["dump", whole.to_str().unwrap()]);
    let first: Vec<&str> = all.lines().take(kept as usize).collect();
    let got: Vec<&str> = out.lines().take(kept as usize).collect();
    assert_eq!(first, got);
    // Units and bad sizes.
    let (rc, _, err) = pcielab(&["sim", &f, "--pcap-max", "12Q"]);
    assert_eq!(rc, 2);
    assert!(err.contains("is not a byte size"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Long runs show a progress bar on a terminal (forced here with PCIELAB_PROGRESS);
/// output to a pipe or file stays clean, and the bar changes no result.
#[test]
fn progress_bars_show_only_where_wanted_and_change_nothing() {
    let f = example("sim-default.toml");
    let args = [
        "sim",
        &f,
        "--workload",
        "dma",
        "--device",
        "mem3",
        "--count",
        "3000",
        "--json",
    ];
    let run = |env: Option<&str>| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_pcielab"));
        c.args(args);
        match env {
            Some(v) => c.env("PCIELAB_PROGRESS", v),
            None => c.env_remove("PCIELAB_PROGRESS"),
        };
        let o = c.output().unwrap();
        assert!(o.status.success());
        (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (quiet, err) = run(None);
    assert!(err.is_empty(), "{err}");
    let (shown, err) = run(Some("always"));
    assert_eq!(quiet, shown);
    let last = err.rsplit('\r').next().unwrap();
    assert!(
        last.starts_with("DMAs [##############################] 3000/3000"),
        "{err:?}"
    );
    let (rc, _, err) = pcielab(&["model", "bw", "--sizes", "1:2000"]);
    assert_eq!(rc, 0);
    assert!(err.is_empty(), "{err}");
}

/// A run whose next event is further away than the progress chunk (completion
/// timeouts with the periodic UpdateFC off) still ends.
#[test]
fn a_run_with_long_gaps_between_events_ends() {
    let f = example("sim-default.toml");
    let row = first_row(&[
        "sim",
        &f,
        "--workload",
        "dma",
        "--count",
        "20",
        "--ecrc",
        "--switch-error-rate",
        "0.2",
        "--fc-update-us",
        "0",
        "--json",
    ]);
    assert_eq!(row["dmas"], 20);
    assert!(row["failed"].as_u64().unwrap() > 0, "{row}");
}

/// `sim --help` groups its flags under headings and ends with examples, each of which
/// runs (topo.toml is the default topology's file; captures go to a temporary file).
#[test]
fn help_is_grouped_and_its_examples_run() {
    let (rc, help, _) = pcielab(&["sim", "--help"]);
    assert_eq!(rc, 0);
    for h in [
        "Workload:",
        "Link and fabric:",
        "Errors, failures and recovery:",
        "Output:",
    ] {
        assert!(help.lines().any(|l| l == h), "{h}");
    }
    let f = example("sim-default.toml");
    let pcap = std::env::temp_dir().join(format!("pcielab-help-{}.pcapng", std::process::id()));
    let examples: Vec<&str> = help
        .split("Examples:\n")
        .nth(1)
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pcielab sim"))
        .collect();
    assert!(examples.len() >= 6, "{help}");
    for e in examples {
        // The command is what comes before the two-space gap of a description.
        let cmd = e.split("   ").next().unwrap();
        let mut args = vec!["sim".to_string()];
        for w in cmd.split_whitespace() {
            args.push(match w {
                "topo.toml" => f.clone(),
                w if w.ends_with(".pcapng") => pcap.display().to_string(),
                w => w.to_string(),
            });
        }
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let (rc, _, err) = pcielab(&a);
        assert_eq!(rc, 0, "{a:?}: {err}");
    }
    let _ = std::fs::remove_file(&pcap);
}

/// `sim --format` with `--json` and `--csv` as its aliases.
#[test]
fn sim_format_and_its_aliases() {
    let f = example("sim-default.toml");
    let base = ["sim", &f, "--workload", "mmio-lat", "--count", "2"];
    let run = |extra: &[&str]| {
        let mut a = base.to_vec();
        a.extend_from_slice(extra);
        pcielab(&a)
    };
    assert_eq!(run(&["--format", "json"]).1, run(&["--json"]).1);
    assert_eq!(run(&["--format", "csv"]).1, run(&["--csv"]).1);
    assert_eq!(run(&["--format", "table"]).1, run(&[]).1);
    let (rc, _, err) = run(&["--json", "--format", "csv"]);
    assert_eq!(rc, 2, "{err}");
}

/// `--gen G --lanes N` builds a one-link topology, no file needed: a saturated write
/// stream runs at the link's rate derived by hand (encoding, SKP blocks, framing and
/// headers: MPS 256 writes above 4 GiB are 256 + 16 + 8 bytes on the wire).
#[test]
fn gen_and_lanes_make_a_one_link_topology() {
    for (gen, lanes, gts, enc) in [
        ("4", "16", 16.0, 128.0 / 130.0),
        ("3", "8", 8.0, 128.0 / 130.0),
    ] {
        let row = first_row(&[
            "sim",
            "--gen",
            gen,
            "--lanes",
            lanes,
            "--workload",
            "dma",
            "--op",
            "write",
            "--count",
            "400",
            "--json",
        ]);
        assert_eq!(row["device"], "mem0");
        let n: f64 = lanes.parse().unwrap();
        let want = gts * n * enc * 375.0 / 376.0 * 256.0 / 280.0;
        let g = row["gbps"].as_f64().unwrap();
        assert!(
            (g - want).abs() / want < 1e-3,
            "Gen{gen} x{lanes}: {g} vs {want}"
        );
    }
    for (args, msg) in [
        (vec!["sim", "--gen", "7"], "--gen 7: allowed 1..=6"),
        (vec!["sim", "--lanes", "3"], "--lanes 3: allowed"),
        (
            vec!["sim", "--gen", "3", "--example", "design"],
            "cannot be used with",
        ),
    ] {
        let (rc, _, err) = pcielab(&args);
        assert_eq!(rc, 2, "{args:?}");
        assert!(err.contains(msg), "{args:?}: {err}");
    }
}

/// `pcielab sim --workload nic`: the contract's columns, then the model's, in CSV; the
/// measured bytes per packet equal what `pcielab model nic --dllp spec` prints (another
/// command, the analytic model), and the simulated rates are within 3 % of it.
#[test]
fn nic_workload_columns_and_model_agree() {
    for (nic, extra) in [("simple", None), ("batched", Some("--dpdk"))] {
        let mut args = vec![
            "sim",
            "--workload",
            "nic",
            "--nic",
            nic,
            "--sizes",
            "64,1518",
            "--format",
            "csv",
        ];
        args.extend(extra);
        let (rc, out, err) = pcielab(&args);
        assert_eq!(rc, 0, "{err}");
        let mut lines = out.lines();
        assert_eq!(
            lines.next().unwrap(),
            "size_B,eth_gbps,eth_mpps,tx_gbps,rx_gbps,bidir_gbps,tx_mpps,rx_mpps,bidir_mpps,down_B_per_pkt,up_B_per_pkt,\
             model_tx_gbps,model_rx_gbps,model_bidir_gbps,model_down_B_per_pkt,model_up_B_per_pkt"
        );
        let sim: Vec<Vec<f64>> = lines
            .map(|l| l.split(',').map(|c| c.parse().unwrap()).collect())
            .collect();
        assert_eq!(sim.len(), 2);
        let mut margs = vec![
            "model",
            "nic",
            "--nic",
            nic,
            "--eth",
            "40",
            "--sizes",
            "64:1518:1454",
            "--dllp",
            "spec",
            "--format",
            "csv",
        ];
        margs.extend(extra);
        let (rc, mout, err) = pcielab(&margs);
        assert_eq!(rc, 0, "{err}");
        let model: Vec<Vec<f64>> = mout
            .lines()
            .skip(1)
            .map(|l| l.split(',').map(|c| c.parse().unwrap()).collect())
            .collect();
        for (s, m) in sim.iter().zip(&model) {
            assert_eq!(s[0], m[0]);
            assert_eq!(
                (s[9], s[10]),
                (m[9], m[10]),
                "{nic} {} B bytes per packet",
                s[0]
            );
            for c in 3..=5 {
                assert!(
                    (s[c] / m[c] - 1.0).abs() < 0.03,
                    "{nic} {} B column {c}: {} vs {}",
                    s[0],
                    s[c],
                    m[c]
                );
            }
            // The eth columns are the model's own.
            assert_eq!((s[1], s[2]), (m[1], m[2]));
        }
    }
    // Errors name the flag.
    let (rc, _, err) = pcielab(&["sim", "--workload", "nic", "--nic", "simple", "--dpdk"]);
    assert_eq!(rc, 2);
    assert!(err.contains("--dpdk with --nic simple"), "{err}");
    let (rc, _, err) = pcielab(&["sim", "--workload", "nic", "--sizes", "32"]);
    assert_eq!(rc, 2);
    assert!(err.contains("frame size 32"), "{err}");
}

/// `pcielab topo lspci` of a topology with pcie-bench's NIC (4 queue pairs), read by
/// pciutils' `lspci`: an Ethernet controller with 8 MSI-X vectors (two per queue pair)
/// in BAR2 and its registers in a 32-bit non-prefetchable BAR0.
#[test]
fn real_lspci_reads_the_nic() {
    let text = common::real_lspci(
        "nic",
        "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n\
         [[node]]\nname=\"nic\"\nkind=\"nic\"\nmodel=\"batched\"\nqueues=4\n\
         [[link]]\nup=\"rc.0\"\ndown=\"nic\"\ngen=3\nwidth=8\n",
        "01:00.0",
    );
    assert!(text.contains("Ethernet controller"), "{text}");
    assert!(text.contains("MSI-X: Enable+ Count=8"), "{text}");
    assert!(
        text.contains("Vector table: BAR=2 offset=00000000"),
        "{text}"
    );
    let region0 = text
        .lines()
        .find(|l| l.contains("Region 0: Memory at"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(region0.ends_with("(32-bit, non-prefetchable)"), "{text}");
}

/// `pcielab sim --workload sriov`: the PF and two VFs of seed 003's DMA engine stream at
/// once. Together they fill the Gen3 x8 link (256-byte writes: at most 57.6 Gb/s), the
/// link's share is fair (each function within 5 % of a third), no transfer fails; with
/// the VFs in VMs too; and a direction the workload does not run is refused by name.
#[test]
fn sriov_workload_shares_the_link_among_its_functions() {
    for vm in [false, true] {
        let mut args = vec![
            "sim",
            "--workload",
            "sriov",
            "--vfs",
            "2",
            "--op",
            "write",
            "--sizes",
            "1M",
            "--count",
            "4",
            "--format",
            "csv",
        ];
        if vm {
            args.push("--vm");
        }
        let (rc, out, err) = pcielab(&args);
        assert_eq!(rc, 0, "{err}");
        let mut lines = out.lines();
        assert_eq!(
            lines.next().unwrap(),
            "size_B,functions,total_gbps,min_fn_gbps,max_fn_gbps,transfers,errors"
        );
        let row: Vec<f64> = lines
            .next()
            .unwrap()
            .split(',')
            .map(|c| c.parse().unwrap())
            .collect();
        assert_eq!(
            (row[0], row[1], row[5], row[6]),
            (1048576.0, 3.0, 12.0, 0.0)
        );
        assert!((50.0..57.6).contains(&row[2]), "{out}");
        let third = row[2] / 3.0;
        assert!(row[3] > 0.95 * third && row[4] < 1.05 * third, "{out}");
    }
    let (rc, _, err) = pcielab(&["sim", "--workload", "sriov", "--op", "rw"]);
    assert_eq!(rc, 2, "{err}");
    assert!(
        err.contains("--op rw") && err.contains("one direction"),
        "{err}"
    );
}

/// A flag that the chosen workload does not use is refused (it would be silently
/// ignored), naming the flag and the workloads that use it; given where they apply, the
/// same flags are taken.
#[test]
fn flags_the_workload_does_not_use_are_refused() {
    for (args, what) in [
        (
            vec!["--workload", "nic", "--op", "write"],
            "--op does not apply to --workload nic: it is used by --workload dma, sriov",
        ),
        (
            vec!["--workload", "nic", "--window", "4"],
            "--window does not apply to --workload nic",
        ),
        (
            vec!["--workload", "nic", "--count", "4"],
            "--count does not apply to --workload nic",
        ),
        (
            vec!["--workload", "nic", "--vfs", "2"],
            "--vfs does not apply to --workload nic: it is used by --workload sriov",
        ),
        (
            vec!["--workload", "sriov", "--packets", "320"],
            "--packets does not apply to --workload sriov: it is used by --workload nic",
        ),
        (
            vec!["--workload", "sriov", "--size", "4096"],
            "--size does not apply to --workload sriov",
        ),
        (
            vec!["--workload", "dma", "--nic", "batched"],
            "--nic does not apply to --workload dma",
        ),
        (
            vec!["--workload", "sweep", "--op", "write"],
            "--op does not apply to --workload sweep",
        ),
        (
            vec!["--workload", "mmio-lat", "--window", "2"],
            "--window does not apply to --workload mmio-lat",
        ),
        (
            vec!["--workload", "enumerate", "--count", "2"],
            "--count does not apply to --workload enumerate",
        ),
        (
            vec!["--workload", "dma", "--gap-us", "5"],
            "--gap-us does not apply to --workload dma: it is used by --workload mmio-lat, sweep",
        ),
        (
            vec!["--workload", "dma", "--pcap-max", "1M"],
            "--pcap-max limits the file of --pcap FILE, which is not given",
        ),
        // Without a file the NIC and the DMA engine are named "nic" and "dma".
        (
            vec!["--workload", "nic", "--device", "mem0"],
            "--device \"mem0\": not a nic node of one link (rc.0 - nic, Gen3 x8); nic nodes: nic",
        ),
        (
            vec!["--workload", "sriov", "--device", "nic"],
            "--device \"nic\": not a dma-engine node of one link",
        ),
    ] {
        let mut a = vec!["sim", "--gen", "3", "--lanes", "8"];
        a.extend(&args);
        let (rc, out, err) = pcielab(&a);
        assert_eq!(rc, 2, "{a:?}: {out}{err}");
        assert_eq!(err.lines().count(), 1, "{a:?}: {err}");
        assert!(err.contains(what), "{a:?}: {err}");
    }
    // --vfs makes the one-link topology's engine; a topology file's has its own.
    let (rc, _, err) = pcielab(&[
        "sim",
        "--workload",
        "sriov",
        "--example",
        "sriov-dma",
        "--vfs",
        "2",
    ]);
    assert_eq!(rc, 2, "{err}");
    assert!(
        err.contains("--vfs 2: sets the VFs of the one-link topology"),
        "{err}"
    );
    // Where they apply, they are taken; --sizes and --count given explicitly as their
    // generic defaults are taken as given, not as "not given".
    let (rc, out, err) = pcielab(&[
        "sim",
        "--workload",
        "sriov",
        "--vfs",
        "0",
        "--op",
        "write",
        "--sizes",
        "4K",
        "--count",
        "200",
        "--csv",
    ]);
    assert_eq!(rc, 0, "{err}");
    let row = out.lines().last().unwrap();
    assert_eq!(row.split(',').nth(5), Some("200"), "{out}");
    let (rc, out, err) = pcielab(&[
        "sim",
        "--workload",
        "nic",
        "--sizes",
        "64:4096:x2",
        "--packets",
        "160",
        "--csv",
    ]);
    assert_eq!(rc, 0, "{err}");
    let sizes: Vec<&str> = out
        .lines()
        .skip(1)
        .map(|l| l.split(',').next().unwrap())
        .collect();
    assert_eq!(
        sizes,
        ["64", "128", "256", "512", "1024", "2048", "4096"],
        "{out}"
    );
}

/// `--workload nic` on a topology file takes the NIC's `model` and `eth_gbps` from the
/// file where `--nic` and `--eth` are not given (the flags win where they are), and says
/// on stderr that the file's `rx` and `frame` are not used (each run sets its own).
#[test]
fn nic_workload_takes_the_files_model_and_line_rate() {
    let dir = std::env::temp_dir().join(format!("pcielab-nic-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let topo = |name: &str, keys: &str| {
        let p = dir.join(name);
        std::fs::write(
            &p,
            format!(
                "[[node]]\nname = \"rc\"\nkind = \"root-complex\"\n\
                 [[node]]\nname = \"nic\"\nkind = \"nic\"\n{keys}\n\
                 [[link]]\nup = \"rc.0\"\ndown = \"nic\"\ngen = 3\nwidth = 8\n"
            ),
        )
        .unwrap();
        p.to_str().unwrap().to_string()
    };
    let run = |file: &str, extra: &[&str]| {
        let mut a = vec![
            "sim",
            file,
            "--workload",
            "nic",
            "--sizes",
            "64",
            "--packets",
            "160",
        ];
        a.extend(extra);
        pcielab(&a)
    };
    // The title line of the table names the variant and the line rate.
    let batched = topo("batched.toml", "model = \"batched\"\neth_gbps = 100");
    let (rc, out, err) = run(&batched, &[]);
    assert_eq!(rc, 0, "{err}");
    assert!(out.starts_with("# batched NIC, Linux driver"), "{out}");
    assert!(out.contains("eth_* at 100 GbE"), "{out}");
    // 64-byte frames at 100 GbE: 60 bytes of packet data (no FCS) in every 84 bytes on
    // the wire (preamble 8, gap 12).
    let row = out.lines().nth(2).unwrap();
    let eth: f64 = row.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!((eth - 100.0 * 60.0 / 84.0).abs() < 1e-3, "{eth}");
    let (rc, out, err) = run(&batched, &["--dpdk"]);
    assert_eq!(rc, 0, "{err}");
    assert!(out.starts_with("# batched NIC, DPDK polling"), "{out}");
    let (rc, out, err) = run(&batched, &["--nic", "simple", "--eth", "40"]);
    assert_eq!(rc, 0, "{err}");
    assert!(
        out.starts_with("# simple NIC") && out.contains("eth_* at 40 GbE"),
        "{out}"
    );
    // A simple NIC in the file and --dpdk: the error says where it comes from.
    let simple = topo("simple.toml", "model = \"simple\"");
    let (rc, _, err) = run(&simple, &["--dpdk"]);
    assert_eq!(rc, 2);
    assert!(
        err.contains("is the simple NIC (model = \"simple\", line 7)"),
        "{err}"
    );
    // A line rate the model does not know, from the file: named with its line.
    let odd = topo("odd.toml", "eth_gbps = 7");
    let (rc, _, err) = run(&odd, &[]);
    assert_eq!(rc, 2);
    assert!(
        err.contains("odd.toml:7: eth_gbps = 7 of node \"nic\""),
        "{err}"
    );
    assert_eq!(run(&odd, &["--eth", "40"]).0, 0);
    // rx and frame: set by each run, so the file's are not used, and stderr says so.
    let rx = topo("rx.toml", "rx = \"saturate\"\nframe = \"1518\"");
    let (rc, _, err) = run(&rx, &[]);
    assert_eq!(rc, 0, "{err}");
    assert!(
        err.contains("rx (line 7) and frame (line 8) of node \"nic\" not used"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
