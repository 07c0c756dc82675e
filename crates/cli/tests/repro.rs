//! `pcielab repro` end to end, through the built binary.

mod common;
use common::pcielab;

/// Splits one CSV line (fields may be quoted, with "" for a quote).
fn csv_fields(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out
}

#[test]
fn list_names_every_contract_id_without_running() {
    let (rc, out, err) = pcielab(&["repro", "--list"]);
    assert_eq!(rc, 0, "{err}");
    for id in [
        "nettlp-p2p-split",
        "pciebench-lat64-min",
        "pciebench-lat64-median",
        "gem5-table2-rc50",
        "gem5-table2-rc150",
    ] {
        assert!(out.lines().any(|l| l.starts_with(id)), "{id}: {out}");
    }
    assert!(out.contains("seed 002 Table II"));
    let (rc, out, _) = pcielab(&["repro", "--list", "--format", "csv"]);
    assert_eq!(rc, 0);
    assert_eq!(
        out.lines().next(),
        Some("id,seed,quantity,unit,published,citation")
    );
    let gem5 = out
        .lines()
        .find(|l| l.starts_with("gem5-table2-rc100,"))
        .unwrap();
    assert_eq!(csv_fields(gem5)[4], "398");
}

#[test]
fn all_as_csv_has_the_contract_columns() {
    let (rc, out, err) = pcielab(&["repro", "all", "--format", "csv", "--reads", "2000"]);
    assert_eq!(rc, 0, "{err}");
    let mut lines = out.lines();
    assert_eq!(
        lines.next(),
        Some("id,seed,quantity,unit,published,measured,inputs,citation,status,note")
    );
    let rows: Vec<Vec<String>> = lines.map(csv_fields).collect();
    let (_, list, _) = pcielab(&["repro", "--list", "--format", "csv"]);
    assert_eq!(rows.len(), list.lines().count() - 1);
    for r in &rows {
        assert_eq!(r.len(), 10, "{r:?}");
        assert!(!r[5].is_empty() && !r[6].is_empty(), "{r:?}");
        assert!(
            ["match", "shape", "deviates", "plot-only", "not-modelled"].contains(&r[8].as_str()),
            "{r:?}"
        );
    }
    let lat = rows.iter().find(|r| r[0] == "pciebench-lat64-min").unwrap();
    assert_eq!(lat[4], "520");
    assert!(lat[6].contains("host=xeon-e5-haswell") && lat[6].contains("reads=2000"));
}

#[test]
fn ids_json_and_overrides() {
    let (rc, out, err) = pcielab(&[
        "repro",
        "gem5-table2-rc50",
        "gem5-table2-rc150",
        "--format",
        "json",
        "--set",
        "mmio_read_ns=0",
    ]);
    assert_eq!(rc, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    // Without the CPU-side cost, only the fabric: 2 ns per ns of RC latency.
    let m = |i: usize| {
        rows[i]["measured"]
            .as_str()
            .unwrap()
            .parse::<f64>()
            .unwrap()
    };
    assert!((m(1) - m(0) - 200.0).abs() < 1e-6, "{out}");
    assert_eq!(rows[0]["status"], "deviates");
    let inputs = rows[0]["inputs"].as_array().unwrap();
    assert!(inputs
        .iter()
        .any(|i| i["name"] == "mmio_read_ns" && i["source"] == "override"));
}

#[test]
fn unknown_ids_and_bad_sets_are_refused() {
    let (rc, out, err) = pcielab(&["repro", "gem5-table2-rc60"]);
    assert_eq!(rc, 2);
    assert!(out.is_empty());
    assert!(
        err.starts_with("pcielab: unknown repro ID gem5-table2-rc60; valid IDs: all, ")
            && err.contains("pciebench-lat64-min")
            && err.lines().count() == 1,
        "{err}"
    );
    let (rc, _, err) = pcielab(&["repro", "gem5-table2-rc50", "--set", "mmio_read_ns"]);
    assert_eq!(rc, 2);
    assert!(err.contains("expected KNOB=VALUE"), "{err}");
    let (rc, _, err) = pcielab(&["repro", "nettlp-encap-bound", "--set", "warp=9"]);
    assert_eq!(rc, 2);
    assert!(err.contains("unknown host knob \"warp\""), "{err}");
    let (rc, _, _) = pcielab(&["repro"]);
    assert_eq!(rc, 2);
}

#[test]
fn plot_writes_the_figures() {
    let dir = std::env::temp_dir().join(format!("pcielab-repro-plot-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (rc, _, err) = pcielab(&[
        "repro",
        "gem5-table2-rc100",
        "pciebench-lat64-min",
        "--reads",
        "500",
        "--plot",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(rc, 0, "{err}");
    for name in ["gem5-table2", "pciebench-fig6-e5"] {
        let png = std::fs::read(dir.join(format!("{name}.png"))).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{name}");
        let svg = std::fs::read_to_string(dir.join(format!("{name}.svg"))).unwrap();
        assert!(svg.contains("<svg") && svg.contains("Table II") == (name == "gem5-table2"));
    }
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 4);
    let _ = std::fs::remove_dir_all(&dir);
}
