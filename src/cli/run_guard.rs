//! What keeps `cudasem run` from leaving processes behind: each rank in a process group of its
//! own that dies with the launcher, exits seen without reaping (so a group's id stays the job's),
//! a look at which groups still run, and the reaper that outlives a killed launcher.

use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};

/// The command that starts a rank running `program` with `args`: in a new process group (its pid
/// is the group's id) and, on Linux, through this executable's `run-rank` trampoline, which has
/// the kernel SIGKILL the rank when the launcher dies (`PR_SET_PDEATHSIG`, which survives the
/// `exec`) and then becomes the program. Set in the child itself, the setting needs no `unsafe`
/// `pre_exec` hook in the launcher.
pub fn rank_command(program: &str, args: &[String]) -> Result<Command, String> {
    #[cfg(target_os = "linux")]
    let mut cmd = {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find this program to start the ranks: {e}"))?;
        let mut cmd = Command::new(exe);
        cmd.arg("run-rank").arg(std::process::id().to_string()).arg("--").arg(program).args(args);
        cmd
    };
    #[cfg(not(target_os = "linux"))]
    let mut cmd = {
        let mut cmd = Command::new(program);
        cmd.args(args);
        cmd
    };
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    Ok(cmd)
}

/// `cudasem run-rank LAUNCHER -- PROGRAM ARGS`: asks the kernel to SIGKILL this process when its
/// parent dies, checks that the parent is still `launcher` (a launcher that died before the
/// request leaves the rank unstarted instead of unwatched), then replaces itself with the
/// program (same pid, group, environment and standard streams). Returns only on failure.
pub fn rank_trampoline(launcher: u32, command: &[String]) -> std::process::ExitCode {
    let Some((program, args)) = command.split_first() else {
        eprintln!("cudasem run-rank: no program given");
        return std::process::ExitCode::from(2);
    };
    #[cfg(target_os = "linux")]
    {
        use nix::sys::signal::Signal;
        if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL) {
            eprintln!("cudasem run: cannot tie {program} to the launcher's life (prctl PR_SET_PDEATHSIG): {e}");
            return std::process::ExitCode::from(127);
        }
        if u32::try_from(nix::unistd::getppid().as_raw()).ok() != Some(launcher) {
            eprintln!("cudasem run: the launcher (pid {launcher}) is gone; {program} is not started");
            return std::process::ExitCode::from(1);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = launcher;
    #[cfg(unix)]
    {
        let e = std::os::unix::process::CommandExt::exec(Command::new(program).args(args));
        eprintln!("cudasem run: cannot start {program}: {e}");
        std::process::ExitCode::from(127)
    }
    #[cfg(not(unix))]
    {
        let _ = args;
        eprintln!("cudasem run-rank: only on Unix");
        std::process::ExitCode::from(2)
    }
}

/// The status a shell reports for the rank, if it exited. On Linux the rank is not reaped (it
/// stays a zombie until [`Child::wait`]), so its pid, its group's id, cannot be reused meanwhile.
pub fn exited(child: &mut Child) -> Option<u8> {
    #[cfg(target_os = "linux")]
    {
        use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
        let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).ok()?);
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        match waitid(Id::Pid(pid), flags) {
            Ok(WaitStatus::Exited(_, code)) => Some(code.clamp(0, 255) as u8),
            Ok(WaitStatus::Signaled(_, sig, _)) => Some((128 + sig as i32).clamp(0, 255) as u8),
            Ok(_) => None,
            // Already reaped (not by us): fall back to std's view.
            Err(_) => child.try_wait().ok().flatten().map(super::code_of),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        child.try_wait().ok().flatten().map(super::code_of)
    }
}

/// Whether a process of `groups` still runs (zombies, which are dead, do not count). Linux reads
/// `/proc`; elsewhere a group counts as running while it can be signalled.
pub fn any_running(groups: &[u32]) -> bool {
    #[cfg(target_os = "linux")]
    {
        let Ok(procs) = std::fs::read_dir("/proc") else { return false };
        procs.flatten().any(|p| {
            let stat = std::fs::read_to_string(p.path().join("stat")).unwrap_or_default();
            // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parentheses.
            let mut fields = stat.rsplit_once(')').map_or("", |(_, f)| f).split_whitespace();
            let (state, pgrp) = (fields.next(), fields.nth(1).and_then(|g| g.parse::<u32>().ok()));
            !matches!(state, None | Some("Z") | Some("X")) && pgrp.is_some_and(|g| groups.contains(&g))
        })
    }
    #[cfg(all(unix, not(target_os = "linux")))]
    {
        use nix::sys::signal::killpg;
        groups.iter().any(|&g| i32::try_from(g).is_ok_and(|g| killpg(nix::unistd::Pid::from_raw(g), None).is_ok()))
    }
    #[cfg(not(unix))]
    {
        let _ = groups;
        false
    }
}

/// The reaper (`cudasem run-reaper`, see [`super::reaper`]): told each rank's group, and `done`
/// when the launcher finished its own cleanup. In a process group of its own, so that a signal to
/// the launcher's group does not take it along.
pub struct Reaper(Option<(Child, ChildStdin)>);

impl Reaper {
    /// Starts the reaper (this executable again).
    pub fn start() -> Result<Reaper, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find this program to start its reaper: {e}"))?;
        let mut cmd = Command::new(exe);
        cmd.arg("run-reaper").stdin(Stdio::piped()).stdout(Stdio::null());
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd.spawn().map_err(|e| format!("cannot start the launcher's reaper: {e}"))?;
        let stdin = child.stdin.take().ok_or("the reaper has no input")?;
        Ok(Reaper(Some((child, stdin))))
    }

    /// Tells the reaper of a rank's group.
    pub fn watch(&mut self, group: u32) {
        if let Some((_, stdin)) = &mut self.0 {
            let _ = writeln!(stdin, "{group}").and_then(|_| stdin.flush());
        }
    }

    /// Tells the reaper the job is over (its groups are stopped) and waits for it to exit.
    pub fn release(&mut self) {
        if let Some((mut child, mut stdin)) = self.0.take() {
            let _ = writeln!(stdin, "done").and_then(|_| stdin.flush());
            drop(stdin);
            let _ = child.wait();
        }
    }
}
