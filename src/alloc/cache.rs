//! The cached blocks and their books: what every path of the allocator shares (the malloc and
//! free paths in `state.rs`, deferred merges, expandable segments, the departures from PyTorch).
//!
//! [`Cache`] puts together the block graph ([`Blocks`]), the statistics ([`DeviceStats`]), the
//! history ([`History`]), the settings and the memory fraction, each behind its own methods, and
//! owns the steps that change several of them at once: handing a block out, returning it to its
//! pool, making and freeing a segment.

use super::block::{Block, BlockId, Blocks, PoolKind};
use super::books::DepartureBooks;
use super::history::{History, TraceAction};
use super::mem_pools::{PoolBooks, Slot, DEFAULT_SLOT};
use super::settings::AllocatorSettings;
use super::stats::{Count, DeviceStats, Metric};
use super::RawMemory;
use crate::driver::{DevicePtr, StreamId};
use crate::error::Result;

/// The blocks, their statistics and history, and the settings that govern them.
pub(crate) struct Cache {
    /// The device whose memory it caches (named in its `tracing` events).
    device: usize,
    settings: AllocatorSettings,
    blocks: Blocks,
    stats: DeviceStats,
    history: History,
    /// `set_memory_fraction`: the fraction and the byte limit it makes.
    fraction: Option<(f64, usize)>,
    /// What the departures from PyTorch keep track of (`departures.rs`).
    departures: DepartureBooks,
    /// The private pools' books and the routing underway (`mem_pools.rs`).
    pools: PoolBooks,
    /// The most bytes ever held from the driver (not reset with the peak statistics): expandable
    /// segments move free pages rather than map memory past it.
    high_water: usize,
}

impl Cache {
    pub fn new(device: usize, settings: AllocatorSettings) -> Cache {
        Cache {
            device,
            stats: DeviceStats::new(settings.max_split_size()),
            settings,
            blocks: Blocks::default(),
            history: History::default(),
            fraction: None,
            departures: DepartureBooks::default(),
            pools: PoolBooks::default(),
            high_water: 0,
        }
    }

    /// The settings in force.
    #[inline]
    pub fn settings(&self) -> &AllocatorSettings {
        &self.settings
    }

    /// The block graph and free lists.
    #[inline]
    pub fn blocks(&self) -> &Blocks {
        &self.blocks
    }

    /// The block graph and free lists, to change.
    #[inline]
    pub fn blocks_mut(&mut self) -> &mut Blocks {
        &mut self.blocks
    }

    /// The statistics.
    #[inline]
    pub fn stats(&self) -> &DeviceStats {
        &self.stats
    }

    /// The statistics, to change.
    #[inline]
    pub fn stats_mut(&mut self) -> &mut DeviceStats {
        &mut self.stats
    }

    /// The history (`_record_memory_history`).
    #[inline]
    pub fn history(&self) -> &History {
        &self.history
    }

    /// The history, to record in.
    #[inline]
    pub fn history_mut(&mut self) -> &mut History {
        &mut self.history
    }

    /// What the departures from PyTorch keep track of.
    #[inline]
    pub fn departures(&self) -> &DepartureBooks {
        &self.departures
    }

    /// The departures' books, to change.
    #[inline]
    pub fn departures_mut(&mut self) -> &mut DepartureBooks {
        &mut self.departures
    }

    /// The private pools' books and the routing underway.
    #[inline]
    pub fn pools(&self) -> &PoolBooks {
        &self.pools
    }

    /// The private pools' books, to change.
    #[inline]
    pub fn pools_mut(&mut self) -> &mut PoolBooks {
        &mut self.pools
    }

    pub fn set_settings(&mut self, settings: AllocatorSettings) {
        self.stats.set_max_split_size(settings.max_split_size());
        self.settings = settings;
    }

    /// Bytes held from the driver (`reserved_bytes.all.current`).
    #[inline]
    pub fn reserved(&self) -> usize {
        self.stats.get(Metric::ReservedBytes).max(0) as usize
    }

    /// The most bytes ever reserved.
    #[inline]
    pub fn high_water(&self) -> usize {
        self.high_water
    }

    /// `bytes` more of `pool` are held from the driver.
    #[inline]
    pub fn reserve(&mut self, pool: PoolKind, bytes: usize) {
        self.stats.increase(Metric::ReservedBytes, pool, bytes);
        self.high_water = self.high_water.max(self.reserved());
    }

    /// `set_memory_fraction`: at most `limit` bytes reserved.
    pub fn set_fraction(&mut self, fraction: f64, limit: usize) {
        self.fraction = Some((fraction, limit));
    }

    /// The fraction set and its byte limit, if any.
    pub fn fraction(&self) -> Option<(f64, usize)> {
        self.fraction
    }

    pub fn would_exceed_fraction(&self, bytes: usize) -> bool {
        self.fraction.is_some_and(|(_, limit)| self.reserved().saturating_add(bytes) > limit)
    }

    /// A new segment of `bytes` at `ptr` for `stream`'s request of `size` (rounded) bytes, of the
    /// pool at `slot` (default or private), in no list yet.
    pub fn add_segment(
        &mut self,
        ptr: DevicePtr,
        bytes: usize,
        stream: StreamId,
        (pool, slot): (PoolKind, Slot),
        size: usize,
    ) -> BlockId {
        let mut b = Block::new(ptr.0, bytes, stream, pool);
        b.free_stamp = self.blocks.clock();
        b.slot = slot;
        self.pools.segment_added(slot);
        let id = self.blocks.insert(b);
        self.stats.increase(Metric::Segment, pool, 1);
        self.reserve(pool, bytes);
        if bytes >= self.settings.max_split() {
            self.stats.oversize_segment(true);
        }
        self.stats.count(Count::DeviceAlloc);
        self.history.record(TraceAction::SegmentAlloc, ptr.0, bytes, stream);
        tracing::debug!(
            target: "cudasem::alloc",
            device = self.device,
            stream = stream.0,
            size = bytes,
            address = ptr.0,
            pool = ?pool,
            private_pool = slot != DEFAULT_SLOT,
            "segment allocated"
        );
        if slot == DEFAULT_SLOT {
            self.departures.segment_made(ptr.0, bytes, stream, pool, size);
        }
        id
    }

    /// Gives a whole free segment back to the driver.
    pub fn release_block(&mut self, mem: &dyn RawMemory, id: BlockId) -> Result<()> {
        let b = &self.blocks[id];
        let (addr, size, pool, stream, slot) = (b.addr, b.size, b.pool, b.stream, b.slot);
        mem.free(DevicePtr(addr), size)?;
        self.pools.segment_freed(slot);
        self.blocks.pool_remove(id);
        self.blocks.remove(id);
        self.stats.decrease(Metric::Segment, pool, 1);
        self.stats.decrease(Metric::ReservedBytes, pool, size);
        if size >= self.settings.max_split() {
            self.stats.oversize_segment(false);
        }
        self.stats.count(Count::DeviceFree);
        self.history.record(TraceAction::SegmentFree, addr, size, stream);
        tracing::debug!(
            target: "cudasem::alloc",
            device = self.device,
            stream = stream.0,
            size,
            address = addr,
            pool = ?pool,
            private_pool = slot != DEFAULT_SLOT,
            "segment freed"
        );
        self.departures.segment_freed(addr);
        Ok(())
    }

    /// Marks `id` (out of its pool, split already) allocated for a request of `orig` bytes.
    #[inline]
    pub fn hand_out(&mut self, id: BlockId, pool: PoolKind, orig: usize) -> DevicePtr {
        let b = &mut self.blocks[id];
        b.allocated = true;
        b.requested = orig;
        let (addr, size, stream) = (b.addr, b.size, b.stream);
        self.blocks.live_insert(addr, id);
        self.departures.allocated(stream);
        let s = &mut self.stats;
        s.increase(Metric::Allocation, pool, 1);
        s.increase(Metric::AllocatedBytes, pool, size);
        s.increase(Metric::Active, pool, 1);
        s.increase(Metric::ActiveBytes, pool, size);
        s.increase(Metric::RequestedBytes, pool, orig);
        if size >= self.settings.max_split() {
            s.oversize_allocation(true);
        }
        // Like PyTorch's traces, alloc and free events carry the size asked for.
        self.history.record(TraceAction::Alloc, addr, orig, stream);
        DevicePtr(addr)
    }

    /// Returns a block whose frees completed to its pool, merging it with free neighbours.
    pub fn free_block(&mut self, id: BlockId) {
        let b = &self.blocks[id];
        let (orig_size, requested, pool, prev, next) = (b.size, b.requested, b.pool, b.prev, b.next);
        self.history.record(TraceAction::FreeCompleted, b.addr, b.requested, b.stream);
        let (mut net_blocks, mut net_bytes) = (0i64, 0i64);
        for candidate in [prev, next] {
            let subsumed = self.blocks.try_merge(id, candidate);
            if subsumed > 0 {
                net_blocks -= 1;
                net_bytes -= subsumed as i64;
            }
        }
        let clock = self.blocks.clock();
        let b = &mut self.blocks[id];
        b.requested = 0;
        b.free_stamp = clock;
        let (split, expandable, size) = (b.is_split(), b.is_expandable(), b.size);
        self.blocks.pool_insert(id);
        if split {
            net_blocks += 1;
            net_bytes += size as i64;
        }
        self.freed_stats(pool, expandable, (net_blocks, net_bytes), orig_size, requested);
    }

    /// The statistics of a block of `size` bytes (`requested` asked for) going back to its pool,
    /// its merges changing the inactive split blocks and bytes by `net`.
    #[inline]
    pub fn freed_stats(&mut self, pool: PoolKind, expandable: bool, net: (i64, i64), size: usize, requested: usize) {
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

    /// `garbage_collection_threshold`: past that fraction of the allowed memory, frees cached
    /// whole large segments that have waited longer than average (in cache lookups since they were
    /// cached), until under the threshold.
    pub fn garbage_collect(&mut self, mem: &dyn RawMemory) -> Result<()> {
        let (Some((_, limit)), Some(t)) = (self.fraction, self.settings.garbage_collection_threshold()) else {
            return Ok(());
        };
        let threshold = (t * limit as f64) as usize;
        let reserved = self.reserved();
        if reserved <= threshold {
            return Ok(());
        }
        let target = reserved - threshold;
        let clock = self.blocks.clock();
        let mut candidates: Vec<(BlockId, u64, usize)> = self
            .blocks
            .free_list(PoolKind::Large)
            .ids()
            .map(|id| (id, &self.blocks[id]))
            .filter(|(_, b)| !b.is_split() && !b.is_expandable())
            .map(|(id, b)| (id, clock - b.free_stamp, b.size))
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
        tracing::debug!(
            target: "cudasem::alloc",
            device = self.device,
            reserved,
            threshold,
            reclaimed,
            "garbage collection freed {reclaimed} bytes of cached segments"
        );
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
