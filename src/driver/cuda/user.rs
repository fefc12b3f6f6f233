//! User kernels on the CUDA driver (`cuda::compile_kernel`): a CUDA C source compiled through the
//! one NVRTC path (`kernels/nvrtc.rs`, with its process and disk caches), loaded into a device's
//! primary context, and launched with `cuLaunchKernel` on a stream. Loaded modules stay loaded for
//! the process's life (a kernel handle may be launched at any time, and graphs captured with it
//! replay it), as PyTorch's compiled kernels do.

use super::capture;
use super::driver::CudaDriver;
use super::kernels::nvrtc::{Module, Program, RawFunction};
use super::status::{driver_error, lock, DRIVER};
use crate::driver::{LaunchShape, StreamId, UserArg, UserFunctionId, UserImage};
use crate::error::{Error, Result};
use cudarc::driver::result as cu;
use cudarc::driver::sys;
use std::ffi::c_void;
use std::sync::Mutex;

/// Every user kernel loaded in this process: its device and function, by id (the index).
static FUNCTIONS: Mutex<Vec<(usize, RawFunction)>> = Mutex::new(Vec::new());

/// Arguments passed without a heap allocation (more take one).
const INLINE_ARGS: usize = 16;

impl CudaDriver {
    /// [`Driver::user_module_load`](crate::driver::Driver::user_module_load).
    pub(super) fn load_user_kernel(&self, device: usize, image: UserImage<'_>, name: &str) -> Result<UserFunctionId> {
        let dev = self.enter(device)?;
        let attr = |a: sys::CUdevice_attribute| -> Result<u32> {
            // SAFETY: `dev.cu` came from `cuDeviceGet`; `a` is a valid attribute.
            let v = unsafe { cu::device::get_attribute(dev.cu, a) };
            Ok(v.map_err(|e| driver_error("cuDeviceGetAttribute", e))?.max(0) as u32)
        };
        use sys::CUdevice_attribute::*;
        // Loading a module is refused on a stream capture in global mode: relaxed, as the tensor
        // kernels' first launch is.
        let module = capture::maybe_relaxed(|| match image {
            UserImage::Source { source, options, arch } => {
                let (major, minor) = match arch {
                    Some(a) => a,
                    None => (
                        attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
                        attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
                    ),
                };
                let options: Vec<&str> = options.iter().map(String::as_str).collect();
                let program = Program { source, options: &options, op: "compile_kernel" };
                Module::load(&program, major, minor, self.kernel_cache.as_deref())
            }
            UserImage::Ptx(ptx) => {
                let mut text = Vec::with_capacity(ptx.len() + 1);
                text.extend_from_slice(ptx.as_bytes());
                text.push(0);
                Module::load_image(&text, "Kernel::from_ptx")
            }
            UserImage::Cubin(bytes) => Module::load_image(bytes, "Kernel::from_cubin"),
        })?;
        let function = match module.function(name) {
            Ok(f) => f,
            Err(e) => {
                // SAFETY: loaded above and never handed out, so nothing else uses it.
                unsafe { module.unload() };
                return Err(e);
            }
        };
        let mut table = lock(&FUNCTIONS);
        table.push((device, function));
        Ok(UserFunctionId(table.len() as u64 - 1))
    }

    /// [`Driver::user_param_sizes`](crate::driver::Driver::user_param_sizes): asks
    /// `cuFuncGetParamInfo` for each index until the driver says there is no such parameter.
    pub(super) fn user_kernel_param_sizes(&self, func: UserFunctionId) -> Result<Option<Vec<usize>>> {
        let (device, function) = Self::user_function(func)?;
        self.enter(device)?;
        let ask = || {
            let mut sizes = Vec::new();
            loop {
                let (mut offset, mut size) = (0usize, 0usize);
                // SAFETY: a function of a module never unloaded; both out-pointers are valid.
                let r = unsafe { sys::cuFuncGetParamInfo(function.0, sizes.len(), &mut offset, &mut size) };
                match r {
                    sys::CUresult::CUDA_SUCCESS => sizes.push(size),
                    sys::CUresult::CUDA_ERROR_INVALID_VALUE => return Some(sizes),
                    _ => return None, // not supported by this driver
                }
            }
        };
        // An NVIDIA driver older than 12.4 lacks the symbol (the loader panics): not known.
        Ok(std::panic::catch_unwind(ask).ok().flatten())
    }

    fn user_function(func: UserFunctionId) -> Result<(usize, RawFunction)> {
        lock(&FUNCTIONS)
            .get(func.0 as usize)
            .copied()
            .ok_or_else(|| Error::Internal { op: "launch", reason: format!("user kernel {} was never loaded", func.0) })
    }

    /// [`Driver::user_launch`](crate::driver::Driver::user_launch).
    pub(super) fn launch_user_kernel(
        &self,
        stream: StreamId,
        func: UserFunctionId,
        shape: LaunchShape,
        args: &[UserArg],
    ) -> Result<()> {
        let s = self.stream(stream, "launch")?;
        let (device, function) = Self::user_function(func)?;
        if device != s.device {
            return Err(Error::Unsupported {
                op: "launch",
                driver: DRIVER,
                reason: format!("a kernel loaded for cuda:{device} cannot run on a stream of cuda:{}", s.device),
            });
        }
        self.enter(device)?;
        // Each parameter points at its argument's bytes in `args` (a device address is its `u64`);
        // the driver only reads them.
        let param = |a: &UserArg| -> *mut c_void {
            match a {
                UserArg::Ptr(p) => std::ptr::from_ref(&p.0).cast_mut().cast(),
                UserArg::Bytes(b) => std::ptr::from_ref(&b.0).cast_mut().cast(),
            }
        };
        let mut inline = [std::ptr::null_mut::<c_void>(); INLINE_ARGS];
        let mut heap = Vec::new();
        let params: &mut [*mut c_void] = if args.len() <= INLINE_ARGS {
            for (p, a) in inline.iter_mut().zip(args) {
                *p = param(a);
            }
            &mut inline[..args.len()]
        } else {
            heap.extend(args.iter().map(param));
            &mut heap
        };
        let [gx, gy, gz] = shape.grid;
        let [bx, by, bz] = shape.block;
        // SAFETY:
        // - `enter` made the device's context current; the function was loaded into it (checked above)
        //   and its module is never unloaded; the stream is live and of that context;
        // - each parameter points to the argument's value in `args` (8 bytes, 8-aligned, live for the
        //   call), and `cuLaunchKernel` only reads them, copying the values before it returns;
        // - the caller checked the arguments against the kernel's signature where it could be read,
        //   as `torch.cuda._compile_kernel` leaves to its caller.
        unsafe { cu::launch_kernel(function.0, (gx, gy, gz), (bx, by, bz), shape.shared_mem, s.raw.0, params) }
            .map_err(|e| driver_error("cuLaunchKernel", e))
    }
}

/// The CUBIN of CUDA C `source` for compute capability `major.minor`, compiled by the crate's NVRTC
/// path (no device needed); [`Error::Unsupported`] where NVRTC is missing or cannot emit a CUBIN
/// for that architecture.
pub(crate) fn nvrtc_cubin(source: &str, major: u32, minor: u32) -> Result<Vec<u8>> {
    let program = Program { source, options: &[], op: "nvrtc_cubin" };
    let img = super::kernels::nvrtc::image(&program, major, minor, None)?;
    if !img.starts_with(b"\x7fELF") {
        return Err(Error::Unsupported {
            op: "nvrtc_cubin",
            driver: DRIVER,
            reason: format!("this NVRTC emits PTX, not a CUBIN, for compute capability {major}.{minor}"),
        });
    }
    Ok(img.to_vec())
}

/// Makes the primary context `context` current on this thread.
fn set_current(context: u64) -> Result<()> {
    // SAFETY: `context` is a primary context the runtime retains for the process's life.
    unsafe { cu::ctx::set_current(context as sys::CUcontext) }.map_err(|e| driver_error("cuCtxSetCurrent", e))
}

/// A kernel loaded and launched through cudarc's `result` API alone (`cuModuleLoadData`,
/// `cuLaunchKernel` with its arguments' addresses), as a program calling cudarc by hand does: the
/// bench's comparator for the host cost of [`Kernel::launch`](crate::cuda::Kernel::launch). It
/// holds the owner of the memory its addresses point into.
pub(crate) struct RawCudarcKernel {
    function: RawFunction,
    context: u64,
    stream: u64,
    ptrs: Vec<u64>,
    _owner: Box<dyn std::any::Any + Send + Sync>,
}

impl RawCudarcKernel {
    /// The kernel `name` of `ptx`, loaded into the primary context `context` (a value of
    /// `primary_context`), to launch on the native stream `stream` of that context with the
    /// device addresses `ptrs` (memory of that device, which `owner` keeps alive) as its pointer
    /// parameters.
    pub(crate) fn load(
        ptx: &str,
        name: &str,
        (context, stream): (u64, u64),
        ptrs: Vec<u64>,
        owner: Box<dyn std::any::Any + Send + Sync>,
    ) -> Result<RawCudarcKernel> {
        if ptrs.len() > INLINE_ARGS {
            return Err(Error::InvalidArgument { op: "RawCudarcKernel", reason: "at most 16 arguments".into() });
        }
        set_current(context)?;
        let mut text = ptx.as_bytes().to_vec();
        text.push(0);
        let module = Module::load_image(&text, "RawCudarcKernel")?;
        Ok(RawCudarcKernel { function: module.function(name)?, context, stream, ptrs, _owner: owner })
    }

    /// Makes the kernel's context current on this thread (before a run of launches).
    pub(crate) fn make_current(&self) -> Result<()> {
        set_current(self.context)
    }

    /// One `cuLaunchKernel` of `grid` × `block` threads (the context current, [`Self::make_current`]).
    pub(crate) fn launch(&self, grid: u32, block: u32) -> Result<()> {
        let mut params = [std::ptr::null_mut::<c_void>(); INLINE_ARGS];
        for (p, v) in params.iter_mut().zip(&self.ptrs) {
            *p = std::ptr::from_ref(v).cast_mut().cast();
        }
        // SAFETY: the function's module is never unloaded; each parameter points to an address of
        // live device memory (held by `_owner`) for the call, which only reads and copies them;
        // what the kernel does with them is its author's, as with `Kernel::launch`.
        unsafe {
            cu::launch_kernel(
                self.function.0,
                (grid, 1, 1),
                (block, 1, 1),
                0,
                self.stream as sys::CUstream,
                &mut params[..self.ptrs.len()],
            )
        }
        .map_err(|e| driver_error("cuLaunchKernel", e))
    }
}

#[cfg(test)]
mod tests {
    use super::super::kernels::nvrtc::{image, Program};
    use crate::error::Error;

    #[test]
    fn a_syntax_error_gives_the_typed_error_with_nvrtcs_log() {
        // SAFETY: only asks the dynamic loader whether libnvrtc can be opened.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            eprintln!("skipped: libnvrtc is not loadable");
            return;
        }
        let bad = format!("extern \"C\" __global__ void k{}(float* x) {{ x[0] = ; }}", std::process::id());
        let program = Program { source: &bad, options: &[], op: "compile_kernel" };
        match image(&program, 8, 0, None) {
            Err(Error::Driver { op, message, .. }) => {
                assert_eq!(op, "nvrtcCompileProgram");
                assert!(message.contains("error"), "NVRTC's log: {message}");
            }
            other => panic!("expected a compile error with NVRTC's log, got {other:?}"),
        }
        let good = "extern \"C\" __global__ void k(float* x) { x[0] = 1.0f; }";
        let program = Program { source: good, options: &[], op: "compile_kernel" };
        assert!(image(&program, 8, 0, None).is_ok(), "a valid source compiles");
    }
}
