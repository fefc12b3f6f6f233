//! Events: `cuEventCreate` with the torch flags, destroy (errors kept for the device's next
//! synchronize, as it runs from `Drop`), record, query, synchronize and elapsed time.

use super::driver::{CudaDriver, EventEntry};
use super::handles::RawEvent;
use super::status::{driver_error, ready, write};
use crate::driver::{EventId, StreamId};
use crate::error::{Error, Result};
use cudarc::driver::result::{self as cu, DriverError};
use cudarc::driver::sys::{self, CUresult};

pub(super) fn create(driver: &CudaDriver, device: usize, enable_timing: bool, blocking: bool) -> Result<EventId> {
    use sys::CUevent_flags::*;
    let mut flags = CU_EVENT_DEFAULT as u32;
    if !enable_timing {
        flags |= CU_EVENT_DISABLE_TIMING as u32;
    }
    if blocking {
        flags |= CU_EVENT_BLOCKING_SYNC as u32;
    }
    driver.enter(device)?;
    let mut raw: sys::CUevent = std::ptr::null_mut();
    // SAFETY:
    // `raw` is a valid out-pointer, `flags` combines documented `CUevent_flags` bits, and `device`'s
    // context is current.
    unsafe { sys::cuEventCreate(&mut raw, flags) }.result().map_err(|e| driver_error("cuEventCreate", e))?;
    let id = driver.next_id();
    let entry = EventEntry { device, raw: RawEvent(raw), timing: enable_timing };
    write(&driver.events).insert(id, entry);
    Ok(EventId(id))
}

pub(super) fn destroy(driver: &CudaDriver, event: EventId) {
    let Some(ev) = write(&driver.events).remove(&event.0) else {
        return;
    };
    // Called from `Drop`: a failure is kept for the device's next synchronize.
    let destroyed = driver.enter(ev.device).and_then(|_| {
        // SAFETY:
        // - the event came from `cuEventCreate` and was just removed from the table, so it is
        //   destroyed exactly once;
        // - pending work on it is released by the driver.
        unsafe { cu::event::destroy(ev.raw.0) }.map_err(|e| driver_error("cuEventDestroy", e))
    });
    if let (Err(e), Some(dev)) = (destroyed, driver.devices.get(ev.device)) {
        dev.dropped.record(e);
    }
}

pub(super) fn record(driver: &CudaDriver, event: EventId, stream: StreamId) -> Result<()> {
    let ev = driver.event(event, "event_record")?;
    let s = driver.stream(stream, "event_record")?;
    driver.enter(s.device)?;
    // SAFETY: both handles are live and, as the runtime checks, of the current context.
    unsafe { cu::event::record(ev.raw.0, s.raw.0) }.map_err(|e| driver_error("cuEventRecord", e))
}

pub(super) fn query(driver: &CudaDriver, event: EventId) -> Result<bool> {
    let ev = driver.event(event, "event_query")?;
    driver.enter(ev.device)?;
    // SAFETY: the event is live and belongs to the current context.
    ready("cuEventQuery", unsafe { sys::cuEventQuery(ev.raw.0) })
}

pub(super) fn synchronize(driver: &CudaDriver, event: EventId) -> Result<()> {
    let ev = driver.event(event, "event_synchronize")?;
    driver.enter(ev.device)?;
    // SAFETY: the event is live and belongs to the current context.
    unsafe { cu::event::synchronize(ev.raw.0) }.map_err(|e| driver_error("cuEventSynchronize", e))
}

pub(super) fn elapsed_ms(driver: &CudaDriver, start: EventId, end: EventId) -> Result<f32> {
    let a = driver.event(start, "event_elapsed_ms")?;
    let b = driver.event(end, "event_elapsed_ms")?;
    if !a.timing || !b.timing {
        return Err(Error::EventTimingDisabled);
    }
    driver.enter(a.device)?;
    // SAFETY: both events are live timing events made by `cuEventCreate`.
    match unsafe { cu::event::elapsed(a.raw.0, b.raw.0) } {
        Ok(ms) => Ok(ms),
        Err(DriverError(CUresult::CUDA_ERROR_NOT_READY)) => Err(Error::EventNotReady),
        // Both have timing enabled, so an invalid handle means one was never recorded.
        Err(DriverError(CUresult::CUDA_ERROR_INVALID_HANDLE)) => Err(Error::EventNotRecorded),
        Err(e) => Err(driver_error("cuEventElapsedTime", e)),
    }
}
