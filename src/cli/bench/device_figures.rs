//! cudasem's device figures: bandwidth of `add` and `sum`, matmul throughput, copies (pinned,
//! pageable, peer) and the allocator trace replay. Device time comes from events on the current
//! stream (`device_ms`), except the pageable upload, which is synchronous and timed on the host.

use super::measure::{check, event_ms, median, Sizes, StepResult, Stop};
use cudasem::cuda::memory::{replay_trace, ReplayOptions, Trace};
use cudasem::cuda::{self, backends, AllocatorSettings};
use cudasem::{DType, Device, Tensor};
use std::time::Instant;

/// `peak_live_requested_bytes` of the ResNet-50 trace (bench/traces/README.md): a property of the
/// trace, so a replay that disagrees did not replay it.
const RESNET50_PEAK_LIVE_REQUESTED: usize = 5_762_142_352;
/// `alloc` rows of the ResNet-50 trace.
const RESNET50_ALLOCS: usize = 2539;

/// Measures one device step.
pub fn measure(step: &str, s: &Sizes) -> StepResult {
    match step {
        "add_f32_256m" => add(s),
        "sum_f32_1gib" => sum(s),
        "matmul_fp32_8192" => matmul(s, "matmul_fp32_8192", DType::F32, false),
        "matmul_tf32_8192" => matmul(s, "matmul_tf32_8192", DType::F32, true),
        "matmul_bf16_8192" => matmul(s, "matmul_bf16_8192", DType::BF16, false),
        "h2d_pinned_1gib" => h2d_pinned(s),
        "d2h_pinned_1gib" => d2h_pinned(s),
        "h2d_pageable_1gib" => h2d_pageable(s),
        "p2p_copy_1gib" => p2p(s),
        "replay_resnet50" => replay_resnet50(),
        other => Err(Stop::Fail(format!("no such figure `{other}`"))),
    }
}

/// Median device ms per call of `f` ([`event_ms`] with the figure's repeat counts).
fn device_ms(s: &Sizes, f: impl FnMut() -> cudasem::Result<()>) -> cudasem::Result<f64> {
    event_ms(s.warmup, s.runs, s.reps, f)
}

/// GB/s (10^9 bytes per second) for `bytes` moved in `ms`.
fn gb_per_s(bytes: usize, ms: f64) -> f64 {
    bytes as f64 / (ms * 1e-3) / 1e9
}

/// `n` random f32 in `[0, 1)` on `device`, and the values drawn: operands above [`Sizes::drawn`]
/// elements tile one drawn block on the device (element `i` is `drawn[i % drawn.len()]`), so the
/// host's reference (which reads the values back) stays small.
fn random(s: &Sizes, n: usize, device: Device) -> cudasem::Result<(Tensor, Vec<f32>)> {
    let drawn = s.drawn;
    if n <= drawn || !n.is_multiple_of(drawn) {
        let t = Tensor::rand([n], DType::F32, device)?;
        let drawn = t.to_vec::<f32>()?;
        return Ok((t, drawn));
    }
    let base = Tensor::rand([drawn], DType::F32, device)?;
    let tiled = base.reshape([1, drawn as isize])?.expand([(n / drawn) as isize, drawn as isize])?.contiguous()?;
    Ok((tiled.reshape([n as isize])?, base.to_vec::<f32>()?))
}

/// Checks the first and the last 2^20 elements of the 1-D f32 tensor `t` (all of them when
/// it is smaller) against `want(i)`, bit for bit, naming the first difference.
fn same(what: &str, t: &Tensor, want: impl Fn(usize) -> f32) -> Result<(), Stop> {
    let n = t.numel();
    let m = n.min(1 << 20);
    for start in [0, n - m] {
        let got = t.narrow(0, start, m)?.to_vec::<f32>()?;
        if let Some(i) = (0..m).find(|&i| got[i].to_bits() != want(start + i).to_bits()) {
            let (i, w) = (start + i, want(start + i));
            return Err(Stop::Fail(format!("wrong result: {what}: element {i} is {}, expected {w}", got[i - start])));
        }
    }
    Ok(())
}

/// `a.add(&b)` of two random f32 tensors: GB/s counting 3 × 4 × n bytes.
fn add(s: &Sizes) -> StepResult {
    let n = s.elems;
    let (a, av) = random(s, n, Device::cuda(0))?;
    let (b, bv) = random(s, n, Device::cuda(0))?;
    same("add", &a.add(&b)?, |i| av[i % av.len()] + bv[i % bv.len()])?;
    let ms = device_ms(s, || a.add(&b).map(drop))?;
    Ok(vec![("add_f32_256m", gb_per_s(3 * 4 * n, ms))])
}

/// `a.sum_all()` of a random f32 tensor: GB/s counting 4 × n bytes.
fn sum(s: &Sizes) -> StepResult {
    let n = s.elems;
    let (a, drawn) = random(s, n, Device::cuda(0))?;
    let want = drawn.iter().map(|&x| x as f64).sum::<f64>() * (n / drawn.len()) as f64;
    let got = a.sum_all()?.to_dtype(DType::F64)?.item::<f64>()?;
    check((got - want).abs() <= 1e-4 * want.abs(), || format!("sum gave {got}, the CPU (f64) {want}"))?;
    let ms = device_ms(s, || a.sum_all().map(drop))?;
    Ok(vec![("sum_f32_1gib", gb_per_s(4 * n, ms))])
}

/// Sets `allow_tf32` back to false when dropped, however the figure ends.
struct Tf32Reset;

impl Drop for Tf32Reset {
    fn drop(&mut self) {
        backends::matmul::set_allow_tf32(false);
    }
}

/// `x.matmul(&y)` of random `mm`×`mm` matrices of `dtype`: TFLOP/s counting 2 × mm³. Checked on
/// 32 random entries against an f64 dot product of the (rounded) inputs.
fn matmul(s: &Sizes, name: &'static str, dtype: DType, tf32: bool) -> StepResult {
    let mm = s.mm;
    backends::matmul::set_allow_tf32(tf32);
    let _reset = Tf32Reset;
    let (x, _) = random(s, mm * mm, Device::cuda(0))?;
    let (y, _) = random(s, mm * mm, Device::cuda(0))?;
    let (x, y) = (
        x.reshape([mm as isize, mm as isize])?.to_dtype(dtype)?,
        y.reshape([mm as isize, mm as isize])?.to_dtype(dtype)?,
    );
    {
        let z = x.matmul(&y)?;
        // fp32 accumulates exactly enough for 1e-3; tf32 inputs keep 10 bits, bf16 outputs 8.
        let tol = if dtype == DType::F32 && !tf32 { 1e-3 } else { 2e-2 };
        // 32 entries at random places (the library's generator, as for the operands).
        let at = Tensor::rand([32, 2], DType::F64, "cpu")?.to_vec::<f64>()?;
        for ij in at.chunks(2) {
            let (i, j) = ((ij[0] * mm as f64) as usize, (ij[1] * mm as f64) as usize);
            let row = x.narrow(0, i, 1)?.to_dtype(DType::F32)?.to_vec::<f32>()?;
            let col = y.narrow(1, j, 1)?.to_dtype(DType::F32)?.to_vec::<f32>()?;
            let want: f64 = row.iter().zip(&col).map(|(&a, &b)| a as f64 * b as f64).sum();
            let got = z.narrow(0, i, 1)?.narrow(1, j, 1)?.to_dtype(DType::F64)?.item::<f64>()?;
            check((got - want).abs() <= tol * want.abs().max(1.0), || {
                format!("{name}: entry ({i}, {j}) is {got}, the CPU (f64) {want}")
            })?;
        }
    }
    let ms = device_ms(s, || x.matmul(&y).map(drop))?;
    Ok(vec![(name, 2.0 * (mm as f64).powi(3) / (ms * 1e-3) / 1e12)])
}

/// A pinned host tensor copied into a device tensor with `copy_(…, non_blocking=true)` (what
/// `to("cuda", true)` does, without allocating the destination each time): GB/s.
fn h2d_pinned(s: &Sizes) -> StepResult {
    let n = s.copy_elems;
    let (host, drawn) = random(s, n, Device::Cpu)?;
    let host = host.pin_memory()?;
    let dev = Tensor::empty([n], DType::F32, "cuda")?;
    dev.copy_(&host, true)?;
    same("pinned → device copy", &dev, |i| drawn[i % drawn.len()])?;
    let ms = device_ms(s, || dev.copy_(&host, true))?;
    Ok(vec![("h2d_pinned_1gib", gb_per_s(4 * n, ms))])
}

/// A device tensor copied into a pinned host tensor with `copy_(…, non_blocking=true)`: GB/s.
fn d2h_pinned(s: &Sizes) -> StepResult {
    let n = s.copy_elems;
    let (dev, drawn) = random(s, n, Device::cuda(0))?;
    let host = Tensor::empty_pinned([n], DType::F32)?;
    host.copy_(&dev, true)?;
    same("device → pinned copy", &host, |i| drawn[i % drawn.len()])?;
    let ms = device_ms(s, || host.copy_(&dev, true))?;
    Ok(vec![("d2h_pinned_1gib", gb_per_s(4 * n, ms))])
}

/// A pageable host tensor copied into a device tensor (synchronous, as in PyTorch): host-timed
/// from a synchronized device to the copy's return plus a synchronize; GB/s of the median run.
fn h2d_pageable(s: &Sizes) -> StepResult {
    let n = s.copy_elems;
    let (host, drawn) = random(s, n, Device::Cpu)?;
    let dev = Tensor::empty([n], DType::F32, "cuda")?;
    dev.copy_(&host, false)?;
    same("pageable → device copy", &dev, |i| drawn[i % drawn.len()])?;
    for _ in 0..s.warmup {
        dev.copy_(&host, false)?;
    }
    let mut times = Vec::with_capacity(s.runs);
    for _ in 0..s.runs {
        cuda::synchronize(None)?;
        let t = Instant::now();
        dev.copy_(&host, false)?;
        cuda::synchronize(None)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(vec![("h2d_pageable_1gib", gb_per_s(4 * n, median(times)))])
}

/// cuda:0 → cuda:1 with peer access enabled, event-timed on cuda:0's current stream: GB/s.
fn p2p(s: &Sizes) -> StepResult {
    let count = cuda::device_count();
    if count < 2 {
        return Err(Stop::Skip(format!("needs 2 devices; the {} driver has {count}", cuda::driver_name())));
    }
    if !cuda::can_device_access_peer(0, 1)? {
        return Err(Stop::Skip("cuda:0 cannot access cuda:1 (no peer access)".into()));
    }
    cuda::enable_peer_access(0, 1)?;
    let _g = cuda::DeviceGuard::new(0)?;
    let n = s.copy_elems;
    let (src, drawn) = random(s, n, Device::cuda(0))?;
    let dst = Tensor::empty([n], DType::F32, Device::cuda(1))?;
    dst.copy_(&src, true)?;
    same("cuda:0 → cuda:1 copy", &dst, |i| drawn[i % drawn.len()])?;
    let ms = device_ms(s, || dst.copy_(&src, true))?;
    drop((src, dst));
    cuda::synchronize(Some(1))?;
    cuda::with_device(1, cuda::empty_cache)?;
    Ok(vec![("p2p_copy_1gib", gb_per_s(4 * n, ms))])
}

/// The ResNet-50 trace's `alloc` / `free_completed` rows through cudasem's caching allocator on a
/// simulated H200-sized device (the policy decides the peak, not the device; this is
/// `cudasem replay`): peak reserved bytes. `CUDASEM_ALLOC_CONF` applies.
fn replay_resnet50() -> StepResult {
    let trace = Trace::parse(super::rows::RESNET50_TRACE)?;
    let r =
        replay_trace(&trace, &ReplayOptions { settings: AllocatorSettings::from_env()?, ..ReplayOptions::default() })?;
    check(r.allocs == RESNET50_ALLOCS && r.frees == RESNET50_ALLOCS, || {
        format!("replayed {} allocs and {} frees, the trace has {RESNET50_ALLOCS} of each", r.allocs, r.frees)
    })?;
    check(r.peak_live_requested == RESNET50_PEAK_LIVE_REQUESTED, || {
        format!("peak live requested {} B, the trace's is {RESNET50_PEAK_LIVE_REQUESTED} B", r.peak_live_requested)
    })?;
    check(r.peak_reserved >= r.peak_live_requested, || {
        format!("peak reserved {} B is below the live bytes {} B", r.peak_reserved, r.peak_live_requested)
    })?;
    Ok(vec![("replay_resnet50", r.peak_reserved as f64)])
}
