//! [`DriverMemory`]: one device of a [`Driver`] as the allocator's [`RawMemory`].

use super::RawMemory;
use crate::driver::{DevicePtr, Driver, EventId, StreamId};
use crate::error::Result;
use std::sync::Arc;

/// The allocator's door to one device of a driver: segments are `malloc`/`free`, `record_stream`
/// events are driver events, expandable segments use the driver's `vmm_*` calls.
pub struct DriverMemory {
    driver: Arc<dyn Driver>,
    device: usize,
    idle_streams: bool,
}

impl std::fmt::Debug for DriverMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DriverMemory({} driver, cuda:{})", self.driver.name(), self.device)
    }
}

impl DriverMemory {
    /// `device` of `driver` (the caller checked the index).
    pub fn new(driver: Arc<dyn Driver>, device: usize) -> DriverMemory {
        DriverMemory { driver, device, idle_streams: false }
    }

    /// The same, for a replay that runs no device work: stream events are not recorded on the
    /// driver and count as complete at once (the trace's streams need not exist there).
    pub fn for_replay(driver: Arc<dyn Driver>, device: usize) -> DriverMemory {
        DriverMemory { driver, device, idle_streams: true }
    }
}

impl RawMemory for DriverMemory {
    fn malloc(&self, bytes: usize) -> Result<DevicePtr> {
        self.driver.malloc(self.device, bytes)
    }
    fn free(&self, ptr: DevicePtr, _bytes: usize) -> Result<()> {
        self.driver.free(self.device, ptr)
    }
    fn mem_info(&self) -> Result<(usize, usize)> {
        self.driver.mem_get_info(self.device)
    }
    fn record_event(&self, stream: StreamId) -> Result<EventId> {
        if self.idle_streams {
            return Ok(EventId(0));
        }
        let ev = self.driver.event_create(self.device, false, false)?;
        if let Err(e) = self.driver.event_record(ev, stream) {
            self.driver.event_destroy(ev);
            return Err(e);
        }
        Ok(ev)
    }
    fn event_done(&self, event: EventId) -> Result<bool> {
        if self.idle_streams {
            return Ok(true);
        }
        self.driver.event_query(event)
    }
    fn event_release(&self, event: EventId) {
        if !self.idle_streams {
            self.driver.event_destroy(event)
        }
    }
    fn synchronize(&self) -> Result<()> {
        self.driver.synchronize_device(self.device)
    }
    fn vmm_granularity(&self) -> Option<usize> {
        self.driver.vmm_granularity(self.device)
    }
    fn vmm_reserve(&self, bytes: usize) -> Result<DevicePtr> {
        self.driver.vmm_reserve(self.device, bytes)
    }
    fn vmm_map(&self, at: DevicePtr, bytes: usize) -> Result<()> {
        self.driver.vmm_map(self.device, at, bytes)
    }
    fn vmm_unmap(&self, at: DevicePtr, bytes: usize) -> Result<()> {
        self.driver.vmm_unmap(self.device, at, bytes)
    }
    fn vmm_release(&self, base: DevicePtr, bytes: usize) -> Result<()> {
        self.driver.vmm_release(self.device, base, bytes)
    }
}
