//! `torch.cuda.profiler`: starts and stops a profiler's collection from inside the program
//! (`cuProfilerStart` / `cuProfilerStop` on the current device's context), so that a profiler
//! started with collection off (`nsys profile --capture-range=cudaProfilerApi`, `ncu
//! --profile-from-start off`) sees only the part between. On the simulated machine the calls are
//! accepted; on every driver each is recorded in the calling thread's NVTX log
//! ([`crate::testing::take_nvtx_records`]).

use super::nvtx::{self, Record};
use super::{current_device, rt};
use crate::error::Result;

/// Starts the profiler's collection for the current device (`torch.cuda.profiler.start`).
pub fn start() -> Result<()> {
    toggle(current_device()?, true)
}

/// Stops the profiler's collection for the current device (`torch.cuda.profiler.stop`).
pub fn stop() -> Result<()> {
    toggle(current_device()?, false)
}

/// Starts or stops collection for `device`, and records it.
fn toggle(device: usize, start: bool) -> Result<()> {
    rt()?.driver.profiler(device, start)?;
    nvtx::record(if start { Record::ProfilerStart { device } } else { Record::ProfilerStop { device } });
    Ok(())
}

/// The profiler collects until this guard drops ([`profile`]).
#[must_use = "the profiler stops when this guard drops"]
pub struct Profile {
    device: usize,
}

impl Profile {
    /// The device whose context the profiler collects.
    pub fn device(&self) -> usize {
        self.device
    }
}

impl Drop for Profile {
    fn drop(&mut self) {
        // `drop` cannot return an error; a stop that fails leaves collection on, which the
        // profiler shows (a later `stop()` returns the error).
        let _ = toggle(self.device, false);
    }
}

/// Starts the profiler's collection until the returned guard drops
/// (`with torch.cuda.profiler.profile():`).
pub fn profile() -> Result<Profile> {
    let device = current_device()?;
    toggle(device, true)?;
    Ok(Profile { device })
}
