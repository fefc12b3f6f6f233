//! The random generator behind [`crate::Tensor::rand`] / [`crate::Tensor::randn`]:
//! `torch.manual_seed`, one process-wide generator.
//!
//! Numbers are drawn on the host and copied to the device, so a seed gives the same tensors on
//! the CPU, the simulated machine and real GPUs (PyTorch's CPU and CUDA generators differ; ours
//! do not). The generator is SplitMix64 — tiny, fast, and good enough for test data and
//! initialization (not for cryptography) — used as a *counter-based* generator, as PyTorch's
//! Philox is: number `i` of the stream is a function of `(seed, i)` alone, so a draw reserves a
//! range of counters under the lock and then makes its numbers on every core at once, straight
//! into the tensor's dtype (a GiB of `f32` in well under a second), with the same numbers
//! however many threads made them.

use crate::dtype::DType;
use crate::kernels::cpu::encode;
use rayon::prelude::*;
use std::sync::Mutex;

/// PyTorch's default seed (`torch.initial_seed()` of a fresh process).
const DEFAULT_SEED: u64 = 67_280_421_310_721;

/// Elements one task makes (an even number, so that Box–Muller pairs never straddle tasks).
const CHUNK: usize = 1 << 16;

/// The seed and the next unused counter.
struct Generator {
    seed: u64,
    offset: u64,
}

static GENERATOR: Mutex<Generator> = Mutex::new(Generator { seed: DEFAULT_SEED, offset: 0 });

fn generator() -> std::sync::MutexGuard<'static, Generator> {
    GENERATOR.lock().unwrap_or_else(|e| e.into_inner())
}

/// Seeds the generator (`torch.manual_seed(seed)`): the tensors drawn afterwards are the same in
/// every run, on every device.
pub fn manual_seed(seed: u64) {
    *generator() = Generator { seed, offset: 0 };
}

/// The seed the generator was last seeded with (`torch.initial_seed()`).
pub fn initial_seed() -> u64 {
    generator().seed
}

/// Reserves `n` counters: `(seed, first counter)`.
fn reserve(n: usize) -> (u64, u64) {
    let mut g = generator();
    let first = g.offset;
    g.offset = g.offset.wrapping_add(n as u64);
    (g.seed, first)
}

/// The 64 random bits of counter `i` of the stream `seed`: SplitMix64's output after `i + 1` steps
/// from state `seed`, computed directly.
#[inline]
fn bits(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add(i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Uniform in `[0, 1)` from the top `b` of `x`'s bits (exactly representable in a dtype whose
/// significand has at least `b` bits, so rounding never reaches 1).
#[inline]
fn unit(x: u64, b: u32) -> f64 {
    (x >> (64 - b)) as f64 / (1u64 << b) as f64
}

fn significand_bits(dtype: DType) -> u32 {
    match dtype {
        DType::F64 => 53,
        DType::F32 => 24,
        DType::F16 => 11,
        _ => 8, // bf16
    }
}

/// `n` elements of `dtype`, made in parallel chunks: `make(start, values)` fills `values` with
/// elements `start..start + values.len()` (`start` is a multiple of [`CHUNK`]).
fn generate(n: usize, dtype: DType, make: impl Fn(usize, &mut [f64]) + Sync) -> Vec<u8> {
    let size = dtype.size();
    let mut out = vec![0u8; n * size];
    out.par_chunks_mut(CHUNK * size).enumerate().for_each(|(c, bytes)| {
        let mut values = vec![0.0f64; bytes.len() / size];
        make(c * CHUNK, &mut values);
        bytes.copy_from_slice(&encode(&values, dtype));
    });
    out
}

/// `n` uniform numbers in `[0, 1)` as `dtype`'s bytes, with as many random bits as the dtype's
/// significand holds.
pub(crate) fn uniform_bytes(n: usize, dtype: DType) -> Vec<u8> {
    let (seed, first) = reserve(n);
    let b = significand_bits(dtype);
    generate(n, dtype, |start, values| {
        for (k, v) in values.iter_mut().enumerate() {
            *v = unit(bits(seed, first + (start + k) as u64), b);
        }
    })
}

/// `n` standard normal numbers (Box–Muller: counters `2j` and `2j + 1` make elements `2j` and
/// `2j + 1`) as `dtype`'s bytes.
pub(crate) fn normal_bytes(n: usize, dtype: DType) -> Vec<u8> {
    let (seed, first) = reserve(2 * n.div_ceil(2));
    generate(n, dtype, |start, values| {
        for (p, pair) in values.chunks_mut(2).enumerate() {
            let j = first + (start + 2 * p) as u64;
            let u1 = 1.0 - unit(bits(seed, j), 53); // (0, 1]: ln is finite
            let u2 = unit(bits(seed, j + 1), 53);
            let r = (-2.0 * u1.ln()).sqrt();
            let theta = 2.0 * std::f64::consts::PI * u2;
            pair[0] = r * theta.cos();
            if let Some(second) = pair.get_mut(1) {
                *second = r * theta.sin();
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_stays_below_one_after_rounding() {
        for i in 0..1000 {
            let x = unit(bits(1, (u64::MAX - 5).wrapping_add(i)), 11);
            assert!((0.0..1.0).contains(&x));
            assert!(half::f16::from_f64(x).to_f64() < 1.0);
        }
        assert!(unit(u64::MAX, 24) < 1.0);
        assert!((unit(u64::MAX, 24) as f32) < 1.0);
    }

    #[test]
    fn counters_reproduce_the_sequential_generator() {
        // SplitMix64 stepped one state at a time, as the generator was first written.
        let (seed, mut state) = (1234u64, 1234u64);
        for i in 0..100 {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            assert_eq!(bits(seed, i), z ^ (z >> 31), "counter {i}");
        }
    }

    #[test]
    fn chunks_do_not_change_the_numbers() {
        // Element i depends on (seed, counter) alone: a draw spanning several chunks equals the
        // numbers computed one by one, and odd lengths end with half a Box–Muller pair.
        let n = 2 * CHUNK + 3;
        let got = generate(n, DType::F64, |start, values| {
            for (k, v) in values.iter_mut().enumerate() {
                *v = unit(bits(7, (start + k) as u64), 53);
            }
        });
        for i in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, n - 1] {
            let v = f64::from_ne_bytes(got[i * 8..i * 8 + 8].try_into().unwrap());
            assert_eq!(v, unit(bits(7, i as u64), 53), "element {i}");
        }
    }
}
