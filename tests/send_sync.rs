//! Which public types may cross threads: handles and values are `Send + Sync`; the guards, which
//! change the creating thread's context, are neither (like tokio's context guards).

mod common;

use common::{last_device, ms};
use cudasem::alloc::{CachingHostAllocator, HostUse};
use cudasem::cuda::{self, DeviceGuard, DeviceProperties, Event, EventFlags, Stream, StreamGuard};
use cudasem::driver::sim::{PeerSpec, SimConfig, SimDriver};
use cudasem::driver::{DevicePtr, Driver, DriverKind, EventId, HostPtr, StreamId};
use cudasem::testing::{self, RawBuffer};
use cudasem::{Device, Error, Result};
use std::sync::Arc;

fn assert_send_sync<T: ?Sized + Send + Sync>() {}

#[test]
fn public_types_are_send_and_sync() {
    assert_send_sync::<Stream>();
    assert_send_sync::<Event>();
    assert_send_sync::<EventFlags>();
    assert_send_sync::<Device>();
    assert_send_sync::<Error>();
    assert_send_sync::<DeviceProperties>();
    assert_send_sync::<cuda::DeviceUuid>();
    assert_send_sync::<cuda::GpuProcesses>();
    assert_send_sync::<cudasem::top::Sample>();
    assert_send_sync::<cudasem::top::Demo>();
    assert_send_sync::<RawBuffer>();
    assert_send_sync::<SimDriver>();
    assert_send_sync::<SimConfig>();
    assert_send_sync::<PeerSpec>();
    assert_send_sync::<dyn Driver>();
    assert_send_sync::<Arc<dyn Driver>>();
    assert_send_sync::<DriverKind>();
    assert_send_sync::<DevicePtr>();
    assert_send_sync::<StreamId>();
    assert_send_sync::<EventId>();
    assert_send_sync::<Result<Stream>>();
    assert_send_sync::<HostPtr>();
    assert_send_sync::<HostUse>();
    assert_send_sync::<CachingHostAllocator>();
    assert_send_sync::<cuda::HostMemoryStats>();
    assert_send_sync::<cudasem::Tensor>();
    assert_send_sync::<cudasem::Config>();
    assert_send_sync::<cuda::AllocatorSettings>();
    assert_send_sync::<cuda::Snapshot>();
    assert_send_sync::<cuda::MemoryStats>();
    assert_send_sync::<cudasem::DlpackStream>();
    assert_send_sync::<cudasem::dlpark::versioned::Dlpack>();
}

/// Implemented twice for `Send` types, so `<T as AmbiguousIfSend<_>>::some_item()` only compiles
/// when `T` is not `Send` (the trick behind `static_assertions::assert_not_impl_any!`).
trait AmbiguousIfSend<A> {
    fn some_item() {}
}
impl<T: ?Sized> AmbiguousIfSend<()> for T {}
impl<T: ?Sized + Send> AmbiguousIfSend<u8> for T {}

/// The same for `Sync`.
trait AmbiguousIfSync<A> {
    fn some_item() {}
}
impl<T: ?Sized> AmbiguousIfSync<()> for T {}
impl<T: ?Sized + Sync> AmbiguousIfSync<u8> for T {}

#[test]
fn guards_are_not_send_nor_sync() {
    <DeviceGuard as AmbiguousIfSend<_>>::some_item();
    <StreamGuard as AmbiguousIfSend<_>>::some_item();
    <DeviceGuard as AmbiguousIfSync<_>>::some_item();
    <StreamGuard as AmbiguousIfSync<_>>::some_item();
}

#[test]
fn streams_events_and_buffers_can_be_moved_to_and_used_from_another_thread() -> Result<()> {
    let d = last_device();
    let s = Stream::new(Some(d), 0)?;
    let e = Event::new(EventFlags::default());
    let buf = RawBuffer::new(Some(d), 1024)?;
    let (s2, e2) = (s.clone(), e.clone());
    let worker = std::thread::spawn(move || -> Result<RawBuffer> {
        testing::delay(&s2, ms(200))?;
        buf.fill(0x42, &s2)?;
        e2.record(Some(&s2))?;
        assert_eq!(cuda::current_device()?, 0, "using a stream does not change the thread's device");
        Ok(buf)
    });
    let buf = worker.join().unwrap()?;
    assert_eq!(e.device(), Some(d), "the record made on the other thread is seen here");
    e.synchronize()?;
    assert!(e.query()?);
    assert!(buf.read(&s)?.iter().all(|&b| b == 0x42), "the fill queued on the other thread ran");

    // Shared by reference across scoped threads.
    std::thread::scope(|scope| -> Result<()> {
        let h = scope.spawn(|| -> Result<bool> {
            e.synchronize()?;
            s.synchronize()?;
            e.query()
        });
        assert!(h.join().unwrap()?);
        Ok(())
    })
}
