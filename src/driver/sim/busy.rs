//! How busy a simulated device has been: NVML's utilization readings, from the device's own
//! streams. A [`BusyClock`] measures, in wall-clock time, when at least one of the device's
//! stream workers was running work of its kind; [`DeviceClocks`] holds the two NVML reports
//! (`utilization`: kernels, `memory_usage`: work that reads or writes device memory).
//!
//! Cheap by construction: a worker tells the clock only when it starts or stops a run of work
//! of one kind (not per job), and the clock keeps busy time in a ring of fixed buckets, so its
//! memory is constant whatever the rate of work. A reading covers the last
//! [`SAMPLE_PERIOD`] (NVML's period is between 1/6 s and 1 s, depending on the product),
//! counted in whole buckets: from the start of the bucket [`SAMPLE_PERIOD`] before the current
//! one up to now.

use super::memory::lock;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The period a reading covers.
pub(crate) const SAMPLE_PERIOD: Duration = Duration::from_millis(200);
/// The width of one bucket of busy time.
const BUCKET: Duration = Duration::from_millis(10);
/// Buckets in the ring: the period's and a margin.
const RING: usize = 32;
/// Buckets a reading spans (the current one included).
const PERIOD_BUCKETS: u64 = (SAMPLE_PERIOD.as_millis() / BUCKET.as_millis()) as u64;

#[derive(Debug)]
struct State {
    /// Workers now running work of this clock's kind.
    active: u32,
    /// When `active` last went from 0 to 1.
    since: Instant,
    /// Busy nanoseconds per bucket, and which bucket (its number since `origin`) each slot holds.
    busy: [u64; RING],
    tag: [u64; RING],
}

/// Busy time of one kind of work on one device (see the module's notes).
#[derive(Debug)]
pub(crate) struct BusyClock {
    origin: Instant,
    state: Mutex<State>,
}

impl BusyClock {
    pub(crate) fn new() -> BusyClock {
        let origin = Instant::now();
        BusyClock {
            origin,
            state: Mutex::new(State { active: 0, since: origin, busy: [0; RING], tag: [u64::MAX; RING] }),
        }
    }

    /// A worker starts running work of this kind.
    pub(crate) fn enter(&self) {
        let now = Instant::now();
        let mut s = lock(&self.state);
        if s.active == 0 {
            s.since = now;
        }
        s.active += 1;
    }

    /// A worker stops running work of this kind (after a matching [`BusyClock::enter`]).
    pub(crate) fn leave(&self) {
        let now = Instant::now();
        let mut s = lock(&self.state);
        s.active = s.active.saturating_sub(1);
        if s.active == 0 {
            let since = s.since;
            self.add(&mut s, since, now);
        }
    }

    fn bucket(&self, t: Instant) -> u64 {
        (t.saturating_duration_since(self.origin).as_nanos() / BUCKET.as_nanos()) as u64
    }

    fn bucket_start(&self, k: u64) -> Instant {
        self.origin + BUCKET * k as u32
    }

    /// Adds the busy interval `[from, to)` to the buckets it covers (only the ring's span of it).
    fn add(&self, s: &mut State, from: Instant, to: Instant) {
        let from = from.max(to.checked_sub(BUCKET * RING as u32).unwrap_or(from));
        let (first, last) = (self.bucket(from), self.bucket(to));
        for k in first..=last {
            let lo = from.max(self.bucket_start(k));
            let hi = to.min(self.bucket_start(k + 1));
            let ns = hi.saturating_duration_since(lo).as_nanos() as u64;
            if ns == 0 {
                continue;
            }
            let slot = (k % RING as u64) as usize;
            if s.tag[slot] != k {
                s.tag[slot] = k;
                s.busy[slot] = 0;
            }
            s.busy[slot] += ns;
        }
    }

    /// The percent (0..=100, rounded) of the last sample period during which work of this kind
    /// ran (0 in the first instant after the clock started, when no time has passed).
    pub(crate) fn percent(&self) -> u32 {
        let now = Instant::now();
        let s = lock(&self.state);
        let current = self.bucket(now);
        let first = current.saturating_sub(PERIOD_BUCKETS - 1);
        let start = self.bucket_start(first);
        let window = now.saturating_duration_since(start).as_nanos() as u64;
        if window == 0 {
            return 0;
        }
        let mut busy: u64 = (first..=current)
            .map(|k| {
                let slot = (k % RING as u64) as usize;
                if s.tag[slot] == k {
                    s.busy[slot]
                } else {
                    0
                }
            })
            .sum();
        if s.active > 0 {
            busy += now.saturating_duration_since(s.since.max(start)).as_nanos() as u64;
        }
        let pct = (busy.min(window) as f64 * 100.0 / window as f64).round();
        pct as u32
    }
}

/// Which clocks a job of this label keeps running: `(kernels, memory traffic)`. Copies move
/// memory without a kernel (copy engines), an injected delay spins without touching memory,
/// and everything else (kernels, fills, graphs, collectives) does both.
pub(crate) fn kinds(label: &str) -> (bool, bool) {
    if label.starts_with("memcpy") {
        (false, true)
    } else if label == "delay" {
        (true, false)
    } else {
        (true, true)
    }
}

/// A device's two clocks, shared by its streams' workers.
#[derive(Debug)]
pub(crate) struct DeviceClocks {
    /// Kernels running (NVML's `utilization.gpu`).
    pub kernels: BusyClock,
    /// Device memory read or written (NVML's `utilization.memory`).
    pub memory: BusyClock,
}

impl DeviceClocks {
    pub(crate) fn new() -> DeviceClocks {
        DeviceClocks { kernels: BusyClock::new(), memory: BusyClock::new() }
    }
}

/// One worker's view of its device's clocks: which kinds it is running now, so that it tells the
/// clocks only when that changes.
#[derive(Debug, Default)]
pub(crate) struct WorkerBusy {
    kernels: bool,
    memory: bool,
}

impl WorkerBusy {
    /// The worker runs (or keeps running) a job of `label`'s kinds.
    pub(crate) fn run(&mut self, clocks: &DeviceClocks, label: &str) {
        let (k, m) = kinds(label);
        Self::switch(&mut self.kernels, k, &clocks.kernels);
        Self::switch(&mut self.memory, m, &clocks.memory);
    }

    /// The worker stops running work (its queue is empty, or it waits for another stream).
    pub(crate) fn idle(&mut self, clocks: &DeviceClocks) {
        Self::switch(&mut self.kernels, false, &clocks.kernels);
        Self::switch(&mut self.memory, false, &clocks.memory);
    }

    fn switch(on: &mut bool, want: bool, clock: &BusyClock) {
        match (*on, want) {
            (false, true) => clock.enter(),
            (true, false) => clock.leave(),
            _ => {}
        }
        *on = want;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_reads_full_while_busy_and_empty_after_a_period_idle() {
        let c = BusyClock::new();
        std::thread::sleep(BUCKET * 2);
        assert_eq!(c.percent(), 0);
        c.enter();
        c.enter(); // a second worker: the union, not the sum
        std::thread::sleep(SAMPLE_PERIOD + BUCKET);
        assert_eq!(c.percent(), 100);
        c.leave();
        assert_eq!(c.percent(), 100, "one worker is still busy");
        c.leave();
        let p = c.percent();
        assert!(p > 0 && p <= 100, "{p}");
        std::thread::sleep(SAMPLE_PERIOD + BUCKET);
        assert_eq!(c.percent(), 0);
    }

    #[test]
    fn busy_time_lands_in_the_buckets_it_covered() {
        let c = BusyClock::new();
        let t0 = c.origin;
        let mut s = lock(&c.state);
        c.add(&mut s, t0 + BUCKET / 2, t0 + BUCKET * 3);
        assert_eq!(s.busy[0], (BUCKET / 2).as_nanos() as u64);
        assert_eq!(s.busy[1], BUCKET.as_nanos() as u64);
        assert_eq!(s.busy[2], BUCKET.as_nanos() as u64);
        assert_eq!(s.tag[3], u64::MAX, "the interval ends at bucket 3's start");
        // An interval longer than the ring keeps only the ring's span.
        c.add(&mut s, t0, t0 + BUCKET * (3 * RING as u32));
        let total: u64 = s.busy.iter().sum();
        assert_eq!(total, (BUCKET * RING as u32).as_nanos() as u64);
    }

    #[test]
    fn job_labels_map_to_clocks() {
        assert_eq!(kinds("memcpy HtoD pinned"), (false, true));
        assert_eq!(kinds("delay"), (true, false));
        assert_eq!(kinds("kernel"), (true, true));
        assert_eq!(kinds("memset"), (true, true));
    }
}
