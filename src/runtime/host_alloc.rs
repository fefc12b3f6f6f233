//! The pinned host allocator the registry holds ([`HostMemory`]): the process's
//! [`CachingHostAllocator`] over the driver ([`DriverHostMemory`], with a pool of copy events per
//! device). The blocks pinned tensors hold and `torch.cuda`'s host-memory functions are in
//! `host_memory.rs`.

use crate::alloc::{CachingHostAllocator, HostUse, RawHostMemory};
use crate::driver::{Driver, EventId, HostPtr};
use crate::error::Result;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The driver as the host allocator's [`RawHostMemory`], with a pool of copy events per device.
pub(crate) struct DriverHostMemory {
    pub(super) driver: Arc<dyn Driver>,
    events: Mutex<HashMap<usize, Vec<EventId>>>,
}

impl DriverHostMemory {
    pub fn new(driver: Arc<dyn Driver>) -> DriverHostMemory {
        DriverHostMemory { driver, events: Mutex::new(HashMap::new()) }
    }

    /// An event of `device` from the pool, or a new one.
    pub(super) fn event(&self, device: usize) -> Result<EventId> {
        if let Some(ev) = lock(&self.events).get_mut(&device).and_then(Vec::pop) {
            return Ok(ev);
        }
        self.driver.event_create(device, false, false)
    }

    /// Puts an event back in its device's pool (its recordings are complete or abandoned).
    pub(super) fn give_back(&self, device: usize, event: EventId) {
        lock(&self.events).entry(device).or_default().push(event);
    }
}

impl RawHostMemory for DriverHostMemory {
    fn alloc(&self, bytes: usize) -> Result<HostPtr> {
        self.driver.host_alloc(bytes)
    }
    fn free(&self, ptr: HostPtr) -> Result<()> {
        self.driver.host_free(ptr)
    }
    fn use_done(&self, u: &HostUse) -> Result<bool> {
        self.driver.event_query(u.event)
    }
    fn use_release(&self, u: HostUse) {
        self.give_back(u.device, u.event);
    }
}

/// The process's pinned memory: the driver door and the caching allocator over it.
pub(crate) struct HostMemory {
    pub(super) raw: Arc<DriverHostMemory>,
    pub allocator: CachingHostAllocator,
}
