//! Trace replay: a trace's `alloc` / `free_completed` sequence through the real
//! [`CachingAllocator`], to compare allocation policies without a GPU: on a simulated device of the
//! sim driver ([`replay_trace`], public as `cudasem::cuda::memory::replay_trace`), or over an
//! [`AccountingMemory`] or any [`RawMemory`] ([`replay`], [`replay_with`], internal).

use super::accounting::AccountingMemory;
use super::allocator::CachingAllocator;
use super::driver_memory::DriverMemory;
use super::history::TraceAction;
use super::settings::AllocatorSettings;
use super::stats::MemoryStats;
use super::trace::Trace;
use super::RawMemory;
use crate::driver::sim::{PeerSpec, SimConfig, SimDriver};
use crate::driver::DevicePtr;
use crate::error::{fmt_bytes, Error, Result};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

/// How to replay a trace: the allocator's settings and the simulated device's memory.
///
/// ```
/// use cudasem::cuda::{memory::ReplayOptions, AllocatorSettings};
/// # fn main() -> cudasem::Result<()> {
/// let options = ReplayOptions {
///     settings: AllocatorSettings::parse("expandable_segments:True")?,
///     capacity: 80 << 30,
/// };
/// assert!(options.settings.expandable_segments());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// The allocator's settings (`CUDASEM_ALLOC_CONF` syntax: [`AllocatorSettings::parse`], or
    /// [`AllocatorSettings::from_env`]).
    pub settings: AllocatorSettings,
    /// The simulated device's memory in bytes (default 140 GiB, an H200's). A replay that needs
    /// more is [`Error::OutOfMemory`].
    pub capacity: usize,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions { settings: AllocatorSettings::default(), capacity: 140 << 30 }
    }
}

/// What a replay reached: peaks, driver allocations and host time per operation.
///
/// `Display` prints it as `cudasem replay` does; it serializes (serde) with these field names,
/// the statistics as PyTorch's `memory_stats()` keys.
#[derive(Debug, Clone, serde::Serialize)]
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

    /// Mean host time of one operation (a `malloc` or a `free`), in nanoseconds.
    pub fn ns_per_op(&self) -> f64 {
        let total = self.ns_per_alloc * self.allocs as f64 + self.ns_per_free * self.frees as f64;
        total / (self.allocs + self.frees).max(1) as f64
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

/// Replays a PyTorch allocator trace through cudasem's caching allocator on one simulated device
/// of `options.capacity` bytes, with `options.settings`, as `cudasem replay TRACE.csv` does.
///
/// The trace's `alloc` and `free_completed` rows are replayed in order (other rows are ignored:
/// the allocator makes its own segments). The device is the sim driver's: its memory is only
/// accounted, never touched, so a trace that peaked at many GiB replays in a few MiB of host
/// memory. No runtime is started and the current driver is not used.
///
/// A `free_completed` of an address that is not live, or an `alloc` at a live address, is
/// [`Error::InvalidTrace`] naming the line; running out of the simulated capacity is
/// [`Error::OutOfMemory`].
///
/// ```
/// use cudasem::cuda::memory::{replay_trace, ReplayOptions, Trace};
/// # fn main() -> cudasem::Result<()> {
/// let trace = Trace::parse(
///     "action,addr,size,stream\n\
///      alloc,4096,3145728,0\n\
///      alloc,8192,3145728,0\n\
///      free_completed,4096,3145728,0\n\
///      free_completed,8192,3145728,0\n",
/// )?;
/// let r = replay_trace(&trace, &ReplayOptions::default())?;
/// assert_eq!((r.allocs, r.frees, r.peak_live_requested), (2, 2, 6 << 20));
/// assert_eq!(r.peak_reserved, 20 << 20); // one 20 MiB large-pool segment holds both
///
/// let bad = Trace::parse("free_completed,4096,512,0\n")?;
/// assert!(matches!(
///     replay_trace(&bad, &ReplayOptions::default()),
///     Err(cudasem::Error::InvalidTrace { line: 1, .. })
/// ));
/// # Ok(()) }
/// ```
pub fn replay_trace(trace: &Trace, options: &ReplayOptions) -> Result<ReplayReport> {
    let sim = Arc::new(SimDriver::new(SimConfig { devices: 1, memory: options.capacity, peer: PeerSpec::None }));
    replay_with(trace, Arc::new(DriverMemory::for_replay(sim, 0)), &options.settings)
}

/// Replays `trace` like [`replay_trace`], through a [`CachingAllocator`] over an
/// [`AccountingMemory`] instead of a simulated device.
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
