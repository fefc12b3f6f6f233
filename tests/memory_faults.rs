//! Out-of-memory and injected allocation failures through `RawBuffer`. Both act on a device's
//! next allocation, which any concurrent test could take: this file has its own process and its
//! tests take a lock, so nothing else allocates meanwhile.

mod common;

use common::{assert_invalid_device, is_sim, two_devices, TestRng};
use cudasem::cuda::{self, Stream};
use cudasem::testing::{self, RawBuffer};
use cudasem::{Device, Error, Result, Tensor};
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

/// A free that fails in `Drop` is not lost: it is sticky, as CUDA's errors are — every
/// synchronize of that device (or of one of its streams) returns it until `get_last_error` takes
/// it; other devices do not see it; the device keeps working after.
#[test]
fn a_free_failing_in_drop_is_returned_by_every_synchronize_until_taken() -> Result<()> {
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
        for _ in 0..2 {
            match cuda::synchronize(Some(d)) {
                Err(Error::Injected { device, op: "free" }) => assert_eq!(device, d),
                other => panic!("cuda:{d}: expected the free's Error::Injected, got {other:?}"),
            }
        }
        let s = Stream::new(Some(d), 0)?;
        assert!(matches!(s.synchronize(), Err(Error::Injected { op: "free", .. })), "the stream's synchronize too");
        assert!(matches!(cuda::get_last_error(d), Err(Error::Injected { op: "free", .. })), "taken");
        cuda::synchronize(Some(d))?;
        s.synchronize()?;
        let ok = RawBuffer::new(Some(d), 4096)?;
        ok.fill(7, &s)?;
        assert!(ok.read(&s)?.iter().all(|&b| b == 7), "cuda:{d} works after the failed free");
    }
    assert_invalid_device(testing::fail_next_free(99), 99);
    assert_invalid_device(cuda::get_last_error(99), 99);
    Ok(())
}

/// Two frees failing in `Drop` are both reported, oldest first, at every synchronization point
/// of the device — device, stream and event synchronize, stream and event queries, host reads
/// (to_vec, item, cpu) — and by peek_at_last_error, until get_last_error takes them.
#[test]
fn errors_raised_in_drop_are_sticky_at_every_synchronization_point_and_none_is_merged() -> Result<()> {
    let _s = serial();
    let mut rng = TestRng::new(3601);
    for d in 0..cuda::device_count() {
        let data: Vec<u8> = rng.nonzero_bytes(97);
        let t = Tensor::from_slice(&data, [97], Device::cuda(d))?;
        let (a, b) = (RawBuffer::new(Some(d), 512)?, RawBuffer::new(Some(d), 1024)?);
        let s = Stream::new(Some(d), 0)?;
        let ev = s.record_event(None)?;
        for buf in [a, b] {
            testing::fail_next_free(d)?;
            drop(buf);
        }
        let both = Err(Error::DeviceErrors {
            device: d,
            errors: vec![Error::Injected { device: d, op: "free" }, Error::Injected { device: d, op: "free" }],
        });
        for _ in 0..2 {
            assert_eq!(cuda::synchronize(Some(d)), both, "cuda:{d}: synchronize");
            assert_eq!(s.synchronize(), both, "stream synchronize");
            assert_eq!(s.query().map(|_| ()), both, "stream query");
            assert_eq!(ev.synchronize(), both, "event synchronize");
            assert_eq!(ev.query().map(|_| ()), both, "event query");
            assert_eq!(t.to_vec::<u8>().map(|_| ()), both, "to_vec");
            assert_eq!(t.narrow(0, 3, 1)?.item::<u8>().map(|_| ()), both, "item");
            assert_eq!(t.cpu().map(|_| ()), both, "cpu");
            assert_eq!(cuda::peek_at_last_error(d), both, "peek");
        }
        let msg = both.clone().unwrap_err().to_string();
        assert!(msg.starts_with("2 asynchronous errors are pending on cuda:") && msg.contains("2) "), "{msg}");
        assert_eq!(cuda::get_last_error(d), both, "taken, both");
        assert_eq!(cuda::get_last_error(d), Ok(()), "nothing left");
        assert!(ev.query()? && s.query()?);
        assert_eq!(t.to_vec::<u8>()?, data);
        assert_eq!(t.narrow(0, 3, 1)?.item::<u8>()?, data[3]);
    }
    Ok(())
}

/// Run in a child process by the test below: a free fails in `Drop`, and the process exits
/// without any synchronize.
#[test]
fn child_exits_with_an_error_pending() -> Result<()> {
    if std::env::var_os(CHILD).is_none() {
        return Ok(()); // only the child process of the test below does this
    }
    let buf = RawBuffer::new(Some(0), 4096)?;
    testing::fail_next_free(0)?;
    drop(buf);
    Ok(())
}

const CHILD: &str = "CUDASEM_TEST_EXIT_WITH_PENDING_ERROR";

/// An error still pending when the process exits is written to stderr, not lost.
#[test]
fn an_error_pending_at_exit_is_reported_on_stderr() {
    if !testing::has_devices(1) {
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "child_exits_with_an_error_pending", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .expect("the test binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the child failed: {stderr}");
    let line = stderr.lines().find(|l| l.contains("never reported")).unwrap_or_else(|| panic!("no report: {stderr}"));
    assert!(line.contains("cuda:0") && line.contains("free"), "{line}");
    assert!(line.contains(&Error::Injected { device: 0, op: "free" }.to_string()), "{line}");
}
