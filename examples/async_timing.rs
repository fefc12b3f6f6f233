//! Device work is asynchronous: a call queues the work and returns, so a host clock around it
//! measures the queueing, not the work. Events recorded on the stream measure the device's time
//! (`torch.cuda.Event(enable_timing=True)`, `elapsed_time`); a host clock is right only around a
//! synchronize.
//!
//! `cargo run --example async_timing`: on the simulated machine (its streams keep a device clock)
//! or on a real GPU. Exits non-zero if a check fails.
use cudasem::cuda::{self, Event, EventFlags};
use cudasem::testing::delay;
use cudasem::{DType, Tensor};
use std::time::{Duration, Instant};

fn check(ok: bool, what: &str) -> Result<(), String> {
    ok.then_some(()).ok_or_else(|| format!("check failed: {what}"))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let s = cuda::current_stream(None)?;
    let x = Tensor::randn([128, 128], DType::F32, "cuda")?;
    // Warm up: the first use of a kernel compiles and loads it (on a GPU, loading a module waits
    // for the device to go idle), so every kernel below runs once before anything is timed.
    drop(x.matmul(&x)?.softmax(-1)?);
    delay(&s, Duration::from_micros(10))?;
    cuda::synchronize(None)?;

    // 200 ms of device work (a spin kernel of known length), then ten matmuls behind it.
    let work = Duration::from_millis(200);
    let (start, end) = (Event::new(EventFlags::timing()), Event::new(EventFlags::timing()));
    let t0 = Instant::now();
    start.record(None)?;
    delay(&s, work)?;
    let mut y = x.clone();
    for _ in 0..10 {
        y = y.matmul(&x)?.softmax(-1)?;
    }
    end.record(None)?;
    let host_without_sync = t0.elapsed();
    let busy = !s.query()?; // right after the calls: is the stream still working?
    cuda::synchronize(None)?;
    let host_with_sync = t0.elapsed();
    let device_ms = start.elapsed_time(&end)?;
    println!(
        "host clock without synchronize: {:.3} ms (the stream still busy: {busy}); with synchronize: {:.1} ms; events: {device_ms:.1} ms",
        host_without_sync.as_secs_f64() * 1e3,
        host_with_sync.as_secs_f64() * 1e3
    );
    if cuda::driver_name() == "sim" {
        // The host clock is measured; the events read the simulated machine's clock, whose device
        // times are its model (the spin kernel's length, the matmuls at an H200's rates).
        println!("(simulated machine: the event time is modelled, not measured on a GPU; the host clock is real)");
    }
    check(busy, "the calls returned before the work was done")?;
    check(f64::from(device_ms) >= 0.95 * work.as_secs_f64() * 1e3, "the events measured the queued work")?;
    check(
        host_without_sync.as_secs_f64() * 1e3 < f64::from(device_ms),
        "timing without synchronize measured less than the work",
    )?;
    check(host_with_sync.as_secs_f64() * 1e3 >= 0.95 * work.as_secs_f64() * 1e3, "a synchronize waited for the work")?;
    let rows = y.sum(&[-1], false)?.to_vec::<f32>()?; // a host read waits for the work too
    check(rows.iter().all(|r| (r - 1.0).abs() < 1e-3), "softmax rows sum to 1")?;
    Ok(())
}
