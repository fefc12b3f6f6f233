//! `cudasem memviz` and `cudasem::memviz`, checked as a person looks at the picture: the SVG is
//! rendered to pixels (resvg) and the pixels are read — the timeline's area reaches the peak's
//! height and the reserved line the top, the segment view shows one bar per segment, a free hole
//! is drawn as free and a pending block as pending. Snapshots come from cudasem (JSON and pickle)
//! and from a pickle in PyTorch's `_dump_snapshot` format (`tests/fixtures/pytorch_snapshot.py`
//! writes it with Python's own pickle, and the figures a forward run of its allocator reaches).

mod common;

use cudasem::cuda::{BlockInfo, BlockState, PoolKind, SegmentInfo, Snapshot, StreamId, TraceAction, TraceEntry};
use cudasem::memviz::{self, Options};
use resvg::tiny_skia::Pixmap;
use std::path::PathBuf;
use std::process::Command;

const MIB: usize = 1 << 20;

/// The SVG drawn to pixels (text is not drawn: no fonts needed).
fn pixels(svg: &str) -> Pixmap {
    let tree = resvg::usvg::Tree::from_str(svg, &resvg::usvg::Options::default()).expect("valid SVG");
    let size = tree.size().to_int_size();
    let mut map = Pixmap::new(size.width(), size.height()).expect("a size");
    resvg::render(&tree, resvg::tiny_skia::Transform::default(), &mut map.as_mut());
    map
}

fn rgb(map: &Pixmap, x: u32, y: u32) -> [u8; 3] {
    let p = map.pixel(x, y).expect("inside").demultiply();
    [p.red(), p.green(), p.blue()]
}

fn hex(color: &str) -> [u8; 3] {
    let c = |i| u8::from_str_radix(&color[i..i + 2], 16).unwrap();
    [c(1), c(3), c(5)]
}

fn near(a: [u8; 3], b: [u8; 3]) -> bool {
    a.iter().zip(b).all(|(&x, y)| x.abs_diff(y) <= 12)
}

/// The numbers of attribute `name` (`data-plot="x y w h"`).
fn attribute(svg: &str, name: &str) -> Vec<f64> {
    let at = svg.find(&format!("{name}=\"")).unwrap_or_else(|| panic!("no {name}")) + name.len() + 2;
    let end = at + svg[at..].find('"').unwrap();
    svg[at..end].split(' ').map(|v| v.parse().unwrap()).collect()
}

fn entry(action: TraceAction, addr: u64, size: usize) -> TraceEntry {
    TraceEntry { action, addr, size, stream: StreamId(0), time_us: 0, frames: Default::default() }
}

/// A segment tiled by `blocks` of `(size, requested, state)`.
fn segment(address: u64, stream: u64, pool: PoolKind, blocks: &[(usize, usize, BlockState)]) -> SegmentInfo {
    let mut s = SegmentInfo {
        device: 0,
        address,
        total_size: 0,
        allocated_size: 0,
        active_size: 0,
        requested_size: 0,
        stream: StreamId(stream),
        segment_type: pool,
        is_expandable: false,
        segment_pool_id: Default::default(),
        blocks: Vec::new(),
        frames: Default::default(),
    };
    for &(size, requested_size, state) in blocks {
        s.blocks.push(BlockInfo {
            address: address + s.total_size as u64,
            size,
            requested_size,
            state,
            frames: Default::default(),
        });
        s.total_size += size;
        if state == BlockState::ActiveAllocated {
            s.allocated_size += size;
        }
        if state.is_active() {
            s.active_size += size;
            s.requested_size += requested_size;
        }
    }
    s
}

/// A 20 MiB segment where 4, 2 and 6 MiB are allocated (12 MiB live at the peak), then the
/// 2 MiB freed and 1 MiB allocated in its place: the end holds 4 + 1 + 6 MiB and a 1 MiB hole.
fn workload() -> Snapshot {
    use BlockState::*;
    use TraceAction::*;
    let base = 1u64 << 32;
    let events = vec![
        entry(SegmentAlloc, base, 20 * MIB),
        entry(Alloc, base, 4 * MIB),
        entry(Alloc, base + (4 * MIB) as u64, 2 * MIB),
        entry(Alloc, base + (6 * MIB) as u64, 6 * MIB),
        entry(FreeRequested, base + (4 * MIB) as u64, 2 * MIB),
        entry(FreeCompleted, base + (4 * MIB) as u64, 2 * MIB),
        entry(Alloc, base + (4 * MIB) as u64, MIB),
    ];
    let blocks = [
        (4 * MIB, 4 * MIB, ActiveAllocated),
        (MIB, MIB, ActiveAllocated),
        (MIB, 0, Inactive),
        (6 * MIB, 6 * MIB, ActiveAllocated),
        (8 * MIB, 0, Inactive),
    ];
    cudasem::cuda::Snapshot { segments: vec![segment(base, 0, PoolKind::Large, &blocks)], device_traces: vec![events] }
}

/// Whether `c` is `line` blended with the white page (an antialiased edge of a line).
fn on_white(c: [u8; 3], line: [u8; 3]) -> bool {
    let a = (255.0 - c[1] as f64) / (255.0 - line[1] as f64);
    (0.0..=1.05).contains(&a)
        && [0, 2].iter().all(|&i| ((255.0 - a * (255.0 - line[i] as f64)) - c[i] as f64).abs() <= 14.0)
}

/// Whether `c` is mostly `line` (at least half of the pixel covered).
fn strong(c: [u8; 3], line: [u8; 3]) -> bool {
    on_white(c, line) && (255.0 - c[1] as f64) / (255.0 - line[1] as f64) >= 0.5
}

/// Whether a timeline pixel belongs to the area: not the page, the grid, the reserved line or
/// the marks' ink (nor their antialiased edges).
fn is_area(c: [u8; 3]) -> bool {
    !on_white(c, hex("#c0392b")) && !on_white(c, hex("#333333")) && !on_white(c, hex("#e4e4e4"))
}

#[test]
fn the_timeline_area_reaches_the_peak_and_the_reserved_line_the_top() {
    let picture = memviz::render(&workload(), &Options::default()).unwrap();
    let s = picture.summary();
    assert_eq!((s.peak_allocated, s.peak_at, s.peak_reserved), (12 * MIB, Some(3), 20 * MIB));
    let svg = picture.timeline_svg().expect("a history");
    let [x, y, w, h] = attribute(&svg, "data-plot")[..] else { panic!("four numbers") };
    let map = pixels(&svg);
    let rows = |pred: &dyn Fn([u8; 3]) -> bool| {
        (y as u32 - 2..(y + h) as u32).find(|&r| (x as u32..(x + w) as u32).any(|c| pred(rgb(&map, c, r))))
    };
    let area_top = rows(&is_area).expect("an area") as f64;
    let expected = y + h * (1.0 - 12.0 / 20.0);
    assert!((area_top - expected).abs() <= 1.5, "the area's top at {area_top}, the peak's height at {expected}");
    let red_top = rows(&|c| near(c, hex("#c0392b"))).expect("a reserved line") as f64;
    assert!((red_top - y).abs() <= 1.5, "the reserved line peaks at the top: {red_top} vs {y}");
    // Before the first allocation (moment 0 of 8) nothing is live: no area in that column.
    let column = (x + w / 8.0 * 0.5) as u32;
    assert!((y as u32..(y + h) as u32 - 1).all(|r| !is_area(rgb(&map, column, r))), "nothing before the trace");
}

/// The segment bars: connected groups of drawn pixels below the view's legend.
fn bars(map: &Pixmap, from_y: u32) -> Vec<(u32, u32, u32, u32)> {
    let (w, h) = (map.width(), map.height());
    let drawn = |x: u32, y: u32| rgb(map, x, y) != [255, 255, 255];
    let mut seen = vec![false; (w * h) as usize];
    let mut found = Vec::new();
    for y0 in from_y..h {
        for x0 in 0..w {
            if seen[(y0 * w + x0) as usize] || !drawn(x0, y0) {
                continue;
            }
            let (mut stack, mut bounds) = (vec![(x0, y0)], (x0, y0, x0, y0));
            seen[(y0 * w + x0) as usize] = true;
            while let Some((x, y)) = stack.pop() {
                bounds = (bounds.0.min(x), bounds.1.min(y), bounds.2.max(x), bounds.3.max(y));
                for (nx, ny) in [(x.wrapping_sub(1), y), (x + 1, y), (x, y.wrapping_sub(1)), (x, y + 1)] {
                    if nx < w && ny < h && ny >= from_y && !seen[(ny * w + nx) as usize] && drawn(nx, ny) {
                        seen[(ny * w + nx) as usize] = true;
                        stack.push((nx, ny));
                    }
                }
            }
            found.push(bounds);
        }
    }
    found
}

#[test]
fn the_segment_view_shows_one_bar_per_segment() {
    use BlockState::*;
    let big = [(6 * MIB, 5 * MIB, ActiveAllocated), (14 * MIB, 0, Inactive)];
    let small = [(512, 100, ActiveAllocated), (2 * MIB - 512, 0, Inactive)];
    let snapshot = Snapshot {
        segments: vec![
            segment(1 << 30, 0, PoolKind::Large, &big),
            segment(2 << 30, 0, PoolKind::Large, &big),
            segment(3 << 30, 0, PoolKind::Small, &small),
            segment(4 << 30, 7, PoolKind::Small, &small),
            segment(5 << 30, 7, PoolKind::Large, &[(40 * MIB, 40 * MIB, ActiveAllocated)]),
        ],
        device_traces: vec![vec![]],
    };
    let picture = memviz::render(&snapshot, &Options::default()).unwrap();
    assert!(picture.timeline_svg().is_none(), "no history, no timeline");
    let map = pixels(&picture.segments_svg());
    let found = bars(&map, 58);
    assert_eq!(found.len(), 5, "{found:?}");
    let widths: Vec<u32> = found.iter().map(|b| b.2 - b.0 + 1).collect();
    let largest = *widths.iter().max().unwrap() as f64;
    let twenty = widths.iter().filter(|&&w| (w as f64 / largest - 0.5).abs() < 0.02).count();
    assert_eq!(twenty, 2, "the 20 MiB segments are half as long as the 40 MiB one: {widths:?}");
}

/// The bar's inside `(x0, x1, middle row)` of the first bar below `from_y`.
fn first_bar(map: &Pixmap, from_y: u32) -> (u32, u32, u32) {
    let outline = hex("#555555");
    let top = (from_y..map.height()).find(|&y| (0..map.width()).any(|x| near(rgb(map, x, y), outline))).expect("a bar");
    let mid = top + 10;
    let xs: Vec<u32> = (0..map.width()).filter(|&x| near(rgb(map, x, mid), outline)).collect();
    (xs[0] + 1, *xs.last().unwrap(), mid)
}

#[test]
fn a_free_hole_is_drawn_free_and_a_pending_block_pending() {
    let snapshot = workload();
    let map = pixels(&memviz::render(&snapshot, &Options::default()).unwrap().segments_svg());
    let (x0, x1, mid) = first_bar(&map, 58);
    let at = |mib: f64| rgb(&map, x0 + ((x1 - x0) as f64 * mib / 20.0) as u32, mid);
    // At the peak (after event 3): 4 MiB, 2 MiB, 6 MiB allocated, then 8 MiB free.
    for (mib, color) in [(2.0, "#2f6db5"), (5.0, "#2f6db5"), (9.0, "#2f6db5"), (16.0, "#eeeeee")] {
        assert!(near(at(mib), hex(color)), "at {mib} MiB: {:?}, expected {color}", at(mib));
    }
    // After event 4 the 2 MiB block is freed but not yet back: pending.
    let pending = memviz::render(&snapshot, &Options { at: Some(4), ..Options::default() }).unwrap();
    assert_eq!(pending.summary().pending_free, 2 * MIB);
    let map = pixels(&pending.segments_svg());
    let (x0, x1, mid) = first_bar(&map, 58);
    let c = rgb(&map, x0 + (x1 - x0) * 5 / 20, mid);
    assert!(near(c, hex("#e69138")), "pending at 5 MiB: {c:?}");
    // At the end: the 1 MiB hole between the new 1 MiB block and the 6 MiB one is free.
    let end = memviz::render(&snapshot, &Options { at: Some(6), ..Options::default() }).unwrap();
    assert_eq!((end.summary().free, end.summary().largest_free), (9 * MIB, 8 * MIB));
    let map = pixels(&end.segments_svg());
    let (x0, x1, mid) = first_bar(&map, 58);
    let hole = rgb(&map, x0 + ((x1 - x0) as f64 * 5.5 / 20.0) as u32, mid);
    let beside = rgb(&map, x0 + ((x1 - x0) as f64 * 4.5 / 20.0) as u32, mid);
    assert!(near(hole, hex("#eeeeee")) && near(beside, hex("#2f6db5")), "hole {hole:?}, block {beside:?}");
}

/// The PyTorch-format pickle (embedded: the tests also run from a copy of the built executables).
const PYTORCH_PICKLE: &[u8] = include_bytes!("fixtures/pytorch_snapshot.pickle");
/// What a forward run of the fixture's allocator reached.
const PYTORCH_EXPECTED: &str = include_str!("fixtures/pytorch_snapshot.expected.json");

/// `bytes` in a file of its own under the temporary folder.
fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cudasem-memviz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn pytorchs_pickle_reads_and_its_segments_walk_back_to_the_peak() {
    let path = temp_file("pytorch.pickle", PYTORCH_PICKLE);
    let snapshot = memviz::read_snapshot(&path).unwrap();
    let _ = std::fs::remove_file(path);
    let expected: serde_json::Value = serde_json::from_str(PYTORCH_EXPECTED).unwrap();
    let n = |v: &serde_json::Value| v.as_u64().unwrap() as usize;
    let picture = memviz::render(&snapshot, &Options::default()).unwrap();
    let s = picture.summary();
    assert_eq!(s.events, n(&expected["events"]));
    assert_eq!(s.peak_allocated, n(&expected["peak"]["live_requested"]));
    assert_eq!(s.peak_at, Some(n(&expected["peak"]["event"])));
    assert_eq!(s.peak_reserved, n(&expected["peak_reserved"]));
    assert_eq!(
        (s.driver_allocations, s.driver_frees, s.ooms),
        (n(&expected["segment_allocs"]), n(&expected["segment_frees"]), 1)
    );
    // Walked back from the end to the peak, the segments are what the forward run had there.
    let peak = &expected["peak"];
    assert_eq!((s.segments, s.reserved), (n(&peak["segments"]), n(&peak["reserved"])));
    assert_eq!((s.allocated, s.pending_free), (n(&peak["allocated"]), n(&peak["pending_free"])));
    let end = memviz::render(&snapshot, &Options { at: Some(s.events - 1), ..Options::default() }).unwrap();
    let (e, x) = (end.summary(), &expected["end"]);
    assert_eq!(
        (e.segments, e.reserved, e.allocated, e.pending_free),
        (n(&x["segments"]), n(&x["reserved"]), n(&x["allocated"]), n(&x["pending_free"]))
    );
    // The OOM is marked on the timeline's axis, at its event.
    let svg = picture.timeline_svg().unwrap();
    let [x, y, w, h] = attribute(&svg, "data-plot")[..] else { panic!("four numbers") };
    let moments = attribute(&svg, "data-moments")[0];
    let oom = snapshot.device_traces[0].iter().position(|e| e.action == TraceAction::Oom).unwrap() as f64;
    let map = pixels(&svg);
    let mark = rgb(&map, (x + w * (oom + 1.5) / moments) as u32, (y + h - 3.0) as u32);
    assert!(strong(mark, hex("#c0392b")), "an OOM mark at event {oom}: {mark:?}");
    let streams: Vec<u64> = snapshot.segments.iter().map(|g| g.stream.0).collect();
    assert!(streams.contains(&94433923213312), "PyTorch's stream pointers read as they are: {streams:?}");
}

#[test]
fn a_pickle_written_with_serde_pickle_in_pytorchs_format_reads() {
    use serde_pickle::{HashableValue as K, Value as V};
    let s = |t: &str| V::String(t.into());
    let k = |t: &str| K::String(t.into());
    let frames =
        V::List(vec![V::Dict([(k("filename"), s("x.py")), (k("line"), V::I64(3)), (k("name"), s("f"))].into())]);
    let block = |address: i64, size: i64, req: i64, state: &str| {
        V::Dict(
            [
                (k("address"), V::I64(address)),
                (k("size"), V::I64(size)),
                (k("requested_size"), V::I64(req)),
                (k("state"), s(state)),
                (k("frames"), frames.clone()),
            ]
            .into(),
        )
    };
    let segment = V::Dict(
        [
            (k("device"), V::I64(0)),
            (k("address"), V::I64(1 << 40)),
            (k("total_size"), V::I64(2 << 20)),
            (k("allocated_size"), V::I64(1024)),
            (k("active_size"), V::I64(1024)),
            (k("requested_size"), V::I64(1000)),
            (k("stream"), V::I64(0)),
            (k("segment_type"), s("small")),
            (k("segment_pool_id"), V::Tuple(vec![V::I64(0), V::I64(0)])),
            (k("is_expandable"), V::Bool(false)),
            (k("frames"), frames.clone()),
            (
                k("blocks"),
                V::List(vec![
                    block(1 << 40, 1024, 1000, "active_allocated"),
                    block((1 << 40) + 1024, (2 << 20) - 1024, 0, "inactive"),
                ]),
            ),
        ]
        .into(),
    );
    let event = |action: &str, addr: i64, size: i64| {
        V::Dict(
            [
                (k("action"), s(action)),
                (k("addr"), V::I64(addr)),
                (k("size"), V::I64(size)),
                (k("stream"), V::I64(0)),
                (k("time_us"), V::I64(17)),
                (k("frames"), frames.clone()),
            ]
            .into(),
        )
    };
    let dict = V::Dict(
        [
            (k("segments"), V::List(vec![segment])),
            (
                k("device_traces"),
                V::List(vec![V::List(vec![
                    event("segment_alloc", 1 << 40, 2 << 20),
                    event("alloc", 1 << 40, 1000),
                    event("some_future_action", 0, 0),
                ])]),
            ),
            (k("allocator_settings"), V::Dict([(k("expandable_segments"), V::Bool(false))].into())),
        ]
        .into(),
    );
    let bytes = serde_pickle::value_to_vec(&dict, serde_pickle::SerOptions::new()).unwrap();
    let snapshot = memviz::load_snapshot(&bytes).unwrap();
    assert_eq!(snapshot.segments.len(), 1);
    assert_eq!(snapshot.segments[0].segment_type, PoolKind::Small);
    assert_eq!(snapshot.device_traces[0].len(), 2, "an action cudasem does not know is left out");
    let s = memviz::render(&snapshot, &Options::default()).unwrap();
    assert_eq!((s.summary().peak_allocated, s.summary().peak_reserved, s.summary().allocated), (1000, 2 << 20, 1024));
}

#[test]
fn cudasems_own_snapshot_of_a_workload_draws_through_json_and_pickle() {
    // The allocator of this process, on whatever driver the tests run on (sim or CUDA).
    if !common::one_device() {
        return;
    }
    let device = common::last_device();
    cudasem::cuda::record_memory_history(true, 10_000).unwrap();
    let a = cudasem::testing::RawBuffer::cached(device, 3 * MIB, None).unwrap();
    let b = cudasem::testing::RawBuffer::cached(device, 5 * MIB, None).unwrap();
    drop(a);
    let snapshot = cudasem::cuda::memory_snapshot().unwrap();
    for read in [
        memviz::load_snapshot(snapshot.to_json().as_bytes()).unwrap(),
        memviz::load_snapshot(&snapshot.to_pickle()).unwrap(),
    ] {
        assert_eq!(read, snapshot);
    }
    let p = memviz::render(&snapshot, &Options { device: Some(device), ..Options::default() }).unwrap();
    assert!(p.summary().peak_allocated >= 8 * MIB, "{}", p.summary());
    assert!(p.summary().segments >= 1);
    let map = pixels(&p.to_svg());
    assert!(map.width() == 1200 && map.height() > 600);
    drop(b);
}

#[test]
fn a_million_events_stay_small() {
    // 500,000 allocations of 1 KiB to 1 MiB, 300 live at a time: the picture stays within a few
    // megabytes (rendering takes seconds, not asserted: no timing in tests).
    let size = |i: u64| 1024 + (i * 104_729 % (1 << 20)) as usize;
    let mut events = Vec::with_capacity(1_000_000);
    events.push(entry(TraceAction::SegmentAlloc, 0, 1 << 30));
    for i in 0..500_200u64 {
        events.push(entry(TraceAction::Alloc, i << 21, size(i)));
        if i >= 300 {
            events.push(entry(TraceAction::FreeCompleted, (i - 300) << 21, size(i - 300)));
        }
    }
    events.truncate(1_000_000);
    let snapshot = Snapshot { segments: vec![], device_traces: vec![events] };
    let p = memviz::render(&snapshot, &Options::default()).unwrap();
    assert_eq!(p.summary().events, 1_000_000);
    let (html, svg) = (p.to_html(), p.to_svg());
    assert!(html.len() < 4 << 20 && svg.len() < 4 << 20, "{} / {} bytes", html.len(), svg.len());
    let map = pixels(&p.timeline_svg().unwrap());
    assert!(map.width() > 0);
}

fn cudasem(args: &[&str]) -> std::process::Output {
    Command::new(common::cudasem_binary()).args(args).output().expect("the cudasem binary starts")
}

#[test]
fn the_command_writes_a_page_and_an_svg() {
    let pickle = temp_file("command.pickle", PYTORCH_PICKLE);
    let dir = pickle.parent().unwrap().to_path_buf();
    let (html, svg) = (dir.join("out.html"), dir.join("out.svg"));
    let o = cudasem(&[
        "memviz",
        pickle.to_str().unwrap(),
        "-o",
        html.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
        "--by-stream",
        "--static",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("peak allocated") && out.contains("driver allocs"), "{out}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>") && page.matches("<svg").count() == 2, "two views inline");
    assert!(!page.contains("src=") && !page.contains("href=") && !page.contains("<script"), "nothing to fetch");
    // Without --static: the interactive page, its script inline, the fixture's frames in its data.
    let o = cudasem(&["memviz", pickle.to_str().unwrap(), "-o", html.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<script>") && page.contains("id=\"memviz-data\""), "the interactive page");
    assert!(!page.contains("src=") && !page.contains("href="), "nothing to fetch");
    assert!(page.contains("forward  train.py:41"), "the pickle's stack frames, shared as PyTorch shares them");
    let drawn = pixels(&std::fs::read_to_string(&svg).unwrap());
    assert!(drawn.height() > 600);

    let json = dir.join("bad.json");
    std::fs::write(&json, "{\"segments\": 5}").unwrap();
    let o = cudasem(&["memviz", json.to_str().unwrap(), "-o", html.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("invalid memory snapshot") && !err.contains("panicked"), "{err}");
    let o = cudasem(&["memviz", pickle.to_str().unwrap(), "-o", html.to_str().unwrap(), "--at", "100000"]);
    assert_eq!(o.status.code(), Some(2));
    for f in [json, html, svg, pickle] {
        let _ = std::fs::remove_file(f);
    }
}

#[test]
fn replay_plots_cudasems_reserved_beside_pytorchs() {
    // Two 3 MiB blocks, then a 2 MiB one in the first's place: one 20 MiB segment for cudasem;
    // PyTorch's rows say it held 40 MiB.
    let trace = "action,addr,size,stream\nsegment_alloc,0,41943040,0\nalloc,4096,3145728,0\nalloc,8192,3145728,0\nfree_requested,4096,3145728,0\nfree_completed,4096,3145728,0\nalloc,12288,2097152,0\nfree_completed,8192,3145728,0\nfree_completed,12288,2097152,0\n";
    let dir = std::env::temp_dir().join(format!("cudasem-replay-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (csv, html) = (dir.join("t.csv"), dir.join("plot.html"));
    std::fs::write(&csv, trace).unwrap();
    let o = Command::new(common::cudasem_binary())
        .args(["replay", csv.to_str().unwrap(), "--json", "--plot", html.to_str().unwrap()])
        .env("CUDASEM_ALLOC_CONF", "")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stdout stays one JSON object");
    assert_eq!(report["peak_reserved_bytes"].as_u64(), Some(20 * MIB as u64));
    let page = std::fs::read_to_string(&html).unwrap();
    assert_eq!(page.matches("<svg").count(), 3, "the chart, then cudasem's timeline and segments");
    // Its history: a segment, three allocs, and a free_requested and free_completed for each free.
    assert!(page.contains("Active memory timeline: cuda:0, 10 events"), "the replay's own history is drawn");
    let svg = &page[page.find("<svg").unwrap()..page.find("</svg>").unwrap() + 6];
    let [x, y, w, h] = attribute(svg, "data-plot")[..] else { panic!("four numbers") };
    assert_eq!(attribute(svg, "data-ymax"), [40.0 * MIB as f64], "PyTorch's 40 MiB sets the scale");
    let map = pixels(svg);
    let top = |line: &str| {
        (y as u32 - 2..(y + h) as u32)
            .find(|&r| (x as u32 + 2..(x + w) as u32).any(|c| strong(rgb(&map, c, r), hex(line))))
            .map(|r| r as f64)
    };
    let cudasem = top("#c0392b").expect("cudasem's reserved line");
    let pytorch = top("#e69138").expect("PyTorch's reserved line");
    assert!((cudasem - (y + h / 2.0)).abs() <= 1.5, "cudasem's 20 MiB at half height: {cudasem}");
    assert!((pytorch - y).abs() <= 1.5, "PyTorch's 40 MiB at the top: {pytorch}");

    // With PyTorch's outcome file (50 MiB at its peak), its level sets the scale and tops the chart.
    let outcome = dir.join("t.pytorch.json");
    std::fs::write(&outcome, format!("{{\"reserved_bytes.all.peak\": {}}}", 50 * MIB)).unwrap();
    let o = Command::new(common::cudasem_binary())
        .args([
            "replay",
            csv.to_str().unwrap(),
            "--compare",
            outcome.to_str().unwrap(),
            "--plot",
            html.to_str().unwrap(),
        ])
        .env("CUDASEM_ALLOC_CONF", "")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let page = std::fs::read_to_string(&html).unwrap();
    let svg = &page[page.find("<svg").unwrap()..page.find("</svg>").unwrap() + 6];
    assert_eq!(attribute(svg, "data-ymax"), [50.0 * MIB as f64]);
    let [x, y, w, h] = attribute(svg, "data-plot")[..] else { panic!("four numbers") };
    let map = pixels(svg);
    let level = (y as u32 - 2..(y + h) as u32)
        .find(|&r| (x as u32 + 2..(x + w) as u32).any(|c| strong(rgb(&map, c, r), hex("#8c564b"))))
        .expect("the outcome's level") as f64;
    assert!((level - y).abs() <= 1.5, "PyTorch's outcome at the top: {level}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_snapshot_dumped_by_pytorch_on_a_gpu_reads_and_agrees_with_its_statistics() {
    // Made on a GPU machine by tests/fixtures/pytorch_gpu_snapshot.py (PyTorch's own
    // _dump_snapshot, with stack frames); read from the repository root, where tests run.
    let dir = std::path::Path::new("tests/fixtures");
    let (Ok(bytes), Ok(json)) = (
        std::fs::read(dir.join("pytorch_gpu_snapshot.pickle")),
        std::fs::read_to_string(dir.join("pytorch_gpu_snapshot.expected.json")),
    ) else {
        panic!("no snapshot from PyTorch on a GPU in tests/fixtures (tests/fixtures/pytorch_gpu_snapshot.py makes it)");
    };
    let expected: serde_json::Value = serde_json::from_str(&json).unwrap();
    let n = |k: &str| expected[k].as_u64().unwrap_or_else(|| panic!("{k}")) as usize;
    let snapshot = memviz::load_snapshot(&bytes).unwrap();
    let s = memviz::render(&snapshot, &Options::default()).unwrap().summary().clone();
    assert_eq!((s.events, s.ooms), (n("events"), n("ooms")));
    assert_eq!((s.driver_allocations, s.driver_frees), (n("segment_allocs"), n("segment_frees")));
    assert_eq!(s.peak_reserved, n("peak_reserved"), "the history's reserved peak is PyTorch's");
    // Live until free_completed (memory_viz's rule), so between PyTorch's requested and active peaks.
    assert!(n("peak_requested") <= s.peak_allocated && s.peak_allocated <= n("peak_active"), "{s}");
    assert!(s.allocated + s.pending_free >= s.peak_allocated, "rounded blocks hold the requests: {s}");
    let end = memviz::render(&snapshot, &Options { at: Some(s.events - 1), ..Options::default() }).unwrap();
    let e = end.summary();
    assert_eq!((e.segments, e.reserved, e.allocated), (n("segments"), n("reserved"), n("allocated")));
    // Walked back to the first event of a process that had allocated nothing before: at most the
    // segment that event asked for.
    let first = &snapshot.device_traces[0][0];
    let start = memviz::render(&snapshot, &Options { at: Some(0), ..Options::default() }).unwrap();
    let held = if first.action == TraceAction::SegmentAlloc { first.size } else { 0 };
    assert_eq!(start.summary().reserved, held, "{}", start.summary());
    let map = pixels(&memviz::render(&snapshot, &Options::default()).unwrap().segments_svg());
    assert_eq!(bars(&map, 58).len(), s.segments, "one bar per segment at the peak");
}
