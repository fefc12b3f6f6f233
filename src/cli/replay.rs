//! `cudasem replay TRACE.csv`: a PyTorch allocator trace through cudasem's caching allocator.

use cudasem::cuda::memory::{format_bytes, replay_trace, ReplayOptions, Trace};
use cudasem::cuda::AllocatorSettings;
use serde::Serialize;
use std::path::Path;
use std::process::ExitCode;

/// Replays the trace and prints the figures (one JSON object with `json`), and with `plot` writes
/// the page of `replay_plot` there; exit code 2 on a bad file or setting.
pub fn run(path: &Path, json: bool, plot: Option<&Path>) -> ExitCode {
    let plotted = |text: String| match plot {
        Some(out) => super::replay_plot::write(path, out).map(|wrote| (text, Some(wrote))),
        None => Ok((text, None)),
    };
    match report(path, json).and_then(plotted) {
        Ok((text, wrote)) => {
            println!("{text}");
            if let Some(wrote) = wrote {
                eprintln!("{wrote}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// The figures of `--json`, one flat object.
#[derive(Serialize)]
struct ReplayJson {
    trace: String,
    settings: String,
    allocs: usize,
    frees: usize,
    peak_reserved_bytes: usize,
    peak_allocated_bytes: usize,
    peak_live_requested_bytes: usize,
    reserved_over_live_requested: f64,
    segment_allocs: usize,
    segment_frees: usize,
    ns_per_alloc: f64,
    ns_per_free: f64,
    ns_per_op: f64,
}

/// `v` rounded to `digits` decimals (a JSON number as short as the text output's).
fn rounded(v: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (v * scale).round() / scale
}

fn report(path: &Path, json: bool) -> cudasem::Result<String> {
    let trace = Trace::from_file(path)?;
    // One simulated H200-sized device (the default capacity).
    let options = ReplayOptions { settings: AllocatorSettings::from_env()?, ..ReplayOptions::default() };
    let r = replay_trace(&trace, &options)?;
    let ns_per_op = r.ns_per_op();
    if json {
        let figures = ReplayJson {
            trace: path.display().to_string(),
            settings: options.settings.to_string(),
            allocs: r.allocs,
            frees: r.frees,
            peak_reserved_bytes: r.peak_reserved,
            peak_allocated_bytes: r.peak_allocated,
            peak_live_requested_bytes: r.peak_live_requested,
            reserved_over_live_requested: rounded(r.reserved_over_live_requested(), 4),
            segment_allocs: r.segment_allocs,
            segment_frees: r.segment_frees,
            ns_per_alloc: rounded(r.ns_per_alloc, 1),
            ns_per_free: rounded(r.ns_per_free, 1),
            ns_per_op: rounded(ns_per_op, 1),
        };
        return Ok(serde_json::to_string(&figures).expect("plain fields serialize"));
    }
    Ok(format!(
        "replayed {} through cudasem's caching allocator on a simulated {} device ({})\n{r}\nns per op (alloc or free)  {ns_per_op:.0}\nsegments hold at most {} over the live requested bytes",
        path.display(),
        format_bytes(options.capacity),
        if options.settings.expandable_segments() { "expandable segments" } else { "default settings" },
        format_bytes(r.peak_reserved.saturating_sub(r.peak_live_requested)),
    ))
}
