//! Host-time benchmark of the caching allocator (no device: an `AccountingMemory`).
//!
//! Run it optimized: `cargo test --release --test alloc_bench -- --ignored --nocapture`.
//! It prints a table and asserts nothing about time.

// In a module named `alloc` so that `cargo test alloc` selects these tests.
mod alloc {
    use cudasem::alloc::{AccountingMemory, AllocatorSettings, CachingAllocator};
    use cudasem::driver::StreamId;
    use std::hint::black_box;
    use std::sync::Arc;
    use std::time::Instant;

    fn allocator(conf: &str) -> CachingAllocator {
        let settings = AllocatorSettings::parse(conf).unwrap();
        CachingAllocator::new(0, Arc::new(AccountingMemory::new(64 << 30)), settings)
    }

    /// Ns of one cached `malloc(size)` + `free` pair, with `held` other blocks live around it.
    fn pair_ns(conf: &str, size: usize, held: usize) -> f64 {
        let a = allocator(conf);
        let s = StreamId(0);
        let keep: Vec<_> = (0..held).map(|i| a.malloc(size + (i % 7) * 512, s).unwrap()).collect();
        let warm = a.malloc(size, s).unwrap();
        a.free(warm).unwrap();
        // The best of five runs of 200k pairs (other processes only ever add time).
        let n = 200_000;
        let ns = (0..5)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..n {
                    let p = a.malloc(black_box(size), s).unwrap();
                    a.free(black_box(p)).unwrap();
                }
                t.elapsed().as_nanos() as f64 / n as f64
            })
            .fold(f64::INFINITY, f64::min);
        keep.into_iter().for_each(|p| a.free(p).unwrap());
        ns
    }

    #[test]
    #[ignore = "benchmark: run with --release -- --ignored --nocapture"]
    fn alloc_free_pair() {
        println!("{:<28} {:>12} {:>8} {:>14}", "settings", "size", "held", "ns/alloc+free");
        for conf in ["", "expandable_segments:True", "max_split_size_mb:64,roundup_power2_divisions:4"] {
            for (size, held) in [(512, 0), (4096, 1000), (1 << 20, 100), (8 << 20, 100), (64 << 20, 10)] {
                let ns = pair_ns(conf, size, held);
                let name = if conf.is_empty() { "default" } else { conf };
                println!("{:<28} {:>12} {:>8} {:>14.1}", &name[..name.len().min(28)], size, held, ns);
            }
        }
    }
}
