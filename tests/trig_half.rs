//! The half-type `sin` and `cos` of the elementwise kernels (`cu/trig_half.cu`, which the CUDA
//! driver's modules of a half-type `sin` / `cos` start with), checked on every f16 and every bf16
//! value against float64: the file is compiled as a jiterator function — by the host's C++
//! compiler on the simulated machine, by NVRTC on a GPU — so the same text runs on both. Each
//! result, rounded once from float into the half type, is within one ulp of the half type of the
//! correctly rounded value (and equal to it for all but a few inputs), NaN exactly where float64
//! gives NaN, and `sin` keeps the sign of zero. On a GPU, the `sin` / `cos` ops themselves are
//! checked against the same references (what the kernels compute there: these functions).

use cudasem::cuda::jiterator;
use cudasem::{DType, Result, Tensor};
use half::{bf16, f16};

const TRIG: &str = include_str!("../src/driver/cuda/kernels/cu/trig_half.cu");

/// Every value of `dtype` (f16 or bf16) as f64, NaNs included.
fn every(dtype: DType) -> Vec<f64> {
    (0..=u16::MAX)
        .map(|b| if dtype == DType::F16 { f16::from_bits(b).to_f64() } else { bf16::from_bits(b).to_f64() })
        .collect()
}

/// `v` rounded to `dtype` and its ulp there (the spacing above its magnitude).
fn round_and_ulp(v: f64, dtype: DType) -> (f64, f64) {
    if dtype == DType::F16 {
        let h = f16::from_f64(v);
        let up = f16::from_bits((h.to_bits() & 0x7fff) + 1).to_f64();
        (h.to_f64(), up - h.to_f64().abs())
    } else {
        let h = bf16::from_f64(v);
        let up = bf16::from_bits((h.to_bits() & 0x7fff) + 1).to_f64();
        (h.to_f64(), up - h.to_f64().abs())
    }
}

/// Checks `got` (from `xs`) against `f` in float64: returns how many differ from the correctly
/// rounded value (each by one ulp at most).
fn check(xs: &[f64], got: &[f64], dtype: DType, name: &str, f: fn(f64) -> f64) -> usize {
    let mut off = 0;
    for (&x, &g) in xs.iter().zip(got) {
        let want = f(x);
        if want.is_nan() {
            assert!(g.is_nan(), "{name}({x}) {dtype:?}: {g}, want NaN");
            continue;
        }
        let (r, ulp) = round_and_ulp(want, dtype);
        if g != r {
            off += 1;
            assert!((g - r).abs() <= ulp, "{name}({x}) {dtype:?}: {g}, want {r} (float64 {want}, ulp {ulp})");
        }
        if name == "sin" && x == 0.0 {
            assert_eq!(g.is_sign_negative(), x.is_sign_negative(), "sin({x}) keeps the sign of zero");
        }
    }
    off
}

fn run(code: &str, dtype: DType, xs: &[f64]) -> Result<Vec<f64>> {
    let f = jiterator::create_jit_fn(code, &[])?;
    let x = Tensor::from_slice(xs, vec![xs.len()], "cuda")?.to_dtype(dtype)?;
    let out = f.call(&[&x], &[])?;
    assert_eq!(out.dtype(), dtype);
    out.to_dtype(DType::F64)?.to_vec::<f64>()
}

#[test]
fn every_half_value_s_sin_and_cos_is_within_an_ulp_of_float64() -> Result<()> {
    for (dtype, sin, cos) in [(DType::F16, "sin_small", "cos_small"), (DType::BF16, "sin_wide", "cos_wide")] {
        let xs = every(dtype);
        let s = run(&format!("{TRIG}\ntemplate <typename T> T half_sin(T x) {{ return {sin}(x); }}"), dtype, &xs)?;
        let c = run(&format!("{TRIG}\ntemplate <typename T> T half_cos(T x) {{ return {cos}(x); }}"), dtype, &xs)?;
        let (so, co) = (check(&xs, &s, dtype, "sin", f64::sin), check(&xs, &c, dtype, "cos", f64::cos));
        // A float result within a few float ulps rounds to the correctly rounded half value
        // unless float64's value lies that close to a rounding midpoint: rare.
        assert!(so + co <= 16, "{dtype:?}: {so} sin and {co} cos results off by an ulp");
        eprintln!("{dtype:?}: {so} sin and {co} cos of 65536 values one ulp from the correctly rounded");
    }
    Ok(())
}

#[test]
fn the_sin_and_cos_ops_of_half_types_agree_with_float64_on_every_value() -> Result<()> {
    for dtype in [DType::F16, DType::BF16] {
        let xs = every(dtype);
        let x = Tensor::from_slice(&xs, vec![xs.len()], "cuda")?.to_dtype(dtype)?;
        let s = x.sin()?.to_dtype(DType::F64)?.to_vec::<f64>()?;
        let c = x.cos()?.to_dtype(DType::F64)?.to_vec::<f64>()?;
        let (so, co) = (check(&xs, &s, dtype, "sin", f64::sin), check(&xs, &c, dtype, "cos", f64::cos));
        assert!(so + co <= 16, "{dtype:?}: {so} sin and {co} cos results off by an ulp");
    }
    Ok(())
}
