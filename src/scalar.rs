//! [`Scalar`]: a number given to an op or a fill, like a Python number passed to PyTorch.

use crate::dtype::DType;
use half::{bf16, f16};
use std::fmt;

/// A Rust number used as an operand (`t.add(2.0)`) or a fill value.
///
/// Like a Python number in PyTorch it is a *wrapped* operand for type promotion: it only decides
/// the result's category (an `i64` tensor plus `2.5` is a `float32` tensor, the default float
/// type), never its width (`f16` tensor plus `2.5` stays `f16`; `i32` tensor plus `7` stays `i32`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    /// `True` / `False`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A floating-point number.
    Float(f64),
}

impl Scalar {
    /// The dtype PyTorch gives this scalar when it takes part in promotion as a wrapped number:
    /// `Bool`, `I64`, or the default float type `F32`.
    pub fn wrapped_dtype(self) -> DType {
        match self {
            Scalar::Bool(_) => DType::Bool,
            Scalar::Int(_) => DType::I64,
            Scalar::Float(_) => DType::DEFAULT_FLOAT,
        }
    }

    /// The dtype a tensor made from this scalar alone gets (`torch.tensor(x)`): `Bool`, `I64`, `F32`.
    pub fn default_dtype(self) -> DType {
        self.wrapped_dtype()
    }

    /// The value as `f64` (`true` is 1).
    pub fn to_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => b as u8 as f64,
            Scalar::Int(i) => i as f64,
            Scalar::Float(f) => f,
        }
    }

    /// The value as `i64` (floats truncate toward zero, saturating; NaN is 0).
    pub fn to_i64(self) -> i64 {
        match self {
            Scalar::Bool(b) => b as i64,
            Scalar::Int(i) => i,
            Scalar::Float(f) => f as i64,
        }
    }

    /// Whether the value is non-zero.
    pub fn to_bool(self) -> bool {
        match self {
            Scalar::Bool(b) => b,
            Scalar::Int(i) => i != 0,
            Scalar::Float(f) => f != 0.0,
        }
    }

    /// Whether this is a floating-point scalar.
    pub fn is_float(self) -> bool {
        matches!(self, Scalar::Float(_))
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Bool(b) => write!(f, "{b}"),
            Scalar::Int(i) => write!(f, "{i}"),
            Scalar::Float(x) => write!(f, "{x}"),
        }
    }
}

macro_rules! from_number {
    ($($t:ty => $variant:ident($conv:expr)),* $(,)?) => {$(
        impl From<$t> for Scalar {
            fn from(x: $t) -> Scalar {
                #[allow(clippy::redundant_closure_call)]
                Scalar::$variant(($conv)(x))
            }
        }
    )*};
}

from_number!(
    bool => Bool(|x| x),
    u8 => Int(|x: u8| x as i64),
    i32 => Int(|x: i32| x as i64),
    i64 => Int(|x| x),
    u32 => Int(|x: u32| x as i64),
    usize => Int(|x: usize| x as i64),
    f32 => Float(|x: f32| x as f64),
    f64 => Float(|x| x),
    f16 => Float(|x: f16| x.to_f64()),
    bf16 => Float(|x: bf16| x.to_f64()),
);
