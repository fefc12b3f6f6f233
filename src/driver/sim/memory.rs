//! Simulated device memory: a capacity, an address window per device, allocations and reserved
//! virtual ranges with mapped pieces, and contents stored by address in sparse 64 KiB pages that
//! exist only once written — so a 7 GB trace replay or a huge reservation costs no host RAM.

use crate::driver::DevicePtr;
use crate::error::{Error, Result, Sticky};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Every simulated device owns a 16 TiB window of addresses starting here (device `d` at
/// `BASE + d * WINDOW`), so a pointer tells its device and pointers never collide.
const BASE: u64 = 0x1000_0000_0000;
const WINDOW: u64 = 1 << 44;
/// Allocations are aligned like `cudaMalloc`'s (PyTorch relies on 512-byte alignment).
const ALIGN: u64 = 512;
/// Granularity of virtual-memory mapping, as on NVIDIA GPUs.
pub(crate) const VMM_GRANULARITY: usize = 2 << 20;
/// Host storage unit for contents.
const PAGE: u64 = 64 << 10;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Debug)]
enum Region {
    /// From `malloc`: all of it is usable.
    Malloc { size: usize, charged: usize },
    /// From `vmm_reserve`: usable only where mapped (`start → len`).
    Reserved { size: usize, mapped: BTreeMap<u64, usize> },
}

#[derive(Debug, Default)]
struct State {
    used: usize,
    next: u64,
    regions: BTreeMap<u64, Region>,
}

/// One simulated device's memory.
#[derive(Debug)]
pub(crate) struct DeviceMemory {
    device: usize,
    capacity: usize,
    state: Mutex<State>,
    pages: Mutex<HashMap<u64, Box<[u8]>>>,
    /// Set by [`DeviceMemory::fail_next_free`], cleared by the free it fails.
    fail_next_free: AtomicBool,
    /// The device's error raised in a `Drop`, for the next `synchronize` (`Driver::take_error`).
    pub dropped: Sticky,
}

impl DeviceMemory {
    pub fn new(device: usize, capacity: usize) -> Self {
        let next = BASE + device as u64 * WINDOW;
        DeviceMemory {
            device,
            capacity,
            state: Mutex::new(State { used: 0, next, regions: BTreeMap::new() }),
            pages: Mutex::new(HashMap::new()),
            fail_next_free: AtomicBool::new(false),
            dropped: Sticky::default(),
        }
    }

    /// `(free, total)`.
    pub fn info(&self) -> (usize, usize) {
        let s = lock(&self.state);
        (self.capacity - s.used, self.capacity)
    }

    fn oom(&self, requested: usize, used: usize) -> Error {
        Error::OutOfMemory {
            device: self.device,
            requested,
            total: self.capacity,
            free: self.capacity - used,
            allocated: 0,
            reserved_unallocated: 0,
        }
    }

    fn charge(&self, s: &mut State, requested: usize, bytes: usize) -> Result<()> {
        if s.used.checked_add(bytes).is_none_or(|total| total > self.capacity) {
            return Err(self.oom(requested, s.used));
        }
        s.used += bytes;
        Ok(())
    }

    /// Takes `bytes` of address space (aligned) from the device's window.
    fn take_addresses(&self, s: &mut State, bytes: u64, align: u64) -> Result<u64> {
        let start = BASE + self.device as u64 * WINDOW;
        let end = start + WINDOW;
        let at = s.next.div_ceil(align) * align;
        if at.checked_add(bytes).is_some_and(|e| e <= end) {
            s.next = at + bytes;
            return Ok(at);
        }
        // The window is used up by address churn: first fit between live regions.
        let mut cursor = start;
        for (&base, r) in &s.regions {
            if base >= cursor.saturating_add(bytes) {
                return Ok(cursor);
            }
            let size = match r {
                Region::Malloc { size, .. } | Region::Reserved { size, .. } => *size as u64,
            };
            cursor = (base + size.max(1)).div_ceil(align) * align;
        }
        if cursor.checked_add(bytes).is_some_and(|e| e <= end) {
            Ok(cursor)
        } else {
            Err(self.oom(bytes as usize, s.used))
        }
    }

    pub fn malloc(&self, bytes: usize) -> Result<DevicePtr> {
        let mut s = lock(&self.state);
        // The driver hands out whole 512-byte units, and a zero-byte request still gets an address.
        // Checked: a request within 511 bytes of 2^64 has no rounded size (out of memory).
        let charged = (bytes.max(1) as u64)
            .div_ceil(ALIGN)
            .checked_mul(ALIGN)
            .and_then(|c| usize::try_from(c).ok())
            .ok_or_else(|| self.oom(bytes, s.used))?;
        self.charge(&mut s, bytes, charged)?;
        let base = match self.take_addresses(&mut s, charged as u64, ALIGN) {
            Ok(b) => b,
            Err(e) => {
                s.used -= charged;
                return Err(e);
            }
        };
        s.regions.insert(base, Region::Malloc { size: bytes, charged });
        Ok(DevicePtr(base))
    }

    /// Test hook: the next [`DeviceMemory::free`] fails with [`Error::Injected`] (the memory stays
    /// allocated).
    pub fn fail_next_free(&self) {
        self.fail_next_free.store(true, Ordering::Release);
    }

    pub fn free(&self, ptr: DevicePtr) -> Result<()> {
        if self.fail_next_free.swap(false, Ordering::AcqRel) {
            return Err(Error::Injected { device: self.device, op: "free" });
        }
        let mut s = lock(&self.state);
        let (size, charged) = match s.regions.get(&ptr.0) {
            Some(Region::Malloc { size, charged }) => (*size, *charged),
            _ => {
                return Err(Error::InvalidPointer {
                    device: self.device,
                    ptr: ptr.0,
                    reason: "not the start of a live allocation (double free, or a pointer from another device?)"
                        .into(),
                })
            }
        };
        s.regions.remove(&ptr.0);
        s.used -= charged;
        self.drop_pages(&s, ptr.0, size);
        Ok(())
    }

    pub fn reserve(&self, bytes: usize) -> Result<DevicePtr> {
        self.check_granular(0, bytes)?;
        let mut s = lock(&self.state);
        let base = self.take_addresses(&mut s, bytes as u64, VMM_GRANULARITY as u64)?;
        s.regions.insert(base, Region::Reserved { size: bytes, mapped: BTreeMap::new() });
        Ok(DevicePtr(base))
    }

    fn check_granular(&self, at: u64, bytes: usize) -> Result<()> {
        let g = VMM_GRANULARITY as u64;
        if bytes == 0 || !(bytes as u64).is_multiple_of(g) || !at.is_multiple_of(g) {
            return Err(Error::InvalidArgument {
                op: "vmm",
                reason: format!("address {at:#x} and size {bytes} must be non-zero multiples of {g} bytes"),
            });
        }
        Ok(())
    }

    /// The reservation holding `[at, at + bytes)`.
    fn reservation<'s>(&self, s: &'s mut State, at: u64, bytes: usize) -> Result<(u64, &'s mut BTreeMap<u64, usize>)> {
        let device = self.device;
        match s.regions.range_mut(..=at).next_back() {
            Some((&base, Region::Reserved { size, mapped })) if at + bytes as u64 <= base + *size as u64 => {
                Ok((base, mapped))
            }
            _ => Err(Error::InvalidPointer {
                device,
                ptr: at,
                reason: format!("{bytes} bytes here are not inside one reserved range"),
            }),
        }
    }

    pub fn map(&self, at: DevicePtr, bytes: usize) -> Result<()> {
        self.check_granular(at.0, bytes)?;
        let mut s = lock(&self.state);
        let used = s.used;
        if used.checked_add(bytes).is_none_or(|total| total > self.capacity) {
            return Err(self.oom(bytes, used));
        }
        let (_, mapped) = self.reservation(&mut s, at.0, bytes)?;
        let end = at.0 + bytes as u64;
        let overlaps = mapped.range(..end).next_back().is_some_and(|(&st, &len)| st + len as u64 > at.0);
        if overlaps {
            return Err(Error::InvalidArgument {
                op: "vmm_map",
                reason: format!("[{:#x}, {end:#x}) is already partly mapped", at.0),
            });
        }
        mapped.insert(at.0, bytes);
        s.used += bytes;
        Ok(())
    }

    pub fn unmap(&self, at: DevicePtr, bytes: usize) -> Result<()> {
        self.check_granular(at.0, bytes)?;
        let mut s = lock(&self.state);
        let (_, mapped) = self.reservation(&mut s, at.0, bytes)?;
        let end = at.0 + bytes as u64;
        // The range must be exactly a union of whole mapped pieces.
        let pieces: Vec<(u64, usize)> = mapped.range(at.0..end).map(|(&a, &l)| (a, l)).collect();
        let covered: u64 = pieces.iter().map(|&(_, l)| l as u64).sum();
        let whole = pieces.first().is_some_and(|&(a, _)| a == at.0)
            && pieces.last().is_some_and(|&(a, l)| a + l as u64 == end)
            && covered == bytes as u64;
        if !whole {
            return Err(Error::InvalidArgument {
                op: "vmm_unmap",
                reason: format!("[{:#x}, {end:#x}) is not a union of whole mapped ranges", at.0),
            });
        }
        for (a, _) in &pieces {
            mapped.remove(a);
        }
        s.used -= bytes;
        self.drop_pages(&s, at.0, bytes);
        Ok(())
    }

    pub fn release(&self, base: DevicePtr, bytes: usize) -> Result<()> {
        let mut s = lock(&self.state);
        match s.regions.get(&base.0) {
            Some(Region::Reserved { size, mapped }) if *size == bytes && mapped.is_empty() => {
                s.regions.remove(&base.0);
                Ok(())
            }
            _ => Err(Error::InvalidArgument {
                op: "vmm_release",
                reason: format!("{:#x} with {bytes} bytes is not a whole, fully unmapped reserved range", base.0),
            }),
        }
    }

    /// Checks that `[ptr, ptr + bytes)` is usable memory: inside one allocation, or inside
    /// contiguous mapped pieces of one reservation.
    pub fn check_span(&self, ptr: DevicePtr, bytes: usize) -> Result<()> {
        let s = lock(&self.state);
        let bad = |reason: String| Error::InvalidPointer { device: self.device, ptr: ptr.0, reason };
        let (&base, region) =
            s.regions.range(..=ptr.0).next_back().ok_or_else(|| bad("no live allocation contains it".into()))?;
        let end = ptr.0 + bytes as u64;
        match region {
            Region::Malloc { size, .. } => {
                if end > base + *size as u64 {
                    return Err(bad(format!(
                        "{bytes} bytes at offset {} run past the end of its {size}-byte allocation",
                        ptr.0 - base
                    )));
                }
            }
            Region::Reserved { mapped, .. } => {
                // Walk the mapped pieces from the one holding `ptr`; they must cover the span.
                let mut cursor = ptr.0;
                let mut pieces = mapped.range(..=ptr.0).next_back().into_iter().chain(mapped.range(ptr.0 + 1..));
                while cursor < end.max(ptr.0 + 1) {
                    match pieces.next() {
                        Some((&a, &l)) if a <= cursor && a + l as u64 > cursor => cursor = a + l as u64,
                        _ => {
                            return Err(bad("part of the span is reserved address space with no memory mapped".into()))
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Drops the host pages of a range that was just freed, except edge pages that another live
    /// region still shares.
    fn drop_pages(&self, s: &State, at: u64, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let (first, last) = (at / PAGE, (at + bytes as u64 - 1) / PAGE);
        let shared = |p: u64| {
            let (lo, hi) = (p * PAGE, (p + 1) * PAGE);
            // Reservations are granularity-aligned, so only allocations can share a page.
            s.regions.range(..hi).next_back().is_some_and(|(&base, r)| match r {
                Region::Malloc { size, .. } => base + (*size).max(1) as u64 > lo,
                Region::Reserved { .. } => false,
            })
        };
        let keep_first = shared(first);
        let keep_last = shared(last);
        let mut pages = lock(&self.pages);
        let mut drop_one = |p: u64, keep: bool| {
            if !keep {
                pages.remove(&p);
            }
        };
        drop_one(first, keep_first);
        drop_one(last, keep_last);
        if last > first + 1 {
            if ((last - first - 1) as usize) < pages.len() {
                for p in first + 1..last {
                    pages.remove(&p);
                }
            } else {
                pages.retain(|&p, _| p <= first || p >= last);
            }
        }
    }

    /// Visits `[at, at + len)` page by page: `f(page, offset_in_page, range_in_data)`.
    fn for_pages(at: u64, len: usize, mut f: impl FnMut(u64, usize, std::ops::Range<usize>)) {
        let mut done = 0usize;
        while done < len {
            let addr = at + done as u64;
            let page = addr / PAGE;
            let off = (addr % PAGE) as usize;
            let n = (PAGE as usize - off).min(len - done);
            f(page, off, done..done + n);
            done += n;
        }
    }

    pub fn read(&self, at: DevicePtr, out: &mut [u8]) {
        let pages = lock(&self.pages);
        Self::for_pages(at.0, out.len(), |p, off, r| match pages.get(&p) {
            Some(data) => out[r.clone()].copy_from_slice(&data[off..off + r.len()]),
            None => out[r].fill(0),
        });
    }

    pub fn write(&self, at: DevicePtr, data: &[u8]) {
        let mut pages = lock(&self.pages);
        Self::for_pages(at.0, data.len(), |p, off, r| {
            let page = pages.entry(p).or_insert_with(|| vec![0u8; PAGE as usize].into_boxed_slice());
            page[off..off + r.len()].copy_from_slice(&data[r]);
        });
    }

    pub fn fill(&self, at: DevicePtr, len: usize, value: u8) {
        let mut pages = lock(&self.pages);
        Self::for_pages(at.0, len, |p, off, r| {
            if value == 0 && !pages.contains_key(&p) {
                return; // unwritten pages already read as zeros
            }
            let page = pages.entry(p).or_insert_with(|| vec![0u8; PAGE as usize].into_boxed_slice());
            page[off..off + r.len()].fill(value);
        });
    }

    /// Bytes of host memory holding this device's contents now.
    pub fn materialized_bytes(&self) -> usize {
        lock(&self.pages).len() * PAGE as usize
    }
}

/// The device a simulated pointer belongs to, if any.
pub(crate) fn device_of(ptr: DevicePtr) -> Option<usize> {
    ptr.0.checked_sub(BASE).map(|off| (off / WINDOW) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_is_enforced_and_freed_bytes_return() {
        let m = DeviceMemory::new(1, 4096);
        let a = m.malloc(3000).unwrap();
        assert_eq!(device_of(a), Some(1));
        assert!(matches!(m.malloc(2000), Err(Error::OutOfMemory { device: 1, requested: 2000, .. })));
        m.free(a).unwrap();
        assert_eq!(m.info(), (4096, 4096));
        assert!(m.malloc(4096).is_ok());
        assert!(matches!(m.free(DevicePtr(12345)), Err(Error::InvalidPointer { .. })));
    }

    #[test]
    fn sizes_near_2_pow_64_are_out_of_memory_not_wrapped() {
        let m = DeviceMemory::new(0, 1 << 40);
        for bytes in [usize::MAX, usize::MAX - 511, usize::MAX - 512, 1 << 63, (1 << 40) + 1] {
            assert!(matches!(m.malloc(bytes), Err(Error::OutOfMemory { .. })), "{bytes}");
            assert_eq!(m.info(), (1 << 40, 1 << 40), "{bytes}: nothing is counted");
        }
    }

    #[test]
    fn memory_is_only_materialized_when_written() {
        let m = DeviceMemory::new(0, 1 << 40);
        let p = m.malloc(1 << 39).unwrap();
        m.fill(p, 1 << 30, 0);
        assert_eq!(m.materialized_bytes(), 0, "a half-TiB allocation and a zero fill take no host memory");
        let small = m.malloc(1024).unwrap();
        m.write(small.offset(10), &[1, 2, 3, 4]);
        let mut back = [9u8; 6];
        m.read(small.offset(9), &mut back);
        assert_eq!(back, [0, 1, 2, 3, 4, 0]);
        assert_eq!(m.materialized_bytes(), PAGE as usize);
        assert!(m.check_span(p.offset((1 << 39) - 2), 4).is_err(), "a span past the end is refused");
        m.free(small).unwrap();
        assert_eq!(m.materialized_bytes(), 0, "freeing drops the pages");
    }

    #[test]
    fn reserved_ranges_are_usable_only_where_mapped() {
        let g = VMM_GRANULARITY;
        let m = DeviceMemory::new(0, 8 * g);
        let base = m.reserve(64 * g).unwrap();
        assert_eq!(m.info().0, 8 * g, "a reservation costs no memory");
        assert!(m.check_span(base, 16).is_err());
        m.map(base, 2 * g).unwrap();
        m.map(base.offset(2 * g), g).unwrap();
        assert_eq!(m.info().0, 5 * g);
        m.check_span(base.offset(g), 2 * g).unwrap(); // across two mapped pieces
        assert!(m.check_span(base.offset(2 * g), g + 1).is_err());
        assert!(matches!(m.map(base.offset(8 * g), 6 * g), Err(Error::OutOfMemory { .. })));
        assert!(m.map(base.offset(g), g).is_err(), "double mapping is refused");
        assert!(m.unmap(base, g).is_err(), "half a mapped piece cannot be unmapped");
        assert!(m.release(base, 64 * g).is_err(), "a reservation with mappings cannot be released");
        m.write(base.offset(g - 3), &[7; 6]);
        assert_eq!(m.materialized_bytes(), 2 * PAGE as usize);
        m.unmap(base, 3 * g).unwrap();
        assert_eq!(m.info().0, 8 * g);
        assert_eq!(m.materialized_bytes(), 0, "unmapping drops the pages");
        m.release(base, 64 * g).unwrap();
    }
}
