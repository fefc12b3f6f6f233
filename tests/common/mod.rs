//! Helpers shared by the integration tests. Every test is written once and runs on the sim driver
//! (the default without a GPU) and on real GPUs with `CUDASEM_DRIVER=cuda`.
#![allow(dead_code)]

use cudasem::cuda::{self, Stream};
use cudasem::{Error, Result};
use std::fmt::Debug;
use std::time::{Duration, Instant};

/// Upper margin for event-measured delays: what other tests' work on a shared pool stream may add.
pub const TIMING_MARGIN_MS: f32 = 2000.0;

/// Whether the machine has at least two devices; says why a test is skipped when not, or fails
/// where the run must cover two GPUs (`CUDASEM_REQUIRE_GPU=2`, see `cudasem::testing::skip`).
#[track_caller]
pub fn two_devices() -> bool {
    cudasem::testing::has_devices(2)
}

/// Whether the machine has a device; says why a test is skipped when not, or fails where the run
/// must cover a GPU (`CUDASEM_REQUIRE_GPU=1`).
#[track_caller]
pub fn one_device() -> bool {
    cudasem::testing::has_devices(1)
}

/// Whether the tests run on the simulated machine.
pub fn is_sim() -> bool {
    cuda::driver_name() == "sim"
}

/// `Duration::from_millis`.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The last device (device 1 on a two-GPU machine, device 0 on a single-GPU one).
pub fn last_device() -> usize {
    cuda::device_count() - 1
}

/// `n` pairwise distinct pool streams of `device` at priority 0.
///
/// The pool hands out 32 streams round-robin across the whole process, so tests running in
/// parallel may (rarely) wrap around it between two of our calls: keep asking until distinct.
pub fn distinct_streams(device: usize, n: usize) -> Result<Vec<Stream>> {
    let mut out: Vec<Stream> = Vec::with_capacity(n);
    for _ in 0..1000 {
        if out.len() == n {
            break;
        }
        let s = Stream::new(Some(device), 0)?;
        if !out.contains(&s) {
            out.push(s);
        }
    }
    assert_eq!(out.len(), n, "could not get {n} distinct streams on cuda:{device}");
    Ok(out)
}

/// Two distinct pool streams of `device`.
pub fn stream_pair(device: usize) -> Result<(Stream, Stream)> {
    let mut v = distinct_streams(device, 2)?;
    let b = v.pop().unwrap();
    let a = v.pop().unwrap();
    Ok((a, b))
}

/// Runs a tiny delay on `stream` and waits for it, so one-time driver setup (a kernel compile on
/// CUDA) is not measured by a later timing.
pub fn warm_up(stream: &Stream) -> Result<()> {
    cudasem::testing::delay(stream, Duration::from_micros(100))?;
    stream.synchronize()
}

/// Asserts `busy` (a `query() == false` observation, or any other "still pending" observation)
/// unless this thread was stalled past the delay: a pending state can only be observed while less
/// than `delay` of host time has passed since the delay was queued (`queued`, taken right before
/// `testing::delay`). On a real GPU another thread's synchronous driver call (`cuMemFree`,
/// `cuCtxSynchronize`, `cuMemAlloc`) can stall this thread's next call until the device is idle,
/// and then the work has legitimately finished. A stall is reported on stderr, never hidden as a
/// pass of the ordering itself: callers whose ordering proof rests on data keep that proof.
///
/// Returns whether the pending state was observed (`false` only after a reported stall), so a
/// caller can retry with a longer delay ([`retry_if_stalled`]). Evaluate `busy` in the call, so
/// that the elapsed time is measured after the query.
#[track_caller]
pub fn assert_busy(busy: bool, queued: Instant, delay: Duration, what: &str) -> bool {
    if busy {
        return true;
    }
    let waited = queued.elapsed();
    assert!(
        waited >= delay,
        "{what}: already complete {waited:?} after a {delay:?} delay was queued, so the work did not wait for it"
    );
    let at = std::panic::Location::caller();
    eprintln!(
        "note ({at}): {what}: not observed: complete {waited:?} after a {delay:?} delay was queued, so this thread \
         was stalled past the delay (by another thread's synchronous driver call) and the work had legitimately \
         finished"
    );
    false
}

/// Runs `attempt` with `delay`, and once more with a 4x longer one when the first could not
/// observe the pending state because this thread was stalled (`attempt` returns what
/// [`assert_busy`] returned). A second stall is reported on stderr and accepted.
pub fn retry_if_stalled(delay: Duration, mut attempt: impl FnMut(Duration) -> Result<bool>) -> Result<()> {
    if attempt(delay)? {
        return Ok(());
    }
    let longer = delay * 4;
    eprintln!("note: retrying with a {longer:?} delay");
    if !attempt(longer)? {
        eprintln!("note: stalled again with a {longer:?} delay; the pending state was not observed this run");
    }
    Ok(())
}

/// Asserts that an event-measured time for a delay of `delay_ms` is plausible: on the simulated
/// machine never less than the delay (its clock is its own, and a delay takes exactly its
/// duration), on a GPU at least 90% of it (the spin kernel's clock); more only by what other work
/// shared the stream meanwhile (pool streams are shared by the tests running in parallel).
#[track_caller]
pub fn assert_measures_delay(measured_ms: f32, delay_ms: u64) {
    let d = delay_ms as f32;
    let least = if is_sim() { d } else { 0.9 * d };
    assert!(
        measured_ms >= least && measured_ms < d + TIMING_MARGIN_MS,
        "a {delay_ms} ms delay was measured as {measured_ms} ms"
    );
}

/// Asserts `r` is `Error::InvalidDevice` for `index`, with this machine's device count.
#[track_caller]
pub fn assert_invalid_device<T: Debug>(r: Result<T>, index: usize) {
    match r {
        Err(Error::InvalidDevice { index: i, count, driver }) => {
            assert_eq!(i, index, "InvalidDevice names the index asked for");
            assert_eq!(count, cuda::device_count(), "InvalidDevice names the device count");
            assert_eq!(driver, cuda::driver_name());
        }
        other => panic!("expected Error::InvalidDevice {{ index: {index}, .. }}, got {other:?}"),
    }
}

/// Asserts `r` is `Error::InvalidArgument` from `op`.
#[track_caller]
pub fn assert_invalid_argument<T: Debug>(r: Result<T>, op: &str) {
    match r {
        Err(Error::InvalidArgument { op: o, reason }) => {
            assert_eq!(o, op, "InvalidArgument names the call");
            assert!(!reason.is_empty());
        }
        other => panic!("expected Error::InvalidArgument {{ op: {op:?}, .. }}, got {other:?}"),
    }
}

/// Seeded test data: `rand`'s `StdRng` (the tests' one generator).
pub struct TestRng(rand::rngs::StdRng);

impl TestRng {
    pub fn new(seed: u64) -> TestRng {
        TestRng(rand::SeedableRng::seed_from_u64(seed))
    }

    pub fn next_u64(&mut self) -> u64 {
        rand::RngExt::random(&mut self.0)
    }

    /// `n` random bytes, none of them zero (so a buffer that was never written cannot pass).
    pub fn nonzero_bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n)
            .map(|_| loop {
                let b = (self.next_u64() >> 56) as u8;
                if b != 0 {
                    break b;
                }
            })
            .collect()
    }
}

/// One allocator statistic of `device` by PyTorch's key (`num_device_alloc`, `allocated_bytes.all.current`, …).
#[track_caller]
pub fn stat(device: usize, key: &str) -> i64 {
    cuda::memory_stats(Some(device)).expect("memory_stats").get(key).unwrap_or_else(|| panic!("no key {key}"))
}

/// `device`'s segments now (the whole-process snapshot filtered to one device).
pub fn device_segments(device: usize) -> Vec<cudasem::alloc::SegmentInfo> {
    let mut s = cuda::memory_snapshot().expect("memory_snapshot").segments;
    s.retain(|s| s.device == device);
    s
}

/// The segment of `device` holding address `ptr`.
#[track_caller]
pub fn segment_of(device: usize, ptr: u64) -> cudasem::alloc::SegmentInfo {
    device_segments(device)
        .into_iter()
        .find(|s| s.address <= ptr && ptr < s.address + s.total_size as u64)
        .unwrap_or_else(|| panic!("no segment of cuda:{device} holds {ptr:#x}"))
}

/// Asserts that `device`'s allocator statistics equal the totals of a snapshot taken right after
/// them: reserved bytes are the sum of that device's segment sizes, allocated bytes the sum of its
/// `active_allocated` blocks, and every other `current` value agrees (`Snapshot::mismatches`).
/// Call it only while nothing else allocates on `device`.
#[track_caller]
pub fn assert_stats_match_snapshot(device: usize) {
    use cudasem::alloc::BlockState;
    let stats = cuda::memory_stats(Some(device)).expect("memory_stats");
    let (allocated, reserved) = (
        cuda::memory_allocated(Some(device)).expect("memory_allocated"),
        cuda::memory_reserved(Some(device)).expect("memory_reserved"),
    );
    let mut snap = cuda::memory_snapshot().expect("memory_snapshot");
    snap.segments.retain(|s| s.device == device);
    let seg_bytes: usize = snap.segments.iter().map(|s| s.total_size).sum();
    let live_bytes: usize = snap
        .segments
        .iter()
        .flat_map(|s| s.blocks.iter())
        .filter(|b| b.state == BlockState::ActiveAllocated)
        .map(|b| b.size)
        .sum();
    let get = |k: &str| stats.get(k).unwrap_or_else(|| panic!("memory_stats has no key {k}"));
    assert_eq!(get("reserved_bytes.all.current"), seg_bytes as i64, "cuda:{device}: reserved = sum of segment sizes");
    assert_eq!(reserved, seg_bytes, "cuda:{device}: memory_reserved = sum of segment sizes");
    assert_eq!(get("allocated_bytes.all.current"), live_bytes as i64, "cuda:{device}: allocated = live blocks");
    assert_eq!(allocated, live_bytes, "cuda:{device}: memory_allocated = sum of active_allocated blocks");
    assert_eq!(get("segment.all.current"), snap.segments.len() as i64, "cuda:{device}: segment count");
    let mismatches = snap.mismatches(&stats);
    assert!(mismatches.is_empty(), "cuda:{device}: stats and snapshot disagree: {mismatches:#?}");
}

/// The `cudasem` binary: Cargo's path on the build machine, or `.gpu/bin/bin-cudasem` (or
/// `$CUDASEM_BIN`) where test executables were carried to another machine.
pub fn cudasem_binary() -> std::path::PathBuf {
    let built = std::path::PathBuf::from(env!("CARGO_BIN_EXE_cudasem"));
    if built.exists() {
        return built;
    }
    let path = std::env::var_os("CUDASEM_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(".gpu/bin/bin-cudasem"));
    // Absolute, so that a test may run the binary in another working directory.
    std::fs::canonicalize(&path).unwrap_or(path)
}

/// The repository's root: where the tests were built (`CARGO_MANIFEST_DIR`) when it exists, else
/// the current folder — a GPU machine runs the carried test executables from the root of a copy
/// of the tree, where the build machine's path does not exist.
pub fn repo_root() -> std::path::PathBuf {
    let built = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    if built.join("Cargo.toml").exists() {
        built.to_path_buf()
    } else {
        std::env::current_dir().expect("a current folder")
    }
}
