//! Virtual memory management for expandable segments: reserved address ranges
//! (`cuMemAddressReserve`) with physical memory mapped into them piece by piece (`cuMemCreate`,
//! `cuMemMap`, `cuMemSetAccess`), as PyTorch's caching allocator does with
//! `expandable_segments:True`.
//!
//! Unlike `cuMemAlloc` memory, mapped memory is reachable only from the devices that
//! `cuMemSetAccess` names: peer access enabled through `cuCtxEnablePeerAccess` does not cover it.
//! So the driver remembers which device pairs have peer access (in either direction) and grants
//! each mapped range to the peers of its device, both when the range is mapped and when a pair is
//! enabled later.
//!
//! One mutex guards the tables and is held across the driver calls that change mappings or access,
//! so a range mapped while peer access is being enabled cannot miss its grant. Waits
//! (`cuCtxSynchronize` before unmapping) happen outside it.

use super::driver::{CudaDriver, Device};
use super::status::{driver_error, lock, out_of_memory, DRIVER};
use super::vmm_table::Mapping;
use crate::driver::{DevicePtr, Driver};
use crate::error::{Error, Result};
use cudarc::driver::result::{self as cu, DriverError};
use cudarc::driver::sys::{self, CUresult};
use std::sync::atomic::Ordering;

/// Where a pinned allocation of `device` lives, for `cuMemCreate` and `cuMemSetAccess`.
fn location(device: sys::CUdevice) -> sys::CUmemLocation {
    sys::CUmemLocation { type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: device }
}

/// Properties of a plain pinned device allocation on `device`, not exportable.
fn pinned(device: sys::CUdevice) -> sys::CUmemAllocationProp {
    sys::CUmemAllocationProp {
        type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
        location: location(device),
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
            compressionType: 0,
            gpuDirectRDMACapable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    }
}

/// Asks the driver for `device`'s granularity: `None` where VMM is unsupported or the query fails.
fn query_granularity(driver: &CudaDriver, device: usize) -> Option<usize> {
    let dev = driver.enter(device).ok()?;
    let attribute = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED;
    // SAFETY: `dev.cu` was returned by `cuDeviceGet`; the attribute is a valid one.
    let supported = unsafe { cu::device::get_attribute(dev.cu, attribute) }.ok()?;
    if supported == 0 {
        return None;
    }
    let prop = pinned(dev.cu);
    let mut granularity = 0usize;
    let option = sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED;
    // SAFETY:
    // - `granularity` is a valid out-pointer and `prop` a fully initialized allocation property for a device
    //   that exists;
    // - both outlive the call.
    unsafe { sys::cuMemGetAllocationGranularity(&mut granularity, &prop, option) }.result().ok()?;
    (granularity > 0).then_some(granularity)
}

/// [`Driver::vmm_granularity`].
pub(super) fn granularity(driver: &CudaDriver, device: usize) -> Option<usize> {
    *driver.vmm.granularity.get(device)?.get_or_init(|| query_granularity(driver, device))
}

/// The device and its granularity, or why VMM cannot be used on it.
fn vmm_device<'d>(driver: &'d CudaDriver, device: usize, op: &'static str) -> Result<(&'d Device, usize)> {
    let dev = driver.device(device)?;
    let granularity = granularity(driver, device).ok_or_else(|| Error::Unsupported {
        op,
        driver: DRIVER,
        reason: format!(
            "cuda:{device} does not support virtual memory management \
             (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0); use expandable_segments:False"
        ),
    })?;
    Ok((dev, granularity))
}

/// The end of `[at, at + bytes)`, after checking that both are non-zero multiples of the granularity.
fn granular_end(op: &'static str, granularity: usize, at: u64, bytes: usize) -> Result<u64> {
    let g = granularity as u64;
    let end = at.checked_add(bytes as u64);
    match end {
        Some(end) if bytes > 0 && (bytes as u64).is_multiple_of(g) && at.is_multiple_of(g) => Ok(end),
        _ => Err(Error::InvalidArgument {
            op,
            reason: format!("address {at:#x} and size {bytes} must be non-zero multiples of {granularity} bytes"),
        }),
    }
}

/// Read/write access descriptors for `devices`.
fn access(driver: &CudaDriver, devices: &[usize]) -> Vec<sys::CUmemAccessDesc> {
    devices
        .iter()
        .filter_map(|&d| driver.devices.get(d))
        .map(|dev| sys::CUmemAccessDesc {
            location: location(dev.cu),
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        })
        .collect()
}

/// `cuMemSetAccess` over one whole mapped range.
fn set_access(at: u64, bytes: usize, descs: &[sys::CUmemAccessDesc]) -> std::result::Result<(), DriverError> {
    // SAFETY:
    // `[at, at + bytes)` is one whole range mapped by `cuMemMap` (the tables say so, and their lock is held),
    // and `descs` points to `descs.len()` initialized descriptors.
    unsafe { sys::cuMemSetAccess(at, bytes, descs.as_ptr(), descs.len()) }.result()
}

/// Unmaps one whole mapped range and frees its memory (best effort for the release).
fn unmap_one(at: u64, mapping: Mapping) -> std::result::Result<(), DriverError> {
    // SAFETY:
    // `[at, at + bytes)` is exactly one range mapped by `cuMemMap`, removed from the tables by the caller, so
    // it is unmapped once.
    unsafe { sys::cuMemUnmap(at, mapping.bytes) }.result()?;
    // SAFETY: the handle came from `cuMemCreate` and its only mapping is gone; released once.
    unsafe { sys::cuMemRelease(mapping.handle) }.result()
}

/// [`Driver::vmm_reserve`].
pub(super) fn reserve(driver: &CudaDriver, device: usize, bytes: usize) -> Result<DevicePtr> {
    let (_, granularity) = vmm_device(driver, device, "vmm_reserve")?;
    granular_end("vmm_reserve", granularity, 0, bytes)?;
    driver.enter(device)?;
    let mut base: sys::CUdeviceptr = 0;
    // SAFETY:
    // - `base` is a valid out-pointer;
    // - size and alignment are multiples of the granularity;
    // - no fixed address (0) and no flags are asked for.
    unsafe { sys::cuMemAddressReserve(&mut base, bytes, granularity, 0, 0) }
        .result()
        .map_err(|e| driver_error("cuMemAddressReserve", e))?;
    lock(&driver.vmm.tables).reserved.insert((device, base), bytes);
    Ok(DevicePtr(base))
}

/// [`Driver::vmm_map`]: create, map, grant access; on failure the steps done are undone.
pub(super) fn map(driver: &CudaDriver, device: usize, at: DevicePtr, bytes: usize) -> Result<()> {
    let (dev, granularity) = vmm_device(driver, device, "vmm_map")?;
    if dev.fail_next_malloc.swap(false, Ordering::SeqCst) {
        return Err(Error::Injected { device, op: "vmm_map" });
    }
    let end = granular_end("vmm_map", granularity, at.0, bytes)?;
    let mut tables = lock(&driver.vmm.tables);
    let inside = tables
        .reserved
        .range(..=(device, at.0))
        .next_back()
        .is_some_and(|(&(d, base), &size)| d == device && end <= base + size as u64);
    if !inside {
        let reason = format!("{bytes} bytes here are not inside one reserved range");
        return Err(Error::InvalidPointer { device, ptr: at.0, reason });
    }
    let overlaps = tables
        .mapped
        .range(..(device, end))
        .next_back()
        .is_some_and(|(&(d, a), m)| d == device && a + m.bytes as u64 > at.0);
    if overlaps {
        let reason = format!("[{:#x}, {end:#x}) is already partly mapped", at.0);
        return Err(Error::InvalidArgument { op: "vmm_map", reason });
    }
    driver.enter(device)?;
    let oom_or = |op: &'static str, e: DriverError| match e.0 {
        CUresult::CUDA_ERROR_OUT_OF_MEMORY => out_of_memory(device, bytes),
        _ => driver_error(op, e),
    };
    let prop = pinned(dev.cu);
    let mut handle: sys::CUmemGenericAllocationHandle = 0;
    // SAFETY:
    // - `handle` is a valid out-pointer, `prop` a fully initialized pinned-allocation property of this
    //   device, `bytes` a multiple of its granularity;
    // - flags must be 0.
    unsafe { sys::cuMemCreate(&mut handle, bytes, &prop, 0) }.result().map_err(|e| oom_or("cuMemCreate", e))?;
    // SAFETY:
    // - `[at, end)` lies inside a range reserved by `cuMemAddressReserve` and overlaps no mapping (checked
    //   above under the lock);
    // - `handle` holds exactly `bytes`;
    // - offset and flags 0.
    if let Err(e) = unsafe { sys::cuMemMap(at.0, bytes, 0, handle, 0) }.result() {
        // SAFETY: created above, never mapped or handed out; released once.
        let _ = unsafe { sys::cuMemRelease(handle) };
        return Err(oom_or("cuMemMap", e));
    }
    let mapping = Mapping { bytes, handle };
    if let Err(e) = set_access(at.0, bytes, &access(driver, &tables.accessors(device))) {
        let _ = unmap_one(at.0, mapping);
        return Err(oom_or("cuMemSetAccess", e));
    }
    tables.mapped.insert((device, at.0), mapping);
    Ok(())
}

/// [`Driver::vmm_unmap`]: waits for the device (and the peers that can reach its memory), then
/// unmaps and frees every whole mapped range in `[at, at + bytes)`.
pub(super) fn unmap(driver: &CudaDriver, device: usize, at: DevicePtr, bytes: usize) -> Result<()> {
    let (_, granularity) = vmm_device(driver, device, "vmm_unmap")?;
    let end = granular_end("vmm_unmap", granularity, at.0, bytes)?;
    // Exactly a union of whole mapped ranges: contiguous pieces from `at` to `end`.
    let whole = |pieces: &[(u64, Mapping)]| {
        let mut cursor = at.0;
        for &(a, m) in pieces {
            if a != cursor {
                return false;
            }
            cursor = a + m.bytes as u64;
        }
        cursor == end
    };
    let not_whole = || Error::InvalidArgument {
        op: "vmm_unmap",
        reason: format!("[{:#x}, {end:#x}) is not a union of whole mapped ranges", at.0),
    };
    let accessors = {
        let tables = lock(&driver.vmm.tables);
        if !whole(&tables.mapped_in(device, at.0, end)) {
            return Err(not_whole());
        }
        tables.accessors(device)
    };
    // Queued work on the device, or on a peer through its access, may still use the memory.
    for d in accessors {
        driver.synchronize_device(d)?;
    }
    let mut tables = lock(&driver.vmm.tables);
    let pieces = tables.mapped_in(device, at.0, end);
    if !whole(&pieces) {
        return Err(not_whole()); // another thread changed the range meanwhile
    }
    driver.enter(device)?;
    for (a, mapping) in pieces {
        tables.mapped.remove(&(device, a));
        if let Err(e) = unmap_one(a, mapping) {
            // The range's state is unknown now; it stays out of the tables rather than being
            // unmapped twice.
            return Err(driver_error("cuMemUnmap/cuMemRelease", e));
        }
    }
    Ok(())
}

/// [`Driver::vmm_release`].
pub(super) fn release(driver: &CudaDriver, device: usize, base: DevicePtr, bytes: usize) -> Result<()> {
    driver.device(device)?;
    let mut tables = lock(&driver.vmm.tables);
    let whole = tables.reserved.get(&(device, base.0)) == Some(&bytes);
    let end = base.0.saturating_add(bytes as u64);
    if !whole || !tables.mapped_in(device, base.0, end).is_empty() {
        return Err(Error::InvalidArgument {
            op: "vmm_release",
            reason: format!("{:#x} with {bytes} bytes is not a whole, fully unmapped reserved range", base.0),
        });
    }
    driver.enter(device)?;
    // SAFETY:
    // - exactly a range from `cuMemAddressReserve` with nothing mapped in it (checked above under the lock);
    // - it leaves the tables below, so it is freed once.
    unsafe { sys::cuMemAddressFree(base.0, bytes) }.result().map_err(|e| driver_error("cuMemAddressFree", e))?;
    tables.reserved.remove(&(device, base.0));
    Ok(())
}

/// Called when peer access between `device` and `peer` (either direction) has just been enabled:
/// grants each side read/write access to the ranges mapped on the other, once per pair.
pub(super) fn peer_enabled(driver: &CudaDriver, device: usize, peer: usize) -> Result<()> {
    if device == peer {
        return Ok(());
    }
    let pair = (device.min(peer), device.max(peer));
    let mut tables = lock(&driver.vmm.tables);
    if tables.peers.contains(&pair) {
        return Ok(());
    }
    let grants: Vec<(u64, usize, usize)> = tables
        .mapped
        .iter()
        .filter(|((d, _), _)| *d == pair.0 || *d == pair.1)
        .map(|(&(d, a), m)| (a, m.bytes, if d == pair.0 { pair.1 } else { pair.0 }))
        .collect();
    if !grants.is_empty() {
        driver.enter(device)?;
    }
    for (a, len, to) in grants {
        // On failure the pair stays unrecorded, so the next successful enable grants again.
        set_access(a, len, &access(driver, &[to])).map_err(|e| driver_error("cuMemSetAccess", e))?;
    }
    tables.peers.insert(pair);
    Ok(())
}

/// Unmaps and frees everything left (best effort, from `Drop`, after the driver's own streams
/// were synchronized and while the primary contexts are still retained).
pub(super) fn release_all(driver: &CudaDriver) {
    let tables = std::mem::take(&mut *lock(&driver.vmm.tables));
    for ((device, a), mapping) in tables.mapped {
        if driver.enter(device).is_ok() {
            let _ = unmap_one(a, mapping);
        }
    }
    for ((device, base), bytes) in tables.reserved {
        if driver.enter(device).is_ok() {
            // SAFETY:
            // a range from `cuMemAddressReserve`, unmapped above, taken out of the tables, so freed once.
            let _ = unsafe { sys::cuMemAddressFree(base, bytes) };
        }
    }
}
