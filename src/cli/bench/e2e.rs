//! The end-to-end rows: programs a torch.cuda user writes around the kernels, timed whole, beside the
//! same code in `bench/pytorch_bench.py` (`e2e_mlp_pipeline_bf16`, `e2e_decode_step` there).
//!
//! * `e2e_mlp_pipeline_bf16`: bf16 batches uploaded from pinned memory on a side stream while the
//!   previous batch computes `softmax(f32(gelu(x @ w1) @ w2), -1)` on the current stream, each result
//!   downloaded without blocking into pinned memory: device ms per batch.
//! * `e2e_decode_step`: a decode-like step of ten small ops on a `[1, hidden]` f32 vector (matmul, then
//!   a LayerNorm-like chain ending in gelu and a scale and shift), each step's output the next one's
//!   input: µs per step, launch-bound (host and device both count: events on the stream see the
//!   gaps a slow host leaves).
//!
//! Both check a result against an f64 reference computed here on the host before their timing counts,
//! and once more after it.

use super::measure::{check, event_ms, median, Sizes, StepResult, Stop};
use cudasem::cuda::{self, Event, EventFlags, Stream};
use cudasem::{DType, Tensor};
use half::bf16;

/// Measures one end-to-end step.
pub fn measure(step: &str, s: &Sizes) -> StepResult {
    match step {
        "e2e_mlp_pipeline_bf16" => mlp_pipeline(s),
        "e2e_decode_step" => decode_step(s),
        "e2e_decode_step_graphed" => decode_step_graphed(s),
        other => Err(Stop::Fail(format!("no such figure `{other}`"))),
    }
}

/// PyTorch's exact GELU, `x · Φ(x)`, in f64.
fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2))
}

/// `x` rounded to the nearest bf16 (what a bf16 op's output keeps).
fn round_bf16(x: f64) -> f64 {
    bf16::from_f32(super::ops::reference::f32_odd(x)).to_f64()
}

/// The first index where `got` is not within `tol(want)` of `want` (NaN is never within).
fn first_outside(got: &[f32], want: &[f64], tol: impl Fn(f64) -> f64) -> Option<usize> {
    let within = |g: f32, w: f64| (g as f64 - w).abs() <= tol(w);
    got.iter().zip(want).position(|(&g, &w)| !within(g, w))
}

/// `randn(shape) · scale` as `dtype` on the current device.
fn scaled_randn(shape: &[usize], scale: f64, dtype: DType) -> cudasem::Result<Tensor> {
    Tensor::randn(shape, DType::F32, "cuda")?.mul(scale)?.to_dtype(dtype)
}

/// The pipeline's model, its host buffers and its side stream.
struct Pipeline {
    /// `[hidden, ff]` bf16, entries N(0, 1/hidden).
    w1: Tensor,
    /// `[ff, hidden]` bf16, entries N(0, 1/ff).
    w2: Tensor,
    /// Pinned `[rows, hidden]` bf16 batches, used in turn.
    inputs: Vec<Tensor>,
    /// Pinned `[rows, hidden]` f32 results, written in turn.
    outputs: Vec<Tensor>,
    /// The stream the uploads run on.
    side: Stream,
}

/// Pinned buffers per direction: batch `i` uses buffer `i % BUFFERS`.
const BUFFERS: usize = 2;

impl Pipeline {
    fn new(s: &Sizes) -> cudasem::Result<Pipeline> {
        let (rows, h, ff) = (s.mlp_rows, s.mlp_hidden, s.mlp_ff);
        let w1 = scaled_randn(&[h, ff], 1.0 / (h as f64).sqrt(), DType::BF16)?;
        let w2 = scaled_randn(&[ff, h], 1.0 / (ff as f64).sqrt(), DType::BF16)?;
        let mut inputs = Vec::new();
        let mut outputs = Vec::new();
        for _ in 0..BUFFERS {
            inputs.push(Tensor::randn([rows, h], DType::F32, "cpu")?.to_dtype(DType::BF16)?.pin_memory()?);
            outputs.push(Tensor::empty_pinned([rows, h], DType::F32)?);
        }
        Ok(Pipeline { w1, w2, inputs, outputs, side: Stream::new(None, 0)? })
    }

    /// One batch on the current stream.
    fn forward(&self, x: &Tensor) -> cudasem::Result<Tensor> {
        x.matmul(&self.w1)?.gelu()?.matmul(&self.w2)?.to_dtype(DType::F32)?.softmax(-1)
    }

    /// Batch `i` copied to the device on the side stream (`with torch.cuda.stream(side):
    /// x = host.to("cuda", non_blocking=True)`).
    fn upload(&self, i: usize) -> cudasem::Result<Tensor> {
        cuda::with_stream(&self.side, || self.inputs[i % BUFFERS].to("cuda", true))
    }

    /// `n` batches, each upload overlapping the previous batch's compute: device ms of the whole
    /// pass, between events on the current stream (the first upload waits for the start event).
    fn pass(&self, n: usize) -> cudasem::Result<f64> {
        let current = cuda::current_stream(None)?;
        let (start, end) = (Event::new(EventFlags::timing()), Event::new(EventFlags::timing()));
        start.record(None)?;
        self.side.wait_stream(&current)?;
        let mut next = Some(self.upload(0)?);
        for i in 0..n {
            current.wait_stream(&self.side)?;
            let Some(x) = next.take() else { break };
            x.record_stream(&current)?;
            if i + 1 < n {
                next = Some(self.upload(i + 1)?);
            }
            let y = self.forward(&x)?;
            self.outputs[i % BUFFERS].copy_(&y, true)?;
        }
        end.record(None)?;
        end.synchronize()?;
        Ok(start.elapsed_time(&end)? as f64)
    }

    /// Checks a few rows of batch `i`'s result (in its pinned output) against an f64 reference
    /// from the same bf16 inputs, rounded to bf16 where the device's bf16 ops round.
    fn check_batch(&self, i: usize) -> Result<(), Stop> {
        let rows = self.inputs[0].shape()[0];
        let w1: Vec<bf16> = self.w1.to_vec()?;
        let w2: Vec<bf16> = self.w2.to_vec()?;
        for row in sample_rows(rows) {
            let x: Vec<bf16> = self.inputs[i % BUFFERS].narrow(0, row, 1)?.to_vec()?;
            let got: Vec<f32> = self.outputs[i % BUFFERS].narrow(0, row, 1)?.to_vec()?;
            let want = mlp_reference(&x, &w1, &w2);
            // A logit's bf16 rounding that falls the other way (or a GEMM's reduced-precision
            // reduction) moves a probability by 1.6 % per ulp of a logit near 2: 5 % allows three.
            let bad = first_outside(&got, &want, |w| 5e-2 * w);
            check(bad.is_none(), || {
                let j = bad.unwrap_or(0);
                format!("mlp pipeline batch {i}: output ({row}, {j}) is {}, the CPU (f64) {}", got[j], want[j])
            })?;
        }
        Ok(())
    }
}

/// The rows the checks sample: first, two inner ones, last.
fn sample_rows(rows: usize) -> [usize; 4] {
    [0, rows / 3, 2 * rows / 3, rows - 1]
}

/// `softmax(f32(gelu(x @ w1) @ w2))` of one row in f64, rounding to bf16 after each bf16 op.
fn mlp_reference(x: &[bf16], w1: &[bf16], w2: &[bf16]) -> Vec<f64> {
    let (h, ff) = (x.len(), w1.len() / x.len());
    let row_times = |v: &[f64], w: &[bf16], cols: usize| {
        let mut out = vec![0.0f64; cols];
        for (k, &vk) in v.iter().enumerate() {
            for (o, &wkj) in out.iter_mut().zip(&w[k * cols..(k + 1) * cols]) {
                *o += vk * wkj.to_f64();
            }
        }
        out
    };
    let x: Vec<f64> = x.iter().map(|v| v.to_f64()).collect();
    let g: Vec<f64> = row_times(&x, w1, ff).into_iter().map(|v| round_bf16(gelu(round_bf16(v)))).collect();
    let z: Vec<f64> = row_times(&g, w2, h).into_iter().map(round_bf16).collect();
    softmax(&z)
}

fn softmax(z: &[f64]) -> Vec<f64> {
    let max = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = z.iter().map(|v| (v - max).exp()).collect();
    let sum: f64 = e.iter().sum();
    e.into_iter().map(|v| v / sum).collect()
}

/// `e2e_mlp_pipeline_bf16`: one untimed pass, its last batch checked, then `runs` timed passes of
/// `mlp_batches` batches (the last one's last batch checked again): median ms per batch.
fn mlp_pipeline(s: &Sizes) -> StepResult {
    let p = Pipeline::new(s)?;
    let n = s.mlp_batches;
    p.pass(n)?;
    p.check_batch(n - 1)?;
    let mut times = Vec::with_capacity(s.runs);
    for _ in 0..s.runs {
        times.push(p.pass(n)? / n as f64);
    }
    p.check_batch(n - 1)?;
    Ok(vec![("e2e_mlp_pipeline_bf16", median(times))])
}

/// The decode step's weights: `w` `[hidden, hidden]` (N(0, 1/hidden)), `gamma` (1 + N(0, 0.01))
/// and `beta` (N(0, 0.01)) `[hidden]`, all f32.
struct Decode {
    w: Tensor,
    gamma: Tensor,
    beta: Tensor,
}

/// The variance's epsilon (LayerNorm's default).
const EPS: f64 = 1e-5;

impl Decode {
    fn new(hidden: usize) -> cudasem::Result<Decode> {
        let w = scaled_randn(&[hidden, hidden], 1.0 / (hidden as f64).sqrt(), DType::F32)?;
        let gamma = scaled_randn(&[hidden], 0.1, DType::F32)?.add(1.0)?;
        let beta = scaled_randn(&[hidden], 0.1, DType::F32)?;
        Ok(Decode { w, gamma, beta })
    }

    /// One step, ten ops (the mul-add as a mul and an add: the tensor API has no fused one):
    /// `h = x @ w; d = h - mean(h); r = rsqrt(mean(d·d) + eps); gelu(d·r)·gamma + beta`.
    fn step(&self, x: &Tensor) -> cudasem::Result<Tensor> {
        let h = x.matmul(&self.w)?;
        let mu = h.mean(&[-1], true)?;
        let d = h.sub(&mu)?;
        let var = d.mul(&d)?.mean(&[-1], true)?;
        let r = var.add(EPS)?.rsqrt()?;
        d.mul(&r)?.gelu()?.mul(&self.gamma)?.add(&self.beta)
    }

    /// Checks one step from `x` against the f64 reference of the same f32 inputs.
    fn check_step(&self, x: &Tensor, when: &str) -> Result<(), Stop> {
        let got: Vec<f32> = self.step(x)?.to_vec()?;
        let (xs, w, gamma, beta): (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) =
            (x.to_vec()?, self.w.to_vec()?, self.gamma.to_vec()?, self.beta.to_vec()?);
        let want = decode_reference(&xs, &w, &gamma, &beta);
        check(got.len() == want.len(), || format!("decode step gave {} values, expected {}", got.len(), want.len()))?;
        let bad = first_outside(&got, &want, |w| 1e-3 * (1.0 + w.abs()));
        check(bad.is_none(), || {
            let j = bad.unwrap_or(0);
            format!("decode step {when}: element {j} is {}, the CPU (f64) {}", got[j], want[j])
        })
    }
}

/// [`Decode::step`] in f64.
fn decode_reference(x: &[f32], w: &[f32], gamma: &[f32], beta: &[f32]) -> Vec<f64> {
    let n = x.len();
    let mut h = vec![0.0f64; n];
    for (k, &xk) in x.iter().enumerate() {
        for (o, &wkj) in h.iter_mut().zip(&w[k * n..(k + 1) * n]) {
            *o += xk as f64 * wkj as f64;
        }
    }
    let mu = h.iter().sum::<f64>() / n as f64;
    let d: Vec<f64> = h.iter().map(|v| v - mu).collect();
    let r = 1.0 / (d.iter().map(|v| v * v).sum::<f64>() / n as f64 + EPS).sqrt();
    d.iter().zip(gamma.iter().zip(beta)).map(|(v, (&g, &b))| gelu(v * r) * g as f64 + b as f64).collect()
}

/// `e2e_decode_step`: one step checked, `decode_steps` untimed steps, then `runs` runs of
/// `decode_steps` chained steps between events on the current stream, and one more step checked:
/// median µs per step.
fn decode_step(s: &Sizes) -> StepResult {
    let d = Decode::new(s.decode_hidden)?;
    let mut x = Tensor::randn([1, s.decode_hidden], DType::F32, "cuda")?;
    d.check_step(&x, "before timing")?;
    for _ in 0..s.decode_steps {
        x = d.step(&x)?;
    }
    cuda::synchronize(None)?;
    let mut times = Vec::with_capacity(s.runs);
    for _ in 0..s.runs {
        let (start, end) = (Event::new(EventFlags::timing()), Event::new(EventFlags::timing()));
        start.record(None)?;
        for _ in 0..s.decode_steps {
            x = d.step(&x)?;
        }
        end.record(None)?;
        end.synchronize()?;
        times.push(start.elapsed_time(&end)? as f64 * 1e3 / s.decode_steps as f64);
    }
    d.check_step(&x, "after timing")?;
    Ok(vec![("e2e_decode_step", median(times))])
}

/// `e2e_decode_step_graphed`: the same step captured once with its output copied back into its
/// input (so each replay is the next step), one replay checked against the f64 reference, then
/// `runs` runs of `decode_steps` replays between events: median µs per step.
fn decode_step_graphed(s: &Sizes) -> StepResult {
    let d = Decode::new(s.decode_hidden)?;
    let x = Tensor::randn([1, s.decode_hidden], DType::F32, "cuda")?;
    let mut g = cuda::CUDAGraph::new();
    cuda::graph(&mut g, cuda::GraphOptions::default(), || x.copy_(&d.step(&x)?, false))?;
    let check_replay = |when: &str| -> Result<(), Stop> {
        let want = d.step(&x)?.to_vec::<f32>()?;
        g.replay()?;
        let got: Vec<f32> = x.to_vec()?;
        let bad = first_outside(&got, &want.iter().map(|&v| v as f64).collect::<Vec<_>>(), |w| 1e-5 * (1.0 + w.abs()));
        check(bad.is_none(), || format!("graphed decode step {when}: element {} differs from eager", bad.unwrap_or(0)))
    };
    d.check_step(&x, "before timing")?;
    check_replay("before timing")?;
    let replay_us = event_ms(0, s.runs, s.decode_steps, || g.replay())? * 1e3;
    check_replay("after timing")?;
    Ok(vec![("e2e_decode_step_graphed", replay_us)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gelu_and_softmax_references_match_known_values() {
        // Φ(1) = 0.841344746068543, so gelu(1) = Φ(1); gelu(-1) = -(1 - Φ(1)).
        assert!((gelu(1.0) - 0.841_344_746_068_543).abs() < 1e-12);
        assert!((gelu(-1.0) + 0.158_655_253_931_457).abs() < 1e-12);
        let p = softmax(&[1.0, 2.0, 3.0]);
        let e: Vec<f64> = [1.0f64, 2.0, 3.0].iter().map(|v| v.exp()).collect();
        let sum: f64 = e.iter().sum();
        for (got, want) in p.iter().zip(e.iter().map(|v| v / sum)) {
            assert!((got - want).abs() < 1e-15);
        }
        assert_eq!(round_bf16(1.0 + 1.0 / 512.0), 1.0, "bf16 keeps 8 bits: 1 + 2^-9 rounds to 1");
    }

    #[test]
    fn the_decode_reference_normalizes_before_gelu() {
        // w = identity: h = x; with gamma = 1, beta = 0 the output is gelu of the standardized x.
        let x = [1.0f32, 2.0, 3.0, 6.0];
        let mut w = [0.0f32; 16];
        for i in 0..4 {
            w[i * 5] = 1.0;
        }
        let got = decode_reference(&x, &w, &[1.0; 4], &[0.0; 4]);
        let (mu, var) = (3.0f64, (4.0 + 1.0 + 0.0 + 9.0) / 4.0);
        for (g, &xi) in got.iter().zip(&x) {
            assert!((g - gelu((xi as f64 - mu) / (var + EPS).sqrt())).abs() < 1e-12);
        }
    }
}
