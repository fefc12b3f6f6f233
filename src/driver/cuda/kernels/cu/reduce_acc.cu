// The accumulator of a sum, mean, max or min (kernels/codegen.rs fills the ${...} placeholders):
// its domain type, identity, combination and store, for reduce.cu.
typedef ${vt} acc;
__device__ __forceinline__ acc identity() { return ${ident}; }
__device__ __forceinline__ acc load(TS x, i64 r) { (void)r; return ${x}; }
__device__ __forceinline__ acc combine(acc a, acc b) { return ${comb}; }
__device__ __forceinline__ acc shfl_down(acc a, int off) { return __shfl_down_sync(FULL, a, off); }
__device__ __forceinline__ void st_partial(char* base, i64 k, acc a) { ((acc*)base)[k] = a; }
__device__ __forceinline__ acc ld_partial(const char* base, i64 k) { return __ldcg((const acc*)base + k); }
__device__ __forceinline__ void store(TD* out, acc a, i64 n, double inv) { (void)n; (void)inv; const acc v = ${fin}; *out = ${store}; }
__device__ __forceinline__ acc step(acc a, TS x, i64 r) { return combine(a, load(x, r)); }
