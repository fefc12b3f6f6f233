//! Device memory and the synchronous-looking copies: `cuMemAlloc`/`cuMemFree` (with the injected
//! failures of [`crate::driver::Driver::fail_next_malloc`]), memset and copies host↔device,
//! device↔device and between devices, all queued on a stream.

use super::driver::CudaDriver;
use super::status::{driver_error, out_of_memory};
use crate::driver::{DevicePtr, StreamId};
use crate::error::{Error, Result};
use cudarc::driver::result::{self as cu, DriverError};
use cudarc::driver::sys::{self, CUresult};
use std::sync::atomic::Ordering;

pub(super) fn malloc(driver: &CudaDriver, device: usize, bytes: usize) -> Result<DevicePtr> {
    let dev = driver.device(device)?;
    if dev.fail_next_malloc.swap(false, Ordering::SeqCst) {
        return Err(Error::Injected { device, op: "malloc" });
    }
    driver.enter(device)?;
    // SAFETY:
    // - `device`'s context is current;
    // - the memory is handed out as raw bytes, so its being uninitialized is fine. As in the sim driver,
    //   a zero-byte request still gets a unique address (`cuMemAlloc` rejects 0).
    match unsafe { cu::malloc_sync(bytes.max(1)) } {
        Ok(ptr) => Ok(DevicePtr(ptr)),
        Err(DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY)) => Err(out_of_memory(device, bytes)),
        Err(e) => Err(driver_error("cuMemAlloc", e)),
    }
}

pub(super) fn free(driver: &CudaDriver, device: usize, ptr: DevicePtr) -> Result<()> {
    if driver.device(device)?.fail_next_free.swap(false, Ordering::SeqCst) {
        return Err(Error::Injected { device, op: "free" });
    }
    driver.enter(device)?;
    // SAFETY:
    // the runtime passes only live pointers from `malloc` on this device, once. `cuMemFree` waits for
    // queued work that may use the memory.
    unsafe { cu::free_sync(ptr.0) }.map_err(|e| driver_error("cuMemFree", e))
}

pub(super) fn memset_d8(driver: &CudaDriver, dst: DevicePtr, value: u8, bytes: usize, stream: StreamId) -> Result<()> {
    let s = driver.stream(stream, "memset_d8")?;
    if bytes == 0 {
        return Ok(());
    }
    driver.enter(s.device)?;
    // SAFETY:
    // - the runtime guarantees `dst..dst+bytes` is live device memory reachable from the stream's device;
    // - the stream is live and of the current context.
    unsafe { cu::memset_d8_async(dst.0, value, bytes, s.raw.0) }.map_err(|e| driver_error("cuMemsetD8Async", e))
}

pub(super) fn htod(driver: &CudaDriver, dst: DevicePtr, src: &[u8], stream: StreamId) -> Result<()> {
    let s = driver.stream(stream, "memcpy_htod")?;
    if src.is_empty() {
        return Ok(());
    }
    driver.enter(s.device)?;
    // SAFETY:
    // - `dst` holds `src.len()` live bytes (runtime-checked);
    // - `src` stays borrowed until the stream synchronization below has consumed it.
    unsafe { cu::memcpy_htod_async(dst.0, src, s.raw.0) }.map_err(|e| driver_error("cuMemcpyHtoDAsync", e))?;
    // SAFETY: the stream is live and of the current context.
    unsafe { cu::stream::synchronize(s.raw.0) }.map_err(|e| driver_error("cuStreamSynchronize", e))
}

pub(super) fn dtoh(driver: &CudaDriver, dst: &mut [u8], src: DevicePtr, stream: StreamId) -> Result<()> {
    let s = driver.stream(stream, "memcpy_dtoh")?;
    if dst.is_empty() {
        return Ok(());
    }
    driver.enter(s.device)?;
    // SAFETY:
    // - `src` holds `dst.len()` live bytes (runtime-checked);
    // - `dst` stays mutably borrowed until the stream synchronization below has filled it.
    unsafe { cu::memcpy_dtoh_async(dst, src.0, s.raw.0) }.map_err(|e| driver_error("cuMemcpyDtoHAsync", e))?;
    // SAFETY: the stream is live and of the current context.
    unsafe { cu::stream::synchronize(s.raw.0) }.map_err(|e| driver_error("cuStreamSynchronize", e))
}

pub(super) fn dtod(driver: &CudaDriver, dst: DevicePtr, src: DevicePtr, bytes: usize, stream: StreamId) -> Result<()> {
    let s = driver.stream(stream, "memcpy_dtod")?;
    if bytes == 0 {
        return Ok(());
    }
    driver.enter(s.device)?;
    // SAFETY:
    // - both ranges are live device memory of `bytes` bytes (runtime-checked);
    // - the stream is live and of the current context.
    unsafe { cu::memcpy_dtod_async(dst.0, src.0, bytes, s.raw.0) }.map_err(|e| driver_error("cuMemcpyDtoDAsync", e))
}

pub(super) fn peer(
    driver: &CudaDriver,
    dst_device: usize,
    dst: DevicePtr,
    src_device: usize,
    src: DevicePtr,
    bytes: usize,
    stream: StreamId,
) -> Result<()> {
    let s = driver.stream(stream, "memcpy_peer")?;
    let dst_ctx = driver.device(dst_device)?.ctx;
    let src_ctx = driver.device(src_device)?.ctx;
    if bytes == 0 {
        return Ok(());
    }
    driver.enter(s.device)?;
    // SAFETY:
    // `dst` and `src` are live allocations of `bytes` bytes in the given devices' primary contexts
    // (runtime-checked), both contexts are retained, and the stream is live and of the current context.
    unsafe { cu::memcpy_peer_async(dst_ctx.0, dst.0, src_ctx.0, src.0, bytes, s.raw.0) }
        .map_err(|e| driver_error("cuMemcpyPeerAsync", e))
}

/// Checks that the first and the last of `bytes` bytes from `ptr` are memory the driver attributes
/// to `device` (`cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)`): memory made elsewhere,
/// before a tensor views it. An address CUDA does not know is [`Error::InvalidPointer`].
pub(super) fn check_foreign_range(driver: &CudaDriver, device: usize, ptr: DevicePtr, bytes: usize) -> Result<()> {
    driver.enter(device)?;
    let last = ptr.0.checked_add(bytes.max(1) as u64 - 1).ok_or_else(|| Error::InvalidPointer {
        device,
        ptr: ptr.0,
        reason: format!("{bytes} bytes from here run past the end of the address space"),
    })?;
    for at in [ptr.0, last] {
        let mut ordinal: std::ffi::c_int = -1;
        // SAFETY:
        // - `ordinal` is a valid out-pointer of the attribute's type (an `int`);
        // - the call only reads the driver's tables about `at`: any address is allowed, an unknown one
        //   is reported as an error, nothing is dereferenced.
        let status = unsafe {
            sys::cuPointerGetAttribute(
                (&mut ordinal as *mut std::ffi::c_int).cast(),
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                at,
            )
        };
        if status != CUresult::CUDA_SUCCESS {
            return Err(Error::InvalidPointer {
                device,
                ptr: at,
                reason: format!(
                    "CUDA does not know this address ({status:?} from cuPointerGetAttribute): it is not memory \
                     allocated through CUDA"
                ),
            });
        }
        if usize::try_from(ordinal).ok() != Some(device) {
            return Err(Error::InvalidPointer {
                device,
                ptr: at,
                reason: format!("CUDA attributes this address to device ordinal {ordinal}, not to cuda:{device}"),
            });
        }
    }
    Ok(())
}
