//! Helpers shared by the random-number tests (`random.rs`, `random_sampling.rs`).
#![allow(dead_code)]

use cudasem::cuda::Generator;
use cudasem::{testing, DType, Device, Result, Tensor};
use half::{bf16, f16};
use std::sync::Mutex;

/// Tests that seed or read the default generators run one at a time.
/// One test at a time: a capture in Global mode (the graph tests) refuses blocking calls from
/// every thread of the process, so no other test may draw and read while one captures.
static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The devices each draw is checked on: the host and the driver's device 0.
pub fn devices() -> Vec<Device> {
    let mut v = vec![Device::Cpu];
    if testing::has_devices(1) {
        v.push(Device::cuda(0));
    }
    v
}

/// `2^-k`.
pub fn p2(k: i32) -> f64 {
    2f64.powi(-k)
}

/// The elements as `f64`.
pub fn read(t: &Tensor) -> Result<Vec<f64>> {
    Ok(match t.dtype() {
        DType::F32 => t.to_vec::<f32>()?.into_iter().map(f64::from).collect(),
        DType::F16 => t.to_vec::<f16>()?.into_iter().map(f16::to_f64).collect(),
        DType::BF16 => t.to_vec::<bf16>()?.into_iter().map(bf16::to_f64).collect(),
        DType::F64 => t.to_vec::<f64>()?,
        DType::I64 => t.to_vec::<i64>()?.into_iter().map(|x| x as f64).collect(),
        DType::I32 => t.to_vec::<i32>()?.into_iter().map(f64::from).collect(),
        DType::U8 => t.to_vec::<u8>()?.into_iter().map(f64::from).collect(),
        DType::Bool => t.to_vec::<bool>()?.into_iter().map(|b| f64::from(u8::from(b))).collect(),
    })
}

/// A generator on `device` seeded with `seed`.
pub fn generator(device: Device, seed: u64) -> Result<Generator> {
    let g = Generator::new(device)?;
    g.manual_seed(seed);
    Ok(g)
}
