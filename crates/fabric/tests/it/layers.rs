//! The crate's modules depend only downward: the graph of references between its
//! modules has no cycle. Every source file is a node (so each component of the timed
//! simulator is one: `timed::engine`, `timed::link`, `timed::ats::state`, ...). A file
//! refers to a module by a path that starts with `crate::`, `super::` or `self::`, or
//! by a child module's name; the reference goes to the longest module the path names,
//! or to the module whose item it names (`super::*`: the parent). Checked from the
//! sources, comments and `tests` modules left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A module path: the names from the crate root (`[]` is the root).
type ModPath = Vec<String>;

/// The module a source file defines (`lib.rs` and `mod.rs` define their folder's).
fn module_of(rel: &str) -> ModPath {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The node of the graph that a module is.
fn node(m: &[String]) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}

/// The code of a source file without comments and without its `tests` module.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).expect("readable") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The paths a reference names after its prefix: `a::b` is one, `{a, b::{c, d}}` two
/// (`a` and `b`: nested groups are left at their first name), `*` the prefix itself
/// (an empty path).
fn paths_after(rest: &str) -> Vec<Vec<String>> {
    if rest.starts_with('*') {
        return vec![Vec::new()];
    }
    let ident = |s: &str| -> Vec<String> {
        s.split("::")
            .map(|p| {
                p.trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect::<String>()
            })
            .take_while(|p| !p.is_empty())
            .collect()
    };
    if let Some(inner) = rest.strip_prefix('{') {
        let mut out = Vec::new();
        let (mut depth, mut cur) = (0, String::new());
        for ch in inner.chars() {
            match ch {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(ident(&cur));
                    cur.clear();
                    continue;
                }
                _ => {}
            }
            cur.push(ch);
        }
        out.push(ident(&cur));
        out.retain(|p| !p.is_empty());
        out
    } else {
        vec![ident(rest)]
    }
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let sources: Vec<(ModPath, String)> = all
        .iter()
        .map(|p| {
            let rel = p
                .strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let text = std::fs::read_to_string(p).expect("readable");
            (module_of(&rel), code(&text))
        })
        .collect();
    let known: BTreeSet<ModPath> = sources.iter().map(|(m, _)| m.clone()).collect();
    // The longest module that a full path names (its items belong to it).
    let resolve = |path: &[String]| -> ModPath {
        (0..=path.len())
            .rev()
            .map(|i| path[..i].to_vec())
            .find(|p| known.contains(p))
            .unwrap_or_default()
    };
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (me, text) in &sources {
        let from = node(me);
        let mut refs = BTreeSet::new();
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < text.len() {
            // A path starts at an identifier that does not follow `::` or another
            // identifier character.
            let starts = bytes[i].is_ascii_alphabetic()
                && (i == 0 || {
                    let p = bytes[i - 1];
                    !(p.is_ascii_alphanumeric() || p == b'_' || p == b':')
                });
            if !starts {
                i += 1;
                continue;
            }
            let rest = &text[i..];
            let word: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let after = &rest[word.len()..];
            i += word.len().max(1);
            let Some(tail) = after.strip_prefix("::") else {
                continue;
            };
            let (base, tail): (ModPath, &str) = match word.as_str() {
                "crate" => (Vec::new(), tail),
                "self" => (me.clone(), tail),
                "super" => {
                    let mut b = me.clone();
                    b.pop();
                    let mut t = tail;
                    while let Some(more) = t.strip_prefix("super::") {
                        b.pop();
                        t = more;
                    }
                    (b, t)
                }
                // A child module by its name.
                w => {
                    let mut child = me.clone();
                    child.push(w.to_string());
                    if !known.contains(&child) {
                        continue;
                    }
                    (me.clone(), rest)
                }
            };
            for p in paths_after(tail) {
                let mut full = base.clone();
                full.extend(p);
                let to = node(&resolve(&full));
                if to != from {
                    refs.insert(to);
                }
            }
        }
        g.entry(from).or_default().extend(refs);
    }
    g
}

/// A cycle in `g`, if there is one.
fn cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.into(), 1);
        stack.push(n.into());
        for m in g.get(n).into_iter().flatten() {
            match state.get(m.as_str()) {
                Some(1) => {
                    let at = stack.iter().position(|x| x == m).unwrap();
                    let mut c = stack[at..].to_vec();
                    c.push(m.clone());
                    return Some(c);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(m, g, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(n.into(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in g.keys() {
        if !state.contains_key(n.as_str()) {
            if let Some(c) = visit(n, g, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn modules_depend_only_downward() {
    let g = graph();
    let has = |a: &str, b: &str| g.get(a).is_some_and(|s| s.contains(b));
    // The check sees what it must: the simulator uses the fabric below it, ...
    assert!(has("timed::sim", "functional"), "{g:#?}");
    assert!(has("functional", "kinds"), "{g:#?}");
    // ... the engine its TLP record and a component's state, and a component the engine.
    assert!(has("timed::engine", "timed::tlp"), "{g:#?}");
    assert!(has("timed::engine", "timed::slot::state"), "{g:#?}");
    assert!(has("timed::ats", "timed::engine"), "{g:#?}");
    assert!(has("timed::link", "timed::dll"), "{g:#?}");
    assert!(has("drivers::nic", "timed"), "{g:#?}");
    // The built-in kinds register themselves below the registry.
    assert!(has("kinds::builtin", "kinds::dma_engine"), "{g:#?}");
    assert!(has("kinds::dma_engine", "kinds"), "{g:#?}");
    assert_eq!(cycle(&g), None, "{g:#?}");
    // And it would see a cycle: a component's state that used the engine, or the
    // engine that used a component's behaviour.
    for (a, b) in [
        ("timed::slot::state", "timed::engine"),
        ("timed::engine", "timed::ats"),
        ("kinds", "timed::sim"),
        ("kinds", "kinds::d2d"),
    ] {
        let mut bad = g.clone();
        bad.get_mut(a).unwrap().insert(b.into());
        assert!(cycle(&bad).is_some(), "{a} -> {b}");
    }
}

#[test]
fn the_reference_parser_reads_grouped_and_relative_paths() {
    let p = paths_after("{a, b::{c, d}, e::F}");
    assert_eq!(p, [vec!["a"], vec!["b"], vec!["e", "F"]]);
    assert_eq!(paths_after("x::y::Z;"), [vec!["x", "y", "Z"]]);
    assert_eq!(module_of("timed/ats/mod.rs"), ["timed", "ats"]);
    assert_eq!(module_of("timed/ats/state.rs"), ["timed", "ats", "state"]);
    assert_eq!(paths_after("*;"), [Vec::<String>::new()]);
    assert_eq!(node(&module_of("kinds/d2d.rs")), "kinds::d2d");
    assert_eq!(node(&module_of("lib.rs")), "crate");
}
