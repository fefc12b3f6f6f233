// A fused module's generated part (kernels/codegen.rs fills the ${...} placeholders): the element
// type, the accumulation type (float, double for f64) and the conversions and exponential.
typedef ${ts} TS;
typedef ${tc} TC;
__device__ __forceinline__ TC to_c(TS x) { return ${to_c}; }
__device__ __forceinline__ TS from_c(TC v) { return ${from_c}; }
__device__ __forceinline__ TC ex(TC v) { return ${ex}(v); }
__device__ __forceinline__ TC c_neg_inf() { return (TC)(-d_inf()); }
