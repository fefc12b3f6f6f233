// Tensor-core flash attention (FlashAttention-2's forward pass) for f16 / bf16 with head dims
// E = Ev of 64 or 128, after fused_head.cu and attention_params.cu; sm_80 on (mma.sync, ldmatrix,
// cp.async). A block of 4 warps takes AM_ROWS (64) consecutive queries of one (batch, head), a warp
// 16 of them; tiles of AM_KEYS (64) keys and values stream through shared memory (cp.async: the
// next tile's keys load while this tile's values are used, and the next values while the next
// scores are computed); the scores S = Q K^T and the output O += P V are m16n8k16 products with
// float accumulators in registers; the online softmax runs in registers in base 2 (the scale
// folded with log2 e into one multiply). Scores never reach memory. Causal blocks stop at
// their last query's key; masks (bool or additive, broadcast by strides) are read per score.
// Rows whose every key is masked get zeros. The host (`fused.rs`) launches AM_THREADS threads
// and sends here only q / k / v whose last dim is contiguous and whose other strides are
// multiples of 8 elements from 16-byte aligned bases, and an output whose last dim is contiguous
// and whose other strides are even from a 4-byte aligned base (its 4-byte stores). The query tiles
// run in the order p.order chooses (attn_task). Entry points am_{E} are appended by
// kernels/fused_codegen.rs; AM_MMA_T (the PTX type, "f16" or "bf16") is defined there.
//
// Fragment layouts of mma.m16n8k16 (.f16/.bf16 inputs, .f32 accumulators), PTX ISA 9.7.14.5.8,
// with g = lane / 4 and t = lane % 4; a register holds two 16-bit elements, the lower-indexed
// one in its low half:
//   A (16 x 16, row):  a[0] = A[g][2t, 2t+1]      a[1] = A[g+8][2t, 2t+1]
//                      a[2] = A[g][2t+8, 2t+9]    a[3] = A[g+8][2t+8, 2t+9]
//   B (16 x 8, col):   b[0] = B[2t, 2t+1][g]      b[1] = B[2t+8, 2t+9][g]
//   C (16 x 8, f32):   c[0], c[1] = C[g][2t, 2t+1]  c[2], c[3] = C[g+8][2t, 2t+1]
// ldmatrix.m8n8.x4 (.b16): lanes 8m .. 8m+7 give the addresses of rows 0..7 of matrix m; result
// register m holds M[g][2t, 2t+1] of matrix m, or with .trans M[2t][g] and M[2t+1][g].

#define AM_ROWS 64
#define AM_KEYS 64
#define AM_THREADS 128
#define AM_LOG2E 1.4426950408889634
#define AM_NEG_INF __int_as_float(0xff800000)

#if __CUDA_ARCH__ >= 800
__device__ __forceinline__ u32 am_smem(const void* p) { return (u32)__cvta_generic_to_shared(p); }

/* D += A B on the tensor cores (m16n8k16, float accumulators). */
__device__ __forceinline__ void am_mma(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32." AM_MMA_T "." AM_MMA_T ".f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Four 8 x 8 matrices of 16-bit elements from shared memory (this lane gives one row address). */
__device__ __forceinline__ void am_ldsm(u32 (&r)[4], const u16* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(am_smem(row)) : "memory");
}
/* The same, each matrix transposed. */
__device__ __forceinline__ void am_ldsm_t(u32 (&r)[4], const u16* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(am_smem(row)) : "memory");
}

/* Two floats as one register of two 16-bit elements, `lo` in the low half. */
__device__ __forceinline__ u32 am_pack(float lo, float hi) { return (u32)from_c(lo) | ((u32)from_c(hi) << 16); }

/* Rows j0 .. j0 + AM_KEYS - 1 of a [S, E] matrix (row stride `rs` elements, last dim contiguous)
   into `sm` (rows of E + 8 elements) with cp.async, 16 bytes a copy; rows at or past `jn` are
   zero-filled (nothing read). */
template <int E> __device__ __forceinline__ void am_load(u16* sm, const TS* base, i64 rs, i64 j0, i64 jn) {
    constexpr int LD = E + 8, CH = E / 8;
#pragma unroll
    for (int c = threadIdx.x; c < AM_KEYS * CH; c += AM_THREADS) {
        const int r = c / CH, c8 = (c % CH) * 8;
        const i64 j = j0 + r;
        const bool in = j < jn;
        const TS* src = in ? base + j * rs + c8 : base;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                     :: "r"(am_smem(sm + r * LD + c8)), "l"(src), "r"(in ? 16 : 0) : "memory");
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
}
/* Waits until at most one committed group of this thread's copies is pending. */
__device__ __forceinline__ void am_wait1() { asm volatile("cp.async.wait_group 1;" ::: "memory"); }

/* Two adjacent elements of q's row `row` (zeros past the last query). */
__device__ __forceinline__ u32 am_q2(const TS* qb, i64 rs, i64 row, i64 l, int col) {
    return row < l ? *reinterpret_cast<const u32*>(qb + row * rs + col) : 0u;
}
#endif

#if __CUDA_ARCH__ >= 800
#define AM_NT (AM_KEYS / 8)  // 8-key column tiles of S

/* Q's rows r0 and r1 (zeros past the last query `l`) as A fragments, kept for a whole task:
   qf[kk] covers columns 16kk .. 16kk + 15. */
template <int E>
__device__ __forceinline__ void am_q_frags(u32 (&qf)[E / 16][4], const TS* qb, i64 rs, i64 r0, i64 r1, i64 l) {
    const int t = threadIdx.x & 3;
#pragma unroll
    for (int kk = 0; kk < E / 16; ++kk) {
        qf[kk][0] = am_q2(qb, rs, r0, l, 16 * kk + 2 * t);
        qf[kk][1] = am_q2(qb, rs, r1, l, 16 * kk + 2 * t);
        qf[kk][2] = am_q2(qb, rs, r0, l, 16 * kk + 8 + 2 * t);
        qf[kk][3] = am_q2(qb, rs, r1, l, 16 * kk + 8 + 2 * t);
    }
}

/* S = Q K^T of this warp's 16 queries and the tile's keys in `ks` (rows of E + 8 elements):
   s[n] is the C fragment of keys 8n .. 8n + 7. */
template <int E>
__device__ __forceinline__ void am_scores(float (&s)[AM_NT][4], const u32 (&qf)[E / 16][4], const u16* ks) {
    constexpr int LD = E + 8;  // shared row stride: 16 bytes of padding, so the 8 rows an
                               // ldmatrix phase reads start in distinct banks (4 words apart)
    // ldmatrix addressing: lane gives row (lane & 7) of matrix mi = lane >> 3.
    const int lane = threadIdx.x & 31, mi = lane >> 3, mr = lane & 7;
#pragma unroll
    for (int n = 0; n < AM_NT; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < E / 16; ++kk) {
#pragma unroll
        for (int np = 0; np < AM_NT / 2; ++np) {
            // Matrices: 0 = keys 16np + 0..7, columns 16kk + 0..7; 1 = the same keys,
            // columns 16kk + 8..15; 2, 3 = keys 16np + 8..15. B[k][n] = K[n][k], so
            // register 0 is b[0] and 1 is b[1] of column tile 2np, 2 and 3 of 2np + 1.
            u32 b[4];
            am_ldsm(b, ks + (16 * np + (mi >> 1) * 8 + mr) * LD + 16 * kk + (mi & 1) * 8);
            am_mma(s[2 * np], qf[kk], b[0], b[1]);
            am_mma(s[2 * np + 1], qf[kk], b[2], b[3]);
        }
    }
}

/* Scales the tile's scores to base 2 (`sl2`) and, on a tile with an edge (past S, across the
   causal diagonal, or under a mask), masks them: s[n][e] is row (e < 2 ? r0 : r1), key
   j0 + 8n + 2t + (e & 1); a key not kept scores -inf. */
__device__ __forceinline__ void am_mask(const AttnP& p, float (&s)[AM_NT][4], float sl2, i64 j0, i64 q0, i64 r0,
                                        i64 r1, i64 bi, i64 h) {
    const int t = threadIdx.x & 3;
    const bool edge = j0 + AM_KEYS > p.s || (p.causal && j0 + AM_KEYS - 1 > q0) || p.mask_kind != 0;
#pragma unroll
    for (int n = 0; n < AM_NT; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float x = s[n][e] * sl2;
            if (edge) {
                const i64 row = e < 2 ? r0 : r1;
                const i64 j = j0 + 8 * n + 2 * t + (e & 1);
                bool keep = j < p.s && row < p.l && !(p.causal && j > row);
                if (keep && p.mask_kind != 0) {
                    const i64 mo = bi * p.mst[0] + h * p.mst[1] + row * p.mst[2] + j * p.mst[3];
                    if (p.mask_kind == 1) keep = p.mask[mo] != 0;
                    else x += to_c(((const TS*)p.mask)[mo]) * (float)AM_LOG2E;
                }
                if (!keep) x = AM_NEG_INF;
            }
            s[n][e] = x;
        }
    }
}

/* One step of the online softmax over a tile's base-2 scores: the rows' new maxima (over the
   4 lanes sharing a row), the scores turned into their exponentials, the running sums (this
   thread's part) and O rescaled by the step from the old maxima to the new. */
template <int E>
__device__ __forceinline__ void am_softmax_step(float (&s)[AM_NT][4], float (&o)[E / 8][4], float& m0, float& m1,
                                                float& l0, float& l1) {
    float x0 = m0, x1 = m1;
#pragma unroll
    for (int n = 0; n < AM_NT; ++n) {
        x0 = fmaxf(x0, fmaxf(s[n][0], s[n][1]));
        x1 = fmaxf(x1, fmaxf(s[n][2], s[n][3]));
    }
    x0 = fmaxf(x0, __shfl_xor_sync(FULL, x0, 1));
    x0 = fmaxf(x0, __shfl_xor_sync(FULL, x0, 2));
    x1 = fmaxf(x1, __shfl_xor_sync(FULL, x1, 1));
    x1 = fmaxf(x1, __shfl_xor_sync(FULL, x1, 2));
    // A row with nothing kept yet subtracts 0 (its exponentials are all exp2(-inf) = 0).
    const float b0 = x0 == AM_NEG_INF ? 0.0f : x0, b1 = x1 == AM_NEG_INF ? 0.0f : x1;
    const float a0 = exp2f(m0 - b0), a1 = exp2f(m1 - b1);
    m0 = x0;
    m1 = x1;
    float ps0 = 0.0f, ps1 = 0.0f;
#pragma unroll
    for (int n = 0; n < AM_NT; ++n) {
        s[n][0] = exp2f(s[n][0] - b0);
        s[n][1] = exp2f(s[n][1] - b0);
        s[n][2] = exp2f(s[n][2] - b1);
        s[n][3] = exp2f(s[n][3] - b1);
        ps0 += s[n][0] + s[n][1];
        ps1 += s[n][2] + s[n][3];
    }
    l0 = l0 * a0 + ps0;
    l1 = l1 * a1 + ps1;
#pragma unroll
    for (int n = 0; n < E / 8; ++n) {
        o[n][0] *= a0;
        o[n][1] *= a0;
        o[n][2] *= a1;
        o[n][3] *= a1;
    }
}

/* O += P V: P (the tile's exponentials, packed to 16 bits) times the tile's values in `vs`
   (rows of E + 8 elements). */
template <int E>
__device__ __forceinline__ void am_values(float (&o)[E / 8][4], const float (&s)[AM_NT][4], const u16* vs) {
    constexpr int LD = E + 8;
    const int lane = threadIdx.x & 31, mi = lane >> 3, mr = lane & 7;
#pragma unroll
    for (int kk = 0; kk < AM_KEYS / 16; ++kk) {
        // P as the A fragment of keys 16kk .. 16kk + 15: column tiles 2kk and 2kk + 1 of S.
        u32 pa[4];
        pa[0] = am_pack(s[2 * kk][0], s[2 * kk][1]);
        pa[1] = am_pack(s[2 * kk][2], s[2 * kk][3]);
        pa[2] = am_pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pa[3] = am_pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
        for (int dp = 0; dp < E / 16; ++dp) {
            // Transposed matrices: 0 = keys 16kk + 0..7, columns 16dp + 0..7; 1 = keys
            // 16kk + 8..15, the same columns; 2, 3 = columns 16dp + 8..15. B[k][n] =
            // V[k][n], so registers 0, 1 are b[0], b[1] of column tile 2dp, 2, 3 of 2dp + 1.
            u32 b[4];
            am_ldsm_t(b, vs + (16 * kk + (mi & 1) * 8 + mr) * LD + 16 * dp + (mi >> 1) * 8);
            am_mma(o[2 * dp], pa, b[0], b[1]);
            am_mma(o[2 * dp + 1], pa, b[2], b[3]);
        }
    }
}

/* The sums over each row's 4 lanes, then rows r0 and r1 of O / l into the output (zeros where
   nothing was kept; nothing past the last query). */
template <int E>
__device__ __forceinline__ void am_store_rows(const AttnP& p, const float (&o)[E / 8][4], float l0, float l1, i64 bi,
                                              i64 h, i64 r0, i64 r1) {
    const int t = threadIdx.x & 3;
    float i0, i1;
    attn_row_inverses(l0, l1, i0, i1);
    TS* ob = p.dst + bi * p.ost[0] + h * p.ost[1];  // ost[3] == 1 (the host's check)
#pragma unroll
    for (int n = 0; n < E / 8; ++n) {
        if (r0 < p.l)
            *reinterpret_cast<u32*>(ob + r0 * p.ost[2] + 8 * n + 2 * t) = am_pack(o[n][0] * i0, o[n][1] * i0);
        if (r1 < p.l)
            *reinterpret_cast<u32*>(ob + r1 * p.ost[2] + 8 * n + 2 * t) = am_pack(o[n][2] * i1, o[n][3] * i1);
    }
}
#endif

template <int E> __device__ void am_tile(const AttnP& p) {
#if __CUDA_ARCH__ >= 800
    __shared__ __align__(16) u16 ks[AM_KEYS * (E + 8)];
    __shared__ __align__(16) u16 vs[AM_KEYS * (E + 8)];
    const int w = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2;
    const float sl2 = (float)(p.scale * AM_LOG2E);
    const i64 qtiles = (p.l + AM_ROWS - 1) / AM_ROWS;
    const i64 tasks = qtiles * p.hq * p.b;
    for (i64 task = blockIdx.x; task < tasks; task += gridDim.x) {
        i64 qt, bh;
        attn_task(p, task, qtiles, qt, bh);
        const i64 h = bh % p.hq;
        const i64 bi = bh / p.hq;
        const i64 hk = h / (p.hq / p.hkv);
        const i64 q0 = qt * AM_ROWS;
        const i64 r0 = q0 + w * 16 + g, r1 = r0 + 8;  // this thread's two query rows
        // Keys this block needs: all S, or causal up to its last query.
        const i64 kend = p.causal ? min(p.s, q0 + AM_ROWS) : p.s;
        const int ntiles = (int)((kend + AM_KEYS - 1) / AM_KEYS);
        const TS* kb = p.k + bi * p.kst[0] + hk * p.kst[1];
        const TS* vb = p.v + bi * p.vst[0] + hk * p.vst[1];
        if (ntiles > 0) {
            am_load<E>(ks, kb, p.kst[2], 0, kend);
            am_load<E>(vs, vb, p.vst[2], 0, kend);
        }
        u32 qf[E / 16][4];
        am_q_frags<E>(qf, p.q + bi * p.qst[0] + h * p.qst[1], p.qst[2], r0, r1, p.l);
        float o[E / 8][4];
#pragma unroll
        for (int n = 0; n < E / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
        // Running maxima (base-2 scaled scores) and this thread's part of the sums, per row.
        float m0 = AM_NEG_INF, m1 = AM_NEG_INF, l0 = 0.0f, l1 = 0.0f;
#pragma unroll 1
        for (int it = 0; it < ntiles; ++it) {
            const i64 j0 = (i64)it * AM_KEYS;
            am_wait1();  // this tile's keys have landed (its values may be in flight)
            __syncthreads();
            float s[AM_NT][4];
            am_scores<E>(s, qf, ks);
            __syncthreads();  // every warp is done with this tile's keys
            if (it + 1 < ntiles) am_load<E>(ks, kb, p.kst[2], j0 + AM_KEYS, kend);
            else asm volatile("cp.async.commit_group;" ::: "memory");  // keeps the group count
            am_mask(p, s, sl2, j0, q0, r0, r1, bi, h);
            am_softmax_step<E>(s, o, m0, m1, l0, l1);
            am_wait1();  // this tile's values have landed (the next keys may be in flight)
            __syncthreads();
            am_values<E>(o, s, vs);
            __syncthreads();  // every warp is done with this tile's values
            if (it + 1 < ntiles) am_load<E>(vs, vb, p.vst[2], j0 + AM_KEYS, kend);
            else asm volatile("cp.async.commit_group;" ::: "memory");
        }
        am_store_rows<E>(p, o, l0, l1, bi, h, r0, r1);
    }
#else
    __trap();  // the host launches this kernel only on compute capability 8.0 or later
#endif
}
