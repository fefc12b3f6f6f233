//! Helpers for the distributed tests: the machine (a simulated one of four GPUs unless the run
//! is on CUDA), groups of this process's devices driven one thread per rank, and random data.
#![allow(dead_code)]

use cudasem::distributed::{InitOptions, ProcessGroup};
use cudasem::{Config, DriverKind, PeerSpec, Result};
use std::sync::OnceLock;
use std::time::Duration;

/// A simulated machine of four GPUs, unless the run is on the CUDA driver (then the
/// environment's machine).
pub fn machine() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        if std::env::var("CUDASEM_DRIVER").as_deref() != Ok("cuda") {
            let config = Config::default().with_driver(DriverKind::Sim).with_sim(4, 1 << 30, PeerSpec::All);
            cudasem::init(config).expect("init before any other cudasem call");
        }
    });
}

/// Runs the tests of a file one at a time. Tests of one file share each device's default
/// stream (every thread's current stream until it sets another), and two groups whose
/// collectives wait on one stream in opposite orders would wait for each other (as on a GPU);
/// an error a failed collective leaves on its device (sticky until `cuda::get_last_error`) also
/// belongs to one test: one an earlier test left (by failing before it took it) is cleared. Sets
/// the machine up first.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    machine();
    let guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for d in 0..cudasem::cuda::device_count() {
        let _ = cudasem::cuda::get_last_error(d);
    }
    guard
}

/// Groups over devices `0..w` for each world size `w` of [`world_sizes`] (none, after a
/// skip, where the machine has no device), with a one-minute timeout.
pub fn groups() -> Vec<Vec<ProcessGroup>> {
    if !cudasem::testing::has_devices(1) {
        return Vec::new();
    }
    world_sizes()
        .into_iter()
        .map(|w| ProcessGroup::from_devices_with(&(0..w).collect::<Vec<_>>(), &quick(60_000)).expect("from_devices"))
        .collect()
}

/// Options with a short timeout, for the failure tests.
pub fn quick(timeout_ms: u64) -> InitOptions {
    InitOptions { timeout: Duration::from_millis(timeout_ms), ..InitOptions::default() }
}

/// World sizes the tests cover on this machine: 1, 2 and 4 where there are devices for them.
pub fn world_sizes() -> Vec<usize> {
    let n = cudasem::cuda::device_count();
    [1, 2, 4].into_iter().filter(|&w| w <= n).collect()
}

/// Runs `body` for every group of `groups`, each on its own thread (a rank), and returns the
/// ranks' results in rank order.
pub fn on_ranks<R: Send>(groups: &[ProcessGroup], body: impl Fn(&ProcessGroup) -> Result<R> + Sync) -> Vec<Result<R>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = groups.iter().map(|g| s.spawn(|| body(g))).collect();
        handles.into_iter().map(|h| h.join().expect("a rank panicked")).collect()
    })
}

/// As [`on_ranks`], every rank's result unwrapped.
#[track_caller]
pub fn on_ranks_ok<R: Send>(groups: &[ProcessGroup], body: impl Fn(&ProcessGroup) -> Result<R> + Sync) -> Vec<R> {
    on_ranks(groups, body).into_iter().enumerate().map(|(r, x)| x.unwrap_or_else(|e| panic!("rank {r}: {e}"))).collect()
}

/// A small seeded generator (splitmix64): the same data on every run.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A float in `[-2, 2)`, away from 0.
    pub fn float(&mut self) -> f64 {
        let x = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0;
        if x.abs() < 0.1 {
            0.5
        } else {
            x
        }
    }
}
