//! CDF and histogram plots of a latency test's transactions (PNG or SVG, with the
//! model crate's plots).

use crate::config::BenchConfig;
use pcielab_model::plot::{Plot, PlotError, Series};
use std::path::{Path, PathBuf};

/// Points of the empirical CDF of `lat_ps` (ns, fraction ≤), at most about 1000 of
/// them (every k-th sorted value, the last always).
///
/// ```
/// let c = pcielab_bench::plot::cdf_points(&[3000, 1000, 2000, 4000]);
/// assert_eq!(c, vec![(1.0, 0.25), (2.0, 0.5), (3.0, 0.75), (4.0, 1.0)]);
/// ```
pub fn cdf_points(lat_ps: &[u64]) -> Vec<(f64, f64)> {
    let mut v = lat_ps.to_vec();
    v.sort_unstable();
    let n = v.len();
    let step = n.div_ceil(1000).max(1);
    let mut pts: Vec<(f64, f64)> = (step - 1..n)
        .step_by(step)
        .map(|i| (v[i] as f64 / 1000.0, (i + 1) as f64 / n as f64))
        .collect();
    if n > 0 && pts.last().map(|p| p.1) != Some(1.0) {
        pts.push((v[n - 1] as f64 / 1000.0, 1.0));
    }
    pts
}

/// A histogram of `lat_ps` in `bins` equal bins from the minimum to the maximum:
/// `(low_ns, high_ns, count)` each. Every value falls in exactly one bin.
///
/// ```
/// let h = pcielab_bench::plot::histogram(&[1000, 1000, 2000, 3000], 2);
/// assert_eq!(h, vec![(1.0, 2.0, 2), (2.0, 3.0, 2)]);
/// ```
pub fn histogram(lat_ps: &[u64], bins: usize) -> Vec<(f64, f64, u64)> {
    let (Some(&lo), Some(&hi)) = (lat_ps.iter().min(), lat_ps.iter().max()) else {
        return Vec::new();
    };
    let bins = bins.max(1);
    let width = ((hi - lo) as f64 / bins as f64).max(1.0);
    let mut counts = vec![0u64; bins];
    for &x in lat_ps {
        let b = (((x - lo) as f64 / width) as usize).min(bins - 1);
        counts[b] += 1;
    }
    counts
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let a = lo as f64 + i as f64 * width;
            (a / 1000.0, (a + width) / 1000.0, c)
        })
        .collect()
}

/// Writes `<label>-cdf.<ext>` and `<label>-hist.<ext>` for one configuration into
/// `dir` (`ext`: `png` or `svg`); returns the files written.
pub fn write_plots(
    dir: &Path,
    ext: &str,
    c: &BenchConfig,
    lat_ps: &[u64],
) -> Result<Vec<PathBuf>, PlotError> {
    let label = c.label();
    let cdf = Plot {
        title: format!("{label}: latency CDF, {} transactions", lat_ps.len()),
        x_label: "Latency (ns)".into(),
        y_label: "Fraction of transactions".into(),
        series: vec![Series {
            label: c.test.name().into(),
            points: cdf_points(lat_ps),
        }],
    };
    let h = histogram(lat_ps, 50);
    // Bars drawn as a step outline: up, across and down each bin.
    let mut steps = Vec::with_capacity(h.len() * 2 + 2);
    if let Some(&(a, _, _)) = h.first() {
        steps.push((a, 0.0));
    }
    for &(a, b, n) in &h {
        steps.push((a, n as f64));
        steps.push((b, n as f64));
    }
    if let Some(&(_, b, _)) = h.last() {
        steps.push((b, 0.0));
    }
    let hist = Plot {
        title: format!("{label}: latency histogram, 50 bins"),
        x_label: "Latency (ns)".into(),
        y_label: "Transactions".into(),
        series: vec![Series {
            label: c.test.name().into(),
            points: steps,
        }],
    };
    let a = dir.join(format!("{label}-cdf.{ext}"));
    let b = dir.join(format!("{label}-hist.{ext}"));
    cdf.write(&a)?;
    hist.write(&b)?;
    Ok(vec![a, b])
}
