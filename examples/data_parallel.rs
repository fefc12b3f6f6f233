//! Data-parallel training of a linear model, as DistributedDataParallel does it: every rank
//! computes the gradient of its own data shard, averages it over the ranks with
//! `all_reduce(Avg)` queued with `async_op = true`, and — while that runs on the group's
//! communication stream — computes its shard's loss on another stream; then `Work::wait` orders
//! the current stream after the all-reduce and the step updates the parameters.
//!
//! Started by `cudasem run --nproc-per-node 2 -- target/debug/examples/data_parallel` (torchrun's
//! environment: one process per rank, `init_process_group` over `env://`), or plainly with
//! `cargo run --example data_parallel` (no `RANK`: one process drives every device, a thread per
//! rank, through `ProcessGroup::from_devices`). On the simulated machine or on GPUs.
//!
//! Checks, and exits non-zero otherwise: every rank ends with exactly the same parameters, they
//! match a float64 run of the same full-batch gradient descent on the host, and the loss fell.
use cudasem::cuda::{self, Stream};
use cudasem::distributed::{init_process_group, InitOptions, ProcessGroup, ReduceOp};
use cudasem::{DType, Device, Tensor};

const FEATURES: usize = 16;
const ROWS: usize = 64; // per rank
const STEPS: usize = 8;
const LR: f64 = 0.1;

/// Rank `r`'s shard: inputs `[ROWS, FEATURES]` and targets `[ROWS, 1]` of a known linear model.
fn shard(rank: usize) -> (Vec<f32>, Vec<f32>) {
    let mut state = 0x9E37_79B9_u64.wrapping_mul(rank as u64 + 1);
    let mut next = || {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    let x: Vec<f32> = (0..ROWS * FEATURES).map(|_| next()).collect();
    let truth: Vec<f32> = (0..FEATURES).map(|j| (j as f32 * 0.37).sin()).collect();
    let y = (0..ROWS).map(|i| (0..FEATURES).map(|j| x[i * FEATURES + j] * truth[j]).sum::<f32>()).collect();
    (x, y)
}

/// One rank's training: its final parameters and its first and last losses.
fn train(pg: &ProcessGroup) -> cudasem::Result<(Vec<f32>, f32, f32)> {
    let dev = Device::cuda(pg.device());
    let (x, y) = shard(pg.rank());
    let x = Tensor::from_slice(&x, [ROWS, FEATURES], dev)?;
    let y = Tensor::from_slice(&y, [ROWS, 1], dev)?;
    let mut w = Tensor::zeros([FEATURES, 1], DType::F32, dev)?;
    let side = Stream::new(pg.device(), 0)?;
    let current = cuda::current_stream(pg.device())?;
    let mut losses = Vec::new();
    for _ in 0..STEPS {
        let err = (&x.matmul(&w)? - &y)?;
        let grad = (&x.transpose(0, 1)?.matmul(&err)? * (2.0 / ROWS as f64))?;
        let work = pg.all_reduce(&grad, ReduceOp::Avg, true)?; // returns at once
                                                               // Overlapped with the all-reduce: this shard's loss, on another stream.
        side.wait_stream(&current)?;
        let loss = cuda::with_stream(&side, || (&err * &err)?.mean_all())?;
        err.record_stream(&side)?;
        work.wait()?; // the current stream waits for the averaged gradient; the host does not
        w = (&w - &(&grad * LR)?)?;
        current.wait_stream(&side)?; // the loss was computed on `side`: read it after that work
        losses.push(loss.to_vec::<f32>()?[0]);
    }
    // Every rank's parameters, side by side.
    let all = Tensor::zeros([pg.world_size() * FEATURES], DType::F32, dev)?;
    pg.all_gather_into_tensor(&all, &w.reshape([FEATURES])?, false)?;
    let all = all.to_vec::<f32>()?;
    let mine = w.to_vec::<f32>()?;
    for (r, theirs) in all.chunks(FEATURES).enumerate() {
        if theirs != mine.as_slice() {
            return Err(cudasem::Error::InvalidArgument {
                op: "data_parallel",
                reason: format!("rank {} and rank {r} ended with different parameters", pg.rank()),
            });
        }
    }
    Ok((mine, losses[0], losses[STEPS - 1]))
}

/// The same descent on the host in float64 over every shard at once.
fn reference(world: usize) -> Vec<f64> {
    let shards: Vec<(Vec<f32>, Vec<f32>)> = (0..world).map(shard).collect();
    let mut w = vec![0.0f64; FEATURES];
    for _ in 0..STEPS {
        let mut g = [0.0f64; FEATURES];
        for (x, y) in &shards {
            for i in 0..ROWS {
                let pred: f64 = (0..FEATURES).map(|j| x[i * FEATURES + j] as f64 * w[j]).sum();
                let e = pred - y[i] as f64;
                for j in 0..FEATURES {
                    g[j] += 2.0 / ROWS as f64 * x[i * FEATURES + j] as f64 * e / world as f64;
                }
            }
        }
        for j in 0..FEATURES {
            w[j] -= LR * g[j];
        }
    }
    w
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let results = if std::env::var_os("RANK").is_some() {
        let pg = init_process_group(InitOptions::default())?;
        println!("rank {} of {} on cuda:{} ({:?})", pg.rank(), pg.world_size(), pg.device(), pg.backend());
        vec![(pg.world_size(), train(&pg)?)]
    } else {
        let devices: Vec<usize> = (0..cuda::device_count()).collect();
        let groups = ProcessGroup::from_devices(&devices)?;
        println!("one process, {} ranks on {devices:?}", groups.len());
        let out: Vec<cudasem::Result<_>> = std::thread::scope(|s| {
            let hs: Vec<_> = groups.iter().map(|g| s.spawn(|| train(g))).collect();
            hs.into_iter().map(|h| h.join().expect("a rank panicked")).collect()
        });
        out.into_iter().map(|r| r.map(|t| (groups.len(), t))).collect::<cudasem::Result<_>>()?
    };
    for (world, (w, first, last)) in results {
        let want = reference(world);
        let far = w.iter().zip(&want).map(|(a, b)| (*a as f64 - b).abs()).fold(0.0, f64::max);
        println!("loss {first:.4} -> {last:.4}; parameters within {far:.1e} of the float64 reference");
        if last.partial_cmp(&first) != Some(std::cmp::Ordering::Less) || far > 1e-4 {
            return Err(format!("check failed: loss {first} -> {last}, distance to the reference {far}").into());
        }
    }
    cudasem::distributed::destroy_process_group();
    Ok(())
}
