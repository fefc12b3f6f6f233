//! Private memory pools (`torch.cuda.MemPool`, `use_mem_pool`, and the routing a CUDA graph's
//! capture makes) through the runtime's caching allocators, written once for the sim driver and
//! real GPUs (`CUDASEM_DRIVER=cuda`).
//!
//! A routing entry makes a capture underway on its whole device (no event queries, nothing freed
//! to the driver), which other tests of this file would see: every test first takes [`serial`],
//! which also empties the cache.

mod common;

use common::{distinct_streams, two_devices};
use cudasem::cuda::{self, BlockState, MemPool, MemPoolId};
use cudasem::testing;
use cudasem::{DType, Error, Result, Tensor};
use std::sync::{Mutex, MutexGuard};

const MIB: usize = 1 << 20;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    cuda::empty_cache().expect("empty_cache");
    guard
}

/// `n` f32 zeros on the current device (its current stream).
fn zeros(n: usize) -> Result<Tensor> {
    Tensor::zeros([n], DType::F32, "cuda")
}

/// The private pool the tensor's block came from.
fn pool_of(t: &Tensor) -> Option<MemPoolId> {
    testing::block_pool(t.device(), t.data_ptr()).expect("block_pool")
}

/// The device's segments of `pool`, from the whole snapshot.
fn pool_segments(device: usize, pool: MemPoolId) -> Vec<cuda::SegmentInfo> {
    let s = cuda::memory_snapshot().expect("memory_snapshot");
    s.segments.into_iter().filter(|s| s.device == device && s.segment_pool_id == pool).collect()
}

fn assert_mem_pool_error<T: std::fmt::Debug>(r: Result<T>, what: &str) {
    match r {
        Err(Error::MemPool { .. }) => {}
        other => panic!("{what}: expected Error::MemPool, got {other:?}"),
    }
}

#[test]
fn use_mem_pool_routes_this_threads_allocations_on_the_pools_device_only() -> Result<()> {
    let _s = serial();
    let pool = MemPool::new()?;
    assert_eq!(pool.device(), cuda::current_device()?);
    let (inside, from_other_thread) = cuda::use_mem_pool(&pool, || {
        let t = zeros(1000)?;
        // Another thread allocating on the same device at the same time is not routed.
        let other = std::thread::scope(|sc| sc.spawn(|| zeros(1000)).join().expect("no panic"))?;
        Ok((t, other))
    })?;
    assert_eq!(pool_of(&inside), Some(pool.id()), "this thread's allocation went to the pool");
    assert_eq!(pool_of(&from_other_thread), None, "another thread's allocation took the default pools");
    let after = zeros(1000)?;
    assert_eq!(pool_of(&after), None, "the routing ended with the closure");
    assert_eq!(inside.to_vec::<f32>()?, vec![0.0; 1000], "the pool's memory holds the tensor");
    Ok(())
}

#[test]
fn use_mem_pool_of_another_device_routes_that_devices_allocations_only() -> Result<()> {
    if !two_devices() {
        return Ok(());
    }
    let _s = serial();
    let pool = cuda::with_device(1, MemPool::new)?;
    assert_eq!(pool.device(), 1);
    let (on_1, on_0) = cuda::with_device(0, || {
        cuda::use_mem_pool(&pool, || Ok((Tensor::zeros([64], DType::F32, "cuda:1")?, zeros(64)?)))
    })?;
    assert_eq!(pool_of(&on_1), Some(pool.id()), "the pool's device is routed");
    assert_eq!(pool_of(&on_0), None, "other devices are not");
    assert!(pool.snapshot()?.segments.iter().all(|s| s.device == 1));
    Ok(())
}

#[test]
fn blocks_freed_in_the_pool_are_reused_inside_it_and_never_by_default_allocations() -> Result<()> {
    let _s = serial();
    // A default block freed just before is not handed to the pool.
    let default_ptr = zeros(256)?.data_ptr();
    let pool = MemPool::new()?;
    let pool_ptr = cuda::use_mem_pool(&pool, || {
        let a = zeros(256)?;
        assert_ne!(a.data_ptr(), default_ptr, "the pool took a block of the default pools");
        let pa = a.data_ptr();
        drop(a);
        let b = zeros(256)?;
        assert_eq!(b.data_ptr(), pa, "a block freed in the pool serves the pool's next request");
        Ok(pa)
    })?;
    // The pool's freed block is not handed to default allocations.
    let c = zeros(256)?;
    assert_ne!(c.data_ptr(), pool_ptr, "a default allocation took the pool's block");
    assert_eq!(pool_of(&c), None);
    let inside = |p: u64, s: &cuda::SegmentInfo| p >= s.address && p < s.address + s.total_size as u64;
    assert!(pool.snapshot()?.segments.iter().all(|s| !inside(c.data_ptr(), s)));
    assert!(pool.snapshot()?.segments.iter().any(|s| inside(pool_ptr, s)));
    Ok(())
}

#[test]
fn use_count_counts_the_owner_open_uses_and_sharing_captures() -> Result<()> {
    let _s = serial();
    let pool = MemPool::new()?;
    assert_eq!(pool.use_count()?, 1, "the owner");
    cuda::use_mem_pool(&pool, || {
        assert_eq!(pool.use_count()?, 2, "an open use_mem_pool");
        assert_mem_pool_error(cuda::use_mem_pool(&pool, || Ok(())), "routing to the pool twice");
        assert_eq!(pool.use_count()?, 2, "a refused use takes no use");
        assert_eq!(pool_of(&zeros(16)?), Some(pool.id()), "the refused nested use left the routing on");
        Ok(())
    })?;
    assert_eq!(pool.use_count()?, 1, "use_mem_pool ends with end + release");
    let s = cuda::current_stream(None)?;
    // A capture sharing the pool (`capture_begin(pool=pool.id)`) takes a use until its graph is
    // reset: ending the routing keeps it.
    testing::begin_allocate_to_pool(None, pool.id(), &[&s])?;
    assert_eq!(pool.use_count()?, 2);
    testing::end_allocate_to_pool(None, pool.id())?;
    assert_eq!(pool.use_count()?, 2, "end_allocate_to_pool keeps the use count");
    assert_mem_pool_error(testing::end_allocate_to_pool(None, pool.id()), "ending a routing that is not on");
    testing::release_pool(None, pool.id())?;
    assert_eq!(pool.use_count()?, 1);
    Ok(())
}

#[test]
fn the_pools_snapshot_lists_its_segments_and_the_statistics_count_them() -> Result<()> {
    let _s = serial();
    let device = cuda::current_device()?;
    let reserved = cuda::memory_reserved(device)?;
    let segments = cuda::memory_stats(device)?.segments().current;
    let pool = MemPool::new()?;
    let (small, large) = cuda::use_mem_pool(&pool, || Ok((zeros(1000)?, zeros(3 * MIB / 4)?)))?;
    let snap = pool.snapshot()?;
    // PyTorch's segment sizes: a 2 MiB small segment, a 20 MiB one for a 3 MiB request.
    let mut sizes: Vec<usize> = snap.segments.iter().map(|s| s.total_size).collect();
    sizes.sort_unstable();
    assert_eq!(sizes, vec![2 * MIB, 20 * MIB], "the pool's segments");
    assert!(snap.segments.iter().all(|s| s.segment_pool_id == pool.id()));
    assert_eq!(snap.allocated_bytes(), 4096 + 3 * MIB);
    assert_eq!(cuda::memory_reserved(device)? - reserved, 22 * MIB, "memory_reserved counts the pool");
    assert_eq!(cuda::memory_stats(device)?.segments().current - segments, 2, "segment.all counts the pool");
    let whole = cuda::memory_snapshot()?;
    let in_pool: Vec<_> = whole.segments.iter().filter(|s| s.segment_pool_id == pool.id()).cloned().collect();
    assert_eq!(in_pool, snap.segments, "the whole snapshot shows the same segments with their pool id");
    assert!(whole.segments.iter().filter(|s| s.segment_pool_id != pool.id()).all(|s| s.segment_pool_id.is_default()));
    // PyTorch's key in the exported dict is the pair.
    let json = whole.to_json();
    let pair = format!("\"segment_pool_id\":[{},{}]", pool.id().0, pool.id().1);
    assert!(json.contains(&pair), "the JSON carries {pair}");
    drop((small, large));
    Ok(())
}

#[test]
fn a_dropped_pools_segments_stay_while_its_tensors_live_and_empty_cache_returns_them_after() -> Result<()> {
    let _s = serial();
    let device = cuda::current_device()?;
    let pool = MemPool::new()?;
    let id = pool.id();
    let (a, b) = cuda::use_mem_pool(&pool, || Ok((zeros(1000)?, zeros(3 * MIB / 4)?)))?;
    let held: usize = pool.snapshot()?.reserved_bytes();
    let reserved = cuda::memory_reserved(device)?;
    drop(pool);
    assert_eq!(pool_segments(device, id).iter().map(|s| s.total_size).sum::<usize>(), held, "segments stay");
    cuda::empty_cache()?;
    assert_eq!(cuda::memory_reserved(device)?, reserved, "empty_cache keeps segments with live tensors");
    assert_eq!(pool_of(&a), Some(id));
    drop(a);
    cuda::empty_cache()?;
    assert_eq!(cuda::memory_reserved(device)?, reserved - 2 * MIB, "the freed small segment went back");
    drop(b);
    assert_eq!(cuda::memory_reserved(device)?, reserved - 2 * MIB, "freed blocks stay cached until empty_cache");
    cuda::empty_cache()?;
    assert!(pool_segments(device, id).is_empty(), "every segment of the pool went back");
    assert_eq!(cuda::memory_reserved(device)?, reserved - held);
    assert_mem_pool_error(testing::release_pool(device, id), "releasing a deleted pool");
    Ok(())
}

#[test]
fn a_pool_in_use_keeps_its_segments_through_empty_cache() -> Result<()> {
    let _s = serial();
    let pool = MemPool::new()?;
    drop(cuda::use_mem_pool(&pool, || zeros(1000))?);
    assert_eq!(pool.snapshot()?.reserved_bytes(), 2 * MIB);
    cuda::empty_cache()?;
    assert_eq!(pool.snapshot()?.reserved_bytes(), 2 * MIB, "the owner still uses the pool");
    let reused = cuda::use_mem_pool(&pool, || zeros(1000))?;
    assert_eq!(pool.snapshot()?.segments.len(), 1, "the cached segment served the pool again");
    drop(reused);
    Ok(())
}

#[test]
fn a_capture_routes_only_its_stream_and_reuses_its_freed_blocks() -> Result<()> {
    let _s = serial();
    let device = cuda::current_device()?;
    let streams = distinct_streams(device, 2)?;
    let (capturing, other) = (&streams[0], &streams[1]);
    let id = cuda::graph_pool_handle();
    assert!(!id.is_default() && id.0 == 0, "a user pool id is (0, n)");
    assert_ne!(cuda::graph_pool_handle(), id, "ids are unique");
    testing::begin_allocate_to_pool(device, id, &[capturing])?;
    let (kept, reused) = cuda::with_stream(capturing, || {
        let a = zeros(4096)?;
        let pa = a.data_ptr();
        drop(a);
        let b = zeros(4096)?;
        Ok((b, pa))
    })?;
    let outside = cuda::with_stream(other, || zeros(4096))?;
    testing::end_allocate_to_pool(device, id)?;
    assert_eq!(pool_of(&kept), Some(id), "the capturing stream's allocation went to the pool");
    assert_eq!(kept.data_ptr(), reused, "a block freed during the capture served its next allocation");
    assert_eq!(pool_of(&outside), None, "the other stream took the default pools");
    assert_eq!(pool_of(&cuda::with_stream(capturing, || zeros(16))?), None, "no routing after the end");
    // The graph is reset: the pool is freeable, and goes once its tensor does.
    testing::release_pool(device, id)?;
    assert_mem_pool_error(testing::begin_allocate_to_pool(device, id, &[capturing]), "sharing a freeable pool");
    cuda::empty_cache()?;
    assert_eq!(pool_segments(device, id).len(), 1, "the live tensor keeps its segment");
    drop(kept);
    cuda::empty_cache()?;
    assert!(pool_segments(device, id).is_empty());
    assert_mem_pool_error(testing::release_pool(device, id), "releasing a deleted pool");
    Ok(())
}

#[test]
fn frees_with_stream_uses_during_a_capture_wait_until_it_ends() -> Result<()> {
    let _s = serial();
    let device = cuda::current_device()?;
    let streams = distinct_streams(device, 2)?;
    let (capturing, user) = (&streams[0], &streams[1]);
    let pool = MemPool::new()?;
    let state = |addr: u64| -> Result<BlockState> {
        let snap = pool.snapshot()?;
        let b = snap.segments.iter().flat_map(|s| &s.blocks).find(|b| b.address == addr);
        Ok(b.expect("the block is in the pool's snapshot").state)
    };
    testing::begin_allocate_to_pool(device, pool.id(), &[capturing])?;
    let addr = cuda::with_stream(capturing, || {
        let t = zeros(4096)?;
        t.record_stream(user)?;
        Ok(t.data_ptr())
    })?;
    user.synchronize()?;
    assert_eq!(state(addr)?, BlockState::ActivePendingFree, "freed with a stream use: pending");
    let next = cuda::with_stream(capturing, || zeros(4096))?;
    assert_ne!(next.data_ptr(), addr, "the pending block is not reused during the capture");
    cuda::empty_cache()?; // nothing happens during a capture
    assert_eq!(state(addr)?, BlockState::ActivePendingFree, "its events wait until no capture is underway");
    testing::end_allocate_to_pool(device, pool.id())?;
    testing::release_pool(device, pool.id())?;
    // Now its events are recorded and waited for as usual.
    cuda::empty_cache()?;
    assert_eq!(state(addr)?, BlockState::Inactive, "processed once the capture ended");
    drop(next);
    Ok(())
}

#[test]
fn out_of_memory_during_a_routing_frees_no_segment() -> Result<()> {
    let _s = serial();
    let device = cuda::current_device()?;
    let (_, total) = cuda::mem_get_info(device)?;
    drop(zeros(1000)?); // a cached default segment, which a retry outside a capture would free
    let frees = cuda::memory_stats(device)?.num_device_free();
    let reserved = cuda::memory_reserved(device)?;
    let pool = MemPool::new()?;
    let huge = 2 * total;
    let r = cuda::use_mem_pool(&pool, || Tensor::empty([huge], DType::U8, "cuda"));
    assert!(matches!(r, Err(Error::OutOfMemory { .. })), "{r:?}");
    assert_eq!(cuda::memory_stats(device)?.num_device_free(), frees, "no segment was freed during the routing");
    assert_eq!(cuda::memory_reserved(device)?, reserved);
    // Outside a capture the same request frees the cache before giving up.
    let r = Tensor::empty([huge], DType::U8, "cuda");
    assert!(matches!(r, Err(Error::OutOfMemory { .. })), "{r:?}");
    assert!(cuda::memory_stats(device)?.num_device_free() > frees, "outside a routing the cache is freed");
    // The allocator is usable afterwards, inside the pool too.
    assert_eq!(pool_of(&cuda::use_mem_pool(&pool, || zeros(16))?), Some(pool.id()));
    Ok(())
}

#[test]
fn a_panic_inside_use_mem_pool_ends_the_routing() -> Result<()> {
    let _s = serial();
    let pool = MemPool::new()?;
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cuda::use_mem_pool(&pool, || -> Result<()> {
            let _t = zeros(16)?;
            panic!("inside use_mem_pool");
        })
    }));
    assert!(caught.is_err(), "the panic went through");
    assert_eq!(pool.use_count()?, 1, "the open use was released");
    assert_eq!(pool_of(&zeros(16)?), None, "no routing after the panic");
    let again = cuda::use_mem_pool(&pool, || zeros(16))?;
    assert_eq!(pool_of(&again), Some(pool.id()), "the pool can be used again");
    // An error from the closure ends it too, and comes back.
    let e = cuda::use_mem_pool(&pool, || Tensor::zeros([4], DType::F32, "cuda:99"));
    assert!(e.is_err());
    assert_eq!(pool.use_count()?, 1);
    Ok(())
}
