//! Trace replay: a trace's `alloc` / `free_completed` sequence through the real
//! [`CachingAllocator`] over an [`AccountingMemory`], to compare allocation policies without a GPU.

use super::accounting::AccountingMemory;
use super::allocator::CachingAllocator;
use super::history::TraceAction;
use super::settings::AllocatorSettings;
use super::stats::MemoryStats;
use super::trace::Trace;
use super::RawMemory;
use crate::driver::DevicePtr;
use crate::error::{fmt_bytes, Error, Result};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

/// How to replay.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// The allocator's settings.
    pub settings: AllocatorSettings,
    /// The simulated device's memory (default 140 GiB, an H200's).
    pub capacity: usize,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions { settings: AllocatorSettings::default(), capacity: 140 << 30 }
    }
}

/// What a replay reached.
#[derive(Debug, Clone)]
pub struct ReplayReport {
    /// `alloc` rows replayed.
    pub allocs: usize,
    /// `free_completed` rows replayed.
    pub frees: usize,
    /// Peak bytes held from the driver (`reserved_bytes.all.peak`).
    pub peak_reserved: usize,
    /// Peak bytes of allocated blocks (`allocated_bytes.all.peak`).
    pub peak_allocated: usize,
    /// Peak of live requested bytes in the trace: the floor no allocator can go under.
    pub peak_live_requested: usize,
    /// Driver allocations (`num_device_alloc`: segments, or page-range mappings).
    pub segment_allocs: usize,
    /// Driver frees (`num_device_free`).
    pub segment_frees: usize,
    /// Mean host time of one `malloc`, in nanoseconds (timer overhead included).
    pub ns_per_alloc: f64,
    /// Mean host time of one `free`, in nanoseconds (timer overhead included).
    pub ns_per_free: f64,
    /// The allocator's statistics at the end.
    pub stats: MemoryStats,
}

impl ReplayReport {
    /// `peak_reserved / peak_live_requested` (1.0 is perfect).
    pub fn reserved_over_live_requested(&self) -> f64 {
        self.peak_reserved as f64 / self.peak_live_requested.max(1) as f64
    }
}

impl fmt::Display for ReplayReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "allocs / frees            {} / {}", self.allocs, self.frees)?;
        writeln!(f, "peak reserved             {} ({})", self.peak_reserved, fmt_bytes(self.peak_reserved))?;
        writeln!(f, "peak allocated            {} ({})", self.peak_allocated, fmt_bytes(self.peak_allocated))?;
        writeln!(
            f,
            "peak live requested       {} ({})",
            self.peak_live_requested,
            fmt_bytes(self.peak_live_requested)
        )?;
        writeln!(f, "reserved / live requested {:.4}", self.reserved_over_live_requested())?;
        writeln!(f, "driver allocs / frees     {} / {}", self.segment_allocs, self.segment_frees)?;
        write!(f, "ns per alloc / free       {:.0} / {:.0}", self.ns_per_alloc, self.ns_per_free)
    }
}

/// Replays `trace`'s `alloc` and `free_completed` rows (other rows are ignored: the allocator
/// makes its own segments) through a [`CachingAllocator`] over an [`AccountingMemory`].
///
/// A `free_completed` of an address that is not live, or an `alloc` at a live address, is
/// [`Error::InvalidTrace`] naming the line; running out of the simulated capacity is
/// [`Error::OutOfMemory`].
pub fn replay(trace: &Trace, options: &ReplayOptions) -> Result<ReplayReport> {
    let memory = Arc::new(AccountingMemory::with_options(0, options.capacity, Some(2 << 20)));
    // A replay runs no device work: every stream is idle at every moment.
    memory.set_events_complete_at_once(true);
    replay_with(trace, memory, &options.settings)
}

/// Replays `trace` like [`replay`], through a [`CachingAllocator`] over `memory` (for instance a
/// simulated device of the sim driver, whose memory is only accounted until somebody writes it).
/// A replay runs no device work, so `memory` should report every recorded event as complete.
pub fn replay_with(trace: &Trace, memory: Arc<dyn RawMemory>, settings: &AllocatorSettings) -> Result<ReplayReport> {
    let allocator = CachingAllocator::new(0, memory, settings.clone());
    let mut live: HashMap<u64, (DevicePtr, usize)> = HashMap::new();
    let (mut allocs, mut frees, mut alloc_ns, mut free_ns) = (0usize, 0usize, 0u128, 0u128);
    let (mut requested, mut peak_requested) = (0usize, 0usize);
    for e in &trace.events {
        match e.action {
            TraceAction::Alloc => {
                if live.contains_key(&e.addr) {
                    return Err(Error::InvalidTrace {
                        line: e.line,
                        reason: format!("alloc at {:#x}, which is still live", e.addr),
                    });
                }
                let t = Instant::now();
                let ptr = allocator.malloc(e.size, e.stream)?;
                alloc_ns += t.elapsed().as_nanos();
                allocs += 1;
                live.insert(e.addr, (ptr, e.size));
                requested += e.size;
                peak_requested = peak_requested.max(requested);
            }
            TraceAction::FreeCompleted => {
                let Some((ptr, size)) = live.remove(&e.addr) else {
                    return Err(Error::InvalidTrace {
                        line: e.line,
                        reason: format!("free_completed of {:#x}, which is not live", e.addr),
                    });
                };
                let t = Instant::now();
                allocator.free(ptr)?;
                free_ns += t.elapsed().as_nanos();
                frees += 1;
                requested -= size;
            }
            _ => {}
        }
    }
    let stats = allocator.memory_stats();
    Ok(ReplayReport {
        allocs,
        frees,
        peak_reserved: stats.reserved_bytes().peak as usize,
        peak_allocated: stats.allocated_bytes().peak as usize,
        peak_live_requested: peak_requested,
        segment_allocs: stats.num_device_alloc() as usize,
        segment_frees: stats.num_device_free() as usize,
        ns_per_alloc: alloc_ns as f64 / allocs.max(1) as f64,
        ns_per_free: free_ns as f64 / frees.max(1) as f64,
        stats,
    })
}
