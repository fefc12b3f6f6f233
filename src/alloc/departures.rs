//! Where cudasem's policy departs from PyTorch's: how large a new segment is, and which cached
//! segments may serve a request. Each departure holds whatever the settings (ordinary segments
//! only; expandable segments have their own rules in `expandable.rs`). The figures are from
//! `cudasem replay` on PyTorch 2.11's own traces (`bench/traces/`), BENCHMARKS.md.
//!
//! Beyond PyTorch:
//!
//! 1. **New segments grow with what their class already holds.** PyTorch asks for 2 MiB per
//!    small segment and 20 MiB per segment for a large request under 10 MiB, however many it
//!    already holds, so a program with 100 MB of small tensors makes 50 driver calls, and a
//!    transformer's hundreds of 2–9 MiB weights, gradients and optimizer states make hundreds
//!    (each `cudaMalloc` costs 70 µs or more, and freeing them later synchronizes the device).
//!    Here a new segment of either class is a quarter of what the class already holds, from
//!    its PyTorch size up to ten times it, in steps of it (small: 2 to 20 MiB; large requests
//!    under 10 MiB: 20 to 200 MiB, counted per stream): the number of driver calls grows
//!    logarithmically, the memory this can hold back is bounded by a quarter of the class (and
//!    by ten units), and the larger segments' free remainders serve any request of the pool —
//!    best fit packs the large tensors of a step with a changing shape into them, where PyTorch
//!    makes a segment of the tensor's exact size (BERT fine-tuning: 287 → 156 driver
//!    allocations, peak reserved 11.4 → 8.8 GB with departure 3). If the larger segment cannot
//!    be had, PyTorch's size is asked for. Requests of 10 MiB and more get PyTorch's segment:
//!    a step that repeats with the same shapes (an MLP training under a prefetching stream)
//!    fits them exactly, and any larger segment would only hold memory back.
//! 2. **Idle segments of finished streams are adopted.** PyTorch reuses a cached block only on
//!    the stream that allocated it, because another stream's work may still be using it: a
//!    program that allocates on a stream in one phase and on another in the next holds both
//!    caches. Here, before a new segment is made, a cached segment that is *wholly* free on
//!    another stream is handed to the requesting stream if that stream holds no allocated block
//!    at all and an event recorded now on it has already completed — then no work queued on it
//!    can still touch the memory, and it has nothing in use that the segment could be wanted
//!    for. A stream that still holds blocks keeps its segments: two streams that both keep
//!    working (a side stream uploading batches that the main stream `record_stream`s) would
//!    otherwise take segments from each other, each time making the other grow again
//!    (two-stream trace: peak reserved 1.08 × PyTorch's with adoption from busy streams, 1.00
//!    without). The check never waits.
//! 3. **When much of the cache is idle, it is coalesced instead of kept.** When a large request
//!    finds no cached block big enough, PyTorch adds a segment and keeps every cached one; in a
//!    program whose shapes change (a training step with new sizes, ResNet-50's first step, BERT
//!    with sequence lengths drawn per step), reserved memory grows by the request although the
//!    cache could have covered it (ResNet-50: 2.5 GB cached in whole 14–50 MB segments while a
//!    300 MB request makes a new segment). Here, when the requesting stream's cached *whole*
//!    free segments of the large pool cover the request and amount to at least an eighth of the
//!    large pool, all of them are returned to the driver (the driver keeps queued work valid, as
//!    `cudaFree` does) and one segment of their combined size is made instead: reserved memory
//!    does not grow, this request is served, and the remainder, one block, serves what the old
//!    segments served and more. Below an eighth, idle whole segments are the working set of a
//!    step that repeats (activations between two iterations): coalescing them would mix
//!    long-lived tensors into them and make the next iteration grow again (two-stream trace:
//!    1.07 × PyTorch's peak without the threshold). All of them go at once, so a step with new
//!    shapes coalesces once rather than at each of its requests (BERT: 347 → 287 driver
//!    allocations before departure 1's large class). Only the requesting stream's segments are
//!    coalesced (taking other streams' would let two streams take memory from each other
//!    through the driver), and never into an oversize block (`max_split_size_mb`), which could
//!    not be split.

use super::block::{BlockId, PoolKind};
use super::cache::Cache;
use super::settings::{LARGE_BUFFER, MIN_LARGE_ALLOC, ROUND_LARGE, SMALL_BUFFER, SMALL_SIZE};
use super::stats::Metric;
use super::RawMemory;
use crate::driver::StreamId;
use crate::error::Result;

/// Departure 1: a new segment is this share of what its class holds …
const GROWTH_SHARE: usize = 4;
/// … up to this many of its PyTorch size.
const GROWTH_UNITS: usize = 10;
/// Departure 3: coalesce when the idle whole segments are at least this share of the large pool.
const IDLE_SHARE: usize = 8;

/// A quarter of `held`, in whole `unit`s, from one to ten units.
fn grown_size(held: usize, unit: usize) -> usize {
    (held / GROWTH_SHARE / unit * unit).clamp(unit, GROWTH_UNITS * unit)
}

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
                let held = self.stats().pool_current(Metric::ReservedBytes, pool).max(0) as usize;
                Ok(grown_size(held, SMALL_BUFFER))
            }
            PoolKind::Small => Ok(alloc_size),
            PoolKind::Large => {
                // Coalescing frees segments: never during a capture.
                let coalesced =
                    if self.pools().capturing() { None } else { self.coalesce_idle_segments(mem, stream, alloc_size)? };
                if let Some(merged) = coalesced {
                    return Ok(merged);
                }
                if size < MIN_LARGE_ALLOC {
                    return Ok(grown_size(self.departures().grown_bytes(stream), LARGE_BUFFER));
                }
                Ok(alloc_size)
            }
        }
    }

    /// Whole free segments (one block, not expandable) of `pool`, of any stream.
    fn whole_free_segments(&self, pool: PoolKind) -> impl Iterator<Item = BlockId> + '_ {
        self.blocks().free_list(pool).ids().filter(|&id| {
            let b = &self.blocks()[id];
            !b.is_split() && !b.is_expandable()
        })
    }

    /// Departure 3: when the stream's whole cached large segments cover `alloc_size` and are at
    /// least an eighth of the large pool, returns them to the driver (oldest first, all that stay
    /// under `max_split_size`); the size of the one segment to make instead.
    fn coalesce_idle_segments(
        &mut self,
        mem: &dyn RawMemory,
        stream: StreamId,
        alloc_size: usize,
    ) -> Result<Option<usize>> {
        let mut whole: Vec<(u64, BlockId, usize)> = self
            .whole_free_segments(PoolKind::Large)
            .filter(|&id| self.blocks()[id].stream == stream)
            .map(|id| (self.blocks()[id].free_stamp, id, self.blocks()[id].size))
            .collect();
        let idle: usize = whole.iter().map(|w| w.2).sum();
        let held = self.stats().pool_current(Metric::ReservedBytes, PoolKind::Large).max(0) as usize;
        if idle < alloc_size || idle < held / IDLE_SHARE {
            return Ok(None);
        }
        whole.sort_unstable();
        let max_split = self.settings().max_split();
        let (mut victims, mut covered) = (Vec::new(), 0usize);
        for (_, id, bytes) in whole {
            let next = covered + bytes;
            if covered >= alloc_size && next.div_ceil(ROUND_LARGE) * ROUND_LARGE >= max_split {
                break;
            }
            victims.push(id);
            covered = next;
        }
        let merged = covered.div_ceil(ROUND_LARGE) * ROUND_LARGE;
        if merged >= max_split {
            return Ok(None);
        }
        for id in victims {
            self.release_block(mem, id)?;
        }
        Ok(Some(merged))
    }

    /// Departure 2: the smallest wholly free segment of another stream that can serve `size`
    /// bytes, whose owner stream holds no allocated block and is idle, handed over to `stream`
    /// (taken out of its pool), if any. (Not with expandable segments in use: the caller asks
    /// only without.)
    pub(crate) fn adopt_idle_segment(
        &mut self,
        mem: &dyn RawMemory,
        pool: PoolKind,
        stream: StreamId,
        size: usize,
    ) -> Option<BlockId> {
        let (max_split, rounding) = (self.settings().max_split(), self.settings().max_non_split_rounding());
        let mut candidates: Vec<(usize, BlockId)> = self
            .whole_free_segments(pool)
            .map(|id| (self.blocks()[id].size, id))
            .filter(|&(bytes, id)| {
                let owner = self.blocks()[id].stream;
                bytes >= size
                    && owner != stream
                    && !self.departures().holds_blocks(owner)
                    && !(size < max_split && bytes >= max_split)
                    && !(size >= max_split && bytes >= size.saturating_add(rounding))
            })
            .collect();
        candidates.sort_unstable();
        for (_, id) in candidates {
            let owner = self.blocks()[id].stream;
            let idle = match mem.record_event(owner) {
                Ok(ev) => {
                    let done = mem.event_done(ev).unwrap_or(false);
                    mem.event_release(ev);
                    done
                }
                Err(_) => false,
            };
            if idle {
                self.blocks_mut().pool_remove(id);
                self.blocks_mut()[id].stream = stream;
                let addr = self.blocks()[id].addr;
                self.departures_mut().segment_adopted(addr, stream);
                return Some(id);
            }
        }
        None
    }
}
