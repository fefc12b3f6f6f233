//! A decode-like loop of small ops, eager and then captured once into a CUDA graph and replayed
//! (`torch.cuda.graph`, `g.replay()`): the static-input pattern — each replay reads what the
//! captured input holds, so the step's output is copied back into it inside the graph — with the
//! same numbers both ways, the device time per step of each, and the graph's private pool.
//!
//! `cargo run --example cuda_graph_decode`: on the simulated machine or a real GPU
//! (`CUDASEM_DRIVER=cuda`). Exits non-zero if a check fails.
use cudasem::cuda::{self, CUDAGraph, Event, EventFlags, GraphOptions};
use cudasem::{DType, Tensor};

const HIDDEN: usize = 1024;
const STEPS: usize = 50;

/// One decode-like step on a `[1, HIDDEN]` vector: a matmul, a LayerNorm-like chain and a gelu.
fn step(x: &Tensor, w: &Tensor, gamma: &Tensor) -> cudasem::Result<Tensor> {
    let h = x.matmul(w)?;
    let d = h.sub(&h.mean(&[-1], true)?)?;
    let r = d.mul(&d)?.mean(&[-1], true)?.add(1e-5)?.rsqrt()?;
    d.mul(&r)?.gelu()?.mul(gamma)
}

/// Device ms of `STEPS` calls of `f`, by events on the current stream.
fn timed(mut f: impl FnMut() -> cudasem::Result<()>) -> cudasem::Result<f32> {
    let (a, b) = (Event::new(EventFlags::timing()), Event::new(EventFlags::timing()));
    a.record(None)?;
    for _ in 0..STEPS {
        f()?;
    }
    b.record(None)?;
    b.synchronize()?;
    a.elapsed_time(&b)
}

fn check(ok: bool, what: String) -> Result<(), String> {
    ok.then_some(()).ok_or_else(|| format!("check failed: {what}"))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let w = Tensor::randn([HIDDEN, HIDDEN], DType::F32, "cuda")?.mul(1.0 / (HIDDEN as f64).sqrt())?;
    let gamma = Tensor::randn([HIDDEN], DType::F32, "cuda")?.mul(0.1)?.add(1.0)?;
    let start = Tensor::randn([1, HIDDEN], DType::F32, "cuda")?;

    // Eager: every op is a launch from the host.
    let mut x = start.clone();
    let eager_ms = timed(|| {
        x = step(&x, &w, &gamma)?;
        Ok(())
    })?;
    let eager_result: Vec<f32> = x.to_vec()?;

    // Captured once: the input is static, and the graph writes each step's output back into it.
    let state = Tensor::empty([1, HIDDEN], DType::F32, "cuda")?;
    state.copy_(&start, false)?;
    let mut g = CUDAGraph::new();
    cuda::graph(&mut g, GraphOptions::default(), || state.copy_(&step(&state, &w, &gamma)?, false))?;
    let graph_ms = timed(|| g.replay())?;
    let replayed: Vec<f32> = state.to_vec()?;

    let worst = eager_result.iter().zip(&replayed).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    check(worst <= 1e-4, format!("replays differ from eager steps by {worst}"))?;
    println!(
        "{STEPS} steps of a [1, {HIDDEN}] decode step ({} nodes in the graph): eager {:.1} µs/step, \
         replayed {:.1} µs/step on the device; results agree within {worst:.1e}",
        g.node_count(),
        eager_ms * 1e3 / STEPS as f32,
        graph_ms * 1e3 / STEPS as f32
    );
    if cuda::driver_name() == "sim" {
        // Ask the driver: under the simulated machine the event times above are its model, not a
        // measurement.
        println!(
            "these device times are modelled by the simulated machine, not measured: each captured node costs \
             what the same op costs eagerly (a fixed per-op overhead plus its bytes and FLOPs at an H200's \
             rates), and the model has no host launch gaps for a graph to remove — so the replay shows no gain \
             (it even runs one more node: the copy of each step's output back into the static input). On a GPU \
             (CUDASEM_DRIVER=cuda) the replay saves the gaps between the eager launches."
        );
    } else {
        println!("these device times were measured on the GPU with events");
    }
    let pool = g.pool()?;
    let snapshot = cuda::memory_snapshot()?;
    let held: usize = snapshot.segments.iter().filter(|s| s.segment_pool_id == pool).map(|s| s.total_size).sum();
    check(held > 0, "the graph's private pool holds the step's intermediates".into())?;
    println!("the graph's private pool {pool:?} holds {held} bytes; reset() and empty_cache() give them back");
    g.reset()?;
    cuda::empty_cache()?;
    let left: usize = cuda::memory_snapshot()?.segments.iter().filter(|s| s.segment_pool_id == pool).count();
    check(left == 0, format!("{left} segments of the pool are left after reset + empty_cache"))?;
    Ok(())
}
