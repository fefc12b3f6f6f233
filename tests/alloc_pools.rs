//! Private pools of the caching allocator, on an `AccountingMemory` (no device): the routing of a
//! capture, the books of pools (use counts, freeable pools, deletion), and what a capture must
//! not do (free to the driver, record or query events, wait), checked on specific cases and on
//! random programs against a model.

// In a module named `alloc` so that `cargo test alloc` selects these tests.
mod alloc {
    use cudasem::alloc::{
        AccountingMemory, AllocatorSettings, BlockState, CachingAllocator, MemPoolId, MemoryCounts, StreamFilter,
        TraceAction,
    };
    use cudasem::driver::{DevicePtr, StreamId};
    use cudasem::Error;
    use rand::{RngExt, SeedableRng};
    use std::collections::BTreeMap;
    use std::sync::Arc;

    const MIB: usize = 1 << 20;
    const S1: StreamId = StreamId(1);
    const S2: StreamId = StreamId(2);

    fn allocator(conf: &str, capacity: usize) -> (Arc<AccountingMemory>, CachingAllocator) {
        let mem = Arc::new(AccountingMemory::new(capacity));
        let a = CachingAllocator::new(0, mem.clone(), AllocatorSettings::parse(conf).expect("settings"));
        (mem, a)
    }

    fn only(stream: StreamId) -> StreamFilter {
        Arc::new(move |s| s == stream)
    }

    fn is_pool_error<T: std::fmt::Debug>(r: Result<T, Error>) -> bool {
        matches!(r, Err(Error::MemPool { .. }))
    }

    #[test]
    fn a_capture_routes_its_stream_to_the_pool_and_the_pools_never_mix() {
        let (_, a) = allocator("", 1 << 30);
        a.record_history(true, 1000);
        let p = MemPoolId(1, 0);
        let default_freed = a.malloc(4096, S1).unwrap();
        a.free(default_freed).unwrap();
        a.begin_allocate_to_pool(p, only(S1)).unwrap();
        let x = a.malloc(4096, S1).unwrap();
        let y = a.malloc(4096, S2).unwrap();
        assert_ne!(x, default_freed, "the pool took a default block");
        assert_eq!(a.block_pool(x), Some(p));
        assert_eq!(a.block_pool(y), None, "the other stream is not routed");
        a.free(x).unwrap();
        assert_eq!(a.malloc(4096, S1).unwrap(), x, "a block freed in the capture serves it again");
        a.end_allocate_to_pool(p).unwrap();
        let z = a.malloc(4096, S1).unwrap();
        assert_eq!(a.block_pool(z), None);
        assert_eq!(z, default_freed, "the default pools keep their own blocks");
        let snap = a.snapshot();
        assert!(snap.mismatches(&a.memory_stats()).is_empty());
        let ids: Vec<MemPoolId> = snap.segments.iter().map(|s| s.segment_pool_id).collect();
        assert_eq!(ids.iter().filter(|&&i| i == p).count(), 1, "one small segment in the pool: {ids:?}");
        assert_eq!(a.pool_snapshot(p).segments.len(), 1);
        assert_eq!(a.pool_snapshot(p).segments[0].segment_pool_id, p);
        // The history records the pool's segment and blocks as usual.
        let seg = a.pool_snapshot(p).segments[0].address;
        let at = |addr: u64| -> Vec<TraceAction> {
            let h = &snap.device_traces[0];
            h.iter().filter(|e| e.addr == addr).map(|e| e.action).collect()
        };
        use TraceAction::*;
        assert_eq!(at(seg)[..2], [SegmentAlloc, Alloc], "the pool's segment, then its first block");
        assert_eq!(at(x.0).iter().filter(|&&t| t == FreeCompleted).count(), 1, "{:?}", at(x.0));
    }

    #[test]
    fn the_most_recent_routing_whose_filter_passes_wins() {
        let (_, a) = allocator("", 1 << 30);
        let (p, q) = (MemPoolId(0, 1), MemPoolId(0, 2));
        a.begin_allocate_to_pool(p, Arc::new(|_| true)).unwrap();
        a.begin_allocate_to_pool(q, only(S1)).unwrap();
        assert_eq!(a.block_pool(a.malloc(100, S1).unwrap()), Some(q));
        assert_eq!(a.block_pool(a.malloc(100, S2).unwrap()), Some(p), "q's filter refuses S2");
        a.end_allocate_to_pool(q).unwrap();
        assert_eq!(a.block_pool(a.malloc(100, S1).unwrap()), Some(p));
        a.end_allocate_to_pool(p).unwrap();
        assert!(is_pool_error(a.end_allocate_to_pool(p)), "ending twice");
    }

    #[test]
    fn use_counts_freeable_pools_and_deletion_follow_pytorch() {
        let (mem, a) = allocator("", 1 << 30);
        let p = MemPoolId(0, 7);
        assert!(is_pool_error(a.create_pool(MemPoolId::DEFAULT)), "(0, 0) is the default pools");
        assert!(is_pool_error(a.pool_use_count(p)), "unknown pool");
        assert!(is_pool_error(a.release_pool(p)), "releasing an unknown pool");
        let m = a.release_pool(p).unwrap_err().to_string();
        assert!(m.contains("release_pool") && m.contains("(0, 7)") && m.contains("cuda:0"), "{m}");
        a.create_pool(p).unwrap();
        assert_eq!(a.pool_use_count(p).unwrap(), 1);
        a.begin_allocate_to_pool(p, only(S1)).unwrap();
        assert_eq!(a.pool_use_count(p).unwrap(), 2, "a capture sharing it");
        assert!(is_pool_error(a.begin_allocate_to_pool(p, only(S2))), "routing to one pool twice");
        assert_eq!(a.pool_use_count(p).unwrap(), 2);
        let small = a.malloc(1000, S1).unwrap();
        let large = a.malloc(5 * MIB, S1).unwrap();
        a.end_allocate_to_pool(p).unwrap();
        assert_eq!(a.pool_use_count(p).unwrap(), 2, "ending keeps the use");
        assert_eq!(a.release_pool(p).unwrap(), 1);
        a.free(small).unwrap();
        a.empty_cache().unwrap();
        assert_eq!(a.pool_snapshot(p).segments.len(), 2, "a pool in use keeps even its free segments");
        assert_eq!(a.release_pool(p).unwrap(), 0);
        assert!(is_pool_error(a.release_pool(p)), "released past 0");
        assert!(is_pool_error(a.create_pool(p)), "a freeable pool takes no new user");
        let reserved = a.memory_reserved();
        a.empty_cache().unwrap();
        assert_eq!(a.memory_reserved(), reserved - 2 * MIB, "the freeable pool's free segment went back");
        assert_eq!(a.pool_use_count(p).unwrap(), 0, "not deleted while a block is allocated");
        a.free(large).unwrap();
        a.empty_cache().unwrap();
        assert!(is_pool_error(a.pool_use_count(p)), "deleted once its last segment went back");
        assert_eq!(mem.segments(), 0);
        a.create_pool(p).unwrap();
        assert_eq!(a.pool_use_count(p).unwrap(), 1, "the id can be used again after deletion");
        assert_eq!(a.release_pool(p).unwrap(), 0);
        a.empty_pool_cache(p).unwrap();
        assert!(is_pool_error(a.pool_use_count(p)), "an empty freeable pool is deleted by its empty_cache");
    }

    #[test]
    fn a_capture_defers_frees_with_stream_uses_and_never_frees_queries_or_waits() {
        let (mem, a) = allocator("", 1 << 30);
        let p = MemPoolId(3, 0);
        let cached = a.malloc(30 * MIB, S1).unwrap();
        a.free(cached).unwrap();
        let outside = a.malloc(4096, S2).unwrap();
        a.record_stream(outside, S1).unwrap();
        let before = mem.counts();
        a.begin_allocate_to_pool(p, only(S1)).unwrap();
        let x = a.malloc(4096, S1).unwrap();
        a.record_stream(x, S2).unwrap();
        a.free(x).unwrap();
        a.free(outside).unwrap();
        let state = |ptr: DevicePtr| {
            let s = a.snapshot();
            s.segments.iter().flat_map(|s| s.blocks.clone()).find(|b| b.address == ptr.0).map(|b| b.state)
        };
        assert_eq!(state(x), Some(BlockState::ActivePendingFree));
        assert_ne!(a.malloc(4096, S1).unwrap(), x, "the pending block waits");
        a.empty_cache().unwrap();
        // Out of memory: the cached 30 MiB segment is not freed for it.
        mem.set_capacity(mem.used() + 10 * MIB);
        assert!(matches!(a.malloc(20 * MIB, S1), Err(Error::OutOfMemory { .. })));
        assert!(matches!(a.malloc(20 * MIB, S2), Err(Error::OutOfMemory { .. })), "nor for a default request");
        let during = mem.counts();
        assert_eq!(during.frees, before.frees, "nothing freed to the driver during the capture");
        assert_eq!(during.events, before.events, "no event recorded during the capture");
        assert_eq!(during.syncs, before.syncs, "no wait during the capture");
        assert_eq!(state(x), Some(BlockState::ActivePendingFree));
        a.end_allocate_to_pool(p).unwrap();
        // The next malloc records their events; once they complete, the blocks are free again.
        let y = a.malloc(512, S2).unwrap();
        assert_eq!(mem.counts().events, before.events + 2, "both deferred frees recorded their event");
        mem.complete_events();
        a.free(y).unwrap();
        let _ = a.malloc(512, S2).unwrap();
        assert_eq!(state(x), Some(BlockState::Inactive), "processed after the capture");
        assert!(a.malloc(20 * MIB, S2).is_ok(), "outside the capture the cache is freed for it");
        assert!(mem.counts().frees > before.frees);
    }

    #[test]
    fn pools_use_ordinary_segments_even_with_expandable_segments() {
        let (mem, a) = allocator("expandable_segments:True", 1 << 30);
        let p = MemPoolId(0, 1);
        a.begin_allocate_to_pool(p, only(S1)).unwrap();
        let x = a.malloc(3 * MIB, S1).unwrap();
        let y = a.malloc(3 * MIB, S2).unwrap();
        a.end_allocate_to_pool(p).unwrap();
        let snap = a.snapshot();
        let seg = |ptr: DevicePtr| {
            snap.segments.iter().find(|s| ptr.0 >= s.address && ptr.0 < s.address + s.total_size as u64).unwrap()
        };
        assert!(!seg(x).is_expandable && seg(x).total_size == 20 * MIB, "PyTorch's 20 MiB segment");
        assert!(seg(y).is_expandable, "the default pools still expand");
        assert_eq!(mem.counts().mallocs, 1);
        assert!(snap.mismatches(&a.memory_stats()).is_empty());
    }

    /// What the model holds: each live block and the pool it must come from.
    struct Model {
        held: BTreeMap<u64, (StreamId, Option<MemPoolId>)>,
        /// Pools and their use counts (0: freeable, kept until deleted).
        pools: BTreeMap<MemPoolId, usize>,
        capture: Option<MemPoolId>,
        next_pool: u64,
    }

    /// After a step of a random program: nothing freed to the driver, recorded or waited on during
    /// a capture (against the counts at its start); every live pool's use count the model's; with
    /// `snapshot`, the snapshot agrees with the statistics and each allocated block sits in a
    /// segment of the pool the model says.
    fn check_books(
        mem: &AccountingMemory,
        a: &CachingAllocator,
        m: &Model,
        capture_counts: Option<MemoryCounts>,
        snapshot: bool,
        what: &str,
    ) {
        if let Some(c) = capture_counts {
            let now = mem.counts();
            assert_eq!(
                (now.frees, now.unmaps, now.events, now.syncs),
                (c.frees, c.unmaps, c.events, c.syncs),
                "{what}: during a capture"
            );
        }
        for (&p, &n) in &m.pools {
            if n > 0 {
                assert_eq!(a.pool_use_count(p).unwrap(), n, "{what}: use count of {p:?}");
            }
        }
        if snapshot {
            let snap = a.snapshot();
            assert!(snap.mismatches(&a.memory_stats()).is_empty(), "{what}: {:?}", snap.mismatches(&a.memory_stats()));
            for s in &snap.segments {
                for b in s.blocks.iter().filter(|b| b.state == BlockState::ActiveAllocated) {
                    let (_, pool) = m.held[&b.address];
                    assert_eq!(s.segment_pool_id, pool.unwrap_or_default(), "{what}: block {:#x}", b.address);
                }
            }
        }
    }

    /// The end of a random program: the capture ended, every block freed and every pool released;
    /// then `empty_cache` returns every byte and deletes every pool.
    fn tear_down(mem: &AccountingMemory, a: &CachingAllocator, mut m: Model, seed: u64) {
        if let Some(p) = m.capture.take() {
            a.end_allocate_to_pool(p).unwrap();
        }
        for &k in m.held.keys() {
            a.free(DevicePtr(k)).unwrap();
        }
        for (&p, &n) in &m.pools {
            for _ in 0..n {
                a.release_pool(p).unwrap();
            }
        }
        a.empty_cache().unwrap();
        assert_eq!(a.memory_reserved(), 0, "seed {seed}: every byte went back");
        assert_eq!((mem.used(), mem.segments()), (0, 0), "seed {seed}");
        for &p in m.pools.keys() {
            assert!(is_pool_error(a.pool_use_count(p)), "seed {seed}: {p:?} deleted");
        }
    }

    /// Random programs: captures of S1 begin and end (on a new pool or one shared with an earlier
    /// capture), pools are released, blocks are allocated on S1 and S2, freed, used on the other
    /// stream, events complete, the cache is emptied. After every step: each new block comes from
    /// the pool the model says; the snapshot's blocks sit in segments of their own pool and agree
    /// with the statistics; use counts are the model's; during a capture nothing is freed to the
    /// driver, no event is recorded, nothing waits. At the end everything is freed and released,
    /// and `empty_cache` returns every byte and deletes every pool.
    #[test]
    fn random_programs_keep_pools_apart_and_their_books_right() {
        let (mut routed, mut sharing, mut deferred) = (0, 0, 0);
        for seed in 0..24u64 {
            let capacity = 128 * MIB;
            let (mem, a) = allocator(if seed % 3 == 2 { "expandable_segments:True" } else { "" }, capacity);
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut m = Model { held: BTreeMap::new(), pools: BTreeMap::new(), capture: None, next_pool: 1 };
            let mut capture_counts = None;
            for step in 0..600 {
                let what = format!("seed {seed} step {step}");
                let r: u32 = rng.random_range(0..100);
                match r {
                    0..=4 if m.capture.is_none() => {
                        let shared: Vec<MemPoolId> = m.pools.iter().filter(|(_, &n)| n > 0).map(|(&p, _)| p).collect();
                        let p = if !shared.is_empty() && rng.random_bool(0.5) {
                            sharing += 1;
                            shared[rng.random_range(0..shared.len())]
                        } else {
                            m.next_pool += 1;
                            MemPoolId(m.next_pool, 0)
                        };
                        a.begin_allocate_to_pool(p, only(S1)).unwrap();
                        *m.pools.entry(p).or_insert(0) += 1;
                        m.capture = Some(p);
                        capture_counts = Some(mem.counts());
                    }
                    5..=8 if m.capture.is_some() => {
                        a.end_allocate_to_pool(m.capture.take().unwrap()).unwrap();
                        capture_counts = None;
                    }
                    9..=11 => {
                        let live: Vec<MemPoolId> = m.pools.iter().filter(|(_, &n)| n > 0).map(|(&p, _)| p).collect();
                        if let Some(&p) = live.get(rng.random_range(0..live.len().max(1))) {
                            let n = m.pools.get_mut(&p).unwrap();
                            if m.capture != Some(p) || *n > 1 {
                                *n -= 1;
                                assert_eq!(a.release_pool(p).unwrap(), *n, "{what}: release");
                            }
                        }
                    }
                    12..=54 => {
                        let stream = if rng.random_bool(0.5) { S1 } else { S2 };
                        let size = match rng.random_range(0..10) {
                            0..=6 => rng.random_range(1..=64 << 10),
                            7..=8 => rng.random_range(1..=MIB),
                            _ => rng.random_range(MIB..12 * MIB),
                        };
                        if let Ok(p) = a.malloc(size, stream) {
                            let expect = if stream == S1 { m.capture } else { None };
                            assert_eq!(a.block_pool(p), expect, "{what}: the block's pool");
                            routed += expect.is_some() as usize;
                            m.held.insert(p.0, (stream, expect));
                        }
                    }
                    55..=84 if !m.held.is_empty() => {
                        let k = *m.held.keys().nth(rng.random_range(0..m.held.len())).unwrap();
                        m.held.remove(&k);
                        a.free(DevicePtr(k)).unwrap();
                        let pending = a.snapshot().blocks_in(BlockState::ActivePendingFree).any(|b| b.address == k);
                        deferred += (m.capture.is_some() && pending) as usize;
                    }
                    85..=90 if !m.held.is_empty() => {
                        let (&k, &(s, _)) = m.held.iter().nth(rng.random_range(0..m.held.len())).unwrap();
                        a.record_stream(DevicePtr(k), if s == S1 { S2 } else { S1 }).unwrap();
                    }
                    91..=94 => mem.complete_events(),
                    95..=99 => a.empty_cache().unwrap(),
                    _ => {}
                }
                check_books(&mem, &a, &m, capture_counts, step % 16 == 0, &what);
            }
            tear_down(&mem, &a, m, seed);
        }
        // The programs did what they are for.
        assert!(
            routed > 500 && sharing > 20 && deferred > 20,
            "routed {routed}, shared {sharing}, deferred {deferred}"
        );
    }
}
