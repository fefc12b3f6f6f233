//! [`DeviceGuard`] and [`with_device`]: `with torch.cuda.device(i):`.

use super::{context, rt};
use crate::device::IntoCudaDevice;
use crate::error::{Error, Result};
use std::marker::PhantomData;

/// Makes a device current until dropped, then restores the previous one — also when the scope
/// is left by a panic, and when guards nest. A `set_device` inside the guard's scope is undone
/// when it drops, as in PyTorch.
///
/// Not `Send`: the current device is per thread, so a guard belongs to the thread that made it.
/// Guards must be dropped in reverse order of creation (the normal scope order); dropping an
/// outer guard first panics, like tokio's context guards.
#[must_use = "the previous device is restored when the guard is dropped; bind it with `let _g = ...`"]
#[doc(alias = "device")]
pub struct DeviceGuard {
    prev: usize,
    depth: usize,
    _not_send: PhantomData<*const ()>,
}

impl DeviceGuard {
    /// Makes `device` (an index, a [`crate::Device`] or a string like `"cuda:1"`; `None` or
    /// `"cuda"`: the current device, which then is restored on drop) current.
    pub fn new(device: impl IntoCudaDevice) -> Result<DeviceGuard> {
        let index = rt()?.device(device)?;
        let prev = context::current_index();
        let depth = context::push_guard();
        context::set_index(index);
        Ok(DeviceGuard { prev, depth, _not_send: PhantomData })
    }

    /// The device that will be restored on drop.
    pub fn previous(&self) -> usize {
        self.prev
    }
}

impl Drop for DeviceGuard {
    fn drop(&mut self) {
        context::pop_guard(self.depth, "DeviceGuard");
        context::set_index(self.prev);
    }
}

/// Runs `f` with `device` current, then restores the previous device (also when `f` fails or
/// panics): `with torch.cuda.device(d):`. The closure returns a [`Result`], so `?` works inside
/// it and the call needs one `?`.
///
/// The closure may return any error type `E` with `From<cudasem::Error>` (your own error enum,
/// `Box<dyn std::error::Error>`, `anyhow::Error`), so `?` works inside it on cudasem's errors and
/// on yours; cudasem's own errors of the call come back converted. In a function returning
/// cudasem's [`Result`], `E` is `cudasem::Error` without saying so; elsewhere a closure that ends in
/// `Ok(..)` names it once: `Ok::<_, MyError>(value)`. For example:
///
/// ```
/// use cudasem::{cuda, DType, Tensor};
/// # fn main() -> cudasem::Result<()> {
/// let last = cuda::device_count() - 1;
/// let t = cuda::with_device(last, || {
///     let t = Tensor::ones(&[3], DType::F32, "cuda")?; // on the current device: `last`
///     &t * 2.0
/// })?;
/// assert_eq!(t.device(), cudasem::Device::cuda(last));
/// # Ok(()) }
/// ```
#[doc(alias = "device")]
pub fn with_device<R, E: From<Error>>(device: impl IntoCudaDevice, f: impl FnOnce() -> Result<R, E>) -> Result<R, E> {
    let _g = DeviceGuard::new(device)?;
    f()
}
