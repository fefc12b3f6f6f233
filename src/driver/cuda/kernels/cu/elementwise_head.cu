// An elementwise module's generated part (kernels/codegen.rs fills the ${...} placeholders):
// its dtypes, vector width, tile policy and the function `apply` that elementwise.cu runs; then
// FAST_GUARD, and where it is 1 the vector test `fast_pack`, the branch-free `apply_fast_f` and
// `fast_pair`.
#define NIN ${n}
#define VEC ${vec}
#define UNROLL ${unroll}
#define TILE ${tile}
#define TILE_PAIRS ${pairs}
#define TILE_BOUNDS ${bounds}
typedef ${t0} T0;
typedef ${t1} T1;
typedef ${t2} T2;
typedef ${to} TO;
__device__ __forceinline__ TO apply(T0 a, T1 b, T2 c, u64 value) {
    (void)a; (void)b; (void)c; (void)value;
${body}}
${guard}