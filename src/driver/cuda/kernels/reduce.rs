//! Reductions and softmax on the CUDA driver: the choice of kernel and its parameters.
//!
//! The input is seen as `[outputs][reduced]`: the kept dims (collapsed for input and output
//! together) index the outputs, the reduced dims (collapsed, in their row-major order, so an
//! arg-reduction's index is PyTorch's) index the elements of one output. Four kernels:
//! * **block**: a block per output (reduced elements near each other in memory), 16-byte
//!   loads when the rows are dense and aligned; when there are fewer outputs than the GPU has
//!   block slots, each row is split over several blocks of one wave (chunks of at least 8,192
//!   elements, or of 2,048 where that gives two blocks per SM: a few vocabulary-length rows;
//!   interleaved: together they
//!   stream through one window of the row at a time; half a wave measured slower), whose
//!   partial results go to per-stream scratch memory and are combined, in a fixed order, by the
//!   last block to finish (an acquire-release atomic counter per output, no fences), all in one
//!   launch; a reduction into one output takes the card profile's grid (`sum_blocks` per SM, 0:
//!   one wave) and loads in flight (`sum_loads`: 8 runs the wide variant, `Entry::BlockWide`);
//! * **warp**: a warp per output, for rows of up to [`WARP_ROW`] elements, or of up to
//!   [`LONG_WARP_ROW`] when the outputs are enough to fill the GPU with warps;
//! * **columns**: a reduction over an outer dim whose adjacent outputs are adjacent in memory
//!   (one reduced dim): blocks of `COLX` × `256 / COLX` threads ([`cols_x`]: 16 × 16 for 2-byte
//!   elements, else 32 × 8), each thread `VEC` adjacent outputs by one 16-byte load per row when
//!   aligned (else one), two passes of four rows in flight, the block's row lanes combined in
//!   shared memory by a thread per output, rows split over blocks when outputs are few, into two
//!   blocks per SM (more, smaller splits ran slower; combined by the last block of each group of
//!   columns, again a thread per output);
//! * **thread**: a thread per output (other layouts of outputs near each other in memory), also
//!   split into chunks when outputs are few.
//!
//! An extreme with its index (`max` / `min` along a dim) is the arg-reduction's kernel writing the
//! value beside the index (`RedP::dst2`, at the index's element offset).
//!
//! Floating-point sums and means accumulate in `f64` (results within an ulp of the CPU
//! reference, and deterministic: every combination order is fixed; a half type's sum into a
//! half type adds runs of four or eight elements in `f32` first, `reduce_layouts::half_runs`),
//! extremes compare in the input's precision (floats by PTX's NaN-propagating `max.NaN` /
//! `min.NaN`), integers accumulate in wrapping `i64`.

use super::ctx::{addr, collapse, unsupported, Ctx, WaitsWhenTold, PARTIALS};
use super::reduce_layouts::{cols_x, wide_block};
use super::softmax_layouts::{
    softmax_big_fits, softmax_block_fits, softmax_mid_fits, softmax_raw_layouts, softmax_value_bytes, softmax_vec,
    SOFTMAX_MID_THREADS, SOFTMAX_RAW_THREADS,
};
use super::table::Func;
use super::vocab::{Entry, KernelId, ModuleKey, MAXD, THREADS};
use crate::error::Result;
use crate::kernel::{BufferView, ReduceOp};

/// The longest rows a warp reduces alone.
const WARP_ROW: i64 = 2048;
/// The longest rows a warp reduces alone when the rows are many.
const LONG_WARP_ROW: i64 = 16384;
/// The fewest elements per block of a row split over blocks.
const BLOCK_CHUNK: i64 = 8192;
/// The fewest elements per block of a row split over blocks when the rows are too few to fill
/// the GPU with two blocks per SM otherwise (reductions and softmax).
const FILL_CHUNK: i64 = 2048;
/// The fewest elements a thread's chunk of a split column holds.
const THREAD_CHUNK: i64 = 64;
/// The fewest rows each thread of a column kernel's split folds.
const COL_ROWS: i64 = 4;

/// Parameters of the reduction kernels (`RedP` in the generated C).
#[repr(C)]
struct RedP {
    src: u64,
    dst: u64,
    dst2: u64,
    partials: u64,
    counters: u64,
    n_out: i64,
    n_red: i64,
    splits: i64,
    chunk: i64,
    /// `1 / n_red`, the mean's scale.
    inv_n: f64,
    out_ndim: i32,
    red_ndim: i32,
    vec: i32,
    pad: i32,
    out_shape: [i64; MAXD],
    out_sst: [i64; MAXD],
    out_dst: [i64; MAXD],
    red_shape: [i64; MAXD],
    red_st: [i64; MAXD],
}

/// Parameters of the softmax kernels (`SmP`).
#[repr(C)]
struct SmP {
    src: u64,
    dst: u64,
    rows: i64,
    n: i64,
    sst: i64,
    dst_st: i64,
    out_ndim: i32,
    /// Launched early whatever its grid (`WaitsWhenTold`): the kernels wait first then.
    early: i32,
    out_shape: [i64; MAXD],
    out_sst: [i64; MAXD],
    out_dst: [i64; MAXD],
    /// The split rows' partials (two values of the compute type per (row, split) task).
    partials: u64,
    /// Splits per row of the split kernels (1 for the others).
    splits: i64,
}

impl WaitsWhenTold for SmP {
    fn tell_to_wait(&mut self) {
        self.early = 1;
    }
}

/// `⌈a / b⌉` for `a ≥ 0`, `b > 0`.
fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

fn too_many_dims(v: &BufferView) -> crate::error::Error {
    unsupported(format!("a view of shape {:?} whose dims do not collapse below {MAXD}", v.shape))
}

/// Queues `dst = op(src)` over `dims` (already validated; `dst` is not empty); with `values`, an
/// arg-reduction that also writes the extreme's value there (same strides as `dst`).
pub(in crate::driver::cuda) fn reduce(
    c: &Ctx,
    op: ReduceOp,
    src: &BufferView,
    dst: &BufferView,
    dims: &[usize],
    values: Option<&BufferView>,
) -> Result<()> {
    let kept = collapse(&src.shape, [Some(&src.strides), Some(&dst.strides)], |d| !dims.contains(&d))
        .ok_or_else(|| too_many_dims(src))?;
    let red = collapse(&src.shape, [Some(&src.strides)], |d| dims.contains(&d)).ok_or_else(|| too_many_dims(src))?;
    let n_out = dst.numel() as i64;
    let n_red: i64 = dims.iter().map(|&d| src.shape[d] as i64).product();
    let module = ModuleKey::Reduce { op, src: src.dtype, dst: dst.dtype, values: values.is_some() };
    let red_inner = if red.n > 0 { red.st[0][0] } else { 0 };
    let kept_inner = if kept.n > 0 { kept.st[0][0] } else { i64::MAX };
    let rows = n_out == 1 || (red.n > 0 && red_inner < kept_inner);
    let size = src.dtype.size() as i64;
    let vec = 16 / size;
    let base = addr(src);
    // Long rows go to a warp each too when there are enough of them to fill the GPU with warps.
    let many = n_out >= c.info.sms as i64 * 16;
    let entry = if !rows && red.n == 1 && kept.n > 0 && kept.st[0][0] == 1 {
        // Columns: adjacent outputs read adjacent elements of each row, `vec` of them a load
        // when every group of `vec` outputs is aligned and within the inner kept dim.
        let aligned = base.is_multiple_of(16)
            && kept.shape[0] % vec == 0
            && red.st[0][0] % vec == 0
            && (1..kept.n).all(|d| kept.st[0][d] % vec == 0);
        Entry::Cols(if aligned { vec as u8 } else { 1 })
    } else if !rows || n_red <= 16 {
        Entry::Thread
    } else if (n_red <= WARP_ROW && n_out > 1) || (n_red <= LONG_WARP_ROW && many) {
        Entry::Warp
    } else {
        Entry::Block
    };
    // A reduction into one output takes its grid and loads in flight from the card profile (the
    // wide kernel only where its vector loop runs: a dense, 16-byte aligned row).
    let card = (entry == Entry::Block && n_out == 1).then(|| c.card());
    let vector_row = red.n == 1 && red.st[0][0] == 1 && base.is_multiple_of(16);
    let entry = match card {
        Some(k) if k.sum_loads == 8 && vector_row && wide_block(op, src.dtype, values.is_some()) => Entry::BlockWide,
        _ => entry,
    };
    let f = c.kernel(KernelId { module, entry })?;
    let wave = match card {
        Some(k) if k.sum_blocks > 0 => c.info.sms as i64 * k.sum_blocks as i64,
        _ => c.wave(f, &c.ops.tuning.reduce_waves) as i64,
    };
    // The column kernel's blocks: `colx` groups of outputs by `THREADS / colx` row lanes.
    let colx = cols_x(src.dtype) as i64;
    let col_blocks = match entry {
        Entry::Cols(w) => ceil_div(ceil_div(n_out, w as i64), colx),
        _ => 0,
    };
    let (splits, chunk) = split_plan(c.info.sms as i64, entry, wave, n_out, n_red, col_blocks, colx);
    let block = matches!(entry, Entry::Block | Entry::BlockWide);
    let dense_rows = red.n == 1 && red.st[0][0] == 1;
    let aligned_rows = n_out == 1 || (0..kept.n).all(|d| kept.st[0][d] % vec == 0);
    let vec_ok = (block || entry == Entry::Warp) && dense_rows && base.is_multiple_of(16) && aligned_rows;
    let (partials, counters) = if splits > 1 { c.reduce_scratch()? } else { (0, 0) };
    let mut p = RedP {
        src: base,
        dst: addr(dst),
        dst2: values.map_or(0, addr),
        partials,
        counters,
        n_out,
        n_red,
        splits,
        chunk,
        inv_n: 1.0 / n_red.max(1) as f64,
        out_ndim: kept.n as i32,
        red_ndim: red.n as i32,
        vec: vec_ok as i32,
        pad: 0,
        out_shape: kept.shape,
        out_sst: kept.st[0],
        out_dst: kept.st[1],
        red_shape: red.shape,
        red_st: red.st[0],
    };
    let tasks = (n_out * splits) as u64;
    let grid = match entry {
        Entry::Block | Entry::BlockWide => (tasks.min(wave as u64)) as u32,
        Entry::Warp => c.grid(f, tasks * 32),
        Entry::Cols(_) => ((col_blocks * splits) as u64).min(wave as u64 * 16) as u32,
        _ => c.grid(f, tasks),
    };
    c.run(f, grid.max(1), &mut p)
}

/// Splits per output of a reduction that runs `entry` (`wave` blocks fill the device; `col_blocks`
/// blocks of `colx` output groups for the column kernel) and the rows each split takes (`chunk`,
/// unused by the block kernels, whose tasks interleave).
fn split_plan(sms: i64, entry: Entry, wave: i64, n_out: i64, n_red: i64, col_blocks: i64, colx: i64) -> (i64, i64) {
    let splits = match entry {
        Entry::Block | Entry::BlockWide if n_out < wave => block_splits(sms, wave, n_out, n_red),
        Entry::Thread if n_out < wave * 64 => {
            (wave * 256 / n_out).min(n_red / THREAD_CHUNK).min(PARTIALS as i64 / n_out.max(1))
        }
        // Two blocks per SM (within one wave: the kernel holds two to four), each thread at least
        // `COL_ROWS` rows: measured on the H200 ([4096, 4096] over dim 0, 32 groups of columns),
        // the f32 sum took 27.2 / 22.3 / 26.7 / 31.0 µs over 4 / 8 / 16 / 33 splits.
        Entry::Cols(_) => {
            (2 * sms / col_blocks).min(n_red / (THREADS as i64 / colx * COL_ROWS)).min(PARTIALS as i64 / n_out)
        }
        _ => 1,
    }
    .max(1);
    // Thread and column tasks take contiguous chunks of their column; block tasks interleave
    // (`chunk` unused).
    let chunk = ceil_div(n_red, splits).max(1);
    let block = matches!(entry, Entry::Block | Entry::BlockWide);
    (if block { splits } else { ceil_div(n_red, chunk).max(1) }, chunk)
}

/// Splits per output of the block kernel when the outputs are fewer than a wave of blocks:
/// chunks of at least [`BLOCK_CHUNK`], or of [`FILL_CHUNK`] when that many splits would not give
/// two blocks per SM (a few vocabulary-length rows), within one wave and the partials.
fn block_splits(sms: i64, wave: i64, n_out: i64, n_red: i64) -> i64 {
    let fill = ceil_div(2 * sms, n_out).min(n_red / FILL_CHUNK);
    (wave / n_out).min((n_red / BLOCK_CHUNK).max(fill)).min(PARTIALS as i64 / n_out)
}

/// Chunks per lane of a warp kernel's row of aligned vectors when the row is shorter than a
/// warp's 32 lanes of this many (measured on the H200, `softmax_bf16_rows128`: 22.2 µs with one
/// chunk on each of 16 lanes, 20.1 with two on each of 8, 20.2 with four on each of 4).
const MIN_CH: i64 = 2;

/// `(g, ch)` of a warp kernel for a row of `t` chunks of `w` elements (`t` a power of two; at
/// most 32 values per lane): rows of at least 32 · [`MIN_CH`] chunks take the whole warp; shorter
/// ones of 16 chunks or more (aligned vectors) take groups of fewer lanes with `MIN_CH` chunks
/// each, so that several loads are in flight before the shuffles wait on them; the others one
/// chunk per lane (16 lanes of two for a row of 32).
fn warp_layout(t: i64, w: i64) -> (u8, u8) {
    let k = if w > 1 { MIN_CH.min(32 / w) } else { 1 };
    if t >= 32 * k {
        return (32, (t / 32) as u8);
    }
    let ch = if t >= 16 { k } else { 1 };
    match t / ch {
        32 => (16, 2),
        g => (g as u8, ch as u8),
    }
}

/// Queues `dst = softmax(src)` (or its log) along `dim` (already validated; not empty).
///
/// Contiguous rows of up to 1,024 elements go to a warp each (or to fewer lanes,
/// [`warp_layout`]), held in registers; longer ones to a block each, in registers of 128 threads
/// when four or eight chunks each hold the row in at most 32 values (half-type rows of 2,049 to
/// 4,096: 19.4–19.6 µs for `softmax_bf16_rows4096` / `_f16_`, against 21.1–21.5 in 256 threads of
/// two chunks), else of 256 (up to 64 values each) or of 1,024 (up to 32), else in two passes
/// over the row — or, when the rows are fewer than the SMs (a few vocabulary-length rows), each
/// row split over blocks in two launches ([`split_rows`], [`softmax_splits`]); rows laid out
/// across threads (the softmax dim strided, outer to the others) to a thread each.
pub(in crate::driver::cuda) fn softmax(
    c: &Ctx,
    src: &BufferView,
    dst: &BufferView,
    dim: usize,
    log: bool,
) -> Result<()> {
    let kept = collapse(&src.shape, [Some(&src.strides), Some(&dst.strides)], |d| d != dim)
        .ok_or_else(|| too_many_dims(src))?;
    let n = src.shape[dim] as i64;
    let rows = (dst.numel() as i64) / n.max(1);
    let (sst, dst_st) = (src.strides[dim] as i64, dst.strides[dim] as i64);
    let kept_inner = if kept.n > 0 { kept.st[0][0] } else { i64::MAX };
    let v = softmax_vec(src.dtype, dst.dtype) as i64;
    let entry = if n > 1 && sst > kept_inner && rows > 1 {
        Entry::Thread
    } else if n == 1 || (sst == 1 && dst_st == 1) {
        let fits = |a: u64, size: usize| a.is_multiple_of(size as u64 * v as u64);
        let aligned = v > 1
            && n % v == 0
            && fits(addr(src), src.dtype.size())
            && fits(addr(dst), dst.dtype.size())
            && (0..kept.n).all(|d| kept.st[0][d] % v == 0 && kept.st[1][d] % v == 0);
        let w = if aligned { v } else { 1 };
        let chunks = |per: i64| (ceil_div(n, per).max(1) as u64).next_power_of_two();
        if n <= 1024 {
            let (g, ch) = warp_layout(chunks(w) as i64, w);
            Entry::Rows { g, w: w as u8, ch }
        } else if aligned && softmax_mid_fits(v as usize, chunks(SOFTMAX_MID_THREADS as i64 * v)) {
            Entry::MidRows { w: v as u8, ch: chunks(SOFTMAX_MID_THREADS as i64 * v) as u8 }
        } else if aligned && softmax_block_fits(v as usize, chunks(256 * v).max(2)) {
            Entry::Rows { g: 0, w: v as u8, ch: chunks(256 * v).max(2) as u8 }
        } else if aligned
            && softmax_raw_layouts(src.dtype, dst.dtype).contains(&(chunks(SOFTMAX_RAW_THREADS as i64 * v) as u8))
        {
            Entry::RawRows { w: v as u8, ch: chunks(SOFTMAX_RAW_THREADS as i64 * v) as u8 }
        } else if aligned
            && softmax_big_fits(v as usize, softmax_value_bytes(src.dtype, dst.dtype), chunks(1024 * v).max(2))
        {
            Entry::BigRows { w: v as u8, ch: chunks(1024 * v).max(2) as u8 }
        } else {
            Entry::Rows { g: 0, w: w as u8, ch: 0 }
        }
    } else {
        Entry::Rows { g: 0, w: 1, ch: 0 }
    };
    let module = ModuleKey::Softmax { src: src.dtype, dst: dst.dtype, log };
    let splits = softmax_splits(c.info.sms as i64, rows, n);
    let mut p = SmP {
        src: addr(src),
        dst: addr(dst),
        rows,
        n,
        sst: if n == 1 { 1 } else { sst },
        dst_st: if n == 1 { 1 } else { dst_st },
        out_ndim: kept.n as i32,
        early: 0,
        out_shape: kept.shape,
        out_sst: kept.st[0],
        out_dst: kept.st[1],
        partials: 0,
        splits: 1,
    };
    let mut entry = entry;
    if let Entry::Rows { g: 0, ch: 0, w } = entry {
        let lead = split_vec(src, dst, dim, &kept, v);
        if splits > 1 {
            p.splits = splits;
            return split_rows(c, module, lead, &mut p);
        }
        if lead > w {
            // Vectors from each row's first 16-byte boundary (rows of an odd length).
            entry = Entry::LeadRows(lead);
        }
    }
    let f = c.kernel(KernelId { module, entry })?;
    let (grid, threads) = match entry {
        // Two passes over long rows: few enough blocks at once that their rows stay in L2
        // between the passes.
        Entry::Rows { g: 0, ch: 0, .. } | Entry::LeadRows(_) => {
            ((rows as u64).min(c.info.sms as u64 * 2) as u32, THREADS)
        }
        Entry::Rows { g: 0, .. } => (c.grid(f, rows as u64 * 256), THREADS),
        Entry::Rows { g, .. } => (c.grid(f, rows as u64 * g as u64), THREADS),
        Entry::BigRows { .. } => (c.grid(f, rows as u64 * 256), 1024),
        Entry::RawRows { .. } => (c.grid(f, rows as u64 * 256), SOFTMAX_RAW_THREADS),
        Entry::MidRows { .. } => (c.grid(f, rows as u64 * 256), SOFTMAX_MID_THREADS),
        _ => (c.grid(f, rows as u64), THREADS),
    };
    // A grid of the card's `early_waves` waves or more launched early, as the fast elementwise
    // kernel's.
    c.run_waves(f, (grid.max(1), threads), c.card().early_waves, &mut p)
}

/// Queues the two launches of a softmax of few long rows split over blocks (`p.splits` per
/// row, `w` elements per access): the (maximum, sum) of every (row, split) to the stream's
/// partials, then every split's outputs.
fn split_rows(c: &Ctx, module: ModuleKey, w: u8, p: &mut SmP) -> Result<()> {
    let stats = c.kernel(KernelId { module, entry: Entry::SplitStats(w) })?;
    let out = c.kernel(KernelId { module, entry: Entry::SplitOut(w) })?;
    p.partials = c.reduce_scratch()?.0;
    let grid = |f: Func| (p.rows * p.splits).min(c.wave(f, &c.ops.tuning.reduce_waves) as i64).max(1) as u32;
    let (g1, g2) = (grid(stats), grid(out));
    c.run(stats, g1, p)?;
    c.run(out, g2, p)
}

/// Splits per row of a softmax over `rows` rows of `n` elements split over blocks: two blocks
/// per SM in all, each split at least [`FILL_CHUNK`] elements, every (row, split) a partial of
/// the stream's scratch. One (no split) when the rows alone give every SM a block, or are
/// shorter than four such chunks (one launch does better there).
fn softmax_splits(sms: i64, rows: i64, n: i64) -> i64 {
    if rows >= sms || rows == 0 || n < 4 * FILL_CHUNK {
        return 1;
    }
    ceil_div(2 * sms, rows).min(n / FILL_CHUNK).min(PARTIALS as i64 / rows).max(1)
}

/// Elements per access of the split softmax kernels: the module's vector width `v` when the rows
/// are contiguous and every row of the input and of the output starts at the same offset from a
/// 16-byte boundary (in elements: the kernels vectorize from the input row's first boundary on),
/// else 1.
fn split_vec(src: &BufferView, dst: &BufferView, dim: usize, kept: &super::ctx::Dims<2>, v: i64) -> u8 {
    let (ss, ds) = (src.dtype.size() as u64, dst.dtype.size() as u64);
    let same = |a: i64, b: i64| (a - b).rem_euclid(v) == 0;
    let ok = v > 1
        && src.strides[dim] == 1
        && dst.strides[dim] == 1
        && same((addr(src) / ss) as i64, (addr(dst) / ds) as i64)
        && (0..kept.n).all(|d| same(kept.st[0][d], kept.st[1][d]));
    if ok {
        v as u8
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A few vocabulary-length rows split into two blocks per SM (132 SMs), never below
    /// `FILL_CHUNK` elements a split; enough rows, or short ones, are not split.
    #[test]
    fn few_long_softmax_rows_split_to_fill_the_device() {
        assert_eq!(softmax_splits(132, 8, 50257), 24, "50257 / 2048 bounds the 33 wanted");
        assert_eq!(softmax_splits(132, 1, 128256), 62);
        assert_eq!(softmax_splits(132, 64, 151936), 5);
        assert_eq!(softmax_splits(132, 2, 32768), 16);
        assert_eq!(softmax_splits(132, 132, 151936), 1, "a row per SM already");
        assert_eq!(softmax_splits(132, 4, 3000), 1, "too short to split");
        assert_eq!(softmax_splits(132, 4, 8191), 1, "too short to split");
        assert_eq!(softmax_splits(132, 4, 8192), 4);
        assert!((1..64).all(|r| softmax_splits(132, r, 1 << 20) * r <= PARTIALS as i64));
    }

    /// Reductions of few rows: two blocks per SM where chunks of 8,192 would leave SMs idle,
    /// never chunks below 2,048; large reductions keep their 8,192-element chunks and one wave.
    #[test]
    fn few_long_reduction_rows_split_to_fill_the_device() {
        assert_eq!(block_splits(132, 1056, 8, 50257), 24);
        assert_eq!(block_splits(132, 1056, 1, 151936), 151936 / 2048);
        assert_eq!(block_splits(132, 1056, 1, 1 << 28), 1056, "one wave");
        assert_eq!(block_splits(132, 1056, 64, 1 << 20), 16, "1 << 20 / 8192 = 128, within the wave");
        assert_eq!(block_splits(132, 1056, 4, 3000), 1);
    }
}
