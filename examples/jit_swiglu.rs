//! A fused SwiGLU, `silu(x) * y`, written as a jiterator function (`torch.cuda.jiterator`): one
//! kernel reading `x` and `y` once and writing the result once, instead of eager PyTorch's three
//! (silu, then the product). In bf16, computed in f32 and rounded once, checked against a float64
//! reference; then captured into a CUDA graph and replayed over new inputs copied into the
//! captured ones.
//!
//! `cargo run --example jit_swiglu`: on the simulated machine (the function compiled by the
//! host's C++ compiler) or a real GPU (`CUDASEM_DRIVER=cuda`, compiled by NVRTC into the same
//! vectorized elementwise kernels as cudasem's own ops). Exits non-zero if a check fails.
use cudasem::cuda::{self, jiterator, CUDAGraph, GraphOptions};
use cudasem::{DType, Tensor};

const SWIGLU: &str = "template <typename T> T swiglu(T x, T y) { return x / (T(1) + exp(-x)) * y; }";
const ROWS: usize = 64;
const COLS: usize = 1024;

/// Checks `out` (bf16) against `silu(x) * y` in float64 over the bf16 inputs: within the one
/// rounding of a bf16 result (2^-8 relative) plus a little of the f32 math.
fn check(x: &Tensor, y: &Tensor, out: &Tensor, what: &str) -> Result<(), Box<dyn std::error::Error>> {
    let f64s = |t: &Tensor| t.to_dtype(DType::F64)?.to_vec::<f64>();
    let (xs, ys, got) = (f64s(x)?, f64s(y)?, f64s(out)?);
    let mut worst = 0.0f64;
    for (i, ((a, b), g)) in xs.iter().zip(&ys).zip(&got).enumerate() {
        let want = a / (1.0 + (-a).exp()) * b;
        let err = (g - want).abs() / want.abs().max(1e-3);
        if err > 1.0 / 256.0 + 1e-5 {
            return Err(format!("{what}: element {i} is {g}, the float64 reference {want}").into());
        }
        worst = worst.max(err);
    }
    println!("{what}: {} elements within {worst:.2e} relative of float64", got.len());
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let swiglu = jiterator::create_jit_fn(SWIGLU, &[])?;
    let x = Tensor::randn([ROWS, COLS], DType::F32, "cuda")?.to_dtype(DType::BF16)?;
    let y = Tensor::randn([ROWS, COLS], DType::F32, "cuda")?.to_dtype(DType::BF16)?;
    let out = swiglu.call(&[&x, &y], &[])?;
    if out.dtype() != DType::BF16 || out.shape() != [ROWS, COLS] {
        return Err(format!("the output is {:?} {:?}", out.dtype(), out.shape()).into());
    }
    check(&x, &y, &out, "eager")?;

    // Captured once; each replay reads what the captured inputs hold then.
    let mut g = CUDAGraph::new();
    let captured = cuda::graph(&mut g, GraphOptions::default(), || swiglu.call(&[&x, &y], &[]))?;
    for step in 0..3 {
        x.copy_(&Tensor::randn([ROWS, COLS], DType::F32, "cuda")?.to_dtype(DType::BF16)?, false)?;
        y.copy_(&Tensor::randn([ROWS, COLS], DType::F32, "cuda")?.to_dtype(DType::BF16)?, false)?;
        g.replay()?;
        check(&x, &y, &captured, &format!("replay {step}"))?;
    }
    println!("ok: {} on {} ({})", swiglu.name(), out.device(), cuda::driver_name());
    Ok(())
}
