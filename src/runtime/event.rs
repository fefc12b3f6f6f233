//! [`Event`]: a marker in a stream, for ordering streams and timing device work; and the
//! [`Stream`] methods that wait on or record events.

use super::current::current_stream;
use super::rt;
use super::stream_handle::Stream;
use crate::driver::EventId;
use crate::error::{Error, Result};
use std::fmt;
use std::sync::{Arc, Mutex};

/// `torch.cuda.Event(enable_timing, blocking)`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct EventFlags {
    /// Record timestamps so [`Event::elapsed_time`] works (costs a little; off by default).
    pub enable_timing: bool,
    /// `synchronize` blocks the thread in the OS instead of spinning.
    pub blocking: bool,
}

impl EventFlags {
    /// Flags with timing on.
    pub fn timing() -> EventFlags {
        EventFlags { enable_timing: true, blocking: false }
    }
}

struct Inner {
    flags: EventFlags,
    /// Created lazily on the first record, on the recording stream's device (as PyTorch does).
    slot: Mutex<Option<(usize, EventId)>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let slot = self.slot.get_mut().unwrap_or_else(|e| e.into_inner());
        if let (Some((_, id)), Ok(rt)) = (slot.take(), rt()) {
            if super::sanitizer::enabled() {
                super::sanitizer::event_destroyed(id);
            }
            rt.driver.event_destroy(id);
        }
    }
}

/// A CUDA event. Clones are handles to the same event. Until it is first recorded it belongs
/// to no device; recording binds it to the stream's device for good.
#[derive(Clone)]
pub struct Event(Arc<Inner>);

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.handle() {
            Some((d, id)) => write!(f, "<cudasem Event device=cuda:{d} id={:#x} {:?}>", id.0, self.0.flags),
            None => write!(f, "<cudasem Event uninitialized {:?}>", self.0.flags),
        }
    }
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Event {}

impl Event {
    /// A new event. It cannot fail: as in PyTorch, the driver's event is made on the first
    /// [`record`](Event::record), on the recording stream's device (errors are reported there).
    pub fn new(flags: EventFlags) -> Event {
        Event(Arc::new(Inner { flags, slot: Mutex::new(None) }))
    }

    /// The flags the event was made with.
    pub fn flags(&self) -> EventFlags {
        self.0.flags
    }

    /// The device the event was recorded on, if it has been.
    pub fn device(&self) -> Option<usize> {
        self.handle().map(|(d, _)| d)
    }

    fn handle(&self) -> Option<(usize, EventId)> {
        *self.0.slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the event on `stream` (`None`: the current stream of the current device): it
    /// completes once the work queued there so far has. An event recorded on one device cannot
    /// later be recorded on another ([`Error::EventDeviceMismatch`]).
    pub fn record(&self, stream: Option<&Stream>) -> Result<()> {
        let stream = match stream {
            Some(s) => s.clone(),
            None => current_stream(None)?,
        };
        let rt = rt()?;
        let mut slot = self.0.slot.lock().unwrap_or_else(|e| e.into_inner());
        let id = match *slot {
            Some((d, _)) if d != stream.device() => {
                return Err(Error::EventDeviceMismatch {
                    event_device: d,
                    other_device: stream.device(),
                    what: "stream",
                })
            }
            Some((_, id)) => id,
            None => {
                let f = self.0.flags;
                let id = rt.driver.event_create(stream.device(), f.enable_timing, f.blocking)?;
                *slot = Some((stream.device(), id));
                id
            }
        };
        stream.record_raw(id)
    }

    /// Makes future work on `stream` (`None`: the current stream) wait for this event. No-op if
    /// the event was never recorded. The host does not wait.
    pub fn wait(&self, stream: Option<&Stream>) -> Result<()> {
        let stream = match stream {
            Some(s) => s.clone(),
            None => current_stream(None)?,
        };
        match self.handle() {
            Some((_, id)) => stream.wait_raw(id),
            None => Ok(()),
        }
    }

    /// Whether the recorded work has completed (`true` if never recorded, as in PyTorch); the
    /// asynchronous errors pending on its device, if any (sticky until
    /// [`get_last_error`](crate::cuda::get_last_error)).
    pub fn query(&self) -> Result<bool> {
        let done = self.completed()?;
        if let Some((device, _)) = self.handle() {
            super::errors::check(device)?;
        }
        Ok(done)
    }

    /// [`Event::query`] without the device's pending errors (for the watchdog of a process
    /// group, which follows its own collectives' outcomes).
    pub(crate) fn completed(&self) -> Result<bool> {
        match self.handle() {
            Some((_, id)) => {
                if super::capture::active() {
                    super::capture::check_event("Event::query", id)?;
                }
                let done = rt()?.driver.event_query(id)?;
                if done && super::sanitizer::enabled() {
                    // The host saw the recorded work done: what it queues next is ordered after it.
                    super::sanitizer::host_waits_event(id);
                }
                Ok(done)
            }
            None => Ok(true),
        }
    }

    /// Waits on the host until the recorded work has completed (returns at once if never
    /// recorded); then returns the asynchronous errors pending on its device, if any (sticky
    /// until [`get_last_error`](crate::cuda::get_last_error)).
    #[track_caller]
    pub fn synchronize(&self) -> Result<()> {
        match self.handle() {
            Some((device, id)) => {
                if super::capture::active() {
                    super::capture::check_event("Event::synchronize", id)?;
                }
                super::sync_debug::on_sync("Event::synchronize")?;
                rt()?.driver.event_synchronize(id)?;
                if super::sanitizer::enabled() {
                    super::sanitizer::host_waits_event(id);
                }
                super::errors::check(device)
            }
            None => Ok(()),
        }
    }

    /// Milliseconds from this event to `end`, measured on the device. Both events need
    /// `enable_timing`, must have been recorded on the same device, and `end` must have completed.
    pub fn elapsed_time(&self, end: &Event) -> Result<f32> {
        if !self.0.flags.enable_timing || !end.0.flags.enable_timing {
            return Err(Error::EventTimingDisabled);
        }
        let (Some((d0, a)), Some((d1, b))) = (self.handle(), end.handle()) else {
            return Err(Error::EventNotRecorded);
        };
        if d0 != d1 {
            return Err(Error::EventDeviceMismatch { event_device: d0, other_device: d1, what: "end event" });
        }
        if super::capture::active() {
            super::capture::check_event("Event::elapsed_time", a)?;
            super::capture::check_event("Event::elapsed_time", b)?;
        }
        rt()?.driver.event_elapsed_ms(a, b)
    }
}

impl Stream {
    /// Makes all future work on this stream wait for `event`'s last recording
    /// (a no-op for an event never recorded). The host does not wait.
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        event.wait(Some(self))
    }

    /// Makes all future work on this stream wait for all work queued on `other` so far.
    pub fn wait_stream(&self, other: &Stream) -> Result<()> {
        let e = other.record_event(None)?;
        self.wait_event(&e)
    }

    /// Records `event` (or a new event without timing, when `None`) on this stream and returns it.
    pub fn record_event(&self, event: Option<&Event>) -> Result<Event> {
        let e = match event {
            Some(e) => e.clone(),
            None => Event::new(EventFlags::default()),
        };
        e.record(Some(self))?;
        Ok(e)
    }
}
