//! `cudasem replay TRACE.csv`: a PyTorch allocator trace through cudasem's caching allocator.

use cudasem::alloc::{replay_with, AllocatorSettings, DriverMemory, ReplayOptions, Trace};
use cudasem::driver::sim::{PeerSpec, SimConfig, SimDriver};
use cudasem::error::fmt_bytes;
use serde::Serialize;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

/// Replays the trace and prints the figures (one JSON object with `json`); exit code 2 on a bad
/// file or setting.
pub fn run(path: &Path, json: bool) -> ExitCode {
    match report(path, json) {
        Ok(text) => {
            println!("{text}");
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
    let settings = AllocatorSettings::from_env()?;
    let trace = Trace::from_file(path)?;
    // One simulated H200-sized device: its memory is only accounted, never touched, so a trace
    // that peaked at many GiB replays in a few MiB of host memory.
    let capacity = ReplayOptions::default().capacity;
    let sim = Arc::new(SimDriver::new(SimConfig { devices: 1, memory: capacity, peer: PeerSpec::None }));
    let r = replay_with(&trace, Arc::new(DriverMemory::for_replay(sim, 0)), &settings)?;
    let ns_per_op =
        (r.ns_per_alloc * r.allocs as f64 + r.ns_per_free * r.frees as f64) / (r.allocs + r.frees).max(1) as f64;
    if json {
        let figures = ReplayJson {
            trace: path.display().to_string(),
            settings: std::env::var(cudasem::alloc::ALLOC_CONF_ENV).unwrap_or_default(),
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
        cudasem::error::fmt_bytes(capacity),
        if settings.expandable_segments() { "expandable segments" } else { "default settings" },
        fmt_bytes(r.peak_reserved.saturating_sub(r.peak_live_requested)),
    ))
}
