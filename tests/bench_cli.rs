//! `cudasem bench` on the sim driver: the quick run reports every figure in well-formed JSON, the
//! PyTorch side's output is parsed and compared (a fake script stands in for PyTorch), a failing or
//! missing PyTorch leaves its column null with the reason, and bad options are typed errors.
//! No timing is asserted: on the sim the figures only show that the bench runs.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const ROWS: [&str; 56] = [
    "alloc_free_pair",
    "alloc_free_pair_512b",
    "alloc_free_pair_64mib",
    "alloc_free_pair_stacks",
    "alloc_free_pair_history",
    "empty_tensor",
    "small_op",
    "small_op_cpp",
    "add_f32_256m",
    "sum_f32_1gib",
    "matmul_fp32_8192",
    "matmul_tf32_8192",
    "matmul_bf16_8192",
    "h2d_pinned_1gib",
    "d2h_pinned_1gib",
    "h2d_pageable_1gib",
    "p2p_copy_1gib",
    "replay_resnet50",
    "e2e_mlp_pipeline_bf16",
    "e2e_decode_step",
    "e2e_decode_step_graphed",
    "graph_replay_10",
    "graph_replay_100",
    "graph_replay_1000",
    "graph_device_per_op_100",
    "graph_eager_device_per_op_100",
    "graph_capture_100",
    "allreduce_1gib_busbw",
    "allreduce_8kib_latency",
    "user_kernel_launch_host",
    "user_kernel_launch_raw_cudarc",
    "randn_f32_256m",
    "rand_bf16_256m",
    "dropout_bf16_8192x8192",
    "multinomial_32x50257",
    "multinomial_32x50257_graphed",
    "e2e_decode_sample_graphed",
    "jit_swiglu_bf16",
    "jit_swiglu_bf16_eager",
    "jit_small_call_host",
    "jit_first_call_cold",
    "jit_first_call_warm",
    "jit_first_call_warm_disk",
    "small_op_sanitized",
    "small_op_sanitized_no_stacks",
    "sdpa_bf16_causal_b8_h16_t1024_e64",
    "sdpa_bf16_causal_b1_h32_t4096_e128",
    "sdpa_decode_bf16_b8_h32_s8192_e128",
    "sdpa_bf16_b4_h16_t2048_e128",
    "layer_norm_bf16_8192x4096",
    "rms_norm_bf16_8192x4096",
    "softmax_f32_8x50257",
    "log_softmax_bf16_1x128256",
    "lm_head_bf16_8192x1024x50257",
    "e2e_gpt_block_bf16_b8_t1024_d1024_h16",
    "e2e_gpt_block_bf16_b1_t2048_d2048_h16",
];

/// The rows timed on the CUDA driver only (skipped on the sim, saying so).
const CUDA_ONLY: [&str; 7] = [
    "user_kernel_launch_raw_cudarc",
    "sdpa_bf16_causal_b8_h16_t1024_e64",
    "sdpa_bf16_causal_b1_h32_t4096_e128",
    "sdpa_decode_bf16_b8_h32_s8192_e128",
    "sdpa_bf16_b4_h16_t2048_e128",
    "layer_norm_bf16_8192x4096",
    "rms_norm_bf16_8192x4096",
];

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cudasem-bench-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn bench(args: &[&str], env: &[(&str, &str)], cwd: Option<&Path>) -> Output {
    let mut cmd = Command::new(common::cudasem_binary());
    cmd.arg("bench").args(args).env("CUDASEM_DRIVER", "sim");
    for k in
        ["CUDASEM_SIM_DEVICES", "CUDASEM_SIM_PEER", "CUDASEM_SIM_MEMORY", "CUDASEM_ALLOC_CONF", "CUDASEM_BENCH_TUNING"]
    {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    if let Some(d) = cwd {
        cmd.current_dir(d);
    }
    cmd.output().expect("the cudasem binary starts")
}

fn text(o: &Output) -> String {
    format!("stdout:\n{}\nstderr:\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

type Json = serde_json::Value;

/// Strict reading of the bench's JSON: a missing key or a value of another type fails the test
/// (indexing a `serde_json::Value` would give null).
trait Strict {
    fn key(&self, key: &str) -> &Json;
    fn num(&self) -> Option<f64>;
    fn text(&self) -> Option<&str>;
}

impl Strict for Json {
    fn key(&self, key: &str) -> &Json {
        let obj = self.as_object().unwrap_or_else(|| panic!("{self} is not an object"));
        obj.get(key).unwrap_or_else(|| panic!("no key {key} in {self}"))
    }
    fn num(&self) -> Option<f64> {
        match self {
            Json::Number(n) => n.as_f64(),
            Json::Null => None,
            other => panic!("{other} is neither a number nor null"),
        }
    }
    fn text(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            Json::Null => None,
            other => panic!("{other} is neither a string nor null"),
        }
    }
}

/// The JSON file, and its results by name.
fn read_json(path: &Path) -> (Json, BTreeMap<String, Json>) {
    let text = std::fs::read_to_string(path).expect("the bench wrote its JSON");
    let json: Json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    let Json::Array(results) = json.key("results").clone() else { panic!("results is not an array") };
    let by_name: BTreeMap<String, Json> =
        results.into_iter().map(|r| (r.key("name").text().unwrap().to_string(), r)).collect();
    assert_eq!(by_name.len(), json.key("results").as_array().unwrap().len(), "row names are unique");
    (json, by_name)
}

#[test]
fn a_quick_run_reports_every_figure_on_the_sim() {
    let dir = temp_dir("quick");
    let path = dir.join("out.json");
    let o = bench(&["--quick", "--no-pytorch", "--json", path.to_str().unwrap()], &[], None);
    assert!(o.status.success(), "{}", text(&o));
    let (json, rows) = read_json(&path);
    assert_eq!(json.key("driver").text(), Some("sim"));
    assert_eq!(json.key("quick"), &Json::Bool(true));
    assert!(json.key("machine").text().unwrap().contains("2 ×"), "the default sim has 2 GPUs: {json:?}");
    assert!(json.key("date").text().unwrap().ends_with('Z'));
    assert_eq!(json.key("torch"), &Json::Null);
    assert_eq!(json.key("cuda"), &Json::Null);
    assert!(json.key("pytorch_error").text().unwrap().contains("--no-pytorch"));
    assert_eq!(rows.keys().collect::<Vec<_>>().len(), ROWS.len(), "{:?}", rows.keys());
    // The collective rows are skipped on the sim, saying why (its collectives take no simulated time).
    for name in ["allreduce_1gib_busbw", "allreduce_8kib_latency"] {
        let r = rows.get(name).unwrap_or_else(|| panic!("no row {name}"));
        assert_eq!(r.key("cudasem"), &Json::Null, "{name}");
        assert!(r.key("cudasem_note").text().unwrap().contains("test double"), "{name}: {r:?}");
    }
    // The raw cudarc launch needs the CUDA driver.
    for name in CUDA_ONLY {
        let raw = &rows[name];
        assert_eq!(raw.key("cudasem"), &Json::Null, "{name}");
        assert!(raw.key("cudasem_note").text().unwrap().contains("CUDA driver"), "{name}: {raw:?}");
    }
    for name in ROWS.into_iter().filter(|n| !n.starts_with("allreduce_") && !CUDA_ONLY.contains(n)) {
        let r = rows.get(name).unwrap_or_else(|| panic!("no row {name}"));
        let v = r.key("cudasem").num().unwrap_or_else(|| panic!("{name}: no cudasem figure: {r:?}"));
        assert!(v.is_finite() && v > 0.0, "{name}: {v}");
        assert_eq!(r.key("pytorch"), &Json::Null, "{name}");
        assert_eq!(r.key("speedup"), &Json::Null, "{name}");
        assert!(r.key("unit").text().is_some());
    }
    assert_eq!(rows["replay_resnet50"].key("unit").text(), Some("bytes"));
    // The policy's figure is deterministic: below PyTorch's recorded 7,033,847,808 bytes.
    let replay = rows["replay_resnet50"].key("cudasem").num().unwrap();
    assert!((5_762_142_352.0..7_033_847_808.0).contains(&replay), "{replay}");
    // The end-to-end rows are times, checked against their f64 references before they count.
    for (name, unit, goal) in [
        ("e2e_mlp_pipeline_bf16", "ms", 1.05),
        ("e2e_decode_step", "µs", 1.5),
        ("e2e_decode_step_graphed", "µs", 1.0),
        ("graph_replay_100", "ns", 1.25),
        ("graph_device_per_op_100", "ns", 1.0),
        ("graph_capture_100", "ms", 2.0),
        ("multinomial_32x50257", "µs", 3.0),
        ("e2e_decode_sample_graphed", "µs", 1.1),
        ("softmax_f32_8x50257", "ms", 1.0),
        ("log_softmax_bf16_1x128256", "ms", 1.0),
        ("lm_head_bf16_8192x1024x50257", "ms", 1.0),
        ("e2e_gpt_block_bf16_b8_t1024_d1024_h16", "ms", 0.9),
        ("e2e_gpt_block_bf16_b1_t2048_d2048_h16", "ms", 0.9),
    ] {
        let r = &rows[name];
        assert_eq!(r.key("unit").text(), Some(unit), "{name}");
        assert_eq!(r.key("lower_is_better"), &Json::Bool(true), "{name}");
        assert_eq!(r.key("goal").num(), Some(goal), "{name}");
    }
    let err = String::from_utf8_lossy(&o.stderr);
    let lines = err.lines().filter(|l| l.starts_with("bench ")).count();
    assert!(lines >= 32 && err.contains("bench 31/31 "), "a progress line per step, then one with all done: {err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_peer_copy_is_skipped_with_a_reason_on_one_gpu_and_quick_writes_no_default_file() {
    let dir = temp_dir("one-gpu");
    let o = bench(&["--quick", "--no-pytorch", "--only", "p2p_copy_1gib"], &[("CUDASEM_SIM_DEVICES", "1")], Some(&dir));
    assert!(o.status.success(), "a skipped figure is not a failure: {}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("p2p_copy_1gib") && out.contains("skipped: needs 2 devices"), "{out}");
    assert!(out.contains("no JSON written"), "{out}");
    assert!(!dir.join("bench").exists(), "--quick without --json writes nothing");
    // On the sim driver a run is always a quick one: it never writes the committed figures' file.
    let o = bench(&["--no-pytorch", "--only", "replay_resnet50"], &[], Some(&dir));
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("the sim driver runs --quick sizes"), "{}", text(&o));
    assert!(!dir.join("bench").exists(), "a sim run without --json writes nothing");

    let path = dir.join("p2p.json");
    let o = bench(
        &["--quick", "--no-pytorch", "--only", "p2p_copy_1gib", "--json", path.to_str().unwrap()],
        &[("CUDASEM_SIM_PEER", "none")],
        None,
    );
    assert!(o.status.success(), "{}", text(&o));
    let (_, rows) = read_json(&path);
    assert_eq!(rows.len(), 1);
    let r = &rows["p2p_copy_1gib"];
    assert_eq!(r.key("cudasem"), &Json::Null);
    assert!(r.key("cudasem_note").text().unwrap().contains("no peer access"), "{r:?}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A stand-in for `python3 bench/pytorch_bench.py`: run as `sh SCRIPT --only … --trace … --quick`.
fn fake_script(dir: &Path, body: &str) -> PathBuf {
    let p = dir.join("fake_pytorch.sh");
    std::fs::write(&p, body).expect("fake script");
    p
}

#[test]
fn pytorch_results_are_parsed_and_compared() {
    let dir = temp_dir("fake");
    let script = fake_script(
        &dir,
        r#"case "$*" in *"--only small_op,add_f32_256m,replay_resnet50 --trace "*"--quick"*) ;; *) echo "FATAL bad args: $*"; exit 3;; esac
head -1 "$4" | grep -q '^action,addr,size,stream' || { echo "FATAL no trace"; exit 3; }
echo "INFO torch 9.9.9+fake"
echo "INFO cuda 13.0"
echo "compiler chatter that is not a message"
echo "PROGRESS small_op"
echo "RESULT small_op_cpp 2e12 ns"
echo "RESULT small_op 1e12 ns"
echo "PROGRESS add_f32_256m"
echo "RESULT add_f32_256m 1e9 GB/s"
echo "PROGRESS replay_resnet50"
echo "RESULT replay_resnet50 7033847808 bytes"
"#,
    );
    let path = dir.join("fake.json");
    let o = bench(
        &[
            "--quick",
            "--python",
            "sh",
            "--script",
            script.to_str().unwrap(),
            "--only",
            "replay_resnet50,small_op,add_f32_256m",
            "--json",
            path.to_str().unwrap(),
        ],
        &[],
        None,
    );
    assert!(o.status.success(), "{}", text(&o));
    let (json, rows) = read_json(&path);
    assert_eq!(json.key("torch").text(), Some("9.9.9+fake"));
    assert_eq!(json.key("cuda").text(), Some("13.0"));
    assert_eq!(json.key("pytorch_error"), &Json::Null);
    assert_eq!(rows.len(), 4, "{:?}", rows.keys());
    for (name, pytorch, met) in [
        ("small_op", 1e12, Some(true)),
        ("small_op_cpp", 2e12, None),
        ("add_f32_256m", 1e9, Some(false)),
        ("replay_resnet50", 7033847808.0, Some(true)),
    ] {
        let r = &rows[name];
        let ours = r.key("cudasem").num().unwrap();
        assert_eq!(r.key("pytorch").num(), Some(pytorch), "{name}");
        let want = if r.key("lower_is_better") == &Json::Bool(true) { pytorch / ours } else { ours / pytorch };
        let got = r.key("speedup").num().unwrap();
        assert!((got - want).abs() <= 1e-4 * want.max(1.0), "{name}: speedup {got}, expected {want}");
        assert_eq!(r.key("met"), &met.map_or(Json::Null, Json::Bool), "{name}");
        assert_eq!(r.key("pytorch_note"), &Json::Null, "{name}");
    }
    let replay = &rows["replay_resnet50"];
    assert!(replay.key("speedup").num().unwrap() > 1.0, "cudasem's peak is below PyTorch's recorded one");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("PyTorch 9.9.9+fake") && out.contains(" yes") && out.contains(" NO"), "{out}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("pytorch small_op") && err.contains("6/6"), "one bar over both sides: {err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_user_kernel_rows_come_from_their_own_script_beside_the_main_one() {
    let dir = temp_dir("own-script");
    let main = fake_script(&dir, "echo 'FATAL the main script does not measure these steps'; exit 3\n");
    std::fs::write(
        dir.join("pytorch_user_kernel.py"),
        r#"case "$*" in "--only user_kernel_launch_host,user_kernel_launch_raw_cudarc --quick") ;; *) echo "FATAL bad args: $*"; exit 3;; esac
echo "INFO torch 9.9.9+fake"
echo "PROGRESS user_kernel_launch_host"
echo "RESULT user_kernel_launch_host 29300 ns"
echo "PROGRESS user_kernel_launch_raw_cudarc"
echo "SKIP user_kernel_launch_raw_cudarc no PyTorch counterpart"
"#,
    )
    .expect("fake script");
    let path = dir.join("own.json");
    let only = "user_kernel_launch_host,user_kernel_launch_raw_cudarc";
    let args = ["--quick", "--python", "sh", "--script", main.to_str().unwrap(), "--only", only, "--json"];
    let o = bench(&[&args[..], &[path.to_str().unwrap()]].concat(), &[], None);
    assert!(o.status.success(), "{}", text(&o));
    let (json, rows) = read_json(&path);
    assert_eq!(json.key("torch").text(), Some("9.9.9+fake"));
    assert_eq!(rows.len(), 2, "{:?}", rows.keys());
    let r = &rows["user_kernel_launch_host"];
    let ours = r.key("cudasem").num().unwrap();
    assert_eq!(r.key("pytorch").num(), Some(29300.0));
    assert!((r.key("speedup").num().unwrap() - 29300.0 / ours).abs() <= 1e-6 * 29300.0 / ours);
    assert_eq!(r.key("goal").num(), Some(5.0));
    let raw = &rows["user_kernel_launch_raw_cudarc"];
    assert!(raw.key("pytorch_note").text().unwrap().contains("no PyTorch counterpart"), "{raw:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_failing_or_missing_pytorch_leaves_its_column_null_with_the_reason() {
    let dir = temp_dir("failing");
    let script = fake_script(
        &dir,
        "echo 'PROGRESS small_op'\necho 'RESULT small_op_cpp 5000 ns'\necho 'Traceback: boom' >&2\nexit 1\n",
    );
    let path = dir.join("failing.json");
    let args = |script: &str, python: &str| {
        vec![
            "--quick".to_string(),
            "--python".into(),
            python.into(),
            "--script".into(),
            script.into(),
            "--only".into(),
            "small_op".into(),
            "--json".into(),
            path.to_str().unwrap().into(),
        ]
    };
    let run = |a: Vec<String>| bench(&a.iter().map(String::as_str).collect::<Vec<_>>(), &[], None);

    let o = run(args(script.to_str().unwrap(), "sh"));
    assert!(o.status.success(), "PyTorch's failure is not the bench's: {}", text(&o));
    let (json, rows) = read_json(&path);
    let why = json.key("pytorch_error").text().expect("the reason is written");
    assert!(why.contains("failed") && why.contains("boom"), "{why}");
    assert_eq!(rows["small_op"].key("pytorch"), &Json::Null);
    assert!(rows["small_op"].key("pytorch_note").text().unwrap().contains("boom"));
    assert!(rows["small_op"].key("cudasem").num().is_some());
    assert_eq!(rows["small_op_cpp"].key("pytorch").num(), Some(5000.0), "what came before the failure stays");
    assert!(String::from_utf8_lossy(&o.stdout).contains("boom"), "the table says why");

    let o = run(args(script.to_str().unwrap(), "/nonexistent/python3"));
    assert!(o.status.success(), "{}", text(&o));
    let (json, _) = read_json(&path);
    assert!(json.key("pytorch_error").text().unwrap().contains("could not start /nonexistent/python3"));

    let o = run(args("/nonexistent/bench.py", "sh"));
    assert!(o.status.success(), "{}", text(&o));
    let (json, _) = read_json(&path);
    assert!(json.key("pytorch_error").text().unwrap().contains("does not exist"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn an_unknown_figure_is_a_clear_error() {
    let o = bench(&["--quick", "--no-pytorch", "--only", "small_op,warp_speed"], &[], None);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("unknown figure `warp_speed`") && err.contains("alloc_free_pair"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_malformed_tuning_variable_is_a_clear_error_and_a_good_one_is_echoed() {
    for bad in ["8", "256,0,x", "256,0,1,8", "256,0,1,3,0", ""] {
        let o = bench(&["--quick", "--no-pytorch", "--only", "small_op"], &[("CUDASEM_BENCH_TUNING", bad)], None);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("CUDASEM_BENCH_TUNING") && err.contains("three or four integers"), "{bad:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let dir = temp_dir("tuning");
    let json = dir.join("t.json");
    let o = bench(
        &["--quick", "--no-pytorch", "--only", "small_op", "--json", json.to_str().unwrap()],
        &[("CUDASEM_BENCH_TUNING", "256,0,2")],
        None,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("tuning from CUDASEM_BENCH_TUNING: 256,0,2"), "{}", text(&o));
    // The card profile's choices by name, alone or after the three integers; a bad one exits 2.
    for (good, echo) in [
        (
            "heavy_vectors=3,sum_loads=4,mid_vectors=2,early_waves=3,gemv_rows=2,norm_early=1",
            "card profile: heavy_vectors=3 sum_blocks=0 sum_loads=4 ew_threads=256 norm_blocks=8 norm_threads=256 heavy_unroll=0 mid_vectors=2 early_waves=3 gemv_rows=2 norm_early=1 (",
        ),
        (
            "256,0,1,sum_blocks=5",
            "card profile: heavy_vectors=2 sum_blocks=5 sum_loads=8 ew_threads=256 norm_blocks=8 norm_threads=256 heavy_unroll=0 mid_vectors=1 early_waves=2 gemv_rows=0 norm_early=1 (",
        ),
    ] {
        let o = bench(&["--quick", "--no-pytorch", "--only", "small_op"], &[("CUDASEM_BENCH_TUNING", good)], None);
        assert_eq!(o.status.code(), Some(0), "{good}: {}", text(&o));
        assert!(String::from_utf8_lossy(&o.stderr).contains(echo), "{good}: {}", text(&o));
    }
    for (bad, says) in [("sum_loads=6", "`sum_loads=6` is out of range"), ("heavy=2", "unknown key `heavy`")] {
        let o = bench(&["--quick", "--no-pytorch", "--only", "small_op"], &[("CUDASEM_BENCH_TUNING", bad)], None);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("CUDASEM_BENCH_TUNING") && err.contains(says) && !err.contains("panicked"), "{err}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The cases of `cudasem bench --ops` by name, from its JSON (names unique).
fn ops_cases(json: &Json) -> BTreeMap<String, Json> {
    let Json::Array(cases) = json.key("cases").clone() else { panic!("cases is not an array") };
    let n = cases.len();
    let by_name: BTreeMap<String, Json> =
        cases.into_iter().map(|c| (c.key("name").text().unwrap().to_string(), c)).collect();
    assert_eq!(by_name.len(), n, "case names are unique");
    by_name
}

#[test]
fn the_op_matrix_checks_every_case_on_the_sim() {
    let dir = temp_dir("ops");
    let path = dir.join("ops.json");
    let o = bench(&["--ops", "--quick", "--no-pytorch", "--json", path.to_str().unwrap()], &[], None);
    assert!(o.status.success(), "{}", text(&o));
    let json: Json = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!((json.key("driver").text(), json.key("quick")), (Some("sim"), &Json::Bool(true)));
    assert!(json.key("pytorch_error").text().unwrap().contains("--no-pytorch"));
    let cases = ops_cases(&json);
    assert!(cases.len() >= 200, "{} cases", cases.len());
    for name in [
        "copy_d2d",
        "gelu_bf16",
        "add_f16_bcast_row",
        "div_f32_bcast_col",
        "exp_f16_transposed",
        "mul_f32_vec",
        "pow_f32",
        "ge_f32",
        "where_bf16",
        "cast_f32_to_bf16",
        "contiguous_f32_transposed",
        "sum_f32_first",
        "argmax_f32_all",
        "max_f16_last",
        "sum_i64_all",
        "softmax_bf16_rows1024",
        "log_softmax_f16_rows32768",
        "matmul_bf16_vec",
    ] {
        assert!(cases.contains_key(name), "no case {name}: {:?}", cases.keys());
    }
    for (name, c) in &cases {
        assert_eq!(c.key("passed"), &Json::Bool(true), "{name} failed its check: {c}");
        let (us, gbps) = (c.key("cudasem_us").num().unwrap(), c.key("cudasem_gbps").num().unwrap());
        let bytes = c.key("bytes").num().unwrap();
        assert!(us > 0.0 && bytes > 0.0, "{name}: {c}");
        assert!((gbps - bytes / (us * 1e3)).abs() <= 1e-4 * gbps, "{name}: GB/s is bytes / time: {c}");
        assert_eq!((c.key("pytorch_us"), c.key("ratio")), (&Json::Null, &Json::Null), "{name}");
        let launch_bound = name.ends_with("_vec") && !name.starts_with("matmul_");
        assert_eq!(c.key("memory_bound"), &Json::Bool(!launch_bound), "{name}");
    }
    let s = json.key("summary");
    assert_eq!(s.key("cases").num(), Some(cases.len() as f64));
    assert_eq!((s.key("failed").num(), s.key("compared").num()), (Some(0.0), Some(0.0)));
    assert_eq!((s.key("geomean_ratio"), s.key("worst")), (&Json::Null, &Json::Null));
    let copy = s.key("copy_d2d_gbps").num().unwrap();
    assert_eq!(Some(copy), cases["copy_d2d"].key("cudasem_gbps").num());
    assert!(s.key("below_85pct_of_copy").as_array().is_some());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("softmax_bf16_rows1024") && out.contains("summary:"), "{out}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("bench {0}/{0} ", cases.len())), "one progress line per case: {err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_op_matrix_reads_pytorchs_times_and_selects_cases_by_substring() {
    let dir = temp_dir("ops-fake");
    let script = fake_script(
        &dir,
        r#"[ "$1" = "--cases" ] && grep -q '"name":"softmax_f32_rows128"' "$2" || { echo "FATAL bad spec: $*"; exit 3; }
echo "INFO torch 9.9.9+fake"
echo "PROGRESS copy_d2d"
echo "RESULT copy_d2d 1e12 us"
echo "PROGRESS add_f32"
echo "RESULT add_f32 2e12 us"
echo "RESULT softmax_f32_rows128 1e-9 us"
echo "ERROR add_f32_vec RuntimeError: boom"
"#,
    );
    let path = dir.join("ops.json");
    let args = ["--ops", "--quick", "--python", "sh", "--script", script.to_str().unwrap()];
    let o = bench(
        &[&args[..], &["--only", "add_f32,softmax_f32_rows128", "--json", path.to_str().unwrap()]].concat(),
        &[],
        None,
    );
    assert!(o.status.success(), "{}", text(&o));
    let json: Json = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!((json.key("torch").text(), json.key("pytorch_error")), (Some("9.9.9+fake"), &Json::Null));
    let cases = ops_cases(&json);
    let names: Vec<&str> = cases.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "add_f32",
            "add_f32_bcast_col",
            "add_f32_bcast_row",
            "add_f32_inplace",
            "add_f32_transposed",
            "add_f32_vec",
            "copy_d2d",
            "log_softmax_f32_rows128",
            "softmax_f32_rows128"
        ],
        "the yardstick always comes along"
    );
    for name in ["copy_d2d", "add_f32", "softmax_f32_rows128"] {
        let c = &cases[name];
        let ratio = c.key("pytorch_us").num().unwrap() / c.key("cudasem_us").num().unwrap();
        let got = c.key("ratio").num().unwrap();
        assert!((got - ratio).abs() <= 1e-5 * ratio, "{name}: ratio {got}, expected {ratio}");
    }
    assert!(cases["add_f32_vec"].key("pytorch_note").text().unwrap().contains("boom"));
    let s = json.key("summary");
    assert_eq!(s.key("compared").num(), Some(3.0));
    assert_eq!(s.key("worst").text(), Some("softmax_f32_rows128"));
    assert_eq!((s.key("below_parity").num(), s.key("below_0_95").num()), (Some(1.0), Some(1.0)));
    let (a, b) = (cases["copy_d2d"].key("ratio").num().unwrap(), cases["add_f32"].key("ratio").num().unwrap());
    let c = cases["softmax_f32_rows128"].key("ratio").num().unwrap();
    let geomean = s.key("geomean_ratio").num().unwrap();
    assert!((geomean - (a * b * c).cbrt()).abs() <= 1e-5 * geomean, "{geomean}");
    assert!(s.key("pytorch_copy_d2d_gbps").num().unwrap() < s.key("copy_d2d_gbps").num().unwrap());

    let o = bench(&["--ops", "--quick", "--no-pytorch", "--only", "warp_speed"], &[], None);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("matches no case"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(dir);
}

/// `bench/pytorch_ops.py` knows every case cudasem sends it (its `--check-spec` needs no torch, so
/// this runs wherever python3 is).
#[test]
fn the_pytorch_ops_script_knows_every_case() {
    let dir = temp_dir("ops-script");
    let spec = dir.join("spec.json");
    let o = bench(&["--ops", "--quick", "--write-spec", spec.to_str().unwrap()], &[], None);
    assert!(o.status.success(), "{}", text(&o));
    let json: Json = serde_json::from_str(&std::fs::read_to_string(&spec).unwrap()).unwrap();
    let n = json.key("cases").as_array().unwrap().len();
    assert!(String::from_utf8_lossy(&o.stdout).contains(&format!("{n} cases written")), "{}", text(&o));
    // From the repository root (where the tests run on the GPU machine), else the manifest's.
    let script = Some(Path::new("bench/pytorch_ops.py").to_path_buf())
        .filter(|p| p.exists())
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/pytorch_ops.py"));
    let o = Command::new("python3")
        .arg(&script)
        .args(["--cases", spec.to_str().unwrap(), "--check-spec"])
        .output()
        .expect("python3 runs");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && out.contains(&format!("KNOWN {n} of {n}")), "{}", text(&o));

    // A case it does not know is an ERROR line for that case, not a crash.
    let mut odd = json.clone();
    odd["cases"][0]["kind"] = "teleport".into();
    std::fs::write(&spec, odd.to_string()).unwrap();
    let o = Command::new("python3")
        .arg(&script)
        .args(["--cases", spec.to_str().unwrap(), "--check-spec"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success() && out.contains("does not know this case (kind `teleport`)"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(dir);
}
