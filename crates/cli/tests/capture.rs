//! Captures end to end: a pcapng holding every TLP and DLLP kind of `pcielab demo` plus a
//! request/completion scenario is written with pcielab-capture, then read back by
//! `pcielab dump` and by the real tshark with our dissector (`dissector/pcielab.lua`).
//!
//! The tshark tests need `tshark` on PATH (Debian package `tshark`); set
//! `PCIELAB_SKIP_TSHARK=1` to skip them where it cannot be installed.

mod common;
use common::{example, pcielab};

use pcielab_capture::{CaptureWriter, Format};
use pcielab_wire::json::tlp_from_json;
use pcielab_wire::tlp::{TlpKind, TlpPacket, TlpRepr};
use pcielab_wire::{Bdf, CplStatus, Tag};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One written record.
#[derive(Debug, Clone)]
struct Written {
    iface: &'static str,
    time_ps: u64,
    tlp: bool,
    bytes: Vec<u8>,
}

const DOWN: &str = "rc.0->ep0";
const UP: &str = "ep0->rc.0";

/// Frame numbers (1-based) of the scenario after the demo packets, relative to its start.
/// 0: MRd tag 0x20, 128 B at 0x1004 from 01:00.0 (up)
/// 1..=3: its three CplDs (down): 60 B, 64 B, 4 B
/// 4: MRd tag 0x21 (up); 5: its UR Cpl (down)
/// 6: a CplD tag 0x22 that no request asked for (down)
/// 7: MRd tag 0x23 (up) that is never answered
fn scenario() -> Vec<Written> {
    let rid = Bdf::new(1, 0, 0).unwrap();
    let cid = Bdf::new(0, 0, 0).unwrap();
    let t = |n| Tag::new(n).unwrap();
    let w = |iface, tlp: TlpRepr<'_>| Written {
        iface,
        time_ps: 0,
        tlp: true,
        bytes: tlp.to_vec().unwrap(),
    };
    let d60 = [0x11u8; 60];
    let d64 = [0x22u8; 64];
    let d4 = [0x33u8; 4];
    vec![
        w(UP, TlpRepr::mem_read(rid, t(0x20), 0x1004, 32).unwrap()),
        w(
            DOWN,
            TlpRepr::completion(cid, rid, t(0x20), CplStatus::Sc, 128, 0x04, &d60).unwrap(),
        ),
        w(
            DOWN,
            TlpRepr::completion(cid, rid, t(0x20), CplStatus::Sc, 68, 0x40, &d64).unwrap(),
        ),
        w(
            DOWN,
            TlpRepr::completion(cid, rid, t(0x20), CplStatus::Sc, 4, 0x00, &d4).unwrap(),
        ),
        w(UP, TlpRepr::mem_read(rid, t(0x21), 0x2000, 1).unwrap()),
        w(
            DOWN,
            TlpRepr::completion(cid, rid, t(0x21), CplStatus::Ur, 4, 0, &[]).unwrap(),
        ),
        w(
            DOWN,
            TlpRepr::completion(cid, rid, t(0x22), CplStatus::Sc, 4, 0, &d4).unwrap(),
        ),
        w(UP, TlpRepr::mem_read(rid, t(0x23), 0x3000, 1).unwrap()),
    ]
}

/// Every packet of `pcielab demo --json`: TLPs alternate direction by kind (completions
/// go down), DLLPs alternate.
fn demo_packets() -> Vec<Written> {
    let (rc, out, err) = pcielab(&["demo", "--json"]);
    assert_eq!(rc, 0, "{err}");
    let mut v = Vec::new();
    for (i, line) in out.lines().enumerate() {
        let mut o: Value = serde_json::from_str(line).unwrap();
        o.as_object_mut().unwrap().remove("what");
        if let Ok(bytes) = tlp_from_json(&o) {
            let kind = o["kind"].as_str().unwrap();
            let iface = if kind.starts_with("Cpl") { DOWN } else { UP };
            v.push(Written {
                iface,
                time_ps: 0,
                tlp: true,
                bytes,
            });
        } else {
            let d = pcielab_wire::dllp::json::from_json(&o).unwrap();
            v.push(Written {
                iface: if i % 2 == 0 { DOWN } else { UP },
                time_ps: 0,
                tlp: false,
                bytes: d.to_bytes().unwrap().to_vec(),
            });
        }
    }
    v
}

/// Writes the capture; returns what was written (times filled in) and the index where the
/// scenario starts.
fn build(path: &Path, format: Format) -> (Vec<Written>, usize) {
    let mut all = demo_packets();
    let start = all.len();
    all.extend(scenario());
    let mut w = CaptureWriter::create(path, format, "test: rc.0 <-> ep0, x8 Gen3").unwrap();
    let down = w.add_interface(DOWN).unwrap();
    let up = w.add_interface(UP).unwrap();
    // Times: 1 µs + n × 1234.567 ns, so picoseconds matter.
    for (n, p) in all.iter_mut().enumerate() {
        p.time_ps = 1_000_000 + n as u64 * 1_234_567;
        let id = if p.iface == DOWN { down } else { up };
        if p.tlp {
            w.write_tlp(id, p.time_ps, &p.bytes).unwrap();
        } else {
            w.write_dllp(id, p.time_ps, &p.bytes).unwrap();
        }
    }
    w.finish().unwrap();
    (all, start)
}

fn tmp(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
}

fn dump_json(path: &Path) -> Vec<Value> {
    let (rc, out, err) = pcielab(&["dump", "--json", path.to_str().unwrap()]);
    assert_eq!(rc, 0, "{err}");
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn dump_json_gives_back_every_packet_and_time() {
    let path = tmp("every-kind.pcapng");
    let (all, _) = build(&path, Format::Pcapng);
    let got = dump_json(&path);
    assert_eq!(got.len(), all.len());
    for (n, (w, o)) in all.iter().zip(&got).enumerate() {
        assert_eq!(o["frame"], (n + 1) as u64);
        assert_eq!(o["time_ps"], w.time_ps, "frame {}", n + 1);
        assert_eq!(o["interface"], w.iface);
        // The packet's own fields: without the capture's (frame, time, interface, links).
        let mut o = o.clone();
        for k in [
            "frame",
            "time_ps",
            "interface",
            "nettlp_seq",
            "nettlp_tstamp",
            "request_frame",
            "latency_ps",
            "last",
            "unmatched",
            "ecrc_ok",
        ] {
            o.as_object_mut().unwrap().remove(k);
        }
        let o = &o;
        if w.tlp {
            assert_eq!(tlp_from_json(o).unwrap(), w.bytes, "frame {}: {o}", n + 1);
        } else {
            let d = pcielab_wire::dllp::json::from_json(o).unwrap();
            assert_eq!(d.to_bytes().unwrap().to_vec(), w.bytes, "frame {}", n + 1);
        }
    }
    // Every TLP kind and every DLLP type of the codec is in the file.
    let kinds: std::collections::BTreeSet<&str> =
        got.iter().map(|o| o["kind"].as_str().unwrap()).collect();
    for k in pcielab_wire::tlp::TlpKind::ALL {
        assert!(kinds.contains(k.name()), "{k} missing");
    }
    for k in [
        "InitFC1",
        "InitFC2",
        "UpdateFC",
        "Ack",
        "Nak",
        "PM_Enter_L1",
        "PM_Enter_L23",
        "PM_Active_State_Request_L1",
        "PM_Request_Ack",
        "Vendor",
        "NOP",
        "Data_Link_Feature",
    ] {
        assert!(kinds.contains(k), "{k} missing");
    }
}

#[test]
fn dump_links_completions_to_requests() {
    let path = tmp("links.pcapng");
    let (all, s) = build(&path, Format::Pcapng);
    let got = dump_json(&path);
    let f = |i: usize| &got[s + i];
    let frame = |i: usize| (s + i + 1) as u64;
    // Three CplDs of the 128-byte read: the last is the third.
    for (i, last) in [(1, false), (2, false), (3, true)] {
        assert_eq!(f(i)["request_frame"], frame(0), "{}", f(i));
        assert_eq!(f(i)["last"], last);
        assert_eq!(f(i)["latency_ps"], all[s + i].time_ps - all[s].time_ps);
    }
    assert_eq!(f(5)["request_frame"], frame(4));
    assert_eq!(f(5)["last"], true);
    assert_eq!(f(6)["unmatched"], true);
    assert!(f(7).get("request_frame").is_none());
    // The text form names the unanswered request.
    let (rc, out, _) = pcielab(&["dump", path.to_str().unwrap()]);
    assert_eq!(rc, 0);
    assert!(
        out.lines()
            .last()
            .unwrap()
            .ends_with(&format!("#{}", frame(7))),
        "{}",
        out.lines().last().unwrap()
    );
}

#[test]
fn dump_filters_and_stats() {
    let path = tmp("filters.pcapng");
    let (all, s) = build(&path, Format::Pcapng);
    let p = path.to_str().unwrap();
    let (rc, out, err) = pcielab(&["dump", "--json", "--tag", "0x20", "--kind", "CplD", p]);
    assert_eq!(rc, 0, "{err}");
    assert_eq!(out.lines().count(), 3);
    let (_, out, _) = pcielab(&["dump", "--json", "--addr", "0x1000-0x1008", p]);
    let frames: Vec<u64> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["frame"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert!(frames.contains(&((s + 1) as u64)));
    let (_, out, _) = pcielab(&["dump", "--json", "-i", UP, "--kind", "dllp", p]);
    let n_up_dllps = all.iter().filter(|w| !w.tlp && w.iface == UP).count();
    assert_eq!(out.lines().count(), n_up_dllps);
    let (rc, out, err) = pcielab(&["dump", "--stats", "--json", p]);
    assert_eq!(rc, 0, "{err}");
    let st: Value = serde_json::from_str(&out).unwrap();
    // One CplD in the demo set, four in the scenario.
    assert_eq!(st["per_kind"]["CplD"]["packets"], 5);
    let n_dllp_bytes = all.iter().filter(|w| !w.tlp).count() * 6;
    let dllp_bytes: u64 = st["per_kind"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| {
            !pcielab_wire::tlp::TlpKind::ALL
                .iter()
                .any(|t| t.name() == *k)
        })
        .map(|(_, c)| c["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(dllp_bytes as usize, n_dllp_bytes);
    assert!(st["latency"]["count"].as_u64().unwrap() >= 2);
    assert!(st["unmatched_completions"].as_u64().unwrap() >= 1);
    assert!(st["missing_completions"].as_u64().unwrap() >= 1);
}

/// Filters that can match nothing are errors that say why, and `-` reads the capture
/// from standard input with the same result as the file.
#[test]
fn dump_refuses_filters_that_match_nothing_and_reads_stdin() {
    let path = tmp("refuse.pcapng");
    build(&path, Format::Pcapng);
    let p = path.to_str().unwrap();
    for (args, msg) in [
        (
            vec!["dump", "--kind", "Bogus", p],
            "--kind \"Bogus\": no such kind",
        ),
        (vec!["dump", "--kind", "MRd,Nope", p], "--kind \"Nope\""),
        (vec!["dump", "-i", "bogus", p], "-i \"bogus\""),
        (vec!["dump", "--addr", "0x2000-0x1000", p], "empty range"),
    ] {
        let (rc, _, err) = pcielab(&args);
        assert_eq!(rc, 2, "{args:?}");
        assert!(
            err.starts_with("pcielab: ") && err.contains(msg),
            "{args:?}: {err}"
        );
    }
    // The interface error names the interfaces there are.
    let (_, _, err) = pcielab(&["dump", "-i", "bogus", p]);
    assert!(err.contains(UP), "{err}");
    // Case-insensitive kinds and families still work.
    let (rc, _, err) = pcielab(&["dump", "--kind", "updatefc,cpld", p]);
    assert_eq!(rc, 0, "{err}");
    // Standard input.
    let (rc, want, err) = pcielab(&["dump", "--json", p]);
    assert_eq!(rc, 0, "{err}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pcielab"))
        .args(["dump", "--json", "-"])
        .stdin(std::fs::File::open(&path).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), want);
    assert!(!want.is_empty());
}

#[test]
fn truncated_file_is_a_clear_error_with_offset() {
    let path = tmp("trunc.pcapng");
    build(&path, Format::Pcapng);
    let data = std::fs::read(&path).unwrap();
    let cut = tmp("cut.pcapng");
    std::fs::write(&cut, &data[..data.len() - 10]).unwrap();
    let (rc, out, err) = pcielab(&["dump", cut.to_str().unwrap()]);
    assert_eq!(rc, 2);
    assert!(!out.is_empty());
    assert!(err.starts_with("pcielab: "), "{err}");
    assert!(err.contains("at byte "), "{err}");
    assert!(err.contains("truncated"), "{err}");
}

// ---------------------------------------------------------------------------------------
// tshark with dissector/pcielab.lua

/// Whether tshark tests run: tshark must be installed unless PCIELAB_SKIP_TSHARK=1.
fn tshark_wanted() -> bool {
    if std::env::var_os("PCIELAB_SKIP_TSHARK").is_some_and(|v| v == "1") {
        eprintln!("PCIELAB_SKIP_TSHARK=1: tshark checks skipped");
        return false;
    }
    true
}

fn dissector() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../dissector/pcielab.lua")
}

fn tshark(args: &[&str]) -> (String, String) {
    let lua = format!("lua_script:{}", dissector().display());
    let out = Command::new("tshark")
        .args(["-n", "-X", &lua])
        .args(args)
        .output()
        .expect("tshark is needed (apt-get install tshark), or set PCIELAB_SKIP_TSHARK=1");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "tshark failed: {stderr}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

/// Collects every `pcielab.*` key of a tshark JSON tree with its values.
fn collect(v: &Value, out: &mut std::collections::BTreeMap<String, Vec<String>>) {
    if let Value::Object(m) = v {
        for (k, x) in m {
            match x {
                Value::String(s) if k.starts_with("pcielab.") => {
                    out.entry(k.clone()).or_default().push(s.clone())
                }
                Value::Array(a) => {
                    for y in a {
                        match y {
                            Value::String(s) if k.starts_with("pcielab.") => {
                                out.entry(k.clone()).or_default().push(s.clone())
                            }
                            other => collect(other, out),
                        }
                    }
                }
                Value::Object(_) => collect(x, out),
                _ => {}
            }
        }
    }
}

fn norm(v: &Value) -> String {
    match v {
        Value::Bool(b) => (if *b { "1" } else { "0" }).to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Keys `pcielab dump --json` adds for the capture (not fields of the packet).
const CAPTURE_KEYS: &[&str] = &[
    "frame",
    "time_ps",
    "interface",
    "nettlp_seq",
    "nettlp_tstamp",
    "lcrc_corrupted",
    "request_frame",
    "latency_ps",
    "last",
    "unmatched",
];

/// A capture with every kind, the scenario, and four bad packets at the end:
/// a reserved Fmt/Type, a payload shorter than Length, a bad ECRC and a bad DLLP CRC.
fn build_with_bad(path: &Path) -> (Vec<Written>, usize) {
    let (mut all, s) = build(path, Format::Pcapng);
    let rid = Bdf::new(1, 0, 0).unwrap();
    let mut ecrc = TlpRepr::mem_read(rid, Tag::new(0x30).unwrap(), 0x4000, 1).unwrap();
    ecrc.td = true;
    let mut ecrc = ecrc.to_vec().unwrap();
    let n = ecrc.len();
    ecrc[n - 1] ^= 0x5a;
    let mut ack = pcielab_wire::dllp::DllpRepr::Ack {
        seq: pcielab_wire::SeqNum::new(7).unwrap(),
    }
    .to_bytes()
    .unwrap()
    .to_vec();
    ack[5] ^= 1;
    let bad = [
        (true, vec![0x1f, 0, 0, 1, 0, 0, 0, 0x0f, 0, 0, 0, 0]),
        (
            true,
            vec![0x40, 0, 0, 4, 0, 0, 0, 0xff, 0, 0, 0x10, 0, 1, 2, 3, 4],
        ),
        (true, ecrc),
        (false, ack),
    ];
    let mut w = CaptureWriter::create(path, Format::Pcapng, "with bad packets").unwrap();
    let down = w.add_interface(DOWN).unwrap();
    let up = w.add_interface(UP).unwrap();
    for (tlp, bytes) in bad {
        all.push(Written {
            iface: UP,
            time_ps: 0,
            tlp,
            bytes,
        });
    }
    for (n, p) in all.iter_mut().enumerate() {
        p.time_ps = 1_000_000 + n as u64 * 1_234_567;
        let id = if p.iface == DOWN { down } else { up };
        if p.tlp {
            w.write_tlp(id, p.time_ps, &p.bytes).unwrap();
        } else {
            w.write_dllp(id, p.time_ps, &p.bytes).unwrap();
        }
    }
    w.finish().unwrap();
    (all, s)
}

/// Runs tshark and `pcielab dump --json` on `path` and checks that they agree on every
/// field, link and flag; returns the number of fields compared and tshark's packets.
fn compare_with_tshark(path: &Path, n: usize) -> (usize, Vec<Value>) {
    let p = path.to_str().unwrap();
    let dump = dump_json(path);
    // `-R frame` builds a tree in pass 1 too, so the dissector sees interface names and
    // packet comments while it matches requests and completions.
    let (out, err) = tshark(&[
        "-r",
        p,
        "-2",
        "-R",
        "frame",
        "-T",
        "json",
        "--no-duplicate-keys",
    ]);
    assert!(!err.contains("Lua"), "Lua error: {err}");
    let pkts: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(pkts.len(), n);
    assert_eq!(dump.len(), n);
    let mut checked_fields = 0;
    for (i, (pkt, o)) in pkts.iter().zip(&dump).enumerate() {
        let frame = i + 1;
        let mut m = std::collections::BTreeMap::new();
        collect(&pkt["_source"]["layers"]["pcielab"], &mut m);
        assert!(!m.is_empty(), "frame {frame}: no pcielab layer");
        assert!(!m.contains_key("pcielab.internal"), "frame {frame}: {m:?}");
        let kind = o["kind"].as_str().unwrap();
        let is_tlp = pcielab_wire::tlp::TlpKind::from_name(kind).is_some();
        let ns = if is_tlp {
            "pcielab.tlp."
        } else {
            "pcielab.dllp."
        };
        // dump → tshark
        let mut expected = std::collections::BTreeMap::new();
        if kind == "malformed-tlp" || kind == "malformed-dllp" {
            assert!(m.contains_key("pcielab.malformed"), "frame {frame}: {m:?}");
            continue;
        }
        for (k, v) in o.as_object().unwrap() {
            if CAPTURE_KEYS.contains(&k.as_str()) {
                continue;
            }
            match (k.as_str(), v) {
                ("attr", Value::Object(a)) => {
                    for (ak, av) in a {
                        expected.insert(format!("{ns}attr.{ak}"), vec![norm(av)]);
                    }
                }
                ("prefixes", Value::Array(ps)) => {
                    for pf in ps {
                        for (pk, pv) in pf.as_object().unwrap() {
                            expected
                                .entry(format!("{ns}prefix.{pk}"))
                                .or_insert_with(Vec::new)
                                .push(norm(pv));
                        }
                    }
                }
                ("ecrc", Value::Null) => {}
                _ => {
                    expected.insert(format!("{ns}{k}"), vec![norm(v)]);
                }
            }
        }
        for (k, want) in &expected {
            let mut got = m
                .get(k)
                .unwrap_or_else(|| panic!("frame {frame}: tshark lacks {k} (dump: {o})"))
                .clone();
            if k.ends_with(".payload") {
                got = got.iter().map(|s| s.replace(':', "")).collect();
            }
            assert_eq!(&got, want, "frame {frame}: {k}");
            checked_fields += 1;
        }
        // tshark → dump: nothing tshark shows is missing from dump.
        for k in m.keys().filter(|k| k.starts_with(ns)) {
            let extra_ok = [
                "pcielab.tlp.address_value",
                "pcielab.tlp.prefix",
                "pcielab.dllp.type",
                "pcielab.dllp.crc",
                "pcielab.dllp.crc_ok",
            ];
            if extra_ok.contains(&k.as_str()) && !expected.contains_key(k) {
                continue;
            }
            assert!(
                expected.contains_key(k),
                "frame {frame}: tshark shows {k} that dump lacks ({o})"
            );
        }
        if !is_tlp {
            let crc_ok = m["pcielab.dllp.crc_ok"][0] == "1";
            assert_eq!(crc_ok, !m.contains_key("pcielab.dllp_crc_bad"));
        }
        // Links.
        match o.get("request_frame") {
            Some(r) => {
                assert_eq!(
                    m["pcielab.request_frame"],
                    vec![r.to_string()],
                    "frame {frame}"
                );
                assert_eq!(m["pcielab.last"], vec![norm(&o["last"])], "frame {frame}");
                let secs: f64 = m["pcielab.latency"][0].parse().unwrap();
                let tshark_ns = (secs * 1e9).round() as i64;
                let dump_ns = (o["latency_ps"].as_u64().unwrap() / 1000) as i64;
                assert!(
                    (tshark_ns - dump_ns).abs() <= 1,
                    "frame {frame}: {tshark_ns} vs {dump_ns}"
                );
            }
            None => assert!(!m.contains_key("pcielab.request_frame"), "frame {frame}"),
        }
        assert_eq!(
            o.get("unmatched").is_some(),
            m.contains_key("pcielab.unmatched_completion"),
            "frame {frame}"
        );
        assert_eq!(
            o.get("ecrc_ok") == Some(&Value::Bool(false)),
            m.contains_key("pcielab.ecrc_bad"),
            "frame {frame}"
        );
    }
    check_info_column(path, n);
    (checked_fields, pkts)
}

/// The Info column of tshark is `pcielab dump`'s line after frame and time (notes aside).
fn check_info_column(path: &Path, n: usize) {
    let p = path.to_str().unwrap();
    check_info_lines(
        path,
        n,
        &[
            "-r",
            p,
            "-2",
            "-R",
            "frame",
            "-T",
            "fields",
            "-e",
            "_ws.col.Info",
        ],
    );
}

/// The Info column tshark prints with `args` against `dump`'s lines.
fn check_info_lines(path: &Path, n: usize, args: &[&str]) {
    let p = path.to_str().unwrap();
    let (out, err) = tshark(args);
    assert!(!err.contains("Lua"), "{err}");
    let (_, text, _) = pcielab(&["dump", p]);
    let dump_lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    let info: Vec<&str> = out.lines().collect();
    assert_eq!(info.len(), n);
    assert_eq!(dump_lines.len(), n);
    let cut = |s: &str| {
        let end = [
            " (reply to #",
            " (no request)",
            " (no completion)",
            " (tag in use by #",
            " (DLL replay)",
        ]
        .iter()
        .filter_map(|m| s.find(m))
        .min()
        .unwrap_or(s.len());
        s[..end].to_string()
    };
    for (i, d) in info.iter().zip(&dump_lines) {
        // dump: "frame time interface body"; Info: "interface body", or "body" for
        // plain pcap (no interface names; dump calls the one interface "pcap").
        let body = d.trim_start().splitn(3, ' ').nth(2).unwrap();
        let body = match body.strip_prefix("pcap ") {
            Some(b) if !i.starts_with("pcap ") => b,
            _ => body,
        };
        assert_eq!(cut(i), cut(body), "dump line: {d}");
    }
}

#[test]
fn tshark_shows_every_field_as_dump_json() {
    if !tshark_wanted() {
        return;
    }
    let path = tmp("tshark.pcapng");
    let (all, _) = build_with_bad(&path);
    let p = path.to_str().unwrap();
    let (checked_fields, pkts) = compare_with_tshark(&path, all.len());
    assert!(checked_fields > 800, "{checked_fields}");
    // Requests without completion: the same frames in both.
    let (_, text, _) = pcielab(&["dump", p]);
    let last = text.lines().last().unwrap();
    let dump_missing: Vec<u64> = last
        .split(": ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .map(|s| s.trim_start_matches('#').parse().unwrap())
        .collect();
    let tshark_missing: Vec<u64> = pkts
        .iter()
        .enumerate()
        .filter(|(_, pkt)| {
            let mut m = std::collections::BTreeMap::new();
            collect(&pkt["_source"]["layers"]["pcielab"], &mut m);
            m.contains_key("pcielab.missing_completion")
        })
        .map(|(i, _)| (i + 1) as u64)
        .collect();
    assert_eq!(tshark_missing, dump_missing);
}

#[test]
fn tshark_reads_independent_seed_files_and_old_port_scheme() {
    if !tshark_wanted() {
        return;
    }
    // Seeds written by scripts/pcap_seeds.py (every byte packed there by hand with
    // `struct`, not by pcielab-capture; tests/test_pcap_seeds.py checks they match).
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/pcap");
    for (file, n) in [
        ("mrd_cpld_ack.pcapng", 3),
        ("old_ports_be_us.pcap", 3),
        ("snapped_vlan_old_ports.pcap", 4),
    ] {
        let f = seeds.join(file);
        let f = f.to_str().unwrap();
        let (out, err) = tshark(&["-r", f, "-2", "-T", "fields", "-e", "_ws.col.Info"]);
        assert!(!err.contains("Lua"), "{err}");
        let (rc, text, e) = pcielab(&["dump", "--all", f]);
        assert_eq!(rc, 0, "{e}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), n, "{out}");
        assert_eq!(text.lines().count(), n, "{text}");
        // The CplD answers the MRd before it (frame 2 → 1, or 3 → 2 in the snapped file).
        let (c, r) = if n == 4 { (2, 2) } else { (1, 1) };
        assert!(
            lines[c].contains(&format!("(reply to #{r})")),
            "{}",
            lines[c]
        );
        let dump_line = text.lines().nth(c).unwrap();
        assert!(
            dump_line.contains(&format!("(reply to #{r} after")),
            "{text}"
        );
        check_info_column(Path::new(f), n);
    }
    // Snap length: the cut TLPs decode from their headers; the one cut on the wire (its
    // frame shorter than its UDP length) is malformed.
    let f = seeds.join("snapped_vlan_old_ports.pcap");
    let got = dump_json(&f);
    assert_eq!(got[0]["kind"], "MWr");
    assert_eq!(got[0]["captured_len"], 28);
    assert_eq!(got[0]["length_dw"], 64);
    assert_eq!(got[0]["payload"], "000102030405060708090a0b0c0d0e0f");
    assert_eq!(got[2]["request_frame"], 2);
    assert_eq!(got[3]["kind"], "malformed-tlp");
    let (n_fields, _) = compare_with_tshark(&f, 4);
    assert!(n_fields > 40, "{n_fields}");
}

#[test]
fn demo_pcap_holds_the_demo_set_with_comments() {
    let path = tmp("demo.pcapng");
    let p = path.to_str().unwrap();
    let (rc, _, err) = pcielab(&["demo", "--pcap", p]);
    assert_eq!(rc, 0, "{err}");
    let (_, demo, _) = pcielab(&["demo", "--json"]);
    let dumped = dump_json(&path);
    assert_eq!(dumped.len(), demo.lines().count());
    for (d, line) in dumped.iter().zip(demo.lines()) {
        let o: Value = serde_json::from_str(line).unwrap();
        assert_eq!(d["kind"], o["kind"]);
    }
    // The description of each packet is its pcapng comment.
    let data = std::fs::read(&path).unwrap();
    let needle = b"enumeration: read Vendor/Device ID";
    assert!(data.windows(needle.len()).any(|w| w == needle));
}

/// A tiny deterministic generator (64-bit LCG), so failures reproduce.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

#[test]
fn tshark_and_dump_agree_on_mutated_tlps() {
    if !tshark_wanted() {
        return;
    }
    // Every demo TLP, mutated 40 times: a flipped bit, a cut, extra bytes, a new DW0 byte.
    let base: Vec<Written> = demo_packets().into_iter().filter(|w| w.tlp).collect();
    let mut rng = Lcg(0x5eed);
    let mut items = Vec::new();
    for w in &base {
        for _ in 0..40 {
            let mut b = w.bytes.clone();
            match rng.next() % 4 {
                0 => {
                    let i = (rng.next() as usize) % b.len();
                    b[i] ^= 1 << (rng.next() % 8);
                }
                1 => b.truncate((rng.next() as usize) % b.len()),
                2 => {
                    for _ in 0..1 + rng.next() % 8 {
                        b.push(rng.next() as u8);
                    }
                }
                _ => b[0] = rng.next() as u8,
            }
            items.push(b);
        }
    }
    // Every demo DLLP, mutated 40 times: a flipped bit (CRC), a new type byte, a cut.
    let dllps: Vec<Written> = demo_packets().into_iter().filter(|w| !w.tlp).collect();
    let mut ditems = Vec::new();
    for w in &dllps {
        for _ in 0..40 {
            let mut b = w.bytes.clone();
            match rng.next() % 3 {
                0 => {
                    let i = (rng.next() as usize) % b.len();
                    b[i] ^= 1 << (rng.next() % 8);
                }
                1 => {
                    b[0] = rng.next() as u8;
                    let c = pcielab_wire::dllp::crc(&b[..4]).to_le_bytes();
                    b[4..].copy_from_slice(&c);
                }
                _ => b.truncate((rng.next() as usize) % b.len()),
            }
            ditems.push(b);
        }
    }
    let path = tmp("mutated.pcapng");
    let mut w = CaptureWriter::create(&path, Format::Pcapng, "mutated TLPs").unwrap();
    let i = w.add_interface(UP).unwrap();
    for (n, b) in items.iter().enumerate() {
        w.write_tlp(i, n as u64 * 1000, b).unwrap();
    }
    for (n, b) in ditems.iter().enumerate() {
        w.write_dllp(i, (items.len() + n) as u64 * 1000, b).unwrap();
    }
    w.finish().unwrap();
    let dump = dump_json(&path);
    let malformed = dump.iter().filter(|o| o["kind"] == "malformed-tlp").count();
    // Both kinds of outcome are exercised.
    assert!(
        malformed > 200 && malformed < items.len() - 200,
        "{malformed}"
    );
    let bad_dllp = dump
        .iter()
        .filter(|o| o["kind"] == "malformed-dllp")
        .count();
    let crc_bad = dump.iter().filter(|o| o["crc_ok"] == false).count();
    assert!(bad_dllp > 50 && crc_bad > 50, "{bad_dllp} {crc_bad}");
    let (checked, _) = compare_with_tshark(&path, items.len() + ditems.len());
    assert!(checked > 5000, "{checked}");
}

#[test]
fn multi_link_capture_links_per_link() {
    // A DMA read from ep0 (01:00.0) through switch sw0, seen on both links, and its
    // completion coming back on both: each completion answers the copy of the request on
    // its own link.
    let rid = Bdf::new(1, 0, 0).unwrap();
    let t = Tag::new(5).unwrap();
    let mrd = TlpRepr::mem_read(rid, t, 0x8000, 1)
        .unwrap()
        .to_vec()
        .unwrap();
    let d = [9u8; 4];
    let cpl = TlpRepr::completion(Bdf::from_raw(0), rid, t, CplStatus::Sc, 4, 0, &d)
        .unwrap()
        .to_vec()
        .unwrap();
    let path = tmp("multi-link.pcapng");
    let mut w = CaptureWriter::create(&path, Format::Pcapng, "rc.0 - sw0 - ep0").unwrap();
    let [rc_down, rc_up] = pcielab_capture::writer::link_names("rc.0", "sw0");
    let [sw_down, sw_up] = pcielab_capture::writer::link_names("sw0.1", "ep0");
    let i_rc_down = w.add_interface(&rc_down).unwrap();
    let i_rc_up = w.add_interface(&rc_up).unwrap();
    let i_sw_down = w.add_interface(&sw_down).unwrap();
    let i_sw_up = w.add_interface(&sw_up).unwrap();
    w.write_tlp(i_sw_up, 0, &mrd).unwrap(); // 1: ep0 -> sw0.1
    w.write_tlp(i_rc_up, 100_000, &mrd).unwrap(); // 2: sw0 -> rc.0
    w.write_tlp(i_rc_down, 500_000, &cpl).unwrap(); // 3: rc.0 -> sw0, answers 2
    w.write_tlp(i_sw_down, 600_000, &cpl).unwrap(); // 4: sw0.1 -> ep0, answers 1
    w.finish().unwrap();
    let got = dump_json(&path);
    assert_eq!(got[2]["request_frame"], 2);
    assert_eq!(got[2]["latency_ps"], 400_000);
    assert_eq!(got[3]["request_frame"], 1);
    assert_eq!(got[3]["latency_ps"], 600_000);
    if !tshark_wanted() {
        return;
    }
    let p = path.to_str().unwrap();
    let fields = [
        "-T",
        "fields",
        "-e",
        "pcielab.request_frame",
        "-e",
        "pcielab.latency",
    ];
    let mut args = vec!["-r", p, "-2", "-R", "frame"];
    args.extend(fields);
    let (out, err) = tshark(&args);
    assert!(!err.contains("Lua"), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[2], "2\t0.000000400");
    assert_eq!(lines[3], "1\t0.000000600");
}

// Captures of simulations (`pcielab sim --pcap`)

/// The workload of the simulation captures: a DMA read/write stream with injected LCRC
/// errors (so replays and NAKs are in the capture).
const SIM_RUN: [&str; 13] = [
    "--workload",
    "dma",
    "--op",
    "rw",
    "--size",
    "1000",
    "--count",
    "12",
    "--window",
    "4",
    "--error-rate",
    "0.05",
    "--json",
];

/// `pcielab sim` on the default topology with a DMA read/write stream and injected LCRC
/// errors (so replays and NAKs are in the capture); returns (stdout, capture, trace).
fn sim_capture(name: &str, extra: &[&str]) -> (String, PathBuf, PathBuf) {
    let pcap = tmp(&format!("{name}.pcapng"));
    let trace = tmp(&format!("{name}.txt"));
    let topo = example("sim-default.toml");
    let mut args = vec!["sim", &topo];
    args.extend(SIM_RUN);
    args.extend(extra);
    let p = pcap.to_str().unwrap().to_string();
    let t = trace.to_str().unwrap().to_string();
    args.extend(["--pcap", &p, "--trace", &t]);
    let (rc, out, err) = pcielab(&args);
    assert_eq!(rc, 0, "{err}");
    assert!(err.contains("captured"), "{err}");
    (out, pcap, trace)
}

/// The bytes of a trace line's hex.
fn hex_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// One line of the simulator's text trace: (time_ps, direction, is_tlp, bytes).
fn trace_lines(path: &Path) -> Vec<(u64, String, bool, Vec<u8>)> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let bytes = hex_bytes(f.last().unwrap());
            (
                f[0].parse().unwrap(),
                f[1].to_string(),
                f[2] == "TLP",
                bytes,
            )
        })
        .collect()
}

#[test]
fn sim_capture_round_trips_the_trace_and_changes_no_result() {
    let (with, pcap, trace) = sim_capture("sim-rt", &[]);
    // The same run without capture prints the same results (events included).
    let topo = example("sim-default.toml");
    let mut args = vec!["sim", &topo];
    args.extend(SIM_RUN);
    let (rc, without, err) = pcielab(&args);
    assert_eq!(rc, 0, "{err}");
    assert_eq!(with, without);
    // Every trace record comes back from the pcapng with its time, direction and bytes.
    let want = trace_lines(&trace);
    let data = std::fs::read(&pcap).unwrap();
    let mut r = pcielab_capture::reader::Reader::new(&data).unwrap();
    let mut got = Vec::new();
    while let Some(rec) = r.next_record() {
        let rec = rec.unwrap();
        let (tlp, bytes) = match rec.payload {
            pcielab_capture::reader::Payload::Tlp(b) => (true, b.to_vec()),
            pcielab_capture::reader::Payload::Dllp(b) => (false, b.to_vec()),
            other => panic!("frame {}: {other:?}", rec.frame),
        };
        // Interfaces are declared as the run starts, so names resolve after reading.
        got.push((rec.time_ps as u64, rec.interface, tlp, bytes));
    }
    let names: Vec<String> = r.interfaces().iter().map(|i| i.name.clone()).collect();
    assert_eq!(got.len(), want.len());
    assert!(want.len() > 100, "{}", want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.0, w.0, "record {i}: time");
        assert_eq!(names[g.1], w.1, "record {i}: direction");
        assert_eq!((g.2, &g.3), (w.2, &w.3), "record {i}: bytes");
    }
    // Error injection put replays into the capture, each with a comment.
    let text = std::fs::read_to_string(&trace).unwrap();
    assert!(text.contains(" replay"), "no replay in the trace");
}

#[test]
fn sim_capture_decodes_in_tshark_like_dump_and_links_every_completion() {
    let (_, pcap, trace) = sim_capture("sim-tshark", &["--cut-through"]);
    let n = trace_lines(&trace).len();
    let dump = dump_json(&pcap);
    assert_eq!(dump.len(), n);
    // Every completion answers a request on its own link; every request that was not
    // replayed gets its completion.
    let mut cpls = 0;
    let replays = dump
        .iter()
        .filter(|o| o.get("dll_replay").is_some())
        .count();
    assert!(replays > 0, "no replay in the capture");
    let (_, text, _) = pcielab(&["dump", pcap.to_str().unwrap()]);
    for bad in [
        "(tag in use by",
        "(no request)",
        "(no completion)",
        "without completion",
    ] {
        assert!(!text.contains(bad), "{bad}: {text}");
    }
    assert_eq!(text.matches("(DLL replay)").count(), replays);
    for o in dump.iter().filter(|o| o.get("dll_replay").is_none()) {
        if o["kind"] == "CplD" || o["kind"] == "Cpl" {
            cpls += 1;
            assert!(o.get("request_frame").is_some(), "{o}");
            assert!(o.get("unmatched").is_none(), "{o}");
        }
    }
    assert!(cpls > 20, "{cpls}");
    if !tshark_wanted() {
        return;
    }
    let (checked, _) = compare_with_tshark(&pcap, n);
    assert!(checked > 1000, "{checked}");
}

#[test]
fn enumeration_capture_shows_type0_type1_config_requests_in_dump_and_tshark() {
    // A small tree (root port → switch → one endpoint) keeps the capture short.
    let topo = tmp("enum-topo.toml");
    std::fs::write(
        &topo,
        "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n\
         [[node]]\nname=\"sw\"\nkind=\"switch\"\nports=1\n\
         [[node]]\nname=\"ep\"\nkind=\"psmem\"\n\
         [[link]]\nup=\"rc.0\"\ndown=\"sw\"\ngen=2\nwidth=1\n\
         [[link]]\nup=\"sw.0\"\ndown=\"ep\"\ngen=2\nwidth=1\n",
    )
    .unwrap();
    let pcap = tmp("enum.pcapng");
    let (rc, out, err) = pcielab(&[
        "sim",
        topo.to_str().unwrap(),
        "--workload",
        "enumerate",
        "--json",
        "--pcap",
        pcap.to_str().unwrap(),
    ]);
    assert_eq!(rc, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let total = v.as_array().unwrap().last().unwrap().clone();
    assert_eq!(total["same_as_ecam"], true);
    let dump = dump_json(&pcap);
    let count = |k: &str| dump.iter().filter(|o| o["kind"] == k).count();
    // Requests for the endpoint cross the root port's link as Type 1 and the switch's
    // link as Type 0; those for the switch's upstream port are Type 0 on the first link.
    for k in ["CfgRd0", "CfgRd1", "CfgWr0", "CfgWr1"] {
        assert!(count(k) > 0, "no {k}");
    }
    for o in dump
        .iter()
        .filter(|o| o["kind"] == "CfgRd0" || o["kind"] == "CfgWr0")
    {
        let link = o["interface"].as_str().unwrap_or_default();
        assert!(link == "rc.0->sw" || link == "sw.0->ep", "{o}");
    }
    // Every completion answers a request; the UR ones are the probes of absent devices.
    let urs = dump
        .iter()
        .filter(|o| o["kind"] == "Cpl" && o["status"] == "UR")
        .count();
    assert!(urs > 0, "no Unsupported Request in the capture");
    for o in dump
        .iter()
        .filter(|o| o["kind"] == "CplD" || o["kind"] == "Cpl")
    {
        assert!(o.get("request_frame").is_some(), "{o}");
    }
    if !tshark_wanted() {
        return;
    }
    let (checked, _) = compare_with_tshark(&pcap, dump.len());
    assert!(checked > 1000, "{checked}");
}

/// The sum over every run's links of the per-link counter `field` of `pcielab sim --json`.
fn links_sum(out: &str, field: &str) -> u64 {
    let v: Value = serde_json::from_str(out).unwrap();
    let runs = v.as_array().map_or(vec![&v], |a| a.iter().collect());
    runs.iter()
        .flat_map(|r| r["links"].as_array().unwrap())
        .map(|l| l[field].as_u64().unwrap())
        .sum()
}

/// How many frames of `pcap` real tshark (with our dissector) matches with `filter`.
fn tshark_count(pcap: &Path, filter: &str) -> usize {
    let p = pcap.to_str().unwrap();
    let (lines, err) = tshark(&["-r", p, "-Y", filter, "-T", "fields", "-e", "frame.number"]);
    assert!(!err.contains("Lua"), "{err}");
    lines.lines().count()
}

#[test]
fn poisoned_tlps_of_a_simulation_show_ep_in_dump_and_tshark() {
    let (out, pcap, _) = sim_capture("sim-poison", &["--poison-rate", "0.3"]);
    let counted = links_sum(&out, "poisoned");
    assert!(counted > 0, "{out}");
    // Every first transmission the simulator counted as poisoned has EP in the capture.
    let dump = dump_json(&pcap);
    let ep = |o: &&Value| o["ep"] == true;
    let firsts = dump
        .iter()
        .filter(|o| o.get("dll_replay").is_none())
        .filter(ep)
        .count();
    assert_eq!(firsts as u64, counted);
    let all = dump.iter().filter(ep).count();
    if !tshark_wanted() {
        return;
    }
    assert_eq!(tshark_count(&pcap, "pcielab.tlp.ep == 1"), all);
}

#[test]
fn tlps_a_switch_corrupted_fail_their_ecrc_in_dump_and_tshark() {
    let (out, pcap, _) = sim_capture(
        "sim-ecrc",
        &["--ecrc", "--switch-error-rate", "0.3", "--seed", "7"],
    );
    let counted = links_sum(&out, "internal_errors");
    assert!(counted > 0, "{out}");
    let dump = dump_json(&pcap);
    // ECRC on: every TLP of the capture carries a digest (TD set).
    let tlps: Vec<&Value> = dump.iter().filter(|o| o.get("td").is_some()).collect();
    assert!(tlps.len() > 100, "{}", tlps.len());
    assert!(tlps
        .iter()
        .all(|o| o["td"] == true && o.get("ecrc_ok").is_some()));
    // The first transmissions whose digest fails are exactly the TLPs the switch
    // corrupted (the digest is the original data's).
    let bad = |o: &&&Value| o["ecrc_ok"] == false;
    let firsts = tlps
        .iter()
        .filter(|o| o.get("dll_replay").is_none())
        .filter(bad)
        .count();
    assert_eq!(firsts as u64, counted);
    let all_bad = tlps.iter().filter(bad).count();
    if !tshark_wanted() {
        return;
    }
    assert_eq!(tshark_count(&pcap, "pcielab.tlp.ecrc_ok == 0"), all_bad);
}

#[test]
fn ats_translation_requests_and_translated_tlps_show_in_dump_and_tshark() {
    let (out, pcap, _) = sim_capture("sim-ats", &["--iommu", "--ats", "--iotlb-entries", "8"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let (iommu, ats) = (&v[0]["iommu"], &v[0]["ats"]);
    let requests = ats["translation_requests"].as_u64().unwrap();
    // 12 DMAs of 1000 bytes over fresh pages: at least one request each; the IOMMU
    // answered every one, and no data TLP went through its IOTLB.
    assert!(requests >= 12, "{out}");
    assert_eq!(iommu["translation_requests"], requests);
    assert_eq!(iommu["iotlb_hits"], 0, "{out}");
    assert_eq!(iommu["iotlb_misses"], requests, "{out}");
    assert_eq!(iommu["faults"], 0);
    let dump = dump_json(&pcap);
    let mem = |o: &Value| o["kind"] == "MRd" || o["kind"] == "MWr";
    // The Translation Requests (AT = 01b) on the device's link, first transmissions.
    let trans: Vec<&Value> = dump.iter().filter(|o| mem(o) && o["at"] == 1).collect();
    let from_device = trans
        .iter()
        .filter(|o| o.get("dll_replay").is_none())
        .filter(|o| o["interface"].as_str().unwrap().starts_with("mem0->"))
        .count();
    assert_eq!(from_device as u64, requests);
    // Every other memory request of the device is translated (AT = 10b), at the
    // host buffer (below 64 GiB), not at its I/O virtual address (from 64 GiB).
    let data: Vec<&Value> = dump.iter().filter(|o| mem(o) && o["at"] != 1).collect();
    assert!(data.len() > 24, "{}", data.len());
    for o in &data {
        assert_eq!(o["at"], 2, "{o}");
        let a = u64::from_str_radix(o["address"].as_str().unwrap().trim_start_matches("0x"), 16)
            .unwrap();
        assert!(a < 0x10_0000_0000, "{o}");
    }
    if !tshark_wanted() {
        return;
    }
    assert_eq!(tshark_count(&pcap, "pcielab.tlp.at == 1"), trans.len());
    assert_eq!(tshark_count(&pcap, "pcielab.tlp.at == 2"), data.len());
}

#[test]
fn pasid_capture_shows_the_prefix_in_dump_and_tshark() {
    let (out, pcap, trace) = sim_capture("sim-pasid", &["--iommu", "--pasid", "7"]);
    // The IOMMU translated every request by PASID 7's table.
    assert!(out.contains("\"faults\": 0"), "{out}");
    assert!(out.contains("\"iotlb_misses\": 12"), "{out}");
    let n = trace_lines(&trace).len();
    let dump = dump_json(&pcap);
    assert_eq!(dump.len(), n);
    // Every request from the device carries PASID 7; nothing else carries a prefix.
    let (mut with, mut requests) = (0, 0);
    for o in &dump {
        let pasids: Vec<u64> = o["prefixes"]
            .as_array()
            .map(|a| a.iter().filter_map(|p| p["pasid"].as_u64()).collect())
            .unwrap_or_default();
        let dma = (o["kind"] == "MRd" || o["kind"] == "MWr")
            && o["interface"]
                .as_str()
                .is_some_and(|i| !i.starts_with("rc"))
            && o["address"]
                .as_str()
                .is_some_and(|a| a.starts_with("0x10000"));
        if dma {
            requests += 1;
            assert_eq!(pasids, [7], "{o}");
            with += 1;
        } else {
            assert!(pasids.is_empty(), "{o}");
        }
    }
    assert!(requests > 50 && with == requests, "{requests}");
    let (_, text, _) = pcielab(&["dump", pcap.to_str().unwrap()]);
    assert!(text.contains("[PASID 0x7]"), "{text}");
    if !tshark_wanted() {
        return;
    }
    // tshark with our dissector decodes every field as dump does, the prefix included.
    let (checked, _) = compare_with_tshark(&pcap, n);
    assert!(checked > 1000, "{checked}");
    let (fields, _) = tshark(&[
        "-r",
        pcap.to_str().unwrap(),
        "-T",
        "fields",
        "-e",
        "pcielab.tlp.prefix.pasid",
        "-Y",
        "pcielab.tlp.prefix.pasid",
    ]);
    let v: Vec<&str> = fields.lines().collect();
    assert_eq!(v.len(), with, "tshark sees every PASID prefix");
    assert!(v.iter().all(|l| *l == "7"), "{fields}");
}

#[test]
fn atomic_capture_is_decoded_and_matched_by_dump_and_tshark() {
    let pcap = tmp("sim-atomic.pcapng");
    let trace = tmp("sim-atomic.txt");
    let topo = example("sim-default.toml");
    let (p, t) = (pcap.to_str().unwrap(), trace.to_str().unwrap());
    let (rc, _, err) = pcielab(&[
        "sim",
        &topo,
        "--workload",
        "dma",
        "--op",
        "atomic",
        "--size",
        "8",
        "--count",
        "12",
        "--window",
        "4",
        "--error-rate",
        "0.05",
        "--pcap",
        p,
        "--trace",
        t,
    ]);
    assert_eq!(rc, 0, "{err}");
    let n = trace_lines(&trace).len();
    let dump = dump_json(&pcap);
    assert_eq!(dump.len(), n);
    // Twelve FetchAdds from mem0 cross two links; each link's CplD answers its request.
    let fetch: Vec<&Value> = dump.iter().filter(|o| o["kind"] == "FetchAdd").collect();
    let first_copies = fetch
        .iter()
        .filter(|o| o["interface"] == "mem0->sw0.0")
        .count();
    assert_eq!(first_copies, 12, "{fetch:?}");
    let replies = dump
        .iter()
        .filter(|o| {
            o["kind"] == "CplD" && o["interface"] == "sw0.0->mem0" && !o["request_frame"].is_null()
        })
        .count();
    assert_eq!(replies, 12);
    if !tshark_wanted() {
        return;
    }
    let (checked, _) = compare_with_tshark(&pcap, n);
    assert!(checked > 500, "{checked}");
    let (kinds, _) = tshark(&[
        "-r",
        p,
        "-T",
        "fields",
        "-e",
        "pcielab.tlp.kind",
        "-Y",
        "pcielab.tlp.kind == \"FetchAdd\"",
    ]);
    assert!(kinds.lines().count() >= 24, "{kinds}");
}

#[test]
fn an_injected_malformed_tlp_is_captured_as_sent_and_flagged_by_dump_and_tshark() {
    // mem0 sends a write whose Length (2 DW) exceeds its data (1 DW), then a read.
    let pcap = tmp("sim-inject.pcapng");
    let topo = example("sim-default.toml");
    let p = pcap.to_str().unwrap();
    let bad = "40000002_0300010f_00001000_deadbeef";
    let (rc, _, err) = pcielab(&[
        "sim",
        &topo,
        "--workload",
        "inject",
        "--tlp",
        bad,
        "--tlp",
        "00000001_0300050f_00001000",
        "--pcap",
        p,
    ]);
    assert_eq!(rc, 0, "{err}");
    let (_, text, _) = pcielab(&["dump", p]);
    // As it crossed the device's link, and nowhere else.
    let bad_lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("malformed TLP"))
        .collect();
    assert_eq!(bad_lines.len(), 1, "{text}");
    assert!(
        bad_lines[0].contains("mem0->sw0.0 malformed TLP: truncated"),
        "{text}"
    );
    // The read is answered and matched.
    assert!(text.contains("CplD 00:00.0 -> 03:00.0 tag 5 SC"), "{text}");
    if !tshark_wanted() {
        return;
    }
    let (out, _) = tshark(&[
        "-r",
        p,
        "-Y",
        "pcielab.tlp.error",
        "-T",
        "fields",
        "-e",
        "pcielab.tlp.error",
    ]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "{out}");
    assert!(lines[0].contains("truncated"), "{out}");
}

/// Per interface name: the TLPs and DLLPs of a capture in file order, and every
/// record's time in file order.
type PerLink = std::collections::BTreeMap<String, Vec<(bool, Vec<u8>)>>;
fn read_capture(path: &Path) -> (PerLink, Vec<u64>) {
    let data = std::fs::read(path).unwrap();
    let mut r = pcielab_capture::reader::Reader::new(&data).unwrap();
    let mut recs = Vec::new();
    while let Some(rec) = r.next_record() {
        let rec = rec.unwrap();
        let item = match rec.payload {
            pcielab_capture::reader::Payload::Tlp(b) => (true, b.to_vec()),
            pcielab_capture::reader::Payload::Dllp(b) => (false, b.to_vec()),
            other => panic!("frame {}: {other:?}", rec.frame),
        };
        recs.push((rec.interface, rec.time_ps as u64, item));
    }
    let names: Vec<String> = r.interfaces().iter().map(|i| i.name.clone()).collect();
    let mut per = PerLink::new();
    for (i, _, item) in &recs {
        per.entry(names[*i].clone()).or_default().push(item.clone());
    }
    (per, recs.iter().map(|x| x.1).collect())
}

#[test]
fn burst_mode_captures_read_in_time_order_with_the_exact_models_tlps() {
    // A read/write stream of whole pages on the default scenario's Gen4 x16 endpoint:
    // burst mode sends writes and completions in bursts whose pieces are traced ahead
    // of time. The capture must still read in time order (as tshark sees it: no
    // negative time delta) and carry the exact model's TLPs on every link.
    let run = |burst: &str| {
        let pcap = tmp(&format!("sim-burst{burst}.pcapng"));
        let topo = example("sim-default.toml");
        let p = pcap.to_str().unwrap().to_string();
        let args = [
            "sim",
            &topo,
            "--workload",
            "dma",
            "--device",
            "mem3",
            "--op",
            "rw",
            "--size",
            "4096",
            "--count",
            "300",
            "--burst",
            burst,
            "--json",
            "--pcap",
            &p,
        ];
        let (rc, out, err) = pcielab(&args);
        assert_eq!(rc, 0, "{err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        (v[0]["burst"].as_u64().unwrap(), pcap)
    };
    let (one, exact) = run("1");
    let (grouped, burst) = run("16");
    assert_eq!(one, 1);
    assert!(grouped > 1, "no bursts formed: {grouped}");
    let (ea, _) = read_capture(&exact);
    let (ba, times) = read_capture(&burst);
    if let Some(i) = times.windows(2).position(|w| w[1] < w[0]) {
        panic!(
            "frame {} at {} ps after {} ps",
            i + 2,
            times[i + 1],
            times[i]
        );
    }
    // Reads and writes share the upward direction, where a read request waits for a
    // write burst's end rather than slipping in between its pieces: per link and per
    // TLP type (Fmt/Type byte), the same TLPs in the same order.
    let tlps = |m: &PerLink| -> Vec<(String, u8, Vec<Vec<u8>>)> {
        let mut out = Vec::new();
        for (k, v) in m {
            let mut by_type: std::collections::BTreeMap<u8, Vec<Vec<u8>>> = Default::default();
            for (_, b) in v.iter().filter(|x| x.0) {
                by_type.entry(b[0]).or_default().push(b.clone());
            }
            out.extend(by_type.into_iter().map(|(t, s)| (k.clone(), t, s)));
        }
        out
    };
    let (te, tb) = (tlps(&ea), tlps(&ba));
    assert!(te.iter().map(|x| x.2.len()).sum::<usize>() > 5000);
    assert!(
        te.iter().any(|x| x.0 == "mem3->rc.1" && x.1 == 0x60),
        "no 64-bit MWr"
    );
    assert!(te == tb, "burst mode's TLPs differ from the exact model's");
    if !tshark_wanted() {
        return;
    }
    let p = burst.to_str().unwrap();
    let (deltas, _) = tshark(&["-r", p, "-T", "fields", "-e", "frame.time_delta"]);
    let deltas: Vec<f64> = deltas.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(deltas.len(), times.len());
    assert!(
        deltas.iter().all(|&d| d >= 0.0),
        "tshark sees a frame earlier than the one before"
    );
}

/// Data-link detail in `dump`: each TLP shows its data-link sequence number, a TLP
/// corrupted on the wire is marked, every Nak names the sequence number just before a
/// corrupted TLP on the other direction of its link, and the replay carries the same
/// number again.
#[test]
fn dump_ties_naks_to_the_tlps_they_name() {
    let (_, pcap, _) = sim_capture("naks", &[]);
    let recs = dump_json(&pcap);
    let (rc, text, _) = pcielab(&["dump", pcap.to_str().unwrap()]);
    assert_eq!(rc, 0);
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(lines.len(), recs.len());
    let reverse = |iface: &str| {
        let (a, b) = iface.split_once("->").unwrap();
        format!("{b}->{a}")
    };
    let mut corrupted = Vec::new();
    for (i, r) in recs.iter().enumerate() {
        if r["lcrc_corrupted"] != true {
            continue;
        }
        let seq = r["nettlp_seq"].as_u64().unwrap();
        let tail = format!(" seq {seq} LCRC-BAD");
        assert!(lines[i].contains(&tail), "{}", lines[i]);
        let iface = r["interface"].as_str().unwrap();
        // The replay of the same TLP carries the same sequence number.
        assert!(
            recs[i + 1..].iter().any(|x| x["interface"] == iface
                && x["nettlp_seq"].as_u64() == Some(seq)
                && x["bytes"] == r["bytes"]
                && x["lcrc_corrupted"].is_null()),
            "no good replay of frame {}",
            r["frame"]
        );
        corrupted.push((i, iface.to_string(), seq));
    }
    assert!(!corrupted.is_empty(), "no corrupted TLP in the capture");
    let mut naks = 0;
    for (i, r) in recs.iter().enumerate().filter(|(_, r)| r["kind"] == "Nak") {
        let nak_seq = r["seq"].as_u64().unwrap();
        let back = reverse(r["interface"].as_str().unwrap());
        assert!(
            corrupted
                .iter()
                .any(|(j, f, s)| *j < i && *f == back && (nak_seq + 1) % 4096 == *s),
            "Nak {r} names no corrupted TLP"
        );
        naks += 1;
    }
    assert!(naks > 0);
}

/// A classic pcap of a simulation keeps each packet's direction: every link end has its
/// own address (listed on stderr), so the two directions of a link are apart.
#[test]
fn classic_pcap_keeps_the_link_direction() {
    let pcap = tmp("direction.pcap");
    let topo = example("sim-default.toml");
    let p = pcap.to_str().unwrap();
    let (rc, _, err) = pcielab(&[
        "sim",
        &topo,
        "--workload",
        "dma",
        "--device",
        "mem0",
        "--count",
        "4",
        "--pcap",
        p,
    ]);
    assert_eq!(rc, 0, "{err}");
    let legend: std::collections::HashMap<String, [u8; 4]> = err
        .split("link ends by IPv4 address: ")
        .nth(1)
        .unwrap()
        .trim()
        .split(", ")
        .map(|e| {
            let (ip, name) = e.split_once(' ').unwrap();
            let o: Vec<u8> = ip.split('.').map(|x| x.parse().unwrap()).collect();
            (name.to_string(), [o[0], o[1], o[2], o[3]])
        })
        .collect();
    let data = std::fs::read(&pcap).unwrap();
    let mut r = pcielab_capture::Reader::new(&data).unwrap();
    let (mut up, mut down) = (0, 0);
    while let Some(rec) = r.next_record() {
        let rec = rec.unwrap();
        let f = rec.frame_bytes;
        let (src, dst) = (&f[26..30], &f[30..34]);
        let d = pcielab_capture::decode::decode(&rec);
        if let Some(t) = d.tlp() {
            // mem0's read requests go up from mem0 to the switch port; completions down.
            let pair = |a: &str, b: &str| (src, dst) == (&legend[a][..], &legend[b][..]);
            if t.kind().name() == "MRd" {
                assert!(
                    pair("mem0", "sw0.0") || pair("sw0", "rc.0"),
                    "{src:?} {dst:?}"
                );
                up += pair("mem0", "sw0.0") as u32;
            } else if t.kind().name() == "CplD" && src == legend["sw0.0"] {
                assert_eq!(dst, legend["mem0"]);
                down += 1;
            }
        }
    }
    assert!(up > 0 && down > 0, "{up} {down}");
}

/// `--format table|csv|json` on the commands that print packets, `--json` an alias; a
/// reader that goes away (`| head -1`) ends the command quietly, with no panic.
#[test]
fn one_output_convention_and_closed_pipes() {
    let path = tmp("formats.pcapng");
    let (all, _) = build(&path, Format::Pcapng);
    let p = path.to_str().unwrap();
    let (rc, json, _) = pcielab(&["dump", "--format", "json", p]);
    assert_eq!(rc, 0);
    let (_, alias, _) = pcielab(&["dump", "--json", p]);
    assert_eq!(json, alias);
    let (rc, csv, err) = pcielab(&["dump", "--format", "csv", p]);
    assert_eq!(rc, 0, "{err}");
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), all.len() + 1);
    let cols: Vec<&str> = lines[0].split(',').collect();
    // Each CSV row carries the JSON record's values in its columns.
    for (row, j) in lines[1..].iter().zip(json.lines()) {
        let v: Value = serde_json::from_str(j).unwrap();
        let cells: Vec<&str> = row.split(',').collect();
        assert_eq!(cells.len(), cols.len(), "{row}");
        for (c, cell) in cols.iter().zip(&cells) {
            let want = match &v[*c] {
                Value::Null => String::new(),
                Value::String(s) => s.clone(),
                x => x.to_string(),
            };
            assert_eq!(*cell, want, "column {c} of {row}");
        }
    }
    let (rc, _, err) = pcielab(&["dump", "--json", "--format", "csv", p]);
    assert_eq!(rc, 2, "{err}");
    // tlp/dllp decode and demo.
    let hex = "0400000100000f0f00001000";
    let (_, text, _) = pcielab(&["tlp", "decode", "--hex", hex]);
    let (_, csv, _) = pcielab(&["tlp", "decode", "--hex", hex, "--format", "csv"]);
    assert!(text.starts_with("CfgRd0 00:00.0 tag 15"), "{text}");
    let (head, row) = csv.split_once('\n').unwrap();
    let kind_at = head.split(',').position(|c| c == "kind").unwrap();
    assert_eq!(row.trim_end().split(',').nth(kind_at), Some("CfgRd0"));
    let (_, demo_csv, _) = pcielab(&["demo", "--format", "csv"]);
    let (_, demo_json, _) = pcielab(&["demo", "--format", "json"]);
    assert_eq!(demo_csv.lines().count(), demo_json.lines().count() + 1);
    // A closed pipe.
    let mut child = Command::new(env!("CARGO_BIN_EXE_pcielab"))
        .args(["demo", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
}

/// A plain `tshark -r` builds no tree, and the dissector then makes only the Info column
/// and the matching state (its fast path): the same Info as with a tree, line for line,
/// on a simulation capture with replays, Naks and completions.
#[test]
fn tshark_info_without_a_tree_matches_dump() {
    if !tshark_wanted() {
        return;
    }
    let (_, pcap, _) = sim_capture("fastpath", &[]);
    let n = dump_json(&pcap).len();
    let p = pcap.to_str().unwrap();
    check_info_lines(
        &pcap,
        n,
        &["-r", p, "-o", "gui.column.format:\"Info\",\"%i\""],
    );
}

/// A record of a text trace: (direction, is a TLP, bytes).
type Record = (String, bool, Vec<u8>);

/// The text trace of a capture split into its runs: (label, records of the run).
fn trace_runs(path: &Path) -> Vec<(String, Vec<Record>)> {
    let mut runs: Vec<(String, Vec<Record>)> = Vec::new();
    for l in std::fs::read_to_string(path).unwrap().lines() {
        if let Some(head) = l.strip_prefix("# run ") {
            runs.push((head.to_string(), Vec::new()));
            continue;
        }
        let f: Vec<&str> = l.split(' ').collect();
        let bytes = hex_bytes(f.last().unwrap());
        let run = runs
            .last_mut()
            .expect("a record before the first run header");
        run.1.push((f[1].to_string(), f[2] == "TLP", bytes));
    }
    runs
}

/// Records in a pcap/pcapng file.
fn pcap_records(path: &Path) -> usize {
    let data = std::fs::read(path).unwrap();
    let mut r = pcielab_capture::reader::Reader::new(&data).unwrap();
    let mut n = 0;
    while let Some(rec) = r.next_record() {
        rec.unwrap();
        n += 1;
    }
    n
}

/// The memory requests of a run's records on direction `dir`: (kind, address, bytes,
/// payload).
fn mem_requests(records: &[Record], dir: &str) -> Vec<(TlpKind, u64, usize, Vec<u8>)> {
    records
        .iter()
        .filter(|(d, tlp, _)| *tlp && d == dir)
        .filter_map(|(_, _, b)| {
            let t = TlpPacket::new_checked(b.as_slice()).unwrap();
            let kind = t.kind().unwrap();
            matches!(kind, TlpKind::MRd | TlpKind::MWr).then(|| {
                let bytes = t.length_dw() as usize * 4;
                (kind, t.address(), bytes, t.payload().to_vec())
            })
        })
        .collect()
}

/// Runs `pcielab` with `args`, then with `capture` (the capture flags) added: both
/// succeed and print the same; returns the second run's stderr.
fn captured_alike(args: &[&str], capture: &[&str]) -> String {
    let (rc, without, err) = pcielab(args);
    assert_eq!(rc, 0, "{err}");
    let mut with_capture = args.to_vec();
    with_capture.extend(capture);
    let (rc, with, err) = pcielab(&with_capture);
    assert_eq!(rc, 0, "{err}");
    assert_eq!(with, without, "capturing changed the results");
    err
}

#[test]
fn nic_workload_capture_holds_every_run_and_changes_no_result() {
    let pcap = tmp("nic-workload.pcapng");
    let trace = tmp("nic-workload.txt");
    let base = [
        "sim",
        "--workload",
        "nic",
        "--nic",
        "batched",
        "--sizes",
        "64",
        "--packets",
        "160",
        "--json",
    ];
    let (p, t) = (pcap.to_str().unwrap(), trace.to_str().unwrap());
    let err = captured_alike(&base, &["--pcap", p, "--trace", t]);
    assert!(
        err.contains("captured") && err.contains("of 3 run(s)"),
        "{err}"
    );
    let runs = trace_runs(&trace);
    let labels: Vec<&str> = runs.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(runs.len(), 3, "{labels:?}");
    assert!(labels[0].contains("transmit only"), "{labels:?}");
    assert!(labels[1].contains("receive only"), "{labels:?}");
    assert!(labels[2].contains("both ways"), "{labels:?}");
    let records: usize = runs.iter().map(|r| r.1.len()).sum();
    assert_eq!(pcap_records(&pcap), records);
    // 64-byte frames are 60 bytes of data without the FCS: transmitting, the NIC reads
    // each frame's 60 bytes (one MRd of 15 DW each); receiving, it writes them.
    let frame_reads = |r: &[Record]| {
        mem_requests(r, "nic->rc.0")
            .iter()
            .filter(|m| m.0 == TlpKind::MRd && m.2 == 60)
            .count()
    };
    let frame_writes = |r: &[Record]| -> Vec<Vec<u8>> {
        mem_requests(r, "nic->rc.0")
            .into_iter()
            .filter(|m| m.0 == TlpKind::MWr && m.2 == 60)
            .map(|m| m.3)
            .collect()
    };
    assert_eq!(
        (frame_reads(&runs[0].1), frame_writes(&runs[0].1).len()),
        (160, 0)
    );
    assert_eq!(
        (frame_reads(&runs[1].1), frame_writes(&runs[1].1).len()),
        (0, 160)
    );
    // Both ways, the MAC loops every frame back: the driver numbered its frames
    // 0..160 in their first 8 bytes, and each comes back to host memory once.
    assert_eq!(frame_reads(&runs[2].1), 160);
    let mut numbers: Vec<u64> = frame_writes(&runs[2].1)
        .iter()
        .map(|p| u64::from_le_bytes(p[..8].try_into().unwrap()))
        .collect();
    numbers.sort_unstable();
    assert_eq!(numbers, (0..160).collect::<Vec<u64>>());
}

#[test]
fn sriov_workload_capture_holds_every_transfers_bytes() {
    let pcap = tmp("sriov-workload.pcapng");
    let base = [
        "sim",
        "--workload",
        "sriov",
        "--vfs",
        "1",
        "--op",
        "write",
        "--sizes",
        "64K",
        "--count",
        "2",
        "--json",
    ];
    let err = captured_alike(&base, &["--pcap", pcap.to_str().unwrap()]);
    assert!(err.contains("of 1 run(s)"), "{err}");
    // 2 functions × 2 transfers × 64 KiB device to host: 512 whole-MPS MWrs of 256
    // bytes each, and nothing else of that size goes up.
    let dump = dump_json(&pcap);
    let full = dump
        .iter()
        .filter(|o| o["kind"] == "MWr" && o["interface"] == "dma->rc.0" && o["length_dw"] == 64)
        .count();
    assert_eq!(full, 2 * 2 * 65536 / 256, "{:?}", dump.first());
}
