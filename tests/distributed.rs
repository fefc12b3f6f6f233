//! Every collective × dtype (f32, f64, f16, bf16, i32, i64, u8) × reduction against a CPU
//! reference on random data, for groups of 1, 2 and 4 ranks of this process
//! (`ProcessGroup::from_devices`, one thread per rank) — on the simulated machine of four GPUs,
//! and unchanged through NCCL on a CUDA machine (a world of one rank on one GPU).
//!
//! References: floating-point results against the `f64` combination of the ranks' (rounded)
//! inputs, within a few roundings of the dtype scaled by the magnitudes combined; integer results
//! exactly, with NCCL's wrapping arithmetic and its average toward zero.

mod dist_util;

use cudasem::distributed::{ReduceOp, COLLECTIVE_DTYPES};
use cudasem::{DType, Device, Result, Tensor};
use dist_util::{groups, on_ranks_ok, serial, Rng};

const N: usize = 37;

/// Values of one rank: floats as `f64`, integers as `i64`.
#[derive(Debug, Clone, PartialEq)]
enum Values {
    Float(Vec<f64>),
    Int(Vec<i64>),
}

fn is_float(dtype: DType) -> bool {
    matches!(dtype, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
}

/// Random values of `dtype`'s range, `len` of them.
fn random(dtype: DType, len: usize, seed: u64) -> Vec<f64> {
    let mut rng = Rng::new(seed);
    (0..len)
        .map(|_| match dtype {
            DType::U8 => (rng.next_u64() % 256) as f64,
            DType::I32 => (rng.next_u64() as u32 as i32) as f64,
            _ => rng.float(),
        })
        .collect()
}

/// A tensor of `dtype` on `device` holding `len` random values; i64 gets its full range.
fn tensor(dtype: DType, len: usize, seed: u64, device: usize) -> Result<Tensor> {
    let dev = Device::cuda(device);
    if dtype == DType::I64 {
        let mut rng = Rng::new(seed);
        let v: Vec<i64> = (0..len).map(|_| rng.next_u64() as i64).collect();
        return Tensor::from_slice(&v, [len], dev);
    }
    if is_float(dtype) {
        return Tensor::from_slice(&random(dtype, len, seed), [len], dev)?.to_dtype(dtype);
    }
    let v: Vec<i64> = random(dtype, len, seed).into_iter().map(|x| x as i64).collect();
    Tensor::from_slice(&v, [len], dev)?.to_dtype(dtype)
}

/// What a tensor holds, read back exactly.
fn values(t: &Tensor) -> Result<Values> {
    Ok(if is_float(t.dtype()) {
        Values::Float(t.to_dtype(DType::F64)?.to_vec::<f64>()?)
    } else {
        Values::Int(t.to_dtype(DType::I64)?.to_vec::<i64>()?)
    })
}

/// `v` wrapped to `dtype`'s width, as NCCL's integer arithmetic does.
fn wrap(dtype: DType, v: i128) -> i128 {
    match dtype {
        DType::U8 => v as u8 as i128,
        DType::I32 => v as i32 as i128,
        _ => v as i64 as i128,
    }
}

/// The reference reduction of `parts` (one per rank) with `op`.
fn reference(dtype: DType, op: ReduceOp, parts: &[Values]) -> Values {
    let n = parts.len();
    match &parts[0] {
        Values::Float(first) => Values::Float(
            (0..first.len())
                .map(|i| {
                    let xs = parts.iter().map(|p| match p {
                        Values::Float(v) => v[i],
                        Values::Int(_) => unreachable!("one dtype per collective"),
                    });
                    match op {
                        ReduceOp::Sum => xs.sum(),
                        ReduceOp::Avg => xs.sum::<f64>() / n as f64,
                        ReduceOp::Product => xs.product(),
                        ReduceOp::Min => xs.fold(f64::INFINITY, f64::min),
                        ReduceOp::Max => xs.fold(f64::NEG_INFINITY, f64::max),
                    }
                })
                .collect(),
        ),
        Values::Int(first) => Values::Int(
            (0..first.len())
                .map(|i| {
                    let mut xs = parts.iter().map(|p| match p {
                        Values::Int(v) => v[i] as i128,
                        Values::Float(_) => unreachable!("one dtype per collective"),
                    });
                    let head = xs.next().unwrap_or(0);
                    let r = xs.fold(head, |a, b| match op {
                        ReduceOp::Sum | ReduceOp::Avg => wrap(dtype, a + b),
                        ReduceOp::Product => wrap(dtype, a * b),
                        ReduceOp::Min => a.min(b),
                        ReduceOp::Max => a.max(b),
                    });
                    (if op == ReduceOp::Avg { r / n as i128 } else { r }) as i64
                })
                .collect(),
        ),
    }
}

/// How far a float result may be from the reference: a few roundings of the dtype, relative to
/// the magnitudes the ranks combined (`scale`).
fn tolerance(dtype: DType, scale: f64) -> f64 {
    let eps = match dtype {
        DType::F64 => 1e-15,
        DType::F32 => 1.2e-7,
        DType::F16 => 9.8e-4,
        _ => 7.9e-3,
    };
    4.0 * eps * scale.max(1.0)
}

/// `got` against `want`; `scale[i]`: the magnitude combined into element `i`.
#[track_caller]
fn assert_matches(what: &str, dtype: DType, got: &Values, want: &Values, scale: &[f64]) {
    match (got, want) {
        (Values::Int(g), Values::Int(w)) => assert_eq!(g, w, "{what}"),
        (Values::Float(g), Values::Float(w)) => {
            assert_eq!(g.len(), w.len(), "{what}: length");
            for i in 0..g.len() {
                let tol = tolerance(dtype, scale.get(i).copied().unwrap_or(1.0));
                assert!(
                    (g[i] - w[i]).abs() <= tol,
                    "{what}: element {i} is {} but the reference is {} (±{tol})",
                    g[i],
                    w[i]
                );
            }
        }
        _ => panic!("{what}: kinds differ"),
    }
}

/// Σ|x| per element over the ranks (products: the product of |x|).
fn magnitudes(op: ReduceOp, parts: &[Values]) -> Vec<f64> {
    let abs: Vec<Values> = parts
        .iter()
        .map(|p| match p {
            Values::Float(v) => Values::Float(v.iter().map(|x| x.abs()).collect()),
            other => other.clone(),
        })
        .collect();
    let op = if op == ReduceOp::Product { ReduceOp::Product } else { ReduceOp::Sum };
    match reference(DType::F64, op, &abs) {
        Values::Float(v) => v,
        Values::Int(_) => Vec::new(),
    }
}

fn seed(dtype: DType, rank: usize, salt: u64) -> u64 {
    (dtype as u64) << 32 | (rank as u64) << 8 | salt
}

#[test]
fn all_reduce_every_dtype_and_op() {
    let _one = serial();
    for groups in groups() {
        let world = groups.len();
        for dtype in COLLECTIVE_DTYPES {
            for (k, op) in ReduceOp::ALL.into_iter().enumerate() {
                let results = on_ranks_ok(&groups, |g| {
                    let t = tensor(dtype, N, seed(dtype, g.rank(), k as u64), g.device())?;
                    let input = values(&t)?;
                    g.all_reduce(&t, op, false)?;
                    Ok((input, values(&t)?))
                });
                let inputs: Vec<Values> = results.iter().map(|r| r.0.clone()).collect();
                let want = reference(dtype, op, &inputs);
                let scale = magnitudes(op, &inputs);
                for (r, (_, got)) in results.iter().enumerate() {
                    assert_matches(
                        &format!("all_reduce {dtype} {op:?}, world {world}, rank {r}"),
                        dtype,
                        got,
                        &want,
                        &scale,
                    );
                }
            }
        }
    }
}

#[test]
fn reduce_scatter_every_dtype_and_op() {
    let _one = serial();
    for groups in groups() {
        let world = groups.len();
        for dtype in COLLECTIVE_DTYPES {
            for (k, op) in ReduceOp::ALL.into_iter().enumerate() {
                let results = on_ranks_ok(&groups, |g| {
                    let input = tensor(dtype, N * world, seed(dtype, g.rank(), 16 + k as u64), g.device())?;
                    let output = Tensor::zeros([N], dtype, Device::cuda(g.device()))?;
                    g.reduce_scatter_tensor(&output, &input, op, false)?;
                    Ok((values(&input)?, values(&output)?))
                });
                let inputs: Vec<Values> = results.iter().map(|r| r.0.clone()).collect();
                let (want, scale) = (reference(dtype, op, &inputs), magnitudes(op, &inputs));
                for (r, (_, got)) in results.iter().enumerate() {
                    let part = |v: &Values| match v {
                        Values::Float(x) => Values::Float(x[r * N..][..N].to_vec()),
                        Values::Int(x) => Values::Int(x[r * N..][..N].to_vec()),
                    };
                    let what = format!("reduce_scatter {dtype} {op:?}, world {world}, rank {r}");
                    assert_matches(&what, dtype, got, &part(&want), &scale[scale.len().min(r * N)..]);
                }
            }
        }
    }
}

/// Ranks' inputs concatenated in rank order.
fn concat(parts: &[Values]) -> Values {
    match &parts[0] {
        Values::Float(_) => Values::Float(
            parts.iter().flat_map(|p| if let Values::Float(v) = p { v.clone() } else { Vec::new() }).collect(),
        ),
        Values::Int(_) => Values::Int(
            parts.iter().flat_map(|p| if let Values::Int(v) = p { v.clone() } else { Vec::new() }).collect(),
        ),
    }
}

#[test]
fn broadcast_all_gather_and_all_to_all_every_dtype() {
    let _one = serial();
    for groups in groups() {
        let world = groups.len();
        for dtype in COLLECTIVE_DTYPES {
            let results = on_ranks_ok(&groups, |g| {
                let dev = g.device();
                let b = tensor(dtype, N, seed(dtype, g.rank(), 40), dev)?;
                let b_in = values(&b)?;
                g.broadcast(&b, world - 1, false)?;
                let x = tensor(dtype, N, seed(dtype, g.rank(), 41), dev)?;
                let gathered = Tensor::zeros([world * N], dtype, Device::cuda(dev))?;
                g.all_gather_into_tensor(&gathered, &x, false)?;
                let a = tensor(dtype, N * world, seed(dtype, g.rank(), 42), dev)?;
                let swapped = Tensor::zeros([world * N], dtype, Device::cuda(dev))?;
                g.all_to_all_single(&swapped, &a, false)?;
                Ok([b_in, values(&b)?, values(&x)?, values(&gathered)?, values(&a)?, values(&swapped)?])
            });
            let root_input = results[world - 1][0].clone();
            let xs: Vec<Values> = results.iter().map(|r| r[2].clone()).collect();
            for (r, got) in results.iter().enumerate() {
                let what = |c: &str| format!("{c} {dtype}, world {world}, rank {r}");
                assert_eq!(got[1], root_input, "{}", what("broadcast"));
                assert_eq!(got[3], concat(&xs), "{}", what("all_gather_into_tensor"));
                // Rank r receives part r of every rank's input, in rank order.
                let parts: Vec<Values> = results
                    .iter()
                    .map(|other| match &other[4] {
                        Values::Float(v) => Values::Float(v[r * N..][..N].to_vec()),
                        Values::Int(v) => Values::Int(v[r * N..][..N].to_vec()),
                    })
                    .collect();
                assert_eq!(got[5], concat(&parts), "{}", what("all_to_all_single"));
            }
        }
    }
}

#[test]
fn send_and_recv_around_a_ring_every_dtype() {
    let _one = serial();
    for groups in groups().into_iter().filter(|g| g.len() > 1) {
        let world = groups.len();
        for dtype in COLLECTIVE_DTYPES {
            let results = on_ranks_ok(&groups, |g| {
                let (r, dev) = (g.rank(), g.device());
                let out = tensor(dtype, N, seed(dtype, r, 50), dev)?;
                let into = Tensor::zeros([N], dtype, Device::cuda(dev))?;
                // Even ranks send first, odd ranks receive first: no pair waits on itself.
                let (next, prev) = ((r + 1) % world, (r + world - 1) % world);
                if r % 2 == 0 {
                    g.send(&out, next, false)?;
                    g.recv(&into, prev, false)?;
                } else {
                    g.recv(&into, prev, false)?;
                    g.send(&out, next, false)?;
                }
                Ok((values(&out)?, values(&into)?))
            });
            for (r, (_, got)) in results.iter().enumerate() {
                let prev = (r + world - 1) % world;
                assert_eq!(got, &results[prev].0, "recv {dtype}, world {world}: rank {r} gets rank {prev}'s tensor");
            }
        }
    }
}

#[test]
fn groups_report_their_ranks_and_subgroups_reduce_among_their_members() {
    let _one = serial();
    for groups in groups().into_iter().filter(|g| g.len() > 1) {
        let world = groups.len();
        let members: Vec<usize> = (0..world).rev().step_by(2).collect(); // the odd-from-the-end ranks, reversed
        let sums = on_ranks_ok(&groups, |g| {
            assert_eq!((g.world_size(), g.device()), (world, g.rank()));
            let sub = g.new_group(&members)?;
            let got = match sub {
                None => None,
                Some(sub) => {
                    assert_eq!(sub.world_size(), members.len());
                    assert_eq!(members[sub.rank()], g.rank(), "ranked in the order given");
                    let t = Tensor::full([3], (g.rank() + 1) as f64, DType::F32, Device::cuda(g.device()))?;
                    sub.all_reduce(&t, ReduceOp::Sum, false)?;
                    Some(t.to_vec::<f32>()?)
                }
            };
            // Every rank of the parent group, member or not, meets at its barrier.
            g.barrier()?;
            Ok(got)
        });
        let want: f32 = members.iter().map(|&r| (r + 1) as f32).sum();
        for (r, got) in sums.iter().enumerate() {
            match got {
                Some(v) => assert_eq!(v, &vec![want; 3], "rank {r}"),
                None => assert!(!members.contains(&r), "rank {r} is a member"),
            }
        }
    }
}

/// Rows of 3 elements that rank `r` sends to rank `s` in the uneven all-to-all of `world`
/// ranks: random 0..=3; in groups of more than one rank, rank 0 never sends to the last rank
/// and the last rank sends nothing at all (an empty input); a group of one sends 1..=3 rows.
fn split_matrix(world: usize, salt: u64) -> Vec<Vec<usize>> {
    let mut rng = Rng::new(salt);
    (0..world)
        .map(|r| {
            (0..world)
                .map(|s| {
                    let n = (rng.next_u64() % 4) as usize;
                    if world == 1 {
                        1 + n % 3
                    } else if r == world - 1 || (r == 0 && s == world - 1) {
                        0
                    } else {
                        n
                    }
                })
                .collect()
        })
        .collect()
}

#[test]
fn all_to_all_single_with_uneven_splits_every_dtype() {
    let _one = serial();
    const ROW: usize = 3;
    for groups in groups() {
        let world = groups.len();
        for dtype in COLLECTIVE_DTYPES {
            let splits = split_matrix(world, dtype as u64 + 100 * world as u64);
            let results = on_ranks_ok(&groups, |g| {
                let (r, dev) = (g.rank(), g.device());
                let input_splits = splits[r].clone();
                let output_splits: Vec<usize> = (0..world).map(|s| splits[s][r]).collect();
                let (rows_in, rows_out) = (input_splits.iter().sum::<usize>(), output_splits.iter().sum::<usize>());
                let input = tensor(dtype, rows_in * ROW, seed(dtype, r, 60), dev)?.reshape([rows_in, ROW])?;
                let output = Tensor::zeros([rows_out, ROW], dtype, Device::cuda(dev))?;
                g.all_to_all_single_splits(&output, &input, Some(&output_splits), Some(&input_splits), false)?;
                Ok((values(&input)?, values(&output)?))
            });
            for (r, (_, got)) in results.iter().enumerate() {
                // Rank r receives, from each rank s in turn, the rows s sends it.
                let parts: Vec<Values> = (0..world)
                    .map(|s| {
                        let start = splits[s][..r].iter().sum::<usize>() * ROW;
                        let len = splits[s][r] * ROW;
                        match &results[s].0 {
                            Values::Float(v) => Values::Float(v[start..][..len].to_vec()),
                            Values::Int(v) => Values::Int(v[start..][..len].to_vec()),
                        }
                    })
                    .collect();
                assert_eq!(
                    got,
                    &concat(&parts),
                    "uneven all_to_all_single {dtype}, world {world}, rank {r}: {splits:?}"
                );
            }
        }
    }
}

#[test]
fn all_to_all_single_splits_one_side_equal() {
    let _one = serial();
    for groups in groups() {
        let world = groups.len();
        // Each rank sends 2 rows of 4 to each rank, stated as input_split_sizes, and receives
        // into an output whose dim 0 is cut equally (output_split_sizes: None).
        let results = on_ranks_ok(&groups, |g| {
            let (r, dev) = (g.rank(), g.device());
            let first = 1000 * r as i64;
            let input = Tensor::arange(first, first + (world * 8) as i64, 1, DType::I64, Device::cuda(dev))?
                .reshape([world * 2, 4])?;
            let output = Tensor::zeros([world * 2, 4], DType::I64, Device::cuda(dev))?;
            g.all_to_all_single_splits(&output, &input, None, Some(&vec![2; world]), false)?;
            output.to_vec::<i64>()
        });
        for (r, got) in results.iter().enumerate() {
            let want: Vec<i64> =
                (0..world).flat_map(|s| (0..8).map(move |k| 1000 * s as i64 + (r * 8 + k) as i64)).collect();
            assert_eq!(got, &want, "world {world}, rank {r}");
        }
    }
}
