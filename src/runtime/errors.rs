//! Asynchronous errors per device, sticky as CUDA's: an error raised where it cannot be returned
//! (in a `Drop`: freeing memory or a pinned block, destroying an event; or by a collective that
//! failed after it was queued) is kept for its device, and every later synchronization point of
//! that device — `cuda::synchronize`, `Stream::synchronize` / `query`, `Event::synchronize` /
//! `query`, a host read (`Tensor::to_vec`, `item`, `cpu`, a blocking device-to-host copy) —
//! returns it until [`get_last_error`] takes it ([`peek_at_last_error`] only looks). None is
//! merged away: one pending error is returned as itself, several as
//! [`Error::DeviceErrors`](crate::Error::DeviceErrors), oldest first. Errors still pending when
//! the process exits are written to stderr.

use super::rt;
use crate::device::IntoCudaDevice;
use crate::error::{Error, Result};
use std::sync::atomic::Ordering;

/// Keeps `error` for `device`'s synchronization points (an invalid `device` is ignored).
pub(crate) fn record(device: usize, error: Error) {
    if let Some(d) = rt().ok().and_then(|rt| rt.devices.get(device)) {
        d.errors.push(error);
    }
}

/// Moves the errors the driver kept for `device` (a checked index) into its list.
fn drain_driver(device: usize) {
    let Ok(rt) = rt() else { return };
    rt.devices[device].errors.drain(rt.driver.as_ref(), device);
}

/// The pending errors of `device` as one error.
fn combined(device: usize, errors: &[Error]) -> Result<()> {
    match errors {
        [] => Ok(()),
        [one] => Err(one.clone()),
        many => Err(Error::DeviceErrors { device, errors: many.to_vec() }),
    }
}

/// `Ok` unless errors are pending on `device` (a checked index); they stay pending.
pub(crate) fn check(device: usize) -> Result<()> {
    drain_driver(device);
    let errors = &rt()?.devices[device].errors;
    if !errors.any.load(Ordering::Acquire) {
        return Ok(());
    }
    combined(device, &errors.lock())
}

/// Returns the asynchronous errors pending on `device` (`None` or `"cuda"`: the current device)
/// and clears them (CUDA's `cudaGetLastError`): errors raised in a `Drop` (a failed free, an
/// event that could not be destroyed) or by a collective that failed after it was queued. Until
/// this is called they are sticky: every synchronization point of the device returns them
/// (`synchronize`, stream and event `synchronize`/`query`, host reads such as `Tensor::to_vec`).
/// One error is returned as itself, several as [`Error::DeviceErrors`], oldest first; `Ok` when
/// none is pending.
pub fn get_last_error(device: impl IntoCudaDevice) -> Result<()> {
    let rt = rt()?;
    let device = rt.device(device)?;
    drain_driver(device);
    let errors = &rt.devices[device].errors;
    let taken = {
        let mut list = errors.lock();
        errors.any.store(false, Ordering::Release);
        std::mem::take(&mut *list)
    };
    combined(device, &taken)
}

/// The asynchronous errors pending on `device`, which stay pending (CUDA's
/// `cudaPeekAtLastError`); see [`get_last_error`].
pub fn peek_at_last_error(device: impl IntoCudaDevice) -> Result<()> {
    let rt = rt()?;
    check(rt.device(device)?)
}
