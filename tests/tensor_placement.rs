//! Where tensors live and where ops run (IMPLEMENTATION.md, invariants 1 and 3): the current device at creation, ops on
//! the tensors' device and its current stream whatever the current device (PyTorch's
//! test_autogpu), cross-device rules with and without peer access, copies in every direction
//! and dtype with their stream barriers, host reads that wait, and out-of-memory.

mod common;
mod tensor_util;

use cudasem::cuda::{self, DeviceGuard, Stream, StreamGuard};
use cudasem::{testing, DType, Device, Error, Result, Tensor};
use std::time::{Duration, Instant};
use tensor_util::{expect_ok, round_to, sample, tensor, values, Domain, Rng};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn tensors_are_made_on_the_current_device() -> Result<()> {
    if !testing::has_devices(1) {
        return Ok(());
    }
    let last = cuda::device_count() - 1;
    {
        let _g = DeviceGuard::new(last)?;
        for t in [
            Tensor::zeros([2, 3], DType::F32, Device::Cuda(None))?,
            Tensor::ones([4], DType::I64, "cuda")?,
            Tensor::from_slice(&[1u8, 2], [2], Device::Cuda(None))?,
            Tensor::arange(0, 5, 1, DType::F64, "cuda")?,
            Tensor::from_slice(&[1.0f32], [1], Device::Cpu)?.cuda()?,
        ] {
            assert_eq!(t.device(), Device::cuda(last), "\"cuda\" is the current device when the tensor is made");
        }
        assert_eq!(Tensor::zeros([1], DType::F32, "cuda:0")?.device(), Device::cuda(0), "an explicit index wins");
    }
    assert_eq!(Tensor::zeros([1], DType::F32, "cuda")?.device(), Device::cuda(0));
    let bad = Tensor::zeros([1], DType::F32, Device::cuda(cuda::device_count())).unwrap_err();
    assert!(matches!(bad, Error::InvalidDevice { .. }), "{bad}");
    assert!(matches!(Tensor::zeros([1], DType::F32, "gpu:0"), Err(Error::InvalidDeviceString { .. })));
    Ok(())
}

/// PyTorch's test_autogpu: tensors made under `device(1)` live on cuda:1, and ops on them run
/// there under `device(0)` too.
#[test]
fn ops_run_on_the_tensors_device_whatever_the_current_device() -> Result<()> {
    if !testing::has_devices(2) {
        return Ok(());
    }
    let x = {
        let _g = DeviceGuard::new(1)?;
        Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], [2, 2], "cuda")?
    };
    assert_eq!(x.device(), Device::cuda(1));
    let _g = DeviceGuard::new(0)?;
    let y = expect_ok(&x + 1.0, "add on cuda:1 under device 0");
    assert_eq!(y.device(), Device::cuda(1), "the result lives with the operands");
    for t in [x.matmul(&x)?, x.sum_all()?, x.exp()?, x.t()?.contiguous()?, x.to_dtype(DType::F16)?, x.softmax(0)?] {
        assert_eq!(t.device(), Device::cuda(1));
    }
    assert_eq!(y.to_vec::<f32>()?, [2.0, 3.0, 4.0, 5.0]);
    assert_eq!(cuda::current_device()?, 0, "ops do not change the current device");
    Ok(())
}

/// Ops are queued on the tensor's device's current stream: work queued there before (a delay,
/// then a fill) is seen by the op; a host read waits for all of it.
#[test]
fn ops_are_ordered_on_the_devices_current_stream() -> Result<()> {
    if !testing::has_devices(1) {
        return Ok(());
    }
    let d = cuda::device_count() - 1;
    let s = Stream::new(Some(d), 0)?;
    let x = Tensor::zeros([64], DType::U8, Device::cuda(d))?;
    cuda::synchronize(Some(d))?;
    let _sg = StreamGuard::new(&s)?;
    let _dg = DeviceGuard::new(0)?; // the current device is now 0; cuda:d's current stream is still `s`
                                    // Run the op once first: a kernel's first launch loads its module, which on CUDA waits for
                                    // every running kernel of the context — it would wait out the delay below.
    expect_ok(x.add(4u8), "add on the current stream");
    s.synchronize()?;
    // A pending state is observable only while less host time than the delay has passed (another
    // test thread's synchronous driver call can stall this one past it on real GPUs).
    let busy = |what: &str, queued: std::time::Instant| -> Result<()> {
        let idle = s.query()?;
        assert!(!idle || queued.elapsed() >= ms(300), "{what}");
        Ok(())
    };
    let queued = std::time::Instant::now();
    testing::delay(&s, ms(300))?;
    x.fill_(3u8)?; // a byte pattern: an asynchronous memset, queued after the delay
    busy("the delay and the fill are queued, not done", queued)?;
    let y = expect_ok(x.add(4u8), "add on the current stream");
    busy("the op is queued behind the delay", queued)?;
    assert_eq!(y.to_vec::<u8>()?, vec![7u8; 64], "the op saw the fill, and to_vec waited for the op");
    Ok(())
}

#[test]
fn cross_device_ops_need_peer_access() -> Result<()> {
    if !testing::has_devices(2) {
        return Ok(());
    }
    let (a, b) = (0, cuda::device_count() - 1);
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], [3], Device::cuda(a))?;
    let y = Tensor::from_slice(&[10.0f32, 20.0, 30.0], [3], Device::cuda(b))?;

    // Only this test enables peer access in this test binary, so the pair starts disabled.
    assert!(!cuda::is_peer_access_enabled(a, b)?);
    let e = x.add(&y).unwrap_err();
    assert_eq!(e, Error::DeviceMismatch { op: "add", lhs: Device::cuda(a), rhs: Device::cuda(b) });
    let m = e.to_string();
    assert!(
        m.starts_with(&format!(
            "Expected all tensors to be on the same device, but found at least two devices, cuda:{a} and cuda:{b}!"
        )),
        "{m}"
    );
    assert!(m.contains("enable_peer_access"), "the message says how to allow it: {m}");
    assert!(
        matches!(y.matmul(&x.reshape([3, 1])?), Err(Error::DeviceMismatch { lhs, rhs, .. }) if lhs == Device::cuda(b) && rhs == Device::cuda(a))
    );
    let cond = Tensor::ones([3], DType::Bool, Device::cuda(a))?;
    assert!(matches!(Tensor::where_cond(&cond, &x, &y), Err(Error::DeviceMismatch { op: "where", .. })));
    assert!(matches!(x.add_(&y), Err(Error::DeviceMismatch { op: "add_", .. })));

    // CPU and CUDA do not mix, except 0-dim CPU tensors.
    let c = Tensor::from_slice(&[1.0f32, 1.0, 1.0], [3], Device::Cpu)?;
    let e = x.add(&c).unwrap_err();
    assert_eq!(e, Error::DeviceMismatch { op: "add", lhs: Device::cuda(a), rhs: Device::Cpu });
    assert!(e.to_string().contains("cuda:0 and cpu!"), "{e}");
    assert!(matches!(c.mul(&x), Err(Error::DeviceMismatch { lhs: Device::Cpu, .. })));
    let two = Tensor::full([], 2.0, DType::F64, Device::Cpu)?;
    let z = expect_ok(x.mul(&two), "CUDA tensor * 0-dim CPU tensor");
    assert_eq!((z.device(), z.dtype()), (Device::cuda(a), DType::F32), "a 0-dim tensor does not widen");
    assert_eq!(z.to_vec::<f32>()?, [2.0, 4.0, 6.0]);
    assert!(
        matches!(two.add_(&y.sum_all()?), Err(Error::DeviceMismatch { op: "add_", lhs: Device::Cpu, .. })),
        "an in-place op cannot move its output"
    );
    let z = two.mul(&y)?;
    assert_eq!(z.device(), Device::cuda(b), "a CPU scalar first: the op runs on the CUDA operand's device");
    assert_eq!(z.to_vec::<f32>()?, [20.0, 40.0, 60.0]);

    // With peer access the op runs on the first operand's device and reads the other's memory.
    if !cuda::can_device_access_peer(a, b)? {
        assert!(matches!(cuda::enable_peer_access(a, b), Err(Error::PeerAccessUnsupported { .. })));
        assert!(matches!(x.add(&y), Err(Error::DeviceMismatch { .. })));
        testing::skip(2, &format!("the peer part: cuda:{a} cannot access cuda:{b} on this machine"));
        return Ok(());
    }
    cuda::enable_peer_access(a, b)?;
    let s = expect_ok(x.add(&y), "peer add");
    assert_eq!(s.device(), Device::cuda(a));
    assert_eq!(s.to_vec::<f32>()?, [11.0, 22.0, 33.0]);
    let s = y.sub(&x)?;
    assert_eq!(s.device(), Device::cuda(b));
    assert_eq!(s.to_vec::<f32>()?, [9.0, 18.0, 27.0]);
    let p = y.reshape([1, 3])?.matmul(&x.reshape([3, 1])?)?;
    assert_eq!((p.device(), p.to_vec::<f32>()?), (Device::cuda(b), vec![140.0]));
    x.add_(&y)?;
    assert_eq!(x.to_vec::<f32>()?, [11.0, 22.0, 33.0], "in place, reading the peer");
    let w = Tensor::where_cond(&cond, &y, &x)?;
    assert_eq!((w.device(), w.to_vec::<f32>()?), (Device::cuda(a), vec![10.0, 20.0, 30.0]));
    Ok(())
}

#[test]
fn copies_in_every_direction_and_dtype() -> Result<()> {
    let mut places = vec![Device::Cpu];
    if testing::has_devices(1) {
        places.push(Device::cuda(0));
    }
    if testing::has_devices(2) {
        places.push(Device::cuda(cuda::device_count() - 1));
    }
    let mut rng = Rng::new(20);
    for &from in &places {
        for &to in &places {
            for src_dtype in DType::ALL {
                let xv = sample(&mut rng, src_dtype, 12, Domain::Any);
                let x = tensor(&xv, &[3, 4], src_dtype, from)?;
                // `to`: same dtype, a contiguous copy on the destination (or `x` itself).
                let y = x.to(to, false)?;
                assert_eq!((y.device(), y.dtype(), y.shape()), (to, src_dtype, &[3usize, 4][..]));
                assert_eq!(values(&y)?, xv, "{src_dtype} {from} → {to}");
                if from == to {
                    assert!(y.shares_storage(&x), "to() the same device returns the tensor");
                }
                // `copy_` converting into every dtype, into a contiguous and a strided destination,
                // from a contiguous and a transposed (and broadcast) source.
                for dst_dtype in DType::ALL {
                    let want: Vec<f64> = xv.iter().map(|&v| round_to(dst_dtype, v)).collect();
                    let what = format!("copy_ {src_dtype} on {from} → {dst_dtype} on {to}");
                    let dst = Tensor::zeros([3, 4], dst_dtype, to)?;
                    expect_ok(dst.copy_(&x, true), &what);
                    assert_eq!(values(&dst)?, want, "{what}");
                    let wide = Tensor::zeros([3, 8], dst_dtype, to)?;
                    let strided = wide.slice_step(1, 1.., 2)?;
                    expect_ok(strided.copy_(&x.t()?.t()?, false), &what);
                    assert_eq!(values(&strided)?, want, "{what}, strided destination");
                    let gaps = values(&wide.slice_step(1, 0.., 2)?)?;
                    assert!(gaps.iter().all(|&g| g == 0.0), "{what}: elements between the strided ones untouched");
                    let row = x.narrow(0, 1, 1)?; // [1, 4], broadcast over the 3 rows
                    expect_ok(dst.copy_(&row, false), &what);
                    let want_row: Vec<f64> = (0..12).map(|k| want[4 + k % 4]).collect();
                    assert_eq!(values(&dst)?, want_row, "{what}, broadcast source");
                }
                let xt = x.t()?;
                let yt = expect_ok(xt.to(to, false), "to() of a transposed tensor");
                assert_eq!(yt.is_contiguous(), from != to, "a copy to another device is contiguous");
                assert_eq!(values(&yt)?, values(&xt)?, "{src_dtype} transposed {from} → {to}");
            }
        }
    }
    let x = Tensor::ones([2, 3], DType::F32, Device::Cpu)?;
    assert!(matches!(
        x.copy_(&Tensor::ones([4], DType::F32, Device::Cpu)?, false),
        Err(Error::ShapeMismatch { op: "copy_", .. })
    ));
    Ok(())
}

/// Copies between GPUs run on the source's current stream between two barriers: they wait for
/// work queued on the destination's current stream, and later work there waits for them.
#[test]
fn peer_copies_are_ordered_by_a_two_way_barrier() -> Result<()> {
    if !testing::has_devices(2) {
        return Ok(());
    }
    let (a, b) = (0, cuda::device_count() - 1);
    let (sa, sb) = (Stream::new(Some(a), 0)?, Stream::new(Some(b), 0)?);
    let (_ga, _gb) = (StreamGuard::new(&sa)?, StreamGuard::new(&sb)?);
    let src = Tensor::full([1 << 16], 7u8, DType::U8, Device::cuda(a))?;
    let dst = Tensor::zeros([1 << 16], DType::U8, Device::cuda(b))?;
    cuda::synchronize(Some(a))?;
    cuda::synchronize(Some(b))?;
    // Work already queued on the destination (a delay, then a fill) comes before the copy.
    testing::delay(&sb, ms(150))?;
    dst.fill_(3u8)?;
    dst.copy_(&src, true)?;
    assert_eq!(dst.to_vec::<u8>()?, vec![7u8; 1 << 16], "the copy waited for the destination's queued fill");
    // Work queued on the destination after the copy comes after it, however slow the source.
    testing::delay(&sa, ms(150))?;
    src.fill_(9u8)?; // on the source's stream, after the delay
    dst.copy_(&src, true)?;
    assert_eq!(dst.to_vec::<u8>()?, vec![9u8; 1 << 16], "a read on the destination's stream waited for the copy");
    Ok(())
}

#[test]
fn host_reads_wait_for_queued_work() -> Result<()> {
    if !testing::has_devices(1) {
        return Ok(());
    }
    let s = Stream::new(Some(0), 0)?;
    let _g = StreamGuard::new(&s)?;
    let x = Tensor::zeros([1024], DType::I32, Device::cuda(0))?;
    // The read is only proven to wait if the fill was still pending when it was asked for; a thread
    // stalled past the delay by another test's synchronous driver call retries with a longer one.
    common::retry_if_stalled(ms(100), |delay| {
        x.fill_(0)?;
        let queued = Instant::now();
        testing::delay(&s, delay)?;
        x.fill_(0x0101_0101)?; // a repeated byte: an asynchronous memset behind the delay
        let busy = common::assert_busy(!s.query()?, queued, delay, "the fill behind the delay is pending");
        assert_eq!(x.to_vec::<i32>()?, vec![0x0101_0101; 1024], "to_vec waited for the fill");
        Ok(busy)
    })?;
    testing::delay(&s, ms(100))?;
    x.fill_(0)?;
    let host = x.cpu()?;
    assert_eq!((host.device(), host.to_vec::<i32>()?), (Device::Cpu, vec![0; 1024]), "cpu() waited too");
    Ok(())
}

#[test]
fn out_of_memory_is_typed_and_the_runtime_recovers() -> Result<()> {
    if !testing::has_devices(1) {
        return Ok(());
    }
    let huge = 1usize << 42; // 16 TiB of f32
    let e = Tensor::empty([huge], DType::F32, Device::cuda(0)).unwrap_err();
    match &e {
        Error::OutOfMemory { device: 0, requested, total, .. } => assert!(requested >= total, "{e}"),
        other => panic!("expected OutOfMemory on cuda:0, got {other:?}"),
    }
    assert!(e.to_string().starts_with("CUDA out of memory. Tried to allocate"), "{e}");
    assert!(
        matches!(Tensor::randn([huge], DType::F32, Device::cuda(0)), Err(Error::OutOfMemory { .. })),
        "the device tensor is allocated before its host-made contents"
    );
    let host = Tensor::zeros([1usize << 62], DType::U8, Device::Cpu).unwrap_err();
    assert_eq!(host, Error::HostOutOfMemory { requested: 1 << 62 });
    let t = Tensor::ones([1000], DType::F32, Device::cuda(0))?;
    let sum = expect_ok(t.sum_all(), "a sum after an OOM");
    assert_eq!(sum.item::<f32>()?, 1000.0);
    assert_eq!(t.to_vec::<f32>()?, vec![1.0; 1000], "the device still works after an OOM");
    assert!(matches!(
        Tensor::zeros([usize::MAX, 4], DType::F32, Device::cuda(0)),
        Err(Error::InvalidShape { op: "empty", .. })
    ));
    Ok(())
}

#[test]
fn device_memory_comes_from_the_caching_allocator() -> Result<()> {
    if !testing::has_devices(1) {
        return Ok(());
    }
    let d = cuda::device_count() - 1;
    let t = Tensor::zeros([3 << 20], DType::U8, Device::cuda(d))?;
    assert!(cuda::memory_allocated(Some(d))? >= 3 << 20, "the tensor's block is counted");
    let view = t.narrow(0, 100, 10)?;
    assert_eq!(view.data_ptr(), t.data_ptr() + 100, "data_ptr is the address of the first element");
    let (free, total) = cuda::mem_get_info(Some(d))?;
    assert!(free <= total);
    drop((t, view));
    let f = Tensor::zeros([4], DType::F64, Device::Cpu)?;
    assert_eq!(f.narrow(0, 1, 2)?.data_ptr(), f.data_ptr() + 8, "host tensors report host addresses");
    Ok(())
}
