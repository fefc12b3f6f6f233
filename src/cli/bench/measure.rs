//! What every figure shares: the sizes (`bench/pytorch_bench.py` mirrors them), why a step has no
//! figure, the check of a result against its CPU reference, the event-timed repeat loop and the
//! median.

use cudasem::cuda::{self, Event, EventFlags};

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
    /// Rows of one batch of the MLP pipeline (`e2e_mlp_pipeline_bf16`).
    pub mlp_rows: usize,
    /// The MLP's model width: columns of a batch and of its output.
    pub mlp_hidden: usize,
    /// The MLP's inner width (the first weight is hidden × ff, the second ff × hidden).
    pub mlp_ff: usize,
    /// Batches per timed pass of the pipeline.
    pub mlp_batches: usize,
    /// Width of the decode step's vector and square weight (`e2e_decode_step`).
    pub decode_hidden: usize,
    /// Decode steps per timed run.
    pub decode_steps: usize,
    /// Graph replays per timed run (`graph_replay_*`).
    pub graph_replays: usize,
    /// Whether these are `--quick`'s sizes (rows with shapes of their own, like the lm-head and
    /// the GPT block, take small ones then).
    pub quick: bool,
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
                mlp_rows: 32,
                mlp_hidden: 64,
                mlp_ff: 256,
                mlp_batches: 4,
                decode_hidden: 256,
                decode_steps: 20,
                graph_replays: 5,
                quick: true,
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
                mlp_rows: 1024,
                mlp_hidden: 4096,
                mlp_ff: 16384,
                mlp_batches: 50,
                decode_hidden: 4096,
                decode_steps: 200,
                graph_replays: 50,
                quick: false,
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

/// Median device ms per call of `f`: `warmup` calls, then `runs` runs of `reps` calls between two
/// timing events recorded on the current stream.
pub fn event_ms(
    warmup: usize,
    runs: usize,
    reps: usize,
    mut f: impl FnMut() -> cudasem::Result<()>,
) -> cudasem::Result<f64> {
    for _ in 0..warmup {
        f()?;
    }
    cuda::synchronize(None)?;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let (start, end) = (Event::new(EventFlags::timing()), Event::new(EventFlags::timing()));
        start.record(None)?;
        for _ in 0..reps {
            f()?;
        }
        end.record(None)?;
        end.synchronize()?;
        times.push(start.elapsed_time(&end)? as f64 / reps as f64);
    }
    Ok(median(times))
}

/// The message of a caught panic (empty when it carried none).
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// The median (the upper one of an even count; NaN for none).
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
        let t = std::time::Instant::now();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_is_the_middle_value_or_the_upper_middle_one() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 3.0);
        assert_eq!(median(vec![f64::INFINITY, -1.0, 5.0]), 5.0);
        assert!(median(Vec::new()).is_nan());
    }
}
