//! Out-of-memory observers (`torch._C._cuda_attach_out_of_memory_observer`), the accumulated
//! statistics' reset (`reset_accumulated_memory_stats`) and allocator settings changed while
//! running (`torch.cuda.memory._set_allocator_settings`), on the sim driver and real GPUs
//! (`CUDASEM_DRIVER=cuda`). Tests take [`serial`] first: observers and settings are process-wide.

mod common;

use common::{last_device, stat};
use cudasem::cuda;
use cudasem::cuda::memory::{self, OutOfMemoryInfo};
use cudasem::testing::RawBuffer;
use cudasem::{Error, Result};
use std::sync::{Mutex, MutexGuard};

const MIB: usize = 1 << 20;

static SERIAL: Mutex<()> = Mutex::new(());

/// What the observers of this file saw: (observer number, the info, what it read back).
type Log = Vec<(usize, OutOfMemoryInfo, Option<(usize, i64)>)>;
static LOG: Mutex<Log> = Mutex::new(Vec::new());

fn serial() -> MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    cuda::empty_cache().expect("empty_cache");
    guard
}

fn log() -> MutexGuard<'static, Log> {
    LOG.lock().unwrap_or_else(|e| e.into_inner())
}

/// Attaches this file's two observers, once: the first takes a snapshot and reads the
/// statistics of the failing device (the allocator's lock must not be held), the second only
/// logs (called after the first).
fn attach_observers() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        memory::attach_out_of_memory_observer(|info| {
            let snapshot = cuda::memory_snapshot().expect("a snapshot inside the observer");
            let stats = cuda::memory_stats(Some(info.device)).expect("statistics inside the observer");
            let reserved: usize =
                snapshot.segments.iter().filter(|s| s.device == info.device).map(|s| s.total_size).sum();
            log().push((1, *info, Some((reserved, stats.num_ooms()))));
        })
        .unwrap();
        memory::attach_out_of_memory_observer(|info| log().push((2, *info, None))).unwrap();
    });
}

/// More bytes than the device has.
fn too_much(device: usize) -> Result<usize> {
    let (_, total) = cuda::mem_get_info(Some(device))?;
    Ok(total + 64 * MIB)
}

#[test]
fn observers_are_called_in_order_with_pytorchs_arguments_and_may_snapshot() -> Result<()> {
    let _s = serial();
    attach_observers();
    let d = last_device();
    let held = RawBuffer::cached(Some(d), 3 * MIB, None)?;
    log().clear();
    let ooms = stat(d, "num_ooms");
    let want = too_much(d)?;
    let r = RawBuffer::cached(Some(d), want, None);
    let Err(Error::OutOfMemory { device, requested, total, free, allocated, reserved_unallocated }) = r else {
        panic!("more than the device's memory: expected OutOfMemory, got {:?}", r.map(|b| b.len()));
    };
    let seen = std::mem::take(&mut *log());
    assert_eq!(seen.len(), 2, "each observer once: {seen:?}");
    assert_eq!((seen[0].0, seen[1].0), (1, 2), "called in the order attached");
    let info = seen[0].1;
    assert_eq!(info, seen[1].1);
    assert_eq!(info.device, d);
    assert_eq!(device, d);
    assert!(info.alloc_size >= want, "alloc_size {} < the {want} bytes asked", info.alloc_size);
    assert_eq!(info.alloc_size, requested);
    assert_eq!((info.device_total, info.device_free), (total, free), "no fraction set: the device's total");
    assert_eq!(info.allocated, allocated);
    assert!(info.allocated >= 3 * MIB);
    assert_eq!(info.reserved, allocated + reserved_unallocated);
    // The first observer read the snapshot and statistics of the failing device: the OOM was
    // counted before it ran, and its snapshot agrees with the reserved figure it was given.
    let (snap_reserved, snap_ooms) = seen[0].2.expect("the first observer's reading");
    assert_eq!(snap_ooms, ooms + 1);
    assert_eq!(snap_reserved, info.reserved);
    // The runtime stays usable: the held block is intact, a new one is served.
    let b = RawBuffer::cached(Some(d), 4 * MIB, None)?;
    assert_eq!(held.len(), 3 * MIB);
    drop((b, held));
    assert!(log().is_empty(), "no observer call without an out-of-memory error");
    Ok(())
}

#[test]
fn with_a_memory_fraction_the_observer_is_given_the_cap() -> Result<()> {
    let _s = serial();
    attach_observers();
    let d = 0;
    let (_, total) = cuda::mem_get_info(Some(d))?;
    cuda::set_per_process_memory_fraction(0.25, Some(d))?;
    log().clear();
    let r = RawBuffer::cached(Some(d), total / 2, None);
    cuda::set_per_process_memory_fraction(1.0, Some(d))?;
    assert!(matches!(r, Err(Error::OutOfMemory { .. })), "half the device over a 25% cap");
    let seen = std::mem::take(&mut *log());
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0].1.device_total, (0.25 * total as f64) as usize, "PyTorch passes allowed_memory_maximum");
    Ok(())
}

#[test]
fn an_observer_may_allocate_and_a_nested_failure_does_not_recurse() -> Result<()> {
    let _s = serial();
    attach_observers();
    let d = 0;
    static NESTED: Mutex<Vec<(usize, bool)>> = Mutex::new(Vec::new());
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        memory::attach_out_of_memory_observer(|info| {
            // Allocates on the failing device (served), then fails again inside the observer.
            let small = RawBuffer::cached(Some(info.device), MIB, None).map(|b| b.len());
            let big = RawBuffer::cached(Some(info.device), info.device_total + MIB, None).is_err();
            NESTED.lock().unwrap().push((small.unwrap_or(0), big));
        })
        .unwrap();
    });
    log().clear();
    NESTED.lock().unwrap().clear();
    let r = RawBuffer::cached(Some(d), too_much(d)?, None);
    assert!(matches!(r, Err(Error::OutOfMemory { .. })));
    assert_eq!(*NESTED.lock().unwrap(), [(MIB, true)], "called once; its own allocations worked or failed plainly");
    assert_eq!(log().len(), 2, "the nested failure called no observer again");
    Ok(())
}

#[test]
fn reset_accumulated_memory_stats_zeroes_totals_and_counters_only() -> Result<()> {
    let _s = serial();
    let d = 0;
    let a = RawBuffer::cached(Some(d), 5000, None)?;
    drop(RawBuffer::cached(Some(d), 70_000, None)?);
    let _ = RawBuffer::cached(Some(d), too_much(d)?, None);
    let before = cuda::memory_stats(Some(d))?;
    assert!(before.num_ooms() >= 1 && stat(d, "allocation.all.allocated") >= 2);
    memory::reset_accumulated_memory_stats(Some(d))?;
    let after = cuda::memory_stats(Some(d))?;
    for (key, value) in after.iter() {
        let old = before.get(key).unwrap();
        if key.ends_with(".allocated") || key.ends_with(".freed") || key.starts_with("num_") {
            assert_eq!(value, 0, "{key} (was {old})");
        } else {
            assert_eq!(value, old, "{key} is kept");
        }
    }
    assert!(after.get("allocation.all.current").unwrap() >= 1);
    drop(a);
    assert_eq!(stat(d, "allocation.all.freed"), 1, "counting resumes from 0");
    assert!(matches!(cuda::reset_accumulated_memory_stats(Some(99)), Err(Error::InvalidDevice { .. })));
    Ok(())
}

#[test]
fn set_allocator_settings_changes_later_allocations_and_refuses_bad_keys() -> Result<()> {
    let _s = serial();
    let d = 0;
    let base = cuda::allocator_settings()?;
    // Rounding to quarters of a power of two applies to the next allocation: 5 MiB + 1000 B
    // rounds up to 6 MiB (the default rounds to 512 bytes).
    let size = 5 * MIB + 1000;
    assert_eq!(base.round_size(size), 5 * MIB + 1024);
    memory::set_allocator_settings("roundup_power2_divisions:4")?;
    assert_eq!(cuda::allocator_settings()?.round_size(size), 6 * MIB);
    let b = RawBuffer::cached(Some(d), size, None)?;
    let live: Vec<_> =
        common::device_segments(d).into_iter().flat_map(|s| s.blocks).filter(|x| x.address == b.ptr()).collect();
    assert_eq!(live[0].size, 6 * MIB, "rounded by the new setting");
    drop(b);
    // Keys it does not set return to their defaults (PyTorch resets these three), others stay.
    memory::set_allocator_settings("garbage_collection_threshold:0.6,max_split_size_mb:64")?;
    let s = cuda::allocator_settings()?;
    assert_eq!(s.round_size(size), 5 * MIB + 1024, "divisions back to the default");
    assert_eq!((s.max_split_size(), s.garbage_collection_threshold()), (Some(64 * MIB), Some(0.6)));
    assert_eq!(stat(d, "max_split_size"), (64 * MIB) as i64, "the statistic follows");
    // Typed errors; nothing changes.
    for bad in ["no_such_key:1", "max_split_size_mb:10", "garbage_collection_threshold:1.5", "backend:cudaMallocAsync"]
    {
        match memory::set_allocator_settings(bad) {
            Err(Error::InvalidConfig { .. }) => {}
            other => panic!("{bad}: expected InvalidConfig, got {other:?}"),
        }
        assert_eq!(cuda::allocator_settings()?, s, "{bad} changed nothing");
    }
    memory::set_allocator_settings(&base.to_string())?;
    assert_eq!(cuda::allocator_settings()?, base);
    drop(RawBuffer::cached(Some(d), 1000, None)?);
    Ok(())
}

#[test]
fn expandable_segments_can_be_switched_while_running() -> Result<()> {
    let _s = serial();
    let d = 0;
    let base = cuda::allocator_settings()?;
    memory::set_allocator_settings("expandable_segments:True")?;
    assert!(cuda::allocator_settings()?.expandable_segments());
    let b = RawBuffer::cached(Some(d), 30 * MIB, None)?;
    assert!(common::segment_of(d, b.ptr()).is_expandable, "the next allocation lands in an expandable segment");
    drop(b);
    memory::set_allocator_settings("expandable_segments:False")?;
    let c = RawBuffer::cached(Some(d), 30 * MIB, None)?;
    assert!(!common::segment_of(d, c.ptr()).is_expandable, "off again: an ordinary segment");
    drop(c);
    memory::set_allocator_settings(&base.to_string())?;
    cuda::empty_cache()?;
    Ok(())
}

#[test]
fn observers_receive_each_devices_failures() -> Result<()> {
    let _s = serial();
    attach_observers();
    log().clear();
    let n = cuda::device_count();
    for d in 0..n {
        let _ = RawBuffer::cached(Some(d), too_much(d)?, None);
    }
    let devices: Vec<usize> = log().iter().filter(|(k, ..)| *k == 2).map(|(_, i, _)| i.device).collect();
    assert_eq!(devices, (0..n).collect::<Vec<_>>());
    Ok(())
}
