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
//! [`allow_tf32`](crate::driver::cuda::backends::matmul::allow_tf32); `f16`/`bf16` with `f32` accumulation;
//! `f64` in `f64`. Each call asks cuBLASLt's heuristics (cached by the library) for the best
//! algorithm given the real pointer alignments and the workspace: the one given with the op (a
//! capture's, a block of its private pool that the graph keeps, given by the runtime), else the
//! stream's own of [`GEMM_WORKSPACE_BYTES`], made on its first product.
//!
//! A bias (`F.linear`'s, `[N]` of the output's dtype) is cuBLASLt's `CUBLASLT_EPILOGUE_BIAS`
//! where its documented rules allow: a vector as long as the rows of the column-major `D` (so
//! only for a row-major output, whose `D'` rows are the output's columns), packed, here also
//! 16-byte aligned, one matrix (no batch), not `f64`; it is added to the `f32` accumulator
//! before the one rounding. Elsewhere (and where cuBLASLt's heuristics find no algorithm with
//! the epilogue) the product is followed by an elementwise add (a second rounding).

use super::ctx::{addr, collapse, unsupported, Ctx};
use super::elementwise::elementwise;
use super::vocab::{EwOp, MAXD};
use crate::driver::cuda::status::{driver_error, lock};
use crate::driver::DevicePtr;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{BinaryOp, BufferView, Dims, Workspace, GEMM_WORKSPACE_BYTES};
use cudarc::cublaslt::result as ltr;
use cudarc::cublaslt::sys as lt;
use cudarc::driver::result as cu;
use std::ffi::c_void;
use std::sync::{Mutex, MutexGuard};

raw_handle!(
    /// A cuBLASLt handle.
    RawLt(lt::cublasLtHandle_t)
);

/// A device's cuBLASLt handle, made on first use. Held locked for the whole of a product's
/// enqueueing (descriptor set-up and `cublasLtMatmul`, a few µs).
pub(in crate::driver::cuda) struct Blas {
    handle: Mutex<Option<RawLt>>,
}

/// A cuBLASLt status as an [`Error::Driver`] of `op` (its number, name and cuBLASLt's
/// description), for `map_err`.
fn blas_error(op: &'static str) -> impl Fn(ltr::CublasError) -> Error {
    move |ltr::CublasError(status)| {
        let text = std::panic::catch_unwind(|| {
            // SAFETY: takes any status; returns null or a static NUL-terminated string.
            let p = unsafe { lt::cublasLtGetStatusString(status) };
            // SAFETY: `p` is null (checked) or points at cuBLASLt's static string for `status`.
            (!p.is_null()).then(|| unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned())
        });
        let message = text.ok().flatten().unwrap_or_else(|| "cuBLASLt reported an error".to_owned());
        // The status enum's variant is the C name (`CUBLAS_STATUS_NOT_SUPPORTED`).
        Error::Driver { op, code: status as i32, name: format!("{status:?}"), message }
    }
}

impl Blas {
    pub(in crate::driver::cuda) fn new() -> Blas {
        Blas { handle: Mutex::new(None) }
    }

    /// Destroys the handle (best effort).
    pub(in crate::driver::cuda) fn release(&self) {
        if let Some(h) = lock(&self.handle).take() {
            // SAFETY: made by `cublasLtCreate`, taken out of the slot, so destroyed once.
            let _ = unsafe { ltr::destroy_handle(h.0) };
        }
    }

    /// The handle, made on first use, locked for the caller's enqueueing.
    fn handle(&self) -> Result<LockedHandle<'_>> {
        let mut slot = lock(&self.handle);
        if slot.is_none() {
            // A libcublasLt without a symbol cudarc loads makes the loader panic.
            let created = std::panic::catch_unwind(|| ltr::create_handle().map_err(blas_error("cublasLtCreate")));
            let h = created.unwrap_or_else(|_| Err(unsupported("libcublasLt lacks a symbol (CUDA 13 is needed)")))?;
            *slot = Some(RawLt(h));
        }
        Ok(LockedHandle(slot))
    }
}

/// The device's cuBLASLt handle, its slot held locked (and holding a handle).
struct LockedHandle<'a>(MutexGuard<'a, Option<RawLt>>);

impl LockedHandle<'_> {
    fn raw(&self) -> lt::cublasLtHandle_t {
        self.0.map_or(std::ptr::null_mut(), |h| h.0)
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
        // SAFETY:
        // - the device's context is current and the stream live;
        // - the memory is used only by work queued on this stream before the matching `cuMemFreeAsync`.
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
        // SAFETY:
        // - allocated by `cuMemAllocAsync` on this stream, freed once, here;
        // - in stream order, after the work that uses it.
        let freed = unsafe { cu::free_async(self.ptr, self.c.stream) };
        // A failure is kept for the device's next synchronize.
        self.c.dropped.record_result(freed.map_err(|e| driver_error("cuMemFreeAsync", e)));
    }
}

/// The views of a product `dst = lhs · rhs (+ bias)`.
pub(in crate::driver::cuda) struct Operands<'a> {
    pub lhs: &'a BufferView,
    pub rhs: &'a BufferView,
    pub dst: &'a BufferView,
    /// `[N]`, added to each row.
    pub bias: Option<&'a BufferView>,
}

/// Queues `dst = lhs · rhs (+ bias)` (already validated; `dst` is not empty), with `workspace`
/// as cuBLASLt's scratch (`None`: the stream's own).
pub(in crate::driver::cuda) fn gemm(
    c: &Ctx,
    blas: &Blas,
    ops: Operands<'_>,
    workspace: Option<&Workspace>,
) -> Result<()> {
    let Operands { lhs, rhs, dst, bias } = ops;
    let r = dst.shape.len();
    let (m, n, k) = (dst.shape[r - 2], dst.shape[r - 1], lhs.shape[r - 1]);
    if k == 0 {
        elementwise(c, EwOp::Fill, dst, &[], 0, 0)?; // all-zero bits are 0.0 in every float dtype
        return add_bias(c, dst, bias);
    }
    // A product with a bias goes to cuBLASLt, whose epilogue adds it before the rounding.
    if bias.is_none() && super::gemv::try_gemv(c, lhs, rhs, dst)? {
        return Ok(());
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
        return product(c, blas, Operands { lhs: &a, rhs: &b, dst, bias }, workspace);
    }
    let (t, view) = Temp::new(c, dst)?;
    product(c, blas, Operands { lhs: &a, rhs: &b, dst: &view, bias }, workspace)?;
    elementwise(c, EwOp::Copy, dst, &[&view], 0, 0)?;
    drop(t);
    drop(temps);
    Ok(())
}

/// Adds `bias` (`[N]`) to every row of `dst` in place: the products cuBLASLt's bias epilogue
/// cannot take (a second rounding).
fn add_bias(c: &Ctx, dst: &BufferView, bias: Option<&BufferView>) -> Result<()> {
    let Some(b) = bias else { return Ok(()) };
    let r = dst.shape.len();
    let mut strides = Dims::from_elem(0, r);
    strides[r - 1] = b.strides[0];
    let row = BufferView { ptr: b.ptr, dtype: b.dtype, shape: dst.shape.clone(), strides, offset: b.offset };
    elementwise(c, EwOp::Binary(BinaryOp::Add, dst.dtype), dst, &[dst, &row], 0, 0)
}

/// `(compute type, scale type, data type)` of a dtype.
fn types(dtype: DType) -> Result<(lt::cublasComputeType_t, lt::cudaDataType, lt::cudaDataType)> {
    use lt::cublasComputeType_t::*;
    use lt::cudaDataType::*;
    Ok(match dtype {
        DType::F32 if crate::driver::cuda::backends::matmul::allow_tf32() => {
            (CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F, CUDA_R_32F)
        }
        DType::F32 => (CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_32F),
        DType::F64 => (CUBLAS_COMPUTE_64F, CUDA_R_64F, CUDA_R_64F),
        DType::F16 => (CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16F),
        DType::BF16 => (CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF),
        other => return Err(unsupported(format!("no matrix product of {other} on the CUDA driver"))),
    })
}

/// The product with every operand readable by cuBLAS and a column-major-writable output.
fn product(c: &Ctx, blas: &Blas, ops: Operands<'_>, workspace: Option<&Workspace>) -> Result<()> {
    let Operands { lhs, rhs, dst, bias } = ops;
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
        // `gemm` copied every operand cuBLAS cannot read into a dense temporary.
        return Err(Error::Internal { op: "matmul", reason: "an operand cuBLAS cannot read reached cuBLASLt".into() });
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
    let bases = [addr(dst), addr(first), addr(second)];
    let align = |i: usize| {
        let outer = (0..batch.n).map(|d| batch.st[i][d] as u64 * size);
        alignment(std::iter::once(bases[i]).chain(outer))
    };
    let (workspace, workspace_bytes) = match workspace {
        Some(w) => (w.ptr.0, w.bytes),
        None => (c.gemm_workspace(GEMM_WORKSPACE_BYTES)?, GEMM_WORKSPACE_BYTES),
    };
    let handle = blas.handle()?;
    let count = i32::try_from(count).map_err(|_| unsupported(format!("a batch of {count} matrices")))?;
    let layouts = [
        Layout::new(data, d_mat, count, bstride[0])?,
        Layout::new(data, a_mat, count, bstride[1])?,
        Layout::new(data, b_mat, count, bstride[2])?,
    ];
    let pref = Preference::new(workspace_bytes as u64, [align(1), align(2), align(0), align(0)])?;
    // The bias epilogue's rules (module docs): D's rows are the output's columns (`swap`), the
    // vector packed and 16-byte aligned, one matrix, not f64.
    let epilogue = bias.filter(|b| {
        swap && batch.n == 0 && dst.dtype != DType::F64 && (b.strides[0] == 1 || n == 1) && addr(b).is_multiple_of(16)
    });
    let types = (compute, scale, [a_mat.0, b_mat.0]);
    let chosen = algorithm(handle.raw(), types, &layouts, &pref, epilogue.map(addr))?;
    let Some((desc, heuristic, fused)) = chosen else {
        return Err(unsupported(format!(
            "cuBLASLt has no algorithm for a {} product of {m}×{k} by {k}×{n}",
            dst.dtype
        )));
    };
    let plan = Plan {
        handle: handle.raw(),
        desc: &desc,
        layouts: &layouts,
        algo: &heuristic.algo,
        f64_scale: scale == lt::cudaDataType::CUDA_R_64F,
        workspace,
        workspace_bytes,
        stream: c.stream,
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
        plan.matmul(ptr(0), ptr(1), ptr(2))?;
    }
    drop(handle);
    if fused {
        Ok(())
    } else {
        add_bias(c, dst, bias)
    }
}

/// The descriptor and cuBLASLt's best algorithm for a product of `types` (compute type, scale
/// type, the operands' transposes), with the bias epilogue at `bias` if cuBLASLt has an
/// algorithm for it (the `bool`), else without; `None` where it has none at all.
fn algorithm(
    handle: lt::cublasLtHandle_t,
    types: (lt::cublasComputeType_t, lt::cudaDataType, [bool; 2]),
    layouts: &[Layout; 3],
    pref: &Preference,
    bias: Option<u64>,
) -> Result<Option<(MatmulDesc, lt::cublasLtMatmulHeuristicResult_t, bool)>> {
    for bias_ptr in [bias, None] {
        let desc = MatmulDesc::new(types.0, types.1, types.2)?;
        if let Some(p) = bias_ptr {
            desc.set_bias(p)?;
        }
        if let Some(h) = heuristic(handle, &desc, layouts, pref)? {
            return Ok(Some((desc, h, bias_ptr.is_some())));
        }
        if bias_ptr.is_none() {
            break;
        }
    }
    Ok(None)
}

/// A cuBLASLt matmul descriptor with the operands' transposes set, destroyed on drop.
struct MatmulDesc(lt::cublasLtMatmulDesc_t);

impl MatmulDesc {
    /// `trans`: whether A and B are read transposed.
    fn new(compute: lt::cublasComputeType_t, scale: lt::cudaDataType, trans: [bool; 2]) -> Result<MatmulDesc> {
        let desc = MatmulDesc(ltr::create_matmul_desc(compute, scale).map_err(blas_error("cublasLtMatmulDescCreate"))?);
        use lt::cublasLtMatmulDescAttributes_t::*;
        for (attr, t) in [(CUBLASLT_MATMUL_DESC_TRANSA, trans[0]), (CUBLASLT_MATMUL_DESC_TRANSB, trans[1])] {
            let op = t as i32; // CUBLAS_OP_N = 0, CUBLAS_OP_T = 1
                               // SAFETY:
                               // - `desc.0` is live: made above, destroyed only when `desc` drops;
                               // - the buffer is a live `i32`, the 4 bytes passed.
            unsafe { ltr::set_matmul_desc_attribute(desc.0, attr, (&op as *const i32).cast(), 4) }
                .map_err(blas_error("cublasLtMatmulDescSetAttribute"))?;
        }
        Ok(desc)
    }

    /// Sets the bias epilogue (`CUBLASLT_EPILOGUE_BIAS`) with the bias vector at device address
    /// `bias` (of the output's dtype, cuBLASLt's default bias type for non-FP8 products).
    fn set_bias(&self, bias: u64) -> Result<()> {
        use lt::cublasLtMatmulDescAttributes_t::*;
        let epilogue = lt::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS as u32;
        // SAFETY:
        // - `self.0` is live: made by `cublasLtMatmulDescCreate`, destroyed only when `self` drops;
        // - the buffer is a live `u32` (the attribute's `uint32_t`), the 4 bytes passed.
        unsafe {
            ltr::set_matmul_desc_attribute(self.0, CUBLASLT_MATMUL_DESC_EPILOGUE, (&epilogue as *const u32).cast(), 4)
        }
        .map_err(blas_error("cublasLtMatmulDescSetAttribute"))?;
        let ptr = bias as *const c_void;
        let size = std::mem::size_of::<*const c_void>();
        // SAFETY:
        // - `self.0` is live (as above);
        // - the buffer is a live pointer-sized value (the attribute's `void *`), its size passed;
        //   cuBLASLt copies the address, which the caller keeps live until the product has run.
        unsafe {
            ltr::set_matmul_desc_attribute(
                self.0,
                CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                (&ptr as *const *const c_void).cast(),
                size,
            )
        }
        .map_err(blas_error("cublasLtMatmulDescSetAttribute"))
    }
}

impl Drop for MatmulDesc {
    fn drop(&mut self) {
        // SAFETY: made by `cublasLtMatmulDescCreate`, owned by `self`, destroyed once here.
        let _ = unsafe { ltr::destroy_matmul_desc(self.0) };
    }
}

/// A cuBLASLt matrix layout (one operand, strided batch), destroyed on drop.
struct Layout(lt::cublasLtMatrixLayout_t);

impl Layout {
    /// The column-major matrix `(transposed, rows, cols, ld)` of `data`, `count` of them
    /// `batch_stride` elements apart.
    fn new(data: lt::cudaDataType, mat: (bool, u64, u64, i64), count: i32, batch_stride: i64) -> Result<Layout> {
        let op = "cublasLtMatrixLayoutSetAttribute";
        let l = Layout(
            ltr::create_matrix_layout(data, mat.1, mat.2, mat.3).map_err(blas_error("cublasLtMatrixLayoutCreate"))?,
        );
        use lt::cublasLtMatrixLayoutAttribute_t::*;
        // SAFETY:
        // - `l.0` is live: made above, destroyed only when `l` drops;
        // - the buffer is a live `i32`, the 4 bytes passed.
        unsafe {
            ltr::set_matrix_layout_attribute(l.0, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, (&count as *const i32).cast(), 4)
        }
        .map_err(blas_error(op))?;
        let attr = CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET;
        // SAFETY:
        // - `l.0` is live: made above, destroyed only when `l` drops;
        // - the buffer is a live `i64`, the 8 bytes passed.
        unsafe { ltr::set_matrix_layout_attribute(l.0, attr, (&batch_stride as *const i64).cast(), 8) }
            .map_err(blas_error(op))?;
        Ok(l)
    }
}

impl Drop for Layout {
    fn drop(&mut self) {
        // SAFETY: made by `cublasLtMatrixLayoutCreate`, owned by `self`, destroyed once here.
        let _ = unsafe { ltr::destroy_matrix_layout(self.0) };
    }
}

/// cuBLASLt's algorithm search preferences, destroyed on drop.
struct Preference(lt::cublasLtMatmulPreference_t);

impl Preference {
    /// At most `workspace` bytes of workspace; `align`: the alignment in bytes of A, B, C and D.
    fn new(workspace: u64, align: [u32; 4]) -> Result<Preference> {
        let op = "cublasLtMatmulPreferenceSetAttribute";
        let p = Preference(ltr::create_matmul_pref().map_err(blas_error("cublasLtMatmulPreferenceCreate"))?);
        use lt::cublasLtMatmulPreferenceAttributes_t::*;
        let attr = CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES;
        // SAFETY:
        // - `p.0` is live: made above, destroyed only when `p` drops;
        // - the buffer is a live `u64`, the 8 bytes passed.
        unsafe { ltr::set_matmul_pref_attribute(p.0, attr, (&workspace as *const u64).cast(), 8) }
            .map_err(blas_error(op))?;
        let attrs = [
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
        ];
        for (attr, v) in attrs.into_iter().zip(align) {
            // SAFETY:
            // - `p.0` is live: made above, destroyed only when `p` drops;
            // - the buffer is a live `u32`, the 4 bytes passed.
            unsafe { ltr::set_matmul_pref_attribute(p.0, attr, (&v as *const u32).cast(), 4) }
                .map_err(blas_error(op))?;
        }
        Ok(p)
    }
}

impl Drop for Preference {
    fn drop(&mut self) {
        // SAFETY: made by `cublasLtMatmulPreferenceCreate`, owned by `self`, destroyed once here.
        let _ = unsafe { ltr::destroy_matmul_pref(self.0) };
    }
}

/// cuBLASLt's best algorithm for `D = A·B` (`layouts`: D, A, B; C is D), `None` when it has none.
fn heuristic(
    handle: lt::cublasLtHandle_t,
    desc: &MatmulDesc,
    layouts: &[Layout; 3],
    pref: &Preference,
) -> Result<Option<lt::cublasLtMatmulHeuristicResult_t>> {
    let [d, a, b] = layouts;
    // SAFETY:
    // - the handle is live and locked by the caller;
    // - the descriptors are live for the call (borrowed from their owners).
    match unsafe { ltr::get_matmul_algo_heuristic(handle, desc.0, a.0, b.0, d.0, d.0, pref.0) } {
        Ok(h) => Ok(Some(h)),
        Err(ltr::CublasError(lt::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED)) => Ok(None),
        Err(e) => Err(blas_error("cublasLtMatmulAlgoGetHeuristic")(e)),
    }
}

/// Everything one `cublasLtMatmul` call of a product takes but the matrices' addresses.
struct Plan<'a> {
    handle: lt::cublasLtHandle_t,
    desc: &'a MatmulDesc,
    /// D, A, B.
    layouts: &'a [Layout; 3],
    algo: &'a lt::cublasLtMatmulAlgo_t,
    /// Whether alpha and beta are `f64` (else `f32`).
    f64_scale: bool,
    /// `workspace_bytes` bytes of device memory only this stream's work uses (its own, or a
    /// capture's for this stream).
    workspace: u64,
    workspace_bytes: usize,
    stream: cudarc::driver::sys::CUstream,
}

impl Plan<'_> {
    /// Queues `D = A·B` for the matrices at `d`, `a` and `b` (C is D, with beta 0).
    fn matmul(&self, d: u64, a: u64, b: u64) -> Result<()> {
        let (one32, zero32, one64, zero64) = (1.0f32, 0.0f32, 1.0f64, 0.0f64);
        let (alpha, beta): (*const c_void, *const c_void) = if self.f64_scale {
            ((&one64 as *const f64).cast(), (&zero64 as *const f64).cast())
        } else {
            ((&one32 as *const f32).cast(), (&zero32 as *const f32).cast())
        };
        let [dl, al, bl] = self.layouts;
        // SAFETY:
        // - the handle (live, locked by the caller), descriptor, layouts and algorithm outlive the call;
        // - `a`, `b`, `d` are live device memory of the stream's device, as the layouts describe
        //   (the launch contract: validated views);
        // - alpha and beta point at live scalars of the descriptor's scale type;
        // - the workspace is live device memory of this device, of the size passed, used by this stream's
        //   work only, in stream order (the stream's own, or the block the runtime keeps for the capture's
        //   work on this stream as long as the graph);
        // - the device's context is current and the stream is live.
        unsafe {
            ltr::matmul(
                self.handle,
                self.desc.0,
                alpha,
                beta,
                a as *const c_void,
                al.0,
                b as *const c_void,
                bl.0,
                d as *const c_void,
                dl.0,
                d as *mut c_void,
                dl.0,
                self.algo,
                self.workspace as *mut c_void,
                self.workspace_bytes,
                self.stream as lt::cudaStream_t,
            )
        }
        .map_err(blas_error("cublasLtMatmul"))
    }
}
