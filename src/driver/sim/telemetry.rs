//! The simulated machine's properties and readings: what `get_device_properties` reports (the
//! configured [`SimGpu`](crate::SimGpu)'s figures, a UUID and PCI address made from the device's
//! index in the machine), and NVML's readings taken from the simulation itself: utilization
//! from its streams' busy time (`busy.rs`), memory from its allocator, the process list as this
//! process. What a simulation cannot know (temperature, power, clocks) is
//! [`Error::NotSupported`].

use super::sim_driver::SimDriver;
use crate::config::SimConfig;
use crate::driver::{DeviceProperties, DeviceUuid, GpuProcess, GpuProcesses, Telemetry};
use crate::error::{Error, Result};

/// The properties of the machine's device `physical` (its index before `CUDA_VISIBLE_DEVICES`).
pub(super) fn properties(config: &SimConfig, physical: usize) -> DeviceProperties {
    let g = &config.gpu;
    let mut uuid = *b"cudasem-sim-\0\0\0\0";
    uuid[12..].copy_from_slice(&(physical as u32).to_be_bytes());
    DeviceProperties {
        name: g.name.clone(),
        total_memory: config.memory,
        multi_processor_count: g.multi_processor_count,
        major: g.major,
        minor: g.minor,
        is_integrated: g.is_integrated,
        is_multi_gpu_board: g.is_multi_gpu_board,
        max_threads_per_multi_processor: g.max_threads_per_multi_processor,
        max_threads_per_block: g.max_threads_per_block,
        warp_size: g.warp_size,
        regs_per_block: g.regs_per_block,
        regs_per_multiprocessor: g.regs_per_multiprocessor,
        shared_memory_per_block: g.shared_memory_per_block,
        shared_memory_per_block_optin: g.shared_memory_per_block_optin,
        shared_memory_per_multiprocessor: g.shared_memory_per_multiprocessor,
        l2_cache_size: g.l2_cache_size,
        clock_rate: g.clock_rate,
        memory_clock_rate: g.memory_clock_rate,
        memory_bus_width: g.memory_bus_width,
        uuid: DeviceUuid(uuid),
        pci_bus_id: physical as u32 + 1,
        pci_device_id: 0,
        pci_domain_id: 0,
    }
}

/// The error for a reading the simulation has no model of.
fn not_simulated(what: &'static str) -> Error {
    Error::NotSupported {
        what,
        why: "the simulated GPU (CUDASEM_DRIVER=sim) has no sensors; run on a GPU with the CUDA driver \
              for this reading"
            .into(),
    }
}

impl Telemetry for SimDriver {
    fn utilization(&self, device: usize) -> Result<u32> {
        Ok(self.dev(device)?.clocks.kernels.percent())
    }

    fn memory_usage(&self, device: usize) -> Result<u32> {
        Ok(self.dev(device)?.clocks.memory.percent())
    }

    fn temperature(&self, device: usize) -> Result<u32> {
        self.dev(device)?;
        Err(not_simulated("temperature"))
    }

    fn power_draw(&self, device: usize) -> Result<u32> {
        self.dev(device)?;
        Err(not_simulated("power_draw"))
    }

    fn clock_rate(&self, device: usize) -> Result<u32> {
        self.dev(device)?;
        Err(not_simulated("clock_rate"))
    }

    fn device_memory_used(&self, device: usize) -> Result<usize> {
        let (free, total) = self.dev(device)?.memory.info();
        Ok(total - free)
    }

    fn gpu_processes(&self, device: usize) -> Result<GpuProcesses> {
        let used = self.device_memory_used(device)?;
        Ok(GpuProcesses {
            gpu: self.physical[device] as u32,
            processes: vec![GpuProcess { pid: std::process::id(), used_memory: Some(used) }],
        })
    }
}
