//! The GPT block rows, beside the same block in `bench/pytorch_attention.py` with PyTorch's fused
//! ops: a pre-LN transformer block in bf16 written as a user writes it with
//! `cudasem::nn::functional` — `h = x + W_o · sdpa_causal(split_heads(W_qkv · ln1(x)))`,
//! `y = h + W_2 · gelu_tanh(W_1 · ln2(h))` (biases on every linear) — device ms per block for
//! `B8 T1024 D1024 H16` and `B1 T2048 D2048 H16` (`--quick`, and the simulated machine: `B2 T32
//! D64 H4` and `B1 T64 D128 H4`). Before it is timed, the block's output at the first positions
//! of the first sequence (which causal attention lets depend on those positions only) is checked
//! against a float64 host reference over the same bf16 weights.

use super::long_rows::host;
use super::measure::{check, event_ms, Sizes, StepResult};
use cudasem::nn::functional as F;
use cudasem::{DType, Tensor};

/// The block's weights (bf16; linear weights `[out, in]`).
struct Block {
    ln1: (Tensor, Tensor),
    qkv: (Tensor, Tensor),
    proj: (Tensor, Tensor),
    ln2: (Tensor, Tensor),
    fc1: (Tensor, Tensor),
    fc2: (Tensor, Tensor),
    heads: usize,
}

/// `randn(shape) · scale + shift` in bf16 on the current device.
fn param(shape: &[usize], scale: f64, shift: f64) -> cudasem::Result<Tensor> {
    Tensor::randn(shape, DType::F32, "cuda")?.mul(scale)?.add(shift)?.to_dtype(DType::BF16)
}

impl Block {
    fn new(d: usize, heads: usize) -> cudasem::Result<Block> {
        let lin = |o: usize, i: usize| -> cudasem::Result<(Tensor, Tensor)> {
            Ok((param(&[o, i], 1.0 / (i as f64).sqrt(), 0.0)?, param(&[o], 0.02, 0.0)?))
        };
        let ln = || -> cudasem::Result<(Tensor, Tensor)> { Ok((param(&[d], 0.1, 1.0)?, param(&[d], 0.1, 0.0)?)) };
        Ok(Block {
            ln1: ln()?,
            qkv: lin(3 * d, d)?,
            proj: lin(d, d)?,
            ln2: ln()?,
            fc1: lin(4 * d, d)?,
            fc2: lin(d, 4 * d)?,
            heads,
        })
    }

    /// The block on `x` (`[B, T, D]`).
    fn forward(&self, x: &Tensor) -> cudasem::Result<Tensor> {
        let (b, t, d) = (x.shape()[0], x.shape()[1], x.shape()[2]);
        let (h, e) = (self.heads as isize, (d / self.heads) as isize);
        let a = F::layer_norm(x, &[d], Some(&self.ln1.0), Some(&self.ln1.1), 1e-5)?;
        let qkv = F::linear(&a, &self.qkv.0, Some(&self.qkv.1))?;
        let qkv = qkv.view([b as isize, t as isize, 3, h, e])?.permute(&[2, 0, 3, 1, 4])?;
        let part = |i: usize| qkv.narrow(0, i, 1)?.squeeze_dim(0);
        let att = F::scaled_dot_product_attention(&part(0)?, &part(1)?, &part(2)?, None, 0.0, true, None, false)?;
        // A view, no copy: the attention output is [B, T, H, E] memory (PyTorch's layout).
        let att = att.transpose(1, 2)?.reshape([b, t, d])?;
        let h1 = x.add(&F::linear(&att, &self.proj.0, Some(&self.proj.1))?)?;
        let m = F::layer_norm(&h1, &[d], Some(&self.ln2.0), Some(&self.ln2.1), 1e-5)?;
        let m = F::gelu(&F::linear(&m, &self.fc1.0, Some(&self.fc1.1))?, "tanh")?;
        h1.add(&F::linear(&m, &self.fc2.0, Some(&self.fc2.1))?)
    }
}

/// Float64 helpers of the reference: rows of `n` values.
fn layer_norm(x: &[f64], n: usize, (w, b): &(Vec<f32>, Vec<f32>)) -> Vec<f64> {
    x.chunks(n)
        .flat_map(|r| {
            let mean = r.iter().sum::<f64>() / n as f64;
            let var = r.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64;
            let inv = 1.0 / (var + 1e-5).sqrt();
            r.iter().enumerate().map(move |(i, v)| (v - mean) * inv * w[i] as f64 + b[i] as f64).collect::<Vec<_>>()
        })
        .collect()
}

fn linear(x: &[f64], n_in: usize, (w, b): &(Vec<f32>, Vec<f32>)) -> Vec<f64> {
    let n_out = b.len();
    x.chunks(n_in)
        .flat_map(|r| {
            (0..n_out).map(move |o| {
                r.iter().zip(&w[o * n_in..(o + 1) * n_in]).map(|(a, &c)| a * c as f64).sum::<f64>() + b[o] as f64
            })
        })
        .collect()
}

fn gelu_tanh(v: f64) -> f64 {
    0.5 * v * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v)).tanh())
}

/// The block's output for the first `p` positions of sequence 0 (`x0`: their inputs), in f64.
fn reference(blk: &Block, x0: &[f64], p: usize, d: usize) -> cudasem::Result<Vec<f64>> {
    let hw = |t: &(Tensor, Tensor)| -> cudasem::Result<(Vec<f32>, Vec<f32>)> { Ok((host(&t.0)?, host(&t.1)?)) };
    let qkv = linear(&layer_norm(x0, d, &hw(&blk.ln1)?), d, &hw(&blk.qkv)?);
    let (h, e) = (blk.heads, d / blk.heads);
    let mut att = vec![0.0; p * d];
    for head in 0..h {
        let at = |pos: usize, which: usize, i: usize| qkv[pos * 3 * d + which * d + head * e + i];
        for i in 0..p {
            let sc: Vec<f64> =
                (0..=i).map(|j| (0..e).map(|c| at(i, 0, c) * at(j, 1, c)).sum::<f64>() / (e as f64).sqrt()).collect();
            let top = sc.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let wts: Vec<f64> = sc.iter().map(|s| (s - top).exp()).collect();
            let tot: f64 = wts.iter().sum();
            for c in 0..e {
                att[i * d + head * e + c] = (0..=i).map(|j| wts[j] * at(j, 2, c)).sum::<f64>() / tot;
            }
        }
    }
    let h1: Vec<f64> = linear(&att, d, &hw(&blk.proj)?).iter().zip(x0).map(|(a, b)| a + b).collect();
    let m: Vec<f64> =
        linear(&layer_norm(&h1, d, &hw(&blk.ln2)?), d, &hw(&blk.fc1)?).into_iter().map(gelu_tanh).collect();
    Ok(linear(&m, 4 * d, &hw(&blk.fc2)?).iter().zip(&h1).map(|(a, b)| a + b).collect())
}

/// One row: the block of `(B, T, D, H)`, checked, then timed.
fn block_row(s: &Sizes, name: &'static str, (b, t, d, heads): (usize, usize, usize, usize)) -> StepResult {
    let blk = Block::new(d, heads)?;
    let x = Tensor::randn([b, t, d], DType::BF16, "cuda")?;
    let y = blk.forward(&x)?;
    let p = t.min(8);
    let x0: Vec<f64> = host(&x.narrow(0, 0, 1)?.narrow(1, 0, p)?)?.into_iter().map(f64::from).collect();
    let y0 = host(&y.narrow(0, 0, 1)?.narrow(1, 0, p)?)?;
    let want = reference(&blk, &x0, p, d)?;
    for (i, (&g, &w)) in y0.iter().zip(&want).enumerate() {
        let g = g as f64;
        check((g - w).abs() <= 6e-2 * (1.0 + w.abs()), || {
            format!("{name} position {} [{}]: {g} vs {w}", i / d, i % d)
        })?;
    }
    drop(y);
    Ok(vec![(name, event_ms(s.warmup, s.runs, s.reps, || blk.forward(&x).map(drop))?)])
}

/// `e2e_gpt_block_bf16_b8_t1024_d1024_h16`, `e2e_gpt_block_bf16_b1_t2048_d2048_h16`.
pub fn rows(s: &Sizes) -> StepResult {
    let shapes = if s.quick { [(2, 32, 64, 4), (1, 64, 128, 4)] } else { [(8, 1024, 1024, 16), (1, 2048, 2048, 16)] };
    let mut out = block_row(s, "e2e_gpt_block_bf16_b8_t1024_d1024_h16", shapes[0])?;
    out.extend(block_row(s, "e2e_gpt_block_bf16_b1_t2048_d2048_h16", shapes[1])?);
    Ok(out)
}
