// Scaled dot-product attention (PyTorch's math backend semantics), after fused_head.cu and
// attention_params.cu: flash attention with an online softmax. A block of AW (8) warps takes AW consecutive queries of one
// (batch, head) and one split of the keys; tiles of KT keys and values are loaded into shared
// memory (as TC) by the whole block; each warp scores its query against the tile (G = 32 / KT
// lanes per key), keeps a running maximum m, sum l and output accumulator (EP / 32 head elements
// per lane) in registers. Scores never reach global memory. With one split the block writes
// acc / l (zeros where every key is masked) where the output strides ost say; with several it
// writes (m, l, acc) partials (rows in [B, H, L] order) that at_merge merges (flash-decoding). Entry points at_{EP} and at_merge are appended by
// kernels/codegen.rs.

#define AW 8

template <int EP, int KT> __device__ void at_tile(const AttnP& p) {
    constexpr int G = 32 / KT;
    constexpr int NE = EP / 32;
    __shared__ TC ks[KT][EP + 1];
    __shared__ TC vs[KT][EP];
    __shared__ TC qs[AW][EP];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int jj = lane % KT, g = lane / KT;
    const i64 qtiles = (p.l + AW - 1) / AW;
    const i64 tasks = qtiles * p.hq * p.b * p.splits;
    for (i64 task = blockIdx.x; task < tasks; task += gridDim.x) {
        i64 t = task;
        const i64 qt = t % qtiles; t /= qtiles;
        const i64 h = t % p.hq; t /= p.hq;
        const i64 bi = t % p.b; t /= p.b;
        const i64 sp = t;
        const i64 hk = h / (p.hq / p.hkv);
        const i64 i = qt * AW + w;
        const bool live = i < p.l;
        const i64 k0 = sp * p.chunk;
        i64 k1 = min(p.s, k0 + p.chunk);
        // Causal: no query of the block sees a key past its last query.
        if (p.causal) k1 = min(k1, min(p.l, qt * AW + AW));
        const TS* kb = p.k + bi * p.kst[0] + hk * p.kst[1];
        const TS* vb = p.v + bi * p.vst[0] + hk * p.vst[1];
        __syncthreads();  // the previous task's readers of qs are done
        for (int d = lane; d < EP; d += 32)
            qs[w][d] = (live && d < p.e) ? to_c(p.q[bi * p.qst[0] + h * p.qst[1] + i * p.qst[2] + d * p.qst[3]]) : (TC)0;
        TC m = c_neg_inf(), ls = (TC)0, acc[NE];
#pragma unroll
        for (int n = 0; n < NE; ++n) acc[n] = (TC)0;
        for (i64 j0 = k0; j0 < k1; j0 += KT) {
            __syncthreads();  // the previous tile's readers are done
            for (int idx = threadIdx.x; idx < KT * EP; idx += AW * 32) {
                const int r = idx / EP, d = idx % EP;
                const i64 j = j0 + r;
                const bool in = j < k1;
                ks[r][d] = (in && d < p.e) ? to_c(kb[j * p.kst[2] + d * p.kst[3]]) : (TC)0;
                vs[r][d] = (in && d < p.ev) ? to_c(vb[j * p.vst[2] + d * p.vst[3]]) : (TC)0;
            }
            __syncthreads();
            TC sc = (TC)0;
#pragma unroll 8
            for (int d = g; d < EP; d += G) sc += qs[w][d] * ks[jj][d];
#pragma unroll
            for (int off = KT; off < 32; off <<= 1) sc += __shfl_xor_sync(FULL, sc, off);
            const i64 j = j0 + jj;
            TC x = sc * (TC)p.scale;
            bool keep = live && j < k1 && !(p.causal && j > i);
            if (keep && p.mask_kind != 0) {
                const i64 mo = bi * p.mst[0] + h * p.mst[1] + i * p.mst[2] + j * p.mst[3];
                if (p.mask_kind == 1) keep = p.mask[mo] != 0;
                else x += to_c(((const TS*)p.mask)[mo]);
            }
            if (!keep) x = c_neg_inf();
            TC tm = x;
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) tm = fmax(tm, __shfl_xor_sync(FULL, tm, off));
            const TC mn = fmax(m, tm);
            if (mn == c_neg_inf()) continue;  // the same in every lane: nothing kept yet
            const TC alpha = m == c_neg_inf() ? (TC)0 : ex(m - mn);
            const TC pj = x == c_neg_inf() ? (TC)0 : ex(x - mn);
            TC ps = g == 0 ? pj : (TC)0;
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) ps += __shfl_xor_sync(FULL, ps, off);
            ls = ls * alpha + ps;
#pragma unroll
            for (int n = 0; n < NE; ++n) acc[n] *= alpha;
#pragma unroll 4
            for (int r = 0; r < KT; ++r) {
                const TC pr = __shfl_sync(FULL, pj, r);  // lane r holds key r (g == 0)
#pragma unroll
                for (int n = 0; n < NE; ++n) acc[n] += pr * vs[r][lane + 32 * n];
            }
            m = mn;
        }
        if (!live) continue;
        const i64 row = (bi * p.hq + h) * p.l + i;
        if (p.splits == 1) {
            const TC inv = ls == (TC)0 ? (TC)0 : (TC)1 / ls;
            TS* ob = p.dst + bi * p.ost[0] + h * p.ost[1] + i * p.ost[2];
#pragma unroll
            for (int n = 0; n < NE; ++n) {
                const int d = lane + 32 * n;
                if (d < p.ev) ob[d * p.ost[3]] = from_c(acc[n] * inv);
            }
        } else {
            TC* pp = p.part + (row * p.splits + sp) * (p.ev + 2);
            if (lane == 0) { pp[0] = m; pp[1] = ls; }
#pragma unroll
            for (int n = 0; n < NE; ++n) {
                const int d = lane + 32 * n;
                if (d < p.ev) pp[2 + d] = acc[n];
            }
        }
    }
}

/* Merges the splits' partials of each query row: a warp per row. */
__device__ void at_merge_rows(const AttnP& p) {
    const i64 rows = p.b * p.hq * p.l, stride = p.ev + 2;
    const int lane = threadIdx.x & 31;
    const i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 r = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < rows; r += warps) {
        const TC* base = p.part + r * p.splits * stride;
        TC mx = c_neg_inf();
        for (int s = 0; s < p.splits; ++s) mx = fmax(mx, base[s * stride]);
        TC tot = (TC)0;
        if (mx != c_neg_inf())
            for (int s = 0; s < p.splits; ++s) {
                const TC ms = base[s * stride];
                if (ms != c_neg_inf()) tot += base[s * stride + 1] * ex(ms - mx);
            }
        const TC inv = (mx == c_neg_inf() || tot == (TC)0) ? (TC)0 : (TC)1 / tot;
        // Row r is query i of (batch, head) bh = bi * hq + h.
        const i64 i = r % p.l, bh = r / p.l;
        TS* ob = p.dst + (bh / p.hq) * p.ost[0] + (bh % p.hq) * p.ost[1] + i * p.ost[2];
        for (i64 d = lane; d < p.ev; d += 32) {
            TC o = (TC)0;
            if (mx != c_neg_inf())
                for (int s = 0; s < p.splits; ++s) {
                    const TC ms = base[s * stride];
                    if (ms != c_neg_inf()) o += base[s * stride + 2 + d] * ex(ms - mx);
                }
            ob[d * p.ost[3]] = from_c(o * inv);
        }
    }
}
