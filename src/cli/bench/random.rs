//! The random-number figures (step `random`): `randn_f32_256m` and `rand_bf16_256m` (GB/s
//! written by `Tensor::randn` / `Tensor::rand` of `elems` elements, as `torch.randn` /
//! `torch.rand` on the device) and `dropout_bf16_8192x8192` (GB/s read and written by
//! `dropout(0.1, true)` of an `mm × mm` bf16 tensor). Each first checks its draw against the host
//! reference of the Philox stream (`cuda::philox_block`): the first elements of a seeded draw bit
//! for bit, dropout's kept elements scaled by `1 / (1 − p)`. The step's sampling rows are
//! `sampling.rs`'s.

use super::measure::{check, event_ms, Sizes, StepResult};
use cudasem::cuda::{self, Generator};
use cudasem::{DType, Device, Tensor};

fn gb_per_s(bytes: usize, ms: f64) -> f64 {
    bytes as f64 / (ms * 1e-3) / 1e9
}

/// Elements checked against the reference.
const CHECKED: usize = 4096;

/// The first [`CHECKED`] uniforms of seed `seed` as bf16 (8 random bits each), and the f32
/// normals (`cuda::box_muller_f32` of a block's word pairs, four a block).
fn reference(seed: u64) -> (Vec<f32>, Vec<f32>) {
    let uniforms = (0..CHECKED)
        .map(|i| {
            let w = cuda::philox_block(seed, (i / 4) as u64)[i % 4];
            f32::from((w >> 24) as u8) / 256.0
        })
        .collect();
    let normals = (0..CHECKED)
        .map(|i| {
            let w = cuda::philox_block(seed, (i / 4) as u64);
            let (c, s) = cuda::box_muller_f32(w[i & 2], w[(i & 2) + 1]);
            if i % 2 == 0 {
                c
            } else {
                s
            }
        })
        .collect();
    (uniforms, normals)
}

/// The three rows, then `sampling.rs`'s two.
pub fn rows(s: &Sizes) -> StepResult {
    let n = s.elems;
    let g = Generator::new(Device::cuda(0))?;
    g.manual_seed(20261201);
    let (uniforms, normals) = reference(20261201);
    let z = Tensor::randn_gen([n.max(CHECKED)], DType::F32, &g)?.to_vec::<f32>()?;
    let bad = z.iter().zip(&normals).position(|(a, b)| a.to_bits() != b.to_bits());
    check(bad.is_none(), || format!("randn element {bad:?} differs from the reference Philox stream"))?;
    g.manual_seed(20261201);
    let u = Tensor::rand_gen([n.max(CHECKED)], DType::BF16, &g)?.to_vec::<half::bf16>()?;
    let bad = u.iter().zip(&uniforms).position(|(a, b)| a.to_f32() != *b);
    check(bad.is_none(), || format!("rand bf16 element {bad:?} differs from the reference Philox stream"))?;
    let randn = event_ms(s.warmup, s.runs, s.reps, || Tensor::randn([n], DType::F32, "cuda:0").map(drop))?;
    let rand = event_ms(s.warmup, s.runs, s.reps, || Tensor::rand([n], DType::BF16, "cuda:0").map(drop))?;
    let m = s.mm;
    let x = Tensor::ones([m, m], DType::BF16, "cuda:0")?;
    let y = x.dropout(0.1, true)?.to_vec::<half::bf16>()?;
    let kept = y.iter().filter(|v| v.to_f32() != 0.0).count() as f64 / y.len() as f64;
    let scale = half::bf16::from_f64(1.0 / 0.9);
    check(y.iter().all(|v| v.to_f32() == 0.0 || *v == scale), || "dropout's kept elements are not 1 / (1 - p)".into())?;
    check((kept - 0.9).abs() < 0.01 + 5.0 / (y.len() as f64).sqrt(), || {
        format!("dropout kept {kept} of the elements")
    })?;
    let dropout = event_ms(s.warmup, s.runs, s.reps, || x.dropout(0.1, true).map(drop))?;
    let mut out = vec![
        ("randn_f32_256m", gb_per_s(4 * n, randn)),
        ("rand_bf16_256m", gb_per_s(2 * n, rand)),
        ("dropout_bf16_8192x8192", gb_per_s(2 * 2 * m * m, dropout)),
    ];
    out.extend(super::sampling::rows(s)?);
    Ok(out)
}
