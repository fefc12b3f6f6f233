//! The [`Tensor`] handle itself: a shared [`Storage`], a [`Layout`] over it and a [`DType`], with
//! the accessors every op uses. The ops live in the sibling files, each an `impl Tensor` block.

use super::layout::{self, Layout};
use super::storage::{PoisonHandle, Storage};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use std::fmt;
use std::sync::Arc;

/// An n-dimensional array on the host or a CUDA device (`torch.Tensor`).
///
/// Cloning is cheap and makes another view of the same storage (like PyTorch's aliasing).
///
/// Signatures as a PyTorch user writes them: one shape argument ([`IntoShape`](crate::IntoShape), `-1` where
/// PyTorch allows it), Rust ranges for slices ([`SliceRange`](crate::SliceRange)), numbers on either side of an
/// operator ([`Number`](crate::Number) on the right; `f64`, `i64` on the left), PyTorch's reduction names:
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
    pub(super) storage: Arc<Storage>,
    pub(super) layout: Layout,
    pub(super) dtype: DType,
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
    pub(super) fn from_parts(storage: Arc<Storage>, layout: Layout, dtype: DType) -> Tensor {
        Tensor { storage, layout, dtype }
    }

    /// Another view of the same storage with `layout`.
    pub(super) fn with_layout(&self, layout: Layout) -> Tensor {
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

    /// A handle that can poison this tensor's storage (for the collectives that write it).
    pub(crate) fn poison_handle(&self) -> PoisonHandle {
        PoisonHandle(Arc::downgrade(&self.storage))
    }
}
