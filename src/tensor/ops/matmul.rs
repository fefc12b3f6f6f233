//! Matrix products: `matmul` (PyTorch's rules for 1-D operands and broadcast batch dimensions)
//! and `bmm` (strict 3-D batches).

use super::matmul_pad;
use crate::error::{Error, Result};
use crate::kernel::KernelOp;
use crate::tensor::exec::Exec;
use crate::tensor::layout::broadcast_shapes;
use crate::tensor::Tensor;

/// Checks the operands' dtypes: one floating-point dtype.
fn check_dtypes(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.dtype() != b.dtype() {
        return Err(Error::DTypeMismatch { op, expected: a.dtype(), found: b.dtype() });
    }
    if !a.dtype().is_float() {
        return Err(Error::UnsupportedDType { op, dtype: a.dtype() });
    }
    Ok(())
}

impl Tensor {
    /// `a [.., M, K] @ b [.., K, N] (+ bias [N])` with batch dimensions already
    /// broadcast-compatible; the bias (checked by the caller: `[N]`, the operands' dtype) is
    /// added before the result's rounding.
    fn batched_matmul(&self, op: &'static str, other: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        let (ra, rb) = (self.dim(), other.dim());
        let (m, k) = (self.shape()[ra - 2], self.shape()[ra - 1]);
        let (k2, n) = (other.shape()[rb - 2], other.shape()[rb - 1]);
        if k != k2 {
            return Err(Error::MatmulShapeMismatch { op, lhs: self.shape().to_vec(), rhs: other.shape().to_vec() });
        }
        let batch = broadcast_shapes(op, &self.shape()[..ra - 2], &other.shape()[..rb - 2])?;
        let exec = match bias {
            Some(b) => Exec::for_operands(op, &[self, other, b])?,
            None => Exec::for_operands(op, &[self, other])?,
        };
        let shape_of = |r: usize, c: usize| [batch.as_slice(), &[r, c]].concat();
        // Matrices whose rows are not 16-byte aligned run on padded copies when
        // `MatmulPadding` asks for them (`matmul_pad.rs`; never by default); the result is the dense tensor either way.
        let pad = matmul_pad::plan(self, other, m, n, k);
        let a = if pad.lhs { matmul_pad::padded(self)? } else { self.clone() };
        let b = if pad.rhs { matmul_pad::padded(other)? } else { other.clone() };
        let out = if pad.out {
            exec.empty(&shape_of(m, matmul_pad::padded_len(n, self.dtype())), self.dtype())?.narrow(-1, 0, n)?
        } else {
            exec.empty(&shape_of(m, n), self.dtype())?
        };
        let k_op = KernelOp::Gemm {
            lhs: a.broadcast_view(op, &shape_of(m, k))?,
            rhs: b.broadcast_view(op, &shape_of(k, n))?,
            dst: out.buffer_view(),
            bias: bias.map(Tensor::buffer_view),
            workspace: None, // the runtime gives a captured product one of its capture's pool
        };
        match bias {
            Some(bias) => exec.run(&k_op, &[&a, &b, bias, &out])?,
            None => exec.run(&k_op, &[&a, &b, &out])?,
        }
        if pad.out {
            out.contiguous()
        } else {
            Ok(out)
        }
    }

    /// The matrix product (`torch.matmul`): 1-D operands are vectors (a dot product, a
    /// vector-matrix or matrix-vector product), and batch dimensions broadcast
    /// (`[j, 1, n, m] @ [k, m, p] → [j, k, n, p]`). Floating-point operands of one dtype.
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        const OP: &str = "matmul";
        if self.dim() == 0 || other.dim() == 0 {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: format!(
                    "both arguments to matmul need to be at least 1D, but they are {}D and {}D",
                    self.dim(),
                    other.dim()
                ),
            });
        }
        check_dtypes(OP, self, other)?;
        let mismatch =
            || Error::MatmulShapeMismatch { op: OP, lhs: self.shape().to_vec(), rhs: other.shape().to_vec() };
        let a = if self.dim() == 1 { self.unsqueeze(0)? } else { self.clone() };
        let b = if other.dim() == 1 { other.unsqueeze(-1)? } else { other.clone() };
        let out = a.batched_matmul(OP, &b, None).map_err(|e| match e {
            Error::MatmulShapeMismatch { .. } => mismatch(),
            e => e,
        })?;
        let out = if other.dim() == 1 { out.squeeze_dim(-1)? } else { out };
        match (self.dim(), other.dim()) {
            (1, 1) => out.squeeze_dim(-1),
            (1, _) => out.squeeze_dim(-2),
            _ => Ok(out),
        }
    }

    /// The batched matrix product of two 3-D tensors with equal batch sizes
    /// (`torch.bmm`: `[b, n, m] @ [b, m, p] → [b, n, p]`).
    pub fn bmm(&self, other: &Tensor) -> Result<Tensor> {
        const OP: &str = "bmm";
        for t in [self, other] {
            if t.dim() != 3 {
                return Err(Error::InvalidShape {
                    op: OP,
                    shape: t.shape().iter().map(|&n| n as i64).collect(),
                    reason: format!("batch1 and batch2 must be 3D tensors, got a {}D tensor", t.dim()),
                });
            }
        }
        check_dtypes(OP, self, other)?;
        if self.shape()[0] != other.shape()[0] {
            return Err(Error::ShapeMismatch { op: OP, lhs: self.shape().to_vec(), rhs: other.shape().to_vec() });
        }
        self.batched_matmul(OP, other, None)
    }

    /// `self [M, K] @ other [K, N] + bias [N]` as one product, the bias added before the
    /// result's one rounding (`F.linear`'s fused path; the caller checks the shapes: 2-D
    /// operands, a 1-D bias of `N`, one dtype).
    pub(crate) fn matmul_with_bias(&self, other: &Tensor, bias: &Tensor) -> Result<Tensor> {
        const OP: &str = "linear";
        check_dtypes(OP, self, other)?;
        check_dtypes(OP, self, bias)?;
        self.batched_matmul(OP, other, Some(bias))
    }
}
