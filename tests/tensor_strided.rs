//! Copies and elementwise ops over the strided layouts a transformer produces (a `[B, H, T, E]`
//! attention output read as `[B, T, H, E]`, permutes of three to five dims), on every device,
//! against references computed on the host from the same values: head dims that are whole
//! vectors (the CUDA driver's vector lane) and odd ones, bases moved by `narrow`, broadcast
//! inputs, and ops other than copies through the same path.

mod tensor_util;

use cudasem::{DType, Device, Result, Tensor};
use tensor_util::{assert_close, devices, round_to, sample, tensor, values, Domain, Rng};

/// Row-major strides of `shape`.
fn strides_of(shape: &[usize]) -> Vec<usize> {
    let mut st = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        st[i] = st[i + 1] * shape[i + 1];
    }
    st
}

/// `vals` (row-major over `shape`) permuted by `perm`, row-major over the permuted shape.
fn permute_ref(vals: &[f64], shape: &[usize], perm: &[usize]) -> Vec<f64> {
    let st = strides_of(shape);
    let out_shape: Vec<usize> = perm.iter().map(|&d| shape[d]).collect();
    let n: usize = shape.iter().product();
    (0..n)
        .map(|flat| {
            let (mut rem, mut at) = (flat, 0);
            for i in (0..out_shape.len()).rev() {
                at += (rem % out_shape[i]) * st[perm[i]];
                rem /= out_shape[i];
            }
            vals[at]
        })
        .collect()
}

/// Random values of `dtype` over `shape` and the tensor holding them on `device`.
fn random(rng: &mut Rng, shape: &[usize], dtype: DType, device: Device) -> Result<(Vec<f64>, Tensor)> {
    let vals = sample(rng, dtype, shape.iter().product(), Domain::Any);
    let t = tensor(&vals, shape, dtype, device)?;
    Ok((vals, t))
}

const DTYPES: [DType; 4] = [DType::BF16, DType::F16, DType::F32, DType::I64];

/// `x.transpose(1, 2).reshape([B, T, H * E])` of a `[B, H, T, E]` tensor: head dims of whole
/// vectors and odd ones, every dtype, small and large (several waves of blocks).
#[test]
fn attention_outputs_read_as_rows_copy_exactly() -> Result<()> {
    let mut rng = Rng::new(40);
    for device in devices() {
        for dtype in DTYPES {
            for shape in [[2usize, 3, 5, 64], [2, 3, 5, 7], [2, 4, 33, 8], [1, 2, 3, 12]] {
                let (vals, x) = random(&mut rng, &shape, dtype, device)?;
                let [b, h, t, e] = shape;
                let y = x.transpose(1, 2)?.reshape([b, t, h * e])?;
                assert_eq!(y.shape(), [b, t, h * e]);
                let what = format!("{dtype} {shape:?} on {device}");
                assert_eq!(values(&y)?, permute_ref(&vals, &shape, &[0, 2, 1, 3]), "{what}");
            }
        }
        let shape = [4usize, 16, 128, 64];
        let (vals, x) = random(&mut rng, &shape, DType::BF16, device)?;
        let y = x.transpose(1, 2)?.contiguous()?;
        assert_eq!(values(&y)?, permute_ref(&vals, &shape, &[0, 2, 1, 3]), "large bf16 on {device}");
    }
    Ok(())
}

/// Permutes of three to five dims made contiguous, with the innermost dim kept (vectors where
/// it is whole) and moved (a gather along it).
#[test]
fn permutes_of_three_to_five_dims_copy_exactly() -> Result<()> {
    let cases: [(&[usize], &[usize]); 7] = [
        (&[4, 6, 16], &[1, 0, 2]),
        (&[5, 6, 16], &[2, 1, 0]),
        (&[3, 4, 5, 8], &[2, 0, 1, 3]),
        (&[3, 4, 5, 8], &[0, 1, 3, 2]),
        (&[2, 3, 4, 5, 16], &[4, 3, 2, 1, 0]),
        (&[2, 3, 4, 5, 16], &[3, 1, 0, 2, 4]),
        (&[2, 3, 2, 5, 24], &[0, 3, 2, 1, 4]),
    ];
    let mut rng = Rng::new(41);
    for device in devices() {
        for dtype in DTYPES {
            for (shape, perm) in cases {
                let (vals, x) = random(&mut rng, shape, dtype, device)?;
                let p: Vec<isize> = perm.iter().map(|&d| d as isize).collect();
                let y = x.permute(&p)?.contiguous()?;
                let what = format!("{dtype} {shape:?} permuted {perm:?} on {device}");
                assert_eq!(values(&y)?, permute_ref(&vals, shape, perm), "{what}");
            }
        }
    }
    Ok(())
}

/// A head dim narrowed from a wider one (its base one element off a vector's boundary, or a
/// whole vector off) copies exactly.
#[test]
fn narrowed_heads_copy_exactly() -> Result<()> {
    let mut rng = Rng::new(42);
    for device in devices() {
        for dtype in DTYPES {
            for (start, e) in [(1usize, 64usize), (8, 64), (3, 16)] {
                let wide = [2usize, 3, 5, e + start + 1];
                let (vals, x) = random(&mut rng, &wide, dtype, device)?;
                let y = x.narrow(3, start, e)?.transpose(1, 2)?.contiguous()?;
                let full = permute_ref(&vals, &wide, &[0, 2, 1, 3]);
                let want: Vec<f64> =
                    full.chunks(wide[3]).flat_map(|row| row[start..start + e].iter().copied()).collect();
                assert_eq!(values(&y)?, want, "{dtype} narrowed from {start} to {e} on {device}");
            }
        }
    }
    Ok(())
}

/// Binary ops of a permuted operand with broadcast ones (a row along the head dim, a value per
/// head), a unary function and a cast of permuted operands, against float64 references.
#[test]
fn elementwise_ops_of_permuted_and_broadcast_operands() -> Result<()> {
    let mut rng = Rng::new(43);
    for device in devices() {
        for dtype in DTYPES {
            for shape in [[2usize, 3, 5, 64], [2, 3, 5, 7]] {
                let [b, h, t, e] = shape;
                let (vals, x) = random(&mut rng, &shape, dtype, device)?;
                let xt = x.transpose(1, 2)?;
                let xr = permute_ref(&vals, &shape, &[0, 2, 1, 3]);
                let (row, r) = random(&mut rng, &[e], dtype, device)?;
                let (per, p) = random(&mut rng, &[t, h, 1], dtype, device)?;
                let what = format!("{dtype} {shape:?} on {device}");
                let sum = xt.add(&r)?;
                let want: Vec<f64> = xr.iter().enumerate().map(|(i, &v)| round_to(dtype, v + row[i % e])).collect();
                assert_close(&values(&sum)?, &want, "add", dtype, &format!("add of a row, {what}"));
                let prod = xt.mul(&p.expand([b, t, h, e])?)?;
                let want: Vec<f64> =
                    xr.iter().enumerate().map(|(i, &v)| round_to(dtype, v * per[(i / e) % (t * h)])).collect();
                assert_close(&values(&prod)?, &want, "mul", dtype, &format!("mul by a value per head, {what}"));
                if dtype.is_float() {
                    let s = xt.sin()?;
                    let want: Vec<f64> = xr.iter().map(|&v| round_to(dtype, v.sin())).collect();
                    assert_close(&values(&s)?, &want, "sin", dtype, &format!("sin, {what}"));
                }
                let wide = xt.to_dtype(DType::F64)?;
                assert_eq!(values(&wide)?, xr, "cast to f64, {what}");
            }
        }
    }
    Ok(())
}

/// Writes through permuted and narrowed outputs: `copy_` of rows into a `[B, H, T, E]` tensor's
/// transpose (the kernel takes the output's memory order), into a narrowed head dim (a base off
/// the vector boundary), and `fill_` of a permuted view; elements outside the views untouched.
#[test]
fn writes_into_permuted_and_narrowed_outputs() -> Result<()> {
    let mut rng = Rng::new(44);
    for device in devices() {
        for dtype in DTYPES {
            for (start, e) in [(0usize, 64usize), (1, 64), (0, 7)] {
                let (b, h, t) = (2usize, 3usize, 5usize);
                let wide = [b, h, t, e + start];
                let (base, dst) = random(&mut rng, &wide, dtype, device)?;
                let (rows, src) = random(&mut rng, &[b, t, h, e], dtype, device)?;
                dst.narrow(3, start, e)?.transpose(1, 2)?.copy_(&src, false)?;
                // rows[b, t, h, e'] lands at dst[b, h, t, start + e'].
                let mut want = base.clone();
                for (i, &v) in rows.iter().enumerate() {
                    let (x, hh, tt, bb) = (i % e, (i / e) % h, (i / (e * h)) % t, i / (e * h * t));
                    want[((bb * h + hh) * t + tt) * (e + start) + start + x] = v;
                }
                let what = format!("{dtype} E={e} from {start} on {device}");
                assert_eq!(values(&dst)?, want, "copy_ into a transposed view, {what}");
                dst.narrow(3, start, e)?.permute(&[2, 0, 1, 3])?.fill_(2.0)?;
                let filled: Vec<f64> =
                    want.iter().enumerate().map(|(i, &v)| if i % (e + start) >= start { 2.0 } else { v }).collect();
                assert_eq!(values(&dst)?, filled, "fill_ of a permuted view, {what}");
            }
        }
    }
    Ok(())
}

/// Batched transposes (`k.transpose(-2, -1).contiguous()` of `[B, H, T, E]`): every dtype,
/// sides of whole tiles and ragged ones, a narrowed base, and a binary op of a transposed and a
/// broadcast operand, against the host's permute.
#[test]
fn batched_transposes_copy_exactly() -> Result<()> {
    let mut rng = Rng::new(45);
    for device in devices() {
        for dtype in DTYPES {
            for shape in [[2usize, 3, 64, 64], [2, 3, 33, 17], [1, 5, 16, 40], [3, 1, 70, 20]] {
                let (vals, x) = random(&mut rng, &shape, dtype, device)?;
                let y = x.transpose(2, 3)?.contiguous()?;
                let what = format!("{dtype} {shape:?} on {device}");
                assert_eq!(values(&y)?, permute_ref(&vals, &shape, &[0, 1, 3, 2]), "{what}");
            }
            let wide = [2usize, 3, 33, 20];
            let (vals, x) = random(&mut rng, &wide, dtype, device)?;
            let y = x.narrow(3, 1, 17)?.transpose(2, 3)?.contiguous()?;
            let full = permute_ref(&vals, &wide, &[0, 1, 3, 2]);
            // Rows 1..18 of each [20, 33] matrix of the full transpose.
            let want: Vec<f64> = full.chunks(20 * 33).flat_map(|m| m[33..18 * 33].iter().copied()).collect();
            assert_eq!(values(&y)?, want, "narrowed {dtype} on {device}");
            let shape = [2usize, 32, 48];
            let (vals, x) = random(&mut rng, &shape, dtype, device)?;
            let (row, r) = random(&mut rng, &[32], dtype, device)?;
            let got = x.transpose(1, 2)?.add(&r)?;
            let xt = permute_ref(&vals, &shape, &[0, 2, 1]);
            let want: Vec<f64> = xt.iter().enumerate().map(|(i, &v)| round_to(dtype, v + row[i % 32])).collect();
            assert_close(
                &values(&got)?,
                &want,
                "add",
                dtype,
                &format!("add of a transposed batch, {dtype} on {device}"),
            );
        }
    }
    Ok(())
}
