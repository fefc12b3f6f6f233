//! The caching device allocator: PyTorch's CUDA caching allocator policy, as plain Rust.
//!
//! [`CachingAllocator`] serves one device. It holds memory it got from the driver (segments) and
//! hands out pieces of it (blocks), keeping freed blocks cached for reuse, as
//! `c10/cuda/CUDACachingAllocator.cpp` does (with the departures listed below):
//!
//! | PyTorch | here |
//! |---|---|
//! | small pool (≤ 1 MiB, 2 MiB segments) / large pool (20 MiB or 2 MiB-rounded segments) | [`PoolKind`] |
//! | 512-byte rounding, `roundup_power2_divisions` | [`AllocatorSettings::round_size`] |
//! | best fit by (stream, size, address), split, merge | [`CachingAllocator::malloc`], [`CachingAllocator::free`] |
//! | `record_stream` (events checked at the next malloc) | [`CachingAllocator::record_stream`] |
//! | OOM: free oversize → retry → sync and free all → retry → `OutOfMemoryError` | [`crate::Error::OutOfMemory`] |
//! | `set_per_process_memory_fraction` | [`CachingAllocator::set_memory_fraction`] |
//! | `expandable_segments` (virtual memory, pages mapped on demand) | [`AllocatorSettings::expandable_segments`] |
//! | `empty_cache` | [`CachingAllocator::empty_cache`] |
//! | `memory_stats` / `memory_summary` / `reset_peak_memory_stats` | [`MemoryStats`], [`CachingAllocator::memory_summary`] |
//! | `memory_snapshot`, `_record_memory_history`, `_snapshot` pickles | [`Snapshot`], [`CachingAllocator::record_history`], [`Snapshot::to_pickle`] |
//! | `_record_memory_history(context=…, stacks="all")`: frames on events and blocks | [`MemoryHistory`], [`CachingAllocator::record_history_with`], [`Frames`] |
//! | `attachOutOfMemoryObserver`, `_set_allocator_settings` | [`CachingAllocator::attach_out_of_memory_observer`], [`CachingAllocator::set_settings`], [`AllocatorSettings::apply`] |
//! | private pools (`PrivatePool`, `beginAllocateToPool`, `endAllocateToPool`, `releasePool`), `MemPool` | [`MemPoolId`], [`CachingAllocator::begin_allocate_to_pool`], [`CachingAllocator::release_pool`] |
//! | `caching_allocator_alloc` / `caching_allocator_delete` | [`CachingAllocator::raw_alloc`] / [`CachingAllocator::raw_delete`] |
//! | `PYTORCH_CUDA_ALLOC_CONF` | `CUDASEM_ALLOC_CONF`, [`AllocatorSettings::parse`] |
//! | `CachingHostAllocator` (pinned memory), `host_memory_stats`, `_host_emptyCache` | [`CachingHostAllocator`], [`HostMemoryStats`] |
//!
//! The policy never touches a device: it runs over the small [`RawMemory`] trait (get and return
//! segments, events, virtual memory), so it is tested and benchmarked with no GPU at all, on
//! [`AccountingMemory`], and real PyTorch traces are replayed through it with [`replay_trace`].
//!
//! Where cudasem departs from PyTorch, the departure is an improvement that holds whatever the
//! settings, and is explained where it is made (look for "Beyond PyTorch" in this module's
//! sources; `departures.rs` lists those of ordinary segments): new segments grow with what their
//! class already holds (small blocks, and large requests under 10 MiB), idle segments of streams
//! that hold nothing are adopted instead of new ones made, and when much of a stream's cache is
//! idle in whole segments too small for a large request they are coalesced into one; with
//! expandable segments, mapping past the most memory ever held first moves whole free pages
//! there from the holes of every segment. Statistics count the mapped ranges of expandable
//! segments as segments, so statistics always equal a snapshot's totals. The figures on
//! PyTorch's own traces are in BENCHMARKS.md.
//!
//! Design for speed (a cached malloc + free pair costs ~100–200 ns of host time, PyTorch's
//! 410–500 ns): one mutex per device, blocks in a slab linked by index, per-stream free lists in
//! sorted chunks keyed by `(size, address)` packed in a `u128`, live blocks in a hash map with a
//! multiplicative hasher, statistics in fixed arrays whose PyTorch keys are only made when asked.

mod accounting;
mod allocator;
mod block;
mod books;
mod cache;
mod deferred;
mod departures;
mod driver_memory;
mod expandable;
mod frames;
mod history;
mod host;
mod mem_pools;
mod observers;
mod outcome;
mod raw_memory;
mod replay;
// The settings' parser and the size rules it shares with the policy sit below the driver, with
// the rest of the process's configuration.
use crate::config::allocator as settings;
mod snapshot;
mod sorted;
mod state;
mod stats;
mod summary;
pub mod trace;

pub use accounting::{AccountingMemory, MemoryCounts};
pub use allocator::CachingAllocator;
pub use block::PoolKind;
pub use driver_memory::DriverMemory;
pub use expandable::PageMoves;
pub use frames::{Frame, Frames};
pub use history::{HistoryContext, HistoryEnabled, MemoryHistory, Stacks, TraceAction, TraceEntry};
pub use host::{CachingHostAllocator, DurationStat, HostMemoryStats, HostUse, RawHostMemory};
pub use mem_pools::{MemPoolId, StreamFilter};
pub use observers::{OutOfMemoryInfo, OutOfMemoryObserver};
pub use outcome::{PytorchExpandable, PytorchOutcome};
pub use raw_memory::RawMemory;
pub use replay::{replay, replay_trace, replay_with, ReplayOptions, ReplayReport};
pub use settings::{
    AllocatorSettings, ALLOC_CONF_ENV, LARGE_BUFFER, MIN_BLOCK_SIZE, MIN_LARGE_ALLOC, ROUND_LARGE, SMALL_BUFFER,
    SMALL_SIZE,
};
pub use snapshot::{BlockInfo, BlockState, SegmentInfo, Snapshot};
pub use stats::{MemoryStats, Stat, StatPool};
pub use trace::{Trace, TraceEvent};
