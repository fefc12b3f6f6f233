// The parameters of an attention module's kernels (`AttnP` of kernels/fused.rs, field for field),
// after fused_head.cu: read by attention.cu (the FMA flash kernel and the merge of key splits),
// attention_mma.cu and attention_wg.cu (the tensor-core kernels, which ignore part, chunk and splits).
// Strides are in elements, [B, H, L, E] order for q (qst), [B, Hkv, S, E] for k and v, [B, H, L, S]
// for the mask and [B, H, L, Ev] for the output dst (ost): a kernel writes output element
// (b, h, i, d) at dst[b*ost[0] + h*ost[1] + i*ost[2] + d*ost[3]] (PyTorch's SDPA output is
// [B, H, L, Ev] over [B, L, H, Ev] memory: ost = {L*H*Ev, Ev, H*Ev, 1}). `order`: the order in
// which the tensor-core kernels take their query tiles (attn_task), with the swizzle's section
// size in its upper bits.

struct AttnP {
    const TS* q; const TS* k; const TS* v; const u8* mask; TS* dst; TC* part;
    i64 b, hq, hkv, l, s, e, ev;
    i64 qst[4], kst[4], vst[4], mst[4], ost[4];
    i64 chunk;
    double scale;
    int splits, mask_kind, causal, order;
};

/* The inverses of a pair of rows' sums held in parts by the 4 lanes that share the rows (the
   tensor cores' C fragment: lanes 4g .. 4g + 3): the parts summed over the lanes, then 1 / l, or 0
   where nothing was kept (l == 0). */
__device__ __forceinline__ void attn_row_inverses(float l0, float l1, float& i0, float& i1) {
    l0 += __shfl_xor_sync(FULL, l0, 1);
    l0 += __shfl_xor_sync(FULL, l0, 2);
    l1 += __shfl_xor_sync(FULL, l1, 1);
    l1 += __shfl_xor_sync(FULL, l1, 2);
    i0 = l0 == 0.0f ? 0.0f : 1.0f / l0;
    i1 = l1 == 0.0f ? 0.0f : 1.0f / l1;
}

/* The query tile qt and the (batch, head) bh = bi * hq + h of block task `task` of qtiles * B * Hq
   tasks (a kernel with a block per query tile), in the order p.order chooses (`attn_order` of
   kernels/attn_order.rs, from `config::AttentionOrder`). Its low 8 bits name the order: 0, the
   heaviest first across the grid (every (batch, head)'s last query tile, then the tiles before
   them, so a causal grid, whose later tiles see more keys, ends on its lightest blocks); 1, each
   (batch, head)'s tiles together, its last first; 2, each (batch, head)'s tiles together, in
   order; 3, the swizzle: sections of G = p.order >> 8 consecutive (batch, head)s (1 <= G; the
   host sizes them to half the L2), one section after another, the heaviest tiles first inside
   each; when G does not divide B * Hq the short section (B * Hq % G heads) runs first, so the
   grid ends on a whole section's lightest tiles. The bits above the low 8 are 0 for orders 0-2. */
__device__ __forceinline__ void attn_task(const AttnP& p, i64 task_, i64 qtiles_, i64& qt, i64& bh) {
    // In 32 bits (a grid's tasks, heads and tiles are below 2^31, `fused.rs`): a 64-bit division
    // is a call, whose saved registers a persistent kernel's task loop would spill.
    const u32 task = (u32)task_, qtiles = (u32)qtiles_;
    const int kind = p.order & 0xff;
    const u32 heads = (u32)(p.b * p.hq);
    if (kind == 0) {
        qt = qtiles - 1 - task / heads;
        bh = task % heads;
    } else if (kind == 3) {
        const u32 g = (u32)(p.order >> 8);
        const u32 first = heads % g;  // the short section's heads (0: none)
        u32 h0, n, r;
        if (task < first * qtiles) {
            h0 = 0;
            n = first;
            r = task;
        } else {
            const u32 t = task - first * qtiles;
            h0 = first + t / (g * qtiles) * g;
            n = g;
            r = t % (g * qtiles);
        }
        qt = qtiles - 1 - r / n;
        bh = h0 + r % n;
    } else {
        const u32 r = task % qtiles;
        qt = kind == 1 ? qtiles - 1 - r : r;
        bh = task / qtiles;
    }
}
