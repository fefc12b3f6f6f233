//! `cuda::set_sync_debug_mode` (PyTorch's `torch.cuda.set_sync_debug_mode`): in `Warn` a call
//! that makes the host wait for the device warns through `tracing` with its call site, in `Error`
//! it is refused with a typed error (and the runtime goes on); asynchronous work is never flagged.
//! The mode is process-wide, so the tests take turns and put it back.

mod common;

use cudasem::cuda::{self, Event, Stream, StreamGuard, SyncDebugMode};
use cudasem::{DType, Device, Error, Result, Tensor};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event as TraceEvent, Metadata, Subscriber};

static SERIAL: Mutex<()> = Mutex::new(());

/// The test's turn; the mode goes back to `Default` when it ends, whatever happened.
struct Turn(#[allow(dead_code)] MutexGuard<'static, ()>);

impl Drop for Turn {
    fn drop(&mut self) {
        cuda::set_sync_debug_mode(SyncDebugMode::Default);
    }
}

fn turn() -> Option<Turn> {
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    common::one_device().then_some(Turn(g))
}

/// A `tracing` subscriber that keeps each sync-debug event's target and fields as text.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<String>>>);

struct Fields(String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, "{}={:?} ", field.name(), value);
    }
}

impl Subscriber for Captured {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, e: &TraceEvent<'_>) {
        // The sync debug mode's warnings only (the allocator's events come through too).
        if e.metadata().target() != "cudasem::sync_debug" {
            return;
        }
        let mut f = Fields(format!("{} ", e.metadata().target()));
        e.record(&mut f);
        self.0.lock().unwrap().push(f.0);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

impl Captured {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

/// Runs `f` with `c` capturing this thread's `tracing` events.
fn capturing<R>(c: &Captured, f: impl FnOnce() -> R) -> R {
    tracing::subscriber::with_default(c.clone(), f)
}

fn data() -> Vec<f32> {
    (0..64).map(|i| ((i * 29 % 17) as f32) * 0.5 - 3.0).collect()
}

#[test]
fn modes_parse_from_pytorchs_names_and_integers() -> Result<()> {
    let Some(_t) = turn() else { return Ok(()) };
    for (s, i, m) in
        [("default", 0, SyncDebugMode::Default), ("warn", 1, SyncDebugMode::Warn), ("error", 2, SyncDebugMode::Error)]
    {
        assert_eq!(s.parse::<SyncDebugMode>()?, m);
        assert_eq!(SyncDebugMode::try_from(i)?, m);
        assert_eq!(i32::from(m), i);
        cuda::set_sync_debug_mode(m);
        assert_eq!(cuda::get_sync_debug_mode(), m);
    }
    for bad in ["loud", "3", ""] {
        assert!(matches!(bad.parse::<SyncDebugMode>(), Err(Error::InvalidArgument { .. })), "{bad}");
    }
    assert!(matches!(SyncDebugMode::try_from(-1), Err(Error::InvalidArgument { .. })));
    Ok(())
}

#[test]
fn warn_flags_each_blocking_call_with_its_call_site() -> Result<()> {
    let Some(_t) = turn() else { return Ok(()) };
    let c = Captured::default();
    let x = Tensor::from_slice(&data(), [64], Device::cuda(0))?;
    let s = Stream::new(0, 0)?;
    cuda::set_sync_debug_mode(SyncDebugMode::Warn);
    let here = file!();
    let calls: [(&str, &dyn Fn() -> Result<()>); 5] = [
        ("Tensor::to_vec", &|| x.to_vec::<f32>().map(drop)),
        ("Tensor::item", &|| x.sum_all()?.item::<f32>().map(drop)),
        ("Stream::synchronize", &|| s.synchronize()),
        ("Event::synchronize", &|| s.record_event(None)?.synchronize()),
        ("cuda::synchronize", &|| cuda::synchronize(0)),
    ];
    for (what, call) in calls {
        capturing(&c, call)?;
        let got = c.take();
        assert_eq!(got.len(), 1, "{what}: {got:?}");
        assert!(got[0].starts_with("cudasem::sync_debug"), "{what}: {got:?}");
        assert!(got[0].contains(here), "{what}: the warning names the caller's file: {got:?}");
    }
    // A blocking copy from pageable host memory waits too.
    capturing(&c, || Tensor::from_slice(&data(), [64], Device::cuda(0)))?;
    assert_eq!(c.take().len(), 1);
    // The values are right: warning does not change what the call does.
    let got = x.to_vec::<f32>()?;
    assert_eq!(got, data());
    Ok(())
}

#[test]
fn asynchronous_work_is_never_flagged() -> Result<()> {
    let Some(_t) = turn() else { return Ok(()) };
    let c = Captured::default();
    let x = Tensor::from_slice(&data(), [64], Device::cuda(0))?;
    let pinned = Tensor::from_slice(&data(), [64], Device::Cpu)?.pin_memory()?;
    let side = Stream::new(0, 0)?;
    cuda::set_sync_debug_mode(SyncDebugMode::Error);
    capturing(&c, || -> Result<()> {
        let y = x.mul(2.0)?.add(&x)?.sum_all()?;
        let dev = {
            let _g = StreamGuard::new(&side)?;
            pinned.to(Device::cuda(0), true)?
        };
        let e = side.record_event(Some(&Event::new(Default::default())))?;
        cuda::current_stream(0)?.wait_event(&e)?;
        dev.record_stream(&cuda::current_stream(0)?)?;
        let back = Tensor::empty_pinned([64], DType::F32)?;
        back.copy_(&dev.add(&x)?, true)?;
        drop(y);
        Ok(())
    })?;
    assert!(c.take().is_empty());
    Ok(())
}

#[test]
fn error_refuses_the_wait_and_the_runtime_goes_on() -> Result<()> {
    let Some(_t) = turn() else { return Ok(()) };
    let x = Tensor::from_slice(&data(), [64], Device::cuda(0))?;
    let s = Stream::new(0, 0)?;
    cuda::set_sync_debug_mode(SyncDebugMode::Error);
    let refused = [
        ("Tensor::to_vec", x.to_vec::<f32>().map(drop)),
        ("Stream::synchronize", s.synchronize()),
        ("cuda::synchronize", cuda::synchronize(0)),
        ("Event::synchronize", s.record_event(None)?.synchronize()),
    ];
    for (what, r) in refused {
        match r {
            Err(Error::SynchronizingOperation { call, location }) => {
                assert!(location.contains(file!()), "{what}: {location}");
                assert!(!call.is_empty());
            }
            other => panic!("{what}: expected SynchronizingOperation, got {other:?}"),
        }
    }
    cuda::set_sync_debug_mode(SyncDebugMode::Default);
    let want: Vec<f32> = data().iter().map(|v| v * 2.0).collect();
    assert_eq!(x.mul(2.0)?.to_vec::<f32>()?, want);
    cuda::synchronize(0)?;
    Ok(())
}
