//! `cudasem info`: the driver, the devices and the peer matrix.

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
