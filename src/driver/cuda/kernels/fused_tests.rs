//! The fused modules (norm rows, attention) compile through NVRTC for every float dtype (to
//! device code for compute capability 9.0: shared-memory tiles within the static limit, register
//! arrays of every padded head dim), and each entry point the launcher asks for is defined.

use super::nvrtc::{image, nvrtc_present, resource_report, resource_report_of};
use super::vocab::{
    attn_fa_bytes, attn_keys_per_tile, attn_wg_bytes, Entry, ModuleKey, TmaMode, ATTN_FA_TILES, ATTN_HEAD_DIMS,
    ATTN_MMA_HEAD_DIMS, ATTN_TMA_TILES, ATTN_WG_TILES,
};
use crate::dtype::DType;

const FLOATS: [DType; 4] = [DType::F32, DType::BF16, DType::F16, DType::F64];

#[test]
fn norm_and_attention_modules_compile() {
    if !nvrtc_present() {
        crate::testing::skip(1, "libnvrtc not found");
        return;
    }
    for d in FLOATS {
        let mut modules = vec![ModuleKey::Norm { dtype: d }, ModuleKey::Attention { dtype: d }];
        if matches!(d, DType::BF16 | DType::F16) {
            modules.push(ModuleKey::AttentionMma { dtype: d });
            modules.push(ModuleKey::AttentionWg { dtype: d });
        }
        for m in modules {
            let src = m.source();
            for e in m.entries() {
                let name = e.name(&m);
                assert!(src.contains(&format!(" {name}(const __grid_constant__")), "{m:?} defines {name}");
            }
            if let Err(e) = image(&m.program(&src), 9, 0, None) {
                panic!("{m:?} does not compile: {e}\n{src}");
            }
        }
    }
}

/// The host's `AttnP` (kernels/fused.rs) and the kernels' (`cu/attention_params.cu`) agree field
/// for field: the same names in the same order (the host's by offset, packed with no gaps; the
/// kernels' as declared), and NVRTC compiles static assertions of the size of every field and of
/// the struct into each attention module (NVRTC has no `offsetof`: the same order and sizes give
/// the same offsets in both C layouts).
#[test]
fn the_attention_parameters_have_one_layout_on_both_sides() {
    let (mut fields, total) = super::fused::attn_p_layout();
    fields.sort_by_key(|f| f.1);
    let mut end = 0;
    for &(name, at, size) in &fields {
        assert_eq!(at, end, "AttnP::{name} follows the field before it");
        end = at + size;
    }
    assert_eq!(end, total, "the fields listed fill AttnP");
    let cu = include_str!("cu/attention_params.cu");
    let body = &cu[cu.find("struct AttnP {").expect("AttnP in attention_params.cu") + 14..];
    let body = &body[..body.find("};").expect("AttnP's end")];
    let declared: Vec<&str> = body
        .split(';')
        .flat_map(|decl| decl.split(','))
        .map(|item| item.split('[').next().unwrap_or("").rsplit([' ', '*', '\n']).next().unwrap_or("").trim())
        .filter(|name| !name.is_empty())
        .collect();
    let names: Vec<&str> = fields.iter().map(|f| f.0).collect();
    assert_eq!(declared, names, "attention_params.cu declares AttnP's fields in the host's order");
    if !nvrtc_present() {
        crate::testing::skip(1, "libnvrtc not found");
        return;
    }
    let mut asserts = format!("static_assert(sizeof(AttnP) == {total}, \"sizeof(AttnP) == {total}\");\n");
    for (name, _, size) in &fields {
        asserts
            .push_str(&format!("static_assert(sizeof(AttnP::{name}) == {size}, \"AttnP::{name} of {size} bytes\");\n"));
    }
    for m in [ModuleKey::Attention { dtype: DType::F32 }, ModuleKey::AttentionMma { dtype: DType::BF16 }] {
        let src = m.source() + &asserts;
        if let Err(e) = image(&m.program(&src), 9, 0, None) {
            panic!("{m:?}: the host's AttnP {fields:?} of {total} bytes is not the kernels': {e}");
        }
    }
    // The TMA kernel's parameter: AttnP, then three 128-byte maps aligned to 64 bytes (the same
    // AttnP, alignment and size give the same offsets in both C layouts).
    let ([q, k, v], size) = super::fused::attn_tma_layout();
    assert_eq!((q % 64, k - q, v - k, size - v), (0, 128, 128, 128), "AttnTma's maps");
    assert!(q >= total && q - total < 64, "AttnTma's first map follows AttnP");
    let asserts = format!(
        "{asserts}static_assert(sizeof(AttnTma) == {size}, \"sizeof(AttnTma) == {size}\");\n\
         static_assert(alignof(TmaMap) == 64 && sizeof(TmaMap) == 128, \"TmaMap\");\n"
    );
    let m = ModuleKey::AttentionWg { dtype: DType::BF16 };
    if let Err(e) = image(&m.program(&(m.source() + &asserts)), 9, 0, None) {
        panic!("the host's AttnTma ({size} bytes, maps at {q}, {k}, {v}) is not the kernel's: {e}");
    }
}

#[test]
fn attention_tiles_fit_static_shared_memory() {
    for ep in ATTN_HEAD_DIMS {
        for acc in [4usize, 8] {
            let kt = attn_keys_per_tile(ep, acc);
            assert!(32 % kt == 0 && kt >= 4, "{kt} keys per tile divide a warp");
            // Keys (padded by one), values and eight queries.
            let bytes = (kt * (ep + 1) + kt * ep + 8 * ep) * acc;
            assert!(bytes <= 48 * 1024, "head dim {ep}, {acc}-byte accumulators: {bytes} bytes");
        }
    }
}

/// The tensor-core attention kernels compile for compute capability 8.0 (the first with
/// `mma.sync` m16n8k16 on bf16, `ldmatrix` and `cp.async`) and 9.0 with the tensor-core
/// instructions in their PTX, and ptxas keeps their register arrays (Q fragments, score and
/// output accumulators) in registers: no stack frame, no spills (a run-time index would move
/// them to local memory).
#[test]
fn tensor_core_attention_compiles_without_spills() {
    if !nvrtc_present() {
        crate::testing::skip(1, "libnvrtc not found");
        return;
    }
    for d in [DType::BF16, DType::F16] {
        let m = ModuleKey::AttentionMma { dtype: d };
        let src = m.source();
        let ty = if d == DType::BF16 { "bf16" } else { "f16" };
        assert!(src.contains(&format!("#define AM_MMA_T \"{ty}\"")), "{m:?} names its mma type");
        for (major, minor) in [(8, 0), (9, 0)] {
            let (_, log) =
                resource_report(&src, major, minor).unwrap_or_else(|e| panic!("{m:?} sm_{major}{minor}: {e}"));
            for e in ATTN_MMA_HEAD_DIMS {
                let name = format!("am_{e}");
                let at = log.find(&format!("'{name}'")).unwrap_or_else(|| panic!("{name} in the report:\n{log}"));
                let tail = &log[at..];
                let end = tail[1..].find("Compiling entry function").map_or(tail.len(), |i| i + 1);
                let part = &tail[..end];
                eprintln!("{m:?} sm_{major}{minor} {part}");
                assert!(
                    part.contains("0 bytes stack frame"),
                    "{name} ({d}, sm_{major}{minor}) uses a stack frame:\n{part}"
                );
                assert!(part.contains("0 bytes spill stores"), "{name} ({d}, sm_{major}{minor}) spills:\n{part}");
            }
        }
    }
}

/// Hopper's attention kernels compile for sm_90a with `wgmma` (both operand kinds) in their
/// PTX, and ptxas keeps their accumulators (scores, outputs) and P's fragments in registers
/// within each kernel's launch bound: no stack frame, no spills, and no serialized wgmma (ptxas
/// warns when it must wait for each product, C7510 / C7515); the ping-pong kernels use the two
/// named barriers of their turns besides the block's. The same for the kernels whose tiles TMA
/// copies (`at_*`, `cu/attention_tma.cu`), and for the kernels with FlashAttention 3's
/// intra-warpgroup overlap (`af_*`, `cu/attention_fa.cu`; `at_*o`), where ptxas injects at most
/// one wait of its own (C7517: on the never-taken path that keeps the softmax above the products'
/// wait).
#[test]
fn hopper_attention_compiles_to_wgmma_without_spills() {
    if !nvrtc_present() {
        crate::testing::skip(1, "libnvrtc not found");
        return;
    }
    for d in [DType::BF16, DType::F16] {
        let m = ModuleKey::AttentionWg { dtype: d };
        let src = m.source();
        let ty = if d == DType::BF16 { "bf16" } else { "f16" };
        for n in [64, 128] {
            assert!(src.contains(&format!("m64n{n}k16.f32.{ty}.{ty}")), "{m:?} has wgmma of n {n}");
        }
        let (_, log) = resource_report_of(&m.program(&src), 9, 0).unwrap_or_else(|e| panic!("{m:?}: {e}"));
        assert!(!log.contains("C7510") && !log.contains("C7515") && !log.contains("serialized"), "{m:?}:\n{log}");
        let fa = ATTN_FA_TILES.iter().map(|(e, bn, pp)| format!("af_{e}_{bn}{}", if *pp { "p" } else { "" }));
        let tma = ATTN_TMA_TILES.iter().flat_map(|&(e, bn, pp)| {
            TmaMode::ALL.map(|mode| Entry::AttnTma { e16: (e / 16) as u8, bn16: (bn / 16) as u8, pp, mode }.name(&m))
        });
        for name in ATTN_WG_TILES
            .iter()
            .flat_map(|(e, bn)| [format!("aw_{e}_{bn}"), format!("aw_{e}_{bn}p")])
            .chain(fa)
            .chain(tma)
        {
            let at =
                log.find(&format!("entry function '{name}'")).unwrap_or_else(|| panic!("{name} in the report:\n{log}"));
            let tail = &log[at..];
            let end = tail[1..].find("Compiling entry function").map_or(tail.len(), |i| i + 1);
            let part = &tail[..end];
            eprintln!("{m:?} {part}");
            assert!(part.contains("sm_90a"), "{name} ({d}) is built for sm_90a:\n{part}");
            assert!(part.contains("0 bytes stack frame"), "{name} ({d}) uses a stack frame:\n{part}");
            assert!(part.contains("0 bytes spill stores"), "{name} ({d}) spills:\n{part}");
            let turns = ["p", "ps", "pw", "po"].iter().any(|s| name.ends_with(s));
            let barriers = if turns { "used 3 barriers" } else { "used 1 barriers" };
            assert!(part.contains(barriers), "{name} ({d}): {barriers} (the turns' named barriers):\n{part}");
            // ptxas adds a wait for the products only on the never-taken trap path that ends the
            // softmax's block in the kernels with the intra-warpgroup overlap (`af_*`,
            // `cu/attention_fa.cu`; `at_*o`, `cu/attention_tma.cu`), nowhere else.
            let injected = log.lines().filter(|l| l.contains("C7517") && l.contains(&format!("'{name}'"))).count();
            let allowed = usize::from(name.starts_with("af_") || (name.starts_with("at_") && name.ends_with('o')));
            assert!(injected <= allowed, "{name} ({d}): {injected} waits injected by ptxas:\n{log}");
        }
    }
}

/// Hopper's attention tiles fit a block's 227 KiB of shared memory on 9.0, two blocks an SM
/// for head dim 64 with tiles of 64 keys (as its launch bound asks); so do the three stages of
/// the kernels on FlashAttention 3's schedule.
#[test]
fn hopper_attention_tiles_fit_shared_memory() {
    for (e, bn, _) in ATTN_FA_TILES {
        let bytes = attn_fa_bytes(e, bn);
        let blocks = if e * bn <= 64 * 64 { 2 } else { 1 };
        assert!(bytes <= 227 * 1024, "head dim {e}, {bn} keys: {bytes} bytes in a block");
        assert!(blocks * (bytes + 1024) <= 228 * 1024, "head dim {e}, {bn} keys: {bytes} bytes, {blocks} blocks");
        assert_eq!(bytes, 1024 + 2 * 128 * e + 12 * bn * e, "queries, three stages of keys and values");
    }
    for (e, bn) in ATTN_WG_TILES {
        let bytes = attn_wg_bytes(e, bn);
        let blocks = if e * bn <= 64 * 64 { 2 } else { 1 };
        assert!(blocks * (bytes + 1024) <= 228 * 1024, "head dim {e}, {bn} keys: {bytes} bytes");
        assert_eq!(bytes, 1024 + 2 * 128 * e + 8 * bn * e, "queries, two stages of keys and values");
    }
    // The TMA kernels take the same; the producer's a second query slot, one block an SM at
    // head dim 128 (two at 64).
    for (e, bn, pp) in ATTN_TMA_TILES {
        for mode in TmaMode::ALL {
            let entry = Entry::AttnTma { e16: (e / 16) as u8, bn16: (bn / 16) as u8, pp, mode };
            let bytes = entry.dynamic_smem();
            let producer = matches!(mode, TmaMode::Producer | TmaMode::Overlap);
            assert_eq!(mode.persistent(), producer, "{mode:?}");
            let slots = if producer { 2 } else { 1 };
            assert_eq!(bytes, 1024 + slots * 2 * 128 * e + 8 * bn * e, "{entry:?}");
            let blocks = if e * bn <= 64 * 64 { 2 } else { 1 };
            assert!(blocks * (bytes + 1024) <= 228 * 1024, "{entry:?}: {bytes} bytes, {blocks} blocks");
            let threads = [256, 256, 288, 384][TmaMode::ALL.iter().position(|&m| m == mode).unwrap()];
            assert_eq!(entry.occupancy_threads(), threads, "{mode:?}");
        }
    }
}

/// The tensor-core kernel's shared tiles (keys and values, 64 rows of E + 8 halves each) fit
/// the 48 KiB of static shared memory.
#[test]
fn tensor_core_attention_tiles_fit_static_shared_memory() {
    for e in ATTN_MMA_HEAD_DIMS {
        let bytes = 2 * 64 * (e + 8) * 2;
        assert!(bytes <= 48 * 1024, "head dim {e}: {bytes} bytes");
    }
}

/// A view of `shape` with `strides` from byte address `at` (nothing is read).
fn view(dtype: DType, shape: &[usize], strides: &[usize], at: u64) -> crate::kernel::BufferView {
    let ptr = crate::kernel::DevicePtr(at);
    crate::kernel::BufferView { ptr, dtype, shape: shape.into(), strides: strides.into(), offset: 0 }
}

fn dense(shape: &[usize]) -> Vec<usize> {
    let mut st = vec![1; shape.len()];
    for d in (0..shape.len() - 1).rev() {
        st[d] = st[d + 1] * shape[d + 1];
    }
    st
}

/// Compute capabilities the attention tests name.
const AMPERE: (u32, u32) = (8, 6);
const HOPPER: (u32, u32) = (9, 0);

/// Views of an attention case: q `[2, 4, l, e]` (dense or of `q_strides`, at byte `at`), k and v
/// `[2, 2, 100, e | ev]`, dst `[2, 4, l, ev]`.
type AttnCase =
    (crate::kernel::BufferView, crate::kernel::BufferView, crate::kernel::BufferView, crate::kernel::BufferView);
fn attn_case(dtype: DType, l: usize, e: usize, ev: usize, q_strides: Option<Vec<usize>>, at: u64) -> AttnCase {
    let qs = [2, 4, l, e];
    let q = view(dtype, &qs, &q_strides.unwrap_or_else(|| dense(&qs)), at);
    let k = view(dtype, &[2, 2, 100, e], &dense(&[2, 2, 100, e]), 4096);
    let v = view(dtype, &[2, 2, 100, ev], &dense(&[2, 2, 100, ev]), 1 << 20);
    let dst = view(dtype, &[2, 4, l, ev], &dense(&[2, 4, l, ev]), 1 << 24);
    (q, k, v, dst)
}

/// The kernel `choice` takes for case `c` on compute capability `cc` (scale 0.1, no mask).
fn attn_path(choice: crate::config::AttentionKernel, cc: (u32, u32), c: &AttnCase) -> super::fused::AttnPath {
    let (q, k, v, dst) = c;
    let args = super::fused::AttnArgs { q, k, v, mask: None, dst, scale: 0.1, causal: false };
    super::fused::attention_path(choice, cc, &args)
}

/// The keys per tile of Hopper's default kernel at head dim `e` and whether its warpgroups take
/// turns: `wg64`'s at 64, `pp128`'s at 128.
fn hopper_tiles(e: usize) -> (usize, bool) {
    if e == 64 {
        (64, false)
    } else {
        (128, true)
    }
}

/// Hopper's default kernel at head dim `e`: its tiles copied by TMA; at head dim 128 with the
/// softmax overlapping the values' product (`tmaov`).
fn hopper_default(e: usize) -> super::fused::AttnPath {
    let (bn, pp) = hopper_tiles(e);
    let mode = if e == 64 { TmaMode::Phased } else { TmaMode::Overlap };
    super::fused::AttnPath::Tma { e, bn, pp, mode }
}

/// Each named attention kernel runs where it can: a tensor-core kernel only for f16 / bf16 with
/// `E == Ev` of 64 or 128 on compute capability 8.0 or later; on 9.0 Hopper's (wgmma) by default,
/// else the `mma.sync` one; `Fma` always the FMA kernel, `Mma` a tensor-core kernel wherever one
/// applies, `Mma1` the `mma.sync` kernel, `Wg64` / `Wg128` Hopper's with that key tile on 9.0,
/// `Fa128*` Hopper's on FlashAttention 3's schedule (persistent or not, with or without turns),
/// the `Tma*` choices the TMA tiles in their modes; before 9.0 each Hopper choice is the `mma.sync`
/// kernel, and sm_90a code runs on 9.0 only.
#[test]
fn each_attention_kernel_is_taken_where_it_runs() {
    use super::fused::AttnPath;
    use crate::config::AttentionKernel::{
        Auto, Fa128, Fa128g, Fa128n, Fma, Mma, Mma1, Pp128, Pp64, Tma, TmaOv, TmaSync, TmaWs, Wg128, Wg64,
    };
    let path = attn_path;
    for dtype in [DType::BF16, DType::F16] {
        for e in ATTN_MMA_HEAD_DIMS {
            let c = attn_case(dtype, 100, e, e, None, 0);
            let (wg, pp) = (hopper_default(e), hopper_tiles(e).1);
            assert_eq!(path(Auto, AMPERE, &c), AttnPath::Mma(e), "{dtype} E {e}");
            assert_eq!(path(Auto, HOPPER, &c), wg, "{dtype} E {e} on 9.0");
            assert_eq!(path(Mma, HOPPER, &c), wg);
            assert_eq!(path(Mma, (8, 0), &c), AttnPath::Mma(e));
            assert_eq!(path(Mma1, HOPPER, &c), AttnPath::Mma(e), "the mma.sync kernel on 9.0");
            assert_eq!(path(Wg64, HOPPER, &c), AttnPath::Wg { e, bn: 64, pp: false });
            assert_eq!(path(Wg128, HOPPER, &c), AttnPath::Wg { e, bn: 128, pp: false });
            assert_eq!(path(Pp64, HOPPER, &c), AttnPath::Wg { e, bn: 64, pp: true });
            assert_eq!(path(Pp128, HOPPER, &c), AttnPath::Wg { e, bn: 128, pp: true });
            assert_eq!(path(Wg128, AMPERE, &c), AttnPath::Mma(e), "no wgmma before 9.0");
            assert_eq!(path(Pp64, AMPERE, &c), AttnPath::Mma(e));
            let bn = if e == 64 { 64 } else { 128 };
            let fa = |pp, persistent| AttnPath::Fa { e, bn, pp, persistent };
            assert_eq!(path(Fa128, HOPPER, &c), fa(e == 128, true), "turns for head dim 128 only");
            assert_eq!(path(Fa128g, HOPPER, &c), fa(e == 128, false));
            assert_eq!(path(Fa128n, HOPPER, &c), fa(false, true));
            for k in [Fa128, Fa128g, Fa128n] {
                assert_eq!(path(k, AMPERE, &c), AttnPath::Mma(e), "no wgmma before 9.0");
                let few = attn_case(dtype, 40, e, e, None, 0);
                assert_eq!(path(k, HOPPER, &few), fa(k != Fa128n && e == 128, k != Fa128g));
            }
            // The TMA kernels take Auto's tile and turns on 9.0, `tma` in the phased mode (the
            // launch falls back to the Wg kernel where a tensor map does not encode under `Auto`).
            assert_eq!(path(Tma, HOPPER, &c), AttnPath::Tma { e, bn, pp, mode: TmaMode::Phased });
            assert_eq!(path(TmaSync, HOPPER, &c), AttnPath::Tma { e, bn, pp, mode: TmaMode::Sync });
            assert_eq!(path(TmaWs, HOPPER, &c), AttnPath::Tma { e, bn, pp, mode: TmaMode::Producer });
            assert_eq!(path(TmaOv, HOPPER, &c), AttnPath::Tma { e, bn, pp, mode: TmaMode::Overlap });
            let ampere = [Tma, TmaSync, TmaWs, TmaOv].map(|k| path(k, AMPERE, &c));
            assert_eq!(ampere, [AttnPath::Mma(e); 4], "no TMA before 9.0");
            assert_eq!(path(Auto, (10, 0), &c), AttnPath::Mma(e), "sm_90a code runs on 9.0 only");
            assert_eq!(path(Fma, HOPPER, &c), AttnPath::Fma, "forced FMA");
            assert_eq!(path(Auto, (7, 5), &c), AttnPath::Fma, "before sm_80");
        }
    }
}

/// The case decides between the kernels too: scales Hopper's softmax cannot fold, fewer queries
/// than Hopper's kernel starts from (the `mma.sync` kernel), a decode (under `Auto`, fewer than 16
/// queries take the FMA kernel) unless batch × heads fill the device, q / k / v each aligned for
/// its 16-byte copies, an output the tensor cores write with
/// 4-byte stores (last dim contiguous, even strides, 4-byte aligned: contiguous or PyTorch's
/// `[B, L, H, Ev]` memory), the head dims and dtypes with a tensor-core kernel.
#[test]
fn the_attention_kernel_follows_the_case() {
    use super::fused::{attention_path, AttnArgs, AttnPath};
    use crate::config::AttentionKernel::{Auto, Fa128, Mma, Mma1, Tma, Wg128, Wg64};
    let (path, case) = (attn_path, attn_case);
    for dtype in [DType::BF16, DType::F16] {
        for e in ATTN_MMA_HEAD_DIMS {
            let c = case(dtype, 100, e, e, None, 0);
            let wg = hopper_default(e);
            // Scales Hopper's softmax cannot fold (not a positive normal float times log2 e).
            for scale in [0.0, -0.1, 1e-45, f64::INFINITY, f64::NAN] {
                let (q, k, v, dst) = (&c.0, &c.1, &c.2, &c.3);
                let args = AttnArgs { q, k, v, mask: None, dst, scale, causal: true };
                assert_eq!(attention_path(Auto, HOPPER, &args), AttnPath::Mma(e), "scale {scale}");
            }
            // Fewer queries than a Hopper block's half: the mma.sync kernel.
            let few = case(dtype, 40, e, e, None, 0);
            let forced = AttnPath::Wg { e, bn: 64, pp: false };
            assert_eq!((path(Auto, HOPPER, &few), path(Wg64, HOPPER, &few)), (AttnPath::Mma(e), forced));
            // Decoding: few queries take the FMA kernel's key splits unless forced.
            let d = case(dtype, 1, e, e, None, 0);
            assert_eq!((path(Auto, HOPPER, &d), path(Mma, HOPPER, &d)), (AttnPath::Fma, AttnPath::Mma(e)));
            // ... unless batch × heads fill the device: 8 × 32 decoding queries on tensor cores,
            // Hopper's where it runs.
            let (_, k, v, _) = case(dtype, 1, e, e, None, 0);
            let wide = [8, 32, 1, e];
            let (q, dst) = (view(dtype, &wide, &dense(&wide), 0), view(dtype, &wide, &dense(&wide), 1 << 24));
            let wide = (q, k, v, dst);
            assert_eq!(path(Auto, HOPPER, &wide), wg, "a wide decode on 9.0: Hopper's kernel");
            assert_eq!(path(Auto, AMPERE, &wide), AttnPath::Mma(e), "a wide decode");
            // A query viewed from [B, L, H, E] (strides multiples of 8): still tensor cores.
            let t = case(dtype, 100, e, e, Some(vec![100 * 4 * e, e, 4 * e, 1]), 0);
            assert_eq!(path(Auto, AMPERE, &t), AttnPath::Mma(e), "transposed query");
            assert_eq!(path(Auto, HOPPER, &t), wg, "transposed query on 9.0");
            // An output laid out [B, L, H, Ev] (PyTorch's; the tensor layer's): still tensor cores.
            let (q, k, v, _) = case(dtype, 100, e, e, None, 0);
            let bl = |strides: &[usize], at: u64| view(dtype, &[2, 4, 100, e], strides, at);
            let o = (q.clone(), k.clone(), v.clone(), bl(&[100 * 4 * e, e, 4 * e, 1], 1 << 24));
            assert_eq!(
                (path(Auto, AMPERE, &o), path(Auto, HOPPER, &o)),
                (AttnPath::Mma(e), wg),
                "[B, L, H, Ev] output"
            );
            // An output the tensor cores' 4-byte stores cannot write: the FMA kernel writes it.
            for bad in [
                bl(&[100 * 4 * e, e, 4 * e, 1], (1 << 24) + 2),
                bl(&[1, 2 * 100 * e, 2 * e, 2], 1 << 24),
                bl(&[4 * 100 * (e + 1), 100 * (e + 1), e + 1, 1], 1 << 24),
            ] {
                let c = (q.clone(), k.clone(), v.clone(), bad);
                assert_eq!(
                    [path(Auto, HOPPER, &c), path(Mma1, HOPPER, &c), path(Wg64, HOPPER, &c)],
                    [AttnPath::Fma; 3]
                );
            }
            // Misaligned: a start off 16 bytes, a row stride not a multiple of 8, a strided last dim.
            for bad in [
                case(dtype, 100, e, e, None, 8),
                case(dtype, 100, e, e, Some(vec![4 * 100 * (e + 2), 100 * (e + 2), e + 2, 1]), 0),
                case(dtype, 100, e, e, Some(vec![1, 2 * 100 * e, 2 * e, 2]), 0),
            ] {
                let paths = [
                    path(Auto, HOPPER, &bad),
                    path(Mma, HOPPER, &bad),
                    path(Wg128, HOPPER, &bad),
                    path(Fa128, HOPPER, &bad),
                    path(Tma, HOPPER, &bad),
                ];
                assert_eq!(paths, [AttnPath::Fma; 5]);
            }
        }
        // Head dims without a tensor-core kernel, or E != Ev.
        for (e, ev) in [(80, 80), (256, 256), (32, 32), (64, 128), (128, 64)] {
            assert_eq!(path(Mma, HOPPER, &case(dtype, 100, e, ev, None, 0)), AttnPath::Fma, "{e} {ev}");
        }
    }
    for dtype in [DType::F32, DType::F64] {
        assert_eq!(path(Mma, HOPPER, &case(dtype, 100, 64, 64, None, 0)), AttnPath::Fma, "{dtype}");
    }
}

/// Norm rows take 16-byte vectors when the row is a whole number of them and every pointer is
/// aligned (the fewest vectors a thread that hold it), else the scalar register or three-read
/// kernels.
#[test]
fn the_norm_kernel_is_chosen_by_length_and_alignment() {
    use super::fused::norm_entry;
    assert_eq!(norm_entry(4096, 2, true, 256), Entry::NormVec(2));
    assert_eq!(norm_entry(8192, 2, true, 256), Entry::NormVec(4));
    assert_eq!(norm_entry(256, 2, true, 256), Entry::NormVec(1));
    assert_eq!(norm_entry(4096, 4, true, 256), Entry::NormVec(4));
    assert_eq!(norm_entry(100, 4, true, 256), Entry::NormVec(1));
    assert_eq!(norm_entry(4096, 8, true, 256), Entry::NormRegs(16), "past 1024 vectors of two doubles");
    assert_eq!(norm_entry(4096, 2, false, 256), Entry::NormRegs(16), "misaligned");
    assert_eq!(norm_entry(4097, 2, true, 256), Entry::NormRegs(32), "not whole vectors");
    assert_eq!(norm_entry(9000, 2, true, 256), Entry::NormRows);
    // Blocks of 128 (the card's `norm_threads`): twice the vectors or values a thread.
    assert_eq!(norm_entry(4096, 2, true, 128), Entry::NormVec(4));
    assert_eq!(norm_entry(4096, 2, false, 128), Entry::NormRegs(32));
    assert_eq!(norm_entry(8192, 2, true, 128), Entry::NormRows);
    assert_eq!(norm_entry(16384, 2, true, 256), Entry::NormRows, "past 4 vectors a thread");
}
