//! `docs/design.md` documents every key the topology parser accepts, and only those:
//! the key table (between `<!-- topology-keys -->` and `<!-- /topology-keys -->`) is
//! checked against the parser's own lists (`TOP_LEVEL_KEYS`, `NODE_KEYS`, `LINK_KEYS`
//! and each registered kind's keys), with each key's range, choices and default.

use pcielab_fabric::kinds::{KeyType, KindRegistry, ParamValue};
use pcielab_fabric::topology::{LINK_KEYS, NODE_KEYS, TOP_LEVEL_KEYS};

fn design_md() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/design.md");
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Where a documented key applies.
#[derive(Debug, Clone, PartialEq)]
enum Scope {
    TopLevel,
    Link,
    /// The `[host]` table: `profile` and the host model's knobs.
    Host,
    EveryNode,
    Kinds(Vec<String>),
}

#[derive(Debug)]
struct Row {
    line: usize,
    scope: Scope,
    keys: Vec<String>,
    ty: String,
    default: String,
}

/// The keys of a `[host]` table: the profile and every host knob.
fn host_keys() -> Vec<&'static str> {
    std::iter::once("profile")
        .chain(pcielab_fabric::host::model::KNOBS.iter().map(|k| k.name))
        .collect()
}

/// The words between backticks in a cell.
fn ticked(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

fn rows(doc: &str) -> Result<Vec<Row>, String> {
    let start = doc
        .find("<!-- topology-keys -->")
        .ok_or("no <!-- topology-keys --> marker")?;
    let end = doc
        .find("<!-- /topology-keys -->")
        .ok_or("no <!-- /topology-keys --> marker")?;
    let first_line = doc[..start].matches('\n').count() + 1;
    let mut out = Vec::new();
    for (i, l) in doc[start..end].lines().enumerate() {
        let l = l.trim();
        if !l.starts_with('|') || l.starts_with("|---") || l.starts_with("| where") {
            continue;
        }
        let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
        if cells.len() != 5 {
            return Err(format!("line {}: expected 5 cells: {l}", first_line + i));
        }
        let scope = match cells[0] {
            "top level" => Scope::TopLevel,
            "`[[link]]`" => Scope::Link,
            "`[host]`" => Scope::Host,
            "every node" => Scope::EveryNode,
            c => Scope::Kinds(ticked(c)),
        };
        out.push(Row {
            line: first_line + i,
            scope,
            keys: ticked(cells[1]),
            ty: cells[2].to_string(),
            default: cells[3].to_string(),
        });
    }
    Ok(out)
}

/// Ways a number may be written in the docs.
fn spellings(n: i64) -> Vec<String> {
    let mut v = vec![n.to_string(), format!("{n:#x}"), format!("{n:#06x}")];
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if n >= 1 << shift && n % (1 << shift) == 0 {
            v.push(format!("{} {unit}", n >> shift));
            v.push(format!("{}{unit}", n >> shift));
        }
    }
    v
}

/// Everything wrong with the key table of `doc` against `reg`: keys accepted but
/// not documented, keys documented but not accepted, ranges, choices and defaults the
/// table does not show.
fn problems(doc: &str, reg: &KindRegistry) -> Vec<String> {
    let rows = match rows(doc) {
        Ok(r) => r,
        Err(e) => return vec![e],
    };
    let mut bad = Vec::new();
    let documented = |scope: &Scope, key: &str| {
        rows.iter()
            .any(|r| &r.scope == scope && r.keys.iter().any(|k| k == key))
    };
    for k in TOP_LEVEL_KEYS {
        if !documented(&Scope::TopLevel, k) {
            bad.push(format!("top-level key {k:?} is not documented"));
        }
    }
    for k in host_keys() {
        if !documented(&Scope::Host, k) {
            bad.push(format!("[host] key {k:?} is not documented"));
        }
    }
    for k in LINK_KEYS {
        if !documented(&Scope::Link, k) {
            bad.push(format!("[[link]] key {k:?} is not documented"));
        }
    }
    for kind in reg.names() {
        let spec = reg.get(kind).unwrap();
        let keys = NODE_KEYS
            .iter()
            .copied()
            .chain(spec.keys.iter().map(|k| k.name));
        for k in keys {
            let row = rows.iter().find(|r| {
                r.keys.iter().any(|x| x == k)
                    && match &r.scope {
                        Scope::EveryNode => true,
                        Scope::Kinds(ks) => ks.iter().any(|x| x == kind),
                        _ => false,
                    }
            });
            let Some(row) = row else {
                bad.push(format!("key {k:?} of kind {kind:?} is not documented"));
                continue;
            };
            let Some(ks) = spec.keys.iter().find(|s| s.name == k) else {
                continue; // name, kind
            };
            match ks.ty {
                KeyType::Int { min, max } => {
                    for n in [min, max] {
                        if !spellings(n).iter().any(|s| row.ty.contains(s.as_str())) {
                            bad.push(format!(
                                "line {}: {kind}.{k}: the range does not show {n}",
                                row.line
                            ));
                        }
                    }
                }
                KeyType::Choice(names) => {
                    for n in names {
                        if !row.ty.contains(&format!("\"{n}\"")) {
                            bad.push(format!(
                                "line {}: {kind}.{k}: choice {n:?} is not listed",
                                row.line
                            ));
                        }
                    }
                }
                _ => {}
            }
            let shown = match &ks.default {
                None => true,
                Some(ParamValue::Int(n)) => spellings(*n)
                    .iter()
                    .any(|s| row.default.contains(s.as_str())),
                Some(ParamValue::Bool(b)) => row.default.contains(&b.to_string()),
                Some(ParamValue::Str(s)) => row.default.contains(&format!("\"{s}\"")),
            };
            if !shown {
                bad.push(format!(
                    "line {}: {kind}.{k}: the default {:?} is not shown",
                    row.line, ks.default
                ));
            }
        }
    }
    // No row documents a key the parser refuses.
    for r in &rows {
        for k in &r.keys {
            let ok = match &r.scope {
                Scope::TopLevel => TOP_LEVEL_KEYS.contains(&k.as_str()),
                Scope::Link => LINK_KEYS.contains(&k.as_str()),
                Scope::Host => host_keys().contains(&k.as_str()),
                Scope::EveryNode => reg.names().iter().all(|kind| {
                    NODE_KEYS.contains(&k.as_str())
                        || reg.get(kind).unwrap().keys.iter().any(|s| s.name == k)
                }),
                Scope::Kinds(kinds) => {
                    !kinds.is_empty()
                        && kinds.iter().all(|kind| {
                            reg.get(kind)
                                .is_some_and(|s| s.keys.iter().any(|s| s.name == k))
                        })
                }
            };
            if !ok {
                bad.push(format!(
                    "line {}: {k:?} ({:?}) is documented but the parser does not accept it there",
                    r.line, r.scope
                ));
            }
        }
        if r.keys.is_empty() {
            bad.push(format!("line {}: a row without a `key`", r.line));
        }
    }
    bad
}

#[test]
fn design_md_documents_every_topology_key() {
    let bad = problems(&design_md(), &KindRegistry::builtin());
    assert!(bad.is_empty(), "docs/design.md:\n{}", bad.join("\n"));
}

/// The check fails when the table loses a row, gains a key the parser refuses, or
/// shows a wrong default or range.
#[test]
fn the_check_catches_missing_wrong_and_invented_keys() {
    let doc = design_md();
    let reg = KindRegistry::builtin();
    let row_of = |key: &str| {
        doc.lines()
            .find(|l| l.starts_with('|') && l.contains(&format!("| `{key}` |")))
            .unwrap_or_else(|| panic!("no row for {key}"))
            .to_string()
    };
    let without = |key: &str| doc.replace(&format!("{}\n", row_of(key)), "");
    for (key, what) in [
        ("width", "[[link]] key \"width\""),
        ("seed", "top-level key \"seed\""),
        ("mmio_read_ns", "[host] key \"mmio_read_ns\""),
        ("bar_size", "key \"bar_size\" of kind \"psmem\""),
        ("name", "key \"name\" of kind \"switch\""),
    ] {
        let bad = problems(&without(key), &reg);
        assert!(bad.iter().any(|b| b.contains(what)), "{key}: {bad:?}");
    }
    let msix = row_of("msix_vectors");
    let invented = doc.replace(
        &format!("{msix}\n"),
        &format!("{msix}\n{}\n", msix.replace("msix_vectors", "colour")),
    );
    assert!(problems(&invented, &reg)
        .iter()
        .any(|b| b.contains("\"colour\"")));
    let wrong_default = doc.replace(&msix, &msix.replace("| 4 |", "| 8 |"));
    assert_ne!(wrong_default, doc);
    assert!(problems(&wrong_default, &reg)
        .iter()
        .any(|b| b.contains("msix_vectors: the default")));
    let wrong_range = doc.replace(&msix, &msix.replace("2048", "4096"));
    assert!(problems(&wrong_range, &reg)
        .iter()
        .any(|b| b.contains("msix_vectors: the range does not show 2048")));
}

/// `docs/devices.md` (the "write your own device" tutorial) shows only code that is
/// compiled and run: every `rust` block is a verbatim excerpt of the example that CI
/// runs (whose printed output CI compares with the tutorial's `console` block).
#[test]
fn the_device_tutorial_shows_the_examples_code() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let doc = std::fs::read_to_string(format!("{dir}/docs/devices.md")).expect("tutorial");
    let example = std::fs::read_to_string(format!(
        "{dir}/crates/fabric/examples/two_function_device.rs"
    ))
    .expect("example");
    let mut blocks = Vec::new();
    let mut cur: Option<Vec<&str>> = None;
    for line in doc.lines() {
        match (&mut cur, line) {
            (None, "```rust") => cur = Some(Vec::new()),
            (Some(b), "```") => {
                blocks.push(b.join("\n"));
                cur = None;
            }
            (Some(b), l) => b.push(l),
            _ => {}
        }
    }
    assert!(blocks.len() >= 8, "only {} rust blocks", blocks.len());
    for b in &blocks {
        assert!(
            example.contains(b.as_str()),
            "this block of docs/devices.md is not in the example:\n{b}"
        );
    }
}
