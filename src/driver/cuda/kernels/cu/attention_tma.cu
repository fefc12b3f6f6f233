// Hopper's tensor-core flash attention with its tiles copied by the Tensor Memory Accelerator
// (the default on compute capability 9.0, `CUDASEM_SDPA_KERNEL=tma`; or `tmasync`), after attention_wg.cu, whose layout, products,
// softmax and turns it shares (aw_step runs each tile). What differs from aw_tile:
//
// - The copies. One thread issues each tile as cp.async.bulk.tensor loads (E / 64 boxes of 64
//   columns by the tile's rows, through the tensor maps the host encodes with the 128-byte swizzle
//   that aw_load writes by hand, rows past the tensor's end filled with zeros) whose bytes complete
//   an mbarrier's transaction count: no thread copies, no cp.async group waits, no proxy fence.
// - The stages. Two slots of keys and values, each with a `full` mbarrier (the copies of the tile
//   it holds landed: phase j / 2 of slot j % 2 for tile j) and, without SYNC, an `empty` one: every
//   warp arrives once it waited for its products that read the slot's tile, and the issuing thread
//   waits for that phase before copying tile j + 2 over it; the warpgroups never meet at a block
//   barrier. With SYNC a block barrier per tile frees the slot instead (aw_tile's schedule).
//
// The issuing thread is thread 0 (warpgroup 0): it copies tile i + 1 after issuing tile i's scores,
// when warpgroup 1 (taking turns) has issued its values product of tile i - 1, so its wait for
// that slot is the product's completion. The host (`fused.rs`, `tma.rs`) launches it under
// aw_tile's conditions where the tensor maps encode (16-byte multiples of the strides), with
// AW_THREADS threads and the dynamic shared memory `attn_wg_bytes(E, BN)`.
//
// at_ws (`tmaws`) runs the same tiles on persistent blocks with a producer warp: a warp beside
// the two warpgroups (AW_THREADS + 32 threads) issues every copy, the block's tasks one after
// another (attn_task's order dealt out in a snake, at_ws_task), into two query slots and two
// key / value slots, each with full and empty mbarriers; the warpgroups never issue or wait for
// a slot to empty, and the next task's queries and first tiles land while they finish a task
// (its last values product, its output rows). Dynamic shared memory `attn_wg_bytes(E, BN)` plus a
// query tile.
//
// at_ws with OV (`tmaov`, at_ov_task) adds FlashAttention 3's intra-warpgroup overlap on those
// blocks: a warpgroup issues a tile's scores and the previous tile's values product together and
// runs the tile's softmax while the values' product runs (af_task's schedule, attention_fa.cu).
// Keys then free their slot a tile before the values do, so each slot's keys and values have full
// and empty mbarriers of their own. The scores, P and O of a tile in flight at once take more
// registers than a block of nine warps leaves a thread (168: three warps on one of an SM's four
// register files), so the producer there is a warpgroup (AW_THREADS + 128 threads) that hands
// most of its registers to the consumers (setmaxnreg).

/* Registers a thread of at_ws with OV (384 threads: launched with 168 each) moves to: the producer
   warpgroup gives (168 - 24) x 128 registers, the two consumer warpgroups take (240 - 168) x 256. */
#define AT_PRODUCER_REGS 24
#define AT_CONSUMER_REGS 240

/* A CUtensorMap as the kernel sees it: 128 opaque bytes, 64-byte aligned. */
struct __align__(64) TmaMap { u64 w[16]; };
/* The kernel's parameter: AttnP, then the tensor maps of q ([E, L, Hq, B]), k and v ([E, S, Hkv,
   B]), innermost first (`AttnTma` of kernels/tma.rs). */
struct AttnTma { AttnP p; TmaMap q, k, v; };

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void at_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
/* The issuing thread's arrival, announcing `bytes` of copies that complete the phase. */
__device__ __forceinline__ void at_expect(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void at_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
/* Waits until the phase of parity `parity` of the mbarrier at `bar` completed. */
__device__ __forceinline__ void at_wait(u32 bar, u32 parity) {
    u32 done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}
/* R rows of a (head, batch) from row r0 into the swizzled layout at `dst` (E / 64 boxes of R
   rows by 128 bytes), completing the transaction count of the mbarrier at `bar`. */
template <int E, int R>
__device__ __forceinline__ void at_rows(u32 dst, const TmaMap* m, int r0, int head, int batch, u32 bar) {
#pragma unroll
    for (int c = 0; c < E / 64; ++c) {
        asm volatile(
            "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
            "%5}], [%6];" ::"r"(dst + (u32)(c * R * 128)),
            "l"((u64)m), "r"(64 * c), "r"(r0), "r"(head), "r"(batch), "r"(bar)
            : "memory");
    }
}
#endif

template <int E, int BN, bool PP, bool SYNC> __device__ void at_tile(const AttnTma& a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    const AttnP& p = a.p;
    constexpr u32 QB = AW_ROWS * E * 2;  // bytes of the query tile
    constexpr u32 KB = BN * E * 2;       // bytes of one key (or value) tile
    extern __shared__ __align__(1024) u8 at_sm[];
    __shared__ __align__(8) u64 at_bars[5];  // the queries', full[2], empty[2]
    const u32 base = (aw_smem(at_sm) + 1023u) & ~1023u;
    const u32 sq = base, sk = base + QB, sv = sk + 2 * KB;
    const u32 bq = aw_smem(at_bars), full = bq + 8, empty = bq + 24;  // slot s: full + 8s, empty + 8s
    const int tid = threadIdx.x, lane = tid & 31;
    const AwPlace w = aw_block_place(p);
    const int wg = w.wg, g = w.g, t = w.t, q0 = w.q0, w0 = w.w0, r0 = w.r0, r1 = w.r1, kend = w.kend;
    const i64 h = w.h, bi = w.bi, hk = w.hk;
    const float sl2 = w.sl2;
    const int ntiles = (kend + BN - 1) / BN;
    // Keys and values of tile j into slot j % 2 (the issuing thread).
    auto load = [&](int j) {
        const u32 s = (u32)(j & 1);
        at_expect(full + 8 * s, 2 * KB);
        at_rows<E, BN>(sk + s * KB, &a.k, j * BN, (int)hk, (int)bi, full + 8 * s);
        at_rows<E, BN>(sv + s * KB, &a.v, j * BN, (int)hk, (int)bi, full + 8 * s);
    };
    if (tid == 0) {
        at_init(bq, 1);
        at_init(full, 1);
        at_init(full + 8, 1);
        at_init(empty, AW_THREADS / 32);
        at_init(empty + 8, AW_THREADS / 32);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();  // the barriers initialized before any thread waits on them
    if (tid == 0) {
        at_expect(bq, QB);
        at_rows<E, AW_ROWS>(sq, &a.q, q0, (int)h, (int)bi, bq);
        if (ntiles > 0) load(0);
    }
    float o[E / 2];
#pragma unroll
    for (int i = 0; i < E / 2; ++i) o[i] = 0.0f;
    float m0 = AW_NEG_INF, m1 = AW_NEG_INF, l0 = 0.0f, l1 = 0.0f;
    if (PP && wg == 1) aw_turn_pass(1);  // warpgroup 0 takes the first turn
    at_wait(bq, 0);
#pragma unroll 1
    for (int it = 0; it < ntiles; ++it) {
        const int st = it & 1;
        // With SYNC every thread is done with tile it - 1, whose slot the next copies fill.
        if (SYNC) __syncthreads();
        at_wait(full + 8 * st, (u32)(it >> 1) & 1u);
        auto prefetch = [&]() {
            if (tid == 0 && it + 1 < ntiles) {
                // Without SYNC: every warp's products of tile it - 1 (this slot's last) completed.
                if (!SYNC && it >= 1) at_wait(empty + 8 * (st ^ 1), (u32)((it - 1) >> 1) & 1u);
                load(it + 1);
            }
        };
        // As in aw_tile, a causal warpgroup whose queries all precede the tile runs it anyway.
        aw_step<E, BN, PP>(p, wg, sq + wg * (64 * 128), sk + st * KB, sv + st * KB, it * BN, w0, r0, r1, t, sl2, o,
                           m0, m1, l0, l1, prefetch);
        if (!SYNC) {
            __syncwarp();
            if (lane == 0) at_arrive(empty + 8 * st);  // this warp's products of the slot completed
        }
    }
    if (PP && wg == 0) aw_turn_wait(0);  // warpgroup 1's last pass
    aw_store_rows<E>(p, o, l0, l1, bi, h, r0, r1, t);
#else
    __trap();  // the host launches this kernel only on compute capability 9.0 (sm_90a)
#endif
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* The block's k-th task: round k of gridDim.x tasks, taken in a snake (block b the b-th of an even
   round, the b-th from the end of an odd one), so the blocks' sums of attn_task's heaviest-first
   tasks even out (a causal B1 H32 T4096 on 132 SMs: the busiest block 128 tiles, the mean; 144
   with every round in order). Past the last task for every block once one round passes it. */
__device__ __forceinline__ i64 at_ws_task(u32 k) {
    const u32 g = gridDim.x, b = blockIdx.x;
    return (i64)k * g + ((k & 1u) ? g - 1 - b : b);
}

/* The producer warp's loop (its first thread): for each task of the block, the task's queries into
   query slot k % 2 once the task two before it finished reading it, then its key / value tiles,
   tile n of the block (counted across tasks) into slot n % 2 once tile n - 2's products completed.
   With SPLIT the keys and the values of a slot have full and empty mbarriers of their own (`vfull`,
   `vempty`: at_ov's keys are free once their scores completed, a tile before its values). */
template <int E, int BN, bool SPLIT>
__device__ __forceinline__ void at_produce(const AttnTma& a, u32 sq, u32 sk, u32 sv, u32 qfull, u32 qempty, u32 kfull,
                                           u32 kempty, u32 vfull, u32 vempty) {
    const AttnP& p = a.p;
    constexpr u32 QB = AW_ROWS * E * 2, KB = BN * E * 2;
    const i64 qtiles = (p.l + AW_ROWS - 1) / AW_ROWS, tasks = qtiles * p.b * p.hq;
    u32 n = 0;
    for (u32 k = 0;; ++k) {
        const i64 task = at_ws_task(k);
        if (task >= tasks) break;
        i64 qt, bh;
        attn_task(p, task, qtiles, qt, bh);
        const AwPlace w = aw_place(p, qt, bh);  // (its thread's rows unused)
        const int ntiles = (w.kend + BN - 1) / BN;
        const u32 qs = k & 1u;
        if (k >= 2) at_wait(qempty + 8 * qs, ((k - 2) >> 1) & 1u);
        at_expect(qfull + 8 * qs, QB);
        at_rows<E, AW_ROWS>(sq + qs * QB, &a.q, w.q0, (int)w.h, (int)w.bi, qfull + 8 * qs);
        for (int j = 0; j < ntiles; ++j, ++n) {
            const u32 s = n & 1u, ph = ((n - 2) >> 1) & 1u;
            if (n >= 2) at_wait(kempty + 8 * s, ph);
            at_expect(kfull + 8 * s, SPLIT ? KB : 2 * KB);
            at_rows<E, BN>(sk + s * KB, &a.k, j * BN, (int)w.hk, (int)w.bi, kfull + 8 * s);
            if (SPLIT) {
                if (n >= 2) at_wait(vempty + 8 * s, ph);
                at_expect(vfull + 8 * s, KB);
            }
            at_rows<E, BN>(sv + s * KB, &a.v, j * BN, (int)w.hk, (int)w.bi, (SPLIT ? vfull : kfull) + 8 * s);
        }
    }
}

/* This warp's arrival on the mbarrier at `bar` (its lane 0, once the warp's lanes got here). */
__device__ __forceinline__ void at_warp_arrive(u32 bar) {
    __syncwarp();
    if ((threadIdx.x & 31) == 0) at_arrive(bar);
}

/* One task of at_ov for this thread's warpgroup, its queries at `sqw`: key tile i of the task is
   the block's tile n + i (slot (n + i) % 2), and n moves past the task's tiles. FlashAttention 3's
   intra-warpgroup overlap, as af_task runs it: step i issues S_i = Q K_i^T and (O rescaled)
   O += P_(i-1) V_(i-1), frees key slot i once S_i completed, runs tile i's softmax while the
   values' product runs, then frees value slot i - 1 and packs P_i; the last tile's values take
   one more product. Returns with O, the sums l (per row, this thread's part) for the store. */
template <int E, int BN, bool PP>
__device__ __forceinline__ void at_ov_task(const AttnP& p, const AwPlace& w, u32 sqw, u32 sk, u32 sv, u32 kfull,
                                           u32 kempty, u32 vfull, u32 vempty, u32& n, float (&o)[E / 2], float& l0,
                                           float& l1) {
    constexpr u32 KB = BN * E * 2;
    const int ntiles = (w.kend + BN - 1) / BN;
    float m0 = AW_NEG_INF, m1 = AW_NEG_INF, c0 = 1.0f, c1 = 1.0f;
    float s[BN / 2];
    u32 pa[BN / 16][4];
    // As in aw_tile, a causal warpgroup whose queries all precede a tile runs it anyway.
    if (ntiles > 0) {
        const u32 ks = n & 1u;
        at_wait(kfull + 8 * ks, (n >> 1) & 1u);
        if (PP) aw_turn_wait(w.wg);
        aw_scores<E, BN>(s, sqw, sk + ks * KB);
        if (PP) aw_turn_pass(w.wg);
        aw_wait0();
        aw_hold(s);
        at_warp_arrive(kempty + 8 * ks);
        aw_softmax_step<BN>(p, s, 0, w.w0, w.r0, w.r1, w.t, w.sl2, m0, m1, l0, l1, c0, c1);
        aw_pack_p<BN>(s, pa);
    }
#pragma unroll 1
    for (int i = 1; i < ntiles; ++i) {
        const u32 nk = n + (u32)i, nv = nk - 1u, ks = nk & 1u, vs = nv & 1u;
        at_wait(kfull + 8 * ks, (nk >> 1) & 1u);
        at_wait(vfull + 8 * vs, (nv >> 1) & 1u);
        if (PP) aw_turn_wait(w.wg);
        aw_scores<E, BN>(s, sqw, sk + ks * KB);
        af_values<E, BN>(o, pa, sv + vs * KB, c0, c1);
        if (PP) aw_turn_pass(w.wg);
        af_wait1();  // the scores (the older group); the values' product still runs
        aw_hold(s);
        at_warp_arrive(kempty + 8 * ks);
        aw_softmax_step<BN>(p, s, i * BN, w.w0, w.r0, w.r1, w.t, w.sl2, m0, m1, l0, l1, c0, c1);
        // As in af_task, a never-taken branch ends the softmax's block, so ptxas keeps the
        // product's wait below it; a breakpoint, not a trap: with a trap reachable where the
        // products' registers are live, ptxas allocates this warpgroup the block's entry count
        // (168), not setmaxnreg's.
        aw_hold(s);
        if (p.b < 1) asm volatile("brkpt;");
        aw_wait0();  // the product that read P of tile i - 1 from registers
        aw_hold(s);
        aw_hold(o);
        at_warp_arrive(vempty + 8 * vs);
        aw_pack_p<BN>(s, pa);
    }
    if (ntiles > 0) {
        const u32 nv = n + (u32)ntiles - 1u, vs = nv & 1u;
        at_wait(vfull + 8 * vs, (nv >> 1) & 1u);
        if (PP) aw_turn_wait(w.wg);
        af_values<E, BN>(o, pa, sv + vs * KB, c0, c1);
        if (PP) aw_turn_pass(w.wg);
        aw_wait0();
        aw_hold(o);
        at_warp_arrive(vempty + 8 * vs);
    }
    n += (u32)ntiles;
}
#endif

template <int E, int BN, bool PP, bool OV> __device__ void at_ws(const AttnTma& a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    const AttnP& p = a.p;
    constexpr u32 QB = AW_ROWS * E * 2, KB = BN * E * 2;
    extern __shared__ __align__(1024) u8 at_sm[];
    __shared__ __align__(8) u64 at_bars[12];  // qfull[2], qempty[2], kfull[2], kempty[2], vfull[2], vempty[2]
    const u32 base = (aw_smem(at_sm) + 1023u) & ~1023u;
    const u32 sq = base, sk = base + 2 * QB, sv = sk + 2 * KB;
    const u32 qfull = aw_smem(at_bars), qempty = qfull + 16, kfull = qfull + 32, kempty = qfull + 48;
    const u32 vfull = qfull + 64, vempty = qfull + 80;  // (with OV)
    const int tid = threadIdx.x;
    if (tid == 0) {
        for (int s = 0; s < 2; ++s) {
            at_init(qfull + 8 * s, 1);
            at_init(qempty + 8 * s, AW_THREADS / 32);
            at_init(kfull + 8 * s, 1);
            at_init(kempty + 8 * s, AW_THREADS / 32);
            at_init(vfull + 8 * s, 1);
            at_init(vempty + 8 * s, AW_THREADS / 32);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();  // the barriers initialized before any thread waits on them (the last block barrier)
    if (tid >= AW_THREADS) {
        // With OV the producer is a warpgroup, which gives the consumers its registers.
        if (OV) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(AT_PRODUCER_REGS));
        if (tid == AW_THREADS) at_produce<E, BN, OV>(a, sq, sk, sv, qfull, qempty, kfull, kempty, vfull, vempty);
        return;
    }
    if (OV) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(AT_CONSUMER_REGS));
    const i64 qtiles = (p.l + AW_ROWS - 1) / AW_ROWS, tasks = qtiles * p.b * p.hq;
    // The turns run on across tasks (each warpgroup takes two a tile of every task): warpgroup 1
    // passes the first before the first task and warpgroup 0 takes the last after the last.
    if (PP && tid >= 128) aw_turn_pass(1);
    u32 n = 0;
#pragma unroll 1
    for (u32 k = 0;; ++k) {
        const i64 task = at_ws_task(k);
        if (task >= tasks) break;
        i64 qt, bh;
        attn_task(p, task, qtiles, qt, bh);
        const AwPlace w = aw_place(p, qt, bh);
        const u32 qs = k & 1u, sqw = sq + qs * QB + w.wg * (64 * 128);
        float o[E / 2];
#pragma unroll
        for (int i = 0; i < E / 2; ++i) o[i] = 0.0f;
        float l0 = 0.0f, l1 = 0.0f;
        at_wait(qfull + 8 * qs, (k >> 1) & 1u);
        if (OV) {
            at_ov_task<E, BN, PP>(p, w, sqw, sk, sv, kfull, kempty, vfull, vempty, n, o, l0, l1);
        } else {
            const int ntiles = (w.kend + BN - 1) / BN;
            float m0 = AW_NEG_INF, m1 = AW_NEG_INF;
#pragma unroll 1
            for (int it = 0; it < ntiles; ++it, ++n) {
                const u32 s = n & 1u;
                at_wait(kfull + 8 * s, (n >> 1) & 1u);
                aw_step<E, BN, PP>(p, w.wg, sqw, sk + s * KB, sv + s * KB, it * BN, w.w0, w.r0, w.r1, w.t, w.sl2, o, m0,
                                   m1, l0, l1, [] {});
                at_warp_arrive(kempty + 8 * s);  // this warp's products of the slot completed
            }
        }
        at_warp_arrive(qempty + 8 * qs);  // and of the task's queries (its last scores waited)
        aw_store_rows<E>(p, o, l0, l1, w.bi, w.h, w.r0, w.r1, w.t);
    }
    if (PP && tid < 128) aw_turn_wait(0);  // warpgroup 1's last pass
#else
    __trap();  // the host launches this kernel only on compute capability 9.0 (sm_90a)
#endif
}
