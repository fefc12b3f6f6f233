//! PyTorch's `torch.nn.functional` ops a transformer block uses: [`layer_norm`], [`rms_norm`],
//! [`gelu`], [`linear`] and [`scaled_dot_product_attention`], with PyTorch's signatures and
//! semantics. Norms and attention are one fused kernel each on a CUDA device (flash attention:
//! the scores never reach memory; a split of long key sequences across blocks for decoding) and
//! `f64`-accumulated on the CPU and the simulator.
//!
//! ```
//! use cudasem::nn::functional as F;
//! use cudasem::{Device, Tensor};
//! # fn main() -> cudasem::Result<()> {
//! let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], [2, 2], Device::Cpu)?;
//! let y = F::layer_norm(&x, &[2], None, None, 1e-5)?;
//! let v = y.to_vec::<f32>()?;
//! assert!((v[0] + 1.0).abs() < 1e-3 && (v[1] - 1.0).abs() < 1e-3);
//! # Ok(()) }
//! ```

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::{SdpaOptions, Tensor};

/// `F.layer_norm(input, normalized_shape, weight, bias, eps)`: each slice of `input` over its
/// last `normalized_shape` sizes becomes `(x - mean) / sqrt(var + eps) * weight + bias` (the
/// biased variance); `weight` and `bias` (optional) have `normalized_shape` and `input`'s dtype.
/// Statistics accumulate in `float` for half types (as PyTorch's).
pub fn layer_norm(
    input: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    input.norm_op("layer_norm", normalized_shape, weight, bias, eps, false)
}

/// `F.rms_norm(input, normalized_shape, weight, eps)`: `x / sqrt(mean(x²) + eps) * weight` over
/// the last `normalized_shape` sizes; `eps = None` is the dtype's machine epsilon (PyTorch's
/// `torch.finfo(dtype).eps`).
pub fn rms_norm(
    input: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    eps: Option<f64>,
) -> Result<Tensor> {
    let eps = eps.unwrap_or(match input.dtype() {
        DType::F16 => 0.0009765625,
        DType::BF16 => 0.0078125,
        DType::F64 => f64::EPSILON,
        _ => f32::EPSILON as f64,
    });
    input.norm_op("rms_norm", normalized_shape, weight, None, eps, true)
}

/// `F.gelu(input, approximate)`: `approximate = "none"` uses the exact normal CDF,
/// `"tanh"` the form `x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³)))` (one elementwise kernel,
/// computed in `f32` for half types, as PyTorch's); any other string is an error.
pub fn gelu(input: &Tensor, approximate: &str) -> Result<Tensor> {
    match approximate {
        "none" => input.gelu(),
        "tanh" => input.gelu_tanh(),
        other => Err(Error::InvalidArgument {
            op: "gelu",
            reason: format!("approximate must be \"none\" or \"tanh\", got {other:?}"),
        }),
    }
}

/// `F.linear(input, weight, bias)`: `input @ weight^T + bias`, with `weight` of `[out, in]` (or
/// `[in]`) and `bias` of `[out]` (broadcast), one floating-point dtype. A 2-D weight with a
/// bias of `[out]` is one product of the input's rows folded into a matrix, the bias added to
/// the accumulator before the one rounding (cuBLASLt's bias epilogue on a CUDA device, as
/// PyTorch's `addmm`); other forms add the bias after the product.
pub fn linear(input: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    if let (2, Some(b)) = (weight.dim(), bias) {
        let (out_f, in_f) = (weight.shape()[0], weight.shape()[1]);
        let folds = input.dim() >= 1 && input.shape().last() == Some(&in_f) && in_f > 0;
        if folds && b.shape() == [out_f] && b.dtype() == input.dtype() && weight.dtype() == input.dtype() {
            let rows = input.numel() / in_f;
            let y = input.reshape([rows, in_f])?.matmul_with_bias(&weight.t()?, b)?;
            let mut shape = input.shape()[..input.dim() - 1].to_vec();
            shape.push(out_f);
            return y.reshape(shape);
        }
    }
    let w = match weight.dim() {
        1 => weight.clone(),
        2 => weight.t()?,
        d => {
            return Err(Error::InvalidShape {
                op: "linear",
                shape: weight.shape().iter().map(|&n| n as i64).collect(),
                reason: format!("weight must be 1-D or 2-D [out, in], got {d}-D"),
            })
        }
    };
    let y = input.matmul(&w)?;
    match bias {
        Some(b) => {
            if b.dtype() != y.dtype() {
                return Err(Error::DTypeMismatch { op: "linear", expected: y.dtype(), found: b.dtype() });
            }
            y.add(b)
        }
        None => Ok(y),
    }
}

/// `F.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal, scale,
/// enable_gqa)`, PyTorch's math-backend semantics: `softmax(q kᵀ · scale + mask) v` with
/// `query [B, H, L, E]` (or `[B, L, E]`), `key [B, Hkv, S, E]`, `value [B, Hkv, S, Ev]`, the
/// result `[B, H, L, Ev]` (or `[B, L, Ev]`).
///
/// * Layout: as PyTorch's flash / efficient / cuDNN kernels, a 4-D result is `[B, L, H, Ev]` in
///   memory, viewed as `[B, H, L, Ev]`: strides `(L·H·Ev, Ev, H·Ev, 1)`, not contiguous, so the
///   usual `out.transpose(1, 2)?.reshape([B, L, H·Ev])` is a view (no copy), while a `view` that
///   merges its `H` and `L` dims is an error, as in PyTorch (`reshape` copies). A 3-D result is
///   contiguous.
/// * `attn_mask`: broadcastable to `[B, H, L, S]`; bool keeps where true, a mask of the query's
///   dtype is added to the scores. Not with `is_causal`.
/// * `is_causal`: key `j` is masked for query `i` where `j > i` (the lower-left-aligned
///   triangle, as PyTorch's `tril(ones(L, S))`).
/// * `scale`: defaults to `1 / sqrt(E)`.
/// * `enable_gqa`: `H` may be a multiple of `Hkv` (query head `h` reads key/value head
///   `h / (H / Hkv)`); without it the heads must agree.
/// * `dropout_p`: with `dropout_p > 0` each attention weight is dropped with that probability
///   and the others scaled by `1 / (1 − dropout_p)`, from the device's default generator
///   (`manual_seed`), whenever it is given (PyTorch applies it regardless of training mode; pass
///   0.0 in evaluation). That path is PyTorch's math backend: the `[B, H, L, S]` weights are
///   materialized (the fused kernels take `dropout_p = 0`).
/// * Head dims up to 256; a query
///   whose every key is masked gets zeros (PyTorch's safe softmax).
///
/// ```
/// use cudasem::nn::functional as F;
/// use cudasem::{DType, Device, Tensor};
/// # fn main() -> cudasem::Result<()> {
/// let (b, h, l, e) = (2, 4, 8, 16);
/// let q = Tensor::randn([b, h, l, e], DType::F32, Device::Cpu)?;
/// let y = F::scaled_dot_product_attention(&q, &q, &q, None, 0.0, true, None, false)?;
/// assert_eq!(y.stride(), &[l * h * e, e, h * e, 1]);
/// let heads_merged = y.transpose(1, 2)?.reshape([b, l, h * e])?; // a view: no copy
/// assert_eq!(heads_merged.data_ptr(), y.data_ptr());
/// # Ok(()) }
/// ```
#[allow(clippy::too_many_arguments)] // PyTorch's signature, argument for argument
pub fn scaled_dot_product_attention(
    query: &Tensor,
    key: &Tensor,
    value: &Tensor,
    attn_mask: Option<&Tensor>,
    dropout_p: f64,
    is_causal: bool,
    scale: Option<f64>,
    enable_gqa: bool,
) -> Result<Tensor> {
    query.sdpa_op(key, value, attn_mask, SdpaOptions { dropout_p, is_causal, scale, enable_gqa })
}
