//! Binary ops and `where` with broadcasting against a float64 reference, on the CPU and the
//! current driver's device: a broadcast row (`[m, n] op [n]`), a broadcast column (`[m, n] op
//! [m, 1]`), both operands broadcast (`[m, 1] op [1, n]`), either side, a number on either side,
//! transposed (non-contiguous) operands, 3-D broadcasts, and mixed dtypes (type promotion), with
//! `m`, `n` not multiples of 8 and multiples of 8 (the aligned vector paths).

mod tensor_util;

use cudasem::{result_type, DType, Device, Operand, Result, Scalar, Tensor};
use tensor_util::reference::{apply_binary, binary_reference, is_comparison, out_dtype};
use tensor_util::{assert_close, devices, expect_ok, laid_out, round_to, sample, tensor, values, Domain, Layout, Rng};

/// `(m, n)`: a single row, odd sizes, multiples of 8 (16-byte rows of every dtype), and rows of
/// more than a block's 256 vectors of every dtype, not a whole number of them.
const SHAPES: [(usize, usize); 6] = [(1, 13), (5, 7), (37, 67), (8, 64), (16, 136), (3, 2056)];

const DTYPES: [DType; 5] = [DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64];

/// How an operand of an `[m, n]` result is shaped and laid out.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// `[m, n]`, laid out as given.
    Full(Layout),
    /// `[n]`: a broadcast row.
    Row,
    /// `[1, n]`.
    RowMatrix,
    /// `[m, 1]`: a broadcast column.
    Column,
}

const FULL: Kind = Kind::Full(Layout::Contiguous);
const TRANSPOSED: Kind = Kind::Full(Layout::Transposed);

impl Kind {
    fn numel(self, m: usize, n: usize) -> usize {
        match self {
            Kind::Full(_) => m * n,
            Kind::Row | Kind::RowMatrix => n,
            Kind::Column => m,
        }
    }

    /// The index into the operand's row-major values of result element `(i, j)`.
    fn at(self, i: usize, j: usize, n: usize) -> usize {
        match self {
            Kind::Full(_) => i * n + j,
            Kind::Row | Kind::RowMatrix => j,
            Kind::Column => i,
        }
    }

    fn make(self, vals: &[f64], m: usize, n: usize, dtype: DType, device: Device) -> Result<Tensor> {
        match self {
            // A transposed single row or column is contiguous: take every other element instead.
            Kind::Full(Layout::Transposed) if m == 1 || n == 1 => laid_out(vals, m, n, dtype, device, Layout::Strided),
            Kind::Full(layout) => laid_out(vals, m, n, dtype, device, layout),
            Kind::Row => tensor(vals, &[n], dtype, device),
            Kind::RowMatrix => tensor(vals, &[1, n], dtype, device),
            Kind::Column => tensor(vals, &[m, 1], dtype, device),
        }
    }
}

/// The input domains of `op`'s operands (`pow`: positive bases, small exponents).
fn domains(op: &str) -> (Domain, Domain) {
    if op == "pow" {
        (Domain::Positive, Domain::Exponent)
    } else {
        (Domain::Any, Domain::Any)
    }
}

/// `a op b` for every pair of operand kinds, op, pair of dtypes and shape, against the reference.
fn check_pairs(pairs: &[(Kind, Kind)], ops: &[&str], dtypes: &[(DType, DType)], seed: u64) -> Result<()> {
    let mut rng = Rng::new(seed);
    for device in devices() {
        for &(da, db) in dtypes {
            for (m, n) in SHAPES {
                for &(ka, kb) in pairs {
                    for &op in ops {
                        let what = format!("{op}: {da} {ka:?} with {db} {kb:?}, [{m}, {n}], on {device}");
                        let (xa, xb) = domains(op);
                        let av = sample(&mut rng, da, ka.numel(m, n), xa);
                        let bv = sample(&mut rng, db, kb.numel(m, n), xb);
                        let (a, b) = (ka.make(&av, m, n, da, device)?, kb.make(&bv, m, n, db, device)?);
                        let common = result_type(&[Operand::Tensor(&a), Operand::Tensor(&b)]);
                        let out = expect_ok(apply_binary(op, &a, Operand::Tensor(&b)), &what);
                        let want_dtype = out_dtype(op, common);
                        assert_eq!(
                            (out.shape(), out.dtype(), out.device()),
                            (&[m, n][..], want_dtype, a.device()),
                            "{what}"
                        );
                        let want: Vec<f64> = (0..m * n)
                            .map(|k| {
                                let (i, j) = (k / n, k % n);
                                binary_reference(op, av[ka.at(i, j, n)], bv[kb.at(i, j, n)], common)
                            })
                            .collect();
                        assert_close(&values(&out)?, &want, op, want_dtype, &what);
                    }
                }
            }
        }
    }
    Ok(())
}

fn same(dtypes: &[DType]) -> Vec<(DType, DType)> {
    dtypes.iter().map(|&d| (d, d)).collect()
}

/// The binary ops over broadcast operands (`sub` and `minimum` take the paths of `add` and
/// `maximum`; the number and transposed cases have them).
const ARITHMETIC: [&str; 6] = ["add", "mul", "div", "maximum", "pow", "lt"];

#[test]
fn a_broadcast_row_on_either_side() -> Result<()> {
    check_pairs(&[(FULL, Kind::Row), (Kind::Row, FULL), (FULL, Kind::RowMatrix)], &ARITHMETIC, &same(&DTYPES), 60)
}

#[test]
fn a_broadcast_column_on_either_side_and_both_operands_broadcast() -> Result<()> {
    let pairs =
        [(FULL, Kind::Column), (Kind::Column, FULL), (Kind::Column, Kind::RowMatrix), (Kind::Row, Kind::Column)];
    check_pairs(&pairs, &ARITHMETIC, &same(&DTYPES), 61)
}

#[test]
fn transposed_operands_alone_and_with_broadcasts() -> Result<()> {
    let pairs = [(TRANSPOSED, FULL), (FULL, TRANSPOSED), (TRANSPOSED, Kind::Row), (Kind::Column, TRANSPOSED)];
    check_pairs(&pairs, &["sub", "mul", "div", "minimum", "ge"], &same(&DTYPES), 62)
}

/// A strided operand (every other column) beside a dense one, a broadcast column or a broadcast
/// row: the two-dimensional kernel gathers it element by element within vectors of the others.
#[test]
fn strided_operands_with_broadcasts() -> Result<()> {
    const STRIDED: Kind = Kind::Full(Layout::Strided);
    let pairs = [(STRIDED, FULL), (STRIDED, Kind::Column), (Kind::Row, STRIDED), (Kind::Column, STRIDED)];
    check_pairs(&pairs, &["add", "div", "maximum"], &same(&DTYPES), 65)
}

/// Mixed dtypes promote as PyTorch's (`f16 + f32` is f32, `bf16 + f16` f32, an int tensor and a
/// half tensor the half type, …), dense and with a broadcast row or column.
#[test]
fn mixed_dtypes_promote_dense_and_broadcast() -> Result<()> {
    use DType::*;
    let dtypes = [(F16, F32), (F32, BF16), (BF16, F16), (I32, F16), (I64, F32), (I32, I64), (F32, F64), (BF16, I64)];
    let pairs = [(FULL, FULL), (FULL, Kind::Row), (TRANSPOSED, Kind::Column)];
    check_pairs(&pairs, &["add", "div", "maximum", "gt"], &dtypes, 63)
}

/// 3-D broadcasts, which collapse to no two-dim pattern: `[k, 1, n] op [m, 1]` and
/// `[k, m, n] op [m, n]` (a matrix over a batch).
#[test]
fn three_dim_broadcasts() -> Result<()> {
    let mut rng = Rng::new(64);
    for device in devices() {
        for dtype in DTYPES {
            for (k, m, n) in [(3, 5, 7), (2, 8, 64)] {
                for op in ["add", "sub", "mul", "maximum"] {
                    let what = format!("{op} of 3-D {dtype} [{k}, {m}, {n}] on {device}");
                    let av = sample(&mut rng, dtype, k * n, Domain::Any);
                    let bv = sample(&mut rng, dtype, m, Domain::Any);
                    let a = tensor(&av, &[k, 1, n], dtype, device)?;
                    let b = tensor(&bv, &[m, 1], dtype, device)?;
                    let out = expect_ok(apply_binary(op, &a, Operand::Tensor(&b)), &what);
                    assert_eq!(out.shape(), [k, m, n], "{what}");
                    let want: Vec<f64> = (0..k * m * n)
                        .map(|e| binary_reference(op, av[(e / (m * n)) * n + e % n], bv[(e / n) % m], dtype))
                        .collect();
                    assert_close(&values(&out)?, &want, op, out.dtype(), &what);
                    let cv = sample(&mut rng, dtype, k * m * n, Domain::Any);
                    let c = tensor(&cv, &[k, m, n], dtype, device)?;
                    let d = tensor(&cv[..m * n], &[m, n], dtype, device)?;
                    let out = expect_ok(apply_binary(op, &c, Operand::Tensor(&d)), &what);
                    let want: Vec<f64> =
                        (0..k * m * n).map(|e| binary_reference(op, cv[e], cv[e % (m * n)], dtype)).collect();
                    assert_close(&values(&out)?, &want, op, out.dtype(), &format!("{what}: batch of matrices"));
                }
            }
        }
    }
    Ok(())
}

/// A number of the tensor's category (a float not representable in the half types; an int).
fn number_for(rng: &mut Rng, dtype: DType, op: &str) -> Scalar {
    match (dtype.is_float(), op) {
        (true, "pow") => Scalar::Float(rng.uniform(-2.0, 2.0)),
        (true, _) => Scalar::Float(rng.uniform(0.1, 3.0) * if rng.next_u64() & 1 == 0 { 1.0 } else { -1.0 }),
        (false, "pow") => Scalar::Int(rng.int(0, 3)),
        (false, _) => Scalar::Int(rng.int(1, 9) * if rng.next_u64() & 1 == 0 { 1 } else { -1 }),
    }
}

/// `t op number` and `number op t` (`+ - * /`) with `t` dense: the driver's short path.
#[test]
fn a_number_on_either_side_of_a_dense_tensor() -> Result<()> {
    numbers(&[FULL], &["add", "sub", "mul", "div", "maximum", "minimum", "pow", "eq", "lt"], 65)
}

/// `t op number` and `number op t` with `t` transposed, and a broadcast row expanded to `[m, n]`.
#[test]
fn a_number_on_either_side_of_a_strided_tensor() -> Result<()> {
    numbers(&[TRANSPOSED, Kind::Row], &["add", "sub", "div", "maximum", "pow", "ge"], 67)
}

/// `t op number` (each of `ops`) and `number op t` (`+ - * /`), `t` of each of `kinds`.
fn numbers(kinds: &[Kind], ops: &[&str], seed: u64) -> Result<()> {
    let mut rng = Rng::new(seed);
    for device in devices() {
        for dtype in DTYPES {
            for (m, n) in SHAPES {
                for &kind in kinds {
                    for &op in ops {
                        let what = format!("{op}: {dtype} {kind:?} [{m}, {n}] and a number, on {device}");
                        let (domain, _) = domains(op);
                        let tv = sample(&mut rng, dtype, kind.numel(m, n), domain);
                        let t = match kind {
                            Kind::Row => Kind::Row.make(&tv, m, n, dtype, device)?.expand([m, n])?,
                            _ => kind.make(&tv, m, n, dtype, device)?,
                        };
                        let s = number_for(&mut rng, dtype, op);
                        let common = result_type(&[Operand::Tensor(&t), Operand::Scalar(s)]);
                        let want_dtype = out_dtype(op, common);
                        let tol = if is_comparison(op) { op.to_owned() } else { format!("{op}_number") };
                        let out = expect_ok(apply_binary(op, &t, Operand::Scalar(s)), &what);
                        assert_eq!((out.shape(), out.dtype()), (&[m, n][..], want_dtype), "{what}");
                        let x = |k: usize| tv[kind.at(k / n, k % n, n)];
                        let want: Vec<f64> =
                            (0..m * n).map(|k| binary_reference(op, x(k), s.to_f64(), common)).collect();
                        assert_close(&values(&out)?, &want, &tol, want_dtype, &what);
                        let left = match (op, s) {
                            ("add", Scalar::Float(f)) => f + &t,
                            ("add", Scalar::Int(i)) => i + &t,
                            ("sub", Scalar::Float(f)) => f - &t,
                            ("sub", Scalar::Int(i)) => i - &t,
                            ("mul", Scalar::Float(f)) => f * &t,
                            ("mul", Scalar::Int(i)) => i * &t,
                            ("div", Scalar::Float(f)) => f / &t,
                            ("div", Scalar::Int(i)) => i / &t,
                            _ => continue,
                        };
                        let out = expect_ok(left, &format!("number on the left: {what}"));
                        assert_eq!((out.shape(), out.dtype()), (&[m, n][..], want_dtype), "{what}");
                        let want: Vec<f64> =
                            (0..m * n).map(|k| binary_reference(op, s.to_f64(), x(k), common)).collect();
                        assert_close(&values(&out)?, &want, &tol, want_dtype, &format!("number on the left: {what}"));
                    }
                }
            }
        }
    }
    Ok(())
}

/// How a `where` operand is given: a tensor of an operand kind, or a number.
#[derive(Debug, Clone, Copy)]
enum Arg {
    T(Kind),
    Number,
}

/// `where(cond, x, y)` with every combination of broadcast condition, values and numbers, in
/// every float dtype (and the ints), against the reference.
#[test]
fn where_broadcasts_conditions_values_and_numbers() -> Result<()> {
    let mut rng = Rng::new(66);
    let cases: [(Kind, Arg, Arg); 8] = [
        (FULL, Arg::T(FULL), Arg::T(FULL)),
        (FULL, Arg::T(Kind::Row), Arg::T(Kind::Column)),
        (Kind::Column, Arg::T(FULL), Arg::Number),
        (Kind::Row, Arg::Number, Arg::T(TRANSPOSED)),
        (TRANSPOSED, Arg::T(FULL), Arg::T(Kind::Row)),
        (Kind::RowMatrix, Arg::T(Kind::Column), Arg::T(Kind::RowMatrix)),
        (FULL, Arg::Number, Arg::Number),
        (Kind::Column, Arg::T(Kind::Row), Arg::T(TRANSPOSED)),
    ];
    for device in devices() {
        for dtype in [DType::F32, DType::BF16, DType::F16, DType::F64, DType::I32, DType::I64] {
            for (m, n) in SHAPES {
                for (kc, kx, ky) in cases {
                    let what = format!("where({kc:?}, {kx:?}, {ky:?}) of {dtype}, [{m}, {n}], on {device}");
                    let cv = sample(&mut rng, DType::Bool, kc.numel(m, n), Domain::Any);
                    let cond = kc.make(&cv, m, n, DType::Bool, device)?;
                    let mut arg = |a: Arg| -> Result<(Vec<f64>, Option<Tensor>, Kind)> {
                        Ok(match a {
                            Arg::T(k) => {
                                let v = sample(&mut rng, dtype, k.numel(m, n), Domain::Any);
                                let t = k.make(&v, m, n, dtype, device)?;
                                (v, Some(t), k)
                            }
                            Arg::Number => {
                                // A number of the tensor's category, exactly representable in it.
                                let v = round_to(dtype, if dtype.is_float() { -1.375 } else { 7.0 });
                                (vec![v], None, Kind::RowMatrix)
                            }
                        })
                    };
                    let ((xv, xt, xk), (yv, yt, yk)) = (arg(kx)?, arg(ky)?);
                    let number = |v: f64| if dtype.is_float() { Scalar::Float(v) } else { Scalar::Int(v as i64) };
                    let x: Operand<'_> = xt.as_ref().map_or(Operand::Scalar(number(xv[0])), Operand::Tensor);
                    let y: Operand<'_> = yt.as_ref().map_or(Operand::Scalar(number(yv[0])), Operand::Tensor);
                    let out = expect_ok(Tensor::where_cond(&cond, x, y), &what);
                    // Two numbers give the default float dtype (or int64), as torch.where(c, 1.5, 2.0).
                    let want_dtype = match (xt.is_some() || yt.is_some(), dtype.is_float()) {
                        (true, _) => dtype,
                        (false, true) => DType::F32,
                        (false, false) => DType::I64,
                    };
                    assert_eq!((out.shape(), out.dtype()), (&[m, n][..], want_dtype), "{what}");
                    let want: Vec<f64> = (0..m * n)
                        .map(|k| {
                            let (i, j) = (k / n, k % n);
                            let pick = |v: &[f64], kind: Kind| if v.len() == 1 { v[0] } else { v[kind.at(i, j, n)] };
                            round_to(want_dtype, if cv[kc.at(i, j, n)] != 0.0 { pick(&xv, xk) } else { pick(&yv, yk) })
                        })
                        .collect();
                    assert_close(&values(&out)?, &want, "where", want_dtype, &what);
                }
            }
        }
    }
    Ok(())
}
