//! The float64 CPU reference of every op of the matrix, and the tolerances, in one place.
//!
//! Tolerances (a result `g` against the reference `w`, computed in f64 from the downloaded inputs):
//! * exact (`g == w`): casts (rounded to nearest even, float → integer truncated), comparisons,
//!   `maximum` / `minimum`, `neg` / `abs` / `relu`, `where`, copies, integer arithmetic, `amax` /
//!   `amin` / `max` / `min` values, integer sums and every index (the first extreme, as PyTorch documents);
//! * other elementwise ops: `|g − w| ≤ rel(dtype)·|w| + 1e-5`, with `rel` the rounding of the
//!   output dtype as the tests state it (f32 2e-6, f16 2e-3, bf16 1.6e-2);
//! * sums of floats and means: `rel(dtype)·|w| + 1e-5·Σ|x|` (f32 accumulation, over the summed terms; a
//!   mean divides both by n);
//! * softmax: `(rel(dtype) + 1e-5)·|w|` plus the dtype's subnormal spacing (f16: 2^-24);
//!   log-softmax: `(rel(dtype) + 1e-5)·|w| + 1e-5`.

use super::cases::{Binary, Reduce, Unary};
use cudasem::DType;
use half::{bf16, f16};

/// The relative rounding of results stored in `dtype` (0: exact), the tests' table.
pub fn rel(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-12,
        DType::F32 => 2e-6,
        DType::F16 => 2e-3,
        DType::BF16 => 1.6e-2,
        _ => 0.0,
    }
}

/// The spacing of `dtype`'s subnormal numbers: below its smallest normal number a result is only
/// this exact (f16's is 2^-24 ≈ 6e-8: a softmax over 32,768 columns lives there).
pub fn subnormal_step(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2f64.powi(-24),
        DType::BF16 => 2f64.powi(-133),
        DType::F32 => 2f64.powi(-149),
        _ => 0.0,
    }
}

/// The absolute part of the tolerance of elementwise float results (values of order 1).
pub const ABS: f64 = 1e-5;
/// The relative error of f32 accumulation, over the accumulated magnitudes.
pub const ACCUM: f64 = 1e-5;

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

    /// Whether `got` is close enough to `want` (NaN matches NaN, infinities match themselves).
    pub fn accepts(self, got: f64, want: f64) -> bool {
        got == want || (got.is_nan() && want.is_nan()) || (got - want).abs() <= self.rel * want.abs() + self.abs
    }
}

/// The tolerance of an elementwise op whose result is stored in `out` (`exact` when it is exact).
pub fn elementwise(exact: bool, out: DType) -> Tol {
    if exact || !out.is_float() {
        Tol::EXACT
    } else {
        Tol { rel: rel(out), abs: ABS }
    }
}

/// Whether a unary op's result is exact (one of its input's values, or its negation).
pub fn unary_exact(u: Unary) -> bool {
    matches!(u, Unary::Neg | Unary::Abs | Unary::Relu)
}

/// Whether a binary op's result is exact for operands of `dtype`.
pub fn binary_exact(b: Binary, dtype: DType) -> bool {
    b.is_comparison() || matches!(b, Binary::Maximum | Binary::Minimum) || (!dtype.is_float() && b != Binary::Div)
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
        DType::BF16 => bf16::from_f64(x).to_f64(),
        DType::F16 => f16::from_f64(x).to_f64(),
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

    /// `(value, tolerance)` of `r` over what was pushed, stored in `out` (indices as numbers).
    pub fn result(&self, r: Reduce, out: DType) -> (f64, Tol) {
        let n = self.n.max(1) as f64;
        match r {
            // Integers sum exactly (into i64).
            Reduce::Sum if !out.is_float() => (self.sum, Tol::EXACT),
            Reduce::Sum => (self.sum, Tol { rel: rel(out), abs: ACCUM * self.abs }),
            Reduce::Mean => (self.sum / n, Tol { rel: rel(out), abs: ACCUM * self.abs / n }),
            Reduce::Amax | Reduce::Amin | Reduce::MaxDim | Reduce::MinDim => (self.best, Tol::EXACT),
            Reduce::Argmax | Reduce::Argmin => (self.at as f64, Tol::EXACT),
        }
    }
}

/// Whether `r` tracks the maximum (else the minimum; sums track either).
pub fn tracks_max(r: Reduce) -> bool {
    matches!(r, Reduce::Amax | Reduce::Argmax | Reduce::MaxDim)
}

/// Softmax (or log-softmax) of one row, and the tolerance of results stored in `dtype`.
pub fn softmax(row: &[f64], log: bool, dtype: DType) -> (Vec<f64>, Tol) {
    let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = row.iter().map(|&x| (x - max).exp()).sum();
    let tol = Tol { rel: rel(dtype) + ACCUM, abs: if log { ACCUM } else { subnormal_step(dtype) } };
    let out = if log {
        let lse = sum.ln();
        row.iter().map(|&x| x - max - lse).collect()
    } else {
        row.iter().map(|&x| (x - max).exp() / sum).collect()
    };
    (out, tol)
}

#[cfg(test)]
mod tests {
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
    }

    #[test]
    fn reductions_keep_the_first_extreme_and_bound_the_sum() {
        let mut acc = Acc::default();
        for (k, x) in [1.0, 3.0, -2.0, 3.0].into_iter().enumerate() {
            acc.push(x, k, true);
        }
        assert_eq!(acc.result(Reduce::Argmax, DType::I64).0, 1.0);
        assert_eq!(acc.result(Reduce::Amax, DType::F32), (3.0, Tol::EXACT));
        let (sum, tol) = acc.result(Reduce::Sum, DType::F32);
        assert_eq!(sum, 5.0);
        assert!(tol.accepts(5.0 + 1e-5, sum) && !tol.accepts(5.01, sum));
        assert_eq!(acc.result(Reduce::Sum, DType::I64), (5.0, Tol::EXACT));
        let (mean, _) = acc.result(Reduce::Mean, DType::F32);
        assert_eq!(mean, 1.25);
        let mut min = Acc::default();
        for (k, x) in [2.0, -1.0, -1.0].into_iter().enumerate() {
            min.push(x, k, false);
        }
        assert_eq!(min.result(Reduce::Argmin, DType::I64).0, 1.0);
    }

    #[test]
    fn softmax_rows_sum_to_one_and_tolerances_reject_what_they_should() {
        let (s, _) = softmax(&[1.0, 2.0, 3.0, 1e4], false, DType::F32);
        assert!((s.iter().sum::<f64>() - 1.0).abs() < 1e-15 && s[3] == 1.0);
        let (s, tol) = softmax(&[1.0, 2.0, 3.0], false, DType::F32);
        assert!(tol.accepts(s[2] * (1.0 + 1e-5), s[2]) && !tol.accepts(s[2] * 1.001, s[2]));
        let (_, tol) = softmax(&[1.0], false, DType::F16);
        assert!(tol.accepts(1.2e-5 + 5e-8, 1.2e-5), "an f16 subnormal's spacing");
        let (l, _) = softmax(&[0.0, 0.0], true, DType::BF16);
        assert!((l[0] + std::f64::consts::LN_2).abs() < 1e-15);
        assert!(Tol::EXACT.accepts(f64::NAN, f64::NAN) && !Tol::EXACT.accepts(1.0, 1.0 + 1e-16 * 4.0));
        let t = elementwise(false, DType::BF16);
        assert!(t.accepts(1.01, 1.0) && !t.accepts(1.02, 1.0));
        assert_eq!(elementwise(false, DType::I32), Tol::EXACT);
        assert!(binary_exact(Binary::Add, DType::I64) && !binary_exact(Binary::Div, DType::I32));
    }
}
