//! Device work described by op and dtype, not by code: [`KernelOp`] over [`BufferView`]s.
//!
//! The tensor layer validates an op (devices, dtypes, shapes, broadcasting) and lowers it to one
//! [`KernelOp`] whose operands are strided views of device (or host) memory, already broadcast
//! to the output's shape. A driver runs it (its `launch`), queued on a
//! stream. The sim driver runs the same CPU kernels the CPU device uses; the CUDA driver will run
//! NVRTC-compiled kernels keyed by (op, dtypes).
//!
//! Semantics every backend implements:
//! * Every element is read from `ptr + (offset + Σ index_i · strides_i) · dtype.size()`; strides
//!   may be 0 (a broadcast operand). Outputs have no two elements at one address.
//! * Elementwise ops compute in a *compute dtype* (inputs are converted to it first, as PyTorch's
//!   TensorIterator does) and convert the result to the output's dtype. Conversions are PyTorch's:
//!   float → integer truncates toward zero, integers wrap, anything → bool is `!= 0`.
//! * Floating-point math may be carried out in a wider type than the compute dtype (the CPU
//!   kernels use `f64`); results are rounded once into the output dtype.

pub mod box_muller;
pub mod dims;
mod functions;
mod fused;
mod jit;
mod ptr;
pub mod random;
mod view;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::scalar::Scalar;
pub use dims::Dims;
pub use functions::{BinaryOp, ReduceOp, UnaryOp};
pub use jit::{jit_compute, jit_ctype, DenseJit, JitCode, JitOp, JitParam};
pub use ptr::{DevicePtr, HostPtr};
pub use random::{Distribution, PhiloxSource, RandomOp};
pub use view::BufferView;

/// A binary elementwise op over dense operands: `n` contiguous elements at each address (or a
/// number as the right operand). The short form of the [`KernelOp::Binary`] (or
/// [`KernelOp::BinaryScalar`]) that [`to_kernel_op`](Self::to_kernel_op) makes (every view one run
/// of `n`), for the most common small ops: drivers may launch it without building,
/// validating or classifying views ([`Driver::launch_dense_binary`](crate::driver::Driver::launch_dense_binary)).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DenseBinary {
    /// The function.
    pub op: BinaryOp,
    /// The dtype it is computed in.
    pub compute: DType,
    /// Elements of each operand.
    pub n: usize,
    /// Output: the address of its first element, and its dtype.
    pub dst: (DevicePtr, DType),
    /// Left input: the address of its first element, and its dtype.
    pub lhs: (DevicePtr, DType),
    /// Right input: the address of its first element, and its dtype.
    pub rhs: (DevicePtr, DType),
    /// When set, the right input is this number converted to `rhs.1` (the address is unused): the
    /// short form of [`KernelOp::BinaryScalar`].
    pub rhs_value: Option<Scalar>,
}

impl DenseBinary {
    /// The same op as a [`KernelOp::Binary`] over one-dimensional views of `n` elements.
    pub fn to_kernel_op(self) -> KernelOp {
        let view = |(ptr, dtype): (DevicePtr, DType)| BufferView {
            ptr,
            dtype,
            shape: Dims::from(&[self.n][..]),
            strides: Dims::from(&[1][..]),
            offset: 0,
        };
        let (op, compute, lhs, dst) = (self.op, self.compute, view(self.lhs), view(self.dst));
        match self.rhs_value {
            Some(value) => KernelOp::BinaryScalar { op, lhs, value, rhs_dtype: self.rhs.1, dst, compute },
            None => KernelOp::Binary { op, lhs, rhs: view(self.rhs), dst, compute },
        }
    }

    /// Refuses an `n` whose byte extent overflows for some operand (as [`KernelOp::validate`]
    /// refuses such a view).
    #[inline]
    pub fn validate(&self) -> Result<()> {
        let fits = |(ptr, dtype): (DevicePtr, DType)| {
            self.n.checked_mul(dtype.size()).is_some_and(|b| ptr.0.checked_add(b as u64).is_some())
        };
        if self.n > 0 && !(fits(self.dst) && fits(self.lhs) && (self.rhs_value.is_some() || fits(self.rhs))) {
            return Err(bad(format!("the extent of a dense binary op over {} elements overflows", self.n)));
        }
        let null = |(ptr, _): (DevicePtr, DType)| ptr.0 == 0;
        if self.n > 0 && (null(self.dst) || null(self.lhs) || (self.rhs_value.is_none() && null(self.rhs))) {
            return Err(bad("a dense binary op with a null address (a number operand goes in `rhs_value`)".into()));
        }
        Ok(())
    }
}

/// One unit of device work. Inputs are read and the output written in the launching stream's
/// order; an input may alias the output only elementwise (same view), as in `a.add_(b)`.
#[derive(Debug, Clone, PartialEq)]
pub enum KernelOp {
    /// Sets every element of `dst` to `value` (converted to `dst.dtype`).
    Fill {
        /// Output.
        dst: BufferView,
        /// The value.
        value: Scalar,
    },
    /// `dst = src` converted to `dst.dtype`; same shapes (`src` may be broadcast).
    Cast {
        /// Input.
        src: BufferView,
        /// Output.
        dst: BufferView,
    },
    /// `dst = src`, same dtype and shape, any strides (a gather / scatter).
    CopyStrided {
        /// Input.
        src: BufferView,
        /// Output.
        dst: BufferView,
    },
    /// `dst = op(src)` computed in `dst.dtype`.
    Unary {
        /// The function.
        op: UnaryOp,
        /// Input.
        src: BufferView,
        /// Output (same shape).
        dst: BufferView,
    },
    /// `dst = op(lhs, rhs)`: both converted to `compute`, result converted to `dst.dtype`.
    Binary {
        /// The function.
        op: BinaryOp,
        /// First operand (broadcast to `dst.shape`).
        lhs: BufferView,
        /// Second operand (broadcast to `dst.shape`).
        rhs: BufferView,
        /// Output.
        dst: BufferView,
        /// The dtype both operands are converted to before `op`.
        compute: DType,
    },
    /// `dst = op(lhs, value)`: [`KernelOp::Binary`] whose second operand is a number (PyTorch's
    /// wrapped scalar), given with the launch rather than read from memory — no device tensor, no
    /// fill before the op.
    BinaryScalar {
        /// The function.
        op: BinaryOp,
        /// First operand (broadcast to `dst.shape`).
        lhs: BufferView,
        /// The second operand.
        value: Scalar,
        /// The dtype `value` is converted to first (as a 0-dim tensor of it would hold it).
        rhs_dtype: DType,
        /// Output.
        dst: BufferView,
        /// The dtype both operands are converted to before `op`.
        compute: DType,
    },
    /// `dst = cond ? a : b`, with `a` and `b` converted to `dst.dtype`; `cond` is bool.
    Where {
        /// Condition (bool).
        cond: BufferView,
        /// Taken where `cond` is true.
        a: BufferView,
        /// Taken where `cond` is false.
        b: BufferView,
        /// Output.
        dst: BufferView,
    },
    /// Reduces `src` over `dims`; `dst` has `src`'s shape with those dimensions of size 1.
    Reduce {
        /// The reduction.
        op: ReduceOp,
        /// Input.
        src: BufferView,
        /// Output (keep-dim shape).
        dst: BufferView,
        /// Reduced dimensions, increasing, no repeats.
        dims: Vec<usize>,
    },
    /// The extreme of `src` over `dims` and where it is, in one pass (`torch.max(t, dim)`):
    /// `values` as [`ReduceOp::Max`] (or `Min`) writes them, in `src`'s dtype, and `indices` as
    /// [`ReduceOp::ArgMax`] (or `ArgMin`) writes them (`I64`: the first extreme, a NaN first of all).
    Extreme {
        /// Maximum (else minimum).
        max: bool,
        /// Input.
        src: BufferView,
        /// Values (keep-dim shape, `src`'s dtype).
        values: BufferView,
        /// Indices (keep-dim shape, `I64`).
        indices: BufferView,
        /// Reduced dimensions, increasing, no repeats.
        dims: Vec<usize>,
    },
    /// Softmax (or log-softmax) of `src` along `dim`, into `dst` of the same shape.
    Softmax {
        /// Input (floating point).
        src: BufferView,
        /// Output.
        dst: BufferView,
        /// The dimension normalized over.
        dim: usize,
        /// Log-softmax instead of softmax.
        log: bool,
    },
    /// Batched matrix product `dst[.., m, n] = Σ_k lhs[.., m, k] · rhs[.., k, n] (+ bias[n])` over
    /// equal batch dimensions (broadcast ones have stride 0); one floating-point dtype throughout.
    /// The bias is added to the accumulator (`f32` for the half types) before the result's one
    /// rounding (cuBLASLt's bias epilogue, PyTorch's `addmm` with a bias of the output's dtype).
    Gemm {
        /// `[.., M, K]`.
        lhs: BufferView,
        /// `[.., K, N]`.
        rhs: BufferView,
        /// `[.., M, N]`.
        dst: BufferView,
        /// `[N]`, added to every row of the product (`F.linear`'s bias), or `None`.
        bias: Option<BufferView>,
        /// The scratch memory the product may use (cuBLASLt's workspace); `None`: the driver's own
        /// per-stream workspace. The runtime gives one to a product queued on a capturing stream:
        /// a block of the capture's private pool, which the graph keeps.
        workspace: Option<Workspace>,
    },
    /// Fills `dst` with random draws from the Philox stream (`random.rs`).
    Random(Box<RandomOp>),
    /// Layer norm (`rms`: RMS norm) of each row of `src` over its last `dims` dimensions
    /// (PyTorch's `F.layer_norm` / `F.rms_norm`): `(x - mean) / sqrt(var + eps) * weight + bias`
    /// with the biased variance, or `x / sqrt(mean(x²) + eps) * weight`; statistics accumulate in
    /// `float` (`double` for `f64`) on a device and in `f64` on the CPU.
    Norm {
        /// Input (floating point).
        src: BufferView,
        /// Scale of the normalized shape (`src`'s last `dims` sizes), `src`'s dtype.
        weight: Option<BufferView>,
        /// Shift of the normalized shape, `src`'s dtype (never with `rms`).
        bias: Option<BufferView>,
        /// Output (`src`'s shape and dtype).
        dst: BufferView,
        /// Trailing dimensions normalized over (at least 1).
        dims: usize,
        /// Added to the variance (mean square) before the square root.
        eps: f64,
        /// RMS norm instead of layer norm.
        rms: bool,
    },
    /// Scaled dot-product attention (PyTorch's math backend): `dst[b, h, i] = Σ_j softmax_j(s) ·
    /// v[b, h / g, j]` with scores `s_j = scale · q[b, h, i] · k[b, h / g, j]` (+ an additive mask,
    /// −∞ where a bool mask is false or, when `causal`, where `j > i`), `g = Hq / Hkv`; a row with
    /// every score −∞ gives zeros (PyTorch's safe softmax).
    Attention {
        /// `[B, Hq, L, E]`, floating point.
        q: BufferView,
        /// `[B, Hkv, S, E]`, `q`'s dtype; `Hq` a multiple of `Hkv`.
        k: BufferView,
        /// `[B, Hkv, S, Ev]`, `q`'s dtype.
        v: BufferView,
        /// `[B, Hq, L, S]` (broadcast views have stride 0): bool (keep where true) or `q`'s dtype
        /// (added to the scores).
        mask: Option<BufferView>,
        /// `[B, Hq, L, Ev]`, `q`'s dtype, any non-overlapping strides (the tensor layer passes
        /// PyTorch's layout: `[B, L, Hq, Ev]` memory).
        dst: BufferView,
        /// Factor of the scores.
        scale: f64,
        /// Keys past the query's index (`j > i`) are masked out.
        causal: bool,
    },
}

pub use fused::ATTENTION_MAX_HEAD_DIM;

/// A view as the fused ops' checks read it.
fn arg(v: &BufferView) -> fused::Arg<'_> {
    fused::Arg { shape: &v.shape, dtype: v.dtype }
}

/// Bytes of the cuBLASLt workspace of a matrix product (what PyTorch gives Hopper): the CUDA
/// driver's own per-stream workspace, and the block a capture takes from its pool per stream.
pub const GEMM_WORKSPACE_BYTES: usize = 32 << 20;

/// Device memory given with an op as its scratch ([`KernelOp::Gemm`]'s workspace): `bytes` bytes
/// from `ptr`, on the launching stream's device, used only in the stream's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workspace {
    /// The first byte (256-byte aligned, as cuBLASLt asks; the caching allocator's blocks are).
    pub ptr: DevicePtr,
    /// Its size.
    pub bytes: usize,
}

fn bad(reason: String) -> Error {
    Error::InvalidArgument { op: "launch", reason }
}

/// Whether the view's element count, last element and byte extent are all representable (one
/// pass; [`BufferView::byte_span`] when the view holds elements).
fn extent_fits(v: &BufferView) -> bool {
    let (mut numel, mut last) = (1usize, Some(v.offset));
    for (&n, &s) in v.shape.iter().zip(v.strides.iter()) {
        let Some(m) = numel.checked_mul(n) else { return false };
        numel = m;
        if n > 0 {
            last = last.and_then(|l| l.checked_add((n - 1).checked_mul(s)?));
        }
    }
    let bytes = last.and_then(|l| l.checked_add(1)?.checked_mul(v.dtype.size()));
    numel == 0 || bytes.is_some_and(|b| v.ptr.0.checked_add(b as u64).is_some())
}

fn same_shape(what: &str, a: &BufferView, b: &BufferView) -> Result<()> {
    if a.shape != b.shape {
        return Err(bad(format!("{what}: shape {:?} differs from the output's {:?}", a.shape, b.shape)));
    }
    Ok(())
}

/// Checks that `dst` has `src`'s shape with `dims` (increasing, in range) of size 1.
fn check_reduced(src: &BufferView, dst: &BufferView, dims: &[usize]) -> Result<()> {
    let wrong = || bad(format!("reduce of {:?} over {dims:?} into {:?}", src.shape, dst.shape));
    if src.shape.len() != dst.shape.len() || dims.windows(2).any(|w| w[0] >= w[1]) {
        return Err(wrong());
    }
    if dims.last().is_some_and(|&d| d >= src.shape.len()) {
        return Err(bad(format!("reduce dims {dims:?} out of range for rank {}", src.shape.len())));
    }
    for (d, (&s, &o)) in src.shape.iter().zip(&dst.shape).enumerate() {
        if o != if dims.contains(&d) { 1 } else { s } {
            return Err(wrong());
        }
    }
    Ok(())
}

/// Checks a product's operands: a workspace (if any) non-null, 256-byte aligned and in range;
/// `lhs` `[.., M, K]`, `rhs` `[.., K, N]` and `dst` `[.., M, N]` of one rank ≥ 2 and equal batch
/// dims, one floating-point dtype; a bias (if any) `[N]` of that dtype.
fn check_gemm(
    lhs: &BufferView,
    rhs: &BufferView,
    bias: Option<&BufferView>,
    workspace: Option<Workspace>,
    dst: &BufferView,
) -> Result<()> {
    if let Some(w) = workspace {
        if w.ptr.0 == 0 || w.ptr.0 % 256 != 0 || w.bytes == 0 || w.ptr.0.checked_add(w.bytes as u64).is_none() {
            return Err(bad(format!(
                "a gemm workspace of {} bytes at {:#x} (non-null, 256-byte aligned, in range)",
                w.bytes, w.ptr.0
            )));
        }
    }
    let r = dst.shape.len();
    let ok = r >= 2
        && lhs.shape.len() == r
        && rhs.shape.len() == r
        && lhs.shape[..r - 2] == dst.shape[..r - 2]
        && rhs.shape[..r - 2] == dst.shape[..r - 2]
        && lhs.shape[r - 2] == dst.shape[r - 2]
        && rhs.shape[r - 1] == dst.shape[r - 1]
        && lhs.shape[r - 1] == rhs.shape[r - 2]
        && lhs.dtype == dst.dtype
        && rhs.dtype == dst.dtype
        && dst.dtype.is_float()
        && bias.is_none_or(|b| b.shape[..] == [dst.shape[r - 1]] && b.dtype == dst.dtype);
    if !ok {
        return Err(bad(format!(
            "gemm of {:?} ({}) by {:?} ({}) into {:?} ({}), bias {:?}",
            lhs.shape,
            lhs.dtype,
            rhs.shape,
            rhs.dtype,
            dst.shape,
            dst.dtype,
            bias.map(|b| (&b.shape, b.dtype))
        )));
    }
    Ok(())
}

impl KernelOp {
    /// A short name for messages: `"binary add"`, `"gemm"`, …
    pub fn name(&self) -> String {
        match self {
            KernelOp::Fill { .. } => "fill".into(),
            KernelOp::Cast { .. } => "cast".into(),
            KernelOp::CopyStrided { .. } => "copy_strided".into(),
            KernelOp::Unary { op, .. } => format!("unary {}", op.name()),
            KernelOp::Binary { op, .. } => format!("binary {}", op.name()),
            KernelOp::BinaryScalar { op, .. } => format!("binary {} with a number", op.name()),
            KernelOp::Where { .. } => "where".into(),
            KernelOp::Reduce { op, .. } => format!("reduce {}", op.name()),
            KernelOp::Extreme { max: true, .. } => "max with indices".into(),
            KernelOp::Extreme { max: false, .. } => "min with indices".into(),
            KernelOp::Softmax { log: false, .. } => "softmax".into(),
            KernelOp::Softmax { log: true, .. } => "log_softmax".into(),
            KernelOp::Gemm { .. } => "gemm".into(),
            KernelOp::Norm { rms: false, .. } => "layer_norm".into(),
            KernelOp::Norm { rms: true, .. } => "rms_norm".into(),
            KernelOp::Attention { .. } => "scaled_dot_product_attention".into(),
            KernelOp::Random(r) => format!("random {}", r.dist.name()),
        }
    }

    /// The views the op reads.
    pub fn inputs(&self) -> Vec<&BufferView> {
        match self {
            KernelOp::Fill { .. } => vec![],
            KernelOp::Cast { src, .. }
            | KernelOp::CopyStrided { src, .. }
            | KernelOp::Unary { src, .. }
            | KernelOp::Reduce { src, .. }
            | KernelOp::Extreme { src, .. }
            | KernelOp::Softmax { src, .. }
            | KernelOp::BinaryScalar { lhs: src, .. } => vec![src],
            KernelOp::Binary { lhs, rhs, .. } => vec![lhs, rhs],
            KernelOp::Gemm { lhs, rhs, bias, .. } => {
                [Some(lhs), Some(rhs), bias.as_ref()].into_iter().flatten().collect()
            }
            KernelOp::Where { cond, a, b, .. } => vec![cond, a, b],
            KernelOp::Norm { src, weight, bias, .. } => {
                [Some(src), weight.as_ref(), bias.as_ref()].into_iter().flatten().collect()
            }
            KernelOp::Attention { q, k, v, mask, .. } => {
                [Some(q), Some(k), Some(v), mask.as_ref()].into_iter().flatten().collect()
            }
            KernelOp::Random(r) => r.src.iter().chain(r.slot()).collect(),
        }
    }

    /// Every view of the op, inputs then the output (`None` past the op's operands), without
    /// allocating: what [`KernelOp::validate`] walks on each launch.
    fn views(&self) -> [Option<&BufferView>; 5] {
        let dst = Some(self.output());
        match self {
            KernelOp::Fill { .. } => [dst, None, None, None, None],
            KernelOp::Extreme { src, indices, .. } => [Some(src), dst, Some(indices), None, None],
            KernelOp::Cast { src, .. }
            | KernelOp::CopyStrided { src, .. }
            | KernelOp::Unary { src, .. }
            | KernelOp::Reduce { src, .. }
            | KernelOp::Softmax { src, .. }
            | KernelOp::BinaryScalar { lhs: src, .. } => [Some(src), dst, None, None, None],
            KernelOp::Binary { lhs, rhs, .. } => [Some(lhs), Some(rhs), dst, None, None],
            KernelOp::Gemm { lhs, rhs, bias, .. } => [Some(lhs), Some(rhs), bias.as_ref(), dst, None],
            KernelOp::Where { cond, a, b, .. } => [Some(cond), Some(a), Some(b), dst, None],
            KernelOp::Norm { src, weight, bias, .. } => [Some(src), weight.as_ref(), bias.as_ref(), dst, None],
            KernelOp::Attention { q, k, v, mask, .. } => [Some(q), Some(k), Some(v), mask.as_ref(), dst],
            KernelOp::Random(r) => [r.src.as_ref(), r.slot(), dst, None, None],
        }
    }

    /// The second view the op writes, if it has one (the indices of [`KernelOp::Extreme`]).
    pub fn second_output(&self) -> Option<&BufferView> {
        match self {
            KernelOp::Extreme { indices, .. } => Some(indices),
            _ => None,
        }
    }

    /// Every view the op writes: [`KernelOp::output`], then [`KernelOp::second_output`].
    pub fn outputs(&self) -> impl Iterator<Item = &BufferView> {
        std::iter::once(self.output()).chain(self.second_output())
    }

    /// The (first) view the op writes.
    pub fn output(&self) -> &BufferView {
        match self {
            KernelOp::Fill { dst, .. }
            | KernelOp::Cast { dst, .. }
            | KernelOp::CopyStrided { dst, .. }
            | KernelOp::Unary { dst, .. }
            | KernelOp::Binary { dst, .. }
            | KernelOp::BinaryScalar { dst, .. }
            | KernelOp::Where { dst, .. }
            | KernelOp::Reduce { dst, .. }
            | KernelOp::Extreme { values: dst, .. }
            | KernelOp::Softmax { dst, .. }
            | KernelOp::Norm { dst, .. }
            | KernelOp::Attention { dst, .. }
            | KernelOp::Gemm { dst, .. } => dst,
            KernelOp::Random(r) => &r.dst,
        }
    }

    /// Checks that the op is well formed (shapes agree, ranks and dims are in range, extents do
    /// not overflow). Drivers call it before queuing, so kernels never see a malformed op.
    pub fn validate(&self) -> Result<()> {
        for v in self.views().into_iter().flatten() {
            if v.shape.len() != v.strides.len() {
                return Err(bad(format!("a view has {} sizes but {} strides", v.shape.len(), v.strides.len())));
            }
            if !extent_fits(v) {
                return Err(bad(format!("the extent of a view of shape {:?} overflows", v.shape)));
            }
        }
        let dst = self.output();
        match self {
            KernelOp::Fill { .. } => Ok(()),
            KernelOp::Random(r) => r.validate(),
            KernelOp::Cast { src, .. } | KernelOp::Unary { src, .. } => same_shape("input", src, dst),
            KernelOp::CopyStrided { src, .. } => {
                same_shape("input", src, dst)?;
                if src.dtype != dst.dtype {
                    return Err(bad(format!("copy_strided from {} into {}", src.dtype, dst.dtype)));
                }
                Ok(())
            }
            KernelOp::Binary { lhs, rhs, .. } => {
                same_shape("lhs", lhs, dst)?;
                same_shape("rhs", rhs, dst)
            }
            KernelOp::BinaryScalar { lhs, .. } => same_shape("lhs", lhs, dst),
            KernelOp::Where { cond, a, b, .. } => {
                same_shape("cond", cond, dst)?;
                same_shape("a", a, dst)?;
                same_shape("b", b, dst)?;
                if cond.dtype != DType::Bool {
                    return Err(bad(format!("where's condition is {}, not bool", cond.dtype)));
                }
                Ok(())
            }
            KernelOp::Reduce { op, src, dims, .. } => {
                check_reduced(src, dst, dims)?;
                if matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin) && dst.dtype != DType::I64 {
                    return Err(bad(format!("{} writes int64, not {}", op.name(), dst.dtype)));
                }
                Ok(())
            }
            KernelOp::Extreme { src, indices, dims, .. } => {
                check_reduced(src, dst, dims)?;
                same_shape("indices", indices, dst)?;
                if dst.dtype != src.dtype || indices.dtype != DType::I64 {
                    return Err(bad(format!(
                        "an extreme of {} writes {} values and int64 indices, not {} and {}",
                        src.dtype, src.dtype, dst.dtype, indices.dtype
                    )));
                }
                Ok(())
            }
            KernelOp::Softmax { src, dim, .. } => {
                same_shape("input", src, dst)?;
                if *dim >= src.shape.len() {
                    return Err(bad(format!("softmax dim {dim} out of range for rank {}", src.shape.len())));
                }
                Ok(())
            }
            KernelOp::Gemm { lhs, rhs, bias, workspace, .. } => check_gemm(lhs, rhs, bias.as_ref(), *workspace, dst),
            KernelOp::Norm { src, weight, bias, dims, rms, .. } => {
                fused::check_norm(arg(src), weight.as_ref().map(arg), bias.as_ref().map(arg), arg(dst), *dims, *rms)
                    .map_err(bad)
            }
            KernelOp::Attention { q, k, v, mask, .. } => {
                fused::check_attention(arg(q), arg(k), arg(v), mask.as_ref().map(arg), arg(dst)).map_err(bad)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(shape: &[usize], strides: &[usize], offset: usize) -> BufferView {
        BufferView { ptr: DevicePtr(1000), dtype: DType::F32, shape: shape.into(), strides: strides.into(), offset }
    }

    #[test]
    fn a_dense_binary_op_is_the_binary_op_over_one_dimensional_views() {
        let d = DenseBinary {
            op: BinaryOp::Lt,
            compute: DType::F64,
            n: 7,
            dst: (DevicePtr(64), DType::Bool),
            lhs: (DevicePtr(128), DType::F32),
            rhs: (DevicePtr(256), DType::F64),
            rhs_value: None,
        };
        let KernelOp::Binary { op, lhs, rhs, dst, compute } = d.to_kernel_op() else { panic!("a binary op") };
        assert_eq!((op, compute), (BinaryOp::Lt, DType::F64));
        for (v, ptr, dtype) in [(&dst, 64, DType::Bool), (&lhs, 128, DType::F32), (&rhs, 256, DType::F64)] {
            assert_eq!(
                (v.ptr, v.dtype, &v.shape[..], &v.strides[..], v.offset),
                (DevicePtr(ptr), dtype, &[7][..], &[1][..], 0)
            );
        }
        assert!(d.validate().is_ok() && d.to_kernel_op().validate().is_ok());
        let huge = DenseBinary { n: usize::MAX / 4, ..d };
        assert!(huge.validate().is_err(), "8-byte elements overflow the address space");
        assert!(huge.to_kernel_op().validate().is_err(), "as the views do");
        assert!(DenseBinary { n: 0, ..huge }.validate().is_ok(), "nothing to touch");
        let with_number = DenseBinary { rhs: (DevicePtr(0), DType::I64), rhs_value: Some(Scalar::Int(3)), ..d };
        assert!(with_number.validate().is_ok(), "a number has no extent");
        assert!(DenseBinary { rhs_value: None, ..with_number }.validate().is_err(), "a null right operand");
        assert!(DenseBinary { lhs: (DevicePtr(0), DType::F32), ..d }.validate().is_err(), "a null left operand");
        let KernelOp::BinaryScalar { lhs, value, rhs_dtype, dst, .. } = with_number.to_kernel_op() else {
            panic!("a binary op with a number")
        };
        assert_eq!((lhs.ptr, value, rhs_dtype, dst.ptr), (DevicePtr(128), Scalar::Int(3), DType::I64, DevicePtr(64)));
    }

    #[test]
    fn spans_cover_exactly_the_elements() {
        assert_eq!(view(&[2, 3], &[3, 1], 4).span(), Some((4, 6)));
        assert_eq!(view(&[3, 2], &[1, 3], 0).span(), Some((0, 6)));
        assert_eq!(view(&[4, 5], &[0, 1], 2).span(), Some((2, 5)), "a broadcast dim adds nothing");
        assert_eq!(view(&[0, 5], &[5, 1], 2).span(), None);
        assert_eq!(view(&[2], &[3], 1).byte_span(), Some((DevicePtr(1004), 16)));
        assert!(view(&[2, 3], &[3, 1], 0).is_contiguous());
        assert!(!view(&[3, 2], &[1, 3], 0).is_contiguous());
        assert!(view(&[1, 3], &[7, 1], 0).is_contiguous(), "size-1 dims have any stride");
    }

    #[test]
    fn malformed_ops_are_refused() {
        let op = KernelOp::Binary {
            op: BinaryOp::Add,
            lhs: view(&[2, 3], &[3, 1], 0),
            rhs: view(&[3], &[1], 0),
            dst: view(&[2, 3], &[3, 1], 0),
            compute: DType::F32,
        };
        assert!(matches!(op.validate(), Err(Error::InvalidArgument { op: "launch", .. })));
        let overflow = KernelOp::Fill { dst: view(&[usize::MAX, 2], &[usize::MAX, 1], 0), value: Scalar::Int(0) };
        assert!(overflow.validate().is_err());
        let gemm = KernelOp::Gemm {
            lhs: view(&[2, 3], &[3, 1], 0),
            rhs: view(&[4, 5], &[5, 1], 0),
            dst: view(&[2, 5], &[5, 1], 0),
            bias: None,
            workspace: None,
        };
        assert!(gemm.validate().is_err());
        let ok = KernelOp::Gemm {
            lhs: view(&[2, 3], &[3, 1], 0),
            rhs: view(&[3, 5], &[5, 1], 0),
            dst: view(&[2, 5], &[5, 1], 0),
            bias: None,
            workspace: Some(Workspace { ptr: DevicePtr(1 << 20), bytes: GEMM_WORKSPACE_BYTES }),
        };
        assert!(ok.validate().is_ok());
        // A bias is `[N]` of the output's dtype.
        for (shape, ok_bias) in [(&[5usize][..], true), (&[2][..], false), (&[1, 5][..], false)] {
            let KernelOp::Gemm { lhs, rhs, dst, .. } = ok.clone() else { unreachable!() };
            let strides = vec![1; shape.len()];
            let bias = Some(view(shape, &strides, 0));
            let op = KernelOp::Gemm { lhs, rhs, dst, bias, workspace: None };
            assert_eq!(op.validate().is_ok(), ok_bias, "bias {shape:?}");
        }
        for (ptr, bytes) in [(0, 1024), (1 << 20, 0), ((1 << 20) + 4, 1024), (u64::MAX - 255, 1024)] {
            let KernelOp::Gemm { lhs, rhs, dst, .. } = ok.clone() else { unreachable!() };
            let w = Some(Workspace { ptr: DevicePtr(ptr), bytes });
            assert!(
                KernelOp::Gemm { lhs, rhs, dst, bias: None, workspace: w }.validate().is_err(),
                "{ptr:#x}, {bytes}"
            );
        }
    }
}
