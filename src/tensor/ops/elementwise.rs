//! Elementwise ops: binary (with broadcasting and type promotion), their in-place forms,
//! unary functions, and `where_cond` (`torch.where`).

use super::operand::{result_type, Operand};
use crate::driver::DevicePtr;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{BinaryOp, DenseBinary, KernelOp, UnaryOp};
use crate::runtime::{current_of, Stream};
use crate::scalar::Scalar;
use crate::tensor::exec::{Exec, Place};
use crate::tensor::layout::broadcast_shapes_cow;
use crate::tensor::Tensor;
use std::borrow::Cow;

/// `(compute dtype, output dtype)` of a binary op whose operands promote to `common`.
fn binary_dtypes(op: BinaryOp, common: DType) -> Result<(DType, DType)> {
    match op {
        BinaryOp::Sub | BinaryOp::Pow if common.is_bool() => {
            Err(Error::UnsupportedDType { op: op.name(), dtype: common })
        }
        BinaryOp::Div => {
            let f = if common.is_float() { common } else { DType::DEFAULT_FLOAT };
            Ok((f, f))
        }
        op if op.is_comparison() => Ok((common, DType::Bool)),
        _ => Ok((common, common)),
    }
}

/// The dtype a number operand is converted to: the promoted dtype, except in true division,
/// which converts both operands to its floating compute dtype first (PyTorch: a `uint8` tensor
/// of 15 divided by -3 is -5.0, not 15 / 253).
fn number_dtype(op: BinaryOp, common: DType, compute: DType) -> DType {
    if op == BinaryOp::Div {
        compute
    } else {
        common
    }
}

/// The right operand of the dense lane: a dense tensor (whose address the launch takes), or a
/// number given with the launch.
#[derive(Clone, Copy)]
enum RhsOf<'a> {
    Tensor(&'a Tensor),
    Number(Scalar),
}

/// The operand where `exec` runs: tensors admitted (0-dim CPU tensors copied to the device),
/// numbers as 0-dim tensors of `dtype`.
fn materialize<'a>(exec: &Exec, operand: Operand<'a>, dtype: DType) -> Result<Cow<'a, Tensor>> {
    match operand {
        Operand::Tensor(t) => exec.admit(t),
        Operand::Scalar(s) => exec.scalar(s, dtype).map(Cow::Owned),
    }
}

/// Where a binary op over `t` and `other` runs ([`Exec::for_operands`] of the tensors among them).
fn exec_for(name: &'static str, t: &Tensor, other: Operand<'_>) -> Result<Exec> {
    match other.tensor() {
        Some(o) => Exec::for_operands(name, &[t, o]),
        None => Exec::for_operands(name, &[t]),
    }
}

impl Tensor {
    fn binary(&self, op: BinaryOp, other: Operand<'_>) -> Result<Tensor> {
        match other {
            Operand::Tensor(o) if self.matches(o) => self.binary_same(op, o),
            Operand::Scalar(value) => match self.dense_alone() {
                Some(d) => {
                    // A dense device tensor and a number: the driver's short path, the number
                    // given with the launch.
                    let common = result_type(&[Operand::Tensor(self), other]);
                    let (compute, out_dtype) = binary_dtypes(op, common)?;
                    let stream = current_of(d)?;
                    let out = Tensor::empty_on(self.shape(), out_dtype, d, &stream)?;
                    self.launch_dense_rhs(
                        &stream,
                        op,
                        compute,
                        &out,
                        (DevicePtr(0), number_dtype(op, common, compute)),
                        RhsOf::Number(value),
                    )?;
                    Ok(out)
                }
                None => self.binary_general(op, other),
            },
            _ => self.binary_general(op, other),
        }
    }

    /// The common case of [`binary`](Self::binary): a tensor of the same dtype and shape on the
    /// same device. Nothing promotes or broadcasts and both operands are where the op runs, so the
    /// general path's answers are known: the dtype is `self`'s, the shape too, and no operand moves.
    fn binary_same(&self, op: BinaryOp, o: &Tensor) -> Result<Tensor> {
        let (compute, out_dtype) = binary_dtypes(op, self.dtype())?;
        if let Some(d) = self.dense_with(o) {
            let stream = current_of(d)?;
            let out = Tensor::empty_on(self.shape(), out_dtype, d, &stream)?;
            self.launch_dense(&stream, op, compute, &out, o)?;
            return Ok(out);
        }
        let exec = Exec::on(self.place());
        let out = exec.empty(self.shape(), out_dtype)?;
        let k = KernelOp::Binary { op, lhs: self.buffer_view(), rhs: o.buffer_view(), dst: out.buffer_view(), compute };
        exec.run(&k, &[self, o, &out])?;
        Ok(out)
    }

    /// Whether `o` has `self`'s dtype, shape and place: an op over both needs no promotion,
    /// broadcasting or moving.
    fn matches(&self, o: &Tensor) -> bool {
        o.dtype() == self.dtype() && o.shape() == self.shape() && o.place() == self.place()
    }

    /// The CUDA device of `self` and `o` when both are one dense run there (same dtype and
    /// shape, checked by the caller): the driver's short path takes them, no views.
    fn dense_with(&self, o: &Tensor) -> Option<usize> {
        self.dense_alone().filter(|_| o.is_contiguous())
    }

    /// Queues `dst = self op o` over dense operands of one CUDA device on its current `stream`.
    fn launch_dense(&self, stream: &Stream, op: BinaryOp, compute: DType, dst: &Tensor, o: &Tensor) -> Result<()> {
        self.launch_dense_rhs(stream, op, compute, dst, (DevicePtr(o.data_ptr()), o.dtype()), RhsOf::Tensor(o))
    }

    /// [`launch_dense`](Self::launch_dense) with the right operand as the driver takes it: an
    /// address and a dtype (of `rhs_tensor`), or a number converted to that dtype (`rhs_value`).
    fn launch_dense_rhs(
        &self,
        stream: &Stream,
        op: BinaryOp,
        compute: DType,
        dst: &Tensor,
        rhs: (DevicePtr, DType),
        rhs_of: RhsOf<'_>,
    ) -> Result<()> {
        let (rhs_value, rhs_tensor) = match rhs_of {
            RhsOf::Tensor(t) => (None, Some(t)),
            RhsOf::Number(v) => (Some(v), None),
        };
        let k = DenseBinary {
            op,
            compute,
            n: self.numel(),
            dst: (DevicePtr(dst.data_ptr()), dst.dtype()),
            lhs: (DevicePtr(self.data_ptr()), self.dtype()),
            rhs,
            rhs_value,
        };
        match rhs_tensor {
            Some(o) => stream.launch_dense_binary(&k, &[self, o, dst]),
            None => stream.launch_dense_binary(&k, &[self, dst]),
        }
    }

    /// The CUDA device of `self` when it is one dense run there (for an op with a number).
    fn dense_alone(&self) -> Option<usize> {
        match self.place() {
            Place::Cuda(d) if self.is_contiguous() => Some(d),
            _ => None,
        }
    }

    fn binary_general(&self, op: BinaryOp, other: Operand<'_>) -> Result<Tensor> {
        let name = op.name();
        let common = result_type(&[Operand::Tensor(self), other]);
        let (compute, out_dtype) = binary_dtypes(op, common)?;
        let shape = broadcast_shapes_cow(name, self.shape(), other.shape())?;
        let exec = exec_for(name, self, other)?;
        let a = exec.admit(self)?;
        let out = exec.empty(&shape, out_dtype)?;
        let lhs = a.broadcast_view(name, &shape)?;
        let dst = out.buffer_view();
        if let Operand::Scalar(value) = other {
            // The number goes with the launch: no 0-dim tensor to make and fill first.
            let rhs_dtype = number_dtype(op, common, compute);
            let k = KernelOp::BinaryScalar { op, lhs, value, rhs_dtype, dst, compute };
            exec.run(&k, &[&a, &out])?;
            return Ok(out);
        }
        let b = materialize(&exec, other, common)?;
        let k = KernelOp::Binary { op, lhs, rhs: b.broadcast_view(name, &shape)?, dst, compute };
        exec.run(&k, &[&a, &b, &out])?;
        Ok(out)
    }

    fn binary_(&self, name: &'static str, op: BinaryOp, other: Operand<'_>) -> Result<()> {
        self.check_writable(name)?;
        let common = result_type(&[Operand::Tensor(self), other]);
        let (compute, out_dtype) = binary_dtypes(op, common)?;
        if !DType::can_cast(out_dtype, self.dtype()) {
            return Err(Error::CannotCast { op: name, from: out_dtype, to: self.dtype() });
        }
        // An input sharing memory with `self` other than element for element is read as it was.
        let other_copy = match other {
            Operand::Tensor(o) => Some(self.unaliased(o)?),
            Operand::Scalar(_) => None,
        };
        let other = other_copy.as_deref().map_or(other, Operand::Tensor);
        // The driver's short path: a dense device `self` with a matching dense tensor or a number.
        match other {
            Operand::Tensor(o) if self.matches(o) => {
                if let Some(d) = self.dense_with(o) {
                    return self.launch_dense(&current_of(d)?, op, compute, self, o);
                }
            }
            Operand::Scalar(value) => {
                if let Some(d) = self.dense_alone() {
                    let rhs = (DevicePtr(0), number_dtype(op, common, compute));
                    return self.launch_dense_rhs(&current_of(d)?, op, compute, self, rhs, RhsOf::Number(value));
                }
            }
            Operand::Tensor(_) => {}
        }
        if *broadcast_shapes_cow(name, self.shape(), other.shape())? != *self.shape() {
            return Err(Error::ShapeMismatch { op: name, lhs: other.shape().to_vec(), rhs: self.shape().to_vec() });
        }
        let exec = exec_for(name, self, other)?;
        if exec.place != self.place() {
            // Only possible for a 0-dim CPU `self` and a device operand: the output cannot move.
            return Err(Error::DeviceMismatch { op: name, lhs: self.device(), rhs: exec.place.device() });
        }
        if let Operand::Scalar(value) = other {
            let (lhs, dst) = (self.buffer_view(), self.buffer_view());
            let rhs_dtype = number_dtype(op, common, compute);
            return exec.run(&KernelOp::BinaryScalar { op, lhs, value, rhs_dtype, dst, compute }, &[self]);
        }
        let b = materialize(&exec, other, common)?;
        let k = KernelOp::Binary {
            op,
            lhs: self.buffer_view(),
            rhs: b.broadcast_view(name, self.shape())?,
            dst: self.buffer_view(),
            compute,
        };
        exec.run(&k, &[self, &b])
    }

    /// `self + other`, broadcast, promoted (`torch.add`); logical or on bool.
    pub fn add<'a>(&self, other: impl Into<Operand<'a>>) -> Result<Tensor> {
        self.binary(BinaryOp::Add, other.into())
    }

    /// `self - other` (`torch.sub`); not for bool.
    pub fn sub<'a>(&self, other: impl Into<Operand<'a>>) -> Result<Tensor> {
        self.binary(BinaryOp::Sub, other.into())
    }

    /// `self * other` (`torch.mul`); logical and on bool.
    pub fn mul<'a>(&self, other: impl Into<Operand<'a>>) -> Result<Tensor> {
        self.binary(BinaryOp::Mul, other.into())
    }

    /// True division `self / other` (`torch.div`): integer operands give the default float type.
    pub fn div<'a>(&self, other: impl Into<Operand<'a>>) -> Result<Tensor> {
        self.binary(BinaryOp::Div, other.into())
    }

    /// Elementwise maximum (`torch.maximum`); NaN propagates.
    pub fn maximum<'a>(&self, other: impl Into<Operand<'a>>) -> Result<Tensor> {
        self.binary(BinaryOp::Maximum, other.into())
    }

    /// Elementwise minimum (`torch.minimum`); NaN propagates.
    pub fn minimum<'a>(&self, other: impl Into<Operand<'a>>) -> Result<Tensor> {
        self.binary(BinaryOp::Minimum, other.into())
    }

    /// `self ^ other` (`torch.pow`); integers wrap, and an integer to a negative power is 0
    /// unless the base is ±1.
    pub fn pow<'a>(&self, other: impl Into<Operand<'a>>) -> Result<Tensor> {
        self.binary(BinaryOp::Pow, other.into())
    }

    /// `self == other` → bool (`torch.eq`).
    pub fn eq<'a>(&self, other: impl Into<Operand<'a>>) -> Result<Tensor> {
        self.binary(BinaryOp::Eq, other.into())
    }

    /// `self != other` → bool (`torch.ne`).
    pub fn ne<'a>(&self, other: impl Into<Operand<'a>>) -> Result<Tensor> {
        self.binary(BinaryOp::Ne, other.into())
    }

    /// `self < other` → bool (`torch.lt`).
    pub fn lt<'a>(&self, other: impl Into<Operand<'a>>) -> Result<Tensor> {
        self.binary(BinaryOp::Lt, other.into())
    }

    /// `self <= other` → bool (`torch.le`).
    pub fn le<'a>(&self, other: impl Into<Operand<'a>>) -> Result<Tensor> {
        self.binary(BinaryOp::Le, other.into())
    }

    /// `self > other` → bool (`torch.gt`).
    pub fn gt<'a>(&self, other: impl Into<Operand<'a>>) -> Result<Tensor> {
        self.binary(BinaryOp::Gt, other.into())
    }

    /// `self >= other` → bool (`torch.ge`).
    pub fn ge<'a>(&self, other: impl Into<Operand<'a>>) -> Result<Tensor> {
        self.binary(BinaryOp::Ge, other.into())
    }

    /// `self += other` in place (`t.add_(other)`): `other` broadcasts to `self`'s shape, and the
    /// promoted result must be storable in `self`'s dtype ([`Error::CannotCast`]).
    pub fn add_<'a>(&self, other: impl Into<Operand<'a>>) -> Result<()> {
        self.binary_("add_", BinaryOp::Add, other.into())
    }

    /// `self -= other` in place (`t.sub_(other)`).
    pub fn sub_<'a>(&self, other: impl Into<Operand<'a>>) -> Result<()> {
        self.binary_("sub_", BinaryOp::Sub, other.into())
    }

    /// `self *= other` in place (`t.mul_(other)`).
    pub fn mul_<'a>(&self, other: impl Into<Operand<'a>>) -> Result<()> {
        self.binary_("mul_", BinaryOp::Mul, other.into())
    }

    /// `self /= other` in place (`t.div_(other)`); `self` must be floating point.
    pub fn div_<'a>(&self, other: impl Into<Operand<'a>>) -> Result<()> {
        self.binary_("div_", BinaryOp::Div, other.into())
    }

    fn unary(&self, op: UnaryOp) -> Result<Tensor> {
        let dtype = self.dtype();
        let out_dtype = match op {
            UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu if dtype.is_bool() => {
                return Err(Error::UnsupportedDType { op: op.name(), dtype })
            }
            UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu => dtype,
            UnaryOp::Gelu | UnaryOp::GeluTanh if !dtype.is_float() => {
                return Err(Error::UnsupportedDType { op: op.name(), dtype })
            }
            // Integer inputs of floating-point functions give the default float type.
            _ if !dtype.is_float() => DType::DEFAULT_FLOAT,
            _ => dtype,
        };
        let exec = Exec::on(self.place());
        let out = self.empty_like_layout(&exec, out_dtype)?;
        exec.run(&KernelOp::Unary { op, src: self.buffer_view(), dst: out.buffer_view() }, &[self, &out])?;
        Ok(out)
    }

    /// `-self` (`torch.neg`); not for bool.
    pub fn neg(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Neg)
    }

    /// `|self|` (`torch.abs`); not for bool.
    pub fn abs(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Abs)
    }

    /// `e^self` (`torch.exp`); integers give the default float type.
    pub fn exp(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Exp)
    }

    /// Natural logarithm (`torch.log`).
    pub fn log(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Log)
    }

    /// Square root (`torch.sqrt`).
    pub fn sqrt(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Sqrt)
    }

    /// `1 / sqrt(self)` (`torch.rsqrt`).
    pub fn rsqrt(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Rsqrt)
    }

    /// Sine (`torch.sin`).
    pub fn sin(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Sin)
    }

    /// Cosine (`torch.cos`).
    pub fn cos(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Cos)
    }

    /// Hyperbolic tangent (`torch.tanh`).
    pub fn tanh(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Tanh)
    }

    /// The logistic function (`torch.sigmoid`).
    pub fn sigmoid(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Sigmoid)
    }

    /// `max(self, 0)` (`torch.relu`); not for bool.
    pub fn relu(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Relu)
    }

    /// GELU with the exact normal CDF (`torch.nn.functional.gelu`, `approximate='none'`);
    /// floating-point dtypes only.
    pub fn gelu(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Gelu)
    }

    /// GELU's tanh approximation in one elementwise kernel (`F.gelu(x, approximate='tanh')`,
    /// [`crate::nn::functional::gelu`]); floating-point dtypes only, half types computed in `f32`.
    pub(crate) fn gelu_tanh(&self) -> Result<Tensor> {
        self.unary(UnaryOp::GeluTanh)
    }

    /// `cond ? a : b` elementwise, all three broadcast (`torch.where(cond, a, b)`, in PyTorch's
    /// argument order; not named `where_`, which PyTorch's convention would read as in-place);
    /// `a` and `b` are tensors or numbers. `cond` must be bool, the result has
    /// `result_type(a, b)`, and the op runs on `cond`'s device.
    ///
    /// ```
    /// use cudasem::{Device, Tensor};
    /// # fn main() -> cudasem::Result<()> {
    /// let x = Tensor::from_slice(&[-1.0f32, 2.0, -3.0], [3], Device::Cpu)?;
    /// let y = Tensor::where_cond(&x.gt(0.0)?, &x, 0.0)?;
    /// assert_eq!(y.to_vec::<f32>()?, [0.0, 2.0, 0.0]);
    /// # Ok(()) }
    /// ```
    pub fn where_cond<'a, 'b>(cond: &Tensor, a: impl Into<Operand<'a>>, b: impl Into<Operand<'b>>) -> Result<Tensor> {
        let (a, b) = (a.into(), b.into());
        if cond.dtype() != DType::Bool {
            return Err(Error::DTypeMismatch { op: "where", expected: DType::Bool, found: cond.dtype() });
        }
        let dtype = result_type(&[a, b]);
        let cond_a = broadcast_shapes_cow("where", cond.shape(), a.shape())?;
        let shape = broadcast_shapes_cow("where", &cond_a, b.shape())?;
        let mut tensors = [cond; 3];
        let mut n = 1;
        for t in [a.tensor(), b.tensor()].into_iter().flatten() {
            tensors[n] = t;
            n += 1;
        }
        let exec = Exec::for_operands("where", &tensors[..n])?;
        let c = exec.admit(cond)?;
        let (x, y) = (materialize(&exec, a, dtype)?, materialize(&exec, b, dtype)?);
        let out = exec.empty(&shape, dtype)?;
        let k = KernelOp::Where {
            cond: c.broadcast_view("where", &shape)?,
            a: x.broadcast_view("where", &shape)?,
            b: y.broadcast_view("where", &shape)?,
            dst: out.buffer_view(),
        };
        exec.run(&k, &[&c, &x, &y, &out])?;
        Ok(out)
    }
}
