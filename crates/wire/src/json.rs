//! JSON form of TLPs with the field names of `docs/design.md` (the specification's, in snake_case).
//!
//! [`tlp_to_json`] produces an object whose keys are the spec's field names in snake_case
//! (`kind`, `fmt`, `type`, `tc`, `tag`, `attr`, `ln`, `th`, `td`, `ep`, `at`, `length_dw`,
//! `requester_id`, `completer_id`, `first_be`, `last_be`, `address`, `status`, `bcm`,
//! `byte_count`, `lower_address`, `msg_code`, `msg_routing`, `register`, `payload`, `ecrc`,
//! `prefixes`); fields a kind does not have are absent. [`tlp_from_json`] accepts the same
//! object (numbers may also be given as `"0x…"` strings) and returns the TLP bytes, so
//! decode → encode is lossless.
//!
//! ```
//! use pcielab_wire::json::{tlp_from_json, tlp_to_json};
//! use pcielab_wire::tlp::TlpRepr;
//! let v: serde_json::Value = serde_json::from_str(
//!     r#"{"kind":"MRd","requester_id":"01:00.0","tag":5,"address":"0x1000","length_dw":16}"#,
//! ).unwrap();
//! let bytes = tlp_from_json(&v).unwrap();
//! let tlp = TlpRepr::parse_bytes(&bytes).unwrap();
//! assert_eq!(tlp_to_json(&tlp)["address"], "0x1000");
//! assert_eq!(tlp_from_json(&tlp_to_json(&tlp)).unwrap(), bytes);
//! ```

use crate::tlp::{
    CfgHeader, CplHeader, IoHeader, MemHeader, MemOp, MsgCode, MsgFields, MsgHeader, MsgRouting,
    Prefix, PrefixKind, Prefixes, TlpHeader, TlpKind, TlpPacket, TlpRepr,
};
use crate::types::{AddressType, Attr, Bdf, ByteEnables, CplStatus, Tag, TrafficClass};
use serde_json::{json, Map, Value};
use std::fmt;

/// What is wrong with a JSON TLP: the key and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    /// The offending key (empty for the object itself).
    pub key: String,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "field \"{}\": {}", self.key, self.reason)
        }
    }
}

impl std::error::Error for JsonError {}

fn jerr(key: &str, reason: impl Into<String>) -> JsonError {
    JsonError {
        key: key.to_string(),
        reason: reason.into(),
    }
}

/// Lower-case hexadecimal of bytes, no separators.
pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from_digit((b >> 4) as u32, 16).unwrap_or('0'));
        s.push(char::from_digit((b & 0xf) as u32, 16).unwrap_or('0'));
    }
    s
}

/// Parses hexadecimal text as pasted from analyzers and dumps: separators (whitespace,
/// `,`, `:`, `;`, `-`, `_`) anywhere, and a `0x` prefix on any group.
///
/// ```
/// use pcielab_wire::json::unhex;
/// let want = vec![0x04, 0x00, 0x00, 0x01];
/// assert_eq!(unhex("04000001"), Ok(want.clone()));
/// assert_eq!(unhex("0x04 0x00 0x00 0x01"), Ok(want.clone()));
/// assert_eq!(unhex("04,00,00,01"), Ok(want.clone()));
/// assert_eq!(unhex("04:00:00:01"), Ok(want.clone()));
/// assert_eq!(unhex("0x0400_0001"), Ok(want));
/// assert!(unhex("0x4").is_err());
/// ```
pub fn unhex(s: &str) -> Result<Vec<u8>, String> {
    let is_sep = |c: char| c.is_whitespace() || matches!(c, ',' | ':' | ';' | '-' | '_');
    let chars: Vec<(usize, char)> = s.char_indices().collect();
    let mut digits: Vec<(usize, char)> = Vec::with_capacity(chars.len());
    let mut i = 0;
    let mut group_start = true;
    while i < chars.len() {
        let (at, c) = chars[i];
        if is_sep(c) {
            group_start = true;
            i += 1;
            continue;
        }
        if group_start && c == '0' && matches!(chars.get(i + 1), Some((_, 'x' | 'X'))) {
            i += 2;
            group_start = false;
            continue;
        }
        group_start = false;
        digits.push((at, c));
        i += 1;
    }
    if digits.len() % 2 != 0 {
        return Err(format!("odd number of hex digits ({})", digits.len()));
    }
    let val = |(i, c): (usize, char)| -> Result<u8, String> {
        c.to_digit(16)
            .map(|d| d as u8)
            .ok_or_else(|| format!("'{c}' at character {i} is not a hex digit"))
    };
    digits
        .chunks(2)
        .map(|p| Ok(val(p[0])? << 4 | val(p[1])?))
        .collect()
}

fn addr_str(a: u64) -> String {
    format!("{a:#x}")
}

/// The JSON object of a TLP.
pub fn tlp_to_json(t: &TlpRepr<'_>) -> Value {
    let mut m = Map::new();
    let kind = t.kind();
    m.insert("kind".into(), json!(kind.name()));
    m.insert("fmt".into(), json!(t.fmt().raw()));
    m.insert("type".into(), json!(t.type_raw()));
    m.insert("tc".into(), json!(t.tc.value()));
    m.insert("tag".into(), json!(t.tag().value()));
    m.insert(
        "attr".into(),
        json!({"ro": t.attr.ro, "ns": t.attr.ns, "ido": t.attr.ido}),
    );
    m.insert("ln".into(), json!(t.ln));
    m.insert("th".into(), json!(t.th));
    m.insert("td".into(), json!(t.td));
    m.insert("ep".into(), json!(t.ep));
    m.insert("at".into(), json!(t.at.raw()));
    m.insert("length_dw".into(), json!(t.length_dw()));
    match t.header {
        TlpHeader::Mem(h) => {
            m.insert("requester_id".into(), json!(h.requester_id.to_string()));
            m.insert("first_be".into(), json!(h.first_be.bits()));
            m.insert("last_be".into(), json!(h.last_be.bits()));
            m.insert("address".into(), json!(addr_str(h.address)));
            m.insert("ph".into(), json!(h.ph));
        }
        TlpHeader::Io(h) => {
            m.insert("requester_id".into(), json!(h.requester_id.to_string()));
            m.insert("first_be".into(), json!(h.first_be.bits()));
            m.insert("last_be".into(), json!(0));
            m.insert("address".into(), json!(addr_str(h.address as u64)));
        }
        TlpHeader::Cfg(h) => {
            m.insert("requester_id".into(), json!(h.requester_id.to_string()));
            m.insert("completer_id".into(), json!(h.target.to_string()));
            m.insert("first_be".into(), json!(h.first_be.bits()));
            m.insert("last_be".into(), json!(0));
            m.insert("register".into(), json!(h.register));
        }
        TlpHeader::Msg(h) => {
            m.insert("requester_id".into(), json!(h.requester_id.to_string()));
            m.insert("msg_code".into(), json!(h.code.raw()));
            if let Some(n) = h.code.name() {
                m.insert("msg_name".into(), json!(n));
            }
            m.insert("msg_routing".into(), json!(h.routing.name()));
            m.insert("msg_fields".into(), json!(hex(&h.fields.0)));
            match h.routing {
                MsgRouting::ByAddress => {
                    m.insert("address".into(), json!(addr_str(h.fields.u64())));
                }
                MsgRouting::ById => {
                    m.insert(
                        "target_id".into(),
                        json!(h.fields.destination_id().to_string()),
                    );
                }
                _ => {}
            }
            let f = h.fields;
            match h.code {
                MsgCode::VendorDefinedType0 | MsgCode::VendorDefinedType1 => {
                    m.insert("vendor_id".into(), json!(f.vendor_id()));
                    m.insert("vendor_data".into(), json!(f.vendor_data()));
                }
                MsgCode::Ltr => {
                    m.insert("ltr_no_snoop".into(), json!(f.ltr_no_snoop()));
                    m.insert("ltr_snoop".into(), json!(f.ltr_snoop()));
                }
                MsgCode::Obff => {
                    m.insert("obff_code".into(), json!(f.obff_code()));
                }
                MsgCode::AtsInvalidateRequest => {
                    m.insert("itag".into(), json!(f.itag()));
                }
                MsgCode::AtsInvalidateCompletion => {
                    m.insert("completion_count".into(), json!(f.completion_count()));
                    m.insert("itag_vector".into(), json!(f.itag_vector()));
                }
                MsgCode::PageRequest => {
                    m.insert("page_address".into(), json!(addr_str(f.page_address())));
                    m.insert("prg_index".into(), json!(f.prg_index(h.code)));
                    let (r, w, l) = f.page_request_flags();
                    m.insert("read_access".into(), json!(r));
                    m.insert("write_access".into(), json!(w));
                    m.insert("last_in_group".into(), json!(l));
                }
                MsgCode::PrgResponse => {
                    m.insert("prg_index".into(), json!(f.prg_index(h.code)));
                    m.insert("response_code".into(), json!(f.prg_response_code()));
                }
                _ => {}
            }
        }
        TlpHeader::Cpl(h) => {
            m.insert("completer_id".into(), json!(h.completer_id.to_string()));
            m.insert("requester_id".into(), json!(h.requester_id.to_string()));
            m.insert("status".into(), json!(h.status.name()));
            m.insert("bcm".into(), json!(h.bcm));
            m.insert("byte_count".into(), json!(h.byte_count));
            m.insert("lower_address".into(), json!(h.lower_address));
        }
    }
    if kind.has_data() {
        m.insert("payload".into(), json!(hex(t.payload)));
    }
    let ecrc = if t.td {
        t.to_vec()
            .ok()
            .and_then(|v| TlpPacket::new_checked(&v[..]).ok().and_then(|p| p.ecrc()))
            .map(|c| json!(hex(&c.to_le_bytes())))
            .unwrap_or(Value::Null)
    } else {
        Value::Null
    };
    m.insert("ecrc".into(), ecrc);
    let prefixes: Vec<Value> = t
        .prefix_list()
        .iter()
        .map(|p| {
            let mut o = Map::new();
            o.insert("kind".into(), json!(p.kind().name()));
            o.insert("content".into(), json!(p.content()));
            if let Some((pasid, exe, pm)) = p.pasid() {
                o.insert("pasid".into(), json!(pasid));
                o.insert("execute".into(), json!(exe));
                o.insert("privileged".into(), json!(pm));
            }
            Value::Object(o)
        })
        .collect();
    m.insert("prefixes".into(), Value::Array(prefixes));
    Value::Object(m)
}

const COMMON_KEYS: &[&str] = &[
    "kind",
    "fmt",
    "type",
    "tc",
    "tag",
    "attr",
    "ln",
    "th",
    "td",
    "ep",
    "at",
    "length_dw",
    "payload",
    "ecrc",
    "prefixes",
];
const MEM_KEYS: &[&str] = &["requester_id", "first_be", "last_be", "address", "ph"];
const IO_KEYS: &[&str] = &["requester_id", "first_be", "last_be", "address"];
const CFG_KEYS: &[&str] = &[
    "requester_id",
    "completer_id",
    "first_be",
    "last_be",
    "register",
];
const MSG_KEYS: &[&str] = &[
    "requester_id",
    "msg_code",
    "msg_name",
    "msg_routing",
    "msg_fields",
    "address",
    "target_id",
    "vendor_id",
    "vendor_data",
    "ltr_no_snoop",
    "ltr_snoop",
    "obff_code",
    "itag",
    "completion_count",
    "itag_vector",
    "page_address",
    "prg_index",
    "read_access",
    "write_access",
    "last_in_group",
    "response_code",
];
const CPL_KEYS: &[&str] = &[
    "completer_id",
    "requester_id",
    "status",
    "bcm",
    "byte_count",
    "lower_address",
];

struct Obj<'v>(&'v Map<String, Value>);

impl Obj<'_> {
    fn get(&self, k: &str) -> Option<&Value> {
        self.0.get(k).filter(|v| !v.is_null())
    }
    fn uint(&self, k: &str, max: u64) -> Result<Option<u64>, JsonError> {
        let Some(v) = self.get(k) else {
            return Ok(None);
        };
        let n = match v {
            Value::Number(n) => n
                .as_u64()
                .ok_or_else(|| jerr(k, format!("{n} is not a non-negative integer")))?,
            Value::String(s) => {
                let t = s.trim();
                let r = if let Some(h) = t.strip_prefix("0x") {
                    u64::from_str_radix(&h.replace('_', ""), 16)
                } else {
                    t.parse::<u64>()
                };
                r.map_err(|_| jerr(k, format!("\"{s}\" is not a number")))?
            }
            other => return Err(jerr(k, format!("expected a number, found {other}"))),
        };
        if n > max {
            return Err(jerr(k, format!("{n:#x} is out of range (max {max:#x})")));
        }
        Ok(Some(n))
    }
    fn uint_or(&self, k: &str, max: u64, default: u64) -> Result<u64, JsonError> {
        Ok(self.uint(k, max)?.unwrap_or(default))
    }
    fn boolean(&self, k: &str) -> Result<bool, JsonError> {
        match self.get(k) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(jerr(k, format!("expected true or false, found {other}"))),
        }
    }
    fn str(&self, k: &str) -> Result<Option<&str>, JsonError> {
        match self.get(k) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(jerr(k, format!("expected a string, found {other}"))),
        }
    }
    fn bdf(&self, k: &str) -> Result<Bdf, JsonError> {
        match self.str(k)? {
            None => Ok(Bdf::default()),
            Some(s) => s
                .parse::<Bdf>()
                .map_err(|_| jerr(k, format!("\"{s}\" is not an ID of the form bb:dd.f"))),
        }
    }
}

/// Encodes a JSON TLP object into TLP bytes.
pub fn tlp_from_json(v: &Value) -> Result<Vec<u8>, JsonError> {
    let map = v
        .as_object()
        .ok_or_else(|| jerr("", "a TLP must be a JSON object"))?;
    let o = Obj(map);
    let kind_s = o.str("kind")?.ok_or_else(|| jerr("kind", "missing"))?;
    let kind = TlpKind::from_name(kind_s).ok_or_else(|| {
        jerr(
            "kind",
            format!(
                "unknown kind \"{kind_s}\" (allowed: {})",
                TlpKind::ALL.map(|k| k.name()).join(", ")
            ),
        )
    })?;
    let extra: &[&str] = match kind {
        TlpKind::MRd
        | TlpKind::MRdLk
        | TlpKind::MWr
        | TlpKind::FetchAdd
        | TlpKind::Swap
        | TlpKind::CAS => MEM_KEYS,
        TlpKind::IORd | TlpKind::IOWr => IO_KEYS,
        TlpKind::CfgRd0 | TlpKind::CfgWr0 | TlpKind::CfgRd1 | TlpKind::CfgWr1 => CFG_KEYS,
        TlpKind::Msg | TlpKind::MsgD => MSG_KEYS,
        _ => CPL_KEYS,
    };
    for k in map.keys() {
        if !COMMON_KEYS.contains(&k.as_str()) && !extra.contains(&k.as_str()) {
            return Err(jerr(
                k,
                format!(
                    "not a field of {} (allowed: {}, {})",
                    kind.name(),
                    COMMON_KEYS.join(", "),
                    extra.join(", ")
                ),
            ));
        }
    }
    let payload = match o.str("payload")? {
        Some(s) => unhex(s).map_err(|e| jerr("payload", e))?,
        None => Vec::new(),
    };
    if kind.has_data() && payload.is_empty() {
        return Err(jerr(
            "payload",
            format!("{} needs a payload (1..=1024 DW)", kind.name()),
        ));
    }
    if !kind.has_data() && !payload.is_empty() {
        return Err(jerr(
            "payload",
            format!("{} carries no payload", kind.name()),
        ));
    }
    let fmt = o.uint("fmt", 4)?;
    if let Some(f) = fmt {
        let f = f as u8;
        if f & 2 != 0 && !kind.has_data() || f & 2 == 0 && kind.has_data() || f == 4 {
            return Err(jerr(
                "fmt",
                format!("{f} does not fit kind {}", kind.name()),
            ));
        }
    }
    let tag =
        Tag::new(o.uint_or("tag", 1023, 0)? as u16).map_err(|e| jerr("tag", e.to_string()))?;
    let rid = o.bdf("requester_id")?;
    let first_be = ByteEnables::from_bits_truncate(o.uint_or("first_be", 15, 0xf)? as u8);
    let header = match kind {
        TlpKind::MRd
        | TlpKind::MRdLk
        | TlpKind::MWr
        | TlpKind::FetchAdd
        | TlpKind::Swap
        | TlpKind::CAS => {
            let op = kind.mem_op().unwrap_or(MemOp::Read);
            let address = o
                .uint("address", u64::MAX)?
                .ok_or_else(|| jerr("address", "missing"))?;
            if address & 3 != 0 {
                return Err(jerr(
                    "address",
                    "must be DW aligned (use first_be for byte offsets)",
                ));
            }
            let len = if kind.has_data() {
                payload.len() as u64 / 4
            } else {
                o.uint_or("length_dw", 1024, 1)?
            };
            let four_dw = match fmt {
                Some(f) => f & 1 != 0,
                None => address > u32::MAX as u64,
            };
            TlpHeader::Mem(MemHeader {
                op,
                requester_id: rid,
                tag,
                first_be,
                last_be: ByteEnables::from_bits_truncate(o.uint_or(
                    "last_be",
                    15,
                    if len == 1 { 0 } else { 0xf },
                )? as u8),
                address,
                four_dw,
                ph: o.uint_or("ph", 3, 0)? as u8,
                read_len_dw: if kind.has_data() { 0 } else { len as u16 },
            })
        }
        TlpKind::IORd | TlpKind::IOWr => {
            let address = o
                .uint("address", u32::MAX as u64)?
                .ok_or_else(|| jerr("address", "missing"))?;
            TlpHeader::Io(IoHeader {
                write: kind == TlpKind::IOWr,
                requester_id: rid,
                tag,
                first_be,
                address: address as u32 & !3,
            })
        }
        TlpKind::CfgRd0 | TlpKind::CfgWr0 | TlpKind::CfgRd1 | TlpKind::CfgWr1 => {
            TlpHeader::Cfg(CfgHeader {
                write: kind.has_data(),
                type1: matches!(kind, TlpKind::CfgRd1 | TlpKind::CfgWr1),
                requester_id: rid,
                tag,
                first_be,
                target: o.bdf("completer_id")?,
                register: o
                    .uint("register", 1023)?
                    .ok_or_else(|| jerr("register", "missing"))? as u16,
            })
        }
        TlpKind::Msg | TlpKind::MsgD => {
            let code = match o.get("msg_code") {
                Some(Value::String(s)) if MsgCode::from_name(s).is_some() => {
                    MsgCode::from_name(s).unwrap_or(MsgCode::Unlock)
                }
                Some(_) => MsgCode::from_raw(o.uint("msg_code", 255)?.unwrap_or(0) as u8),
                None => match o.str("msg_name")? {
                    Some(n) => MsgCode::from_name(n)
                        .ok_or_else(|| jerr("msg_name", format!("unknown message name \"{n}\"")))?,
                    None => return Err(jerr("msg_code", "missing")),
                },
            };
            let routing = match o.str("msg_routing")? {
                Some(r) => MsgRouting::from_name(r).ok_or_else(|| {
                    jerr("msg_routing", format!("\"{r}\" (allowed: to_rc, by_address, by_id, broadcast, local, gathered)"))
                })?,
                None => code
                    .required_routing()
                    .ok_or_else(|| jerr("msg_routing", "missing (this message code has no fixed routing)"))?,
            };
            let fields = match o.str("msg_fields")? {
                Some(s) => {
                    let b = unhex(s).map_err(|e| jerr("msg_fields", e))?;
                    let arr: [u8; 8] = b.try_into().map_err(|_| {
                        jerr("msg_fields", "must be exactly 8 bytes (header bytes 8..16)")
                    })?;
                    MsgFields(arr)
                }
                None => build_msg_fields(&o, code, routing)?,
            };
            TlpHeader::Msg(MsgHeader {
                requester_id: rid,
                tag,
                code,
                routing,
                fields,
            })
        }
        _ => {
            let status = match o.get("status") {
                None => CplStatus::Sc,
                Some(Value::String(s)) if ["SC", "UR", "CRS", "CA"].contains(&s.as_str()) => {
                    match s.as_str() {
                        "SC" => CplStatus::Sc,
                        "UR" => CplStatus::Ur,
                        "CRS" => CplStatus::Crs,
                        _ => CplStatus::Ca,
                    }
                }
                Some(_) => CplStatus::from_raw(o.uint("status", 7)?.unwrap_or(0) as u8),
            };
            let default_bc = if payload.is_empty() {
                4
            } else {
                payload.len() as u64
            };
            let bc = o.uint_or("byte_count", 4096, default_bc)?;
            if bc == 0 {
                return Err(jerr(
                    "byte_count",
                    "must be 1..=4096 (4096 is encoded as 0 on the wire)",
                ));
            }
            TlpHeader::Cpl(CplHeader {
                locked: matches!(kind, TlpKind::CplLk | TlpKind::CplDLk),
                completer_id: o.bdf("completer_id")?,
                status,
                bcm: o.boolean("bcm")?,
                byte_count: bc as u16,
                requester_id: rid,
                tag,
                lower_address: o.uint_or("lower_address", 127, 0)? as u8,
            })
        }
    };
    let attr = match o.get("attr") {
        None => Attr::NONE,
        Some(Value::Object(a)) => {
            let a = Obj(a);
            Attr {
                ro: a.boolean("ro")?,
                ns: a.boolean("ns")?,
                ido: a.boolean("ido")?,
            }
        }
        Some(other) => {
            return Err(jerr(
                "attr",
                format!("expected {{\"ro\":…,\"ns\":…,\"ido\":…}}, found {other}"),
            ))
        }
    };
    let mut prefixes = Prefixes::EMPTY;
    if let Some(p) = o.get("prefixes") {
        let arr = p
            .as_array()
            .ok_or_else(|| jerr("prefixes", "expected an array"))?;
        for (i, item) in arr.iter().enumerate() {
            let key = format!("prefixes[{i}]");
            let po = item
                .as_object()
                .ok_or_else(|| jerr(&key, "expected an object"))?;
            let po = Obj(po);
            let kname = po.str("kind")?.ok_or_else(|| jerr(&key, "missing kind"))?;
            let pk = PrefixKind::from_name(kname).ok_or_else(|| {
                jerr(&key, format!("unknown prefix kind \"{kname}\" (MR-IOV, TPH, PASID, VendL0, VendL1, VendE0, VendE1, L<n>, E<n>)"))
            })?;
            let pf = if pk == PrefixKind::Pasid && po.get("content").is_none() {
                Prefix::new_pasid(
                    po.uint_or("pasid", 0xf_ffff, 0)? as u32,
                    po.boolean("execute")?,
                    po.boolean("privileged")?,
                )
            } else {
                Prefix::new(pk, po.uint_or("content", 0xff_ffff, 0)? as u32)
            };
            prefixes
                .push(pf)
                .map_err(|e| jerr("prefixes", e.to_string()))?;
        }
    }
    let repr = TlpRepr {
        prefixes,
        header,
        tc: TrafficClass::new(o.uint_or("tc", 7, 0)? as u8)
            .map_err(|e| jerr("tc", e.to_string()))?,
        attr,
        ln: o.boolean("ln")?,
        th: o.boolean("th")?,
        td: o.boolean("td")?,
        ep: o.boolean("ep")?,
        at: AddressType::from_raw(o.uint_or("at", 3, 0)? as u8),
        payload: &payload,
    };
    if let (Some(ld), false) = (
        o.uint("length_dw", 1024)?,
        kind.has_data() || matches!(kind, TlpKind::MRd | TlpKind::MRdLk),
    ) {
        if ld != repr.length_dw() as u64 {
            return Err(jerr(
                "length_dw",
                format!(
                    "{ld} does not fit {} (Length is {})",
                    kind.name(),
                    repr.length_dw()
                ),
            ));
        }
    }
    if kind.has_data() {
        if let Some(ld) = o.uint("length_dw", 1024)? {
            if ld != repr.length_dw() as u64 {
                return Err(jerr(
                    "length_dw",
                    format!("{ld} but the payload has {} DW", repr.length_dw()),
                ));
            }
        }
    }
    if let Some(t) = o.uint("type", 31)? {
        if t as u8 != repr.type_raw() {
            return Err(jerr(
                "type",
                format!(
                    "{t:#x} does not fit kind {} (expected {:#x})",
                    kind.name(),
                    repr.type_raw()
                ),
            ));
        }
    }
    repr.to_vec().map_err(|e| jerr("", e.to_string()))
}

fn build_msg_fields(
    o: &Obj<'_>,
    code: MsgCode,
    routing: MsgRouting,
) -> Result<MsgFields, JsonError> {
    let mut f = [0u8; 8];
    match routing {
        MsgRouting::ByAddress => {
            let a = o.uint_or("address", u64::MAX, 0)?;
            f = a.to_be_bytes();
        }
        MsgRouting::ById => {
            f[0..2].copy_from_slice(&o.bdf("target_id")?.raw().to_be_bytes());
        }
        _ => {}
    }
    match code {
        MsgCode::VendorDefinedType0 | MsgCode::VendorDefinedType1 => {
            f[2..4].copy_from_slice(&(o.uint_or("vendor_id", 0xffff, 0)? as u16).to_be_bytes());
            f[4..8].copy_from_slice(
                &(o.uint_or("vendor_data", u32::MAX as u64, 0)? as u32).to_be_bytes(),
            );
        }
        MsgCode::Ltr => {
            f[4..6].copy_from_slice(&(o.uint_or("ltr_no_snoop", 0xffff, 0)? as u16).to_be_bytes());
            f[6..8].copy_from_slice(&(o.uint_or("ltr_snoop", 0xffff, 0)? as u16).to_be_bytes());
        }
        MsgCode::Obff => f[7] = o.uint_or("obff_code", 15, 0)? as u8,
        MsgCode::AtsInvalidateRequest => f[7] = o.uint_or("itag", 31, 0)? as u8,
        MsgCode::AtsInvalidateCompletion => {
            f[3] = o.uint_or("completion_count", 7, 0)? as u8;
            f[4..8].copy_from_slice(
                &(o.uint_or("itag_vector", u32::MAX as u64, 0)? as u32).to_be_bytes(),
            );
        }
        MsgCode::PageRequest => {
            let a = o.uint_or("page_address", u64::MAX, 0)? & !0xfff;
            let idx = o.uint_or("prg_index", 0x1ff, 0)?;
            let flag = |k: &str, bit: u64| -> Result<u64, JsonError> {
                Ok(if o.boolean(k)? { bit } else { 0 })
            };
            let rwl =
                flag("read_access", 1)? | flag("write_access", 2)? | flag("last_in_group", 4)?;
            f = (a | idx << 3 | rwl).to_be_bytes();
        }
        MsgCode::PrgResponse => {
            let rc = o.uint_or("response_code", 15, 0)? as u16;
            let idx = o.uint_or("prg_index", 0x1ff, 0)? as u16;
            f[2..4].copy_from_slice(&((rc << 12) | idx).to_be_bytes());
        }
        _ => {}
    }
    Ok(MsgFields(f))
}
