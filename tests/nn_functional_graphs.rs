//! `nn::functional`'s fused ops inside a CUDA graph capture: a captured pre-LN attention step
//! (RMS norm, layer norm, attention over many keys, whose split-key partials live in the
//! capture's own scratch on a GPU, then a linear layer with its bias in the product, in the
//! capture's cuBLASLt workspace, and GELU's tanh form) replays to what eager calls give for the new inputs, and so
//! does bf16 attention on the tensor cores (on Hopper: tiles copied by TMA, persistent blocks). One test (a capture
//! in global mode refuses other threads' blocking calls).

mod common;

use cudasem::cuda::{self, CUDAGraph, GraphOptions};
use cudasem::nn::functional as F;
use cudasem::{DType, Device, Result, Tensor};

fn data(seed: u64, n: usize) -> Vec<f32> {
    let mut rng = common::TestRng::new(seed);
    (0..n).map(|_| ((rng.next_u64() % 2000) as f32 - 999.5) / 500.0).collect()
}

#[test]
fn a_captured_norm_and_attention_step_replays_as_eager() -> Result<()> {
    if !common::one_device() {
        return Ok(());
    }
    let dev = Device::cuda(0);
    let (b, h, l, s, e) = (2, 4, 1, 1500, 64);
    let q = Tensor::from_slice(&data(1, b * h * l * e), [b, h, l, e], dev)?;
    let k = Tensor::from_slice(&data(2, b * h * s * e), [b, h, s, e], dev)?;
    let v = Tensor::from_slice(&data(3, b * h * s * e), [b, h, s, e], dev)?;
    let w = Tensor::from_slice(&data(4, e), [e], dev)?;
    let wl = Tensor::from_slice(&data(5, e * e), [e, e], dev)?.div(8.0)?;
    let bl = Tensor::from_slice(&data(6, e), [e], dev)?;
    let step = || -> Result<Tensor> {
        let qn = F::rms_norm(&q, &[e], Some(&w), None)?;
        let kn = F::layer_norm(&k, &[e], Some(&w), None, 1e-5)?;
        let a = F::scaled_dot_product_attention(&qn, &kn, &v, None, 0.0, false, None, false)?;
        F::gelu(&F::linear(&a, &wl, Some(&bl))?, "tanh")
    };
    let mut g = CUDAGraph::new();
    let out = cuda::graph(&mut g, GraphOptions::default(), step)?;
    for seed in [10, 20] {
        q.copy_(&Tensor::from_slice(&data(seed, b * h * l * e), [b, h, l, e], dev)?, false)?;
        k.copy_(&Tensor::from_slice(&data(seed + 1, b * h * s * e), [b, h, s, e], dev)?, false)?;
        g.replay()?;
        let want = step()?.to_vec::<f32>()?;
        let got = out.to_vec::<f32>()?;
        assert_eq!(got.len(), want.len());
        for (i, (x, y)) in got.iter().zip(&want).enumerate() {
            assert!((x - y).abs() <= 1e-5 * (1.0 + y.abs()), "replay {seed} [{i}]: {x} vs eager {y}");
        }
        assert!(got.iter().all(|x| x.is_finite()) && got.iter().any(|x| *x != 0.0));
    }
    captured_half_attention_replays_as_eager(dev)
}

/// bf16 attention on the tensor cores, captured and replayed over new q / k / v: on Hopper the
/// kernels whose tiles TMA copies (their tensor maps travel by value in the captured launch's
/// parameters) — head dim 64's per-tile blocks and head dim 128's persistent `tmaov` blocks —
/// and a decode over many keys; each replay equal to the eager call on the same inputs.
fn captured_half_attention_replays_as_eager(dev: Device) -> Result<()> {
    for (b, h, l, s, e, causal) in [(2, 4, 200, 200, 64, true), (1, 4, 300, 260, 128, true), (4, 8, 1, 700, 128, false)]
    {
        let half = |seed, shape: [usize; 4]| -> Result<Tensor> {
            Tensor::from_slice(&data(seed, shape.iter().product()), shape, dev)?.to_dtype(DType::BF16)
        };
        let (q, k, v) = (half(30, [b, h, l, e])?, half(31, [b, h, s, e])?, half(32, [b, h, s, e])?);
        let step = || F::scaled_dot_product_attention(&q, &k, &v, None, 0.0, causal, None, false);
        let mut g = CUDAGraph::new();
        let out = cuda::graph(&mut g, GraphOptions::default(), step)?;
        for seed in [40, 50] {
            q.copy_(&half(seed, [b, h, l, e])?, false)?;
            k.copy_(&half(seed + 1, [b, h, s, e])?, false)?;
            v.copy_(&half(seed + 2, [b, h, s, e])?, false)?;
            g.replay()?;
            let want = step()?.to_dtype(DType::F32)?.to_vec::<f32>()?;
            let got = out.to_dtype(DType::F32)?.to_vec::<f32>()?;
            assert_eq!(got, want, "E {e}, L {l}, S {s}: replay {seed} differs from the eager call");
            assert!(got.iter().all(|x| x.is_finite()) && got.iter().any(|x| *x != 0.0));
        }
    }
    Ok(())
}
