//! The vocabulary the generator and the launchers share: which module a kernel lives in
//! ([`ModuleKey`]), its entry points ([`Entry`], [`KernelId`]) and their `extern "C"` names, the
//! elementwise functions ([`EwOp`]), and the limits every kernel is compiled against.

use super::reduce_layouts::wide_block;
use super::softmax_layouts::{
    softmax_big_layouts, softmax_layouts, softmax_mid_layouts, softmax_raw_layouts, softmax_value_bytes, softmax_vec,
};
use crate::dtype::DType;
use crate::kernel::{BinaryOp, ReduceOp, UnaryOp};

/// The most (collapsed) dimensions a kernel's shape/stride arrays hold.
pub(in crate::driver::cuda) const MAXD: usize = 16;

/// Threads per block of every kernel (each is compiled with `__launch_bounds__(THREADS)`).
pub(in crate::driver::cuda) const THREADS: u32 = 256;
/// The largest grid launched with programmatic stream serialization (`Ctx::programmatic`), and
/// the largest whose blocks run `cs_enter`'s instructions (`CS_PDL_MAX_GRID` in cu/common.cu).
pub(in crate::driver::cuda) const PDL_MAX_GRID: u32 = 1024;

/// Values per thread of the register-held norm rows (rows of up to 256 times as many elements).
pub(in crate::driver::cuda) const NORM_VALUES_PER_THREAD: [u8; 2] = [16, 32];
/// 16-byte vectors per thread of the vectorized norm rows (rows of up to 256 times as many
/// vectors).
pub(in crate::driver::cuda) const NORM_VECTORS_PER_THREAD: [u8; 3] = [1, 2, 4];

/// The padded head dims an attention module has a kernel for (the smallest holding `E` and `Ev`).
pub(in crate::driver::cuda) const ATTN_HEAD_DIMS: [usize; 3] = [64, 128, 256];

/// The head dims (`E == Ev`) of the tensor-core attention kernels (`cu/attention_mma.cu`).
pub(in crate::driver::cuda) const ATTN_MMA_HEAD_DIMS: [usize; 2] = [64, 128];
/// (Head dim, keys per tile) of the Hopper tensor-core attention kernels (`cu/attention_wg.cu`),
/// one entry point each.
pub(in crate::driver::cuda) const ATTN_WG_TILES: [(usize, usize); 4] = [(64, 64), (64, 128), (128, 64), (128, 128)];

/// Dynamic shared memory of the Hopper attention kernel of head dim `e` and `bn` keys per tile:
/// 128 queries, two stages of keys and values (16-bit elements), and 1 KiB to align the tiles
/// to the 1024 bytes of their swizzle pattern.
pub(in crate::driver::cuda) const fn attn_wg_bytes(e: usize, bn: usize) -> usize {
    1024 + 128 * e * 2 + 4 * bn * e * 2
}

/// How the TMA attention kernel (`cu/attention_tma.cu`) frees and fills its stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(in crate::driver::cuda) enum TmaMode {
    /// A block per query tile; thread 0 issues the copies, each slot freed by `empty` mbarriers
    /// (`at_tile`, no suffix).
    Phased,
    /// [`TmaMode::Phased`] with a block barrier a tile freeing the slot (`at_tile`, `s`).
    Sync,
    /// Persistent blocks with a producer warp issuing every copy (`at_ws`, `w`).
    Producer,
    /// [`TmaMode::Producer`] with FlashAttention 3's intra-warpgroup overlap: each tile's softmax
    /// beside the previous tile's values product, keys and values freed apart, the producer a
    /// warpgroup handing its registers to the others (`at_ws` with `OV`, `o`).
    Overlap,
}

impl TmaMode {
    /// Every mode, in the order of their entry points.
    pub(in crate::driver::cuda) const ALL: [TmaMode; 4] =
        [TmaMode::Phased, TmaMode::Sync, TmaMode::Producer, TmaMode::Overlap];

    /// The entry point's suffix.
    pub(in crate::driver::cuda) fn suffix(self) -> &'static str {
        match self {
            TmaMode::Phased => "",
            TmaMode::Sync => "s",
            TmaMode::Producer => "w",
            TmaMode::Overlap => "o",
        }
    }

    /// Whether the mode runs persistent blocks with a producer (`at_ws`): a second query slot,
    /// the producer's threads, a grid of one wave.
    pub(in crate::driver::cuda) fn persistent(self) -> bool {
        matches!(self, TmaMode::Producer | TmaMode::Overlap)
    }

    /// Threads of a block: the two warpgroups ([`THREADS`]) and the producer's warp, or with
    /// the overlap its warpgroup (whose registers it hands to the others).
    pub(in crate::driver::cuda) fn threads(self) -> u32 {
        match self {
            TmaMode::Phased | TmaMode::Sync => THREADS,
            TmaMode::Producer => THREADS + 32,
            TmaMode::Overlap => THREADS + 128,
        }
    }
}

/// (Head dim, keys per tile, warpgroups taking turns) of the Hopper attention kernels on
/// FlashAttention 3's schedule (`cu/attention_fa.cu`), one entry point each.
pub(in crate::driver::cuda) const ATTN_FA_TILES: [(usize, usize, bool); 3] =
    [(64, 64, false), (128, 128, true), (128, 128, false)];

/// (Head dim, keys per tile, warpgroups taking turns) of the Hopper attention kernels whose tiles
/// the Tensor Memory Accelerator copies (`cu/attention_tma.cu`): each head dim's tile and turns
/// of the kernel they replace (`fused::wg_default`); two entry points each (with and without a
/// block barrier a tile). Their shared memory is [`attn_wg_bytes`]'s.
pub(in crate::driver::cuda) const ATTN_TMA_TILES: [(usize, usize, bool); 2] = [(64, 64, false), (128, 128, true)];

/// Dynamic shared memory of the Hopper attention kernel on FlashAttention 3's schedule of head
/// dim `e` and `bn` keys per tile: 128 queries, three stages of keys and values (16-bit
/// elements), and 1 KiB to align the tiles to the 1024 bytes of their swizzle pattern.
pub(in crate::driver::cuda) const fn attn_fa_bytes(e: usize, bn: usize) -> usize {
    1024 + 128 * e * 2 + 6 * bn * e * 2
}

/// Keys per shared-memory tile of attention's kernel for head dims padded to `ep`, with
/// accumulators of `acc_bytes` bytes (the tiles of keys and values fit the 48 KiB of static
/// shared memory).
pub(in crate::driver::cuda) fn attn_keys_per_tile(ep: usize, acc_bytes: usize) -> usize {
    match (ep, acc_bytes) {
        (64, _) => 32,
        (128, 4) => 32,
        (128, _) => 16,
        (_, 4) => 16,
        _ => 4,
    }
}

/// The elementwise functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(in crate::driver::cuda) enum EwOp {
    /// Every element set to the parameter's bits (dtype: a raw type of the element size).
    Fill,
    /// A copy of raw elements of one size.
    Copy,
    /// A dtype conversion.
    Cast,
    /// A unary function computed in the output dtype.
    Unary(UnaryOp),
    /// A binary function computed in the given dtype.
    Binary(BinaryOp, DType),
    /// `cond ? a : b`.
    Where,
    /// A jiterator function (`jit.rs`) of at most three inputs and one output.
    Jit(JitKey),
}

/// A jiterator function's elementwise module: the function's id in the process (`jit::intern`),
/// its number of tensor inputs, and the output this module writes (the only one: a function of
/// several outputs, or of more inputs, has a [`ModuleKey::JitMulti`] module).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(in crate::driver::cuda) struct JitKey {
    pub code: u32,
    pub nin: u8,
    pub out: u8,
}

impl EwOp {
    /// Number of inputs.
    pub(in crate::driver::cuda) fn inputs(self) -> usize {
        match self {
            EwOp::Fill => 0,
            EwOp::Copy | EwOp::Cast | EwOp::Unary(_) => 1,
            EwOp::Binary(..) => 2,
            EwOp::Where => 3,
            EwOp::Jit(k) => k.nin as usize,
        }
    }

    /// Whether the function's vectors per thread, and how many of them its fast kernel takes at a
    /// time, are the card's (`heavy_vectors`, `heavy_unroll`: `elementwise_policy::ew_heavy`):
    /// half-type `sin` and `cos`, f16 `tanh`, f32 `pow`. Their modules also hold the fast kernel
    /// that takes one vector at a time ([`Entry::FastOne`]).
    pub(in crate::driver::cuda) fn card_vectors(self, out: DType) -> bool {
        let half = matches!(out, DType::F16 | DType::BF16);
        match self {
            EwOp::Unary(UnaryOp::Sin | UnaryOp::Cos) => half,
            EwOp::Unary(UnaryOp::Tanh) => out == DType::F16,
            EwOp::Binary(BinaryOp::Pow, c) => c.is_float() && out == DType::F32,
            _ => false,
        }
    }
}

/// Fast kernels of an elementwise op: masks `0..fast_masks(op)` (every combination of broadcast
/// inputs).
pub(in crate::driver::cuda) fn fast_masks(op: EwOp) -> u8 {
    1 << op.inputs()
}

/// What one compiled module holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(in crate::driver::cuda) enum ModuleKey {
    /// An elementwise op: `out` and up to three input dtypes (unused ones are `Bool`).
    Elementwise { op: EwOp, out: DType, ins: [DType; 3] },
    /// A reduction from `src` into `dst`; with `values`, an arg-reduction that also writes the
    /// extreme's value (in `src`'s dtype) to a second output.
    Reduce { op: ReduceOp, src: DType, dst: DType, values: bool },
    /// Softmax or log-softmax from `src` into `dst`.
    Softmax { src: DType, dst: DType, log: bool },
    /// A row vector times a matrix of `dtype`, row-major or column-major (`gemv.rs`).
    Gemv { dtype: DType },
    /// Layer / RMS norm rows of `dtype` (`norm.rs`).
    Norm { dtype: DType },
    /// Scaled dot-product attention of `dtype` (`attention.rs`).
    Attention { dtype: DType },
    /// Tensor-core scaled dot-product attention of `dtype` (f16 or bf16; `cu/attention_mma.cu`).
    AttentionMma { dtype: DType },
    /// Hopper tensor-core scaled dot-product attention of `dtype` (f16 or bf16, wgmma; compiled
    /// for sm_90a only, `cu/attention_wg.cu`).
    AttentionWg { dtype: DType },
    /// Random draws of a distribution into `dtype`, `e` elements per Philox block (`random.rs`).
    Random { dist: RandKind, dtype: DType, e: u8 },
    /// A jiterator function (its id, `jit::intern`) of up to [`JIT_INPUTS`] inputs of dtypes
    /// `ins` (unused ones `Bool`) and any number of outputs of dtype `out`, all computed by one
    /// kernel (`jit.rs`).
    JitMulti { code: u32, out: DType, ins: [DType; JIT_INPUTS] },
}

/// The most inputs (and outputs) of a [`ModuleKey::JitMulti`] kernel (the jiterator's limit,
/// PyTorch's).
pub(in crate::driver::cuda) const JIT_INPUTS: usize = 8;

/// The distributions of a random module (`DIST` in `cu/random_head.cu`: the discriminant).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(in crate::driver::cuda) enum RandKind {
    Uniform = 0,
    Normal = 1,
    Exponential = 2,
    Bernoulli = 3,
    Dropout = 4,
    Integers = 5,
    Multinomial = 6,
    Permutation = 7,
}

/// A kernel of a module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(in crate::driver::cuda) enum Entry {
    /// Elementwise over contiguous operands; bit `i` of the mask: input `i` is one broadcast element.
    Fast(u8),
    /// [`Entry::Fast`] over at most one block of elements: a thread each.
    Tiny(u8),
    /// [`Entry::Fast`] taking one vector at a time where it takes two (the modules of
    /// [`EwOp::card_vectors`] only).
    FastOne(u8),
    /// Elementwise over strided operands.
    Strided,
    /// Elementwise over two collapsed dims with a dense output (broadcast rows and columns,
    /// strided inputs).
    Two,
    /// [`Entry::Two`] with a transposed input: square tiles through shared memory (`elementwise_policy::tile_edge`,
    /// two-byte elements in pairs where `elementwise_policy::tile_pairs` says).
    Tile,
    /// One block per (output, split) task.
    Block,
    /// [`Entry::Block`] with the next four loads of a thread in flight while it adds the four
    /// before them (`reduce_layouts::wide_block`).
    BlockWide,
    /// One warp per output.
    Warp,
    /// One thread per (output, split) task.
    Thread,
    /// Blocks of `COLX` × `256 / COLX` threads (`reduce_layouts::cols_x`) over (`COLX` groups of `w`
    /// adjacent outputs, a split of the rows):
    /// reductions over an outer dim (`w` is 1 or the module's `VEC`).
    Cols(u8),
    /// Softmax rows: by `g` lanes of a warp (`g == 0`: the block) holding each row in
    /// registers, `w` elements per access and `ch` chunks per thread; `ch == 0`: by the block in
    /// two passes.
    Rows { g: u8, w: u8, ch: u8 },
    /// Softmax rows by a block of 1,024 threads holding each row in registers, `w` elements
    /// per access, `ch` chunks per thread.
    BigRows { w: u8, ch: u8 },
    /// Softmax rows by a block of `SOFTMAX_MID_THREADS` (`softmax_layouts.rs`) threads holding each row in registers,
    /// `w` elements per access, `ch` chunks per thread.
    MidRows { w: u8, ch: u8 },
    /// Softmax rows by a block of `SOFTMAX_RAW_THREADS` (`softmax_layouts.rs`) threads holding each row's raw
    /// elements (a half type's, half the registers of their `float` values) in registers, `w`
    /// elements per access, `ch` chunks per thread.
    RawRows { w: u8, ch: u8 },
    /// Softmax of few long rows split over blocks, pass one: each (row, split) task's running
    /// maximum and sum to the stream's partials (`w` elements per access).
    SplitStats(u8),
    /// Softmax rows by a block each in two passes, `w` elements per access from each row's first
    /// 16-byte boundary on (rows of any length, input and output rows at one offset from it).
    LeadRows(u8),
    /// Pass two of [`Entry::SplitStats`]: each task merges its row's partials and writes its
    /// split's outputs.
    SplitOut(u8),
    /// A row vector times a row-major matrix: blocks of a tile of columns over a split of the rows.
    Gemv,
    /// [`Entry::Gemv`] with groups of eight rows a lane and four blocks an SM (the card's
    /// `gemv_rows` bit 4).
    Gemv8,
    /// A row vector times a column-major matrix: a warp per output.
    GemvDots,
    /// Norm rows: a block per row, read three times.
    NormRows,
    /// Norm rows of at most 256 · `vpt` elements: a block per row, held in registers.
    NormRegs(u8),
    /// Norm rows of at most 256 · `vv` 16-byte vectors: a block per row, read and written as
    /// vectors, held in registers.
    NormVec(u8),
    /// Attention tiles with head dims padded to `32 · ep32` (`attention.rs`).
    Attn(u8),
    /// The merge of attention's split partials: a warp per query row.
    AttnMerge,
    /// Tensor-core attention tiles of head dim `16 · e16` (`cu/attention_mma.cu`).
    AttnMma(u8),
    /// Hopper tensor-core attention tiles of head dim `16 · e16` and `16 · bn16` keys, with `pp`
    /// the two warpgroups taking turns on the tensor cores (`cu/attention_wg.cu`).
    AttnWg { e16: u8, bn16: u8, pp: bool },
    /// [`Entry::AttnWg`] on FlashAttention 3's schedule: persistent blocks, three stages, each
    /// warpgroup's softmax beside its previous tile's values product (`cu/attention_fa.cu`).
    AttnFa { e16: u8, bn16: u8, pp: bool },
    /// [`Entry::AttnWg`] with its tiles copied by the Tensor Memory Accelerator into
    /// mbarrier-phased stages, freed and filled as `mode` says (`cu/attention_tma.cu`).
    AttnTma { e16: u8, bn16: u8, pp: bool, mode: TmaMode },
    /// Random draws: a thread per Philox block (`rnd`).
    Random,
    /// A jiterator function's every output from its inputs: a thread per element (`jm`).
    JitMulti,
}

/// One kernel: its module and entry point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(in crate::driver::cuda) struct KernelId {
    pub module: ModuleKey,
    pub entry: Entry,
}

impl Entry {
    /// The kernel's `extern "C"` name.
    pub(in crate::driver::cuda) fn name(self, module: &ModuleKey) -> String {
        let prefix = match module {
            ModuleKey::Elementwise { .. } => "ew",
            ModuleKey::Reduce { .. } => "red",
            ModuleKey::Softmax { .. } => "sm",
            ModuleKey::Gemv { .. } => "gv",
            ModuleKey::Norm { .. } => "nm",
            ModuleKey::Attention { .. } => "at",
            ModuleKey::AttentionMma { .. } => "am",
            ModuleKey::AttentionWg { .. } => "aw",
            ModuleKey::Random { .. } => "rnd",
            ModuleKey::JitMulti { .. } => "jm",
        };
        match self {
            Entry::Fast(mask) => format!("ew_f{mask}"),
            Entry::Tiny(mask) => format!("ew_t{mask}"),
            Entry::FastOne(mask) => format!("ew_g{mask}"),
            Entry::Strided => "ew_s".into(),
            Entry::Two => "ew_2d".into(),
            Entry::Tile => "ew_tile".into(),
            Entry::Block => format!("{prefix}_block"),
            Entry::BlockWide => format!("{prefix}_block8"),
            Entry::Warp => format!("{prefix}_warp"),
            Entry::Thread => format!("{prefix}_thread"),
            Entry::Cols(1) => "red_cols1".into(),
            Entry::Cols(_) => "red_colsv".into(),
            Entry::Rows { ch: 0, w, .. } => format!("sm_o{w}"),
            Entry::Rows { g: 0, w, ch } => format!("sm_b{w}_{ch}"),
            Entry::Rows { g, w, ch } => format!("sm_w{w}_{ch}_{g}"),
            Entry::BigRows { w, ch } => format!("sm_B{w}_{ch}"),
            Entry::MidRows { w, ch } => format!("sm_m{w}_{ch}"),
            Entry::RawRows { w, ch } => format!("sm_r{w}_{ch}"),
            Entry::SplitStats(w) => format!("sm_p{w}"),
            Entry::SplitOut(w) => format!("sm_q{w}"),
            Entry::LeadRows(w) => format!("sm_l{w}"),
            Entry::Gemv => "gv_rows".into(),
            Entry::Gemv8 => "gv_rows8".into(),
            Entry::GemvDots => "gv_dots".into(),
            Entry::NormRows => format!("{prefix}_rows"),
            Entry::NormRegs(vpt) => format!("{prefix}_r{vpt}"),
            Entry::NormVec(vv) => format!("{prefix}_v{vv}"),
            Entry::Attn(ep32) => format!("{prefix}_{}", 32 * ep32 as u32),
            Entry::AttnMerge => format!("{prefix}_merge"),
            Entry::AttnMma(e16) => format!("{prefix}_{}", 16 * e16 as u32),
            Entry::AttnWg { e16, bn16, pp } => {
                format!("{prefix}_{}_{}{}", 16 * e16 as u32, 16 * bn16 as u32, if pp { "p" } else { "" })
            }
            Entry::AttnFa { e16, bn16, pp } => {
                format!("af_{}_{}{}", 16 * e16 as u32, 16 * bn16 as u32, if pp { "p" } else { "" })
            }
            Entry::AttnTma { e16, bn16, pp, mode } => {
                format!("at_{}_{}{}{}", 16 * e16 as u32, 16 * bn16 as u32, if pp { "p" } else { "" }, mode.suffix())
            }
            Entry::Random | Entry::JitMulti => prefix.into(),
        }
    }
}

impl Entry {
    /// The block size the kernel's occupancy (`Func::blocks_per_sm`) is computed for: [`THREADS`],
    /// or the TMA attention kernel's own.
    pub(in crate::driver::cuda) fn occupancy_threads(self) -> i32 {
        match self {
            Entry::AttnTma { mode, .. } => mode.threads() as i32,
            _ => THREADS as i32,
        }
    }

    /// The dynamic shared memory the kernel is launched with, in bytes (0 for most).
    pub(in crate::driver::cuda) fn dynamic_smem(self) -> usize {
        match self {
            Entry::AttnWg { e16, bn16, .. } => attn_wg_bytes(16 * e16 as usize, 16 * bn16 as usize),
            Entry::AttnTma { e16, bn16, mode, .. } => {
                let e = 16 * e16 as usize;
                // The producer's second query slot.
                attn_wg_bytes(e, 16 * bn16 as usize) + if mode.persistent() { 128 * e * 2 } else { 0 }
            }
            Entry::AttnFa { e16, bn16, .. } => attn_fa_bytes(16 * e16 as usize, 16 * bn16 as usize),
            _ => 0,
        }
    }
}

impl ModuleKey {
    /// Every kernel the module's source defines.
    pub(in crate::driver::cuda) fn entries(&self) -> Vec<Entry> {
        match self {
            ModuleKey::Elementwise { op, out, .. } => {
                let mut v: Vec<Entry> = (0..fast_masks(*op)).map(Entry::Fast).collect();
                v.extend((0..fast_masks(*op)).map(Entry::Tiny));
                if op.card_vectors(*out) {
                    v.extend((0..fast_masks(*op)).map(Entry::FastOne));
                }
                v.push(Entry::Strided);
                v.push(Entry::Two);
                v.push(Entry::Tile);
                v
            }
            ModuleKey::Softmax { src, dst, .. } => {
                let v = softmax_vec(*src, *dst) as u8;
                let (warp, block) = softmax_layouts(v as usize);
                let mut e: Vec<Entry> = warp.into_iter().map(|(w, ch, g)| Entry::Rows { g, w, ch }).collect();
                e.extend(block.into_iter().map(|ch| Entry::Rows { g: 0, w: v, ch }));
                let big = softmax_big_layouts(v as usize, softmax_value_bytes(*src, *dst));
                e.extend(big.into_iter().map(|ch| Entry::BigRows { w: v, ch }));
                e.extend(softmax_mid_layouts(v as usize).into_iter().map(|ch| Entry::MidRows { w: v, ch }));
                e.extend(softmax_raw_layouts(*src, *dst).into_iter().map(|ch| Entry::RawRows { w: v, ch }));
                e.push(Entry::Rows { g: 0, w: 1, ch: 0 });
                e.extend([Entry::SplitStats(1), Entry::SplitOut(1)]);
                if v > 1 {
                    e.push(Entry::Rows { g: 0, w: v, ch: 0 });
                    e.extend([Entry::SplitStats(v), Entry::SplitOut(v), Entry::LeadRows(v)]);
                }
                e.push(Entry::Thread);
                e
            }
            ModuleKey::Gemv { .. } => vec![Entry::Gemv, Entry::Gemv8, Entry::GemvDots],
            ModuleKey::Norm { .. } => {
                let mut e = vec![Entry::NormRows];
                e.extend(NORM_VALUES_PER_THREAD.iter().map(|&v| Entry::NormRegs(v)));
                e.extend(NORM_VECTORS_PER_THREAD.iter().map(|&v| Entry::NormVec(v)));
                e
            }
            ModuleKey::Attention { .. } => {
                let mut e: Vec<Entry> = ATTN_HEAD_DIMS.iter().map(|&d| Entry::Attn((d / 32) as u8)).collect();
                e.push(Entry::AttnMerge);
                e
            }
            ModuleKey::AttentionMma { .. } => {
                ATTN_MMA_HEAD_DIMS.iter().map(|&d| Entry::AttnMma((d / 16) as u8)).collect()
            }
            ModuleKey::AttentionWg { .. } => ATTN_WG_TILES
                .iter()
                .flat_map(|&(e, bn)| {
                    [false, true].map(|pp| Entry::AttnWg { e16: (e / 16) as u8, bn16: (bn / 16) as u8, pp })
                })
                .chain(ATTN_FA_TILES.iter().map(|&(e, bn, pp)| Entry::AttnFa {
                    e16: (e / 16) as u8,
                    bn16: (bn / 16) as u8,
                    pp,
                }))
                .chain(ATTN_TMA_TILES.iter().flat_map(|&(e, bn, pp)| {
                    TmaMode::ALL.map(|mode| Entry::AttnTma { e16: (e / 16) as u8, bn16: (bn / 16) as u8, pp, mode })
                }))
                .collect(),
            ModuleKey::Random { .. } => vec![Entry::Random],
            ModuleKey::JitMulti { .. } => vec![Entry::JitMulti],
            ModuleKey::Reduce { op, src, values, .. } => {
                let mut e = vec![
                    Entry::Block,
                    Entry::Warp,
                    Entry::Thread,
                    Entry::Cols(1),
                    Entry::Cols((16 / src.size()) as u8),
                ];
                if wide_block(*op, *src, *values) {
                    e.push(Entry::BlockWide);
                }
                e
            }
        }
    }
}
