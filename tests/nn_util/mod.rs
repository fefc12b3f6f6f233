//! What the `nn::functional` tests share: the dtypes they run, each dtype's tolerance for a fused
//! op's one rounding, and random tensors with their float64 values.
#![allow(dead_code)]

use crate::tensor_util::{sample, tensor, Domain, Rng};
use cudasem::{DType, Device, Result, Tensor};

pub const FLOATS: [DType; 4] = [DType::F32, DType::BF16, DType::F16, DType::F64];

/// `(rtol, atol)` of a fused op's result in `dtype` (accumulated in `float`, rounded once).
pub fn tol(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::BF16 => (1.6e-2, 1.6e-2),
        DType::F16 => (2e-3, 2e-3),
        DType::F32 => (1e-4, 1e-4),
        _ => (1e-10, 1e-10),
    }
}

#[track_caller]
pub fn assert_near(got: &[f64], want: &[f64], dtype: DType, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let (rtol, atol) = tol(dtype);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = (g - w).abs() <= atol + rtol * w.abs() || (g.is_nan() && w.is_nan());
        assert!(ok, "{what}: element {i}: got {g}, want {w} ({dtype})");
    }
}

pub fn rand_tensor(rng: &mut Rng, shape: &[usize], dtype: DType, device: Device) -> Result<(Vec<f64>, Tensor)> {
    let n = shape.iter().product();
    let v = sample(rng, dtype, n, Domain::Any);
    let t = tensor(&v, shape, dtype, device)?;
    Ok((v, t))
}
