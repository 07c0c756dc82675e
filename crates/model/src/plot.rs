//! PNG and SVG line plots of model curves (feature `plot`).
//!
//! Text is drawn with DejaVu Sans, embedded in the binary from the `dejavu` crate, so
//! plots render the same on a machine without any system fonts or fontconfig.

use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use std::fmt;
use std::path::Path;
use std::sync::Once;

/// One curve.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text.
    pub label: String,
    /// (x, y) points, in x order.
    pub points: Vec<(f64, f64)>,
}

/// A plot: title, axis labels (with units) and curves.
#[derive(Debug, Clone, PartialEq)]
pub struct Plot {
    /// Title above the plot.
    pub title: String,
    /// X axis label, with its unit.
    pub x_label: String,
    /// Y axis label, with its unit.
    pub y_label: String,
    /// The curves.
    pub series: Vec<Series>,
}

/// Why a plot could not be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlotError {
    /// The file name does not end in `.png` or `.svg`.
    Format(String),
    /// Nothing to draw.
    Empty,
    /// The file could not be created (a missing directory, no permission).
    Create {
        /// The file.
        path: String,
        /// Why.
        error: String,
    },
    /// The drawing backend failed.
    Backend(String),
}

impl fmt::Display for PlotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlotError::Format(p) => write!(f, "plot file {p:?}: name must end in .png or .svg"),
            PlotError::Empty => f.write_str("nothing to plot: no points"),
            PlotError::Create { path, error } => {
                write!(f, "plot file {path:?}: cannot create it: {error}")
            }
            PlotError::Backend(e) => write!(f, "plot: {e}"),
        }
    }
}

impl std::error::Error for PlotError {}

/// The title's font size: 24 px, smaller for a title that would not fit the 1024-px
/// width (DejaVu Sans averages about 0.55 em per character).
fn title_size(title: &str) -> u32 {
    let chars = title.chars().count().max(1) as f64;
    let fit = (1024.0 - 2.0 * 16.0) / (0.6 * chars);
    fit.floor().clamp(10.0, 24.0) as u32
}

/// A tick label without floating-point noise (`0.8999999999` is `0.9`): at most six
/// decimals, trailing zeros dropped.
fn tick(v: f64) -> String {
    let s = format!("{v:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

static FONT: Once = Once::new();

fn register_fonts() {
    FONT.call_once(|| {
        // The font ships inside the `dejavu` crate; parsing it cannot fail for that file,
        // and if it did, text would be missing but nothing would panic.
        let _ = register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular());
        let _ = register_font("sans-serif", FontStyle::Bold, dejavu::sans::bold());
    });
}

impl Plot {
    /// Writes the plot to `path`; the backend is chosen by the extension (`.png`: 1024×640
    /// bitmap, `.svg`: vector).
    ///
    /// ```no_run
    /// use pcielab_model::plot::{Plot, Series};
    /// let p = Plot {
    ///     title: "example".into(),
    ///     x_label: "Transfer size (B)".into(),
    ///     y_label: "Bandwidth (Gb/s)".into(),
    ///     series: vec![Series { label: "write".into(), points: vec![(64.0, 42.1), (128.0, 47.4)] }],
    /// };
    /// p.write(std::path::Path::new("bw.svg"))?;
    /// # Ok::<(), pcielab_model::plot::PlotError>(())
    /// ```
    pub fn write(&self, path: &Path) -> Result<(), PlotError> {
        let ext = Plot::check_path(path)?;
        let size = (1024, 640);
        match ext {
            "png" => self.draw(BitMapBackend::new(path, size).into_drawing_area()),
            _ => self.draw(SVGBackend::new(path, size).into_drawing_area()),
        }
    }

    /// Checks that `path` names a `.png` or `.svg` file that can be created (and
    /// creates it, empty), so a command can refuse a bad `--plot` before it works;
    /// returns the extension. [`Plot::write`] checks the same.
    ///
    /// ```
    /// use pcielab_model::plot::{Plot, PlotError};
    /// let e = Plot::check_path(std::path::Path::new("/nonexistent/x.png")).unwrap_err();
    /// assert!(matches!(e, PlotError::Create { .. }));
    /// ```
    pub fn check_path(path: &Path) -> Result<&'static str, PlotError> {
        let ext = match path
            .extension()
            .and_then(|e| e.to_str())
            .map(|e| e.to_ascii_lowercase())
            .as_deref()
        {
            Some("png") => "png",
            Some("svg") => "svg",
            _ => return Err(PlotError::Format(path.display().to_string())),
        };
        // Say plainly when the file cannot be made (the backends report it as a nested
        // debug string, and only once the drawing is done).
        std::fs::File::create(path).map_err(|e| PlotError::Create {
            path: path.display().to_string(),
            error: e.to_string(),
        })?;
        Ok(ext)
    }

    fn draw<DB: DrawingBackend>(
        &self,
        root: DrawingArea<DB, plotters::coord::Shift>,
    ) -> Result<(), PlotError> {
        register_fonts();
        let pts = self.series.iter().flat_map(|s| s.points.iter());
        let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
        let mut any = false;
        for &(x, y) in pts {
            if x.is_finite() && y.is_finite() {
                any = true;
                x0 = x0.min(x);
                x1 = x1.max(x);
                y1 = y1.max(y);
            }
        }
        if !any {
            return Err(PlotError::Empty);
        }
        if x1 <= x0 {
            x1 = x0 + 1.0;
        }
        if y1 <= 0.0 {
            y1 = 1.0;
        }
        let be = |e: &dyn fmt::Display| PlotError::Backend(e.to_string());
        root.fill(&WHITE).map_err(|e| be(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(&self.title, ("sans-serif", title_size(&self.title)))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(64)
            .build_cartesian_2d(x0..x1, 0.0..y1 * 1.08)
            .map_err(|e| be(&e))?;
        chart
            .configure_mesh()
            .x_desc(&self.x_label)
            .y_desc(&self.y_label)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| tick(*y))
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 17))
            .draw()
            .map_err(|e| be(&e))?;
        for (i, s) in self.series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    s.points
                        .iter()
                        .copied()
                        .filter(|(x, y)| x.is_finite() && y.is_finite()),
                    color.stroke_width(2),
                ))
                .map_err(|e| be(&e))?
                .label(s.label.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 15))
            .draw()
            .map_err(|e| be(&e))?;
        root.present().map_err(|e| be(&e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_titles_get_a_smaller_font_that_fits() {
        assert_eq!(title_size("Gen3 x8"), 24);
        let long = "Gen3 x8 MPS 256 MRRS 512 RCB 64 64-bit mode pcie-bench: raw 63.015 Gb/s, link 57.885 Gb/s, start address 0x100";
        let size = title_size(long);
        assert!(size < 24, "{size}");
        // At 0.6 em per character (wider than DejaVu Sans' average) it fits the width
        // less the margins.
        assert!(0.6 * f64::from(size) * long.chars().count() as f64 <= 1024.0 - 32.0);
    }

    use super::*;

    #[test]
    fn tick_labels_have_no_float_noise() {
        assert_eq!(tick(0.899_999_999_999_999_9), "0.9");
        assert_eq!(tick(0.1 + 0.2), "0.3");
        assert_eq!(tick(42.0), "42");
        assert_eq!(tick(2.5), "2.5");
        assert_eq!(tick(-0.000_000_1), "0");
        assert_eq!(tick(1e-7 + 0.000_123), "0.000123");
    }

    fn demo() -> Plot {
        Plot {
            title: "Gen3 x8".into(),
            x_label: "Transfer size (B)".into(),
            y_label: "Bandwidth (Gb/s)".into(),
            series: vec![Series {
                label: "write".into(),
                points: (1..=64)
                    .map(|i| (i as f64 * 64.0, 50.0 * i as f64 / (i as f64 + 1.0)))
                    .collect(),
            }],
        }
    }

    #[test]
    fn svg_has_text_and_png_is_a_png() {
        let dir = std::env::temp_dir().join(format!("pcielab-model-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let svg = dir.join("t.svg");
        demo().write(&svg).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("Bandwidth (Gb/s)") && text.contains("Transfer size (B)"));
        let png = dir.join("t.png");
        demo().write(&png).unwrap();
        let bytes = std::fs::read(&png).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        assert!(matches!(
            demo().write(&dir.join("t.jpg")),
            Err(PlotError::Format(_))
        ));
        let empty = Plot {
            series: vec![],
            ..demo()
        };
        assert_eq!(empty.write(&svg), Err(PlotError::Empty));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
