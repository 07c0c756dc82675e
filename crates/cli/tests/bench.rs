//! `pcielab bench` end to end, through the built binary: pcie-bench's published
//! numbers with the calibrated host, the host knobs' effects, the spec-mode model,
//! job-count independence, NetTLP against a spawned adapter, plots and bad input.

mod common;
use common::pcielab;
use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The contract's columns, in order (docs/design.md, `pcielab bench`).
const CONTRACT: &str = "test,size_B,offset_B,window_B,pattern,cache,iommu,n,min_ns,median_ns,p90_ns,p99_ns,p999_ns,max_ns,gbps";

/// Runs `pcielab bench ARGS --format csv`: the rows as maps, after checking the header
/// and each row's percentile order.
fn bench(args: &[&str]) -> Vec<HashMap<String, String>> {
    let mut a = vec!["bench"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["--format", "csv"]);
    let (rc, out, err) = pcielab(&a);
    assert_eq!(rc, 0, "{args:?}: {err}");
    let mut lines = out.lines();
    let head: Vec<String> = lines.next().unwrap().split(',').map(String::from).collect();
    assert!(head.join(",").starts_with(CONTRACT), "{out}");
    let rows: Vec<HashMap<String, String>> = lines
        .map(|l| {
            head.iter()
                .cloned()
                .zip(l.split(',').map(String::from))
                .collect()
        })
        .collect();
    for r in &rows {
        let v: Vec<f64> = [
            "min_ns",
            "median_ns",
            "p90_ns",
            "p99_ns",
            "p999_ns",
            "max_ns",
        ]
        .iter()
        .map(|k| f(r, k))
        .collect();
        assert!(v.windows(2).all(|w| w[0] <= w[1]), "{r:?}");
        assert!(f(r, "gbps") > 0.0, "{r:?}");
        assert_eq!(r["failed"], "0", "{r:?}");
    }
    rows
}

fn f(r: &HashMap<String, String>, k: &str) -> f64 {
    r[k].parse().unwrap_or_else(|_| panic!("{k} in {r:?}"))
}

fn find<'a>(
    rows: &'a [HashMap<String, String>],
    kv: &[(&str, &str)],
) -> &'a HashMap<String, String> {
    rows.iter()
        .find(|r| kv.iter().all(|(k, v)| r[*k] == *v))
        .unwrap_or_else(|| panic!("no row with {kv:?}"))
}

#[test]
fn lat_rd_64_with_the_e5_host_is_pcie_bench_s_520_547() {
    let rows = bench(&[
        "--host",
        "xeon-e5-haswell",
        "--test",
        "LAT_RD",
        "-n",
        "20000",
    ]);
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!((r["size_B"].as_str(), r["cache"].as_str()), ("64", "warm"));
    assert!((f(r, "min_ns") / 520.0 - 1.0).abs() < 0.05, "{r:?}");
    assert!((f(r, "median_ns") / 547.0 - 1.0).abs() < 0.05, "{r:?}");
}

#[test]
fn a_sweep_of_every_test_gives_one_ordered_row_per_configuration() {
    let rows = bench(&[
        "--host",
        "xeon-e5-haswell",
        "--size",
        "64,1500",
        "--offset",
        "0,3",
        "--pattern",
        "seq,random",
        "--cache",
        "warm,thrash",
        "--window",
        "64K",
        "-n",
        "300",
    ]);
    assert_eq!(rows.len(), 5 * 2 * 2 * 2 * 2);
    let tests: std::collections::BTreeSet<&str> = rows.iter().map(|r| r["test"].as_str()).collect();
    assert_eq!(tests.len(), 5);
    // Ranges expand: 64:256:x2 is 64, 128, 256.
    let rows = bench(&["--test", "LAT_RD", "--size", "64:256:x2,1000", "-n", "10"]);
    let sizes: Vec<&str> = rows.iter().map(|r| r["size_B"].as_str()).collect();
    assert_eq!(sizes, ["64", "128", "256", "1000"]);
}

#[test]
fn cold_and_thrash_are_slower_than_warm_with_the_e5_host() {
    let rows = bench(&[
        "--host",
        "xeon-e5-haswell",
        "--test",
        "LAT_RD",
        "--cache",
        "warm,cold,thrash",
        "--window",
        "1M",
        "-n",
        "2000",
    ]);
    let warm = f(find(&rows, &[("cache", "warm")]), "median_ns");
    for c in ["cold", "thrash"] {
        let m = f(find(&rows, &[("cache", c)]), "median_ns");
        // The profile's mem_ns − llc_hit_ns: 456 − 406 ns.
        assert!(
            (40.0..60.0).contains(&(m - warm)),
            "{c}: {m} vs warm {warm}"
        );
    }
}

#[test]
fn the_iommu_with_a_small_iotlb_slows_random_reads_over_a_big_window() {
    let rows = bench(&[
        "--host",
        "xeon-e5-haswell",
        "--test",
        "LAT_RD",
        "--iommu",
        "off,on",
        "--iotlb-entries",
        "4",
        "--page-walk-ns",
        "300",
        "--pattern",
        "random",
        "--window",
        "64M",
        "-n",
        "2000",
    ]);
    let off = f(find(&rows, &[("iommu", "off")]), "median_ns");
    let on = f(find(&rows, &[("iommu", "on")]), "median_ns");
    assert!((250.0..360.0).contains(&(on - off)), "{off} -> {on}");
}

#[test]
fn numa_remote_is_slower_by_about_numa_ns() {
    for (extra, numa_ns) in [(None, 60.0), (Some("150"), 150.0)] {
        let mut args = vec![
            "--host",
            "xeon-e5-haswell",
            "--test",
            "LAT_RD",
            "--numa",
            "local,remote",
            "-n",
            "2000",
        ];
        if let Some(x) = extra {
            args.extend_from_slice(&["--numa-ns", x]);
        }
        let rows = bench(&args);
        let l = f(find(&rows, &[("numa", "local")]), "median_ns");
        let r = f(find(&rows, &[("numa", "remote")]), "median_ns");
        assert!(
            ((r - l) / numa_ns - 1.0).abs() < 0.1,
            "{l} -> {r} for {numa_ns}"
        );
    }
}

/// `pcielab model bw --dllp spec` at the same sizes: the link saturated.
#[test]
fn bandwidth_at_large_sizes_is_the_spec_mode_model_s() {
    let (rc, out, err) = pcielab(&[
        "model",
        "bw",
        "--sizes",
        "1024:2048:1024",
        "--dllp",
        "spec",
        "--format",
        "csv",
    ]);
    assert_eq!(rc, 0, "{err}");
    let model: HashMap<(String, String), f64> = out
        .lines()
        .skip(1)
        .flat_map(|l| {
            let c: Vec<&str> = l.split(',').collect();
            [
                (
                    (c[0].to_string(), "BW_RD".to_string()),
                    c[1].parse().unwrap(),
                ),
                (
                    (c[0].to_string(), "BW_WR".to_string()),
                    c[2].parse().unwrap(),
                ),
                // BW_RDWR counts both directions; the model gives each one's rate.
                (
                    (c[0].to_string(), "BW_RDWR".to_string()),
                    2.0 * c[3].parse::<f64>().unwrap(),
                ),
            ]
        })
        .collect();
    let rows = bench(&[
        "--host",
        "spec",
        "--test",
        "BW_RD,BW_WR,BW_RDWR",
        "--size",
        "1024,2048",
        "--window",
        "64K",
        "-n",
        "5000",
    ]);
    assert_eq!(rows.len(), 6);
    for r in &rows {
        let m = model[&(r["size_B"].clone(), r["test"].clone())];
        assert!((f(r, "gbps") / m - 1.0).abs() < 0.01, "{r:?} vs model {m}");
    }
}

#[test]
fn rows_are_the_same_with_one_job_and_with_two() {
    let args = |jobs: &'static str| {
        vec![
            "bench",
            "--host",
            "xeon-e5-haswell",
            "--size",
            "64,512",
            "--pattern",
            "seq,random",
            "--cache",
            "warm,cold",
            "--window",
            "8K,4M",
            "-n",
            "300",
            "--format",
            "csv",
            "--jobs",
            jobs,
        ]
    };
    let (rc1, one, e1) = pcielab(&args("1"));
    let (rc2, two, e2) = pcielab(&args("2"));
    assert_eq!((rc1, rc2), (0, 0), "{e1}{e2}");
    assert_eq!(one.lines().count(), 1 + 5 * 2 * 2 * 2 * 2);
    assert_eq!(one, two);
}

#[test]
fn all_spans_the_grid_and_lists_override_its_dimensions() {
    // The grid with one test and one window: 6 sizes × 2 offsets × 2 patterns × 3
    // cache states.
    let rows = bench(&["--all", "--test", "LAT_RD", "--window", "4K", "-n", "5"]);
    assert_eq!(rows.len(), 6 * 2 * 2 * 3);
    let offsets: std::collections::BTreeSet<&str> =
        rows.iter().map(|r| r["offset_B"].as_str()).collect();
    assert_eq!(offsets.into_iter().collect::<Vec<_>>(), ["0", "1"]);
}

#[test]
fn plots_are_written_for_latency_tests() {
    let dir = std::env::temp_dir().join(format!("pcielab-bench-plot-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.display().to_string();
    bench(&["--test", "LAT_RD,BW_RD", "-n", "500", "--plot", &d]);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let base = "LAT_RD-64B-off0-win8192-seq-cold-iommu_off-local";
    assert_eq!(
        names,
        [format!("{base}-cdf.svg"), format!("{base}-hist.svg")]
    );
    let svg = std::fs::read_to_string(dir.join(&names[0])).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("Latency (ns)"),
        "{}",
        &svg[..200.min(svg.len())]
    );
    bench(&[
        "--test",
        "LAT_WRRD",
        "-n",
        "50",
        "--plot",
        &d,
        "--plot-format",
        "png",
    ]);
    let png = std::fs::read(dir.join(base.replace("LAT_RD", "LAT_WRRD") + "-hist.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_is_refused_with_the_reason() {
    for (args, want) in [
        (vec!["--test", "LAT_RW"], "unknown test \"LAT_RW\""),
        (vec!["--size", "0"], "0 is outside 1..="),
        (vec!["--offset", "4096"], "4096 is outside 0..=4095"),
        (
            vec!["--size", "2048", "--window", "1K"],
            "smaller than the transfer",
        ),
        (vec!["--pattern", "zigzag"], "unknown pattern"),
        (vec!["--cache", "warm,tepid"], "--cache"),
        (vec!["--iommu", "maybe"], "expected on or off"),
        (vec!["-n", "0"], "-n 0"),
        (vec!["--jobs", "0"], "--jobs 0"),
        (vec!["--device", "nic7"], "not an endpoint"),
        (
            vec!["--nettlp", "127.0.0.1", "--cache", "cold"],
            "real host",
        ),
    ] {
        let mut a = vec!["bench"];
        a.extend_from_slice(&args);
        let (rc, out, err) = pcielab(&a);
        assert_eq!(rc, 2, "{args:?}: {out}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Over NetTLP against a spawned `pcielab adapter` on a random loopback address
/// (bounded: the adapter exits after 60 s).
#[test]
fn nettlp_against_a_spawned_adapter() {
    let net = pcielab_nettlp::loopback::random_net();
    let at = |h| pcielab_nettlp::loopback::in_net(net, h).to_string();
    let (a, d) = (at(1), at(2));
    let ctl = format!("{a}:12286");
    let _adapter = Kill(
        Command::new(env!("CARGO_BIN_EXE_pcielab"))
            .args(["adapter", "--listen", &a, "--device", &d, "--control", &ctl])
            .args(["--ack-writes", "--duration", "60"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn adapter"),
    );
    let end = Instant::now() + Duration::from_secs(15);
    while pcielab(&["adapter", "stats", "--control", &ctl]).0 != 0 {
        assert!(Instant::now() < end, "the adapter did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
    let t = Instant::now();
    let rows = bench(&[
        "--nettlp",
        &a,
        "--local",
        &d,
        "--acked",
        "--size",
        "64,1000",
        "--offset",
        "4",
        "--window",
        "1M",
        "--pattern",
        "seq,random",
        "-n",
        "100",
    ]);
    assert!(t.elapsed() < Duration::from_secs(60));
    assert_eq!(rows.len(), 5 * 2 * 2);
    for r in &rows {
        assert_eq!(r["n"], "100", "{r:?}");
        assert_eq!((r["cache"].as_str(), r["iommu"].as_str()), ("host", "host"));
        // Loopback UDP: above 100 ns, below 100 ms.
        assert!(f(r, "min_ns") > 100.0 && f(r, "median_ns") < 1e8, "{r:?}");
    }
}

/// Any topology and endpoint: behind the default scenario's switch a read crosses it
/// twice (150 ns each way), and the Gen4 x16 endpoint reads faster than Gen3 x8 allows.
#[test]
fn a_topology_file_and_its_endpoints() {
    let topo = common::example("sim-default.toml");
    let one = |dev: &str| {
        bench(&[
            &topo,
            "--device",
            dev,
            "--test",
            "LAT_RD,BW_RD",
            "--size",
            "2048",
            "-n",
            "2000",
        ])
    };
    let link = bench(&["--test", "LAT_RD,BW_RD", "--size", "2048", "-n", "2000"]);
    let (sw, x16) = (one("mem0"), one("mem3"));
    let lat = |rows: &[HashMap<String, String>]| f(find(rows, &[("test", "LAT_RD")]), "min_ns");
    let bw = |rows: &[HashMap<String, String>]| f(find(rows, &[("test", "BW_RD")]), "gbps");
    assert!(lat(&sw) - lat(&link) >= 300.0, "{sw:?} {link:?}");
    // Gen3 x8 (spec-mode model: 57.874 Gb/s at 2 KiB) against Gen4 x16.
    assert!(
        bw(&link) < 58.0 && bw(&x16) > 2.0 * 58.0,
        "{link:?} {x16:?}"
    );
}
