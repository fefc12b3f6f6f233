//! Where the host time of a small op goes (criterion): a 16-element `f32` add through the tensor
//! API, broken down into its parts, each beside a bare `cuLaunchKernel`.
//!
//! Group `small_op` (host time per call; criterion's iterations run in batches of [`HOST_OPS`]
//! calls, each batch after an untimed synchronize, so the launch queue never fills):
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
//! * `empty_tensor`: `Tensor::empty([16])` create + drop (no launch);
//! * `launch+X`: the bare launch followed by X, so that X runs with the caches as a launch
//!   leaves them (X alone runs hot): X = `empty_tensor`, `validate` (`KernelOp::validate`),
//!   `current_stream`, `ctx_get_current` (`cuCtxGetCurrent`).
//!
//! Group `small_op_paired` (`tensor_add`, `tensor_add_inplace`, `tensor_add_scalar`): each batch of
//! ops is timed right beside a batch of bare launches (in ABBA order, so drift cancels) and counts
//! as its ratio to them ([`PerBareLaunch`]), which is steadier than the ratio of two figures taken
//! apart; criterion reports the ratio ("× bare").
//!
//! Profiler modes, instead of criterion (the first argument): `small_op loop SECONDS` runs
//! `x.add(&y)` for that long, `small_op empty N` makes and drops N small tensors, `small_op add N`
//! runs N adds, `small_op bare N` N bare launches. Needs `CUDASEM_DRIVER=cuda` for the kernel
//! figures; on the sim driver only the tensor figures run.

use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{Criterion, Throughput};
use cudasem::cuda::{self, Stream, StreamGuard};
use cudasem::driver::{DevicePtr, StreamId};
use cudasem::kernel::{BinaryOp, BufferView, KernelOp};
use cudasem::{DType, Result, Tensor};
use std::time::{Duration, Instant};

/// Calls per timed batch (each batch starts after a synchronize).
const HOST_OPS: u64 = 200;

#[repr(C)]
#[derive(Clone, Copy)]
struct P64([u64; 8]);

#[repr(C)]
#[derive(Clone, Copy)]
struct P32([u64; 4]);

#[derive(Clone, Copy)]
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

/// Host time of `iters` calls of `f`, in batches of [`HOST_OPS`] calls, each batch after an
/// untimed synchronize.
fn host_time(iters: u64, f: &mut dyn FnMut() -> Result<()>) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(HOST_OPS);
        cuda::synchronize(None).expect("synchronize");
        let t = Instant::now();
        for _ in 0..n {
            f().expect("the timed call");
        }
        total += t.elapsed();
        left -= n;
    }
    cuda::synchronize(None).expect("synchronize");
    total
}

/// Host ns per call of a batch of `n` calls of `f`, after a synchronize.
fn batch_ns(n: u64, f: &mut dyn FnMut() -> Result<()>) -> f64 {
    host_time(n, f).as_nanos() as f64 / n as f64
}

/// A criterion measurement in bare launches: each batch of ops counts as its host time scaled by
/// `nominal_ns / bare_ns`, where `bare_ns` is the per-launch time of a batch of bare launches timed
/// right beside it. Values stay time-like (criterion plans its iterations with them); the
/// formatter divides by `nominal_ns`, so the figure reads as a ratio, "× bare".
struct PerBareLaunch {
    /// A bare launch's host ns, measured once before the group.
    nominal_ns: f64,
}

impl Measurement for PerBareLaunch {
    type Intermediate = Instant;
    type Value = f64;
    fn start(&self) -> Instant {
        Instant::now()
    }
    /// Plain ns (only `Bencher::iter` uses it; the paired figures measure with `iter_custom`).
    fn end(&self, t: Instant) -> f64 {
        t.elapsed().as_nanos() as f64
    }
    fn add(&self, a: &f64, b: &f64) -> f64 {
        a + b
    }
    fn zero(&self) -> f64 {
        0.0
    }
    fn to_f64(&self, v: &f64) -> f64 {
        *v
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        self
    }
}

impl ValueFormatter for PerBareLaunch {
    fn scale_values(&self, _typical: f64, values: &mut [f64]) -> &'static str {
        values.iter_mut().for_each(|v| *v /= self.nominal_ns);
        "× bare"
    }
    fn scale_throughputs(&self, typical: f64, _: &Throughput, values: &mut [f64]) -> &'static str {
        self.scale_values(typical, values)
    }
    fn scale_for_machines(&self, values: &mut [f64]) -> &'static str {
        self.scale_values(0.0, values);
        "bare_launches"
    }
}

/// `iters` calls of `op`, in batches each timed beside a batch of `bare` launches (ABBA order),
/// as [`PerBareLaunch`] values.
fn paired(
    iters: u64,
    nominal_ns: f64,
    op: &mut dyn FnMut() -> Result<()>,
    bare: &mut dyn FnMut() -> Result<()>,
) -> f64 {
    let (mut value, mut left, mut round) = (0.0, iters, 0);
    while left > 0 {
        let n = left.min(HOST_OPS);
        let (o, b) = if round % 2 == 0 {
            let b = batch_ns(HOST_OPS, bare);
            (batch_ns(n, op), b)
        } else {
            let o = batch_ns(n, op);
            (o, batch_ns(HOST_OPS, bare))
        };
        value += o * n as f64 * nominal_ns / b;
        left -= n;
        round += 1;
    }
    value
}

/// The profiler modes (`loop SECONDS`, `empty N`, `add N`, `bare N`).
fn profile(mode: &str, count: Option<&String>, x: &Tensor, y: &Tensor) -> Result<()> {
    if mode == "loop" {
        let secs: f64 = count.and_then(|s| s.parse().ok()).unwrap_or(5.0);
        let t = Instant::now();
        let mut n = 0u64;
        while t.elapsed().as_secs_f64() < secs {
            for _ in 0..HOST_OPS {
                drop(x.add(y)?);
            }
            cuda::synchronize(None)?;
            n += HOST_OPS;
        }
        println!("{n} adds in {secs} s");
        return Ok(());
    }
    let kernels = if mode == "bare" { Kernels::new() } else { None };
    if mode == "bare" && kernels.is_none() {
        return Err(cudasem::Error::Unsupported {
            op: "bench bare",
            driver: "sim",
            reason: "bare needs CUDASEM_DRIVER=cuda".into(),
        });
    }
    let n: usize = count.and_then(|s| s.parse().ok()).unwrap_or(100_000);
    for _ in 0..n {
        match (mode, &kernels) {
            ("empty", _) => drop(Tensor::empty([16], DType::F32, "cuda")?),
            ("bare", Some(k)) => k.launch(k.empty, std::ptr::null_mut())?,
            _ => drop(x.add(y)?),
        }
    }
    cuda::synchronize(None)?;
    println!("{n} x {mode}");
    Ok(())
}

/// The named host figures: `(name, call)`, the kernel ones only with `kernels`.
type Figure<'a> = (&'static str, Box<dyn FnMut() -> Result<()> + 'a>);

fn figures<'a>(kernels: Option<Kernels>, x: &'a Tensor, y: &'a Tensor, z: &'a Tensor) -> Result<Vec<Figure<'a>>> {
    let view = |t: &Tensor| BufferView {
        ptr: DevicePtr(t.data_ptr()),
        dtype: DType::F32,
        shape: [16].into(),
        strides: [1].into(),
        offset: 0,
    };
    let op = KernelOp::Binary { op: BinaryOp::Add, lhs: view(x), rhs: view(y), dst: view(z), compute: DType::F32 };
    let drv = cudasem::testing::driver()?;
    let stream = StreamId(cuda::current_stream(None)?.id());
    let null = std::ptr::null_mut();
    let mut out: Vec<Figure<'a>> = Vec::new();
    if let Some(k) = kernels {
        // out, in0, in1, in2, n, value, (vec, pad)
        let ew = [z.data_ptr(), x.data_ptr(), y.data_ptr(), 0, 16, 0, 0, 0];
        out.push(("empty_kernel", Box::new(move || k.launch(k.empty, null))));
        out.push(("empty_kernel_param64", Box::new(move || k.launch(k.param, null))));
        out.push(("empty_kernel_nonblocking", Box::new(move || k.launch(k.empty, k.nonblocking))));
        out.push(("empty_kernel_256t", Box::new(move || k.launch_with(k.empty, null, 256, None))));
        out.push(("empty_kernel_param32", Box::new(move || k.launch(k.param32, null))));
        out.push(("add_kernel_bare", Box::new(move || k.launch_with(k.add, null, 256, Some(ew)))));
    }
    let dop = op.clone();
    out.push(("driver_launch", Box::new(move || drv.launch(stream, &dop))));
    out.push(("tensor_add", Box::new(move || x.add(y).map(drop))));
    out.push(("tensor_add_inplace", Box::new(move || z.add_(y))));
    out.push(("tensor_add_scalar", Box::new(move || x.add(2.0).map(drop))));
    out.push(("empty_tensor", Box::new(|| Tensor::empty([16], DType::F32, "cuda").map(drop))));
    if let Some(k) = kernels {
        let bare = move || k.launch(k.empty, std::ptr::null_mut());
        out.push((
            "launch+empty_tensor",
            Box::new(move || bare().and_then(|_| Tensor::empty([16], DType::F32, "cuda").map(drop))),
        ));
        out.push(("launch+validate", Box::new(move || bare().and_then(|_| op.validate()))));
        out.push((
            "launch+current_stream",
            Box::new(move || bare().and_then(|_| cuda::current_stream(None).map(drop))),
        ));
        out.push((
            "launch+ctx_get_current",
            Box::new(move || {
                bare()?;
                cudarc::driver::result::ctx::get_current().map(drop).map_err(err)
            }),
        ));
    }
    Ok(out)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let x = Tensor::rand([16], DType::F32, "cuda")?;
    let y = Tensor::rand([16], DType::F32, "cuda")?;
    let z = Tensor::empty([16], DType::F32, "cuda")?;
    if let Some(mode) = args.get(1).filter(|a| ["loop", "empty", "add", "bare"].contains(&a.as_str())) {
        return profile(mode, args.get(2), &x, &y);
    }
    println!("small_op on the {} driver ({})", cuda::driver_name(), cuda::get_device_name(None).unwrap_or_default());
    let kernels = if cuda::driver_name() == "cuda" { Kernels::new() } else { None };
    let pool = Stream::new(None, 0)?;

    let mut c = Criterion::default().configure_from_args();
    let mut group = c.benchmark_group("small_op");
    for (name, mut f) in figures(kernels, &x, &y, &z)? {
        group.bench_function(name, |b| b.iter_custom(|iters| host_time(iters, &mut f)));
    }
    group.bench_function("tensor_add_pool_stream", |b| {
        let _g = StreamGuard::new(&pool).expect("a guard");
        b.iter_custom(|iters| host_time(iters, &mut || x.add(&y).map(drop)))
    });
    group.finish();

    if let Some(k) = kernels {
        let mut bare = move || k.launch(k.empty, std::ptr::null_mut());
        let nominal_ns = batch_ns(10 * HOST_OPS, &mut bare);
        let mut p = Criterion::default().with_measurement(PerBareLaunch { nominal_ns }).configure_from_args();
        let mut group = p.benchmark_group("small_op_paired");
        for (name, op) in [
            ("tensor_add", &mut (|| x.add(&y).map(drop)) as &mut dyn FnMut() -> Result<()>),
            ("tensor_add_inplace", &mut || z.add_(&y)),
            ("tensor_add_scalar", &mut || x.add(2.0).map(drop)),
        ] {
            group.bench_function(name, |b| b.iter_custom(|iters| paired(iters, nominal_ns, op, &mut bare)));
        }
        group.finish();
        p.final_summary();
    }
    c.final_summary();
    Ok(())
}
