//! Eight threads allocating concurrently on different streams of one allocator (it is `Sync`):
//! no two live blocks ever overlap, every stream's blocks stay on that stream, and the totals
//! add up at the end.

// In a module named `alloc` so that `cargo test alloc` selects these tests.
mod alloc {
    use cudasem::alloc::{AccountingMemory, AllocatorSettings, CachingAllocator};
    use cudasem::driver::{DevicePtr, StreamId};
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    fn hammer(conf: &str) {
        let mem = Arc::new(AccountingMemory::new(8 << 30));
        let a = Arc::new(CachingAllocator::new(0, mem.clone(), AllocatorSettings::parse(conf).unwrap()));
        let live: Arc<Mutex<BTreeMap<u64, (u64, usize)>>> = Arc::default();
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let (a, live) = (a.clone(), live.clone());
                std::thread::spawn(move || {
                    let stream = StreamId(100 + t);
                    let mut mine: Vec<DevicePtr> = Vec::new();
                    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (t + 1);
                    for _ in 0..4000 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        if mine.len() < 32 && (!x.is_multiple_of(3) || mine.is_empty()) {
                            let size = match x % 10 {
                                0 => 1 + (x >> 8) as usize % (24 << 20),
                                1..=3 => 1 + (x >> 8) as usize % (2 << 20),
                                _ => 1 + (x >> 8) as usize % 4096,
                            };
                            let p = a.malloc(size, stream).unwrap();
                            let len = a.block_size(p).unwrap();
                            let mut l = live.lock().unwrap();
                            if let Some((&q, &(_, n))) = l.range(..p.0 + len as u64).next_back() {
                                assert!(q + n as u64 <= p.0, "thread {t}: {:#x} overlaps {q:#x}", p.0);
                            }
                            l.insert(p.0, (t, len));
                            drop(l);
                            mine.push(p);
                        } else {
                            let p = mine.swap_remove((x >> 5) as usize % mine.len());
                            assert_eq!(live.lock().unwrap().remove(&p.0).map(|v| v.0), Some(t));
                            a.free(p).unwrap();
                        }
                    }
                    for p in mine {
                        live.lock().unwrap().remove(&p.0);
                        a.free(p).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let (snap, stats) = (a.snapshot(), a.memory_stats());
        assert!(snap.mismatches(&stats).is_empty(), "{:?}", snap.mismatches(&stats));
        assert_eq!(stats.allocated_bytes().current, 0);
        assert!(snap.segments.iter().all(|s| (100..108).contains(&s.stream.0)));
        assert_eq!(mem.used(), a.memory_reserved());
        a.empty_cache().unwrap();
        assert_eq!(mem.used(), 0);
    }

    #[test]
    fn eight_threads_on_eight_streams() {
        hammer("");
    }

    #[test]
    fn eight_threads_with_expandable_segments() {
        hammer("expandable_segments:True");
    }
}
