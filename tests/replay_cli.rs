//! `cudasem replay`: the command a user runs on a PyTorch allocator trace.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

fn replay(path: &std::path::Path, conf: &str, json: bool) -> Output {
    let mut cmd = Command::new(common::cudasem_binary());
    cmd.arg("replay").arg(path).env("CUDASEM_ALLOC_CONF", conf);
    if json {
        cmd.arg("--json");
    }
    cmd.output().expect("the cudasem binary starts")
}

fn temp_trace(name: &str, text: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("cudasem-{}-{name}.csv", std::process::id()));
    std::fs::write(&p, text).expect("temp file");
    p
}

/// The number after `"key":` in a flat JSON object.
fn field(json: &str, key: &str) -> f64 {
    let at = json.find(&format!("\"{key}\":")).unwrap_or_else(|| panic!("no {key} in {json}")) + key.len() + 3;
    let rest = &json[at..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    rest[..end].trim().parse().unwrap_or_else(|_| panic!("{key} is not a number in {json}"))
}

#[test]
fn a_small_trace_reports_the_figures_as_json() {
    // Two 3 MiB blocks live at once, one freed and its memory reused by a third of 2 MiB.
    let p = temp_trace(
        "small",
        "action,addr,size,stream\nalloc,4096,3145728,0\nalloc,8192,3145728,0\nfree_requested,4096,3145728,0\nfree_completed,4096,3145728,0\nalloc,12288,2097152,0\nfree_completed,8192,3145728,0\nfree_completed,12288,2097152,0\n",
    );
    let o = replay(&p, "", true);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(field(&out, "allocs"), 3.0);
    assert_eq!(field(&out, "peak_live_requested_bytes"), 6291456.0);
    assert_eq!(field(&out, "peak_allocated_bytes"), 6291456.0);
    assert_eq!(field(&out, "segment_allocs"), 1.0, "both 3 MiB blocks fit one 20 MiB segment: {out}");
    assert_eq!(field(&out, "peak_reserved_bytes"), 20971520.0);
    assert!(field(&out, "ns_per_op") > 0.0);
    let _ = std::fs::remove_file(p);
}

#[test]
fn a_malformed_trace_names_the_line_and_exits_2() {
    let p = temp_trace("bad", "action,addr,size,stream\nalloc,4096,512,0\nalloc,8192,lots,0\n");
    let o = replay(&p, "", false);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("line 3") && !err.contains("panicked"), "{err}");
    let _ = std::fs::remove_file(&p);

    let p = temp_trace("unknown-free", "action,addr,size,stream\nfree_completed,4096,512,0\n");
    let o = replay(&p, "", false);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("line 2"));
    let _ = std::fs::remove_file(&p);

    let o = replay(std::path::Path::new("/no/such/trace.csv"), "", false);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/no/such/trace.csv"));
}

#[test]
fn a_bad_allocator_setting_is_named() {
    let p = temp_trace("conf", "action,addr,size,stream\nalloc,4096,512,0\n");
    let o = replay(&p, "roundup_power2_divisions:3", false);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("roundup_power2_divisions"), "{err}");
    let _ = std::fs::remove_file(p);
}

#[test]
fn resnet50_beats_pytorch_from_the_command_line() {
    // The repository's copy of the ResNet-50 trace, written out so the test runs from any folder.
    let trace = temp_trace("resnet50", include_str!("../bench/traces/resnet50_train.csv"));
    let out = String::from_utf8_lossy(&replay(&trace, "", true).stdout).into_owned();
    assert!(field(&out, "peak_reserved_bytes") <= 7_033_847_808.0, "{out}");
    assert!(field(&out, "segment_allocs") <= 104.0, "{out}");
    let out = String::from_utf8_lossy(&replay(&trace, "expandable_segments:True", true).stdout).into_owned();
    assert!(field(&out, "peak_reserved_bytes") <= 1.03 * field(&out, "peak_live_requested_bytes"), "{out}");
    assert!(field(&out, "pages_moved_bytes") > 0.0 && field(&out, "page_unmaps") > 0.0, "{out}");
    let _ = std::fs::remove_file(trace);
}

/// A folder with the repository's ResNet-50 and two-stream traces (one gzip-compressed) and
/// their PyTorch outcome files, written out so the test runs from any folder.
/// The traces in a temporary folder of their own per test (`tag`): the tests of one process run
/// at once, and each removes its folder when done.
fn trace_folder(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cudasem-{}-{tag}-traces", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp folder");
    let files: [(&str, &[u8]); 4] = [
        ("resnet50_train.csv", include_bytes!("../bench/traces/resnet50_train.csv")),
        ("resnet50_train.pytorch.json", include_bytes!("../bench/traces/resnet50_train.pytorch.json")),
        ("prefetch_two_streams.csv.gz", include_bytes!("../bench/traces/prefetch_two_streams.csv.gz")),
        ("prefetch_two_streams.pytorch.json", include_bytes!("../bench/traces/prefetch_two_streams.pytorch.json")),
    ];
    for (name, bytes) in files {
        std::fs::write(dir.join(name), bytes).expect("temp file");
    }
    dir
}

#[test]
fn compare_sets_pytorchs_figures_beside_cudasems() {
    let dir = trace_folder("compare");
    let run = |json: bool| {
        let mut cmd = Command::new(common::cudasem_binary());
        cmd.arg("replay").arg(dir.join("prefetch_two_streams.csv.gz"));
        cmd.arg("--compare").arg(dir.join("prefetch_two_streams.pytorch.json")).env("CUDASEM_ALLOC_CONF", "");
        if json {
            cmd.arg("--json");
        }
        cmd.output().expect("the cudasem binary starts")
    };
    let o = run(true);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}{}", String::from_utf8_lossy(&o.stderr));
    let at = out.find("\"pytorch\":").unwrap_or_else(|| panic!("no PyTorch figures in {out}"));
    let pytorch = &out[at..];
    assert_eq!(field(pytorch, "peak_reserved_bytes"), 2_438_987_776.0, "{out}");
    assert_eq!(field(pytorch, "segment_allocs"), 28.0, "{out}");
    let ratio = field(pytorch, "reserved_ratio");
    assert!(ratio <= 1.0, "no more than PyTorch on the two-stream trace: {out}");
    let ours = field(&out, "peak_reserved_bytes");
    assert!((ratio - ours / 2_438_987_776.0).abs() < 1e-4, "{out}");
    assert!(field(&out, "peak_allocated_bytes") >= field(&out, "peak_live_requested_bytes"));
    let text = String::from_utf8_lossy(&run(false).stdout).into_owned();
    assert!(
        text.contains("PyTorch (default settings): peak reserved") && text.contains("driver allocations 28"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn all_replays_every_trace_of_a_folder_in_one_table() {
    let dir = trace_folder("all");
    let o = Command::new(common::cudasem_binary())
        .args(["replay", "--all"])
        .arg(&dir)
        .env("CUDASEM_ALLOC_CONF", "expandable_segments:True")
        .output()
        .expect("the cudasem binary starts");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}{}", String::from_utf8_lossy(&o.stderr));
    let rows: Vec<&str> = out.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| trace")).collect();
    assert_eq!(rows.len(), 2, "one row per trace: {out}");
    assert!(rows[0].starts_with("| prefetch_two_streams |") && rows[1].starts_with("| resnet50_train |"), "{out}");
    // The PyTorch column: 1.0709 x live for the two-stream trace under expandable segments.
    assert!(rows[0].contains("| 1.0709 |"), "{out}");
    let o = Command::new(common::cudasem_binary()).args(["replay", "--all", "/no/such/folder"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/no/such/folder"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_pytorch_snapshot_pickle_replays_its_device_traces() {
    // Dumped by PyTorch on a GPU (tests/fixtures/pytorch_gpu_snapshot.py): every allocation of the
    // run is in the history, so the live peak is PyTorch's own `requested_bytes` peak.
    let fixtures = common::repo_root().join("tests/fixtures");
    let expected = std::fs::read_to_string(fixtures.join("pytorch_gpu_snapshot.expected.json")).unwrap();
    let o = replay(&fixtures.join("pytorch_gpu_snapshot.pickle"), "", true);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(field(&out, "peak_live_requested_bytes"), field(&expected, "peak_requested"));
    assert!(field(&out, "allocs") > 100.0 && field(&out, "frees") > 100.0, "{out}");
    assert!(field(&out, "peak_reserved_bytes") >= field(&out, "peak_live_requested_bytes"), "{out}");

    // The page too, with its PyTorch line from the snapshot's segment entries, and how to read it.
    let page = std::env::temp_dir().join(format!("cudasem-{}-snapshot-plot.html", std::process::id()));
    let o = Command::new(common::cudasem_binary())
        .arg("replay")
        .arg(fixtures.join("pytorch_gpu_snapshot.pickle"))
        .arg("--plot")
        .arg(&page)
        .env("CUDASEM_ALLOC_CONF", "")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let html = std::fs::read_to_string(&page).unwrap();
    for text in
        ["How to read this page", "Two PyTorch reserved peaks", "Two x-axes", "PyTorch reserved, default settings"]
    {
        assert!(html.contains(text), "the page has no `{text}`");
    }
    let _ = std::fs::remove_file(page);
}

#[test]
fn a_snapshot_whose_ring_starts_mid_run_replays_the_part_it_holds_whole() {
    use cudasem::cuda::{Snapshot, StreamId, TraceAction, TraceEntry};
    use rand::{RngExt, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(36);
    let e = |action, addr: u64, size| TraceEntry {
        action,
        addr,
        size,
        stream: StreamId(0),
        time_us: 0,
        frames: Default::default(),
    };
    // Blocks 0..n live before the ring starts (only their frees are in it), then random blocks.
    let (n, m) = (rng.random_range(1..20u64), rng.random_range(1..40u64));
    let mut entries: Vec<TraceEntry> = (0..n).map(|i| e(TraceAction::FreeCompleted, 4096 * (i + 1), 512)).collect();
    let sizes: Vec<usize> = (0..m).map(|_| rng.random_range(1..1 << 22)).collect();
    for (i, &size) in sizes.iter().enumerate() {
        entries.push(e(TraceAction::Alloc, 1 << 40 | (i as u64) << 23, size));
    }
    for (i, &size) in sizes.iter().enumerate() {
        entries.push(e(TraceAction::FreeCompleted, 1 << 40 | (i as u64) << 23, size));
    }
    let snapshot = Snapshot { segments: vec![], device_traces: vec![vec![], entries] };
    let p = std::env::temp_dir().join(format!("cudasem-{}-ring.pickle", std::process::id()));
    std::fs::write(&p, snapshot.to_pickle()).unwrap();
    let o = replay(&p, "", true);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!((field(&out, "allocs"), field(&out, "frees")), (m as f64, m as f64));
    assert_eq!(field(&out, "peak_live_requested_bytes"), sizes.iter().sum::<usize>() as f64);
    let _ = std::fs::remove_file(p);
}
