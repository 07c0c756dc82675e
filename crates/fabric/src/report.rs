//! Text and JSON views of an enumerated tree, with the names of the topology file.
//!
//! ```text
//! 00:00.0 rc  Host bridge [1fee:0001]
//! 00:01.0 rc.0  Root Port [bus 01-04] Gen4 x16
//! `-- 01:00.0 sw0  Upstream Port [bus 02-04] Gen4 x16
//!     |-- 02:00.0 sw0.0  Downstream Port [bus 03] link down
//!     `-- 02:01.0 sw0.1  Downstream Port [bus 04] Gen4 x4
//!         `-- 04:00.0 mem0  Endpoint Gen4 x4 BAR0 4000000000 (64-bit pref, 1 MiB)
//! ```
//!
//! An SR-IOV VF follows its PF, named after it: `01:00.1 nic.vf0  Endpoint (VF 0 of
//! 01:00.0) …`, with its BARs (its slices of the PF's VF BARs).

use crate::functional::Fabric;
use crate::host::enumerate::{EnumFunction, EnumeratedTree, Interrupts};
use pcielab_config::caps::id;
use pcielab_config::decode::class_name;
use pcielab_config::Bar;
use pcielab_wire::Bdf;
use serde_json::{json, Value};

fn human(n: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if n >= 1 << shift && n % (1 << shift) == 0 {
            return format!("{} {unit}", n >> shift);
        }
    }
    format!("{n} B")
}

fn name(fabric: &Fabric, bdf: Bdf) -> String {
    fabric
        .function_at(bdf)
        .map_or_else(|| "?".into(), |f| fabric.name(f))
}

fn line(fabric: &Fabric, f: &EnumFunction) -> String {
    let mut s = format!("{} {}  ", f.bdf, name(fabric, f.bdf));
    match f.port_type {
        Some(t) => s += t.name(),
        None => {
            s += &format!(
                "{} [{:04x}:{:04x}]",
                class_name(f.class_code),
                f.vendor_id,
                f.device_id
            )
        }
    }
    if let Some((pf, i)) = f.vf_of {
        s += &format!(" (VF {i} of {pf})");
    }
    if let Some(b) = f.buses {
        if b.secondary == b.subordinate {
            s += &format!(" [bus {:02x}]", b.secondary);
        } else {
            s += &format!(" [bus {:02x}-{:02x}]", b.secondary, b.subordinate);
        }
    }
    if let Some(l) = f.link {
        if l.width == 0 {
            s += " link down";
        } else {
            s += &format!(" Gen{} x{}", l.gen, l.width);
        }
    }
    for b in &f.bars {
        let kind = match b.bar {
            Bar::Io { .. } => "I/O".to_string(),
            Bar::Mem32 { prefetchable, .. } => {
                format!("32-bit{}", if prefetchable { " pref" } else { "" })
            }
            Bar::Mem64 { prefetchable, .. } => {
                format!("64-bit{}", if prefetchable { " pref" } else { "" })
            }
        };
        s += &format!(
            " BAR{} {:x} ({kind}, {})",
            b.index,
            b.address,
            human(b.bar.size())
        );
    }
    if let Some(r) = f.rom {
        s += &format!(" ROM {:x} ({})", r.address, human(r.bar.size()));
    }
    for b in &f.vf_bars {
        s += &format!(
            " VF-BAR{} {:x} ({} for all VFs)",
            b.index,
            b.address,
            human(b.bar.size())
        );
    }
    s
}

/// The tree as text: one line per function, children indented below their bridge.
pub fn tree_text(fabric: &Fabric, tree: &EnumeratedTree) -> String {
    fn walk(
        fabric: &Fabric,
        tree: &EnumeratedTree,
        parent: Option<Bdf>,
        prefix: &str,
        out: &mut String,
    ) {
        let kids: Vec<&EnumFunction> = tree.children(parent).collect();
        for (i, f) in kids.iter().enumerate() {
            let last = i + 1 == kids.len();
            let (branch, cont) = match parent {
                None => ("", ""),
                Some(_) if last => ("`-- ", "    "),
                Some(_) => ("|-- ", "|   "),
            };
            out.push_str(prefix);
            out.push_str(branch);
            out.push_str(&line(fabric, f));
            out.push('\n');
            walk(fabric, tree, Some(f.bdf), &format!("{prefix}{cont}"), out);
        }
    }
    let mut out = String::new();
    walk(fabric, tree, None, "", &mut out);
    out
}

fn range(r: Option<(u64, u64)>) -> Value {
    match r {
        Some((b, l)) => json!({"base": format!("{b:#x}"), "limit": format!("{l:#x}")}),
        None => Value::Null,
    }
}

/// The tree as JSON: `{"functions": [...]}` in depth-first order. Each function has
/// `bdf`, `name`, `parent`, `vendor_id`, `device_id`, `class_code`, `header_type`,
/// `port_type`, `bars` (`index`, `kind` mem32/mem64/io, `prefetchable`, `size`,
/// `address`), `rom` (`size`, `address`), `vf_bars` (SR-IOV; `size` is per-VF size × TotalVFs), `buses`, `windows` (`io`, `mem`, `pref` with `base`/`limit`), `link`
/// (`gen`, `width`, `max_gen`, `max_width`), `mps`, `mrrs`, `capabilities`
/// (`offset`, `id`, `extended`, `name`) and `interrupts`; a VF also has `vf_of`
/// (`pf`: the PF's ID, `index`: the VF's number), and its `vendor_id`/`device_id` are
/// the PF's Vendor ID and VF Device ID.
pub fn tree_json(fabric: &Fabric, tree: &EnumeratedTree) -> Value {
    let funcs: Vec<Value> = tree
        .functions
        .iter()
        .map(|f| {
            let bars: Vec<Value> = f
                .bars
                .iter()
                .map(|b| {
                    let kind = match b.bar {
                        Bar::Io { .. } => "io",
                        Bar::Mem32 { .. } => "mem32",
                        Bar::Mem64 { .. } => "mem64",
                    };
                    json!({"index": b.index, "kind": kind, "prefetchable": b.bar.prefetchable(),
                           "size": b.bar.size(), "address": format!("{:#x}", b.address)})
                })
                .collect();
            let caps: Vec<Value> = f
                .caps
                .iter()
                .map(|c| {
                    let n = if c.extended { id::ext_name(c.id) } else { id::name(c.id as u8) };
                    json!({"offset": format!("{:#x}", c.offset), "id": format!("{:#x}", c.id),
                           "extended": c.extended, "name": n})
                })
                .collect();
            let irq = match &f.interrupts {
                Interrupts::None => Value::Null,
                Interrupts::Msi { address, data } => {
                    json!({"kind": "msi", "address": format!("{address:#x}"), "data": data})
                }
                Interrupts::MsiX { entries } => json!({"kind": "msix", "entries": entries.iter()
                    .map(|(a, d)| json!({"address": format!("{a:#x}"), "data": d})).collect::<Vec<_>>()}),
            };
            let mut v = json!({
                "bdf": f.bdf.to_string(),
                "name": name(fabric, f.bdf),
                "parent": f.parent.map(|p| p.to_string()),
                "vendor_id": format!("{:04x}", f.vendor_id),
                "device_id": format!("{:04x}", f.device_id),
                "class_code": format!("{:06x}", f.class_code),
                "header_type": f.header_type,
                "port_type": f.port_type.map(|t| t.name()),
                "bars": bars,
                "rom": f.rom.map(|r| json!({"size": r.bar.size(), "address": format!("{:#x}", r.address)})),
                "vf_bars": f.vf_bars.iter().map(|b| json!({"index": b.index, "size": b.bar.size(),
                    "prefetchable": b.bar.prefetchable(), "address": format!("{:#x}", b.address)})).collect::<Vec<_>>(),
                "buses": f.buses.map(|b| json!({"primary": b.primary, "secondary": b.secondary, "subordinate": b.subordinate})),
                "windows": f.windows.map(|w| json!({"io": range(w.io.map(|(b, l)| (b as u64, l as u64))), "mem": range(w.mem), "pref": range(w.pref)})),
                "link": f.link.map(|l| json!({"gen": l.gen, "width": l.width, "max_gen": l.max_gen, "max_width": l.max_width})),
                "mps": f.mps,
                "mrrs": f.mrrs,
                "capabilities": caps,
                "interrupts": irq,
            });
            if let Some((pf, i)) = f.vf_of {
                v["vf_of"] = json!({"pf": pf.to_string(), "index": i});
            }
            v
        })
        .collect();
    json!({ "functions": funcs })
}
