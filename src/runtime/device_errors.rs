//! [`DeviceErrors`]: one device's pending asynchronous errors, the state the registry holds per
//! device; the functions that record, check and take them are in `errors.rs`.

use crate::driver::Driver;
use crate::error::Error;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The most driver-kept errors moved into the list at one check (the driver keeps few).
const DRAIN_LIMIT: usize = 64;

/// One device's pending errors.
#[derive(Default)]
pub(crate) struct DeviceErrors {
    /// Whether `list` may be non-empty (the fast path of a check).
    pub(super) any: AtomicBool,
    list: Mutex<Vec<Error>>,
}

impl DeviceErrors {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Error>> {
        self.list.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn push(&self, error: Error) {
        self.lock().push(error);
        self.any.store(true, Ordering::Release);
    }

    /// Moves the errors `driver` kept for `device` (a checked index) into the list.
    #[inline]
    pub(super) fn drain(&self, driver: &dyn Driver, device: usize) {
        for _ in 0..DRAIN_LIMIT {
            match driver.take_error(device) {
                Ok(()) => return,
                Err(e) => self.push(e),
            }
        }
    }

    /// Writes the errors still pending on `device` to stderr (at process exit).
    pub(super) fn report_pending(&self, device: usize) {
        let list = self.lock();
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
