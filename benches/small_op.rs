//! Where the host time of a small op goes: a 16-element `f32` add through the tensor API,
//! broken down into its parts, each measured in the same run as a bare `cuLaunchKernel`.
//!
//! Figures (host µs per call, the median of [`HOST_RUNS`] runs of [`HOST_OPS`] calls, [`ROUNDS`]
//! interleaved rounds):
//! * `empty_kernel`: an empty kernel without parameters on the legacy default stream (cudarc);
//! * `empty_kernel_param64`: an empty kernel taking a 64-byte struct (as the add kernel does);
//! * `empty_kernel_nonblocking`: the empty kernel on a non-blocking stream;
//! * `empty_kernel_256t`: the empty kernel with 256 threads per block (as the add kernel has);
//! * `empty_kernel_param32`: an empty kernel taking a 32-byte struct;
//! * `add_kernel_bare`: a plain f32 add kernel taking the add kernel's 64-byte parameters, 256
//!   threads, launched straight through `cuLaunchKernel` (the launch the tensor op cannot avoid);
//! * `driver_launch`: the add as a prebuilt `KernelOp` through `Driver::launch`;
//! * `tensor_add`: `x.add(&y)` (allocates its output from the caching allocator);
//! * `tensor_add_pool_stream`: the same under a `StreamGuard` of a pool stream;
//! * `tensor_add_inplace`: `z.add_(&y)` (no allocation);
//! * `tensor_add_scalar`: `x.add(2.0)` (the number travels with the launch);
//! * `empty_tensor`: `Tensor::empty(&[16])` create + drop (no launch);
//! * `launch+X`: the bare launch followed by X, so that X runs with the caches as a launch
//!   leaves them (X alone runs hot): X = `empty_tensor`, `validate` (`KernelOp::validate`),
//!   `current_stream`, `ctx_get_current` (`cuCtxGetCurrent`).
//!
//! Then, paired: `tensor_add` and `tensor_add_inplace` as the median of 101 rounds' ratios to a
//! bare launch timed right beside them (a batch of each per round, ABBA order), which is steadier
//! than the ratio of two medians taken apart.
//!
//! `small_op loop SECONDS` runs `x.add(&y)` for that long, `small_op empty N` makes and drops N small
//! tensors, `small_op add N` runs N adds, `small_op bare N` N bare launches (for profilers). Needs
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

#[repr(C)]
#[derive(Clone, Copy)]
struct P32([u64; 4]);

struct Kernels {
    empty: cudarc::driver::sys::CUfunction,
    param: cudarc::driver::sys::CUfunction,
    param32: cudarc::driver::sys::CUfunction,
    add: cudarc::driver::sys::CUfunction,
    nonblocking: cudarc::driver::sys::CUstream,
}

fn err(e: cudarc::driver::DriverError) -> cudasem::Error {
    let name = e.error_name().map_or_else(|_| format!("{:?}", e.0), |n| n.to_string_lossy().into_owned());
    cudasem::Error::Driver { op: "bench", code: e.0 as i32, name, message: String::new() }
}

impl Kernels {
    fn new() -> Option<Kernels> {
        use cudarc::driver::result as cu;
        let src = "struct P { unsigned long long v[8]; };\n\
                   extern \"C\" __global__ void empty() {}\n\
                   extern \"C\" __global__ void param(P p) { if (p.v[7] == 1) p.v[0] = 0; }\n\
                   struct Q { unsigned long long v[4]; };\n\
                   extern \"C\" __global__ void param32(Q p) { if (p.v[3] == 1) p.v[0] = 0; }\n\
                   struct E { float* out; const float* a; const float* b; const float* c; \
                              unsigned long long n, value; int vec, pad; };\n\
                   extern \"C\" __global__ void add(E p) { unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; \
                              if (i < p.n) p.out[i] = p.a[i] + p.b[i]; }";
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
        // SAFETY: as above.
        let param32 = unsafe { cu::module::get_function(module, std::ffi::CString::new("param32").ok()?) }.ok()?;
        // SAFETY: as above.
        let add = unsafe { cu::module::get_function(module, std::ffi::CString::new("add").ok()?) }.ok()?;
        let nonblocking = cu::stream::create(cu::stream::StreamKind::NonBlocking).ok()?;
        Some(Kernels { empty, param, param32, add, nonblocking })
    }

    fn launch(&self, f: cudarc::driver::sys::CUfunction, stream: cudarc::driver::sys::CUstream) -> Result<()> {
        self.launch_with(f, stream, 1, None)
    }

    /// Launches `f` with `threads` per block; `add` takes `ew` (the add kernel's parameters).
    fn launch_with(
        &self,
        f: cudarc::driver::sys::CUfunction,
        stream: cudarc::driver::sys::CUstream,
        threads: u32,
        ew: Option<[u64; 8]>,
    ) -> Result<()> {
        let mut p = P64(ew.unwrap_or([1, 2, 3, 4, 5, 6, 7, 8]));
        let mut q = P32([1, 2, 3, 4]);
        let mut args64 = [(&mut p as *mut P64).cast::<std::ffi::c_void>()];
        let mut args32 = [(&mut q as *mut P32).cast::<std::ffi::c_void>()];
        let args: &mut [*mut std::ffi::c_void] = if f == self.param || f == self.add {
            &mut args64
        } else if f == self.param32 {
            &mut args32
        } else {
            &mut []
        };
        // The streams are of the current primary context, which cudasem's calls also make current.
        // SAFETY: `f` takes no parameter or one struct of the size passed (`add`: valid device pointers and `n`); the stream is live.
        unsafe { cudarc::driver::result::launch_kernel(f, (1, 1, 1), (threads, 1, 1), 0, stream, args) }.map_err(err)
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let x = Tensor::rand([16], DType::F32, "cuda")?;
    let y = Tensor::rand([16], DType::F32, "cuda")?;
    let z = Tensor::empty([16], DType::F32, "cuda")?;
    if let Some(i) = args.iter().position(|a| a == "empty" || a == "add" || a == "bare") {
        let kernels = if args[i] == "bare" { Kernels::new() } else { None };
        // `small_op empty N` / `small_op add N`: N creations and drops of a small tensor, or N
        // adds, then a synchronize (for an instruction profiler).
        let n: usize = args.get(i + 1).and_then(|s| s.parse().ok()).unwrap_or(100_000);
        for _ in 0..n {
            match args[i].as_str() {
                "empty" => drop(Tensor::empty([16], DType::F32, "cuda")?),
                "bare" => match &kernels {
                    Some(k) => k.launch(k.empty, std::ptr::null_mut())?,
                    None => {
                        return Err(cudasem::Error::Unsupported {
                            op: "bench bare",
                            driver: "sim",
                            reason: "bare needs CUDASEM_DRIVER=cuda".into(),
                        })
                    }
                },
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
        "empty_kernel_256t",
        "empty_kernel_param32",
        "add_kernel_bare",
        "driver_launch",
        "tensor_add",
        "tensor_add_pool_stream",
        "tensor_add_inplace",
        "tensor_add_scalar",
        "empty_tensor",
        "launch+empty_tensor",
        "launch+validate",
        "launch+current_stream",
        "launch+ctx_get_current",
    ];
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for _ in 0..ROUNDS {
        if let Some(k) = &kernels {
            samples[0].push(host_us(|| k.launch(k.empty, std::ptr::null_mut()))?);
            samples[1].push(host_us(|| k.launch(k.param, std::ptr::null_mut()))?);
            samples[2].push(host_us(|| k.launch(k.empty, k.nonblocking))?);
            let null = std::ptr::null_mut();
            samples[3].push(host_us(|| k.launch_with(k.empty, null, 256, None))?);
            samples[4].push(host_us(|| k.launch(k.param32, null))?);
            // out, in0, in1, in2, n, value, (vec, pad)
            let ew = [z.data_ptr(), x.data_ptr(), y.data_ptr(), 0, 16, 0, 0, 0];
            samples[5].push(host_us(|| k.launch_with(k.add, null, 256, Some(ew)))?);
        }
        samples[6].push(host_us(|| drv.launch(stream, &op))?);
        samples[7].push(host_us(|| x.add(&y).map(drop))?);
        {
            let _g = StreamGuard::new(&pool)?;
            samples[8].push(host_us(|| x.add(&y).map(drop))?);
            pool.synchronize()?;
        }
        samples[9].push(host_us(|| z.add_(&y))?);
        samples[10].push(host_us(|| x.add(2.0).map(drop))?);
        samples[11].push(host_us(|| Tensor::empty([16], DType::F32, "cuda").map(drop))?);
        if let Some(k) = &kernels {
            let bare = |k: &Kernels| k.launch(k.empty, std::ptr::null_mut());
            samples[12].push(host_us(|| bare(k).and_then(|_| Tensor::empty([16], DType::F32, "cuda").map(drop)))?);
            samples[13].push(host_us(|| bare(k).and_then(|_| op.validate()))?);
            samples[14].push(host_us(|| bare(k).and_then(|_| cuda::current_stream(None).map(drop)))?);
            samples[15].push(host_us(|| {
                bare(k)?;
                cudarc::driver::result::ctx::get_current().map(drop).map_err(err)
            })?);
        }
    }
    println!("small_op on the {} driver ({})", cuda::driver_name(), cuda::get_device_name(None).unwrap_or_default());
    let bare = if samples[0].is_empty() { None } else { Some(median(samples[0].clone())) };
    for (name, s) in names.iter().zip(samples) {
        if !s.is_empty() {
            let us = median(s);
            match bare {
                Some(b) => println!("{name:<28} {us:>8.3} us {:>6.3} x empty_kernel", us / b),
                None => println!("{name:<28} {us:>8.3} us"),
            }
        }
    }
    if let Some(k) = &kernels {
        // Paired: each round times a batch of bare launches and a batch of ops back to back
        // (in ABBA order, so drift cancels), and the figure is the median of the rounds' ratios.
        let bare = || k.launch(k.empty, std::ptr::null_mut());
        for (name, op) in [
            ("tensor_add", &mut (|| x.add(&y).map(drop)) as &mut dyn FnMut() -> Result<()>),
            ("tensor_add_inplace", &mut || z.add_(&y)),
            ("tensor_add_scalar", &mut || x.add(2.0).map(drop)),
        ] {
            let mut ratios = Vec::with_capacity(PAIRED_ROUNDS);
            for round in 0..PAIRED_ROUNDS {
                let (b, o) = if round % 2 == 0 {
                    let b = batch_us(bare)?;
                    (b, batch_us(&mut *op)?)
                } else {
                    let o = batch_us(&mut *op)?;
                    (batch_us(bare)?, o)
                };
                ratios.push(o / b);
            }
            ratios.sort_by(f64::total_cmp);
            let q = |f: f64| ratios[((ratios.len() - 1) as f64 * f).round() as usize];
            println!(
                "paired {name:<21} {:>8.3} x empty_kernel (median of {PAIRED_ROUNDS} rounds; quartiles {:.3}-{:.3})",
                q(0.5),
                q(0.25),
                q(0.75)
            );
        }
    }
    Ok(())
}

/// Rounds of the paired figures.
const PAIRED_ROUNDS: usize = 101;

/// Host µs per call of [`HOST_OPS`] calls of `f`, after a synchronize.
fn batch_us(mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    cuda::synchronize(None)?;
    let t = Instant::now();
    for _ in 0..HOST_OPS {
        f()?;
    }
    Ok(t.elapsed().as_secs_f64() * 1e6 / HOST_OPS as f64)
}
