//! Elementwise kernels on the CUDA driver (fill, cast, copy, unary, binary, where).
//!
//! Elementwise ops collapse the dimensions their operands agree on (innermost first, size-1 dims
//! dropped). When the output is then one dense run and every input is either the same dense run
//! or a single broadcast element, the *fast* kernel runs: a grid-stride loop over 16-byte
//! vectors when every dense operand is aligned, one element at a time otherwise (at most one
//! block of elements: the *tiny* kernel, a thread each and no loop). When they
//! collapse to at most two dims with a dense output (a broadcast row or column, a strided or
//! transposed input), the *two-dimensional* kernel runs: the row and column of each element come
//! from one multiply-shift division, inputs dense along the row are loaded as vectors, inputs
//! constant along it once per vector; a transposed input sends the op to the *tiled* kernel
//! instead (square tiles through shared memory), as does a batch of transposes (three dims,
//! `strided::batched_tile`). Any other layout runs the *strided* kernel, which takes the
//! collapsed shape and strides (up to [`MAXD`] dims) by value, a vector or an element per thread
//! as `strided::strided_lane` chooses. Parameters are `#[repr(C)]` structs on the stack.

use super::ctx::{addr, collapse, unsupported, Ctx, Dims, WaitsWhenTold};
use super::elementwise_policy::{ew_vec, fast_choice, raw_dtype, tile_edge};
use super::strided::{batched_tile, magic_divider, strided_dims, strided_lane, Operands, StridedDims, StridedLane};
use super::vocab::{fast_masks, Entry, EwOp, JitKey, KernelId, ModuleKey, MAXD, THREADS};
use crate::dtype::DType;
use crate::error::Result;
use crate::kernel::{BufferView, DenseBinary, DenseJit};
use std::sync::atomic::Ordering;

/// Parameters of the fast elementwise kernels (`EwFast` in the generated C).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct EwFast {
    out: u64,
    ins: [u64; 3],
    n: u64,
    value: u64,
    vec: i32,
    /// Launched early whatever its grid (`WaitsWhenTold`): the fast kernels wait first then.
    early: i32,
}

impl WaitsWhenTold for EwFast {
    fn tell_to_wait(&mut self) {
        self.early = 1;
    }
}

/// Parameters of the strided elementwise kernel (`EwStrided`): its dims laid out for its lane
/// (`strided.rs`).
#[repr(C)]
struct EwStrided {
    b: EwFast,
    s: StridedDims,
}

/// Parameters of the two-dimensional elementwise kernel (`EwTwo`): a dense output of rows of
/// `inner` elements, each input's inner and outer strides and class (0: dense along the inner
/// dim, 1: constant along it, 2: strided, 3: transposed — dense along the outer dim, staged
/// through shared memory by the tiled kernel), and the multiply-shift division by `inner`; the
/// tiled kernel also takes `batch` matrices of `rows` rows (inputs `sb` elements apart).
#[repr(C)]
struct EwTwo {
    b: EwFast,
    inner: u64,
    so: [i64; 3],
    si: [i64; 3],
    cls: [i32; 3],
    magic: u32,
    shift: u32,
    wide: i32,
    pad: i32,
    rows: u64,
    batch: u64,
    sb: [i64; 3],
}

/// Queues a dense binary op (already validated): the fast kernel at once, with no views to
/// classify.
pub(in crate::driver::cuda) fn dense_binary(c: &Ctx, op: &DenseBinary) -> Result<()> {
    // A number goes in `value`, its input's address 0 and its mask bit set (one broadcast element).
    let (rhs, value, mask) = match op.rhs_value {
        Some(v) => (0, scalar_bits(v, op.rhs.1), 2),
        None => (op.rhs.0 .0, 0, 0),
    };
    let p = EwFast { out: op.dst.0 .0, ins: [op.lhs.0 .0, rhs, 0], n: op.n as u64, value, vec: 0, early: 0 };
    let dtypes = [op.lhs.1, op.rhs.1, DType::Bool];
    ew_fast(c, EwOp::Binary(op.op, op.compute), op.dst.1, dtypes, 2, mask, p)
}

/// Queues a dense jiterator call of at most three inputs (already validated, not empty; the
/// function interned as `code`): the fast kernel of its module at once, as [`elementwise`] would
/// choose for the same operands as views (every input dense, none broadcast), the scalars'
/// address in `value`.
pub(in crate::driver::cuda) fn dense_jit(c: &Ctx, code: u32, op: &DenseJit<'_>) -> Result<()> {
    let nin = op.ins.len();
    let (mut ins, mut dtypes) = ([0u64; 3], [DType::Bool; 3]);
    for (k, &(ptr, dtype)) in op.ins.iter().enumerate().take(3) {
        ins[k] = ptr.0;
        dtypes[k] = dtype;
    }
    let p = EwFast { out: op.out.0, ins, n: op.n as u64, value: op.scalars_at.0, vec: 0, early: 0 };
    let key = JitKey { code, nin: nin as u8, out: 0 };
    ew_fast(c, EwOp::Jit(key), op.common, dtypes, nin, 0, p)
}

/// `value` as one element of `dtype`, in the low bytes of a kernel parameter.
pub(in crate::driver::cuda) fn scalar_bits(value: crate::scalar::Scalar, dtype: DType) -> u64 {
    let mut bits = [0u8; 8];
    crate::kernels::cpu::store_scalar(value, dtype, &mut bits);
    u64::from_ne_bytes(bits)
}

/// The common case of an elementwise op, told without collapsing dimensions: with a contiguous
/// output, and inputs that are contiguous too (same shape, validated) or one broadcast element
/// (every stride 0), the fast kernel's mask (bit `k`: input `k` is broadcast); `None` otherwise.
fn contiguous_mask(dst: &BufferView, ins: &[&BufferView]) -> Option<u8> {
    if !dst.is_contiguous() {
        return None;
    }
    let mut mask = 0u8;
    for (k, v) in ins.iter().enumerate() {
        if v.is_contiguous() {
            continue;
        }
        if !v.strides.iter().all(|&s| s == 0) {
            return None;
        }
        mask |= 1 << k;
    }
    Some(mask)
}

/// Whether collapsed dims (output first, then `ins` inputs) are one dense run whose inputs are
/// dense or one broadcast element, and the mask of the broadcast inputs.
fn collapsed_mask<const K: usize>(d: &Dims<K>, ins: usize) -> (bool, u8) {
    let mut mask = 0u8;
    if d.n == 1 {
        for k in 0..ins {
            if d.st[k + 1][0] == 0 {
                mask |= 1 << k;
            }
        }
    }
    let dense = d.n == 0 || (d.n == 1 && d.st[0][0] == 1 && (1..=ins).all(|k| d.st[k][0] <= 1));
    (dense, mask)
}

/// The dtypes an elementwise kernel is built for and the address of each input's first element:
/// `(output dtype, input dtypes, input addresses)` (raw types for fills and copies).
#[inline]
fn ew_operands(op: EwOp, dst: &BufferView, ins: &[&BufferView]) -> (DType, [DType; 3], [u64; 3]) {
    let raw = matches!(op, EwOp::Fill | EwOp::Copy);
    let out_dtype = if raw { raw_dtype(dst.dtype) } else { dst.dtype };
    let mut dtypes = [DType::Bool; 3];
    let mut ptrs = [0u64; 3];
    for (i, v) in ins.iter().enumerate() {
        dtypes[i] = if raw { out_dtype } else { v.dtype };
        ptrs[i] = addr(v);
    }
    (out_dtype, dtypes, ptrs)
}

/// Queues an elementwise kernel writing `dst` from `ins` (at most 3); bit `k` of `imm`: input `k`
/// is a number given in `value` (its view has address 0), one broadcast element to the kernels.
///
/// The common case (a dense output whose inputs are dense or one broadcast element, told
/// without collapsing dimensions) takes a short path; everything else is out of line.
#[inline]
pub(in crate::driver::cuda) fn elementwise(
    c: &Ctx,
    op: EwOp,
    dst: &BufferView,
    ins: &[&BufferView],
    value: u64,
    imm: u8,
) -> Result<()> {
    match contiguous_mask(dst, ins).map(|m| m | imm) {
        Some(mask) if mask < fast_masks(op) => {
            let (out_dtype, dtypes, ptrs) = ew_operands(op, dst, ins);
            let p = EwFast { out: addr(dst), ins: ptrs, n: dst.numel() as u64, value, vec: 0, early: 0 };
            ew_fast(c, op, out_dtype, dtypes, ins.len(), mask, p)
        }
        _ => elementwise_strided(c, op, dst, ins, value, imm),
    }
}

/// Queues the fast kernel of `op` over `p` (its `vec` set here), `mask` of the `nin` inputs
/// being one broadcast element.
fn ew_fast(c: &Ctx, op: EwOp, out_dtype: DType, dtypes: [DType; 3], nin: usize, mask: u8, mut p: EwFast) -> Result<()> {
    if p.n <= THREADS as u64 {
        let module = ModuleKey::Elementwise { op, out: out_dtype, ins: dtypes };
        // A thread per element in one block, no loop: a tiny op's cost is its launch and
        // latency (in a graph, that is all a node costs).
        let f = c.kernel(KernelId { module, entry: Entry::Tiny(mask) })?;
        return c.run_threads(f, 1, tiny_threads(p.n), &mut p);
    }
    // Vectors are 16 bytes: a power of two of elements, so a vector of a dtype is a power of
    // two of bytes (alignment by mask, no division).
    let vec = ew_vec(op, out_dtype, dtypes) as u64;
    let fits = |a: u64, d: DType| a & (d.size() as u64 * vec - 1) == 0;
    let mut aligned = vec > 1 && fits(p.out, out_dtype);
    for (k, (&a, &d)) in p.ins.iter().zip(&dtypes).enumerate().take(nin) {
        if mask & (1 << k) == 0 {
            aligned &= fits(a, d);
        }
    }
    p.vec = aligned as i32;
    let module = ModuleKey::Elementwise { op, out: out_dtype, ins: dtypes };
    let (entry, card_per_thread) = fast_choice(op, out_dtype, vec as usize, mask, || c.card());
    let f = c.kernel(KernelId { module, entry })?;
    let mut work = if aligned { p.n.div_ceil(vec) } else { p.n };
    let per_thread = match c.ops.tuning.ew_vectors.load(Ordering::Relaxed) {
        // The op's own (on this card), but never so many that the grid would not fill the
        // device once.
        0 => card_per_thread.min(work / c.full_wave_threads(f)).max(1),
        n => n as u64,
    };
    if aligned && per_thread > 1 {
        work = work.div_ceil(per_thread);
    }
    if work < THREADS as u64 {
        // One block: a small op's cost is its launch.
        return c.run_threads(f, 1, tiny_threads(work), &mut p);
    }
    // The card's block (`ew_threads`), never past the kernel's launch bound; a grid of the card's
    // `early_waves` launched early.
    let card = c.card();
    let threads = card.ew_threads.clamp(32, THREADS);
    c.run_waves(f, (c.grid_of(f, work, threads), threads), card.early_waves, &mut p)
}

/// Threads of the one block of a launch for `work` (at most [`THREADS`]) items: whole warps,
/// at least four. Measured on the H200 in graphs of 100 nodes of 16 elements, a node of 128
/// threads ran 12-15 ns faster than one of 32, with and without programmatic launch.
fn tiny_threads(work: u64) -> u32 {
    (work.max(1).div_ceil(32) * 32).clamp(128, THREADS as u64) as u32
}

/// [`elementwise`] for every layout the short path does not take: the dimensions collapsed,
/// then the fast kernel when they make one dense run, the two-dimensional or tiled kernel for
/// two dims (or a batch of transposes), the strided kernel otherwise.
#[inline(never)]
fn elementwise_strided(c: &Ctx, op: EwOp, dst: &BufferView, ins: &[&BufferView], value: u64, imm: u8) -> Result<()> {
    let (out_dtype, dtypes, ptrs) = ew_operands(op, dst, ins);
    // Dims in the output's memory order (an elementwise op may take them in any order), so a
    // permuted output (a transposed one, say) streams as one dense run.
    let (shape, views) = memory_order(dst, ins);
    let mut strides: [Option<&[usize]>; 4] = [None; 4];
    for (slot, v) in strides.iter_mut().zip(&views) {
        *slot = Some(v);
    }
    let n = dst.numel() as u64;
    let p = EwFast { out: addr(dst), ins: ptrs, n, value, vec: 0, early: 0 };
    let dims = collapse(&shape, strides, |_| true)
        .ok_or_else(|| unsupported(format!("{} dims that do not collapse below {MAXD}", dst.shape.len())))?;
    let (dense, mask) = collapsed_mask(&dims, ins.len());
    let mask = mask | imm;
    if dense && mask < fast_masks(op) {
        return ew_fast(c, op, out_dtype, dtypes, ins.len(), mask, p);
    }
    let module = ModuleKey::Elementwise { op, out: out_dtype, ins: dtypes };
    let vec = ew_vec(op, out_dtype, dtypes);
    let lanes = c.ops.tuning.strided_lanes.load(Ordering::Relaxed);
    let two = if batched_tile(&dims, ins.len(), lanes) {
        tile_batch(&dims, p, ins.len(), out_dtype, &dtypes)
    } else {
        two_dims(&dims, p, ins.len(), out_dtype, &dtypes, vec)
    };
    if let Some(mut t) = two {
        if t.cls.contains(&3) {
            // Square tiles, a block of 256 threads each.
            let edge = tile_edge(op, out_dtype, dtypes);
            let tiles = t.inner.div_ceil(edge) * t.rows.div_ceil(edge) * t.batch;
            let f = c.kernel(KernelId { module, entry: Entry::Tile })?;
            let grid = c.grid(f, tiles * 256);
            return c.run(f, grid, &mut t);
        }
        let f = c.kernel(KernelId { module, entry: Entry::Two })?;
        let work = if t.b.vec != 0 { n / ew_vec(op, out_dtype, dtypes) as u64 } else { n };
        let grid = c.grid(f, work);
        return c.run(f, grid, &mut t);
    }
    let mut size = [out_dtype.size(), 1, 1, 1];
    for (s, dtype) in size[1..].iter_mut().zip(dtypes) {
        *s = dtype.size();
    }
    let ops = Operands { addr: [p.out, p.ins[0], p.ins[1], p.ins[2]], size, nin: ins.len() };
    let lane = strided_lane(&dims, &ops, vec, lanes);
    strided(c, module, &dims, p, lane)
}

/// Queues the strided kernel over the collapsed dims `d` in `lane` (`strided::strided_lane`).
fn strided(c: &Ctx, module: ModuleKey, d: &Dims<4>, mut b: EwFast, lane: StridedLane) -> Result<()> {
    b.vec = (lane.vec > 1) as i32;
    let work = b.n / lane.vec as u64;
    let mut p = EwStrided { b, s: strided_dims(d, lane) };
    let f = c.kernel(KernelId { module, entry: Entry::Strided })?;
    let grid = c.grid(f, work);
    c.run(f, grid, &mut p)
}

/// The shape and the strides of the output and then of each input, with the dims sorted by the
/// output's strides, largest first (the order unchanged when it already is).
pub(in crate::driver::cuda) fn memory_order(dst: &BufferView, ins: &[&BufferView]) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut order: Vec<usize> = (0..dst.shape.len()).collect();
    order.sort_by_key(|&d| std::cmp::Reverse(dst.strides[d]));
    let pick = |v: &[usize]| order.iter().map(|&d| v[d]).collect::<Vec<usize>>();
    let mut views = vec![pick(&dst.strides)];
    views.extend(ins.iter().map(|v| pick(&v.strides)));
    (pick(&dst.shape), views)
}

/// The parameters of the two-dimensional kernel when the collapsed dims are at most two and the
/// output is dense over them; `None` otherwise.
fn two_dims<const K: usize>(
    d: &Dims<K>,
    b: EwFast,
    nin: usize,
    out: DType,
    dtypes: &[DType; 3],
    vec: usize,
) -> Option<EwTwo> {
    if d.n == 0 || d.n > 2 || d.st[0][0] != 1 || (d.n == 2 && d.st[0][1] != d.shape[0]) {
        return None;
    }
    let inner = d.shape[0] as u64;
    let outer = |k: usize| if d.n == 2 { d.st[k][1] } else { 0 };
    let vec = vec as u64;
    let fits = |a: u64, size: usize| a.is_multiple_of(size as u64 * vec);
    let rows = if d.n == 2 { d.shape[1] as u64 } else { 1 };
    let mut t = EwTwo {
        b,
        inner,
        so: [0; 3],
        si: [0; 3],
        cls: [0; 3],
        magic: 0,
        shift: 0,
        wide: 0,
        pad: 0,
        rows,
        batch: 1,
        sb: [0; 3],
    };
    let mut aligned = vec > 1 && inner.is_multiple_of(vec) && fits(b.out, out.size());
    for (k, dtype) in dtypes.iter().enumerate().take(nin) {
        let (si, so) = (d.st[k + 1][0], outer(k + 1));
        t.si[k] = si;
        t.so[k] = so;
        t.cls[k] = match si {
            1 => 0,
            0 => 1,
            _ if so == 1 => 3,
            _ => 2,
        };
        if si == 1 {
            aligned &= fits(b.ins[k], dtype.size()) && so % vec as i64 == 0;
        }
    }
    t.b.vec = aligned as i32;
    if b.n > u32::MAX as u64 {
        t.wide = 1;
    } else {
        (t.magic, t.shift) = magic_divider(inner);
    }
    Some(t)
}

/// The tiled kernel's parameters for a batch of transposes (`strided::batched_tile`): the
/// two-dimensional parameters of dims 0 and 1, and dim 2 as the batch (the output's matrices
/// one after another, each input's `st[k][2]` apart).
fn tile_batch(d: &Dims<4>, b: EwFast, nin: usize, out: DType, dtypes: &[DType; 3]) -> Option<EwTwo> {
    let matrix = Dims { n: 2, ..*d };
    // The vector flag is the two-dimensional kernel's; the tiled one checks its own alignment.
    let mut t = two_dims(&matrix, b, nin, out, dtypes, 1)?;
    t.batch = d.shape[2] as u64;
    for k in 0..nin {
        t.sb[k] = d.st[k + 1][2];
    }
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::DevicePtr;

    fn view(shape: &[usize], strides: &[usize]) -> BufferView {
        BufferView { ptr: DevicePtr(4096), dtype: DType::F32, shape: shape.into(), strides: strides.into(), offset: 0 }
    }

    /// The classification without collapsing agrees with the collapse wherever it answers, and
    /// declines every layout that is not a dense run.
    #[test]
    fn the_contiguous_shortcut_agrees_with_the_collapse() {
        let shape = [4usize, 1, 6];
        let layouts: [&[usize]; 6] = [&[6, 6, 1], &[6, 99, 1], &[0, 0, 0], &[0, 0, 1], &[1, 6, 4], &[12, 6, 2]];
        for out in layouts {
            for a in layouts {
                for b in layouts {
                    let (dst, x, y) = (view(&shape, out), view(&shape, a), view(&shape, b));
                    let ins = [&x, &y];
                    let st = [Some(&dst.strides[..]), Some(&x.strides[..]), Some(&y.strides[..])];
                    let d = collapse(&shape, st, |_| true).expect("3 dims collapse");
                    let (dense, mask) = collapsed_mask(&d, 2);
                    match contiguous_mask(&dst, &ins) {
                        Some(m) => assert!(dense && m == mask, "{out:?} {a:?} {b:?}: shortcut {m}, collapse {mask}"),
                        None => assert!(
                            !dense || !dst.is_contiguous() || ins.iter().any(|v| !v.is_contiguous()),
                            "{out:?} {a:?} {b:?}: the shortcut declined a plain dense op"
                        ),
                    }
                }
            }
        }
        assert_eq!(contiguous_mask(&view(&[1, 1], &[5, 7]), &[&view(&[1, 1], &[3, 3])]), Some(0), "one element");
    }
}
