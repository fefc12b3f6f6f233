//! Where an op runs and how: the placement rules (DESIGN.md 3–4) and the launch of a
//! [`KernelOp`] on the CPU (at once) or on a device's current stream (queued).

use super::layout::Layout;
use super::storage::{HostBuffers, Storage};
use super::Tensor;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{BufferView, KernelOp};
use crate::kernels::cpu;
use crate::runtime::{capture_active, check_host_work};
use crate::runtime::{current_of, is_peer_access_enabled, resolve_device, Stream};
use crate::scalar::Scalar;
use std::borrow::Cow;
use std::cell::OnceCell;
use std::sync::Arc;

/// Where a tensor lives, with the CUDA index resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    Cpu,
    Cuda(usize),
}

impl Place {
    pub fn device(self) -> Device {
        match self {
            Place::Cpu => Device::Cpu,
            Place::Cuda(i) => Device::cuda(i),
        }
    }

    /// Resolves `Device::Cuda(None)` to the current device and checks the index.
    pub fn resolve(device: Device) -> Result<Place> {
        match device {
            Device::Cpu => Ok(Place::Cpu),
            Device::Cuda(index) => Ok(Place::Cuda(resolve_device(index)?)),
        }
    }

    /// The device's current stream (for CUDA).
    pub fn stream(self) -> Result<Option<Stream>> {
        match self {
            Place::Cpu => Ok(None),
            Place::Cuda(d) => current_of(d).map(Some),
        }
    }
}

impl Tensor {
    /// A new tensor of this shape and `dtype`, laid out as this one when this one is dense but
    /// permuted (a transposed matrix, say: the output keeps its strides, as PyTorch's
    /// `preserve_format` does, so the op streams through both in memory order); contiguous
    /// otherwise.
    pub(crate) fn empty_like_layout(&self, exec: &Exec, dtype: DType) -> Result<Tensor> {
        let (shape, strides) = (self.shape(), self.stride());
        if self.is_contiguous() || shape.contains(&0) {
            return exec.empty(shape, dtype);
        }
        // Dims from the largest stride to the smallest; a dense permutation is contiguous in
        // that order.
        let mut order: Vec<usize> = (0..shape.len()).collect();
        order.sort_by_key(|&d| std::cmp::Reverse((strides[d], shape[d])));
        let mut want = 1usize;
        for &d in order.iter().rev() {
            if shape[d] != 1 && strides[d] != want {
                return exec.empty(shape, dtype);
            }
            want *= shape[d];
        }
        let permuted: Vec<usize> = order.iter().map(|&d| shape[d]).collect();
        let mut inverse = vec![0isize; order.len()];
        for (k, &d) in order.iter().enumerate() {
            inverse[d] = k as isize;
        }
        exec.empty(&permuted, dtype)?.permute(&inverse)
    }

    pub(crate) fn place(&self) -> Place {
        match self.device() {
            Device::Cuda(Some(i)) => Place::Cuda(i),
            _ => Place::Cpu,
        }
    }

    /// The tensor as a kernel operand.
    pub(crate) fn buffer_view(&self) -> BufferView {
        BufferView {
            ptr: self.storage.ptr(),
            dtype: self.dtype,
            shape: self.layout.shape.clone(),
            strides: self.layout.strides.clone(),
            offset: self.layout.offset,
        }
    }

    /// A kernel operand of the tensor broadcast to `shape`.
    pub(crate) fn broadcast_view(&self, op: &'static str, shape: &[usize]) -> Result<BufferView> {
        if self.layout.shape == shape {
            return Ok(self.buffer_view());
        }
        let l = self.layout.broadcast_to(op, shape)?;
        Ok(BufferView {
            ptr: self.storage.ptr(),
            dtype: self.dtype,
            shape: l.shape,
            strides: l.strides,
            offset: l.offset,
        })
    }

    /// Whether `input` shares memory with `self` (a tensor an op writes) other than element for
    /// element: the same storage, not the same view, and byte ranges that meet. A device writing
    /// `self` in parallel could then read elements of `input` it already overwrote.
    pub(crate) fn partly_overlaps(&self, input: &Tensor) -> bool {
        if !Arc::ptr_eq(&self.storage, &input.storage) || (self.layout == input.layout && self.dtype == input.dtype) {
            return false;
        }
        match (self.buffer_view().byte_span(), input.buffer_view().byte_span()) {
            (Some((a, la)), Some((b, lb))) => a.0 < b.0 + lb as u64 && b.0 < a.0 + la as u64,
            _ => false,
        }
    }

    /// `input` as an op writing `self` on a device should read it: a dense copy when the two
    /// partly overlap (so the op computes as if its input were copied first, as the CPU kernels
    /// do), else `input` itself.
    pub(crate) fn unaliased<'t>(&self, input: &'t Tensor) -> Result<Cow<'t, Tensor>> {
        if self.place() == Place::Cpu || !self.partly_overlaps(input) {
            return Ok(Cow::Borrowed(input));
        }
        let copy = Tensor::empty_at(input.shape(), input.dtype, input.place())?;
        copy.copy_local(input)?;
        Ok(Cow::Owned(copy))
    }

    /// Refuses a write into a tensor whose elements share addresses (an expanded view).
    pub(crate) fn check_writable(&self, op: &'static str) -> Result<()> {
        if self.layout.has_internal_overlap() {
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "unsupported operation: more than one element of the written-to tensor (shape {:?}, strides {:?}) \
                     refers to a single memory location; call .contiguous() on it first",
                    self.shape(),
                    self.stride()
                ),
            });
        }
        Ok(())
    }
}

/// Where one op runs, and the other devices whose memory it reads over peer links.
///
/// The device's current stream is looked up once per op (on first use) and shared by the
/// op's allocations and its launch: nothing between them can change it.
#[derive(Debug, Clone)]
pub(crate) struct Exec {
    pub place: Place,
    peers: Vec<usize>,
    stream: OnceCell<Stream>,
}

impl Exec {
    /// Runs on `place`, reading nothing from other devices.
    pub fn on(place: Place) -> Exec {
        Exec { place, peers: Vec::new(), stream: OnceCell::new() }
    }

    /// The current stream of CUDA device `d` (the op's device), looked up once.
    fn stream(&self, d: usize) -> Result<&Stream> {
        if let Some(s) = self.stream.get() {
            return Ok(s);
        }
        let s = current_of(d)?;
        Ok(self.stream.get_or_init(|| s))
    }

    /// Where an op over `tensors` (in operand order) runs: the device of the first tensor that is
    /// not a 0-dim CPU tensor. Every other tensor must be there too, be a 0-dim CPU tensor (when
    /// the op runs on a device), or live on a CUDA device with peer access to it enabled.
    pub fn for_operands(op: &'static str, tensors: &[&Tensor]) -> Result<Exec> {
        let cpu_scalar = |t: &Tensor| t.place() == Place::Cpu && t.dim() == 0;
        let Some(main) = tensors.iter().find(|t| !cpu_scalar(t)).or(tensors.first()) else {
            return Ok(Exec::on(Place::Cpu));
        };
        let place = main.place();
        let mut exec = Exec::on(place);
        for &t in tensors {
            match (place, t.place()) {
                (a, b) if a == b => {}
                (Place::Cuda(_), Place::Cpu) if cpu_scalar(t) => {}
                (Place::Cuda(d), Place::Cuda(e)) if is_peer_access_enabled(d, e)? => {
                    if !exec.peers.contains(&e) {
                        exec.peers.push(e);
                    }
                }
                (a, b) => return Err(Error::DeviceMismatch { op, lhs: a.device(), rhs: b.device() }),
            }
        }
        Ok(exec)
    }

    /// The operand as the op reads it: a 0-dim CPU tensor of a device op is copied to the device;
    /// any other tensor is borrowed as it is.
    pub fn admit<'t>(&self, t: &'t Tensor) -> Result<Cow<'t, Tensor>> {
        match (self.place, t.place()) {
            (Place::Cuda(d), Place::Cpu) => t.to(Device::cuda(d), false).map(Cow::Owned),
            _ => Ok(Cow::Borrowed(t)),
        }
    }

    /// A new, uninitialized contiguous tensor where the op runs.
    pub fn empty(&self, shape: &[usize], dtype: DType) -> Result<Tensor> {
        // As `Tensor::empty_at`, with the op's stream.
        let bytes = byte_size("empty", shape, dtype)?;
        let storage = match self.place {
            Place::Cpu => Storage::host_zeroed(bytes)?,
            Place::Cuda(d) => Storage::device_block(bytes, self.stream(d)?)?,
        };
        Ok(Tensor::from_parts(Arc::new(storage), Layout::contiguous(shape), dtype))
    }

    /// A 0-dim tensor holding `value` as `dtype`, where the op runs.
    pub fn scalar(&self, value: Scalar, dtype: DType) -> Result<Tensor> {
        let t = self.empty(&[], dtype)?;
        t.fill_(value)?;
        Ok(t)
    }

    /// Runs `op`, whose views point into `tensors`' storages: at once on the CPU, or queued on
    /// the device's current stream (after the peers' current streams, which then wait for it).
    pub fn run(&self, op: &KernelOp, tensors: &[&Tensor]) -> Result<()> {
        match self.place {
            Place::Cpu => {
                if capture_active() {
                    check_host_work("a host (CPU) tensor op")?;
                }
                let buffers = tensors.iter().filter_map(|t| t.storage.as_host()).collect();
                cpu::execute(op, &HostBuffers { buffers })
            }
            Place::Cuda(d) => {
                let stream = self.stream(d)?;
                if self.peers.is_empty() {
                    return stream.launch(op, tensors);
                }
                self.fenced(stream, |s| s.launch(op, tensors))
            }
        }
    }

    /// Runs `queue` with the op's stream (a CUDA device's current stream), fenced with the
    /// peers' current streams as [`Exec::run`] fences its op; an error on the CPU.
    pub fn on_stream(&self, op: &'static str, queue: impl FnOnce(&Stream) -> Result<()>) -> Result<()> {
        let Place::Cuda(d) = self.place else {
            return Err(Error::InvalidArgument { op, reason: "this op runs on CUDA tensors only".into() });
        };
        let stream = self.stream(d)?;
        if self.peers.is_empty() {
            return queue(stream);
        }
        self.fenced(stream, queue)
    }

    /// `queue` on `stream`, after the peers' current streams, which then wait for it.
    fn fenced(&self, stream: &Stream, queue: impl FnOnce(&Stream) -> Result<()>) -> Result<()> {
        let peer_streams = self.peers.iter().map(|&p| current_of(p)).collect::<Result<Vec<_>>>()?;
        for p in &peer_streams {
            stream.wait_stream(p)?;
        }
        queue(stream)?;
        for p in &peer_streams {
            p.wait_stream(stream)?;
        }
        Ok(())
    }
}

impl Tensor {
    /// A new, uninitialized contiguous tensor on CUDA device `d`, allocated for use on `stream`
    /// (one of `d`'s streams).
    #[inline]
    pub(crate) fn empty_on(shape: &[usize], dtype: DType, d: usize, stream: &Stream) -> Result<Tensor> {
        debug_assert_eq!(d, stream.device(), "empty_on: the stream is not of the device");
        let bytes = byte_size("empty", shape, dtype)?;
        let storage = Storage::device_block(bytes, stream)?;
        Ok(Tensor::from_parts(Arc::new(storage), Layout::contiguous(shape), dtype))
    }

    /// A new, uninitialized (host: zeroed) contiguous tensor on `place`; device memory comes
    /// from the caching allocator on the device's current stream.
    pub(crate) fn empty_at(shape: &[usize], dtype: DType, place: Place) -> Result<Tensor> {
        match place {
            Place::Cpu => {
                let storage = Storage::host_zeroed(byte_size("empty", shape, dtype)?)?;
                Ok(Tensor::from_parts(Arc::new(storage), Layout::contiguous(shape), dtype))
            }
            Place::Cuda(d) => Tensor::empty_on(shape, dtype, d, &current_of(d)?),
        }
    }
}

/// A tensor is the operand of the device work queued over its memory: while a capture is
/// underway the door keeps its storage (the whole storage, not the view) alive as long as the
/// captured graph.
impl crate::runtime::Operand for Tensor {
    #[inline]
    fn pool(&self) -> Option<crate::alloc::MemPoolId> {
        self.storage.pool()
    }

    fn keep_alive(&self) -> crate::runtime::KeepAlive {
        self.storage.clone()
    }

    fn describe(&self) -> Option<(crate::runtime::SanitizerSpan, crate::race::RaceTensor)> {
        let Place::Cuda(device) = self.place() else { return None };
        let (ptr, bytes) = self.buffer_view().byte_span()?;
        let span = crate::runtime::SanitizerSpan { device, start: ptr.0, end: ptr.0 + bytes as u64 };
        Some((
            span,
            crate::race::RaceTensor { dtype: self.dtype, shape: self.layout.shape.to_vec(), data_ptr: self.data_ptr() },
        ))
    }
}

/// The bytes of a dense tensor of `shape` and `dtype`, or [`Error::InvalidShape`] on overflow.
pub(crate) fn byte_size(op: &'static str, shape: &[usize], dtype: DType) -> Result<usize> {
    let numel = super::layout::checked_numel(op, shape)?;
    numel.checked_mul(dtype.size()).ok_or_else(|| Error::InvalidShape {
        op,
        shape: shape.iter().map(|&n| n as i64).collect(),
        reason: "the size in bytes overflows".into(),
    })
}
