//! `torch.cuda.set_sync_debug_mode`: flags calls that make the host wait for the device
//! (blocking reads to the host, synchronizes, blocking event waits) with a `tracing` warning
//! naming the call site, or refuses them with a typed error.

use crate::error::{Error, Result};
use std::panic::Location;
use std::str::FromStr;
use std::sync::atomic::{AtomicU8, Ordering};

/// What a synchronizing call does (`torch.cuda.set_sync_debug_mode`'s modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SyncDebugMode {
    /// Synchronize silently (PyTorch's `"default"`, `0`).
    #[default]
    Default,
    /// Warn through the `tracing` crate (target `cudasem::sync_debug`), then synchronize
    /// (`"warn"`, `1`).
    Warn,
    /// Refuse the call with [`Error::SynchronizingOperation`] (`"error"`, `2`).
    Error,
}

impl From<SyncDebugMode> for i32 {
    /// PyTorch's integer for the mode (`get_sync_debug_mode()`'s value).
    fn from(m: SyncDebugMode) -> i32 {
        match m {
            SyncDebugMode::Default => 0,
            SyncDebugMode::Warn => 1,
            SyncDebugMode::Error => 2,
        }
    }
}

impl TryFrom<i32> for SyncDebugMode {
    type Error = Error;
    /// PyTorch's integers: 0 default, 1 warn, 2 error.
    fn try_from(v: i32) -> Result<SyncDebugMode> {
        match v {
            0 => Ok(SyncDebugMode::Default),
            1 => Ok(SyncDebugMode::Warn),
            2 => Ok(SyncDebugMode::Error),
            _ => Err(invalid(&v.to_string())),
        }
    }
}

impl FromStr for SyncDebugMode {
    type Err = Error;
    /// PyTorch's strings: `"default"`, `"warn"`, `"error"` (or their integers).
    fn from_str(s: &str) -> Result<SyncDebugMode> {
        match s.trim() {
            "default" | "0" => Ok(SyncDebugMode::Default),
            "warn" | "1" => Ok(SyncDebugMode::Warn),
            "error" | "2" => Ok(SyncDebugMode::Error),
            other => Err(invalid(other)),
        }
    }
}

fn invalid(v: &str) -> Error {
    Error::InvalidArgument {
        op: "set_sync_debug_mode",
        reason: format!("invalid value of debug_mode {v:?}, expected one of \"default\"/0, \"warn\"/1, \"error\"/2"),
    }
}

static MODE: AtomicU8 = AtomicU8::new(0);

/// Sets what a call that makes the host wait for the device does
/// (`torch.cuda.set_sync_debug_mode`): nothing, a warning, or an error.
pub fn set_sync_debug_mode(mode: SyncDebugMode) {
    MODE.store(i32::from(mode) as u8, Ordering::Relaxed);
}

/// The current sync debug mode (`torch.cuda.get_sync_debug_mode`).
pub fn get_sync_debug_mode() -> SyncDebugMode {
    SyncDebugMode::try_from(MODE.load(Ordering::Relaxed) as i32).unwrap_or_default()
}

/// Called by every call that is about to make the host wait for the device: a relaxed load in
/// the default mode; else a warning naming `call` and its caller, or the refusal.
#[inline]
#[track_caller]
pub(crate) fn on_sync(call: &'static str) -> Result<()> {
    if MODE.load(Ordering::Relaxed) == 0 {
        return Ok(());
    }
    flag(call, Location::caller())
}

#[cold]
fn flag(call: &'static str, at: &'static Location<'static>) -> Result<()> {
    match get_sync_debug_mode() {
        SyncDebugMode::Default => Ok(()),
        SyncDebugMode::Warn => {
            tracing::warn!(target: "cudasem::sync_debug", call, location = %at, "called a synchronizing CUDA operation: {call} at {at}");
            Ok(())
        }
        SyncDebugMode::Error => Err(Error::SynchronizingOperation { call, location: at.to_string() }),
    }
}
