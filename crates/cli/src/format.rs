//! One output convention for every command that prints results: `--format
//! table|csv|json`, with `--json` and `--csv` kept as aliases.
//!
//! - `table`: text for people (a table, or one line per packet);
//! - `csv`: a header line, then one line per record, floats at the precision the table
//!   shows;
//! - `json`: the records, as one JSON array for a command that prints a result set, or
//!   one object per line for a stream (`dump`, `tlpperf` progress).

use clap::ValueEnum;
use serde_json::Value;

/// An output format.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Format {
    /// Text for people.
    #[default]
    Table,
    /// Comma-separated values with a header line.
    Csv,
    /// JSON records.
    Json,
}

/// The format asked for by `--format` and its aliases `--json` and `--csv` (clap
/// refuses two of them together).
pub fn effective(format: Option<Format>, json: bool, csv: bool) -> Format {
    match (json, csv) {
        (true, _) => Format::Json,
        (_, true) => Format::Csv,
        _ => format.unwrap_or_default(),
    }
}

/// One CSV field: quoted when it holds a comma, a quote or a line break.
pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Flattens `v` into `(column, text)` pairs: nested objects as `a.b`, arrays of scalars
/// joined with `;`, arrays of objects as JSON text.
fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, x, out);
            }
        }
        Value::Array(a) if a.iter().all(|x| !x.is_object() && !x.is_array()) => {
            let parts: Vec<String> = a.iter().map(scalar).collect();
            out.push((prefix.to_string(), parts.join(";")));
        }
        Value::Array(_) => out.push((prefix.to_string(), v.to_string())),
        _ => out.push((prefix.to_string(), scalar(v))),
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        x => x.to_string(),
    }
}

/// CSV of JSON records: the columns are every key of every record (nested ones as
/// `a.b`), in the order first seen (a record's keys in name order); a record without a
/// column leaves it empty.
///
/// ```text
/// [{"kind":"MRd","tag":1}, {"kind":"Ack","seq":5}]  →  kind,tag,seq
///                                                      MRd,1,
///                                                      Ack,,5
/// ```
pub fn records_to_csv(records: &[Value]) -> String {
    let rows: Vec<Vec<(String, String)>> = records
        .iter()
        .map(|r| {
            let mut f = Vec::new();
            flatten("", r, &mut f);
            f
        })
        .collect();
    let mut cols: Vec<String> = Vec::new();
    for r in &rows {
        for (k, _) in r {
            if !cols.contains(k) {
                cols.push(k.clone());
            }
        }
    }
    let mut s = cols
        .iter()
        .map(|c| csv_field(c))
        .collect::<Vec<_>>()
        .join(",");
    s.push('\n');
    for r in &rows {
        let line: Vec<String> = cols
            .iter()
            .map(|c| {
                r.iter()
                    .find(|(k, _)| k == c)
                    .map_or(String::new(), |(_, v)| csv_field(v))
            })
            .collect();
        s.push_str(&line.join(","));
        s.push('\n');
    }
    s
}

/// Rounds every non-integer number in `v` to `decimals` places (CSV shows floats at a
/// table's precision, not a double's 17 digits).
pub fn round_floats(v: &mut Value, decimals: i32) {
    match v {
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(0.0);
            let k = 10f64.powi(decimals);
            if let Some(r) = serde_json::Number::from_f64((f * k).round() / k) {
                *n = r;
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| round_floats(x, decimals)),
        Value::Object(m) => m.values_mut().for_each(|x| round_floats(x, decimals)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn csv_of_records_has_every_column_once() {
        let r = [
            json!({"kind": "MRd", "tag": 1, "attr": {"ro": true}}),
            json!({"kind": "Ack", "seq": 5, "note": "a, \"b\""}),
            json!({"kind": "x", "list": [1, 2], "none": null}),
        ];
        assert_eq!(
            records_to_csv(&r),
            "attr.ro,kind,tag,note,seq,list,none\n\
             true,MRd,1,,,,\n\
             ,Ack,,\"a, \"\"b\"\"\",5,,\n\
             ,x,,,,1;2,\n"
        );
    }

    #[test]
    fn floats_are_rounded_integers_kept() {
        let mut v = json!({"a": 1.23456, "b": [2.0004, 7], "c": {"d": 123456789}});
        round_floats(&mut v, 3);
        assert_eq!(v, json!({"a": 1.235, "b": [2.0, 7], "c": {"d": 123456789}}));
    }

    #[test]
    fn aliases_win_over_the_default() {
        assert_eq!(effective(None, false, false), Format::Table);
        assert_eq!(effective(Some(Format::Csv), false, false), Format::Csv);
        assert_eq!(effective(None, true, false), Format::Json);
        assert_eq!(effective(None, false, true), Format::Csv);
    }
}
