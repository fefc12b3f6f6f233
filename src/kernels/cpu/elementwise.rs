//! Elementwise CPU kernels: fill, cast, strided copy, unary, binary and where.
//!
//! Each gathers its operands into dense vectors in one of three domains (`f64` for floating
//! point, `i64` for integers, `bool`), applies the function, and scatters into the output.

use super::elem::{gather, gather_bytes, gather_via, kind, round_via, scatter, scatter_bytes, Elem, Kind, Operand};
use super::math;
use crate::dtype::DType;
use crate::kernel::{BinaryOp, BufferView, UnaryOp};
use crate::scalar::Scalar;

pub(super) fn fill(out: &mut [u8], dst: &BufferView, value: Scalar) {
    super::elem::with_dtype!(dst.dtype, D => {
        let x: D = match value {
            Scalar::Bool(b) => D::from_bool(b),
            Scalar::Int(i) => D::from_i64(i),
            Scalar::Float(f) => D::from_f64(f),
        };
        super::elem::for_each_offset(&dst.shape, &dst.strides, dst.offset, |o| x.store(out, o));
    });
}

pub(super) fn cast_copy(src: Operand<'_>, out: &mut [u8], dst: &BufferView) {
    if src.view.dtype == dst.dtype {
        return scatter_bytes(&gather_bytes(src.bytes, src.view), out, dst);
    }
    super::elem::with_dtype!(dst.dtype, D => {
        let values = gather::<D>(src.bytes, src.view);
        scatter(&values, out, dst);
    });
}

pub(super) fn copy_strided(src: Operand<'_>, out: &mut [u8], dst: &BufferView) {
    scatter_bytes(&gather_bytes(src.bytes, src.view), out, dst);
}

fn unary_float(op: UnaryOp, x: f64) -> f64 {
    match op {
        UnaryOp::Neg => -x,
        UnaryOp::Abs => x.abs(),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Rsqrt => 1.0 / x.sqrt(),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => math::sigmoid(x),
        UnaryOp::Relu => {
            if x > 0.0 || x.is_nan() {
                x
            } else {
                0.0
            }
        }
        UnaryOp::Gelu => math::gelu(x),
        UnaryOp::GeluTanh => math::gelu_tanh(x),
    }
}

fn unary_int(op: UnaryOp, x: i64) -> i64 {
    match op {
        UnaryOp::Neg => x.wrapping_neg(),
        UnaryOp::Abs => x.wrapping_abs(),
        UnaryOp::Relu => x.max(0),
        // The tensor layer computes every other function in a floating-point dtype.
        _ => x,
    }
}

pub(super) fn unary(op: UnaryOp, src: Operand<'_>, out: &mut [u8], dst: &BufferView) {
    let compute = dst.dtype;
    match kind(compute) {
        Kind::Float => {
            let r: Vec<f64> =
                gather_via::<f64>(src.bytes, src.view, compute).into_iter().map(|x| unary_float(op, x)).collect();
            scatter(&r, out, dst);
        }
        Kind::Int => {
            let r: Vec<i64> =
                gather_via::<i64>(src.bytes, src.view, compute).into_iter().map(|x| unary_int(op, x)).collect();
            scatter(&r, out, dst);
        }
        Kind::Bool => {
            // Bool: abs and relu are the identity (the tensor layer refuses the others).
            let r = gather::<bool>(src.bytes, src.view);
            scatter(&r, out, dst);
        }
    }
}

fn pow_int(base: i64, exp: i64) -> i64 {
    if exp < 0 {
        return match base {
            1 => 1,
            -1 => {
                if exp % 2 == 0 {
                    1
                } else {
                    -1
                }
            }
            _ => 0,
        };
    }
    let (mut result, mut b, mut e) = (1i64, base, exp as u64);
    while e > 0 {
        if e & 1 == 1 {
            result = result.wrapping_mul(b);
        }
        b = b.wrapping_mul(b);
        e >>= 1;
    }
    result
}

fn compare<T: PartialOrd>(op: BinaryOp, a: T, b: T) -> bool {
    match op {
        BinaryOp::Eq => a == b,
        BinaryOp::Ne => a != b,
        BinaryOp::Lt => a < b,
        BinaryOp::Le => a <= b,
        BinaryOp::Gt => a > b,
        _ => a >= b,
    }
}

fn binary_float(op: BinaryOp, a: f64, b: f64) -> f64 {
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Maximum => {
            if a.is_nan() || b.is_nan() {
                f64::NAN
            } else {
                a.max(b)
            }
        }
        BinaryOp::Minimum => {
            if a.is_nan() || b.is_nan() {
                f64::NAN
            } else {
                a.min(b)
            }
        }
        BinaryOp::Pow => a.powf(b),
        _ => compare(op, a, b) as u8 as f64,
    }
}

fn binary_int(op: BinaryOp, a: i64, b: i64) -> i64 {
    match op {
        BinaryOp::Add => a.wrapping_add(b),
        BinaryOp::Sub => a.wrapping_sub(b),
        BinaryOp::Mul => a.wrapping_mul(b),
        // True division always computes in a floating-point dtype; this is a safe fallback.
        BinaryOp::Div => a.checked_div(b).unwrap_or(0),
        BinaryOp::Maximum => a.max(b),
        BinaryOp::Minimum => a.min(b),
        BinaryOp::Pow => pow_int(a, b),
        _ => compare(op, a, b) as i64,
    }
}

fn binary_bool(op: BinaryOp, a: bool, b: bool) -> bool {
    match op {
        BinaryOp::Add | BinaryOp::Maximum => a | b,
        BinaryOp::Mul | BinaryOp::Minimum => a & b,
        BinaryOp::Sub => a ^ b,
        BinaryOp::Div => a,
        BinaryOp::Pow => a | !b,
        _ => compare(op, a, b),
    }
}

/// Compute-domain values of `lhs` and `rhs` converted to `compute`, combined with `f`.
fn combine<T: Elem, R>(lhs: Operand<'_>, rhs: Operand<'_>, compute: DType, f: impl Fn(T, T) -> R) -> Vec<R> {
    let a = gather_via::<T>(lhs.bytes, lhs.view, compute);
    let b = gather_via::<T>(rhs.bytes, rhs.view, compute);
    a.into_iter().zip(b).map(|(x, y)| f(x, y)).collect()
}

pub(super) fn binary(
    op: BinaryOp,
    lhs: Operand<'_>,
    rhs: Operand<'_>,
    compute: DType,
    out: &mut [u8],
    dst: &BufferView,
) {
    if op.is_comparison() {
        let r: Vec<bool> = match kind(compute) {
            Kind::Float => combine::<f64, _>(lhs, rhs, compute, |a, b| compare(op, a, b)),
            Kind::Int => combine::<i64, _>(lhs, rhs, compute, |a, b| compare(op, a, b)),
            Kind::Bool => combine::<bool, _>(lhs, rhs, compute, |a, b| compare(op, a, b)),
        };
        return scatter(&r, out, dst);
    }
    let round = dst.dtype != compute;
    match kind(compute) {
        Kind::Float => {
            let mut r = combine::<f64, _>(lhs, rhs, compute, |a, b| binary_float(op, a, b));
            if round {
                round_via(&mut r, compute);
            }
            scatter(&r, out, dst);
        }
        Kind::Int => {
            let mut r = combine::<i64, _>(lhs, rhs, compute, |a, b| binary_int(op, a, b));
            if round {
                round_via(&mut r, compute);
            }
            scatter(&r, out, dst);
        }
        Kind::Bool => scatter(&combine::<bool, _>(lhs, rhs, compute, |a, b| binary_bool(op, a, b)), out, dst),
    }
}

pub(super) fn select(cond: Operand<'_>, a: Operand<'_>, b: Operand<'_>, out: &mut [u8], dst: &BufferView) {
    let c = gather::<bool>(cond.bytes, cond.view);
    fn pick<T: Elem>(c: &[bool], a: Operand<'_>, b: Operand<'_>, via: DType) -> Vec<T> {
        let (x, y) = (gather_via::<T>(a.bytes, a.view, via), gather_via::<T>(b.bytes, b.view, via));
        c.iter().zip(x.into_iter().zip(y)).map(|(&c, (x, y))| if c { x } else { y }).collect()
    }
    match kind(dst.dtype) {
        Kind::Float => scatter(&pick::<f64>(&c, a, b, dst.dtype), out, dst),
        Kind::Int => scatter(&pick::<i64>(&c, a, b, dst.dtype), out, dst),
        Kind::Bool => scatter(&pick::<bool>(&c, a, b, dst.dtype), out, dst),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_pow_is_pytorchs() {
        assert_eq!(pow_int(3, 4), 81);
        assert_eq!(pow_int(2, -1), 0);
        assert_eq!(pow_int(-1, -3), -1);
        assert_eq!(pow_int(1, -7), 1);
        assert_eq!(pow_int(7, 0), 1);
        assert_eq!(pow_int(2, 64), 0, "wraps");
    }

    #[test]
    fn nan_propagates_through_maximum() {
        assert!(binary_float(BinaryOp::Maximum, f64::NAN, 1.0).is_nan());
        assert!(binary_float(BinaryOp::Minimum, 1.0, f64::NAN).is_nan());
        assert!(unary_float(UnaryOp::Relu, f64::NAN).is_nan());
        assert_eq!(unary_float(UnaryOp::Relu, -2.0), 0.0);
    }

    #[test]
    fn bool_arithmetic_is_logical() {
        assert!(binary_bool(BinaryOp::Add, true, false));
        assert!(!binary_bool(BinaryOp::Mul, true, false));
        assert!(compare(BinaryOp::Lt, false, true));
    }
}
