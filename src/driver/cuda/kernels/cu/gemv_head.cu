// A vector-matrix module's generated part (kernels/codegen.rs fills the ${...} placeholders):
// its storage type, vector width and float conversions.
#define V ${v}
typedef ${ts} TS;
__device__ __forceinline__ float to_f(TS x) { return ${to_f}; }
__device__ __forceinline__ TS from_f(float v) { return ${from_f}; }
