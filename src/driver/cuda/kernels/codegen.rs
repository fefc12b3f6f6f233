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

//!
//! The CUDA C itself lives in `cu/*.cu` (`sources.rs`); this file specializes it: it fills each
//! family's head template with the module's types and functions, then appends the family's
//! kernels and one short `extern "C"` entry point per launch layout.

use super::elementwise_policy::{ew_vec, tile_edge, tile_pairs, unrolled};
use super::gemv::gemv_vec;
use super::jit::code as jit_code;
use super::nvrtc::Program;
use super::reduce_layouts::{cols_x, half_runs, wide_block};
use super::softmax_layouts::{
    softmax_big_layouts, softmax_layouts, softmax_mid_layouts, softmax_raw_layouts, softmax_value_bytes, softmax_vec,
    SOFTMAX_MID_THREADS, SOFTMAX_RAW_THREADS,
};
use super::sources::{
    fill, COMMON, ELEMENTWISE, ELEMENTWISE_HEAD, FUSED_HEAD, GEMV, GEMV_HEAD, JIT_MULTI, RANDOM, RANDOM_HEAD, REDUCE,
    REDUCE_ACC, REDUCE_ARG, REDUCE_HEAD, SOFTMAX, SOFTMAX_HEAD, TRIG_HALF,
};
use super::vocab::{fast_masks, EwOp, JitKey, ModuleKey, RandKind, JIT_INPUTS};
use crate::dtype::DType;
use crate::kernel::{jit_compute, jit_ctype, JitParam};
use crate::kernel::{BinaryOp, ReduceOp, UnaryOp};
use std::fmt::Write;

impl ModuleKey {
    /// The module's complete CUDA C source.
    pub(in crate::driver::cuda) fn source(&self) -> String {
        let mut s = String::from(COMMON);
        match *self {
            ModuleKey::Elementwise { op, out, ins } => elementwise(&mut s, op, out, ins),
            ModuleKey::Reduce { op, src, dst, values } => reduce(&mut s, op, src, dst, values),
            ModuleKey::Softmax { src, dst, log } => softmax(&mut s, src, dst, log),
            ModuleKey::Gemv { dtype } => gemv(&mut s, dtype),
            ModuleKey::Norm { dtype } => {
                fused_head(&mut s, dtype);
                super::fused_codegen::norm(&mut s);
            }
            ModuleKey::Attention { dtype } => {
                fused_head(&mut s, dtype);
                super::fused_codegen::attention(&mut s, dtype);
            }
            ModuleKey::AttentionMma { dtype } => {
                fused_head(&mut s, dtype);
                super::fused_codegen::attention_mma(&mut s, dtype);
            }
            ModuleKey::AttentionWg { dtype } => {
                fused_head(&mut s, dtype);
                super::fused_codegen::attention_wg(&mut s, dtype);
            }
            ModuleKey::Random { dist, dtype, e } => random(&mut s, dist, dtype, e),
            ModuleKey::JitMulti { code, out, ins } => multi_source(&mut s, code, out, ins),
        }
        s
    }

    /// The module's program for NVRTC, of its complete `source` ([`ModuleKey::source`]): built
    /// for the architecture-specific features (sm_90a) where the module uses them.
    pub(in crate::driver::cuda) fn program<'a>(&self, source: &'a str) -> Program<'a> {
        match self {
            ModuleKey::AttentionWg { .. } => Program::arch_specific(source),
            _ => Program::tensor(source),
        }
    }
}

/// The storage type of a dtype in the generated C.
pub(in crate::driver::cuda) fn ctype(d: DType) -> &'static str {
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
pub(in crate::driver::cuda) fn conv(from: DType, to: DType, e: &str) -> String {
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
/// midpoint, so the rounded result is still exact); `sin` and `cos` are `cu/trig_half.cu`'s
/// (the library's three-part reduction and polynomials of float accuracy without its conversions
/// and its per-element slow path, which only bf16 values of 105615 or more take: `__sinf` is only
/// absolutely accurate, which `sin` of a tiny half value would show), and gelu is `gelu_half` (the
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
            UnaryOp::GeluTanh => gelu_tanh("__expf", &lit),
            // Every f16 is below the bound of `cu/trig_half.cu`'s branch-free path.
            UnaryOp::Sin if c == DType::F16 => "sin_small(x)".to_owned(),
            UnaryOp::Cos if c == DType::F16 => "cos_small(x)".to_owned(),
            UnaryOp::Sin => "sin_wide(x)".to_owned(),
            UnaryOp::Cos => "cos_wide(x)".to_owned(),
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

/// Whether the module of `op` with output `out` uses `cu/trig_half.cu` (a half-type `sin` or `cos`).
fn half_trig(op: EwOp, out: DType) -> bool {
    matches!(op, EwOp::Unary(UnaryOp::Sin | UnaryOp::Cos)) && matches!(out, DType::F16 | DType::BF16)
}

/// The elementwise head's FAST_GUARD part, for a half-type `sin` or `cos` (every other module sets
/// FAST_GUARD to 0): `apply_fast_f`, the float result of the branch-free body (`cu/trig_half.cu`'s
/// `sin_small` / `cos_small`) before its rounding, and `fast_pair`, which
/// rounds two lanes' floats in one instruction (`f2pair`), so that a vector's results are
/// rounded and packed a pair at a time. `fast_pack` says whether a vector may take that path: a
/// bf16 `sin` or `cos` (`body`, with `sin_wide` / `cos_wide`, a branch an element) tests the
/// vector's largest magnitude against the bound of the branch-free path once; every f16 is below it.
fn fast_guard(op: EwOp, out: DType, ins: [DType; 3], body: &str) -> String {
    if !half_trig(op, out) {
        return "#define FAST_GUARD 0\n".to_owned();
    }
    let test = if out == DType::BF16 {
        let x = conv(out, DType::F32, &conv(ins[0], out, "a.v[j]"));
        format!(
            "float m = 0.0f;\n#pragma unroll\n    for (int j = 0; j < N; ++j) m = fmaxf(m, fabsf({x}));\n    \
             return m < {TRIG_SMALL_BOUND};"
        )
    } else {
        "(void)a;\n    return true;".to_owned()
    };
    let small = body.replace("_wide(x)", "_small(x)");
    let float_body = small.replace(&format!("return {};", conv(DType::F32, out, "r")), "return r;");
    let pair = if out == DType::BF16 { "f2pair<true>" } else { "f2pair<false>" };
    format!(
        "#define FAST_GUARD 1\n\
         template <int N> __device__ __forceinline__ bool fast_pack(const Pack<T0, N>& a) {{\n    {test}\n}}\n\
         __device__ __forceinline__ float apply_fast_f(T0 a, T1 b, T2 c, u64 value) {{\n    \
         (void)a; (void)b; (void)c; (void)value;\n{float_body}}}\n\
         __device__ __forceinline__ u32 fast_pair(float lo, float hi) {{ return {pair}(lo, hi); }}\n"
    )
}

/// The magnitude below which `cu/trig_half.cu`'s branch-free `sin_small` / `cos_small` hold (its
/// `sin_wide` / `cos_wide` test the same bound; NaN passes `fmaxf`'s test and gives NaN there too).
const TRIG_SMALL_BOUND: &str = "105615.0f";

/// Gelu in `float`, PyTorch's form: `x · (1 + erf(x / √2)) / 2`.
const GELU_F32: &str = "0.5f * x * (1.0f + erff(x * 0.70710678118654752440f))";

/// GELU's tanh approximation of a float `x` as `x / (1 + e^(-2u))`, `u = √(2/π) (x + 0.044715 x³)`
/// (equal to `x/2 · (1 + tanh(u))` without its cancellation for x < 0; an infinite `e^(-2u)`
/// gives −0, as the tanh form's 0 · x), with the exponential `exp`.
fn gelu_tanh(exp: &str, lit: &dyn Fn(&str) -> String) -> String {
    format!(
        "x / ({one} + {exp}({m2b} * (x + {kappa} * x * x * x)))",
        one = lit("1.0"),
        m2b = lit("-1.5957691216057308"),
        kappa = lit("0.044715")
    )
}

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
        UnaryOp::GeluTanh => gelu_tanh(&f("exp"), lit),
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

/// The user's code of function `id`, its diagnostics naming `jiterator` and the code's own
/// lines, then the generated part's lines named `after`.
pub(in crate::driver::cuda) fn jit_prefix(id: u32, after: &str) -> String {
    format!("#line 1 \"jiterator\"\n{}\n#line 1 \"{after}\"\n", jit_code(id).source)
}

/// The body of `apply` for the function of `key`, whose inputs have dtypes `ins` and whose
/// output (of the promoted dtype) is `out`; the scalars are read from the address in `value`.
fn jit_body(key: JitKey, out: DType, ins: [DType; 3]) -> String {
    let code = jit_code(key.code);
    let compute = jit_compute(out);
    let ct = jit_ctype(compute);
    let names = ["a", "b", "c"];
    let mut s = format!("    typedef {ct} CT;\n    const CT* sc = (const CT*)value;\n    (void)sc;\n");
    for (k, (&d, name)) in ins.iter().zip(names).enumerate().take(key.nin as usize) {
        s.push_str(&format!("    const CT x{k} = (CT){};\n", conv(out, compute, &conv(d, out, name))));
    }
    let by_ref = code.params.iter().any(|p| matches!(p, JitParam::Output(_)));
    let call = code.call(ct, |k| format!("x{k}"), |k| format!("sc[{k}]"), |k| format!("o{k}"));
    if by_ref {
        let outs: Vec<String> = (0..code.outputs).map(|k| format!("o{k} = CT()")).collect();
        s.push_str(&format!("    CT {};\n    {call};\n", outs.join(", ")));
        s.push_str(&format!("    return {};\n", conv(compute, out, &format!("o{}", key.out))));
    } else {
        s.push_str(&format!("    const CT r = (CT)({call});\n    return {};\n", conv(compute, out, "r")));
    }
    s
}

/// The C declaration of the `jm` kernel's parameters (`JitP` in `jit.rs`).
const JIT_P: &str = "struct CsJitP { u64 out[8]; u64 in[8]; u64 n; u64 value; int ndim; int mask; \
                     i64 shape[MAXD]; i64 st[8][MAXD]; };\n";

/// Appends the source of a [`ModuleKey::JitMulti`] module (after the common helpers): the user's
/// code, `CsJitP`, `cs_jit_apply` for the inputs' dtypes `ins` promoted to `out`, and `jm`.
pub(in crate::driver::cuda) fn multi_source(s: &mut String, id: u32, out: DType, ins: [DType; JIT_INPUTS]) {
    let code = jit_code(id);
    let nin = code.inputs();
    let compute = jit_compute(out);
    let ct = jit_ctype(compute);
    s.push_str(&jit_prefix(id, "cudasem_jit_multi"));
    let _ = writeln!(s, "#define NIN {nin}");
    s.push_str(JIT_P);
    let _ = writeln!(s, "__device__ __forceinline__ void cs_jit_apply(const CsJitP& p, u64 i, const i64* off) {{");
    let _ = writeln!(s, "    typedef {ct} CT;\n    const CT* sc = (const CT*)p.value;\n    (void)sc;");
    for (k, &d) in ins.iter().enumerate().take(nin) {
        let load = format!("((const {}*)p.in[{k}])[off[{k}]]", ctype(d));
        let _ = writeln!(s, "    const CT x{k} = (CT){};", conv(out, compute, &conv(d, out, &load)));
    }
    let by_ref = code.params.iter().any(|p| matches!(p, JitParam::Output(_)));
    let call = code.call(ct, |k| format!("x{k}"), |k| format!("sc[{k}]"), |k| format!("r{k}"));
    if by_ref {
        let outs: Vec<String> = (0..code.outputs).map(|k| format!("r{k} = CT()")).collect();
        let _ = writeln!(s, "    CT {};\n    {call};", outs.join(", "));
    } else {
        let _ = writeln!(s, "    const CT r0 = (CT)({call});");
    }
    for k in 0..code.outputs {
        let _ = writeln!(s, "    (({}*)p.out[{k}])[i] = {};", ctype(out), conv(compute, out, &format!("r{k}")));
    }
    s.push_str("}\n");
    s.push_str(JIT_MULTI);
}

fn elementwise(s: &mut String, op: EwOp, out: DType, ins: [DType; 3]) {
    let n = op.inputs();
    let t = |i: usize| if i < n { ctype(ins[i]) } else { "u8" };
    let vec = ew_vec(op, out, ins);
    let pairs = tile_pairs(op, out, ins);
    let body = match op {
        EwOp::Fill => "    return (TO)value;\n".to_owned(),
        EwOp::Copy => "    return a;\n".to_owned(),
        EwOp::Cast => format!("    return {};\n", conv(ins[0], out, "a")),
        EwOp::Unary(u) => unary_body(u, ins[0], out),
        EwOp::Binary(b, compute) => binary_body(b, ins[0], ins[1], compute, out),
        EwOp::Where => format!("    return a ? {} : {};\n", conv(ins[1], out, "b"), conv(ins[2], out, "c")),
        EwOp::Jit(key) => {
            s.push_str(&jit_prefix(key.code, "cudasem_elementwise"));
            jit_body(key, out, ins)
        }
    };
    let values = [
        ("n", n.to_string()),
        ("vec", vec.to_string()),
        ("unroll", (unrolled(op, out, vec) as u8).to_string()),
        ("tile", tile_edge(op, out, ins).to_string()),
        ("pairs", (pairs as u8).to_string()),
        ("bounds", if pairs { "__launch_bounds__(256, 8)" } else { "__launch_bounds__(256)" }.to_owned()),
        ("t0", t(0).to_owned()),
        ("t1", t(1).to_owned()),
        ("t2", t(2).to_owned()),
        ("to", ctype(out).to_owned()),
        ("guard", fast_guard(op, out, ins, &body)),
        ("body", body),
    ];
    if half_trig(op, out) {
        s.push_str(TRIG_HALF);
    }
    fill(s, ELEMENTWISE_HEAD, &pairs_of(&values));
    s.push_str(ELEMENTWISE);
    for mask in 0..fast_masks(op) {
        let _ = writeln!(
            s,
            "extern \"C\" __global__ void __launch_bounds__(256) ew_f{mask}(EwFast p) {{ cs_enter_when(p.early); ew_fast<{mask}, UNROLL>(p); }}\n\
             extern \"C\" __global__ void __launch_bounds__(256) ew_t{mask}(EwFast p) {{ cs_enter(); ew_tiny<{mask}>(p); }}"
        );
        if op.card_vectors(out) {
            let _ = writeln!(
                s,
                "extern \"C\" __global__ void __launch_bounds__(256) ew_g{mask}(EwFast p) {{ cs_enter_when(p.early); ew_fast<{mask}, 0>(p); }}"
            );
        }
    }
}

fn reduce(s: &mut String, op: ReduceOp, src: DType, dst: DType, values: bool) {
    let vec = 16 / src.size();
    let split = !matches!(op, ReduceOp::Sum | ReduceOp::Mean) as u8;
    let runs = half_runs(op, src, dst);
    let arg = matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin);
    let head = [
        ("vec", vec.to_string()),
        ("split", split.to_string()),
        ("runs", (runs as u8).to_string()),
        ("values", (values as u8).to_string()),
        ("arg", (arg as u8).to_string()),
        ("colx", cols_x(src).to_string()),
        ("ts", ctype(src).to_owned()),
        ("td", ctype(dst).to_owned()),
    ];
    fill(s, REDUCE_HEAD, &pairs_of(&head));
    let float = src.is_float();
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
        let values = [
            ("vt", vt.to_owned()),
            ("ident", ident.to_owned()),
            ("x", x),
            ("an", nan("a.v")),
            ("bn", nan("b.v")),
            ("better", better.to_owned()),
            ("store", conv(DType::I64, dst, "n == 0 ? 0 : a.i")),
            ("value", conv(dom, src, "a.v")),
            ("replace", step_replaces(fdom, max).to_owned()),
            ("x0", conv(src, dom, "x.v[0]")),
            ("xk", conv(src, dom, "x.v[k]")),
        ];
        fill(s, REDUCE_ARG, &pairs_of(&values));
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
        let values = [
            ("vt", vt.to_owned()),
            ("ident", ident.to_owned()),
            ("x", x),
            ("comb", comb),
            ("fin", fin),
            ("store", conv(dom, dst, "v")),
        ];
        fill(s, REDUCE_ACC, &pairs_of(&values));
    }
    if runs {
        let _ = writeln!(s, "__device__ __forceinline__ float tof(TS x) {{ return {}; }}", conv(src, DType::F32, "x"));
    }
    s.push_str(REDUCE);
    if wide_block(op, src, values) {
        s.push_str(
            "extern \"C\" __global__ void __launch_bounds__(256) red_block8(const __grid_constant__ RedP p) \
             { cs_enter(); red_block_tasks<8>(p); }\n",
        );
    }
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
    let values = [
        ("v", gemv_vec(dtype).to_string()),
        ("ts", ctype(dtype).to_owned()),
        ("to_f", conv(dtype, DType::F32, "x")),
        ("from_f", conv(DType::F32, dtype, "v")),
    ];
    fill(s, GEMV_HEAD, &pairs_of(&values));
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
    let values = [
        ("log", (log as u8).to_string()),
        ("v", v.to_string()),
        ("ts", ctype(src).to_owned()),
        ("td", ctype(dst).to_owned()),
        ("tc", ctype(c).to_owned()),
        ("to_c", conv(src, c, "x")),
        ("from_c", conv(c, dst, "v")),
        ("ex", ex.to_owned()),
    ];
    fill(s, SOFTMAX_HEAD, &pairs_of(&values));
    s.push_str(SOFTMAX);
    let (warp, block) = softmax_layouts(v);
    let head = "extern \"C\" __global__ void __launch_bounds__(256)";
    for (w, ch, g) in warp {
        let _ = writeln!(
            s,
            "{head} sm_w{w}_{ch}_{g}(const __grid_constant__ SmP p) {{ cs_enter_when(p.early); sm_warp_rows<{w}, {ch}, {g}>(p); }}"
        );
    }
    for ch in block {
        let _ = writeln!(
            s,
            "{head} sm_b{v}_{ch}(const __grid_constant__ SmP p) {{ cs_enter_when(p.early); sm_block_rows<{ch}, 256>(p); }}"
        );
    }
    let big = "extern \"C\" __global__ void __launch_bounds__(1024)";
    for ch in softmax_big_layouts(v, softmax_value_bytes(src, dst)) {
        let _ = writeln!(
            s,
            "{big} sm_B{v}_{ch}(const __grid_constant__ SmP p) {{ cs_enter_when(p.early); sm_block_rows<{ch}, 1024>(p); }}"
        );
    }
    for ch in softmax_mid_layouts(v) {
        let _ = writeln!(
            s,
            "extern \"C\" __global__ void __launch_bounds__({SOFTMAX_MID_THREADS}) sm_m{v}_{ch}(const __grid_constant__ SmP p) \
             {{ cs_enter_when(p.early); sm_block_rows<{ch}, {SOFTMAX_MID_THREADS}>(p); }}"
        );
    }
    for ch in softmax_raw_layouts(src, dst) {
        let _ = writeln!(
            s,
            "extern \"C\" __global__ void __launch_bounds__({SOFTMAX_RAW_THREADS}) sm_r{v}_{ch}(const __grid_constant__ SmP p) \
             {{ cs_enter_when(p.early); sm_raw_rows<{ch}, {SOFTMAX_RAW_THREADS}>(p); }}"
        );
    }
    for w in [1, v] {
        let _ = writeln!(
            s,
            "{head} sm_o{w}(const __grid_constant__ SmP p) {{ cs_enter_when(p.early); sm_online_rows<{w}>(p); }}"
        );
        let _ = writeln!(
            s,
            "{head} sm_p{w}(const __grid_constant__ SmP p) {{ cs_enter_when(p.early); sm_split_stats<{w}>(p); }}"
        );
        let _ = writeln!(
            s,
            "{head} sm_q{w}(const __grid_constant__ SmP p) {{ cs_enter_when(p.early); sm_split_out<{w}>(p); }}"
        );
        if v == 1 {
            break;
        }
    }
    if v > 1 {
        let _ = writeln!(
            s,
            "{head} sm_l{v}(const __grid_constant__ SmP p) {{ cs_enter_when(p.early); sm_lead_rows<{v}>(p); }}"
        );
    }
}

/// A fused module's head: element and accumulation types, conversions, exponential.
fn fused_head(s: &mut String, dtype: DType) {
    let c = super::fused_codegen::acc_dtype(dtype);
    let values = [
        ("ts", ctype(dtype).to_owned()),
        ("tc", ctype(c).to_owned()),
        ("to_c", conv(dtype, c, "x")),
        ("from_c", conv(c, dtype, "v")),
        ("ex", if c == DType::F64 { "exp" } else { "expf" }.to_owned()),
    ];
    fill(s, FUSED_HEAD, &pairs_of(&values));
}

/// `(name, value)` pairs as [`fill`] takes them.
fn pairs_of<'a>(values: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    values.iter().map(|(n, v)| (*n, v.as_str())).collect()
}

/// Appends a random module's source for `dist` into `dtype`, `e` elements per block.
fn random(s: &mut String, dist: RandKind, dtype: DType, e: u8) {
    let values = [
        ("dist", (dist as u8).to_string()),
        ("e", e.to_string()),
        ("bits", crate::kernel::random::uniform_bits(dtype).to_string()),
        ("ts", ctype(dtype).to_owned()),
        ("from_d", conv(DType::F64, dtype, "v")),
        ("from_i", conv(DType::I64, dtype, "v")),
        ("from_f", conv(DType::F32, dtype, "v")),
        ("to_d", conv(dtype, DType::F64, "x")),
        ("to_f", conv(dtype, DType::F32, "x")),
        ("to_i", conv(dtype, DType::I64, "x")),
    ];
    fill(s, RANDOM_HEAD, &pairs_of(&values));
    s.push_str(RANDOM);
}
