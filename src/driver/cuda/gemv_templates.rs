//! The vector-matrix kernels' CUDA C (`gemv.rs` launches them): a leaf, as `reduce_templates.rs`,
//! so that `codegen.rs` can build the module without depending on the launch code.

use crate::dtype::DType;

/// The kernels `gv_rows` and `gv_dots`, after the generated `TS`, `V`, `to_f` and `from_f` (`codegen::gemv`).
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

/// Elements per 16-byte load of `dtype`'s weight.
pub(super) fn gemv_vec(dtype: DType) -> usize {
    16 / dtype.size()
}
