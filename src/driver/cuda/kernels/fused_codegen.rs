//! CUDA C of the fused modules (norm rows, attention), after the head `codegen.rs` fills
//! (`cu/fused_head.cu`): the family's kernels, and one `extern "C"` entry point per kernel.

use super::sources::{ATTENTION, ATTENTION_FA, ATTENTION_MMA, ATTENTION_PARAMS, ATTENTION_TMA, ATTENTION_WG, NORM};
use super::vocab::{
    attn_keys_per_tile, Entry, ModuleKey, TmaMode, ATTN_FA_TILES, ATTN_HEAD_DIMS, ATTN_MMA_HEAD_DIMS, ATTN_TMA_TILES,
    ATTN_WG_TILES, NORM_VALUES_PER_THREAD, NORM_VECTORS_PER_THREAD,
};
use crate::dtype::DType;
use std::fmt::Write;

/// The accumulation type of a fused module of `dtype`: `double` for `f64`, else `float`.
pub(in crate::driver::cuda) fn acc_dtype(dtype: DType) -> DType {
    if dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

/// A norm module's kernels and entry points `nm_rows`, `nm_r{VPT}` and `nm_v{VV}`, after its head.
pub(in crate::driver::cuda) fn norm(s: &mut String) {
    s.push_str(NORM);
    let b = "extern \"C\" __global__ void __launch_bounds__(256)";
    let _ = writeln!(s, "{b} nm_rows(const __grid_constant__ NormP p) {{ cs_enter_when(p.early); nm_row_blocks(p); }}");
    for vpt in NORM_VALUES_PER_THREAD {
        let _ = writeln!(
            s,
            "{b} nm_r{vpt}(const __grid_constant__ NormP p) {{ cs_enter_when(p.early); nm_reg_rows<{vpt}>(p); }}"
        );
    }
    for vv in NORM_VECTORS_PER_THREAD {
        let _ = writeln!(
            s,
            "{b} nm_v{vv}(const __grid_constant__ NormP p) {{ cs_enter_when(p.early); nm_vec_rows<{vv}>(p); }}"
        );
    }
}

/// An attention module's kernels and entry points `at_{EP}` per padded head dim and `at_merge`,
/// after its head.
pub(in crate::driver::cuda) fn attention(s: &mut String, dtype: DType) {
    s.push_str(ATTENTION_PARAMS);
    s.push_str(ATTENTION);
    let acc = acc_dtype(dtype).size();
    let b = "extern \"C\" __global__ void __launch_bounds__(256)";
    for ep in ATTN_HEAD_DIMS {
        let kt = attn_keys_per_tile(ep, acc);
        let _ = writeln!(s, "{b} at_{ep}(const __grid_constant__ AttnP p) {{ cs_enter(); at_tile<{ep}, {kt}>(p); }}");
    }
    let _ = writeln!(s, "{b} at_merge(const __grid_constant__ AttnP p) {{ cs_enter(); at_merge_rows(p); }}");
}

/// A tensor-core attention module's kernels (`dtype` f16 or bf16) and entry points `am_{E}` per
/// head dim of [`ATTN_MMA_HEAD_DIMS`], after its head. Launched with `AM_THREADS` (128) threads;
/// the bound of 256 keeps the occupancy query of every module's kernels (`table.rs`) valid.
pub(in crate::driver::cuda) fn attention_mma(s: &mut String, dtype: DType) {
    let t = if dtype == DType::BF16 { "bf16" } else { "f16" };
    let _ = writeln!(s, "#define AM_MMA_T \"{t}\"");
    s.push_str(ATTENTION_PARAMS);
    s.push_str(ATTENTION_MMA);
    let b = "extern \"C\" __global__ void __launch_bounds__(256)";
    for e in ATTN_MMA_HEAD_DIMS {
        let _ = writeln!(s, "{b} am_{e}(const __grid_constant__ AttnP p) {{ cs_enter(); am_tile<{e}>(p); }}");
    }
}

/// A Hopper tensor-core attention module's kernels (`dtype` f16 or bf16, `cu/attention_wg.cu`)
/// and entry points `aw_{E}_{BN}` per (head dim, keys per tile) of [`ATTN_WG_TILES`] and
/// `aw_{E}_{BN}p` with the warpgroups taking turns (ping-pong), then `af_{E}_{BN}[p]` per
/// entry of [`ATTN_FA_TILES`] (`cu/attention_fa.cu`, FlashAttention 3's schedule), then
/// `at_{E}_{BN}[p][s|w|o]` per entry of [`ATTN_TMA_TILES`] (`cu/attention_tma.cu`, copies by TMA;
/// `s` with a block barrier a tile, `w` persistent with a producer warp, `o` persistent with a
/// producer warpgroup and the intra-warpgroup overlap), after its head: first the `wgmma`
/// wrappers the kernel calls (overloaded on the accumulator count), for sm_90a only. Launched
/// with 256 threads (`w`: 288, `o`: 384, [`TmaMode::threads`]); head dim 64 with tiles of 64 keys
/// asks for two blocks an SM (128 registers a thread), the larger tiles (and `w`, `o`) for one.
pub(in crate::driver::cuda) fn attention_wg(s: &mut String, dtype: DType) {
    let (t, cvt) = if dtype == DType::BF16 { ("bf16", "bf16x2") } else { ("f16", "f16x2") };
    let _ = writeln!(s, "#define AW_CVT2 \"{cvt}\"");
    s.push_str("#if defined(__CUDA_ARCH_FEAT_SM90_ALL)\n");
    for n in [64, 128] {
        wgmma_wrappers(s, n, t);
    }
    s.push_str("#endif\n");
    s.push_str(ATTENTION_PARAMS);
    s.push_str(ATTENTION_WG);
    for (e, bn) in ATTN_WG_TILES {
        let blocks = if e * bn <= 64 * 64 { 2 } else { 1 };
        for (pp, suffix) in [(false, ""), (true, "p")] {
            let _ = writeln!(
                s,
                "extern \"C\" __global__ void __launch_bounds__(256, {blocks}) aw_{e}_{bn}{suffix}(const __grid_constant__ \
                 AttnP p) {{ cs_enter(); aw_tile<{e}, {bn}, {pp}>(p); }}"
            );
        }
    }
    s.push_str(ATTENTION_FA);
    for (e, bn, pp) in ATTN_FA_TILES {
        let blocks = if e * bn <= 64 * 64 { 2 } else { 1 };
        let suffix = if pp { "p" } else { "" };
        let _ = writeln!(
            s,
            "extern \"C\" __global__ void __launch_bounds__(256, {blocks}) af_{e}_{bn}{suffix}(const __grid_constant__ \
             AttnP p) {{ cs_enter(); af_run<{e}, {bn}, {pp}>(p); }}"
        );
    }
    s.push_str(ATTENTION_TMA);
    for (e, bn, pp) in ATTN_TMA_TILES {
        for mode in TmaMode::ALL {
            // The producer's 288 threads at two blocks an SM would leave head dim 64 96 registers
            // (it needs 104: two blocks of them still fit).
            let blocks = if e * bn <= 64 * 64 && !mode.persistent() { 2 } else { 1 };
            let name = Entry::AttnTma { e16: (e / 16) as u8, bn16: (bn / 16) as u8, pp, mode }
                .name(&ModuleKey::AttentionWg { dtype });
            let call = match mode {
                TmaMode::Producer | TmaMode::Overlap => {
                    format!("at_ws<{e}, {bn}, {pp}, {}>(a)", mode == TmaMode::Overlap)
                }
                _ => format!("at_tile<{e}, {bn}, {pp}, {}>(a)", mode == TmaMode::Sync),
            };
            let _ = writeln!(
                s,
                "extern \"C\" __global__ void __launch_bounds__({}, {blocks}) {name}(const __grid_constant__ AttnTma a) \
                 {{ cs_enter(); {call}; }}",
                mode.threads()
            );
        }
    }
}

/// `aw_ss` and `aw_rs` for `wgmma.mma_async` of shape m64n{n}k16 on 16-bit inputs of PTX type
/// `t` with float accumulators: `aw_ss(d, a_desc, b_desc, acc)` (A and B from shared memory,
/// both K-major; `acc` 0 overwrites D) and `aw_rs(d, a, b_desc)` (A from four registers, B
/// MN-major, D accumulated).
fn wgmma_wrappers(s: &mut String, n: usize, t: &str) {
    let acc = n / 2;
    let d = (0..acc).map(|i| format!("%{i}")).collect::<Vec<_>>().join(", ");
    let outs = (0..acc).map(|i| format!("\"+f\"(d[{i}])")).collect::<Vec<_>>().join(", ");
    let op = format!("wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t}");
    let _ = writeln!(
        s,
        "__device__ __forceinline__ void aw_ss(float (&d)[{acc}], u64 da, u64 db, int acc) {{\n    \
         asm volatile(\"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{a2}, 0;\\n{op} {{{d}}}, %{acc}, %{a1}, p, 1, 1, 0, 0;\\n}}\\n\"\n        \
         : {outs}\n        : \"l\"(da), \"l\"(db), \"r\"(acc) : \"memory\");\n}}",
        a1 = acc + 1,
        a2 = acc + 2,
    );
    let _ = writeln!(
        s,
        "__device__ __forceinline__ void aw_rs(float (&d)[{acc}], const u32 (&a)[4], u64 db) {{\n    \
         asm volatile(\"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{p5}, 0;\\n{op} {{{d}}}, {{%{acc}, %{p1}, %{p2}, %{p3}}}, %{p4}, p, 1, 1, 1;\\n}}\\n\"\n        \
         : {outs}\n        : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(db), \"r\"(1) : \"memory\");\n}}",
        p1 = acc + 1,
        p2 = acc + 2,
        p3 = acc + 3,
        p4 = acc + 4,
        p5 = acc + 5,
    );
}
