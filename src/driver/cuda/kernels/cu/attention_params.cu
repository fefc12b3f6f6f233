// The parameters of an attention module's kernels (`AttnP` of kernels/fused.rs, field for field),
// after fused_head.cu: read by attention.cu (the FMA flash kernel and the merge of key splits) and
// attention_mma.cu (the tensor-core kernel, which ignores part, chunk and splits).
// Strides are in elements, [B, H, L, E] order for q (qst), [B, Hkv, S, E] for k and v, [B, H, L, S]
// for the mask and [B, H, L, Ev] for the output dst (ost): a kernel writes output element
// (b, h, i, d) at dst[b*ost[0] + h*ost[1] + i*ost[2] + d*ost[3]] (PyTorch's SDPA output is
// [B, H, L, Ev] over [B, L, H, Ev] memory: ost = {L*H*Ev, Ev, H*Ev, 1}). `order`: the order in
// which the tensor-core kernels take their query tiles (attn_task).

struct AttnP {
    const TS* q; const TS* k; const TS* v; const u8* mask; TS* dst; TC* part;
    i64 b, hq, hkv, l, s, e, ev;
    i64 qst[4], kst[4], vst[4], mst[4], ost[4];
    i64 chunk;
    double scale;
    int splits, mask_kind, causal, order;
};

/* The query tile qt and the (batch, head) bh = bi * hq + h of block task `task` of qtiles * B * Hq
   tasks (a kernel with a block per query tile), in the order p.order chooses (`AttnOrder` of
   kernels/fused.rs): 0, the heaviest first across the grid (every (batch, head)'s last query tile,
   then the tiles before them, so a causal grid, whose later tiles see more keys, ends on its
   lightest blocks); 1, each (batch, head)'s tiles together, its last first; 2, each (batch,
   head)'s tiles together, in order. */
__device__ __forceinline__ void attn_task(const AttnP& p, i64 task, i64 qtiles, i64& qt, i64& bh) {
    if (p.order == 0) {
        const i64 heads = p.b * p.hq;
        qt = qtiles - 1 - task / heads;
        bh = task % heads;
    } else {
        const i64 r = task % qtiles;
        qt = p.order == 1 ? qtiles - 1 - r : r;
        bh = task / qtiles;
    }
}

