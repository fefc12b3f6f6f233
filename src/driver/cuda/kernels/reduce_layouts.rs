//! The reduction kernels' layouts and variants (the column kernel's block shape, the size of a
//! partial result, which modules add runs of elements in `f32`, which have the block kernel's
//! wide variant): a leaf of `codegen.rs`, which
//! generates the modules, and of `reduce.rs`, which launches them.

use crate::dtype::DType;
use crate::kernel::ReduceOp;

/// Column-group lanes of a block of the column-reduction kernel (`COLX` of `red_cols`; the
/// block's other `256 / COLX` lanes take rows): 16 for elements of up to 2 bytes, else 32.
/// Measured on the H200 over [4096, 4096] along dim 0: `sum_bf16_first` 14.5 µs with 32, 12.6
/// with 16, `amax_bf16_first` 13.9 and 10.5; `sum_f32_first` 24.2 with 32, 25.2 with 16.
pub(in crate::driver::cuda) fn cols_x(src: DType) -> usize {
    if src.size() <= 2 {
        16
    } else {
        32
    }
}

/// Bytes of one partial result of a reduction (the widest accumulator: value and index).
pub(in crate::driver::cuda) const PARTIAL_BYTES: usize = 16;

/// Whether a reduction module adds short runs of elements in `f32` before its `f64` accumulator
/// (`HALF_RUNS`): sums and means of a half type into a half type. Each run's partial sums, of
/// elements of 8 or 11 significant bits, round at most at 2^-24 of themselves, far below the
/// output's ulp (2^-8, 2^-11); one conversion to `f64` per run instead of per element (on the
/// H200 the conversions, 16 a clock per SM, bounded these sums: `sum_bf16_first` took 11.6 µs
/// against `amax_bf16_first`'s 9.6 over the same 32 MiB, and 9.96 in runs).
pub(in crate::driver::cuda) fn half_runs(op: ReduceOp, src: DType, dst: DType) -> bool {
    let half = |d: DType| matches!(d, DType::F16 | DType::BF16);
    matches!(op, ReduceOp::Sum | ReduceOp::Mean) && half(src) && half(dst)
}

/// Whether a reduction module also holds the block kernel's wide variant (`red_block8`: the next
/// four 16-byte loads of a thread in flight while it adds the four before them, the same result
/// as `red_block`, whose loads ptxas issues one at a time), which a reduction into one output
/// runs when the card profile's `sum_loads` is 8 (`driver::card`): sums and means of `f32` and
/// `f64` (`sum_f32_1gib`; 64 registers in `f32`). Not the half types (82 registers in bf16, three
/// blocks per SM: unmeasured) nor the extremes (the other modules' compile time).
pub(in crate::driver::cuda) fn wide_block(op: ReduceOp, src: DType, values: bool) -> bool {
    matches!(op, ReduceOp::Sum | ReduceOp::Mean) && matches!(src, DType::F32 | DType::F64) && !values
}
