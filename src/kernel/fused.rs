//! Checks of the fused ops ([`KernelOp::Norm`](super::KernelOp::Norm),
//! [`KernelOp::Attention`](super::KernelOp::Attention)): shapes and dtypes every backend relies on.

use crate::dtype::DType;

/// Largest head dimension (`E` and `Ev`) of [`KernelOp::Attention`](super::KernelOp::Attention).
pub const ATTENTION_MAX_HEAD_DIM: usize = 256;

/// What the checks read of a view: its shape and dtype.
#[derive(Clone, Copy)]
pub(super) struct Arg<'a> {
    pub shape: &'a [usize],
    pub dtype: DType,
}

/// Why an op is malformed.
type Result<T> = std::result::Result<T, String>;

fn bad(reason: String) -> String {
    reason
}

/// A norm's operands: `dst` as `src`, one float dtype, `weight`/`bias` of the last `dims` sizes.
pub(super) fn check_norm(
    src: Arg<'_>,
    weight: Option<Arg<'_>>,
    bias: Option<Arg<'_>>,
    dst: Arg<'_>,
    dims: usize,
    rms: bool,
) -> Result<()> {
    let r = src.shape.len();
    if src.shape[..] != dst.shape[..] || src.dtype != dst.dtype || !src.dtype.is_float() {
        return Err(bad(format!("a norm of {:?} ({}) into {:?} ({})", src.shape, src.dtype, dst.shape, dst.dtype)));
    }
    if dims == 0 || dims > r {
        return Err(bad(format!("a norm over the last {dims} dims of a rank-{r} input")));
    }
    if rms && bias.is_some() {
        return Err(bad("an RMS norm has no bias".into()));
    }
    for p in [weight, bias].into_iter().flatten() {
        if p.shape[..] != src.shape[r - dims..] || p.dtype != src.dtype {
            return Err(bad(format!(
                "a norm parameter of {:?} ({}) for the normalized shape {:?} ({})",
                p.shape,
                p.dtype,
                &src.shape[r - dims..],
                src.dtype
            )));
        }
    }
    Ok(())
}

/// Attention's operands: `[B, Hq, L, E]`, `[B, Hkv, S, E]`, `[B, Hkv, S, Ev]`, a `[B, Hq, L, S]`
/// mask, a `[B, Hq, L, Ev]` output (any strides); one float dtype (a bool mask); head dims up to
/// [`ATTENTION_MAX_HEAD_DIM`].
pub(super) fn check_attention(q: Arg<'_>, k: Arg<'_>, v: Arg<'_>, mask: Option<Arg<'_>>, dst: Arg<'_>) -> Result<()> {
    let wrong = || bad(format!("attention of q {:?}, k {:?}, v {:?} into {:?}", q.shape, k.shape, v.shape, dst.shape));
    if [q, k, v, dst].iter().any(|t| t.shape.len() != 4) {
        return Err(wrong());
    }
    let (b, hq, l, e) = (q.shape[0], q.shape[1], q.shape[2], q.shape[3]);
    let (hkv, s, ev) = (k.shape[1], k.shape[2], v.shape[3]);
    let ok = k.shape[0] == b
        && k.shape[3] == e
        && v.shape[..3] == k.shape[..3]
        && dst.shape[..] == [b, hq, l, ev]
        && hkv > 0
        && hq % hkv == 0;
    if !ok {
        return Err(wrong());
    }
    if e > ATTENTION_MAX_HEAD_DIM || ev > ATTENTION_MAX_HEAD_DIM {
        return Err(bad(format!("attention head dims {e} and {ev} (at most {ATTENTION_MAX_HEAD_DIM})")));
    }
    if !q.dtype.is_float() || [k, v, dst].iter().any(|t| t.dtype != q.dtype) {
        return Err(bad(format!("attention of {}, {}, {} into {}", q.dtype, k.dtype, v.dtype, dst.dtype)));
    }
    if let Some(m) = mask {
        if m.shape[..] != [b, hq, l, s] || !(m.dtype == DType::Bool || m.dtype == q.dtype) {
            return Err(bad(format!(
                "an attention mask of {:?} ({}) for [{b}, {hq}, {l}, {s}] ({})",
                m.shape, m.dtype, q.dtype
            )));
        }
    }
    Ok(())
}
