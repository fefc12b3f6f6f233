//! Device queries and the thread's current device: `torch.cuda.device_count`, `set_device`, …

use super::{context, rt};
use crate::device::IntoCudaDevice;
use crate::driver::DeviceProperties;
use crate::error::{Error, Result};

/// Whether at least one CUDA device (real, or simulated under the sim driver) can be used.
pub fn is_available() -> bool {
    device_count() > 0
}

/// Number of devices (0 when none, or when the environment's driver settings are invalid).
pub fn device_count() -> usize {
    rt().map_or(0, |r| r.devices.len())
}

/// The driver in use: `"cuda"` or `"sim"` (`"none"` if the environment's settings are invalid;
/// any call that returns `Result` then says why).
#[doc(alias = "is_sim", alias = "simulated")]
pub fn driver_name() -> &'static str {
    rt().map_or("none", |r| r.driver.name())
}

/// This thread's current device (0 on a new thread).
pub fn current_device() -> Result<usize> {
    rt()?.resolve(None)
}

/// Makes `device` this thread's current device (an index, a [`crate::Device`] or `"cuda:N"`;
/// `None` or `"cuda"` keep the current one). Inside a [`super::DeviceGuard`] the change lasts
/// until the guard drops.
pub fn set_device(device: impl IntoCudaDevice) -> Result<()> {
    let index = rt()?.device(device)?;
    context::set_index(index);
    Ok(())
}

/// The device's name (`None` or `"cuda"`: the current device).
pub fn get_device_name(device: impl IntoCudaDevice) -> Result<String> {
    Ok(get_device_properties(device)?.name)
}

/// The device's properties (`None` or `"cuda"`: the current device).
pub fn get_device_properties(device: impl IntoCudaDevice) -> Result<DeviceProperties> {
    let rt = rt()?;
    rt.driver.properties(rt.device(device)?)
}

/// Waits for all work on all streams of the device (`None` or `"cuda"`: the current device).
/// Also returns the asynchronous errors pending on the device (raised in a `Drop`, or by a
/// collective that failed after it was queued), which stay pending until
/// [`get_last_error`](crate::cuda::get_last_error) takes them (sticky, as CUDA's).
#[track_caller]
pub fn synchronize(device: impl IntoCudaDevice) -> Result<()> {
    let rt = rt()?;
    let device = rt.device(device)?;
    if super::capture::active() {
        super::capture::check_device("cuda::synchronize", device)?;
    }
    super::sync_debug::on_sync("cuda::synchronize")?;
    rt.driver.synchronize_device(device)?;
    if super::sanitizer::enabled() {
        super::sanitizer::host_waits_device(device);
    }
    super::errors::check(device)
}

/// `(free, total)` bytes of the device's memory (`None` or `"cuda"`: the current device).
pub fn mem_get_info(device: impl IntoCudaDevice) -> Result<(usize, usize)> {
    let rt = rt()?;
    rt.driver.mem_get_info(rt.device(device)?)
}

/// Whether `device` can access `peer`'s memory directly (`false` for the same device, as in PyTorch).
pub fn can_device_access_peer(device: impl IntoCudaDevice, peer: impl IntoCudaDevice) -> Result<bool> {
    let rt = rt()?;
    rt.driver.can_access_peer(rt.device(device)?, rt.device(peer)?)
}

/// Enables peer access between `a` and `b`, both ways. Afterwards ops may mix tensors of the two
/// devices, reading the other device's memory over the peer link. Idempotent; a no-op for
/// `a == b`; [`Error::PeerAccessUnsupported`] where the pair cannot.
pub fn enable_peer_access(a: impl IntoCudaDevice, b: impl IntoCudaDevice) -> Result<()> {
    let rt = rt()?;
    let (a, b) = (rt.device(a)?, rt.device(b)?);
    if a == b {
        return Ok(());
    }
    for (x, y) in [(a, b), (b, a)] {
        if !rt.driver.can_access_peer(x, y)? {
            return Err(Error::PeerAccessUnsupported { from: x, to: y });
        }
    }
    rt.driver.enable_peer_access(a, b)?;
    rt.driver.enable_peer_access(b, a)?;
    rt.devices[a].peer_enabled.lock().unwrap_or_else(|e| e.into_inner())[b] = true;
    rt.devices[b].peer_enabled.lock().unwrap_or_else(|e| e.into_inner())[a] = true;
    Ok(())
}

/// Whether [`enable_peer_access`] has been called for the pair (always `true` for `a == b`).
pub fn is_peer_access_enabled(a: impl IntoCudaDevice, b: impl IntoCudaDevice) -> Result<bool> {
    let rt = rt()?;
    let (a, b) = (rt.device(a)?, rt.device(b)?);
    Ok(a == b || rt.devices[a].peer_enabled.lock().unwrap_or_else(|e| e.into_inner())[b])
}
