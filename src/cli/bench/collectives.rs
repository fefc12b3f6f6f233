//! The collective rows, beside torch.distributed's NCCL in `bench/pytorch_bench.py`: one process
//! drives every device of the machine (`ProcessGroup::from_devices`, a thread per rank, as
//! nccl-tests' `-g N`), the all-reduce timed by events on rank 0's current stream.
//!
//! * `allreduce_1gib_busbw`: GB/s of nccl-tests' bus bandwidth, `bytes / time × 2(n−1)/n`, for a
//!   1 GiB f32 all-reduce (sum);
//! * `allreduce_8kib_latency`: µs per 8 KiB f32 all-reduce.
//!
//! Skipped with the reason on one device (a world of one rank moves nothing, so it has no bus
//! bandwidth) and on the simulated machine (its backend is a test double whose collectives take
//! no simulated time). The result of each is checked before it is timed.

use super::measure::{check, median, Sizes, StepResult, Stop};
use cudasem::cuda::{self, Event, EventFlags};
use cudasem::distributed::{InitOptions, ProcessGroup, ReduceOp};
use cudasem::{DType, Device, Tensor};

/// Every row of the `allreduce` step.
pub fn rows(s: &Sizes) -> StepResult {
    let count = cuda::device_count();
    if cuda::driver_name() == "sim" {
        return Err(Stop::Skip("the sim backend is a test double: its collectives take no simulated time".into()));
    }
    if count < 2 {
        return Err(Stop::Skip(format!(
            "a world of one rank has no bus bandwidth: needs 2 devices, the {} driver has {count}",
            cuda::driver_name()
        )));
    }
    // The check through the store is a host round trip per collective: off, as in PyTorch.
    let options = InitOptions { check_collectives: false, ..InitOptions::default() };
    let groups = ProcessGroup::from_devices_with(&(0..count).collect::<Vec<_>>(), &options)?;
    let big = time_all_reduce(&groups, s.copy_elems, s)?;
    let small = time_all_reduce(&groups, 2048, s)?;
    let bytes = (s.copy_elems * 4) as f64;
    let busbw = bytes / (big * 1e-3) / 1e9 * 2.0 * (count - 1) as f64 / count as f64;
    Ok(vec![("allreduce_1gib_busbw", busbw), ("allreduce_8kib_latency", small * 1e3)])
}

/// Median ms per all-reduce of `elems` f32 on every rank (rank 0's events), after a checked one.
fn time_all_reduce(groups: &[ProcessGroup], elems: usize, s: &Sizes) -> Result<f64, Stop> {
    let world = groups.len();
    let per_rank: Vec<cudasem::Result<Vec<f64>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = groups
            .iter()
            .map(|g| {
                scope.spawn(move || {
                    let t = Tensor::ones([elems], DType::F32, Device::cuda(g.device()))?;
                    g.all_reduce(&t, ReduceOp::Sum, false)?;
                    let got = t.narrow(0, 0, 4)?.to_vec::<f32>()?;
                    if got.iter().any(|&x| x != world as f32) {
                        return Err(cudasem::Error::InvalidArgument {
                            op: "allreduce bench",
                            reason: format!("a sum of ones over {world} ranks gave {got:?}"),
                        });
                    }
                    let mut times = Vec::with_capacity(s.runs);
                    for _ in 0..s.warmup + s.runs {
                        let (a, b) = (Event::new(EventFlags::timing()), Event::new(EventFlags::timing()));
                        a.record(None)?;
                        for _ in 0..s.reps {
                            g.all_reduce(&t, ReduceOp::Sum, false)?;
                        }
                        b.record(None)?;
                        b.synchronize()?;
                        times.push(a.elapsed_time(&b)? as f64 / s.reps as f64);
                    }
                    Ok(times.split_off(s.warmup))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Ok(Vec::new()))).collect()
    });
    let mut rank0 = Vec::new();
    for (r, times) in per_rank.into_iter().enumerate() {
        let times = times?;
        check(!times.is_empty(), || format!("rank {r} measured nothing"))?;
        if r == 0 {
            rank0 = times;
        }
    }
    Ok(median(rank0))
}
