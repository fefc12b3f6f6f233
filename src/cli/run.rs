//! `cudasem run`: torchrun's launcher. Starts `--nproc-per-node` copies of a program with
//! torchrun's environment (`RANK`, `LOCAL_RANK`, `WORLD_SIZE`, `LOCAL_WORLD_SIZE`, `GROUP_RANK`,
//! `ROLE_RANK`, `ROLE_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`, `TORCHELASTIC_RUN_ID`,
//! `TORCHELASTIC_RESTART_COUNT`, `TORCHELASTIC_MAX_RESTARTS`, and `OMP_NUM_THREADS=1` unless set),
//! one GPU per local rank through `LOCAL_RANK`, the store's secret in `CUDASEM_STORE_SECRET` (a
//! random one per job; the launcher's own when set, which several nodes need), and waits for them:
//! - every rank exits 0 → exit 0;
//! - a rank fails (a non-zero status or a signal) → the others get SIGTERM, then SIGKILL after a
//!   grace period, and the launcher exits with the failed rank's status (128 + signal for a
//!   signal, as a shell reports it);
//! - SIGINT, SIGTERM or SIGHUP sent to the launcher is forwarded to every rank (a second one
//!   kills them), and the launcher exits with 128 + that signal;
//! - the job runs past `--timeout` → every rank is stopped as above, exit 124 (as `timeout(1)`).
//!
//! Nothing of the job is left behind. Each rank runs in a process group of its own, and every
//! signal goes to the whole group, so the processes a rank started are stopped with it, also when
//! the job ends well (what a rank left running gets SIGTERM, then SIGKILL). On Linux a rank is
//! killed when the launcher dies (`PR_SET_PDEATHSIG`, asked for by the rank itself in the hidden
//! `cudasem run-rank` trampoline, which then `exec`s the program), and a small reaper process (this program
//! again, `cudasem run-reaper`, in a process group of its own) kills every rank's group when the
//! launcher is gone without saying it is done: so a SIGKILL of the launcher leaves nothing either.
//!
//! On one node without `--master-port` the launcher takes a free port of the loopback (torchrun's
//! `--standalone`); with several nodes the port defaults to torchrun's 29500.

use std::process::{Child, ExitCode};
use std::time::{Duration, Instant};

/// How long ranks have between SIGTERM and SIGKILL.
const GRACE: Duration = Duration::from_secs(5);
/// How long the launcher waits for SIGKILLed processes to be torn down.
const KILL_WAIT: Duration = Duration::from_secs(2);
/// How often the launcher looks at its ranks.
const POLL: Duration = Duration::from_millis(20);
/// The most processes `--nproc-per-node` starts.
pub const MAX_NPROC_PER_NODE: u16 = 1024;
/// The most nodes `--nnodes` names.
pub const MAX_NNODES: u32 = 65536;
/// The exit status of a job stopped by `--timeout`.
const TIMED_OUT: u8 = 124;
/// The variable that carries the store's secret (`cudasem::distributed::TcpStore` reads it).
const SECRET_ENV: &str = "CUDASEM_STORE_SECRET";

/// `cudasem run`'s options.
pub struct Options {
    /// Processes on this node, `1..=MAX_NPROC_PER_NODE`.
    pub nproc_per_node: usize,
    /// Nodes in the world, `1..=MAX_NNODES`.
    pub nnodes: usize,
    /// This node's number, `0..nnodes`.
    pub node_rank: usize,
    /// Rank 0's host.
    pub master_addr: String,
    /// Rank 0's store port.
    pub master_port: Option<u16>,
    /// How long the whole job may run.
    pub timeout: Option<Duration>,
    /// The program and its arguments.
    pub command: Vec<String>,
}

/// One started rank; its process group has its pid as id. The launcher learns of a rank's exit
/// without reaping it (Linux), so that id cannot be reused while the launcher signals the group.
struct Rank {
    rank: usize,
    local_rank: usize,
    child: Child,
    /// The shell's status once it exited.
    status: Option<u8>,
}

/// Runs the ranks; see the module docs for the exit status.
pub fn run(o: Options) -> ExitCode {
    match launch(o) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("cudasem run: {e}");
            ExitCode::from(2)
        }
    }
}

/// The job's shape: the world size, or why the options cannot make one.
fn world_size(o: &Options) -> Result<usize, String> {
    let in_range = (1..=usize::from(MAX_NPROC_PER_NODE)).contains(&o.nproc_per_node)
        && (1..=MAX_NNODES as usize).contains(&o.nnodes)
        && o.node_rank < o.nnodes;
    let world = o.nproc_per_node.checked_mul(o.nnodes).filter(|_| in_range);
    world.ok_or_else(|| {
        format!(
            "--nproc-per-node must be in 1..={MAX_NPROC_PER_NODE}, --nnodes in 1..={MAX_NNODES} and --node-rank below \
             --nnodes (got {}, {}, {})",
            o.nproc_per_node, o.nnodes, o.node_rank
        )
    })
}

/// The store's secret for the ranks: the launcher's own, else (one node) a new random one.
fn secret(nnodes: usize) -> Result<String, String> {
    match std::env::var(SECRET_ENV) {
        Ok(s) if !s.is_empty() => Ok(s),
        Ok(_) => Err(format!("{SECRET_ENV} is set but empty")),
        Err(_) if nnodes > 1 => Err(format!(
            "with several nodes every node's ranks need the same store secret: set {SECRET_ENV} to one random value \
             (e.g. `export {SECRET_ENV}=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n')`) for every node's \
             launcher"
        )),
        Err(_) => {
            let mut b = [0u8; 32];
            getrandom::fill(&mut b).map_err(|e| format!("no random bytes for the store's secret: {e}"))?;
            Ok(b.iter().map(|x| format!("{x:02x}")).collect())
        }
    }
}

fn launch(o: Options) -> Result<u8, String> {
    let world = world_size(&o)?;
    let Some((program, args)) = o.command.split_first() else {
        return Err("no program given: cudasem run --nproc-per-node N -- PROGRAM ARGS...".into());
    };
    let port = match o.master_port {
        Some(p) => p,
        None if o.nnodes == 1 => free_port()?,
        None => 29500,
    };
    let secret = secret(o.nnodes)?;
    let deadline = o.timeout.and_then(|t| Instant::now().checked_add(t));
    let run_id = format!("cudasem-{}-{port}", std::process::id());
    let signals = signals::Forwarder::new()?;
    let mut reaper = guard::Reaper::start()?;
    let mut ranks = Vec::with_capacity(o.nproc_per_node);
    for local_rank in 0..o.nproc_per_node {
        let rank = o.node_rank * o.nproc_per_node + local_rank;
        let mut cmd = guard::rank_command(program, args)?;
        cmd.env("RANK", rank.to_string())
            .env("LOCAL_RANK", local_rank.to_string())
            .env("WORLD_SIZE", world.to_string())
            .env("LOCAL_WORLD_SIZE", o.nproc_per_node.to_string())
            .env("GROUP_RANK", o.node_rank.to_string())
            .env("ROLE_RANK", rank.to_string())
            .env("ROLE_WORLD_SIZE", world.to_string())
            .env("MASTER_ADDR", &o.master_addr)
            .env("MASTER_PORT", port.to_string())
            .env("TORCHELASTIC_RUN_ID", &run_id)
            .env("TORCHELASTIC_RESTART_COUNT", "0")
            .env("TORCHELASTIC_MAX_RESTARTS", "0")
            .env(SECRET_ENV, &secret);
        if o.nproc_per_node > 1 && std::env::var_os("OMP_NUM_THREADS").is_none() {
            cmd.env("OMP_NUM_THREADS", "1");
        }
        match cmd.spawn() {
            Ok(child) => {
                reaper.watch(child.id());
                ranks.push(Rank { rank, local_rank, child, status: None });
            }
            Err(e) => {
                stop(&mut ranks, &signals, signals::TERM);
                reaper.release();
                reap(&mut ranks);
                return Err(format!("cannot start {program}: {e}"));
            }
        }
    }
    let code = supervise(&mut ranks, &signals, deadline, o.timeout);
    reaper.release();
    reap(&mut ranks);
    Ok(code)
}

/// A port of the loopback that nothing listens on now.
fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("cannot find a free port: {e}"))?;
    l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

/// Notes the ranks that exited since the last look.
fn look(ranks: &mut [Rank]) {
    for r in ranks.iter_mut().filter(|r| r.status.is_none()) {
        r.status = guard::exited(&mut r.child);
    }
}

/// Waits for the ranks: the exit code (see the module docs). Every way out stops every group.
fn supervise(
    ranks: &mut [Rank],
    signals: &signals::Forwarder,
    deadline: Option<Instant>,
    timeout: Option<Duration>,
) -> u8 {
    loop {
        if let Some(sig) = signals.received() {
            eprintln!("cudasem run: got signal {sig}; forwarding it to the ranks");
            stop(ranks, signals, sig);
            return (128 + sig).clamp(0, 255) as u8;
        }
        look(ranks);
        if let Some(failed) = ranks.iter().find(|r| r.status.is_some_and(|s| s != 0)) {
            let (rank, local, pid, code) =
                (failed.rank, failed.local_rank, failed.child.id(), failed.status.unwrap_or(1));
            eprintln!(
                "cudasem run: rank {rank} (local rank {local}, pid {pid}) failed with exit code {code}; stopping the \
                 other ranks"
            );
            stop(ranks, signals, signals::TERM);
            return code.max(1);
        }
        if ranks.iter().all(|r| r.status.is_some()) {
            // What the ranks left running in their groups goes too.
            stop(ranks, signals, signals::TERM);
            return 0;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            let secs = timeout.unwrap_or_default().as_secs_f64();
            eprintln!(
                "cudasem run: the job ran past --timeout {secs} s; stopping every rank (exit status {TIMED_OUT})"
            );
            stop(ranks, signals, signals::TERM);
            return TIMED_OUT;
        }
        std::thread::sleep(POLL);
    }
}

/// Sends `sig` to every rank's group and waits until the groups are empty; SIGKILL to the groups
/// after the grace period (or at another signal).
fn stop(ranks: &mut [Rank], signals: &signals::Forwarder, sig: i32) {
    let groups: Vec<u32> = ranks.iter().map(|r| r.child.id()).collect();
    signals::to_groups(&groups, sig);
    let deadline = Instant::now() + GRACE;
    loop {
        look(ranks);
        if ranks.iter().all(|r| r.status.is_some()) && !guard::any_running(&groups) {
            break;
        }
        if Instant::now() >= deadline || signals.received().is_some() {
            break;
        }
        std::thread::sleep(POLL);
    }
    signals::to_groups(&groups, signals::KILL);
    // A killed process is gone once the kernel has torn it down: wait for that, briefly.
    let deadline = Instant::now() + KILL_WAIT;
    while guard::any_running(&groups) && Instant::now() < deadline {
        std::thread::sleep(POLL);
    }
}

/// Reaps the ranks (after [`stop`] and the reaper's release: until now an exited rank's pid, its
/// group's id, stayed the job's).
fn reap(ranks: &mut [Rank]) {
    for r in ranks.iter_mut() {
        #[cfg(not(unix))]
        let _ = r.child.kill();
        let _ = r.child.wait();
    }
}

/// The status a shell reports for `s`.
fn code_of(s: std::process::ExitStatus) -> u8 {
    if let Some(c) = s.code() {
        return c.clamp(0, 255) as u8;
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = s.signal() {
            return (128 + sig).clamp(0, 255) as u8;
        }
    }
    1
}

/// `cudasem run-reaper`: started by the launcher, reads `PGID` lines (the ranks' groups) on its
/// standard input; at `done` it exits, and when the input ends without it (the launcher died,
/// even by SIGKILL) it sends SIGKILL to every group it was told of.
pub fn reaper() -> ExitCode {
    use std::io::BufRead;
    let mut groups = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        match line.trim() {
            "done" => return ExitCode::SUCCESS,
            g => groups.extend(g.parse::<u32>().ok()),
        }
    }
    signals::to_groups(&groups, signals::KILL);
    ExitCode::SUCCESS
}

#[path = "run_guard.rs"]
mod guard;

pub use guard::rank_trampoline;

#[cfg(unix)]
mod signals {
    use nix::sys::signal::{killpg, Signal};
    use nix::unistd::Pid;
    use signal_hook::consts::{SIGHUP, SIGINT, SIGKILL, SIGTERM};
    use signal_hook::iterator::Signals;
    use std::sync::Mutex;

    /// SIGTERM's number.
    pub const TERM: i32 = SIGTERM;
    /// SIGKILL's number.
    pub const KILL: i32 = SIGKILL;

    /// The signals the launcher catches.
    pub struct Forwarder(Mutex<Signals>);

    impl Forwarder {
        pub fn new() -> Result<Forwarder, String> {
            Signals::new([SIGINT, SIGTERM, SIGHUP])
                .map(|s| Forwarder(Mutex::new(s)))
                .map_err(|e| format!("cannot catch signals: {e}"))
        }

        /// A signal that arrived since the last call.
        pub fn received(&self) -> Option<i32> {
            self.0.lock().unwrap_or_else(|e| e.into_inner()).pending().next()
        }
    }

    /// Sends `sig` to each process group (a group already empty is skipped).
    pub fn to_groups(groups: &[u32], sig: i32) {
        let Ok(sig) = Signal::try_from(sig) else { return };
        for &g in groups {
            if let Ok(g) = i32::try_from(g) {
                let _ = killpg(Pid::from_raw(g), sig);
            }
        }
    }
}

#[cfg(not(unix))]
mod signals {
    /// The number the launcher reports for a stop.
    pub const TERM: i32 = 15;
    /// The number of a kill.
    pub const KILL: i32 = 9;

    /// Without Unix signals nothing is caught.
    pub struct Forwarder;

    impl Forwarder {
        pub fn new() -> Result<Forwarder, String> {
            Ok(Forwarder)
        }

        pub fn received(&self) -> Option<i32> {
            None
        }
    }

    /// Without process groups there is nothing to signal; the ranks are killed when reaped.
    pub fn to_groups(_groups: &[u32], _sig: i32) {}
}
