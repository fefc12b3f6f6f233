//! Adversarial schedules on the simulated machine (`CUDASEM_SIM_SCHEDULE=adversarial:SEED`,
//! `testing::set_sim_schedule`): streams' work is held back in hostile but legal orders. The
//! pinned pipeline (copy in on a side stream, `wait_stream`, compute on the current one,
//! `record_stream`) gives the float64 CPU reference's numbers under every seed; with its
//! `wait_stream` removed, some seed gives wrong ones — on any machine, every time. On real GPUs
//! the schedule setting has no effect: there the correct pipeline is checked alone.

mod common;

use cudasem::cuda::{self, Stream, StreamGuard};
use cudasem::{testing, Device, Result, Tensor};
use std::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::new(());

const BATCHES: usize = 6;
const N: usize = 4096;

/// Batch `b`'s host data: varied values, never zero.
fn batch(b: usize) -> Vec<f32> {
    (0..N).map(|i| (((i * 7919 + b * 104_729) % 1000) as f32) * 0.01 + 0.5).collect()
}

/// Each batch's `sum(2x + 1)` in float64.
fn reference() -> Vec<f64> {
    (0..BATCHES).map(|b| batch(b).iter().map(|&v| 2.0 * f64::from(v) + 1.0).sum()).collect()
}

/// The pinned pipeline; `wait` false leaves out its `wait_stream` (the bug).
fn pipeline(copy: &Stream, wait: bool) -> Result<Vec<f64>> {
    let main = cuda::current_stream(0)?;
    let mut sums = Vec::new();
    for b in 0..BATCHES {
        let pinned = Tensor::from_slice(&batch(b), [N], Device::Cpu)?.pin_memory()?;
        let dev = {
            let _g = StreamGuard::new(copy)?;
            pinned.to(Device::cuda(0), true)?
        };
        if wait {
            main.wait_stream(copy)?;
        }
        dev.record_stream(&main)?;
        let out = dev.mul(2.0)?.add(1.0)?.sum_all()?;
        sums.push(f64::from(out.item::<f32>()?));
    }
    Ok(sums)
}

fn close(got: &[f64], want: &[f64]) -> bool {
    got.iter().zip(want).all(|(g, w)| (g - w).abs() <= 1e-4 * w.abs())
}

#[test]
fn the_pinned_pipeline_gives_the_reference_under_every_seed() -> Result<()> {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !common::one_device() {
        return Ok(());
    }
    let copy = Stream::new(0, 0)?;
    let want = reference();
    let default = pipeline(&copy, true)?;
    assert!(close(&default, &want), "{default:?} vs {want:?}");
    for seed in 0..12 {
        testing::set_sim_schedule(Some(seed));
        let got = pipeline(&copy, true);
        testing::set_sim_schedule(None);
        assert_eq!(got?, default, "seed {seed} changed the numbers of a correct program");
    }
    Ok(())
}

#[test]
fn without_its_wait_stream_some_seed_breaks_the_pipeline() -> Result<()> {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !common::one_device() || !common::is_sim() {
        return Ok(()); // the schedule is the simulated machine's
    }
    let copy = Stream::new(0, 0)?;
    let want = reference();
    let mut broken = None;
    for seed in 0..16 {
        testing::set_sim_schedule(Some(seed));
        let got = pipeline(&copy, false);
        testing::set_sim_schedule(None);
        cuda::synchronize(0)?;
        if !close(&got?, &want) {
            broken = Some(seed);
            break;
        }
    }
    assert!(broken.is_some(), "no seed exposed the missing wait_stream");
    // Reproducible: the seed that broke it breaks it again.
    let seed = broken.unwrap();
    testing::set_sim_schedule(Some(seed));
    let again = pipeline(&copy, false);
    testing::set_sim_schedule(None);
    cuda::synchronize(0)?;
    assert!(!close(&again?, &want), "seed {seed} broke the pipeline once, not twice");
    Ok(())
}
