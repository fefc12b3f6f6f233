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
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The most driver-kept errors moved into the list at one check (the driver keeps few).
const DRAIN_LIMIT: usize = 64;

/// One device's pending errors.
#[derive(Default)]
pub(crate) struct DeviceErrors {
    /// Whether `list` may be non-empty (the fast path of a check).
    any: AtomicBool,
    list: Mutex<Vec<Error>>,
}

impl DeviceErrors {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Error>> {
        self.list.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, error: Error) {
        self.lock().push(error);
        self.any.store(true, Ordering::Release);
    }
}

/// Keeps `error` for `device`'s synchronization points (an invalid `device` is ignored).
pub(crate) fn record(device: usize, error: Error) {
    if let Some(d) = rt().ok().and_then(|rt| rt.devices.get(device)) {
        d.errors.push(error);
    }
}

/// Moves the errors the driver kept for `device` (a checked index) into its list.
fn drain_driver(device: usize) {
    let Ok(rt) = rt() else { return };
    for _ in 0..DRAIN_LIMIT {
        match rt.driver.take_error(device) {
            Ok(()) => return,
            Err(e) => rt.devices[device].errors.push(e),
        }
    }
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

/// Writes the errors still pending on every device to stderr (run at process exit).
pub(crate) extern "C" fn report_at_exit() {
    let Some(Ok(rt)) = super::RUNTIME.get() else { return };
    for device in 0..rt.devices.len() {
        drain_driver(device);
        let list = rt.devices[device].errors.lock();
        for (i, e) in list.iter().enumerate() {
            let _ = writeln!(
                std::io::stderr(),
                "cudasem: asynchronous error {} of {} on cuda:{device} was never reported \
                 (pending at exit; a later synchronize or cuda::get_last_error would have returned it): {e}",
                i + 1,
                list.len()
            );
        }
    }
}
