//! Test hooks and raw device buffers, for proving ordering and error paths on any driver.
//!
//! * [`delay`] keeps a stream busy for a known time (a spinning one-thread kernel on CUDA; on the
//!   sim driver a sleeping worker, and exactly `duration` on the simulated clock), so a test can
//!   show that work is queued, not done, and that `wait_stream` / `wait_event` really order streams.
//! * [`fail_next_malloc`] makes the device's next driver allocation fail, [`fail_next_free`] its
//!   next driver free (an error in `Drop` is then returned by the next `synchronize`).
//! * [`RawBuffer`] is untyped device memory with stream-ordered fill / copy / read.
//! * [`begin_allocate_to_pool`], [`end_allocate_to_pool`], [`release_pool`] route allocations to a
//!   private pool as a CUDA graph's capture does, and [`block_pool`] says which pool a block came
//!   from, for tests of private pools without a capture.
//! * [`take_nvtx_records`] reads back the NVTX ranges and marks the calling thread emitted.
//! * [`has_devices`] and [`skip`] decide whether a test case that the machine cannot run is
//!   skipped (with a message) or fails: `CUDASEM_REQUIRE_GPU=n` says the run must cover every
//!   case that needs at most `n` GPUs (NVRTC and the like count as needing one) on the CUDA driver.

use crate::device::IntoCudaDevice;
use crate::driver::{DeviceAllocation, DevicePtr};
use crate::error::{Error, Result};
use crate::runtime::{rt, Stream, NO_OPERANDS};
use std::time::Duration;

/// Queues work on `stream` that keeps it busy for `duration`; returns at once.
pub fn delay(stream: &Stream, duration: Duration) -> Result<()> {
    stream.delay(duration)
}

/// The NVTX ranges, marks and profiler starts/stops the calling thread emitted since it last
/// asked (oldest first; its last [`LOG_CAPACITY`](crate::cuda::nvtx::LOG_CAPACITY)), on every
/// driver: `cuda::nvtx`'s calls and, with operation ranges on (`cuda::nvtx::emit_nvtx`,
/// `CUDASEM_NVTX=1`), one push and pop around each operation. Its open ranges stay open.
pub fn take_nvtx_records() -> Vec<crate::cuda::nvtx::Record> {
    crate::runtime::nvtx::take_records()
}

/// Sets the simulated machine's schedule from now on (`CUDASEM_SIM_SCHEDULE`): `Some(seed)` an
/// adversarial one — streams' work held back in hostile but legal orders, reproducible per seed —
/// `None` the default. No effect on real GPUs.
pub fn set_sim_schedule(seed: Option<u64>) {
    crate::driver::sim::schedule::set(seed);
}

/// The simulated machine's schedule in force (`None`: the default).
pub fn sim_schedule() -> Option<u64> {
    crate::driver::sim::schedule::get()
}

/// The process's configuration, resolved once: the one `cudasem::init` gave, else the
/// environment's (read now, if nothing read it before; a later `init` is then refused). Every
/// layer received its settings from this value.
pub fn config() -> Result<crate::Config> {
    crate::runtime::resolved_config()
}

/// The runtime's driver (starting the runtime), for the crate's own tests and benches that
/// reach below the public API; outside any stability promise.
#[cfg(feature = "unstable-internals")]
#[doc(hidden)]
pub fn driver() -> Result<&'static std::sync::Arc<dyn crate::driver::Driver>> {
    crate::runtime::driver()
}

/// How many GPUs this run must cover: `n` from `CUDASEM_REQUIRE_GPU=n` (`0` when unset or empty).
///
/// The rule: with `CUDASEM_REQUIRE_GPU=1` every test case that needs a GPU (or NVRTC, or virtual
/// memory management) must run on the CUDA driver, so a skip is a failure; with `=2` also every
/// case that needs two GPUs (and peer access between them); cases that need more GPUs than
/// required still skip with their message.
///
/// # Panics
/// When the variable holds something other than a number (a typo must not turn skips back on).
pub fn required_gpus() -> usize {
    match std::env::var("CUDASEM_REQUIRE_GPU") {
        Ok(v) if !v.trim().is_empty() => v.trim().parse().unwrap_or_else(|_| {
            panic!("CUDASEM_REQUIRE_GPU={v:?}: expected the number of GPUs the run must cover, such as 1")
        }),
        _ => 0,
    }
}

/// A test case cannot run on this machine: it needs `gpus` GPUs (1 for anything every GPU run has,
/// such as NVRTC) and `why` says what is missing. Prints `skipped: <why>` and returns, so that the
/// caller returns early — or panics with `why` when the run must cover such cases
/// ([`required_gpus`]).
#[track_caller]
pub fn skip(gpus: usize, why: &str) {
    let required = required_gpus();
    if gpus <= required {
        panic!("CUDASEM_REQUIRE_GPU={required}: this case must run, but {why}");
    }
    eprintln!("skipped: {why}");
}

/// Whether the current driver has at least `n` devices; when it has not, [`skip`]s the case (a
/// failure where the run must cover `n` GPUs). Where the run requires GPUs, the driver must be
/// CUDA's, whatever `n`: passing on the simulated machine would test no GPU.
#[track_caller]
pub fn has_devices(n: usize) -> bool {
    let (driver, count) = (crate::cuda::driver_name(), crate::cuda::device_count());
    let required = required_gpus();
    if required > 0 && driver != "cuda" {
        panic!("CUDASEM_REQUIRE_GPU={required}, but the tests run on the {driver} driver (set CUDASEM_DRIVER=cuda)");
    }
    if count >= n {
        return true;
    }
    skip(n, &format!("this test needs {n} CUDA device(s), the {driver} driver has {count}"));
    false
}

/// Makes the next driver allocation on `device` fail with [`Error::Injected`].
pub fn fail_next_malloc(device: impl IntoCudaDevice) -> Result<()> {
    let rt = rt()?;
    rt.driver.fail_next_malloc(rt.device(device)?)
}

/// Makes the next driver free on `device` fail with [`Error::Injected`] (the memory stays
/// allocated). A free that fails in `Drop` is returned by the device's next
/// [`synchronize`](crate::cuda::synchronize) (or a synchronize of one of its streams).
pub fn fail_next_free(device: impl IntoCudaDevice) -> Result<()> {
    let rt = rt()?;
    rt.driver.fail_next_free(rt.device(device)?)
}

/// Untyped device memory, freed on drop: straight from the driver ([`RawBuffer::new`]) or a block
/// of the caching allocator ([`RawBuffer::cached`]).
#[derive(Debug)]
pub struct RawBuffer {
    device: usize,
    ptr: DevicePtr,
    len: usize,
    /// The driver's memory ([`RawBuffer::new`]); `None` for a block of the caching allocator.
    raw: Option<DeviceAllocation>,
}

impl RawBuffer {
    /// Allocates `len` bytes on `device` (`None`: the current device) straight from the driver.
    pub fn new(device: impl IntoCudaDevice, len: usize) -> Result<RawBuffer> {
        let rt = rt()?;
        let device = rt.device(device)?;
        let raw = DeviceAllocation::new(&rt.driver, device, len)?;
        Ok(RawBuffer { device, ptr: raw.ptr(), len, raw: Some(raw) })
    }

    /// A block of `len` bytes from the caching allocator of `device` (`None`: the current device),
    /// ordered on `stream` (`None`: that device's current stream); it goes back to the cache on drop.
    pub fn cached(device: impl IntoCudaDevice, len: usize, stream: Option<&Stream>) -> Result<RawBuffer> {
        let device = rt()?.device(device)?;
        let ptr = crate::runtime::caching_allocator_alloc(len, device, stream)?;
        Ok(RawBuffer { device, ptr: DevicePtr(ptr), len, raw: None })
    }

    /// For a [`RawBuffer::cached`] block: it is also used on `stream`, so on drop its memory is
    /// reused only once the work queued on `stream` so far has completed (`Tensor.record_stream`).
    pub fn record_stream(&self, stream: &Stream) -> Result<()> {
        if self.raw.is_some() {
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
        stream.memset_d8(self.ptr, value, self.len, NO_OPERANDS)
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
            return stream.memcpy_dtod(self.ptr, src.ptr, self.len, NO_OPERANDS);
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
        stream.memcpy_peer((self.device, self.ptr), (src.device, src.ptr), self.len, NO_OPERANDS)
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
        let Some(raw) = self.raw.take() else {
            // Stream-ordered: the block is reused only by its stream (or after recorded streams).
            if let Err(e) = crate::runtime::caching_allocator_delete(self.ptr.0) {
                crate::runtime::record_device_error(self.device, e);
            }
            return;
        };
        if let Ok(rt) = rt() {
            // Work still queued may use the buffer: let it finish first, as cudaFree does. A
            // failure is kept for the device's next synchronize.
            let freed = rt.driver.synchronize_device(self.device).and_then(|()| raw.free());
            if let Err(e) = freed {
                crate::runtime::record_device_error(self.device, e);
            }
        }
    }
}

/// Routes every allocation on `device` (`None`: the current device) made on one of `streams` to
/// the private pool `pool`, as a CUDA graph's capture does for its capturing stream (PyTorch's
/// `beginAllocateToPool` with a stream filter): the pool is made (use count 1) or takes one more
/// use, and a capture is underway on the device until [`end_allocate_to_pool`].
pub fn begin_allocate_to_pool(
    device: impl IntoCudaDevice,
    pool: crate::cuda::MemPoolId,
    streams: &[&Stream],
) -> Result<()> {
    crate::runtime::begin_allocate_to_streams(rt()?.device(device)?, pool, streams)
}

/// Ends the routing of [`begin_allocate_to_pool`] (`endAllocateToPool`; the use count stays).
pub fn end_allocate_to_pool(device: impl IntoCudaDevice, pool: crate::cuda::MemPoolId) -> Result<()> {
    crate::runtime::end_allocate_to_pool(rt()?.device(device)?, pool)
}

/// `releasePool`: one use of the private pool less (at 0 it is freeable).
pub fn release_pool(device: impl IntoCudaDevice, pool: crate::cuda::MemPoolId) -> Result<()> {
    crate::runtime::release_pool(rt()?.device(device)?, pool)
}

/// The private pool the live caching-allocator block at `ptr` on `device` came from (`None`: the
/// default pools, or no live block starts there), e.g. `block_pool(t.device(), t.data_ptr())`
/// for a tensor's storage.
pub fn block_pool(device: impl IntoCudaDevice, ptr: u64) -> Result<Option<crate::cuda::MemPoolId>> {
    let rt = rt()?;
    Ok(rt.allocator(rt.device(device)?)?.block_pool(DevicePtr(ptr)))
}

/// A kernel loaded from PTX and launched through cudarc's `result` API alone, on a stream's
/// native handle with tensors' addresses (the CUDA driver only): what a program that launches
/// its own kernels with cudarc by hand pays per launch, the bench's comparator for
/// [`Kernel::launch`](crate::cuda::Kernel::launch). It keeps its tensors alive.
pub struct RawCudarcLaunch {
    kernel: crate::driver::cuda::RawCudarcKernel,
}

impl std::fmt::Debug for RawCudarcLaunch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RawCudarcLaunch")
    }
}

impl RawCudarcLaunch {
    /// The kernel `name` of `ptx`, to launch on `stream` with the addresses of `args` (contiguous
    /// CUDA tensors of the stream's device, at most 16) as its parameters.
    /// [`Error::Unsupported`] on the simulated machine.
    pub fn new(ptx: &str, name: &str, stream: &Stream, args: &[&crate::Tensor]) -> Result<RawCudarcLaunch> {
        if crate::runtime::driver_name() != "cuda" {
            return Err(Error::Unsupported {
                op: "RawCudarcLaunch",
                driver: crate::runtime::driver_name(),
                reason: "a raw cudarc launch needs the CUDA driver".into(),
            });
        }
        let device = crate::Device::cuda(stream.device());
        if let Some(t) = args.iter().find(|t| t.device() != device || !t.is_contiguous()) {
            return Err(Error::InvalidArgument {
                op: "RawCudarcLaunch",
                reason: format!("every argument must be a contiguous tensor of {device}; one is on {}", t.device()),
            });
        }
        let ptrs = args.iter().map(|t| t.data_ptr()).collect();
        let owner: Vec<crate::Tensor> = args.iter().map(|t| (*t).clone()).collect();
        let handles = (crate::runtime::primary_context(stream.device())?, stream.cuda_stream()?);
        let kernel = crate::driver::cuda::RawCudarcKernel::load(ptx, name, handles, ptrs, Box::new(owner))?;
        Ok(RawCudarcLaunch { kernel })
    }

    /// Makes the kernel's context current on this thread (once, before a run of launches, as a
    /// program using cudarc by hand does).
    pub fn make_current(&self) -> Result<()> {
        self.kernel.make_current()
    }

    /// One `cuLaunchKernel` of `grid` blocks of `block` threads.
    pub fn launch(&self, grid: u32, block: u32) -> Result<()> {
        self.kernel.launch(grid, block)
    }
}

/// The CUBIN of the CUDA C `source` for `device`'s compute capability, compiled by the crate's
/// NVRTC path (which needs no GPU: on the simulated machine too), for tests of
/// [`Kernel::from_cubin`](crate::cuda::Kernel::from_cubin). [`Error::Unsupported`] where NVRTC
/// is missing or emits only PTX for that architecture; NVRTC's log for a compile error.
pub fn nvrtc_cubin(source: &str, device: impl IntoCudaDevice) -> Result<Vec<u8>> {
    let p = crate::runtime::get_device_properties(device)?;
    crate::driver::cuda::nvrtc_cubin(source, p.major, p.minor)
}
