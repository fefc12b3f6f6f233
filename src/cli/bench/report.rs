//! The table printed at the end and the JSON file (written by hand: the crate has no serde).

use super::pytorch::Results;
use super::{Outcome, RowSpec, ROWS};
use cudasem::cuda;
use std::collections::HashMap;
use std::fmt::Write as _;
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
fn show(v: f64, unit: &str) -> String {
    match v {
        _ if unit == "bytes" => format!("{:.2} GB", v / 1e9),
        v if v >= 1000.0 => format!("{v:.0}"),
        v if v >= 10.0 => format!("{v:.1}"),
        v if v >= 1.0 => format!("{v:.2}"),
        v if v >= 0.001 => format!("{v:.3}"),
        v => format!("{v:.1e}"),
    }
}

fn show_outcome(o: &Outcome, unit: &str) -> String {
    match o {
        Outcome::Value(v) => show(*v, unit),
        Outcome::Skipped(_) => "skipped".into(),
        Outcome::Failed(_) => "FAILED".into(),
        Outcome::Missing(_) => "-".into(),
    }
}

/// A JSON string literal (escaped as the allocator's snapshots are).
fn json_str(s: &str) -> String {
    cudasem::alloc::Value::str(s).to_json()
}

fn json_opt_str(s: Option<&str>) -> String {
    s.map(json_str).unwrap_or_else(|| "null".into())
}

/// A JSON number (7 significant digits, never an exponent; integers for bytes), or null.
fn json_num(v: Option<f64>, unit: &str) -> String {
    match v {
        Some(v) if v.is_finite() && unit == "bytes" => format!("{v:.0}"),
        Some(v) if v.is_finite() => format!("{}", format!("{v:.6e}").parse::<f64>().unwrap_or(v)),
        _ => "null".into(),
    }
}

impl Report {
    /// The table, with the notes that explain missing figures under it.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let p = &self.pytorch;
        let _ = writeln!(
            t,
            "cudasem bench{} — {} driver, {}; PyTorch {}, CUDA {}; {}",
            if self.quick { " --quick (tiny sizes: shows it runs, measures nothing)" } else { "" },
            self.env.driver,
            self.env.machine,
            p.torch.as_deref().unwrap_or("-"),
            p.cuda.as_deref().unwrap_or("-"),
            self.env.date
        );
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
        for r in &self.rows {
            if let Some(note) = r.cudasem.note() {
                let _ = writeln!(t, "  {}: cudasem {note}", r.spec.name);
            }
        }
        if let Some(why) = &p.error {
            let _ = writeln!(t, "  pytorch: {why}");
        }
        for r in self.rows.iter().filter(|r| !matches!(r.pytorch, Outcome::Value(_) | Outcome::Missing(_))) {
            let _ = writeln!(t, "  {}: pytorch {}", r.spec.name, r.pytorch.note().unwrap_or_default());
        }
        t.trim_end().to_string()
    }

    /// The JSON object (one result per line).
    pub fn json(&self) -> String {
        let p = &self.pytorch;
        let mut j = String::from("{\n");
        let _ = writeln!(j, "  \"date\": {},", json_str(&self.env.date));
        let _ = writeln!(j, "  \"machine\": {},", json_str(&self.env.machine));
        let _ = writeln!(j, "  \"driver\": {},", json_str(&self.env.driver));
        let _ = writeln!(j, "  \"cuda\": {},", json_opt_str(p.cuda.as_deref()));
        let _ = writeln!(j, "  \"torch\": {},", json_opt_str(p.torch.as_deref()));
        let _ = writeln!(j, "  \"quick\": {},", self.quick);
        let _ = writeln!(j, "  \"pytorch_error\": {},", json_opt_str(p.error.as_deref()));
        j.push_str("  \"results\": [\n");
        for (i, r) in self.rows.iter().enumerate() {
            let unit = r.spec.unit;
            let _ = write!(
                j,
                "    {{\"name\": {}, \"cudasem\": {}, \"pytorch\": {}, \"unit\": {}, \"speedup\": {}, \"goal\": {}, \"met\": {}, \"lower_is_better\": {}, \"cudasem_note\": {}, \"pytorch_note\": {}}}",
                json_str(r.spec.name),
                json_num(r.cudasem.value(), unit),
                json_num(r.pytorch.value(), unit),
                json_str(unit),
                json_num(r.speedup(), ""),
                json_num(r.spec.goal, ""),
                r.met().map(|m| m.to_string()).unwrap_or_else(|| "null".into()),
                r.spec.lower_is_better,
                json_opt_str(r.cudasem.note().as_deref()),
                json_opt_str(r.pytorch.note().as_deref()),
            );
            j.push_str(if i + 1 < self.rows.len() { ",\n" } else { "\n" });
        }
        j.push_str("  ]\n}\n");
        j
    }

    /// Writes [`Report::json`] to `path`, making its folder if needed.
    pub fn write_json(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, self.json())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_strings() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_788), (2026, 12, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(json_str("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
        assert_eq!(json_num(Some(1.23456789), ""), "1.234568");
        assert_eq!(json_num(Some(2.345678912e-5), ""), "0.00002345679");
        assert_eq!(json_num(Some(4310.123456), ""), "4310.123");
        assert_eq!(json_num(Some(7033847808.0), "bytes"), "7033847808");
        assert_eq!(json_num(Some(f64::NAN), ""), "null");
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
