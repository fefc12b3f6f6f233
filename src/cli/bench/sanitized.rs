//! `small_op_sanitized`: the `small_op` figure (`x.add(&y)` of 16 f32, host ns per op) with the
//! stream sanitizer on, stack traces included (`cuda::sanitizer::enable`); PyTorch's side is
//! `torch.add` under its CUDA Sanitizer (CSAN). `small_op_sanitized_no_stacks` is the same with
//! `sanitizer::set_stack_traces(false)` (cudasem only). The sanitizer is switched back to what it
//! was after.

use super::measure::{check, host_ns, Sizes, StepResult};
use cudasem::cuda::{self, sanitizer};
use cudasem::{DType, Tensor};

/// Every row of the `small_op_sanitized` step.
pub fn rows(s: &Sizes) -> StepResult {
    let was_on = sanitizer::is_enabled();
    cuda::synchronize(None)?;
    sanitizer::enable();
    let out = measure(s);
    sanitizer::set_stack_traces(true);
    if !was_on {
        sanitizer::disable();
    }
    out
}

fn measure(s: &Sizes) -> StepResult {
    let x = Tensor::randn([16], DType::F32, "cuda")?;
    let y = Tensor::randn([16], DType::F32, "cuda")?;
    let (xs, ys) = (x.to_vec::<f32>()?, y.to_vec::<f32>()?);
    let z = x.add(&y)?.to_vec::<f32>()?;
    let want: Vec<f32> = xs.iter().zip(&ys).map(|(a, b)| a + b).collect();
    check(z == want, || format!("x.add(&y) with the sanitizer on gave {z:?}, the CPU {want:?}"))?;
    let with_stacks = host_ns(s.small_runs, s.small_ops, || x.add(&y).map(drop))?;
    sanitizer::set_stack_traces(false);
    let without = host_ns(s.small_runs, s.small_ops, || x.add(&y).map(drop))?;
    Ok(vec![("small_op_sanitized", with_stacks), ("small_op_sanitized_no_stacks", without)])
}
