//! Simulated pinned host memory: ordinary host memory allocated by the simulator and flagged as
//! pinned (kept in a table by address), so that asynchronous copies can check that their host
//! side really is pinned memory of this driver, as CUDA's are fast only for it.
//!
//! Copies run on the stream's worker thread and read or write the host block by address, like a
//! DMA engine. Each queued copy holds the block (an `Arc`), so a block freed while a copy is still
//! queued stays allocated until the copy has run: the simulator never touches freed memory, even
//! when a caller breaks the contract of [`Driver::memcpy_htod_async`](crate::driver::Driver).

use super::memory::lock;
use crate::driver::HostPtr;
use crate::error::{Error, Result};
use std::alloc::Layout;
use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

/// Pinned blocks are page-aligned, like `cuMemHostAlloc`'s.
const PAGE: usize = 4096;

/// One allocation of simulated pinned memory; deallocated when the last holder drops it.
#[derive(Debug)]
pub(crate) struct HostRegion {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY:
// - the region owns its allocation and hands out only the pointer; its own code never reads or
//   writes the bytes (copies do, on whatever thread runs them, under the driver's contract);
// - freeing happens once, in `Drop`, from whichever thread drops the last `Arc`.
unsafe impl Send for HostRegion {}
// SAFETY: shared access only reads `ptr` and `layout`, which never change.
unsafe impl Sync for HostRegion {}

impl HostRegion {
    /// `bytes` zeroed, page-aligned bytes.
    fn new(bytes: usize) -> Result<HostRegion> {
        let oom = Error::HostOutOfMemory { requested: bytes };
        let layout = Layout::from_size_align(bytes.max(1), PAGE).map_err(|_| oom.clone())?;
        // SAFETY: `layout` has a non-zero size (at least 1 byte) and a valid power-of-two alignment.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or(oom)?;
        Ok(HostRegion { ptr, layout })
    }

    /// The first byte.
    pub fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// The handle of the first byte.
    pub fn host_ptr(&self) -> HostPtr {
        HostPtr::from_non_null(self.ptr)
    }

    fn end(&self) -> u64 {
        self.host_ptr().0 + self.layout.size() as u64
    }
}

impl Drop for HostRegion {
    fn drop(&mut self) {
        // SAFETY:
        // `addr` was returned by `alloc_zeroed` with exactly `layout` in `new`, and this is the region's only
        // deallocation (it runs once, when the last `Arc` drops).
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// The simulator's pinned allocations, by address (a clone shares the table).
#[derive(Debug, Default, Clone)]
pub(crate) struct SimPinnedTable {
    regions: Arc<Mutex<BTreeMap<u64, Arc<HostRegion>>>>,
}

impl SimPinnedTable {
    /// Allocates `bytes` of zeroed pinned memory.
    pub fn alloc(&self, bytes: usize) -> Result<HostPtr> {
        let region = HostRegion::new(bytes)?;
        let ptr = region.host_ptr();
        lock(&self.regions).insert(ptr.0, Arc::new(region));
        Ok(ptr)
    }

    /// Frees a block from [`SimPinnedTable::alloc`]; copies still queued keep it until they ran.
    pub fn free(&self, ptr: HostPtr) -> Result<()> {
        match lock(&self.regions).remove(&ptr.0) {
            Some(_) => Ok(()),
            None => Err(not_pinned(ptr, 0, "not the start of a live pinned allocation (double free?)")),
        }
    }

    /// The live pinned allocation holding `[ptr, ptr + bytes)`.
    pub fn region(&self, ptr: HostPtr, bytes: usize) -> Result<Arc<HostRegion>> {
        let regions = lock(&self.regions);
        match regions.range(..=ptr.0).next_back() {
            Some((_, r)) if ptr.0 + bytes as u64 <= r.end() => Ok(r.clone()),
            Some((_, r)) if ptr.0 < r.end() => {
                Err(not_pinned(ptr, bytes, "the span runs past the end of its allocation"))
            }
            _ => Err(not_pinned(ptr, bytes, "not inside pinned memory of this driver (from host_alloc)")),
        }
    }

    /// Reads `out.len()` bytes at `at` (inside one live pinned allocation).
    pub fn read(&self, at: HostPtr, out: &mut [u8]) -> Result<()> {
        let region = self.region(at, out.len())?;
        let offset = (at.0 - region.host_ptr().0) as usize;
        // SAFETY:
        // - `[at, at + out.len())` lies inside `region` (checked by `region`), which `region` keeps
        //   allocated for this call;
        // - the runtime queues work over pinned bytes under the block's protocol (host access waits
        //   for it), so nothing writes these bytes while a stream's job reads them.
        let bytes = unsafe { std::slice::from_raw_parts(region.ptr().as_ptr().add(offset), out.len()) };
        out.copy_from_slice(bytes);
        Ok(())
    }

    /// Writes `data` at `at` (inside one live pinned allocation).
    pub fn write(&self, at: HostPtr, data: &[u8]) -> Result<()> {
        let region = self.region(at, data.len())?;
        let offset = (at.0 - region.host_ptr().0) as usize;
        // SAFETY:
        // - `[at, at + data.len())` lies inside `region` (checked by `region`), which `region` keeps
        //   allocated for this call;
        // - the runtime queues device writes of pinned bytes under the block's exclusive protocol
        //   (every host access waits for them), so this is the only access to these bytes meanwhile.
        let bytes = unsafe { std::slice::from_raw_parts_mut(region.ptr().as_ptr().add(offset), data.len()) };
        bytes.copy_from_slice(data);
        Ok(())
    }

    /// Number of live pinned allocations.
    #[cfg(test)]
    pub fn live(&self) -> usize {
        lock(&self.regions).len()
    }
}

fn not_pinned(ptr: HostPtr, bytes: usize, why: &str) -> Error {
    Error::InvalidArgument {
        op: "pinned host memory",
        reason: format!("{bytes} bytes at host address {:#x}: {why}", ptr.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_zeroed_aligned_and_checked() {
        let m = SimPinnedTable::default();
        let p = m.alloc(10_000).unwrap();
        assert_eq!(p.0 % PAGE as u64, 0);
        let r = m.region(p.offset(100), 9_900).unwrap();
        assert!(m.region(p.offset(100), 9_901).is_err(), "past the end");
        assert!(m.region(HostPtr(8), 1).is_err(), "not pinned");
        // SAFETY: the region is live (held by `r`) and 10 000 bytes long.
        let first = unsafe { std::slice::from_raw_parts(r.ptr().as_ptr(), 10_000) };
        assert!(first.iter().all(|&b| b == 0));
        m.free(p).unwrap();
        assert!(m.free(p).is_err(), "double free");
        assert_eq!(m.live(), 0);
        drop(r); // the last holder deallocates
        let z = m.alloc(0).unwrap();
        assert!(z.0 != 0, "a zero-byte request gets an address");
        m.free(z).unwrap();
    }

    #[test]
    fn async_copies_are_queued_checked_and_keep_their_block() {
        use crate::driver::sim::{SimConfig, SimDriver};
        use crate::driver::Driver;
        use std::time::Duration;
        let d = SimDriver::new(SimConfig { devices: 1, memory: 1 << 24, ..SimConfig::default() });
        let s = d.create_stream(0, 0).unwrap();
        let dev = d.malloc(0, 4096).unwrap();
        let (a, b) = (d.host_alloc(4096).unwrap(), d.host_alloc(4096).unwrap());
        let r = d.host.region(a, 4096).unwrap();
        // SAFETY: the block is live, 4096 bytes long, and no copy uses it yet.
        unsafe { std::slice::from_raw_parts_mut(r.ptr().as_ptr(), 4096) }.fill(0x3C);
        drop(r);
        d.delay(s, Duration::from_millis(100)).unwrap();
        // SAFETY:
        // the blocks stay allocated (the queued jobs hold them) and the host does not touch them until the
        // stream synchronization below.
        unsafe {
            d.memcpy_htod_async(dev, a, 4096, s).unwrap();
            d.memcpy_dtoh_async(b.offset(96), dev, 4000, s).unwrap();
        }
        assert!(!d.stream_query(s).unwrap(), "queued behind the delay: the calls returned at once");
        d.host_free(a).unwrap(); // the queued job still holds the block
        let held = d.host.region(b, 4096).unwrap();
        d.stream_synchronize(s).unwrap();
        // SAFETY: the stream has passed both copies; `held` keeps the block alive.
        let got = unsafe { std::slice::from_raw_parts(held.ptr().as_ptr(), 4096) };
        assert!(got[..96].iter().all(|&x| x == 0) && got[96..].iter().all(|&x| x == 0x3C));
        // SAFETY: these calls are refused before anything is queued.
        unsafe {
            assert!(d.memcpy_htod_async(dev, HostPtr(4096), 16, s).is_err(), "pageable memory is refused");
            assert!(d.memcpy_dtoh_async(b.offset(4090), dev, 16, s).is_err(), "past the block's end");
            assert!(d.memcpy_htod_async(dev, a, 16, s).is_err(), "a freed block is refused");
        }
        d.host_free(b).unwrap();
    }
}
