//! `std::ops` operators for tensors.
//!
//! An op can fail (shapes that do not broadcast, tensors on two devices, an unsupported dtype),
//! and the project never panics on bad input, so every operator's `Output` is
//! `Result<Tensor>`: `let c = (&a + &b)?;`, `let d = (&c * 2.0)?;`, `let e = (-&d)?;`. Chains
//! need a `?` per step (`(&(&a + &b)? * &c)?`), or the methods (`a.add(&b)?.mul(&c)?`).
//! Operators take tensors by reference or by value, and numbers on the right: `f64`, `i64` and
//! `bool` only, so that literals infer (`&t * 2.0`, `&t + 1`); for an `f32` or `i32` variable use
//! the methods (`t.mul(x)`), which take any number.

use super::operand::Operand;
use crate::error::Result;
use crate::tensor::Tensor;
use std::ops::{Add, Div, Mul, Neg, Sub};

macro_rules! operator {
    ($trait:ident, $method:ident) => {
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
        operator!(@scalars $trait, $method, f64, i64, bool);
    };
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

operator!(Add, add);
operator!(Sub, sub);
operator!(Mul, mul);
operator!(Div, div);

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
