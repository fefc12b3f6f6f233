//! The CPU kernel of [`RandomOp`]: the Philox stream mapping of `kernel/random.rs`, element by
//! element, in parallel chunks of whole blocks (the numbers do not depend on the chunks). The
//! CUDA kernel (`driver/cuda/kernels/cu/random.cu`) computes the same formulas with the same
//! correctly rounded `f64` operations (and the `f32` normals with `box_muller.rs`'s `f32` ones).

use super::elem::{encode, gather, round_via};
use crate::dtype::DType;
use crate::kernel::box_muller::box_muller_f32;
use crate::kernel::random::{
    multinomial_status, philox_block, u53, uniform_bits, Distribution, PhiloxSource, RandomOp, MULTINOMIAL_TILE,
};
use crate::kernel::BufferView;
use rayon::prelude::*;

/// Elements one task makes (a multiple of every block's element count).
const CHUNK: usize = 1 << 16;

/// `2^-k`, exactly.
fn pow2_neg(k: u32) -> f64 {
    f64::from_bits((1023 - u64::from(k)) << 52)
}

/// `(seed, first block)` of the op: given, or read from its slot's bytes.
fn stream_of(op: &RandomOp, slot: Option<&[u8]>) -> (u64, u64) {
    match (&op.philox, slot) {
        (PhiloxSource::Value { seed, offset }, _) => (*seed, *offset),
        (PhiloxSource::Slot { offset, .. }, Some(b)) if b.len() >= 16 => {
            let word = |k: usize| u64::from_ne_bytes(b[8 * k..8 * k + 8].try_into().unwrap_or([0; 8]));
            (word(0), word(1).wrapping_add(*offset))
        }
        (PhiloxSource::Slot { offset, .. }, _) => (0, *offset),
    }
}

/// `v` as the output dtype would hold it.
fn rounded(v: f64, dtype: DType) -> f64 {
    let mut one = [v];
    round_via(&mut one, dtype);
    one[0]
}

/// Element `j` of a block of words `w` (`e` elements a block) of a float-valued distribution;
/// `x` is dropout's input element.
fn float_value(dist: &Distribution, dtype: DType, w: [u32; 4], j: usize, e: usize, x: f64) -> f64 {
    let wide = |j: usize| u53(w[2 * j], w[2 * j + 1]);
    match *dist {
        Distribution::Uniform { low, high } => {
            let u = if e == 2 {
                wide(j) as f64 * pow2_neg(53)
            } else {
                let b = uniform_bits(dtype);
                f64::from(w[j] >> (32 - b)) * pow2_neg(b)
            };
            let v = low + u * (high - low);
            if rounded(v, dtype) >= high {
                low
            } else {
                v
            }
        }
        Distribution::Normal { mean, std } if e == 4 => {
            let (c, s) = box_muller_f32(w[j & 2], w[(j & 2) + 1]);
            let z = if j.is_multiple_of(2) { c } else { s };
            f64::from(z.mul_add(std as f32, mean as f32))
        }
        Distribution::Normal { mean, std } => {
            let u1 = (wide(0) + 1) as f64 * pow2_neg(53);
            let u2 = wide(1) as f64 * pow2_neg(53);
            let r = (-2.0 * u1.ln()).sqrt();
            let theta = std::f64::consts::TAU * u2;
            let z = if j == 0 { r * theta.cos() } else { r * theta.sin() };
            mean + std * z
        }
        Distribution::Exponential { lambda } => {
            let u = (wide(j) + 1) as f64 * pow2_neg(53);
            (0.0 - u.ln()) / lambda
        }
        Distribution::Bernoulli { p } => f64::from(u8::from(f64::from(w[j]) * pow2_neg(32) < p)),
        Distribution::Dropout { p } => {
            let q = 1.0 - p;
            let scale = if q > 0.0 { 1.0 / q } else { 0.0 };
            let keep = f64::from(w[j]) * pow2_neg(32) < q;
            if dtype == DType::F64 {
                x * if keep { scale } else { 0.0 }
            } else {
                // f32 math below f64 (the input is exact in f32), as the CUDA kernel.
                f64::from(x as f32 * if keep { scale as f32 } else { 0.0 })
            }
        }
        Distribution::Integers { .. } | Distribution::Multinomial { .. } | Distribution::Permutation => f64::NAN,
    }
}

/// Element `j` of a block of words `w` of [`Distribution::Integers`].
fn int_value(low: i64, range: u64, w: [u32; 4], j: usize, e: usize) -> i64 {
    let r =
        if e == 4 { u64::from(w[j]) % range } else { ((u64::from(w[2 * j]) << 32) | u64::from(w[2 * j + 1])) % range };
    low.wrapping_add(r as i64)
}

/// Elements `start..start + len` made block by block: `f(words, element in block, index)`.
fn blocks_of<T>(
    seed: u64,
    first: u64,
    e: usize,
    start: usize,
    len: usize,
    mut f: impl FnMut([u32; 4], usize, usize) -> T,
) -> Vec<T> {
    let mut out = Vec::with_capacity(len);
    let mut i = start;
    while i < start + len {
        let w = philox_block(seed, first.wrapping_add((i / e) as u64));
        for j in 0..e.min(start + len - i) {
            out.push(f(w, j, i + j));
        }
        i += e;
    }
    out
}

/// Threads of the CUDA kernel's block per multinomial tile, of its warps, and the categories
/// of a thread (groups of four consecutive ones, a group every 1,024).
const ROW_THREADS: usize = 256;
const LANES: usize = 32;
const PER_THREAD: usize = MULTINOMIAL_TILE / ROW_THREADS;

/// Category `u` (of [`PER_THREAD`]) of thread `t` of a tile, from the tile's start.
fn owned(t: usize, u: usize) -> usize {
    1024 * (u / 4) + 4 * t + u % 4
}

/// A tile's sums in the kernel's order: each thread's `sₜ`, its start in the tile
/// (`B_w + the scan of lane l − 1`) and the tile's total. (`Distribution::Multinomial`'s docs.)
struct TileSums {
    sums: Vec<f64>,
    starts: Vec<f64>,
    total: f64,
}

/// `len`: the categories of the row past the tile's start; the threads whose categories all
/// lie past the row sum to `+0` and start at the total of the warps before them (adding `+0`
/// changes no sum), so only the warps with categories are scanned.
fn tile_sums(weight: &impl Fn(usize) -> f64, lo: usize, len: usize) -> TileSums {
    let active = if len >= 1024 { ROW_THREADS } else { len.div_ceil(4) };
    let mut sums = vec![0.0f64; ROW_THREADS];
    for (t, s) in sums.iter_mut().enumerate().take(active) {
        *s = (0..PER_THREAD).map(|u| owned(t, u)).take_while(|&o| o < len).fold(0.0, |s, o| s + weight(lo + o));
    }
    let mut starts = vec![0.0f64; ROW_THREADS];
    let mut base = 0.0f64;
    for (warp, lanes) in sums.chunks_exact(LANES).enumerate() {
        if warp * LANES >= active {
            starts[warp * LANES..].iter_mut().for_each(|s| *s = base);
            break;
        }
        let mut v = [0.0f64; LANES];
        v.copy_from_slice(lanes);
        for d in [1, 2, 4, 8, 16] {
            let old = v;
            for l in d..LANES {
                v[l] = old[l - d] + old[l];
            }
        }
        for l in 0..LANES {
            starts[warp * LANES + l] = base + if l == 0 { 0.0 } else { v[l - 1] };
        }
        base += v[LANES - 1];
    }
    TileSums { sums, starts, total: base }
}

/// The last category of positive weight of the tile at `lo` (`None`: there is none).
fn last_positive(weight: &impl Fn(usize) -> f64, lo: usize, len: usize) -> Option<usize> {
    (lo..lo + len.min(MULTINOMIAL_TILE)).rev().find(|&c| weight(c) > 0.0)
}

/// The pick of `x` in the tile at `lo` (`len` categories of the row from there) whose sums start
/// at `p` (`Distribution::Multinomial`'s docs): the lowest thread whose end exceeds `x`, its
/// first category of positive weight whose running sum does; else the tile's last category of
/// positive weight.
fn pick_in_tile(weight: &impl Fn(usize) -> f64, lo: usize, len: usize, p: f64, x: f64) -> usize {
    let ts = tile_sums(weight, lo, len);
    let hit = (0..ROW_THREADS).find(|&t| p + ts.starts[t] + ts.sums[t] > x).and_then(|t| {
        let e = p + ts.starts[t];
        let mut run = 0.0f64;
        (0..PER_THREAD).map(|u| owned(t, u)).take_while(|&o| o < len).map(|o| lo + o).find(|&c| {
            run += weight(c);
            weight(c) > 0.0 && e + run > x
        })
    });
    hit.or_else(|| last_positive(weight, lo, len)).unwrap_or(0)
}

/// The status word of a row ([`multinomial_status`]).
pub(crate) fn multinomial_check(p: &[f64], samples: usize, replacement: bool) -> i64 {
    let mut status = 0;
    if p.iter().any(|&w| !(w >= 0.0 && w.is_finite())) {
        status |= multinomial_status::BAD;
    }
    let positive = p.iter().filter(|&&w| w > 0.0).count();
    if positive == 0 {
        status |= multinomial_status::ZERO_SUM;
    }
    if !replacement && positive < samples {
        status |= multinomial_status::TOO_FEW;
    }
    status
}

/// One row's samples of [`Distribution::Multinomial`] (`block(k)`: sample `k`'s words), in the
/// order of `kernel/random.rs`'s docs (tiles of 4,096 categories, each a block of 256 threads).
pub(crate) fn multinomial_row(
    p: &[f64],
    samples: usize,
    replacement: bool,
    block: impl Fn(usize) -> [u32; 4],
) -> Vec<i64> {
    const T: usize = MULTINOMIAL_TILE;
    let n = p.len();
    let mut chosen: Vec<usize> = Vec::with_capacity(samples);
    let mut taken = vec![false; if replacement { 0 } else { n }];
    let mut totals: Vec<f64> = Vec::new();
    for k in 0..samples {
        let weight = |c: usize| if !replacement && taken[c] { 0.0 } else { p[c] };
        match chosen.last() {
            // Without replacement only the tile of the last pick changes.
            Some(&c) if !replacement => totals[c / T] = tile_sums(&weight, c / T * T, n - c / T * T).total,
            Some(_) => {}
            None => totals = (0..n.div_ceil(T)).map(|j| tile_sums(&weight, j * T, n - j * T).total).collect(),
        }
        let total = totals.iter().fold(0.0f64, |s, &t| s + t);
        let pick = if !(total > 0.0 && total.is_finite()) {
            (0..n).find(|&c| replacement || !taken[c]).unwrap_or(0)
        } else {
            let w = block(k);
            let x = u53(w[0], w[1]) as f64 * pow2_neg(53) * total;
            let mut start = 0.0f64;
            let mut found = None;
            for (j, &t) in totals.iter().enumerate() {
                if start + t > x {
                    found = Some((j, start));
                    break;
                }
                start += t;
            }
            match found {
                Some((j, start)) => pick_in_tile(&weight, j * T, n - j * T, start, x),
                None => {
                    let last = totals.iter().rposition(|&t| t > 0.0).unwrap_or(0);
                    last_positive(&weight, last * T, n - last * T).unwrap_or(0)
                }
            }
        };
        if !replacement {
            taken[pick] = true;
        }
        chosen.push(pick);
    }
    chosen.into_iter().map(|c| c as i64).collect()
}

/// [`Distribution::Permutation`] of `0..n`: the indices sorted by `(key, index)`, element `i`'s
/// key the 64-bit number of words `2·(i % 2)` and `2·(i % 2) + 1` of block `first + i / 2`.
fn permutation(n: usize, seed: u64, first: u64) -> Vec<i64> {
    let mut keyed: Vec<(u64, i64)> = (0..n)
        .into_par_iter()
        .map(|i| {
            let w = philox_block(seed, first.wrapping_add((i / 2) as u64));
            let j = 2 * (i % 2);
            ((u64::from(w[j]) << 32) | u64::from(w[j + 1]), i as i64)
        })
        .collect();
    keyed.par_sort_unstable();
    keyed.into_iter().map(|(_, i)| i).collect()
}

/// The ops that are not elementwise: multinomial rows (in parallel) and a permutation.
fn sequential(op: &RandomOp, seed: u64, first: u64, src: Option<(&[u8], &BufferView)>, out: &mut [u8]) {
    let dtype = op.dst.dtype;
    let values: Vec<i64> = match op.dist {
        Distribution::Multinomial { samples, replacement } => {
            let Some((bytes, view)) = src else { return };
            let p = gather::<f64>(bytes, view);
            let cats = view.shape[1];
            let rows: Vec<Vec<i64>> = p
                .par_chunks(cats)
                .enumerate()
                .map(|(r, row)| {
                    let base = first.wrapping_add((r * samples) as u64);
                    multinomial_row(row, samples, replacement, |k| philox_block(seed, base.wrapping_add(k as u64)))
                })
                .collect();
            let status = p.par_chunks(cats).map(|row| multinomial_check(row, samples, replacement));
            let status: Vec<i64> = status.collect();
            rows.concat().into_iter().chain(status).collect()
        }
        _ => permutation(op.dst.numel(), seed, first),
    };
    out.copy_from_slice(&encode(&values, dtype));
}

/// Runs `op` into `out` (the output's dense bytes); `src` and `slot` are its inputs' bytes.
pub(super) fn random(op: &RandomOp, src: Option<(&[u8], &BufferView)>, slot: Option<&[u8]>, out: &mut [u8]) {
    let (seed, first) = stream_of(op, slot);
    if matches!(op.dist, Distribution::Multinomial { .. } | Distribution::Permutation) {
        return sequential(op, seed, first, src, out);
    }
    let dtype = op.dst.dtype;
    let (size, e) = (dtype.size(), op.dist.per_block(dtype));
    let x: Vec<f64> = src.map(|(bytes, view)| gather::<f64>(bytes, view)).unwrap_or_default();
    out.par_chunks_mut(CHUNK * size).enumerate().for_each(|(c, bytes)| {
        let (start, len) = (c * CHUNK, bytes.len() / size);
        let encoded = match op.dist {
            Distribution::Integers { low, range } => {
                encode(&blocks_of(seed, first, e, start, len, |w, j, _| int_value(low, range, w, j, e)), dtype)
            }
            dist => {
                let v = blocks_of(seed, first, e, start, len, |w, j, i| {
                    float_value(&dist, dtype, w, j, e, x.get(i).copied().unwrap_or(0.0))
                });
                encode(&v, dtype)
            }
        };
        bytes.copy_from_slice(&encoded);
    });
}
