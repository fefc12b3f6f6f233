//! Model check of the pinned-memory protocol with loom: the crate's own [`BlockUses`] (the lock
//! and event list behind `PinnedBlock`) and [`CachingHostAllocator`], over a fake device whose
//! copies a loom thread runs. loom explores every interleaving; the block's bytes are a loom
//! `UnsafeCell`, so a host access that overlaps a copy without happening after its event is a
//! reported race. Run with
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test --release --lib loom_pinned
//! ```

use crate::alloc::{CachingHostAllocator, HostUse, RawHostMemory};
use crate::driver::{EventId, HostPtr, StreamId};
use crate::error::Result;
use crate::runtime::{BlockUses, UseEvents};
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;

/// One stream of a fake device: copies queued in order, each touching the block's bytes and then
/// completing its event (release), as the copy engine does.
struct Device {
    queued: Mutex<Vec<HostUse>>,
    done: [AtomicBool; 2],
    bytes: UnsafeCell<u8>,
}

// SAFETY: the bytes are only touched through loom's `UnsafeCell`, which reports every access that
// is not ordered with the others; that check is the point of the model.
unsafe impl Sync for Device {}

fn copy_use(event: u64, device_writes: bool) -> HostUse {
    HostUse { device: 0, stream: StreamId(1), event: EventId(event), device_writes }
}

impl Device {
    fn new() -> Device {
        Device {
            queued: Mutex::new(Vec::new()),
            done: [AtomicBool::new(false), AtomicBool::new(false)],
            bytes: UnsafeCell::new(0),
        }
    }

    /// Queues a copy on the stream and gives its use (the event recorded after it).
    fn queue(&self, u: HostUse) -> HostUse {
        self.queued.lock().unwrap().push(u);
        u
    }

    fn is_done(&self, u: &HostUse) -> bool {
        self.done[u.event.0 as usize].load(Ordering::Acquire)
    }

    /// Runs `n` copies in stream order, each once it is queued.
    fn run(&self, n: usize) {
        for i in 0..n {
            let u = loop {
                if let Some(u) = self.queued.lock().unwrap().get(i).copied() {
                    break u;
                }
                thread::yield_now();
            };
            if u.device_writes {
                // SAFETY: loom checks that no host access overlaps this write.
                self.bytes.with_mut(|p| unsafe { *p = 2 });
            } else {
                // SAFETY: loom checks that no host write overlaps this read.
                self.bytes.with(|p| unsafe { assert!(*p <= 2) });
            }
            self.done[u.event.0 as usize].store(true, Ordering::Release);
        }
    }
}

impl UseEvents for Device {
    fn wait(&self, u: &HostUse) -> Result<()> {
        while !self.is_done(u) {
            thread::yield_now();
        }
        Ok(())
    }
    fn done(&self, u: &HostUse) -> bool {
        self.is_done(u)
    }
    fn release(&self, _: HostUse) {}
}

/// A host write racing the queueing of a device read (host → device copy) never touches the
/// bytes before the read's event completed.
#[test]
fn host_write_waits_for_a_queued_device_read() {
    loom::model(|| {
        let (dev, block) = (Arc::new(Device::new()), Arc::new(BlockUses::default()));
        let (d, b) = (dev.clone(), block.clone());
        let copier = thread::spawn(move || b.queue(&*d, false, |_| Ok(Some(d.queue(copy_use(0, false))))).unwrap());
        let d = dev.clone();
        let device = thread::spawn(move || d.run(1));
        {
            let _w = block.write(&*dev).unwrap();
            let queued = !dev.queued.lock().unwrap().is_empty();
            assert!(!queued || dev.done[0].load(Ordering::Relaxed), "host write before the queued read completed");
            // SAFETY: loom checks that no copy overlaps this write.
            dev.bytes.with_mut(|p| unsafe { *p = 1 });
        }
        copier.join().unwrap();
        device.join().unwrap();
    });
}

/// A host read racing the queueing of a device write (device → host copy) never reads the bytes
/// before the write's event completed.
#[test]
fn host_read_waits_for_a_queued_device_write() {
    loom::model(|| {
        let (dev, block) = (Arc::new(Device::new()), Arc::new(BlockUses::default()));
        let (d, b) = (dev.clone(), block.clone());
        let copier = thread::spawn(move || b.queue(&*d, true, |_| Ok(Some(d.queue(copy_use(0, true))))).unwrap());
        let d = dev.clone();
        let device = thread::spawn(move || d.run(1));
        {
            let _r = block.read(&*dev).unwrap();
            let queued = !dev.queued.lock().unwrap().is_empty();
            assert!(!queued || dev.done[0].load(Ordering::Relaxed), "host read before the queued write completed");
            // SAFETY: loom checks that no device write overlaps this read.
            let seen = dev.bytes.with(|p| unsafe { *p });
            assert_eq!(seen, if queued { 2 } else { 0 });
        }
        copier.join().unwrap();
        device.join().unwrap();
    });
}

/// Raw pinned memory over the fake device: fresh addresses, events queried on the device.
struct FakeHost {
    next: AtomicU64,
    dev: Arc<Device>,
}

impl RawHostMemory for FakeHost {
    fn alloc(&self, bytes: usize) -> Result<HostPtr> {
        Ok(HostPtr(self.next.fetch_add(bytes as u64, Ordering::Relaxed)))
    }
    fn free(&self, _: HostPtr) -> Result<()> {
        Ok(())
    }
    fn use_done(&self, u: &HostUse) -> Result<bool> {
        Ok(self.dev.is_done(u))
    }
    fn use_release(&self, _: HostUse) {}
}

/// A block freed with a device read in flight is not handed out again until the read's event
/// completed, and is handed out once it has.
#[test]
fn freed_block_waits_for_its_pending_copy() {
    loom::model(|| {
        let dev = Arc::new(Device::new());
        let raw = FakeHost { next: AtomicU64::new(1 << 20), dev: dev.clone() };
        let alloc = std::sync::Arc::new(CachingHostAllocator::new(std::sync::Arc::new(raw)));
        let p = alloc.malloc(4096).unwrap();
        let (d, a) = (dev.clone(), alloc.clone());
        let owner = thread::spawn(move || {
            let u = d.queue(copy_use(0, false));
            a.free(p, vec![u]).unwrap();
        });
        let d = dev.clone();
        let device = thread::spawn(move || d.run(1));
        let q = alloc.malloc(4096).unwrap();
        if q == p {
            assert!(dev.done[0].load(Ordering::Relaxed), "block handed out before its copy completed");
            // SAFETY: loom checks that no copy overlaps this write.
            dev.bytes.with_mut(|b| unsafe { *b = 1 });
        }
        owner.join().unwrap();
        device.join().unwrap();
        assert!(q == p || alloc.malloc(4096).unwrap() == p, "block never reused after its copy completed");
    });
}
