//! The options of `cudasem bench`, and where a run's results go: the JSON's path and the exit
//! status once it is written.

use std::path::PathBuf;
use std::process::ExitCode;

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

/// The default JSON path of a full run.
pub const DEFAULT_JSON: &str = "bench/results/latest.json";

/// `options`, made `--quick` on the sim driver (device work runs on CPU threads there: full sizes
/// would take hours and measure nothing).
pub(super) fn sim_runs_quick(mut options: Options) -> Options {
    if !options.quick && cudasem::cuda::driver_name() == "sim" {
        eprintln!("note: the sim driver runs --quick sizes (force a GPU with CUDASEM_DRIVER=cuda)");
        options.quick = true;
    }
    options
}

/// Where the JSON goes: `--json`, else `default` for a full run and nowhere for a quick one.
pub(super) fn json_path(options: &Options, default: &str) -> Option<PathBuf> {
    match (&options.json, options.quick) {
        (Some(p), _) => Some(p.clone()),
        (None, false) => Some(PathBuf::from(default)),
        (None, true) => None,
    }
}

/// Writes the JSON (with `write`) where `path` says and gives the exit status: 1 when it could
/// not be written or a cudasem figure `failed`.
pub(super) fn finish(
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
