//! `cudasem replay TRACE --plot OUT.html [--compare PYTORCH.json]`: reserved and allocated bytes
//! over the trace's rows for cudasem's policy, PyTorch's reserved bytes beside them (the trace's
//! own `segment_alloc` / `segment_free` rows: what PyTorch's allocator held when the trace was
//! recorded, under default settings; with `--compare`, also the peak of PyTorch's outcome file
//! under the settings in use), and the live requested bytes no allocator can go under; below the chart, cudasem's allocator over the trace
//! as `cudasem memviz` draws it (the active memory timeline, the segments at the peak).
//!
//! cudasem's figures come from the same caching allocator and settings as the report, replayed
//! here through the public API on a one-device simulated machine of the report's capacity (this
//! process starts no other work): `caching_allocator_alloc` / `_delete` per row, each trace stream
//! one stream of the device (the default stream for stream 0, pool streams for the others, so up
//! to 32 side streams stay apart), and `memory_reserved` / `memory_allocated` after each row.

use cudasem::cuda::memory::{format_bytes, PytorchOutcome, ReplayOptions, Trace};
use cudasem::cuda::{self, AllocatorSettings, Stream, TraceAction};
use cudasem::memviz::{
    self,
    chart::{Chart, Series, Style},
};
use cudasem::{Config, DriverKind, Error, PeerSpec, Result, SimConfig};
use std::collections::HashMap;
use std::path::Path;

/// What the page's PyTorch lines and its two x-axes are (HTML, below the chart).
const HOW_TO_READ: &str = "<h2>How to read this page</h2>\n<ul>\n\
<li><b>Two PyTorch reserved peaks.</b> The dashed orange line adds up the trace's own \
<code>segment_alloc</code> and <code>segment_free</code> rows: the segments PyTorch's allocator \
took and gave back while the trace was recorded, under the settings it was recorded with. It \
starts at 0 (or at the least that keeps it from going negative, when the trace frees segments it \
did not take), so it does not count memory PyTorch already held when recording began, and a trace \
recorded with expandable segments (<code>segment_map</code> / <code>segment_unmap</code> rows) has \
none of these rows. The brown line (with <code>--compare</code>) is the \
<code>reserved_bytes.all.peak</code> of PyTorch's outcome file: PyTorch's own counter over the \
whole run, under the settings cudasem replays with (expandable segments when \
<code>CUDASEM_ALLOC_CONF</code> turns them on), drawn flat because the file has only the peak. \
The two differ where PyTorch held memory the trace does not show: on the ResNet-50 trace, 6.90 GB \
from the segment rows, 7.03 GB in the outcome file.</li>\n\
<li><b>Two x-axes.</b> The chart above counts the rows of the trace, every row (<code>alloc</code>, \
<code>free_requested</code>, <code>free_completed</code>, segment rows, ...), so cudasem's and \
PyTorch's lines are compared at the same row. The pictures below are drawn over the events of \
cudasem's own allocator history while it replayed the trace: its allocs and frees, and the \
segments it took and gave back, which are not PyTorch's. Their event numbers are therefore not \
row numbers of the trace: event N below is not row N above.</li>\n</ul>\n";

/// The series of one replay: a value after each row of the trace.
struct Replayed {
    reserved: Vec<usize>,
    allocated: Vec<usize>,
    live: Vec<usize>,
}

fn stream_for(streams: &mut HashMap<u64, Stream>, id: u64) -> Result<Stream> {
    if let Some(s) = streams.get(&id) {
        return Ok(s.clone());
    }
    let s = if id == 0 { cuda::default_stream(Some(0))? } else { Stream::new(0, 0)? };
    streams.insert(id, s.clone());
    Ok(s)
}

fn replay(trace: &Trace) -> Result<Replayed> {
    let mut streams = HashMap::new();
    let mut live_blocks: HashMap<u64, (u64, usize)> = HashMap::new();
    let (mut reserved, mut allocated, mut live) = (Vec::new(), Vec::new(), Vec::new());
    let mut requested = 0usize;
    for e in &trace.events {
        match e.action {
            TraceAction::Alloc => {
                if live_blocks.contains_key(&e.addr) {
                    let reason = format!("alloc at {:#x}, which is still live", e.addr);
                    return Err(Error::InvalidTrace { line: e.line, reason });
                }
                let stream = stream_for(&mut streams, e.stream.0)?;
                let ptr = cuda::caching_allocator_alloc(e.size, 0, Some(&stream))?;
                live_blocks.insert(e.addr, (ptr, e.size));
                requested = requested.saturating_add(e.size);
            }
            TraceAction::FreeCompleted => {
                let Some((ptr, size)) = live_blocks.remove(&e.addr) else {
                    let reason = format!("free_completed of {:#x}, which is not live", e.addr);
                    return Err(Error::InvalidTrace { line: e.line, reason });
                };
                cuda::caching_allocator_delete(ptr)?;
                requested = requested.saturating_sub(size);
            }
            _ => {}
        }
        reserved.push(cuda::memory_reserved(0)?);
        allocated.push(cuda::memory_allocated(0)?);
        live.push(requested);
    }
    Ok(Replayed { reserved, allocated, live })
}

/// PyTorch's reserved bytes after each row, from the trace's segment rows (`None` when it has
/// none).
fn pytorch_reserved(trace: &Trace) -> Option<Vec<usize>> {
    let segment_rows = |a| matches!(a, TraceAction::SegmentAlloc | TraceAction::SegmentFree);
    if !trace.events.iter().any(|e| segment_rows(e.action)) {
        return None;
    }
    let mut now = 0i128;
    let series: Vec<i128> = trace
        .events
        .iter()
        .map(|e| {
            now += match e.action {
                TraceAction::SegmentAlloc => e.size as i128,
                TraceAction::SegmentFree => -(e.size as i128),
                _ => 0,
            };
            now
        })
        .collect();
    // A trace that starts with memory already held frees more than it allocates.
    let start = -series.iter().copied().min().unwrap_or(0).min(0);
    Some(series.into_iter().map(|v| (v + start).clamp(0, usize::MAX as i128) as usize).collect())
}

fn series(label: &str, color: &str, style: Style, values: Vec<usize>) -> Series {
    Series { label: label.into(), color: color.into(), style, values }
}

/// Replays `path` for the plot and writes the page to `out`, with PyTorch's outcome file `compare`
/// where given; returns what it wrote.
pub fn write(path: &Path, out: &Path, compare: Option<&Path>) -> Result<String> {
    let trace = super::trace_file::load_trace(path)?;
    let outcome = compare.map(PytorchOutcome::from_file).transpose()?;
    let settings = AllocatorSettings::from_env()?;
    let capacity = ReplayOptions::default().capacity;
    let sim = SimConfig { devices: 1, memory: capacity, peer: PeerSpec::None, ..SimConfig::default() };
    cudasem::init(Config { driver: DriverKind::Sim, sim, allocator: settings.clone(), ..Config::default() })?;
    // Every event of cudasem's allocator, for the pictures below the chart.
    cuda::record_memory_history(true, 4 * trace.events.len() + 64)?;
    let r = replay(&trace)?;
    let picture =
        memviz::render(&cuda::memory_snapshot()?, &memviz::Options { device: Some(0), ..Default::default() })?;
    let peak = |v: &[usize]| v.iter().copied().max().unwrap_or(0);
    let mut notes = vec![
        ("trace".to_string(), format!("{} ({} rows)", path.display(), trace.events.len())),
        ("cudasem's settings".into(), Some(settings.to_string()).filter(|s| !s.is_empty()).unwrap_or("default".into())),
        ("cudasem peak reserved".into(), format_bytes(peak(&r.reserved))),
        ("cudasem peak allocated".into(), format_bytes(peak(&r.allocated))),
        ("live requested (the floor)".into(), format_bytes(peak(&r.live))),
    ];
    let pytorch = pytorch_reserved(&trace);
    let mut lines = vec![
        series("cudasem allocated", "#93bce8", Style::Area, r.allocated),
        series("live requested (the floor)", "#555555", Style::Line, r.live),
        series("cudasem reserved", "#c0392b", Style::Line, r.reserved),
    ];
    let rows = trace.events.len();
    match pytorch {
        Some(p) => {
            let label = "PyTorch reserved, default settings (the trace's segment rows)";
            notes.push((format!("{label}: peak"), format_bytes(peak(&p))));
            lines.push(series(label, "#e69138", Style::Dashed, p));
        }
        None => notes.push(("PyTorch reserved".into(), "the trace has no segment rows".into())),
    }
    if let Some(o) = outcome {
        let mode = if settings.expandable_segments() { "expandable segments" } else { "default settings" };
        let (reserved, _) = o.under(settings.expandable_segments());
        let label = format!("PyTorch peak reserved, {mode} (outcome file)");
        notes.push((label.clone(), format_bytes(reserved)));
        lines.push(series(&label, "#8c564b", Style::Dashed, vec![reserved; rows]));
    }
    let title = format!("Replay of {} through cudasem's caching allocator", path.display());
    let chart = Chart { title: title.clone(), x_label: "rows of the trace".into(), series: lines, notes };
    let mut body = chart.to_html_body();
    body.push_str(HOW_TO_READ);
    body.push_str("<h1>cudasem's allocator over the trace</h1>\n");
    body.push_str(&picture.to_html_body());
    std::fs::write(out, memviz::html_page(&title, &body)).map_err(|e| Error::InvalidArgument {
        op: "replay --plot",
        reason: format!("cannot write {}: {e}", out.display()),
    })?;
    Ok(format!("wrote {}", out.display()))
}
