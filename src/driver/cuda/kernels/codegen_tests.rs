//! Tests of the generated CUDA C (`codegen.rs`): conversions, entry names, launch bounds and
//! the first statement of every kernel.

use super::codegen::*;
use super::ctx::launch_early;
use super::elementwise_policy::*;
use super::reduce_layouts::half_runs;
use super::sources::{COMMON, TRIG_HALF};
use super::vocab::*;
use crate::dtype::DType;
use crate::kernel::{BinaryOp, ReduceOp, UnaryOp};

#[test]
fn conversions_are_spelled_as_the_cpu_converts() {
    assert_eq!(conv(DType::F32, DType::F32, "a"), "(a)");
    assert_eq!(conv(DType::F32, DType::I32, "a"), "((int)__float2ll_rz((a)))");
    assert_eq!(conv(DType::F64, DType::F16, "a"), "d2h(a)");
    assert_eq!(conv(DType::I64, DType::BF16, "a"), "d2b((double)(i64)(a))");
    assert_eq!(conv(DType::F16, DType::Bool, "a"), "((u8)(h2f(a) != 0))");
    assert_eq!(conv(DType::Bool, DType::F32, "a"), "((float)(i64)((i64)((a) != 0)))");
}

/// Every kernel's first statement is `cs_enter` or `cs_enter_when` (`cu/common.cu`): the launch allows
/// programmatic serialization (`ctx.rs`), which is only safe when each kernel waits for the
/// grids before it before it touches memory.
#[test]
fn every_kernel_waits_for_the_grids_before_it() {
    let d = [DType::F32, DType::F32, DType::Bool];
    let mut modules = vec![
        ModuleKey::Elementwise { op: EwOp::Fill, out: DType::F32, ins: d },
        ModuleKey::Elementwise { op: EwOp::Cast, out: DType::BF16, ins: d },
        ModuleKey::Elementwise { op: EwOp::Unary(UnaryOp::Exp), out: DType::F16, ins: [DType::F16; 3] },
        ModuleKey::Elementwise { op: EwOp::Binary(BinaryOp::Add, DType::F32), out: DType::F32, ins: d },
        ModuleKey::Elementwise { op: EwOp::Where, out: DType::F32, ins: [DType::Bool, DType::F32, DType::F32] },
        ModuleKey::Elementwise { op: EwOp::Unary(UnaryOp::Sin), out: DType::BF16, ins: [DType::BF16; 3] },
    ];
    for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::ArgMin] {
        let dst = if matches!(op, ReduceOp::ArgMin) { DType::I64 } else { DType::F32 };
        modules.push(ModuleKey::Reduce { op, src: DType::F32, dst, values: false });
    }
    for (src, dst) in [(DType::F32, DType::F32), (DType::BF16, DType::BF16), (DType::F16, DType::F32)] {
        modules.push(ModuleKey::Softmax { src, dst, log: false });
    }
    for dtype in [DType::F32, DType::BF16] {
        modules.push(ModuleKey::Norm { dtype });
        modules.push(ModuleKey::Gemv { dtype });
    }
    assert!(COMMON.contains(&format!("#define CS_PDL_MAX_GRID {PDL_MAX_GRID}\n")));
    for m in modules {
        let text = m.source();
        let kernels: Vec<&str> = text.split("__global__").skip(1).collect();
        assert_eq!(kernels.len(), m.entries().len(), "{m:?}");
        for k in kernels {
            let body = &k[k.find('{').expect("a kernel has a body") + 1..].trim_start();
            // The fast elementwise kernels, the softmax kernels, `gv_rows*` and the norm kernels
            // at any grid once told (`Ctx::run_early`), the others below `PDL_MAX_GRID` blocks.
            let told = [" ew_f", " ew_g", " sm_", " gv_rows", " nm_"].iter().any(|name| k.contains(name));
            let first = if told { "cs_enter_when(p.early);" } else { "cs_enter();" };
            assert!(body.starts_with(first), "{m:?}: {}", &k[..k.len().min(120)]);
        }
    }
}

/// The modules of the functions whose vectors per thread are the card's hold the fast kernel that
/// takes one vector at a time (`ew_g*`, `heavy_unroll=0`) beside the usual one for every mask;
/// the others do not.
#[test]
fn card_vector_functions_hold_a_one_vector_kernel() {
    let half = |op, d| ModuleKey::Elementwise { op: EwOp::Unary(op), out: d, ins: [d, DType::Bool, DType::Bool] };
    let pow = |c| ModuleKey::Elementwise { op: EwOp::Binary(BinaryOp::Pow, c), out: c, ins: [c, c, DType::Bool] };
    let with = [half(UnaryOp::Sin, DType::BF16), half(UnaryOp::Cos, DType::F16), half(UnaryOp::Tanh, DType::F16)];
    for m in with.into_iter().chain([pow(DType::F32)]) {
        let (src, entries) = (m.source(), m.entries());
        let ModuleKey::Elementwise { op, .. } = m else { unreachable!() };
        for mask in 0..fast_masks(op) {
            assert!(entries.contains(&Entry::FastOne(mask)) && entries.contains(&Entry::Fast(mask)), "{m:?}");
            assert!(
                src.contains(&format!(" ew_g{mask}(EwFast p) {{ cs_enter_when(p.early); ew_fast<{mask}, 0>(p); }}")),
                "{m:?}"
            );
            assert!(src
                .contains(&format!(" ew_f{mask}(EwFast p) {{ cs_enter_when(p.early); ew_fast<{mask}, UNROLL>(p); }}")));
        }
    }
    // The launch takes it only under `heavy_unroll=0`, and only for those functions.
    use crate::driver::card::{CardFacts, CardProfile};
    let unroll = |u| move || CardProfile { heavy_unroll: u, ..CardProfile::of(CardFacts::default()) };
    let entry = |op, d, v, mask, card| fast_choice(op, d, v, mask, card).0;
    let sin = EwOp::Unary(UnaryOp::Sin);
    assert_eq!(entry(sin, DType::BF16, 8, 1, unroll(0)), Entry::FastOne(1));
    assert_eq!(entry(sin, DType::BF16, 8, 1, unroll(1)), Entry::Fast(1));
    assert_eq!(entry(EwOp::Binary(BinaryOp::Pow, DType::F32), DType::F32, 4, 0, unroll(0)), Entry::FastOne(0));
    let unread = || -> CardProfile { panic!("the card's choice is read only for the heavy functions") };
    assert_eq!(fast_choice(sin, DType::F32, 4, 0, unread).0, Entry::Fast(0));
    assert_eq!(fast_choice(EwOp::Unary(UnaryOp::Exp), DType::F16, 8, 0, unread).0, Entry::Fast(0));
    let without = [half(UnaryOp::Sin, DType::F32), half(UnaryOp::Tanh, DType::BF16), half(UnaryOp::Exp, DType::F16)];
    for m in without.into_iter().chain([pow(DType::F64)]) {
        assert!(!m.entries().iter().any(|e| matches!(e, Entry::FastOne(_))), "{m:?}");
        assert!(!m.source().contains(" ew_g0("), "{m:?}");
    }
}

/// The vectors a thread of the heavy functions are the card's: bf16 `sin` / `cos` take
/// `heavy_vectors`, the other heavy ones `mid_vectors`, and the rest their own without reading
/// the card (op dispatch is hot).
#[test]
fn heavy_functions_take_the_cards_vectors() {
    use crate::driver::card::{CardFacts, CardProfile};
    let card = CardProfile { heavy_vectors: 3, mid_vectors: 5, ..CardProfile::of(CardFacts::default()) };
    let (sin, cos, tanh) = (EwOp::Unary(UnaryOp::Sin), EwOp::Unary(UnaryOp::Cos), EwOp::Unary(UnaryOp::Tanh));
    let pow = EwOp::Binary(BinaryOp::Pow, DType::F32);
    for (op, d, v, want) in [
        (sin, DType::BF16, 8, 3),
        (cos, DType::BF16, 8, 3),
        (sin, DType::F16, 8, 5),
        (cos, DType::F16, 8, 5),
        (tanh, DType::F16, 8, 5),
        (pow, DType::F32, 4, 5),
    ] {
        assert_eq!(fast_choice(op, d, v, 0, || card).1, want, "{op:?} of {d}");
        assert!(ew_heaviest(op, d) == (want == 3), "{op:?} of {d}");
    }
    let zero = CardProfile { heavy_vectors: 0, mid_vectors: 0, ..card };
    assert_eq!(fast_choice(sin, DType::F16, 8, 0, || zero).1, 1, "never fewer than one");
    let unread = || -> CardProfile { panic!("the card's choice is read only for the heavy functions") };
    for (op, d, v) in [(sin, DType::F32, 4), (tanh, DType::BF16, 8), (EwOp::Unary(UnaryOp::Exp), DType::F16, 8)] {
        assert_eq!(fast_choice(op, d, v, 0, unread).1, ew_per_thread(op, d, v), "{op:?} of {d}");
    }
    // A half type not in vectors (a misaligned tensor's) is not the card's either.
    assert_eq!(fast_choice(sin, DType::BF16, 1, 0, unread).1, ew_per_thread(sin, DType::BF16, 1));
}

/// A grid (the fast elementwise kernel's, a softmax kernel's) is launched early from the card's
/// `early_waves` waves of blocks on, never when it is 0.
#[test]
fn grids_of_enough_waves_launch_early() {
    assert!(!launch_early(1 << 20, 1056, 0), "0: never");
    assert!(!launch_early(2111, 1056, 2) && launch_early(2112, 1056, 2));
    assert!(launch_early(1056, 1056, 1) && !launch_early(1055, 1056, 1));
    assert!(launch_early(1, 0, 1), "a wave counts one block at least");
    assert!(!launch_early(u32::MAX, u64::MAX, 64), "no overflow");
}

#[test]
fn modules_list_their_entries() {
    let m = ModuleKey::Elementwise {
        op: EwOp::Binary(BinaryOp::Add, DType::F32),
        out: DType::F32,
        ins: [DType::F32, DType::F32, DType::Bool],
    };
    let entries = m.entries();
    assert_eq!(entries.len(), 11);
    let src = m.source();
    for e in entries {
        let bounds = if e == Entry::Tile { "TILE_BOUNDS" } else { "__launch_bounds__(256)" };
        assert!(src.contains(&format!("void {bounds} {}(", e.name(&m))), "{e:?}");
    }
    assert!(
        src.contains("#define TILE_PAIRS 0\n#define TILE_BOUNDS __launch_bounds__(256)\n"),
        "f32 tiles keep one element per access and the compiler's registers"
    );
    assert!(src.contains("#define TILE 64\n"));
    let copy =
        ModuleKey::Elementwise { op: EwOp::Copy, out: DType::BF16, ins: [DType::BF16, DType::Bool, DType::Bool] };
    assert!(copy.source().contains("#define TILE 64\n"));
    let wide = ModuleKey::Elementwise { op: EwOp::Copy, out: DType::I64, ins: [DType::I64, DType::Bool, DType::Bool] };
    assert!(wide.source().contains("#define TILE 32\n"));
    // A bool tile and two f32 tiles of 64 fit in 40 KiB of shared memory.
    assert_eq!(tile_edge(EwOp::Where, DType::F32, [DType::Bool, DType::F32, DType::F32]), 64);
    assert_eq!(ew_vec(EwOp::Binary(BinaryOp::Add, DType::F32), DType::F32, [DType::F32; 3]), 4);
    assert_eq!(ew_vec(EwOp::Cast, DType::F16, [DType::F64, DType::Bool, DType::Bool]), 2);
    // Extremes of floats in one NaN-propagating instruction; half columns in 16 x 16 blocks.
    let amax = ModuleKey::Reduce { op: ReduceOp::Max, src: DType::BF16, dst: DType::BF16, values: false }.source();
    assert!(
        amax.contains("acc combine(acc a, acc b) { return fmax_nan(a, b); }") && amax.contains("#define COLX 16\n")
    );
    let amin = ModuleKey::Reduce { op: ReduceOp::Min, src: DType::F32, dst: DType::F32, values: false }.source();
    assert!(amin.contains("return fmin_nan(a, b);") && amin.contains("#define COLX 32\n"));
    let r = ModuleKey::Reduce { op: ReduceOp::ArgMax, src: DType::BF16, dst: DType::I64, values: true };
    assert!(r.source().contains("red_thread"));
    for (src, dst) in
        [(DType::F32, DType::F32), (DType::BF16, DType::BF16), (DType::F16, DType::F32), (DType::F64, DType::F64)]
    {
        let m = ModuleKey::Softmax { src, dst, log: true };
        let text = m.source();
        for e in m.entries() {
            let name = e.name(&m);
            assert_eq!(text.matches(&format!(" {name}(")).count(), 1, "{src:?}->{dst:?}: {name}");
        }
    }
}

/// `gelu_half` (`cu/common.cu`) spells the constants of [`GELU_TAIL`], and its form, evaluated
/// on the host in `f32` as the device does (exact reciprocal and `exp2` standing in for the
/// approximate ones, whose errors are 2^-23 and 2^-22), is within 1e-5 of gelu in `f64`, relatively,
/// from −13 (where the tail passes 2^-126) to 13, and exactly `x` or `-0` beyond.
#[test]
fn the_half_type_gelu_form_is_accurate_and_spelled_as_tested() {
    use super::sources::{GELU_TAIL, GELU_T_SCALE};
    assert!(COMMON.contains(&format!("fmaf({GELU_T_SCALE:?}f, z, 1.0f)")));
    assert!(COMMON.contains(&format!("float r = {:?}f;", GELU_TAIL[6])));
    for c in &GELU_TAIL[..6] {
        assert!(COMMON.contains(&format!("r = fmaf(r, t, {c:?}f);")), "{c:?}");
    }
    let half_log2e = -0.5 * std::f32::consts::LOG2_E;
    assert!(COMMON.contains(&format!("z * (z * {half_log2e:?}f)")));
    let gelu = |x: f32| {
        let z = x.abs();
        let t = 1.0 / GELU_T_SCALE.mul_add(z, 1.0);
        let r = GELU_TAIL.iter().rev().skip(1).fold(GELU_TAIL[6], |r, &c| r.mul_add(t, c));
        let q = r * t * (z * (z * half_log2e)).exp2();
        x * if x >= 0.0 { 1.0 - q } else { q }
    };
    let exact = |x: f64| 0.5 * x * libm::erfc(-x / std::f64::consts::SQRT_2);
    let mut worst = 0.0f64;
    for i in -1_300_000..=1_300_000 {
        let x = i as f32 * 1e-5;
        let (g, w) = (gelu(x) as f64, exact(x as f64));
        if w != 0.0 {
            worst = worst.max(((g - w) / w).abs());
        }
    }
    assert!(worst < 1e-5, "relative error {worst:e}");
    assert_eq!(gelu(20.0), 20.0);
    assert_eq!(gelu(-20.0).to_bits(), (-0.0f32).to_bits());
    assert!(gelu(f32::NAN).is_nan() && gelu(f32::NEG_INFINITY).is_nan());
    assert_eq!(gelu(f32::INFINITY), f32::INFINITY);
}

/// The transpose kernel moves two-byte pairs, with a full SM's blocks, only for an output and at
/// most two inputs of two bytes; other modules keep one element per access and the compiler's
/// registers.
#[test]
fn tile_pairs_follow_the_element_sizes() {
    use DType::*;
    assert!(tile_pairs(EwOp::Binary(BinaryOp::Add, BF16), BF16, [BF16, BF16, Bool]));
    assert!(tile_pairs(EwOp::Binary(BinaryOp::Div, F16), F16, [F16, F16, Bool]));
    assert!(tile_pairs(EwOp::Copy, raw_dtype(BF16), [raw_dtype(BF16), Bool, Bool]));
    assert!(tile_pairs(EwOp::Cast, F16, [BF16, Bool, Bool]));
    assert!(!tile_pairs(EwOp::Cast, F32, [BF16, Bool, Bool]));
    assert!(!tile_pairs(EwOp::Cast, BF16, [F32, Bool, Bool]));
    assert!(!tile_pairs(EwOp::Where, BF16, [Bool, BF16, BF16]));
    assert!(!tile_pairs(EwOp::Binary(BinaryOp::Add, F32), F32, [F32, F32, Bool]));
    assert!(!tile_pairs(EwOp::Copy, U8, [U8, Bool, Bool]));
    let src =
        ModuleKey::Elementwise { op: EwOp::Copy, out: raw_dtype(F16), ins: [raw_dtype(F16), Bool, Bool] }.source();
    assert!(src.contains("#define TILE_PAIRS 1\n#define TILE_BOUNDS __launch_bounds__(256, 8)\n"));
}

/// Runs of elements are added in `f32` only for sums and means of a half type into a half type
/// (whose ulp dwarfs the runs' rounding); every other reduction converts each element to its
/// accumulator, and only the run modules define the `float` conversion the runs use.
#[test]
fn only_half_type_sums_into_half_types_add_runs_in_f32() {
    use DType::*;
    let cases = [
        (ReduceOp::Sum, BF16, BF16, true),
        (ReduceOp::Mean, F16, F16, true),
        (ReduceOp::Sum, F16, BF16, true),
        (ReduceOp::Sum, BF16, F32, false),
        (ReduceOp::Sum, F16, F64, false),
        (ReduceOp::Sum, F32, F32, false),
        (ReduceOp::Max, BF16, BF16, false),
        (ReduceOp::ArgMax, F16, I64, false),
    ];
    for (op, src, dst, runs) in cases {
        assert_eq!(half_runs(op, src, dst), runs, "{op:?} {src:?} -> {dst:?}");
        let text = ModuleKey::Reduce { op, src, dst, values: false }.source();
        assert!(text.contains(&format!("#define HALF_RUNS {}\n", runs as u8)), "{op:?} {src:?} -> {dst:?}");
        assert_eq!(text.contains("float tof(TS x)"), runs, "{op:?} {src:?} -> {dst:?}");
    }
}

/// A half-type `sin` / `cos` module starts with `cu/trig_half.cu` and calls its branch-free
/// functions (f16) or the ones with the large-argument branch (bf16); f32's keeps the library's.
#[test]
fn half_type_sin_and_cos_take_trig_half() {
    for (op, name) in [(UnaryOp::Sin, "sin"), (UnaryOp::Cos, "cos")] {
        let src = |d: DType| ModuleKey::Elementwise { op: EwOp::Unary(op), out: d, ins: [d; 3] }.source();
        let (h, b, f) = (src(DType::F16), src(DType::BF16), src(DType::F32));
        assert!(h.contains(TRIG_HALF) && h.contains(&format!("= {name}_small(x);")), "f16 {name}");
        assert!(b.contains(TRIG_HALF) && b.contains(&format!("= {name}_wide(x);")), "bf16 {name}");
        assert!(!f.contains("trig_reduce") && f.contains(&format!("= {name}f(x);")), "f32 {name}");
        // bf16 tests a vector once and takes the branch-free form; every f16 takes it. Both round
        // the float results a pair at a time; f32 has no such form.
        assert!(b.contains("#define FAST_GUARD 1") && b.contains(&format!("= {name}_small(x);")), "bf16 {name}");
        assert!(b.contains("return m < 105615.0f;") && h.contains("(void)a;\n    return true;"), "{name}");
        for (src, pair, round) in [(&b, "f2pair<true>", "f2b"), (&h, "f2pair<false>", "f2h")] {
            assert!(src.contains("#define FAST_GUARD 1"), "{name}");
            assert!(src.contains(&format!("u32 fast_pair(float lo, float hi) {{ return {pair}(lo, hi); }}")));
            // The float form returns the value before its rounding (`fast_pair` rounds): its body
            // ends `return r;` and holds no rounding.
            let f_body = &src[src.find("float apply_fast_f(").expect("apply_fast_f")..];
            let f_body = &f_body[..f_body.find("\n}").expect("its end")];
            assert!(f_body.ends_with("return r;") && f_body.contains(&format!("= {name}_small(x);")), "{f_body}");
            assert!(!f_body.contains(&format!("{round}(")), "{f_body}");
        }
        assert!(f.contains("#define FAST_GUARD 0"), "f32 {name}");
    }
}
