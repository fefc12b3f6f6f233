//! Elementwise ops against a float64 reference, for every dtype, on the CPU and on the current
//! driver's device, with contiguous, transposed, strided and broadcast operands.

mod tensor_util;

use cudasem::{result_type, DType, Device, Error, Operand, Result, Scalar, Tensor};
use tensor_util::reference::{
    apply_binary, apply_unary, binary_reference as reference, out_dtype, unary_out, unary_reference, BINARY, UNARY,
};
use tensor_util::{
    assert_close, devices, expect_ok, laid_out, round_to, sample, tensor, values, Domain, Layout, Rng, LAYOUTS,
};

#[test]
fn binary_ops_match_the_f64_reference_for_every_dtype_and_layout() -> Result<()> {
    let (r, c) = (3, 4);
    let mut rng = Rng::new(1);
    for device in devices() {
        for dtype in DType::ALL {
            for layout in LAYOUTS {
                // rhs: full-size contiguous, a broadcast row [c], a broadcast column [r, 1].
                for rhs_shape in [vec![r, c], vec![c], vec![r, 1]] {
                    for op in BINARY {
                        let what = format!("{op} {dtype} {layout:?} lhs, rhs {rhs_shape:?}, on {device}");
                        let (da, db) =
                            if op == "pow" { (Domain::Positive, Domain::Exponent) } else { (Domain::Any, Domain::Any) };
                        let av = sample(&mut rng, dtype, r * c, da);
                        let bn: usize = rhs_shape.iter().product();
                        let bv = sample(&mut rng, dtype, bn, db);
                        let a = laid_out(&av, r, c, dtype, device, layout)?;
                        let b = tensor(&bv, &rhs_shape, dtype, device)?;
                        let result = apply_binary(op, &a, Operand::Tensor(&b));
                        if dtype == DType::Bool && (op == "sub" || op == "pow") {
                            assert_eq!(
                                result.unwrap_err(),
                                Error::UnsupportedDType { op, dtype: DType::Bool },
                                "{what}"
                            );
                            continue;
                        }
                        let out = expect_ok(result, &what);
                        assert_eq!(out.device(), a.device(), "{what}: the result lives with the operands");
                        assert_eq!(out.shape(), [r, c], "{what}");
                        assert_eq!(out.dtype(), out_dtype(op, dtype), "{what}");
                        let want: Vec<f64> = (0..r * c)
                            .map(|k| {
                                let (i, j) = (k / c, k % c);
                                let bk = match rhs_shape.as_slice() {
                                    [_, 1] => i,
                                    [_] => j,
                                    _ => k,
                                };
                                reference(op, av[k], bv[bk], dtype)
                            })
                            .collect();
                        assert_close(&values(&out)?, &want, op, out.dtype(), &what);
                    }
                }
            }
        }
    }
    Ok(())
}

/// `pow` of half types (and f32 beside them) over the bases and exponents where a fast form of
/// `x^y` could lose accuracy or special cases: bases next to 1 with exponents up to ±64 and past
/// them, tiny and huge bases, results that overflow and underflow, zero and negative bases
/// (integer and fractional exponents), infinities and NaN on either side; in a vectorized run
/// with a tail.
#[test]
fn pow_of_half_types_matches_the_reference_across_bases_and_exponents() -> Result<()> {
    let (inf, nan) = (f64::INFINITY, f64::NAN);
    #[rustfmt::skip]
    let specials: [(f64, f64); 20] = [
        (0.0, 2.0), (0.0, -1.0), (0.0, 0.0), (-2.0, 3.0), (-2.0, 2.0), (-2.0, 0.5), (-0.5, -3.0),
        (inf, 2.0), (inf, -2.0), (2.0, inf), (0.5, inf), (2.0, -inf), (1.0, nan), (nan, 0.0),
        (nan, 1.0), (3.0, nan), (1.0, inf), (1e4, 64.0), (1e-4, -64.0), (2.0, 100.0),
    ];
    let mut rng = Rng::new(54);
    for device in devices() {
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            let n = 4099;
            let (mut xv, mut yv) = (Vec::with_capacity(n), Vec::with_capacity(n));
            for i in 0..n {
                let (x, y) = match i % 4 {
                    // Next to 1, large exponents (some past the fast form's ±64).
                    0 => (1.0 + rng.uniform(-0.02, 0.02), rng.uniform(-200.0, 200.0)),
                    // Bases over many decades, exponents that keep most results finite.
                    1 => (10f64.powf(rng.uniform(-4.0, 4.0)), rng.uniform(-4.0, 4.0)),
                    2 => (rng.uniform(0.1, 10.0), rng.uniform(-64.0, 64.0)),
                    _ => (rng.uniform(0.25, 3.0), rng.uniform(-2.0, 2.0)),
                };
                xv.push(round_to(dtype, x));
                yv.push(round_to(dtype, y));
            }
            for (i, &(x, y)) in specials.iter().enumerate() {
                for at in [i, 2050 + i, n - specials.len() + i] {
                    (xv[at], yv[at]) = (round_to(dtype, x), round_to(dtype, y));
                }
            }
            let what = format!("pow of {dtype} on {device}");
            let (x, y) = (tensor(&xv, &[n], dtype, device)?, tensor(&yv, &[n], dtype, device)?);
            let out = expect_ok(apply_binary("pow", &x, Operand::Tensor(&y)), &what);
            let want: Vec<f64> = xv.iter().zip(&yv).map(|(&a, &b)| reference("pow", a, b, dtype)).collect();
            assert_close(&values(&out)?, &want, "pow", dtype, &what);
        }
    }
    Ok(())
}

#[test]
fn type_promotion_matches_pytorch() -> Result<()> {
    use DType::*;
    // (lhs dtype, lhs 0-dim?, rhs dtype, rhs 0-dim?, result dtype of add)
    let tensor_cases = [
        (I64, false, F32, false, F32),
        (U8, false, I32, false, I32),
        (F16, false, BF16, false, F32),
        (Bool, false, Bool, false, Bool),
        (I32, false, I64, false, I64),
        (Bool, false, U8, false, U8),
        (U8, false, I64, true, U8),   // a 0-dim int tensor does not widen an int tensor
        (I32, false, F64, true, F64), // a 0-dim float tensor makes an int tensor float (its own dtype)
        (F32, false, F64, true, F32), // … but does not widen a float tensor
        (I64, true, F16, true, F16),
    ];
    let mut rng = Rng::new(2);
    for device in devices() {
        for (da, za, db, zb, want) in tensor_cases {
            let what = format!(
                "{da}{} + {db}{} on {device}",
                if za { " (0-dim)" } else { "" },
                if zb { " (0-dim)" } else { "" }
            );
            let (sa, sb): (Vec<usize>, Vec<usize>) =
                (if za { vec![] } else { vec![5] }, if zb { vec![] } else { vec![5] });
            let av = sample(&mut rng, da, sa.iter().product(), Domain::Any);
            let bv = sample(&mut rng, db, sb.iter().product(), Domain::Any);
            let (a, b) = (tensor(&av, &sa, da, device)?, tensor(&bv, &sb, db, device)?);
            assert_eq!(result_type(&[(&a).into(), (&b).into()]), want, "{what}");
            let out = expect_ok(a.add(&b), &what);
            assert_eq!(out.dtype(), want, "{what}");
            let n = out.numel();
            let expect: Vec<f64> = (0..n).map(|k| reference("add", av[k % av.len()], bv[k % bv.len()], want)).collect();
            assert_close(&values(&out)?, &expect, "add", want, &what);
        }
        // Numbers are wrapped scalars: they choose the category, never the width.
        let scalar_cases: [(DType, Scalar, DType); 7] = [
            (I32, Scalar::Float(2.5), F32),
            (I64, Scalar::Float(0.5), F32),
            (F16, Scalar::Float(2.5), F16),
            (BF16, Scalar::Int(3), BF16),
            (I32, Scalar::Int(7), I32),
            (U8, Scalar::Int(200), U8),
            (Bool, Scalar::Int(1), I64),
        ];
        for (dtype, s, want) in scalar_cases {
            let what = format!("{dtype} tensor + {s:?} on {device}");
            let av = sample(&mut rng, dtype, 6, Domain::Any);
            let a = tensor(&av, &[2, 3], dtype, device)?;
            assert_eq!(result_type(&[(&a).into(), s.into()]), want, "{what}");
            for op in ["add", "mul", "sub", "gt", "div"] {
                if dtype == Bool && op == "sub" {
                    continue;
                }
                let out = expect_ok(apply_binary(op, &a, s.into()), &what);
                assert_eq!(out.dtype(), out_dtype(op, want), "{op}: {what}");
                let expect: Vec<f64> = av.iter().map(|&x| reference(op, x, s.to_f64(), want)).collect();
                let tol = if op == "gt" { op.to_owned() } else { format!("{op}_number") };
                assert_close(&values(&out)?, &expect, &tol, out.dtype(), &format!("{op}: {what}"));
            }
        }
    }
    Ok(())
}

#[test]
fn unary_ops_match_the_f64_reference_for_every_dtype() -> Result<()> {
    let mut rng = Rng::new(3);
    for device in devices() {
        for dtype in DType::ALL {
            for layout in [Layout::Contiguous, Layout::Transposed] {
                for op in UNARY {
                    let what = format!("{op} of {dtype} {layout:?} on {device}");
                    let domain = if ["log", "sqrt", "rsqrt"].contains(&op) { Domain::Positive } else { Domain::Any };
                    let xv = sample(&mut rng, dtype, 12, domain);
                    let x = laid_out(&xv, 3, 4, dtype, device, layout)?;
                    let result = apply_unary(op, &x);
                    let Some(out_dtype) = unary_out(op, dtype) else {
                        assert_eq!(result.unwrap_err(), Error::UnsupportedDType { op, dtype }, "{what}");
                        continue;
                    };
                    let out = expect_ok(result, &what);
                    assert_eq!(
                        (out.dtype(), out.shape(), out.device()),
                        (out_dtype, &[3usize, 4][..], x.device()),
                        "{what}"
                    );
                    let want: Vec<f64> = xv.iter().map(|&v| round_to(out_dtype, unary_reference(op, v))).collect();
                    assert_close(&values(&out)?, &want, op, out_dtype, &what);
                }
            }
        }
    }
    Ok(())
}

#[test]
fn casts_between_every_pair_of_dtypes_follow_pytorch() -> Result<()> {
    let mut rng = Rng::new(4);
    for device in devices() {
        for src in DType::ALL {
            for dst in DType::ALL {
                for layout in LAYOUTS {
                    let what = format!("{src} → {dst} ({layout:?}) on {device}");
                    let mut xv = sample(&mut rng, src, 8, Domain::Any);
                    if src.is_float() {
                        xv[0] = -1.75; // truncates toward zero: -1, and wraps to 255 as u8
                        xv[1] = 2.5;
                    }
                    let x = laid_out(&xv, 2, 4, src, device, layout)?;
                    let y = expect_ok(x.to_dtype(dst), &what);
                    assert_eq!((y.dtype(), y.shape(), y.device()), (dst, &[2usize, 4][..], x.device()), "{what}");
                    if src == dst {
                        assert!(y.shares_storage(&x), "{what}: converting to the same dtype returns the tensor");
                    } else if layout == Layout::Transposed {
                        // PyTorch's `preserve_format`: a dense permuted tensor keeps its strides.
                        assert_eq!(y.stride(), x.stride(), "{what}: a transposed tensor's layout is kept");
                    } else {
                        assert!(y.is_contiguous(), "{what}");
                    }
                    let want: Vec<f64> = xv.iter().map(|&v| round_to(dst, v)).collect();
                    assert_close(&values(&y)?, &want, "cast", dst, &what);
                }
            }
        }
    }
    Ok(())
}

#[test]
fn where_selects_broadcasts_and_promotes() -> Result<()> {
    let mut rng = Rng::new(5);
    for device in devices() {
        let cv = sample(&mut rng, DType::Bool, 12, Domain::Any);
        let cond = tensor(&cv, &[3, 4], DType::Bool, device)?;
        let av = sample(&mut rng, DType::I32, 4, Domain::Any);
        let a = tensor(&av, &[4], DType::I32, device)?; // broadcast row
        let bv = sample(&mut rng, DType::F16, 3, Domain::Any);
        let b = tensor(&bv, &[3, 1], DType::F16, device)?; // broadcast column
        let what = format!("where on {device}");
        let out = expect_ok(Tensor::where_cond(&cond, &a, &b), &what);
        assert_eq!((out.dtype(), out.shape()), (DType::F16, &[3usize, 4][..]), "{what}");
        let want: Vec<f64> =
            (0..12).map(|k| if cv[k] != 0.0 { round_to(DType::F16, av[k % 4]) } else { bv[k / 4] }).collect();
        assert_close(&values(&out)?, &want, "where", DType::F16, &what);
        let out = expect_ok(Tensor::where_cond(&cond, 1.5, &a), &what);
        assert_eq!(out.dtype(), DType::F32, "an int tensor and a float number give the default float");
        let want: Vec<f64> = (0..12).map(|k| if cv[k] != 0.0 { 1.5 } else { av[k % 4] }).collect();
        assert_close(&values(&out)?, &want, "where", DType::F32, &what);
        let not_bool = Tensor::where_cond(&a, &a, &a).unwrap_err();
        assert_eq!(not_bool, Error::DTypeMismatch { op: "where", expected: DType::Bool, found: DType::I32 });
    }
    Ok(())
}

#[test]
fn in_place_ops_write_through_views_and_refuse_lossy_casts() -> Result<()> {
    for device in devices() {
        let what = format!("in-place on {device}");
        let base = Tensor::arange(0, 12, 1, DType::F32, device)?.reshape([3, 4])?;
        let col = base.narrow(1, 1, 2)?; // [3, 2] strided view
        expect_ok(col.add_(100.0), &what);
        col.mul_(&Tensor::from_slice(&[1.0f32, -1.0], [2], device)?)?;
        col.sub_(1)?;
        col.div_(2.0)?;
        let f = |v: f32, j: usize| {
            if j == 1 || j == 2 {
                ((v + 100.0) * if j == 1 { 1.0 } else { -1.0 } - 1.0) / 2.0
            } else {
                v
            }
        };
        let want: Vec<f32> = (0..12).map(|k| f(k as f32, k % 4)).collect();
        assert_eq!(base.to_vec::<f32>()?, want, "{what}: the columns outside the view are untouched");

        let ints = Tensor::arange(1, 5, 1, DType::I64, device)?;
        ints.add_(&ints)?; // aliasing input and output
        ints.mul_(3)?;
        assert_eq!(ints.to_vec::<i64>()?, [6, 12, 18, 24], "{what}");
        assert_eq!(
            ints.add_(0.5).unwrap_err(),
            Error::CannotCast { op: "add_", from: DType::F32, to: DType::I64 },
            "a float result cannot be stored in an int tensor"
        );
        assert!(matches!(ints.div_(2), Err(Error::CannotCast { op: "div_", .. })), "true division gives floats");
        assert!(matches!(
            ints.add_(&Tensor::ones([2, 4], DType::I64, device)?),
            Err(Error::ShapeMismatch { op: "add_", .. })
        ));
        let expanded = Tensor::ones([1, 3], DType::F32, device)?.expand([2, 3])?;
        assert!(matches!(expanded.add_(1.0), Err(Error::InvalidArgument { op: "add_", .. })), "overlapping writes");

        let h = Tensor::zeros([2, 3], DType::F16, device)?;
        h.narrow(1, 0, 2)?.fill_(1.5)?;
        let back: Vec<f32> = h.to_vec::<half::f16>()?.into_iter().map(f32::from).collect();
        assert_eq!(back, [1.5, 1.5, 0.0, 1.5, 1.5, 0.0], "{what}: fill_ of a view");
    }
    Ok(())
}

#[test]
fn operators_return_results() -> Result<()> {
    for device in devices() {
        let what = format!("operators on {device}");
        let a = Tensor::from_slice(&[1.0f64, 2.0, 3.0], [3], device)?;
        let b = Tensor::from_slice(&[4.0f64, 5.0, 6.0], [3], device)?;
        let sum = expect_ok(&a + &b, &what);
        assert_eq!(sum.to_vec::<f64>()?, [5.0, 7.0, 9.0]);
        assert_eq!((&a - &b)?.to_vec::<f64>()?, [-3.0, -3.0, -3.0]);
        assert_eq!((&a * 2.0)?.to_vec::<f64>()?, [2.0, 4.0, 6.0]);
        assert_eq!((&b / &a)?.to_vec::<f64>()?, [4.0, 2.5, 2.0]);
        assert_eq!((-&a)?.to_vec::<f64>()?, [-1.0, -2.0, -3.0]);
        assert_eq!((a.clone() + b.clone())?.to_vec::<f64>()?, [5.0, 7.0, 9.0]);
        assert_eq!((&(&a + &b)? * &a)?.to_vec::<f64>()?, [5.0, 14.0, 27.0]);
        let bad = Tensor::ones([2], DType::F64, device)?;
        assert_eq!((&a + &bad).unwrap_err(), Error::ShapeMismatch { op: "add", lhs: vec![3], rhs: vec![2] });
        let on_cpu = Tensor::ones([3], DType::F64, Device::Cpu)?;
        if device != Device::Cpu {
            assert!(matches!(&a + &on_cpu, Err(Error::DeviceMismatch { .. })));
        }
    }
    Ok(())
}

/// Numbers on either side of `+ - * /`: on the right `f64`, `f32`, `i64`, `i32`; on the left
/// `f64` and `i64` (literals included); each against the float64 reference with the dtype PyTorch
/// gives `t op n` and `n op t`.
#[test]
fn numbers_on_either_side_of_an_operator_match_the_reference() -> Result<()> {
    let mut rng = Rng::new(31);
    for device in devices() {
        for dtype in DType::ALL {
            let av = sample(&mut rng, dtype, 6, Domain::Any);
            let t = tensor(&av, &[2, 3], dtype, device)?;
            let (x32, n32) = (rng.uniform(-3.0, 3.0) as f32, rng.int(-5, 5) as i32);
            let (x64, n64) = (rng.uniform(-3.0, 3.0), rng.int(-5, 5));
            let numbers = [Scalar::from(x64), Scalar::from(x32), Scalar::from(n64), Scalar::from(n32)];
            for op in ["add", "sub", "mul", "div"] {
                for (k, &n) in numbers.iter().enumerate() {
                    let common = result_type(&[Operand::Tensor(&t), Operand::Scalar(n)]);
                    if op == "sub" && common.is_bool() {
                        continue; // refused like PyTorch's, tested elsewhere
                    }
                    let right = match (op, k) {
                        ("add", 0) => &t + x64,
                        ("add", 1) => &t + x32,
                        ("add", 2) => &t + n64,
                        ("add", _) => t.clone() + n32,
                        ("sub", 0) => &t - x64,
                        ("sub", 1) => &t - x32,
                        ("sub", 2) => t.clone() - n64,
                        ("sub", _) => &t - n32,
                        ("mul", 0) => t.clone() * x64,
                        ("mul", 1) => &t * x32,
                        ("mul", 2) => &t * n64,
                        ("mul", _) => &t * n32,
                        (_, 0) => &t / x64,
                        (_, 1) => t.clone() / x32,
                        (_, 2) => &t / n64,
                        (_, _) => &t / n32,
                    };
                    let left = match (op, k) {
                        ("add", 0) => Some(x64 + &t),
                        ("add", 2) => Some(n64 + t.clone()),
                        ("sub", 0) => Some(x64 - &t),
                        ("sub", 2) => Some(n64 - &t),
                        ("mul", 0) => Some(x64 * t.clone()),
                        ("mul", 2) => Some(n64 * &t),
                        ("div", 0) => Some(x64 / &t),
                        ("div", 2) => Some(n64 / t.clone()),
                        _ => None,
                    };
                    let b = n.to_f64();
                    let what = format!("{dtype} tensor {op} {n:?} on {device}");
                    let want_dtype = out_dtype(op, common);
                    let got = right?;
                    assert_eq!(got.dtype(), want_dtype, "{what}");
                    let want: Vec<f64> = av.iter().map(|&a| reference(op, a, b, common)).collect();
                    let tol = format!("{op}_number");
                    assert_close(&values(&got)?, &want, &tol, want_dtype, &what);
                    if let Some(got) = left {
                        let got = got?;
                        let what = format!("{n:?} {op} {dtype} tensor on {device}");
                        assert_eq!((got.dtype(), got.shape()), (want_dtype, t.shape()), "{what}");
                        let want: Vec<f64> = av.iter().map(|&a| reference(op, b, a, common)).collect();
                        assert_close(&values(&got)?, &want, &tol, want_dtype, &what);
                    }
                }
            }
        }
        // Literals infer on both sides, also when the result is not bound first.
        let t = Tensor::from_slice(&[1.0f32, 2.0, 4.0], [3], device)?;
        assert_eq!((2.0 * &t).unwrap().to_vec::<f32>()?, [2.0, 4.0, 8.0]);
        assert_eq!((1 - &t).unwrap().to_vec::<f32>()?, [0.0, -1.0, -3.0]);
        assert_eq!((&t * 2).unwrap().to_vec::<f32>()?, [2.0, 4.0, 8.0]);
        assert_eq!((1.0 / &t)?.to_vec::<f32>()?, [1.0, 0.5, 0.25]);
        let bools = Tensor::from_slice(&[true, false], [2], device)?;
        assert_eq!((1 - &bools)?.to_vec::<i64>()?, [0, 1], "1 - bool tensor is int64, as in PyTorch");
        assert!((1.0 - &Tensor::ones([2], DType::F32, Device::Cpu)?.reshape([2])?).is_ok());
    }
    Ok(())
}

/// Division by zero as PyTorch's true division does it for every dtype: `inf` with the sign of
/// the numerator, NaN for `0 / 0`; an integer tensor divides into the default float type.
#[test]
fn division_by_zero_follows_pytorch() -> Result<()> {
    for device in devices() {
        for dtype in DType::ALL {
            let what = format!("{dtype} / 0 on {device}");
            let vals: &[f64] = if dtype == DType::U8 || dtype == DType::Bool { &[1.0, 0.0] } else { &[3.0, -2.0, 0.0] };
            let t = tensor(vals, &[vals.len()], dtype, device)?;
            let out = if dtype.is_float() { dtype } else { DType::F32 };
            let signs = |num: &[f64]| -> Vec<f64> {
                num.iter().map(|&x| if x == 0.0 { f64::NAN } else { x.signum() * f64::INFINITY }).collect()
            };
            let check = |got: Tensor, want: Vec<f64>, how: &str| -> Result<()> {
                assert_eq!(got.dtype(), out, "{what} ({how})");
                let g = values(&got)?;
                let same = g.iter().zip(&want).all(|(a, b)| a == b || (a.is_nan() && b.is_nan()));
                assert!(same && g.len() == want.len(), "{what} ({how}): {g:?} vs {want:?}");
                Ok(())
            };
            let want = signs(vals);
            check((&t / 0)?, want.clone(), "t / 0")?;
            check((&t / 0.0)?, want.clone(), "t / 0.0")?;
            check(t.div(&Tensor::zeros([1], dtype, device)?)?, want, "t / zeros")?;
            if dtype != DType::Bool {
                // A number over a tensor holding zeros: 1 / 0 = inf for the zero elements.
                let got = values(&(1 / &t)?)?;
                assert_eq!(got.last(), Some(&f64::INFINITY), "{what} (1 / t)");
            }
        }
    }
    Ok(())
}

/// An in-place op whose input partly overlaps what it writes (a shifted view of the same storage,
/// a broadcast row of it) computes as if the input were copied first — on every device, so that a
/// GPU writing in parallel never reads elements it already overwrote. The same view as input and
/// output (`x.add_(&x)`) is elementwise and needs no copy.
#[test]
fn in_place_ops_read_partly_overlapping_inputs_as_they_were() -> Result<()> {
    // Enough elements for hundreds of blocks on a GPU (a warp or block boundary every 32 or 256).
    let n = (1 << 16) + 3;
    for device in devices() {
        let what = format!("{device:?}");
        // Writing behind the read (each element takes its left neighbour's old value) and ahead of it.
        for (dst_start, src_start) in [(1, 0), (0, 1)] {
            let x = Tensor::rand([n], DType::F32, device)?;
            let old: Vec<f32> = x.to_vec()?;
            let (dst, src) = (x.narrow(0, dst_start, n - 1)?, x.narrow(0, src_start, n - 1)?);
            dst.add_(&src)?;
            let mut want = old.clone();
            for i in 0..n - 1 {
                want[i + dst_start] = old[i + dst_start] + old[i + src_start];
            }
            assert!(x.to_vec::<f32>()? == want, "{what}: add_ from a view shifted by {src_start} - {dst_start}");

            let y = Tensor::rand([n], DType::F32, device)?;
            let old: Vec<f32> = y.to_vec()?;
            y.narrow(0, dst_start, n - 1)?.copy_(&y.narrow(0, src_start, n - 1)?, false)?;
            let mut want = old.clone();
            want[dst_start..dst_start + n - 1].copy_from_slice(&old[src_start..src_start + n - 1]);
            assert!(y.to_vec::<f32>()? == want, "{what}: copy_ from a view shifted by {src_start} - {dst_start}");
        }
        // A row broadcast over the matrix it belongs to: every row adds row 0 as it was.
        let (r, c) = (256, 256);
        let z = Tensor::rand([r, c], DType::F32, device)?;
        let old: Vec<f32> = z.to_vec()?;
        z.add_(&z.narrow(0, 0, 1)?)?;
        let want: Vec<f32> = (0..r * c).map(|k| old[k] + old[k % c]).collect();
        assert!(z.to_vec::<f32>()? == want, "{what}: add_ of its own broadcast first row");
        // The same view in and out: no copy, and the plain elementwise result.
        let w = Tensor::rand([n], DType::F32, device)?;
        let old: Vec<f32> = w.to_vec()?;
        w.add_(&w)?;
        assert!(w.to_vec::<f32>()? == old.iter().map(|v| v + v).collect::<Vec<_>>(), "{what}: x.add_(&x)");
    }
    Ok(())
}

/// As PyTorch's `preserve_format`: a unary op of a dense but permuted tensor (a transpose) keeps
/// its strides, of a tensor with gaps (a slice) gives a contiguous one; the values are the same.
#[test]
fn unary_ops_of_permuted_tensors_keep_their_layout() -> Result<()> {
    for device in ["cpu", "cuda"] {
        let base = Tensor::randn([5, 7, 3], DType::F32, device)?;
        let slice = base.slice(1, 1..6)?;
        for (x, keeps) in [(base.permute(&[2, 0, 1])?, true), (base.transpose(0, 2)?, true), (slice, false)] {
            let y = x.exp()?;
            if keeps {
                assert_eq!(y.stride(), x.stride(), "{device}: {:?}", x.shape());
            } else {
                assert!(y.is_contiguous(), "{device}: a slice's result is contiguous");
            }
            let (xv, yv) = (x.to_vec::<f32>()?, y.to_vec::<f32>()?);
            assert_eq!(xv.len(), yv.len());
            for (a, b) in xv.iter().zip(&yv) {
                let want = (*a as f64).exp();
                assert!((*b as f64 - want).abs() <= 1e-6 * want, "{device}: exp({a}) = {b}, want {want}");
            }
        }
    }
    Ok(())
}
