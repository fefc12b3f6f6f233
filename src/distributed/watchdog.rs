//! A group's watchdog (ProcessGroupNCCL's): failures that happen on the device, after a
//! collective was queued — a peer that died mid-collective, a network error, a collective that
//! never finishes — become typed errors within the group's timeout instead of hangs.
//!
//! Every issued collective is [`track`](Watch::track)ed with its end event. A poll
//! ([`Watch::poll`]: by the group's watchdog thread while work is outstanding, and by every host
//! wait of the group) asks the communicator for an asynchronous error (`ncclCommGetAsyncError`),
//! forgets the collectives whose end event completed, and checks the oldest one against the
//! deadline. On an error or a missed deadline the group **aborts, once**: the cause is kept, every
//! outstanding collective's outcome becomes it, the communicator is aborted (`ncclCommAbort`, so
//! that kernels waiting for a dead peer exit), and every later call fails at once with
//! [`Error::ProcessGroupAborted`].
//!
//! The communicator is used only inside [`Watch::with_comm`], which refuses once the group
//! aborted and counts the calls in progress; an abort that comes while one runs is left to the
//! last call to leave (NCCL's blocking communicators must not be freed under a call), so the
//! abort never races a call. The decisions are here, independent of the backend; the simulated
//! backend has no communicator (its collectives see [`Watch::aborted`] when they start).

use crate::driver::comm::Comm;
use crate::error::{Error, Result};
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// Whether a collective finished on the device (its end event's query).
pub(crate) type Done = Arc<dyn Fn() -> Result<bool> + Send + Sync>;

/// An issued collective the watchdog follows until its end event completes.
pub(crate) struct Pending {
    /// What it is, for the timeout's message (`all_reduce (collective #3)`).
    pub what: String,
    /// When it was issued.
    pub since: Instant,
    /// Whether it finished on the device.
    pub done: Done,
    /// Its outcome, which an abort sets (unless the collective already failed by itself).
    pub outcome: Arc<Outcome>,
}

#[derive(Default)]
struct State {
    /// Tracked works not yet seen finished, oldest first, with their numbers.
    pending: VecDeque<Tracked>,
    /// The next work's number.
    next: u64,
    /// The communicator (none on the simulated backend, or after shutdown).
    comm: Option<Arc<dyn Comm>>,
    /// Calls inside `with_comm`.
    running: usize,
    /// The group aborted while a call ran: the last call to leave aborts the communicator.
    abort_owed: bool,
    /// A thread is inside the communicator's abort (which may take as long as the work queued
    /// before it): shutdown waits for it, so the group never ends under a running abort.
    aborting: bool,
    stopped: bool,
    thread: bool,
    /// The watchdog thread, joined by shutdown.
    handle: Option<std::thread::JoinHandle<()>>,
}

/// A [`Pending`] work with its number in the group's list.
struct Tracked {
    id: u64,
    what: String,
    since: Instant,
    done: Done,
    outcome: Arc<Outcome>,
}

/// One group's watchdog state (see the module docs).
pub(crate) struct Watch {
    rank: usize,
    /// The group's timeout, for the errors' messages.
    timeout: Duration,
    /// How long a collective may take on the device, from its issue, before the group aborts.
    deadline: Duration,
    /// How often the watchdog thread polls while work is outstanding.
    interval: Duration,
    /// Whether polls must wait (a CUDA graph capture underway: querying an event from this
    /// thread would invalidate it).
    paused: fn() -> bool,
    /// Why the group aborted, once it did.
    cause: OnceLock<Error>,
    state: Mutex<State>,
    changed: Condvar,
}

impl Watch {
    /// The watchdog of rank `rank`'s group: collectives get `deadline` on the device, polls skip
    /// while `paused()`, `comm` is the communicator it may abort.
    pub fn new(
        rank: usize,
        timeout: Duration,
        deadline: Duration,
        paused: fn() -> bool,
        comm: Option<Box<dyn Comm>>,
    ) -> Arc<Watch> {
        let interval = (deadline / 8).clamp(Duration::from_millis(1), Duration::from_millis(100));
        let state = State { comm: comm.map(Arc::from), ..State::default() };
        Arc::new(Watch {
            rank,
            timeout,
            deadline,
            interval,
            paused,
            cause: OnceLock::new(),
            state: Mutex::new(state),
            changed: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Why the group aborted, if it did.
    pub fn aborted(&self) -> Option<&Error> {
        self.cause.get()
    }

    /// `Ok` while the group has not aborted; else the error of a call `op` refused.
    pub fn refuse_if_aborted(&self, op: &'static str) -> Result<()> {
        match self.cause.get() {
            None => Ok(()),
            Some(cause) => Err(Error::ProcessGroupAborted { op, rank: self.rank, cause: Box::new(cause.clone()) }),
        }
    }

    /// Runs `f` with the communicator, unless the group aborted (then the refusal of `op`); an
    /// abort that comes meanwhile waits for `f` to return.
    pub fn with_comm<R>(&self, op: &'static str, f: impl FnOnce(&dyn Comm) -> Result<R>) -> Result<R> {
        let comm = self.enter(op)?.ok_or(Error::Internal { op, reason: "the group has no communicator".into() })?;
        let result = f(comm.as_ref());
        self.leave(&comm);
        result
    }

    /// The communicator, counted as in use (none on the simulated backend or after shutdown),
    /// unless the group aborted.
    fn enter(&self, op: &'static str) -> Result<Option<Arc<dyn Comm>>> {
        let mut st = self.lock();
        self.refuse_if_aborted(op)?;
        let comm = st.comm.clone();
        if comm.is_some() {
            st.running += 1;
        }
        Ok(comm)
    }

    /// Ends a use of `comm` from [`Watch::enter`]; the last one aborts it if an abort is owed.
    fn leave(&self, comm: &Arc<dyn Comm>) {
        let owed = {
            let mut st = self.lock();
            st.running -= 1;
            self.changed.notify_all();
            let owed = st.running == 0 && std::mem::take(&mut st.abort_owed);
            st.aborting |= owed;
            owed
        };
        if owed {
            self.abort_comm(comm);
        }
    }

    /// Aborts `comm` (the caller set `aborting`), then lets shutdown go on.
    fn abort_comm(&self, comm: &Arc<dyn Comm>) {
        comm.abort();
        self.lock().aborting = false;
        self.changed.notify_all();
    }

    /// Follows `work` until it completes (starting the watchdog thread on first use).
    pub fn track(self: &Arc<Self>, work: Pending) {
        let mut st = self.lock();
        if let Some(cause) = self.cause.get() {
            fail(&work.outcome, cause);
            return;
        }
        let id = st.next;
        st.next += 1;
        let Pending { what, since, done, outcome } = work;
        st.pending.push_back(Tracked { id, what, since, done, outcome });
        if !st.thread && !st.stopped {
            let me = self.clone();
            st.handle = std::thread::Builder::new()
                .name(format!("cudasem-watchdog-{}", self.rank))
                .spawn(move || me.watch())
                .ok();
            st.thread = st.handle.is_some();
        }
        self.changed.notify_all();
    }

    /// Aborts the group with `cause`, once (later causes are dropped): see the module docs. The
    /// cause is set and the outstanding works failed in one critical section, so whoever sees
    /// the cause through [`Watch::settled`] also sees their outcomes.
    pub fn abort(&self, cause: Error) {
        let comm = {
            let mut st = self.lock();
            if self.cause.set(cause).is_err() {
                return;
            }
            if let Some(cause) = self.cause.get() {
                tracing::error!(
                    target: "cudasem::distributed",
                    rank = self.rank,
                    outstanding = st.pending.len(),
                    cause = %cause,
                    "the watchdog aborted the process group: {cause}"
                );
                for work in st.pending.drain(..) {
                    fail(&work.outcome, cause);
                }
            }
            if st.running == 0 {
                st.aborting = st.comm.is_some();
                st.comm.clone()
            } else {
                st.abort_owed = true;
                None
            }
        };
        self.changed.notify_all();
        if let Some(comm) = comm {
            self.abort_comm(&comm);
        }
    }

    /// Why the group aborted, once the abort has failed every outstanding work (so a work's
    /// outcome read after this is final); `None` while it has not.
    pub fn settled(&self) -> Option<&Error> {
        let cause = self.cause.get()?;
        drop(self.lock());
        Some(cause)
    }

    /// One look at the group at time `now` (see the module docs); aborts it on a failure.
    pub fn poll(&self, now: Instant) {
        if self.cause.get().is_some() || (self.paused)() {
            return;
        }
        if let Ok(Some(comm)) = self.enter("watchdog") {
            let status = comm.async_error();
            self.leave(&comm);
            if let Err(e) = status {
                return self.abort(e);
            }
        }
        // The events are queried without the lock (a query may wait on the driver), the works
        // staying in the list meanwhile, so that an abort from elsewhere still fails them all.
        let queries: Vec<(u64, Done)> = self.lock().pending.iter().map(|w| (w.id, w.done.clone())).collect();
        let mut finished = Vec::new();
        let mut failure = None;
        for (id, done) in queries {
            match done() {
                Ok(true) => finished.push(id),
                Ok(false) => {}
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        {
            let mut st = self.lock();
            st.pending.retain(|w| !finished.contains(&w.id));
            if let Some(oldest) = st.pending.front() {
                if failure.is_none() && now.saturating_duration_since(oldest.since) >= self.deadline {
                    tracing::error!(
                        target: "cudasem::distributed",
                        rank = self.rank,
                        collective = %oldest.what,
                        timeout_ms = self.timeout.as_millis().min(u64::MAX as u128) as u64,
                        "collective timed out: {} did not finish on the device in time",
                        oldest.what
                    );
                    failure = Some(Error::DistributedTimeout {
                        what: format!(
                            "{} to finish on the device (rank {}); the watchdog aborted the process group",
                            oldest.what, self.rank
                        ),
                        timeout_ms: self.timeout.as_millis().min(u64::MAX as u128) as u64,
                    });
                }
            }
        }
        if let Some(e) = failure {
            self.abort(e);
        }
    }

    /// Blocks until `done` (polling the group meanwhile, backing off up to the watchdog's
    /// interval) or until the group aborted; the caller reads its own outcome after.
    pub fn block_until(&self, done: impl Fn() -> Result<bool>) -> Result<()> {
        let mut pause = Duration::from_micros(20);
        loop {
            if self.settled().is_some() || done()? {
                return Ok(());
            }
            self.poll(Instant::now());
            if self.settled().is_some() {
                return Ok(());
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(self.interval);
        }
    }

    /// Stops the watchdog thread (joined) and hands the communicator back, once no call uses it
    /// and no abort of it is running, for the group to destroy.
    pub fn shutdown(&self) -> Option<Arc<dyn Comm>> {
        let (comm, handle) = {
            let mut st = self.lock();
            st.stopped = true;
            self.changed.notify_all();
            while st.running > 0 || st.aborting {
                st = self.changed.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            (st.comm.take(), st.handle.take())
        };
        if let Some(h) = handle.filter(|h| h.thread().id() != std::thread::current().id()) {
            let _ = h.join();
        }
        comm
    }

    /// The watchdog thread: polls every interval while work is outstanding, sleeps otherwise.
    fn watch(&self) {
        let mut st = self.lock();
        while !st.stopped {
            if st.pending.is_empty() || self.cause.get().is_some() {
                st = self.changed.wait(st).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            st = self.changed.wait_timeout(st, self.interval).unwrap_or_else(|e| e.into_inner()).0;
            if st.stopped {
                break;
            }
            drop(st);
            self.poll(Instant::now());
            st = self.lock();
        }
    }
}

/// Sets `outcome` to `cause` unless the collective already failed by itself.
fn fail(outcome: &Outcome, cause: &Error) {
    outcome.fail(cause);
}

/// What a failed collective does besides keeping its error: poison what it was to write and
/// leave the error on its device (see [`Outcome`]).
pub(crate) type OnFail = Box<dyn Fn(&Error) + Send + Sync>;

/// A collective's outcome: its error once it failed — by itself (the simulated backend's job)
/// or by the group's abort (a timeout, a communicator error) — set once. The first failure also
/// runs the collective's `on_fail` (poisoning the tensors it was to write and keeping the error
/// for its device's synchronization points), before anything the failure releases (NCCL's
/// kernels exit only after the abort) can read them.
pub(crate) struct Outcome {
    slot: Mutex<Option<Error>>,
    on_fail: OnFail,
}

impl Outcome {
    /// An outcome not yet failed, which runs `on_fail` when it fails.
    pub fn new(on_fail: OnFail) -> Arc<Outcome> {
        Arc::new(Outcome { slot: Mutex::new(None), on_fail })
    }

    /// The error, once the collective failed.
    pub fn error(&self) -> Option<Error> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Fails the collective with `cause`, unless it already failed (the first cause stays).
    pub fn fail(&self, cause: &Error) {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(cause.clone());
            (self.on_fail)(cause);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::comm::Collective;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    /// A communicator whose asynchronous error the test sets, counting its aborts.
    #[derive(Default)]
    struct FakeComm {
        failed: AtomicBool,
        aborts: AtomicUsize,
        /// Set while a call is inside `run`, to check the abort waits for it.
        inside: AtomicBool,
        aborted_inside: AtomicBool,
        /// How long an abort takes (NCCL's waits for the work queued before it).
        abort_takes: Mutex<Duration>,
    }

    impl Comm for Arc<FakeComm> {
        fn run(&self, _: &Collective, _: u64) -> Result<()> {
            Ok(())
        }
        fn async_error(&self) -> Result<()> {
            if self.failed.load(Ordering::SeqCst) {
                return Err(Error::Nccl {
                    op: "ncclCommGetAsyncError",
                    code: 6,
                    name: "ncclRemoteError".into(),
                    message: "peer gone".into(),
                });
            }
            Ok(())
        }
        fn abort(&self) {
            self.aborted_inside.fetch_or(self.inside.load(Ordering::SeqCst), Ordering::SeqCst);
            std::thread::sleep(*self.abort_takes.lock().unwrap());
            self.aborts.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn watch(fake: &Arc<FakeComm>) -> Arc<Watch> {
        let d = Duration::from_millis(100);
        Watch::new(0, d, d, || false, Some(Box::new(fake.clone())))
    }

    /// A collective whose completion the test sets.
    fn work(what: &str, since: Instant) -> (Pending, Arc<AtomicBool>, Arc<Outcome>) {
        let (done, outcome) = (Arc::new(AtomicBool::new(false)), Outcome::new(Box::new(|_| {})));
        let flag = done.clone();
        let pending = Pending {
            what: what.into(),
            since,
            done: Arc::new(move || Ok(flag.load(Ordering::SeqCst))),
            outcome: outcome.clone(),
        };
        (pending, done, outcome)
    }

    #[test]
    fn finished_work_is_forgotten_and_late_work_aborts_the_group_once() {
        let fake = Arc::new(FakeComm::default());
        let w = watch(&fake);
        let t0 = Instant::now();
        let (a, a_done, a_out) = work("all_reduce (collective #1)", t0);
        let (b, _, b_out) = work("broadcast (collective #2)", t0 + Duration::from_millis(50));
        w.track(a);
        w.track(b);
        a_done.store(true, Ordering::SeqCst);
        w.poll(t0 + Duration::from_millis(120)); // a is done; b is 70 ms old
        assert!(w.aborted().is_none() && a_out.error().is_none());
        w.poll(t0 + Duration::from_millis(150)); // b is 100 ms old: the deadline
        match w.aborted() {
            Some(Error::DistributedTimeout { what, timeout_ms: 100 }) => assert!(what.contains("broadcast"), "{what}"),
            other => panic!("expected the watchdog's timeout, got {other:?}"),
        }
        assert_eq!(b_out.error().as_ref(), w.aborted(), "the outstanding work carries the cause");
        assert!(a_out.error().is_none(), "finished work keeps its success");
        w.poll(t0 + Duration::from_secs(9));
        w.abort(Error::Internal { op: "again", reason: "a second cause".into() });
        assert_eq!(fake.aborts.load(Ordering::SeqCst), 1, "the communicator is aborted once");
        assert!(matches!(w.aborted(), Some(Error::DistributedTimeout { .. })), "the first cause stays");
        // Later calls are refused at once, naming the call and the cause.
        let r = w.with_comm("all_reduce", |_| Ok(()));
        assert!(
            matches!(&r, Err(Error::ProcessGroupAborted { op: "all_reduce", rank: 0, cause }) if matches!(**cause, Error::DistributedTimeout { .. })),
            "{r:?}"
        );
        let (late, _, late_out) = work("late", Instant::now());
        w.track(late);
        assert!(late_out.error().is_some(), "work tracked after the abort fails at once");
        w.shutdown();
    }

    #[test]
    fn an_asynchronous_error_aborts_with_that_error() {
        let fake = Arc::new(FakeComm::default());
        let w = watch(&fake);
        let t0 = Instant::now();
        let (a, _, a_out) = work("all_gather_into_tensor (collective #1)", t0);
        w.track(a);
        w.poll(t0);
        assert!(w.aborted().is_none());
        fake.failed.store(true, Ordering::SeqCst);
        w.poll(t0 + Duration::from_millis(1));
        assert!(matches!(w.aborted(), Some(Error::Nccl { code: 6, .. })), "{:?}", w.aborted());
        assert!(matches!(&a_out.error(), Some(Error::Nccl { code: 6, .. })));
        assert_eq!(fake.aborts.load(Ordering::SeqCst), 1);
        assert!(w.shutdown().is_some(), "the communicator comes back for destruction");
    }

    /// NCCL's path: the abort runs each outstanding work's `on_fail` (poisoning its tensors,
    /// keeping the error for its device) once, before it aborts the communicator (which lets the
    /// kernels waiting for a dead peer exit, and so host reads after them return); a work that
    /// already failed by itself keeps its own error and is not failed again.
    #[test]
    fn an_abort_runs_each_outstanding_works_failure_once_before_aborting_the_communicator() {
        let fake = Arc::new(FakeComm::default());
        let w = watch(&fake);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let outcome = |name: &'static str| {
            let (seen, fake) = (seen.clone(), fake.clone());
            Outcome::new(Box::new(move |e: &Error| {
                let aborted = fake.aborts.load(Ordering::SeqCst);
                seen.lock().unwrap().push((name, e.clone(), aborted));
            }))
        };
        let t0 = Instant::now();
        let (a, b) = (outcome("a"), outcome("b"));
        let own = Error::Internal { op: "b", reason: "failed by itself".into() };
        b.fail(&own);
        for (what, out) in [("a", &a), ("b", &b)] {
            let done: Done = Arc::new(|| Ok(false));
            w.track(Pending { what: what.into(), since: t0, done, outcome: out.clone() });
        }
        fake.failed.store(true, Ordering::SeqCst);
        w.poll(t0);
        w.poll(t0 + Duration::from_secs(1));
        let seen = seen.lock().unwrap().clone();
        let cause = w.aborted().cloned().expect("aborted");
        assert_eq!(seen, [("b", own.clone(), 0), ("a", cause.clone(), 0)], "each once, before the abort");
        assert_eq!((a.error(), b.error()), (Some(cause), Some(own)));
        assert_eq!(fake.aborts.load(Ordering::SeqCst), 1);
        w.shutdown();
    }

    #[test]
    fn an_abort_during_a_call_waits_for_the_call() {
        let fake = Arc::new(FakeComm::default());
        let w = watch(&fake);
        let r = w.with_comm("all_reduce", |_| {
            fake.inside.store(true, Ordering::SeqCst);
            w.abort(Error::Internal { op: "test", reason: "abort mid-call".into() });
            assert_eq!(fake.aborts.load(Ordering::SeqCst), 0, "not while the call runs");
            fake.inside.store(false, Ordering::SeqCst);
            Ok(7)
        });
        assert_eq!(r, Ok(7));
        assert_eq!(fake.aborts.load(Ordering::SeqCst), 1, "the leaving call aborted it");
        assert!(!fake.aborted_inside.load(Ordering::SeqCst));
    }

    #[test]
    fn a_blocked_host_wait_returns_when_the_thread_aborts() {
        // No one polls but the waiter and the watchdog thread; the work never finishes.
        let fake = Arc::new(FakeComm::default());
        let d = Duration::from_millis(20);
        let w = Watch::new(1, d, d, || false, Some(Box::new(fake.clone())));
        let (a, _, a_out) = work("barrier (collective #1)", Instant::now());
        w.track(a);
        w.block_until(|| Ok(false)).unwrap();
        assert!(matches!(&a_out.error(), Some(Error::DistributedTimeout { .. })));
        // The thread alone aborts a group nobody waits on.
        let w = Watch::new(1, d, d, || false, None);
        let (b, _, b_out) = work("send", Instant::now());
        w.track(b);
        let start = Instant::now();
        while b_out.error().is_none() {
            assert!(start.elapsed() < Duration::from_secs(60), "the watchdog thread never aborted");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(w.aborted().is_some());
        assert!(w.shutdown().is_none(), "no communicator on the simulated backend");
    }

    /// The fault seen on an H100 at process exit: the watchdog thread's abort outlived the
    /// group. The waiter returns as soon as its work failed, but the group's end (shutdown) waits
    /// for the abort to return and joins the thread.
    #[test]
    fn the_groups_end_waits_for_an_abort_in_progress() {
        let fake = Arc::new(FakeComm::default());
        *fake.abort_takes.lock().unwrap() = Duration::from_millis(300);
        let d = Duration::from_millis(20);
        let w = Watch::new(0, d, d, || false, Some(Box::new(fake.clone())));
        let (a, _, a_out) = work("all_reduce (collective #2)", Instant::now());
        w.track(a);
        let start = Instant::now();
        while a_out.error().is_none() {
            assert!(start.elapsed() < Duration::from_secs(60), "the watchdog thread never aborted");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(fake.aborts.load(Ordering::SeqCst), 0, "the abort is still running");
        assert!(w.shutdown().is_some());
        assert_eq!(fake.aborts.load(Ordering::SeqCst), 1, "shutdown returned only after the abort did");
        assert!(w.lock().handle.is_none(), "the watchdog thread was joined");
    }
}
