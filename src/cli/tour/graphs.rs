//! The tour's CUDA-graph section: a 100-op chain captured once, replayed, timed beside eager,
//! and its private pool as the allocator reports it.

use super::section::{check, e, ms_between, timing_event, Failure, Outcome};
use cudasem::cuda::memory::format_bytes;
use cudasem::cuda::{self, CUDAGraph, GraphOptions};
use cudasem::{DType, Device, Tensor};
use std::time::Instant;

/// Ops in the chain (PyTorch's anchor: `z = z + y` on 16 f32 elements).
const OPS: usize = 100;
/// Timed repetitions of the eager chain and of the replay.
const REPS: usize = 50;

/// Host µs per op and device µs per op of `REPS` runs of `run` (each `OPS` ops), by events.
fn time(run: &dyn Fn() -> cudasem::Result<()>) -> Result<(f64, f64), Failure> {
    run().map_err(e)?; // warm
    cuda::synchronize(None).map_err(e)?;
    let (a, b) = (timing_event(), timing_event());
    let t = Instant::now();
    a.record(None).map_err(e)?;
    for _ in 0..REPS {
        run().map_err(e)?;
    }
    b.record(None).map_err(e)?;
    let host = t.elapsed().as_secs_f64() * 1e6 / (REPS * OPS) as f64;
    b.synchronize().map_err(e)?;
    Ok((host, ms_between(&a, &b)? * 1e3 / (REPS * OPS) as f64))
}

/// Captures `z += y` 100 times, checks the replays' arithmetic, and times both ways.
pub fn graphs() -> Result<Outcome, Failure> {
    let dev = Device::cuda(cuda::current_device().map_err(e)?);
    let y = Tensor::ones([16], DType::F32, dev).map_err(e)?;
    let x = Tensor::zeros([16], DType::F32, dev).map_err(e)?;
    // `z = z + y`, out of place: every op allocates its result (in the capture: from its pool).
    let chain = || {
        let mut z = x.clone();
        for _ in 0..OPS {
            z = z.add(&y)?;
        }
        Ok(z)
    };
    let (eager_host, eager_dev) = time(&|| chain().map(drop))?;
    let reserved = cuda::memory_reserved(None).map_err(e)?;
    let mut g = CUDAGraph::new();
    let t = Instant::now();
    let out = cuda::graph(&mut g, GraphOptions::default(), chain).map_err(e)?;
    let capture_ms = t.elapsed().as_secs_f64() * 1e3;
    // New data in the captured input: each replay computes x + 100 from it (exact small integers).
    for start in [5.0, -7.0] {
        x.fill_(start).map_err(e)?;
        g.replay().map_err(e)?;
        let got = out.to_vec::<f32>().map_err(e)?;
        check(got.iter().all(|&v| v == start as f32 + OPS as f32), || {
            format!("a replay from x = {start} gave {got:?}, not {}", start + OPS as f64)
        })?;
    }
    let (replay_host, replay_dev) = time(&|| g.replay())?;
    println!("   {OPS} x `z = z + y` on 16 f32 elements, captured in {capture_ms:.2} ms into {} nodes", g.node_count());
    println!("   {:<24} host {:>7.2} µs/op   device {:>7.2} µs/op", "eager", eager_host, eager_dev);
    println!(
        "   {:<24} host {:>7.2} µs/op   device {:>7.2} µs/op   ({:.1}x less host time, {:.1}x less device time)",
        "replay",
        replay_host,
        replay_dev,
        eager_host / replay_host.max(1e-9),
        eager_dev / replay_dev.max(1e-9)
    );
    if cuda::driver_name() == "sim" {
        println!(
            "   (device times here are the simulated machine's model, not a measurement: a replayed node costs \
             what the eager op costs, and the model has no launch gaps for the graph to remove; the host times are measured)"
        );
    }
    let pool = g.pool().map_err(e)?;
    let snap = cuda::memory_snapshot().map_err(e)?;
    let mine: Vec<_> = snap.segments.iter().filter(|s| s.segment_pool_id == pool).collect();
    let bytes: usize = mine.iter().map(|s| s.total_size).sum();
    println!(
        "   private pool {pool:?}: {} segment(s), {} (memory_reserved {} before the capture, {} now)",
        mine.len(),
        format_bytes(bytes),
        format_bytes(reserved),
        format_bytes(cuda::memory_reserved(None).map_err(e)?)
    );
    drop(out);
    g.reset().map_err(e)?;
    Ok(Outcome::Ok)
}
