//! Helpers for the tensor tests: random non-zero data of every dtype, tensors in several layouts
//! (contiguous, transposed, strided, broadcast), float64 references (`reference`), and the
//! tolerances of every op per dtype, in one place (`tolerance`).
#![allow(dead_code)]

pub mod reference;
pub mod tolerance;
use tolerance::f32_odd;

use cudasem::{DType, Device, Result, Tensor};
use half::{bf16, f16};
#[allow(unused_imports)]
pub use tolerance::{assert_close, assert_sums_close, tolerance};

/// The devices every op is tested on: the host, and the current driver's device 0 (a run that
/// must cover a GPU fails without one: `cudasem::testing::has_devices`).
#[track_caller]
pub fn devices() -> Vec<Device> {
    let mut v = vec![Device::Cpu];
    if cudasem::testing::has_devices(1) {
        v.push(Device::cuda(0));
    }
    v
}

/// `r`'s value; any error fails the test, naming `what` (a device op the driver refuses, such as
/// an unsupported launch, is a failure like any other).
#[track_caller]
pub fn expect_ok<T>(r: Result<T>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{what}: {e}"),
    }
}

/// Seeded test data: `rand`'s `StdRng` (the tests' one generator).
pub struct Rng(rand::rngs::StdRng);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(rand::SeedableRng::seed_from_u64(seed))
    }

    pub fn next_u64(&mut self) -> u64 {
        rand::RngExt::random(&mut self.0)
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * rand::RngExt::random::<f64>(&mut self.0)
    }

    /// Uniform in `[lo, hi]`.
    pub fn int(&mut self, lo: i64, hi: i64) -> i64 {
        rand::RngExt::random_range(&mut self.0, lo..=hi)
    }
}

/// What values a test needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Domain {
    /// Non-zero values of either sign (`u8`: 1..=15).
    Any,
    /// Positive values (for `log`, `sqrt`, pow bases).
    Positive,
    /// Small exponents (`0..=3` for integers, `[-2, 2]` for floats).
    Exponent,
}

/// `x` as the dtype holds it: rounded for floats, wrapped for integers, `!= 0` for bool.
pub fn round_to(dtype: DType, x: f64) -> f64 {
    match dtype {
        DType::F64 => x,
        DType::F32 => x as f32 as f64,
        DType::F16 => f16::from_f32(f32_odd(x)).to_f64(),
        DType::BF16 => bf16::from_f32(f32_odd(x)).to_f64(),
        DType::I64 => x as i64 as f64,
        DType::I32 => x as i64 as i32 as f64,
        DType::U8 => x as i64 as u8 as f64,
        DType::Bool => (x != 0.0) as u8 as f64,
    }
}

/// `n` random non-zero values of `dtype` (exactly representable in it).
pub fn sample(rng: &mut Rng, dtype: DType, n: usize, domain: Domain) -> Vec<f64> {
    (0..n)
        .map(|_| {
            // One draw per element (the tests draw millions): the top bit is the sign, the low 53
            // bits a uniform fraction, the middle bits a small integer.
            let u = rng.next_u64();
            let sign = if u >> 63 == 0 { 1.0 } else { -1.0 };
            let unit = (u & ((1 << 53) - 1)) as f64 / (1u64 << 53) as f64;
            let small = |k: u64| ((u >> 53) % k) as f64;
            let v = match (dtype, domain) {
                (DType::Bool, _) => (u & 1) as f64,
                (_, Domain::Exponent) if !dtype.is_float() => small(4),
                (_, Domain::Exponent) => -2.0 + 4.0 * unit,
                (DType::U8, _) => 1.0 + small(15),
                (_, Domain::Positive) if !dtype.is_float() => 1.0 + small(9),
                (_, Domain::Any) if !dtype.is_float() => sign * (1.0 + small(9)),
                (_, Domain::Positive) => 0.25 + 2.75 * unit,
                _ => sign * (0.25 + 2.25 * unit),
            };
            let r = round_to(dtype, v);
            if r == 0.0 && dtype.is_float() {
                0.5
            } else {
                r
            }
        })
        .collect()
}

/// A tensor of `dtype` holding `values` (exactly representable), contiguous.
pub fn tensor(values: &[f64], shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
    match dtype {
        DType::F64 => Tensor::from_slice(values, shape, device),
        DType::F32 => Tensor::from_slice(&values.iter().map(|&x| x as f32).collect::<Vec<_>>(), shape, device),
        DType::F16 => {
            Tensor::from_slice(&values.iter().map(|&x| f16::from_f32(f32_odd(x))).collect::<Vec<_>>(), shape, device)
        }
        DType::BF16 => {
            Tensor::from_slice(&values.iter().map(|&x| bf16::from_f32(f32_odd(x))).collect::<Vec<_>>(), shape, device)
        }
        DType::I64 => Tensor::from_slice(&values.iter().map(|&x| x as i64).collect::<Vec<_>>(), shape, device),
        DType::I32 => Tensor::from_slice(&values.iter().map(|&x| x as i32).collect::<Vec<_>>(), shape, device),
        DType::U8 => Tensor::from_slice(&values.iter().map(|&x| x as u8).collect::<Vec<_>>(), shape, device),
        DType::Bool => Tensor::from_slice(&values.iter().map(|&x| x != 0.0).collect::<Vec<_>>(), shape, device),
    }
}

/// The tensor's elements (row-major) as `f64`, read in its dtype.
pub fn values(t: &Tensor) -> Result<Vec<f64>> {
    Ok(match t.dtype() {
        DType::F64 => t.to_vec::<f64>()?,
        DType::F32 => t.to_vec::<f32>()?.into_iter().map(f64::from).collect(),
        DType::F16 => t.to_vec::<f16>()?.into_iter().map(f16::to_f64).collect(),
        DType::BF16 => t.to_vec::<bf16>()?.into_iter().map(bf16::to_f64).collect(),
        DType::I64 => t.to_vec::<i64>()?.into_iter().map(|x| x as f64).collect(),
        DType::I32 => t.to_vec::<i32>()?.into_iter().map(f64::from).collect(),
        DType::U8 => t.to_vec::<u8>()?.into_iter().map(f64::from).collect(),
        DType::Bool => t.to_vec::<bool>()?.into_iter().map(|b| b as u8 as f64).collect(),
    })
}

/// How an operand is laid out in memory (its logical values are the same in every case).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Layout {
    /// Dense row-major.
    Contiguous,
    /// The transpose of a dense `[c, r]` tensor.
    Transposed,
    /// Every other column of a dense `[r, 2c]` tensor (stride 2), from a non-zero offset.
    Strided,
}

pub const LAYOUTS: [Layout; 3] = [Layout::Contiguous, Layout::Transposed, Layout::Strided];

/// A `[r, c]` tensor of `dtype` on `device` holding `vals` (row-major), laid out as `layout`.
pub fn laid_out(vals: &[f64], r: usize, c: usize, dtype: DType, device: Device, layout: Layout) -> Result<Tensor> {
    let t = match layout {
        Layout::Contiguous => tensor(vals, &[r, c], dtype, device)?,
        Layout::Transposed => {
            let tr: Vec<f64> = (0..c).flat_map(|j| (0..r).map(move |i| vals[i * c + j])).collect();
            tensor(&tr, &[c, r], dtype, device)?.t()?
        }
        Layout::Strided => {
            let mut wide = vec![round_to(dtype, 7.0); r * 2 * c + 1];
            for i in 0..r {
                for j in 0..c {
                    wide[1 + i * 2 * c + 2 * j] = vals[i * c + j];
                }
            }
            let flat = tensor(&wide, &[r * 2 * c + 1], dtype, device)?;
            flat.narrow(0, 1, r * 2 * c)?.view([r as isize, 2 * c as isize])?.slice_step(1, 0.., 2)?
        }
    };
    assert_eq!(t.shape(), [r, c]);
    assert_eq!(t.is_contiguous(), layout == Layout::Contiguous, "{layout:?}");
    Ok(t)
}
