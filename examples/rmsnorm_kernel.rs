//! Your own CUDA kernel under cudasem's rules: an RMSNorm row kernel (`torch.cuda._compile_kernel`'s
//! use case) — one block per row, an f32 sum of squares reduced in shared memory, then
//! `out = x / sqrt(mean(x²) + eps) * weight`. It is compiled by NVRTC on a GPU and runs its host
//! twin (a Rust function over the same arguments) on the simulated machine, so the same program
//! is tested without a GPU.
//!
//! `cargo run --example rmsnorm_kernel`: checks the kernel against a float64 reference on random
//! data, captures the launch into a CUDA graph, replays it over new inputs written into the
//! captured tensors, and checks again. Exits non-zero if a check fails.
use cudasem::cuda::{self, compile_kernel, CUDAGraph, CompileOptions, GraphOptions, HostLaunch, Kernel, KernelArg};
use cudasem::{DType, Tensor};

const ROWS: usize = 64;
const COLS: usize = 1000;
const THREADS: u32 = 256;
const EPS: f32 = 1e-6;

const RMSNORM: &str = r#"
extern "C" __global__ void rmsnorm(const float* x, const float* weight, float* out, int cols, float eps) {
    __shared__ float partial[256];
    const float* xr = x + (long long)blockIdx.x * cols;
    float* outr = out + (long long)blockIdx.x * cols;
    float acc = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        float v = xr[j];
        acc += v * v;
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    float inv = rsqrtf(partial[0] / cols + eps);
    for (int j = threadIdx.x; j < cols; j += blockDim.x) outr[j] = xr[j] * inv * weight[j];
}
"#;

/// The kernel's host twin: the same arguments, the same f32 arithmetic, row by row.
fn rmsnorm_twin(l: &mut HostLaunch) -> cudasem::Result<()> {
    let (x, w) = (l.read::<f32>(0)?, l.read::<f32>(1)?);
    let (cols, eps) = (l.scalar::<i32>(3)? as usize, l.scalar::<f32>(4)?);
    let mut out = l.read::<f32>(2)?;
    for row in 0..l.grid().x as usize {
        let xr = &x[row * cols..(row + 1) * cols];
        let inv = 1.0 / (xr.iter().map(|v| v * v).sum::<f32>() / cols as f32 + eps).sqrt();
        for (j, o) in out[row * cols..(row + 1) * cols].iter_mut().enumerate() {
            *o = xr[j] * inv * w[j];
        }
    }
    l.write(2, &out)
}

fn launch(k: &Kernel, x: &Tensor, w: &Tensor, out: &Tensor) -> cudasem::Result<()> {
    let args = [KernelArg::read(x), KernelArg::read(w), KernelArg::write(out), (COLS as i32).into(), EPS.into()];
    k.launch(ROWS as u32, THREADS, 0, &args)
}

/// `out` against RMSNorm of `x` and `w` in float64.
fn check(out: &Tensor, x: &Tensor, w: &Tensor, what: &str) -> Result<(), Box<dyn std::error::Error>> {
    let (got, x, w) = (out.to_vec::<f32>()?, x.to_vec::<f32>()?, w.to_vec::<f32>()?);
    let mut worst = 0.0f64;
    for row in 0..ROWS {
        let xr = &x[row * COLS..(row + 1) * COLS];
        let ms = xr.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / COLS as f64;
        let inv = 1.0 / (ms + EPS as f64).sqrt();
        for j in 0..COLS {
            let want = xr[j] as f64 * inv * w[j] as f64;
            let err = (got[row * COLS + j] as f64 - want).abs() / want.abs().max(1.0);
            worst = worst.max(err);
        }
    }
    println!("{what}: worst relative error against float64 {worst:.2e}");
    if worst > 1e-5 {
        return Err(format!("{what}: RMSNorm is wrong (relative error {worst:.2e} > 1e-5)").into());
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    cudasem::manual_seed(11);
    let kernel = compile_kernel(RMSNORM, "rmsnorm", CompileOptions::default())?.with_host_twin(rmsnorm_twin);
    println!("driver {}: kernel {:?} with {:?} parameters", cuda::driver_name(), kernel.name(), kernel.num_params());
    let x = Tensor::randn([ROWS, COLS], DType::F32, "cuda")?;
    let w = Tensor::rand([COLS], DType::F32, "cuda")?.add(0.5)?;
    let out = Tensor::empty([ROWS, COLS], DType::F32, "cuda")?;
    launch(&kernel, &x, &w, &out)?;
    check(&out, &x, &w, "eager launch")?;

    // Captured once, replayed over new inputs copied into the captured tensors.
    let mut graph = CUDAGraph::new();
    cuda::graph(&mut graph, GraphOptions::default(), || launch(&kernel, &x, &w, &out))?;
    for round in 0..3 {
        x.copy_(&Tensor::randn([ROWS, COLS], DType::F32, "cuda")?.mul(1.0 + round as f64)?, false)?;
        graph.replay()?;
        check(&out, &x, &w, &format!("graph replay {round}"))?;
    }

    // A wrong argument is a typed error, and the runtime goes on.
    let wrong = kernel.launch(ROWS as u32, THREADS, 0, &[KernelArg::read(&x), KernelArg::read(&w)]);
    match wrong {
        Err(e @ cudasem::Error::InvalidArgument { .. }) => println!("a launch with 2 arguments: {e}"),
        other => return Err(format!("a launch with 2 of 5 arguments was not refused: {other:?}").into()),
    }
    launch(&kernel, &x, &w, &out)?;
    check(&out, &x, &w, "after the refused launch")?;
    println!("ok");
    Ok(())
}
