//! Streams: current and default streams per device and per thread, set_stream, pool streams and
//! priorities, equality, query, and ordering between streams (wait_stream / wait_event) proven
//! with device buffers (`cudasem::testing::RawBuffer`) behind a delayed stream.

mod common;

use common::{
    assert_busy, assert_invalid_argument, assert_invalid_device, assert_measures_delay, last_device, ms,
    retry_if_stalled, stream_pair, two_devices, TestRng,
};
use cudasem::cuda::{self, DeviceGuard, Event, EventFlags, Stream};
use cudasem::testing::{self, RawBuffer};
use cudasem::Result;
use std::collections::hash_map::DefaultHasher;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::time::Instant;

const LEN: usize = 64 << 10;

fn hash_of<T: Hash>(t: &T) -> u64 {
    let mut h = DefaultHasher::new();
    t.hash(&mut h);
    h.finish()
}

#[track_caller]
fn assert_all(bytes: &[u8], value: u8, what: &str) {
    if let Some(i) = bytes.iter().position(|&b| b != value) {
        panic!("{what}: byte {i} is {} (expected every byte to be {value})", bytes[i]);
    }
}

#[test]
fn current_stream_is_the_default_stream_on_every_device() -> Result<()> {
    for d in 0..cuda::device_count() {
        let cur = cuda::current_stream(Some(d))?;
        let def = cuda::default_stream(Some(d))?;
        assert_eq!(cur, def, "cuda:{d}");
        assert!(def.is_default());
        assert_eq!(def.device(), d);
        assert_eq!(def.priority(), 0);
    }
    assert_eq!(cuda::current_stream(None)?, cuda::default_stream(Some(0))?);
    assert_eq!(cuda::default_stream(None)?, cuda::default_stream(Some(0))?);
    Ok(())
}

#[test]
fn set_stream_sets_its_devices_stream_and_makes_that_device_current() -> Result<()> {
    let last = last_device();
    let s = Stream::new(Some(last), 0)?;
    cuda::set_stream(&s)?;
    assert_eq!(cuda::current_device()?, last, "set_stream makes the stream's device current (as PyTorch)");
    assert_eq!(cuda::current_stream(None)?, s);
    assert_eq!(cuda::current_stream(Some(last))?, s);
    for d in (0..cuda::device_count()).filter(|&d| d != last) {
        assert_eq!(cuda::current_stream(Some(d))?, cuda::default_stream(Some(d))?, "cuda:{d} untouched");
    }
    // Back to the default stream.
    cuda::set_stream(&cuda::default_stream(Some(last))?)?;
    assert_eq!(cuda::current_stream(Some(last))?, cuda::default_stream(Some(last))?);
    Ok(())
}

#[test]
fn current_streams_are_per_device_and_per_thread() -> Result<()> {
    let n = cuda::device_count();
    let mine: Vec<Stream> = (0..n).map(|d| Stream::new(Some(d), 0)).collect::<Result<_>>()?;
    for s in &mine {
        cuda::set_stream(s)?;
    }
    for (d, s) in mine.iter().enumerate() {
        assert_eq!(&cuda::current_stream(Some(d))?, s, "each device keeps its own current stream");
    }
    let theirs = std::thread::spawn(move || -> Result<Vec<Stream>> {
        let defaults: Vec<Stream> = (0..n).map(|d| cuda::current_stream(Some(d))).collect::<Result<_>>()?;
        for (d, s) in defaults.iter().enumerate() {
            assert_eq!(s, &cuda::default_stream(Some(d))?, "another thread starts on the default streams");
        }
        let s = Stream::new(Some(0), 0)?;
        cuda::set_stream(&s)?;
        assert_eq!(cuda::current_stream(Some(0))?, s);
        Ok(defaults)
    });
    theirs.join().unwrap()?;
    for (d, s) in mine.iter().enumerate() {
        assert_eq!(&cuda::current_stream(Some(d))?, s, "another thread's set_stream does not leak here");
    }
    Ok(())
}

#[test]
fn new_stream_is_on_the_current_device_and_not_default() -> Result<()> {
    let last = last_device();
    let _g = DeviceGuard::new(last)?;
    let s = Stream::new(None, 0)?;
    assert_eq!(s.device(), last);
    assert!(!s.is_default());
    assert_ne!(s, cuda::default_stream(Some(last))?);
    assert_eq!(s.priority(), 0);
    assert_eq!(Stream::new(Some(0), 0)?.device(), 0);
    Ok(())
}

#[test]
fn negative_priority_gives_a_higher_priority_stream() -> Result<()> {
    for d in 0..cuda::device_count() {
        let hi = Stream::new(Some(d), -1)?;
        assert!(hi.priority() < 0, "priority -1 gave priority {}", hi.priority());
        assert_eq!(hi.device(), d);
        assert!(!hi.is_default());
        assert_ne!(hi, Stream::new(Some(d), 0)?);
    }
    Ok(())
}

#[test]
fn very_negative_priorities_clamp_to_the_highest_level() -> Result<()> {
    let p1 = Stream::new(None, -1)?.priority();
    let p_big = Stream::new(None, -1000)?.priority();
    let p_min = Stream::new(None, i32::MIN)?.priority();
    assert!(p_big <= p1, "-1000 must be at least as high as -1 ({p_big} vs {p1})");
    assert_eq!(p_big, p_min, "every priority beyond the highest level clamps to it");
    assert!(p_big < 0 && p_big > -1000, "clamped priority {p_big}");
    Ok(())
}

#[test]
fn positive_priority_is_invalid_argument() {
    assert_invalid_argument(Stream::new(None, 1), "Stream::new");
    assert_invalid_argument(Stream::new(Some(0), i32::MAX), "Stream::new");
    assert_invalid_device(Stream::new(Some(99), 1), 99);
}

#[test]
fn stream_equality_hash_and_clone() -> Result<()> {
    let (a, b) = stream_pair(0)?;
    let a2 = a.clone();
    assert_eq!(a, a2);
    assert_eq!(hash_of(&a), hash_of(&a2));
    assert_eq!(a.id(), a2.id());
    assert_ne!(a, b);
    assert_ne!(a.id(), b.id());
    let set: HashSet<Stream> = [a.clone(), a2, b.clone(), a.clone()].into_iter().collect();
    assert_eq!(set.len(), 2);
    assert_eq!(cuda::default_stream(Some(0))?, cuda::default_stream(Some(0))?);
    assert_ne!(a, cuda::default_stream(Some(0))?);
    // Handles made on another thread compare equal too.
    let moved = a.clone();
    let back = std::thread::spawn(move || moved).join().unwrap();
    assert_eq!(back, a);
    let def_there = std::thread::spawn(|| cuda::default_stream(Some(0))).join().unwrap()?;
    assert_eq!(def_there, cuda::default_stream(Some(0))?);
    if two_devices() {
        assert_ne!(cuda::default_stream(Some(0))?, cuda::default_stream(Some(1))?);
        assert_ne!(Stream::new(Some(0), 0)?, Stream::new(Some(1), 0)?);
    }
    let dbg = format!("{a:?}");
    assert!(dbg.contains("cuda:0"), "{dbg}");
    Ok(())
}

#[test]
fn query_is_false_while_a_delay_runs_and_true_after_synchronize() -> Result<()> {
    for d in 0..cuda::device_count() {
        retry_if_stalled(ms(300), |delay| {
            let s = Stream::new(Some(d), 0)?;
            let queued = Instant::now();
            testing::delay(&s, delay)?;
            let what = format!("cuda:{d}: query() must be false while the stream is busy");
            let busy = assert_busy(!s.query()?, queued, delay, &what);
            s.synchronize()?;
            assert!(s.query()?, "cuda:{d}: query() must be true after synchronize()");
            Ok(busy)
        })?;
    }
    Ok(())
}

/// Held by the two tests that time work across a pair of pool streams. Pool streams are shared
/// round-robin by every thread of the process, so the pair of one can be the pair of the other:
/// the 1–4 s delays of `without_a_wait_another_stream_does_not_see_queued_work` then land inside
/// the other's 300 ms measurement (seen on an H100: 2500 ms measured).
static POOL_PAIR_TIMING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn pool_pair_timing() -> std::sync::MutexGuard<'static, ()> {
    POOL_PAIR_TIMING.lock().unwrap_or_else(|p| p.into_inner())
}

#[test]
fn wait_stream_orders_a_stream_after_another() -> Result<()> {
    let _alone = pool_pair_timing();
    let (s1, s2) = stream_pair(0)?;
    let a = RawBuffer::new(Some(0), LEN)?;
    let b = RawBuffer::new(Some(0), LEN)?;
    a.write(&vec![0u8; LEN], &s1)?;
    b.write(&vec![0u8; LEN], &s2)?;
    s1.synchronize()?;
    s2.synchronize()?;

    let (start, copied) = (Event::new(EventFlags::timing()), Event::new(EventFlags::timing()));
    start.record(Some(&s1))?;
    testing::delay(&s1, ms(300))?;
    a.fill(1, &s1)?;
    s2.wait_stream(&s1)?;
    b.copy_from(&a, &s2)?;
    copied.record(Some(&s2))?;
    assert_all(&b.read(&s2)?, 1, "s2 waited for s1's fill");
    // By the device's clock too: s2's copy ended after s1's 300 ms of work.
    assert_measures_delay(start.elapsed_time(&copied)?, 300);
    Ok(())
}

#[test]
fn without_a_wait_another_stream_does_not_see_queued_work() -> Result<()> {
    let _alone = pool_pair_timing();
    let (s1, s2) = stream_pair(0)?;
    let a = RawBuffer::new(Some(0), LEN)?;
    // s2 is not ordered after s1: it reads the old bytes while s1 is still in its delay. A read that
    // wrongly waited for s1 would look just like this thread being stalled past the delay by another
    // thread's driver call, so a stall is retried once with a longer delay and then fails.
    for delay in [ms(1000), ms(4000)] {
        a.write(&vec![3u8; LEN], &s1)?;
        s1.synchronize()?;
        let queued = Instant::now();
        testing::delay(&s1, delay)?;
        a.fill(7, &s1)?;
        let seen = a.read(&s2)?;
        // s1 still busy after the read returned: its fill had not run, so the read saw the old bytes.
        let during = assert_busy(!s1.query()?, queued, delay, "the read must have happened during the delay");
        if during {
            assert_all(&seen, 3, "read on s2 while s1's fill is queued behind the delay");
        } else {
            assert!(seen.iter().all(|&b| b == 3 || b == 7), "a read racing s1's fill saw other bytes");
        }
        s1.synchronize()?;
        assert_all(&a.read(&s2)?, 7, "after s1 finished");
        if during {
            return Ok(());
        }
        eprintln!("note: retrying with a longer delay than {delay:?}");
    }
    panic!(
        "s1 was never still busy after s2's read returned, with delays of 1 s and 4 s: s2's read waited for \
         s1's queued work (s2 is not ordered after s1), or this thread was stalled past both delays"
    )
}

#[test]
fn wait_event_orders_a_stream_after_the_recorded_work() -> Result<()> {
    let (s1, s2) = stream_pair(0)?;
    let a = RawBuffer::new(Some(0), LEN)?;
    let b = RawBuffer::new(Some(0), LEN)?;
    a.write(&vec![0u8; LEN], &s1)?;
    b.write(&vec![0u8; LEN], &s2)?;
    s1.synchronize()?;
    s2.synchronize()?;

    let e = Event::new(Default::default());
    let (queued, delay) = (Instant::now(), ms(300));
    testing::delay(&s1, delay)?;
    a.fill(1, &s1)?;
    e.record(Some(&s1))?;
    s2.wait_event(&e)?;
    // Only a precondition: the order itself is proven by b's bytes below, whatever this observed.
    assert_busy(!e.query()?, queued, delay, "the event is still pending behind the delay");
    b.copy_from(&a, &s2)?;
    assert_all(&b.read(&s2)?, 1, "s2 waited for the event after s1's fill");
    Ok(())
}

#[test]
fn record_event_returns_an_event_that_completes_with_the_stream() -> Result<()> {
    let s = Stream::new(Some(last_device()), 0)?;
    retry_if_stalled(ms(300), |delay| {
        let queued = Instant::now();
        testing::delay(&s, delay)?;
        let e = s.record_event(None)?;
        assert_eq!(e.device(), Some(last_device()));
        assert!(!e.flags().enable_timing, "record_event(None) makes an event without timing");
        let busy = assert_busy(!e.query()?, queued, delay, "the event waits for the delay queued before it");
        s.synchronize()?;
        assert!(e.query()?, "the event completed with the stream");
        Ok(busy)
    })?;

    // record_event(Some(e)) records the given event and returns a handle to it.
    retry_if_stalled(ms(300), |delay| {
        let mine = Event::new(Default::default());
        let queued = Instant::now();
        testing::delay(&s, delay)?;
        let same = s.record_event(Some(&mine))?;
        assert_eq!(same, mine);
        let busy = assert_busy(!mine.query()?, queued, delay, "record_event(Some(e)) records e behind the delay");
        mine.synchronize()?;
        assert!(mine.query()? && same.query()?);
        Ok(busy)
    })
}

#[test]
fn raw_buffer_round_trips_random_bytes_on_every_device() -> Result<()> {
    let mut rng = TestRng::new(0x5eed_0001);
    for d in 0..cuda::device_count() {
        let s = Stream::new(Some(d), 0)?;
        let data = rng.nonzero_bytes(LEN + 13);
        let buf = RawBuffer::new(Some(d), data.len())?;
        assert_eq!((buf.device(), buf.len(), buf.is_empty()), (d, data.len(), false));
        buf.write(&data, &s)?;
        assert_eq!(buf.read(&s)?, data, "cuda:{d}");
        // And through the default stream.
        let def = cuda::default_stream(Some(d))?;
        assert_eq!(buf.read(&def)?, data, "cuda:{d} default stream");
        buf.fill(0x5a, &def)?;
        assert_all(&buf.read(&def)?, 0x5a, "fill on the default stream");
    }
    Ok(())
}

#[test]
fn raw_buffer_on_the_current_device_by_default() -> Result<()> {
    let last = last_device();
    let _g = DeviceGuard::new(last)?;
    let b = RawBuffer::new(None, 512)?;
    assert_eq!(b.device(), last);
    Ok(())
}

#[test]
fn copy_from_on_the_same_device() -> Result<()> {
    let mut rng = TestRng::new(0x5eed_0002);
    let s = Stream::new(Some(0), 0)?;
    let data = rng.nonzero_bytes(LEN);
    let a = RawBuffer::new(Some(0), LEN)?;
    let b = RawBuffer::new(Some(0), LEN)?;
    a.write(&data, &s)?;
    b.fill(0, &s)?;
    b.copy_from(&a, &s)?;
    assert_eq!(b.read(&s)?, data);
    assert_eq!(a.read(&s)?, data, "the source is unchanged");
    Ok(())
}

#[test]
fn copy_from_across_devices_on_either_devices_stream() -> Result<()> {
    if !two_devices() {
        return Ok(());
    }
    let mut rng = TestRng::new(0x5eed_0003);
    let (s0, s1) = (Stream::new(Some(0), 0)?, Stream::new(Some(1), 0)?);
    let data = rng.nonzero_bytes(LEN + 7);
    let a = RawBuffer::new(Some(0), data.len())?;
    let b = RawBuffer::new(Some(1), data.len())?;
    let c = RawBuffer::new(Some(0), data.len())?;
    a.write(&data, &s0)?;
    c.fill(0, &s0)?;
    b.fill(0, &s1)?;
    s0.wait_stream(&s1)?; // b's fill happens before the copy into b

    // 0 -> 1 on the source device's stream; read on device 1 after waiting for s0.
    b.copy_from(&a, &s0)?;
    s1.wait_stream(&s0)?;
    assert_eq!(b.read(&s1)?, data, "peer copy 0 -> 1 on cuda:0's stream");

    // 1 -> 0 on the destination device's stream.
    c.copy_from(&b, &s0)?;
    assert_eq!(c.read(&s0)?, data, "peer copy 1 -> 0 on cuda:0's stream");

    // 0 -> 1 on the destination device's stream, with fresh data.
    let data2 = rng.nonzero_bytes(data.len());
    a.write(&data2, &s0)?;
    s1.wait_stream(&s0)?;
    b.copy_from(&a, &s1)?;
    assert_eq!(b.read(&s1)?, data2, "peer copy 0 -> 1 on cuda:1's stream");
    Ok(())
}

#[test]
fn raw_buffer_errors_are_typed() -> Result<()> {
    let s0 = Stream::new(Some(0), 0)?;
    let a = RawBuffer::new(Some(0), 1024)?;
    let small = RawBuffer::new(Some(0), 512)?;
    assert_invalid_argument(a.write(&[1u8; 1000], &s0), "RawBuffer::write");
    assert_invalid_argument(a.copy_from(&small, &s0), "RawBuffer::copy_from");
    assert_invalid_argument(small.copy_from(&a, &s0), "RawBuffer::copy_from");
    assert_invalid_device(RawBuffer::new(Some(99), 16), 99);
    if two_devices() {
        let s1 = Stream::new(Some(1), 0)?;
        assert_invalid_argument(a.fill(1, &s1), "RawBuffer::fill");
        assert_invalid_argument(a.write(&[1u8; 1024], &s1), "RawBuffer::write");
        assert_invalid_argument(a.read(&s1), "RawBuffer::read");
        let a2 = RawBuffer::new(Some(0), 1024)?;
        assert_invalid_argument(a2.copy_from(&a, &s1), "RawBuffer::copy_from");
        let msg = a.fill(1, &s1).unwrap_err().to_string();
        assert!(msg.contains("cuda:0") && msg.contains("cuda:1"), "{msg}");
    }
    // The buffers still work after the refused calls.
    a.fill(9, &s0)?;
    assert_all(&a.read(&s0)?, 9, "after errors");
    assert!(matches!(a.read(&s0).map(|v| v.len()), Ok(1024)));
    Ok(())
}

#[test]
fn a_stream_waiting_on_itself_does_not_deadlock() -> Result<()> {
    let s = Stream::new(Some(0), 0)?;
    testing::delay(&s, ms(100))?;
    s.wait_stream(&s)?;
    let e = s.record_event(None)?;
    s.wait_event(&e)?;
    s.synchronize()?;
    assert!(s.query()? && e.query()?);
    Ok(())
}
