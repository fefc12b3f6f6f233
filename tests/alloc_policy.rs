//! The caching allocator's policy, observed through its public API on an accounting-only device:
//! pools, rounding, splitting and merging, stream reuse, `max_split_size_mb`, `record_stream`,
//! the out-of-memory path, the memory fraction, garbage collection, expandable segments,
//! `empty_cache`, raw blocks, statistics and history.

// In a module named `alloc` so that `cargo test alloc` selects these tests.
mod alloc {
    use cudasem::alloc::{
        AccountingMemory, AllocatorSettings, BlockState, CachingAllocator, PoolKind, RawMemory, StatPool, TraceAction,
    };
    use cudasem::driver::{DevicePtr, StreamId};
    use cudasem::Error;
    use std::sync::Arc;

    const MIB: usize = 1 << 20;
    const S0: StreamId = StreamId(0);
    const S1: StreamId = StreamId(1);

    fn setup(conf: &str, capacity: usize) -> (Arc<AccountingMemory>, CachingAllocator) {
        let mem = Arc::new(AccountingMemory::new(capacity));
        let a = CachingAllocator::new(0, mem.clone(), AllocatorSettings::parse(conf).unwrap());
        (mem, a)
    }

    #[track_caller]
    fn consistent(a: &CachingAllocator) {
        let (snap, stats) = (a.snapshot(), a.memory_stats());
        let bad = snap.mismatches(&stats);
        assert!(bad.is_empty(), "{bad:#?}");
        assert!(stats.reserved_bytes().current >= stats.allocated_bytes().current);
    }

    fn states(a: &CachingAllocator, seg: usize) -> Vec<(usize, BlockState)> {
        a.snapshot().segments[seg].blocks.iter().map(|b| (b.size, b.state)).collect()
    }

    #[test]
    fn small_requests_split_a_2mib_segment_and_merge_back() {
        let (_, a) = setup("", 1 << 30);
        let p = a.malloc(1000, S0).unwrap();
        let q = a.malloc(1, S0).unwrap();
        assert_eq!(q.0, p.0 + 1024, "blocks are carved in address order");
        let snap = a.snapshot();
        assert_eq!(snap.segments.len(), 1);
        assert_eq!((snap.segments[0].total_size, snap.segments[0].segment_type), (2 * MIB, PoolKind::Small));
        assert_eq!(
            states(&a, 0),
            [
                (1024, BlockState::ActiveAllocated),
                (512, BlockState::ActiveAllocated),
                (2 * MIB - 1536, BlockState::Inactive)
            ]
        );
        assert_eq!(snap.segments[0].requested_size, 1001);
        consistent(&a);
        a.free(p).unwrap();
        consistent(&a);
        assert_eq!(a.memory_stats().get("inactive_split.small_pool.current"), Some(2));
        a.free(q).unwrap();
        assert_eq!(states(&a, 0), [(2 * MIB, BlockState::Inactive)], "free neighbours merge");
        assert_eq!(a.memory_stats().get("inactive_split.all.current"), Some(0));
        consistent(&a);
    }

    #[test]
    fn large_requests_use_20mib_segments_or_their_own() {
        let (_, a) = setup("", 1 << 30);
        let p = a.malloc(3 * MIB, S0).unwrap();
        assert_eq!(a.memory_reserved(), 20 * MIB);
        assert_eq!(states(&a, 0), [(3 * MIB, BlockState::ActiveAllocated), (17 * MIB, BlockState::Inactive)]);
        // A remainder of at most 1 MiB is not split off in the large pool.
        let q = a.malloc(16 * MIB + 512, S0).unwrap();
        assert_eq!(a.block_size(q), Some(17 * MIB));
        let big = a.malloc(10 * MIB + 1, S0).unwrap();
        assert_eq!(a.block_size(big), Some(10 * MIB + 512));
        assert_eq!(a.memory_reserved(), 20 * MIB + 12 * MIB, "its own segment, rounded up to 2 MiB");
        assert_eq!(a.memory_stats().get("segment.large_pool.current"), Some(2));
        for x in [p, q, big] {
            a.free(x).unwrap();
        }
        consistent(&a);
    }

    #[test]
    fn best_fit_prefers_the_smallest_block_that_fits() {
        let (_, a) = setup("", 1 << 30);
        let x = a.malloc(12 * MIB, S0).unwrap();
        let y = a.malloc(14 * MIB, S0).unwrap();
        a.free(y).unwrap();
        a.free(x).unwrap();
        assert_eq!(a.malloc(11 * MIB, S0).unwrap(), x, "12 MiB fits better than 14 MiB");
        assert_eq!(a.malloc(13 * MIB, S0).unwrap(), y);
    }

    #[test]
    fn blocks_are_reused_only_by_their_stream() {
        let (_, a) = setup("", 1 << 30);
        let p = a.malloc(4096, S0).unwrap();
        a.free(p).unwrap();
        let q = a.malloc(4096, S1).unwrap();
        assert_ne!(q, p);
        assert_eq!(a.snapshot().segments.len(), 2, "stream 1 gets a segment of its own");
        assert_eq!(a.malloc(4096, S0).unwrap(), p);
        consistent(&a);
    }

    #[test]
    fn idle_streams_hand_over_wholly_free_segments() {
        let (mem, a) = setup("", 1 << 30);
        let p = a.malloc(12 * MIB, S0).unwrap();
        a.free(p).unwrap();
        let q = a.malloc(12 * MIB, S1).unwrap();
        assert_ne!(q, p, "stream 0 may still be using it");
        a.free(q).unwrap();
        mem.set_events_complete_at_once(true); // every stream is idle now
        let r = StreamId(2);
        let x = a.malloc(11 * MIB, r).unwrap();
        assert!(x == p || x == q, "an idle stream's free segment is adopted");
        assert_eq!(mem.counts().mallocs, 2, "no new segment");
        assert_eq!(a.snapshot().segments.iter().filter(|s| s.stream == r).count(), 1);
        // A segment that is only partly free stays with its stream.
        let y = a.malloc(3 * MIB, S0).unwrap();
        let z = a.malloc(3 * MIB, S1).unwrap();
        let snap = a.snapshot();
        let home =
            |p: DevicePtr| snap.segments.iter().find(|s| (s.address..s.address + s.total_size as u64).contains(&p.0));
        assert_eq!(home(y).map(|s| (s.address, s.stream)), Some((y.0, S0)));
        assert_eq!(home(z).map(|s| s.stream), Some(S1));
        assert_ne!(home(z).map(|s| s.address), Some(y.0));
        consistent(&a);
    }

    #[test]
    fn max_split_size_keeps_oversize_blocks_whole() {
        let (mem, a) = setup("max_split_size_mb:40", 1 << 30);
        assert_eq!(a.memory_stats().get("max_split_size"), Some(40 << 20));
        let big = a.malloc(60 * MIB, S0).unwrap();
        a.free(big).unwrap();
        // A smaller request does not split the 60 MiB block.
        let small = a.malloc(30 * MIB, S0).unwrap();
        assert_ne!(small, big);
        // An oversize request takes it only when it wastes less than 20 MiB.
        let b2 = a.malloc(40 * MIB, S0).unwrap();
        assert_ne!(b2, big);
        let b3 = a.malloc(45 * MIB, S0).unwrap();
        assert_eq!(b3, big);
        assert_eq!(a.block_size(b3), Some(60 * MIB), "not split");
        let stats = a.memory_stats();
        assert_eq!(stats.get("oversize_allocations.current"), Some(2));
        assert_eq!(stats.get("oversize_segments.current"), Some(2));
        for x in [small, b2, b3] {
            a.free(x).unwrap();
        }
        consistent(&a);
        assert_eq!(mem.segments(), 3);
    }

    #[test]
    fn record_stream_defers_reuse_until_the_event_completes() {
        let (mem, a) = setup("", 1 << 30);
        let p = a.malloc(4096, S0).unwrap();
        a.record_stream(p, S1).unwrap();
        a.record_stream(p, S0).unwrap(); // its own stream: nothing to wait for
        a.free(p).unwrap();
        assert_eq!(mem.pending_events(), 1);
        let snap = a.snapshot();
        assert_eq!(snap.blocks_in(BlockState::ActivePendingFree).count(), 1);
        assert_eq!(a.memory_stats().get("active.all.current"), Some(1));
        assert_eq!(a.memory_stats().get("allocation.all.current"), Some(0));
        consistent(&a);
        let q = a.malloc(4096, S0).unwrap();
        assert_ne!(q, p, "still in use on stream 1");
        mem.complete_events();
        let r = a.malloc(4096, S0).unwrap();
        assert_eq!(r, p, "the next malloc saw the event complete and reused the block");
        assert!(matches!(a.record_stream(DevicePtr(1), S1), Err(Error::InvalidPointer { .. })));
        consistent(&a);
    }

    #[test]
    fn empty_cache_waits_for_pending_frees() {
        let (mem, a) = setup("", 1 << 30);
        let p = a.malloc(4096, S0).unwrap();
        a.record_stream(p, S1).unwrap();
        a.free(p).unwrap();
        a.empty_cache().unwrap();
        assert_eq!(a.memory_reserved(), 0, "synchronized, so the block was released");
        assert_eq!(mem.counts().syncs, 1);
        assert_eq!(a.memory_stats().num_sync_all_streams(), 1);
        assert_eq!(mem.pending_events(), 0);
        consistent(&a);
    }

    #[test]
    fn out_of_memory_frees_the_cache_retries_and_stays_usable() {
        let (mem, a) = setup("", 100 * MIB);
        let x = a.malloc(30 * MIB, S0).unwrap();
        let y = a.malloc(30 * MIB, S0).unwrap();
        a.free(x).unwrap();
        // 60 MiB does not fit next to x and y; the cached 30 MiB segment is freed and the retry succeeds.
        let z = a.malloc(60 * MIB, S1).unwrap_or_else(|e| panic!("{e}"));
        let stats = a.memory_stats();
        assert_eq!(stats.num_alloc_retries(), 1);
        assert_eq!(stats.num_ooms(), 0);
        assert_eq!(stats.num_sync_all_streams(), 1);
        // Now nothing can be freed: the typed error, with PyTorch's fields.
        match a.malloc(40 * MIB, S0) {
            Err(Error::OutOfMemory { device, requested, total, free, allocated, reserved_unallocated }) => {
                assert_eq!((device, requested, total, free), (0, 40 * MIB, 100 * MIB, 10 * MIB));
                assert_eq!((allocated, reserved_unallocated), (90 * MIB, 0));
            }
            other => panic!("{other:?}"),
        }
        let e = a.malloc(40 * MIB, S0).unwrap_err().to_string();
        assert!(e.contains("Tried to allocate 40.00 MiB") && e.contains("90.00 MiB is allocated"), "{e}");
        assert_eq!(a.memory_stats().num_ooms(), 2);
        // Still usable.
        let small = a.malloc(1000, S0).unwrap();
        a.free(small).unwrap();
        a.free(y).unwrap();
        a.free(z).unwrap();
        consistent(&a);
        a.empty_cache().unwrap();
        assert_eq!(mem.used(), 0);
    }

    #[test]
    fn out_of_memory_with_max_split_frees_oversize_blocks_first() {
        let (_, a) = setup("max_split_size_mb:25", 100 * MIB);
        let blocks: Vec<_> = (0..3).map(|_| a.malloc(30 * MIB, S0).unwrap()).collect();
        blocks.iter().for_each(|&b| a.free(b).unwrap());
        // 60 MiB: no cached block serves it; two oversize blocks are freed (no full retry needed).
        let p = a.malloc(60 * MIB, S0).unwrap();
        let stats = a.memory_stats();
        assert_eq!(stats.num_alloc_retries(), 0);
        assert_eq!(stats.num_device_free(), 2);
        assert_eq!(a.memory_reserved(), 90 * MIB);
        a.free(p).unwrap();
        consistent(&a);
    }

    #[test]
    fn absurd_sizes_are_out_of_memory() {
        for conf in ["", "expandable_segments:True", "roundup_power2_divisions:4,max_split_size_mb:100"] {
            let (_, a) = setup(conf, 1 << 30);
            for size in [usize::MAX, usize::MAX / 2, (1 << 30) + 1] {
                assert!(matches!(a.malloc(size, S0), Err(Error::OutOfMemory { .. })), "{conf}: {size}");
            }
            let p = a.malloc(100, S0).unwrap();
            a.free(p).unwrap();
            consistent(&a);
        }
    }

    #[test]
    fn driver_errors_other_than_oom_pass_through() {
        let (mem, a) = setup("", 1 << 30);
        mem.inject_failure(Error::Injected { device: 0, op: "malloc" });
        assert!(matches!(a.malloc(100, S0), Err(Error::Injected { .. })));
        assert_eq!(a.memory_stats().num_ooms(), 0);
        let p = a.malloc(100, S0).unwrap();
        a.free(p).unwrap();
        consistent(&a);
    }

    #[test]
    fn memory_fraction_refuses_segments_past_it() {
        let (mem, a) = setup("", 100 * MIB);
        assert_eq!(a.memory_fraction(), 1.0);
        for bad in [-0.1, 1.5, f64::NAN] {
            assert!(matches!(a.set_memory_fraction(bad), Err(Error::InvalidArgument { .. })));
        }
        a.set_memory_fraction(0.5).unwrap();
        assert_eq!(a.memory_fraction(), 0.5);
        let p = a.malloc(40 * MIB, S0).unwrap();
        let err = a.malloc(12 * MIB, S0).unwrap_err();
        assert!(matches!(err, Error::OutOfMemory { requested, .. } if requested == 12 * MIB), "{err}");
        assert_eq!(mem.used(), 40 * MIB, "the device had room: refused by the fraction alone");
        assert_eq!(mem.counts().mallocs, 1);
        a.free(p).unwrap();
        consistent(&a);
    }

    #[test]
    fn garbage_collection_frees_old_cached_segments() {
        let (_, a) = setup("garbage_collection_threshold:0.5", 100 * MIB);
        a.set_memory_fraction(1.0).unwrap(); // GC acts only with a fraction: threshold 50 MiB
        let p = a.malloc(8 * MIB, S1).unwrap();
        a.free(p).unwrap();
        let old = a.malloc(20 * MIB, S0).unwrap();
        let young = a.malloc(14 * MIB, S0).unwrap();
        a.free(old).unwrap();
        for _ in 0..10 {
            let p = a.malloc(8 * MIB, S1).unwrap(); // cache lookups age the cached blocks
            a.free(p).unwrap();
        }
        a.free(young).unwrap();
        assert_eq!(a.memory_reserved(), 54 * MIB);
        assert_eq!(a.memory_stats().num_device_free(), 0);
        // A miss above the threshold collects the blocks older than average first.
        let p = a.malloc(40 * MIB, S0).unwrap();
        assert_eq!(a.memory_stats().num_device_free(), 1, "only the oldest segment was freed");
        assert_eq!(a.memory_reserved(), 34 * MIB + 40 * MIB);
        a.free(p).unwrap();
        consistent(&a);
    }

    #[test]
    fn expandable_segments_grow_in_place_and_unmap_on_empty_cache() {
        let (mem, a) = setup("expandable_segments:True", 1 << 30);
        let p = a.malloc(30 * MIB, S0).unwrap();
        let q = a.malloc(30 * MIB, S0).unwrap();
        assert_eq!(q.0, p.0 + 30 * MIB as u64, "the segment grew instead of a new one being made");
        assert_eq!(a.memory_reserved(), 60 * MIB, "two growths of 30 MiB: six 4 MiB pages and a 6 MiB one each");
        assert_eq!(mem.reservations(), 1);
        let snap = a.snapshot();
        assert_eq!(snap.segments.len(), 1);
        assert!(snap.segments[0].is_expandable);
        consistent(&a);
        let s = a.malloc(100, S0).unwrap();
        assert_eq!(a.memory_stats().get("reserved_bytes.small_pool.current"), Some(2 * MIB as i64));
        a.free(p).unwrap();
        consistent(&a);
        a.empty_cache().unwrap();
        assert_eq!(a.memory_reserved(), 2 * MIB + 30 * MIB, "the freed block's pages, all whole, were unmapped");
        consistent(&a);
        a.free(q).unwrap();
        a.free(s).unwrap();
        a.empty_cache().unwrap();
        assert_eq!((a.memory_reserved(), mem.used(), mem.reservations()), (0, 0, 0));
        let h = a.memory_stats();
        assert_eq!(h.num_device_alloc(), h.num_device_free());
        consistent(&a);
    }

    #[test]
    fn expandable_segments_move_free_pages_where_a_segment_grows() {
        let (mem, a) = setup("expandable_segments:True", 100 * MIB);
        let keep = a.malloc(10 * MIB, S1).unwrap();
        let p = a.malloc(50 * MIB, S1).unwrap();
        a.free(p).unwrap();
        assert_eq!(a.memory_reserved(), 60 * MIB);
        // Stream 0 has its own segment; growing it past the 60 MiB ever held takes stream 1's
        // whole free pages (the 50 MiB block's own) instead: one wait, one unmap call.
        let (syncs, unmaps) = (mem.counts().syncs, mem.counts().unmaps);
        let q = a.malloc(60 * MIB, S0).unwrap();
        assert_eq!(a.memory_stats().num_alloc_retries(), 0, "no out-of-memory retry");
        let moved = a.page_moves();
        assert_eq!((moved.events, moved.unmaps, moved.bytes), (1, 1, 50 * MIB));
        assert_eq!((mem.counts().syncs - syncs, mem.counts().unmaps - unmaps), (1, 1));
        assert_eq!(a.memory_reserved(), 10 * MIB + 60 * MIB, "the device holds the live bytes");
        consistent(&a);
        // At the high-water mark, growing takes free pages again (here stream 0's).
        a.free(q).unwrap();
        let r = a.malloc(40 * MIB, S1).unwrap();
        assert_eq!(a.page_moves().events, 2);
        assert_eq!(a.memory_reserved(), 70 * MIB);
        a.free(r).unwrap();
        // Below it (the cache emptied), growing moves nothing.
        a.empty_cache().unwrap();
        assert_eq!(a.memory_reserved(), 10 * MIB);
        let moved = a.page_moves();
        let r = a.malloc(40 * MIB, S1).unwrap();
        assert_eq!(a.page_moves(), moved);
        assert_eq!(a.memory_reserved(), 50 * MIB);
        a.free(r).unwrap();
        a.free(keep).unwrap();
        consistent(&a);
        a.empty_cache().unwrap();
        assert_eq!((a.memory_reserved(), mem.used()), (0, 0));
    }

    #[test]
    fn expandable_segments_fall_back_without_virtual_memory() {
        let mem = Arc::new(AccountingMemory::with_options(0, 1 << 30, None));
        let a = CachingAllocator::new(0, mem.clone(), AllocatorSettings::parse("expandable_segments:True").unwrap());
        let p = a.malloc(3 * MIB, S0).unwrap();
        assert_eq!(mem.segments(), 1);
        assert!(!a.snapshot().segments[0].is_expandable);
        a.free(p).unwrap();
    }

    #[test]
    fn raw_alloc_and_delete() {
        let (_, a) = setup("", 1 << 30);
        assert_eq!(a.raw_alloc(0, S0).unwrap(), DevicePtr(0), "size 0 is the null pointer");
        a.raw_delete(DevicePtr(0)).unwrap();
        let p = a.raw_alloc(100, S0).unwrap();
        assert_eq!(a.block_size(p), Some(512));
        a.raw_delete(p).unwrap();
        assert!(matches!(a.raw_delete(p), Err(Error::InvalidPointer { .. })), "double free");
        assert!(matches!(a.free(DevicePtr(p.0 + 512)), Err(Error::InvalidPointer { .. })));
        consistent(&a);
    }

    #[test]
    fn stats_peaks_resets_and_summary() {
        let (_, a) = setup("", 1 << 30);
        let p = a.malloc(5 * MIB, S0).unwrap();
        let q = a.malloc(100, S0).unwrap();
        a.free(p).unwrap();
        let s = a.memory_stats();
        assert_eq!(s.get("allocated_bytes.all.peak"), Some((5 * MIB + 512) as i64));
        assert_eq!(s.get("allocated_bytes.large_pool.freed"), Some((5 * MIB) as i64));
        assert_eq!(s.get("requested_bytes.all.current"), Some(100));
        assert_eq!(s.stat("segment", StatPool::LargePool).unwrap().current, 1);
        assert_eq!(s.get("num_device_alloc"), Some(2));
        assert_eq!(a.max_memory_allocated(), 5 * MIB + 512);
        a.reset_peak_stats();
        assert_eq!(a.max_memory_allocated(), 512);
        assert_eq!(a.max_memory_reserved(), 22 * MIB);
        a.reset_accumulated_stats();
        assert_eq!(a.memory_stats().get("allocated_bytes.all.allocated"), Some(0));
        assert_eq!(a.memory_stats().num_device_alloc(), 0);
        let t = a.memory_summary();
        assert!(t.contains("| GPU reserved memory   |") && t.contains("Non-releasable allocs"), "{t}");
        a.free(q).unwrap();
    }

    #[test]
    fn history_records_the_events_in_a_bounded_ring() {
        let (_, a) = setup("", 24 * MIB);
        a.record_history(true, 100);
        assert!(a.is_recording_history());
        let p = a.malloc(1000, S0).unwrap();
        a.free(p).unwrap();
        let _ = a.malloc(30 * MIB, S0).unwrap_err();
        let actions: Vec<TraceAction> = a.snapshot().device_traces[0].iter().map(|e| e.action).collect();
        use TraceAction::*;
        assert_eq!(actions, [SegmentAlloc, Alloc, FreeRequested, FreeCompleted, SegmentFree, Oom]);
        let trace = &a.snapshot().device_traces[0];
        assert_eq!((trace[1].addr, trace[1].size, trace[1].stream), (p.0, 1000, S0), "the size asked for");
        assert_eq!(trace[5].size, 30 * MIB);
        a.record_history(true, 2);
        assert_eq!(a.snapshot().device_traces[0].len(), 2);
        a.record_history(false, 0);
        assert!(a.snapshot().device_traces[0].is_empty());
    }

    #[test]
    fn the_allocator_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<CachingAllocator>();
        check::<AccountingMemory>();
        let mem: Arc<dyn RawMemory> = Arc::new(AccountingMemory::new(1 << 20));
        assert_eq!(mem.mem_info().unwrap(), (1 << 20, 1 << 20));
    }
}
