//! The one thread-local context: the current device, the current stream of each device, and the
//! depth of the guard stack (guards must be dropped in reverse order of creation).

use super::stream_handle::Stream;
use std::cell::{Cell, RefCell};

struct Context {
    device: Cell<usize>,
    streams: RefCell<Vec<Option<Stream>>>,
    depth: Cell<usize>,
}

thread_local! {
    static CONTEXT: Context = const {
        Context { device: Cell::new(0), streams: RefCell::new(Vec::new()), depth: Cell::new(0) }
    };
}

/// The thread's current device index (0 on a new thread, as in PyTorch); not validated.
pub(crate) fn current_index() -> usize {
    CONTEXT.with(|c| c.device.get())
}

/// Sets the thread's current device index (the caller validated it).
pub(crate) fn set_index(index: usize) {
    CONTEXT.with(|c| c.device.set(index));
}

/// The stream this thread set as current for `device`, if any (else the default stream is).
pub(crate) fn stream_for(device: usize) -> Option<Stream> {
    CONTEXT.with(|c| c.streams.borrow().get(device).cloned().flatten())
}

/// Sets (or with `None` resets to default) the thread's current stream for `device`.
pub(crate) fn set_stream_for(device: usize, stream: Option<Stream>) {
    CONTEXT.with(|c| {
        let mut v = c.streams.borrow_mut();
        if v.len() <= device {
            v.resize(device + 1, None);
        }
        v[device] = stream;
    });
}

/// Pushes a guard; returns its depth.
pub(crate) fn push_guard() -> usize {
    CONTEXT.with(|c| {
        let d = c.depth.get() + 1;
        c.depth.set(d);
        d
    })
}

/// Pops the guard at `depth`.
///
/// # Panics
/// When guards are dropped out of order (and the thread is not already panicking), like tokio's
/// runtime guards: restoring an outer guard's state under a live inner guard would silently
/// leave the thread on the wrong device.
pub(crate) fn pop_guard(depth: usize, kind: &str) {
    CONTEXT.with(|c| {
        let top = c.depth.get();
        if top != depth && !std::thread::panicking() {
            panic!(
                "{kind} dropped out of order (guard depth {depth}, innermost is {top}): drop guards in reverse order of creation"
            );
        }
        c.depth.set(depth.saturating_sub(1));
    })
}
