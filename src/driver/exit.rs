//! A function run when the process exits (C's `atexit`): the runtime reports there the
//! asynchronous errors still pending on its devices, which would otherwise be lost.

use std::os::raw::c_int;

extern "C" {
    fn atexit(callback: extern "C" fn()) -> c_int;
}

/// Runs `callback` when the process exits normally (`main` returns or `std::process::exit`);
/// `false` if it could not be registered.
pub(crate) fn at_exit(callback: extern "C" fn()) -> bool {
    // SAFETY: `atexit` is the C library's; `callback` is a plain function with no captured
    // state, valid for the whole process, and a panic in it aborts (an `extern "C"` function
    // does not unwind).
    unsafe { atexit(callback) == 0 }
}
