// A random module's generated part (kernels/codegen.rs fills the ${...} placeholders): the
// distribution (DIST: 0 uniform, 1 normal, 2 exponential, 3 bernoulli, 4 dropout, 5 integers,
// 6 multinomial, 7 permutation), elements per Philox block (E), a uniform's random bits (BITS), the storage type and its
// conversions from and to double, float and int64 (as the CPU kernels convert).
#define DIST ${dist}
#define E ${e}
#define BITS ${bits}
typedef ${ts} TS;
__device__ __forceinline__ TS from_d(double v) { return ${from_d}; }
__device__ __forceinline__ TS from_i(i64 v) { return ${from_i}; }
__device__ __forceinline__ TS from_f(float v) { return ${from_f}; }
__device__ __forceinline__ double to_d(TS x) { return ${to_d}; }
__device__ __forceinline__ float to_f(TS x) { return ${to_f}; }
__device__ __forceinline__ i64 to_i(TS x) { return ${to_i}; }
