//! `cudasem top` and the library view behind it (`cudasem::top`), without a terminal.
//!
//! Properties checked:
//! - a sample's allocator figures are the allocator's own (`memory_allocated`, `memory_reserved`,
//!   `max_memory_allocated`) after a known allocation, and its largest segment holds it;
//! - the text frame shows one block per device with those figures, and readings the machine
//!   cannot give as `n/a` with the reason (the simulated machine's sensors);
//! - the demo workload moves the allocator's figures and stops when dropped;
//! - the command prints frames as text with `--once` / `--frames N`, and without them refuses at
//!   once where stdout is not a terminal (exit code 2, naming `--once`), so a CI never hangs.

mod common;

use cudasem::cuda::{self, memory::format_bytes};
use cudasem::top::{render_text, Demo, Sample};
use cudasem::{DType, Tensor};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The samples read whole devices: the tests that allocate take turns.
static SERIAL: Mutex<()> = Mutex::new(());

fn run_top(args: &[&str]) -> Output {
    let mut cmd = Command::new(common::cudasem_binary());
    cmd.arg("top").args(args).env("CUDASEM_DRIVER", "sim");
    for k in ["CUDASEM_SIM_DEVICES", "CUDA_VISIBLE_DEVICES", "CUDASEM_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"] {
        cmd.env_remove(k);
    }
    cmd.output().expect("the cudasem binary starts")
}

#[test]
fn a_sample_shows_the_allocators_figures_after_a_known_allocation() -> cudasem::Result<()> {
    if !common::one_device() {
        return Ok(());
    }
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = common::last_device();
    let t = Tensor::empty([3 << 20], DType::F32, format!("cuda:{d}").as_str())?;
    let sample = Sample::take()?;
    assert_eq!(sample.driver, cuda::driver_name());
    assert_eq!(sample.devices.len(), cuda::device_count());
    let s = &sample.devices[d];
    assert_eq!(s.index, d);
    assert_eq!(s.name, cuda::get_device_name(d)?);
    assert_eq!(s.allocated, cuda::memory_allocated(d)?);
    assert_eq!(s.reserved, cuda::memory_reserved(d)?);
    assert_eq!(s.max_allocated, cuda::max_memory_allocated(d)?);
    assert!(s.allocated >= 12 << 20, "{}", s.allocated);
    let biggest = &s.largest_segments[0];
    assert!(biggest.total_size >= 12 << 20 && biggest.allocated_size >= 12 << 20, "{biggest:?}");
    assert!(s.largest_segments.windows(2).all(|w| w[0].total_size >= w[1].total_size));
    assert!(s.largest_segments.len() <= Sample::SEGMENTS);
    assert!(*s.device_memory_used.as_ref().unwrap() >= s.reserved || !common::is_sim());

    let text = render_text(&sample, 120);
    for i in 0..cuda::device_count() {
        assert_eq!(text.matches(&format!(" cuda:{i}  ")).count(), 1, "one block per device:\n{text}");
    }
    let block = &text[text.find(&format!(" cuda:{d}  ")).unwrap()..];
    let want = format!(
        "allocated {}  reserved {}  peak allocated {}",
        format_bytes(s.allocated),
        format_bytes(s.reserved),
        format_bytes(s.max_allocated)
    );
    assert!(block.contains(&want), "{want}\n{text}");
    assert!(block.contains(&format!("{:#014x}", biggest.address)), "{text}");
    assert!(text.lines().all(|l| l.chars().count() <= 120), "{text}");
    if common::is_sim() {
        assert!(block.contains("temperature n/a  power n/a  SM clock n/a"), "{text}");
        let reason = text.lines().find(|l| l.starts_with("n/a ")).expect("a line of reasons");
        assert!(reason.contains(&format!("temperature (cuda:{d})")) || text.contains("no sensors"), "{text}");
        assert!(text.contains("no sensors"), "{text}");
    } else {
        let c = s.temperature.as_ref().expect("a GPU reports its temperature");
        assert!(block.contains(&format!("temperature {c} C")), "{text}");
    }
    drop(t);
    Ok(())
}

#[test]
fn the_demo_moves_the_allocators_figures_and_stops_when_dropped() -> cudasem::Result<()> {
    if !common::one_device() {
        return Ok(());
    }
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let total =
        |f: fn(usize) -> cudasem::Result<usize>| -> usize { (0..cuda::device_count()).map(|d| f(d).unwrap()).sum() };
    let (reserved_before, allocated_before) = (total(cuda::memory_reserved), total(cuda::memory_allocated));
    for d in 0..cuda::device_count() {
        cuda::reset_peak_memory_stats(d)?;
    }
    assert!(total(cuda::max_memory_allocated) < 1 << 20, "the peaks start from what is allocated now");
    let demo = Demo::start()?;
    let started = Instant::now();
    let mut peak = 0;
    while started.elapsed() < Duration::from_secs(30) {
        peak = (0..cuda::device_count()).map(|d| cuda::max_memory_allocated(d).unwrap()).max().unwrap();
        if peak >= 1 << 20 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(peak >= 1 << 20, "the demo allocated {peak} bytes at most");
    assert!(demo.error().is_none(), "{:?}", demo.error());
    drop(demo);
    // Its threads are gone with their tensors: what it allocated is free again (cached).
    for d in 0..cuda::device_count() {
        cuda::synchronize(d)?;
    }
    assert!(total(cuda::memory_reserved) >= reserved_before);
    let allocated = total(cuda::memory_allocated);
    assert_eq!(allocated, allocated_before, "the demo's tensors were freed");
    Ok(())
}

#[test]
fn the_command_prints_text_frames_with_once_and_frames() {
    let o = run_top(&["--once", "--no-demo", "--width", "100"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}{}", String::from_utf8_lossy(&o.stderr));
    assert!(text.starts_with("cudasem top: sim driver, 2 device(s)"), "{text}");
    assert!(text.contains(" cuda:0  cudasem simulated GPU") && text.contains(" cuda:1  cudasem simulated GPU"));
    assert!(text.contains("allocated 0 bytes  reserved 0 bytes"), "nothing allocated without the demo:\n{text}");
    assert!(text.contains("temperature n/a") && text.contains("no sensors"), "{text}");
    assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");

    let o = run_top(&["--frames", "2", "--interval", "50", "--width", "100"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(text.matches("cudasem top: sim driver").count(), 2, "{text}");
}

#[test]
fn the_live_view_refuses_at_once_without_a_terminal() {
    let o = run_top(&[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("not a terminal") && err.contains("--once") && err.contains("--frames"), "{err}");
    assert!(o.stdout.is_empty());
    for bad in [&["--frames", "0"][..], &["--once", "--interval", "0"][..], &["--once", "--frames", "2"][..]] {
        let o = run_top(bad);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", String::from_utf8_lossy(&o.stdout));
    }
}
