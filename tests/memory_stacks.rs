//! Stack traces in the memory history (`torch.cuda.memory._record_memory_history(stacks="all")`):
//! each event and each active block of a snapshot carries the frames of the call that made it,
//! the caller's own line first, in the JSON and in PyTorch's pickle. On the sim driver and real
//! GPUs (`CUDASEM_DRIVER=cuda`); where the executable has no debug information (the stripped
//! release builds carried to the GPU machine), frames are addresses only and the checks of
//! file, line and name are skipped (checked by [`resolvable`]).

mod common;

use cudasem::cuda::{self, Frame, HistoryContext, HistoryEnabled, MemoryHistory, Snapshot, Stacks, TraceAction};
use cudasem::testing::RawBuffer;
use cudasem::Result;
use std::sync::{Mutex, MutexGuard};

static SERIAL: Mutex<()> = Mutex::new(());

/// Stops recording history when dropped (also when a test fails).
struct Recording(#[allow(dead_code)] MutexGuard<'static, ()>);

impl Drop for Recording {
    fn drop(&mut self) {
        let _ = cuda::record_memory_history_with(MemoryHistory::off());
    }
}

fn record(h: MemoryHistory) -> Recording {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    cuda::record_memory_history_with(MemoryHistory::off()).unwrap();
    cuda::empty_cache().unwrap();
    cuda::record_memory_history_with(h).unwrap();
    Recording(guard)
}

/// Whether this executable's functions resolve to names and lines (debug information present).
fn resolvable() -> bool {
    let mut named = false;
    // (`resolve` looks up the byte before the address it is given.)
    let inside = (resolvable as *const () as usize + 1) as *mut std::ffi::c_void;
    backtrace::resolve(inside, |s| {
        named |= s.name().is_some_and(|n| n.to_string().contains("resolvable")) && s.lineno().is_some();
    });
    named
}

/// The frames of the last `action` event at `addr` on device `d`.
fn event_frames(s: &Snapshot, d: usize, action: TraceAction, addr: u64) -> Vec<Frame> {
    let e = s.device_traces[d].iter().rev().find(|e| e.action == action && e.addr == addr);
    e.unwrap_or_else(|| panic!("no {action:?} event at {addr:#x}")).frames.resolve()
}

/// The frames of the block at `addr`.
fn block_frames(s: &Snapshot, addr: u64) -> Vec<Frame> {
    let b = s.segments.iter().flat_map(|s| &s.blocks).find(|b| b.address == addr).expect("the block");
    b.frames.resolve()
}

/// The first frame is this file's `function`, at `line` (give or take 2).
fn assert_points_at(frames: &[Frame], function: &str, line: u32) {
    assert!(!frames.is_empty(), "no frames");
    if !resolvable() {
        return;
    }
    let f = &frames[0];
    assert!(f.filename.ends_with("memory_stacks.rs"), "first frame {f:?} of {frames:#?}");
    assert!(f.name.contains(function), "first frame {f:?}, expected {function}");
    assert!(f.line.abs_diff(line) <= 2, "first frame at line {}, the call is at line {line}: {f:?}", f.line);
    assert!(!frames.iter().any(|f| f.name.starts_with("cudasem::alloc")), "allocator frames trimmed: {frames:#?}");
}

#[test]
fn frames_point_at_the_callers_line_on_events_and_blocks() -> Result<()> {
    let _r = record(MemoryHistory::new().max_entries(10_000));
    let d = common::last_device();
    let line = line!() + 1;
    let a = RawBuffer::cached(Some(d), 3000, None)?;
    let s = cuda::memory_snapshot()?;
    let alloc = event_frames(&s, d, TraceAction::Alloc, a.ptr());
    assert_points_at(&alloc, "frames_point_at_the_callers_line_on_events_and_blocks", line);
    assert_eq!(block_frames(&s, a.ptr()), alloc, "the active block carries its alloc event's frames");
    // The segment made for it carries the same call's frames.
    let seg = s.segments.iter().find(|g| g.blocks.iter().any(|b| b.address == a.ptr())).unwrap();
    assert_eq!(seg.frames.resolve(), alloc);
    let ptr = a.ptr();
    let free_line = line!() + 1;
    drop(a);
    let s = cuda::memory_snapshot()?;
    let free = event_frames(&s, d, TraceAction::FreeRequested, ptr);
    assert_points_at(&free, "frames_point_at_the_callers_line_on_events_and_blocks", free_line);
    assert_ne!(free, alloc);
    assert!(block_frames(&s, ptr).is_empty(), "an inactive block carries no frames");
    Ok(())
}

#[test]
fn frames_resolve_to_names_files_and_lines_where_debug_information_exists() -> Result<()> {
    let _r = record(MemoryHistory::new());
    let b = RawBuffer::cached(Some(0), 1 << 20, None)?;
    let frames = block_frames(&cuda::memory_snapshot()?, b.ptr());
    assert!(!frames.is_empty() && frames.len() <= 24 * 8);
    if resolvable() {
        // Every named frame has a demangled name without its hash; the test's own frame has
        // its file and a line.
        assert!(frames.iter().all(|f| !f.name.is_empty() && !f.name.contains("::h0")), "{frames:#?}");
        assert!(frames.iter().any(|f| f.name.contains("memory_stacks::") && f.line > 0));
    } else {
        assert!(frames.iter().all(|f| !f.name.is_empty()), "unnamed frames show their address");
    }
    Ok(())
}

#[test]
fn no_frames_when_stacks_are_off_or_history_is_recorded_the_old_way() -> Result<()> {
    for way in 0..2 {
        let _r = record(MemoryHistory::new().stacks(Stacks::None));
        if way == 1 {
            cuda::record_memory_history(true, 1000)?;
        }
        let b = RawBuffer::cached(Some(0), 5000, None)?;
        let s = cuda::memory_snapshot()?;
        assert!(s.device_traces[0].iter().any(|e| e.action == TraceAction::Alloc && e.addr == b.ptr()));
        assert!(s.device_traces.iter().flatten().all(|e| e.frames.is_empty()), "way {way}");
        assert!(s.segments.iter().all(|g| g.frames.is_empty() && g.blocks.iter().all(|b| b.frames.is_empty())));
        let json: serde_json::Value = serde_json::from_str(&s.to_json()).unwrap();
        assert_eq!(json["device_traces"][0][0]["frames"], serde_json::json!([]), "the key stays, an empty list");
    }
    Ok(())
}

#[test]
fn context_chooses_which_stacks_are_kept() -> Result<()> {
    // "alloc": allocation events and blocks, not frees.
    {
        let _r = record(MemoryHistory::new().context(Some(HistoryContext::Alloc)));
        let b = RawBuffer::cached(Some(0), 5000, None)?;
        let ptr = b.ptr();
        drop(b);
        let s = cuda::memory_snapshot()?;
        assert!(!event_frames(&s, 0, TraceAction::Alloc, ptr).is_empty());
        assert!(event_frames(&s, 0, TraceAction::FreeRequested, ptr).is_empty());
        assert!(event_frames(&s, 0, TraceAction::FreeCompleted, ptr).is_empty());
    }
    // enabled "state", context "state": no events, but active blocks keep their stacks.
    {
        let h = MemoryHistory::new().enabled(Some(HistoryEnabled::State)).context(Some(HistoryContext::State));
        let _r = record(h);
        let b = RawBuffer::cached(Some(0), 5000, None)?;
        let s = cuda::memory_snapshot()?;
        assert!(s.device_traces.iter().all(|t| t.is_empty()), "no ring of events");
        assert!(!block_frames(&s, b.ptr()).is_empty());
        assert!(!cuda::memory_snapshot()?.segments.is_empty());
    }
    // Turned off: the blocks' stacks are dropped (under the lock: the other tests of this file record
    // while they hold it).
    let _r = record(MemoryHistory::off());
    let b = RawBuffer::cached(Some(0), 5000, None)?;
    assert!(block_frames(&cuda::memory_snapshot()?, b.ptr()).is_empty());
    Ok(())
}

#[test]
fn the_ring_stays_bounded_with_stacks() -> Result<()> {
    let _r = record(MemoryHistory::new().max_entries(5));
    for i in 0..20usize {
        drop(RawBuffer::cached(Some(0), 1000 + 512 * i, None)?);
    }
    let s = cuda::memory_snapshot()?;
    assert_eq!(s.device_traces[0].len(), 5);
    assert!(s.device_traces[0].iter().all(|e| !e.frames.is_empty()));
    Ok(())
}

#[test]
fn frames_round_trip_through_json_and_pytorchs_pickle() -> Result<()> {
    let _r = record(MemoryHistory::new());
    let line = line!() + 1;
    let b = RawBuffer::cached(Some(0), 7000, None)?;
    let s = cuda::memory_snapshot()?;
    let frames = event_frames(&s, 0, TraceAction::Alloc, b.ptr());
    let dicts: Vec<serde_json::Value> =
        frames.iter().map(|f| serde_json::json!({"filename": f.filename, "line": f.line, "name": f.name})).collect();
    // JSON: the event's and the block's `frames` are lists of {filename, line, name}.
    let json: serde_json::Value = serde_json::from_str(&s.to_json()).unwrap();
    let event = json["device_traces"][0]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|e| e["action"] == "alloc" && e["addr"] == b.ptr())
        .unwrap();
    assert_eq!(event["frames"], serde_json::Value::Array(dicts.clone()));
    let block = json["segments"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["blocks"].as_array().unwrap())
        .find(|x| x["address"] == b.ptr())
        .unwrap();
    assert_eq!(block["frames"], serde_json::Value::Array(dicts.clone()));
    // Pickle: the same through serde-pickle's reader.
    let pickle = s.to_pickle();
    let back: serde_json::Value =
        serde_pickle::from_slice(&pickle, serde_pickle::DeOptions::new().replace_unresolved_globals()).unwrap();
    assert_eq!(back["device_traces"][0], json["device_traces"][0]);
    // And through Python's own pickle, as PyTorch's memory_viz reads it (where python3 exists).
    let dir = std::env::temp_dir().join(format!("cudasem_stacks_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("snapshot.pickle");
    std::fs::write(&path, &pickle).unwrap();
    let script = format!(
        "import pickle,sys\n\
         s=pickle.load(open(sys.argv[1],'rb'))\n\
         e=[t for t in s['device_traces'][0] if t['action']=='alloc' and t['addr']=={addr}][-1]\n\
         b=[x for g in s['segments'] for x in g['blocks'] if x['address']=={addr}][0]\n\
         assert e['frames']==b['frames'] and len(e['frames'])>0\n\
         f=e['frames'][0]\n\
         assert sorted(f)==['filename','line','name'] and isinstance(f['line'],int)\n\
         print(f['filename'], f['line'], f['name'])\n",
        addr = b.ptr()
    );
    match std::process::Command::new("python3").arg("-c").arg(&script).arg(&path).output() {
        Ok(out) => {
            assert!(out.status.success(), "python3: {}", String::from_utf8_lossy(&out.stderr));
            let printed = String::from_utf8_lossy(&out.stdout).trim().to_string();
            assert_eq!(printed, format!("{} {} {}", frames[0].filename, frames[0].line, frames[0].name));
            if resolvable() {
                assert!(frames[0].line.abs_diff(line) <= 2, "{printed}");
            }
        }
        Err(e) => eprintln!("python3 not found ({e}): the pickle was checked with serde-pickle only"),
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[test]
fn many_events_resolve_once_per_address() -> Result<()> {
    // 2000 alloc/free pairs from one line: every event resolves (through the cache) to the
    // same frames, and the JSON holds them all.
    let _r = record(MemoryHistory::new());
    let mut ptrs = Vec::new();
    for _ in 0..2000 {
        let b = RawBuffer::cached(Some(0), 4096, None)?;
        ptrs.push(b.ptr());
    }
    let s = cuda::memory_snapshot()?;
    let allocs: Vec<_> = s.device_traces[0].iter().filter(|e| e.action == TraceAction::Alloc).collect();
    assert_eq!(allocs.len(), 2000);
    let first = allocs[0].frames.resolve();
    assert!(allocs.iter().all(|e| e.frames.resolve() == first));
    let json: serde_json::Value = serde_json::from_str(&s.to_json()).unwrap();
    let first_json = serde_json::to_value(&allocs[0].frames).unwrap();
    let events = json["device_traces"][0].as_array().unwrap();
    let same = events.iter().filter(|e| e["action"] == "alloc" && e["frames"] == first_json).count();
    assert_eq!(same, 2000, "every alloc event carries the frames in the JSON");
    assert_eq!(ptrs.len(), 2000);
    Ok(())
}

#[test]
fn the_runtime_is_usable_after_an_out_of_memory_error_with_stacks_on() -> Result<()> {
    let _r = record(MemoryHistory::new());
    let (_, total) = cuda::mem_get_info(Some(0))?;
    let line = line!() + 1;
    let r = RawBuffer::cached(Some(0), total + (64 << 20), None);
    assert!(matches!(r, Err(cudasem::Error::OutOfMemory { .. })));
    let s = cuda::memory_snapshot()?;
    let oom = s.device_traces[0].iter().rev().find(|e| e.action == TraceAction::Oom).expect("an oom event");
    assert_points_at(&oom.frames.resolve(), "the_runtime_is_usable_after_an_out_of_memory_error_with_stacks_on", line);
    let b = RawBuffer::cached(Some(0), 5000, None)?;
    assert!(!block_frames(&cuda::memory_snapshot()?, b.ptr()).is_empty());
    Ok(())
}
