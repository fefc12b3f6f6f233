//! `cudasem::cuda`'s memory statistics, summary and history (torch.cuda's `memory_stats`,
//! `memory_summary`, `_record_memory_history` / snapshots), written once for the sim driver and real
//! GPUs (`CUDASEM_DRIVER=cuda`). Like tests/memory.rs, every test takes [`serial`] first: one at a
//! time, each starting from an emptied cache.

mod common;

use common::{assert_invalid_device, assert_stats_match_snapshot, last_device, stat, stream_pair};
use cudasem::cuda::{self, Stream};
use cudasem::cuda::{AllocatorSettings, Snapshot, TraceAction};
use cudasem::testing::RawBuffer;
use cudasem::Result;
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

/// Every key of PyTorch's `torch.cuda.memory_stats()`.
fn pytorch_keys() -> HashSet<String> {
    let mut keys = HashSet::new();
    for metric in [
        "allocation",
        "segment",
        "active",
        "inactive_split",
        "allocated_bytes",
        "reserved_bytes",
        "active_bytes",
        "inactive_split_bytes",
        "requested_bytes",
    ] {
        for pool in ["all", "small_pool", "large_pool"] {
            for field in ["current", "peak", "allocated", "freed"] {
                keys.insert(format!("{metric}.{pool}.{field}"));
            }
        }
    }
    for metric in ["oversize_allocations", "oversize_segments"] {
        for field in ["current", "peak", "allocated", "freed"] {
            keys.insert(format!("{metric}.{field}"));
        }
    }
    for k in [
        "num_alloc_retries",
        "num_ooms",
        "num_sync_all_streams",
        "num_device_alloc",
        "num_device_free",
        "max_split_size",
    ] {
        keys.insert(k.to_string());
    }
    keys
}

#[test]
fn memory_stats_have_pytorchs_keys_and_equal_the_snapshot() -> Result<()> {
    let _s = serial();
    let d = 0;
    let (s1, s2) = stream_pair(d)?;
    let before = cuda::memory_stats(Some(d))?;
    let small = RawBuffer::cached(Some(d), 1000, Some(&s1))?;
    let small2 = RawBuffer::cached(Some(d), 70_000, Some(&s1))?;
    let large = RawBuffer::cached(Some(d), 3 * MIB, Some(&s1))?;
    let other = RawBuffer::cached(Some(d), 12 * MIB, Some(&s2))?;
    drop(small2); // an inactive split block in the small segment

    let stats = cuda::memory_stats(Some(d))?;
    let keys: Vec<&str> = stats.iter().map(|(k, _)| k).collect();
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "keys come sorted and once each: {keys:?}");
    let got: HashSet<String> = keys.iter().map(|k| k.to_string()).collect();
    let want = pytorch_keys();
    let missing: Vec<_> = want.difference(&got).collect();
    let extra: Vec<_> = got.difference(&want).collect();
    assert!(missing.is_empty() && extra.is_empty(), "missing keys {missing:?}, keys PyTorch lacks {extra:?}");
    assert_eq!(stats.len(), want.len());
    assert_eq!(stats.get("no_such_key"), None);
    assert_eq!(stats.get("max_split_size"), Some(-1), "no max_split_size_mb: PyTorch reports SIZE_MAX as -1");

    let delta = |k: &str| stats.get(k).unwrap() - before.get(k).unwrap();
    assert_eq!(delta("allocation.all.current"), 3);
    assert_eq!(delta("allocation.small_pool.current"), 1);
    assert_eq!(delta("allocation.large_pool.current"), 2);
    assert_eq!(delta("allocation.all.allocated"), 4);
    assert_eq!(delta("allocation.all.freed"), 1);
    assert_eq!(delta("allocated_bytes.all.current"), (1024 + 3 * MIB + 12 * MIB) as i64);
    assert_eq!(delta("requested_bytes.all.current"), (1000 + 3 * MIB + 12 * MIB) as i64);
    assert_eq!(delta("segment.small_pool.current"), 1);
    assert_eq!(delta("segment.large_pool.current"), 2);
    assert_eq!(delta("reserved_bytes.large_pool.current"), (20 * MIB + 12 * MIB) as i64);
    assert_eq!(delta("reserved_bytes.small_pool.current"), (2 * MIB) as i64);
    assert_eq!(delta("num_device_alloc"), 3);
    assert_eq!(delta("inactive_split.small_pool.current"), 1, "the small segment's free rest after `small`");
    assert_eq!(stats.allocated_bytes().current as usize, cuda::memory_allocated(Some(d))?);
    assert_eq!(stats.reserved_bytes().current as usize, cuda::memory_reserved(Some(d))?);
    assert_eq!(stats.allocated_bytes().peak as usize, cuda::max_memory_allocated(Some(d))?);
    assert_eq!(stats.reserved_bytes().peak as usize, cuda::max_memory_reserved(Some(d))?);
    assert_stats_match_snapshot(d);

    // And again after frees, with blocks of two streams cached.
    drop(large);
    assert_stats_match_snapshot(d);
    drop((small, other));
    assert_stats_match_snapshot(d);
    assert_eq!(cuda::memory_allocated(Some(d))?, before.allocated_bytes().current as usize);
    Ok(())
}

#[test]
fn max_memory_allocated_and_reset_peak_memory_stats() -> Result<()> {
    let _s = serial();
    let d = 0;
    let s = Stream::new(Some(d), 0)?;
    cuda::reset_peak_memory_stats(Some(d))?;
    let base = cuda::memory_allocated(Some(d))?;
    assert_eq!(cuda::max_memory_allocated(Some(d))?, base, "after a reset the peak is the current value");
    assert_eq!(cuda::max_memory_reserved(Some(d))?, cuda::memory_reserved(Some(d))?);

    let keep = RawBuffer::cached(Some(d), 1000, Some(&s))?;
    let big = RawBuffer::cached(Some(d), 5 * MIB, Some(&s))?;
    drop(big);
    assert_eq!(cuda::memory_allocated(Some(d))?, base + 1024);
    assert_eq!(cuda::max_memory_allocated(Some(d))?, base + 1024 + 5 * MIB, "the peak remembers the 5 MiB block");
    assert_eq!(stat(d, "allocated_bytes.all.peak"), (base + 1024 + 5 * MIB) as i64);
    assert_eq!(stat(d, "allocated_bytes.large_pool.peak"), (5 * MIB) as i64);
    let reserved = cuda::memory_reserved(Some(d))?;
    assert_eq!(cuda::max_memory_reserved(Some(d))?, reserved, "nothing was returned to the driver");

    cuda::reset_peak_memory_stats(Some(d))?;
    assert_eq!(cuda::max_memory_allocated(Some(d))?, base + 1024);
    assert_eq!(stat(d, "allocated_bytes.large_pool.peak"), 0);
    cuda::empty_cache()?;
    assert!(cuda::memory_reserved(Some(d))? < reserved);
    assert_eq!(cuda::max_memory_reserved(Some(d))?, reserved, "the reserved peak outlives empty_cache");
    drop(keep);
    assert_eq!(cuda::max_memory_allocated(Some(d))?, base + 1024);
    cuda::reset_peak_memory_stats(Some(d))?;
    assert_eq!(cuda::max_memory_allocated(Some(d))?, base);
    assert_invalid_device(cuda::reset_peak_memory_stats(Some(99)), 99);
    Ok(())
}

/// The cells of the summary row whose name (first cell) is `name`.
#[track_caller]
fn summary_row(summary: &str, name: &str) -> Vec<String> {
    let line = summary
        .lines()
        .find(|l| l.trim_start_matches('|').trim_start().starts_with(name) && l.matches('|').count() == 6)
        .unwrap_or_else(|| panic!("no row {name:?} in\n{summary}"));
    line.trim_matches('|').split('|').map(|c| c.trim().to_string()).collect()
}

/// A size cell like `3 MiB` in bytes (rounded down to its unit, as the summary shows it).
fn cell_bytes(cell: &str) -> (i64, i64) {
    let (n, unit) = cell.split_once(' ').unwrap_or((cell, "B"));
    let scale = match unit.trim() {
        "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        u => panic!("unit {u:?}"),
    };
    (n.trim().parse().unwrap(), scale)
}

#[test]
fn memory_summary_shows_pytorchs_rows_with_current_values() -> Result<()> {
    let _s = serial();
    let d = last_device();
    let s = Stream::new(Some(d), 0)?;
    let _a = RawBuffer::cached(Some(d), 3 * MIB, Some(&s))?;
    let _b = RawBuffer::cached(Some(d), 1000, Some(&s))?;
    let summary = cuda::memory_summary(Some(d))?;
    for row in [
        "CUDA OOMs",
        "cudaMalloc retries",
        "Metric",
        "Allocated memory",
        "Active memory",
        "Requested memory",
        "GPU reserved memory",
        "Non-releasable memory",
        "Allocations",
        "Active allocs",
        "GPU reserved segments",
        "Non-releasable allocs",
        "Oversize allocations",
        "Oversize GPU segments",
        "from large pool",
        "from small pool",
        "Cur Usage",
        "Peak Usage",
        "Tot Alloc",
        "Tot Freed",
    ] {
        assert!(summary.contains(row), "memory_summary lacks {row:?}:\n{summary}");
    }
    assert!(summary.contains(&format!("device ID {d}")), "{summary}");
    let stats = cuda::memory_stats(Some(d))?;
    for (row, key) in [("Allocated memory", "allocated_bytes.all"), ("GPU reserved memory", "reserved_bytes.all")] {
        let cells = summary_row(&summary, row);
        for (cell, field) in cells[1..].iter().zip(["current", "peak", "allocated", "freed"]) {
            let (n, scale) = cell_bytes(cell);
            let v = stats.get(&format!("{key}.{field}")).unwrap();
            assert_eq!(n, v / scale, "{row} {field}: the cell {cell:?} vs {v} bytes\n{summary}");
        }
    }
    let allocations = summary_row(&summary, "Allocations");
    assert_eq!(allocations[1].parse::<i64>().ok(), stats.get("allocation.all.current"), "{summary}");
    let segments = summary_row(&summary, "GPU reserved segments");
    assert_eq!(segments[1].parse::<i64>().ok(), stats.get("segment.all.current"), "{summary}");
    assert!(summary.contains(&format!("CUDA OOMs: {:<12}", stats.num_ooms())), "the OOM count is shown:\n{summary}");
    assert_invalid_device(cuda::memory_summary(Some(99)), 99);
    Ok(())
}

/// Stops recording history when dropped, also when a test fails.
struct HistoryOff;

impl Drop for HistoryOff {
    fn drop(&mut self) {
        let _ = cuda::record_memory_history(false, 0);
    }
}

fn python3() -> bool {
    std::process::Command::new("python3").arg("--version").output().is_ok_and(|o| o.status.success())
}

#[test]
fn memory_history_records_events_and_exports_to_pickle_and_json() -> Result<()> {
    let _s = serial();
    let d = 0;
    let s = Stream::new(Some(d), 0)?;
    let _off = HistoryOff;
    cuda::record_memory_history(true, 1000)?;
    let a = RawBuffer::cached(Some(d), 3 * MIB, Some(&s))?;
    let b = RawBuffer::cached(Some(d), 1000, Some(&s))?;
    let (pa, pb) = (a.ptr(), b.ptr());
    drop(a);
    let snap: Snapshot = cuda::memory_snapshot()?;
    assert_eq!(snap.device_traces.len(), cuda::device_count(), "one trace per device");
    let trace = &snap.device_traces[d];
    let find = |action: TraceAction, addr: u64| trace.iter().position(|e| e.action == action && e.addr == addr);
    let alloc = find(TraceAction::Alloc, pa).expect("an alloc entry for the 3 MiB block");
    let requested = find(TraceAction::FreeRequested, pa).expect("a free_requested entry");
    let completed = find(TraceAction::FreeCompleted, pa).expect("a free_completed entry");
    assert!(alloc < requested && requested <= completed, "in order: {trace:?}");
    let e = &trace[alloc];
    assert_eq!((e.size, e.stream.0), (3 * MIB, s.id()));
    let seg = trace.iter().position(|e| e.action == TraceAction::SegmentAlloc && e.size == 20 * MIB);
    assert!(seg.is_some_and(|i| i < alloc), "the 20 MiB segment_alloc comes before its block: {trace:?}");
    assert!(find(TraceAction::Alloc, pb).is_some(), "the small block too");
    assert!(trace.iter().any(|e| e.action == TraceAction::SegmentAlloc && e.size == 2 * MIB));

    // JSON: PyTorch's field names and action names.
    let json = snap.to_json();
    assert!(json.starts_with('{') && json.ends_with('}'), "{json}");
    for needle in [
        "\"segments\":[",
        "\"device_traces\":[",
        "\"action\":\"alloc\"",
        "\"action\":\"free_requested\"",
        "\"action\":\"free_completed\"",
        "\"action\":\"segment_alloc\"",
        "\"segment_type\":\"small\"",
        "\"state\":\"active_allocated\"",
        "\"is_expandable\":false",
        &format!("\"addr\":{pa}"),
        &format!("\"address\":{pb}"),
    ] {
        assert!(json.contains(needle), "the JSON lacks {needle}: {json}");
    }

    // The pickle loads in Python (and so in PyTorch's memory_viz).
    if !python3() {
        eprintln!("skipped the pickle check: python3 is not installed");
        return Ok(());
    }
    let dir = std::env::temp_dir().join(format!("cudasem-memory-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (pickle, json_path) = (dir.join("snapshot.pickle"), dir.join("snapshot.json"));
    std::fs::write(&pickle, snap.to_pickle()).unwrap();
    std::fs::write(&json_path, &json).unwrap();
    let script = format!(
        "import json, pickle, sys\n\
         d = pickle.load(open(sys.argv[1], 'rb'))\n\
         assert 'segments' in d and 'device_traces' in d\n\
         j = json.load(open(sys.argv[2]))\n\
         assert len(j['segments']) == len(d['segments']) and len(j['device_traces']) == len(d['device_traces'])\n\
         t = d['device_traces'][{d}]\n\
         acts = {{e['action'] for e in t}}\n\
         assert {{'alloc', 'free_requested', 'free_completed', 'segment_alloc'}} <= acts, acts\n\
         assert any(e['action'] == 'alloc' and e['addr'] == {pa} and e['size'] == {size} for e in t)\n\
         segs = [s for s in d['segments'] if s['device'] == {d}]\n\
         assert any(b['address'] == {pb} and b['state'] == 'active_allocated' for s in segs for b in s['blocks'])\n",
        size = 3 * MIB
    );
    let out =
        std::process::Command::new("python3").arg("-c").arg(&script).arg(&pickle).arg(&json_path).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "python3 could not load the snapshot: {}", String::from_utf8_lossy(&out.stderr));

    drop(b);
    cuda::record_memory_history(false, 0)?;
    assert!(cuda::memory_snapshot()?.device_traces.iter().all(|t| t.is_empty()), "turning history off clears it");
    Ok(())
}
