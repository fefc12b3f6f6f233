//! Reductions (`sum`, `mean`, `amax`, `amin`, `argmax`, `argmin`, `max` / `min` along a dim)
//! against a float64 reference along the last dim, the first dim, a middle dim and all dims, on
//! the CPU and the current driver's device, over the shapes that take each kernel path: a warp
//! per output (rows up to 2048), a block per output (longer rows), rows split over blocks (few
//! outputs, long rows), columns of outputs (reductions over an outer dim, split over blocks); in
//! f32, bf16, f16, f64, i32 and i64. Integer-valued data sums exactly in any order (so a dropped
//! or doubled element shows) and ties often (so the first index must win across splits); random
//! real data checks the accumulation's precision; NaN rows check propagation. Then reductions of
//! empty dims as PyTorch's.

mod tensor_util;

use cudasem::{DType, Error, Result, Tensor};
use tensor_util::{assert_close, assert_sums_close, devices, expect_ok, round_to, sample, tensor, values, Domain, Rng};

const DTYPES: [DType; 6] = [DType::F32, DType::BF16, DType::F16, DType::F64, DType::I32, DType::I64];

/// What a test tensor holds.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Data {
    /// Non-zero integers in ±9: exact sums in f32 (below 2^24), many ties.
    Integers,
    /// Random non-zero reals in ±[0.25, 2.5).
    Reals,
    /// Reals with a NaN in every third group (floats only).
    WithNan,
}

/// The groups of `vals` (row-major, of `shape`) reduced over `dims`, in output order; each group
/// in row-major order of its reduced coordinates.
fn groups(vals: &[f64], shape: &[usize], dims: &[usize]) -> Vec<Vec<f64>> {
    let kept: Vec<usize> = (0..shape.len()).filter(|d| !dims.contains(d)).collect();
    let n_out: usize = kept.iter().map(|&d| shape[d]).product();
    let mut out = vec![Vec::new(); n_out];
    let mut idx = vec![0usize; shape.len()];
    for &v in vals {
        let g = kept.iter().fold(0, |acc, &d| acc * shape[d] + idx[d]);
        out[g].push(v);
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

/// The index of the first extreme of `g` (a NaN beats everything, the first NaN first).
fn first_extreme(g: &[f64], max: bool) -> usize {
    let mut best = 0;
    for (i, &v) in g.iter().enumerate() {
        if v.is_nan() {
            return i;
        }
        if (max && v > g[best]) || (!max && v < g[best]) {
            best = i;
        }
    }
    best
}

/// `n` values of `data` in `dtype`; NaNs go into every third of `groups` groups of the layout.
fn data_of(rng: &mut Rng, data: Data, dtype: DType, shape: &[usize], dims: &[usize]) -> Vec<f64> {
    let n: usize = shape.iter().product();
    let mut v = match data {
        Data::Integers => sample(rng, DType::I32, n, Domain::Any).into_iter().map(|x| round_to(dtype, x)).collect(),
        _ => sample(rng, dtype, n, Domain::Any),
    };
    if data == Data::WithNan {
        // Mark element positions by group, then put a NaN at a random member of every third group.
        let ids: Vec<f64> = (0..n).map(|k| k as f64).collect();
        for (gi, g) in groups(&ids, shape, dims).iter().enumerate() {
            if gi % 3 == 0 && !g.is_empty() {
                let k = g[rng.int(0, g.len() as i64 - 1) as usize] as usize;
                v[k] = f64::NAN;
            }
        }
    }
    v
}

/// Checks every reduction of `x` (holding `xv`, of `data`) over `dims` (`None`: all dims).
fn check_all_ops(x: &Tensor, xv: &[f64], dims: Option<&[usize]>, data: Data, what: &str) -> Result<()> {
    let shape = x.shape().to_vec();
    let all: Vec<usize> = (0..shape.len()).collect();
    let rdims = dims.unwrap_or(&all);
    let gs = groups(xv, &shape, rdims);
    let terms = gs.first().map_or(0, Vec::len);
    let idims: Vec<isize> = dims.map_or(vec![], |d| d.iter().map(|&d| d as isize).collect());
    let dtype = x.dtype();
    let out_shape: Vec<usize> = (0..shape.len()).filter(|d| !rdims.contains(d)).map(|d| shape[d]).collect();
    for op in ["sum", "mean", "amax", "amin"] {
        let what = format!("{op}: {what}");
        let result = match op {
            "sum" => x.sum(&idims, false),
            "mean" => x.mean(&idims, false),
            "amax" => x.amax(&idims, false),
            _ => x.amin(&idims, false),
        };
        if op == "mean" && !dtype.is_float() {
            assert_eq!(result.unwrap_err(), Error::UnsupportedDType { op: "mean", dtype }, "{what}");
            continue;
        }
        let out = expect_ok(result, &what);
        let want_dtype = if op == "sum" && !dtype.is_float() { DType::I64 } else { dtype };
        assert_eq!((out.shape(), out.dtype()), (out_shape.as_slice(), want_dtype), "{what}");
        let reduce = |g: &Vec<f64>| match op {
            "sum" => g.iter().sum(),
            "mean" => g.iter().sum::<f64>() / g.len() as f64,
            "amax" => g[first_extreme(g, true)],
            _ => g[first_extreme(g, false)],
        };
        let want: Vec<f64> = gs.iter().map(|g| round_to(want_dtype, reduce(g))).collect();
        let got = values(&out)?;
        match (op, data) {
            ("sum", Data::Integers) => assert_close(&got, &want, "sum_of_integers", want_dtype, &what),
            ("sum" | "mean", _) => {
                let per = if op == "mean" { terms as f64 } else { 1.0 };
                let abs: Vec<f64> = gs.iter().map(|g| g.iter().map(|v| v.abs()).sum::<f64>() / per).collect();
                assert_sums_close(&got, &want, &abs, terms, op, want_dtype, &what);
            }
            _ => assert_close(&got, &want, op, want_dtype, &what),
        }
    }
    let one_dim = match dims {
        Some([d]) => Some(*d as isize),
        None => None,
        Some(_) => return Ok(()),
    };
    for max in [true, false] {
        let name = if max { "argmax" } else { "argmin" };
        let what = format!("{name}: {what}");
        let out = expect_ok(if max { x.argmax(one_dim, false) } else { x.argmin(one_dim, false) }, &what);
        assert_eq!((out.shape(), out.dtype()), (out_shape.as_slice(), DType::I64), "{what}");
        let want: Vec<f64> = gs.iter().map(|g| first_extreme(g, max) as f64).collect();
        assert_close(&values(&out)?, &want, name, DType::I64, &what);
        let Some(d) = one_dim else { continue };
        let name = if max { "max" } else { "min" };
        let what = format!("{name}({d}): {what}");
        let (v, i) = expect_ok(if max { x.max(d, false) } else { x.min(d, false) }, &what);
        assert_eq!((v.shape(), v.dtype(), i.dtype()), (out_shape.as_slice(), dtype, DType::I64), "{what}");
        let want_v: Vec<f64> = gs.iter().zip(&want).map(|(g, &k)| g[k as usize]).collect();
        assert_close(&values(&v)?, &want_v, name, dtype, &format!("{what}: values"));
        assert_close(&values(&i)?, &want, name, DType::I64, &format!("{what}: indices"));
    }
    Ok(())
}

/// Every op over `dims` of each of `shapes`, for every dtype and data kind.
fn check_shapes(cases: &[(&[usize], Option<&[usize]>)], seed: u64) -> Result<()> {
    let mut rng = Rng::new(seed);
    for device in devices() {
        for dtype in DTYPES {
            for (c, &(shape, dims)) in cases.iter().enumerate() {
                let all: Vec<usize> = (0..shape.len()).collect();
                // Integers for every dtype; for floats also reals or reals with NaN, alternating
                // over the cases (and the dtypes), so each float dtype meets both on every path kind.
                let reals = if (c + dtype.size()) % 2 == 0 { Data::Reals } else { Data::WithNan };
                let kinds = if dtype.is_float() { vec![Data::Integers, reals] } else { vec![Data::Integers] };
                for data in kinds {
                    let xv = data_of(&mut rng, data, dtype, shape, dims.unwrap_or(&all));
                    let x = tensor(&xv, shape, dtype, device)?;
                    let what = format!("{data:?} {dtype} {shape:?} over {dims:?} on {device}");
                    check_all_ops(&x, &xv, dims, data, &what)?;
                }
            }
        }
    }
    Ok(())
}

/// Rows of 7 to 2048 (a warp per output) and 2049 to 8197 (a block per output).
#[test]
fn reductions_along_the_last_dim() -> Result<()> {
    let cases: [(&[usize], Option<&[usize]>); 7] = [
        (&[37, 7], Some(&[1])),
        (&[13, 33], Some(&[1])),
        (&[5, 1000], Some(&[1])),
        (&[3, 2048], Some(&[1])),
        (&[3, 2049], Some(&[1])),
        (&[2, 4097], Some(&[1])),
        (&[3, 8197], Some(&[1])),
    ];
    check_shapes(&cases, 70)
}

/// Two outputs of 65539 elements each: every row split over blocks, combined at the end.
#[test]
fn reductions_of_two_long_rows_split_over_blocks() -> Result<()> {
    check_shapes(&[(&[2, 65539], Some(&[1]))], 71)
}

/// One output of 40003 elements (and its reals the other way round from the test above).
#[test]
fn reductions_of_one_long_row_split_over_blocks() -> Result<()> {
    check_shapes(&[(&[1, 40003], Some(&[1])), (&[1, 40003], Some(&[1]))], 75)
}

/// Over the first dim (columns: adjacent outputs read adjacent elements, 16 bytes a load when
/// the row length allows), split over blocks when outputs are few; [100, 2048] is not split for
/// 2-byte types (each thread's rows end in a partial pass of four) and split in three for f32.
#[test]
fn reductions_along_the_first_dim() -> Result<()> {
    let cases: [(&[usize], Option<&[usize]>); 8] = [
        (&[100, 2048], Some(&[0])),
        (&[7, 37], Some(&[0])),
        (&[1000, 5], Some(&[0])),
        (&[4097, 3], Some(&[0])),
        (&[20001, 2], Some(&[0])),
        (&[129, 64], Some(&[0])),
        (&[4099, 64], Some(&[0])),
        (&[33, 1032], Some(&[0])),
    ];
    check_shapes(&cases, 72)
}

/// Over a middle dim, over two dims at once, and over all dims (one output: split).
#[test]
fn reductions_along_a_middle_dim_two_dims_and_all() -> Result<()> {
    let cases: [(&[usize], Option<&[usize]>); 8] = [
        (&[4, 7, 6], Some(&[1])),
        (&[3, 1000, 5], Some(&[1])),
        (&[3, 1000, 16], Some(&[1])),
        (&[2, 4097, 3], Some(&[1])),
        (&[3, 5, 7], Some(&[0, 2])),
        (&[4099], None),
        (&[37, 67], None),
        (&[3, 20001], None),
    ];
    check_shapes(&cases, 73)
}

/// A transposed input reduced along each of its dims: the reduced elements strided in memory.
#[test]
fn reductions_of_a_transposed_tensor() -> Result<()> {
    let mut rng = Rng::new(74);
    for device in devices() {
        for dtype in DTYPES {
            for (r, c) in [(37, 67), (3, 4097)] {
                let xv = data_of(&mut rng, Data::Integers, dtype, &[r, c], &[1]);
                let tr: Vec<f64> = (0..c).flat_map(|j| (0..r).map(|i| xv[i * c + j]).collect::<Vec<_>>()).collect();
                let x = tensor(&tr, &[c, r], dtype, device)?.t()?;
                assert!(!x.is_contiguous());
                for dims in [Some(&[0usize][..]), Some(&[1][..]), None] {
                    check_all_ops(
                        &x,
                        &xv,
                        dims,
                        Data::Integers,
                        &format!("transposed {dtype} [{r}, {c}] on {device}"),
                    )?;
                }
            }
        }
    }
    Ok(())
}

#[track_caller]
fn assert_no_identity<T: std::fmt::Debug>(r: Result<T>, op: &str, what: &str) {
    match r {
        Err(Error::InvalidArgument { op: o, reason }) => assert!(o == op && !reason.is_empty(), "{what}: {o}"),
        other => panic!("{what}: {op} of an empty dim must be an error, as PyTorch's IndexError; got {other:?}"),
    }
}

/// Reductions of empty dims as PyTorch's: a sum of nothing is 0 (int64 for integers), a mean
/// NaN; `amax`, `amin`, `argmax`, `argmin`, `max` and `min` over an empty dim are errors
/// (`torch.amax(torch.empty(3, 0), dim=1)` raises), over a non-empty dim of an empty tensor
/// empty results (`torch.empty(0, 3).amax(dim=1)` is `tensor([])`).
#[test]
fn reductions_of_empty_dims_are_pytorchs() -> Result<()> {
    for device in devices() {
        for dtype in DTYPES {
            let what = format!("{dtype} on {device}");
            let sum_dtype = if dtype.is_float() { dtype } else { DType::I64 };
            let e = Tensor::zeros([3, 0], dtype, device)?;
            let s = expect_ok(e.sum(&[1], false), &what);
            assert_eq!(
                (s.shape(), s.dtype(), values(&s)?),
                (&[3usize][..], sum_dtype, vec![0.0; 3]),
                "{what}: sum over 0"
            );
            let s = e.sum(&[-1], true)?;
            assert_eq!((s.shape(), values(&s)?), (&[3usize, 1][..], vec![0.0; 3]), "{what}: keepdim");
            assert_eq!(e.sum(&[0], false)?.shape(), [0], "{what}: sum over the non-empty dim");
            assert_eq!(values(&e.sum_all()?)?, [0.0], "{what}: sum of everything");
            if dtype.is_float() {
                let m = expect_ok(e.mean(&[1], false), &what);
                assert!(m.shape() == [3] && values(&m)?.iter().all(|v| v.is_nan()), "{what}: mean over 0 is NaN");
                assert!(values(&e.mean_all()?)?[0].is_nan(), "{what}: mean of nothing");
                assert_eq!(e.mean(&[0], false)?.shape(), [0], "{what}: mean over the non-empty dim");
            }
            for (name, r) in [("amax", e.amax(&[1], false)), ("amin", e.amin(&[1], true)), ("amax", e.amax(&[], false))]
            {
                assert_no_identity(r, name, &what);
            }
            assert_no_identity(e.argmax(Some(1), false), "argmax", &what);
            assert_no_identity(e.argmin(None, false), "argmin", &what);
            assert_no_identity(e.max(1, false), "max", &what);
            assert_no_identity(e.min(-1, true), "min", &what);
            assert_no_identity(e.max_all(), "max", &what);
            // Over the non-empty dim: empty results.
            let t = Tensor::zeros([0, 3], dtype, device)?;
            let a = expect_ok(t.amax(&[1], false), &what);
            assert_eq!((a.shape(), a.dtype()), (&[0usize][..], dtype), "{what}: torch.empty(0, 3).amax(dim=1)");
            assert_eq!(t.amin(&[1], true)?.shape(), [0, 1], "{what}");
            assert_eq!(t.argmax(Some(1), false)?.shape(), [0], "{what}");
            let (v, i) = t.min(1, false)?;
            assert_eq!((v.shape(), i.shape(), i.dtype()), (&[0usize][..], &[0usize][..], DType::I64), "{what}");
            // A 3-D tensor empty in the middle: reducing the other two dims gives an empty result.
            let m = Tensor::zeros([2, 0, 4], dtype, device)?;
            assert_eq!(m.amax(&[0, 2], false)?.shape(), [0], "{what}: amax over the non-empty dims");
            assert_eq!(m.sum(&[0, 2], true)?.shape(), [1, 0, 1], "{what}");
            let s = m.sum(&[1], false)?;
            assert_eq!((s.shape(), values(&s)?), (&[2usize, 4][..], vec![0.0; 8]), "{what}: sum over the empty dim");
            // A view that is empty: the same answers.
            let view = Tensor::ones([3, 5], dtype, device)?.narrow(1, 2, 0)?;
            assert_eq!(values(&view.sum(&[1], false)?)?, [0.0; 3], "{what}: sum over an empty view");
            assert_no_identity(view.amax(&[1], false), "amax", &what);
        }
    }
    Ok(())
}
