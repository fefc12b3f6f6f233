//! The caching allocator keeps freed device memory for reuse: after tensors are dropped,
//! `memory_allocated` falls but `memory_reserved` stays, a new tensor of the size takes the cached
//! block without asking the driver, and `empty_cache` gives the unused segments back
//! (`torch.cuda.empty_cache`, `memory_summary`).
//!
//! `cargo run --example empty_cache`: on the simulated machine or a real GPU. Exits non-zero if a
//! check fails.
use cudasem::cuda::{self, memory::format_bytes};
use cudasem::{DType, Tensor};

fn check(ok: bool, what: &str) -> Result<(), String> {
    ok.then_some(()).ok_or_else(|| format!("check failed: {what}"))
}

fn stat(key: &str) -> Result<i64, Box<dyn std::error::Error>> {
    Ok(cuda::memory_stats(None)?.get(key).ok_or(format!("no statistic {key}"))?)
}

fn line(when: &str) -> Result<(usize, usize), Box<dyn std::error::Error>> {
    let (a, r) = (cuda::memory_allocated(None)?, cuda::memory_reserved(None)?);
    println!("{when:<34} allocated {:>10}   reserved {:>10}", format_bytes(a), format_bytes(r));
    Ok((a, r))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    cuda::empty_cache()?;
    let (a0, r0) = line("start")?;
    let tensors: Vec<Tensor> =
        (0..4).map(|_| Tensor::zeros([4 << 20], DType::F32, "cuda")).collect::<Result<_, _>>()?;
    let (a1, r1) = line("four 16 MiB tensors")?;
    check(a1 - a0 == 4 * (16 << 20) && r1 >= a1, "allocated counts the tensors, reserved holds them")?;
    let drivers = stat("num_device_alloc")?;
    drop(tensors);
    let (a2, r2) = line("dropped")?;
    check(a2 == a0 && r2 == r1, "dropping frees the blocks into the cache: reserved stays")?;
    let again = Tensor::ones([4 << 20], DType::F32, "cuda")?;
    line("one 16 MiB tensor again")?;
    check(stat("num_device_alloc")? == drivers, "the cached block was reused without the driver")?;
    check(again.sum_all()?.item::<f32>()? == (4 << 20) as f32, "the reused memory holds the new tensor")?;
    println!("\n{}", cuda::memory_summary(None)?);
    drop(again);
    let frees = stat("num_device_free")?;
    cuda::empty_cache()?;
    let (_, r3) = line("empty_cache()")?;
    check(r3 == r0, "empty_cache gave every unused segment back")?;
    check(stat("num_device_free")? > frees, "the driver got the memory back")?;
    Ok(())
}
