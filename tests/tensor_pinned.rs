//! Pinned host memory and non-blocking copies (IMPLEMENTATION.md, invariants 4–5): correctness in both directions for
//! every dtype, with conversions and views; which results are pinned; a non-blocking call returns
//! while the stream is still busy; a host read or write of a pinned tensor waits for the copy
//! still using it; copies on two streams that touch one pinned block are ordered on the device.
//! Written once: the sim driver and, unchanged, `CUDASEM_DRIVER=cuda`.

mod common;
mod tensor_util;

use common::{assert_busy, ms, retry_if_stalled, stream_pair, warm_up};
use cudasem::cuda::{self, Stream, StreamGuard};
use cudasem::{testing, DType, Device, Error, Result, Tensor};
use std::time::Instant;
use tensor_util::{expect_ok, sample, tensor, values, Domain, Rng};

const DTYPES: [DType; 8] =
    [DType::F64, DType::F32, DType::F16, DType::BF16, DType::I64, DType::I32, DType::U8, DType::Bool];

/// A fresh pool stream of cuda:0, warmed up, to make current for one test (tests of this file run
/// in parallel threads; their own streams keep their delays apart).
fn own_stream() -> Result<Stream> {
    let s = Stream::new(Some(0), 0)?;
    warm_up(&s)?;
    Ok(s)
}

#[test]
fn non_blocking_copies_round_trip_every_dtype() -> Result<()> {
    if !common::one_device() {
        return Ok(());
    }
    let mut rng = Rng::new(11);
    for dtype in DTYPES {
        let vals = sample(&mut rng, dtype, 15, Domain::Any);
        let host = tensor(&vals, &[3, 5], dtype, Device::Cpu)?.pin_memory()?;
        assert!(host.is_pinned());
        let dev = host.to(Device::cuda(0), true)?;
        assert_eq!(dev.device(), Device::cuda(0));
        let back = dev.to("cpu", true)?;
        assert!(back.is_pinned(), "{dtype}: to(\"cpu\", non_blocking=true) lands in pinned memory");
        assert_eq!(values(&back)?, vals, "{dtype}: host → device → host, both non-blocking");

        // Into existing tensors with copy_.
        let dst = Tensor::empty_pinned([3, 5], dtype)?;
        dst.copy_(&dev, true)?;
        assert_eq!(values(&dst)?, vals, "{dtype}: copy_ device → pinned");
        let dev2 = Tensor::empty([3, 5], dtype, Device::cuda(0))?;
        dev2.copy_(&dst, true)?;
        assert_eq!(values(&dev2)?, vals, "{dtype}: copy_ pinned → device");

        // Pageable memory with non_blocking: synchronous, and the result is not pinned.
        let pageable = tensor(&vals, &[3, 5], dtype, Device::Cpu)?;
        let d3 = pageable.to(Device::cuda(0), true)?;
        assert_eq!(values(&d3)?, vals, "{dtype}: pageable → device");
        let plain = d3.to("cpu", false)?;
        assert!(!plain.is_pinned() && !d3.cpu()?.is_pinned(), "a blocking copy to the host is pageable");
        assert_eq!(values(&plain)?, vals);
    }
    Ok(())
}

#[test]
fn non_blocking_copies_convert_dtypes_and_handle_views() -> Result<()> {
    if !common::one_device() {
        return Ok(());
    }
    let mut rng = Rng::new(12);
    let vals = sample(&mut rng, DType::I32, 24, Domain::Any);
    let as_f64: Vec<f64> = vals.clone();

    // Pinned i32 → device f64: converted on the host into a pinned staging block, then queued.
    let host = tensor(&vals, &[4, 6], DType::I32, Device::Cpu)?.pin_memory()?;
    let dev = Tensor::empty([4, 6], DType::F64, Device::cuda(0))?;
    dev.copy_(&host, true)?;
    assert_eq!(values(&dev)?, as_f64);

    // A transposed pinned view → device: made dense on the host first.
    let t = host.t()?;
    let dev_t = t.to(Device::cuda(0), true)?;
    assert!(dev_t.is_contiguous());
    assert_eq!(values(&dev_t)?, values(&t)?);

    // A shifted, contiguous pinned view (`narrow`) → device: the copy starts at the view's offset.
    let flat = host.reshape([24])?;
    let mid = flat.narrow(0, 5, 10)?;
    assert!(mid.is_pinned() && mid.data_ptr() != flat.data_ptr());
    assert_eq!(values(&mid.to(Device::cuda(0), true)?)?, as_f64[5..15]);

    // Device i32 → pinned f64 (converted on the device, or on the host where the driver has no
    // kernels yet), and device views into pinned memory.
    let dev_i = tensor(&vals, &[4, 6], DType::I32, Device::cuda(0))?;
    let out = Tensor::empty_pinned([4, 6], DType::F64)?;
    out.copy_(&dev_i, true)?;
    assert_eq!(values(&out)?, as_f64);
    let dev_mid = dev_i.reshape([24])?.narrow(0, 3, 7)?;
    let out_mid = dev_mid.to("cpu", true)?;
    assert!(out_mid.is_pinned());
    assert_eq!(values(&out_mid)?, as_f64[3..10]);
    let out_t = dev_i.t()?.to("cpu", true)?;
    assert_eq!(values(&out_t)?, values(&host.t()?)?);

    // Into a strided pinned destination (every other column): synchronous, still right.
    let wide = Tensor::empty_pinned([4, 12], DType::I32)?;
    let cols = wide.slice_step(1, 0.., 2)?;
    cols.copy_(&dev_i, true)?;
    assert_eq!(values(&cols)?, as_f64);
    assert!(values(&wide.slice_step(1, 1.., 2)?)?.iter().all(|&x| x == 0.0), "odd columns untouched");

    // Into a strided device destination: the bytes go through a dense device tensor.
    let dev_wide = Tensor::zeros([4, 12], DType::I32, Device::cuda(0))?;
    let dev_cols = dev_wide.slice_step(1, 1.., 2)?;
    expect_ok(dev_cols.copy_(&host, true), "copy_ into a strided device view");
    assert_eq!(values(&dev_cols)?, as_f64);
    // A broadcast pinned source.
    let row = tensor(&vals[..6], &[6], DType::I32, Device::Cpu)?.pin_memory()?;
    let dev_b = Tensor::empty([4, 6], DType::I32, Device::cuda(0))?;
    dev_b.copy_(&row, true)?;
    assert_eq!(values(&dev_b)?, vals[..6].repeat(4));
    Ok(())
}

#[test]
fn which_tensors_are_pinned() -> Result<()> {
    if !common::one_device() {
        return Ok(());
    }
    let pageable = Tensor::arange(0, 8, 1, DType::F32, Device::Cpu)?;
    assert!(!pageable.is_pinned());
    let pinned = pageable.pin_memory()?;
    assert!(pinned.is_pinned() && !pinned.shares_storage(&pageable));
    assert_eq!(pinned.to_vec::<f32>()?, pageable.to_vec::<f32>()?);
    let again = pinned.pin_memory()?;
    assert!(again.shares_storage(&pinned), "pin_memory of a pinned tensor is the tensor itself");
    assert!(pinned.narrow(0, 2, 3)?.is_pinned() && pinned.view([2, 4])?.t()?.is_pinned(), "views stay pinned");
    assert!(!pinned.clone().to_dtype(DType::F64)?.is_pinned(), "a new host tensor is pageable");
    let zeros = Tensor::empty_pinned([3, 3], DType::I64)?;
    assert!(zeros.is_pinned() && zeros.to_vec::<i64>()?.iter().all(|&x| x == 0));
    let dev = pinned.cuda()?;
    assert!(!dev.is_pinned());
    assert!(matches!(dev.pin_memory(), Err(Error::InvalidArgument { op: "pin_memory", .. })));
    assert!(matches!(pinned.record_stream(&cuda::current_stream(None)?), Err(Error::InvalidArgument { .. })));
    let empty = Tensor::empty_pinned([0, 4], DType::F32)?;
    assert!(empty.is_pinned() && empty.to_vec::<f32>()?.is_empty());
    assert_eq!(empty.to(Device::cuda(0), true)?.shape(), [0, 4]);
    Ok(())
}

/// The non-blocking call returns while a delay queued before it still runs, and the result is
/// right once the stream is done (host → device and device → host).
#[test]
fn non_blocking_calls_return_while_the_stream_is_busy() -> Result<()> {
    if !common::one_device() {
        return Ok(());
    }
    let s = own_stream()?;
    let _g = StreamGuard::new(&s)?;
    let data: Vec<f32> = (0..1 << 16).map(|i| i as f32 * 0.5).collect();
    let host = Tensor::from_slice(&data, [1 << 16], Device::Cpu)?.pin_memory()?;
    let dev_src = Tensor::from_slice(&data, [1 << 16], Device::cuda(0))?;
    // A block of the size in the host allocator's cache, so `to("cpu", true)` needs no driver call.
    drop(Tensor::empty_pinned([1 << 16], DType::F32)?);
    retry_if_stalled(ms(300), |delay| {
        let queued = Instant::now();
        testing::delay(&s, delay)?;
        let dev = host.to(Device::cuda(0), true)?;
        let returned = queued.elapsed();
        let observed = assert_busy(!s.query()?, queued, delay, "host → device returned after the copy ran");
        assert!(returned < delay || !observed, "the call took {returned:?}, past the {delay:?} delay");
        assert_eq!(dev.to_vec::<f32>()?, data);

        let queued = Instant::now();
        testing::delay(&s, delay)?;
        let out = dev_src.to("cpu", true)?;
        let observed2 = assert_busy(!s.query()?, queued, delay, "device → host returned after the copy ran");
        assert!(out.is_pinned());
        assert_eq!(out.to_vec::<f32>()?, data, "the host read waited for the copy");
        Ok(observed && observed2)
    })
}

/// A host read of a pinned destination waits for the copy still writing it (beyond PyTorch).
#[test]
fn a_host_read_of_a_pinned_destination_waits_for_the_copy() -> Result<()> {
    if !common::one_device() {
        return Ok(());
    }
    let s = own_stream()?;
    let _g = StreamGuard::new(&s)?;
    let n = 1 << 18;
    let data: Vec<i64> = (0..n as i64).map(|i| i * 3 - 7).collect();
    let dev = Tensor::from_slice(&data, [n], Device::cuda(0))?;
    let out = Tensor::empty_pinned([n], DType::I64)?;
    retry_if_stalled(ms(300), |delay| {
        out.fill_(-1)?; // a sentinel the copy replaces
        let queued = Instant::now();
        testing::delay(&s, delay)?;
        out.copy_(&dev, true)?;
        let observed = assert_busy(!s.query()?, queued, delay, "the copy into pinned memory was pending");
        // Element access, a view's read, a full read: each sees the copied values, never -1.
        assert_eq!(out.narrow(0, n - 1, 1)?.item::<i64>()?, data[n - 1]);
        assert_eq!(out.to_vec::<i64>()?, data);
        assert!(s.query()?, "the read waited for the copy, so the stream has passed it");
        // An op on the CPU reading the pinned tensor waits too.
        out.fill_(-1)?;
        testing::delay(&s, delay)?;
        out.copy_(&dev, true)?;
        let sum = out.sum_all()?.item::<i64>()?;
        assert_eq!(sum, data.iter().sum::<i64>());
        Ok(observed)
    })
}

/// A host write of a pinned source waits until the copy reading it has read it: the device gets
/// the values from before the write (beyond PyTorch, where this is a race).
#[test]
fn a_host_write_of_a_pinned_source_waits_for_the_copy() -> Result<()> {
    if !common::one_device() {
        return Ok(());
    }
    let s = own_stream()?;
    let _g = StreamGuard::new(&s)?;
    let n = 1 << 18;
    let data: Vec<f64> = (0..n).map(|i| i as f64 + 0.25).collect();
    let host = Tensor::empty_pinned([n], DType::F64)?;
    retry_if_stalled(ms(300), |delay| {
        host.copy_(&Tensor::from_slice(&data, [n], Device::Cpu)?, false)?;
        let queued = Instant::now();
        testing::delay(&s, delay)?;
        let dev = host.to(Device::cuda(0), true)?;
        let observed = assert_busy(!s.query()?, queued, delay, "the copy from pinned memory was pending");
        host.fill_(-5.0)?; // waits for the copy to have read the old values
        assert_eq!(dev.to_vec::<f64>()?, data, "the device got the values from before the fill");
        assert!(host.to_vec::<f64>()?.iter().all(|&x| x == -5.0));

        // copy_ from the host and an in-place op on the CPU wait the same way.
        host.copy_(&Tensor::from_slice(&data, [n], Device::Cpu)?, false)?;
        testing::delay(&s, delay)?;
        let dev2 = host.to(Device::cuda(0), true)?;
        host.copy_(&Tensor::zeros([n], DType::F64, Device::Cpu)?, false)?;
        host.add_(1.0)?;
        assert_eq!(dev2.to_vec::<f64>()?, data);
        assert!(host.to_vec::<f64>()?.iter().all(|&x| x == 1.0));
        Ok(observed)
    })
}

/// Two streams using one pinned block: a copy from it on one stream waits, on the device, for a
/// copy into it still pending on another.
#[test]
fn copies_on_two_streams_touching_one_pinned_block_are_ordered() -> Result<()> {
    if !common::one_device() {
        return Ok(());
    }
    let (a, b) = stream_pair(0)?;
    warm_up(&a)?;
    let n = 1 << 16;
    let data: Vec<i32> = (0..n).map(|i| i ^ 0x55).collect();
    let src = Tensor::from_slice(&data, [n], Device::cuda(0))?;
    let pinned = Tensor::empty_pinned([n], DType::I32)?;
    let dst = Tensor::zeros([n], DType::I32, Device::cuda(0))?;
    cuda::synchronize(Some(0))?;
    let delay = ms(250);
    let queued = Instant::now();
    testing::delay(&a, delay)?;
    cuda::with_stream(&a, || pinned.copy_(&src, true))?; // device → pinned, behind the delay
    cuda::with_stream(&b, || dst.copy_(&pinned, true))?; // pinned → device on another stream
    assert_busy(!b.query()?, queued, delay, "stream b's copy waits for stream a's write on the device");
    b.synchronize()?;
    assert_eq!(dst.to_vec::<i32>()?, data, "the second copy read the block after the first wrote it");
    Ok(())
}

/// Pinned memory is portable: any device can copy from and into it.
#[test]
fn pinned_memory_works_with_every_device() -> Result<()> {
    if !testing::has_devices(2) {
        return Ok(());
    }
    let n = cuda::device_count();
    let host = Tensor::arange(0, 1000, 1, DType::I64, Device::Cpu)?.pin_memory()?;
    for d in 0..n {
        let dev = host.to(Device::cuda(d), true)?;
        assert_eq!(dev.device(), Device::cuda(d));
        let back = dev.to("cpu", true)?;
        assert_eq!(back.to_vec::<i64>()?, (0..1000).collect::<Vec<i64>>());
    }
    Ok(())
}
