//! Host time of a cached alloc + free pair of the caching allocator (criterion; `cudasem bench`
//! puts the 1 MiB pair beside PyTorch's C++ `raw_alloc` + `raw_delete`, from
//! `bench/pytorch_bench.py`).
//!
//! Group `alloc_pair`, for 512 B, 1 MiB and 64 MiB:
//! * `api/SIZE`: `cuda::caching_allocator_alloc(size, None, None)` + `cuda::caching_allocator_delete`
//!   through the public API, on the current device and stream (what PyTorch's `raw_alloc(size)` does);
//! * `api_stream/SIZE`: the same with the stream passed explicitly;
//! * `policy/SIZE`: the bare `cudasem::alloc::CachingAllocator` over `AccountingMemory` (the policy
//!   alone, no runtime, no driver);
//! * `first_alloc/SIZE`: an allocation that has to ask the driver for a segment (each after an
//!   untimed `empty_cache`).
//!
//! The process's very first allocation, which also makes the allocator, happens once: it is timed
//! before the group and printed. After the group, a check that no timed pair reached the driver.
//! Runs on the sim driver and with `CUDASEM_DRIVER=cuda`: `cargo bench --bench alloc_pair` (on a
//! GPU machine: the gathered `test-bench-alloc_pair --bench`).

use criterion::{BenchmarkId, Criterion};
use cudasem::alloc::{AccountingMemory, CachingAllocator};
use cudasem::cuda::{self, Stream};
use cudasem::driver::StreamId;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SIZES: [usize; 3] = [512, 1 << 20, 64 << 20];

fn size_name(size: usize) -> String {
    match size {
        s if s >= 1 << 20 => format!("{}MiB", s >> 20),
        s if s >= 1 << 10 => format!("{}KiB", s >> 10),
        s => format!("{s}B"),
    }
}

fn driver_allocs(d: usize) -> u64 {
    cuda::memory_stats(Some(d)).expect("memory stats").num_device_alloc() as u64
}

fn pairs(c: &mut Criterion) {
    let d = 0;
    let settings = cuda::allocator_settings().expect("allocator settings");
    let stream = Stream::new(Some(d), 0).expect("a stream");
    let mut group = c.benchmark_group("alloc_pair");
    for size in SIZES {
        let name = size_name(size);
        group.bench_function(BenchmarkId::new("first_alloc", &name), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    cuda::empty_cache().expect("empty_cache");
                    let n0 = driver_allocs(d);
                    let t = Instant::now();
                    let p = cuda::caching_allocator_alloc(black_box(size), Some(d), None).expect("alloc");
                    total += t.elapsed();
                    assert!(driver_allocs(d) > n0, "the allocation asked the driver");
                    cuda::caching_allocator_delete(p).expect("delete");
                }
                total
            })
        });
        // A block cached on each stream timed below, then no pair may reach the driver. Twice: an
        // idle stream's wholly free segment may be adopted by the other stream the first time.
        for _ in 0..2 {
            for s in [None, Some(&stream)] {
                cuda::caching_allocator_delete(cuda::caching_allocator_alloc(size, Some(d), s).expect("alloc"))
                    .expect("delete");
            }
        }
        let n0 = driver_allocs(d);
        group.bench_function(BenchmarkId::new("api", &name), |b| {
            b.iter(|| {
                let p = cuda::caching_allocator_alloc(black_box(size), None, None).expect("alloc");
                cuda::caching_allocator_delete(black_box(p)).expect("delete");
            })
        });
        group.bench_function(BenchmarkId::new("api_stream", &name), |b| {
            b.iter(|| {
                let p = cuda::caching_allocator_alloc(black_box(size), Some(d), Some(&stream)).expect("alloc");
                cuda::caching_allocator_delete(black_box(p)).expect("delete");
            })
        });
        assert_eq!(driver_allocs(d), n0, "every timed pair was served from the cache");

        let policy = CachingAllocator::new(d, Arc::new(AccountingMemory::new(64 << 30)), settings.clone());
        let s = StreamId(stream.id());
        policy.free(policy.malloc(size, s).expect("malloc")).expect("free");
        group.bench_function(BenchmarkId::new("policy", &name), |b| {
            b.iter(|| {
                let p = policy.malloc(black_box(size), s).expect("malloc");
                policy.free(black_box(p)).expect("free");
            })
        });
    }
    group.finish();
    cuda::empty_cache().expect("empty_cache");
}

fn main() {
    let d = 0;
    // The process's first allocation also makes the device's allocator: a one-time event.
    let t = Instant::now();
    let p = cuda::caching_allocator_alloc(512, Some(d), None).expect("the first allocation");
    let first_us = t.elapsed().as_secs_f64() * 1e6;
    cuda::caching_allocator_delete(p).expect("delete");
    let settings = cuda::allocator_settings().expect("allocator settings").to_string();
    println!(
        "cudasem caching allocator, {} driver, cuda:{d} ({}), settings: {}",
        cuda::driver_name(),
        cuda::get_device_name(Some(d)).unwrap_or_default(),
        if settings.is_empty() { "defaults" } else { &settings }
    );
    println!("process's first allocation (makes the allocator, 2 MiB segment): {first_us:.1} µs");
    let mut c = Criterion::default().configure_from_args();
    pairs(&mut c);
    c.final_summary();
}
