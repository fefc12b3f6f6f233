//! Fused CPU kernels in `f64`: layer / RMS norm rows and scaled dot-product attention (the
//! float64 reference the device kernels are checked against).

use super::elem::{gather, scatter, Operand};
use crate::dtype::DType;
use crate::kernel::BufferView;

/// How a norm normalizes: rows of `n` elements, `eps`, RMS norm or layer norm.
pub(super) struct NormRows {
    pub n: usize,
    pub eps: f64,
    pub rms: bool,
}

/// Layer norm (or RMS norm) of `src`'s rows of its last `n` elements (`src` gathered row-major).
pub(super) fn norm(
    src: Operand<'_>,
    weight: Option<Operand<'_>>,
    bias: Option<Operand<'_>>,
    rows: NormRows,
    out: &mut [u8],
    dst: &BufferView,
) {
    let NormRows { n, eps, rms } = rows;
    let mut x = gather::<f64>(src.bytes, src.view);
    let w = weight.map(|w| gather::<f64>(w.bytes, w.view));
    let b = bias.map(|b| gather::<f64>(b.bytes, b.view));
    if n > 0 {
        for row in x.chunks_mut(n) {
            let mean = if rms { 0.0 } else { row.iter().sum::<f64>() / n as f64 };
            let var = row.iter().map(|&v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
            let rstd = 1.0 / (var + eps).sqrt();
            for (i, v) in row.iter_mut().enumerate() {
                let y = (*v - mean) * rstd * w.as_ref().map_or(1.0, |w| w[i]);
                *v = y + b.as_ref().map_or(0.0, |b| b[i]);
            }
        }
    }
    scatter(&x, out, dst);
}

/// The attention operands as dense `f64` arrays and their sizes.
pub(super) struct Attn<'a> {
    pub q: Operand<'a>,
    pub k: Operand<'a>,
    pub v: Operand<'a>,
    pub mask: Option<Operand<'a>>,
    pub scale: f64,
    pub causal: bool,
}

/// Scaled dot-product attention (see [`KernelOp::Attention`](crate::kernel::KernelOp::Attention)),
/// written through `dst`'s strides (the tensor layer's: `[B, L, H, Ev]` memory).
pub(super) fn attention(a: Attn<'_>, out: &mut [u8], dst: &BufferView) {
    let (qs, ks, vs) = (&a.q.view.shape, &a.k.view.shape, &a.v.view.shape);
    let (b, hq, l, e) = (qs[0], qs[1], qs[2], qs[3]);
    let (hkv, s, ev) = (ks[1], ks[2], vs[3]);
    let group = hq / hkv.max(1);
    let q = gather::<f64>(a.q.bytes, a.q.view);
    let k = gather::<f64>(a.k.bytes, a.k.view);
    let v = gather::<f64>(a.v.bytes, a.v.view);
    let mask = a.mask.map(|m| (gather::<f64>(m.bytes, m.view), m.view.dtype == DType::Bool));
    let mut o = vec![0.0f64; b * hq * l * ev];
    let mut scores = vec![0.0f64; s];
    for bi in 0..b {
        for h in 0..hq {
            let kv = (bi * hkv + h / group) * s;
            for i in 0..l {
                let row = (bi * hq + h) * l + i;
                let qr = &q[row * e..(row + 1) * e];
                for (j, sc) in scores.iter_mut().enumerate() {
                    let kr = &k[(kv + j) * e..(kv + j + 1) * e];
                    let mut x = a.scale * qr.iter().zip(kr).map(|(x, y)| x * y).sum::<f64>();
                    match &mask {
                        Some((m, true)) if m[row * s + j] == 0.0 => x = f64::NEG_INFINITY,
                        Some((m, false)) => x += m[row * s + j],
                        _ => {}
                    }
                    if a.causal && j > i {
                        x = f64::NEG_INFINITY;
                    }
                    *sc = x;
                }
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                if max == f64::NEG_INFINITY {
                    continue; // every key masked: a row of zeros (PyTorch's safe softmax)
                }
                let total: f64 = scores.iter().map(|&x| (x - max).exp()).sum();
                let orow = &mut o[row * ev..(row + 1) * ev];
                for (j, &x) in scores.iter().enumerate() {
                    let p = (x - max).exp() / total;
                    let vr = &v[(kv + j) * ev..(kv + j + 1) * ev];
                    for (od, vd) in orow.iter_mut().zip(vr) {
                        *od += p * vd;
                    }
                }
            }
        }
    }
    scatter(&o, out, dst);
}
