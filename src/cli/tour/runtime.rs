//! The tour's runtime sections: devices and their guards, streams, asynchrony, events, peer access.

use super::section::{check, check_measures, e, ms_between, returns_before_done, timing_event, Failure, Outcome, Seen};
use cudasem::cuda::{self, DeviceGuard, Event, EventFlags, Stream, StreamGuard};
use cudasem::testing::{delay, RawBuffer};
use cudasem::Error;
use std::time::{Duration, Instant};

/// Device count, properties, the current device per thread, and set_device's errors.
pub fn devices() -> Result<Outcome, Failure> {
    let n = cuda::device_count();
    if n == 0 {
        return Err(cuda::current_device().err().map_or("no device".into(), e));
    }
    for i in 0..n {
        let p = cuda::get_device_properties(Some(i)).map_err(e)?;
        let (free, total) = cuda::mem_get_info(Some(i)).map_err(e)?;
        println!(
            "   cuda:{i}: {} — {} SMs, compute capability {}.{}, {} free of {}",
            p.name,
            p.multi_processor_count,
            p.major,
            p.minor,
            cudasem::cuda::memory::format_bytes(free),
            cudasem::cuda::memory::format_bytes(total)
        );
        check(free <= total && p.multi_processor_count > 0, || format!("implausible properties for cuda:{i}"))?;
    }
    let cur = cuda::current_device().map_err(e)?;
    println!("   current device of this thread: cuda:{cur}");
    check(cur == 0, || format!("a fresh thread should start on cuda:0, not cuda:{cur}"))?;
    cuda::set_device(n - 1).map_err(e)?;
    let now = cuda::current_device().map_err(e)?;
    println!("   set_device({}) → current device cuda:{now}", n - 1);
    check(now == n - 1, || "set_device did not change the current device".into())?;
    let other = std::thread::spawn(cuda::current_device).join().map_err(|_| "thread panicked".to_string())?;
    println!("   a new thread meanwhile sees cuda:{}", other.clone().map_err(e)?);
    check(other == Ok(0), || "the current device leaked into another thread".into())?;
    match cuda::set_device(n) {
        Err(err @ Error::InvalidDevice { .. }) => println!("   set_device({n}) → error: {err}"),
        other => return Err(format!("set_device({n}) should be InvalidDevice, got {other:?}")),
    }
    check(cuda::current_device() == Ok(n - 1), || "a failed set_device changed the device".into())?;
    match cuda::set_device("cpu") {
        Err(err @ Error::NotCudaDevice { .. }) => println!("   set_device(\"cpu\") → error: {err}"),
        other => return Err(format!("set_device(\"cpu\") should be NotCudaDevice, got {other:?}")),
    }
    cuda::set_device(0).map_err(e)?;
    Ok(Outcome::Ok)
}

/// DeviceGuard restores the device on exit, when nested and on panic, for this thread only.
pub fn device_guard() -> Result<Outcome, Failure> {
    let n = cuda::device_count();
    let last = n - 1;
    let seen = {
        let _outer = DeviceGuard::new(last).map_err(e)?;
        let in_outer = cuda::current_device().map_err(e)?;
        let in_inner = {
            let _inner = DeviceGuard::new(0).map_err(e)?;
            cuda::set_device(last).map_err(e)?; // undone when `_inner` drops
            cuda::current_device().map_err(e)?
        };
        (in_outer, in_inner, cuda::current_device().map_err(e)?)
    };
    let after = cuda::current_device().map_err(e)?;
    println!("   guard(cuda:{last}) {{ guard(cuda:0) {{ set_device({last}) }} }}: devices seen {:?}, after both: cuda:{after}", seen);
    check(seen == (last, last, last) && after == 0, || {
        format!("expected ({last}, {last}, {last}) then 0, saw {seen:?} then {after}")
    })?;

    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let caught = std::panic::catch_unwind(|| {
        let _g = DeviceGuard::new(last).expect("valid device");
        panic!("a failure inside the guarded scope");
    });
    std::panic::set_hook(hook);
    let after_panic = cuda::current_device().map_err(e)?;
    println!("   a panic inside guard(cuda:{last}) → current device afterwards: cuda:{after_panic}");
    check(caught.is_err() && after_panic == 0, || "the guard did not restore the device on panic".into())?;

    let v = cuda::with_device(last, || Ok(std::thread::spawn(|| cuda::current_device().ok()).join().ok().flatten()))
        .map_err(e)?;
    println!("   with_device({last}, ..): a thread started inside sees cuda:{}", v.unwrap_or(usize::MAX));
    check(v == Some(0), || "another thread saw this thread's guard".into())?;
    Ok(Outcome::Ok)
}

/// Default and current streams, the round-robin pool, priorities, StreamGuard.
pub fn streams() -> Result<Outcome, Failure> {
    let n = cuda::device_count();
    for d in 0..n {
        let (cur, def) = (cuda::current_stream(Some(d)).map_err(e)?, cuda::default_stream(Some(d)).map_err(e)?);
        check(cur == def && def.is_default(), || {
            format!("cuda:{d}: current stream {cur:?} is not the default {def:?}")
        })?;
    }
    println!("   on every device the current stream starts as the default stream");
    let first = Stream::new(None, 0).map_err(e)?;
    let mut distinct = vec![first.clone()];
    for _ in 1..32 {
        let s = Stream::new(None, 0).map_err(e)?;
        check(!distinct.contains(&s), || "the pool handed out a stream twice within 32".into())?;
        distinct.push(s);
    }
    let again = Stream::new(None, 0).map_err(e)?;
    let wraps = distinct.iter().position(|s| *s == again);
    println!(
        "   Stream::new × 33: 32 distinct pool streams, then the pool wraps around (33rd = #{})",
        wraps.map_or(-1, |p| p as i64 + 1)
    );
    check(wraps.is_some(), || "the 33rd pool stream is not one of the first 32".into())?;
    let hi = Stream::new(None, -1).map_err(e)?;
    println!("   Stream::new(None, -1) → priority {} (normal pool streams: {})", hi.priority(), first.priority());
    check(hi.priority() < first.priority(), || "a high-priority stream did not get a higher priority".into())?;

    let last = n - 1;
    let s = Stream::new(Some(last), 0).map_err(e)?;
    {
        let _g = StreamGuard::new(&s).map_err(e)?;
        let (dev, cur) = (cuda::current_device().map_err(e)?, cuda::current_stream(None).map_err(e)?);
        println!("   inside StreamGuard({s:?}): current device cuda:{dev}, current stream is it: {}", cur == s);
        check(dev == last && cur == s, || "StreamGuard did not switch device and stream".into())?;
    }
    let (dev, cur) = (cuda::current_device().map_err(e)?, cuda::current_stream(Some(last)).map_err(e)?);
    println!("   after it: cuda:{dev}, cuda:{last}'s current stream is the default again: {}", cur.is_default());
    check(dev == 0 && cur.is_default(), || "StreamGuard did not restore device and stream".into())?;
    Ok(Outcome::Ok)
}

/// Queued work returns at once (the stream is still busy after the call); events time the work.
pub fn asynchrony() -> Result<Outcome, Failure> {
    const WORK: Duration = Duration::from_millis(200);
    let s = Stream::new(None, 0).map_err(e)?;
    let (start, end) = (timing_event(), timing_event());
    // Warm up: the first delay loads its kernel (on CUDA), which is not what we time.
    delay(&s, Duration::from_millis(1)).map_err(e)?;
    s.synchronize().map_err(e)?;
    returns_before_done("queueing device work", WORK, |work| {
        let t0 = Instant::now();
        start.record(Some(&s)).map_err(e)?;
        delay(&s, work).map_err(e)?;
        end.record(Some(&s)).map_err(e)?;
        let queued = t0.elapsed();
        let seen = Seen::since(t0, !s.query().map_err(e)?);
        println!(
            "   queued {} ms of device work in {:.1} µs of host time; stream busy right after: {}",
            work.as_millis(),
            queued.as_secs_f64() * 1e6,
            seen.busy
        );
        let t1 = Instant::now();
        s.synchronize().map_err(e)?;
        let waited = t1.elapsed();
        let ms = start.elapsed_time(&end).map_err(e)?;
        println!(
            "   Stream::synchronize waited {:.1} ms on the host; the events measured {ms:.2} ms on the device",
            waited.as_secs_f64() * 1e3
        );
        check_measures(f64::from(ms), work, "a delay")?;
        Ok(seen)
    })?;
    Ok(Outcome::Ok)
}

/// Waiting on an event orders another stream without blocking the host; timing's typed errors.
pub fn events() -> Result<Outcome, Failure> {
    const N: usize = 1 << 20;
    let producer = Stream::new(None, 0).map_err(e)?;
    let consumer = Stream::new(None, 0).map_err(e)?;
    let (a, b) = (RawBuffer::new(None, N).map_err(e)?, RawBuffer::new(None, N).map_err(e)?);
    a.fill(1, &producer).map_err(e)?;
    b.fill(2, &consumer).map_err(e)?;
    producer.synchronize().map_err(e)?;
    consumer.synchronize().map_err(e)?;
    // The producer is slow: 150 ms of work, then it writes 0xAB.
    delay(&producer, Duration::from_millis(150)).map_err(e)?;
    a.fill(0xAB, &producer).map_err(e)?;
    let (produced, consumed) = (timing_event(), timing_event());
    produced.record(Some(&producer)).map_err(e)?;
    let ready = producer.record_event(None).map_err(e)?;
    let t0 = Instant::now();
    ready.wait(Some(&consumer)).map_err(e)?; // the host does not wait here
    let host = t0.elapsed();
    b.copy_from(&a, &consumer).map_err(e)?;
    consumed.record(Some(&consumer)).map_err(e)?;
    let got = b.read(&consumer).map_err(e)?;
    let all = got.iter().all(|&x| x == 0xAB);
    println!("   consumer waited on the producer's event (host blocked {:.1} µs); the consumer's copy saw the producer's 0xAB in all {N} bytes: {all}", host.as_secs_f64() * 1e6);
    check(all, || format!("the consumer read {:#x} before the producer finished", got[0]))?;
    check(ready.query().map_err(e)?, || "the event is not complete after its work was read".into())?;
    let after = ms_between(&produced, &consumed)?;
    println!("   by the device's clock, the consumer's copy ended {after:.3} ms after the producer's fill");
    check(after > 0.0, || format!("the consumer's copy ended {after} ms after the producer's fill"))?;

    let plain = Event::new(EventFlags::default());
    plain.record(Some(&producer)).map_err(e)?;
    match plain.elapsed_time(&ready) {
        Err(err @ Error::EventTimingDisabled) => println!("   elapsed_time without enable_timing → {err}"),
        other => return Err(format!("expected EventTimingDisabled, got {other:?}")),
    }
    let (t_a, t_b) = (Event::new(EventFlags::timing()), Event::new(EventFlags::timing()));
    match t_a.elapsed_time(&t_b) {
        Err(err @ Error::EventNotRecorded) => println!("   elapsed_time before recording → {err}"),
        other => return Err(format!("expected EventNotRecorded, got {other:?}")),
    }
    println!("   an event never recorded: query() = {}", t_a.query().map_err(e)?);
    check(t_a.query().map_err(e)?, || "an unrecorded event should report complete, as in PyTorch".into())?;
    Ok(Outcome::Ok)
}

/// The peer matrix, enable_peer_access, and a copy between devices timed by events.
pub fn peer_access() -> Result<Outcome, Failure> {
    let n = cuda::device_count();
    if n < 2 {
        return Ok(Outcome::Skipped(format!("peer access needs two GPUs; this machine has {n}")));
    }
    for i in 0..n {
        let row: Vec<String> = (0..n)
            .map(|j| match (i == j, cuda::can_device_access_peer(i, j)) {
                (true, _) => "-".to_string(),
                (false, Ok(true)) => "yes".into(),
                (false, Ok(false)) => "no".into(),
                (false, Err(err)) => format!("error: {err}"),
            })
            .collect();
        println!("   cuda:{i} can access: [{}]", row.join(", "));
    }
    let can = cuda::can_device_access_peer(0, 1).map_err(e)?;
    match (can, cuda::enable_peer_access(0, 1)) {
        (true, Ok(())) => println!(
            "   enable_peer_access(0, 1) → enabled both ways: {}",
            cuda::is_peer_access_enabled(0, 1).map_err(e)?
        ),
        (false, Err(err @ Error::PeerAccessUnsupported { .. })) => {
            println!("   enable_peer_access(0, 1) → error: {err}")
        }
        (can, other) => {
            return Err(format!("can_device_access_peer(0, 1) = {can} but enable_peer_access gave {other:?}"))
        }
    }
    let bytes = if cuda::driver_name() == "cuda" { 1usize << 30 } else { 64 << 20 };
    let src = RawBuffer::new(Some(0), bytes).map_err(e)?;
    let dst = RawBuffer::new(Some(1), bytes).map_err(e)?;
    let s = Stream::new(Some(0), 0).map_err(e)?;
    src.fill(0x5A, &s).map_err(e)?;
    dst.copy_from(&src, &s).map_err(e)?; // warm-up: the first copy sets the link up
    let (t0, t1) = (Event::new(EventFlags::timing()), Event::new(EventFlags::timing()));
    t0.record(Some(&s)).map_err(e)?;
    dst.copy_from(&src, &s).map_err(e)?;
    t1.record(Some(&s)).map_err(e)?;
    t1.synchronize().map_err(e)?;
    let ms = t0.elapsed_time(&t1).map_err(e)?;
    let s1 = cuda::default_stream(Some(1)).map_err(e)?;
    let back = dst.read(&s1).map_err(e)?;
    let gbps = bytes as f64 / (ms as f64 / 1e3) / 1e9;
    println!(
        "   copied {} cuda:0 → cuda:1 in {ms:.2} ms by events ({gbps:.1} GB/s{}, {}); every byte arrived: {}",
        cudasem::cuda::memory::format_bytes(bytes),
        if cuda::driver_name() == "sim" { ", the simulated machine's model" } else { "" },
        if can { "over the peer link" } else { "staged, no peer link" },
        back.iter().all(|&x| x == 0x5A)
    );
    check(back.iter().all(|&x| x == 0x5A), || "the copy between devices lost data".into())?;
    Ok(Outcome::Ok)
}
