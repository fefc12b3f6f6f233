//! Matrix products on the CUDA driver through cuBLASLt.
//!
//! cuBLAS is column-major, the views row-major: a row-major `C = A·B` is the column-major
//! `Cᵀ = Bᵀ·Aᵀ`, and a row-major matrix *is* its transpose stored column-major. So for a
//! row-major output the product runs as `D' = op(B)·op(A)`, each operand's `op` chosen from its
//! strides (`N` for a transpose of a dense matrix, `T` for a dense one), and for a column-major
//! output as `D = op(A)·op(B)`. An operand (or output) that is neither is first copied to (or
//! computed in) a dense temporary, allocated in stream order. Batch dims are collapsed for the
//! three operands together; the innermost becomes cuBLASLt's strided batch (a broadcast operand
//! has batch stride 0), outer ones are a loop of launches.
//!
//! Compute types follow PyTorch: `f32` in `CUBLAS_COMPUTE_32F`, or `..._FAST_TF32` when
//! [`allow_tf32`](super::backends::matmul::allow_tf32); `f16`/`bf16` with `f32` accumulation;
//! `f64` in `f64`. Each call asks cuBLASLt's heuristics (cached by the library) for the best
//! algorithm given the real pointer alignments and a per-stream 32 MiB workspace.

use super::codegen::{EwOp, MAXD};
use super::launch::{addr, collapse, elementwise, unsupported, Ctx};
use super::{driver_error, lock};
use crate::driver::kernel::{BufferView, Dims};
use crate::driver::DevicePtr;
use crate::dtype::DType;
use crate::error::{Error, Result};
use cudarc::cublaslt::sys as lt;
use cudarc::driver::result as cu;
use std::ffi::c_void;
use std::sync::Mutex;

/// Bytes of cuBLASLt workspace per stream (what PyTorch gives Hopper).
const WORKSPACE: usize = 32 << 20;

raw_handle!(
    /// A cuBLASLt handle.
    RawLt(lt::cublasLtHandle_t)
);

/// A device's cuBLASLt handle, made on first use. Held locked for the whole of a product's
/// enqueueing (descriptor set-up and `cublasLtMatmul`, a few µs).
pub(super) struct Blas {
    handle: Mutex<Option<RawLt>>,
}

fn blas_error(op: &'static str, e: lt::cublasStatus_t) -> Error {
    Error::Driver { op, code: format!("{e:?}"), message: "cuBLASLt reported an error".into() }
}

fn check(op: &'static str, s: lt::cublasStatus_t) -> Result<()> {
    s.result().map_err(|e| blas_error(op, e.0))
}

impl Blas {
    pub(super) fn new() -> Blas {
        Blas { handle: Mutex::new(None) }
    }

    /// Destroys the handle (best effort).
    pub(super) fn release(&self) {
        if let Some(h) = lock(&self.handle).take() {
            // SAFETY: made by `cublasLtCreate`, taken out of the slot, so destroyed once.
            let _ = unsafe { lt::cublasLtDestroy(h.0) };
        }
    }
}

/// Destroys cuBLASLt descriptors when dropped.
#[derive(Default)]
struct Descs {
    matmul: Option<lt::cublasLtMatmulDesc_t>,
    pref: Option<lt::cublasLtMatmulPreference_t>,
    layouts: Vec<lt::cublasLtMatrixLayout_t>,
}

impl Drop for Descs {
    fn drop(&mut self) {
        // SAFETY: each descriptor was created once by cuBLASLt and is destroyed once here.
        unsafe {
            if let Some(d) = self.matmul {
                let _ = lt::cublasLtMatmulDescDestroy(d);
            }
            if let Some(p) = self.pref {
                let _ = lt::cublasLtMatmulPreferenceDestroy(p);
            }
            for &l in &self.layouts {
                let _ = lt::cublasLtMatrixLayoutDestroy(l);
            }
        }
    }
}

/// A logical `p×q` matrix with strides `(sp, sq)` as cuBLAS sees it: `(transposed, rows, cols,
/// ld)` of the column-major matrix stored, or `None` when it is neither layout.
fn colmajor(p: usize, q: usize, sp: usize, sq: usize) -> Option<(bool, u64, u64, i64)> {
    if sp == 1 && (sq >= p || q == 1) {
        Some((false, p as u64, q as u64, sq.max(p) as i64))
    } else if sq == 1 && (sp >= q || p == 1) {
        Some((true, q as u64, p as u64, sp.max(q) as i64))
    } else {
        None
    }
}

/// The largest power of two (at most 256) dividing every value.
fn alignment(values: impl IntoIterator<Item = u64>) -> u32 {
    values.into_iter().filter(|&v| v != 0).map(|v| v.trailing_zeros().min(8)).min().map_or(256, |z| 1 << z)
}

/// A dense temporary of a view's shape and dtype, allocated and freed in stream order.
struct Temp<'a> {
    c: &'a Ctx<'a>,
    ptr: u64,
}

impl<'a> Temp<'a> {
    fn new(c: &'a Ctx<'a>, like: &BufferView) -> Result<(Temp<'a>, BufferView)> {
        let bytes = (like.numel() * like.dtype.size()).max(1);
        // SAFETY: the device's context is current and the stream live; the memory is used only by work queued on this stream before the matching `cuMemFreeAsync`.
        let ptr = unsafe { cu::malloc_async(c.stream, bytes) }.map_err(|e| driver_error("cuMemAllocAsync", e))?;
        let mut strides = Dims::from_elem(0, like.shape.len());
        let mut step = 1;
        for (s, &n) in strides.iter_mut().zip(&like.shape).rev() {
            *s = step;
            step *= n;
        }
        let view = BufferView { ptr: DevicePtr(ptr), dtype: like.dtype, shape: like.shape.clone(), strides, offset: 0 };
        Ok((Temp { c, ptr }, view))
    }
}

impl Drop for Temp<'_> {
    fn drop(&mut self) {
        // SAFETY: allocated by `cuMemAllocAsync` on this stream; freed once, in stream order after the work that uses it.
        let _ = unsafe { cu::free_async(self.ptr, self.c.stream) };
    }
}

/// Queues `dst = lhs · rhs` (already validated; `dst` is not empty).
pub(super) fn gemm(c: &Ctx, lhs: &BufferView, rhs: &BufferView, dst: &BufferView) -> Result<()> {
    let r = dst.shape.len();
    let (m, n, k) = (dst.shape[r - 2], dst.shape[r - 1], lhs.shape[r - 1]);
    if k == 0 {
        return elementwise(c, EwOp::Fill, dst, &[], 0, 0); // all-zero bits are 0.0 in every float dtype
    }
    let plan = |v: &BufferView, p: usize, q: usize| colmajor(p, q, v.strides[r - 2], v.strides[r - 1]);
    // Operands cuBLAS cannot read as they are go through dense copies.
    let mut temps = Vec::new();
    let mut operand = |v: &BufferView, p: usize, q: usize| -> Result<BufferView> {
        if plan(v, p, q).is_some() {
            return Ok(v.clone());
        }
        let (t, view) = Temp::new(c, v)?;
        elementwise(c, EwOp::Copy, &view, &[v], 0, 0)?;
        temps.push(t);
        Ok(view)
    };
    let a = operand(lhs, m, k)?;
    let b = operand(rhs, k, n)?;
    let out_ok = colmajor(n, m, dst.strides[r - 1], dst.strides[r - 2]).is_some_and(|x| !x.0)
        || colmajor(m, n, dst.strides[r - 2], dst.strides[r - 1]).is_some_and(|x| !x.0);
    if out_ok {
        return product(c, &a, &b, dst);
    }
    let (t, view) = Temp::new(c, dst)?;
    product(c, &a, &b, &view)?;
    elementwise(c, EwOp::Copy, dst, &[&view], 0, 0)?;
    drop(t);
    drop(temps);
    Ok(())
}

/// `(compute type, scale type, data type)` of a dtype.
fn types(dtype: DType) -> Result<(lt::cublasComputeType_t, lt::cudaDataType, lt::cudaDataType)> {
    use lt::cublasComputeType_t::*;
    use lt::cudaDataType::*;
    Ok(match dtype {
        DType::F32 if super::backends::matmul::allow_tf32() => (CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F, CUDA_R_32F),
        DType::F32 => (CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_32F),
        DType::F64 => (CUBLAS_COMPUTE_64F, CUDA_R_64F, CUDA_R_64F),
        DType::F16 => (CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16F),
        DType::BF16 => (CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF),
        other => return Err(unsupported(format!("no matrix product of {other} on the CUDA driver"))),
    })
}

/// The product with every operand readable by cuBLAS and a column-major-writable output.
fn product(c: &Ctx, lhs: &BufferView, rhs: &BufferView, dst: &BufferView) -> Result<()> {
    let r = dst.shape.len();
    let (m, n, k) = (dst.shape[r - 2], dst.shape[r - 1], lhs.shape[r - 1]);
    let st = |v: &BufferView| (v.strides[r - 2], v.strides[r - 1]);
    let ((drs, dcs), (ars, acs), (brs, bcs)) = (st(dst), st(lhs), st(rhs));
    // Row-major output: D' = Cᵀ = Bᵀ·Aᵀ; column-major: D = A·B.
    let swap = colmajor(n, m, dcs, drs).is_some_and(|x| !x.0);
    let (d_mat, a_mat, b_mat, first, second) = if swap {
        (colmajor(n, m, dcs, drs), colmajor(n, k, bcs, brs), colmajor(k, m, acs, ars), rhs, lhs)
    } else {
        (colmajor(m, n, drs, dcs), colmajor(m, k, ars, acs), colmajor(k, n, brs, bcs), lhs, rhs)
    };
    let (Some(d_mat), Some(a_mat), Some(b_mat)) = (d_mat, a_mat, b_mat) else {
        return Err(unsupported("a matrix product operand cuBLAS cannot read"));
    };
    let bt = r - 2;
    let batch = collapse(
        &dst.shape[..bt],
        [Some(&dst.strides[..bt]), Some(&first.strides[..bt]), Some(&second.strides[..bt])],
        |_| true,
    )
    .ok_or_else(|| unsupported(format!("batch dims that do not collapse below {MAXD}")))?;
    let (count, bstride) =
        if batch.n > 0 { (batch.shape[0], [batch.st[0][0], batch.st[1][0], batch.st[2][0]]) } else { (1, [0; 3]) };
    let size = dst.dtype.size() as u64;
    let (compute, scale, data) = types(dst.dtype)?;
    // SAFETY: only asks the dynamic loader whether libcublasLt can be opened.
    if !unsafe { lt::is_culib_present() } {
        return Err(unsupported(
            "matrix products need cuBLASLt, but libcublasLt.so was not found by the dynamic loader",
        ));
    }
    let (bases, strides) = ([addr(dst), addr(first), addr(second)], bstride);
    let align = |i: usize| {
        let outer = (0..batch.n).map(|d| batch.st[i][d] as u64 * size);
        alignment(std::iter::once(bases[i]).chain(outer))
    };
    let workspace = c.gemm_workspace(WORKSPACE)?;
    let mut slot = lock(&c.ops.blas.handle);
    if slot.is_none() {
        let created = std::panic::catch_unwind(|| {
            let mut h = std::ptr::null_mut();
            // SAFETY: `h` is a valid out-pointer.
            check("cublasLtCreate", unsafe { lt::cublasLtCreate(&mut h) }).map(|_| h)
        });
        let h = created.unwrap_or_else(|_| Err(unsupported("libcublasLt lacks a symbol (CUDA 13 is needed)")))?;
        *slot = Some(RawLt(h));
    }
    let handle = slot.map(|h| h.0).unwrap_or(std::ptr::null_mut());
    let mut descs = Descs::default();
    // SAFETY: every descriptor is created in this block, used only while `descs` lives and destroyed by its `Drop`; attribute buffers are live locals of the size passed; the handle is live and locked; the matrices are live device memory of the stream's device (the launch contract) described by the layouts, the workspace is this stream's, and the device's context is current.
    unsafe {
        let mut desc = std::ptr::null_mut();
        check("cublasLtMatmulDescCreate", lt::cublasLtMatmulDescCreate(&mut desc, compute, scale))?;
        descs.matmul = Some(desc);
        for (attr, trans) in [
            (lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA, a_mat.0),
            (lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSB, b_mat.0),
        ] {
            let op: i32 = trans as i32; // CUBLAS_OP_N = 0, CUBLAS_OP_T = 1
            check(
                "cublasLtMatmulDescSetAttribute",
                lt::cublasLtMatmulDescSetAttribute(desc, attr, (&op as *const i32).cast(), 4),
            )?;
        }
        let mut layout = |mat: (bool, u64, u64, i64), bs: i64| -> Result<lt::cublasLtMatrixLayout_t> {
            let mut l = std::ptr::null_mut();
            check("cublasLtMatrixLayoutCreate", lt::cublasLtMatrixLayoutCreate(&mut l, data, mat.1, mat.2, mat.3))?;
            descs.layouts.push(l);
            let cnt = count as i32;
            use lt::cublasLtMatrixLayoutAttribute_t::*;
            check(
                "cublasLtMatrixLayoutSetAttribute",
                lt::cublasLtMatrixLayoutSetAttribute(
                    l,
                    CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                    (&cnt as *const i32).cast(),
                    4,
                ),
            )?;
            check(
                "cublasLtMatrixLayoutSetAttribute",
                lt::cublasLtMatrixLayoutSetAttribute(
                    l,
                    CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                    (&bs as *const i64).cast(),
                    8,
                ),
            )?;
            Ok(l)
        };
        let (dl, al, bl) = (layout(d_mat, strides[0])?, layout(a_mat, strides[1])?, layout(b_mat, strides[2])?);
        let mut pref = std::ptr::null_mut();
        check("cublasLtMatmulPreferenceCreate", lt::cublasLtMatmulPreferenceCreate(&mut pref))?;
        descs.pref = Some(pref);
        use lt::cublasLtMatmulPreferenceAttributes_t::*;
        let ws = WORKSPACE as u64;
        check(
            "cublasLtMatmulPreferenceSetAttribute",
            lt::cublasLtMatmulPreferenceSetAttribute(
                pref,
                CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&ws as *const u64).cast(),
                8,
            ),
        )?;
        for (attr, i) in [
            (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, 1),
            (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, 2),
            (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, 0),
            (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, 0),
        ] {
            let v: u32 = align(i);
            check(
                "cublasLtMatmulPreferenceSetAttribute",
                lt::cublasLtMatmulPreferenceSetAttribute(pref, attr, (&v as *const u32).cast(), 4),
            )?;
        }
        let mut heuristic: lt::cublasLtMatmulHeuristicResult_t = std::mem::zeroed();
        let mut found = 0;
        check(
            "cublasLtMatmulAlgoGetHeuristic",
            lt::cublasLtMatmulAlgoGetHeuristic(handle, desc, al, bl, dl, dl, pref, 1, &mut heuristic, &mut found),
        )?;
        if found == 0 {
            return Err(unsupported(format!(
                "cuBLASLt has no algorithm for a {} product of {m}×{k} by {k}×{n}",
                dst.dtype
            )));
        }
        let (one32, zero32, one64, zero64) = (1.0f32, 0.0f32, 1.0f64, 0.0f64);
        let (alpha, beta): (*const c_void, *const c_void) = if scale == lt::cudaDataType::CUDA_R_64F {
            ((&one64 as *const f64).cast(), (&zero64 as *const f64).cast())
        } else {
            ((&one32 as *const f32).cast(), (&zero32 as *const f32).cast())
        };
        // Outer batch dims: one launch per index.
        let outer: i64 = (1..batch.n).map(|d| batch.shape[d]).product();
        for o in 0..outer {
            let (mut rem, mut off) = (o, [0i64; 3]);
            for d in 1..batch.n {
                let i = rem % batch.shape[d];
                rem /= batch.shape[d];
                for (x, s) in off.iter_mut().zip(0..3) {
                    *x += i * batch.st[s][d];
                }
            }
            let ptr = |i: usize| bases[i] + (off[i] as u64) * size;
            check(
                "cublasLtMatmul",
                lt::cublasLtMatmul(
                    handle,
                    desc,
                    alpha,
                    ptr(1) as *const c_void,
                    al,
                    ptr(2) as *const c_void,
                    bl,
                    beta,
                    ptr(0) as *const c_void,
                    dl,
                    ptr(0) as *mut c_void,
                    dl,
                    &heuristic.algo,
                    workspace as *mut c_void,
                    WORKSPACE,
                    c.stream as lt::cudaStream_t,
                ),
            )?;
        }
    }
    Ok(())
}
