//! `cudasem replay TRACE.csv [--compare PYTORCH.json]` and `cudasem replay --all DIR`: PyTorch
//! allocator traces through cudasem's caching allocator, beside PyTorch's own outcome.
//! `cudasem replay snap.pickle` replays the history of a `torch.cuda.memory._dump_snapshot`
//! pickle the same way.

use super::trace_file::load_trace;
use cudasem::cuda::memory::{format_bytes, replay_trace, PytorchOutcome, ReplayOptions, ReplayReport};
use cudasem::cuda::AllocatorSettings;
use serde::Serialize;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// What to replay and how to print it.
pub struct Options {
    /// One trace (`None` with `all`).
    pub trace: Option<PathBuf>,
    /// PyTorch's outcome file for the one trace.
    pub compare: Option<PathBuf>,
    /// Every trace of a folder, each beside its `NAME.pytorch.json` where there is one.
    pub all: Option<PathBuf>,
    /// One JSON object (an array with `all`) instead of text.
    pub json: bool,
    /// For the one trace: also write the page of `replay_plot` there.
    pub plot: Option<PathBuf>,
}

/// Replays and prints the figures, and with `plot` writes the page of `replay_plot` there; exit
/// code 2 on a bad file, folder or setting.
pub fn run(options: Options) -> ExitCode {
    let plotted = |text: String| match (&options.plot, &options.trace) {
        (Some(out), Some(path)) => {
            super::replay_plot::write(path, out, options.compare.as_deref()).map(|wrote| (text, Some(wrote)))
        }
        _ => Ok((text, None)),
    };
    match report(&options).and_then(plotted) {
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

/// The figures of `--json`, one flat object per trace.
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
    allocated_over_live_requested: f64,
    segment_allocs: usize,
    segment_frees: usize,
    pages_moved_bytes: usize,
    page_unmaps: usize,
    page_move_waits: usize,
    ns_per_op: f64,
    ns_per_alloc: f64,
    ns_per_free: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pytorch: Option<PytorchJson>,
}

/// PyTorch's figures beside cudasem's (`--compare`, or `--all` with an outcome file).
#[derive(Serialize)]
struct PytorchJson {
    peak_reserved_bytes: usize,
    segment_allocs: Option<usize>,
    reserved_over_live_requested: f64,
    /// cudasem's peak reserved / PyTorch's (below 1: cudasem holds less).
    reserved_ratio: f64,
    /// cudasem's driver allocations / PyTorch's.
    segment_allocs_ratio: Option<f64>,
}

/// `v` rounded to `digits` decimals (a JSON number as short as the text output's).
fn rounded(v: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (v * scale).round() / scale
}

/// One trace replayed, with PyTorch's outcome where given.
struct Replayed {
    path: PathBuf,
    report: ReplayReport,
    pytorch: Option<PytorchOutcome>,
}

impl Replayed {
    fn compared(&self, expandable: bool) -> Option<PytorchJson> {
        let (reserved, segments) = self.pytorch.as_ref()?.under(expandable);
        let r = &self.report;
        Some(PytorchJson {
            peak_reserved_bytes: reserved,
            segment_allocs: segments,
            reserved_over_live_requested: rounded(reserved as f64 / r.peak_live_requested.max(1) as f64, 4),
            reserved_ratio: rounded(r.peak_reserved as f64 / reserved.max(1) as f64, 4),
            segment_allocs_ratio: segments.map(|s| rounded(r.segment_allocs as f64 / s.max(1) as f64, 4)),
        })
    }

    fn json(&self, settings: &AllocatorSettings) -> ReplayJson {
        let r = &self.report;
        ReplayJson {
            trace: self.path.display().to_string(),
            settings: settings.to_string(),
            allocs: r.allocs,
            frees: r.frees,
            peak_reserved_bytes: r.peak_reserved,
            peak_allocated_bytes: r.peak_allocated,
            peak_live_requested_bytes: r.peak_live_requested,
            reserved_over_live_requested: rounded(r.reserved_over_live_requested(), 4),
            allocated_over_live_requested: rounded(r.allocated_over_live_requested(), 4),
            segment_allocs: r.segment_allocs,
            segment_frees: r.segment_frees,
            pages_moved_bytes: r.page_moves.bytes,
            page_unmaps: r.page_moves.unmaps,
            page_move_waits: r.page_moves.events,
            ns_per_op: rounded(r.ns_per_op, 1),
            ns_per_alloc: rounded(r.ns_per_alloc, 1),
            ns_per_free: rounded(r.ns_per_free, 1),
            pytorch: self.compared(settings.expandable_segments()),
        }
    }
}

fn report(o: &Options) -> cudasem::Result<String> {
    // One simulated H200-sized device (the default capacity).
    let options = ReplayOptions { settings: AllocatorSettings::from_env()?, ..ReplayOptions::default() };
    let mode = if options.settings.expandable_segments() { "expandable segments" } else { "default settings" };
    if let Some(dir) = &o.all {
        let all = trace_files(dir)?
            .into_iter()
            .map(|(path, outcome)| {
                let pytorch = outcome.map(PytorchOutcome::from_file).transpose()?;
                Ok(Replayed { report: replay_trace(&load_trace(&path)?, &options)?, path, pytorch })
            })
            .collect::<cudasem::Result<Vec<_>>>()?;
        if o.json {
            let rows: Vec<ReplayJson> = all.iter().map(|r| r.json(&options.settings)).collect();
            return Ok(serde_json::to_string(&rows).expect("plain fields serialize"));
        }
        return Ok(table(&all, dir, &options, mode));
    }
    let Some(path) = &o.trace else {
        return Err(cudasem::Error::InvalidArgument {
            op: "replay",
            reason: "give a trace file, or --all DIR for every trace of a folder".into(),
        });
    };
    let pytorch = o.compare.as_ref().map(PytorchOutcome::from_file).transpose()?;
    let one = Replayed { report: replay_trace(&load_trace(path)?, &options)?, path: path.clone(), pytorch };
    if o.json {
        return Ok(serde_json::to_string(&one.json(&options.settings)).expect("plain fields serialize"));
    }
    let r = &one.report;
    let mut text = format!(
        "replayed {} through cudasem's caching allocator on a simulated {} device ({mode})\n{r}\nsegments hold at most {} over the live requested bytes",
        path.display(),
        format_bytes(options.capacity),
        format_bytes(r.peak_reserved.saturating_sub(r.peak_live_requested)),
    );
    if let Some(p) = one.compared(options.settings.expandable_segments()) {
        let _ = write!(
            text,
            "\nPyTorch ({mode}): peak reserved {} ({:.4} x live), cudasem / PyTorch {:.4}",
            format_bytes(p.peak_reserved_bytes),
            p.reserved_over_live_requested,
            p.reserved_ratio
        );
        if let (Some(s), Some(ratio)) = (p.segment_allocs, p.segment_allocs_ratio) {
            let _ = write!(text, "; driver allocations {s}, cudasem / PyTorch {ratio:.4}");
        }
    }
    Ok(text)
}

/// The traces of `dir` (`*.csv`, `*.csv.gz`), by name, each with its `NAME.pytorch.json` if any.
fn trace_files(dir: &Path) -> cudasem::Result<Vec<(PathBuf, Option<PathBuf>)>> {
    let entries = std::fs::read_dir(dir).map_err(|e| cudasem::Error::InvalidArgument {
        op: "replay --all",
        reason: format!("cannot read the folder {}: {e}", dir.display()),
    })?;
    let mut found: Vec<(PathBuf, Option<PathBuf>)> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?;
            let stem = name.strip_suffix(".csv.gz").or_else(|| name.strip_suffix(".csv"))?.to_string();
            let outcome = p.with_file_name(format!("{stem}.pytorch.json"));
            Some((p, outcome.is_file().then_some(outcome)))
        })
        .collect();
    found.sort();
    if found.is_empty() {
        return Err(cudasem::Error::InvalidArgument {
            op: "replay --all",
            reason: format!("no trace (*.csv, *.csv.gz) in {}", dir.display()),
        });
    }
    Ok(found)
}

/// `--all`: one row per trace, PyTorch's figures beside cudasem's.
fn table(all: &[Replayed], dir: &Path, options: &ReplayOptions, mode: &str) -> String {
    let mut t = format!(
        "replayed {} traces of {} on a simulated {} device ({mode})\n",
        all.len(),
        dir.display(),
        format_bytes(options.capacity)
    );
    t += "| trace | peak reserved | vs PyTorch | x live | PyTorch x live | driver allocs (PyTorch) | driver frees | pages moved | ns/op |\n";
    t += "|---|---|---|---|---|---|---|---|---|\n";
    let expandable = options.settings.expandable_segments();
    for one in all {
        let r = &one.report;
        let name = one.path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let name = name.trim_end_matches(".gz").trim_end_matches(".csv");
        let p = one.compared(expandable);
        let ratio = p.as_ref().map_or("-".to_string(), |p| format!("{:.4}", p.reserved_ratio));
        let pt_live = p.as_ref().map_or("-".to_string(), |p| format!("{:.4}", p.reserved_over_live_requested));
        let pt_segs = p.as_ref().and_then(|p| p.segment_allocs).map_or("-".to_string(), |s| s.to_string());
        let m = &r.page_moves;
        let _ = writeln!(
            t,
            "| {name} | {} | {ratio} | {:.4} | {pt_live} | {} ({pt_segs}) | {} | {} in {} calls | {:.0} |",
            format_bytes(r.peak_reserved),
            r.reserved_over_live_requested(),
            r.segment_allocs,
            r.segment_frees,
            format_bytes(m.bytes),
            m.unmaps,
            r.ns_per_op
        );
    }
    t.trim_end().to_string()
}
