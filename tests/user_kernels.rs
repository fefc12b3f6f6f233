//! Your own CUDA kernels (`cuda::compile_kernel`, `torch.cuda._compile_kernel`): a kernel
//! computes what its CUDA source says on the CUDA driver and what its host twin says on the
//! simulated machine (the two compute the same thing here), on random data against a float64
//! reference; bad launches are typed errors that leave the runtime usable; a captured launch
//! replays over the memory it captured, its input kept alive by the graph.
//!
//! A capture in global mode refuses other threads' blocking calls, so the tests take turns.

mod common;

use cudasem::cuda::{self, compile_kernel, CUDAGraph, GraphOptions, HostLaunch, Kernel, KernelArg};
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
    Ok(compile_kernel(SAXPY, "saxpy", &[])?.with_host_twin(saxpy_twin))
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
    let bare = compile_kernel(SAXPY, "saxpy", &[])?;
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
    for name in ["", "saxpy2", "sa xpy"] {
        common::assert_invalid_argument(compile_kernel(SAXPY, name, &[]), "compile_kernel");
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
    let args = [KernelArg::read(&cpu), KernelArg::read_write(&y), 1.0f32.into(), 32i32.into()];
    assert!(matches!(k.launch(1u32, 32u32, 0, &args), Err(Error::DeviceMismatch { .. })), "a CPU tensor first");
    let args = [KernelArg::read_write(&y), KernelArg::read(&cpu), 1.0f32.into(), 32i32.into()];
    assert!(matches!(k.launch(1u32, 32u32, 0, &args), Err(Error::DeviceMismatch { .. })), "a CPU tensor second");
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
