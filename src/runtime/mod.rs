//! The runtime: the device registry over the driver, the thread-local context (current device and
//! current stream per device), guards, the stream pools, events, the peer table, and the device and
//! pinned host memory allocators.

mod capture;
mod context;
mod current;
mod devices;
mod errors;
mod event;
mod external;
mod graph;
mod guard;
mod host_memory;
mod mem_pool;
mod memory;
mod pool;
mod stream;
mod work;

pub(crate) use capture::active as capture_underway;
pub(crate) use capture::KeepAlive;
pub(crate) use current::current_of;
pub use current::{current_stream, default_stream, set_stream, with_stream, StreamGuard};
pub use devices::*;
pub use errors::{get_last_error, peek_at_last_error};
pub use event::{Event, EventFlags};
pub use external::primary_context;
pub use graph::{graph, is_current_stream_capturing, CUDAGraph, CaptureErrorMode, GraphOptions};

/// Whether any stream capture is underway (the tensor layer's fast check).
#[inline]
pub(crate) fn capture_active() -> bool {
    capture::active()
}

/// Refuses host tensor work on a capturing thread (unless its capture allows it).
#[inline]
pub(crate) fn check_host_work(call: &'static str) -> crate::error::Result<()> {
    capture::check_host_work(call)
}
pub(crate) use errors::record as record_device_error;
pub use guard::{with_device, DeviceGuard};
pub use host_memory::{
    host_empty_cache, host_memory_stats, reset_accumulated_host_memory_stats, reset_peak_host_memory_stats,
};
#[cfg(all(test, loom))]
pub(crate) use host_memory::{BlockUses, UseEvents};
pub(crate) use host_memory::{PinnedBlock, PinnedRead, PinnedWrite};
pub(crate) use mem_pool::{begin_allocate_to_streams, end_allocate_to_pool, release_pool};
pub use mem_pool::{graph_pool_handle, use_mem_pool, MemPool};
pub(crate) use memory::DeviceBlock;
pub use memory::*;
pub use stream::Stream;
pub(crate) use work::{comm_init_all, comm_init_rank, comm_unique_id, Operand, NO_OPERANDS};

use crate::alloc::{AllocatorSettings, CachingAllocator};
use crate::device::IntoCudaDevice;
use crate::driver::{self, Driver, StreamId};
use crate::error::{Error, Result};
use pool::Pool;
use std::sync::{Arc, Mutex, OnceLock};

/// Per-device state shared by all threads.
pub(crate) struct DeviceState {
    pub pool: Pool,
    /// `peer_enabled[j]`: this device may read device `j`'s memory (set by `enable_peer_access`).
    pub peer_enabled: Mutex<Vec<bool>>,
    /// The device's caching allocator, made on first use.
    pub allocator: OnceLock<CachingAllocator>,
    /// The device's default stream, asked of the driver once (`None` if it could not say; then
    /// every lookup asks it and reports its error).
    pub default_stream: Option<StreamId>,
    /// Asynchronous errors pending on the device (`errors.rs`).
    pub errors: errors::DeviceErrors,
}

/// The process-wide runtime.
pub(crate) struct Runtime {
    pub driver: Arc<dyn Driver>,
    pub devices: Vec<DeviceState>,
    /// `CUDASEM_ALLOC_CONF`, parsed once; an invalid value is reported by every allocating call.
    pub alloc_settings: Result<AllocatorSettings>,
    /// Pinned host memory and its caching allocator, made on first use.
    host: OnceLock<host_memory::HostMemory>,
}

impl Runtime {
    fn new(driver: Arc<dyn Driver>) -> Runtime {
        let n = driver.device_count();
        let devices = (0..n)
            .map(|d| DeviceState {
                pool: Pool::default(),
                peer_enabled: Mutex::new(vec![false; n]),
                allocator: OnceLock::new(),
                default_stream: driver.default_stream(d).ok(),
                errors: errors::DeviceErrors::default(),
            })
            .collect();
        // Errors still pending at exit are written to stderr, not lost.
        driver::exit::at_exit(errors::report_at_exit);
        Runtime { driver, devices, alloc_settings: crate::config::allocator_settings(), host: OnceLock::new() }
    }

    /// Checks a device index against the device count.
    #[inline]
    pub fn check(&self, index: usize) -> Result<usize> {
        if index >= self.devices.len() {
            return Err(self.bad_index(index));
        }
        Ok(index)
    }

    /// Why `index` is not a device: there are none, or it is past the count.
    #[cold]
    #[inline(never)]
    fn bad_index(&self, index: usize) -> Error {
        if self.devices.is_empty() {
            return self.no_device();
        }
        Error::InvalidDevice { index, count: self.devices.len(), driver: self.driver.name() }
    }

    pub fn no_device(&self) -> Error {
        Error::NoDevice {
            driver: self.driver.name(),
            reason: self.driver.unavailable_reason().unwrap_or_else(|| "no devices".into()),
        }
    }

    /// The checked index that `device` names: an index, or the thread's current device for
    /// `None`, `"cuda"` and `Device::Cuda(None)` (resolved here, at the moment of use).
    #[inline]
    pub fn device(&self, device: impl IntoCudaDevice) -> Result<usize> {
        self.resolve(device.cuda_device()?)
    }

    /// Resolves `None` to the thread's current device and checks the index.
    #[inline]
    pub fn resolve(&self, device: Option<usize>) -> Result<usize> {
        match device {
            Some(i) => self.check(i),
            None => {
                let i = context::current_index();
                self.check(i)
            }
        }
    }
}

/// Resolves `None` to the thread's current device and checks the index (for the tensor layer).
#[inline]
pub(crate) fn resolve_device(device: Option<usize>) -> Result<usize> {
    rt()?.resolve(device)
}

static RUNTIME: OnceLock<Result<Runtime>> = OnceLock::new();

/// The process-wide runtime, built on first use over the driver the environment selects.
pub(crate) fn rt() -> Result<&'static Runtime> {
    RUNTIME
        .get_or_init(|| {
            // The allocator settings are checked as the runtime starts: an invalid
            // `CUDASEM_ALLOC_CONF` is refused at once, by every call, not at the first allocation.
            let rt = Runtime::new(driver::global()?.clone());
            rt.alloc_settings.clone()?;
            Ok(rt)
        })
        .as_ref()
        .map_err(Clone::clone)
}
