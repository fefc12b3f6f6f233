//! `cudasem run` and multi-process groups: ranks that are processes (this test executable, whose
//! ignored `rank_body` test is the rank's program) reduce over `env://` through a `TcpStore`,
//! (all_reduce, broadcast, an uneven all_to_all_single, barrier) with 1, 2 and 4 ranks on one node and 2 nodes of one rank; a failing rank makes the launcher
//! stop the others and exit with its status; a rank that dies is a timeout error for the others
//! (not a hang), also when it dies mid-collective; SIGTERM to the launcher reaches every rank.
//! Ranks that fork (shells with children) leave no process behind after a failing rank, a good
//! end, SIGTERM or SIGKILL to the launcher and `--timeout`; out-of-range process counts are usage
//! errors; the store lets in no rank with a wrong secret, and several nodes need a shared one.

mod common;

use cudasem::distributed::{self, InitOptions, ReduceOp};
use cudasem::{DType, Device, Error, Tensor};
use std::process::{Command, Output};
use std::time::Duration;

/// What a rank does, from `DIST_BODY`.
fn body() -> Option<String> {
    std::env::var("DIST_BODY").ok().filter(|_| std::env::var_os("RANK").is_some())
}

fn env_usize(key: &str) -> usize {
    std::env::var(key).unwrap().parse().unwrap()
}

/// The rank's program (run by the tests below through `cudasem run`, or spawned directly); does
/// nothing in an ordinary test run.
#[test]
#[ignore = "a rank's program, started by the other tests of this file"]
fn rank_body() {
    let Some(body) = body() else { return };
    let timeout = std::env::var("DIST_TIMEOUT_MS").map_or(60_000, |v| v.parse().unwrap());
    let options = InitOptions { timeout: Duration::from_millis(timeout), ..InitOptions::default() };
    let pg = distributed::init_process_group(options).unwrap();
    let (rank, world) = (env_usize("RANK"), env_usize("WORLD_SIZE"));
    assert_eq!((pg.rank(), pg.world_size(), pg.device()), (rank, world, env_usize("LOCAL_RANK")));
    let dev = Device::cuda(pg.device());
    match body.as_str() {
        "reduce" => {
            let t = Tensor::full([257], (rank + 1) as f64, DType::F32, dev).unwrap();
            pg.all_reduce(&t, ReduceOp::Sum, false).unwrap();
            let want = (world * (world + 1) / 2) as f32;
            assert!(t.to_vec::<f32>().unwrap().iter().all(|&x| x == want), "rank {rank}");
            let b = Tensor::full([3], rank as f64, DType::I64, dev).unwrap();
            pg.broadcast(&b, world - 1, false).unwrap();
            assert_eq!(b.to_vec::<i64>().unwrap(), [(world - 1) as i64; 3]);
            // An uneven all-to-all: rank r sends (2r + s) % 3 rows of 2, each 100r + s, to rank s.
            let rows = |from: usize, to: usize| (2 * from + to) % 3;
            let sends: Vec<usize> = (0..world).map(|s| rows(rank, s)).collect();
            let recvs: Vec<usize> = (0..world).map(|s| rows(s, rank)).collect();
            let data: Vec<i32> = (0..world).flat_map(|s| vec![(100 * rank + s) as i32; 2 * rows(rank, s)]).collect();
            let input = Tensor::from_slice(&data, [data.len() / 2, 2], dev).unwrap();
            let output = Tensor::zeros([recvs.iter().sum::<usize>(), 2], DType::I32, dev).unwrap();
            pg.all_to_all_single_splits(&output, &input, Some(&recvs), Some(&sends), false).unwrap();
            let want: Vec<i32> = (0..world).flat_map(|s| vec![(100 * s + rank) as i32; 2 * rows(s, rank)]).collect();
            assert_eq!(output.to_vec::<i32>().unwrap(), want, "rank {rank}: all_to_all_single with splits");
            pg.barrier().unwrap();
            println!("rank {rank} finished");
        }
        "die" => {
            if rank == 1 {
                std::process::exit(3);
            }
            let t = Tensor::ones([4], DType::F32, dev).unwrap();
            match pg.all_reduce(&t, ReduceOp::Sum, false) {
                Err(Error::DistributedTimeout { what, .. }) if what.contains("[1]") => {
                    println!("rank {rank} finished: a timeout naming rank 1")
                }
                other => panic!("rank {rank}: expected a timeout naming rank 1, got {other:?}"),
            }
        }
        "die_mid" => {
            // Both ranks pass the check; rank 1's collective is held on its stream and the rank
            // dies before it runs, mid-collective for rank 0.
            let t = Tensor::ones([4], DType::F32, dev).unwrap();
            if rank == 1 {
                cudasem::testing::delay(pg.comm_stream(), Duration::from_secs(60)).unwrap();
                let _work = pg.all_reduce(&t, ReduceOp::Sum, true).unwrap();
                std::process::exit(3);
            }
            let outcome = pg.all_reduce(&t, ReduceOp::Sum, true).unwrap().wait_blocking();
            // The tensor the collective was to write reads as its error, not as rank 0's data;
            // so does the device, until the error is taken.
            assert_eq!(t.to_vec::<f32>().map(|_| ()), outcome, "rank {rank}: the first read after the failure");
            assert_eq!(cudasem::cuda::get_last_error(dev), outcome, "rank {rank}: left on the device");
            match outcome {
                Err(Error::DistributedTimeout { what, .. }) => println!("rank {rank} finished: a timeout ({what})"),
                other => panic!("rank {rank}: expected a timeout, got {other:?}"),
            }
        }
        "sleep" => {
            let dir = std::env::var("DIST_PID_DIR").unwrap();
            std::fs::write(format!("{dir}/{rank}"), std::process::id().to_string()).unwrap();
            std::thread::sleep(Duration::from_secs(120));
            println!("rank {rank} finished");
        }
        other => panic!("unknown DIST_BODY {other}"),
    }
    distributed::destroy_process_group();
}

/// This executable, running only `rank_body`.
fn rank_program(cmd: &mut Command) -> &mut Command {
    cmd.arg(std::env::current_exe().unwrap()).args([
        "--ignored",
        "--exact",
        "rank_body",
        "--nocapture",
        "--test-threads=1",
    ])
}

/// The machine for the ranks: the run's driver, or a simulated one of four GPUs.
fn machine_env(cmd: &mut Command) -> &mut Command {
    if std::env::var("CUDASEM_DRIVER").as_deref() != Ok("cuda") {
        cmd.env("CUDASEM_DRIVER", "sim").env("CUDASEM_SIM_DEVICES", "4");
    }
    cmd
}

/// Local ranks the machine can give a device each: 1, 2 and 4 on the simulated machine.
fn local_worlds() -> Vec<usize> {
    if std::env::var("CUDASEM_DRIVER").as_deref() != Ok("cuda") {
        return vec![1, 2, 4];
    }
    if !cudasem::testing::has_devices(1) {
        return Vec::new();
    }
    let n = cudasem::cuda::device_count();
    [1, 2, 4].into_iter().filter(|&w| w <= n).collect()
}

/// Whether two local ranks can run; else skips (a failure where the run must cover two GPUs).
fn two_local_ranks() -> bool {
    if local_worlds().len() >= 2 {
        return true;
    }
    cudasem::testing::skip(2, "two ranks on one node need two devices");
    false
}

fn launch(args: &[&str], body: &str, extra: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(common::cudasem_binary());
    cmd.arg("run").args(args).arg("--");
    rank_program(&mut cmd);
    machine_env(&mut cmd).env("DIST_BODY", body).envs(extra.iter().copied());
    cmd.output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn ranks_started_by_cudasem_run_reduce_over_env_rendezvous() {
    for n in local_worlds() {
        let o = launch(&["--nproc-per-node", &n.to_string()], "reduce", &[]);
        let out = text(&o);
        assert!(o.status.success(), "{n} ranks: {out}");
        for r in 0..n {
            assert!(out.contains(&format!("rank {r} finished")), "{n} ranks, rank {r}: {out}");
        }
    }
}

#[test]
fn two_nodes_of_one_rank_meet_at_the_master() {
    // On GPUs each node's rank needs a GPU of its own (NCCL refuses two ranks on one device), as
    // two machines would have: the nodes see one GPU each.
    let cuda = std::env::var("CUDASEM_DRIVER").as_deref() == Ok("cuda");
    if local_worlds().is_empty() || (cuda && !two_local_ranks()) {
        return;
    }
    let port = free_port().to_string();
    let nodes: Vec<_> = (0..2)
        .map(|node| {
            let mut cmd = Command::new(common::cudasem_binary());
            cmd.args(["run", "--nproc-per-node", "1", "--nnodes", "2", "--node-rank", &node.to_string()]).args([
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                &port,
                "--",
            ]);
            rank_program(&mut cmd);
            // The nodes' launchers share the job's secret (each node's would otherwise differ).
            machine_env(&mut cmd).env("DIST_BODY", "reduce").env("CUDASEM_STORE_SECRET", format!("two-nodes-{port}"));
            if cuda {
                cmd.env("CUDA_VISIBLE_DEVICES", node.to_string());
            }
            cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap()
        })
        .collect();
    for (node, child) in nodes.into_iter().enumerate() {
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "node {node}: {}", text(&o));
        assert!(text(&o).contains(&format!("rank {node} finished")), "node {node}: {}", text(&o));
    }
}

#[test]
fn a_failing_rank_stops_the_others_and_gives_its_exit_code() {
    if !two_local_ranks() {
        return;
    }
    // Rank 1 exits with 3 after the rendezvous; rank 0 waits (a minute) for it in an all-reduce.
    let o = launch(&["--nproc-per-node", "2"], "die", &[("DIST_TIMEOUT_MS", "60000")]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(3), "{out}");
    assert!(out.contains("rank 1 (local rank 1"), "the launcher names the failed rank: {out}");
    assert!(!out.contains("rank 0 finished"), "rank 0 was stopped, not left to time out: {out}");
}

#[test]
fn a_dead_rank_is_a_timeout_error_for_the_others() {
    if !two_local_ranks() {
        return;
    }
    let outs = two_ranks("die", "1500");
    assert_eq!(outs[1].status.code(), Some(3), "{}", text(&outs[1]));
    assert!(outs[0].status.success(), "rank 0 got its error and exited: {}", text(&outs[0]));
    assert!(text(&outs[0]).contains("rank 0 finished: a timeout naming rank 1"), "{}", text(&outs[0]));
}

/// Starts ranks 0 and 1 of a world of two with `body` (this executable, directly, no launcher)
/// and returns their outputs.
fn two_ranks(body: &str, timeout_ms: &str) -> Vec<Output> {
    let port = free_port().to_string();
    let secret = format!("two-ranks-{port}-{}", std::process::id());
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            let mut cmd = Command::new(std::env::current_exe().unwrap());
            cmd.args(["--ignored", "--exact", "rank_body", "--nocapture", "--test-threads=1"]);
            machine_env(&mut cmd)
                .env("DIST_BODY", body)
                .env("DIST_TIMEOUT_MS", timeout_ms)
                .envs([("RANK", rank.to_string()), ("LOCAL_RANK", rank.to_string()), ("WORLD_SIZE", "2".into())])
                .envs([("MASTER_ADDR", "127.0.0.1".to_string()), ("MASTER_PORT", port.clone())])
                // Ranks started by hand share the store's secret as `cudasem run` would give it.
                .env("CUDASEM_STORE_SECRET", &secret);
            cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap()
        })
        .collect();
    ranks.into_iter().map(|c| c.wait_with_output().unwrap()).collect()
}

#[test]
fn a_rank_that_dies_mid_collective_is_a_timeout_error_for_the_others() {
    if !two_local_ranks() {
        return;
    }
    let outs = two_ranks("die_mid", "1500");
    assert_eq!(outs[1].status.code(), Some(3), "{}", text(&outs[1]));
    let out = text(&outs[0]);
    assert!(outs[0].status.success(), "rank 0 got its error and exited: {out}");
    assert!(out.contains("rank 0 finished: a timeout"), "{out}");
    if std::env::var("CUDASEM_DRIVER").as_deref() != Ok("cuda") {
        assert!(out.contains("[1]"), "the simulated collective names the rank it waited for: {out}");
    } else {
        assert!(out.contains("watchdog"), "NCCL's collective is aborted by the watchdog: {out}");
    }
}

#[cfg(unix)]
#[test]
fn sigterm_to_the_launcher_reaches_every_rank() {
    if !two_local_ranks() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("cudasem-run-signal-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = Command::new(common::cudasem_binary());
    cmd.args(["run", "--nproc-per-node", "2", "--"]);
    rank_program(&mut cmd);
    machine_env(&mut cmd).env("DIST_BODY", "sleep").env("DIST_PID_DIR", &dir);
    let mut launcher = cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    // Wait (bounded) until both ranks are running.
    let pids: Vec<i32> = (0..3000)
        .find_map(|_| {
            let read = |r: usize| std::fs::read_to_string(dir.join(r.to_string())).ok()?.trim().parse().ok();
            match (read(0), read(1)) {
                (Some(a), Some(b)) => Some(vec![a, b]),
                _ => {
                    std::thread::sleep(Duration::from_millis(10));
                    None
                }
            }
        })
        .expect("both ranks started within 30 s");
    let pid = nix::unistd::Pid::from_raw(launcher.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = launcher.wait().unwrap();
    let mut out = String::new();
    std::io::Read::read_to_string(&mut launcher.stderr.take().unwrap(), &mut out).unwrap();
    assert_eq!(status.code(), Some(128 + 15), "{out}");
    assert!(out.contains("forwarding it to the ranks"), "{out}");
    for p in pids {
        assert!(!std::path::Path::new(&format!("/proc/{p}")).exists(), "rank pid {p} outlived the launcher");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A rank (a shell) that starts two children in its process group, records `SHELL CHILD CHILD`
/// pids in `$PIDS/$RANK`, then does what `$JOB` says: `wait` (runs until stopped), `fail` (rank 1
/// exits 7 once rank 0 has recorded its pids, leaving its children running), `exit0` (every rank
/// exits 0 and leaves its children running).
const FORKING_RANK: &str = r#"
sleep 1000 >/dev/null 2>&1 & a=$!
sleep 1000 >/dev/null 2>&1 & b=$!
echo "$$ $a $b" > "$PIDS/$RANK.tmp" && mv "$PIDS/$RANK.tmp" "$PIDS/$RANK"
case "$JOB" in
  fail) if [ "$RANK" = 1 ]; then until [ -e "$PIDS/0" ]; do sleep 0.05; done; exit 7; fi ;;
  exit0) exit 0 ;;
esac
wait
"#;

/// A launcher running `ranks` forking ranks with `$JOB` = `job`, and the folder of their pids.
#[cfg(unix)]
fn forking_job(ranks: usize, extra: &[&str], job: &str) -> (std::process::Child, std::path::PathBuf) {
    // A folder of its own per job: tests running at once (three of them run `wait` jobs) must not
    // read each other's pids (seen on a 16-core machine: one test's SIGTERM checked another's ranks).
    static JOBS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = JOBS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("cudasem-run-leaks-{}-{job}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = Command::new(common::cudasem_binary());
    cmd.args(["run", "--nproc-per-node", &ranks.to_string()]).args(extra).args(["--", "sh", "-c", FORKING_RANK]);
    cmd.env("PIDS", &dir).env("JOB", job).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
    (cmd.spawn().unwrap(), dir)
}

/// The pids the ranks recorded (waits, bounded, until all `ranks` did).
#[cfg(unix)]
fn recorded_pids(dir: &std::path::Path, ranks: usize) -> Vec<i32> {
    for _ in 0..3000 {
        let files: Vec<String> =
            (0..ranks).filter_map(|r| std::fs::read_to_string(dir.join(r.to_string())).ok()).collect();
        if files.len() == ranks {
            let pids: Vec<i32> = files.iter().flat_map(|f| f.split_whitespace().map(|p| p.parse().unwrap())).collect();
            assert_eq!(pids.len(), 3 * ranks);
            return pids;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the ranks did not record their pids within 30 s");
}

/// Whether `pid` runs (a zombie has exited: it does not).
#[cfg(unix)]
fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !matches!(stat.rsplit_once(')').and_then(|(_, f)| f.split_whitespace().next()), Some("Z" | "X")),
        Err(_) if std::path::Path::new("/proc/self").exists() => false,
        Err(_) => nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok(),
    }
}

/// Waits (bounded) for the launcher to exit; its status. A launcher still running after 60 s is
/// killed and the test fails.
#[cfg(unix)]
fn exit_of(launcher: &mut std::process::Child) -> std::process::ExitStatus {
    for _ in 0..6000 {
        if let Some(s) = launcher.try_wait().unwrap() {
            return s;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = launcher.kill();
    panic!("the launcher did not exit within 60 s");
}

/// Asserts that no recorded process of the job runs, then returns the launcher's stderr.
#[cfg(unix)]
fn assert_nothing_left(pids: &[i32], launcher: &mut std::process::Child, dir: &std::path::Path) -> String {
    let left: Vec<i32> = pids.iter().copied().filter(|&p| running(p)).collect();
    assert!(left.is_empty(), "processes of the job outlived the launcher: {left:?} (of {pids:?})");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut launcher.stderr.take().unwrap(), &mut err).unwrap();
    let _ = std::fs::remove_dir_all(dir);
    err
}

#[cfg(unix)]
#[test]
fn a_failing_rank_leaves_no_process_of_the_job_behind() {
    let (mut launcher, dir) = forking_job(2, &[], "fail");
    let pids = recorded_pids(&dir, 2);
    let status = exit_of(&mut launcher);
    let err = assert_nothing_left(&pids, &mut launcher, &dir);
    assert_eq!(status.code(), Some(7), "{err}");
    assert!(err.contains("rank 1 (local rank 1"), "{err}");
}

#[cfg(unix)]
#[test]
fn ranks_that_exit_well_leave_no_process_behind() {
    let (mut launcher, dir) = forking_job(2, &[], "exit0");
    let pids = recorded_pids(&dir, 2);
    let status = exit_of(&mut launcher);
    let err = assert_nothing_left(&pids, &mut launcher, &dir);
    assert_eq!(status.code(), Some(0), "{err}");
}

#[cfg(unix)]
#[test]
fn sigterm_to_the_launcher_leaves_no_process_of_the_job_behind() {
    let (mut launcher, dir) = forking_job(2, &[], "wait");
    let pids = recorded_pids(&dir, 2);
    let pid = nix::unistd::Pid::from_raw(launcher.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = exit_of(&mut launcher);
    let err = assert_nothing_left(&pids, &mut launcher, &dir);
    assert_eq!(status.code(), Some(128 + 15), "{err}");
}

#[cfg(target_os = "linux")]
#[test]
fn sigkill_to_the_launcher_leaves_no_process_of_the_job_behind() {
    let (mut launcher, dir) = forking_job(2, &[], "wait");
    let pids = recorded_pids(&dir, 2);
    launcher.kill().unwrap();
    launcher.wait().unwrap();
    // The launcher cannot clean up: the kernel (PR_SET_PDEATHSIG) and its reaper do, shortly.
    for _ in 0..2000 {
        if !pids.iter().any(|&p| running(p)) {
            let _ = std::fs::remove_dir_all(&dir);
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let left: Vec<i32> = pids.iter().copied().filter(|&p| running(p)).collect();
    for &p in &left {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::Signal::SIGKILL);
    }
    panic!("processes of the job outlived a SIGKILL of the launcher by 20 s: {left:?} (of {pids:?})");
}

#[cfg(unix)]
#[test]
fn a_job_past_its_timeout_is_stopped_with_status_124() {
    let (mut launcher, dir) = forking_job(2, &["--timeout", "1"], "wait");
    let pids = recorded_pids(&dir, 2);
    let status = exit_of(&mut launcher);
    let err = assert_nothing_left(&pids, &mut launcher, &dir);
    assert_eq!(status.code(), Some(124), "{err}");
    assert!(err.contains("--timeout 1"), "{err}");
}

#[test]
fn out_of_range_process_counts_are_a_usage_error_not_a_crash() {
    let cases: [&[&str]; 6] = [
        &["--nproc-per-node", "18446744073709551615"],
        &["--nproc-per-node", "1000000000000"],
        &["--nproc-per-node", "0"],
        &["--nproc-per-node", "1025"],
        &["--nproc-per-node", "1", "--nnodes", "18446744073709551615"],
        &["--nproc-per-node", "1", "--nnodes", "2", "--node-rank", "2"],
    ];
    for args in cases {
        let o = Command::new(common::cudasem_binary())
            .arg("run")
            .args(args)
            .args(["--", "true"])
            .env("CUDASEM_STORE_SECRET", "s")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(!err.contains("panicked") && err.contains("--n"), "{args:?}: {err}");
    }
    let o = Command::new(common::cudasem_binary())
        .args(["run", "--nproc-per-node", "1025", "--", "true"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("1..=1024"), "the range is named");
}

#[test]
fn several_nodes_need_a_shared_secret_and_a_wrong_one_is_refused() {
    let o = Command::new(common::cudasem_binary())
        .args(["run", "--nproc-per-node", "1", "--nnodes", "2", "--", "true"])
        .env_remove("CUDASEM_STORE_SECRET")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("CUDASEM_STORE_SECRET"), "the error names the variable: {err}");
    if local_worlds().is_empty() {
        return;
    }
    // Rank 0 serves with one secret, rank 1 comes with another: refused, not let in.
    let port = free_port().to_string();
    let ranks: Vec<_> = ["right", "wrong"]
        .iter()
        .enumerate()
        .map(|(rank, secret)| {
            let mut cmd = Command::new(std::env::current_exe().unwrap());
            cmd.args(["--ignored", "--exact", "rank_body", "--nocapture", "--test-threads=1"]);
            machine_env(&mut cmd)
                .env("DIST_BODY", "reduce")
                .env("DIST_TIMEOUT_MS", "1500")
                .envs([("RANK", rank.to_string()), ("LOCAL_RANK", "0".into()), ("WORLD_SIZE", "2".into())])
                .envs([("MASTER_ADDR", "127.0.0.1".to_string()), ("MASTER_PORT", port.clone())])
                .env("CUDASEM_STORE_SECRET", secret);
            cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap()
        })
        .collect();
    let outs: Vec<Output> = ranks.into_iter().map(|c| c.wait_with_output().unwrap()).collect();
    assert!(!outs[1].status.success(), "{}", text(&outs[1]));
    assert!(text(&outs[1]).contains("refused this client"), "{}", text(&outs[1]));
    assert!(!outs[0].status.success(), "rank 0 timed out waiting for rank 1: {}", text(&outs[0]));
}

/// The children of `pid` (Linux: `/proc/PID/task/*/children`).
#[cfg(target_os = "linux")]
fn children_of(pid: u32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let mut out = Vec::new();
    for t in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(t.path().join("children")) {
            out.extend(text.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
        }
    }
    out
}

/// The command line of `pid`, its arguments joined by spaces.
#[cfg(target_os = "linux")]
fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// With its reaper gone too, a SIGKILLed launcher still takes its ranks along: each rank asked the
/// kernel, in the `run-rank` trampoline before it became the program, for a SIGKILL when the
/// launcher dies (PR_SET_PDEATHSIG survives the exec).
#[cfg(target_os = "linux")]
#[test]
fn a_rank_dies_with_its_launcher_even_without_the_reaper() {
    let mut launcher = Command::new(common::cudasem_binary())
        .args(["run", "--nproc-per-node", "1", "--", "sleep", "1000"])
        .spawn()
        .unwrap();
    let mut found = None;
    for _ in 0..500 {
        let kids = children_of(launcher.id());
        let reaper = kids.iter().copied().find(|&p| cmdline(p).contains("run-reaper"));
        let rank = kids.iter().copied().find(|&p| cmdline(p).starts_with("sleep 1000"));
        if let (Some(r), Some(s)) = (reaper, rank) {
            found = Some((r, s));
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let Some((reaper, rank)) = found else {
        let _ = launcher.kill();
        panic!("the launcher's reaper and rank did not appear: {:?}", children_of(launcher.id()));
    };
    let kill = |p: i32| nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::Signal::SIGKILL);
    kill(reaper).unwrap();
    launcher.kill().unwrap();
    launcher.wait().unwrap();
    for _ in 0..2000 {
        if !running(rank) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = kill(rank);
    panic!("the rank (pid {rank}) outlived its SIGKILLed launcher by 20 s without the reaper");
}
