//! Pinned host memory for tensors — `pin_memory`, `is_pinned`, `empty_pinned` — the
//! non-blocking copies between pinned memory and a device, and `record_stream`.
//!
//! A non-blocking copy moves dense bytes of the destination's dtype, so it can be one driver copy
//! queued on the device's current stream:
//! * host → device: a pinned source that is not dense or not of the destination's dtype is first
//!   converted on the host into a pinned staging block (freed at once; the caching host allocator
//!   reuses it only after the copy); a strided destination gets the bytes through a dense device
//!   tensor and a device copy, all in stream order.
//! * device → host: a source that is not dense or not of the destination's dtype is converted on
//!   the device first (in stream order); a strided pinned destination, or a driver without device
//!   kernels for the conversion, makes the copy synchronous (the host must scatter the bytes).
//!
//! The host side never sees a half-done copy: reads and writes of pinned storage wait for the
//! copies still using it (`PinnedBlock`).

use super::exec::{byte_size, Place};
use super::layout::Layout;
use super::storage::Storage;
use super::Tensor;
use crate::driver::DevicePtr;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::runtime::{current_of, PinnedBlock, Stream};
use std::sync::Arc;

impl Tensor {
    /// A copy of this host tensor in pinned (page-locked) memory (`t.pin_memory()`), contiguous;
    /// `self` when it is already pinned. Pinned memory comes from the caching host allocator and
    /// lets `to(device, true)` / `copy_(src, true)` queue the copy and return at once. A CUDA
    /// tensor cannot be pinned ([`Error::InvalidArgument`]).
    ///
    /// ```
    /// use cudasem::{DType, Device, Tensor};
    /// # fn main() -> cudasem::Result<()> {
    /// let host = Tensor::arange(0, 4, 1, DType::F32, Device::Cpu)?.pin_memory()?;
    /// let dev = host.to("cuda", true)?; // queued on the current stream; returns at once
    /// let back = dev.to("cpu", true)?; // lands in pinned memory, filled asynchronously
    /// assert!(back.is_pinned());
    /// assert_eq!(back.to_vec::<f32>()?, [0.0, 1.0, 2.0, 3.0]); // the host read waits for the copy
    /// # Ok(()) }
    /// ```
    pub fn pin_memory(&self) -> Result<Tensor> {
        if let Place::Cuda(d) = self.place() {
            return Err(Error::InvalidArgument {
                op: "pin_memory",
                reason: format!("cannot pin a tensor on cuda:{d}: only dense CPU tensors can be pinned"),
            });
        }
        if self.is_pinned() {
            return Ok(self.clone());
        }
        let out = Tensor::empty_pinned_uninit(self.shape(), self.dtype)?;
        out.copy_local(self)?;
        Ok(out)
    }

    /// Whether the tensor is in pinned host memory (`t.is_pinned()`); views of a pinned tensor are
    /// pinned too.
    pub fn is_pinned(&self) -> bool {
        self.storage.is_pinned()
    }

    /// A zeroed host tensor in pinned memory (`torch.zeros(…, pin_memory=True)`).
    pub fn empty_pinned(shape: impl super::IntoShape, dtype: DType) -> Result<Tensor> {
        let t = Tensor::empty_pinned_uninit(shape.into_shape().sizes("empty_pinned")?, dtype)?;
        if let Some(host) = t.storage.as_host() {
            host.write()?.fill(0);
        }
        Ok(t)
    }

    /// A contiguous host tensor in pinned memory; a reused block keeps its old bytes.
    pub(crate) fn empty_pinned_uninit(shape: &[usize], dtype: DType) -> Result<Tensor> {
        let bytes = byte_size("empty", shape, dtype)?;
        Ok(Tensor::from_parts(Arc::new(Storage::pinned(bytes)?), Layout::contiguous(shape), dtype))
    }

    /// Marks this tensor's device memory as used by `stream` (a stream of the tensor's device)
    /// (`t.record_stream(s)`): when the last view drops, the caching allocator hands the block out
    /// again only after the work queued on `stream` until then has completed. A view records the
    /// whole block of its storage. Host tensors are [`Error::InvalidArgument`].
    pub fn record_stream(&self, stream: &Stream) -> Result<()> {
        self.storage.record_stream(stream)
    }

    fn pinned_block(&self) -> Result<&PinnedBlock> {
        self.storage.as_host().and_then(|h| h.pinned()).ok_or(Error::InvalidArgument {
            op: "copy_",
            reason: "a non-blocking host copy needs pinned memory".into(),
        })
    }

    /// Host (pinned) → device `device`, queued on the device's current stream. `src` has
    /// `self`'s shape.
    pub(super) fn copy_from_pinned(&self, src: &Tensor, device: usize) -> Result<()> {
        let staged;
        let src = if src.dtype == self.dtype && src.is_contiguous() {
            src
        } else {
            staged = Tensor::empty_pinned_uninit(self.shape(), self.dtype)?;
            staged.copy_local(src)?;
            &staged
        };
        let block = src.pinned_block()?;
        let stream = current_of(device)?;
        let (offset, bytes) = (src.layout.offset * src.dtype.size(), self.numel() * self.dtype.size());
        if self.is_contiguous() {
            return block.copy_to_device((offset, bytes), DevicePtr(self.data_ptr()), &stream, &[src, self]);
        }
        let dense = Tensor::empty_at(self.shape(), self.dtype, self.place())?;
        block.copy_to_device((offset, bytes), DevicePtr(dense.data_ptr()), &stream, &[src, &dense])?;
        self.copy_local(&dense)
    }

    /// Device `device` → host (pinned), queued on the device's current stream when the bytes can
    /// land as they are. `src` has `self`'s shape.
    pub(super) fn copy_into_pinned(&self, src: &Tensor, device: usize) -> Result<()> {
        if !self.is_contiguous() {
            return self.copy_local(&src.read_to_host()?);
        }
        let prepared = src.to_dtype_contiguous(self.dtype);
        let src = match prepared {
            Ok(t) => t,
            // No device kernel for the conversion on this driver: convert on the host instead.
            Err(Error::Unsupported { op: "launch", .. }) => return self.copy_local(&src.read_to_host()?),
            Err(e) => return Err(e),
        };
        let stream = current_of(device)?;
        let (offset, bytes) = (self.layout.offset * self.dtype.size(), self.numel() * self.dtype.size());
        // A converted source is a temporary of this stream: the caching allocator reuses its
        // block only for work queued after this copy.
        self.pinned_block()?.copy_from_device((offset, bytes), DevicePtr(src.data_ptr()), &stream, &[self, &src])
    }
}
