//! Private memory pools: `torch.cuda.MemPool`, `use_mem_pool`, `graph_pool_handle`, and the
//! routing calls a CUDA graph's capture makes (`beginAllocateToPool`, `endAllocateToPool`,
//! `releasePool`), over each device's caching allocator (`alloc/mem_pools.rs` has the policy).

use super::{rt, Stream};
use crate::alloc::{MemPoolId, Snapshot, StreamFilter};
use crate::driver::StreamId;
use crate::error::{Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The next user pool's second counter (`MemPool`, `graph_pool_handle`: `(0, n)`), from 1.
static USER_POOLS: AtomicU64 = AtomicU64::new(1);
/// The next graph-owned pool's first counter (a capture given no pool: `(n, 0)`), from 1.
static GRAPH_POOLS: AtomicU64 = AtomicU64::new(1);

/// `torch.cuda.graph_pool_handle()`: a new pool id, `(0, n)`, unique in the process. Pass it to
/// several captures to share one private pool between their graphs.
pub fn graph_pool_handle() -> MemPoolId {
    MemPoolId(0, USER_POOLS.fetch_add(1, Ordering::Relaxed))
}

/// The id of a graph's own pool, `(n, 0)` (what `capture_begin` uses when given no pool).
pub(crate) fn new_graph_pool_id() -> MemPoolId {
    MemPoolId(GRAPH_POOLS.fetch_add(1, Ordering::Relaxed), 0)
}

/// `beginAllocateToPool(device, pool, filter)`: makes the pool (use count 1) or takes one more
/// use of it (a shared pool), and routes every allocation on `device` whose stream passes
/// `filter` to it until [`end_allocate_to_pool`]; a capture is underway on the device meanwhile
/// (no event queries, no memory freed to the driver).
pub(crate) fn begin_allocate_to_pool(device: usize, pool: MemPoolId, filter: StreamFilter) -> Result<()> {
    let rt = rt()?;
    rt.allocator(rt.check(device)?)?.begin_allocate_to_pool(pool, filter)
}

/// [`begin_allocate_to_pool`] with a filter that passes `streams` (what a capture of those
/// streams routes).
pub(crate) fn begin_allocate_to_streams(device: usize, pool: MemPoolId, streams: &[&Stream]) -> Result<()> {
    let ids: Vec<StreamId> = streams.iter().map(|s| s.driver_id()).collect();
    begin_allocate_to_pool(device, pool, Arc::new(move |s| ids.contains(&s)))
}

/// `endAllocateToPool(device, pool)`: stops the routing (the use count is unchanged).
pub(crate) fn end_allocate_to_pool(device: usize, pool: MemPoolId) -> Result<()> {
    let rt = rt()?;
    rt.allocator(rt.check(device)?)?.end_allocate_to_pool(pool)
}

/// `releasePool(device, pool)`: one use less; at 0 the pool is freeable (`empty_cache` returns
/// its whole free segments) and it is deleted once none of its blocks is allocated.
pub(crate) fn release_pool(device: usize, pool: MemPoolId) -> Result<()> {
    let rt = rt()?;
    rt.allocator(rt.check(device)?)?.release_pool(pool).map(drop)
}

/// `torch.cuda.MemPool()`: a private memory pool of the current device, owned by this value.
///
/// Allocations made inside [`use_mem_pool`] go to the pool and only to it: its blocks are never
/// handed to other allocations, nor theirs to it. The pool's segments count in the device's
/// statistics and snapshots (with their `segment_pool_id`, [`MemPool::id`]); they stay while a
/// tensor allocated from the pool lives, also after the `MemPool` is dropped. Dropping it releases
/// the owner's use; once no user is left (no open [`use_mem_pool`], no graph sharing it), its
/// whole free segments go back to the driver (at the drop, or at the next
/// [`empty_cache`](super::empty_cache) once its tensors are gone).
///
/// As in PyTorch, a pool uses ordinary segments even with `expandable_segments:True`.
///
/// ```
/// use cudasem::{cuda, DType, Tensor};
/// # fn main() -> cudasem::Result<()> {
/// let pool = cuda::MemPool::new()?;
/// let t = cuda::use_mem_pool(&pool, || Tensor::zeros(&[256], DType::F32, "cuda"))?;
/// assert_eq!(pool.snapshot()?.allocated_bytes(), 1024);
/// assert_eq!(pool.use_count()?, 1);
/// drop((t, pool));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct MemPool {
    id: MemPoolId,
    device: usize,
}

impl MemPool {
    /// A new pool on the current device (use count 1: this owner).
    pub fn new() -> Result<MemPool> {
        let rt = rt()?;
        let device = rt.resolve(None)?;
        let id = graph_pool_handle();
        rt.allocator(device)?.create_pool(id)?;
        Ok(MemPool { id, device })
    }

    /// `pool.id`: the pool's id.
    pub fn id(&self) -> MemPoolId {
        self.id
    }

    /// The device whose allocator holds the pool.
    pub fn device(&self) -> usize {
        self.device
    }

    /// `pool.use_count()`: 1 for this owner, plus one per open [`use_mem_pool`] and per graph
    /// sharing the pool.
    pub fn use_count(&self) -> Result<usize> {
        rt()?.allocator(self.device)?.pool_use_count(self.id)
    }

    /// `pool.snapshot()`: the pool's segments only (as [`memory_snapshot`](super::memory_snapshot)
    /// shows them; no history).
    pub fn snapshot(&self) -> Result<Snapshot> {
        Ok(rt()?.allocator(self.device)?.pool_snapshot(self.id))
    }
}

impl Drop for MemPool {
    fn drop(&mut self) {
        // PyTorch's ~MemPool: release the owner's use, then empty the pool's cache (only done if
        // that was the last use). A failure is kept for the next synchronize.
        let Ok(rt) = rt() else { return };
        let r = rt.allocator(self.device).and_then(|a| {
            a.release_pool(self.id)?;
            a.empty_pool_cache(self.id)
        });
        if let Err(e) = r {
            crate::runtime::record_device_error(self.device, e);
        }
    }
}

/// `with torch.cuda.use_mem_pool(pool):` — every allocation on the pool's device made by this
/// thread inside `f` goes to the pool (other threads' and other devices' do not). The pool's use
/// count is one higher meanwhile. The routing ends when `f` returns, also when it fails or panics;
/// `f`'s error comes first, else the error of ending the routing.
///
/// While it is open, a capture is underway on the device as far as the allocator is concerned
/// (as in PyTorch): frees of blocks used on other streams wait until it ends, and nothing is freed
/// to the driver (`empty_cache` does nothing; out of memory comes without freeing the cache).
///
/// The closure may return any error type `E` with `From<cudasem::Error>` (your own error enum,
/// `Box<dyn std::error::Error>`, `anyhow::Error`), so `?` works inside it on cudasem's errors and
/// on yours; cudasem's own errors of the call come back converted. In a function returning
/// cudasem's [`Result`], `E` is `cudasem::Error` without saying so; elsewhere a closure that ends in
/// `Ok(..)` names it once: `Ok::<_, MyError>(value)`.
pub fn use_mem_pool<R, E: From<Error>>(pool: &MemPool, f: impl FnOnce() -> Result<R, E>) -> Result<R, E> {
    let thread = std::thread::current().id();
    let filter: StreamFilter = Arc::new(move |_: StreamId| std::thread::current().id() == thread);
    begin_allocate_to_pool(pool.device, pool.id, filter)?;
    /// Ends the routing and releases its use, also while unwinding.
    struct Open<'a>(&'a MemPool, bool);
    impl Open<'_> {
        fn close(&mut self) -> Result<()> {
            self.1 = false;
            end_allocate_to_pool(self.0.device, self.0.id)?;
            release_pool(self.0.device, self.0.id)
        }
    }
    impl Drop for Open<'_> {
        fn drop(&mut self) {
            if self.1 {
                if let Err(e) = self.close() {
                    crate::runtime::record_device_error(self.0.device, e);
                }
            }
        }
    }
    let mut open = Open(pool, true);
    let r = f();
    let closed = open.close();
    let r = r?;
    Ok(closed.map(|()| r)?)
}
