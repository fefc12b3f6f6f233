//! Plain handles of memory that device work reads and writes: [`DevicePtr`] and [`HostPtr`].

use std::ptr::NonNull;

/// An address in a device's memory (or a host address, for host allocations).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    /// The address `bytes` further on.
    pub fn offset(self, bytes: usize) -> DevicePtr {
        DevicePtr(self.0 + bytes as u64)
    }
}

/// The address of page-locked (pinned) host memory, as a driver's `host_alloc` gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPtr(pub u64);

impl HostPtr {
    /// The address `bytes` further on.
    pub fn offset(self, bytes: usize) -> HostPtr {
        HostPtr(self.0 + bytes as u64)
    }

    /// The handle of the host memory at `ptr` (its provenance exposed, so that
    /// [`HostPtr::as_non_null`] gives back a pointer that may access it).
    pub fn from_non_null(ptr: NonNull<u8>) -> HostPtr {
        HostPtr(ptr.as_ptr().expose_provenance() as u64)
    }

    /// The pointer this handle stands for, `None` for address 0. Whether it may be dereferenced,
    /// and for how many bytes, is the business of whoever owns the memory.
    pub fn as_non_null(self) -> Option<NonNull<u8>> {
        NonNull::new(std::ptr::with_exposed_provenance_mut(self.0 as usize))
    }
}
