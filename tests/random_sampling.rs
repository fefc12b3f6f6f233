//! Sampling on the device: `multinomial` (with and without replacement, rows of one and of
//! several tiles) against a host reference of its documented Philox mapping and against the
//! probabilities, captured in a CUDA graph, `randperm`, and the typed errors of bad weights.

use cudasem::cuda::{self, philox_block, u53, CUDAGraph, GraphOptions};
use cudasem::{testing, DType, Device, Error, Result, Tensor};

mod random_util;
use random_util::{devices, generator, p2, read, serial};

/// The documented multinomial mapping for one row (sample `k` from block `base + k`; the sums
/// in tiles of 4096 categories, each in the order of a block of 256 threads:
/// `Distribution::Multinomial`'s docs), every tile summed again for each sample.
fn multinomial_ref(p: &[f64], samples: usize, replacement: bool, seed: u64, base: u64) -> Vec<f64> {
    const T: usize = 4096;
    let mut chosen: Vec<usize> = Vec::new();
    for k in 0..samples {
        let weight = |c: usize| if c < p.len() && (replacement || !chosen.contains(&c)) { p[c] } else { 0.0 };
        let cat = |j: usize, t: usize, u: usize| j * T + 1024 * (u / 4) + 4 * t + u % 4;
        // Tile j: each thread's sum, its start in the tile, the tile's total.
        let tile = |j: usize| -> (Vec<f64>, Vec<f64>, f64) {
            let sums: Vec<f64> = (0..256).map(|t| (0..16).fold(0.0, |s, u| s + weight(cat(j, t, u)))).collect();
            let (mut starts, mut b) = (vec![0.0; 256], 0.0);
            for warp in 0..8 {
                let mut v = sums[32 * warp..32 * warp + 32].to_vec();
                for d in [1, 2, 4, 8, 16] {
                    let old = v.clone();
                    (d..32).for_each(|l| v[l] = old[l - d] + old[l]);
                }
                (0..32).for_each(|l| starts[32 * warp + l] = b + if l == 0 { 0.0 } else { v[l - 1] });
                b += v[31];
            }
            (sums, starts, b)
        };
        let tiles = p.len().div_ceil(T);
        let totals: Vec<f64> = (0..tiles).map(|j| tile(j).2).collect();
        let total = totals.iter().fold(0.0, |s, t| s + t);
        assert!(total > 0.0 && total.is_finite(), "the reference takes valid rows");
        let w = philox_block(seed, base + k as u64);
        let x = u53(w[0], w[1]) as f64 * p2(53) * total;
        let last_positive = |j: usize| (j * T..(j + 1) * T).rev().find(|&c| weight(c) > 0.0);
        let (mut start, mut at) = (0.0, None);
        for (j, t) in totals.iter().enumerate() {
            if start + t > x {
                at = Some(j);
                break;
            }
            start += t;
        }
        let pick = match at {
            None => last_positive(totals.iter().rposition(|&t| t > 0.0).unwrap()).unwrap(),
            Some(j) => {
                let (sums, starts, _) = tile(j);
                let hit = (0..256).find(|&t| start + starts[t] + sums[t] > x).and_then(|t| {
                    let e = start + starts[t];
                    let mut run = 0.0;
                    (0..16).map(|u| cat(j, t, u)).find(|&c| {
                        run += weight(c);
                        weight(c) > 0.0 && e + run > x
                    })
                });
                hit.or_else(|| last_positive(j)).unwrap()
            }
        };
        chosen.push(pick);
    }
    chosen.into_iter().map(|c| c as f64).collect()
}

#[test]
fn multinomial_follows_the_reference_and_the_probabilities() -> Result<()> {
    let _serial = serial();
    for device in devices() {
        let g = generator(device, 4242)?;
        // A batch of vocab-like rows, one sample each (a decode step's sampler).
        let (rows, cats) = (8, 1000);
        let logits = Tensor::randn_gen([rows, cats], DType::F32, &g)?;
        let probs = logits.softmax(1)?;
        let p = read(&probs)?;
        let got = read(&probs.multinomial_gen(1, true, &g)?)?;
        let start = rows * cats / 4;
        for r in 0..rows {
            let want = multinomial_ref(&p[r * cats..(r + 1) * cats], 1, true, 4242, (start + r) as u64);
            assert_eq!(got[r..r + 1], want[..], "row {r} on {device}");
        }
        // Without replacement: distinct, never a zero weight, the reference's order.
        let w = Tensor::from_slice(&[0.0f64, 3.0, 1.0, 0.0, 2.0, 5.0, 0.5], [7], device)?;
        let s = read(&w.multinomial_gen(5, false, &g)?)?;
        let want = multinomial_ref(&read(&w)?, 5, false, 4242, (start + rows) as u64);
        assert_eq!(s, want, "without replacement on {device}");
        let mut sorted = s.clone();
        sorted.sort_by(f64::total_cmp);
        sorted.dedup();
        assert_eq!(sorted.len(), 5);
        assert!(s.iter().all(|&c| c != 0.0 && c != 3.0));
        // Long rows (25 tiles of 4096 categories: a block each, the row's last one samples it):
        // one with all its weight past category 81920, one over every category, with and
        // without replacement.
        let cats = 100_000;
        let mut wide: Vec<f32> = (0..2 * cats).map(|i| ((i * 7919 % 1000) as f32 + 0.5) / 1000.0).collect();
        wide[..81_920].iter_mut().for_each(|v| *v = 0.0);
        let wide_t = Tensor::from_slice(&wide, [2, cats], device)?;
        let wp: Vec<f64> = wide.iter().map(|&v| f64::from(v)).collect();
        let mut base = (start + rows) as u64 + 5;
        for replacement in [true, false] {
            let got = read(&wide_t.multinomial_gen(3, replacement, &g)?)?;
            for r in 0..2 {
                let want = multinomial_ref(&wp[r * cats..(r + 1) * cats], 3, replacement, 4242, base + 3 * r as u64);
                assert_eq!(got[3 * r..3 * r + 3], want[..], "long row {r} (replacement {replacement}) on {device}");
            }
            assert!(got[..3].iter().all(|&c| c >= 81_920.0), "row 0's weight is past 81920: {got:?}");
            base += 6;
        }
        // Frequencies: 2^18 samples of [0.1, 0.2, 0.3, 0.4] (unnormalized weights), within 5 σ.
        let n = 1 << 18;
        let f = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], [4], device)?;
        let draws = read(&f.multinomial_gen(n, true, &g)?)?;
        for (c, prob) in [0.1, 0.2, 0.3, 0.4].into_iter().enumerate() {
            let freq = draws.iter().filter(|&&x| x == c as f64).count() as f64 / n as f64;
            assert!((freq - prob).abs() < 5.0 * (prob * (1.0 - prob) / n as f64).sqrt(), "category {c}: {freq}");
        }
    }
    Ok(())
}

/// A captured sampler (`softmax` then `multinomial`, rows of one and of three tiles, with and
/// without replacement) draws on each replay what eager calls from the same generator state
/// draw, and the first replay what the reference draws.
#[test]
fn multinomial_in_a_graph_samples_on_every_replay() -> Result<()> {
    let _serial = serial();
    if !testing::has_devices(1) {
        return Ok(());
    }
    let g = generator(Device::cuda(0), 99)?;
    let short = Tensor::randn_gen([4, 1000], DType::F32, &g)?.mul(3.0)?;
    let long = Tensor::randn_gen([3, 10_000], DType::F32, &g)?.mul(3.0)?;
    let state = g.get_state();
    let mut graph = CUDAGraph::new();
    let (ps, pl, a, b) = cuda::graph(&mut graph, GraphOptions::default(), || {
        let (ps, pl) = (short.softmax(1)?, long.softmax(1)?);
        let a = ps.multinomial_gen(1, true, &g)?;
        let b = pl.multinomial_gen(2, false, &g)?;
        Ok((ps, pl, a, b))
    })?;
    assert_eq!(g.get_state(), state, "a capture does not advance the generator");
    let eager = g.clone_state();
    for replay in 0..3 {
        graph.replay()?;
        let (got_a, got_b) = (read(&a)?, read(&b)?);
        if replay == 0 {
            let (p, q, offset) = (read(&ps)?, read(&pl)?, (4 * 1000 + 3 * 10_000) as u64 / 4);
            for r in 0..4 {
                let want = multinomial_ref(&p[r * 1000..(r + 1) * 1000], 1, true, 99, offset + r as u64);
                assert_eq!(got_a[r..r + 1], want[..], "row {r} of the short rows");
            }
            for r in 0..3 {
                let want = multinomial_ref(&q[r * 10_000..(r + 1) * 10_000], 2, false, 99, offset + 4 + 2 * r as u64);
                assert_eq!(got_b[2 * r..2 * r + 2], want[..], "row {r} of the long rows");
            }
        }
        assert_eq!(got_a, read(&ps.multinomial_gen(1, true, &eager)?)?, "replay {replay}, short rows");
        assert_eq!(got_b, read(&pl.multinomial_gen(2, false, &eager)?)?, "replay {replay}, long rows");
        assert_eq!(g.get_state(), eager.get_state(), "the state after {} replays", replay + 1);
    }
    Ok(())
}

#[test]
fn randperm_is_the_reference_permutation() -> Result<()> {
    let _serial = serial();
    for device in devices() {
        let g = generator(device, 8)?;
        // The indices sorted by their keys (two words of block i / 2), ties by index; sizes on
        // and off a power of two.
        let mut offset = 0u64;
        for (n, dtype) in [(1000, DType::I64), (1024, DType::I32), (3001, DType::F32), (2, DType::I64)] {
            let got = read(&Tensor::randperm_gen(n, dtype, &g)?)?;
            let mut keyed: Vec<(u64, usize)> = (0..n)
                .map(|i| {
                    let w = philox_block(8, offset + (i / 2) as u64);
                    (((w[2 * (i % 2)] as u64) << 32) | w[2 * (i % 2) + 1] as u64, i)
                })
                .collect();
            keyed.sort();
            let want: Vec<f64> = keyed.iter().map(|&(_, i)| i as f64).collect();
            assert_eq!(got, want, "randperm({n}, {dtype}) on {device}");
            let mut sorted = got.clone();
            sorted.sort_by(f64::total_cmp);
            assert_eq!(sorted, (0..n).map(|i| i as f64).collect::<Vec<_>>(), "a permutation");
            offset += n.div_ceil(2) as u64;
        }
        assert_eq!(read(&Tensor::randperm(0, DType::I64, device)?)?, Vec::<f64>::new());
        assert_eq!(read(&Tensor::randperm(1, DType::F32, device)?)?, vec![0.0]);
        assert!(Tensor::randperm(300, DType::U8, device).is_err(), "uint8 cannot hold 299");
    }
    Ok(())
}

#[test]
fn bad_multinomial_weights_are_typed_errors() -> Result<()> {
    let _serial = serial();
    for device in devices() {
        let bad = |w: &[f32], shape: &[usize], n: usize, repl: bool| -> Result<Error> {
            let t = Tensor::from_slice(w, shape.to_vec(), device)?;
            Ok(t.multinomial(n, repl).unwrap_err())
        };
        let msg = |e: Error| e.to_string();
        assert!(msg(bad(&[0.5, -0.1], &[2], 1, true)?).contains("element < 0"));
        assert!(msg(bad(&[0.5, f32::NAN], &[2], 1, true)?).contains("`nan`"));
        assert!(msg(bad(&[0.5, f32::INFINITY], &[2], 1, true)?).contains("`inf`"));
        assert!(msg(bad(&[1.0, 2.0, 0.0, 0.0], &[2, 2], 1, true)?).contains("sum of probabilities <= 0"));
        assert!(msg(bad(&[1.0, 2.0], &[2], 3, false)?).contains("without replacement"));
        assert!(msg(bad(&[1.0, 0.0, 0.0], &[3], 2, false)?).contains("not enough"));
        assert!(msg(bad(&[1.0, 2.0], &[2], 0, true)?).contains("n_sample <= 0"));
        assert!(msg(bad(&[1.0; 8], &[2, 2, 2], 1, true)?).contains("1 or 2 dim"));
        let ints = Tensor::from_slice(&[1i64, 2], [2], device)?;
        assert!(matches!(ints.multinomial(1, true), Err(Error::UnsupportedDType { .. })));
        // Rows of several tiles (4096 categories each): the bad weight, the zero row or the
        // missing categories in a later tile of a later row; a zero row before a bad weight
        // still reports the bad weight (PyTorch checks every element first).
        let (rows, cats) = (3, 10_000);
        let many = |at: &[(usize, f32)], zero_row: Option<usize>| -> Vec<f32> {
            let mut w: Vec<f32> = (0..rows * cats).map(|i| ((i * 37 % 101) as f32 + 1.0) / 101.0).collect();
            if let Some(r) = zero_row {
                w[r * cats..(r + 1) * cats].iter_mut().for_each(|v| *v = 0.0);
            }
            at.iter().for_each(|&(i, v)| w[i] = v);
            w
        };
        let shape = [rows, cats];
        assert!(msg(bad(&many(&[(2 * cats + 9000, f32::NAN)], None), &shape, 1, true)?).contains("`nan`"));
        assert!(msg(bad(&many(&[(cats + 8200, -1.0)], Some(0)), &shape, 1, true)?).contains("element < 0"));
        assert!(msg(bad(&many(&[], Some(2)), &shape, 1, true)?).contains("sum of probabilities <= 0"));
        let mut sparse = vec![0.0f32; rows * cats];
        (0..rows).for_each(|r| sparse[r * cats + 5000 + r] = 1.0);
        sparse[9999] = 2.0;
        assert!(msg(bad(&sparse, &shape, 2, false)?).contains("not enough"));
        assert_eq!(read(&Tensor::from_slice(&sparse[..cats], [cats], device)?.multinomial(2, false)?)?.len(), 2);
        let huge = Tensor::ones([1], DType::F32, device)?.expand([(1 << 24) + 1])?;
        assert!(msg(huge.multinomial(1, true).unwrap_err()).contains("cannot exceed 2^24"));
        // Usable afterwards.
        let ok = Tensor::from_slice(&[0.0f32, 1.0], [2], device)?.multinomial(4, true)?;
        assert_eq!(read(&ok)?, vec![1.0; 4]);
    }
    Ok(())
}
