//! [`CachingAllocator`]: one device's caching allocator behind one mutex.

use super::expandable::PageMoves;
use super::history::{HistoryContext, MemoryHistory, Stacks};
use super::mem_pools::{MemPoolId, Route, StreamFilter, DEFAULT_SLOT};
use super::observers::{Observers, OutOfMemoryInfo, OutOfMemoryObserver};
use super::settings::AllocatorSettings;
use super::snapshot::Snapshot;
use super::state::State;
use super::stats::MemoryStats;
use super::summary::memory_summary;
use super::RawMemory;
use crate::driver::{DevicePtr, StreamId};
use crate::error::{Error, Result};
use crate::race::Stack;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

/// PyTorch's CUDA caching allocator for one device, over any [`RawMemory`].
///
/// All methods take `&self` (the allocator is `Send + Sync`; one mutex per device). Errors leave
/// the allocator usable; after [`Error::OutOfMemory`] it has freed its cache and can serve
/// smaller requests.
///
/// ```
/// use cudasem::alloc::{AccountingMemory, AllocatorSettings, CachingAllocator};
/// use cudasem::driver::StreamId;
/// use std::sync::Arc;
///
/// let mem = Arc::new(AccountingMemory::new(1 << 30));
/// let a = CachingAllocator::new(0, mem, AllocatorSettings::default());
/// let s = StreamId(0);
/// let p = a.malloc(1000, s).unwrap(); // a 2 MiB small segment, a 1024-byte block of it
/// a.free(p).unwrap(); // cached, not returned to the driver
/// assert_eq!(a.malloc(700, s).unwrap(), p, "the cached block is reused");
/// assert_eq!(a.memory_reserved(), 2 << 20);
/// ```
pub struct CachingAllocator {
    memory: Arc<dyn RawMemory>,
    state: Mutex<State>,
    /// Routing entries (PyTorch's `captures_underway`), in the order they began; taken before
    /// the state's lock, never under it, so that filters run outside the state's lock.
    routes: RwLock<Vec<Route>>,
    /// `routes.len()`: the one relaxed load of a malloc when nothing is routed.
    routing: AtomicUsize,
    /// Which calls capture their stack for the history ([`CAPTURE_ALLOC`], [`CAPTURE_FREE`]).
    stacks: AtomicU8,
    /// Called when a malloc fails for lack of memory.
    observers: Observers,
}

/// Mallocs capture their stack (the history keeps stacks).
const CAPTURE_ALLOC: u8 = 1;
/// Frees capture theirs too (`context="all"`).
const CAPTURE_FREE: u8 = 2;

impl std::fmt::Debug for CachingAllocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("CachingAllocator")
            .field("device", &s.device())
            .field("settings", s.settings())
            .field("reserved", &s.reserved())
            .finish()
    }
}

impl CachingAllocator {
    /// An allocator for `device` drawing segments from `memory`.
    pub fn new(device: usize, memory: Arc<dyn RawMemory>, settings: AllocatorSettings) -> CachingAllocator {
        let granularity = memory.vmm_granularity();
        CachingAllocator {
            state: Mutex::new(State::new(device, settings, granularity)),
            memory,
            routes: RwLock::new(Vec::new()),
            routing: AtomicUsize::new(0),
            stacks: AtomicU8::new(0),
            observers: Observers::default(),
        }
    }

    /// The state, as PyTorch's would be (a deferred merge completed).
    fn lock(&self) -> MutexGuard<'_, State> {
        let mut s = self.lock_raw();
        s.settle();
        s
    }

    /// The state, possibly with a deferred merge (for malloc and free, which handle it).
    fn lock_raw(&self) -> MutexGuard<'_, State> {
        // The state is consistent between calls, whatever a panicking thread was doing.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Turns deferred merges off or on (for tests comparing both; on by default).
    #[cfg(test)]
    pub(crate) fn set_defer_merges(&self, on: bool) {
        self.lock().set_defer_merges(on);
    }

    /// Whether a free's merge is pending now (for tests of deferral).
    #[cfg(test)]
    pub(crate) fn has_deferred_merge(&self) -> bool {
        self.lock_raw().has_deferred_merge()
    }

    /// Mallocs served by a deferred block so far (for tests of deferral).
    #[cfg(test)]
    pub(crate) fn deferred_reuses(&self) -> usize {
        self.lock_raw().deferred_reuses()
    }

    /// The device index.
    pub fn device(&self) -> usize {
        self.lock().device()
    }

    /// The memory the allocator draws from.
    pub fn memory(&self) -> &Arc<dyn RawMemory> {
        &self.memory
    }

    /// The settings in force.
    pub fn settings(&self) -> AllocatorSettings {
        self.lock().settings().clone()
    }

    /// Changes the settings (like `torch.cuda.memory._set_allocator_settings`). Cached blocks
    /// stay; turning expandable segments off keeps expandable blocks out of new allocations.
    pub fn set_settings(&self, settings: AllocatorSettings) {
        self.lock().set_settings(settings);
    }

    /// A block of at least `size` bytes for use on `stream`: cached if one fits, else carved from
    /// a new segment. `size == 0` gives the null pointer (like PyTorch), which [`free`](Self::free)
    /// accepts. Out of memory after freeing the cache is [`Error::OutOfMemory`] with PyTorch's
    /// fields.
    ///
    /// While allocations are routed to private pools ([`begin_allocate_to_pool`](Self::begin_allocate_to_pool)),
    /// the most recent routing entry whose filter passes `stream` takes the block from its pool.
    #[inline]
    pub fn malloc(&self, size: usize, stream: StreamId) -> Result<DevicePtr> {
        if size == 0 {
            return Ok(DevicePtr(0));
        }
        if self.routing.load(Ordering::Relaxed) != 0 || self.stacks.load(Ordering::Relaxed) != 0 {
            return self.malloc_slow(size, stream);
        }
        // (The state's lock is released at the end of this statement, before any observer runs.)
        let r = self.lock_raw().malloc(&*self.memory, size, stream, DEFAULT_SLOT);
        r.map_err(|e| self.failed(e))
    }

    /// A malloc while allocations are routed or stacks are recorded.
    #[cold]
    #[inline(never)]
    fn malloc_slow(&self, size: usize, stream: StreamId) -> Result<DevicePtr> {
        // Captured before the lock is taken: other threads do not wait for the unwinding.
        let stack = self.capture(CAPTURE_ALLOC);
        let r = {
            // The routes stay read-locked until the block is taken, so the pool chosen still exists.
            let routes = self.routes.read().unwrap_or_else(|e| e.into_inner());
            let pool = routes.iter().rev().find(|r| (r.filter)(stream)).map(|r| r.pool);
            let mut state = self.lock_raw();
            let slot = pool.and_then(|p| state.routable_slot(p)).unwrap_or(DEFAULT_SLOT);
            state.with_call_stack(stack, |state| state.malloc(&*self.memory, size, stream, slot))
        };
        r.map_err(|e| self.failed(e))
    }

    /// The stack of the call, when the history keeps the stacks of calls of kind `what`.
    #[inline]
    fn capture(&self, what: u8) -> Option<Arc<Stack>> {
        (self.stacks.load(Ordering::Relaxed) & what != 0).then(Stack::capture_shared)
    }

    /// A malloc failed with `e` (no lock held): out of memory, the observers are told first.
    #[cold]
    #[inline(never)]
    fn failed(&self, e: Error) -> Error {
        if matches!(e, Error::OutOfMemory { .. }) {
            self.observers.notify(|| {
                let cap = self.lock().fraction_limit();
                OutOfMemoryInfo::of(&e, cap).expect("an out-of-memory error")
            });
        }
        e
    }

    /// `attachOutOfMemoryObserver(f)`: `f` is called (after those attached before) each time a
    /// malloc fails for lack of memory, before the error is returned, with no lock of the
    /// allocator held: it may take a snapshot, read statistics, free or allocate. An allocation
    /// failing inside an observer does not call the observers again.
    pub fn attach_out_of_memory_observer(&self, f: OutOfMemoryObserver) {
        self.observers.attach(f);
    }

    /// Frees a block from [`malloc`](Self::malloc): it is cached for reuse on its stream (after
    /// the streams it was recorded on finished their work, see [`record_stream`](Self::record_stream)).
    /// The null pointer is ignored; any other pointer that is not live is [`Error::InvalidPointer`].
    pub fn free(&self, ptr: DevicePtr) -> Result<()> {
        if ptr.0 == 0 {
            return Ok(());
        }
        if self.stacks.load(Ordering::Relaxed) & CAPTURE_FREE != 0 {
            return self.free_with_stack(ptr);
        }
        self.lock_raw().free(&*self.memory, ptr)
    }

    #[cold]
    #[inline(never)]
    fn free_with_stack(&self, ptr: DevicePtr) -> Result<()> {
        let stack = self.capture(CAPTURE_FREE);
        self.lock_raw().with_call_stack(stack, |state| state.free(&*self.memory, ptr))
    }

    /// `caching_allocator_alloc(size, device, stream)`: a raw block for the caller's own kernels
    /// (the same as [`malloc`](Self::malloc); the runtime passes the current stream).
    pub fn raw_alloc(&self, size: usize, stream: StreamId) -> Result<DevicePtr> {
        self.malloc(size, stream)
    }

    /// `caching_allocator_delete(ptr)`: frees a block from [`raw_alloc`](Self::raw_alloc).
    pub fn raw_delete(&self, ptr: DevicePtr) -> Result<()> {
        self.free(ptr)
    }

    /// `Tensor.record_stream(s)`: the block is also used on `stream`, so when it is freed it is
    /// reused only after the work queued on `stream` by then has completed (checked at the next
    /// malloc). Recording the block's own stream does nothing.
    pub fn record_stream(&self, ptr: DevicePtr, stream: StreamId) -> Result<()> {
        self.lock().record_stream(ptr, stream)
    }

    /// The size of the live block at `ptr` (after rounding), `None` when none starts there.
    pub fn block_size(&self, ptr: DevicePtr) -> Option<usize> {
        self.lock().block_size(ptr)
    }

    /// `empty_cache()`: waits for the device, then returns every fully free segment to the driver
    /// and unmaps every free page of expandable segments. Counts one `num_sync_all_streams`.
    pub fn empty_cache(&self) -> Result<()> {
        let stack = self.capture(CAPTURE_FREE);
        let mut state = self.lock();
        let before = state.reserved();
        state.with_call_stack(stack, |state| state.release_cached_blocks(&*self.memory))?;
        let reserved = state.reserved();
        tracing::debug!(
            target: "cudasem::alloc",
            device = state.device(),
            released = before.saturating_sub(reserved),
            reserved,
            "empty_cache released {} bytes of cached memory",
            before.saturating_sub(reserved)
        );
        Ok(())
    }

    /// With expandable segments: the free pages moved so far to where a segment had to grow
    /// (instead of the device holding more memory). Not one of PyTorch's statistics.
    pub fn page_moves(&self) -> PageMoves {
        self.lock().page_moves()
    }

    /// `memory_stats()`: a copy of the statistics.
    pub fn memory_stats(&self) -> MemoryStats {
        self.lock().memory_stats()
    }

    /// `memory_allocated()`: bytes of allocated blocks.
    pub fn memory_allocated(&self) -> usize {
        self.memory_stats().allocated_bytes().current.max(0) as usize
    }

    /// `max_memory_allocated()`: the peak of [`memory_allocated`](Self::memory_allocated).
    pub fn max_memory_allocated(&self) -> usize {
        self.memory_stats().allocated_bytes().peak.max(0) as usize
    }

    /// `memory_reserved()`: bytes held from the driver.
    pub fn memory_reserved(&self) -> usize {
        self.lock().reserved()
    }

    /// `max_memory_reserved()`: the peak of [`memory_reserved`](Self::memory_reserved).
    pub fn max_memory_reserved(&self) -> usize {
        self.memory_stats().reserved_bytes().peak.max(0) as usize
    }

    /// `reset_peak_memory_stats()`: every peak becomes the current value.
    pub fn reset_peak_stats(&self) {
        self.lock().reset_peak_stats();
    }

    /// `reset_accumulated_memory_stats()`: the `allocated`/`freed` totals and the counters go to 0.
    pub fn reset_accumulated_stats(&self) {
        self.lock().reset_accumulated_stats();
    }

    /// `set_per_process_memory_fraction(fraction)`: the allocator holds at most
    /// `fraction × total` bytes; a segment that would pass it is refused at once (and the request
    /// takes the out-of-memory path). `fraction` must be in `[0, 1]`.
    pub fn set_memory_fraction(&self, fraction: f64) -> Result<()> {
        if !(0.0..=1.0).contains(&fraction) {
            return Err(Error::InvalidArgument {
                op: "set_per_process_memory_fraction",
                reason: format!("invalid fraction {fraction}; expected a number between 0 and 1"),
            });
        }
        let (_, total) = self.memory.mem_info()?;
        self.lock().set_fraction(fraction, (fraction * total as f64) as usize);
        Ok(())
    }

    /// `get_per_process_memory_fraction()`: the fraction set, 1.0 when none.
    pub fn memory_fraction(&self) -> f64 {
        self.lock().fraction().unwrap_or(1.0)
    }

    /// `memory_snapshot()` / `memory._snapshot()`: every segment and block now, and the history.
    pub fn snapshot(&self) -> Snapshot {
        self.lock().snapshot()
    }

    /// `memory._record_memory_history(enabled, max_entries)`: records alloc, free, segment and
    /// OOM events in a ring of at most `max_entries`; turning it off clears the ring.
    /// Records no stack traces (see [`record_history_with`](Self::record_history_with)).
    pub fn record_history(&self, enabled: bool, max_entries: usize) {
        let h = if enabled { MemoryHistory::new().stacks(Stacks::None) } else { MemoryHistory::off() };
        self.record_history_with(h.max_entries(max_entries));
    }

    /// `memory._record_memory_history(enabled, context, stacks, max_entries)`: records events
    /// in the ring (`enabled` [`All`](super::HistoryEnabled::All)) and keeps the stacks
    /// `context` asks for (with [`Stacks::All`]: each malloc, and with
    /// [`HistoryContext::All`] each free, captures its backtrace).
    pub fn record_history_with(&self, history: MemoryHistory) {
        let mut state = self.lock();
        state.set_history(history);
        let flags = match state.history_context() {
            None => 0,
            Some(HistoryContext::All) => CAPTURE_ALLOC | CAPTURE_FREE,
            Some(_) => CAPTURE_ALLOC,
        };
        self.stacks.store(flags, Ordering::Relaxed);
    }

    /// Whether history is being recorded.
    pub fn is_recording_history(&self) -> bool {
        self.lock().is_recording_history()
    }

    /// `MemPool()`'s `createOrIncrefPool`: makes the private pool `pool` (use count 1), or takes
    /// one more use of it if it exists. [`Error::MemPool`] for `(0, 0)` or a pool being freed.
    pub fn create_pool(&self, pool: MemPoolId) -> Result<()> {
        self.lock().create_pool(pool)
    }

    /// `beginAllocateToPool(pool, filter)`: makes the pool (use count 1) or takes one more use of
    /// it, and until [`end_allocate_to_pool`](Self::end_allocate_to_pool) routes every allocation
    /// whose stream passes `filter` to it (the most recent entry first). While any routing is
    /// active a capture is underway: no event is queried (frees with stream uses wait until no
    /// capture is), and nothing is freed to the driver (out of memory comes after trying only
    /// what needs no free). [`Error::MemPool`] if allocations are routed to the pool already.
    pub fn begin_allocate_to_pool(&self, pool: MemPoolId, filter: StreamFilter) -> Result<()> {
        let mut routes = self.routes.write().unwrap_or_else(|e| e.into_inner());
        self.lock().begin_pool(pool)?;
        routes.push(Route { pool, filter });
        self.routing.store(routes.len(), Ordering::Relaxed);
        Ok(())
    }

    /// `endAllocateToPool(pool)`: stops routing to the pool (its use count is unchanged).
    pub fn end_allocate_to_pool(&self, pool: MemPoolId) -> Result<()> {
        let mut routes = self.routes.write().unwrap_or_else(|e| e.into_inner());
        self.lock().end_pool(pool)?;
        if let Some(i) = routes.iter().rposition(|r| r.pool == pool) {
            routes.remove(i);
        }
        self.routing.store(routes.len(), Ordering::Relaxed);
        Ok(())
    }

    /// `releasePool(pool)`: one use less. At 0 the pool is freeable: [`empty_cache`](Self::empty_cache)
    /// frees its whole free segments, and it is deleted once it holds none (so once none of its
    /// blocks is allocated). Returns the use count after.
    pub fn release_pool(&self, pool: MemPoolId) -> Result<usize> {
        self.lock().release_pool(pool)
    }

    /// The pool's use count (`MemPool.use_count()`).
    pub fn pool_use_count(&self, pool: MemPoolId) -> Result<usize> {
        self.lock().pool_use_count(pool)
    }

    /// `emptyCache(pool)`: if the pool is freeable, frees its whole free segments (waiting first
    /// for the events of its blocks, if any), deleting it when none is left. Nothing during a
    /// capture, nor for a pool still in use or unknown.
    pub fn empty_pool_cache(&self, pool: MemPoolId) -> Result<()> {
        self.lock().release_pool_cache(&*self.memory, pool)
    }

    /// The private pool the live block at `ptr` came from (`None`: the default pools).
    pub fn block_pool(&self, ptr: DevicePtr) -> Option<MemPoolId> {
        self.lock().block_pool(ptr)
    }

    /// `memory_snapshot(mempool_id)`: the pool's segments only (no history).
    pub fn pool_snapshot(&self, pool: MemPoolId) -> Snapshot {
        Snapshot { segments: self.lock().pool_segments(pool), device_traces: Vec::new() }
    }

    /// `memory_summary()`: a readable table of the statistics, like PyTorch's.
    pub fn memory_summary(&self) -> String {
        let s = self.lock();
        memory_summary(s.device(), &s.memory_stats())
    }
}
