//! The tour's memory sections: the caching allocator at work, and an out-of-memory recovered from.

use super::section::{check, e, Failure, Outcome};
use cudasem::cuda;
use cudasem::cuda::memory::format_bytes;
use cudasem::Error;
use std::time::Instant;

fn stat(key: &str) -> Result<i64, Failure> {
    let s = cuda::memory_stats(None).map_err(e)?;
    s.get(key).ok_or_else(|| format!("memory_stats has no key {key}"))
}

fn line(label: &str) -> Result<(), Failure> {
    println!(
        "   {label:<28} allocated {:>10}  reserved {:>10}  driver allocs {:>3}  driver frees {:>3}",
        format_bytes(cuda::memory_allocated(None).map_err(e)?),
        format_bytes(cuda::memory_reserved(None).map_err(e)?),
        stat("num_device_alloc")?,
        stat("num_device_free")?
    );
    Ok(())
}

/// A freed block stays reserved; a new one reuses it without a driver call; `empty_cache` returns it.
pub fn caching_allocator() -> Result<Outcome, Failure> {
    const SIZE: usize = 256 << 20;
    cuda::empty_cache().map_err(e)?;
    let (alloc0, reserved0) = (cuda::memory_allocated(None).map_err(e)?, cuda::memory_reserved(None).map_err(e)?);
    line("start")?;
    let t = Instant::now();
    let p = cuda::caching_allocator_alloc(SIZE, None, None).map_err(e)?;
    let first = t.elapsed();
    let drivers = stat("num_device_alloc")?;
    line("after alloc(256 MiB)")?;
    cuda::caching_allocator_delete(p).map_err(e)?;
    line("after free")?;
    check(cuda::memory_allocated(None).map_err(e)? == alloc0, || "freeing did not lower memory_allocated".into())?;
    check(cuda::memory_reserved(None).map_err(e)? >= reserved0 + SIZE, || {
        "the freed block was not kept reserved".into()
    })?;
    let t = Instant::now();
    let q = cuda::caching_allocator_alloc(SIZE, None, None).map_err(e)?;
    let again = t.elapsed();
    line("after alloc(256 MiB) again")?;
    check(q == p, || format!("the cached block was not reused ({p:#x} then {q:#x})"))?;
    check(stat("num_device_alloc")? == drivers, || "the second allocation called the driver".into())?;
    cuda::caching_allocator_delete(q).map_err(e)?;
    const N: u32 = 20_000;
    let t = Instant::now();
    for _ in 0..N {
        let b = cuda::caching_allocator_alloc(SIZE, None, None).map_err(e)?;
        cuda::caching_allocator_delete(b).map_err(e)?;
    }
    let pair = t.elapsed() / N;
    println!(
        "   first alloc (driver call): {:.1} µs; the same size again from the cache: {:.2} µs; a cached alloc+free pair: {} ns",
        first.as_secs_f64() * 1e6,
        again.as_secs_f64() * 1e6,
        pair.as_nanos()
    );
    cuda::empty_cache().map_err(e)?;
    line("after empty_cache()")?;
    check(cuda::memory_reserved(None).map_err(e)? == reserved0, || {
        "empty_cache did not return the cached segment".into()
    })?;
    Ok(Outcome::Ok)
}

/// A request that cannot fit fails with PyTorch's message; one that fits only without the cache
/// succeeds after the allocator frees its cached segments; the device stays usable.
pub fn out_of_memory() -> Result<Outcome, Failure> {
    let (_, total) = cuda::mem_get_info(None).map_err(e)?;
    let ooms = stat("num_ooms")?;
    match cuda::caching_allocator_alloc(2 * total, None, None) {
        Err(err @ Error::OutOfMemory { .. }) => println!("   alloc({}) → {err}", format_bytes(2 * total)),
        other => return Err(format!("allocating twice the device's memory should be OutOfMemory, got {other:?}")),
    }
    check(stat("num_ooms")? == ooms + 1, || "num_ooms did not count the failure".into())?;

    // Fill the cache with two freed blocks, then ask for more than the driver has left: the
    // allocator must give its cached segments back and retry.
    let (free, _) = cuda::mem_get_info(None).map_err(e)?;
    let chunk = (free / 5 * 2) & !((2 << 20) - 1);
    let a = cuda::caching_allocator_alloc(chunk, None, None).map_err(e)?;
    let b = cuda::caching_allocator_alloc(chunk, None, None).map_err(e)?;
    cuda::caching_allocator_delete(a).map_err(e)?;
    cuda::caching_allocator_delete(b).map_err(e)?;
    let (retries, frees) = (stat("num_alloc_retries")?, stat("num_device_free")?);
    let big = chunk / 2 * 3;
    println!(
        "   cache holds 2 × {} freed; driver has {} free; asking for {}",
        format_bytes(chunk),
        format_bytes(cuda::mem_get_info(None).map_err(e)?.0),
        format_bytes(big)
    );
    let c = cuda::caching_allocator_alloc(big, None, None).map_err(e)?;
    let (retried, freed) = (stat("num_alloc_retries")? - retries, stat("num_device_free")? - frees);
    println!(
        "   → succeeded by giving {freed} cached segment(s) back to the driver (num_alloc_retries +{retried}); reserved now {}",
        format_bytes(cuda::memory_reserved(None).map_err(e)?)
    );
    check(freed >= 1, || "the allocation fit only without the cache, yet no cached segment was freed".into())?;
    cuda::caching_allocator_delete(c).map_err(e)?;
    cuda::empty_cache().map_err(e)?;
    let p = cuda::caching_allocator_alloc(64 << 20, None, None).map_err(e)?;
    cuda::caching_allocator_delete(p).map_err(e)?;
    println!("   the device is still usable: a 64 MiB block came and went");
    Ok(Outcome::Ok)
}
