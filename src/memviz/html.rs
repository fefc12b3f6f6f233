//! The HTML page of a [`Picture`](super::Picture): the summary as a table, then the views as inline SVG. One
//! file, no script, nothing fetched: it opens anywhere, offline.

use super::summary::{moment_text, Summary};
use super::svg::escape;
use crate::cuda::memory::format_bytes;
use std::fmt::Write;

/// The page's style (inline).
pub(crate) const STYLE: &str =
    "body{font-family:'DejaVu Sans',Helvetica,Arial,sans-serif;margin:24px;color:#222;background:#fff}\
h1{font-size:20px;margin:0 0 12px}\
table{border-collapse:collapse;font-size:13px}td{padding:2px 14px 2px 0;vertical-align:top}td:first-child{color:#555}\
p.note{font-size:12px;color:#555;max-width:1150px;margin:4px 0 28px}svg{display:block}";

/// A self-contained HTML page titled `title` around `body` (HTML, such as
/// [`Picture::to_html_body`](super::Picture::to_html_body) and
/// [`Chart::to_html_body`](super::chart::Chart::to_html_body)), with the style the pictures use.
pub fn html_page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style></head><body>\n<h1>{}</h1>\n{body}</body></html>\n",
        escape(title),
        escape(title)
    )
}

/// `rows` as a two-column table.
pub(crate) fn table(rows: &[(String, String)]) -> String {
    let mut t = String::from("<table>");
    for (k, v) in rows {
        let _ = write!(t, "<tr><td>{}</td><td>{}</td></tr>", escape(k), escape(v));
    }
    t.push_str("</table>\n");
    t
}

/// The page's content: the summary table, the views (the timeline's SVG document, if the
/// device has a history, and the segment view's), their notes.
pub(crate) fn body(s: &Summary, timeline_svg: Option<String>, segments_svg: &str) -> String {
    let b = format_bytes;
    let rows = vec![
        ("history".to_string(), format!("{} events", s.events)),
        (
            "peak allocated".into(),
            format!("{} {} (live bytes as requested)", b(s.peak_allocated), moment_text(s.peak_at, s.events)),
        ),
        ("peak reserved".into(), b(s.peak_reserved)),
        (
            format!("segments {}", moment_text(s.shown_at, s.events)),
            format!(
                "{} segments: {} reserved, {} allocated, {} pending free, {} free (largest block {})",
                s.segments,
                b(s.reserved),
                b(s.allocated),
                b(s.pending_free),
                b(s.free),
                b(s.largest_free)
            ),
        ),
        ("fragmentation".into(), format!("{:.3} of the reserved bytes are free blocks", s.fragmentation)),
        ("driver allocations".into(), format!("{} (frees {})", s.driver_allocations, s.driver_frees)),
        ("out of memory".into(), s.ooms.to_string()),
    ];
    let mut body = table(&rows);
    match timeline_svg {
        Some(svg) => {
            body.push_str("<div id=\"timeline\">");
            body.push_str(&svg);
            body.push_str("</div>");
            body.push_str("<p class=\"note\">Each band is one allocation, from its alloc to its free_completed, stacked in the order they were made; when one is freed, those above it move down. Where many events share a pixel column, the column shows its highest moment; allocations thinner than a pixel are summed into the grey band. Hover a band for its size and events.</p>\n");
        }
        None => body.push_str("<p class=\"note\">No history for this device: record one with record_memory_history (torch.cuda.memory._record_memory_history) before the workload.</p>\n"),
    }
    body.push_str("<div id=\"segments\">");
    body.push_str(segments_svg);
    body.push_str("</div>");
    body.push_str("<p class=\"note\">One bar per segment (one driver allocation, or one mapped range of an expandable segment), all to one scale, grouped by stream and pool. Free stretches between allocated blocks are fragmentation: memory held from the driver that a larger request cannot use. Hover a bar or a block for its figures.</p>\n");
    body
}
