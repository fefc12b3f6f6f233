//! Matrix products whose rows are not 16-byte aligned (issue 40's "odd-sized products": an inner
//! dim or an output width like a vocabulary of 50257) with padded copies (`MatmulPadding::On`)
//! (`On`), of the operands only (`Inputs`) and without (`Off`), against a float64 reference on random data: odd `k` and `n`, a batch
//! broadcast against a matrix, a transposed operand, an operand viewed from an offset, and the
//! lm-head pattern (a half-type product, then `f32` log_softmax over its rows). The padded path
//! is seen at work in the peak of allocated memory (its padded output and copies), and its
//! temporaries are all returned. One test: the padding is a process-wide setting.

mod tensor_util;

use cudasem::cuda;
use cudasem::{DType, Device, MatmulPadding, Result, Tensor};
use tensor_util::{devices, expect_ok, sample, tensor, tolerance, values, Domain, Rng};

/// The f64 reference of `a @ b` (row-major `[batch, m, k]` by `[k, n]`, `b` shared by the batch)
/// and the sum of `|a||b|` per element (the scale of rounding errors).
fn reference(a: &[f64], b: &[f64], batch: usize, m: usize, k: usize, n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut out = vec![0.0; batch * m * n];
    let mut scale = vec![0.0; batch * m * n];
    for z in 0..batch {
        for i in 0..m {
            for l in 0..k {
                let x = a[(z * m + i) * k + l];
                for j in 0..n {
                    out[(z * m + i) * n + j] += x * b[l * n + j];
                    scale[(z * m + i) * n + j] += (x * b[l * n + j]).abs();
                }
            }
        }
    }
    (out, scale)
}

#[track_caller]
fn assert_product(got: &Tensor, want: &(Vec<f64>, Vec<f64>), what: &str) -> Result<()> {
    assert!(got.is_contiguous(), "{what}: a dense result");
    let g = values(got)?;
    let (rtol, atol) = tolerance("matmul", got.dtype());
    assert_eq!(g.len(), want.0.len(), "{what}");
    for (i, (&x, (&w, &s))) in g.iter().zip(want.0.iter().zip(&want.1)).enumerate() {
        assert!((x - w).abs() <= rtol * s + atol, "{what}: element {i} is {x}, want {w}");
    }
    Ok(())
}

/// The products of one mode on one device, each checked; returns the peak of allocated memory
/// of the `[m, k] @ [k, n]` product alone (0 on the CPU).
fn products(rng: &mut Rng, device: Device, dtype: DType, mode: MatmulPadding) -> Result<usize> {
    let what = |case: &str| format!("{case} of {dtype} on {device}, padding {mode:?}");
    let (m, k, n) = (9, 37, 45);
    let (av, bv) = (sample(rng, dtype, 2 * m * k, Domain::Any), sample(rng, dtype, k * n, Domain::Any));
    let a = tensor(&av[..m * k], &[m, k], dtype, device)?;
    let b = tensor(&bv, &[k, n], dtype, device)?;
    let gpu = matches!(device, Device::Cuda(_));
    if gpu {
        cuda::synchronize(None)?;
        cuda::reset_peak_memory_stats(device)?;
    }
    let before = if gpu { cuda::memory_allocated(device)? } else { 0 };
    let out = expect_ok(a.matmul(&b), &what("[9, 37] @ [37, 45]"));
    let peak = if gpu { cuda::max_memory_allocated(device)? - before } else { 0 };
    assert_product(&out, &reference(&av[..m * k], &bv, 1, m, k, n), &what("[9, 37] @ [37, 45]"))?;
    drop(out);
    if gpu {
        assert_eq!(cuda::memory_allocated(device)?, before, "{}: temporaries returned", what("the product"));
    }
    // A batch of two against the shared matrix (broadcast).
    let a3 = tensor(&av, &[2, m, k], dtype, device)?;
    assert_product(&a3.matmul(&b)?, &reference(&av, &bv, 2, m, k, n), &what("[2, 9, 37] @ [37, 45]"))?;
    // The right operand transposed (column-major: its leading dimension is k).
    let mut bt = vec![0.0; k * n];
    for l in 0..k {
        for j in 0..n {
            bt[j * k + l] = bv[l * n + j];
        }
    }
    let b_t = tensor(&bt, &[n, k], dtype, device)?.t()?;
    assert_product(&a.matmul(&b_t)?, &reference(&av[..m * k], &bv, 1, m, k, n), &what("[9, 37] @ [45, 37]ᵀ"))?;
    // The left operand from an offset of one element (its address misaligned).
    let wide = tensor(&av[..m * k + 1], &[m * k + 1], dtype, device)?;
    let shifted = wide.narrow(0, 1, m * k)?.view([m as isize, k as isize])?;
    let want = reference(&av[1..m * k + 1], &bv, 1, m, k, n);
    assert_product(&shifted.matmul(&b)?, &want, &what("[9, 37] from offset 1 @ [37, 45]"))?;
    Ok(peak)
}

/// The lm-head pattern: `log_softmax(f32(x @ w), -1)` with an odd vocabulary: the logits
/// against the float64 product, the log-softmax against float64 over the logits as computed.
fn lm_head(rng: &mut Rng, device: Device, dtype: DType) -> Result<()> {
    let (m, k, n) = (6, 64, 1001);
    let (xv, wv) = (sample(rng, dtype, m * k, Domain::Any), sample(rng, dtype, k * n, Domain::Any));
    let x = tensor(&xv, &[m, k], dtype, device)?;
    let w = tensor(&wv, &[k, n], dtype, device)?;
    let logits = x.matmul(&w)?;
    let what = format!("lm-head [{m}, {k}] @ [{k}, {n}] {dtype} on {device}");
    assert_product(&logits, &reference(&xv, &wv, 1, m, k, n), &what)?;
    let got = values(&logits.to_dtype(DType::F32)?.log_softmax(-1)?)?;
    let lv = values(&logits)?;
    let (rtol, atol) = tolerance("log_softmax", DType::F32);
    for (r, row) in lv.chunks(n).enumerate() {
        let top = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let lse = top + row.iter().map(|v| (v - top).exp()).sum::<f64>().ln();
        for (j, &v) in row.iter().enumerate() {
            let (g, want) = (got[r * n + j], v - lse);
            assert!((g - want).abs() <= atol + rtol * want.abs(), "{what}: log_softmax [{r}, {j}] is {g}, want {want}");
        }
    }
    Ok(())
}

#[test]
fn products_of_unaligned_rows_with_and_without_padding() -> Result<()> {
    let mut rng = Rng::new(4043);
    for device in devices() {
        for dtype in [DType::BF16, DType::F16, DType::F32, DType::F64] {
            let mut peaks = Vec::new();
            for mode in [MatmulPadding::Off, MatmulPadding::On, MatmulPadding::Inputs] {
                cuda::set_matmul_padding(mode);
                peaks.push(products(&mut rng, device, dtype, mode)?);
                lm_head(&mut rng, device, dtype)?;
            }
            if matches!(device, Device::Cuda(_)) {
                // Padded: the [9, 48]-or-so output block and its dense copy, beside the operand copy.
                assert!(peaks[1] > peaks[0], "{dtype} on {device}: the padded path allocates more, {peaks:?}");
                assert!(peaks[2] > peaks[0], "{dtype} on {device}: padded operands allocate more, {peaks:?}");
            }
        }
    }
    cuda::set_matmul_padding(MatmulPadding::Auto);
    assert_eq!(cuda::matmul_padding(), MatmulPadding::Auto);
    Ok(())
}
