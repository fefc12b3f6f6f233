//! Out-of-memory and injected allocation failures through `RawBuffer`. Both act on a device's
//! next allocation, which any concurrent test could take: this file has its own process and its
//! tests take a lock, so nothing else allocates meanwhile.

mod common;

use common::{assert_invalid_device, is_sim, two_devices};
use cudasem::cuda::{self, Stream};
use cudasem::testing::{self, RawBuffer};
use cudasem::{Error, Result};
use std::sync::{Mutex, MutexGuard};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn fail_next_malloc_fails_exactly_the_next_allocation() -> Result<()> {
    let _s = serial();
    for d in 0..cuda::device_count() {
        testing::fail_next_malloc(d)?;
        match RawBuffer::new(Some(d), 4096) {
            Err(Error::Injected { device, .. }) => assert_eq!(device, d),
            other => panic!("cuda:{d}: expected Error::Injected, got {other:?}"),
        }
        let ok = RawBuffer::new(Some(d), 4096)?;
        assert_eq!(ok.device(), d, "the allocation after the injected failure succeeds");
        let s = Stream::new(Some(d), 0)?;
        ok.fill(4, &s)?;
        assert!(ok.read(&s)?.iter().all(|&b| b == 4));
    }
    assert_invalid_device(testing::fail_next_malloc(99), 99);
    Ok(())
}

#[test]
fn fail_next_malloc_is_per_device() -> Result<()> {
    let _s = serial();
    if !two_devices() {
        return Ok(());
    }
    testing::fail_next_malloc(0)?;
    let on_1 = RawBuffer::new(Some(1), 512)?;
    assert_eq!(on_1.device(), 1, "device 1 is not affected by device 0's injected failure");
    assert!(matches!(RawBuffer::new(Some(0), 512), Err(Error::Injected { device: 0, .. })));
    RawBuffer::new(Some(0), 512)?;
    Ok(())
}

#[test]
fn allocating_more_than_free_is_out_of_memory_with_pytorchs_message() -> Result<()> {
    let _s = serial();
    if !is_sim() {
        eprintln!("skipped: out of memory is only simulated safely on the sim driver");
        return Ok(());
    }
    let (free0, total) = cuda::mem_get_info(Some(0))?;
    // The sim driver only backs bytes that are touched: half the device costs no host memory.
    let big = RawBuffer::new(Some(0), free0 / 2)?;
    let (free, _) = cuda::mem_get_info(Some(0))?;
    assert!(free <= free0 - free0 / 2, "the allocation is charged: free {free0} -> {free}");
    let too_much = free + 1;
    match RawBuffer::new(Some(0), too_much) {
        Err(e @ Error::OutOfMemory { .. }) => {
            let Error::OutOfMemory { device, requested, total: t, free: f, .. } = e.clone() else { unreachable!() };
            assert_eq!((device, requested, t, f), (0, too_much, total, free));
            let msg = e.to_string();
            assert!(msg.starts_with("CUDA out of memory. Tried to allocate"), "{msg}");
            assert!(msg.contains("GPU 0"), "{msg}");
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    // A normal allocation works right after, and so does one that fits in what is left.
    let small = RawBuffer::new(Some(0), 4096)?;
    assert_eq!(small.len(), 4096);
    drop(small);
    let rest = RawBuffer::new(Some(0), free / 2)?;
    drop(rest);
    drop(big);
    assert_eq!(cuda::mem_get_info(Some(0))?.0, free0, "freeing returns the bytes");
    let over_capacity = RawBuffer::new(Some(0), total + 1);
    assert!(matches!(over_capacity, Err(Error::OutOfMemory { .. })));
    Ok(())
}

/// A free that fails in `Drop` is not lost: the next synchronize of that device (or of one of its
/// streams) returns it, once; other devices do not see it; the device keeps working.
#[test]
fn a_free_failing_in_drop_is_returned_by_the_next_synchronize() -> Result<()> {
    let _s = serial();
    let n = cuda::device_count();
    for d in 0..n {
        let buf = RawBuffer::new(Some(d), 4096)?;
        cuda::synchronize(Some(d))?;
        testing::fail_next_free(d)?;
        drop(buf);
        if n > 1 {
            cuda::synchronize(Some((d + 1) % n))?;
        }
        match cuda::synchronize(Some(d)) {
            Err(Error::Injected { device, op: "free" }) => assert_eq!(device, d),
            other => panic!("cuda:{d}: expected the free's Error::Injected, got {other:?}"),
        }
        cuda::synchronize(Some(d))?;

        let s = Stream::new(Some(d), 0)?;
        let buf = RawBuffer::new(Some(d), 4096)?;
        testing::fail_next_free(d)?;
        drop(buf);
        match s.synchronize() {
            Err(Error::Injected { device, op: "free" }) => assert_eq!(device, d),
            other => panic!("cuda:{d}: expected the stream's synchronize to return it, got {other:?}"),
        }
        s.synchronize()?;
        let ok = RawBuffer::new(Some(d), 4096)?;
        ok.fill(7, &s)?;
        assert!(ok.read(&s)?.iter().all(|&b| b == 7), "cuda:{d} works after the failed free");
    }
    assert_invalid_device(testing::fail_next_free(99), 99);
    Ok(())
}
