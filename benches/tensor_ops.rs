//! Throughput of tensor ops (criterion; `cudasem bench` and `bench/pytorch_bench.py` measure the
//! same figures beside PyTorch).
//!
//! Device time comes from events on the current stream around the iterations criterion asks for
//! (criterion's warm-up comes first). Groups:
//! * `tensor_ops/add_f32_2^28`: `a.add(&b)`, throughput counting 3 × 4 × 2^28 bytes;
//! * `tensor_ops/sum_f32_1GiB`: `a.sum_all()` of 2^28 `f32`, counting 4 × 2^28 bytes;
//! * `matmul/8192_{fp32,tf32,bf16}`: `a.matmul(&b)` of 8192×8192 matrices, throughput in elements
//!   = floating-point operations (2 × 8192³; `tf32`: with
//!   `cuda::backends::matmul::set_allow_tf32(true)`).
//!
//! (The host cost of a small op, beside a bare launch, is `benches/small_op.rs`.)
//!
//! On the sim driver the sizes shrink (2^16 elements, 128³ products) so that the bench only shows
//! it runs. `TENSOR_OPS_SWEEP=1` adds the add and sum figures for other grid shapes, for tuning
//! (`add@w1`: one wave of grid-stride blocks; `add@vN`: one pass, N vectors per thread; `sum@wN`: a
//! row split over N waves of blocks).

use criterion::{BenchmarkGroup, Criterion, Throughput};
use cudasem::cuda::{self, backends, Event, EventFlags};
use cudasem::{DType, Result, Tensor};
use std::time::Duration;

/// Device time of `iters` calls of `f`, between two timing events on the current stream.
fn device_time(iters: u64, f: &mut impl FnMut() -> Result<()>) -> Duration {
    let mut run = || -> Result<Duration> {
        let (start, end) = (Event::new(EventFlags::timing()), Event::new(EventFlags::timing()));
        start.record(None)?;
        for _ in 0..iters {
            f()?;
        }
        end.record(None)?;
        end.synchronize()?;
        Ok(Duration::from_secs_f64(start.elapsed_time(&end)? as f64 * 1e-3))
    };
    run().expect("a timed device run")
}

fn bench_device(
    group: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    mut f: impl FnMut() -> Result<()>,
) {
    group.bench_function(name, |b| b.iter_custom(|iters| device_time(iters, &mut f)));
}

fn elementwise(c: &mut Criterion) {
    let on_gpu = cuda::driver_name() == "cuda";
    let n = if on_gpu { 1usize << 28 } else { 1 << 16 };
    let a = Tensor::full([n], 1.0, DType::F32, "cuda").expect("a");
    let b = Tensor::full([n], 2.0, DType::F32, "cuda").expect("b");
    let mut group = c.benchmark_group("tensor_ops");
    let both = |group: &mut BenchmarkGroup<'_, _>, add: &str, sum: &str| {
        group.throughput(Throughput::Bytes(3 * 4 * n as u64));
        bench_device(group, add, || a.add(&b).map(drop));
        group.throughput(Throughput::Bytes(4 * n as u64));
        bench_device(group, sum, || a.sum_all().map(drop));
    };
    both(&mut group, "add_f32_2^28", "sum_f32_1GiB");
    if on_gpu && std::env::var("TENSOR_OPS_SWEEP").is_ok_and(|v| v == "1") {
        // (elementwise waves, vectors per thread, reduce waves): the default is (256, 0, 1).
        for (tuning, add_name, sum_name) in [
            ((1, 2, 2), "add_f32_2^28@w1", "sum_f32_1GiB@w2"),
            ((0, 2, 4), "add_f32_2^28@v2", "sum_f32_1GiB@w4"),
            ((0, 4, 1), "add_f32_2^28@v4", "sum_f32_1GiB@w1"),
        ] {
            cudasem::cuda::set_launch_tuning(tuning.0, tuning.1, tuning.2);
            both(&mut group, add_name, sum_name);
        }
        cudasem::cuda::set_launch_tuning(256, 0, 1);
    }
    group.finish();
}

fn matmul(c: &mut Criterion) {
    let mm = if cuda::driver_name() == "cuda" { 8192usize } else { 128 };
    let mut group = c.benchmark_group("matmul");
    group.throughput(Throughput::Elements(2 * (mm as u64).pow(3)));
    for (name, dtype, tf32) in
        [("8192_fp32", DType::F32, false), ("8192_tf32", DType::F32, true), ("8192_bf16", DType::BF16, false)]
    {
        backends::matmul::set_allow_tf32(tf32);
        let x = Tensor::rand([mm, mm], DType::F32, "cuda").and_then(|t| t.to_dtype(dtype)).expect("x");
        let y = Tensor::rand([mm, mm], DType::F32, "cuda").and_then(|t| t.to_dtype(dtype)).expect("y");
        bench_device(&mut group, name, || x.matmul(&y).map(drop));
    }
    backends::matmul::set_allow_tf32(false);
    group.finish();
}

fn main() {
    println!("tensor_ops on the {} driver ({})", cuda::driver_name(), cuda::get_device_name(None).unwrap_or_default());
    let mut c = Criterion::default().configure_from_args();
    elementwise(&mut c);
    matmul(&mut c);
    c.final_summary();
}
