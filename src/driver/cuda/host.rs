//! Pinned host memory and the asynchronous copies between it and the devices.
//!
//! * [`alloc`] — `cuMemHostAlloc` with `CU_MEMHOSTALLOC_PORTABLE`, so the block is page-locked for
//!   every context of the process, not only the one current at allocation (PyTorch's pinned
//!   memory is usable with every GPU too). The block is zeroed once here, so the host never reads
//!   bytes nobody wrote; the caching host allocator above reuses it many times.
//! * [`free`] — `cuMemFreeHost`.
//! * [`htod_async`] / [`dtoh_async`] — `cuMemcpyHtoDAsync` / `cuMemcpyDtoHAsync` on the stream,
//!   returning at once. From pinned memory the copy engine reads (or writes) the host bytes
//!   directly, so the copy overlaps with the host and with kernels on other streams; the caller
//!   keeps the block alive and untouched until an event recorded after the copy completes.

use super::driver::CudaDriver;
use super::status::driver_error;
use crate::driver::{DevicePtr, HostPtr};
use crate::error::{Error, Result};
use cudarc::driver::result::{self as cu, DriverError};
use cudarc::driver::sys::{self, CUresult};
use std::ffi::c_void;
use std::ptr::NonNull;

/// Allocates `bytes` (at least 1) of zeroed, portable page-locked host memory.
pub(super) fn alloc(driver: &CudaDriver, bytes: usize) -> Result<HostPtr> {
    // Any context will do: the memory is portable. Device 0 always exists when there are devices.
    driver.enter(0)?;
    let len = bytes.max(1);
    // SAFETY:
    // - a context is current on this thread;
    // - the returned memory is only handed out as raw bytes, and it is zeroed below before anything reads it.
    let ptr = match unsafe { cu::malloc_host(len, sys::CU_MEMHOSTALLOC_PORTABLE) } {
        Ok(ptr) => NonNull::new(ptr.cast::<u8>()).ok_or(Error::HostOutOfMemory { requested: bytes })?,
        Err(DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY)) => {
            return Err(Error::HostOutOfMemory { requested: bytes })
        }
        Err(e) => return Err(driver_error("cuMemHostAlloc", e)),
    };
    // SAFETY: `ptr` points to `len` freshly allocated, writable bytes that nothing else uses yet.
    unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, len) };
    Ok(HostPtr::from_non_null(ptr))
}

/// Frees memory from [`alloc`].
pub(super) fn free(driver: &CudaDriver, ptr: HostPtr) -> Result<()> {
    driver.enter(0)?;
    let Some(p) = ptr.as_non_null() else {
        return Ok(()); // never from `alloc`; like `cuMemFreeHost(NULL)`
    };
    // SAFETY: the caller passes a live pointer from `alloc` once, with no copy still using it (the
    // contract of `Driver::host_free`).
    unsafe { cu::free_host(p.as_ptr().cast()) }.map_err(|e| driver_error("cuMemFreeHost", e))
}

/// Queues a host → device copy from pinned memory on `stream`.
///
/// # Safety
/// The contract of [`crate::driver::Driver::memcpy_htod_async`].
pub(super) unsafe fn htod_async(
    driver: &CudaDriver,
    dst: DevicePtr,
    src: HostPtr,
    bytes: usize,
    stream: crate::driver::StreamId,
) -> Result<()> {
    let s = driver.stream(stream, "memcpy_htod_async")?;
    if bytes == 0 {
        return Ok(());
    }
    driver.enter(s.device)?;
    let host: *const c_void = src.as_non_null().map_or(std::ptr::null(), |p| p.as_ptr().cast_const().cast());
    // SAFETY:
    // - the caller guarantees `[src, src + bytes)` is pinned memory that stays allocated and unwritten until
    //   the stream passes the copy, and that `dst` holds `bytes` live device bytes reachable from the
    //   stream's device;
    // - the stream is live and of the current context.
    unsafe { sys::cuMemcpyHtoDAsync_v2(dst.0, host, bytes, s.raw.0) }
        .result()
        .map_err(|e| driver_error("cuMemcpyHtoDAsync", e))
}

/// Queues a device → host copy into pinned memory on `stream`.
///
/// # Safety
/// The contract of [`crate::driver::Driver::memcpy_dtoh_async`].
pub(super) unsafe fn dtoh_async(
    driver: &CudaDriver,
    dst: HostPtr,
    src: DevicePtr,
    bytes: usize,
    stream: crate::driver::StreamId,
) -> Result<()> {
    let s = driver.stream(stream, "memcpy_dtoh_async")?;
    if bytes == 0 {
        return Ok(());
    }
    driver.enter(s.device)?;
    let host: *mut c_void = dst.as_non_null().map_or(std::ptr::null_mut(), |p| p.as_ptr().cast());
    // SAFETY:
    // - the caller guarantees `[dst, dst + bytes)` is pinned memory that stays allocated and untouched by the
    //   host until the stream passes the copy, and that `src` holds `bytes` live device bytes reachable from
    //   the stream's device;
    // - the stream is live and of the current context.
    unsafe { sys::cuMemcpyDtoHAsync_v2(host, src.0, bytes, s.raw.0) }
        .result()
        .map_err(|e| driver_error("cuMemcpyDtoHAsync", e))
}

#[cfg(test)]
mod tests {
    use crate::driver::cuda::CudaDriver;
    use crate::driver::{Driver, HostPtr};
    use crate::error::Error;

    #[test]
    fn pinned_round_trip_or_no_device() {
        let d = CudaDriver::default();
        if d.device_count() == 0 {
            assert!(matches!(d.host_alloc(16), Err(Error::NoDevice { .. })));
            assert!(matches!(d.host_free(HostPtr(4096)), Err(Error::NoDevice { .. })));
            crate::testing::skip(1, "no CUDA device: only the errors without one were checked");
            return;
        }
        const N: usize = 1 << 20;
        let (a, b) = (d.host_alloc(N).unwrap(), d.host_alloc(N).unwrap());
        // SAFETY: both blocks are live, `N` bytes long, and no copy uses them yet.
        let (src, dst) = unsafe {
            (
                std::slice::from_raw_parts_mut(a.as_non_null().unwrap().as_ptr(), N),
                std::slice::from_raw_parts_mut(b.as_non_null().unwrap().as_ptr(), N),
            )
        };
        assert!(src.iter().all(|&x| x == 0), "pinned blocks start zeroed");
        for (i, x) in src.iter_mut().enumerate() {
            *x = (i % 251) as u8 + 1;
        }
        let dev = d.malloc(0, N).unwrap();
        let s = d.create_stream(0, 0).unwrap();
        // SAFETY: the blocks stay allocated and untouched by the host until the stream synchronization below.
        unsafe {
            d.memcpy_htod_async(dev, a, N, s).unwrap();
            d.memcpy_dtoh_async(b, dev, N, s).unwrap();
        }
        d.stream_synchronize(s).unwrap();
        assert_eq!(src, dst);
        // SAFETY: memory from this driver's malloc for that device, freed once after its last use.
        unsafe { d.free(0, dev) }.unwrap();
        d.host_free(a).unwrap();
        d.host_free(b).unwrap();
    }
}
