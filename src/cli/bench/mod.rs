//! `cudasem bench`: cudasem's figures and PyTorch's, measured the same way on the same machine in one
//! command, then one table and one JSON file (BENCHMARKS.md explains every figure).
//!
//! Order: every cudasem figure first (`figures.rs`, `device_figures.rs`, the end-to-end rows in
//! `e2e.rs`; what they share in `measure.rs`), then the device's caches are emptied and
//! `bench/pytorch_bench.py` runs as a child process (`pytorch.rs`) — never both at once.
//! One progress bar covers both (`progress.rs`); the table and the JSON come last (`report.rs`).
//! The rows and what came of each side (`rows.rs`) and the options with where the results go
//! (`options.rs`) sit below all of these; this file only wires them into the command.
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
mod gpt_block;
mod graphs;
mod jit;
mod long_rows;
mod measure;
mod ops;
mod options;
mod progress;
mod pytorch;
mod random;
mod report;
mod rows;
mod sampling;
mod sanitized;
mod transformer;
mod user_kernel;

pub use jit::first_call_child as jit_first_call_child;
pub use options::Options;

use options::{finish, json_path, sim_runs_quick, DEFAULT_JSON};
use progress::Progress;
use rows::{parse_only, Outcome};
use std::path::PathBuf;
use std::process::ExitCode;

/// The default PyTorch script of `--ops` or of the figures.
pub fn default_script(ops: bool) -> PathBuf {
    PathBuf::from(if ops { ops::DEFAULT_SCRIPT } else { "bench/pytorch_bench.py" })
}

/// The environment variable that overrides the CUDA driver's launch shapes for a tuning run:
/// `EW_WAVES,VECTORS,REDUCE_WAVES[,STRIDED_LANES]` — the arguments of
/// `cudasem::cuda::set_launch_tuning` (elementwise waves, vectors per thread, waves of a row
/// split over blocks), and the strided elementwise kernel's lanes, which the runtime's
/// configuration reads from the same variable (`LaunchTuning::strided_lanes`; 0 turns them off) —
/// then any of the card profile's choices as `key=value` (`heavy_vectors=2,sum_blocks=4,sum_loads=8`:
/// `cudasem::cuda::set_card_overrides`; `bench/sweep_card.sh` sweeps them).
const TUNING_VAR: &str = "CUDASEM_BENCH_TUNING";

/// Applies [`TUNING_VAR`] when it is set (and says so on stderr, with the card profile it gives
/// the first device).
fn tuning_from_env() -> Result<(), String> {
    let Ok(v) = std::env::var(TUNING_VAR) else { return Ok(()) };
    let t = cudasem::LaunchTuning::parse(&v).map_err(|e| e.to_string())?;
    if v.split(',').next().is_some_and(|first| !first.contains('=')) {
        cudasem::cuda::set_launch_tuning(t.elementwise_waves, t.vectors_per_thread, t.reduce_waves);
    }
    cudasem::cuda::set_card_overrides(t.card).map_err(|e| e.to_string())?;
    let (w, n, r) = (t.elementwise_waves, t.vectors_per_thread, t.reduce_waves);
    let card = cudasem::cuda::card_profile(0).map_or_else(|e| format!("unknown ({e})"), |p| p.to_string());
    eprintln!("tuning from {TUNING_VAR}: {w},{n},{r}; card profile: {card}");
    Ok(())
}

/// The environment variable choosing how matrix products treat rows that are not 16-byte
/// aligned for a measuring run: `auto` (the default), `off`, `on` or `inputs` — the argument of
/// `cudasem::cuda::set_matmul_padding` (`lm_head_bf16_8192x1024x50257` measured each way).
const MATMUL_PAD_VAR: &str = "CUDASEM_MATMUL_PAD";

/// Applies [`MATMUL_PAD_VAR`] when it is set (and says so on stderr).
fn matmul_pad_from_env() -> Result<(), String> {
    let Ok(v) = std::env::var(MATMUL_PAD_VAR) else { return Ok(()) };
    let p = cudasem::MatmulPadding::parse(&v)
        .ok_or_else(|| format!("{MATMUL_PAD_VAR}={v:?}: expected auto, off, on or inputs"))?;
    cudasem::cuda::set_matmul_padding(p);
    eprintln!("matrix products' padding from {MATMUL_PAD_VAR}: {p:?}");
    Ok(())
}

/// Runs the bench; see the module documentation for the exit status. On the sim driver the sizes are
/// always `--quick`'s (so no JSON is written unless `--json` says where).
pub fn run(options: Options) -> ExitCode {
    if let Err(e) = tuning_from_env().and_then(|()| matmul_pad_from_env()) {
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
