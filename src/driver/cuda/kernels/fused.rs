//! Norm rows and scaled dot-product attention on the CUDA driver: the kernel and its parameters
//! (`cu/norm.cu`, `cu/attention.cu`, `cu/attention_mma.cu`) and which attention kernel runs a case.

use super::attn_order::{attn_order, swizzle_section, TileGrid};
use super::ctx::{addr, unsupported, Ctx, WaitsWhenTold, PARTIALS};
use super::fused_codegen::acc_dtype;
use super::reduce_layouts::PARTIAL_BYTES;
use super::table::Func;
use super::tma::{tensor_map, TmaMap};
use super::vocab::{
    attn_keys_per_tile, Entry, KernelId, ModuleKey, TmaMode, ATTN_HEAD_DIMS, ATTN_MMA_HEAD_DIMS,
    NORM_VALUES_PER_THREAD, NORM_VECTORS_PER_THREAD, THREADS,
};
use crate::config::AttentionKernel;
use crate::dtype::DType;
use crate::error::Result;
use crate::kernel::BufferView;

/// `NormP` of `cu/norm.cu`.
#[repr(C)]
struct NormP {
    src: u64,
    w: u64,
    b: u64,
    dst: u64,
    rows: i64,
    n: i64,
    eps: f64,
    rms: i32,
    /// Launched early (`WaitsWhenTold`): the kernel waits first then.
    early: i32,
}

impl WaitsWhenTold for NormP {
    fn tell_to_wait(&mut self) {
        self.early = 1;
    }
}

/// The tensor maps of q, k and v (`cu/attention_tma.cu`).
#[repr(C)]
struct AttnMaps {
    q: TmaMap,
    k: TmaMap,
    v: TmaMap,
}

/// `AttnTma` of `cu/attention_tma.cu`: the parameters, then the tensor maps.
#[repr(C)]
struct AttnTma {
    p: AttnP,
    maps: AttnMaps,
}

/// `AttnP` of `cu/attention_params.cu` (field for field): the operands' addresses, sizes and
/// strides in elements (`ost`: the output's, `[B, Hq, L, Ev]` order; kernels write wherever they
/// say).
#[repr(C)]
struct AttnP {
    q: u64,
    k: u64,
    v: u64,
    mask: u64,
    dst: u64,
    part: u64,
    b: i64,
    hq: i64,
    hkv: i64,
    l: i64,
    s: i64,
    e: i64,
    ev: i64,
    qst: [i64; 4],
    kst: [i64; 4],
    vst: [i64; 4],
    mst: [i64; 4],
    /// The output's strides (elements, `[B, Hq, L, Ev]` order): kernels write where they say.
    ost: [i64; 4],
    chunk: i64,
    scale: f64,
    splits: i32,
    mask_kind: i32,
    causal: i32,
    /// The order of the tensor-core kernels' query tiles, with the swizzle's section in its
    /// upper bits ([`attn_order`]).
    order: i32,
}

/// Every field of [`AttnP`] as (name, byte offset, size), and the struct's size: the layout
/// `cu/attention_params.cu`'s struct must have (`fused_tests.rs` checks it).
#[cfg(test)]
pub(super) fn attn_p_layout() -> (Vec<(&'static str, usize, usize)>, usize) {
    fn size<T>(_: fn(&AttnP) -> &T) -> usize {
        std::mem::size_of::<T>()
    }
    macro_rules! fields {
        ($($f:ident),*) => { vec![$((stringify!($f), std::mem::offset_of!(AttnP, $f), size(|p| &p.$f))),*] };
    }
    let fields = fields!(
        q, k, v, mask, dst, part, b, hq, hkv, l, s, e, ev, qst, kst, vst, mst, ost, chunk, scale, splits, mask_kind,
        causal, order
    );
    (fields, std::mem::size_of::<AttnP>())
}

/// [`AttnTma`]'s offsets of its maps of q, k and v and its size: what `cu/attention_tma.cu`'s
/// struct must have (`fused_tests.rs` checks it).
#[cfg(test)]
pub(super) fn attn_tma_layout() -> ([usize; 3], usize) {
    use std::mem::offset_of;
    let m = offset_of!(AttnTma, maps);
    (
        [m + offset_of!(AttnMaps, q), m + offset_of!(AttnMaps, k), m + offset_of!(AttnMaps, v)],
        std::mem::size_of::<AttnTma>(),
    )
}

/// The norm's operands (validated): `src`, `dst` and the parameters must be contiguous.
pub(in crate::driver::cuda) struct NormArgs<'a> {
    pub src: &'a BufferView,
    pub weight: Option<&'a BufferView>,
    pub bias: Option<&'a BufferView>,
    pub dst: &'a BufferView,
    pub dims: usize,
    pub eps: f64,
    pub rms: bool,
}

/// The norm kernel for rows of `n` elements of `size` bytes (`aligned`: every pointer 16-byte
/// aligned) in blocks of `threads`: the fewest 16-byte vectors a thread that hold the row when it
/// is a whole number of vectors and aligned, else the fewest registers that hold it, else three
/// reads of it.
pub(in crate::driver::cuda) fn norm_entry(n: usize, size: usize, aligned: bool, threads: usize) -> Entry {
    let w = 16 / size;
    let vec = NORM_VECTORS_PER_THREAD.iter().find(|&&v| n <= threads * v as usize * w);
    match vec {
        Some(&v) if aligned && n.is_multiple_of(w) => Entry::NormVec(v),
        _ => NORM_VALUES_PER_THREAD
            .iter()
            .find(|&&v| n <= threads * v as usize)
            .map_or(Entry::NormRows, |&v| Entry::NormRegs(v)),
    }
}

/// Queues a layer / RMS norm: a block per row (`cu/norm.cu`), the row held in registers when it
/// fits ([`norm_entry`]), on the card profile's grid and block (`norm_blocks`, `norm_threads`),
/// launched early when its `norm_early` says so.
pub(in crate::driver::cuda) fn norm(c: &Ctx, a: NormArgs<'_>) -> Result<()> {
    let views = [Some(a.src), a.weight, a.bias, Some(a.dst)];
    if views.iter().flatten().any(|v| !v.is_contiguous()) {
        return Err(unsupported("a norm of non-contiguous views (the tensor layer passes contiguous ones)"));
    }
    let r = a.src.shape.len();
    let n: usize = a.src.shape[r - a.dims..].iter().product();
    let rows = (a.src.numel() / n.max(1)) as i64;
    let card = c.card();
    let threads = card.norm_threads.clamp(32, THREADS);
    let aligned = views.iter().flatten().all(|v| addr(v).is_multiple_of(16));
    let entry = norm_entry(n, a.src.dtype.size(), aligned, threads as usize);
    let f = c.kernel(KernelId { module: ModuleKey::Norm { dtype: a.src.dtype }, entry })?;
    let mut p = NormP {
        src: addr(a.src),
        w: a.weight.map_or(0, addr),
        b: a.bias.map_or(0, addr),
        dst: addr(a.dst),
        rows,
        n: n as i64,
        eps: a.eps,
        rms: a.rms as i32,
        early: 0,
    };
    // The card's blocks an SM taking rows in turn, or a block a row (`norm_blocks` 0).
    let cap = match card.norm_blocks {
        0 => i32::MAX as u64,
        per_sm => c.info.sms as u64 * per_sm as u64,
    };
    let grid = (rows as u64).clamp(1, cap) as u32;
    c.run_early_when(card.norm_early != 0, f, (grid, threads), &mut p)
}

/// The attention's operands (validated).
pub(in crate::driver::cuda) struct AttnArgs<'a> {
    pub q: &'a BufferView,
    pub k: &'a BufferView,
    pub v: &'a BufferView,
    pub mask: Option<&'a BufferView>,
    pub dst: &'a BufferView,
    pub scale: f64,
    pub causal: bool,
}

fn strides4(v: &BufferView) -> [i64; 4] {
    [v.strides[0] as i64, v.strides[1] as i64, v.strides[2] as i64, v.strides[3] as i64]
}

/// Queries per block of the attention kernel (`AW` in `cu/attention.cu`).
const QUERIES_PER_BLOCK: u64 = 8;
/// Threads per block of the attention kernels.
const ATTN_THREADS: u32 = 256;

/// Splits of the keys for `tasks` blocks over `s` keys of tiles of `kt`, with `rows` query rows of
/// `ev` values of `acc` bytes in the partials: enough blocks for about four per SM, each split at
/// least four tiles, and the partials within the stream's scratch.
fn key_splits(c: &Ctx, tasks: u64, s: u64, kt: u64, rows: u64, ev: u64, acc: u64) -> u64 {
    let want = (4 * c.info.sms as u64).div_ceil(tasks.max(1));
    let by_len = s / (4 * kt);
    let room = (PARTIALS * PARTIAL_BYTES) as u64 / (rows * (ev + 2) * acc).max(1);
    want.min(by_len).min(room).max(1)
}

/// Which attention kernel runs a case ([`attention_path`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::driver::cuda) enum AttnPath {
    /// The FMA flash kernel (`cu/attention.cu`), with its key splits for few queries.
    Fma,
    /// The tensor-core kernel of head dim `E` (`cu/attention_mma.cu`).
    Mma(usize),
    /// Hopper's tensor-core kernel of head dim `E` with tiles of `BN` keys, its warpgroups taking
    /// turns on the tensor cores when `pp` (`cu/attention_wg.cu`).
    Wg { e: usize, bn: usize, pp: bool },
    /// Hopper's kernel on FlashAttention 3's schedule (`cu/attention_fa.cu`), of head dim `E`
    /// with tiles of `BN` keys, its warpgroups taking turns when `pp`, on a persistent grid (SMs
    /// × blocks an SM) when `persistent`, else a block per query tile.
    Fa { e: usize, bn: usize, pp: bool, persistent: bool },
    /// [`AttnPath::Wg`] with its tiles copied by the Tensor Memory Accelerator
    /// (`cu/attention_tma.cu`), its stages freed and filled as `mode` says;
    /// [`AttnPath::Wg`]'s kernel where the operands' tensor maps do not encode.
    Tma { e: usize, bn: usize, pp: bool, mode: TmaMode },
}

/// Queries from which [`AttentionKernel::Auto`] takes the tensor-core kernel (a block of it
/// covers 64; fewer queries take the FMA kernel, whose key splits fill the device when decoding)
/// unless the blocks fill the device anyway ([`MMA_MIN_BLOCKS`]).
const MMA_MIN_QUERIES: usize = 16;
/// Blocks (batch × query heads × query tiles) from which [`AttentionKernel::Auto`] takes the
/// tensor-core kernel even for fewer than [`MMA_MIN_QUERIES`] queries (Hopper's on 9.0): about
/// one per SM of a large card, where the FMA kernel's key splits no longer buy parallelism
/// (measured on an H100, BENCHMARKS.md: a decode of B 8 × H 32 ran 4.2 × faster on tensor cores).
const MMA_MIN_BLOCKS: usize = 128;
/// Queries from which [`AttentionKernel::Auto`] and [`AttentionKernel::Mma`] take Hopper's
/// kernel on compute capability 9.0 (a block of it covers 128; fewer take the `mma.sync`
/// kernel, whose blocks of 64 waste less when decoding).
const WG_MIN_QUERIES: usize = 64;
/// Keys per tile of Hopper's kernel by head dim, and whether its warpgroups take turns, unless
/// chosen ([`AttentionKernel::Wg64`], [`AttentionKernel::Pp128`]): head dim 64 runs two blocks
/// an SM, whose products and softmax interleave anyway; 128 runs one, whose two warpgroups would
/// otherwise compute their softmax at once while the tensor cores wait.
fn wg_default(e: usize) -> (usize, bool) {
    if e <= 64 {
        (64, false)
    } else {
        (128, true)
    }
}
/// The mode of the TMA tiles that `Auto` and `Mma` take by head dim on 9.0: 128 overlaps each
/// tile's softmax with the values' product on persistent blocks ([`TmaMode::Overlap`]: H100, E128
/// causal 0.244 ms against `Phased`'s 0.278 and PyTorch's 0.260 in one run; BENCHMARKS.md); 64
/// keeps its two blocks an SM ([`TmaMode::Phased`]; `Overlap`'s 384 threads fit one: 0.081 ms
/// against 0.067).
fn tma_default(e: usize) -> TmaMode {
    if e <= 64 {
        TmaMode::Phased
    } else {
        TmaMode::Overlap
    }
}
/// Keys per tile of the FlashAttention 3 schedule's kernel by head dim, and whether its
/// warpgroups take turns unless chosen ([`AttentionKernel::Fa128n`]): head dim 64 runs two blocks
/// an SM (tiles of 64 keys keep its registers within 128 a thread), 128 one.
pub(in crate::driver::cuda) fn fa_default(e: usize) -> (usize, bool) {
    if e <= 64 {
        (64, false)
    } else {
        (128, true)
    }
}
/// Queries and keys from which Hopper's kernel is not used (its indices are ints).
const WG_MAX_LEN: usize = 1 << 30;
/// Row strides (elements) from which Hopper's kernel is not used (its tile offsets are ints).
const WG_MAX_ROW_STRIDE: usize = 1 << 24;
/// Query rows per block of Hopper's kernel (`AW_ROWS` in `cu/attention_wg.cu`).
const WG_ROWS: u64 = 128;
/// Threads per block of Hopper's kernel (`AW_THREADS`).
const WG_THREADS: u32 = 256;
/// Query rows per block of the tensor-core kernel (`AM_ROWS` in `cu/attention_mma.cu`).
const MMA_ROWS: u64 = 64;
/// Threads per block of the tensor-core kernel (`AM_THREADS`).
const MMA_THREADS: u32 = 128;

/// Whether the tensor-core kernels may write `dst`: its last dim contiguous, its other strides
/// (of dims longer than 1) even and its start 4-byte aligned (their 4-byte stores of two values).
fn out_aligned(dst: &BufferView) -> bool {
    dst.strides[3] == 1
        && (0..3).all(|d| dst.shape[d] == 1 || dst.strides[d].is_multiple_of(2))
        && addr(dst).is_multiple_of(4)
}

/// The kernel for `a` on a device of compute capability `major.minor` under `choice`: a
/// tensor-core kernel where it applies — f16 / bf16, `E == Ev` of 64 or 128, compute capability
/// 8.0 or later, q, k, v each with a contiguous last dim, its other strides (of dims longer
/// than 1) multiples of 8 elements and a 16-byte aligned start (its 16-byte copies and 4-byte
/// loads), and an output as [`out_aligned`] — unless `choice` is `Fma`, and under `Auto` only from [`MMA_MIN_QUERIES`] queries or
/// [`MMA_MIN_BLOCKS`] blocks; every other case the FMA kernel. The tensor-core kernel is
/// Hopper's (wgmma) on compute capability 9.0 from [`WG_MIN_QUERIES`] queries, under `Auto` for a
/// decode of [`MMA_MIN_BLOCKS`] blocks too (any number when `choice` names its tile), else the
/// `mma.sync` kernel; under `Auto` and `Mma` Hopper's kernel is the one whose tiles TMA copies
/// (`Tma`: H100, E128 causal 0.282 ms against `pp128`'s 0.330 in one run; BENCHMARKS.md), in the
/// head dim's mode ([`tma_default`]).
pub(in crate::driver::cuda) fn attention_path(
    choice: AttentionKernel,
    (major, minor): (u32, u32),
    a: &AttnArgs<'_>,
) -> AttnPath {
    let (l, e, ev) = (a.q.shape[2], a.q.shape[3], a.v.shape[3]);
    let aligned = |v: &BufferView| {
        v.strides[3] == 1
            && (0..3).all(|d| v.shape[d] == 1 || v.strides[d].is_multiple_of(8))
            && addr(v).is_multiple_of(16)
    };
    let fits = matches!(a.q.dtype, DType::F16 | DType::BF16)
        && e == ev
        && ATTN_MMA_HEAD_DIMS.contains(&e)
        && major >= 8
        && [a.q, a.k, a.v].into_iter().all(aligned)
        && out_aligned(a.dst);
    // Hopper's kernel indexes queries and keys of a (batch, head), and rows within a tile, with ints.
    let small = |v: &BufferView| v.strides[2] < WG_MAX_ROW_STRIDE;
    // (Mask tensors take the mma.sync kernel: its registers hold their reads.)
    // (And its softmax scales the maxima of raw scores by the scale times log2 e in float: a
    // positive normal one keeps their order and -inf.)
    let sl2 = a.scale * std::f64::consts::LOG2_E;
    let hopper = (major, minor) == (9, 0)
        && a.mask.is_none()
        && (f32::MIN_POSITIVE as f64..=f32::MAX as f64).contains(&sl2)
        && l.max(a.k.shape[2]) < WG_MAX_LEN
        && [a.q, a.k, a.v].into_iter().all(small);
    let wg = |bn, pp| AttnPath::Wg { e, bn, pp };
    let fa = |pp, persistent| AttnPath::Fa { e, bn: fa_default(e).0, pp, persistent };
    let (bn, pp) = wg_default(e);
    // Hopper's kernel with its tiles copied by TMA (`Wg`'s kernel where the maps do not encode).
    let tma = |mode| AttnPath::Tma { e, bn, pp, mode };
    let tensor = if hopper && l >= WG_MIN_QUERIES { tma(tma_default(e)) } else { AttnPath::Mma(e) };
    match choice {
        _ if !fits => AttnPath::Fma,
        AttentionKernel::Fma => AttnPath::Fma,
        AttentionKernel::Mma1 => AttnPath::Mma(e),
        AttentionKernel::Wg64 if hopper => wg(64, false),
        AttentionKernel::Wg128 if hopper => wg(128, false),
        AttentionKernel::Pp64 if hopper => wg(64, true),
        AttentionKernel::Pp128 if hopper => wg(128, true),
        AttentionKernel::Fa128 if hopper => fa(fa_default(e).1, true),
        AttentionKernel::Fa128g if hopper => fa(fa_default(e).1, false),
        AttentionKernel::Fa128n if hopper => fa(false, true),
        AttentionKernel::Tma if hopper => tma(TmaMode::Phased),
        AttentionKernel::TmaSync if hopper => tma(TmaMode::Sync),
        AttentionKernel::TmaWs if hopper => tma(TmaMode::Producer),
        AttentionKernel::TmaOv if hopper => tma(TmaMode::Overlap),
        AttentionKernel::Wg64
        | AttentionKernel::Wg128
        | AttentionKernel::Pp64
        | AttentionKernel::Pp128
        | AttentionKernel::Fa128
        | AttentionKernel::Fa128g
        | AttentionKernel::Fa128n
        | AttentionKernel::Tma
        | AttentionKernel::TmaSync
        | AttentionKernel::TmaWs
        | AttentionKernel::TmaOv => AttnPath::Mma(e),
        AttentionKernel::Mma => tensor,
        AttentionKernel::Auto if l >= MMA_MIN_QUERIES => tensor,
        // A decode whose (batch, head)s fill the device reads its keys and values once: Hopper's
        // kernel streams them faster than the mma.sync kernel (B 8 × H 32, S 8192, E 128 on an
        // H100: 0.356 ms against 0.416; BENCHMARKS.md), the 128-query tile's idle rows cost no
        // bandwidth.
        AttentionKernel::Auto if a.q.shape[0] * a.q.shape[1] * l.div_ceil(MMA_ROWS as usize) >= MMA_MIN_BLOCKS => {
            if hopper {
                tma(tma_default(e))
            } else {
                AttnPath::Mma(e)
            }
        }
        AttentionKernel::Auto => AttnPath::Fma,
    }
}

/// The query-tile order code ([`attn_order`]) of a tensor-core launch for `a` of `rows` queries a
/// block whose kernel fits `blocks` blocks an SM: the chosen order, with swizzle sections
/// ([`swizzle_section`]) from the keys and values a query head reads (its key head's, shared by
/// Hq / Hkv of them) and the device's L2 cache, or as many heads as `CUDASEM_BENCH_TUNING`'s
/// `swizzle_heads` names.
fn tile_order(c: &Ctx, a: &AttnArgs<'_>, rows: u64, blocks: u32) -> i32 {
    let [b, hq, l, e] = [0, 1, 2, 3].map(|d| a.q.shape[d] as u64);
    let (hkv, s, ev) = (a.k.shape[1] as u64, a.k.shape[2] as u64, a.v.shape[3] as u64);
    let head_kv = s * (e + ev) * a.q.dtype.size() as u64 / (hq / hkv.max(1)).max(1);
    let grid = TileGrid { heads: b * hq, qtiles: l.div_ceil(rows), slots: c.info.sms as u64 * blocks as u64 };
    let section = match c.ops.tuning.card_overrides().swizzle_heads {
        Some(heads) => heads as u64,
        None => swizzle_section(grid, head_kv, c.info.card.facts.l2_bytes as u64),
    };
    attn_order(c.ops.tuning.attention_order(), a.causal, section)
}

/// The tensor maps of `a`'s q, k and v for tiles of `bn` keys, or `None` where one does not encode.
fn tensor_maps(a: &AttnArgs<'_>, bn: usize) -> Option<AttnMaps> {
    Some(AttnMaps {
        q: tensor_map(a.q, WG_ROWS as u32)?,
        k: tensor_map(a.k, bn as u32)?,
        v: tensor_map(a.v, bn as u32)?,
    })
}

/// The TMA kernel's tensor maps for `a` (tiles of `bn` keys) in `mode`, or `None` where they do not
/// encode: then the kernel that copies by itself runs — unless `CUDASEM_SDPA_KERNEL` named a TMA
/// kernel, which fails instead, so that a test or a benchmark under it learns that it did not run.
fn tma_maps(c: &Ctx, a: &AttnArgs<'_>, bn: usize, mode: TmaMode) -> Result<Option<(AttnMaps, TmaMode)>> {
    if let Some(m) = tensor_maps(a, bn) {
        return Ok(Some((m, mode)));
    }
    // Only `Auto` and `Mma` take the TMA path by themselves; every other choice reaching it named
    // a TMA kernel.
    if matches!(c.ops.tuning.attention(), AttentionKernel::Auto | AttentionKernel::Mma) {
        return Ok(None);
    }
    Err(unsupported(format!(
        "CUDASEM_SDPA_KERNEL named the TMA attention kernel, but the driver encoded no tensor map for these \
         operands (q {:?} strides {:?}, k {:?} strides {:?}, v {:?} strides {:?}); `auto` takes the copying \
         kernel for them",
        a.q.shape, a.q.strides, a.k.shape, a.k.strides, a.v.shape, a.v.strides
    )))
}

/// Blocks of a tensor-core launch over `tasks` query tiles: a block each, or with `persistent` one
/// wave of `f`'s blocks (SMs × blocks an SM) that take them all; at most a grid's 2^31 − 1.
fn task_grid(c: &Ctx, f: Func, tasks: u64, persistent: bool) -> u32 {
    let wave = c.info.sms as u64 * f.blocks_per_sm as u64;
    if persistent { tasks.min(wave) } else { tasks }.clamp(1, i32::MAX as u64) as u32
}

/// Queues attention: the tensor-core kernel where [`attention_path`] picks it, else the FMA
/// flash kernel over (query tile, head, batch, key split), and with several splits the merge of
/// their partials (flash-decoding).
pub(in crate::driver::cuda) fn attention(c: &Ctx, a: AttnArgs<'_>) -> Result<()> {
    let (b, hq, l, e) = (a.q.shape[0], a.q.shape[1], a.q.shape[2], a.q.shape[3]);
    let (hkv, s, ev) = (a.k.shape[1], a.k.shape[2], a.v.shape[3]);
    let dtype = a.q.dtype;
    let mask_kind = match a.mask {
        None => 0,
        Some(m) if m.dtype == DType::Bool => 1,
        Some(_) => 2,
    };
    let mut p = AttnP {
        q: addr(a.q),
        k: addr(a.k),
        v: addr(a.v),
        mask: a.mask.map_or(0, addr),
        dst: addr(a.dst),
        part: 0,
        b: b as i64,
        hq: hq as i64,
        hkv: hkv as i64,
        l: l as i64,
        s: s as i64,
        e: e as i64,
        ev: ev as i64,
        qst: strides4(a.q),
        kst: strides4(a.k),
        vst: strides4(a.v),
        mst: a.mask.map_or([0; 4], strides4),
        ost: strides4(a.dst),
        chunk: 0,
        scale: a.scale,
        splits: 1,
        mask_kind,
        causal: a.causal as i32,
        order: 0,
    };
    let Some(&ep) = ATTN_HEAD_DIMS.iter().find(|&&d| d >= e.max(ev)) else {
        return Err(unsupported(format!("attention head dims {e} and {ev}")));
    };
    match attention_path(c.ops.tuning.attention(), (c.info.major, c.info.minor), &a) {
        AttnPath::Mma(e) => {
            let module = ModuleKey::AttentionMma { dtype };
            let f = c.kernel(KernelId { module, entry: Entry::AttnMma((e / 16) as u8) })?;
            p.order = tile_order(c, &a, MMA_ROWS, f.blocks_per_sm);
            let tasks = (l as u64).div_ceil(MMA_ROWS) * (b * hq) as u64;
            return c.run_threads(f, task_grid(c, f, tasks, false), MMA_THREADS, &mut p);
        }
        path @ (AttnPath::Wg { e, bn, pp } | AttnPath::Tma { e, bn, pp, .. }) => {
            let maps = if let AttnPath::Tma { mode, .. } = path { tma_maps(c, &a, bn, mode)? } else { None };
            let (e16, bn16) = ((e / 16) as u8, (bn / 16) as u8);
            let entry = match maps {
                Some((_, mode)) => Entry::AttnTma { e16, bn16, pp, mode },
                None => Entry::AttnWg { e16, bn16, pp },
            };
            let f = c.kernel(KernelId { module: ModuleKey::AttentionWg { dtype }, entry })?;
            p.order = tile_order(c, &a, WG_ROWS, f.blocks_per_sm);
            let tasks = (l as u64).div_ceil(WG_ROWS) * (b * hq) as u64;
            let smem = entry.dynamic_smem() as u32;
            return match maps {
                Some((maps, mode)) => {
                    let grid = task_grid(c, f, tasks, mode.persistent());
                    c.run_shared(f, grid, mode.threads(), smem, &mut AttnTma { p, maps })
                }
                None => c.run_shared(f, task_grid(c, f, tasks, false), WG_THREADS, smem, &mut p),
            };
        }
        AttnPath::Fa { e, bn, pp, persistent } => {
            let module = ModuleKey::AttentionWg { dtype };
            let entry = Entry::AttnFa { e16: (e / 16) as u8, bn16: (bn / 16) as u8, pp };
            let f = c.kernel(KernelId { module, entry })?;
            let tasks = (l as u64).div_ceil(WG_ROWS) * (b * hq) as u64;
            let grid = task_grid(c, f, tasks, persistent);
            return c.run_shared(f, grid, WG_THREADS, entry.dynamic_smem() as u32, &mut p);
        }
        AttnPath::Fma => {}
    }
    let acc = acc_dtype(dtype).size();
    let kt = attn_keys_per_tile(ep, acc) as u64;
    let rows = (b * hq * l) as u64;
    let tasks = (l as u64).div_ceil(QUERIES_PER_BLOCK) * (b * hq) as u64;
    let splits = key_splits(c, tasks, s as u64, kt, rows, ev as u64, acc as u64);
    let chunk = (s as u64).div_ceil(splits).div_ceil(kt).max(1) * kt;
    let splits = (s as u64).div_ceil(chunk).max(1);
    p.part = if splits > 1 { c.reduce_scratch()?.0 } else { 0 };
    p.chunk = chunk as i64;
    p.splits = splits as i32;
    let module = ModuleKey::Attention { dtype };
    let f = c.kernel(KernelId { module, entry: Entry::Attn((ep / 32) as u8) })?;
    let grid = (tasks * splits).clamp(1, i32::MAX as u64) as u32;
    c.run_threads(f, grid, ATTN_THREADS, &mut p)?;
    if splits > 1 {
        let merge = c.kernel(KernelId { module, entry: Entry::AttnMerge })?;
        let blocks = rows.div_ceil((ATTN_THREADS / 32) as u64).clamp(1, c.info.sms as u64 * 16) as u32;
        c.run_threads(merge, blocks, ATTN_THREADS, &mut p)?;
    }
    Ok(())
}
