//! Tensors of two devices: an op mixing them is an error naming both devices, a copy (`to`) moves
//! one across, and once peer access is enabled (`can_device_access_peer`, then
//! `enable_peer_access`) the op runs on the first operand's device and reads the other's memory
//! directly.
//!
//! `cargo run --example cross_device`: on the simulated machine (two devices, peer access between
//! them by default; `CUDASEM_SIM_PEER=none` shows a machine without it) or on real GPUs; with one
//! GPU there is nothing to cross, and it says so (`CUDASEM_REQUIRE_GPU=2` makes that a failure).
//! Exits non-zero if a check fails.
use cudasem::cuda;
use cudasem::{DType, Device, Error, Tensor};

fn check(ok: bool, what: &str) -> Result<(), String> {
    ok.then_some(()).ok_or_else(|| format!("check failed: {what}"))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if !cudasem::testing::has_devices(2) {
        println!("not shown: the cross-device error and peer access (they need two devices)");
        return Ok(());
    }
    cudasem::manual_seed(15);
    let a = Tensor::randn([256], DType::F32, "cuda:0")?;
    let b = Tensor::randn([256], DType::F32, "cuda:1")?;
    let expected: Vec<f32> = a.to_vec::<f32>()?.iter().zip(b.to_vec::<f32>()?).map(|(x, y)| x + y).collect();

    match &a + &b {
        Err(e @ Error::DeviceMismatch { .. }) => println!("a (cuda:0) + b (cuda:1) → {e}"),
        other => return Err(format!("expected Error::DeviceMismatch, got {other:?}").into()),
    }
    let moved = (&a + &b.to("cuda:0", false)?)?; // a copy between devices always works
    check(moved.device() == Device::cuda(0) && moved.to_vec::<f32>()? == expected, "a + b.to(cuda:0)")?;
    println!("a + b.to(\"cuda:0\") → on {}, equal to the host's sums", moved.device());

    let peer = cuda::can_device_access_peer(0, 1)?;
    println!("can_device_access_peer(0, 1) = {peer}");
    if !peer {
        println!("this machine has no peer access between cuda:0 and cuda:1: the op stays an error, copies still work");
        return Ok(());
    }
    cuda::enable_peer_access(0, 1)?;
    let direct = (&a + &b)?; // runs on cuda:0, reading b over the peer link
    println!("after enable_peer_access(0, 1): a + b → on {}", direct.device());
    check(direct.device() == Device::cuda(0) && direct.to_vec::<f32>()? == expected, "a + b with peer access")?;
    Ok(())
}
