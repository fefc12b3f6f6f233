//! Adversarial schedules (`CUDASEM_SIM_SCHEDULE=adversarial:SEED`): the simulated streams run
//! their work in hostile but legal orders. Before each job a stream's worker may hold back for a
//! while, by a pseudo-random choice drawn from the seed, the stream and the job's place in the
//! stream: one stream's work is delayed behind another's, independent streams finish in reversed
//! order, and a `non_blocking` copy completes as late as its stream order allows. Nothing the
//! rules order is reordered (a stream still runs in order, and waits still wait), so correct
//! programs give the same numbers under every seed; a missing `wait_stream` or `record_stream`
//! gives wrong ones for some seed, on any machine.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The seed plus one (0: the default schedule, no delays).
static SEED: AtomicU64 = AtomicU64::new(0);
/// How many times the schedule was set: each stream counts its jobs from the latest setting, so
/// setting a seed again replays the same holds.
static EPOCH: AtomicU64 = AtomicU64::new(0);

/// Sets the schedule of every simulated stream: `Some(seed)` adversarial, `None` the default.
pub fn set(seed: Option<u64>) {
    SEED.store(seed.map_or(0, |s| s.wrapping_add(1).max(1)), Ordering::Relaxed);
    EPOCH.fetch_add(1, Ordering::Relaxed);
}

/// A stream worker's count of jobs under the current setting.
#[derive(Default)]
pub struct JobCount {
    epoch: u64,
    jobs: u64,
}

impl JobCount {
    /// The index of the next job under the current setting.
    pub fn next(&mut self) -> u64 {
        let epoch = EPOCH.load(Ordering::Relaxed);
        if epoch != self.epoch {
            (self.epoch, self.jobs) = (epoch, 0);
        }
        self.jobs += 1;
        self.jobs
    }
}

/// The adversarial seed in force, if any.
pub fn get() -> Option<u64> {
    match SEED.load(Ordering::Relaxed) {
        0 => None,
        s => Some(s - 1),
    }
}

/// SplitMix64's finalizer: a well-mixed 64-bit value from `x`.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// How long stream `stream`'s worker holds back before its `job`-th job (zero by default). Under
/// a seed, about a third of the streams are slow (every job held back alike), the others hold
/// back now and then.
pub fn hold_back(stream: u64, job: u64) -> Duration {
    let seed = SEED.load(Ordering::Relaxed);
    if seed == 0 {
        return Duration::ZERO;
    }
    let per_stream = mix(seed ^ mix(stream));
    if per_stream.is_multiple_of(3) {
        // A slow stream: every job held back alike, so the seed reproduces what it shows.
        return Duration::from_micros(500 + (per_stream >> 16) % 1500);
    }
    let h = mix(per_stream ^ job);
    if h.is_multiple_of(4) {
        Duration::from_micros(200 + (h >> 16) % 1800)
    } else {
        Duration::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_schedule_and_seeds_differ() {
        let was = get();
        set(Some(7));
        let a: Vec<Duration> = (0..64).map(|j| hold_back(3, j)).collect();
        let b: Vec<Duration> = (0..64).map(|j| hold_back(3, j)).collect();
        set(Some(8));
        let c: Vec<Duration> = (0..64).map(|j| hold_back(3, j)).collect();
        set(was);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(a.iter().any(|d| !d.is_zero()), "a seed holds some work back");
    }
}
