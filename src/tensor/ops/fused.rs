//! The fused ops behind `nn::functional`: layer / RMS norm and scaled dot-product attention,
//! checked here (PyTorch's rules and messages) and lowered to one [`KernelOp`] each.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{KernelOp, ATTENTION_MAX_HEAD_DIM};
use crate::tensor::exec::Exec;
use crate::tensor::Tensor;

fn shape_i64(s: &[usize]) -> Vec<i64> {
    s.iter().map(|&n| n as i64).collect()
}

/// Scaled dot-product attention's options (PyTorch's keyword arguments).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SdpaOptions {
    pub dropout_p: f64,
    pub is_causal: bool,
    pub scale: Option<f64>,
    pub enable_gqa: bool,
}

impl Tensor {
    /// Layer norm (`rms`: RMS norm) over the trailing `normalized_shape`.
    pub(crate) fn norm_op(
        &self,
        op: &'static str,
        normalized_shape: &[usize],
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
        rms: bool,
    ) -> Result<Tensor> {
        if !self.dtype().is_float() {
            return Err(Error::UnsupportedDType { op, dtype: self.dtype() });
        }
        let (r, k) = (self.dim(), normalized_shape.len());
        if k == 0 || k > r || self.shape()[r - k..] != *normalized_shape {
            return Err(Error::InvalidShape {
                op,
                shape: shape_i64(self.shape()),
                reason: format!(
                    "normalized_shape {normalized_shape:?} must be non-empty and equal to the input's last {k} sizes"
                ),
            });
        }
        for p in [weight, bias].into_iter().flatten() {
            if p.shape() != normalized_shape {
                return Err(Error::ShapeMismatch { op, lhs: p.shape().to_vec(), rhs: normalized_shape.to_vec() });
            }
            if p.dtype() != self.dtype() {
                return Err(Error::DTypeMismatch { op, expected: self.dtype(), found: p.dtype() });
            }
        }
        if !eps.is_finite() || eps < 0.0 {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("eps must be finite and non-negative, got {eps}"),
            });
        }
        let mut all: Vec<&Tensor> = vec![self];
        all.extend(weight);
        all.extend(bias);
        let exec = Exec::for_operands(op, &all)?;
        let x = self.contiguous()?;
        let w = weight.map(Tensor::contiguous).transpose()?;
        let b = bias.map(Tensor::contiguous).transpose()?;
        let out = exec.empty(self.shape(), self.dtype())?;
        let kop = KernelOp::Norm {
            src: x.buffer_view(),
            weight: w.as_ref().map(Tensor::buffer_view),
            bias: b.as_ref().map(Tensor::buffer_view),
            dst: out.buffer_view(),
            dims: k,
            eps,
            rms,
        };
        let mut keep: Vec<&Tensor> = vec![&x, &out];
        keep.extend(w.as_ref());
        keep.extend(b.as_ref());
        exec.run(&kop, &keep)?;
        Ok(out)
    }

    /// Scaled dot-product attention of `self` (the query) over `key` and `value`: a 4-D result
    /// `[B, Hq, L, Ev]` over `[B, L, Hq, Ev]` memory (PyTorch's fused kernels' layout), a 3-D one
    /// contiguous.
    pub(crate) fn sdpa_op(
        &self,
        key: &Tensor,
        value: &Tensor,
        attn_mask: Option<&Tensor>,
        o: SdpaOptions,
    ) -> Result<Tensor> {
        const OP: &str = "scaled_dot_product_attention";
        check_sdpa(self, key, value, attn_mask, o)?;
        if self.dim() == 3 {
            // [B, L, E]: one head.
            let lse = [self.shape()[0], self.shape()[1], key.shape()[1]];
            let m = attn_mask.map(|m| m.broadcast_to_shape(OP, &lse)?.unsqueeze(1)).transpose()?;
            let out = self.unsqueeze(1)?.sdpa_op(&key.unsqueeze(1)?, &value.unsqueeze(1)?, m.as_ref(), o)?;
            return out.squeeze_dim(1);
        }
        if o.dropout_p > 0.0 {
            return self.sdpa_dropout(key, value, attn_mask, o);
        }
        let (b, hq, l, e) = (self.shape()[0], self.shape()[1], self.shape()[2], self.shape()[3]);
        let (s, ev) = (key.shape()[2], value.shape()[3]);
        let mut all: Vec<&Tensor> = vec![self, key, value];
        all.extend(attn_mask);
        let exec = Exec::for_operands(OP, &all)?;
        let mask = attn_mask.map(|m| m.broadcast_view(OP, &[b, hq, l, s])).transpose()?;
        // PyTorch's flash / efficient / cuDNN layout: [B, L, Hq, Ev] memory viewed as [B, Hq, L, Ev],
        // so `out.transpose(1, 2).reshape([B, L, Hq * Ev])` is a view.
        let out = exec.empty(&[b, l, hq, ev], self.dtype())?.transpose(1, 2)?;
        let kop = KernelOp::Attention {
            q: self.buffer_view(),
            k: key.buffer_view(),
            v: value.buffer_view(),
            mask,
            dst: out.buffer_view(),
            scale: o.scale.unwrap_or(1.0 / (e as f64).sqrt()),
            causal: o.is_causal,
        };
        let mut keep: Vec<&Tensor> = vec![self, key, value, &out];
        keep.extend(attn_mask);
        exec.run(&kop, &keep)?;
        Ok(out)
    }

    /// 4-D attention with dropout on the attention weights, PyTorch's math backend: the scores
    /// `Q Kᵀ · scale` (grouped key/value heads expanded), masked (`-inf` where a bool mask or the
    /// causal rule drops a key, an additive mask added), the softmax over the keys, dropout with
    /// probability `dropout_p` from the device's default generator (applied whenever
    /// `dropout_p > 0`, as `F.scaled_dot_product_attention` does), then the product with V. Half
    /// types compute in `f32` and round once at the end; a query with every key masked gets zeros.
    /// The scores are materialized, `[B, Hq, L, S]`.
    fn sdpa_dropout(&self, key: &Tensor, value: &Tensor, mask: Option<&Tensor>, o: SdpaOptions) -> Result<Tensor> {
        let (b, hq, l, e) = (self.shape()[0], self.shape()[1], self.shape()[2], self.shape()[3]);
        let (hkv, s, ev) = (key.shape()[1], key.shape()[2], value.shape()[3]);
        let dtype = self.dtype();
        let acc = if matches!(dtype, DType::F16 | DType::BF16) { DType::F32 } else { dtype };
        let heads = |t: &Tensor, d: usize| -> Result<Tensor> {
            let g = hq / hkv;
            t.to_dtype(acc)?.unsqueeze(2)?.expand([b, hkv, g, s, d])?.reshape([b, hq, s, d])
        };
        let (k, v) = (heads(key, e)?, heads(value, ev)?);
        let scale = o.scale.unwrap_or(1.0 / (e as f64).sqrt());
        let mut scores = self.to_dtype(acc)?.matmul(&k.transpose(2, 3)?)?.mul(scale)?;
        let device = self.device();
        if o.is_causal {
            let rows = Tensor::arange(0i64, l as i64, 1i64, DType::I64, device)?.reshape([l, 1])?;
            let cols = Tensor::arange(0i64, s as i64, 1i64, DType::I64, device)?.reshape([1, s])?;
            scores = Tensor::where_cond(&rows.ge(&cols)?, &scores, f64::NEG_INFINITY)?;
        }
        if let Some(m) = mask {
            scores = if m.dtype() == DType::Bool {
                Tensor::where_cond(m, &scores, f64::NEG_INFINITY)?
            } else {
                scores.add(&m.to_dtype(acc)?)?
            };
        }
        // A query whose every key is masked attends to nothing: zeros (PyTorch's safe softmax).
        let none = scores.amax(&[-1], true)?.eq(f64::NEG_INFINITY)?;
        let weights = Tensor::where_cond(&none, 0.0, &scores.softmax(-1)?)?.dropout(o.dropout_p, true)?;
        weights.matmul(&v)?.to_dtype(dtype)
    }

    /// The tensor broadcast to `shape` (a view).
    fn broadcast_to_shape(&self, op: &'static str, shape: &[usize]) -> Result<Tensor> {
        let l = self.layout.broadcast_to(op, shape)?;
        Ok(self.with_layout(l))
    }
}

/// PyTorch's checks of scaled dot-product attention's arguments (and this crate's head-dim limit).
fn check_sdpa(q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>, o: SdpaOptions) -> Result<()> {
    const OP: &str = "scaled_dot_product_attention";
    let invalid = |reason: String| Error::InvalidArgument { op: OP, reason };
    if !q.dtype().is_float() {
        return Err(Error::UnsupportedDType { op: OP, dtype: q.dtype() });
    }
    for t in [k, v] {
        if t.dtype() != q.dtype() {
            return Err(Error::DTypeMismatch { op: OP, expected: q.dtype(), found: t.dtype() });
        }
    }
    let r = q.dim();
    if !(r == 3 || r == 4) || k.dim() != r || v.dim() != r {
        return Err(Error::InvalidShape {
            op: OP,
            shape: shape_i64(q.shape()),
            reason: format!(
                "query, key and value must all be 3-D [B, L, E] or 4-D [B, H, L, E]; got {}-D, {}-D and {}-D",
                r,
                k.dim(),
                v.dim()
            ),
        });
    }
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let mismatch = || Error::ShapeMismatch { op: OP, lhs: qs.to_vec(), rhs: ks.to_vec() };
    if qs[0] != ks[0] || ks[0] != vs[0] || qs[r - 1] != ks[r - 1] || ks[r - 2] != vs[r - 2] {
        return Err(mismatch());
    }
    if r == 4 {
        let (hq, hkv) = (qs[1], ks[1]);
        if ks[1] != vs[1] {
            return Err(Error::ShapeMismatch { op: OP, lhs: ks.to_vec(), rhs: vs.to_vec() });
        }
        if hq != hkv && !o.enable_gqa {
            return Err(invalid(format!(
                "query has {hq} heads and key/value {hkv}; pass enable_gqa = true for grouped key/value heads"
            )));
        }
        if hkv == 0 || hq % hkv != 0 {
            return Err(invalid(format!("query heads ({hq}) must be a multiple of key/value heads ({hkv})")));
        }
    }
    let (e, ev) = (qs[r - 1], vs[r - 1]);
    if e > ATTENTION_MAX_HEAD_DIM || ev > ATTENTION_MAX_HEAD_DIM || e == 0 {
        return Err(Error::InvalidShape {
            op: OP,
            shape: shape_i64(qs),
            reason: format!("head dims must be 1 to {ATTENTION_MAX_HEAD_DIM}; got E = {e}, Ev = {ev}"),
        });
    }
    if !(0.0..=1.0).contains(&o.dropout_p) {
        return Err(invalid(format!("dropout_p must be in [0, 1], got {}", o.dropout_p)));
    }
    if o.scale.is_some_and(|s| !s.is_finite()) {
        return Err(invalid("scale must be finite".into()));
    }
    if let Some(m) = mask {
        if o.is_causal {
            return Err(invalid("an explicit attn_mask must not be set when is_causal is true".into()));
        }
        if m.dtype() != DType::Bool && m.dtype() != q.dtype() {
            return Err(Error::DTypeMismatch { op: OP, expected: q.dtype(), found: m.dtype() });
        }
        let want: Vec<usize> = [&qs[..r - 1], &ks[r - 2..r - 1]].concat();
        crate::tensor::layout::broadcast_shapes(OP, m.shape(), &want).and_then(|b| {
            if b == want {
                Ok(())
            } else {
                Err(Error::ShapeMismatch { op: OP, lhs: m.shape().to_vec(), rhs: want.clone() })
            }
        })?;
    }
    Ok(())
}
