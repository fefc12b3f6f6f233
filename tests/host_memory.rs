//! The caching host allocator behind pinned tensors (PyTorch's CachingHostAllocator):
//! power-of-two blocks cached per size, `host_memory_stats()` with PyTorch's keys,
//! `host_empty_cache()`, and a freed block handed out again only after the copies still using it
//! completed. The tests share the process's one host allocator, so they take turns.

mod common;

use common::{assert_busy, ms, retry_if_stalled, warm_up};
use cudasem::cuda::{self, Stream, StreamGuard};
use cudasem::{testing, DType, Device, Result, Tensor};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn host_stat(key: &str) -> i64 {
    cuda::host_memory_stats().expect("host_memory_stats").get(key).unwrap_or_else(|| panic!("no key {key}"))
}

/// PyTorch's test_host_memory_stats, step by step.
#[test]
fn host_memory_stats_follow_pinned_allocations() -> Result<()> {
    let _s = serial();
    if !common::one_device() {
        return Ok(());
    }
    cuda::host_empty_cache()?;
    cuda::reset_peak_host_memory_stats()?;
    cuda::reset_accumulated_host_memory_stats()?;
    let stats = cuda::host_memory_stats()?;
    let keys: Vec<String> = stats.iter().map(|(k, _)| k).collect();
    for prefix in ["allocations", "allocated_bytes", "active_requests", "active_bytes"] {
        for field in ["current", "peak", "allocated", "freed"] {
            assert!(keys.contains(&format!("{prefix}.{field}")), "{prefix}.{field} in {keys:?}");
        }
    }
    for prefix in ["host_alloc_time", "host_free_time"] {
        for field in ["total", "max", "min", "count", "avg"] {
            assert!(keys.contains(&format!("{prefix}.{field}")), "{prefix}.{field}");
        }
    }
    assert!(keys.contains(&"num_host_alloc".to_string()) && keys.contains(&"num_host_free".to_string()));
    assert_eq!(keys.len(), 28);
    for k in ["allocations.current", "allocated_bytes.current", "active_requests.current", "num_host_alloc"] {
        assert_eq!(host_stat(k), 0, "{k} after host_empty_cache and resets");
    }

    // 10 Ki f32 = 40 KiB → a 64 KiB block; 20 Ki f32 = 80 KiB → 128 KiB.
    let t1 = Tensor::ones([10 * 1024], DType::F32, Device::Cpu)?.pin_memory()?;
    assert!(t1.is_pinned());
    let (a1, a2) = (64 << 10, 128 << 10);
    for (k, v) in [
        ("allocations.current", 1),
        ("allocations.peak", 1),
        ("active_requests.current", 1),
        ("allocated_bytes.current", a1),
        ("active_bytes.allocated", a1),
        ("num_host_alloc", 1),
        ("host_alloc_time.count", 1),
    ] {
        assert_eq!(host_stat(k), v, "{k} after the first pinned tensor");
    }
    let t2 = Tensor::ones([20 * 1024], DType::F32, Device::Cpu)?.pin_memory()?;
    assert_eq!(host_stat("allocated_bytes.current"), a1 + a2);
    assert_eq!(host_stat("num_host_alloc"), 2);
    cuda::host_empty_cache()?;
    assert_eq!(host_stat("allocations.current"), 2, "blocks in use are not given back");
    assert_eq!(host_stat("num_host_free"), 0);

    let p1 = t1.data_ptr();
    drop(t1);
    assert_eq!(host_stat("active_requests.current"), 1, "a freed block is no longer active");
    assert_eq!(host_stat("allocations.current"), 2, "but still owned (cached)");
    let t3 = Tensor::empty_pinned([16 * 1024], DType::F32)?; // 64 KiB exactly: the same bucket
    assert_eq!(t3.data_ptr(), p1, "the cached block of that power of two is reused");
    assert_eq!(host_stat("num_host_alloc"), 2, "without a driver call");
    assert_eq!(host_stat("active_requests.allocated"), 3);

    drop((t2, t3));
    cuda::host_empty_cache()?;
    for (k, v) in [
        ("allocations.current", 0),
        ("allocations.freed", 2),
        ("allocated_bytes.current", 0),
        ("allocated_bytes.peak", a1 + a2),
        ("active_bytes.current", 0),
        ("num_host_free", 2),
        ("host_free_time.count", 2),
    ] {
        assert_eq!(host_stat(k), v, "{k} after freeing everything");
    }
    cuda::reset_peak_host_memory_stats()?;
    cuda::reset_accumulated_host_memory_stats()?;
    assert_eq!(host_stat("allocated_bytes.peak"), 0);
    assert_eq!(host_stat("num_host_alloc"), 0);
    Ok(())
}

/// Free a pinned tensor while its copy to the device is queued behind a delay: a new pinned
/// tensor of the same size gets another block until the copy completed, then the old one.
#[test]
fn a_freed_pinned_block_is_reused_only_after_its_copy_completed() -> Result<()> {
    let _s = serial();
    if !common::one_device() {
        return Ok(());
    }
    let s = Stream::new(Some(0), 0)?;
    warm_up(&s)?;
    let _g = StreamGuard::new(&s)?;
    let n = 1 << 20; // 4 MiB of f32
    let data: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 + 0.5).collect();
    retry_if_stalled(ms(300), |delay| {
        cuda::host_empty_cache()?;
        let pinned = Tensor::from_slice(&data, [n], Device::Cpu)?.pin_memory()?;
        let block = pinned.data_ptr();
        let queued = Instant::now();
        testing::delay(&s, delay)?;
        let dev = pinned.to(Device::cuda(0), true)?;
        drop(pinned); // the copy has not run yet
        let active = host_stat("active_requests.current");
        let other = Tensor::empty_pinned([n], DType::F32)?; // zero-filled at once on the host
        let observed =
            assert_busy(other.data_ptr() != block, queued, delay, "a pinned block was reused before its copy ran");
        if observed {
            assert_eq!(active, 1, "the freed block counts as active while its copy is pending");
        }
        assert_eq!(dev.to_vec::<f32>()?, data, "the copy read the freed block, untouched");
        drop(other);
        let again = Tensor::empty_pinned([n], DType::F32)?;
        assert_eq!(again.data_ptr(), block, "once the copy completed, the block is reused");
        Ok(observed)
    })
}

/// `host_empty_cache` keeps a freed block whose copy is still in flight; it goes once the copy
/// has completed.
#[test]
fn host_empty_cache_keeps_blocks_with_copies_in_flight() -> Result<()> {
    let _s = serial();
    if !common::one_device() {
        return Ok(());
    }
    let s = Stream::new(Some(0), 0)?;
    warm_up(&s)?;
    let _g = StreamGuard::new(&s)?;
    retry_if_stalled(ms(300), |delay| {
        cuda::host_empty_cache()?;
        let pinned = Tensor::ones([1 << 20], DType::U8, Device::Cpu)?.pin_memory()?;
        let owned = host_stat("allocations.current");
        let queued = Instant::now();
        testing::delay(&s, delay)?;
        let dev = pinned.to(Device::cuda(0), true)?;
        drop(pinned);
        cuda::host_empty_cache()?;
        let kept = host_stat("allocations.current") == owned;
        let observed = assert_busy(kept, queued, delay, "host_empty_cache freed a block its copy still used");
        s.synchronize()?;
        cuda::host_empty_cache()?;
        assert_eq!(host_stat("allocations.current"), owned - 1, "after the copy, the block goes");
        assert!(dev.to_vec::<u8>()?.iter().all(|&x| x == 1));
        Ok(observed)
    })
}
