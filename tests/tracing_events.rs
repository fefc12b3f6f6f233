//! cudasem's `tracing` events, with their structured fields: the caching allocator's segments
//! allocated and freed, `empty_cache`, out of memory (with PyTorch's message), graph captures
//! beginning and ending (`cudasem::alloc`, `cudasem::graph`), and the distributed watchdog's
//! timeout and abort (`cudasem::distributed`, from the watchdog's own thread). Each test
//! collects the events of its own thread with `tracing::subscriber::with_default`; the watchdog
//! test installs a process-wide collector once. The tests take turns: an `empty_cache` (which
//! `cuda::graph` and the last retry before out of memory also do) frees every cached segment,
//! another test's too.

mod common;
mod dist_util;

use cudasem::cuda::{self, CUDAGraph, GraphOptions};
use cudasem::distributed::{ProcessGroup, ReduceOp};
use cudasem::{DType, Device, Error, Result, Tensor};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

static SERIAL: Mutex<()> = Mutex::new(());

fn turn() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// One event as seen: its target, level and fields (the message under `message`).
#[derive(Debug, Clone)]
struct Seen {
    target: String,
    level: Level,
    fields: BTreeMap<String, String>,
}

impl Seen {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
    fn num(&self, name: &str) -> Option<u64> {
        self.field(name)?.parse().ok()
    }
    fn message(&self) -> &str {
        self.field("message").unwrap_or_default()
    }
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0.insert(field.name().into(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }
}

/// A layer that keeps every event of cudasem's targets.
#[derive(Clone, Default)]
struct Collect(Arc<Mutex<Vec<Seen>>>);

impl<S: Subscriber> Layer<S> for Collect {
    fn on_event(&self, e: &Event<'_>, _: Context<'_, S>) {
        let meta = e.metadata();
        if !meta.target().starts_with("cudasem") {
            return;
        }
        let mut fields = BTreeMap::new();
        e.record(&mut Fields(&mut fields));
        let seen = Seen { target: meta.target().into(), level: *meta.level(), fields };
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(seen);
    }
}

impl Collect {
    fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Runs `f` with this thread's events collected; returns its value and the events.
fn collecting<R>(f: impl FnOnce() -> R) -> (R, Vec<Seen>) {
    let c = Collect::default();
    let r = tracing::subscriber::with_default(tracing_subscriber::registry().with(c.clone()), f);
    (r, c.take())
}

fn find<'a>(events: &'a [Seen], target: &str, message: &str) -> Vec<&'a Seen> {
    events.iter().filter(|e| e.target == target && e.message().starts_with(message)).collect()
}

/// A segment the allocator gets from the driver is one `segment allocated` event with its
/// device, stream, size and address; `empty_cache` gives it back (`segment freed`, same
/// address and size) and reports what it released.
#[test]
fn segments_allocated_and_freed_and_empty_cache_are_events() -> Result<()> {
    let _turn = turn();
    if !common::one_device() {
        return Ok(());
    }
    let device = common::last_device();
    let mut rng = StdRng::seed_from_u64(42);
    // Past the 20 MiB large segments, and larger than any segment another test of this file
    // leaves cached: a segment of its own.
    let n = (21 << 20) / 4 + rng.random_range(1..4096usize);
    let data: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
    let (made, events) = collecting(|| Tensor::from_slice(&data, [n], Device::cuda(device)));
    let t = made?;
    let allocated = find(&events, "cudasem::alloc", "segment allocated");
    let seg = allocated
        .iter()
        .find(|e| e.num("size").is_some_and(|s| s as usize >= n * 4))
        .unwrap_or_else(|| panic!("no segment of {} bytes in {events:?}", n * 4));
    assert_eq!(seg.level, Level::DEBUG);
    assert_eq!(seg.num("device"), Some(device as u64));
    assert_eq!(seg.field("pool"), Some("Large"));
    assert_eq!(seg.field("private_pool"), Some("false"));
    assert!(seg.num("stream").is_some() && seg.num("address").is_some_and(|a| a != 0), "{seg:?}");
    let back = t.to_vec::<f32>()?;
    assert_eq!(back, data);
    drop(t);
    let (emptied, events) = collecting(cuda::empty_cache);
    emptied?;
    let freed = find(&events, "cudasem::alloc", "segment freed");
    assert!(
        freed.iter().any(|e| e.num("address") == seg.num("address") && e.num("size") == seg.num("size")),
        "the segment went back: {events:?}"
    );
    let flushed = find(&events, "cudasem::alloc", "empty_cache released");
    let mine = flushed.iter().find(|e| e.num("device") == Some(device as u64)).expect("empty_cache's event");
    assert!(mine.num("released").is_some_and(|r| r >= seg.num("size").unwrap_or(u64::MAX)), "{mine:?}");
    Ok(())
}

/// A request larger than the device is a typed error and one `warn` event carrying PyTorch's
/// message and the sizes; the allocator goes on serving requests after it.
#[test]
fn out_of_memory_is_a_warning_with_the_errors_message() -> Result<()> {
    let _turn = turn();
    if !common::one_device() {
        return Ok(());
    }
    let (_, total) = cuda::mem_get_info(0)?;
    let n = total / 2 + (1 << 20); // two bytes each: beyond the device
    let (r, events) = collecting(|| Tensor::zeros([n], DType::F16, Device::cuda(0)));
    let Err(e @ Error::OutOfMemory { .. }) = r else { panic!("expected OutOfMemory, got {r:?}") };
    let oom = find(&events, "cudasem::alloc", "out of memory");
    assert_eq!(oom.len(), 1, "{events:?}");
    let oom = oom[0];
    assert_eq!(oom.level, Level::WARN);
    assert_eq!(oom.message(), format!("out of memory: {e}"));
    assert!(oom.num("requested").is_some_and(|r| r as usize >= n * 2), "{oom:?}");
    assert_eq!(oom.num("total"), Some(total as u64));
    assert_eq!(oom.num("device"), Some(0));
    let ok = Tensor::full([8], 3.5, DType::F32, Device::cuda(0))?;
    assert_eq!(ok.to_vec::<f32>()?, [3.5; 8], "the runtime goes on after the error");
    Ok(())
}

/// A capture's beginning and end are events naming the device, the stream, the capture's id and
/// pool, and the graph's nodes; the graph computes what eager work does.
#[test]
fn graph_captures_begin_and_end_as_events() -> Result<()> {
    let _turn = turn();
    if !common::one_device() {
        return Ok(());
    }
    let x = Tensor::from_slice(&[0.5f32, -1.25, 2.0, 3.0], [4], Device::cuda(0))?;
    let mut g = CUDAGraph::new();
    let (y, events) = collecting(|| cuda::graph(&mut g, GraphOptions::default(), || x.mul(3.0)));
    let y = y?;
    g.replay()?;
    assert_eq!(y.to_vec::<f32>()?, [1.5, -3.75, 6.0, 9.0]);
    let began = find(&events, "cudasem::graph", "graph capture began");
    let ended = find(&events, "cudasem::graph", "graph capture ended");
    assert_eq!((began.len(), ended.len()), (1, 1), "{events:?}");
    assert_eq!(began[0].field("capture"), ended[0].field("capture"));
    assert_eq!(began[0].num("device"), Some(0));
    assert!(began[0].num("stream").is_some() && began[0].field("pool").is_some(), "{:?}", began[0]);
    assert!(ended[0].num("nodes").is_some_and(|n| n >= 1), "{:?}", ended[0]);
    Ok(())
}

/// The process-wide collector (events of the watchdog's thread), installed once.
fn global() -> &'static Collect {
    static GLOBAL: OnceLock<Collect> = OnceLock::new();
    GLOBAL.get_or_init(|| {
        let c = Collect::default();
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(c.clone()))
            .expect("no other global subscriber in this test binary");
        c
    })
}

/// A collective that cannot finish within the group's timeout is an `error` event naming it,
/// then the watchdog's abort with its cause, both from the watchdog's thread.
#[test]
fn the_watchdogs_timeout_and_abort_are_error_events() -> Result<()> {
    let _turn = turn();
    if !common::one_device() {
        return Ok(());
    }
    let global = global();
    let solo = ProcessGroup::from_devices_with(&[0], &dist_util::quick(200))?.remove(0);
    let t = Tensor::ones([4], DType::F32, "cuda:0")?;
    solo.all_reduce(&t, ReduceOp::Sum, false)?;
    cuda::synchronize(0)?;
    cudasem::testing::delay(solo.comm_stream(), std::time::Duration::from_secs(2))?;
    let outcome = solo.all_reduce(&t, ReduceOp::Sum, true)?.wait_blocking();
    assert!(matches!(outcome, Err(Error::DistributedTimeout { timeout_ms: 200, .. })), "{outcome:?}");
    let events = global.take();
    let timeouts = find(&events, "cudasem::distributed", "collective timed out");
    let timeout = timeouts
        .iter()
        .find(|e| e.field("collective").is_some_and(|c| c.contains("all_reduce (collective #2)")))
        .unwrap_or_else(|| panic!("no timeout event: {events:?}"));
    assert_eq!((timeout.level, timeout.num("timeout_ms"), timeout.num("rank")), (Level::ERROR, Some(200), Some(0)));
    let aborts = find(&events, "cudasem::distributed", "the watchdog aborted the process group");
    let Err(cause) = &outcome else { unreachable!() };
    assert!(aborts.iter().any(|e| e.field("cause") == Some(cause.to_string().as_str())), "{events:?}");
    // The abort is left on the device as its pending error; taken, the runtime goes on.
    drop(solo);
    let _ = cuda::get_last_error(0);
    cuda::synchronize(0)?;
    Ok(())
}
