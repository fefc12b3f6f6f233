//! NVIDIA's NVTX library, loaded at run time where present: the exported NVTX v3 C API of
//! `libnvtx3interop.so.1` (shipped with CUDA 12 toolkits and the `nvidia-nvtx` wheels), else the
//! older `libnvToolsExt.so.1` (same symbols). Nothing is needed at build time, and a machine
//! without either library runs on: every call is then a no-op here (the runtime above still
//! records it, `runtime/nvtx.rs`).
//!
//! The library forwards each call to a profiler that injected itself (Nsight Systems, Nsight
//! Compute: `NVTX_INJECTION64_PATH`); with none attached the calls return at once.

use std::ffi::{c_char, c_int, CStr};
use std::sync::OnceLock;

/// The library's names, tried in order (`dlopen`'s search, then CUDA's usual directories).
const CANDIDATES: &[&str] = &[
    "libnvtx3interop.so.1",
    "libnvtx3interop.so",
    "/usr/local/cuda/targets/x86_64-linux/lib/libnvtx3interop.so.1",
    "/usr/local/cuda/lib64/libnvtx3interop.so.1",
    "libnvToolsExt.so.1",
    "/usr/local/cuda/lib64/libnvToolsExt.so.1",
];

/// The functions of the NVTX C API cudasem calls, from one loaded library.
struct Nvtx {
    range_push: unsafe extern "C" fn(*const c_char) -> c_int,
    range_pop: unsafe extern "C" fn() -> c_int,
    range_start: unsafe extern "C" fn(*const c_char) -> u64,
    range_end: unsafe extern "C" fn(u64),
    mark: unsafe extern "C" fn(*const c_char),
    /// Kept loaded for as long as the process runs (the pointers above point into it).
    _lib: libloading::Library,
}

/// The library, loaded on first use; `None` where no candidate loads or one lacks a symbol.
fn lib() -> Option<&'static Nvtx> {
    static LIB: OnceLock<Option<Nvtx>> = OnceLock::new();
    LIB.get_or_init(|| CANDIDATES.iter().find_map(|name| load(name))).as_ref()
}

/// `name` loaded, with every function cudasem calls.
fn load(name: &str) -> Option<Nvtx> {
    // SAFETY: loading runs the library's initializers; NVTX's interop library and
    // libnvToolsExt have none beyond the C runtime's, and are made to be loaded this way.
    let lib = unsafe { libloading::Library::new(name) }.ok()?;
    // SAFETY: each symbol's type is the NVTX C API's declaration (nvToolsExt.h) for that name.
    let nvtx = unsafe {
        Nvtx {
            range_push: *lib.get(b"nvtxRangePushA\0").ok()?,
            range_pop: *lib.get(b"nvtxRangePop\0").ok()?,
            range_start: *lib.get(b"nvtxRangeStartA\0").ok()?,
            range_end: *lib.get(b"nvtxRangeEnd\0").ok()?,
            mark: *lib.get(b"nvtxMarkA\0").ok()?,
            _lib: lib,
        }
    };
    Some(nvtx)
}

/// Whether an NVTX library is loaded (it is tried on first asking).
pub fn available() -> bool {
    lib().is_some()
}

/// `nvtxRangePushA(message)`: the library's value (the depth a profiler reports, or a negative
/// value with none attached); `None` without the library.
pub fn range_push(message: &CStr) -> Option<i32> {
    // SAFETY: `message` is a NUL-terminated string that outlives the call (NVTX copies it).
    lib().map(|l| unsafe { (l.range_push)(message.as_ptr()) })
}

/// `nvtxRangePop()`; `None` without the library.
pub fn range_pop() -> Option<i32> {
    // SAFETY: takes no arguments; popping an empty stack is reported by value, not undefined.
    lib().map(|l| unsafe { (l.range_pop)() })
}

/// `nvtxRangeStartA(message)`: the profiler's id of the range (0 with none attached); `None`
/// without the library.
pub fn range_start(message: &CStr) -> Option<u64> {
    // SAFETY: as `range_push`.
    lib().map(|l| unsafe { (l.range_start)(message.as_ptr()) })
}

/// `nvtxRangeEnd(id)` (an id the library did not give is ignored by it).
pub fn range_end(id: u64) {
    if let Some(l) = lib() {
        // SAFETY: takes a plain integer; NVTX ignores ids it did not hand out.
        unsafe { (l.range_end)(id) }
    }
}

/// `nvtxMarkA(message)`.
pub fn mark(message: &CStr) {
    if let Some(l) = lib() {
        // SAFETY: as `range_push`.
        unsafe { (l.mark)(message.as_ptr()) }
    }
}
