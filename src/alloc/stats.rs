//! Allocator statistics: fixed arrays while running, PyTorch's exact keys only when asked.

use super::block::PoolKind;

/// One statistic, as PyTorch keeps it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stat {
    /// The value now.
    pub current: i64,
    /// The highest value since the last peak reset.
    pub peak: i64,
    /// The total of all increases since the last reset of accumulated stats.
    pub allocated: i64,
    /// The total of all decreases since the last reset of accumulated stats.
    pub freed: i64,
}

impl Stat {
    pub(crate) fn increase(&mut self, n: usize) {
        let n = n as i64;
        self.current += n;
        self.allocated += n;
        self.peak = self.peak.max(self.current);
    }

    pub(crate) fn decrease(&mut self, n: usize) {
        let n = n as i64;
        self.current -= n;
        self.freed += n;
    }

    fn reset_peak(&mut self) {
        self.peak = self.current;
    }

    fn reset_accumulated(&mut self) {
        self.allocated = 0;
        self.freed = 0;
    }

    fn field(&self, i: usize) -> i64 {
        [self.current, self.peak, self.allocated, self.freed][i]
    }
}

/// Which blocks a statistic counts: all, or one pool's (PyTorch's `StatType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatPool {
    /// Both pools (`*.all.*`).
    All,
    /// The small pool (`*.small_pool.*`).
    SmallPool,
    /// The large pool (`*.large_pool.*`).
    LargePool,
}

impl StatPool {
    fn index(self) -> usize {
        self as usize
    }
}

/// The statistics kept per pool (index into [`DeviceStats::arrays`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Metric {
    Allocation,
    Segment,
    Active,
    InactiveSplit,
    AllocatedBytes,
    ReservedBytes,
    ActiveBytes,
    InactiveSplitBytes,
    RequestedBytes,
}

const METRICS: usize = 9;

macro_rules! metric_keys {
    ($($m:literal),*) => {[$([
        [concat!($m, ".all.current"), concat!($m, ".all.peak"), concat!($m, ".all.allocated"), concat!($m, ".all.freed")],
        [concat!($m, ".small_pool.current"), concat!($m, ".small_pool.peak"),
         concat!($m, ".small_pool.allocated"), concat!($m, ".small_pool.freed")],
        [concat!($m, ".large_pool.current"), concat!($m, ".large_pool.peak"),
         concat!($m, ".large_pool.allocated"), concat!($m, ".large_pool.freed")],
    ]),*]};
}

/// `METRIC_KEYS[metric][pool][field]`, fields in the order current, peak, allocated, freed.
const METRIC_KEYS: [[[&str; 4]; 3]; METRICS] = metric_keys!(
    "allocation",
    "segment",
    "active",
    "inactive_split",
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "inactive_split_bytes",
    "requested_bytes"
);
const METRIC_NAMES: [&str; METRICS] = [
    "allocation",
    "segment",
    "active",
    "inactive_split",
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "inactive_split_bytes",
    "requested_bytes",
];
const OVERSIZE_ALLOCATIONS: [&str; 4] = [
    "oversize_allocations.current",
    "oversize_allocations.peak",
    "oversize_allocations.allocated",
    "oversize_allocations.freed",
];
const OVERSIZE_SEGMENTS: [&str; 4] =
    ["oversize_segments.current", "oversize_segments.peak", "oversize_segments.allocated", "oversize_segments.freed"];

/// The live counters of one allocator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct DeviceStats {
    /// `arrays[metric][pool]`, pool 0 = all, 1 = small, 2 = large.
    arrays: [[Stat; 3]; METRICS],
    /// (Read by the summary table.)
    pub(super) oversize_allocations: Stat,
    pub(super) oversize_segments: Stat,
    num_alloc_retries: i64,
    num_ooms: i64,
    num_sync_all_streams: i64,
    num_device_alloc: i64,
    num_device_free: i64,
    /// `max_split_size` in bytes, -1 when unset (as PyTorch reports `SIZE_MAX`).
    max_split_size: i64,
}

/// The event counters of [`DeviceStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Count {
    /// A malloc retried after freeing cached memory (`num_alloc_retries`).
    AllocRetry,
    /// A malloc failed for lack of memory (`num_ooms`).
    Oom,
    /// The device was synchronized to free cached memory (`num_sync_all_streams`).
    SyncAllStreams,
    /// A segment was made or pages mapped (`num_device_alloc`).
    DeviceAlloc,
    /// A segment was freed or pages unmapped (`num_device_free`).
    DeviceFree,
}

impl DeviceStats {
    /// All zero, with the `max_split_size` of the settings in force.
    pub fn new(max_split_size: Option<usize>) -> DeviceStats {
        let mut s = DeviceStats::default();
        s.set_max_split_size(max_split_size);
        s
    }

    /// Records the `max_split_size` of new settings.
    pub fn set_max_split_size(&mut self, max_split_size: Option<usize>) {
        self.max_split_size = max_split_size.map_or(-1, |m| m as i64);
    }

    #[inline]
    pub fn increase(&mut self, m: Metric, pool: PoolKind, n: usize) {
        let a = &mut self.arrays[m as usize];
        a[0].increase(n);
        a[1 + pool.index()].increase(n);
    }

    #[inline]
    pub fn decrease(&mut self, m: Metric, pool: PoolKind, n: usize) {
        let a = &mut self.arrays[m as usize];
        a[0].decrease(n);
        a[1 + pool.index()].decrease(n);
    }

    /// The current value of `m` over both pools.
    #[inline]
    pub fn get(&self, m: Metric) -> i64 {
        self.arrays[m as usize][0].current
    }

    /// The current value of `m` in `pool`.
    pub fn pool_current(&self, m: Metric, pool: PoolKind) -> i64 {
        self.arrays[m as usize][1 + pool.index()].current
    }

    /// Counts one event.
    pub fn count(&mut self, c: Count) {
        *match c {
            Count::AllocRetry => &mut self.num_alloc_retries,
            Count::Oom => &mut self.num_ooms,
            Count::SyncAllStreams => &mut self.num_sync_all_streams,
            Count::DeviceAlloc => &mut self.num_device_alloc,
            Count::DeviceFree => &mut self.num_device_free,
        } += 1;
    }

    /// An oversize block (at least `max_split_size`) was handed out (`true`) or freed.
    #[inline]
    pub fn oversize_allocation(&mut self, added: bool) {
        if added {
            self.oversize_allocations.increase(1);
        } else {
            self.oversize_allocations.decrease(1);
        }
    }

    /// An oversize segment was made (`true`) or freed.
    pub fn oversize_segment(&mut self, added: bool) {
        if added {
            self.oversize_segments.increase(1);
        } else {
            self.oversize_segments.decrease(1);
        }
    }

    /// A copy of the statistics now.
    pub fn snapshot(&self) -> MemoryStats {
        MemoryStats { s: *self }
    }

    pub fn reset_peak(&mut self) {
        self.arrays.iter_mut().flatten().for_each(Stat::reset_peak);
        self.oversize_allocations.reset_peak();
        self.oversize_segments.reset_peak();
    }

    pub fn reset_accumulated(&mut self) {
        self.arrays.iter_mut().flatten().for_each(Stat::reset_accumulated);
        self.oversize_allocations.reset_accumulated();
        self.oversize_segments.reset_accumulated();
        self.num_alloc_retries = 0;
        self.num_ooms = 0;
        self.num_sync_all_streams = 0;
        self.num_device_alloc = 0;
        self.num_device_free = 0;
    }
}

/// A copy of an allocator's statistics (`torch.cuda.memory_stats()`), taken at one moment.
///
/// Iterates `(key, value)` pairs in key order with PyTorch's exact keys
/// (`allocated_bytes.all.current`, `segment.large_pool.peak`, `num_alloc_retries`, …); keys are
/// only made when asked for.
///
/// ```
/// # use cudasem::alloc::{AccountingMemory, AllocatorSettings, CachingAllocator};
/// # use cudasem::driver::StreamId;
/// # use std::sync::Arc;
/// let a = CachingAllocator::new(0, Arc::new(AccountingMemory::new(1 << 30)), AllocatorSettings::default());
/// let p = a.malloc(1000, StreamId(0)).unwrap();
/// let stats = a.memory_stats();
/// assert_eq!(stats.get("allocated_bytes.all.current"), Some(1024));
/// assert_eq!(stats.get("reserved_bytes.small_pool.current"), Some(2 << 20));
/// assert!(stats.iter().any(|(k, _)| k == "num_alloc_retries"));
/// a.free(p).unwrap();
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryStats {
    pub(crate) s: DeviceStats,
}

impl MemoryStats {
    /// The value of a key, `None` for a key PyTorch does not have.
    pub fn get(&self, key: &str) -> Option<i64> {
        self.iter_unsorted().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// One per-pool statistic by its metric name (`"allocated_bytes"`, `"segment"`, …).
    pub fn stat(&self, metric: &str, pool: StatPool) -> Option<Stat> {
        match metric {
            "oversize_allocations" => Some(self.s.oversize_allocations),
            "oversize_segments" => Some(self.s.oversize_segments),
            _ => METRIC_NAMES.iter().position(|&m| m == metric).map(|i| self.s.arrays[i][pool.index()]),
        }
    }

    pub(crate) fn metric(&self, m: Metric, pool: StatPool) -> Stat {
        self.s.arrays[m as usize][pool.index()]
    }

    /// `allocated_bytes.all` (bytes handed out, after rounding).
    pub fn allocated_bytes(&self) -> Stat {
        self.metric(Metric::AllocatedBytes, StatPool::All)
    }

    /// `reserved_bytes.all` (bytes held from the driver).
    pub fn reserved_bytes(&self) -> Stat {
        self.metric(Metric::ReservedBytes, StatPool::All)
    }

    /// `requested_bytes.all` (bytes asked for by live blocks, before rounding).
    pub fn requested_bytes(&self) -> Stat {
        self.metric(Metric::RequestedBytes, StatPool::All)
    }

    /// `active_bytes.all` (allocated blocks and blocks waiting for recorded streams).
    pub fn active_bytes(&self) -> Stat {
        self.metric(Metric::ActiveBytes, StatPool::All)
    }

    /// `segment.all` (segments; for expandable segments, contiguous mapped ranges).
    pub fn segments(&self) -> Stat {
        self.metric(Metric::Segment, StatPool::All)
    }

    /// `num_device_alloc`: driver allocations (segments, or page mappings of expandable segments).
    pub fn num_device_alloc(&self) -> i64 {
        self.s.num_device_alloc
    }

    /// `num_device_free`: driver frees (segments, or page unmappings).
    pub fn num_device_free(&self) -> i64 {
        self.s.num_device_free
    }

    /// `num_alloc_retries`: mallocs that had to free the whole cache and retry.
    pub fn num_alloc_retries(&self) -> i64 {
        self.s.num_alloc_retries
    }

    /// `num_ooms`: out-of-memory errors returned.
    pub fn num_ooms(&self) -> i64 {
        self.s.num_ooms
    }

    /// `num_sync_all_streams`: device synchronizations (`empty_cache`, the OOM retry).
    pub fn num_sync_all_streams(&self) -> i64 {
        self.s.num_sync_all_streams
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        METRICS * 12 + 8 + 6
    }

    /// Always `false` (there is always every key).
    pub fn is_empty(&self) -> bool {
        false
    }

    fn iter_unsorted(&self) -> impl Iterator<Item = (&'static str, i64)> + '_ {
        let arrays = (0..METRICS).flat_map(move |m| {
            (0..3).flat_map(move |p| (0..4).map(move |f| (METRIC_KEYS[m][p][f], self.s.arrays[m][p].field(f))))
        });
        let oversize = (0..4).flat_map(move |f| {
            [
                (OVERSIZE_ALLOCATIONS[f], self.s.oversize_allocations.field(f)),
                (OVERSIZE_SEGMENTS[f], self.s.oversize_segments.field(f)),
            ]
        });
        let s = &self.s;
        let scalars = [
            ("num_alloc_retries", s.num_alloc_retries),
            ("num_ooms", s.num_ooms),
            ("num_sync_all_streams", s.num_sync_all_streams),
            ("num_device_alloc", s.num_device_alloc),
            ("num_device_free", s.num_device_free),
            ("max_split_size", s.max_split_size),
        ];
        arrays.chain(oversize).chain(scalars)
    }

    /// `(key, value)` for every key, in key order (like PyTorch's `OrderedDict`).
    pub fn iter(&self) -> std::vec::IntoIter<(&'static str, i64)> {
        let mut v: Vec<_> = self.iter_unsorted().collect();
        v.sort_unstable_by_key(|&(k, _)| k);
        v.into_iter()
    }
}

impl serde::Serialize for MemoryStats {
    /// As PyTorch's `memory_stats()` dict: every key, in key order.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

impl IntoIterator for &MemoryStats {
    type Item = (&'static str, i64);
    type IntoIter = std::vec::IntoIter<(&'static str, i64)>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_pytorchs() {
        let mut s = DeviceStats { max_split_size: -1, ..Default::default() };
        s.increase(Metric::AllocatedBytes, PoolKind::Large, 4096);
        s.decrease(Metric::AllocatedBytes, PoolKind::Large, 1024);
        let m = MemoryStats { s };
        assert_eq!(m.len(), m.iter().count());
        assert_eq!(m.get("allocated_bytes.all.current"), Some(3072));
        assert_eq!(m.get("allocated_bytes.large_pool.peak"), Some(4096));
        assert_eq!(m.get("allocated_bytes.large_pool.freed"), Some(1024));
        assert_eq!(m.get("allocated_bytes.small_pool.allocated"), Some(0));
        assert_eq!(m.get("max_split_size"), Some(-1));
        assert_eq!(m.get("oversize_segments.peak"), Some(0));
        assert_eq!(m.get("no.such.key"), None);
        let keys: Vec<_> = m.iter().map(|(k, _)| k).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "sorted and unique");
        for k in ["requested_bytes.all.current", "inactive_split_bytes.small_pool.freed", "num_device_free"] {
            assert!(keys.contains(&k), "{k}");
        }
        let mut s = m.s;
        s.reset_peak();
        assert_eq!(s.arrays[Metric::AllocatedBytes as usize][0].peak, 3072);
        s.reset_accumulated();
        assert_eq!(s.arrays[Metric::AllocatedBytes as usize][0].allocated, 0);
    }
}
