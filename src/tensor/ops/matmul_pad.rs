//! Matrix products whose rows do not start on 16-byte boundaries (a vocabulary of 50257 columns,
//! an inner dim of 50257): padded leading dimensions.
//!
//! cuBLASLt reads a column-major matrix (a row-major one, transposed) through its leading
//! dimension, and its fast kernels for the half types — Tensor Core tiles loaded by 16-byte
//! vector or TMA copies — need every pointer and every leading dimension to be a multiple of
//! 16 bytes (cuBLAS's "Tensor Core Usage": dimensions and leading dimensions that are multiples
//! of 8 elements of a 16-bit type; cuBLASLt's `CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES` tell
//! its heuristics what a call's pointers allow, and a leading dimension that is not a multiple
//! of 16 bytes leaves it only the slower kernels that load element by element). A dense
//! `[1024, 50257]` bf16 weight has a leading dimension of 100514 bytes, so `x @ w` and its
//! `[.., 50257]` output take those kernels, whatever the pointers.
//!
//! Splitting the product into an aligned part and a remainder would not help here: the split
//! keeps the leading dimension, which is what is misaligned. So the product runs on copies whose
//! rows are padded to 16 bytes: each unaligned operand copied into the first `q` columns of a
//! `[.., p, q']` block (`q'` = `q` rounded up to 16 bytes; the padding is never read: the logical
//! sizes stay `m`, `n`, `k`), the output computed into such a block and copied out into the dense
//! result PyTorch returns. The copies cost memory bandwidth (each matrix read and written once
//! more). Measured on an H100 for the lm-head's bf16 `[8192, 1024] @ [1024, 50257]`, the copies
//! cost more than cuBLASLt's unaligned kernels lose (no padding was the fastest, padding the
//! operands alone slower, padding all three slower still: BENCHMARKS.md), so
//! [`MatmulPadding::Auto`] never pads; the other modes stay to measure it on other cards and
//! shapes. The temporaries come from the caching allocator, like any op's.

use crate::dtype::DType;
use crate::error::Result;
use crate::tensor::Tensor;
use std::sync::atomic::{AtomicU8, Ordering};

/// How matrix products treat matrices whose rows do not start on 16-byte boundaries, for
/// benchmark and test runs (not an API; [`set_matmul_padding`]).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MatmulPadding {
    /// The default: no padded copies (measured faster than either padding on an H100).
    #[default]
    Auto,
    /// Never: cuBLASLt reads the matrices as they are.
    Off,
    /// Always, on any GPU driver and for every float dtype (CPU tensors never pad).
    On,
    /// As `On` for the operands only: the output is written with its own leading dimension (to
    /// measure what cuBLASLt does with an unaligned output alone).
    Inputs,
}

impl MatmulPadding {
    /// Parses `auto`, `off`, `on` or `inputs` (empty: `auto`).
    pub fn parse(value: &str) -> Option<MatmulPadding> {
        match value.trim() {
            "" | "auto" => Some(MatmulPadding::Auto),
            "off" => Some(MatmulPadding::Off),
            "on" => Some(MatmulPadding::On),
            "inputs" => Some(MatmulPadding::Inputs),
            _ => None,
        }
    }
}

static PADDING: AtomicU8 = AtomicU8::new(0);

/// Chooses how the matrix products that follow treat matrices whose rows are not 16-byte
/// aligned (process-wide, for benchmark and test runs; `cudasem bench` takes it from
/// `CUDASEM_MATMUL_PAD`): see [`MatmulPadding`]. Results are the same products either way.
#[doc(hidden)]
pub fn set_matmul_padding(padding: MatmulPadding) {
    PADDING.store(padding as u8, Ordering::Relaxed);
}

/// The current [`MatmulPadding`].
#[doc(hidden)]
pub fn matmul_padding() -> MatmulPadding {
    match PADDING.load(Ordering::Relaxed) {
        x if x == MatmulPadding::Off as u8 => MatmulPadding::Off,
        x if x == MatmulPadding::On as u8 => MatmulPadding::On,
        x if x == MatmulPadding::Inputs as u8 => MatmulPadding::Inputs,
        _ => MatmulPadding::Auto,
    }
}

/// The alignment in bytes of pointers and leading dimensions cuBLASLt's fast kernels need.
const ALIGN: usize = 16;

/// Which matrices of a product run on padded copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Padding {
    pub lhs: bool,
    pub rhs: bool,
    pub out: bool,
}

/// Whether cuBLASLt reads the matrix operand `t` (`[.., p, q]`) with 16-byte aligned rows: its
/// address, its leading dimension as the CUDA driver passes it (the row stride of a row-major
/// matrix, the column stride of a column-major one, `q` for the dense copy of any other layout)
/// and its batch strides.
fn aligned(t: &Tensor) -> bool {
    let r = t.dim();
    let (p, q) = (t.shape()[r - 2], t.shape()[r - 1]);
    let st = t.stride();
    let size = t.dtype().size();
    let ld = if st[r - 1] == 1 && (st[r - 2] >= q || p == 1) {
        st[r - 2].max(q)
    } else if st[r - 2] == 1 && (st[r - 1] >= p || q == 1) {
        st[r - 1].max(p)
    } else {
        q
    };
    let batch = (0..r - 2).filter(|&d| t.shape()[d] > 1).all(|d| (st[d] * size).is_multiple_of(ALIGN));
    (ld * size).is_multiple_of(ALIGN) && t.data_ptr().is_multiple_of(ALIGN as u64) && batch
}

/// Which matrices of `a [.., m, k] @ b [.., k, n]` run on padded copies under the current [`MatmulPadding`].
pub(super) fn plan(a: &Tensor, b: &Tensor, m: usize, n: usize, k: usize) -> Padding {
    let mode = matmul_padding();
    let gpu = matches!(a.device(), crate::Device::Cuda(_));
    if matches!(mode, MatmulPadding::Off | MatmulPadding::Auto) || !gpu || m == 0 || n == 0 || k == 0 {
        return Padding::default();
    }
    let size = a.dtype().size();
    let want = Padding { lhs: !aligned(a), rhs: !aligned(b), out: m > 1 && !(n * size).is_multiple_of(ALIGN) && n > 1 };
    match mode {
        MatmulPadding::Inputs => Padding { out: false, ..want },
        _ => want,
    }
}

/// `q` elements of `dtype` rounded up to whole 16-byte rows.
pub(super) fn padded_len(q: usize, dtype: DType) -> usize {
    q.next_multiple_of((ALIGN / dtype.size()).max(1))
}

/// A copy of `t` (`[.., p, q]`) whose rows are padded to 16 bytes: the first `q` columns of a
/// dense `[.., p, padded_len(q)]` tensor on `t`'s device.
pub(super) fn padded(t: &Tensor) -> Result<Tensor> {
    let r = t.dim();
    let q = t.shape()[r - 1];
    let mut shape = t.shape().to_vec();
    shape[r - 1] = padded_len(q, t.dtype());
    let full = Tensor::empty_at(&shape, t.dtype(), t.place())?;
    let view = full.narrow(-1, 0, q)?;
    view.copy_(t, false)?;
    Ok(view)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_modes_parse_and_lengths_round_to_16_bytes() {
        assert_eq!(MatmulPadding::parse(" on"), Some(MatmulPadding::On));
        assert_eq!(MatmulPadding::parse(""), Some(MatmulPadding::Auto));
        assert_eq!(MatmulPadding::parse("off"), Some(MatmulPadding::Off));
        assert_eq!(MatmulPadding::parse("inputs"), Some(MatmulPadding::Inputs));
        assert_eq!(MatmulPadding::parse("yes"), None);
        assert_eq!(padded_len(50257, DType::BF16), 50264);
        assert_eq!(padded_len(50257, DType::F32), 50260);
        assert_eq!(padded_len(1024, DType::BF16), 1024);
        assert_eq!(padded_len(3, DType::F64), 4);
    }
}
