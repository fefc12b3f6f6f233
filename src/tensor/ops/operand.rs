//! [`Operand`] (a tensor or a Rust number) and PyTorch's [`result_type`].

use crate::dtype::DType;
use crate::scalar::Scalar;
use crate::tensor::Tensor;
use half::{bf16, f16};

/// The second operand of an op: a tensor, or a number (`t.add(&u)`, `t.add(2.0)`).
#[derive(Debug, Clone, Copy)]
pub enum Operand<'a> {
    /// A tensor.
    Tensor(&'a Tensor),
    /// A number, promoted as a wrapped scalar (see [`Scalar`]).
    Scalar(Scalar),
}

impl<'a> Operand<'a> {
    /// The tensor, if this is one.
    pub fn tensor(self) -> Option<&'a Tensor> {
        match self {
            Operand::Tensor(t) => Some(t),
            Operand::Scalar(_) => None,
        }
    }

    /// The shape the operand broadcasts as (`[]` for a number).
    pub fn shape(&self) -> &[usize] {
        match self {
            Operand::Tensor(t) => t.shape(),
            Operand::Scalar(_) => &[],
        }
    }
}

impl<'a> From<&'a Tensor> for Operand<'a> {
    fn from(t: &'a Tensor) -> Self {
        Operand::Tensor(t)
    }
}

impl From<Scalar> for Operand<'_> {
    fn from(s: Scalar) -> Self {
        Operand::Scalar(s)
    }
}

macro_rules! scalar_operand {
    ($($t:ty),*) => {$(
        impl From<$t> for Operand<'_> {
            fn from(x: $t) -> Self {
                Operand::Scalar(Scalar::from(x))
            }
        }
    )*};
}

scalar_operand!(bool, u8, i32, i64, f32, f64, f16, bf16);

/// A Rust number that may stand on the right of a tensor operator (`&t * 2.0`, `&t + x` for an
/// `f32` `x`): every type [`Scalar`] is made from. One generic operator impl over this trait
/// (rather than one per type) lets a literal's type be inferred after the operator is chosen,
/// so `(&t * 2.0).unwrap()` compiles.
pub trait Number: Into<Scalar> + Copy {}

macro_rules! number {
    ($($t:ty),*) => {$( impl Number for $t {} )*};
}

number!(bool, u8, i32, i64, u32, usize, f32, f64, f16, bf16, Scalar);

/// PyTorch's `torch.result_type` over several operands: dtypes are promoted within three
/// categories — tensors with at least one dimension, 0-dim tensors, numbers — and a lower
/// category only matters when it is of a higher kind (bool < integer < floating point):
/// `i32 tensor + i64 0-dim tensor → i32`, `i64 tensor + 2.5 → f32`, `f16 tensor + 2.5 → f16`,
/// `bool tensor + 1 → i64`.
pub fn result_type(operands: &[Operand<'_>]) -> DType {
    let (mut dim, mut zero, mut wrapped) = (None, None, None);
    let update = |slot: &mut Option<DType>, d: DType| {
        *slot = Some(slot.map_or(d, |c| DType::promote_types(c, d)));
    };
    for op in operands {
        match op {
            Operand::Tensor(t) if t.dim() > 0 => update(&mut dim, t.dtype()),
            Operand::Tensor(t) => update(&mut zero, t.dtype()),
            Operand::Scalar(s) => update(&mut wrapped, s.wrapped_dtype()),
        }
    }
    combine(dim, combine(zero, wrapped)).unwrap_or(DType::DEFAULT_FLOAT)
}

/// PyTorch's `combine_categories`: the higher category wins unless the lower is of a higher
/// kind (a float below an integer, anything below a bool).
fn combine(higher: Option<DType>, lower: Option<DType>) -> Option<DType> {
    match (higher, lower) {
        (None, l) => l,
        (h, None) => h,
        (Some(h), Some(l)) => Some(if h.is_float() {
            h
        } else if h.is_bool() || l.is_float() {
            DType::promote_types(h, l)
        } else {
            h
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use DType::*;

    #[test]
    fn categories_combine_like_pytorch() {
        assert_eq!(combine(Some(I32), Some(I64)), Some(I32), "an int 0-dim tensor does not widen an int tensor");
        assert_eq!(combine(Some(I64), Some(F32)), Some(F32), "a float scalar makes an int tensor float");
        assert_eq!(combine(Some(F16), Some(F64)), Some(F16), "a float scalar does not widen a float tensor");
        assert_eq!(combine(Some(Bool), Some(I64)), Some(I64), "an int scalar makes a bool tensor int");
        assert_eq!(combine(Some(U8), Some(Bool)), Some(U8));
        assert_eq!(combine(None, Some(I64)), Some(I64));
    }
}
