//! `nn::functional::scaled_dot_product_attention` against float64 references written from
//! PyTorch's documented (math-backend) semantics, on random data, on the CPU and the current
//! driver's device (the CUDA kernels on a GPU: every flash-attention kernel, its split-key decode
//! path), in every float dtype, with PyTorch's output layout; bad arguments give typed errors and
//! leave the runtime usable. The norms, `gelu` and `linear`: `nn_norms.rs`.

mod nn_util;
mod tensor_util;

use cudasem::nn::functional as F;
use cudasem::{DType, Device, Error, Result, Tensor};
use nn_util::{assert_near, rand_tensor, FLOATS};
use tensor_util::{devices, expect_ok, round_to, tensor, values, Rng};

/// One attention case: shapes, mask and flags.
#[derive(Debug, Clone, Copy)]
struct Case {
    b: usize,
    hq: usize,
    hkv: usize,
    l: usize,
    s: usize,
    e: usize,
    ev: usize,
    mask: Mask,
    causal: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mask {
    None,
    /// Bool `[B, 1, L, S]` (broadcast over heads), some rows with every key masked.
    Bool,
    /// Additive `[1, Hq, L, S]` in the query's dtype, some −inf.
    Add,
    /// Bool `[S]` keeping only the first 10 keys (broadcast over everything).
    Prefix,
}

/// PyTorch's math backend in float64: `softmax(q kᵀ · scale + mask) v`, causal = `tril(ones(L,
/// S))`, a row whose every key is masked gives zeros.
#[allow(clippy::too_many_arguments)]
fn sdpa_reference(c: &Case, q: &[f64], k: &[f64], v: &[f64], mask: &[f64], bool_mask: bool, scale: f64) -> Vec<f64> {
    let g = c.hq / c.hkv;
    let mut out = vec![0.0; c.b * c.hq * c.l * c.ev];
    for b in 0..c.b {
        for h in 0..c.hq {
            let kvh = b * c.hkv + h / g;
            for i in 0..c.l {
                let row = (b * c.hq + h) * c.l + i;
                let mut sc: Vec<f64> = (0..c.s)
                    .map(|j| {
                        let dot: f64 = (0..c.e).map(|d| q[row * c.e + d] * k[(kvh * c.s + j) * c.e + d]).sum();
                        let mut x = dot * scale;
                        if c.mask != Mask::None {
                            let m = mask[row * c.s + j];
                            if bool_mask {
                                if m == 0.0 {
                                    x = f64::NEG_INFINITY;
                                }
                            } else {
                                x += m;
                            }
                        }
                        if c.causal && j > i {
                            x = f64::NEG_INFINITY;
                        }
                        x
                    })
                    .collect();
                let mx = sc.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                if mx == f64::NEG_INFINITY {
                    continue;
                }
                sc.iter_mut().for_each(|x| *x = (*x - mx).exp());
                let total: f64 = sc.iter().sum();
                for d in 0..c.ev {
                    out[row * c.ev + d] = (0..c.s).map(|j| sc[j] * v[(kvh * c.s + j) * c.ev + d]).sum::<f64>() / total;
                }
            }
        }
    }
    out
}

/// The mask of a case, and its values broadcast to `[B, Hq, L, S]`.
fn make_mask(rng: &mut Rng, c: &Case, dtype: DType, device: Device) -> Result<Option<(Tensor, Vec<f64>)>> {
    let full = c.b * c.hq * c.l * c.s;
    Ok(match c.mask {
        Mask::None => None,
        Mask::Bool => {
            // [B, 1, L, S]: random keep, row 1 of each batch masked entirely.
            let mut m: Vec<f64> =
                (0..c.b * c.l * c.s).map(|_| (!rng.next_u64().is_multiple_of(3)) as u8 as f64).collect();
            for b in 0..c.b {
                if c.l > 1 {
                    m[(b * c.l + 1) * c.s..(b * c.l + 2) * c.s].fill(0.0);
                }
            }
            let t = tensor(&m, &[c.b, 1, c.l, c.s], DType::Bool, device)?;
            let wide = (0..full).map(|x| {
                let (b, rest) = (x / (c.hq * c.l * c.s), x % (c.l * c.s));
                m[b * c.l * c.s + rest]
            });
            Some((t, wide.collect()))
        }
        Mask::Add => {
            let mut m: Vec<f64> = (0..c.hq * c.l * c.s).map(|_| round_to(dtype, rng.uniform(-3.0, 3.0))).collect();
            for x in m.iter_mut().step_by(5) {
                *x = f64::NEG_INFINITY;
            }
            let t = tensor(&m, &[1, c.hq, c.l, c.s], dtype, device)?;
            let per = c.hq * c.l * c.s;
            Some((t, (0..full).map(|x| m[x % per]).collect()))
        }
        Mask::Prefix => {
            let m: Vec<f64> = (0..c.s).map(|j| (j < 10) as u8 as f64).collect();
            let t = tensor(&m, &[c.s], DType::Bool, device)?;
            Some((t, (0..full).map(|x| m[x % c.s]).collect()))
        }
    })
}

/// PyTorch's layout of a 4-D attention output `y` of `[B, H, L, Ev]` (its flash / efficient /
/// cuDNN kernels'): `[B, L, H, Ev]` memory, strides `(L·H·Ev, Ev, H·Ev, 1)`, so the transformer's
/// `y.transpose(1, 2).reshape([B, L, H·Ev])` is a view (the same storage and first element, no
/// copy) holding `want` (the `[B, H, L, Ev]` reference) at `[b, i, h·Ev + d]`.
#[track_caller]
fn assert_pytorch_layout(y: &Tensor, want: &[f64], what: &str) -> Result<()> {
    let [b, h, l, ev] = y.shape()[..] else { panic!("{what}: a 4-D output, got {:?}", y.shape()) };
    assert_eq!(y.stride(), &[l * h * ev, ev, h * ev, 1][..], "{what}: PyTorch's strides");
    let flat = y.transpose(1, 2)?.reshape([b, l, h * ev])?;
    assert!(flat.shares_storage(y) && flat.data_ptr() == y.data_ptr(), "{what}: the reshape is a view");
    assert!(flat.is_contiguous(), "{what}: [B, L, H·Ev] is the memory's own order");
    if h > 1 && l > 1 {
        // As PyTorch's: H and L do not merge without a copy (`view` refuses, `reshape` copies).
        assert!(matches!(y.view([b, h * l * ev]), Err(Error::InvalidShape { .. })), "{what}: view of [B, H·L·Ev]");
    }
    let mut permuted = vec![0.0; want.len()];
    for (x, &w) in want.iter().enumerate() {
        let (bi, hi, i, d) = (x / (h * l * ev), x / (l * ev) % h, x / ev % l, x % ev);
        permuted[((bi * l + i) * h + hi) * ev + d] = w;
    }
    assert_near(&values(&flat)?, &permuted, y.dtype(), &format!("{what}: [B, L, H·Ev] view"));
    Ok(())
}

fn run_case(rng: &mut Rng, c: Case, dtypes: &[DType]) -> Result<()> {
    run_case_as(rng, c, dtypes, "")
}

/// [`run_case`], `label` (the attention kernel chosen) in the failure messages.
fn run_case_as(rng: &mut Rng, c: Case, dtypes: &[DType], label: &str) -> Result<()> {
    for device in devices() {
        for &dtype in dtypes {
            let (qv, q) = rand_tensor(rng, &[c.b, c.hq, c.l, c.e], dtype, device)?;
            let (kv, k) = rand_tensor(rng, &[c.b, c.hkv, c.s, c.e], dtype, device)?;
            let (vv, v) = rand_tensor(rng, &[c.b, c.hkv, c.s, c.ev], dtype, device)?;
            let mask = make_mask(rng, &c, dtype, device)?;
            let what = format!("{c:?} {dtype} on {device} {label}");
            let y = expect_ok(
                F::scaled_dot_product_attention(
                    &q,
                    &k,
                    &v,
                    mask.as_ref().map(|m| &m.0),
                    0.0,
                    c.causal,
                    None,
                    c.hq != c.hkv,
                ),
                &what,
            );
            assert_eq!((y.shape(), y.dtype(), y.device()), (&[c.b, c.hq, c.l, c.ev][..], dtype, device), "{what}");
            let (mv, bool_mask) = match &mask {
                Some((t, v)) => (v.clone(), t.dtype() == DType::Bool),
                None => (vec![], false),
            };
            let want = sdpa_reference(&c, &qv, &kv, &vv, &mv, bool_mask, 1.0 / (c.e as f64).sqrt());
            let want: Vec<f64> = want.iter().map(|&x| round_to(dtype, x)).collect();
            assert_near(&values(&y)?, &want, dtype, &what);
            assert_pytorch_layout(&y, &want, &what)?;
        }
    }
    Ok(())
}

const fn case(b: usize, hq: usize, hkv: usize, l: usize, s: usize, e: usize, ev: usize) -> Case {
    Case { b, hq, hkv, l, s, e, ev, mask: Mask::None, causal: false }
}

/// Plain and causal attention (L = S, L < S, L > S), lengths not multiples of a tile, head dims
/// 64, 80, 128 and 256 (Ev differing from E), every float dtype.
#[test]
fn sdpa_plain_and_causal_match_float64() -> Result<()> {
    let mut rng = Rng::new(4004);
    let all = &FLOATS[..];
    run_case(&mut rng, case(2, 2, 2, 5, 7, 64, 64), all)?;
    run_case(&mut rng, Case { causal: true, ..case(1, 2, 2, 37, 37, 80, 80) }, all)?;
    run_case(&mut rng, Case { causal: true, ..case(1, 2, 2, 20, 45, 128, 128) }, all)?;
    run_case(&mut rng, Case { causal: true, ..case(1, 1, 1, 45, 20, 64, 96) }, all)?;
    run_case(&mut rng, case(1, 2, 2, 3, 130, 256, 256), all)?;
    run_case(&mut rng, case(1, 1, 1, 70, 33, 24, 200), all)?;
    // An odd Ev: the output's head and row strides are odd (the FMA kernel writes it anywhere).
    run_case(&mut rng, Case { causal: true, ..case(2, 3, 3, 9, 12, 16, 33) }, all)
}

/// Bool masks (broadcast over heads, rows with every key masked give zeros), additive masks with
/// −inf (broadcast over the batch), and grouped key/value heads.
#[test]
fn sdpa_masks_and_gqa_match_float64() -> Result<()> {
    let mut rng = Rng::new(4005);
    let all = &FLOATS[..];
    run_case(&mut rng, Case { mask: Mask::Bool, ..case(2, 4, 2, 9, 33, 64, 32) }, all)?;
    run_case(&mut rng, Case { mask: Mask::Add, ..case(2, 3, 3, 17, 40, 128, 128) }, all)?;
    run_case(&mut rng, Case { mask: Mask::Add, ..case(1, 8, 2, 6, 65, 64, 64) }, all)
}

/// Decoding shapes (one or a few queries, long keys): on a GPU the keys are split across blocks
/// and the partials merged, including splits whose every key is masked (the prefix mask keeps
/// the first 10 keys only) and causal splits past the queries.
#[test]
fn sdpa_decode_shapes_match_float64() -> Result<()> {
    let mut rng = Rng::new(4006);
    let all = &FLOATS[..];
    run_case(&mut rng, case(2, 8, 2, 1, 1000, 128, 128), all)?;
    run_case(&mut rng, Case { mask: Mask::Prefix, ..case(1, 4, 4, 1, 777, 64, 64) }, all)?;
    run_case(&mut rng, Case { causal: true, ..case(1, 1, 1, 2, 3000, 64, 64) }, all)?;
    run_case(&mut rng, case(1, 2, 2, 2, 8192, 128, 128), &[DType::BF16, DType::F32])
}

/// 3-D `[B, L, E]` inputs, a transposed `[B, L, H, E]` query (strided), and an explicit scale.
#[test]
fn sdpa_three_d_strided_and_scaled() -> Result<()> {
    let mut rng = Rng::new(4007);
    for device in devices() {
        for dtype in FLOATS {
            let what = format!("{dtype} on {device}");
            let (qv, q) = rand_tensor(&mut rng, &[3, 6, 40], dtype, device)?;
            let (kv, k) = rand_tensor(&mut rng, &[3, 11, 40], dtype, device)?;
            let (vv, v) = rand_tensor(&mut rng, &[3, 11, 16], dtype, device)?;
            let mv: Vec<f64> = (0..6 * 11).map(|_| (!rng.next_u64().is_multiple_of(4)) as u8 as f64).collect();
            let m = tensor(&mv, &[6, 11], DType::Bool, device)?;
            let y = F::scaled_dot_product_attention(&q, &k, &v, Some(&m), 0.0, false, Some(0.3), false)?;
            assert_eq!(y.shape(), &[3, 6, 16], "{what}");
            assert!(y.is_contiguous(), "{what}: a 3-D output is contiguous (no heads to interleave)");
            let c = Case { mask: Mask::Bool, ..case(3, 1, 1, 6, 11, 40, 16) };
            let wide: Vec<f64> = (0..3 * 6 * 11).map(|x| mv[x % 66]).collect();
            let want: Vec<f64> =
                sdpa_reference(&c, &qv, &kv, &vv, &wide, true, 0.3).iter().map(|&x| round_to(dtype, x)).collect();
            assert_near(&values(&y)?, &want, dtype, &format!("3-D {what}"));

            // A query laid out [B, L, H, E] and viewed as [B, H, L, E].
            let (qv, q) = rand_tensor(&mut rng, &[2, 5, 3, 64], dtype, device)?;
            let q = q.transpose(1, 2)?;
            let (kv, k) = rand_tensor(&mut rng, &[2, 3, 9, 64], dtype, device)?;
            let (vv, v) = rand_tensor(&mut rng, &[2, 3, 9, 64], dtype, device)?;
            let y = F::scaled_dot_product_attention(&q, &k, &v, None, 0.0, true, None, false)?;
            let mut qd = vec![0.0; qv.len()];
            for b in 0..2 {
                for l in 0..5 {
                    for h in 0..3 {
                        for e in 0..64 {
                            qd[((b * 3 + h) * 5 + l) * 64 + e] = qv[((b * 5 + l) * 3 + h) * 64 + e];
                        }
                    }
                }
            }
            let c = Case { causal: true, ..case(2, 3, 3, 5, 9, 64, 64) };
            let want: Vec<f64> =
                sdpa_reference(&c, &qd, &kv, &vv, &[], false, 0.125).iter().map(|&x| round_to(dtype, x)).collect();
            assert_near(&values(&y)?, &want, dtype, &format!("strided query {what}"));
            assert_pytorch_layout(&y, &want, &format!("strided query {what}"))?;
        }
    }
    Ok(())
}

/// A CUDA attention kernel, its query-tile order and, for the swizzle, its section's (batch,
/// head)s (`None`: the device's own, from its L2).
#[derive(Debug, Clone, Copy)]
struct Choice {
    kernel: cudasem::AttentionKernel,
    order: cudasem::AttentionOrder,
    section: Option<u32>,
}

impl Choice {
    /// Makes this the attention the launches that follow run.
    fn set(self) -> Result<()> {
        match self.order {
            cudasem::AttentionOrder::Swizzle => cudasem::cuda::set_attention_swizzle(self.kernel, self.section),
            order => cudasem::cuda::set_attention(self.kernel, order),
        }
    }
}

/// Every kernel of `kernels` in every query-tile order, the swizzle in sections of each of
/// `sections` (batch, head)s (several sections, the first short, where B·Hq is past one and not a
/// multiple of it), and the default kernel's swizzle also in the device's own sections (one on
/// these sizes: the heaviest-first order's grid through the swizzle's arithmetic).
fn attention_choices(kernels: &[cudasem::AttentionKernel], sections: &[u32]) -> Vec<Choice> {
    use cudasem::{AttentionKernel, AttentionOrder};
    let mut v = Vec::new();
    for &kernel in kernels {
        for order in [AttentionOrder::Heavy, AttentionOrder::Head, AttentionOrder::Natural] {
            v.push(Choice { kernel, order, section: None });
        }
        for &section in sections {
            v.push(Choice { kernel, order: AttentionOrder::Swizzle, section: Some(section) });
        }
    }
    v.push(Choice { kernel: AttentionKernel::Auto, order: AttentionOrder::Swizzle, section: None });
    v
}

/// The CUDA driver's attention kernels, each chosen in turn (`CUDASEM_SDPA_KERNEL`'s setting:
/// the FMA flash kernel, the tensor-core kernels wherever they apply — f16 / bf16 with head dims
/// 64 and 128, here also for a single query: the `mma.sync` one and on compute capability 9.0
/// Hopper's wgmma one with either key tile, with and without its warpgroups taking turns, and on
/// FlashAttention 3's schedule — and the default choice), against the float64
/// reference: causal with L = S, L > S and S shorter than a tile, lengths not multiples of the
/// 64- and 128-row tiles, several key tiles, bool masks with fully masked rows and grouped heads,
/// additive masks with −inf, a prefix mask, decoding, a query viewed from `[B, L, H, E]`, and a
/// query starting off 16 bytes (the tensor-core kernel then falls back); each with the
/// tensor-core kernels' query tiles in every order ([`attention_choices`]: `CUDASEM_SDPA_KERNEL`'s
/// `:heavy`, `:head`, `:natural`, `:swizzle` in several sections and in the device's own), every
/// output in PyTorch's `[B, L, H, Ev]` memory. A failure names the kernel and order. The simulator
/// computes every case in float64 whatever the choice.
#[test]
fn sdpa_each_cuda_kernel_matches_float64() -> Result<()> {
    use cudasem::{AttentionKernel, AttentionOrder};
    let mut rng = Rng::new(4010);
    let half = &[DType::BF16, DType::F16][..];
    let cases = [
        Case { causal: true, ..case(2, 4, 4, 200, 200, 64, 64) },
        Case { causal: true, ..case(1, 2, 2, 130, 77, 128, 128) },
        Case { causal: true, ..case(1, 2, 1, 20, 3, 64, 64) },
        case(1, 3, 3, 65, 300, 128, 128),
        Case { mask: Mask::Bool, ..case(2, 4, 2, 70, 129, 64, 64) },
        Case { mask: Mask::Add, ..case(1, 4, 4, 64, 64, 128, 128) },
        Case { mask: Mask::Prefix, ..case(1, 8, 2, 33, 500, 64, 64) },
        case(2, 8, 2, 1, 1000, 128, 128),
        Case { causal: true, ..case(1, 2, 2, 5, 9, 128, 128) },
        // Hopper's kernel (blocks of 128 queries, tiles of 64 or 128 keys, two stages): causal
        // across several query blocks with a ragged last one, exactly one block, one row past
        // it, L > S and L < S, grouped heads, many key tiles.
        Case { causal: true, ..case(1, 4, 2, 300, 300, 64, 64) },
        Case { causal: true, ..case(1, 2, 2, 257, 257, 128, 128) },
        Case { causal: true, ..case(2, 2, 2, 128, 128, 64, 64) },
        case(1, 2, 2, 129, 200, 128, 128),
        Case { causal: true, ..case(1, 2, 1, 200, 70, 128, 128) },
        Case { causal: true, ..case(1, 2, 2, 100, 450, 64, 64) },
        case(1, 4, 1, 64, 1000, 64, 64),
    ];
    // The simulator ignores the choice: one pass there. (The FMA kernel ignores the order.)
    let choices = if cudasem::cuda::driver_name() == "cuda" {
        // Every kernel but the FMA one, each in every order (the FMA kernel ignores the order).
        let tensor: Vec<_> = AttentionKernel::ALL.into_iter().filter(|&k| k != AttentionKernel::Fma).collect();
        let fma = Choice { kernel: AttentionKernel::Fma, order: AttentionOrder::Heavy, section: None };
        // Sections of 3: the 8 (batch, head)s of the first case in three (2, 3, 3), the 4 in two.
        std::iter::once(fma).chain(attention_choices(&tensor, &[3])).collect()
    } else {
        vec![Choice { kernel: AttentionKernel::Auto, order: AttentionOrder::Heavy, section: None }]
    };
    for choice in choices {
        choice.set()?;
        let Choice { kernel, order, section } = choice;
        let label = format!("(attention kernel {kernel:?}, order {order:?}, section {section:?})");
        // The order applies to causal launches only (the others keep each head's tiles together).
        for c in cases.into_iter().filter(|c| c.causal || order == AttentionOrder::Heavy) {
            run_case_as(&mut rng, c, half, &label)?;
        }
        for device in devices() {
            for dtype in half.iter().copied() {
                let what = format!("{dtype} on {device} {label}");
                // A query laid out [B, L, H, E], viewed as [B, H, L, E] (strides multiples of 8).
                let (b, h, l, s, e) = (2, 3, 70, 90, 64);
                let (qv, q) = rand_tensor(&mut rng, &[b, l, h, e], dtype, device)?;
                let (kv, k) = rand_tensor(&mut rng, &[b, h, s, e], dtype, device)?;
                let (vv, v) = rand_tensor(&mut rng, &[b, h, s, e], dtype, device)?;
                let y = F::scaled_dot_product_attention(&q.transpose(1, 2)?, &k, &v, None, 0.0, true, None, false)?;
                let mut qd = vec![0.0; qv.len()];
                for (i, x) in qv.iter().enumerate() {
                    let (bi, li, hi, ei) = (i / (l * h * e), i / (h * e) % l, i / e % h, i % e);
                    qd[((bi * h + hi) * l + li) * e + ei] = *x;
                }
                let c = Case { causal: true, ..case(b, h, h, l, s, e, e) };
                let want: Vec<f64> =
                    sdpa_reference(&c, &qd, &kv, &vv, &[], false, 0.125).iter().map(|&x| round_to(dtype, x)).collect();
                assert_near(&values(&y)?, &want, dtype, &format!("transposed query {what}"));
                assert_pytorch_layout(&y, &want, &format!("transposed query {what}"))?;
                // A query starting one element into its buffer: not 16-byte aligned.
                let (qv, q) = rand_tensor(&mut rng, &[1 + b * h * l * e], dtype, device)?;
                let q = q.narrow(0, 1, b * h * l * e)?.reshape([b, h, l, e])?;
                let y = F::scaled_dot_product_attention(&q, &k, &v, None, 0.0, false, None, false)?;
                let c = case(b, h, h, l, s, e, e);
                let want: Vec<f64> = sdpa_reference(&c, &qv[1..], &kv, &vv, &[], false, 0.125)
                    .iter()
                    .map(|&x| round_to(dtype, x))
                    .collect();
                assert_near(&values(&y)?, &want, dtype, &format!("offset query {what}"));
                assert_pytorch_layout(&y, &want, &format!("offset query {what}"))?;
            }
        }
    }
    cudasem::cuda::set_attention(AttentionKernel::Auto, AttentionOrder::Heavy)
}

/// Hopper's kernels on FlashAttention 3's schedule and the TMA kernels with a producer (`tmaws`,
/// `tmaov`) run persistent blocks (one an SM for head dim 128; for 64 two, one under `tmaov`),
/// each taking several query tiles in turn when there are more than blocks:
/// causal (the heaviest tiles first) and not, grouped heads, ragged tiles (a last tile of one
/// row), L > S, against the float64 reference for each choice of them (`fa128`, `fa128g` a block
/// per tile, `fa128n` without turns); more tiles than an H100's or H200's 132 SMs hold at once.
/// The simulator ignores the choice and computes every case alike: one case there.
#[test]
fn sdpa_persistent_hopper_blocks_take_every_query_tile() -> Result<()> {
    use cudasem::AttentionKernel;
    let mut rng = Rng::new(4012);
    let cases = [
        // 2 query tiles × 70 heads = 140 tasks of head dim 128.
        Case { causal: true, ..case(1, 70, 14, 129, 40, 128, 128) },
        case(2, 35, 35, 129, 70, 128, 128),
        // 2 × 140 = 280 tasks of head dim 64 (two blocks an SM: 264).
        Case { causal: true, ..case(1, 140, 35, 129, 50, 64, 64) },
        case(1, 140, 140, 150, 70, 64, 64),
        // 280 tasks of head dim 128: two or three a block of one an SM (the producer's snake).
        Case { causal: true, ..case(1, 140, 28, 200, 60, 128, 128) },
    ];
    let cuda = cudasem::cuda::driver_name() == "cuda";
    let (kernels, cases, dtypes) = if cuda {
        (
            &[
                AttentionKernel::Fa128,
                AttentionKernel::Fa128g,
                AttentionKernel::Fa128n,
                AttentionKernel::TmaWs,
                AttentionKernel::TmaOv,
            ][..],
            &cases[..],
            &[DType::BF16, DType::F16][..],
        )
    } else {
        (&[AttentionKernel::Auto][..], &cases[..1], &[DType::BF16][..])
    };
    for &kernel in kernels {
        cudasem::cuda::set_attention_kernel(kernel)?;
        let label = format!("(attention kernel {kernel:?})");
        for &c in cases {
            run_case_as(&mut rng, c, dtypes, &label)?;
        }
    }
    cudasem::cuda::set_attention_kernel(AttentionKernel::Auto)
}

/// `dropout_p` drops each attention weight with that probability and scales the others by
/// `1 / (1 − p)`, from the device's default generator: with one-hot values (value row j is e_j,
/// Ev = S) an output row is its query's weights, so each element is 0 or the float64 weight over
/// 1 − p (causal; a bool mask with rows that keep no key, which give zeros; an additive mask with
/// −inf; grouped heads, an explicit scale); about p of the weights are dropped, the same seed
/// draws the same drops, and p = 1 gives zeros.
#[test]
fn sdpa_dropout_drops_weights_and_scales_the_rest() -> Result<()> {
    // The seed and the draws it is checked on, with no other test's draws between them.
    let _draws = default_generators();
    let mut rng = Rng::new(4013);
    let p = 0.25;
    let base = case(2, 4, 2, 40, 24, 16, 24);
    let cases = [Case { causal: true, ..base }, Case { mask: Mask::Bool, ..base }, Case { mask: Mask::Add, ..base }];
    for device in devices() {
        for dtype in [DType::F32, DType::BF16] {
            for c in cases {
                let (qv, q) = rand_tensor(&mut rng, &[c.b, c.hq, c.l, c.e], dtype, device)?;
                let (kv, k) = rand_tensor(&mut rng, &[c.b, c.hkv, c.s, c.e], dtype, device)?;
                let one_hot: Vec<f64> =
                    (0..c.b * c.hkv * c.s * c.s).map(|i| ((i / c.s) % c.s == i % c.s) as u8 as f64).collect();
                let v = tensor(&one_hot, &[c.b, c.hkv, c.s, c.s], dtype, device)?;
                let mask = make_mask(&mut rng, &c, dtype, device)?;
                let (m, mv) = match &mask {
                    Some((m, mv)) => (Some(m), &mv[..]),
                    None => (None, &[][..]),
                };
                let w = sdpa_reference(&c, &qv, &kv, &one_hot, mv, c.mask == Mask::Bool, 0.3);
                let run = |p: f64| {
                    cudasem::manual_seed(7);
                    F::scaled_dot_product_attention(&q, &k, &v, m, p, c.causal, Some(0.3), true)
                        .and_then(|y| values(&y))
                };
                let got = run(p)?;
                let tol = if dtype == DType::BF16 { 1e-2 } else { 1e-5 };
                let (mut dropped, mut kept) = (0usize, 0usize);
                for (i, (&g, &w)) in got.iter().zip(&w).enumerate() {
                    let what = format!("element {i} ({dtype} on {device}, {:?}): {g}, weight {w}", c.mask);
                    if w == 0.0 {
                        assert_eq!(g, 0.0, "a masked key, or a row that keeps none: {what}");
                    } else if g == 0.0 {
                        dropped += 1;
                    } else {
                        kept += 1;
                        let want = w / (1.0 - p);
                        assert!((g - want).abs() <= tol * want, "kept, scaled by 1 / (1 - p): {what}");
                    }
                }
                let frac = dropped as f64 / (dropped + kept) as f64;
                let what = format!("{dtype} on {device}, {:?}", c.mask);
                assert!((frac - p).abs() < 0.04, "{dropped} of {} weights dropped ({what})", dropped + kept);
                assert_eq!(run(p)?, got, "the same seed draws the same drops ({what})");
                assert!(run(1.0)?.iter().all(|&x| x == 0.0), "p = 1 drops every weight ({what})");
            }
        }
    }
    Ok(())
}

/// The default generators, held by the tests that draw from them: the test binary's tests run on
/// parallel threads, and one test's draw between another's `manual_seed` and its draws would
/// change what that one drew (seen on an H100: `sdpa_arguments_are_checked`'s dropout between
/// the dropout test's two seeded runs).
fn default_generators() -> std::sync::MutexGuard<'static, ()> {
    static DRAWS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    DRAWS.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn sdpa_arguments_are_checked() -> Result<()> {
    let _draws = default_generators(); // (its dropout draws)
    let mut rng = Rng::new(4008);
    for device in devices() {
        let t = |rng: &mut Rng, shape: &[usize]| rand_tensor(rng, shape, DType::F32, device).map(|p| p.1);
        let q = t(&mut rng, &[1, 4, 3, 8])?;
        let k = t(&mut rng, &[1, 2, 5, 8])?;
        let v = t(&mut rng, &[1, 2, 5, 8])?;
        let sdpa = |q: &Tensor, k: &Tensor, v: &Tensor, m: Option<&Tensor>, p: f64, causal: bool, gqa: bool| {
            F::scaled_dot_product_attention(q, k, v, m, p, causal, None, gqa)
        };
        assert!(matches!(sdpa(&q, &k, &v, None, 0.0, false, false), Err(Error::InvalidArgument { .. })), "heads");
        let k3 = t(&mut rng, &[1, 3, 5, 8])?;
        assert!(matches!(sdpa(&q, &k3, &k3, None, 0.0, false, true), Err(Error::InvalidArgument { .. })), "gqa");
        assert!(sdpa(&q, &k, &v, None, 0.1, false, true).is_ok(), "dropout");
        assert!(matches!(sdpa(&q, &k, &v, None, 1.5, false, true), Err(Error::InvalidArgument { .. })));
        let v6 = t(&mut rng, &[1, 2, 6, 8])?;
        assert!(matches!(sdpa(&q, &k, &v6, None, 0.0, false, true), Err(Error::ShapeMismatch { .. })), "S");
        let k7 = t(&mut rng, &[1, 2, 5, 7])?;
        assert!(matches!(sdpa(&q, &k7, &v, None, 0.0, false, true), Err(Error::ShapeMismatch { .. })), "E");
        let big = t(&mut rng, &[1, 1, 2, 257])?;
        assert!(matches!(sdpa(&big, &big, &big, None, 0.0, false, false), Err(Error::InvalidShape { .. })), "E>256");
        let flat = t(&mut rng, &[3, 8])?;
        assert!(matches!(sdpa(&flat, &flat, &flat, None, 0.0, false, false), Err(Error::InvalidShape { .. })));
        let bad_mask = Tensor::from_slice(&[true, false, true, false], [4], device)?;
        assert!(sdpa(&q, &k, &v, Some(&bad_mask), 0.0, false, true).is_err(), "mask not broadcastable");
        let mask = Tensor::from_slice(&[true, false, true, true, true], [5], device)?;
        assert!(matches!(sdpa(&q, &k, &v, Some(&mask), 0.0, true, true), Err(Error::InvalidArgument { .. })));
        let int_mask = Tensor::from_slice(&[1i64, 0, 1, 1, 1], [5], device)?;
        assert!(matches!(sdpa(&q, &k, &v, Some(&int_mask), 0.0, false, true), Err(Error::DTypeMismatch { .. })));
        let k16 = k.to_dtype(DType::F16)?;
        assert!(matches!(sdpa(&q, &k16, &v, None, 0.0, false, true), Err(Error::DTypeMismatch { .. })));
        // No keys (PyTorch: an empty softmax, then zeros) and no queries.
        let none = Tensor::zeros([1, 2, 0, 8], DType::F32, device)?;
        let y = sdpa(&q, &none, &none, None, 0.0, false, true)?;
        assert_eq!((y.shape(), values(&y)?), (&[1, 4, 3, 8][..], vec![0.0; 96]));
        assert_eq!(sdpa(&none, &k, &v, None, 0.0, false, false)?.shape(), &[1, 2, 0, 8]);
        let y = sdpa(&Tensor::zeros([1, 4, 0, 8], DType::F32, device)?, &k, &v, None, 0.0, true, true)?;
        assert_eq!(y.shape(), &[1, 4, 0, 8]);
        // Still usable: a valid call after the errors.
        let y = sdpa(&q, &k, &v, Some(&mask), 0.0, false, true)?;
        assert_eq!(y.shape(), &[1, 4, 3, 8]);
        assert!(values(&y)?.iter().all(|x| x.is_finite()));
    }
    Ok(())
}

/// The swizzle's section set by hand: 0 or past the most an `int`'s upper bits hold is a typed
/// error naming the key, and attention runs afterwards.
#[test]
fn a_bad_swizzle_section_is_a_typed_error() -> Result<()> {
    use cudasem::{AttentionKernel, AttentionOrder};
    for bad in [0, cudasem::MAX_SWIZZLE_HEADS + 1, u32::MAX] {
        match cudasem::cuda::set_attention_swizzle(AttentionKernel::Auto, Some(bad)) {
            Err(Error::InvalidConfig { key, value, .. }) => {
                assert_eq!((key.as_str(), value), ("swizzle_heads", bad.to_string()))
            }
            other => panic!("swizzle_heads {bad}: expected InvalidConfig, got {other:?}"),
        }
    }
    cudasem::cuda::set_attention_swizzle(AttentionKernel::Auto, Some(cudasem::MAX_SWIZZLE_HEADS))?;
    let mut rng = Rng::new(4011);
    run_case_as(&mut rng, Case { causal: true, ..case(1, 2, 2, 70, 70, 64, 64) }, &[DType::BF16], "(swizzle)")?;
    cudasem::cuda::set_attention(AttentionKernel::Auto, AttentionOrder::Heavy)
}

/// Attention whose query i selects one key direction: keys are unit vectors `e_(j mod E)` and
/// query i is `160 · e_π(i)`, so with scale 1/8 the keys j ≡ π(i) (mod E) score 20 above the
/// rest (weights below 2^-28) and row i of the output is the mean of their value rows (small
/// integers, exact in f16 / bf16). Every CUDA kernel choice, head dims 64 and 128, one key tile's
/// worth and several (ragged), 200 queries (a ragged block of 128), non-causal and causal (key j
/// kept for query i when j <= i), the query tiles in every order ([`attention_choices`]). A
/// mismatch names the value rows the output holds instead, so a misplaced fragment or tile shows
/// where it went.
#[test]
fn sdpa_picks_the_value_rows_its_query_selects() -> Result<()> {
    use cudasem::{AttentionKernel, AttentionOrder};
    let choices = if cudasem::cuda::driver_name() == "cuda" {
        // Every tensor-core kernel by its name, and `auto` (not `fma`, nor `mma`, which picks among them).
        let one = |k: &AttentionKernel| !matches!(k, AttentionKernel::Fma | AttentionKernel::Mma);
        let kernels: Vec<_> = AttentionKernel::ALL.into_iter().filter(one).collect();
        attention_choices(&kernels, &[1]) // its 2 (batch, head)s in two sections
    } else {
        vec![Choice { kernel: AttentionKernel::Auto, order: AttentionOrder::Heavy, section: None }]
    };
    for choice in choices {
        choice.set()?;
        let Choice { kernel, order, section } = choice;
        for device in devices() {
            for dtype in [DType::BF16, DType::F16] {
                for e in [64, 128] {
                    for s in [e, 2 * e + 37] {
                        // (Non-causal launches ignore the order.)
                        for causal in [false, true].into_iter().filter(|&c| c || order == AttentionOrder::Heavy) {
                            let what = format!(
                                "{kernel:?} ({order:?} {section:?}) {dtype} on {device}, E {e}, S {s}, causal {causal}"
                            );
                            picks_value_rows(device, dtype, e, s, causal, &what)?;
                        }
                    }
                }
            }
        }
    }
    cudasem::cuda::set_attention(AttentionKernel::Auto, AttentionOrder::Heavy)
}

/// One case of [`sdpa_picks_the_value_rows_its_query_selects`]: 2 heads of 200 queries over `s`
/// keys of head dim `e`. Causal query i keeps keys 0..=i: the mean of the value rows it selects
/// among them, or of all of them (every score 0) when it selects none.
fn picks_value_rows(device: Device, dtype: DType, e: usize, s: usize, causal: bool, what: &str) -> Result<()> {
    let (b, h, l) = (1, 2, 200);
    let pick = |i: usize| (i * 37 + 11) % e;
    let value = |j: usize, c: usize| ((j * 7 + c) % 61) as f64 - 30.0;
    let mut q = vec![0.0; b * h * l * e];
    for r in 0..b * h * l {
        q[r * e + pick(r % l)] = 160.0;
    }
    let mut k = vec![0.0; b * h * s * e];
    let mut v = vec![0.0; b * h * s * e];
    for r in 0..b * h * s {
        k[r * e + (r % s) % e] = 1.0;
        for c in 0..e {
            v[r * e + c] = value(r % s, c);
        }
    }
    let qt = tensor(&q, &[b, h, l, e], dtype, device)?;
    let kt = tensor(&k, &[b, h, s, e], dtype, device)?;
    let vt = tensor(&v, &[b, h, s, e], dtype, device)?;
    let y = F::scaled_dot_product_attention(&qt, &kt, &vt, None, 0.0, causal, Some(0.125), false)?;
    let got = values(&y)?;
    for r in 0..b * h * l {
        let i = r % l;
        let kept = if causal { (i + 1).min(s) } else { s };
        let mut chosen: Vec<usize> = (0..kept).filter(|j| j % e == pick(i)).collect();
        if chosen.is_empty() {
            chosen = (0..kept).collect();
        }
        for c in 0..e {
            let want = chosen.iter().map(|&j| value(j, c)).sum::<f64>() / chosen.len() as f64;
            let g = got[r * e + c];
            if (g - want).abs() > 0.02 * (1.0 + want.abs()) {
                let row = &got[r * e..(r + 1) * e];
                let near = (0..s)
                    .min_by(|&a, &z| {
                        let d = |j: usize| (0..e).map(|c| (row[c] - value(j, c)).abs()).sum::<f64>();
                        d(a).total_cmp(&d(z))
                    })
                    .unwrap_or(0);
                panic!(
                    "{what}: output row {r} (query {i}) column {c}: got {g}, want {want} (value rows {chosen:?}); \
                     the row is nearest value row {near}; row head {:?}",
                    &row[..8]
                );
            }
        }
    }
    Ok(())
}
