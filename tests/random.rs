//! Random numbers (`torch.cuda`'s generators and the random ops): every draw against a host
//! reference of the documented Philox stream mapping (exact for uniforms, integers, bernoulli
//! and dropout; within the stated ulp bound where log / sin / cos enter), so the same test run
//! on a GPU (`CUDASEM_DRIVER=cuda`) proves the GPU gives the simulated machine's numbers;
//! statistics (moments, Kolmogorov–Smirnov on 2^21 draws, rates); seeding and state
//! round-trips; generators per device and per thread; CUDA-graph capture and replay; and the
//! typed errors of bad arguments, with the runtime usable after. Sampling (`multinomial`,
//! `randperm`): `random_sampling.rs`.

use cudasem::cuda::{self, philox4x32_10, philox_block, u53, CUDAGraph, GraphOptions};
use cudasem::{testing, DType, Device, Error, Result, Tensor};
use half::{bf16, f16};
use std::sync::Mutex;

mod random_util;
use random_util::{devices, generator, p2, read, serial};

static DEFAULTS: Mutex<()> = Mutex::new(());

fn defaults() -> std::sync::MutexGuard<'static, ()> {
    DEFAULTS.lock().unwrap_or_else(|e| e.into_inner())
}

const FLOATS: [DType; 4] = [DType::F32, DType::BF16, DType::F16, DType::F64];

/// `v` rounded into `dtype` (one rounding, as the kernels store).
fn round(v: f64, dtype: DType) -> f64 {
    match dtype {
        DType::F32 => v as f32 as f64,
        DType::F16 => f16::from_f64(v).to_f64(),
        DType::BF16 => bf16::from_f64(v).to_f64(),
        _ => v,
    }
}

/// Ulps between two values of `dtype` (distance of their ordered bit patterns).
fn ulps(a: f64, b: f64, dtype: DType) -> u64 {
    let (x, y, width) = match dtype {
        DType::F32 => (u64::from((a as f32).to_bits()), u64::from((b as f32).to_bits()), 32),
        DType::F16 => (u64::from(f16::from_f64(a).to_bits()), u64::from(f16::from_f64(b).to_bits()), 16),
        DType::BF16 => (u64::from(bf16::from_f64(a).to_bits()), u64::from(bf16::from_f64(b).to_bits()), 16),
        _ => (a.to_bits(), b.to_bits(), 64),
    };
    let key = |v: u64| {
        let mag = i128::from(v & ((1u64 << (width - 1)) - 1));
        if (v >> (width - 1)) & 1 == 1 {
            -mag
        } else {
            mag
        }
    };
    (key(x) - key(y)).unsigned_abs() as u64
}

/// The reference stream: element `i` of a draw from `(seed, offset)` with `e` elements a block,
/// `f(words, j)` making element `j` of a block.
fn reference(seed: u64, offset: u64, n: usize, e: usize, f: impl Fn([u32; 4], usize) -> f64) -> Vec<f64> {
    (0..n).map(|i| f(philox_block(seed, offset + (i / e) as u64), i % e)).collect()
}

fn uniform_ref(seed: u64, offset: u64, n: usize, dtype: DType, low: f64, high: f64) -> Vec<f64> {
    let bits = match dtype {
        DType::F16 => 11,
        DType::BF16 => 8,
        _ => 24,
    };
    let e = if dtype == DType::F64 { 2 } else { 4 };
    reference(seed, offset, n, e, |w, j| {
        let u = if e == 2 {
            u53(w[2 * j], w[2 * j + 1]) as f64 * p2(53)
        } else {
            f64::from(w[j] >> (32 - bits)) * p2(bits)
        };
        let v = round(low + u * (high - low), dtype);
        if v >= high {
            round(low, dtype)
        } else {
            v
        }
    })
}

/// The normals: `f32`, `f16` and `bf16` from [`cuda::box_muller_f32`] (four a block, exact);
/// `f64` from the `f64` formula (two a block).
fn normal_ref(seed: u64, offset: u64, n: usize, dtype: DType) -> Vec<f64> {
    if dtype != DType::F64 {
        return reference(seed, offset, n, 4, |w, j| {
            let (c, s) = cuda::box_muller_f32(w[j & 2], w[(j & 2) + 1]);
            round(f64::from(if j % 2 == 0 { c } else { s }), dtype)
        });
    }
    reference(seed, offset, n, 2, |w, j| {
        let u1 = (u53(w[0], w[1]) + 1) as f64 * p2(53);
        let u2 = u53(w[2], w[3]) as f64 * p2(53);
        let (r, th) = ((-2.0 * u1.ln()).sqrt(), std::f64::consts::TAU * u2);
        round(if j == 0 { r * th.cos() } else { r * th.sin() }, dtype)
    })
}

/// The bound of docs: exact below `f64` (the `f32` Box–Muller's own operations),
/// `TRANSCENDENTAL_ULP_F64` of `f64`.
fn bound(dtype: DType) -> u64 {
    if dtype == DType::F64 {
        cuda::TRANSCENDENTAL_ULP_F64
    } else {
        0
    }
}

/// The `f32` Box–Muller pairs are within a few `f32` ulp of the `f64` formula on the same words
/// (the `f32` `u1` and angle, exactly as the kernel forms them).
#[test]
fn f32_box_muller_is_within_ulps_of_the_f64_formula() {
    let mut worst = 0.0f64;
    for b in 0..1u64 << 18 {
        let w = philox_block(7, b);
        let (c, s) = cuda::box_muller_f32(w[0], w[1]);
        let u1 = f64::from((w[0] as f32).mul_add(2f32.powi(-32), 2f32.powi(-33)));
        let th = std::f64::consts::TAU * f64::from(w[1] >> 8) * p2(24);
        let r = (-2.0 * u1.ln()).sqrt();
        for (got, exact) in [(c, r * th.cos()), (s, r * th.sin())] {
            // Error in ulp of the result, or of ρ where the result is near a zero of cos / sin.
            let scale = exact.abs().max(r * 2f64.powi(-4)).max(f64::from(f32::MIN_POSITIVE));
            let ulp = f64::from(f32::EPSILON) * 2f64.powi(scale.log2().floor() as i32);
            worst = worst.max((f64::from(got) - exact).abs() / ulp);
        }
    }
    assert!(worst <= 4.0, "the f32 Box–Muller is {worst} ulp from the f64 formula");
}

#[test]
fn philox_matches_random123s_known_answers() {
    let _serial = serial();
    assert_eq!(philox4x32_10([0; 4], [0; 2]), [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]);
    assert_eq!(philox4x32_10([u32::MAX; 4], [u32::MAX; 2]), [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]);
    assert_eq!(
        philox4x32_10([0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344], [0xa4093822, 0x299f31d0]),
        [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
    );
    assert_eq!(
        philox_block(0x299f31d0_a4093822, 0x85a308d3_243f6a88),
        philox4x32_10([0x243f6a88, 0x85a308d3, 0, 0], [0xa4093822, 0x299f31d0])
    );
}

#[test]
fn uniform_draws_are_the_reference_stream_bit_for_bit() -> Result<()> {
    let _serial = serial();
    for device in devices() {
        for dtype in FLOATS {
            let g = generator(device, 0x5eed_0001)?;
            let n = 1003; // not a multiple of a block
            let a = Tensor::rand_gen([n], dtype, &g)?;
            assert_eq!(read(&a)?, uniform_ref(0x5eed_0001, 0, n, dtype, 0.0, 1.0), "rand {dtype} on {device}");
            // The next draw starts at the next unused block.
            let first = n.div_ceil(if dtype == DType::F64 { 2 } else { 4 }) as u64;
            let b = Tensor::empty([7, 9], dtype, device)?;
            b.uniform_gen_(-3.0, 5.5, &g)?;
            assert_eq!(
                read(&b)?,
                uniform_ref(0x5eed_0001, first, 63, dtype, -3.0, 5.5),
                "uniform_ {dtype} on {device}"
            );
            assert!(read(&b)?.iter().all(|&x| (-3.0..5.5).contains(&x)));
        }
    }
    Ok(())
}

#[test]
fn normal_draws_are_the_reference_stream_within_the_stated_ulps() -> Result<()> {
    let _serial = serial();
    for device in devices() {
        for dtype in FLOATS {
            let g = generator(device, 0xabcd)?;
            let n = 4097;
            let got = read(&Tensor::randn_gen([n], dtype, &g)?)?;
            let want = normal_ref(0xabcd, 0, n, dtype);
            let worst = got.iter().zip(&want).map(|(&a, &b)| ulps(a, b, dtype)).max().unwrap_or(0);
            assert!(worst <= bound(dtype), "randn {dtype} on {device}: {worst} ulp from the reference");
            // normal_(mean, std) is mean + std · z, from the next blocks.
            let t = Tensor::empty([100], DType::F64, device)?;
            t.normal_gen_(2.0, 0.5, &g)?;
            let z = normal_ref(0xabcd, n.div_ceil(if dtype == DType::F64 { 2 } else { 4 }) as u64, 100, DType::F64);
            for (x, z) in read(&t)?.iter().zip(&z) {
                assert!((x - (2.0 + 0.5 * z)).abs() <= 1e-12, "normal_ on {device}: {x} vs {}", 2.0 + 0.5 * z);
            }
            // In f32: fma(z, std, mean), exactly.
            let t = Tensor::empty([100], DType::F32, device)?;
            t.normal_gen_(2.0, 0.5, &g)?;
            let first = n.div_ceil(if dtype == DType::F64 { 2 } else { 4 }) as u64 + 50;
            let z = normal_ref(0xabcd, first, 100, DType::F32);
            let want: Vec<f64> = z.iter().map(|&z| f64::from((z as f32).mul_add(0.5, 2.0))).collect();
            assert_eq!(read(&t)?, want, "normal_ f32 on {device}");
        }
    }
    Ok(())
}

#[test]
fn integer_bernoulli_exponential_and_dropout_follow_the_reference() -> Result<()> {
    let _serial = serial();
    for device in devices() {
        let g = generator(device, 99)?;
        // randint: one word per element below 2^32 values, two above.
        let a = Tensor::randint_gen(-5, 17, [999], DType::I64, &g)?;
        let want = reference(99, 0, 999, 4, |w, j| (-5 + (u64::from(w[j]) % 22) as i64) as f64);
        assert_eq!(read(&a)?, want, "randint on {device}");
        let wide = Tensor::randint_gen(-(1 << 40), 1 << 40, [33], DType::I64, &g)?;
        let want = reference(99, 250, 33, 2, |w, j| {
            let r = ((u64::from(w[2 * j]) << 32) | u64::from(w[2 * j + 1])) % (1 << 41);
            (-(1i64 << 40) + r as i64) as f64
        });
        assert_eq!(read(&wide)?, want, "wide randint on {device}");
        // bernoulli_: w · 2^-32 < p, into any dtype.
        let b = Tensor::empty([64], DType::U8, device)?;
        b.bernoulli_gen_(0.3, &g)?;
        let want = reference(99, 267, 64, 4, |w, j| f64::from(u8::from(f64::from(w[j]) * p2(32) < 0.3)));
        assert_eq!(read(&b)?, want, "bernoulli_ on {device}");
        // exponential_: -ln(u) / λ, u in (0, 1].
        let e = Tensor::empty([50], DType::F32, device)?;
        e.exponential_gen_(2.5, &g)?;
        let want = reference(99, 283, 50, 2, |w, j| {
            let u = (u53(w[2 * j], w[2 * j + 1]) + 1) as f64 * p2(53);
            round((0.0 - u.ln()) / 2.5, DType::F32)
        });
        for (x, y) in read(&e)?.iter().zip(&want) {
            assert!(ulps(*x, *y, DType::F32) <= 1, "exponential_ on {device}: {x} vs {y}");
        }
        // dropout: keep where w · 2^-32 < 1 - p, scaled by 1 / (1 - p).
        let x = Tensor::from_slice(&(0..40).map(|i| i as f32 * 0.37 - 5.0).collect::<Vec<_>>(), [5, 8], device)?;
        let y = x.dropout_gen(0.25, true, &g)?;
        let xs = read(&x)?;
        let want = reference(99, 308, 40, 4, |w, j| if f64::from(w[j]) * p2(32) < 0.75 { 1.0 } else { 0.0 });
        for (i, (got, keep)) in read(&y)?.iter().zip(&want).enumerate() {
            // f32 math for f32: x · f32(1 / (1 - p)).
            let kept = xs[i] as f32 * (*keep as f32 * (1.0f64 / 0.75) as f32);
            assert_eq!(*got, f64::from(kept), "dropout element {i} on {device}");
        }
        assert_eq!(g.get_state()[16..], 318u64.to_le_bytes(), "the offset counts every draw's blocks");
    }
    Ok(())
}

/// The Kolmogorov–Smirnov statistic of `xs` against the distribution function `cdf`.
fn ks(mut xs: Vec<f64>, cdf: impl Fn(f64) -> f64) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len() as f64;
    xs.iter().enumerate().fold(0.0, |d, (i, &x)| {
        let f = cdf(x);
        d.max((f - i as f64 / n).abs()).max(((i + 1) as f64 / n - f).abs())
    })
}

fn moments(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    (mean, xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0))
}

/// At 2^21 draws the KS statistic exceeds 1.95 / √n with probability 0.001 (Kolmogorov's
/// distribution); the means are within 5 standard errors.
#[test]
fn uniform_and_normal_draws_pass_kolmogorov_smirnov_and_moments() -> Result<()> {
    let _serial = serial();
    let device = if testing::has_devices(1) { Device::cuda(0) } else { Device::Cpu };
    let n = 1 << 21;
    let limit = 1.95 / (n as f64).sqrt();
    let g = generator(device, 2024)?;
    let u = read(&Tensor::rand_gen([n], DType::F32, &g)?)?;
    let (m, v) = moments(&u);
    assert!((m - 0.5).abs() < 5.0 * (1.0 / 12.0 / n as f64).sqrt() && (v - 1.0 / 12.0).abs() < 1e-3, "{m} {v}");
    let d = ks(u, |x| x.clamp(0.0, 1.0));
    assert!(d < limit, "uniform KS statistic {d} ≥ {limit}");
    let z = read(&Tensor::randn_gen([n], DType::F32, &g)?)?;
    let (m, v) = moments(&z);
    assert!(m.abs() < 5.0 / (n as f64).sqrt() && (v - 1.0).abs() < 0.01, "normal moments {m} {v}");
    let d = ks(z, |x| 0.5 * libm::erfc(-x / std::f64::consts::SQRT_2));
    assert!(d < limit, "normal KS statistic {d} ≥ {limit}");
    let e = Tensor::empty([n], DType::F64, device)?;
    e.exponential_gen_(4.0, &g)?;
    let d = ks(read(&e)?, |x| 1.0 - (-4.0 * x.max(0.0)).exp());
    assert!(d < limit, "exponential KS statistic {d} ≥ {limit}");
    Ok(())
}

#[test]
fn rates_of_bernoulli_dropout_and_randint() -> Result<()> {
    let _serial = serial();
    let device = if testing::has_devices(1) { Device::cuda(0) } else { Device::Cpu };
    let g = generator(device, 77)?;
    let n = 1 << 20;
    let sd = |p: f64| 5.0 * (p * (1.0 - p) / n as f64).sqrt();
    let b = Tensor::empty([n], DType::Bool, device)?;
    b.bernoulli_gen_(0.2, &g)?;
    let rate = read(&b)?.iter().sum::<f64>() / n as f64;
    assert!((rate - 0.2).abs() < sd(0.2), "bernoulli rate {rate}");
    let ones = Tensor::ones([n], DType::BF16, device)?;
    let y = read(&ones.dropout_gen(0.1, true, &g)?)?;
    let kept = y.iter().filter(|&&v| v != 0.0).count() as f64 / n as f64;
    assert!((kept - 0.9).abs() < sd(0.9), "dropout keep rate {kept}");
    let scale = round(1.0 / 0.9, DType::BF16);
    assert!(y.iter().all(|&v| v == 0.0 || v == scale), "kept elements are scaled by 1 / (1 - p)");
    let r = read(&Tensor::randint_gen(3, 13, [n], DType::I32, &g)?)?;
    let mut counts = [0usize; 10];
    for v in &r {
        assert!((3.0..13.0).contains(v), "randint out of bounds: {v}");
        counts[*v as usize - 3] += 1;
    }
    for c in counts {
        assert!((c as f64 / n as f64 - 0.1).abs() < sd(0.1), "randint frequencies {counts:?}");
    }
    assert_eq!(ones.dropout(0.5, false)?.data_ptr(), ones.data_ptr(), "eval mode returns the input");
    assert!(read(&ones.dropout_gen(1.0, true, &g)?)?.iter().all(|&v| v == 0.0), "p = 1 zeroes everything");
    Ok(())
}

#[test]
fn seeding_and_state_round_trips() -> Result<()> {
    let _serial = serial();
    let _l = defaults();
    cudasem::manual_seed(1234);
    assert_eq!(cudasem::initial_seed(), 1234);
    let host = Tensor::rand([100], DType::F32, Device::Cpu)?;
    assert_eq!(read(&host)?, uniform_ref(1234, 0, 100, DType::F32, 0.0, 1.0), "the host generator is seeded");
    if testing::has_devices(1) {
        let a = Tensor::rand([100], DType::F32, "cuda:0")?;
        assert_eq!(read(&a)?, read(&host)?, "manual_seed seeds every device as the host: the same numbers");
        assert_eq!(cuda::initial_seed()?, 1234);
        let state = cuda::get_rng_state(0)?;
        let x = read(&Tensor::randn([257], DType::F16, "cuda:0")?)?;
        cuda::set_rng_state(&state, 0)?;
        assert_eq!(read(&Tensor::randn([257], DType::F16, "cuda:0")?)?, x, "a restored state repeats the draw");
        cuda::manual_seed(5)?;
        let y = read(&Tensor::rand([10], DType::F64, "cuda")?)?;
        assert_eq!(y, uniform_ref(5, 0, 10, DType::F64, 0.0, 1.0));
        let all = cuda::get_rng_state_all()?;
        assert_eq!(all.len(), cuda::device_count());
        cuda::set_rng_state_all(&all)?;
        assert_eq!(cuda::get_rng_state_all()?, all);
        let s = cuda::seed()?;
        assert_eq!(cuda::initial_seed()?, s);
        let s_all = cuda::seed_all();
        assert_eq!(cuda::initial_seed()?, s_all);
        // Bad states: typed errors, the generator unchanged and usable.
        let before = cuda::get_rng_state(0)?;
        for bad in [vec![], vec![0u8; 24], before[..23].to_vec(), [before.clone(), vec![0]].concat()] {
            let e = cuda::set_rng_state(&bad, 0).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
        }
        assert_eq!(cuda::get_rng_state(0)?, before);
        assert!(cuda::set_rng_state_all(&[vec![1, 2, 3]]).is_err());
        assert!(Tensor::rand([3], DType::F32, "cuda:0").is_ok());
    }
    // Generators: state round trips, clones share, clone_state copies.
    let g = generator(Device::Cpu, 42)?;
    let state = g.get_state();
    assert_eq!(state.len(), cuda::RNG_STATE_BYTES);
    let a = read(&Tensor::rand_gen([20], DType::F32, &g)?)?;
    let copy = g.clone_state();
    let shared = g.clone();
    let b = read(&Tensor::rand_gen([20], DType::F32, &shared)?)?;
    assert_ne!(a, b, "a clone shares the stream");
    assert_eq!(read(&Tensor::rand_gen([20], DType::F32, &copy)?)?, b, "clone_state copies the state");
    g.set_state(&state)?;
    assert_eq!(read(&Tensor::rand_gen([20], DType::F32, &g)?)?, a);
    assert_eq!(g.initial_seed(), 42);
    assert!(matches!(g.set_state(b"not a state"), Err(Error::InvalidArgument { .. })));
    Ok(())
}

#[test]
fn devices_and_generators_are_independent() -> Result<()> {
    let _serial = serial();
    if !testing::has_devices(2) {
        return Ok(());
    }
    let _l = defaults();
    cuda::manual_seed_all(9);
    let before = cuda::get_rng_state(1)?;
    let a = read(&Tensor::randn([64], DType::F32, "cuda:0")?)?;
    assert_eq!(cuda::get_rng_state(1)?, before, "a draw on device 0 leaves device 1's generator alone");
    let b = read(&Tensor::randn([64], DType::F32, "cuda:1")?)?;
    assert_eq!(a, b, "both start from seed 9");
    let g = generator(Device::cuda(1), 9)?;
    let err = Tensor::empty([4], DType::F32, "cuda:0")?.uniform_gen_(0.0, 1.0, &g).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "a generator of another device: {err}");
    Ok(())
}

#[test]
fn two_threads_drawing_from_one_generator_get_disjoint_blocks() -> Result<()> {
    let _serial = serial();
    let device = if testing::has_devices(1) { Device::cuda(0) } else { Device::Cpu };
    let g = generator(device, 31337)?;
    let n = 4096;
    let draws: Vec<Vec<f64>> = std::thread::scope(|s| {
        let hs: Vec<_> =
            (0..2).map(|_| s.spawn(|| read(&Tensor::rand_gen([n], DType::F32, &g).unwrap()).unwrap())).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let first = uniform_ref(31337, 0, n, DType::F32, 0.0, 1.0);
    let second = uniform_ref(31337, (n / 4) as u64, n, DType::F32, 0.0, 1.0);
    assert!(
        (draws[0] == first && draws[1] == second) || (draws[0] == second && draws[1] == first),
        "each thread's draw is one of the two consecutive ranges"
    );
    Ok(())
}

#[test]
fn draws_inside_a_graph_advance_on_every_replay() -> Result<()> {
    let _serial = serial();
    if !testing::has_devices(1) {
        return Ok(());
    }
    let g = generator(Device::cuda(0), 777)?;
    let state = g.get_state();
    let mut graph = CUDAGraph::new();
    let (a, b) = cuda::graph(&mut graph, GraphOptions::default(), || {
        let a = Tensor::rand_gen([1000], DType::F32, &g)?;
        let b = Tensor::empty([333], DType::BF16, "cuda:0")?;
        b.normal_gen_(1.0, 2.0, &g)?;
        Ok((a, b))
    })?;
    assert_eq!(g.get_state(), state, "a capture does not advance the generator");
    let eager = generator(Device::cuda(0), 777)?;
    for replay in 0..3 {
        graph.replay()?;
        let want_a = read(&Tensor::rand_gen([1000], DType::F32, &eager)?)?;
        let want_b = Tensor::empty([333], DType::BF16, "cuda:0")?;
        want_b.normal_gen_(1.0, 2.0, &eager)?;
        assert_eq!(read(&a)?, want_a, "replay {replay} draws what eager run {replay} draws");
        assert_eq!(read(&b)?, read(&want_b)?, "replay {replay}'s normals");
        assert_eq!(g.get_state(), eager.get_state(), "the state after {} replays", replay + 1);
    }
    let first = uniform_ref(777, 0, 1000, DType::F32, 0.0, 1.0);
    assert_ne!(read(&a)?, first, "later replays differ from the first");
    // Seeding between replays takes effect at the next replay.
    g.manual_seed(777);
    graph.replay()?;
    assert_eq!(read(&a)?, first);
    // One's own kernel's pair: by value eagerly, through the slot in a capture.
    let p = g.philox_state(10)?;
    assert_eq!((p.slot, p.offset, p.seed), (None, 334, 777));
    assert_eq!(g.philox_state(1)?.offset, 344);
    let mut graph2 = CUDAGraph::new();
    let (t, inside) = cuda::graph(&mut graph2, GraphOptions::default(), || {
        let t = Tensor::rand_gen([4], DType::F32, &g)?;
        Ok((t, g.philox_state(4)?))
    })?;
    assert!(inside.slot.is_some() && inside.offset == 1, "after the captured draw's one block: {inside:?}");
    drop(t);
    // Resetting the graphs leaves the generator drawing as before.
    graph.reset()?;
    graph2.reset()?;
    assert_eq!(read(&Tensor::rand_gen([4], DType::F32, &g)?)?.len(), 4);
    Ok(())
}

/// A captured draw's generator slot is written by each replay's prologue before the graph runs,
/// so it must not be memory that an earlier captured op used and freed (the graph's pool hands
/// such a block on): that op would overwrite the seed on every replay, and every replay would
/// draw the same wrong numbers.
#[test]
fn a_draw_captured_after_a_freed_temporary_draws_what_eager_draws() -> Result<()> {
    let _serial = serial();
    if !testing::has_devices(1) {
        return Ok(());
    }
    let x = Tensor::rand_gen([4, 8], DType::F32, &generator(Device::cuda(0), 5)?)?;
    let g = generator(Device::cuda(0), 4242)?;
    let mut graph = CUDAGraph::new();
    let (y, a) = cuda::graph(&mut graph, GraphOptions::default(), || {
        let a = Tensor::empty([64], DType::F32, "cuda:0")?;
        // The product is a temporary of the graph's pool, freed inside the capture before the
        // draw asks for its slot.
        let y = x.mul(3.0)?.softmax(1)?;
        a.uniform_gen_(0.0, 1.0, &g)?;
        Ok((y, a))
    })?;
    let eager = generator(Device::cuda(0), 4242)?;
    for replay in 0..3 {
        graph.replay()?;
        let want = Tensor::empty([64], DType::F32, "cuda:0")?;
        want.uniform_gen_(0.0, 1.0, &eager)?;
        assert_eq!(read(&a)?, read(&want)?, "replay {replay}");
    }
    assert_eq!(read(&y)?, read(&x.mul(3.0)?.softmax(1)?)?, "the graph's other work is intact");
    Ok(())
}

/// Two graphs sharing a pool (`graph_pool_handle`) and a generator share its state: replays in
/// any order draw what the same eager draws in that order draw, and each advances the one state.
#[test]
fn two_graphs_on_one_pool_share_a_generator() -> Result<()> {
    let _serial = serial();
    if !testing::has_devices(1) {
        return Ok(());
    }
    let g = generator(Device::cuda(0), 2026)?;
    let pool = cuda::graph_pool_handle();
    let options = || GraphOptions { pool: Some(pool), ..GraphOptions::default() };
    let (mut ga, mut gb) = (CUDAGraph::new(), CUDAGraph::new());
    let a = cuda::graph(&mut ga, options(), || Tensor::randn_gen([100], DType::F32, &g))?;
    let b = cuda::graph(&mut gb, options(), || Tensor::rand_gen([64], DType::BF16, &g))?;
    let eager = generator(Device::cuda(0), 2026)?;
    for (k, first_a) in [true, false, true, true].into_iter().enumerate() {
        let (graph, out, want) = if first_a {
            (&ga, &a, Tensor::randn_gen([100], DType::F32, &eager)?)
        } else {
            (&gb, &b, Tensor::rand_gen([64], DType::BF16, &eager)?)
        };
        graph.replay()?;
        assert_eq!(read(out)?, read(&want)?, "replay {k} draws the eager draw {k}");
        assert_eq!(g.get_state(), eager.get_state(), "one state after replay {k}");
    }
    Ok(())
}

#[test]
fn default_generators_work_in_a_graph() -> Result<()> {
    let _serial = serial();
    if !testing::has_devices(1) {
        return Ok(());
    }
    let _l = defaults();
    cuda::manual_seed(11)?;
    let mut graph = CUDAGraph::new();
    let a = cuda::graph(&mut graph, GraphOptions::default(), || Tensor::randn([100], DType::F32, "cuda:0"))?;
    graph.replay()?;
    let r1 = read(&a)?;
    graph.replay()?;
    let r2 = read(&a)?;
    assert_ne!(r1, r2, "two replays differ");
    cuda::manual_seed(11)?;
    assert_eq!(read(&Tensor::randn([100], DType::F32, "cuda:0")?)?, r1);
    assert_eq!(read(&Tensor::randn([100], DType::F32, "cuda:0")?)?, r2);
    Ok(())
}

#[test]
fn bad_arguments_are_typed_errors() -> Result<()> {
    let _serial = serial();
    for device in devices() {
        let t = Tensor::zeros([8], DType::F32, device)?;
        let invalid = |r: Result<()>| matches!(r, Err(Error::InvalidArgument { .. }));
        assert!(invalid(t.bernoulli_(1.5)) && invalid(t.bernoulli_(-0.1)) && invalid(t.bernoulli_(f64::NAN)));
        assert!(invalid(t.uniform_(2.0, 1.0)));
        assert!(invalid(t.normal_(0.0, -1.0)));
        assert!(invalid(t.exponential_(0.0)) && invalid(t.exponential_(-2.0)));
        assert!(matches!(t.dropout(1.5, true), Err(Error::InvalidArgument { .. })));
        let e = Tensor::randint(5, 5, [3], DType::I64, device).unwrap_err();
        assert!(e.to_string().contains("from=5 >= to=5"), "{e}");
        assert!(Tensor::randint(0, 300, [3], DType::U8, device).is_err(), "uint8 holds 0..=255");
        assert!(matches!(Tensor::rand([2], DType::I64, device), Err(Error::UnsupportedDType { .. })));
        let ints = Tensor::zeros([4], DType::I32, device)?;
        assert!(matches!(ints.normal_(0.0, 1.0), Err(Error::UnsupportedDType { .. })));
        assert_eq!(read(&t)?, vec![0.0; 8], "a refused draw writes nothing");
        // The runtime is usable afterwards.
        ints.random_()?;
        assert!(read(&ints)?.iter().all(|&v| v >= 0.0));
        let x = Tensor::rand([4], DType::F32, device)?;
        assert_eq!(read(&x)?.len(), 4);
    }
    Ok(())
}

#[test]
fn like_forms_random_and_strided_outputs() -> Result<()> {
    let _serial = serial();
    for device in devices() {
        let base = Tensor::zeros([6, 4], DType::F16, device)?;
        let r = base.rand_like()?;
        assert_eq!((r.shape(), r.dtype(), r.device()), (base.shape(), DType::F16, base.device()));
        assert!(read(&r)?.iter().all(|&v| (0.0..1.0).contains(&v)));
        assert_eq!(base.randn_like()?.shape(), &[6, 4][..]);
        // A transposed (non-contiguous) tensor is filled through a contiguous one, in its order.
        let g = generator(device, 3)?;
        let t = Tensor::zeros([4, 6], DType::F32, device)?.t()?;
        t.uniform_gen_(0.0, 1.0, &g)?;
        assert_eq!(read(&t)?, uniform_ref(3, 0, 24, DType::F32, 0.0, 1.0));
        let f = Tensor::zeros([100], DType::F32, device)?;
        f.random_()?;
        assert!(read(&f)?.iter().all(|&v| (0.0..=16_777_216.0).contains(&v) && v.fract() == 0.0));
        let b = Tensor::zeros([100], DType::Bool, device)?;
        b.random_range_(0, 2)?;
        assert!(read(&b)?.contains(&1.0));
    }
    Ok(())
}

/// FNV-1a of bytes.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// Fixed draws whose values are integer or correctly rounded math (the `f32` normals
/// included), frozen as one hash: the stream mapping never changes silently, and a GPU run
/// (`CUDASEM_DRIVER=cuda`) must give the simulated machine's bits.
#[test]
fn fixed_draws_hash_to_the_recorded_value() -> Result<()> {
    let _serial = serial();
    for device in devices() {
        let g = generator(device, 0xC0FFEE)?;
        let mut bytes = Vec::new();
        for dtype in FLOATS {
            bytes.extend(read(&Tensor::rand_gen([999], dtype, &g)?)?.iter().flat_map(|v| v.to_le_bytes()));
        }
        bytes.extend(
            read(&Tensor::randint_gen(-1000, 1000, [777], DType::I32, &g)?)?.iter().flat_map(|v| v.to_le_bytes()),
        );
        bytes.extend(read(&Tensor::randperm_gen(500, DType::I64, &g)?)?.iter().flat_map(|v| v.to_le_bytes()));
        let w = Tensor::arange(1, 65, 1, DType::F32, device)?.reshape([4, 16])?;
        bytes.extend(read(&w.multinomial_gen(8, false, &g)?)?.iter().flat_map(|v| v.to_le_bytes()));
        bytes.extend(read(&w.dropout_gen(0.5, true, &g)?)?.iter().flat_map(|v| v.to_le_bytes()));
        bytes.extend(read(&Tensor::randn_gen([999], DType::F32, &g)?)?.iter().flat_map(|v| v.to_le_bytes()));
        assert_eq!(fnv(&bytes), 0x652a_4081_b7ea_8bf0, "the fixed draws on {device}: {:#018x}", fnv(&bytes));
    }
    Ok(())
}
