//! CUDA C of the fused modules (norm rows, attention): `cu/fused_head.cu` filled with the
//! module's types, the family's kernels, and one `extern "C"` entry point per kernel.

use super::codegen::{conv, ctype, pairs_of};
use super::sources::{fill, ATTENTION, FUSED_HEAD, NORM};
use super::vocab::{attn_keys_per_tile, ATTN_HEAD_DIMS};
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

fn head(s: &mut String, dtype: DType) {
    let c = acc_dtype(dtype);
    let values = [
        ("ts", ctype(dtype).to_owned()),
        ("tc", ctype(c).to_owned()),
        ("to_c", conv(dtype, c, "x")),
        ("from_c", conv(c, dtype, "v")),
        ("ex", if c == DType::F64 { "exp" } else { "expf" }.to_owned()),
    ];
    fill(s, FUSED_HEAD, &pairs_of(&values));
}

/// A norm module: `nm_rows`.
pub(in crate::driver::cuda) fn norm(s: &mut String, dtype: DType) {
    head(s, dtype);
    s.push_str(NORM);
    s.push_str(
        "extern \"C\" __global__ void __launch_bounds__(256) nm_rows(const __grid_constant__ NormP p) \
         { cs_enter(); nm_row_blocks(p); }\n",
    );
}

/// An attention module: `at_{EP}` per padded head dim, and `at_merge`.
pub(in crate::driver::cuda) fn attention(s: &mut String, dtype: DType) {
    head(s, dtype);
    s.push_str(ATTENTION);
    let acc = acc_dtype(dtype).size();
    let b = "extern \"C\" __global__ void __launch_bounds__(128)";
    for ep in ATTN_HEAD_DIMS {
        let kt = attn_keys_per_tile(ep, acc);
        let _ = writeln!(s, "{b} at_{ep}(const __grid_constant__ AttnP p) {{ cs_enter(); at_tile<{ep}, {kt}>(p); }}");
    }
    let _ = writeln!(s, "{b} at_merge(const __grid_constant__ AttnP p) {{ cs_enter(); at_merge_rows(p); }}");
}
