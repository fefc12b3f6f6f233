//! ProcessGroupNCCL's stream semantics, proven with delayed streams and data (never host
//! timings): a collective waits for the work queued on the current stream before it; with
//! `async_op = false` the current stream waits for the collective, with `true` `Work::wait` does;
//! the host does not block on the device in either; a tensor dropped right after the call keeps
//! its memory until the collective is done. For groups of 1, 2 and 4 ranks of this process, on
//! the simulated machine and through NCCL.

mod common;
mod dist_util;

use common::assert_busy;
use cudasem::cuda::{self, Stream};
use cudasem::distributed::{ProcessGroup, ReduceOp};
use cudasem::testing::delay;
use cudasem::{DType, Device, Result, Tensor};
use dist_util::{groups, on_ranks_ok, serial};
use std::time::{Duration, Instant};

const DELAY: Duration = Duration::from_millis(200);

/// The sum over ranks of `rank + 1`.
fn ranks_sum(world: usize) -> f32 {
    (1..=world).map(|r| r as f32).sum()
}

#[test]
fn a_collective_sees_the_work_queued_before_it_on_the_current_stream() {
    let _one = serial();
    for groups in groups() {
        let world = groups.len();
        let got = on_ranks_ok(&groups, |g| {
            let dev = Device::cuda(g.device());
            let t = Tensor::zeros([1000], DType::F32, dev)?;
            t.cpu()?; // the zeros are written
                      // The fill is queued behind a delay: a collective that did not wait for the current
                      // stream would reduce the zeros.
            delay(&cuda::current_stream(g.device())?, DELAY)?;
            t.fill_((g.rank() + 1) as f64)?;
            // Into another tensor, so that a world of one shows the order too.
            let gathered = Tensor::zeros([1000 * g.world_size()], DType::F32, dev)?;
            g.all_gather_into_tensor(&gathered, &t, false)?;
            g.all_reduce(&t, ReduceOp::Sum, false)?;
            Ok((gathered.to_vec::<f32>()?, t.to_vec::<f32>()?))
        });
        for (r, (gathered, v)) in got.iter().enumerate() {
            for (k, part) in gathered.chunks(1000).enumerate() {
                assert!(part.iter().all(|&x| x == (k + 1) as f32), "world {world}, rank {r}: part {k} is {}", part[0]);
            }
            assert!(v.iter().all(|&x| x == ranks_sum(world)), "world {world}, rank {r}: {:?}", &v[..4]);
        }
    }
}

/// One rank's check that the current stream is ordered after a collective whose communication
/// stream is delayed: through `async_op = false`, or `true` and `Work::wait`.
fn current_stream_waits(g: &ProcessGroup, async_op: bool) -> Result<Vec<f32>> {
    let dev = Device::cuda(g.device());
    let t = Tensor::full([1000], (g.rank() + 1) as f64, DType::F32, dev)?;
    let busy = |work: &cudasem::distributed::Work, queued: Instant| -> Result<()> {
        // The call returned while the collective is still held back: the host did not block.
        assert_busy(!work.is_completed()?, queued, DELAY, "the collective behind a delayed communication stream");
        Ok(())
    };
    delay(g.comm_stream(), DELAY)?;
    let queued = Instant::now();
    let work = g.all_reduce(&t, ReduceOp::Sum, async_op)?;
    busy(&work, queued)?;
    if async_op {
        work.wait()?;
        busy(&work, queued)?; // wait() does not block the host either
    }
    // Queued on the current stream right away: it must read the reduced values.
    let doubled = (&t * 2.0)?;
    let v = doubled.to_vec::<f32>()?;
    assert!(work.is_completed()?, "the current stream waited for the collective, so it is done");
    Ok(v)
}

#[test]
fn the_current_stream_waits_for_a_synchronous_collective_and_for_work_wait() {
    let _one = serial();
    for groups in groups() {
        let world = groups.len();
        for async_op in [false, true] {
            let got = on_ranks_ok(&groups, |g| current_stream_waits(g, async_op));
            for (r, v) in got.iter().enumerate() {
                let want = 2.0 * ranks_sum(world);
                assert!(v.iter().all(|&x| x == want), "world {world}, async_op {async_op}, rank {r}: {}", v[0]);
            }
        }
    }
}

#[test]
fn memory_of_a_dropped_input_is_not_reused_before_the_collective_finished() {
    let _one = serial();
    for groups in groups() {
        let world = groups.len();
        let got = on_ranks_ok(&groups, |g| {
            let dev = Device::cuda(g.device());
            let current: Stream = cuda::current_stream(g.device())?;
            let n = 4096;
            let out = Tensor::zeros([n * world], DType::F32, dev)?;
            let input = Tensor::full([n], (g.rank() + 1) as f64, DType::F32, dev)?;
            let old = input.data_ptr();
            delay(g.comm_stream(), DELAY)?;
            let work = g.all_gather_into_tensor(&out, &input, true)?;
            // Drop the input and the work: only record_stream on the communication stream keeps
            // the block from the next allocation of the same size on the current stream.
            drop(work);
            drop(input);
            let scratch = Tensor::empty([n], DType::F32, dev)?;
            scratch.fill_(-99.0)?; // runs now on the current stream, not behind the delay
            let reused = scratch.data_ptr() == old;
            current.wait_stream(g.comm_stream())?;
            Ok((reused, out.to_vec::<f32>()?))
        });
        for (r, (reused, v)) in got.iter().enumerate() {
            assert!(!reused, "world {world}, rank {r}: the input's block was handed out while the collective used it");
            for (k, chunk) in v.chunks(4096).enumerate() {
                assert!(
                    chunk.iter().all(|&x| x == (k + 1) as f32),
                    "world {world}, rank {r}: part {k} is {}",
                    chunk[0]
                );
            }
        }
    }
}
