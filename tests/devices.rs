//! Devices: count, the per-thread current device, device names and strings, properties,
//! memory info, synchronize, and typed errors for invalid devices.

mod common;

use common::{assert_busy, assert_invalid_device, is_sim, last_device, ms, retry_if_stalled, two_devices};
use cudasem::cuda::{self, DeviceGuard, Stream};
use cudasem::{testing, Device, Error, IntoCudaDevice, Result};
use std::sync::Barrier;
use std::time::Instant;

#[test]
fn device_count_is_positive_and_cuda_is_available() {
    assert!(cuda::device_count() > 0, "the {} driver reports no device", cuda::driver_name());
    assert!(cuda::is_available());
    assert!(matches!(cuda::driver_name(), "sim" | "cuda"), "driver_name() = {}", cuda::driver_name());
}

#[test]
fn current_device_is_zero_on_a_new_thread() -> Result<()> {
    assert_eq!(cuda::current_device()?, 0, "a test thread starts on device 0");
    cuda::set_device(last_device())?;
    let on_new_thread = std::thread::spawn(cuda::current_device).join().unwrap()?;
    assert_eq!(on_new_thread, 0, "a new thread starts on device 0 whatever its parent selected");
    assert_eq!(cuda::current_device()?, last_device());
    Ok(())
}

#[test]
fn set_device_changes_only_this_thread() -> Result<()> {
    if !two_devices() {
        return Ok(());
    }
    let barrier = Barrier::new(2);
    std::thread::scope(|scope| {
        let a = scope.spawn(|| -> Result<()> {
            cuda::set_device(1)?;
            assert_eq!(cuda::current_device()?, 1);
            barrier.wait(); // A has selected 1
            barrier.wait(); // B has checked and selected 0 for itself
            assert_eq!(cuda::current_device()?, 1, "B's set_device(0) must not change A's device");
            Ok(())
        });
        let b = scope.spawn(|| -> Result<()> {
            barrier.wait();
            assert_eq!(cuda::current_device()?, 0, "A's set_device(1) must not change B's device");
            cuda::set_device(0)?;
            barrier.wait();
            Ok(())
        });
        a.join().unwrap()?;
        b.join().unwrap()
    })?;
    assert_eq!(cuda::current_device()?, 0, "the test thread itself is untouched");
    Ok(())
}

#[test]
fn invalid_device_indices_are_typed_errors() {
    let n = cuda::device_count();
    assert_invalid_device(cuda::set_device(99), 99);
    assert_invalid_device(cuda::set_device(n), n);
    assert_invalid_device(DeviceGuard::new(99).map(|_| ()), 99);
    assert_invalid_device(DeviceGuard::new(Device::cuda(n)).map(|_| ()), n);
    assert_invalid_device(cuda::with_device(99, || Ok(())), 99);
    assert_invalid_device(cuda::get_device_properties(Some(99)), 99);
    assert_invalid_device(cuda::get_device_name(Some(99)), 99);
    assert_invalid_device(cuda::mem_get_info(Some(99)), 99);
    assert_invalid_device(cuda::synchronize(Some(99)), 99);
    assert_invalid_device(Stream::new(Some(99), 0), 99);
    assert_invalid_device(cuda::current_stream(Some(99)), 99);
    assert_invalid_device(cuda::default_stream(Some(99)), 99);
    assert_invalid_device(cuda::can_device_access_peer(0, 99), 99);
    assert_invalid_device(cuda::can_device_access_peer(99, 0), 99);
    assert_invalid_device(cuda::set_device("cuda:99"), 99);
}

#[test]
fn invalid_device_error_says_index_and_count() {
    let n = cuda::device_count();
    let msg = cuda::set_device(99).unwrap_err().to_string();
    assert!(msg.contains("invalid device index 99"), "{msg}");
    assert!(msg.contains(&format!("0..{n}")), "{msg}");
}

#[test]
fn runtime_stays_usable_after_invalid_device_errors() -> Result<()> {
    cuda::set_device(last_device())?;
    assert!(cuda::set_device(99).is_err());
    assert!(DeviceGuard::new(99).is_err());
    assert!(Stream::new(Some(99), 0).is_err());
    assert_eq!(cuda::current_device()?, last_device(), "a failed set_device/guard leaves the device alone");
    // Guards still nest and restore (a failed DeviceGuard::new left the guard stack consistent).
    {
        let _g = DeviceGuard::new(0)?;
        assert_eq!(cuda::current_device()?, 0);
    }
    assert_eq!(cuda::current_device()?, last_device());
    let s = Stream::new(None, 0)?;
    assert_eq!(s.device(), last_device());
    testing::delay(&s, ms(1))?;
    s.synchronize()?;
    cuda::synchronize(None)?;
    // And another thread is not affected either.
    let other = std::thread::spawn(|| -> Result<usize> {
        assert!(cuda::set_device(99).is_err());
        cuda::current_device()
    });
    assert_eq!(other.join().unwrap()?, 0);
    Ok(())
}

#[test]
fn cpu_where_a_cuda_device_is_needed_is_not_cuda_device() {
    let is_not_cuda = |r: Result<()>| matches!(r, Err(Error::NotCudaDevice { ref device }) if device == "cpu");
    assert!(is_not_cuda(cuda::set_device("cpu")));
    assert!(is_not_cuda(cuda::set_device(Device::Cpu)));
    assert!(is_not_cuda(DeviceGuard::new(Device::Cpu).map(|_| ())));
    assert!(is_not_cuda(DeviceGuard::new("cpu").map(|_| ())));
    assert!(is_not_cuda(cuda::with_device(Device::Cpu, || Ok(()))));
    assert!(matches!(Device::Cpu.cuda_device(), Err(Error::NotCudaDevice { .. })));
    assert!(is_not_cuda(cuda::current_stream("cpu").map(|_| ())));
    assert!(is_not_cuda(cuda::memory_allocated(Device::Cpu).map(|_| ())));
    assert_eq!(cuda::current_device().unwrap(), 0, "a refused cpu device changes nothing");
}

#[test]
fn set_device_accepts_indices_devices_and_strings() -> Result<()> {
    let last = last_device();
    cuda::set_device(format!("cuda:{last}").as_str())?;
    assert_eq!(cuda::current_device()?, last);
    cuda::set_device(Device::cuda(0))?;
    assert_eq!(cuda::current_device()?, 0);
    cuda::set_device(Device::Cuda(Some(last)))?;
    assert_eq!(cuda::current_device()?, last);
    cuda::set_device(0)?;
    assert_eq!(cuda::current_device()?, 0);
    if two_devices() {
        cuda::set_device("cuda:1")?;
        assert_eq!(cuda::current_device()?, 1);
    }
    Ok(())
}

#[test]
fn cuda_without_index_resolves_to_the_current_device() -> Result<()> {
    let last = last_device();
    cuda::set_device(last)?;
    assert_eq!(Device::Cuda(None).cuda_device()?, None, "the vocabulary does not resolve it");
    assert_eq!(cuda::current_stream(Device::Cuda(None))?.device(), last, "the runtime does");
    assert_eq!(cuda::default_stream("cuda")?.device(), last);
    assert_eq!(Stream::new(None, 0)?.device(), last);
    cuda::set_device(Device::Cuda(None))?;
    assert_eq!(cuda::current_device()?, last, "set_device(\"cuda\") keeps the current device");
    cuda::set_device("cuda")?;
    assert_eq!(cuda::current_device()?, last);
    {
        let g = DeviceGuard::new(Device::Cuda(None))?;
        assert_eq!(g.previous(), last);
        assert_eq!(cuda::current_device()?, last);
    }
    cuda::set_device(0)?;
    let d = Device::Cuda(None);
    assert_eq!(cuda::current_stream(d)?.device(), 0, "resolved when used, not when written");
    Ok(())
}

/// Every function that takes a device, called with `d`, acts on cuda:`last` (the current device).
fn acts_on_last(d: impl IntoCudaDevice + Copy + std::fmt::Debug, last: usize) -> Result<()> {
    assert_eq!(cuda::current_stream(d)?.device(), last, "current_stream({d:?})");
    assert_eq!(cuda::default_stream(d)?, cuda::default_stream(last)?, "default_stream({d:?})");
    assert_eq!(Stream::new(d, 0)?.device(), last, "Stream::new({d:?})");
    assert_eq!(cuda::get_device_properties(d)?, cuda::get_device_properties(last)?);
    assert_eq!(cuda::get_device_name(d)?, cuda::get_device_name(last)?);
    assert_eq!(cuda::mem_get_info(d)?.1, cuda::mem_get_info(last)?.1);
    cuda::synchronize(d)?;
    assert_eq!(cuda::can_device_access_peer(d, 0)?, cuda::can_device_access_peer(last, 0)?);
    assert!(cuda::is_peer_access_enabled(d, last)?, "is_peer_access_enabled({d:?}, {last})");
    assert_eq!(DeviceGuard::new(d)?.previous(), last);
    assert_eq!(cuda::with_device(d, cuda::current_device)?, last, "with_device({d:?})");
    let p = cuda::caching_allocator_alloc(512, d, None)?;
    assert_eq!(common::segment_of(last, p).device, last, "caching_allocator_alloc(512, {d:?}, None)");
    cuda::caching_allocator_delete(p)?;
    assert_eq!(cuda::get_per_process_memory_fraction(d)?, cuda::get_per_process_memory_fraction(last)?);
    cuda::memory_allocated(d)?;
    cuda::max_memory_allocated(d)?;
    cuda::memory_reserved(d)?;
    cuda::max_memory_reserved(d)?;
    cuda::memory_stats(d)?;
    cuda::memory_summary(d)?;
    cuda::reset_peak_memory_stats(d)?;
    Ok(())
}

#[test]
fn every_device_argument_takes_an_index_an_option_a_string_and_a_device() -> Result<()> {
    let last = last_device();
    cuda::set_device(last)?;
    let name = format!("cuda:{last}");
    acts_on_last(last, last)?;
    acts_on_last(Some(last), last)?;
    acts_on_last(None, last)?;
    acts_on_last(name.as_str(), last)?;
    acts_on_last(&name, last)?;
    acts_on_last("cuda", last)?;
    acts_on_last(Device::cuda(last), last)?;
    acts_on_last(Device::Cuda(None), last)?;
    cuda::set_device(0)?;
    assert_invalid_device(cuda::current_stream(Some(99)).map(|_| ()), 99);
    assert_invalid_device(cuda::memory_allocated("cuda:99").map(|_| ()), 99);
    Ok(())
}

#[test]
fn bad_device_strings_are_invalid_device_string() {
    for bad in ["gpu", "cuda:x", "cuda:-1", "cuda:", "cuda:1:2", "cuda: 1", "cpu:0", "", "CUDA:0", "cuda0", "mps"] {
        match cuda::set_device(bad) {
            Err(Error::InvalidDeviceString { input, reason }) => {
                assert_eq!(input, bad);
                assert!(!reason.is_empty());
            }
            other => panic!("set_device({bad:?}) should be InvalidDeviceString, got {other:?}"),
        }
        assert!(matches!(bad.parse::<Device>(), Err(Error::InvalidDeviceString { .. })), "{bad:?}");
        assert!(matches!(DeviceGuard::new(bad), Err(Error::InvalidDeviceString { .. })), "{bad:?}");
    }
    assert_eq!(cuda::current_device().unwrap(), 0);
}

/// PyTorch's parser (c10/core/Device.cpp) accepts only `[0-9]` digits after `cuda:` and refuses
/// leading zeros: `torch.device("cuda:+1")` and `torch.device("cuda:01")` are errors.
#[test]
fn device_index_strings_are_as_strict_as_pytorch() {
    for bad in ["cuda:+1", "cuda:+0", "cuda:01", "cuda:00"] {
        assert!(
            matches!(bad.parse::<Device>(), Err(Error::InvalidDeviceString { .. })),
            "{bad:?} parsed as {:?}; PyTorch refuses it",
            bad.parse::<Device>()
        );
    }
}

#[test]
fn device_strings_round_trip() {
    for (s, d) in
        [("cpu", Device::Cpu), ("cuda", Device::Cuda(None)), ("cuda:0", Device::cuda(0)), ("cuda:12", Device::cuda(12))]
    {
        assert_eq!(s.parse::<Device>().unwrap(), d);
        assert_eq!(d.to_string(), s);
    }
    assert!(Device::cuda(0).is_cuda() && Device::Cuda(None).is_cuda() && !Device::Cpu.is_cuda());
}

#[test]
fn device_properties_are_plausible() -> Result<()> {
    for d in 0..cuda::device_count() {
        let p = cuda::get_device_properties(Some(d))?;
        assert!(!p.name.is_empty(), "cuda:{d} has no name");
        assert!(p.total_memory > 0, "cuda:{d}: {p:?}");
        assert!(p.multi_processor_count > 0, "cuda:{d}: {p:?}");
        assert!(p.major >= 1, "cuda:{d}: {p:?}");
        assert_eq!(cuda::get_device_name(Some(d))?, p.name);
        if is_sim() {
            assert_eq!(p.name, "cudasem simulated GPU");
        }
    }
    let last = last_device();
    cuda::set_device(last)?;
    assert_eq!(cuda::get_device_properties(None)?, cuda::get_device_properties(Some(last))?);
    assert_eq!(cuda::get_device_name(None)?, cuda::get_device_name(Some(last))?);
    Ok(())
}

#[test]
fn mem_get_info_free_is_at_most_total() -> Result<()> {
    for d in 0..cuda::device_count() {
        let (free, total) = cuda::mem_get_info(Some(d))?;
        assert!(total > 0, "cuda:{d}");
        assert!(free <= total, "cuda:{d}: free {free} > total {total}");
        let props = cuda::get_device_properties(Some(d))?;
        assert!(total <= props.total_memory, "cuda:{d}: mem_get_info total {total} > {}", props.total_memory);
        if is_sim() {
            assert_eq!(total, props.total_memory);
        }
    }
    let (free, total) = cuda::mem_get_info(None)?;
    assert!(free <= total);
    Ok(())
}

#[test]
fn synchronize_waits_for_the_devices_streams() -> Result<()> {
    // The device is only proven to be waited for if the delay was still running when
    // synchronize was called.
    for d in 0..cuda::device_count() {
        retry_if_stalled(ms(150), |delay| {
            let s = Stream::new(Some(d), 0)?;
            let queued = Instant::now();
            testing::delay(&s, delay)?;
            let busy = assert_busy(!s.query()?, queued, delay, &format!("the delay on cuda:{d} is still running"));
            cuda::synchronize(Some(d))?;
            assert!(s.query()?, "synchronize(Some({d})) returned before the device's stream finished");
            Ok(busy)
        })?;
    }
    // synchronize(None) is the current device's.
    let last = last_device();
    let s = Stream::new(Some(last), 0)?;
    cuda::set_device(last)?;
    retry_if_stalled(ms(150), |delay| {
        let queued = Instant::now();
        testing::delay(&s, delay)?;
        let busy = assert_busy(!s.query()?, queued, delay, &format!("the delay on cuda:{last} is still running"));
        cuda::synchronize(None)?;
        assert!(s.query()?, "synchronize(None) on cuda:{last} returned before its stream finished");
        Ok(busy)
    })
}
