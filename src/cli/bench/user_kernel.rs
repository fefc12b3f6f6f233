//! The user-kernel rows, beside `torch.cuda._compile_kernel` in `bench/pytorch_user_kernel.py`:
//! a tiny kernel with three tensor arguments (`c = a + b` on 16 f32, one block).
//!
//! * `user_kernel_launch_host`: host ns per [`Kernel::launch`](cudasem::cuda::Kernel::launch) of
//!   the kernel from [`compile_kernel`] (median of `small_runs` runs of `small_ops` launches, each
//!   run after a synchronize: host clocks around the launches, as PyTorch's side times its
//!   `kernel(grid, block, args)` calls).
//! * `user_kernel_launch_raw_cudarc`: the same figure for the same kernel compiled by NVRTC
//!   to PTX and launched through cudarc's `result` API by hand (`cuLaunchKernel` with the
//!   tensors' addresses, no checks, no stream-use records): the floor of a launch on the CUDA
//!   driver, which cudasem's launch is held to within 15% of. Not applicable on the simulated
//!   machine (skipped there, as the other CUDA-only rows are).
//!
//! Each launch path's result is checked against the host sum before it is timed.

use super::measure::{check, host_ns, Sizes, StepResult, Stop};
use cudasem::cuda::{self, compile_kernel, CompileOptions, HostLaunch, KernelArg};
use cudasem::{DType, Tensor};

/// The kernel: `c[i] = a[i] + b[i]` for each thread of one block.
const ADD3: &str = r#"extern "C" __global__ void add3(const float* a, const float* b, float* c) {
    int i = threadIdx.x;
    c[i] = a[i] + b[i];
}"#;

/// Elements (and threads of the one block).
const N: usize = 16;

/// The kernel's host twin (the simulated machine).
fn add3_twin(l: &mut HostLaunch) -> cudasem::Result<()> {
    let (a, b) = (l.read::<f32>(0)?, l.read::<f32>(1)?);
    let threads = l.block().x as usize;
    let mut c = l.read::<f32>(2)?;
    for i in 0..threads.min(c.len()) {
        c[i] = a[i] + b[i];
    }
    l.write(2, &c)
}

/// The operands and the host sum they must give.
fn operands() -> cudasem::Result<(Tensor, Tensor, Vec<f32>)> {
    let a = Tensor::randn([N], DType::F32, "cuda")?;
    let b = Tensor::randn([N], DType::F32, "cuda")?;
    let want = a.to_vec::<f32>()?.iter().zip(b.to_vec::<f32>()?).map(|(x, y)| x + y).collect();
    Ok((a, b, want))
}

/// `user_kernel_launch_host`.
pub fn launch_host(s: &Sizes) -> StepResult {
    let kernel = compile_kernel(ADD3, "add3", CompileOptions::default())?.with_host_twin(add3_twin);
    let (a, b, want) = operands()?;
    let c = Tensor::zeros([N], DType::F32, "cuda")?;
    let args = [KernelArg::read(&a), KernelArg::read(&b), KernelArg::write(&c)];
    kernel.launch(1u32, N as u32, 0, &args)?;
    let got = c.to_vec::<f32>()?;
    check(got == want, || format!("add3 gave {got:?}, the host {want:?}"))?;
    let ns = host_ns(s.small_runs, s.small_ops, || kernel.launch(1u32, N as u32, 0, &args))?;
    Ok(vec![("user_kernel_launch_host", ns)])
}

/// `user_kernel_launch_raw_cudarc` (the CUDA driver only).
pub fn launch_host_raw(s: &Sizes) -> StepResult {
    if cuda::driver_name() != "cuda" {
        return Err(Stop::Skip(format!(
            "a raw cudarc launch needs the CUDA driver (the {} driver runs host twins)",
            cuda::driver_name()
        )));
    }
    let ptx = cudarc::nvrtc::compile_ptx(ADD3).map_err(|e| Stop::Fail(format!("NVRTC: {e:?}")))?;
    let (a, b, want) = operands()?;
    let c = Tensor::zeros([N], DType::F32, "cuda")?;
    let stream = cuda::current_stream(None)?;
    let raw = cudasem::testing::RawCudarcLaunch::new(&ptx.to_src(), "add3", &stream, &[&a, &b, &c])?;
    raw.make_current()?;
    raw.launch(1, N as u32)?;
    let got = c.to_vec::<f32>()?;
    check(got == want, || format!("add3 (raw cudarc) gave {got:?}, the host {want:?}"))?;
    raw.make_current()?;
    let ns = host_ns(s.small_runs, s.small_ops, || raw.launch(1, N as u32))?;
    Ok(vec![("user_kernel_launch_raw_cudarc", ns)])
}
