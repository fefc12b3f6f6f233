//! The allocator's state behind its lock, and the malloc and free paths (PyTorch's
//! `DeviceCachingAllocator`): best fit, split, merge, stream reuse, events, the OOM path.

use super::block::{Block, BlockId, BlockPool, LiveMap, PoolKind, Slab, NIL};
use super::deferred::Deferred;
use super::expandable::ExpandableSegment;
use super::history::{History, TraceAction};
use super::settings::{allocation_size, AllocatorSettings, MIN_BLOCK_SIZE, SMALL_SIZE};
use super::stats::{DeviceStats, Metric};
use super::RawMemory;
use crate::driver::{DevicePtr, EventId, StreamId};
use crate::error::{Error, Result};
use std::collections::VecDeque;

/// Everything one device's allocator owns.
pub(crate) struct State {
    pub device: usize,
    pub settings: AllocatorSettings,
    pub blocks: Slab,
    /// `[small, large]`.
    pub pools: [BlockPool; 2],
    /// Allocated blocks by address.
    pub live: LiveMap,
    /// Per stream, the events recorded for freed blocks that other streams used, in order.
    pub events: Vec<(StreamId, VecDeque<(EventId, BlockId)>)>,
    pub pending_events: usize,
    pub stats: DeviceStats,
    /// Bytes held from the driver (`reserved_bytes.all.current`).
    pub reserved: usize,
    /// `set_memory_fraction`: the fraction and the byte limit it makes.
    pub fraction: Option<(f64, usize)>,
    /// Virtual-memory granularity, `None` when the memory has none.
    pub granularity: Option<usize>,
    pub expandable: Vec<Option<ExpandableSegment>>,
    pub history: History,
    /// Cache lookups so far: the garbage collector's clock.
    pub clock: u64,
    /// A freed block whose merge into the free block after it waits for the next call (see
    /// `deferred.rs`); every call but a malloc that reuses it completes the merge first.
    pub deferred: Option<Deferred>,
    /// Whether frees may defer their merge (always, except in the tests that compare both ways).
    pub defer_merges: bool,
    /// Mallocs served by a deferred block (tests check that the path is taken).
    #[cfg(test)]
    pub deferred_reuses: usize,
}

impl State {
    pub fn new(device: usize, settings: AllocatorSettings, granularity: Option<usize>) -> State {
        let stats =
            DeviceStats { max_split_size: settings.max_split_size().map_or(-1, |m| m as i64), ..Default::default() };
        State {
            device,
            settings,
            blocks: Slab::default(),
            pools: Default::default(),
            live: LiveMap::default(),
            events: Vec::new(),
            pending_events: 0,
            stats,
            reserved: 0,
            fraction: None,
            granularity: granularity.filter(|&g| g > 0),
            expandable: Vec::new(),
            history: History::default(),
            clock: 0,
            deferred: None,
            defer_merges: true,
            #[cfg(test)]
            deferred_reuses: 0,
        }
    }

    pub fn set_settings(&mut self, settings: AllocatorSettings) {
        self.stats.max_split_size = settings.max_split_size().map_or(-1, |m| m as i64);
        self.settings = settings;
    }

    /// Expandable segments asked for and supported by the memory.
    pub fn expandable_active(&self) -> bool {
        self.settings.expandable_segments() && self.granularity.is_some()
    }

    pub fn pool_insert(&mut self, id: BlockId) {
        let b = &self.blocks[id];
        let pool = &mut self.pools[b.pool.index()];
        if b.mapped {
            pool.free.insert(b, id);
        } else {
            pool.unmapped.insert(b, id);
        }
    }

    pub fn pool_remove(&mut self, id: BlockId) {
        let b = &self.blocks[id];
        let pool = &mut self.pools[b.pool.index()];
        if b.mapped {
            pool.free.remove(b);
        } else {
            pool.unmapped.remove(b);
        }
    }

    pub fn would_exceed_fraction(&self, bytes: usize) -> bool {
        self.fraction.is_some_and(|(_, limit)| self.reserved.saturating_add(bytes) > limit)
    }

    // ---------------------------------------------------------------- malloc

    pub fn malloc(&mut self, mem: &dyn RawMemory, orig: usize, stream: StreamId) -> Result<DevicePtr> {
        let size = self.settings.round_size(orig);
        if let Some(d) = self.deferred {
            if self.pending_events == 0 {
                if let Some(ptr) = self.reuse_deferred(d, size, orig, stream) {
                    return Ok(ptr);
                }
            }
            self.settle();
        }
        if self.pending_events > 0 {
            self.process_events(mem)?;
        }
        let pool = PoolKind::of(size);
        let alloc_size = allocation_size(size);
        let mut found = self.get_free_block(pool, stream, size);
        if found.is_none() {
            found = self.adopt_idle_segment(mem, pool, stream, size);
        }
        if found.is_none() {
            if self.fraction.is_some() && self.settings.garbage_collection_threshold().is_some() {
                self.garbage_collect(mem)?;
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

    /// Best fit among the stream's free blocks, with the oversize rules.
    fn get_free_block(&mut self, pool: PoolKind, stream: StreamId, size: usize) -> Option<BlockId> {
        self.clock += 1;
        let blocks = &self.blocks;
        let free = &mut self.pools[pool.index()].free;
        let found = free.best_fit(stream, size)?;
        let max_split = self.settings.max_split();
        let oversize_refused = |bytes: usize| {
            // An oversize block is not split for a smaller request, nor given to an oversize
            // request much smaller than itself.
            (size < max_split && bytes >= max_split)
                || (size >= max_split && bytes >= size.saturating_add(self.settings.max_non_split_rounding()))
        };
        if !blocks[found.id].is_expandable() {
            if oversize_refused(found.size) {
                return None;
            }
            free.take(found);
            return Some(found.id);
        }
        let id = {
            let mut it = free.at_least(stream, size).map(|(_, id)| id);
            let mut id = it.next()?;
            if self.settings.expandable_segments() {
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
        self.pool_remove(id);
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
            self.stats.num_alloc_retries += 1;
        }
        if self.expandable_active() {
            return self.try_allocate_expandable(mem, pool, stream, size);
        }
        let preferred = self.preferred_segment_size(mem, pool, stream, size, alloc_size)?;
        let sizes: &[usize] = if preferred > alloc_size { &[preferred, alloc_size] } else { &[alloc_size] };
        let mut attempt = None;
        for &bytes in sizes {
            if self.would_exceed_fraction(bytes) {
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
        self.reserved += alloc_size;
        let mut b = Block::new(ptr.0, alloc_size, stream, pool);
        b.free_stamp = self.clock;
        let id = self.blocks.insert(b);
        self.stats.increase(Metric::Segment, pool, 1);
        self.stats.increase(Metric::ReservedBytes, pool, alloc_size);
        if alloc_size >= self.settings.max_split() {
            self.stats.oversize_segments.increase(1);
        }
        self.stats.num_device_alloc += 1;
        self.history.record(TraceAction::SegmentAlloc, ptr.0, alloc_size, stream);
        Ok(Some(id))
    }

    fn should_split(&self, b: &Block, size: usize) -> bool {
        let remaining = b.size - size;
        if b.pool == PoolKind::Small || self.expandable_active() {
            remaining >= MIN_BLOCK_SIZE
        } else {
            size < self.settings.max_split() && remaining > SMALL_SIZE
        }
    }

    /// Hands out `id` (taken out of its pool), splitting off what the request does not need.
    fn alloc_found_block(&mut self, id: BlockId, size: usize, orig: usize) -> DevicePtr {
        let b = &self.blocks[id];
        let (pool, expandable, already_split) = (b.pool, b.is_expandable(), b.is_split());
        let id = if self.should_split(b, size) {
            let remaining = b.size - size;
            let mut front = Block::new(b.addr, size, b.stream, pool);
            front.prev = b.prev;
            front.next = id;
            front.expandable = b.expandable;
            let prev = b.prev;
            let front_id = self.blocks.insert(front);
            if prev != NIL {
                self.blocks[prev].next = front_id;
            }
            let clock = self.clock;
            let rest = &mut self.blocks[id];
            rest.prev = front_id;
            rest.addr += size as u64;
            rest.size = remaining;
            rest.free_stamp = clock;
            self.pool_insert(id);
            if !expandable {
                if already_split {
                    self.stats.decrease(Metric::InactiveSplitBytes, pool, size);
                } else {
                    self.stats.increase(Metric::InactiveSplit, pool, 1);
                    self.stats.increase(Metric::InactiveSplitBytes, pool, remaining);
                }
            }
            front_id
        } else {
            if already_split && !expandable {
                self.stats.decrease(Metric::InactiveSplitBytes, pool, b.size);
                self.stats.decrease(Metric::InactiveSplit, pool, 1);
            }
            id
        };
        self.hand_out(id, pool, orig)
    }

    /// Marks `id` (out of its pool, split already) allocated for a request of `orig` bytes.
    pub(super) fn hand_out(&mut self, id: BlockId, pool: PoolKind, orig: usize) -> DevicePtr {
        let b = &mut self.blocks[id];
        b.allocated = true;
        b.requested = orig;
        let (addr, size, stream) = (b.addr, b.size, b.stream);
        self.live.insert(addr, id);
        let s = &mut self.stats;
        s.increase(Metric::Allocation, pool, 1);
        s.increase(Metric::AllocatedBytes, pool, size);
        s.increase(Metric::Active, pool, 1);
        s.increase(Metric::ActiveBytes, pool, size);
        s.increase(Metric::RequestedBytes, pool, orig);
        if size >= self.settings.max_split() {
            s.oversize_allocations.increase(1);
        }
        // Like PyTorch's traces, alloc and free events carry the size asked for.
        self.history.record(TraceAction::Alloc, addr, orig, stream);
        DevicePtr(addr)
    }

    fn out_of_memory(&mut self, mem: &dyn RawMemory, stream: StreamId, alloc_size: usize) -> Error {
        self.stats.num_ooms += 1;
        let (free, total) = mem.mem_info().unwrap_or((0, 0));
        self.history.record(TraceAction::Oom, free as u64, alloc_size, stream);
        let allocated = self.stats.get(Metric::AllocatedBytes).max(0) as usize;
        Error::OutOfMemory {
            device: self.device,
            requested: alloc_size,
            total,
            free,
            allocated,
            reserved_unallocated: self.reserved.saturating_sub(allocated),
        }
    }

    // ---------------------------------------------------------------- free

    pub fn free(&mut self, mem: &dyn RawMemory, ptr: DevicePtr) -> Result<()> {
        self.settle();
        let Some(id) = self.live.remove(&ptr.0) else {
            return Err(self.invalid_pointer(ptr));
        };
        let b = &mut self.blocks[id];
        b.allocated = false;
        let (pool, size, stream, has_uses) = (b.pool, b.size, b.stream, !b.stream_uses.is_empty());
        let requested = b.requested;
        self.stats.decrease(Metric::Allocation, pool, 1);
        self.stats.decrease(Metric::AllocatedBytes, pool, size);
        if size >= self.settings.max_split() {
            self.stats.oversize_allocations.decrease(1);
        }
        self.history.record(TraceAction::FreeRequested, ptr.0, requested, stream);
        if has_uses {
            self.insert_events(mem, id)
        } else if self.can_defer(id) {
            self.defer(id);
            Ok(())
        } else {
            self.free_block(id);
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
        let Some(&id) = self.live.get(&ptr.0) else {
            return Err(self.invalid_pointer(ptr));
        };
        let b = &mut self.blocks[id];
        if stream != b.stream && !b.stream_uses.contains(&stream) {
            b.stream_uses.push(stream);
        }
        Ok(())
    }

    /// Records an event on every stream that used the freed block; it returns to its pool when
    /// they all completed.
    fn insert_events(&mut self, mem: &dyn RawMemory, id: BlockId) -> Result<()> {
        let uses = std::mem::take(&mut self.blocks[id].stream_uses);
        let mut failure = None;
        for s in uses {
            match mem.record_event(s) {
                Ok(ev) => {
                    self.blocks[id].event_count += 1;
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
            if self.blocks[id].event_count == 0 {
                self.free_block(id);
            }
            synced?;
        }
        Ok(())
    }

    /// Completed events release their blocks (stream by stream, in order).
    pub fn process_events(&mut self, mem: &dyn RawMemory) -> Result<()> {
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
        let b = &mut self.blocks[id];
        b.event_count -= 1;
        if b.event_count == 0 {
            self.free_block(id);
        }
    }

    /// Returns a block whose frees completed to its pool, merging it with free neighbours.
    pub fn free_block(&mut self, id: BlockId) {
        let b = &self.blocks[id];
        let (orig_size, requested, pool, prev, next) = (b.size, b.requested, b.pool, b.prev, b.next);
        self.history.record(TraceAction::FreeCompleted, b.addr, b.requested, b.stream);
        let (mut net_blocks, mut net_bytes) = (0i64, 0i64);
        for candidate in [prev, next] {
            let subsumed = self.try_merge(id, candidate);
            if subsumed > 0 {
                net_blocks -= 1;
                net_bytes -= subsumed as i64;
            }
        }
        let clock = self.clock;
        let b = &mut self.blocks[id];
        b.requested = 0;
        b.free_stamp = clock;
        let (split, expandable, size) = (b.is_split(), b.is_expandable(), b.size);
        self.pool_insert(id);
        if split {
            net_blocks += 1;
            net_bytes += size as i64;
        }
        self.freed_stats(pool, expandable, (net_blocks, net_bytes), orig_size, requested);
    }

    /// The statistics of a block of `size` bytes (`requested` asked for) going back to its pool,
    /// its merges changing the inactive split blocks and bytes by `net`.
    pub(super) fn freed_stats(
        &mut self,
        pool: PoolKind,
        expandable: bool,
        net: (i64, i64),
        size: usize,
        requested: usize,
    ) {
        let s = &mut self.stats;
        if !expandable {
            // Expandable segments' free pieces can always be unmapped: not "non-releasable".
            apply(s, Metric::InactiveSplit, pool, net.0);
            apply(s, Metric::InactiveSplitBytes, pool, net.1);
        }
        s.decrease(Metric::Active, pool, 1);
        s.decrease(Metric::ActiveBytes, pool, size);
        s.decrease(Metric::RequestedBytes, pool, requested);
    }

    /// Merges the free block `src` into its neighbour `dst`; returns the bytes gained (0: none).
    pub fn try_merge(&mut self, dst: BlockId, src: BlockId) -> usize {
        if src == NIL {
            return 0;
        }
        let s = &self.blocks[src];
        if !s.is_available() || s.mapped != self.blocks[dst].mapped {
            return 0;
        }
        let (s_addr, s_size, s_prev, s_next) = (s.addr, s.size, s.prev, s.next);
        self.pool_remove(src);
        let d = &mut self.blocks[dst];
        if d.prev == src {
            d.addr = s_addr;
            d.prev = s_prev;
            d.size += s_size;
            if s_prev != NIL {
                self.blocks[s_prev].next = dst;
            }
        } else {
            d.next = s_next;
            d.size += s_size;
            if s_next != NIL {
                self.blocks[s_next].prev = dst;
            }
        }
        self.blocks.remove(src);
        s_size
    }

    // ---------------------------------------------------------------- releasing memory

    /// Gives a whole free segment back to the driver.
    pub(crate) fn release_block(&mut self, mem: &dyn RawMemory, id: BlockId) -> Result<()> {
        let b = &self.blocks[id];
        let (addr, size, pool, stream) = (b.addr, b.size, b.pool, b.stream);
        mem.free(DevicePtr(addr), size)?;
        self.pool_remove(id);
        self.blocks.remove(id);
        self.reserved -= size;
        self.stats.decrease(Metric::Segment, pool, 1);
        self.stats.decrease(Metric::ReservedBytes, pool, size);
        if size >= self.settings.max_split() {
            self.stats.oversize_segments.decrease(1);
        }
        self.stats.num_device_free += 1;
        self.history.record(TraceAction::SegmentFree, addr, size, stream);
        Ok(())
    }

    /// With `max_split_size`: frees the cached oversize block that fits, else oversize blocks,
    /// largest first, until as much as asked for is freed. Returns whether that much was freed.
    fn release_available_cached_blocks(
        &mut self,
        mem: &dyn RawMemory,
        pool: PoolKind,
        stream: StreamId,
        size: usize,
    ) -> Result<bool> {
        let max_split = self.settings.max_split();
        if max_split == usize::MAX {
            return Ok(false);
        }
        let want = size.max(max_split);
        let free = &self.pools[pool.index()].free;
        let first = free.at_least(stream, want).next();
        if let Some((_, id)) = first {
            if !self.blocks[id].is_expandable() {
                self.release_block(mem, id)?;
                return Ok(true);
            }
        }
        let (mut victims, mut total) = (Vec::new(), 0usize);
        for (size, id) in free.below(stream, want) {
            if total >= want || size < max_split {
                break;
            }
            if !self.blocks[id].is_expandable() {
                victims.push(id);
                total += size;
            }
        }
        for id in victims {
            self.release_block(mem, id)?;
        }
        Ok(total >= want)
    }

    /// Waits for every stream, then frees every fully free segment and unmaps every free page
    /// (`empty_cache`, and the last retry before out of memory).
    pub fn release_cached_blocks(&mut self, mem: &dyn RawMemory) -> Result<()> {
        self.synchronize_and_free_events(mem)?;
        self.release_blocks(mem, PoolKind::Large)?;
        self.release_blocks(mem, PoolKind::Small)
    }

    fn synchronize_and_free_events(&mut self, mem: &dyn RawMemory) -> Result<()> {
        self.stats.num_sync_all_streams += 1;
        mem.synchronize()?;
        for (_, q) in std::mem::take(&mut self.events) {
            for (ev, id) in q {
                self.event_completed(mem, ev, id);
            }
        }
        Ok(())
    }

    fn release_blocks(&mut self, mem: &dyn RawMemory, pool: PoolKind) -> Result<()> {
        let ids: Vec<BlockId> = self.pools[pool.index()].free.ids().collect();
        let mut to_unmap = Vec::new();
        for id in ids {
            let b = &self.blocks[id];
            if b.is_expandable() {
                to_unmap.push(id);
            } else if !b.is_split() {
                self.release_block(mem, id)?;
            }
        }
        for id in to_unmap {
            self.unmap_block(mem, id)?;
        }
        self.release_unmapped_segments(mem, pool)
    }

    /// `garbage_collection_threshold`: past that fraction of the allowed memory, frees cached
    /// whole large segments that have waited longer than average (in cache lookups since they were
    /// cached), until under the threshold.
    fn garbage_collect(&mut self, mem: &dyn RawMemory) -> Result<()> {
        let (Some((_, limit)), Some(t)) = (self.fraction, self.settings.garbage_collection_threshold()) else {
            return Ok(());
        };
        let threshold = (t * limit as f64) as usize;
        if self.reserved <= threshold {
            return Ok(());
        }
        let target = self.reserved - threshold;
        let mut candidates: Vec<(BlockId, u64, usize)> = self.pools[PoolKind::Large.index()]
            .free
            .ids()
            .map(|id| (id, &self.blocks[id]))
            .filter(|(_, b)| !b.is_split() && !b.is_expandable())
            .map(|(id, b)| (id, self.clock - b.free_stamp, b.size))
            .collect();
        let mut total_age: u64 = candidates.iter().map(|c| c.1).sum();
        let mut reclaimed = 0;
        while reclaimed < target && !candidates.is_empty() {
            let average = total_age as f64 / candidates.len() as f64;
            let (old, young): (Vec<_>, Vec<_>) = candidates.into_iter().partition(|c| c.1 as f64 >= average);
            if old.is_empty() {
                break;
            }
            for (id, age, size) in old {
                self.release_block(mem, id)?;
                reclaimed += size;
                total_age -= age;
            }
            candidates = young;
        }
        Ok(())
    }
}

fn apply(s: &mut DeviceStats, m: Metric, pool: PoolKind, n: i64) {
    if n > 0 {
        s.increase(m, pool, n as usize);
    } else if n < 0 {
        s.decrease(m, pool, n.unsigned_abs() as usize);
    }
}
