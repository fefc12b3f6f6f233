//! cudasem's side: the sizes, the timing methods (shared with `bench/pytorch_bench.py`, which
//! mirrors them), and the host-cost figures. The device figures are in `device_figures.rs`.
//!
//! Every figure checks its result against a CPU reference before timing; a disagreement is a
//! failed figure, never a number.

use super::device_figures;
use super::progress::Progress;
use super::{Outcome, ROWS};
use cudasem::cuda;
use cudasem::{DType, Tensor};
use std::collections::HashMap;
use std::hint::black_box;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

/// Sizes and repeat counts; `bench/pytorch_bench.py` has the same table (`Sizes` there).
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// Allocator pairs per timed run.
    pub pairs: usize,
    /// `empty` create+drop per timed run.
    pub empties: usize,
    /// Timed runs of the host-cost figures (pairs, empties): the median is reported.
    pub host_runs: usize,
    /// Small ops per timed run (each run starts after a synchronize).
    pub small_ops: usize,
    /// Timed runs of the small op.
    pub small_runs: usize,
    /// Elements of the `add` and `sum` operands (f32).
    pub elems: usize,
    /// Side of the square matrices.
    pub mm: usize,
    /// f32 elements of each copy (1 GiB: 2^28).
    pub copy_elems: usize,
    /// Random elements drawn on the host per operand; larger operands tile them on the device.
    pub drawn: usize,
    /// Warm-up calls of a device figure.
    pub warmup: usize,
    /// Event-timed runs of a device figure (the median is reported).
    pub runs: usize,
    /// Calls per event-timed run.
    pub reps: usize,
}

impl Sizes {
    /// The full sizes, or the tiny ones of `--quick`.
    pub fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                pairs: 20_000,
                empties: 5_000,
                host_runs: 3,
                small_ops: 200,
                small_runs: 5,
                elems: 1 << 16,
                mm: 128,
                copy_elems: 1 << 18,
                drawn: 1 << 12,
                warmup: 1,
                runs: 3,
                reps: 2,
            }
        } else {
            Sizes {
                pairs: 200_000,
                empties: 100_000,
                host_runs: 7,
                small_ops: 200,
                small_runs: 51,
                elems: 1 << 28,
                mm: 8192,
                copy_elems: 1 << 28,
                drawn: 1 << 20,
                warmup: 3,
                runs: 15,
                reps: 10,
            }
        }
    }
}

/// Why a step produced no figure.
#[derive(Debug)]
pub enum Stop {
    /// Not measurable here, with the reason.
    Skip(String),
    /// An error or a wrong result.
    Fail(String),
}

impl From<cudasem::Error> for Stop {
    fn from(e: cudasem::Error) -> Stop {
        Stop::Fail(e.to_string())
    }
}

/// What a step returns: its rows' values, or why it has none.
pub type StepResult = Result<Vec<(&'static str, f64)>, Stop>;

/// A failed check, as a [`Stop::Fail`] naming what disagreed.
pub fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), Stop> {
    if ok {
        Ok(())
    } else {
        Err(Stop::Fail(format!("wrong result: {}", what())))
    }
}

/// The median (the upper one of an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Median host ns per call of `f` over `runs` timed runs of `n` calls, each run starting after a
/// synchronize of the current device, after two untimed runs.
pub fn host_ns(runs: usize, n: usize, mut f: impl FnMut() -> cudasem::Result<()>) -> cudasem::Result<f64> {
    let mut times = Vec::with_capacity(runs);
    for run in 0..runs + 2 {
        cuda::synchronize(None)?;
        let t = Instant::now();
        for _ in 0..n {
            f()?;
        }
        if run >= 2 {
            times.push(t.elapsed().as_nanos() as f64 / n as f64);
        }
    }
    cuda::synchronize(None)?;
    Ok(median(times))
}

/// A small deterministic generator for the data the tensor API does not make itself.
pub struct Rng(u64);

impl Rng {
    /// Seeded.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    /// The next 64 random bits (SplitMix64).
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    /// Uniform in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Measures `steps` in order, advancing `progress`; returns every row of those steps with its
/// outcome. A panic inside a step is caught and reported as a failure of that step.
pub fn measure_all(steps: &[&'static str], quick: bool, progress: &mut Progress) -> HashMap<&'static str, Outcome> {
    let sizes = Sizes::new(quick);
    cudasem::manual_seed(20261201);
    let mut out = HashMap::new();
    for &step in steps {
        progress.step("cudasem", step);
        let result = catch_unwind(AssertUnwindSafe(|| measure(step, &sizes))).unwrap_or_else(|panic| {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(Stop::Fail(format!("panicked: {msg}")))
        });
        // Whatever the step left cached goes back before the next one.
        let _ = cuda::synchronize(None);
        let _ = cuda::empty_cache();
        for r in ROWS.iter().filter(|r| r.step == step) {
            let outcome = match &result {
                Ok(values) => match values.iter().find(|(name, _)| *name == r.name) {
                    Some(&(_, v)) if v.is_finite() && v > 0.0 => Outcome::Value(v),
                    Some(&(_, v)) => Outcome::Failed(format!("measured {v}, not a positive number")),
                    None => Outcome::Failed("not measured".into()),
                },
                Err(Stop::Skip(why)) => Outcome::Skipped(why.clone()),
                Err(Stop::Fail(why)) => Outcome::Failed(why.clone()),
            };
            if let Some(note) = outcome.note() {
                progress.note(&format!("cudasem {}: {note}", r.name));
            }
            out.insert(r.name, outcome);
        }
    }
    out
}

fn measure(step: &str, s: &Sizes) -> StepResult {
    if cuda::device_count() == 0 {
        // Says why (no driver, or invalid settings).
        cuda::current_device()?;
        return Err(Stop::Skip("no device".into()));
    }
    match step {
        "alloc_free_pair" => alloc_free_pair(s),
        "empty_tensor" => empty_tensor(s),
        "small_op" => small_op(s),
        _ => device_figures::measure(step, s),
    }
}

/// `cuda::caching_allocator_alloc` + `caching_allocator_delete` of a cached block: host ns per pair.
fn alloc_free_pair(s: &Sizes) -> StepResult {
    let mut out = Vec::new();
    for (name, size) in
        [("alloc_free_pair", 1usize << 20), ("alloc_free_pair_512b", 512), ("alloc_free_pair_64mib", 64 << 20)]
    {
        let p = cuda::caching_allocator_alloc(size, None, None)?;
        check(p != 0, || format!("caching_allocator_alloc({size}) returned a null pointer"))?;
        cuda::caching_allocator_delete(p)?;
        let before = cuda::memory_stats(None)?.num_device_alloc();
        let ns = host_ns(s.host_runs, s.pairs, || {
            let p = cuda::caching_allocator_alloc(black_box(size), None, None)?;
            cuda::caching_allocator_delete(black_box(p))
        })?;
        let after = cuda::memory_stats(None)?.num_device_alloc();
        check(after == before, || format!("{} timed pairs of {size} B reached the driver", after - before))?;
        out.push((name, ns));
    }
    Ok(out)
}

/// `Tensor::empty(&[1024], F32, "cuda")` created and dropped: host ns per tensor.
fn empty_tensor(s: &Sizes) -> StepResult {
    let t = Tensor::empty(&[1024], DType::F32, "cuda")?;
    let here = cuda::current_device()?;
    check(t.shape() == [1024] && t.dtype() == DType::F32 && t.device() == cudasem::Device::cuda(here), || {
        format!("empty gave {:?} {} on {}", t.shape(), t.dtype(), t.device())
    })?;
    drop(t);
    let ns = host_ns(s.host_runs, s.empties, || Tensor::empty(&[1024], DType::F32, "cuda").map(drop))?;
    Ok(vec![("empty_tensor", ns)])
}

/// `x.add(&y)` of 16 f32 through the tensor API: host ns per op over runs of `small_ops` ops, each
/// run after a synchronize. PyTorch's `small_op` is Python's `torch.add` (as its users call it);
/// `small_op_cpp` compares the same figure with C++ `at::add`.
fn small_op(s: &Sizes) -> StepResult {
    let mut rng = Rng::new(16);
    let xs: Vec<f32> = (0..16).map(|_| rng.next_f32()).collect();
    let ys: Vec<f32> = (0..16).map(|_| rng.next_f32()).collect();
    let x = Tensor::from_slice(&xs, &[16], "cuda")?;
    let y = Tensor::from_slice(&ys, &[16], "cuda")?;
    let z = x.add(&y)?.to_vec::<f32>()?;
    let want: Vec<f32> = xs.iter().zip(&ys).map(|(a, b)| a + b).collect();
    check(z == want, || format!("x.add(&y) gave {z:?}, the CPU {want:?}"))?;
    let ns = host_ns(s.small_runs, s.small_ops, || x.add(&y).map(drop))?;
    Ok(vec![("small_op", ns), ("small_op_cpp", ns)])
}
