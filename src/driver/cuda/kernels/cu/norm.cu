// Layer norm and RMS norm rows (PyTorch's F.layer_norm / F.rms_norm), after fused_head.cu: a block
// per row (grid-stride over rows; its threads and the grid are the card profile's norm_threads and
// norm_blocks, kernels/fused.rs) sums the row in TC, then the centred squares, then writes
// (x - mean) * rstd * w + b; rows of up to blockDim * VPT elements are read once into registers
// (nm_r{VPT}), longer ones three times (nm_rows, the later reads from cache); rows of a multiple of
// 16 bytes from 16-byte aligned pointers are read and written as 16-byte vectors (nm_v{VV}), a
// block's next row read before it reduces this one. The entry points are appended by
// kernels/fused_codegen.rs.

struct NormP {
    const TS* src; const TS* w; const TS* b; TS* dst;
    i64 rows, n;
    double eps;
    int rms, early;
};

/* The block's sum of `v`, in every thread (sh: 32 slots). */
__device__ __forceinline__ TC nm_block_sum(TC v, TC* sh) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(FULL, v, off);
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : (TC)0;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(FULL, v, off);
    __syncthreads();
    return v;
}

__device__ void nm_row_blocks(const NormP& p) {
    __shared__ TC sh[32];
    const TC n = (TC)p.n;
    for (i64 r = blockIdx.x; r < p.rows; r += gridDim.x) {
        const TS* x = p.src + r * p.n;
        TS* y = p.dst + r * p.n;
        TC mean = (TC)0;
        if (!p.rms) {
            TC s = (TC)0;
            for (i64 i = threadIdx.x; i < p.n; i += blockDim.x) s += to_c(x[i]);
            mean = nm_block_sum(s, sh) / n;
        }
        TC q = (TC)0;
        for (i64 i = threadIdx.x; i < p.n; i += blockDim.x) {
            const TC d = to_c(x[i]) - mean;
            q += d * d;
        }
        const TC rstd = (TC)1 / sqrt(nm_block_sum(q, sh) / n + (TC)p.eps);
        for (i64 i = threadIdx.x; i < p.n; i += blockDim.x) {
            TC v = (to_c(x[i]) - mean) * rstd;
            if (p.w) v *= to_c(p.w[i]);
            if (p.b) v += to_c(p.b[i]);
            y[i] = from_c(v);
        }
    }
}

/* Rows of at most blockDim * VPT elements: one read of the row into registers (VPT values a thread,
   coalesced across the block), the statistics and the output from there. */
template <int VPT> __device__ void nm_reg_rows(const NormP& p) {
    __shared__ TC sh[32];
    const TC n = (TC)p.n;
    for (i64 r = blockIdx.x; r < p.rows; r += gridDim.x) {
        const TS* x = p.src + r * p.n;
        TS* y = p.dst + r * p.n;
        TC v[VPT];
        TC s = (TC)0;
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
            const i64 i = threadIdx.x + (i64)k * blockDim.x;
            v[k] = i < p.n ? to_c(x[i]) : (TC)0;
            s += v[k];
        }
        const TC mean = p.rms ? (TC)0 : nm_block_sum(s, sh) / n;
        TC q = (TC)0;
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
            const i64 i = threadIdx.x + (i64)k * blockDim.x;
            const TC d = v[k] - mean;
            if (i < p.n) q += d * d;
        }
        const TC rstd = (TC)1 / sqrt(nm_block_sum(q, sh) / n + (TC)p.eps);
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
            const i64 i = threadIdx.x + (i64)k * blockDim.x;
            if (i < p.n) {
                TC o = (v[k] - mean) * rstd;
                if (p.w) o *= to_c(p.w[i]);
                if (p.b) o += to_c(p.b[i]);
                y[i] = from_c(o);
            }
        }
    }
}

/* Row r's VV vectors of this thread (W elements each, coalesced across the block) into `a`; none
   past the last row or the row's end (those slots stay zero). */
template <int VV, int W>
__device__ __forceinline__ void nm_load_vecs(const NormP& p, i64 r, i64 nv, Pack<TS, W> (&a)[VV]) {
    const TS* x = p.src + r * p.n;
#pragma unroll
    for (int k = 0; k < VV; ++k) {
        const i64 c = threadIdx.x + (i64)k * blockDim.x;
        a[k] = Pack<TS, W>{};
        if (r < p.rows && c < nv) a[k] = ldv<TS, W>(x + c * W);
    }
}

/* Rows of at most blockDim * VV * W elements, W = 16 / sizeof(TS) (one 16-byte vector), whose length
   is a multiple of W and whose pointers (source, destination, weight, bias) are 16-byte aligned:
   the row read as vectors into registers (VV a thread, coalesced across the block, kept as loaded),
   the statistics, then the output written as vectors.
   A block taking several rows reads its next row before it reduces this one, so that row's loads
   are in flight across the reductions' barriers and the writes. */
template <int VV> __device__ void nm_vec_rows(const NormP& p) {
    constexpr int W = 16 / sizeof(TS);
    __shared__ TC sh[32];
    const TC n = (TC)p.n;
    const i64 nv = p.n / W;
    Pack<TS, W> cur[VV];
    nm_load_vecs<VV, W>(p, blockIdx.x, nv, cur);
    for (i64 r = blockIdx.x; r < p.rows; r += gridDim.x) {
        Pack<TS, W> next[VV];
        nm_load_vecs<VV, W>(p, r + gridDim.x, nv, next);
        TS* y = p.dst + r * p.n;
        TC s = (TC)0;
#pragma unroll
        for (int k = 0; k < VV; ++k) {
            const i64 c = threadIdx.x + (i64)k * blockDim.x;
#pragma unroll
            for (int u = 0; u < W; ++u) s += c < nv ? to_c(cur[k].v[u]) : (TC)0;
        }
        const TC mean = p.rms ? (TC)0 : nm_block_sum(s, sh) / n;
        TC q = (TC)0;
#pragma unroll
        for (int k = 0; k < VV; ++k) {
            const i64 c = threadIdx.x + (i64)k * blockDim.x;
#pragma unroll
            for (int u = 0; u < W; ++u) {
                const TC d = to_c(cur[k].v[u]) - mean;
                if (c < nv) q += d * d;
            }
        }
        const TC rstd = (TC)1 / sqrt(nm_block_sum(q, sh) / n + (TC)p.eps);
#pragma unroll
        for (int k = 0; k < VV; ++k) {
            const i64 c = threadIdx.x + (i64)k * blockDim.x;
            if (c < nv) {
                Pack<TS, W> wv, bv, o;
                if (p.w) wv = ldv<TS, W>(p.w + c * W);
                if (p.b) bv = ldv<TS, W>(p.b + c * W);
#pragma unroll
                for (int u = 0; u < W; ++u) {
                    TC z = (to_c(cur[k].v[u]) - mean) * rstd;
                    if (p.w) z *= to_c(wv.v[u]);
                    if (p.b) z += to_c(bv.v[u]);
                    o.v[u] = from_c(z);
                }
                stv<TS, W>(y + c * W, o);
            }
        }
#pragma unroll
        for (int k = 0; k < VV; ++k) cur[k] = next[k];
    }
}
