//! Snapshots and their export: PyTorch's segment and block fields, the history, JSON, and a
//! pickle that reads back (serde-pickle) with the same content as the JSON and that Python (and so
//! PyTorch's `memory_viz`) loads. The Python checks are skipped when `python3` is missing.

// In a module named `alloc` so that `cargo test alloc` selects these tests.
mod alloc {
    use cudasem::alloc::{
        AccountingMemory, AllocatorSettings, BlockInfo, BlockState, CachingAllocator, PoolKind, SegmentInfo, Snapshot,
        TraceAction, TraceEntry,
    };
    use cudasem::driver::StreamId;
    use serde_json::Value as Json;
    use serde_pickle::{DeOptions, HashableValue, Value as Py};
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

        let v: Json = serde_json::from_str(&snap.to_json()).unwrap();
        let segments = v["segments"].as_array().unwrap_or_else(|| panic!("{v}"));
        assert_eq!(segments.len(), 3);
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
            "frames",
            "blocks",
        ] {
            assert!(segments[0].get(key).is_some(), "{key}");
        }
        let large_json = segments.iter().find(|s| s["segment_type"] == "large").unwrap();
        assert_eq!(large_json["total_size"], 20 << 20);
        assert_eq!(large_json["address"].as_u64(), Some(large.address));
        let blocks = segments[0]["blocks"].as_array().unwrap();
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

    /// PyTorch's own reader, where PyTorch is installed (the GPU machines): `python3 -m
    /// torch.cuda._memory_viz stats FILE` reads the pickle.
    #[test]
    fn pytorchs_memory_viz_reads_the_pickle() {
        let Some(()) = python() else { return };
        let has_torch = Command::new("python3").args(["-c", "import torch.cuda._memory_viz"]).output();
        if !has_torch.is_ok_and(|o| o.status.success()) {
            eprintln!("skipped: PyTorch is not installed");
            return;
        }
        let path = std::env::temp_dir().join(format!("cudasem-memory-viz-{}.pickle", std::process::id()));
        std::fs::write(&path, busy_allocator().snapshot().to_pickle()).unwrap();
        let out = Command::new("python3").args(["-m", "torch.cuda._memory_viz", "stats"]).arg(&path).output().unwrap();
        let _ = std::fs::remove_file(&path);
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && !stdout.trim().is_empty(), "memory_viz stats failed:\n{stdout}\n{stderr}");
        println!("{stdout}");
    }

    /// A pickled value as the JSON value it stands for (tuples become arrays, as in Python's
    /// `json.dumps`); panics on what the snapshot never holds.
    fn as_json(v: &Py) -> Json {
        match v {
            Py::None => Json::Null,
            Py::Bool(b) => Json::Bool(*b),
            Py::I64(i) => Json::from(*i),
            Py::Int(big) => Json::from(big.to_string().parse::<u64>().expect("a u64")),
            Py::F64(f) => Json::from(*f),
            Py::String(s) => Json::from(s.as_str()),
            Py::List(items) | Py::Tuple(items) => Json::Array(items.iter().map(as_json).collect()),
            Py::Dict(d) => Json::Object(
                d.iter()
                    .map(|(k, v)| match k {
                        HashableValue::String(k) => (k.clone(), as_json(v)),
                        other => panic!("a non-string key {other:?}"),
                    })
                    .collect(),
            ),
            other => panic!("unexpected {other:?} in a snapshot pickle"),
        }
    }

    fn get<'a>(v: &'a Py, key: &str) -> &'a Py {
        let Py::Dict(d) = v else { panic!("{v:?} is not a dict") };
        d.get(&HashableValue::String(key.into())).unwrap_or_else(|| panic!("no key {key} in {v:?}"))
    }

    #[test]
    fn the_pickle_reads_back_with_the_json_content() {
        let snap = busy_allocator().snapshot();
        let p = serde_pickle::value_from_slice(&snap.to_pickle(), DeOptions::new()).unwrap();
        let j: Json = serde_json::from_str(&snap.to_json()).unwrap();
        assert_eq!(as_json(&p), j);
        // What JSON cannot show: the pool id is a tuple, frames are lists, numbers are ints.
        let Py::List(segments) = get(&p, "segments") else { panic!() };
        assert_eq!(segments.len(), 3);
        assert_eq!(get(&segments[0], "segment_pool_id"), &Py::Tuple(vec![Py::I64(0), Py::I64(0)]));
        assert_eq!(get(&segments[0], "frames"), &Py::List(vec![]));
        let Py::List(blocks) = get(&segments[0], "blocks") else { panic!() };
        assert_eq!(get(&blocks[0], "frames"), &Py::List(vec![]));
        assert!(matches!(get(&blocks[0], "size"), Py::I64(n) if *n > 0));
        let Py::List(traces) = get(&p, "device_traces") else { panic!() };
        let Py::List(first) = &traces[0] else { panic!() };
        assert_eq!(get(&first[0], "action"), &Py::String("segment_alloc".into()));
    }

    /// A hand-made snapshot with integers at every pickle width and an `oom` entry.
    fn edge_snapshot() -> Snapshot {
        let sizes = [0usize, 255, 256, 65535, 65536, (1 << 31) - 1, 1 << 31, 1 << 32];
        let mut at = u64::MAX - (1u64 << 34);
        let blocks = sizes
            .iter()
            .map(|&size| {
                let b = BlockInfo {
                    address: at,
                    size,
                    requested_size: size / 2,
                    state: BlockState::Inactive,
                    frames: Default::default(),
                };
                at += size as u64;
                b
            })
            .collect::<Vec<_>>();
        let total: usize = sizes.iter().sum();
        let seg = SegmentInfo {
            device: 1,
            address: blocks[0].address,
            total_size: total,
            allocated_size: 0,
            active_size: 0,
            requested_size: 0,
            stream: StreamId(u64::MAX),
            segment_type: PoolKind::Large,
            is_expandable: true,
            segment_pool_id: Default::default(),
            blocks,
            frames: Default::default(),
        };
        let oom = TraceEntry {
            action: TraceAction::Oom,
            addr: 1 << 40,
            size: 3 << 30,
            stream: StreamId(7),
            time_us: 1,
            frames: Default::default(),
        };
        Snapshot { segments: vec![seg], device_traces: vec![vec![], vec![oom]] }
    }

    #[test]
    fn edge_values_read_back_in_rust_and_python() {
        let snap = edge_snapshot();
        let pickle = snap.to_pickle();
        let p = serde_pickle::value_from_slice(&pickle, DeOptions::new()).unwrap();
        let j: Json = serde_json::from_str(&snap.to_json()).unwrap();
        assert_eq!(as_json(&p), j);
        let seg = &j["segments"][0];
        assert_eq!(seg["stream"].as_u64(), Some(u64::MAX));
        assert_eq!(seg["blocks"][0]["address"].as_u64(), Some(u64::MAX - (1 << 34)));
        let sizes: Vec<u64> = seg["blocks"].as_array().unwrap().iter().map(|b| b["size"].as_u64().unwrap()).collect();
        assert_eq!(sizes, [0, 255, 256, 65535, 65536, (1 << 31) - 1, 1 << 31, 1 << 32]);
        let oom = &j["device_traces"][1][0];
        assert_eq!((oom["action"].as_str(), oom["device_free"].as_u64()), (Some("oom"), Some(1 << 40)));
        assert!(j["device_traces"][0].as_array().unwrap().is_empty());
        assert_eq!(Snapshot::default().to_json(), r#"{"segments":[],"device_traces":[]}"#);

        let Some(()) = python() else { return };
        let path = std::env::temp_dir().join(format!("cudasem-alloc-values-{}.pickle", std::process::id()));
        std::fs::write(&path, &pickle).unwrap();
        let script = r#"
import pickle, sys
v = pickle.load(open(sys.argv[1], 'rb'))
s = v['segments'][0]
assert s['stream'] == 2**64 - 1 and s['blocks'][0]['address'] == 2**64 - 1 - 2**34, s
assert [b['size'] for b in s['blocks']] == [0, 255, 256, 65535, 65536, 2**31 - 1, 2**31, 2**32]
assert s['segment_pool_id'] == (0, 0) and s['frames'] == [] and s['is_expandable'] is True
assert v['device_traces'][0] == [] and v['device_traces'][1][0]['device_free'] == 2**40
"#;
        let out = Command::new("python3").arg("-c").arg(script).arg(&path).output().unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}
