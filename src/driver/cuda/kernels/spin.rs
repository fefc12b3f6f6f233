//! The [`Driver::delay`](crate::driver::Driver::delay) spin kernel: `cu/spin.cu`, compiled through
//! the NVRTC path (`nvrtc.rs`, cached in the process and on disk) for each device's architecture,
//! then loaded lazily into each device's primary context, once per process.
//!
//! Every `CudaDriver` of a process shares each device's primary context, so they share one loaded
//! module per device too, counted by the drivers that use it; the last one unloads it. Loading a
//! module (or, with lazy loading, a kernel) may synchronize the whole context, and a second load
//! while another driver's delay kernel ran would hold up that driver's thread until the kernel ended.

use super::nvrtc::{Module, Program, RawFunction};
use super::sources::SPIN;
use crate::driver::cuda::status::{driver_error, lock};
use crate::error::Result;
use cudarc::driver::result as cu;
use cudarc::driver::sys;
use std::ffi::c_void;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

/// The kernel's (unmangled) name in [`SPIN`].
const SPIN_NAME: &str = "cudasem_spin";

/// The loaded spin kernel of each device's primary context, with how many drivers use it.
static SHARED: Mutex<Vec<Shared>> = Mutex::new(Vec::new());

/// One entry of [`SHARED`].
#[derive(Debug)]
struct Shared {
    device: sys::CUdevice,
    kernel: SpinKernel,
    /// Drivers holding it; each also holds a retain on the primary context, which keeps the module alive.
    users: usize,
}

/// The spin kernel as loaded into one device's primary context.
#[derive(Debug, Clone, Copy)]
pub(in crate::driver::cuda) struct SpinKernel {
    module: Module,
    function: RawFunction,
}

impl SpinKernel {
    /// The kernel in `device`'s primary context, loaded there if no driver holds it, for one more
    /// user. The context must be current, and the caller must keep it retained until it gives the
    /// kernel back with [`SpinKernel::release`].
    /// (`cache`: the disk cache of compiled kernels, if any.)
    pub(in crate::driver::cuda) fn acquire(device: sys::CUdevice, cache: Option<&Path>) -> Result<SpinKernel> {
        let mut shared = lock(&SHARED);
        if let Some(entry) = shared.iter_mut().find(|e| e.device == device) {
            entry.users += 1;
            return Ok(entry.kernel);
        }
        let kernel = SpinKernel::load(device, cache)?;
        shared.push(Shared { device, kernel, users: 1 });
        Ok(kernel)
    }

    /// Gives back one [`SpinKernel::acquire`] of `device`'s kernel; the last user unloads the
    /// module when `current` says the context is current (else it is left to the context).
    pub(in crate::driver::cuda) fn release(self, device: sys::CUdevice, current: bool) {
        let mut shared = lock(&SHARED);
        let Some(index) = shared.iter().position(|e| e.device == device) else {
            return;
        };
        let entry = &mut shared[index];
        entry.users = entry.users.saturating_sub(1);
        if entry.users == 0 {
            let entry = shared.swap_remove(index);
            if current {
                entry.kernel.unload();
            }
        }
    }

    /// Compiles the kernel for `device` (through the NVRTC path and its caches) and loads it into
    /// the current context, which must be `device`'s.
    fn load(device: sys::CUdevice, cache: Option<&Path>) -> Result<SpinKernel> {
        let attr = |a: sys::CUdevice_attribute| -> Result<u32> {
            // SAFETY: `device` came from `cuDeviceGet`; `a` is a valid attribute.
            let v = unsafe { cu::device::get_attribute(device, a) };
            Ok(v.map_err(|e| driver_error("cuDeviceGetAttribute", e))?.max(0) as u32)
        };
        use sys::CUdevice_attribute::*;
        let (major, minor) =
            (attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?, attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?);
        let module = Module::load(&Program { source: SPIN, options: &[], op: "delay" }, major, minor, cache)?;
        match module.function(SPIN_NAME) {
            Ok(function) => Ok(SpinKernel { module, function }),
            Err(e) => {
                // SAFETY: loaded above and never handed out, so nothing else uses it.
                unsafe { module.unload() };
                Err(e)
            }
        }
    }

    /// Queues one thread on `stream` that spins for `duration`.
    ///
    /// # Safety
    /// The context this kernel was loaded into must be current, the module still loaded, and
    /// `stream` a live stream of that context (or null for its default stream).
    pub(in crate::driver::cuda) unsafe fn launch(&self, stream: sys::CUstream, duration: Duration) -> Result<()> {
        let mut ns: u64 = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        let mut params = [(&mut ns as *mut u64).cast::<c_void>()];
        // SAFETY:
        // - per this function's contract the function handle and stream are valid here;
        // - the kernel takes one `unsigned long long`, which `params[0]` points to, and `cuLaunchKernel`
        //   copies parameter values before returning.
        unsafe { cu::launch_kernel(self.function.0, (1, 1, 1), (1, 1, 1), 0, stream, &mut params) }
            .map_err(|e| driver_error("cuLaunchKernel", e))
    }

    /// Unloads the module (best effort); the context it was loaded into must be current.
    fn unload(self) {
        // SAFETY:
        // only `release` calls this, for the last user, on the entry it just took out of `SHARED` (no other
        // driver holds the kernel), so the module is unloaded exactly once and not used again.
        unsafe { self.module.unload() };
    }
}
