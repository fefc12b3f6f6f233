//! [`Storage`]: the bytes behind tensors — host memory, or a block of a device's caching
//! allocator that goes back to the allocator when the last tensor using it drops.

use crate::device::Device;
use crate::driver::cpu::Memory;
use crate::driver::DevicePtr;
use crate::error::{Error, Result};
use crate::runtime::{rt, Stream};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Host bytes, with the address of their first byte (their [`DevicePtr`] in kernel views).
pub(crate) struct HostBytes {
    data: RwLock<Vec<u8>>,
    addr: u64,
    /// Fixed for the storage's life (the vector never grows).
    len: usize,
}

impl HostBytes {
    pub fn read(&self) -> RwLockReadGuard<'_, Vec<u8>> {
        self.data.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn write(&self) -> RwLockWriteGuard<'_, Vec<u8>> {
        self.data.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// A block of a device's caching allocator.
pub(crate) struct DeviceBlock {
    pub device: usize,
    pub ptr: DevicePtr,
}

impl Drop for DeviceBlock {
    fn drop(&mut self) {
        // Back to the cache of the stream it was allocated on: reused only by work queued there
        // later (stream order), as PyTorch does. Errors cannot be reported from drop.
        if let Ok(alloc) = rt().and_then(|rt| rt.allocator(self.device)) {
            let _ = alloc.free(self.ptr);
        }
    }
}

/// A tensor's memory, shared (`Arc`) by every view of it.
pub(crate) enum Storage {
    Host(HostBytes),
    Device(DeviceBlock),
}

impl Storage {
    /// Host storage holding `bytes`.
    pub fn host(bytes: Vec<u8>) -> Storage {
        let (addr, len) = (bytes.as_ptr() as usize as u64, bytes.len());
        Storage::Host(HostBytes { data: RwLock::new(bytes), addr, len })
    }

    /// `len` zeroed host bytes, or [`Error::HostOutOfMemory`].
    pub fn host_zeroed(len: usize) -> Result<Storage> {
        Ok(Storage::host(zeroed_bytes(len)?))
    }

    /// `bytes` bytes from `device`'s caching allocator, for use on `stream` (uninitialized).
    pub fn device_block(device: usize, bytes: usize, stream: &Stream) -> Result<Storage> {
        let ptr = rt()?.allocator(device)?.malloc(bytes, stream.driver_id())?;
        Ok(Storage::Device(DeviceBlock { device, ptr }))
    }

    /// The address of byte 0 (a device address, or the host address of the bytes).
    pub fn ptr(&self) -> DevicePtr {
        match self {
            Storage::Host(h) => DevicePtr(h.addr),
            Storage::Device(d) => d.ptr,
        }
    }

    pub fn device(&self) -> Device {
        match self {
            Storage::Host(_) => Device::Cpu,
            Storage::Device(d) => Device::cuda(d.device),
        }
    }

    pub fn as_host(&self) -> Option<&HostBytes> {
        match self {
            Storage::Host(h) => Some(h),
            Storage::Device(_) => None,
        }
    }
}

/// `len` zeroed bytes, or [`Error::HostOutOfMemory`] instead of an abort.
pub(crate) fn zeroed_bytes(len: usize) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| Error::HostOutOfMemory { requested: len })?;
    v.resize(len, 0);
    Ok(v)
}

/// Host storages addressed as one memory, for running kernels on the CPU.
pub(crate) struct HostMemory<'a> {
    pub buffers: Vec<&'a HostBytes>,
}

impl HostMemory<'_> {
    fn find(&self, at: DevicePtr, len: usize) -> Result<&HostBytes> {
        self.buffers.iter().copied().find(|b| at.0 >= b.addr && at.0 + len as u64 <= b.addr + b.len as u64).ok_or(
            Error::InvalidPointer {
                device: usize::MAX,
                ptr: at.0,
                reason: format!("{len} bytes here are not inside a host tensor of this op"),
            },
        )
    }
}

impl Memory for HostMemory<'_> {
    fn read(&self, at: DevicePtr, out: &mut [u8]) -> Result<()> {
        let b = self.find(at, out.len())?;
        let start = (at.0 - b.addr) as usize;
        out.copy_from_slice(&b.read()[start..start + out.len()]);
        Ok(())
    }

    fn write_runs(&self, at: DevicePtr, span: &[u8], runs: &[(usize, usize)]) -> Result<()> {
        let b = self.find(at, span.len())?;
        let base = (at.0 - b.addr) as usize;
        let mut data = b.write();
        for &(start, len) in runs {
            data[base + start..base + start + len].copy_from_slice(&span[start..start + len]);
        }
        Ok(())
    }
}
