// Hopper tensor-core flash attention (FlashAttention's forward pass on warpgroup MMA, `wgmma`,
// sm_90a) for f16 / bf16 with head dims E = Ev of 64 or 128, after fused_head.cu,
// attention_params.cu and the wgmma wrappers kernels/fused_codegen.rs generates, overloaded on the
// accumulator count N / 2 (aw_ss: D (+)= A B of m64nNk16 with A and B in shared memory, both
// K-major; aw_rs: D += A B with A in registers and B in shared memory, MN-major; AW_CVT2 the
// packed conversion of two floats).
//
// A block of AW_THREADS (256) threads, two warpgroups, takes AW_ROWS (128) consecutive queries of
// one (batch, head), a warpgroup 64 of them, a warp 16. The block's queries and tiles of BN keys
// and values sit in shared memory in the 128-byte swizzled layout wgmma reads: a matrix of R rows
// and E columns is E / 64 blocks of R rows of 128 bytes, and 16-byte chunk c of row r is stored at
// chunk c ^ (r % 8) of its row (rows 1024-byte aligned in groups of 8). Keys and values are
// double-buffered: cp.async loads tile i + 1 while tile i is used (one block barrier a tile). Per
// tile, S = Q K^T runs as E / 16 m64nBNk16 products from shared memory into float accumulators;
// the online softmax runs on them in registers in base 2 (the scale folded with log2 e into each
// exponent's fma); P, packed to 16 bits in registers, is the A operand of O += P V (BN / 16
// m64nEk16 products, V read transposed from its row-major tile). Scores never reach memory. Causal
// blocks stop at their last query's key. Mask tensors take the mma.sync kernel (attention_mma.cu)
// instead, which keeps this kernel's registers to its products and softmax.
//
// The accumulator fragment of m64nNk16 (PTX ISA 9.7.15.5.1) for warp w of the warpgroup and lane
// (g = lane / 4, t = lane % 4): d[4c + e] is row 16w + g + 8 (e >> 1), column 8c + 2t + (e & 1).
// The A fragment in registers for k-step k: a[0] = A[16w + g][2t, 2t+1], a[1] = A[16w + g + 8][2t,
// 2t+1], a[2] and a[3] the same at columns 2t + 8, 2t + 9 (16-bit elements, the lower-indexed in
// the low half), so P's accumulators are its A fragment once packed.
//
// The host (`fused.rs`) launches this kernel only on compute capability 9.0, with AW_THREADS
// threads, the dynamic shared memory `attn_wg_bytes(E, BN)` (vocab.rs), a scale whose product with
// log2 e is a positive normal float, no mask tensor, L and S below 2^30, and q / k / v whose last
// dim is contiguous, whose row strides are below 2^24 and whose other strides are multiples of 8
// elements from 16-byte aligned bases, and an output whose last dim is contiguous and whose other
// strides are even from a 4-byte aligned base (its 4-byte stores). The query tiles run in the
// order p.order chooses (attn_task): by default the heaviest (the last, causal) first.

#define AW_ROWS 128
#define AW_THREADS 256
#define AW_LOG2E 1.4426950408889634
#define AW_NEG_INF __int_as_float(0xff800000)

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ u32 aw_smem(const void* p) { return (u32)__cvta_generic_to_shared(p); }

/* A wgmma shared-memory matrix descriptor of the 128-byte swizzled layout at shared address
   `addr`: `lbo` and `sbo` the leading and stride byte offsets (K-major: sbo the distance of
   groups of 8 rows; MN-major: lbo that of blocks of 64 columns, sbo that of groups of 8 k-rows). */
__device__ __forceinline__ u64 aw_desc(u32 addr, u32 lbo, u32 sbo) {
    return (u64)((addr & 0x3FFFFu) >> 4) | ((u64)(lbo >> 4) << 16) | ((u64)(sbo >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void aw_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void aw_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void aw_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
/* Keeps the compiler from moving reads or writes of `d` across the wgmma fences and waits. */
template <int N> __device__ __forceinline__ void aw_hold(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

__device__ __forceinline__ float aw_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
/* Two floats as one register of two 16-bit elements, `lo` in the low half. */
__device__ __forceinline__ u32 aw_pack(float lo, float hi) {
    u32 r;
    asm("cvt.rn." AW_CVT2 ".f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* Rows r0 .. r0 + R - 1 of a [*, E] matrix (row stride `rs` elements, below 2^24; last dim
   contiguous) into the swizzled layout at shared address `dst` with cp.async, 16 bytes a copy;
   rows at or past `rn` are zero-filled (nothing read). */
template <int E, int R> __device__ __forceinline__ void aw_load(u32 dst, const TS* base, i64 rs, int r0, int rn) {
    constexpr int CH = E / 8;
    const TS* tile = base + (i64)r0 * rs;
    const int left = rn - r0, rs32 = (int)rs;
#pragma unroll
    for (int i = 0; i < R * CH / AW_THREADS; ++i) {
        const int c = threadIdx.x + i * AW_THREADS;
        const int r = c / CH, ch = c % CH;
        const bool in = r < left;
        const TS* src = in ? tile + (r * rs32 + ch * 8) : base;
        const u32 d = dst + (u32)((ch >> 3) * (R * 128) + r * 128 + (((ch & 7) ^ (r & 7)) << 4));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(in ? 16 : 0) : "memory");
    }
}
__device__ __forceinline__ void aw_commit_copies() { asm volatile("cp.async.commit_group;" ::: "memory"); }

/* The online softmax's step without touching O: the scores `s` of the tile from key j0 masked, the
   running maxima m and sums l updated, the exponentials left in `s` and the factors by which O
   must be scaled before this tile's product in c0, c1. */
template <int BN>
__device__ __forceinline__ void aw_softmax_step(const AttnP& p, float (&s)[BN / 2], int j0, int w0, int r0, int r1, int t,
                                           float sl2, float& m0, float& m1, float& l0, float& l1, float& c0,
                                           float& c1) {
    constexpr int NS = BN / 8;  // 8-key column tiles of S
    // s[4c + e] is row (e < 2 ? r0 : r1), key j0 + 8c + 2t + (e & 1); row r keeps the keys
    // before min(S, r + 1 if causal).
    if (j0 + BN > p.s || (p.causal && j0 + BN - 1 > w0)) {
        const int j = j0 + 2 * t, sn = (int)p.s;
        const int n0 = max(0, min(BN, min(sn, p.causal ? r0 + 1 : sn) - j));
        const int n1 = max(0, min(BN, min(sn, p.causal ? r1 + 1 : sn) - j));
#pragma unroll
        for (int c = 0; c < NS; ++c) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int n = e < 2 ? n0 : n1;
                if (8 * c + (e & 1) >= n) s[4 * c + e] = AW_NEG_INF;
            }
        }
    }
    float x0 = AW_NEG_INF, x1 = AW_NEG_INF;
#pragma unroll
    for (int c = 0; c < NS; ++c) {
        x0 = fmaxf(x0, fmaxf(s[4 * c], s[4 * c + 1]));
        x1 = fmaxf(x1, fmaxf(s[4 * c + 2], s[4 * c + 3]));
    }
    x0 = fmaxf(x0, __shfl_xor_sync(FULL, x0, 1));
    x0 = fmaxf(x0, __shfl_xor_sync(FULL, x0, 2));
    x1 = fmaxf(x1, __shfl_xor_sync(FULL, x1, 1));
    x1 = fmaxf(x1, __shfl_xor_sync(FULL, x1, 2));
    x0 = fmaxf(m0, x0 * sl2);
    x1 = fmaxf(m1, x1 * sl2);
    // A row with nothing kept yet subtracts 0 (its exponentials are all exp2(-inf) = 0).
    const float b0 = x0 == AW_NEG_INF ? 0.0f : x0, b1 = x1 == AW_NEG_INF ? 0.0f : x1;
    c0 = aw_exp2(m0 - b0);
    c1 = aw_exp2(m1 - b1);
    m0 = x0;
    m1 = x1;
    float ps0 = 0.0f, ps1 = 0.0f;
#pragma unroll
    for (int c = 0; c < NS; ++c) {
        s[4 * c] = aw_exp2(fmaf(s[4 * c], sl2, -b0));
        s[4 * c + 1] = aw_exp2(fmaf(s[4 * c + 1], sl2, -b0));
        s[4 * c + 2] = aw_exp2(fmaf(s[4 * c + 2], sl2, -b1));
        s[4 * c + 3] = aw_exp2(fmaf(s[4 * c + 3], sl2, -b1));
        ps0 += s[4 * c] + s[4 * c + 1];
        ps1 += s[4 * c + 2] + s[4 * c + 3];
    }
    l0 = l0 * c0 + ps0;
    l1 = l1 * c1 + ps1;
}

/* P (the exponentials in `s`) packed to 16 bits as A fragments: k-step kk (keys 16kk ..
   16kk + 15) is column tiles 2kk, 2kk + 1. */
template <int BN> __device__ __forceinline__ void aw_pack_p(const float (&s)[BN / 2], u32 (&pa)[BN / 16][4]) {
#pragma unroll
    for (int c = 0; c < BN / 8; ++c) {
        pa[c >> 1][(c & 1) * 2] = aw_pack(s[4 * c], s[4 * c + 1]);
        pa[c >> 1][(c & 1) * 2 + 1] = aw_pack(s[4 * c + 2], s[4 * c + 3]);
    }
}

/* The scores `s` of one tile (keys from j0) masked, the online softmax's step in base 2
   (running maxima m of the scaled scores, sums l; O rescaled) and P packed into `pa`. The
   scores stay unscaled: the scale times log2 e, `sl2`, is a positive normal float (`fused.rs`),
   so the maxima of the raw scores scale to the maxima of the scaled ones (masked -inf stays
   -inf), and each exponent is one fma. */
template <int E, int BN>
__device__ __forceinline__ void aw_softmax(const AttnP& p, float (&s)[BN / 2], u32 (&pa)[BN / 16][4], int j0, int w0,
                                           int r0, int r1, int t, float sl2, float (&o)[E / 2], float& m0,
                                           float& m1, float& l0, float& l1) {
    float a0, a1;
    aw_softmax_step<BN>(p, s, j0, w0, r0, r1, t, sl2, m0, m1, l0, l1, a0, a1);
    aw_pack_p<BN>(s, pa);
    // O rescaled unless no row of the warp found a new maximum (most tiles past the first few).
    if (__any_sync(FULL, a0 != 1.0f || a1 != 1.0f)) {
#pragma unroll
        for (int c = 0; c < E / 8; ++c) {
            o[4 * c] *= a0;
            o[4 * c + 1] *= a0;
            o[4 * c + 2] *= a1;
            o[4 * c + 3] *= a1;
        }
    }
}

/* The end of a warpgroup's query rows r0, r1 of (batch bi, head h): the sums l over each row's 4
   lanes, then O / l (zeros where nothing was kept) stored to the output, rows past L skipped. */
template <int E>
__device__ __forceinline__ void aw_store_rows(const AttnP& p, const float (&o)[E / 2], float l0, float l1, i64 bi, i64 h,
                                              int r0, int r1, int t) {
    float i0, i1;
    attn_row_inverses(l0, l1, i0, i1);
    TS* ob = p.dst + bi * p.ost[0] + h * p.ost[1];  // ost[3] == 1 (the host's check)
#pragma unroll
    for (int c = 0; c < E / 8; ++c) {
        if (r0 < p.l)
            *reinterpret_cast<u32*>(ob + r0 * p.ost[2] + 8 * c + 2 * t) = aw_pack(o[4 * c] * i0, o[4 * c + 1] * i0);
        if (r1 < p.l)
            *reinterpret_cast<u32*>(ob + r1 * p.ost[2] + 8 * c + 2 * t) = aw_pack(o[4 * c + 2] * i1, o[4 * c + 3] * i1);
    }
}

/* S = Q K^T for a warpgroup's 64 queries at shared address `sq` and BN keys at `sk`, issued
   and committed as one group (E / 16 k-steps: 32 bytes further along the swizzled rows per
   step, the next 64-column block every four). */
template <int E, int BN> __device__ __forceinline__ void aw_scores(float (&s)[BN / 2], u32 sq, u32 sk) {
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) s[i] = 0.0f;
    aw_hold(s);
    aw_fence();
#pragma unroll
    for (int kk = 0; kk < E / 16; ++kk) {
        const u32 qa = sq + (kk >> 2) * (AW_ROWS * 128) + (kk & 3) * 32;
        const u32 ka = sk + (kk >> 2) * (BN * 128) + (kk & 3) * 32;
        aw_ss(s, aw_desc(qa, 16, 1024), aw_desc(ka, 16, 1024), kk > 0 ? 1 : 0);
    }
    aw_commit();
}
/* O += P V from the value tile at `sv` (BN / 16 k-steps of 16 keys, 2048 bytes of the tile
   each; V MN-major: its 64-column blocks BN * 128 bytes apart, its groups of 8 keys 1024),
   issued and committed as one group. */
template <int E, int BN>
__device__ __forceinline__ void aw_values(float (&o)[E / 2], const u32 (&pa)[BN / 16][4], u32 sv) {
    aw_hold(o);
    aw_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) aw_rs(o, pa[kk], aw_desc(sv + kk * 2048, BN * 128, 1024));
    aw_commit();
}

/* Ping-pong between the block's two warpgroups (named barriers 1 and 2 of 256 threads): a
   warpgroup waits for its turn before issuing its products and passes the turn on after, so
   one's products run on the tensor cores while the other computes its softmax. Warpgroup 1
   passes the first turn before the loop and warpgroup 0 takes the last one after it, so every
   arrival is matched. */
__device__ __forceinline__ void aw_turn_wait(int wg) {
    if (wg == 0) asm volatile("bar.sync 1, 256;" ::: "memory");
    else asm volatile("bar.sync 2, 256;" ::: "memory");
}
__device__ __forceinline__ void aw_turn_pass(int wg) {
    if (wg == 0) asm volatile("bar.arrive 2, 256;" ::: "memory");
    else asm volatile("bar.arrive 1, 256;" ::: "memory");
}

/* One tile of BN keys for this thread's warpgroup (taking turns when PP): S = Q K^T from the
   warpgroup's queries at shared address `sq` and the keys at `sk` (from key j0), then
   `prefetch()` (issuing the next tile's copies), S masked and scaled to base 2, the online
   softmax (running maxima m, sums l) and O += P V from the values at `sv`. `w0`: the
   warpgroup's first query, r0 and r1 this thread's. Indices within a (batch, head) are ints:
   L and S are below 2^30 (`fused.rs`). */
template <int E, int BN, bool PP, class F>
__device__ __forceinline__ void aw_step(const AttnP& p, int wg, u32 sq, u32 sk, u32 sv, int j0, int w0,
                                        int r0, int r1, int t, float sl2, float (&o)[E / 2], float& m0, float& m1,
                                        float& l0, float& l1, F prefetch) {
    float s[BN / 2];
    u32 pa[BN / 16][4];  // P as A fragments: k-step kk (keys 16kk .. 16kk + 15) is column tiles 2kk, 2kk + 1
    if (PP) aw_turn_wait(wg);
    aw_scores<E, BN>(s, sq, sk);
    if (PP) aw_turn_pass(wg);
    prefetch();  // the next tile's copies, while the products run
    {
        aw_wait0();
        aw_hold(s);
        aw_softmax<E, BN>(p, s, pa, j0, w0, r0, r1, t, sl2, o, m0, m1, l0, l1);
    }
    if (PP) aw_turn_wait(wg);
    aw_values<E, BN>(o, pa, sv);
    if (PP) aw_turn_pass(wg);
    {
        aw_wait0();
        aw_hold(o);
    }
}

/* A thread's place in a block's task, query tile qt of (batch, head) bh = bi * hq + h: its
   warpgroup wg and its lane's g and t, the tile's first query q0, its warpgroup's w0, its two
   query rows r0 and r1, the key head hk, the keys the block needs (kend: all S, or causal up to
   its last query) and the scale times log2 e (sl2). Indices within a (batch, head) are ints. */
struct AwPlace {
    i64 h, bi, hk;
    int wg, g, t, q0, w0, r0, r1, kend;
    float sl2;
};
__device__ __forceinline__ AwPlace aw_place(const AttnP& p, i64 qt, i64 bh) {
    AwPlace a;
    const int tid = threadIdx.x, wi = (tid >> 5) & 3, lane = tid & 31;
    a.wg = tid >> 7;
    a.g = lane >> 2;
    a.t = lane & 3;
    a.sl2 = (float)(p.scale * AW_LOG2E);
    // In 32 bits: heads fit (`attn_task`), and a 64-bit division is a call.
    const u32 hq = (u32)p.hq, b32 = (u32)bh, h32 = b32 % hq;
    a.h = h32;
    a.bi = b32 / hq;
    a.hk = h32 / (hq / (u32)p.hkv);
    a.q0 = (int)qt * AW_ROWS;
    a.w0 = a.q0 + 64 * a.wg;
    a.r0 = a.w0 + 16 * wi + a.g;
    a.r1 = a.r0 + 8;
    a.kend = (int)(p.causal ? min(p.s, (i64)a.q0 + AW_ROWS) : p.s);
    return a;
}

/* The place of this block's task: the query tile and (batch, head) attn_task gives its index. */
__device__ __forceinline__ AwPlace aw_block_place(const AttnP& p) {
    i64 qt, bh;
    attn_task(p, blockIdx.x, (p.l + AW_ROWS - 1) / AW_ROWS, qt, bh);
    return aw_place(p, qt, bh);
}

#endif

template <int E, int BN, bool PP> __device__ void aw_tile(const AttnP& p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr u32 QB = AW_ROWS * E * 2;  // bytes of the query tile
    constexpr u32 KB = BN * E * 2;       // bytes of one key (or value) tile
    extern __shared__ __align__(1024) u8 aw_sm[];
    const u32 base = (aw_smem(aw_sm) + 1023u) & ~1023u;
    const u32 sq = base, sk = base + QB, sv = sk + 2 * KB;
    const AwPlace w = aw_block_place(p);
    const int wg = w.wg, g = w.g, t = w.t, q0 = w.q0, w0 = w.w0, r0 = w.r0, r1 = w.r1, kend = w.kend;
    const i64 h = w.h, bi = w.bi, hk = w.hk;
    const float sl2 = w.sl2;
    const int ntiles = (int)((kend + BN - 1) / BN);
    const TS* qb = p.q + bi * p.qst[0] + h * p.qst[1];
    const TS* kb = p.k + bi * p.kst[0] + hk * p.kst[1];
    const TS* vb = p.v + bi * p.vst[0] + hk * p.vst[1];
    aw_load<E, AW_ROWS>(sq, qb, p.qst[2], q0, (int)p.l);
    if (ntiles > 0) {
        aw_load<E, BN>(sk, kb, p.kst[2], 0, kend);
        aw_load<E, BN>(sv, vb, p.vst[2], 0, kend);
    }
    aw_commit_copies();
    float o[E / 2];
#pragma unroll
    for (int i = 0; i < E / 2; ++i) o[i] = 0.0f;
    // Running maxima (base-2 scaled scores) and this thread's part of the sums, per row.
    float m0 = AW_NEG_INF, m1 = AW_NEG_INF, l0 = 0.0f, l1 = 0.0f;
    if (PP && wg == 1) aw_turn_pass(1);  // warpgroup 0 takes the first turn
#pragma unroll 1
    for (int it = 0; it < ntiles; ++it) {
        const int st = it & 1;
        const int j0 = it * BN;
        // This tile has landed (its copies were the only ones in flight); they are generic-proxy
        // writes that the tensor cores (async proxy) read next, so each thread fences them before
        // the barrier. The next tile's copies are issued after it, once this warpgroup's scores
        // are under way (the fence may wait for the thread's memory operations in flight), into
        // the stage the previous iteration read: every thread finished it before this barrier.
        asm volatile("cp.async.wait_group 0;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        auto prefetch = [&]() {
            if (it + 1 < ntiles) {
                aw_load<E, BN>(sk + (st ^ 1) * KB, kb, p.kst[2], j0 + BN, kend);
                aw_load<E, BN>(sv + (st ^ 1) * KB, vb, p.vst[2], j0 + BN, kend);
                aw_commit_copies();
            }
        };
        // A causal warpgroup whose every query comes before this tile's keys (the first of the
        // block's last tile of 64) runs it anyway (every score masked: P = 0 and O unchanged):
        // ptxas serializes the products of a warpgroup whose waits sit in a branch it cannot
        // prove uniform.
        aw_step<E, BN, PP>(p, wg, sq + wg * (64 * 128), sk + st * KB, sv + st * KB, j0, w0, r0, r1, t, sl2, o, m0,
                           m1, l0, l1, prefetch);
    }
    if (PP && wg == 0) aw_turn_wait(0);  // warpgroup 1's last pass
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    aw_store_rows<E>(p, o, l0, l1, bi, h, r0, r1, t);
#else
    __trap();  // the host launches this kernel only on compute capability 9.0 (sm_90a)
#endif
}
