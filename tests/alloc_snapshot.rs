//! Snapshots and their export: PyTorch's segment and block fields, the history, JSON, and a
//! pickle that Python (and so PyTorch's `memory_viz`) loads. The Python checks are skipped when
//! `python3` is missing.

// In a module named `alloc` so that `cargo test alloc` selects these tests.
mod alloc {
    use cudasem::alloc::{AccountingMemory, AllocatorSettings, BlockState, CachingAllocator, PoolKind, Value};
    use cudasem::driver::StreamId;
    use std::process::Command;
    use std::sync::Arc;

    fn busy_allocator() -> CachingAllocator {
        let mem = Arc::new(AccountingMemory::new(1 << 30));
        let a = CachingAllocator::new(0, mem, AllocatorSettings::default());
        a.record_history(true, 1000);
        let p = a.malloc(1000, StreamId(0)).unwrap();
        let q = a.malloc(3 << 20, StreamId(0)).unwrap();
        let r = a.malloc(5000, StreamId(1)).unwrap();
        a.record_stream(r, StreamId(0)).unwrap();
        a.free(r).unwrap();
        a.free(p).unwrap();
        let _keep = q;
        a
    }

    #[test]
    fn snapshot_fields() {
        let a = busy_allocator();
        let snap = a.snapshot();
        assert_eq!(snap.segments.len(), 3);
        let large = snap.segments.iter().find(|s| s.segment_type == PoolKind::Large).unwrap();
        assert_eq!((large.total_size, large.allocated_size, large.requested_size), (20 << 20, 3 << 20, 3 << 20));
        assert_eq!(large.blocks[0].state, BlockState::ActiveAllocated);
        let s1 = snap.segments.iter().find(|s| s.stream == StreamId(1)).unwrap();
        assert_eq!(s1.blocks[0].state, BlockState::ActivePendingFree);
        assert_eq!((s1.active_size, s1.allocated_size), (5120, 0));
        assert!(snap.mismatches(&a.memory_stats()).is_empty());
        assert_eq!(snap.device_traces.len(), 1);

        let v = snap.to_value();
        let Some(Value::List(segments)) = v.get("segments") else { panic!("{v:?}") };
        for key in [
            "device",
            "address",
            "total_size",
            "allocated_size",
            "active_size",
            "requested_size",
            "stream",
            "segment_type",
            "segment_pool_id",
            "is_expandable",
            "blocks",
        ] {
            assert!(segments[0].get(key).is_some(), "{key}");
        }
        let Some(Value::List(blocks)) = segments[0].get("blocks") else { panic!() };
        for key in ["address", "size", "requested_size", "state", "frames"] {
            assert!(blocks[0].get(key).is_some(), "{key}");
        }
        let json = snap.to_json();
        assert!(json.starts_with("{\"segments\":[{\"device\":0,"), "{json}");
        assert!(json.contains("\"state\":\"active_pending_free\"") && json.contains("\"action\":\"free_requested\""));
    }

    fn python() -> Option<()> {
        match Command::new("python3").arg("--version").output() {
            Ok(o) if o.status.success() => Some(()),
            _ => {
                eprintln!("skipped: python3 not found");
                None
            }
        }
    }

    #[test]
    fn pickle_and_json_load_in_python() {
        let Some(()) = python() else { return };
        let a = busy_allocator();
        let snap = a.snapshot();
        let dir = std::env::temp_dir().join(format!("cudasem-alloc-snapshot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (pickle, json) = (dir.join("snapshot.pickle"), dir.join("snapshot.json"));
        std::fs::write(&pickle, snap.to_pickle()).unwrap();
        std::fs::write(&json, snap.to_json()).unwrap();
        let script = r#"
import json, pickle, sys
p = pickle.load(open(sys.argv[1], 'rb'))
j = json.load(open(sys.argv[2]))
assert json.loads(json.dumps(p)) == j, (p, j)  # tuples become lists in JSON
assert set(p) == {'segments', 'device_traces'}
segs, traces = p['segments'], p['device_traces']
assert len(segs) == 3 and len(traces) == 1
for s in segs:
    assert sum(b['size'] for b in s['blocks']) == s['total_size']
    assert s['segment_type'] in ('small', 'large') and s['address'] > 2**40
    assert sorted(s) == sorted(['device', 'address', 'total_size', 'allocated_size', 'active_size',
        'requested_size', 'stream', 'segment_type', 'segment_pool_id', 'is_expandable', 'frames', 'blocks'])
    for b in s['blocks']:
        assert b['state'] in ('active_allocated', 'active_pending_free', 'inactive')
pickled_pool = pickle.load(open(sys.argv[1], 'rb'))['segments'][0]['segment_pool_id']
assert pickled_pool == (0, 0), pickled_pool
actions = [e['action'] for e in traces[0]]
assert actions[:2] == ['segment_alloc', 'alloc'], actions
assert 'free_requested' in actions and 'free_completed' in actions
assert all(isinstance(e['time_us'], int) and e['time_us'] > 1.6e15 for e in traces[0])
print('ok', len(actions))
"#;
        let out = Command::new("python3").arg("-c").arg(script).arg(&pickle).arg(&json).output().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            out.status.success(),
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn pickle_round_trips_edge_values() {
        let Some(()) = python() else { return };
        let v = Value::Dict(vec![
            (
                "ints".into(),
                Value::List(
                    [0i128, 255, 256, 65535, 65536, -1, -129, 1 << 31, -(1 << 31), -(1 << 31) - 1, u64::MAX as i128]
                        .map(Value::Int)
                        .to_vec(),
                ),
            ),
            ("text".into(), Value::str("tab\t quote\" é 漢")),
            ("float".into(), Value::Float(-2.5)),
            ("flags".into(), Value::Tuple(vec![Value::Bool(true), Value::Bool(false), Value::None])),
            ("empty".into(), Value::Tuple(vec![])),
        ]);
        let path = std::env::temp_dir().join(format!("cudasem-alloc-values-{}.pickle", std::process::id()));
        let snap = cudasem::alloc::Snapshot::default();
        assert_eq!(snap.to_json(), r#"{"segments":[],"device_traces":[]}"#);
        std::fs::write(&path, v.to_pickle()).unwrap();
        let script = r#"
import pickle, sys
v = pickle.load(open(sys.argv[1], 'rb'))
assert v['ints'] == [0, 255, 256, 65535, 65536, -1, -129, 2**31, -2**31, -2**31 - 1, 2**64 - 1], v['ints']
assert v['text'] == 'tab\t quote" é 漢' and v['float'] == -2.5
assert v['flags'] == (True, False, None) and v['empty'] == ()
"#;
        let out = Command::new("python3").arg("-c").arg(script).arg(&path).output().unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}
