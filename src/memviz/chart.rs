//! Byte counts over a sequence of steps as one chart (the figure of `cudasem replay --plot`:
//! reserved and allocated bytes over a trace's rows, for cudasem's policy and PyTorch's).
//!
//! Steps that share a pixel column are drawn at their highest value, so every peak shows.
//!
//! ```
//! use cudasem::memviz::chart::{Chart, Series, Style};
//! let chart = Chart {
//!     title: "two series".into(),
//!     x_label: "step".into(),
//!     series: vec![
//!         Series { label: "allocated".into(), color: "#2f6db5".into(), style: Style::Area, values: vec![0, 4, 2] },
//!         Series { label: "reserved".into(), color: "#c0392b".into(), style: Style::Line, values: vec![0, 8, 8] },
//!     ],
//!     notes: vec![("trace".into(), "a.csv".into())],
//! };
//! assert!(chart.to_svg().starts_with("<svg"));
//! assert!(chart.to_html().contains("reserved"));
//! ```

use super::frame::{column_max, columns, step_line, Frame};
use super::svg::{document, Svg};
use crate::cuda::memory::format_bytes;

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// A filled area from zero.
    Area,
    /// A solid line.
    Line,
    /// A dashed line.
    Dashed,
}

/// One series: a byte count per step.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Its name in the legend.
    pub label: String,
    /// An SVG colour (`#rrggbb`).
    pub color: String,
    /// Area or line.
    pub style: Style,
    /// The value at each step (series of different lengths end where they end).
    pub values: Vec<usize>,
}

/// A chart of series over steps, with notes (a table above it in HTML).
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// The heading.
    pub title: String,
    /// What a step is.
    pub x_label: String,
    /// Drawn in order: areas first make sense.
    pub series: Vec<Series>,
    /// `(name, value)` lines shown beside the chart.
    pub notes: Vec<(String, String)>,
}

const WIDTH: f64 = 1200.0;
const HEIGHT: f64 = 460.0;

impl Chart {
    fn frame(&self) -> Frame {
        let steps = self.series.iter().map(|s| s.values.len()).max().unwrap_or(0);
        let y_max = self.series.iter().flat_map(|s| s.values.iter().copied()).max().unwrap_or(0);
        let legend_rows = self.series.len().div_ceil(2) as f64;
        let top = 40.0 + 18.0 * legend_rows;
        Frame { x: 90.0, y: top, w: WIDTH - 120.0, h: HEIGHT - top - 60.0, moments: steps.max(1), y_max }
    }

    /// The chart as an SVG document.
    pub fn to_svg(&self) -> String {
        let frame = self.frame();
        let mut svg = Svg::default();
        svg.text(frame.x, 22.0, 15.0, "start", &self.title);
        for (i, s) in self.series.iter().enumerate() {
            let (x, y) = (frame.x + 540.0 * (i % 2) as f64, 42.0 + 18.0 * (i / 2) as f64);
            match s.style {
                Style::Area => svg.rect(x, y - 9.0, 18.0, 10.0, &s.color, ""),
                Style::Line => svg.line((x, y - 4.0), (x + 18.0, y - 4.0), &s.color, 2.0, ""),
                Style::Dashed => svg.line((x, y - 4.0), (x + 18.0, y - 4.0), &s.color, 2.0, "5 3"),
            }
            let peak = s.values.iter().copied().max().unwrap_or(0);
            svg.text(x + 24.0, y, 11.0, "start", &format!("{} (peak {})", s.label, format_bytes(peak)));
        }
        frame.axes(&mut svg, &self.x_label);
        for s in &self.series {
            if s.values.is_empty() {
                continue;
            }
            let sub =
                Frame { w: frame.w * s.values.len() as f64 / frame.moments as f64, moments: s.values.len(), ..frame };
            let cols = columns(&s.values, sub.w.ceil() as usize);
            let line = step_line(&sub, &cols, &column_max(&s.values, &cols));
            match s.style {
                Style::Area => {
                    let mut area = line.clone();
                    area.push((sub.left(sub.moments), sub.y(0)));
                    area.push((sub.x, sub.y(0)));
                    svg.polygon(&area, &s.color, Some(&s.label));
                }
                Style::Line => svg.polyline(&line, &s.color, 1.5, ""),
                Style::Dashed => svg.polyline(&line, &s.color, 1.5, "6 3"),
            }
        }
        document(WIDTH, HEIGHT, &svg.group(0.0, &frame.attributes()))
    }

    /// One self-contained HTML page: the notes as a table, the chart as inline SVG.
    pub fn to_html(&self) -> String {
        super::html::html_page(&self.title, &self.to_html_body())
    }

    /// The page's content without the document around it (see [`super::html_page`]).
    pub fn to_html_body(&self) -> String {
        let mut body = super::html::table(&self.notes);
        body.push_str(&self.to_svg());
        body
    }
}
