// The reduction kernels, after the generated TS, TD, VEC, SPLIT_ACC, VALUES, ARG, COLX, `acc` and its
// functions (identity, load, combine, step, shfl_down, st_partial, ld_partial, store, store_value;
// for an arg-reduction also fold and later).

struct RedP {
    const char* src; char* dst; char* dst2; char* partials; u32* counters;
    i64 n_out, n_red, splits, chunk;
    double inv_n;
    int out_ndim, red_ndim, vec, pad;
    i64 out_shape[MAXD]; i64 out_sst[MAXD]; i64 out_dst[MAXD];
    i64 red_shape[MAXD]; i64 red_st[MAXD];
};

/* The result of an output at `dof` (and, for an extreme with its index, its value at the same
   offset of `dst2`). */
__device__ __forceinline__ void store_out(const RedP& p, i64 dof, acc a) {
    store((TD*)p.dst + dof, a, p.n_red, p.inv_n);
#if VALUES
    store_value((TS*)p.dst2 + dof, a);
#endif
}

__device__ __forceinline__ void out_offsets(const RedP& p, i64 o, i64& so, i64& dof) {
    row_offsets(o, p.out_ndim, p.out_shape, p.out_sst, p.out_dst, so, dof);
}

__device__ __forceinline__ i64 red_offset(const RedP& p, i64 r) {
    i64 off = 0;
#pragma unroll 1
    for (int d = 0; d < p.red_ndim; ++d) {
        const i64 q = r / p.red_shape[d];
        off += (r - q * p.red_shape[d]) * p.red_st[d];
        r = q;
    }
    return off;
}

#if HALF_RUNS
/* `n` values added in `float` as a fixed tree (pairs, then pairs of pairs, ...). */
template <int N>
__device__ __forceinline__ float run_sum(float (&t)[N]) {
#pragma unroll
    for (int w = 1; w < N; w *= 2) {
#pragma unroll
        for (int j = 0; j + w < N; j += 2 * w) t[j] += t[j + w];
    }
    return t[0];
}
/* A vector's elements as one run (`reduce_layouts::half_runs`): added in `float`, then converted. */
__device__ __forceinline__ acc fold(const Pack<TS, VEC>& v, i64 r) {
    (void)r;
    float t[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) t[j] = tof(v.v[j]);
    return (acc)run_sum<VEC>(t);
}
__device__ __forceinline__ acc later(acc a, acc b) { return combine(a, b); }
#elif !ARG
/* The elements r, r + 1, ... of a vector, folded in order (an arg-reduction's module defines
   its own `fold` and `later`). */
__device__ __forceinline__ acc fold(const Pack<TS, VEC>& v, i64 r) {
    acc a = load(v.v[0], r);
#pragma unroll
    for (int j = 1; j < VEC; ++j) a = step(a, v.v[j], r + j);
    return a;
}
/* `a` and `b`, every element of `b` after those of `a`. */
__device__ __forceinline__ acc later(acc a, acc b) { return combine(a, b); }
#endif

/* Combines elements r0 + lane, r0 + lane + width, ... below r1 of the row at `base`; aligned
   vectors four at a time (U = 4), or with U = 8 the next four loaded before the four before them
   are added. Accumulator k folds the vectors lane + (k + 4j) * width in increasing j either way,
   so U changes when loads are issued, not one bit of the result. */
template <int U>
__device__ __forceinline__ acc accumulate(const RedP& p, const TS* base, i64 r0, i64 r1, i64 lane, i64 width) {
    acc a = identity();
    if (p.red_ndim > 1) {
        for (i64 r = r0 + lane; r < r1; r += width) a = combine(a, load(base[red_offset(p, r)], r));
        return a;
    }
    const i64 st = p.red_ndim == 1 ? p.red_st[0] : 0;
    if (VEC > 1 && p.vec) {
        const i64 nv = (r1 - r0) / VEC;
        const TS* b = base + r0;
        acc a1 = identity(), a2 = identity(), a3 = identity();
        i64 i = lane;
        if (U == 8 && i + 3 * width < nv) {
            /* Two batches of four: the next batch's loads issued before this one is added (a
               value carried round the loop, which ptxas cannot sink to its use: left to itself it
               issued each load just before its additions, one 16-byte load in flight a thread). */
            Pack<TS, VEC> v[4], w[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) v[u] = ldv<TS, VEC>(b + (i + u * width) * VEC);
            for (;;) {
                const i64 j = i + 4 * width;
                const bool next = j + 3 * width < nv;
                if (next) {
#pragma unroll
                    for (int u = 0; u < 4; ++u) w[u] = ldv<TS, VEC>(b + (j + u * width) * VEC);
                }
                a = later(a, fold(v[0], r0 + i * VEC));
                a1 = later(a1, fold(v[1], r0 + (i + width) * VEC));
                a2 = later(a2, fold(v[2], r0 + (i + 2 * width) * VEC));
                a3 = later(a3, fold(v[3], r0 + (i + 3 * width) * VEC));
                i = j;
                if (!next) break;
#pragma unroll
                for (int u = 0; u < 4; ++u) v[u] = w[u];
            }
        }
        for (; i + 3 * width < nv; i += 4 * width) {
            const Pack<TS, VEC> v0 = ldv<TS, VEC>(b + i * VEC);
            const Pack<TS, VEC> v1 = ldv<TS, VEC>(b + (i + width) * VEC);
            const Pack<TS, VEC> v2 = ldv<TS, VEC>(b + (i + 2 * width) * VEC);
            const Pack<TS, VEC> v3 = ldv<TS, VEC>(b + (i + 3 * width) * VEC);
            a = later(a, fold(v0, r0 + i * VEC));
            a1 = later(a1, fold(v1, r0 + (i + width) * VEC));
            a2 = later(a2, fold(v2, r0 + (i + 2 * width) * VEC));
            a3 = later(a3, fold(v3, r0 + (i + 3 * width) * VEC));
        }
        for (; i < nv; i += width) a = later(a, fold(ldv<TS, VEC>(b + i * VEC), r0 + i * VEC));
        a = combine(combine(a, a1), combine(a2, a3));
        for (i64 r = r0 + nv * VEC + lane; r < r1; r += width) a = combine(a, load(base[r], r));
        return a;
    }
    i64 r = r0 + lane;
#if SPLIT_ACC
    /* Extremes: four independent accumulators keep four loads in flight past the compare chain
       (the result does not depend on the order). Sums keep one, which the compiler pipelines. */
    acc b1 = identity(), b2 = identity(), b3 = identity();
    for (; r + 3 * width < r1; r += 4 * width) {
        a = combine(a, load(base[r * st], r));
        b1 = combine(b1, load(base[(r + width) * st], r + width));
        b2 = combine(b2, load(base[(r + 2 * width) * st], r + 2 * width));
        b3 = combine(b3, load(base[(r + 3 * width) * st], r + 3 * width));
    }
    for (; r < r1; r += width) a = combine(a, load(base[r * st], r));
    return combine(combine(a, b1), combine(b2, b3));
#else
    for (; r < r1; r += width) a = combine(a, load(base[r * st], r));
    return a;
#endif
}

/* Counts a finished split of a group in `counter` and returns the count before: a release of
   the caller's (and, after a barrier, its block's) partials and an acquire of every earlier
   split's, at GPU scope, in one atomic (no fence on either side). */
__device__ __forceinline__ u32 count_split(u32* counter) {
    u32 old;
#if __CUDA_ARCH__ >= 700
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(counter) : "memory");
#else
    __threadfence();
    old = atomicAdd(counter, 1u);
    __threadfence();
#endif
    return old;
}

__device__ __forceinline__ acc warp_reduce(acc a) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) a = combine(a, shfl_down(a, off));
    return a;
}

/* The block's combined value, in thread 0. */
__device__ __forceinline__ acc block_reduce(acc a, acc* sh) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    a = warp_reduce(a);
    __syncthreads();
    if (lane == 0) sh[w] = a;
    __syncthreads();
    a = (int)threadIdx.x < (int)(blockDim.x >> 5) ? sh[threadIdx.x] : identity();
    if (w == 0) a = warp_reduce(a);
    return a;
}

/* A block per (output, split) task, its vectors U loads at a time (`accumulate`). */
template <int U>
__device__ __forceinline__ void red_block_tasks(const RedP& p) {
    __shared__ acc sh[32];
    __shared__ int last;
    const i64 tasks = p.n_out * p.splits;
    for (i64 t = blockIdx.x; t < tasks; t += gridDim.x) {
        const i64 o = t / p.splits, s = t - (t / p.splits) * p.splits;
        i64 so, dof;
        out_offsets(p, o, so, dof);
        /* The splits of a row interleave (block s reads vectors s*B + tid, + splits*B, ...), so
           the whole GPU streams through one window of the row at a time. */
        acc a = accumulate<U>(p, (const TS*)p.src + so, 0, p.n_red, s * blockDim.x + threadIdx.x, p.splits * blockDim.x);
        a = block_reduce(a, sh);
        if (p.splits == 1) {
            if (threadIdx.x == 0) store_out(p, dof, a);
            continue;
        }
        if (threadIdx.x == 0) {
            st_partial(p.partials, o * p.splits + s, a);
            last = count_split(p.counters + o) == (u32)(p.splits - 1);
        }
        /* The barrier orders the acquire of thread 0 before every thread's loads. */
        __syncthreads();
        if (last) {
            /* Each thread's partials (k = tid, tid + blockDim, ...) folded in that order, eight
               loads in flight at a time: one at a time, their latencies added up (1.2 µs of a
               one-wave f32 sum of 64 MiB's 21 on the H200, in a probe). */
            acc b = identity();
            for (i64 k0 = threadIdx.x; k0 < p.splits; k0 += 8 * (i64)blockDim.x) {
                acc v[8];
#pragma unroll
                for (int u = 0; u < 8; ++u) {
                    const i64 k = k0 + u * (i64)blockDim.x;
                    v[u] = k < p.splits ? ld_partial(p.partials, o * p.splits + k) : identity();
                }
#pragma unroll
                for (int u = 0; u < 8; ++u) b = combine(b, v[u]);
            }
            b = block_reduce(b, sh);
            if (threadIdx.x == 0) {
                store_out(p, dof, b);
                p.counters[o] = 0;
            }
        }
        __syncthreads();
    }
}
extern "C" __global__ void __launch_bounds__(256) red_block(const __grid_constant__ RedP p) { cs_enter(); red_block_tasks<4>(p); }
/* kernels/codegen.rs appends the wide variant, `red_block8` (`red_block_tasks<8>`), to the modules
   of `reduce_layouts::wide_block`. */

extern "C" __global__ void __launch_bounds__(256) red_warp(const __grid_constant__ RedP p) {
    cs_enter();
    const i64 lane = threadIdx.x & 31;
    const i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 o = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; o < p.n_out; o += warps) {
        i64 so, dof;
        out_offsets(p, o, so, dof);
        acc a = warp_reduce(accumulate<4>(p, (const TS*)p.src + so, 0, p.n_red, lane, 32));
        if (lane == 0) store_out(p, dof, a);
    }
}

extern "C" __global__ void __launch_bounds__(256) red_thread(const __grid_constant__ RedP p) {
    cs_enter();
    const i64 tasks = p.n_out * p.splits;
    const i64 step = (i64)gridDim.x * blockDim.x;
    for (i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x; t < tasks; t += step) {
        const i64 s = t / p.n_out, o = t - s * p.n_out;
        i64 so, dof;
        out_offsets(p, o, so, dof);
        const i64 r0 = s * p.chunk;
        const i64 r1 = min(p.n_red, r0 + p.chunk);
        const acc a = accumulate<4>(p, (const TS*)p.src + so, r0, r1, 0, 1);
        if (p.splits == 1) {
            store_out(p, dof, a);
            continue;
        }
        st_partial(p.partials, o * p.splits + s, a);
        if (count_split(p.counters + o) == (u32)(p.splits - 1)) {
            /* In split order, eight loads in flight at a time (as `red_block`'s last block). */
            acc b = identity();
            for (i64 k0 = 0; k0 < p.splits; k0 += 8) {
                acc v[8];
#pragma unroll
                for (int u = 0; u < 8; ++u) v[u] = k0 + u < p.splits ? ld_partial(p.partials, o * p.splits + k0 + u) : identity();
#pragma unroll
                for (int u = 0; u < 8; ++u) b = combine(b, v[u]);
            }
            store_out(p, dof, b);
            p.counters[o] = 0;
        }
    }
}

/* Reductions over an outer dim, a column per output with adjacent outputs adjacent in memory
   (source stride 1 along the inner kept dim, one reduced dim of stride `red_st[0]`): blocks of
   COLX x COLY threads (`reduce_layouts::cols_x`). Thread (x, y) of a block holds `W` adjacent outputs
   (one `W`-element load per row: 16 bytes when aligned) and folds rows y, y + COLY, ... of its
   split's rows in increasing order (`step`), two passes of COLU loads in flight; the block's
   COLY row lanes are combined in shared memory by a thread per output, and a column split over
   blocks is combined, in split order, by the last of its blocks to finish (a counter per group
   of COLX x W columns), as `red_block` combines a row. */
#define COLY (256 / COLX)
#define COLU 4
template <int W>
__device__ __forceinline__ Pack<TS, W> cols_ld(const TS* q) {
    if (W > 1) return ldv<TS, W>(q);
    Pack<TS, W> v;
    v.v[0] = *q;
    return v;
}
/* A pass of COLU rows from row `r` (COLY apart; those past the split's end `r1` loaded from its
   last row). */
template <int W>
__device__ __forceinline__ void cols_pass(Pack<TS, W> (&v)[COLU], const TS* base, i64 st, i64 r, i64 r1) {
#pragma unroll
    for (int u = 0; u < COLU; ++u) v[u] = cols_ld<W>(base + min(r + u * COLY, r1 - 1) * st);
}
/* Folds the pass from row `r` into `a`, its rows below `r1` (all of them with `whole`), in row
   order; with `first`, its first row starts the accumulators (so `step` needs no identity). */
template <int W>
__device__ __forceinline__ void cols_fold(acc (&a)[W], const Pack<TS, W> (&v)[COLU], i64 r, i64 r1, bool first, bool whole) {
#if HALF_RUNS
    /* Each column's COLU rows as one run (`reduce_layouts::half_runs`); rows past `r1` add -0, which
       leaves every sum as it is. */
#pragma unroll
    for (int j = 0; j < W; ++j) {
        float t[COLU];
#pragma unroll
        for (int u = 0; u < COLU; ++u) t[u] = (whole || r + u * COLY < r1) ? tof(v[u].v[j]) : -0.0f;
        const acc b = (acc)run_sum<COLU>(t);
        a[j] = first ? b : combine(a[j], b);
    }
    return;
#endif
#pragma unroll
    for (int u = 0; u < COLU; ++u) {
        const i64 ru = r + u * COLY;
#pragma unroll
        for (int j = 0; j < W; ++j) {
            const acc b = (first && u == 0) ? load(v[u].v[j], ru) : step(a[j], v[u].v[j], ru);
            a[j] = (whole || ru < r1) ? b : a[j];
        }
    }
}
/* The last split's block of column group bc: each of its COLX x W outputs combined by a thread
   of its own, its partials read eight at a time and folded in split order. */
template <int W> __device__ __forceinline__ void cols_last(const RedP& p, i64 bc, i64 groups, i64 ost) {
    for (int q = threadIdx.x; q < COLX * W; q += blockDim.x) {
        const i64 g2 = bc * COLX + (q % COLX), o2 = g2 * W + (q / COLX);
        if (g2 >= groups || o2 >= p.n_out) continue;
        i64 so2 = 0, dof2 = 0;
        out_offsets(p, g2 * W, so2, dof2);
        const i64 first = o2 * p.splits;
        acc b = identity();
        i64 k = 0;
        for (; k + 8 <= p.splits; k += 8) {
            acc v[8];
#pragma unroll
            for (int u = 0; u < 8; ++u) v[u] = ld_partial(p.partials, first + k + u);
#pragma unroll
            for (int u = 0; u < 8; ++u) b = combine(b, v[u]);
        }
        for (; k < p.splits; ++k) b = combine(b, ld_partial(p.partials, first + k));
        store_out(p, dof2 + (q / COLX) * ost, b);
    }
}
template <int W>
__device__ __forceinline__ void red_cols(const RedP& p) {
    /* Accumulators per thread staged in shared memory at a time (at most 64 bytes of them). */
    constexpr int JC = (int)(W * sizeof(acc) <= 64 ? W : 64 / sizeof(acc));
    __shared__ acc sh[COLY][COLX * JC];
    __shared__ int last;
    const int x = threadIdx.x % COLX, y = threadIdx.x / COLX;
    const i64 groups = (p.n_out + W - 1) / W, nbc = (groups + COLX - 1) / COLX, tasks = nbc * p.splits;
    const i64 st = p.red_st[0];
    for (i64 t = blockIdx.x; t < tasks; t += gridDim.x) {
        const i64 s = t / nbc, bc = t - s * nbc;
        const i64 g = bc * COLX + x, o = g * W;
        const bool live = g < groups;
        i64 so = 0, dof = 0;
        if (live) out_offsets(p, o, so, dof);
        (void)dof;
        const TS* base = (const TS*)p.src + so;
        const i64 r0 = s * p.chunk, r1 = min(p.n_red, r0 + p.chunk);
        acc a[W];
#pragma unroll
        for (int j = 0; j < W; ++j) a[j] = identity();
        i64 r = r0 + y;
        if (live && r < r1) {
            /* Passes of COLU rows, each pass's loads issued before the pass before it is
               folded, the whole passes between the first and the last through a pointer: left
               to itself (a pass loaded and folded at a time, its addresses clamped) the compiler
               kept two loads in flight. Measured on the H200 ([4096, 4096] over dim 0, µs, the
               old loop at its best split against this one at two blocks per SM): f32 sum 23.7
               against 22.3, bf16 sum 11.9 / 11.6, f32 max 23.0 / 21.9, f32 argmax 25.7 / 24.5. */
            const i64 d = COLY * st;
            Pack<TS, W> e[COLU], v[COLU];
            cols_pass<W>(e, base, st, r, r1);
            const TS* q = base + (r + COLU * COLY) * st;
            bool whole = r + (2 * COLU - 1) * COLY < r1;
            if (whole) {
#pragma unroll
                for (int u = 0; u < COLU; ++u) v[u] = cols_ld<W>(q + u * d);
            }
            cols_fold<W>(a, e, r, r1, true, false);
            for (r += COLU * COLY; whole; r += COLU * COLY, q += COLU * d) {
                const bool next = r + (2 * COLU - 1) * COLY < r1;
                Pack<TS, W> w[COLU] = {};
                if (next) {
#pragma unroll
                    for (int u = 0; u < COLU; ++u) w[u] = cols_ld<W>(q + (COLU + u) * d);
                }
                cols_fold<W>(a, v, r, r1, false, true);
                whole = next;
#pragma unroll
                for (int u = 0; u < COLU; ++u) v[u] = w[u];
            }
            if (r < r1) {
                cols_pass<W>(e, base, st, r, r1);
                cols_fold<W>(a, e, r, r1, false, false);
            }
        }
        /* The COLY row lanes of each column combined in lane order, JC accumulators of every
           thread at a time, each of those COLX x JC columns by a thread of its own, which
           stores the result (or the split's partial). */
        const i64 ost = p.out_ndim > 0 ? p.out_dst[0] : 0;
#pragma unroll
        for (int j0 = 0; j0 < W; j0 += JC) {
            __syncthreads();
#pragma unroll
            for (int j = 0; j < JC; ++j) sh[y][j * COLX + x] = a[j0 + j];
            __syncthreads();
            for (int q = threadIdx.x; q < COLX * JC; q += blockDim.x) {
                acc b = sh[0][q];
#pragma unroll
                for (int k = 1; k < COLY; ++k) b = combine(b, sh[k][q]);
                const i64 g2 = bc * COLX + (q % COLX), j = j0 + (q / COLX), o2 = g2 * W + j;
                if (g2 >= groups || o2 >= p.n_out) continue;
                if (p.splits == 1) {
                    i64 so2 = 0, dof2 = 0;
                    out_offsets(p, g2 * W, so2, dof2);
                    store_out(p, dof2 + j * ost, b);
                } else {
                    st_partial(p.partials, o2 * p.splits + s, b);
                }
            }
        }
        if (p.splits == 1) continue;
        /* The barrier puts every thread's partials before thread 0's release, and thread 0's
           acquire before the loads of the last block. */
        __syncthreads();
        if (threadIdx.x == 0) last = count_split(p.counters + bc) == (u32)(p.splits - 1);
        __syncthreads();
        if (last) {
            cols_last<W>(p, bc, groups, ost);
            if (threadIdx.x == 0) p.counters[bc] = 0;
        }
    }
}
extern "C" __global__ void __launch_bounds__(256) red_cols1(const __grid_constant__ RedP p) { cs_enter(); red_cols<1>(p); }
extern "C" __global__ void __launch_bounds__(256) red_colsv(const __grid_constant__ RedP p) { cs_enter(); red_cols<VEC>(p); }
