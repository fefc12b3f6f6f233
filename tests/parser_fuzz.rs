//! Every parser of a file or setting, over the corpus in `tests/fixtures` (real files recorded
//! from PyTorch, and in `fuzz/` the inputs that once crashed, hung or wrapped a reader) and over
//! those files mutated at random (proptest, fixed seed): trace CSV and `.csv.gz`, cudasem's JSON
//! and pickle snapshots, PyTorch's `_dump_snapshot` pickles, and `AllocatorSettings` strings.
//!
//! Properties for every input: no panic (the tests run in the debug profile, overflow checks
//! on), no stack overflow (the readers run on a thread with the default 2 MiB stack), an answer
//! within a generous bound of time (a hang fails the test instead of stalling CI), an error
//! message of bounded length, and bounded output (a drawn page stays under 64 MiB). Whatever
//! parses is then used as a user would: traces and snapshot histories replayed, snapshots drawn
//! and read back from their own JSON, settings replayed with.

mod common;

use cudasem::cuda::memory::{replay_trace, PytorchOutcome, ReplayOptions, Trace};
use cudasem::cuda::{
    AllocatorSettings, BlockInfo, BlockState, PoolKind, SegmentInfo, Snapshot, StreamId, TraceAction, TraceEntry,
};
use cudasem::memviz;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use std::sync::mpsc;
use std::time::Duration;

const PYTORCH_PICKLE: &[u8] = include_bytes!("fixtures/pytorch_snapshot.pickle");
const PYTORCH_GPU_PICKLE: &[u8] = include_bytes!("fixtures/pytorch_gpu_snapshot.pickle");
const PREFETCH_HEAD: &[u8] = include_bytes!("fixtures/fuzz/prefetch_two_streams_head.csv");
const RESNET_HEAD: &[u8] = include_bytes!("fixtures/fuzz/resnet50_train_head.csv");
const RESNET_OUTCOME: &[u8] = include_bytes!("../bench/traces/resnet50_train.pytorch.json");
const PREFETCH_GZ: &[u8] = include_bytes!("../bench/traces/prefetch_two_streams.csv.gz");
const MULTI_MEMBER: &[u8] = include_bytes!("fixtures/fuzz/multi_member.csv.gz");
const MULTI_MEMBER_ROWS: &str = include_str!("fixtures/fuzz/multi_member.rows");
const ALLOC_2POW64: &[u8] = include_bytes!("fixtures/fuzz/alloc_2pow64.csv");
const LIVE_PAST_2POW64: &[u8] = include_bytes!("fixtures/fuzz/live_past_2pow64.csv");
const ONE_HUGE_ROW: &[u8] = include_bytes!("fixtures/fuzz/one_huge_row.csv.gz");
const DEEP_PICKLE: &[u8] = include_bytes!("fixtures/fuzz/deep_100k.pickle");
const DEEP_JSON: &[u8] = include_bytes!("fixtures/fuzz/deep_10k.json");
const DEVICE_1E12: &[u8] = include_bytes!("fixtures/fuzz/device_1e12.json");
const DEVICE_MAX: &[u8] = include_bytes!("fixtures/fuzz/device_max.json");
const WRAPPING_SIZES: &[u8] = include_bytes!("fixtures/fuzz/wrapping_sizes.json");
const BLOCK_PAST_2POW64: &[u8] = include_bytes!("fixtures/fuzz/block_past_2pow64.json");

/// The longest error message any input may give.
const MAX_MESSAGE: usize = 1000;
/// The largest page a snapshot may draw into.
const MAX_PAGE: usize = 64 << 20;
/// A reader that has not answered by then hangs (real inputs take milliseconds).
const HANG: Duration = Duration::from_secs(300);

/// Runs `f` on a thread of the default stack size and waits for it: a panic fails with its
/// message, a stack overflow aborts the test binary, and no answer within [`HANG`] fails.
fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(HANG) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Disconnected) => match worker.join() {
            Err(p) => std::panic::resume_unwind(p),
            Ok(()) => unreachable!("the worker sent nothing and did not panic"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: no answer in {HANG:?}"),
    }
}

fn assert_bounded_message(e: &cudasem::Error) {
    let text = e.to_string();
    assert!(text.len() <= MAX_MESSAGE, "a {}-byte error message: {}…", text.len(), &text[..200]);
}

fn replay_options() -> ReplayOptions {
    ReplayOptions { capacity: 64 << 30, timing_runs: 0, ..ReplayOptions::default() }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    z.write_all(bytes).unwrap();
    z.finish().unwrap()
}

/// Parses `bytes` as trace text and as its gzip (the same answer), and replays what parses.
fn exercise_trace(bytes: Vec<u8>) -> Option<Trace> {
    bounded("trace", move || {
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let plain = Trace::parse(&text);
        let zipped = Trace::from_gzip(&gzip(text.as_bytes()));
        assert_eq!(plain, zipped, "the gzip path reads the same trace");
        let _ = Trace::from_gzip(&bytes); // not gzip at all, or a mutated one
        match plain {
            Err(e) => {
                assert_bounded_message(&e);
                None
            }
            Ok(trace) => {
                if let Err(e) = replay_trace(&trace, &replay_options()) {
                    assert_bounded_message(&e);
                }
                Some(trace)
            }
        }
    })
}

/// Reads `bytes` as a snapshot; what reads is drawn, read back from its JSON, and its history
/// replayed.
fn exercise_snapshot(bytes: Vec<u8>) -> Option<Snapshot> {
    bounded("snapshot", move || {
        // The stacks of the interactive page are read apart (pickles as a tree): typed errors only.
        let stacks = memviz::Stacks::load(&bytes).map_err(|e| assert_bounded_message(&e)).ok();
        match memviz::load_snapshot(&bytes) {
            Err(e) => {
                assert_bounded_message(&e);
                None
            }
            Ok(snapshot) => {
                assert_eq!(memviz::load_snapshot(snapshot.to_json().as_bytes()).as_ref(), Ok(&snapshot));
                let options = memviz::Options { stacks: stacks.map(std::sync::Arc::new), ..Default::default() };
                match memviz::render(&snapshot, &options) {
                    Ok(picture) => assert!(picture.to_interactive_html().len() <= 2 * MAX_PAGE),
                    Err(e) => assert_bounded_message(&e),
                }
                for history in snapshot.device_traces.iter().filter(|t| !t.is_empty()) {
                    if let Err(e) = replay_trace(&Trace::from_entries(history), &replay_options()) {
                        assert_bounded_message(&e);
                    }
                }
                Some(snapshot)
            }
        }
    })
}

/// Parses a settings string and replays a real trace's head with what parses.
fn exercise_settings(text: String) {
    bounded("settings", move || match AllocatorSettings::parse(&text) {
        Err(e) => assert_bounded_message(&e),
        Ok(settings) => {
            let trace = Trace::parse(std::str::from_utf8(RESNET_HEAD).unwrap()).unwrap();
            if let Err(e) = replay_trace(&trace, &ReplayOptions { settings, ..replay_options() }) {
                assert_bounded_message(&e);
            }
        }
    })
}

/// Numbers a mutation may put in place of one in the file.
const BOUNDARIES: [&str; 16] = [
    "0",
    "1",
    "511",
    "512",
    "2097152",
    "4294967295",
    "4294967296",
    "9007199254740993",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551104",
    "18446744073709551615",
    "18446744073709551616",
    "1000000000000",
    "-1",
    "0xffffffffffffffff",
];

/// One change to a file.
#[derive(Debug, Clone)]
enum Mutation {
    /// The `n`-th number (a run of digits) replaced by a boundary value.
    Number { n: usize, value: usize },
    /// The byte at a place (a fraction of the length, in 1/65536) set.
    Set { at: u16, byte: u8 },
    /// A byte inserted.
    Insert { at: u16, byte: u8 },
    /// Up to 64 bytes removed.
    Remove { at: u16, len: u8 },
    /// A slice of up to 256 bytes repeated in place.
    Repeat { at: u16, len: u8, times: u8 },
    /// Eight bytes set to 0xff (a pickle's integers).
    Saturate { at: u16 },
    /// The file cut short.
    Truncate { at: u16 },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        6 => (0..400usize, 0..BOUNDARIES.len()).prop_map(|(n, value)| Mutation::Number { n, value }),
        2 => (any::<u16>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Set { at, byte }),
        1 => (any::<u16>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Insert { at, byte }),
        1 => (any::<u16>(), 1..64u8).prop_map(|(at, len)| Mutation::Remove { at, len }),
        1 => (any::<u16>(), 1..=255u8, 1..8u8).prop_map(|(at, len, times)| Mutation::Repeat { at, len, times }),
        2 => any::<u16>().prop_map(|at| Mutation::Saturate { at }),
        1 => any::<u16>().prop_map(|at| Mutation::Truncate { at }),
    ]
}

/// Where `at` (in 1/65536 of the length) falls in `len` bytes.
fn place(at: u16, len: usize) -> usize {
    (len as u64 * u64::from(at) / 65536) as usize
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    let len = bytes.len();
    match *m {
        Mutation::Number { n, value } => {
            let mut runs = Vec::new();
            let mut i = 0;
            while i < len {
                if bytes[i].is_ascii_digit() {
                    let start = i;
                    while i < len && bytes[i].is_ascii_digit() {
                        i += 1;
                    }
                    runs.push(start..i);
                }
                i += 1;
            }
            if let Some(r) = runs.get(n % runs.len().max(1)).cloned() {
                bytes.splice(r, BOUNDARIES[value].bytes());
            }
        }
        Mutation::Set { at, byte } if len > 0 => bytes[place(at, len).min(len - 1)] = byte,
        Mutation::Insert { at, byte } => bytes.insert(place(at, len), byte),
        Mutation::Remove { at, len: n } => {
            let start = place(at, len);
            bytes.drain(start..(start + usize::from(n)).min(len));
        }
        Mutation::Repeat { at, len: n, times } => {
            let start = place(at, len);
            let slice = bytes[start..(start + usize::from(n)).min(len)].to_vec();
            for _ in 0..times {
                bytes.splice(start..start, slice.iter().copied());
            }
        }
        Mutation::Saturate { at } if len > 0 => {
            let start = place(at, len);
            let end = (start + 8).min(len);
            bytes[start..end].fill(0xff);
        }
        Mutation::Truncate { at } => bytes.truncate(place(at, len)),
        _ => {}
    }
}

fn mutated(seeds: &[Vec<u8>], seed: usize, mutations: &[Mutation]) -> Vec<u8> {
    let mut bytes = seeds[seed % seeds.len()].clone();
    for m in mutations {
        apply(&mut bytes, m);
    }
    bytes
}

fn trace_seeds() -> Vec<Vec<u8>> {
    let gz = |bytes| {
        use std::io::Read;
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(bytes).read_to_end(&mut out).unwrap();
        out.truncate(16 << 10); // the first rows: a debug build replays them fast
        out
    };
    vec![
        PREFETCH_HEAD.to_vec(),
        RESNET_HEAD.to_vec(),
        gz(PREFETCH_GZ),
        ALLOC_2POW64.to_vec(),
        LIVE_PAST_2POW64.to_vec(),
    ]
}

fn snapshot_seeds() -> Vec<Vec<u8>> {
    let cudasem_json = memviz::load_snapshot(PYTORCH_PICKLE).unwrap().to_json().into_bytes();
    let cudasem_pickle = memviz::load_snapshot(PYTORCH_PICKLE).unwrap().to_pickle();
    vec![
        PYTORCH_PICKLE.to_vec(),
        PYTORCH_GPU_PICKLE.to_vec(),
        cudasem_json,
        cudasem_pickle,
        DEVICE_1E12.to_vec(),
        WRAPPING_SIZES.to_vec(),
        BLOCK_PAST_2POW64.to_vec(),
    ]
}

const SETTINGS_SEEDS: [&str; 6] = [
    "",
    "max_split_size_mb:128,expandable_segments:True",
    "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]",
    "roundup_power2_divisions:4,garbage_collection_threshold:0.6",
    "max_non_split_rounding_mb:512,pinned_num_register_threads:8,backend:native",
    "expandable_segments:False,release_lock_on_cudamalloc:True,pinned_use_cuda_host_register:True",
];

fn config() -> Config {
    // 256 cases from a fixed seed in CI; `PROPTEST_CASES` and `CUDASEM_FUZZ_SEED` for a longer hunt.
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse().ok());
    let (cases, seed) = (env("PROPTEST_CASES").unwrap_or(256), env("CUDASEM_FUZZ_SEED").unwrap_or(36));
    Config { cases: cases as u32, rng_seed: RngSeed::Fixed(seed), failure_persistence: None, ..Config::default() }
}

/// Sizes: mostly small multiples of 512, rarely anything, near 2^63 or near 2^64.
fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        240 => (0..64usize).prop_map(|n| n * 512),
        80 => 0..(64usize << 20),
        1 => any::<usize>(),
        1 => (0..4096usize).prop_map(|n| usize::MAX - n),
        1 => (0..4096usize).prop_map(|n| (1 << 63) - 2048 + n),
    ]
}

/// Addresses: a few regions (so that blocks, segments and entries meet), near 0, 2^63 and 2^64.
fn address() -> impl Strategy<Value = u64> {
    let base = prop_oneof![
        200 => Just(1u64 << 20),
        200 => Just(1u64 << 40),
        1 => Just(0u64),
        1 => Just(1u64 << 63),
        1 => Just(u64::MAX - (64 << 10)),
    ];
    (base, 0..128u64).prop_map(|(base, n)| base.saturating_add(n * 512))
}

fn device() -> impl Strategy<Value = usize> {
    prop_oneof![
        40 => 0..3usize,
        1 => Just(255usize),
        1 => Just(256usize),
        1 => Just(1_000_000_000_000usize),
        1 => Just(usize::MAX),
    ]
}

fn entry() -> impl Strategy<Value = TraceEntry> {
    use TraceAction::*;
    let actions =
        vec![Alloc, FreeRequested, FreeCompleted, SegmentAlloc, SegmentFree, SegmentMap, SegmentUnmap, Oom, Snapshot];
    (prop::sample::select(actions), address(), size(), 0..3u64).prop_map(|(action, addr, size, stream)| TraceEntry {
        action,
        addr,
        size,
        stream: StreamId(stream),
        time_us: 0,
        frames: Default::default(),
    })
}

/// A segment whose blocks mostly tile it in order (sometimes at any address, sometimes past its
/// end).
fn segment() -> impl Strategy<Value = SegmentInfo> {
    let states = vec![BlockState::ActiveAllocated, BlockState::ActivePendingFree, BlockState::Inactive];
    let block = (size(), size(), prop::sample::select(states), prop::option::weighted(0.05, address()));
    (device(), address(), size(), any::<bool>(), any::<bool>(), prop::collection::vec(block, 0..4)).prop_map(
        |(device, address, extra, small, is_expandable, raw)| {
            let mut at = address;
            let blocks: Vec<BlockInfo> = raw
                .into_iter()
                .map(|(size, requested_size, state, wild)| {
                    let b = BlockInfo {
                        address: wild.unwrap_or(at),
                        size,
                        requested_size,
                        state,
                        frames: Default::default(),
                    };
                    at = at.saturating_add(size as u64);
                    b
                })
                .collect();
            let total_size = ((at - address) as usize).saturating_add(if extra % 7 == 0 { extra } else { 0 });
            SegmentInfo {
                device,
                address,
                total_size,
                allocated_size: 0,
                active_size: 0,
                requested_size: 0,
                stream: StreamId(0),
                segment_type: if small { PoolKind::Small } else { PoolKind::Large },
                is_expandable,
                segment_pool_id: Default::default(),
                blocks,
                frames: Default::default(),
            }
        },
    )
}

/// Snapshots with anything in their fields: overlapping blocks and segments, sizes near 2^64,
/// devices past any machine, histories that free what they never allocated.
fn wild_snapshot() -> impl Strategy<Value = Snapshot> {
    let traces = prop::collection::vec(prop::collection::vec(entry(), 0..40), 0..3);
    (prop::collection::vec(segment(), 0..4), traces)
        .prop_map(|(segments, device_traces)| Snapshot { segments, device_traces })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn wild_snapshots_load_or_fail_typed(s in wild_snapshot(), pickle in any::<bool>(), at in any::<u16>()) {
        let bytes = if pickle { s.to_pickle() } else { s.to_json().into_bytes() };
        // Drawn as made (by hand, not read from a file): the same checks, the same bounds.
        let made = s.clone();
        bounded("render as made", move || match memviz::render(&made, &memviz::Options::default()) {
            Ok(picture) => assert!(picture.to_html().len() <= MAX_PAGE),
            Err(e) => assert_bounded_message(&e),
        });
        if let Some(loaded) = exercise_snapshot(bytes) {
            // Every moment of the history is drawn (the segment view walks back to it).
            let events = loaded.device_traces.iter().map(Vec::len).max().unwrap_or(0);
            if events > 0 {
                let options = memviz::Options { at: Some(place(at, events)), ..Default::default() };
                bounded("render at", move || {
                    if let Err(e) = memviz::render(&loaded, &options) {
                        assert_bounded_message(&e);
                    }
                });
            }
        }
    }

    #[test]
    fn mutated_traces_parse_or_fail_typed(seed in 0..5usize, ms in prop::collection::vec(mutation(), 1..6)) {
        exercise_trace(mutated(&trace_seeds(), seed, &ms));
    }

    #[test]
    fn mutated_snapshots_load_or_fail_typed(seed in 0..7usize, ms in prop::collection::vec(mutation(), 1..6)) {
        exercise_snapshot(mutated(&snapshot_seeds(), seed, &ms));
    }

    #[test]
    fn mutated_outcome_files_parse_or_fail_typed(ms in prop::collection::vec(mutation(), 1..6)) {
        let text = String::from_utf8_lossy(&mutated(&[RESNET_OUTCOME.to_vec()], 0, &ms)).into_owned();
        bounded("outcome", move || {
            if let Err(e) = PytorchOutcome::parse(&text) {
                assert_bounded_message(&e);
            }
        });
    }

    #[test]
    fn mutated_settings_parse_or_fail_typed(seed in 0..6usize, ms in prop::collection::vec(mutation(), 1..4)) {
        let seeds: Vec<Vec<u8>> = SETTINGS_SEEDS.iter().map(|s| s.as_bytes().to_vec()).collect();
        exercise_settings(String::from_utf8_lossy(&mutated(&seeds, seed, &ms)).into_owned());
    }
}

#[test]
fn the_corpus_reads_as_recorded() {
    for seed in trace_seeds().into_iter().take(3) {
        assert!(exercise_trace(seed).is_some_and(|t| t.events.len() > 100));
    }
    for seed in snapshot_seeds().into_iter().take(4) {
        assert!(exercise_snapshot(seed).is_some_and(|s| !s.segments.is_empty()));
    }
    for s in SETTINGS_SEEDS {
        AllocatorSettings::parse(s).unwrap();
        exercise_settings(s.to_string());
    }
}

#[test]
fn every_member_of_a_multi_member_gzip_is_replayed() {
    let rows: usize = MULTI_MEMBER_ROWS.trim().parse().unwrap();
    let trace = Trace::from_gzip(MULTI_MEMBER).unwrap();
    assert_eq!(trace.events.len(), rows);
    let first_member_only = {
        use std::io::Read;
        let mut text = String::new();
        flate2::read::GzDecoder::new(MULTI_MEMBER).read_to_string(&mut text).unwrap();
        Trace::parse(&text).unwrap()
    };
    assert!(first_member_only.events.len() < rows, "the fixture has two members");
    let r = replay_trace(&trace, &replay_options()).unwrap();
    let allocs = trace.events.iter().filter(|e| e.action == cudasem::cuda::TraceAction::Alloc).count();
    assert_eq!(r.allocs, allocs);
}

#[test]
fn sizes_past_2_pow_64_are_typed_errors_not_wraps() {
    let options = replay_options();
    let huge = Trace::parse(std::str::from_utf8(ALLOC_2POW64).unwrap()).unwrap();
    assert!(matches!(replay_trace(&huge, &options), Err(cudasem::Error::OutOfMemory { .. })));
    let past = Trace::parse(std::str::from_utf8(LIVE_PAST_2POW64).unwrap()).unwrap();
    assert_eq!(past.peak_live_requested(), usize::MAX, "saturates");
    let e = replay_trace(&past, &options).unwrap_err();
    assert!(matches!(e, cudasem::Error::InvalidTrace { line: 3, .. }), "{e}");
    let e = memviz::load_snapshot(WRAPPING_SIZES).unwrap_err();
    assert!(e.to_string().contains("2^64"), "{e}");
    let e = memviz::load_snapshot(BLOCK_PAST_2POW64).unwrap_err();
    assert!(e.to_string().contains("lies outside segment"), "{e}");
}

#[test]
fn an_error_quotes_a_bounded_prefix_of_a_huge_row() {
    let e = bounded("huge row", || Trace::from_gzip(ONE_HUGE_ROW)).unwrap_err();
    assert!(matches!(e, cudasem::Error::InvalidTrace { line: 1, .. }), "{e}");
    assert_bounded_message(&e);
}

#[test]
fn deep_nesting_is_refused_before_decoding() {
    for bytes in [DEEP_PICKLE, DEEP_JSON] {
        let e = bounded("deep", move || memviz::load_snapshot(bytes)).unwrap_err();
        assert!(matches!(e, cudasem::Error::InvalidSnapshot { .. }), "{e}");
        assert!(e.to_string().contains("64"), "names the cap: {e}");
    }
}

#[test]
fn device_indices_are_validated() {
    for bytes in [DEVICE_1E12, DEVICE_MAX] {
        let e = bounded("device", move || memviz::load_snapshot(bytes)).unwrap_err();
        assert!(e.to_string().contains("256 devices"), "{e}");
    }
}

#[test]
fn long_strings_in_a_file_are_quoted_by_a_bounded_prefix() {
    let long = "x".repeat(1 << 20);
    let snapshots = [
        format!(r#"{{"segments": [{{"address": 0, "total_size": 512, "segment_type": "{long}"}}]}}"#),
        format!(
            r#"{{"segments": [{{"address": 0, "total_size": 512, "blocks": [{{"size": 512, "state": "{long}"}}]}}]}}"#
        ),
        format!(r#"{{"segments": [{{"address": "{long}", "total_size": 512}}]}}"#),
    ];
    for text in snapshots {
        assert_bounded_message(&memviz::load_snapshot(text.as_bytes()).unwrap_err());
    }
    let pickle =
        serde_pickle::to_vec(&serde_json::json!({ "segments": [{ "address": long }] }), Default::default()).unwrap();
    assert_bounded_message(&memviz::load_snapshot(&pickle).unwrap_err());
    assert_bounded_message(&PytorchOutcome::parse(&format!(r#"{{"reserved_bytes.all.peak": "{long}"}}"#)).unwrap_err());
    assert_bounded_message(&AllocatorSettings::parse(&format!("{long}:{long}")).unwrap_err());
    assert_bounded_message(&AllocatorSettings::parse(&format!("max_split_size_mb:{long}")).unwrap_err());
}

/// The regression files through the command line: `cudasem replay` and `cudasem memviz` answer
/// each with exit code 2 and a short error (no panic, no abort, no hang).
#[test]
fn the_commands_refuse_the_regression_files_briefly() {
    let fuzz = common::repo_root().join("tests/fixtures/fuzz");
    let out = std::env::temp_dir().join(format!("cudasem-{}-fuzz.html", std::process::id()));
    let runs: [(&str, &str); 8] = [
        ("memviz", "block_past_2pow64.json"),
        ("memviz", "deep_100k.pickle"),
        ("memviz", "deep_10k.json"),
        ("memviz", "device_1e12.json"),
        ("memviz", "wrapping_sizes.json"),
        ("replay", "deep_100k.pickle"),
        ("replay", "alloc_2pow64.csv"),
        ("replay", "one_huge_row.csv.gz"),
    ];
    for (command, file) in runs {
        let mut cmd = std::process::Command::new(common::cudasem_binary());
        cmd.arg(command).arg(fuzz.join(file)).env("CUDASEM_ALLOC_CONF", "");
        if command == "memviz" {
            cmd.arg("-o").arg(&out);
        }
        let o = bounded(file, move || cmd.output().expect("the cudasem binary starts"));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{command} {file}: {err}");
        assert!(err.len() < MAX_MESSAGE + 200 && !err.contains("panicked"), "{command} {file}: {err}");
    }
}
