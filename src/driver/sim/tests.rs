//! The simulated clock: timings, overlap and ordering come from the modelled durations, exactly,
//! whatever the host's load. Other threads hammer the host while each case runs, so a model that
//! leaked host time into the answers would fail here.

use super::time::{self, SimTime};
use super::*;
use crate::driver::{DevicePtr, Driver, EventId};
use crate::error::Result;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn machine(devices: usize) -> SimDriver {
    SimDriver::new(SimConfig { devices, memory: 1 << 30, peer: PeerSpec::All, ..SimConfig::default() })
}

/// Keeps every core busy until dropped, so that worker threads are descheduled at random.
struct Load(Arc<AtomicBool>, Vec<std::thread::JoinHandle<()>>);

fn load() -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let threads = (0..4)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 1u64;
                while !stop.load(Ordering::Relaxed) {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    std::hint::black_box(x);
                }
            })
        })
        .collect();
    Load(stop, threads)
}

impl Drop for Load {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        for t in self.1.drain(..) {
            let _ = t.join();
        }
    }
}

fn timed(d: &SimDriver) -> Result<EventId> {
    d.event_create(0, true, false)
}

fn ms(t: SimTime) -> f32 {
    time::signed_ms(0, t)
}

#[test]
fn events_time_the_modelled_work_exactly() -> Result<()> {
    let _busy = load();
    let d = machine(1);
    let s = d.create_stream(0, 0)?;
    let buf = d.malloc(0, 1 << 20)?;
    let (e0, e1, e2, e3) = (timed(&d)?, timed(&d)?, timed(&d)?, timed(&d)?);
    d.event_record(e0, s)?;
    d.delay(s, Duration::from_millis(30))?;
    d.event_record(e1, s)?;
    d.memset_d8(buf, 7, 1 << 20, s)?;
    d.event_record(e2, s)?;
    d.memcpy_dtod(buf.offset(1 << 19), buf, 1 << 19, s)?;
    d.event_record(e3, s)?;
    d.event_synchronize(e3)?;
    assert_eq!(d.event_elapsed_ms(e0, e1)?, 30.0, "a delay takes exactly its duration");
    assert_eq!(d.event_elapsed_ms(e1, e2)?, ms(time::transfer(1 << 20, time::DEVICE_BYTES_PER_S)));
    assert_eq!(d.event_elapsed_ms(e2, e3)?, ms(time::device_copy(1 << 19)));
    assert_eq!(d.event_elapsed_ms(e3, e0)?, -d.event_elapsed_ms(e0, e3)?, "signed, as CUDA's");
    let end = 30_000_000 + time::transfer(1 << 20, time::DEVICE_BYTES_PER_S) + time::device_copy(1 << 19);
    assert_eq!(d.stream_time(s)?, end, "the stream's time is the sum of its work");
    // SAFETY: memory from this driver's malloc for that device, freed once after its last use.
    unsafe { d.free(0, buf) }?;
    Ok(())
}

#[test]
fn two_streams_overlap_and_a_wait_orders_them() -> Result<()> {
    let _busy = load();
    let d = machine(1);
    let (a, b) = (d.create_stream(0, 0)?, d.create_stream(0, 0)?);
    let bytes = 8 << 20;
    let (dev, host) = (d.malloc(0, bytes)?, d.host_alloc(bytes)?);
    let (start, a_end, b_end, end) = (timed(&d)?, timed(&d)?, timed(&d)?, timed(&d)?);
    d.event_record(start, a)?;
    d.stream_wait_event(b, start)?;
    d.delay(b, Duration::from_millis(20))?;
    d.event_record(b_end, b)?;
    // SAFETY: `host` is a live pinned block of `bytes`, untouched by the host until `end` completes.
    unsafe { d.memcpy_htod_async(dev, host, bytes, a)? };
    d.event_record(a_end, a)?;
    d.stream_wait_event(a, b_end)?;
    d.event_record(end, a)?;
    d.event_synchronize(end)?;
    let copy = ms(time::transfer(bytes, time::PINNED_BYTES_PER_S));
    assert_eq!(d.event_elapsed_ms(start, a_end)?, copy, "the copy takes its bytes at the pinned bandwidth");
    assert_eq!(d.event_elapsed_ms(start, b_end)?, 20.0);
    assert_eq!(d.event_elapsed_ms(start, end)?, 20.0, "both streams ran at once: the longer one, not the sum");
    d.host_free(host)?;
    // SAFETY: memory from this driver's malloc for that device, freed once after its last use.
    unsafe { d.free(0, dev) }?;
    Ok(())
}

#[test]
fn a_stream_that_waits_starts_when_the_event_was_reached() -> Result<()> {
    let _busy = load();
    let d = machine(2);
    let (a, b) = (d.create_stream(0, 0)?, d.create_stream(1, 0)?);
    let (ready, before, after) = (timed(&d)?, d.event_create(1, true, false)?, d.event_create(1, true, false)?);
    d.delay(a, Duration::from_millis(25))?;
    d.event_record(ready, a)?;
    d.event_record(before, b)?;
    d.stream_wait_event(b, ready)?;
    d.event_record(after, b)?;
    d.event_synchronize(after)?;
    assert_eq!(d.stream_time(b)?, d.stream_time(a)?, "the waiter caught up with the event, on another device");
    assert_eq!(d.event_elapsed_ms(before, after)?, 25.0);
    // A stream already past the event does not go back in time.
    d.delay(b, Duration::from_millis(50))?;
    d.stream_wait_event(b, ready)?;
    d.stream_synchronize(b)?;
    assert_eq!(d.stream_time(b)?, 75_000_000);
    Ok(())
}

#[test]
fn copies_are_priced_by_where_their_bytes_go() -> Result<()> {
    let d = machine(2);
    let bytes = 4 << 20;
    let s = d.create_stream(0, 0)?;
    let (x, y, host) = (d.malloc(0, bytes)?, d.malloc(1, bytes)?, d.host_alloc(bytes)?);
    let between = |f: &dyn Fn() -> Result<()>| -> Result<SimTime> {
        d.stream_synchronize(s)?;
        let t0 = d.stream_time(s)?;
        f()?;
        d.stream_synchronize(s)?;
        Ok(d.stream_time(s)? - t0)
    };
    let page = vec![1u8; bytes];
    assert_eq!(between(&|| d.memcpy_htod(x, &page, s))?, time::transfer(bytes, time::PAGEABLE_BYTES_PER_S));
    let mut out = vec![0u8; bytes];
    let pageable_back = {
        d.stream_synchronize(s)?;
        let t0 = d.stream_time(s)?;
        d.memcpy_dtoh(&mut out, x, s)?;
        d.stream_time(s)? - t0
    };
    assert_eq!(pageable_back, time::transfer(bytes, time::PAGEABLE_BYTES_PER_S));
    assert_eq!(out, page);
    // SAFETY: `host` is a live pinned block of `bytes` that the host does not touch meanwhile.
    let pinned = between(&|| unsafe { d.memcpy_dtoh_async(host, x, bytes, s) })?;
    assert_eq!(pinned, time::transfer(bytes, time::PINNED_BYTES_PER_S));
    assert_eq!(between(&|| d.memcpy_peer(1, y, 0, x, bytes, s))?, time::peer_copy(bytes, false), "staged");
    d.enable_peer_access(0, 1)?;
    assert_eq!(between(&|| d.memcpy_peer(1, y, 0, x, bytes, s))?, time::peer_copy(bytes, true), "the link");
    d.host_free(host)?;
    // SAFETY: memory from this driver's malloc for that device, freed once after its last use.
    unsafe { d.free(0, x) }?;
    // SAFETY: memory from this driver's malloc for that device, freed once after its last use.
    unsafe { d.free(1, y) }?;
    Ok(())
}

#[test]
fn a_kernel_costs_its_memory_traffic() -> Result<()> {
    use crate::kernel::Dims;
    use crate::kernel::{BinaryOp, BufferView, KernelOp};
    use crate::DType;
    let d = machine(1);
    let s = d.create_stream(0, 0)?;
    let n = 1usize << 18;
    let bufs: Vec<DevicePtr> = (0..3).map(|_| d.malloc(0, 4 * n)).collect::<Result<_>>()?;
    let view = |ptr| BufferView {
        ptr,
        dtype: DType::F32,
        shape: Dims::from(&[n][..]),
        strides: Dims::from(&[1][..]),
        offset: 0,
    };
    let op = KernelOp::Binary {
        op: BinaryOp::Add,
        lhs: view(bufs[0]),
        rhs: view(bufs[1]),
        dst: view(bufs[2]),
        compute: DType::F32,
    };
    d.launch(s, &op)?;
    d.stream_synchronize(s)?;
    assert_eq!(d.stream_time(s)?, time::transfer(3 * 4 * n, time::DEVICE_BYTES_PER_S));
    assert_eq!(time::kernel(&op), d.stream_time(s)?);
    for b in bufs {
        // SAFETY: memory from this driver's malloc for that device, freed once after its last use.
        unsafe { d.free(0, b) }?;
    }
    Ok(())
}
