//! Private memory pools (PyTorch's `PrivatePool`, `MempoolId_t`): the books of the pools a
//! device's allocator holds besides its default pools, and the routing of allocations to them.
//!
//! A private pool has its own free lists (small and large, kept by [`Blocks`](super::block) under
//! the pool's slot): its blocks never serve default allocations, nor default blocks it. CUDA
//! graphs allocate from one while they capture (`beginAllocateToPool` … `endAllocateToPool`), and
//! `torch.cuda.MemPool` exposes them to programs (`use_mem_pool`). A pool lives while its
//! `use_count` (1 for its owner, +1 per capture or open `use_mem_pool` sharing it) is above 0;
//! at 0 it is *freeable*: `empty_cache` returns its unused whole segments to the driver, and once
//! it holds no segment it is deleted.
//!
//! As in PyTorch, pools use ordinary segments whatever the settings (PyTorch's `MemPool` does not
//! support expandable segments), of PyTorch's sizes (2 MiB small segments, 20 MiB for large
//! requests under 10 MiB, the request rounded to 2 MiB above): a graph's pool reserves its
//! capture's high-water mark and nothing more, so the growth departure (`departures.rs`) does not
//! apply to them.
//!
//! While any routing entry is active a capture is underway on the device (PyTorch's
//! `captures_underway`, `use_mem_pool` included): no event is recorded or queried, a free with
//! stream uses waits (`needs_events_deferred_until_no_capture`) and records its events once no
//! capture is underway. Where cudasem is stricter than PyTorch: nothing at all goes back to the
//! driver during a capture (PyTorch still frees oversize blocks of the pool before an OOM, and
//! freeable pools' segments in `empty_cache`), since freeing device memory is illegal in a
//! global-mode capture; and stream uses recorded during a capture still get events after it
//! (PyTorch drops them, knowing the captured work has completed), which only waits longer.

use crate::driver::StreamId;
use std::sync::Arc;

/// A memory pool's id: PyTorch's `MempoolId_t` pair. `(0, 0)` names the default pools;
/// [`graph_pool_handle`](crate::cuda::graph_pool_handle) and `MemPool::new` make `(0, n)`, a
/// graph capturing without a pool makes `(n, 0)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MemPoolId(pub u64, pub u64);

impl MemPoolId {
    /// The default pools' id, `(0, 0)`.
    pub const DEFAULT: MemPoolId = MemPoolId(0, 0);

    /// Whether this is `(0, 0)`, the default pools.
    pub fn is_default(self) -> bool {
        self == MemPoolId::DEFAULT
    }

    /// The pair.
    pub fn pair(self) -> (u64, u64) {
        (self.0, self.1)
    }
}

/// Which allocations a routing entry takes: called with the allocation's stream on the thread
/// that allocates (a capture's filter asks whether the stream is the capturing one; `use_mem_pool`'s
/// whether the thread is the one that opened it). It runs with the allocator's routing table
/// read-locked (not its state's lock): it must not allocate from, or route in, the same allocator.
pub type StreamFilter = Arc<dyn Fn(StreamId) -> bool + Send + Sync>;

/// A routing entry: allocations whose stream passes `filter` go to `pool`.
#[derive(Clone)]
pub(crate) struct Route {
    pub pool: MemPoolId,
    pub filter: StreamFilter,
}

/// Index of a pool's free lists in [`Blocks`](super::block): 0 is the default pools.
pub(crate) type Slot = u32;
/// The default pools' slot.
pub(crate) const DEFAULT_SLOT: Slot = 0;

/// One private pool's books.
#[derive(Debug, Clone)]
struct PrivatePool {
    id: MemPoolId,
    /// Owners and sharers; 0: freeable.
    use_count: usize,
    /// Segments held from the driver (PyTorch's `cudaMalloc_count`).
    segments: usize,
}

/// The private pools of one device, by slot (slot `i + 1` is `pools[i]`), and the pools
/// allocations are routed to now.
#[derive(Debug, Default)]
pub(crate) struct PoolBooks {
    pools: Vec<Option<PrivatePool>>,
    /// Pools with a routing entry now, in the order routing began (PyTorch's `captures_underway`).
    underway: Vec<MemPoolId>,
}

/// Why a pool operation was refused.
pub(crate) type Refusal = &'static str;

impl PoolBooks {
    fn find(&self, id: MemPoolId) -> Option<(Slot, &PrivatePool)> {
        self.pools.iter().enumerate().find_map(|(i, p)| p.as_ref().filter(|p| p.id == id).map(|p| (i as Slot + 1, p)))
    }

    fn get_mut(&mut self, slot: Slot) -> &mut PrivatePool {
        self.pools[slot as usize - 1].as_mut().expect("a live slot")
    }

    /// The slot of pool `id`, if it exists (freeable or not).
    pub fn slot_of(&self, id: MemPoolId) -> Option<Slot> {
        self.find(id).map(|(s, _)| s)
    }

    /// The id of the pool at `slot` (`None` for the default pools' slot).
    pub fn id_of(&self, slot: Slot) -> Option<MemPoolId> {
        (slot != DEFAULT_SLOT).then(|| self.pools[slot as usize - 1].as_ref().map(|p| p.id)).flatten()
    }

    /// PyTorch's `create_or_incref_pool`: a new pool (use_count 1) or one more user of a live
    /// one. Refused for `(0, 0)` and for a freeable pool (released by all its users).
    pub fn create_or_incref(&mut self, id: MemPoolId) -> Result<Slot, Refusal> {
        if id.is_default() {
            return Err("(0, 0) names the default pools, not a private pool");
        }
        if let Some((slot, p)) = self.find(id) {
            if p.use_count == 0 {
                return Err("the pool was released by all its users and is being freed");
            }
            self.get_mut(slot).use_count += 1;
            return Ok(slot);
        }
        let pool = Some(PrivatePool { id, use_count: 1, segments: 0 });
        let slot = match self.pools.iter().position(Option::is_none) {
            Some(i) => {
                self.pools[i] = pool;
                i
            }
            None => {
                self.pools.push(pool);
                self.pools.len() - 1
            }
        };
        Ok(slot as Slot + 1)
    }

    /// `releasePool`: one user less; at 0 the pool is freeable. Returns the use count after.
    pub fn release(&mut self, id: MemPoolId) -> Result<usize, Refusal> {
        let Some((slot, p)) = self.find(id) else {
            return Err("no such pool on this device (never made, or freed and deleted)");
        };
        if p.use_count == 0 {
            return Err("the pool was released by all its users already");
        }
        let p = self.get_mut(slot);
        p.use_count -= 1;
        Ok(p.use_count)
    }

    /// The pool's use count.
    pub fn use_count(&self, id: MemPoolId) -> Option<usize> {
        self.find(id).map(|(_, p)| p.use_count)
    }

    /// `beginAllocateToPool`'s books: creates the pool or takes one more use of it, and starts
    /// routing to it (a capture is underway until [`PoolBooks::end`]). Returns its slot.
    pub fn begin(&mut self, id: MemPoolId) -> Result<Slot, Refusal> {
        if self.underway.contains(&id) {
            return Err("allocations are routed to this pool already");
        }
        let slot = self.create_or_incref(id)?;
        self.underway.push(id);
        Ok(slot)
    }

    /// Stops routing to `id`.
    pub fn end(&mut self, id: MemPoolId) -> Result<(), Refusal> {
        let Some(i) = self.underway.iter().position(|&p| p == id) else {
            return Err("allocations are not routed to this pool");
        };
        self.underway.remove(i);
        Ok(())
    }

    /// Whether a capture (any routing entry) is underway.
    #[inline]
    pub fn capturing(&self) -> bool {
        !self.underway.is_empty()
    }

    /// A segment was made for the pool at `slot` (not the default pools').
    pub fn segment_added(&mut self, slot: Slot) {
        if slot != DEFAULT_SLOT {
            self.get_mut(slot).segments += 1;
        }
    }

    /// A segment of the pool at `slot` went back to the driver.
    pub fn segment_freed(&mut self, slot: Slot) {
        if slot != DEFAULT_SLOT {
            let p = self.get_mut(slot);
            p.segments = p.segments.saturating_sub(1);
        }
    }

    /// The slots of freeable pools (use count 0).
    pub fn freeable(&self) -> Vec<Slot> {
        self.pools
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.as_ref().filter(|p| p.use_count == 0).map(|_| i as Slot + 1))
            .collect()
    }

    /// The segments the private pool at `slot` holds.
    pub fn segments(&self, slot: Slot) -> usize {
        self.pools[slot as usize - 1].as_ref().map_or(0, |p| p.segments)
    }

    /// Deletes the freeable pool at `slot`, which holds no segment any more.
    pub fn delete(&mut self, slot: Slot) {
        let p = &mut self.pools[slot as usize - 1];
        debug_assert!(p.as_ref().is_some_and(|p| p.use_count == 0 && p.segments == 0));
        *p = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_counts_follow_create_incref_release_and_freeable_pools_are_deleted_once_empty() {
        let mut b = PoolBooks::default();
        let (a, c) = (MemPoolId(0, 1), MemPoolId(2, 0));
        assert!(b.create_or_incref(MemPoolId::DEFAULT).is_err());
        let sa = b.create_or_incref(a).unwrap();
        let sc = b.create_or_incref(c).unwrap();
        assert_ne!(sa, sc);
        assert_eq!(b.create_or_incref(a), Ok(sa), "a shared pool keeps its slot");
        assert_eq!(b.use_count(a), Some(2));
        assert_eq!(b.id_of(sa), Some(a));
        assert_eq!(b.id_of(DEFAULT_SLOT), None);
        b.segment_added(sa);
        assert_eq!(b.release(a), Ok(1));
        assert!(b.freeable().is_empty());
        assert_eq!(b.release(a), Ok(0));
        assert_eq!(b.freeable(), vec![sa]);
        assert_eq!(b.segments(sa), 1);
        assert!(b.release(a).is_err(), "released past 0");
        assert!(b.create_or_incref(a).is_err(), "a freeable pool takes no new user");
        b.segment_freed(sa);
        assert_eq!(b.segments(sa), 0);
        b.delete(sa);
        assert_eq!(b.use_count(a), None);
        assert!(b.release(a).is_err(), "a deleted pool is unknown");
        let sd = b.create_or_incref(MemPoolId(0, 3)).unwrap();
        assert_eq!(sd, sa, "the vacant slot is reused");
    }

    #[test]
    fn routing_is_underway_between_begin_and_end_once_per_pool() {
        let mut b = PoolBooks::default();
        let (a, c) = (MemPoolId(0, 1), MemPoolId(0, 2));
        assert!(!b.capturing());
        let sa = b.begin(a).unwrap();
        assert_eq!(b.use_count(a), Some(1), "begin creates the pool");
        assert!(b.begin(a).is_err(), "one routing entry per pool");
        assert_eq!(b.use_count(a), Some(1), "a refused begin takes no use");
        b.begin(c).unwrap();
        assert_eq!(b.create_or_incref(a), Ok(sa));
        assert_eq!(b.use_count(a), Some(2));
        b.end(a).unwrap();
        assert!(b.capturing());
        assert!(b.end(a).is_err());
        b.end(c).unwrap();
        assert!(!b.capturing());
    }
}
