//! Native handles for interop, as torch's `Stream.cuda_stream` and `torch.cuda.ExternalStream`:
//! a stream's `CUstream` and the device's primary `CUcontext`, to launch one's own kernels or
//! call a CUDA library on cudasem's streams (with a tensor's `data_ptr`), and cudasem streams
//! that wrap streams made elsewhere.
//!
//! | torch | cudasem |
//! |---|---|
//! | `s.cuda_stream` | [`Stream::cuda_stream`] |
//! | `torch.cuda.ExternalStream(stream_ptr, device)` | `unsafe` [`Stream::from_external`] |
//! | (the CUDA runtime's primary context) | [`primary_context`] |

use super::{rt, Stream};
use crate::device::IntoCudaDevice;
use crate::error::Result;

impl Stream {
    /// The stream's native handle (`torch.cuda.Stream.cuda_stream`): its `CUstream` as a number
    /// on the CUDA driver (0 for a device's default stream, the legacy null stream), its own
    /// handle number ([`Stream::id`]) on the simulated machine.
    ///
    /// Work queued on the native stream is ordered with cudasem's work on this stream: a kernel
    /// of one's own, launched on it, may read a tensor that cudasem's ops on this stream wrote
    /// (at [`Tensor::data_ptr`](crate::Tensor::data_ptr)), without any synchronization.
    pub fn cuda_stream(&self) -> Result<u64> {
        rt()?.driver.raw_stream(self.driver_id())
    }

    /// A cudasem stream over the native stream `stream_ptr` of `device` (an index, a
    /// [`Device`](crate::Device), `"cuda:N"`, or `None`/`"cuda"` for the current device), made
    /// elsewhere (`torch.cuda.ExternalStream`): cudasem's ops can then run on it, as the current
    /// stream ([`StreamGuard`](crate::cuda::StreamGuard)), ordered with the work
    /// its owner queues there. A value from [`Stream::cuda_stream`] gives back that same stream
    /// (equal handles); 0 is the device's default stream.
    ///
    /// Errors: [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a stream of another
    /// device or CUDA context; [`Error::Unsupported`](crate::Error::Unsupported) on the simulated
    /// machine for anything but its own streams' handles.
    ///
    /// # Safety
    /// `stream_ptr` must be a live `CUstream` of `device`'s primary context (the one the CUDA
    /// runtime API uses, [`primary_context`]), or a value from [`Stream::cuda_stream`], and the
    /// caller must keep it alive for as long as cudasem may use it: while any handle to the
    /// returned stream (or a clone) exists, and until the memory allocated on it, or recorded on
    /// it with `record_stream`, has been freed and the stream synchronized. cudasem never
    /// destroys it.
    #[doc(alias = "ExternalStream")]
    pub unsafe fn from_external(stream_ptr: u64, device: impl IntoCudaDevice) -> Result<Stream> {
        let rt = rt()?;
        let device = rt.device(device)?;
        // SAFETY: the caller's guarantee above is the driver's contract for `import_stream`.
        let (id, priority) = unsafe { rt.driver.import_stream(device, stream_ptr)? };
        let state = &rt.devices[device];
        if state.default_stream == Some(id) {
            return Ok(Stream::from_parts(device, id, 0, true));
        }
        // A stream of the pool keeps the priority the pool gave it, so the handles compare equal.
        let priority = state.pool.priority_of(id).unwrap_or(priority);
        Ok(Stream::from_parts(device, id, priority, false))
    }
}

/// The primary context (`CUcontext`, as a number) of `device` (an index, a
/// [`Device`](crate::Device), `"cuda:N"`, or `None`/`"cuda"` for the current device): the
/// context of every cudasem stream and allocation on the device, and the one the CUDA runtime
/// API and libraries (cuBLAS, NCCL, …) use. [`Error::Unsupported`](crate::Error::Unsupported) on
/// the simulated machine, which has no contexts.
pub fn primary_context(device: impl IntoCudaDevice) -> Result<u64> {
    let rt = rt()?;
    rt.driver.raw_context(rt.device(device)?)
}

/// Checks that `bytes` bytes from `ptr` are memory `device` can address (memory made elsewhere,
/// before a tensor views it: `Tensor::from_blob`, DLPack imports);
/// [`Error::InvalidPointer`](crate::Error::InvalidPointer) otherwise,
/// [`Error::InvalidDevice`](crate::Error::InvalidDevice) for a device that does not exist.
pub(crate) fn check_foreign_memory(device: usize, ptr: u64, bytes: usize) -> Result<()> {
    let rt = rt()?;
    let device = rt.check(device)?;
    rt.driver.check_foreign_range(device, crate::driver::DevicePtr(ptr), bytes)
}
