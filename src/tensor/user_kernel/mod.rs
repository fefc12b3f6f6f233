//! Your own CUDA kernels on cudasem's streams (`torch.cuda._compile_kernel`):
//! [`compile_kernel`] compiles CUDA C with NVRTC (the CUDA driver's one NVRTC path and its
//! caches), [`Kernel::from_ptx`] and [`Kernel::from_cubin`] load images built elsewhere, and
//! [`Kernel::launch`] queues the kernel on the current stream of its tensors' device, under the
//! rules of the runtime's own ops: arguments checked against the kernel's parameters where they
//! can be read (`signature.rs`), every tensor on the stream's device (or a peer it may access)
//! or in pinned host memory, the launch shape within the device limits, the stream use recorded
//! on each tensor's memory, and the launch through the runtime's one door, so a CUDA graph
//! capture keeps its tensors alive and replays it.
//!
//! The simulated machine cannot run CUDA code: there a kernel runs its *host twin*
//! ([`Kernel::with_host_twin`]), a Rust function that computes the same thing over the
//! arguments' bytes, on the stream's worker, in stream order (and at each replay of a graph that
//! captured it). On the CUDA driver the twin is not used.

mod args;
mod checks;
mod signature;
mod twin;

pub use args::{Dim3, KernelArg, KernelScalar};
pub use twin::HostLaunch;

use crate::device::Device;
use crate::driver::{DevicePtr, LaunchShape, ScalarBytes, UserArg, UserFunctionId, UserImage};
use crate::error::{Error, Result};
use crate::runtime::{current_device, current_of, device_count, driver_name, Stream};
use args::{Access, Arg};
use checks::{check_cubin, check_name, check_shape, check_tensor, Place};
use signature::Signature;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use twin::Twin;

/// Arguments converted without a heap allocation (more take one).
const INLINE_ARGS: usize = 16;

/// How [`compile_kernel`] compiles (`torch.cuda._compile_kernel`'s keyword arguments).
/// `CompileOptions::default()` compiles for the current device with no extra options.
///
/// ```
/// use cudasem::cuda::CompileOptions;
/// let opts = CompileOptions::default()
///     .header_code("#define SCALE 2.0f")
///     .nvcc_option("-lineinfo")
///     .cuda_include_dir("/opt/my/include");
/// assert_eq!(opts.nvcc_options, ["-lineinfo"]);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompileOptions {
    /// The compute capability `(major, minor)` to compile for instead of the current device's
    /// (`compute_capability="80"`); a device of another architecture then refuses to load it.
    pub compute_capability: Option<(u32, u32)>,
    /// Code put before the source (`header_code`: includes, macros, helper functions).
    pub header_code: String,
    /// Directories searched for `#include`s (`cuda_include_dirs`, NVRTC's `-I`).
    pub cuda_include_dirs: Vec<PathBuf>,
    /// Further NVRTC options (`nvcc_options`: `-lineinfo`, `--use_fast_math`, `-DNAME=1`, …).
    pub nvcc_options: Vec<String>,
}

impl CompileOptions {
    /// Compiles for compute capability `major.minor`.
    pub fn compute_capability(mut self, major: u32, minor: u32) -> CompileOptions {
        self.compute_capability = Some((major, minor));
        self
    }
    /// Puts `code` before the source.
    pub fn header_code(mut self, code: impl Into<String>) -> CompileOptions {
        self.header_code = code.into();
        self
    }
    /// Adds an include directory.
    pub fn cuda_include_dir(mut self, dir: impl Into<PathBuf>) -> CompileOptions {
        self.cuda_include_dirs.push(dir.into());
        self
    }
    /// Adds an NVRTC option.
    pub fn nvcc_option(mut self, option: impl Into<String>) -> CompileOptions {
        self.nvcc_options.push(option.into());
        self
    }
}

/// What a kernel is loaded from.
#[derive(Debug)]
enum Image {
    Source { code: String, options: Vec<String>, arch: Option<(u32, u32)> },
    Ptx(String),
    Cubin(Vec<u8>),
}

impl Image {
    fn as_user(&self) -> UserImage<'_> {
        match self {
            Image::Source { code, options, arch } => UserImage::Source { source: code, options, arch: *arch },
            Image::Ptx(p) => UserImage::Ptx(p),
            Image::Cubin(b) => UserImage::Cubin(b),
        }
    }
}

/// A kernel and what every launch of it needs.
#[derive(Debug)]
struct Inner {
    name: String,
    image: Image,
    /// Its parameters, where they could be read.
    signature: Option<Signature>,
    /// The function loaded for each device so far (the CUDA driver).
    loaded: Vec<OnceLock<UserFunctionId>>,
    /// Held while a device's function is loaded (once per device).
    loading: Mutex<()>,
    /// Whether the CUDA driver runs it (else the host twin).
    on_cuda: bool,
}

/// A kernel from [`compile_kernel`], [`Kernel::from_ptx`] or [`Kernel::from_cubin`], launched
/// with [`Kernel::launch`] (`torch.cuda._compile_kernel`'s result). Cheap to clone; its module
/// stays loaded for the process's life.
#[derive(Clone)]
pub struct Kernel {
    inner: Arc<Inner>,
    twin: Option<Twin>,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel")
            .field("name", &self.inner.name)
            .field("parameters_known", &self.inner.signature.is_some())
            .field("host_twin", &self.twin.is_some())
            .finish()
    }
}

/// Compiles the CUDA C `source` and returns its kernel `name` (an `extern "C" __global__`
/// function), as `torch.cuda._compile_kernel(source, name, compute_capability, header_code,
/// cuda_include_dirs, nvcc_options)` does.
///
/// On the CUDA driver the source is compiled (through the crate's NVRTC path, with its process
/// and disk caches) and loaded into the current device now: a compile error is
/// [`Error::Driver`] whose message is NVRTC's log. On the simulated machine only the name is
/// checked (a C identifier that the source mentions); give the kernel a host twin with
/// [`Kernel::with_host_twin`] to launch it there. On both, the kernel's `__global__`
/// declaration is read (where no template or macro makes it uncertain), so launches with the
/// wrong number or kinds of arguments are refused the same way on every driver.
///
/// ```
/// use cudasem::cuda::{compile_kernel, CompileOptions, KernelArg};
/// use cudasem::Tensor;
/// # fn main() -> cudasem::Result<()> {
/// let src = r#"extern "C" __global__ void scale(float* x, float a, int n) {
///     int i = blockIdx.x * blockDim.x + threadIdx.x;
///     if (i < n) x[i] *= a;
/// }"#;
/// let kernel = compile_kernel(src, "scale", CompileOptions::default())?.with_host_twin(|l| {
///     let (a, n) = (l.scalar::<f32>(1)?, l.scalar::<i32>(2)? as usize);
///     let x: Vec<f32> = l.read(0)?.into_iter().take(n).map(|v: f32| v * a).collect();
///     l.write(0, &x)
/// });
/// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], [3], "cuda")?;
/// kernel.launch(1u32, 32u32, 0, &[KernelArg::read_write(&x), 2.0f32.into(), 3i32.into()])?;
/// assert_eq!(x.to_vec::<f32>()?, [2.0, 4.0, 6.0]);
/// # Ok(())
/// # }
/// ```
pub fn compile_kernel(source: &str, name: &str, options: CompileOptions) -> Result<Kernel> {
    check_name("compile_kernel", name)?;
    let CompileOptions { compute_capability, header_code, cuda_include_dirs, nvcc_options } = options;
    let code = if header_code.is_empty() { source.to_owned() } else { format!("{header_code}\n{source}") };
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    if !code.split(|c: char| !ident(c)).any(|w| w == name) {
        return Err(Error::InvalidArgument {
            op: "compile_kernel",
            reason: format!("the source defines no kernel named {name:?}"),
        });
    }
    let signature = signature::from_cuda_c(&header_code, source, name);
    let mut flags: Vec<String> = cuda_include_dirs.iter().map(|d| format!("-I{}", d.display())).collect();
    flags.extend(nvcc_options);
    Kernel::load(name, Image::Source { code, options: flags, arch: compute_capability }, signature)
}

impl Kernel {
    /// The kernel `name` of the PTX text `ptx` (`cuModuleLoadData`; the CUDA driver compiles it
    /// for the device). Its `.entry` parameter list is read, so launches are checked (count,
    /// sizes, floating point against integer) on every driver. A PTX without an `.entry name`
    /// is [`Error::InvalidArgument`]; PTX the driver refuses is its [`Error::Driver`]. On the
    /// simulated machine give it a host twin.
    pub fn from_ptx(ptx: &str, name: &str) -> Result<Kernel> {
        check_name("Kernel::from_ptx", name)?;
        if ptx.contains('\0') {
            return Err(Error::InvalidArgument {
                op: "Kernel::from_ptx",
                reason: "the PTX text holds a NUL byte".into(),
            });
        }
        let Some(signature) = signature::from_ptx(ptx, name) else {
            return Err(Error::InvalidArgument {
                op: "Kernel::from_ptx",
                reason: format!(
                    "the PTX has no `.entry {name}` (kernels are `.entry` functions of their extern \"C\" name)"
                ),
            });
        };
        Kernel::load(name, Image::Ptx(ptx.to_owned()), Some(signature))
    }

    /// The kernel `name` of the cubin (or fatbin) `image`, built for the device's architecture
    /// (`nvcc -cubin`). The image's structure is checked first ([`Error::InvalidArgument`] for
    /// one that is not a whole cubin or fatbin, or a cubin without the name); the CUDA driver
    /// then loads it (its refusal, such as another architecture's cubin, is [`Error::Driver`])
    /// and reports the parameters' sizes (`cuFuncGetParamInfo`, NVIDIA driver 12.4 and newer),
    /// which launches are checked against. On the simulated machine the parameters cannot be
    /// read (only a host twin runs there), so argument counts are not checked there.
    pub fn from_cubin(image: &[u8], name: &str) -> Result<Kernel> {
        check_name("Kernel::from_cubin", name)?;
        check_cubin(image, name)?;
        Kernel::load(name, Image::Cubin(image.to_vec()), None)
    }

    /// The kernel, loaded now into the current device on the CUDA driver.
    fn load(name: &str, image: Image, signature: Option<Signature>) -> Result<Kernel> {
        let on_cuda = driver_name() == "cuda";
        let mut inner = Inner {
            name: name.to_owned(),
            image,
            signature,
            loaded: (0..device_count()).map(|_| OnceLock::new()).collect(),
            loading: Mutex::new(()),
            on_cuda,
        };
        if on_cuda {
            let device = current_device()?;
            let f = crate::runtime::user_module_load(device, inner.image.as_user(), name)?;
            if let Some(cell) = inner.loaded.get(device) {
                let _ = cell.set(f);
            }
            if inner.signature.is_none() && matches!(inner.image, Image::Cubin(_)) {
                inner.signature = crate::runtime::user_param_sizes(f)?.map(|s| signature::from_sizes(&s));
            }
        }
        Ok(Kernel { inner: Arc::new(inner), twin: None })
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The number of parameters, where it could be read (from the CUDA C declaration, the PTX
    /// `.entry`, or the CUDA driver for a cubin); `None` where launches are not checked.
    pub fn num_params(&self) -> Option<usize> {
        self.inner.signature.as_ref().map(|s| s.params.len())
    }

    /// This kernel with a host twin: what the simulated machine runs for it, a function over
    /// the launch's [`HostLaunch`] that computes what the CUDA kernel computes (the CUDA driver
    /// ignores it). An error it returns is the device's asynchronous error, as a kernel fault is:
    /// the next synchronization point reports it.
    pub fn with_host_twin(mut self, twin: impl Fn(&mut HostLaunch) -> Result<()> + Send + Sync + 'static) -> Kernel {
        self.twin = Some(Arc::new(twin));
        self
    }

    /// The function loaded for `device` (loading it on first use).
    #[inline]
    fn function(&self, device: usize) -> Result<UserFunctionId> {
        let cell = self.inner.loaded.get(device).ok_or(Error::InvalidDevice {
            index: device,
            count: self.inner.loaded.len(),
            driver: driver_name(),
        })?;
        if let Some(&f) = cell.get() {
            return Ok(f);
        }
        let _one = self.inner.loading.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&f) = cell.get() {
            return Ok(f);
        }
        let f = crate::runtime::user_module_load(device, self.inner.image.as_user(), &self.inner.name)?;
        let _ = cell.set(f);
        Ok(f)
    }

    /// Queues the kernel on the current stream of its tensors' device (of the first CUDA tensor
    /// argument; the current device when there is none): `grid` blocks of `block` threads with
    /// `shared_mem` bytes of dynamic shared memory, with `args` in the kernel's parameter order.
    ///
    /// Errors, each before anything is queued: arguments that do not fit the kernel's
    /// parameters (their number; a tensor's dtype or a scalar's type against the CUDA C
    /// declaration, sizes against PTX or a cubin) and a launch shape beyond the device limits
    /// (more than 1024 threads a block, block z over 64, grid y or z over 65535, grid x over
    /// 2³¹−1, a zero dimension, over 48 KiB of shared memory) are [`Error::InvalidArgument`], as
    /// are a CPU tensor in pageable memory and a non-contiguous tensor; a tensor on another
    /// device (without peer access) is [`Error::DeviceMismatch`]; on the simulated machine, a
    /// kernel without a host twin is [`Error::Unsupported`].
    ///
    /// Pinned host tensors are passed as their mapped addresses; host reads and writes of them
    /// wait for the kernel, as for a non-blocking copy, and their block is reused only after it.
    pub fn launch(
        &self,
        grid: impl Into<Dim3>,
        block: impl Into<Dim3>,
        shared_mem: usize,
        args: &[KernelArg],
    ) -> Result<()> {
        let first = args.iter().find_map(|a| match a.0 {
            Arg::Tensor(t, _) => match t.device() {
                Device::Cuda(Some(d)) => Some(d),
                _ => None,
            },
            Arg::Scalar(_) => None,
        });
        let device = match first {
            Some(d) => d,
            None => current_device()?,
        };
        self.launch_on(&current_of(device)?, grid, block, shared_mem, args)
    }

    /// [`Kernel::launch`] on `stream`, whose device every CUDA tensor must be on (or a peer it
    /// may access). A tensor allocated on another stream of that device is recorded as used on
    /// `stream` (`record_stream`), so its memory is not handed out again before the kernel ran.
    pub fn launch_on(
        &self,
        stream: &Stream,
        grid: impl Into<Dim3>,
        block: impl Into<Dim3>,
        shared_mem: usize,
        args: &[KernelArg],
    ) -> Result<()> {
        let shape = check_shape(grid.into(), block.into(), shared_mem)?;
        if let Some(sig) = &self.inner.signature {
            sig.check(&self.inner.name, args)?;
        }
        let device = stream.device();
        let mut pinned = false;
        for (i, a) in args.iter().enumerate() {
            if let Arg::Tensor(t, _) = a.0 {
                pinned |= check_tensor(i, t, device)? == Place::Pinned;
            }
        }
        if !self.inner.on_cuda && self.twin.is_none() {
            return Err(self.no_twin());
        }
        for a in args {
            if let Arg::Tensor(t, _) = a.0 {
                t.storage.record_use(stream)?;
            }
        }
        if pinned {
            return self.queue_with_pinned(stream, shape, args);
        }
        self.queue(stream, shape, args)
    }

    fn no_twin(&self) -> Error {
        Error::Unsupported {
            op: "launch",
            driver: "sim",
            reason: format!(
                "kernel {:?} has no host twin: the simulated machine cannot run CUDA code; give it one with \
                 Kernel::with_host_twin, or run with CUDASEM_DRIVER=cuda",
                self.inner.name
            ),
        }
    }

    /// Queues the checked launch: the CUDA kernel, or the host twin.
    #[inline]
    fn queue(&self, stream: &Stream, shape: LaunchShape, args: &[KernelArg]) -> Result<()> {
        // The tensor arguments, as the door's operands (reads and writes as declared).
        let tensors = || args.iter().filter(|a| matches!(a.0, Arg::Tensor(..))).collect();
        if self.inner.on_cuda {
            let f = self.function(stream.device())?;
            let user = |a: &KernelArg| match a.0 {
                Arg::Tensor(t, _) => UserArg::Ptr(DevicePtr(t.data_ptr())),
                Arg::Scalar(s) => UserArg::Bytes(ScalarBytes(s.bytes)),
            };
            let mut inline = [UserArg::Ptr(DevicePtr(0)); INLINE_ARGS];
            if args.len() <= INLINE_ARGS {
                for (u, a) in inline.iter_mut().zip(args) {
                    *u = user(a);
                }
                return stream.user_launch(f, shape, &inline[..args.len()], tensors);
            }
            let all: Vec<UserArg> = args.iter().map(user).collect();
            return stream.user_launch(f, shape, &all, tensors);
        }
        let twin = self.twin.clone().ok_or_else(|| self.no_twin())?;
        let uses: Vec<&KernelArg> = tensors();
        stream.host_kernel(twin::host_kernel(twin, shape, args), &uses)
    }

    /// [`Kernel::queue`] under the protocol of each pinned block among the arguments (once per
    /// block, in address order): the launch waits on the device for the copies it races with,
    /// and is tracked as they are.
    fn queue_with_pinned(&self, stream: &Stream, shape: LaunchShape, args: &[KernelArg]) -> Result<()> {
        let mut blocks: Vec<(&crate::runtime::PinnedBlock, bool)> = Vec::new();
        for a in args {
            let Arg::Tensor(t, access) = a.0 else { continue };
            let Some(block) = t.storage.as_host().and_then(|h| h.pinned()) else { continue };
            let writes = access != Access::Read;
            match blocks.iter_mut().find(|(b, _)| std::ptr::eq(*b, block)) {
                Some(entry) => entry.1 |= writes,
                None => blocks.push((block, writes)),
            }
        }
        blocks.sort_by_key(|(b, _)| b.addr());
        let mut launch = Some(|| self.queue(stream, shape, args));
        nest(&blocks, stream, &mut launch)
    }
}

/// Runs `launch` inside [`PinnedBlock::use_on_device`](crate::runtime::PinnedBlock) of each of
/// `blocks`, outermost first.
fn nest(
    blocks: &[(&crate::runtime::PinnedBlock, bool)],
    stream: &Stream,
    launch: &mut Option<impl FnOnce() -> Result<()>>,
) -> Result<()> {
    match blocks.split_first() {
        None => launch.take().map_or(Ok(()), |f| f()),
        Some(((block, writes), rest)) => block.use_on_device(stream, *writes, || nest(rest, stream, launch)),
    }
}
