//! CUDA C source for the tensor kernels, generated per module key: one module per elementwise
//! (op, dtypes) holding every launch path, one per reduction (op, dtypes), one per softmax.
//!
//! Every value is converted exactly as the CPU kernels convert it (`src/driver/cpu/elem.rs`):
//! float → integer truncates toward zero and saturates (`cvt.rzi`, NaN → 0) then wraps, integers
//! wrap, anything → bool is `!= 0`, and `f64` → `f16`/`bf16` rounds once (through a round-to-odd
//! `f32`). Half types are stored as `u16` and converted with PTX `cvt` / bit manipulation, so
//! the sources need no header. Floating-point math runs in `float` for `f16`/`bf16`/`f32` and
//! `double` for `f64` (reductions and softmax accumulate in `double`), without fast math.

use super::super::kernel::{BinaryOp, ReduceOp, UnaryOp};
use crate::dtype::DType;
use std::fmt::Write;

/// The most (collapsed) dimensions a kernel's shape/stride arrays hold.
pub(super) const MAXD: usize = 16;

/// Threads per block of every kernel (each is compiled with `__launch_bounds__(THREADS)`).
pub(super) const THREADS: u32 = 256;

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
    /// A reduction from `src` into `dst`.
    Reduce { op: ReduceOp, src: DType, dst: DType },
    /// Softmax or log-softmax from `src` into `dst`.
    Softmax { src: DType, dst: DType, log: bool },
}

/// A kernel of a module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Entry {
    /// Elementwise over contiguous operands; bit `i` of the mask: input `i` is one broadcast element.
    Fast(u8),
    /// Elementwise over strided operands.
    Strided,
    /// One block per (output, split) task.
    Block,
    /// One warp per output.
    Warp,
    /// One thread per (output, split) task.
    Thread,
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
        };
        match self {
            Entry::Fast(mask) => format!("ew_f{mask}"),
            Entry::Strided => "ew_s".into(),
            Entry::Block => format!("{prefix}_block"),
            Entry::Warp => format!("{prefix}_warp"),
            Entry::Thread => format!("{prefix}_thread"),
        }
    }
}

impl ModuleKey {
    /// Every kernel the module's source defines.
    pub(super) fn entries(&self) -> Vec<Entry> {
        match self {
            ModuleKey::Elementwise { op, .. } => {
                let mut v: Vec<Entry> = (0..fast_masks(*op)).map(Entry::Fast).collect();
                v.push(Entry::Strided);
                v
            }
            _ => vec![Entry::Block, Entry::Warp, Entry::Thread],
        }
    }

    /// The module's complete CUDA C source.
    pub(super) fn source(&self) -> String {
        let mut s = String::from(COMMON);
        match *self {
            ModuleKey::Elementwise { op, out, ins } => elementwise(&mut s, op, out, ins),
            ModuleKey::Reduce { op, src, dst } => reduce(&mut s, op, src, dst),
            ModuleKey::Softmax { src, dst, log } => softmax(&mut s, src, dst, log),
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

/// Helpers every module shares.
const COMMON: &str = r#"
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;
#define MAXD 16
#define I64_MIN (-9223372036854775807LL - 1)
#define I64_MAX 9223372036854775807LL
#define FULL 0xffffffffu

__device__ __forceinline__ float h2f(u16 h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ u16 f2h(float f) { u16 h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float b2f(u16 b) { return __uint_as_float(((u32)b) << 16); }
__device__ __forceinline__ u16 f2b(float f) {
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (u16)(u >> 16);
}
/* f64 -> f32 rounded to odd: a second rounding to a type of at most 22 bits is then exact. */
__device__ __forceinline__ float d2f_odd(double d) {
    float f = __double2float_rz(d);
    if ((double)f != d && d == d) f = __uint_as_float(__float_as_uint(f) | 1u);
    return f;
}
__device__ __forceinline__ u16 d2h(double d) { return f2h(d2f_odd(d)); }
__device__ __forceinline__ u16 d2b(double d) { return f2b(d2f_odd(d)); }
__device__ __forceinline__ double d_nan() { return __longlong_as_double(0x7ff8000000000000LL); }
__device__ __forceinline__ double d_inf() { return __longlong_as_double(0x7ff0000000000000LL); }
__device__ __forceinline__ i64 ipow(i64 b, i64 e) {
    if (e < 0) return b == 1 ? 1 : (b == -1 ? ((e & 1) ? -1 : 1) : 0);
    u64 r = 1, x = (u64)b;
    while (e > 0) { if (e & 1) r *= x; x *= x; e >>= 1; }
    return (i64)r;
}
template <int N> struct RawT;
template <> struct RawT<1> { typedef u8 T; };
template <> struct RawT<2> { typedef u16 T; };
template <> struct RawT<4> { typedef u32 T; };
template <> struct RawT<8> { typedef uint2 T; };
template <> struct RawT<16> { typedef uint4 T; };
template <typename T, int V> struct Pack { T v[V]; };
template <typename T, int V> __device__ __forceinline__ Pack<T, V> ldv(const T* p) {
    typedef typename RawT<sizeof(T) * V>::T R;
    union { R r; Pack<T, V> k; } u;
    u.r = *reinterpret_cast<const R*>(p);
    return u.k;
}
template <typename T, int V> __device__ __forceinline__ void stv(T* p, const Pack<T, V>& k) {
    typedef typename RawT<sizeof(T) * V>::T R;
    union { R r; Pack<T, V> k; } u;
    u.k = k;
    *reinterpret_cast<R*>(p) = u.r;
}
"#;

/// The elementwise kernels, after the generated `T0..T2`, `TO`, `NIN`, `VEC` and `apply`.
const ELEMENTWISE: &str = r#"
struct EwFast { char* out; const char* in0; const char* in1; const char* in2; u64 n; u64 value; int vec; int pad; };
struct EwStrided { EwFast b; int ndim; int pad; i64 shape[MAXD]; i64 st[4][MAXD]; };

template <typename T, bool SCALAR, bool ACTIVE>
__device__ __forceinline__ Pack<T, VEC> get_vec(const T* p, u64 i, T s) {
    Pack<T, VEC> k;
    if (!ACTIVE || SCALAR) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) k.v[j] = s;
    } else {
        k = ldv<T, VEC>(p + i * VEC);
    }
    return k;
}
template <typename T, bool SCALAR, bool ACTIVE>
__device__ __forceinline__ T get_one(const T* p, u64 i, T s) { return (!ACTIVE || SCALAR) ? s : p[i]; }

#define A_ARGS T0, (MASK & 1) != 0, (NIN > 0)
#define B_ARGS T1, (MASK & 2) != 0, (NIN > 1)
#define C_ARGS T2, (MASK & 4) != 0, (NIN > 2)

template <int MASK>
__device__ __forceinline__ void ew_fast(const EwFast& p) {
    const u64 n = p.n;
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 step = (u64)gridDim.x * blockDim.x;
    TO* out = (TO*)p.out;
    const T0* a = (const T0*)p.in0;
    const T1* b = (const T1*)p.in1;
    const T2* c = (const T2*)p.in2;
    T0 sa = T0();
    T1 sb = T1();
    T2 sc = T2();
    if (NIN > 0 && (MASK & 1)) sa = a[0];
    if (NIN > 1 && (MASK & 2)) sb = b[0];
    if (NIN > 2 && (MASK & 4)) sc = c[0];
    u64 start = 0;
    if (VEC > 1 && p.vec) {
        const u64 nv = n / VEC;
        u64 i = tid;
        for (; i + step < nv; i += 2 * step) {
            const Pack<T0, VEC> a0 = get_vec<A_ARGS>(a, i, sa), a1 = get_vec<A_ARGS>(a, i + step, sa);
            const Pack<T1, VEC> b0 = get_vec<B_ARGS>(b, i, sb), b1 = get_vec<B_ARGS>(b, i + step, sb);
            const Pack<T2, VEC> c0 = get_vec<C_ARGS>(c, i, sc), c1 = get_vec<C_ARGS>(c, i + step, sc);
            Pack<TO, VEC> r0, r1;
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                r0.v[j] = apply(a0.v[j], b0.v[j], c0.v[j], p.value);
                r1.v[j] = apply(a1.v[j], b1.v[j], c1.v[j], p.value);
            }
            stv<TO, VEC>(out + i * VEC, r0);
            stv<TO, VEC>(out + (i + step) * VEC, r1);
        }
        if (i < nv) {
            const Pack<T0, VEC> a0 = get_vec<A_ARGS>(a, i, sa);
            const Pack<T1, VEC> b0 = get_vec<B_ARGS>(b, i, sb);
            const Pack<T2, VEC> c0 = get_vec<C_ARGS>(c, i, sc);
            Pack<TO, VEC> r0;
#pragma unroll
            for (int j = 0; j < VEC; ++j) r0.v[j] = apply(a0.v[j], b0.v[j], c0.v[j], p.value);
            stv<TO, VEC>(out + i * VEC, r0);
        }
        start = nv * VEC;
    }
    for (u64 i = start + tid; i < n; i += step) {
        out[i] = apply(get_one<A_ARGS>(a, i, sa), get_one<B_ARGS>(b, i, sb), get_one<C_ARGS>(c, i, sc), p.value);
    }
}

extern "C" __global__ void __launch_bounds__(256) ew_s(const __grid_constant__ EwStrided p) {
    const u64 n = p.b.n;
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 step = (u64)gridDim.x * blockDim.x;
    for (u64 i = tid; i < n; i += step) {
        i64 o0 = 0, o1 = 0, o2 = 0, o3 = 0;
        if (n <= 0xffffffffull) {
            u32 rem = (u32)i;
#pragma unroll 1
            for (int d = 0; d < p.ndim; ++d) {
                const u32 sz = (u32)p.shape[d];
                const u32 q = rem / sz;
                const i64 k = (i64)(rem - q * sz);
                rem = q;
                o0 += k * p.st[0][d];
                if (NIN > 0) o1 += k * p.st[1][d];
                if (NIN > 1) o2 += k * p.st[2][d];
                if (NIN > 2) o3 += k * p.st[3][d];
            }
        } else {
            u64 rem = i;
#pragma unroll 1
            for (int d = 0; d < p.ndim; ++d) {
                const u64 sz = (u64)p.shape[d];
                const u64 q = rem / sz;
                const i64 k = (i64)(rem - q * sz);
                rem = q;
                o0 += k * p.st[0][d];
                if (NIN > 0) o1 += k * p.st[1][d];
                if (NIN > 1) o2 += k * p.st[2][d];
                if (NIN > 2) o3 += k * p.st[3][d];
            }
        }
        const T0 x0 = NIN > 0 ? ((const T0*)p.b.in0)[o1] : T0();
        const T1 x1 = NIN > 1 ? ((const T1*)p.b.in1)[o2] : T1();
        const T2 x2 = NIN > 2 ? ((const T2*)p.b.in2)[o3] : T2();
        ((TO*)p.b.out)[o0] = apply(x0, x1, x2, p.b.value);
    }
}
"#;

/// The C function of a float domain (`f32` math uses the `f`-suffixed functions).
fn fname(name: &str, m: DType) -> String {
    if m == DType::F32 {
        format!("{name}f")
    } else {
        name.to_owned()
    }
}

/// The body of `apply` (statements ending in `return`) for a unary op computed in `c`.
fn unary_body(op: UnaryOp, src: DType, c: DType) -> String {
    let m = math(c);
    let x = conv(c, m, &conv(src, c, "a"));
    let mt = ctype(m);
    let f = |n: &str| fname(n, m);
    let lit = |v: &str| if m == DType::F32 { format!("{v}f") } else { v.to_owned() };
    let r = match (m, op) {
        (DType::F32 | DType::F64, _) => match op {
            UnaryOp::Neg => "-x".to_owned(),
            UnaryOp::Abs => format!("{}(x)", f("fabs")),
            UnaryOp::Exp => format!("{}(x)", f("exp")),
            UnaryOp::Log => format!("{}(x)", f("log")),
            UnaryOp::Sqrt => format!("{}(x)", f("sqrt")),
            UnaryOp::Rsqrt => format!("{} / {}(x)", lit("1.0"), f("sqrt")),
            UnaryOp::Sin => format!("{}(x)", f("sin")),
            UnaryOp::Cos => format!("{}(x)", f("cos")),
            UnaryOp::Tanh => format!("{}(x)", f("tanh")),
            UnaryOp::Sigmoid => format!(
                "x >= {z} ? {one} / ({one} + {e}(-x)) : {e}(x) / ({one} + {e}(x))",
                z = lit("0.0"),
                one = lit("1.0"),
                e = f("exp")
            ),
            UnaryOp::Relu => format!("(x > {z} || isnan(x)) ? x : {z}", z = lit("0.0")),
            UnaryOp::Gelu => format!(
                "{half} * x * {erfc}(-x * {r})",
                half = lit("0.5"),
                erfc = f("erfc"),
                r = lit("0.70710678118654752440")
            ),
        },
        (DType::I64, UnaryOp::Neg) => "(i64)(0ull - (u64)x)".to_owned(),
        (DType::I64, UnaryOp::Abs) => "x < 0 ? (i64)(0ull - (u64)x) : x".to_owned(),
        (DType::I64, UnaryOp::Relu) => "x > 0 ? x : 0".to_owned(),
        // The tensor layer computes the other functions in a floating-point dtype; bool's abs
        // and relu are the identity.
        _ => "x".to_owned(),
    };
    let heavy = matches!(m, DType::F32 | DType::F64) && !matches!(op, UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu);
    let (calc, r) = if heavy {
        // Transcendentals are called, not inlined into every unrolled copy: NVRTC compiles faster.
        (format!("__device__ __noinline__ {mt} calc({mt} x) {{ return {r}; }}\n"), "calc(x)".to_owned())
    } else {
        (String::new(), r)
    };
    format!("{calc}@@    const {mt} x = {x};\n    const {mt} r = {r};\n    return {};\n", conv(m, c, "r"))
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
            _ => format!("({mt})pow((double)x, (double)y)"),
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
    let (calc, r) = if op == BinaryOp::Pow && matches!(m, DType::F32 | DType::F64) {
        (format!("__device__ __noinline__ {mt} calc({mt} x, {mt} y) {{ return {r}; }}\n"), "calc(x, y)".to_owned())
    } else {
        (String::new(), r)
    };
    format!("{calc}@@{head}    const {mt} r = {r};\n    return {};\n", conv(c, out, &conv(m, c, "r")))
}

/// Fast kernels of an elementwise op: masks `0..fast_masks(op)` (every combination of broadcast
/// inputs for up to two inputs; only the all-dense one for `where`).
pub(super) fn fast_masks(op: EwOp) -> u8 {
    match op.inputs() {
        3 => 1,
        n => 1 << n,
    }
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
pub(super) fn ew_vec(op: EwOp, out: DType, ins: [DType; 3]) -> usize {
    let widest = ins[..op.inputs()].iter().map(|d| d.size()).chain([out.size()]).max().unwrap_or(1);
    16 / widest
}

fn elementwise(s: &mut String, op: EwOp, out: DType, ins: [DType; 3]) {
    let n = op.inputs();
    let t = |i: usize| if i < n { ctype(ins[i]) } else { "u8" };
    let vec = ew_vec(op, out, ins);
    let _ = write!(
        s,
        "#define NIN {n}\n#define VEC {vec}\ntypedef {} T0;\ntypedef {} T1;\ntypedef {} T2;\ntypedef {} TO;\n",
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
    // A body may start with a helper function, separated from it by `@@`.
    let (calc, body) = body.split_once("@@").unwrap_or(("", &body));
    let _ = write!(
        s,
        "{calc}__device__ __forceinline__ TO apply(T0 a, T1 b, T2 c, u64 value) {{\n    (void)a; (void)b; (void)c; (void)value;\n{body}}}\n"
    );
    s.push_str(ELEMENTWISE);
    for mask in 0..fast_masks(op) {
        let _ = writeln!(
            s,
            "extern \"C\" __global__ void __launch_bounds__(256) ew_f{mask}(EwFast p) {{ ew_fast<{mask}>(p); }}"
        );
    }
}

/// The reduction kernels, after the generated `TS`, `TD`, `VEC`, `acc` and its functions.
const REDUCE: &str = r#"
struct RedP {
    const char* src; char* dst; char* partials; u32* counters;
    i64 n_out, n_red, splits, chunk;
    int out_ndim, red_ndim, vec, pad;
    i64 out_shape[MAXD]; i64 out_sst[MAXD]; i64 out_dst[MAXD];
    i64 red_shape[MAXD]; i64 red_st[MAXD];
};

__device__ __forceinline__ void out_offsets(const RedP& p, i64 o, i64& so, i64& dof) {
    so = 0; dof = 0;
#pragma unroll 1
    for (int d = 0; d < p.out_ndim; ++d) {
        const i64 q = o / p.out_shape[d];
        const i64 k = o - q * p.out_shape[d];
        o = q;
        so += k * p.out_sst[d];
        dof += k * p.out_dst[d];
    }
}

__device__ __forceinline__ i64 red_offset(const RedP& p, i64 r) {
    i64 off = 0;
#pragma unroll 1
    for (int d = 0; d < p.red_ndim; ++d) {
        const i64 q = r / p.red_shape[d];
        off += (r - q * p.red_shape[d]) * p.red_st[d];
        r = q;
    }
    return off;
}

__device__ __forceinline__ acc fold(const Pack<TS, VEC>& v, i64 r) {
    acc a = load(v.v[0], r);
#pragma unroll
    for (int j = 1; j < VEC; ++j) a = combine(a, load(v.v[j], r + j));
    return a;
}

/* Combines elements r0 + lane, r0 + lane + width, ... below r1 of the row at `base`. */
__device__ __forceinline__ acc accumulate(const RedP& p, const TS* base, i64 r0, i64 r1, i64 lane, i64 width) {
    acc a = identity();
    if (p.red_ndim > 1) {
        for (i64 r = r0 + lane; r < r1; r += width) a = combine(a, load(base[red_offset(p, r)], r));
        return a;
    }
    const i64 st = p.red_ndim == 1 ? p.red_st[0] : 0;
    if (VEC > 1 && p.vec) {
        const i64 nv = (r1 - r0) / VEC;
        const TS* b = base + r0;
        acc a1 = identity(), a2 = identity(), a3 = identity();
        i64 i = lane;
        for (; i + 3 * width < nv; i += 4 * width) {
            const Pack<TS, VEC> v0 = ldv<TS, VEC>(b + i * VEC);
            const Pack<TS, VEC> v1 = ldv<TS, VEC>(b + (i + width) * VEC);
            const Pack<TS, VEC> v2 = ldv<TS, VEC>(b + (i + 2 * width) * VEC);
            const Pack<TS, VEC> v3 = ldv<TS, VEC>(b + (i + 3 * width) * VEC);
            a = combine(a, fold(v0, r0 + i * VEC));
            a1 = combine(a1, fold(v1, r0 + (i + width) * VEC));
            a2 = combine(a2, fold(v2, r0 + (i + 2 * width) * VEC));
            a3 = combine(a3, fold(v3, r0 + (i + 3 * width) * VEC));
        }
        for (; i < nv; i += width) a = combine(a, fold(ldv<TS, VEC>(b + i * VEC), r0 + i * VEC));
        a = combine(combine(a, a1), combine(a2, a3));
        for (i64 r = r0 + nv * VEC + lane; r < r1; r += width) a = combine(a, load(base[r], r));
        return a;
    }
    for (i64 r = r0 + lane; r < r1; r += width) a = combine(a, load(base[r * st], r));
    return a;
}

__device__ __forceinline__ acc warp_reduce(acc a) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) a = combine(a, shfl_down(a, off));
    return a;
}

/* The block's combined value, in thread 0. */
__device__ __forceinline__ acc block_reduce(acc a, acc* sh) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    a = warp_reduce(a);
    __syncthreads();
    if (lane == 0) sh[w] = a;
    __syncthreads();
    a = (int)threadIdx.x < (int)(blockDim.x >> 5) ? sh[threadIdx.x] : identity();
    if (w == 0) a = warp_reduce(a);
    return a;
}

extern "C" __global__ void __launch_bounds__(256) red_block(const __grid_constant__ RedP p) {
    __shared__ acc sh[32];
    __shared__ int last;
    const i64 tasks = p.n_out * p.splits;
    for (i64 t = blockIdx.x; t < tasks; t += gridDim.x) {
        const i64 o = t / p.splits, s = t - (t / p.splits) * p.splits;
        i64 so, dof;
        out_offsets(p, o, so, dof);
        const i64 r0 = s * p.chunk;
        const i64 r1 = min(p.n_red, r0 + p.chunk);
        acc a = accumulate(p, (const TS*)p.src + so, r0, r1, threadIdx.x, blockDim.x);
        a = block_reduce(a, sh);
        if (p.splits == 1) {
            if (threadIdx.x == 0) store((TD*)p.dst + dof, a, p.n_red);
            continue;
        }
        if (threadIdx.x == 0) {
            st_partial(p.partials, o * p.splits + s, a);
            __threadfence();
            last = atomicAdd(p.counters + o, 1u) == (u32)(p.splits - 1);
        }
        __syncthreads();
        if (last) {
            __threadfence();
            acc b = identity();
            for (i64 k = threadIdx.x; k < p.splits; k += blockDim.x) b = combine(b, ld_partial(p.partials, o * p.splits + k));
            b = block_reduce(b, sh);
            if (threadIdx.x == 0) {
                store((TD*)p.dst + dof, b, p.n_red);
                p.counters[o] = 0;
            }
        }
        __syncthreads();
    }
}

extern "C" __global__ void __launch_bounds__(256) red_warp(const __grid_constant__ RedP p) {
    const i64 lane = threadIdx.x & 31;
    const i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 o = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; o < p.n_out; o += warps) {
        i64 so, dof;
        out_offsets(p, o, so, dof);
        acc a = warp_reduce(accumulate(p, (const TS*)p.src + so, 0, p.n_red, lane, 32));
        if (lane == 0) store((TD*)p.dst + dof, a, p.n_red);
    }
}

extern "C" __global__ void __launch_bounds__(256) red_thread(const __grid_constant__ RedP p) {
    const i64 tasks = p.n_out * p.splits;
    const i64 step = (i64)gridDim.x * blockDim.x;
    for (i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x; t < tasks; t += step) {
        const i64 s = t / p.n_out, o = t - s * p.n_out;
        i64 so, dof;
        out_offsets(p, o, so, dof);
        const i64 r0 = s * p.chunk;
        const i64 r1 = min(p.n_red, r0 + p.chunk);
        const acc a = accumulate(p, (const TS*)p.src + so, r0, r1, 0, 1);
        if (p.splits == 1) {
            store((TD*)p.dst + dof, a, p.n_red);
            continue;
        }
        st_partial(p.partials, o * p.splits + s, a);
        __threadfence();
        if (atomicAdd(p.counters + o, 1u) == (u32)(p.splits - 1)) {
            __threadfence();
            acc b = identity();
            for (i64 k = 0; k < p.splits; ++k) b = combine(b, ld_partial(p.partials, o * p.splits + k));
            store((TD*)p.dst + dof, b, p.n_red);
            p.counters[o] = 0;
        }
    }
}
"#;

/// Bytes of one partial result of a reduction (the widest accumulator: value and index).
pub(super) const PARTIAL_BYTES: usize = 16;

fn reduce(s: &mut String, op: ReduceOp, src: DType, dst: DType) {
    let vec = 16 / src.size();
    let _ = write!(s, "#define VEC {vec}\ntypedef {} TS;\ntypedef {} TD;\n", ctype(src), ctype(dst));
    let float = src.is_float();
    let arg = matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin);
    let max = matches!(op, ReduceOp::Max | ReduceOp::ArgMax);
    // The accumulator's scalar domain: f64 for float values and means, i64 otherwise.
    let dom = if float || op == ReduceOp::Mean { DType::F64 } else { DType::I64 };
    let vt = ctype(dom);
    let x = conv(src, dom, "x");
    let better = if max { "b.v > a.v" } else { "b.v < a.v" };
    let nan = |v: &str| if dom == DType::F64 { format!("isnan({v})") } else { "false".to_owned() };
    if arg {
        let ident = match (dom, max) {
            (DType::F64, true) => "-d_inf()",
            (DType::F64, false) => "d_inf()",
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
__device__ __forceinline__ void store(TD* out, acc a, i64 n) {{ *out = {store}; }}
"#,
            an = nan("a.v"),
            bn = nan("b.v"),
            store = conv(DType::I64, dst, "n == 0 ? 0 : a.i"),
        );
    } else {
        let (ident, comb) = match (op, dom) {
            (ReduceOp::Sum | ReduceOp::Mean, DType::F64) => ("0.0", "a + b".to_owned()),
            (ReduceOp::Sum, _) => ("0", "(i64)((u64)a + (u64)b)".to_owned()),
            (_, DType::F64) => (
                if max { "-d_inf()" } else { "d_inf()" },
                format!("isnan(a) ? a : (isnan(b) ? b : (b {} a ? b : a))", if max { ">" } else { "<" }),
            ),
            _ => (if max { "I64_MIN" } else { "I64_MAX" }, format!("b {} a ? b : a", if max { ">" } else { "<" })),
        };
        let fin = match (op, dom) {
            (ReduceOp::Mean, _) => "a / (double)n".to_owned(),
            (ReduceOp::Sum, _) => "a".to_owned(),
            (_, DType::F64) => "n == 0 ? d_nan() : a".to_owned(),
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
__device__ __forceinline__ void store(TD* out, acc a, i64 n) {{ (void)n; const acc v = {fin}; *out = {store}; }}
"#,
            store = conv(dom, dst, "v"),
        );
    }
    s.push_str(REDUCE);
}

/// The softmax kernels, after the generated `TS`, `TD`, `LOG`, `to_d` and `from_d`.
const SOFTMAX: &str = r#"
struct SmP {
    const char* src; char* dst; i64 rows, n, sst, dst_st;
    int out_ndim, pad;
    i64 out_shape[MAXD]; i64 out_sst[MAXD]; i64 out_dst[MAXD];
};

__device__ __forceinline__ double warp_max(double v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = fmax(v, __shfl_down_sync(FULL, v, off));
    return __shfl_sync(FULL, v, 0);
}
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(FULL, v, off);
    return __shfl_sync(FULL, v, 0);
}
template <bool MAX>
__device__ __forceinline__ double block_all(double v, double* sh) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = MAX ? warp_max(v) : warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        v = lane < nw ? sh[lane] : (MAX ? -d_inf() : 0.0);
        v = MAX ? warp_max(v) : warp_sum(v);
        if (lane == 0) sh[32] = v;
    }
    __syncthreads();
    return sh[32];
}

/* MODE 0: the block does the row, 1: a warp, 2: one thread. */
template <int MODE>
__device__ __forceinline__ void sm_row(const SmP& p, i64 row, i64 lane, i64 width, double* sh) {
    i64 so = 0, dof = 0, o = row;
#pragma unroll 1
    for (int d = 0; d < p.out_ndim; ++d) {
        const i64 q = o / p.out_shape[d];
        const i64 k = o - q * p.out_shape[d];
        o = q;
        so += k * p.out_sst[d];
        dof += k * p.out_dst[d];
    }
    const TS* x = (const TS*)p.src + so;
    TD* y = (TD*)p.dst + dof;
    double m = -d_inf();
    for (i64 r = lane; r < p.n; r += width) m = fmax(m, to_d(x[r * p.sst]));
    if (MODE == 0) m = block_all<true>(m, sh);
    if (MODE == 1) m = warp_max(m);
    const double shift = isfinite(m) ? m : 0.0;
    double s = 0.0;
    for (i64 r = lane; r < p.n; r += width) s += exp(to_d(x[r * p.sst]) - shift);
    if (MODE == 0) s = block_all<false>(s, sh);
    if (MODE == 1) s = warp_sum(s);
    const double ls = log(s);
    for (i64 r = lane; r < p.n; r += width) {
        const double v = to_d(x[r * p.sst]) - shift;
        y[r * p.dst_st] = from_d(LOG ? v - ls : exp(v) / s);
    }
    (void)ls;
}

extern "C" __global__ void __launch_bounds__(256) sm_block(const __grid_constant__ SmP p) {
    __shared__ double sh[33];
    for (i64 row = blockIdx.x; row < p.rows; row += gridDim.x) sm_row<0>(p, row, threadIdx.x, blockDim.x, sh);
}
extern "C" __global__ void __launch_bounds__(256) sm_warp(const __grid_constant__ SmP p) {
    const i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 row = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; row < p.rows; row += warps)
        sm_row<1>(p, row, threadIdx.x & 31, 32, 0);
}
extern "C" __global__ void __launch_bounds__(256) sm_thread(const __grid_constant__ SmP p) {
    const i64 step = (i64)gridDim.x * blockDim.x;
    for (i64 row = (i64)blockIdx.x * blockDim.x + threadIdx.x; row < p.rows; row += step) sm_row<2>(p, row, 0, 1, 0);
}
"#;

fn softmax(s: &mut String, src: DType, dst: DType, log: bool) {
    let _ = write!(
        s,
        "#define LOG {}\ntypedef {} TS;\ntypedef {} TD;\n\
         __device__ __forceinline__ double to_d(TS x) {{ return {}; }}\n\
         __device__ __forceinline__ TD from_d(double v) {{ return {}; }}\n",
        log as u8,
        ctype(src),
        ctype(dst),
        conv(src, DType::F64, "x"),
        conv(DType::F64, dst, "v"),
    );
    s.push_str(SOFTMAX);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_are_spelled_as_the_cpu_converts() {
        assert_eq!(conv(DType::F32, DType::F32, "a"), "(a)");
        assert_eq!(conv(DType::F32, DType::I32, "a"), "((int)__float2ll_rz((a)))");
        assert_eq!(conv(DType::F64, DType::F16, "a"), "d2h(a)");
        assert_eq!(conv(DType::I64, DType::BF16, "a"), "d2b((double)(i64)(a))");
        assert_eq!(conv(DType::F16, DType::Bool, "a"), "((u8)(h2f(a) != 0))");
        assert_eq!(conv(DType::Bool, DType::F32, "a"), "((float)(i64)((i64)((a) != 0)))");
    }

    #[test]
    fn modules_list_their_entries() {
        let m = ModuleKey::Elementwise {
            op: EwOp::Binary(BinaryOp::Add, DType::F32),
            out: DType::F32,
            ins: [DType::F32, DType::F32, DType::Bool],
        };
        let entries = m.entries();
        assert_eq!(entries.len(), 5);
        let src = m.source();
        for e in entries {
            assert!(src.contains(&format!("void __launch_bounds__(256) {}(", e.name(&m))), "{e:?}");
        }
        assert_eq!(ew_vec(EwOp::Binary(BinaryOp::Add, DType::F32), DType::F32, [DType::F32; 3]), 4);
        assert_eq!(ew_vec(EwOp::Cast, DType::F16, [DType::F64, DType::Bool, DType::Bool]), 2);
        let r = ModuleKey::Reduce { op: ReduceOp::ArgMax, src: DType::BF16, dst: DType::I64 };
        assert!(r.source().contains("red_thread"));
    }
}
