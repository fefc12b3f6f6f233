//! A plot over moments: where moment `t` and a byte count land, the axes, and the pixel columns
//! that many moments share (each column drawn at its highest moment, so no peak is lost).

use super::svg::{byte_ticks, count_ticks, Svg, GRID};
use std::ops::Range;

/// The plot area of moments `0..moments` (left to right) and bytes `0..=y_max` (bottom to top).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Frame {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
    pub moments: usize,
    pub y_max: usize,
}

impl Frame {
    /// The left edge of moment `t` (`t = moments`: the right end of the plot).
    pub fn left(&self, t: usize) -> f64 {
        self.x + t as f64 * self.w / self.moments.max(1) as f64
    }

    /// The middle of moment `t`.
    pub fn mid(&self, t: usize) -> f64 {
        self.left(t) + 0.5 * self.w / self.moments.max(1) as f64
    }

    /// The height of `bytes`.
    pub fn y(&self, bytes: usize) -> f64 {
        self.y + self.h - bytes as f64 / self.y_max.max(1) as f64 * self.h
    }

    /// Bytes of one pixel of height (at least 1).
    pub fn bytes_per_pixel(&self) -> usize {
        (self.y_max as f64 / self.h).ceil().max(1.0) as usize
    }

    /// Grid lines with byte labels on the left, moment ticks below labelled `x_label`.
    pub fn axes(&self, svg: &mut Svg, x_label: &str) {
        for (v, label) in byte_ticks(self.y_max) {
            let y = self.y(v);
            svg.line((self.x, y), (self.x + self.w, y), GRID, 1.0, "");
            svg.text(self.x - 6.0, y + 4.0, 11.0, "end", &label);
        }
        let last = self.moments.saturating_sub(1);
        svg.raw("<g class=\"x-ticks\">");
        for t in count_ticks(last) {
            let x = self.left(t);
            svg.line((x, self.y + self.h), (x, self.y + self.h + 4.0), GRID, 1.0, "");
            svg.text(x, self.y + self.h + 16.0, 11.0, "middle", &t.to_string());
        }
        svg.raw("</g>");
        svg.line((self.x, self.y + self.h), (self.x + self.w, self.y + self.h), GRID, 1.0, "");
        svg.text(self.x + self.w / 2.0, self.y + self.h + 32.0, 11.0, "middle", x_label);
    }

    /// The plot's place and scale as attributes, for programs that read the picture.
    pub fn attributes(&self) -> String {
        format!(
            "data-plot=\"{} {} {} {}\" data-moments=\"{}\" data-ymax=\"{}\"",
            self.x, self.y, self.w, self.h, self.moments, self.y_max
        )
    }
}

/// Moments grouped into pixel columns.
#[derive(Debug, Clone)]
pub(crate) struct Columns {
    /// The moments of each column, in order, covering `0..moments`.
    pub bounds: Vec<Range<usize>>,
    /// The moment each column is drawn at: its first highest one in `values`.
    pub samples: Vec<usize>,
}

/// At most `count` columns over the moments of `values` (one column per moment when fewer).
pub(crate) fn columns(values: &[usize], count: usize) -> Columns {
    let moments = values.len();
    let n = moments.min(count.max(1));
    let bounds: Vec<Range<usize>> = (0..n).map(|c| c * moments / n..(c + 1) * moments / n).collect();
    let samples = bounds.iter().map(|r| super::history::argmax(values, r.clone()).0).collect();
    Columns { bounds, samples }
}

/// The highest of `values` over each column.
pub(crate) fn column_max(values: &[usize], cols: &Columns) -> Vec<usize> {
    cols.bounds.iter().map(|r| values[r.clone()].iter().copied().max().unwrap_or(0)).collect()
}

/// A step line of `per_column` values (one per column) across the frame.
pub(crate) fn step_line(frame: &Frame, cols: &Columns, per_column: &[usize]) -> Vec<(f64, f64)> {
    let mut points = Vec::new();
    let mut last = None;
    for (r, &v) in cols.bounds.iter().zip(per_column) {
        let x = frame.left(r.start);
        if let Some(prev) = last {
            if prev != v {
                points.push((x, frame.y(prev)));
                points.push((x, frame.y(v)));
            }
        } else {
            points.push((x, frame.y(v)));
        }
        last = Some(v);
    }
    if let Some(v) = last {
        points.push((frame.left(frame.moments), frame.y(v)));
    }
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_keep_every_peak() {
        let values: Vec<usize> = (0..1000).map(|i| if i == 537 { 99 } else { i % 7 }).collect();
        let c = columns(&values, 10);
        assert_eq!(c.bounds.len(), 10);
        assert_eq!(c.bounds[5], 500..600);
        assert_eq!(c.samples[5], 537);
        assert_eq!(column_max(&values, &c)[5], 99);
        assert_eq!(columns(&values[..3], 10).samples, [0, 1, 2], "one column per moment");
        let f = Frame { x: 10.0, y: 0.0, w: 100.0, h: 50.0, moments: 1000, y_max: 99 };
        let line = step_line(&f, &c, &column_max(&values, &c));
        assert_eq!(line.first(), Some(&(10.0, f.y(6))));
        assert!(line.contains(&(60.0, 0.0)), "the peak's column reaches the top: {line:?}");
        assert_eq!(line.last().map(|p| p.0), Some(110.0));
    }
}
