//! The CUDA driver's core: [`CudaDriver`] (its devices, primary contexts, stream and event
//! tables) and the lookups every operation starts with (`device`, `enter`, `stream`, `event`).
//! The [`Driver`](crate::driver::Driver) trait's implementation forwards to the operation files
//! (`driver_impl.rs`).
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
//!   [`delay`](crate::driver::Driver::delay) kernel's module is loaded once per context and shared
//!   (see `kernels/spin.rs`).
//! * Events live in `events.rs`; device memory, memsets and copies in `memory.rs`; expandable
//!   segments (the `vmm_*` methods) in `vmm.rs`.
//! * Tensor kernels ([`Driver::launch`](crate::driver::Driver::launch)): the kernel wing (`kernels/`): CUDA C in `.cu` files
//!   specialized per (op, dtypes) (`kernels/codegen.rs`), compiled by NVRTC for the device's
//!   architecture and cached in memory and on disk (`kernels/nvrtc.rs`), dispatched with their
//!   parameters by value (`kernels/launch.rs`); matrix products through cuBLASLt
//!   (`kernels/gemm.rs`). The TF32 switch is [`backends`](super::backends).
//! * Pinned host memory and the asynchronous copies between it and the devices live in `host.rs`.

use super::fxmap::FxMap;
use super::graph_table::Graphs;
use super::handles::{make_current, RawCtx, RawEvent, RawStream};
use super::kernels::ctx::Tuning;
use super::kernels::launch::DeviceOps;
use super::kernels::spin::SpinKernel;
use super::status::{describe, driver_error, lock, read, DRIVER};
use super::vmm_table::Vmm;
use crate::config::{CudaSettings, LaunchTuning};
use crate::driver::{EventId, StreamId};
use crate::error::{Error, Result, Sticky};
use cudarc::driver::result as cu;
use cudarc::driver::sys;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// One GPU: its driver ordinal, primary context and per-device state.
pub(super) struct Device {
    /// The `CUdevice` from `cuDeviceGet`.
    pub cu: sys::CUdevice,
    /// Its primary context, retained for the driver's lifetime.
    pub ctx: RawCtx,
    /// The handle of its legacy null stream.
    pub default_stream: StreamId,
    /// Set by [`Driver::fail_next_malloc`](crate::driver::Driver::fail_next_malloc), cleared by the malloc it fails.
    pub fail_next_malloc: AtomicBool,
    /// Set by [`Driver::fail_next_free`](crate::driver::Driver::fail_next_free), cleared by the free it fails.
    pub fail_next_free: AtomicBool,
    /// An error raised in a `Drop` on this device, for the next synchronize ([`Driver::take_error`](crate::driver::Driver::take_error)).
    pub dropped: Sticky,
    /// The `delay` kernel, loaded into this context on first use.
    pub spin: Mutex<Option<SpinKernel>>,
    /// Tensor kernels, scratch memory and the cuBLASLt handle (see `launch.rs`).
    pub ops: DeviceOps,
}

/// What a [`StreamId`] stands for.
#[derive(Debug, Clone, Copy)]
pub(super) struct StreamEntry {
    pub device: usize,
    pub raw: RawStream,
    /// Made (and so destroyed) by this driver; `false` for the null stream and for streams
    /// made elsewhere ([`Driver::import_stream`](crate::driver::Driver::import_stream)).
    pub owned: bool,
}

/// CUDA drivers made so far in the process.
static INSTANCES: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's last stream lookup: `(driver instance, stream handle, entry)`.
    static LAST_STREAM: std::cell::Cell<Option<(u64, u64, StreamEntry)>> = const { std::cell::Cell::new(None) };
}

/// What an [`EventId`] stands for.
#[derive(Debug, Clone, Copy)]
pub(super) struct EventEntry {
    pub device: usize,
    pub raw: RawEvent,
    pub timing: bool,
}

/// [`Driver`](crate::driver::Driver) over the real CUDA driver API (see the [module docs](self)).
pub struct CudaDriver {
    pub(super) devices: Vec<Device>,
    /// Why `devices` is empty, when it is.
    pub(super) unavailable: Option<String>,
    pub(super) next_id: AtomicU64,
    /// This driver's number in the process (the key of the threads' last stream lookups).
    pub(super) instance: u64,
    /// Stream and event tables, with a cheap hasher: every launch looks its stream up.
    pub(super) streams: RwLock<FxMap<u64, StreamEntry>>,
    pub(super) events: RwLock<FxMap<u64, EventEntry>>,
    /// Reserved and mapped ranges of expandable segments, and peer pairs.
    pub(super) vmm: Vmm,
    /// Captured graphs and the captures underway.
    pub(super) graphs: Graphs,
    /// The disk cache of compiled kernels (none: off), from the settings.
    pub(super) kernel_cache: Option<PathBuf>,
    /// The NCCL library to try first, from the settings.
    pub(super) nccl_lib: Option<PathBuf>,
    /// The launch shapes, shared with every device's launcher.
    pub(super) tuning: Arc<Tuning>,
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
    /// The driver with the default settings ([`CudaSettings::default`]).
    fn default() -> Self {
        Self::new(&CudaSettings::default())
    }
}

impl CudaDriver {
    /// Loads `libcuda`, initializes it and retains every device's primary context. `settings`
    /// give the kernel cache's directory, the NCCL library and the launch shapes; the driver
    /// keeps them (nothing of the process's environment is read here but CUDA's own).
    ///
    /// Never panics: when the library is missing, `cuInit` fails, no device is visible or a
    /// device cannot be opened, the driver has no devices and
    /// [`unavailable_reason`](crate::driver::Driver::unavailable_reason) explains why.
    pub fn new(settings: &CudaSettings) -> CudaDriver {
        // `cudarc` panics on a missing symbol; treat that like any other reason to have no GPU.
        const PANICKED: &str = "the CUDA driver library panicked while loading (is libcuda too \
                                old for CUDA 13? update the NVIDIA driver)";
        let probed = std::panic::catch_unwind(probe).unwrap_or_else(|_| Err(PANICKED.to_owned()));
        let (found, unavailable) = match probed {
            Ok(found) => (found, None),
            Err(reason) => (Vec::new(), Some(reason)),
        };
        let kernel_cache = settings.kernel_cache.dir();
        let tuning = Arc::new(Tuning::new(settings.launch_tuning));
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
                ops: DeviceOps::new(kernel_cache.clone(), tuning.clone()),
            });
        }
        CudaDriver {
            next_id: AtomicU64::new(devices.len() as u64 + 1),
            instance: INSTANCES.fetch_add(1, Ordering::Relaxed),
            vmm: Vmm::new(devices.len()),
            graphs: Graphs::default(),
            devices,
            unavailable,
            streams: RwLock::new(streams),
            events: RwLock::new(FxMap::default()),
            kernel_cache,
            nccl_lib: settings.nccl_lib.clone(),
            tuning,
        }
    }

    /// Takes `tuning` for the launches that follow, on every device.
    pub(super) fn retune(&self, tuning: LaunchTuning) {
        self.tuning.set(tuning);
    }

    pub(super) fn no_device(&self) -> Error {
        Error::NoDevice { driver: DRIVER, reason: self.unavailable.clone().unwrap_or_default() }
    }

    pub(super) fn device(&self, device: usize) -> Result<&Device> {
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
    pub(super) fn enter(&self, device: usize) -> Result<&Device> {
        let dev = self.device(device)?;
        // `dev.ctx` was retained in `new` and is released only in `Drop`, so it is live.
        make_current(dev.ctx.0).map_err(|e| driver_error("cuCtxSetCurrent", e))?;
        Ok(dev)
    }

    /// The stream's entry; `_op` (the caller's name) is kept at the call sites for reading.
    pub(super) fn stream(&self, stream: StreamId, _op: &'static str) -> Result<StreamEntry> {
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

    pub(super) fn event(&self, event: EventId, op: &'static str) -> Result<EventEntry> {
        if self.devices.is_empty() {
            return Err(self.no_device());
        }
        // The runtime passes only events it made and has not destroyed.
        read(&self.events).get(&event.0).copied().ok_or_else(|| Error::Internal {
            op,
            reason: format!("event handle {} is not a live event of this CUDA driver", event.0),
        })
    }

    pub(super) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// [`Driver::delay`](crate::driver::Driver::delay): loads the spin kernel on first use and queues it.
    pub(super) fn delay_on(&self, stream: StreamId, duration: Duration) -> Result<()> {
        let s = self.stream(stream, "delay")?;
        if lock(&self.device(s.device)?.spin).is_none() {
            // Loading a module may wait for the whole context to go idle, stalling every thread's
            // calls behind running kernels. So the first delay loads the kernel into every device
            // at once, before any delay runs, and no later delay ever loads one.
            for index in 0..self.devices.len() {
                let dev = self.enter(index)?;
                let mut slot = lock(&dev.spin);
                if slot.is_none() {
                    *slot = Some(SpinKernel::acquire(dev.cu, self.kernel_cache.as_deref())?);
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
