//! The real-GPU backend: NVIDIA's driver API through `cudarc`'s thin `result`/`sys` layers.
//!
//! `libcuda`, `libnvrtc` (for [`Driver::delay`] and the tensor kernels) and `libcublasLt` (for
//! matrix products) are loaded at run time, so this
//! compiles and runs everywhere; where no driver or GPU is found, [`CudaDriver::new`] returns a
//! driver with no devices whose [`Driver::unavailable_reason`] says why.
//!
//! Design:
//! * One **primary context** per device, retained in [`CudaDriver::new`] and released on drop.
//!   Every driver call for a device first makes that context current on the calling thread
//!   so any thread may call any method. `enter` asks the driver for the thread's current context
//!   (`cuCtxGetCurrent`, a thread-local read) and sets it only when it differs — always right, even
//!   when other code on the thread (another CUDA library) changed the current context.
//! * Streams and events are opaque numbers from one counter, mapped to raw handles in two
//!   tables. Entries are copied out before the driver call, so no lock is held while a call
//!   blocks (`cuStreamSynchronize`, `cuEventSynchronize`). The runtime guarantees a handle is not
//!   destroyed while another call still uses it.
//! * Each device's default stream is the legacy null stream of its primary context, as in
//!   PyTorch; created streams are `CU_STREAM_NON_BLOCKING` (they do not synchronize with it).
//! * Primary contexts are shared with every other `CudaDriver` (and CUDA library) of the process,
//!   so this driver never waits for the whole context where its own streams suffice, and the
//!   [`delay`](Driver::delay) kernel's module is loaded once per context and shared
//!   (see `kernels.rs`).
//! * Events live in `events.rs`; device memory, memsets and copies in `memory.rs`; expandable
//!   segments (the `vmm_*` methods) in `vmm.rs`.
//! * Tensor kernels ([`Driver::launch`]): CUDA C generated per (op, dtypes) (`codegen.rs`),
//!   compiled by NVRTC for the device's architecture and cached in memory and on disk
//!   (`module_cache.rs`), dispatched with their parameters by value (`launch.rs`, `reduce.rs`);
//!   matrix products through cuBLASLt (`gemm.rs`). The TF32 switch is [`backends`].
//! * Pinned host memory and the asynchronous copies between it and the devices live in `host.rs`.

use super::{CaptureMode, DeviceProperties, DevicePtr, Driver, EventId, GraphId, HostPtr, StreamId};
use crate::error::{Error, Result, Sticky};
use crate::kernel::KernelOp;
use cudarc::driver::result::{self as cu, DriverError};
use cudarc::driver::sys::{self, CUresult};
use kernels::SpinKernel;
use module_cache::FxMap;
use status::{describe, driver_error, lock, out_of_memory, read, ready, write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError, RwLock};
use std::time::Duration;

/// This backend's name, as [`Driver::name`] reports it.
const DRIVER: &str = "cuda";

/// Makes `ctx` current on this thread, unless it already is.
fn make_current(ctx: sys::CUcontext) -> std::result::Result<(), DriverError> {
    if matches!(cu::ctx::get_current(), Ok(Some(c)) if c == ctx) {
        return Ok(());
    }
    // SAFETY: the caller passes a live, retained context.
    unsafe { cu::ctx::set_current(ctx) }
}

/// Declares a `Copy` newtype around a raw driver handle that may cross threads.
macro_rules! raw_handle {
    ($(#[$doc:meta])* $name:ident($raw:ty)) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        struct $name($raw);

        // SAFETY:
        // - the wrapped value is an opaque driver handle that Rust never dereferences;
        // - it is only passed by value to the CUDA driver API, which is thread-safe, and every call first
        //   makes the owning context current on the calling thread.
        unsafe impl Send for $name {}
        // SAFETY:
        // - as for `Send`: shared access only copies the handle out;
        // - the driver serializes concurrent use of one handle internally.
        unsafe impl Sync for $name {}
    };
}

// Declared after `raw_handle!` so that they can use it.
pub mod backends;
mod codegen;
#[cfg(test)]
mod codegen_tests;
mod ctx;
mod elementwise;
mod events;
mod gemm;
mod gemv;
mod gemv_templates;
mod graph;
mod host;
#[cfg(test)]
mod kernel_tests;
mod kernels;
mod launch;
mod memory;
mod module_cache;
mod nccl;
mod reduce;
mod reduce_layouts;
mod reduce_templates;
#[cfg(test)]
mod resource_tests;
mod softmax_layouts;
mod softmax_templates;
#[cfg(test)]
mod source_hash_tests;
mod status;
mod templates;
#[cfg(test)]
mod tests;
mod vmm;

#[doc(hidden)]
pub use ctx::set_tuning;
pub use nccl::describe as nccl_library;

raw_handle!(
    /// A retained primary context (`CUcontext`).
    RawCtx(sys::CUcontext)
);
raw_handle!(
    /// A stream (`CUstream`); null is the context's legacy default stream.
    RawStream(sys::CUstream)
);
raw_handle!(
    /// An event (`CUevent`).
    RawEvent(sys::CUevent)
);

/// One GPU: its driver ordinal, primary context and per-device state.
struct Device {
    /// The `CUdevice` from `cuDeviceGet`.
    cu: sys::CUdevice,
    /// Its primary context, retained for the driver's lifetime.
    ctx: RawCtx,
    /// The handle of its legacy null stream.
    default_stream: StreamId,
    /// Set by [`Driver::fail_next_malloc`], cleared by the malloc it fails.
    fail_next_malloc: AtomicBool,
    /// Set by [`Driver::fail_next_free`], cleared by the free it fails.
    fail_next_free: AtomicBool,
    /// An error raised in a `Drop` on this device, for the next synchronize ([`Driver::take_error`]).
    dropped: Sticky,
    /// The `delay` kernel, loaded into this context on first use.
    spin: Mutex<Option<SpinKernel>>,
    /// Tensor kernels, scratch memory and the cuBLASLt handle (see `launch.rs`).
    ops: launch::DeviceOps,
}

/// What a [`StreamId`] stands for.
#[derive(Debug, Clone, Copy)]
struct StreamEntry {
    device: usize,
    raw: RawStream,
    /// Made (and so destroyed) by this driver; `false` for the null stream and for streams
    /// made elsewhere ([`Driver::import_stream`]).
    owned: bool,
}

/// CUDA drivers made so far in the process.
static INSTANCES: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's last stream lookup: `(driver instance, stream handle, entry)`.
    static LAST_STREAM: std::cell::Cell<Option<(u64, u64, StreamEntry)>> = const { std::cell::Cell::new(None) };
}

/// What an [`EventId`] stands for.
#[derive(Debug, Clone, Copy)]
struct EventEntry {
    device: usize,
    raw: RawEvent,
    timing: bool,
}

/// [`Driver`] over the real CUDA driver API (see the [module docs](self)).
pub struct CudaDriver {
    devices: Vec<Device>,
    /// Why `devices` is empty, when it is.
    unavailable: Option<String>,
    next_id: AtomicU64,
    /// This driver's number in the process (the key of the threads' last stream lookups).
    instance: u64,
    /// Stream and event tables, with a cheap hasher: every launch looks its stream up.
    streams: RwLock<FxMap<u64, StreamEntry>>,
    events: RwLock<FxMap<u64, EventEntry>>,
    /// Reserved and mapped ranges of expandable segments, and peer pairs.
    vmm: vmm::Vmm,
    /// Captured graphs and the captures underway.
    graphs: graph::Graphs,
}

impl std::fmt::Debug for CudaDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDriver")
            .field("devices", &self.devices.len())
            .field("unavailable", &self.unavailable)
            .finish_non_exhaustive()
    }
}

impl Default for CudaDriver {
    fn default() -> Self {
        Self::new()
    }
}

impl CudaDriver {
    /// Loads `libcuda`, initializes it and retains every device's primary context.
    ///
    /// Never panics: when the library is missing, `cuInit` fails, no device is visible or a
    /// device cannot be opened, the driver has no devices and
    /// [`unavailable_reason`](Driver::unavailable_reason) explains why.
    pub fn new() -> CudaDriver {
        // `cudarc` panics on a missing symbol; treat that like any other reason to have no GPU.
        const PANICKED: &str = "the CUDA driver library panicked while loading (is libcuda too \
                                old for CUDA 13? update the NVIDIA driver)";
        let probed = std::panic::catch_unwind(probe).unwrap_or_else(|_| Err(PANICKED.to_owned()));
        let (found, unavailable) = match probed {
            Ok(found) => (found, None),
            Err(reason) => (Vec::new(), Some(reason)),
        };
        let mut streams = FxMap::default();
        let mut devices = Vec::with_capacity(found.len());
        for (index, (cu, ctx)) in found.into_iter().enumerate() {
            let id = index as u64 + 1;
            let raw = RawStream(std::ptr::null_mut());
            streams.insert(id, StreamEntry { device: index, raw, owned: false });
            devices.push(Device {
                cu,
                ctx,
                default_stream: StreamId(id),
                fail_next_malloc: AtomicBool::new(false),
                fail_next_free: AtomicBool::new(false),
                dropped: Sticky::default(),
                spin: Mutex::new(None),
                ops: launch::DeviceOps::new(),
            });
        }
        CudaDriver {
            next_id: AtomicU64::new(devices.len() as u64 + 1),
            instance: INSTANCES.fetch_add(1, Ordering::Relaxed),
            vmm: vmm::Vmm::new(devices.len()),
            graphs: graph::Graphs::default(),
            devices,
            unavailable,
            streams: RwLock::new(streams),
            events: RwLock::new(FxMap::default()),
        }
    }

    fn no_device(&self) -> Error {
        Error::NoDevice { driver: DRIVER, reason: self.unavailable.clone().unwrap_or_default() }
    }

    fn device(&self, device: usize) -> Result<&Device> {
        if self.devices.is_empty() {
            return Err(self.no_device());
        }
        self.devices.get(device).ok_or(Error::InvalidDevice {
            index: device,
            count: self.devices.len(),
            driver: DRIVER,
        })
    }

    /// Makes `device`'s primary context current on this thread and returns the device.
    fn enter(&self, device: usize) -> Result<&Device> {
        let dev = self.device(device)?;
        // `dev.ctx` was retained in `new` and is released only in `Drop`, so it is live.
        make_current(dev.ctx.0).map_err(|e| driver_error("cuCtxSetCurrent", e))?;
        Ok(dev)
    }

    /// The stream's entry; `_op` (the caller's name) is kept at the call sites for reading.
    fn stream(&self, stream: StreamId, _op: &'static str) -> Result<StreamEntry> {
        // Streams are never removed from the table while the driver lives, so the thread's last
        // lookup of this driver stays true (a loop of launches on one stream skips the lock).
        if let Some((instance, id, entry)) = LAST_STREAM.get() {
            if instance == self.instance && id == stream.0 {
                return Ok(entry);
            }
        }
        if self.devices.is_empty() {
            return Err(self.no_device());
        }
        let entry = read(&self.streams).get(&stream.0).copied().ok_or(Error::UnknownStream { stream: stream.0 })?;
        LAST_STREAM.set(Some((self.instance, stream.0, entry)));
        Ok(entry)
    }

    fn event(&self, event: EventId, op: &'static str) -> Result<EventEntry> {
        if self.devices.is_empty() {
            return Err(self.no_device());
        }
        // The runtime passes only events it made and has not destroyed.
        read(&self.events).get(&event.0).copied().ok_or_else(|| Error::Internal {
            op,
            reason: format!("event handle {} is not a live event of this CUDA driver", event.0),
        })
    }

    fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// [`Driver::delay`]: loads the spin kernel on first use and queues it.
    fn delay_on(&self, stream: StreamId, duration: Duration) -> Result<()> {
        let s = self.stream(stream, "delay")?;
        if lock(&self.device(s.device)?.spin).is_none() {
            // Loading a module may wait for the whole context to go idle, stalling every thread's
            // calls behind running kernels. So the first delay loads the kernel into every device
            // at once, before any delay runs, and no later delay ever loads one.
            for index in 0..self.devices.len() {
                let dev = self.enter(index)?;
                let mut slot = lock(&dev.spin);
                if slot.is_none() {
                    *slot = Some(SpinKernel::acquire(dev.cu)?);
                }
            }
        }
        let dev = self.enter(s.device)?;
        let kernel = (*lock(&dev.spin)).ok_or_else(|| Error::Unsupported {
            op: "delay",
            driver: DRIVER,
            reason: "the spin kernel is not loaded".into(),
        })?;
        // SAFETY:
        // the kernel was loaded into this device's context, which `enter` made current, and the stream is
        // live and of that context.
        unsafe { kernel.launch(s.raw.0, duration) }
    }
}

/// Finds the driver and opens every device: `(CUdevice, retained primary context)` per ordinal.
fn probe() -> std::result::Result<Vec<(sys::CUdevice, RawCtx)>, String> {
    // SAFETY: only asks the dynamic loader whether libcuda can be opened; nothing in it is called.
    if !unsafe { sys::is_culib_present() } {
        return Err("libcuda.so not found by the dynamic loader (no NVIDIA driver is installed, \
                    or its library directory is not on LD_LIBRARY_PATH)"
            .to_owned());
    }
    cu::init().map_err(|e| format!("cuInit failed: {}", describe(e)))?;
    let count = cu::device::get_count().map_err(|e| format!("cuDeviceGetCount failed: {}", describe(e)))?;
    if count <= 0 {
        return Err("the NVIDIA driver reports 0 CUDA devices (check CUDA_VISIBLE_DEVICES \
                    and that the GPU is visible to this container or VM)"
            .to_owned());
    }
    let mut found: Vec<(sys::CUdevice, RawCtx)> = Vec::with_capacity(count as usize);
    for ordinal in 0..count {
        let opened = cu::device::get(ordinal).and_then(|dev| {
            // SAFETY: `dev` was just returned by `cuDeviceGet`.
            let ctx = unsafe { cu::primary_ctx::retain(dev) }?;
            Ok((dev, RawCtx(ctx)))
        });
        match opened {
            Ok(pair) => found.push(pair),
            Err(e) => {
                for (dev, _) in &found {
                    // SAFETY: each of these contexts was retained once above; released once here.
                    let _ = unsafe { cu::primary_ctx::release(*dev) };
                }
                return Err(format!(
                    "could not open cuda:{ordinal}: {} (hide a broken GPU with CUDA_VISIBLE_DEVICES)",
                    describe(e)
                ));
            }
        }
    }
    Ok(found)
}

impl Driver for CudaDriver {
    fn name(&self) -> &'static str {
        DRIVER
    }

    fn device_count(&self) -> usize {
        self.devices.len()
    }

    fn unavailable_reason(&self) -> Option<String> {
        self.unavailable.clone()
    }

    fn properties(&self, device: usize) -> Result<DeviceProperties> {
        let dev = self.enter(device)?;
        let name = cu::device::get_name(dev.cu).map_err(|e| driver_error("cuDeviceGetName", e))?;
        // SAFETY: `dev.cu` was returned by `cuDeviceGet`.
        let total_memory = unsafe { cu::device::total_mem(dev.cu) }.map_err(|e| driver_error("cuDeviceTotalMem", e))?;
        let attribute = |attr: sys::CUdevice_attribute| -> Result<u32> {
            // SAFETY: `dev.cu` was returned by `cuDeviceGet`; `attr` is a valid attribute.
            let value = unsafe { cu::device::get_attribute(dev.cu, attr) }
                .map_err(|e| driver_error("cuDeviceGetAttribute", e))?;
            Ok(u32::try_from(value).unwrap_or(0))
        };
        use sys::CUdevice_attribute::*;
        Ok(DeviceProperties {
            name,
            total_memory,
            multi_processor_count: attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            major: attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            minor: attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        })
    }

    fn mem_get_info(&self, device: usize) -> Result<(usize, usize)> {
        self.enter(device)?;
        cu::mem_get_info().map_err(|e| driver_error("cuMemGetInfo", e))
    }

    fn can_access_peer(&self, device: usize, peer: usize) -> Result<bool> {
        let dev = self.enter(device)?;
        let other = self.device(peer)?;
        if device == peer {
            return Ok(false);
        }
        let mut can = 0;
        // SAFETY: both ordinals came from `cuDeviceGet`; `can` is a valid out-pointer.
        unsafe { sys::cuDeviceCanAccessPeer(&mut can, dev.cu, other.cu) }
            .result()
            .map_err(|e| driver_error("cuDeviceCanAccessPeer", e))?;
        Ok(can != 0)
    }

    fn enable_peer_access(&self, device: usize, peer: usize) -> Result<()> {
        if device == peer {
            self.device(device)?;
            return Ok(());
        }
        if !self.can_access_peer(device, peer)? {
            return Err(Error::PeerAccessUnsupported { from: device, to: peer });
        }
        let peer_ctx = self.device(peer)?.ctx;
        self.enter(device)?;
        // SAFETY:
        // - `device`'s context is current and `peer_ctx` is a live retained primary context;
        // - flags must be 0.
        match unsafe { sys::cuCtxEnablePeerAccess(peer_ctx.0, 0) } {
            // Mapped ranges of expandable segments need their own grant (`cuMemSetAccess`).
            CUresult::CUDA_SUCCESS | CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {
                vmm::peer_enabled(self, device, peer)
            }
            CUresult::CUDA_ERROR_PEER_ACCESS_UNSUPPORTED => {
                Err(Error::PeerAccessUnsupported { from: device, to: peer })
            }
            other => Err(driver_error("cuCtxEnablePeerAccess", DriverError(other))),
        }
    }

    fn synchronize_device(&self, device: usize) -> Result<()> {
        self.enter(device)?;
        cu::ctx::synchronize().map_err(|e| driver_error("cuCtxSynchronize", e))
    }

    fn stream_priority_range(&self, device: usize) -> Result<(i32, i32)> {
        self.enter(device)?;
        cu::stream::get_priority_range().map_err(|e| driver_error("cuCtxGetStreamPriorityRange", e))
    }

    fn default_stream(&self, device: usize) -> Result<StreamId> {
        Ok(self.device(device)?.default_stream)
    }

    fn create_stream(&self, device: usize, priority: i32) -> Result<StreamId> {
        self.enter(device)?;
        let raw = cu::stream::create_with_priority(cu::stream::StreamKind::NonBlocking, priority)
            .map_err(|e| driver_error("cuStreamCreateWithPriority", e))?;
        let id = self.next_id();
        let raw = RawStream(raw);
        write(&self.streams).insert(id, StreamEntry { device, raw, owned: true });
        Ok(StreamId(id))
    }

    fn raw_stream(&self, stream: StreamId) -> Result<u64> {
        Ok(self.stream(stream, "Stream::cuda_stream")?.raw.0 as usize as u64)
    }

    fn raw_context(&self, device: usize) -> Result<u64> {
        Ok(self.device(device)?.ctx.0 as usize as u64)
    }

    unsafe fn import_stream(&self, device: usize, raw: u64) -> Result<(StreamId, i32)> {
        let dev = self.enter(device)?;
        let op = "Stream::from_external";
        // 0 is the legacy default stream, as is `CU_STREAM_LEGACY` (0x1).
        if raw <= 1 {
            return Ok((dev.default_stream, 0));
        }
        let handle = raw as usize as sys::CUstream;
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: the caller guarantees `handle` is a live stream; `ctx` is a valid out-pointer.
        unsafe { sys::cuStreamGetCtx(handle, &mut ctx) }.result().map_err(|e| driver_error("cuStreamGetCtx", e))?;
        if ctx != dev.ctx.0 {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("stream {raw:#x} belongs to another CUDA context than cuda:{device}'s primary context"),
            });
        }
        let mut priority: std::ffi::c_int = 0;
        // SAFETY: as above; `priority` is a valid out-pointer.
        unsafe { sys::cuStreamGetPriority(handle, &mut priority) }
            .result()
            .map_err(|e| driver_error("cuStreamGetPriority", e))?;
        let mut streams = write(&self.streams);
        if let Some((&id, _)) = streams.iter().find(|(_, e)| e.raw.0 == handle) {
            return Ok((StreamId(id), priority));
        }
        let id = self.next_id();
        streams.insert(id, StreamEntry { device, raw: RawStream(handle), owned: false });
        Ok((StreamId(id), priority))
    }

    fn stream_query(&self, stream: StreamId) -> Result<bool> {
        let s = self.stream(stream, "stream_query")?;
        self.enter(s.device)?;
        // SAFETY: the stream belongs to the current context and lives until the driver drops.
        ready("cuStreamQuery", unsafe { sys::cuStreamQuery(s.raw.0) })
    }

    fn stream_synchronize(&self, stream: StreamId) -> Result<()> {
        let s = self.stream(stream, "stream_synchronize")?;
        self.enter(s.device)?;
        // SAFETY: the stream belongs to the current context and lives until the driver drops.
        unsafe { cu::stream::synchronize(s.raw.0) }.map_err(|e| driver_error("cuStreamSynchronize", e))
    }

    fn stream_wait_event(&self, stream: StreamId, event: EventId) -> Result<()> {
        let s = self.stream(stream, "stream_wait_event")?;
        let ev = self.event(event, "stream_wait_event")?;
        self.enter(s.device)?;
        let flags = sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT;
        // SAFETY:
        // - both handles are live (the runtime destroys an event only when unused);
        // - the event may belong to another device's context, which CUDA allows.
        unsafe { cu::stream::wait_event(s.raw.0, ev.raw.0, flags) }.map_err(|e| driver_error("cuStreamWaitEvent", e))
    }

    fn event_create(&self, device: usize, enable_timing: bool, blocking: bool) -> Result<EventId> {
        events::create(self, device, enable_timing, blocking)
    }

    fn event_destroy(&self, event: EventId) {
        events::destroy(self, event)
    }

    fn event_record(&self, event: EventId, stream: StreamId) -> Result<()> {
        events::record(self, event, stream)
    }

    fn event_query(&self, event: EventId) -> Result<bool> {
        events::query(self, event)
    }

    fn event_synchronize(&self, event: EventId) -> Result<()> {
        events::synchronize(self, event)
    }

    fn event_elapsed_ms(&self, start: EventId, end: EventId) -> Result<f32> {
        events::elapsed_ms(self, start, end)
    }

    fn malloc(&self, device: usize, bytes: usize) -> Result<DevicePtr> {
        graph::maybe_relaxed(|| memory::malloc(self, device, bytes))
    }

    fn free(&self, device: usize, ptr: DevicePtr) -> Result<()> {
        memory::free(self, device, ptr)
    }

    fn memset_d8(&self, dst: DevicePtr, value: u8, bytes: usize, stream: StreamId) -> Result<()> {
        memory::memset_d8(self, dst, value, bytes, stream)
    }

    fn memcpy_htod(&self, dst: DevicePtr, src: &[u8], stream: StreamId) -> Result<()> {
        memory::htod(self, dst, src, stream)
    }

    fn memcpy_dtoh(&self, dst: &mut [u8], src: DevicePtr, stream: StreamId) -> Result<()> {
        memory::dtoh(self, dst, src, stream)
    }

    fn memcpy_dtod(&self, dst: DevicePtr, src: DevicePtr, bytes: usize, stream: StreamId) -> Result<()> {
        memory::dtod(self, dst, src, bytes, stream)
    }

    fn memcpy_peer(
        &self,
        dst_device: usize,
        dst: DevicePtr,
        src_device: usize,
        src: DevicePtr,
        bytes: usize,
        stream: StreamId,
    ) -> Result<()> {
        memory::peer(self, dst_device, dst, src_device, src, bytes, stream)
    }

    fn host_alloc(&self, bytes: usize) -> Result<HostPtr> {
        host::alloc(self, bytes)
    }

    fn host_free(&self, ptr: HostPtr) -> Result<()> {
        host::free(self, ptr)
    }

    unsafe fn memcpy_htod_async(&self, dst: DevicePtr, src: HostPtr, bytes: usize, stream: StreamId) -> Result<()> {
        // SAFETY: the caller upholds this method's contract, which is `htod_async`'s.
        unsafe { host::htod_async(self, dst, src, bytes, stream) }
    }

    unsafe fn memcpy_dtoh_async(&self, dst: HostPtr, src: DevicePtr, bytes: usize, stream: StreamId) -> Result<()> {
        // SAFETY: the caller upholds this method's contract, which is `dtoh_async`'s.
        unsafe { host::dtoh_async(self, dst, src, bytes, stream) }
    }

    fn vmm_granularity(&self, device: usize) -> Option<usize> {
        vmm::granularity(self, device)
    }

    fn vmm_reserve(&self, device: usize, bytes: usize) -> Result<DevicePtr> {
        graph::maybe_relaxed(|| vmm::reserve(self, device, bytes))
    }

    fn vmm_map(&self, device: usize, at: DevicePtr, bytes: usize) -> Result<()> {
        graph::maybe_relaxed(|| vmm::map(self, device, at, bytes))
    }

    fn vmm_unmap(&self, device: usize, at: DevicePtr, bytes: usize) -> Result<()> {
        vmm::unmap(self, device, at, bytes)
    }

    fn vmm_release(&self, device: usize, base: DevicePtr, bytes: usize) -> Result<()> {
        vmm::release(self, device, base, bytes)
    }

    fn launch(&self, stream: StreamId, op: &KernelOp) -> Result<()> {
        op.validate()?;
        let s = self.stream(stream, "launch")?;
        let dev = self.enter(s.device)?;
        graph::maybe_relaxed(|| launch::launch(dev, s.raw, stream.0, op))
    }

    fn launch_dense_binary(&self, stream: StreamId, op: &crate::kernel::DenseBinary) -> Result<()> {
        op.validate()?;
        let s = self.stream(stream, "launch")?;
        let dev = self.enter(s.device)?;
        graph::maybe_relaxed(|| launch::dense_binary(dev, s.raw, stream.0, op))
    }

    fn begin_capture(&self, stream: StreamId, mode: CaptureMode) -> Result<()> {
        self.cu_begin_capture(stream, mode)
    }

    fn end_capture(&self, stream: StreamId) -> Result<GraphId> {
        self.cu_end_capture(stream)
    }

    fn graph_launch(&self, graph: GraphId, stream: StreamId) -> Result<()> {
        self.cu_graph_launch(graph, stream)
    }

    fn graph_destroy(&self, graph: GraphId) {
        self.cu_graph_destroy(graph)
    }

    fn graph_node_count(&self, graph: GraphId) -> Result<usize> {
        self.cu_graph_node_count(graph)
    }

    fn graph_debug_dot(&self, graph: GraphId, path: &std::path::Path) -> Result<()> {
        self.cu_graph_debug_dot(graph, path)
    }

    fn delay(&self, stream: StreamId, duration: Duration) -> Result<()> {
        graph::maybe_relaxed(|| self.delay_on(stream, duration))
    }

    fn fail_next_malloc(&self, device: usize) -> Result<()> {
        self.device(device)?.fail_next_malloc.store(true, Ordering::SeqCst);
        Ok(())
    }

    fn fail_next_free(&self, device: usize) -> Result<()> {
        self.device(device)?.fail_next_free.store(true, Ordering::SeqCst);
        Ok(())
    }

    fn record_error(&self, device: usize, error: Error) {
        if let Some(d) = self.devices.get(device) {
            d.dropped.record(error);
        }
    }

    fn take_error(&self, device: usize) -> Result<()> {
        self.device(device)?.dropped.take()
    }

    fn comm_unique_id(&self) -> Result<Vec<u8>> {
        nccl::unique_id()
    }

    fn comm_init_rank(
        &self,
        device: usize,
        world: usize,
        rank: usize,
        id: &[u8],
    ) -> Result<Box<dyn super::comm::Comm>> {
        nccl::init_rank(self.device(device)?.ctx, world, rank, id)
    }

    fn comm_init_all(&self, devices: &[usize]) -> Result<Vec<Box<dyn super::comm::Comm>>> {
        let with_ctx = devices.iter().map(|&d| Ok((d, self.device(d)?.ctx))).collect::<Result<Vec<_>>>()?;
        nccl::init_all(&with_ctx)
    }
}

impl Drop for CudaDriver {
    /// Best effort: waits for this driver's streams, frees what is left of expandable segments,
    /// destroys events and streams, gives back the spin kernel, then releases the primary contexts
    /// (the last release frees the context's memory).
    ///
    /// It waits for its own streams, not with `cuCtxSynchronize`: the primary contexts are shared
    /// with the other drivers of the process, whose work is none of this driver's business.
    fn drop(&mut self) {
        if self.devices.is_empty() {
            return;
        }
        self.destroy_graphs();
        let events = std::mem::take(self.events.get_mut().unwrap_or_else(PoisonError::into_inner));
        let streams = std::mem::take(self.streams.get_mut().unwrap_or_else(PoisonError::into_inner));
        // Streams made elsewhere may be gone by now: only this driver's own are waited for.
        for s in streams.values().filter(|s| s.owned || s.raw.0.is_null()) {
            if self.enter(s.device).is_ok() {
                // SAFETY: a live stream of the current context (null: its legacy default stream).
                let _ = unsafe { cu::stream::synchronize(s.raw.0) };
            }
        }
        // Peers' streams may have used a device's mapped ranges: all streams are idle by now.
        vmm::release_all(self);
        for (index, dev) in self.devices.iter().enumerate() {
            let current = self.enter(index).is_ok();
            if current {
                for ev in events.values().filter(|ev| ev.device == index) {
                    // SAFETY:
                    // - made by `cuEventCreate` in this context;
                    // - the table is gone, so this is its only destruction.
                    let _ = unsafe { cu::event::destroy(ev.raw.0) };
                }
                for s in streams.values().filter(|s| s.device == index && s.owned) {
                    // SAFETY: made by `cuStreamCreateWithPriority` in this context; destroyed once.
                    let _ = unsafe { cu::stream::destroy(s.raw.0) };
                }
            }
            if let Some(kernel) = lock(&dev.spin).take() {
                kernel.release(dev.cu, current);
            }
            if current {
                dev.ops.release();
            }
        }
        // Every thread's cache may name a context released below.
        for dev in &self.devices {
            // SAFETY: retained exactly once in `new`; released exactly once here.
            let _ = unsafe { cu::primary_ctx::release(dev.cu) };
        }
        // SAFETY:
        // a null context is documented to unbind the thread's current context, which may have been one just
        // released.
        let _ = unsafe { cu::ctx::set_current(std::ptr::null_mut()) };
    }
}
