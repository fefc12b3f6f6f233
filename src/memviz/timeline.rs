//! The active memory timeline: every live allocation a band, stacked in the order they were
//! made (a freed band lets the ones above it down), the reserved bytes as a line above, the peak
//! marked.
//!
//! Many moments share a pixel column: each column shows the stack at its highest moment, so the
//! area reaches every peak. Bands thinner than a pixel are summed into one grey band on top of
//! the others, and the threshold grows until the picture holds at most [`POINT_BUDGET`] points,
//! so a trace of millions of events still draws in a few hundred kilobytes.

use super::frame::{column_max, columns, step_line, Columns, Frame};
use super::history::History;
use super::options::ColorBy;
use super::svg::{Svg, BY_SIZE, BY_STREAM, INK, RESERVED, SUMMARIZED};
use crate::cuda::memory::format_bytes;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

/// At most this many polygon points for all bands together.
pub(crate) const POINT_BUDGET: usize = 120_000;
/// The picture's width.
pub(crate) const WIDTH: f64 = 1200.0;
/// The timeline's height.
pub(crate) const HEIGHT: f64 = 430.0;

/// One drawn allocation: where it sits in the stack at each column it is live in.
#[derive(Debug, Clone)]
struct Band {
    life: usize,
    /// `(column, offset)` where the offset changes, starting with its first column.
    changes: Vec<(usize, usize)>,
}

/// The bands of allocations of at least `min_size` bytes, and the bytes they stack up to at each
/// column.
#[derive(Debug)]
struct Bands {
    bands: Vec<Band>,
    drawn: Vec<usize>,
    points: usize,
    min_size: usize,
}

fn stack(h: &History, cols: &Columns, min_size: usize) -> Bands {
    let mut live: BTreeMap<usize, usize> = BTreeMap::new();
    let mut ends: BinaryHeap<Reverse<(usize, usize)>> = BinaryHeap::new();
    let mut band_of: Vec<u32> = vec![u32::MAX; h.lives.len()];
    let (mut bands, mut drawn, mut next) = (Vec::<Band>::new(), Vec::with_capacity(cols.samples.len()), 0);
    for (c, &s) in cols.samples.iter().enumerate() {
        while next < h.lives.len() && h.lives[next].start <= s {
            let l = &h.lives[next];
            if l.size >= min_size && l.end > s {
                live.insert(next, l.size);
                ends.push(Reverse((l.end, next)));
            }
            next += 1;
        }
        while let Some(&Reverse((end, i))) = ends.peek() {
            if end > s {
                break;
            }
            live.remove(&i);
            ends.pop();
        }
        let mut offset = 0;
        for (&i, &size) in &live {
            if band_of[i] == u32::MAX {
                band_of[i] = bands.len() as u32;
                bands.push(Band { life: i, changes: vec![(c, offset)] });
            } else {
                let band = &mut bands[band_of[i] as usize];
                if band.changes.last().is_some_and(|&(_, o)| o != offset) {
                    band.changes.push((c, offset));
                }
            }
            offset += size;
        }
        drawn.push(offset);
    }
    let points = bands.iter().map(|b| 4 * b.changes.len()).sum();
    Bands { bands, drawn, points, min_size }
}

/// The bands, with the smallest threshold (from one pixel's bytes up) that keeps to the budget.
fn bands(h: &History, cols: &Columns, frame: &Frame) -> Bands {
    let mut min_size = frame.bytes_per_pixel();
    loop {
        let b = stack(h, cols, min_size);
        if b.points <= POINT_BUDGET || min_size >= frame.y_max {
            return b;
        }
        min_size = min_size.saturating_mul(2);
    }
}

/// The outline of a band: its bottom edge left to right, its top edge back.
fn outline(frame: &Frame, cols: &Columns, h: &History, band: &Band) -> Vec<(f64, f64)> {
    let life = h.lives[band.life];
    let mut bottom = vec![(frame.left(life.start), band.changes[0].1)];
    for w in band.changes.windows(2) {
        let (c1, o1) = w[1];
        let prev = bottom.last().expect("started").1;
        bottom.push((frame.mid(cols.samples[c1 - 1]), prev));
        bottom.push((frame.mid(cols.samples[c1]), o1));
    }
    bottom.push((frame.left(life.end), bottom.last().expect("started").1));
    let mut points: Vec<(f64, f64)> = bottom.iter().map(|&(x, o)| (x, frame.y(o))).collect();
    points.extend(bottom.iter().rev().map(|&(x, o)| (x, frame.y(o + life.size))));
    points
}

/// Each band's colour: by stream, or by size on a log scale from the smallest drawn band to the
/// largest; every other band of a stack a little lighter, so equal neighbours stay apart.
fn colors(by: ColorBy, h: &History, b: &Bands) -> Vec<String> {
    let mut streams: Vec<u64> = h.lives.iter().map(|l| l.stream).collect();
    streams.sort_unstable();
    streams.dedup();
    let sizes = b.bands.iter().map(|band| h.lives[band.life].size);
    let (lo, hi) = (sizes.clone().min().unwrap_or(1) as f64, sizes.max().unwrap_or(1) as f64);
    b.bands
        .iter()
        .enumerate()
        .map(|(i, band)| {
            let life = h.lives[band.life];
            let base = match by {
                ColorBy::Stream => {
                    let i = streams.iter().position(|&s| s == life.stream).unwrap_or(0);
                    BY_STREAM[i % BY_STREAM.len()]
                }
                ColorBy::Size => {
                    let f = ((life.size as f64).log2() - lo.log2()) / (hi.log2() - lo.log2()).max(1e-9);
                    BY_SIZE[((f.clamp(0.0, 1.0) * (BY_SIZE.len() - 1) as f64).round()) as usize]
                }
            };
            if i % 2 == 1 {
                lighten(base, 0.22)
            } else {
                base.to_string()
            }
        })
        .collect()
}

/// `hex` mixed with white by `amount` (0 to 1).
fn lighten(hex: &str, amount: f64) -> String {
    let channel = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or(0) as f64;
    let mix = |v: f64| (v + (255.0 - v) * amount).round() as u8;
    format!("#{:02x}{:02x}{:02x}", mix(channel(1)), mix(channel(3)), mix(channel(5)))
}

fn tooltip(h: &History, band: &Band) -> String {
    let l = h.lives[band.life];
    let from = if l.start == 0 { "before the trace".to_string() } else { format!("at event {}", l.start - 1) };
    let to = if l.end >= h.moments() { "still live".to_string() } else { format!("freed at event {}", l.end - 1) };
    format!("{} at {:#x}, stream {:#x}: allocated {from}, {to}", format_bytes(l.size), l.addr, l.stream)
}

/// The plot area: up to the higher of the peaks of live and reserved bytes.
fn frame(h: &History) -> Frame {
    let y_max = h.peak().1.max(h.reserved.iter().copied().max().unwrap_or(0));
    Frame { x: 90.0, y: 64.0, w: WIDTH - 120.0, h: HEIGHT - 124.0, moments: h.moments(), y_max }
}

/// The timeline's SVG (a group `HEIGHT` high), `shown` being the moment the segment view shows,
/// and the index in `h.lives` of each drawn band, in the order of their `data-b` attributes.
///
/// What lies over the plot area (the bands, the reserved line, the marks) is one group
/// (`class="tl-zoom"`) clipped to it, which the interactive page stretches to zoom.
pub(crate) fn draw(h: &History, by: ColorBy, shown: usize, title: &str) -> (String, Vec<usize>) {
    let (peak_at, peak) = h.peak();
    let frame = frame(h);
    let cols = columns(&h.live, frame.w as usize);
    let b = bands(h, &cols, &frame);
    let mut svg = Svg::default();
    svg.text(frame.x, 22.0, 15.0, "start", title);
    legend(&mut svg, by, &b, frame.x, 44.0);
    frame.axes(&mut svg, "allocator events of the trace, in order");
    let (clip_y, clip_h) = (frame.y - 14.0, frame.h + 24.0);
    svg.raw(&format!(
        "<clipPath id=\"tl-clip\"><rect x=\"{}\" y=\"{clip_y}\" width=\"{}\" height=\"{clip_h}\"/></clipPath><g clip-path=\"url(#tl-clip)\"><g class=\"tl-zoom\">",
        frame.x, frame.w
    ));
    for (i, (band, color)) in b.bands.iter().zip(colors(by, h, &b)).enumerate() {
        let tip = tooltip(h, band);
        svg.polygon_with(&outline(&frame, &cols, h, band), &color, Some(&tip), &format!("data-b=\"{i}\""));
    }
    summarized(&mut svg, &frame, &cols, h, &b);
    let reserved = step_line(&frame, &cols, &column_max(&h.reserved, &cols));
    svg.polyline(&reserved, RESERVED, 1.5, "");
    let (x, y) = (frame.mid(peak_at), frame.y(peak));
    svg.line((x, frame.y), (x, y - 6.0), INK, 1.0, "4 3");
    svg.polygon(&[(x - 5.0, y - 10.0), (x + 5.0, y - 10.0), (x, y - 3.0)], INK, None);
    if shown != peak_at {
        let x = frame.mid(shown);
        svg.line((x, frame.y), (x, frame.y + frame.h), super::svg::REQUESTED, 1.0, "2 2");
    }
    ooms(&mut svg, &frame, h);
    svg.raw("</g></g>");
    let label =
        format!("peak {} {}", format_bytes(peak), super::summary::moment_text(peak_at.checked_sub(1), h.events.len()));
    let anchor = if x > frame.x + frame.w * 0.6 { "end" } else { "start" };
    svg.raw("<g class=\"tl-fixed\">");
    svg.text(if anchor == "end" { x - 8.0 } else { x + 8.0 }, frame.y + 12.0, 11.0, anchor, &label);
    svg.raw("</g>");
    let attributes = format!("{} data-peak=\"{peak_at} {peak}\" data-min-band=\"{}\"", frame.attributes(), b.min_size);
    (svg.group(0.0, &attributes), b.bands.iter().map(|band| band.life).collect())
}

/// A mark below the axis at each out-of-memory event (one per pixel column at most).
fn ooms(svg: &mut Svg, frame: &Frame, h: &History) {
    let mut last_x = f64::NEG_INFINITY;
    for (i, e) in h.events.iter().enumerate().filter(|(_, e)| e.action == crate::cuda::TraceAction::Oom) {
        let x = frame.mid(i + 1);
        if x - last_x < 1.0 {
            continue;
        }
        last_x = x;
        let y = frame.y + frame.h;
        let tip = format!(
            "out of memory at event {i}: {} asked, {} free on the device",
            format_bytes(e.size),
            format_bytes(e.addr as usize)
        );
        svg.polygon(&[(x, y - 8.0), (x - 5.0, y + 1.0), (x + 5.0, y + 1.0)], RESERVED, Some(&tip));
    }
}

/// The allocations below the threshold, summed into one band on top of the drawn ones.
fn summarized(svg: &mut Svg, frame: &Frame, cols: &Columns, h: &History, b: &Bands) {
    let totals: Vec<usize> = cols.samples.iter().map(|&s| h.live[s]).collect();
    if totals.iter().zip(&b.drawn).all(|(t, d)| t <= d) {
        return;
    }
    let mut bottom = vec![(frame.left(0), b.drawn[0])];
    let mut top = vec![(frame.left(0), totals[0])];
    for (c, &s) in cols.samples.iter().enumerate() {
        bottom.push((frame.mid(s), b.drawn[c]));
        top.push((frame.mid(s), totals[c]));
    }
    let last = cols.samples.len() - 1;
    bottom.push((frame.left(frame.moments), b.drawn[last]));
    top.push((frame.left(frame.moments), totals[last]));
    let mut points: Vec<(f64, f64)> = bottom.iter().map(|&(x, v)| (x, frame.y(v))).collect();
    points.extend(top.iter().rev().map(|&(x, v)| (x, frame.y(v))));
    let tip = format!("allocations under {} each, summed", format_bytes(b.min_size));
    svg.polygon(&points, SUMMARIZED, Some(&tip));
}

fn legend(svg: &mut Svg, by: ColorBy, b: &Bands, x: f64, y: f64) {
    let colours: &[&str] = if by == ColorBy::Size { &BY_SIZE } else { &BY_STREAM[..3] };
    for (i, c) in colours.iter().enumerate() {
        svg.rect(x + 8.0 * i as f64, y - 9.0, 8.0, 10.0, c, "");
    }
    let mut at = x + 8.0 * colours.len() as f64 + 6.0;
    let what = if by == ColorBy::Size {
        "one band per allocation, small to large"
    } else {
        "one band per allocation, by stream"
    };
    svg.text(at, y, 11.0, "start", what);
    at += 280.0;
    svg.rect(at, y - 9.0, 14.0, 10.0, SUMMARIZED, "");
    svg.text(at + 20.0, y, 11.0, "start", &format!("allocations under {} each, summed", format_bytes(b.min_size)));
    at += 290.0;
    svg.line((at, y - 4.0), (at + 18.0, y - 4.0), RESERVED, 1.5, "");
    svg.text(at + 24.0, y, 11.0, "start", "reserved (held from the driver)");
    at += 210.0;
    svg.polygon(&[(at + 5.0, y - 9.0), (at, y), (at + 10.0, y)], RESERVED, None);
    svg.text(at + 16.0, y, 11.0, "start", "out of memory");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::{Snapshot, StreamId, TraceAction, TraceEntry};

    fn trace(entries: &[(TraceAction, u64, usize)]) -> History {
        let events = entries
            .iter()
            .map(|&(action, addr, size)| TraceEntry {
                action,
                addr,
                size,
                stream: StreamId(0),
                time_us: 0,
                frames: Default::default(),
            })
            .collect();
        History::of(&Snapshot { segments: vec![], device_traces: vec![events] }, 0)
    }

    #[test]
    fn a_freed_band_lets_the_ones_above_down() {
        use TraceAction::*;
        let h = trace(&[(Alloc, 1, 100), (Alloc, 2, 50), (FreeCompleted, 1, 100), (FreeCompleted, 2, 50)]);
        let cols = columns(&h.live, 1000);
        let b = stack(&h, &cols, 1);
        assert_eq!(b.drawn, [0, 100, 150, 50, 0]);
        assert_eq!(b.bands.len(), 2);
        assert_eq!(b.bands[1].changes, [(2, 100), (3, 0)], "the second band drops when the first is freed");
        let frame = Frame { x: 0.0, y: 0.0, w: 50.0, h: 150.0, moments: 5, y_max: 150 };
        let o = outline(&frame, &cols, &h, &b.bands[1]);
        assert_eq!(o.first(), Some(&(20.0, 50.0)), "bottom-left at its alloc, 100 bytes up");
        assert!(o.contains(&(35.0, 150.0)) && o.contains(&(40.0, 100.0)), "{o:?}");
    }

    #[test]
    fn many_small_allocations_are_summed_within_the_budget() {
        use TraceAction::*;
        // 200 allocations live at a time, of 1 to 100 kB: most are over a pixel, and each column
        // moves most of them, so one pixel's threshold would take far more points than the budget.
        let size = |i: u64| 1000 + (i * 7919 % 99_000) as usize;
        let mut entries = Vec::new();
        for i in 0..100_000u64 {
            entries.push((Alloc, i, size(i)));
            if i >= 200 {
                entries.push((FreeCompleted, i - 200, size(i - 200)));
            }
        }
        let h = trace(&entries);
        let f = frame(&h);
        let cols = columns(&h.live, f.w as usize);
        assert!(stack(&h, &cols, f.bytes_per_pixel()).points > POINT_BUDGET, "the case needs the budget");
        let b = bands(&h, &cols, &f);
        assert!(b.points <= POINT_BUDGET && b.min_size > f.bytes_per_pixel(), "{} points", b.points);
        let (svg, drawn) = draw(&h, ColorBy::Size, h.peak().0, "t");
        assert_eq!(drawn.len(), b.bands.len(), "one data-b per band");
        assert!(svg.len() < 3 << 20, "{} bytes", svg.len());
        assert!(svg.contains(SUMMARIZED), "bands under the threshold are summed");
    }
}
