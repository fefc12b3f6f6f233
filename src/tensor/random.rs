//! The random generator behind [`crate::Tensor::rand`] / [`crate::Tensor::randn`]:
//! `torch.manual_seed`, one process-wide generator.
//!
//! Numbers are drawn on the host and copied to the device, so a seed gives the same tensors on
//! the CPU, the simulated machine and real GPUs (PyTorch's CPU and CUDA generators differ; ours
//! do not). The generator is SplitMix64: tiny, fast, and good enough for test data and
//! initialization (not for cryptography).

use crate::dtype::DType;
use std::sync::Mutex;

/// PyTorch's default seed (`torch.initial_seed()` of a fresh process).
const DEFAULT_SEED: u64 = 67_280_421_310_721;

struct Generator {
    seed: u64,
    state: u64,
}

impl Generator {
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` with `bits` random bits (exactly representable in a dtype whose
    /// significand has at least `bits` bits, so rounding never reaches 1).
    fn uniform(&mut self, bits: u32) -> f64 {
        (self.next_u64() >> (64 - bits)) as f64 / (1u64 << bits) as f64
    }
}

static GENERATOR: Mutex<Generator> = Mutex::new(Generator { seed: DEFAULT_SEED, state: DEFAULT_SEED });

fn generator() -> std::sync::MutexGuard<'static, Generator> {
    GENERATOR.lock().unwrap_or_else(|e| e.into_inner())
}

/// Seeds the generator (`torch.manual_seed(seed)`): the tensors drawn afterwards are the same in
/// every run, on every device.
pub fn manual_seed(seed: u64) {
    *generator() = Generator { seed, state: seed };
}

/// The seed the generator was last seeded with (`torch.initial_seed()`).
pub fn initial_seed() -> u64 {
    generator().seed
}

/// Significand bits of a floating-point dtype (with the hidden bit).
fn significand_bits(dtype: DType) -> u32 {
    match dtype {
        DType::F64 => 53,
        DType::F32 => 24,
        DType::F16 => 11,
        _ => 8, // bf16
    }
}

/// `n` uniform numbers in `[0, 1)`, each exactly representable in `dtype`.
pub(crate) fn uniform(n: usize, dtype: DType) -> Vec<f64> {
    let bits = significand_bits(dtype);
    let mut g = generator();
    (0..n).map(|_| g.uniform(bits)).collect()
}

/// `n` standard normal numbers (Box–Muller).
pub(crate) fn normal(n: usize) -> Vec<f64> {
    let mut g = generator();
    let mut out = Vec::with_capacity(n + 1);
    while out.len() < n {
        let u1 = 1.0 - g.uniform(53); // (0, 1]: ln is finite
        let u2 = g.uniform(53);
        let r = (-2.0 * u1.ln()).sqrt();
        let theta = 2.0 * std::f64::consts::PI * u2;
        out.push(r * theta.cos());
        out.push(r * theta.sin());
    }
    out.truncate(n);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_stays_below_one_after_rounding() {
        let mut g = Generator { seed: 1, state: u64::MAX - 5 };
        for _ in 0..1000 {
            let x = g.uniform(11);
            assert!((0.0..1.0).contains(&x));
            assert!(half::f16::from_f64(x).to_f64() < 1.0);
        }
        let mut top = Generator { seed: 0, state: 0 };
        assert!(top.uniform(24) < 1.0);
    }
}
