//! [`DType`]: the element types of tensors, PyTorch's type promotion, and the [`Element`] trait
//! that ties each to its Rust type.

use half::{bf16, f16};
use std::fmt;

/// The element type of a tensor (`torch.dtype`).
///
/// Promotion follows PyTorch: [`DType::promote_types`] for two dtypes, and
/// [`crate::result_type`] for operands of an op (tensors of one or more dimensions win
/// over zero-dimensional tensors, which win over Rust scalars, within the same category).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// `torch.bool`: one byte, 0 or 1.
    Bool,
    /// `torch.uint8`.
    U8,
    /// `torch.int32`.
    I32,
    /// `torch.int64` (PyTorch's default integer type).
    I64,
    /// `torch.float16` (IEEE half).
    F16,
    /// `torch.bfloat16`.
    BF16,
    /// `torch.float32` (PyTorch's default floating-point type).
    F32,
    /// `torch.float64`.
    F64,
}

impl DType {
    /// Every dtype, from `Bool` to `F64`.
    pub const ALL: [DType; 8] =
        [DType::Bool, DType::U8, DType::I32, DType::I64, DType::F16, DType::BF16, DType::F32, DType::F64];

    /// The default floating-point dtype (`torch.get_default_dtype()`): `F32`.
    pub const DEFAULT_FLOAT: DType = DType::F32;

    /// Bytes per element (`element_size()`).
    pub fn size(self) -> usize {
        match self {
            DType::Bool | DType::U8 => 1,
            DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    /// The name after `torch.`: `"float32"`, `"int64"`, `"bool"`, …
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "uint8",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F32 => "float32",
            DType::F64 => "float64",
        }
    }

    /// PyTorch's scalar-type name, as its error messages spell it: `"Float"`, `"Long"`, …
    pub fn scalar_type_name(self) -> &'static str {
        match self {
            DType::Bool => "Bool",
            DType::U8 => "Byte",
            DType::I32 => "Int",
            DType::I64 => "Long",
            DType::F16 => "Half",
            DType::BF16 => "BFloat16",
            DType::F32 => "Float",
            DType::F64 => "Double",
        }
    }

    /// Whether this is a floating-point dtype (`is_floating_point`).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    /// Whether this is an integer dtype (`Bool` excluded).
    pub fn is_int(self) -> bool {
        matches!(self, DType::U8 | DType::I32 | DType::I64)
    }

    /// Whether this is `Bool`.
    pub fn is_bool(self) -> bool {
        self == DType::Bool
    }

    /// `torch.promote_types(a, b)`: the smallest dtype both convert to without losing their
    /// category (`i64 + f32 → f32`, `u8 + i32 → i32`, `f16 + bf16 → f32`, `bool + x → x`).
    pub fn promote_types(a: DType, b: DType) -> DType {
        use DType::*;
        if a == b {
            return a;
        }
        match (a, b) {
            (Bool, x) | (x, Bool) => x,
            (F16, BF16) | (BF16, F16) => F32,
            (x, y) if x.is_float() && y.is_float() => x.max(y),
            (x, _) if x.is_float() => x,
            (_, y) if y.is_float() => y,
            // Both integers: the wider one (u8 fits in i32 and i64).
            (x, y) => x.max(y),
        }
    }

    /// PyTorch's `can_cast(from, to)`: whether an op computing `from` may write its result into a
    /// tensor of `to` (no float into integer, no number into bool).
    pub fn can_cast(from: DType, to: DType) -> bool {
        if from.is_float() && !to.is_float() {
            return false;
        }
        !to.is_bool() || from.is_bool()
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A Rust type that is the element type of a [`DType`]: `f32`, `f64`, `half::f16`, `half::bf16`,
/// `i32`, `i64`, `u8`, `bool`. Sealed: these are the only ones.
pub trait Element: Copy + Send + Sync + fmt::Debug + PartialEq + sealed::Sealed + 'static {
    /// The dtype whose elements are this type.
    const DTYPE: DType;
    /// Appends the element's native-endian bytes to `out`.
    fn write_bytes(self, out: &mut Vec<u8>);
    /// Reads an element from exactly [`DType::size`] native-endian bytes (`None` for a slice of
    /// another length, or a bool byte that is not 0 or 1).
    fn read_bytes(bytes: &[u8]) -> Option<Self>;
    /// The element as a [`crate::Scalar`].
    fn to_scalar(self) -> crate::Scalar;
}

macro_rules! element {
    ($t:ty, $dtype:ident, $scalar:ident, $conv:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$dtype;
            fn write_bytes(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_ne_bytes());
            }
            fn read_bytes(bytes: &[u8]) -> Option<Self> {
                Some(<$t>::from_ne_bytes(bytes.try_into().ok()?))
            }
            fn to_scalar(self) -> crate::Scalar {
                #[allow(clippy::redundant_closure_call)]
                crate::Scalar::$scalar(($conv)(self))
            }
        }
    };
}

element!(f32, F32, Float, |x: f32| x as f64);
element!(f64, F64, Float, |x: f64| x);
element!(f16, F16, Float, |x: f16| x.to_f64());
element!(bf16, BF16, Float, |x: bf16| x.to_f64());
element!(i32, I32, Int, |x: i32| x as i64);
element!(i64, I64, Int, |x: i64| x);
element!(u8, U8, Int, |x: u8| x as i64);

impl sealed::Sealed for bool {}
impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn write_bytes(self, out: &mut Vec<u8>) {
        out.push(self as u8);
    }
    fn read_bytes(bytes: &[u8]) -> Option<Self> {
        match bytes {
            [0] => Some(false),
            [1] => Some(true),
            _ => None,
        }
    }
    fn to_scalar(self) -> crate::Scalar {
        crate::Scalar::Bool(self)
    }
}

#[cfg(test)]
mod tests {
    use super::DType::{self, *};

    #[test]
    fn promotion_matches_pytorch() {
        let cases = [
            (I64, F32, F32),
            (U8, I32, I32),
            (U8, I64, I64),
            (I32, I64, I64),
            (Bool, Bool, Bool),
            (Bool, U8, U8),
            (Bool, F16, F16),
            (F16, BF16, F32),
            (F16, F32, F32),
            (BF16, F64, F64),
            (I64, F16, F16),
            (I32, BF16, BF16),
            (F32, F64, F64),
        ];
        for (a, b, want) in cases {
            assert_eq!(DType::promote_types(a, b), want, "{a} + {b}");
            assert_eq!(DType::promote_types(b, a), want, "{b} + {a}");
        }
        for a in DType::ALL {
            for b in DType::ALL {
                let p = DType::promote_types(a, b);
                assert!(DType::can_cast(a, p) && DType::can_cast(b, p), "{a} and {b} cast to {p}");
            }
        }
    }

    #[test]
    fn sizes_and_names() {
        assert_eq!(F16.size(), 2);
        assert_eq!(I64.size(), 8);
        assert_eq!(BF16.to_string(), "bfloat16");
        assert_eq!(I64.scalar_type_name(), "Long");
        assert!(!DType::can_cast(F32, I64));
        assert!(!DType::can_cast(I64, Bool));
        assert!(DType::can_cast(I64, F16));
    }
}
