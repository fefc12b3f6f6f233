//! Products of a row vector and a matrix, `y [1, N] = x [1, K] · w [K, N]` (a decode step's
//! `x @ w` or nn.Linear's `x @ w.t()`), on the CUDA driver: kernels of their own instead of
//! cuBLASLt, whose kernels for one row read a half-type weight at 1.4–2.3 TB/s on the H200
//! (`matmul_bf16_vec` in BENCHMARKS.md; these read it at 2.7–3.6).
//!
//! A row-major weight of a half type (`gv_rows`; f32 ones stay with cuBLASLt, which was faster)
//! streams once, in 16-byte loads along its rows. A block of 256 threads takes a tile
//! of `32 · V` adjacent columns (each lane `V` of them) over one split of the rows; its eight warps
//! fold rows `r, r + 8, …` of the split in increasing order, four loads in flight, accumulating in
//! `float` with one FMA per element (as cuBLAS accumulates half types); the warps' sums are
//! combined in shared memory in warp order. With several splits, each block writes its tile's
//! partial sums to the stream's reduction scratch and the last block of the tile to finish (an
//! atomic counter, reset after use) adds them in split order and rounds once: deterministic, one
//! launch. A column-major weight (`gv_dots`, f32 too) is a dot product per output, a warp each.
//! Views neither reads (another dtype, batch dims, an unaligned weight, a row-major one whose
//! width is not a multiple of `V`) go to cuBLASLt.

use super::codegen::{Entry, KernelId, ModuleKey, PARTIAL_BYTES};
use super::ctx::{addr, Ctx, PARTIALS};
use crate::dtype::DType;
use crate::error::Result;
use crate::kernel::BufferView;

/// The kernel, after the generated `TS`, `V`, `to_f` and `from_f` (`codegen::gemv`).
pub(super) const GEMV: &str = r#"
struct GvP { u64 x; u64 w; u64 y; u64 partials; u64 counters; i64 k; i64 n; i64 sx; i64 ldw; i64 sy; i64 splits; i64 chunk; i64 xvec; };
#define GV_LANES 8
#define GV_FLIGHT 4
extern "C" __global__ void __launch_bounds__(256) gv_rows(const __grid_constant__ GvP p) {
    cs_enter();
    __shared__ float sh[GV_LANES][32 * V];
    __shared__ int last;
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const i64 width = 32 * V, tiles = (p.n + width - 1) / width;
    const i64 tile = blockIdx.x % tiles, s = blockIdx.x / tiles;
    const i64 col = tile * width + lane * V;
    const TS* x = (const TS*)p.x;
    const TS* w = (const TS*)p.w + col;
    const i64 r0 = s * p.chunk, r1 = min(p.k, r0 + p.chunk);
    float a[V];
#pragma unroll
    for (int j = 0; j < V; ++j) a[j] = 0.0f;
    if (col < p.n) {
        i64 r = r0 + wid;
        for (; r + (GV_FLIGHT - 1) * GV_LANES < r1; r += GV_FLIGHT * GV_LANES) {
            Pack<TS, V> v[GV_FLIGHT];
            float xv[GV_FLIGHT];
#pragma unroll
            for (int u = 0; u < GV_FLIGHT; ++u) {
                v[u] = ldv<TS, V>(w + (r + u * GV_LANES) * p.ldw);
                xv[u] = to_f(x[(r + u * GV_LANES) * p.sx]);
            }
#pragma unroll
            for (int u = 0; u < GV_FLIGHT; ++u) {
#pragma unroll
                for (int j = 0; j < V; ++j) a[j] = fmaf(xv[u], to_f(v[u].v[j]), a[j]);
            }
        }
        for (; r < r1; r += GV_LANES) {
            const Pack<TS, V> v = ldv<TS, V>(w + r * p.ldw);
            const float xr = to_f(x[r * p.sx]);
#pragma unroll
            for (int j = 0; j < V; ++j) a[j] = fmaf(xr, to_f(v.v[j]), a[j]);
        }
    }
#pragma unroll
    for (int j = 0; j < V; ++j) sh[wid][lane * V + j] = a[j];
    __syncthreads();
    float* partials = (float*)p.partials;
    for (int q = threadIdx.x; q < width; q += blockDim.x) {
        const i64 c = tile * width + q;
        float b = sh[0][q];
#pragma unroll
        for (int l = 1; l < GV_LANES; ++l) b += sh[l][q];
        if (c >= p.n) continue;
        if (p.splits == 1) ((TS*)p.y)[c * p.sy] = from_f(b);
        else partials[s * p.n + c] = b;
    }
    if (p.splits == 1) return;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd((u32*)p.counters + tile, 1u) == (u32)(p.splits - 1);
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int q = threadIdx.x; q < width; q += blockDim.x) {
        const i64 c = tile * width + q;
        if (c >= p.n) continue;
        float b = __ldcg(partials + c);
        for (i64 t = 1; t < p.splits; ++t) b += __ldcg(partials + t * p.n + c);
        ((TS*)p.y)[c * p.sy] = from_f(b);
    }
    if (threadIdx.x == 0) ((u32*)p.counters)[tile] = 0;
}
/* The weight column-major (`x @ w.t()` of a row-major `w`, nn.Linear's product): output `o` is
   the dot product of `x` and the `o`-th contiguous row of `w.t()`, by a warp in 16-byte loads of
   both (one element of `x` a time when it is strided or unaligned), folded in lane order. */
extern "C" __global__ void __launch_bounds__(256) gv_dots(const __grid_constant__ GvP p) {
    cs_enter();
    const int lane = threadIdx.x & 31;
    const i64 warps = ((i64)gridDim.x * blockDim.x) >> 5, nv = p.k / V;
    const TS* x = (const TS*)p.x;
    for (i64 o = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; o < p.n; o += warps) {
        const TS* w = (const TS*)p.w + o * p.ldw;
        float a = 0.0f;
#pragma unroll 4
        for (i64 q = lane; q < nv; q += 32) {
            const Pack<TS, V> wv = ldv<TS, V>(w + q * V);
            Pack<TS, V> xv;
            if (p.xvec) {
                xv = ldv<TS, V>(x + q * V);
            } else {
#pragma unroll
                for (int j = 0; j < V; ++j) xv.v[j] = x[(q * V + j) * p.sx];
            }
#pragma unroll
            for (int j = 0; j < V; ++j) a = fmaf(to_f(xv.v[j]), to_f(wv.v[j]), a);
        }
        for (i64 e = nv * V + lane; e < p.k; e += 32) a = fmaf(to_f(x[e * p.sx]), to_f(w[e]), a);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) a += __shfl_xor_sync(0xffffffffu, a, off);
        if (lane == 0) ((TS*)p.y)[o * p.sy] = from_f(a);
    }
}
"#;

/// Parameters of `gv_rows` (`GvP` in [`GEMV`]).
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
}

/// Elements per 16-byte load of `dtype`'s weight.
pub(super) fn gemv_vec(dtype: DType) -> usize {
    16 / dtype.size()
}

/// Blocks the kernel aims for per SM (eight warps each: half the SM's warp slots at four).
const BLOCKS_PER_SM: i64 = 4;
/// The fewest rows a split holds (eight per warp).
const MIN_CHUNK: i64 = 64;

/// Queues `dst = lhs · rhs` with a vector kernel and returns `true` when the views suit one
/// (`lhs` one row, `rhs` row-major or column-major with 16-byte aligned rows, f32 / bf16 / f16,
/// batch dims of one); returns `false`, queuing nothing, otherwise.
pub(super) fn try_gemv(c: &Ctx, lhs: &BufferView, rhs: &BufferView, dst: &BufferView) -> Result<bool> {
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
    };
    // f32 row-major weights stay with cuBLASLt: measured on the H200, `gv_rows` read a 64 MiB
    // f32 weight in 21.4-21.7 µs, cuBLASLt in 19.5-19.9 (half types: 9.4-9.6 against 22.4-23.6).
    if scol == 1 && dtype != DType::F32 && srow >= n && n.is_multiple_of(v) && aligned(srow) {
        p.ldw = srow as i64;
        return rows(c, dtype, p).map(|()| true);
    }
    if srow == 1 && scol >= k && aligned(scol) {
        p.ldw = scol as i64;
        p.xvec = (p.sx == 1 && p.x.is_multiple_of(16)) as i64;
        let f = c.kernel(KernelId { module: ModuleKey::Gemv { dtype }, entry: Entry::GemvDots })?;
        let grid = c.grid(f, n as u64 * 32);
        return c.run(f, grid, &mut p).map(|()| true);
    }
    Ok(false)
}

/// `gv_rows` over `p` (a row-major weight): rows split over enough blocks to fill the GPU.
fn rows(c: &Ctx, dtype: DType, mut p: GvP) -> Result<()> {
    let tiles = (p.n as usize).div_ceil(32 * gemv_vec(dtype)) as i64;
    let target = (c.info.sms as i64 * BLOCKS_PER_SM / tiles).max(1);
    // Partials and a counter per tile must fit the scratch.
    let capacity = if tiles > PARTIALS as i64 { 1 } else { (PARTIALS * PARTIAL_BYTES / 4) as i64 / p.n };
    let splits = target.min(p.k / MIN_CHUNK).min(capacity).max(1);
    p.chunk = (p.k + splits - 1) / splits;
    p.splits = ((p.k + p.chunk - 1) / p.chunk).max(1);
    if p.splits > 1 {
        (p.partials, p.counters) = c.reduce_scratch()?;
    }
    let f = c.kernel(KernelId { module: ModuleKey::Gemv { dtype }, entry: Entry::Gemv })?;
    c.run(f, (tiles * p.splits) as u32, &mut p)
}
