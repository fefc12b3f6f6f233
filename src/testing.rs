//! Test hooks and raw device buffers, for proving ordering and error paths on any driver.
//!
//! * [`delay`] keeps a stream busy for a known time (a sleeping worker on the sim driver, a
//!   spinning one-thread kernel on CUDA), so a test can show that work is queued, not done,
//!   and that `wait_stream` / `wait_event` really order streams.
//! * [`fail_next_malloc`] makes the device's next driver allocation fail.
//! * [`RawBuffer`] is untyped device memory with stream-ordered fill / copy / read.

use crate::device::IntoCudaDevice;
use crate::driver::DevicePtr;
use crate::error::{Error, Result};
use crate::runtime::{rt, Stream};
use std::time::Duration;

/// Queues work on `stream` that keeps it busy for `duration`; returns at once.
pub fn delay(stream: &Stream, duration: Duration) -> Result<()> {
    stream.delay(duration)
}

/// Makes the next driver allocation on `device` fail with [`Error::Injected`].
pub fn fail_next_malloc(device: impl IntoCudaDevice) -> Result<()> {
    let rt = rt()?;
    rt.driver.fail_next_malloc(rt.device(device)?)
}

/// Untyped device memory, freed on drop: straight from the driver ([`RawBuffer::new`]) or a block
/// of the caching allocator ([`RawBuffer::cached`]).
#[derive(Debug)]
pub struct RawBuffer {
    device: usize,
    ptr: DevicePtr,
    len: usize,
    cached: bool,
}

impl RawBuffer {
    /// Allocates `len` bytes on `device` (`None`: the current device) straight from the driver.
    pub fn new(device: impl IntoCudaDevice, len: usize) -> Result<RawBuffer> {
        let rt = rt()?;
        let device = rt.device(device)?;
        let ptr = rt.driver.malloc(device, len)?;
        Ok(RawBuffer { device, ptr, len, cached: false })
    }

    /// A block of `len` bytes from the caching allocator of `device` (`None`: the current device),
    /// ordered on `stream` (`None`: that device's current stream); it goes back to the cache on drop.
    pub fn cached(device: impl IntoCudaDevice, len: usize, stream: Option<&Stream>) -> Result<RawBuffer> {
        let device = rt()?.device(device)?;
        let ptr = crate::runtime::caching_allocator_alloc(len, device, stream)?;
        Ok(RawBuffer { device, ptr: DevicePtr(ptr), len, cached: true })
    }

    /// For a [`RawBuffer::cached`] block: it is also used on `stream`, so on drop its memory is
    /// reused only once the work queued on `stream` so far has completed (`Tensor.record_stream`).
    pub fn record_stream(&self, stream: &Stream) -> Result<()> {
        if !self.cached {
            return Err(Error::InvalidArgument {
                op: "RawBuffer::record_stream",
                reason: "only blocks of the caching allocator (RawBuffer::cached) track stream uses".into(),
            });
        }
        crate::runtime::caching_allocator_record_stream(self.ptr.0, stream)
    }

    /// The device holding the buffer.
    pub fn device(&self) -> usize {
        self.device
    }

    /// The buffer's device address.
    pub fn ptr(&self) -> u64 {
        self.ptr.0
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has zero bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn same_device(&self, stream: &Stream, op: &'static str) -> Result<()> {
        if stream.device() != self.device {
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "the buffer is on cuda:{} but the stream is on cuda:{}; use a stream of the buffer's device",
                    self.device,
                    stream.device()
                ),
            });
        }
        Ok(())
    }

    /// Queues a fill of every byte with `value` on `stream`.
    pub fn fill(&self, value: u8, stream: &Stream) -> Result<()> {
        self.same_device(stream, "RawBuffer::fill")?;
        stream.memset_d8(self.ptr, value, self.len)
    }

    /// Copies `data` into the buffer in `stream` order; returns once `data` was consumed.
    pub fn write(&self, data: &[u8], stream: &Stream) -> Result<()> {
        self.same_device(stream, "RawBuffer::write")?;
        check_len("RawBuffer::write", self.len, data.len())?;
        stream.memcpy_htod(self.ptr, data)
    }

    /// Reads the buffer in `stream` order (waits for the work queued before it on `stream`).
    pub fn read(&self, stream: &Stream) -> Result<Vec<u8>> {
        self.same_device(stream, "RawBuffer::read")?;
        let mut out = vec![0u8; self.len];
        stream.memcpy_dtoh(&mut out, self.ptr)?;
        Ok(out)
    }

    /// Queues a copy of `src` into this buffer on `stream` (of either buffer's device); between
    /// devices this is a peer copy.
    pub fn copy_from(&self, src: &RawBuffer, stream: &Stream) -> Result<()> {
        check_len("RawBuffer::copy_from", self.len, src.len)?;
        if src.device == self.device {
            self.same_device(stream, "RawBuffer::copy_from")?;
            return stream.memcpy_dtod(self.ptr, src.ptr, self.len);
        }
        if stream.device() != self.device && stream.device() != src.device {
            return Err(Error::InvalidArgument {
                op: "RawBuffer::copy_from",
                reason: format!(
                    "a copy from cuda:{} to cuda:{} must run on a stream of one of them, not cuda:{}",
                    src.device,
                    self.device,
                    stream.device()
                ),
            });
        }
        stream.memcpy_peer((self.device, self.ptr), (src.device, src.ptr), self.len)
    }
}

fn check_len(op: &'static str, dst: usize, src: usize) -> Result<()> {
    if dst != src {
        return Err(Error::InvalidArgument {
            op,
            reason: format!("sizes differ: destination {dst} bytes, source {src} bytes"),
        });
    }
    Ok(())
}

impl Drop for RawBuffer {
    fn drop(&mut self) {
        if self.cached {
            // Stream-ordered: the block is reused only by its stream (or after recorded streams).
            let _ = crate::runtime::caching_allocator_delete(self.ptr.0);
            return;
        }
        if let Ok(rt) = rt() {
            // Work still queued may use the buffer: let it finish first, as cudaFree does.
            let _ = rt.driver.synchronize_device(self.device);
            let _ = rt.driver.free(self.device, self.ptr);
        }
    }
}
