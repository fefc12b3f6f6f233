//! Tensors over device memory made elsewhere: [`Tensor::from_blob`] (libtorch's
//! `torch::from_blob`), and the checks it shares with DLPack imports (`dlpack.rs`).
//!
//! The memory is a [`ForeignBlock`]: the caching allocator never frees nor reuses it, and its owner
//! (the deleter) is dropped when the last view is gone. Everything else is an ordinary CUDA tensor:
//! every op, view, copy and graph capture takes it as it takes a block of the caching allocator.

use super::core::Tensor;
use super::layout::{self, Layout};
use super::shape::IntoShape;
use super::storage::{ForeignBlock, Owner, Storage};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use std::sync::Arc;

impl Tensor {
    /// A tensor viewing device memory made elsewhere (libtorch's `torch::from_blob`), without a copy.
    ///
    /// `ptr` is the device address of the element at index `[0, 0, …]`; `strides` are in elements
    /// (`None`: dense row-major, as `t.stride()` of a contiguous tensor); `device` is a CUDA device
    /// (`Device::Cuda(None)`: the current one). `owner` is any value that keeps the memory alive:
    /// it is dropped — that is the deleter — on the thread that drops the last tensor viewing the
    /// memory (views, clones, a captured CUDA graph that used it, a DLPack export of it).
    ///
    /// The tensor then works with every op, view, copy and CUDA graph capture; the caching
    /// allocator never frees nor reuses its memory, so [`Tensor::record_stream`] on it only checks
    /// the device.
    ///
    /// Checked here, as typed errors: a CUDA device that exists ([`Error::InvalidDevice`]; host
    /// memory is [`Error::InvalidArgument`]), a non-null `ptr` aligned to the dtype's size, strides
    /// of the shape's length, the extent `1 + Σ (size − 1) · stride` elements and its bytes within
    /// 2^64 ([`Error::InvalidShape`], [`Error::InvalidArgument`]), and that the driver knows the
    /// extent as memory of that device ([`Error::InvalidPointer`]: on CUDA by
    /// `cuPointerGetAttribute`; on the simulated machine the bytes must lie in live simulated
    /// memory of that device, e.g. a range of another tensor's `data_ptr()`). An empty tensor
    /// checks nothing but the device and the shape. On an error `owner` is dropped before return.
    ///
    /// ```
    /// use cudasem::{DType, Device, Tensor};
    /// # fn main() -> cudasem::Result<()> {
    /// let base = Tensor::arange(0.0, 12.0, 1.0, DType::F32, Device::cuda(0))?;
    /// // A 3×2 view of every other element, kept alive by a clone of `base`.
    /// // SAFETY: the 12 floats at `base.data_ptr()` live while the owner (a view of `base`) lives,
    /// // and cudasem's own streams order every use of them.
    /// let t = unsafe {
    ///     Tensor::from_blob(base.data_ptr(), [3, 2], Some(&[4, 2]), DType::F32, Device::cuda(0), base.clone())?
    /// };
    /// assert_eq!(t.to_vec::<f32>()?, [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
    /// # Ok(()) }
    /// ```
    ///
    /// # Safety
    /// - `ptr` must point to device memory of `device` (on CUDA: addressable from its primary
    ///   context), valid for reads and writes over the whole extent the shape, strides and dtype
    ///   imply, from now until `owner` is dropped;
    /// - the memory must not be freed, or given to another use, by anyone before `owner` drops, and
    ///   never by cudasem's caching allocator (it is not one of its blocks: pass a clone of the
    ///   tensor that holds such a block as the owner instead);
    /// - the caller orders its own work on the memory with cudasem's streams (events, `wait_stream`,
    ///   or work on the same stream, [`Stream::cuda_stream`](crate::cuda::Stream::cuda_stream)):
    ///   cudasem orders only the work it queues.
    pub unsafe fn from_blob(
        ptr: u64,
        shape: impl IntoShape,
        strides: Option<&[usize]>,
        dtype: DType,
        device: Device,
        owner: impl Send + Sync + 'static,
    ) -> Result<Tensor> {
        let shape = shape.into_shape();
        let sizes = shape.sizes("Tensor::from_blob")?;
        let view = ForeignView { op: "Tensor::from_blob", base: ptr, offset: 0, shape: sizes, strides, dtype };
        view.wrap(device, Box::new(owner))
    }
}

/// A description of memory made elsewhere, checked before a tensor views it.
pub(super) struct ForeignView<'a> {
    /// The public call, for errors.
    pub op: &'static str,
    /// The address storage offsets count from.
    pub base: u64,
    /// Elements from `base` to the element at index `[0, 0, …]`.
    pub offset: usize,
    pub shape: &'a [usize],
    /// In elements; `None`: dense row-major.
    pub strides: Option<&'a [usize]>,
    pub dtype: DType,
}

impl ForeignView<'_> {
    /// The tensor over the memory on `device`, kept alive by `owner`.
    pub fn wrap(&self, device: Device, owner: Owner) -> Result<Tensor> {
        let device = match device {
            Device::Cuda(index) => crate::runtime::resolve_device(index)?,
            Device::Cpu => {
                return Err(Error::InvalidArgument {
                    op: self.op,
                    reason: "cudasem views CUDA device memory made elsewhere; host memory is not supported \
                             (copy it into a tensor with Tensor::from_slice, or give a CUDA device)"
                        .into(),
                })
            }
        };
        let numel = layout::checked_numel(self.op, self.shape)?;
        let strides = match self.strides {
            Some(s) if s.len() != self.shape.len() => {
                return Err(self.bad_shape(format!(
                    "{} strides were given for {} dimensions; give one stride (in elements) per dimension",
                    s.len(),
                    self.shape.len()
                )))
            }
            Some(s) => s.into(),
            None => layout::contiguous_strides(self.shape),
        };
        let layout = Layout { shape: self.shape.into(), strides, offset: self.offset };
        if numel > 0 {
            self.check_memory(device, &layout)?;
        }
        let storage = Storage::Foreign(ForeignBlock::new(device, self.base, owner));
        Ok(Tensor::from_parts(Arc::new(storage), layout, self.dtype))
    }

    /// Checks a non-empty view's pointer and extent.
    fn check_memory(&self, device: usize, layout: &Layout) -> Result<()> {
        let size = self.dtype.size();
        let first = self.base.checked_add((self.offset as u64).saturating_mul(size as u64));
        let first =
            first.ok_or_else(|| self.bad_argument(format!("the offset runs past 2^64 from {:#x}", self.base)))?;
        if first == 0 {
            return Err(self.bad_argument("the pointer is null".into()));
        }
        if first % size as u64 != 0 {
            return Err(self.bad_argument(format!(
                "the address {first:#x} is not aligned to {size} bytes, the size of {}",
                self.dtype
            )));
        }
        // The farthest element any index reaches, then the bytes up to its end.
        let reach = || -> Option<usize> {
            let last = layout.shape.iter().zip(layout.strides.iter()).try_fold(self.offset, |last, (&n, &s)| {
                (n - 1).checked_mul(s).and_then(|step| last.checked_add(step))
            })?;
            last.checked_add(1)?.checked_mul(size)
        };
        let bytes = reach();
        let bytes = bytes.filter(|&b| self.base.checked_add(b as u64).is_some()).ok_or_else(|| {
            self.bad_shape(format!(
                "the elements these sizes and strides reach from {:#x} run past the end of the address space",
                self.base
            ))
        })?;
        crate::runtime::check_foreign_memory(device, first, bytes - self.offset * size)
    }

    fn bad_argument(&self, reason: String) -> Error {
        Error::InvalidArgument { op: self.op, reason }
    }

    fn bad_shape(&self, reason: String) -> Error {
        Error::InvalidShape { op: self.op, shape: self.shape.iter().map(|&n| n as i64).collect(), reason }
    }
}
