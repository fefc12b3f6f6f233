//! Trace replay through the caching allocator: a small inline trace, and PyTorch's real traces
//! (`bench/traces/`, built into the test) with the policy's targets: under default settings no
//! more peak reserved memory and no more driver allocations than PyTorch's own run of the trace,
//! and with expandable segments at most 3 % over the trace's live floor.

// In a module named `alloc` so that `cargo test alloc` selects these tests.
mod alloc {
    use cudasem::alloc::{replay, AllocatorSettings, PytorchOutcome, ReplayOptions, Trace};
    use cudasem::Error;

    const SMALL: &str = "action,addr,size,stream
alloc,1000,100,0
alloc,2000,3000000,0
alloc,3000,700,0
free_requested,1000,100,0
free_completed,1000,100,0
alloc,4000,100,0
free_completed,2000,3000000,0
free_completed,3000,700,0
alloc,5000,3000000,0
free_completed,4000,100,0
free_completed,5000,3000000,0
";

    #[test]
    fn replays_a_small_trace() {
        let trace = Trace::parse(SMALL).unwrap();
        let r = replay(&trace, &ReplayOptions::default()).unwrap();
        assert_eq!((r.allocs, r.frees), (5, 5));
        assert_eq!(r.peak_live_requested, 3_000_800);
        assert_eq!(r.peak_allocated, 3_000_320 + 512 + 1024, "rounded to 512");
        assert_eq!(r.peak_reserved, (2 << 20) + (20 << 20), "one small and one large segment");
        assert_eq!(r.segment_allocs, 2, "the second 3 MB block reuses the cached one");
        assert_eq!(r.stats.get("allocated_bytes.all.current"), Some(0));
    }

    #[test]
    fn replay_rejects_inconsistent_traces() {
        let t = Trace::parse("alloc,1,10,0\nfree_completed,2,10,0\n").unwrap();
        assert!(matches!(replay(&t, &ReplayOptions::default()), Err(Error::InvalidTrace { line: 2, .. })));
        let t = Trace::parse("alloc,1,10,0\nalloc,1,10,0\n").unwrap();
        assert!(matches!(replay(&t, &ReplayOptions::default()), Err(Error::InvalidTrace { line: 2, .. })));
        let t = Trace::parse("alloc,1,10000,0\n").unwrap();
        let tiny = ReplayOptions { capacity: 1 << 20, ..Default::default() };
        assert!(matches!(replay(&t, &tiny), Err(Error::OutOfMemory { .. })));
    }

    /// The ResNet-50 training trace (PyTorch 2.11, one step), kept in the repository and built into
    /// the test, so it runs wherever the test binary does.
    fn resnet50_trace() -> Trace {
        Trace::parse(include_str!("../bench/traces/resnet50_train.csv")).unwrap()
    }

    /// PyTorch 2.11 on this trace: 7,033,847,808 bytes reserved at the peak, 104 driver allocations.
    #[test]
    fn resnet50_default_settings_match_or_beat_pytorch() {
        let trace = resnet50_trace();
        let r = replay(&trace, &ReplayOptions::default()).unwrap();
        println!("default settings:\n{r}");
        assert_eq!(r.peak_live_requested, 5_762_142_352);
        assert!(r.peak_reserved <= 7_033_847_808, "{r}");
        assert!(r.segment_allocs <= 104, "{r}");
    }

    /// A trace recorded from cudasem's own history replays to the same result.
    #[test]
    fn recorded_history_replays_the_same() {
        use cudasem::alloc::{AccountingMemory, CachingAllocator, TraceAction};
        use std::sync::Arc;
        let trace = Trace::parse(SMALL).unwrap();
        let a = CachingAllocator::new(0, Arc::new(AccountingMemory::new(1 << 30)), AllocatorSettings::default());
        a.record_history(true, 1 << 16);
        let mut live = std::collections::HashMap::new();
        for e in &trace.events {
            match e.action {
                TraceAction::Alloc => {
                    live.insert(e.addr, a.malloc(e.size, e.stream).unwrap());
                }
                TraceAction::FreeCompleted => a.free(live.remove(&e.addr).unwrap()).unwrap(),
                _ => {}
            }
        }
        let recorded = Trace::from_entries(&a.snapshot().device_traces[0]);
        let csv = recorded.to_csv();
        assert!(csv.starts_with("action,addr,size,stream\nsegment_alloc,"), "{csv}");
        let (r1, r2) = (
            replay(&trace, &ReplayOptions::default()).unwrap(),
            replay(&Trace::parse(&csv).unwrap(), &ReplayOptions::default()).unwrap(),
        );
        assert_eq!(
            (r1.peak_reserved, r1.peak_allocated, r1.segment_allocs),
            (r2.peak_reserved, r2.peak_allocated, r2.segment_allocs)
        );
        assert_eq!(r1.peak_live_requested, r2.peak_live_requested);
    }

    /// The repository's PyTorch traces (`bench/traces/`: the larger ones gzip-compressed), each
    /// with PyTorch's own outcome on it.
    fn shared_traces() -> Vec<(&'static str, Trace, PytorchOutcome)> {
        let gz = |bytes: &[u8]| Trace::from_gzip(bytes).unwrap();
        let outcome = |json: &str| PytorchOutcome::parse(json).unwrap();
        vec![
            ("resnet50_train", resnet50_trace(), outcome(include_str!("../bench/traces/resnet50_train.pytorch.json"))),
            (
                "bert_train",
                gz(include_bytes!("../bench/traces/bert_train.csv.gz")),
                outcome(include_str!("../bench/traces/bert_train.pytorch.json")),
            ),
            (
                "segment_multiscale",
                gz(include_bytes!("../bench/traces/segment_multiscale.csv.gz")),
                outcome(include_str!("../bench/traces/segment_multiscale.pytorch.json")),
            ),
            (
                "prefetch_two_streams",
                gz(include_bytes!("../bench/traces/prefetch_two_streams.csv.gz")),
                outcome(include_str!("../bench/traces/prefetch_two_streams.pytorch.json")),
            ),
        ]
    }

    fn options(conf: &str) -> ReplayOptions {
        ReplayOptions { settings: AllocatorSettings::parse(conf).unwrap(), timing_runs: 0, ..Default::default() }
    }

    /// Default settings: on every trace, peak reserved ≤ PyTorch's and driver allocations ≤
    /// PyTorch's (the two-stream trace included: no memory stranded on one stream).
    #[test]
    fn default_settings_hold_no_more_than_pytorch_on_every_trace() {
        for (name, trace, pytorch) in shared_traces() {
            let r = replay(&trace, &options("")).unwrap();
            println!("{name}, default settings:\n{r}");
            assert_eq!(Some(r.peak_live_requested), pytorch.peak_live_requested, "{name}: the same live floor");
            assert!(r.peak_reserved <= pytorch.peak_reserved, "{name}: peak reserved over PyTorch's {pytorch:?}\n{r}");
            let segments = pytorch.segment_allocs.expect("recorded");
            assert!(r.segment_allocs <= segments, "{name}: more driver allocations than PyTorch's {segments}\n{r}");
            assert_eq!(r.page_moves.events, 0, "{name}: ordinary segments move no pages");
        }
    }

    /// Expandable segments: on every trace, peak reserved ≤ 1.03 × the live floor (and under
    /// PyTorch's own expandable run), free pages moved to where segments grew.
    #[test]
    fn expandable_segments_stay_within_3_percent_of_the_live_floor_on_every_trace() {
        for (name, trace, pytorch) in shared_traces() {
            let r = replay(&trace, &options("expandable_segments:True")).unwrap();
            println!("{name}, expandable segments:\n{r}");
            let ratio = r.reserved_over_live_requested();
            assert!(ratio <= 1.03, "{name}: {ratio:.4} x the live floor\n{r}");
            assert!(r.peak_reserved <= pytorch.under(true).0, "{name}: over PyTorch's expandable peak\n{r}");
            assert!(r.page_moves.events > 0 && r.page_moves.bytes > 0, "{name}: pages were moved\n{r}");
            assert!(r.page_moves.unmaps <= r.segment_frees, "{name}: each move is a driver unmap");
        }
    }
}
