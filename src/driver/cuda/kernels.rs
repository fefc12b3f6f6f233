//! The [`Driver::delay`](crate::driver::Driver::delay) spin kernel: CUDA C source compiled once
//! per process with NVRTC (the PTX is cached), then loaded lazily into each device's primary
//! context, once per process.
//!
//! Every `CudaDriver` of a process shares each device's primary context, so they share one loaded
//! module per device too, counted by the drivers that use it; the last one unloads it. Loading a
//! module (or, with lazy loading, a kernel) may synchronize the whole context, and a second load
//! while another driver's delay kernel ran would hold up that driver's thread until the kernel ended.

use super::{driver_error, lock, DRIVER};
use crate::error::{Error, Result};
use cudarc::driver::result::{self as cu, DriverError};
use cudarc::driver::sys::{self, CUresult};
use cudarc::nvrtc::{self, CompileError};
use std::ffi::c_void;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// One thread spins on the `%globaltimer` nanosecond clock until `ns` have passed. It adds up
/// forward steps only, so a backward step of the clock cannot end the wait early (with
/// `now - start`, it would wrap around to a huge difference).
pub(super) const SPIN_SRC: &str = r#"
extern "C" __global__ void cudasem_spin(unsigned long long ns) {
    unsigned long long prev;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(prev));
    unsigned long long waited = 0;
    while (waited < ns) {
        unsigned long long now;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (now > prev) {
            waited += now - prev;
        }
        prev = now;
    }
}
"#;

/// The kernel's (unmangled) name in [`SPIN_SRC`].
const SPIN_NAME: &std::ffi::CStr = c"cudasem_spin";

/// NUL-terminated PTX of [`SPIN_SRC`], or why it could not be made (compiled at most once).
static SPIN_PTX: OnceLock<Result<Vec<u8>>> = OnceLock::new();

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

raw_handle!(
    /// A loaded module (`CUmodule`).
    RawModule(sys::CUmodule)
);
raw_handle!(
    /// A kernel of a loaded module (`CUfunction`).
    RawFunction(sys::CUfunction)
);

fn unsupported(reason: impl Into<String>) -> Error {
    Error::Unsupported { op: "delay", driver: DRIVER, reason: reason.into() }
}

fn spin_ptx() -> Result<&'static [u8]> {
    SPIN_PTX.get_or_init(compile_spin).as_ref().map(Vec::as_slice).map_err(Clone::clone)
}

fn compile_spin() -> Result<Vec<u8>> {
    const NVRTC_PANICKED: &str = "NVRTC panicked while compiling the spin kernel (is libnvrtc older than CUDA 13?)";
    // SAFETY: only asks the dynamic loader whether libnvrtc can be opened; nothing in it is called.
    if !unsafe { nvrtc::sys::is_culib_present() } {
        return Err(unsupported(
            "the spin kernel needs NVRTC, but libnvrtc.so was not found by the dynamic loader; \
             install the CUDA toolkit's NVRTC (e.g. the cuda-nvrtc-13-0 package) or add its lib \
             directory to LD_LIBRARY_PATH",
        ));
    }
    // `cudarc` panics on a missing NVRTC symbol; report that instead of unwinding into callers.
    let compiled = std::panic::catch_unwind(|| nvrtc::compile_ptx(SPIN_SRC));
    let ptx = match compiled {
        Ok(Ok(ptx)) => ptx,
        Ok(Err(e)) => return Err(compile_error(e)),
        Err(_) => return Err(unsupported(NVRTC_PANICKED)),
    };
    let mut image = ptx
        .as_bytes()
        .map(<[u8]>::to_vec)
        .ok_or_else(|| unsupported("NVRTC returned no PTX image for the spin kernel"))?;
    // `cuModuleLoadData` reads PTX as a C string.
    if image.last() != Some(&0) {
        image.push(0);
    }
    Ok(image)
}

fn compile_error(e: CompileError) -> Error {
    let (op, code, message) = match e {
        CompileError::CreationError(n) => ("nvrtcCreateProgram", n, String::new()),
        CompileError::CompileError { nvrtc, log, .. } => {
            ("nvrtcCompileProgram", nvrtc, log.to_string_lossy().trim().to_owned())
        }
        CompileError::GetLogError(n) => ("nvrtcGetProgramLog", n, String::new()),
        CompileError::GetPtxError(n) => ("nvrtcGetPTX", n, String::new()),
        CompileError::DestroyError(n) => ("nvrtcDestroyProgram", n, String::new()),
    };
    let message =
        if message.is_empty() { "NVRTC failed while building the delay spin kernel".to_owned() } else { message };
    Error::Driver { op, code: code.0 as i32, name: format!("{:?}", code.0), message }
}

fn load_error(e: DriverError) -> Error {
    match e.0 {
        CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION => unsupported(
            "the installed libnvrtc emits PTX newer than the NVIDIA driver accepts; use an NVRTC \
             no newer than the driver's CUDA version (nvidia-smi shows it) or update the driver",
        ),
        _ => driver_error("cuModuleLoadData", e),
    }
}

/// The spin kernel as loaded into one device's primary context.
#[derive(Debug, Clone, Copy)]
pub(super) struct SpinKernel {
    module: RawModule,
    function: RawFunction,
}

impl SpinKernel {
    /// The kernel in `device`'s primary context, loaded there if no driver holds it, for one more
    /// user. The context must be current, and the caller must keep it retained until it gives the
    /// kernel back with [`SpinKernel::release`].
    pub(super) fn acquire(device: sys::CUdevice) -> Result<SpinKernel> {
        let mut shared = lock(&SHARED);
        if let Some(entry) = shared.iter_mut().find(|e| e.device == device) {
            entry.users += 1;
            return Ok(entry.kernel);
        }
        let kernel = SpinKernel::load()?;
        shared.push(Shared { device, kernel, users: 1 });
        Ok(kernel)
    }

    /// Gives back one [`SpinKernel::acquire`] of `device`'s kernel; the last user unloads the
    /// module when `current` says the context is current (else it is left to the context).
    pub(super) fn release(self, device: sys::CUdevice, current: bool) {
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

    /// Compiles the kernel (first call in the process) and loads it into the current context.
    fn load() -> Result<SpinKernel> {
        let image = spin_ptx()?;
        // SAFETY:
        // `image` is NUL-terminated PTX text from NVRTC that lives for `'static`, and the caller has made the
        // target context current.
        let module = unsafe { cu::module::load_data(image.as_ptr().cast()) }.map_err(load_error)?;
        // SAFETY: `module` was just loaded and is not unloaded.
        match unsafe { cu::module::get_function(module, SPIN_NAME.to_owned()) } {
            Ok(function) => Ok(SpinKernel { module: RawModule(module), function: RawFunction(function) }),
            Err(e) => {
                // SAFETY: loaded above and never handed out, so unloaded exactly once.
                let _ = unsafe { cu::module::unload(module) };
                Err(driver_error("cuModuleGetFunction", e))
            }
        }
    }

    /// Queues one thread on `stream` that spins for `duration`.
    ///
    /// # Safety
    /// The context this kernel was loaded into must be current, the module still loaded, and
    /// `stream` a live stream of that context (or null for its default stream).
    pub(super) unsafe fn launch(&self, stream: sys::CUstream, duration: Duration) -> Result<()> {
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
        // driver holds the kernel), so the module is unloaded exactly once.
        let _ = unsafe { cu::module::unload(self.module.0) };
    }
}
