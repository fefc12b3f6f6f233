//! `cudasem info`: the driver, each device (PyTorch's `_CudaDeviceProperties` fields and the NVML
//! readings, or why a reading is not available) and the peer matrix.

use cudasem::cuda;
use cudasem::cuda::memory::format_bytes;
use std::process::ExitCode;

/// Prints the machine; exits 1 if the environment's settings are invalid.
pub fn run() -> ExitCode {
    match print() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn print() -> cudasem::Result<()> {
    let n = cuda::device_count();
    println!("driver: {}", cuda::driver_name());
    if n == 0 {
        // `current_device` reports why there is no device (or why the settings are invalid).
        return cuda::current_device().map(|_| ());
    }
    println!("devices: {n}");
    for i in 0..n {
        print_device(i)?;
    }
    println!("peer access (row can access column):");
    print!("        ");
    for j in 0..n {
        print!("{:>7}", format!("cuda:{j}"));
    }
    println!();
    for i in 0..n {
        print!("{:>8}", format!("cuda:{i}"));
        for j in 0..n {
            let cell = if i == j {
                "-"
            } else if cuda::can_device_access_peer(i, j)? {
                "yes"
            } else {
                "no"
            };
            print!("{cell:>7}");
        }
        println!();
    }
    Ok(())
}

/// One device: its properties, then its readings.
fn print_device(i: usize) -> cudasem::Result<()> {
    let p = cuda::get_device_properties(Some(i))?;
    let (free, total) = cuda::mem_get_info(Some(i))?;
    println!(
        "  cuda:{i}  {}  memory {} ({} free)  {} SMs  compute capability {}.{}",
        p.name,
        format_bytes(total),
        format_bytes(free),
        p.multi_processor_count,
        p.major,
        p.minor
    );
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    println!(
        "          threads {}/block {}/SM, warp {}; registers {}/block {}/SM",
        p.max_threads_per_block,
        p.max_threads_per_multi_processor,
        p.warp_size,
        p.regs_per_block,
        p.regs_per_multiprocessor
    );
    println!(
        "          shared memory {}/block ({} opt-in) {}/SM; L2 cache {}",
        format_bytes(p.shared_memory_per_block),
        format_bytes(p.shared_memory_per_block_optin),
        format_bytes(p.shared_memory_per_multiprocessor),
        format_bytes(p.l2_cache_size)
    );
    println!(
        "          clock {} MHz, memory clock {} MHz, bus {} bits; integrated {}, multi-GPU board {}",
        p.clock_rate / 1000,
        p.memory_clock_rate / 1000,
        p.memory_bus_width,
        yes_no(p.is_integrated),
        yes_no(p.is_multi_gpu_board)
    );
    println!("          uuid {}  PCI {}", p.uuid.nvml_form(), p.pci_address());
    println!("          launch profile: {}", cuda::card_profile(i)?);
    println!("          now: {}", readings(i));
    Ok(())
}

/// The device's NVML readings on one line; a reading that cannot be had shows `n/a` and why
/// (the first such reason in full, later ones by name).
fn readings(i: usize) -> String {
    let mut why: Option<String> = None;
    let mut show = |r: cudasem::Result<String>| match r {
        Ok(v) => v,
        Err(e) => {
            why.get_or_insert_with(|| e.to_string());
            "n/a".to_string()
        }
    };
    let line = format!(
        "utilization {}, memory traffic {}, used {}, temperature {}, power {}, SM clock {}",
        show(cuda::utilization(i).map(|v| format!("{v}%"))),
        show(cuda::memory_usage(i).map(|v| format!("{v}%"))),
        show(cuda::device_memory_used(i).map(format_bytes)),
        show(cuda::temperature(i).map(|v| format!("{v} C"))),
        show(cuda::power_draw(i).map(|v| format!("{:.1} W", v as f64 / 1000.0))),
        show(cuda::clock_rate(i).map(|v| format!("{v} MHz"))),
    );
    match why {
        Some(why) => format!("{line} (n/a: {why})"),
        None => line,
    }
}
