//! Few long rows (issue 40's "long rows, few of them"): `softmax`, `log_softmax` and the last-dim
//! reductions (`sum`, `mean`, `amax`) over 1–64 rows of vocabulary lengths (32000, 50257,
//! 128256, 151936) and of 2^18, in `f32` and `bf16`, against a float64 reference on random data,
//! on the CPU and the current driver's device (the CUDA driver splits each row over blocks so
//! the device is full; the simulated machine computes the float64 definition and rounds once).
//! Beside the random rows, the special rows of PyTorch's softmax semantics land in different
//! splits of a row: −inf entries, a row of −inf, a NaN, a +inf (NaN rows).

mod tensor_util;

use cudasem::{DType, Result, Tensor};
use tensor_util::{assert_close, assert_sums_close, devices, expect_ok, round_to, sample, tensor, values, Domain, Rng};

/// `(rows, length)` of the cases: the vocabularies, one row and a few, and 64 rows.
const CASES: [(usize, usize); 6] = [(1, 32000), (3, 50257), (1, 128256), (2, 151936), (64, 50257), (1, 1 << 18)];

/// The float64 softmax (or log_softmax) of one row, as PyTorch defines it: shifted by the row's
/// maximum, so a row of −inf, one holding +inf and one holding NaN are NaN rows.
fn softmax_reference(row: &[f64], log: bool) -> Vec<f64> {
    let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !m.is_finite() || row.iter().any(|v| v.is_nan()) {
        return vec![f64::NAN; row.len()];
    }
    let total: f64 = row.iter().map(|&v| (v - m).exp()).sum();
    row.iter().map(|&v| if log { v - m - total.ln() } else { (v - m).exp() / total }).collect()
}

/// `rows` rows of `n` values of `dtype`: random, with every row past the first special in turn
/// (a scattered tenth −inf, all −inf, one NaN, one +inf) at a position that moves along the row.
fn rows_of(rng: &mut Rng, rows: usize, n: usize, dtype: DType) -> Vec<f64> {
    let mut x = sample(rng, dtype, rows * n, Domain::Any);
    for r in 1..rows {
        let row = &mut x[r * n..(r + 1) * n];
        let at = (r * 7919 * 13) % n;
        match r % 5 {
            1 => (0..n).step_by(10).for_each(|i| row[(i + at) % n] = f64::NEG_INFINITY),
            2 => row.fill(f64::NEG_INFINITY),
            3 => row[at] = f64::NAN,
            4 => row[at] = f64::INFINITY,
            _ => {}
        }
    }
    x
}

/// Softmax and log_softmax along the last dim of every case, in `f32` and `bf16`.
#[test]
fn softmax_of_few_vocabulary_length_rows() -> Result<()> {
    let mut rng = Rng::new(4040);
    for device in devices() {
        for dtype in [DType::F32, DType::BF16] {
            for (rows, n) in CASES {
                let xv = rows_of(&mut rng, rows, n, dtype);
                let x = tensor(&xv, &[rows, n], dtype, device)?;
                for log in [false, true] {
                    let op = if log { "log_softmax" } else { "softmax" };
                    let what = format!("{op} of [{rows}, {n}] {dtype} on {device}");
                    let out = expect_ok(if log { x.log_softmax(-1) } else { x.softmax(-1) }, &what);
                    assert_eq!((out.shape(), out.dtype()), (x.shape(), dtype), "{what}");
                    let want: Vec<f64> =
                        xv.chunks(n).flat_map(|r| softmax_reference(r, log)).map(|v| round_to(dtype, v)).collect();
                    assert_close(&values(&out)?, &want, op, dtype, &what);
                }
            }
        }
    }
    Ok(())
}

/// A long row whose first element is not on a 16-byte boundary (a view from an offset), and a
/// row of a transposed tensor (strided elements): the split rows' element-wise edges.
#[test]
fn softmax_of_long_rows_from_offsets_and_strides() -> Result<()> {
    let mut rng = Rng::new(4041);
    for device in devices() {
        for dtype in [DType::F32, DType::BF16] {
            let (rows, n) = (2, 50257);
            let xv = sample(&mut rng, dtype, rows * n + 3, Domain::Any);
            let base = tensor(&xv, &[rows * n + 3], dtype, device)?;
            let shifted = base.narrow(0, 3, rows * n)?.view([rows as isize, n as isize])?;
            let mut tv = vec![0.0; rows * n];
            for (i, &v) in xv[3..].iter().enumerate() {
                tv[(i % n) * rows + i / n] = v;
            }
            let transposed = tensor(&tv, &[n, rows], dtype, device)?.t()?;
            for (x, how) in [(shifted, "from offset 3"), (transposed, "transposed")] {
                for log in [false, true] {
                    let op = if log { "log_softmax" } else { "softmax" };
                    let what = format!("{op} of [{rows}, {n}] {dtype} {how} on {device}");
                    let out = expect_ok(if log { x.log_softmax(1) } else { x.softmax(1) }, &what);
                    let want: Vec<f64> =
                        xv[3..].chunks(n).flat_map(|r| softmax_reference(r, log)).map(|v| round_to(dtype, v)).collect();
                    assert_close(&values(&out)?, &want, op, dtype, &what);
                }
            }
        }
    }
    Ok(())
}

/// `sum`, `mean` and `amax` over the last dim of every case (random rows only).
#[test]
fn reductions_of_few_vocabulary_length_rows() -> Result<()> {
    let mut rng = Rng::new(4042);
    for device in devices() {
        for dtype in [DType::F32, DType::BF16] {
            for (rows, n) in CASES {
                let xv = sample(&mut rng, dtype, rows * n, Domain::Any);
                let x: Tensor = tensor(&xv, &[rows, n], dtype, device)?;
                for op in ["sum", "mean", "amax"] {
                    let what = format!("{op} of [{rows}, {n}] {dtype} over the last dim on {device}");
                    let out = expect_ok(
                        match op {
                            "sum" => x.sum(&[-1], false),
                            "mean" => x.mean(&[-1], false),
                            _ => x.amax(&[-1], false),
                        },
                        &what,
                    );
                    assert_eq!(out.shape(), [rows], "{what}");
                    let per = if op == "mean" { n as f64 } else { 1.0 };
                    let want: Vec<f64> = xv
                        .chunks(n)
                        .map(|r| match op {
                            "amax" => r.iter().copied().fold(f64::MIN, f64::max),
                            _ => r.iter().sum::<f64>() / per,
                        })
                        .map(|v| round_to(dtype, v))
                        .collect();
                    let got = values(&out)?;
                    if op == "amax" {
                        assert_close(&got, &want, op, dtype, &what);
                    } else {
                        let abs: Vec<f64> =
                            xv.chunks(n).map(|r| r.iter().map(|v| v.abs()).sum::<f64>() / per).collect();
                        assert_sums_close(&got, &want, &abs, n, op, dtype, &what);
                    }
                }
            }
        }
    }
    Ok(())
}
