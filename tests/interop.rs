//! Interop with other libraries' memory: `Tensor::from_blob` (libtorch's `torch::from_blob`) and
//! DLPack (`t.__dlpack__(stream=…)`, `torch.from_dlpack`).
//!
//! Properties checked, on the simulated machine and unchanged with `CUDASEM_DRIVER=cuda`:
//! 1. a tensor over memory made elsewhere views it without a copy (same `data_ptr`), in every layout
//!    (strided, offset), and works with ops, views, copies and a CUDA graph capture;
//! 2. its owner (the deleter) is dropped exactly once, when the last view is gone — not before;
//! 3. cudasem → DLPack → cudasem keeps the memory, shape, strides, offset and dtype (bf16, f16 and
//!    bool included), and the consumer's drop of the managed tensor runs its deleter once;
//! 4. the stream handshake: a consumer stream passed to `to_dlpack` sees the values written on the
//!    producer's stream, even while that stream is still busy;
//! 5. bad inputs are typed errors (and drop what they were given once), and the runtime goes on.

mod common;
mod tensor_util;

use common::{is_sim, last_device, ms, stream_pair, TestRng};
use cudasem::cuda::{self, CUDAGraph, CaptureErrorMode, GraphOptions, StreamGuard};
use cudasem::dlpark::versioned::Dlpack;
use cudasem::{DType, Device, DlpackStream, Error, Result, Tensor};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The tests share the devices' streams and one capture: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> Option<MutexGuard<'static, ()>> {
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    common::one_device().then_some(g)
}

/// Random non-zero f32 data (a fixed seed per test).
fn data(seed: u64, n: usize) -> Vec<f32> {
    let mut rng = TestRng::new(seed);
    (0..n).map(|_| ((rng.next_u64() % 2000) as f32 - 999.5) / 125.0).collect()
}

/// An owner that counts its drops.
struct Counted {
    drops: Arc<AtomicUsize>,
    _keep: Option<Tensor>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

fn counted(keep: Option<Tensor>) -> (Counted, Arc<AtomicUsize>) {
    let drops = Arc::new(AtomicUsize::new(0));
    (Counted { drops: drops.clone(), _keep: keep }, drops)
}

/// The elements of `values` (row-major, `cols` wide) that a view at `offset` with `shape` and
/// `strides` reaches, in its row-major order, as f64.
fn strided(values: &[f32], offset: usize, shape: [usize; 2], strides: [usize; 2]) -> Vec<f64> {
    let mut out = Vec::new();
    for i in 0..shape[0] {
        for j in 0..shape[1] {
            out.push(values[offset + i * strides[0] + j * strides[1]] as f64);
        }
    }
    out
}

fn as_f64(t: &Tensor) -> Result<Vec<f64>> {
    t.to_dtype(DType::F64)?.to_vec::<f64>()
}

/// `x * 3 + 1` against its float64 reference.
#[track_caller]
fn check_affine(x: &Tensor, reference: &[f64]) -> Result<()> {
    let got: Vec<f64> = as_f64(&(&(x * 3.0)? + 1.0)?)?;
    let want: Vec<f64> = reference.iter().map(|v| v * 3.0 + 1.0).collect();
    tensor_util::assert_close(&got, &want, "add_number", DType::F32, "x * 3 + 1 over foreign memory");
    Ok(())
}

#[test]
fn from_blob_views_memory_made_elsewhere_without_a_copy() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    for device in [0, last_device()] {
        let values = data(1 + device as u64, 6 * 8);
        let base = Tensor::from_slice(&values, [6, 8], Device::cuda(device))?;
        let (owner, drops) = counted(Some(base.clone()));
        // Rows 1.. and every other column: offset 8 elements, strides [8, 2].
        let ptr = base.data_ptr() + 8 * 4;
        // SAFETY: the 40 floats from `ptr` are `base`'s, alive while the owner (holding `base`) is.
        let t = unsafe { Tensor::from_blob(ptr, [5, 4], Some(&[8, 2]), DType::F32, Device::cuda(device), owner)? };
        assert_eq!((t.data_ptr(), t.shape(), t.stride()), (ptr, &[5, 4][..], &[8, 2][..]));
        assert_eq!(t.device(), Device::cuda(device));
        let reference = strided(&values, 8, [5, 4], [8, 2]);
        assert_eq!(as_f64(&t)?, reference, "the values are the memory's, read in place");
        check_affine(&t, &reference)?;
        // Views of it, and a write through it seen by the memory's own tensor.
        let tt = t.transpose(0, 1)?;
        assert_eq!(tt.data_ptr(), ptr);
        let col = t.narrow(1, 1, 1)?;
        col.fill_(0.5)?;
        let after = base.to_vec::<f32>()?;
        for i in 0..5 {
            assert_eq!(after[8 + i * 8 + 2], 0.5, "the write landed in the memory itself");
        }
        // A copy out of it is a new tensor; one into it writes the memory.
        let src = Tensor::from_slice(&data(30, 20), [5, 4], Device::cuda(device))?;
        t.copy_(&src, false)?;
        assert_eq!(strided(&base.to_vec::<f32>()?, 8, [5, 4], [8, 2]), as_f64(&src)?);
        record_stream_is_harmless(&t, device)?;
        drop((t, col, src));
        assert_eq!(drops.load(Ordering::SeqCst), 0, "a view (the transpose) is still alive");
        drop(tt);
        assert_eq!(drops.load(Ordering::SeqCst), 1, "the owner drops once, with the last view");
    }
    Ok(())
}

fn record_stream_is_harmless(t: &Tensor, device: usize) -> Result<()> {
    let (a, _) = stream_pair(device)?;
    t.record_stream(&a)?;
    Ok(())
}

#[test]
fn from_blob_tensors_are_captured_and_replayed() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let values = data(3, 256);
    let base = Tensor::from_slice(&values, [256], Device::cuda(0))?;
    let (owner, drops) = counted(Some(base.clone()));
    // SAFETY: `base`'s 256 floats, alive while the owner is.
    let x = unsafe { Tensor::from_blob(base.data_ptr(), [16, 16], None, DType::F32, Device::cuda(0), owner)? };
    let mut g = CUDAGraph::new();
    let options = GraphOptions { capture_error_mode: CaptureErrorMode::ThreadLocal, ..GraphOptions::default() };
    let y = cuda::graph(&mut g, options, || &(&x * 3.0)? + 1.0)?;
    drop(x);
    let fresh = data(4, 256);
    base.copy_(&Tensor::from_slice(&fresh, [256], Device::cuda(0))?, false)?;
    g.replay()?;
    let reference: Vec<f64> = fresh.iter().map(|&v| v as f64 * 3.0 + 1.0).collect();
    tensor_util::assert_close(&as_f64(&y)?, &reference, "add_number", DType::F32, "replay over foreign memory");
    assert_eq!(drops.load(Ordering::SeqCst), 0, "the graph keeps the captured tensor's memory alive");
    drop(g);
    drop(y);
    assert_eq!(drops.load(Ordering::SeqCst), 1, "released with the graph");
    Ok(())
}

#[test]
fn from_blob_bad_inputs_are_typed_errors_and_drop_the_owner_once() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let base = Tensor::from_slice(&data(5, 64), [64], Device::cuda(0))?;
    let p = base.data_ptr();
    // An address no allocator hands out (the first pages are never mapped): unknown to the sim and to CUDA.
    let unknown = 0x10000;
    type Case = (&'static str, u64, Vec<usize>, Option<Vec<usize>>, DType, Device);
    let mut cases: Vec<Case> = vec![
        ("null", 0, vec![4], None, DType::F32, Device::cuda(0)),
        ("misaligned", p + 2, vec![4], None, DType::F32, Device::cuda(0)),
        ("strides of another rank", p, vec![4, 4], Some(vec![4]), DType::F32, Device::cuda(0)),
        ("extent past 2^64", p, vec![3, 4], Some(vec![usize::MAX / 2, 1]), DType::F32, Device::cuda(0)),
        ("host memory", p, vec![4], None, DType::F32, Device::Cpu),
        ("no such device", p, vec![4], None, DType::F32, Device::cuda(64)),
        ("unknown address", unknown, vec![8], None, DType::F64, Device::cuda(0)),
    ];
    if last_device() > 0 {
        cases.push(("another device's memory", p, vec![4], None, DType::F32, Device::cuda(last_device())));
    }
    for (what, ptr, shape, strides, dtype, device) in cases {
        let (owner, drops) = counted(None);
        // SAFETY: every case is refused before the memory is used (what the test checks).
        let r = unsafe { Tensor::from_blob(ptr, shape.as_slice(), strides.as_deref(), dtype, device, owner) };
        let e = r.err().unwrap_or_else(|| panic!("{what}: accepted"));
        let expected = match what {
            "null" | "misaligned" | "host memory" => "InvalidArgument",
            "strides of another rank" | "extent past 2^64" => "InvalidShape",
            "no such device" => "InvalidDevice",
            _ => "InvalidPointer",
        };
        assert_eq!(e.variant_name(), expected, "{what}: {e}");
        assert_eq!(drops.load(Ordering::SeqCst), 1, "{what}: the owner is dropped once on the error");
    }
    // An empty tensor checks no memory, and the runtime goes on.
    let (owner, _) = counted(None);
    // SAFETY: an empty tensor reaches no memory.
    let empty = unsafe { Tensor::from_blob(0, [0, 3], None, DType::F32, Device::cuda(0), owner)? };
    assert_eq!(empty.numel(), 0);
    assert_eq!(base.sum_all()?.cpu()?.item::<f32>()?, base.cpu()?.sum_all()?.item::<f32>()?);
    Ok(())
}

#[test]
fn dlpack_round_trips_keep_memory_layout_and_dtype() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let values = data(7, 6 * 10);
    for dtype in DType::ALL {
        let src = Tensor::from_slice(&values, [6, 10], Device::cuda(0))?.to_dtype(dtype)?;
        let views = [
            ("contiguous", src.clone()),
            ("transposed", src.transpose(0, 1)?),
            ("strided", src.slice_step(1, 1.., 3)?),
            ("offset", src.narrow(0, 2, 3)?),
        ];
        for (what, view) in views {
            let managed = view.to_dlpack(&DlpackStream::LegacyDefault)?;
            let desc = managed.validate().expect("a valid descriptor");
            assert_eq!(desc.byte_offset(), (view.storage_offset() * dtype.size()) as u64, "{dtype} {what}");
            assert_eq!(desc.dtype().bits as usize, dtype.size() * 8, "{dtype} {what}");
            // Through a raw pointer, as through a Python capsule.
            let raw = managed.into_raw();
            // SAFETY: `raw` came from `into_raw` just now and is owned here.
            let managed = unsafe { Dlpack::from_raw(raw) }.expect("a versioned tensor of the current ABI");
            let back = Tensor::from_dlpack(managed)?;
            assert_eq!(back.data_ptr(), view.data_ptr(), "{dtype} {what}: no copy");
            assert_eq!((back.shape(), back.stride(), back.dtype()), (view.shape(), view.stride(), dtype));
            assert_eq!(as_f64(&back)?, as_f64(&view)?, "{dtype} {what}: the same elements");
        }
        if dtype == DType::F32 {
            let back = Tensor::from_dlpack(src.slice_step(1, 1.., 3)?.to_dlpack(&DlpackStream::NoSync)?)?;
            check_affine(&back, &strided(&values, 1, [6, 3], [10, 3]))?;
        }
    }
    Ok(())
}

#[test]
fn dlpack_deleters_run_once_when_the_last_view_is_gone() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let base = Tensor::from_slice(&data(9, 32), [4, 8], Device::cuda(0))?;
    let (owner, drops) = counted(Some(base.clone()));
    // SAFETY: `base`'s 32 floats, alive while the owner is.
    let t = unsafe { Tensor::from_blob(base.data_ptr(), [4, 8], None, DType::F32, Device::cuda(0), owner)? };
    let managed = t.to_dlpack(&DlpackStream::LegacyDefault)?;
    drop(t);
    assert_eq!(drops.load(Ordering::SeqCst), 0, "the managed tensor keeps the memory alive");
    let imported = Tensor::from_dlpack(managed)?;
    let view = imported.transpose(0, 1)?;
    drop(imported);
    assert_eq!(drops.load(Ordering::SeqCst), 0, "a view of the import keeps the producer's tensor");
    assert_eq!(view.to_vec::<f32>()?, base.transpose(0, 1)?.contiguous()?.to_vec::<f32>()?);
    drop(view);
    assert_eq!(drops.load(Ordering::SeqCst), 1, "the deleter ran once, with the last view");
    // A consumer that never imports drops the managed tensor: the deleter runs then.
    let (owner, drops) = counted(Some(base.clone()));
    // SAFETY: as above.
    let t = unsafe { Tensor::from_blob(base.data_ptr(), [32], None, DType::F32, Device::cuda(0), owner)? };
    let managed = t.to_dlpack(&DlpackStream::NoSync)?;
    drop(t);
    drop(managed);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    Ok(())
}

#[test]
fn the_consumer_stream_waits_for_the_producers_work() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let device = last_device();
    let (producer, consumer) = stream_pair(device)?;
    let n = 4096;
    let x = Tensor::from_slice(&data(11, n), [n], Device::cuda(device))?;
    cuda::synchronize(Some(device))?;
    let fresh = data(12, n);
    let update = Tensor::from_slice(&fresh, [n], Device::cuda(device))?;
    cuda::synchronize(Some(device))?;
    let managed = {
        let _g = StreamGuard::new(&producer)?;
        // The producer's stream is busy, then writes x: nothing of it has run when we export.
        cudasem::testing::delay(&producer, ms(300))?;
        x.copy_(&update, false)?;
        x.to_dlpack(&DlpackStream::Stream(consumer.clone()))?
    };
    let _g = StreamGuard::new(&consumer)?;
    let seen = Tensor::from_dlpack(managed)?;
    // Read on the consumer's stream (the current one): ordered after the producer's write only by
    // the handshake.
    assert_eq!(seen.to_vec::<f32>()?, fresh, "the consumer's read sees the producer's write");
    drop(_g);
    // DLPack's integers: the raw handle of the consumer's stream names it.
    let raw = consumer.cuda_stream()? as i64;
    // SAFETY: the handle of a cudasem pool stream, alive for the whole process.
    let named = unsafe { DlpackStream::from_raw(Some(raw), device)? };
    assert_eq!(named, DlpackStream::Stream(consumer.clone()));
    // SAFETY: sentinels only.
    unsafe {
        assert_eq!(DlpackStream::from_raw(None, device)?, DlpackStream::LegacyDefault);
        assert_eq!(DlpackStream::from_raw(Some(1), device)?, DlpackStream::LegacyDefault);
        assert_eq!(DlpackStream::from_raw(Some(2), device)?, DlpackStream::PerThreadDefault);
        assert_eq!(DlpackStream::from_raw(Some(-1), device)?, DlpackStream::NoSync);
    }
    // The per-thread and legacy default streams order the consumer too.
    for stream in [DlpackStream::LegacyDefault, DlpackStream::PerThreadDefault] {
        let fresh = data(13, n);
        let update = Tensor::from_slice(&fresh, [n], Device::cuda(device))?;
        cuda::synchronize(Some(device))?;
        let managed = {
            let _g = StreamGuard::new(&producer)?;
            cudasem::testing::delay(&producer, ms(200))?;
            x.copy_(&update, false)?;
            x.to_dlpack(&stream)?
        };
        let seen = Tensor::from_dlpack(managed)?;
        let target = Tensor::empty([n], DType::F32, Device::cuda(device))?;
        let on = match &stream {
            DlpackStream::LegacyDefault => cuda::default_stream(Some(device))?,
            // SAFETY: CUDA's per-thread default stream handle; the sim's default stream stands for it.
            _ if !is_sim() => unsafe { cuda::Stream::from_external(2, device)? },
            _ => cuda::default_stream(Some(device))?,
        };
        let _g = StreamGuard::new(&on)?;
        target.copy_(&seen, false)?;
        on.synchronize()?;
        drop(_g);
        assert_eq!(target.to_vec::<f32>()?, fresh, "{stream:?}");
    }
    Ok(())
}

#[test]
fn host_tensors_export_as_cpu_and_cuda_host() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let values = data(15, 12);
    let pageable = Tensor::from_slice(&values, [3, 4], Device::Cpu)?;
    let pinned = pageable.pin_memory()?;
    for (t, kind) in [(&pageable, 1u32), (&pinned, 3)] {
        let managed = t.to_dlpack(&DlpackStream::NoSync)?;
        let desc = managed.validate().expect("valid");
        assert_eq!((desc.device().device_type.0, desc.data_ptr() as usize as u64), (kind, t.data_ptr()));
        let err = Tensor::from_dlpack(managed).expect_err("host memory is refused");
        assert_eq!(err.variant_name(), "InvalidArgument", "{err}");
    }
    Ok(())
}

/// `managed` with its descriptor changed by `edit` (what a faulty or foreign producer may hand in).
fn edited(managed: Dlpack, edit: impl FnOnce(&mut cudasem::dlpark::ffi::DLManagedTensorVersioned)) -> Dlpack {
    let raw = managed.into_raw();
    // SAFETY: `raw` is owned here (from `into_raw`) and not shared; edits keep its pointers valid.
    unsafe {
        edit(&mut *raw);
        Dlpack::from_raw(raw).expect("current ABI")
    }
}

#[test]
fn dlpack_bad_inputs_are_typed_errors_and_run_the_deleter_once() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let base = Tensor::from_slice(&data(17, 16), [4, 4], Device::cuda(0))?;
    type Edit = Box<dyn FnOnce(&mut cudasem::dlpark::ffi::DLManagedTensorVersioned)>;
    let cases: Vec<(&str, &str, Edit)> = vec![
        ("read-only", "InvalidArgument", Box::new(|m| m.flags = cudasem::dlpark::DlpackFlags::READ_ONLY)),
        (
            "complex dtype",
            "InvalidArgument",
            Box::new(|m| m.dl_tensor.dtype.code = cudasem::dlpark::ffi::DLDataTypeCode::COMPLEX),
        ),
        ("two lanes", "InvalidArgument", Box::new(|m| m.dl_tensor.dtype.lanes = 2)),
        (
            "OpenCL device",
            "InvalidArgument",
            Box::new(|m| m.dl_tensor.device.device_type = cudasem::dlpark::ffi::DLDeviceType::OPENCL),
        ),
        ("no such device", "InvalidDevice", Box::new(|m| m.dl_tensor.device.device_id = 64)),
        // SAFETY (inside): the strides array has ndim = 2 entries.
        ("negative stride", "InvalidArgument", Box::new(|m| unsafe { *m.dl_tensor.strides.add(1) = -1 })),
        ("misaligned data", "InvalidArgument", Box::new(|m| m.dl_tensor.byte_offset = 2)),
    ];
    for (what, expected, edit) in cases {
        let (owner, drops) = counted(Some(base.clone()));
        // SAFETY: `base`'s floats, alive while the owner is.
        let t = unsafe { Tensor::from_blob(base.data_ptr(), [4, 4], None, DType::F32, Device::cuda(0), owner)? };
        let managed = edited(t.to_dlpack(&DlpackStream::NoSync)?, edit);
        drop(t);
        let e = Tensor::from_dlpack(managed).err().unwrap_or_else(|| panic!("{what}: accepted"));
        assert_eq!(e.variant_name(), expected, "{what}: {e}");
        assert_eq!(drops.load(Ordering::SeqCst), 1, "{what}: the deleter ran once");
    }
    // SAFETY: 0 and other negative values are refused before any use.
    for bad in [0, -3] {
        let e = unsafe { DlpackStream::from_raw(Some(bad), 0) }.unwrap_err();
        assert_eq!(e.variant_name(), "InvalidArgument", "{e}");
    }
    if last_device() > 0 {
        let other = cuda::Stream::new(Some(last_device()), 0)?;
        let e = base.to_dlpack(&DlpackStream::Stream(other)).err().expect("a stream of another device is refused");
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    }
    // The runtime goes on.
    let back = Tensor::from_dlpack(base.to_dlpack(&DlpackStream::LegacyDefault)?)?;
    assert_eq!(back.to_vec::<f32>()?, base.to_vec::<f32>()?);
    Ok(())
}
