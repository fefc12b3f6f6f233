//! `cudasem replay TRACE.csv`: a PyTorch allocator trace through cudasem's caching allocator.

use cudasem::alloc::{replay_with, AllocatorSettings, DriverMemory, ReplayOptions, Trace};
use cudasem::driver::sim::{PeerSpec, SimConfig, SimDriver};
use cudasem::error::fmt_bytes;
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
        "replayed {} through cudasem's caching allocator on a simulated {} device ({})\n{r}\nns per op (alloc or free)  {ns_per_op:.0}\nsegments hold at most {} over the live requested bytes",
        path.display(),
        cudasem::error::fmt_bytes(capacity),
        if settings.expandable_segments() { "expandable segments" } else { "default settings" },
        fmt_bytes(r.peak_reserved.saturating_sub(r.peak_live_requested)),
    ))
}
