//! NVML's readings under PyTorch's names: `torch.cuda.utilization`, `memory_usage`,
//! `temperature`, `power_draw`, `clock_rate`, `device_memory_used` and `list_gpu_processes`.
//! On real GPUs they come from NVML (loaded at run time); on the simulated machine from the
//! simulation (its streams' busy time, its memory). A reading that cannot be had is
//! [`Error::NotSupported`](crate::Error::NotSupported) naming it and why, never a zero.

use super::rt;
use crate::device::IntoCudaDevice;
use crate::driver::GpuProcesses;
use crate::error::Result;

/// Percent of the last sample period (NVML's: 1/6 s to 1 s by product; 200 ms on the simulated
/// machine) during which one or more kernels ran on the device (`None` or `"cuda"`: the
/// current device). `torch.cuda.utilization`.
pub fn utilization(device: impl IntoCudaDevice) -> Result<u32> {
    let rt = rt()?;
    rt.driver.telemetry().utilization(rt.device(device)?)
}

/// Percent of the last sample period during which the device's memory was read or written.
/// `torch.cuda.memory_usage`.
pub fn memory_usage(device: impl IntoCudaDevice) -> Result<u32> {
    let rt = rt()?;
    rt.driver.telemetry().memory_usage(rt.device(device)?)
}

/// The GPU's temperature in degrees Celsius. `torch.cuda.temperature`.
pub fn temperature(device: impl IntoCudaDevice) -> Result<u32> {
    let rt = rt()?;
    rt.driver.telemetry().temperature(rt.device(device)?)
}

/// The board's power draw in milliwatts. `torch.cuda.power_draw`.
pub fn power_draw(device: impl IntoCudaDevice) -> Result<u32> {
    let rt = rt()?;
    rt.driver.telemetry().power_draw(rt.device(device)?)
}

/// The SM clock in MHz, now. `torch.cuda.clock_rate`.
pub fn clock_rate(device: impl IntoCudaDevice) -> Result<u32> {
    let rt = rt()?;
    rt.driver.telemetry().clock_rate(rt.device(device)?)
}

/// Bytes of the device's memory in use, by every process and the driver, as `nvidia-smi` shows
/// them (on the simulated machine: what its allocations hold). `torch.cuda.device_memory_used`.
pub fn device_memory_used(device: impl IntoCudaDevice) -> Result<usize> {
    let rt = rt()?;
    rt.driver.telemetry().device_memory_used(rt.device(device)?)
}

/// The processes running on the device and the memory each uses; `Display` is the text
/// `torch.cuda.list_gpu_processes` returns. On the simulated machine: this process, with the
/// device memory it holds.
pub fn list_gpu_processes(device: impl IntoCudaDevice) -> Result<GpuProcesses> {
    let rt = rt()?;
    rt.driver.telemetry().gpu_processes(rt.device(device)?)
}
