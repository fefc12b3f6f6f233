//! [`render`]: a snapshot drawn as a [`Picture`] — its [`Summary`], the active memory
//! timeline and the segment view — and the picture as SVG or HTML.

use super::history::History;
use super::options::Options;
use super::summary::{self, moment_text, Summary};
use super::{html, interactive, load, page_data, segment_view, segments, svg, timeline};
use crate::cuda::Snapshot;
use crate::error::{Error, Result};

/// A rendered picture: the summary, the timeline and the segment view.
#[derive(Debug, Clone)]
pub struct Picture {
    summary: Summary,
    timeline: Option<String>,
    segments: (String, f64),
    /// What the interactive page shows on hover (`page_data`'s JSON).
    data: String,
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
        html::html_page(&format!("Memory of cuda:{}", self.summary.device), &self.to_html_body())
    }

    /// One self-contained interactive HTML page (inline SVG, script and style, nothing fetched):
    /// hovering a band of the timeline or a block of the segment view shows its size, stream,
    /// pool, allocation and free events with their times, and its stack trace (the frames of
    /// [`Options::stacks`](super::Options::stacks), first frames first); the wheel or the
    /// buttons zoom the timeline, dragging pans it.
    pub fn to_interactive_html(&self) -> String {
        let body = html::body(&self.summary, self.timeline_svg(), &self.segments_svg());
        interactive::page(&format!("Memory of cuda:{}", self.summary.device), &body, &self.data)
    }

    /// The page's content without the document around it (the summary table, the views), to put
    /// into a page with more (see [`html_page`](super::html_page)).
    pub fn to_html_body(&self) -> String {
        html::body(&self.summary, self.timeline_svg(), &self.segments_svg())
    }
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
/// sizes adding up past 2^64) is [`Error::InvalidSnapshot`], as [`load_snapshot`](super::load_snapshot) would say.
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
    let summary = summary::summarize(&h, &segs, device, event_of(peak_moment), peak_allocated, event_of(moment));
    let title = format!("Active memory timeline: cuda:{device}, {events} events");
    let timeline = (events > 0).then(|| timeline::draw(&h, options.color_by, moment, &title));
    let when = moment_text(event_of(moment), events);
    let (segments_svg, height, blocks) = segment_view::draw(&segs, &format!("of cuda:{device} {when}"));
    let bands = timeline.as_ref().map_or(&[][..], |t| &t.1[..]);
    let stacks = options.stacks.as_deref();
    let data = page_data::build(snapshot, device, &h, bands, &segs, &blocks, moment, stacks);
    Ok(Picture { summary, timeline: timeline.map(|t| t.0), segments: (segments_svg, height), data })
}
