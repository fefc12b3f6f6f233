//! Raw driver handles as `Send + Sync` newtypes: the `raw_handle!` macro (declared first in
//! `mod.rs`, so every file of the backend can use it) and the context, stream and event handles.

use cudarc::driver::result::{self as cu, DriverError};
use cudarc::driver::sys;

/// Declares a `Copy` newtype around a raw driver handle that may cross threads.
macro_rules! raw_handle {
    ($(#[$doc:meta])* $vis:vis $name:ident($raw:ty)) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        $vis struct $name($vis $raw);

        // SAFETY:
        // - the wrapped value is an opaque driver handle that Rust never dereferences;
        // - it is only passed by value to the CUDA driver API, which is thread-safe, and every call first
        //   makes the owning context current on the calling thread.
        unsafe impl Send for $name {}
        // SAFETY:
        // - as for `Send`: shared access only copies the handle out;
        // - the driver serializes concurrent use of one handle internally.
        unsafe impl Sync for $name {}
    };
}

raw_handle!(
    /// A retained primary context (`CUcontext`).
    pub(super) RawCtx(sys::CUcontext)
);
raw_handle!(
    /// A stream (`CUstream`); null is the context's legacy default stream.
    pub(super) RawStream(sys::CUstream)
);
raw_handle!(
    /// An event (`CUevent`).
    pub(super) RawEvent(sys::CUevent)
);

/// Makes `ctx` current on this thread, unless it already is.
pub(super) fn make_current(ctx: sys::CUcontext) -> std::result::Result<(), DriverError> {
    if matches!(cu::ctx::get_current(), Ok(Some(c)) if c == ctx) {
        return Ok(());
    }
    // SAFETY: the caller passes a live, retained context.
    unsafe { cu::ctx::set_current(ctx) }
}
