//! NCCL teardowns (`ncclCommAbort`, `ncclCommDestroy`) still running on another thread when the
//! process exits. NCCL's own exit teardown unloads its kernels' library; a teardown running
//! under it faults (an abort of a communicator whose work waits behind a long kernel takes that
//! long). The exit hook, registered by the first teardown (after NCCL loaded and initialized, so
//! that it runs before NCCL's own), waits for them, at most [`EXIT_WAIT`].

use std::sync::{Condvar, Mutex, Once};
use std::time::{Duration, Instant};

/// How long exit waits for teardowns in flight before it goes on regardless.
const EXIT_WAIT: Duration = Duration::from_secs(30);

static IN_FLIGHT: Mutex<usize> = Mutex::new(0);
static FINISHED: Condvar = Condvar::new();

/// A teardown in flight, counted until dropped.
pub(super) struct Teardown(());

/// Counts a teardown as in flight until the returned guard is dropped.
pub(super) fn begin() -> Teardown {
    register();
    *IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    Teardown(())
}

impl Drop for Teardown {
    fn drop(&mut self) {
        let mut n = IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner());
        *n -= 1;
        FINISHED.notify_all();
    }
}

/// Registers the exit hook, once.
fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        crate::driver::exit::at_exit(wait_at_exit);
    });
}

/// Waits until no teardown is in flight, at most `limit`; whether none is.
fn wait_for_teardowns(limit: Duration) -> bool {
    let end = Instant::now() + limit;
    let mut n = IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner());
    while *n > 0 {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        n = FINISHED.wait_timeout(n, left).unwrap_or_else(|e| e.into_inner()).0;
    }
    true
}

extern "C" fn wait_at_exit() {
    if !wait_for_teardowns(EXIT_WAIT) {
        eprintln!(
            "cudasem: an NCCL communicator's abort or destroy was still running after {} s at exit; \
             exiting without waiting longer",
            EXIT_WAIT.as_secs()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_waits_for_a_teardown_in_flight_and_gives_up_after_its_limit() {
        let guard = begin();
        assert!(!wait_for_teardowns(Duration::from_millis(20)), "one in flight: the wait gives up");
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(guard);
        });
        let start = Instant::now();
        assert!(wait_for_teardowns(Duration::from_secs(30)));
        assert!(start.elapsed() >= Duration::from_millis(50), "it waited for the teardown");
        t.join().unwrap();
        assert!(wait_for_teardowns(Duration::ZERO), "none in flight");
    }
}
