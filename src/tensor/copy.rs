//! Copies: `to`, `cuda`, `cpu`, `copy_`, `contiguous`, `to_dtype`, and host reads
//! (`to_vec`, `item`).
//!
//! Copies between devices always work (DESIGN.md 4). They run on the *source* device's current
//! stream, bracketed by a two-way barrier with the destination's current stream (each records an
//! event the other waits for), as PyTorch's `copy_` does: the copy starts after the work already
//! queued on the destination, and later work there starts after the copy.
//!
//! Host ↔ device copies are ordered on the device's current stream. From or into pageable host
//! memory they return once the host side is consumed or filled, whatever `non_blocking` says (as
//! in PyTorch). With `non_blocking` and pinned host memory (`pin_memory`, or what
//! `to("cpu", true)` makes) they are queued and return at once (`pinned.rs`); a later host read or
//! write of the pinned bytes waits for the copy.

use super::exec::{Exec, Place};
use super::layout::Layout;
use super::storage::Storage;
use super::Tensor;
use crate::device::IntoDevice;
use crate::driver::DevicePtr;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::kernel::KernelOp;
use crate::kernels::cpu::gather_bytes;
use crate::runtime::current_of;
use std::sync::Arc;

impl Tensor {
    /// The tensor on `device` (`t.to(device, non_blocking=…)`): `self` (another handle to the
    /// same storage) when it is already there, else a contiguous copy. `"cuda"` /
    /// `Device::Cuda(None)` is the current device.
    ///
    /// With `non_blocking`, a pinned host tensor is copied to the device, and a device tensor to
    /// the host, by a copy queued on the device's current stream: the call returns before the
    /// copy completes. A device tensor sent to `"cpu"` this way lands in pinned memory (as in
    /// PyTorch); reading it on the host waits for the copy. From pageable memory the copy is
    /// synchronous, as in PyTorch.
    pub fn to(&self, device: impl IntoDevice, non_blocking: bool) -> Result<Tensor> {
        let place = Place::resolve(device.into_device()?)?;
        if place == self.place() {
            return Ok(self.clone());
        }
        // As in PyTorch, a non-blocking copy to the host lands in pinned memory, so it can be
        // queued instead of waited for.
        let out = if non_blocking && place == Place::Cpu {
            Tensor::empty_pinned_uninit(self.shape(), self.dtype)?
        } else {
            Tensor::empty_at(self.shape(), self.dtype, place)?
        };
        out.copy_(self, non_blocking)?;
        Ok(out)
    }

    /// The tensor on the current CUDA device (`t.cuda()`).
    pub fn cuda(&self) -> Result<Tensor> {
        self.to(crate::Device::Cuda(None), false)
    }

    /// The tensor in host memory (`t.cpu()`); waits for the device data.
    pub fn cpu(&self) -> Result<Tensor> {
        self.to(crate::Device::Cpu, false)
    }

    /// The tensor converted to `dtype` (`t.to(dtype)`): `self` when it already has it. Laid out
    /// as `self` when `self` is dense but permuted (a transposed matrix keeps its strides, as
    /// PyTorch's `preserve_format`: the conversion streams through both in memory order),
    /// contiguous otherwise.
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype {
            return Ok(self.clone());
        }
        let exec = Exec::on(self.place());
        let out = self.empty_like_layout(&exec, dtype)?;
        exec.run(&KernelOp::Cast { src: self.buffer_view(), dst: out.buffer_view() }, &[self, &out])?;
        Ok(out)
    }

    /// The tensor converted to `dtype` as a dense row-major tensor, in one pass (`self` when it
    /// is both already).
    pub(crate) fn to_dtype_contiguous(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype {
            return self.contiguous();
        }
        let out = Tensor::empty_at(self.shape(), dtype, self.place())?;
        let op = KernelOp::Cast { src: self.buffer_view(), dst: out.buffer_view() };
        Exec::on(self.place()).run(&op, &[self, &out])?;
        Ok(out)
    }

    /// A dense row-major tensor with the same elements: `self` when already contiguous
    /// (`t.contiguous()`).
    pub fn contiguous(&self) -> Result<Tensor> {
        if self.is_contiguous() {
            return Ok(self.clone());
        }
        let out = Tensor::empty_at(self.shape(), self.dtype, self.place())?;
        let op = KernelOp::CopyStrided { src: self.buffer_view(), dst: out.buffer_view() };
        Exec::on(self.place()).run(&op, &[self, &out])?;
        Ok(out)
    }

    /// Copies `src` into `self`, in place (`t.copy_(src, non_blocking)`): `src` is broadcast to
    /// `self`'s shape and converted to its dtype, from any device to any device.
    ///
    /// With `non_blocking`, a copy between pinned host memory and a device is queued on the
    /// device's current stream and the call returns at once; a later host read or write of the
    /// pinned tensor waits for it. Otherwise host ↔ device copies return when done.
    pub fn copy_(&self, src: &Tensor, non_blocking: bool) -> Result<()> {
        self.check_writable("copy_")?;
        let src_view = src.layout.broadcast_to("copy_", self.shape())?;
        let src = src.with_layout(src_view);
        if self.numel() == 0 {
            return Ok(());
        }
        match (src.place(), self.place()) {
            (a, b) if a == b => self.copy_local(&*self.unaliased(&src)?),
            (Place::Cpu, Place::Cuda(d)) if non_blocking && src.is_pinned() => self.copy_from_pinned(&src, d),
            (Place::Cpu, Place::Cuda(_)) => self.copy_from_host(&src),
            (Place::Cuda(d), Place::Cpu) if non_blocking && self.is_pinned() => {
                src.storage.poisoned()?;
                self.copy_into_pinned(&src, d)
            }
            (Place::Cuda(_), Place::Cpu) => self.copy_local(&src.read_to_host()?),
            (Place::Cuda(s), Place::Cuda(d)) => self.copy_peer(&src, s, d),
            (Place::Cpu, Place::Cpu) => self.copy_local(&src),
        }
    }

    /// A copy between tensors of one place (same shape).
    pub(super) fn copy_local(&self, src: &Tensor) -> Result<()> {
        let place = self.place();
        if place == Place::Cpu && src.dtype == self.dtype && src.is_contiguous() && self.is_contiguous() {
            return self.copy_host_dense(src);
        }
        if place != Place::Cpu && src.dtype == self.dtype && src.is_contiguous() && self.is_contiguous() {
            let stream = current_of(src.device_index())?;
            let bytes = self.numel() * self.dtype.size();
            return stream.memcpy_dtod(DevicePtr(self.data_ptr()), DevicePtr(src.data_ptr()), bytes, &[self, src]);
        }
        let op = if src.dtype == self.dtype {
            KernelOp::CopyStrided { src: src.buffer_view(), dst: self.buffer_view() }
        } else {
            KernelOp::Cast { src: src.buffer_view(), dst: self.buffer_view() }
        };
        Exec::on(place).run(&op, &[src, self])
    }

    /// Host → host, both dense and of one dtype: one slice copy. Two different storages are
    /// locked in address order (so two threads copying each way cannot deadlock); the same
    /// storage goes through the kernel, which handles overlap.
    fn copy_host_dense(&self, src: &Tensor) -> Result<()> {
        let (Some(from), Some(to)) = (src.storage.as_host(), self.storage.as_host()) else {
            return Err(Error::InvalidArgument { op: "copy_", reason: "not host tensors".into() });
        };
        let bytes = self.numel() * self.dtype.size();
        let (s0, d0) = (src.layout.offset * src.dtype.size(), self.layout.offset * self.dtype.size());
        if bytes == 0 {
            return Ok(());
        }
        if self.shares_storage(src) {
            let op = KernelOp::CopyStrided { src: src.buffer_view(), dst: self.buffer_view() };
            return Exec::on(Place::Cpu).run(&op, &[src, self]);
        }
        let (r, mut w) = if src.storage.ptr() < self.storage.ptr() {
            let r = from.read()?;
            (r, to.write()?)
        } else {
            let w = to.write()?;
            (from.read()?, w)
        };
        w[d0..d0 + bytes].copy_from_slice(&r[s0..s0 + bytes]);
        Ok(())
    }

    /// Host → device: the source converted and made dense on the host, then one upload (into a
    /// staging tensor on the device when `self` is not contiguous). A dense source of the right
    /// dtype is uploaded straight from its storage.
    fn copy_from_host(&self, src: &Tensor) -> Result<()> {
        if src.dtype == self.dtype && src.is_contiguous() && self.is_contiguous() {
            let host = src
                .storage
                .as_host()
                .ok_or(Error::InvalidArgument { op: "copy_", reason: "the source is not in host memory".into() })?;
            let start = src.layout.offset * src.dtype.size();
            let data = host.read()?;
            return self.write_host_bytes(&data[start..start + self.numel() * self.dtype.size()]);
        }
        let dense = Tensor::empty_at(self.shape(), self.dtype, Place::Cpu)?;
        dense.copy_local(src)?;
        let bytes = dense.host_bytes()?;
        if self.is_contiguous() {
            return self.write_host_bytes(&bytes);
        }
        let staged = Tensor::from_host_bytes(bytes, self.shape(), self.dtype, self.place())?;
        self.copy_local(&staged)
    }

    /// Device → device across GPUs, on the source's current stream with a two-way barrier.
    fn copy_peer(&self, src: &Tensor, from: usize, to: usize) -> Result<()> {
        // Only dense bytes of the final dtype cross the link.
        let src = src.to_dtype_contiguous(self.dtype)?;
        let dst =
            if self.is_contiguous() { self.clone() } else { Tensor::empty_at(self.shape(), self.dtype, self.place())? };
        let (s_from, s_to) = (current_of(from)?, current_of(to)?);
        s_from.wait_stream(&s_to)?;
        let bytes = dst.numel() * dst.dtype.size();
        let (dst_at, src_at) = ((to, DevicePtr(dst.data_ptr())), (from, DevicePtr(src.data_ptr())));
        s_from.memcpy_peer(dst_at, src_at, bytes, &[&dst, &src])?;
        s_to.wait_stream(&s_from)?;
        if !self.shares_storage(&dst) {
            self.copy_local(&dst)?;
        }
        Ok(())
    }

    pub(super) fn device_index(&self) -> usize {
        match self.place() {
            Place::Cuda(d) => d,
            Place::Cpu => 0,
        }
    }

    /// The bytes of this view's storage span, read to a host tensor with the same layout
    /// (rebased); waits for the device's current stream.
    #[track_caller]
    pub(super) fn read_to_host(&self) -> Result<Tensor> {
        let view = self.buffer_view();
        let Some((ptr, len)) = view.byte_span() else {
            return Tensor::empty_at(self.shape(), self.dtype, Place::Cpu);
        };
        let stream = current_of(self.device_index())?;
        let mut bytes = super::storage::zeroed_bytes(len)?;
        stream.memcpy_dtoh(&mut bytes, ptr)?;
        // A collective that was to write these bytes failed: they are not the data.
        self.storage.poisoned()?;
        let first = view.span().map_or(0, |(first, _)| first);
        let layout = Layout { offset: self.layout.offset - first, ..self.layout.clone() };
        Ok(Tensor::from_parts(Arc::new(Storage::host(bytes)), layout, self.dtype))
    }

    /// The elements as dense host bytes, row-major (a device read waits for its stream).
    #[track_caller]
    fn host_bytes(&self) -> Result<Vec<u8>> {
        let host = if self.place() == Place::Cpu { self.clone() } else { self.read_to_host()? };
        let storage = host
            .storage
            .as_host()
            .ok_or(Error::InvalidArgument { op: "to_vec", reason: "the host copy is not host memory".into() })?;
        let data = storage.read()?;
        if self.numel() == 0 {
            return Ok(Vec::new());
        }
        Ok(gather_bytes(&data, &host.buffer_view()))
    }

    /// The elements, row-major, as `T` — which must be the tensor's dtype (`t.tolist()`,
    /// flattened). A device tensor is read after the work queued on its device's current stream.
    #[doc(alias = "tolist")]
    #[track_caller]
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype {
            return Err(Error::DTypeMismatch { op: "to_vec", expected: T::DTYPE, found: self.dtype });
        }
        let bytes = self.host_bytes()?;
        bytes
            .chunks_exact(self.dtype.size())
            .map(|c| {
                // `_else`: the message is formatted only for a bad element, not for every one.
                T::read_bytes(c).ok_or_else(|| Error::InvalidArgument {
                    op: "to_vec",
                    reason: format!("byte pattern {c:?} is not a valid {}", self.dtype),
                })
            })
            .collect()
    }

    /// The one element of a one-element tensor, as `T` (its dtype) (`t.item()`).
    #[track_caller]
    pub fn item<T: Element>(&self) -> Result<T> {
        if self.numel() != 1 {
            return Err(Error::InvalidArgument {
                op: "item",
                reason: format!("a Tensor with {} elements cannot be converted to Scalar", self.numel()),
            });
        }
        let v = self.to_vec::<T>()?;
        v.first().copied().ok_or(Error::InvalidArgument { op: "item", reason: "no element".into() })
    }
}
