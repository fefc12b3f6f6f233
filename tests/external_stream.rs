//! Native handles for interop (`Stream.cuda_stream`, `torch.cuda.ExternalStream`): a stream's raw
//! handle wraps back into the same stream; work of one's own on the raw handle is ordered with
//! cudasem's work on the stream; streams made elsewhere run cudasem's ops (CUDA driver only); the
//! simulated machine refuses what it cannot have with typed errors.

mod common;
mod tensor_util;

use common::{is_sim, last_device, TestRng};
use cudasem::cuda::{self, Stream, StreamGuard};
use cudasem::{DType, Error, Result, Tensor};

/// Random non-zero data and its float64 reference of `x * 3 + 1`.
fn data(seed: u64, n: usize) -> (Vec<f32>, Vec<f64>) {
    let mut rng = TestRng::new(seed);
    let x: Vec<f32> = (0..n).map(|_| (rng.next_u64() % 2000) as f32 / 100.0 - 9.995).collect();
    let reference = x.iter().map(|&v| v as f64 * 3.0 + 1.0).collect();
    (x, reference)
}

/// `x * 3 + 1` in f32 is two roundings of an op with a number: within that op's tolerance (the
/// default `atol` covers the cancellation near `x = -1/3`).
#[track_caller]
fn assert_close(got: &[f32], reference: &[f64]) {
    let got: Vec<f64> = got.iter().map(|&g| g as f64).collect();
    tensor_util::assert_close(&got, reference, "add_number", DType::F32, "x * 3 + 1");
}

/// `x * 3 + 1` on the current stream of `x`'s device.
fn compute(x: &Tensor) -> Result<Tensor> {
    &(x * 3.0)? + 1.0
}

#[test]
fn a_streams_raw_handle_wraps_back_into_the_same_stream() -> Result<()> {
    for device in [0, last_device()] {
        for priority in [0, -1] {
            let s = Stream::new(Some(device), priority)?;
            let raw = s.cuda_stream()?;
            if is_sim() {
                assert_eq!(raw, s.id(), "the simulated stream's native handle is its handle number");
            } else {
                assert_ne!(raw, 0, "a pool stream is not the null stream");
            }
            // SAFETY: the handle of a live cudasem stream, which lives for the whole process.
            let again = unsafe { Stream::from_external(raw, device)? };
            assert_eq!(again, s, "the same stream: equal handles");
            // SAFETY: the same live handle, its device named as `"cuda:N"`.
            let named = unsafe { Stream::from_external(raw, format!("cuda:{device}").as_str())? };
            assert_eq!(named, s, "a device named as a string resolves to the same stream");
            assert_eq!((again.device(), again.priority(), again.is_default()), (device, s.priority(), false));
            assert_eq!(again.cuda_stream()?, raw);
        }
        let d = cuda::default_stream(Some(device))?;
        let raw = d.cuda_stream()?;
        if !is_sim() {
            assert_eq!(raw, 0, "the default stream is the legacy null stream, as in PyTorch");
        }
        // SAFETY: the device's default stream (0 on CUDA) lives as long as the context.
        let again = unsafe { Stream::from_external(raw, device)? };
        assert!(again.is_default() && again == d, "{again:?} vs {d:?}");
    }
    Ok(())
}

#[test]
fn ops_run_on_a_wrapped_stream_as_the_current_stream() -> Result<()> {
    let device = last_device();
    let s = Stream::new(Some(device), 0)?;
    // SAFETY: as above: a live cudasem stream's handle.
    let wrapped = unsafe { Stream::from_external(s.cuda_stream()?, device)? };
    let (x, reference) = data(7, 4099);
    let y = {
        let _g = StreamGuard::new(&wrapped)?;
        assert_eq!(cuda::current_stream(Some(device))?, s, "the wrapped stream is the original one");
        let x = Tensor::from_slice(&x, [4099], format!("cuda:{device}").as_str())?;
        compute(&x)?
    };
    wrapped.synchronize()?;
    assert!(s.query()?, "waiting on the wrapped handle waited for the original stream");
    assert_close(&y.to_vec::<f32>()?, &reference);
    Ok(())
}

#[test]
fn what_the_simulated_machine_cannot_have_is_a_typed_error() -> Result<()> {
    if !is_sim() {
        eprintln!("skipped: the simulated machine's refusals (the {} driver is in use)", cuda::driver_name());
        return Ok(());
    }
    match cuda::primary_context("cuda") {
        Err(Error::Unsupported { op, driver, .. }) => assert_eq!((op, driver), ("primary_context", "sim")),
        other => panic!("primary_context on the simulated machine: expected Unsupported, got {other:?}"),
    }
    let foreign = 0xdead_0000_u64;
    // SAFETY: not a stream at all: the simulated machine checks its own handles and refuses it.
    match unsafe { Stream::from_external(foreign, 0) } {
        Err(e @ Error::Unsupported { .. }) => assert!(e.to_string().contains("0xdead0000"), "{e}"),
        other => panic!("a foreign handle on the simulated machine: expected Unsupported, got {other:?}"),
    }
    if cuda::device_count() >= 2 {
        let s1 = Stream::new(Some(1), 0)?;
        // SAFETY: a live cudasem stream's handle, named with the wrong device: refused.
        match unsafe { Stream::from_external(s1.cuda_stream()?, 0) } {
            Err(e @ Error::InvalidArgument { .. }) => assert!(e.to_string().contains("cuda:1"), "{e}"),
            other => panic!("a stream of cuda:1 named as cuda:0's: expected InvalidArgument, got {other:?}"),
        }
    }
    // SAFETY: any value: the device index is checked first.
    let bad = unsafe { Stream::from_external(0, cuda::device_count()) };
    assert!(matches!(bad, Err(Error::InvalidDevice { .. })), "{bad:?}");
    Ok(())
}

/// On the CUDA driver: one's own driver calls on cudasem's stream, with a tensor's `data_ptr`,
/// are ordered with cudasem's ops; and a stream made outside cudasem runs cudasem's ops.
#[test]
fn native_work_and_native_streams_interoperate_on_cuda() -> Result<()> {
    use cudarc::driver::{result as cu, sys};
    if is_sim() {
        eprintln!("skipped: needs the CUDA driver (CUDASEM_DRIVER=cuda on a GPU)");
        return Ok(());
    }
    let ctx = cuda::primary_context(0)?;
    assert_ne!(ctx, 0);
    // SAFETY: the device's primary context, retained by cudasem for the whole process.
    unsafe { cu::ctx::set_current(ctx as usize as sys::CUcontext) }.expect("cuCtxSetCurrent");

    // cudasem writes x, a native memset on the same stream overwrites its first half with
    // zeros, cudasem computes on it: the memset lands between the two, without a synchronize.
    let s = Stream::new(Some(0), 0)?;
    let (x, _) = data(11, 8192);
    let y = {
        let _g = StreamGuard::new(&s)?;
        let x = Tensor::from_slice(&x, [8192], "cuda:0")?;
        // Loading a kernel's module may wait for the device to go idle: load them all first.
        compute(&(&x * 2.0)?)?;
        cudasem::testing::delay(&s, std::time::Duration::from_millis(1))?;
        s.synchronize()?;
        // The kernel that writes `x` starts late: a memset that did not wait for it (on another
        // stream) would be overwritten, and the first half would not read as zeros.
        cudasem::testing::delay(&s, std::time::Duration::from_millis(20))?;
        let x = (&x * 2.0)?;
        // SAFETY: the first 4096 f32 of `x`, live until after the stream passed the memset
        // (`x` is dropped after `compute` is queued on the same stream).
        unsafe { cu::memset_d8_async(x.data_ptr(), 0, 4096 * 4, s.cuda_stream()? as usize as sys::CUstream) }
            .expect("cuMemsetD8Async");
        compute(&x)?
    };
    // `x * 2` then `* 3 + 1`: the second half is `6x + 1`, the zeroed first half 1.
    let mut reference: Vec<f64> = x.iter().map(|&v| v as f64 * 6.0 + 1.0).collect();
    reference[..4096].iter_mut().for_each(|r| *r = 1.0);
    s.synchronize()?; // `y` is read on the current stream, which is not `s` any more
    assert_close(&y.to_vec::<f32>()?, &reference);
    assert_eq!(y.dtype(), DType::F32);

    // A stream made outside cudasem, wrapped: cudasem's ops run on it.
    let native = cu::stream::create(cu::stream::StreamKind::NonBlocking).expect("cuStreamCreate");
    // SAFETY: a live stream of device 0's primary context, never destroyed (the process keeps it).
    let ext = unsafe { Stream::from_external(native as usize as u64, 0)? };
    assert_eq!(ext.cuda_stream()?, native as usize as u64);
    // SAFETY: the same live stream again: the same cudasem stream.
    assert_eq!(unsafe { Stream::from_external(native as usize as u64, None)? }, ext);
    let (x, reference) = data(12, 3000);
    let y = {
        let _g = StreamGuard::new(&ext)?;
        compute(&Tensor::from_slice(&x, [3000], "cuda:0")?)?
    };
    ext.synchronize()?;
    assert_close(&y.to_vec::<f32>()?, &reference);
    Ok(())
}
