//! `pcielab host` and the host model's flags of `pcielab sim`, through the built binary.

mod common;
use common::pcielab;

fn dma64(extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "sim",
        "--gen",
        "3",
        "--lanes",
        "8",
        "--workload",
        "dma",
        "--op",
        "read",
        "--size",
        "64",
        "--window",
        "1",
        "--count",
        "5000",
        "--region",
        "8K",
        "--json",
    ];
    args.extend_from_slice(extra);
    let (rc, out, err) = pcielab(&args);
    assert_eq!(rc, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v[0].clone()
}

#[test]
fn host_profile_gives_pcie_bench_latency_and_flags_override_it() {
    // pcie-bench (seed 001 §6.2): min 520 ns, median 547 ns on a Xeon E5, warm caches.
    let r = dma64(&["--host", "xeon-e5-haswell"]);
    let (min, med) = (
        r["min_latency_ns"].as_f64().unwrap(),
        r["median_latency_ns"].as_f64().unwrap(),
    );
    assert!(
        (min - 520.0).abs() < 26.0 && (med - 547.0).abs() < 27.0,
        "{r}"
    );
    // The spec profile (the default) has no tail and no host time.
    let s = dma64(&[]);
    assert!(s["min_latency_ns"].as_f64().unwrap() < 200.0, "{s}");
    assert_eq!(s["min_latency_ns"], s["median_latency_ns"]);
    // A flag overrides the profile: a cold cache pays mem_ns instead of llc_hit_ns.
    let c = dma64(&["--host", "xeon-e5-haswell", "--cache", "thrash"]);
    let d = c["min_latency_ns"].as_f64().unwrap() - min;
    assert!((d - 50.0).abs() < 0.01, "thrash adds the 50 ns miss: {d}");
    // --rc-ns moves a DMA read once.
    let f = dma64(&["--rc-ns", "150"]);
    let d = f["min_latency_ns"].as_f64().unwrap() - s["min_latency_ns"].as_f64().unwrap();
    assert!((d - 50.0).abs() < 0.01, "{d}");
}

#[test]
fn topology_host_table_is_used_and_bad_values_are_named() {
    let dir = std::env::temp_dir().join(format!("pcielab-host-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("h.toml");
    std::fs::write(
        &f,
        "[host]\nprofile = \"gem5-table2\"\nrc_ns = 50\n\
         [[node]]\nname=\"rc\"\nkind=\"root-complex\"\n[[node]]\nname=\"nic\"\nkind=\"psmem\"\n\
         [[link]]\nup=\"rc.0\"\ndown=\"nic\"\ngen=2\nwidth=1\n",
    )
    .unwrap();
    let fs = f.to_str().unwrap();
    let (rc, out, err) = pcielab(&[
        "sim",
        fs,
        "--workload",
        "mmio-lat",
        "--count",
        "5",
        "--json",
    ]);
    assert_eq!(rc, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let lat = v[0]["min_latency_ns"].as_f64().unwrap();
    // gem5 Table II at RC latency 50 ns: 318 ns (within 10 %).
    assert!((lat - 318.0).abs() < 31.8, "{lat}");
    // --host replaces the file's profile: spec has no CPU time.
    let (rc, out, err) = pcielab(&[
        "sim",
        fs,
        "--workload",
        "mmio-lat",
        "--count",
        "5",
        "--json",
        "--host",
        "spec",
    ]);
    assert_eq!(rc, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v[0]["min_latency_ns"].as_f64().unwrap() < lat - 100.0,
        "{out}"
    );

    for (args, want) in [
        (
            vec!["--host", "pentium"],
            "--host: unknown host profile \"pentium\"; built in: spec",
        ),
        (
            vec!["--mem-tail", "quantiles:0=1"],
            "--mem-tail: mem_tail: quantiles need at least two points",
        ),
        (
            vec!["--cache", "tepid"],
            "--cache: cache: \"tepid\": expected warm, cold or thrash",
        ),
        (
            vec!["--port-buffer", "x"],
            "--port-buffer: port_buffer = \"x\": expected HDR/DATA",
        ),
    ] {
        let mut a = vec!["sim", "--workload", "mmio-lat", "--count", "1"];
        a.extend(args);
        let (rc, _, err) = pcielab(&a);
        assert_eq!(rc, 2, "{a:?}");
        assert!(err.contains(want), "{a:?}: {err}");
    }
    std::fs::write(
        &f,
        "[host]\nmem_ns = \"slow\"\n[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n",
    )
    .unwrap();
    let (rc, _, err) = pcielab(&["sim", fs]);
    assert_eq!(rc, 2);
    assert!(err.contains("h.toml:2: key \"mem_ns\""), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn host_list_show_and_knobs() {
    let (rc, out, err) = pcielab(&["host", "list", "--format", "csv"]);
    assert_eq!(rc, 0, "{err}");
    assert!(out.starts_with("name,knobs,description\n"), "{out}");
    for p in [
        "spec",
        "xeon-e5-haswell",
        "xeon-e3-haswell",
        "gem5-table2",
        "x9drd-e5-2650v2-kvm",
    ] {
        assert!(
            out.lines().any(|l| l.starts_with(&format!("{p},"))),
            "{p}: {out}"
        );
    }
    let (rc, out, _) = pcielab(&["host", "show", "xeon-e5-haswell", "--format", "json"]);
    assert_eq!(rc, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let tail = v
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["knob"] == "mem_tail")
        .unwrap();
    assert!(
        tail["source"].as_str().unwrap().contains("seed 001"),
        "{tail}"
    );
    let (rc, _, err) = pcielab(&["host", "show", "nope"]);
    assert_eq!(rc, 2);
    assert!(err.contains("unknown host profile"), "{err}");
    let (rc, out, _) = pcielab(&["host", "knobs"]);
    assert_eq!(rc, 0);
    assert_eq!(out.lines().count(), 22, "{out}");
    assert!(out.contains("--mmio-read-ns"), "{out}");
    assert!(
        out.contains("--nested-walk-ns") && out.contains("--vm-irq-ns"),
        "{out}"
    );
}

#[test]
fn model_nettlp_gives_the_encapsulation_bound() {
    // NetTLP (seed 000): 10 GbE, 256-byte writes: 7.53 Gb/s.
    let (rc, out, err) = pcielab(&["model", "nettlp", "--sizes", "256", "--format", "csv"]);
    assert_eq!(rc, 0, "{err}");
    assert_eq!(
        out,
        "size_B,eth_gbps,mwr32_gbps,mwr64_gbps,cpld_gbps\n256,10.0,7.529,7.442,7.529\n"
    );
    let (rc, _, err) = pcielab(&["model", "nettlp", "--sizes", "8192"]);
    assert_eq!(rc, 2);
    assert!(err.contains("more than a TLP carries"), "{err}");
}

#[test]
fn vm_cost_flags_reach_the_host_model() {
    // Out of range: the host model refuses it, naming the flag.
    for flag in ["--nested-walk-ns", "--vm-irq-ns"] {
        let (rc, _, err) = pcielab(&["sim", "--gen", "3", "--lanes", "8", flag, "2e9"]);
        assert_eq!(rc, 2, "{flag}: {err}");
        assert!(err.contains(flag) && err.contains("0..=1e9"), "{err}");
    }
    // In range: the run goes on (no function is assigned to a VM here, so nothing
    // changes).
    let r = dma64(&["--nested-walk-ns", "900", "--vm-irq-ns", "3000"]);
    assert_eq!(r["dmas"], 5000, "{r}");
}
