//! `std::ops` operators for tensors.
//!
//! An op can fail (shapes that do not broadcast, tensors on two devices, an unsupported dtype),
//! and the project never panics on bad input, so every operator's `Output` is
//! `Result<Tensor>`: `let c = (&a + &b)?;`, `let d = (&c * 2.0)?;`, `let e = (-&d)?;`. Chains
//! need a `?` per step (`(&(&a + &b)? * &c)?`), or the methods (`a.add(&b)?.mul(&c)?`).
//! Operators take tensors by reference or by value, and numbers on either side: on the right
//! any [`Number`] (`f64`, `f32`, `i64`, `i32`, `bool`, …: `&t * 2.0`, `&t + x` for an `f32`
//! `x`), on the left `f64` and `i64` (`2.0 * &t`, `1 - &t`). A number promotes as a Python
//! number does (`2 * &float_t` stays float, `2.5 * &int_t` is the default float type). Only two
//! types on the left, because with a third (an `f32` impl beside `f64`) Rust no longer infers
//! a literal there before the result is used: `(2.0 * &t).unwrap()` would not compile. For an
//! `f32` or `i32` variable on the left write `f64::from(x) * &t` or `&t * x` (it commutes).
//! A number on the left means what it does in PyTorch: `1.0 - &t` is `torch.rsub(t, 1.0)`,
//! `2 / &t` divides elementwise, in true division: dividing by zero gives `inf` (`0 / 0`: NaN)
//! for every dtype, an integer tensor dividing into the default float type (as `t / 0` does).

use super::operand::{result_type, Number, Operand};
use crate::dtype::DType;
use crate::error::Result;
use crate::scalar::Scalar;
use crate::tensor::Tensor;
use std::ops::{Add, Div, Mul, Neg, Sub};

/// How an operator with a number on the left is computed (see [`reversed`]).
#[derive(Clone, Copy, PartialEq)]
enum Left {
    /// `add`, `mul`: `n op t` is `t op n`, exactly, in every dtype.
    Commutes,
    /// `sub`: the number as a 0-dim tensor of the promoted dtype.
    Sub,
    /// `div`: the number as a 0-dim tensor of the promoted dtype, or of the default float type
    /// for integers (true division converts both operands).
    Div,
}

/// A binary op as [`reversed`] takes it.
type BinaryFn = for<'a, 'b> fn(&'a Tensor, Operand<'b>) -> Result<Tensor>;

/// `lhs op t` for a number `lhs`, with the result dtype and values of PyTorch's `lhs op t`: a
/// commuting op swaps its operands; otherwise the number becomes a 0-dim tensor on `t`'s device
/// whose dtype already is the promoted one, so promotion gives the same dtype as `t op lhs`.
fn reversed(lhs: Scalar, t: &Tensor, op: BinaryFn, left: Left) -> Result<Tensor> {
    if left == Left::Commutes {
        return op(t, Operand::Scalar(lhs));
    }
    let common = result_type(&[Operand::Scalar(lhs), Operand::Tensor(t)]);
    let dtype = if left == Left::Div && !common.is_float() { DType::DEFAULT_FLOAT } else { common };
    let number = Tensor::full([0usize; 0], lhs, dtype, t.device())?;
    op(&number, Operand::Tensor(t))
}

macro_rules! operator {
    ($trait:ident, $method:ident, $left:expr) => {
        impl<'a> $trait<&'a Tensor> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: &'a Tensor) -> Result<Tensor> {
                Tensor::$method(self, rhs)
            }
        }
        impl $trait<Tensor> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: Tensor) -> Result<Tensor> {
                Tensor::$method(self, &rhs)
            }
        }
        impl<'a> $trait<&'a Tensor> for Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: &'a Tensor) -> Result<Tensor> {
                Tensor::$method(&self, rhs)
            }
        }
        impl $trait<Tensor> for Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: Tensor) -> Result<Tensor> {
                Tensor::$method(&self, &rhs)
            }
        }
        impl<N: Number> $trait<N> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: N) -> Result<Tensor> {
                Tensor::$method(self, Operand::Scalar(rhs.into()))
            }
        }
        impl<N: Number> $trait<N> for Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: N) -> Result<Tensor> {
                Tensor::$method(&self, Operand::Scalar(rhs.into()))
            }
        }
        operator!(@left $trait, $method, $left, f64, i64);
    };
    (@left $trait:ident, $method:ident, $left:expr, $($t:ty),*) => {$(
        impl $trait<&Tensor> for $t {
            type Output = Result<Tensor>;
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                reversed(Scalar::from(self), rhs, |a, b| Tensor::$method(a, b), $left)
            }
        }
        impl $trait<Tensor> for $t {
            type Output = Result<Tensor>;
            fn $method(self, rhs: Tensor) -> Result<Tensor> {
                reversed(Scalar::from(self), &rhs, |a, b| Tensor::$method(a, b), $left)
            }
        }
    )*};
    (@scalars $trait:ident, $method:ident, $($t:ty),*) => {$(
        impl $trait<$t> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: $t) -> Result<Tensor> {
                Tensor::$method(self, Operand::from(rhs))
            }
        }
        impl $trait<$t> for Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: $t) -> Result<Tensor> {
                Tensor::$method(&self, Operand::from(rhs))
            }
        }
    )*};
}

operator!(Add, add, Left::Commutes);
operator!(Sub, sub, Left::Sub);
operator!(Mul, mul, Left::Commutes);
operator!(Div, div, Left::Div);

impl Neg for &Tensor {
    type Output = Result<Tensor>;
    fn neg(self) -> Result<Tensor> {
        Tensor::neg(self)
    }
}

impl Neg for Tensor {
    type Output = Result<Tensor>;
    fn neg(self) -> Result<Tensor> {
        Tensor::neg(&self)
    }
}
