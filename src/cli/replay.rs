//! `cudasem replay TRACE.csv`: a PyTorch allocator trace through cudasem's caching allocator.

use cudasem::alloc::{replay, AllocatorSettings, ReplayOptions, Trace};
use cudasem::error::fmt_bytes;
use std::path::Path;
use std::process::ExitCode;

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

fn report(path: &Path, json: bool) -> cudasem::Result<String> {
    let settings = AllocatorSettings::from_env()?;
    let trace = Trace::from_file(path)?;
    let options = ReplayOptions { settings: settings.clone(), ..ReplayOptions::default() };
    let r = replay(&trace, &options)?;
    let ns_per_op =
        (r.ns_per_alloc * r.allocs as f64 + r.ns_per_free * r.frees as f64) / (r.allocs + r.frees).max(1) as f64;
    if json {
        return Ok(format!(
            concat!(
                "{{\"trace\":{:?},\"settings\":{:?},\"allocs\":{},\"frees\":{},",
                "\"peak_reserved_bytes\":{},\"peak_allocated_bytes\":{},\"peak_live_requested_bytes\":{},",
                "\"reserved_over_live_requested\":{:.4},\"segment_allocs\":{},\"segment_frees\":{},",
                "\"ns_per_alloc\":{:.1},\"ns_per_free\":{:.1},\"ns_per_op\":{:.1}}}"
            ),
            path.display().to_string(),
            std::env::var(cudasem::alloc::ALLOC_CONF_ENV).unwrap_or_default(),
            r.allocs,
            r.frees,
            r.peak_reserved,
            r.peak_allocated,
            r.peak_live_requested,
            r.reserved_over_live_requested(),
            r.segment_allocs,
            r.segment_frees,
            r.ns_per_alloc,
            r.ns_per_free,
            ns_per_op
        ));
    }
    Ok(format!(
        "replayed {} through cudasem's caching allocator ({})\n{r}\nns per op (alloc or free)  {ns_per_op:.0}\nsegments hold at most {} over the live requested bytes",
        path.display(),
        if settings.expandable_segments() { "expandable segments" } else { "default settings" },
        fmt_bytes(r.peak_reserved.saturating_sub(r.peak_live_requested)),
    ))
}
