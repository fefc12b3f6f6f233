//! Pictures of the caching allocator's memory, as PyTorch's `memory_viz` draws them, from
//! cudasem's snapshots ([`cuda::memory_snapshot`](crate::cuda::memory_snapshot)) and PyTorch's
//! (`torch.cuda.memory._dump_snapshot`): the renderer of `cudasem memviz`.
//!
//! - The **active memory timeline**: every live allocation a band, stacked in the order they
//!   were made, over the trace's events; the peak marked, the reserved bytes as a line above.
//! - The **segment view** at the peak (or at a chosen event): every segment a bar split into its
//!   blocks — allocated (requested bytes and rounding), pending free, free — per stream and pool.
//! - A [`Summary`]: peaks, fragmentation, driver allocations, OOMs.
//!
//! [`Picture::to_html`] is one self-contained page (inline SVG, no script, nothing fetched);
//! [`Picture::to_svg`] one SVG document. A trace of millions of events draws in seconds and stays
//! small: many events share a pixel column (drawn at its highest moment), and allocations thinner
//! than a pixel are summed into one band.
//!
//! ```
//! use cudasem::memviz::{self, Options};
//! # fn main() -> cudasem::Result<()> {
//! cudasem::cuda::record_memory_history(true, 10_000)?;
//! let x = cudasem::Tensor::ones([1024, 1024], cudasem::DType::F32, "cuda")?;
//! let picture = memviz::render(&cudasem::cuda::memory_snapshot()?, &Options::default())?;
//! assert!(picture.summary().peak_allocated >= 4 << 20);
//! assert!(picture.to_html().starts_with("<!DOCTYPE html>"));
//! # drop(x); Ok(()) }
//! ```
//!
//! This module sits above the public API (it uses nothing else), like the command-line tool;
//! it is the `memviz` feature (on by default, and with `cli`).

mod bounds;
mod frame;
mod history;
mod html;
mod load;
mod segment_view;
mod segments;
mod svg;
mod timeline;

pub mod chart;

pub use load::{load_snapshot, read_snapshot};

use crate::cuda::memory::format_bytes;
use crate::cuda::{BlockState, SegmentInfo, Snapshot, TraceAction};
use crate::error::{Error, Result};
use history::History;
use std::fmt;

/// How allocations are coloured on the timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ColorBy {
    /// By size, small (dark) to large (bright), as a heat scale.
    #[default]
    Size,
    /// By stream, one colour each.
    Stream,
}

/// What to draw.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The device (`None`: the first one with a trace or segments).
    pub device: Option<usize>,
    /// The segment view's moment: just after this trace entry (0-based) of the device's history
    /// (`None`: the peak of live bytes).
    pub at: Option<usize>,
    /// The timeline's colours.
    pub color_by: ColorBy,
}

/// The figures of a picture.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Summary {
    /// The device drawn.
    pub device: usize,
    /// Entries of its history (trace).
    pub events: usize,
    /// The highest live bytes over the history (requested sizes, as traces record them).
    pub peak_allocated: usize,
    /// The trace entry just after which that peak is first reached (`None`: before the trace).
    pub peak_at: Option<usize>,
    /// The highest reserved bytes (held from the driver) over the history.
    pub peak_reserved: usize,
    /// The trace entry just after which the segment view is taken (`None`: before the trace).
    pub shown_at: Option<usize>,
    /// Segments at that moment.
    pub segments: usize,
    /// Reserved bytes at that moment.
    pub reserved: usize,
    /// Bytes of allocated blocks at that moment (rounded sizes).
    pub allocated: usize,
    /// Bytes of blocks freed but waiting for their recorded streams at that moment.
    pub pending_free: usize,
    /// Bytes of free blocks in the segments at that moment.
    pub free: usize,
    /// The largest free block at that moment.
    pub largest_free: usize,
    /// `free / reserved` at that moment: the share of reserved memory in free blocks.
    pub fragmentation: f64,
    /// Driver allocations in the history (`segment_alloc` and `segment_map` entries).
    pub driver_allocations: usize,
    /// Driver frees in the history (`segment_free` and `segment_unmap` entries).
    pub driver_frees: usize,
    /// Allocations that ran out of memory in the history (`oom` entries).
    pub ooms: usize,
}

fn moment_text(at: Option<usize>, events: usize) -> String {
    match at {
        None => "before the trace".to_string(),
        Some(e) if e + 1 == events => format!("after event {e}, the last"),
        Some(e) => format!("after event {e}"),
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = format_bytes;
        writeln!(f, "cuda:{}, {} events in the history", self.device, self.events)?;
        writeln!(f, "peak allocated     {} {}", b(self.peak_allocated), moment_text(self.peak_at, self.events))?;
        writeln!(f, "peak reserved      {}", b(self.peak_reserved))?;
        writeln!(
            f,
            "segments {:<10} {} segments, {} reserved, {} allocated, {} pending free, {} free",
            moment_text(self.shown_at, self.events),
            self.segments,
            b(self.reserved),
            b(self.allocated),
            b(self.pending_free),
            b(self.free)
        )?;
        writeln!(
            f,
            "fragmentation      {:.3} (free / reserved), largest free block {}",
            self.fragmentation,
            b(self.largest_free)
        )?;
        write!(f, "driver allocs      {} (frees {}), OOMs {}", self.driver_allocations, self.driver_frees, self.ooms)
    }
}

/// A rendered picture: the summary, the timeline and the segment view.
#[derive(Debug, Clone)]
pub struct Picture {
    summary: Summary,
    timeline: Option<String>,
    segments: (String, f64),
}

/// Height of the summary's lines at the top of [`Picture::to_svg`].
const SUMMARY_HEIGHT: f64 = 120.0;

impl Picture {
    /// The figures.
    pub fn summary(&self) -> &Summary {
        &self.summary
    }

    /// The timeline alone as an SVG document (`None` when the snapshot has no history for the
    /// device: record it with `record_memory_history`).
    pub fn timeline_svg(&self) -> Option<String> {
        self.timeline.as_ref().map(|body| svg::document(timeline::WIDTH, timeline::HEIGHT, body))
    }

    /// The segment view alone as an SVG document.
    pub fn segments_svg(&self) -> String {
        svg::document(timeline::WIDTH, self.segments.1, &self.segments.0)
    }

    /// Everything as one SVG document: the summary, the timeline, the segment view.
    pub fn to_svg(&self) -> String {
        let mut s = svg::Svg::default();
        for (i, line) in self.summary.to_string().lines().enumerate() {
            s.text(20.0, 24.0 + 17.0 * i as f64, 12.0, "start", line);
        }
        let mut body = s.group(0.0, "");
        let mut y = SUMMARY_HEIGHT;
        if let Some(t) = &self.timeline {
            body.push_str(&format!("<g transform=\"translate(0,{y})\">{t}</g>"));
            y += timeline::HEIGHT;
        }
        body.push_str(&format!("<g transform=\"translate(0,{y})\">{}</g>", self.segments.0));
        svg::document(timeline::WIDTH, y + self.segments.1, &body)
    }

    /// One self-contained HTML page (inline SVG, no script, nothing fetched).
    pub fn to_html(&self) -> String {
        html_page(&format!("Memory of cuda:{}", self.summary.device), &self.to_html_body())
    }

    /// The page's content without the document around it (the summary table, the views), to put
    /// into a page with more (see [`html_page`]).
    pub fn to_html_body(&self) -> String {
        html::body(self)
    }
}

/// A self-contained HTML page titled `title` around `body` (HTML, such as
/// [`Picture::to_html_body`] and [`chart::Chart::to_html_body`]), with the style the pictures use.
pub fn html_page(title: &str, body: &str) -> String {
    html::document(title, body)
}

/// The devices a snapshot covers.
fn device_count(snapshot: &Snapshot) -> usize {
    let by_segments = snapshot.segments.iter().map(|s| s.device.saturating_add(1)).max().unwrap_or(0);
    snapshot.device_traces.len().max(by_segments).max(1)
}

fn pick_device(snapshot: &Snapshot, asked: Option<usize>) -> Result<usize> {
    let count = device_count(snapshot);
    match asked {
        Some(d) if d >= count => Err(Error::InvalidArgument {
            op: "memviz",
            reason: format!("device {d} asked, the snapshot covers devices 0..{count}"),
        }),
        Some(d) => Ok(d),
        // The lowest device with a trace or segments (never a walk over every index: a snapshot
        // made by hand may name any device).
        None => {
            let traced = snapshot.device_traces.iter().position(|t| !t.is_empty());
            let held = snapshot.segments.iter().map(|s| s.device).min();
            Ok(traced.into_iter().chain(held).min().unwrap_or(0))
        }
    }
}

/// Renders `snapshot` (see the module's docs). A device the snapshot does not cover, or an
/// `at` past its history, is [`Error::InvalidArgument`]; a snapshot made by hand that no file
/// would load (a device index of 256 or more, a segment, block or trace entry ending past 2^64,
/// sizes adding up past 2^64) is [`Error::InvalidSnapshot`], as [`load_snapshot`] would say.
pub fn render(snapshot: &Snapshot, options: &Options) -> Result<Picture> {
    load::check(snapshot)?;
    let device = pick_device(snapshot, options.device)?;
    let h = History::of(snapshot, device);
    let events = h.events.len();
    let (peak_moment, peak_allocated) = h.peak();
    let moment = match options.at {
        Some(e) if e >= events => {
            return Err(Error::InvalidArgument {
                op: "memviz",
                reason: format!("--at {e}: the history of cuda:{device} has events 0..{events}"),
            })
        }
        Some(e) => e + 1,
        None => peak_moment,
    };
    let segs = segments::segments_at(snapshot, device, &h.events, moment);
    let event_of = |m: usize| m.checked_sub(1);
    let summary = summarize(&h, &segs, device, event_of(peak_moment), peak_allocated, event_of(moment));
    let title = format!("Active memory timeline: cuda:{device}, {events} events");
    let timeline = (events > 0).then(|| timeline::draw(&h, options.color_by, moment, &title));
    let when = moment_text(event_of(moment), events);
    let segments = segment_view::draw(&segs, &format!("of cuda:{device} {when}"));
    Ok(Picture { summary, timeline, segments })
}

fn summarize(
    h: &History,
    segs: &[SegmentInfo],
    device: usize,
    peak_at: Option<usize>,
    peak_allocated: usize,
    shown_at: Option<usize>,
) -> Summary {
    let count = |actions: &[TraceAction]| h.events.iter().filter(|e| actions.contains(&e.action)).count();
    let reserved: usize = segs.iter().map(|s| s.total_size).sum();
    let allocated: usize = segs.iter().map(|s| s.allocated_size).sum();
    let active: usize = segs.iter().map(|s| s.active_size).sum();
    let free = reserved - active;
    let largest_free = segs
        .iter()
        .flat_map(|s| s.blocks.iter())
        .filter(|b| b.state == BlockState::Inactive)
        .map(|b| b.size)
        .max()
        .unwrap_or(0);
    Summary {
        device,
        events: h.events.len(),
        peak_allocated,
        peak_at,
        peak_reserved: h.reserved.iter().copied().max().unwrap_or(0),
        shown_at,
        segments: segs.len(),
        reserved,
        allocated,
        pending_free: active - allocated,
        free,
        largest_free,
        fragmentation: if reserved == 0 { 0.0 } else { free as f64 / reserved as f64 },
        driver_allocations: count(&[TraceAction::SegmentAlloc, TraceAction::SegmentMap]),
        driver_frees: count(&[TraceAction::SegmentFree, TraceAction::SegmentUnmap]),
        ooms: count(&[TraceAction::Oom]),
    }
}
