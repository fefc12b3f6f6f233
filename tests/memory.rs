//! `cudasem::cuda`'s memory API (torch.cuda's memory functions) through the runtime's caching
//! allocators, written once for the sim driver and real GPUs (`CUDASEM_DRIVER=cuda`).
//!
//! The tests of this file share each device's allocator and check its counters and pointers, so
//! every test first takes [`serial`]: one at a time, each starting from an emptied cache. Blocks
//! are held in `RawBuffer::cached` guards, which give them back even when a test panics.
//! Sizes that depend on the machine (out of memory, the retry path, the memory fraction) are
//! taken from `mem_get_info`, so the same test runs on a 16 GiB simulated GPU and on an H200.

mod common;

use common::{
    assert_invalid_argument, assert_invalid_device, assert_stats_match_snapshot, device_segments, distinct_streams,
    last_device, ms, segment_of, stat, stream_pair, two_devices, TestRng,
};
use cudasem::cuda::{self, Stream};
use cudasem::cuda::{AllocatorSettings, BlockState, PoolKind};
use cudasem::testing::{self, RawBuffer};
use cudasem::{Error, Result};
use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard};

const MIB: usize = 1 << 20;

static SERIAL: Mutex<()> = Mutex::new(());

/// The file-wide lock every test takes first. It also checks that the allocator runs with the
/// default settings (the sizes below are PyTorch's defaults) and empties the cache, so a test
/// starts with no cached segment on any device.
fn serial() -> MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let settings = cuda::allocator_settings().expect("allocator settings");
    assert_eq!(settings, AllocatorSettings::default(), "run the memory tests without CUDASEM_ALLOC_CONF");
    cuda::empty_cache().expect("empty_cache");
    guard
}

#[test]
fn a_freed_block_stays_reserved_and_is_reused_without_the_driver() -> Result<()> {
    let _s = serial();
    let d = 0;
    let s = Stream::new(Some(d), 0)?;
    let (a0, r0, n0) = (cuda::memory_allocated(Some(d))?, cuda::memory_reserved(Some(d))?, stat(d, "num_device_alloc"));

    let b = RawBuffer::cached(Some(d), 3 * MIB, Some(&s))?;
    let p = b.ptr();
    assert_eq!(cuda::memory_allocated(Some(d))?, a0 + 3 * MIB);
    assert_eq!(cuda::memory_reserved(Some(d))?, r0 + 20 * MIB, "a 3 MiB request gets a 20 MiB segment");
    assert_eq!(stat(d, "num_device_alloc"), n0 + 1);

    drop(b);
    assert_eq!(cuda::memory_allocated(Some(d))?, a0, "freeing gives the bytes back to the program");
    assert_eq!(cuda::memory_reserved(Some(d))?, r0 + 20 * MIB, "but the segment stays cached");

    let again = RawBuffer::cached(Some(d), 3 * MIB, Some(&s))?;
    assert_eq!(again.ptr(), p, "the same request on the same stream gets the cached block back");
    assert_eq!(stat(d, "num_device_alloc"), n0 + 1, "without asking the driver");
    let second = RawBuffer::cached(Some(d), 5 * MIB, Some(&s))?;
    assert_eq!(segment_of(d, second.ptr()).address, p, "a second request is carved from the cached segment");
    assert_eq!(stat(d, "num_device_alloc"), n0 + 1);
    assert_eq!(cuda::memory_reserved(Some(d))?, r0 + 20 * MIB);
    Ok(())
}

/// A cached block serves only its own stream, like PyTorch's: another stream's request must not
/// get it while the owner's queued work may still use it. (cudasem hands a *wholly free* segment
/// to another stream once its owner stream is idle, a departure from PyTorch documented in
/// `src/alloc/departures.rs`, so the two cases checked are the ones where reuse would be wrong:
/// the segment still holds a live block, and the owner stream is busy.)
#[test]
fn a_block_freed_on_one_stream_is_not_reused_by_another() -> Result<()> {
    let _s = serial();
    let d = 0;
    let (sa, sb) = stream_pair(d)?;
    common::warm_up(&sa)?;
    let n0 = stat(d, "num_device_alloc");
    let keep = RawBuffer::cached(Some(d), 3 * MIB, Some(&sa))?;
    let a = RawBuffer::cached(Some(d), 3 * MIB, Some(&sa))?;
    let p = a.ptr();
    drop(a);
    let b = RawBuffer::cached(Some(d), 3 * MIB, Some(&sb))?;
    assert_ne!(b.ptr(), p, "stream B must not get the block stream A freed");
    assert_eq!(stat(d, "num_device_alloc"), n0 + 2, "stream B gets a segment of its own");
    assert_eq!(segment_of(d, p).stream.0, sa.id(), "the cached block still belongs to stream A");
    assert_eq!(segment_of(d, b.ptr()).stream.0, sb.id());
    let a2 = RawBuffer::cached(Some(d), 3 * MIB, Some(&sa))?;
    assert_eq!(a2.ptr(), p, "stream A gets its block back");
    assert_eq!(stat(d, "num_device_alloc"), n0 + 2);
    drop((keep, a2, b));

    // A wholly free segment whose stream still has queued work stays with that stream. (If the
    // machine is so slow that the delay ended before the check, try a longer one.)
    for delay_ms in [300, 1200, 4800] {
        sa.synchronize()?;
        cuda::empty_cache()?; // so that stream B has no block of its own to take
        let a = RawBuffer::cached(Some(d), 3 * MIB, Some(&sa))?;
        let p = a.ptr();
        testing::delay(&sa, ms(delay_ms))?;
        drop(a);
        let b = RawBuffer::cached(Some(d), 3 * MIB, Some(&sb))?;
        if sa.query()? {
            eprintln!("stream A's {delay_ms} ms delay ended before the check; trying a longer one");
            continue;
        }
        assert_ne!(b.ptr(), p, "stream B must not get a block of a stream that is still busy");
        assert_eq!(segment_of(d, p).stream.0, sa.id());
        sa.synchronize()?;
        return Ok(());
    }
    panic!(
        "stream A was never still busy after stream B's allocation: the machine is extremely slow, or the \
         driver's allocation waited for stream A's work"
    );
}

#[test]
fn empty_cache_returns_cached_segments_to_the_driver() -> Result<()> {
    let _s = serial();
    let d = last_device();
    let s = Stream::new(Some(d), 0)?;
    assert_eq!(cuda::memory_reserved(Some(d))?, 0, "nothing is live between tests, so empty_cache left nothing");
    let (frees0, syncs0) = (stat(d, "num_device_free"), stat(d, "num_sync_all_streams"));

    let blocks = [
        RawBuffer::cached(Some(d), 1000, Some(&s))?,     // a 2 MiB small segment
        RawBuffer::cached(Some(d), 12 * MIB, Some(&s))?, // a 12 MiB segment of its own
        RawBuffer::cached(Some(d), 3 * MIB, Some(&s))?,  // a 20 MiB large segment
    ];
    let held = 34 * MIB;
    assert_eq!(cuda::memory_reserved(Some(d))?, held);
    drop(blocks);
    assert_eq!(cuda::memory_allocated(Some(d))?, 0);
    assert_eq!(cuda::memory_reserved(Some(d))?, held, "freed blocks stay cached");
    assert_eq!(device_segments(d).len(), 3);

    let (free_before, _) = cuda::mem_get_info(Some(d))?;
    cuda::empty_cache()?;
    let (free_after, _) = cuda::mem_get_info(Some(d))?;
    assert_eq!(cuda::memory_reserved(Some(d))?, 0, "empty_cache returns every unused segment");
    assert!(device_segments(d).is_empty(), "the snapshot has no segment left: {:?}", device_segments(d));
    assert_eq!(stat(d, "num_device_free"), frees0 + 3, "one driver free per segment");
    assert_eq!(stat(d, "num_sync_all_streams"), syncs0 + 1, "empty_cache waits for the device once");
    assert!(
        free_after >= free_before + held / 2,
        "the driver got the memory back: free {free_before} -> {free_after} after returning {held} bytes"
    );
    assert_stats_match_snapshot(d);
    Ok(())
}

#[test]
fn small_requests_share_2mib_small_segments_and_round_to_512_bytes() -> Result<()> {
    let _s = serial();
    let d = 0;
    let s = Stream::new(Some(d), 0)?;
    let before = cuda::memory_stats(Some(d))?;
    let delta = |k: &str| -> Result<i64> { Ok(stat(d, k) - before.get(k).unwrap()) };

    let a = RawBuffer::cached(Some(d), 1000, Some(&s))?;
    assert_eq!(delta("allocated_bytes.all.current")?, 1024, "1000 bytes round up to 1024");
    assert_eq!(delta("requested_bytes.all.current")?, 1000, "requested_bytes keeps the size asked for");
    assert_eq!(delta("segment.small_pool.current")?, 1);
    assert_eq!(delta("reserved_bytes.small_pool.current")?, (2 * MIB) as i64, "a 2 MiB small segment");
    assert_eq!(delta("segment.large_pool.current")?, 0);
    let seg = segment_of(d, a.ptr());
    assert_eq!((seg.segment_type, seg.total_size, seg.stream.0), (PoolKind::Small, 2 * MIB, s.id()));
    assert!(!seg.is_expandable);
    let block = seg.blocks.iter().find(|b| b.address == a.ptr()).expect("the block is in its segment");
    assert_eq!((block.size, block.requested_size, block.state), (1024, 1000, BlockState::ActiveAllocated));

    let b = RawBuffer::cached(Some(d), 1, Some(&s))?;
    assert_eq!(delta("allocated_bytes.all.current")?, 1024 + 512, "1 byte takes a 512-byte block");
    assert_eq!(b.ptr(), a.ptr() + 1024, "split from the same segment, right after the first block");
    let c = RawBuffer::cached(Some(d), MIB, Some(&s))?;
    assert_eq!(segment_of(d, c.ptr()).address, seg.address, "1 MiB is still small: the same segment");
    assert_eq!(delta("segment.small_pool.current")?, 1);
    assert_eq!(delta("allocation.small_pool.current")?, 3);

    let e = RawBuffer::cached(Some(d), MIB + 1, Some(&s))?;
    assert_eq!(delta("allocated_bytes.large_pool.current")?, (MIB + 512) as i64, "1 MiB + 1 is large");
    let large = segment_of(d, e.ptr());
    assert_eq!((large.segment_type, large.total_size), (PoolKind::Large, 20 * MIB));
    assert_eq!(delta("reserved_bytes.all.current")?, (22 * MIB) as i64);
    drop((a, b, c, e));
    assert_eq!(delta("allocated_bytes.all.current")?, 0);
    assert_eq!(delta("requested_bytes.all.current")?, 0);
    Ok(())
}

#[test]
fn out_of_memory_is_a_typed_error_counted_and_recovered_from() -> Result<()> {
    let _s = serial();
    let d = 0;
    let s = Stream::new(Some(d), 0)?;
    let (_, total) = cuda::mem_get_info(Some(d))?;
    let ooms0 = stat(d, "num_ooms");
    match cuda::caching_allocator_alloc(2 * total, Some(d), Some(&s)) {
        Err(e @ Error::OutOfMemory { .. }) => {
            let msg = e.to_string();
            assert!(msg.starts_with("CUDA out of memory. Tried to allocate"), "{msg}");
            assert!(msg.contains(&format!("GPU {d} has a total capacity of")), "{msg}");
            let Error::OutOfMemory { device, requested, total: t, .. } = e else { unreachable!() };
            assert_eq!((device, t), (d, total), "{msg}");
            assert!(requested >= 2 * total, "it names what was asked for ({requested} bytes): {msg}");
        }
        other => panic!("2x the device's memory: expected Error::OutOfMemory, got {other:?}"),
    }
    assert_eq!(stat(d, "num_ooms"), ooms0 + 1);
    assert_eq!(cuda::memory_allocated(Some(d))?, 0, "the failed request holds nothing");

    // The device stays usable.
    let b = RawBuffer::cached(Some(d), MIB, Some(&s))?;
    let data = TestRng::new(7).nonzero_bytes(MIB);
    b.write(&data, &s)?;
    assert!(b.read(&s)? == data, "the block after the error holds what was written");
    assert_eq!(stat(d, "num_ooms"), ooms0 + 1);
    Ok(())
}

/// PyTorch's last resort before out of memory: free every cached segment and try again. The
/// blocks are cached on another stream than the request's: cudasem coalesces the requesting
/// stream's own cached segments before asking the driver (`src/alloc/departures.rs`), which
/// would serve this request without the retry.
#[test]
fn the_retry_path_frees_cached_blocks_and_succeeds() -> Result<()> {
    let _s = serial();
    let d = 0;
    let (sa, sb) = stream_pair(d)?;
    let (free0, _) = cuda::mem_get_info(Some(d))?;
    // Two cached blocks of 30% of free memory each, then a request larger than what the driver
    // has left but smaller than that plus the cache.
    let big = free0 / 10 * 3 / (2 * MIB) * (2 * MIB);
    let first = RawBuffer::cached(Some(d), big, Some(&sa))?;
    let second = RawBuffer::cached(Some(d), big, Some(&sa))?;
    drop((first, second));
    assert_eq!(cuda::memory_reserved(Some(d))?, 2 * big, "two big blocks cached");
    let (free, _) = cuda::mem_get_info(Some(d))?;
    let want = (free + big / 2).div_ceil(2 * MIB) * (2 * MIB);
    assert!(want > free && want > big && want < free + 2 * big, "free {free}, cached 2 x {big}, want {want}");

    let (retries0, ooms0, frees0) = (stat(d, "num_alloc_retries"), stat(d, "num_ooms"), stat(d, "num_device_free"));
    let b = RawBuffer::cached(Some(d), want, Some(&sb))?;
    assert_eq!(stat(d, "num_alloc_retries"), retries0 + 1, "one retry after freeing the cache");
    assert_eq!(stat(d, "num_ooms"), ooms0, "no out-of-memory error");
    assert_eq!(stat(d, "num_device_free"), frees0 + 2, "both cached blocks went back to the driver");
    assert_eq!(cuda::memory_reserved(Some(d))?, want);
    assert_eq!(b.len(), want);
    let tail = RawBuffer::cached(Some(d), 4096, Some(&sb))?;
    tail.write(&[1; 4096], &sb)?;
    assert_eq!(tail.read(&sb)?, vec![1; 4096]);
    assert_stats_match_snapshot(d);
    drop((b, tail));

    // On the blocks' own stream the request succeeds too, whichever way the cache is used.
    cuda::empty_cache()?;
    let first = RawBuffer::cached(Some(d), big, Some(&sa))?;
    let second = RawBuffer::cached(Some(d), big, Some(&sa))?;
    drop((first, second));
    let ooms = stat(d, "num_ooms");
    let b = RawBuffer::cached(Some(d), want, Some(&sa))?;
    assert_eq!(stat(d, "num_ooms"), ooms);
    assert!(cuda::memory_reserved(Some(d))? <= 2 * big, "no more memory than the cache held");
    drop(b);
    assert_stats_match_snapshot(d);
    Ok(())
}

/// Puts the device's memory fraction back to 1 when dropped, also when a test fails.
struct FractionReset(usize);

impl Drop for FractionReset {
    fn drop(&mut self) {
        let _ = cuda::set_per_process_memory_fraction(1.0, Some(self.0));
    }
}

#[test]
fn set_per_process_memory_fraction_caps_the_allocator() -> Result<()> {
    let _s = serial();
    let d = 0;
    let s = Stream::new(Some(d), 0)?;
    assert_eq!(cuda::get_per_process_memory_fraction(Some(d))?, 1.0, "no cap by default");
    let _reset = FractionReset(d);
    cuda::set_per_process_memory_fraction(0.25, Some(d))?;
    assert_eq!(cuda::get_per_process_memory_fraction(Some(d))?, 0.25);
    if two_devices() {
        assert_eq!(cuda::get_per_process_memory_fraction(Some(1))?, 1.0, "the cap is per device");
    }
    let (_, total) = cuda::mem_get_info(Some(d))?;
    let ooms0 = stat(d, "num_ooms");
    match RawBuffer::cached(Some(d), total / 4 + 4 * MIB, Some(&s)) {
        Err(Error::OutOfMemory { device, .. }) => assert_eq!(device, d),
        other => panic!("above 25% of the device: expected Error::OutOfMemory, got {other:?}"),
    }
    assert_eq!(stat(d, "num_ooms"), ooms0 + 1);

    let fifth = RawBuffer::cached(Some(d), total / 5, Some(&s))?;
    assert!(cuda::memory_reserved(Some(d))? <= total / 4);
    match RawBuffer::cached(Some(d), total / 10, Some(&s)) {
        Err(Error::OutOfMemory { .. }) => {}
        other => panic!("20% held plus 10% more passes the 25% cap: expected OutOfMemory, got {other:?}"),
    }
    drop(fifth);
    drop(RawBuffer::cached(Some(d), total / 10, Some(&s))?); // under the cap once the 20% block is freed

    for bad in [-0.1, 1.5, f64::NAN] {
        assert_invalid_argument(cuda::set_per_process_memory_fraction(bad, Some(d)), "set_per_process_memory_fraction");
    }
    assert_eq!(cuda::get_per_process_memory_fraction(Some(d))?, 0.25, "invalid fractions change nothing");
    assert_invalid_device(cuda::set_per_process_memory_fraction(0.5, Some(99)), 99);
    cuda::set_per_process_memory_fraction(1.0, Some(d))?;
    assert_eq!(cuda::get_per_process_memory_fraction(Some(d))?, 1.0);
    Ok(())
}

#[test]
fn record_stream_keeps_a_block_until_the_recorded_stream_is_done() -> Result<()> {
    let _s = serial();
    let d = last_device();
    let (s1, s2) = stream_pair(d)?;
    common::warm_up(&s2)?;
    let size = 256 << 10;
    let mut rng = TestRng::new(11);
    // The order is only observable while s2 is busy: if the machine is so slow that s2's delay
    // ended before the check, try again with a longer one.
    for delay_ms in [300, 1200, 4800] {
        s2.synchronize()?;
        cuda::empty_cache()?; // a fresh segment: b at its start, then room for c
        let b = RawBuffer::cached(Some(d), size, Some(&s1))?;
        let p = b.ptr();
        testing::delay(&s2, ms(delay_ms))?;
        b.fill(0xAB, &s2)?; // a late write of s2 to the block, behind the delay
        b.record_stream(&s2)?;
        drop(b);
        let pending = segment_of(d, p);
        let state = pending.blocks.iter().find(|x| x.address == p).map(|x| x.state);
        assert_eq!(state, Some(BlockState::ActivePendingFree), "freed but waiting for s2: {pending:?}");
        assert_stats_match_snapshot(d);

        let c = RawBuffer::cached(Some(d), size, Some(&s1))?;
        let data = rng.nonzero_bytes(size);
        c.write(&data, &s1)?;
        if s2.query()? {
            eprintln!("s2's {delay_ms} ms delay ended before the check; trying a longer one");
            continue;
        }
        assert_ne!(c.ptr(), p, "a block recorded on a busy stream must not be reused");
        s2.synchronize()?;
        assert!(c.read(&s1)? == data, "s2's late write did not land in the new block");
        let again = RawBuffer::cached(Some(d), size, Some(&s1))?;
        assert_eq!(again.ptr(), p, "once s2's work completed, the block is reused on s1");
        assert_stats_match_snapshot(d);
        return Ok(());
    }
    panic!("s2 was never still busy right after a delay was queued on it");
}

#[test]
fn random_bytes_written_to_cached_blocks_read_back() -> Result<()> {
    let _s = serial();
    let d = 0;
    let s = Stream::new(Some(d), 0)?;
    let mut rng = TestRng::new(3);
    // Neighbours in the same segments: a write that spilled over would show in the next block.
    let sizes = [512, 1000, 4096, 100_000, MIB, MIB + 1, 3 * MIB];
    let blocks: Vec<RawBuffer> =
        sizes.iter().map(|&n| RawBuffer::cached(Some(d), n, Some(&s))).collect::<Result<_>>()?;
    let data: Vec<Vec<u8>> = sizes.iter().map(|&n| rng.nonzero_bytes(n)).collect();
    for (b, x) in blocks.iter().zip(&data) {
        b.write(x, &s)?;
    }
    for (i, (b, x)) in blocks.iter().zip(&data).enumerate() {
        assert!(b.read(&s)? == *x, "block {i} ({} bytes at {:#x}) reads back what was written", sizes[i], b.ptr());
    }
    // Through a reuse: the freed block comes back between its neighbours, which keep their data.
    let mut blocks = blocks;
    let freed = blocks.remove(3);
    let p = freed.ptr();
    drop(freed);
    let again = RawBuffer::cached(Some(d), 100_000, Some(&s))?;
    assert_eq!(again.ptr(), p, "best fit: the freed block is the smallest that fits");
    let fresh = rng.nonzero_bytes(100_000);
    again.write(&fresh, &s)?;
    let copy = RawBuffer::cached(Some(d), 100_000, Some(&s))?;
    copy.copy_from(&again, &s)?;
    assert!(copy.read(&s)? == fresh, "a device-to-device copy between cached blocks");
    assert!(again.read(&s)? == fresh);
    for (b, x) in blocks.iter().zip(data.iter().enumerate().filter(|(i, _)| *i != 3).map(|(_, x)| x)) {
        assert!(b.read(&s)? == *x, "the {} byte neighbour kept its data", b.len());
    }
    Ok(())
}

#[test]
fn copies_between_cached_blocks_on_two_devices() -> Result<()> {
    let _s = serial();
    if !two_devices() {
        return Ok(());
    }
    let (s0, s1) = (Stream::new(Some(0), 0)?, Stream::new(Some(1), 0)?);
    let n = 3 * MIB + 512;
    let mut rng = TestRng::new(5);
    let a = RawBuffer::cached(Some(0), n, Some(&s0))?;
    let b = RawBuffer::cached(Some(1), n, Some(&s1))?;
    let back = RawBuffer::cached(Some(0), n, Some(&s0))?;
    let data = rng.nonzero_bytes(n);
    a.write(&data, &s0)?;
    s0.synchronize()?;
    b.copy_from(&a, &s1)?; // on the destination's stream
    s1.synchronize()?;
    back.copy_from(&b, &s0)?; // and back, on the destination's stream again
    assert!(b.read(&s1)? == data, "cuda:0 -> cuda:1");
    assert!(back.read(&s0)? == data, "cuda:1 -> cuda:0");
    assert_eq!(cuda::memory_allocated(Some(1))?, n, "the block on cuda:1 is counted by cuda:1's allocator");
    Ok(())
}

/// One thread's share of the concurrency test: allocations and frees on its own stream, each
/// block checked for the data the thread put in it, every live address checked to be unique.
fn churn(d: usize, t: usize, s: &Stream, live: &Mutex<HashSet<u64>>) -> Result<()> {
    let mut rng = TestRng::new(100 + t as u64);
    let sizes = [512, 1000, 4096, 20_000, 65_536, 1_500_000, 3 * MIB];
    let mut held: Vec<(RawBuffer, Option<Vec<u8>>, u8)> = Vec::new();
    for i in 0..120 {
        if held.len() < 2 || (held.len() < 8 && rng.next_u64() & 1 == 0) {
            let n = sizes[(rng.next_u64() % sizes.len() as u64) as usize];
            let b = RawBuffer::cached(Some(d), n, Some(s))?;
            assert!(live.lock().unwrap().insert(b.ptr()), "{:#x} was handed out twice", b.ptr());
            let fill = (t * 16 + i % 16) as u8 | 1;
            let data = if n <= 65_536 {
                let x = rng.nonzero_bytes(n);
                b.write(&x, s)?;
                Some(x)
            } else {
                b.fill(fill, s)?;
                None
            };
            held.push((b, data, fill));
        } else {
            let (b, data, fill) = held.swap_remove((rng.next_u64() % held.len() as u64) as usize);
            let got = b.read(s)?;
            match data {
                Some(x) => assert!(got == x, "thread {t}: a {} byte block lost its data", b.len()),
                None => assert!(got.iter().all(|&v| v == fill), "thread {t}: a filled block changed"),
            }
            assert!(live.lock().unwrap().remove(&b.ptr()));
        }
    }
    for (b, _, _) in held {
        live.lock().unwrap().remove(&b.ptr());
    }
    Ok(())
}

#[test]
fn eight_threads_on_eight_streams_leave_memory_allocated_unchanged() -> Result<()> {
    let _s = serial();
    let d = 0;
    let streams = distinct_streams(d, 8)?;
    let start = cuda::memory_allocated(Some(d))?;
    let live = Mutex::new(HashSet::new());
    std::thread::scope(|scope| -> Result<()> {
        let threads: Vec<_> = streams
            .iter()
            .enumerate()
            .map(|(t, s)| {
                let live = &live;
                scope.spawn(move || churn(d, t, s, live))
            })
            .collect();
        threads.into_iter().try_for_each(|h| h.join().expect("a thread panicked"))
    })?;
    assert_eq!(cuda::memory_allocated(Some(d))?, start, "every block the threads took was given back");
    assert_eq!(stat(d, "allocation.all.current"), 0);
    assert_stats_match_snapshot(d);
    Ok(())
}

#[test]
fn deleting_an_unknown_or_freed_pointer_is_a_typed_error() -> Result<()> {
    let _s = serial();
    let d = 0;
    let s = Stream::new(Some(d), 0)?;
    let p = cuda::caching_allocator_alloc(4096, Some(d), Some(&s))?;
    let inside = p + 512;
    for bad in [0xdead_0000_u64, inside] {
        match cuda::caching_allocator_delete(bad) {
            Err(Error::InvalidPointer { ptr, .. }) => assert_eq!(ptr, bad),
            other => panic!("deleting {bad:#x}: expected Error::InvalidPointer, got {other:?}"),
        }
    }
    assert_eq!(cuda::memory_allocated(Some(d))?, 4096, "the live block is untouched");
    cuda::caching_allocator_delete(p)?;
    match cuda::caching_allocator_delete(p) {
        Err(Error::InvalidPointer { ptr, .. }) => assert_eq!(ptr, p),
        other => panic!("a double delete: expected Error::InvalidPointer, got {other:?}"),
    }
    match cuda::caching_allocator_record_stream(p, &s) {
        Err(Error::InvalidPointer { ptr, .. }) => assert_eq!(ptr, p),
        other => panic!("record_stream of a freed block: expected Error::InvalidPointer, got {other:?}"),
    }
    assert_eq!(cuda::memory_allocated(Some(d))?, 0, "a double delete frees nothing twice");
    assert_stats_match_snapshot(d);

    // Argument checks of caching_allocator_alloc.
    assert_invalid_device(cuda::caching_allocator_alloc(512, Some(99), None), 99);
    if two_devices() {
        let other = Stream::new(Some(1), 0)?;
        assert_invalid_argument(cuda::caching_allocator_alloc(512, Some(0), Some(&other)), "caching_allocator_alloc");
    }
    // With the current stream and the current device.
    let q = cuda::caching_allocator_alloc(512, None, None)?;
    let dev = cuda::current_device()?;
    assert_eq!(cuda::memory_allocated(Some(dev))?, 512);
    let seg = segment_of(dev, q);
    assert_eq!(seg.stream.0, cuda::current_stream(Some(dev))?.id(), "None means the current stream");
    cuda::caching_allocator_delete(q)?;
    Ok(())
}

/// `torch.cuda.caching_allocator_alloc(0)` gives the null pointer and `caching_allocator_delete(0)`
/// does nothing (PyTorch's `raw_delete(nullptr)` returns at once).
#[test]
fn a_zero_byte_block_is_null_and_deleting_it_does_nothing() -> Result<()> {
    let _s = serial();
    let d = 0;
    let n0 = stat(d, "num_device_alloc");
    let p = cuda::caching_allocator_alloc(0, Some(d), None)?;
    assert_eq!(p, 0, "a zero-byte request gives the null pointer, as in PyTorch");
    assert_eq!((stat(d, "num_device_alloc"), cuda::memory_allocated(Some(d))?), (n0, 0));
    cuda::caching_allocator_delete(p)?;
    Ok(())
}

#[test]
fn an_injected_driver_failure_fails_only_an_allocation_that_needs_a_segment() -> Result<()> {
    let _s = serial();
    let d = last_device();
    let s = Stream::new(Some(d), 0)?;
    drop(RawBuffer::cached(Some(d), 3 * MIB, Some(&s))?); // now cached
    let before = cuda::memory_stats(Some(d))?;

    testing::fail_next_malloc(d)?;
    let cached = RawBuffer::cached(Some(d), 3 * MIB, Some(&s))?;
    assert_eq!(stat(d, "num_device_alloc"), before.num_device_alloc(), "served from the cache: no driver call");
    match RawBuffer::cached(Some(d), 64 * MIB, Some(&s)) {
        Err(Error::Injected { device, .. }) => assert_eq!(device, d),
        other => panic!("a request that needs a new segment: expected Error::Injected, got {other:?}"),
    }
    let after = cuda::memory_stats(Some(d))?;
    assert_eq!(after.num_device_alloc(), before.num_device_alloc());
    assert_eq!(after.num_ooms(), before.num_ooms(), "an injected failure is not an out-of-memory error");
    assert_eq!(after.reserved_bytes().current, before.reserved_bytes().current);
    assert_eq!(after.allocated_bytes().current, before.allocated_bytes().current + (3 * MIB) as i64);
    assert_stats_match_snapshot(d);

    // The allocator stays usable: the same request now gets its segment.
    let big = RawBuffer::cached(Some(d), 64 * MIB, Some(&s))?;
    assert_eq!(stat(d, "num_device_alloc"), before.num_device_alloc() + 1);
    let data = TestRng::new(9).nonzero_bytes(4096);
    let small = RawBuffer::cached(Some(d), 4096, Some(&s))?;
    small.write(&data, &s)?;
    assert_eq!(small.read(&s)?, data);
    drop((cached, big, small));
    assert_stats_match_snapshot(d);
    Ok(())
}
