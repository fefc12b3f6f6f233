//! The allocator's state behind its lock, and the malloc and free paths (PyTorch's
//! `DeviceCachingAllocator`): best fit, split, merge, stream reuse, events, the OOM path.
//!
//! [`State`] owns the parts: the cached blocks and their books ([`Cache`]), the events of freed
//! blocks other streams used, the expandable segments and the deferred merge, each changed only
//! through its own methods.

use super::block::{Block, BlockId, PoolKind, NIL};
use super::cache::Cache;
use super::deferred::DeferredMerge;
use super::expandable::{ExpandableSegments, PageMoves, Room};
use super::history::{HistoryContext, MemoryHistory, TraceAction};
use super::mem_pools::{MemPoolId, Refusal, Slot, DEFAULT_SLOT};
use super::settings::{allocation_size, AllocatorSettings, MIN_BLOCK_SIZE, SMALL_SIZE};
use super::snapshot::SegmentInfo;
use super::snapshot::Snapshot;
use super::stats::{Count, MemoryStats, Metric};
use super::RawMemory;
use crate::driver::{DevicePtr, EventId, StreamId};
use crate::error::{Error, Result};
use std::collections::VecDeque;

/// Everything one device's allocator owns.
pub(crate) struct State {
    device: usize,
    cache: Cache,
    /// Per stream, the events recorded for freed blocks that other streams used, in order.
    events: Vec<(StreamId, VecDeque<(EventId, BlockId)>)>,
    pending_events: usize,
    /// Blocks freed with stream uses while a capture was underway: their events are recorded
    /// once no capture is (PyTorch's `needs_events_deferred_until_no_capture`).
    capture_frees: Vec<BlockId>,
    expandable: ExpandableSegments,
    deferred: DeferredMerge,
}

impl State {
    pub fn new(device: usize, settings: AllocatorSettings, granularity: Option<usize>) -> State {
        State {
            device,
            cache: Cache::new(device, settings),
            events: Vec::new(),
            pending_events: 0,
            capture_frees: Vec::new(),
            expandable: ExpandableSegments::new(granularity),
            deferred: DeferredMerge::default(),
        }
    }

    pub fn device(&self) -> usize {
        self.device
    }

    pub fn settings(&self) -> &AllocatorSettings {
        self.cache.settings()
    }

    pub fn set_settings(&mut self, settings: AllocatorSettings) {
        self.cache.set_settings(settings);
    }

    /// Bytes held from the driver.
    pub fn reserved(&self) -> usize {
        self.cache.reserved()
    }

    /// The free pages expandable segments moved so far.
    pub fn page_moves(&self) -> PageMoves {
        self.expandable.moves()
    }

    /// A copy of the statistics.
    pub fn memory_stats(&self) -> MemoryStats {
        self.cache.stats().snapshot()
    }

    pub fn reset_peak_stats(&mut self) {
        self.cache.stats_mut().reset_peak();
    }

    pub fn reset_accumulated_stats(&mut self) {
        self.cache.stats_mut().reset_accumulated();
    }

    /// `set_memory_fraction`: at most `limit` bytes reserved.
    pub fn set_fraction(&mut self, fraction: f64, limit: usize) {
        self.cache.set_fraction(fraction, limit);
    }

    /// The fraction set, if any.
    pub fn fraction(&self) -> Option<f64> {
        self.cache.fraction().map(|(f, _)| f)
    }

    pub fn set_history(&mut self, history: MemoryHistory) {
        self.cache.history_mut().configure(history);
    }

    /// The stacks the history keeps.
    pub fn history_context(&self) -> Option<HistoryContext> {
        self.cache.history().context()
    }

    /// Runs `f` with `stack` as the stack of the allocator call underway (for the history's
    /// events), cleared after.
    pub fn with_call_stack<R>(
        &mut self,
        stack: Option<std::sync::Arc<crate::race::Stack>>,
        f: impl FnOnce(&mut Self) -> R,
    ) -> R {
        self.cache.history_mut().set_current(stack);
        let r = f(self);
        self.cache.history_mut().set_current(None);
        r
    }

    /// The cap of `set_per_process_memory_fraction`, if one is set.
    pub fn fraction_limit(&self) -> Option<usize> {
        self.cache.fraction().map(|(_, limit)| limit)
    }

    pub fn is_recording_history(&self) -> bool {
        self.cache.history().enabled()
    }

    /// The size of the live block at `ptr`.
    pub fn block_size(&self, ptr: DevicePtr) -> Option<usize> {
        self.cache.blocks().live_get(ptr.0).map(|id| self.cache.blocks()[id].size)
    }

    /// Every segment and block now, and the history.
    pub fn snapshot(&self) -> Snapshot {
        self.cache.snapshot(self.device)
    }

    /// Completes a deferred merge, if any: the state becomes PyTorch's.
    #[inline]
    pub fn settle(&mut self) {
        self.deferred.settle(&mut self.cache);
    }

    /// Turns deferred merges off or on (for tests comparing both).
    #[cfg(test)]
    pub fn set_defer_merges(&mut self, on: bool) {
        self.deferred.set_enabled(on);
    }

    /// Whether a free's merge is pending.
    #[cfg(test)]
    pub fn has_deferred_merge(&self) -> bool {
        self.deferred.is_pending()
    }

    /// Mallocs served by a deferred block so far.
    #[cfg(test)]
    pub fn deferred_reuses(&self) -> usize {
        self.deferred.reuses()
    }

    /// Expandable segments asked for and supported by the memory.
    #[inline]
    fn expandable_active(&self) -> bool {
        self.cache.settings().expandable_segments() && self.expandable.supported()
    }

    // ---------------------------------------------------------------- malloc

    /// A block for `stream` from the pools at `slot` (the default pools, or a private pool's).
    pub fn malloc(&mut self, mem: &dyn RawMemory, orig: usize, stream: StreamId, slot: Slot) -> Result<DevicePtr> {
        let size = self.cache.settings().round_size(orig);
        if self.deferred.is_pending() {
            if self.pending_events == 0 && slot == DEFAULT_SLOT {
                if let Some(ptr) = self.deferred.reuse(&mut self.cache, size, orig, stream) {
                    return Ok(ptr);
                }
            }
            self.settle();
        }
        // While a capture is underway, no event is queried (illegal in a capture).
        let capturing = self.cache.pools().capturing();
        if !capturing && (self.pending_events > 0 || !self.capture_frees.is_empty()) {
            self.process_events(mem)?;
        }
        let pool = PoolKind::of(size);
        let alloc_size = allocation_size(size);
        if slot != DEFAULT_SLOT {
            return self.malloc_private(mem, (pool, slot), stream, (size, orig), alloc_size);
        }
        let mut found = self.get_free_block(pool, stream, size);
        if found.is_none() && !self.expandable_active() && !capturing {
            found = self.cache.adopt_idle_segment(mem, pool, stream, size);
        }
        if found.is_none() && capturing {
            // Nothing goes back to the driver and nothing waits during a capture: a new segment
            // or out of memory.
            found = self.alloc_block(mem, pool, stream, size, alloc_size, false)?;
        } else if found.is_none() {
            if self.cache.fraction().is_some() && self.cache.settings().garbage_collection_threshold().is_some() {
                self.cache.garbage_collect(mem)?;
            }
            found = self.alloc_block(mem, pool, stream, size, alloc_size, false)?;
            if found.is_none() && self.release_available_cached_blocks(mem, pool, stream, size)? {
                found = self.alloc_block(mem, pool, stream, size, alloc_size, false)?;
            }
            if found.is_none() {
                self.release_cached_blocks(mem)?;
                found = self.alloc_block(mem, pool, stream, size, alloc_size, true)?;
            }
        }
        match found {
            Some(id) => Ok(self.alloc_found_block(id, size, orig)),
            None => Err(self.out_of_memory(mem, stream, alloc_size)),
        }
    }

    /// A block of a private pool (while allocations are routed to it, so a capture is underway:
    /// nothing is freed to the driver): best fit among the pool's free blocks of the stream, else
    /// a new ordinary segment of PyTorch's size, else out of memory.
    fn malloc_private(
        &mut self,
        mem: &dyn RawMemory,
        (pool, slot): (PoolKind, Slot),
        stream: StreamId,
        (size, orig): (usize, usize),
        alloc_size: usize,
    ) -> Result<DevicePtr> {
        self.cache.blocks_mut().tick();
        let mut found = None;
        if let Some(f) = self.cache.blocks().private_list(slot, pool).best_fit(stream, size) {
            if !oversize_refused(self.cache.settings(), size, f.size) {
                self.cache.blocks_mut().take_found_in(slot, pool, f);
                found = Some(f.id);
            }
        }
        if found.is_none() && !self.cache.would_exceed_fraction(alloc_size) {
            match mem.malloc(alloc_size) {
                Ok(p) => found = Some(self.cache.add_segment(p, alloc_size, stream, (pool, slot), size)),
                Err(Error::OutOfMemory { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        match found {
            Some(id) => Ok(self.alloc_found_block(id, size, orig)),
            None => Err(self.out_of_memory(mem, stream, alloc_size)),
        }
    }

    /// Best fit among the stream's free blocks, with the oversize rules.
    fn get_free_block(&mut self, pool: PoolKind, stream: StreamId, size: usize) -> Option<BlockId> {
        self.cache.blocks_mut().tick();
        let settings = self.cache.settings();
        let blocks = self.cache.blocks();
        let found = blocks.free_list(pool).best_fit(stream, size)?;
        let oversize_refused = |bytes: usize| oversize_refused(settings, size, bytes);
        if !blocks[found.id].is_expandable() {
            if oversize_refused(found.size) {
                return None;
            }
            self.cache.blocks_mut().take_found(pool, found);
            return Some(found.id);
        }
        let id = {
            let mut it = blocks.free_list(pool).at_least(stream, size).map(|(_, id)| id);
            let mut id = it.next()?;
            if settings.expandable_segments() {
                // Best fit counts what a block can grow into: its size plus the unmapped piece
                // after it, so blocks at the edge of mapped memory are kept for growth.
                let grow = |b: BlockId| {
                    let b = &blocks[b];
                    b.size + if b.next != NIL && !blocks[b.next].mapped { blocks[b.next].size } else { 0 }
                };
                let mut best = grow(id);
                for n in it {
                    let g = grow(n);
                    if !blocks[id].is_expandable() || g >= best {
                        break;
                    }
                    (id, best) = (n, g);
                }
            } else {
                // Expandable segments were turned off after use: only ordinary blocks serve.
                id = std::iter::once(id).chain(it).find(|&b| !blocks[b].is_expandable())?;
            }
            id
        };
        if oversize_refused(blocks[id].size) {
            return None;
        }
        self.cache.blocks_mut().pool_remove(id);
        Some(id)
    }

    /// A new segment (or, with expandable segments, newly mapped pages) for the request.
    fn alloc_block(
        &mut self,
        mem: &dyn RawMemory,
        pool: PoolKind,
        stream: StreamId,
        size: usize,
        alloc_size: usize,
        is_retry: bool,
    ) -> Result<Option<BlockId>> {
        if is_retry {
            self.cache.stats_mut().count(Count::AllocRetry);
        }
        if self.expandable_active() {
            return self.alloc_expandable(mem, pool, stream, size);
        }
        let preferred = self.cache.preferred_segment_size(mem, pool, stream, size, alloc_size)?;
        let sizes: &[usize] = if preferred > alloc_size { &[preferred, alloc_size] } else { &[alloc_size] };
        let mut attempt = None;
        for &bytes in sizes {
            if self.cache.would_exceed_fraction(bytes) {
                continue;
            }
            match mem.malloc(bytes) {
                Ok(p) => {
                    attempt = Some((p, bytes));
                    break;
                }
                Err(Error::OutOfMemory { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        let Some((ptr, alloc_size)) = attempt else {
            return Ok(None);
        };
        Ok(Some(self.cache.add_segment(ptr, alloc_size, stream, (pool, DEFAULT_SLOT), size)))
    }

    /// A block of `size` bytes in `stream`'s expandable segment of `pool`, mapping the pages it
    /// needs. Beyond PyTorch: mapping pages past the most memory ever held first moves whole
    /// free pages there from the holes of every expandable segment (waiting for the device once),
    /// so the device never holds more while free pages could move; below that mark, pages are
    /// mapped without waiting, as in PyTorch.
    fn alloc_expandable(
        &mut self,
        mem: &dyn RawMemory,
        pool: PoolKind,
        stream: StreamId,
        size: usize,
    ) -> Result<Option<BlockId>> {
        let Some(mut room) = self.expandable.find_room(mem, &mut self.cache, pool, stream, size)? else {
            return Ok(None);
        };
        let over = |c: &Cache, room: &Room| (c.reserved() + room.need).saturating_sub(c.high_water());
        // Moving pages waits for the device and unmaps: never during a capture.
        if over(&self.cache, &room) > 0 && !self.cache.pools().capturing() {
            let mut runs = self.expandable.movable(&self.cache, &room);
            if !runs.is_empty() {
                let waiting = self.pending_events > 0;
                self.synchronize_and_free_events(mem)?;
                if waiting {
                    // Blocks waiting for events went back to their pools: one may serve the
                    // request now, or change the room.
                    if let Some(id) = self.get_free_block(pool, stream, size) {
                        return Ok(Some(id));
                    }
                    room = match self.expandable.find_room(mem, &mut self.cache, pool, stream, size)? {
                        Some(r) => r,
                        None => return Ok(None),
                    };
                    runs = self.expandable.movable(&self.cache, &room);
                }
                let want = over(&self.cache, &room);
                if want > 0 && !runs.is_empty() {
                    self.expandable.move_free_pages(mem, &mut self.cache, &runs, want)?;
                }
            }
        }
        self.expandable.map_room(mem, &mut self.cache, &room, size)
    }

    fn should_split(&self, b: &Block, size: usize) -> bool {
        let remaining = b.size - size;
        if b.pool == PoolKind::Small || (self.expandable_active() && b.slot == DEFAULT_SLOT) {
            remaining >= MIN_BLOCK_SIZE
        } else {
            size < self.cache.settings().max_split() && remaining > SMALL_SIZE
        }
    }

    /// Hands out `id` (taken out of its pool), splitting off what the request does not need.
    fn alloc_found_block(&mut self, id: BlockId, size: usize, orig: usize) -> DevicePtr {
        let b = &self.cache.blocks()[id];
        let (pool, expandable, already_split) = (b.pool, b.is_expandable(), b.is_split());
        let id = if self.should_split(b, size) {
            let remaining = b.size - size;
            let mut front = Block::new(b.addr, size, b.stream, pool);
            front.prev = b.prev;
            front.next = id;
            front.expandable = b.expandable;
            front.slot = b.slot;
            let prev = b.prev;
            let blocks = self.cache.blocks_mut();
            let front_id = blocks.insert(front);
            if prev != NIL {
                blocks[prev].next = front_id;
            }
            let clock = blocks.clock();
            let rest = &mut blocks[id];
            rest.prev = front_id;
            rest.addr += size as u64;
            rest.size = remaining;
            rest.free_stamp = clock;
            blocks.pool_insert(id);
            if !expandable {
                if already_split {
                    self.cache.stats_mut().decrease(Metric::InactiveSplitBytes, pool, size);
                } else {
                    self.cache.stats_mut().increase(Metric::InactiveSplit, pool, 1);
                    self.cache.stats_mut().increase(Metric::InactiveSplitBytes, pool, remaining);
                }
            }
            front_id
        } else {
            if already_split && !expandable {
                let bytes = b.size;
                self.cache.stats_mut().decrease(Metric::InactiveSplitBytes, pool, bytes);
                self.cache.stats_mut().decrease(Metric::InactiveSplit, pool, 1);
            }
            id
        };
        self.cache.hand_out(id, pool, orig)
    }

    fn out_of_memory(&mut self, mem: &dyn RawMemory, stream: StreamId, alloc_size: usize) -> Error {
        self.cache.stats_mut().count(Count::Oom);
        let (free, total) = mem.mem_info().unwrap_or((0, 0));
        self.cache.history_mut().record(TraceAction::Oom, free as u64, alloc_size, stream);
        let allocated = self.cache.stats().get(Metric::AllocatedBytes).max(0) as usize;
        let error = Error::OutOfMemory {
            device: self.device,
            requested: alloc_size,
            total,
            free,
            allocated,
            reserved_unallocated: self.cache.reserved().saturating_sub(allocated),
        };
        tracing::warn!(
            target: "cudasem::alloc",
            device = self.device,
            stream = stream.0,
            requested = alloc_size,
            free,
            total,
            allocated,
            reserved = self.cache.reserved(),
            "out of memory: {error}"
        );
        error
    }

    // ---------------------------------------------------------------- free

    pub fn free(&mut self, mem: &dyn RawMemory, ptr: DevicePtr) -> Result<()> {
        self.settle();
        let c = &mut self.cache;
        let Some(id) = c.blocks_mut().live_remove(ptr.0) else {
            return Err(self.invalid_pointer(ptr));
        };
        let b = &mut c.blocks_mut()[id];
        b.allocated = false;
        let (pool, size, stream, has_uses) = (b.pool, b.size, b.stream, !b.stream_uses.is_empty());
        let requested = b.requested;
        c.stats_mut().decrease(Metric::Allocation, pool, 1);
        c.stats_mut().decrease(Metric::AllocatedBytes, pool, size);
        c.departures_mut().freed(stream);
        if size >= c.settings().max_split() {
            c.stats_mut().oversize_allocation(false);
        }
        c.history_mut().record(TraceAction::FreeRequested, ptr.0, requested, stream);
        if has_uses && c.pools().capturing() {
            // Recording and later querying events is illegal during a capture: the block waits
            // until no capture is underway, then its events are recorded as usual.
            self.capture_frees.push(id);
            Ok(())
        } else if has_uses {
            self.insert_events(mem, id)
        } else if self.deferred.can_defer(c, id) {
            self.deferred.defer(c, id);
            Ok(())
        } else {
            c.free_block(id);
            Ok(())
        }
    }

    pub fn invalid_pointer(&self, ptr: DevicePtr) -> Error {
        Error::InvalidPointer {
            device: self.device,
            ptr: ptr.0,
            reason:
                "not a live allocation of this device's caching allocator (freed already, or never allocated by it)"
                    .into(),
        }
    }

    pub fn record_stream(&mut self, ptr: DevicePtr, stream: StreamId) -> Result<()> {
        let Some(id) = self.cache.blocks().live_get(ptr.0) else {
            return Err(self.invalid_pointer(ptr));
        };
        let b = &mut self.cache.blocks_mut()[id];
        if stream != b.stream && !b.stream_uses.contains(&stream) {
            b.stream_uses.push(stream);
        }
        Ok(())
    }

    /// Records an event on every stream that used the freed block; it returns to its pool when
    /// they all completed.
    fn insert_events(&mut self, mem: &dyn RawMemory, id: BlockId) -> Result<()> {
        let uses = std::mem::take(&mut self.cache.blocks_mut()[id].stream_uses);
        let mut failure = None;
        for s in uses {
            match mem.record_event(s) {
                Ok(ev) => {
                    self.cache.blocks_mut()[id].event_count += 1;
                    self.pending_events += 1;
                    match self.events.iter_mut().find(|(st, _)| *st == s) {
                        Some((_, q)) => q.push_back((ev, id)),
                        None => self.events.push((s, VecDeque::from([(ev, id)]))),
                    }
                }
                Err(e) => failure = Some(e),
            }
        }
        if failure.is_some() {
            // An event could not be recorded: wait for all work instead, so the block is safe.
            let synced = mem.synchronize();
            if self.cache.blocks()[id].event_count == 0 {
                self.cache.free_block(id);
            }
            synced?;
        }
        Ok(())
    }

    /// Records the events of the blocks freed during a capture (none is underway now).
    fn insert_capture_frees(&mut self, mem: &dyn RawMemory) -> Result<()> {
        for id in std::mem::take(&mut self.capture_frees) {
            self.insert_events(mem, id)?;
        }
        Ok(())
    }

    /// Completed events release their blocks (stream by stream, in order), after the events of
    /// blocks freed during a capture are recorded.
    pub fn process_events(&mut self, mem: &dyn RawMemory) -> Result<()> {
        self.insert_capture_frees(mem)?;
        let mut result = Ok(());
        for qi in 0..self.events.len() {
            while let Some(&(ev, id)) = self.events[qi].1.front() {
                match mem.event_done(ev) {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
                self.events[qi].1.pop_front();
                self.event_completed(mem, ev, id);
            }
        }
        self.events.retain(|(_, q)| !q.is_empty());
        result
    }

    fn event_completed(&mut self, mem: &dyn RawMemory, ev: EventId, id: BlockId) {
        mem.event_release(ev);
        self.pending_events -= 1;
        let b = &mut self.cache.blocks_mut()[id];
        b.event_count -= 1;
        if b.event_count == 0 {
            self.cache.free_block(id);
        }
    }

    // ---------------------------------------------------------------- releasing memory

    /// With `max_split_size`: frees the cached oversize block that fits, else oversize blocks,
    /// largest first, until as much as asked for is freed. Returns whether that much was freed.
    fn release_available_cached_blocks(
        &mut self,
        mem: &dyn RawMemory,
        pool: PoolKind,
        stream: StreamId,
        size: usize,
    ) -> Result<bool> {
        let max_split = self.cache.settings().max_split();
        if max_split == usize::MAX {
            return Ok(false);
        }
        let want = size.max(max_split);
        let blocks = self.cache.blocks();
        let free = blocks.free_list(pool);
        let first = free.at_least(stream, want).next();
        if let Some((_, id)) = first {
            if !blocks[id].is_expandable() {
                self.cache.release_block(mem, id)?;
                return Ok(true);
            }
        }
        let (mut victims, mut total) = (Vec::new(), 0usize);
        for (size, id) in free.below(stream, want) {
            if total >= want || size < max_split {
                break;
            }
            if !blocks[id].is_expandable() {
                victims.push(id);
                total += size;
            }
        }
        for id in victims {
            self.cache.release_block(mem, id)?;
        }
        Ok(total >= want)
    }

    /// Waits for every stream, then frees every fully free segment and unmaps every free page
    /// of the default pools, and frees the whole free segments of freeable private pools,
    /// deleting those left with none (`empty_cache`, and the last retry before out of memory).
    ///
    /// During a capture nothing is done (PyTorch also leaves the default pools alone then; here
    /// no private pool's segment is freed either, since freeing device memory and waiting for
    /// the device are illegal in a capture): the next `empty_cache` after it returns them.
    pub fn release_cached_blocks(&mut self, mem: &dyn RawMemory) -> Result<()> {
        if self.cache.pools().capturing() {
            return Ok(());
        }
        self.synchronize_and_free_events(mem)?;
        self.release_blocks(mem, PoolKind::Large)?;
        self.release_blocks(mem, PoolKind::Small)?;
        self.release_freeable_pools(mem, None)
    }

    /// Frees the whole free segments of the freeable private pools (only `only`'s, if given), and
    /// deletes those that hold no segment any more.
    fn release_freeable_pools(&mut self, mem: &dyn RawMemory, only: Option<Slot>) -> Result<()> {
        for slot in self.cache.pools().freeable() {
            if only.is_some_and(|o| o != slot) {
                continue;
            }
            for kind in [PoolKind::Large, PoolKind::Small] {
                let blocks = self.cache.blocks();
                let whole: Vec<BlockId> =
                    blocks.private_list(slot, kind).ids().filter(|&id| !blocks[id].is_split()).collect();
                for id in whole {
                    self.cache.release_block(mem, id)?;
                }
            }
            if self.cache.pools().segments(slot) == 0 {
                self.cache.pools_mut().delete(slot);
            }
        }
        Ok(())
    }

    fn synchronize_and_free_events(&mut self, mem: &dyn RawMemory) -> Result<()> {
        self.insert_capture_frees(mem)?;
        self.cache.stats_mut().count(Count::SyncAllStreams);
        mem.synchronize()?;
        for (_, q) in std::mem::take(&mut self.events) {
            for (ev, id) in q {
                self.event_completed(mem, ev, id);
            }
        }
        Ok(())
    }

    fn release_blocks(&mut self, mem: &dyn RawMemory, pool: PoolKind) -> Result<()> {
        let ids: Vec<BlockId> = self.cache.blocks().free_list(pool).ids().collect();
        let mut to_unmap = Vec::new();
        for id in ids {
            let b = &self.cache.blocks()[id];
            if b.is_expandable() {
                to_unmap.push(id);
            } else if !b.is_split() {
                self.cache.release_block(mem, id)?;
            }
        }
        for id in to_unmap {
            self.expandable.unmap_block(mem, &mut self.cache, id, usize::MAX)?;
        }
        self.expandable.release_unmapped(mem, &mut self.cache, pool)
    }
}

/// Whether an oversize block of `bytes` is refused for a request of `size`: it is not split for a
/// smaller request, nor given to an oversize request much smaller than itself.
#[inline]
fn oversize_refused(settings: &AllocatorSettings, size: usize, bytes: usize) -> bool {
    let max_split = settings.max_split();
    (size < max_split && bytes >= max_split)
        || (size >= max_split && bytes >= size.saturating_add(settings.max_non_split_rounding()))
}

impl State {
    // ---------------------------------------------------------------- private pools

    fn pool_error(&self, op: &'static str, pool: MemPoolId, reason: Refusal) -> Error {
        Error::MemPool { op, device: self.device, pool: pool.pair(), reason: reason.into() }
    }

    /// `createOrIncrefPool` (a `MemPool`'s creation): a new pool, or one more use of a live one.
    pub fn create_pool(&mut self, pool: MemPoolId) -> Result<()> {
        let slot = self.cache.pools_mut().create_or_incref(pool).map_err(|r| self.pool_error("MemPool", pool, r))?;
        self.cache.blocks_mut().ensure_slot(slot);
        Ok(())
    }

    /// `beginAllocateToPool`'s books: the pool made or shared, a capture underway.
    pub fn begin_pool(&mut self, pool: MemPoolId) -> Result<()> {
        let slot =
            self.cache.pools_mut().begin(pool).map_err(|r| self.pool_error("begin_allocate_to_pool", pool, r))?;
        self.cache.blocks_mut().ensure_slot(slot);
        Ok(())
    }

    /// `endAllocateToPool`'s books.
    pub fn end_pool(&mut self, pool: MemPoolId) -> Result<()> {
        self.cache.pools_mut().end(pool).map_err(|r| self.pool_error("end_allocate_to_pool", pool, r))
    }

    /// `releasePool`: one use less; at 0 the pool is freeable. The use count after.
    pub fn release_pool(&mut self, pool: MemPoolId) -> Result<usize> {
        self.cache.pools_mut().release(pool).map_err(|r| self.pool_error("release_pool", pool, r))
    }

    /// The pool's use count.
    pub fn pool_use_count(&self, pool: MemPoolId) -> Result<usize> {
        self.cache.pools().use_count(pool).ok_or_else(|| {
            self.pool_error("use_count", pool, "no such pool on this device (never made, or freed and deleted)")
        })
    }

    /// The slot of a pool allocations may be routed to (`None`: unknown or freeable).
    pub fn routable_slot(&self, pool: MemPoolId) -> Option<Slot> {
        self.cache.pools().slot_of(pool).filter(|_| self.cache.pools().use_count(pool).unwrap_or(0) > 0)
    }

    /// The private pool the live block at `ptr` came from (`None`: the default pools, or no live
    /// block there).
    pub fn block_pool(&self, ptr: DevicePtr) -> Option<MemPoolId> {
        let id = self.cache.blocks().live_get(ptr.0)?;
        self.cache.pools().id_of(self.cache.blocks()[id].slot)
    }

    /// `emptyCache(mempool_id)`: if the pool is freeable, waits for the events of its blocks (if
    /// any) and frees its whole free segments, deleting it when none is left. Nothing during a
    /// capture.
    pub fn release_pool_cache(&mut self, mem: &dyn RawMemory, pool: MemPoolId) -> Result<()> {
        let Some(slot) = self.cache.pools().slot_of(pool) else {
            return Ok(());
        };
        if self.cache.pools().capturing() || self.cache.pools().use_count(pool) != Some(0) {
            return Ok(());
        }
        let blocks = self.cache.blocks();
        let waiting =
            self.events.iter().flat_map(|(_, q)| q.iter().map(|&(_, id)| id)).any(|id| blocks[id].slot == slot)
                || self.capture_frees.iter().any(|&id| blocks[id].slot == slot);
        if waiting {
            self.synchronize_and_free_events(mem)?;
        }
        self.release_freeable_pools(mem, Some(slot))
    }

    /// The segments of `pool` only (each with its `segment_pool_id`).
    pub fn pool_segments(&self, pool: MemPoolId) -> Vec<SegmentInfo> {
        let mut s = self.snapshot();
        s.segments.retain(|seg| seg.segment_pool_id == pool);
        s.segments
    }
}
