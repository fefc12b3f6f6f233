//! Stream capture's process-wide state, apart from the graphs themselves (`graph.rs`): whether a
//! capture is underway, the relaxed capture mode that driver calls made during one need, and a
//! stream's capture id (the kernel launchers ask for it).

use cudarc::driver::sys;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Captures underway in the process (on any driver instance).
pub(super) static CAPTURING: AtomicUsize = AtomicUsize::new(0);

/// Whether any capture is underway.
#[inline]
pub(super) fn capturing() -> bool {
    CAPTURING.load(Ordering::Relaxed) > 0
}

/// Runs `f` in the relaxed capture mode on this thread (then restores the thread's mode).
pub(super) fn relaxed<R>(f: impl FnOnce() -> R) -> R {
    let mut mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
    // SAFETY: exchanges a thread-local setting through a valid pointer to a mode value.
    let swapped = unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) }.result().is_ok();
    let r = f();
    if swapped {
        // SAFETY: as above; restores the mode the first exchange returned.
        let _ = unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) };
    }
    r
}

/// Runs `f` in the relaxed capture mode while a capture is underway, else as it is.
#[inline]
pub(super) fn maybe_relaxed<R>(f: impl FnOnce() -> R) -> R {
    if capturing() {
        relaxed(f)
    } else {
        f()
    }
}

/// The capture id of `stream` if it is capturing (`None` otherwise or when it cannot be asked).
pub(super) fn capture_id(stream: sys::CUstream) -> Option<u64> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut id: sys::cuuint64_t = 0;
    let (graph, deps, edges, n) =
        (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: a live stream of the current context; the optional outputs are null, as allowed.
    let r = unsafe { sys::cuStreamGetCaptureInfo_v3(stream, &mut status, &mut id, graph, deps, edges, n) };
    (r.result().is_ok() && status == sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE).then_some(id)
}
