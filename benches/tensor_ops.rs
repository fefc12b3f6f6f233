//! Throughput of tensor ops (`cudasem bench` and `bench/pytorch_bench.py` measure the same figures
//! beside PyTorch).
//!
//! With `CUDASEM_DRIVER=cuda` it measures, timing the device with events (warm-up, then the
//! median of [`RUNS`] runs of [`REPS`] calls each):
//! * `add_f32_2^28`: `a.add(&b)`, TB/s counting 3 × 4 × 2^28 bytes;
//! * `sum_f32_1GiB`: `a.sum_all()` of 2^28 `f32`, TB/s counting 4 × 2^28 bytes;
//! * `matmul_8192_{fp32,tf32,bf16}`: `a.matmul(&b)` of 8192×8192 matrices, TFLOP/s counting
//!   2 × 8192³ (`tf32`: with `cuda::backends::matmul::set_allow_tf32(true)`).
//!
//! (The host cost of a small op, beside a bare launch, is `benches/small_op.rs`.)
//!
//! A table goes to stdout, then one JSON object per figure and line. On the sim driver the sizes
//! shrink (2^16 elements, 128³ products) so that the bench only shows it runs.
//!
//! `TENSOR_OPS_SWEEP=1` adds the add and sum figures for other grid shapes, for tuning (`add@w1`:
//! one wave of grid-stride blocks; `add@vN`: one pass, N vectors per thread; `sum@wN`: a row
//! split over N waves of blocks).

use cudasem::cuda::{self, backends, Event, EventFlags};
use cudasem::{DType, Result, Tensor};

/// Timed runs per device figure.
const RUNS: usize = 15;
/// Calls per timed run (so that the host's work between calls hides behind the device's).
const REPS: usize = 10;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median device milliseconds per call of `f`, timed with events on the current stream around
/// [`REPS`] calls.
fn device_ms(mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..3 {
        f()?;
    }
    cuda::synchronize(None)?;
    let mut times = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let (start, end) = (Event::new(EventFlags::timing()), Event::new(EventFlags::timing()));
        start.record(None)?;
        for _ in 0..REPS {
            f()?;
        }
        end.record(None)?;
        end.synchronize()?;
        times.push(start.elapsed_time(&end)? as f64 / REPS as f64);
    }
    Ok(median(times))
}

struct Figure {
    name: &'static str,
    unit: &'static str,
    value: f64,
}

fn main() -> Result<()> {
    let on_gpu = cuda::driver_name() == "cuda";
    let (n, mm) = if on_gpu { (1usize << 28, 8192usize) } else { (1 << 16, 128) };
    let mut figures = Vec::new();

    let a = Tensor::full([n], 1.0, DType::F32, "cuda")?;
    let b = Tensor::full([n], 2.0, DType::F32, "cuda")?;
    let ms = device_ms(|| a.add(&b).map(drop))?;
    figures.push(Figure { name: "add_f32_2^28", unit: "TB/s", value: 3.0 * 4.0 * n as f64 / (ms * 1e-3) / 1e12 });
    let ms = device_ms(|| a.sum_all().map(drop))?;
    figures.push(Figure { name: "sum_f32_1GiB", unit: "TB/s", value: 4.0 * n as f64 / (ms * 1e-3) / 1e12 });
    if on_gpu && std::env::var("TENSOR_OPS_SWEEP").is_ok_and(|v| v == "1") {
        // (elementwise waves, vectors per thread, reduce waves): the default is (256, 1, 1).
        for (tuning, add_name, sum_name) in [
            ((1, 2, 2), "add_f32_2^28@w1", "sum_f32_1GiB@w2"),
            ((0, 2, 4), "add_f32_2^28@v2", "sum_f32_1GiB@w4"),
            ((0, 4, 1), "add_f32_2^28@v4", "sum_f32_1GiB@w1"),
        ] {
            cudasem::driver::cuda::set_tuning(tuning.0, tuning.1, tuning.2);
            let ms = device_ms(|| a.add(&b).map(drop))?;
            figures.push(Figure { name: add_name, unit: "TB/s", value: 3.0 * 4.0 * n as f64 / (ms * 1e-3) / 1e12 });
            let ms = device_ms(|| a.sum_all().map(drop))?;
            figures.push(Figure { name: sum_name, unit: "TB/s", value: 4.0 * n as f64 / (ms * 1e-3) / 1e12 });
        }
        cudasem::driver::cuda::set_tuning(256, 1, 1);
    }
    drop((a, b));

    let flops = 2.0 * (mm as f64).powi(3);
    for (name, dtype, tf32) in [
        ("matmul_8192_fp32", DType::F32, false),
        ("matmul_8192_tf32", DType::F32, true),
        ("matmul_8192_bf16", DType::BF16, false),
    ] {
        backends::matmul::set_allow_tf32(tf32);
        let x = Tensor::rand([mm, mm], DType::F32, "cuda")?.to_dtype(dtype)?;
        let y = Tensor::rand([mm, mm], DType::F32, "cuda")?.to_dtype(dtype)?;
        let ms = device_ms(|| x.matmul(&y).map(drop))?;
        figures.push(Figure { name, unit: "TFLOP/s", value: flops / (ms * 1e-3) / 1e12 });
    }
    backends::matmul::set_allow_tf32(false);

    println!("tensor_ops on the {} driver ({})", cuda::driver_name(), cuda::get_device_name(None).unwrap_or_default());
    println!("{:<26} {:>12} {:<8}", "figure", "value", "unit");
    for f in &figures {
        println!("{:<26} {:>12.3} {:<8}", f.name, f.value, f.unit);
    }
    for f in &figures {
        println!(
            "{{\"bench\":\"tensor_ops\",\"impl\":\"cudasem\",\"driver\":\"{}\",\"figure\":\"{}\",\"unit\":\"{}\",\"value\":{:.4}}}",
            cuda::driver_name(),
            f.name,
            f.unit,
            f.value
        );
    }
    Ok(())
}
