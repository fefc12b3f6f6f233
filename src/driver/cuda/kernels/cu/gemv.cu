// The kernels gv_rows, gv_rows8 and gv_dots, after gemv_head.cu's TS, V, to_f and from_f.

struct GvP { u64 x; u64 w; u64 y; u64 partials; u64 counters; i64 k; i64 n; i64 sx; i64 ldw; i64 sy; i64 splits; i64 chunk; i64 xvec; i64 early; };
/* `gv_rows`: a block's GV_CX column lanes of V columns each by GV_LANES row lanes (a warp
   spans two rows of a tile of 16 V columns). */
#define GV_CX 16
#define GV_LANES (256 / GV_CX)
#define GV_FLIGHT 4
/* Rows r, r + GV_LANES, ... of a group of F: a lane's weight vectors and x's elements. */
template <int F>
__device__ __forceinline__ void gv_load(const GvP& p, const TS* w, const TS* x, i64 r, Pack<TS, V> (&v)[F], float (&xv)[F]) {
#pragma unroll
    for (int u = 0; u < F; ++u) {
        v[u] = ldv<TS, V>(w + (r + u * GV_LANES) * p.ldw);
        xv[u] = to_f(x[(r + u * GV_LANES) * p.sx]);
    }
}
/* A group's products added to the lane's sums, rows in increasing order. */
template <int F>
__device__ __forceinline__ void gv_fold(float (&a)[V], const Pack<TS, V> (&v)[F], const float (&xv)[F]) {
#pragma unroll
    for (int u = 0; u < F; ++u) {
#pragma unroll
        for (int j = 0; j < V; ++j) a[j] = fmaf(xv[u], to_f(v[u].v[j]), a[j]);
    }
}
/* `gv_rows` (F = GV_FLIGHT) and `gv_rows8` (F = 2 GV_FLIGHT): the same sums in the same order,
   a lane's rows in groups of F. ptxas schedules each group's loads among its FMAs as registers
   allow: NVRTC 12.9's SASS for sm_90 has `gv_rows` (40-42 registers) with two 16-byte loads of
   the weight in flight a thread before its first FMA, `gv_rows8` (64, four blocks an SM) four
   for f32 and six for bf16. */
template <int F>
__device__ __forceinline__ void gv_rows_body(const GvP& p) {
    __shared__ float sh[GV_LANES][GV_CX * V];
    __shared__ int last;
    const int lane = threadIdx.x % GV_CX, wid = threadIdx.x / GV_CX;
    const i64 width = GV_CX * V, tiles = (p.n + width - 1) / width;
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
        for (; r + (F - 1) * GV_LANES < r1; r += F * GV_LANES) {
            Pack<TS, V> v[F];
            float xv[F];
            gv_load<F>(p, w, x, r, v, xv);
            gv_fold<F>(a, v, xv);
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
extern "C" __global__ void __launch_bounds__(256) gv_rows(const __grid_constant__ GvP p) {
    cs_enter_when(p.early);
    gv_rows_body<GV_FLIGHT>(p);
}
extern "C" __global__ void __launch_bounds__(256, 4) gv_rows8(const __grid_constant__ GvP p) {
    cs_enter_when(p.early);
    gv_rows_body<2 * GV_FLIGHT>(p);
}
/* The weight column-major (`x @ w.t()` of a row-major `w`, nn.Linear's product): output `o` is
   the dot product of `x` and the `o`-th contiguous row of `w.t()`, by `splits` warps of a block
   (1, 2, 4 or 8: enough warps to fill the GPU), in 16-byte loads of both (one element of `x` at
   a time when it is strided or unaligned): warp s of an output folds vectors s * 32 + lane,
   + 32 * splits, ... (so the output's warps stream through the row together), its lanes are
   combined in lane order and the warps' sums in warp order, in shared memory. Compiled for four
   blocks per SM (54–64 registers; the compiler's own choice was 96–128 for f32 and bf16: two
   blocks). Measured on the H200 ([1, 4096] @ w.t() of a [4096, 4096] w, 4,096 outputs: a warp
   each at four blocks per SM): `matmul_bf16_linear` 12.40 µs with the compiler's registers,
   9.05–9.12 with four blocks; `matmul_f16_linear` 10.43 and 8.08–9.01; `matmul_f32_linear` 21.68
   and 21.67–21.79; with six blocks (40 registers, spills) 10.12, 8.38 and 24.56. */
extern "C" __global__ void __launch_bounds__(256, 4) gv_dots(const __grid_constant__ GvP p) {
    cs_enter();
    __shared__ float sh[8];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int splits = (int)p.splits, s = warp % splits, outs = 8 / splits;
    const i64 nv = p.k / V, stride = 32 * (i64)splits;
    const TS* x = (const TS*)p.x;
    for (i64 ob = (i64)blockIdx.x * outs; ob < p.n; ob += (i64)gridDim.x * outs) {
        const i64 o = ob + warp / splits;
        float a = 0.0f;
        if (o < p.n) {
            const TS* w = (const TS*)p.w + o * p.ldw;
#pragma unroll 4
            for (i64 q = s * 32 + lane; q < nv; q += stride) {
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
            for (i64 e = nv * V + s * 32 + lane; e < p.k; e += stride) a = fmaf(to_f(x[e * p.sx]), to_f(w[e]), a);
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) a += __shfl_xor_sync(0xffffffffu, a, off);
        }
        if (splits == 1) {
            if (lane == 0 && o < p.n) ((TS*)p.y)[o * p.sy] = from_f(a);
            continue;
        }
        __syncthreads();
        if (lane == 0) sh[warp] = a;
        __syncthreads();
        if (lane == 0 && s == 0 && o < p.n) {
            float b = sh[warp];
            for (int t = 1; t < splits; ++t) b += sh[warp + t];
            ((TS*)p.y)[o * p.sy] = from_f(b);
        }
    }
}
