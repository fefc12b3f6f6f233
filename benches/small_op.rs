//! Where the host time of a small op goes: a 16-element `f32` add through the tensor API,
//! broken down into its parts, each measured in the same run as a bare `cuLaunchKernel`.
//!
//! Figures (host µs per call, the median of [`HOST_RUNS`] runs of [`HOST_OPS`] calls, [`ROUNDS`]
//! interleaved rounds):
//! * `empty_kernel`: an empty kernel without parameters on the legacy default stream (cudarc);
//! * `empty_kernel_param64`: an empty kernel taking a 64-byte struct (as the add kernel does);
//! * `empty_kernel_nonblocking`: the empty kernel on a non-blocking stream;
//! * `driver_launch`: the add as a prebuilt `KernelOp` through `Driver::launch`;
//! * `tensor_add`: `x.add(&y)` (allocates its output from the caching allocator);
//! * `tensor_add_pool_stream`: the same under a `StreamGuard` of a pool stream;
//! * `tensor_add_inplace`: `z.add_(&y)` (no allocation);
//! * `empty_tensor`: `Tensor::empty(&[16])` create + drop (no launch);
//! * `launch+X`: the bare launch followed by X, so that X runs with the caches as a launch
//!   leaves them (X alone runs hot): X = `empty_tensor`, `validate` (`KernelOp::validate`),
//!   `current_stream`.
//!
//! `small_op loop SECONDS` runs `x.add(&y)` for that long, `small_op empty N` makes and drops N small
//! tensors, `small_op add N` runs N adds (for profilers). Needs
//! `CUDASEM_DRIVER=cuda` for the kernel figures; on the sim driver only the tensor figures run.

use cudasem::cuda::{self, Stream, StreamGuard};
use cudasem::driver::kernel::{BinaryOp, BufferView, KernelOp};
use cudasem::driver::{self, DevicePtr, StreamId};
use cudasem::{DType, Result, Tensor};
use std::time::Instant;

const HOST_RUNS: usize = 25;
const HOST_OPS: usize = 200;
/// Interleaved rounds (each figure's value: the median over all rounds' medians).
const ROUNDS: usize = 5;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn host_us(mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    let mut times = Vec::with_capacity(HOST_RUNS);
    for run in 0..HOST_RUNS + 2 {
        cuda::synchronize(None)?;
        let t = Instant::now();
        for _ in 0..HOST_OPS {
            f()?;
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / HOST_OPS as f64;
        if run >= 2 {
            times.push(us);
        }
    }
    cuda::synchronize(None)?;
    Ok(median(times))
}

#[repr(C)]
#[derive(Clone, Copy)]
struct P64([u64; 8]);

struct Kernels {
    empty: cudarc::driver::sys::CUfunction,
    param: cudarc::driver::sys::CUfunction,
    nonblocking: cudarc::driver::sys::CUstream,
}

fn err(e: cudarc::driver::DriverError) -> cudasem::Error {
    cudasem::Error::Driver { op: "bench", code: format!("{e:?}"), message: String::new() }
}

impl Kernels {
    fn new() -> Option<Kernels> {
        use cudarc::driver::result as cu;
        let src = "struct P { unsigned long long v[8]; };\n\
                   extern \"C\" __global__ void empty() {}\n\
                   extern \"C\" __global__ void param(P p) { if (p.v[7] == 1) p.v[0] = 0; }";
        let ptx = cudarc::nvrtc::compile_ptx(src).ok()?;
        let mut image = ptx.as_bytes()?.to_vec();
        image.push(0);
        let dev = cu::device::get(0).ok()?;
        // SAFETY: `dev` came from `cuDeviceGet`; the retain is never released (the process ends).
        let ctx = unsafe { cu::primary_ctx::retain(dev) }.ok()?;
        // SAFETY: `ctx` is a live primary context; `image` is NUL-terminated PTX that outlives the call.
        let module = unsafe {
            cu::ctx::set_current(ctx).ok()?;
            cu::module::load_data(image.as_ptr().cast()).ok()?
        };
        // SAFETY: `module` is loaded and never unloaded.
        let empty = unsafe { cu::module::get_function(module, std::ffi::CString::new("empty").ok()?) }.ok()?;
        // SAFETY: as above.
        let param = unsafe { cu::module::get_function(module, std::ffi::CString::new("param").ok()?) }.ok()?;
        let nonblocking = cu::stream::create(cu::stream::StreamKind::NonBlocking).ok()?;
        Some(Kernels { empty, param, nonblocking })
    }

    fn launch(&self, f: cudarc::driver::sys::CUfunction, stream: cudarc::driver::sys::CUstream) -> Result<()> {
        let mut p = P64([1, 2, 3, 4, 5, 6, 7, 8]);
        let mut args = [(&mut p as *mut P64).cast::<std::ffi::c_void>()];
        let args: &mut [*mut std::ffi::c_void] = if f == self.param { &mut args } else { &mut [] };
        // The streams are of the current primary context, which cudasem's calls also make current.
        // SAFETY: `f` takes no parameter or one 64-byte struct, as passed; the stream is live.
        unsafe { cudarc::driver::result::launch_kernel(f, (1, 1, 1), (1, 1, 1), 0, stream, args) }.map_err(err)
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let x = Tensor::rand(&[16], DType::F32, "cuda")?;
    let y = Tensor::rand(&[16], DType::F32, "cuda")?;
    let z = Tensor::empty(&[16], DType::F32, "cuda")?;
    if let Some(i) = args.iter().position(|a| a == "empty" || a == "add") {
        // `small_op empty N` / `small_op add N`: N creations and drops of a small tensor, or N
        // adds, then a synchronize (for an instruction profiler).
        let n: usize = args.get(i + 1).and_then(|s| s.parse().ok()).unwrap_or(100_000);
        for _ in 0..n {
            match args[i].as_str() {
                "empty" => drop(Tensor::empty(&[16], DType::F32, "cuda")?),
                _ => drop(x.add(&y)?),
            }
        }
        cuda::synchronize(None)?;
        println!("{n} x {}", args[i]);
        return Ok(());
    }
    if let Some(i) = args.iter().position(|a| a == "loop") {
        let secs: f64 = args.get(i + 1).and_then(|s| s.parse().ok()).unwrap_or(5.0);
        let t = Instant::now();
        let mut n = 0u64;
        while t.elapsed().as_secs_f64() < secs {
            for _ in 0..HOST_OPS {
                drop(x.add(&y)?);
            }
            cuda::synchronize(None)?;
            n += HOST_OPS as u64;
        }
        println!("{n} adds in {secs} s");
        return Ok(());
    }
    let view = |t: &Tensor| BufferView {
        ptr: DevicePtr(t.data_ptr()),
        dtype: DType::F32,
        shape: [16].into(),
        strides: [1].into(),
        offset: 0,
    };
    let op = KernelOp::Binary { op: BinaryOp::Add, lhs: view(&x), rhs: view(&y), dst: view(&z), compute: DType::F32 };
    let drv = driver::global()?;
    let stream = StreamId(cuda::current_stream(None)?.id());
    let pool = Stream::new(None, 0)?;
    let kernels = if cuda::driver_name() == "cuda" { Kernels::new() } else { None };
    let names = [
        "empty_kernel",
        "empty_kernel_param64",
        "empty_kernel_nonblocking",
        "driver_launch",
        "tensor_add",
        "tensor_add_pool_stream",
        "tensor_add_inplace",
        "empty_tensor",
        "launch+empty_tensor",
        "launch+validate",
        "launch+current_stream",
    ];
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for _ in 0..ROUNDS {
        if let Some(k) = &kernels {
            samples[0].push(host_us(|| k.launch(k.empty, std::ptr::null_mut()))?);
            samples[1].push(host_us(|| k.launch(k.param, std::ptr::null_mut()))?);
            samples[2].push(host_us(|| k.launch(k.empty, k.nonblocking))?);
        }
        samples[3].push(host_us(|| drv.launch(stream, &op))?);
        samples[4].push(host_us(|| x.add(&y).map(drop))?);
        {
            let _g = StreamGuard::new(&pool)?;
            samples[5].push(host_us(|| x.add(&y).map(drop))?);
            pool.synchronize()?;
        }
        samples[6].push(host_us(|| z.add_(&y))?);
        samples[7].push(host_us(|| Tensor::empty(&[16], DType::F32, "cuda").map(drop))?);
        if let Some(k) = &kernels {
            let bare = |k: &Kernels| k.launch(k.empty, std::ptr::null_mut());
            samples[8].push(host_us(|| bare(k).and_then(|_| Tensor::empty(&[16], DType::F32, "cuda").map(drop)))?);
            samples[9].push(host_us(|| bare(k).and_then(|_| op.validate()))?);
            samples[10].push(host_us(|| bare(k).and_then(|_| cuda::current_stream(None).map(drop)))?);
        }
    }
    println!("small_op on the {} driver ({})", cuda::driver_name(), cuda::get_device_name(None).unwrap_or_default());
    for (name, s) in names.iter().zip(samples) {
        if !s.is_empty() {
            println!("{name:<28} {:>8.3} us", median(s));
        }
    }
    Ok(())
}
