//! The table printed at the end and the JSON file (serde: [`JsonReport`] is its schema).

use super::pytorch::Results;
use super::rows::{Outcome, RowSpec, ROWS};
use cudasem::cuda;
use serde::Serialize;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io;
use std::path::Path;

/// Where and when the bench ran.
#[derive(Debug, Clone)]
pub struct Environment {
    /// UTC, ISO 8601 (`2026-12-01T10:51:00Z`).
    pub date: String,
    /// The GPUs cudasem saw (`2 × NVIDIA H200`).
    pub machine: String,
    /// cudasem's driver (`cuda` or `sim`).
    pub driver: String,
}

impl Environment {
    /// This process's driver and devices, now.
    pub fn here() -> Environment {
        let n = cuda::device_count();
        let mut names: Vec<(String, usize)> = Vec::new();
        for i in 0..n {
            let name = cuda::get_device_name(Some(i)).unwrap_or_else(|_| "unknown".into());
            match names.iter_mut().find(|(m, _)| *m == name) {
                Some((_, count)) => *count += 1,
                None => names.push((name, 1)),
            }
        }
        let machine = if names.is_empty() {
            "no device".to_string()
        } else {
            names.iter().map(|(name, count)| format!("{count} × {name}")).collect::<Vec<_>>().join(" + ")
        };
        Environment { date: utc_now(), machine, driver: cuda::driver_name().to_string() }
    }
}

/// Now, UTC, as `YYYY-MM-DDTHH:MM:SSZ`.
fn utc_now() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar (H. Hinnant).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// One row of the table.
#[derive(Debug, Clone)]
pub struct Row {
    /// What is measured.
    pub spec: RowSpec,
    /// cudasem's figure.
    pub cudasem: Outcome,
    /// PyTorch's figure.
    pub pytorch: Outcome,
}

impl Row {
    /// > 1 when cudasem is better: PyTorch's / ours for times and bytes, ours / PyTorch's for rates.
    pub fn speedup(&self) -> Option<f64> {
        let (ours, theirs) = (self.cudasem.value()?, self.pytorch.value()?);
        Some(if self.spec.lower_is_better { theirs / ours } else { ours / theirs })
    }

    /// Whether the speedup reaches the goal (`None` without a goal or a speedup).
    pub fn met(&self) -> Option<bool> {
        Some(self.speedup()? >= self.spec.goal?)
    }
}

/// The rows of `steps`, in table order.
pub fn rows(steps: &[&str], ours: &HashMap<&'static str, Outcome>, theirs: &Results) -> Vec<Row> {
    ROWS.iter()
        .filter(|r| steps.contains(&r.step))
        .map(|r| Row {
            spec: *r,
            cudasem: ours.get(r.name).cloned().unwrap_or_else(|| Outcome::Failed("not measured".into())),
            pytorch: theirs.outcome(r.name),
        })
        .collect()
}

/// Everything the bench found.
#[derive(Debug, Clone)]
pub struct Report {
    /// Where and when.
    pub env: Environment,
    /// Whether the sizes were `--quick`'s.
    pub quick: bool,
    /// The rows.
    pub rows: Vec<Row>,
    /// PyTorch's side (versions, and why it is missing if it is).
    pub pytorch: Results,
}

/// A value for the table: bytes in GB, others with 3–4 significant digits.
pub fn show(v: f64, unit: &str) -> String {
    match v {
        _ if unit == "bytes" => format!("{:.2} GB", v / 1e9),
        v if v >= 1000.0 => format!("{v:.0}"),
        v if v >= 10.0 => format!("{v:.1}"),
        v if v >= 1.0 => format!("{v:.2}"),
        v if v >= 0.001 => format!("{v:.3}"),
        v => format!("{v:.1e}"),
    }
}

/// A table's first line: what ran (`title`, `--quick`), where, beside which PyTorch, when.
pub fn header(title: &str, quick: bool, env: &Environment, p: &Results) -> String {
    format!(
        "{title}{} — {} driver, {}; PyTorch {}, CUDA {}; {}",
        if quick { " --quick (tiny sizes: shows it runs, measures nothing)" } else { "" },
        env.driver,
        env.machine,
        p.torch.as_deref().unwrap_or("-"),
        p.cuda.as_deref().unwrap_or("-"),
        env.date
    )
}

/// The notes under a table: why each cudasem figure is missing, why PyTorch's column is empty
/// (`error`), and why each PyTorch figure that was reported as missing is (rows: name, cudasem's
/// outcome, PyTorch's).
pub fn write_notes(t: &mut String, rows: &[(&str, &Outcome, &Outcome)], error: Option<&str>) {
    for (name, ours, _) in rows {
        if let Some(note) = ours.note() {
            let _ = writeln!(t, "  {name}: cudasem {note}");
        }
    }
    if let Some(why) = error {
        let _ = writeln!(t, "  pytorch: {why}");
    }
    for (name, _, theirs) in rows.iter().filter(|r| !matches!(r.2, Outcome::Value(_) | Outcome::Missing(_))) {
        let _ = writeln!(t, "  {name}: pytorch {}", theirs.note().unwrap_or_default());
    }
}

/// An outcome in a table cell: the value, `skipped`, `FAILED` or `-`.
pub fn show_outcome(o: &Outcome, unit: &str) -> String {
    match o {
        Outcome::Value(v) => show(*v, unit),
        Outcome::Skipped(_) => "skipped".into(),
        Outcome::Failed(_) => "FAILED".into(),
        Outcome::Missing(_) => "-".into(),
    }
}

/// A figure for the JSON: an integer for bytes, else 7 significant digits; `None` (null) when
/// missing or not finite.
pub fn json_num(v: Option<f64>, unit: &str) -> Option<serde_json::Number> {
    match v {
        Some(v) if v.is_finite() && unit == "bytes" && v >= 0.0 => Some((v.round() as u64).into()),
        Some(v) if v.is_finite() => serde_json::Number::from_f64(format!("{v:.6e}").parse::<f64>().unwrap_or(v)),
        _ => None,
    }
}

/// The first keys of the bench's JSON files: where, when, beside which PyTorch.
#[derive(Debug, Serialize)]
pub struct JsonHead<'a> {
    /// UTC, ISO 8601.
    pub date: &'a str,
    /// The GPUs cudasem saw.
    pub machine: &'a str,
    /// cudasem's driver.
    pub driver: &'a str,
    /// The CUDA version PyTorch reported.
    pub cuda: Option<&'a str>,
    /// `torch.__version__`.
    pub torch: Option<&'a str>,
    /// Whether the sizes were `--quick`'s.
    pub quick: bool,
    /// Why PyTorch's column is empty or incomplete.
    pub pytorch_error: Option<&'a str>,
}

impl<'a> JsonHead<'a> {
    /// The head of a run in `env`, beside PyTorch's `p`.
    pub fn new(env: &'a Environment, quick: bool, p: &'a Results) -> JsonHead<'a> {
        JsonHead {
            date: &env.date,
            machine: &env.machine,
            driver: &env.driver,
            cuda: p.cuda.as_deref(),
            torch: p.torch.as_deref(),
            quick,
            pytorch_error: p.error.as_deref(),
        }
    }
}

/// The JSON file `bench/results/latest.json` (its schema: BENCHMARKS.md).
#[derive(Debug, Serialize)]
pub struct JsonReport<'a> {
    /// Where, when, beside which PyTorch.
    #[serde(flatten)]
    pub head: JsonHead<'a>,
    /// One object per row, in table order.
    pub results: Vec<JsonRow<'a>>,
}

/// One row of the JSON file.
#[derive(Debug, Serialize)]
pub struct JsonRow<'a> {
    /// The row's name.
    pub name: &'a str,
    /// cudasem's figure.
    pub cudasem: Option<serde_json::Number>,
    /// PyTorch's figure.
    pub pytorch: Option<serde_json::Number>,
    /// The unit of both.
    pub unit: &'a str,
    /// See [`Row::speedup`].
    pub speedup: Option<serde_json::Number>,
    /// The speedup aimed at.
    pub goal: Option<serde_json::Number>,
    /// See [`Row::met`].
    pub met: Option<bool>,
    /// Whether a smaller figure is better.
    pub lower_is_better: bool,
    /// Why cudasem has no figure.
    pub cudasem_note: Option<String>,
    /// Why PyTorch has no figure.
    pub pytorch_note: Option<String>,
}

impl<'a> From<&'a Row> for JsonRow<'a> {
    fn from(r: &'a Row) -> JsonRow<'a> {
        let unit = r.spec.unit;
        JsonRow {
            name: r.spec.name,
            cudasem: json_num(r.cudasem.value(), unit),
            pytorch: json_num(r.pytorch.value(), unit),
            unit,
            speedup: json_num(r.speedup(), ""),
            goal: json_num(r.spec.goal, ""),
            met: r.met(),
            lower_is_better: r.spec.lower_is_better,
            cudasem_note: r.cudasem.note(),
            pytorch_note: r.pytorch.note(),
        }
    }
}

/// serde_json's layout for the file: the top object and the `results` array one item per line,
/// each row on its own line (`{"name": "…", "cudasem": …}`), so a new run's diff reads by row.
#[derive(Default)]
struct RowPerLine {
    depth: usize,
    /// Whether the open array of depth 2 has items (its `]` then goes on a line of its own).
    items: bool,
}

impl serde_json::ser::Formatter for RowPerLine {
    fn begin_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.depth += 1;
        w.write_all(b"{")
    }
    fn end_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.depth -= 1;
        w.write_all(if self.depth == 0 { b"\n}" } else { b"}" })
    }
    fn begin_object_key<W: ?Sized + io::Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        match (self.depth, first) {
            (1, true) => w.write_all(b"\n  "),
            (1, false) => w.write_all(b",\n  "),
            (_, true) => Ok(()),
            (_, false) => w.write_all(b", "),
        }
    }
    fn begin_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }
    fn begin_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.depth += 1;
        self.items = false;
        w.write_all(b"[")
    }
    fn end_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.depth -= 1;
        w.write_all(if self.depth == 1 && self.items { b"\n  ]" } else { b"]" })
    }
    fn begin_array_value<W: ?Sized + io::Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.items |= self.depth == 2;
        match (self.depth, first) {
            (2, true) => w.write_all(b"\n    "),
            (2, false) => w.write_all(b",\n    "),
            (_, true) => Ok(()),
            (_, false) => w.write_all(b", "),
        }
    }
}

impl Report {
    /// The table, with the notes that explain missing figures under it.
    pub fn table(&self) -> String {
        let p = &self.pytorch;
        let mut t = header("cudasem bench", self.quick, &self.env, p);
        t.push('\n');
        let _ = writeln!(t, "speedup > 1: cudasem better (times, bytes: PyTorch's / ours; rates: ours / PyTorch's)");
        let _ = writeln!(
            t,
            "{:<22} {:>11} {:>11} {:<8} {:>8} {:>6} {:<4}",
            "figure", "cudasem", "pytorch", "unit", "speedup", "goal", "met?"
        );
        for r in &self.rows {
            let speedup = r.speedup().map(|s| format!("{s:.2}")).unwrap_or_else(|| "-".into());
            let goal = r.spec.goal.map(|g| format!("{g:.2}")).unwrap_or_else(|| "-".into());
            let met = match r.met() {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "-",
            };
            let _ = writeln!(
                t,
                "{:<22} {:>11} {:>11} {:<8} {:>8} {:>6} {:<4}",
                r.spec.name,
                show_outcome(&r.cudasem, r.spec.unit),
                show_outcome(&r.pytorch, r.spec.unit),
                r.spec.unit,
                speedup,
                goal,
                met
            );
        }
        let sides: Vec<_> = self.rows.iter().map(|r| (r.spec.name, &r.cudasem, &r.pytorch)).collect();
        write_notes(&mut t, &sides, p.error.as_deref());
        t.trim_end().to_string()
    }

    /// The JSON file's content.
    pub fn to_json(&self) -> JsonReport<'_> {
        JsonReport {
            head: JsonHead::new(&self.env, self.quick, &self.pytorch),
            results: self.rows.iter().map(JsonRow::from).collect(),
        }
    }

    /// The JSON text (one result per line).
    pub fn json(&self) -> String {
        json_text(&self.to_json())
    }

    /// Writes [`Report::json`] to `path`, making its folder if needed.
    pub fn write_json(&self, path: &Path) -> std::io::Result<()> {
        write_file(path, &self.json())
    }
}

/// `value` as JSON text in the bench files' layout: the top object one key per line, the items of
/// its arrays one per line.
pub fn json_text(value: &impl Serialize) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, RowPerLine::default());
    value.serialize(&mut ser).expect("writing to a Vec does not fail");
    out.extend_from_slice(b"\n");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// Writes `text` to `path`, making its folder if needed.
pub fn write_file(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_numbers() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_788), (2026, 12, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        let num = |v, unit| json_num(Some(v), unit).map(|n| n.to_string());
        assert_eq!(num(1.23456789, "").as_deref(), Some("1.234568"));
        assert_eq!(json_num(Some(2.345678912e-5), "").and_then(|n| n.as_f64()), Some(2.345679e-5));
        assert_eq!(num(4310.123456, "").as_deref(), Some("4310.123"));
        assert_eq!(num(7033847808.0, "bytes").as_deref(), Some("7033847808"));
        assert_eq!(json_num(Some(f64::NAN), ""), None);
        assert_eq!(json_num(None, "ns"), None);
    }

    #[test]
    fn the_json_has_one_row_per_line_and_reads_back() {
        let spec = |name| *ROWS.iter().find(|r| r.name == name).unwrap();
        let env = Environment {
            date: "2026-12-01T10:51:00Z".into(),
            machine: "2 × NVIDIA \"H200\"\n".into(),
            driver: "sim".into(),
        };
        let rows = vec![
            Row { spec: spec("small_op"), cudasem: Outcome::Value(4000.123456), pytorch: Outcome::Value(8000.0) },
            Row {
                spec: spec("replay_resnet50"),
                cudasem: Outcome::Value(5964300288.0),
                pytorch: Outcome::Missing("no torch".into()),
            },
            Row {
                spec: spec("p2p_copy_1gib"),
                cudasem: Outcome::Skipped("needs 2 devices".into()),
                pytorch: Outcome::Missing("no torch".into()),
            },
        ];
        let report = Report { env, quick: true, rows, pytorch: Results::missing("no torch") };
        let text = report.json();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1 + 8 + 3 + 2, "{text}");
        assert_eq!((lines[0], lines[1]), ("{", "  \"date\": \"2026-12-01T10:51:00Z\","));
        assert!(
            lines[9].starts_with("    {\"name\": \"small_op\", \"cudasem\": 4000.123, \"pytorch\": 8000.0,"),
            "{text}"
        );
        assert_eq!(lines[12..], ["  ]", "}"]);

        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["machine"], "2 × NVIDIA \"H200\"\n");
        assert_eq!(
            (v["quick"].as_bool(), v["torch"].is_null(), v["pytorch_error"].as_str()),
            (Some(true), true, Some("no torch"))
        );
        let r = &v["results"];
        assert_eq!(
            (r[0]["speedup"].as_f64(), r[0]["met"].as_bool(), r[0]["goal"].as_f64()),
            (Some(1.999938), Some(true), Some(1.6))
        );
        assert_eq!(r[1]["cudasem"].as_u64(), Some(5964300288));
        assert_eq!((r[1]["pytorch"].is_null(), r[1]["pytorch_note"].as_str()), (true, Some("no torch")));
        assert_eq!(
            (r[2]["cudasem"].is_null(), r[2]["cudasem_note"].as_str()),
            (true, Some("skipped: needs 2 devices"))
        );
        assert_eq!(r[2]["lower_is_better"].as_bool(), Some(false));
        let empty = Report { rows: Vec::new(), ..report };
        assert!(empty.json().contains("\"results\": []\n}"), "{}", empty.json());
    }

    #[test]
    fn speedup_follows_the_direction_of_better() {
        let spec = |name| *ROWS.iter().find(|r| r.name == name).unwrap();
        let time = Row { spec: spec("small_op"), cudasem: Outcome::Value(4000.0), pytorch: Outcome::Value(8000.0) };
        assert_eq!(time.speedup(), Some(2.0));
        assert_eq!(time.met(), Some(true));
        let rate = Row { spec: spec("add_f32_256m"), cudasem: Outcome::Value(4000.0), pytorch: Outcome::Value(4400.0) };
        assert!((rate.speedup().unwrap() - 0.9091).abs() < 1e-4);
        assert_eq!(rate.met(), Some(false));
        let none = Row { spec: spec("h2d_pageable_1gib"), cudasem: Outcome::Value(8.0), pytorch: Outcome::Value(4.0) };
        assert_eq!((none.speedup(), none.met()), (Some(2.0), None));
    }
}
