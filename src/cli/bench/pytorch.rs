//! PyTorch's side: `bench/pytorch_bench.py` run as a child process after cudasem's figures, its
//! stdout read line by line as it streams.
//!
//! The script's protocol (one message per line, fields separated by single spaces; every other line
//! is ignored, so compiler chatter cannot confuse it):
//! * `INFO key text…` — `torch` (its version), `cuda` (the CUDA version), `machine` (the GPUs);
//! * `PROGRESS name` — starts measuring step `name` (any other name only relabels the bar);
//! * `RESULT row value unit` — a measured figure (the unit must be the row's);
//! * `SKIP name reason…` / `ERROR name reason…` — a step or row with no figure, and why;
//! * `FATAL reason…` — the script cannot measure anything (no torch, no CUDA).

use super::progress::Progress;
use super::{Options, Outcome, RESNET50_TRACE, ROWS};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// What PyTorch's side reported.
#[derive(Debug, Clone, Default)]
pub struct Results {
    /// Outcome per row name (rows the script said nothing about are absent).
    pub values: HashMap<&'static str, Outcome>,
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

    /// Applies one line of the script's output; returns the step it started, if it did.
    pub fn apply(&mut self, line: &str) -> Option<Started> {
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
                Some(if ROWS.iter().any(|r| r.step == name) {
                    Started::Step(name.into())
                } else {
                    Started::Other(name.into())
                })
            }
            "RESULT" => {
                let fields: Vec<&str> = rest.split_whitespace().collect();
                if let [name, value, unit] = fields[..] {
                    if let Some(spec) = ROWS.iter().find(|r| r.name == name) {
                        let outcome = match value.parse::<f64>() {
                            Ok(v) if unit != spec.unit => {
                                Outcome::Failed(format!("reported {v} {unit}, the row's unit is {}", spec.unit))
                            }
                            Ok(v) if v.is_finite() && v > 0.0 => Outcome::Value(v),
                            _ => Outcome::Failed(format!("reported `{value}`, not a positive number")),
                        };
                        self.values.insert(spec.name, outcome);
                    }
                }
                None
            }
            "SKIP" | "ERROR" => {
                let (name, reason) = rest.split_once(' ').unwrap_or((rest, "no reason given"));
                let reason = reason.trim().to_string();
                // A row by its name, or every row of a step that has no value yet.
                for spec in ROWS.iter().filter(|r| r.name == name || r.step == name) {
                    if r_has_value(&self.values, spec.name) && spec.name != name {
                        continue;
                    }
                    let o =
                        if kind == "SKIP" { Outcome::Skipped(reason.clone()) } else { Outcome::Failed(reason.clone()) };
                    self.values.insert(spec.name, o);
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

fn r_has_value(values: &HashMap<&'static str, Outcome>, name: &str) -> bool {
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

/// Runs the script for `steps` and collects its results; never fails: problems end up in
/// [`Results::error`].
pub fn run(options: &Options, steps: &[&'static str], progress: &mut Progress) -> Results {
    let first = progress.done();
    let script = &options.script;
    if !script.is_file() {
        return Results::missing(&format!("PyTorch not run: the script {} does not exist here", script.display()));
    }
    let trace = match write_trace() {
        Ok(p) => p,
        Err(e) => return Results::missing(&format!("PyTorch not run: could not write the trace: {e}")),
    };
    let mut cmd = Command::new(&options.python);
    cmd.arg(script).arg("--only").arg(steps.join(",")).arg("--trace").arg(&trace.1);
    if options.quick {
        cmd.arg("--quick");
    }
    cmd.env("PYTHONUNBUFFERED", "1").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let shown = format!("{} {}", options.python.display(), script.display());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&trace.0);
            return Results::missing(&format!("PyTorch not run: could not start {}: {e}", options.python.display()));
        }
    };
    // stderr is drained on a thread (so the child never blocks on a full pipe); its tail explains
    // a failure.
    let stderr = child.stderr.take().map(|mut err| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = err.read_to_string(&mut text);
            text
        })
    });
    let mut results = Results::default();
    if let Some(out) = child.stdout.take() {
        let mut out = BufReader::new(out);
        let mut buf = Vec::new();
        // Bytes, not `lines()`: a line that is not UTF-8 (compiler output in another locale) must not
        // end the reading.
        while matches!(out.read_until(b'\n', &mut buf), Ok(n) if n > 0) {
            let line = String::from_utf8_lossy(&buf).into_owned();
            buf.clear();
            match results.apply(&line) {
                Some(Started::Step(name)) => progress.step("pytorch", &name),
                Some(Started::Other(what)) => progress.label(&format!("pytorch {what}")),
                None => {}
            }
        }
    }
    let status = child.wait();
    let err_text = stderr.and_then(|h| h.join().ok()).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&trace.0);
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
    if let Some(why) = &results.error {
        progress.note(&format!("pytorch: {why}"));
    }
    progress.advance_to(first + steps.len());
    results
}

/// Writes the embedded trace to a fresh temporary folder: (folder, file).
fn write_trace() -> std::io::Result<(PathBuf, PathBuf)> {
    let dir = std::env::temp_dir().join(format!("cudasem-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("resnet50_train.csv");
    std::fs::write(&file, RESNET50_TRACE)?;
    Ok((dir, file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_parsed_and_checked() {
        let mut r = Results::default();
        assert_eq!(r.apply("PROGRESS small_op"), Some(Started::Step("small_op".into())));
        assert_eq!(r.apply("PROGRESS build_extension"), Some(Started::Other("build_extension".into())));
        r.apply("INFO torch 2.11.0+cu130");
        r.apply("INFO machine 2 x NVIDIA H200");
        r.apply("RESULT small_op_cpp 6800.5 ns");
        r.apply("RESULT empty_tensor 1100 GB/s");
        r.apply("RESULT add_f32_256m nan GB/s");
        r.apply("ERROR small_op extension did not build");
        r.apply("some compiler chatter");
        assert_eq!(r.torch.as_deref(), Some("2.11.0+cu130"));
        assert_eq!(r.machine.as_deref(), Some("2 x NVIDIA H200"));
        assert_eq!(r.outcome("small_op_cpp"), Outcome::Value(6800.5));
        assert!(matches!(r.outcome("small_op"), Outcome::Failed(ref w) if w == "extension did not build"));
        assert!(matches!(r.outcome("empty_tensor"), Outcome::Failed(ref w) if w.contains("unit")));
        assert!(matches!(r.outcome("add_f32_256m"), Outcome::Failed(_)));
        assert!(matches!(r.outcome("sum_f32_1gib"), Outcome::Missing(_)));
        r.apply("FATAL no torch");
        assert_eq!(r.outcome("sum_f32_1gib"), Outcome::Missing("no torch".into()));
    }
}
