//! [`Tensor`]: n-dimensional arrays with PyTorch's CUDA semantics.
//!
//! * **Placement.** A tensor lives on the host ([`Device::Cpu`]) or on one CUDA device.
//!   `Device::Cuda(None)` / `"cuda"` means the current device *when the tensor is made*.
//! * **Where ops run.** An op runs on the device of its tensors, on that device's *current
//!   stream*, whatever the thread's current device is, and its result lives there. Tensors on two
//!   devices are [`Error::DeviceMismatch`] — unless peer access between the two CUDA devices was
//!   enabled ([`crate::cuda::enable_peer_access`]): then the op runs on the first operand's
//!   device and reads the other from peer memory, with a two-way stream barrier. A 0-dim CPU
//!   tensor may be used with CUDA tensors (it is copied over), as in PyTorch.
//! * **Asynchrony.** Device ops are queued; a host read ([`Tensor::to_vec`], [`Tensor::cpu`])
//!   waits for the tensor's data (it is ordered on the device's current stream).
//! * **Memory.** Device storage is a block of the device's caching allocator, taken on the
//!   current stream and given back when the last view drops ([`Tensor::record_stream`] keeps it
//!   from reuse until another stream's work is done). Host storage is pageable, or pinned
//!   ([`Tensor::pin_memory`]) from the caching host allocator.
//! * **Non-blocking copies.** `to(device, true)` and `copy_(src, true)` between pinned host memory
//!   and a device are queued on the device's current stream and return at once; a host read or
//!   write of the pinned tensor waits for the copy, so no program sees a half-copied buffer.
//! * **Views.** `reshape`, `transpose`, `narrow`, `expand`, … share storage: clones and views
//!   alias like PyTorch tensors, and in-place ops (`add_`, `fill_`, `copy_`) write through every
//!   view of the storage (they take `&self` for that reason).
//! * **Errors.** Every op returns [`Result`]; the `std::ops` operators on `&Tensor` have
//!   `Output = Result<Tensor>` (`(&a + &b)?`), so no bad input can panic.
//! * **Signatures that compose.** Every shape argument is one [`IntoShape`]: `&[usize]` (so
//!   `x.reshape(y.shape())`), arrays, `Vec`s, and signed forms with PyTorch's `-1` where PyTorch
//!   allows it (`reshape`/`view`: one inferred dim; `expand`: keep a size) — elsewhere a negative
//!   size is [`Error::InvalidShape`] naming the shape. `slice` takes Rust ranges ([`SliceRange`]:
//!   `2..5`, `3..`, `..=4`, `..`, negative bounds from the end) and refuses ones out of bounds.
//!   Numbers go on either side of an operator (`2.0 * &t`, `1 - &t`, `&t / x`).
//!
//! Ops compute as PyTorch does: [`result_type`] promotion (dimensioned tensors > 0-dim tensors >
//! Rust scalars), true division, comparisons into `Bool`, integer sums into `I64`. On the CPU
//! and on the simulated GPU the same kernels run ([`crate::kernel`]).

mod copy;
mod create;
mod display;
mod exec;
mod graphed;
mod layout;
mod ops;
mod pinned;
mod random;
mod range;
mod shape;
mod storage;
mod view;

pub use graphed::{make_graphed, GraphedCallable};
pub use ops::operand::{result_type, Number, Operand};
pub use random::{initial_seed, manual_seed};
pub use range::{SliceBounds, SliceRange};
pub use shape::{IntoShape, Shape};
pub(crate) use storage::PoisonHandle;

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use layout::Layout;
use std::fmt;
use std::sync::Arc;
use storage::Storage;

/// An n-dimensional array on the host or a CUDA device (`torch.Tensor`).
///
/// Cloning is cheap and makes another view of the same storage (like PyTorch's aliasing).
///
/// Signatures as a PyTorch user writes them: one shape argument ([`IntoShape`], `-1` where
/// PyTorch allows it), Rust ranges for slices ([`SliceRange`]), numbers on either side of an
/// operator ([`Number`] on the right; `f64`, `i64` on the left), PyTorch's reduction names:
///
/// | PyTorch | cudasem |
/// |---|---|
/// | `t.reshape(2, -1)`, `t.view(y.shape)`, `t.expand(3, -1)` | `t.reshape([2, -1])`, `t.view(y.shape())`, `t.expand([3, -1])` |
/// | `t[:, 2:5]`, `t[-3:]`, `t[::2]` | `t.slice(1, 2..5)`, `t.slice(0, -3..)`, `t.slice_step(0, .., 2)` |
/// | `t.narrow(dim, start, length)` | `t.narrow(dim, start, length)` |
/// | `torch.where(cond, x, y)` | `Tensor::where_cond(&cond, &x, &y)` (no `_`: it is not in place) |
/// | `t.amax(dims, keepdim)`, `t.amin(…)` | `t.amax(&dims, keepdim)`, `t.amin(…)` (values only) |
/// | `values, indices = t.max(dim, keepdim)`, `t.min(…)` | `let (values, indices) = t.max(dim, keepdim)?;` |
/// | `t.max()`, `t.min()`, `t.sum()`, `t.mean()` | `t.max_all()`, `t.min_all()`, `t.sum_all()`, `t.mean_all()` |
/// | `t.argmax(dim, keepdim)` | `t.argmax(Some(dim), keepdim)` (`None`: of the flattened tensor) |
/// | `2 * t`, `1 - t`, `t / 0` | `(2 * &t)?`, `(1 - &t)?`, `(&t / 0)?` (true division: `inf`, NaN for `0 / 0`) |
///
/// ```
/// use cudasem::{DType, Device, Tensor};
/// # fn main() -> cudasem::Result<()> {
/// let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], [2, 2], Device::Cpu)?;
/// let b = Tensor::ones([2], DType::F32, Device::Cpu)?;
/// let c = (&a + &b)?; // broadcasts [2] over [2, 2]
/// assert_eq!(c.to_vec::<f32>()?, [2.0, 3.0, 4.0, 5.0]);
/// assert_eq!(a.matmul(&a)?.to_vec::<f32>()?, [7.0, 10.0, 15.0, 22.0]);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Tensor {
    storage: Arc<Storage>,
    layout: Layout,
    dtype: DType,
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor(shape={:?}, dtype={}, device={}", self.shape(), self.dtype, self.device())?;
        if !self.is_contiguous() {
            write!(f, ", stride={:?}", self.stride())?;
        }
        f.write_str(")")
    }
}

impl Tensor {
    fn from_parts(storage: Arc<Storage>, layout: Layout, dtype: DType) -> Tensor {
        Tensor { storage, layout, dtype }
    }

    /// Another view of the same storage with `layout`.
    fn with_layout(&self, layout: Layout) -> Tensor {
        Tensor { storage: self.storage.clone(), layout, dtype: self.dtype }
    }

    /// The size of every dimension (`t.shape`).
    pub fn shape(&self) -> &[usize] {
        &self.layout.shape
    }

    /// The size of dimension `dim` (negative counts from the end).
    pub fn size(&self, dim: isize) -> Result<usize> {
        if self.dim() == 0 {
            return Err(Error::InvalidDim { op: "size", dim: dim as i64, ndim: 0 });
        }
        Ok(self.layout.shape[layout::normalize_dim("size", dim, self.dim())?])
    }

    /// The step of every dimension, in elements (`t.stride()`).
    pub fn stride(&self) -> &[usize] {
        &self.layout.strides
    }

    /// Elements from the start of the storage to the first element (`t.storage_offset()`).
    pub fn storage_offset(&self) -> usize {
        self.layout.offset
    }

    /// The number of dimensions (`t.dim()`).
    pub fn dim(&self) -> usize {
        self.layout.ndim()
    }

    /// The number of elements (`t.numel()`).
    pub fn numel(&self) -> usize {
        self.layout.numel()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Bytes per element.
    pub fn element_size(&self) -> usize {
        self.dtype.size()
    }

    /// Where the tensor lives: `Device::Cpu` or `Device::Cuda(Some(index))`.
    pub fn device(&self) -> Device {
        self.storage.device()
    }

    /// Whether the tensor lives on a CUDA device.
    pub fn is_cuda(&self) -> bool {
        self.device().is_cuda()
    }

    /// Whether the elements are dense and row-major (`t.is_contiguous()`).
    pub fn is_contiguous(&self) -> bool {
        self.layout.is_contiguous()
    }

    /// The address of the first element: a device address for CUDA tensors, the host address
    /// for CPU tensors (`t.data_ptr()`).
    pub fn data_ptr(&self) -> u64 {
        self.storage.ptr().0 + (self.layout.offset * self.dtype.size()) as u64
    }

    /// Whether the two tensors are views of the same storage.
    pub fn shares_storage(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.storage, &other.storage)
    }
}
