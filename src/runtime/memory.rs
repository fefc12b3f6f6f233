//! `torch.cuda`'s memory functions, backed by one [`CachingAllocator`] per device over the driver.

use super::{rt, Runtime, Stream};
use crate::alloc::{
    AllocatorSettings, CachingAllocator, DriverMemory, MemPoolId, MemoryHistory, MemoryStats, OutOfMemoryInfo, Snapshot,
};
use crate::device::IntoCudaDevice;
use crate::driver::DevicePtr;
use crate::error::{Error, Result};
use std::sync::Arc;

impl Runtime {
    /// The device's caching allocator, made on first use with the process's allocator settings.
    pub(crate) fn allocator(&self, device: usize) -> Result<&CachingAllocator> {
        // Made already.
        if let Some(a) = self.devices.get(device).and_then(|d| d.allocator.get()) {
            return Ok(a);
        }
        let device = self.check(device)?;
        Ok(self.devices[device].allocator.get_or_init(|| {
            let memory = Arc::new(DriverMemory::new(self.driver.clone(), device));
            let a = CachingAllocator::new(device, memory, self.settings());
            for f in self.observers() {
                a.attach_out_of_memory_observer(f);
            }
            a
        }))
    }

    /// The allocator settings in force.
    fn settings(&self) -> AllocatorSettings {
        self.alloc_settings.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The out-of-memory observers attached so far (given to allocators made later).
    fn observers(&self) -> Vec<crate::alloc::OutOfMemoryObserver> {
        OBSERVERS.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The allocators made so far (devices never allocated on hold nothing).
    fn allocators(&self) -> impl Iterator<Item = &CachingAllocator> {
        self.devices.iter().filter_map(|d| d.allocator.get())
    }
}

/// A block of a device's caching allocator, owned: freed (back to the cache of the stream it was
/// allocated on) when dropped. What tensor storages hold.
pub(crate) struct DeviceBlock {
    device: usize,
    ptr: DevicePtr,
    /// The device's allocator (the runtime lives for the whole process), kept so that dropping
    /// the block looks nothing up.
    alloc: &'static CachingAllocator,
    /// Why the block's contents are undefined: a collective that was to write it failed (boxed:
    /// every device tensor carries the slot, almost always empty).
    poison: std::sync::OnceLock<Box<Error>>,
    /// The stream it was allocated on (its uses there need no record).
    stream: crate::driver::StreamId,
}

impl DeviceBlock {
    /// `bytes` bytes (uninitialized) from the caching allocator of `stream`'s device, for use on
    /// `stream`: from the private pool of the most recent routing entry (a capture,
    /// `use_mem_pool`) whose filter passes the stream, else from the default pools (the
    /// allocator's malloc decides, with one relaxed load when nothing is routed).
    #[inline]
    pub fn new(bytes: usize, stream: &Stream) -> Result<DeviceBlock> {
        let device = stream.device();
        let alloc = rt()?.allocator(device)?;
        let ptr = alloc.malloc(bytes, stream.driver_id())?;
        if super::sanitizer::enabled() {
            super::sanitizer::allocated(device, ptr.0, bytes, stream.driver_id());
        }
        Ok(DeviceBlock { device, ptr, alloc, poison: std::sync::OnceLock::new(), stream: stream.driver_id() })
    }

    /// The device holding the block.
    #[inline]
    pub fn device(&self) -> usize {
        self.device
    }

    /// The address of the block's first byte (null for an empty block).
    #[inline]
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// The private pool the block came from (`None`: the default pools, or an empty block).
    #[allow(dead_code)] // called by the CUDA-graph capture
    pub fn pool(&self) -> Option<MemPoolId> {
        self.alloc.block_pool(self.ptr)
    }

    /// Marks the block's contents undefined because of `error` (a collective that was to write
    /// it failed): host reads of it return the error for as long as the block lives. The first
    /// error is kept.
    pub fn poison(&self, error: &Error) {
        let _ = self.poison.set(Box::new(error.clone()));
    }

    /// The error that made the block's contents undefined, if any.
    #[inline]
    pub fn poisoned(&self) -> Result<()> {
        match self.poison.get() {
            None => Ok(()),
            Some(e) => Err(Error::clone(e)),
        }
    }

    /// Marks the block as used on `stream` (a stream of its device, checked by the caller): once
    /// freed, it is reused only after the work queued on `stream` until now has completed.
    pub fn record_stream(&self, stream: &Stream) -> Result<()> {
        self.alloc.record_stream(self.ptr, stream.driver_id())?;
        if super::sanitizer::enabled() {
            super::sanitizer::record_stream(self.device, self.ptr.0, stream.driver_id());
        }
        Ok(())
    }

    /// [`DeviceBlock::record_stream`] when `stream` (of the block's device) is not the one the
    /// block was allocated on (there nothing needs recording: no lock is taken).
    #[inline]
    pub fn record_use(&self, stream: &Stream) -> Result<()> {
        if stream.driver_id() == self.stream || self.ptr.0 == 0 {
            return Ok(());
        }
        self.record_stream(stream)
    }
}

impl Drop for DeviceBlock {
    fn drop(&mut self) {
        if super::sanitizer::enabled() {
            super::sanitizer::freed(self.device, self.ptr.0, self.alloc.block_size(self.ptr));
        }
        // Back to the cache of the stream it was allocated on: reused only by work queued there
        // later (stream order), as PyTorch does. A failure is kept for the next synchronize.
        if let Err(e) = self.alloc.free(self.ptr) {
            crate::runtime::record_device_error(self.device, e);
        }
    }
}

/// The out-of-memory observers of the process, in the order they were attached.
static OBSERVERS: std::sync::RwLock<Vec<crate::alloc::OutOfMemoryObserver>> = std::sync::RwLock::new(Vec::new());

/// The allocator settings in force (`cudasem::init`'s, else `CUDASEM_ALLOC_CONF`'s, as
/// [`set_allocator_settings`] changed them since).
pub fn allocator_settings() -> Result<AllocatorSettings> {
    Ok(rt()?.settings())
}

/// `torch.cuda.memory._set_allocator_settings(conf)`: changes the caching allocator's settings
/// of every device while running, for the allocations that follow (cached blocks stay where
/// they are). `conf` has `CUDASEM_ALLOC_CONF`'s syntax; as in PyTorch, `max_split_size_mb`,
/// `roundup_power2_divisions` and `garbage_collection_threshold` return to their defaults
/// unless `conf` sets them, and the other keys keep their values unless set (see
/// [`AllocatorSettings::apply`]). A bad key or value is [`Error::InvalidConfig`], and nothing
/// changes.
pub fn set_allocator_settings(conf: &str) -> Result<()> {
    let rt = rt()?;
    let mut settings = rt.alloc_settings.write().unwrap_or_else(|e| e.into_inner());
    let new = settings.apply(conf)?;
    for a in rt.allocators() {
        a.set_settings(new.clone());
    }
    *settings = new;
    Ok(())
}

/// `torch._C._cuda_attach_out_of_memory_observer(f)`: `f` is called, after the observers
/// attached before it, each time an allocation on any device fails for lack of memory, before
/// the [`Error::OutOfMemory`] is returned, with PyTorch's `(device, alloc, device_total,
/// device_free)` and the allocator's figures in an [`OutOfMemoryInfo`]. No lock of the allocator
/// is held while it runs: it may call [`memory_snapshot`], [`memory_stats`], free memory or
/// allocate (an allocation failing inside an observer does not call the observers again).
pub fn attach_out_of_memory_observer(f: impl Fn(&OutOfMemoryInfo) + Send + Sync + 'static) -> Result<()> {
    let rt = rt()?;
    let f: crate::alloc::OutOfMemoryObserver = Arc::new(f);
    // Under the list's lock, so that an allocator made meanwhile gets `f` exactly once.
    let mut list = OBSERVERS.write().unwrap_or_else(|e| e.into_inner());
    list.push(f.clone());
    for a in rt.allocators() {
        a.attach_out_of_memory_observer(f.clone());
    }
    Ok(())
}

/// `reset_accumulated_memory_stats(device)`: the `allocated` and `freed` totals of every
/// statistic and the counters (`num_alloc_retries`, `num_ooms`, `num_sync_all_streams`,
/// `num_device_alloc`, `num_device_free`) go back to 0; `current` and `peak` stay.
pub fn reset_accumulated_memory_stats(device: impl IntoCudaDevice) -> Result<()> {
    with_allocator(device, |a| a.reset_accumulated_stats())
}

fn with_allocator<R>(device: impl IntoCudaDevice, f: impl FnOnce(&CachingAllocator) -> R) -> Result<R> {
    let rt = rt()?;
    Ok(f(rt.allocator(rt.device(device)?)?))
}

/// Bytes held by live blocks (rounded sizes) on the device (`None`: the current device).
pub fn memory_allocated(device: impl IntoCudaDevice) -> Result<usize> {
    with_allocator(device, |a| a.memory_allocated())
}

/// Peak of [`memory_allocated`] since the start or the last [`reset_peak_memory_stats`].
pub fn max_memory_allocated(device: impl IntoCudaDevice) -> Result<usize> {
    with_allocator(device, |a| a.max_memory_allocated())
}

/// Bytes the caching allocator holds from the driver on the device.
pub fn memory_reserved(device: impl IntoCudaDevice) -> Result<usize> {
    with_allocator(device, |a| a.memory_reserved())
}

/// Peak of [`memory_reserved`].
pub fn max_memory_reserved(device: impl IntoCudaDevice) -> Result<usize> {
    with_allocator(device, |a| a.max_memory_reserved())
}

/// Resets the `peak` of every statistic to its current value.
pub fn reset_peak_memory_stats(device: impl IntoCudaDevice) -> Result<()> {
    with_allocator(device, |a| a.reset_peak_stats())
}

/// Every statistic, with PyTorch's keys (`allocated_bytes.all.current`, `num_alloc_retries`, …).
pub fn memory_stats(device: impl IntoCudaDevice) -> Result<MemoryStats> {
    with_allocator(device, |a| a.memory_stats())
}

/// A readable table of the device's allocator statistics, like PyTorch's.
pub fn memory_summary(device: impl IntoCudaDevice) -> Result<String> {
    with_allocator(device, |a| a.memory_summary())
}

/// Returns every cached, unused segment of every device to the driver.
pub fn empty_cache() -> Result<()> {
    let rt = rt()?;
    for a in rt.allocators() {
        a.empty_cache()?;
    }
    Ok(())
}

/// Caps what the allocator may reserve on the device to `fraction` of its memory (0 to 1).
pub fn set_per_process_memory_fraction(fraction: f64, device: impl IntoCudaDevice) -> Result<()> {
    with_allocator(device, |a| a.set_memory_fraction(fraction))?
}

/// The cap set by [`set_per_process_memory_fraction`] (1.0 when none).
pub fn get_per_process_memory_fraction(device: impl IntoCudaDevice) -> Result<f64> {
    with_allocator(device, |a| a.memory_fraction())
}

/// A raw block of `size` bytes from the caching allocator, for a program's own kernels, on
/// `device` (`None`: current) and ordered on `stream` (`None`: the device's current stream).
/// Give it back with [`caching_allocator_delete`].
pub fn caching_allocator_alloc(size: usize, device: impl IntoCudaDevice, stream: Option<&Stream>) -> Result<u64> {
    let rt = rt()?;
    let device = rt.device(device)?;
    let stream = match stream {
        Some(s) if s.device() != device => {
            return Err(Error::InvalidArgument {
                op: "caching_allocator_alloc",
                reason: format!("the stream is on cuda:{} but the block is asked on cuda:{device}", s.device()),
            })
        }
        Some(s) => s.clone(),
        None => super::current_of(device)?,
    };
    Ok(rt.allocator(device)?.raw_alloc(size, stream.driver_id())?.0)
}

/// Frees a block from [`caching_allocator_alloc`] (it returns to the cache).
/// Deleting the null pointer (what a zero-byte request returns) does nothing, as in PyTorch.
pub fn caching_allocator_delete(ptr: u64) -> Result<()> {
    if ptr == 0 {
        return Ok(());
    }
    let rt = rt()?;
    for a in rt.allocators() {
        if a.block_size(DevicePtr(ptr)).is_some() {
            return a.raw_delete(DevicePtr(ptr));
        }
    }
    Err(Error::InvalidPointer {
        device: rt.resolve(None).unwrap_or(0),
        ptr,
        reason: "not a live block of the caching allocator (freed twice, or not from caching_allocator_alloc?)".into(),
    })
}

/// Marks a block from [`caching_allocator_alloc`] as used on `stream` too: once freed, it is
/// reused only after the work queued on `stream` until now has completed (`Tensor.record_stream`).
pub fn caching_allocator_record_stream(ptr: u64, stream: &Stream) -> Result<()> {
    let rt = rt()?;
    rt.allocator(stream.device())?.record_stream(DevicePtr(ptr), stream.driver_id())
}

/// Segments and blocks of every device's allocator, plus the recorded history
/// (see [`record_memory_history`]); export with [`Snapshot::to_json`] / [`Snapshot::to_pickle`]
/// (the pickle opens in PyTorch's memory_viz).
#[doc(alias = "_snapshot")]
pub fn memory_snapshot() -> Result<Snapshot> {
    let rt = rt()?;
    // One entry per device, so `device_traces[i]` is device i's history, as PyTorch lays it out.
    let mut all = Snapshot::default();
    for d in 0..rt.devices.len() {
        all.merge(rt.allocator(d)?.snapshot());
    }
    Ok(all)
}

/// Starts (or with `enabled = false` stops) recording allocator events on every device, keeping
/// the last `max_entries` of each (`torch.cuda.memory._record_memory_history`).
/// Records no stack traces: [`record_memory_history_with`] chooses them.
#[doc(alias = "_record_memory_history")]
pub fn record_memory_history(enabled: bool, max_entries: usize) -> Result<()> {
    let rt = rt()?;
    for d in 0..rt.devices.len() {
        rt.allocator(d)?.record_history(enabled, max_entries);
    }
    Ok(())
}

/// `torch.cuda.memory._record_memory_history(enabled, context, stacks, max_entries)` on every
/// device: with [`Stacks::All`](crate::alloc::Stacks::All) each allocation (and with context
/// `All` each free) captures its backtrace, resolved to `{filename, line, name}` frames only
/// when the snapshot is serialized; the events of [`memory_snapshot`]'s `device_traces` and its
/// active blocks carry them (`frames`, first the caller's own line), in the JSON and the
/// pickle. [`MemoryHistory::off`] stops and clears.
///
/// ```
/// use cudasem::cuda::{self, MemoryHistory};
/// cuda::record_memory_history_with(MemoryHistory::new().max_entries(10_000))?;
/// let t = cudasem::Tensor::zeros([256], cudasem::DType::F32, cudasem::Device::cuda(0))?;
/// let snapshot = cuda::memory_snapshot()?;
/// assert!(snapshot.device_traces[0].iter().any(|e| !e.frames.is_empty()));
/// # drop(t);
/// cuda::record_memory_history_with(MemoryHistory::off())?;
/// # Ok::<(), cudasem::Error>(())
/// ```
#[doc(alias = "_record_memory_history")]
pub fn record_memory_history_with(history: MemoryHistory) -> Result<()> {
    let rt = rt()?;
    for d in 0..rt.devices.len() {
        rt.allocator(d)?.record_history_with(history);
    }
    Ok(())
}
