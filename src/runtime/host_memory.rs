//! Pinned host memory: the process's [`CachingHostAllocator`] over the driver, the blocks that
//! pinned tensors hold ([`PinnedBlock`]), and `torch.cuda`'s host-memory functions.
//!
//! A [`PinnedBlock`] is the only door to pinned bytes, so the rules that make non-blocking copies
//! safe live here, in one place:
//!
//! * every copy queued with [`PinnedBlock::copy_to_device`] / [`PinnedBlock::copy_from_device`]
//!   records an event on its stream right after it (a [`HostUse`]);
//! * a host read ([`PinnedBlock::read`]) first waits for the queued copies that write the block
//!   (device → host); a host write ([`PinnedBlock::write`]) waits for every queued copy. So a
//!   program never sees a half-copied buffer, nor changes bytes a copy has yet to read (beyond
//!   PyTorch, where both are the program's responsibility);
//! * a copy queued on one stream waits (on the device, not the host) for copies on other streams
//!   that it would race with: a device write waits for every earlier copy, a device read for
//!   earlier device writes;
//! * dropping the block hands its copies' events to the allocator, which reuses the block only
//!   once they all completed (PyTorch's `CachingHostAllocator_recordEvent`).
//!
//! A read/write lock serializes host access with the queueing of copies: a copy that writes the
//! block is queued under the write lock, one that reads it under the read lock, and the event is
//! in the block's list before the lock is released, so any later host access sees it.
//!
//! Events come from a per-device pool (timing disabled), as PyTorch's host allocator pools them.

use super::host_alloc::{DriverHostMemory, HostMemory};
use super::work::Operand;
use super::{rt, Runtime, Stream};
use crate::alloc::{CachingHostAllocator, HostMemoryStats, HostUse};
use crate::driver::{DevicePtr, HostPtr};
use crate::error::{Error, Result};
use crate::sync::{Mutex as ProtocolMutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

/// What the block's protocol needs from the events of its copies (the driver's in
/// [`DriverHostMemory`]; a fake that a thread completes in the loom model check).
pub(crate) trait UseEvents {
    /// Blocks until the use's event has completed.
    fn wait(&self, u: &HostUse) -> Result<()>;
    /// Whether the use's event has completed (`false` when it cannot be queried).
    fn done(&self, u: &HostUse) -> bool;
    /// Gives the use's event back (it is never asked about again).
    fn release(&self, u: HostUse);
}

impl UseEvents for DriverHostMemory {
    fn wait(&self, u: &HostUse) -> Result<()> {
        self.driver.event_synchronize(u.event)?;
        // A host access after a device copy is a synchronization point of the copy's device.
        super::errors::check(u.device)
    }
    fn done(&self, u: &HostUse) -> bool {
        self.driver.event_query(u.event).unwrap_or(false)
    }
    fn release(&self, u: HostUse) {
        self.give_back(u.device, u.event);
    }
}

/// The protocol of a pinned block (see the [module docs](self)): host access and the queueing of
/// copies under one read/write lock, and the copies' events.
#[derive(Default)]
pub(crate) struct BlockUses {
    /// Host access (shared: reads and queueing device reads; exclusive: writes and queueing
    /// device writes).
    access: RwLock<()>,
    /// Copies queued on the block, each with the event recorded after it.
    uses: ProtocolMutex<Vec<HostUse>>,
}

/// The access lock held while a copy is queued: shared for a device read, exclusive for a write.
enum Access<'a> {
    Shared(#[allow(dead_code)] RwLockReadGuard<'a, ()>),
    Exclusive(#[allow(dead_code)] RwLockWriteGuard<'a, ()>),
}

impl BlockUses {
    fn uses(&self) -> crate::sync::MutexGuard<'_, Vec<HostUse>> {
        self.uses.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Shared host access, once the queued copies that write the block have completed.
    pub fn read(&self, ev: &impl UseEvents) -> Result<RwLockReadGuard<'_, ()>> {
        let guard = self.access.read().unwrap_or_else(|e| e.into_inner());
        self.wait_for(ev, |u| u.device_writes)?;
        Ok(guard)
    }

    /// Exclusive host access, once every queued copy has completed.
    pub fn write(&self, ev: &impl UseEvents) -> Result<RwLockWriteGuard<'_, ()>> {
        let guard = self.access.write().unwrap_or_else(|e| e.into_inner());
        self.wait_for(ev, |_| true)?;
        Ok(guard)
    }

    /// Waits for the queued copies that `must_wait` selects, then forgets them.
    fn wait_for(&self, ev: &impl UseEvents, must_wait: impl Fn(&HostUse) -> bool) -> Result<()> {
        let targets: Vec<HostUse> = self.uses().iter().filter(|u| must_wait(u)).copied().collect();
        if targets.is_empty() {
            return Ok(());
        }
        for u in &targets {
            ev.wait(u)?;
        }
        let mut done = Vec::new();
        self.uses().retain(|u| {
            let finished = targets.contains(u);
            if finished {
                done.push(*u);
            }
            !finished
        });
        done.into_iter().for_each(|u| ev.release(u));
        Ok(())
    }

    /// Queues a copy: under the access lock (exclusive when the copy writes the block), with the
    /// uses still running, `queue` makes the copy wait on the device for those it races with,
    /// queues it and returns its use (`None` when it waited for the copy instead); the use is in
    /// the list before the lock is released.
    pub fn queue(
        &self,
        ev: &impl UseEvents,
        device_writes: bool,
        queue: impl FnOnce(&[HostUse]) -> Result<Option<HostUse>>,
    ) -> Result<()> {
        let _access = if device_writes {
            Access::Exclusive(self.access.write().unwrap_or_else(|e| e.into_inner()))
        } else {
            Access::Shared(self.access.read().unwrap_or_else(|e| e.into_inner()))
        };
        let mut uses = self.uses();
        uses.retain(|u| {
            let done = ev.done(u);
            if done {
                ev.release(*u);
            }
            !done
        });
        if let Some(u) = queue(&uses)? {
            uses.push(u);
        }
        Ok(())
    }

    /// The uses still recorded, for the allocator when the block is freed.
    pub fn take(&mut self) -> Vec<HostUse> {
        std::mem::take(self.uses.get_mut().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Runtime {
    /// The pinned host allocator, made on first use.
    pub(crate) fn host_memory(&self) -> &HostMemory {
        self.host.get_or_init(|| {
            let raw = Arc::new(DriverHostMemory::new(self.driver.clone()));
            HostMemory { allocator: CachingHostAllocator::new(raw.clone()), raw }
        })
    }
}

/// A block of pinned host memory from the caching host allocator, with the copies that use it
/// (see the [module docs](self)). Given back to the allocator on drop.
pub(crate) struct PinnedBlock {
    ptr: HostPtr,
    len: usize,
    /// Host access and the copies queued on the block.
    uses: BlockUses,
}

impl std::fmt::Debug for PinnedBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PinnedBlock({:#x}, {} bytes)", self.ptr.0, self.len)
    }
}

/// Shared access to a block's bytes; no copy that writes them is in flight.
pub(crate) struct PinnedRead<'a> {
    _guard: RwLockReadGuard<'a, ()>,
    bytes: &'a [u8],
}

impl Deref for PinnedRead<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.bytes
    }
}

/// Exclusive access to a block's bytes; no copy that uses them is in flight.
pub(crate) struct PinnedWrite<'a> {
    _guard: RwLockWriteGuard<'a, ()>,
    bytes: &'a mut [u8],
}

impl Deref for PinnedWrite<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.bytes
    }
}

impl DerefMut for PinnedWrite<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.bytes
    }
}

impl PinnedBlock {
    /// `len` bytes of pinned memory (a cached block's old contents, or zeros for a new one).
    pub fn new(len: usize) -> Result<PinnedBlock> {
        let ptr = rt()?.host_memory().allocator.malloc(len)?;
        Ok(PinnedBlock { ptr, len, uses: BlockUses::default() })
    }

    /// The host address of byte 0.
    pub fn addr(&self) -> u64 {
        self.ptr.0
    }

    fn raw() -> Result<&'static DriverHostMemory> {
        Ok(&rt()?.host_memory().raw)
    }

    /// The bytes, for reading on the host: waits for queued copies that write them.
    pub fn read(&self) -> Result<PinnedRead<'_>> {
        let guard = self.uses.read(Self::raw()?)?;
        let bytes: &[u8] = match self.ptr.as_non_null() {
            Some(ptr) if self.len > 0 => {
                // SAFETY:
                // - the block owns `len` initialized bytes at `ptr` (the driver zeroes new blocks)
                //   until it drops, which the borrow of `self` outlives;
                // - the read lock keeps host writers out and keeps copies that write the block from
                //   being queued; the ones queued before have completed (waited for above);
                // - copies that only read the block may run meanwhile, which shared reading allows.
                unsafe { std::slice::from_raw_parts(ptr.as_ptr().cast_const(), self.len) }
            }
            _ => &[],
        };
        Ok(PinnedRead { _guard: guard, bytes })
    }

    /// The bytes, for writing on the host: waits for every queued copy.
    pub fn write(&self) -> Result<PinnedWrite<'_>> {
        let guard = self.uses.write(Self::raw()?)?;
        let bytes: &mut [u8] = match self.ptr.as_non_null() {
            Some(ptr) if self.len > 0 => {
                // SAFETY:
                // - the block owns `len` initialized bytes at `ptr` until it drops, which the borrow
                //   of `self` outlives;
                // - the write lock excludes every other host access and the queueing of copies;
                // - every copy queued before has completed (waited for above), so this is the only
                //   reference to the bytes.
                unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), self.len) }
            }
            _ => &mut [],
        };
        Ok(PinnedWrite { _guard: guard, bytes })
    }

    fn check_span(&self, op: &'static str, offset: usize, bytes: usize) -> Result<()> {
        if offset.checked_add(bytes).is_none_or(|end| end > self.len) {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("{bytes} bytes at offset {offset} do not fit the {}-byte pinned block", self.len),
            });
        }
        Ok(())
    }

    /// Queues a copy of `bytes` bytes at `offset` of the block to device memory at `dst` on
    /// `stream`, and returns at once. `dst` must be live device memory of the stream's device,
    /// kept alive in the stream's order (a caching-allocator block used on that stream).
    /// `operands`: the owners of both sides (the pinned tensor and the device tensor).
    pub fn copy_to_device<T: Operand + ?Sized>(
        &self,
        (offset, bytes): (usize, usize),
        dst: DevicePtr,
        stream: &Stream,
        operands: &[&T],
    ) -> Result<()> {
        self.check_span("copy_to_device", offset, bytes)?;
        if bytes == 0 {
            return Ok(());
        }
        let raw = Self::raw()?;
        self.uses.queue(raw, false, |uses| {
            for u in uses.iter().filter(|u| u.device_writes && u.stream != stream.driver_id()) {
                stream.wait_raw(u.event)?;
            }
            // SAFETY:
            // - the span lies inside this live pinned block (checked above);
            // - the block stays allocated until the copy's event (pushed to `uses` below, before the
            //   lock is released) has completed: dropping the block hands the event to the
            //   allocator, which reuses or frees the block only after it;
            // - host writes wait for the event (`write`), and a copy that writes the block cannot
            //   be queued meanwhile without waiting for it on the device.
            unsafe { stream.memcpy_htod_async(dst, self.ptr.offset(offset), bytes, operands) }?;
            Self::track(raw, stream, false)
        })
    }

    /// Queues a copy of `bytes` bytes of device memory at `src` into the block at `offset` on
    /// `stream`, and returns at once. `src` must be live device memory of the stream's device,
    /// kept alive in the stream's order.
    /// `operands`: the owners of both sides (the pinned tensor and the device tensor).
    pub fn copy_from_device<T: Operand + ?Sized>(
        &self,
        (offset, bytes): (usize, usize),
        src: DevicePtr,
        stream: &Stream,
        operands: &[&T],
    ) -> Result<()> {
        self.check_span("copy_from_device", offset, bytes)?;
        if bytes == 0 {
            return Ok(());
        }
        let raw = Self::raw()?;
        self.uses.queue(raw, true, |uses| {
            for u in uses.iter().filter(|u| u.stream != stream.driver_id()) {
                stream.wait_raw(u.event)?;
            }
            // SAFETY:
            // - the span lies inside this live pinned block (checked above);
            // - the block stays allocated until the copy's event (pushed to `uses` below, before the
            //   write lock is released) has completed: the allocator reuses or frees it only after;
            // - every host read or write waits for that event first, and the copies already queued
            //   on other streams are waited for on the device, so nothing else touches these bytes
            //   while the copy runs.
            unsafe { stream.memcpy_dtoh_async(self.ptr.offset(offset), src, bytes, operands) }?;
            Self::track(raw, stream, true)
        })
    }

    /// Queues device work that reads the block (or writes it, `device_writes`) on `stream` —
    /// a user kernel given the pinned tensor as an argument — through `queue`, under the same
    /// rules as a copy: it waits on the device for the uses it races with, host access waits for
    /// it, and the block is reused only after it ran.
    pub fn use_on_device(
        &self,
        stream: &Stream,
        device_writes: bool,
        queue: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let raw = Self::raw()?;
        self.uses.queue(raw, device_writes, |uses| {
            let races = |u: &&HostUse| (device_writes || u.device_writes) && u.stream != stream.driver_id();
            for u in uses.iter().filter(races) {
                stream.wait_raw(u.event)?;
            }
            queue()?;
            Self::track(raw, stream, device_writes)
        })
    }

    /// Records an event after the copy just queued on `stream`: its use. If no event can be
    /// recorded, waits for the stream instead (`None`), so the block is never left unprotected.
    fn track(raw: &DriverHostMemory, stream: &Stream, device_writes: bool) -> Result<Option<HostUse>> {
        let device = stream.device();
        let recorded = raw.event(device).and_then(|event| match stream.record_raw(event) {
            Ok(()) => Ok(event),
            Err(e) => {
                raw.driver.event_destroy(event);
                Err(e)
            }
        });
        match recorded {
            Ok(event) => Ok(Some(HostUse { device, stream: stream.driver_id(), event, device_writes })),
            Err(_) => stream.synchronize().map(|()| None),
        }
    }
}

impl Drop for PinnedBlock {
    fn drop(&mut self) {
        let uses = self.uses.take();
        // The allocator keeps the block out of reuse until the copies' events completed. A failure
        // is kept for the next synchronize of the device of its first copy (device 0 if none).
        if let Ok(rt) = rt() {
            let device = uses.first().map_or(0, |u| u.device);
            if let Err(e) = rt.host_memory().allocator.free(self.ptr, uses) {
                crate::runtime::record_device_error(device, e);
            }
        }
    }
}

/// Statistics of the pinned host allocator, with PyTorch's keys (`allocations.current`,
/// `allocated_bytes.peak`, `num_host_alloc`, …) (`torch.cuda.host_memory_stats()`).
pub fn host_memory_stats() -> Result<HostMemoryStats> {
    Ok(rt()?.host_memory().allocator.stats())
}

/// Gives every cached pinned block that no copy uses any more back to the driver (PyTorch's
/// `torch._C._host_emptyCache()`). Blocks in use, and freed blocks whose copies are still in
/// flight, stay.
pub fn host_empty_cache() -> Result<()> {
    rt()?.host_memory().allocator.empty_cache()
}

/// Resets the `peak` of every host allocator statistic to its current value
/// (`torch.cuda.reset_peak_host_memory_stats()`).
pub fn reset_peak_host_memory_stats() -> Result<()> {
    rt()?.host_memory().allocator.reset_peak_stats();
    Ok(())
}

/// Resets the `allocated` / `freed` totals and the counters of the host allocator
/// (`torch.cuda.reset_accumulated_host_memory_stats()`).
pub fn reset_accumulated_host_memory_stats() -> Result<()> {
    rt()?.host_memory().allocator.reset_accumulated_stats();
    Ok(())
}
