//! Simulated streams and events: each stream is a worker thread running its queue in order;
//! an event completes when its stream's worker reaches it, and keeps that instant for timing.

use super::memory::lock;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

/// Work queued on a simulated stream.
pub(crate) type Job = Box<dyn FnOnce() + Send + 'static>;

#[derive(Debug, Default)]
struct Progress {
    submitted: u64,
    completed: u64,
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
}

impl SimStream {
    /// Starts the stream's worker thread.
    pub fn spawn(device: usize, id: u64) -> std::io::Result<SimStream> {
        let (tx, rx) = mpsc::channel::<Job>();
        let shared = Arc::new(Shared::default());
        let worker = shared.clone();
        std::thread::Builder::new().name(format!("cudasem-sim-d{device}-s{id}")).spawn(move || {
            while let Ok(job) = rx.recv() {
                job();
                lock(&worker.progress).completed += 1;
                worker.done.notify_all();
            }
        })?;
        Ok(SimStream { device, queue: Mutex::new(tx), shared })
    }

    /// Queues a job; jobs run one at a time in submission order.
    pub fn submit(&self, job: Job) {
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
}

/// One recording of an event: completes when its stream reaches it. A wait captures the recording
/// that is current when the wait is queued, so later recordings never release it early (CUDA's rule).
#[derive(Debug, Default)]
pub(crate) struct Recording {
    at: Mutex<Option<Instant>>,
    reached: Condvar,
}

impl Recording {
    fn complete(&self) {
        *lock(&self.at) = Some(Instant::now());
        self.reached.notify_all();
    }

    /// Waits until the stream has reached this recording.
    pub fn wait(&self) {
        let mut at = lock(&self.at);
        while at.is_none() {
            at = self.reached.wait(at).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// When the stream reached it, if it has.
    pub fn done_at(&self) -> Option<Instant> {
        *lock(&self.at)
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
        let r = Arc::new(Recording::default());
        *lock(&self.current) = Some(r.clone());
        stream.submit(Box::new(move || r.complete()));
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

    /// When the latest recording completed, if it has.
    pub fn completed_at(&self) -> Option<Instant> {
        self.current().and_then(|r| r.done_at())
    }

    pub fn was_recorded(&self) -> bool {
        self.current().is_some()
    }
}
