// Hopper tensor-core flash attention on FlashAttention 3's schedule (`CUDASEM_SDPA_KERNEL=fa128`),
// after attention_wg.cu, whose layout, helpers and conventions it shares (the swizzled tiles
// aw_load fills, the descriptors aw_desc makes, the fragments, the base-2 softmax with the scale
// folded into each exponent, the turns aw_turn_wait / aw_turn_pass). What differs from aw_tile:
//
// - Persistent blocks. The host launches min(tasks, SMs x blocks an SM) blocks; a task is 128
//   consecutive queries of one (batch, head). Task order: causal, the heaviest first across the
//   grid (every (batch, head)'s last query tile, then the tiles before them); else each (batch,
//   head)'s tiles together (they share its keys and values in L2). Round r of a grid of G blocks
//   gives block k task rG + k (r even) or rG + G - 1 - k (r odd): the snake evens out the sums of
//   the decreasing causal costs. With G = tasks it is one task a block.
// - Three stages of keys and values. Iteration i of a task reads key tile i and value tile i - 1
//   and, after its one block barrier, issues the copies of key tile i + 2 and value tile i + 1
//   into the slots of key tile i - 1 and value tile i - 2 (slot j % 3): every thread finished
//   reading those before the barrier. Copy group g_i holds them; the barrier of iteration i
//   follows each thread's wait for g_(i-2) (all but its newest group) and its proxy fence.
// - FlashAttention 3's intra-warpgroup overlap: a warpgroup issues S_i = Q K_i^T, rescales O by
//   tile i - 1's factor and issues O += P_(i-1) V_(i-1), then waits for S_i alone (the older
//   group) and runs tile i's softmax while the second product runs; P_i is packed once that
//   product (which reads P_(i-1) from registers) is done. With PP the two products of a tile are
//   one turn of the warpgroups' ping-pong. The last tile's values take one more product after
//   the loop.
//
// The host (`fused.rs`) launches it under aw_tile's conditions, with AW_THREADS threads and the
// dynamic shared memory `attn_fa_bytes(E, BN)` (vocab.rs); the output is written through p.ost
// (last dim contiguous, other strides even from a 4-byte aligned base).

#define AF_STAGES 3

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void af_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory"); }
/* Each thread's copies but its newest group landed, fenced for the tensor cores (async proxy),
   then the block barrier: afterwards every thread's such copies are visible to every product. */
__device__ __forceinline__ void af_landed_but_newest() {
    asm volatile("cp.async.wait_group 1;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
}

/* O rescaled by the rows' factors c0, c1, then O += P V from the value tile at `sv`
   (`aw_values`). */
template <int E, int BN>
__device__ __forceinline__ void af_values(float (&o)[E / 2], const u32 (&pa)[BN / 16][4], u32 sv, float c0, float c1) {
#pragma unroll
    for (int c = 0; c < E / 8; ++c) {
        o[4 * c] *= c0;
        o[4 * c + 1] *= c0;
        o[4 * c + 2] *= c1;
        o[4 * c + 3] *= c1;
    }
    aw_values<E, BN>(o, pa, sv);
}

/* One task: query tile qt of (batch, head) bh, into the shared tiles at sq (queries), sk and sv
   (three stages of keys and values, KB bytes each). The caller's block barrier precedes it. */
template <int E, int BN, bool PP>
__device__ __forceinline__ void af_task(const AttnP& p, u32 sq, u32 sk, u32 sv, i64 qt, i64 bh) {
    constexpr u32 KB = BN * E * 2;
    const AwPlace w = aw_place(p, qt, bh);
    const int wg = w.wg, g = w.g, t = w.t, q0 = w.q0, w0 = w.w0, r0 = w.r0, r1 = w.r1, kend = w.kend;
    const i64 h = w.h, bi = w.bi, hk = w.hk;
    const float sl2 = w.sl2;
    const int n = (kend + BN - 1) / BN;
    const TS* qb = p.q + bi * p.qst[0] + h * p.qst[1];
    const TS* kb = p.k + bi * p.kst[0] + hk * p.kst[1];
    const TS* vb = p.v + bi * p.vst[0] + hk * p.vst[1];
    const u32 sqw = sq + wg * (64 * 128);  // the warpgroup's 64 query rows in each 64-column block
    auto load_k = [&](int j) {
        if (j < n) aw_load<E, BN>(sk + (u32)(j % AF_STAGES) * KB, kb, p.kst[2], j * BN, kend);
    };
    auto load_v = [&](int j) {
        if (j < n) aw_load<E, BN>(sv + (u32)(j % AF_STAGES) * KB, vb, p.vst[2], j * BN, kend);
    };
    // Group A: the queries and key tile 0; group B: key tile 1 and value tile 0.
    aw_load<E, AW_ROWS>(sq, qb, p.qst[2], q0, (int)p.l);
    load_k(0);
    aw_commit_copies();
    load_k(1);
    load_v(0);
    aw_commit_copies();
    float o[E / 2];
#pragma unroll
    for (int i = 0; i < E / 2; ++i) o[i] = 0.0f;
    // Running maxima (base-2 scaled scores), this thread's part of the sums, and the factors
    // by which O is scaled before the next product, per row.
    float m0 = AW_NEG_INF, m1 = AW_NEG_INF, l0 = 0.0f, l1 = 0.0f, c0 = 1.0f, c1 = 1.0f;
    float s[BN / 2];
    u32 pa[BN / 16][4];
    if (PP && wg == 1) aw_turn_pass(1);  // warpgroup 0 takes the first turn
    if (n > 0) {
        // Tile 0: group A landed (B may be in flight); g_0 = key tile 2, value tile 1.
        af_landed_but_newest();
        load_k(2);
        load_v(1);
        aw_commit_copies();
        if (PP) aw_turn_wait(wg);
        aw_scores<E, BN>(s, sqw, sk);
        if (PP) aw_turn_pass(wg);
        aw_wait0();
        aw_hold(s);
        aw_softmax_step<BN>(p, s, 0, w0, r0, r1, t, sl2, m0, m1, l0, l1, c0, c1);
        aw_pack_p<BN>(s, pa);
    }
#pragma unroll 1
    for (int i = 1; i < n; ++i) {
        // Key tile i and value tile i - 1 landed (group B or g_(i-2)); every thread is done
        // with key tile i - 1 and value tile i - 2, whose slots g_i fills.
        af_landed_but_newest();
        load_k(i + 2);
        load_v(i + 1);
        aw_commit_copies();
        if (PP) aw_turn_wait(wg);
        aw_scores<E, BN>(s, sqw, sk + (u32)(i % AF_STAGES) * KB);
        af_values<E, BN>(o, pa, sv + (u32)((i - 1) % AF_STAGES) * KB, c0, c1);
        if (PP) aw_turn_pass(wg);
        af_wait1();  // the scores (the older group); the values' product still runs
        aw_hold(s);
        aw_softmax_step<BN>(p, s, i * BN, w0, r0, r1, t, sl2, m0, m1, l0, l1, c0, c1);
        // The exponentials computed before the wait, packed after it. ptxas moves the wait to
        // the top of its basic block (above the softmax, which then no longer overlaps the
        // product), so a branch it cannot remove ends the block here: never taken (a task has
        // a batch); ptxas waits for the products on its path itself.
        aw_hold(s);
        if (p.b < 1) __trap();
        aw_wait0();  // the product that read P of tile i - 1 from registers
        aw_hold(s);
        aw_hold(o);
        aw_pack_p<BN>(s, pa);
    }
    if (n > 0) {
        // The last value tile (group B or g_(n-2)) landed.
        af_landed_but_newest();
        if (PP) aw_turn_wait(wg);
        af_values<E, BN>(o, pa, sv + (u32)((n - 1) % AF_STAGES) * KB, c0, c1);
        if (PP) aw_turn_pass(wg);
        aw_wait0();
        aw_hold(o);
    }
    if (PP && wg == 0) aw_turn_wait(0);  // warpgroup 1's last pass
    asm volatile("cp.async.wait_group 0;" ::: "memory");  // (only empty groups are left but the queries' when n = 0)
    aw_store_rows<E>(p, o, l0, l1, bi, h, r0, r1, t);
}
#endif

template <int E, int BN, bool PP> __device__ void af_run(const AttnP& p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr u32 QB = AW_ROWS * E * 2;  // bytes of the query tile
    constexpr u32 KB = BN * E * 2;       // bytes of one key (or value) tile
    extern __shared__ __align__(1024) u8 af_sm[];
    const u32 base = (aw_smem(af_sm) + 1023u) & ~1023u;
    const u32 sq = base, sk = base + QB, sv = sk + AF_STAGES * KB;
    const i64 qtiles = (p.l + AW_ROWS - 1) / AW_ROWS, heads = p.b * p.hq, tasks = qtiles * heads;
    const i64 grid = gridDim.x, k = blockIdx.x;
#pragma unroll 1
    for (i64 r = 0;; ++r) {
        const i64 task = r * grid + ((r & 1) ? grid - 1 - k : k);
        if (task >= tasks) break;
        const i64 qt = p.causal ? qtiles - 1 - task / heads : task % qtiles;
        const i64 bh = p.causal ? task % heads : task / qtiles;
        if (r > 0) __syncthreads();  // every thread is done with the previous task's tiles
        af_task<E, BN, PP>(p, sq, sk, sv, qt, bh);
    }
#else
    __trap();  // the host launches this kernel only on compute capability 9.0 (sm_90a)
#endif
}
