//! `pcielab repro`: the source papers' published numbers beside pcielab's, one row per
//! quantity, measured by running the model and the simulator (crate pcielab-repro).

use crate::format::{csv_field, effective, Format};
use crate::progress::Progress;
use crate::{fail, Failure};
use clap::Args;
use pcielab_model::plot::{Plot, Series};
use pcielab_repro::{Figure, Opts, Row};
use std::path::{Path, PathBuf};

/// `pcielab repro` arguments.
#[derive(Args, Debug)]
pub struct ReproArgs {
    /// Row IDs to reproduce, or `all` (see --list).
    #[arg(value_name = "ID", required_unless_present = "list")]
    ids: Vec<String>,
    /// List the rows (ID, seed, quantity, unit, published value and where it is
    /// published) without running anything.
    #[arg(long)]
    list: bool,
    /// Output format: table, csv or json. Columns: id, seed, quantity, unit, published,
    /// measured, inputs (what produced `measured`, with the source of each), then
    /// citation, status (match, shape, deviates, plot-only, not-modelled) and note.
    #[arg(long, value_enum, conflicts_with_all = ["json", "csv"])]
    format: Option<Format>,
    /// Same as --format json.
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// Same as --format csv.
    #[arg(long)]
    csv: bool,
    /// Draw the papers' figures (published points beside pcielab's) into DIR, each as
    /// NAME.png and NAME.svg.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// 64-byte DMA reads per latency distribution (as pcie-bench: 2 million; latency vs
    /// transfer size runs a tenth of it per size).
    #[arg(long, value_name = "N", default_value_t = 2_000_000, value_parser = clap::value_parser!(u64).range(100..=10_000_000))]
    reads: u64,
    /// Change a host knob after each experiment's profile (`pcielab host knobs`), e.g.
    /// --set mmio_read_ns=200: the row's inputs show it as an override. Repeatable.
    #[arg(long = "set", value_name = "KNOB=VALUE")]
    set: Vec<String>,
}

/// The contract's columns, then ours.
const COLUMNS: [&str; 10] = [
    "id",
    "seed",
    "quantity",
    "unit",
    "published",
    "measured",
    "inputs",
    "citation",
    "status",
    "note",
];

fn csv_line(fields: &[&str]) -> String {
    fields
        .iter()
        .map(|f| csv_field(f))
        .collect::<Vec<_>>()
        .join(",")
}

fn list(format: Format) -> String {
    let specs = pcielab_repro::specs();
    let mut out = String::new();
    match format {
        Format::Csv => {
            out.push_str("id,seed,quantity,unit,published,citation\n");
            for s in &specs {
                out.push_str(&csv_line(&[
                    s.id,
                    s.seed,
                    s.quantity,
                    s.unit,
                    s.published,
                    s.citation,
                ]));
                out.push('\n');
            }
        }
        Format::Json => {
            let v: Vec<serde_json::Value> = specs
                .iter()
                .map(|s| {
                    serde_json::json!({"id": s.id, "seed": s.seed, "quantity": s.quantity,
                        "unit": s.unit, "published": s.published, "citation": s.citation})
                })
                .collect();
            out.push_str(&serde_json::Value::Array(v).to_string());
            out.push('\n');
        }
        Format::Table => {
            let w = specs.iter().map(|s| s.id.len()).max().unwrap_or(2);
            out.push_str(&format!(
                "{:w$}  {:14}  {:5}  {:14}  QUANTITY\n",
                "ID", "SEED", "UNIT", "PUBLISHED"
            ));
            for s in &specs {
                out.push_str(&format!(
                    "{:w$}  {:14}  {:5}  {:14}  {} [{}]\n",
                    s.id, s.seed, s.unit, s.published, s.quantity, s.citation
                ));
            }
            out.push_str(
                "\nplot only (no published numbers in the seed's text): pciebench-nic-model \
                 (pcie-bench NIC model curves, drawn by `repro all --plot DIR`)\n",
            );
        }
    }
    out
}

/// Text that fits a column of `w`, or "see below" (printed in full under the table).
fn cell(text: &str, w: usize) -> &str {
    if text.chars().count() > w {
        "see below"
    } else {
        text
    }
}

fn table(rows: &[Row]) -> String {
    const WP: usize = 24;
    const WM: usize = 12;
    let w = rows.iter().map(|r| r.id.len()).max().unwrap_or(2).max(2);
    let mut out = format!(
        "{:w$}  {:5}  {:WP$}  {:WM$}  STATUS\n",
        "ID", "UNIT", "PUBLISHED", "MEASURED"
    );
    for r in rows {
        out.push_str(&format!(
            "{:w$}  {:5}  {:WP$}  {:WM$}  {}\n",
            r.id,
            r.unit,
            cell(r.published, WP),
            cell(&r.measured, WM),
            r.status.name()
        ));
    }
    out.push('\n');
    for r in rows {
        out.push_str(&format!("{} — {} [{}]\n", r.id, r.quantity, r.citation));
        if r.published.chars().count() > WP {
            out.push_str(&format!("  published: {}\n", r.published));
        }
        if r.measured.chars().count() > WM {
            out.push_str(&format!("  measured: {}\n", r.measured));
        }
        if !r.note.is_empty() {
            out.push_str(&format!("  note: {}\n", r.note));
        }
        out.push_str("  inputs:\n");
        for i in &r.inputs {
            out.push_str(&format!("    {} = {}  ({})\n", i.name, i.value, i.source));
        }
    }
    out
}

fn csv(rows: &[Row]) -> String {
    let mut out = COLUMNS.join(",");
    out.push('\n');
    for r in rows {
        let inputs = r.inputs_text();
        out.push_str(&csv_line(&[
            r.id,
            r.seed,
            r.quantity,
            r.unit,
            r.published,
            &r.measured,
            &inputs,
            r.citation,
            r.status.name(),
            &r.note,
        ]));
        out.push('\n');
    }
    out
}

fn draw(dir: &Path, figures: &[Figure]) -> Result<Vec<PathBuf>, Failure> {
    std::fs::create_dir_all(dir).map_err(|e| fail(format!("--plot {}: {e}", dir.display())))?;
    let mut written = Vec::new();
    for f in figures {
        let plot = Plot {
            title: f.title.clone(),
            x_label: f.x_label.clone(),
            y_label: f.y_label.clone(),
            series: f
                .series
                .iter()
                .filter(|s| !s.points.is_empty())
                .map(|s| Series {
                    label: s.label.clone(),
                    points: s.points.clone(),
                })
                .collect(),
        };
        for ext in ["png", "svg"] {
            let path = dir.join(format!("{}.{ext}", f.name));
            plot.write(&path).map_err(|e| fail(e.to_string()))?;
            written.push(path);
        }
    }
    Ok(written)
}

/// Runs `pcielab repro`.
pub fn run(a: &ReproArgs) -> Result<(), Failure> {
    let format = effective(a.format, a.json, a.csv);
    if a.list {
        print!("{}", list(format));
        return Ok(());
    }
    let mut knobs = Vec::new();
    for s in &a.set {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| fail(format!("--set {s:?}: expected KNOB=VALUE")))?;
        knobs.push((k.trim().to_string(), v.trim().to_string()));
    }
    let opts = Opts {
        knobs,
        reads: a.reads,
    };
    let ids: Vec<&str> = a.ids.iter().map(|s| s.as_str()).collect();
    let mut bar: Option<Progress> = None;
    let report = pcielab_repro::run(&ids, &opts, &mut |done, total| {
        bar.get_or_insert_with(|| Progress::new("repro experiments", total as u64))
            .set(done as u64);
    })
    .map_err(|e| fail(e.to_string()))?;
    if let Some(mut b) = bar {
        b.finish();
    }
    if let Some(dir) = &a.plot {
        let files = draw(dir, &report.figures)?;
        eprintln!(
            "pcielab repro: {} plot files written to {}",
            files.len(),
            dir.display()
        );
    }
    let text = match format {
        Format::Table => table(&report.rows),
        Format::Csv => csv(&report.rows),
        Format::Json => {
            let v: Vec<serde_json::Value> = report.rows.iter().map(Row::to_json).collect();
            format!("{}\n", serde_json::Value::Array(v))
        }
    };
    crate::topo_cmd::write_stdout(&text)
}
