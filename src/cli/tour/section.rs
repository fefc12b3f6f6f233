//! What every tour section shares: how it ends ([`Outcome`], [`Failure`]), the runner that turns a
//! section into its report lines, and the checks sections make of timings.
//!
//! Timing rule: device time is measured by events (on the simulated machine they read its own
//! clock, so they are exact); the host clock only shows that a call returned before its work was
//! done, through [`returns_before_done`], which never depends on how busy the host is.

use cudasem::cuda::{self, Event, EventFlags, Stream};
use cudasem::Error;
use std::time::{Duration, Instant};

/// How a section ended, besides failing.
pub enum Outcome {
    /// Everything shown held.
    Ok,
    /// The section cannot run on this machine, and why.
    Skipped(String),
}

/// A section's failure: what did not hold.
pub type Failure = String;

/// A section of the tour.
pub type Section = fn() -> Result<Outcome, Failure>;

/// Turns a cudasem error into a section failure.
pub fn e(err: Error) -> Failure {
    err.to_string()
}

/// Fails the section unless `cond` holds.
pub fn check(cond: bool, what: impl FnOnce() -> String) -> Result<(), Failure> {
    if cond {
        Ok(())
    } else {
        Err(what())
    }
}

/// Runs one section (a panic is a failure) and prints its report: its name, its rule, what it
/// showed, and `ok <name>`, `skipped <name>: <why>` or `FAILED <name>: <why>`. Returns whether it
/// did not fail.
pub fn run_section(name: &str, rule: &str, section: Section) -> bool {
    println!("== {name}");
    println!("   rule: {rule}");
    let outcome = std::panic::catch_unwind(section).unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic".into());
        Err(format!("panicked: {msg}"))
    });
    // Every section starts from the same state, whatever the previous one left behind.
    let _ = cuda::set_device(0);
    match outcome {
        Ok(Outcome::Ok) => println!("ok {name}\n"),
        Ok(Outcome::Skipped(why)) => println!("skipped {name}: {why}\n"),
        Err(why) => {
            println!("FAILED {name}: {why}\n");
            return false;
        }
    }
    true
}

/// A new event with timing enabled.
pub fn timing_event() -> Event {
    Event::new(EventFlags::timing())
}

/// Milliseconds from `a` to `b`, by events.
pub fn ms_between(a: &Event, b: &Event) -> Result<f64, Failure> {
    a.elapsed_time(b).map(f64::from).map_err(e)
}

/// Two distinct pool streams of the current device.
pub fn two_streams() -> Result<(Stream, Stream), Failure> {
    let a = Stream::new(None, 0).map_err(e)?;
    for _ in 0..64 {
        let b = Stream::new(None, 0).map_err(e)?;
        if b != a {
            return Ok((a, b));
        }
    }
    Err("the stream pool gave the same stream 64 times".into())
}

/// Fails unless `ms`, measured by events, is what `work` of device work takes: exactly that on the
/// simulated machine (its clock is its own), within the precision of a real GPU's spin otherwise.
pub fn check_measures(ms: f64, work: Duration, what: &str) -> Result<(), Failure> {
    let want = work.as_secs_f64() * 1e3;
    let ok = if cuda::driver_name() == "sim" { (ms - want).abs() < 1e-3 } else { ms >= 0.9 * want && ms < 5.0 * want };
    check(ok, || format!("events measured {ms:.3} ms for {what} of {want} ms"))
}

/// What an attempt of [`returns_before_done`] saw right after the calls under test returned.
pub struct Seen {
    /// The queued work was still running.
    pub busy: bool,
    /// Host time from queueing the work to that observation.
    pub after: Duration,
}

impl Seen {
    /// `busy`, observed now, about work queued at `queued`.
    pub fn since(queued: Instant, busy: bool) -> Seen {
        Seen { busy, after: queued.elapsed() }
    }
}

/// Shows that calls return before their device work is done: `attempt(work)` queues `work` of
/// device time (a delay) first, then makes the calls, and reports whether the work was still
/// running right after ([`Seen::since`]). Busy proves it. Done is possible only if this process
/// was held up for longer than `work` (a loaded host): then it tries once more with four times the
/// work; done sooner than `work` means the work did not wait, and fails.
pub fn returns_before_done(
    what: &str,
    work: Duration,
    mut attempt: impl FnMut(Duration) -> Result<Seen, Failure>,
) -> Result<(), Failure> {
    for work in [work, work * 4] {
        let seen = attempt(work)?;
        if seen.busy {
            return Ok(());
        }
        check(seen.after >= work, || {
            format!("{what}: done {:?} after {work:?} of work was queued: it did not wait for the work", seen.after)
        })?;
        println!("   (this process was held up {:?}, past the {work:?} of queued work; trying with more)", seen.after);
    }
    println!("   (held up twice: the pending state was not observed on this run)");
    Ok(())
}
