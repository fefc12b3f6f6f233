//! [`Layout`]: shape, strides (in elements) and offset of a tensor over its storage, with the
//! pure shape logic of views: dims, broadcasting, reshape-as-view (PyTorch's `computeStride`).

use crate::error::{Error, Result};
use crate::kernel::Dims;
use std::borrow::Cow;

/// Shape, strides and storage offset, all in elements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    pub shape: Dims,
    pub strides: Dims,
    pub offset: usize,
}

/// Row-major strides of a dense tensor of `shape`.
pub(crate) fn contiguous_strides(shape: &[usize]) -> Dims {
    let mut strides = Dims::from_elem(0, shape.len());
    let mut acc = 1usize;
    for (s, &n) in strides.iter_mut().zip(shape).rev() {
        *s = acc;
        acc = acc.saturating_mul(n.max(1));
    }
    strides
}

/// The number of elements of `shape`, or [`Error::InvalidShape`] when it overflows.
pub(crate) fn checked_numel(op: &'static str, shape: &[usize]) -> Result<usize> {
    shape.iter().try_fold(1usize, |acc, &n| acc.checked_mul(n)).ok_or_else(|| Error::InvalidShape {
        op,
        shape: shape.iter().map(|&n| n as i64).collect(),
        reason: "the number of elements overflows".into(),
    })
}

/// `dim` (negative counts from the end) as an index into `ndim` dimensions. Like PyTorch, a
/// 0-dim tensor accepts `0` and `-1`.
pub(crate) fn normalize_dim(op: &'static str, dim: isize, ndim: usize) -> Result<usize> {
    let bound = ndim.max(1) as isize;
    if dim < -bound || dim >= bound {
        return Err(Error::InvalidDim { op, dim: dim as i64, ndim });
    }
    Ok(if dim < 0 { (dim + bound) as usize } else { dim as usize })
}

/// Like [`normalize_dim`] for a dimension that may also be one past the end (`unsqueeze`).
pub(crate) fn normalize_insert_dim(op: &'static str, dim: isize, ndim: usize) -> Result<usize> {
    normalize_dim(op, dim, ndim + 1)
}

/// Normalized, sorted dims with no repeats; empty `dims` means every dimension.
pub(crate) fn normalize_dims(op: &'static str, dims: &[isize], ndim: usize) -> Result<Vec<usize>> {
    if dims.is_empty() {
        return Ok((0..ndim).collect());
    }
    let mut out = Vec::with_capacity(dims.len());
    for &d in dims {
        let n = normalize_dim(op, d, ndim)?;
        if out.contains(&n) {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("dim {n} appears multiple times in the list of dims"),
            });
        }
        out.push(n);
    }
    out.sort_unstable();
    if ndim == 0 {
        out.clear(); // a 0-dim tensor's dim 0 / -1 is itself
    }
    Ok(out)
}

/// The broadcast shape of `a` and `b` (NumPy rules, aligned from the right).
pub(crate) fn broadcast_shapes(op: &'static str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let x = if i < a.len() { a[a.len() - 1 - i] } else { 1 };
        let y = if i < b.len() { b[b.len() - 1 - i] } else { 1 };
        out[n - 1 - i] = match (x, y) {
            _ if x == y => x,
            (1, _) => y,
            (_, 1) => x,
            _ => return Err(Error::ShapeMismatch { op, lhs: a.to_vec(), rhs: b.to_vec() }),
        };
    }
    Ok(out)
}

/// [`broadcast_shapes`], borrowing `a` when the shapes are equal (the common case).
pub(crate) fn broadcast_shapes_cow<'a>(op: &'static str, a: &'a [usize], b: &[usize]) -> Result<Cow<'a, [usize]>> {
    if a == b {
        Ok(Cow::Borrowed(a))
    } else {
        broadcast_shapes(op, a, b).map(Cow::Owned)
    }
}

impl Layout {
    /// A dense row-major layout of `shape` from offset 0.
    pub fn contiguous(shape: &[usize]) -> Layout {
        Layout { shape: shape.into(), strides: contiguous_strides(shape), offset: 0 }
    }

    pub fn numel(&self) -> usize {
        // Shapes are checked when made (`checked_numel`), so this never saturates in practice.
        self.shape.iter().fold(1usize, |a, &n| a.saturating_mul(n))
    }

    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// Dense and row-major (size-1 dimensions may have any stride).
    pub fn is_contiguous(&self) -> bool {
        crate::kernel::dims::is_row_major(&self.shape, &self.strides)
    }

    /// Whether two elements share one address (a stride-0 dimension of size > 1), which makes
    /// the layout unwritable (PyTorch's `has_internal_overlap`).
    pub fn has_internal_overlap(&self) -> bool {
        self.shape.iter().zip(&self.strides).any(|(&n, &s)| n > 1 && s == 0)
    }

    /// The strides that view this layout's elements as `shape` without copying, if any
    /// (PyTorch's `computeStride`).
    pub fn view_strides(&self, shape: &[usize]) -> Option<Dims> {
        if self.numel() == 0 || self.shape.is_empty() {
            return Some(contiguous_strides(shape));
        }
        let (old_shape, old_strides) = (&self.shape, &self.strides);
        let mut new_strides = Dims::from_elem(0, shape.len());
        let mut view_d = shape.len() as isize - 1;
        let mut chunk_base = *old_strides.last()?;
        let (mut tensor_numel, mut view_numel) = (1usize, 1usize);
        for tensor_d in (0..old_shape.len()).rev() {
            tensor_numel *= old_shape[tensor_d];
            let boundary = tensor_d == 0
                || (old_shape[tensor_d - 1] != 1
                    && old_strides[tensor_d - 1] != tensor_numel.saturating_mul(chunk_base));
            if boundary {
                while view_d >= 0 && (view_numel < tensor_numel || shape[view_d as usize] == 1) {
                    new_strides[view_d as usize] = view_numel.saturating_mul(chunk_base);
                    view_numel *= shape[view_d as usize];
                    view_d -= 1;
                }
                if view_numel != tensor_numel {
                    return None;
                }
                if tensor_d > 0 {
                    chunk_base = old_strides[tensor_d - 1];
                    tensor_numel = 1;
                    view_numel = 1;
                }
            }
        }
        (view_d == -1).then_some(new_strides)
    }

    /// The layout broadcast to `shape` (stride 0 for new or size-1 dimensions), or
    /// [`Error::ShapeMismatch`] naming `op`.
    pub fn broadcast_to(&self, op: &'static str, shape: &[usize]) -> Result<Layout> {
        let mismatch = || Error::ShapeMismatch { op, lhs: self.shape.to_vec(), rhs: shape.to_vec() };
        if shape.len() < self.ndim() {
            return Err(mismatch());
        }
        checked_numel(op, shape)?;
        let lead = shape.len() - self.ndim();
        let mut strides = Dims::from_elem(0, shape.len());
        for (i, &n) in shape.iter().enumerate() {
            if i < lead {
                continue;
            }
            let (own, stride) = (self.shape[i - lead], self.strides[i - lead]);
            strides[i] = match own {
                _ if own == n => stride,
                1 => 0,
                _ => return Err(mismatch()),
            };
        }
        Ok(Layout { shape: shape.into(), strides, offset: self.offset })
    }

    /// Dimensions `a` and `b` swapped (already normalized).
    pub fn transposed(&self, a: usize, b: usize) -> Layout {
        let mut l = self.clone();
        l.shape.swap(a, b);
        l.strides.swap(a, b);
        l
    }

    /// Dimensions in the (normalized, complete) `order`.
    pub fn permuted(&self, order: &[usize]) -> Layout {
        Layout {
            shape: order.iter().map(|&d| self.shape[d]).collect(),
            strides: order.iter().map(|&d| self.strides[d]).collect(),
            offset: self.offset,
        }
    }

    /// Elements `start, start + step, …` (below `end`) of dimension `dim` (all checked).
    pub fn sliced(&self, dim: usize, start: usize, end: usize, step: usize) -> Layout {
        let mut l = self.clone();
        l.offset += start * self.strides[dim];
        l.shape[dim] = if end > start { (end - start).div_ceil(step) } else { 0 };
        l.strides[dim] *= step;
        l
    }

    /// Without dimension `dim`, which has size 1.
    pub fn without_dim(&self, dim: usize) -> Layout {
        let mut l = self.clone();
        l.shape.remove(dim);
        l.strides.remove(dim);
        l
    }

    /// With a size-1 dimension inserted at `dim` (0..=ndim).
    pub fn with_dim(&self, dim: usize) -> Layout {
        let mut l = self.clone();
        let stride = if dim < self.ndim() { self.shape[dim] * self.strides[dim] } else { 1 };
        l.shape.insert(dim, 1);
        l.strides.insert(dim, stride.max(1));
        l
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dims_normalize_like_pytorch() {
        assert_eq!(normalize_dim("t", -1, 3).unwrap(), 2);
        assert_eq!(normalize_dim("t", 0, 0).unwrap(), 0);
        assert!(matches!(normalize_dim("t", 3, 3), Err(Error::InvalidDim { dim: 3, ndim: 3, .. })));
        assert!(matches!(normalize_dim("t", -4, 3), Err(Error::InvalidDim { .. })));
        assert_eq!(normalize_dims("t", &[-1, 0], 3).unwrap(), [0, 2]);
        assert_eq!(normalize_dims("t", &[], 2).unwrap(), [0, 1]);
        assert!(normalize_dims("t", &[1, -1], 2).is_err(), "repeats are refused");
    }

    #[test]
    fn broadcasting() {
        assert_eq!(broadcast_shapes("t", &[2, 1, 3], &[4, 1]).unwrap(), [2, 4, 3]);
        assert_eq!(broadcast_shapes("t", &[], &[5]).unwrap(), [5]);
        let e = broadcast_shapes("add", &[2, 3], &[4]).unwrap_err();
        assert_eq!(e, Error::ShapeMismatch { op: "add", lhs: vec![2, 3], rhs: vec![4] });
        assert!(e.to_string().contains("(3) must match the size of tensor b (4) at non-singleton dimension 1"), "{e}");
        let l = Layout::contiguous(&[3, 1]).broadcast_to("expand", &[2, 3, 4]).unwrap();
        assert_eq!(l.strides, [0, 1, 0]);
    }

    #[test]
    fn views_as_other_shapes() {
        let t = Layout::contiguous(&[2, 3, 4]);
        assert_eq!(t.view_strides(&[6, 4]), Some([4, 1].into()));
        let tr = t.transposed(0, 1); // [3, 2, 4], strides [4, 12, 1]
        assert_eq!(tr.view_strides(&[3, 8]), None, "a transposed pair of dims cannot merge");
        assert_eq!(tr.view_strides(&[3, 2, 2, 2]), Some([4, 12, 2, 1].into()));
        assert_eq!(Layout::contiguous(&[]).view_strides(&[1, 1]), Some([1, 1].into()));
    }

    #[test]
    fn slices_and_dims() {
        let t = Layout::contiguous(&[4, 6]);
        let s = t.sliced(1, 1, 6, 2);
        assert_eq!((s.shape.to_vec(), s.strides.to_vec(), s.offset), (vec![4, 3], vec![6, 2], 1));
        assert!(!s.is_contiguous());
        assert_eq!(t.with_dim(2).shape, [4, 6, 1]);
        assert_eq!(t.with_dim(0).strides, [24, 6, 1]);
        assert!(Layout::contiguous(&[1, 3]).broadcast_to("e", &[2, 3]).unwrap().has_internal_overlap());
    }
}
