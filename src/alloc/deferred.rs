//! Deferred merges: the alloc/free pair of a small op without touching the free lists.
//!
//! A loop of small ops allocates an output, launches, and frees the output, over and over. With
//! PyTorch's policy each free merges the block into the free remainder of its segment and the
//! next malloc splits the same block off again: two free-list removals, two insertions, a block
//! made and a block dropped per pair, for a state that ends where it started.
//!
//! Here a free whose block would merge only with the free block after it (the common case: the
//! block was split off the front of that remainder) does everything PyTorch's free does — the
//! live map, the statistics, the history — except the merge, which waits. If the next call is a
//! malloc of the same rounded size on the same stream, and the merged block is what best fit
//! would choose, the split would give back exactly the block and the remainder as they are: so
//! the block is handed out again as it stands. Any other call completes the merge first
//! ([`DeferredMerge::settle`]), so every observer — statistics, snapshots, `empty_cache`, other sizes or
//! streams — sees PyTorch's state; only block ids (never shown) differ. A test runs random
//! programs through allocators with and without deferral and compares every address, statistic
//! and snapshot.

use super::block::{BlockId, PoolKind, NIL};
use super::cache::Cache;
use super::history::TraceAction;
use super::mem_pools::DEFAULT_SLOT;
use super::stats::Metric;
use crate::driver::{DevicePtr, StreamId};

/// A freed block whose merge into the next block waits, and the allocator clock when it was
/// freed (the merged block's garbage-collection stamp).
#[derive(Debug, Clone, Copy)]
struct Deferred {
    id: BlockId,
    stamp: u64,
}

/// The deferred merge of an allocator: at most one pending, and whether frees may defer.
#[derive(Debug)]
pub(crate) struct DeferredMerge {
    /// A freed block whose merge into the free block after it waits for the next call; every
    /// call but a malloc that reuses it completes the merge first.
    pending: Option<Deferred>,
    /// Whether frees may defer their merge (always, except in the tests that compare both ways).
    enabled: bool,
    /// Mallocs served by a deferred block (tests check that the path is taken).
    #[cfg(test)]
    reuses: usize,
}

impl Default for DeferredMerge {
    fn default() -> DeferredMerge {
        DeferredMerge {
            pending: None,
            enabled: true,
            #[cfg(test)]
            reuses: 0,
        }
    }
}

impl DeferredMerge {
    /// Turns deferral off or on (for tests comparing both).
    #[cfg(test)]
    pub fn set_enabled(&mut self, on: bool) {
        self.enabled = on;
    }

    /// Whether a merge is pending.
    #[inline]
    pub fn is_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// Mallocs served by a deferred block so far.
    #[cfg(test)]
    pub fn reuses(&self) -> usize {
        self.reuses
    }

    /// Whether the free of `id` (no stream uses, just taken out of the live map) may defer its
    /// merge: an ordinary block of the default small pool whose only free neighbour is the one
    /// after it.
    #[inline]
    pub fn can_defer(&self, c: &Cache, id: BlockId) -> bool {
        let b = &c.blocks()[id];
        if !self.enabled || b.pool != PoolKind::Small || b.is_expandable() || b.next == NIL || b.slot != DEFAULT_SLOT {
            return false;
        }
        let next = &c.blocks()[b.next];
        let prev_merges = b.prev != NIL && {
            let p = &c.blocks()[b.prev];
            p.is_available() && p.mapped == b.mapped
        };
        next.is_available() && next.mapped == b.mapped && !prev_merges
    }

    /// Frees `id` as [`Cache::free_block`] would, but for the merge with the next block.
    #[inline]
    pub fn defer(&mut self, c: &mut Cache, id: BlockId) {
        let b = &c.blocks()[id];
        let next = &c.blocks()[b.next];
        let (size, requested, pool, addr, stream) = (b.size, b.requested, b.pool, b.addr, b.stream);
        // `free_block`'s accounting: the next block is subsumed, then the merged block counts
        // as an inactive split block if it is still split.
        let merged_split = b.prev != NIL || next.next != NIL;
        let merged = (size + next.size) as i64;
        let net = (merged_split as i64 - 1, if merged_split { merged } else { 0 } - next.size as i64);
        c.history_mut().record(TraceAction::FreeCompleted, addr, requested, stream);
        c.blocks_mut()[id].requested = 0;
        c.freed_stats(pool, false, net, size, requested);
        self.pending = Some(Deferred { id, stamp: c.blocks().clock() });
    }

    /// Completes a deferred merge, if any: the state becomes PyTorch's.
    #[inline]
    pub fn settle(&mut self, c: &mut Cache) {
        if let Some(Deferred { id, stamp }) = self.pending.take() {
            let next = c.blocks()[id].next;
            c.blocks_mut().try_merge(id, next);
            c.blocks_mut()[id].free_stamp = stamp;
            c.blocks_mut().pool_insert(id);
        }
    }

    /// A malloc of `size` bytes (rounded; `orig` asked for) on `stream` served by the deferred
    /// block, when one is pending and best fit over the merged state would choose the merged
    /// block and split this very block off it; `None` otherwise (nothing changed).
    #[inline]
    pub fn reuse(&mut self, c: &mut Cache, size: usize, orig: usize, stream: StreamId) -> Option<DevicePtr> {
        let d = self.pending?;
        let b = &c.blocks()[d.id];
        if b.size != size || b.stream != stream {
            return None;
        }
        let next_id = b.next;
        let next = &c.blocks()[next_id];
        let merged = (size + next.size, b.addr);
        // (Within a small segment the merged block is never oversize: `max_split_size` > 20 MiB.)
        // Best fit is the smallest (size, address) of at least `size` on the stream; the next
        // block's entry stands for the merged block.
        let pool = c.blocks().free_list(PoolKind::Small);
        let other = pool.at_least(b.stream, size).find(|&(_, id)| id != next_id);
        if other.is_some_and(|(bytes, id)| (bytes, c.blocks()[id].addr) < merged) {
            return None;
        }
        let merged_split = b.prev != NIL || next.next != NIL;
        self.pending = None;
        #[cfg(test)]
        {
            self.reuses += 1;
        }
        // As `get_free_block` and `alloc_found_block` would: a lookup on the clock, the
        // remainder stamped, the split accounted.
        let clock = c.blocks_mut().tick();
        c.blocks_mut()[next_id].free_stamp = clock;
        if merged_split {
            c.stats_mut().decrease(Metric::InactiveSplitBytes, PoolKind::Small, size);
        } else {
            c.stats_mut().increase(Metric::InactiveSplit, PoolKind::Small, 1);
            c.stats_mut().increase(Metric::InactiveSplitBytes, PoolKind::Small, merged.0 - size);
        }
        Some(c.hand_out(d.id, PoolKind::Small, orig))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{AccountingMemory, AllocatorSettings, CachingAllocator};
    use crate::driver::{DevicePtr, StreamId};
    use std::sync::Arc;

    /// Two allocators over their own memories, one deferring merges and one not.
    struct Pair {
        mems: [Arc<AccountingMemory>; 2],
        allocs: [CachingAllocator; 2],
    }

    impl Pair {
        fn new(conf: &str, capacity: usize, granularity: Option<usize>) -> Pair {
            let settings = AllocatorSettings::parse(conf).expect("valid settings");
            let mems = [0, 1].map(|_| Arc::new(AccountingMemory::with_options(0, capacity, granularity)));
            let allocs = [0, 1].map(|i| {
                let a = CachingAllocator::new(0, mems[i].clone(), settings.clone());
                a.set_defer_merges(i == 0);
                a.record_history(true, 10_000);
                a
            });
            Pair { mems, allocs }
        }

        /// Runs `f` on both and checks that the results agree (looking at nothing else, so
        /// that a deferred merge stays deferred).
        #[track_caller]
        fn results<R: PartialEq + std::fmt::Debug>(&self, what: &str, f: impl Fn(&CachingAllocator) -> R) -> R {
            let (a, b) = (f(&self.allocs[0]), f(&self.allocs[1]));
            assert_eq!(a, b, "{what}: the results differ");
            a
        }

        /// Runs `f` on both and checks that the results, statistics and snapshots agree.
        #[track_caller]
        fn both<R: PartialEq + std::fmt::Debug>(&self, what: &str, f: impl Fn(&CachingAllocator) -> R) -> R {
            let a = self.results(what, f);
            assert_eq!(self.allocs[0].memory_stats(), self.allocs[1].memory_stats(), "{what}: stats differ");
            let [x, y] = [0, 1].map(|i| {
                let mut s = self.allocs[i].snapshot();
                s.device_traces.iter_mut().flatten().for_each(|t| t.time_us = 0);
                s
            });
            assert_eq!(x, y, "{what}: snapshots (and histories, but for times) differ");
            a
        }
    }

    /// Random programs of mallocs (mostly small), frees (often of the newest block), frees
    /// followed by a malloc of the same size on the same stream (the deferred pattern, with
    /// holes of other freed blocks around that best fit may prefer), stream uses, cache releases
    /// and bad frees give the same addresses, statistics, snapshots and histories with and
    /// without deferred merges, under several settings. (Free stamps of small-pool blocks, which
    /// deferral keeps as PyTorch would, are never observable: garbage collection looks at whole
    /// large-pool segments only.)
    #[test]
    fn deferring_merges_changes_nothing_a_program_can_see() {
        const SIZES: [usize; 10] = [1, 64, 512, 513, 1000, 4096, 70_000, 1 << 20, 3 << 20, 12 << 20];
        let confs: [(&str, Option<f64>, Option<usize>); 4] = [
            ("", None, None),
            ("garbage_collection_threshold:0.5", Some(0.6), None),
            ("max_split_size_mb:30,roundup_power2_divisions:4", None, None),
            ("expandable_segments:True", None, Some(2 << 20)),
        ];
        for (ci, (conf, fraction, granularity)) in confs.into_iter().enumerate() {
            let pair = Pair::new(conf, 256 << 20, granularity);
            if let Some(f) = fraction {
                pair.both("fraction", |a| a.set_memory_fraction(f).is_ok());
            }
            let mut rng: rand::rngs::StdRng = rand::SeedableRng::seed_from_u64(0x9E37_79B9_7F4A_7C15 ^ ci as u64);
            let mut live: Vec<(DevicePtr, usize, StreamId)> = Vec::new();
            let malloc = |live: &mut Vec<_>, size: usize, stream: StreamId, what: String| {
                if let Ok(p) = pair.both(&what, |a| a.malloc(size, stream).map_err(|e| e.to_string())) {
                    live.push((p, size, stream));
                }
            };
            let reuses_before = pair.allocs[0].deferred_reuses();
            for step in 0..3000 {
                let r: u64 = rand::RngExt::random(&mut rng);
                let stream = StreamId(1 + (r >> 40) % 2);
                let pick = |n: usize| if r.is_multiple_of(2) { n - 1 } else { (r >> 16) as usize % n };
                match r % 100 {
                    0..=39 => {
                        let size = SIZES[(r >> 8) as usize % SIZES.len()];
                        malloc(&mut live, size, stream, format!("{conf} step {step}: malloc {size}"));
                    }
                    40..=64 if !live.is_empty() => {
                        let (p, ..) = live.swap_remove(pick(live.len()));
                        pair.both(&format!("{conf} step {step}: free"), |a| a.free(p).is_ok());
                    }
                    65..=86 if !live.is_empty() => {
                        let (p, size, s) = live.swap_remove(pick(live.len()));
                        pair.results(&format!("{conf} step {step}: free before the same malloc"), |a| {
                            a.free(p).is_ok()
                        });
                        malloc(&mut live, size, s, format!("{conf} step {step}: the same malloc {size}"));
                    }
                    87..=90 if !live.is_empty() => {
                        let (p, ..) = live[(r >> 16) as usize % live.len()];
                        pair.both(&format!("{conf} step {step}: record_stream"), |a| {
                            a.record_stream(p, StreamId(3)).is_ok()
                        });
                    }
                    91..=93 => pair.mems.iter().for_each(|m| m.complete_events()),
                    94 => {
                        pair.both(&format!("{conf} step {step}: empty_cache"), |a| a.empty_cache().is_ok());
                    }
                    95 => {
                        pair.both(&format!("{conf} step {step}: bad free"), |a| a.free(DevicePtr(12345)).is_err());
                    }
                    _ => {
                        let p = live.last().map(|l| l.0);
                        pair.both(&format!("{conf} step {step}: block size"), |a| p.map(|p| a.block_size(p)));
                    }
                }
            }
            let reused = pair.allocs[0].deferred_reuses() - reuses_before;
            // Expandable segments' blocks never defer (their pieces map and unmap).
            if granularity.is_none() {
                assert!(reused > 20, "{conf}: the program reused deferred blocks only {reused} times");
            }
            assert_eq!(pair.allocs[1].deferred_reuses(), 0, "{conf}: no deferral when it is off");
        }
    }

    /// The pattern deferral is for: a small block freed and asked for again is handed back as it
    /// stands, and the next call of any other kind sees the merged state.
    #[test]
    fn a_free_then_the_same_malloc_reuses_the_block_and_other_calls_see_the_merge() {
        let pair = Pair::new("", 1 << 30, None);
        let s = StreamId(1);
        let keep = pair.both("keep", |a| a.malloc(512, s).unwrap());
        for i in 0..100 {
            let p = pair.both(&format!("malloc {i}"), |a| a.malloc(100, s).unwrap());
            assert_eq!(p.0, keep.0 + 512, "the block after the kept one");
            assert_eq!(pair.allocs[0].deferred_reuses(), i, "malloc {i} took the deferred block back");
            pair.results(&format!("free {i}"), |a| a.free(p).unwrap());
            assert!(pair.allocs[0].has_deferred_merge(), "free {i} left its merge pending");
            assert!(!pair.allocs[1].has_deferred_merge(), "the allocator without deferral merged at once");
        }
        let p = pair.both("once more", |a| a.malloc(100, s).unwrap());
        pair.results("free", |a| a.free(p).unwrap());
        let q = pair.both("the same size on another stream", |a| a.malloc(100, StreamId(2)).unwrap());
        assert_ne!(q, p, "not the block freed on stream 1");
        pair.results("free", |a| a.free(q).unwrap());
        pair.both("a different size", |a| a.malloc(2000, StreamId(2)).unwrap());
        let stats = pair.allocs[0].memory_stats();
        assert_eq!(stats.allocated_bytes().current, 512 + 2048);
    }
}
