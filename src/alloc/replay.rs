//! Trace replay: a trace's `alloc` / `free_completed` sequence through the real
//! [`CachingAllocator`], to compare allocation policies without a GPU: on a simulated device of the
//! sim driver ([`replay_trace`], public as `cudasem::cuda::memory::replay_trace`), or over an
//! [`AccountingMemory`] or any [`RawMemory`] ([`replay`], [`replay_with`], internal).
//!
//! The trace is first compiled into a flat list of operations on numbered slots (checked, and
//! with its live floor), so the timed loop does nothing but call the allocator.

use super::accounting::AccountingMemory;
use super::allocator::CachingAllocator;
use super::driver_memory::DriverMemory;
use super::expandable::PageMoves;
use super::history::TraceAction;
use super::settings::AllocatorSettings;
use super::stats::MemoryStats;
use super::trace::Trace;
use super::RawMemory;
use crate::driver::sim::{PeerSpec, SimConfig, SimDriver};
use crate::driver::{DevicePtr, StreamId};
use crate::error::{fmt_bytes, Error, Result};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

/// Timed replays go on past [`ReplayOptions::timing_runs`] until they took this long in all…
const TIMING_BUDGET_NS: u128 = 50_000_000;
/// … or this many ran.
const MAX_TIMING_RUNS: usize = 500;

/// How to replay a trace: the allocator's settings, the simulated device's memory, and how often
/// to time it.
///
/// ```
/// use cudasem::cuda::{memory::ReplayOptions, AllocatorSettings};
/// # fn main() -> cudasem::Result<()> {
/// let options = ReplayOptions {
///     settings: AllocatorSettings::parse("expandable_segments:True")?,
///     capacity: 80 << 30,
///     ..ReplayOptions::default()
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
    /// Further replays, each on a fresh allocator and device, timed as a whole loop, at least
    /// (default 3; more, up to 500, until they ran 50 ms in all, so a short trace is timed over
    /// many runs): [`ReplayReport::ns_per_op`] is the fastest. With 0, the first replay's
    /// one-by-one timing. The figures are the same every time.
    pub timing_runs: usize,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions { settings: AllocatorSettings::default(), capacity: 140 << 30, timing_runs: 3 }
    }
}

/// What a replay reached: peaks, driver calls, moved pages and host time per operation.
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
    /// Driver frees (`num_device_free`: segments, or page-range unmappings).
    pub segment_frees: usize,
    /// With expandable segments: free pages moved to where a segment grew.
    pub page_moves: PageMoves,
    /// Mean host time of one operation (a `malloc` or a `free`) in nanoseconds: the fastest of
    /// [`ReplayOptions::timing_runs`] replays timed as a whole.
    pub ns_per_op: f64,
    /// Mean host time of one `malloc`, in nanoseconds, timed one by one (timer overhead included).
    pub ns_per_alloc: f64,
    /// Mean host time of one `free`, in nanoseconds, timed one by one (timer overhead included).
    pub ns_per_free: f64,
    /// The allocator's statistics at the end.
    pub stats: MemoryStats,
}

impl ReplayReport {
    /// `peak_reserved / peak_live_requested` (1.0 is perfect).
    pub fn reserved_over_live_requested(&self) -> f64 {
        self.peak_reserved as f64 / self.peak_live_requested.max(1) as f64
    }

    /// `peak_allocated / peak_live_requested`: the rounding overhead.
    pub fn allocated_over_live_requested(&self) -> f64 {
        self.peak_allocated as f64 / self.peak_live_requested.max(1) as f64
    }
}

impl fmt::Display for ReplayReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = |n: usize| format!("{n} ({})", fmt_bytes(n));
        writeln!(f, "allocs / frees            {} / {}", self.allocs, self.frees)?;
        writeln!(f, "peak reserved             {}", bytes(self.peak_reserved))?;
        writeln!(f, "peak allocated            {}", bytes(self.peak_allocated))?;
        writeln!(f, "peak live requested       {}", bytes(self.peak_live_requested))?;
        writeln!(f, "reserved / live requested {:.4}", self.reserved_over_live_requested())?;
        writeln!(f, "allocated / live requested {:.4}", self.allocated_over_live_requested())?;
        writeln!(f, "driver allocs / frees     {} / {}", self.segment_allocs, self.segment_frees)?;
        let m = &self.page_moves;
        writeln!(
            f,
            "pages moved               {} in {} unmap calls, {} waits",
            fmt_bytes(m.bytes),
            m.unmaps,
            m.events
        )?;
        writeln!(f, "ns per op                 {:.0}", self.ns_per_op)?;
        write!(f, "ns per alloc / free       {:.0} / {:.0} (timed one by one)", self.ns_per_alloc, self.ns_per_free)
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
    let capacity = options.capacity;
    replay_with(trace, options, &|| {
        let sim = Arc::new(SimDriver::new(SimConfig {
            devices: 1,
            memory: capacity,
            peer: PeerSpec::None,
            ..SimConfig::default()
        }));
        Arc::new(DriverMemory::for_replay(sim, 0))
    })
}

/// Replays `trace` like [`replay_trace`], through a [`CachingAllocator`] over an
/// [`AccountingMemory`] instead of a simulated device.
///
/// A `free_completed` of an address that is not live, or an `alloc` at a live address, is
/// [`Error::InvalidTrace`] naming the line; running out of the simulated capacity is
/// [`Error::OutOfMemory`].
pub fn replay(trace: &Trace, options: &ReplayOptions) -> Result<ReplayReport> {
    let capacity = options.capacity;
    replay_with(trace, options, &|| {
        let memory = Arc::new(AccountingMemory::with_options(0, capacity, Some(2 << 20)));
        // A replay runs no device work: every stream is idle at every moment.
        memory.set_events_complete_at_once(true);
        memory
    })
}

/// Replays `trace` like [`replay`], through [`CachingAllocator`]s over memories from `memory`
/// (one per replay: the first gives the figures, the others the timing). A replay runs no device
/// work, so a memory should report every recorded event as complete.
pub fn replay_with(
    trace: &Trace,
    options: &ReplayOptions,
    memory: &dyn Fn() -> Arc<dyn RawMemory>,
) -> Result<ReplayReport> {
    let program = Program::compile(trace)?;
    let allocator = CachingAllocator::new(0, memory(), options.settings.clone());
    let (alloc_ns, free_ns) = program.run_timing_each(&allocator)?;
    let ops = (program.allocs + program.frees).max(1) as f64;
    let mut ns_per_op = (alloc_ns + free_ns) as f64 / ops;
    let (mut runs, mut spent) = (0, 0u128);
    while runs < options.timing_runs || (runs > 0 && runs < MAX_TIMING_RUNS && spent < TIMING_BUDGET_NS) {
        let fresh = CachingAllocator::new(0, memory(), options.settings.clone());
        let ns = program.run(&fresh)?;
        spent += ns;
        ns_per_op = if runs == 0 { ns as f64 / ops } else { ns_per_op.min(ns as f64 / ops) };
        runs += 1;
    }
    let stats = allocator.memory_stats();
    Ok(ReplayReport {
        allocs: program.allocs,
        frees: program.frees,
        peak_reserved: stats.reserved_bytes().peak as usize,
        peak_allocated: stats.allocated_bytes().peak as usize,
        peak_live_requested: program.peak_live,
        segment_allocs: stats.num_device_alloc() as usize,
        segment_frees: stats.num_device_free() as usize,
        page_moves: allocator.page_moves(),
        ns_per_op,
        ns_per_alloc: alloc_ns as f64 / program.allocs.max(1) as f64,
        ns_per_free: free_ns as f64 / program.frees.max(1) as f64,
        stats,
    })
}

/// One replayed row: a malloc into a slot, or the free of a slot's block.
#[derive(Debug, Clone, Copy)]
enum Op {
    Malloc { slot: u32, size: usize, stream: StreamId },
    Free { slot: u32 },
}

/// A trace's `alloc` / `free_completed` rows as operations on numbered slots.
#[derive(Debug)]
struct Program {
    ops: Vec<Op>,
    slots: usize,
    allocs: usize,
    frees: usize,
    peak_live: usize,
}

impl Program {
    /// Checks the rows (no free of an address that is not live, no alloc at a live one) and
    /// numbers the live blocks, reusing the numbers of freed ones.
    fn compile(trace: &Trace) -> Result<Program> {
        let mut live: HashMap<u64, (u32, usize)> = HashMap::new();
        let (mut ops, mut vacant, mut slots) = (Vec::new(), Vec::new(), 0u32);
        let (mut allocs, mut frees, mut requested, mut peak_live) = (0, 0, 0usize, 0usize);
        for e in &trace.events {
            match e.action {
                TraceAction::Alloc => {
                    if live.contains_key(&e.addr) {
                        return Err(Error::InvalidTrace {
                            line: e.line,
                            reason: format!("alloc at {:#x}, which is still live", e.addr),
                        });
                    }
                    let slot = match vacant.pop() {
                        Some(slot) => slot,
                        None => {
                            slots = slots.checked_add(1).ok_or_else(|| Error::InvalidTrace {
                                line: e.line,
                                reason: format!("more than {} live blocks", u32::MAX),
                            })?;
                            slots - 1
                        }
                    };
                    live.insert(e.addr, (slot, e.size));
                    ops.push(Op::Malloc { slot, size: e.size, stream: e.stream });
                    allocs += 1;
                    requested = requested.checked_add(e.size).ok_or_else(|| Error::InvalidTrace {
                        line: e.line,
                        reason: "the live requested bytes add up past 2^64".into(),
                    })?;
                    peak_live = peak_live.max(requested);
                }
                TraceAction::FreeCompleted => {
                    let Some((slot, size)) = live.remove(&e.addr) else {
                        return Err(Error::InvalidTrace {
                            line: e.line,
                            reason: format!("free_completed of {:#x}, which is not live", e.addr),
                        });
                    };
                    ops.push(Op::Free { slot });
                    vacant.push(slot);
                    frees += 1;
                    requested -= size;
                }
                _ => {}
            }
        }
        Ok(Program { ops, slots: slots as usize, allocs, frees, peak_live })
    }

    /// Runs the operations, timing the whole loop; nanoseconds.
    fn run(&self, a: &CachingAllocator) -> Result<u128> {
        let mut ptrs = vec![DevicePtr(0); self.slots];
        let t = Instant::now();
        for op in &self.ops {
            match *op {
                Op::Malloc { slot, size, stream } => ptrs[slot as usize] = a.malloc(size, stream)?,
                Op::Free { slot } => a.free(ptrs[slot as usize])?,
            }
        }
        Ok(t.elapsed().as_nanos())
    }

    /// Runs the operations, timing each; nanoseconds in mallocs and in frees.
    fn run_timing_each(&self, a: &CachingAllocator) -> Result<(u128, u128)> {
        let mut ptrs = vec![DevicePtr(0); self.slots];
        let (mut alloc_ns, mut free_ns) = (0u128, 0u128);
        for op in &self.ops {
            let t = Instant::now();
            match *op {
                Op::Malloc { slot, size, stream } => {
                    ptrs[slot as usize] = a.malloc(size, stream)?;
                    alloc_ns += t.elapsed().as_nanos();
                }
                Op::Free { slot } => {
                    a.free(ptrs[slot as usize])?;
                    free_ns += t.elapsed().as_nanos();
                }
            }
        }
        Ok((alloc_ns, free_ns))
    }
}
