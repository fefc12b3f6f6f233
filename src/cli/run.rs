//! `cudasem run`: torchrun's launcher. Starts `--nproc-per-node` copies of a program with
//! torchrun's environment (`RANK`, `LOCAL_RANK`, `WORLD_SIZE`, `LOCAL_WORLD_SIZE`, `GROUP_RANK`,
//! `ROLE_RANK`, `ROLE_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`, `TORCHELASTIC_RUN_ID`,
//! `TORCHELASTIC_RESTART_COUNT`, `TORCHELASTIC_MAX_RESTARTS`, and `OMP_NUM_THREADS=1` unless set),
//! one GPU per local rank through `LOCAL_RANK`, and waits for them:
//! - every rank exits 0 → exit 0;
//! - a rank fails (a non-zero status or a signal) → the others get SIGTERM, then SIGKILL after a
//!   grace period, and the launcher exits with the failed rank's status (128 + signal for a
//!   signal, as a shell reports it);
//! - SIGINT, SIGTERM or SIGHUP sent to the launcher is forwarded to every rank (a second one
//!   kills them), and the launcher exits with 128 + that signal.
//!
//! On one node without `--master-port` the launcher takes a free port of the loopback (torchrun's
//! `--standalone`); with several nodes the port defaults to torchrun's 29500.

use std::process::{Child, Command, ExitCode, ExitStatus};
use std::time::{Duration, Instant};

/// How long ranks have between SIGTERM and SIGKILL.
const GRACE: Duration = Duration::from_secs(5);
/// How often the launcher looks at its ranks.
const POLL: Duration = Duration::from_millis(20);

/// `cudasem run`'s options.
pub struct Options {
    /// Processes on this node.
    pub nproc_per_node: usize,
    /// Nodes in the world.
    pub nnodes: usize,
    /// This node's number, `0..nnodes`.
    pub node_rank: usize,
    /// Rank 0's host.
    pub master_addr: String,
    /// Rank 0's store port.
    pub master_port: Option<u16>,
    /// The program and its arguments.
    pub command: Vec<String>,
}

/// One started rank.
struct Rank {
    rank: usize,
    local_rank: usize,
    child: Child,
    status: Option<ExitStatus>,
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

fn launch(o: Options) -> Result<u8, String> {
    if o.nproc_per_node == 0 || o.nnodes == 0 || o.node_rank >= o.nnodes {
        return Err(format!(
            "--nproc-per-node and --nnodes must be at least 1 and --node-rank below --nnodes (got {}, {}, {})",
            o.nproc_per_node, o.nnodes, o.node_rank
        ));
    }
    let Some((program, args)) = o.command.split_first() else {
        return Err("no program given: cudasem run --nproc-per-node N -- PROGRAM ARGS...".into());
    };
    let port = match o.master_port {
        Some(p) => p,
        None if o.nnodes == 1 => free_port()?,
        None => 29500,
    };
    let world = o.nproc_per_node * o.nnodes;
    let run_id = format!("cudasem-{}-{port}", std::process::id());
    let signals = signals::Forwarder::new()?;
    let mut ranks = Vec::with_capacity(o.nproc_per_node);
    for local_rank in 0..o.nproc_per_node {
        let rank = o.node_rank * o.nproc_per_node + local_rank;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env("RANK", rank.to_string())
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
            .env("TORCHELASTIC_MAX_RESTARTS", "0");
        if o.nproc_per_node > 1 && std::env::var_os("OMP_NUM_THREADS").is_none() {
            cmd.env("OMP_NUM_THREADS", "1");
        }
        match cmd.spawn() {
            Ok(child) => ranks.push(Rank { rank, local_rank, child, status: None }),
            Err(e) => {
                stop(&mut ranks, &signals);
                return Err(format!("cannot start {program}: {e}"));
            }
        }
    }
    Ok(supervise(&mut ranks, &signals))
}

/// A port of the loopback that nothing listens on now.
fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("cannot find a free port: {e}"))?;
    l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

/// The status a shell reports for `s`.
fn code_of(s: ExitStatus) -> u8 {
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

/// Waits for the ranks: the exit code (see the module docs).
fn supervise(ranks: &mut [Rank], signals: &signals::Forwarder) -> u8 {
    loop {
        if let Some(sig) = signals.received() {
            eprintln!("cudasem run: got signal {sig}; forwarding it to the ranks");
            signals.forward(ranks.iter().filter(|r| r.status.is_none()).map(|r| &r.child), sig);
            wait_all(ranks, signals);
            return (128 + sig).clamp(0, 255) as u8;
        }
        for r in ranks.iter_mut().filter(|r| r.status.is_none()) {
            if let Ok(Some(s)) = r.child.try_wait() {
                r.status = Some(s);
            }
        }
        if let Some(failed) = ranks.iter().find(|r| r.status.is_some_and(|s| !s.success())) {
            let (rank, local, pid, code) =
                (failed.rank, failed.local_rank, failed.child.id(), code_of(failed.status.unwrap_or_default()));
            eprintln!(
                "cudasem run: rank {rank} (local rank {local}, pid {pid}) failed with exit code {code}; stopping the \
                 other ranks"
            );
            stop(ranks, signals);
            return code.max(1);
        }
        if ranks.iter().all(|r| r.status.is_some()) {
            return 0;
        }
        std::thread::sleep(POLL);
    }
}

/// SIGTERM to the ranks still running, SIGKILL to those left after the grace period.
fn stop(ranks: &mut [Rank], signals: &signals::Forwarder) {
    signals.forward(ranks.iter().filter(|r| r.status.is_none()).map(|r| &r.child), signals::TERM);
    wait_all(ranks, signals);
}

/// Waits for every rank, killing those left after the grace period (or at a second signal).
fn wait_all(ranks: &mut [Rank], signals: &signals::Forwarder) {
    let deadline = Instant::now() + GRACE;
    loop {
        for r in ranks.iter_mut().filter(|r| r.status.is_none()) {
            if let Ok(Some(s)) = r.child.try_wait() {
                r.status = Some(s);
            }
        }
        if ranks.iter().all(|r| r.status.is_some()) {
            return;
        }
        if Instant::now() >= deadline || signals.received().is_some() {
            for r in ranks.iter_mut().filter(|r| r.status.is_none()) {
                let _ = r.child.kill();
                r.status = r.child.wait().ok();
            }
            return;
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(unix)]
mod signals {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    use signal_hook::iterator::Signals;
    use std::process::Child;
    use std::sync::Mutex;

    /// SIGTERM's number.
    pub const TERM: i32 = SIGTERM;

    /// The signals the launcher catches, and their forwarding.
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

        /// Sends `sig` to each child.
        pub fn forward<'a>(&self, children: impl Iterator<Item = &'a Child>, sig: i32) {
            let Ok(sig) = Signal::try_from(sig) else { return };
            for c in children {
                let _ = kill(Pid::from_raw(c.id() as i32), sig);
            }
        }
    }
}

#[cfg(not(unix))]
mod signals {
    use std::process::Child;

    /// The number the launcher reports for a stop.
    pub const TERM: i32 = 15;

    /// Without Unix signals, stopping a rank kills it.
    pub struct Forwarder;

    impl Forwarder {
        pub fn new() -> Result<Forwarder, String> {
            Ok(Forwarder)
        }

        pub fn received(&self) -> Option<i32> {
            None
        }

        pub fn forward<'a>(&self, _children: impl Iterator<Item = &'a Child>, _sig: i32) {}
    }
}
