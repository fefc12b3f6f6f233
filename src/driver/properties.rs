//! What `torch.cuda.get_device_properties` reports: [`DeviceProperties`] with the fields of
//! PyTorch's `_CudaDeviceProperties`, and the device's [`DeviceUuid`].

/// A device's 16-byte UUID (`cuDeviceGetUuid`). `Display` writes it as PyTorch prints
/// `props.uuid` (`1ceaac08-1d2b-…`, 36 characters); [`DeviceUuid::nvml_form`] as NVML and
/// `nvidia-smi -L` write it (`GPU-1ceaac08-…`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct DeviceUuid(pub [u8; 16]);

impl DeviceUuid {
    /// The UUID as NVML names the device: `GPU-` and the 36-character form.
    pub fn nvml_form(&self) -> String {
        format!("GPU-{self}")
    }
}

impl std::fmt::Display for DeviceUuid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// What `torch.cuda.get_device_properties` reports, field for field (PyTorch's
/// `_CudaDeviceProperties`; `L2_cache_size` is spelled `l2_cache_size`, Rust's case).
///
/// `Display` is PyTorch's `repr`:
/// `_CudaDeviceProperties(name='NVIDIA H100 80GB HBM3', major=9, minor=0, total_memory=81079MB,
/// multi_processor_count=132, uuid=1ceaac08-…, pci_bus_id=0, pci_device_id=6, pci_domain_id=0,
/// L2_cache_size=50MB)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceProperties {
    /// Marketing name, e.g. `NVIDIA H200`.
    pub name: String,
    /// Total device memory in bytes.
    pub total_memory: usize,
    /// Number of streaming multiprocessors.
    pub multi_processor_count: u32,
    /// Compute capability, major part.
    pub major: u32,
    /// Compute capability, minor part.
    pub minor: u32,
    /// Whether the GPU is integrated with the host's memory (a Jetson, a GH200's host view).
    pub is_integrated: bool,
    /// Whether the GPU is on a board with others (a multi-GPU board such as a K80).
    pub is_multi_gpu_board: bool,
    /// Most resident threads per multiprocessor.
    pub max_threads_per_multi_processor: u32,
    /// Most threads per block.
    pub max_threads_per_block: u32,
    /// Threads per warp.
    pub warp_size: u32,
    /// 32-bit registers available to one block.
    pub regs_per_block: u32,
    /// 32-bit registers per multiprocessor.
    pub regs_per_multiprocessor: u32,
    /// Shared memory a block may use without opting in, in bytes.
    pub shared_memory_per_block: usize,
    /// Shared memory a block may use when it opts in (`cudaFuncSetAttribute`), in bytes.
    pub shared_memory_per_block_optin: usize,
    /// Shared memory per multiprocessor, in bytes.
    pub shared_memory_per_multiprocessor: usize,
    /// L2 cache size in bytes (PyTorch's `L2_cache_size`).
    #[doc(alias = "L2_cache_size")]
    pub l2_cache_size: usize,
    /// Peak SM clock in kHz (`cudaDevAttrClockRate`).
    pub clock_rate: u32,
    /// Peak memory clock in kHz.
    pub memory_clock_rate: u32,
    /// Global memory bus width in bits.
    pub memory_bus_width: u32,
    /// The device's UUID.
    pub uuid: DeviceUuid,
    /// PCI bus number.
    pub pci_bus_id: u32,
    /// PCI device (slot) number.
    pub pci_device_id: u32,
    /// PCI domain number.
    pub pci_domain_id: u32,
}

impl DeviceProperties {
    /// The PCI address as NVML and `nvidia-smi` write it (`00000000:06:00.0`).
    pub fn pci_address(&self) -> String {
        format!("{:08x}:{:02x}:{:02x}.0", self.pci_domain_id, self.pci_bus_id, self.pci_device_id)
    }
}

impl std::fmt::Display for DeviceProperties {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const MB: usize = 1024 * 1024;
        write!(
            f,
            "_CudaDeviceProperties(name='{}', major={}, minor={}, total_memory={}MB, multi_processor_count={}, \
             uuid={}, pci_bus_id={}, pci_device_id={}, pci_domain_id={}, L2_cache_size={}MB)",
            self.name,
            self.major,
            self.minor,
            self.total_memory / MB,
            self.multi_processor_count,
            self.uuid,
            self.pci_bus_id,
            self.pci_device_id,
            self.pci_domain_id,
            self.l2_cache_size / MB
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_print_as_pytorch_and_nvml_do() {
        let bytes = [0x1c, 0xea, 0xac, 0x08, 0x1d, 0x2b, 0x4e, 0x5f, 0x80, 0x91, 0xa2, 0xb3, 0xc4, 0xd5, 0xe6, 0xf7];
        let u = DeviceUuid(bytes);
        assert_eq!(u.to_string(), "1ceaac08-1d2b-4e5f-8091-a2b3c4d5e6f7");
        assert_eq!(u.nvml_form(), "GPU-1ceaac08-1d2b-4e5f-8091-a2b3c4d5e6f7");
    }
}
