//! Random draws ([`RandomOp`]) on the CUDA driver: one module per (distribution, dtype, elements
//! per block), made from `cu/random_head.cu` and `cu/random.cu`, whose kernel `rnd` is the CPU
//! kernel's stream mapping (`src/kernels/cpu/random.rs`) with the same correctly rounded `f64`
//! operations. A thread makes a Philox block's elements and stores them at once (one 16-byte
//! store for `f32`, `f64` and the integers when the output is aligned); the grid is capped at
//! [`Ctx::grid`]'s waves and strides over the rest. A multinomial takes a block of 256 threads per
//! tile of 4,096 categories of a row (the row's last block to finish samples it), a permutation
//! a launch per step of a bitonic sort of random keys.

use super::ctx::{addr, Ctx, PARTIALS};
use super::table::Func;
use super::vocab::{Entry, KernelId, ModuleKey, RandKind};
use crate::error::Result;
use crate::kernel::random::MULTINOMIAL_TILE;
use crate::kernel::{BufferView, Distribution, PhiloxSource, RandomOp};

/// Parameters of `rnd` (`RndP` in `cu/random.cu`).
#[repr(C)]
struct RndP {
    dst: u64,
    src: u64,
    slot: u64,
    n: i64,
    seed: u64,
    offset: u64,
    a: f64,
    b: f64,
    low: i64,
    range: u64,
    vec: i64,
    /// The seed's Philox round keys (`philox_keys` in `cu/random.cu`), for a launch given its seed.
    k0: [u32; 10],
    k1: [u32; 10],
}

/// The round keys of `seed`: the key before each of Philox's ten rounds.
fn round_keys(seed: u64) -> ([u32; 10], [u32; 10]) {
    let (mut k0, mut k1) = ([0u32; 10], [0u32; 10]);
    (k0[0], k1[0]) = (seed as u32, (seed >> 32) as u32);
    for r in 1..10 {
        k0[r] = k0[r - 1].wrapping_add(0x9E37_79B9);
        k1[r] = k1[r - 1].wrapping_add(0xBB67_AE85);
    }
    (k0, k1)
}

/// The words `w` with `w · 2^−32 < p` (bernoulli's and dropout's test, `p` in `[0, 1]`) are those
/// below this threshold: `w · 2^−32` and `p · 2^32` are exact, and an integer is below a real `t`
/// exactly when it is below `⌈t⌉` — so the kernel compares integers (`range`), bit for bit the
/// CPU kernel's `f64` test.
fn below(p: f64) -> u64 {
    (p * 4_294_967_296.0).ceil() as u64
}

/// The module kind and the parameters `a`, `b`, `low`, `range` of a distribution (computed here,
/// in `f64`, exactly as the CPU kernel computes them).
fn kind_of(dist: &Distribution) -> (RandKind, f64, f64, i64, u64) {
    match *dist {
        Distribution::Uniform { low, high } => (RandKind::Uniform, low, high, 0, 0),
        Distribution::Normal { mean, std } => (RandKind::Normal, mean, std, 0, 0),
        Distribution::Exponential { lambda } => (RandKind::Exponential, lambda, 0.0, 0, 0),
        Distribution::Bernoulli { p } => (RandKind::Bernoulli, p, 0.0, 0, below(p)),
        Distribution::Dropout { p } => {
            let q = 1.0 - p;
            (RandKind::Dropout, q, if q > 0.0 { 1.0 / q } else { 0.0 }, 0, below(q))
        }
        Distribution::Integers { low, range } => (RandKind::Integers, 0.0, 0.0, low, range),
        Distribution::Multinomial { samples, .. } => (RandKind::Multinomial, 0.0, 0.0, 0, samples as u64),
        Distribution::Permutation => (RandKind::Permutation, 0.0, 0.0, 0, 0),
    }
}

/// Queues `op` (validated, non-empty).
pub(in crate::driver::cuda) fn random(c: &Ctx, op: &RandomOp) -> Result<()> {
    let dtype = op.dst.dtype;
    let e = op.dist.per_block(dtype);
    let (dist, a, b, low, range) = kind_of(&op.dist);
    let (seed, offset, slot) = match &op.philox {
        PhiloxSource::Value { seed, offset } => (*seed, *offset, 0),
        PhiloxSource::Slot { slot, offset } => (0, *offset, addr(slot)),
    };
    if let (RandKind::Multinomial, Some(src)) = (dist, &op.src) {
        let replacement = matches!(op.dist, Distribution::Multinomial { replacement: true, .. });
        return multinomial(c, op, src, range, replacement, (seed, offset, slot));
    }
    let n = op.dst.numel();
    let (k0, k1) = round_keys(seed);
    let (dst, src) = (addr(&op.dst), op.src.as_ref().map_or(0, addr));
    let pack = (e * dtype.size()) as u64;
    let mut p = RndP {
        dst,
        src,
        slot,
        n: n as i64,
        seed,
        offset,
        a,
        b,
        low,
        range,
        vec: (dst.is_multiple_of(pack) && src.is_multiple_of(pack)) as i64,
        k0,
        k1,
    };
    let f = c.kernel(KernelId { module: ModuleKey::Random { dist, dtype, e: e as u8 }, entry: Entry::Random })?;
    if dist == RandKind::Permutation {
        return permutation(c, f, n, &mut p);
    }
    // Dropout and the normals of `f32`, `f16`, `bf16` (the f32 Box–Muller): a few passes of a
    // grid-stride loop, so a thread's setup serves several blocks.
    let per_thread = match dist {
        RandKind::Dropout => BLOCKS_PER_THREAD,
        RandKind::Normal if e == 4 => BLOCKS_PER_THREAD,
        _ => 1,
    };
    c.run(f, c.grid(f, n.div_ceil(e).div_ceil(per_thread) as u64), &mut p)
}

/// Philox blocks a thread of a dropout or of an `f32`, `f16` or `bf16` normal draw makes (a
/// grid-stride loop: the kernel's setup, about a fifth of a normal block's instructions, is paid
/// once per thread; any grid is correct).
const BLOCKS_PER_THREAD: usize = 4;

/// Parameters of the multinomial `rnd` (`MulP` in `cu/random.cu`).
#[repr(C)]
struct MulP {
    dst: u64,
    status: u64,
    src: u64,
    slot: u64,
    part: u64,
    count: u64,
    rows: i64,
    cats: i64,
    samples: i64,
    tiles: i64,
    row0: i64,
    seed: u64,
    offset: u64,
    repl: i64,
}

/// A multinomial: a block per (row, tile of [`MULTINOMIAL_TILE`] categories), in launches of as
/// many rows as the stream's scratch holds the tiles' partials and counters of (`cu/random.cu`;
/// a row of one tile needs none).
fn multinomial(
    c: &Ctx,
    op: &RandomOp,
    src: &BufferView,
    samples: u64,
    replacement: bool,
    (seed, offset, slot): (u64, u64, u64),
) -> Result<()> {
    let (rows, cats) = (src.shape[0], src.shape[1]);
    let tiles = cats.div_ceil(MULTINOMIAL_TILE);
    let (part, count) = if tiles > 1 { c.reduce_scratch()? } else { (0, 0) };
    let per_launch = if tiles > 1 { (PARTIALS / tiles).max(1) } else { PARTIALS };
    let key = ModuleKey::Random { dist: RandKind::Multinomial, dtype: src.dtype, e: 1 };
    let f = c.kernel(KernelId { module: key, entry: Entry::Random })?;
    let (dst, weights, esize) = (addr(&op.dst), addr(src), src.dtype.size() as u64);
    let status = dst + (rows as u64 * samples) * 8;
    let mut row0 = 0;
    while row0 < rows {
        let n = per_launch.min(rows - row0);
        let mut p = MulP {
            dst: dst + row0 as u64 * samples * 8,
            status: status + row0 as u64 * 8,
            src: weights + (row0 * cats) as u64 * esize,
            slot,
            part,
            count,
            rows: n as i64,
            cats: cats as i64,
            samples: samples as i64,
            tiles: tiles as i64,
            row0: row0 as i64,
            seed,
            offset,
            repl: i64::from(replacement),
        };
        c.run(f, (n * tiles) as u32, &mut p)?;
        row0 += n;
    }
    Ok(())
}

/// A permutation: the identity, then a launch per step of the bitonic network over the next
/// power of two (`cu/random.cu`).
fn permutation(c: &Ctx, f: Func, n: usize, p: &mut RndP) -> Result<()> {
    let grid = c.grid(f, n as u64);
    p.vec = 0;
    c.run(f, grid, p)?;
    p.vec = 1;
    let mut k = 2;
    while k <= n.next_power_of_two() {
        let mut j = k / 2;
        while j >= 1 {
            (p.low, p.range) = (k as i64, j as u64);
            c.run(f, grid, p)?;
            j /= 2;
        }
        k *= 2;
    }
    Ok(())
}

/// Every random module the tensor layer can ask for.
#[cfg(test)]
pub(in crate::driver::cuda) fn all_random_modules() -> Vec<ModuleKey> {
    use crate::dtype::DType;
    let mut v = Vec::new();
    for dtype in DType::ALL {
        let mut push = |dist, e| v.push(ModuleKey::Random { dist, dtype, e });
        if dtype.is_float() {
            push(RandKind::Uniform, if dtype == DType::F64 { 2 } else { 4 });
            push(RandKind::Normal, if dtype == DType::F64 { 2 } else { 4 });
            push(RandKind::Exponential, 2);
            push(RandKind::Dropout, 4);
        }
        if dtype.is_float() {
            push(RandKind::Multinomial, 1);
        }
        push(RandKind::Permutation, 2);
        push(RandKind::Bernoulli, 4);
        push(RandKind::Integers, 4);
        push(RandKind::Integers, 2);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::{all_random_modules, below};

    /// The kernel's integer test of bernoulli and dropout is the CPU kernel's `f64` test, for
    /// the words around the threshold and a spread of others, over probabilities on and off the
    /// words' grid (0, 1, tiny, subnormal, just below 1).
    #[test]
    fn the_integer_threshold_is_the_f64_test() {
        let probabilities =
            [0.0, 1.0, 0.5, 0.1, 0.9, 1.0 - f64::EPSILON / 2.0, 1e-300, 5e-324, 3.0 / 4_294_967_296.0, 0.3];
        for p in probabilities {
            let t = below(p);
            let near = (t.saturating_sub(3)..(t + 3).min(1 << 32)).map(|w| w as u32);
            for w in near.chain((0..=u32::MAX).step_by(1_000_003)).chain([0, u32::MAX]) {
                let f64_test = f64::from(w) * 2f64.powi(-32) < p;
                assert_eq!(u64::from(w) < t, f64_test, "p {p}, w {w}");
            }
        }
    }
    use crate::driver::cuda::kernels::nvrtc::{image, nvrtc_present, resource_report, Program};

    /// No random kernel spills (for sm_90): the multinomial's batches of loads and the f32
    /// Box–Muller stay in registers.
    #[test]
    fn no_random_module_spills() {
        if !nvrtc_present() {
            crate::testing::skip(1, "libnvrtc not found");
            return;
        }
        for m in all_random_modules() {
            let (_, log) = resource_report(&m.source(), 9, 0).expect("compiles");
            let spills: Vec<&str> = log.lines().filter(|l| l.contains("bytes spill stores")).collect();
            assert!(!spills.is_empty(), "{m:?}: no resource report in {log}");
            for l in spills {
                assert!(l.contains(" 0 bytes spill stores"), "{m:?}: {l}");
            }
        }
    }

    /// Every random module compiles (for sm_90), and its kernel is the one the launcher names.
    #[test]
    fn every_random_module_compiles() {
        if !nvrtc_present() {
            crate::testing::skip(1, "libnvrtc not found");
            return;
        }
        for m in all_random_modules() {
            let src = m.source();
            let bound = ["void __launch_bounds__(256) rnd(", "void __launch_bounds__(256, MUL_MIN_BLOCKS) rnd("];
            assert!(bound.iter().any(|b| src.contains(b)), "{m:?}");
            if let Err(e) = image(&Program::tensor(&src), 9, 0, None) {
                panic!("{m:?} does not compile: {e}\n{src}");
            }
        }
    }
}
