// Helpers every generated module starts with (types, conversions, math of the half types,
// programmatic dependent launch). Read by kernels/sources.rs (COMMON); these header lines are
// stripped when it is read, so the compiled source starts at the blank line below.

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;
#define MAXD 16
#define I64_MIN (-9223372036854775807LL - 1)
#define I64_MAX 9223372036854775807LL
#define FULL 0xffffffffu

/* Programmatic dependent launch (sm_90 on): the first statement of every kernel. The kernel
   lets the next kernel of its stream be scheduled at once (its blocks then wait here in turn),
   and waits until the kernels before it have finished and their writes are visible. Launched
   without the attribute, both are no-ops, but not free: grids of many short blocks (a tiled
   transpose: 16384 blocks) ran a fifth slower with them on the H200, so grids larger than any
   the host launches with the attribute (`PDL_MAX_GRID` in codegen.rs) skip them. */
#define CS_PDL_MAX_GRID 1024
/* The same for a kernel the host may launch with the attribute at any grid (`Ctx::run_early`: the
   fast elementwise kernel, the softmax kernels, `gv_rows*`, the norm kernels): whatever the grid
   once `early` is set. */
__device__ __forceinline__ void cs_enter_when(int early) {
#if __CUDA_ARCH__ >= 900
    if (early || gridDim.x <= CS_PDL_MAX_GRID) {
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
        asm volatile("griddepcontrol.wait;" ::: "memory");
    }
#endif
}
__device__ __forceinline__ void cs_enter() { cs_enter_when(0); }

__device__ __forceinline__ float h2f(u16 h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ u16 f2h(float f) { u16 h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
/* The larger (smaller) of two floats, NaN when either is: one instruction from sm_80 on
   (PTX's `max.NaN` / `min.NaN`), else compares. */
__device__ __forceinline__ float fmax_nan(float a, float b) {
#if __CUDA_ARCH__ >= 800
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
#else
    return isnan(a) ? a : (isnan(b) ? b : (b > a ? b : a));
#endif
}
__device__ __forceinline__ float fmin_nan(float a, float b) {
#if __CUDA_ARCH__ >= 800
    float r;
    asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
#else
    return isnan(a) ? a : (isnan(b) ? b : (b < a ? b : a));
#endif
}
__device__ __forceinline__ float b2f(u16 b) { return __uint_as_float(((u32)b) << 16); }
__device__ __forceinline__ u16 f2b(float f) {
#if __CUDA_ARCH__ >= 800
    u16 h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#endif
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (u16)(u >> 16);
}
/* Two floats as a pair of halves (BF16: bf16, else f16), `lo` in the low 16 bits, each rounded as
   f2b / f2h round it: one instruction a pair on sm_80 and newer (PTX's cvt.rn.bf16x2.f32 /
   f16x2.f32 take the high half's value first), where one a value would need a second to pack them. */
template <bool BF16>
__device__ __forceinline__ u32 f2pair(float lo, float hi) {
#if __CUDA_ARCH__ >= 800
    u32 r;
    if (BF16) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    else asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#else
    const u16 l = BF16 ? f2b(lo) : f2h(lo), h = BF16 ? f2b(hi) : f2h(hi);
    return (u32)l | ((u32)h << 16);
#endif
}
/* f64 -> f32 rounded to odd: a second rounding to a type of at most 22 bits is then exact. */
__device__ __forceinline__ float d2f_odd(double d) {
    float f = __double2float_rz(d);
    if ((double)f != d && d == d) f = __uint_as_float(__float_as_uint(f) | 1u);
    return f;
}
__device__ __forceinline__ u16 d2h(double d) { return f2h(d2f_odd(d)); }
__device__ __forceinline__ u16 d2b(double d) { return f2b(d2f_odd(d)); }
/* 1 / (1 + e) or e / (1 + e): one division of a selected numerator. */
__device__ __forceinline__ float sigmoid_of(bool pos, float e) { return (pos ? 1.0f : e) / (1.0f + e); }
__device__ __forceinline__ double sigmoid_of(bool pos, double e) { return (pos ? 1.0 : e) / (1.0 + e); }
__device__ __forceinline__ float tanh_approx(float x) {
#if __CUDA_ARCH__ >= 750
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    return tanhf(x);
#endif
}
__device__ __forceinline__ float sqrt_approx(float x) { float y; asm("sqrt.approx.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
/* x^y for a half-precision result: 2^(y log2 x) by the hardware's approximations for finite
   x > 0 and |y| <= 64 (log2's error 2^-22.6 absolute or 2^-22 relative, times |y|, then ex2's
   2^-22.5: a relative error below 2^-14 over both half types' ranges, so within an ulp); other
   bases and exponents (zero, negative, infinite, NaN, large) take the library's powf, which has
   PyTorch's special cases. */
__device__ __forceinline__ float pow_half(float x, float y) {
    if (x > 0.0f && isfinite(x) && fabsf(y) <= 64.0f) {
        float l, r;
        asm("lg2.approx.f32 %0, %1;" : "=f"(l) : "f"(x));
        asm("ex2.approx.f32 %0, %1;" : "=f"(r) : "f"(y * l));
        return r;
    }
    return powf(x, y);
}
/* Gelu for a half-precision result, x * Phi(x), without erf's cancellation or its two branches:
   Phi(x) = 1 - Q(|x|) for x >= 0 and Q(|x|) below, where Q(z) = exp(-z^2/2) R(z), the upper tail of
   the normal distribution, and R(z) = t P(t) with t = 1 / (1 + 0.279 z) and P of degree six
   (fitted here for relative error: at most 3.9e-6 over z >= 0; with ex2's and rcp's approximations
   gelu's relative error stays below 1e-5 down to 2^-126, a fiftieth of an f16 ulp). One
   reciprocal and one ex2, no branch; NaN stays NaN, -inf gives NaN (-inf * 0, as PyTorch's),
   +inf itself, and the tail below -13 flushes to -0 (PyTorch's erf form cancels to -0 from -5.9). */
__device__ __forceinline__ float gelu_half(float x) {
    const float z = fabsf(x);
    float t, e;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(t) : "f"(fmaf(0.279f, z, 1.0f)));
    float r = -0.051049426f;
    r = fmaf(r, t, 0.10956996f);
    r = fmaf(r, t, 0.021759437f);
    r = fmaf(r, t, 0.095678955f);
    r = fmaf(r, t, 0.10137282f);
    r = fmaf(r, t, 0.1113622f);
    r = fmaf(r, t, 0.11130447f);
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(z * (z * -0.7213475f)));
    const float q = r * t * e;
    return x * (x >= 0.0f ? 1.0f - q : q);
}
__device__ __forceinline__ double d_nan() { return __longlong_as_double(0x7ff8000000000000LL); }
__device__ __forceinline__ double d_inf() { return __longlong_as_double(0x7ff0000000000000LL); }
__device__ __forceinline__ i64 ipow(i64 b, i64 e) {
    if (e < 0) return b == 1 ? 1 : (b == -1 ? ((e & 1) ? -1 : 1) : 0);
    u64 r = 1, x = (u64)b;
    while (e > 0) { if (e & 1) r *= x; x *= x; e >>= 1; }
    return (i64)r;
}
/* The offsets in the source (`sst`) and the destination (`dst`) of output `o` over `ndim` collapsed
   dims (innermost first); one multiply when the outputs are one dim. */
__device__ __forceinline__ void row_offsets(i64 o, int ndim, const i64* shape, const i64* sst, const i64* dst, i64& so, i64& dof) {
    if (ndim <= 1) {
        so = ndim ? o * sst[0] : 0;
        dof = ndim ? o * dst[0] : 0;
        return;
    }
    so = 0; dof = 0;
#pragma unroll 1
    for (int d = 0; d < ndim; ++d) {
        const i64 q = o / shape[d];
        const i64 k = o - q * shape[d];
        o = q;
        so += k * sst[d];
        dof += k * dst[d];
    }
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
