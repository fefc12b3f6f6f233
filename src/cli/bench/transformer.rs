//! The transformer-op rows, beside PyTorch's fused ops in `bench/pytorch_attention.py`: device ms
//! per call of [`scaled_dot_product_attention`](cudasem::nn::functional::scaled_dot_product_attention)
//! (causal prefill and one-query decode) and of `layer_norm` / `rms_norm` over bf16 rows, each
//! result checked against a float64 host reference on sampled rows before it is timed. CUDA
//! driver only (the simulated machine's CPU kernels are references, not timed figures).

use super::measure::{check, event_ms, Sizes, StepResult, Stop};
use cudasem::nn::functional as F;
use cudasem::{cuda, DType, Tensor};

fn cuda_only() -> Result<(), Stop> {
    if cuda::driver_name() != "cuda" {
        return Err(Stop::Skip(format!("timed on the CUDA driver only (this is the {} driver)", cuda::driver_name())));
    }
    Ok(())
}

fn host(t: &Tensor) -> cudasem::Result<Vec<f32>> {
    t.to_dtype(DType::F32)?.to_vec::<f32>()
}

/// Checks query rows `rows` of head (0, 0) of an attention output against float64.
#[allow(clippy::too_many_arguments)]
fn check_sdpa(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &[f32],
    l: usize,
    s: usize,
    e: usize,
    causal: bool,
) -> Result<(), Stop> {
    let scale = 1.0 / (e as f64).sqrt();
    for i in [0, l / 2, l - 1] {
        let sc: Vec<f64> = (0..s)
            .map(|j| {
                if causal && j > i {
                    return f64::NEG_INFINITY;
                }
                (0..e).map(|d| q[i * e + d] as f64 * k[j * e + d] as f64).sum::<f64>() * scale
            })
            .collect();
        let m = sc.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
        let tot: f64 = w.iter().sum();
        for d in 0..e {
            let want = (0..s).map(|j| w[j] * v[j * e + d] as f64).sum::<f64>() / tot;
            let got = out[i * e + d] as f64;
            check((got - want).abs() <= 2e-2 * (1.0 + want.abs()), || format!("sdpa row {i} [{d}]: {got} vs {want}"))?;
        }
    }
    Ok(())
}

fn sdpa_row(s: &Sizes, name: &'static str, shape: (usize, usize, usize, usize, usize), causal: bool) -> StepResult {
    let (b, h, l, sk, e) = shape;
    let q = Tensor::randn([b, h, l, e], DType::BF16, "cuda")?;
    let k = Tensor::randn([b, h, sk, e], DType::BF16, "cuda")?;
    let v = Tensor::randn([b, h, sk, e], DType::BF16, "cuda")?;
    let run = || F::scaled_dot_product_attention(&q, &k, &v, None, 0.0, causal, None, false);
    let out = run()?;
    let (qh, kh, vh, oh) = (host(&q)?, host(&k)?, host(&v)?, host(&out)?);
    check_sdpa(&qh[..l * e], &kh[..sk * e], &vh[..sk * e], &oh[..l * e], l, sk, e, causal)?;
    let ms = event_ms(s.warmup, s.runs, s.reps, || run().map(drop))?;
    Ok(vec![(name, ms)])
}

/// `sdpa_bf16_causal_b8_h16_t1024_e64`, `sdpa_bf16_causal_b1_h32_t4096_e128`,
/// `sdpa_decode_bf16_b8_h32_s8192_e128`, `sdpa_bf16_b4_h16_t2048_e128` (not causal: an encoder's or
/// a padded prefill's every query over every key).
pub fn sdpa(s: &Sizes) -> StepResult {
    cuda_only()?;
    let mut out = sdpa_row(s, "sdpa_bf16_causal_b8_h16_t1024_e64", (8, 16, 1024, 1024, 64), true)?;
    out.extend(sdpa_row(s, "sdpa_bf16_causal_b1_h32_t4096_e128", (1, 32, 4096, 4096, 128), true)?);
    out.extend(sdpa_row(s, "sdpa_decode_bf16_b8_h32_s8192_e128", (8, 32, 1, 8192, 128), false)?);
    out.extend(sdpa_row(s, "sdpa_bf16_b4_h16_t2048_e128", (4, 16, 2048, 2048, 128), false)?);
    Ok(out)
}

/// `layer_norm_bf16_8192x4096`, `rms_norm_bf16_8192x4096` (weight and bias given; eps 1e-5).
pub fn norms(s: &Sizes) -> StepResult {
    cuda_only()?;
    let (rows, n) = (8192, 4096);
    let x = Tensor::randn([rows, n], DType::BF16, "cuda")?;
    let w = Tensor::randn([n], DType::BF16, "cuda")?;
    let bias = Tensor::randn([n], DType::BF16, "cuda")?;
    let (xh, wh, bh) = (host(&x)?, host(&w)?, host(&bias)?);
    let mut out = Vec::new();
    for rms in [false, true] {
        let run = || {
            if rms {
                F::rms_norm(&x, &[n], Some(&w), Some(1e-5))
            } else {
                F::layer_norm(&x, &[n], Some(&w), Some(&bias), 1e-5)
            }
        };
        let y = host(&run()?)?;
        for r in [0, rows / 2, rows - 1] {
            let row = &xh[r * n..(r + 1) * n];
            let mean = if rms { 0.0 } else { row.iter().map(|&v| v as f64).sum::<f64>() / n as f64 };
            let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n as f64;
            for c in [0, 1, n / 2, n - 1] {
                let b = if rms { 0.0 } else { bh[c] as f64 };
                let want = (row[c] as f64 - mean) / (var + 1e-5).sqrt() * wh[c] as f64 + b;
                let got = y[r * n + c] as f64;
                check((got - want).abs() <= 2e-2 * (1.0 + want.abs()), || format!("norm [{r}, {c}]: {got} vs {want}"))?;
            }
        }
        let ms = event_ms(s.warmup, s.runs, s.reps, || run().map(drop))?;
        out.push((if rms { "rms_norm_bf16_8192x4096" } else { "layer_norm_bf16_8192x4096" }, ms));
    }
    Ok(out)
}
