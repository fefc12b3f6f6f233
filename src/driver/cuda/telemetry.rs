//! The CUDA driver's device properties (`cuDeviceGetAttribute`, `cuDeviceGetUuid`) and NVML's
//! readings (`nvml-wrapper`, which loads `libnvidia-ml.so.1` at run time). NVML starts once, on
//! the first reading; a device is found in it by its UUID (then its PCI address), so the
//! numbering follows `CUDA_VISIBLE_DEVICES` as CUDA's does, as PyTorch maps it. NVML missing, or
//! a reading the device does not support, is [`Error::NotSupported`]; never a zero.

use super::driver::CudaDriver;
use super::status::driver_error;
use crate::driver::{DeviceProperties, DeviceUuid, GpuProcess, GpuProcesses, Telemetry};
use crate::error::{Error, Result};
use cudarc::driver::result as cu;
use cudarc::driver::sys;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;
use std::sync::OnceLock;

/// The process's NVML, started on first use; why not, when it cannot start.
fn nvml() -> std::result::Result<&'static Nvml, String> {
    static NVML: OnceLock<std::result::Result<Nvml, String>> = OnceLock::new();
    NVML.get_or_init(|| {
        Nvml::init().map_err(|e| {
            format!("NVML (libnvidia-ml.so.1, from the NVIDIA driver) could not start: {e}; install the driver's NVML library or put its directory on LD_LIBRARY_PATH")
        })
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// A failed NVML call `call` for the reading `what`: [`Error::NotSupported`] where the device
/// or the machine cannot give it, [`Error::Driver`] for a failure of the device.
fn nvml_error(what: &'static str, call: &'static str, e: NvmlError) -> Error {
    match e {
        NvmlError::NotSupported
        | NvmlError::NoPermission
        | NvmlError::FunctionNotFound
        | NvmlError::FailedToLoadSymbol(_)
        | NvmlError::LibraryNotFound
        | NvmlError::DriverNotLoaded
        | NvmlError::Uninitialized
        | NvmlError::NotFound => Error::NotSupported { what, why: format!("NVML's {call} answered: {e}") },
        other => Error::Driver { op: call, code: -1, name: "NVML_ERROR".into(), message: other.to_string() },
    }
}

impl CudaDriver {
    /// The device's NVML handle: found by its UUID, else by its PCI address.
    fn nvml_device(&self, device: usize, what: &'static str) -> Result<nvml_wrapper::Device<'static>> {
        let nvml = nvml().map_err(|why| Error::NotSupported { what, why })?;
        let props = properties(self, device)?;
        nvml.device_by_uuid(props.uuid.nvml_form()).or_else(|_| {
            nvml.device_by_pci_bus_id(props.pci_address())
                .map_err(|e| nvml_error(what, "nvmlDeviceGetHandleByPciBusId", e))
        })
    }
}

/// The device's properties, from the CUDA driver.
pub(super) fn properties(driver: &CudaDriver, device: usize) -> Result<DeviceProperties> {
    let dev = driver.device(device)?.cu;
    let name = cu::device::get_name(dev).map_err(|e| driver_error("cuDeviceGetName", e))?;
    // SAFETY: `dev` was returned by `cuDeviceGet`.
    let total_memory = unsafe { cu::device::total_mem(dev) }.map_err(|e| driver_error("cuDeviceTotalMem", e))?;
    let uuid = cu::device::get_uuid(dev).map_err(|e| driver_error("cuDeviceGetUuid", e))?;
    let attr = |attr: sys::CUdevice_attribute| -> Result<u32> {
        // SAFETY: `dev` was returned by `cuDeviceGet`; `attr` is a valid attribute.
        let value =
            unsafe { cu::device::get_attribute(dev, attr) }.map_err(|e| driver_error("cuDeviceGetAttribute", e))?;
        u32::try_from(value).map_err(|_| Error::Driver {
            op: "cuDeviceGetAttribute",
            code: value,
            name: "NEGATIVE_ATTRIBUTE".into(),
            message: format!("the driver gave {value} for {attr:?}"),
        })
    };
    let bytes = |a| attr(a).map(|v| v as usize);
    use sys::CUdevice_attribute::*;
    Ok(DeviceProperties {
        name,
        total_memory,
        multi_processor_count: attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        major: attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
        minor: attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        is_integrated: attr(CU_DEVICE_ATTRIBUTE_INTEGRATED)? != 0,
        is_multi_gpu_board: attr(CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD)? != 0,
        max_threads_per_multi_processor: attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)?,
        max_threads_per_block: attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
        warp_size: attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE)?,
        regs_per_block: attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK)?,
        regs_per_multiprocessor: attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR)?,
        shared_memory_per_block: bytes(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?,
        shared_memory_per_block_optin: bytes(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
        shared_memory_per_multiprocessor: bytes(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?,
        l2_cache_size: bytes(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?,
        clock_rate: attr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE)?,
        memory_clock_rate: attr(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)?,
        memory_bus_width: attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)?,
        uuid: DeviceUuid(uuid.bytes.map(|b| b as u8)),
        pci_bus_id: attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
        pci_device_id: attr(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?,
        pci_domain_id: attr(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
    })
}

impl Telemetry for CudaDriver {
    fn utilization(&self, device: usize) -> Result<u32> {
        let d = self.nvml_device(device, "utilization")?;
        d.utilization_rates().map(|u| u.gpu).map_err(|e| nvml_error("utilization", "nvmlDeviceGetUtilizationRates", e))
    }

    fn memory_usage(&self, device: usize) -> Result<u32> {
        let d = self.nvml_device(device, "memory_usage")?;
        d.utilization_rates()
            .map(|u| u.memory)
            .map_err(|e| nvml_error("memory_usage", "nvmlDeviceGetUtilizationRates", e))
    }

    fn temperature(&self, device: usize) -> Result<u32> {
        let d = self.nvml_device(device, "temperature")?;
        d.temperature(TemperatureSensor::Gpu).map_err(|e| nvml_error("temperature", "nvmlDeviceGetTemperature", e))
    }

    fn power_draw(&self, device: usize) -> Result<u32> {
        let d = self.nvml_device(device, "power_draw")?;
        d.power_usage().map_err(|e| nvml_error("power_draw", "nvmlDeviceGetPowerUsage", e))
    }

    fn clock_rate(&self, device: usize) -> Result<u32> {
        let d = self.nvml_device(device, "clock_rate")?;
        d.clock_info(Clock::SM).map_err(|e| nvml_error("clock_rate", "nvmlDeviceGetClockInfo", e))
    }

    fn device_memory_used(&self, device: usize) -> Result<usize> {
        let d = self.nvml_device(device, "device_memory_used")?;
        d.memory_info()
            .map(|m| m.used as usize)
            .map_err(|e| nvml_error("device_memory_used", "nvmlDeviceGetMemoryInfo", e))
    }

    fn gpu_processes(&self, device: usize) -> Result<GpuProcesses> {
        const WHAT: &str = "list_gpu_processes";
        let d = self.nvml_device(device, WHAT)?;
        let gpu = d.index().map_err(|e| nvml_error(WHAT, "nvmlDeviceGetIndex", e))?;
        let procs =
            d.running_compute_processes().map_err(|e| nvml_error(WHAT, "nvmlDeviceGetComputeRunningProcesses", e))?;
        let processes = procs
            .into_iter()
            .map(|p| GpuProcess {
                pid: p.pid,
                used_memory: match p.used_gpu_memory {
                    UsedGpuMemory::Used(bytes) => Some(bytes as usize),
                    UsedGpuMemory::Unavailable => None,
                },
            })
            .collect();
        Ok(GpuProcesses { gpu, processes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvml_missing_is_a_reason_not_a_panic() {
        // Where the driver's NVML is installed it starts and counts the GPUs; elsewhere (a
        // machine without the NVIDIA driver) the reason names the library to install.
        match nvml() {
            Ok(n) => assert!(n.device_count().is_ok()),
            Err(why) => assert!(why.contains("libnvidia-ml.so.1") && why.contains("LD_LIBRARY_PATH"), "{why}"),
        }
    }

    #[test]
    fn nvml_errors_map_to_not_supported_or_a_device_error() {
        for e in [NvmlError::NotSupported, NvmlError::NoPermission, NvmlError::DriverNotLoaded, NvmlError::NotFound] {
            let what = "temperature";
            match nvml_error(what, "nvmlDeviceGetTemperature", e) {
                Error::NotSupported { what: w, why } => {
                    assert_eq!(w, what);
                    assert!(why.starts_with("NVML's nvmlDeviceGetTemperature answered: "), "{why}");
                }
                other => panic!("expected NotSupported, got {other:?}"),
            }
        }
        let lost = nvml_error("power_draw", "nvmlDeviceGetPowerUsage", NvmlError::GpuLost);
        assert!(matches!(lost, Error::Driver { op: "nvmlDeviceGetPowerUsage", .. }), "{lost:?}");
    }
}
