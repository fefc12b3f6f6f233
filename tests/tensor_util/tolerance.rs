//! The tolerances of every op test, in one place: how far a result may lie from the float64
//! reference rounded to the result's dtype, per op and dtype, and why.
//!
//! A result `g` passes against the reference `w` when `|g - w| <= atol + rtol * |w|`
//! (`torch.testing.assert_close`'s rule); NaN matches NaN and an infinity only itself.
//!
//! The base is `assert_close`'s defaults (`rtol`, `atol`): f32 (1.3e-6, 1e-5), bf16 (1.6e-2, 1e-5),
//! f16 (1e-3, 1e-5); integers and bool exact. For f16 the default `rtol` is one ulp at the bottom
//! of a binade (2^-10 = 9.8e-4), for bf16 two (2^-7 = 7.8e-3 each), for f32 about eleven
//! (2^-23 = 1.2e-7 each). Departures, per family:
//!
//! | family | ops | f64 | f32 | f16 | bf16 | why |
//! |---|---|---|---|---|---|---|
//! | exact | neg abs relu maximum minimum (also with a number) comparisons where casts amax amin max min arg*; add sub mul div sqrt of two tensors; sums of integer-valued data | 0 | 0 | 0 | 0 | the result is an input, its negation, or one correctly rounded IEEE operation (PyTorch computes half types in f32 and rounds once; rounding through f32 first changes nothing, as 24 ≥ 2·11 + 2); integers below 2^24 sum exactly in f32 in any order |
//! | with a number | add sub mul div of a tensor and a number | (1e-12, 1e-12) | default | default | default | PyTorch converts the number to the opmath type (f32 for half types; cudasem to the tensor's dtype) and divides by multiplying with the reciprocal: one rounding more |
//! | transcendental | exp log rsqrt sin cos tanh sigmoid gelu pow | (1e-12, 1e-12) | default | default | default | CUDA's accurate f32 functions are within 1–4 ulp (sigmoid composes exp, an add and a division; erfc ≤ 5 ulp), well inside 11; half types compute in f32 (fast intrinsics allowed: `__expf` is within 2 + 1.16·|x| f32 ulp, still far below half an ulp of f16) and round once, so ≤ 1 ulp of the half type; gelu's erf form (PyTorch's) cancels in `1 + erf(x/√2)` for x < −3: an absolute error of a few f32 ulp, inside `atol` |
//! | softmax | softmax | (1e-12, 2^-1022) | (1e-5, 2^-126) | (1e-3, 2^-23) | (1.6e-2, 2^-126) | outputs are ≤ 1 and of order 1/n: the default `atol` 1e-5 would accept anything on rows longer than 10^5 and most things on a 1024-long row, so `atol` only covers where relative accuracy ends (subnormals, flushed by `__expf`; two subnormal ulp of f16); f32 `rtol` 1e-5 (≈ 80 ulp) covers the exponential (≤ 2 ulp), the f32 row sum (≈ log2 n ulp for a tree, more for an online max/sum that rescales), the reciprocal and product, and `x − max` rounded in f32 (|x − max| · 2^-24 for |x − max| ≤ 88) |
//! | log_softmax | log_softmax | (1e-12, 1e-12) | (1e-5, 1e-5) | default | default | `x − max − log Σ` is a difference of O(1) terms: near 0 (a dominant element) the error is absolute, `atol`; the sum's error enters once through the log |
//! | sum, mean | sum mean | (1e-12, 1e-12) | default | default | default | plus (⌈log2 n⌉ + 2) · u · Σ\|x\| ([`accumulation`]): the error bound of a tree sum in PyTorch's accumulation type (f32 for f32 and half types, u = 2^-24; f64, u = 2^-53), whatever order the kernel picks |
//! | matmul | matmul bmm | 4e-12 | 8e-6 | 8e-3 | 6.4e-2 | relative to Σ\|a·b\| (the scale of the rounding errors), `atol` 1e-12: cuBLAS(Lt) accumulates in f32 (or f64), with split-k and the output rounded once |
//!
//! f64 departs from the default (1e-7, 1e-7) everywhere: a kernel computing f64 in f32 (relative
//! error ≈ 6e-8) would pass it; 1e-12 is still thousands of f64 ulp.
#![allow(dead_code)]

use cudasem::DType;

/// The accuracy families of the table above.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Family {
    Exact,
    WithNumber,
    Transcendental,
    Softmax,
    LogSoftmax,
    Sum,
    Matmul,
}

/// The family of `op` (the tensor method's name; `"<op>_number"` for a tensor and a number,
/// `"cast"`, `"sum_of_integers"`); an unknown name fails the test, so a typo cannot loosen a check.
pub fn family(op: &str) -> Family {
    match op {
        "neg" | "abs" | "relu" | "maximum" | "minimum" | "eq" | "ne" | "lt" | "le" | "gt" | "ge" | "where" | "cast"
        | "amax" | "amin" | "max" | "min" | "argmax" | "argmin" | "add" | "sub" | "mul" | "div" | "sqrt"
        | "maximum_number" | "minimum_number" | "sum_of_integers" => Family::Exact,
        "add_number" | "sub_number" | "mul_number" | "div_number" => Family::WithNumber,
        "exp" | "log" | "rsqrt" | "sin" | "cos" | "tanh" | "sigmoid" | "gelu" | "pow" | "pow_number" => {
            Family::Transcendental
        }
        "softmax" => Family::Softmax,
        "log_softmax" => Family::LogSoftmax,
        "sum" | "mean" => Family::Sum,
        "matmul" | "bmm" => Family::Matmul,
        _ => panic!("no tolerance is stated for {op:?}"),
    }
}

/// `torch.testing.assert_close`'s default `(rtol, atol)` for `dtype`.
pub fn torch_default(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F64 => (1e-7, 1e-7),
        DType::F32 => (1.3e-6, 1e-5),
        DType::F16 => (1e-3, 1e-5),
        DType::BF16 => (1.6e-2, 1e-5),
        _ => (0.0, 0.0),
    }
}

/// `(rtol, atol)` of `op`'s results in `dtype` (see the module's table).
pub fn tolerance(op: &str, dtype: DType) -> (f64, f64) {
    let fam = family(op);
    if !dtype.is_float() || fam == Family::Exact {
        return (0.0, 0.0);
    }
    let two = |e: i32| 2f64.powi(e);
    match (fam, dtype) {
        (Family::Softmax, DType::F64) => (1e-12, two(-1022)),
        (Family::Softmax, DType::F32 | DType::BF16) => (if dtype == DType::F32 { 1e-5 } else { 1.6e-2 }, two(-126)),
        (Family::Softmax, _) => (1e-3, two(-23)),
        (Family::LogSoftmax, DType::F32) => (1e-5, 1e-5),
        (Family::Matmul, DType::F64) => (4e-12, 1e-12),
        (Family::Matmul, DType::F32) => (8e-6, 1e-12),
        (Family::Matmul, DType::F16) => (8e-3, 1e-12),
        (Family::Matmul, _) => (6.4e-2, 1e-12),
        (_, DType::F64) => (1e-12, 1e-12),
        _ => torch_default(dtype),
    }
}

/// The unit roundoff of the type PyTorch accumulates `dtype`'s sums in (f32 for f32, f16 and
/// bf16; f64 for f64).
pub fn accumulation_roundoff(dtype: DType) -> f64 {
    if dtype == DType::F64 {
        2f64.powi(-53)
    } else {
        2f64.powi(-24)
    }
}

/// The factor of Σ|x| a sum of `n` terms in `dtype` may be off by: (⌈log2 n⌉ + 2) · u.
pub fn accumulation(dtype: DType, n: usize) -> f64 {
    if !dtype.is_float() {
        return 0.0;
    }
    ((n.max(1) as f64).log2().ceil() + 2.0) * accumulation_roundoff(dtype)
}

/// Whether `g` passes against `w` with `(rtol, atol)` and an extra absolute allowance `extra`.
pub fn close(g: f64, w: f64, rtol: f64, atol: f64, extra: f64) -> bool {
    if g.is_nan() || w.is_nan() {
        return g.is_nan() && w.is_nan();
    }
    if g.is_infinite() || w.is_infinite() {
        return g == w;
    }
    (g - w).abs() <= atol + rtol * w.abs() + extra
}

/// Asserts `got` matches `want` elementwise with `tolerance(op, dtype)`, plus `extra[i]` absolute
/// (empty: none). A failure names the first mismatches and how many there are.
#[track_caller]
pub fn assert_close_with(got: &[f64], want: &[f64], extra: &[f64], op: &str, dtype: DType, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let (rtol, atol) = tolerance(op, dtype);
    let bad: Vec<usize> =
        (0..got.len()).filter(|&i| !close(got[i], want[i], rtol, atol, extra.get(i).copied().unwrap_or(0.0))).collect();
    if bad.is_empty() {
        return;
    }
    let shown: Vec<String> = bad
        .iter()
        .take(8)
        .map(|&i| format!("[{i}] {} vs {} (diff {:e})", got[i], want[i], (got[i] - want[i]).abs()))
        .collect();
    panic!(
        "{what}: {} of {} elements off (dtype {dtype}, {op}: rtol {rtol:e}, atol {atol:e}); got vs want: {}",
        bad.len(),
        got.len(),
        shown.join(", ")
    );
}

/// Asserts `got` matches `want` elementwise with `tolerance(op, dtype)`.
#[track_caller]
pub fn assert_close(got: &[f64], want: &[f64], op: &str, dtype: DType, what: &str) {
    assert_close_with(got, want, &[], op, dtype, what);
}

/// Asserts sums (or means) `got` match `want` with `tolerance(op, dtype)` plus the accumulation
/// term: `abs_sums[i]` is Σ|x| of output `i` (a mean's: Σ|x| / n), `terms` the number of terms.
#[track_caller]
pub fn assert_sums_close(
    got: &[f64],
    want: &[f64],
    abs_sums: &[f64],
    terms: usize,
    op: &str,
    dtype: DType,
    what: &str,
) {
    let k = accumulation(dtype, terms);
    let extra: Vec<f64> = abs_sums.iter().map(|s| k * s).collect();
    assert_close_with(got, want, &extra, op, dtype, what);
}

/// `x` rounded to `f32` toward odd (toward zero, the last bit set when inexact), so that
/// rounding it again to `f16`/`bf16` is correctly rounded, as the device's conversions are;
/// `half`'s `from_f64` is not (it drops the low 32 bits of the `f64` first). References round
/// `f64` results to the half types through it.
pub fn f32_odd(x: f64) -> f32 {
    let f = x as f32;
    if x.is_nan() || f as f64 == x {
        return f;
    }
    let rz = if f.is_infinite() || (f as f64).abs() > x.abs() { f32::from_bits(f.to_bits() - 1) } else { f };
    f32::from_bits(rz.to_bits() | 1)
}
