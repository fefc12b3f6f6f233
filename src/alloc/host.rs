//! [`CachingHostAllocator`]: PyTorch's caching allocator for pinned host memory, as plain Rust.
//!
//! Page-locking memory is slow (`cuMemHostAlloc` of 256 MiB takes tens of milliseconds), so
//! pinned blocks are cached, as `at::cuda::CachingHostAllocator` does:
//!
//! * requests are rounded up to a power of two, and each size has its own free list;
//! * blocks are never split or merged: a block serves only requests of its rounded size;
//! * a block that non-blocking copies still use when it is freed carries their events
//!   ([`HostUse`]): it returns to its free list only once all of them have completed (checked at
//!   the next `malloc`, `free`, `empty_cache` or statistics call), so the copy engine never reads
//!   or writes a block that was handed out again;
//! * [`CachingHostAllocator::empty_cache`] gives every cached, unused block back to the driver;
//! * [`HostMemoryStats`] has PyTorch's keys (`torch.cuda.host_memory_stats()`).
//!
//! Beyond PyTorch: when the driver refuses a new block, the cache is emptied and the request
//! tried once more, as the device allocator does.
//!
//! The policy runs over [`RawHostMemory`], so it is tested with no device at all.

use super::stats::Stat;
use crate::driver::{EventId, HostPtr, StreamId};
use crate::error::{Error, Result};
use crate::sync::{Mutex, MutexGuard};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// One use of a pinned block by a queued copy: an event recorded on the copy's stream right after
/// it. The block may be handed out again only once the event has completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostUse {
    /// The device of the stream (and of the event).
    pub device: usize,
    /// The stream the copy was queued on.
    pub stream: StreamId,
    /// The event recorded after the copy.
    pub event: EventId,
    /// Whether the copy writes the block (device → host); `false` when it only reads it.
    pub device_writes: bool,
}

/// What the host allocator needs from below: raw pinned memory and event queries.
///
/// Implemented over the drivers by the runtime; by a counting fake in the tests.
pub trait RawHostMemory: Send + Sync {
    /// `bytes` of pinned host memory (zeroed), like `cuMemHostAlloc`.
    fn alloc(&self, bytes: usize) -> Result<HostPtr>;
    /// Returns a block from [`RawHostMemory::alloc`]; no copy uses it any more.
    fn free(&self, ptr: HostPtr) -> Result<()>;
    /// Whether the use's event has completed.
    fn use_done(&self, u: &HostUse) -> Result<bool>;
    /// Gives the use's event back (it is never asked about again).
    fn use_release(&self, u: HostUse);
}

/// A timing statistic, as PyTorch keeps it (microseconds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DurationStat {
    /// Sum of all durations.
    pub total: i64,
    /// Longest duration since the last peak reset.
    pub max: i64,
    /// Shortest duration since the last peak reset (0 when none).
    pub min: i64,
    /// Number of durations since the last reset of accumulated stats.
    pub count: i64,
}

impl DurationStat {
    fn increase(&mut self, micros: i64) {
        self.total += micros;
        self.count += 1;
        self.max = self.max.max(micros);
        self.min = if self.min == 0 { micros } else { self.min.min(micros) };
    }

    /// Mean duration (0 when none).
    pub fn avg(&self) -> i64 {
        if self.count == 0 {
            0
        } else {
            self.total / self.count
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counters {
    allocations: Stat,
    allocated_bytes: Stat,
    active_requests: Stat,
    active_bytes: Stat,
    num_host_alloc: i64,
    num_host_free: i64,
    host_alloc_time: DurationStat,
    host_free_time: DurationStat,
}

/// A copy of the host allocator's statistics (`torch.cuda.host_memory_stats()`), taken at one
/// moment. Iterates `(key, value)` in key order with PyTorch's keys:
///
/// * `allocations.{current,peak,allocated,freed}`: pinned blocks the allocator owns (in use and
///   cached); `allocated_bytes.*`: their bytes (rounded sizes);
/// * `active_requests.*`: blocks handed out and not yet reusable (freed blocks whose copies are
///   still in flight count until those complete); `active_bytes.*`: their bytes;
/// * `num_host_alloc` / `num_host_free`: driver allocations and frees;
/// * `host_alloc_time.{total,max,min,count,avg}` / `host_free_time.*`: microseconds spent in them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostMemoryStats {
    c: Counters,
}

const STAT_FIELDS: [&str; 4] = ["current", "peak", "allocated", "freed"];
const DURATION_FIELDS: [&str; 5] = ["total", "max", "min", "count", "avg"];

impl HostMemoryStats {
    /// The value of a key, `None` for a key PyTorch does not have.
    pub fn get(&self, key: &str) -> Option<i64> {
        self.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// `allocations`: blocks owned (in use and cached).
    pub fn allocations(&self) -> Stat {
        self.c.allocations
    }

    /// `allocated_bytes`: bytes of the blocks owned.
    pub fn allocated_bytes(&self) -> Stat {
        self.c.allocated_bytes
    }

    /// `active_requests`: blocks handed out and not yet reusable.
    pub fn active_requests(&self) -> Stat {
        self.c.active_requests
    }

    /// `active_bytes`: bytes of those blocks.
    pub fn active_bytes(&self) -> Stat {
        self.c.active_bytes
    }

    /// `num_host_alloc`: blocks asked from the driver.
    pub fn num_host_alloc(&self) -> i64 {
        self.c.num_host_alloc
    }

    /// `num_host_free`: blocks given back to the driver.
    pub fn num_host_free(&self) -> i64 {
        self.c.num_host_free
    }

    /// `host_alloc_time`: microseconds in driver allocations.
    pub fn host_alloc_time(&self) -> DurationStat {
        self.c.host_alloc_time
    }

    /// `host_free_time`: microseconds in driver frees.
    pub fn host_free_time(&self) -> DurationStat {
        self.c.host_free_time
    }

    /// `(key, value)` for every key, in key order (like PyTorch's dict, flattened).
    pub fn iter(&self) -> std::vec::IntoIter<(String, i64)> {
        let c = &self.c;
        let mut v = Vec::with_capacity(28);
        for (name, s) in [
            ("allocations", c.allocations),
            ("allocated_bytes", c.allocated_bytes),
            ("active_requests", c.active_requests),
            ("active_bytes", c.active_bytes),
        ] {
            let values = [s.current, s.peak, s.allocated, s.freed];
            v.extend(STAT_FIELDS.iter().zip(values).map(|(f, x)| (format!("{name}.{f}"), x)));
        }
        for (name, d) in [("host_alloc_time", c.host_alloc_time), ("host_free_time", c.host_free_time)] {
            let values = [d.total, d.max, d.min, d.count, d.avg()];
            v.extend(DURATION_FIELDS.iter().zip(values).map(|(f, x)| (format!("{name}.{f}"), x)));
        }
        v.push(("num_host_alloc".into(), c.num_host_alloc));
        v.push(("num_host_free".into(), c.num_host_free));
        v.sort_unstable();
        v.into_iter()
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        4 * 4 + 2 * 5 + 2
    }

    /// Always `false` (there is always every key).
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl serde::Serialize for HostMemoryStats {
    /// As PyTorch's `host_memory_stats()` dict: every key, in key order.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

#[derive(Debug, Clone, Copy)]
struct Block {
    size: usize,
    /// Handed out, or freed with copies still in flight.
    active: bool,
}

#[derive(Debug, Default)]
struct State {
    /// Every block owned, by address.
    blocks: HashMap<u64, Block>,
    /// `free[k]`: cached blocks of `2^k` bytes, most recently freed last.
    free: Vec<Vec<u64>>,
    /// Freed blocks waiting for their copies' events.
    pending: Vec<(u64, Vec<HostUse>)>,
    c: Counters,
}

/// PyTorch's caching allocator for pinned host memory, over any [`RawHostMemory`].
///
/// Requests are rounded up to a power of two and served from that size's free list (blocks are
/// never split); a freed block whose copies are still in flight ([`HostUse`] events) is reused
/// only once they all completed; [`empty_cache`](Self::empty_cache) gives idle cached blocks back
/// to the driver; [`stats`](Self::stats) has PyTorch's `host_memory_stats()` keys. When the
/// driver refuses a new block, the cache is emptied and the request tried once more.
///
/// ```
/// # use cudasem::alloc::{CachingHostAllocator, RawHostMemory, HostUse};
/// # use cudasem::driver::HostPtr;
/// # use std::sync::{Arc, atomic::{AtomicU64, Ordering}};
/// # struct Fake(AtomicU64);
/// # impl RawHostMemory for Fake {
/// #     fn alloc(&self, b: usize) -> cudasem::Result<HostPtr> { Ok(HostPtr(self.0.fetch_add(1 << 40, Ordering::Relaxed))) }
/// #     fn free(&self, _: HostPtr) -> cudasem::Result<()> { Ok(()) }
/// #     fn use_done(&self, _: &HostUse) -> cudasem::Result<bool> { Ok(true) }
/// #     fn use_release(&self, _: HostUse) {}
/// # }
/// let a = CachingHostAllocator::new(Arc::new(Fake(AtomicU64::new(1 << 40))));
/// let p = a.malloc(3000).unwrap(); // a 4096-byte block from the driver
/// a.free(p, Vec::new()).unwrap(); // cached
/// assert_eq!(a.malloc(4000).unwrap(), p, "same power of two: the cached block is reused");
/// assert_eq!(a.stats().num_host_alloc(), 1);
/// ```
pub struct CachingHostAllocator {
    memory: Arc<dyn RawHostMemory>,
    state: Mutex<State>,
}

impl std::fmt::Debug for CachingHostAllocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("CachingHostAllocator")
            .field("blocks", &s.blocks.len())
            .field("pending", &s.pending.len())
            .field("allocated_bytes", &s.c.allocated_bytes.current)
            .finish()
    }
}

/// The free list index of a rounded size.
fn bucket(size: usize) -> usize {
    size.trailing_zeros() as usize
}

fn micros(since: Instant) -> i64 {
    since.elapsed().as_micros().min(i64::MAX as u128) as i64
}

impl CachingHostAllocator {
    /// An allocator drawing pinned blocks from `memory`.
    pub fn new(memory: Arc<dyn RawHostMemory>) -> CachingHostAllocator {
        let state = State { free: vec![Vec::new(); usize::BITS as usize], ..State::default() };
        CachingHostAllocator { memory, state: Mutex::new(state) }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is consistent between calls, whatever a panicking thread was doing.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The size a request of `size` bytes is served with: the next power of two.
    pub fn round_size(size: usize) -> Result<usize> {
        size.checked_next_power_of_two().ok_or(Error::HostOutOfMemory { requested: size })
    }

    /// A pinned block of at least `size` bytes: a cached block of the rounded size whose copies
    /// have completed, or a new one from the driver. `size == 0` gives the null pointer (as in
    /// PyTorch), which [`free`](Self::free) accepts.
    pub fn malloc(&self, size: usize) -> Result<HostPtr> {
        if size == 0 {
            return Ok(HostPtr(0));
        }
        let rounded = Self::round_size(size)?;
        {
            let mut s = self.lock();
            self.process_events(&mut s);
            if let Some(addr) = s.free[bucket(rounded)].pop() {
                Self::activate(&mut s, addr, rounded);
                return Ok(HostPtr(addr));
            }
        }
        // The slow path runs without the lock: page-locking takes a while.
        let t = Instant::now();
        let ptr = match self.memory.alloc(rounded) {
            Ok(p) => p,
            Err(Error::HostOutOfMemory { .. }) => {
                self.empty_cache()?;
                self.memory.alloc(rounded)?
            }
            Err(e) => return Err(e),
        };
        let took = micros(t);
        let mut s = self.lock();
        s.c.allocations.increase(1);
        s.c.allocated_bytes.increase(rounded);
        s.c.num_host_alloc += 1;
        s.c.host_alloc_time.increase(took);
        s.blocks.insert(ptr.0, Block { size: rounded, active: false });
        Self::activate(&mut s, ptr.0, rounded);
        Ok(ptr)
    }

    fn activate(s: &mut State, addr: u64, size: usize) {
        if let Some(b) = s.blocks.get_mut(&addr) {
            b.active = true;
        }
        s.c.active_requests.increase(1);
        s.c.active_bytes.increase(size);
    }

    fn deactivate(s: &mut State, addr: u64) {
        if let Some(b) = s.blocks.get_mut(&addr) {
            b.active = false;
            let size = b.size;
            s.free[bucket(size)].push(addr);
            s.c.active_requests.decrease(1);
            s.c.active_bytes.decrease(size);
        }
    }

    /// Frees a block from [`malloc`](Self::malloc). `uses` are the copies that may still use it:
    /// the block is cached for reuse once all of their events have completed. The null pointer is
    /// ignored; a pointer that is not a block in use is [`Error::InvalidPointer`] (its uses are
    /// given back).
    pub fn free(&self, ptr: HostPtr, uses: Vec<HostUse>) -> Result<()> {
        if ptr.0 == 0 {
            uses.into_iter().for_each(|u| self.memory.use_release(u));
            return Ok(());
        }
        let mut s = self.lock();
        let in_use =
            s.blocks.get(&ptr.0).is_some_and(|b| b.active) && !s.pending.iter().any(|(addr, _)| *addr == ptr.0);
        if !in_use {
            drop(s);
            uses.into_iter().for_each(|u| self.memory.use_release(u));
            return Err(Error::InvalidPointer {
                device: usize::MAX,
                ptr: ptr.0,
                reason: "not a pinned block in use (freed twice, or not from the host allocator?)".into(),
            });
        }
        let waiting = self.still_running(uses);
        if waiting.is_empty() {
            Self::deactivate(&mut s, ptr.0);
        } else {
            s.pending.push((ptr.0, waiting));
        }
        self.process_events(&mut s);
        Ok(())
    }

    /// The uses whose events have not completed; the completed ones are given back. An event that
    /// cannot be queried counts as running (the block stays out of reuse: safe).
    fn still_running(&self, uses: Vec<HostUse>) -> Vec<HostUse> {
        let mut waiting = Vec::new();
        for u in uses {
            if self.memory.use_done(&u).unwrap_or(false) {
                self.memory.use_release(u);
            } else {
                waiting.push(u);
            }
        }
        waiting
    }

    /// Caches every freed block whose copies have all completed.
    fn process_events(&self, s: &mut State) {
        if s.pending.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut s.pending);
        for (addr, uses) in pending {
            let waiting = self.still_running(uses);
            if waiting.is_empty() {
                Self::deactivate(s, addr);
            } else {
                s.pending.push((addr, waiting));
            }
        }
    }

    /// `host_empty_cache()`: gives every cached block whose copies have completed back to the
    /// driver. Blocks in use, and freed blocks with copies in flight, stay.
    pub fn empty_cache(&self) -> Result<()> {
        let mut s = self.lock();
        self.process_events(&mut s);
        let mut first_error = None;
        for k in 0..s.free.len() {
            for addr in std::mem::take(&mut s.free[k]) {
                let t = Instant::now();
                let freed = self.memory.free(HostPtr(addr));
                let took = micros(t);
                let size = s.blocks.remove(&addr).map_or(0, |b| b.size);
                s.c.allocations.decrease(1);
                s.c.allocated_bytes.decrease(size);
                s.c.num_host_free += 1;
                s.c.host_free_time.increase(took);
                if let Err(e) = freed {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// The rounded size of the block at `ptr`, if it is one of the allocator's.
    pub fn block_size(&self, ptr: HostPtr) -> Option<usize> {
        self.lock().blocks.get(&ptr.0).map(|b| b.size)
    }

    /// `host_memory_stats()`: a copy of the statistics, after caching the freed blocks whose
    /// copies have completed.
    pub fn stats(&self) -> HostMemoryStats {
        let mut s = self.lock();
        self.process_events(&mut s);
        HostMemoryStats { c: s.c }
    }

    /// `reset_peak_host_memory_stats()`: every peak becomes the current value.
    pub fn reset_peak_stats(&self) {
        let c = &mut self.lock().c;
        for st in [&mut c.allocations, &mut c.allocated_bytes, &mut c.active_requests, &mut c.active_bytes] {
            st.peak = st.current;
        }
        for d in [&mut c.host_alloc_time, &mut c.host_free_time] {
            d.max = 0;
            d.min = 0;
        }
    }

    /// `reset_accumulated_host_memory_stats()`: the `allocated`/`freed` totals, the counters and
    /// the timing totals go to 0.
    pub fn reset_accumulated_stats(&self) {
        let c = &mut self.lock().c;
        for st in [&mut c.allocations, &mut c.allocated_bytes, &mut c.active_requests, &mut c.active_bytes] {
            st.allocated = 0;
            st.freed = 0;
        }
        c.num_host_alloc = 0;
        c.num_host_free = 0;
        for d in [&mut c.host_alloc_time, &mut c.host_free_time] {
            d.total = 0;
            d.count = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Pinned memory that only counts, with events completed by hand.
    #[derive(Default)]
    struct Fake {
        next: Mutex<u64>,
        live: Mutex<HashSet<u64>>,
        done: Mutex<HashSet<u64>>,
        released: Mutex<Vec<u64>>,
        refuse: Mutex<bool>,
    }

    impl RawHostMemory for Fake {
        fn alloc(&self, bytes: usize) -> Result<HostPtr> {
            if std::mem::take(&mut *self.refuse.lock().unwrap()) {
                return Err(Error::HostOutOfMemory { requested: bytes });
            }
            let mut n = self.next.lock().unwrap();
            *n += 1 << 32;
            self.live.lock().unwrap().insert(*n);
            Ok(HostPtr(*n))
        }
        fn free(&self, ptr: HostPtr) -> Result<()> {
            assert!(self.live.lock().unwrap().remove(&ptr.0), "freed a block that is not live");
            Ok(())
        }
        fn use_done(&self, u: &HostUse) -> Result<bool> {
            Ok(self.done.lock().unwrap().contains(&u.event.0))
        }
        fn use_release(&self, u: HostUse) {
            self.released.lock().unwrap().push(u.event.0);
        }
    }

    fn copy_use(event: u64) -> HostUse {
        HostUse { device: 0, stream: StreamId(1), event: EventId(event), device_writes: false }
    }

    #[test]
    fn sizes_round_to_powers_of_two_each_with_its_own_free_list() {
        let mem = Arc::new(Fake::default());
        let a = CachingHostAllocator::new(mem.clone());
        let p = a.malloc(5000).unwrap();
        assert_eq!(a.block_size(p), Some(8192));
        a.free(p, Vec::new()).unwrap();
        let q = a.malloc(20_000).unwrap();
        assert_ne!(q, p, "a 32 KiB request does not take (or split) an 8 KiB block");
        assert_eq!(a.malloc(8192).unwrap(), p, "the 8 KiB block serves any request rounding to 8 KiB");
        let st = a.stats();
        assert_eq!((st.allocations().current, st.allocated_bytes().current), (2, 8192 + 32768));
        assert_eq!((st.active_requests().current, st.num_host_alloc()), (2, 2));
        assert_eq!(a.malloc(0).unwrap(), HostPtr(0));
        a.free(HostPtr(0), Vec::new()).unwrap();
        assert!(matches!(a.free(HostPtr(12), Vec::new()), Err(Error::InvalidPointer { .. })));
    }

    #[test]
    fn a_block_with_copies_in_flight_is_reused_only_after_they_complete() {
        let mem = Arc::new(Fake::default());
        let a = CachingHostAllocator::new(mem.clone());
        let p = a.malloc(4096).unwrap();
        a.free(p, vec![copy_use(7), copy_use(8)]).unwrap();
        assert!(matches!(a.free(p, Vec::new()), Err(Error::InvalidPointer { .. })), "pending is not in use");
        let q = a.malloc(4096).unwrap();
        assert_ne!(q, p, "the copies are still running");
        assert_eq!(a.stats().active_requests().current, 2, "a pending block still counts as active");
        mem.done.lock().unwrap().insert(7);
        assert_eq!(a.stats().active_requests().current, 2, "one of two copies is not enough");
        mem.done.lock().unwrap().insert(8);
        assert_eq!(a.stats().active_requests().current, 1);
        assert_eq!(a.malloc(4096).unwrap(), p, "both completed: reused");
        assert_eq!(*mem.released.lock().unwrap(), [7, 8], "events are given back once");
    }

    #[test]
    fn empty_cache_frees_only_unused_blocks_and_stats_follow() {
        let mem = Arc::new(Fake::default());
        let a = CachingHostAllocator::new(mem.clone());
        let (p, q, r) = (a.malloc(100).unwrap(), a.malloc(1000).unwrap(), a.malloc(1 << 20).unwrap());
        a.free(p, Vec::new()).unwrap();
        a.free(q, vec![copy_use(1)]).unwrap();
        a.empty_cache().unwrap();
        let st = a.stats();
        assert_eq!(st.num_host_free(), 1, "only the idle cached block goes back");
        assert_eq!(st.allocations().current, 2);
        assert_eq!(st.allocated_bytes().current, 1024 + (1 << 20));
        assert_eq!(st.allocated_bytes().freed, 128);
        assert_eq!(st.allocated_bytes().peak, 128 + 1024 + (1 << 20));
        assert_eq!(st.host_free_time().count, 1);
        assert_eq!(st.get("host_alloc_time.count"), Some(3));
        mem.done.lock().unwrap().insert(1);
        a.free(r, Vec::new()).unwrap();
        a.empty_cache().unwrap();
        assert!(mem.live.lock().unwrap().is_empty());
        let st = a.stats();
        assert_eq!((st.allocations().current, st.active_bytes().current, st.num_host_free()), (0, 0, 3));
        a.reset_peak_stats();
        a.reset_accumulated_stats();
        let st = a.stats();
        assert_eq!((st.allocated_bytes().peak, st.allocated_bytes().allocated, st.num_host_alloc()), (0, 0, 0));
    }

    #[test]
    fn keys_are_pytorchs() {
        let a = CachingHostAllocator::new(Arc::new(Fake::default()));
        let st = a.stats();
        let keys: Vec<String> = st.iter().map(|(k, _)| k).collect();
        assert_eq!(keys.len(), st.len());
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "sorted and unique");
        for k in [
            "allocations.current",
            "allocations.peak",
            "allocations.allocated",
            "allocations.freed",
            "allocated_bytes.current",
            "active_requests.peak",
            "active_bytes.freed",
            "num_host_alloc",
            "num_host_free",
            "host_alloc_time.avg",
            "host_free_time.min",
        ] {
            assert!(keys.iter().any(|x| x == k), "{k}");
        }
        assert_eq!(st.get("nope"), None);
    }

    #[test]
    fn a_refused_allocation_empties_the_cache_and_retries() {
        let mem = Arc::new(Fake::default());
        let a = CachingHostAllocator::new(mem.clone());
        let p = a.malloc(64).unwrap();
        a.free(p, Vec::new()).unwrap();
        *mem.refuse.lock().unwrap() = true;
        let q = a.malloc(1 << 16).unwrap();
        assert_eq!(a.block_size(q), Some(1 << 16));
        assert_eq!(a.stats().num_host_free(), 1, "the cached block was given back first");
    }
}
