//! The operands of device work: strided views of device (or host) memory.

use super::dims::{self, Dims};
use super::ptr::DevicePtr;
use crate::dtype::DType;

/// A strided view of a buffer: `shape` and `strides` in elements, from element `offset` of `ptr`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferView {
    /// Address of element 0 of the buffer (the view starts `offset` elements further on).
    pub ptr: DevicePtr,
    /// Element type.
    pub dtype: DType,
    /// Size of each dimension.
    pub shape: Dims,
    /// Step of each dimension, in elements (0 for a broadcast dimension).
    pub strides: Dims,
    /// Elements from `ptr` to the view's first element.
    pub offset: usize,
}

impl BufferView {
    /// The view a number operand stands for: one element of `dtype` broadcast to `shape` (every
    /// stride 0) at address 0 — its bytes are not in memory but come with the op
    /// (`KernelOp::BinaryScalar`).
    pub(crate) fn number(dtype: DType, shape: &Dims) -> BufferView {
        BufferView {
            ptr: DevicePtr(0),
            dtype,
            shape: shape.clone(),
            strides: Dims::from_elem(0, shape.len()),
            offset: 0,
        }
    }

    /// Number of elements (saturating at `usize::MAX`; `KernelOp::validate` refuses such views).
    pub fn numel(&self) -> usize {
        self.shape.iter().fold(1usize, |a, &n| a.saturating_mul(n))
    }

    /// Whether the view is dense and row-major (C-contiguous).
    pub fn is_contiguous(&self) -> bool {
        dims::is_row_major(&self.shape, &self.strides)
    }

    /// `(first element, element count)` of the smallest range of the buffer holding every element
    /// of the view; `None` for an empty view or one whose extent overflows.
    pub fn span(&self) -> Option<(usize, usize)> {
        if self.numel() == 0 {
            return None;
        }
        let mut last = self.offset;
        for (&n, &s) in self.shape.iter().zip(&self.strides) {
            last = last.checked_add((n - 1).checked_mul(s)?)?;
        }
        Some((self.offset, last - self.offset + 1))
    }

    /// `(address, bytes)` of [`BufferView::span`].
    pub fn byte_span(&self) -> Option<(DevicePtr, usize)> {
        let (first, len) = self.span()?;
        let size = self.dtype.size();
        Some((self.ptr.offset(first.checked_mul(size)?), len.checked_mul(size)?))
    }
}
