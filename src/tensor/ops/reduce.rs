//! Reductions named as PyTorch names them — `sum`, `mean`, `amax` / `amin` (values over dims),
//! `max` / `min` along one dim (values and indices), `max_all` / `min_all` (PyTorch's `t.max()`),
//! `argmax`, `argmin` — and `softmax` / `log_softmax`.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{KernelOp, ReduceOp};
use crate::scalar::Scalar;
use crate::tensor::exec::Exec;
use crate::tensor::layout::{normalize_dim, normalize_dims, Layout};
use crate::tensor::Tensor;

impl Tensor {
    /// Reduces over normalized `dims` into `out_dtype`; `name` is the public op, for errors.
    fn reduce(
        &self,
        name: &'static str,
        op: ReduceOp,
        dims: Vec<usize>,
        keepdim: bool,
        out_dtype: DType,
    ) -> Result<Tensor> {
        if !matches!(op, ReduceOp::Sum | ReduceOp::Mean) {
            self.refuse_empty_groups(name, &dims)?;
        }
        let exec = Exec::on(self.place());
        let out = exec.empty(&self.kept_shape(&dims), out_dtype)?;
        if dims.iter().any(|&d| self.shape()[d] == 0) {
            // Groups of no elements (sum or mean only): PyTorch's identity, 0, and 0 / 0 = NaN for
            // the mean, written here so that no kernel meets a reduction of nothing.
            let value = if op == ReduceOp::Mean { Scalar::Float(f64::NAN) } else { Scalar::Int(0) };
            out.fill_(value)?;
        } else {
            let k = KernelOp::Reduce { op, src: self.buffer_view(), dst: out.buffer_view(), dims: dims.clone() };
            exec.run(&k, &[self, &out])?;
        }
        Ok(self.squeezed(out, &dims, keepdim))
    }

    /// An error if some group over `dims` holds no elements (a reduction without an identity).
    fn refuse_empty_groups(&self, name: &'static str, dims: &[usize]) -> Result<()> {
        if dims.iter().any(|&d| self.shape()[d] == 0) {
            return Err(Error::InvalidArgument {
                op: name,
                reason: format!(
                    "cannot perform reduction function {name} on a tensor with no elements (shape {:?}) because the \
                     operation does not have an identity",
                    self.shape()
                ),
            });
        }
        Ok(())
    }

    /// `self`'s shape with `dims` of size 1.
    fn kept_shape(&self, dims: &[usize]) -> Vec<usize> {
        self.shape().iter().enumerate().map(|(d, &n)| if dims.contains(&d) { 1 } else { n }).collect()
    }

    /// `out` (of [`Tensor::kept_shape`]) without the reduced dims unless `keepdim`.
    fn squeezed(&self, out: Tensor, dims: &[usize], keepdim: bool) -> Tensor {
        if keepdim {
            return out;
        }
        let shape: Vec<usize> =
            self.shape().iter().enumerate().filter(|(d, _)| !dims.contains(d)).map(|(_, &n)| n).collect();
        out.with_layout(Layout::contiguous(&shape))
    }

    /// The sum over `dims` (empty: all), keeping them as size 1 if `keepdim`
    /// (`t.sum(dims, keepdim)`); integers and bools sum into `I64`, as in PyTorch.
    pub fn sum(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        let dims = normalize_dims("sum", dims, self.dim())?;
        let out = if self.dtype().is_float() { self.dtype() } else { DType::I64 };
        self.reduce("sum", ReduceOp::Sum, dims, keepdim, out)
    }

    /// The sum of all elements, a 0-dim tensor (`t.sum()`).
    pub fn sum_all(&self) -> Result<Tensor> {
        self.sum(&[], false)
    }

    /// The mean over `dims` (empty: all) (`t.mean(dims, keepdim)`); floating point only.
    pub fn mean(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        if !self.dtype().is_float() {
            return Err(Error::UnsupportedDType { op: "mean", dtype: self.dtype() });
        }
        let dims = normalize_dims("mean", dims, self.dim())?;
        self.reduce("mean", ReduceOp::Mean, dims, keepdim, self.dtype())
    }

    /// The mean of all elements (`t.mean()`).
    pub fn mean_all(&self) -> Result<Tensor> {
        self.mean(&[], false)
    }

    /// The maximum over `dims` (empty: all), keeping them as size 1 if `keepdim`
    /// (`t.amax(dims, keepdim)`); NaN propagates. Values only: see [`Tensor::max`] for indices.
    pub fn amax(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        let dims = normalize_dims("amax", dims, self.dim())?;
        self.reduce("amax", ReduceOp::Max, dims, keepdim, self.dtype())
    }

    /// The minimum over `dims` (empty: all) (`t.amin(dims, keepdim)`); NaN propagates.
    pub fn amin(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        let dims = normalize_dims("amin", dims, self.dim())?;
        self.reduce("amin", ReduceOp::Min, dims, keepdim, self.dtype())
    }

    /// The maximum of all elements, a 0-dim tensor (PyTorch's `t.max()`); NaN propagates.
    pub fn max_all(&self) -> Result<Tensor> {
        self.reduce("max", ReduceOp::Max, (0..self.dim()).collect(), false, self.dtype())
    }

    /// The minimum of all elements, a 0-dim tensor (PyTorch's `t.min()`).
    pub fn min_all(&self) -> Result<Tensor> {
        self.reduce("min", ReduceOp::Min, (0..self.dim()).collect(), false, self.dtype())
    }

    /// `(values, indices)` of the maximum along `dim` (`torch.max(t, dim, keepdim)`): the values
    /// in `self`'s dtype, the indices `I64`, pointing at the first maximum; a NaN counts as the
    /// maximum and propagates.
    ///
    /// ```
    /// use cudasem::{Device, Tensor};
    /// # fn main() -> cudasem::Result<()> {
    /// let t = Tensor::from_slice(&[1.0f32, 5.0, 5.0, 4.0, 2.0, 0.0], [2, 3], Device::Cpu)?;
    /// let (values, indices) = t.max(1, false)?;
    /// assert_eq!((values.to_vec::<f32>()?, indices.to_vec::<i64>()?), (vec![5.0, 4.0], vec![1, 0]));
    /// # Ok(()) }
    /// ```
    pub fn max(&self, dim: isize, keepdim: bool) -> Result<(Tensor, Tensor)> {
        self.extreme_along("max", true, dim, keepdim)
    }

    /// `(values, indices)` of the minimum along `dim` (`torch.min(t, dim, keepdim)`); indices of
    /// the first minimum, a NaN counts as the minimum.
    pub fn min(&self, dim: isize, keepdim: bool) -> Result<(Tensor, Tensor)> {
        self.extreme_along("min", false, dim, keepdim)
    }

    /// The values and first indices of the maximum (or minimum) along `dim`: one
    /// [`KernelOp::Extreme`], one pass over `self`. Bool tensors are taken too (PyTorch takes
    /// bool here, though its `argmax` does not).
    fn extreme_along(&self, name: &'static str, max: bool, dim: isize, keepdim: bool) -> Result<(Tensor, Tensor)> {
        let dims = normalize_dims(name, &[dim], self.dim())?;
        self.refuse_empty_groups(name, &dims)?;
        let exec = Exec::on(self.place());
        let keep = self.kept_shape(&dims);
        let values = exec.empty(&keep, self.dtype())?;
        let indices = exec.empty(&keep, DType::I64)?;
        let k = KernelOp::Extreme {
            max,
            src: self.buffer_view(),
            values: values.buffer_view(),
            indices: indices.buffer_view(),
            dims: dims.clone(),
        };
        exec.run(&k, &[self, &values, &indices])?;
        Ok((self.squeezed(values, &dims, keepdim), self.squeezed(indices, &dims, keepdim)))
    }

    fn arg(&self, op: ReduceOp, dim: Option<isize>, keepdim: bool) -> Result<Tensor> {
        let dims = match dim {
            Some(d) => normalize_dims(op.name(), &[d], self.dim())?,
            None => (0..self.dim()).collect(),
        };
        if self.dtype().is_bool() {
            return Err(Error::UnsupportedDType { op: op.name(), dtype: DType::Bool });
        }
        self.reduce(op.name(), op, dims, keepdim, DType::I64)
    }

    /// The index of the first maximum along `dim` (`None`: of the flattened tensor), as `I64`
    /// (`t.argmax(dim, keepdim)`); a NaN counts as the maximum.
    pub fn argmax(&self, dim: Option<isize>, keepdim: bool) -> Result<Tensor> {
        self.arg(ReduceOp::ArgMax, dim, keepdim)
    }

    /// The index of the first minimum along `dim` (`None`: of the flattened tensor), as `I64`
    /// (`t.argmin(dim, keepdim)`); a NaN counts as the minimum.
    pub fn argmin(&self, dim: Option<isize>, keepdim: bool) -> Result<Tensor> {
        self.arg(ReduceOp::ArgMin, dim, keepdim)
    }

    fn softmax_impl(&self, dim: isize, log: bool) -> Result<Tensor> {
        let name = if log { "log_softmax" } else { "softmax" };
        if !self.dtype().is_float() {
            return Err(Error::UnsupportedDType { op: name, dtype: self.dtype() });
        }
        let d = normalize_dim(name, dim, self.dim())?;
        if self.dim() == 0 {
            let one = self.unsqueeze(0)?.softmax_impl(0, log)?;
            return Ok(one.with_layout(Layout::contiguous(&[])));
        }
        let exec = Exec::on(self.place());
        let out = exec.empty(self.shape(), self.dtype())?;
        let k = KernelOp::Softmax { src: self.buffer_view(), dst: out.buffer_view(), dim: d, log };
        exec.run(&k, &[self, &out])?;
        Ok(out)
    }

    /// `exp(x) / Σ exp(x)` along `dim` (`torch.softmax(t, dim)`); floating point only. Shifted by
    /// the maximum, as PyTorch's: a −inf element gives 0, and a row of −inf, one holding +inf and
    /// one holding NaN give NaN rows.
    pub fn softmax(&self, dim: isize) -> Result<Tensor> {
        self.softmax_impl(dim, false)
    }

    /// `log(softmax(x))` along `dim`, computed stably (`torch.log_softmax(t, dim)`): `x - max -
    /// log Σ exp(x - max)`, with the NaN rows of [`Tensor::softmax`].
    pub fn log_softmax(&self, dim: isize) -> Result<Tensor> {
        self.softmax_impl(dim, true)
    }
}
