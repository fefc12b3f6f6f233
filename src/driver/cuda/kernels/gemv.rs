//! Products of a row vector and a matrix, `y [1, N] = x [1, K] · w [K, N]` (a decode step's
//! `x @ w` or nn.Linear's `x @ w.t()`), on the CUDA driver: kernels of their own instead of
//! cuBLASLt, whose kernels for one row read a half-type weight at 1.4–2.3 TB/s on the H200
//! (`matmul_bf16_vec` in BENCHMARKS.md; these read it at 2.7–3.6).
//!
//! A row-major weight of a half type (`gv_rows`; f32 ones stay with cuBLASLt, which was faster on
//! the H200 and the H100, unless the card profile's `gemv_rows` sends them here too, launches
//! `gv_rows` early or takes its variant `gv_rows8`) streams once, in 16-byte loads along its
//! rows. A block of 256 threads takes a tile of `16 · V` adjacent columns (each of 16 column
//! lanes `V` of them) over one split of the rows, the splits half a wave of blocks; its 16 row
//! lanes fold rows `r, r + 16, …` of the split in increasing order, loaded in groups of four
//! (eight in `gv_rows8`, four blocks an SM), accumulating in `float` with one FMA per element (as
//! cuBLAS accumulates half types); the row lanes' sums are combined in shared memory in lane
//! order. With several splits, each block writes its tile's
//! partial sums to the stream's reduction scratch and the last block of the tile to finish (an
//! atomic counter, reset after use) adds them in split order and rounds once: deterministic, one
//! launch. A column-major weight (`gv_dots`, f32 too) is a dot product per output, by as many
//! warps of a block (up to eight) as keep the outputs' warps within what the device holds.
//! Views neither reads (another dtype, batch dims, an unaligned weight, a row-major one whose
//! width is not a multiple of `V`) go to cuBLASLt.

use super::ctx::{addr, Ctx, WaitsWhenTold, PARTIALS};
use super::reduce_layouts::PARTIAL_BYTES;
use super::vocab::{Entry, KernelId, ModuleKey, THREADS};
use crate::dtype::DType;
use crate::error::Result;
use crate::kernel::BufferView;

/// Column lanes of a `gv_rows` block (`GV_CX` in `cu/gemv.cu`), each `V` columns; its other
/// `256 / GV_CX` lanes take rows.
pub(in crate::driver::cuda) const GV_CX: usize = 16;

/// Elements per 16-byte load of `dtype`'s weight (`V` in `cu/gemv_head.cu`).
pub(in crate::driver::cuda) fn gemv_vec(dtype: DType) -> usize {
    16 / dtype.size()
}

/// Parameters of `gv_rows` and `gv_dots` (`GvP` in `cu/gemv.cu`).
#[repr(C)]
struct GvP {
    x: u64,
    w: u64,
    y: u64,
    partials: u64,
    counters: u64,
    k: i64,
    n: i64,
    sx: i64,
    ldw: i64,
    sy: i64,
    splits: i64,
    chunk: i64,
    /// Whether `x` is read in 16-byte loads (`gv_dots`).
    xvec: i64,
    /// Launched early whatever its grid (`WaitsWhenTold`): `gv_rows` waits first then.
    early: i64,
}

impl WaitsWhenTold for GvP {
    fn tell_to_wait(&mut self) {
        self.early = 1;
    }
}

/// The card's `gemv_rows` bit that sends f32 row-major weights to `gv_rows` (else cuBLASLt).
const ROWS_F32: u32 = 1;
/// The card's `gemv_rows` bit that launches `gv_rows` early.
const ROWS_EARLY: u32 = 2;
/// The card's `gemv_rows` bit that takes `gv_rows8` (eight rows a lane in flight) for `gv_rows`.
const ROWS_EIGHT: u32 = 4;

/// How a row-major weight's product is launched (`gv_rows` or `gv_rows8`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RowsLaunch {
    /// `gv_rows8` rather than `gv_rows`.
    eight: bool,
    /// Launched early (`Ctx::run_early`).
    early: bool,
}

/// How a row-major weight of `dtype` is launched under the card's `gemv_rows` bits, `None` for
/// cuBLASLt: half types always take `gv_rows` (or `gv_rows8`), f32 under [`ROWS_F32`].
fn rows_choice(dtype: DType, gemv_rows: u32) -> Option<RowsLaunch> {
    let launch = RowsLaunch { eight: gemv_rows & ROWS_EIGHT != 0, early: gemv_rows & ROWS_EARLY != 0 };
    (dtype != DType::F32 || gemv_rows & ROWS_F32 != 0).then_some(launch)
}

/// The fewest rows a split holds (four per row lane of `gv_rows`).
const MIN_CHUNK: i64 = 64;

/// Queues `dst = lhs · rhs` with a vector kernel and returns `true` when the views suit one
/// (`lhs` one row, `rhs` row-major or column-major with 16-byte aligned rows, f32 / bf16 / f16,
/// batch dims of one); returns `false`, queuing nothing, otherwise.
pub(in crate::driver::cuda) fn try_gemv(c: &Ctx, lhs: &BufferView, rhs: &BufferView, dst: &BufferView) -> Result<bool> {
    let r = dst.shape.len();
    let (m, n, k) = (dst.shape[r - 2], dst.shape[r - 1], lhs.shape[r - 1]);
    let dtype = dst.dtype;
    if !matches!(dtype, DType::F32 | DType::BF16 | DType::F16) || m != 1 || dst.shape[..r - 2].iter().any(|&d| d != 1) {
        return Ok(false);
    }
    let (v, size) = (gemv_vec(dtype), dtype.size());
    let (srow, scol) = (rhs.strides[r - 2], rhs.strides[r - 1]);
    let aligned = |ld: usize| (ld * size).is_multiple_of(16) && addr(rhs).is_multiple_of(16);
    let mut p = GvP {
        x: addr(lhs),
        w: addr(rhs),
        y: addr(dst),
        partials: 0,
        counters: 0,
        k: k as i64,
        n: n as i64,
        sx: lhs.strides[r - 1] as i64,
        ldw: 0,
        sy: dst.strides[r - 1] as i64,
        splits: 1,
        chunk: k as i64,
        xvec: 0,
        early: 0,
    };
    // f32 row-major weights stay with cuBLASLt unless the card says otherwise (`gemv_rows`):
    // measured on the H200, `gv_rows` read a 64 MiB f32 weight in 21.4-21.7 µs, cuBLASLt in
    // 19.5-19.9 (half types: 9.4-9.6 against 22.4-23.6); on the H100 (session 35) 26.5-28.4
    // against 25.3-25.9, launched early or not; session 36, `gv_rows8` 26.9 (early 25.9) against
    // 25.2-25.4.
    if scol == 1 && srow >= n && n.is_multiple_of(v) && aligned(srow) {
        if let Some(launch) = rows_choice(dtype, c.card().gemv_rows) {
            p.ldw = srow as i64;
            return rows(c, dtype, p, launch).map(|()| true);
        }
    }
    if srow == 1 && scol >= k && aligned(scol) {
        p.ldw = scol as i64;
        p.xvec = (p.sx == 1 && p.x.is_multiple_of(16)) as i64;
        let f = c.kernel(KernelId { module: ModuleKey::Gemv { dtype }, entry: Entry::GemvDots })?;
        p.splits = dot_splits(c.full_wave_threads(f) / 32, n as u64);
        // A block of THREADS threads takes 8 / splits outputs.
        let grid = c.grid(f, (n as u64).div_ceil(8 / p.splits as u64) * THREADS as u64);
        return c.run(f, grid, &mut p).map(|()| true);
    }
    Ok(false)
}

/// Warps per output of `gv_dots` (1, 2, 4 or 8): the most that keep `n` outputs' warps within
/// the `slots` warps the device holds at once.
fn dot_splits(slots: u64, n: u64) -> i64 {
    let mut s = 1;
    while s < 8 && n * s * 2 <= slots {
        s *= 2;
    }
    s as i64
}

/// `gv_rows` or `gv_rows8` over `p` (a row-major weight), as `launch` says: rows split over
/// half a wave of blocks at the kernel's occupancy.
fn rows(c: &Ctx, dtype: DType, mut p: GvP, launch: RowsLaunch) -> Result<()> {
    let entry = if launch.eight { Entry::Gemv8 } else { Entry::Gemv };
    let f = c.kernel(KernelId { module: ModuleKey::Gemv { dtype }, entry })?;
    let tiles = (p.n as usize).div_ceil(GV_CX * gemv_vec(dtype)) as i64;
    // Half a wave: half the blocks the device holds at once at the kernel's occupancy.
    let half_wave = (c.full_wave_threads(f) / THREADS as u64 / 2).max(1) as i64;
    let target = (half_wave / tiles).max(1);
    // Partials and a counter per tile must fit the scratch.
    let capacity = if tiles > PARTIALS as i64 { 1 } else { (PARTIALS * PARTIAL_BYTES / 4) as i64 / p.n };
    let splits = target.min(p.k / MIN_CHUNK).min(capacity).max(1);
    p.chunk = (p.k + splits - 1) / splits;
    p.splits = ((p.k + p.chunk - 1) / p.chunk).max(1);
    if p.splits > 1 {
        (p.partials, p.counters) = c.reduce_scratch()?;
    }
    c.run_early_when(launch.early, f, ((tiles * p.splits) as u32, THREADS), &mut p)
}

#[cfg(test)]
mod tests {
    use super::{dot_splits, rows_choice, RowsLaunch, GV_CX};
    use crate::driver::cuda::kernels::sources::GEMV;
    use crate::dtype::DType;

    /// The launch's tiles of `gv_rows` are the kernel's: both sides use the same column lanes.
    #[test]
    fn gv_rows_column_lanes_match_the_kernel() {
        assert!(GEMV.contains(&format!("#define GV_CX {GV_CX}\n")), "GV_CX differs between gemv.rs and the kernel");
    }

    /// Half types always take `gv_rows`, f32 only under `gemv_rows`' first bit; the second
    /// launches it early and the third takes `gv_rows8`, for every dtype that takes it.
    #[test]
    fn row_major_weights_take_gv_rows_as_the_card_says() {
        let l = |eight, early| Some(RowsLaunch { eight, early });
        for d in [DType::BF16, DType::F16] {
            assert_eq!(
                (0..8).map(|g| rows_choice(d, g)).collect::<Vec<_>>(),
                [
                    l(false, false),
                    l(false, false),
                    l(false, true),
                    l(false, true),
                    l(true, false),
                    l(true, false),
                    l(true, true),
                    l(true, true)
                ]
            );
        }
        let f32s: Vec<_> = (0..8).map(|g| rows_choice(DType::F32, g)).collect();
        assert_eq!(
            f32s,
            [None, l(false, false), None, l(false, true), None, l(true, false), None, l(true, true)],
            "f32 stays with cuBLASLt without bit 1"
        );
    }

    /// Outputs take more warps only while every output's warps fit in the device's slots at once.
    #[test]
    fn dot_splits_fill_the_device_once() {
        // 132 SMs × 4 blocks × 8 warps.
        let slots = 132 * 4 * 8;
        assert_eq!(dot_splits(slots, 4096), 1, "4,096 outputs already fill the device");
        assert_eq!(dot_splits(slots, 2048), 2);
        assert_eq!(dot_splits(slots, 1024), 4);
        assert_eq!(dot_splits(slots, 264), 8, "at most a block of eight warps per output");
        assert_eq!(dot_splits(slots, 1), 8);
        assert_eq!(dot_splits(8, 4096), 1, "a small device keeps one warp each");
    }
}
