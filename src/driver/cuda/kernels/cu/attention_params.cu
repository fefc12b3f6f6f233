// The parameters of an attention module's kernels (`AttnP` of kernels/fused.rs, field for field),
// after fused_head.cu: read by attention.cu (the FMA flash kernel and the merge of key splits) and
// attention_mma.cu (the tensor-core kernel, which ignores part, chunk and splits).

struct AttnP {
    const TS* q; const TS* k; const TS* v; const u8* mask; TS* dst; TC* part;
    i64 b, hq, hkv, l, s, e, ev;
    i64 qst[4], kst[4], vst[4], mst[4];
    i64 chunk;
    double scale;
    int splits, mask_kind, causal, pad;
};

