// A jiterator module of many inputs or several outputs (kernels/jit.rs generates the part before
// this: `NIN`, the types and `cs_jit_apply`, which reads every input at its offset, calls the
// user's function once and writes each output at index `i`). One kernel computes every output:
// a grid-stride loop over the outputs' (contiguous) elements; `ndim < 0`: each input is dense
// (offset `i`) or one broadcast element (bit `k` of `mask`: offset 0); else each input's offset
// from the collapsed shape and its strides (innermost dim first).
extern "C" __global__ void __launch_bounds__(256) jm(const __grid_constant__ CsJitP p) {
    cs_enter();
    const u64 n = p.n;
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 step = (u64)gridDim.x * blockDim.x;
    for (u64 i = tid; i < n; i += step) {
        i64 off[NIN];
        if (p.ndim < 0) {
#pragma unroll
            for (int k = 0; k < NIN; ++k) off[k] = ((p.mask >> k) & 1) ? 0 : (i64)i;
        } else {
#pragma unroll
            for (int k = 0; k < NIN; ++k) off[k] = 0;
            u64 rem = i;
#pragma unroll 1
            for (int d = 0; d < p.ndim; ++d) {
                const u64 sz = (u64)p.shape[d];
                const u64 q = rem / sz;
                const i64 j = (i64)(rem - q * sz);
                rem = q;
#pragma unroll
                for (int k = 0; k < NIN; ++k) off[k] += j * p.st[k][d];
            }
        }
        cs_jit_apply(p, i, off);
    }
}
