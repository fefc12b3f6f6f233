//! The vocabulary rows, beside PyTorch's in `bench/pytorch_attention.py`: device ms per call of a
//! softmax over a few vocabulary-length rows (the decode loop's sampler, `softmax_f32_8x50257`;
//! `log_softmax_bf16_1x128256`) and of the lm-head pattern (`lm_head_bf16_8192x1024x50257`: a
//! bf16 product with an odd vocabulary, then `log_softmax` of its `f32` copy, PyTorch's
//! `F.log_softmax((x @ w).float(), -1)`), each result checked against a float64 host reference
//! on sampled rows before it is timed. The softmax rows run at full size everywhere; the lm-head
//! is `[64, 128] @ [128, 1001]` with `--quick` (and on the simulated machine, whose CPU kernels
//! are references rather than timed figures).

use super::measure::{check, event_ms, Sizes, StepResult, Stop};
use cudasem::{DType, Tensor};

/// The rows' tensors in `f32` on the host.
pub(super) fn host(t: &Tensor) -> cudasem::Result<Vec<f32>> {
    t.to_dtype(DType::F32)?.to_vec::<f32>()
}

/// Float64 log-softmax of one row.
fn log_softmax(row: &[f64]) -> Vec<f64> {
    let top = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let lse = top + row.iter().map(|v| (v - top).exp()).sum::<f64>().ln();
    row.iter().map(|v| v - lse).collect()
}

/// Checks `got` (rows of `n`) against float64 `(log_)softmax` of `x`'s rows `rows`, each element
/// within `rel · |want| + abs`.
fn check_rows(x: &[f32], got: &[f32], n: usize, rows: &[usize], log: bool, tol: (f64, f64)) -> Result<(), Stop> {
    for &r in rows {
        let row: Vec<f64> = x[r * n..(r + 1) * n].iter().map(|&v| v as f64).collect();
        let want = log_softmax(&row);
        for (j, w) in want.into_iter().enumerate() {
            let w = if log { w } else { w.exp() };
            let g = got[r * n + j] as f64;
            check((g - w).abs() <= tol.0 * w.abs() + tol.1, || format!("row {r} [{j}]: {g} vs {w}"))?;
        }
    }
    Ok(())
}

/// `softmax_f32_8x50257`, `log_softmax_bf16_1x128256`.
pub fn softmax_rows(s: &Sizes) -> StepResult {
    let mut out = Vec::new();
    for (name, rows, n, dtype, log) in [
        ("softmax_f32_8x50257", 8, 50257, DType::F32, false),
        ("log_softmax_bf16_1x128256", 1, 128256, DType::BF16, true),
    ] {
        let x = Tensor::randn([rows, n], DType::F32, "cuda")?.mul(2.0)?.to_dtype(dtype)?;
        let run = || if log { x.log_softmax(-1) } else { x.softmax(-1) };
        let (xh, yh) = (host(&x)?, host(&run()?)?);
        // f32: the tolerance of the tests' softmax family; bf16: its rounding of values near -12.
        let tol = if dtype == DType::F32 { (1e-5, 1e-10) } else { (8e-3, 1e-2) };
        let sampled: Vec<usize> = if rows == 1 { vec![0] } else { vec![0, rows / 2, rows - 1] };
        check_rows(&xh, &yh, n, &sampled, log, tol)?;
        out.push((name, event_ms(s.warmup, s.runs, s.reps, || run().map(drop))?));
    }
    Ok(out)
}

/// `(rows, width, vocabulary)` of the lm-head row: full, or `--quick`'s.
fn lm_shape(s: &Sizes) -> (usize, usize, usize) {
    if s.quick {
        (64, 128, 1001)
    } else {
        (8192, 1024, 50257)
    }
}

/// `lm_head_bf16_8192x1024x50257`: `log_softmax(f32(x @ w), -1)` with `x` of N(0, 1) and `w` of
/// N(0, 1/width) (logits of unit scale), three rows checked against float64 over the bf16 inputs
/// (the logits' bf16 rounding, a few thousandths, is the tolerance).
pub fn lm_head(s: &Sizes) -> StepResult {
    let (m, k, n) = lm_shape(s);
    let x = Tensor::randn([m, k], DType::BF16, "cuda")?;
    let w = Tensor::randn([k, n], DType::F32, "cuda")?.mul(1.0 / (k as f64).sqrt())?.to_dtype(DType::BF16)?;
    let run = || x.matmul(&w)?.to_dtype(DType::F32)?.log_softmax(-1);
    let y = run()?;
    let (xh, wh) = (host(&x)?, host(&w)?);
    for r in [0, m / 2, m - 1] {
        let yr = host(&y.narrow(0, r, 1)?)?;
        let mut logits = vec![0f64; n];
        for (l, &a) in xh[r * k..(r + 1) * k].iter().enumerate() {
            for (o, &b) in logits.iter_mut().zip(&wh[l * n..(l + 1) * n]) {
                *o += a as f64 * b as f64;
            }
        }
        for (j, want) in log_softmax(&logits).into_iter().enumerate() {
            let g = yr[j] as f64;
            check((g - want).abs() <= 3e-2 + 4e-3 * want.abs(), || format!("lm-head row {r} [{j}]: {g} vs {want}"))?;
        }
    }
    drop(y);
    Ok(vec![("lm_head_bf16_8192x1024x50257", event_ms(s.warmup, s.runs, s.reps, || run().map(drop))?)])
}
