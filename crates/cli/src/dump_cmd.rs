//! `pcielab dump FILE`: prints a capture one TLP/DLLP per line, as JSON, or as statistics.

use crate::{fail, Failure};
use clap::Args;
use pcielab_capture::decode::{decode, Decoded, Filter};
use pcielab_capture::stats::Stats;
use pcielab_capture::transactions::{Matcher, Role};
use pcielab_capture::{Record, StreamReader};
use pcielab_wire::json::{hex, tlp_to_json};
use pcielab_wire::tlp::TlpRepr;
use pcielab_wire::Bdf;
use serde_json::{json, Value};
use std::io::Write;

/// Arguments of `dump`.
#[derive(Args, Debug)]
pub struct DumpArgs {
    /// The capture (pcapng or pcap); `-` reads standard input. Read as a stream, one
    /// packet in memory at a time.
    pub file: String,
    /// One JSON object per line (the field names of docs/design.md plus frame, time_ps, interface).
    #[arg(long)]
    pub json: bool,
    /// Print counts, bytes and request→completion latencies instead of packets.
    #[arg(long)]
    pub stats: bool,
    /// Keep these kinds (comma-separated): MRd, CplD, …, UpdateFC, Ack, tlp, dllp, malformed.
    #[arg(long, value_delimiter = ',')]
    pub kind: Vec<String>,
    /// Keep TLPs with this Requester ID (bb:dd.f).
    #[arg(long)]
    pub requester: Option<String>,
    /// Keep completions from (and configuration requests to) this ID (bb:dd.f).
    #[arg(long)]
    pub completer: Option<String>,
    /// Keep TLPs whose address is in START-END (end excluded) or START+LEN; hex or decimal.
    #[arg(long)]
    pub addr: Option<String>,
    /// Keep TLPs with this tag.
    #[arg(long)]
    pub tag: Option<String>,
    /// Keep records of this interface (repeatable).
    #[arg(long, short = 'i')]
    pub interface: Vec<String>,
    /// Also print frames that are not NetTLP traffic.
    #[arg(long)]
    pub all: bool,
    /// Also print the TLP/DLLP bytes in hex (text mode).
    #[arg(long)]
    pub hex: bool,
    /// Number of histogram bins for --stats.
    #[arg(long, default_value_t = 10)]
    pub bins: usize,
}

fn num(s: &str, what: &str) -> Result<u64, Failure> {
    let t = s.trim().replace('_', "");
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => t.parse(),
    };
    r.map_err(|_| {
        fail(format!(
            "{what}: \"{s}\" is not a number (decimal or 0x-hex)"
        ))
    })
}

fn bdf(s: &str, what: &str) -> Result<Bdf, Failure> {
    s.parse::<Bdf>()
        .map_err(|e| fail(format!("{what}: \"{s}\" is not an ID bb:dd.f ({e})")))
}

fn filter(a: &DumpArgs) -> Result<Filter, Failure> {
    let address = match &a.addr {
        None => None,
        Some(s) => {
            if let Some((lo, len)) = s.split_once('+') {
                let lo = num(lo, "--addr")?;
                Some((lo, lo.saturating_add(num(len, "--addr")?)))
            } else if let Some((lo, hi)) = s.split_once('-') {
                Some((num(lo, "--addr")?, num(hi, "--addr")?))
            } else {
                let lo = num(s, "--addr")?;
                Some((lo, lo.saturating_add(1)))
            }
        }
    };
    let tag = match &a.tag {
        None => None,
        Some(s) => {
            let t = num(s, "--tag")?;
            if t > 1023 {
                return Err(fail(format!("--tag: {t} is out of range (0..=1023)")));
            }
            Some(t as u16)
        }
    };
    Ok(Filter {
        kinds: a.kind.clone(),
        requester: a
            .requester
            .as_deref()
            .map(|s| bdf(s, "--requester"))
            .transpose()?,
        completer: a
            .completer
            .as_deref()
            .map(|s| bdf(s, "--completer"))
            .transpose()?,
        address,
        tag,
        interfaces: a.interface.clone(),
    })
}

/// `secs.picoseconds` with 12 decimals.
fn time_str(ps: u128) -> String {
    format!("{}.{:012}", ps / 1_000_000_000_000, ps % 1_000_000_000_000)
}

/// A latency in ns with 3 decimals.
fn ns(ps: u128) -> String {
    format!("{}.{:03} ns", ps / 1000, ps % 1000)
}

fn time_json(ps: u128) -> Value {
    match u64::try_from(ps) {
        Ok(v) => json!(v),
        Err(_) => json!(ps.to_string()),
    }
}

fn line_json(rec: &Record<'_>, iface: &str, d: &Decoded<'_>, role: Option<Role>) -> Value {
    let mut v = match d {
        Decoded::Tlp {
            tlp,
            ecrc_ok,
            bytes,
        } => {
            let mut v = tlp_to_json(tlp);
            if let Some(ok) = ecrc_ok {
                // The digest as captured (tlp_to_json gives the one the codec computes).
                v["ecrc"] = json!(hex(&bytes[bytes.len().saturating_sub(4)..]));
                v["ecrc_ok"] = json!(ok);
            }
            v
        }
        Decoded::Snapped {
            full,
            captured,
            bytes,
        } => match d.tlp() {
            Some(tlp) => {
                let mut v = tlp_to_json(&tlp);
                snapped_json(&mut v, &tlp, full.len(), *captured, bytes);
                v
            }
            None => json!({"kind": "malformed-tlp", "bytes": hex(bytes)}),
        },
        Decoded::Dllp { dllp, crc_ok, .. } => {
            let mut v = pcielab_wire::dllp::json::to_json(dllp);
            v["crc_ok"] = json!(crc_ok);
            v
        }
        Decoded::BadTlp { error, bytes } => {
            json!({"kind": "malformed-tlp", "error": error.to_string(), "bytes": hex(bytes)})
        }
        Decoded::BadDllp { error, bytes } => {
            json!({"kind": "malformed-dllp", "error": error.to_string(), "bytes": hex(bytes)})
        }
        Decoded::Config(b) => json!({"kind": "config", "bytes": hex(b)}),
        Decoded::Other => json!({"kind": "other", "bytes": hex(rec.frame_bytes)}),
    };
    v["frame"] = json!(rec.frame);
    v["time_ps"] = time_json(rec.time_ps);
    v["interface"] = json!(iface);
    if let Some(h) = rec.nettlp {
        v["nettlp_seq"] = json!(h.seq);
        v["nettlp_tstamp"] = json!(h.tstamp);
    }
    match role {
        Some(Role::Completion(c)) => {
            v["request_frame"] = json!(c.request_frame);
            v["latency_ps"] = time_json(c.latency_ps);
            v["last"] = json!(c.last);
        }
        Some(Role::Unmatched) => v["unmatched"] = json!(true),
        Some(Role::DllReplay) => v["dll_replay"] = json!(true),
        _ => {}
    }
    v
}

/// A snapped TLP's JSON: the payload as captured, no ECRC, and `captured_len`.
fn snapped_json(v: &mut Value, tlp: &TlpRepr<'_>, full: usize, captured: usize, bytes: &[u8]) {
    let payload_off = full - tlp.payload.len() - if tlp.td { 4 } else { 0 };
    let got = bytes.get(payload_off..).unwrap_or(&[]);
    let got = &got[..got.len().min(tlp.payload.len())];
    if let Some(m) = v.as_object_mut() {
        if got.is_empty() {
            m.remove("payload");
        } else if m.contains_key("payload") {
            m.insert("payload".into(), json!(hex(got)));
        }
        m.insert("ecrc".into(), Value::Null);
        m.insert("captured_len".into(), json!(captured));
    }
}

fn line_text(rec: &Record<'_>, iface: &str, d: &Decoded<'_>, role: Option<Role>) -> String {
    let body = match d {
        Decoded::Snapped { full, captured, .. } => match d.tlp() {
            Some(t) => format!("{t} [snapped: {captured} of {} bytes]", full.len()),
            None => "malformed TLP".to_string(),
        },
        Decoded::Tlp { tlp, ecrc_ok, .. } => {
            let mut s = tlp.to_string();
            if *ecrc_ok == Some(false) {
                s.push_str(" ECRC-BAD");
            }
            s
        }
        Decoded::Dllp { dllp, crc_ok, .. } => {
            let mut s = dllp.to_string();
            if !crc_ok {
                s.push_str(" CRC-BAD");
            }
            s
        }
        Decoded::BadTlp { error, .. } => format!("malformed TLP: {error}"),
        Decoded::BadDllp { error, .. } => format!("malformed DLLP: {error}"),
        Decoded::Config(b) => format!("NetTLP config {}", hex(b)),
        Decoded::Other => match rec.payload {
            pcielab_capture::Payload::NotUdp(e) => format!("not NetTLP: {e}"),
            _ => match rec.ports {
                Some((s, d)) => format!("not NetTLP: UDP {s} -> {d}"),
                None => "not NetTLP".to_string(),
            },
        },
    };
    let mut s = format!(
        "{:>5} {} {} {}",
        rec.frame,
        time_str(rec.time_ps),
        iface,
        body
    );
    match role {
        Some(Role::Completion(c)) => {
            s.push_str(&format!(
                " (reply to #{} after {}{})",
                c.request_frame,
                ns(c.latency_ps),
                if c.last { "" } else { ", more to come" }
            ));
        }
        Some(Role::Unmatched) => s.push_str(" (no request)"),
        Some(Role::DllReplay) => s.push_str(" (DLL replay)"),
        Some(Role::Request {
            tag_in_use_by: Some(old),
        }) => s.push_str(&format!(" (tag in use by #{old})")),
        _ => {}
    }
    s
}

fn print_stats(stats: &mut Stats, bins: usize, json_out: bool) -> String {
    let lat = &mut stats.latencies;
    let pcts = [50.0, 90.0, 99.0, 99.9, 100.0];
    if json_out {
        let kinds: serde_json::Map<String, Value> = stats
            .per_kind
            .iter()
            .map(|(k, c)| (k.clone(), json!({"packets": c.packets, "bytes": c.bytes})))
            .collect();
        let ifaces: serde_json::Map<String, Value> = stats
            .per_interface
            .iter()
            .map(|(k, c)| (k.clone(), json!({"packets": c.packets, "bytes": c.bytes})))
            .collect();
        let p: serde_json::Map<String, Value> = pcts
            .iter()
            .filter_map(|&p| Some((format!("p{p}"), time_json(lat.percentile(p)?))))
            .collect();
        let h: Vec<Value> = lat
            .histogram(bins)
            .iter()
            .map(|&(lo, hi, n)| json!({"from_ps": time_json(lo), "to_ps": time_json(hi), "count": n}))
            .collect();
        let v = json!({
            "per_kind": kinds,
            "per_interface": ifaces,
            "latency": {"count": lat.len(), "mean_ps": lat.mean().map(time_json),
                        "percentiles_ps": p, "histogram": h},
            "unmatched_completions": stats.unmatched_completions,
            "missing_completions": stats.missing_completions,
            "dll_replays": stats.dll_replays,
        });
        return format!("{v}\n");
    }
    let mut o = String::new();
    for (title, counts) in [
        ("kind", &stats.per_kind),
        ("interface", &stats.per_interface),
    ] {
        o.push_str(&format!("{title:<28} {:>10} {:>12}\n", "packets", "bytes"));
        for (k, c) in counts {
            o.push_str(&format!("{:<28} {:>10} {:>12}\n", k, c.packets, c.bytes));
        }
        o.push('\n');
    }
    o.push_str(&format!(
        "request→completion latency: {} completed requests",
        lat.len()
    ));
    if let Some(m) = lat.mean() {
        o.push_str(&format!(", mean {}", ns(m)));
    }
    o.push('\n');
    for p in pcts {
        if let Some(v) = lat.percentile(p) {
            o.push_str(&format!("  p{:<5} {}\n", p, ns(v)));
        }
    }
    let h = lat.histogram(bins);
    let max = h.iter().map(|b| b.2).max().unwrap_or(0).max(1);
    for (lo, hi, n) in h {
        let bar = "#".repeat(((n * 40).div_ceil(max)) as usize);
        o.push_str(&format!(
            "  [{:>14}, {:>14}) {:>8} {}\n",
            ns(lo),
            ns(hi),
            n,
            bar
        ));
    }
    o.push_str(&format!(
        "unmatched completions: {}\nrequests without completion: {}\n",
        stats.unmatched_completions, stats.missing_completions
    ));
    if stats.dll_replays > 0 {
        o.push_str(&format!(
            "data-link replays (not matched): {}\n",
            stats.dll_replays
        ));
    }
    o
}

/// Runs `dump`.
pub fn run(a: &DumpArgs) -> Result<(), Failure> {
    let f = filter(a)?;
    f.check().map_err(fail)?;
    if a.file == "-" {
        dump(a, &f, "standard input", std::io::stdin().lock())
    } else {
        let file = std::fs::File::open(&a.file).map_err(|e| fail(format!("{}: {e}", a.file)))?;
        dump(
            a,
            &f,
            &a.file,
            std::io::BufReader::with_capacity(1 << 16, file),
        )
    }
}

/// Dumps the capture read from `src` (named `name` in errors), one record in memory at a
/// time.
fn dump(a: &DumpArgs, f: &Filter, name: &str, src: impl std::io::Read) -> Result<(), Failure> {
    let mut reader = StreamReader::new(src).map_err(|e| fail(format!("{name}: {e}")))?;
    let mut matcher = Matcher::new();
    let mut stats = Stats::default();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut err = None;
    while let Some(r) = reader.next_record() {
        let (rec, interfaces) = match r {
            Ok(x) => x,
            Err(e) => {
                err = Some(e);
                break;
            }
        };
        let iface = interfaces[rec.interface].name.clone();
        let d = decode(&rec);
        let role = d.tlp().map(|tlp| {
            if pcielab_capture::is_dll_replay(rec.comment) {
                Role::DllReplay
            } else {
                matcher.observe(rec.frame, &iface, rec.time_ps, &tlp)
            }
        });
        let nettlp = !matches!(d, Decoded::Other);
        if !f.matches(&iface, &d) || (!nettlp && !a.all) {
            continue;
        }
        if a.stats {
            if nettlp {
                // Bytes as sent: a TLP cut by the snap length counts at its full size.
                let n = d.bytes().len().max(rec.reported_len);
                stats.count(&d.kind_name(), &iface, n);
            }
            match role {
                Some(Role::Completion(c)) if c.last => stats.latencies.push(c.latency_ps),
                Some(Role::Unmatched) => stats.unmatched_completions += 1,
                Some(Role::DllReplay) => stats.dll_replays += 1,
                _ => {}
            }
            continue;
        }
        let line = if a.json {
            line_json(&rec, &iface, &d, role).to_string()
        } else {
            let mut s = line_text(&rec, &iface, &d, role);
            if a.hex && !d.bytes().is_empty() {
                s.push_str("\n      ");
                s.push_str(&hex(d.bytes()));
            }
            s
        };
        if writeln!(out, "{line}").is_err() {
            return Ok(()); // closed pipe (| head)
        }
    }
    let outstanding: Vec<_> = matcher
        .outstanding()
        .filter(|o| f.requester.map_or(true, |r| r == o.requester_id))
        .collect();
    if a.stats {
        stats.missing_completions = outstanding.len() as u64;
        let _ = out.write_all(print_stats(&mut stats, a.bins, a.json).as_bytes());
    } else if !a.json && !outstanding.is_empty() {
        let frames: Vec<String> = outstanding
            .iter()
            .map(|o| format!("#{}", o.frame))
            .collect();
        let _ = writeln!(
            out,
            "# {} request(s) without their last completion: {}",
            outstanding.len(),
            frames.join(" ")
        );
    }
    let _ = out.flush();
    if let Some(e) = err {
        return Err(fail(format!("{name}: {e}")));
    }
    // An interface filter that names no interface of the capture matched nothing.
    let names: Vec<&str> = reader
        .interfaces()
        .iter()
        .map(|i| i.name.as_str())
        .collect();
    for i in &f.interfaces {
        if !names.contains(&i.as_str()) {
            return Err(fail(format!(
                "-i {i:?}: {name} has no interface of that name; it has: {}",
                names.join(", ")
            )));
        }
    }
    Ok(())
}

/// Writes the demo set as a pcapng capture: requests of the root complex (bus 0) go down
/// `rc.0->ep0`, the endpoint's go up `ep0->rc.0`, completions travel towards their requester,
/// DLLPs alternate; 100 ns apart, each with its description as the packet comment.
pub fn write_demo(
    path: &str,
    tlps: &[(&str, Vec<u8>)],
    dllps: &[(&str, [u8; 6])],
) -> Result<(), Failure> {
    use pcielab_capture::{CaptureWriter, Format};
    let werr = |e: pcielab_capture::WriteError| fail(format!("{path}: {e}"));
    let mut w = CaptureWriter::create(
        path,
        Format::Pcapng,
        "pcielab demo: every TLP and DLLP kind on one link rc.0 <-> ep0 (x8 Gen3)",
    )
    .map_err(werr)?;
    let down = w.add_interface("rc.0->ep0").map_err(werr)?;
    let up = w.add_interface("ep0->rc.0").map_err(werr)?;
    let mut t = 0u64;
    for (what, bytes) in tlps {
        t += 100_000;
        let repr = TlpRepr::parse_bytes(bytes).map_err(|e| fail(format!("{what}: {e}")))?;
        let from_rc = repr.requester_id().bus() == 0;
        let toward_rc = repr.kind().is_completion() == from_rc;
        let id = if toward_rc { up } else { down };
        w.write_tlp_commented(id, t, bytes, what).map_err(werr)?;
    }
    for (i, (what, bytes)) in dllps.iter().enumerate() {
        t += 100_000;
        let id = if i % 2 == 0 { down } else { up };
        w.write_dllp_commented(id, t, bytes, what).map_err(werr)?;
    }
    w.finish().map_err(werr)?;
    Ok(())
}
