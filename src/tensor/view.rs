//! Views: new shapes and strides over the same storage, no data moved (except `reshape` of a
//! layout that cannot be viewed, which copies, as PyTorch does).

use super::layout::{normalize_dim, normalize_insert_dim, Layout};
use super::range::{SliceBounds, SliceRange};
use super::{IntoShape, Tensor};
use crate::error::{Error, Result};

impl Tensor {
    /// The same elements as `shape` (one entry may be `-1`, inferred), sharing storage when the
    /// strides allow it and copying otherwise (`t.reshape(shape)`).
    pub fn reshape(&self, shape: impl IntoShape) -> Result<Tensor> {
        let shape = shape.into_shape().infer("reshape", self.numel())?;
        match self.layout.view_strides(&shape) {
            Some(strides) => Ok(self.with_layout(Layout { shape, strides, offset: self.layout.offset })),
            None => {
                let c = self.contiguous()?;
                Ok(c.with_layout(Layout::contiguous(&shape)))
            }
        }
    }

    /// The same elements as `shape` (one entry may be `-1`), always sharing storage;
    /// [`Error::InvalidShape`] when the strides do not allow it (`t.view(shape)`; use
    /// [`Tensor::reshape`] then).
    pub fn view(&self, shape: impl IntoShape) -> Result<Tensor> {
        let given = shape.into_shape();
        let shape = given.infer("view", self.numel())?;
        let strides = self.layout.view_strides(&shape).ok_or_else(|| Error::InvalidShape {
            op: "view",
            shape: given.to_vec(),
            reason: format!(
                "view size is not compatible with input tensor's size {:?} and stride {:?} (at least one dimension \
                 spans across two contiguous subspaces); use .reshape(...) instead",
                self.shape(),
                self.stride()
            ),
        })?;
        Ok(self.with_layout(Layout { shape, strides, offset: self.layout.offset }))
    }

    /// All elements in one dimension (`t.flatten()`).
    pub fn flatten(&self) -> Result<Tensor> {
        self.reshape([-1])
    }

    /// Dimensions `dim0` and `dim1` swapped (`t.transpose(dim0, dim1)`).
    pub fn transpose(&self, dim0: isize, dim1: isize) -> Result<Tensor> {
        let n = self.dim();
        let (a, b) = (normalize_dim("transpose", dim0, n)?, normalize_dim("transpose", dim1, n)?);
        if n == 0 {
            return Ok(self.clone());
        }
        Ok(self.with_layout(self.layout.transposed(a, b)))
    }

    /// The transpose of a matrix; vectors and 0-dim tensors are returned as they are (`t.t()`).
    pub fn t(&self) -> Result<Tensor> {
        match self.dim() {
            0 | 1 => Ok(self.clone()),
            2 => self.transpose(0, 1),
            n => Err(Error::InvalidArgument {
                op: "t",
                reason: format!(
                    "t() expects a tensor with <= 2 dimensions, but self is {n}D; use transpose(dim0, dim1)"
                ),
            }),
        }
    }

    /// Dimensions reordered: dimension `i` of the result is dimension `dims[i]` of `self`
    /// (`t.permute(dims)`).
    pub fn permute(&self, dims: &[isize]) -> Result<Tensor> {
        let n = self.dim();
        let bad = |reason: String| Error::InvalidArgument { op: "permute", reason };
        if dims.len() != n {
            return Err(bad(format!(
                "number of dims don't match in permute: the tensor has {n} dimensions but {} were given",
                dims.len()
            )));
        }
        let mut order = Vec::with_capacity(n);
        for &d in dims {
            let d = normalize_dim("permute", d, n)?;
            if order.contains(&d) {
                return Err(bad(format!("repeated dim {d} in permute")));
            }
            order.push(d);
        }
        if n == 0 {
            return Ok(self.clone());
        }
        Ok(self.with_layout(self.layout.permuted(&order)))
    }

    /// `length` elements of dimension `dim` from `start` (`t.narrow(dim, start, length)`).
    pub fn narrow(&self, dim: isize, start: usize, length: usize) -> Result<Tensor> {
        if self.dim() == 0 {
            return Err(Error::InvalidArgument {
                op: "narrow",
                reason: "narrow() cannot be applied to a 0-dim tensor".into(),
            });
        }
        let d = normalize_dim("narrow", dim, self.dim())?;
        let size = self.layout.shape[d];
        if start.checked_add(length).is_none_or(|end| end > size) {
            return Err(Error::InvalidShape {
                op: "narrow",
                shape: self.shape().iter().map(|&n| n as i64).collect(),
                reason: format!("start ({start}) + length ({length}) exceeds dimension size ({size}) of dim {d}"),
            });
        }
        Ok(self.with_layout(self.layout.sliced(d, start, start + length, 1)))
    }

    /// The elements of `range` along dimension `dim` (Python's `t[..., a:b, ...]`): `2..5`,
    /// `3..`, `..=4`, `..`, with negative bounds counting from the end (`-3..`: the last three).
    /// Unlike Python's slices, and like Rust's, a range past the end of the dimension, or one that
    /// starts after it ends, is [`Error::InvalidShape`] (use [`Tensor::narrow`] for start and length).
    pub fn slice(&self, dim: isize, range: impl SliceRange) -> Result<Tensor> {
        self.slice_impl("slice", dim, range.bounds(), 1)
    }

    /// Every `step`-th element of `range` along `dim`, starting at its first (Python's
    /// `t[..., a:b:step, ...]`); `step ≥ 1`. Ranges as in [`Tensor::slice`].
    pub fn slice_step(&self, dim: isize, range: impl SliceRange, step: usize) -> Result<Tensor> {
        self.slice_impl("slice_step", dim, range.bounds(), step)
    }

    fn slice_impl(&self, op: &'static str, dim: isize, range: SliceBounds, step: usize) -> Result<Tensor> {
        if self.dim() == 0 {
            return Err(Error::InvalidArgument { op, reason: format!("{op}() cannot be applied to a 0-dim tensor") });
        }
        if step == 0 {
            return Err(Error::InvalidArgument { op, reason: "slice step must be positive".into() });
        }
        let d = normalize_dim(op, dim, self.dim())?;
        let size = self.layout.shape[d];
        let (start, end) = range.resolve(size).ok_or_else(|| Error::InvalidShape {
            op,
            shape: self.shape().iter().map(|&n| n as i64).collect(),
            reason: format!("range {range} is out of bounds for dimension {d} of size {size}"),
        })?;
        Ok(self.with_layout(self.layout.sliced(d, start, end, step)))
    }

    /// A view with new size-1 dimensions broadcast to `shape` (`-1` keeps a dimension's size;
    /// new leading dimensions are added), sharing storage (`t.expand(shape)`).
    pub fn expand(&self, shape: impl IntoShape) -> Result<Tensor> {
        let target = shape.into_shape().expanded_from(self.shape())?;
        Ok(self.with_layout(self.layout.broadcast_to("expand", &target)?))
    }

    /// A view broadcast to `shape` (`torch.broadcast_to`).
    pub fn broadcast_to(&self, shape: impl IntoShape) -> Result<Tensor> {
        let shape = shape.into_shape();
        Ok(self.with_layout(self.layout.broadcast_to("broadcast_to", shape.sizes("broadcast_to")?)?))
    }

    /// Every size-1 dimension removed (`t.squeeze()`).
    pub fn squeeze(&self) -> Tensor {
        let mut l = self.layout.clone();
        while let Some(d) = l.shape.iter().position(|&n| n == 1) {
            l = l.without_dim(d);
        }
        self.with_layout(l)
    }

    /// Dimension `dim` removed if its size is 1, else the tensor unchanged (`t.squeeze(dim)`).
    pub fn squeeze_dim(&self, dim: isize) -> Result<Tensor> {
        let d = normalize_dim("squeeze", dim, self.dim())?;
        if self.dim() == 0 || self.layout.shape[d] != 1 {
            return Ok(self.clone());
        }
        Ok(self.with_layout(self.layout.without_dim(d)))
    }

    /// A size-1 dimension inserted at `dim` (`-1` appends) (`t.unsqueeze(dim)`).
    pub fn unsqueeze(&self, dim: isize) -> Result<Tensor> {
        let d = normalize_insert_dim("unsqueeze", dim, self.dim())?;
        Ok(self.with_layout(self.layout.with_dim(d)))
    }
}
