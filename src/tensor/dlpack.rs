//! DLPack export and import (`t.__dlpack__(stream=…)`, `torch.from_dlpack`): a tensor handed to
//! another library (PyTorch, JAX, CuPy, through a user's PyO3 module) and back, without a copy.
//!
//! | DLPack / torch | cudasem |
//! |---|---|
//! | `t.__dlpack__(stream=s)` | [`Tensor::to_dlpack`] with a [`DlpackStream`] |
//! | `torch.from_dlpack(capsule)` | [`Tensor::from_dlpack`] |
//! | `stream=None` / `1`, `2`, `-1`, a `cudaStream_t` | [`DlpackStream::from_raw`] |
//!
//! The managed tensor is `dlpark`'s owning handle of a `DLManagedTensorVersioned`
//! ([`crate::dlpark::versioned::Dlpack`]); `Dlpack::into_raw` / `Dlpack::from_raw` (or dlpark's
//! `pyo3` feature) move it through a Python capsule.

use super::core::Tensor;
use super::foreign::ForeignView;
use super::storage::Storage;
use crate::device::{Device, IntoCudaDevice};
use crate::driver::dlpack::{self as dl, DlPlace, ExportSpec};
use crate::error::{Error, Result};
use crate::runtime::{current_stream, default_stream, driver_name, Event, EventFlags, Stream};
use dlpark::versioned::Dlpack;
use dlpark::DlpackFlags;

/// The consumer's stream in DLPack's handshake (`__dlpack__(stream=…)`): before
/// [`Tensor::to_dlpack`] returns, this stream waits for the work queued so far on the tensor's
/// current stream, so the consumer's work on it sees the tensor's values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DlpackStream {
    /// No synchronization (DLPack's `-1`): the consumer orders its use itself.
    NoSync,
    /// The legacy default stream (DLPack's `None` or `1`): cudasem's default stream of the tensor's
    /// device.
    LegacyDefault,
    /// CUDA's per-thread default stream (DLPack's `2`). The simulated machine has one default stream
    /// per device, which stands for it.
    PerThreadDefault,
    /// A stream of the tensor's device: a cudasem stream, or one made elsewhere
    /// ([`Stream::from_external`]).
    Stream(Stream),
}

impl DlpackStream {
    /// The stream for DLPack's integer convention on `device` (an index, `"cuda:N"`, …): `None` and
    /// `1` the legacy default stream, `2` the per-thread default stream, `-1` no synchronization, and
    /// any other positive value a `cudaStream_t` (on the simulated machine: a value of
    /// [`Stream::cuda_stream`]). `0` and other negative values are [`Error::InvalidArgument`], as
    /// DLPack forbids them.
    ///
    /// # Safety
    /// A value other than `None`, `-1`, `1` and `2` is a native stream: it has
    /// [`Stream::from_external`]'s contract (a live stream of `device`'s primary context, kept alive
    /// while cudasem may use it — here, until the exported tensor's memory has been freed, since it
    /// is recorded on that stream).
    pub unsafe fn from_raw(value: Option<i64>, device: impl IntoCudaDevice) -> Result<DlpackStream> {
        match value {
            None | Some(1) => Ok(DlpackStream::LegacyDefault),
            Some(2) => Ok(DlpackStream::PerThreadDefault),
            Some(-1) => Ok(DlpackStream::NoSync),
            Some(raw) if raw > 2 => {
                // SAFETY: the caller's guarantee above is `from_external`'s contract.
                Ok(DlpackStream::Stream(unsafe { Stream::from_external(raw as u64, device)? }))
            }
            Some(raw) => Err(Error::InvalidArgument {
                op: "DlpackStream::from_raw",
                reason: format!(
                    "{raw} is not a DLPack CUDA stream: use -1 (no synchronization), 1 (legacy default), 2 \
                     (per-thread default) or a cudaStream_t"
                ),
            }),
        }
    }

    /// The stream of `device` this names (`None`: no synchronization).
    fn resolve(&self, device: usize) -> Result<Option<Stream>> {
        match self {
            DlpackStream::NoSync => Ok(None),
            DlpackStream::LegacyDefault => Ok(Some(default_stream(device)?)),
            DlpackStream::PerThreadDefault if driver_name() == "sim" => Ok(Some(default_stream(device)?)),
            DlpackStream::PerThreadDefault => {
                // SAFETY: `CU_STREAM_PER_THREAD` (0x2) is a handle CUDA keeps for every context; it
                // is never destroyed.
                Ok(Some(unsafe { Stream::from_external(2, device)? }))
            }
            DlpackStream::Stream(s) if s.device() != device => Err(Error::InvalidArgument {
                op: "Tensor::to_dlpack",
                reason: format!(
                    "the consumer's stream is on cuda:{} but the tensor is on cuda:{device}; pass a stream of the \
                     tensor's device",
                    s.device()
                ),
            }),
            DlpackStream::Stream(s) => Ok(Some(s.clone())),
        }
    }
}

impl Tensor {
    /// The tensor as a DLPack versioned managed tensor (`t.__dlpack__(stream=…)`), without a copy:
    /// `kDLCUDA` with the device's index for CUDA tensors, `kDLCUDAHost` for pinned and `kDLCPU` for
    /// pageable host tensors; shape and strides in elements, the storage's start as `data` and the
    /// view's offset as `byte_offset`; writable. The managed tensor keeps the tensor's memory alive
    /// until the consumer calls its deleter (drops the [`Dlpack`]).
    ///
    /// The handshake: for a CUDA tensor, `stream` (the consumer's) waits for the work queued so far on
    /// the tensor's current stream (an event recorded there, waited for there) before this returns,
    /// and the tensor's memory is recorded on it (as [`Tensor::record_stream`]; not the per-thread
    /// default stream, which is another stream on each thread), so the caching
    /// allocator reuses it only after the consumer's work queued there before it let go has
    /// completed. For a host tensor `stream` is not used; the call waits for copies in flight into
    /// or out of pinned memory.
    ///
    /// Errors: a consumer stream of another device ([`Error::InvalidArgument`]), a size or stride
    /// beyond `i64`, a failed event record or wait.
    pub fn to_dlpack(&self, stream: &DlpackStream) -> Result<Dlpack> {
        let place = match &*self.storage {
            Storage::Host(h) => {
                drop(h.write()?); // waits for every non-blocking copy still using the bytes
                if h.pinned().is_some() {
                    DlPlace::CudaHost
                } else {
                    DlPlace::Cpu
                }
            }
            Storage::Device(b) => self.handshake(b.device(), stream)?,
            Storage::Foreign(f) => self.handshake(f.device(), stream)?,
        };
        let spec = ExportSpec {
            data: self.storage.ptr().0,
            byte_offset: (self.layout.offset * self.dtype.size()) as u64,
            place,
            dtype: self.dtype,
            shape: &self.layout.shape,
            strides: &self.layout.strides,
        };
        // The owner is another view: the memory lives (and stays writable) until the deleter drops it.
        dl::export(&spec, Box::new(self.clone()))
    }

    /// The tensor a DLPack versioned managed tensor describes (`torch.from_dlpack`), without a copy:
    /// CUDA device memory (`kDLCUDA`) of one of cudasem's devices, with its shape, strides (`None`:
    /// dense row-major), `byte_offset` and dtype (bool, uint8, int32, int64, float16, bfloat16,
    /// float32, float64). The producer's deleter runs when the last view of the tensor is gone.
    ///
    /// The producer did the handshake when it made the managed tensor (with the stream the consumer
    /// passed it); cudasem's work on the tensor is then ordered on the stream it runs on, as usual.
    ///
    /// Errors ([`Error::InvalidArgument`] unless said; the managed tensor is dropped, so its deleter
    /// runs): an invalid descriptor, a read-only tensor (cudasem tensors are writable: ask the
    /// producer for a writable export, or copy), host memory (`kDLCPU`, `kDLCUDAHost`) or another
    /// device type, a dtype cudasem has not, negative strides, a device that does not exist
    /// ([`Error::InvalidDevice`]), memory the driver does not know as that device's
    /// ([`Error::InvalidPointer`]).
    pub fn from_dlpack(managed: Dlpack) -> Result<Tensor> {
        const OP: &str = "Tensor::from_dlpack";
        let bad = |reason: String| Error::InvalidArgument { op: OP, reason };
        if managed.flags().contains(DlpackFlags::READ_ONLY) {
            return Err(bad("the DLPack tensor is read-only, and cudasem tensors are writable: ask the producer \
                            for a writable export, or copy the tensor in its library first"
                .into()));
        }
        let t = managed.validate().map_err(|e| bad(format!("invalid DLPack descriptor: {e}")))?;
        let device = match DlPlace::of(OP, t.device())? {
            DlPlace::Cuda(index) => index,
            place => {
                return Err(bad(format!(
                    "the DLPack tensor is in host memory ({place:?}); cudasem imports CUDA device memory (kDLCUDA): \
                     copy it with Tensor::from_slice, or move it to a GPU in its library first"
                )))
            }
        };
        let dtype = dl::dtype_of(OP, t.dtype())?;
        let shape: Vec<usize> = t.shape().iter().map(|&n| n as usize).collect(); // checked >= 0 by validate
        let strides = t.strides_or_compact().map_err(|e| bad(format!("invalid DLPack strides: {e}")))?;
        let strides =
            strides.iter().map(|&s| usize::try_from(s)).collect::<std::result::Result<Vec<_>, _>>().map_err(|_| {
                bad(format!("negative strides {strides:?}: cudasem views have strides >= 0; copy it first"))
            })?;
        let (data, byte_offset, size) = (t.data_ptr() as usize as u64, t.byte_offset(), dtype.size() as u64);
        // Keep the producer's base pointer where the offset is a whole number of elements (the
        // tensor's data_ptr is the same either way).
        let (base, offset) = if data % size == 0 && byte_offset % size == 0 {
            (data, usize::try_from(byte_offset / size).map_err(|_| bad("byte_offset beyond usize".into()))?)
        } else {
            (data.checked_add(byte_offset).ok_or_else(|| bad("data + byte_offset runs past 2^64".into()))?, 0)
        };
        let view = ForeignView { op: OP, base, offset, shape: &shape, strides: Some(&strides), dtype };
        view.wrap(Device::cuda(device), Box::new(managed))
    }
}

impl Tensor {
    /// DLPack's handshake for a tensor on `device`: the consumer's stream waits for the tensor's
    /// current stream and is recorded on its memory.
    fn handshake(&self, device: usize, stream: &DlpackStream) -> Result<DlPlace> {
        if let Some(consumer) = stream.resolve(device)? {
            order_consumer(&consumer, device)?;
            // The per-thread default stream is another stream on each thread: recording it for a
            // later free (on whatever thread drops the last view) would order nothing.
            if *stream != DlpackStream::PerThreadDefault {
                self.storage.record_stream(&consumer)?;
            }
        }
        Ok(DlPlace::Cuda(device))
    }
}

/// Makes `consumer` (a stream of `device`) wait for the work queued so far on `device`'s current
/// stream, unless they are one stream.
fn order_consumer(consumer: &Stream, device: usize) -> Result<()> {
    let producer = current_stream(device)?;
    if *consumer != producer {
        let event = Event::new(EventFlags::default());
        event.record(Some(&producer))?;
        consumer.wait_event(&event)?;
    }
    Ok(())
}
