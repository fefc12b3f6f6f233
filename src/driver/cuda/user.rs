//! User kernels on the CUDA driver (`cuda::compile_kernel`): a CUDA C source compiled through the
//! one NVRTC path (`kernels/nvrtc.rs`, with its process and disk caches), loaded into a device's
//! primary context, and launched with `cuLaunchKernel` on a stream. Loaded modules stay loaded for
//! the process's life (a kernel handle may be launched at any time, and graphs captured with it
//! replay it), as PyTorch's compiled kernels do.

use super::driver::CudaDriver;
use super::kernels::nvrtc::{Module, Program, RawFunction};
use super::status::{driver_error, lock, DRIVER};
use crate::driver::{LaunchShape, StreamId, UserArg, UserFunctionId};
use crate::error::{Error, Result};
use cudarc::driver::result as cu;
use cudarc::driver::sys;
use std::ffi::c_void;
use std::sync::Mutex;

/// Every user kernel loaded in this process: its device and function, by id (the index).
static FUNCTIONS: Mutex<Vec<(usize, RawFunction)>> = Mutex::new(Vec::new());

impl CudaDriver {
    /// [`Driver::user_module_load`](crate::driver::Driver::user_module_load).
    pub(super) fn load_user_kernel(
        &self,
        device: usize,
        source: &str,
        name: &str,
        options: &[String],
    ) -> Result<UserFunctionId> {
        let dev = self.enter(device)?;
        let attr = |a: sys::CUdevice_attribute| -> Result<u32> {
            // SAFETY: `dev.cu` came from `cuDeviceGet`; `a` is a valid attribute.
            let v = unsafe { cu::device::get_attribute(dev.cu, a) };
            Ok(v.map_err(|e| driver_error("cuDeviceGetAttribute", e))?.max(0) as u32)
        };
        use sys::CUdevice_attribute::*;
        let (major, minor) =
            (attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?, attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?);
        let options: Vec<&str> = options.iter().map(String::as_str).collect();
        let program = Program { source, options: &options, op: "compile_kernel" };
        let module = Module::load(&program, major, minor, self.kernel_cache.as_deref())?;
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

    /// [`Driver::user_launch`](crate::driver::Driver::user_launch).
    pub(super) fn launch_user_kernel(
        &self,
        stream: StreamId,
        func: UserFunctionId,
        shape: LaunchShape,
        args: &[UserArg],
    ) -> Result<()> {
        let s = self.stream(stream, "launch")?;
        let (device, function) = lock(&FUNCTIONS).get(func.0 as usize).copied().ok_or_else(|| Error::Internal {
            op: "launch",
            reason: format!("user kernel {} was never loaded", func.0),
        })?;
        if device != s.device {
            return Err(Error::Unsupported {
                op: "launch",
                driver: DRIVER,
                reason: format!("a kernel loaded for cuda:{device} cannot run on a stream of cuda:{}", s.device),
            });
        }
        self.enter(device)?;
        let mut values: Vec<Vec<u8>> = args
            .iter()
            .map(|a| match a {
                UserArg::Ptr(p) => p.0.to_ne_bytes().to_vec(),
                UserArg::Bytes(b) => b.clone(),
            })
            .collect();
        let mut params: Vec<*mut c_void> = values.iter_mut().map(|v| v.as_mut_ptr().cast::<c_void>()).collect();
        let [gx, gy, gz] = shape.grid;
        let [bx, by, bz] = shape.block;
        // SAFETY:
        // - `enter` made the device's context current; the function was loaded into it (checked above)
        //   and its module is never unloaded; the stream is live and of that context;
        // - each parameter points to a buffer holding the argument's value (live for the call);
        //   `cuLaunchKernel` copies the values before returning. The caller matched the kernel's
        //   signature, as with `torch.cuda._compile_kernel`.
        unsafe { cu::launch_kernel(function.0, (gx, gy, gz), (bx, by, bz), shape.shared_mem, s.raw.0, &mut params) }
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
