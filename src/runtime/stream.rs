//! [`Stream`]: a handle to a device's work queue, the thread's current stream per device, and
//! [`StreamGuard`].

use super::context;
use super::event::{Event, EventFlags};
use super::{rt, Runtime};
use crate::driver::StreamId;
use crate::error::Result;
use std::fmt;
use std::marker::PhantomData;

/// A CUDA stream: an in-order queue of work on one device (`torch.cuda.Stream`).
///
/// Cheap to clone; two handles to the same stream compare equal. Streams made by
/// [`Stream::new`] come from the device's pool (32 per priority level, handed out round-robin,
/// as PyTorch does) and live for the whole process.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Stream {
    device: usize,
    id: StreamId,
    priority: i32,
    default: bool,
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<cudasem Stream device=cuda:{} id={:#x} priority={}", self.device, self.id.0, self.priority)?;
        f.write_str(if self.default { " default>" } else { ">" })
    }
}

impl Stream {
    /// A stream from the pool of `device` (`None`: the current device) at `priority`
    /// (0 = normal; negative = higher priority, clamped to the device's highest level;
    /// positive is an error, as in PyTorch).
    pub fn new(device: Option<usize>, priority: i32) -> Result<Stream> {
        let rt = rt()?;
        let device = rt.resolve(device)?;
        let (id, priority) = rt.devices[device].pool.next(rt.driver.as_ref(), device, priority)?;
        Ok(Stream { device, id, priority, default: false })
    }

    /// The device this stream belongs to.
    pub fn device(&self) -> usize {
        self.device
    }

    /// The stream's priority (0 normal, negative higher).
    pub fn priority(&self) -> i32 {
        self.priority
    }

    /// The driver's handle for this stream (PyTorch's `cuda_stream`, as an opaque number).
    pub fn id(&self) -> u64 {
        self.id.0
    }

    /// Whether this is the device's default stream.
    pub fn is_default(&self) -> bool {
        self.default
    }

    pub(crate) fn driver_id(&self) -> StreamId {
        self.id
    }

    /// Waits until all work queued on this stream has completed.
    pub fn synchronize(&self) -> Result<()> {
        rt()?.driver.stream_synchronize(self.id)
    }

    /// Whether all work queued on this stream has completed.
    pub fn query(&self) -> Result<bool> {
        rt()?.driver.stream_query(self.id)
    }

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
            None => Event::new(EventFlags::default())?,
        };
        e.record(Some(self))?;
        Ok(e)
    }
}

/// The device's default stream (`torch.cuda.default_stream`).
pub fn default_stream(device: Option<usize>) -> Result<Stream> {
    let rt = rt()?;
    default_of(rt, rt.resolve(device)?)
}

/// The default stream of `device` (a checked index).
#[inline]
fn default_of(rt: &Runtime, device: usize) -> Result<Stream> {
    let id = match rt.devices[device].default_stream {
        Some(id) => id,
        None => rt.driver.default_stream(device)?,
    };
    Ok(Stream { device, id, priority: 0, default: true })
}

/// This thread's current stream on `device` (`None`: the current device); the default stream
/// until [`set_stream`] or a [`StreamGuard`] changes it.
pub fn current_stream(device: Option<usize>) -> Result<Stream> {
    let rt = rt()?;
    let device = rt.resolve(device)?;
    match context::stream_for(device) {
        Some(s) => Ok(s),
        None => default_of(rt, device),
    }
}

/// Makes `stream` this thread's current stream on its device and, as PyTorch's
/// `torch.cuda.set_stream` does, makes that device the current device.
pub fn set_stream(stream: &Stream) -> Result<()> {
    rt()?.check(stream.device)?;
    context::set_index(stream.device);
    context::set_stream_for(stream.device, Some(stream.clone()));
    Ok(())
}

/// `with torch.cuda.stream(s):` — makes `s` current (and its device the current device) until
/// dropped, then restores the previous device and the previous current streams of both devices.
/// Not `Send`: a guard belongs to the thread whose context it changed.
#[must_use = "the previous stream is restored when the guard is dropped; bind it with `let _g = ...`"]
pub struct StreamGuard {
    prev_device: usize,
    prev_on_prev_device: Option<Stream>,
    prev_on_stream_device: Option<Stream>,
    stream_device: usize,
    depth: usize,
    _not_send: PhantomData<*const ()>,
}

impl StreamGuard {
    /// Switches the thread to `stream` (and its device).
    pub fn new(stream: &Stream) -> Result<StreamGuard> {
        rt()?.check(stream.device)?;
        let prev_device = context::current_index();
        let guard = StreamGuard {
            prev_device,
            prev_on_prev_device: context::stream_for(prev_device),
            prev_on_stream_device: context::stream_for(stream.device),
            stream_device: stream.device,
            depth: context::push_guard(),
            _not_send: PhantomData,
        };
        context::set_index(stream.device);
        context::set_stream_for(stream.device, Some(stream.clone()));
        Ok(guard)
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        context::pop_guard(self.depth, "StreamGuard");
        context::set_stream_for(self.stream_device, self.prev_on_stream_device.take());
        context::set_stream_for(self.prev_device, self.prev_on_prev_device.take());
        context::set_index(self.prev_device);
    }
}

/// Runs `f` with `stream` as the current stream (and its device current), then restores both.
pub fn with_stream<R>(stream: &Stream, f: impl FnOnce() -> R) -> Result<R> {
    let _g = StreamGuard::new(stream)?;
    Ok(f())
}
