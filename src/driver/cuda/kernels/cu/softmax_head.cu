// A softmax module's generated part (kernels/codegen.rs fills the ${...} placeholders): dtypes,
// compute type, vector width and the conversions and exponential softmax.cu uses.
#define LOG ${log}
#define V ${v}
typedef ${ts} TS;
typedef ${td} TD;
typedef ${tc} TC;
__device__ __forceinline__ TC to_c(TS x) { return ${to_c}; }
__device__ __forceinline__ TD from_c(TC v) { return ${from_c}; }
__device__ __forceinline__ TC ex(TC v) { return ${ex}(v); }
