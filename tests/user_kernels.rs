//! Your own CUDA kernels (`cuda::compile_kernel`, `torch.cuda._compile_kernel`): a kernel
//! computes what its CUDA source says on the CUDA driver and what its host twin says on the
//! simulated machine (the two compute the same thing here), on random data against a float64
//! reference; bad launches are typed errors that leave the runtime usable; a captured launch
//! replays over the memory it captured, its input kept alive by the graph.
//!
//! A capture in global mode refuses other threads' blocking calls, so the tests take turns.

mod common;

use cudasem::cuda::{self, compile_kernel, CUDAGraph, CompileOptions, GraphOptions, HostLaunch, Kernel, KernelArg};
use cudasem::{Device, Error, Result, Tensor};
use std::sync::{Mutex, MutexGuard};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> Option<MutexGuard<'static, ()>> {
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    common::one_device().then_some(g)
}

const SAXPY: &str = r#"
extern "C" __global__ void saxpy(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"#;

/// `y = a * x + y` on the host, as the CUDA kernel computes it.
fn saxpy_twin(l: &mut HostLaunch) -> Result<()> {
    let (x, mut y) = (l.read::<f32>(0)?, l.read::<f32>(1)?);
    let (a, n) = (l.scalar::<f32>(2)?, l.scalar::<i32>(3)? as usize);
    let threads = (l.grid().x * l.block().x) as usize;
    for i in 0..n.min(threads).min(y.len()) {
        y[i] += a * x[i];
    }
    l.write(1, &y)
}

fn saxpy() -> Result<Kernel> {
    Ok(compile_kernel(SAXPY, "saxpy", CompileOptions::default())?.with_host_twin(saxpy_twin))
}

/// Random f32 data in [-4, 4) (a fixed seed per call).
fn data(seed: u64, n: usize) -> Vec<f32> {
    let mut rng = common::TestRng::new(seed);
    (0..n).map(|_| ((rng.next_u64() % 8000) as f32 - 4000.0) / 1000.0).collect()
}

/// Checks `got` against `a * x + y` in float64.
fn check_saxpy(got: &[f32], a: f32, x: &[f32], y: &[f32]) {
    assert_eq!(got.len(), x.len());
    for (i, ((g, xv), yv)) in got.iter().zip(x).zip(y).enumerate() {
        let want = a as f64 * *xv as f64 + *yv as f64;
        let tol = 1e-6 * (a as f64 * *xv as f64).abs().max(yv.abs() as f64) * 4.0 + 1e-6;
        assert!((*g as f64 - want).abs() <= tol, "element {i}: {g} vs {want}");
    }
}

fn launch_saxpy(k: &Kernel, x: &Tensor, y: &Tensor, a: f32, n: usize) -> Result<()> {
    let grid = n.div_ceil(128) as u32;
    k.launch(grid, 128u32, 0, &[KernelArg::read(x), KernelArg::read_write(y), a.into(), (n as i32).into()])
}

#[test]
fn saxpy_matches_a_float64_reference_on_random_data() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let k = saxpy()?;
    assert_eq!(k.name(), "saxpy");
    for (seed, n) in [(1u64, 1usize), (2, 1000), (3, 4097)] {
        let (xh, yh) = (data(seed, n), data(seed + 100, n));
        let x = Tensor::from_slice(&xh, [n], Device::cuda(0))?;
        let y = Tensor::from_slice(&yh, [n], Device::cuda(0))?;
        let a = 0.5 + seed as f32;
        launch_saxpy(&k, &x, &y, a, n)?;
        check_saxpy(&y.to_vec::<f32>()?, a, &xh, &yh);
        assert_eq!(x.to_vec::<f32>()?, xh, "x is only read");
    }
    Ok(())
}

#[test]
fn a_launch_without_a_host_twin_is_a_typed_error_on_the_sim() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let bare = compile_kernel(SAXPY, "saxpy", CompileOptions::default())?;
    let (xh, yh) = (data(7, 300), data(8, 300));
    let x = Tensor::from_slice(&xh, [300], Device::cuda(0))?;
    let y = Tensor::from_slice(&yh, [300], Device::cuda(0))?;
    let r = launch_saxpy(&bare, &x, &y, 2.0, 300);
    if common::is_sim() {
        match r {
            Err(Error::Unsupported { reason, .. }) => assert!(reason.contains("host twin"), "{reason}"),
            other => panic!("expected Unsupported naming the missing host twin, got {other:?}"),
        }
        assert_eq!(y.to_vec::<f32>()?, yh, "nothing ran");
    } else {
        r?;
        check_saxpy(&y.to_vec::<f32>()?, 2.0, &xh, &yh);
    }
    // The runtime stays usable: the same kernel with a twin runs.
    let y2 = Tensor::from_slice(&yh, [300], Device::cuda(0))?;
    launch_saxpy(&saxpy()?, &x, &y2, 3.0, 300)?;
    check_saxpy(&y2.to_vec::<f32>()?, 3.0, &xh, &yh);
    Ok(())
}

#[test]
fn bad_names_and_shapes_are_typed_errors() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    for name in ["", "saxpy2", "sa xpy", "2saxpy"] {
        common::assert_invalid_argument(compile_kernel(SAXPY, name, CompileOptions::default()), "compile_kernel");
    }
    let k = saxpy()?;
    let x = Tensor::from_slice(&data(9, 64), [64], Device::cuda(0))?;
    let y = Tensor::from_slice(&data(10, 64), [64], Device::cuda(0))?;
    let args = [KernelArg::read(&x), KernelArg::read_write(&y), 1.0f32.into(), 64i32.into()];
    common::assert_invalid_argument(k.launch(1u32, 2048u32, 0, &args), "launch");
    common::assert_invalid_argument(k.launch(1u32, (8u32, 8, 128), 0, &args), "launch");
    common::assert_invalid_argument(k.launch((1u32, 70000), 32u32, 0, &args), "launch");
    common::assert_invalid_argument(k.launch(0u32, 32u32, 0, &args), "launch");
    common::assert_invalid_argument(k.launch(1u32, 32u32, 64 << 10, &args), "launch");
    let yh = y.to_vec::<f32>()?;
    k.launch(1u32, 64u32, 0, &args)?;
    check_saxpy(&y.to_vec::<f32>()?, 1.0, &x.to_vec::<f32>()?, &yh);
    Ok(())
}

#[test]
fn cpu_tensors_and_tensors_of_another_device_are_refused() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let k = saxpy()?;
    let xh = data(11, 32);
    let y = Tensor::from_slice(&data(12, 32), [32], Device::cuda(0))?;
    let cpu = Tensor::from_slice(&xh, [32], Device::Cpu)?;
    // Pageable host memory is out of a kernel's reach (pinned memory is not: see below).
    let args = [KernelArg::read(&cpu), KernelArg::read_write(&y), 1.0f32.into(), 32i32.into()];
    common::assert_invalid_argument(k.launch(1u32, 32u32, 0, &args), "launch");
    let args = [KernelArg::read_write(&y), KernelArg::read(&cpu), 1.0f32.into(), 32i32.into()];
    common::assert_invalid_argument(k.launch(1u32, 32u32, 0, &args), "launch");
    if common::two_devices() {
        let other = Tensor::from_slice(&xh, [32], Device::cuda(1))?;
        let peer = cuda::is_peer_access_enabled(0, 1)?;
        let args = [KernelArg::read(&other), KernelArg::read_write(&y), 1.0f32.into(), 32i32.into()];
        let r = k.launch_on(&cuda::current_stream(0)?, 1u32, 32u32, 0, &args);
        if !peer {
            assert!(matches!(r, Err(Error::DeviceMismatch { .. })), "a tensor of cuda:1 on cuda:0: {r:?}");
        }
    }
    let yh = y.to_vec::<f32>()?;
    let x = Tensor::from_slice(&xh, [32], Device::cuda(0))?;
    launch_saxpy(&k, &x, &y, 1.5, 32)?;
    check_saxpy(&y.to_vec::<f32>()?, 1.5, &xh, &yh);
    Ok(())
}

#[test]
fn a_captured_launch_replays_over_new_data_with_its_input_kept_alive() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let k = saxpy()?;
    let n = 777;
    let xh = data(20, n);
    let x = Tensor::from_slice(&xh, [n], Device::cuda(0))?;
    let y = Tensor::from_slice(&data(21, n), [n], Device::cuda(0))?;
    let mut g = CUDAGraph::new();
    cuda::graph(&mut g, GraphOptions::default(), || launch_saxpy(&k, &x, &y, -1.25, n))?;
    drop(x);
    for seed in [22u64, 23] {
        let yh = data(seed, n);
        y.copy_(&Tensor::from_slice(&yh, [n], Device::cuda(0))?, false)?;
        g.replay()?;
        check_saxpy(&y.to_vec::<f32>()?, -1.25, &xh, &yh);
    }
    Ok(())
}

/// `kernel` refusing `args` with `InvalidArgument` naming `what`, and nothing run.
#[track_caller]
fn assert_refused(k: &Kernel, args: &[KernelArg], what: &str) {
    match k.launch(1u32, 64u32, 0, args) {
        Err(Error::InvalidArgument { op: "launch", reason }) => assert!(reason.contains(what), "{what:?} in: {reason}"),
        other => panic!("expected InvalidArgument naming {what:?}, got {other:?}"),
    }
}

#[test]
fn wrong_argument_counts_and_types_are_typed_errors_on_every_driver() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let k = saxpy()?;
    assert_eq!(k.num_params(), Some(4), "read from the CUDA C declaration");
    let (xh, yh) = (data(30, 64), data(31, 64));
    let x = Tensor::from_slice(&xh, [64], Device::cuda(0))?;
    let y = Tensor::from_slice(&yh, [64], Device::cuda(0))?;
    let x64 = x.to_dtype(cudasem::DType::F64)?;
    let (rx, ry) = (KernelArg::read(&x), KernelArg::read_write(&y));
    assert_refused(&k, &[rx, ry, 1.0f32.into()], "takes 4 arguments");
    assert_refused(&k, &[rx, ry, 1.0f32.into(), 64i32.into(), 0i32.into()], "takes 4 arguments");
    assert_refused(&k, &[KernelArg::read(&x64), ry, 1.0f32.into(), 64i32.into()], "F32 tensor");
    assert_refused(&k, &[rx, ry, 1.0f64.into(), 64i32.into()], "takes `float`");
    assert_refused(&k, &[rx, ry, 1.0f32.into(), 64i64.into()], "takes `int`");
    assert_refused(&k, &[rx, 2.0f32.into(), 1.0f32.into(), 64i32.into()], "takes a tensor");
    assert_refused(&k, &[rx, ry, KernelArg::read(&x), 64i32.into()], "takes a scalar");
    assert_eq!(y.to_vec::<f32>()?, yh, "nothing ran");
    // The runtime goes on: the right arguments run.
    k.launch(1u32, 64u32, 0, &[rx, ry, 0.75f32.into(), 64i32.into()])?;
    check_saxpy(&y.to_vec::<f32>()?, 0.75, &xh, &yh);
    // A signature a template makes uncertain is not checked (no false errors).
    let templated =
        "template <typename T> __device__ void t(T* x) { x[0] = T(1); }\nextern \"C\" __global__ void k(float* x) { t(x); }";
    let k2 = compile_kernel(templated, "k", CompileOptions::default())?;
    assert_eq!(k2.num_params(), Some(1));
    let macro_decl = "#define ARGS float* x, int n\nextern \"C\" __global__ void m(ARGS) {}";
    assert_eq!(compile_kernel(macro_decl, "m", CompileOptions::default())?.num_params(), None);
    Ok(())
}

#[test]
fn compile_options_reach_the_compiler() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let dir = std::env::temp_dir().join(format!("cudasem-uk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| Error::InvalidArgument { op: "test", reason: e.to_string() })?;
    std::fs::write(dir.join("offset.cuh"), "#define OFFSET 0.5f\n")
        .map_err(|e| Error::InvalidArgument { op: "test", reason: e.to_string() })?;
    let src = r#"#include "offset.cuh"
extern "C" __global__ void affine(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = helper(x[i]) * FACTOR + OFFSET;
}"#;
    let opts = CompileOptions::default()
        .header_code("__device__ float helper(float v) { return v - 1.0f; }")
        .nvcc_option("-DFACTOR=3.0f")
        .cuda_include_dir(&dir);
    let k = compile_kernel(src, "affine", opts)?.with_host_twin(|l| {
        let n = l.scalar::<i32>(1)? as usize;
        let x: Vec<f32> = l.read::<f32>(0)?.iter().take(n).map(|v| (v - 1.0) * 3.0 + 0.5).collect();
        l.write(0, &x)
    });
    assert_eq!(k.num_params(), Some(2));
    let xh = data(40, 100);
    let x = Tensor::from_slice(&xh, [100], Device::cuda(0))?;
    k.launch(1u32, 128u32, 0, &[KernelArg::read_write(&x), 100i32.into()])?;
    for (g, v) in x.to_vec::<f32>()?.iter().zip(&xh) {
        let want = (*v as f64 - 1.0) * 3.0 + 0.5;
        assert!((*g as f64 - want).abs() <= 1e-5 * want.abs().max(1.0), "{g} vs {want}");
    }
    if !common::is_sim() {
        // Without the options NVRTC does not know FACTOR: its log is the error.
        match compile_kernel(src, "affine", CompileOptions::default().cuda_include_dir(&dir)) {
            Err(Error::Driver { message, .. }) => assert!(message.contains("FACTOR"), "{message}"),
            other => panic!("expected NVRTC's error, got {other:?}"),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// `scale(float* x, float a, int n)`: `x[i] *= a` for `i < n`, written by hand (PTX 7.0).
const SCALE_PTX: &str = "
.version 7.0
.target sm_75
.address_size 64

.visible .entry scale(
	.param .u64 scale_param_0,
	.param .f32 scale_param_1,
	.param .u32 scale_param_2
)
{
	.reg .pred 	%p<2>;
	.reg .f32 	%f<4>;
	.reg .b32 	%r<6>;
	.reg .b64 	%rd<5>;

	ld.param.u64 	%rd1, [scale_param_0];
	ld.param.f32 	%f1, [scale_param_1];
	ld.param.u32 	%r2, [scale_param_2];
	mov.u32 	%r3, %ctaid.x;
	mov.u32 	%r4, %ntid.x;
	mov.u32 	%r5, %tid.x;
	mad.lo.s32 	%r1, %r3, %r4, %r5;
	setp.ge.s32 	%p1, %r1, %r2;
	@%p1 bra 	DONE;
	cvta.to.global.u64 	%rd2, %rd1;
	mul.wide.s32 	%rd3, %r1, 4;
	add.s64 	%rd4, %rd2, %rd3;
	ld.global.f32 	%f2, [%rd4];
	mul.f32 	%f3, %f2, %f1;
	st.global.f32 	[%rd4], %f3;
DONE:
	ret;
}
";

fn scale_twin(l: &mut HostLaunch) -> Result<()> {
    let (a, n) = (l.scalar::<f32>(1)?, l.scalar::<i32>(2)? as usize);
    let mut x = l.read::<f32>(0)?;
    x.iter_mut().take(n).for_each(|v| *v *= a);
    l.write(0, &x)
}

#[test]
fn a_kernel_from_ptx_runs_and_its_entry_checks_the_arguments() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let k = Kernel::from_ptx(SCALE_PTX, "scale")?.with_host_twin(scale_twin);
    assert_eq!(k.num_params(), Some(3));
    let xh = data(50, 1000);
    let x = Tensor::from_slice(&xh, [1000], Device::cuda(0))?;
    let n = 900; // the tail stays
    k.launch(8u32, 128u32, 0, &[KernelArg::read_write(&x), 1.5f32.into(), (n as i32).into()])?;
    let got = x.to_vec::<f32>()?;
    for (i, (g, v)) in got.iter().zip(&xh).enumerate() {
        let want = if i < n { *v as f64 * 1.5 } else { *v as f64 };
        assert!((*g as f64 - want).abs() <= 1e-6 * want.abs().max(1.0), "element {i}: {g} vs {want}");
    }
    let rw = KernelArg::read_write(&x);
    assert_refused(&k, &[rw, 1.5f32.into()], "takes 3 arguments");
    assert_refused(&k, &[rw, 1.5f64.into(), 4i32.into()], "has 4 bytes");
    assert_refused(&k, &[rw, 2i32.into(), 4i32.into()], "is floating-point");
    assert_refused(&k, &[rw, 1.5f32.into(), 4.0f32.into()], "is integer");
    assert_refused(&k, &[1.5f32.into(), 1.5f32.into(), 4i32.into()], "has 8 bytes");
    assert_eq!(x.to_vec::<f32>()?, got, "nothing ran");
    common::assert_invalid_argument(Kernel::from_ptx(SCALE_PTX, "missing"), "Kernel::from_ptx");
    common::assert_invalid_argument(Kernel::from_ptx("not ptx at all", "scale"), "Kernel::from_ptx");
    common::assert_invalid_argument(Kernel::from_ptx("\0.entry scale()", "scale"), "Kernel::from_ptx");
    if !common::is_sim() {
        let broken = SCALE_PTX.replace("mul.f32", "mul.nonsense");
        assert!(matches!(Kernel::from_ptx(&broken, "scale"), Err(Error::Driver { .. })), "the driver refuses bad PTX");
    }
    Ok(())
}

/// A minimal 64-bit CUDA ELF header whose string table names `name` (structurally a cubin; no
/// code).
fn fake_cubin(name: &str, machine: u16) -> Vec<u8> {
    let mut b = vec![0u8; 64];
    b[..4].copy_from_slice(b"\x7fELF");
    b[4] = 2; // 64-bit
    b[5] = 1; // little-endian
    b[18..20].copy_from_slice(&machine.to_le_bytes());
    b.push(0);
    b.extend_from_slice(name.as_bytes());
    b.push(0);
    b
}

#[test]
fn bad_cubin_images_are_typed_errors() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let bad =
        |img: &[u8], name: &str| common::assert_invalid_argument(Kernel::from_cubin(img, name), "Kernel::from_cubin");
    bad(b"", "k");
    bad(SCALE_PTX.as_bytes(), "scale"); // PTX is not a cubin
    bad(&fake_cubin("k", 62), "k"); // an x86-64 ELF
    bad(&fake_cubin("k", 190)[..40], "k"); // truncated
    bad(&fake_cubin("other", 190), "k"); // no such kernel
    let mut past_end = fake_cubin("k", 190);
    past_end[40..48].copy_from_slice(&4096u64.to_le_bytes()); // section headers past the end
    past_end[58..60].copy_from_slice(&64u16.to_le_bytes());
    past_end[60..62].copy_from_slice(&2u16.to_le_bytes());
    bad(&past_end, "k");
    let mut fatbin = 0xBA55_ED50u32.to_le_bytes().to_vec();
    fatbin.extend_from_slice(&[1, 0, 16, 0]);
    fatbin.extend_from_slice(&1000u64.to_le_bytes()); // says 1000 bytes follow; none do
    bad(&fatbin, "k");
    // A structurally whole image: the simulated machine runs its twin; the CUDA driver checks the
    // image itself and refuses this one (it holds no code).
    let r = Kernel::from_cubin(&fake_cubin("scale", 190), "scale");
    if common::is_sim() {
        let k = r?.with_host_twin(scale_twin);
        assert_eq!(k.num_params(), None, "a cubin's parameters cannot be read on the sim");
        let xh = data(60, 64);
        let x = Tensor::from_slice(&xh, [64], Device::cuda(0))?;
        k.launch(1u32, 64u32, 0, &[KernelArg::read_write(&x), (-2.0f32).into(), 64i32.into()])?;
        let want: Vec<f32> = xh.iter().map(|v| v * -2.0).collect();
        assert_eq!(x.to_vec::<f32>()?, want);
    } else {
        assert!(matches!(r, Err(Error::Driver { .. })), "the CUDA driver refuses an image without code: {r:?}");
    }
    // The runtime goes on.
    launch_saxpy(
        &saxpy()?,
        &Tensor::zeros([8], cudasem::DType::F32, Device::cuda(0))?,
        &Tensor::zeros([8], cudasem::DType::F32, Device::cuda(0))?,
        1.0,
        8,
    )?;
    Ok(())
}

#[test]
fn a_kernel_from_a_cubin_runs_and_the_driver_reports_its_parameters() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let cubin = match cudasem::testing::nvrtc_cubin(SAXPY, 0) {
        Ok(c) => c,
        Err(Error::Unsupported { reason, .. }) if common::is_sim() => {
            eprintln!("skipped: no CUBIN from NVRTC here ({reason})");
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    common::assert_invalid_argument(Kernel::from_cubin(&cubin, "missing"), "Kernel::from_cubin");
    common::assert_invalid_argument(Kernel::from_cubin(&cubin[..cubin.len() / 2], "saxpy"), "Kernel::from_cubin");
    let k = Kernel::from_cubin(&cubin, "saxpy")?.with_host_twin(saxpy_twin);
    let (xh, yh) = (data(90, 3000), data(91, 3000));
    let x = Tensor::from_slice(&xh, [3000], Device::cuda(0))?;
    let y = Tensor::from_slice(&yh, [3000], Device::cuda(0))?;
    launch_saxpy(&k, &x, &y, 0.25, 3000)?;
    check_saxpy(&y.to_vec::<f32>()?, 0.25, &xh, &yh);
    match k.num_params() {
        // The CUDA driver reports the parameters' sizes (12.4 and newer): the count is checked.
        Some(n) => {
            assert_eq!(n, 4);
            let (rx, ry) = (KernelArg::read(&x), KernelArg::read_write(&y));
            assert_refused(&k, &[rx, ry, 1.0f32.into()], "takes 4 arguments");
            assert_refused(&k, &[rx, ry, 1.0f64.into(), 4i32.into()], "has 4 bytes");
        }
        None => assert!(common::is_sim(), "the CUDA driver reports a cubin's parameters"),
    }
    Ok(())
}

#[test]
fn pinned_host_tensors_are_arguments_and_host_access_waits_for_the_kernel() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let k = saxpy()?;
    let n = 5000;
    let (xh, yh) = (data(70, n), data(71, n));
    // A pinned input read by the kernel, a device output.
    let x = Tensor::from_slice(&xh, [n], Device::Cpu)?.pin_memory()?;
    let y = Tensor::from_slice(&yh, [n], Device::cuda(0))?;
    launch_saxpy(&k, &x, &y, 1.25, n)?;
    check_saxpy(&y.to_vec::<f32>()?, 1.25, &xh, &yh);
    // A pinned output written by the kernel behind a delay: the host read waits for it.
    let xd = Tensor::from_slice(&xh, [n], Device::cuda(0))?;
    let yp = Tensor::from_slice(&yh, [n], Device::Cpu)?.pin_memory()?;
    let stream = cuda::current_stream(0)?;
    cudasem::testing::delay(&stream, common::ms(50))?;
    launch_saxpy(&k, &xd, &yp, -0.5, n)?;
    check_saxpy(&yp.to_vec::<f32>()?, -0.5, &xh, &yh);
    // A pinned tensor cannot pick the device: with only pinned tensors the current device runs it.
    let yp2 = Tensor::from_slice(&yh, [n], Device::Cpu)?.pin_memory()?;
    launch_saxpy(&k, &x, &yp2, 2.0, n)?;
    check_saxpy(&yp2.to_vec::<f32>()?, 2.0, &xh, &yh);
    Ok(())
}

/// 4 MiB of f32: a large-pool block, at the start of a fresh segment after `empty_cache`.
const BIG: usize = 1 << 20;

#[test]
fn a_launch_on_another_stream_records_the_stream_use() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let fill = compile_kernel(
        "extern \"C\" __global__ void fill(float* x, float v, int n) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) x[i] = v;\n}",
        "fill",
        CompileOptions::default(),
    )?
    .with_host_twin(|l| {
        let (v, n) = (l.scalar::<f32>(1)?, l.scalar::<i32>(2)? as usize);
        let mut x = l.read::<f32>(0)?;
        x.iter_mut().take(n).for_each(|e| *e = v);
        l.write(0, &x)
    });
    let (main, side) = common::stream_pair(0)?;
    common::warm_up(&main)?;
    common::warm_up(&side)?;
    let _g = cuda::StreamGuard::new(&main)?; // tensors are allocated on `main`
    common::retry_if_stalled(common::ms(300), |delay| {
        cuda::empty_cache()?;
        let t = Tensor::zeros([BIG], cudasem::DType::F32, Device::cuda(0))?;
        let block = t.data_ptr();
        side.wait_stream(&main)?;
        let queued = std::time::Instant::now();
        cudasem::testing::delay(&side, delay)?;
        let args = [KernelArg::write(&t), 7.0f32.into(), (BIG as i32).into()];
        fill.launch_on(&side, (BIG as u32).div_ceil(256), 256u32, 0, &args)?;
        drop(t); // no record_stream by hand: the launch recorded the use on `side`
        let u = Tensor::empty([BIG], cudasem::DType::F32, Device::cuda(0))?;
        let observed = common::assert_busy(
            u.data_ptr() != block,
            queued,
            delay,
            "the block was handed out again while a kernel on another stream still used it",
        );
        side.synchronize()?;
        let w = Tensor::empty([BIG], cudasem::DType::F32, Device::cuda(0))?;
        assert_eq!(w.data_ptr(), block, "once the kernel's stream finished, the block is reused");
        drop((u, w));
        Ok(observed)
    })?;
    // On its own stream nothing is recorded: the block is reused at once, in stream order.
    cuda::empty_cache()?;
    let t = Tensor::zeros([BIG], cudasem::DType::F32, Device::cuda(0))?;
    let block = t.data_ptr();
    fill.launch(
        ((BIG as u32).div_ceil(256), 1u32),
        256u32,
        0,
        &[KernelArg::write(&t), 3.0f32.into(), (BIG as i32).into()],
    )?;
    assert!(t.to_vec::<f32>()?.iter().all(|&v| v == 3.0));
    drop(t);
    assert_eq!(Tensor::empty([BIG], cudasem::DType::F32, Device::cuda(0))?.data_ptr(), block);
    Ok(())
}

#[test]
fn a_captured_launch_with_a_pinned_input_replays_with_both_kept_alive() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let k = Kernel::from_ptx(SCALE_PTX, "scale")?.with_host_twin(scale_twin);
    let sx = saxpy()?;
    let n = 513;
    let xh = data(80, n);
    let x = Tensor::from_slice(&xh, [n], Device::Cpu)?.pin_memory()?;
    let y = Tensor::zeros([n], cudasem::DType::F32, Device::cuda(0))?;
    let mut g = CUDAGraph::new();
    cuda::graph(&mut g, GraphOptions::default(), || {
        launch_saxpy(&sx, &x, &y, 1.0, n)?; // y += x (pinned)
        k.launch(
            ((n as u32).div_ceil(128), 1u32),
            128u32,
            0,
            &[KernelArg::read_write(&y), 3.0f32.into(), (n as i32).into()],
        )
    })?;
    drop(x);
    for round in 0..2 {
        let yh = data(81 + round, n);
        y.copy_(&Tensor::from_slice(&yh, [n], Device::cuda(0))?, false)?;
        g.replay()?;
        for (i, (got, (yv, xv))) in y.to_vec::<f32>()?.iter().zip(yh.iter().zip(&xh)).enumerate() {
            let want = (*yv as f64 + *xv as f64) * 3.0;
            assert!((*got as f64 - want).abs() <= 1e-5 * want.abs().max(1.0), "element {i}: {got} vs {want}");
        }
    }
    Ok(())
}
