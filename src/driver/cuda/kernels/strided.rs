//! The strided elementwise kernel's lanes (`ew_s` in `cu/elementwise.cu`): the layouts the
//! two-dimensional and tiled kernels do not take (up to [`MAXD`] collapsed dims), such as the
//! copy behind `x.transpose(1, 2).reshape(..)` of a `[B, H, T, E]` attention output.
//!
//! [`strided_lane`] is the one place that chooses how the kernel runs a launch, and
//! [`strided_dims`] lays out its parameters for that choice:
//!
//! * **Vectors**: when dim 0 (the innermost collapsed dim) is dense in the output and its size is
//!   a multiple of the module's vector width (16 bytes of its widest operand), the output is
//!   aligned to a vector and its other strides are multiples of the width, and every input is
//!   dense along dim 0 under the same conditions, constant along it (a broadcast: one load per
//!   vector) or strided (gathered), a thread takes a vector: one load and one store per
//!   operand and the index arithmetic once per vector instead of once per element.
//! * **Multiply-shift division**: when the items (elements, or vectors in the vector lane) fit in
//!   32 bits, each dim's index comes from a multiply-high and a shift by the host's magic numbers
//!   ([`magic_divider`]), not a hardware division, and the last dim's index is the last quotient.
//!
//! * **Batched tiles** ([`batched_tile`]): three dims where an input is transposed against the
//!   output (dense along dim 1, not dim 0) go to the tiled transpose kernel instead, one batch
//!   of its tiles per matrix.
//!
//! Each lane can be turned off for a measuring run (`LaunchTuning::strided_lanes`, the fourth
//! field of `CUDASEM_BENCH_TUNING`): with all off the kernel runs as before them, an element
//! per thread and a hardware division per dim, and batched transposes take it too.

use super::ctx::Dims;
use super::vocab::MAXD;

/// [`LaunchTuning::strided_lanes`](crate::config::LaunchTuning) bit: the vector lane.
pub(in crate::driver::cuda) const LANE_VECTORS: u32 = 1;
/// [`LaunchTuning::strided_lanes`](crate::config::LaunchTuning) bit: the multiply-shift division.
pub(in crate::driver::cuda) const LANE_DIVISION: u32 = 2;
/// [`LaunchTuning::strided_lanes`](crate::config::LaunchTuning) bit: batched transposes tiled.
pub(in crate::driver::cuda) const LANE_TILES: u32 = 4;

/// The smallest matrix edge, in elements, a batched transpose is tiled for ([`batched_tile`]).
const TILE_MIN_EDGE: i64 = 16;

/// Whether collapsed dims `d` (output, then inputs) are a batch of transposes for the tiled
/// kernel (`ew_tile` with a batch): three dims, the output dense over them, and some input
/// dense along dim 1 but not dim 0 (a `[B, R, C]` read from a `[B, C, R]`, such as
/// `k.transpose(-2, -1).contiguous()` of a `[B * H, T, E]`), each matrix at least
/// [`TILE_MIN_EDGE`] on both sides, with [`LANE_TILES`] in `lanes`.
///
/// Why: the strided kernel gathers such an input along the output's rows, a sector of memory
/// per element read, while the tiles read and write whole rows on both sides (the 2-D case's
/// kernel, `elementwise_policy::tile_edge`); a matrix smaller than a tile's quarter edge would
/// leave most of each block's threads idle (unmeasured: a bound chosen, not tuned).
pub(in crate::driver::cuda) fn batched_tile(d: &Dims<4>, nin: usize, lanes: u32) -> bool {
    if lanes & LANE_TILES == 0 || d.n != 3 || d.shape[0] < TILE_MIN_EDGE || d.shape[1] < TILE_MIN_EDGE {
        return false;
    }
    let dense = d.st[0][0] == 1 && d.st[0][1] == d.shape[0] && d.st[0][2] == d.shape[0] * d.shape[1];
    dense && (1..=nin.min(3)).any(|k| d.st[k][1] == 1 && d.st[k][0] > 1)
}

/// How the strided kernel runs one launch ([`strided_lane`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::driver::cuda) struct StridedLane {
    /// Elements per thread's item: the module's vector width in the vector lane, else 1.
    pub vec: usize,
    /// Whether dims are divided by multiply-shift (the items fit in 32 bits).
    pub magic: bool,
}

/// The operands of a strided launch as the policy sees them: the address of each one's first
/// element and its element size in bytes, the output first (an input given as a number has
/// address 0).
#[derive(Debug, Clone, Copy)]
pub(in crate::driver::cuda) struct Operands {
    pub addr: [u64; 4],
    pub size: [usize; 4],
    /// Inputs, at most 3.
    pub nin: usize,
}

/// The lane of the strided kernel for collapsed dims `d` (output, then inputs) of `ops`, in a
/// module whose vectors hold `vec` elements, with the lanes `lanes` allows
/// ([`LANE_VECTORS`], [`LANE_DIVISION`]).
///
/// Why these conditions: a thread's vector is `vec` consecutive elements of dim 0, so dim 0
/// must be dense in the output (the store is one access) and a whole number of vectors (no
/// vector straddles two rows); each vector must start aligned in every operand loaded or
/// stored whole, so the base addresses are aligned to a vector and every other dim's stride is
/// a multiple of `vec`. Inputs constant along dim 0 (stride 0) load one element per vector and
/// inputs strided along it gather, so neither restricts the lane. Anything else (an odd head
/// dim, a base moved by `narrow`, a transposed output) falls back to an element per thread.
/// The division's magic numbers are exact below 2^32, hence the 32-bit condition.
pub(in crate::driver::cuda) fn strided_lane<const K: usize>(
    d: &Dims<K>,
    ops: &Operands,
    vec: usize,
    lanes: u32,
) -> StridedLane {
    let n: u64 = d.shape[..d.n].iter().map(|&s| s as u64).product();
    let vectors = lanes & LANE_VECTORS != 0 && vec > 1 && d.n >= 1 && vector_layout(d, ops, vec);
    let vec = if vectors { vec } else { 1 };
    let magic = lanes & LANE_DIVISION != 0 && d.n >= 1 && n / vec as u64 <= u32::MAX as u64;
    StridedLane { vec, magic }
}

/// Whether every operand allows the vector lane (the conditions of [`strided_lane`]).
fn vector_layout<const K: usize>(d: &Dims<K>, ops: &Operands, vec: usize) -> bool {
    let v = vec as i64;
    if d.st[0][0] != 1 || d.shape[0] % v != 0 {
        return false;
    }
    let whole = |k: usize| {
        let aligned = ops.addr[k].is_multiple_of((ops.size[k] * vec) as u64);
        aligned && d.st[k][1..d.n].iter().all(|s| s % v == 0)
    };
    // Inputs at address 0 are numbers; inputs not dense along dim 0 are broadcast or gathered.
    whole(0) && (1..=ops.nin.min(K - 1)).all(|k| ops.addr[k] == 0 || d.st[k][0] != 1 || whole(k))
}

/// The strided kernel's dims for `lane` (`EwStrided` after its `EwFast`): in the vector lane,
/// dim 0 counts vectors and its strides are `vec` times the elements' (so the kernel's offsets
/// come out in elements), with the magic numbers of every dim when `lane.magic`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(in crate::driver::cuda) struct StridedDims {
    pub ndim: i32,
    pub div: i32,
    pub shape: [i64; MAXD],
    pub st: [[i64; MAXD]; 4],
    pub magic: [u32; MAXD],
    pub shift: [u32; MAXD],
}

/// [`StridedDims`] of the collapsed dims `d` for `lane`.
pub(in crate::driver::cuda) fn strided_dims(d: &Dims<4>, lane: StridedLane) -> StridedDims {
    let mut s = StridedDims {
        ndim: d.n as i32,
        div: lane.magic as i32,
        shape: d.shape,
        st: d.st,
        magic: [0; MAXD],
        shift: [0; MAXD],
    };
    if lane.vec > 1 {
        s.shape[0] /= lane.vec as i64;
        for st in &mut s.st {
            st[0] *= lane.vec as i64;
        }
    }
    if lane.magic {
        for i in 0..d.n {
            (s.magic[i], s.shift[i]) = magic_divider(s.shape[i] as u64);
        }
    }
    s
}

/// `(magic, shift)` with `x / d == (umulhi(x, magic) + x) >> shift` for every `x < 2^32`
/// (`1 <= d < 2^32`; the sum taken in 64 bits).
pub(in crate::driver::cuda) fn magic_divider(d: u64) -> (u32, u32) {
    debug_assert!((1..1 << 32).contains(&d));
    let shift = if d <= 1 { 0 } else { 64 - (d - 1).leading_zeros() };
    let magic = ((1u128 << 32) * ((1u128 << shift) - d as u128)) / d as u128 + 1;
    (magic as u32, shift)
}
