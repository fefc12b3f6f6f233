//! The CUDA driver's statuses as [`Error`]s (number, name and description kept), and the
//! poison-tolerant locks every file of the backend uses.

use crate::error::{Error, Result};
use cudarc::driver::result::{self as cu, DriverError};
use cudarc::driver::sys::CUresult;
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// This backend's name, as [`Driver::name`](crate::driver::Driver::name) reports it.
pub(super) const DRIVER: &str = "cuda";

/// The driver's name and description of an error, e.g. `("CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected")`.
pub(super) fn names(e: DriverError) -> (String, String) {
    let code = e.error_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|_| format!("{:?}", e.0));
    let message = e
        .error_string()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "the driver gave no description".to_owned());
    (code, message)
}

/// `CODE (description)`, for reasons written as text.
pub(super) fn describe(e: DriverError) -> String {
    let (code, message) = names(e);
    format!("{code} ({message})")
}

/// Maps a driver error that no more specific [`Error`] variant describes: its number, name and
/// description.
pub(super) fn driver_error(op: &'static str, e: DriverError) -> Error {
    let (name, message) = names(e);
    Error::Driver { op, code: e.0 as i32, name, message }
}

/// [`Error::OutOfMemory`] for `requested` bytes on `device`, whose context is current.
pub(super) fn out_of_memory(device: usize, requested: usize) -> Error {
    let (free, total) = cu::mem_get_info().unwrap_or((0, 0));
    Error::OutOfMemory { device, requested, total, free, allocated: 0, reserved_unallocated: 0 }
}

/// `Ok(true)` for success, `Ok(false)` for `CUDA_ERROR_NOT_READY`, else an error.
pub(super) fn ready(op: &'static str, status: CUresult) -> Result<bool> {
    match status {
        CUresult::CUDA_SUCCESS => Ok(true),
        CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        other => Err(driver_error(op, DriverError(other))),
    }
}

pub(super) fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

pub(super) fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
