//! The runtime: the device registry over the driver, the thread-local context (current device and
//! current stream per device), guards, the stream pools, events, the peer table, and the device and
//! pinned host memory allocators.

mod capture;
mod context;
mod current;
mod device_errors;
mod devices;
mod errors;
mod event;
mod external;
mod graph;
mod guard;
mod host_alloc;
mod host_memory;
mod mem_pool;
mod memory;
pub mod nvtx;
mod pool;
pub mod profiler;
mod registry;
mod rng_slots;
pub mod sanitizer;
mod stream;
mod stream_handle;
mod sync_debug;
mod telemetry;
mod work;

pub(crate) use capture::active as capture_underway;
pub(crate) use capture::KeepAlive;
pub(crate) use capture::RngReplay;
pub(crate) use rng_slots::rng_slot;

/// The capture `stream` belongs to, if any (the tensor layer's random draws register their
/// generator with it: [`rng_draw`]).
#[inline]
pub(crate) fn rng_draw(
    stream: &Stream,
    id: u64,
    blocks: u64,
    make: impl FnOnce() -> crate::error::Result<(crate::kernel::DevicePtr, KeepAlive, RngReplay)>,
) -> crate::error::Result<Option<(crate::kernel::DevicePtr, u64)>> {
    if !capture::active() {
        return Ok(None);
    }
    match capture::of_stream(stream.driver_id()) {
        Some(c) => c.rng_draw(id, blocks, make).map(Some),
        None => Ok(None),
    }
}
pub(crate) use current::current_of;
pub use current::{current_stream, default_stream, set_stream, with_stream, StreamGuard};
pub use devices::*;
pub use errors::{get_last_error, peek_at_last_error};
pub use event::{Event, EventFlags};
pub(crate) use external::check_foreign_memory;
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
#[cfg(feature = "unstable-internals")]
pub(crate) use registry::driver;
pub use registry::init;
pub(crate) use registry::{resolve_device, resolved_config, rt, set_launch_tuning, Runtime};
pub(crate) use sanitizer::Span as SanitizerSpan;
pub use stream_handle::Stream;
pub use sync_debug::{get_sync_debug_mode, set_sync_debug_mode, SyncDebugMode};
pub use telemetry::{
    clock_rate, device_memory_used, list_gpu_processes, memory_usage, power_draw, temperature, utilization,
};
pub(crate) use work::{
    comm_init_all, comm_init_rank, comm_unique_id, user_module_load, user_param_sizes, Operand, NO_OPERANDS,
};
