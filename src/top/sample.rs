//! One reading of every device: [`Sample`].

use crate::cuda;
use crate::error::{Error, Result};

/// A reading that may be missing: its value, or why the machine cannot give it (the reason of
/// [`Error::NotSupported`], e.g. NVML's answer or the simulated machine's "no sensors", or the
/// text of a device error NVML reported).
pub type Reading<T> = std::result::Result<T, String>;

/// One of a device's largest segments of this process's caching allocator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentLine {
    /// Its start address.
    pub address: u64,
    /// Bytes held from the driver.
    pub total_size: usize,
    /// Bytes of allocated blocks in it.
    pub allocated_size: usize,
    /// Its pool (`"small"` or `"large"`).
    pub pool: &'static str,
}

/// One device's figures at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSample {
    /// The device's index.
    pub index: usize,
    /// Its name.
    pub name: String,
    /// Its memory in bytes.
    pub total_memory: usize,
    /// Percent of the last sample period with a kernel running ([`cuda::utilization`]).
    pub utilization: Reading<u32>,
    /// Percent of the last sample period with memory traffic ([`cuda::memory_usage`]).
    pub memory_usage: Reading<u32>,
    /// Device memory in use by every process and the driver ([`cuda::device_memory_used`]).
    pub device_memory_used: Reading<usize>,
    /// This process's allocated bytes ([`cuda::memory_allocated`]).
    pub allocated: usize,
    /// This process's reserved bytes ([`cuda::memory_reserved`]).
    pub reserved: usize,
    /// This process's peak of allocated bytes ([`cuda::max_memory_allocated`]).
    pub max_allocated: usize,
    /// The largest segments of this process's allocator, largest first (at most
    /// [`Sample::SEGMENTS`]).
    pub largest_segments: Vec<SegmentLine>,
    /// Degrees Celsius ([`cuda::temperature`]).
    pub temperature: Reading<u32>,
    /// Milliwatts ([`cuda::power_draw`]).
    pub power_draw: Reading<u32>,
    /// SM clock in MHz ([`cuda::clock_rate`]).
    pub clock_rate: Reading<u32>,
}

/// Every device's figures, read once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// The driver (`"cuda"` or `"sim"`).
    pub driver: &'static str,
    /// One entry per device, in index order.
    pub devices: Vec<DeviceSample>,
}

/// A reading's value, or the text of why not; an error of the device itself is not a reading
/// that is "not available" and is returned.
fn reading<T>(r: Result<T>) -> Result<Reading<T>> {
    match r {
        Ok(v) => Ok(Ok(v)),
        Err(Error::NotSupported { why, .. }) => Ok(Err(why)),
        Err(e @ Error::Driver { .. }) => Ok(Err(e.to_string())),
        Err(e) => Err(e),
    }
}

impl Sample {
    /// The most segments a device's entry lists.
    pub const SEGMENTS: usize = 5;

    /// Reads every device. Errors: the runtime cannot start (no device, invalid settings).
    pub fn take() -> Result<Sample> {
        let n = cuda::device_count();
        if n == 0 {
            cuda::current_device()?;
        }
        let snapshot = cuda::memory_snapshot()?;
        let mut devices = Vec::with_capacity(n);
        for index in 0..n {
            let props = cuda::get_device_properties(index)?;
            let mut segments: Vec<_> = snapshot.segments.iter().filter(|s| s.device == index).collect();
            segments.sort_by(|a, b| b.total_size.cmp(&a.total_size).then(a.address.cmp(&b.address)));
            let largest_segments = segments
                .into_iter()
                .take(Sample::SEGMENTS)
                .map(|s| SegmentLine {
                    address: s.address,
                    total_size: s.total_size,
                    allocated_size: s.allocated_size,
                    pool: if s.segment_type == cuda::PoolKind::Small { "small" } else { "large" },
                })
                .collect();
            devices.push(DeviceSample {
                index,
                name: props.name,
                total_memory: props.total_memory,
                utilization: reading(cuda::utilization(index))?,
                memory_usage: reading(cuda::memory_usage(index))?,
                device_memory_used: reading(cuda::device_memory_used(index))?,
                allocated: cuda::memory_allocated(index)?,
                reserved: cuda::memory_reserved(index)?,
                max_allocated: cuda::max_memory_allocated(index)?,
                largest_segments,
                temperature: reading(cuda::temperature(index))?,
                power_draw: reading(cuda::power_draw(index))?,
                clock_rate: reading(cuda::clock_rate(index))?,
            });
        }
        Ok(Sample { driver: cuda::driver_name(), devices })
    }
}
