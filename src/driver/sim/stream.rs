//! Simulated streams and events: each stream is a worker thread running its queue in order and
//! keeping the stream's simulated time ([`super::time`]); an event completes when its stream's
//! worker reaches it, and keeps the simulated time of that moment for timing. A capturing stream
//! ([`super::capture`]) keeps its jobs in the capture instead of running them.

use super::busy::{DeviceClocks, WorkerBusy};
use super::memory::lock;
use super::time::SimTime;
use crate::driver::StreamId;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};

/// Work a job runs; shared, so that a captured graph can run it again on every replay.
pub(crate) type Task = Arc<dyn Fn() + Send + Sync + 'static>;

/// What a queued job does when the worker reaches it.
pub(crate) enum Work {
    /// Runs on the worker (a copy, a fill, a kernel, a sleep).
    Run(Task),
    /// Waits until the stream of `Recording` reached it; the stream's time becomes at least that
    /// recording's.
    Wait(Arc<Recording>),
    /// Completes an event's recording at the stream's time.
    Record(Arc<Recording>),
}

/// Work queued on a simulated stream, with its modelled duration.
pub(crate) struct Job {
    work: Work,
    cost: SimTime,
    /// What the job is, for a captured graph's picture (`kernel add`, `memcpy`, …).
    label: &'static str,
}

impl Job {
    /// Work named `label` that takes `cost` of simulated time.
    pub fn run(label: &'static str, cost: SimTime, f: impl Fn() + Send + Sync + 'static) -> Job {
        Job { work: Work::Run(Arc::new(f)), cost, label }
    }

    /// A wait for `recording` (free in simulated time beyond the wait itself).
    pub fn wait(recording: Arc<Recording>) -> Job {
        Job { work: Work::Wait(recording), cost: 0, label: "wait" }
    }

    /// The completion of `recording`.
    pub fn record(recording: Arc<Recording>) -> Job {
        Job { work: Work::Record(recording), cost: 0, label: "record" }
    }
}

#[derive(Debug, Default)]
struct Progress {
    submitted: u64,
    completed: u64,
    /// The simulated time at which the last completed job ended.
    now: SimTime,
}

#[derive(Debug, Default)]
struct Shared {
    progress: Mutex<Progress>,
    done: Condvar,
}

/// A stream: a FIFO of jobs and the worker thread that runs them.
#[derive(Debug)]
pub(crate) struct SimStream {
    /// The device the stream belongs to.
    pub device: usize,
    queue: Mutex<mpsc::Sender<Job>>,
    shared: Arc<Shared>,
    /// The capture this stream's work goes to instead of its queue, while one is underway.
    capture: Mutex<Option<Arc<SimCapture>>>,
}

impl SimStream {
    /// Starts the stream's worker thread.
    /// The worker tells `clocks` when it starts and stops running work (NVML's utilization).
    pub fn spawn(device: usize, id: u64, clocks: Arc<DeviceClocks>) -> std::io::Result<SimStream> {
        let (tx, rx) = mpsc::channel::<Job>();
        let shared = Arc::new(Shared::default());
        let worker = shared.clone();
        std::thread::Builder::new().name(format!("cudasem-sim-d{device}-s{id}")).spawn(move || {
            let mut now: SimTime = 0;
            let mut count = super::schedule::JobCount::default();
            let mut busy = WorkerBusy::default();
            loop {
                let job = match rx.try_recv() {
                    Ok(job) => job,
                    Err(mpsc::TryRecvError::Disconnected) => break,
                    Err(mpsc::TryRecvError::Empty) => {
                        busy.idle(&clocks);
                        match rx.recv() {
                            Ok(job) => job,
                            Err(_) => break,
                        }
                    }
                };
                match job.work {
                    Work::Run(f) => {
                        busy.run(&clocks, job.label);
                        // An adversarial schedule holds the job back (not a wait or a record:
                        // those only order work).
                        let hold = super::schedule::hold_back(id, count.next());
                        if !hold.is_zero() {
                            std::thread::sleep(hold);
                        }
                        f()
                    }
                    Work::Wait(r) => {
                        busy.idle(&clocks);
                        now = now.max(r.wait())
                    }
                    Work::Record(r) => r.complete(now),
                }
                now = now.saturating_add(job.cost);
                let mut p = lock(&worker.progress);
                p.completed += 1;
                p.now = now;
                drop(p);
                worker.done.notify_all();
            }
            // The stream is gone: it no longer keeps its device busy.
            busy.idle(&clocks);
        })?;
        Ok(SimStream { device, queue: Mutex::new(tx), shared, capture: Mutex::new(None) })
    }

    /// Queues a job; jobs run one at a time in submission order. While the stream is capturing,
    /// work is kept in the capture instead (waits and records inside a capture only order the
    /// captured work, which a replay runs in capture order).
    pub fn submit(&self, job: Job) {
        if let Some(c) = lock(&self.capture).as_ref() {
            if let Work::Run(f) = job.work {
                c.push(job.label, job.cost, f);
            }
            return;
        }
        let q = lock(&self.queue);
        lock(&self.shared.progress).submitted += 1;
        // The worker lives as long as the sender: a send cannot fail while `self` exists.
        let _ = q.send(job);
    }

    /// Whether everything submitted so far has run.
    pub fn idle(&self) -> bool {
        let p = lock(&self.shared.progress);
        p.completed == p.submitted
    }

    /// Waits until everything submitted before this call has run.
    pub fn synchronize(&self) {
        let mut p = lock(&self.shared.progress);
        let target = p.submitted;
        while p.completed < target {
            p = self.shared.done.wait(p).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// The capture the stream's work goes to, if one is underway.
    pub fn capture(&self) -> Option<Arc<SimCapture>> {
        lock(&self.capture).clone()
    }

    /// Sends the stream's work to `capture` (`None`: to its queue again).
    pub fn set_capture(&self, capture: Option<Arc<SimCapture>>) {
        *lock(&self.capture) = capture;
    }

    /// The stream's simulated time: when the work it has completed so far ended.
    #[cfg(test)]
    pub fn now(&self) -> SimTime {
        lock(&self.shared.progress).now
    }
}

/// One recording of an event: completes when its stream reaches it. A wait captures the recording
/// that is current when the wait is queued, so later recordings never release it early (CUDA's rule).
#[derive(Debug, Default)]
pub(crate) struct Recording {
    at: Mutex<Option<SimTime>>,
    reached: Condvar,
    /// The capture it was recorded in: it orders captured work and never completes by itself;
    /// once the capture is over it counts as reached.
    captured: Option<Arc<SimCapture>>,
}

impl Recording {
    /// The capture this recording belongs to, while that capture is underway.
    pub fn open_capture(&self) -> Option<&Arc<SimCapture>> {
        self.captured.as_ref().filter(|c| c.is_open())
    }

    fn complete(&self, now: SimTime) {
        *lock(&self.at) = Some(now);
        self.reached.notify_all();
    }

    /// Waits until the stream has reached this recording; the simulated time it did.
    pub fn wait(&self) -> SimTime {
        if self.captured.is_some() {
            return 0;
        }
        let mut at = lock(&self.at);
        loop {
            if let Some(t) = *at {
                return t;
            }
            at = self.reached.wait(at).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// The simulated time at which the stream reached it, if it has.
    pub fn done_at(&self) -> Option<SimTime> {
        match &self.captured {
            Some(c) => (!c.is_open()).then_some(0),
            None => *lock(&self.at),
        }
    }
}

/// An event: its latest recording, if any.
#[derive(Debug)]
pub(crate) struct SimEvent {
    pub timing: bool,
    current: Mutex<Option<Arc<Recording>>>,
}

impl SimEvent {
    pub fn new(timing: bool) -> Self {
        SimEvent { timing, current: Mutex::new(None) }
    }

    /// Records the event on `stream`: it completes when the stream reaches this point.
    pub fn record(&self, stream: &SimStream) {
        if let Some(c) = stream.capture() {
            *lock(&self.current) = Some(Arc::new(Recording { captured: Some(c), ..Recording::default() }));
            return;
        }
        let r = Arc::new(Recording::default());
        *lock(&self.current) = Some(r.clone());
        stream.submit(Job::record(r));
    }

    /// The latest recording (`None`: never recorded, nothing to wait for).
    pub fn current(&self) -> Option<Arc<Recording>> {
        lock(&self.current).clone()
    }

    pub fn query(&self) -> bool {
        self.current().is_none_or(|r| r.done_at().is_some())
    }

    pub fn synchronize(&self) {
        if let Some(r) = self.current() {
            r.wait();
        }
    }

    /// The simulated time at which the latest recording completed, if it has.
    pub fn completed_at(&self) -> Option<SimTime> {
        self.current().and_then(|r| r.done_at())
    }

    pub fn was_recorded(&self) -> bool {
        self.current().is_some()
    }
}

/// One captured piece of work.
pub(crate) struct Node {
    label: &'static str,
    cost: SimTime,
    task: Task,
}

/// A capture underway: the work of its streams, in the order it was queued.
pub(crate) struct SimCapture {
    /// The stream that began it.
    origin: StreamId,
    open: AtomicBool,
    nodes: Mutex<Vec<Node>>,
}

impl std::fmt::Debug for SimCapture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimCapture").field("origin", &self.origin).field("open", &self.is_open()).finish()
    }
}

impl SimCapture {
    /// A capture begun on `origin`.
    pub fn new(origin: StreamId) -> SimCapture {
        SimCapture { origin, open: AtomicBool::new(true), nodes: Mutex::new(Vec::new()) }
    }

    /// The stream that began it.
    pub fn origin(&self) -> StreamId {
        self.origin
    }

    /// Ends the capture: its recordings count as reached from now on.
    pub fn close(&self) {
        self.open.store(false, Ordering::Release);
    }

    /// The captured work, in order (taken out).
    pub fn take_nodes(&self) -> Vec<Node> {
        std::mem::take(&mut *lock(&self.nodes))
    }

    /// Keeps a job's work in the capture.
    pub fn push(&self, label: &'static str, cost: SimTime, task: Task) {
        lock(&self.nodes).push(Node { label, cost, task });
    }

    /// Whether the capture is still underway.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }
}

impl Node {
    /// Its modelled duration.
    pub fn cost(&self) -> SimTime {
        self.cost
    }

    /// What it is.
    pub fn label(&self) -> &'static str {
        self.label
    }

    /// Runs its work.
    pub fn run(&self) {
        (self.task)()
    }
}

/// A captured graph: its nodes, run in order by every launch.
pub(crate) struct SimGraph {
    pub(super) device: usize,
    pub(super) nodes: Arc<Vec<Node>>,
}
