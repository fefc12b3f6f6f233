//! The CUDA C of the tensor kernels, kept as `.cu` files under `cu/` and read at compile time:
//! the fixed parts every module of a family shares, and the generated parts as templates whose
//! `${name}` placeholders `codegen.rs` fills ([`fill`]). Each file's leading `//` lines are its
//! header for readers and are stripped here, so the compiled sources hold only the code.
//!
//! * `common.cu`: helpers every module starts with ([`COMMON`]);
//! * `elementwise_head.cu`, `elementwise.cu`: an elementwise module ([`ELEMENTWISE_HEAD`], [`ELEMENTWISE`]),
//!   after `trig_half.cu` ([`TRIG_HALF`]) in those of a half-type `sin` or `cos`;
//! * `reduce_head.cu`, `reduce_acc.cu` / `reduce_arg.cu`, `reduce.cu`: a reduction module;
//! * `softmax_head.cu`, `softmax.cu`: a softmax module; `gemv_head.cu`, `gemv.cu`: a vector-matrix module;
//! * `fused_head.cu`, `norm.cu`, `attention_params.cu`, `attention.cu`, `attention_mma.cu`,
//!   `attention_wg.cu`, `attention_fa.cu`, `attention_tma.cu`: a norm or attention module (FMA,
//!   tensor-core or Hopper tensor-core);
//! * `jit_multi.cu`: a jiterator module of many inputs or several outputs ([`JIT_MULTI`]);
//! * `spin.cu`: the delay kernel ([`SPIN`], `spin.rs`).

/// `text` without its leading `//` lines (the file's header).
const fn body(text: &str) -> &str {
    let b = text.as_bytes();
    let mut i = 0;
    while i + 1 < b.len() && b[i] == b'/' && b[i + 1] == b'/' {
        while i < b.len() && b[i] != b'\n' {
            i += 1;
        }
        i += 1;
    }
    let (_, rest) = b.split_at(if i < b.len() { i } else { b.len() });
    match std::str::from_utf8(rest) {
        Ok(s) => s,
        Err(_) => panic!("a .cu file is not UTF-8"),
    }
}

/// Helpers every module shares.
pub(in crate::driver::cuda) const COMMON: &str = body(include_str!("cu/common.cu"));
/// sin and cos for half-type results (`sin_small`, `cos_small`, `sin_wide`, `cos_wide`), before
/// [`ELEMENTWISE_HEAD`] in the modules of those functions.
pub(in crate::driver::cuda) const TRIG_HALF: &str = body(include_str!("cu/trig_half.cu"));
/// An elementwise module's defines, types and `apply` (placeholders: `n`, `vec`, `unroll`, `tile`,
/// `pairs`, `bounds`, `t0`..`t2`, `to`, `body`).
pub(in crate::driver::cuda) const ELEMENTWISE_HEAD: &str = body(include_str!("cu/elementwise_head.cu"));
/// The elementwise kernels, after [`ELEMENTWISE_HEAD`].
pub(in crate::driver::cuda) const ELEMENTWISE: &str = body(include_str!("cu/elementwise.cu"));
/// A reduction module's defines and types (placeholders: `vec`, `split`, `runs`, `values`, `arg`,
/// `colx`, `ts`, `td`).
pub(in crate::driver::cuda) const REDUCE_HEAD: &str = body(include_str!("cu/reduce_head.cu"));
/// The accumulator of a sum, mean, max or min (placeholders: `vt`, `ident`, `x`, `comb`, `fin`, `store`).
pub(in crate::driver::cuda) const REDUCE_ACC: &str = body(include_str!("cu/reduce_acc.cu"));
/// The accumulator of an arg-reduction (placeholders: `vt`, `ident`, `x`, `an`, `bn`, `better`,
/// `store`, `value`, `replace`, `x0`, `xk`).
pub(in crate::driver::cuda) const REDUCE_ARG: &str = body(include_str!("cu/reduce_arg.cu"));
/// The reduction kernels, after the head and the accumulator.
pub(in crate::driver::cuda) const REDUCE: &str = body(include_str!("cu/reduce.cu"));
/// A softmax module's defines, types and conversions (placeholders: `log`, `v`, `ts`, `td`, `tc`,
/// `to_c`, `from_c`, `ex`).
pub(in crate::driver::cuda) const SOFTMAX_HEAD: &str = body(include_str!("cu/softmax_head.cu"));
/// The softmax kernels, after [`SOFTMAX_HEAD`] (PyTorch's semantics: see `cu/softmax.cu`).
pub(in crate::driver::cuda) const SOFTMAX: &str = body(include_str!("cu/softmax.cu"));
/// A vector-matrix module's width, type and conversions (placeholders: `v`, `ts`, `to_f`, `from_f`).
pub(in crate::driver::cuda) const GEMV_HEAD: &str = body(include_str!("cu/gemv_head.cu"));
/// The kernels `gv_rows` and `gv_dots`, after [`GEMV_HEAD`].
pub(in crate::driver::cuda) const GEMV: &str = body(include_str!("cu/gemv.cu"));
/// A fused module's types, conversions and exponential (placeholders: `ts`, `tc`, `to_c`, `from_c`, `ex`).
pub(in crate::driver::cuda) const FUSED_HEAD: &str = body(include_str!("cu/fused_head.cu"));
/// The norm kernel, after [`FUSED_HEAD`].
pub(in crate::driver::cuda) const NORM: &str = body(include_str!("cu/norm.cu"));
/// The attention kernels' parameters (`AttnP`), after [`FUSED_HEAD`].
pub(in crate::driver::cuda) const ATTENTION_PARAMS: &str = body(include_str!("cu/attention_params.cu"));
/// The attention kernels (FMA flash kernel, merge of key splits), after [`ATTENTION_PARAMS`].
pub(in crate::driver::cuda) const ATTENTION: &str = body(include_str!("cu/attention.cu"));
/// The tensor-core attention kernel, after [`ATTENTION_PARAMS`] and a define of `AM_MMA_T`.
pub(in crate::driver::cuda) const ATTENTION_MMA: &str = body(include_str!("cu/attention_mma.cu"));
/// The Hopper tensor-core attention kernel (wgmma, sm_90a), after [`ATTENTION_PARAMS`], a
/// define of `AW_CVT2` and the generated wgmma wrappers.
pub(in crate::driver::cuda) const ATTENTION_WG: &str = body(include_str!("cu/attention_wg.cu"));
/// The Hopper tensor-core attention kernel on FlashAttention 3's schedule (persistent blocks,
/// three stages, intra-warpgroup overlap), after [`ATTENTION_WG`] (whose helpers it calls).
pub(in crate::driver::cuda) const ATTENTION_FA: &str = body(include_str!("cu/attention_fa.cu"));
/// The Hopper tensor-core attention kernel whose tiles the Tensor Memory Accelerator copies into
/// mbarrier-phased stages, after [`ATTENTION_WG`] (whose tile step it runs).
pub(in crate::driver::cuda) const ATTENTION_TMA: &str = body(include_str!("cu/attention_tma.cu"));
/// The kernel `jm` of a jiterator module of many inputs or several outputs, after its generated
/// part (`jit.rs`: `NIN`, `CsJitP` and `cs_jit_apply`).
pub(in crate::driver::cuda) const JIT_MULTI: &str = body(include_str!("cu/jit_multi.cu"));
/// The delay kernel `cudasem_spin(unsigned long long ns)`.
pub(in crate::driver::cuda) const SPIN: &str = body(include_str!("cu/spin.cu"));

/// Appends `template` to `out` with each `${name}` replaced by its value in `values`. A name
/// without a value is left as written (NVRTC then rejects the source; `codegen_tests` checks
/// that no generated source keeps one).
pub(in crate::driver::cuda) fn fill(out: &mut String, template: &str, values: &[(&str, &str)]) {
    let mut rest = template;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let Some(end) = after.find('}') else { break };
        let name = &after[..end];
        match values.iter().find(|(n, _)| *n == name) {
            Some((_, v)) => out.push_str(v),
            None => out.push_str(&rest[at..at + 3 + end]),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
}

/// `gelu_half`'s tail in [`COMMON`]: `t = 1 / (1 + GELU_T_SCALE·z)` and the coefficients of `P(t)`,
/// constant term first (`codegen_tests` checks the C spells these and that the form is accurate).
#[cfg(test)]
pub(in crate::driver::cuda) const GELU_T_SCALE: f32 = 0.279;
/// See [`GELU_T_SCALE`].
#[cfg(test)]
pub(in crate::driver::cuda) const GELU_TAIL: [f32; 7] =
    [0.11130447, 0.1113622, 0.10137282, 0.095678955, 0.021759437, 0.10956996, -0.051049426];

/// A random module's defines, type and conversions (placeholders: `dist`, `e`, `bits`, `ts`,
/// `from_d`, `from_i`, `to_d`).
pub(in crate::driver::cuda) const RANDOM_HEAD: &str = body(include_str!("cu/random_head.cu"));
/// The random kernel `rnd`, after [`RANDOM_HEAD`] (the Philox stream of `kernel/random.rs`).
pub(in crate::driver::cuda) const RANDOM: &str = body(include_str!("cu/random.cu"));
