//! cudasem's side: every step in order (`measure_all`) and the host-cost figures. The device
//! figures are in `device_figures.rs`, the end-to-end ones in `e2e.rs`, the sizes and checks they
//! all use in `measure.rs`.
//!
//! Every figure checks its result against a CPU reference before timing; a disagreement is a
//! failed figure, never a number.

use super::measure::{check, host_ns, panic_message, Sizes, StepResult, Stop};
use super::progress::Progress;
use super::rows::{Outcome, ROWS};
use super::{device_figures, e2e};
use cudasem::cuda;
use cudasem::{DType, Tensor};
use std::collections::HashMap;
use std::hint::black_box;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Measures `steps` in order, advancing `progress`; returns every row of those steps with its
/// outcome. A panic inside a step is caught and reported as a failure of that step.
pub fn measure_all(steps: &[&'static str], quick: bool, progress: &mut Progress) -> HashMap<&'static str, Outcome> {
    let sizes = Sizes::new(quick);
    cudasem::manual_seed(20261201);
    let mut out = HashMap::new();
    for &step in steps {
        progress.step("cudasem", step);
        let result = catch_unwind(AssertUnwindSafe(|| measure(step, &sizes)))
            .unwrap_or_else(|panic| Err(Stop::Fail(format!("panicked: {}", panic_message(&*panic)))));
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
        "alloc_free_pair_stacks" => alloc_free_pair_stacks(s),
        "empty_tensor" => empty_tensor(s),
        "small_op" => small_op(s),
        "e2e_mlp_pipeline_bf16" | "e2e_decode_step" | "e2e_decode_step_graphed" => e2e::measure(step, s),
        "graph_replay" => super::graphs::replay_rows(s),
        "allreduce" => super::collectives::rows(s),
        "user_kernel_launch_host" => super::user_kernel::launch_host(s),
        "user_kernel_launch_raw_cudarc" => super::user_kernel::launch_host_raw(s),
        "sdpa" => super::transformer::sdpa(s),
        "norms" => super::transformer::norms(s),
        "vocab_softmax" => super::long_rows::softmax_rows(s),
        "lm_head" => super::long_rows::lm_head(s),
        "gpt_block" => super::gpt_block::rows(s),
        "random" => super::random::rows(s),
        "jit_swiglu" | "jit_small_call" | "jit_first_call" => super::jit::measure(step, s),
        "small_op_sanitized" => super::sanitized::rows(s),
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

/// `alloc_free_pair` of 4096 bytes (1024 f32) with the memory history on: `_stacks` with a
/// backtrace per alloc and per free (`stacks="all"`, `context="all"`), `_history` without stacks
/// (`context=None`). The history is off again after, whatever happened.
fn alloc_free_pair_stacks(s: &Sizes) -> StepResult {
    use cudasem::cuda::{MemoryHistory, Stacks};
    let size = 4096;
    let mut out = Vec::new();
    for (name, stacks) in [("alloc_free_pair_stacks", Stacks::All), ("alloc_free_pair_history", Stacks::None)] {
        cuda::record_memory_history_with(MemoryHistory::new().stacks(stacks).max_entries(100_000))?;
        let timed = host_ns(s.host_runs, s.pairs, || {
            let p = cuda::caching_allocator_alloc(black_box(size), None, None)?;
            cuda::caching_allocator_delete(black_box(p))
        });
        let snapshot = cuda::memory_snapshot();
        cuda::record_memory_history_with(MemoryHistory::off())?;
        let (ns, snapshot) = (timed?, snapshot?);
        let last = snapshot.device_traces[cuda::current_device()?].last().map(|e| !e.frames.is_empty());
        let want = Some(stacks == Stacks::All);
        check(last == want, || format!("{name}: the last event has frames: {last:?}, expected {want:?}"))?;
        out.push((name, ns));
    }
    Ok(out)
}

/// `Tensor::empty(&[1024], F32, "cuda")` created and dropped: host ns per tensor.
fn empty_tensor(s: &Sizes) -> StepResult {
    let t = Tensor::empty([1024], DType::F32, "cuda")?;
    let here = cuda::current_device()?;
    check(t.shape() == [1024] && t.dtype() == DType::F32 && t.device() == cudasem::Device::cuda(here), || {
        format!("empty gave {:?} {} on {}", t.shape(), t.dtype(), t.device())
    })?;
    drop(t);
    let ns = host_ns(s.host_runs, s.empties, || Tensor::empty([1024], DType::F32, "cuda").map(drop))?;
    Ok(vec![("empty_tensor", ns)])
}

/// `x.add(&y)` of 16 f32 through the tensor API: host ns per op over runs of `small_ops` ops, each
/// run after a synchronize. PyTorch's `small_op` is Python's `torch.add` (as its users call it);
/// `small_op_cpp` compares the same figure with C++ `at::add`.
fn small_op(s: &Sizes) -> StepResult {
    let x = Tensor::randn([16], DType::F32, "cuda")?;
    let y = Tensor::randn([16], DType::F32, "cuda")?;
    let (xs, ys) = (x.to_vec::<f32>()?, y.to_vec::<f32>()?);
    let z = x.add(&y)?.to_vec::<f32>()?;
    let want: Vec<f32> = xs.iter().zip(&ys).map(|(a, b)| a + b).collect();
    check(z == want, || format!("x.add(&y) gave {z:?}, the CPU {want:?}"))?;
    let ns = host_ns(s.small_runs, s.small_ops, || x.add(&y).map(drop))?;
    Ok(vec![("small_op", ns), ("small_op_cpp", ns)])
}
