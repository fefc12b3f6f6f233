//! Events: lazily bound to a device on first record, query / synchronize, timing with
//! elapsed_time and its typed errors, and ordering streams with Event::wait.

mod common;

use common::{
    assert_busy, assert_measures_delay, last_device, ms, retry_if_stalled, stream_pair, two_devices, warm_up,
};
use cudasem::cuda::{self, Event, EventFlags, Stream, StreamGuard};
use cudasem::testing::{self, RawBuffer};
use cudasem::{Error, Result};
use std::time::Instant;

const LEN: usize = 32 << 10;

fn timing() -> Event {
    Event::new(EventFlags::timing())
}

fn plain() -> Event {
    Event::new(EventFlags::default())
}

#[test]
fn a_new_event_is_complete_and_belongs_to_no_device() -> Result<()> {
    for flags in [EventFlags::default(), EventFlags::timing(), EventFlags { enable_timing: false, blocking: true }] {
        let e = Event::new(flags);
        assert!(e.query()?, "a never-recorded event reports complete, as in PyTorch");
        e.synchronize()?;
        assert_eq!(e.device(), None);
        assert_eq!(e.flags(), flags);
    }
    Ok(())
}

#[test]
fn a_recorded_event_is_pending_during_a_delay_and_complete_after_synchronize() -> Result<()> {
    for d in 0..cuda::device_count() {
        retry_if_stalled(ms(300), |delay| {
            let s = Stream::new(Some(d), 0)?;
            let e = plain();
            let queued = Instant::now();
            testing::delay(&s, delay)?;
            e.record(Some(&s))?;
            assert_eq!(e.device(), Some(d), "recording binds the event to the stream's device");
            let what = format!("cuda:{d}: the event waits for the delay queued before it");
            let busy = assert_busy(!e.query()?, queued, delay, &what);
            e.synchronize()?;
            assert!(e.query()?, "cuda:{d}: complete after synchronize()");
            Ok(busy)
        })?;
    }
    Ok(())
}

#[test]
fn a_re_recorded_event_tracks_its_latest_recording() -> Result<()> {
    let s = Stream::new(Some(0), 0)?;
    retry_if_stalled(ms(300), |delay| {
        let e = plain();
        e.record(Some(&s))?;
        e.synchronize()?;
        assert!(e.query()?);
        let queued = Instant::now();
        testing::delay(&s, delay)?;
        e.record(Some(&s))?;
        let busy = assert_busy(!e.query()?, queued, delay, "the second recording is behind the delay");
        e.synchronize()?;
        assert!(e.query()?);
        Ok(busy)
    })
}

#[test]
fn elapsed_time_measures_a_known_delay() -> Result<()> {
    for d in 0..cuda::device_count() {
        let s = Stream::new(Some(d), 0)?;
        warm_up(&s)?;
        let (start, end) = (timing(), timing());
        start.record(Some(&s))?;
        testing::delay(&s, ms(200))?;
        end.record(Some(&s))?;
        end.synchronize()?;
        let t = start.elapsed_time(&end)?;
        assert_measures_delay(t, 200);
    }
    Ok(())
}

#[test]
fn elapsed_time_needs_timing_on_both_events() -> Result<()> {
    let s = Stream::new(Some(0), 0)?;
    let (t1, t2, p) = (timing(), timing(), plain());
    for e in [&t1, &t2, &p] {
        e.record(Some(&s))?;
    }
    s.synchronize()?;
    assert!(t1.elapsed_time(&t2).is_ok(), "both timed: fine");
    assert_eq!(t1.elapsed_time(&p), Err(Error::EventTimingDisabled));
    assert_eq!(p.elapsed_time(&t1), Err(Error::EventTimingDisabled));
    assert_eq!(p.elapsed_time(&p), Err(Error::EventTimingDisabled));
    assert_eq!(timing().elapsed_time(&plain()), Err(Error::EventTimingDisabled), "checked before recording");
    Ok(())
}

#[test]
fn elapsed_time_needs_recorded_events() -> Result<()> {
    let s = Stream::new(Some(0), 0)?;
    let (recorded, never) = (timing(), timing());
    recorded.record(Some(&s))?;
    recorded.synchronize()?;
    assert_eq!(recorded.elapsed_time(&never), Err(Error::EventNotRecorded));
    assert_eq!(never.elapsed_time(&recorded), Err(Error::EventNotRecorded));
    assert_eq!(timing().elapsed_time(&timing()), Err(Error::EventNotRecorded));
    Ok(())
}

#[test]
fn elapsed_time_between_devices_is_event_device_mismatch() -> Result<()> {
    if !two_devices() {
        return Ok(());
    }
    let (s0, s1) = (Stream::new(Some(0), 0)?, Stream::new(Some(1), 0)?);
    let (a, b) = (timing(), timing());
    a.record(Some(&s0))?;
    b.record(Some(&s1))?;
    a.synchronize()?;
    b.synchronize()?;
    assert_eq!(
        a.elapsed_time(&b),
        Err(Error::EventDeviceMismatch { event_device: 0, other_device: 1, what: "end event" })
    );
    assert!(matches!(b.elapsed_time(&a), Err(Error::EventDeviceMismatch { event_device: 1, other_device: 0, .. })));
    Ok(())
}

#[test]
fn recording_on_a_second_device_is_event_device_mismatch() -> Result<()> {
    if !two_devices() {
        return Ok(());
    }
    let (s0, s1) = (Stream::new(Some(0), 0)?, Stream::new(Some(1), 0)?);
    let e = plain();
    e.record(Some(&s0))?;
    assert_eq!(
        e.record(Some(&s1)),
        Err(Error::EventDeviceMismatch { event_device: 0, other_device: 1, what: "stream" })
    );
    assert!(matches!(s1.record_event(Some(&e)), Err(Error::EventDeviceMismatch { event_device: 0, .. })));
    let msg = e.record(Some(&s1)).unwrap_err().to_string();
    assert!(msg.contains("cuda:0") && msg.contains("cuda:1"), "{msg}");
    assert_eq!(e.device(), Some(0), "the failed record did not rebind the event");
    e.record(Some(&s0))?;
    e.synchronize()?;
    assert!(e.query()?);
    Ok(())
}

#[track_caller]
fn assert_all(bytes: &[u8], value: u8, what: &str) {
    if let Some(i) = bytes.iter().position(|&b| b != value) {
        panic!("{what}: byte {i} is {} (expected every byte to be {value})", bytes[i]);
    }
}

/// a (on s1's device) is filled with 1 behind a delay; the event is recorded on s1 by `record`;
/// s2 waits through `wait`; then b (on s2's device) copies a on s2 and must see only 1s.
fn check_event_order(
    s1: &Stream,
    s2: &Stream,
    record: impl FnOnce(&Event) -> Result<()>,
    wait: impl FnOnce(&Event) -> Result<()>,
) -> Result<()> {
    let a = RawBuffer::new(Some(s1.device()), LEN)?;
    let b = RawBuffer::new(Some(s2.device()), LEN)?;
    a.write(&vec![0u8; LEN], s1)?;
    b.write(&vec![0u8; LEN], s2)?;
    s1.synchronize()?;
    s2.synchronize()?;

    let e = plain();
    let (filled, copied) = (timing(), timing());
    let (queued, delay) = (Instant::now(), ms(300));
    testing::delay(s1, delay)?;
    a.fill(1, s1)?;
    filled.record(Some(s1))?;
    record(&e)?;
    assert_eq!(e.device(), Some(s1.device()));
    wait(&e)?;
    // Only a precondition: the order itself is proven by b's bytes below, whatever this observed.
    assert_busy(!e.query()?, queued, delay, "the event must still be pending when s2 is told to wait");
    b.copy_from(&a, s2)?;
    assert_all(&b.read(s2)?, 1, "s2 ran after the event");
    if s1.device() == s2.device() {
        // By the device's clock too (events of two devices cannot be compared).
        copied.record(Some(s2))?;
        copied.synchronize()?;
        let after = filled.elapsed_time(&copied)?;
        assert!(after > 0.0, "s2's copy ended {after} ms after s1's fill: not after it");
    }
    Ok(())
}

fn check_event_wait(s1: &Stream, s2: &Stream, wait: impl FnOnce(&Event) -> Result<()>) -> Result<()> {
    check_event_order(s1, s2, |e| e.record(Some(s1)), wait)
}

#[test]
fn event_wait_orders_another_stream_after_the_recorded_work() -> Result<()> {
    let (s1, s2) = stream_pair(0)?;
    check_event_wait(&s1, &s2, |e| e.wait(Some(&s2)))
}

#[test]
fn event_wait_orders_a_stream_of_another_device() -> Result<()> {
    if !two_devices() {
        return Ok(());
    }
    let (s0, s1) = (Stream::new(Some(0), 0)?, Stream::new(Some(1), 0)?);
    check_event_wait(&s0, &s1, |e| e.wait(Some(&s1)))
}

#[test]
fn event_wait_none_uses_the_current_stream() -> Result<()> {
    let (s1, s2) = stream_pair(last_device())?;
    check_event_wait(&s1, &s2, |e| cuda::with_stream(&s2, || e.wait(None)))
}

#[test]
fn waiting_on_a_never_recorded_event_is_a_no_op() -> Result<()> {
    let s = Stream::new(Some(0), 0)?;
    let e = plain();
    e.wait(Some(&s))?;
    s.wait_event(&e)?;
    s.synchronize()?;
    assert!(s.query()?);
    assert_eq!(e.device(), None, "waiting does not bind the event");
    Ok(())
}

#[test]
fn record_none_uses_the_current_stream() -> Result<()> {
    let last = last_device();
    let s = Stream::new(Some(last), 0)?;
    retry_if_stalled(ms(300), |delay| {
        let e = plain();
        let queued = Instant::now();
        testing::delay(&s, delay)?;
        {
            let _g = StreamGuard::new(&s)?;
            e.record(None)?;
        }
        assert_eq!(e.device(), Some(last), "recorded on the current stream's device");
        let what = "recorded behind the delay on the current stream (not on the idle default stream)";
        let busy = assert_busy(!e.query()?, queued, delay, what);
        s.synchronize()?;
        assert!(e.query()?);
        Ok(busy)
    })?;

    // And it orders other streams after the current stream's work.
    let (s1, s2) = stream_pair(last)?;
    check_event_order(&s1, &s2, |e| cuda::with_stream(&s1, || e.record(None)), |e| e.wait(Some(&s2)))
}

#[test]
fn event_clones_are_the_same_event() -> Result<()> {
    let s = Stream::new(Some(last_device()), 0)?;
    let e = plain();
    let c = e.clone();
    assert_eq!(e, c);
    assert_ne!(e, plain(), "two new events are different events");
    retry_if_stalled(ms(300), |delay| {
        let queued = Instant::now();
        testing::delay(&s, delay)?;
        e.record(Some(&s))?;
        assert_eq!(c.device(), Some(last_device()), "recording one handle binds the other");
        let busy = assert_busy(!c.query()?, queued, delay, "the clone sees the pending recording");
        c.synchronize()?;
        assert!(e.query()?);
        Ok(busy)
    })?;
    let moved = std::thread::spawn(move || c).join().unwrap();
    assert_eq!(moved, e);
    Ok(())
}

#[test]
fn elapsed_time_with_a_pending_end_event_is_not_ready_until_it_completes() -> Result<()> {
    let s = Stream::new(Some(0), 0)?;
    warm_up(&s)?;
    retry_if_stalled(ms(300), |delay| {
        let (start, end) = (timing(), timing());
        start.record(Some(&s))?;
        let queued = Instant::now();
        testing::delay(&s, delay)?;
        end.record(Some(&s))?;
        let early = start.elapsed_time(&end);
        // Ready only if this thread was stalled past the delay; any other error is a failure.
        assert!(matches!(early, Err(Error::EventNotReady) | Ok(_)), "elapsed_time on a pending end event: {early:?}");
        let busy = assert_busy(early == Err(Error::EventNotReady), queued, delay, "elapsed_time is EventNotReady");
        end.synchronize()?;
        assert_measures_delay(start.elapsed_time(&end)?, delay.as_millis() as u64);
        Ok(busy)
    })
}

/// CUDA: `cuStreamWaitEvent` waits for the event's most recent recording *at the time of the
/// call*; recording the event again later (here on an idle stream) must not release the waiter.
#[test]
fn a_wait_is_not_released_by_a_later_recording_of_the_event() -> Result<()> {
    let v = common::distinct_streams(0, 3)?;
    let (s1, s2, idle) = (&v[0], &v[1], &v[2]);
    let a = RawBuffer::new(Some(0), LEN)?;
    let b = RawBuffer::new(Some(0), LEN)?;
    a.write(&vec![0u8; LEN], s1)?;
    b.write(&vec![0u8; LEN], s2)?;
    s1.synchronize()?;
    s2.synchronize()?;

    let e = plain();
    testing::delay(s1, ms(500))?;
    a.fill(1, s1)?;
    e.record(Some(s1))?;
    s2.wait_event(&e)?; // waits for s1's fill
    e.record(Some(idle))?; // a new recording that completes at once
    e.synchronize()?;
    assert!(e.query()?, "the event reflects its latest recording");
    b.copy_from(&a, s2)?;
    assert_all(&b.read(s2)?, 1, "s2 must still wait for the recording it was told to wait for");
    Ok(())
}
