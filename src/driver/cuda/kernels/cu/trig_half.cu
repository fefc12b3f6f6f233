// sin and cos for a half-type result (f16, bf16), computed in float: an elementwise module of
// `sin` or `cos` with a half-type output starts with these (kernels/codegen.rs), and
// tests/trig_half.rs compiles this file as a jiterator function on both drivers and checks every
// f16 and bf16 input against float64.
//
// The argument x is reduced by pi/2 in three parts (Cody and Waite's split, each product exact
// inside its fma: the first part has 23 significant bits, the multiple n at most 17 bits below
// 105615), n rounded to nearest by adding 1.5 * 2^23 (whose ulp is 1; the sum's low bits are n
// mod 4, the quadrant, for negative n too: 1.5 * 2^23 is a multiple of 4), then polynomials of
// degree 7 (sin) and 8 (cos) on [-pi/4, pi/4], chosen by the quadrant, which also gives the sign;
// cos(x) is sin(x + pi/2), its quadrant one on by adding 1.5 * 2^23 + 1. Reducing x itself rather
// than |x| (round to nearest is symmetric: -x gives -n and -r) gives the same bits as reducing |x|
// and taking x's sign, one instruction an element fewer (every f16 and bf16 checked on the host). Every f16
// (|x| <= 65504) and every bf16 below 105615 takes this path, with no branch in the kernel's
// loop; the library's reduction instead converts n to an integer and back, and every element
// carries its Payne-Hanek path behind a branch. Larger bf16 values take the library's sinf /
// cosf, called (not inlined) from one branch. NaN gives NaN, +-inf NaN, and sin keeps the sign of
// zero.
/* The reduced argument r = x - n pi/2 of x (|x| < 105615), n the integer nearest x * 2/pi, and
   k = n + shift mod 4 (also for negative n) in q's two low bits, where bias is 1.5 * 2^23 + shift
   (shift 0 or 1: the sum's ulp is 1 and 1.5 * 2^23 a multiple of 4). */
__device__ __forceinline__ float trig_reduce(float x, float bias, unsigned& q) {
    const float j = fmaf(x, 0.636619772f, bias);
    q = __float_as_uint(j);
    const float n = j - bias;
    float r = fmaf(n, -1.57079625129699707031f, x);
    r = fmaf(n, -7.54978941586159635335e-8f, r);
    return fmaf(n, -5.39030295347423839261e-15f, r);
}
/* sin(r) and cos(r) for |r| <= pi/4, s = r * r. sin's p * s is taken as fmaf(p, s, +0): the same
   value, but +0 where s is 0, so that sin(-0) is -0 + -0. */
__device__ __forceinline__ float trig_sin_poly(float r, float s) {
    float p = fmaf(s, -1.9515295891e-4f, 8.3321608736e-3f);
    p = fmaf(p, s, -1.6666654611e-1f);
    return fmaf(fmaf(p, s, 0.0f), r, r);
}
__device__ __forceinline__ float trig_cos_poly(float s) {
    float p = fmaf(s, 2.443315711809948e-5f, -1.388731625493765e-3f);
    p = fmaf(p, s, 4.166664568298827e-2f);
    p = fmaf(p, s, -0.5f);
    return fmaf(p, s, 1.0f);
}
/* sin(x + shift pi/2) for |x| < 105615 (or NaN, or infinite), bias as trig_reduce's: sin(r + k pi/2)
   is sin(r), cos(r), -sin(r), -cos(r) by the quadrant k. */
__device__ __forceinline__ float trig_sin_shifted(float x, float bias) {
    unsigned q;
    const float r = trig_reduce(x, bias, q);
    const float s = r * r;
    const float v = (q & 1u) ? trig_cos_poly(s) : trig_sin_poly(r, s);
    return __uint_as_float(__float_as_uint(v) ^ ((q & 2u) << 30));
}
/* sin(x) and cos(x) = sin(x + pi/2) for |x| < 105615 (or NaN, or infinite). */
__device__ __forceinline__ float sin_small(float x) { return trig_sin_shifted(x, 12582912.0f); }
__device__ __forceinline__ float cos_small(float x) { return trig_sin_shifted(x, 12582913.0f); }
/* The library's, kept out of line: only bf16 values of 105615 or more call them. */
__device__ __noinline__ float sin_large(float x) { return sinf(x); }
__device__ __noinline__ float cos_large(float x) { return cosf(x); }
/* sin(x) and cos(x) of any float that came from a bf16. */
__device__ __forceinline__ float sin_wide(float x) { return fabsf(x) < 105615.0f ? sin_small(x) : sin_large(x); }
__device__ __forceinline__ float cos_wide(float x) { return fabsf(x) < 105615.0f ? cos_small(x) : cos_large(x); }
