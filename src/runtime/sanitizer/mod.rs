//! The CUDA stream sanitizer (PyTorch's `torch.cuda._sanitizer`, CSAN): every operation that
//! passes the door (`work.rs`; a collective too, before its process group queues it) tells it which byte ranges of device memory it reads and writes,
//! on which stream; event records and waits, synchronizations, host reads that wait, graph
//! replays and frees update the streams' vector clocks (`tracker.rs`). An access that is not
//! ordered after a conflicting access on another stream is refused before it is queued.
//!
//! Off by default: then each hook of the door is one relaxed atomic load. On with
//! `CUDASEM_SANITIZER=1` (read as the runtime starts) or [`enable`]. Inside a CUDA-graph capture
//! the captured streams' accesses are checked in the capture's own order (its events), and a
//! replay is one operation on the replay stream over everything the graph reads and writes.

mod tracker;

use super::capture;
use super::stream_handle::Stream;
use crate::driver::{EventId, GraphId, StreamId};
pub use crate::race::{AccessRace, RaceTensor, RacingAccess, Stack};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
pub(crate) use tracker::Span;
use tracker::{Access, Tracker};

static ENABLED: AtomicBool = AtomicBool::new(false);
static STACKS: AtomicBool = AtomicBool::new(true);

/// Turns the stream sanitizer on (`torch.cuda._sanitizer.enable_cuda_sanitizer()`): from now on,
/// every device operation whose access to memory is not ordered after a conflicting access on
/// another stream is refused with [`Error::UnsynchronizedAccess`](crate::Error::UnsynchronizedAccess).
/// Work queued before it was enabled is not known to it. Also `CUDASEM_SANITIZER=1` in the
/// environment.
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Turns the stream sanitizer off and forgets what it recorded.
pub fn disable() {
    ENABLED.store(false, Ordering::Relaxed);
    *state() = State::default();
}

/// Whether the stream sanitizer is on.
pub fn is_enabled() -> bool {
    enabled()
}

/// Whether the sanitizer captures the stack ([`Stack`]: the innermost frames' addresses) of each
/// access and allocation (on by default; unwinding the stack is a large part of the sanitizer's
/// cost per operation, so it is unwound once per operation: a block an operation allocates for its
/// result takes that operation's stack, and only `Tensor::empty` unwinds as it allocates; frames
/// are resolved to names only when a race is reported). Off, a report names streams, operations and memory
/// without stacks.
pub fn set_stack_traces(on: bool) {
    STACKS.store(on, Ordering::Relaxed);
}

/// The door's check (one relaxed load).
#[inline]
pub(crate) fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// A block of the caching allocator, as the sanitizer knows it.
struct Alloc {
    end: u64,
    stream: StreamId,
    recorded: Vec<StreamId>,
    backtrace: Option<Stack>,
}

#[derive(Default)]
struct State {
    seq: u64,
    eager: Tracker,
    /// By capture id: the order of work inside each capture underway.
    captures: HashMap<u64, Tracker>,
    /// What each captured graph reads and writes (spans, written or only read).
    graphs: HashMap<GraphId, Vec<(Span, bool)>>,
    /// Live blocks by (device, address).
    allocs: BTreeMap<(usize, u64), Alloc>,
}

fn state() -> MutexGuard<'static, State> {
    static STATE: OnceLock<Mutex<State>> = OnceLock::new();
    STATE.get_or_init(Mutex::default).lock().unwrap_or_else(|e| e.into_inner())
}

fn backtrace() -> Option<Stack> {
    STACKS.load(Ordering::Relaxed).then(Stack::capture)
}

/// The most blocks [`PENDING`] holds per thread.
const PENDING_MAX: usize = 64;

thread_local! {
    /// Blocks handed out on this thread since its last checked access, whose allocation stack
    /// is still to come: the next access on the thread that touches one (the operation that
    /// allocated it for its result writes it next) gives it its own stack, one capture for both.
    static PENDING: RefCell<Vec<(usize, u64)>> = const { RefCell::new(Vec::new()) };
    /// Set while a block is allocated for the user (`Tensor::empty`: no access follows in the
    /// same call), whose stack is captured as it is handed out.
    static EAGER: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f`, an allocation for the user that no access of the same call follows: its stack is
/// captured as the block is handed out (every other block takes the stack of the first access
/// that follows on its thread and touches it).
pub(crate) fn eager_allocation_stacks<R>(f: impl FnOnce() -> R) -> R {
    if !enabled() {
        return f();
    }
    let was = EAGER.with(|e| e.replace(true));
    let r = f();
    EAGER.with(|e| e.set(was));
    r
}

/// The blocks of [`PENDING`] that `accesses` touch take `bt` as their allocation stack; the
/// others wait for a later access (an operation may run another before it writes its result).
fn adopt_pending(st: &mut State, accesses: &[(Span, bool)], bt: &Option<Stack>) {
    PENDING.with(|p| {
        p.borrow_mut().retain(|key| {
            let Some(a) = st.allocs.get_mut(key) else { return false };
            let touched = accesses.iter().any(|(s, _)| s.device == key.0 && s.start < a.end && s.end > key.1);
            if touched && a.backtrace.is_none() {
                a.backtrace = bt.clone();
            }
            !touched
        })
    });
}

impl State {
    /// The tracker whose order `stream`'s work follows: its capture's, or the eager one.
    fn tracker(&mut self, stream: StreamId) -> &mut Tracker {
        match capture::of_stream(stream) {
            Some(c) => self.captures.entry(c.id).or_default(),
            None => &mut self.eager,
        }
    }

    fn alloc_of(&self, device: usize, address: u64) -> Option<&Alloc> {
        self.allocs
            .range(..=(device, address))
            .next_back()
            .filter(|((d, _), a)| *d == device && a.end > address)
            .map(|(_, a)| a)
    }
}

/// Checks the accesses `(span, write)` of operation `op` queued on `stream` against every
/// earlier access; records them when none races. The race found first, otherwise (without the
/// tensor: the door names it from its operands).
pub(crate) fn access(
    stream: &Stream,
    op: &dyn Fn() -> String,
    accesses: &[(Span, bool)],
) -> Result<(), Box<AccessRace>> {
    let id = stream.driver_id();
    let mut st = state();
    // One stack per operation: its accesses' and, for the blocks it allocated, theirs.
    let bt = backtrace();
    adopt_pending(&mut st, accesses, &bt);
    let found = {
        let tracker = st.tracker(id);
        accesses
            .iter()
            .filter(|(s, _)| s.end > s.start)
            .find_map(|&(span, write)| tracker.conflict(id, span, write).map(|(p, at)| (p, at, span, write)))
    };
    if let Some((prev, address, span, write)) = found {
        let current =
            RacingAccess { stream: id.0, device: stream.device(), operation: op(), write, backtrace: bt.clone() };
        let allocation = st.alloc_of(span.device, address).and_then(|a| a.backtrace.clone());
        let previous = RacingAccess {
            stream: prev.stream.0,
            device: prev.device,
            operation: prev.op.to_string(),
            write: prev.write,
            backtrace: prev.backtrace.clone(),
        };
        let device = span.device;
        return Err(Box::new(AccessRace {
            device,
            address,
            tensor: None,
            current,
            previous,
            freed: prev.freed,
            allocation,
        }));
    }
    st.seq += 1;
    let seq = st.seq;
    let name: Arc<str> = op().into();
    let tracker = st.tracker(id);
    tracker.tick(id, stream.device(), seq);
    for &(span, write) in accesses.iter().filter(|(s, _)| s.end > s.start) {
        let a = Access {
            stream: id,
            device: stream.device(),
            seq,
            op: name.clone(),
            write,
            backtrace: bt.clone(),
            freed: false,
        };
        tracker.record(span, a);
    }
    Ok(())
}

/// `event` was recorded on `stream`.
pub(crate) fn record_event(stream: &Stream, event: EventId) {
    state().tracker(stream.driver_id()).record_event(stream.driver_id(), stream.device(), event);
}

/// `stream` waits for `event` (called after the capture bookkeeping, so a stream joining a
/// capture by this wait follows the capture's order).
pub(crate) fn wait_event(stream: &Stream, event: EventId) {
    state().tracker(stream.driver_id()).wait_event(stream.driver_id(), stream.device(), event);
}

/// The event was destroyed.
pub(crate) fn event_destroyed(event: EventId) {
    let mut st = state();
    st.eager.forget_event(event);
    st.captures.values_mut().for_each(|t| t.forget_event(event));
}

/// The host waited for `stream` (a synchronize, or a blocking read of its results).
pub(crate) fn host_waits_stream(stream: StreamId) {
    state().eager.host_waits_stream(stream);
}

/// The host waited for `event`.
pub(crate) fn host_waits_event(event: EventId) {
    state().eager.host_waits_event(event);
}

/// The host waited for all work of `device`.
pub(crate) fn host_waits_device(device: usize) {
    state().eager.host_waits_device(device);
}

/// The caching allocator handed out `[ptr, ptr + bytes)` of `device` for work on `stream`.
pub(crate) fn allocated(device: usize, ptr: u64, bytes: usize, stream: StreamId) {
    let stacks = STACKS.load(Ordering::Relaxed);
    let backtrace = if stacks && !EAGER.with(Cell::get) {
        PENDING.with(|p| {
            let mut p = p.borrow_mut();
            if p.len() >= PENDING_MAX {
                p.remove(0); // never touched: that block keeps no allocation stack
            }
            p.push((device, ptr));
        });
        None
    } else {
        backtrace()
    };
    let a = Alloc { end: ptr + bytes.max(1) as u64, stream, recorded: Vec::new(), backtrace };
    state().allocs.insert((device, ptr), a);
}

/// `record_stream(stream)` on the block at `ptr`.
pub(crate) fn record_stream(device: usize, ptr: u64, stream: StreamId) {
    if let Some(a) = state().allocs.get_mut(&(device, ptr)) {
        a.recorded.push(stream);
    }
}

/// The block at `ptr` (of `bytes` bytes, when the allocator knows) goes back to the caching
/// allocator. Uses on other streams that its stream is not ordered after and that
/// `record_stream` did not declare stay on record: the next access to the reused memory that
/// races with them is refused, naming them. A block allocated before the sanitizer was on is
/// simply forgotten (its stream and `record_stream`s are unknown).
pub(crate) fn freed(device: usize, ptr: u64, bytes: Option<usize>) {
    let mut st = state();
    let Some(a) = st.allocs.remove(&(device, ptr)) else {
        if let Some(n) = bytes {
            let span = Span { device, start: ptr, end: ptr + n as u64 };
            st.eager.forget(span);
            st.captures.values_mut().for_each(|t| t.forget(span));
        }
        return;
    };
    let span = Span { device, start: ptr, end: a.end };
    let mut pending = st.eager.free(span, a.stream, &a.recorded);
    for t in st.captures.values_mut() {
        pending = pending.or(t.free(span, a.stream, &a.recorded));
    }
    if let Some(p) = pending {
        tracing::warn!(
            target: "cudasem::sanitizer",
            device,
            ptr,
            "memory freed while stream {:#x} may still use it ({}); call Tensor::record_stream for that stream, \
             or make the allocating stream wait for it, before dropping the tensor",
            p.stream.0,
            p.op
        );
    }
}

/// The capture `id` ended; `graph` is its graph (none: it ended without one).
pub(crate) fn capture_ended(id: u64, graph: Option<GraphId>) {
    let mut st = state();
    if let Some(t) = st.captures.remove(&id) {
        if let Some(g) = graph {
            st.graphs.insert(g, t.summary());
        }
    }
}

/// Checks and records a replay of `graph` on `stream` as one operation over everything it uses.
pub(crate) fn replay(graph: GraphId, stream: &Stream) -> Result<(), Box<AccessRace>> {
    let uses = state().graphs.get(&graph).cloned().unwrap_or_default();
    access(stream, &|| "CUDA graph replay".to_string(), &uses)
}

/// The graph was destroyed.
pub(crate) fn graph_destroyed(graph: GraphId) {
    state().graphs.remove(&graph);
}
