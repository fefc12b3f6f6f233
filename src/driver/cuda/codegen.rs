//! CUDA C source for the tensor kernels, generated per module key: one module per elementwise
//! (op, dtypes) holding every launch path, one per reduction (op, dtypes), one per softmax.
//!
//! Every value is converted exactly as the CPU kernels convert it (`src/kernels/cpu/elem.rs`):
//! float → integer truncates toward zero and saturates (`cvt.rzi`, NaN → 0) then wraps, integers
//! wrap, anything → bool is `!= 0`, and `f64` → `f16`/`bf16` rounds once (through a round-to-odd
//! `f32`). Half types are stored as `u16` and converted with PTX `cvt` / bit manipulation, so
//! the sources need no header. Floating-point math runs in `float` for `f16`/`bf16`/`f32` and
//! `double` for `f64`, without fast math, except where a half-precision result hides a fast
//! intrinsic's error (see `unary_body`, `binary_body`'s `pow_half`, and softmax's exponential).
//! Sums and means of floats accumulate in `double`; maxima and minima compare in the input's
//! precision (exact); softmax accumulates in `float` (in `double` when a side is `f64`), as
//! PyTorch's does.

use super::gemv_templates::{gemv_vec, GEMV};
pub(super) use super::reduce_layouts::{cols_x, half_runs, PARTIAL_BYTES};
use super::reduce_templates::REDUCE;
pub(super) use super::softmax_layouts::{
    softmax_big_fits, softmax_big_layouts, softmax_block_fits, softmax_layouts, softmax_mid_fits, softmax_mid_layouts,
    softmax_raw_layouts, softmax_value_bytes, softmax_vec, SOFTMAX_MID_THREADS, SOFTMAX_RAW_THREADS,
};
use super::softmax_templates::SOFTMAX;
use super::templates::{COMMON, ELEMENTWISE};
use crate::dtype::DType;
use crate::kernel::{BinaryOp, ReduceOp, UnaryOp};
use std::fmt::Write;

/// The most (collapsed) dimensions a kernel's shape/stride arrays hold.
pub(super) const MAXD: usize = 16;

/// Threads per block of every kernel (each is compiled with `__launch_bounds__(THREADS)`).
pub(super) const THREADS: u32 = 256;
/// The largest grid launched with programmatic stream serialization (`Ctx::programmatic`), and
/// the largest whose blocks run `cs_enter`'s instructions (`CS_PDL_MAX_GRID` in templates.rs).
pub(super) const PDL_MAX_GRID: u32 = 1024;

/// The elementwise functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum EwOp {
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
}

impl EwOp {
    /// Number of inputs.
    pub(super) fn inputs(self) -> usize {
        match self {
            EwOp::Fill => 0,
            EwOp::Copy | EwOp::Cast | EwOp::Unary(_) => 1,
            EwOp::Binary(..) => 2,
            EwOp::Where => 3,
        }
    }
}

/// What one compiled module holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum ModuleKey {
    /// An elementwise op: `out` and up to three input dtypes (unused ones are `Bool`).
    Elementwise { op: EwOp, out: DType, ins: [DType; 3] },
    /// A reduction from `src` into `dst`; with `values`, an arg-reduction that also writes the
    /// extreme's value (in `src`'s dtype) to a second output.
    Reduce { op: ReduceOp, src: DType, dst: DType, values: bool },
    /// Softmax or log-softmax from `src` into `dst`.
    Softmax { src: DType, dst: DType, log: bool },
    /// A row vector times a matrix of `dtype`, row-major or column-major (`gemv.rs`).
    Gemv { dtype: DType },
}

/// A kernel of a module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Entry {
    /// Elementwise over contiguous operands; bit `i` of the mask: input `i` is one broadcast element.
    Fast(u8),
    /// [`Entry::Fast`] over at most one block of elements: a thread each.
    Tiny(u8),
    /// Elementwise over strided operands.
    Strided,
    /// Elementwise over two collapsed dims with a dense output (broadcast rows and columns,
    /// strided inputs).
    Two,
    /// [`Entry::Two`] with a transposed input: square tiles through shared memory ([`tile_edge`],
    /// two-byte elements in pairs where [`tile_pairs`] says).
    Tile,
    /// One block per (output, split) task.
    Block,
    /// One warp per output.
    Warp,
    /// One thread per (output, split) task.
    Thread,
    /// Blocks of `COLX` × `256 / COLX` threads ([`cols_x`]) over (`COLX` groups of `w`
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
    /// Softmax rows by a block of [`SOFTMAX_MID_THREADS`] threads holding each row in registers,
    /// `w` elements per access, `ch` chunks per thread.
    MidRows { w: u8, ch: u8 },
    /// Softmax rows by a block of [`SOFTMAX_RAW_THREADS`] threads holding each row's raw
    /// elements (a half type's, half the registers of their `float` values) in registers, `w`
    /// elements per access, `ch` chunks per thread.
    RawRows { w: u8, ch: u8 },
    /// A row vector times a row-major matrix: blocks of a tile of columns over a split of the rows.
    Gemv,
    /// A row vector times a column-major matrix: a warp per output.
    GemvDots,
}

/// One kernel: its module and entry point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct KernelId {
    pub module: ModuleKey,
    pub entry: Entry,
}

impl Entry {
    /// The kernel's `extern "C"` name.
    pub(super) fn name(self, module: &ModuleKey) -> String {
        let prefix = match module {
            ModuleKey::Elementwise { .. } => "ew",
            ModuleKey::Reduce { .. } => "red",
            ModuleKey::Softmax { .. } => "sm",
            ModuleKey::Gemv { .. } => "gv",
        };
        match self {
            Entry::Fast(mask) => format!("ew_f{mask}"),
            Entry::Tiny(mask) => format!("ew_t{mask}"),
            Entry::Strided => "ew_s".into(),
            Entry::Two => "ew_2d".into(),
            Entry::Tile => "ew_tile".into(),
            Entry::Block => format!("{prefix}_block"),
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
            Entry::Gemv => "gv_rows".into(),
            Entry::GemvDots => "gv_dots".into(),
        }
    }
}

impl ModuleKey {
    /// Every kernel the module's source defines.
    pub(super) fn entries(&self) -> Vec<Entry> {
        match self {
            ModuleKey::Elementwise { op, .. } => {
                let mut v: Vec<Entry> = (0..fast_masks(*op)).map(Entry::Fast).collect();
                v.extend((0..fast_masks(*op)).map(Entry::Tiny));
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
                if v > 1 {
                    e.push(Entry::Rows { g: 0, w: v, ch: 0 });
                }
                e.push(Entry::Thread);
                e
            }
            ModuleKey::Gemv { .. } => vec![Entry::Gemv, Entry::GemvDots],
            ModuleKey::Reduce { src, .. } => {
                vec![Entry::Block, Entry::Warp, Entry::Thread, Entry::Cols(1), Entry::Cols((16 / src.size()) as u8)]
            }
        }
    }

    /// The module's complete CUDA C source.
    pub(super) fn source(&self) -> String {
        let mut s = String::from(COMMON);
        match *self {
            ModuleKey::Elementwise { op, out, ins } => elementwise(&mut s, op, out, ins),
            ModuleKey::Reduce { op, src, dst, values } => reduce(&mut s, op, src, dst, values),
            ModuleKey::Softmax { src, dst, log } => softmax(&mut s, src, dst, log),
            ModuleKey::Gemv { dtype } => gemv(&mut s, dtype),
        }
        s
    }
}

/// The storage type of a dtype in the generated C.
pub(super) fn ctype(d: DType) -> &'static str {
    match d {
        DType::Bool | DType::U8 => "u8",
        DType::I32 => "int",
        DType::I64 => "i64",
        DType::F16 | DType::BF16 => "u16",
        DType::F32 => "float",
        DType::F64 => "double",
    }
}

/// The domain a dtype computes in: `F32` (`float`) for the narrow floats, `F64`, `I64` for
/// integers, `Bool` (a `u8` that is 0 or 1).
fn math(d: DType) -> DType {
    match d {
        DType::F16 | DType::BF16 | DType::F32 => DType::F32,
        DType::F64 => DType::F64,
        DType::U8 | DType::I32 | DType::I64 => DType::I64,
        DType::Bool => DType::Bool,
    }
}

/// `e` (an expression of `from`'s storage type) converted to `to`'s storage type, as the CPU
/// kernels convert.
pub(super) fn conv(from: DType, to: DType, e: &str) -> String {
    use DType::*;
    if from == to {
        return format!("({e})");
    }
    match from {
        Bool => conv(I64, to, &format!("(i64)(({e}) != 0)")),
        U8 | I32 | I64 => match to {
            F32 => format!("((float)(i64)({e}))"),
            F64 => format!("((double)(i64)({e}))"),
            F16 => format!("d2h((double)(i64)({e}))"),
            BF16 => format!("d2b((double)(i64)({e}))"),
            I32 => format!("((int)(i64)({e}))"),
            I64 => format!("((i64)({e}))"),
            U8 => format!("((u8)(i64)({e}))"),
            Bool => format!("((u8)(({e}) != 0))"),
        },
        F16 | BF16 | F32 | F64 => {
            let f = match from {
                F16 => format!("h2f({e})"),
                BF16 => format!("b2f({e})"),
                _ => format!("({e})"),
            };
            let wide = from == F64;
            let ll = if wide { format!("__double2ll_rz({e})") } else { format!("__float2ll_rz({f})") };
            match to {
                F32 if wide => format!("((float)({e}))"),
                F32 => f,
                F64 => format!("((double){f})"),
                F16 if wide => format!("d2h({e})"),
                F16 => format!("f2h({f})"),
                BF16 if wide => format!("d2b({e})"),
                BF16 => format!("f2b({f})"),
                I64 => ll,
                I32 => format!("((int){ll})"),
                U8 => format!("((u8){ll})"),
                Bool => format!("((u8)({f} != 0))"),
            }
        }
    }
}

/// The C function of a float domain (`f32` math uses the `f`-suffixed functions).
fn fname(name: &str, m: DType) -> String {
    if m == DType::F32 {
        format!("{name}f")
    } else {
        name.to_owned()
    }
}

/// The body of `apply` (statements ending in `return`) for a unary op computed in `c`.
///
/// Half-precision results (`c` is `f16` or `bf16`, computed in `float`; `bf16` stored with the
/// `cvt.rn.bf16.f32` instruction on sm_80 and newer) use the fast intrinsics
/// where their error stays far below the half type's rounding (`__expf`, `rsqrtf`, a fast
/// division in sigmoid, `__logf` (absolute error 2^-21.4 near 1, 3 ulp elsewhere: under an ulp of
/// the half result), `tanh.approx` for bf16, and for bf16 the approximate square root, whose
/// relative error (a few f32 ulp: CUDA documents `sqrtf` without `-prec-sqrt` at 1 to 3) is
/// far inside the 2^-18 that separates the square root of a bf16 from a bf16 rounding
/// midpoint, so the rounded result is still exact); `sin` and `cos` keep the library's (`__sinf`
/// is only absolutely accurate, which `sin` of a tiny half value would show, and a reduction by π
/// with a polynomial measured no faster than `sinf` on the H200), and gelu is `gelu_half` (the
/// normal tail by a fitted rational form, one reciprocal and one `ex2`, relative error below
/// 1e-5: libdevice's `erff` takes two branches that random data both enter); `f32` uses the
/// accurate library functions too, and PyTorch's `erf` form of gelu (its cancellation for
/// x < −3 is an absolute error of a few f32 ulp); `f64` computes gelu through `erfc`.
fn unary_body(op: UnaryOp, src: DType, c: DType) -> String {
    let m = math(c);
    let x = conv(c, m, &conv(src, c, "a"));
    let mt = ctype(m);
    let f = |n: &str| fname(n, m);
    let lit = |v: &str| if m == DType::F32 { format!("{v}f") } else { v.to_owned() };
    let half = matches!(c, DType::F16 | DType::BF16);
    let r = match (m, op) {
        (DType::F32, _) if half => match op {
            UnaryOp::Exp => "__expf(x)".to_owned(),
            UnaryOp::Rsqrt => "rsqrtf(x)".to_owned(),
            UnaryOp::Sigmoid => "__fdividef(1.0f, 1.0f + __expf(-x))".to_owned(),
            // tanh.approx's relative error (2^-10.99) is below bf16's rounding, not f16's.
            UnaryOp::Tanh if c == DType::BF16 => "tanh_approx(x)".to_owned(),
            UnaryOp::Log => "__logf(x)".to_owned(),
            UnaryOp::Sqrt if c == DType::BF16 => "sqrt_approx(x)".to_owned(),
            UnaryOp::Gelu => "gelu_half(x)".to_owned(),
            _ => float_unary(op, &f, &lit),
        },
        (DType::F32, UnaryOp::Gelu) => GELU_F32.to_owned(),
        (DType::F32 | DType::F64, _) => float_unary(op, &f, &lit),
        (DType::I64, UnaryOp::Neg) => "(i64)(0ull - (u64)x)".to_owned(),
        (DType::I64, UnaryOp::Abs) => "x < 0 ? (i64)(0ull - (u64)x) : x".to_owned(),
        (DType::I64, UnaryOp::Relu) => "x > 0 ? x : 0".to_owned(),
        // The tensor layer computes the other functions in a floating-point dtype; bool's abs
        // and relu are the identity.
        _ => "x".to_owned(),
    };
    format!("    const {mt} x = {x};\n    const {mt} r = {r};\n    return {};\n", conv(m, c, "r"))
}

/// Gelu in `float`, PyTorch's form: `x · (1 + erf(x / √2)) / 2`.
const GELU_F32: &str = "0.5f * x * (1.0f + erff(x * 0.70710678118654752440f))";

/// A unary function of a float `x` with the accurate library functions (`f`: the name in the
/// domain, `lit`: a literal in it).
fn float_unary(op: UnaryOp, f: &dyn Fn(&str) -> String, lit: &dyn Fn(&str) -> String) -> String {
    match op {
        UnaryOp::Neg => "-x".to_owned(),
        UnaryOp::Abs => format!("{}(x)", f("fabs")),
        UnaryOp::Exp => format!("{}(x)", f("exp")),
        UnaryOp::Log => format!("{}(x)", f("log")),
        UnaryOp::Sqrt => format!("{}(x)", f("sqrt")),
        UnaryOp::Rsqrt => format!("{} / {}(x)", lit("1.0"), f("sqrt")),
        UnaryOp::Sin => format!("{}(x)", f("sin")),
        UnaryOp::Cos => format!("{}(x)", f("cos")),
        UnaryOp::Tanh => format!("{}(x)", f("tanh")),
        // One exponential of -|x| (never overflows), then 1 / (1 + e) or e / (1 + e).
        UnaryOp::Sigmoid => {
            format!("sigmoid_of(x >= {z}, {e}(-{abs}(x)))", z = lit("0.0"), e = f("exp"), abs = f("fabs"))
        }
        UnaryOp::Relu => format!("(x > {z} || isnan(x)) ? x : {z}", z = lit("0.0")),
        UnaryOp::Gelu => format!(
            "{half} * x * {erfc}(-x * {r})",
            half = lit("0.5"),
            erfc = f("erfc"),
            r = lit("0.70710678118654752440")
        ),
    }
}

/// The body of `apply` for a binary op computed in `c`, written to `out`.
fn binary_body(op: BinaryOp, lhs: DType, rhs: DType, c: DType, out: DType) -> String {
    let m = math(c);
    let mt = ctype(m);
    let x = conv(c, m, &conv(lhs, c, "a"));
    let y = conv(c, m, &conv(rhs, c, "b"));
    let head = format!("    const {mt} x = {x};\n    const {mt} y = {y};\n");
    let cmp = match op {
        BinaryOp::Eq => Some("=="),
        BinaryOp::Ne => Some("!="),
        BinaryOp::Lt => Some("<"),
        BinaryOp::Le => Some("<="),
        BinaryOp::Gt => Some(">"),
        BinaryOp::Ge => Some(">="),
        _ => None,
    };
    if let Some(cmp) = cmp {
        return format!("{head}    const u8 r = (u8)(x {cmp} y);\n    return {};\n", conv(DType::Bool, out, "r"));
    }
    let r = match m {
        DType::F32 | DType::F64 => match op {
            BinaryOp::Add => "x + y".to_owned(),
            BinaryOp::Sub => "x - y".to_owned(),
            BinaryOp::Mul => "x * y".to_owned(),
            BinaryOp::Div => "x / y".to_owned(),
            BinaryOp::Maximum => "(isnan(x) || isnan(y)) ? x + y : (x > y ? x : y)".to_owned(),
            BinaryOp::Minimum => "(isnan(x) || isnan(y)) ? x + y : (x < y ? x : y)".to_owned(),
            // A half-precision result hides the fast form's error (`pow_half`).
            _ if matches!(c, DType::F16 | DType::BF16) => "pow_half(x, y)".to_owned(),
            _ => format!("{}(x, y)", fname("pow", m)),
        },
        DType::I64 => match op {
            BinaryOp::Add => "(i64)((u64)x + (u64)y)".to_owned(),
            BinaryOp::Sub => "(i64)((u64)x - (u64)y)".to_owned(),
            BinaryOp::Mul => "(i64)((u64)x * (u64)y)".to_owned(),
            BinaryOp::Div => "(y == 0 || (x == I64_MIN && y == -1)) ? 0 : x / y".to_owned(),
            BinaryOp::Maximum => "x > y ? x : y".to_owned(),
            BinaryOp::Minimum => "x < y ? x : y".to_owned(),
            _ => "ipow(x, y)".to_owned(),
        },
        _ => match op {
            BinaryOp::Add | BinaryOp::Maximum => "(u8)(x | y)".to_owned(),
            BinaryOp::Mul | BinaryOp::Minimum => "(u8)(x & y)".to_owned(),
            BinaryOp::Sub => "(u8)(x ^ y)".to_owned(),
            BinaryOp::Div => "x".to_owned(),
            _ => "(u8)(x | (y ^ 1))".to_owned(),
        },
    };
    format!("{head}    const {mt} r = {r};\n    return {};\n", conv(c, out, &conv(m, c, "r")))
}

/// Fast kernels of an elementwise op: masks `0..fast_masks(op)` (every combination of broadcast
/// inputs).
pub(super) fn fast_masks(op: EwOp) -> u8 {
    1 << op.inputs()
}

/// A dtype with the storage type of `d`'s size, for raw fills and copies.
pub(super) fn raw_dtype(d: DType) -> DType {
    match d.size() {
        1 => DType::U8,
        2 => DType::F16,
        4 => DType::I32,
        _ => DType::I64,
    }
}

/// Elements per vector access of an elementwise kernel: 16 bytes of its widest operand.
#[inline]
pub(super) fn ew_vec(op: EwOp, out: DType, ins: [DType; 3]) -> usize {
    let mut widest = out.size();
    for d in &ins[..op.inputs()] {
        widest = widest.max(d.size());
    }
    // Sizes are powers of two: a shift, not a division.
    16 >> widest.trailing_zeros()
}

/// The edge of the transpose kernel's square tiles (`ew_tile`, `TILE` in its module): 64 when no
/// element is wider than 4 bytes and the inputs' tiles fit in 40 KiB of shared memory, else 32.
/// Measured on the H200 with the tile's vector accesses: `add_bf16_transposed` 49.8 µs with 32-tiles,
/// 33.6 with 64; `add_f32_transposed` 67.2 and 55.6; `contiguous_f32_transposed` 44.1 and 37.3;
/// `contiguous_i64_transposed` 67.8 and 68.4 (8-byte types keep 32).
pub(super) fn tile_edge(op: EwOp, out: DType, ins: [DType; 3]) -> u64 {
    let ins = &ins[..op.inputs()];
    // A tile's row is padded to a multiple of 4 bytes plus one word (`TPAD` in the kernel).
    let tile = |d: &DType| 64 * (64 * d.size() + 4 + d.size().saturating_sub(4));
    let shared: usize = ins.iter().map(tile).sum();
    if out.size() <= 4 && ins.iter().all(|d| d.size() <= 4) && shared <= 40 << 10 {
        64
    } else {
        32
    }
}

/// Whether the transpose kernel (`ew_tile`) moves two-byte elements through its tiles in pairs,
/// compiled for at least eight blocks per SM (32 registers, every thread slot of the SM): for
/// an output and at most two inputs of two bytes (64-tiles). Measured on the H200 ([4096, 4096],
/// transposed operand): `contiguous_bf16_transposed` 22.95 µs with one element per shared
/// access (48 registers), 21.34 in pairs with six blocks (40), 20.62 in pairs with eight;
/// `add_bf16_transposed` 33.67 / 32.32 / 29.34; `div_bf16_transposed` 36.76 / 34.74 / 31.50 (16
/// bytes of spills). Other modules keep one element per access and the compiler's registers:
/// eight blocks cost `add_f32_transposed` 55.5 → 82.8 µs (80 bytes of spills), six 55.5 → 63.4,
/// and the pairs' registers a `where` of three tiles one block per SM.
pub(super) fn tile_pairs(op: EwOp, out: DType, ins: [DType; 3]) -> bool {
    let edge = tile_edge(op, out, ins);
    let ins = &ins[..op.inputs()];
    edge == 64 && out.size() == 2 && ins.len() <= 2 && ins.iter().all(|d| d.size() == 2)
}

fn elementwise(s: &mut String, op: EwOp, out: DType, ins: [DType; 3]) {
    let n = op.inputs();
    let t = |i: usize| if i < n { ctype(ins[i]) } else { "u8" };
    let vec = ew_vec(op, out, ins);
    let pairs = tile_pairs(op, out, ins);
    let _ = write!(
        s,
        "#define NIN {n}\n#define VEC {vec}\n#define UNROLL {}\n#define TILE {}\n#define TILE_PAIRS {}\n\
         #define TILE_BOUNDS {}\ntypedef {} T0;\ntypedef {} T1;\ntypedef {} T2;\ntypedef {} TO;\n",
        unrolled(op, out, vec) as u8,
        tile_edge(op, out, ins),
        pairs as u8,
        if pairs { "__launch_bounds__(256, 8)" } else { "__launch_bounds__(256)" },
        t(0),
        t(1),
        t(2),
        ctype(out)
    );
    let body = match op {
        EwOp::Fill => "    return (TO)value;\n".to_owned(),
        EwOp::Copy => "    return a;\n".to_owned(),
        EwOp::Cast => format!("    return {};\n", conv(ins[0], out, "a")),
        EwOp::Unary(u) => unary_body(u, ins[0], out),
        EwOp::Binary(b, compute) => binary_body(b, ins[0], ins[1], compute, out),
        EwOp::Where => format!("    return a ? {} : {};\n", conv(ins[1], out, "b"), conv(ins[2], out, "c")),
    };
    let _ = write!(
        s,
        "__device__ __forceinline__ TO apply(T0 a, T1 b, T2 c, u64 value) {{\n    (void)a; (void)b; (void)c; (void)value;\n{body}}}\n"
    );
    s.push_str(ELEMENTWISE);
    for mask in 0..fast_masks(op) {
        let _ = writeln!(
            s,
            "extern \"C\" __global__ void __launch_bounds__(256) ew_f{mask}(EwFast p) {{ cs_enter(); ew_fast<{mask}>(p); }}\n\
             extern \"C\" __global__ void __launch_bounds__(256) ew_t{mask}(EwFast p) {{ cs_enter(); ew_tiny<{mask}>(p); }}"
        );
    }
}

/// Vectors each thread of a fast kernel takes over a large tensor (the launch caps it so that
/// the grid still fills the device: `elementwise.rs`): more than one for the functions of many
/// instructions, whose loads then overlap the math of the vectors before them. Measured on the
/// H200 over [4096, 4096] (docs/gpu-runs.md, session 7's kernel probes): `sin`, `cos`, `gelu` of a
/// half type and f16 `tanh` gain 4–7 % with four; `exp`, `sigmoid`, bf16 `tanh` and `pow` of a
/// half type, and f32 `gelu`, 2–3 % with two; f32 `pow` 7 % with four; the cheap functions lose
/// a little with more.
pub(super) fn ew_per_thread(op: EwOp, out: DType, vec: usize) -> u64 {
    let half = vec >= 8 && matches!(out, DType::F16 | DType::BF16);
    match op {
        EwOp::Unary(UnaryOp::Sin | UnaryOp::Cos | UnaryOp::Gelu) if half => 4,
        EwOp::Unary(UnaryOp::Tanh) if half => 2 + 2 * (out == DType::F16) as u64,
        EwOp::Unary(UnaryOp::Exp | UnaryOp::Sigmoid) if half => 2,
        EwOp::Binary(BinaryOp::Pow, c) if c.is_float() => {
            if half {
                2
            } else if out == DType::F32 {
                4
            } else {
                1
            }
        }
        EwOp::Unary(UnaryOp::Gelu) if out == DType::F32 => 2,
        _ => 1,
    }
}

/// Whether the fast kernel's grid-stride loop takes two vectors at a time: when a thread takes
/// several ([`ew_per_thread`]), and otherwise where the unrolled loop's registers cost nothing
/// (it runs only on tensors past the grid's cap, but its registers limit every launch's
/// occupancy): not for the functions of many instructions, f32 `sigmoid` and `log` among them
/// (the unrolled loop cost f32 `sigmoid` 8 %).
fn unrolled(op: EwOp, out: DType, vec: usize) -> bool {
    if ew_per_thread(op, out, vec) > 1 {
        return true;
    }
    match op {
        EwOp::Binary(BinaryOp::Pow, c) => !c.is_float(),
        EwOp::Binary(BinaryOp::Div, c) if vec >= 8 => !c.is_float(),
        EwOp::Unary(UnaryOp::Sin | UnaryOp::Cos | UnaryOp::Gelu) if vec >= 8 => false,
        EwOp::Unary(UnaryOp::Tanh | UnaryOp::Sqrt) if vec >= 8 => out != DType::F16,
        EwOp::Unary(UnaryOp::Sigmoid | UnaryOp::Log) if out == DType::F32 => false,
        _ => true,
    }
}

fn reduce(s: &mut String, op: ReduceOp, src: DType, dst: DType, values: bool) {
    let vec = 16 / src.size();
    let split = !matches!(op, ReduceOp::Sum | ReduceOp::Mean) as u8;
    let runs = half_runs(op, src, dst);
    let _ = write!(
        s,
        "#define VEC {vec}\n#define SPLIT_ACC {split}\n#define HALF_RUNS {}\n#define VALUES {}\n#define ARG {}\n#define COLX {}\ntypedef {} TS;\ntypedef {} TD;\n",
        runs as u8,
        values as u8,
        matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin) as u8,
        cols_x(src),
        ctype(src),
        ctype(dst)
    );
    let float = src.is_float();
    let arg = matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin);
    let max = matches!(op, ReduceOp::Max | ReduceOp::ArgMax);
    // The accumulator's scalar domain: sums and means of floats in f64 (with `runs`, of runs
    // added in f32); extremes of the narrow
    // floats in f32 (exact: a comparison loses nothing), of f64 in f64; integers in i64.
    let extreme = !matches!(op, ReduceOp::Sum | ReduceOp::Mean);
    let dom = match (float, op) {
        (true, _) if extreme && src != DType::F64 => DType::F32,
        (true, _) | (_, ReduceOp::Mean) => DType::F64,
        _ => DType::I64,
    };
    let fdom = matches!(dom, DType::F32 | DType::F64);
    let vt = ctype(dom);
    let x = conv(src, dom, "x");
    let better = if max { "b.v > a.v" } else { "b.v < a.v" };
    let nan = |v: &str| if fdom { format!("isnan({v})") } else { "false".to_owned() };
    if arg {
        let ident = match (fdom, max) {
            (true, true) => "-d_inf()",
            (true, false) => "d_inf()",
            (_, true) => "I64_MIN",
            _ => "I64_MAX",
        };
        let _ = write!(
            s,
            r#"struct acc {{ {vt} v; i64 i; }};
__device__ __forceinline__ acc identity() {{ acc a; a.v = {ident}; a.i = I64_MAX; return a; }}
__device__ __forceinline__ acc load(TS x, i64 r) {{ acc a; a.v = {x}; a.i = r; return a; }}
__device__ __forceinline__ acc combine(acc a, acc b) {{
    const bool an = {an}, bn = {bn};
    if (an || bn) {{ if (an && bn) return a.i < b.i ? a : b; return an ? a : b; }}
    if ({better}) return b;
    if (a.v == b.v && b.i < a.i) return b;
    return a;
}}
__device__ __forceinline__ acc shfl_down(acc a, int off) {{ acc b; b.v = __shfl_down_sync(FULL, a.v, off); b.i = __shfl_down_sync(FULL, a.i, off); return b; }}
__device__ __forceinline__ void st_partial(char* base, i64 k, acc a) {{ ((acc*)base)[k] = a; }}
__device__ __forceinline__ acc ld_partial(const char* base, i64 k) {{ const acc* p = (const acc*)base + k; acc a; a.v = __ldcg(&p->v); a.i = __ldcg(&p->i); return a; }}
__device__ __forceinline__ void store(TD* out, acc a, i64 n, double inv) {{ (void)inv; *out = {store}; }}
__device__ __forceinline__ void store_value(TS* out, acc a) {{ *out = {value}; }}
/* `a` (of earlier rows, not the identity) and row `r`'s element `x`. */
__device__ __forceinline__ acc step(acc a, TS x, i64 r) {{
    const {vt} v = {x};
    if ({replace}) {{ a.v = v; a.i = r; }}
    return a;
}}
/* The first extreme of elements r, r + 1, ... of a vector: its offset found by compares of
   values alone, the 64-bit index formed once. */
__device__ __forceinline__ acc fold(const Pack<TS, VEC>& x, i64 r) {{
    acc a;
    a.v = {x0};
    int j = 0;
#pragma unroll
    for (int k = 1; k < VEC; ++k) {{
        const {vt} v = {xk};
        if ({replace}) {{ a.v = v; j = k; }}
    }}
    a.i = r + j;
    return a;
}}
/* `a` and `b`, every element of `b` after those of `a` (which may be the identity). */
__device__ __forceinline__ acc later(acc a, acc b) {{
    const {vt} v = b.v;
    return (a.i == I64_MAX || ({replace})) ? b : a;
}}
"#,
            x0 = conv(src, dom, "x.v[0]"),
            xk = conv(src, dom, "x.v[k]"),
            an = nan("a.v"),
            bn = nan("b.v"),
            store = conv(DType::I64, dst, "n == 0 ? 0 : a.i"),
            value = conv(dom, src, "a.v"),
            replace = step_replaces(fdom, max),
        );
    } else {
        let (ident, comb) = match (op, dom) {
            (ReduceOp::Sum | ReduceOp::Mean, DType::F64) => ("0.0", "a + b".to_owned()),
            (ReduceOp::Sum, _) => ("0", "(i64)((u64)a + (u64)b)".to_owned()),
            // One instruction (`max.NaN`, sm_80+): NaN if either is, else the larger.
            (_, DType::F32) => {
                (if max { "-d_inf()" } else { "d_inf()" }, format!("f{}_nan(a, b)", if max { "max" } else { "min" }))
            }
            (_, DType::F64) => (
                if max { "-d_inf()" } else { "d_inf()" },
                format!("isnan(a) ? a : (isnan(b) ? b : (b {} a ? b : a))", if max { ">" } else { "<" }),
            ),
            _ => (if max { "I64_MIN" } else { "I64_MAX" }, format!("b {} a ? b : a", if max { ">" } else { "<" })),
        };
        let fin = match (op, dom) {
            // The sum times `1 / n` (computed on the host): within an f64 ulp of `a / n`, far
            // below the sum's own rounding; a division per output cost the column kernel of 8
            // outputs per thread a fifth of its speed in registers.
            (ReduceOp::Mean, _) => "a * inv".to_owned(),
            (ReduceOp::Sum, _) => "a".to_owned(),
            (_, DType::F64) => "n == 0 ? d_nan() : a".to_owned(),
            (_, DType::F32) => "n == 0 ? __int_as_float(0x7fc00000) : a".to_owned(),
            _ => "n == 0 ? 0 : a".to_owned(),
        };
        let _ = write!(
            s,
            r#"typedef {vt} acc;
__device__ __forceinline__ acc identity() {{ return {ident}; }}
__device__ __forceinline__ acc load(TS x, i64 r) {{ (void)r; return {x}; }}
__device__ __forceinline__ acc combine(acc a, acc b) {{ return {comb}; }}
__device__ __forceinline__ acc shfl_down(acc a, int off) {{ return __shfl_down_sync(FULL, a, off); }}
__device__ __forceinline__ void st_partial(char* base, i64 k, acc a) {{ ((acc*)base)[k] = a; }}
__device__ __forceinline__ acc ld_partial(const char* base, i64 k) {{ return __ldcg((const acc*)base + k); }}
__device__ __forceinline__ void store(TD* out, acc a, i64 n, double inv) {{ (void)n; (void)inv; const acc v = {fin}; *out = {store}; }}
__device__ __forceinline__ acc step(acc a, TS x, i64 r) {{ return combine(a, load(x, r)); }}
"#,
            store = conv(dom, dst, "v"),
        );
    }
    if runs {
        let _ = writeln!(s, "__device__ __forceinline__ float tof(TS x) {{ return {}; }}", conv(src, DType::F32, "x"));
    }
    s.push_str(REDUCE);
}

/// When a later element `v` replaces the extreme `a.v` of earlier ones in an arg-reduction
/// scanned in order: it is strictly better, or a NaN where `a.v` is not (the first NaN stays).
fn step_replaces(float: bool, max: bool) -> &'static str {
    match (float, max) {
        (true, true) => "!(v <= a.v) && a.v == a.v",
        (true, false) => "!(v >= a.v) && a.v == a.v",
        (false, true) => "v > a.v",
        (false, false) => "v < a.v",
    }
}

/// The vector-matrix module of `dtype`: its storage type, vector width and `float` conversions,
/// then [`GEMV`].
fn gemv(s: &mut String, dtype: DType) {
    let _ = write!(
        s,
        "#define V {}\ntypedef {} TS;\n\
         __device__ __forceinline__ float to_f(TS x) {{ return {}; }}\n\
         __device__ __forceinline__ TS from_f(float v) {{ return {}; }}\n",
        gemv_vec(dtype),
        ctype(dtype),
        conv(dtype, DType::F32, "x"),
        conv(DType::F32, dtype, "v"),
    );
    s.push_str(GEMV);
}

fn softmax(s: &mut String, src: DType, dst: DType, log: bool) {
    let wide = src == DType::F64 || dst == DType::F64;
    let c = if wide { DType::F64 } else { DType::F32 };
    // A half-precision output hides the fast exponential's error; f32 and f64 use the accurate one.
    let ex = match (wide, matches!(dst, DType::F16 | DType::BF16)) {
        (true, _) => "exp",
        (false, true) => "__expf",
        (false, false) => "expf",
    };
    let v = softmax_vec(src, dst);
    let _ = write!(
        s,
        "#define LOG {}\n#define V {v}\ntypedef {} TS;\ntypedef {} TD;\ntypedef {} TC;\n\
         __device__ __forceinline__ TC to_c(TS x) {{ return {}; }}\n\
         __device__ __forceinline__ TD from_c(TC v) {{ return {}; }}\n\
         __device__ __forceinline__ TC ex(TC v) {{ return {ex}(v); }}\n",
        log as u8,
        ctype(src),
        ctype(dst),
        ctype(c),
        conv(src, c, "x"),
        conv(c, dst, "v"),
    );
    s.push_str(SOFTMAX);
    let (warp, block) = softmax_layouts(v);
    let head = "extern \"C\" __global__ void __launch_bounds__(256)";
    for (w, ch, g) in warp {
        let _ = writeln!(
            s,
            "{head} sm_w{w}_{ch}_{g}(const __grid_constant__ SmP p) {{ cs_enter(); sm_warp_rows<{w}, {ch}, {g}>(p); }}"
        );
    }
    for ch in block {
        let _ = writeln!(
            s,
            "{head} sm_b{v}_{ch}(const __grid_constant__ SmP p) {{ cs_enter(); sm_block_rows<{ch}, 256>(p); }}"
        );
    }
    let big = "extern \"C\" __global__ void __launch_bounds__(1024)";
    for ch in softmax_big_layouts(v, softmax_value_bytes(src, dst)) {
        let _ = writeln!(
            s,
            "{big} sm_B{v}_{ch}(const __grid_constant__ SmP p) {{ cs_enter(); sm_block_rows<{ch}, 1024>(p); }}"
        );
    }
    for ch in softmax_mid_layouts(v) {
        let _ = writeln!(
            s,
            "extern \"C\" __global__ void __launch_bounds__({SOFTMAX_MID_THREADS}) sm_m{v}_{ch}(const __grid_constant__ SmP p) \
             {{ cs_enter(); sm_block_rows<{ch}, {SOFTMAX_MID_THREADS}>(p); }}"
        );
    }
    for ch in softmax_raw_layouts(src, dst) {
        let _ = writeln!(
            s,
            "extern \"C\" __global__ void __launch_bounds__({SOFTMAX_RAW_THREADS}) sm_r{v}_{ch}(const __grid_constant__ SmP p) \
             {{ cs_enter(); sm_raw_rows<{ch}, {SOFTMAX_RAW_THREADS}>(p); }}"
        );
    }
    for w in [1, v] {
        let _ = writeln!(s, "{head} sm_o{w}(const __grid_constant__ SmP p) {{ cs_enter(); sm_online_rows<{w}>(p); }}");
        if v == 1 {
            break;
        }
    }
}
