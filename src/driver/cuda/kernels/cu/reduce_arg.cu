// The accumulator of an arg-reduction (kernels/codegen.rs fills the ${...} placeholders): an extreme
// and its index, with the scan order's tie rules (`step`, `fold`, `later`), for reduce.cu.
struct acc { ${vt} v; i64 i; };
__device__ __forceinline__ acc identity() { acc a; a.v = ${ident}; a.i = I64_MAX; return a; }
__device__ __forceinline__ acc load(TS x, i64 r) { acc a; a.v = ${x}; a.i = r; return a; }
__device__ __forceinline__ acc combine(acc a, acc b) {
    const bool an = ${an}, bn = ${bn};
    if (an || bn) { if (an && bn) return a.i < b.i ? a : b; return an ? a : b; }
    if (${better}) return b;
    if (a.v == b.v && b.i < a.i) return b;
    return a;
}
__device__ __forceinline__ acc shfl_down(acc a, int off) { acc b; b.v = __shfl_down_sync(FULL, a.v, off); b.i = __shfl_down_sync(FULL, a.i, off); return b; }
__device__ __forceinline__ void st_partial(char* base, i64 k, acc a) { ((acc*)base)[k] = a; }
__device__ __forceinline__ acc ld_partial(const char* base, i64 k) { const acc* p = (const acc*)base + k; acc a; a.v = __ldcg(&p->v); a.i = __ldcg(&p->i); return a; }
__device__ __forceinline__ void store(TD* out, acc a, i64 n, double inv) { (void)inv; *out = ${store}; }
__device__ __forceinline__ void store_value(TS* out, acc a) { *out = ${value}; }
/* `a` (of earlier rows, not the identity) and row `r`'s element `x`. */
__device__ __forceinline__ acc step(acc a, TS x, i64 r) {
    const ${vt} v = ${x};
    if (${replace}) { a.v = v; a.i = r; }
    return a;
}
/* The first extreme of elements r, r + 1, ... of a vector: its offset found by compares of
   values alone, the 64-bit index formed once. */
__device__ __forceinline__ acc fold(const Pack<TS, VEC>& x, i64 r) {
    acc a;
    a.v = ${x0};
    int j = 0;
#pragma unroll
    for (int k = 1; k < VEC; ++k) {
        const ${vt} v = ${xk};
        if (${replace}) { a.v = v; j = k; }
    }
    a.i = r + j;
    return a;
}
/* `a` and `b`, every element of `b` after those of `a` (which may be the identity). */
__device__ __forceinline__ acc later(acc a, acc b) {
    const ${vt} v = b.v;
    return (a.i == I64_MAX || (${replace})) ? b : a;
}
