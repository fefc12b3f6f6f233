//! `expandable_segments:True` through the runtime: one segment per (stream, pool) that grows by
//! mapping pages, data across page borders, pages unmapped by `empty_cache`. The settings are
//! given once per process (`cudasem::init`), so this file holds one test, which sets them before
//! any other cudasem call.

mod common;

use common::{assert_stats_match_snapshot, device_segments, is_sim, stream_pair, TestRng};
use cudasem::cuda::{self, Stream};
use cudasem::cuda::{PoolKind, SegmentInfo, TraceAction};
use cudasem::testing::RawBuffer;
use cudasem::Result;

const MIB: usize = 1 << 20;

/// `device`'s segments of `stream` and `pool`.
fn segments(device: usize, stream: &Stream, pool: PoolKind) -> Vec<SegmentInfo> {
    let mut s = device_segments(device);
    s.retain(|s| s.stream.0 == stream.id() && s.segment_type == pool);
    s
}

/// The one segment of `stream` and `pool`, which must be expandable and hold `blocks`.
#[track_caller]
fn the_segment(device: usize, stream: &Stream, pool: PoolKind, blocks: &[&RawBuffer]) -> SegmentInfo {
    let segs = segments(device, stream, pool);
    assert_eq!(segs.len(), 1, "one {pool:?} segment for the stream, not {segs:#?}");
    let seg = segs.into_iter().next().unwrap();
    assert!(seg.is_expandable, "{seg:?}");
    for b in blocks {
        let inside = seg.address <= b.ptr() && b.ptr() + b.len() as u64 <= seg.address + seg.total_size as u64;
        assert!(inside, "the block at {:#x} lies in the segment {seg:?}", b.ptr());
    }
    seg
}

#[track_caller]
fn write_and_check(b: &RawBuffer, s: &Stream, rng: &mut TestRng) -> Result<Vec<u8>> {
    let data = rng.nonzero_bytes(b.len());
    b.write(&data, s)?;
    assert!(b.read(s)? == data, "{} bytes at {:#x} read back", b.len(), b.ptr());
    Ok(data)
}

/// Without virtual memory management: ordinary segments (PyTorch's 20 MiB one) hold the blocks.
fn ordinary_segments_without_vmm(d: usize, s: &Stream, rng: &mut TestRng) -> Result<()> {
    eprintln!("cuda:{d} has no virtual memory management: checking that ordinary segments are used instead");
    let a = RawBuffer::cached(Some(d), 3 * MIB, Some(s))?;
    let b = RawBuffer::cached(Some(d), 1000, Some(s))?;
    write_and_check(&a, s, rng)?;
    write_and_check(&b, s, rng)?;
    let snap = cuda::memory_snapshot()?;
    assert!(snap.segments.iter().all(|seg| !seg.is_expandable), "{:#?}", snap.segments);
    assert_eq!(segments(d, s, PoolKind::Large)[0].total_size, 20 * MIB, "PyTorch's 20 MiB segment");
    assert_stats_match_snapshot(d);
    Ok(())
}

/// Driver allocations so far on `d` (mapping a page is one).
fn maps(d: usize) -> Result<i64> {
    cuda::memory_stats(Some(d)).map(|m| m.num_device_alloc())
}

/// The large pool's blocks: `l2` lies across the first page's end, `l3` makes four pages.
struct Large {
    l1: RawBuffer,
    l2: RawBuffer,
    l2_data: Vec<u8>,
    /// Freed by [`empty_cache_gives_pages_back`].
    l3: Option<RawBuffer>,
}

/// Large pool: blocks that make the segment grow, the second across the first page's end.
fn grow_large_segment(d: usize, s: &Stream, lp: usize, rng: &mut TestRng) -> Result<Large> {
    let n0 = maps(d)?;
    let l1 = RawBuffer::cached(Some(d), lp - MIB, Some(s))?;
    let seg = the_segment(d, s, PoolKind::Large, &[&l1]);
    assert_eq!((seg.address, seg.total_size), (l1.ptr(), lp), "one page mapped");
    let n1 = maps(d)?;
    assert!(n1 > n0, "mapping a page is a driver allocation");
    let l2 = RawBuffer::cached(Some(d), lp, Some(s))?;
    assert_eq!(l2.ptr(), l1.ptr() + (lp - MIB) as u64, "the segment grows in place: right after the first block");
    let seg = the_segment(d, s, PoolKind::Large, &[&l1, &l2]);
    assert_eq!((seg.address, seg.total_size), (l1.ptr(), 2 * lp), "a second page mapped behind the first");
    let l2_data = write_and_check(&l2, s, rng)?; // across the page border
    let n2 = maps(d)?;
    assert!(n2 > n1);
    let l3 = RawBuffer::cached(Some(d), 2 * lp + MIB, Some(s))?;
    assert_eq!(l3.ptr(), l2.ptr() + lp as u64);
    let seg = the_segment(d, s, PoolKind::Large, &[&l1, &l2, &l3]);
    assert_eq!(seg.total_size, 4 * lp, "grown to four pages, still one segment");
    assert!(maps(d)? > n2);
    Ok(Large { l1, l2, l2_data, l3: Some(l3) })
}

/// Small pool: 700 KiB blocks until one straddles a page border; the blocks and their data.
fn grow_small_segment(d: usize, s: &Stream, sp: usize, rng: &mut TestRng) -> Result<(Vec<RawBuffer>, Vec<Vec<u8>>)> {
    let mut small = vec![RawBuffer::cached(Some(d), 700 << 10, Some(s))?];
    let base = small[0].ptr();
    while small.len() < 2 + sp / (700 << 10) {
        small.push(RawBuffer::cached(Some(d), 700 << 10, Some(s))?);
    }
    let refs: Vec<&RawBuffer> = small.iter().collect();
    let seg = the_segment(d, s, PoolKind::Small, &refs);
    assert_eq!(seg.address, base);
    assert_eq!(seg.total_size, 2 * sp, "the small segment grew by a page");
    let straddling =
        small.iter().find(|b| (b.ptr() - base) / sp as u64 != (b.ptr() - base + b.len() as u64 - 1) / sp as u64);
    let small_data: Vec<Vec<u8>> = small.iter().map(|b| write_and_check(b, s, rng)).collect::<Result<_>>()?;
    assert!(straddling.is_some(), "one small block lies across the page border");
    Ok((small, small_data))
}

/// Freeing `l3` keeps its pages; empty_cache unmaps the pages no block uses (the two behind
/// `l2`), and the blocks on the pages that stay keep their data.
fn empty_cache_gives_pages_back(
    d: usize,
    s: &Stream,
    lp: usize,
    large: &mut Large,
    small: &[RawBuffer],
    small_data: &[Vec<u8>],
) -> Result<()> {
    let reserved = cuda::memory_reserved(Some(d))?;
    let frees0 = cuda::memory_stats(Some(d))?.num_device_free();
    drop(large.l3.take());
    assert_eq!(cuda::memory_reserved(Some(d))?, reserved, "a freed block stays mapped");
    let (free_before, _) = cuda::mem_get_info(Some(d))?;
    cuda::empty_cache()?;
    let (free_after, _) = cuda::mem_get_info(Some(d))?;
    let seg = the_segment(d, s, PoolKind::Large, &[&large.l1, &large.l2]);
    assert_eq!(seg.total_size, 2 * lp, "the two pages behind l2 were unmapped");
    assert_eq!(cuda::memory_reserved(Some(d))?, reserved - 2 * lp);
    assert!(cuda::memory_stats(Some(d))?.num_device_free() > frees0);
    assert!(free_after >= free_before + lp, "the driver got pages back: free {free_before} -> {free_after}");
    assert!(large.l2.read(s)? == large.l2_data, "blocks on the pages that stayed keep their data");
    for (b, x) in small.iter().zip(small_data) {
        assert!(b.read(s)? == *x);
    }
    assert_stats_match_snapshot(d);
    Ok(())
}

/// Everything freed and emptied: no memory held, no segment left; the trace shows pages mapped
/// one by one and unmapped by empty_cache, and no ordinary segment.
fn nothing_left(d: usize) -> Result<()> {
    assert_eq!(cuda::memory_allocated(Some(d))?, 0);
    cuda::empty_cache()?;
    assert_eq!(cuda::memory_reserved(Some(d))?, 0, "every page unmapped");
    let snap = cuda::memory_snapshot()?;
    assert!(snap.segments.iter().all(|seg| seg.device != d), "{:#?}", snap.segments);
    assert_stats_match_snapshot(d);

    let trace = &snap.device_traces[d];
    let count = |a: TraceAction| trace.iter().filter(|e| e.action == a).count();
    assert!(count(TraceAction::SegmentMap) >= 7, "pages are mapped one by one: {trace:?}");
    assert!(count(TraceAction::SegmentUnmap) >= 2, "and unmapped by empty_cache: {trace:?}");
    assert_eq!(count(TraceAction::SegmentAlloc), 0, "no ordinary segment was made: {trace:?}");
    Ok(())
}

#[test]
fn expandable_segments_grow_in_place_and_give_pages_back() -> Result<()> {
    // Before any other cudasem call; the driver and machine stay the environment's.
    cudasem::init(cudasem::Config::from_env()?.with_alloc_conf("expandable_segments:True")?)?;
    let settings = cuda::allocator_settings()?;
    assert!(settings.expandable_segments(), "allocator_settings reports expandable segments: {settings}");
    assert_eq!(settings.to_string(), "expandable_segments:True");

    let d = 0;
    let (s, s2) = stream_pair(d)?;
    let mut rng = TestRng::new(21);
    let granularity = cudasem::testing::driver()?.vmm_granularity(d);
    if is_sim() {
        assert!(granularity.is_some(), "the sim driver has virtual memory management");
    }
    let Some(g) = granularity else {
        return ordinary_segments_without_vmm(d, &s, &mut rng);
    };
    // Pages: 2 MiB (small pool) and, for growths of up to 64 MiB, 4 MiB (large pool), rounded up
    // to the granularity.
    let sp = (2 * MIB).div_ceil(g) * g;
    let lp = (4 * MIB).div_ceil(g) * g;
    cuda::record_memory_history(true, 10_000)?;
    let mut large = grow_large_segment(d, &s, lp, &mut rng)?;
    let (small, small_data) = grow_small_segment(d, &s, sp, &mut rng)?;

    // Another stream gets a segment of its own.
    let other = RawBuffer::cached(Some(d), lp - MIB, Some(&s2))?;
    let seg2 = the_segment(d, &s2, PoolKind::Large, &[&other]);
    assert_eq!(seg2.total_size, lp);
    assert_stats_match_snapshot(d);
    assert_eq!(cuda::memory_reserved(Some(d))?, 4 * lp + 2 * sp + lp);

    empty_cache_gives_pages_back(d, &s, lp, &mut large, &small, &small_data)?;

    // Growing again after the unmap maps pages again, in place.
    let l4 = RawBuffer::cached(Some(d), lp + 3 * MIB, Some(&s))?;
    assert_eq!(l4.ptr(), large.l2.ptr() + lp as u64, "the freed room behind l2 grows again");
    write_and_check(&l4, &s, &mut rng)?;
    assert_stats_match_snapshot(d);

    drop((large, l4, small, other));
    nothing_left(d)?;
    cuda::record_memory_history(false, 0)?;
    Ok(())
}
