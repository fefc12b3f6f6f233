//! Simulated device memory: a capacity, an address range per device, and allocations whose host
//! bytes exist only once somebody writes them (so a 7 GB trace replay costs no host RAM).

use crate::driver::DevicePtr;
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};

/// Every simulated device owns a 16 TiB window of addresses starting here (device `d` at
/// `BASE + d * WINDOW`), so a pointer tells its device and pointers never collide.
const BASE: u64 = 0x1000_0000_0000;
const WINDOW: u64 = 1 << 44;
/// Allocations are aligned like `cudaMalloc`'s (PyTorch relies on 512-byte alignment).
const ALIGN: u64 = 512;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One allocation. Its bytes appear (zeroed) on first access.
#[derive(Debug)]
pub(crate) struct Allocation {
    pub base: u64,
    pub size: usize,
    data: Mutex<Option<Vec<u8>>>,
}

impl Allocation {
    /// Runs `f` over the allocation's bytes, materializing them first if needed.
    pub fn with_bytes<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        let mut g = lock(&self.data);
        let bytes = g.get_or_insert_with(|| vec![0u8; self.size]);
        f(bytes)
    }

    /// Whether host memory backs this allocation yet.
    pub fn is_materialized(&self) -> bool {
        lock(&self.data).is_some()
    }
}

/// A resolved pointer: the allocation and the byte range inside it.
pub(crate) struct Span {
    pub alloc: Arc<Allocation>,
    pub range: Range<usize>,
}

#[derive(Debug, Default)]
struct State {
    used: usize,
    next: u64,
    live: BTreeMap<u64, Arc<Allocation>>,
}

/// One simulated device's memory.
#[derive(Debug)]
pub(crate) struct DeviceMemory {
    device: usize,
    capacity: usize,
    state: Mutex<State>,
}

impl DeviceMemory {
    pub fn new(device: usize, capacity: usize) -> Self {
        let next = BASE + device as u64 * WINDOW;
        DeviceMemory { device, capacity, state: Mutex::new(State { used: 0, next, live: BTreeMap::new() }) }
    }

    /// `(free, total)`.
    pub fn info(&self) -> (usize, usize) {
        let s = lock(&self.state);
        (self.capacity - s.used, self.capacity)
    }

    pub fn malloc(&self, bytes: usize) -> Result<DevicePtr> {
        let mut s = lock(&self.state);
        // The driver hands out whole 512-byte units, and a zero-byte request still gets an address.
        let rounded = (bytes.max(1) as u64).div_ceil(ALIGN) * ALIGN;
        if s.used as u64 + rounded > self.capacity as u64 {
            return Err(Error::OutOfMemory {
                device: self.device,
                requested: bytes,
                total: self.capacity,
                free: self.capacity - s.used,
            });
        }
        let window_end = BASE + (self.device as u64 + 1) * WINDOW;
        if s.next + rounded > window_end {
            // The window is exhausted by address churn: fall back to first fit between live blocks.
            let start = BASE + self.device as u64 * WINDOW;
            s.next = first_gap(&s.live, start, window_end, rounded).ok_or(Error::OutOfMemory {
                device: self.device,
                requested: bytes,
                total: self.capacity,
                free: self.capacity - s.used,
            })?;
        }
        let base = s.next;
        s.next += rounded;
        s.used += rounded as usize;
        let alloc = Arc::new(Allocation { base, size: bytes, data: Mutex::new(None) });
        s.live.insert(base, alloc);
        Ok(DevicePtr(base))
    }

    pub fn free(&self, ptr: DevicePtr) -> Result<()> {
        let mut s = lock(&self.state);
        let alloc = s.live.remove(&ptr.0).ok_or_else(|| Error::InvalidPointer {
            device: self.device,
            ptr: ptr.0,
            reason: "not the start of a live allocation (double free, or a pointer from another device?)".into(),
        })?;
        s.used -= (alloc.size.max(1) as u64).div_ceil(ALIGN) as usize * ALIGN as usize;
        Ok(())
    }

    /// Finds the allocation holding `[ptr, ptr + bytes)`.
    pub fn resolve(&self, ptr: DevicePtr, bytes: usize) -> Result<Span> {
        let s = lock(&self.state);
        let bad = |reason: String| Error::InvalidPointer { device: self.device, ptr: ptr.0, reason };
        let (_, alloc) =
            s.live.range(..=ptr.0).next_back().ok_or_else(|| bad("no live allocation contains it".into()))?;
        let start = (ptr.0 - alloc.base) as usize;
        if start > alloc.size || bytes > alloc.size - start {
            return Err(bad(format!(
                "{bytes} bytes at offset {start} run past the end of its {}-byte allocation",
                alloc.size
            )));
        }
        Ok(Span { alloc: alloc.clone(), range: start..start + bytes })
    }

    /// Bytes of host memory backing this device's allocations now.
    pub fn materialized_bytes(&self) -> usize {
        lock(&self.state).live.values().filter(|a| a.is_materialized()).map(|a| a.size).sum()
    }
}

fn first_gap(live: &BTreeMap<u64, Arc<Allocation>>, start: u64, end: u64, size: u64) -> Option<u64> {
    let mut cursor = start;
    for a in live.values() {
        if a.base >= cursor + size {
            return Some(cursor);
        }
        cursor = cursor.max(a.base + (a.size.max(1) as u64).div_ceil(ALIGN) * ALIGN);
    }
    (cursor + size <= end).then_some(cursor)
}

/// The device a simulated pointer belongs to, if any.
pub(crate) fn device_of(ptr: DevicePtr) -> Option<usize> {
    ptr.0.checked_sub(BASE).map(|off| (off / WINDOW) as usize)
}

/// Copies `bytes` bytes between two spans (which may be the same allocation).
pub(crate) fn copy_spans(dst: &Span, src: &Span) {
    if Arc::ptr_eq(&dst.alloc, &src.alloc) {
        let (d, s) = (dst.range.start, src.range.clone());
        dst.alloc.with_bytes(|b| b.copy_within(s, d));
    } else {
        let tmp = src.alloc.with_bytes(|b| b[src.range.clone()].to_vec());
        dst.alloc.with_bytes(|b| b[dst.range.clone()].copy_from_slice(&tmp));
    }
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
    fn memory_is_only_materialized_when_touched() {
        let m = DeviceMemory::new(0, 1 << 40);
        let p = m.malloc(1 << 39).unwrap();
        assert_eq!(m.materialized_bytes(), 0, "a half-TiB allocation must not take host memory");
        let small = m.malloc(1024).unwrap();
        let span = m.resolve(small.offset(10), 4).unwrap();
        span.alloc.with_bytes(|b| b[span.range.clone()].copy_from_slice(&[1, 2, 3, 4]));
        assert_eq!(m.materialized_bytes(), 1024);
        assert!(m.resolve(p.offset((1 << 39) - 2), 4).is_err(), "a span past the end is refused");
    }
}
