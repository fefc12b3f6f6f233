//! `softmax` and `log_softmax` against a float64 reference, on the CPU and the current driver's
//! device, over the row lengths that take each kernel path (a warp per row, several rows per
//! block, a block per row, an online two-pass row), along the last and other dims, in every
//! float dtype, with PyTorch's special rows: large magnitudes (±1e4), −inf entries (0, log −inf),
//! a row of −inf, a row holding +inf and a row holding NaN (NaN rows).

mod tensor_util;

use cudasem::{DType, Error, Result, Tensor};
use tensor_util::{assert_close, devices, expect_ok, round_to, sample, tensor, values, Domain, Rng};

const FLOATS: [DType; 4] = [DType::F32, DType::BF16, DType::F16, DType::F64];

/// The row lengths of the kernels' boundaries: a warp's 32 lanes, groups of fewer lanes with two
/// chunks each (64 for f32, 120 and 128 for the half types), the register-held rows of a warp
/// (≤ 1024 for f32) and of blocks of 128 threads (2048 to 4096 for f32, 3000 with idle chunks),
/// of 256 and of 512 holding raw half-type elements (20000 with idle chunks, 32768), the two-pass
/// rows beyond, and the split of 16-byte accesses (odd lengths and lengths one past a power of
/// two leave a tail).
const ROW_LENGTHS: [usize; 18] =
    [1, 2, 7, 31, 32, 33, 64, 120, 128, 129, 1000, 1024, 2048, 3000, 4096, 4097, 20000, 32768];

/// The float64 softmax (or log_softmax) of one row, as PyTorch computes it: shifted by the row's
/// maximum (NaN ignored), so a row of −inf, one holding +inf and one holding NaN are NaN rows.
fn softmax_reference(row: &[f64], log: bool) -> Vec<f64> {
    let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !m.is_finite() || row.iter().any(|v| v.is_nan()) {
        return vec![f64::NAN; row.len()];
    }
    let total: f64 = row.iter().map(|&v| (v - m).exp()).sum();
    row.iter().map(|&v| if log { v - m - total.ln() } else { (v - m).exp() / total }).collect()
}

/// The kinds of rows each tensor holds, in this order (cycled).
#[derive(Debug, Clone, Copy, PartialEq)]
enum RowKind {
    Random,
    Large,
    SomeNegInf,
    AllNegInf,
    WithNan,
    WithPosInf,
}

const KINDS: [RowKind; 6] =
    [RowKind::Random, RowKind::Large, RowKind::SomeNegInf, RowKind::AllNegInf, RowKind::WithNan, RowKind::WithPosInf];

/// A row of `n` values of `kind`, exactly representable in `dtype`.
fn row(rng: &mut Rng, kind: RowKind, n: usize, dtype: DType) -> Vec<f64> {
    let mut v = match kind {
        RowKind::Large => (0..n).map(|_| round_to(dtype, rng.uniform(-1e4, 1e4))).collect(),
        _ => sample(rng, dtype, n, Domain::Any),
    };
    let at = |rng: &mut Rng| rng.int(0, n as i64 - 1) as usize;
    match kind {
        RowKind::SomeNegInf => {
            // A quarter of the row (never all of it) is −inf, the last element among them.
            for _ in 0..n / 4 {
                let i = at(rng);
                v[i] = f64::NEG_INFINITY;
            }
            if n > 1 {
                v[n - 1] = f64::NEG_INFINITY;
                let keep = at(rng).min(n - 2);
                v[keep] = round_to(dtype, 1.5);
            }
        }
        RowKind::AllNegInf => v.fill(f64::NEG_INFINITY),
        RowKind::WithNan => {
            let i = at(rng);
            v[i] = f64::NAN;
        }
        RowKind::WithPosInf => {
            let i = at(rng);
            v[i] = f64::INFINITY;
        }
        _ => {}
    }
    v
}

/// `rows` rows of length `n`: the first random, the others cycling through the special kinds
/// from `first`.
fn rows_of(rng: &mut Rng, rows: usize, n: usize, dtype: DType, first: usize) -> Vec<f64> {
    let kind = |r: usize| if r == 0 { KINDS[0] } else { KINDS[1 + (first + r - 1) % (KINDS.len() - 1)] };
    (0..rows).flat_map(|r| row(rng, kind(r), n, dtype)).collect::<Vec<_>>()
}

/// How many rows a test of rows of `n` takes: many short rows (several per block, a grid-stride
/// over more rows than warps in a block), few long ones (the row kinds rotate with the dtype, so
/// every kind meets every path).
fn row_count(n: usize) -> usize {
    match n {
        0..=33 => 67,
        34..=129 => 13,
        130..=4097 => 4,
        _ => 3,
    }
}

/// Softmax and log_softmax along the last dim of `[row_count(n), n]` tensors, for each `n`.
fn last_dim_case(lengths: &[usize], seed: u64) -> Result<()> {
    let mut rng = Rng::new(seed);
    for device in devices() {
        for (d, dtype) in FLOATS.into_iter().enumerate() {
            for &n in lengths {
                let rows = row_count(n);
                let xv = rows_of(&mut rng, rows, n, dtype, n + d * (rows - 1));
                let x = tensor(&xv, &[rows, n], dtype, device)?;
                for log in [false, true] {
                    let want: Vec<f64> = xv.chunks(n).flat_map(|r| softmax_reference(r, log)).collect();
                    check(&x, -1, log, &want, &format!("[{rows}, {n}] {dtype} on {device}"))?;
                }
            }
        }
    }
    Ok(())
}

/// Applies softmax or log_softmax along `dim` and checks shape, dtype, device and values against
/// `want` (row-major), `what` naming the case.
#[track_caller]
fn check(x: &Tensor, dim: isize, log: bool, want: &[f64], what: &str) -> Result<()> {
    let op = if log { "log_softmax" } else { "softmax" };
    let out = expect_ok(if log { x.log_softmax(dim) } else { x.softmax(dim) }, what);
    assert_eq!((out.shape(), out.dtype(), out.device()), (x.shape(), x.dtype(), x.device()), "{what}");
    let want: Vec<f64> = want.iter().map(|&v| round_to(x.dtype(), v)).collect();
    assert_close(&values(&out)?, &want, op, x.dtype(), &format!("{op}: {what}"));
    Ok(())
}

/// Rows of up to 129: a warp per row, several rows per block.
#[test]
fn softmax_of_short_rows() -> Result<()> {
    last_dim_case(&ROW_LENGTHS[..10], 40)
}

/// Rows of 1000 to 4097: a warp or a block per row, held in registers.
#[test]
fn softmax_of_rows_of_thousands() -> Result<()> {
    last_dim_case(&ROW_LENGTHS[10..16], 44)
}

/// Rows of 20000 and 32768: a block per row holding it in registers, or (for f64) the two-pass
/// (online maximum and sum) block per row.
#[test]
fn softmax_of_long_rows() -> Result<()> {
    last_dim_case(&ROW_LENGTHS[16..], 45)
}

/// Rows that are not contiguous: the last dim of a transposed tensor, and of a slice that skips
/// every other element (stride 2) from an offset.
#[test]
fn softmax_of_strided_rows() -> Result<()> {
    let mut rng = Rng::new(41);
    for device in devices() {
        for dtype in FLOATS {
            for n in [7, 33, 1000, 4097] {
                let rows = 6;
                let xv = rows_of(&mut rng, rows, n, dtype, 0);
                let tr: Vec<f64> = (0..n).flat_map(|j| (0..rows).map(|i| xv[i * n + j]).collect::<Vec<_>>()).collect();
                let transposed = tensor(&tr, &[n, rows], dtype, device)?.t()?;
                let mut wide = vec![round_to(dtype, 9.0); rows * 2 * n + 1];
                for (k, &v) in xv.iter().enumerate() {
                    wide[1 + 2 * k] = v;
                }
                let strided = tensor(&wide, &[rows * 2 * n + 1], dtype, device)?.narrow(0, 1, rows * 2 * n)?;
                let strided = strided.view([rows as isize, 2 * n as isize])?.slice_step(1, 0.., 2)?;
                for (x, how) in [(transposed, "transposed"), (strided, "stride 2")] {
                    assert!(!x.is_contiguous() && x.shape() == [rows, n], "{how}");
                    for log in [false, true] {
                        let want: Vec<f64> = xv.chunks(n).flat_map(|r| softmax_reference(r, log)).collect();
                        check(&x, 1, log, &want, &format!("{how} [{rows}, {n}] {dtype} on {device}"))?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// Along a dim that is not the last: `[a, n, b]` over dim 1 (rows strided by `b`), and `[n, b]`
/// over dim 0, the special rows included.
#[test]
fn softmax_along_other_dims() -> Result<()> {
    let mut rng = Rng::new(42);
    for device in devices() {
        for dtype in FLOATS {
            for (a, n, b) in [(3, 7, 5), (2, 33, 64), (1, 1000, 3), (2, 4097, 2), (1, 129, 1)] {
                // Rows in [a, b] order, each of length n; the tensor holds them along dim 1.
                let rows = rows_of(&mut rng, a * b, n, dtype, a + b);
                let mut xv = vec![0.0; a * n * b];
                for i in 0..a {
                    for k in 0..b {
                        for j in 0..n {
                            xv[(i * n + j) * b + k] = rows[(i * b + k) * n + j];
                        }
                    }
                }
                let x = tensor(&xv, &[a, n, b], dtype, device)?;
                for log in [false, true] {
                    let mut want = vec![0.0; xv.len()];
                    for (r, out) in rows.chunks(n).map(|r| softmax_reference(r, log)).enumerate() {
                        let (i, k) = (r / b, r % b);
                        for (j, v) in out.into_iter().enumerate() {
                            want[(i * n + j) * b + k] = v;
                        }
                    }
                    check(&x, 1, log, &want, &format!("[{a}, {n}, {b}] over dim 1, {dtype} on {device}"))?;
                    if a == 1 {
                        let x2 = x.reshape([n, b])?;
                        check(&x2, 0, log, &want, &format!("[{n}, {b}] over dim 0, {dtype} on {device}"))?;
                        check(&x2, -2, log, &want, &format!("[{n}, {b}] over dim -2, {dtype} on {device}"))?;
                    }
                }
            }
        }
    }
    Ok(())
}

#[test]
fn softmax_of_empty_and_one_element_tensors() -> Result<()> {
    for device in devices() {
        for dtype in FLOATS {
            let what = format!("{dtype} on {device}");
            for shape in [[3usize, 0], [0, 5]] {
                let x = Tensor::zeros(shape, dtype, device)?;
                for dim in [0isize, 1] {
                    let s = expect_ok(x.softmax(dim), &what);
                    let l = expect_ok(x.log_softmax(dim), &what);
                    assert_eq!((s.shape(), l.shape(), s.numel()), (&shape[..], &shape[..], 0), "{what}");
                }
            }
            let one = tensor(&[round_to(dtype, -3.25)], &[1, 1], dtype, device)?;
            assert_eq!(values(&one.softmax(1)?)?, [1.0], "{what}: softmax of one element");
            assert_eq!(values(&one.log_softmax(0)?)?, [0.0], "{what}: log_softmax of one element");
            let scalar = Tensor::full([], 7.0, dtype, device)?;
            assert_eq!((values(&scalar.log_softmax(-1)?)?, scalar.softmax(0)?.dim()), (vec![0.0], 0), "{what}");
            assert!(matches!(scalar.softmax(1), Err(Error::InvalidDim { .. })), "{what}");
        }
    }
    Ok(())
}
