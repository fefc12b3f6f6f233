//! [`Driver::launch`](crate::driver::Driver::launch) on the CUDA driver: per-device kernel state
//! and the dispatch of a [`KernelOp`] to a kernel and its parameters.
//!
//! Elementwise ops (fill, cast, copy, unary, binary, where) collapse the dimensions their
//! operands agree on (innermost first, size-1 dims dropped). When the output is then one dense
//! run and every input is either the same dense run or a single broadcast element, the *fast*
//! kernel runs: a grid-stride loop over 16-byte vectors when every dense operand is aligned, one
//! element at a time otherwise. Any other layout runs the *strided* kernel, which takes the
//! collapsed shape and strides (up to [`MAXD`](super::vocab::MAXD) dims) by value. Parameters are `#[repr(C)]`
//! structs on the stack, functions come from a read-locked table, so a launch allocates nothing
//! beyond what [`KernelOp::validate`] does. Grids are sized from the SM count and the kernel's
//! occupancy: a wave is the blocks that fit on the GPU at once; elementwise grids cover the work
//! in one pass up to 256 waves (measured fastest, see [`Tuning`](super::ctx::Tuning)), reductions split a row over
//! one wave.

use super::ctx::{Ctx, Launcher, Tuning};
use super::elementwise::{elementwise, scalar_bits};
use super::gemm::Blas;
use super::vocab::{EwOp, JitKey};
use crate::error::Result;
use crate::error::Sticky;
use crate::kernel::{BufferView, DenseBinary, DenseJit, JitOp, KernelOp, ReduceOp};
use cudarc::driver::sys;
use std::path::PathBuf;
use std::sync::Arc;

/// A device's tensor-kernel state: the launch state and the cuBLASLt handle.
pub(in crate::driver::cuda) struct DeviceOps {
    pub launcher: Launcher,
    pub blas: Blas,
}

impl DeviceOps {
    /// A device's kernel state: kernels cached on disk under `kernel_cache`, launches shaped by
    /// `tuning`.
    pub(in crate::driver::cuda) fn new(kernel_cache: Option<PathBuf>, tuning: Arc<Tuning>) -> DeviceOps {
        DeviceOps { launcher: Launcher::new(kernel_cache, tuning), blas: Blas::new() }
    }

    /// Frees the scratch memory, destroys the BLAS handle and unloads the modules. The device's
    /// context must be current and every stream idle.
    pub(in crate::driver::cuda) fn release(&self) {
        self.launcher.release();
        self.blas.release();
    }

    /// The context of one launch on `stream` of device `cu`, whose errors raised in a `Drop` go
    /// to `dropped`.
    fn ctx<'a>(
        &'a self,
        cu: sys::CUdevice,
        dropped: &'a Sticky,
        stream: sys::CUstream,
        stream_id: u64,
    ) -> Result<Ctx<'a>> {
        let info = self.launcher.info(cu)?;
        Ok(Ctx { ops: &self.launcher, info, stream, stream_id, dropped })
    }
}

/// Runs `op` (already validated) on the stream of `dev`, whose context is current.
/// Launches `op` on `stream` (of device `cu`, whose kernels and scratch are `ops`).
pub(in crate::driver::cuda) fn launch(
    ops: &DeviceOps,
    cu: sys::CUdevice,
    dropped: &Sticky,
    stream: sys::CUstream,
    stream_id: u64,
    op: &KernelOp,
) -> Result<()> {
    let out = op.output();
    if out.numel() == 0 {
        return Ok(());
    }
    let c = ops.ctx(cu, dropped, stream, stream_id)?;
    match op {
        KernelOp::Fill { dst, value } => elementwise(&c, EwOp::Fill, dst, &[], scalar_bits(*value, dst.dtype), 0),
        KernelOp::Cast { src, dst } if src.dtype == dst.dtype => elementwise(&c, EwOp::Copy, dst, &[src], 0, 0),
        KernelOp::Cast { src, dst } => elementwise(&c, EwOp::Cast, dst, &[src], 0, 0),
        KernelOp::CopyStrided { src, dst } => elementwise(&c, EwOp::Copy, dst, &[src], 0, 0),
        KernelOp::Unary { op, src, dst } => elementwise(&c, EwOp::Unary(*op), dst, &[src], 0, 0),
        KernelOp::Binary { op, lhs, rhs, dst, compute } => {
            elementwise(&c, EwOp::Binary(*op, *compute), dst, &[lhs, rhs], 0, 0)
        }
        KernelOp::BinaryScalar { op, lhs, value, rhs_dtype, dst, compute } => {
            // The number travels in the parameters' `value` (its bits as `rhs_dtype`), input 1 marked
            // as given by value.
            let imm = BufferView::number(*rhs_dtype, &dst.shape);
            elementwise(&c, EwOp::Binary(*op, *compute), dst, &[lhs, &imm], scalar_bits(*value, *rhs_dtype), 0b10)
        }
        KernelOp::Where { cond, a, b, dst } => elementwise(&c, EwOp::Where, dst, &[cond, a, b], 0, 0),
        KernelOp::Reduce { op, src, dst, dims } => super::reduce::reduce(&c, *op, src, dst, dims, None),
        KernelOp::Extreme { max, src, values, indices, dims } => {
            let (value_op, index_op) =
                if *max { (ReduceOp::Max, ReduceOp::ArgMax) } else { (ReduceOp::Min, ReduceOp::ArgMin) };
            // One pass when both outputs have the same layout (the kernel writes both at one
            // element offset), else the two reductions.
            let same = values
                .shape
                .iter()
                .zip(values.strides.iter().zip(&indices.strides))
                .all(|(&n, (a, b))| n == 1 || a == b);
            if same {
                super::reduce::reduce(&c, index_op, src, indices, dims, Some(values))
            } else {
                super::reduce::reduce(&c, value_op, src, values, dims, None)?;
                super::reduce::reduce(&c, index_op, src, indices, dims, None)
            }
        }
        KernelOp::Softmax { src, dst, dim, log } => super::reduce::softmax(&c, src, dst, *dim, *log),
        KernelOp::Gemm { lhs, rhs, dst, bias, workspace } => super::gemm::gemm(
            &c,
            &ops.blas,
            super::gemm::Operands { lhs, rhs, dst, bias: bias.as_ref() },
            workspace.as_ref(),
        ),
        KernelOp::Norm { src, weight, bias, dst, dims, eps, rms } => {
            let (weight, bias, dims, eps, rms) = (weight.as_ref(), bias.as_ref(), *dims, *eps, *rms);
            super::fused::norm(&c, super::fused::NormArgs { src, weight, bias, dst, dims, eps, rms })
        }
        KernelOp::Attention { q, k, v, mask, dst, scale, causal } => {
            let (mask, scale, causal) = (mask.as_ref(), *scale, *causal);
            super::fused::attention(&c, super::fused::AttnArgs { q, k, v, mask, dst, scale, causal })
        }
        KernelOp::Random(r) => super::random::random(&c, r),
    }
}

/// Launches the jiterator call `op` (already validated) on `stream` (as [`launch`]): the
/// elementwise kernel of the function's module, or for more than three inputs or several
/// outputs the one kernel of its [`JitMulti`](super::vocab::ModuleKey::JitMulti) module.
pub(in crate::driver::cuda) fn jit(
    ops: &DeviceOps,
    cu: sys::CUdevice,
    dropped: &Sticky,
    stream: sys::CUstream,
    stream_id: u64,
    op: &JitOp,
) -> Result<()> {
    if op.outs[0].numel() == 0 {
        return Ok(());
    }
    let c = ops.ctx(cu, dropped, stream, stream_id)?;
    let code = super::jit::intern(&op.code);
    if super::jit::is_multi(op) {
        return super::jit::launch_multi(&c, code, op);
    }
    let ins: Vec<&BufferView> = op.ins.iter().collect();
    let key = JitKey { code, nin: ins.len() as u8, out: 0 };
    elementwise(&c, EwOp::Jit(key), &op.outs[0], &ins, op.scalars_at.0, 0)
}

/// Launches the dense jiterator call `op` (already validated) on `stream` (as [`launch`]): a
/// function of at most three inputs runs the fast elementwise kernel of its module at once, with
/// no views to build or classify; one of more inputs goes through [`jit`].
pub(in crate::driver::cuda) fn dense_jit(
    ops: &DeviceOps,
    cu: sys::CUdevice,
    dropped: &Sticky,
    stream: sys::CUstream,
    stream_id: u64,
    op: &DenseJit<'_>,
) -> Result<()> {
    if op.n == 0 {
        return Ok(());
    }
    if op.ins.len() > 3 {
        return jit(ops, cu, dropped, stream, stream_id, &op.to_jit_op());
    }
    let c = ops.ctx(cu, dropped, stream, stream_id)?;
    super::elementwise::dense_jit(&c, super::jit::intern(op.code), op)
}

/// Runs a dense binary op (already validated) on the stream of `dev`, whose context is current:
/// the fast kernel at once, with no views to classify.
/// Launches the dense binary `op` on `stream` (as [`launch`]).
pub(in crate::driver::cuda) fn dense_binary(
    ops: &DeviceOps,
    cu: sys::CUdevice,
    dropped: &Sticky,
    stream: sys::CUstream,
    stream_id: u64,
    op: &DenseBinary,
) -> Result<()> {
    if op.n == 0 {
        return Ok(());
    }
    super::elementwise::dense_binary(&ops.ctx(cu, dropped, stream, stream_id)?, op)
}
