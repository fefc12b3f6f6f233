//! The op matrix's table and `bench/results/ops.json` (serde: [`JsonOps`] is its schema), and the
//! summary the targets are read from.

use super::super::pytorch::Results;
use super::super::report::{
    header, json_num, json_text, show, show_outcome, write_file, write_notes, Environment, JsonHead,
};
use super::super::rows::Outcome;
use super::cases::{Case, Op};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

/// The share of the copy bandwidth a memory-bound case aims at.
pub const COPY_SHARE: f64 = 0.85;

/// One case's figures on both sides.
#[derive(Debug, Clone)]
pub struct Row {
    pub case: Case,
    /// Logical bytes read and written.
    pub bytes: usize,
    /// cudasem's median µs.
    pub cudasem: Outcome,
    /// PyTorch's median µs.
    pub pytorch: Outcome,
}

/// GB/s (10^9 bytes per second) for `bytes` in `us` µs.
pub fn gb_per_s(bytes: usize, us: f64) -> f64 {
    bytes as f64 / (us * 1e-6) / 1e9
}

impl Row {
    /// cudasem's GB/s.
    pub fn gbps(&self) -> Option<f64> {
        self.cudasem.value().map(|us| gb_per_s(self.bytes, us))
    }

    /// PyTorch's GB/s.
    pub fn pytorch_gbps(&self) -> Option<f64> {
        self.pytorch.value().map(|us| gb_per_s(self.bytes, us))
    }

    /// PyTorch's time / cudasem's (> 1: cudasem faster).
    pub fn ratio(&self) -> Option<f64> {
        Some(self.pytorch.value()? / self.cudasem.value()?)
    }
}

/// What the targets are read from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Cases run.
    pub cases: usize,
    /// Cases whose cudasem side failed (an error or a wrong result).
    pub failed: usize,
    /// Cases with a ratio (both sides measured).
    pub compared: usize,
    /// Geometric mean of the ratios.
    pub geomean_ratio: Option<f64>,
    /// The case of the smallest ratio.
    pub worst: Option<String>,
    /// Its ratio.
    pub worst_ratio: Option<f64>,
    /// Cases below parity (ratio < 1).
    pub below_parity: usize,
    /// Cases below 0.95.
    pub below_0_95: usize,
    /// cudasem's `copy_d2d` GB/s.
    pub copy_d2d_gbps: Option<f64>,
    /// PyTorch's `copy_d2d` GB/s.
    pub pytorch_copy_d2d_gbps: Option<f64>,
    /// The yardstick of memory-bound cases: the faster of the two copies.
    pub yardstick_gbps: Option<f64>,
    /// Memory-bound cases (but the copy) whose cudasem GB/s is below 85 % of the yardstick.
    pub below_85pct_of_copy: Vec<String>,
}

/// The summary of `rows`.
pub fn summarize(rows: &[Row]) -> Summary {
    let ratios: Vec<(&str, f64)> = rows.iter().filter_map(|r| Some((r.case.name.as_str(), r.ratio()?))).collect();
    let geomean =
        (!ratios.is_empty()).then(|| (ratios.iter().map(|(_, x)| x.ln()).sum::<f64>() / ratios.len() as f64).exp());
    let worst = ratios.iter().copied().min_by(|a, b| a.1.total_cmp(&b.1));
    let copy = rows.iter().find(|r| r.case.op == Op::Copy);
    let (ours, theirs) = (copy.and_then(Row::gbps), copy.and_then(Row::pytorch_gbps));
    let yardstick = match (ours, theirs) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    let below_85 = match yardstick {
        Some(y) => rows
            .iter()
            .filter(|r| r.case.memory_bound() && r.case.op != Op::Copy)
            .filter(|r| r.gbps().is_some_and(|g| g < COPY_SHARE * y))
            .map(|r| r.case.name.clone())
            .collect(),
        None => Vec::new(),
    };
    Summary {
        cases: rows.len(),
        failed: rows.iter().filter(|r| matches!(r.cudasem, Outcome::Failed(_))).count(),
        compared: ratios.len(),
        geomean_ratio: geomean,
        worst: worst.map(|w| w.0.to_string()),
        worst_ratio: worst.map(|w| w.1),
        below_parity: ratios.iter().filter(|r| r.1 < 1.0).count(),
        below_0_95: ratios.iter().filter(|r| r.1 < 0.95).count(),
        copy_d2d_gbps: ours,
        pytorch_copy_d2d_gbps: theirs,
        yardstick_gbps: yardstick,
        below_85pct_of_copy: below_85,
    }
}

/// Everything the op matrix found.
#[derive(Debug, Clone)]
pub struct OpsReport {
    pub env: Environment,
    pub quick: bool,
    /// The matrix's `[R, C]`.
    pub shape: [usize; 2],
    /// Warm-up calls, timed runs, calls per run.
    pub timing: [usize; 3],
    pub rows: Vec<Row>,
    pub pytorch: Results,
}

/// `ops.json`.
#[derive(Debug, Serialize)]
pub struct JsonOps<'a> {
    /// Where, when, beside which PyTorch.
    #[serde(flatten)]
    pub head: JsonHead<'a>,
    /// The matrix's `[R, C]` (2^24 elements in a full run).
    pub shape: [usize; 2],
    /// `[warm-up calls, timed runs, calls per run]`; times are the median run's µs per call.
    pub timing: [usize; 3],
    pub summary: Summary,
    pub cases: Vec<JsonCase<'a>>,
}

/// One case of `ops.json`.
#[derive(Debug, Serialize)]
pub struct JsonCase<'a> {
    pub name: &'a str,
    pub dtype: &'static str,
    pub layout: &'static str,
    pub memory_bound: bool,
    pub bytes: usize,
    /// Whether cudasem's result agreed with the CPU reference (and was timed).
    pub passed: bool,
    pub cudasem_us: Option<serde_json::Number>,
    pub cudasem_gbps: Option<serde_json::Number>,
    pub pytorch_us: Option<serde_json::Number>,
    pub pytorch_gbps: Option<serde_json::Number>,
    /// PyTorch's time / cudasem's (> 1: cudasem faster).
    pub ratio: Option<serde_json::Number>,
    pub cudasem_note: Option<String>,
    pub pytorch_note: Option<String>,
}

/// 7 significant digits.
fn round(v: Option<f64>) -> Option<f64> {
    json_num(v, "").and_then(|n| n.as_f64())
}

impl OpsReport {
    /// The JSON file's content.
    pub fn to_json(&self) -> JsonOps<'_> {
        let mut summary = summarize(&self.rows);
        for v in [
            &mut summary.geomean_ratio,
            &mut summary.worst_ratio,
            &mut summary.copy_d2d_gbps,
            &mut summary.pytorch_copy_d2d_gbps,
            &mut summary.yardstick_gbps,
        ] {
            *v = round(*v);
        }
        JsonOps {
            head: JsonHead::new(&self.env, self.quick, &self.pytorch),
            shape: self.shape,
            timing: self.timing,
            summary,
            cases: self.rows.iter().map(json_case).collect(),
        }
    }

    /// The JSON text (one case per line).
    pub fn json(&self) -> String {
        json_text(&self.to_json())
    }

    /// Writes [`OpsReport::json`] to `path`, making its folder if needed.
    pub fn write_json(&self, path: &Path) -> std::io::Result<()> {
        write_file(path, &self.json())
    }

    /// The table, the summary and the notes that explain missing figures.
    pub fn table(&self) -> String {
        let p = &self.pytorch;
        let mut t = header("cudasem bench --ops", self.quick, &self.env, p);
        let [r, c] = self.shape;
        let _ = writeln!(t, "; [{r}, {c}], median of {} runs × {} calls", self.timing[1], self.timing[2]);
        let _ = writeln!(
            t,
            "ratio = PyTorch's time / cudasem's (> 1: cudasem faster); GB/s of logical bytes read + written"
        );
        let _ = writeln!(
            t,
            "{:<28} {:>10} {:>8} {:>10} {:>8} {:>6} {:<5}",
            "case", "cudasem µs", "GB/s", "pytorch µs", "GB/s", "ratio", "note"
        );
        let summary = summarize(&self.rows);
        for r in &self.rows {
            let gb = |v: Option<f64>| v.map(|g| show(g, "GB/s")).unwrap_or_else(|| "-".into());
            let note = match () {
                _ if !r.case.memory_bound() => "launch",
                _ if summary.below_85pct_of_copy.contains(&r.case.name) => "<85%",
                _ => "",
            };
            let _ = writeln!(
                t,
                "{:<28} {:>10} {:>8} {:>10} {:>8} {:>6} {:<5}",
                r.case.name,
                show_outcome(&r.cudasem, "us"),
                gb(r.gbps()),
                show_outcome(&r.pytorch, "us"),
                gb(r.pytorch_gbps()),
                r.ratio().map(|x| format!("{x:.2}")).unwrap_or_else(|| "-".into()),
                note
            );
        }
        write_summary(&mut t, &summary);
        let sides: Vec<_> = self.rows.iter().map(|r| (r.case.name.as_str(), &r.cudasem, &r.pytorch)).collect();
        write_notes(&mut t, &sides, p.error.as_deref());
        t.trim_end().to_string()
    }
}

fn write_summary(t: &mut String, s: &Summary) {
    let num = |v: Option<f64>| v.map(|x| format!("{x:.3}")).unwrap_or_else(|| "-".into());
    let _ = writeln!(
        t,
        "summary: {} cases, {} failed, {} compared; geometric mean ratio {}; worst {} ({}); {} below parity, {} below 0.95",
        s.cases,
        s.failed,
        s.compared,
        num(s.geomean_ratio),
        s.worst.as_deref().unwrap_or("-"),
        num(s.worst_ratio),
        s.below_parity,
        s.below_0_95
    );
    let gb = |v: Option<f64>| v.map(|x| format!("{x:.0} GB/s")).unwrap_or_else(|| "-".into());
    let _ = writeln!(
        t,
        "copy_d2d: cudasem {}, PyTorch {}; {} memory-bound cases below 85 % of {}",
        gb(s.copy_d2d_gbps),
        gb(s.pytorch_copy_d2d_gbps),
        s.below_85pct_of_copy.len(),
        gb(s.yardstick_gbps)
    );
}

fn json_case(r: &Row) -> JsonCase<'_> {
    JsonCase {
        name: &r.case.name,
        dtype: r.case.dtype.name(),
        layout: r.case.layout.name(),
        memory_bound: r.case.memory_bound(),
        bytes: r.bytes,
        passed: matches!(r.cudasem, Outcome::Value(_)),
        cudasem_us: json_num(r.cudasem.value(), ""),
        cudasem_gbps: json_num(r.gbps(), ""),
        pytorch_us: json_num(r.pytorch.value(), ""),
        pytorch_gbps: json_num(r.pytorch_gbps(), ""),
        ratio: json_num(r.ratio(), ""),
        cudasem_note: r.cudasem.note(),
        pytorch_note: r.pytorch.note(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::cases::{Binary, Layout, Unary};
    use super::*;
    use cudasem::DType;

    fn row(case: Case, ours: f64, theirs: Option<f64>) -> Row {
        let bytes = case.bytes(4096, 4096);
        let pytorch = theirs.map_or(Outcome::Missing("no torch".into()), Outcome::Value);
        Row { case, bytes, cudasem: Outcome::Value(ours), pytorch }
    }

    #[test]
    fn the_summary_reads_the_targets() {
        let copy = Case::new(Op::Copy, DType::F32, Layout::Contig);
        let add = Case::new(Op::Binary(Binary::Add), DType::F32, Layout::Contig);
        let exp = Case::new(Op::Unary(Unary::Exp), DType::BF16, Layout::Contig);
        let vec = Case::new(Op::Unary(Unary::Exp), DType::F32, Layout::Vector);
        // copy: 128 MiB in 32 µs = 4194 GB/s; PyTorch's 4000 GB/s.
        let copy_us = (8 << 24) as f64 / 4194.304e3;
        let rows = vec![
            row(copy.clone(), copy_us, Some(8.0 * (1 << 24) as f64 / 4000e3)),
            row(add, 60.0, Some(54.0)),
            row(exp, 16.0, Some(32.0)),
            row(vec, 9.0, Some(4.5)),
        ];
        let s = summarize(&rows);
        assert_eq!((s.cases, s.failed, s.compared), (4, 0, 4));
        assert_eq!((s.worst.as_deref(), s.worst_ratio), (Some("exp_f32_vec"), Some(0.5)));
        assert_eq!((s.below_parity, s.below_0_95), (2, 2), "{s:?}");
        let want = (rows[0].ratio().unwrap() * 0.9 * 2.0 * 0.5f64).powf(0.25);
        assert!((s.geomean_ratio.unwrap() - want).abs() < 1e-12);
        assert!((s.copy_d2d_gbps.unwrap() - 4194.304).abs() < 1e-6);
        assert_eq!(s.yardstick_gbps, s.copy_d2d_gbps);
        // add: 201 MB in 60 µs = 3355 GB/s < 0.85 × 4194; exp bf16: 67 MB in 16 µs = 4194; the
        // launch-bound vector is not counted.
        assert_eq!(s.below_85pct_of_copy, ["add_f32"]);

        let report = OpsReport {
            env: Environment { date: "2026-12-01T10:51:00Z".into(), machine: "1 × H200".into(), driver: "sim".into() },
            quick: false,
            shape: [4096, 4096],
            timing: [5, 21, 20],
            rows,
            pytorch: Results::default(),
        };
        let v: serde_json::Value = serde_json::from_str(&report.json()).unwrap();
        assert_eq!(v["summary"]["worst"], "exp_f32_vec");
        assert_eq!(v["summary"]["below_85pct_of_copy"][0], "add_f32");
        assert_eq!(v["cases"].as_array().unwrap().len(), 4);
        assert_eq!(v["cases"][1]["ratio"].as_f64(), Some(0.9));
        assert_eq!(v["cases"][1]["bytes"].as_u64(), Some(12 << 24));
        assert_eq!(v["cases"][3]["memory_bound"], false);
        let table = report.table();
        assert!(table.contains("add_f32") && table.contains("<85%") && table.contains("launch"), "{table}");
        assert!(table.contains("worst exp_f32_vec (0.500)"), "{table}");
    }
}
