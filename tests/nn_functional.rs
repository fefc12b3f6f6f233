//! `nn::functional`'s `layer_norm`, `rms_norm`, `gelu(approximate = "tanh")`, `linear` and
//! `scaled_dot_product_attention` against float64 references written from PyTorch's documented
//! (math-backend) semantics, on random data, on the CPU and the current driver's device (the
//! CUDA kernels on a GPU: flash attention, its split-key decode path, the norm rows), in every
//! float dtype; bad arguments give typed errors and leave the runtime usable.

mod tensor_util;

use cudasem::nn::functional as F;
use cudasem::{DType, Device, Error, Result, Tensor};
use tensor_util::{devices, expect_ok, round_to, sample, tensor, values, Domain, Rng};

const FLOATS: [DType; 4] = [DType::F32, DType::BF16, DType::F16, DType::F64];

/// `(rtol, atol)` of a fused op's result in `dtype` (accumulated in `float`, rounded once).
fn tol(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::BF16 => (1.6e-2, 1.6e-2),
        DType::F16 => (2e-3, 2e-3),
        DType::F32 => (1e-4, 1e-4),
        _ => (1e-10, 1e-10),
    }
}

#[track_caller]
fn assert_near(got: &[f64], want: &[f64], dtype: DType, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let (rtol, atol) = tol(dtype);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = (g - w).abs() <= atol + rtol * w.abs() || (g.is_nan() && w.is_nan());
        assert!(ok, "{what}: element {i}: got {g}, want {w} ({dtype})");
    }
}

fn rand_tensor(rng: &mut Rng, shape: &[usize], dtype: DType, device: Device) -> Result<(Vec<f64>, Tensor)> {
    let n = shape.iter().product();
    let v = sample(rng, dtype, n, Domain::Any);
    let t = tensor(&v, shape, dtype, device)?;
    Ok((v, t))
}

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

/// One attention case: shapes, mask and flags.
#[derive(Debug, Clone, Copy)]
struct Case {
    b: usize,
    hq: usize,
    hkv: usize,
    l: usize,
    s: usize,
    e: usize,
    ev: usize,
    mask: Mask,
    causal: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mask {
    None,
    /// Bool `[B, 1, L, S]` (broadcast over heads), some rows with every key masked.
    Bool,
    /// Additive `[1, Hq, L, S]` in the query's dtype, some −inf.
    Add,
    /// Bool `[S]` keeping only the first 10 keys (broadcast over everything).
    Prefix,
}

/// PyTorch's math backend in float64: `softmax(q kᵀ · scale + mask) v`, causal = `tril(ones(L,
/// S))`, a row whose every key is masked gives zeros.
#[allow(clippy::too_many_arguments)]
fn sdpa_reference(c: &Case, q: &[f64], k: &[f64], v: &[f64], mask: &[f64], bool_mask: bool, scale: f64) -> Vec<f64> {
    let g = c.hq / c.hkv;
    let mut out = vec![0.0; c.b * c.hq * c.l * c.ev];
    for b in 0..c.b {
        for h in 0..c.hq {
            let kvh = b * c.hkv + h / g;
            for i in 0..c.l {
                let row = (b * c.hq + h) * c.l + i;
                let mut sc: Vec<f64> = (0..c.s)
                    .map(|j| {
                        let dot: f64 = (0..c.e).map(|d| q[row * c.e + d] * k[(kvh * c.s + j) * c.e + d]).sum();
                        let mut x = dot * scale;
                        if c.mask != Mask::None {
                            let m = mask[row * c.s + j];
                            if bool_mask {
                                if m == 0.0 {
                                    x = f64::NEG_INFINITY;
                                }
                            } else {
                                x += m;
                            }
                        }
                        if c.causal && j > i {
                            x = f64::NEG_INFINITY;
                        }
                        x
                    })
                    .collect();
                let mx = sc.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                if mx == f64::NEG_INFINITY {
                    continue;
                }
                sc.iter_mut().for_each(|x| *x = (*x - mx).exp());
                let total: f64 = sc.iter().sum();
                for d in 0..c.ev {
                    out[row * c.ev + d] = (0..c.s).map(|j| sc[j] * v[(kvh * c.s + j) * c.ev + d]).sum::<f64>() / total;
                }
            }
        }
    }
    out
}

/// The mask of a case, and its values broadcast to `[B, Hq, L, S]`.
fn make_mask(rng: &mut Rng, c: &Case, dtype: DType, device: Device) -> Result<Option<(Tensor, Vec<f64>)>> {
    let full = c.b * c.hq * c.l * c.s;
    Ok(match c.mask {
        Mask::None => None,
        Mask::Bool => {
            // [B, 1, L, S]: random keep, row 1 of each batch masked entirely.
            let mut m: Vec<f64> =
                (0..c.b * c.l * c.s).map(|_| (!rng.next_u64().is_multiple_of(3)) as u8 as f64).collect();
            for b in 0..c.b {
                if c.l > 1 {
                    m[(b * c.l + 1) * c.s..(b * c.l + 2) * c.s].fill(0.0);
                }
            }
            let t = tensor(&m, &[c.b, 1, c.l, c.s], DType::Bool, device)?;
            let wide = (0..full).map(|x| {
                let (b, rest) = (x / (c.hq * c.l * c.s), x % (c.l * c.s));
                m[b * c.l * c.s + rest]
            });
            Some((t, wide.collect()))
        }
        Mask::Add => {
            let mut m: Vec<f64> = (0..c.hq * c.l * c.s).map(|_| round_to(dtype, rng.uniform(-3.0, 3.0))).collect();
            for x in m.iter_mut().step_by(5) {
                *x = f64::NEG_INFINITY;
            }
            let t = tensor(&m, &[1, c.hq, c.l, c.s], dtype, device)?;
            let per = c.hq * c.l * c.s;
            Some((t, (0..full).map(|x| m[x % per]).collect()))
        }
        Mask::Prefix => {
            let m: Vec<f64> = (0..c.s).map(|j| (j < 10) as u8 as f64).collect();
            let t = tensor(&m, &[c.s], DType::Bool, device)?;
            Some((t, (0..full).map(|x| m[x % c.s]).collect()))
        }
    })
}

/// PyTorch's layout of a 4-D attention output `y` of `[B, H, L, Ev]` (its flash / efficient /
/// cuDNN kernels'): `[B, L, H, Ev]` memory, strides `(L·H·Ev, Ev, H·Ev, 1)`, so the transformer's
/// `y.transpose(1, 2).reshape([B, L, H·Ev])` is a view (the same storage and first element, no
/// copy) holding `want` (the `[B, H, L, Ev]` reference) at `[b, i, h·Ev + d]`.
#[track_caller]
fn assert_pytorch_layout(y: &Tensor, want: &[f64], what: &str) -> Result<()> {
    let [b, h, l, ev] = y.shape()[..] else { panic!("{what}: a 4-D output, got {:?}", y.shape()) };
    assert_eq!(y.stride(), &[l * h * ev, ev, h * ev, 1][..], "{what}: PyTorch's strides");
    let flat = y.transpose(1, 2)?.reshape([b, l, h * ev])?;
    assert!(flat.shares_storage(y) && flat.data_ptr() == y.data_ptr(), "{what}: the reshape is a view");
    assert!(flat.is_contiguous(), "{what}: [B, L, H·Ev] is the memory's own order");
    if h > 1 && l > 1 {
        // As PyTorch's: H and L do not merge without a copy (`view` refuses, `reshape` copies).
        assert!(matches!(y.view([b, h * l * ev]), Err(Error::InvalidShape { .. })), "{what}: view of [B, H·L·Ev]");
    }
    let mut permuted = vec![0.0; want.len()];
    for (x, &w) in want.iter().enumerate() {
        let (bi, hi, i, d) = (x / (h * l * ev), x / (l * ev) % h, x / ev % l, x % ev);
        permuted[((bi * l + i) * h + hi) * ev + d] = w;
    }
    assert_near(&values(&flat)?, &permuted, y.dtype(), &format!("{what}: [B, L, H·Ev] view"));
    Ok(())
}

fn run_case(rng: &mut Rng, c: Case, dtypes: &[DType]) -> Result<()> {
    run_case_as(rng, c, dtypes, "")
}

/// [`run_case`], `label` (the attention kernel chosen) in the failure messages.
fn run_case_as(rng: &mut Rng, c: Case, dtypes: &[DType], label: &str) -> Result<()> {
    for device in devices() {
        for &dtype in dtypes {
            let (qv, q) = rand_tensor(rng, &[c.b, c.hq, c.l, c.e], dtype, device)?;
            let (kv, k) = rand_tensor(rng, &[c.b, c.hkv, c.s, c.e], dtype, device)?;
            let (vv, v) = rand_tensor(rng, &[c.b, c.hkv, c.s, c.ev], dtype, device)?;
            let mask = make_mask(rng, &c, dtype, device)?;
            let what = format!("{c:?} {dtype} on {device} {label}");
            let y = expect_ok(
                F::scaled_dot_product_attention(
                    &q,
                    &k,
                    &v,
                    mask.as_ref().map(|m| &m.0),
                    0.0,
                    c.causal,
                    None,
                    c.hq != c.hkv,
                ),
                &what,
            );
            assert_eq!((y.shape(), y.dtype(), y.device()), (&[c.b, c.hq, c.l, c.ev][..], dtype, device), "{what}");
            let (mv, bool_mask) = match &mask {
                Some((t, v)) => (v.clone(), t.dtype() == DType::Bool),
                None => (vec![], false),
            };
            let want = sdpa_reference(&c, &qv, &kv, &vv, &mv, bool_mask, 1.0 / (c.e as f64).sqrt());
            let want: Vec<f64> = want.iter().map(|&x| round_to(dtype, x)).collect();
            assert_near(&values(&y)?, &want, dtype, &what);
            assert_pytorch_layout(&y, &want, &what)?;
        }
    }
    Ok(())
}

const fn case(b: usize, hq: usize, hkv: usize, l: usize, s: usize, e: usize, ev: usize) -> Case {
    Case { b, hq, hkv, l, s, e, ev, mask: Mask::None, causal: false }
}

/// Plain and causal attention (L = S, L < S, L > S), lengths not multiples of a tile, head dims
/// 64, 80, 128 and 256 (Ev differing from E), every float dtype.
#[test]
fn sdpa_plain_and_causal_match_float64() -> Result<()> {
    let mut rng = Rng::new(4004);
    let all = &FLOATS[..];
    run_case(&mut rng, case(2, 2, 2, 5, 7, 64, 64), all)?;
    run_case(&mut rng, Case { causal: true, ..case(1, 2, 2, 37, 37, 80, 80) }, all)?;
    run_case(&mut rng, Case { causal: true, ..case(1, 2, 2, 20, 45, 128, 128) }, all)?;
    run_case(&mut rng, Case { causal: true, ..case(1, 1, 1, 45, 20, 64, 96) }, all)?;
    run_case(&mut rng, case(1, 2, 2, 3, 130, 256, 256), all)?;
    run_case(&mut rng, case(1, 1, 1, 70, 33, 24, 200), all)?;
    // An odd Ev: the output's head and row strides are odd (the FMA kernel writes it anywhere).
    run_case(&mut rng, Case { causal: true, ..case(2, 3, 3, 9, 12, 16, 33) }, all)
}

/// Bool masks (broadcast over heads, rows with every key masked give zeros), additive masks with
/// −inf (broadcast over the batch), and grouped key/value heads.
#[test]
fn sdpa_masks_and_gqa_match_float64() -> Result<()> {
    let mut rng = Rng::new(4005);
    let all = &FLOATS[..];
    run_case(&mut rng, Case { mask: Mask::Bool, ..case(2, 4, 2, 9, 33, 64, 32) }, all)?;
    run_case(&mut rng, Case { mask: Mask::Add, ..case(2, 3, 3, 17, 40, 128, 128) }, all)?;
    run_case(&mut rng, Case { mask: Mask::Add, ..case(1, 8, 2, 6, 65, 64, 64) }, all)
}

/// Decoding shapes (one or a few queries, long keys): on a GPU the keys are split across blocks
/// and the partials merged, including splits whose every key is masked (the prefix mask keeps
/// the first 10 keys only) and causal splits past the queries.
#[test]
fn sdpa_decode_shapes_match_float64() -> Result<()> {
    let mut rng = Rng::new(4006);
    let all = &FLOATS[..];
    run_case(&mut rng, case(2, 8, 2, 1, 1000, 128, 128), all)?;
    run_case(&mut rng, Case { mask: Mask::Prefix, ..case(1, 4, 4, 1, 777, 64, 64) }, all)?;
    run_case(&mut rng, Case { causal: true, ..case(1, 1, 1, 2, 3000, 64, 64) }, all)?;
    run_case(&mut rng, case(1, 2, 2, 2, 8192, 128, 128), &[DType::BF16, DType::F32])
}

/// 3-D `[B, L, E]` inputs, a transposed `[B, L, H, E]` query (strided), and an explicit scale.
#[test]
fn sdpa_three_d_strided_and_scaled() -> Result<()> {
    let mut rng = Rng::new(4007);
    for device in devices() {
        for dtype in FLOATS {
            let what = format!("{dtype} on {device}");
            let (qv, q) = rand_tensor(&mut rng, &[3, 6, 40], dtype, device)?;
            let (kv, k) = rand_tensor(&mut rng, &[3, 11, 40], dtype, device)?;
            let (vv, v) = rand_tensor(&mut rng, &[3, 11, 16], dtype, device)?;
            let mv: Vec<f64> = (0..6 * 11).map(|_| (!rng.next_u64().is_multiple_of(4)) as u8 as f64).collect();
            let m = tensor(&mv, &[6, 11], DType::Bool, device)?;
            let y = F::scaled_dot_product_attention(&q, &k, &v, Some(&m), 0.0, false, Some(0.3), false)?;
            assert_eq!(y.shape(), &[3, 6, 16], "{what}");
            assert!(y.is_contiguous(), "{what}: a 3-D output is contiguous (no heads to interleave)");
            let c = Case { mask: Mask::Bool, ..case(3, 1, 1, 6, 11, 40, 16) };
            let wide: Vec<f64> = (0..3 * 6 * 11).map(|x| mv[x % 66]).collect();
            let want: Vec<f64> =
                sdpa_reference(&c, &qv, &kv, &vv, &wide, true, 0.3).iter().map(|&x| round_to(dtype, x)).collect();
            assert_near(&values(&y)?, &want, dtype, &format!("3-D {what}"));

            // A query laid out [B, L, H, E] and viewed as [B, H, L, E].
            let (qv, q) = rand_tensor(&mut rng, &[2, 5, 3, 64], dtype, device)?;
            let q = q.transpose(1, 2)?;
            let (kv, k) = rand_tensor(&mut rng, &[2, 3, 9, 64], dtype, device)?;
            let (vv, v) = rand_tensor(&mut rng, &[2, 3, 9, 64], dtype, device)?;
            let y = F::scaled_dot_product_attention(&q, &k, &v, None, 0.0, true, None, false)?;
            let mut qd = vec![0.0; qv.len()];
            for b in 0..2 {
                for l in 0..5 {
                    for h in 0..3 {
                        for e in 0..64 {
                            qd[((b * 3 + h) * 5 + l) * 64 + e] = qv[((b * 5 + l) * 3 + h) * 64 + e];
                        }
                    }
                }
            }
            let c = Case { causal: true, ..case(2, 3, 3, 5, 9, 64, 64) };
            let want: Vec<f64> =
                sdpa_reference(&c, &qd, &kv, &vv, &[], false, 0.125).iter().map(|&x| round_to(dtype, x)).collect();
            assert_near(&values(&y)?, &want, dtype, &format!("strided query {what}"));
            assert_pytorch_layout(&y, &want, &format!("strided query {what}"))?;
        }
    }
    Ok(())
}

/// The CUDA driver's attention kernels, each chosen in turn (`CUDASEM_SDPA_KERNEL`'s setting:
/// the FMA flash kernel, the tensor-core kernels wherever they apply — f16 / bf16 with head dims
/// 64 and 128, here also for a single query: the `mma.sync` one and on compute capability 9.0
/// Hopper's wgmma one with either key tile, with and without its warpgroups taking turns, and on
/// FlashAttention 3's schedule — and the default choice), against the float64
/// reference: causal with L = S, L > S and S shorter than a tile, lengths not multiples of the
/// 64- and 128-row tiles, several key tiles, bool masks with fully masked rows and grouped heads,
/// additive masks with −inf, a prefix mask, decoding, a query viewed from `[B, L, H, E]`, and a
/// query starting off 16 bytes (the tensor-core kernel then falls back); each with the
/// tensor-core kernels' query tiles in every order (`CUDASEM_SDPA_KERNEL`'s `:heavy`, `:head`,
/// `:natural`), every output in PyTorch's `[B, L, H, Ev]` memory. A failure names the kernel and
/// order. The simulator computes every case in float64 whatever the choice.
#[test]
fn sdpa_each_cuda_kernel_matches_float64() -> Result<()> {
    use cudasem::{AttentionKernel, AttentionOrder};
    let mut rng = Rng::new(4010);
    let half = &[DType::BF16, DType::F16][..];
    let cases = [
        Case { causal: true, ..case(2, 4, 4, 200, 200, 64, 64) },
        Case { causal: true, ..case(1, 2, 2, 130, 77, 128, 128) },
        Case { causal: true, ..case(1, 2, 1, 20, 3, 64, 64) },
        case(1, 3, 3, 65, 300, 128, 128),
        Case { mask: Mask::Bool, ..case(2, 4, 2, 70, 129, 64, 64) },
        Case { mask: Mask::Add, ..case(1, 4, 4, 64, 64, 128, 128) },
        Case { mask: Mask::Prefix, ..case(1, 8, 2, 33, 500, 64, 64) },
        case(2, 8, 2, 1, 1000, 128, 128),
        Case { causal: true, ..case(1, 2, 2, 5, 9, 128, 128) },
        // Hopper's kernel (blocks of 128 queries, tiles of 64 or 128 keys, two stages): causal
        // across several query blocks with a ragged last one, exactly one block, one row past
        // it, L > S and L < S, grouped heads, many key tiles.
        Case { causal: true, ..case(1, 4, 2, 300, 300, 64, 64) },
        Case { causal: true, ..case(1, 2, 2, 257, 257, 128, 128) },
        Case { causal: true, ..case(2, 2, 2, 128, 128, 64, 64) },
        case(1, 2, 2, 129, 200, 128, 128),
        Case { causal: true, ..case(1, 2, 1, 200, 70, 128, 128) },
        Case { causal: true, ..case(1, 2, 2, 100, 450, 64, 64) },
        case(1, 4, 1, 64, 1000, 64, 64),
    ];
    // The simulator ignores the choice: one pass there. (The FMA kernel ignores the order.)
    let choices: Vec<(AttentionKernel, AttentionOrder)> = if cudasem::cuda::driver_name() == "cuda" {
        let tensor = [
            AttentionKernel::Mma,
            AttentionKernel::Mma1,
            AttentionKernel::Wg64,
            AttentionKernel::Wg128,
            AttentionKernel::Pp64,
            AttentionKernel::Pp128,
            AttentionKernel::Fa128,
            AttentionKernel::Fa128g,
            AttentionKernel::Fa128n,
            AttentionKernel::Auto,
        ];
        let orders = [AttentionOrder::Heavy, AttentionOrder::Head, AttentionOrder::Natural];
        let tensor = tensor.into_iter().flat_map(|k| orders.map(|o| (k, o)));
        std::iter::once((AttentionKernel::Fma, AttentionOrder::Heavy)).chain(tensor).collect()
    } else {
        vec![(AttentionKernel::Auto, AttentionOrder::Heavy)]
    };
    for (kernel, order) in choices {
        cudasem::cuda::set_attention(kernel, order)?;
        let label = format!("(attention kernel {kernel:?}, order {order:?})");
        // The order applies to causal launches only (the others keep each head's tiles together).
        for c in cases.into_iter().filter(|c| c.causal || order == AttentionOrder::Heavy) {
            run_case_as(&mut rng, c, half, &label)?;
        }
        for device in devices() {
            for dtype in half.iter().copied() {
                let what = format!("{dtype} on {device} {label}");
                // A query laid out [B, L, H, E], viewed as [B, H, L, E] (strides multiples of 8).
                let (b, h, l, s, e) = (2, 3, 70, 90, 64);
                let (qv, q) = rand_tensor(&mut rng, &[b, l, h, e], dtype, device)?;
                let (kv, k) = rand_tensor(&mut rng, &[b, h, s, e], dtype, device)?;
                let (vv, v) = rand_tensor(&mut rng, &[b, h, s, e], dtype, device)?;
                let y = F::scaled_dot_product_attention(&q.transpose(1, 2)?, &k, &v, None, 0.0, true, None, false)?;
                let mut qd = vec![0.0; qv.len()];
                for (i, x) in qv.iter().enumerate() {
                    let (bi, li, hi, ei) = (i / (l * h * e), i / (h * e) % l, i / e % h, i % e);
                    qd[((bi * h + hi) * l + li) * e + ei] = *x;
                }
                let c = Case { causal: true, ..case(b, h, h, l, s, e, e) };
                let want: Vec<f64> =
                    sdpa_reference(&c, &qd, &kv, &vv, &[], false, 0.125).iter().map(|&x| round_to(dtype, x)).collect();
                assert_near(&values(&y)?, &want, dtype, &format!("transposed query {what}"));
                assert_pytorch_layout(&y, &want, &format!("transposed query {what}"))?;
                // A query starting one element into its buffer: not 16-byte aligned.
                let (qv, q) = rand_tensor(&mut rng, &[1 + b * h * l * e], dtype, device)?;
                let q = q.narrow(0, 1, b * h * l * e)?.reshape([b, h, l, e])?;
                let y = F::scaled_dot_product_attention(&q, &k, &v, None, 0.0, false, None, false)?;
                let c = case(b, h, h, l, s, e, e);
                let want: Vec<f64> = sdpa_reference(&c, &qv[1..], &kv, &vv, &[], false, 0.125)
                    .iter()
                    .map(|&x| round_to(dtype, x))
                    .collect();
                assert_near(&values(&y)?, &want, dtype, &format!("offset query {what}"));
                assert_pytorch_layout(&y, &want, &format!("offset query {what}"))?;
            }
        }
    }
    cudasem::cuda::set_attention(AttentionKernel::Auto, AttentionOrder::Heavy)
}

/// Hopper's kernels on FlashAttention 3's schedule run persistent blocks (one an SM for head dim
/// 128, two for 64), each taking several query tiles in turn when there are more than blocks:
/// causal (the heaviest tiles first) and not, grouped heads, ragged tiles (a last tile of one
/// row), L > S, against the float64 reference for each choice of them (`fa128`, `fa128g` a block
/// per tile, `fa128n` without turns); more tiles than an H100's or H200's 132 SMs hold at once.
/// The simulator ignores the choice and computes every case alike: one case there.
#[test]
fn sdpa_persistent_hopper_blocks_take_every_query_tile() -> Result<()> {
    use cudasem::AttentionKernel;
    let mut rng = Rng::new(4012);
    let cases = [
        // 2 query tiles × 70 heads = 140 tasks of head dim 128.
        Case { causal: true, ..case(1, 70, 14, 129, 40, 128, 128) },
        case(2, 35, 35, 129, 70, 128, 128),
        // 2 × 140 = 280 tasks of head dim 64 (two blocks an SM: 264).
        Case { causal: true, ..case(1, 140, 35, 129, 50, 64, 64) },
        case(1, 140, 140, 150, 70, 64, 64),
    ];
    let cuda = cudasem::cuda::driver_name() == "cuda";
    let (kernels, cases, dtypes) = if cuda {
        (
            &[AttentionKernel::Fa128, AttentionKernel::Fa128g, AttentionKernel::Fa128n][..],
            &cases[..],
            &[DType::BF16, DType::F16][..],
        )
    } else {
        (&[AttentionKernel::Auto][..], &cases[..1], &[DType::BF16][..])
    };
    for &kernel in kernels {
        cudasem::cuda::set_attention_kernel(kernel)?;
        let label = format!("(attention kernel {kernel:?})");
        for &c in cases {
            run_case_as(&mut rng, c, dtypes, &label)?;
        }
    }
    cudasem::cuda::set_attention_kernel(AttentionKernel::Auto)
}

#[test]
fn sdpa_arguments_are_checked() -> Result<()> {
    let mut rng = Rng::new(4008);
    for device in devices() {
        let t = |rng: &mut Rng, shape: &[usize]| rand_tensor(rng, shape, DType::F32, device).map(|p| p.1);
        let q = t(&mut rng, &[1, 4, 3, 8])?;
        let k = t(&mut rng, &[1, 2, 5, 8])?;
        let v = t(&mut rng, &[1, 2, 5, 8])?;
        let sdpa = |q: &Tensor, k: &Tensor, v: &Tensor, m: Option<&Tensor>, p: f64, causal: bool, gqa: bool| {
            F::scaled_dot_product_attention(q, k, v, m, p, causal, None, gqa)
        };
        assert!(matches!(sdpa(&q, &k, &v, None, 0.0, false, false), Err(Error::InvalidArgument { .. })), "heads");
        let k3 = t(&mut rng, &[1, 3, 5, 8])?;
        assert!(matches!(sdpa(&q, &k3, &k3, None, 0.0, false, true), Err(Error::InvalidArgument { .. })), "gqa");
        assert!(matches!(sdpa(&q, &k, &v, None, 0.1, false, true), Err(Error::Unsupported { .. })), "dropout");
        assert!(matches!(sdpa(&q, &k, &v, None, 1.5, false, true), Err(Error::InvalidArgument { .. })));
        let v6 = t(&mut rng, &[1, 2, 6, 8])?;
        assert!(matches!(sdpa(&q, &k, &v6, None, 0.0, false, true), Err(Error::ShapeMismatch { .. })), "S");
        let k7 = t(&mut rng, &[1, 2, 5, 7])?;
        assert!(matches!(sdpa(&q, &k7, &v, None, 0.0, false, true), Err(Error::ShapeMismatch { .. })), "E");
        let big = t(&mut rng, &[1, 1, 2, 257])?;
        assert!(matches!(sdpa(&big, &big, &big, None, 0.0, false, false), Err(Error::InvalidShape { .. })), "E>256");
        let flat = t(&mut rng, &[3, 8])?;
        assert!(matches!(sdpa(&flat, &flat, &flat, None, 0.0, false, false), Err(Error::InvalidShape { .. })));
        let bad_mask = Tensor::from_slice(&[true, false, true, false], [4], device)?;
        assert!(sdpa(&q, &k, &v, Some(&bad_mask), 0.0, false, true).is_err(), "mask not broadcastable");
        let mask = Tensor::from_slice(&[true, false, true, true, true], [5], device)?;
        assert!(matches!(sdpa(&q, &k, &v, Some(&mask), 0.0, true, true), Err(Error::InvalidArgument { .. })));
        let int_mask = Tensor::from_slice(&[1i64, 0, 1, 1, 1], [5], device)?;
        assert!(matches!(sdpa(&q, &k, &v, Some(&int_mask), 0.0, false, true), Err(Error::DTypeMismatch { .. })));
        let k16 = k.to_dtype(DType::F16)?;
        assert!(matches!(sdpa(&q, &k16, &v, None, 0.0, false, true), Err(Error::DTypeMismatch { .. })));
        // No keys (PyTorch: an empty softmax, then zeros) and no queries.
        let none = Tensor::zeros([1, 2, 0, 8], DType::F32, device)?;
        let y = sdpa(&q, &none, &none, None, 0.0, false, true)?;
        assert_eq!((y.shape(), values(&y)?), (&[1, 4, 3, 8][..], vec![0.0; 96]));
        assert_eq!(sdpa(&none, &k, &v, None, 0.0, false, false)?.shape(), &[1, 2, 0, 8]);
        let y = sdpa(&Tensor::zeros([1, 4, 0, 8], DType::F32, device)?, &k, &v, None, 0.0, true, true)?;
        assert_eq!(y.shape(), &[1, 4, 0, 8]);
        // Still usable: a valid call after the errors.
        let y = sdpa(&q, &k, &v, Some(&mask), 0.0, false, true)?;
        assert_eq!(y.shape(), &[1, 4, 3, 8]);
        assert!(values(&y)?.iter().all(|x| x.is_finite()));
    }
    Ok(())
}

/// Attention whose query i selects one key direction: keys are unit vectors `e_(j mod E)` and
/// query i is `160 · e_π(i)`, so with scale 1/8 the keys j ≡ π(i) (mod E) score 20 above the
/// rest (weights below 2^-28) and row i of the output is the mean of their value rows (small
/// integers, exact in f16 / bf16). Every CUDA kernel choice, head dims 64 and 128, one key tile's
/// worth and several (ragged), 200 queries (a ragged block of 128), non-causal and causal (key j
/// kept for query i when j <= i), the query tiles in every order. A mismatch names the value rows
/// the output holds instead, so a misplaced fragment or tile shows where it went.
#[test]
fn sdpa_picks_the_value_rows_its_query_selects() -> Result<()> {
    use cudasem::{AttentionKernel, AttentionOrder};
    let choices: Vec<(AttentionKernel, AttentionOrder)> = if cudasem::cuda::driver_name() == "cuda" {
        let kernels = [
            AttentionKernel::Mma1,
            AttentionKernel::Wg64,
            AttentionKernel::Wg128,
            AttentionKernel::Pp64,
            AttentionKernel::Pp128,
            AttentionKernel::Fa128,
            AttentionKernel::Fa128g,
            AttentionKernel::Fa128n,
            AttentionKernel::Auto,
        ];
        let orders = [AttentionOrder::Heavy, AttentionOrder::Head, AttentionOrder::Natural];
        kernels.into_iter().flat_map(|k| orders.map(|o| (k, o))).collect()
    } else {
        vec![(AttentionKernel::Auto, AttentionOrder::Heavy)]
    };
    for (kernel, order) in choices {
        cudasem::cuda::set_attention(kernel, order)?;
        for device in devices() {
            for dtype in [DType::BF16, DType::F16] {
                for e in [64, 128] {
                    for s in [e, 2 * e + 37] {
                        // (Non-causal launches ignore the order.)
                        for causal in [false, true].into_iter().filter(|&c| c || order == AttentionOrder::Heavy) {
                            let what =
                                format!("{kernel:?} ({order:?}) {dtype} on {device}, E {e}, S {s}, causal {causal}");
                            picks_value_rows(device, dtype, e, s, causal, &what)?;
                        }
                    }
                }
            }
        }
    }
    cudasem::cuda::set_attention(AttentionKernel::Auto, AttentionOrder::Heavy)
}

/// One case of [`sdpa_picks_the_value_rows_its_query_selects`]: 2 heads of 200 queries over `s`
/// keys of head dim `e`. Causal query i keeps keys 0..=i: the mean of the value rows it selects
/// among them, or of all of them (every score 0) when it selects none.
fn picks_value_rows(device: Device, dtype: DType, e: usize, s: usize, causal: bool, what: &str) -> Result<()> {
    let (b, h, l) = (1, 2, 200);
    let pick = |i: usize| (i * 37 + 11) % e;
    let value = |j: usize, c: usize| ((j * 7 + c) % 61) as f64 - 30.0;
    let mut q = vec![0.0; b * h * l * e];
    for r in 0..b * h * l {
        q[r * e + pick(r % l)] = 160.0;
    }
    let mut k = vec![0.0; b * h * s * e];
    let mut v = vec![0.0; b * h * s * e];
    for r in 0..b * h * s {
        k[r * e + (r % s) % e] = 1.0;
        for c in 0..e {
            v[r * e + c] = value(r % s, c);
        }
    }
    let qt = tensor(&q, &[b, h, l, e], dtype, device)?;
    let kt = tensor(&k, &[b, h, s, e], dtype, device)?;
    let vt = tensor(&v, &[b, h, s, e], dtype, device)?;
    let y = F::scaled_dot_product_attention(&qt, &kt, &vt, None, 0.0, causal, Some(0.125), false)?;
    let got = values(&y)?;
    for r in 0..b * h * l {
        let i = r % l;
        let kept = if causal { (i + 1).min(s) } else { s };
        let mut chosen: Vec<usize> = (0..kept).filter(|j| j % e == pick(i)).collect();
        if chosen.is_empty() {
            chosen = (0..kept).collect();
        }
        for c in 0..e {
            let want = chosen.iter().map(|&j| value(j, c)).sum::<f64>() / chosen.len() as f64;
            let g = got[r * e + c];
            if (g - want).abs() > 0.02 * (1.0 + want.abs()) {
                let row = &got[r * e..(r + 1) * e];
                let near = (0..s)
                    .min_by(|&a, &z| {
                        let d = |j: usize| (0..e).map(|c| (row[c] - value(j, c)).abs()).sum::<f64>();
                        d(a).total_cmp(&d(z))
                    })
                    .unwrap_or(0);
                panic!(
                    "{what}: output row {r} (query {i}) column {c}: got {g}, want {want} (value rows {chosen:?}); \
                     the row is nearest value row {near}; row head {:?}",
                    &row[..8]
                );
            }
        }
    }
    Ok(())
}
