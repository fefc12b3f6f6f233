//! The fixed parts of the generated CUDA C (see `codegen.rs`): helpers every module shares, and
//! the elementwise, reduction and softmax kernels, written against names the generated part of
//! each module defines first (`T0..T2`, `TO`, `NIN`, `VEC`, `apply`; `TS`, `TD`, `acc` and its
//! functions; `to_d`, `from_d`, `LOG`).

/// Helpers every module shares.
pub(super) const COMMON: &str = r#"
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;
#define MAXD 16
#define I64_MIN (-9223372036854775807LL - 1)
#define I64_MAX 9223372036854775807LL
#define FULL 0xffffffffu

__device__ __forceinline__ float h2f(u16 h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ u16 f2h(float f) { u16 h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float b2f(u16 b) { return __uint_as_float(((u32)b) << 16); }
__device__ __forceinline__ u16 f2b(float f) {
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (u16)(u >> 16);
}
/* f64 -> f32 rounded to odd: a second rounding to a type of at most 22 bits is then exact. */
__device__ __forceinline__ float d2f_odd(double d) {
    float f = __double2float_rz(d);
    if ((double)f != d && d == d) f = __uint_as_float(__float_as_uint(f) | 1u);
    return f;
}
__device__ __forceinline__ u16 d2h(double d) { return f2h(d2f_odd(d)); }
__device__ __forceinline__ u16 d2b(double d) { return f2b(d2f_odd(d)); }
__device__ __forceinline__ double d_nan() { return __longlong_as_double(0x7ff8000000000000LL); }
__device__ __forceinline__ double d_inf() { return __longlong_as_double(0x7ff0000000000000LL); }
__device__ __forceinline__ i64 ipow(i64 b, i64 e) {
    if (e < 0) return b == 1 ? 1 : (b == -1 ? ((e & 1) ? -1 : 1) : 0);
    u64 r = 1, x = (u64)b;
    while (e > 0) { if (e & 1) r *= x; x *= x; e >>= 1; }
    return (i64)r;
}
template <int N> struct RawT;
template <> struct RawT<1> { typedef u8 T; };
template <> struct RawT<2> { typedef u16 T; };
template <> struct RawT<4> { typedef u32 T; };
template <> struct RawT<8> { typedef uint2 T; };
template <> struct RawT<16> { typedef uint4 T; };
/* A number given with the launch: its bits as T in the low bytes of a 64-bit parameter. */
template <typename T> __device__ __forceinline__ T imm(u64 bits) {
    union { u64 b; T t; } u;
    u.b = bits;
    return u.t;
}
template <typename T, int V> struct Pack { T v[V]; };
template <typename T, int V> __device__ __forceinline__ Pack<T, V> ldv(const T* p) {
    typedef typename RawT<sizeof(T) * V>::T R;
    union { R r; Pack<T, V> k; } u;
    u.r = *reinterpret_cast<const R*>(p);
    return u.k;
}
template <typename T, int V> __device__ __forceinline__ void stv(T* p, const Pack<T, V>& k) {
    typedef typename RawT<sizeof(T) * V>::T R;
    union { R r; Pack<T, V> k; } u;
    u.k = k;
    *reinterpret_cast<R*>(p) = u.r;
}
"#;

/// The elementwise kernels, after the generated `T0..T2`, `TO`, `NIN`, `VEC` and `apply`.
pub(super) const ELEMENTWISE: &str = r#"
struct EwFast { char* out; const char* in0; const char* in1; const char* in2; u64 n; u64 value; int vec; int pad; };
struct EwStrided { EwFast b; int ndim; int pad; i64 shape[MAXD]; i64 st[4][MAXD]; };

template <typename T, bool SCALAR, bool ACTIVE>
__device__ __forceinline__ Pack<T, VEC> get_vec(const T* p, u64 i, T s) {
    Pack<T, VEC> k;
    if (!ACTIVE || SCALAR) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) k.v[j] = s;
    } else {
        k = ldv<T, VEC>(p + i * VEC);
    }
    return k;
}
template <typename T, bool SCALAR, bool ACTIVE>
__device__ __forceinline__ T get_one(const T* p, u64 i, T s) { return (!ACTIVE || SCALAR) ? s : p[i]; }

#define A_ARGS T0, (MASK & 1) != 0, (NIN > 0)
#define B_ARGS T1, (MASK & 2) != 0, (NIN > 1)
#define C_ARGS T2, (MASK & 4) != 0, (NIN > 2)

template <int MASK>
__device__ __forceinline__ void ew_fast(const EwFast& p) {
    const u64 n = p.n;
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 step = (u64)gridDim.x * blockDim.x;
    TO* out = (TO*)p.out;
    const T0* a = (const T0*)p.in0;
    const T1* b = (const T1*)p.in1;
    const T2* c = (const T2*)p.in2;
    T0 sa = T0();
    T1 sb = T1();
    T2 sc = T2();
    if (NIN > 0 && (MASK & 1)) sa = a[0];
    if (NIN > 1 && (MASK & 2)) sb = b ? b[0] : imm<T1>(p.value);
    if (NIN > 2 && (MASK & 4)) sc = c[0];
    u64 start = 0;
    if (VEC > 1 && p.vec) {
        const u64 nv = n / VEC;
        u64 i = tid;
        for (; i + step < nv; i += 2 * step) {
            const Pack<T0, VEC> a0 = get_vec<A_ARGS>(a, i, sa), a1 = get_vec<A_ARGS>(a, i + step, sa);
            const Pack<T1, VEC> b0 = get_vec<B_ARGS>(b, i, sb), b1 = get_vec<B_ARGS>(b, i + step, sb);
            const Pack<T2, VEC> c0 = get_vec<C_ARGS>(c, i, sc), c1 = get_vec<C_ARGS>(c, i + step, sc);
            Pack<TO, VEC> r0, r1;
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                r0.v[j] = apply(a0.v[j], b0.v[j], c0.v[j], p.value);
                r1.v[j] = apply(a1.v[j], b1.v[j], c1.v[j], p.value);
            }
            stv<TO, VEC>(out + i * VEC, r0);
            stv<TO, VEC>(out + (i + step) * VEC, r1);
        }
        if (i < nv) {
            const Pack<T0, VEC> a0 = get_vec<A_ARGS>(a, i, sa);
            const Pack<T1, VEC> b0 = get_vec<B_ARGS>(b, i, sb);
            const Pack<T2, VEC> c0 = get_vec<C_ARGS>(c, i, sc);
            Pack<TO, VEC> r0;
#pragma unroll
            for (int j = 0; j < VEC; ++j) r0.v[j] = apply(a0.v[j], b0.v[j], c0.v[j], p.value);
            stv<TO, VEC>(out + i * VEC, r0);
        }
        start = nv * VEC;
    }
    for (u64 i = start + tid; i < n; i += step) {
        out[i] = apply(get_one<A_ARGS>(a, i, sa), get_one<B_ARGS>(b, i, sb), get_one<C_ARGS>(c, i, sc), p.value);
    }
}

extern "C" __global__ void __launch_bounds__(256) ew_s(const __grid_constant__ EwStrided p) {
    const u64 n = p.b.n;
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 step = (u64)gridDim.x * blockDim.x;
    for (u64 i = tid; i < n; i += step) {
        i64 o0 = 0, o1 = 0, o2 = 0, o3 = 0;
        if (n <= 0xffffffffull) {
            u32 rem = (u32)i;
#pragma unroll 1
            for (int d = 0; d < p.ndim; ++d) {
                const u32 sz = (u32)p.shape[d];
                const u32 q = rem / sz;
                const i64 k = (i64)(rem - q * sz);
                rem = q;
                o0 += k * p.st[0][d];
                if (NIN > 0) o1 += k * p.st[1][d];
                if (NIN > 1) o2 += k * p.st[2][d];
                if (NIN > 2) o3 += k * p.st[3][d];
            }
        } else {
            u64 rem = i;
#pragma unroll 1
            for (int d = 0; d < p.ndim; ++d) {
                const u64 sz = (u64)p.shape[d];
                const u64 q = rem / sz;
                const i64 k = (i64)(rem - q * sz);
                rem = q;
                o0 += k * p.st[0][d];
                if (NIN > 0) o1 += k * p.st[1][d];
                if (NIN > 1) o2 += k * p.st[2][d];
                if (NIN > 2) o3 += k * p.st[3][d];
            }
        }
        const T0 x0 = NIN > 0 ? ((const T0*)p.b.in0)[o1] : T0();
        const T1 x1 = NIN > 1 ? (p.b.in1 ? ((const T1*)p.b.in1)[o2] : imm<T1>(p.b.value)) : T1();
        const T2 x2 = NIN > 2 ? ((const T2*)p.b.in2)[o3] : T2();
        ((TO*)p.b.out)[o0] = apply(x0, x1, x2, p.b.value);
    }
}
"#;

/// The reduction kernels, after the generated `TS`, `TD`, `VEC`, `acc` and its functions.
pub(super) const REDUCE: &str = r#"
struct RedP {
    const char* src; char* dst; char* partials; u32* counters;
    i64 n_out, n_red, splits, chunk;
    int out_ndim, red_ndim, vec, pad;
    i64 out_shape[MAXD]; i64 out_sst[MAXD]; i64 out_dst[MAXD];
    i64 red_shape[MAXD]; i64 red_st[MAXD];
};

__device__ __forceinline__ void out_offsets(const RedP& p, i64 o, i64& so, i64& dof) {
    so = 0; dof = 0;
#pragma unroll 1
    for (int d = 0; d < p.out_ndim; ++d) {
        const i64 q = o / p.out_shape[d];
        const i64 k = o - q * p.out_shape[d];
        o = q;
        so += k * p.out_sst[d];
        dof += k * p.out_dst[d];
    }
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

__device__ __forceinline__ acc fold(const Pack<TS, VEC>& v, i64 r) {
    acc a = load(v.v[0], r);
#pragma unroll
    for (int j = 1; j < VEC; ++j) a = combine(a, load(v.v[j], r + j));
    return a;
}

/* Combines elements r0 + lane, r0 + lane + width, ... below r1 of the row at `base`. */
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
        for (; i + 3 * width < nv; i += 4 * width) {
            const Pack<TS, VEC> v0 = ldv<TS, VEC>(b + i * VEC);
            const Pack<TS, VEC> v1 = ldv<TS, VEC>(b + (i + width) * VEC);
            const Pack<TS, VEC> v2 = ldv<TS, VEC>(b + (i + 2 * width) * VEC);
            const Pack<TS, VEC> v3 = ldv<TS, VEC>(b + (i + 3 * width) * VEC);
            a = combine(a, fold(v0, r0 + i * VEC));
            a1 = combine(a1, fold(v1, r0 + (i + width) * VEC));
            a2 = combine(a2, fold(v2, r0 + (i + 2 * width) * VEC));
            a3 = combine(a3, fold(v3, r0 + (i + 3 * width) * VEC));
        }
        for (; i < nv; i += width) a = combine(a, fold(ldv<TS, VEC>(b + i * VEC), r0 + i * VEC));
        a = combine(combine(a, a1), combine(a2, a3));
        for (i64 r = r0 + nv * VEC + lane; r < r1; r += width) a = combine(a, load(base[r], r));
        return a;
    }
    for (i64 r = r0 + lane; r < r1; r += width) a = combine(a, load(base[r * st], r));
    return a;
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

extern "C" __global__ void __launch_bounds__(256) red_block(const __grid_constant__ RedP p) {
    __shared__ acc sh[32];
    __shared__ int last;
    const i64 tasks = p.n_out * p.splits;
    for (i64 t = blockIdx.x; t < tasks; t += gridDim.x) {
        const i64 o = t / p.splits, s = t - (t / p.splits) * p.splits;
        i64 so, dof;
        out_offsets(p, o, so, dof);
        /* The splits of a row interleave (block s reads vectors s*B + tid, + splits*B, ...), so
           the whole GPU streams through one window of the row at a time. */
        acc a = accumulate(p, (const TS*)p.src + so, 0, p.n_red, s * blockDim.x + threadIdx.x, p.splits * blockDim.x);
        a = block_reduce(a, sh);
        if (p.splits == 1) {
            if (threadIdx.x == 0) store((TD*)p.dst + dof, a, p.n_red);
            continue;
        }
        if (threadIdx.x == 0) {
            st_partial(p.partials, o * p.splits + s, a);
            __threadfence();
            last = atomicAdd(p.counters + o, 1u) == (u32)(p.splits - 1);
        }
        __syncthreads();
        if (last) {
            __threadfence();
            acc b = identity();
            for (i64 k = threadIdx.x; k < p.splits; k += blockDim.x) b = combine(b, ld_partial(p.partials, o * p.splits + k));
            b = block_reduce(b, sh);
            if (threadIdx.x == 0) {
                store((TD*)p.dst + dof, b, p.n_red);
                p.counters[o] = 0;
            }
        }
        __syncthreads();
    }
}

extern "C" __global__ void __launch_bounds__(256) red_warp(const __grid_constant__ RedP p) {
    const i64 lane = threadIdx.x & 31;
    const i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 o = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; o < p.n_out; o += warps) {
        i64 so, dof;
        out_offsets(p, o, so, dof);
        acc a = warp_reduce(accumulate(p, (const TS*)p.src + so, 0, p.n_red, lane, 32));
        if (lane == 0) store((TD*)p.dst + dof, a, p.n_red);
    }
}

extern "C" __global__ void __launch_bounds__(256) red_thread(const __grid_constant__ RedP p) {
    const i64 tasks = p.n_out * p.splits;
    const i64 step = (i64)gridDim.x * blockDim.x;
    for (i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x; t < tasks; t += step) {
        const i64 s = t / p.n_out, o = t - s * p.n_out;
        i64 so, dof;
        out_offsets(p, o, so, dof);
        const i64 r0 = s * p.chunk;
        const i64 r1 = min(p.n_red, r0 + p.chunk);
        const acc a = accumulate(p, (const TS*)p.src + so, r0, r1, 0, 1);
        if (p.splits == 1) {
            store((TD*)p.dst + dof, a, p.n_red);
            continue;
        }
        st_partial(p.partials, o * p.splits + s, a);
        __threadfence();
        if (atomicAdd(p.counters + o, 1u) == (u32)(p.splits - 1)) {
            __threadfence();
            acc b = identity();
            for (i64 k = 0; k < p.splits; ++k) b = combine(b, ld_partial(p.partials, o * p.splits + k));
            store((TD*)p.dst + dof, b, p.n_red);
            p.counters[o] = 0;
        }
    }
}
"#;

/// The softmax kernels, after the generated `TS`, `TD`, `LOG`, `to_d` and `from_d`.
pub(super) const SOFTMAX: &str = r#"
struct SmP {
    const char* src; char* dst; i64 rows, n, sst, dst_st;
    int out_ndim, pad;
    i64 out_shape[MAXD]; i64 out_sst[MAXD]; i64 out_dst[MAXD];
};

__device__ __forceinline__ double warp_max(double v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = fmax(v, __shfl_down_sync(FULL, v, off));
    return __shfl_sync(FULL, v, 0);
}
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(FULL, v, off);
    return __shfl_sync(FULL, v, 0);
}
template <bool MAX>
__device__ __forceinline__ double block_all(double v, double* sh) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = MAX ? warp_max(v) : warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        v = lane < nw ? sh[lane] : (MAX ? -d_inf() : 0.0);
        v = MAX ? warp_max(v) : warp_sum(v);
        if (lane == 0) sh[32] = v;
    }
    __syncthreads();
    return sh[32];
}

/* MODE 0: the block does the row, 1: a warp, 2: one thread. */
template <int MODE>
__device__ __forceinline__ void sm_row(const SmP& p, i64 row, i64 lane, i64 width, double* sh) {
    i64 so = 0, dof = 0, o = row;
#pragma unroll 1
    for (int d = 0; d < p.out_ndim; ++d) {
        const i64 q = o / p.out_shape[d];
        const i64 k = o - q * p.out_shape[d];
        o = q;
        so += k * p.out_sst[d];
        dof += k * p.out_dst[d];
    }
    const TS* x = (const TS*)p.src + so;
    TD* y = (TD*)p.dst + dof;
    double m = -d_inf();
    for (i64 r = lane; r < p.n; r += width) m = fmax(m, to_d(x[r * p.sst]));
    if (MODE == 0) m = block_all<true>(m, sh);
    if (MODE == 1) m = warp_max(m);
    const double shift = isfinite(m) ? m : 0.0;
    double s = 0.0;
    for (i64 r = lane; r < p.n; r += width) s += exp(to_d(x[r * p.sst]) - shift);
    if (MODE == 0) s = block_all<false>(s, sh);
    if (MODE == 1) s = warp_sum(s);
    const double ls = log(s);
    for (i64 r = lane; r < p.n; r += width) {
        const double v = to_d(x[r * p.sst]) - shift;
        y[r * p.dst_st] = from_d(LOG ? v - ls : exp(v) / s);
    }
    (void)ls;
}

extern "C" __global__ void __launch_bounds__(256) sm_block(const __grid_constant__ SmP p) {
    __shared__ double sh[33];
    for (i64 row = blockIdx.x; row < p.rows; row += gridDim.x) sm_row<0>(p, row, threadIdx.x, blockDim.x, sh);
}
extern "C" __global__ void __launch_bounds__(256) sm_warp(const __grid_constant__ SmP p) {
    const i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 row = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; row < p.rows; row += warps)
        sm_row<1>(p, row, threadIdx.x & 31, 32, 0);
}
extern "C" __global__ void __launch_bounds__(256) sm_thread(const __grid_constant__ SmP p) {
    const i64 step = (i64)gridDim.x * blockDim.x;
    for (i64 row = (i64)blockIdx.x * blockDim.x + threadIdx.x; row < p.rows; row += step) sm_row<2>(p, row, 0, 1, 0);
}
"#;
