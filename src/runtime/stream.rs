//! [`Stream`]: a handle to a device's work queue. The device work queued on it goes through its
//! crate-internal methods in `work.rs`; the thread's current stream is in `current.rs`; waiting
//! on and recording events is in `event.rs`.

use super::stream_handle::Stream;
use super::{rt, Runtime};
use crate::device::IntoCudaDevice;
use crate::driver::StreamId;
use crate::error::Result;

impl Stream {
    /// A stream from the pool of `device` (`None` or `"cuda"`: the current device) at
    /// `priority` (0 = normal; negative = higher priority, clamped to the device's highest
    /// level; positive is an error, as in PyTorch).
    pub fn new(device: impl IntoCudaDevice, priority: i32) -> Result<Stream> {
        let rt = rt()?;
        let device = rt.device(device)?;
        let (id, priority) = rt.devices[device].pool.next(rt.driver.as_ref(), device, priority)?;
        Ok(Stream { device, id, priority, default: false })
    }

    /// The default stream of `device` (a checked index).
    #[inline]
    pub(super) fn default_of(rt: &Runtime, device: usize) -> Result<Stream> {
        let id = match rt.devices[device].default_stream {
            Some(id) => id,
            None => rt.driver.default_stream(device)?,
        };
        Ok(Stream { device, id, priority: 0, default: true })
    }

    /// A handle from its parts (for streams made elsewhere, `external.rs`).
    pub(super) fn from_parts(device: usize, id: StreamId, priority: i32, default: bool) -> Stream {
        Stream { device, id, priority, default }
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

    /// The driver's handle, for the runtime's own calls (the tensor layer goes through the
    /// methods of `work.rs`).
    #[inline]
    pub(super) fn driver_id(&self) -> StreamId {
        self.id
    }

    /// Waits until all work queued on this stream has completed. Also returns the asynchronous
    /// errors pending on its device (sticky until [`get_last_error`](crate::cuda::get_last_error)).
    #[track_caller]
    pub fn synchronize(&self) -> Result<()> {
        if super::capture::active() {
            super::capture::check_blocking("Stream::synchronize", Some(self.id))?;
        }
        super::sync_debug::on_sync("Stream::synchronize")?;
        let rt = rt()?;
        rt.driver.stream_synchronize(self.id)?;
        if super::sanitizer::enabled() {
            super::sanitizer::host_waits_stream(self.id);
        }
        super::errors::check(self.device)
    }

    /// Whether all work queued on this stream has completed; the asynchronous errors pending on
    /// its device, if any (sticky until [`get_last_error`](crate::cuda::get_last_error)).
    pub fn query(&self) -> Result<bool> {
        if super::capture::active() {
            super::capture::check_blocking("Stream::query", Some(self.id))?;
        }
        let done = rt()?.driver.stream_query(self.id)?;
        if done && super::sanitizer::enabled() {
            // The host saw the work done: what it queues next is ordered after it.
            super::sanitizer::host_waits_stream(self.id);
        }
        super::errors::check(self.device)?;
        Ok(done)
    }
}
