//! Where cudasem's policy departs from PyTorch's: how large a new segment is, and which cached
//! segments may serve a request. Each departure holds whatever the settings (ordinary segments
//! only; expandable segments grow page by page as in PyTorch).
//!
//! Beyond PyTorch:
//!
//! 1. **Small segments grow with the small pool.** PyTorch asks for 2 MiB per small segment
//!    however many it already holds, so a program with 100 MB of small tensors makes 50 driver
//!    calls (each `cudaMalloc` costs 70 µs or more, and freeing them later synchronizes the
//!    device). Here a new small segment is a quarter of what the small pool already holds (2 to
//!    20 MiB, in 2 MiB steps): the number of driver calls grows logarithmically, and the extra
//!    memory this can hold back is bounded by a quarter of the small pool, itself small next to
//!    the large pool. If the larger segment cannot be had, PyTorch's size is asked for.
//! 2. **Idle segments of other streams are adopted.** PyTorch reuses a cached block only on the
//!    stream that allocated it, because another stream's work may still be using it: a program
//!    that allocates on several streams holds one cache per stream, and each grows to its own
//!    peak. Here, before a new segment is made, a cached segment that is *wholly* free on another
//!    stream is handed to the requesting stream if an event recorded now on its owner stream has
//!    already completed — then no work queued on the owner can still touch it (and blocks used
//!    on further streams only enter the cache once their `record_stream` events completed). The
//!    check never waits; a busy owner keeps its segment.
//! 3. **Cached segments that are too small are coalesced instead of kept.** When a large request
//!    finds no cached block big enough, PyTorch adds a segment and keeps every cached one; in a
//!    training step whose later requests are larger than the earlier ones (ResNet-50: 2.5 GB
//!    cached in whole 14–50 MB segments while a 300 MB request makes a new segment), reserved
//!    memory grows by the request although the cache could have covered it. Here, when the
//!    stream's cached *whole* free segments of the large pool add up to the request, the oldest
//!    are returned to the driver until they cover it (the driver keeps queued work valid, as
//!    `cudaFree` does), and one segment of their combined size is made instead: reserved memory
//!    does not grow, this request is served, and the remainder is split for what the old
//!    segments served. It costs a few driver frees at the moments PyTorch grows (ResNet-50 trace:
//!    peak reserved 6.96 → 5.96 GB for one more driver allocation, and no segment traffic left by
//!    the third training step). Only the requesting stream's segments are coalesced: taking other
//!    streams' would let two streams take memory from each other through the driver on every
//!    iteration. Segments are never coalesced into an oversize block (`max_split_size_mb`), which
//!    could not be split.

use super::block::{BlockId, PoolKind};
use super::cache::Cache;
use super::settings::{LARGE_BUFFER, ROUND_LARGE, SMALL_BUFFER, SMALL_SIZE};
use super::stats::Metric;
use super::RawMemory;
use crate::driver::StreamId;
use crate::error::Result;

impl Cache {
    /// The segment size to ask for first (the caller falls back to `alloc_size`, PyTorch's size,
    /// if this one cannot be had). May return cached segments to the driver (departure 3).
    pub(crate) fn preferred_segment_size(
        &mut self,
        mem: &dyn RawMemory,
        pool: PoolKind,
        stream: StreamId,
        size: usize,
        alloc_size: usize,
    ) -> Result<usize> {
        match pool {
            PoolKind::Small if size <= SMALL_SIZE => {
                let held = self.stats.pool_current(Metric::ReservedBytes, pool).max(0) as usize;
                Ok((held / 4 / SMALL_BUFFER * SMALL_BUFFER).clamp(SMALL_BUFFER, LARGE_BUFFER))
            }
            PoolKind::Small => Ok(alloc_size),
            PoolKind::Large => self.coalesce_cached_segments(mem, stream, alloc_size),
        }
    }

    /// Whole free segments (one block, not expandable) of `pool`, of any stream.
    fn whole_free_segments(&self, pool: PoolKind) -> impl Iterator<Item = BlockId> + '_ {
        self.blocks.free_list(pool).ids().filter(|&id| {
            let b = &self.blocks[id];
            !b.is_split() && !b.is_expandable()
        })
    }

    /// Returns the stream's oldest whole cached large segments to the driver until they cover
    /// `alloc_size`, if they can; the size of the segment to make instead.
    fn coalesce_cached_segments(&mut self, mem: &dyn RawMemory, stream: StreamId, alloc_size: usize) -> Result<usize> {
        let mut whole: Vec<(u64, BlockId, usize)> = self
            .whole_free_segments(PoolKind::Large)
            .filter(|&id| self.blocks[id].stream == stream)
            .map(|id| (self.blocks[id].free_stamp, id, self.blocks[id].size))
            .collect();
        if whole.iter().map(|w| w.2).sum::<usize>() < alloc_size {
            return Ok(alloc_size);
        }
        whole.sort_unstable();
        let (mut victims, mut covered) = (Vec::new(), 0usize);
        for (_, id, bytes) in whole {
            if covered >= alloc_size {
                break;
            }
            victims.push(id);
            covered += bytes;
        }
        let merged = covered.div_ceil(ROUND_LARGE) * ROUND_LARGE;
        if merged >= self.settings.max_split() {
            return Ok(alloc_size);
        }
        for id in victims {
            self.release_block(mem, id)?;
        }
        Ok(merged)
    }

    /// The smallest wholly free segment of another stream that can serve `size` bytes and whose
    /// owner stream is idle, handed over to `stream` (taken out of its pool), if any. (Not with
    /// expandable segments in use: the caller asks only without.)
    pub(crate) fn adopt_idle_segment(
        &mut self,
        mem: &dyn RawMemory,
        pool: PoolKind,
        stream: StreamId,
        size: usize,
    ) -> Option<BlockId> {
        let (max_split, rounding) = (self.settings.max_split(), self.settings.max_non_split_rounding());
        let mut candidates: Vec<(usize, BlockId)> = self
            .whole_free_segments(pool)
            .map(|id| (self.blocks[id].size, id))
            .filter(|&(bytes, id)| {
                bytes >= size
                    && self.blocks[id].stream != stream
                    && !(size < max_split && bytes >= max_split)
                    && !(size >= max_split && bytes >= size.saturating_add(rounding))
            })
            .collect();
        candidates.sort_unstable();
        for (_, id) in candidates {
            let owner = self.blocks[id].stream;
            let idle = match mem.record_event(owner) {
                Ok(ev) => {
                    let done = mem.event_done(ev).unwrap_or(false);
                    mem.event_release(ev);
                    done
                }
                Err(_) => false,
            };
            if idle {
                self.blocks.pool_remove(id);
                self.blocks[id].stream = stream;
                return Some(id);
            }
        }
        None
    }
}
