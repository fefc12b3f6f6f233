//! [`Shape`] and [`IntoShape`]: the one shape argument of every tensor function.
//!
//! Creation (`Tensor::zeros(shape, …)`), views (`reshape`, `view`, `expand`, `broadcast_to`)
//! and pinned buffers all take `impl IntoShape`, so a shape read from one tensor goes straight
//! into another (`x.reshape(y.shape())`). Unsigned forms (`&[usize]`, `[usize; N]`, `Vec<usize>`,
//! `&Vec<usize>`) are plain sizes. Signed forms (`&[i64]`, `[i64; N]`, `Vec<i64>`, and the same
//! for `isize` and `i32`, which is what a literal like `[-1, 4]` is) may hold PyTorch's `-1`
//! where PyTorch allows it: one inferred dimension in `reshape` / `view`, "keep this size" in
//! `expand`. Anywhere else a negative size is [`Error::InvalidShape`] naming the shape.

use crate::error::{Error, Result};
use crate::kernel::Dims;

/// A shape as given to a tensor function: sizes, and `-1` where the function allows it.
///
/// Made from any [`IntoShape`] form (`[2, 3].into_shape()`); functions take `impl IntoShape`,
/// so a `Shape` is rarely named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape(Repr);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Repr {
    /// Every entry a size (the common case: stored inline, nothing allocated).
    Sizes(Dims),
    /// At least one negative entry, as given.
    Signed(Vec<i64>),
}

/// Anything that names a shape: `&[usize]`, `[usize; N]`, `&[usize; N]`, `Vec<usize>`,
/// `&Vec<usize>`, the same with `i64`, `isize` or `i32` entries (which may be `-1`), and
/// [`Shape`] itself.
///
/// ```
/// use cudasem::{DType, Device, Tensor};
/// # fn main() -> cudasem::Result<()> {
/// let x = Tensor::zeros([2, 3, 4], DType::F32, Device::Cpu)?;
/// let y = Tensor::ones(&[6, 4], DType::F32, Device::Cpu)?;
/// assert_eq!(y.reshape(x.shape())?.shape(), [2, 3, 4]); // a shape read from a tensor
/// assert_eq!(x.reshape([-1, 4])?.shape(), [6, 4]); // -1: inferred
/// assert_eq!(x.narrow(2, 0, 1)?.expand([-1, -1, 5])?.shape(), [2, 3, 5]); // -1: kept
/// # Ok(()) }
/// ```
pub trait IntoShape {
    /// The shape.
    fn into_shape(self) -> Shape;
}

impl Shape {
    fn from_signed(entries: &[i64]) -> Shape {
        if entries.iter().all(|&n| n >= 0) {
            // Sizes beyond `usize` (32-bit hosts only) saturate, and then fail as an overflow.
            Shape(Repr::Sizes(entries.iter().map(|&n| usize::try_from(n).unwrap_or(usize::MAX)).collect()))
        } else {
            Shape(Repr::Signed(entries.to_vec()))
        }
    }

    /// The number of dimensions.
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Sizes(d) => d.len(),
            Repr::Signed(v) => v.len(),
        }
    }

    /// Whether the shape has no dimensions (a 0-dim tensor's).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The entries as given, `-1` included (sizes beyond `i64` saturate).
    pub fn to_vec(&self) -> Vec<i64> {
        match &self.0 {
            Repr::Sizes(d) => d.iter().map(|&n| i64::try_from(n).unwrap_or(i64::MAX)).collect(),
            Repr::Signed(v) => v.clone(),
        }
    }

    fn invalid(&self, op: &'static str, reason: String) -> Error {
        Error::InvalidShape { op, shape: self.to_vec(), reason }
    }

    /// The sizes, for a function where every entry is a size (creation, `broadcast_to`): a
    /// negative entry is [`Error::InvalidShape`].
    pub(crate) fn sizes(&self, op: &'static str) -> Result<&[usize]> {
        match &self.0 {
            Repr::Sizes(d) => Ok(d),
            Repr::Signed(v) => {
                let (i, n) = v.iter().enumerate().find(|(_, &n)| n < 0).map(|(i, &n)| (i, n)).unwrap_or((0, 0));
                Err(self.invalid(
                    op,
                    format!(
                        "negative size {n} in dimension {i}: sizes must be >= 0 (-1 is allowed only by reshape, view \
                         and expand)"
                    ),
                ))
            }
        }
    }

    /// The sizes for `numel` elements, one `-1` inferred (`reshape`, `view`).
    pub(crate) fn infer(&self, op: &'static str, numel: usize) -> Result<Dims> {
        let mut out = Dims::new();
        let mut infer = None;
        let mut known = 1usize;
        for (i, n) in self.to_vec().into_iter().enumerate() {
            match n {
                -1 if infer.is_some() => {
                    return Err(self.invalid(op, "only one dimension can be inferred (-1)".into()));
                }
                -1 => infer = Some(i),
                n if n < 0 => return Err(self.invalid(op, format!("invalid size {n} in dimension {i}"))),
                n => {
                    known = usize::try_from(n)
                        .ok()
                        .and_then(|n| known.checked_mul(n))
                        .ok_or_else(|| self.invalid(op, "the number of elements overflows".into()))?;
                }
            }
            out.push(n.max(0) as usize);
        }
        let invalid_for = || self.invalid(op, format!("shape is invalid for input of size {numel}"));
        match infer {
            Some(i) if known != 0 && numel.is_multiple_of(known) => out[i] = numel / known,
            Some(_) => return Err(invalid_for()),
            None if known != numel => return Err(invalid_for()),
            None => {}
        }
        Ok(out)
    }

    /// The sizes of `expand` from a tensor of shape `own`: `-1` keeps the size of a dimension
    /// the tensor has (new leading dimensions need a size).
    pub(crate) fn expanded_from(&self, own: &[usize]) -> Result<Dims> {
        let mismatch = || Error::ShapeMismatch {
            op: "expand",
            lhs: own.to_vec(),
            rhs: self.to_vec().iter().map(|&s| s.max(0) as usize).collect(),
        };
        if let Repr::Sizes(d) = &self.0 {
            return if d.len() < own.len() { Err(mismatch()) } else { Ok(d.clone()) };
        }
        let given = self.to_vec();
        if given.len() < own.len() {
            return Err(mismatch());
        }
        let lead = given.len() - own.len();
        let mut out = Dims::new();
        for (i, &n) in given.iter().enumerate() {
            out.push(match n {
                -1 if i >= lead => own[i - lead],
                -1 => {
                    return Err(
                        self.invalid("expand", format!("-1 is not allowed in a leading, non-existing dimension {i}"))
                    )
                }
                n if n < 0 => return Err(self.invalid("expand", format!("invalid size {n} in dimension {i}"))),
                n => n as usize,
            });
        }
        Ok(out)
    }
}

impl IntoShape for Shape {
    fn into_shape(self) -> Shape {
        self
    }
}

impl IntoShape for &Shape {
    fn into_shape(self) -> Shape {
        self.clone()
    }
}

impl IntoShape for &[usize] {
    fn into_shape(self) -> Shape {
        Shape(Repr::Sizes(self.into()))
    }
}

impl<const N: usize> IntoShape for [usize; N] {
    fn into_shape(self) -> Shape {
        Shape(Repr::Sizes(self.as_slice().into()))
    }
}

impl<const N: usize> IntoShape for &[usize; N] {
    fn into_shape(self) -> Shape {
        Shape(Repr::Sizes(self.as_slice().into()))
    }
}

impl IntoShape for Vec<usize> {
    fn into_shape(self) -> Shape {
        Shape(Repr::Sizes(self.into()))
    }
}

impl IntoShape for &Vec<usize> {
    fn into_shape(self) -> Shape {
        Shape(Repr::Sizes(self.as_slice().into()))
    }
}

impl IntoShape for &Dims {
    fn into_shape(self) -> Shape {
        Shape(Repr::Sizes(self.clone()))
    }
}

/// The signed forms. Arrays are implemented for ranks 1 to 8 only, so that an empty literal
/// (`&[]`, a 0-dim shape) has one meaning: `[usize; 0]`.
macro_rules! signed_shapes {
    ($($t:ty),*) => {$(
        impl IntoShape for &[$t] {
            fn into_shape(self) -> Shape {
                Shape::from_signed(&self.iter().map(|&n| n as i64).collect::<Vec<_>>())
            }
        }
        impl IntoShape for Vec<$t> {
            fn into_shape(self) -> Shape {
                self.as_slice().into_shape()
            }
        }
        impl IntoShape for &Vec<$t> {
            fn into_shape(self) -> Shape {
                self.as_slice().into_shape()
            }
        }
        signed_shapes!(@arrays $t; 1 2 3 4 5 6 7 8);
    )*};
    (@arrays $t:ty; $($n:literal)*) => {$(
        impl IntoShape for [$t; $n] {
            fn into_shape(self) -> Shape {
                Shape::from_signed(&self.map(|n| n as i64))
            }
        }
        impl IntoShape for &[$t; $n] {
            fn into_shape(self) -> Shape {
                Shape::from_signed(&self.map(|n| n as i64))
            }
        }
    )*};
}

signed_shapes!(i64, isize, i32);

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(s: impl IntoShape) -> Shape {
        s.into_shape()
    }

    fn dims(s: impl IntoShape, numel: usize) -> Result<Vec<usize>> {
        s.into_shape().infer("reshape", numel).map(Dims::into_vec)
    }

    #[test]
    fn every_form_is_one_shape() {
        let v = vec![2usize, 3];
        let want = sh([2usize, 3]);
        assert_eq!(sh(&v), want);
        assert_eq!(sh(v.clone()), want);
        assert_eq!(sh(v.as_slice()), want);
        assert_eq!(sh([2, 3]), want, "literals (i32) with sizes only are sizes");
        assert_eq!(sh(&[2i64, 3][..]), want);
        assert_eq!(sh(vec![2isize, 3]), want);
        assert_eq!(sh([]).len(), 0, "an empty literal is the 0-dim shape");
    }

    #[test]
    fn minus_one_is_inferred_once() {
        assert_eq!(dims([-1, 4], 12).unwrap(), [3, 4]);
        assert_eq!(dims([2usize, 6], 12).unwrap(), [2, 6]);
        assert_eq!(
            dims([0, -1], 0).unwrap_err().to_string(),
            "reshape: invalid shape [0, -1]: shape is invalid for input of size 0"
        );
        assert!(dims([5, -1], 12).is_err());
        assert!(dims([3, 5], 12).is_err());
        let e = dims([-1, -1], 12).unwrap_err();
        assert_eq!(
            e,
            Error::InvalidShape {
                op: "reshape",
                shape: vec![-1, -1],
                reason: "only one dimension can be inferred (-1)".into()
            }
        );
        assert!(matches!(dims([2, -3], 6), Err(Error::InvalidShape { .. })));
    }

    #[test]
    fn sizes_refuse_negative_entries() {
        assert_eq!(sh([2, 3]).sizes("zeros").unwrap(), [2, 3]);
        let e = sh([2, -1]).sizes("zeros").unwrap_err();
        assert!(matches!(&e, Error::InvalidShape { op: "zeros", shape, .. } if *shape == [2, -1]), "{e:?}");
        assert!(e.to_string().contains("[2, -1]") && e.to_string().contains("negative size -1 in dimension 1"), "{e}");
    }

    #[test]
    fn expand_keeps_sizes_for_minus_one() {
        assert_eq!(sh([2, -1, 4]).expanded_from(&[3, 1]).unwrap().into_vec(), [2, 3, 4]);
        assert!(matches!(sh([-1, 3, 1]).expanded_from(&[3, 1]), Err(Error::InvalidShape { .. })));
        assert!(matches!(sh([-2, 1]).expanded_from(&[3, 1]), Err(Error::InvalidShape { .. })));
        assert!(matches!(sh([1usize]).expanded_from(&[3, 1]), Err(Error::ShapeMismatch { .. })));
    }
}
