//! Unary ops and casts against a float64 reference, in f32, bf16, f16 and f64, on the CPU and the
//! current driver's device, over shapes that take the vectorized body and the scalar tail of the
//! kernels (1, 7, 4096 + 3, an aligned 8 × 1024, a transposed 37 × 259), with inputs that
//! include large magnitudes, negative values, zeros where meaningful, ±inf and NaN.

mod tensor_util;

use cudasem::{DType, Device, Result, Tensor};
use tensor_util::reference::{apply_unary, unary_out, unary_reference};
use tensor_util::{assert_close, devices, expect_ok, laid_out, round_to, sample, tensor, values, Domain, Layout, Rng};

const FLOATS: [DType; 4] = [DType::F32, DType::BF16, DType::F16, DType::F64];

/// `(rows, cols, layout)`: rows 0 means a 1-D tensor of `cols` elements.
const SHAPES: [(usize, usize, Layout); 5] = [
    (0, 1, Layout::Contiguous),
    (0, 7, Layout::Contiguous),
    (0, 4099, Layout::Contiguous),
    (8, 1024, Layout::Contiguous),
    (37, 259, Layout::Transposed),
];

/// The special inputs of `op`: where its result saturates, overflows, underflows or is undefined.
fn specials(op: &str) -> Vec<f64> {
    let (inf, nan) = (f64::INFINITY, f64::NAN);
    match op {
        "log" | "sqrt" | "rsqrt" => vec![0.0, 1e-3, 1e4, inf, -1.0, -inf, nan, 0.5, 100.0],
        _ => vec![20.0, -20.0, 100.0, -100.0, 1e4, -1e4, inf, -inf, nan, -0.5, 12.0, -12.0, 88.5],
    }
}

/// `n` inputs of `op` in `dtype`: random values of the op's domain, every other one from a wider
/// range (±[2.5, 12), or [3, 1000) for log and roots), with the specials at the start (the
/// vectorized body) and again at the end (the tail) where there is room.
fn inputs(rng: &mut Rng, op: &str, dtype: DType, n: usize) -> Vec<f64> {
    let positive = matches!(op, "log" | "sqrt" | "rsqrt");
    let narrow = sample(rng, dtype, n, if positive { Domain::Positive } else { Domain::Any });
    let mut v: Vec<f64> = (0..n)
        .map(|i| {
            if i % 2 == 0 {
                return narrow[i];
            }
            let w = if positive { rng.uniform(3.0, 1000.0) } else { rng.uniform(2.5, 12.0) };
            round_to(dtype, if positive || rng.next_u64() & 1 == 0 { w } else { -w })
        })
        .collect();
    let sp: Vec<f64> = specials(op).into_iter().map(|x| round_to(dtype, x)).collect();
    for (i, &x) in sp.iter().enumerate().take(n) {
        v[i] = x;
    }
    if n >= 2 * sp.len() {
        v[n - sp.len()..].copy_from_slice(&sp);
    }
    v
}

/// A tensor of `dtype` holding `xv` in the shape and layout of `shape`.
fn shaped(xv: &[f64], shape: (usize, usize, Layout), dtype: DType, device: Device) -> Result<Tensor> {
    match shape {
        (0, n, _) => tensor(xv, &[n], dtype, device),
        (r, c, layout) => laid_out(xv, r, c, dtype, device, layout),
    }
}

fn check_ops(ops: &[&'static str], seed: u64) -> Result<()> {
    let mut rng = Rng::new(seed);
    for device in devices() {
        for dtype in FLOATS {
            for shape in SHAPES {
                let n = shape.0.max(1) * shape.1;
                for &op in ops {
                    let what = format!("{op} of {dtype} {shape:?} on {device}");
                    let xv = inputs(&mut rng, op, dtype, n);
                    let x = shaped(&xv, shape, dtype, device)?;
                    let out = expect_ok(apply_unary(op, &x), &what);
                    assert_eq!((out.dtype(), out.shape(), out.device()), (dtype, x.shape(), x.device()), "{what}");
                    // PyTorch's preserve_format: a dense permuted input's layout is kept.
                    assert!(out.is_contiguous() || out.stride() == x.stride(), "{what}");
                    let want: Vec<f64> = xv.iter().map(|&v| round_to(dtype, unary_reference(op, v))).collect();
                    assert_close(&values(&out)?, &want, op, dtype, &what);
                }
            }
        }
    }
    Ok(())
}

#[test]
fn sign_and_root_ops_are_exact_on_every_path() -> Result<()> {
    check_ops(&["neg", "abs", "relu", "sqrt"], 50)
}

#[test]
fn exp_log_rsqrt_and_sigmoid_match_the_reference_on_every_path() -> Result<()> {
    check_ops(&["exp", "log", "rsqrt", "sigmoid"], 51)
}

#[test]
fn sin_cos_tanh_and_gelu_match_the_reference_on_every_path() -> Result<()> {
    check_ops(&["sin", "cos", "tanh", "gelu"], 52)
}

/// Sine and cosine of arguments far outside [-π, π]: up to f16's largest finite value, and for f32
/// and bf16 past 2^17 (where the half types' reduced-argument fast form hands over to the library
/// function), in a vectorized run with a tail.
#[test]
fn sin_and_cos_of_large_arguments_match_the_reference() -> Result<()> {
    let mut rng = Rng::new(53);
    for device in devices() {
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            let top = if dtype == DType::F16 { 65504.0 } else { 1e7 };
            let n = 4099;
            let xv: Vec<f64> = (0..n)
                .map(|i| {
                    // Magnitudes spread evenly over the decades from 10 to `top`.
                    let x = 10f64.powf(rng.uniform(1.0, f64::log10(top)));
                    round_to(dtype, if i % 2 == 0 { x } else { -x })
                })
                .collect();
            let x = tensor(&xv, &[n], dtype, device)?;
            for op in ["sin", "cos"] {
                let what = format!("{op} of large {dtype} arguments on {device}");
                let out = expect_ok(apply_unary(op, &x), &what);
                let want: Vec<f64> = xv.iter().map(|&v| round_to(dtype, unary_reference(op, v))).collect();
                assert_close(&values(&out)?, &want, op, dtype, &what);
            }
        }
    }
    Ok(())
}

/// The values PyTorch documents or gives for the special inputs, spelled out (the reference
/// functions above compute them; this pins them down independently).
#[test]
fn special_values_are_pytorchs() -> Result<()> {
    let (inf, nan) = (f64::INFINITY, f64::NAN);
    #[rustfmt::skip]
    let cases: [(&str, f64, f64); 24] = [
        ("sigmoid", -100.0, 0.0), ("sigmoid", 100.0, 1.0), ("sigmoid", -inf, 0.0), ("sigmoid", inf, 1.0),
        ("exp", 1000.0, inf), ("exp", -inf, 0.0), ("exp", -1e4, 0.0), ("tanh", inf, 1.0), ("tanh", -inf, -1.0),
        ("tanh", 1e4, 1.0), ("gelu", -inf, nan), ("gelu", inf, inf), ("gelu", -100.0, 0.0), ("gelu", 1e4, 1e4),
        ("relu", nan, nan), ("relu", -inf, 0.0), ("log", 0.0, -inf), ("log", -1.0, nan), ("sqrt", -1.0, nan),
        ("rsqrt", 0.0, inf), ("rsqrt", inf, 0.0), ("sin", inf, nan), ("cos", -inf, nan), ("abs", -inf, inf),
    ];
    for device in devices() {
        for dtype in FLOATS {
            for (op, x, want) in cases {
                let what = format!("{op}({x}) in {dtype} on {device}");
                // Also in a vectorized run: the value at the start, in the middle and in the tail.
                let (x, want) = (round_to(dtype, x), round_to(dtype, want));
                let mut xv = vec![round_to(dtype, 0.75); 4099];
                for i in [0, 2050, 4098] {
                    xv[i] = x;
                }
                let out = values(&expect_ok(apply_unary(op, &tensor(&xv, &[4099], dtype, device)?), &what))?;
                for i in [0, 2050, 4098] {
                    let g = out[i];
                    let ok = if want.is_nan() { g.is_nan() } else { g == want || (want == 0.0 && g.abs() < 1e-30) };
                    assert!(ok, "{what}: element {i} is {g}, PyTorch gives {want}");
                }
                assert_eq!(unary_reference(op, x).is_nan(), want.is_nan(), "{what}: the reference agrees");
            }
        }
    }
    Ok(())
}

/// Float inputs of integer tensors: the unary functions compute in the default float dtype.
#[test]
fn unary_functions_of_integer_tensors_compute_in_f32() -> Result<()> {
    let mut rng = Rng::new(53);
    for device in devices() {
        for dtype in [DType::I32, DType::I64] {
            for op in ["exp", "sqrt", "sigmoid", "tanh", "sin", "neg", "abs", "relu"] {
                let what = format!("{op} of {dtype} on {device}");
                let domain = if op == "sqrt" { Domain::Positive } else { Domain::Any };
                let xv = sample(&mut rng, dtype, 4099, domain);
                let x = tensor(&xv, &[4099], dtype, device)?;
                let out = expect_ok(apply_unary(op, &x), &what);
                let out_dtype = unary_out(op, dtype).expect("defined");
                assert_eq!(out.dtype(), out_dtype, "{what}");
                let want: Vec<f64> = xv.iter().map(|&v| round_to(out_dtype, unary_reference(op, v))).collect();
                assert_close(&values(&out)?, &want, op, out_dtype, &what);
            }
        }
    }
    Ok(())
}

/// Values of `src` for casts: random with fractions and magnitudes that round in every narrower
/// dtype (f32's full mantissa against bf16's 8 bits: round-to-nearest-even, not truncation);
/// for a float source also ±inf, NaN, overflow of f16 (1e5) and underflow (1e-9), unless the
/// destination is an integer (undefined in C++ and PyTorch).
fn cast_inputs(rng: &mut Rng, src: DType, dst: DType, n: usize) -> Vec<f64> {
    let mut v: Vec<f64> = (0..n)
        .map(|i| {
            let x = match (src.is_float(), dst.is_float(), i % 3) {
                (true, true, 0) => rng.uniform(-7e4, 7e4),
                (true, _, 0) => rng.uniform(-120.0, 120.0),
                (false, _, 0) => rng.int(-3000, 3000) as f64,
                _ => return sample(rng, src, 1, Domain::Any)[0],
            };
            round_to(src, x)
        })
        .collect();
    if src.is_float() && dst.is_float() {
        let sp = [f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1e5, -1e5, 1e-9, -1e-9, 65519.0, 65520.0];
        for (k, &x) in sp.iter().enumerate() {
            v[k] = round_to(src, x);
            v[n - 1 - k] = round_to(src, x);
        }
    }
    v
}

#[test]
fn casts_are_exact_on_every_path() -> Result<()> {
    let mut rng = Rng::new(54);
    let dtypes = [DType::F32, DType::BF16, DType::F16, DType::F64, DType::I32, DType::I64, DType::U8];
    for device in devices() {
        for src in dtypes {
            for dst in dtypes {
                if src == dst || (src == DType::U8 && dst != DType::F16) {
                    continue;
                }
                for (r, c, layout) in [(1, 4099, Layout::Contiguous), (37, 67, Layout::Transposed)] {
                    let what = format!("{src} → {dst} [{r}, {c}] {layout:?} on {device}");
                    let xv = cast_inputs(&mut rng, src, dst, r * c);
                    let x = laid_out(&xv, r, c, src, device, layout)?;
                    let y = expect_ok(x.to_dtype(dst), &what);
                    // A transposed tensor keeps its layout (PyTorch's `preserve_format`).
                    assert_eq!((y.dtype(), y.shape(), y.stride()), (dst, x.shape(), x.stride()), "{what}");
                    let want: Vec<f64> = xv.iter().map(|&v| round_to(dst, v)).collect();
                    assert_close(&values(&y)?, &want, "cast", dst, &what);
                    // Converted into a contiguous tensor: the transposing path.
                    let z = Tensor::zeros(x.shape(), dst, device)?;
                    expect_ok(z.copy_(&x, false), &what);
                    assert_close(&values(&z)?, &want, "cast", dst, &format!("{what}, into a contiguous tensor"));
                }
            }
        }
    }
    Ok(())
}
