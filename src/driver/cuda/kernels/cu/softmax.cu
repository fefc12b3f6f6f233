// The softmax kernels, after softmax_head.cu. Semantics are PyTorch's: a row of -inf, one holding
// NaN and one holding +inf give NaN rows; sums shift by the running maximum only while it is
// finite. Kernels: a warp per row with the row in registers (sm_w{W}_{CH}), a block of 256 or 1,024
// threads per row (sm_b{V}_{CH}, sm_B{V}_{CH}), a block per row of any length in two passes
// (sm_o{W}; sm_l{V} for rows of vectors from a 16-byte boundary inside the row), few long rows split
// over blocks in two launches (sm_p{W}, then sm_q{W}), a thread per row (sm_thread). The entry points are appended by kernels/codegen.rs.
// Each begins with cs_enter_when(p.early): the host may launch a grid of many waves early.

struct SmP {
    const char* src; char* dst; i64 rows, n, sst, dst_st;
    int out_ndim, early;
    i64 out_shape[MAXD]; i64 out_sst[MAXD]; i64 out_dst[MAXD];
    /* The split rows' (maximum, sum) per (row, split), two TC each, and the splits per row. */
    char* partials; i64 splits;
};

__device__ __forceinline__ void sm_offsets(const SmP& p, i64 o, i64& so, i64& dof) {
    row_offsets(o, p.out_ndim, p.out_shape, p.out_sst, p.out_dst, so, dof);
}
__device__ __forceinline__ TC neg_inf() { return (TC)(-d_inf()); }
__device__ __forceinline__ TC shift_of(TC m) { return isfinite(m) ? m : (TC)0; }
__device__ __forceinline__ TC out_of(TC v, TC sh, TC k) { return LOG ? v - sh - k : v * k; }
/* The sum's type (the compute type, as PyTorch's accumulate type). */
typedef TC TA;
/* PyTorch shifts by the maximum even when it is +inf, which makes the whole row NaN. */
__device__ __forceinline__ TA final_sum(TC m, TA s) { return m == (TC)d_inf() ? (TA)d_nan() : s; }
template <int G, typename T> __device__ __forceinline__ T all_max(T v) {
#pragma unroll
    for (int off = G / 2; off > 0; off >>= 1) v = fmax(v, __shfl_xor_sync(FULL, v, off));
    return v;
}
template <int G, typename T> __device__ __forceinline__ T all_sum(T v) {
#pragma unroll
    for (int off = G / 2; off > 0; off >>= 1) v += __shfl_xor_sync(FULL, v, off);
    return v;
}
/* The block's maximum (MAX) or sum of `v`, in every thread. */
template <bool MAX, typename T> __device__ __forceinline__ T block_all(T v, T* sh) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = MAX ? all_max<32>(v) : all_sum<32>(v);
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : (MAX ? (T)neg_inf() : (T)0);
    v = MAX ? all_max<32>(v) : all_sum<32>(v);
    __syncthreads();
    return v;
}
/* The running (maximum, sum of ex(x - shift_of(maximum))) of two parts, combined. */
__device__ __forceinline__ void online_merge(TC& m, TA& s, TC m2, TA s2) {
    const TC mm = fmax(m, m2), sh = shift_of(mm);
    const TA a = s == (TA)0 ? (TA)0 : s * (TA)ex(shift_of(m) - sh);
    const TA b = s2 == (TA)0 ? (TA)0 : s2 * (TA)ex(shift_of(m2) - sh);
    m = mm;
    s = a + b;
}
template <int W> __device__ __forceinline__ void load_c(const TS* x, i64 i, TC* v) {
    if (W > 1) {
        const Pack<TS, W> k = ldv<TS, W>(x + i);
#pragma unroll
        for (int j = 0; j < W; ++j) v[j] = to_c(k.v[j]);
    } else {
        v[0] = to_c(x[i]);
    }
}
template <int W> __device__ __forceinline__ void store_c(TD* y, i64 i, const TC* v, TC sh, TC k) {
    if (W > 1) {
        Pack<TD, W> o;
#pragma unroll
        for (int j = 0; j < W; ++j) o.v[j] = from_c(out_of(v[j], sh, k));
        stv<TD, W>(y + i, o);
    } else {
        y[i] = from_c(out_of(v[0], sh, k));
    }
}

/* A row of contiguous elements held in registers by `THR` threads (`THR` ≤ 32 lanes of a warp,
   or the block): thread `t` holds chunks `c·THR + t` of `W` elements. A thread of a row past the
   last (`live` false) takes part in the shuffles only. */
template <int W, int CH, int THR>
__device__ __forceinline__ void sm_regs(const SmP& p, i64 row, int t, bool live, TA* shm) {
    i64 so = 0, dof = 0;
    if (live) sm_offsets(p, row, so, dof);
    const TS* x = (const TS*)p.src + so;
    TD* y = (TD*)p.dst + dof;
    const i64 n = live ? p.n : 0;
    TC v[CH][W];
#pragma unroll
    for (int c = 0; c < CH; ++c) {
        const i64 i = ((i64)c * THR + t) * W;
        if (i < n) {
            load_c<W>(x, i, v[c]);
        } else {
#pragma unroll
            for (int j = 0; j < W; ++j) v[c][j] = neg_inf();
        }
    }
    TC m = neg_inf();
#pragma unroll
    for (int c = 0; c < CH; ++c)
#pragma unroll
        for (int j = 0; j < W; ++j) m = fmax(m, v[c][j]);
    m = THR <= 32 ? all_max<THR>(m) : (TC)block_all<true>((TA)m, shm);
    const TC sh = shift_of(m);
    TA s = 0;
#pragma unroll
    for (int c = 0; c < CH; ++c)
#pragma unroll
        for (int j = 0; j < W; ++j) {
            const TC e = ex(v[c][j] - sh);
            s += (TA)e;
            if (!LOG) v[c][j] = e;
        }
    s = final_sum(m, THR <= 32 ? all_sum<THR>(s) : block_all<false>(s, shm));
    const TC k = LOG ? (TC)log(s) : (TC)((TA)1 / s);
#pragma unroll
    for (int c = 0; c < CH; ++c) {
        const i64 i = ((i64)c * THR + t) * W;
        if (i < n) store_c<W>(y, i, v[c], LOG ? sh : (TC)0, k);
    }
}

/* sm_regs keeping the row's raw elements (`W` > 1: half the registers of a half type's values),
   converted again at each of the three passes over them. */
template <int W, int CH, int THR>
__device__ __forceinline__ void sm_regs_raw(const SmP& p, i64 row, int t, TA* shm) {
    i64 so = 0, dof = 0;
    sm_offsets(p, row, so, dof);
    const TS* x = (const TS*)p.src + so;
    TD* y = (TD*)p.dst + dof;
    const i64 n = p.n;
    Pack<TS, W> r[CH];
#pragma unroll
    for (int c = 0; c < CH; ++c) {
        const i64 i = ((i64)c * THR + t) * W;
        if (i < n) r[c] = ldv<TS, W>(x + i);
    }
    TC m = neg_inf();
#pragma unroll
    for (int c = 0; c < CH; ++c)
        if (((i64)c * THR + t) * W < n)
#pragma unroll
            for (int j = 0; j < W; ++j) m = fmax(m, to_c(r[c].v[j]));
    m = THR <= 32 ? all_max<THR>(m) : (TC)block_all<true>((TA)m, shm);
    const TC sh = shift_of(m);
    TA s = 0;
#pragma unroll
    for (int c = 0; c < CH; ++c)
        if (((i64)c * THR + t) * W < n)
#pragma unroll
            for (int j = 0; j < W; ++j) s += (TA)ex(to_c(r[c].v[j]) - sh);
    s = final_sum(m, THR <= 32 ? all_sum<THR>(s) : block_all<false>(s, shm));
    const TC k = LOG ? (TC)log(s) : (TC)((TA)1 / s);
#pragma unroll
    for (int c = 0; c < CH; ++c) {
        const i64 i = ((i64)c * THR + t) * W;
        if (i < n) {
            Pack<TD, W> o;
#pragma unroll
            for (int j = 0; j < W; ++j) {
                const TC v = to_c(r[c].v[j]);
                o.v[j] = from_c(out_of(LOG ? v : ex(v - sh), LOG ? sh : (TC)0, k));
            }
            stv<TD, W>(y + i, o);
        }
    }
}
template <int CH, int THR>
__device__ __forceinline__ void sm_raw_rows(const SmP& p) {
    __shared__ TA shm[32];
    for (i64 row = blockIdx.x; row < p.rows; row += gridDim.x) sm_regs_raw<V, CH, THR>(p, row, threadIdx.x, shm);
}

/* Groups of G lanes, a row each (32 / G rows per warp at a time). */
template <int W, int CH, int G>
__device__ __forceinline__ void sm_warp_rows(const SmP& p) {
    const i64 per = 32 / G;
    const i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;
    const int lane = threadIdx.x & 31;
    for (i64 r0 = (((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5) * per; r0 < p.rows; r0 += warps * per) {
        const i64 row = r0 + lane / G;
        sm_regs<W, CH, G>(p, row, lane % G, row < p.rows, 0);
    }
}
template <int CH, int THR>
__device__ __forceinline__ void sm_block_rows(const SmP& p) {
    __shared__ TA shm[32];
    for (i64 row = blockIdx.x; row < p.rows; row += gridDim.x) sm_regs<V, CH, THR>(p, row, threadIdx.x, true, shm);
}

/* Folds `W` elements into the running (maximum, sum). */
template <int W> __device__ __forceinline__ void online_add(TC& m, TA& s, const TC* v) {
    TC vm = v[0];
#pragma unroll
    for (int j = 1; j < W; ++j) vm = fmax(vm, v[j]);
    const TC mm = fmax(m, vm), sh = shift_of(mm);
    TA t = s == (TA)0 ? (TA)0 : s * (TA)ex(shift_of(m) - sh);
#pragma unroll
    for (int j = 0; j < W; ++j) t += (TA)ex(v[j] - sh);
    m = mm;
    s = t;
}

/* The block's running (maximum, sum) from every thread's, in every thread (`shm`: 64 values):
   warps by shuffles, then the warps' in shared memory. */
__device__ __forceinline__ void block_online(TC& m, TA& s, TA* shm) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) online_merge(m, s, __shfl_xor_sync(FULL, m, off), __shfl_xor_sync(FULL, s, off));
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) { shm[w] = (TA)m; shm[32 + w] = s; }
    __syncthreads();
    m = lane < nw ? (TC)shm[lane] : neg_inf();
    s = lane < nw ? shm[32 + lane] : (TA)0;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) online_merge(m, s, __shfl_xor_sync(FULL, m, off), __shfl_xor_sync(FULL, s, off));
    __syncthreads();
}

/* A row of any length by the block, in two passes: the online maximum and sum (four accesses in
   flight per thread), then the output. */
template <int W>
__device__ __forceinline__ void sm_online_row(const SmP& p, i64 row, TA* shm) {
    i64 so, dof;
    sm_offsets(p, row, so, dof);
    const TS* x = (const TS*)p.src + so;
    TD* y = (TD*)p.dst + dof;
    const i64 ist = W > 1 ? 1 : p.sst, ost = W > 1 ? 1 : p.dst_st;
    const i64 nv = p.n / W, B = blockDim.x;
    TC m = neg_inf();
    TA s = 0;
    i64 k = threadIdx.x;
    for (; k + 3 * B < nv; k += 4 * B) {
        TC v[4][W];
#pragma unroll
        for (int u = 0; u < 4; ++u) load_c<W>(x, (k + u * B) * W * ist, v[u]);
#pragma unroll
        for (int u = 0; u < 4; ++u) online_add<W>(m, s, v[u]);
    }
    for (; k < nv; k += B) {
        TC v[W];
        load_c<W>(x, k * W * ist, v);
        online_add<W>(m, s, v);
    }
    block_online(m, s, shm);
    s = final_sum(m, s);
    const TC sh = shift_of(m), kk = LOG ? (TC)log(s) : (TC)((TA)1 / s);
    for (i64 q = threadIdx.x; q < nv; q += B) {
        TC v[W];
        load_c<W>(x, q * W * ist, v);
        if (!LOG) {
#pragma unroll
            for (int j = 0; j < W; ++j) v[j] = ex(v[j] - sh);
        }
        store_c<W>(y, q * W * ost, v, LOG ? sh : (TC)0, kk);
    }
}
template <int W>
__device__ __forceinline__ void sm_online_rows(const SmP& p) {
    __shared__ TA shm[64];
    for (i64 row = blockIdx.x; row < p.rows; row += gridDim.x) sm_online_row<W>(p, row, shm);
}

/* Few long rows split over blocks, in two launches. A task is a (row, split) pair; split `sp` of
   a row takes vectors [v0, v1) of its `W`-element vectors, which start at element `lead` (the
   first 16-byte boundary of the row; the host checked that the output's rows share it), and the
   first split also the `lead` elements before them and the tail past the last whole vector. */
struct SmSplit {
    const TS* x; TD* y; i64 ist, ost, lead, v0, v1, tail; bool edges;
};
template <int W>
__device__ __forceinline__ SmSplit sm_split_of(const SmP& p, i64 row, i64 sp) {
    SmSplit q;
    i64 so, dof;
    sm_offsets(p, row, so, dof);
    q.x = (const TS*)p.src + so;
    q.y = (TD*)p.dst + dof;
    q.ist = W > 1 ? 1 : p.sst;
    q.ost = W > 1 ? 1 : p.dst_st;
    const i64 mis = W > 1 ? (i64)(((u64)q.x / sizeof(TS)) % W) : 0;
    q.lead = mis == 0 ? 0 : (W - mis < p.n ? W - mis : p.n);
    const i64 nv = (p.n - q.lead) / W;
    const i64 cv = (nv + p.splits - 1) / p.splits;
    q.v0 = sp * cv < nv ? sp * cv : nv;
    q.v1 = q.v0 + cv < nv ? q.v0 + cv : nv;
    q.tail = q.lead + nv * W;
    q.edges = sp == 0;
    return q;
}

/* The online (maximum, sum) of a task's elements, this thread's part (four accesses in flight). */
template <int W>
__device__ __forceinline__ void sm_split_acc(const SmP& p, const SmSplit& q, TC& m, TA& s) {
    const i64 B = blockDim.x;
    const TS* xv = q.x + q.lead;
    m = neg_inf();
    s = 0;
    i64 k = q.v0 + threadIdx.x;
    for (; k + 3 * B < q.v1; k += 4 * B) {
        TC v[4][W];
#pragma unroll
        for (int u = 0; u < 4; ++u) load_c<W>(xv, (k + u * B) * W * q.ist, v[u]);
#pragma unroll
        for (int u = 0; u < 4; ++u) online_add<W>(m, s, v[u]);
    }
    for (; k < q.v1; k += B) {
        TC v[W];
        load_c<W>(xv, k * W * q.ist, v);
        online_add<W>(m, s, v);
    }
    if (q.edges) {
        for (i64 i = threadIdx.x; i < q.lead; i += B) {
            const TC v = to_c(q.x[i]);
            online_add<1>(m, s, &v);
        }
        for (i64 i = q.tail + threadIdx.x; i < p.n; i += B) {
            const TC v = to_c(q.x[i]);
            online_add<1>(m, s, &v);
        }
    }
}

/* A task's outputs, this thread's part, given the row's shift `sh` and factor (log: term) `kk`. */
template <int W>
__device__ __forceinline__ void sm_split_write(const SmP& p, const SmSplit& q, TC sh, TC kk) {
    const i64 B = blockDim.x;
    const TS* xv = q.x + q.lead;
    TD* yv = q.y + q.lead;
    i64 k = q.v0 + threadIdx.x;
    for (; k + B < q.v1; k += 2 * B) {
        TC v[2][W];
#pragma unroll
        for (int u = 0; u < 2; ++u) load_c<W>(xv, (k + u * B) * W * q.ist, v[u]);
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            if (!LOG) {
#pragma unroll
                for (int j = 0; j < W; ++j) v[u][j] = ex(v[u][j] - sh);
            }
            store_c<W>(yv, (k + u * B) * W * q.ost, v[u], LOG ? sh : (TC)0, kk);
        }
    }
    for (; k < q.v1; k += B) {
        TC v[W];
        load_c<W>(xv, k * W * q.ist, v);
        if (!LOG) {
#pragma unroll
            for (int j = 0; j < W; ++j) v[j] = ex(v[j] - sh);
        }
        store_c<W>(yv, k * W * q.ost, v, LOG ? sh : (TC)0, kk);
    }
    if (q.edges) {
        for (i64 i = threadIdx.x; i < q.lead + (p.n - q.tail); i += B) {
            const i64 e = i < q.lead ? i : q.tail + (i - q.lead);
            TC v = to_c(q.x[e]);
            if (!LOG) v = ex(v - sh);
            store_c<1>(q.y, e, &v, LOG ? sh : (TC)0, kk);
        }
    }
}

/* Pass one: each task's online (maximum, sum) to the partials. */
template <int W>
__device__ __forceinline__ void sm_split_stats(const SmP& p) {
    __shared__ TA shm[64];
    const i64 tasks = p.rows * p.splits;
    for (i64 t = blockIdx.x; t < tasks; t += gridDim.x) {
        const i64 row = t / p.splits;
        const SmSplit q = sm_split_of<W>(p, row, t - row * p.splits);
        TC m;
        TA s;
        sm_split_acc<W>(p, q, m, s);
        block_online(m, s, shm);
        if (threadIdx.x == 0) {
            TC* part = (TC*)p.partials + 2 * t;
            part[0] = m;
            part[1] = (TC)s;
        }
    }
}

/* Pass two: every warp merges its row's partials in one fixed order (lane l folds splits l,
   l + 32, ..., then a butterfly of symmetric merges), so every block of the row holds the same
   (maximum, sum); then the task's outputs. */
template <int W>
__device__ __forceinline__ void sm_split_out(const SmP& p) {
    const i64 tasks = p.rows * p.splits;
    const int lane = threadIdx.x & 31;
    for (i64 t = blockIdx.x; t < tasks; t += gridDim.x) {
        const i64 row = t / p.splits;
        const TC* part = (const TC*)p.partials + 2 * row * p.splits;
        TC m = neg_inf();
        TA s = 0;
        for (i64 k = lane; k < p.splits; k += 32) online_merge(m, s, part[2 * k], (TA)part[2 * k + 1]);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) online_merge(m, s, __shfl_xor_sync(FULL, m, off), __shfl_xor_sync(FULL, s, off));
        s = final_sum(m, s);
        const TC kk = LOG ? (TC)log(s) : (TC)((TA)1 / s);
        sm_split_write<W>(p, sm_split_of<W>(p, row, t - row * p.splits), shift_of(m), kk);
    }
}

/* Rows of any length by a block each in two passes (`p.splits` is 1: a task is a whole row),
   with `W`-element accesses from each row's first 16-byte boundary on: rows whose length is no
   multiple of `W` (a vocabulary of 50257) still read and write by vectors. */
template <int W>
__device__ __forceinline__ void sm_lead_rows(const SmP& p) {
    __shared__ TA shm[64];
    for (i64 row = blockIdx.x; row < p.rows; row += gridDim.x) {
        const SmSplit q = sm_split_of<W>(p, row, 0);
        TC m;
        TA s;
        sm_split_acc<W>(p, q, m, s);
        block_online(m, s, shm);
        s = final_sum(m, s);
        const TC kk = LOG ? (TC)log(s) : (TC)((TA)1 / s);
        sm_split_write<W>(p, q, shift_of(m), kk);
    }
}

/* A thread per row (rows next to each other in memory, the softmax dim strided): two passes. */
extern "C" __global__ void __launch_bounds__(256) sm_thread(const __grid_constant__ SmP p) {
    cs_enter_when(p.early);
    const i64 step = (i64)gridDim.x * blockDim.x;
    for (i64 row = (i64)blockIdx.x * blockDim.x + threadIdx.x; row < p.rows; row += step) {
        i64 so, dof;
        sm_offsets(p, row, so, dof);
        const TS* x = (const TS*)p.src + so;
        TD* y = (TD*)p.dst + dof;
        TC m = neg_inf();
        TA s = 0;
        for (i64 r = 0; r < p.n; ++r) {
            const TC v = to_c(x[r * p.sst]);
            online_add<1>(m, s, &v);
        }
        s = final_sum(m, s);
        const TC sh = shift_of(m), k = LOG ? (TC)log(s) : (TC)((TA)1 / s);
        for (i64 r = 0; r < p.n; ++r) {
            const TC v = to_c(x[r * p.sst]);
            y[r * p.dst_st] = from_c(out_of(LOG ? v : ex(v - sh), LOG ? sh : (TC)0, k));
        }
    }
}
