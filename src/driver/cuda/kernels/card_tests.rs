//! The card profile's launch choices set by hand (`CUDASEM_BENCH_TUNING`'s `key=value` items,
//! `driver::card`) against the CPU kernels, on the GPU (skipped without one): every variant a
//! sweep may pick computes the same values.

use super::{gemm_tol, subnormal_step, tol, value, Bench};
use crate::config::{CardOverrides, LaunchTuning};
use crate::driver::Driver;
use crate::dtype::DType;
use crate::kernel::{BinaryOp, KernelOp, ReduceOp, UnaryOp};

fn set(b: &Bench, card: CardOverrides) {
    b.d.set_launch_tuning(LaunchTuning { card, ..Default::default() });
}

/// A reduction into one output under grids of one wave and of 1, 3 and 16 blocks per SM, with
/// four and eight loads in flight: within the tolerance of the CPU's, and the eight loads' result
/// bit for bit the four's (the wide variant adds in the same order). Sums and means of f32 run
/// the wide kernel (`red_block8`); bf16 and the maximum fall back to the narrow one.
#[test]
fn one_output_reductions_agree_under_every_grid_and_load_width() {
    let Some(mut b) = Bench::new() else { return };
    let n = (5 << 20) + 13;
    for d in [DType::F32, DType::BF16] {
        let src = b.dense(d, &[n]);
        for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max] {
            for blocks in [None, Some(1), Some(3), Some(16)] {
                let mut got = Vec::new();
                for loads in [4, 8] {
                    set(&b, CardOverrides { sum_blocks: blocks, sum_loads: Some(loads), ..Default::default() });
                    let dst = b.dense(d, &[1]);
                    b.check(&KernelOp::Reduce { op, src: src.clone(), dst: dst.clone(), dims: vec![0] }, tol(d) * 2.0);
                    let mut bytes = vec![0u8; d.size()];
                    b.d.memcpy_dtoh(&mut bytes, dst.ptr, b.s).unwrap();
                    got.push(bytes);
                }
                assert_eq!(got[0], got[1], "{op:?} of {d} with {blocks:?} blocks per SM: 4 and 8 loads differ");
            }
        }
    }
    set(&b, CardOverrides::default());
}

/// The functions whose vectors per thread are the card's (`elementwise_policy::ew_heavy`) under
/// 1, 2, 3 and 8 vectors a thread, taken two at a time and one at a time (`heavy_unroll`: the
/// `ew_f*` and `ew_g*` kernels), with a tail past the last whole vector.
#[test]
fn heavy_functions_agree_under_every_vectors_per_thread() {
    let Some(mut b) = Bench::new() else { return };
    let n = (9 << 20) + 13;
    for (v, u) in [1, 2, 3, 8].into_iter().flat_map(|v| [(v, 1), (v, 0)]) {
        set(
            &b,
            CardOverrides { heavy_vectors: Some(v), mid_vectors: Some(v), heavy_unroll: Some(u), ..Default::default() },
        );
        for d in [DType::BF16, DType::F16] {
            let (x, out) = (b.dense(d, &[n]), b.dense(d, &[n]));
            for op in [UnaryOp::Sin, UnaryOp::Cos, UnaryOp::Tanh] {
                let check = KernelOp::Unary { op, src: x.clone(), dst: out.clone() };
                b.check_abs(&check, tol(d), subnormal_step(d));
            }
        }
        let (x, y, out) = (b.dense(DType::F32, &[n]), b.dense(DType::F32, &[n]), b.dense(DType::F32, &[n]));
        let pow = KernelOp::Binary { op: BinaryOp::Pow, lhs: x, rhs: y, dst: out, compute: DType::F32 };
        b.check(&pow, tol(DType::F32) * 4.0);
    }
    set(&b, CardOverrides::default());
}

/// The fast elementwise kernel under blocks of 64, 128 and 256 threads (`ew_threads`), over a
/// tensor of many waves with a tail past the last whole vector: a unary and a binary op of a half
/// type and of f32, each within the tolerance of the CPU's.
#[test]
fn fast_elementwise_agrees_under_every_block_size() {
    let Some(mut b) = Bench::new() else { return };
    let n = (3 << 20) + 7;
    for t in [64, 128, 256] {
        set(&b, CardOverrides { ew_threads: Some(t), ..Default::default() });
        for d in [DType::BF16, DType::F16, DType::F32] {
            let (x, y, out) = (b.dense(d, &[n]), b.dense(d, &[n]), b.dense(d, &[n]));
            b.check(&KernelOp::Unary { op: UnaryOp::Neg, src: x.clone(), dst: out.clone() }, 0.0);
            let add = KernelOp::Binary { op: BinaryOp::Add, lhs: x, rhs: y, dst: out, compute: d };
            b.check(&add, tol(d));
        }
    }
    set(&b, CardOverrides::default());
}

/// The norm kernels on a grid of a block a row (`norm_blocks` 0) and of 1, 8 and 64 blocks per SM
/// taking rows in turn, over more rows than most of those grids hold, in blocks of 64, 128 and 256
/// threads (rows of 1,024 and 4,096 elements: one to eight vectors a thread, or the three-read
/// kernel), launched plainly and early (`norm_early`): layer norm (weight and bias) and RMS norm
/// (weight) of bf16 and f32 rows within the tolerance of the CPU's. Then six norms launched early
/// one after another, each reading the output of the one before (a kernel that ran ahead of the
/// one before it would read its input's random first bytes).
#[test]
fn norms_agree_under_every_grid_and_block() {
    let Some(mut b) = Bench::new() else { return };
    let grids =
        [(0, 256, 3001, 1024), (1, 256, 3001, 1024), (8, 128, 3001, 1024), (64, 64, 3001, 1024), (0, 128, 700, 4096)];
    for ((blocks, threads, rows, n), early) in grids.into_iter().flat_map(|g| [(g, 0), (g, 1)]) {
        let o = CardOverrides {
            norm_blocks: Some(blocks),
            norm_threads: Some(threads),
            norm_early: Some(early),
            ..Default::default()
        };
        set(&b, o);
        for d in [DType::BF16, DType::F32] {
            let (src, dst) = (b.dense(d, &[rows, n]), b.dense(d, &[rows, n]));
            let (w, bias) = (b.dense(d, &[n]), b.dense(d, &[n]));
            for rms in [false, true] {
                let bias = (!rms).then(|| bias.clone());
                let (src, dst, weight) = (src.clone(), dst.clone(), Some(w.clone()));
                let op = KernelOp::Norm { src, weight, bias, dst, dims: 1, eps: 1e-5, rms };
                b.check_abs(&op, tol(d) * 4.0, tol(d) * 4.0);
            }
        }
    }
    set(&b, CardOverrides { norm_early: Some(1), ..Default::default() });
    for d in [DType::BF16, DType::F32] {
        let (rows, n) = (8195, 4096);
        let (x, w, bias) = (b.dense(d, &[rows, n]), b.dense(d, &[n]), b.dense(d, &[n]));
        let outs: Vec<_> = (0..6).map(|_| b.dense(d, &[rows, n])).collect();
        b.d.stream_synchronize(b.s).unwrap();
        let mut prev = x;
        let mut ops = Vec::new();
        for (k, out) in outs.into_iter().enumerate() {
            let rms = k % 2 == 1;
            let bias = (!rms).then(|| bias.clone());
            let (src, dst, weight) = (prev, out.clone(), Some(w.clone()));
            ops.push(KernelOp::Norm { src, weight, bias, dst, dims: 1, eps: 1e-5, rms });
            prev = out;
        }
        for op in &ops {
            b.d.launch(b.s, op).unwrap_or_else(|e| panic!("{}: {e}", op.name()));
        }
        for op in &ops {
            b.compare(op, tol(d) * 4.0, tol(d) * 4.0);
        }
    }
    set(&b, CardOverrides::default());
}

/// Fast elementwise kernels launched early (`early_waves=1`: every grid of a wave or more, which
/// every grid of these 16 M elements is: `ew_fast` never gives a thread so many vectors that the
/// grid would not fill the device once), one after another with nothing between them, each reading
/// the output of the one before: every output as the CPU's. A kernel that ran ahead of the one
/// before it would read its output buffer's random first bytes. Then softmax kernels over 131,075
/// rows of 128 (a few lanes of a warp a row: about two waves of blocks for bf16, four for f32, on
/// an H100) the same way.
#[test]
fn early_launches_wait_for_the_kernel_before() {
    let Some(mut b) = Bench::new() else { return };
    set(&b, CardOverrides { early_waves: Some(1), ..Default::default() });
    let n = (16 << 20) + 5;
    for d in [DType::F32, DType::BF16] {
        let x = b.dense(d, &[n]);
        // Every buffer first: a copy between two kernels would stand between them on the stream.
        let outs: Vec<_> = (0..8).map(|_| b.dense(d, &[n])).collect();
        b.d.stream_synchronize(b.s).unwrap();
        let mut prev = x.clone();
        let mut ops = Vec::new();
        for (k, out) in outs.into_iter().enumerate() {
            let (lhs, rhs, dst) = (prev.clone(), x.clone(), out.clone());
            ops.push(match k % 3 {
                0 => KernelOp::Unary { op: UnaryOp::Neg, src: lhs, dst },
                1 => KernelOp::Binary { op: BinaryOp::Add, lhs, rhs, dst, compute: d },
                _ => KernelOp::Binary { op: BinaryOp::Mul, lhs, rhs, dst, compute: d },
            });
            prev = out;
        }
        for op in &ops {
            b.d.launch(b.s, op).unwrap_or_else(|e| panic!("{}: {e}", op.name()));
        }
        for op in &ops {
            b.compare(op, tol(d), 0.0);
        }
        // Softmax and log_softmax over rows of 128 (a grid of many waves), the same way.
        let rows = (1 << 17) + 3;
        let x = b.dense(d, &[rows, 128]);
        let outs: Vec<_> = (0..6).map(|_| b.dense(d, &[rows, 128])).collect();
        b.d.stream_synchronize(b.s).unwrap();
        let mut prev = x;
        let mut ops = Vec::new();
        for (k, out) in outs.into_iter().enumerate() {
            ops.push(KernelOp::Softmax { src: prev, dst: out.clone(), dim: 1, log: k % 2 == 0 });
            prev = out;
        }
        for op in &ops {
            b.d.launch(b.s, op).unwrap_or_else(|e| panic!("{}: {e}", op.name()));
        }
        for (k, op) in ops.iter().enumerate() {
            let abs = if k % 2 == 0 { 1e-5 } else { subnormal_step(d) };
            b.compare(op, tol(d) * 2.0, abs);
        }
    }
    set(&b, CardOverrides::default());
}

/// Row-vector products of a row-major weight under every `gemv_rows` (f32 weights through
/// cuBLASLt or `gv_rows`; `gv_rows` or `gv_rows8`, launched plainly or early), f32 and bf16: rows split over
/// blocks (k = 4,100) with a last tile of columns cut short (n = 1,032), then a chain of four
/// square products launched back to back, each reading the output of the one before (a kernel
/// that ran ahead would read its input's random first bytes), each within cuBLAS's tolerance of
/// the CPU's at the size of its input.
#[test]
fn row_vector_products_agree_under_every_gemv_rows() {
    let Some(mut b) = Bench::new() else { return };
    for g in 0..8 {
        set(&b, CardOverrides { gemv_rows: Some(g), ..Default::default() });
        for d in [DType::F32, DType::BF16] {
            let t = gemm_tol(d);
            let (k, n) = (4100, 1032);
            let (x, w, y) = (b.dense(d, &[1, k]), b.dense(d, &[k, n]), b.dense(d, &[1, n]));
            let op = KernelOp::Gemm { lhs: x, rhs: w, dst: y, bias: None, workspace: None };
            b.check_abs(&op, t, t * k as f64 * 16.0);
            let w = b.dense(d, &[n, n]);
            let mut prev = b.dense(d, &[1, n]);
            let outs: Vec<_> = (0..4).map(|_| b.dense(d, &[1, n])).collect();
            b.d.stream_synchronize(b.s).unwrap();
            let mut ops = Vec::new();
            for out in outs {
                ops.push(KernelOp::Gemm { lhs: prev, rhs: w.clone(), dst: out.clone(), bias: None, workspace: None });
                prev = out;
            }
            for op in &ops {
                b.d.launch(b.s, op).unwrap_or_else(|e| panic!("{}: {e}", op.name()));
            }
            for op in &ops {
                let KernelOp::Gemm { lhs, .. } = op else { unreachable!() };
                let mut bytes = vec![0u8; n * d.size()];
                b.d.memcpy_dtoh(&mut bytes, lhs.ptr, b.s).unwrap();
                let size = (0..n).map(|i| value(&bytes, d, i).abs()).fold(0.0, f64::max);
                b.compare(op, t, t * n as f64 * 4.0 * size);
            }
        }
    }
    set(&b, CardOverrides::default());
}
