//! CUDA graphs (`CUDAGraph`, `graph`, `make_graphed`) and their private pools, against PyTorch's
//! documented semantics: captured work runs on replay, over whatever the captured inputs hold
//! then; allocations of a capture come from its pool, freed blocks are reused inside it, pools
//! are shared between captures and their memory comes back after reset + drop + `empty_cache`;
//! every call CUDA forbids during a capture is a typed error that leaves the runtime usable;
//! and, beyond PyTorch, a graph keeps alive the memory it uses.
//!
//! A capture in global mode refuses other threads' blocking calls (CUDA's rule), so the tests
//! of this binary take turns.

mod common;

use cudasem::cuda::{self, CUDAGraph, CaptureErrorMode, GraphOptions, StreamGuard};
use cudasem::kernel::GEMM_WORKSPACE_BYTES;
use cudasem::{DType, Device, Error, Result, Tensor};
use std::sync::{Mutex, MutexGuard};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> Option<MutexGuard<'static, ()>> {
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    common::one_device().then_some(g)
}

fn dev() -> Device {
    Device::cuda(0)
}

/// Random non-zero f32 data (a fixed seed per test).
fn data(seed: u64, n: usize) -> Vec<f32> {
    let mut rng = common::TestRng::new(seed);
    (0..n).map(|_| ((rng.next_u64() % 2000) as f32 - 999.5) / 250.0).collect()
}

fn tensor(v: &[f32]) -> Result<Tensor> {
    Tensor::from_slice(v, [v.len()], dev())
}

/// The pool of the segment holding `ptr` on cuda:0, from a snapshot taken now.
fn pool_of(ptr: u64) -> Result<Option<cuda::MemPoolId>> {
    let snap = cuda::memory_snapshot()?;
    let seg = snap.segments.iter().find(|s| s.device == 0 && s.address <= ptr && ptr < s.address + s.total_size as u64);
    Ok(seg.map(|s| s.segment_pool_id))
}

fn is_illegal(r: Result<impl std::fmt::Debug>, call: &str) {
    match r {
        Err(Error::IllegalDuringCapture { call: c, .. }) => assert!(c.contains(call), "refused {c}, expected {call}"),
        other => panic!("expected IllegalDuringCapture for {call}, got {other:?}"),
    }
}

/// Eager work and a new capture both work (after an error).
fn runtime_still_usable() -> Result<()> {
    let x = tensor(&data(99, 64))?;
    let eager = x.mul(3.0)?.to_vec::<f32>()?;
    let mut g = CUDAGraph::new();
    let y = cuda::graph(&mut g, GraphOptions::default(), || x.mul(3.0))?;
    g.replay()?;
    assert_eq!(y.to_vec::<f32>()?, eager);
    assert!(!cuda::is_current_stream_capturing()?);
    Ok(())
}

#[test]
fn a_replay_computes_from_what_the_static_input_holds_then() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let x = tensor(&data(1, 1000))?;
    let mut g = CUDAGraph::new();
    let y = cuda::graph(&mut g, GraphOptions::default(), || x.mul(2.0)?.add(1.0)?.sigmoid())?;
    assert!(g.node_count() >= 3, "three kernels captured, got {}", g.node_count());
    for seed in 2..5 {
        let h = data(seed, 1000);
        x.copy_(&tensor(&h)?, false)?;
        g.replay()?;
        let want = x.mul(2.0)?.add(1.0)?.sigmoid()?.to_vec::<f32>()?;
        assert_eq!(y.to_vec::<f32>()?, want, "replay {seed} against eager");
        let reference: Vec<f64> = h.iter().map(|&v| 1.0 / (1.0 + (-(2.0 * v as f64 + 1.0)).exp())).collect();
        for (got, r) in y.to_vec::<f32>()?.iter().zip(&reference) {
            assert!((*got as f64 - r).abs() <= 1e-6 + 1.3e-6 * r.abs(), "{got} vs {r}");
        }
    }
    Ok(())
}

#[test]
fn a_captured_chain_of_matmul_gelu_softmax_and_sum_matches_eager() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let a = Tensor::from_slice(&data(5, 64 * 96), [64, 96], dev())?;
    let w = Tensor::from_slice(&data(6, 96 * 128), [96, 128], dev())?;
    let step = || -> Result<Tensor> { a.matmul(&w)?.gelu()?.softmax(-1)?.sum(&[0], false) };
    let eager = step()?.to_vec::<f32>()?;
    let mut g = CUDAGraph::new();
    let out = cuda::graph(&mut g, GraphOptions::default(), step)?;
    g.replay()?;
    for (got, want) in out.to_vec::<f32>()?.iter().zip(&eager) {
        assert!((got - want).abs() <= 1e-5 * want.abs().max(1.0), "{got} vs eager {want}");
    }
    Ok(())
}

#[test]
fn a_chain_of_a_hundred_adds_replays_on_any_stream() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let (y, z0) = (data(7, 16), data(8, 16));
    let (yt, z) = (tensor(&y)?, tensor(&z0)?);
    let mut g = CUDAGraph::new();
    cuda::graph(&mut g, GraphOptions::default(), || (0..100).try_for_each(|_| z.add_(&yt)))?;
    let expect = |times: usize| -> Vec<f32> {
        z0.iter()
            .zip(&y)
            .map(|(&a, &b)| {
                let mut v = a;
                for _ in 0..times {
                    v += b;
                }
                v
            })
            .collect()
    };
    // Capturing ran nothing: z is as it was.
    assert_eq!(z.to_vec::<f32>()?, z0);
    g.replay()?; // on the default stream
    assert_eq!(z.to_vec::<f32>()?, expect(100));
    let other = cuda::Stream::new(0, 0)?;
    other.wait_stream(&cuda::current_stream(0)?)?;
    {
        let _g = StreamGuard::new(&other)?;
        g.replay()?;
        g.replay()?;
    }
    cuda::current_stream(0)?.wait_stream(&other)?;
    assert_eq!(z.to_vec::<f32>()?, expect(300));
    Ok(())
}

/// In-place adds over a tensor of several waves of blocks (on compute capability 9.0 and later the
/// fast elementwise kernel's grids of two waves or more are launched early, `early_waves`: captured,
/// programmatic edges), each reading what the one before wrote: the replays add exactly as many
/// times as captured, as eager adds do.
#[test]
fn a_captured_chain_of_adds_over_many_waves_replays_in_order() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    // On a GPU two and a half waves of the H100's and the H200's fast elementwise blocks (1,056 of 256
    // threads or 2,112 of 128, four f32 a thread); the sim's order is the same at any size.
    let n = if common::is_sim() { 40_003 } else { (5 << 19) + 3 };
    let (y, z0) = (data(21, n), data(22, n));
    let (yt, z) = (tensor(&y)?, tensor(&z0)?);
    let mut g = CUDAGraph::new();
    cuda::graph(&mut g, GraphOptions::default(), || (0..8).try_for_each(|_| z.add_(&yt)))?;
    assert_eq!(g.node_count(), 8);
    g.replay()?;
    g.replay()?;
    let mut want = z0.clone();
    for _ in 0..16 {
        want.iter_mut().zip(&y).for_each(|(a, b)| *a += b);
    }
    assert!(z.to_vec::<f32>()? == want, "16 adds in order");
    (0..4).try_for_each(|_| z.add_(&yt))?;
    for _ in 0..4 {
        want.iter_mut().zip(&y).for_each(|(a, b)| *a += b);
    }
    assert!(z.to_vec::<f32>()? == want, "then 4 eager adds in order");
    Ok(())
}

#[test]
fn blocks_freed_during_a_capture_are_reused_by_it_from_its_private_pool() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let x = tensor(&data(9, 1 << 18))?;
    let mut g = CUDAGraph::new();
    let (first, second, out) = cuda::graph(&mut g, GraphOptions::default(), || {
        let t = x.mul(2.0)?;
        let first = t.data_ptr();
        drop(t);
        let u = x.add(1.0)?;
        Ok((first, u.data_ptr(), u))
    })?;
    assert_eq!(first, second, "the capture reuses the block it freed");
    let pool = g.pool()?;
    assert_eq!(pool_of(out.data_ptr())?, Some(pool), "the output lives in the graph's pool");
    g.replay()?;
    let want: Vec<f32> = data(9, 1 << 18).iter().map(|v| v + 1.0).collect();
    assert_eq!(out.to_vec::<f32>()?, want);
    // An eager allocation does not come from the graph's pool (a snapshot taken after it).
    let eager = x.mul(2.0)?;
    assert_ne!(pool_of(eager.data_ptr())?, Some(pool), "an eager tensor came from the graph's pool");
    Ok(())
}

#[test]
fn a_pool_shared_by_two_captures_serves_both_and_its_memory_returns_after_reset_drop_and_empty_cache() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    cuda::synchronize(0)?;
    cuda::empty_cache()?;
    let before = cuda::memory_reserved(0)?;
    let x = tensor(&data(10, 1 << 20))?;
    let base = cuda::memory_reserved(0)?;
    let pool = cuda::graph_pool_handle();
    let opts = GraphOptions { pool: Some(pool), ..GraphOptions::default() };
    let (mut g1, mut g2) = (CUDAGraph::new(), CUDAGraph::new());
    let y1 = cuda::graph(&mut g1, opts.clone(), || x.mul(2.0))?;
    let y2 = cuda::graph(&mut g2, GraphOptions { pool: Some(g1.pool()?), ..opts }, || y1.add(1.0))?;
    assert_eq!(g2.pool()?, pool);
    assert_eq!(pool_of(y1.data_ptr())?, Some(pool), "the first capture allocated from the shared pool");
    assert_eq!(pool_of(y2.data_ptr())?, Some(pool), "the second capture allocated from the shared pool");
    assert!(cuda::memory_reserved(0)? > base, "the pool holds memory");
    g1.replay()?;
    g2.replay()?;
    let want: Vec<f32> = data(10, 1 << 20).iter().map(|v| v * 2.0 + 1.0).collect();
    assert_eq!(y2.to_vec::<f32>()?, want);
    // Graphs gone but their outputs alive: the pool's segments stay.
    g1.reset()?;
    drop(g2);
    cuda::empty_cache()?;
    assert!(cuda::memory_reserved(0)? > base, "live tensors keep the pool's segments");
    drop((y1, y2));
    cuda::empty_cache()?;
    assert_eq!(cuda::memory_reserved(0)?, base, "reset + drop + empty_cache returns the pool");
    drop(x);
    cuda::empty_cache()?;
    assert_eq!(cuda::memory_reserved(0)?, before);
    Ok(())
}

#[test]
fn a_graph_keeps_alive_the_tensors_it_reads_after_the_user_dropped_them() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let h = data(11, 4096);
    let x = tensor(&h)?;
    let x_ptr = x.data_ptr();
    let mut g = CUDAGraph::new();
    let y = cuda::graph(&mut g, GraphOptions::default(), || x.mul(-1.0))?;
    drop(x); // PyTorch: a silent error; here the graph holds the storage
    let others: Vec<Tensor> =
        (0..8).map(|i| Tensor::full([4096], i as f64, DType::F32, dev())).collect::<Result<_>>()?;
    assert!(others.iter().all(|t| t.data_ptr() != x_ptr), "the dropped input's block was not reused");
    g.replay()?;
    assert_eq!(y.to_vec::<f32>()?, h.iter().map(|v| -v).collect::<Vec<_>>());
    Ok(())
}

#[test]
fn calls_cuda_forbids_during_capture_are_typed_errors_and_the_runtime_stays_usable() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let x = tensor(&data(12, 256))?;
    let cpu = Tensor::from_slice(&data(13, 8), [8], Device::Cpu)?;
    type Call<'a> = (&'a str, Box<dyn Fn() -> Result<()> + 'a>);
    let calls: Vec<Call> = vec![
        ("Stream::synchronize", Box::new(|| cuda::current_stream(0)?.synchronize())),
        ("Stream::query", Box::new(|| cuda::current_stream(0)?.query().map(drop))),
        ("cuda::synchronize", Box::new(|| cuda::synchronize(0))),
        ("device-to-host", Box::new(|| x.to_vec::<f32>().map(drop))),
        ("device-to-host", Box::new(|| x.sum_all()?.item::<f32>().map(drop))),
        ("device-to-host", Box::new(|| x.cpu().map(drop))),
        ("host-to-device", Box::new(|| tensor(&[1.0, 2.0]).map(drop))),
        ("host (CPU) tensor op", Box::new(|| cpu.add(&cpu).map(drop))),
        (
            "Event::query",
            Box::new(|| {
                let e = cuda::current_stream(0)?.record_event(None)?;
                e.query().map(drop)
            }),
        ),
        (
            "Event::synchronize",
            Box::new(|| {
                let e = cuda::current_stream(0)?.record_event(None)?;
                e.synchronize()
            }),
        ),
    ];
    for (name, call) in &calls {
        let mut g = CUDAGraph::new();
        let r = cuda::graph(&mut g, GraphOptions::default(), || {
            x.mul(2.0)?;
            call()
        });
        is_illegal(r, name);
        assert!(!g.is_capturing() && g.node_count() == 0, "{name}: the capture ended without a graph");
        runtime_still_usable()?;
    }
    Ok(())
}

#[test]
fn capture_end_after_a_refused_call_reports_the_invalidated_capture() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let x = tensor(&data(14, 64))?;
    let s = cuda::Stream::new(0, 0)?;
    {
        let _g = StreamGuard::new(&s)?;
        let mut g = CUDAGraph::new();
        g.capture_begin(None, CaptureErrorMode::Global)?;
        assert!(cuda::is_current_stream_capturing()?);
        x.mul(2.0)?;
        is_illegal(x.to_vec::<f32>(), "device-to-host");
        match g.capture_end() {
            Err(Error::CaptureInvalidated { call, .. }) => assert!(call.contains("device-to-host")),
            other => panic!("expected CaptureInvalidated, got {other:?}"),
        }
        assert!(!cuda::is_current_stream_capturing()?);
        assert!(matches!(g.replay(), Err(Error::GraphState { .. })));
        // Capture again on the same graph and stream.
        g.capture_begin(None, CaptureErrorMode::Global)?;
        let y = x.add(1.0)?;
        g.capture_end()?;
        g.replay()?;
        let want: Vec<f32> = data(14, 64).iter().map(|v| v + 1.0).collect();
        assert_eq!(y.to_vec::<f32>()?, want);
    }
    runtime_still_usable()
}

#[test]
fn capturing_the_default_stream_and_calls_out_of_order_are_typed_errors() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let mut g = CUDAGraph::new();
    let _d = StreamGuard::new(&cuda::default_stream(0)?)?;
    assert!(matches!(g.capture_begin(None, CaptureErrorMode::Global), Err(Error::GraphState { .. })));
    assert!(matches!(g.capture_end(), Err(Error::GraphState { .. })));
    assert!(matches!(g.replay(), Err(Error::GraphState { .. })));
    assert!(matches!(g.pool(), Err(Error::GraphState { .. })));
    let r =
        cuda::graph(&mut g, GraphOptions { stream: Some(cuda::default_stream(0)?), ..Default::default() }, || Ok(()));
    assert!(matches!(r, Err(Error::GraphState { .. })), "{r:?}");
    drop(_d);
    runtime_still_usable()
}

#[test]
fn work_forked_to_another_stream_is_captured_and_must_be_joined_back() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let (a, b) = (tensor(&data(15, 512))?, tensor(&data(16, 512))?);
    let side = cuda::Stream::new(0, 0)?;
    let mut g = CUDAGraph::new();
    let (ya, yb) = cuda::graph(&mut g, GraphOptions::default(), || {
        let cap = cuda::current_stream(0)?;
        side.wait_stream(&cap)?;
        let yb = {
            let _g = StreamGuard::new(&side)?;
            assert!(cuda::is_current_stream_capturing()?, "a forked stream joins the capture");
            b.mul(3.0)?
        };
        let ya = a.mul(5.0)?;
        cap.wait_stream(&side)?;
        Ok((ya, yb))
    })?;
    g.replay()?;
    assert_eq!(ya.to_vec::<f32>()?, data(15, 512).iter().map(|v| v * 5.0).collect::<Vec<_>>());
    assert_eq!(yb.to_vec::<f32>()?, data(16, 512).iter().map(|v| v * 3.0).collect::<Vec<_>>());

    // Without the join: a typed error naming the stream.
    let mut g2 = CUDAGraph::new();
    let r = cuda::graph(&mut g2, GraphOptions::default(), || {
        side.wait_stream(&cuda::current_stream(0)?)?;
        let _g = StreamGuard::new(&side)?;
        b.mul(3.0).map(drop)
    });
    match r {
        Err(Error::CaptureUnjoined { stream, .. }) => assert_eq!(stream, side.id()),
        other => panic!("expected CaptureUnjoined, got {other:?}"),
    }
    // A wait on an event recorded outside the capture crosses its boundary.
    let outside = side.record_event(None)?;
    let mut g3 = CUDAGraph::new();
    let r = cuda::graph(&mut g3, GraphOptions::default(), || cuda::current_stream(0)?.wait_event(&outside));
    is_illegal(r, "Stream::wait_event");
    runtime_still_usable()
}

#[test]
fn capture_modes_decide_which_other_calls_are_refused() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let x = tensor(&data(17, 64))?;
    let other = cuda::Stream::new(0, 0)?;
    for (mode, other_thread_ok, same_thread_ok) in [
        (CaptureErrorMode::Global, false, false),
        (CaptureErrorMode::ThreadLocal, true, false),
        (CaptureErrorMode::Relaxed, true, true),
    ] {
        let mut g = CUDAGraph::new();
        let opts = GraphOptions { capture_error_mode: mode, ..GraphOptions::default() };
        let r = cuda::graph(&mut g, opts, || {
            x.mul(2.0)?;
            let there = std::thread::scope(|s| s.spawn(|| other.synchronize()).join().expect("thread"));
            assert_eq!(there.is_ok(), other_thread_ok, "{mode:?}: another thread's synchronize: {there:?}");
            let here = other.synchronize();
            assert_eq!(here.is_ok(), same_thread_ok, "{mode:?}: this thread's synchronize: {here:?}");
            Ok(())
        });
        match (other_thread_ok && same_thread_ok, r) {
            (true, Ok(())) => g.replay()?,
            (false, Err(Error::CaptureInvalidated { .. })) => {}
            (_, r) => panic!("{mode:?}: unexpected end of capture {r:?}"),
        }
    }
    runtime_still_usable()
}

#[test]
fn a_panic_inside_the_capture_ends_it() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let x = tensor(&data(18, 64))?;
    let mut g = CUDAGraph::new();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cuda::graph(&mut g, GraphOptions::default(), || -> Result<()> {
            x.mul(2.0)?;
            panic!("user code panicked")
        })
    }));
    assert!(r.is_err());
    assert!(!g.is_capturing());
    runtime_still_usable()
}

#[test]
fn host_ops_may_be_allowed_in_a_capture_and_then_run_once() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let cpu = Tensor::from_slice(&[1.0f32, 2.0], [2], Device::Cpu)?;
    let x = tensor(&data(19, 8))?;
    let mut g = CUDAGraph::new();
    let opts = GraphOptions { allow_host_ops: true, ..GraphOptions::default() };
    let (host, y) = cuda::graph(&mut g, opts, || Ok((cpu.add(&cpu)?, x.mul(2.0)?)))?;
    assert_eq!(host.to_vec::<f32>()?, vec![2.0, 4.0]);
    g.replay()?;
    assert_eq!(y.to_vec::<f32>()?, data(19, 8).iter().map(|v| v * 2.0).collect::<Vec<_>>());
    Ok(())
}

#[test]
fn make_graphed_copies_new_inputs_in_and_replays() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let f = |xs: &[Tensor]| -> Result<Vec<Tensor>> { Ok(vec![xs[0].mul(&xs[1])?.add(1.0)?.tanh()?]) };
    let (a, b) = (tensor(&data(20, 300))?, tensor(&data(21, 300))?);
    let graphed = cuda::make_graphed(f, &[a.clone(), b.clone()], 3)?;
    for seed in 22..25 {
        let (p, q) = (tensor(&data(seed, 300))?, tensor(&data(seed + 100, 300))?);
        let out = graphed.call(&[&p, &q])?;
        assert_eq!(out[0].to_vec::<f32>()?, f(&[p, q])?[0].to_vec::<f32>()?);
    }
    let wrong = Tensor::zeros([299], DType::F32, dev())?;
    assert!(matches!(graphed.call(&[&wrong, &b]), Err(Error::GraphState { .. })));
    assert!(matches!(graphed.call(&[&a]), Err(Error::GraphState { .. })));
    Ok(())
}

#[test]
fn debug_dump_writes_graphviz() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let x = tensor(&data(26, 64))?;
    let mut g = CUDAGraph::new();
    cuda::graph(&mut g, GraphOptions::default(), || x.mul(2.0)?.exp())?;
    let path = std::env::temp_dir().join(format!("cudasem-graph-{}.dot", std::process::id()));
    g.debug_dump(&path)?;
    let dot = std::fs::read_to_string(&path).expect("the dump");
    std::fs::remove_file(&path).ok();
    assert!(dot.contains("digraph"), "{dot}");
    Ok(())
}

/// The allocated blocks of the matrix-product workspace's size in segments of `pool` on cuda:0,
/// from a snapshot taken now: `(address, stream the segment was made for)`.
fn workspaces_in(pool: cuda::MemPoolId) -> Result<Vec<(u64, cuda::StreamId)>> {
    let snap = cuda::memory_snapshot()?;
    let segs = snap.segments.iter().filter(|s| s.device == 0 && s.segment_pool_id == pool);
    Ok(segs
        .flat_map(|s| s.blocks.iter().map(move |b| (s, b)))
        .filter(|(_, b)| b.state == cuda::BlockState::ActiveAllocated && b.size == GEMM_WORKSPACE_BYTES)
        .map(|(s, b)| (b.address, s.stream))
        .collect())
}

/// `allocated_bytes.all.current` of cuda:0.
fn allocated() -> Result<i64> {
    Ok(cuda::memory_stats(0)?.get("allocated_bytes.all.current").unwrap_or(0))
}

/// `a` and `b` agree within f32 rounding of a sum of products of `k` terms.
fn close(a: &[f32], b: &[f32], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!((x - y).abs() <= 1e-4 * y.abs().max(1.0), "{what}: element {i} is {x}, eager {y}");
    }
}

#[test]
fn matmuls_captured_on_a_stream_share_one_workspace_from_the_graphs_pool() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let a = Tensor::from_slice(&data(30, 48 * 64), [48, 64], dev())?;
    let w1 = Tensor::from_slice(&data(31, 64 * 80), [64, 80], dev())?;
    let w2 = Tensor::from_slice(&data(32, 80 * 16), [80, 16], dev())?;
    let step = || -> Result<Tensor> { a.matmul(&w1)?.tanh()?.matmul(&w2) };
    let eager = step()?.to_vec::<f32>()?;
    let mut g = CUDAGraph::new();
    let before = allocated()?;
    let out = cuda::graph(&mut g, GraphOptions::default(), step)?;
    let pool = g.pool()?;
    let ws = workspaces_in(pool)?;
    assert_eq!(ws.len(), 1, "two products on one capturing stream share one workspace: {ws:?}");
    assert_eq!(pool_of(ws[0].0)?, Some(pool), "the workspace is a block of the graph's pool");
    let grown = allocated()? - before;
    assert!(grown >= GEMM_WORKSPACE_BYTES as i64, "memory_stats counts the workspace: {grown} bytes more");
    // What the graph's pool holds is what its snapshot shows.
    let pool_snap = cuda::memory_snapshot()?;
    let in_pool: usize =
        pool_snap.segments.iter().filter(|s| s.segment_pool_id == pool).map(|s| s.allocated_size).sum();
    assert!(in_pool >= GEMM_WORKSPACE_BYTES + 48 * 16 * 4, "the pool holds the workspace and the output");
    for seed in 33..36 {
        let h = data(seed, 48 * 64);
        a.copy_(&Tensor::from_slice(&h, [48, 64], dev())?, false)?;
        g.replay()?;
        close(&out.to_vec::<f32>()?, &step()?.to_vec::<f32>()?, "replay against eager");
    }
    // The first replay's input is new: check against the eager run of the first data too.
    a.copy_(&Tensor::from_slice(&data(30, 48 * 64), [48, 64], dev())?, false)?;
    g.replay()?;
    close(&out.to_vec::<f32>()?, &eager, "replay of the first input");
    // Eager products take no workspace block (the driver's own serves them).
    let eager_before = allocated()?;
    let e = step()?;
    assert_eq!(allocated()? - eager_before, 48 * 16 * 4, "only the eager output stays allocated");
    drop(e);
    assert_eq!(workspaces_in(pool)?.len(), 1, "eager products take nothing from the graph's pool");
    Ok(())
}

#[test]
fn a_stream_forked_in_a_capture_gets_a_workspace_of_its_own() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let (a, b) = (
        Tensor::from_slice(&data(40, 32 * 32), [32, 32], dev())?,
        Tensor::from_slice(&data(41, 32 * 32), [32, 32], dev())?,
    );
    let side = cuda::Stream::new(0, 0)?;
    let mut g = CUDAGraph::new();
    let (ya, yb) = cuda::graph(&mut g, GraphOptions::default(), || {
        let cap = cuda::current_stream(0)?;
        side.wait_stream(&cap)?;
        let yb = {
            let _g = StreamGuard::new(&side)?;
            let t = b.matmul(&a)?;
            t.matmul(&a)?
        };
        let ya = a.matmul(&b)?;
        cap.wait_stream(&side)?;
        Ok((ya, yb))
    })?;
    let ws = workspaces_in(g.pool()?)?;
    assert_eq!(ws.len(), 2, "one workspace per stream of the capture: {ws:?}");
    assert_ne!(ws[0].1, ws[1].1, "made for different streams");
    assert!(ws.iter().any(|w| w.1 .0 == side.id()), "the forked stream's workspace: {ws:?}");
    g.replay()?;
    close(&ya.to_vec::<f32>()?, &a.matmul(&b)?.to_vec::<f32>()?, "the capturing stream's product");
    close(&yb.to_vec::<f32>()?, &b.matmul(&a)?.matmul(&a)?.to_vec::<f32>()?, "the forked stream's products");
    Ok(())
}

#[test]
fn workspaces_of_captures_sharing_a_pool_return_after_reset_drop_and_empty_cache() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    cuda::synchronize(0)?;
    cuda::empty_cache()?;
    let x = Tensor::from_slice(&data(50, 40 * 40), [40, 40], dev())?;
    let eager1 = x.matmul(&x)?.to_vec::<f32>()?;
    drop(x.matmul(&x)?.matmul(&x)?);
    cuda::synchronize(0)?;
    cuda::empty_cache()?;
    let (base, base_alloc) = (cuda::memory_reserved(0)?, allocated()?);
    let pool = cuda::graph_pool_handle();
    let opts = GraphOptions { pool: Some(pool), ..GraphOptions::default() };
    let (mut g1, mut g2) = (CUDAGraph::new(), CUDAGraph::new());
    let y1 = cuda::graph(&mut g1, opts.clone(), || x.matmul(&x))?;
    assert_eq!(workspaces_in(pool)?.len(), 1);
    let y2 = cuda::graph(&mut g2, opts, || y1.matmul(&x))?;
    let ws = workspaces_in(pool)?;
    assert_eq!(ws.len(), 2, "the first graph keeps its workspace, so the second capture gets its own: {ws:?}");
    g1.replay()?;
    g2.replay()?;
    close(&y1.to_vec::<f32>()?, &eager1, "the first graph");
    close(&y2.to_vec::<f32>()?, &x.matmul(&x)?.matmul(&x)?.to_vec::<f32>()?, "the second graph");
    // Eager products beside the graphs: no workspace taken, none from the pool.
    let e = x.matmul(&y1)?;
    assert_ne!(pool_of(e.data_ptr())?, Some(pool));
    close(&e.to_vec::<f32>()?, &x.matmul(&y1)?.to_vec::<f32>()?, "an eager product");
    drop(e);
    assert_eq!(workspaces_in(pool)?.len(), 2);
    // A reset graph gives its workspace back to the pool; the other keeps its own.
    g1.reset()?;
    assert_eq!(workspaces_in(pool)?.len(), 1, "the reset graph's workspace is free in the pool");
    g2.replay()?;
    close(&y2.to_vec::<f32>()?, &x.matmul(&x)?.matmul(&x)?.to_vec::<f32>()?, "the second graph after the reset");
    drop(g2);
    assert!(workspaces_in(pool)?.is_empty(), "the dropped graph's workspace is free in the pool");
    drop((y1, y2));
    cuda::synchronize(0)?;
    cuda::empty_cache()?;
    assert_eq!(allocated()?, base_alloc, "nothing of the graphs stays allocated");
    assert_eq!(cuda::memory_reserved(0)?, base, "reset + drop + empty_cache returns the pool and its workspaces");
    Ok(())
}

#[test]
fn a_capture_that_fails_after_a_matmul_returns_its_workspace() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let x = Tensor::from_slice(&data(60, 24 * 24), [24, 24], dev())?;
    drop(x.matmul(&x)?);
    cuda::synchronize(0)?;
    cuda::empty_cache()?;
    let base = cuda::memory_reserved(0)?;
    let mut g = CUDAGraph::new();
    let r = cuda::graph(&mut g, GraphOptions::default(), || {
        let y = x.matmul(&x)?;
        y.to_vec::<f32>() // refused during capture
    });
    is_illegal(r, "device-to-host");
    cuda::empty_cache()?;
    assert_eq!(cuda::memory_reserved(0)?, base, "the abandoned capture's pool and workspace came back");
    runtime_still_usable()
}

/// Allocates, after the caller dropped tensors at `dropped` (their last handles outside a graph),
/// enough same-sized tensors to take their blocks back if they had been freed, filled with
/// `sentinel`; none may land on a dropped address (the graph holds those storages).
fn reuse_pressure(what: &str, dropped: &[u64], n: usize, sentinel: f32) -> Result<Vec<Tensor>> {
    let others: Vec<Tensor> = (0..16).map(|_| Tensor::full([n], sentinel, DType::F32, dev())).collect::<Result<_>>()?;
    for t in &others {
        let at = t.data_ptr();
        assert!(!dropped.contains(&at), "{what}: a dropped operand's block {at:#x} was handed out again");
    }
    Ok(others)
}

/// After a replay, memory handed out since the capture still holds what it was given (a replay
/// writing a freed operand's block would have overwritten it).
fn untouched(others: &[Tensor], sentinel: f32) -> Result<()> {
    for t in others {
        assert!(t.to_vec::<f32>()?.iter().all(|&v| v == sentinel), "a replay wrote into memory it no longer owns");
    }
    Ok(())
}

/// `got` against a float64 reference computed from the same random data.
fn against(got: &[f32], reference: impl Iterator<Item = f64>, what: &str) {
    let reference: Vec<f64> = reference.collect();
    assert_eq!(got.len(), reference.len(), "{what}: length");
    for (g, r) in got.iter().zip(&reference) {
        assert!((*g as f64 - r).abs() <= 1e-6 + 1.3e-6 * r.abs(), "{what}: {g} vs reference {r}");
    }
}

/// Each path that queues device work over a tensor made outside the capture — a kernel of the
/// general lane, the dense lane with a tensor and with a number, an in-place op, a device copy
/// dense and strided, and fills by memset and by kernel — keeps that tensor's storage alive in
/// the graph: its handle is dropped, its block is not reused, and the replay reads the data.
#[test]
fn every_path_of_the_door_keeps_the_operands_a_replay_reads_after_their_handles_drop() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let n = 2048;
    let (hx, hw, hz) = (data(21, n), data(22, n), data(23, n));
    type Step = fn(&Tensor, &Tensor, &Tensor) -> Result<Tensor>;
    type Reference = fn(f64, f64, f64) -> f64;
    let paths: [(&str, Step, Reference); 7] = [
        ("general kernel (sigmoid)", |x, _, _| x.sigmoid(), |x, _, _| 1.0 / (1.0 + (-x).exp())),
        ("dense lane, two tensors", |x, w, _| x.add(w), |x, w, _| x + w),
        ("dense lane, a number", |x, _, _| x.mul(3.0), |x, _, _| 3.0 * x),
        (
            "in place",
            |x, _, z| {
                z.add_(x)?;
                Ok(z.clone())
            },
            |x, _, z| z + x,
        ),
        (
            "device copy, dense",
            |x, _, z| {
                z.copy_(x, false)?;
                Ok(z.clone())
            },
            |x, _, _| x,
        ),
        (
            "device copy, strided",
            |x, _, z| {
                let zt = z.view([32, 64])?.t()?;
                zt.copy_(&x.view([64, 32])?, false)?;
                Ok(z.clone())
            },
            |_, _, _| f64::NAN, // checked below against the transpose
        ),
        (
            "device copy, converting",
            |x, _, z| {
                z.copy_(&x.to_dtype(DType::F64)?, false)?;
                Ok(z.clone())
            },
            |x, _, _| x,
        ),
    ];
    for (i, (what, step, reference)) in paths.into_iter().enumerate() {
        let (x, w, z) = (tensor(&hx)?, tensor(&hw)?, tensor(&hz)?);
        // Only the second operand's path reads `w`; the others leave its block free to reuse.
        let dropped = if i == 1 { vec![x.data_ptr(), w.data_ptr()] } else { vec![x.data_ptr()] };
        let mut g = CUDAGraph::new();
        let out = cuda::graph(&mut g, GraphOptions::default(), || step(&x, &w, &z))?;
        drop((x, w));
        let sentinel = 1000.0 + i as f32;
        let others = reuse_pressure(what, &dropped, n, sentinel)?;
        z.copy_(&tensor(&hz)?, false)?;
        g.replay()?;
        let got = out.to_vec::<f32>()?;
        if what == "device copy, strided" {
            // z viewed [32, 64] and transposed took x viewed [64, 32]: z[r][c] = x[c][r].
            let want = (0..n).map(|k| hx[(k % 64) * 32 + k / 64] as f64);
            against(&got, want, what);
        } else {
            let want = (0..n).map(|k| reference(hx[k] as f64, hw[k] as f64, hz[k] as f64));
            against(&got, want, what);
        }
        untouched(&others, sentinel)?;
    }
    Ok(())
}

/// Fills queued on a tensor made outside the capture — a memset (`fill_(0)`, `zeros`' path) and
/// the fill kernel (`fill_` of another value) — keep it alive: after its handle drops, its block
/// is not handed out again, so a replay's fill lands in it and not in live memory.
#[test]
fn fills_captured_on_a_dropped_tensor_never_write_memory_handed_out_since() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let n = 4096;
    for (i, value) in [0.0f32, 2.5].into_iter().enumerate() {
        let x = tensor(&data(31 + i as u64, n))?;
        let dropped = [x.data_ptr()];
        let mut g = CUDAGraph::new();
        cuda::graph(&mut g, GraphOptions::default(), || x.fill_(value))?;
        assert!(g.node_count() >= 1, "the fill was captured");
        drop(x);
        let sentinel = -7.0 - i as f32;
        let others = reuse_pressure("fill", &dropped, n, sentinel)?;
        g.replay()?;
        untouched(&others, sentinel)?;
    }
    // A tensor of zeros made inside the capture is the capture's own (its pool's): a replay
    // zeroes it again, and the work after reads it.
    let hx = data(33, n);
    let x = tensor(&hx)?;
    let mut g = CUDAGraph::new();
    let y = cuda::graph(&mut g, GraphOptions::default(), || {
        let z = Tensor::zeros([n], DType::F32, dev())?;
        z.add_(&x)?;
        Ok(z)
    })?;
    y.fill_(5.0)?;
    g.replay()?;
    against(&y.to_vec::<f32>()?, hx.iter().map(|&v| v as f64), "zeros + x");
    Ok(())
}

/// A non-blocking copy from pinned memory, captured, keeps the pinned source (and the device
/// destination) alive: the replay copies the source's bytes of then, after its handle dropped.
#[test]
fn a_captured_copy_from_pinned_memory_keeps_its_source_after_the_handle_drops() -> Result<()> {
    let Some(_s) = serial() else { return Ok(()) };
    let n = 1024;
    let h = data(41, n);
    let pinned = Tensor::from_slice(&h, [n], Device::Cpu)?.pin_memory()?;
    let z = Tensor::zeros([n], DType::F32, dev())?;
    let mut g = CUDAGraph::new();
    cuda::graph(&mut g, GraphOptions::default(), || z.copy_(&pinned, true))?;
    drop(pinned);
    // Pinned blocks freed now would be handed out again by these.
    let others: Vec<Tensor> =
        (0..8).map(|_| Tensor::full([n], 9.0, DType::F32, Device::Cpu)?.pin_memory()).collect::<Result<_>>()?;
    z.fill_(0.0)?;
    g.replay()?;
    against(&z.to_vec::<f32>()?, h.iter().map(|&v| v as f64), "pinned → device");
    for t in &others {
        assert!(t.to_vec::<f32>()?.iter().all(|&v| v == 9.0));
    }
    Ok(())
}
