//! `cudasem bench`: cudasem's figures and PyTorch's, measured the same way on the same machine in one
//! command, then one table and one JSON file (BENCHMARKS.md explains every figure).
//!
//! Order: every cudasem figure first (`figures.rs`, `device_figures.rs`, the end-to-end rows in
//! `e2e.rs`; what they share in `measure.rs`), then the device's caches are emptied and
//! `bench/pytorch_bench.py` runs as a child process (`pytorch.rs`) — never both at once.
//! One progress bar covers both (`progress.rs`); the table and the JSON come last (`report.rs`).
//!
//! Exit status: 0 when every selected cudasem figure was measured (or skipped with a reason, like the
//! peer copy on one GPU); 1 when one failed (an error, or a result that disagreed with the CPU
//! reference) — the table and the JSON are still written; 2 for bad options. PyTorch's problems (no
//! python3, no torch, no CUDA, a failing script) never fail the bench: its column is null and the
//! reason is printed and written to the JSON.

mod collectives;
mod device_figures;
mod e2e;
mod figures;
mod graphs;
mod measure;
mod ops;
mod progress;
mod pytorch;
mod report;

use progress::Progress;
use std::path::PathBuf;
use std::process::ExitCode;

/// The allocator trace `replay_resnet50` replays, carried inside the binary (bench/traces/README.md).
pub const RESNET50_TRACE: &str = include_str!("../../../bench/traces/resnet50_train.csv");

/// One row of the table: a figure measured on both sides.
#[derive(Debug, Clone, Copy)]
pub struct RowSpec {
    /// The row's name (in the table and the JSON).
    pub name: &'static str,
    /// The step that measures it (what `--only` selects; several rows may share one).
    pub step: &'static str,
    /// The unit of both values.
    pub unit: &'static str,
    /// Whether a smaller value is better (times, bytes); else a larger one is (rates).
    pub lower_is_better: bool,
    /// The speedup (cudasem over PyTorch, > 1 = cudasem better) the project aims at.
    pub goal: Option<f64>,
}

const fn row(name: &'static str, step: &'static str, unit: &'static str, lower: bool, goal: f64) -> RowSpec {
    RowSpec { name, step, unit, lower_is_better: lower, goal: if goal > 0.0 { Some(goal) } else { None } }
}

/// Every row, in the order the steps run (steps in the order of their first row).
pub const ROWS: &[RowSpec] = &[
    row("alloc_free_pair", "alloc_free_pair", "ns", true, 2.0),
    row("alloc_free_pair_512b", "alloc_free_pair", "ns", true, 0.0),
    row("alloc_free_pair_64mib", "alloc_free_pair", "ns", true, 0.0),
    row("empty_tensor", "empty_tensor", "ns", true, 2.0),
    row("small_op", "small_op", "ns", true, 1.6),
    row("small_op_cpp", "small_op", "ns", true, 0.0),
    row("add_f32_256m", "add_f32_256m", "GB/s", false, 1.0),
    row("sum_f32_1gib", "sum_f32_1gib", "GB/s", false, 1.0),
    row("matmul_fp32_8192", "matmul_fp32_8192", "TFLOP/s", false, 0.98),
    row("matmul_tf32_8192", "matmul_tf32_8192", "TFLOP/s", false, 0.98),
    row("matmul_bf16_8192", "matmul_bf16_8192", "TFLOP/s", false, 0.98),
    row("h2d_pinned_1gib", "h2d_pinned_1gib", "GB/s", false, 0.98),
    row("d2h_pinned_1gib", "d2h_pinned_1gib", "GB/s", false, 0.98),
    row("h2d_pageable_1gib", "h2d_pageable_1gib", "GB/s", false, 0.0),
    row("p2p_copy_1gib", "p2p_copy_1gib", "GB/s", false, 0.95),
    row("replay_resnet50", "replay_resnet50", "bytes", true, 1.0),
    row("e2e_mlp_pipeline_bf16", "e2e_mlp_pipeline_bf16", "ms", true, 1.05),
    row("e2e_decode_step", "e2e_decode_step", "µs", true, 1.5),
    row("e2e_decode_step_graphed", "e2e_decode_step_graphed", "µs", true, 1.0),
    row("graph_replay_10", "graph_replay", "ns", true, 1.25),
    row("graph_replay_100", "graph_replay", "ns", true, 1.25),
    row("graph_replay_1000", "graph_replay", "ns", true, 1.25),
    row("graph_device_per_op_100", "graph_replay", "ns", true, 1.0),
    row("graph_eager_device_per_op_100", "graph_replay", "ns", true, 0.0),
    row("graph_capture_100", "graph_replay", "ms", true, 2.0),
    row("allreduce_1gib_busbw", "allreduce", "GB/s", false, 1.0),
    row("allreduce_8kib_latency", "allreduce", "µs", true, 1.0),
];

/// The steps (what `--only` names), in run order.
pub fn steps() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for r in ROWS {
        if !out.contains(&r.step) {
            out.push(r.step);
        }
    }
    out
}

/// The options of `cudasem bench` (see `main.rs` for their help text).
#[derive(Debug, Clone)]
pub struct Options {
    /// Where to write the JSON; `None`: `bench/results/latest.json`, or nowhere with `quick`.
    pub json: Option<PathBuf>,
    /// Skip PyTorch.
    pub no_pytorch: bool,
    /// The Python interpreter.
    pub python: PathBuf,
    /// PyTorch's side.
    pub script: PathBuf,
    /// Comma-separated steps to run (all when `None`).
    pub only: Option<String>,
    /// Small sizes and few repeats.
    pub quick: bool,
    /// The op matrix (`ops/`) instead of the figures.
    pub ops: bool,
    /// With `ops`: only write the PyTorch script's spec there.
    pub write_spec: Option<PathBuf>,
}

/// The default PyTorch script of `--ops` or of the figures.
pub fn default_script(ops: bool) -> PathBuf {
    PathBuf::from(if ops { ops::DEFAULT_SCRIPT } else { "bench/pytorch_bench.py" })
}

/// The default JSON path of a full run.
pub const DEFAULT_JSON: &str = "bench/results/latest.json";

/// What happened to one side of one row.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Measured (already checked against the reference).
    Value(f64),
    /// Not measurable on this machine (e.g. one GPU for a peer copy), with the reason.
    Skipped(String),
    /// An error or a wrong result, with the reason.
    Failed(String),
    /// Not run (PyTorch disabled or unavailable), with the reason.
    Missing(String),
}

impl Outcome {
    /// The value, when measured.
    pub fn value(&self) -> Option<f64> {
        match self {
            Outcome::Value(v) => Some(*v),
            _ => None,
        }
    }

    /// The reason there is no value.
    pub fn note(&self) -> Option<String> {
        match self {
            Outcome::Value(_) => None,
            Outcome::Skipped(r) => Some(format!("skipped: {r}")),
            Outcome::Failed(r) => Some(format!("failed: {r}")),
            Outcome::Missing(r) => Some(r.clone()),
        }
    }
}

/// Parses `--only`: known step names (or row names, which select their step), comma-separated.
pub fn parse_only(only: Option<&str>) -> Result<Vec<&'static str>, String> {
    let all = steps();
    let Some(list) = only else { return Ok(all) };
    let mut chosen = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let step =
            all.iter().copied().find(|s| *s == name).or_else(|| ROWS.iter().find(|r| r.name == name).map(|r| r.step));
        match step {
            Some(s) if !chosen.contains(&s) => chosen.push(s),
            Some(_) => {}
            None => return Err(format!("unknown figure `{name}` in --only; the figures are: {}", all.join(", "))),
        }
    }
    if chosen.is_empty() {
        return Err(format!("--only names no figure; the figures are: {}", all.join(", ")));
    }
    // Run order is the table's order, whatever order --only gave.
    Ok(all.into_iter().filter(|s| chosen.contains(s)).collect())
}

/// The environment variable that overrides the CUDA driver's launch shapes for a tuning run:
/// `EW_WAVES,VECTORS,REDUCE_WAVES` — the arguments of `cudasem::cuda::set_launch_tuning`
/// (elementwise waves, vectors per thread, waves of a row split over blocks).
const TUNING_VAR: &str = "CUDASEM_BENCH_TUNING";

/// Applies [`TUNING_VAR`] when it is set (and says so on stderr).
fn tuning_from_env() -> Result<(), String> {
    let Ok(v) = std::env::var(TUNING_VAR) else { return Ok(()) };
    let bad = || format!("{TUNING_VAR}={v:?}: expected three integers, EW_WAVES,VECTORS,REDUCE_WAVES");
    let parsed: Vec<u32> =
        v.split(',').map(|x| x.trim().parse::<u32>()).collect::<Result<_, _>>().map_err(|_| bad())?;
    let [waves, vectors, reduce_waves] = parsed[..] else { return Err(bad()) };
    cudasem::cuda::set_launch_tuning(waves, vectors, reduce_waves);
    eprintln!("tuning from {TUNING_VAR}: {waves},{vectors},{reduce_waves}");
    Ok(())
}

/// Runs the bench; see the module documentation for the exit status. On the sim driver the sizes are
/// always `--quick`'s (so no JSON is written unless `--json` says where).
pub fn run(options: Options) -> ExitCode {
    if let Err(e) = tuning_from_env() {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    if options.ops {
        return ops::run(options);
    }
    let steps = match parse_only(options.only.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let options = sim_runs_quick(options);
    let json_path = json_path(&options, DEFAULT_JSON);
    let total = steps.len() * if options.no_pytorch { 1 } else { 2 };
    let mut progress = Progress::new(total);

    let ours = figures::measure_all(&steps, options.quick, &mut progress);
    let env = report::Environment::here();

    let theirs = if options.no_pytorch {
        pytorch::Results::missing("not run (--no-pytorch)")
    } else {
        // PyTorch gets the device to itself: cudasem's cached device and pinned memory go back.
        let _ = cudasem::cuda::empty_cache();
        let _ = cudasem::cuda::host_empty_cache();
        pytorch::run(&options, &steps, &mut progress)
    };
    progress.finish();

    let rows = report::rows(&steps, &ours, &theirs);
    let out = report::Report { env, quick: options.quick, rows, pytorch: theirs };
    println!("{}", out.table());
    let failed = out.rows.iter().any(|r| matches!(r.cudasem, Outcome::Failed(_)));
    finish(json_path, |p| out.write_json(p), failed)
}

/// `options`, made `--quick` on the sim driver (device work runs on CPU threads there: full sizes
/// would take hours and measure nothing).
fn sim_runs_quick(mut options: Options) -> Options {
    if !options.quick && cudasem::cuda::driver_name() == "sim" {
        eprintln!("note: the sim driver runs --quick sizes (force a GPU with CUDASEM_DRIVER=cuda)");
        options.quick = true;
    }
    options
}

/// Where the JSON goes: `--json`, else `default` for a full run and nowhere for a quick one.
fn json_path(options: &Options, default: &str) -> Option<PathBuf> {
    match (&options.json, options.quick) {
        (Some(p), _) => Some(p.clone()),
        (None, false) => Some(PathBuf::from(default)),
        (None, true) => None,
    }
}

/// Writes the JSON (with `write`) where `path` says and gives the exit status: 1 when it could
/// not be written or a cudasem figure `failed`.
fn finish(
    path: Option<PathBuf>,
    write: impl FnOnce(&std::path::Path) -> std::io::Result<()>,
    failed: bool,
) -> ExitCode {
    if let Some(path) = path {
        match write(&path) {
            Ok(()) => println!("results written to {}", path.display()),
            Err(e) => {
                eprintln!("error: could not write {}: {e}", path.display());
                return ExitCode::from(1);
            }
        }
    } else {
        println!("quick run: no JSON written (pass --json PATH to keep one)");
    }
    if failed {
        eprintln!("error: a cudasem figure failed (see the table)");
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_selects_steps_in_run_order_and_rejects_unknown_names() {
        assert_eq!(parse_only(Some("small_op,alloc_free_pair")).unwrap(), ["alloc_free_pair", "small_op"]);
        assert_eq!(parse_only(Some("small_op_cpp")).unwrap(), ["small_op"]);
        assert!(parse_only(Some("nope")).unwrap_err().contains("unknown figure `nope`"));
        assert!(parse_only(Some(",")).is_err());
        assert_eq!(parse_only(Some("graph_capture_100,graph_replay_10")).unwrap(), ["graph_replay"]);
        assert_eq!(parse_only(Some("allreduce_8kib_latency")).unwrap(), ["allreduce"]);
        assert_eq!(parse_only(None).unwrap().len(), 18);
    }

    #[test]
    fn the_trace_is_embedded() {
        assert!(RESNET50_TRACE.starts_with("action,addr,size,stream"));
    }
}
