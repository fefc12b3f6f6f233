//! Reductions, softmax and matrix products against float64 references, for every dtype, on the
//! CPU and the current driver's device, with contiguous and permuted inputs.

mod tensor_util;

use cudasem::{DType, Device, Error, Result, Tensor};
use tensor_util::{
    assert_close, assert_sums_close, devices, expect_ok, round_to, sample, tensor, tolerance, values, Domain, Rng,
};

const SHAPE: [usize; 3] = [2, 3, 4];

/// A `[2, 3, 4]` tensor holding `vals` (row-major), contiguous or as a permuted view of a
/// `[4, 3, 2]` tensor.
fn shaped(vals: &[f64], dtype: DType, device: Device, permuted: bool) -> Result<Tensor> {
    if !permuted {
        return tensor(vals, &SHAPE, dtype, device);
    }
    let mut rev = vec![0.0; 24];
    for (k, &v) in vals.iter().enumerate() {
        let (i, j, l) = (k / 12, (k / 4) % 3, k % 4);
        rev[l * 6 + j * 2 + i] = v;
    }
    let t = tensor(&rev, &[4, 3, 2], dtype, device)?.permute(&[2, 1, 0])?;
    assert!(!t.is_contiguous());
    Ok(t)
}

/// Groups of `vals` (a `[2, 3, 4]` row-major tensor) reduced over `dims`, in output order; each
/// group in row-major order of the reduced coordinates.
fn groups(vals: &[f64], dims: &[usize]) -> Vec<Vec<f64>> {
    let kept: Vec<usize> = (0..3).filter(|d| !dims.contains(d)).collect();
    let mut out: Vec<(Vec<usize>, Vec<f64>)> = Vec::new();
    for (k, &v) in vals.iter().enumerate() {
        let idx = [k / 12, (k / 4) % 3, k % 4];
        let key: Vec<usize> = kept.iter().map(|&d| idx[d]).collect();
        match out.iter_mut().find(|(g, _)| *g == key) {
            Some((_, g)) => g.push(v),
            None => out.push((key, vec![v])),
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out.into_iter().map(|(_, g)| g).collect()
}

fn first_index(g: &[f64], max: bool) -> f64 {
    let mut best = 0;
    for (i, &v) in g.iter().enumerate() {
        if (max && v > g[best]) || (!max && v < g[best]) {
            best = i;
        }
    }
    best as f64
}

#[test]
fn reductions_match_the_f64_reference_for_every_dtype() -> Result<()> {
    let dim_sets: [&[isize]; 5] = [&[], &[0], &[-1], &[0, 2], &[1]];
    let mut rng = Rng::new(10);
    for device in devices() {
        for dtype in DType::ALL {
            for permuted in [false, true] {
                let xv = sample(&mut rng, dtype, 24, Domain::Any);
                let x = shaped(&xv, dtype, device, permuted)?;
                for dims in dim_sets {
                    let mut nd: Vec<usize> =
                        dims.iter().map(|&d| if d < 0 { (d + 3) as usize } else { d as usize }).collect();
                    if nd.is_empty() {
                        nd = vec![0, 1, 2]; // no dims: all of them
                    }
                    let gs = groups(&xv, &nd);
                    for keepdim in [false, true] {
                        let shape: Vec<usize> = (0..3)
                            .filter_map(|d| match (nd.contains(&d), keepdim) {
                                (true, true) => Some(1),
                                (true, false) => None,
                                (false, _) => Some(SHAPE[d]),
                            })
                            .collect();
                        for op in ["sum", "mean", "amax", "amin"] {
                            let what = format!(
                                "{op} over {dims:?} (keepdim {keepdim}) of {dtype}, permuted {permuted}, on {device}"
                            );
                            let result = match op {
                                "sum" => x.sum(dims, keepdim),
                                "mean" => x.mean(dims, keepdim),
                                "amax" => x.amax(dims, keepdim),
                                _ => x.amin(dims, keepdim),
                            };
                            if op == "mean" && !dtype.is_float() {
                                assert_eq!(
                                    result.unwrap_err(),
                                    Error::UnsupportedDType { op: "mean", dtype },
                                    "{what}"
                                );
                                continue;
                            }
                            let out = expect_ok(result, &what);
                            let want_dtype = if op == "sum" && !dtype.is_float() { DType::I64 } else { dtype };
                            assert_eq!((out.dtype(), out.shape()), (want_dtype, shape.as_slice()), "{what}");
                            let want: Vec<f64> = gs
                                .iter()
                                .map(|g| {
                                    let v = match op {
                                        "sum" => g.iter().sum(),
                                        "mean" => g.iter().sum::<f64>() / g.len() as f64,
                                        "amax" => g.iter().copied().fold(f64::MIN, f64::max),
                                        _ => g.iter().copied().fold(f64::MAX, f64::min),
                                    };
                                    round_to(want_dtype, v)
                                })
                                .collect();
                            let got = values(&out)?;
                            if op == "sum" || op == "mean" {
                                let per = if op == "mean" { gs[0].len() as f64 } else { 1.0 };
                                let abs: Vec<f64> =
                                    gs.iter().map(|g| g.iter().map(|v| v.abs()).sum::<f64>() / per).collect();
                                assert_sums_close(&got, &want, &abs, gs[0].len(), op, want_dtype, &what);
                            } else {
                                assert_close(&got, &want, op, want_dtype, &what);
                            }
                        }
                    }
                }
                for dim in [None, Some(0), Some(-1), Some(1)] {
                    for (op, max) in [("argmax", true), ("argmin", false)] {
                        let what = format!("{op} over {dim:?} of {dtype}, permuted {permuted}, on {device}");
                        let result = if max { x.argmax(dim, false) } else { x.argmin(dim, false) };
                        if dtype == DType::Bool {
                            assert_eq!(result.unwrap_err(), Error::UnsupportedDType { op, dtype }, "{what}");
                            continue;
                        }
                        let out = expect_ok(result, &what);
                        assert_eq!(out.dtype(), DType::I64, "{what}");
                        let nd: Vec<usize> = match dim {
                            None => vec![0, 1, 2],
                            Some(d) => vec![if d < 0 { (d + 3) as usize } else { d as usize }],
                        };
                        let want: Vec<f64> = groups(&xv, &nd).iter().map(|g| first_index(g, max)).collect();
                        assert_eq!(values(&out)?, want, "{what}");
                    }
                }
            }
        }
    }
    Ok(())
}

/// `max` / `min` along a dim give values and the index of the first extreme; `max_all` /
/// `min_all` reduce everything (PyTorch's `t.max()`), against a float64 reference on random data
/// with many ties (few distinct values), for every dtype and layout.
#[test]
fn max_and_min_along_a_dim_give_values_and_first_indices() -> Result<()> {
    let mut rng = Rng::new(12);
    for device in devices() {
        for dtype in DType::ALL {
            for (permuted, ties) in [(false, false), (true, false), (false, true), (true, true)] {
                let xv: Vec<f64> = if ties {
                    (0..24).map(|_| round_to(dtype, rng.int(0, 2) as f64)).collect()
                } else {
                    sample(&mut rng, dtype, 24, Domain::Any)
                };
                let x = shaped(&xv, dtype, device, permuted)?;
                for dim in [0isize, 1, -1] {
                    let nd = if dim < 0 { (dim + 3) as usize } else { dim as usize };
                    let gs = groups(&xv, &[nd]);
                    for keepdim in [false, true] {
                        let mut shape = SHAPE.to_vec();
                        if keepdim {
                            shape[nd] = 1;
                        } else {
                            shape.remove(nd);
                        }
                        for max in [true, false] {
                            let what = format!(
                                "{} along {dim} (keepdim {keepdim}) of {dtype}, permuted {permuted}, ties {ties}, on {device}",
                                if max { "max" } else { "min" }
                            );
                            let result = if max { x.max(dim, keepdim) } else { x.min(dim, keepdim) };
                            let (v, i) = expect_ok(result, &what);
                            assert_eq!((v.dtype(), v.shape()), (dtype, shape.as_slice()), "{what}");
                            assert_eq!((i.dtype(), i.shape()), (DType::I64, shape.as_slice()), "{what}");
                            let want_i: Vec<f64> = gs.iter().map(|g| first_index(g, max)).collect();
                            let want_v: Vec<f64> = gs.iter().zip(&want_i).map(|(g, &k)| g[k as usize]).collect();
                            assert_eq!(values(&v)?, want_v, "{what}: values");
                            assert_eq!(values(&i)?, want_i, "{what}: indices (first on ties)");
                            let amax = if max { x.amax(&[dim], keepdim)? } else { x.amin(&[dim], keepdim)? };
                            assert_eq!(values(&amax)?, want_v, "{what}: amax/amin agree");
                        }
                    }
                }
                let top = xv.iter().copied().fold(f64::MIN, f64::max);
                let bottom = xv.iter().copied().fold(f64::MAX, f64::min);
                let (hi, lo) = (x.max_all()?, x.min_all()?);
                assert_eq!((hi.dim(), hi.dtype()), (0, dtype));
                assert_eq!((values(&hi)?, values(&lo)?), (vec![top], vec![bottom]), "{dtype} on {device}");
                assert_eq!(values(&x.amax(&[], false)?)?, vec![top], "amax over no dims is over all");
            }
        }
        let x = Tensor::ones([2, 3], DType::F32, device)?;
        assert!(matches!(x.max(2, false), Err(Error::InvalidDim { op: "max", dim: 2, ndim: 2 })));
        assert!(matches!(x.min(-3, false), Err(Error::InvalidDim { op: "min", dim: -3, ndim: 2 })));
    }
    Ok(())
}

#[test]
fn reductions_of_empty_and_0_dim_tensors() -> Result<()> {
    for device in devices() {
        let what = format!("empty reductions on {device}");
        let empty = Tensor::zeros([0, 3], DType::F32, device)?;
        let s = expect_ok(empty.sum(&[0], false), &what);
        assert_eq!((s.shape(), s.to_vec::<f32>()?), (&[3usize][..], vec![0.0; 3]), "an empty sum is 0");
        assert!(empty.mean_all()?.item::<f32>()?.is_nan(), "an empty mean is NaN");
        assert!(matches!(empty.amax(&[0], false), Err(Error::InvalidArgument { op: "amax", .. })));
        assert!(matches!(empty.max(0, false), Err(Error::InvalidArgument { op: "max", .. })));
        assert!(matches!(empty.min_all(), Err(Error::InvalidArgument { op: "min", .. })));
        assert!(matches!(empty.argmax(None, false), Err(Error::InvalidArgument { op: "argmax", .. })));
        assert_eq!(empty.amax(&[1], false)?.shape(), [0], "reducing a non-empty dim of an empty tensor is fine");
        let (v, i) = empty.max(1, true)?;
        assert_eq!((v.shape(), i.shape(), i.dtype()), (&[0usize, 1][..], &[0usize, 1][..], DType::I64));
        let scalar = Tensor::full([], 2.5, DType::F64, device)?;
        assert_eq!(scalar.sum_all()?.item::<f64>()?, 2.5);
        assert_eq!(scalar.sum(&[0], true)?.shape(), [0usize; 0], "a 0-dim tensor reduces over dim 0 as itself");
        assert_eq!(scalar.softmax(0)?.item::<f64>()?, 1.0);
        let (v, i) = scalar.max(0, false)?;
        assert_eq!((v.item::<f64>()?, i.item::<i64>()?, i.dim()), (2.5, 0, 0), "torch.tensor(2.5).max(0)");
        assert_eq!(scalar.max_all()?.item::<f64>()?, 2.5);
        let nan = Tensor::from_slice(&[1.0f32, f32::NAN, 3.0], [3], device)?;
        assert!(nan.max_all()?.item::<f32>()?.is_nan(), "NaN propagates through max");
        assert_eq!(nan.argmax(None, false)?.item::<i64>()?, 1, "argmax points at the NaN");
        let (v, i) = nan.min(0, false)?;
        assert!(v.item::<f32>()?.is_nan() && i.item::<i64>()? == 1, "min along a dim points at the NaN");
        let bools = Tensor::from_slice(&[true, false, true, true], [4], device)?;
        assert_eq!(bools.sum_all()?.item::<i64>()?, 3, "a bool sum counts, into int64");
        let (v, i) = bools.min(0, true)?;
        assert_eq!((v.to_vec::<bool>()?, i.to_vec::<i64>()?), (vec![false], vec![1]), "bool max/min take indices");
        assert_eq!(bools.max(-1, false)?.1.item::<i64>()?, 0);
    }
    Ok(())
}

#[test]
fn softmax_and_log_softmax_match_the_reference() -> Result<()> {
    let mut rng = Rng::new(11);
    for device in devices() {
        for dtype in DType::ALL {
            let xv = sample(&mut rng, dtype, 24, Domain::Any);
            let x = shaped(&xv, dtype, device, true)?;
            for dim in [0isize, 1, -1] {
                for log in [false, true] {
                    let op = if log { "log_softmax" } else { "softmax" };
                    let what = format!("{op} over {dim} of {dtype} on {device}");
                    let result = if log { x.log_softmax(dim) } else { x.softmax(dim) };
                    if !dtype.is_float() {
                        assert_eq!(result.unwrap_err(), Error::UnsupportedDType { op, dtype }, "{what}");
                        continue;
                    }
                    let out = expect_ok(result, &what);
                    assert_eq!((out.dtype(), out.shape()), (dtype, &SHAPE[..]), "{what}");
                    let d = if dim < 0 { (dim + 3) as usize } else { dim as usize };
                    let want: Vec<f64> = (0..24)
                        .map(|k| {
                            let idx = [k / 12, (k / 4) % 3, k % 4];
                            let strides = [12, 4, 1];
                            let base = k - idx[d] * strides[d];
                            let row: Vec<f64> = (0..SHAPE[d]).map(|i| xv[base + i * strides[d]]).collect();
                            let total: f64 = row.iter().map(|v| v.exp()).sum();
                            let v = if log { xv[k] - total.ln() } else { xv[k].exp() / total };
                            round_to(dtype, v)
                        })
                        .collect();
                    assert_close(&values(&out)?, &want, op, dtype, &what);
                }
            }
        }
        let wide = Tensor::from_slice(&[1000.0f32, 0.0, -1000.0], [3], device)?;
        let s = expect_ok(wide.softmax(0), "stable softmax");
        assert_eq!(s.to_vec::<f32>()?, [1.0, 0.0, 0.0], "softmax is computed stably");
        assert_eq!(wide.log_softmax(0)?.to_vec::<f32>()?, [0.0, -1000.0, -2000.0]);
    }
    Ok(())
}

/// The f64 reference of `a @ b` for row-major `[batch, m, k]` and `[batch, k, n]` values, and
/// the sum of `|a||b|` per element (the scale of rounding errors).
fn matmul_reference(a: &[f64], b: &[f64], batch: usize, m: usize, k: usize, n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut out = vec![0.0; batch * m * n];
    let mut scale = vec![0.0; batch * m * n];
    for z in 0..batch {
        for i in 0..m {
            for j in 0..n {
                for l in 0..k {
                    let (x, y) = (a[z * m * k + i * k + l], b[z * k * n + l * n + j]);
                    out[z * m * n + i * n + j] += x * y;
                    scale[z * m * n + i * n + j] += (x * y).abs();
                }
            }
        }
    }
    (out, scale)
}

#[track_caller]
fn assert_matmul(got: &Tensor, want: &(Vec<f64>, Vec<f64>), what: &str) -> Result<()> {
    let g = values(got)?;
    let (rtol, atol) = tolerance("matmul", got.dtype());
    for (i, (&x, (&w, &s))) in g.iter().zip(want.0.iter().zip(&want.1)).enumerate() {
        assert!((x - w).abs() <= rtol * s + atol, "{what}: element {i} is {x}, want {w}");
    }
    assert_eq!(g.len(), want.0.len(), "{what}");
    Ok(())
}

#[test]
fn matmul_and_bmm_match_the_reference() -> Result<()> {
    let mut rng = Rng::new(12);
    for device in devices() {
        for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
            let what = format!("matmul of {dtype} on {device}");
            // 2-D, with a transposed (non-contiguous) right operand.
            let (m, k, n) = (3, 5, 4);
            let av = sample(&mut rng, dtype, m * k, Domain::Any);
            let bv = sample(&mut rng, dtype, k * n, Domain::Any);
            let a = tensor(&av, &[m, k], dtype, device)?;
            let bt: Vec<f64> = (0..n).flat_map(|j| (0..k).map(|l| bv[l * n + j]).collect::<Vec<_>>()).collect();
            let b = tensor(&bt, &[n, k], dtype, device)?.t()?;
            let c = expect_ok(a.matmul(&b), &what);
            assert_eq!((c.shape(), c.dtype(), c.device()), (&[m, n][..], dtype, a.device()), "{what}");
            assert_matmul(&c, &matmul_reference(&av, &bv, 1, m, k, n), &what)?;

            // bmm: [2, m, k] @ [2, k, n].
            let av = sample(&mut rng, dtype, 2 * m * k, Domain::Any);
            let bv = sample(&mut rng, dtype, 2 * k * n, Domain::Any);
            let (a3, b3) = (tensor(&av, &[2, m, k], dtype, device)?, tensor(&bv, &[2, k, n], dtype, device)?);
            let c = a3.bmm(&b3)?;
            assert_eq!(c.shape(), [2, m, n]);
            assert_matmul(&c, &matmul_reference(&av, &bv, 2, m, k, n), &format!("bmm: {what}"))?;

            // Broadcast batch dims: [2, 1, m, k] @ [3, k, n] → [2, 3, m, n].
            let a4 = tensor(&av, &[2, 1, m, k], dtype, device)?;
            let bv3 = sample(&mut rng, dtype, 3 * k * n, Domain::Any);
            let b4 = tensor(&bv3, &[3, k, n], dtype, device)?;
            let c = a4.matmul(&b4)?;
            assert_eq!(c.shape(), [2, 3, m, n], "{what}");
            let a_rep: Vec<f64> = (0..6).flat_map(|z| av[(z / 3) * m * k..(z / 3 + 1) * m * k].to_vec()).collect();
            let b_rep: Vec<f64> = (0..6).flat_map(|z| bv3[(z % 3) * k * n..(z % 3 + 1) * k * n].to_vec()).collect();
            assert_matmul(&c, &matmul_reference(&a_rep, &b_rep, 6, m, k, n), &format!("broadcast: {what}"))?;

            // Vectors: dot, vector @ matrix, matrix @ vector.
            let v = tensor(&av[..k], &[k], dtype, device)?;
            let w = tensor(&bv[..k], &[k], dtype, device)?;
            let dot = v.matmul(&w)?;
            assert_eq!(dot.shape(), [0usize; 0], "a dot product is 0-dim");
            assert_matmul(&dot, &matmul_reference(&av[..k], &bv[..k], 1, 1, k, 1), &what)?;
            let bmat = tensor(&bv[..k * n], &[k, n], dtype, device)?;
            let vm = v.matmul(&bmat)?;
            assert_eq!(vm.shape(), [n]);
            assert_matmul(&vm, &matmul_reference(&av[..k], &bv[..k * n], 1, 1, k, n), &what)?;
            let amat = tensor(&av[..m * k], &[m, k], dtype, device)?;
            let mv = amat.matmul(&w)?;
            assert_eq!(mv.shape(), [m]);
            assert_matmul(&mv, &matmul_reference(&av[..m * k], &bv[..k], 1, m, k, 1), &what)?;
        }
    }
    Ok(())
}

/// A row vector times a matrix (a decode step's `x @ w`: on the CUDA driver its own kernels for
/// half-type row-major and any column-major weight with aligned rows, cuBLASLt otherwise): rows
/// split over blocks or not, a
/// last tile of columns cut short, `x` as a 1-D tensor and as a strided view, the weight as a
/// slice of a wider matrix (a row stride past its width), at an unaligned offset, and transposed
/// (nn.Linear's `x @ w.t()`).
#[test]
fn vector_matrix_products_match_the_reference() -> Result<()> {
    let mut rng = Rng::new(13);
    for device in devices() {
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            for (k, n) in [(64, 8), (300, 264), (2048, 512), (520, 4096)] {
                let what = format!("[1, {k}] @ [{k}, {n}] of {dtype} on {device}");
                let xv = sample(&mut rng, dtype, k, Domain::Any);
                // The weight's rows hold 8 more columns than it uses.
                let wide = n + 8;
                let wv = sample(&mut rng, dtype, k * wide, Domain::Any);
                let wmat = tensor(&wv, &[k, wide], dtype, device)?;
                let dense: Vec<f64> = (0..k).flat_map(|l| wv[l * wide..l * wide + n].to_vec()).collect();
                let want = matmul_reference(&xv, &dense, 1, 1, k, n);
                let x = tensor(&xv, &[1, k], dtype, device)?;
                let w = wmat.narrow(1, 0, n)?;
                assert_matmul(&expect_ok(x.matmul(&w), &what), &want, &what)?;
                let v = tensor(&xv, &[k], dtype, device)?;
                let y = expect_ok(v.matmul(&w), &what);
                assert_eq!(y.shape(), [n], "{what}");
                assert_matmul(&y, &want, &format!("1-D x: {what}"))?;
                // x as every other element of a longer row.
                let spread: Vec<f64> = xv.iter().flat_map(|&e| [e, 0.5]).collect();
                let xs = tensor(&spread, &[1, k, 2], dtype, device)?.narrow(2, 0, 1)?.reshape([1, k as isize])?;
                assert_eq!(xs.stride()[1], 2, "{what}: x is a strided view");
                assert_matmul(&expect_ok(xs.matmul(&w), &what), &want, &format!("strided x: {what}"))?;
                // The weight one column in: not 16-byte aligned.
                let shifted: Vec<f64> = (0..k).flat_map(|l| wv[l * wide + 1..l * wide + 1 + n].to_vec()).collect();
                let w1 = wmat.narrow(1, 1, n)?;
                let want1 = matmul_reference(&xv, &shifted, 1, 1, k, n);
                assert_matmul(&expect_ok(x.matmul(&w1), &what), &want1, &format!("unaligned w: {what}"))?;
                // nn.Linear's `x @ w.t()`: the weight column-major, its columns 8 elements apart
                // more than they hold; with a strided x too.
                let lv = sample(&mut rng, dtype, n * (k + 8), Domain::Any);
                let wt = tensor(&lv, &[n, k + 8], dtype, device)?.narrow(1, 0, k)?.t()?;
                let dense: Vec<f64> =
                    (0..k).flat_map(|l| (0..n).map(|j| lv[j * (k + 8) + l]).collect::<Vec<_>>()).collect();
                let want = matmul_reference(&xv, &dense, 1, 1, k, n);
                assert_matmul(&expect_ok(x.matmul(&wt), &what), &want, &format!("x @ w.t(): {what}"))?;
                assert_matmul(&expect_ok(xs.matmul(&wt), &what), &want, &format!("strided x @ w.t(): {what}"))?;
            }
        }
    }
    Ok(())
}

#[test]
fn matmul_errors_are_typed() -> Result<()> {
    for device in devices() {
        let a = Tensor::ones([2, 3], DType::F32, device)?;
        let b = Tensor::ones([4, 5], DType::F32, device)?;
        let e = a.matmul(&b).unwrap_err();
        assert_eq!(e, Error::MatmulShapeMismatch { op: "matmul", lhs: vec![2, 3], rhs: vec![4, 5] });
        assert!(e.to_string().contains("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"), "{e}");
        let v = Tensor::ones([4], DType::F32, device)?;
        assert!(
            matches!(a.matmul(&v), Err(Error::MatmulShapeMismatch { lhs, rhs, .. }) if lhs == [2, 3] && rhs == [4])
        );
        let ints = Tensor::ones([3, 2], DType::I64, device)?;
        assert_eq!(ints.matmul(&ints.t()?).unwrap_err(), Error::UnsupportedDType { op: "matmul", dtype: DType::I64 });
        let f64s = Tensor::ones([3, 2], DType::F64, device)?;
        assert_eq!(
            a.matmul(&f64s).unwrap_err(),
            Error::DTypeMismatch { op: "matmul", expected: DType::F32, found: DType::F64 }
        );
        let scalar = Tensor::ones([], DType::F32, device)?;
        assert!(matches!(scalar.matmul(&a), Err(Error::InvalidArgument { op: "matmul", .. })));
        let b3 = Tensor::ones([2, 3, 4], DType::F32, device)?;
        assert!(matches!(a.bmm(&b3), Err(Error::InvalidShape { op: "bmm", .. })));
        let c3 = Tensor::ones([3, 4, 2], DType::F32, device)?;
        assert!(matches!(b3.bmm(&c3), Err(Error::ShapeMismatch { op: "bmm", .. })), "bmm does not broadcast batches");
        let d3 = Tensor::ones([2, 5, 2], DType::F32, device)?;
        assert!(matches!(b3.bmm(&d3), Err(Error::MatmulShapeMismatch { op: "bmm", .. })));
        let batch_a = Tensor::ones([2, 2, 3], DType::F32, device)?;
        let batch_b = Tensor::ones([3, 3, 2], DType::F32, device)?;
        assert!(matches!(batch_a.matmul(&batch_b), Err(Error::ShapeMismatch { op: "matmul", .. })));
    }
    Ok(())
}
