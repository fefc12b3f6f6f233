//! The `cudasem` command on several simulated machines: the tour passes on 1, 2 and 4 GPUs and
//! without peer access, `info` shows the topology, and bad settings are reported, not panicked on.
//! These start the binary with `CUDASEM_DRIVER=sim`, so they run on any machine.

mod common;

use std::process::{Command, Output};

fn run_sim(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(common::cudasem_binary());
    cmd.args(args).env("CUDASEM_DRIVER", "sim");
    for k in [
        "CUDASEM_SIM_DEVICES",
        "CUDASEM_SIM_PEER",
        "CUDASEM_SIM_MEMORY",
        "CUDA_VISIBLE_DEVICES",
        "CUDASEM_ALLOC_CONF",
        "PYTORCH_CUDA_ALLOC_CONF",
    ] {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("the cudasem binary starts")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs the tour and checks that it passed, that every section that runs everywhere said `ok`,
/// and that each of `lines` starts a line of the output (the sections that depend on the machine).
fn assert_tour_passes(env: &[(&str, &str)], lines: &[&str]) -> String {
    let o = run_sim(&["tour"], env);
    let text = stdout(&o);
    assert!(o.status.success(), "tour failed with {env:?}:\n{text}\n{}", String::from_utf8_lossy(&o.stderr));
    for section in [
        "devices",
        "device-guard",
        "streams",
        "asynchrony",
        "events",
        "tensor-placement",
        "caching-allocator",
        "out-of-memory",
        "pinned-memory",
        "non-blocking-overlap",
        "pinned-vs-pageable",
        "cuda-graphs",
        "stream-sanitizer",
    ] {
        assert!(text.lines().any(|l| l == format!("ok {section}")), "no `ok {section}` with {env:?}:\n{text}");
    }
    for line in lines {
        assert!(text.lines().any(|l| l.starts_with(line)), "no `{line}` with {env:?}:\n{text}");
    }
    assert!(!text.contains("FAILED"), "{text}");
    text
}

/// The sections of a machine with peer access between cuda:0 and cuda:1.
const TWO_LINKED_GPUS: [&str; 3] = ["ok peer-access", "ok tensor-ops", "ok cross-device-ops"];

#[test]
fn tour_passes_on_one_gpu_and_skips_peer_access_saying_why() {
    let text = assert_tour_passes(
        &[("CUDASEM_SIM_DEVICES", "1")],
        &[
            "skipped peer-access: peer access needs two GPUs",
            "skipped tensor-ops: showing it needs two GPUs",
            "skipped cross-device-ops: a cross-device op needs two GPUs",
        ],
    );
    // The simulated machine's clock is its own: the same figures however busy the host is.
    for figure in [
        "the events measured 200.00 ms on the device",
        "64.00 MiB pinned → device alone: 1.22 ms by events",
        "copy 1.22 ms, compute 2.00 ms, both done after 2.00 ms (sum 3.22, max 2.00)",
        "pageable 8.39 ms (8.0 GB/s), pinned 1.22 ms (54.9 GB/s)",
    ] {
        assert!(text.contains(figure), "no `{figure}`:\n{text}");
    }
}

#[test]
fn tour_passes_on_two_gpus() {
    let text = assert_tour_passes(&[("CUDASEM_SIM_DEVICES", "2")], &TWO_LINKED_GPUS);
    assert!(text.contains("under DeviceGuard(1): Tensor::ones(.., \"cuda\") → cuda:1"), "{text}");
    assert!(text.contains("a + b → [3.0, 3.0, 3.0] on cuda:0"), "{text}");
    // The sim's device times are its model, and the tour says so: at the top, beside the peer
    // copy's rate, and beside the graph's eager-vs-replay times.
    assert!(text.contains("device times below — events, copies — are modelled"), "{text}");
    assert!(text.contains("GB/s, the simulated machine's model"), "{text}");
    assert!(text.contains("device times here are the simulated machine's model, not a measurement"), "{text}");
}

#[test]
fn tour_passes_on_four_gpus() {
    assert_tour_passes(&[("CUDASEM_SIM_DEVICES", "4")], &TWO_LINKED_GPUS);
}

#[test]
fn tour_passes_without_peer_access_and_shows_the_error() {
    let env = [("CUDASEM_SIM_DEVICES", "2"), ("CUDASEM_SIM_PEER", "none")];
    let text = assert_tour_passes(
        &env,
        &["ok peer-access", "ok tensor-ops", "skipped cross-device-ops: cuda:0 cannot access cuda:1's memory"],
    );
    assert!(
        text.contains("enable_peer_access(0, 1) → error: peer access from cuda:0 to cuda:1 is not supported"),
        "{text}"
    );
    assert!(text.contains("staged, no peer link"), "{text}");
    assert!(
        text.contains(
            "a (cuda:0) + b (cuda:1) → error: Expected all tensors to be on the same device, but found at least two \
             devices, cuda:0 and cuda:1!"
        ),
        "{text}"
    );
}

#[test]
fn info_shows_devices_and_the_peer_matrix() {
    let o = run_sim(&["info"], &[("CUDASEM_SIM_DEVICES", "4"), ("CUDASEM_SIM_PEER", "0-1,2-3")]);
    let text = stdout(&o);
    assert!(o.status.success(), "{text}");
    assert!(text.contains("driver: sim") && text.contains("devices: 4"), "{text}");
    // Rows of the matrix come after the device list; take the last line naming each device.
    let matrix_row = |d: usize| {
        text.lines()
            .rfind(|l| l.trim_start().starts_with(&format!("cuda:{d}")))
            .unwrap_or("")
            .split_whitespace()
            .skip(1)
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(text.lines().filter(|l| l.contains("cudasem simulated GPU")).count(), 4, "{text}");
    assert_eq!(matrix_row(0), ["-", "yes", "no", "no"], "{text}");
    assert_eq!(matrix_row(2), ["no", "no", "-", "yes"], "{text}");
}

#[test]
fn bad_settings_are_reported_with_the_variable_name() {
    let o = run_sim(&["info"], &[("CUDASEM_SIM_DEVICES", "two")]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("CUDASEM_SIM_DEVICES") && err.contains("`two`"), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    let o = run_sim(&["tour"], &[("CUDASEM_SIM_PEER", "0-9")]);
    assert!(!o.status.success());
    let text = stdout(&o);
    assert!(text.contains("FAILED devices") && text.contains("CUDASEM_SIM_PEER"), "{text}");

    let o = run_sim(&["info"], &[("CUDASEM_SIM_MEMORY", "lots")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("CUDASEM_SIM_MEMORY"));
}

#[test]
fn info_refuses_a_bad_alloc_conf_at_once() {
    for var in ["CUDASEM_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"] {
        let o = run_sim(&["info"], &[(var, "max_split_size_mb:abc")]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{var}: {}{err}", stdout(&o));
        assert!(err.contains("max_split_size_mb") && err.contains("`abc`"), "{var}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // CUDASEM_ALLOC_CONF wins over PyTorch's variable.
    let both =
        [("CUDASEM_ALLOC_CONF", "expandable_segments:True"), ("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:abc")];
    let o = run_sim(&["info"], &both);
    assert!(o.status.success(), "{}{}", stdout(&o), String::from_utf8_lossy(&o.stderr));
}

#[test]
fn info_honours_cuda_visible_devices_on_the_sim() {
    let machine = [("CUDASEM_SIM_DEVICES", "4"), ("CUDASEM_SIM_PEER", "0-1,2-3")];
    let o = run_sim(&["info"], &[machine[0], machine[1], ("CUDA_VISIBLE_DEVICES", "3,0,2,9,1")]);
    let text = stdout(&o);
    assert!(o.status.success(), "{text}");
    assert!(text.contains("devices: 3"), "3, 0, 2 are visible; reading stops at 9:\n{text}");
    let row = |d: usize| {
        let line = text.lines().rfind(|l| l.trim_start().starts_with(&format!("cuda:{d}"))).unwrap_or("");
        line.split_whitespace().skip(1).map(str::to_string).collect::<Vec<_>>()
    };
    // Physical 3 and 2 (now 0 and 2) keep their peer link; physical 0 (now 1) has none with them.
    assert_eq!(row(0), ["-", "no", "yes"], "{text}");
    assert_eq!(row(1), ["no", "-", "no"], "{text}");
    for hidden in ["-1", "", "1,1"] {
        let o = run_sim(&["info"], &[machine[0], ("CUDA_VISIBLE_DEVICES", hidden)]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "CUDA_VISIBLE_DEVICES={hidden:?}: {}", stdout(&o));
        assert!(err.contains("CUDA_VISIBLE_DEVICES"), "{err}");
    }
}

#[test]
fn sim_memory_beyond_what_the_sim_can_hold_is_refused() {
    let o = run_sim(&["info"], &[("CUDASEM_SIM_MEMORY", "16TiB")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout(&o).contains("TiB"), "{}", stdout(&o));
    let o = run_sim(&["info"], &[("CUDASEM_SIM_MEMORY", "17TiB")]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(err.contains("CUDASEM_SIM_MEMORY") && err.contains("16 TiB"), "{err}");
}
