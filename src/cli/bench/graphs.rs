//! The CUDA-graph rows, beside `torch.cuda.CUDAGraph` in `bench/pytorch_bench.py` (`graph_replay`
//! there), on PyTorch's anchor workload: a chain of `z = z + y` on 16 f32 elements.
//!
//! * `graph_replay_{10,100,1000}`: host ns per `replay()` of the captured chain (median of
//!   `host_runs` runs of `graph_replays` replays, each run after a synchronize).
//! * `graph_device_per_op_100`: device ns per op of the 100-op graph (events around
//!   `graph_replays` replays); `graph_eager_device_per_op_100` the same chain run eagerly.
//! * `graph_capture_100`: ms of a whole `cuda::graph` capture of the 100-op chain (median of
//!   `runs`), as `with torch.cuda.graph(g):` is timed there.
//!
//! Each graph's result is checked (`x + n·y`, exact in small integers) before it is timed.

use super::measure::{check, event_ms, median, Sizes, StepResult};
use cudasem::cuda::{self, CUDAGraph, GraphOptions};
use cudasem::{DType, Tensor};
use std::time::Instant;

/// `z = x; n times z = z + y` (each op allocates its result).
fn chain(x: &Tensor, y: &Tensor, n: usize) -> cudasem::Result<Tensor> {
    let mut z = x.clone();
    for _ in 0..n {
        z = z.add(y)?;
    }
    Ok(z)
}

/// Every row of the `graph_replay` step.
pub fn replay_rows(s: &Sizes) -> StepResult {
    let x = Tensor::full([16], 3.0, DType::F32, "cuda")?;
    let y = Tensor::ones([16], DType::F32, "cuda")?;
    let mut out = Vec::new();
    for (n, name) in [(10, "graph_replay_10"), (100, "graph_replay_100"), (1000, "graph_replay_1000")] {
        let mut g = CUDAGraph::new();
        let z = cuda::graph(&mut g, GraphOptions::default(), || chain(&x, &y, n))?;
        g.replay()?;
        let got: Vec<f32> = z.to_vec()?;
        check(got.iter().all(|&v| v == 3.0 + n as f32), || format!("a {n}-op graph gave {:?}", &got[..4]))?;
        let mut host = Vec::with_capacity(s.host_runs);
        for _ in 0..s.host_runs {
            cuda::synchronize(None)?;
            let t = Instant::now();
            for _ in 0..s.graph_replays {
                g.replay()?;
            }
            host.push(t.elapsed().as_secs_f64() * 1e9 / s.graph_replays as f64);
        }
        cuda::synchronize(None)?;
        out.push((name, median(host)));
        if n == 100 {
            // Median device ms per replay (or eager chain) over `runs` runs of `graph_replays`.
            let per_op = |ms: f64| ms * 1e6 / n as f64;
            let replay = event_ms(1, s.runs, s.graph_replays, || g.replay())?;
            out.push(("graph_device_per_op_100", per_op(replay)));
            let eager = event_ms(1, s.runs, s.graph_replays, || chain(&x, &y, n).map(drop))?;
            out.push(("graph_eager_device_per_op_100", per_op(eager)));
        }
    }
    let mut capture = Vec::with_capacity(s.runs);
    for _ in 0..s.runs {
        let mut g = CUDAGraph::new();
        let t = Instant::now();
        let z = cuda::graph(&mut g, GraphOptions::default(), || chain(&x, &y, 100))?;
        capture.push(t.elapsed().as_secs_f64() * 1e3);
        drop((z, g));
    }
    out.push(("graph_capture_100", median(capture)));
    Ok(out)
}
