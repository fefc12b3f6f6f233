//! Random draws as device work: the Philox4x32-10 counter-based generator (PyTorch's CUDA
//! generator) and [`RandomOp`], the kernel op that fills a tensor from it.
//!
//! # The stream mapping (the same on every driver)
//!
//! A draw of `n` elements reads the generator's `(seed, offset)` and takes the Philox blocks
//! `offset, offset + 1, …` ([`philox_block`]: counter `(lo, hi, 0, 0)` of the 64-bit block
//! number, key `(lo, hi)` of the seed; each block is four 32-bit words). Element `i` comes from
//! block `offset + i / E`, where `E` ([`Distribution::per_block`]) is 4 for a distribution that
//! needs one word per element (word `i % 4`) or a pair of elements per two words (the `f32`
//! normals) and 2 for one that needs two words per element (words `2·(i % 2)` and
//! `2·(i % 2) + 1`, read as the 53-bit number [`u53`]). A draw advances the offset by `⌈n / E⌉`
//! blocks. The values (arithmetic in `f64`, rounded once into the output dtype, except the
//! normals and the dropout of `f32`, `f16` and `bf16`, in `f32`; multinomial and randperm: their
//! variants' docs):
//!
//! * uniform on `[low, high)`: `u = (w >> (32 − b)) · 2^−b` with `b` the dtype's significand bits
//!   (24 for `f32`, 11 for `f16`, 8 for `bf16`; `f64` takes two words, `u = u53 · 2^−53`), then
//!   `low + u · (high − low)`; a value that rounds to `high` becomes `low`;
//! * normal of `f32`, `f16`, `bf16` (`f32` math, as PyTorch's `curand_normal4`): block `j` makes
//!   elements `4j … 4j + 3`: the pairs `(z0, z1)` = [`box_muller_f32`]`(w0, w1)` and
//!   `(z2, z3)` = [`box_muller_f32`]`(w2, w3)`, each `fma(z, std, mean)` in `f32` (mean and std
//!   rounded to `f32`), rounded into the dtype;
//! * normal of `f64`: Box–Muller over pairs: block `j` makes elements `2j` and `2j + 1` from
//!   `u1 = (u53(w0, w1) + 1) · 2^−53` (in `(0, 1]`) and `u2 = u53(w2, w3) · 2^−53`:
//!   `r = √(−2 ln u1)`, `θ = 2π u2`, `mean + std · r cos θ` and `mean + std · r sin θ`;
//! * exponential: `−ln(u) / λ` with `u = (u53 + 1) · 2^−53`;
//! * bernoulli: `w · 2^−32 < p` (1 or 0); dropout: `w · 2^−32 < 1 − p` keeps `x · s` with
//!   `s = 1 / (1 − p)` (below `f64`, in `f32`: `x · f32(s)`, as PyTorch's `f32` accumulator);
//! * integers in `[low, low + range)`: `low + w mod range` (two words, `(w0 << 32 | w1) mod
//!   range`, when `range > 2^32`).
//!
//! The uniform, bernoulli, dropout, integer, multinomial and permutation values are integer math
//! and correctly rounded `f64` (and `f32`) operations in a fixed order, and the `f32` normals are correctly rounded `f32` operations in one fixed
//! order (`box_muller.rs`), so the simulated machine and a GPU give the same bits. The `f64`
//! normals and the exponentials go through `log`, `sin` and `cos`, which the host's libm and
//! CUDA's libdevice compute with errors of at most a few `f64` ulp: the exponentials in `f32`,
//! `f16` and `bf16` then agree to at most 1 ulp of the output dtype (almost always exactly), and
//! the `f64` values to at most [`TRANSCENDENTAL_ULP_F64`] ulp (for `mean = 0`, `std = 1`).

#[cfg(doc)]
use super::box_muller::box_muller_f32;
use super::{bad, BufferView};
use crate::dtype::DType;
use crate::error::Result;

/// The largest difference, in `f64` ulp, between two drivers' `f64` normal or exponential draws
/// (standard parameters); narrower dtypes' exponentials differ by at most 1 ulp of their own
/// (their normals not at all).
pub const TRANSCENDENTAL_ULP_F64: u64 = 8;

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011; the
/// generator of cuRAND and of PyTorch's CUDA random ops): the four words of counter `ctr` under
/// `key`.
pub fn philox4x32_10(ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let (mut c, mut k) = (ctr, key);
    for round in 0..10 {
        if round > 0 {
            k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
        }
        let p0 = u64::from(M0) * u64::from(c[0]);
        let p1 = u64::from(M1) * u64::from(c[2]);
        c = [(p1 >> 32) as u32 ^ c[1] ^ k[0], p1 as u32, (p0 >> 32) as u32 ^ c[3] ^ k[1], p0 as u32];
    }
    c
}

/// Block `block` of the stream `seed`: [`philox4x32_10`] of counter `(lo, hi, 0, 0)` of `block`
/// under key `(lo, hi)` of `seed`.
#[inline]
pub fn philox_block(seed: u64, block: u64) -> [u32; 4] {
    philox4x32_10([block as u32, (block >> 32) as u32, 0, 0], [seed as u32, (seed >> 32) as u32])
}

/// The 53-bit number of two words: `a`'s 32 bits over `b`'s top 21.
#[inline]
pub fn u53(a: u32, b: u32) -> u64 {
    (u64::from(a) << 21) | (u64::from(b) >> 11)
}

/// What a [`RandomOp`] draws.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Distribution {
    /// Uniform on `[low, high)` (`torch.rand`, `uniform_`).
    Uniform {
        /// Lower bound.
        low: f64,
        /// Upper bound (excluded).
        high: f64,
    },
    /// Normal (`torch.randn`, `normal_`).
    Normal {
        /// Mean.
        mean: f64,
        /// Standard deviation.
        std: f64,
    },
    /// 1 with probability `p`, else 0 (`bernoulli_`).
    Bernoulli {
        /// The probability of 1.
        p: f64,
    },
    /// Exponential with rate `lambda` (`exponential_`).
    Exponential {
        /// The rate.
        lambda: f64,
    },
    /// Integers in `[low, low + range)` (`torch.randint`, `random_`).
    Integers {
        /// The smallest value.
        low: i64,
        /// How many values (at least 1).
        range: u64,
    },
    /// The input (`RandomOp::src`) with each element zeroed with probability `p`, the others
    /// scaled by `1 / (1 − p)` (`F.dropout` in training).
    Dropout {
        /// The probability of a zero.
        p: f64,
    },
    /// `torch.multinomial`: for each row of the input `src` (`[rows, categories]`, floating
    /// point, non-negative weights), `samples` category indices and the row's check, into `dst`
    /// (`I64`, one-dimensional: the picks `[rows, samples]` row-major, then a status word per
    /// row, [`multinomial_status`]). Sample `k` of row `r` takes block `offset + r · samples + k`.
    ///
    /// The weights (in `f64`; the ones already chosen count as 0 without replacement) are summed
    /// in tiles of [`MULTINOMIAL_TILE`] categories (tile `j`: categories from `4096 j`), each in
    /// the order of a block of 256 threads: thread `t` sums, from `0.0` in turn, categories
    /// `1024 i + 4 t + q` of the tile for `i = 0..4`, `q = 0..4` (past the row: 0), giving `sₜ`; a
    /// warp of 32 scans its `sₜ` (Kogge–Stone: for `d = 1, 2, 4, 8, 16`, lane `l ≥ d` adds lane
    /// `l − d`'s value before its own); the warps' totals are added in warp order from `0.0` (the
    /// start `B_w` of warp `w`; all eight: the tile's `τⱼ`); thread `t` starts at
    /// `B_w + (the scan of lane l − 1, or 0)`. The tiles' totals are added in tile order from
    /// `0.0` (`P₀ = 0`, `Pⱼ₊₁ = Pⱼ + τⱼ`; the row's `total` is the last). With
    /// `x = u53(w0, w1) · 2^−53 · total`, the pick lies in the first tile `j` with `Pⱼ₊₁ > x`:
    /// thread `t` of it starts at `eₜ = Pⱼ + (its start in the tile)`, and the pick is, for the
    /// lowest thread with `eₜ + sₜ > x`, its first category `c` of positive weight whose running
    /// sum `eₜ + (its sum through c)` exceeds `x`; failing that (rounding), the tile's last
    /// category of positive weight. With no such tile, the last category of positive weight of
    /// the last tile with `τⱼ > 0`; for a row whose total is not positive and finite, the first
    /// category not yet chosen (0 with replacement). (Any fixed order samples the weights
    /// exactly; this one lets the CUDA kernel split a row over a block per tile, bit for bit.)
    Multinomial {
        /// Samples per row.
        samples: usize,
        /// With replacement (else each category at most once per row).
        replacement: bool,
    },
    /// `torch.randperm`: a permutation of `0..n` into `dst` (`[n]`): the indices sorted by random
    /// keys (PyTorch's way), ties by index: element `i`'s key is the 64-bit number
    /// `(w_{2(i mod 2)} << 32) | w_{2(i mod 2)+1}` of block `offset + i / 2`.
    Permutation,
}

impl Distribution {
    /// A short name for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Distribution::Uniform { .. } => "uniform",
            Distribution::Normal { .. } => "normal",
            Distribution::Bernoulli { .. } => "bernoulli",
            Distribution::Exponential { .. } => "exponential",
            Distribution::Integers { .. } => "integers",
            Distribution::Dropout { .. } => "dropout",
            Distribution::Multinomial { .. } => "multinomial",
            Distribution::Permutation => "randperm",
        }
    }

    /// Elements one Philox block makes for an output of `dtype`: 4 (a word each), 2 (two words
    /// each: also a permutation's keys), or 1 (a multinomial sample).
    pub fn per_block(&self, dtype: DType) -> usize {
        let two_words = match self {
            Distribution::Multinomial { .. } => return 1,
            Distribution::Permutation => true,
            Distribution::Uniform { .. } => dtype == DType::F64,
            Distribution::Normal { .. } => dtype == DType::F64,
            Distribution::Exponential { .. } => true,
            Distribution::Integers { range, .. } => *range > 1 << 32,
            Distribution::Bernoulli { .. } | Distribution::Dropout { .. } => false,
        };
        if two_words {
            2
        } else {
            4
        }
    }

    /// Philox blocks a draw of `n` elements of `dtype` takes (the generator's offset advance):
    /// for a multinomial, `n` is its output's length (a sample each of `rows · samples`, then
    /// `rows` status words, which take none).
    pub fn blocks(&self, n: usize, dtype: DType) -> u64 {
        if let Distribution::Multinomial { samples, .. } = self {
            return (n / samples.saturating_add(1) * samples) as u64;
        }
        n.div_ceil(self.per_block(dtype)) as u64
    }
}

/// Categories per tile of a multinomial row's sums ([`Distribution::Multinomial`]).
pub const MULTINOMIAL_TILE: usize = 4096;

/// The bits of a multinomial row's status word (after the picks in the output): the row holds
/// a weight that is negative, NaN or infinite (bit 0), no positive weight (bit 1), fewer
/// positive weights than the samples asked for without replacement (bit 2). The checks are
/// PyTorch's, on every element of the row.
pub mod multinomial_status {
    /// A negative, NaN or infinite weight.
    pub const BAD: i64 = 1;
    /// No positive weight (the row sums to 0).
    pub const ZERO_SUM: i64 = 2;
    /// Without replacement: fewer positive weights than samples.
    pub const TOO_FEW: i64 = 4;
}

/// The random bits of a uniform draw of `dtype`: its significand bits (53 for `f64`).
pub fn uniform_bits(dtype: DType) -> u32 {
    match dtype {
        DType::F64 => 53,
        DType::F16 => 11,
        DType::BF16 => 8,
        _ => 24,
    }
}

/// Where a draw's `(seed, offset)` comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum PhiloxSource {
    /// Given with the launch (an eager draw).
    Value {
        /// The seed.
        seed: u64,
        /// The first block.
        offset: u64,
    },
    /// Read from device memory when the kernel runs (a draw captured in a CUDA graph: each
    /// replay first writes the generator's seed and offset there): two `i64` elements, the seed
    /// and a base offset, to which `offset` is added.
    Slot {
        /// `[seed, base offset]` (dtype `I64`, shape `[2]`, contiguous).
        slot: BufferView,
        /// Blocks after the base offset (the draws captured before this one).
        offset: u64,
    },
}

/// Fills a contiguous `dst` with draws of `dist` from the Philox stream (module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct RandomOp {
    /// The distribution.
    pub dist: Distribution,
    /// The output (contiguous).
    pub dst: BufferView,
    /// The input of [`Distribution::Dropout`] (contiguous, `dst`'s dtype and shape); `None` otherwise.
    pub src: Option<BufferView>,
    /// The stream's seed and first block.
    pub philox: PhiloxSource,
}

impl RandomOp {
    /// The slot view, if the op reads one.
    pub fn slot(&self) -> Option<&BufferView> {
        match &self.philox {
            PhiloxSource::Slot { slot, .. } => Some(slot),
            PhiloxSource::Value { .. } => None,
        }
    }

    /// Checks the op's own rules (the views' extents are checked with every op's).
    pub(super) fn validate(&self) -> Result<()> {
        if !self.dst.is_contiguous() {
            return Err(bad("a random op writes a contiguous output".into()));
        }
        if let (Some(src), false) = (&self.src, matches!(self.dist, Distribution::Multinomial { .. })) {
            if src.shape != self.dst.shape || src.dtype != self.dst.dtype || !src.is_contiguous() {
                return Err(bad("dropout reads a contiguous input of its output's shape and dtype".into()));
            }
        }
        let reads = matches!(self.dist, Distribution::Dropout { .. } | Distribution::Multinomial { .. });
        if reads != self.src.is_some() {
            return Err(bad("dropout and multinomial (and only they) read an input".into()));
        }
        if let Some(slot) = self.slot() {
            if slot.dtype != DType::I64 || slot.shape[..] != [2] || !slot.is_contiguous() {
                return Err(bad("a Philox slot is two contiguous int64 elements".into()));
            }
        }
        if let Distribution::Multinomial { samples, replacement } = self.dist {
            return self.validate_multinomial(samples, replacement);
        }
        if self.dist == Distribution::Permutation && self.dst.shape.len() != 1 {
            return Err(bad("a permutation is one-dimensional".into()));
        }
        let float_only = !matches!(
            self.dist,
            Distribution::Integers { .. } | Distribution::Bernoulli { .. } | Distribution::Permutation
        );
        if float_only && !self.dst.dtype.is_float() {
            return Err(bad(format!("{} draws floating-point values, not {}", self.dist.name(), self.dst.dtype)));
        }
        match self.dist {
            Distribution::Integers { range: 0, .. } => Err(bad("an empty integer range".into())),
            Distribution::Bernoulli { p } | Distribution::Dropout { p } if !(0.0..=1.0).contains(&p) => {
                Err(bad(format!("a probability of {p}")))
            }
            _ => Ok(()),
        }
    }
}

impl RandomOp {
    fn validate_multinomial(&self, samples: usize, replacement: bool) -> Result<()> {
        let Some(src) = &self.src else { return Err(bad("multinomial reads its weights".into())) };
        let ok = src.shape.len() == 2
            && src.is_contiguous()
            && src.dtype.is_float()
            && src.shape[1] > 0
            && src.shape[1] <= 1 << 24
            && self.dst.dtype == DType::I64
            && samples
                .checked_add(1)
                .and_then(|s| s.checked_mul(src.shape[0]))
                .is_some_and(|n| self.dst.shape[..] == [n])
            && samples > 0
            && (replacement || samples <= src.shape[1]);
        if !ok {
            return Err(bad(format!(
                "multinomial of {samples} samples from {:?} ({}) into {:?} ({})",
                src.shape, src.dtype, self.dst.shape, self.dst.dtype
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random123's known-answer vectors for philox4x32 with 10 rounds (`kat_vectors`).
    #[test]
    fn philox_matches_the_published_known_answers() {
        assert_eq!(philox4x32_10([0; 4], [0; 2]), [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]);
        assert_eq!(philox4x32_10([u32::MAX; 4], [u32::MAX; 2]), [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]);
        assert_eq!(
            philox4x32_10([0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344], [0xa409_3822, 0x299f_31d0]),
            [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1]
        );
    }

    #[test]
    fn offsets_count_blocks_of_the_elements_per_block() {
        let normal = Distribution::Normal { mean: 0.0, std: 1.0 };
        assert_eq!((normal.blocks(5, DType::F32), normal.blocks(5, DType::F64)), (2, 3));
        let uniform = Distribution::Uniform { low: 0.0, high: 1.0 };
        assert_eq!((uniform.blocks(5, DType::F32), uniform.blocks(5, DType::F64)), (2, 3));
        let wide = Distribution::Integers { low: 0, range: (1 << 32) + 1 };
        assert_eq!(
            (wide.per_block(DType::I64), Distribution::Integers { low: 0, range: 1 << 32 }.per_block(DType::I64)),
            (2, 4)
        );
        assert_eq!(u53(u32::MAX, u32::MAX), (1 << 53) - 1);
    }
}
