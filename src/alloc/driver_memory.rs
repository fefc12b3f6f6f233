//! [`DriverMemory`]: one device of a [`Driver`] as the allocator's [`RawMemory`].

use super::RawMemory;
use crate::driver::{DeviceAllocation, DevicePtr, Driver, EventId, StreamId};
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The allocator's door to one device of a driver: segments are `malloc`/`free`, `record_stream`
/// events are driver events, expandable segments use the driver's `vmm_*` calls.
///
/// It owns the segments it allocated ([`DeviceAllocation`]s, by address): a `free` gives back
/// one of those, and an address it did not hand out is [`Error::Internal`], never a driver free.
pub struct DriverMemory {
    driver: Arc<dyn Driver>,
    device: usize,
    idle_streams: bool,
    segments: Mutex<HashMap<u64, DeviceAllocation>>,
}

impl std::fmt::Debug for DriverMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DriverMemory({} driver, cuda:{})", self.driver.name(), self.device)
    }
}

impl DriverMemory {
    /// `device` of `driver` (the caller checked the index).
    pub fn new(driver: Arc<dyn Driver>, device: usize) -> DriverMemory {
        DriverMemory { driver, device, idle_streams: false, segments: Mutex::default() }
    }

    /// The same, for a replay that runs no device work: stream events are not recorded on the
    /// driver and count as complete at once (the trace's streams need not exist there).
    pub fn for_replay(driver: Arc<dyn Driver>, device: usize) -> DriverMemory {
        DriverMemory { driver, device, idle_streams: true, segments: Mutex::default() }
    }
}

impl DriverMemory {
    fn segments(&self) -> std::sync::MutexGuard<'_, HashMap<u64, DeviceAllocation>> {
        self.segments.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl RawMemory for DriverMemory {
    fn malloc(&self, bytes: usize) -> Result<DevicePtr> {
        let segment = DeviceAllocation::new(&self.driver, self.device, bytes)?;
        let ptr = segment.ptr();
        self.segments().insert(ptr.0, segment);
        Ok(ptr)
    }
    fn free(&self, ptr: DevicePtr, bytes: usize) -> Result<()> {
        let segment = self.segments().remove(&ptr.0).ok_or_else(|| Error::Internal {
            op: "free",
            reason: format!(
                "the allocator freed {ptr:?} ({bytes} bytes) on cuda:{}, not one of its segments",
                self.device
            ),
        })?;
        segment.try_free().map_err(|(e, segment)| {
            // Not freed: the segment stays the allocator's, to free again later.
            self.segments().insert(ptr.0, segment);
            e
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::sim::{PeerSpec, SimConfig, SimDriver};

    /// The allocator's door frees only the segments it allocated: another address (a stray or
    /// repeated free) is a typed error and reaches no driver; a free the driver refused leaves
    /// the segment owned, so a later free gives it back.
    #[test]
    fn only_segments_it_allocated_are_freed_and_a_refused_free_can_be_retried() -> Result<()> {
        let sim = Arc::new(SimDriver::new(SimConfig {
            devices: 1,
            memory: 1 << 20,
            peer: PeerSpec::All,
            ..SimConfig::default()
        }));
        let mem = DriverMemory::new(sim.clone(), 0);
        let free_bytes = || sim.mem_get_info(0).map(|(free, _)| free);
        let a = mem.malloc(4096)?;
        let before = free_bytes()?;
        assert!(matches!(mem.free(DevicePtr(a.0 + 512), 512), Err(Error::Internal { .. })), "inside a segment");
        assert_eq!(free_bytes()?, before, "nothing was freed");
        sim.fail_next_free(0)?;
        assert!(matches!(mem.free(a, 4096), Err(Error::Injected { .. })));
        assert_eq!(free_bytes()?, before, "a refused free keeps the memory");
        mem.free(a, 4096)?;
        assert_eq!(free_bytes()?, before + 4096, "the retry gave it back");
        assert!(matches!(mem.free(a, 4096), Err(Error::Internal { .. })), "a second free is refused above the driver");
        Ok(())
    }
}
