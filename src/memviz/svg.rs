//! A small SVG writer (shapes and text as attributes only, coordinates to 0.1 px, text escaped),
//! the axes' ticks, and the colours every view shares.

use std::fmt::Write;

/// The page's background.
pub(crate) const BACKGROUND: &str = "#ffffff";
/// Grid lines and axis frames.
pub(crate) const GRID: &str = "#e4e4e4";
/// Axis text.
pub(crate) const INK: &str = "#333333";
/// Reserved bytes (the line above the timeline).
pub(crate) const RESERVED: &str = "#c0392b";
/// Allocations below a pixel, summed into one band.
pub(crate) const SUMMARIZED: &str = "#a9a9a9";
/// Allocated bytes the program asked for (segment view).
pub(crate) const REQUESTED: &str = "#2f6db5";
/// Allocated bytes beyond the request: rounding and unsplit remainders (segment view).
pub(crate) const ROUNDING: &str = "#93bce8";
/// Blocks freed by the program, waiting for streams they were used on (segment view).
pub(crate) const PENDING: &str = "#e69138";
/// Free blocks (segment view).
pub(crate) const FREE: &str = "#eeeeee";
/// A segment's outline.
pub(crate) const OUTLINE: &str = "#555555";

/// Viridis in nine steps: allocations coloured by size, small (dark) to large (bright).
pub(crate) const BY_SIZE: [&str; 9] =
    ["#440154", "#472d7b", "#3b528b", "#2c728e", "#21918c", "#28ae80", "#5ec962", "#addc30", "#fde725"];
/// Categorical colours: allocations coloured by stream, and series of a chart.
pub(crate) const BY_STREAM: [&str; 8] =
    ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#ff7f0e"];

/// An SVG document being written.
#[derive(Debug, Default)]
pub(crate) struct Svg {
    out: String,
}

/// `v` with at most one decimal (`12`, `12.5`).
fn num(out: &mut String, v: f64) {
    let r = (v * 10.0).round() / 10.0;
    if r.fract() == 0.0 {
        let _ = write!(out, "{}", r as i64);
    } else {
        let _ = write!(out, "{r:.1}");
    }
}

/// `text` with XML's special characters escaped.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

impl Svg {
    /// A filled rectangle; `extra` is further attributes (or empty).
    pub fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str, extra: &str) {
        self.out.push_str("<rect x=\"");
        num(&mut self.out, x);
        self.out.push_str("\" y=\"");
        num(&mut self.out, y);
        self.out.push_str("\" width=\"");
        num(&mut self.out, w);
        self.out.push_str("\" height=\"");
        num(&mut self.out, h);
        let _ = write!(self.out, "\" fill=\"{fill}\" {extra}/>");
    }

    /// A rectangle with a `<title>` (a tooltip in browsers).
    pub fn rect_titled(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str, title: &str) {
        self.rect_titled_with(x, y, w, h, fill, title, "");
    }

    /// A rectangle with a `<title>` and further attributes (`extra`, or empty).
    #[allow(clippy::too_many_arguments)]
    pub fn rect_titled_with(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str, title: &str, extra: &str) {
        self.rect(x, y, w, h, fill, extra);
        self.out.pop();
        self.out.pop();
        let _ = write!(self.out, "><title>{}</title></rect>", escape(title));
    }

    fn points(&mut self, points: &[(f64, f64)]) {
        self.out.push_str(" points=\"");
        for (i, &(x, y)) in points.iter().enumerate() {
            if i > 0 {
                self.out.push(' ');
            }
            num(&mut self.out, x);
            self.out.push(',');
            num(&mut self.out, y);
        }
        self.out.push('"');
    }

    /// A filled polygon with an optional tooltip.
    pub fn polygon(&mut self, points: &[(f64, f64)], fill: &str, title: Option<&str>) {
        self.polygon_with(points, fill, title, "");
    }

    /// A filled polygon with an optional tooltip and further attributes (`extra`, or empty).
    pub fn polygon_with(&mut self, points: &[(f64, f64)], fill: &str, title: Option<&str>, extra: &str) {
        self.out.push_str("<polygon");
        self.points(points);
        let _ = write!(self.out, " fill=\"{fill}\"");
        if !extra.is_empty() {
            let _ = write!(self.out, " {extra}");
        }
        match title {
            Some(t) => {
                let _ = write!(self.out, "><title>{}</title></polygon>", escape(t));
            }
            None => self.out.push_str("/>"),
        }
    }

    /// An open line through `points`; `dash` is a `stroke-dasharray` (or empty).
    pub fn polyline(&mut self, points: &[(f64, f64)], stroke: &str, width: f64, dash: &str) {
        self.out.push_str("<polyline");
        self.points(points);
        let _ = write!(self.out, " fill=\"none\" stroke=\"{stroke}\" stroke-width=\"{width}\"");
        if !dash.is_empty() {
            let _ = write!(self.out, " stroke-dasharray=\"{dash}\"");
        }
        self.out.push_str("/>");
    }

    /// A straight line.
    pub fn line(&mut self, from: (f64, f64), to: (f64, f64), stroke: &str, width: f64, dash: &str) {
        self.polyline(&[from, to], stroke, width, dash);
    }

    /// Text at `(x, y)` (the baseline); `anchor` is `start`, `middle` or `end`.
    pub fn text(&mut self, x: f64, y: f64, size: f64, anchor: &str, text: &str) {
        self.out.push_str("<text x=\"");
        num(&mut self.out, x);
        self.out.push_str("\" y=\"");
        num(&mut self.out, y);
        let _ =
            write!(self.out, "\" font-size=\"{size}\" text-anchor=\"{anchor}\" fill=\"{INK}\">{}</text>", escape(text));
    }

    /// Markup written as it is (the caller's, well-formed).
    pub fn raw(&mut self, markup: &str) {
        self.out.push_str(markup);
    }

    /// The markup written so far, as the inside of a `<g>` moved down by `dy`.
    pub fn group(&self, dy: f64, attributes: &str) -> String {
        let mut out = String::with_capacity(self.out.len() + 64);
        out.push_str("<g transform=\"translate(0,");
        num(&mut out, dy);
        let _ = write!(out, ")\" {attributes}>");
        out.push_str(&self.out);
        out.push_str("</g>");
        out
    }
}

/// A whole SVG document of `width` × `height` around `body`, on the page's background.
pub(crate) fn document(width: f64, height: f64, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + 400);
    out.push_str("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"");
    num(&mut out, width);
    out.push_str("\" height=\"");
    num(&mut out, height);
    out.push_str("\" viewBox=\"0 0 ");
    num(&mut out, width);
    out.push(' ');
    num(&mut out, height);
    let _ = write!(
        out,
        "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\"><rect width=\"100%\" height=\"100%\" fill=\"{BACKGROUND}\"/>"
    );
    out.push_str(body);
    out.push_str("</svg>\n");
    out
}

/// Ticks for a byte axis up to `max`: round multiples of a power of 1024 (`(value, label)`).
pub(crate) fn byte_ticks(max: usize) -> Vec<(usize, String)> {
    if max == 0 {
        return vec![(0, "0".into())];
    }
    let (mut unit, mut name) = (1usize, "B");
    for (u, n) in [(1usize << 10, "KiB"), (1 << 20, "MiB"), (1 << 30, "GiB"), (1 << 40, "TiB")] {
        if max >= u {
            (unit, name) = (u, n);
        }
    }
    let step = nice_step(max as f64 / unit as f64) * unit as f64;
    let mut ticks = Vec::new();
    for i in 0.. {
        let v = i as f64 * step;
        if v > max as f64 {
            break;
        }
        let units = v / unit as f64;
        let label = if units == 0.0 {
            "0".to_string()
        } else if units.fract() == 0.0 {
            format!("{} {name}", units as u64)
        } else {
            format!("{units:.1} {name}")
        };
        ticks.push((v as usize, label));
    }
    ticks
}

/// Ticks for a count axis `0..=max` (multiples of 1, 2 or 5 × 10^k, at most about six).
pub(crate) fn count_ticks(max: usize) -> Vec<usize> {
    let step = nice_step(max as f64).max(1.0) as usize;
    (0..=max).step_by(step).collect()
}

/// A step of 1, 2 or 5 × 10^k giving three to six ticks over `0..=span`.
fn nice_step(span: f64) -> f64 {
    if span <= 0.0 {
        return 1.0;
    }
    let raw = span / 5.0;
    let k = 10f64.powf(raw.log10().floor());
    let m = raw / k;
    let nice = if m <= 1.0 {
        1.0
    } else if m <= 2.0 {
        2.0
    } else if m <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round() {
        let t: Vec<String> = byte_ticks(7 << 30).into_iter().map(|t| t.1).collect();
        assert_eq!(t, ["0", "2 GiB", "4 GiB", "6 GiB"]);
        assert_eq!(byte_ticks(3 << 19).last().unwrap().1, "1.5 MiB");
        assert_eq!(count_ticks(7722), [0, 2000, 4000, 6000]);
        assert_eq!(count_ticks(3), [0, 1, 2, 3]);
        assert_eq!(byte_ticks(0).len(), 1);
    }

    #[test]
    fn shapes_are_compact_and_escaped() {
        let mut s = Svg::default();
        s.rect(1.0, 2.25, 3.04, 4.0, FREE, "");
        s.polygon(&[(0.0, 0.0), (1.5, 2.0)], BY_SIZE[0], Some("a < b & c"));
        s.text(0.0, 0.0, 11.0, "start", "\"x\"");
        let body = s.group(10.0, "");
        assert!(body.contains("<rect x=\"1\" y=\"2.3\" width=\"3\" height=\"4\""), "{body}");
        assert!(body.contains("points=\"0,0 1.5,2\"") && body.contains("a &lt; b &amp; c"), "{body}");
        assert!(body.contains("&quot;x&quot;") && body.starts_with("<g transform=\"translate(0,10)\""), "{body}");
    }
}
