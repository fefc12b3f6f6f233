//! `cudasem bench --ops`: the op matrix — every op of the tensor API × dtypes × layouts
//! (`cases.rs`), cudasem's side first, each case checked against a float64 CPU reference
//! (`check.rs`, `reference.rs`) and then event-timed on the device (warm-up, then the median of timed
//! runs, as the main bench times); then the device's caches are emptied and
//! `bench/pytorch_ops.py` times the same cases as a child process (the main bench's
//! `pytorch.rs`), reading the cases from a JSON spec cudasem writes. One table and
//! `bench/results/ops.json` come last (`report.rs`).
//!
//! Exit status as the main bench's: 1 when a cudasem case failed (an error or a result that
//! disagreed with the reference), 2 for bad options.

mod cases;
mod check;
mod inputs;
pub(super) mod reference;
mod report;

use super::measure::{event_ms, panic_message};
use super::options::{finish, json_path, sim_runs_quick, Options};
use super::progress::Progress;
use super::pytorch::{self, Catalog, CatalogRow, Child};
use super::report::Environment;
use super::rows::Outcome;
use cases::{Case, Spec};
use cudasem::{cuda, DType};
use inputs::{Bases, Inputs};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::ExitCode;

/// The default JSON path of a full run.
pub const DEFAULT_JSON: &str = "bench/results/ops.json";
/// PyTorch's side.
pub const DEFAULT_SCRIPT: &str = "bench/pytorch_ops.py";

/// The matrix's size and the repeat counts.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    r: usize,
    c: usize,
    warmup: usize,
    runs: usize,
    reps: usize,
}

impl Sizes {
    fn new(quick: bool) -> Sizes {
        if quick {
            // 2^15 elements: the smallest that holds a softmax row of 32,768.
            Sizes { r: 128, c: 256, warmup: 0, runs: 1, reps: 1 }
        } else {
            Sizes { r: 4096, c: 4096, warmup: 5, runs: 21, reps: 20 }
        }
    }
}

/// Runs the op matrix; see the module documentation for the exit status.
pub fn run(options: Options) -> ExitCode {
    let cases = match cases::select(cases::matrix(), options.only.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let options = sim_runs_quick(options);
    let sizes = Sizes::new(options.quick);
    if let Some(path) = &options.write_spec {
        return match super::report::write_file(path, &spec_json(&cases, sizes)) {
            Ok(()) => {
                println!("{} cases written to {}", cases.len(), path.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: could not write {}: {e}", path.display());
                ExitCode::from(1)
            }
        };
    }
    let json_path = json_path(&options, DEFAULT_JSON);
    let mut progress = Progress::new(cases.len() * if options.no_pytorch { 1 } else { 2 });
    let ours = measure_all(&cases, sizes, &mut progress);
    let env = Environment::here();
    let theirs = if options.no_pytorch {
        pytorch::Results::missing("not run (--no-pytorch)")
    } else {
        let _ = cuda::empty_cache();
        let _ = cuda::host_empty_cache();
        run_pytorch(&options, &cases, sizes, &mut progress)
    };
    progress.finish();
    let rows = cases
        .iter()
        .zip(ours)
        .map(|(case, ours)| report::Row {
            bytes: case.bytes(sizes.r, sizes.c),
            pytorch: theirs.outcome(&case.name),
            cudasem: ours,
            case: case.clone(),
        })
        .collect();
    let out = report::OpsReport {
        env,
        quick: options.quick,
        shape: [sizes.r, sizes.c],
        timing: [sizes.warmup, sizes.runs, sizes.reps],
        rows,
        pytorch: theirs,
    };
    println!("{}", out.table());
    let failed = out.rows.iter().any(|r| matches!(r.cudasem, Outcome::Failed(_)));
    finish(json_path, |p| out.write_json(p), failed)
}

/// Measures every case (grouped by dtype, so each dtype's operands are made and downloaded once,
/// and dropped before the next's); returns the outcomes in `cases`' order, in µs.
fn measure_all(cases: &[Case], sizes: Sizes, progress: &mut Progress) -> Vec<Outcome> {
    let mut out = vec![Outcome::Missing("not measured".into()); cases.len()];
    if cuda::device_count() == 0 {
        let why = cuda::current_device().err().map_or("no device".to_string(), |e| e.to_string());
        return out.iter().map(|_| Outcome::Skipped(why.clone())).collect();
    }
    cudasem::manual_seed(20261201);
    let bases = match Bases::draw(sizes.r, sizes.c) {
        Ok(b) => b,
        Err(e) => return out.iter().map(|_| Outcome::Failed(format!("could not make the operands: {e}"))).collect(),
    };
    let mut order: Vec<usize> = (0..cases.len()).collect();
    order.sort_by_key(|&i| DType::ALL.iter().position(|&d| d == cases[i].dtype));
    let mut inputs: Option<Inputs> = None;
    for i in order {
        let case = &cases[i];
        progress.step("cudasem", &case.name);
        if inputs.as_ref().is_none_or(|x| x.dtype != case.dtype) {
            inputs = None; // the previous dtype's operands go first
            inputs = match Inputs::new(&bases, case.dtype) {
                Ok(x) => Some(x),
                Err(e) => {
                    out[i] = Outcome::Failed(format!("could not make the {} operands: {e}", case.dtype));
                    continue;
                }
            };
        }
        let Some(inp) = inputs.as_ref() else { continue };
        out[i] = catch_unwind(AssertUnwindSafe(|| measure(case, inp, sizes)))
            .unwrap_or_else(|panic| Outcome::Failed(format!("panicked: {}", panic_message(&*panic))));
        if let Some(note) = out[i].note() {
            progress.note(&format!("cudasem {}: {note}", case.name));
        }
    }
    drop((inputs, bases));
    let _ = cuda::synchronize(None);
    out
}

/// One case: checked, then timed (µs per call, the median run).
fn measure(case: &Case, inputs: &Inputs, s: Sizes) -> Outcome {
    let call = match inputs.operands(case).and_then(|ops| check::Call::new(case, ops)) {
        Ok(c) => c,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    if let Err(why) = call.check() {
        return Outcome::Failed(why);
    }
    match event_ms(s.warmup, s.runs, s.reps, || call.run().map(drop)) {
        Ok(ms) if ms.is_finite() && ms > 0.0 => Outcome::Value(ms * 1e3),
        Ok(ms) => Outcome::Failed(format!("measured {ms} ms, not a positive number")),
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

/// The spec `bench/pytorch_ops.py` reads: the repeat counts and every case.
fn spec_json(cases: &[Case], s: Sizes) -> String {
    let spec = Spec {
        shape: [s.r, s.c],
        warmup: s.warmup,
        runs: s.runs,
        reps: s.reps,
        scalar: check::SCALAR,
        cases: cases.iter().map(|c| cases::spec_case(c, s.r, s.c)).collect(),
    };
    serde_json::to_string(&spec).expect("the spec serializes")
}

/// What the script may report: one step and one row (µs) per case.
fn catalog(cases: &[Case]) -> Catalog {
    Catalog::new(cases.iter().map(|c| CatalogRow { name: c.name.clone(), step: c.name.clone(), unit: "us".into() }))
}

/// PyTorch's side: the script (`--script`, else `bench/pytorch_ops.py`) over the spec.
fn run_pytorch(options: &Options, cases: &[Case], sizes: Sizes, progress: &mut Progress) -> pytorch::Results {
    let spec = spec_json(cases, sizes);
    let catalog = catalog(cases);
    let child = Child {
        python: &options.python,
        script: &options.script,
        files: &[("ops_cases.json", &spec)],
        catalog: &catalog,
        steps: cases.len(),
    };
    pytorch::run_child(&child, progress, |files| vec!["--cases".into(), files[0].clone().into()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripts_lines_are_parsed_against_the_cases() {
        let cases = cases::select(cases::matrix(), Some("softmax_bf16_rows1024,add_f16")).unwrap();
        let c = catalog(&cases);
        let mut r = pytorch::Results::default();
        assert_eq!(
            r.apply("PROGRESS softmax_bf16_rows1024", &c),
            Some(pytorch::Started::Step("softmax_bf16_rows1024".into()))
        );
        assert_eq!(r.apply("PROGRESS warmup_cuda", &c), Some(pytorch::Started::Other("warmup_cuda".into())));
        r.apply("RESULT softmax_bf16_rows1024 17.25 us", &c);
        r.apply("RESULT add_f16_bcast_row 30 GB/s", &c);
        r.apply("RESULT exp_f32 10 us", &c); // not selected: ignored
        r.apply("ERROR add_f16_vec RuntimeError: boom", &c);
        r.apply("RESULT copy_d2d -1 us", &c);
        assert_eq!(r.outcome("softmax_bf16_rows1024"), Outcome::Value(17.25));
        assert!(matches!(r.outcome("add_f16_bcast_row"), Outcome::Failed(ref w) if w.contains("unit")));
        assert!(matches!(r.outcome("add_f16_vec"), Outcome::Failed(ref w) if w == "RuntimeError: boom"));
        assert!(matches!(r.outcome("copy_d2d"), Outcome::Failed(_)));
        assert!(!r.values.contains_key("exp_f32"));
        assert!(matches!(r.outcome("add_f16"), Outcome::Missing(_)));
    }

    #[test]
    fn the_spec_names_every_case_with_its_shape() {
        let cases = cases::matrix();
        let v: serde_json::Value = serde_json::from_str(&spec_json(&cases, Sizes::new(false))).unwrap();
        let list = v["cases"].as_array().unwrap();
        assert_eq!(list.len(), cases.len());
        assert_eq!((v["warmup"].as_u64(), v["runs"].as_u64(), v["reps"].as_u64()), (Some(5), Some(21), Some(20)));
        assert_eq!(v["shape"], serde_json::json!([4096, 4096]));
        let find = |name: &str| list.iter().find(|c| c["name"] == name).unwrap();
        let s = find("softmax_bf16_rows32768");
        assert_eq!((s["kind"].as_str(), s["dtype"].as_str()), (Some("softmax"), Some("bfloat16")));
        assert_eq!(s["shape"], serde_json::json!([512, 32768]));
        let c = find("cast_f32_to_bf16");
        assert_eq!((c["kind"].as_str(), c["to"].as_str()), (Some("cast"), Some("bfloat16")));
        let m = find("max_f16_last");
        assert_eq!(
            (m["op"].as_str(), m["axis"].as_str(), m["layout"].as_str()),
            (Some("max"), Some("last"), Some("contig"))
        );
        assert_eq!(find("add_f32_bcast_col")["layout"], "bcast_col");
    }
}
