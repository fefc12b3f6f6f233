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
        Ok(SimStream { queue: Mutex::new(tx), shared })
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

#[derive(Debug, Default)]
struct Marks {
    /// How many times the event was recorded.
    recorded: u64,
    /// The latest recording that its stream has reached.
    completed: u64,
    /// When the stream reached that recording.
    at: Option<Instant>,
}

/// An event: a generation counter per recording, completed in stream order.
#[derive(Debug)]
pub(crate) struct SimEvent {
    pub timing: bool,
    marks: Mutex<Marks>,
    reached: Condvar,
}

impl SimEvent {
    pub fn new(timing: bool) -> Self {
        SimEvent { timing, marks: Mutex::new(Marks::default()), reached: Condvar::new() }
    }

    /// Records the event on `stream`: it completes when the stream reaches this point.
    pub fn record(self: &Arc<Self>, stream: &SimStream) {
        let generation = {
            let mut m = lock(&self.marks);
            m.recorded += 1;
            m.recorded
        };
        let ev = self.clone();
        stream.submit(Box::new(move || {
            let now = Instant::now();
            let mut m = lock(&ev.marks);
            if generation > m.completed {
                m.completed = generation;
                m.at = Some(now);
            }
            drop(m);
            ev.reached.notify_all();
        }));
    }

    /// The recording a waiter must see complete (0: never recorded, nothing to wait for).
    pub fn target(&self) -> u64 {
        lock(&self.marks).recorded
    }

    pub fn query(&self) -> bool {
        let m = lock(&self.marks);
        m.completed >= m.recorded
    }

    /// Waits until recording `target` (or a later one) has completed.
    pub fn wait_for(&self, target: u64) {
        let mut m = lock(&self.marks);
        while m.completed < target {
            m = self.reached.wait(m).unwrap_or_else(|e| e.into_inner());
        }
    }

    pub fn synchronize(&self) {
        let target = self.target();
        self.wait_for(target);
    }

    /// When the latest recording completed, if it has.
    pub fn completed_at(&self) -> Option<Instant> {
        let m = lock(&self.marks);
        if m.recorded > 0 && m.completed >= m.recorded {
            m.at
        } else {
            None
        }
    }

    pub fn was_recorded(&self) -> bool {
        lock(&self.marks).recorded > 0
    }
}
