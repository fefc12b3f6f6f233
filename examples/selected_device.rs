//! The selected (current) device: each thread has one, `DeviceGuard` changes it for a scope and
//! restores it, tensors made on `"cuda"` land on it, and ops follow their tensors whatever the
//! current device is (`torch.cuda.device`, `torch.cuda.set_device`).
//!
//! `cargo run --example selected_device`: on the simulated machine (two devices by default) or on
//! real GPUs; with one GPU the part that needs two devices says so and is skipped
//! (`CUDASEM_REQUIRE_GPU=2` turns that skip into a failure). Exits non-zero if a check fails.
use cudasem::cuda::{self, DeviceGuard};
use cudasem::{DType, Device, Tensor};

fn check(ok: bool, what: &str) -> Result<(), String> {
    ok.then_some(()).ok_or_else(|| format!("check failed: {what}"))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let last = cuda::device_count() - 1;
    println!(
        "{} driver, {} device(s); this thread is on cuda:{}",
        cuda::driver_name(),
        last + 1,
        cuda::current_device()?
    );
    check(cuda::current_device()? == 0, "a thread starts on cuda:0")?;

    let x = Tensor::ones([4], DType::F32, "cuda")?;
    let y = {
        let _g = DeviceGuard::new(last)?; // `with torch.cuda.device(last):`
        check(cuda::current_device()? == last, "the guard selects the device")?;
        Tensor::ones([4], DType::F32, "cuda")? // no index: the current device
    };
    println!("x made on \"cuda\" → {}; y made under DeviceGuard({last}) → {}", x.device(), y.device());
    check(x.device() == Device::cuda(0) && y.device() == Device::cuda(last), "tensors land on the current device")?;
    check(cuda::current_device()? == 0, "the guard restored cuda:0 when it dropped")?;

    let other = std::thread::spawn(move || cuda::with_device(last, cuda::current_device)).join().expect("no panic")?;
    check(other == last && cuda::current_device()? == 0, "with_device in another thread leaves this one alone")?;

    if !cudasem::testing::has_devices(2) {
        println!("not shown: an op following its tensors to another device (it needs two)");
        return Ok(());
    }
    // Ops run where their tensors live, on that device's current stream; so does the result.
    let z = cuda::with_device(0, || {
        let z = (&y * 3.0)?.sum_all()?; // y lives on cuda:last, the current device is cuda:0
        Ok::<_, cudasem::Error>(z)
    })?;
    println!("under cuda:0, (y * 3).sum() of y on {} → {} on {}", y.device(), z.item::<f32>()?, z.device());
    check(z.device() == Device::cuda(last) && z.item::<f32>()? == 12.0, "the op ran on its tensor's device")?;
    Ok(())
}
