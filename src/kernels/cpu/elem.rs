//! Element access for the CPU kernels: the [`Elem`] trait over the Rust types of every dtype,
//! PyTorch's conversions between them, strided iteration, and gather / scatter between strided
//! byte views and dense vectors; an [`Operand`] is such a view with its bytes.

use crate::dtype::DType;
use crate::kernel::BufferView;
use crate::scalar::Scalar;
use half::{bf16, f16};

/// An input's bytes and its view, rebased so that element 0 is the first byte.
#[derive(Clone, Copy)]
pub(crate) struct Operand<'a> {
    pub bytes: &'a [u8],
    pub view: &'a BufferView,
}

/// `value` converted to `dtype`, as the bytes of one element.
pub(crate) fn scalar_bytes(value: Scalar, dtype: DType) -> Vec<u8> {
    let mut out = vec![0u8; dtype.size()];
    store_scalar(value, dtype, &mut out);
    out
}

/// `value` converted to `dtype`, written as one element into `out[..dtype.size()]` (as
/// [`scalar_bytes`], without allocating). Panics if `out` is shorter.
#[inline]
pub(crate) fn store_scalar(value: Scalar, dtype: DType, out: &mut [u8]) {
    match value {
        Scalar::Bool(b) => encode_into(&[b], dtype, out),
        Scalar::Int(i) => encode_into(&[i], dtype, out),
        Scalar::Float(f) => encode_into(&[f], dtype, out),
    }
}

/// The three value domains the kernels compute in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Float,
    Int,
    Bool,
}

pub(crate) fn kind(dtype: DType) -> Kind {
    if dtype.is_float() {
        Kind::Float
    } else if dtype.is_bool() {
        Kind::Bool
    } else {
        Kind::Int
    }
}

/// A Rust element type with PyTorch's conversions: float → integer truncates toward zero
/// (saturating at `i64`, NaN → 0) and then wraps into narrower integers; integers wrap;
/// anything → bool is `!= 0`.
pub(crate) trait Elem: Copy + Send + Sync + 'static {
    const KIND: Kind;
    /// Element `i` of `bytes` (native endian).
    fn load(bytes: &[u8], i: usize) -> Self;
    /// Stores into element `i` of `bytes`.
    fn store(self, bytes: &mut [u8], i: usize);
    fn to_f64(self) -> f64;
    fn to_i64(self) -> i64;
    fn to_bool(self) -> bool;
    fn from_f64(x: f64) -> Self;
    fn from_i64(x: i64) -> Self;
    fn from_bool(x: bool) -> Self;
}

macro_rules! number {
    ($t:ty, $size:expr, $kind:ident, to_f64: $tf:expr, to_i64: $ti:expr, from_f64: $ff:expr, from_i64: $fi:expr) => {
        impl Elem for $t {
            const KIND: Kind = Kind::$kind;
            #[inline]
            fn load(bytes: &[u8], i: usize) -> Self {
                let mut a = [0u8; $size];
                a.copy_from_slice(&bytes[i * $size..(i + 1) * $size]);
                <$t>::from_ne_bytes(a)
            }
            #[inline]
            fn store(self, bytes: &mut [u8], i: usize) {
                bytes[i * $size..(i + 1) * $size].copy_from_slice(&self.to_ne_bytes());
            }
            #[inline]
            fn to_f64(self) -> f64 {
                #[allow(clippy::redundant_closure_call)]
                ($tf)(self)
            }
            #[inline]
            fn to_i64(self) -> i64 {
                #[allow(clippy::redundant_closure_call)]
                ($ti)(self)
            }
            #[inline]
            fn to_bool(self) -> bool {
                self.to_f64() != 0.0
            }
            #[inline]
            fn from_f64(x: f64) -> Self {
                #[allow(clippy::redundant_closure_call)]
                ($ff)(x)
            }
            #[inline]
            fn from_i64(x: i64) -> Self {
                #[allow(clippy::redundant_closure_call)]
                ($fi)(x)
            }
            #[inline]
            fn from_bool(x: bool) -> Self {
                Self::from_i64(x as i64)
            }
        }
    };
}

/// `x` rounded to `f32` toward odd (toward zero, the last bit set when inexact): rounding that
/// once more to a type of at most 22 significant bits is correctly rounded, which `half`'s own
/// `from_f64` is not (it drops the low 32 bits of the `f64` before rounding).
pub(crate) fn f64_to_f32_odd(x: f64) -> f32 {
    let f = x as f32;
    if x.is_nan() || f as f64 == x {
        return f;
    }
    // The neighbour of `f` toward zero when `f` rounded away from zero (or overflowed).
    let rz = if f.is_infinite() || (f as f64).abs() > x.abs() { f32::from_bits(f.to_bits() - 1) } else { f };
    f32::from_bits(rz.to_bits() | 1)
}

/// `x` correctly rounded (to nearest, ties to even) to `f16`.
pub(crate) fn f64_to_f16(x: f64) -> f16 {
    f16::from_f32(f64_to_f32_odd(x))
}

/// `x` correctly rounded (to nearest, ties to even) to `bf16`.
pub(crate) fn f64_to_bf16(x: f64) -> bf16 {
    bf16::from_f32(f64_to_f32_odd(x))
}

number!(f32, 4, Float, to_f64: |x: f32| x as f64, to_i64: |x: f32| x as i64,
    from_f64: |x: f64| x as f32, from_i64: |x: i64| x as f32);
number!(f64, 8, Float, to_f64: |x: f64| x, to_i64: |x: f64| x as i64,
    from_f64: |x: f64| x, from_i64: |x: i64| x as f64);
number!(f16, 2, Float, to_f64: |x: f16| x.to_f64(), to_i64: |x: f16| x.to_f64() as i64,
    from_f64: f64_to_f16, from_i64: |x: i64| f64_to_f16(x as f64));
number!(bf16, 2, Float, to_f64: |x: bf16| x.to_f64(), to_i64: |x: bf16| x.to_f64() as i64,
    from_f64: f64_to_bf16, from_i64: |x: i64| f64_to_bf16(x as f64));
number!(i32, 4, Int, to_f64: |x: i32| x as f64, to_i64: |x: i32| x as i64,
    from_f64: |x: f64| x as i64 as i32, from_i64: |x: i64| x as i32);
number!(i64, 8, Int, to_f64: |x: i64| x as f64, to_i64: |x: i64| x,
    from_f64: |x: f64| x as i64, from_i64: |x: i64| x);
number!(u8, 1, Int, to_f64: |x: u8| x as f64, to_i64: |x: u8| x as i64,
    from_f64: |x: f64| x as i64 as u8, from_i64: |x: i64| x as u8);

impl Elem for bool {
    const KIND: Kind = Kind::Bool;
    #[inline]
    fn load(bytes: &[u8], i: usize) -> Self {
        bytes[i] != 0
    }
    #[inline]
    fn store(self, bytes: &mut [u8], i: usize) {
        bytes[i] = self as u8;
    }
    fn to_f64(self) -> f64 {
        self as u8 as f64
    }
    fn to_i64(self) -> i64 {
        self as i64
    }
    fn to_bool(self) -> bool {
        self
    }
    fn from_f64(x: f64) -> Self {
        x != 0.0
    }
    fn from_i64(x: i64) -> Self {
        x != 0
    }
    fn from_bool(x: bool) -> Self {
        x
    }
}

/// Converts one element, as PyTorch's `static_cast`-based conversions do.
#[inline]
pub(crate) fn cast<S: Elem, D: Elem>(s: S) -> D {
    match S::KIND {
        Kind::Float => D::from_f64(s.to_f64()),
        Kind::Int => D::from_i64(s.to_i64()),
        Kind::Bool => D::from_bool(s.to_bool()),
    }
}

/// Runs `$body` with `$T` the Rust element type of `$dtype`.
macro_rules! with_dtype {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            $crate::dtype::DType::Bool => {
                type $T = bool;
                $body
            }
            $crate::dtype::DType::U8 => {
                type $T = u8;
                $body
            }
            $crate::dtype::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::dtype::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::dtype::DType::F16 => {
                type $T = half::f16;
                $body
            }
            $crate::dtype::DType::BF16 => {
                type $T = half::bf16;
                $body
            }
            $crate::dtype::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::dtype::DType::F64 => {
                type $T = f64;
                $body
            }
        }
    };
}
pub(crate) use with_dtype;

/// Calls `f` with the element offset of every element of a strided view, in row-major order.
#[inline]
pub(crate) fn for_each_offset(shape: &[usize], strides: &[usize], offset: usize, mut f: impl FnMut(usize)) {
    if shape.contains(&0) {
        return;
    }
    let Some(last) = shape.len().checked_sub(1) else {
        f(offset);
        return;
    };
    let (n, step) = (shape[last], strides[last]);
    let mut idx = vec![0usize; last];
    let mut base = offset;
    loop {
        if step == 1 {
            (base..base + n).for_each(&mut f);
        } else {
            (0..n).for_each(|i| f(base + i * step));
        }
        let mut d = last;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            base += strides[d];
            if idx[d] < shape[d] {
                break;
            }
            base -= strides[d] * shape[d];
            idx[d] = 0;
        }
    }
}

/// The view's elements in row-major order, converted to `T`.
pub(crate) fn gather<T: Elem>(bytes: &[u8], v: &BufferView) -> Vec<T> {
    let mut out = Vec::with_capacity(v.numel());
    with_dtype!(v.dtype, S => for_each_offset(&v.shape, &v.strides, v.offset, |o| out.push(cast::<S, T>(S::load(bytes, o)))));
    out
}

/// Like [`gather`], with every element first converted to `via` (the op's compute dtype), so an
/// `i64` operand of an `f32` op is rounded to `f32` first, as PyTorch does.
pub(crate) fn gather_via<T: Elem>(bytes: &[u8], v: &BufferView, via: DType) -> Vec<T> {
    let mut out = gather::<T>(bytes, v);
    if v.dtype != via {
        round_via(&mut out, via);
    }
    out
}

/// The view's elements, each converted to `via` and then to `to`, as dense bytes of `to`.
pub(crate) fn gather_as(bytes: &[u8], v: &BufferView, via: DType, to: DType) -> Vec<u8> {
    with_dtype!(to, T => encode(&gather_via::<T>(bytes, v, via), to))
}

/// Converts every value to `dtype` and back (rounding a wider `f64` to `f32`, wrapping an
/// `i64` into `i32`, …).
pub(crate) fn round_via<T: Elem>(values: &mut [T], dtype: DType) {
    with_dtype!(dtype, C => values.iter_mut().for_each(|x| *x = cast::<C, T>(cast::<T, C>(*x))));
}

/// Writes `values` (row-major) into the view's elements, converted to its dtype.
pub(crate) fn scatter<T: Elem>(values: &[T], bytes: &mut [u8], v: &BufferView) {
    let mut it = values.iter();
    with_dtype!(v.dtype, D => for_each_offset(&v.shape, &v.strides, v.offset, |o| {
        if let Some(&x) = it.next() {
            cast::<T, D>(x).store(bytes, o);
        }
    }));
}

/// `values` converted to `dtype`, as dense native-endian bytes.
pub(crate) fn encode<T: Elem>(values: &[T], dtype: DType) -> Vec<u8> {
    let mut out = vec![0u8; values.len() * dtype.size()];
    encode_into(values, dtype, &mut out);
    out
}

/// [`encode`] into `out[..values.len() * dtype.size()]`.
#[inline]
fn encode_into<T: Elem>(values: &[T], dtype: DType, out: &mut [u8]) {
    with_dtype!(dtype, D => values.iter().enumerate().for_each(|(i, &x)| cast::<T, D>(x).store(out, i)));
}

/// The view's elements as dense bytes (same dtype).
pub(crate) fn gather_bytes(bytes: &[u8], v: &BufferView) -> Vec<u8> {
    let size = v.dtype.size();
    let mut out = Vec::with_capacity(v.numel() * size);
    for_each_offset(&v.shape, &v.strides, v.offset, |o| out.extend_from_slice(&bytes[o * size..(o + 1) * size]));
    out
}

/// Writes dense bytes of the view's dtype into the view's elements.
pub(crate) fn scatter_bytes(dense: &[u8], bytes: &mut [u8], v: &BufferView) {
    let size = v.dtype.size();
    let mut chunks = dense.chunks_exact(size);
    for_each_offset(&v.shape, &v.strides, v.offset, |o| {
        if let Some(c) = chunks.next() {
            bytes[o * size..(o + 1) * size].copy_from_slice(c);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::DevicePtr;

    #[test]
    fn conversions_follow_pytorch() {
        assert_eq!(cast::<f32, i32>(-2.7), -2, "float → int truncates toward zero");
        assert_eq!(cast::<i64, u8>(-1), 255, "integers wrap");
        assert_eq!(cast::<f64, u8>(-1.5), 255, "float → u8 goes through int64, then wraps");
        assert!(cast::<f32, bool>(0.1));
        assert!(!cast::<i64, bool>(0));
        assert_eq!(cast::<bool, f32>(true), 1.0);
        assert_eq!(cast::<f64, f16>(1.0 / 3.0), f16::from_f64(1.0 / 3.0));
        // Just above a tie by less than the low 32 bits of an f64: rounds up (half's from_f64
        // would see a tie and round to even).
        let above = f64::from_bits(1.00390625f64.to_bits() + 1);
        assert_eq!(f64_to_bf16(above).to_f64(), 1.0078125);
        assert_eq!(f64_to_bf16(1.00390625).to_f64(), 1.0, "a tie rounds to even");
        let f32_above = f32::from_bits(0x3FE4_8001); // a tie plus one f32 ulp: its deciding bit is below bit 20
        assert_eq!(f64_to_bf16(f32_above as f64), bf16::from_f32(f32_above));
        assert_eq!(f64_to_f16(1e6).to_f64(), f64::INFINITY);
        assert_eq!(f64_to_bf16(-1e39).to_f64(), f64::NEG_INFINITY);
        assert!(f64_to_bf16(f64::NAN).is_nan());
        assert_eq!(cast::<f64, i64>(f64::NAN), 0);
    }

    #[test]
    fn strided_iteration_is_row_major() {
        let mut seen = vec![];
        for_each_offset(&[2, 3], &[1, 2], 5, |o| seen.push(o));
        assert_eq!(seen, [5, 7, 9, 6, 8, 10]);
        seen.clear();
        for_each_offset(&[], &[], 3, |o| seen.push(o));
        assert_eq!(seen, [3], "a 0-dim view has one element");
        seen.clear();
        for_each_offset(&[2, 0], &[1, 1], 0, |o| seen.push(o));
        assert!(seen.is_empty());
    }

    #[test]
    fn gather_and_scatter_round_trip() {
        let src: Vec<u8> = [1i32, 2, 3, 4, 5, 6].iter().flat_map(|x| x.to_ne_bytes()).collect();
        let t = BufferView {
            ptr: DevicePtr(0),
            dtype: DType::I32,
            shape: [3, 2].into(),
            strides: [1, 3].into(),
            offset: 0,
        };
        assert_eq!(gather::<f64>(&src, &t), [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        let mut out = vec![0u8; 24];
        scatter(&[1.5f64, 4.0, 2.0, 5.0, 3.0, 6.0], &mut out, &t);
        assert_eq!(gather::<i64>(&out, &t), [1, 4, 2, 5, 3, 6]);
        let mut rounded = vec![16_777_217.0f64];
        round_via(&mut rounded, DType::F32);
        assert_eq!(rounded, [16_777_216.0]);
    }
}
