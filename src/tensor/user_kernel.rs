//! Your own CUDA kernels on cudasem's streams (`torch.cuda._compile_kernel`):
//! [`compile_kernel`] compiles CUDA C with NVRTC (the CUDA driver's one NVRTC path and its
//! caches) and [`Kernel::launch`] queues it on the current stream of its tensors' device, under
//! the rules of the runtime's own ops: every tensor on the stream's device (or a peer it may
//! access), CUDA tensors only, launch shape within the device limits, and the launch goes through
//! the runtime's one door, so a CUDA graph capture keeps its tensors alive and replays it.
//!
//! The simulated machine cannot run CUDA C: there a kernel runs its *host twin*
//! ([`Kernel::with_host_twin`]), a Rust function that computes the same thing over the
//! arguments' bytes, on the stream's worker, in stream order (and at each replay of a graph that
//! captured it). On the CUDA driver the twin is not used.

use super::Tensor;
use crate::device::Device;
use crate::driver::comm::{DeviceBytes, HostKernel};
use crate::driver::{DevicePtr, LaunchShape, UserArg, UserFunctionId};
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::runtime::{current_device, current_of, driver_name, is_peer_access_enabled, Operand, ReadOnly, Stream};
use std::sync::{Arc, Mutex};

/// The most threads in one block, and the most in z.
const MAX_BLOCK_THREADS: u64 = 1024;
const MAX_BLOCK_Z: u32 = 64;
/// The most blocks in y and z, and in x.
const MAX_GRID_YZ: u32 = 65535;
const MAX_GRID_X: u32 = i32::MAX as u32;
/// The most dynamic shared memory per block without opting in (48 KiB).
const MAX_SHARED_MEM: usize = 48 << 10;

/// Grid or block dimensions (`dim3`): from a `u32` (x), or a tuple of 2 or 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dim3 {
    /// x.
    pub x: u32,
    /// y.
    pub y: u32,
    /// z.
    pub z: u32,
}

impl From<u32> for Dim3 {
    fn from(x: u32) -> Dim3 {
        Dim3 { x, y: 1, z: 1 }
    }
}

impl From<(u32, u32)> for Dim3 {
    fn from((x, y): (u32, u32)) -> Dim3 {
        Dim3 { x, y, z: 1 }
    }
}

impl From<(u32, u32, u32)> for Dim3 {
    fn from((x, y, z): (u32, u32, u32)) -> Dim3 {
        Dim3 { x, y, z }
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A type a kernel takes by value: `f32`, `f64`, `i32`, `i64`, `u32`, `u64`. Sealed.
pub trait KernelScalar: Copy + Send + Sync + sealed::Sealed + 'static {
    /// The C type's name (`float`, `int`, …), for errors.
    const NAME: &'static str;
    /// The value's native-endian bytes.
    fn to_bytes(self) -> Vec<u8>;
    /// The value from exactly its size in native-endian bytes.
    fn from_bytes(bytes: &[u8]) -> Option<Self>;
}

macro_rules! kernel_scalar {
    ($($t:ty => $name:literal),*) => {$(
        impl sealed::Sealed for $t {}
        impl KernelScalar for $t {
            const NAME: &'static str = $name;
            fn to_bytes(self) -> Vec<u8> {
                self.to_ne_bytes().to_vec()
            }
            fn from_bytes(bytes: &[u8]) -> Option<Self> {
                Some(<$t>::from_ne_bytes(bytes.try_into().ok()?))
            }
        }
        impl From<$t> for KernelArg<'_> {
            fn from(v: $t) -> Self {
                KernelArg(Arg::Scalar { ty: <$t as KernelScalar>::NAME, bytes: v.to_bytes() })
            }
        }
    )*};
}

kernel_scalar!(f32 => "float", f64 => "double", i32 => "int", i64 => "long long", u32 => "unsigned int",
    u64 => "unsigned long long");

/// How a kernel uses a tensor argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
    ReadWrite,
}

#[derive(Debug, Clone)]
enum Arg<'a> {
    Tensor(&'a Tensor, Access),
    Scalar { ty: &'static str, bytes: Vec<u8> },
}

/// One argument of [`Kernel::launch`]: a CUDA tensor (passed as its `data_ptr()`, a `T*`) that
/// the kernel reads, writes or both, or a scalar by value (`KernelArg::from(2.0f32)`).
#[derive(Debug, Clone)]
pub struct KernelArg<'a>(Arg<'a>);

impl<'a> KernelArg<'a> {
    /// A tensor the kernel only reads.
    pub fn read(t: &'a Tensor) -> KernelArg<'a> {
        KernelArg(Arg::Tensor(t, Access::Read))
    }
    /// A tensor the kernel writes (a host twin sees its current contents too).
    pub fn write(t: &'a Tensor) -> KernelArg<'a> {
        KernelArg(Arg::Tensor(t, Access::Write))
    }
    /// A tensor the kernel reads and writes.
    pub fn read_write(t: &'a Tensor) -> KernelArg<'a> {
        KernelArg(Arg::Tensor(t, Access::ReadWrite))
    }
}

/// An argument as a host twin sees it.
#[derive(Debug)]
enum HostArg {
    Tensor { bytes: Vec<u8>, dtype: DType, access: Access },
    Scalar { ty: &'static str, bytes: Vec<u8> },
}

/// One launch as a host twin sees it: the shape, and the arguments in order, tensors as their
/// bytes (read from device memory before the twin runs; those given as `write` or `read_write`
/// written back after it returns `Ok`) and scalars by value.
#[derive(Debug)]
pub struct HostLaunch {
    grid: Dim3,
    block: Dim3,
    shared_mem: usize,
    args: Vec<HostArg>,
}

impl HostLaunch {
    /// The grid's dimensions.
    pub fn grid(&self) -> Dim3 {
        self.grid
    }
    /// The block's dimensions.
    pub fn block(&self) -> Dim3 {
        self.block
    }
    /// Dynamic shared memory bytes per block.
    pub fn shared_mem(&self) -> usize {
        self.shared_mem
    }
    /// The number of arguments.
    pub fn num_args(&self) -> usize {
        self.args.len()
    }

    fn tensor(&self, i: usize) -> Result<(&[u8], DType)> {
        match self.args.get(i) {
            Some(HostArg::Tensor { bytes, dtype, .. }) => Ok((bytes, *dtype)),
            _ => Err(twin_arg(i, "is not a tensor")),
        }
    }

    /// Tensor argument `i`'s bytes.
    pub fn bytes(&self, i: usize) -> Result<&[u8]> {
        self.tensor(i).map(|(b, _)| b)
    }

    /// Tensor argument `i`'s bytes, to change; an error for a tensor given as `read`.
    pub fn bytes_mut(&mut self, i: usize) -> Result<&mut [u8]> {
        match self.args.get_mut(i) {
            Some(HostArg::Tensor { access: Access::Read, .. }) => {
                Err(twin_arg(i, "was given as KernelArg::read and cannot be written"))
            }
            Some(HostArg::Tensor { bytes, .. }) => Ok(bytes),
            _ => Err(twin_arg(i, "is not a tensor")),
        }
    }

    /// Tensor argument `i`'s elements; an error when its dtype is not `T`'s.
    pub fn read<T: Element>(&self, i: usize) -> Result<Vec<T>> {
        let (bytes, dtype) = self.tensor(i)?;
        if dtype != T::DTYPE {
            return Err(twin_arg(i, &format!("is a {dtype:?} tensor, read as {:?}", T::DTYPE)));
        }
        bytes
            .chunks_exact(dtype.size())
            .map(|c| T::read_bytes(c).ok_or_else(|| twin_arg(i, "holds a bad element")))
            .collect()
    }

    /// Writes `values` as tensor argument `i`'s elements (as many as it has, of its dtype).
    pub fn write<T: Element>(&mut self, i: usize, values: &[T]) -> Result<()> {
        let dtype = self.tensor(i)?.1;
        let out = self.bytes_mut(i)?;
        if dtype != T::DTYPE || out.len() != values.len() * dtype.size() {
            return Err(twin_arg(
                i,
                &format!(
                    "is a {dtype:?} tensor of {} bytes, written as {} {:?} elements",
                    out.len(),
                    values.len(),
                    T::DTYPE
                ),
            ));
        }
        let mut bytes = Vec::with_capacity(out.len());
        values.iter().for_each(|v| v.write_bytes(&mut bytes));
        out.copy_from_slice(&bytes);
        Ok(())
    }

    /// Scalar argument `i`; an error when it was not given as a `T`.
    pub fn scalar<T: KernelScalar>(&self, i: usize) -> Result<T> {
        match self.args.get(i) {
            Some(HostArg::Scalar { ty, bytes }) if *ty == T::NAME => {
                T::from_bytes(bytes).ok_or_else(|| twin_arg(i, "holds bad bytes"))
            }
            _ => Err(twin_arg(i, &format!("is not a {}", T::NAME))),
        }
    }
}

fn twin_arg(i: usize, what: &str) -> Error {
    Error::InvalidArgument { op: "host twin", reason: format!("kernel argument {i} {what}") }
}

/// A kernel's host twin (see [`Kernel::with_host_twin`]).
type Twin = Arc<dyn Fn(&mut HostLaunch) -> Result<()> + Send + Sync + 'static>;

/// A kernel from [`compile_kernel`], launched with [`Kernel::launch`] (`torch.cuda._compile_kernel`'s
/// result). Cheap to clone; the compiled module stays loaded for the process's life.
#[derive(Clone)]
pub struct Kernel {
    source: Arc<str>,
    name: String,
    options: Vec<String>,
    /// The function loaded for each device so far (the CUDA driver).
    loaded: Arc<Mutex<Vec<(usize, UserFunctionId)>>>,
    twin: Option<Twin>,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel").field("name", &self.name).field("host_twin", &self.twin.is_some()).finish()
    }
}

/// Compiles the CUDA C `source` and returns its kernel `name` (an `extern "C" __global__`
/// function), with NVRTC `options` such as `-lineinfo` (`torch.cuda._compile_kernel`).
///
/// On the CUDA driver the source is compiled (through the crate's NVRTC path, with its process
/// and disk caches) and loaded into the current device now: a compile error is
/// [`Error::Driver`] whose message is NVRTC's log. On the simulated machine only the name is
/// checked (non-empty, an identifier in the source); give the kernel a host twin with
/// [`Kernel::with_host_twin`] to launch it there.
///
/// ```
/// use cudasem::cuda::{compile_kernel, KernelArg};
/// use cudasem::Tensor;
/// # fn main() -> cudasem::Result<()> {
/// let src = r#"extern "C" __global__ void scale(float* x, float a, int n) {
///     int i = blockIdx.x * blockDim.x + threadIdx.x;
///     if (i < n) x[i] *= a;
/// }"#;
/// let kernel = compile_kernel(src, "scale", &[])?.with_host_twin(|l| {
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
pub fn compile_kernel(source: &str, name: &str, options: &[&str]) -> Result<Kernel> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    if name.is_empty() || !name.chars().all(ident) {
        return Err(Error::InvalidArgument {
            op: "compile_kernel",
            reason: format!("kernel name {name:?} is not a C identifier"),
        });
    }
    if !source.split(|c: char| !ident(c)).any(|w| w == name) {
        return Err(Error::InvalidArgument {
            op: "compile_kernel",
            reason: format!("the source defines no kernel named {name:?}"),
        });
    }
    let kernel = Kernel {
        source: source.into(),
        name: name.to_owned(),
        options: options.iter().map(|o| o.to_string()).collect(),
        loaded: Arc::default(),
        twin: None,
    };
    if driver_name() == "cuda" {
        kernel.function(current_device()?)?;
    }
    Ok(kernel)
}

impl Kernel {
    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.name
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
    fn function(&self, device: usize) -> Result<UserFunctionId> {
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&(_, f)) = loaded.iter().find(|(d, _)| *d == device) {
            return Ok(f);
        }
        let f = crate::runtime::user_module_load(device, &self.source, &self.name, &self.options)?;
        loaded.push((device, f));
        Ok(f)
    }

    /// Queues the kernel on the current stream of its tensors' device (of the first tensor
    /// argument; the current device when there is none): `grid` blocks of `block` threads with
    /// `shared_mem` bytes of dynamic shared memory, with `args` in the kernel's parameter order.
    ///
    /// Errors: a launch shape beyond the device limits (more than 1024 threads a block, block z
    /// over 64, grid y or z over 65535, grid x over 2³¹−1, a zero dimension, over 48 KiB of
    /// shared memory) is [`Error::InvalidArgument`]; a tensor on another device (without peer
    /// access) or on the CPU (pinned host tensors included, in this version) is
    /// [`Error::DeviceMismatch`]; a non-contiguous tensor is [`Error::InvalidArgument`]; on the
    /// simulated machine, a kernel without a host twin is [`Error::Unsupported`].
    pub fn launch(
        &self,
        grid: impl Into<Dim3>,
        block: impl Into<Dim3>,
        shared_mem: usize,
        args: &[KernelArg],
    ) -> Result<()> {
        let first = args.iter().find_map(|a| match a.0 {
            Arg::Tensor(t, _) => Some(t.device()),
            Arg::Scalar { .. } => None,
        });
        let device = match first {
            Some(Device::Cuda(Some(d))) => d,
            Some(other) => {
                return Err(Error::DeviceMismatch { op: "launch", lhs: Device::cuda(current_device()?), rhs: other })
            }
            None => current_device()?,
        };
        self.launch_on(&current_of(device)?, grid, block, shared_mem, args)
    }

    /// [`Kernel::launch`] on `stream`, whose device every tensor must be on (or a peer it may
    /// access).
    pub fn launch_on(
        &self,
        stream: &Stream,
        grid: impl Into<Dim3>,
        block: impl Into<Dim3>,
        shared_mem: usize,
        args: &[KernelArg],
    ) -> Result<()> {
        let shape = check_shape(grid.into(), block.into(), shared_mem)?;
        let device = stream.device();
        let (mut written, mut read) = (Vec::new(), Vec::new());
        for a in args {
            if let Arg::Tensor(t, access) = a.0 {
                check_tensor(t, device)?;
                match access {
                    Access::Read => read.push(ReadOnly(t)),
                    Access::Write | Access::ReadWrite => written.push(t),
                }
            }
        }
        // The door's operands, with the reads and writes the launch declares (the stream
        // sanitizer checks them).
        let uses: Vec<&dyn Operand> =
            written.iter().map(|t| *t as &dyn Operand).chain(read.iter().map(|r| r as &dyn Operand)).collect();
        if driver_name() == "cuda" {
            let args: Vec<UserArg> = args
                .iter()
                .map(|a| match &a.0 {
                    Arg::Tensor(t, _) => UserArg::Ptr(DevicePtr(t.data_ptr())),
                    Arg::Scalar { bytes, .. } => UserArg::Bytes(bytes.clone()),
                })
                .collect();
            return stream.user_launch(self.function(device)?, shape, &args, &uses);
        }
        let Some(twin) = self.twin.clone() else {
            return Err(Error::Unsupported {
                op: "launch",
                driver: "sim",
                reason: format!(
                    "kernel {:?} has no host twin: the simulated machine cannot run CUDA C; give it one with \
                     Kernel::with_host_twin, or run with CUDASEM_DRIVER=cuda",
                    self.name
                ),
            });
        };
        stream.host_kernel(host_kernel(twin, shape, args), &uses)
    }
}

/// The launch shape, checked against the device limits.
fn check_shape(grid: Dim3, block: Dim3, shared_mem: usize) -> Result<LaunchShape> {
    let threads = block.x as u64 * block.y as u64 * block.z as u64;
    let bad = if [grid.x, grid.y, grid.z, block.x, block.y, block.z].contains(&0) {
        Some("every grid and block dimension must be at least 1".to_owned())
    } else if threads > MAX_BLOCK_THREADS {
        Some(format!("a block of {threads} threads exceeds the limit of {MAX_BLOCK_THREADS} threads per block"))
    } else if block.z > MAX_BLOCK_Z {
        Some(format!("block z of {} exceeds the limit of {MAX_BLOCK_Z}", block.z))
    } else if grid.x > MAX_GRID_X || grid.y > MAX_GRID_YZ || grid.z > MAX_GRID_YZ {
        Some(format!("grid {grid:?} exceeds the limits (x ≤ 2³¹−1, y and z ≤ {MAX_GRID_YZ})"))
    } else if shared_mem > MAX_SHARED_MEM {
        Some(format!("{shared_mem} bytes of shared memory exceed the limit of {MAX_SHARED_MEM} bytes per block"))
    } else {
        None
    };
    match bad {
        Some(reason) => Err(Error::InvalidArgument { op: "launch", reason }),
        None => Ok(LaunchShape {
            grid: [grid.x, grid.y, grid.z],
            block: [block.x, block.y, block.z],
            shared_mem: shared_mem as u32,
        }),
    }
}

/// A tensor argument must be a contiguous CUDA tensor of `device` or of a peer it may access.
fn check_tensor(t: &Tensor, device: usize) -> Result<()> {
    let ok = match t.device() {
        Device::Cuda(Some(d)) => d == device || is_peer_access_enabled(device, d)?,
        _ => false,
    };
    if !ok {
        return Err(Error::DeviceMismatch { op: "launch", lhs: Device::cuda(device), rhs: t.device() });
    }
    if !t.is_contiguous() {
        return Err(Error::InvalidArgument {
            op: "launch",
            reason: "a kernel's tensor arguments must be contiguous (call .contiguous() first)".into(),
        });
    }
    Ok(())
}

/// What a tensor argument is to the worker: its address, byte length, dtype and access.
type TensorSpan = (DevicePtr, usize, DType, Access);

/// The host kernel that runs `twin` over the arguments' device memory.
fn host_kernel(twin: Twin, shape: LaunchShape, args: &[KernelArg]) -> HostKernel {
    let spans: Vec<std::result::Result<TensorSpan, (&'static str, Vec<u8>)>> = args
        .iter()
        .map(|a| match &a.0 {
            Arg::Tensor(t, access) => Ok((DevicePtr(t.data_ptr()), t.numel() * t.element_size(), t.dtype(), *access)),
            Arg::Scalar { ty, bytes } => Err((*ty, bytes.clone())),
        })
        .collect();
    let [gx, gy, gz] = shape.grid;
    let [bx, by, bz] = shape.block;
    Arc::new(move |mem: &dyn DeviceBytes| {
        let mut launch = HostLaunch {
            grid: Dim3 { x: gx, y: gy, z: gz },
            block: Dim3 { x: bx, y: by, z: bz },
            shared_mem: shape.shared_mem as usize,
            args: Vec::with_capacity(spans.len()),
        };
        for s in &spans {
            launch.args.push(match s {
                Ok((at, len, dtype, access)) => {
                    let mut bytes = vec![0u8; *len];
                    mem.read(*at, &mut bytes)?;
                    HostArg::Tensor { bytes, dtype: *dtype, access: *access }
                }
                Err((ty, bytes)) => HostArg::Scalar { ty, bytes: bytes.clone() },
            });
        }
        twin(&mut launch)?;
        for (s, a) in spans.iter().zip(&launch.args) {
            if let (Ok((at, _, _, access)), HostArg::Tensor { bytes, .. }) = (s, a) {
                if *access != Access::Read {
                    mem.write(*at, bytes)?;
                }
            }
        }
        Ok(())
    })
}
