//! Host time of a cached alloc + free pair of the caching allocator (`cudasem bench` puts the
//! 1 MiB pair beside PyTorch's C++ `raw_alloc` + `raw_delete`, from `bench/pytorch_bench.py`).
//!
//! For 512 B, 1 MiB and 64 MiB it measures:
//! * `cudasem_pair_ns`: `cuda::caching_allocator_alloc(size, None, None)` +
//!   `cuda::caching_allocator_delete` through the public API, on the current device and stream
//!   (what PyTorch's `raw_alloc(size)` does);
//! * `cudasem_pair_stream_ns`: the same with the stream passed explicitly;
//! * `cudasem_policy_pair_ns`: the bare `cudasem::alloc::CachingAllocator` over `AccountingMemory`
//!   (the policy alone, no runtime, no driver);
//! * `cudasem_first_alloc_us`: an allocation that has to ask the driver for a segment (after
//!   `empty_cache`), in µs; and the process's very first allocation, which also makes the allocator.
//!
//! Each pair figure is the median of 7 runs of 200,000 pairs after a warm-up. A table goes to
//! stdout, then one JSON object per figure and line. Runs on the sim driver and with
//! `CUDASEM_DRIVER=cuda`: `cargo bench --bench alloc_pair` (on a GPU machine: the gathered
//! `test-bench-alloc_pair` executable).

use cudasem::alloc::{AccountingMemory, CachingAllocator};
use cudasem::cuda::{self, Stream};
use cudasem::driver::StreamId;
use cudasem::Result;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

const SIZES: [usize; 3] = [512, 1 << 20, 64 << 20];
const PAIRS: usize = 200_000;
const RUNS: usize = 7;
const FIRSTS: usize = 5;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median ns of one `pair()` over [`RUNS`] runs of [`PAIRS`], after a warm-up run.
fn time_pairs(mut pair: impl FnMut()) -> f64 {
    for _ in 0..PAIRS / 4 {
        pair();
    }
    let runs = (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..PAIRS {
                pair();
            }
            t.elapsed().as_nanos() as f64 / PAIRS as f64
        })
        .collect();
    median(runs)
}

fn size_name(size: usize) -> String {
    match size {
        s if s >= 1 << 20 => format!("{} MiB", s >> 20),
        s if s >= 1 << 10 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    }
}

struct Row {
    size: usize,
    api_ns: f64,
    api_stream_ns: f64,
    policy_ns: f64,
    first_us: f64,
}

fn main() -> Result<()> {
    let d = 0;
    let driver = cuda::driver_name();
    let device = cuda::get_device_name(Some(d))?;
    let settings = cuda::allocator_settings()?;
    let stream = Stream::new(Some(d), 0)?;

    // The process's first allocation also makes the device's allocator.
    let t = Instant::now();
    let p = cuda::caching_allocator_alloc(512, Some(d), None)?;
    let process_first_us = t.elapsed().as_secs_f64() * 1e6;
    cuda::caching_allocator_delete(p)?;

    let mut rows = Vec::new();
    for size in SIZES {
        // A cache miss: the driver allocates a segment (median of a few, each after empty_cache).
        let mut firsts = Vec::new();
        for _ in 0..FIRSTS {
            cuda::empty_cache()?;
            let n0 = cuda::memory_stats(Some(d))?.num_device_alloc();
            let t = Instant::now();
            let p = cuda::caching_allocator_alloc(size, Some(d), None)?;
            firsts.push(t.elapsed().as_secs_f64() * 1e6);
            assert!(cuda::memory_stats(Some(d))?.num_device_alloc() > n0, "the allocation asked the driver");
            cuda::caching_allocator_delete(p)?;
        }
        // One block cached on each stream timed below, then no pair may reach the driver.
        cuda::caching_allocator_delete(cuda::caching_allocator_alloc(size, Some(d), None)?)?;
        cuda::caching_allocator_delete(cuda::caching_allocator_alloc(size, Some(d), Some(&stream))?)?;
        let n0 = cuda::memory_stats(Some(d))?.num_device_alloc();
        let api_ns = time_pairs(|| {
            let p = cuda::caching_allocator_alloc(black_box(size), None, None).expect("alloc");
            cuda::caching_allocator_delete(black_box(p)).expect("delete");
        });
        let api_stream_ns = time_pairs(|| {
            let p = cuda::caching_allocator_alloc(black_box(size), Some(d), Some(&stream)).expect("alloc");
            cuda::caching_allocator_delete(black_box(p)).expect("delete");
        });
        assert_eq!(cuda::memory_stats(Some(d))?.num_device_alloc(), n0, "every timed pair was served from the cache");

        let policy = CachingAllocator::new(d, Arc::new(AccountingMemory::new(64 << 30)), settings.clone());
        let s = StreamId(stream.id());
        policy.free(policy.malloc(size, s)?)?;
        let policy_ns = time_pairs(|| {
            let p = policy.malloc(black_box(size), s).expect("malloc");
            policy.free(black_box(p)).expect("free");
        });
        rows.push(Row { size, api_ns, api_stream_ns, policy_ns, first_us: median(firsts) });
    }
    cuda::empty_cache()?;

    let conf = if settings.to_string().is_empty() { "defaults".to_string() } else { settings.to_string() };
    println!("cudasem caching allocator, {driver} driver, cuda:{d} ({device}), settings: {conf}");
    println!(
        "cached alloc+free pair, host ns: median of {RUNS} runs of {PAIRS} pairs; first alloc: median of {FIRSTS}"
    );
    println!(
        "{:>8} | {:>16} | {:>18} | {:>13} | {:>19}",
        "size", "API ns/pair", "API+stream ns/pair", "policy ns/pair", "driver alloc µs"
    );
    for r in &rows {
        println!(
            "{:>8} | {:>16.1} | {:>18.1} | {:>13.1} | {:>19.1}",
            size_name(r.size),
            r.api_ns,
            r.api_stream_ns,
            r.policy_ns,
            r.first_us
        );
    }
    println!("process's first allocation (makes the allocator, 2 MiB segment): {process_first_us:.1} µs");
    for r in &rows {
        let size = r.size;
        println!(r#"{{"what":"cudasem_pair_ns","driver":"{driver}","size":{size},"ns":{:.1}}}"#, r.api_ns);
        println!(
            r#"{{"what":"cudasem_pair_stream_ns","driver":"{driver}","size":{size},"ns":{:.1}}}"#,
            r.api_stream_ns
        );
        println!(r#"{{"what":"cudasem_policy_pair_ns","driver":"{driver}","size":{size},"ns":{:.1}}}"#, r.policy_ns);
        println!(r#"{{"what":"cudasem_first_alloc_us","driver":"{driver}","size":{size},"us":{:.1}}}"#, r.first_us);
    }
    println!(
        r#"{{"what":"cudasem_process_first_alloc_us","driver":"{driver}","size":512,"us":{process_first_us:.1}}}"#
    );
    Ok(())
}
