//! Topology files: the TOML format of `docs/design.md`, loaded and checked.
//!
//! ```toml
//! seed = 1
//! [[node]]
//! name = "rc"
//! kind = "root-complex"
//! ports = 2
//! [[node]]
//! name = "mem0"
//! kind = "psmem"
//! bar_size = "16MiB"
//! [[link]]
//! up = "rc.0"          # "<node>.<port index>" on the upstream side
//! down = "mem0"        # the downstream node (its upstream port)
//! gen = 3              # 1..=6
//! width = 8            # 1, 2, 4, 8, 16, 32
//! ```
//!
//! Which keys a node may have depends on its kind; the [`KindRegistry`] lists them with
//! their types and defaults (see [`crate::kinds`] for the built-in kinds). Every error
//! names the file, the line, the key and what is allowed, e.g.
//! `net.toml:7: key "kind": unknown kind "sw"; allowed: root-complex, switch, psmem, nic, simple-nic, dma-engine, d2d-ssd, d2d-nic`.
//!
//! The loader checks: unknown top-level, node and link keys; wrong value types and
//! ranges; unknown kinds; duplicate or malformed names; links to missing nodes or
//! ports; a port used twice (a downstream port in two links, or a node below two
//! links); cycles; nodes unreachable from the root complex; more than 256 buses; a link
//! generation or width above what either end supports (`max_gen`, `max_width`).
//!
//! ```
//! use pcielab_fabric::kinds::KindRegistry;
//! use pcielab_fabric::topology::Topology;
//! let text = "[[node]]\nname = \"rc\"\nkind = \"root-complex\"\n\
//!             [[node]]\nname = \"m\"\nkind = \"psmem\"\n\
//!             [[link]]\nup = \"rc.0\"\ndown = \"m\"\ngen = 4\nwidth = 4\n";
//! let topo = Topology::parse(text, "doc.toml", &KindRegistry::builtin()).unwrap();
//! assert_eq!(topo.nodes.len(), 2);
//! let err = Topology::parse(&text.replace("gen = 4", "gen = 7"), "doc.toml", &KindRegistry::builtin()).unwrap_err();
//! assert_eq!(err.to_string(), "doc.toml:10: key \"gen\": 7 is out of range; allowed: 1..=6");
//! ```

use crate::kinds::{KeyType, KindRegistry, KindRole, ParamValue, Params};
use core::fmt;
use pcielab_wire::Generation;
use std::collections::BTreeMap;
use std::ops::Range;
use toml_edit::{Document, Item, Table, Value};

/// Index of a node in [`Topology::nodes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u32);

impl NodeId {
    /// The index into `Topology::nodes`.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// One `[[node]]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Unique name (`[a-z0-9_-]+`).
    pub name: String,
    /// Kind name, as registered.
    pub kind: String,
    /// Every key of the kind, with defaults filled in.
    pub params: Params,
    /// Line of the `[[node]]` header.
    pub line: usize,
}

/// One `[[link]]`: an upstream port to a downstream node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// Upstream node.
    pub up: NodeId,
    /// Downstream port index on the upstream node.
    pub up_port: u8,
    /// Downstream node (attached by its upstream port).
    pub down: NodeId,
    /// Link generation.
    pub gen: Generation,
    /// Link width in lanes.
    pub width: u8,
    /// Line of the `[[link]]` header.
    pub line: usize,
}

/// A loaded, checked topology.
#[derive(Debug, Clone, PartialEq)]
pub struct Topology {
    /// File name used in messages.
    pub file: String,
    /// Seed for anything random.
    pub seed: u64,
    /// Nodes, in file order.
    pub nodes: Vec<Node>,
    /// Links, in file order.
    pub links: Vec<Link>,
    /// The `[host]` table: `profile = "NAME"` (a built-in host profile, see
    /// [`crate::host::model`]) and knobs, as `(key, value)` in file order. Checked when
    /// parsed; [`Topology::host_config`] applies them.
    pub host: Vec<(String, String)>,
}

/// An error in a topology file: where and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyError {
    /// File name.
    pub file: String,
    /// 1-based line (0 when the error concerns the whole file).
    pub line: usize,
    /// The key concerned, if any.
    pub key: Option<String>,
    /// What is wrong and what is allowed.
    pub message: String,
}

impl fmt::Display for TopologyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "{}:{}: ", self.file, self.line)?;
        } else {
            write!(f, "{}: ", self.file)?;
        }
        if let Some(k) = &self.key {
            write!(f, "key {k:?}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for TopologyError {}

/// The keys of the top level of a topology file.
pub const TOP_LEVEL_KEYS: [&str; 4] = ["seed", "node", "link", "host"];

/// The keys every `[[node]]` has, whatever its kind (the kind's own keys are in the
/// [`KindRegistry`]).
pub const NODE_KEYS: [&str; 2] = ["name", "kind"];

/// The keys of a `[[link]]`, all required.
pub const LINK_KEYS: [&str; 4] = ["up", "down", "gen", "width"];

/// Widths a link may have.
pub const WIDTHS: [u8; 6] = [1, 2, 4, 8, 16, 32];

struct Ctx<'a> {
    file: &'a str,
    text: &'a str,
}

impl Ctx<'_> {
    fn line(&self, span: Option<Range<usize>>) -> usize {
        match span {
            Some(r) => {
                self.text[..r.start.min(self.text.len())]
                    .matches('\n')
                    .count()
                    + 1
            }
            None => 0,
        }
    }
    fn err(
        &self,
        span: Option<Range<usize>>,
        key: Option<&str>,
        msg: impl Into<String>,
    ) -> TopologyError {
        TopologyError {
            file: self.file.to_string(),
            line: self.line(span),
            key: key.map(str::to_string),
            message: msg.into(),
        }
    }
    /// Span of a key's value (or the key itself) in a table.
    fn key_span(&self, t: &Table, key: &str) -> Option<Range<usize>> {
        t.key(key)
            .and_then(|k| k.span())
            .or_else(|| t.get(key).and_then(|i| i.span()))
            .or_else(|| t.span())
    }
}

fn value_desc(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{:?}", s.value()),
        Value::Integer(i) => i.value().to_string(),
        Value::Float(f) => f.value().to_string(),
        Value::Boolean(b) => b.value().to_string(),
        Value::Datetime(_) => "a date".into(),
        Value::Array(_) => "an array".into(),
        Value::InlineTable(_) => "a table".into(),
    }
}

/// Parses a byte size: decimal or `0x` hex, optionally with a binary unit (`"64KiB"`,
/// `"16M"`, `"1GiB"`, `"4k"`) — the project's one rule, [`pcielab_wire::size::parse_size`],
/// the same as every size flag of the command line.
///
/// ```
/// use pcielab_fabric::topology::parse_size;
/// assert_eq!(parse_size("4K"), Some(4096));
/// assert_eq!(parse_size("4X"), None);
/// ```
pub fn parse_size(s: &str) -> Option<u64> {
    pcielab_wire::size::parse_size(s)
}

fn typed(ctx: &Ctx<'_>, t: &Table, key: &str, ty: KeyType) -> Result<ParamValue, TopologyError> {
    let span = ctx.key_span(t, key);
    let item = t.get(key);
    let Some(v) = item.and_then(Item::as_value) else {
        return Err(ctx.err(
            span,
            Some(key),
            format!("must be a value; allowed: {}", ty.describe()),
        ));
    };
    let bad = || {
        ctx.err(
            span.clone(),
            Some(key),
            format!(
                "{} is not allowed; allowed: {}",
                value_desc(v),
                ty.describe()
            ),
        )
    };
    let range = |n: i64, lo: i64, hi: i64| {
        if n < lo || n > hi {
            Err(ctx.err(
                span.clone(),
                Some(key),
                format!("{n} is out of range; allowed: {}", ty.describe()),
            ))
        } else {
            Ok(n)
        }
    };
    match ty {
        KeyType::Int { min, max } => {
            let n = v.as_integer().ok_or_else(bad)?;
            Ok(ParamValue::Int(range(n, min, max)?))
        }
        KeyType::Bool => Ok(ParamValue::Bool(v.as_bool().ok_or_else(bad)?)),
        KeyType::Str => Ok(ParamValue::Str(v.as_str().ok_or_else(bad)?.to_string())),
        KeyType::Choice(names) => {
            let s = v.as_str().ok_or_else(bad)?;
            if !names.contains(&s) {
                return Err(ctx.err(
                    span,
                    Some(key),
                    format!("{s:?} is not allowed; allowed: {}", ty.describe()),
                ));
            }
            Ok(ParamValue::Str(s.to_string()))
        }
        KeyType::Size { min, max, pow2 } => {
            let n = match v {
                Value::Integer(i) => u64::try_from(*i.value()).map_err(|_| bad())?,
                Value::String(s) => parse_size(s.value()).ok_or_else(bad)?,
                _ => return Err(bad()),
            };
            if n < min || n > max || (pow2 && !n.is_power_of_two()) {
                return Err(ctx.err(
                    span,
                    Some(key),
                    format!("{n} is not allowed; allowed: {}", ty.describe()),
                ));
            }
            Ok(ParamValue::Int(n as i64))
        }
        KeyType::Gen => {
            let n = v.as_integer().ok_or_else(bad)?;
            Ok(ParamValue::Int(range(n, 1, 6)?))
        }
        KeyType::Width => {
            let n = v.as_integer().ok_or_else(bad)?;
            if !WIDTHS.iter().any(|&w| w as i64 == n) {
                return Err(ctx.err(
                    span,
                    Some(key),
                    format!("{n} is not a link width; allowed: {}", ty.describe()),
                ));
            }
            Ok(ParamValue::Int(n))
        }
    }
}

fn tables<'a>(ctx: &Ctx<'_>, item: &'a Item, key: &str) -> Result<Vec<&'a Table>, TopologyError> {
    match item {
        Item::ArrayOfTables(a) => Ok(a.iter().collect()),
        other => Err(ctx.err(
            other.span(),
            Some(key),
            format!("must be written as [[{key}]] tables"),
        )),
    }
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

impl Topology {
    /// Reads and checks a topology file.
    pub fn load(
        path: &std::path::Path,
        registry: &KindRegistry,
    ) -> Result<Topology, TopologyError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| TopologyError {
            file: file.clone(),
            line: 0,
            key: None,
            message: format!("cannot read: {e}"),
        })?;
        Topology::parse(&text, &file, registry)
    }

    /// Parses and checks topology text; `file` names it in errors.
    pub fn parse(
        text: &str,
        file: &str,
        registry: &KindRegistry,
    ) -> Result<Topology, TopologyError> {
        let ctx = Ctx { file, text };
        let doc = Document::parse(text)
            .map_err(|e| ctx.err(e.span(), None, format!("not valid TOML: {}", e.message())))?;
        let root = doc.as_table();
        let mut seed = 0u64;
        let mut host = Vec::new();
        let mut node_tables = Vec::new();
        let mut link_tables = Vec::new();
        for (k, item) in root.iter() {
            match k {
                "seed" => {
                    seed = match item.as_integer() {
                        Some(n) if n >= 0 => n as u64,
                        _ => {
                            return Err(ctx.err(
                                ctx.key_span(root, k),
                                Some(k),
                                "must be a non-negative integer",
                            ))
                        }
                    }
                }
                "host" => {
                    let Some(t) = item.as_table() else {
                        return Err(ctx.err(
                            ctx.key_span(root, k),
                            Some(k),
                            "must be a table: [host]",
                        ));
                    };
                    for (hk, hv) in t.iter() {
                        let span = ctx.key_span(t, hk);
                        let Some(value) = hv.as_value().and_then(crate::host::model::toml_scalar)
                        else {
                            return Err(ctx.err(
                                span,
                                Some(hk),
                                "must be a string, a number or a boolean",
                            ));
                        };
                        let mut scratch = crate::params::SimConfig::default();
                        let checked = if hk == "profile" {
                            crate::host::model::profile(&value).map(|_| ())
                        } else {
                            crate::host::model::apply_knob(&mut scratch, hk, &value)
                        };
                        if let Err(e) = checked {
                            return Err(ctx.err(span, Some(hk), format!("[host]: {e}")));
                        }
                        host.push((hk.to_string(), value));
                    }
                }
                "node" => node_tables = tables(&ctx, item, k)?,
                "link" => link_tables = tables(&ctx, item, k)?,
                other => {
                    return Err(ctx.err(
                        ctx.key_span(root, other),
                        Some(other),
                        format!(
                            "unknown top-level key; allowed: {}",
                            TOP_LEVEL_KEYS.join(", ")
                        ),
                    ))
                }
            }
        }
        // Nodes.
        let mut nodes: Vec<Node> = Vec::new();
        let mut by_name: BTreeMap<String, NodeId> = BTreeMap::new();
        for t in &node_tables {
            let tline = ctx.line(t.span());
            let need_str = |key: &str| -> Result<String, TopologyError> {
                match t.get(key) {
                    None => Err(TopologyError {
                        file: file.into(),
                        line: tline,
                        key: Some(key.into()),
                        message: "missing; every [[node]] needs a name and a kind".into(),
                    }),
                    Some(i) => i.as_str().map(str::to_string).ok_or_else(|| {
                        ctx.err(ctx.key_span(t, key), Some(key), "must be a string")
                    }),
                }
            };
            let name = need_str("name")?;
            if !valid_name(&name) {
                return Err(ctx.err(
                    ctx.key_span(t, "name"),
                    Some("name"),
                    format!("{name:?} is not a valid name; allowed: [a-z0-9_-]+"),
                ));
            }
            if let Some(prev) = by_name.get(&name) {
                return Err(ctx.err(
                    ctx.key_span(t, "name"),
                    Some("name"),
                    format!(
                        "duplicate node name {name:?} (first defined on line {})",
                        nodes[prev.index()].line
                    ),
                ));
            }
            let kind = need_str("kind")?;
            let Some(spec) = registry.get(&kind) else {
                return Err(ctx.err(
                    ctx.key_span(t, "kind"),
                    Some("kind"),
                    format!(
                        "unknown kind {kind:?}; allowed: {}",
                        registry.names().join(", ")
                    ),
                ));
            };
            let mut params = Params::default();
            for (k, _) in t.iter() {
                if NODE_KEYS.contains(&k) {
                    continue;
                }
                let Some(ks) = spec.keys.iter().find(|s| s.name == k) else {
                    let mut allowed: Vec<&str> = NODE_KEYS.to_vec();
                    allowed.extend(spec.keys.iter().map(|s| s.name));
                    return Err(ctx.err(
                        ctx.key_span(t, k),
                        Some(k),
                        format!(
                            "unknown key for kind {kind:?}; allowed: {}",
                            allowed.join(", ")
                        ),
                    ));
                };
                params.set(
                    ks.name,
                    typed(&ctx, t, k, ks.ty)?,
                    ctx.line(ctx.key_span(t, k)),
                );
            }
            for ks in &spec.keys {
                if !params.contains(ks.name) {
                    if let Some(d) = &ks.default {
                        params.set(ks.name, d.clone(), 0);
                    }
                }
            }
            by_name.insert(name.clone(), NodeId(nodes.len() as u32));
            nodes.push(Node {
                name,
                kind,
                params,
                line: tline,
            });
        }
        let roots: Vec<usize> = nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| {
                matches!(
                    registry.get(&n.kind).map(|s| &s.role),
                    Some(KindRole::RootComplex)
                )
            })
            .map(|(i, _)| i)
            .collect();
        match roots.as_slice() {
            [_] => {}
            [] => {
                return Err(TopologyError {
                    file: file.into(),
                    line: 0,
                    key: Some("kind".into()),
                    message: "no node of kind \"root-complex\"; a topology needs exactly one"
                        .into(),
                })
            }
            [_, second, ..] => {
                return Err(TopologyError {
                    file: file.into(),
                    line: nodes[*second].line,
                    key: Some("kind".into()),
                    message: format!(
                    "a second root complex (the first is {:?} on line {}); exactly one is allowed",
                    nodes[roots[0]].name, nodes[roots[0]].line
                ),
                })
            }
        }
        let ports_of = |n: &Node| -> u8 {
            match registry.get(&n.kind).map(|s| &s.role) {
                Some(KindRole::RootComplex) | Some(KindRole::Switch) => {
                    n.params.int("ports").unwrap_or(1) as u8
                }
                _ => 0,
            }
        };
        // Links.
        let mut links: Vec<Link> = Vec::new();
        let mut up_used: BTreeMap<(NodeId, u8), usize> = BTreeMap::new();
        let mut down_used: BTreeMap<NodeId, usize> = BTreeMap::new();
        for t in &link_tables {
            let tline = ctx.line(t.span());
            for (k, _) in t.iter() {
                if !LINK_KEYS.contains(&k) {
                    return Err(ctx.err(
                        ctx.key_span(t, k),
                        Some(k),
                        format!(
                            "unknown key for [[link]]; allowed: {}",
                            LINK_KEYS.join(", ")
                        ),
                    ));
                }
            }
            let need = |key: &str| -> Result<(), TopologyError> {
                if t.contains_key(key) {
                    Ok(())
                } else {
                    Err(TopologyError {
                        file: file.into(),
                        line: tline,
                        key: Some(key.into()),
                        message: "missing; every [[link]] needs up, down, gen and width".into(),
                    })
                }
            };
            for k in LINK_KEYS {
                need(k)?;
            }
            let up_s = match typed(&ctx, t, "up", KeyType::Str)? {
                ParamValue::Str(s) => s,
                _ => unreachable_str(),
            };
            let down_s = match typed(&ctx, t, "down", KeyType::Str)? {
                ParamValue::Str(s) => s,
                _ => unreachable_str(),
            };
            let gen_n = typed(&ctx, t, "gen", KeyType::Gen)?.as_int().unwrap_or(1);
            let width = typed(&ctx, t, "width", KeyType::Width)?
                .as_int()
                .unwrap_or(1) as u8;
            let up_span = ctx.key_span(t, "up");
            let Some((up_name, port_s)) = up_s.rsplit_once('.') else {
                return Err(ctx.err(
                    up_span,
                    Some("up"),
                    format!("{up_s:?} is not \"<node>.<port index>\", e.g. \"rc.0\""),
                ));
            };
            let Some(&up) = by_name.get(up_name) else {
                return Err(ctx.err(
                    up_span,
                    Some("up"),
                    format!("no node named {up_name:?}; nodes: {}", names(&nodes)),
                ));
            };
            let nports = ports_of(&nodes[up.index()]);
            if nports == 0 {
                return Err(ctx.err(up_span, Some("up"), format!("node {up_name:?} (kind {:?}) has no downstream ports; only root-complex and switch nodes do", nodes[up.index()].kind)));
            }
            let port: u8 = match port_s.parse::<u8>() {
                Ok(p) if p < nports => p,
                _ => {
                    return Err(ctx.err(
                        up_span,
                        Some("up"),
                        format!(
                            "node {up_name:?} has no port {port_s:?}; allowed: 0..={}",
                            nports - 1
                        ),
                    ))
                }
            };
            let down_span = ctx.key_span(t, "down");
            let Some(&down) = by_name.get(down_s.as_str()) else {
                return Err(ctx.err(
                    down_span,
                    Some("down"),
                    format!("no node named {down_s:?}; nodes: {}", names(&nodes)),
                ));
            };
            if matches!(
                registry.get(&nodes[down.index()].kind).map(|s| &s.role),
                Some(KindRole::RootComplex)
            ) {
                return Err(ctx.err(
                    down_span,
                    Some("down"),
                    "a root complex has no upstream port; it cannot be below a link",
                ));
            }
            if let Some(prev) = up_used.insert((up, port), tline) {
                return Err(ctx.err(
                    up_span,
                    Some("up"),
                    format!("port {up_s:?} is already used by the link on line {prev}"),
                ));
            }
            if let Some(prev) = down_used.insert(down, tline) {
                return Err(ctx.err(down_span, Some("down"), format!("the upstream port of {down_s:?} is already used by the link on line {prev}")));
            }
            let gen = Generation::from_number(gen_n as u8)
                .map_err(|_| ctx.err(ctx.key_span(t, "gen"), Some("gen"), "allowed: 1..=6"))?;
            for (end, id) in [("up", up), ("down", down)] {
                let n = &nodes[id.index()];
                if let Some(mg) = n.params.int("max_gen") {
                    if gen.number() as i64 > mg {
                        return Err(ctx.err(ctx.key_span(t, "gen"), Some("gen"), format!("gen {} is above what {end} node {:?} supports (max_gen = {mg}, line {}); allowed: 1..={mg}", gen.number(), n.name, n.line)));
                    }
                }
                if let Some(mw) = n.params.int("max_width") {
                    if width as i64 > mw {
                        let allowed: Vec<String> = WIDTHS
                            .iter()
                            .filter(|&&w| w as i64 <= mw)
                            .map(|w| w.to_string())
                            .collect();
                        return Err(ctx.err(ctx.key_span(t, "width"), Some("width"), format!("width {width} is above what {end} node {:?} supports (max_width = {mw}, line {}); allowed: {}", n.name, n.line, allowed.join(", "))));
                    }
                }
            }
            links.push(Link {
                up,
                up_port: port,
                down,
                gen,
                width,
                line: tline,
            });
        }
        // Cycles and reachability: follow upstream links from every node.
        let parent: BTreeMap<NodeId, &Link> = links.iter().map(|l| (l.down, l)).collect();
        for (i, n) in nodes.iter().enumerate() {
            let start = NodeId(i as u32);
            let mut at = start;
            let mut steps = 0;
            while let Some(l) = parent.get(&at) {
                at = l.up;
                steps += 1;
                if at == start || steps > nodes.len() {
                    return Err(TopologyError {
                        file: file.into(),
                        line: l.line,
                        key: Some("up".into()),
                        message: format!("links form a cycle through node {:?}; a topology is a tree below the root complex", n.name),
                    });
                }
            }
            if at.index() != roots[0] {
                return Err(TopologyError {
                    file: file.into(),
                    line: nodes[at.index()].line,
                    key: Some("name".into()),
                    message: format!(
                        "node {:?} is not reachable from the root complex {:?}; add a [[link]] with down = {:?}",
                        nodes[at.index()].name, nodes[roots[0]].name, nodes[at.index()].name
                    ),
                });
            }
        }
        // Bus numbers: bus 0, one per root port, one internal bus per switch and one
        // per switch downstream port.
        let mut buses = 1usize;
        for n in &nodes {
            match registry.get(&n.kind).map(|s| &s.role) {
                Some(KindRole::RootComplex) => buses += ports_of(n) as usize,
                Some(KindRole::Switch) => buses += 1 + ports_of(n) as usize,
                _ => {}
            }
            if buses > 256 {
                return Err(TopologyError {
                    file: file.into(),
                    line: n.line,
                    key: Some("ports".into()),
                    message: format!("the topology needs more than 256 bus numbers (at node {:?}); use fewer switches or ports", n.name),
                });
            }
        }
        Ok(Topology {
            file: file.to_string(),
            seed,
            nodes,
            links,
            host,
        })
    }

    /// Applies the `[host]` table to `cfg`: its profile first, then its knobs (which
    /// override the profile's), in file order.
    ///
    /// ```
    /// use pcielab_fabric::{kinds::KindRegistry, topology::Topology, timed::SimConfig};
    /// let t = Topology::parse(
    ///     "[host]\nprofile = \"gem5-table2\"\nrc_ns = 75\n[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n",
    ///     "h.toml", &KindRegistry::builtin()).unwrap();
    /// let mut cfg = SimConfig::default();
    /// t.host_config(&mut cfg).unwrap();
    /// assert_eq!(cfg.rc_latency.as_ps(), 75_000);
    /// assert!(cfg.host.mmio_read.as_ps() > 0);
    /// ```
    pub fn host_config(&self, cfg: &mut crate::params::SimConfig) -> Result<(), String> {
        self.host_config_with(cfg, None)
    }

    /// Like [`Topology::host_config`], with `profile` (when given) in place of the
    /// table's own profile (as `--host` replaces it); the table's knobs still apply.
    pub fn host_config_with(
        &self,
        cfg: &mut crate::params::SimConfig,
        profile: Option<&str>,
    ) -> Result<(), String> {
        let own = self
            .host
            .iter()
            .find(|(k, _)| k == "profile")
            .map(|(_, p)| p.as_str());
        if let Some(p) = profile.or(own) {
            crate::host::model::profile(p)?.apply(cfg)?;
        }
        for (k, v) in self.host.iter().filter(|(k, _)| k != "profile") {
            crate::host::model::apply_knob(cfg, k, v)?;
        }
        Ok(())
    }

    /// The node called `name`.
    pub fn node(&self, name: &str) -> Option<NodeId> {
        self.nodes
            .iter()
            .position(|n| n.name == name)
            .map(|i| NodeId(i as u32))
    }

    /// The link above `node`, if any.
    pub fn uplink(&self, node: NodeId) -> Option<&Link> {
        self.links.iter().find(|l| l.down == node)
    }

    /// The link on downstream port `port` of `node`, if any.
    pub fn downlink(&self, node: NodeId, port: u8) -> Option<&Link> {
        self.links
            .iter()
            .find(|l| l.up == node && l.up_port == port)
    }
}

fn unreachable_str() -> String {
    String::new()
}

fn names(nodes: &[Node]) -> String {
    nodes
        .iter()
        .map(|n| n.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"seed = 7
[[node]]
name = "rc"
kind = "root-complex"
ports = 2
[[node]]
name = "sw0"
kind = "switch"
ports = 3
[[node]]
name = "mem0"
kind = "psmem"
[[link]]
up = "rc.0"
down = "sw0"
gen = 3
width = 8
[[link]]
up = "sw0.1"
down = "mem0"
gen = 3
width = 8
"#;

    fn parse(t: &str) -> Result<Topology, TopologyError> {
        Topology::parse(t, "t.toml", &KindRegistry::builtin())
    }

    fn err(t: &str) -> String {
        parse(t).unwrap_err().to_string()
    }

    #[test]
    fn loads_the_design_example() {
        let t = parse(GOOD).unwrap();
        assert_eq!(t.seed, 7);
        assert_eq!(t.nodes.len(), 3);
        assert_eq!(t.links.len(), 2);
        assert_eq!(t.links[1].up_port, 1);
        assert_eq!(t.links[1].width, 8);
        assert_eq!(t.links[0].line, 13);
        assert_eq!(t.nodes[1].params.int("ports"), Some(3));
    }

    /// Each row: an edit of GOOD and the exact message expected (written by hand).
    #[test]
    fn errors_name_file_line_key_and_allowed_values() {
        let rows: &[(&str, &str, &str)] = &[
            ("kind = \"switch\"", "kind = \"sw\"", "t.toml:8: key \"kind\": unknown kind \"sw\"; allowed: root-complex, switch, psmem, nic, simple-nic, dma-engine, d2d-ssd, d2d-nic"),
            ("ports = 3", "ports = 3\ncolour = 1", "t.toml:10: key \"colour\": unknown key for kind \"switch\"; allowed: name, kind, ports, hotplug, hotplug_power, max_gen, max_width, mps, aspm, vendor_id, device_id"),
            ("name = \"mem0\"", "name = \"sw0\"", "t.toml:11: key \"name\": duplicate node name \"sw0\" (first defined on line 6)"),
            ("up = \"sw0.1\"", "up = \"rc.0\"", "t.toml:19: key \"up\": port \"rc.0\" is already used by the link on line 13"),
            ("up = \"sw0.1\"", "up = \"sw9.1\"", "t.toml:19: key \"up\": no node named \"sw9\"; nodes: rc, sw0, mem0"),
            ("up = \"sw0.1\"", "up = \"sw0.3\"", "t.toml:19: key \"up\": node \"sw0\" has no port \"3\"; allowed: 0..=2"),
            ("down = \"mem0\"", "down = \"sw0\"", "t.toml:20: key \"down\": the upstream port of \"sw0\" is already used by the link on line 13"),
            ("seed = 7", "seed = 7\nfoo = 1", "t.toml:2: key \"foo\": unknown top-level key; allowed: seed, node, link, host"),
            ("width = 8\n[[link]]\nup = \"sw0.1\"", "width = 3\n[[link]]\nup = \"sw0.1\"", "t.toml:17: key \"width\": 3 is not a link width; allowed: 1, 2, 4, 8, 16, 32"),
            ("kind = \"psmem\"", "kind = \"psmem\"\nmax_width = 4", "t.toml:23: key \"width\": width 8 is above what down node \"mem0\" supports (max_width = 4, line 10); allowed: 1, 2, 4"),
            ("kind = \"psmem\"", "kind = \"psmem\"\nmax_gen = 2", "t.toml:22: key \"gen\": gen 3 is above what down node \"mem0\" supports (max_gen = 2, line 10); allowed: 1..=2"),
            ("kind = \"psmem\"", "kind = \"psmem\"\naspm = \"l2\"", "t.toml:13: key \"aspm\": \"l2\" is not allowed; allowed: \"none\", \"l0s\", \"l1\", \"l0s-l1\""),
            ("kind = \"psmem\"", "kind = \"psmem\"\naspm = 1", "t.toml:13: key \"aspm\": 1 is not allowed; allowed: \"none\", \"l0s\", \"l1\", \"l0s-l1\""),
            ("kind = \"psmem\"", "kind = \"psmem\"\nbar_size = \"3KiB\"", "t.toml:13: key \"bar_size\": 3072 is not allowed; allowed: a power of two from 16 B to 1 TiB (e.g. \"64KiB\", \"16MiB\")"),
        ];
        for (from, to, want) in rows {
            assert!(GOOD.contains(from), "{from}");
            assert_eq!(
                &err(&GOOD.replacen(from, to, 1)),
                want,
                "edit {from:?} -> {to:?}"
            );
        }
    }

    #[test]
    fn unreachable_cycle_and_bus_limits() {
        let t = GOOD.replace(
            "[[link]]\nup = \"sw0.1\"\ndown = \"mem0\"\ngen = 3\nwidth = 8\n",
            "",
        );
        assert_eq!(err(&t), "t.toml:10: key \"name\": node \"mem0\" is not reachable from the root complex \"rc\"; add a [[link]] with down = \"mem0\"");
        let cyc = "[[node]]\nname = \"rc\"\nkind = \"root-complex\"\n\
                   [[node]]\nname = \"a\"\nkind = \"switch\"\n\
                   [[node]]\nname = \"b\"\nkind = \"switch\"\n\
                   [[link]]\nup = \"a.0\"\ndown = \"b\"\ngen = 1\nwidth = 1\n\
                   [[link]]\nup = \"b.0\"\ndown = \"a\"\ngen = 1\nwidth = 1\n";
        let e = parse(cyc).unwrap_err();
        assert!(e.message.contains("cycle"), "{e}");
        assert_eq!(e.line, 10);
        // 1 + 8 root ports + 8 switches × (1 + 32) = 273 buses.
        let mut big = String::from("[[node]]\nname = \"rc\"\nkind = \"root-complex\"\nports = 8\n");
        for i in 0..8 {
            big += &format!("[[node]]\nname = \"s{i}\"\nkind = \"switch\"\nports = 32\n[[link]]\nup = \"rc.{i}\"\ndown = \"s{i}\"\ngen = 1\nwidth = 1\n");
        }
        let e = parse(&big).unwrap_err();
        assert!(e.message.contains("more than 256 bus numbers"), "{e}");
        assert_eq!(e.line, 68, "{e}");
        let no_rc = "[[node]]\nname = \"a\"\nkind = \"switch\"\n";
        assert!(err(no_rc).contains("no node of kind \"root-complex\""));
        assert!(err("x = [").contains("t.toml:1: not valid TOML"));
    }

    proptest::proptest! {
        /// Bad input never panics: arbitrary text, and the good file with one byte
        /// replaced anywhere, give a topology or an error.
        #[test]
        fn never_panics(text in "\\PC{0,200}", at in 0usize..400, c in proptest::char::any()) {
            let _ = parse(&text);
            let mut g: Vec<char> = GOOD.chars().collect();
            let i = at % g.len();
            g[i] = c;
            let mutated: String = g.into_iter().collect();
            if let Err(e) = parse(&mutated) {
                proptest::prop_assert!(e.to_string().starts_with("t.toml"));
            }
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64KiB"), Some(65536));
        assert_eq!(parse_size("16MiB"), Some(16 << 20));
        assert_eq!(parse_size("0x1000"), Some(4096));
        assert_eq!(parse_size("2 GiB"), Some(2 << 30));
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("99999999TiB"), None);
    }
}
