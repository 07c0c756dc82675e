//! `pcielab sim --workload inject`: a device sends TLPs given as hex, byte for byte, and
//! the report says what the port above did with each (Malformed, Unsupported Request,
//! carried), which completions came back, and the AER status it left.

use crate::{fail, Failure};
use pcielab_fabric::timed::{Endpoint, EpCx, FabricSim};
use pcielab_wire::json::{hex, unhex};
use pcielab_wire::tlp::TlpRepr;
use pcielab_wire::Bdf;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

/// Completions a device received: (time in ps, bytes).
type Received = Arc<Mutex<Vec<(u64, Vec<u8>)>>>;

/// Sends its TLPs when attached; keeps the completions of those that ask for one.
#[derive(Debug)]
struct Injector {
    tlps: Vec<Vec<u8>>,
    got: Received,
}

impl Endpoint for Injector {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        for t in self.tlps.drain(..) {
            cx.send_raw(t);
        }
    }
    fn raw_completion(&mut self, tlp: &[u8], cx: &mut EpCx<'_>) {
        self.got
            .lock()
            .unwrap()
            .push((cx.now().as_ps(), tlp.to_vec()));
    }
}

/// The `--tlp` arguments as bytes; errors name the argument.
pub fn parse_tlps(args: &[String]) -> Result<Vec<Vec<u8>>, Failure> {
    if args.is_empty() {
        return Err(fail(
            "--workload inject needs at least one --tlp HEX (see `pcielab tlp encode`)",
        ));
    }
    args.iter()
        .enumerate()
        .map(|(i, h)| unhex(h).map_err(|e| fail(format!("--tlp #{}: bad hex: {e}", i + 1))))
        .collect()
}

/// A TLP as `pcielab tlp decode` prints it, or why it cannot be decoded.
fn describe(b: &[u8]) -> String {
    match TlpRepr::parse_bytes(b) {
        Ok(r) => r.to_string(),
        Err(e) => format!("undecodable: {e}"),
    }
}

/// AER Uncorrectable Error Status bits, with lspci's names.
const UE_NAMES: [(u32, &str); 17] = [
    (4, "DLP"),
    (5, "SDES"),
    (12, "TLP"),
    (13, "FCP"),
    (14, "CmpltTO"),
    (15, "CmpltAbrt"),
    (16, "UnxCmplt"),
    (17, "RxOF"),
    (18, "MalfTLP"),
    (19, "ECRC"),
    (20, "UnsupReq"),
    (21, "ACSViol"),
    (22, "UncorrIntErr"),
    (23, "BlockedTLP"),
    (24, "AtomicOpBlocked"),
    (25, "TLPBlockedErr"),
    (26, "PoisonTLPBlocked"),
];

/// The set bits of an Uncorrectable Error Status value, by name.
fn ue_names(v: u32) -> String {
    let n: Vec<&str> = UE_NAMES
        .iter()
        .filter(|(b, _)| v >> b & 1 != 0)
        .map(|(_, n)| *n)
        .collect();
    if n.is_empty() {
        "none".to_string()
    } else {
        n.join(" ")
    }
}

/// AER Uncorrectable Error Status of `f` (0 without AER).
fn uncorrectable(sim: &mut FabricSim, f: Bdf) -> u32 {
    let mut at = 0x100u16;
    for _ in 0..64 {
        if at == 0 {
            break;
        }
        let h = sim.cfg_read(f, at);
        if h & 0xffff == 0x0001 {
            return sim.cfg_read(f, at + 4);
        }
        at = (h >> 20) as u16 & 0xffc;
    }
    0
}

/// Attaches the injector to `device` of a trained `sim`, runs it with `run`, and
/// returns the report rows.
pub fn inject_rows(
    sim: &mut FabricSim,
    device: &str,
    tlps: Vec<Vec<u8>>,
    run: impl FnOnce(&mut FabricSim) -> Result<(), Failure>,
) -> Result<Vec<Value>, Failure> {
    let me = sim
        .bdf(device)
        .ok_or_else(|| fail(format!("--device {device:?}: no such endpoint")))?;
    let port = sim.tree().get(me).and_then(|n| n.parent);
    let sent: Vec<Value> = tlps
        .iter()
        .enumerate()
        .map(|(i, b)| {
            json!({
                "workload": "inject", "n": i + 1, "device": device, "bytes": b.len(),
                "tlp": describe(b), "hex": hex(b),
            })
        })
        .collect();
    let got: Received = Arc::default();
    let before = sim.errors().len();
    let t0 = sim.now().as_ps();
    sim.attach(
        device,
        Box::new(Injector {
            tlps,
            got: got.clone(),
        }),
    )
    .map_err(|e| fail(e.to_string()))?;
    run(sim)?;
    let mut rows = sent;
    for (t, b) in got.lock().unwrap().iter() {
        rows.push(json!({
            "workload": "inject-completion", "device": device,
            "time_ns": (t - t0) as f64 / 1000.0, "tlp": describe(b), "hex": hex(b),
        }));
    }
    let errors: Vec<String> = sim.errors()[before..]
        .iter()
        .map(|e| e.to_string())
        .collect();
    let port_ue = port.map(|p| uncorrectable(sim, p)).unwrap_or(0);
    let dev_ue = uncorrectable(sim, me);
    rows.push(json!({
        "workload": "inject-result", "device": device, "bdf": me.to_string(),
        "port": port.map(|p| p.to_string()),
        "port_uncorrectable": format!("{port_ue:08x}"), "port_errors": ue_names(port_ue),
        "device_uncorrectable": format!("{dev_ue:08x}"), "device_errors": ue_names(dev_ue),
        "recorded": errors,
    }));
    Ok(rows)
}

/// The inject rows as text.
pub fn fmt_inject(rows: &[Value]) -> String {
    let mut s = String::new();
    let of = |w: &'static str| rows.iter().filter(move |r| r["workload"] == w);
    let Some(res) = of("inject-result").next() else {
        return s;
    };
    let str_of = |v: &Value| v.as_str().unwrap_or("").to_string();
    s.push_str(&format!(
        "TLPs sent by {} ({}) to the port above ({})\n",
        str_of(&res["device"]),
        str_of(&res["bdf"]),
        res["port"].as_str().unwrap_or("-")
    ));
    for r in of("inject") {
        s.push_str(&format!(
            "  #{} ({} bytes) {}\n",
            r["n"],
            r["bytes"],
            str_of(&r["tlp"])
        ));
    }
    s.push_str("What the fabric recorded\n");
    let rec = res["recorded"].as_array().cloned().unwrap_or_default();
    if rec.is_empty() {
        s.push_str("  nothing (every TLP was carried and handled)\n");
    }
    for e in rec {
        s.push_str(&format!("  {}\n", str_of(&e)));
    }
    s.push_str("Completions back to the device\n");
    let mut any = false;
    for r in of("inject-completion") {
        any = true;
        s.push_str(&format!(
            "  {:>10.3} ns  {}\n",
            r["time_ns"].as_f64().unwrap_or(0.0),
            str_of(&r["tlp"])
        ));
    }
    if !any {
        s.push_str("  none\n");
    }
    s.push_str(&format!(
        "AER uncorrectable status: port {} {} ({}), device {} ({})\n",
        res["port"].as_str().unwrap_or("-"),
        str_of(&res["port_uncorrectable"]),
        str_of(&res["port_errors"]),
        str_of(&res["device_uncorrectable"]),
        str_of(&res["device_errors"])
    ));
    s
}
