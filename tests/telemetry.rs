//! NVML's readings under PyTorch's names and `get_device_properties`' fields, on both drivers.
//!
//! Properties checked:
//! - every device reports PyTorch's `_CudaDeviceProperties` fields with values that hold on any
//!   NVIDIA GPU (warps of 32, 1024 threads a block, a 36-character UUID, distinct per device,
//!   shared memory and register limits ordered as the hardware orders them), and its `Display` is
//!   PyTorch's repr;
//! - the simulated machine's properties come from its `SimGpu` and follow `CUDA_VISIBLE_DEVICES`;
//! - utilization rises while a stream is busy and (on the sim, where nothing else runs) falls to
//!   zero a sample period after; an injected delay touches no memory, so the sim's memory traffic
//!   stays zero under it;
//! - device memory used follows an allocation (exactly the reserved bytes on the sim);
//! - readings a simulation cannot know are `Error::NotSupported`, never a zero; on a GPU they are
//!   plausible (10..=110 °C, power and clock above zero);
//! - a bad device index is `Error::InvalidDevice` for every reading.

mod common;

use cudasem::cuda;
use cudasem::driver::sim::{SimConfig, SimDriver, SimGpu};
use cudasem::driver::Driver;
use cudasem::{DType, Error, Tensor};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The readings are of whole devices: the tests that read them take turns.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn place(d: usize) -> String {
    format!("cuda:{d}")
}

/// Longer than the simulated machine's sample period (200 ms) and one bucket of it.
const PAST_A_PERIOD: Duration = Duration::from_millis(300);

#[test]
fn every_device_reports_pytorchs_properties() -> cudasem::Result<()> {
    if !common::one_device() {
        return Ok(());
    }
    let mut uuids = Vec::new();
    for d in 0..cuda::device_count() {
        let p = cuda::get_device_properties(d)?;
        assert_eq!(p, cuda::get_device_properties(format!("cuda:{d}").as_str())?);
        assert_eq!(cuda::get_device_name(d)?, p.name);
        assert_eq!(p.warp_size, 32, "{p:?}");
        assert_eq!(p.max_threads_per_block, 1024, "{p:?}");
        assert!(p.multi_processor_count > 0 && p.major >= 5, "{p:?}");
        assert!(p.max_threads_per_multi_processor >= p.max_threads_per_block, "{p:?}");
        assert_eq!(p.max_threads_per_multi_processor % p.warp_size, 0, "{p:?}");
        assert!(p.regs_per_block > 0 && p.regs_per_multiprocessor >= p.regs_per_block, "{p:?}");
        assert!(p.shared_memory_per_block >= 48 << 10, "{p:?}");
        assert!(p.shared_memory_per_block_optin >= p.shared_memory_per_block, "{p:?}");
        assert!(p.shared_memory_per_multiprocessor >= p.shared_memory_per_block_optin, "{p:?}");
        assert!(p.l2_cache_size >= 1 << 20 && p.memory_bus_width >= 64, "{p:?}");
        assert!(p.clock_rate > 100_000 && p.memory_clock_rate > 100_000, "kHz: {p:?}");
        assert_eq!(p.total_memory, cuda::mem_get_info(d)?.1);
        assert!(!p.is_integrated, "{p:?}");
        let uuid = p.uuid.to_string();
        assert_eq!(uuid.len(), 36, "{uuid}");
        assert_eq!(uuid.matches('-').count(), 4, "{uuid}");
        assert_eq!(p.uuid.nvml_form(), format!("GPU-{uuid}"));
        uuids.push(uuid.clone());
        let repr = p.to_string();
        let head = format!(
            "_CudaDeviceProperties(name='{}', major={}, minor={}, total_memory={}MB, multi_processor_count={}, uuid={uuid}, ",
            p.name,
            p.major,
            p.minor,
            p.total_memory >> 20,
            p.multi_processor_count
        );
        assert!(repr.starts_with(&head), "{repr}");
        assert!(repr.ends_with(&format!("L2_cache_size={}MB)", p.l2_cache_size >> 20)), "{repr}");
        assert!(repr.contains(&format!("pci_bus_id={}, pci_device_id={}", p.pci_bus_id, p.pci_device_id)));
    }
    uuids.sort();
    uuids.dedup();
    assert_eq!(uuids.len(), cuda::device_count(), "one UUID per device");
    Ok(())
}

#[test]
fn simulated_properties_come_from_the_config_and_follow_visible_devices() -> cudasem::Result<()> {
    let gpu = SimGpu { name: "toy".into(), multi_processor_count: 8, l2_cache_size: 4 << 20, ..SimGpu::default() };
    let machine = SimConfig { devices: 4, memory: 1 << 30, gpu: gpu.clone(), ..SimConfig::default() };
    let whole = SimDriver::new(machine.clone());
    let seen = SimDriver::with_visible_devices(machine, Some("2,0"));
    let p = seen.properties(0)?;
    assert_eq!((p.name.as_str(), p.multi_processor_count, p.l2_cache_size), ("toy", 8, 4 << 20));
    assert_eq!((p.warp_size, p.max_threads_per_block, p.total_memory), (32, 1024, 1 << 30));
    assert_eq!(p.uuid, whole.properties(2)?.uuid, "visible device 0 is the machine's device 2");
    assert_eq!(seen.properties(1)?.uuid, whole.properties(0)?.uuid);
    assert_ne!(whole.properties(1)?.uuid, whole.properties(2)?.uuid);
    assert_eq!(p.pci_address(), whole.properties(2)?.pci_address());
    assert_eq!(seen.telemetry().gpu_processes(0)?.gpu, 2, "NVML's numbering is the machine's");
    // The JSON form of the machine takes the GPU's figures too.
    let cfg: SimConfig = serde_json::from_str(r#"{"devices": 1, "gpu": {"name": "json gpu", "major": 8}}"#).unwrap();
    assert_eq!((cfg.gpu.name.as_str(), cfg.gpu.major, cfg.gpu.warp_size), ("json gpu", 8, 32));
    assert!(serde_json::from_str::<SimConfig>(r#"{"gpu": {"wrap_size": 31}}"#).is_err(), "unknown fields are refused");
    Ok(())
}

#[test]
fn utilization_rises_while_a_stream_is_busy_and_falls_after() -> cudasem::Result<()> {
    if !common::one_device() {
        return Ok(());
    }
    let _turn = serial();
    let d = common::last_device();
    let s = cuda::Stream::new(d, 0)?;
    cuda::synchronize(d)?;
    std::thread::sleep(PAST_A_PERIOD);
    if common::is_sim() {
        assert_eq!(cuda::utilization(d)?, 0, "nothing ran in the last period");
    }
    cudasem::testing::delay(&s, Duration::from_millis(1500))?;
    let (mut busiest, mut traffic) = (0, 0);
    while !s.query()? {
        let u = cuda::utilization(d)?;
        assert!(u <= 100, "{u}");
        busiest = busiest.max(u);
        traffic = traffic.max(cuda::memory_usage(d)?);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(busiest > 0, "utilization stayed 0 while the stream was busy for 1.5 s");
    if common::is_sim() {
        assert_eq!(traffic, 0, "a delay reads and writes no memory");
        std::thread::sleep(PAST_A_PERIOD);
        assert_eq!(cuda::utilization(d)?, 0, "nothing ran in the last period");
    }
    Ok(())
}

#[test]
fn memory_traffic_rises_under_kernels_on_the_sim() -> cudasem::Result<()> {
    if !common::is_sim() || !common::one_device() {
        return Ok(());
    }
    let _turn = serial();
    let d = common::last_device();
    let src = Tensor::randn([1 << 20], DType::F32, place(d).as_str())?;
    let started = Instant::now();
    let mut traffic = 0;
    // Kernels reading and writing the device's memory until the sim's memory clock sees them (a
    // round or two; the bound keeps a broken clock from looping forever).
    while traffic == 0 && started.elapsed() < Duration::from_secs(20) {
        let doubled = (&src * 2.0)?;
        cuda::synchronize(d)?;
        traffic = cuda::memory_usage(d)?;
        drop(doubled);
    }
    assert!(traffic > 0 && traffic <= 100, "{traffic}");
    Ok(())
}

#[test]
fn device_memory_used_follows_an_allocation() -> cudasem::Result<()> {
    if !common::one_device() {
        return Ok(());
    }
    let _turn = serial();
    let d = common::last_device();
    cuda::synchronize(d)?;
    cuda::empty_cache()?;
    let (used0, reserved0) = (cuda::device_memory_used(d)?, cuda::memory_reserved(d)?);
    let t = Tensor::empty([64 << 20], DType::U8, place(d).as_str())?;
    let (used1, reserved1) = (cuda::device_memory_used(d)?, cuda::memory_reserved(d)?);
    assert!(reserved1 >= reserved0 + (64 << 20));
    assert!(used1 > 0);
    let procs = cuda::list_gpu_processes(d)?;
    let text = procs.to_string();
    assert!(text.starts_with(&format!("GPU:{}\n", procs.gpu)), "{text}");
    if common::is_sim() {
        assert_eq!(used1 - used0, reserved1 - reserved0, "the sim's used memory is its allocations");
        assert_eq!(procs.processes.len(), 1, "{text}");
        assert_eq!(procs.processes[0].pid, std::process::id());
        assert_eq!(procs.processes[0].used_memory, Some(used1));
        let mb = used1 as f64 / (1 << 20) as f64;
        assert!(text.ends_with(&format!("process {:>10} uses {mb:>12.3} MB GPU memory", std::process::id())), "{text}");
    } else {
        assert!(used1 >= used0 + (32 << 20), "NVML saw {used0} then {used1} bytes used");
        assert!(procs.processes.is_empty() == text.ends_with("no processes are running"), "{text}");
    }
    drop(t);
    cuda::synchronize(d)?;
    cuda::empty_cache()?;
    if common::is_sim() {
        assert_eq!(cuda::device_memory_used(d)?, used0, "emptying the cache gives the memory back");
    }
    Ok(())
}

#[test]
fn readings_are_typed_errors_on_the_sim_and_plausible_on_a_gpu() -> cudasem::Result<()> {
    if !common::one_device() {
        return Ok(());
    }
    for d in 0..cuda::device_count() {
        if common::is_sim() {
            for (what, r) in [
                ("temperature", cuda::temperature(d)),
                ("power_draw", cuda::power_draw(d)),
                ("clock_rate", cuda::clock_rate(d)),
            ] {
                match r {
                    Err(Error::NotSupported { what: w, ref why }) => {
                        assert_eq!(w, what);
                        assert!(why.contains("simulated"), "{why}");
                        assert!(r.unwrap_err().to_string().starts_with(&format!("{what} is not available: ")));
                    }
                    other => panic!("{what}: expected NotSupported, got {other:?}"),
                }
            }
        } else {
            let c = cuda::temperature(d)?;
            assert!((10..=110).contains(&c), "{c} °C");
            let mw = cuda::power_draw(d)?;
            assert!(mw > 1000, "{mw} mW");
            let mhz = cuda::clock_rate(d)?;
            assert!(mhz > 0 && mhz < 10_000, "{mhz} MHz");
        }
        // The runtime is usable after a refused reading.
        assert!(cuda::utilization(d)? <= 100);
        assert!(cuda::memory_usage(d)? <= 100);
        assert!(cuda::device_memory_used(d)? <= cuda::get_device_properties(d)?.total_memory);
    }
    Ok(())
}

#[test]
fn a_bad_device_is_refused_by_every_reading() {
    if !common::one_device() {
        return;
    }
    let n = cuda::device_count();
    let bad = |r: cudasem::Result<String>| matches!(r, Err(Error::InvalidDevice { index, .. }) if index == n + 3);
    assert!(bad(cuda::utilization(n + 3).map(|v| v.to_string())));
    assert!(bad(cuda::memory_usage(n + 3).map(|v| v.to_string())));
    assert!(bad(cuda::temperature(n + 3).map(|v| v.to_string())));
    assert!(bad(cuda::power_draw(n + 3).map(|v| v.to_string())));
    assert!(bad(cuda::clock_rate(n + 3).map(|v| v.to_string())));
    assert!(bad(cuda::device_memory_used(n + 3).map(|v| v.to_string())));
    assert!(bad(cuda::list_gpu_processes(n + 3).map(|v| v.to_string())));
    assert!(bad(cuda::get_device_properties(n + 3).map(|v| v.to_string())));
}
