//! `nn::functional`'s `layer_norm`, `rms_norm`, `gelu(approximate = "tanh")` and `linear` against
//! float64 references written from PyTorch's documented semantics, on random data, on the CPU and
//! the current driver's device (the CUDA norm rows on a GPU), in every float dtype; bad arguments
//! give typed errors and leave the runtime usable. Attention: `nn_functional.rs`.

mod nn_util;
mod tensor_util;

use cudasem::nn::functional as F;
use cudasem::{DType, Error, Result, Tensor};
use nn_util::{assert_near, rand_tensor, FLOATS};
use tensor_util::{devices, expect_ok, round_to, sample, tensor, values, Domain, Rng};

/// Layer norm (`rms`) of rows of `n`, float64.
fn norm_reference(x: &[f64], n: usize, w: Option<&[f64]>, b: Option<&[f64]>, eps: f64, rms: bool) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(n) {
        let mean = if rms { 0.0 } else { row.iter().sum::<f64>() / n as f64 };
        let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64;
        for (i, v) in row.iter().enumerate() {
            let y = (v - mean) / (var + eps).sqrt() * w.map_or(1.0, |w| w[i]);
            out.push(y + b.map_or(0.0, |b| b[i]));
        }
    }
    out
}

/// Layer norm and RMS norm over one and two trailing dims, rows of odd lengths (one past a
/// block's 256 threads, 4097, 9000), with weight and bias each present or absent.
#[test]
fn layer_norm_and_rms_norm_match_float64() -> Result<()> {
    let mut rng = Rng::new(4001);
    // Rows held in registers of 16 values a thread (up to 4096), of 32 (4097), and read three
    // times (9000); on a GPU, rows of whole 16-byte vectors (256, 100 in f32 / f64, 4096, 8192)
    // are read as vectors, one to four a thread.
    let cases: [(&[usize], usize); 9] = [
        (&[3, 7], 1),
        (&[2, 3, 129], 1),
        (&[5, 2, 50], 2),
        (&[2, 4097], 1),
        (&[1, 1], 1),
        (&[33, 256], 1),
        (&[2, 9000], 1),
        (&[3, 4096], 1),
        (&[2, 2, 4096], 2),
    ];
    for device in devices() {
        for dtype in FLOATS {
            for (k, &(shape, dims)) in cases.iter().enumerate() {
                let ns = &shape[shape.len() - dims..];
                let n: usize = ns.iter().product();
                let (xv, x) = rand_tensor(&mut rng, shape, dtype, device)?;
                let (wv, w) = rand_tensor(&mut rng, ns, dtype, device)?;
                let (bv, b) = rand_tensor(&mut rng, ns, dtype, device)?;
                let (with_w, with_b) = (k % 2 == 0 || k == 3, k % 3 != 1);
                let (wo, bo) = (with_w.then_some(&w), with_b.then_some(&b));
                let what = format!("{shape:?} over {ns:?} {dtype} on {device}, weight {with_w}, bias {with_b}");
                let y = expect_ok(F::layer_norm(&x, ns, wo, bo, 1e-5), &what);
                assert_eq!((y.shape(), y.dtype(), y.device()), (x.shape(), dtype, device), "{what}");
                let want = norm_reference(&xv, n, with_w.then_some(&wv[..]), with_b.then_some(&bv[..]), 1e-5, false);
                let want: Vec<f64> = want.iter().map(|&v| round_to(dtype, v)).collect();
                assert_near(&values(&y)?, &want, dtype, &format!("layer_norm {what}"));
                let y = expect_ok(F::rms_norm(&x, ns, wo, Some(1e-6)), &what);
                let want = norm_reference(&xv, n, with_w.then_some(&wv[..]), None, 1e-6, true);
                let want: Vec<f64> = want.iter().map(|&v| round_to(dtype, v)).collect();
                assert_near(&values(&y)?, &want, dtype, &format!("rms_norm {what}"));
            }
        }
    }
    Ok(())
}

/// A transposed (non-contiguous) input normalizes its logical rows, and so do rows starting off
/// 16 bytes.
#[test]
fn norms_of_a_transposed_input() -> Result<()> {
    let mut rng = Rng::new(4002);
    for device in devices() {
        let (xv, x) = rand_tensor(&mut rng, &[9, 4], DType::F32, device)?;
        let xt = x.t()?; // [4, 9]: row r is column r of x
        let rows: Vec<f64> = (0..4).flat_map(|r| (0..9).map(move |c| (r, c))).map(|(r, c)| xv[c * 4 + r]).collect();
        let y = F::layer_norm(&xt, &[9], None, None, 1e-5)?;
        assert_near(&values(&y)?, &norm_reference(&rows, 9, None, None, 1e-5, false), DType::F32, "transposed");
        // Rows of whole 16-byte vectors starting one element into their buffer (not 16-byte
        // aligned: the scalar kernel on a GPU).
        for dtype in [DType::BF16, DType::F32] {
            let (xv, x) = rand_tensor(&mut rng, &[1 + 3 * 512], dtype, device)?;
            let x = x.narrow(0, 1, 3 * 512)?.reshape([3, 512])?;
            let y = F::rms_norm(&x, &[512], None, Some(1e-6))?;
            let want: Vec<f64> =
                norm_reference(&xv[1..], 512, None, None, 1e-6, true).iter().map(|&v| round_to(dtype, v)).collect();
            assert_near(&values(&y)?, &want, dtype, &format!("offset rows {dtype} on {device}"));
        }
    }
    Ok(())
}

/// `rms_norm`'s `eps = None` is the dtype's epsilon (it matters where the mean square is tiny).
#[test]
fn rms_norm_default_eps_is_the_dtypes_epsilon() -> Result<()> {
    for device in devices() {
        for (dtype, eps) in [(DType::F32, f32::EPSILON as f64), (DType::F64, f64::EPSILON), (DType::BF16, 0.0078125)] {
            let scale = if dtype == DType::F64 {
                1e-8
            } else if dtype == DType::BF16 {
                0.05
            } else {
                2e-4
            };
            let xv: Vec<f64> = [1.0, -2.0, 3.0, 0.5, -1.5].iter().map(|v| round_to(dtype, v * scale)).collect();
            let x = tensor(&xv, &[1, 5], dtype, device)?;
            let y = F::rms_norm(&x, &[5], None, None)?;
            let want: Vec<f64> =
                norm_reference(&xv, 5, None, None, eps, true).iter().map(|&v| round_to(dtype, v)).collect();
            assert_near(&values(&y)?, &want, dtype, &format!("rms_norm default eps {dtype} on {device}"));
            let without: Vec<f64> = norm_reference(&xv, 5, None, None, 0.0, true);
            assert!((without[0] - want[0]).abs() > 1e-2 * without[0].abs(), "the case must tell eps apart");
        }
    }
    Ok(())
}

#[test]
fn norm_arguments_are_checked() -> Result<()> {
    for device in devices() {
        let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3], device)?;
        let w2 = Tensor::from_slice(&[1.0f32, 2.0], [2], device)?;
        let w16 = Tensor::from_slice(&[1.0f32, 2.0, 3.0], [3], device)?.to_dtype(DType::F16)?;
        assert!(matches!(F::layer_norm(&x, &[2], None, None, 1e-5), Err(Error::InvalidShape { .. })));
        assert!(matches!(F::layer_norm(&x, &[], None, None, 1e-5), Err(Error::InvalidShape { .. })));
        assert!(matches!(F::layer_norm(&x, &[1, 2, 3], None, None, 1e-5), Err(Error::InvalidShape { .. })));
        assert!(matches!(F::layer_norm(&x, &[3], Some(&w2), None, 1e-5), Err(Error::ShapeMismatch { .. })));
        assert!(matches!(F::rms_norm(&x, &[3], Some(&w16), None), Err(Error::DTypeMismatch { .. })));
        assert!(matches!(F::layer_norm(&x, &[3], None, None, -1.0), Err(Error::InvalidArgument { .. })));
        let xi = Tensor::from_slice(&[1i64, 2, 3], [3], device)?;
        assert!(matches!(F::rms_norm(&xi, &[3], None, None), Err(Error::UnsupportedDType { .. })));
        let y = F::layer_norm(&x, &[3], None, None, 0.0)?;
        let want = norm_reference(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 3, None, None, 0.0, false);
        assert_near(&values(&y)?, &want, DType::F32, "after the errors");
    }
    Ok(())
}

/// GELU's tanh form and `linear` against float64.
#[test]
fn gelu_tanh_and_linear_match_float64() -> Result<()> {
    let mut rng = Rng::new(4003);
    for device in devices() {
        for dtype in FLOATS {
            let (xv, x) = rand_tensor(&mut rng, &[3, 37], dtype, device)?;
            let y = F::gelu(&x, "tanh")?;
            let k = (2.0 / std::f64::consts::PI).sqrt();
            let want: Vec<f64> = xv
                .iter()
                .map(|&v| round_to(dtype, 0.5 * v * (1.0 + (k * (v + 0.044715 * v * v * v)).tanh())))
                .collect();
            assert_near(&values(&y)?, &want, dtype, &format!("gelu tanh {dtype} on {device}"));
            let exact = F::gelu(&x, "none")?;
            assert_eq!(values(&exact)?, values(&x.gelu()?)?, "approximate = none is the exact gelu");
            assert!(matches!(F::gelu(&x, "fast"), Err(Error::InvalidArgument { .. })));
        }
    }
    Ok(())
}

/// `F.linear(x, w, b)` against float64: `x @ wᵀ + b` rounded once (the bias is added to the
/// accumulator before the rounding: cuBLASLt's bias epilogue on a GPU), within one ulp of the
/// dtype plus the accumulation's own error (`k` roundings of the accumulator type over the
/// terms' magnitudes); inputs of 1, 2 and 3 dims, a transposed input, odd sizes, a bias that
/// broadcasts (`[1, out]`, added after the product: two roundings) and no bias.
#[test]
fn linear_with_bias_is_one_rounding_of_float64() -> Result<()> {
    let mut rng = Rng::new(4012);
    for device in devices() {
        for dtype in FLOATS {
            let (in_f, out_f) = (37, 29);
            let (wv, w) = rand_tensor(&mut rng, &[out_f, in_f], dtype, device)?;
            let (bv, b) = rand_tensor(&mut rng, &[out_f], dtype, device)?;
            let (xv, x3) = rand_tensor(&mut rng, &[2, 3, in_f], dtype, device)?;
            let (acc_eps, rel) = match dtype {
                DType::BF16 => (2f64.powi(-24), 2f64.powi(-7)),
                DType::F16 => (2f64.powi(-24), 2f64.powi(-10)),
                DType::F32 => (2f64.powi(-24), 2f64.powi(-23)),
                _ => (2f64.powi(-53), 2f64.powi(-52)),
            };
            let check = |got: &[f64], rows: &[Vec<f64>], with_b: bool, roundings: f64, what: &str| {
                for (r, row) in rows.iter().enumerate() {
                    for o in 0..out_f {
                        let terms = (0..in_f).map(|i| row[i] * wv[o * in_f + i]);
                        let mag: f64 = terms.clone().map(f64::abs).sum::<f64>() + bv[o].abs();
                        let want = terms.sum::<f64>() + if with_b { bv[o] } else { 0.0 };
                        let g = got[r * out_f + o];
                        // A second rounding (of the product alone) is relative to the terms' magnitude.
                        let bound = rel * want.abs()
                            + (roundings - 1.0) * rel * mag
                            + 2.0 * in_f as f64 * acc_eps * mag
                            + 1e-30;
                        assert!(
                            (g - want).abs() <= bound,
                            "linear {what} {dtype} on {device} [{r}, {o}]: got {g}, want {want} (bound {bound})"
                        );
                    }
                }
            };
            let rows3: Vec<Vec<f64>> = xv.chunks(in_f).map(<[f64]>::to_vec).collect();
            let y = F::linear(&x3, &w, Some(&b))?;
            assert_eq!(y.shape(), &[2, 3, out_f]);
            check(&values(&y)?, &rows3, true, 1.0, "3-D");
            let y = F::linear(&x3, &w, None)?;
            check(&values(&y)?, &rows3, false, 1.0, "without bias");
            let y = F::linear(&x3.narrow(0, 1, 1)?.narrow(1, 2, 1)?.reshape([in_f])?, &w, Some(&b))?;
            assert_eq!(y.shape(), &[out_f]);
            check(&values(&y)?, &rows3[5..], true, 1.0, "1-D");
            // A transposed input [in, 4] read as [4, in].
            let (tv, t) = rand_tensor(&mut rng, &[in_f, 4], dtype, device)?;
            let rows_t: Vec<Vec<f64>> = (0..4).map(|r| (0..in_f).map(|i| tv[i * 4 + r]).collect()).collect();
            let y = F::linear(&t.t()?, &w, Some(&b))?;
            check(&values(&y)?, &rows_t, true, 1.0, "transposed input");
            // A bias of [1, out] broadcasts: added after the product, two roundings.
            let b2 = b.reshape([1, out_f])?;
            let y = F::linear(&x3, &w, Some(&b2))?;
            check(&values(&y)?, &rows3, true, 2.0, "broadcast bias");
            let ints = Tensor::from_slice(&[1i64; 29], [29], device)?;
            assert!(F::linear(&x3, &w, Some(&ints)).is_err());
            assert_eq!(values(&F::linear(&x3, &w, Some(&b))?)?.len(), 6 * out_f, "usable after an error");
        }
    }
    Ok(())
}

/// `F.gelu(x, "tanh")` is one rounding of the float64 value (within one ulp of the dtype,
/// subnormal steps included; `f32` within its few ulp of the exponential's argument) on random
/// values of either sign out to |x| = 6 (the tail, where `1 + tanh` cancels), read through a
/// transposed, narrowed (non-contiguous) view; integers are a typed error and the runtime stays
/// usable.
#[test]
fn gelu_tanh_is_one_rounding_of_float64_on_strided_input() -> Result<()> {
    let mut rng = Rng::new(4011);
    let k = (2.0 / std::f64::consts::PI).sqrt();
    // `x/2 · (1 + tanh(u))` is `x / (1 + e^(-2u))` exactly; the latter keeps float64's accuracy
    // where `1 + tanh(u)` cancels (x < -3).
    let reference = |v: f64| v / (1.0 + (-2.0 * k * (v + 0.044715 * v * v * v)).exp());
    assert!((reference(1.3) - 0.65 * (1.0 + (k * (1.3 + 0.044715 * 1.3f64.powi(3))).tanh())).abs() < 1e-15);
    for device in devices() {
        for dtype in FLOATS {
            let xv: Vec<f64> =
                sample(&mut rng, dtype, 41 * 7, Domain::Any).iter().map(|v| round_to(dtype, v * 2.4)).collect();
            let x = tensor(&xv, &[41, 7], dtype, device)?;
            let view = x.t()?.narrow(1, 2, 37)?;
            assert!(!view.is_contiguous());
            let got = values(&F::gelu(&view, "tanh")?)?;
            let (rel, step) = match dtype {
                DType::BF16 => (2f64.powi(-7), 2f64.powi(-133)),
                DType::F16 => (2f64.powi(-10), 2f64.powi(-24)),
                DType::F32 => (1e-5, 2f64.powi(-149)),
                _ => (1e-13, 0.0),
            };
            for i in 0..7 {
                for j in 0..37 {
                    let (g, w) = (got[i * 37 + j], reference(xv[(j + 2) * 7 + i]));
                    let ok = (g - w).abs() <= (rel * w.abs()).max(step);
                    assert!(ok, "gelu tanh {dtype} on {device} of {}: got {g}, want {w}", xv[(j + 2) * 7 + i]);
                }
            }
        }
        let ints = Tensor::from_slice(&[1i64, -2, 3], [3], device)?;
        assert!(matches!(F::gelu(&ints, "tanh"), Err(Error::UnsupportedDType { .. })));
        let one = Tensor::from_slice(&[1.0f32], [1], device)?;
        let want = reference(1.0);
        assert!((F::gelu(&one, "tanh")?.to_vec::<f32>()?[0] as f64 - want).abs() < 1e-6 * want);
    }
    Ok(())
}
