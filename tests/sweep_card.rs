//! `bench/sweep_card.sh`, the card profile's sweep that the GPU runs read their launch choices
//! from, run on this machine's driver (the sim by default): each variant of a part is one line
//! naming every case with a figure, each variant's `CUDASEM_BENCH_TUNING` reaches the binary (its
//! echo of the card profile), and a binary that fails leaves a line that says so instead of
//! stopping the sweep. No figure is compared: on the sim they only show that the sweep runs.

mod common;

use std::path::Path;
use std::process::{Command, Output};

/// Runs the sweep's `parts` with `binary` into `out`.
fn sweep(parts: &str, binary: &Path, out: &Path) -> Output {
    let driver = std::env::var("CUDASEM_DRIVER").unwrap_or_else(|_| "sim".into());
    Command::new("bash")
        .arg(common::repo_root().join("bench/sweep_card.sh"))
        .args([binary.as_os_str(), out.as_os_str()])
        .env("PARTS", parts)
        .env("CUDASEM_DRIVER", driver)
        .env_remove("CUDASEM_BENCH_TUNING")
        .current_dir(common::repo_root())
        .output()
        .expect("bash starts")
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("cudasem-sweep-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// The row-vector products' part: nine lines (the card's own choices, then `gemv_rows` 0 to 7),
/// each with the three products and the copy, `cudasem µs/ratio` each; every variant's log echoes
/// its `gemv_rows`.
#[test]
fn the_gemv_part_prints_a_line_per_variant_with_every_case() {
    let out = temp_dir("gemv");
    let o = sweep("gemv", &common::cudasem_binary(), &out);
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{stdout}{}", String::from_utf8_lossy(&o.stderr));
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with("gemv ")).collect();
    let variants: Vec<&str> = lines.iter().map(|l| l.split_whitespace().nth(1).unwrap()).collect();
    let mut want = vec!["default".to_owned()];
    want.extend((0..8).map(|g| format!("gemv_rows={g}")));
    assert_eq!(variants, want, "{stdout}");
    for line in &lines {
        let cells: Vec<&str> = line.split_whitespace().skip(2).collect();
        let names: Vec<&str> = cells.iter().map(|c| c.split('=').next().unwrap()).collect();
        assert_eq!(names, ["copy_d2d", "matmul_f32_vec", "matmul_bf16_vec", "matmul_f16_vec"], "{line}");
        for cell in cells {
            let (us, ratio) = cell.split_once('=').unwrap().1.split_once('/').expect("µs/ratio");
            let us: f64 = us.parse().unwrap_or_else(|_| panic!("{line}"));
            assert!(us > 0.0 && ratio.parse::<f64>().is_ok(), "{line}");
        }
    }
    for g in 0..8 {
        let log = std::fs::read_to_string(out.join(format!("gemv_gemv_rows={g}.log"))).unwrap();
        assert!(log.contains(&format!(" gemv_rows={g} norm_early=")), "the variant's tuning reaches the binary: {log}");
    }
    let _ = std::fs::remove_dir_all(out);
}

/// A binary that cannot run leaves one line per variant saying where its log is, and the sweep
/// goes on to the next.
#[test]
fn a_failing_binary_leaves_a_line_per_variant() {
    let out = temp_dir("fail");
    let fake = out.join("fails.sh");
    std::fs::write(&fake, "#!/bin/sh\necho 'no device here' >&2\nexit 3\n").unwrap();
    let mut perms = std::fs::metadata(&fake).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&fake, perms).unwrap();
    let o = sweep("gemv", &fake, &out);
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{stdout}{}", String::from_utf8_lossy(&o.stderr));
    let failed: Vec<&str> = stdout.lines().filter(|l| l.contains(" failed: see ")).collect();
    assert_eq!(failed.len(), 9, "{stdout}");
    assert!(failed[0].starts_with("gemv default failed"), "{stdout}");
    let log = std::fs::read_to_string(out.join("gemv_default.log")).unwrap();
    assert!(log.contains("no device here"), "{log}");
    let _ = std::fs::remove_dir_all(out);
}
