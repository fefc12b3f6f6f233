//! A pipeline that keeps the device busy: while the current batch computes on the main stream, a
//! side stream uploads the next one from pinned memory with a non-blocking copy. The main stream
//! waits for its batch (`wait_stream`), and `record_stream` tells the caching allocator that the
//! batch, allocated on the side stream, is used on the main one — so its memory is not handed to
//! the next upload while the main stream still reads it.
//!
//! `cargo run --example pinned_pipeline`: on the simulated machine or a real GPU. Checks the
//! results against a float64 computation on the host, that uploads overlapped compute (by the
//! device's events), and that a freed batch was not reused under the main stream's feet. Exits
//! non-zero if a check fails.
use cudasem::cuda::{self, Event, EventFlags, Stream};
use cudasem::testing::delay;
use cudasem::{DType, Tensor};
use std::time::Duration;

const BATCHES: usize = 6;
const ROWS: usize = 512;
const COLS: usize = 256;

fn check(ok: bool, what: &str) -> Result<(), String> {
    ok.then_some(()).ok_or_else(|| format!("check failed: {what}"))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    cudasem::manual_seed(7);
    let main_s = cuda::current_stream(None)?;
    let side = Stream::new(None, 0)?;
    let w = Tensor::randn([COLS, 8], DType::F32, "cuda")?;
    let w_host: Vec<f64> = w.to_vec::<f32>()?.into_iter().map(f64::from).collect();
    // The batches, in pinned (page-locked) host memory: what makes the copies asynchronous.
    let host: Vec<Tensor> =
        (0..BATCHES).map(|_| Tensor::randn([ROWS, COLS], DType::F32, "cpu")?.pin_memory()).collect::<Result<_, _>>()?;
    let upload = |i: usize| -> cudasem::Result<(Tensor, Event, Event)> {
        let (start, done) = (Event::new(EventFlags::timing()), Event::new(EventFlags::timing()));
        let batch = cuda::with_stream(&side, || {
            start.record(None)?;
            let b = host[i].to("cuda", true)?; // queued on `side`; returns at once
            done.record(None)?;
            Ok(b)
        })?;
        Ok((batch, start, done))
    };

    let mut next = Some(upload(0)?);
    let (mut sums, mut pairs, mut reused_early) = (Vec::new(), Vec::new(), false);
    for i in 0..BATCHES {
        let (batch, _, uploaded) = next.take().expect("uploaded");
        main_s.wait_event(&uploaded)?; // the main stream waits for its batch, the host does not
        batch.record_stream(&main_s)?; // used on main: not reused before main's work is done
        let freed_at = batch.data_ptr();
        delay(&main_s, Duration::from_millis(5))?; // the rest of a training step
        let out = batch.matmul(&w)?.sum(&[0], false)?;
        let computed = main_s.record_event(Some(&Event::new(EventFlags::timing())))?;
        drop(batch); // freed now, but main still reads it
        if i + 1 < BATCHES {
            let (b, start, done) = upload(i + 1)?; // overlaps this batch's compute
            reused_early |= b.data_ptr() == freed_at && !computed.query()?;
            pairs.push((start.clone(), computed));
            next = Some((b, start, done));
        }
        sums.push(out); // read after the loop: the host runs ahead of the device
    }

    cuda::synchronize(None)?;
    // By the device's clock: did the next upload start before this batch's compute ended?
    let overlapped =
        pairs.iter().filter(|(start, computed)| start.elapsed_time(computed).is_ok_and(|ms| ms > 0.0)).count();
    for (i, out) in sums.iter().enumerate() {
        let got = out.to_vec::<f32>()?;
        let x: Vec<f64> = host[i].to_vec::<f32>()?.into_iter().map(f64::from).collect();
        for (j, &g) in got.iter().enumerate() {
            let want: f64 =
                (0..ROWS).map(|r| (0..COLS).map(|k| x[r * COLS + k] * w_host[k * 8 + j]).sum::<f64>()).sum();
            check((f64::from(g) - want).abs() <= 1e-3 * (1.0 + want.abs()), &format!("batch {i}, column {j}"))?;
        }
    }
    println!("{BATCHES} batches of {ROWS}×{COLS} f32: results match the host's float64 sums");
    println!("uploads that started while the previous batch still computed: {overlapped} of {}", BATCHES - 1);
    check(overlapped >= 1, "the side stream's uploads overlapped the main stream's compute")?;
    check(!reused_early, "a batch's memory was reused while the main stream still read it")?;
    println!("no batch's memory was handed to an upload while the main stream still read it (record_stream)");
    Ok(())
}
