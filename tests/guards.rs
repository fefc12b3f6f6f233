//! DeviceGuard, StreamGuard, with_device, with_stream: scoped changes of the thread's current
//! device and streams, restored on drop, on panic, when nested; per thread; in reverse order only.

mod common;

use common::{last_device, stream_pair, two_devices};
use cudasem::cuda::{self, DeviceGuard, Stream, StreamGuard};
use cudasem::{Error, Result};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Barrier;

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

#[test]
fn nested_guards_restore_each_level() -> Result<()> {
    if !two_devices() {
        return Ok(());
    }
    assert_eq!(cuda::current_device()?, 0);
    {
        let g1 = DeviceGuard::new(1)?;
        assert_eq!((cuda::current_device()?, g1.previous()), (1, 0));
        {
            let g2 = DeviceGuard::new(0)?;
            assert_eq!((cuda::current_device()?, g2.previous()), (0, 1));
            {
                let g3 = DeviceGuard::new(1)?;
                assert_eq!((cuda::current_device()?, g3.previous()), (1, 0));
                {
                    let _g4 = DeviceGuard::new(1)?;
                    assert_eq!(cuda::current_device()?, 1);
                }
                assert_eq!(cuda::current_device()?, 1, "level 4 restored 1");
            }
            assert_eq!(cuda::current_device()?, 0, "level 3 restored 0");
        }
        assert_eq!(cuda::current_device()?, 1, "level 2 restored 1");
    }
    assert_eq!(cuda::current_device()?, 0, "level 1 restored 0");
    Ok(())
}

#[test]
fn guard_restores_the_device_after_a_panic() -> Result<()> {
    let last = last_device();
    let r = catch_unwind(|| {
        let _g = DeviceGuard::new(last).unwrap();
        assert_eq!(cuda::current_device().unwrap(), last);
        panic!("boom inside the guard");
    });
    assert!(r.is_err());
    assert_eq!(cuda::current_device()?, 0, "the guard restored device 0 while unwinding");

    let r = catch_unwind(|| cuda::with_device(last, || -> Result<()> { panic!("boom inside with_device") }));
    assert!(r.is_err());
    assert_eq!(cuda::current_device()?, 0, "with_device restored device 0 while unwinding");

    // Nested guards unwound together leave a consistent guard stack: new guards work normally.
    cuda::set_device(last)?;
    let r = catch_unwind(|| {
        let _a = DeviceGuard::new(0).unwrap();
        let _b = DeviceGuard::new(last).unwrap();
        let _c = DeviceGuard::new(0).unwrap();
        panic!("boom three guards deep");
    });
    assert!(r.is_err());
    assert_eq!(cuda::current_device()?, last);
    {
        let _g = DeviceGuard::new(0)?;
        let _h = DeviceGuard::new(last)?;
    }
    assert_eq!(cuda::current_device()?, last);
    Ok(())
}

#[test]
fn guards_are_thread_local() -> Result<()> {
    if !two_devices() {
        return Ok(());
    }
    let barrier = Barrier::new(2);
    std::thread::scope(|scope| {
        let a = scope.spawn(|| -> Result<()> {
            let _g = DeviceGuard::new(1)?;
            barrier.wait(); // A's guard is alive
            barrier.wait(); // B has checked, and made its own guard
            assert_eq!(cuda::current_device()?, 1, "B's guard must not change A's device");
            barrier.wait(); // B's guard is gone
            assert_eq!(cuda::current_device()?, 1);
            Ok(())
        });
        let b = scope.spawn(|| -> Result<()> {
            barrier.wait();
            assert_eq!(cuda::current_device()?, 0, "A's guard must not change B's device");
            {
                let _g = DeviceGuard::new(0)?;
                barrier.wait();
            }
            barrier.wait();
            assert_eq!(cuda::current_device()?, 0);
            Ok(())
        });
        a.join().unwrap()?;
        b.join().unwrap()
    })?;
    assert_eq!(cuda::current_device()?, 0);
    Ok(())
}

#[test]
fn set_device_inside_a_guard_is_undone_when_it_drops() -> Result<()> {
    let last = last_device();
    {
        let _g = DeviceGuard::new(0)?;
        cuda::set_device(last)?;
        assert_eq!(cuda::current_device()?, last);
    }
    assert_eq!(cuda::current_device()?, 0, "the guard restores what was current when it was made");
    cuda::set_device(last)?;
    {
        let _g = DeviceGuard::new(last)?;
        cuda::set_device(0)?;
        assert_eq!(cuda::current_device()?, 0);
    }
    assert_eq!(cuda::current_device()?, last);
    cuda::with_device(0, || cuda::set_device(last))?;
    assert_eq!(cuda::current_device()?, last, "with_device also undoes a set_device in its closure");
    Ok(())
}

#[test]
fn with_device_returns_the_closures_value_and_restores() -> Result<()> {
    let last = last_device();
    let (inside, answer) = cuda::with_device(last, || Ok((cuda::current_device()?, 42)))?;
    assert_eq!(inside, last);
    assert_eq!(answer, 42);
    assert_eq!(cuda::current_device()?, 0);
    let s = cuda::with_device(last, || Ok("hello".to_string()))?;
    assert_eq!(s, "hello");

    // The closure's error is the call's error (one `?`), and the device is restored after it.
    let r = cuda::with_device(last, || {
        assert_eq!(cuda::current_device()?, last);
        cuda::set_device(98)?;
        Ok("not reached")
    });
    assert!(matches!(r, Err(Error::InvalidDevice { index: 98, .. })), "{r:?}");
    assert_eq!(cuda::current_device()?, 0, "with_device restores the device when its closure fails");

    let mut ran = false;
    let r = cuda::with_device(99, || {
        ran = true;
        Ok(())
    });
    assert!(matches!(r, Err(Error::InvalidDevice { index: 99, .. })));
    assert!(!ran, "the closure must not run when the device is invalid");
    assert_eq!(cuda::current_device()?, 0);
    Ok(())
}

#[test]
fn dropping_guards_out_of_order_panics() -> Result<()> {
    let last = last_device();
    let join = std::thread::spawn(move || {
        let outer = DeviceGuard::new(last).unwrap();
        let inner = DeviceGuard::new(0).unwrap();
        drop(outer); // out of order: must panic
        drop(inner);
    })
    .join();
    let payload = join.expect_err("dropping the outer guard first must panic");
    let msg = panic_message(payload.as_ref());
    assert!(msg.contains("out of order"), "panic message: {msg:?}");

    // Mixed kinds are one stack.
    let s = Stream::new(Some(last), 0)?;
    let join = std::thread::spawn(move || {
        let outer = StreamGuard::new(&s).unwrap();
        let inner = DeviceGuard::new(0).unwrap();
        drop(outer);
        drop(inner);
    })
    .join();
    assert!(join.is_err(), "dropping a StreamGuard under a live DeviceGuard must panic");

    // The test thread is unaffected.
    assert_eq!(cuda::current_device()?, 0);
    {
        let _a = DeviceGuard::new(last)?;
        let _b = DeviceGuard::new(0)?;
    }
    assert_eq!(cuda::current_device()?, 0);
    Ok(())
}

#[test]
fn in_order_explicit_drops_are_fine() -> Result<()> {
    let last = last_device();
    let a = DeviceGuard::new(last)?;
    let b = DeviceGuard::new(0)?;
    drop(b);
    assert_eq!(cuda::current_device()?, last);
    drop(a);
    assert_eq!(cuda::current_device()?, 0);
    Ok(())
}

#[test]
fn stream_guard_restores_device_and_both_current_streams() -> Result<()> {
    if !two_devices() {
        return Ok(());
    }
    // State before: device 0 current; current streams s0 (device 0) and s1 (device 1).
    let (s0, u0) = stream_pair(0)?;
    let (s1, t1) = stream_pair(1)?;
    cuda::set_stream(&s1)?;
    cuda::set_stream(&s0)?;
    assert_eq!(cuda::current_device()?, 0);
    {
        let _g = StreamGuard::new(&t1)?;
        assert_eq!(cuda::current_device()?, 1, "the guard makes the stream's device current");
        assert_eq!(cuda::current_stream(None)?, t1);
        assert_eq!(cuda::current_stream(Some(1))?, t1);
        assert_eq!(cuda::current_stream(Some(0))?, s0, "device 0's current stream is untouched");
        // Changes inside the guard to the previous device's stream and to the device are undone.
        cuda::set_stream(&u0)?;
        assert_eq!(cuda::current_device()?, 0);
        assert_eq!(cuda::current_stream(Some(0))?, u0);
    }
    assert_eq!(cuda::current_device()?, 0, "the previous device is restored");
    assert_eq!(cuda::current_stream(Some(0))?, s0, "the previous device's stream is restored");
    assert_eq!(cuda::current_stream(Some(1))?, s1, "the stream device's previous stream is restored");
    Ok(())
}

#[test]
fn stream_guard_from_default_streams_restores_defaults() -> Result<()> {
    let last = last_device();
    let s = Stream::new(Some(last), 0)?;
    {
        let _g = StreamGuard::new(&s)?;
        assert_eq!(cuda::current_device()?, last);
        assert_eq!(cuda::current_stream(None)?, s);
        {
            let (inner, _) = stream_pair(last)?;
            let _h = StreamGuard::new(&inner)?;
            assert_eq!(cuda::current_stream(None)?, inner);
        }
        assert_eq!(cuda::current_stream(None)?, s, "the nested guard restores the outer one's stream");
    }
    assert_eq!(cuda::current_device()?, 0);
    for d in 0..cuda::device_count() {
        assert_eq!(cuda::current_stream(Some(d))?, cuda::default_stream(Some(d))?, "cuda:{d}");
        assert!(cuda::current_stream(Some(d))?.is_default());
    }
    Ok(())
}

#[test]
fn with_stream_returns_the_value_and_restores() -> Result<()> {
    let last = last_device();
    let s = Stream::new(Some(last), 0)?;
    let (dev, cur) = cuda::with_stream(&s, || Ok((cuda::current_device()?, cuda::current_stream(None)?)))?;
    assert_eq!(dev, last);
    assert_eq!(cur, s);

    // The closure's error is the call's error, and both the device and the stream are restored.
    let r = cuda::with_stream(&s, || -> Result<()> { Err(Stream::new(None, 1).unwrap_err()) });
    assert!(matches!(r, Err(Error::InvalidArgument { op: "Stream::new", .. })), "{r:?}");
    assert_eq!(cuda::current_device()?, 0, "with_stream restores the device when its closure fails");
    assert_eq!(cuda::current_stream(Some(last))?, cuda::default_stream(Some(last))?);
    assert_eq!(cuda::current_device()?, 0);
    assert_eq!(cuda::current_stream(Some(last))?, cuda::default_stream(Some(last))?);

    let r =
        catch_unwind(AssertUnwindSafe(|| cuda::with_stream(&s, || -> Result<()> { panic!("boom in with_stream") })));
    assert!(r.is_err());
    assert_eq!(cuda::current_device()?, 0, "with_stream restores the device on panic");
    assert_eq!(cuda::current_stream(Some(last))?, cuda::default_stream(Some(last))?);
    Ok(())
}
