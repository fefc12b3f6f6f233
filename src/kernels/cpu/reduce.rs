//! Reduction and softmax CPU kernels.
//!
//! Both permute the input view so that the reduced dimensions come last; a row-major gather
//! then lays every group out contiguously (`[kept…][reduced…]`), and the output's row-major
//! order is the order of the groups.

use super::elem::{gather, kind, scatter, Kind, Operand};
use crate::kernel::{BufferView, ReduceOp};

/// `v` with its dimensions in `order`.
fn permuted(v: &BufferView, order: &[usize]) -> BufferView {
    BufferView {
        ptr: v.ptr,
        dtype: v.dtype,
        shape: order.iter().map(|&d| v.shape[d]).collect(),
        strides: order.iter().map(|&d| v.strides[d]).collect(),
        offset: v.offset,
    }
}

/// The input permuted kept-dims-first, and the size of one reduced group.
fn grouped(src: &BufferView, dims: &[usize]) -> (BufferView, usize) {
    let kept = (0..src.shape.len()).filter(|d| !dims.contains(d));
    let order: Vec<usize> = kept.chain(dims.iter().copied()).collect();
    let group = dims.iter().map(|&d| src.shape[d]).product();
    (permuted(src, &order), group)
}

/// Index of the first extreme element of a group (`better(a, b)`: `a` beats `b`); NaN beats all.
fn arg_extreme(group: &[f64], better: impl Fn(f64, f64) -> bool) -> i64 {
    let mut best = 0;
    for (i, &x) in group.iter().enumerate() {
        if x.is_nan() {
            return i as i64;
        }
        if better(x, group[best]) {
            best = i;
        }
    }
    best as i64
}

fn extreme_f64(group: &[f64], max: bool) -> f64 {
    let i = arg_extreme(group, |a, b| if max { a > b } else { a < b }) as usize;
    group.get(i).copied().unwrap_or(f64::NAN)
}

pub(super) fn reduce(op: ReduceOp, src: Operand<'_>, dims: &[usize], out: &mut [u8], dst: &BufferView) {
    let (view, group) = grouped(src.view, dims);
    let groups = dst.numel();
    let chunks = |n: usize| (0..groups).map(move |g| g * n..(g + 1) * n);
    match (op, kind(src.view.dtype)) {
        (ReduceOp::Sum, Kind::Float) | (ReduceOp::Mean, _) => {
            let x = gather::<f64>(src.bytes, &view);
            let r: Vec<f64> = chunks(group)
                .map(|r| {
                    let s: f64 = x[r].iter().sum();
                    if op == ReduceOp::Mean {
                        s / group as f64
                    } else {
                        s
                    }
                })
                .collect();
            scatter(&r, out, dst);
        }
        (ReduceOp::Sum, _) => {
            let x = gather::<i64>(src.bytes, &view);
            let r: Vec<i64> = chunks(group).map(|r| x[r].iter().fold(0i64, |a, &b| a.wrapping_add(b))).collect();
            scatter(&r, out, dst);
        }
        (ReduceOp::Max | ReduceOp::Min, Kind::Float) => {
            let x = gather::<f64>(src.bytes, &view);
            let r: Vec<f64> = chunks(group).map(|r| extreme_f64(&x[r], op == ReduceOp::Max)).collect();
            scatter(&r, out, dst);
        }
        (ReduceOp::Max | ReduceOp::Min, _) => {
            // Integers and bools are exact in i64.
            let x = gather::<i64>(src.bytes, &view);
            let pick = |r: std::ops::Range<usize>| {
                let it = x[r].iter().copied();
                if op == ReduceOp::Max {
                    it.max().unwrap_or(0)
                } else {
                    it.min().unwrap_or(0)
                }
            };
            let r: Vec<i64> = chunks(group).map(pick).collect();
            scatter(&r, out, dst);
        }
        (ReduceOp::ArgMax | ReduceOp::ArgMin, k) => {
            let max = op == ReduceOp::ArgMax;
            let r: Vec<i64> = if k == Kind::Float {
                let x = gather::<f64>(src.bytes, &view);
                chunks(group).map(|r| arg_extreme(&x[r], |a, b| if max { a > b } else { a < b })).collect()
            } else {
                let x = gather::<i64>(src.bytes, &view);
                chunks(group)
                    .map(|r| {
                        let g = &x[r];
                        let mut best = 0;
                        for (i, &v) in g.iter().enumerate() {
                            if (max && v > g[best]) || (!max && v < g[best]) {
                                best = i;
                            }
                        }
                        best as i64
                    })
                    .collect()
            };
            scatter(&r, out, dst);
        }
    }
}

pub(super) fn softmax(src: Operand<'_>, dim: usize, log: bool, out: &mut [u8], dst: &BufferView) {
    let (view, n) = grouped(src.view, &[dim]);
    let (dview, _) = grouped(dst, &[dim]);
    let mut x = gather::<f64>(src.bytes, &view);
    if n > 0 {
        for g in x.chunks_mut(n) {
            // The shift is the row's maximum, infinite or not, as PyTorch's: a row of -inf
            // (-inf - -inf), one holding +inf (inf - inf) or one holding NaN gives a NaN row.
            let shift = g.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let total: f64 = g.iter().map(|&v| (v - shift).exp()).sum();
            for v in g.iter_mut() {
                *v = if log { *v - shift - total.ln() } else { (*v - shift).exp() / total };
            }
        }
    }
    scatter(&x, out, &dview);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arg_extreme_takes_the_first_and_nan_wins() {
        assert_eq!(arg_extreme(&[1.0, 3.0, 3.0, 2.0], |a, b| a > b), 1);
        assert_eq!(arg_extreme(&[1.0, f64::NAN, 3.0], |a, b| a > b), 1);
        assert_eq!(arg_extreme(&[4.0, 1.0, 1.0], |a, b| a < b), 1);
        assert!(extreme_f64(&[1.0, f64::NAN], true).is_nan());
    }

    /// Softmax rows as PyTorch's: −inf entries give 0 (log: −inf); a row of −inf, one holding
    /// +inf and one holding NaN are NaN rows.
    #[test]
    fn softmax_rows_with_infinities_and_nan_are_pytorchs() {
        use crate::dtype::DType;
        use crate::kernel::DevicePtr;
        let (inf, nan) = (f64::INFINITY, f64::NAN);
        let rows = [[0.0, -inf, 0.0], [-inf, -inf, -inf], [1.0, inf, 2.0], [1.0, nan, 2.0], [inf, inf, 1.0]];
        let view = BufferView {
            ptr: DevicePtr(0),
            dtype: DType::F64,
            shape: [rows.len(), 3].into(),
            strides: [3, 1].into(),
            offset: 0,
        };
        let bytes: Vec<u8> = rows.iter().flatten().flat_map(|x| x.to_ne_bytes()).collect();
        for log in [false, true] {
            let mut out = vec![0u8; bytes.len()];
            softmax(Operand { bytes: &bytes, view: &view }, 1, log, &mut out, &view);
            let got = gather::<f64>(&out, &view);
            let first = if log { [-(2f64.ln()), -inf, -(2f64.ln())] } else { [0.5, 0.0, 0.5] };
            assert_eq!(got[..3], first, "log {log}");
            assert!(got[3..].iter().all(|v| v.is_nan()), "log {log}: NaN rows, got {got:?}");
        }
    }
}
