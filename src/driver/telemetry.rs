//! The readings `torch.cuda` takes from NVML (`utilization`, `memory_usage`, `temperature`,
//! `power_draw`, `clock_rate`, `device_memory_used`, `list_gpu_processes`): the [`Telemetry`]
//! trait each driver gives through [`Driver::telemetry`](super::Driver::telemetry), and the
//! process list's types. A reading that cannot be had is
//! [`Error::NotSupported`](crate::Error::NotSupported), never a zero.

use crate::error::Result;

/// Device readings, as NVML gives them. Device indices are valid (`< device_count()`): the
/// runtime checks them.
pub trait Telemetry: Send + Sync {
    /// Percent of the last sample period during which one or more kernels ran
    /// (`nvmlDeviceGetUtilizationRates().gpu`).
    fn utilization(&self, device: usize) -> Result<u32>;
    /// Percent of the last sample period during which device memory was read or written
    /// (`nvmlDeviceGetUtilizationRates().memory`).
    fn memory_usage(&self, device: usize) -> Result<u32>;
    /// The GPU's temperature in degrees Celsius (`nvmlDeviceGetTemperature`, the GPU sensor).
    fn temperature(&self, device: usize) -> Result<u32>;
    /// The board's power draw in milliwatts (`nvmlDeviceGetPowerUsage`).
    fn power_draw(&self, device: usize) -> Result<u32>;
    /// The SM clock in MHz (`nvmlDeviceGetClockInfo(NVML_CLOCK_SM)`).
    fn clock_rate(&self, device: usize) -> Result<u32>;
    /// Bytes of device memory in use by every process and the driver (`nvmlDeviceGetMemoryInfo().used`,
    /// what `nvidia-smi` shows).
    fn device_memory_used(&self, device: usize) -> Result<usize>;
    /// The compute processes running on the device (`nvmlDeviceGetComputeRunningProcesses`).
    fn gpu_processes(&self, device: usize) -> Result<GpuProcesses>;
}

/// One process using a GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuProcess {
    /// Its process id.
    pub pid: u32,
    /// The device memory it uses in bytes; `None` where the driver does not say (NVML's
    /// "not available", e.g. inside some containers).
    pub used_memory: Option<usize>,
}

/// The processes using one GPU: what `torch.cuda.list_gpu_processes` prints. `Display` is
/// PyTorch's text:
///
/// ```text
/// GPU:0
/// process      12345 uses      506.000 MB GPU memory
/// ```
/// or `no processes are running` under the first line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuProcesses {
    /// The GPU's index as NVML numbers it (the machine's index, not reordered by
    /// `CUDA_VISIBLE_DEVICES`), as PyTorch prints it.
    pub gpu: u32,
    /// The processes, in the driver's order.
    pub processes: Vec<GpuProcess>,
}

impl std::fmt::Display for GpuProcesses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GPU:{}", self.gpu)?;
        if self.processes.is_empty() {
            write!(f, "\nno processes are running")?;
        }
        for p in &self.processes {
            match p.used_memory {
                Some(bytes) => {
                    let mb = bytes as f64 / (1024.0 * 1024.0);
                    write!(f, "\nprocess {:>10} uses {mb:>12.3} MB GPU memory", p.pid)?;
                }
                None => write!(f, "\nprocess {:>10} uses {:>12} MB GPU memory", p.pid, "n/a")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_list_prints_as_pytorch_does() {
        let none = GpuProcesses { gpu: 3, processes: vec![] };
        assert_eq!(none.to_string(), "GPU:3\nno processes are running");
        let two = GpuProcesses {
            gpu: 0,
            processes: vec![
                GpuProcess { pid: 4242, used_memory: Some(506_724_352) },
                GpuProcess { pid: 7, used_memory: None },
            ],
        };
        assert_eq!(
            two.to_string(),
            "GPU:0\nprocess       4242 uses      483.250 MB GPU memory\nprocess          7 uses          n/a MB GPU memory"
        );
    }
}
