//! The crate's modules depend only downward: the graph of `crate::…` references
//! between its top-level modules (`timed` counted as one, `host`'s files each) has no
//! cycle. Checked from the sources, comments left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The module a source file belongs to, at the granularity of the check.
fn module_of(rel: &str) -> Option<String> {
    let rel = rel.trim_end_matches(".rs");
    match rel.split('/').collect::<Vec<_>>()[..] {
        ["lib"] => None,
        ["timed", ..] => Some("timed".into()),
        ["host", "mod"] => Some("host".into()),
        ["host", f] => Some(format!("host::{f}")),
        [f] => Some(f.into()),
        _ => None,
    }
}

/// The code of a source file without comments (line comments, doc comments).
fn code(text: &str) -> String {
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

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in all {
        let rel = p
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let Some(m) = module_of(&rel) else { continue };
        let text = code(&std::fs::read_to_string(&p).expect("readable"));
        let refs = g.entry(m.clone()).or_default();
        let mut rest = text.as_str();
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + 7..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let mut target = name.clone();
            if name == "host" {
                let after = &rest[name.len()..];
                for sub in ["model", "enumerate"] {
                    if after.starts_with(&format!("::{sub}")) {
                        target = format!("host::{sub}");
                    }
                }
            }
            if !target.is_empty() && target != m {
                refs.insert(target);
            }
        }
        if m.starts_with("host::") {
            // `super::` in a host file is the host module.
            if text.contains("super::") && !text.contains("use super::*") {
                refs.insert("host".into());
            }
        }
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
    // The check sees what it must: the simulator uses the fabric below it.
    assert!(g["timed"].contains("functional"), "{g:?}");
    assert!(g["functional"].contains("kinds"), "{g:?}");
    assert_eq!(cycle(&g), None, "{g:#?}");
    // And it would see a cycle.
    let mut bad = g.clone();
    bad.get_mut("kinds").unwrap().insert("timed".into());
    assert!(cycle(&bad).is_some());
}
