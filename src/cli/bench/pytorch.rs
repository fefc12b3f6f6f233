//! PyTorch's side: a Python script run as a child process after cudasem's figures, its stdout read
//! line by line as it streams — `bench/pytorch_bench.py` for `cudasem bench` ([`run`]),
//! `bench/pytorch_ops.py` for `cudasem bench --ops` (through [`run_child`], with its own [`Catalog`]).
//!
//! The scripts' protocol (one message per line, fields separated by single spaces; every other line
//! is ignored, so compiler chatter cannot confuse it):
//! * `INFO key text…` — `torch` (its version), `cuda` (the CUDA version), `machine` (the GPUs);
//! * `PROGRESS name` — starts measuring step `name` (any other name only relabels the bar);
//! * `RESULT row value unit` — a measured figure (the unit must be the row's);
//! * `SKIP name reason…` / `ERROR name reason…` — a step or row with no figure, and why;
//! * `FATAL reason…` — the script cannot measure anything (no torch, no CUDA).

use super::options::Options;
use super::progress::Progress;
use super::rows::{Outcome, RESNET50_TRACE, ROWS};
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// One row a script may report: its name, the step that measures it, and its unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogRow {
    /// The row's name (`RESULT name …`).
    pub name: String,
    /// The step it belongs to (`PROGRESS step`).
    pub step: String,
    /// The unit its value must carry.
    pub unit: String,
}

/// Every row a script may report; lines about anything else are ignored.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    rows: Vec<CatalogRow>,
}

impl Catalog {
    /// The rows of `cudasem bench` ([`ROWS`]).
    pub fn bench() -> Catalog {
        Catalog::new(ROWS.iter().map(|r| CatalogRow { name: r.name.into(), step: r.step.into(), unit: r.unit.into() }))
    }

    /// A catalog of `rows`.
    pub fn new(rows: impl IntoIterator<Item = CatalogRow>) -> Catalog {
        Catalog { rows: rows.into_iter().collect() }
    }

    fn is_step(&self, name: &str) -> bool {
        self.rows.iter().any(|r| r.step == name)
    }

    fn row(&self, name: &str) -> Option<&CatalogRow> {
        self.rows.iter().find(|r| r.name == name)
    }
}

/// What PyTorch's side reported.
#[derive(Debug, Clone, Default)]
pub struct Results {
    /// Outcome per row name (rows the script said nothing about are absent).
    pub values: HashMap<String, Outcome>,
    /// Why PyTorch's column is empty or incomplete (not run, could not start, failed).
    pub error: Option<String>,
    /// `torch.__version__`.
    pub torch: Option<String>,
    /// The CUDA version the script reported.
    pub cuda: Option<String>,
    /// The GPUs the script saw.
    pub machine: Option<String>,
}

impl Results {
    /// No results, for `reason`.
    pub fn missing(reason: &str) -> Results {
        Results { error: Some(reason.to_string()), ..Results::default() }
    }

    /// The outcome of row `name`: reported, or missing with the reason.
    pub fn outcome(&self, name: &str) -> Outcome {
        self.values.get(name).cloned().unwrap_or_else(|| {
            Outcome::Missing(self.error.clone().unwrap_or_else(|| "the PyTorch script reported nothing".into()))
        })
    }

    /// Applies one line of the script's output (rows and steps of `catalog`); returns the step it
    /// started, if it did.
    pub fn apply(&mut self, line: &str, catalog: &Catalog) -> Option<Started> {
        let line = line.trim_end();
        let (kind, rest) = line.split_once(' ').unwrap_or((line, ""));
        match kind {
            "INFO" => {
                let (key, text) = rest.split_once(' ').unwrap_or((rest, ""));
                let text = Some(text.trim().to_string()).filter(|t| !t.is_empty());
                match key {
                    "torch" => self.torch = text,
                    "cuda" => self.cuda = text,
                    "machine" => self.machine = text,
                    _ => {}
                }
                None
            }
            "PROGRESS" => {
                let name = rest.trim();
                Some(if catalog.is_step(name) { Started::Step(name.into()) } else { Started::Other(name.into()) })
            }
            "RESULT" => {
                let fields: Vec<&str> = rest.split_whitespace().collect();
                if let [name, value, unit] = fields[..] {
                    if let Some(spec) = catalog.row(name) {
                        let outcome = match value.parse::<f64>() {
                            Ok(v) if unit != spec.unit => {
                                Outcome::Failed(format!("reported {v} {unit}, the row's unit is {}", spec.unit))
                            }
                            Ok(v) if v.is_finite() && v > 0.0 => Outcome::Value(v),
                            _ => Outcome::Failed(format!("reported `{value}`, not a positive number")),
                        };
                        self.values.insert(spec.name.clone(), outcome);
                    }
                }
                None
            }
            "SKIP" | "ERROR" => {
                let (name, reason) = rest.split_once(' ').unwrap_or((rest, "no reason given"));
                let reason = reason.trim().to_string();
                // A row by its name, or every row of a step that has no value yet.
                for spec in catalog.rows.iter().filter(|r| r.name == name || r.step == name) {
                    if r_has_value(&self.values, &spec.name) && spec.name != name {
                        continue;
                    }
                    let o =
                        if kind == "SKIP" { Outcome::Skipped(reason.clone()) } else { Outcome::Failed(reason.clone()) };
                    self.values.insert(spec.name.clone(), o);
                }
                None
            }
            "FATAL" => {
                self.error = Some(rest.trim().to_string());
                None
            }
            _ => None,
        }
    }
}

fn r_has_value(values: &HashMap<String, Outcome>, name: &str) -> bool {
    matches!(values.get(name), Some(Outcome::Value(_)))
}

/// A `PROGRESS` line: one of the steps, or something else the script is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Started {
    /// A step (a name `--only` accepts).
    Step(String),
    /// Something else (building the C++ extension, …).
    Other(String),
}

/// Steps PyTorch's side measures in a script of their own, in the folder of `--script`.
const OWN_SCRIPTS: &[(&str, &[&str])] = &[
    ("pytorch_user_kernel.py", &["user_kernel_launch_host", "user_kernel_launch_raw_cudarc"]),
    ("pytorch_attention.py", &["sdpa", "norms", "vocab_softmax", "lm_head", "gpt_block"]),
];

/// Runs `bench/pytorch_bench.py` (or `--script`) for `steps`, and the scripts of [`OWN_SCRIPTS`]
/// for theirs, and collects their results; never fails: problems end up in [`Results::error`]
/// (or, for a script of its own, in its rows).
pub fn run(options: &Options, steps: &[&'static str], progress: &mut Progress) -> Results {
    let own = |s: &&str| OWN_SCRIPTS.iter().any(|(_, steps)| steps.contains(s));
    let main: Vec<&'static str> = steps.iter().copied().filter(|s| !own(s)).collect();
    let mut results = if main.is_empty() { Results::default() } else { run_main(options, &main, progress) };
    for (file, owned) in OWN_SCRIPTS {
        let mine: Vec<&str> = steps.iter().copied().filter(|s| owned.contains(s)).collect();
        if mine.is_empty() {
            continue;
        }
        let script = options.script.parent().unwrap_or(Path::new(".")).join(file);
        let catalog = Catalog::bench();
        let child =
            Child { python: &options.python, script: &script, files: &[], catalog: &catalog, steps: mine.len() };
        let theirs = run_child(&child, progress, |_| {
            let mut args: Vec<OsString> = vec!["--only".into(), mine.join(",").into()];
            if options.quick {
                args.push("--quick".into());
            }
            args
        });
        for row in ROWS.iter().filter(|r| mine.contains(&r.step)) {
            results.values.insert(row.name.to_string(), theirs.outcome(row.name));
        }
        results.torch = results.torch.or(theirs.torch);
        results.cuda = results.cuda.or(theirs.cuda);
        results.machine = results.machine.or(theirs.machine);
    }
    results
}

/// Runs `bench/pytorch_bench.py` (or `--script`) for `steps`.
fn run_main(options: &Options, steps: &[&'static str], progress: &mut Progress) -> Results {
    let child = Child {
        python: &options.python,
        script: &options.script,
        files: &[("resnet50_train.csv", RESNET50_TRACE)],
        catalog: &Catalog::bench(),
        steps: steps.len(),
    };
    run_child(&child, progress, |files| {
        let mut args: Vec<OsString> =
            vec!["--only".into(), steps.join(",").into(), "--trace".into(), files[0].clone().into()];
        if options.quick {
            args.push("--quick".into());
        }
        args
    })
}

/// A script to run: how, what it is given, and what it may report.
pub struct Child<'a> {
    /// The interpreter.
    pub python: &'a Path,
    /// The script.
    pub script: &'a Path,
    /// Files written to a fresh temporary folder for the script (name, content), removed after it.
    pub files: &'a [(&'a str, &'a str)],
    /// The rows and steps it may report.
    pub catalog: &'a Catalog,
    /// How many steps it will start (the progress bar counts them as done when it ends).
    pub steps: usize,
}

/// Runs `child` with the arguments `args` makes from the paths of its files, streaming its
/// `PROGRESS` lines to `progress`; never fails: problems end up in [`Results::error`].
pub fn run_child(
    child: &Child<'_>,
    progress: &mut Progress,
    args: impl FnOnce(&[PathBuf]) -> Vec<OsString>,
) -> Results {
    let first = progress.done();
    let script = child.script;
    if !script.is_file() {
        return Results::missing(&format!("PyTorch not run: the script {} does not exist here", script.display()));
    }
    let (dir, files) = match write_files(script, child.files) {
        Ok(p) => p,
        Err(e) => return Results::missing(&format!("PyTorch not run: could not write its input files: {e}")),
    };
    let results = stream(child, args(&files), progress);
    let _ = std::fs::remove_dir_all(&dir);
    if let Some(why) = &results.error {
        progress.note(&format!("pytorch: {why}"));
    }
    progress.advance_to(first + child.steps);
    results
}

/// Starts the script with `args` and applies its stdout, line by line, as it comes.
fn stream(child: &Child<'_>, args: Vec<OsString>, progress: &mut Progress) -> Results {
    let mut cmd = Command::new(child.python);
    cmd.arg(child.script).args(args);
    cmd.env("PYTHONUNBUFFERED", "1").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let shown = format!("{} {}", child.python.display(), child.script.display());
    let mut proc = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Results::missing(&format!("PyTorch not run: could not start {}: {e}", child.python.display()))
        }
    };
    // stderr is drained on a thread (so the child never blocks on a full pipe); its tail explains
    // a failure.
    let stderr = proc.stderr.take().map(|mut err| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = err.read_to_string(&mut text);
            text
        })
    });
    let mut results = Results::default();
    if let Some(out) = proc.stdout.take() {
        let mut out = BufReader::new(out);
        let mut buf = Vec::new();
        // Bytes, not `lines()`: a line that is not UTF-8 (compiler output in another locale) must not
        // end the reading.
        while matches!(out.read_until(b'\n', &mut buf), Ok(n) if n > 0) {
            let line = String::from_utf8_lossy(&buf).into_owned();
            buf.clear();
            match results.apply(&line, child.catalog) {
                Some(Started::Step(name)) => progress.step("pytorch", &name),
                Some(Started::Other(what)) => progress.label(&format!("pytorch {what}")),
                None => {}
            }
        }
    }
    let status = proc.wait();
    let err_text = stderr.and_then(|h| h.join().ok()).unwrap_or_default();
    let tail = err_text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => {
            let why = results.error.clone().unwrap_or_else(|| {
                if tail.is_empty() {
                    format!("{shown} failed ({s})")
                } else {
                    format!("{shown} failed ({s}): {tail}")
                }
            });
            results.error = Some(why);
        }
        Err(e) => results.error = Some(format!("{shown}: {e}")),
    }
    results
}

/// Writes `files` to a fresh temporary folder named after the process and the script: (folder,
/// the files' paths in order).
fn write_files(script: &Path, files: &[(&str, &str)]) -> std::io::Result<(PathBuf, Vec<PathBuf>)> {
    let stem = script.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let dir = std::env::temp_dir().join(format!("cudasem-bench-{}-{stem}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut paths = Vec::with_capacity(files.len());
    for (name, content) in files {
        let file = dir.join(name);
        std::fs::write(&file, content)?;
        paths.push(file);
    }
    Ok((dir, paths))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_parsed_and_checked() {
        let mut r = Results::default();
        let c = &Catalog::bench();
        assert_eq!(r.apply("PROGRESS small_op", c), Some(Started::Step("small_op".into())));
        assert_eq!(r.apply("PROGRESS build_extension", c), Some(Started::Other("build_extension".into())));
        r.apply("INFO torch 2.11.0+cu130", c);
        r.apply("INFO machine 2 x NVIDIA H200", c);
        r.apply("RESULT small_op_cpp 6800.5 ns", c);
        r.apply("RESULT empty_tensor 1100 GB/s", c);
        r.apply("RESULT add_f32_256m nan GB/s", c);
        r.apply("ERROR small_op extension did not build", c);
        r.apply("some compiler chatter", c);
        assert_eq!(r.torch.as_deref(), Some("2.11.0+cu130"));
        assert_eq!(r.machine.as_deref(), Some("2 x NVIDIA H200"));
        assert_eq!(r.outcome("small_op_cpp"), Outcome::Value(6800.5));
        assert!(matches!(r.outcome("small_op"), Outcome::Failed(ref w) if w == "extension did not build"));
        assert!(matches!(r.outcome("empty_tensor"), Outcome::Failed(ref w) if w.contains("unit")));
        assert!(matches!(r.outcome("add_f32_256m"), Outcome::Failed(_)));
        assert!(matches!(r.outcome("sum_f32_1gib"), Outcome::Missing(_)));
        r.apply("FATAL no torch", c);
        assert_eq!(r.outcome("sum_f32_1gib"), Outcome::Missing("no torch".into()));
    }
}
