//! Out-of-memory observers (`torch._C._cuda_attach_out_of_memory_observer`): functions called
//! when an allocation fails for lack of memory, before the error is returned, with the
//! allocator's lock released, so that they may take a snapshot, read statistics or allocate.

use crate::error::Error;
use std::cell::Cell;
use std::sync::{Arc, RwLock};

/// What an out-of-memory observer is told: PyTorch's `(device, alloc, device_total,
/// device_free)` arguments, and the allocator's own figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfMemoryInfo {
    /// The device.
    pub device: usize,
    /// Bytes the allocator tried to get from the driver (PyTorch's `alloc_size`: the request
    /// rounded to its block and segment size).
    pub alloc_size: usize,
    /// The device's total memory, or the cap set by `set_per_process_memory_fraction` when one
    /// is set (PyTorch's third argument).
    pub device_total: usize,
    /// The device's free memory as the driver reported it.
    pub device_free: usize,
    /// Bytes of allocated blocks (`memory_allocated`).
    pub allocated: usize,
    /// Bytes the allocator holds from the driver (`memory_reserved`).
    pub reserved: usize,
}

/// An out-of-memory observer.
pub type OutOfMemoryObserver = Arc<dyn Fn(&OutOfMemoryInfo) + Send + Sync>;

/// The observers of one allocator, called in the order they were attached.
#[derive(Default)]
pub(crate) struct Observers {
    list: RwLock<Vec<OutOfMemoryObserver>>,
}

thread_local! {
    /// Set while this thread runs observers: an allocation an observer makes that fails does
    /// not call the observers again (no unbounded recursion).
    static NOTIFYING: Cell<bool> = const { Cell::new(false) };
}

/// Clears [`NOTIFYING`] when the observers return, also when one panics.
struct Notifying;

impl Drop for Notifying {
    fn drop(&mut self) {
        NOTIFYING.with(|n| n.set(false));
    }
}

impl Observers {
    pub fn attach(&self, f: OutOfMemoryObserver) {
        self.list.write().unwrap_or_else(|e| e.into_inner()).push(f);
    }

    /// Calls every observer with `info` (made only if one is attached), unless this thread is
    /// running observers already. The caller holds no allocator lock.
    pub fn notify(&self, info: impl FnOnce() -> OutOfMemoryInfo) {
        // A copy of the list: an observer may attach another without a deadlock.
        let list = self.list.read().unwrap_or_else(|e| e.into_inner()).clone();
        if list.is_empty() || NOTIFYING.with(|n| n.replace(true)) {
            return;
        }
        let _reset = Notifying;
        let info = info();
        for f in &list {
            f(&info);
        }
    }
}

impl OutOfMemoryInfo {
    /// The figures of an [`Error::OutOfMemory`] (`None` for other errors), with `cap` (the
    /// memory fraction's, if set) as `device_total`.
    pub(crate) fn of(e: &Error, cap: Option<usize>) -> Option<OutOfMemoryInfo> {
        match *e {
            Error::OutOfMemory { device, requested, total, free, allocated, reserved_unallocated } => {
                Some(OutOfMemoryInfo {
                    device,
                    alloc_size: requested,
                    device_total: cap.unwrap_or(total),
                    device_free: free,
                    allocated,
                    reserved: allocated + reserved_unallocated,
                })
            }
            _ => None,
        }
    }
}
