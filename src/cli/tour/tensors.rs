//! The tour's tensor sections: where tensors land, where ops run, the cross-device rule, and
//! non-blocking copies from pinned memory (overlap with compute, the host allocator, speed).

use super::section::{check, e, ms_between, returns_before_done, timing_event, two_streams, Failure, Outcome, Seen};
use cudasem::cuda::memory::format_bytes;
use cudasem::cuda::{self, DeviceGuard, Stream};
use cudasem::testing::delay;
use cudasem::{DType, Device, Error, Tensor};
use std::time::{Duration, Instant};

/// Bytes moved by the copy sections: what a real GPU needs to show its speed; less on the
/// simulated machine, whose copies are host memcpys.
fn copy_bytes() -> usize {
    if cuda::driver_name() == "cuda" {
        256 << 20
    } else {
        64 << 20
    }
}

/// `"cuda"` tensors land on the current device; under `DeviceGuard(i)` on cuda:i.
pub fn placement() -> Result<Outcome, Failure> {
    let t = Tensor::zeros([4], DType::F32, "cuda").map_err(e)?;
    println!(
        "   current device cuda:{}: Tensor::zeros(.., \"cuda\") → {}",
        cuda::current_device().map_err(e)?,
        t.device()
    );
    check(t.device() == Device::cuda(0), || format!("expected cuda:0, got {}", t.device()))?;
    let last = 1.min(cuda::device_count() - 1); // cuda:1, or cuda:0 on a one-GPU machine
    let (u, v) = {
        let _g = DeviceGuard::new(last).map_err(e)?;
        (
            Tensor::ones([4], DType::F32, "cuda").map_err(e)?,
            Tensor::from_slice(&[1.0f32, 2.0], [2], Device::Cpu).map_err(e)?.cuda().map_err(e)?,
        )
    };
    println!("   under DeviceGuard({last}): Tensor::ones(.., \"cuda\") → {}, t.cuda() → {}", u.device(), v.device());
    check(u.device() == Device::cuda(last) && v.device() == Device::cuda(last), || {
        format!("made under DeviceGuard({last}) but landed on {} and {}", u.device(), v.device())
    })?;
    let w = Tensor::zeros([1], DType::I64, "cuda:0").map_err(e)?;
    println!("   an explicit index wins: Tensor::zeros(.., \"cuda:0\") → {}", w.device());
    check(w.device() == Device::cuda(0), || "an explicit index was not honoured".into())?;
    check(u.to_vec::<f32>().map_err(e)? == [1.0; 4], || "the ones are not ones".into())?;
    Ok(Outcome::Ok)
}

/// An op runs where its tensors are, whatever the current device; the result lives there.
pub fn ops_follow_operands() -> Result<Outcome, Failure> {
    let n = cuda::device_count();
    if n < 2 {
        return Ok(Outcome::Skipped(format!("showing it needs two GPUs; this machine has {n}")));
    }
    let x = Tensor::arange(0, 6, 1, DType::F32, Device::cuda(1)).map_err(e)?;
    let _g = DeviceGuard::new(0).map_err(e)?;
    let y = (&x * 2.0).map_err(e)?;
    let s = y.sum_all().map_err(e)?;
    println!(
        "   x on {}; under DeviceGuard(0): x * 2 → {}, (x * 2).sum() → {} = {}",
        x.device(),
        y.device(),
        s.device(),
        s.item::<f32>().map_err(e)?
    );
    check(y.device() == Device::cuda(1) && s.device() == Device::cuda(1), || {
        "the result did not stay with its operands on cuda:1".into()
    })?;
    check(s.item::<f32>().map_err(e)? == 30.0, || "wrong sum".into())?;
    Ok(Outcome::Ok)
}

/// Tensors of two GPUs cannot meet in an op — until peer access between them is enabled.
pub fn cross_device() -> Result<Outcome, Failure> {
    let n = cuda::device_count();
    if n < 2 {
        return Ok(Outcome::Skipped(format!("a cross-device op needs two GPUs; this machine has {n}")));
    }
    let a = Tensor::ones([3], DType::F32, "cuda:0").map_err(e)?;
    let b = Tensor::full([3], 2.0, DType::F32, "cuda:1").map_err(e)?;
    if cuda::is_peer_access_enabled(0, 1).map_err(e)? {
        println!("   (peer access between cuda:0 and cuda:1 was enabled earlier in this process: no refusal to show)");
    } else {
        match &a + &b {
            Err(err @ Error::DeviceMismatch { .. }) => println!("   a (cuda:0) + b (cuda:1) → error: {err}"),
            other => return Err(format!("expected DeviceMismatch without peer access, got {other:?}")),
        }
    }
    if !cuda::can_device_access_peer(0, 1).map_err(e)? {
        return Ok(Outcome::Skipped(
            "cuda:0 cannot access cuda:1's memory on this machine, so the op stays refused (copy one operand with .to())"
                .into(),
        ));
    }
    cuda::enable_peer_access(0, 1).map_err(e)?;
    let c = (&a + &b).map_err(e)?;
    let got = c.to_vec::<f32>().map_err(e)?;
    println!("   after enable_peer_access(0, 1): a + b → {got:?} on {} (read b over the peer link)", c.device());
    check(c.device() == Device::cuda(0) && got == [3.0; 3], || format!("wrong result {got:?} on {}", c.device()))?;
    Ok(Outcome::Ok)
}

/// A non-blocking copy from pinned memory is queued on its stream (the call returns while the stream
/// is still busy) and overlaps with work on another stream, by events.
pub fn overlap() -> Result<Outcome, Failure> {
    let bytes = copy_bytes();
    let host = Tensor::empty_pinned([bytes], DType::U8).map_err(e)?;
    host.narrow(0, 0, 4096).map_err(e)?.fill_(7u8).map_err(e)?;
    let dev = Tensor::empty([bytes], DType::U8, "cuda").map_err(e)?;
    let (copy_s, work_s) = two_streams()?;
    let copy = || cuda::with_stream(&copy_s, || dev.copy_(&host, true)).map_err(e);
    // Warm up: the first copy and the first delay set things up (pages, the spin kernel).
    copy()?;
    delay(&work_s, Duration::from_millis(1)).map_err(e)?;
    cuda::synchronize(None).map_err(e)?;

    returns_before_done("the non-blocking copy", Duration::from_millis(100), |work| {
        let queued = Instant::now();
        delay(&copy_s, work).map_err(e)?;
        let call = Instant::now();
        copy()?;
        let host_us = call.elapsed().as_secs_f64() * 1e6;
        let seen = Seen::since(queued, !copy_s.query().map_err(e)?);
        println!(
            "   behind {} ms of queued work, the non-blocking copy returned after {host_us:.0} µs of host time; \
             its stream still busy: {}",
            work.as_millis(),
            seen.busy
        );
        copy_s.synchronize().map_err(e)?;
        Ok(seen)
    })?;

    let (t0, t1) = (timing_event(), timing_event());
    t0.record(Some(&copy_s)).map_err(e)?;
    copy()?;
    t1.record(Some(&copy_s)).map_err(e)?;
    t1.synchronize().map_err(e)?;
    let copy_ms = ms_between(&t0, &t1)?;
    // Compute about as long as the copy, so that overlap halves the total.
    let work = Duration::from_secs_f64((copy_ms / 1e3).max(0.002));

    let (start, copy_end, work_end, end) = (timing_event(), timing_event(), timing_event(), timing_event());
    start.record(Some(&copy_s)).map_err(e)?;
    work_s.wait_event(&start).map_err(e)?;
    delay(&work_s, work).map_err(e)?; // the "compute" on the other stream
    work_end.record(Some(&work_s)).map_err(e)?;
    copy()?;
    copy_end.record(Some(&copy_s)).map_err(e)?;
    copy_s.wait_event(&work_end).map_err(e)?;
    end.record(Some(&copy_s)).map_err(e)?;
    end.synchronize().map_err(e)?;
    let (c, w, total) = (ms_between(&start, &copy_end)?, ms_between(&start, &work_end)?, ms_between(&start, &end)?);
    println!("   {} pinned → device alone: {copy_ms:.2} ms by events", format_bytes(bytes));
    println!(
        "   copy on one stream and {:.1} ms of compute (a delay) on another, from one event: copy {c:.2} ms, \
         compute {w:.2} ms, both done after {total:.2} ms (sum {:.2}, max {:.2})",
        work.as_secs_f64() * 1e3,
        c + w,
        c.max(w)
    );
    let first = dev.narrow(0, 0, 4096).map_err(e)?.to_vec::<u8>().map_err(e)?;
    check(first.iter().all(|&x| x == 7), || "the copied bytes did not arrive".into())?;
    check(total < c + w - 0.5 * c.min(w), || {
        format!("no overlap: the two streams took {total:.2} ms for {c:.2} + {w:.2} ms of work")
    })?;
    Ok(Outcome::Ok)
}

/// Pinned results of non-blocking copies, host reads that wait, and the caching host allocator.
pub fn pinned_memory() -> Result<Outcome, Failure> {
    let s = Stream::new(None, 0).map_err(e)?;
    let _g = cuda::StreamGuard::new(&s).map_err(e)?;
    let src = Tensor::arange(0, 1 << 16, 1, DType::I32, "cuda").map_err(e)?;
    // Pin a block of the size once, so the copy below takes it from the cache, not the driver.
    drop(Tensor::empty_pinned([1 << 16], DType::I32).map_err(e)?);
    s.synchronize().map_err(e)?;
    let mut last = None;
    returns_before_done("the non-blocking copy to the host", Duration::from_millis(150), |work| {
        let queued = Instant::now();
        delay(&s, work).map_err(e)?;
        let t = Instant::now();
        let out = src.to("cpu", true).map_err(e)?;
        let returned = t.elapsed();
        let seen = Seen::since(queued, !s.query().map_err(e)?);
        let values = out.to_vec::<i32>().map_err(e)?;
        let waited = t.elapsed();
        println!(
            "   behind {} ms of queued work: to(\"cpu\", non_blocking=true) returned in {:.0} µs (stream busy: {}), \
             pinned: {}; to_vec() waited for the copy (back {:.1} ms after the call) and saw every value: {}",
            work.as_millis(),
            returned.as_secs_f64() * 1e6,
            seen.busy,
            out.is_pinned(),
            waited.as_secs_f64() * 1e3,
            values.iter().enumerate().all(|(i, &v)| v == i as i32)
        );
        check(out.is_pinned(), || "a non-blocking copy to the host did not land in pinned memory".into())?;
        check(values.iter().enumerate().all(|(i, &v)| v == i as i32), || "the host read saw a torn buffer".into())?;
        last = Some(out);
        Ok(seen)
    })?;
    drop(last);

    let stat = |k: &str| -> Result<i64, Failure> {
        cuda::host_memory_stats().map_err(e)?.get(k).ok_or_else(|| format!("host_memory_stats has no key {k}"))
    };
    cuda::host_empty_cache().map_err(e)?;
    let base = (stat("num_host_alloc")?, stat("num_host_free")?);
    let a = Tensor::empty_pinned([3 << 20], DType::U8).map_err(e)?;
    let p = a.data_ptr();
    drop(a);
    let b = Tensor::empty_pinned([4 << 20], DType::U8).map_err(e)?;
    let (allocs, held) = (stat("num_host_alloc")? - base.0, stat("allocated_bytes.current")?);
    println!(
        "   pinned 3 MiB, freed, pinned 4 MiB: the same {} block (reused: {}), driver allocations: {allocs}",
        format_bytes(held as usize),
        b.data_ptr() == p
    );
    check(b.data_ptr() == p && allocs == 1, || "the cached power-of-two block was not reused".into())?;
    drop(b);
    cuda::host_empty_cache().map_err(e)?;
    println!(
        "   host_empty_cache(): driver frees {}, pinned bytes held {}",
        stat("num_host_free")? - base.1,
        stat("allocated_bytes.current")?
    );
    check(stat("num_host_free")? - base.1 == 1, || "host_empty_cache did not return the block".into())?;
    Ok(Outcome::Ok)
}

/// Host → device speed from pinned and from pageable memory, by events.
pub fn pinned_vs_pageable() -> Result<Outcome, Failure> {
    let bytes = copy_bytes();
    let pageable = Tensor::zeros([bytes], DType::U8, Device::Cpu).map_err(e)?;
    pageable.narrow(0, bytes - 4096, 4096).map_err(e)?.fill_(9u8).map_err(e)?;
    let pinned = pageable.pin_memory().map_err(e)?;
    let dev = Tensor::empty([bytes], DType::U8, "cuda").map_err(e)?;
    let s = cuda::current_stream(None).map_err(e)?;
    let mut best = [f64::INFINITY; 2];
    for round in 0..4 {
        for (i, (src, non_blocking)) in [(&pageable, false), (&pinned, true)].into_iter().enumerate() {
            dev.fill_(0u8).map_err(e)?;
            let (t0, t1) = (timing_event(), timing_event());
            t0.record(Some(&s)).map_err(e)?;
            dev.copy_(src, non_blocking).map_err(e)?;
            t1.record(Some(&s)).map_err(e)?;
            t1.synchronize().map_err(e)?;
            if round > 0 {
                best[i] = best[i].min(ms_between(&t0, &t1)?); // round 0 warms up
            }
            let tail = dev.narrow(0, bytes - 4096, 4096).map_err(e)?.to_vec::<u8>().map_err(e)?;
            check(tail.iter().all(|&x| x == 9), || {
                format!("the copy from {} memory lost data", ["pageable", "pinned"][i])
            })?;
        }
    }
    let gbps = |ms: f64| bytes as f64 / (ms / 1e3) / 1e9;
    println!(
        "   {} host → device, best of 3 by events: pageable {:.2} ms ({:.1} GB/s), pinned {:.2} ms ({:.1} GB/s): pinned is {:.1}× as fast",
        format_bytes(bytes),
        best[0],
        gbps(best[0]),
        best[1],
        gbps(best[1]),
        best[0] / best[1]
    );
    check(best.iter().all(|ms| ms.is_finite() && *ms > 0.0), || format!("implausible timings {best:?}"))?;
    check(best[1] < best[0], || "the copy from pinned memory was not faster than the one from pageable memory".into())?;
    Ok(Outcome::Ok)
}
