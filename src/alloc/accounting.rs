//! [`AccountingMemory`]: a [`RawMemory`] that only counts — addresses are handed out virtually and
//! no host memory is touched — with events completed on demand and failures on demand. For trace
//! replay, tests and benchmarks of the allocator without a device.

use super::RawMemory;
use crate::driver::{DevicePtr, EventId, StreamId};
use crate::error::{Error, Result};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

/// Where device `d`'s addresses start (`BASE + d · 2^40`), 512-aligned like `cudaMalloc`'s.
const BASE: u64 = 0x7000_0000_0000;
const ALIGN: u64 = 512;

/// How often each operation was called (see [`AccountingMemory::counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryCounts {
    /// Successful `malloc` calls.
    pub mallocs: u64,
    /// `free` calls.
    pub frees: u64,
    /// Successful page mappings.
    pub maps: u64,
    /// Unmap calls (each of one page or a run of adjacent pages).
    pub unmaps: u64,
    /// `synchronize` calls.
    pub syncs: u64,
    /// Events recorded.
    pub events: u64,
}

#[derive(Debug)]
struct Inner {
    capacity: usize,
    used: usize,
    next_addr: u64,
    segments: HashMap<u64, usize>,
    reservations: BTreeMap<u64, usize>,
    mapped: BTreeMap<u64, usize>,
    next_event: u64,
    /// Recorded, not released events: whether each completed.
    events: HashMap<u64, bool>,
    events_complete_at_once: bool,
    inject: Vec<Error>,
    counts: MemoryCounts,
}

/// A device memory that only keeps accounts: a capacity, segments and mappings at virtual
/// addresses, and events that complete when the test says so.
///
/// Every call is checked like a strict driver would (freeing what is not a segment, mapping twice,
/// unmapping what was not mapped, releasing a reservation that still has mappings are errors),
/// which makes it an oracle for the allocator's own bookkeeping.
#[derive(Debug)]
pub struct AccountingMemory {
    device: usize,
    granularity: Option<usize>,
    inner: Mutex<Inner>,
}

impl AccountingMemory {
    /// A device of `capacity` bytes (device 0, virtual memory with a 2 MiB granularity, events
    /// that complete only at [`complete_events`](Self::complete_events) or a synchronize).
    pub fn new(capacity: usize) -> AccountingMemory {
        AccountingMemory::with_options(0, capacity, Some(2 << 20))
    }

    /// A device with the given index, capacity and virtual-memory granularity (`None`: no
    /// expandable segments).
    pub fn with_options(device: usize, capacity: usize, granularity: Option<usize>) -> AccountingMemory {
        AccountingMemory {
            device,
            granularity,
            inner: Mutex::new(Inner {
                capacity,
                used: 0,
                next_addr: BASE + ((device as u64 & 0xff) << 40),
                segments: HashMap::new(),
                reservations: BTreeMap::new(),
                mapped: BTreeMap::new(),
                next_event: 1,
                events: HashMap::new(),
                events_complete_at_once: false,
                inject: Vec::new(),
                counts: MemoryCounts::default(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes in use (segments and mapped pages).
    pub fn used(&self) -> usize {
        self.lock().used
    }

    /// Changes the capacity (as if another process took or gave back memory).
    pub fn set_capacity(&self, capacity: usize) {
        self.lock().capacity = capacity;
    }

    /// Live segments from `malloc`.
    pub fn segments(&self) -> usize {
        self.lock().segments.len()
    }

    /// Live reservations from `vmm_reserve`.
    pub fn reservations(&self) -> usize {
        self.lock().reservations.len()
    }

    /// Call counts.
    pub fn counts(&self) -> MemoryCounts {
        self.lock().counts
    }

    /// Whether events complete as soon as they are recorded (default: no).
    pub fn set_events_complete_at_once(&self, on: bool) {
        self.lock().events_complete_at_once = on;
    }

    /// Completes every event recorded so far.
    pub fn complete_events(&self) {
        self.lock().events.values_mut().for_each(|done| *done = true);
    }

    /// Events recorded and not yet completed.
    pub fn pending_events(&self) -> usize {
        self.lock().events.values().filter(|&&done| !done).count()
    }

    /// The next `malloc` or `vmm_map` fails with `error` (queue several to fail several).
    pub fn inject_failure(&self, error: Error) {
        self.lock().inject.insert(0, error);
    }

    fn oom(&self, s: &Inner, requested: usize) -> Error {
        Error::OutOfMemory {
            device: self.device,
            requested,
            total: s.capacity,
            free: s.capacity.saturating_sub(s.used),
            allocated: 0,
            reserved_unallocated: 0,
        }
    }

    fn bad(&self, op: &'static str, reason: String) -> Error {
        Error::InvalidArgument { op, reason }
    }

    fn granular(&self, op: &'static str, at: u64, bytes: usize) -> Result<()> {
        let g = self.granularity.ok_or_else(|| self.bad(op, "no virtual memory".into()))? as u64;
        if bytes == 0 || !(bytes as u64).is_multiple_of(g) || !at.is_multiple_of(g) {
            return Err(self.bad(op, format!("{at:#x} and {bytes} must be non-zero multiples of {g}")));
        }
        Ok(())
    }

    fn take_addresses(s: &mut Inner, bytes: usize, align: u64) -> u64 {
        let at = s.next_addr.div_ceil(align) * align;
        s.next_addr = at + (bytes as u64).div_ceil(ALIGN) * ALIGN;
        at
    }
}

impl RawMemory for AccountingMemory {
    fn malloc(&self, bytes: usize) -> Result<DevicePtr> {
        let mut s = self.lock();
        if let Some(e) = s.inject.pop() {
            return Err(e);
        }
        if bytes == 0 || s.used.saturating_add(bytes) > s.capacity {
            return Err(self.oom(&s, bytes));
        }
        let at = Self::take_addresses(&mut s, bytes, ALIGN);
        s.used += bytes;
        s.segments.insert(at, bytes);
        s.counts.mallocs += 1;
        Ok(DevicePtr(at))
    }

    fn free(&self, ptr: DevicePtr, bytes: usize) -> Result<()> {
        let mut s = self.lock();
        match s.segments.get(&ptr.0) {
            Some(&n) if n == bytes => {
                s.segments.remove(&ptr.0);
                s.used -= bytes;
                s.counts.frees += 1;
                Ok(())
            }
            _ => Err(Error::InvalidPointer {
                device: self.device,
                ptr: ptr.0,
                reason: format!("not a live {bytes}-byte segment"),
            }),
        }
    }

    fn mem_info(&self) -> Result<(usize, usize)> {
        let s = self.lock();
        Ok((s.capacity.saturating_sub(s.used), s.capacity))
    }

    fn record_event(&self, _stream: StreamId) -> Result<EventId> {
        let mut s = self.lock();
        let id = s.next_event;
        s.next_event += 1;
        let done = s.events_complete_at_once;
        s.events.insert(id, done);
        s.counts.events += 1;
        Ok(EventId(id))
    }

    fn event_done(&self, event: EventId) -> Result<bool> {
        let s = self.lock();
        s.events.get(&event.0).copied().ok_or_else(|| self.bad("event_done", format!("unknown event {}", event.0)))
    }

    fn event_release(&self, event: EventId) {
        self.lock().events.remove(&event.0);
    }

    fn synchronize(&self) -> Result<()> {
        let mut s = self.lock();
        s.events.values_mut().for_each(|done| *done = true);
        s.counts.syncs += 1;
        Ok(())
    }

    fn vmm_granularity(&self) -> Option<usize> {
        self.granularity
    }

    fn vmm_reserve(&self, bytes: usize) -> Result<DevicePtr> {
        self.granular("vmm_reserve", 0, bytes)?;
        let g = self.granularity.unwrap_or(1) as u64;
        let mut s = self.lock();
        let at = Self::take_addresses(&mut s, bytes, g);
        s.reservations.insert(at, bytes);
        Ok(DevicePtr(at))
    }

    fn vmm_map(&self, at: DevicePtr, bytes: usize) -> Result<()> {
        self.granular("vmm_map", at.0, bytes)?;
        let mut s = self.lock();
        if let Some(e) = s.inject.pop() {
            return Err(e);
        }
        let end = at.0 + bytes as u64;
        let inside = s.reservations.range(..=at.0).next_back().is_some_and(|(&b, &l)| end <= b + l as u64);
        let overlaps = s.mapped.range(..end).next_back().is_some_and(|(&a, &l)| a + l as u64 > at.0);
        if !inside || overlaps {
            return Err(self.bad("vmm_map", format!("[{:#x}, {end:#x}) is outside a reservation or mapped", at.0)));
        }
        if s.used.saturating_add(bytes) > s.capacity {
            return Err(self.oom(&s, bytes));
        }
        s.mapped.insert(at.0, bytes);
        s.used += bytes;
        s.counts.maps += 1;
        Ok(())
    }

    fn vmm_unmap(&self, at: DevicePtr, bytes: usize) -> Result<()> {
        let mut s = self.lock();
        // Exactly a union of whole mappings, contiguous from `at`.
        let end = at.0 + bytes as u64;
        let pieces: Vec<(u64, usize)> = s.mapped.range(at.0..end).map(|(&a, &l)| (a, l)).collect();
        let mut cursor = at.0;
        for &(a, l) in &pieces {
            if a != cursor {
                break;
            }
            cursor = a + l as u64;
        }
        if bytes == 0 || cursor != end {
            return Err(self.bad("vmm_unmap", format!("{:#x} (+{bytes}) is not a union of whole mappings", at.0)));
        }
        for (a, _) in pieces {
            s.mapped.remove(&a);
        }
        s.used -= bytes;
        s.counts.unmaps += 1;
        Ok(())
    }

    fn vmm_release(&self, base: DevicePtr, bytes: usize) -> Result<()> {
        let mut s = self.lock();
        let end = base.0 + bytes as u64;
        let has_mappings = s.mapped.range(base.0..end).next().is_some();
        if s.reservations.get(&base.0) != Some(&bytes) || has_mappings {
            return Err(
                self.bad("vmm_release", format!("{:#x} (+{bytes}) is not a whole unmapped reservation", base.0))
            );
        }
        s.reservations.remove(&base.0);
        Ok(())
    }
}
