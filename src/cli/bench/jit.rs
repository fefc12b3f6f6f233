//! The jiterator rows (`cuda::jiterator`), beside `torch.cuda.jiterator` in
//! `bench/pytorch_jit.py` (run by `bench/pytorch_bench.py` for these steps):
//!
//! * `jit_swiglu_bf16`: device µs of a fused SwiGLU, `x / (1 + exp(-x)) * y` as a jiterator
//!   function, on bf16 [8192, 14336] (PyTorch: its jiterator with the same code string);
//!   `jit_swiglu_bf16_eager` is the same cudasem figure beside PyTorch's eager
//!   `F.silu(x) * y`. `--quick` (and the simulated machine): [64, 1024].
//! * `jit_small_call_host`: host ns per call of `-x + alpha * y` (one scalar) on 16 f32 elements.
//! * `jit_first_call_cold`: ms from making a function whose code was never compiled to its first
//!   result (compile, load, launch, synchronize); `jit_first_call_warm`: the same for a new
//!   function of code compiled before (found in the process's caches); `jit_first_call_warm_disk`:
//!   the same in a fresh process whose disk cache holds the code (this binary run as a child,
//!   `cudasem jit-first-call CODE`, timing from after its runtime started: the compile is found
//!   on disk and only loaded).
//!
//! Every result is checked against a float64 reference before it is timed.

use super::measure::{check, event_ms, host_ns, median, Sizes, StepResult};
use cudasem::cuda::{self, jiterator};
use cudasem::{DType, Tensor};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// PyTorch's code string, the same in `bench/pytorch_jit.py`.
pub const SWIGLU: &str = "template <typename T> T swiglu(T x, T y) { return x / (T(1) + exp(-x)) * y; }";
const AXPY: &str = "template <typename T> T axpy(T x, T y, T alpha) { return -x + alpha * y; }";

/// The rows of `step`.
pub fn measure(step: &str, s: &Sizes) -> StepResult {
    match step {
        "jit_swiglu" => swiglu(s),
        "jit_small_call" => small_call(s),
        _ => first_call(s),
    }
}

/// The SwiGLU's shape: the issue's [8192, 14336], or a small one for `--quick`.
fn swiglu_shape(s: &Sizes) -> [usize; 2] {
    if s.elems < 1 << 20 {
        [64, 1024]
    } else {
        [8192, 14336]
    }
}

fn to_f64(t: &Tensor) -> cudasem::Result<Vec<f64>> {
    t.to_dtype(DType::F64)?.to_vec::<f64>()
}

fn swiglu(s: &Sizes) -> StepResult {
    let shape = swiglu_shape(s);
    let x = Tensor::randn(shape, DType::F32, "cuda")?.to_dtype(DType::BF16)?;
    let y = Tensor::randn(shape, DType::F32, "cuda")?.to_dtype(DType::BF16)?;
    let f = jiterator::create_jit_fn(SWIGLU, &[])?;
    let out = f.call(&[&x, &y], &[])?;
    // The first and last rows against float64 over the bf16 inputs (one bf16 rounding).
    for row in [0, shape[0] - 1] {
        let pick = |t: &Tensor| t.narrow(0, row, 1).and_then(|r| to_f64(&r));
        let (xs, ys, got) = (pick(&x)?, pick(&y)?, pick(&out)?);
        for (i, ((a, b), g)) in xs.iter().zip(&ys).zip(&got).enumerate() {
            let want = a / (1.0 + (-a).exp()) * b;
            check((g - want).abs() <= (1.0 / 256.0 + 1e-5) * want.abs().max(1e-3), || {
                format!("swiglu row {row} element {i}: {g}, the float64 reference {want}")
            })?;
        }
    }
    let ms = event_ms(s.warmup, s.runs, s.reps, || f.call(&[&x, &y], &[]).map(drop))?;
    Ok(vec![("jit_swiglu_bf16", ms * 1e3), ("jit_swiglu_bf16_eager", ms * 1e3)])
}

fn small_call(s: &Sizes) -> StepResult {
    let x = Tensor::randn([16], DType::F32, "cuda")?;
    let y = Tensor::randn([16], DType::F32, "cuda")?;
    let f = jiterator::create_jit_fn(AXPY, &[("alpha", 2.0)])?;
    let (xs, ys, got) = (to_f64(&x)?, to_f64(&y)?, to_f64(&f.call(&[&x, &y], &[])?)?);
    for (i, ((a, b), g)) in xs.iter().zip(&ys).zip(&got).enumerate() {
        let want = -a + 2.0 * b;
        check((g - want).abs() <= 1e-6 * want.abs().max(1.0), || format!("axpy element {i}: {g}, want {want}"))?;
    }
    let ns = host_ns(s.small_runs, s.small_ops, || f.call(&[&x, &y], &[]).map(drop))?;
    Ok(vec![("jit_small_call_host", ns)])
}

/// Functions made by this process's cold runs (each code string new).
static COLD: AtomicUsize = AtomicUsize::new(0);

/// Ms from making a function of `code` to its first result, checked.
fn first(code: &str, x: &Tensor, want: &[f64]) -> Result<f64, super::measure::Stop> {
    cuda::synchronize(None)?;
    let t = Instant::now();
    let f = jiterator::create_jit_fn(code, &[("alpha", 2.0)])?;
    let out = f.call(&[x, x], &[])?;
    cuda::synchronize(None)?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let got = to_f64(&out)?;
    check(got.iter().zip(want).all(|(g, w)| (g - w).abs() <= 1e-6 * w.abs().max(1.0)), || {
        format!("a first call gave {:?}, want {:?}", &got[..4], &want[..4])
    })?;
    Ok(ms)
}

fn first_call(s: &Sizes) -> StepResult {
    let x = Tensor::randn([16], DType::F32, "cuda")?;
    let want: Vec<f64> = to_f64(&x)?.iter().map(|a| -a + 2.0 * a).collect();
    let (mut cold, mut warm, mut last) = (Vec::new(), Vec::new(), None);
    for _ in 0..s.runs {
        // A name never compiled (by this process or an earlier one): a cold compile.
        let nonce = format!(
            "{}_{}_{}",
            std::process::id(),
            COLD.fetch_add(1, Ordering::Relaxed),
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
        );
        let code = AXPY.replace("axpy", &format!("axpy_{nonce}"));
        cold.push(first(&code, &x, &want)?);
        warm.push(first(&code, &x, &want)?);
        last = Some(code);
    }
    // The last code string is in the disk cache now: fresh processes find it there.
    let code = last.unwrap_or_else(|| AXPY.to_owned());
    let disk = (0..s.runs.clamp(1, 5)).map(|_| child_ms(&code)).collect::<Result<Vec<f64>, _>>()?;
    Ok(vec![
        ("jit_first_call_cold", median(cold)),
        ("jit_first_call_warm", median(warm)),
        ("jit_first_call_warm_disk", median(disk)),
    ])
}

/// Runs this binary as `jit-first-call CODE` (same environment: driver, kernel cache) and reads
/// the ms it prints.
fn child_ms(code: &str) -> Result<f64, super::measure::Stop> {
    use super::measure::Stop;
    let exe = std::env::current_exe().map_err(|e| Stop::Skip(format!("cannot find this binary: {e}")))?;
    let out = std::process::Command::new(exe)
        .args(["jit-first-call", code])
        .output()
        .map_err(|e| Stop::Skip(format!("cannot run this binary as a child: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    match (out.status.success(), text.trim().parse::<f64>()) {
        (true, Ok(ms)) => Ok(ms),
        _ => Err(Stop::Fail(format!(
            "the child `cudasem jit-first-call` failed ({}): {}{}",
            out.status,
            text.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))),
    }
}

/// The child of [`child_ms`]: starts the runtime (a tensor on the device, synchronized), then
/// prints the ms of making a function of `code` and its first checked result.
pub fn first_call_child(code: &str) -> std::process::ExitCode {
    let run = || -> Result<f64, super::measure::Stop> {
        let x = Tensor::randn([16], DType::F32, "cuda")?;
        let want: Vec<f64> = to_f64(&x)?.iter().map(|a| -a + 2.0 * a).collect();
        first(code, &x, &want)
    };
    match run() {
        Ok(ms) => {
            println!("{ms}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("jit-first-call: {e:?}");
            std::process::ExitCode::FAILURE
        }
    }
}
