//! The thread's current stream per device: [`current_stream`], [`default_stream`],
//! [`set_stream`], and [`StreamGuard`] / [`with_stream`] (`with torch.cuda.stream(s):`).

use super::context;
use super::stream_handle::Stream;
use super::{rt, Runtime};
use crate::device::IntoCudaDevice;
use crate::error::{Error, Result};
use std::marker::PhantomData;

/// The device's default stream (`torch.cuda.default_stream`; `None` or `"cuda"`: the current
/// device).
pub fn default_stream(device: impl IntoCudaDevice) -> Result<Stream> {
    let rt = rt()?;
    Stream::default_of(rt, rt.device(device)?)
}

/// This thread's current stream on `device` (`None` or `"cuda"`: the current device); the
/// default stream until [`set_stream`] or a [`StreamGuard`] changes it.
#[inline]
pub fn current_stream(device: impl IntoCudaDevice) -> Result<Stream> {
    let rt = rt()?;
    current_in(rt, rt.device(device)?)
}

/// This thread's current stream on `device` (an index).
#[inline]
pub(crate) fn current_of(device: usize) -> Result<Stream> {
    let rt = rt()?;
    current_in(rt, rt.check(device)?)
}

/// This thread's current stream on `device` (a checked index).
#[inline]
fn current_in(rt: &Runtime, device: usize) -> Result<Stream> {
    match context::stream_for(device) {
        Some(s) => Ok(s),
        None => Stream::default_of(rt, device),
    }
}

/// Makes `stream` this thread's current stream on its device and, as PyTorch's
/// `torch.cuda.set_stream` does, makes that device the current device.
pub fn set_stream(stream: &Stream) -> Result<()> {
    rt()?.check(stream.device())?;
    context::set_index(stream.device());
    context::set_stream_for(stream.device(), Some(stream.clone()));
    Ok(())
}

/// `with torch.cuda.stream(s):` — makes `s` current (and its device the current device) until
/// dropped, then restores the previous device and the previous current streams of both devices.
/// Not `Send`: a guard belongs to the thread whose context it changed.
#[must_use = "the previous stream is restored when the guard is dropped; bind it with `let _g = ...`"]
#[doc(alias = "stream", alias = "StreamContext")]
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
        rt()?.check(stream.device())?;
        let prev_device = context::current_index();
        let guard = StreamGuard {
            prev_device,
            prev_on_prev_device: context::stream_for(prev_device),
            prev_on_stream_device: context::stream_for(stream.device()),
            stream_device: stream.device(),
            depth: context::push_guard(),
            _not_send: PhantomData,
        };
        context::set_index(stream.device());
        context::set_stream_for(stream.device(), Some(stream.clone()));
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

/// Runs `f` with `stream` as the current stream (and its device current), then restores both
/// (also when `f` fails or panics): `with torch.cuda.stream(s):`. The closure returns a
/// [`Result`], so `?` works inside it and the call needs one `?`.
///
/// The closure may return any error type `E` with `From<cudasem::Error>` (your own error enum,
/// `Box<dyn std::error::Error>`, `anyhow::Error`), so `?` works inside it on cudasem's errors and
/// on yours; cudasem's own errors of the call come back converted. In a function returning
/// cudasem's [`Result`], `E` is `cudasem::Error` without saying so; elsewhere a closure that ends in
/// `Ok(..)` names it once: `Ok::<_, MyError>(value)`.
#[doc(alias = "stream", alias = "StreamContext")]
pub fn with_stream<R, E: From<Error>>(stream: &Stream, f: impl FnOnce() -> Result<R, E>) -> Result<R, E> {
    let _g = StreamGuard::new(stream)?;
    f()
}
