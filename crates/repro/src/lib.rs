//! # pcielab-repro — the source papers' numbers, reproduced by running pcielab
//!
//! A registry of rows, one per published quantity of the seed papers: the number as the
//! paper gives it (with where: section, figure or table), the number pcielab gives
//! when it runs the same experiment (the analytic model [`pcielab_model`], the timed
//! simulator [`pcielab_fabric::timed::FabricSim`] with a host profile of
//! [`pcielab_fabric::host::model`]), and the inputs that produced it with where each
//! comes from (the paper, the spec, a host profile, an assumption). Nothing in
//! `measured` is a constant: every value comes from a run made when the row is asked
//! for.
//!
//! Rows are grouped in experiments ([`Experiment`]): one run can answer several rows
//! (a latency distribution answers its minimum and its median). [`run`] runs the
//! experiments that the asked-for rows need, once each.
//!
//! ```no_run
//! use pcielab_repro::{run, Opts};
//! let report = run(&["gem5-table2-rc100"], &Opts::default(), &mut |_, _| {})?;
//! let row = &report.rows[0];
//! assert_eq!(row.published, "398");
//! println!("{} {} {}", row.id, row.measured, row.inputs_text());
//! # Ok::<(), pcielab_repro::Error>(())
//! ```
//!
//! The seeds: `000` NetTLP (NSDI 2020), `001` pcie-bench (SIGCOMM 2018, from §5 on),
//! `002` the gem5 PCIe model paper, `004` device-to-device streaming (D2D). See `docs/repro.md` for every row.
#![warn(missing_docs)]

pub mod d2d;
pub mod gem5;
pub mod nettlp;
pub mod pciebench;
pub mod sim;
pub mod sriov;

use std::fmt;

/// One parameter that produced a measured value, and where it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    /// Parameter name (a host knob's name, or the experiment's: `gen`, `lanes`, ...).
    pub name: String,
    /// Its value, with its unit where it has one.
    pub value: String,
    /// Where it comes from: the paper (section), the spec, a host profile (with the
    /// profile's own source), an assumption, or an override.
    pub source: String,
}

/// Builds an [`Input`].
pub fn input(name: &str, value: impl fmt::Display, source: &str) -> Input {
    Input {
        name: name.to_string(),
        value: value.to_string(),
        source: source.to_string(),
    }
}

/// How a measured value compares with the published one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// A number within the row's tolerance of the published number.
    Match,
    /// A published shape or fact (a trend, a bound) that the run shows too.
    Shape,
    /// Differs from the paper; the row's note says why.
    Deviates,
    /// The paper publishes only a figure (no value in its text): the row says what the
    /// run gives, and `--plot` draws it.
    PlotOnly,
    /// pcielab has no model of the quantity (CPU power, utilisation): the row says so
    /// rather than inventing a number.
    NotModelled,
}

impl Status {
    /// The name printed in the `status` column.
    pub fn name(self) -> &'static str {
        match self {
            Status::Match => "match",
            Status::Shape => "shape",
            Status::Deviates => "deviates",
            Status::PlotOnly => "plot-only",
            Status::NotModelled => "not-modelled",
        }
    }
}

/// A row's fixed part: what is published, and where.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spec {
    /// Row ID (`pciebench-lat64-min`).
    pub id: &'static str,
    /// Seed: `000 NetTLP`, `001 pcie-bench` or `002 gem5`.
    pub seed: &'static str,
    /// What the quantity is.
    pub quantity: &'static str,
    /// Unit of `published` and `measured` (`ns`, `Gb/s`, `x` for a ratio, `-` for
    /// text).
    pub unit: &'static str,
    /// The published value exactly as the paper gives it (a number, or the fact in
    /// words for a shape).
    pub published: &'static str,
    /// Where in the paper: section, figure or table.
    pub citation: &'static str,
}

/// One reproduced quantity.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Row ID.
    pub id: &'static str,
    /// Seed.
    pub seed: &'static str,
    /// What the quantity is.
    pub quantity: &'static str,
    /// Unit.
    pub unit: &'static str,
    /// The published value.
    pub published: &'static str,
    /// Where in the paper.
    pub citation: &'static str,
    /// pcielab's value, from the run.
    pub measured: String,
    /// The measured number, when the row has one.
    pub value: Option<f64>,
    /// Every parameter that produced `measured`, with its source.
    pub inputs: Vec<Input>,
    /// How `measured` compares.
    pub status: Status,
    /// Why it deviates, or what the comparison means.
    pub note: String,
}

impl Row {
    /// A row for `spec` with a measured number (printed with `decimals` decimals).
    pub fn number(spec: &Spec, value: f64, decimals: usize, inputs: Vec<Input>) -> Row {
        Row::new(
            spec,
            format!("{value:.decimals$}"),
            Some(value),
            inputs,
            Status::Match,
        )
    }

    /// A row for `spec` whose measured value is text (a shape).
    pub fn text(spec: &Spec, measured: String, inputs: Vec<Input>) -> Row {
        Row::new(spec, measured, None, inputs, Status::Shape)
    }

    fn new(
        spec: &Spec,
        measured: String,
        value: Option<f64>,
        inputs: Vec<Input>,
        status: Status,
    ) -> Row {
        Row {
            id: spec.id,
            seed: spec.seed,
            quantity: spec.quantity,
            unit: spec.unit,
            published: spec.published,
            citation: spec.citation,
            measured,
            value,
            inputs,
            status,
            note: String::new(),
        }
    }

    /// Sets the status and note.
    pub fn with(mut self, status: Status, note: impl Into<String>) -> Row {
        self.status = status;
        self.note = note.into();
        self
    }

    /// Match when the measured number is within `tol` (relative) of the published
    /// number (the note gives the difference), else Deviates with `why`.
    pub fn within(mut self, tol: f64, why: &str) -> Row {
        let (Some(v), Ok(p)) = (self.value, self.published.parse::<f64>()) else {
            return self;
        };
        let d = v / p - 1.0;
        if d.abs() <= tol {
            self.status = Status::Match;
            self.note = format!("{:+.2} % (tolerance {} %)", d * 100.0, trim(tol * 100.0));
        } else {
            self.status = Status::Deviates;
            self.note = format!(
                "{:+.2} % (tolerance {} %): {why}",
                d * 100.0,
                trim(tol * 100.0)
            );
        }
        self
    }

    /// Appends `more` to the note.
    pub fn noted(mut self, more: impl AsRef<str>) -> Row {
        if !self.note.is_empty() {
            self.note.push_str("; ");
        }
        self.note.push_str(more.as_ref());
        self
    }

    /// The relative difference to the published number, when both are numbers.
    pub fn deviation(&self) -> Option<f64> {
        Some(self.value? / self.published.parse::<f64>().ok()? - 1.0)
    }

    /// `inputs` as one line: `name=value (source); ...`.
    pub fn inputs_text(&self) -> String {
        self.inputs
            .iter()
            .map(|i| format!("{}={} ({})", i.name, i.value, i.source))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The row as a JSON object: the contract's columns in order, then `citation`,
    /// `status` and `note`; `inputs` as an array of `{name, value, source}`.
    pub fn to_json(&self) -> serde_json::Value {
        let inputs: Vec<serde_json::Value> = self
            .inputs
            .iter()
            .map(|i| serde_json::json!({"name": i.name, "value": i.value, "source": i.source}))
            .collect();
        serde_json::json!({
            "id": self.id, "seed": self.seed, "quantity": self.quantity, "unit": self.unit,
            "published": self.published, "measured": self.measured, "inputs": inputs,
            "citation": self.citation, "status": self.status.name(), "note": self.note,
        })
    }
}

/// `x` with at most four decimals and no trailing zeros.
fn trim(x: f64) -> String {
    let s = format!("{x:.4}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// One curve of a figure.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text.
    pub label: String,
    /// (x, y) points in x order.
    pub points: Vec<(f64, f64)>,
    /// Published points (from the paper's text), as opposed to pcielab's.
    pub published: bool,
}

/// A figure of a paper, redrawn: published points beside pcielab's.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// File name without extension (`pciebench-fig6-cdf`).
    pub name: String,
    /// Title, with the paper's figure number.
    pub title: String,
    /// X axis label with unit.
    pub x_label: String,
    /// Y axis label with unit.
    pub y_label: String,
    /// The curves.
    pub series: Vec<Series>,
}

/// What one experiment gives.
#[derive(Debug, Clone, Default)]
pub struct Output {
    /// Its rows, in registry order.
    pub rows: Vec<Row>,
    /// Its figures.
    pub figures: Vec<Figure>,
}

/// Options of a reproduction run.
#[derive(Debug, Clone)]
pub struct Opts {
    /// Host knobs applied after each experiment's profile (`name`, `value`: see
    /// [`pcielab_fabric::host::model::apply_knob`]): to see how `measured` moves with
    /// an input. They appear in `inputs` with the source `override`.
    pub knobs: Vec<(String, String)>,
    /// 64-byte DMA reads per latency distribution. Default 2 million, as pcie-bench ran
    /// (latency vs size runs a tenth of it per size).
    pub reads: u64,
}

impl Default for Opts {
    fn default() -> Opts {
        Opts {
            knobs: Vec::new(),
            reads: 2_000_000,
        }
    }
}

/// A group of rows that one run answers.
#[derive(Debug, Clone, Copy)]
pub struct Experiment {
    /// Name (for progress and errors).
    pub name: &'static str,
    /// The rows it answers, in order.
    pub specs: &'static [Spec],
    /// Runs it.
    pub run: fn(&Opts) -> Result<Output, Error>,
}

/// Why a reproduction could not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// Row IDs that the registry does not have; `valid` lists those it has.
    UnknownIds {
        /// The unknown IDs.
        unknown: Vec<String>,
        /// Every valid ID.
        valid: Vec<&'static str>,
    },
    /// A run failed (a bad override, a simulator error): the experiment and why.
    Run {
        /// The experiment.
        experiment: &'static str,
        /// Why.
        error: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UnknownIds { unknown, valid } => write!(
                f,
                "unknown repro ID{} {}; valid IDs: all, {}",
                if unknown.len() > 1 { "s" } else { "" },
                unknown.join(", "),
                valid.join(", ")
            ),
            Error::Run { experiment, error } => write!(f, "repro {experiment}: {error}"),
        }
    }
}

impl std::error::Error for Error {}

/// Every experiment, in the order rows are listed.
pub fn experiments() -> Vec<Experiment> {
    let mut v = Vec::new();
    v.extend(nettlp::experiments());
    v.extend(pciebench::experiments());
    v.extend(gem5::experiments());
    v.extend(sriov::experiments());
    v.extend(d2d::experiments());
    v
}

/// Every row's fixed part, in order.
pub fn specs() -> Vec<&'static Spec> {
    experiments().iter().flat_map(|e| e.specs.iter()).collect()
}

/// What [`run`] gives: the rows asked for, in registry order, and the figures of the
/// experiments that ran.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The rows.
    pub rows: Vec<Row>,
    /// The figures.
    pub figures: Vec<Figure>,
}

/// Runs the rows `ids` (or every row when `ids` is empty or holds `all`), each
/// experiment once; `progress(done, total)` is called before the first experiment
/// and after each.
/// Unknown IDs are refused before anything runs.
pub fn run(
    ids: &[&str],
    opts: &Opts,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Report, Error> {
    let exps = experiments();
    let all = ids.is_empty() || ids.contains(&"all");
    let valid: Vec<&'static str> = exps
        .iter()
        .flat_map(|e| e.specs.iter().map(|s| s.id))
        .collect();
    let unknown: Vec<String> = ids
        .iter()
        .filter(|i| **i != "all" && !valid.contains(i))
        .map(|i| i.to_string())
        .collect();
    if !unknown.is_empty() {
        return Err(Error::UnknownIds { unknown, valid });
    }
    // Overrides are checked once, before anything runs (rows that use no host model,
    // such as the encapsulation bound, would not see a bad one).
    let mut scratch = pcielab_fabric::timed::SimConfig::default();
    for (k, v) in &opts.knobs {
        pcielab_fabric::host::model::apply_knob(&mut scratch, k, v).map_err(|error| {
            Error::Run {
                experiment: "overrides",
                error,
            }
        })?;
    }
    let wanted = |id: &str| all || ids.contains(&id);
    let todo: Vec<&Experiment> = exps
        .iter()
        .filter(|e| (all && e.specs.is_empty()) || e.specs.iter().any(|s| wanted(s.id)))
        .collect();
    let mut report = Report::default();
    progress(0, todo.len());
    for (i, e) in todo.iter().enumerate() {
        let out = (e.run)(opts)?;
        report
            .rows
            .extend(out.rows.into_iter().filter(|r| wanted(r.id)));
        report.figures.extend(out.figures);
        progress(i + 1, todo.len());
    }
    Ok(report)
}

/// A run error of experiment `experiment`.
pub(crate) fn run_err(experiment: &'static str) -> impl Fn(String) -> Error {
    move |error| Error::Run { experiment, error }
}

/// The row of `specs` with ID `id` (experiments build their rows from their own
/// spec tables; a missing ID is a programming error caught by the tests).
pub(crate) fn spec<'a>(specs: &'a [Spec], id: &str) -> &'a Spec {
    specs
        .iter()
        .find(|s| s.id == id)
        .unwrap_or_else(|| panic!("no spec {id}"))
}
