//! The simulated backend's reductions: the ranks' contributions (native-endian bytes of one
//! dtype, in rank order) combined element by element as NCCL combines them. Floating-point
//! values are combined in `f64` and rounded once to the dtype (at least as exact as NCCL's
//! pairwise sums); integers wrap, and their average is the wrapped sum divided by the number of
//! ranks, toward zero (NCCL's `ncclAvg`).

use crate::driver::comm::ReduceOp;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernels::cpu::{f64_to_bf16, f64_to_f16};
use half::{bf16, f16};

/// Integer elements of type `$t`, with wrapping arithmetic.
macro_rules! ints {
    ($t:ty, $parts:expr, $op:expr, $n:expr) => {{
        const SIZE: usize = std::mem::size_of::<$t>();
        let parts: &[&[u8]] = $parts;
        let len = parts[0].len();
        let load = |p: &[u8], at: usize| <$t>::from_ne_bytes(p[at..at + SIZE].try_into().unwrap_or_default());
        let mut out = Vec::with_capacity(len);
        for at in (0..len).step_by(SIZE) {
            let first = load(parts[0], at);
            let combined = parts[1..].iter().map(|p| load(p, at)).fold(first, |a: $t, b: $t| match $op {
                ReduceOp::Sum | ReduceOp::Avg => a.wrapping_add(b),
                ReduceOp::Product => a.wrapping_mul(b),
                ReduceOp::Min => a.min(b),
                ReduceOp::Max => a.max(b),
            });
            // `n` ranks: at most the group's size, far below every integer type's range but u8's,
            // whose groups beyond 255 ranks divide by the saturated count.
            let value =
                if $op == ReduceOp::Avg { combined / (<$t>::try_from($n).unwrap_or(<$t>::MAX)) } else { combined };
            out.extend_from_slice(&value.to_ne_bytes());
        }
        out
    }};
}

/// The dtypes the collectives take (torch.distributed's NCCL types but `bool`).
pub(crate) fn check_dtype(op: &'static str, dtype: DType) -> Result<()> {
    match dtype {
        DType::Bool => Err(Error::UnsupportedDType { op, dtype }),
        _ => Ok(()),
    }
}

/// `op` over `parts` (each the same length, a whole number of `dtype` elements).
pub(crate) fn reduce(dtype: DType, op: ReduceOp, parts: &[&[u8]]) -> Result<Vec<u8>> {
    let len = parts.first().map_or(0, |p| p.len());
    if parts.iter().any(|p| p.len() != len) || !len.is_multiple_of(dtype.size()) {
        return Err(Error::Internal { op: "reduce", reason: "contributions of unequal lengths".into() });
    }
    let n = parts.len();
    Ok(match dtype {
        DType::F64 => {
            floats(parts, op, 8, |b| f64::from_ne_bytes(b.try_into().unwrap_or_default()), |x| x.to_ne_bytes().to_vec())
        }
        DType::F32 => floats(
            parts,
            op,
            4,
            |b| f32::from_ne_bytes(b.try_into().unwrap_or_default()) as f64,
            |x| (x as f32).to_ne_bytes().to_vec(),
        ),
        DType::F16 => floats(
            parts,
            op,
            2,
            |b| f16::from_ne_bytes(b.try_into().unwrap_or_default()).to_f64(),
            |x| f64_to_f16(x).to_ne_bytes().to_vec(),
        ),
        DType::BF16 => floats(
            parts,
            op,
            2,
            |b| bf16::from_ne_bytes(b.try_into().unwrap_or_default()).to_f64(),
            |x| f64_to_bf16(x).to_ne_bytes().to_vec(),
        ),
        DType::I64 => ints!(i64, parts, op, n),
        DType::I32 => ints!(i32, parts, op, n),
        DType::U8 => ints!(u8, parts, op, n),
        DType::Bool => return Err(Error::UnsupportedDType { op: "reduce", dtype }),
    })
}

/// Floating-point elements of `size` bytes, combined in `f64`.
fn floats(
    parts: &[&[u8]],
    op: ReduceOp,
    size: usize,
    load: impl Fn(&[u8]) -> f64,
    store: impl Fn(f64) -> Vec<u8>,
) -> Vec<u8> {
    let len = parts[0].len();
    let mut out = Vec::with_capacity(len);
    for at in (0..len).step_by(size) {
        let mut values = parts.iter().map(|p| load(&p[at..at + size]));
        let first = values.next().unwrap_or(0.0);
        let combined = values.fold(first, |a, b| match op {
            ReduceOp::Sum | ReduceOp::Avg => a + b,
            ReduceOp::Product => a * b,
            ReduceOp::Min => a.min(b),
            ReduceOp::Max => a.max(b),
        });
        let value = if op == ReduceOp::Avg { combined / parts.len() as f64 } else { combined };
        out.extend_from_slice(&store(value));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_wrap_and_average_toward_zero() {
        let a = [-7i32, 250, i32::MAX];
        let b = [2i32, 3, 1];
        let bytes = |v: &[i32]| v.iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<_>>();
        let (a, b) = (bytes(&a), bytes(&b));
        let read = |v: Vec<u8>| v.chunks(4).map(|c| i32::from_ne_bytes(c.try_into().unwrap())).collect::<Vec<_>>();
        assert_eq!(read(reduce(DType::I32, ReduceOp::Sum, &[&a, &b]).unwrap()), [-5, 253, i32::MIN]);
        assert_eq!(read(reduce(DType::I32, ReduceOp::Avg, &[&a, &b]).unwrap()), [-2, 126, i32::MIN / 2]);
        assert_eq!(read(reduce(DType::I32, ReduceOp::Min, &[&a, &b]).unwrap()), [-7, 3, 1]);
    }

    #[test]
    fn half_floats_round_once() {
        let a = f16::from_f32(1.0).to_ne_bytes();
        let b = f16::from_f32(0.000_488_281_25).to_ne_bytes(); // 2^-11: half an ulp of 1.0
        let c = f16::from_f32(0.000_000_059_604_645).to_ne_bytes(); // 2^-24: breaks the tie upwards
        let sum = reduce(DType::F16, ReduceOp::Sum, &[&a, &b, &c]).unwrap();
        assert_eq!(f16::from_ne_bytes(sum.try_into().unwrap()), f16::from_f32(1.000_976_6));
    }

    #[test]
    fn unequal_contributions_are_refused() {
        assert!(reduce(DType::U8, ReduceOp::Sum, &[&[1, 2], &[1]]).is_err());
        assert!(check_dtype("all_reduce", DType::Bool).is_err());
    }
}
