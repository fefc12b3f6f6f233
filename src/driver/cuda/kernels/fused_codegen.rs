//! CUDA C of the fused modules (norm rows, attention), after the head `codegen.rs` fills
//! (`cu/fused_head.cu`): the family's kernels, and one `extern "C"` entry point per kernel.

use super::sources::{ATTENTION, ATTENTION_MMA, ATTENTION_PARAMS, NORM};
use super::vocab::{
    attn_keys_per_tile, ATTN_HEAD_DIMS, ATTN_MMA_HEAD_DIMS, NORM_VALUES_PER_THREAD, NORM_VECTORS_PER_THREAD,
};
use crate::dtype::DType;
use std::fmt::Write;

/// The accumulation type of a fused module of `dtype`: `double` for `f64`, else `float`.
pub(in crate::driver::cuda) fn acc_dtype(dtype: DType) -> DType {
    if dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

/// A norm module's kernels and entry points `nm_rows`, `nm_r{VPT}` and `nm_v{VV}`, after its head.
pub(in crate::driver::cuda) fn norm(s: &mut String) {
    s.push_str(NORM);
    let b = "extern \"C\" __global__ void __launch_bounds__(256)";
    let _ = writeln!(s, "{b} nm_rows(const __grid_constant__ NormP p) {{ cs_enter(); nm_row_blocks(p); }}");
    for vpt in NORM_VALUES_PER_THREAD {
        let _ = writeln!(s, "{b} nm_r{vpt}(const __grid_constant__ NormP p) {{ cs_enter(); nm_reg_rows<{vpt}>(p); }}");
    }
    for vv in NORM_VECTORS_PER_THREAD {
        let _ = writeln!(s, "{b} nm_v{vv}(const __grid_constant__ NormP p) {{ cs_enter(); nm_vec_rows<{vv}>(p); }}");
    }
}

/// An attention module's kernels and entry points `at_{EP}` per padded head dim and `at_merge`,
/// after its head.
pub(in crate::driver::cuda) fn attention(s: &mut String, dtype: DType) {
    s.push_str(ATTENTION_PARAMS);
    s.push_str(ATTENTION);
    let acc = acc_dtype(dtype).size();
    let b = "extern \"C\" __global__ void __launch_bounds__(256)";
    for ep in ATTN_HEAD_DIMS {
        let kt = attn_keys_per_tile(ep, acc);
        let _ = writeln!(s, "{b} at_{ep}(const __grid_constant__ AttnP p) {{ cs_enter(); at_tile<{ep}, {kt}>(p); }}");
    }
    let _ = writeln!(s, "{b} at_merge(const __grid_constant__ AttnP p) {{ cs_enter(); at_merge_rows(p); }}");
}

/// A tensor-core attention module's kernels (`dtype` f16 or bf16) and entry points `am_{E}` per
/// head dim of [`ATTN_MMA_HEAD_DIMS`], after its head. Launched with `AM_THREADS` (128) threads;
/// the bound of 256 keeps the occupancy query of every module's kernels (`table.rs`) valid.
pub(in crate::driver::cuda) fn attention_mma(s: &mut String, dtype: DType) {
    let t = if dtype == DType::BF16 { "bf16" } else { "f16" };
    let _ = writeln!(s, "#define AM_MMA_T \"{t}\"");
    s.push_str(ATTENTION_PARAMS);
    s.push_str(ATTENTION_MMA);
    let b = "extern \"C\" __global__ void __launch_bounds__(256)";
    for e in ATTN_MMA_HEAD_DIMS {
        let _ = writeln!(s, "{b} am_{e}(const __grid_constant__ AttnP p) {{ cs_enter(); am_tile<{e}>(p); }}");
    }
}
