//! The float64 CPU reference of every op of the matrix, and its tolerances.
//!
//! The tolerances are the op tests' own, from their one table (`tests/tensor_util/tolerance.rs`,
//! compiled in here so that the bench and the tests cannot drift apart): a result `g` passes
//! against the f64 reference `w` rounded to the result's dtype when `|g − w| ≤ atol + rtol·|w|`,
//! with `(rtol, atol)` per op family and dtype (exact for casts, comparisons, `where`, extremes,
//! indices, correctly rounded arithmetic and integer results; `torch.testing`'s defaults for the
//! transcendental functions; their stated departures for softmax and log-softmax), plus, for sums
//! and means, the accumulation term `(⌈log2 n⌉ + 2)·2^-24·Σ|x|`. Copies (`contiguous`, `copy_`) are
//! exact.

use super::cases::{Binary, Case, Op, Reduce, Unary};
use cudasem::DType;
use half::{bf16, f16};

#[path = "../../../../tests/tensor_util/tolerance.rs"]
mod table;
pub use table::f32_odd;

/// How close a result must be: `|g − w| ≤ rel·|w| + abs` (both 0: exactly equal).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tol {
    /// Relative to the reference.
    pub rel: f64,
    /// Absolute.
    pub abs: f64,
}

impl Tol {
    /// Equality.
    pub const EXACT: Tol = Tol { rel: 0.0, abs: 0.0 };

    /// Whether `got` is close enough to `want` (NaN matches NaN, an infinity only itself).
    pub fn accepts(self, got: f64, want: f64) -> bool {
        table::close(got, want, self.rel, self.abs, 0.0)
    }
}

/// The name the tests' table knows `case`'s op by (`None`: a copy, exact).
fn table_name(case: &Case) -> Option<String> {
    Some(match case.op {
        Op::Unary(u) => u.name().to_string(),
        Op::Binary(b) if case.layout == super::cases::Layout::Scalar => format!("{}_number", b.name()),
        Op::Binary(b) => b.name().to_string(),
        Op::Where => "where".into(),
        Op::Cast(_) => "cast".into(),
        Op::Reduce(Reduce::Sum, _) if !case.dtype.is_float() => "sum_of_integers".into(),
        Op::Reduce(r, _) => r.name().to_string(),
        Op::Softmax { log: false, .. } => "softmax".into(),
        Op::Softmax { log: true, .. } => "log_softmax".into(),
        Op::Matmul => "matmul".into(),
        Op::Contiguous | Op::Copy => return None,
    })
}

/// The tolerance of `case`'s (first) output against its rounded reference.
pub fn tolerance(case: &Case) -> Tol {
    match table_name(case) {
        Some(op) => {
            let (rel, abs) = table::tolerance(&op, case.out_dtype());
            Tol { rel, abs }
        }
        None => Tol::EXACT,
    }
}

/// `w` rounded to `dtype` (as the result is stored): floats to nearest even, others as they are.
pub fn round(dtype: DType, w: f64) -> f64 {
    if dtype.is_float() {
        cast(dtype, w, true)
    } else {
        w
    }
}

/// The error function, for GELU (libm's, accurate to an ulp).
fn erf(x: f64) -> f64 {
    libm::erf(x)
}

/// `u(x)` in f64.
pub fn unary(u: Unary, x: f64) -> f64 {
    match u {
        Unary::Neg => -x,
        Unary::Abs => x.abs(),
        Unary::Exp => x.exp(),
        Unary::Log => x.ln(),
        Unary::Sqrt => x.sqrt(),
        Unary::Rsqrt => 1.0 / x.sqrt(),
        Unary::Sin => x.sin(),
        Unary::Cos => x.cos(),
        Unary::Tanh => x.tanh(),
        Unary::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        Unary::Relu => x.max(0.0),
        Unary::Gelu => 0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2)),
    }
}

/// `x b y` in f64 (comparisons give 0 or 1).
pub fn binary(b: Binary, x: f64, y: f64) -> f64 {
    let bool = |v: bool| f64::from(u8::from(v));
    match b {
        Binary::Add => x + y,
        Binary::Sub => x - y,
        Binary::Mul => x * y,
        Binary::Div => x / y,
        Binary::Maximum => x.max(y),
        Binary::Minimum => x.min(y),
        Binary::Pow => x.powf(y),
        Binary::Eq => bool(x == y),
        Binary::Ne => bool(x != y),
        Binary::Lt => bool(x < y),
        Binary::Le => bool(x <= y),
        Binary::Gt => bool(x > y),
        Binary::Ge => bool(x >= y),
    }
}

/// `x` converted to `to` and read back: floats rounded to nearest even, floats into integers
/// truncated toward zero, integers into narrower integers wrapped.
pub fn cast(to: DType, x: f64, from_float: bool) -> f64 {
    match to {
        DType::F64 => x,
        DType::F32 => f64::from(x as f32),
        DType::BF16 => bf16::from_f32(f32_odd(x)).to_f64(),
        DType::F16 => f16::from_f32(f32_odd(x)).to_f64(),
        _ if from_float => x.trunc(),
        DType::I32 => f64::from(x as i64 as i32),
        DType::U8 => f64::from(x as i64 as u8),
        DType::Bool => f64::from(u8::from(x != 0.0)),
        DType::I64 => x,
    }
}

/// A reduction's running state over the values pushed, in order.
#[derive(Debug, Clone, Copy)]
pub struct Acc {
    sum: f64,
    abs: f64,
    best: f64,
    at: usize,
    n: usize,
}

impl Default for Acc {
    fn default() -> Acc {
        Acc { sum: 0.0, abs: 0.0, best: f64::NAN, at: 0, n: 0 }
    }
}

impl Acc {
    /// Adds `x`, the element of index `k` along the reduced dims; `max` picks what `best` tracks.
    pub fn push(&mut self, x: f64, k: usize, max: bool) {
        self.sum += x;
        self.abs += x.abs();
        // Strictly better only: the first extreme keeps its index.
        if self.n == 0 || (max && x > self.best) || (!max && x < self.best) {
            self.best = x;
            self.at = k;
        }
        self.n += 1;
    }

    /// The value of `r` over what was pushed (indices as numbers), rounded to `out`, and Σ|x| of
    /// its terms (a mean's divided by n) for the accumulation allowance.
    pub fn result(&self, r: Reduce, out: DType) -> (f64, f64) {
        let n = self.n.max(1) as f64;
        match r {
            Reduce::Sum => (round(out, self.sum), self.abs),
            Reduce::Mean => (round(out, self.sum / n), self.abs / n),
            Reduce::Amax | Reduce::Amin | Reduce::MaxDim | Reduce::MinDim => (self.best, 0.0),
            Reduce::Argmax | Reduce::Argmin => (self.at as f64, 0.0),
        }
    }

    /// How many values were pushed.
    pub fn len(&self) -> usize {
        self.n
    }
}

/// The allowance of a sum of `n` terms in `dtype` whose magnitudes add up to `abs_sum`.
pub fn accumulation(dtype: DType, n: usize, abs_sum: f64) -> f64 {
    table::accumulation(dtype, n) * abs_sum
}

/// Whether `r` tracks the maximum (else the minimum; sums track either).
pub fn tracks_max(r: Reduce) -> bool {
    matches!(r, Reduce::Amax | Reduce::Argmax | Reduce::MaxDim)
}

/// Softmax (or log-softmax) of one row, rounded to `dtype`.
pub fn softmax(row: &[f64], log: bool, dtype: DType) -> Vec<f64> {
    let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = row.iter().map(|&x| (x - max).exp()).sum();
    if log {
        let lse = sum.ln();
        row.iter().map(|&x| round(dtype, x - max - lse)).collect()
    } else {
        row.iter().map(|&x| round(dtype, (x - max).exp() / sum)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::cases::Layout;
    use super::*;

    #[test]
    fn references_match_known_values() {
        assert!((unary(Unary::Gelu, 1.0) - 0.841_344_746_068_542_9).abs() < 1e-15);
        assert!((unary(Unary::Gelu, -3.0) + 0.004_049_694_094_890_31).abs() < 1e-15);
        assert_eq!(unary(Unary::Sigmoid, 0.0), 0.5);
        assert_eq!(unary(Unary::Rsqrt, 4.0), 0.5);
        assert_eq!(binary(Binary::Pow, 2.0, -1.0), 0.5);
        assert_eq!((binary(Binary::Le, 1.0, 1.0), binary(Binary::Lt, 1.0, 1.0)), (1.0, 0.0));
        // 1 + 2^-8 is halfway between two bf16 numbers: to the even one, 1.0.
        assert_eq!(cast(DType::BF16, 1.0 + 1.0 / 256.0, true), 1.0);
        assert_eq!(cast(DType::BF16, 1.0 + 3.0 / 256.0, true), 1.0 + 4.0 / 256.0);
        assert_eq!(cast(DType::I32, -2.75, true), -2.0);
        assert_eq!(cast(DType::F16, 65520.0, true), f64::INFINITY);
        assert_eq!((round(DType::F16, 1.0 + 1e-4), round(DType::I64, 7.0)), (1.0, 7.0));
    }

    #[test]
    fn reductions_keep_the_first_extreme_and_their_magnitudes() {
        let mut acc = Acc::default();
        for (k, x) in [1.0, 3.0, -2.0, 3.0].into_iter().enumerate() {
            acc.push(x, k, true);
        }
        assert_eq!(acc.result(Reduce::Argmax, DType::I64), (1.0, 0.0));
        assert_eq!(acc.result(Reduce::Amax, DType::F32), (3.0, 0.0));
        assert_eq!(acc.result(Reduce::Sum, DType::F32), (5.0, 9.0));
        assert_eq!(acc.result(Reduce::Mean, DType::F32), (1.25, 2.25));
        assert_eq!(acc.len(), 4);
        let mut min = Acc::default();
        for (k, x) in [2.0, -1.0, -1.0].into_iter().enumerate() {
            min.push(x, k, false);
        }
        assert_eq!(min.result(Reduce::Argmin, DType::I64).0, 1.0);
        assert!(accumulation(DType::F32, 4096, 1.0) > 0.0 && accumulation(DType::I64, 4096, 1.0) == 0.0);
    }

    #[test]
    fn softmax_rows_sum_to_one_and_tolerances_come_from_the_tests_table() {
        let s = softmax(&[1.0, 2.0, 3.0, 1e4], false, DType::F32);
        assert!(s[3] == 1.0 && s[0] == 0.0);
        let s = softmax(&[0.0, 0.0], true, DType::F64);
        assert!((s[0] + std::f64::consts::LN_2).abs() < 1e-15);
        let case = |op, dtype, layout| tolerance(&Case::new(op, dtype, layout));
        assert_eq!(case(Op::Binary(Binary::Add), DType::BF16, Layout::Contig), Tol::EXACT);
        assert_eq!(case(Op::Contiguous, DType::F32, Layout::Transposed), Tol::EXACT);
        assert_eq!(
            case(Op::Reduce(Reduce::Sum, super::super::cases::Axis::All), DType::I32, Layout::Contig),
            Tol::EXACT
        );
        let exp = case(Op::Unary(Unary::Exp), DType::BF16, Layout::Contig);
        assert!(exp.accepts(1.01, 1.0) && !exp.accepts(1.02, 1.0));
        let mul = case(Op::Binary(Binary::Mul), DType::F32, Layout::Scalar);
        assert!(mul.rel > 0.0, "a tensor and a number: one rounding more");
        let sm = case(Op::Softmax { log: false, row: 128 }, DType::F32, Layout::Contig);
        assert!(sm.accepts(1e-4 * (1.0 + 5e-6), 1e-4) && !sm.accepts(1e-4 * 1.001, 1e-4));
        assert!(Tol::EXACT.accepts(f64::NAN, f64::NAN) && !Tol::EXACT.accepts(1.0, 1.0 + 4e-16));
    }
}
