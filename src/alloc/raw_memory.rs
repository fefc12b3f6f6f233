//! [`RawMemory`]: the raw device memory and stream operations the caching allocator runs over
//! (segments, events, virtual memory), implemented over the drivers by the runtime and by
//! [`super::AccountingMemory`] for tests and trace replay.

use crate::driver::{DevicePtr, EventId, StreamId};
use crate::error::{Error, Result};

/// The raw device memory and stream operations the allocator needs: one device's segments,
/// events and (optionally) virtual memory.
///
/// Implemented over the real drivers by the runtime, and by [`super::AccountingMemory`] for tests and
/// trace replay. The allocator calls it with its own lock held, from any thread.
pub trait RawMemory: Send + Sync {
    /// A new segment of `bytes` (a multiple of 512) from the driver, like `cudaMalloc`.
    ///
    /// [`Error::OutOfMemory`] makes the allocator free cached memory and retry; any other error is
    /// returned to the caller of [`super::CachingAllocator::malloc`] at once.
    fn malloc(&self, bytes: usize) -> Result<DevicePtr>;
    /// Returns a segment from [`RawMemory::malloc`] (`bytes` is its size). Work already queued that
    /// uses it must stay valid (the allocator does not synchronize first, like `cudaFree`).
    fn free(&self, ptr: DevicePtr, bytes: usize) -> Result<()>;
    /// `(free, total)` bytes of the device.
    fn mem_info(&self) -> Result<(usize, usize)>;
    /// An event recorded now on `stream`. For `record_stream`: the freed block is reused once it
    /// completed. Also to see whether a stream is idle (its event is done at once), before a
    /// wholly free segment of that stream is handed to another stream.
    fn record_event(&self, stream: StreamId) -> Result<EventId>;
    /// Whether an event from [`RawMemory::record_event`] has completed.
    fn event_done(&self, event: EventId) -> Result<bool>;
    /// Gives an event from [`RawMemory::record_event`] back (it is never asked about again).
    fn event_release(&self, event: EventId);
    /// Waits for all work on every stream of the device; afterwards every recorded event is done.
    fn synchronize(&self) -> Result<()>;

    /// The granularity of virtual-memory mappings, or `None` when expandable segments are not
    /// supported (the allocator then uses ordinary segments whatever the settings say).
    fn vmm_granularity(&self) -> Option<usize> {
        None
    }
    /// Reserves `bytes` (a multiple of the granularity) of virtual addresses, backed by nothing.
    fn vmm_reserve(&self, bytes: usize) -> Result<DevicePtr> {
        let _ = bytes;
        Err(vmm_unsupported("vmm_reserve"))
    }
    /// Backs one page `[at, at + bytes)` of a reservation with new physical memory, readable and
    /// writable by the device. The allocator maps one page per call (2 MiB units for the small
    /// pool; 4 to 16 MiB for the large pool, by the size of the growth), so every page can be
    /// unmapped on its own. [`Error::OutOfMemory`] makes the allocator free cached memory and
    /// retry.
    fn vmm_map(&self, at: DevicePtr, bytes: usize) -> Result<()> {
        let _ = (at, bytes);
        Err(vmm_unsupported("vmm_map"))
    }
    /// Unmaps `[at, at + bytes)`, one page mapped by [`RawMemory::vmm_map`] or a run of adjacent
    /// ones, and frees their physical memory. Called only after [`RawMemory::synchronize`], with
    /// no block on the pages.
    fn vmm_unmap(&self, at: DevicePtr, bytes: usize) -> Result<()> {
        let _ = (at, bytes);
        Err(vmm_unsupported("vmm_unmap"))
    }
    /// Releases a whole reservation from [`RawMemory::vmm_reserve`]; none of it is mapped any more.
    fn vmm_release(&self, base: DevicePtr, bytes: usize) -> Result<()> {
        let _ = (base, bytes);
        Err(vmm_unsupported("vmm_release"))
    }
}

fn vmm_unsupported(op: &'static str) -> Error {
    Error::Unsupported { op, driver: "RawMemory", reason: "this memory has no virtual memory management".into() }
}
