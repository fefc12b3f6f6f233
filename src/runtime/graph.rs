//! CUDA graphs: [`CUDAGraph`] (`torch.cuda.CUDAGraph`), the [`graph`] context
//! (`torch.cuda.graph`) and [`is_current_stream_capturing`].
//!
//! A capture begins on the current stream of the current device (never the default stream),
//! routes that capture's allocations to a private memory pool (the graph's own, or one given to
//! share), and records the work of every stream that joins it. The rules a capture imposes are
//! checked in `capture.rs`. Beyond PyTorch: the graph keeps alive every tensor storage its work
//! reads or writes that is not of its own pool, so dropping a tensor can never let a replay touch
//! freed or reused memory. Its matrix products' cuBLASLt workspaces (one per capturing stream,
//! `work.rs`) are blocks of its pool, which it holds while it lives and frees on reset or drop.

use super::capture::{self, Capture, KeepAlive};
use super::current::{current_stream, with_stream};
use super::mem_pool::{begin_allocate_to_pool, end_allocate_to_pool, new_graph_pool_id, release_pool};
use super::{current_device, empty_cache, rt, synchronize, Stream};
use crate::alloc::MemPoolId;
use crate::driver::{CaptureMode, GraphId};
use crate::error::{Error, Result};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};

/// `cudaStreamCaptureMode`, as `capture_error_mode` of PyTorch's graph API: which calls a
/// capture refuses (default: [`Global`](CaptureMode::Global)).
pub use crate::driver::CaptureMode as CaptureErrorMode;

/// A graph's use of its private pool, counted by construction and drop: made by routing a
/// capture's allocations to the pool (`beginAllocateToPool`: the pool is made, or one more use of
/// it is taken), it stops the routing when the capture ends ([`PoolUse::end_routing`]) and gives
/// the use back when released or dropped (`releasePool`), whatever path the graph takes.
struct PoolUse {
    device: usize,
    pool: MemPoolId,
    routing: bool,
    held: bool,
}

impl PoolUse {
    /// Routes the allocations on `device` whose stream passes `filter` to `pool`, as one more use
    /// of it.
    fn begin(device: usize, pool: MemPoolId, filter: crate::alloc::StreamFilter) -> Result<PoolUse> {
        begin_allocate_to_pool(device, pool, filter)?;
        Ok(PoolUse { device, pool, routing: true, held: true })
    }

    /// Stops the routing (the use is kept).
    fn end_routing(&mut self) -> Result<()> {
        if !std::mem::take(&mut self.routing) {
            return Ok(());
        }
        end_allocate_to_pool(self.device, self.pool)
    }

    /// Stops the routing if still on and gives the use back.
    fn finish(&mut self) -> Result<()> {
        let routed = self.end_routing();
        let released = if std::mem::take(&mut self.held) { release_pool(self.device, self.pool) } else { Ok(()) };
        routed.and(released)
    }

    /// [`PoolUse::finish`], reporting its error (dropping reports it as the device's).
    fn release(mut self) -> Result<()> {
        self.finish()
    }
}

impl Drop for PoolUse {
    fn drop(&mut self) {
        if let Err(e) = self.finish() {
            super::record_device_error(self.device, e);
        }
    }
}

/// A capture underway.
struct Pending {
    capture: Arc<Capture>,
    stream: Stream,
    pool_use: PoolUse,
}

/// A captured graph.
struct Captured {
    device: usize,
    graph: GraphId,
    nodes: usize,
    /// Storages the graph's work uses that are not of its pool, and its matrix products'
    /// workspaces, blocks of its pool (dropped with the graph, before it releases the pool:
    /// fields drop in order).
    keep: Vec<KeepAlive>,
    /// The generators the graph draws from: each replay first runs their prologue (which holds
    /// the slot, a block of the pool: dropped before the pool is released).
    rng: Vec<(capture::RngReplay, u64)>,
    pool_use: PoolUse,
}

enum State {
    Empty,
    Capturing(Pending),
    Captured(Captured),
}

/// `torch.cuda.CUDAGraph`: work captured once on a stream and replayed with one launch.
///
/// ```no_run
/// # fn main() -> cudasem::Result<()> {
/// use cudasem::{cuda, Tensor};
/// use cudasem::{DType, Device};
/// let x = Tensor::randn([1024], DType::F32, Device::cuda(0))?;
/// let mut g = cuda::CUDAGraph::new();
/// let y = cuda::graph(&mut g, cuda::GraphOptions::default(), || x.mul(2.0)?.add(1.0))?;
/// x.copy_(&Tensor::randn([1024], DType::F32, Device::cuda(0))?, false)?; // new data into the captured input
/// g.replay()?; // y now holds 2x + 1 for the new x
/// # Ok(()) }
/// ```
pub struct CUDAGraph {
    state: State,
    /// The pool of the last capture (what [`CUDAGraph::pool`] reports).
    pool: Option<MemPoolId>,
}

impl std::fmt::Debug for CUDAGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::Empty => "empty",
            State::Capturing(_) => "capturing",
            State::Captured(_) => "captured",
        };
        f.debug_struct("CUDAGraph").field("state", &state).field("pool", &self.pool).finish()
    }
}

impl Default for CUDAGraph {
    fn default() -> Self {
        Self::new()
    }
}

fn state_error(op: &'static str, reason: impl Into<String>) -> Error {
    Error::GraphState { op, reason: reason.into() }
}

impl CUDAGraph {
    /// An empty graph.
    pub fn new() -> CUDAGraph {
        CUDAGraph { state: State::Empty, pool: None }
    }

    /// Begins capturing the work queued on the current stream of the current device (and on
    /// streams that join it). Its allocations go to `pool` (shared with the graphs captured into
    /// the same pool; [`graph_pool_handle`](crate::cuda::graph_pool_handle)) or, for `None`, a
    /// pool of the graph's own.
    pub fn capture_begin(&mut self, pool: Option<MemPoolId>, mode: CaptureErrorMode) -> Result<()> {
        self.begin(pool, mode, false)
    }

    fn begin(&mut self, pool: Option<MemPoolId>, mode: CaptureMode, allow_host_ops: bool) -> Result<()> {
        match self.state {
            State::Empty => {}
            State::Capturing(_) => {
                return Err(state_error("CUDAGraph::capture_begin", "a capture is already underway"))
            }
            State::Captured(_) => {
                return Err(state_error("CUDAGraph::capture_begin", "the graph holds a capture; call reset() first"))
            }
        }
        let stream = current_stream(None)?;
        if stream.is_default() {
            return Err(state_error(
                "CUDAGraph::capture_begin",
                "CUDA graphs must be captured on a non-default stream (Stream::new, or cuda::graph which picks \
                 one); after capture, replaying on the default stream is fine",
            ));
        }
        if capture::of_stream(stream.driver_id()).is_some() {
            return Err(state_error("CUDAGraph::capture_begin", format!("{stream:?} is already capturing")));
        }
        let (device, pool) = (stream.device(), pool.unwrap_or_else(new_graph_pool_id));
        let cap = capture::begin(device, stream.driver_id(), mode, allow_host_ops, pool);
        let member = cap.clone();
        let pool_use = match PoolUse::begin(device, pool, Arc::new(move |s| member.is_member(s))) {
            Ok(u) => u,
            Err(e) => {
                capture::end(&cap);
                return Err(e);
            }
        };
        if let Err(e) = rt()?.driver.begin_capture(stream.driver_id(), mode) {
            drop(pool_use);
            capture::end(&cap);
            return Err(e);
        }
        tracing::debug!(
            target: "cudasem::graph",
            device,
            stream = stream.driver_id().0,
            capture = cap.id,
            pool = ?pool,
            mode = ?mode,
            "graph capture began on cuda:{device}"
        );
        self.pool = Some(pool);
        self.state = State::Capturing(Pending { capture: cap, stream, pool_use });
        Ok(())
    }

    /// Ends the capture on the stream it began on (the current stream) and makes the graph
    /// ready to replay. A capture that a refused call invalidated, or that left a joined stream
    /// unjoined, ends without a graph and reports why.
    pub fn capture_end(&mut self) -> Result<()> {
        let State::Capturing(p) = &self.state else {
            return Err(state_error("CUDAGraph::capture_end", "no capture is underway; call capture_begin first"));
        };
        let current = current_stream(p.stream.device())?;
        if current != p.stream {
            return Err(state_error(
                "CUDAGraph::capture_end",
                format!("the capture must end on the stream it began on ({:?}), not {current:?}", p.stream),
            ));
        }
        let State::Capturing(mut p) = std::mem::replace(&mut self.state, State::Empty) else { unreachable!() };
        let (device, rt) = (p.stream.device(), rt()?);
        let ended = rt.driver.end_capture(p.stream.driver_id());
        let _ = p.pool_use.end_routing();
        let finished = p.capture.finish();
        let rng = p.capture.take_rng();
        capture::end(&p.capture);
        let graph = match (finished, ended) {
            (Ok(keep), Ok(graph)) => (keep, graph),
            (finished, ended) => {
                if let Ok(g) = ended {
                    rt.driver.graph_destroy(g);
                }
                let _ = p.pool_use.release();
                super::sanitizer::capture_ended(p.capture.id, None);
                let e = finished.err().or(ended.err()).unwrap_or_else(|| Error::Internal {
                    op: "CUDAGraph::capture_end",
                    reason: "capture failed without an error".into(),
                });
                tracing::warn!(target: "cudasem::graph", device, capture = p.capture.id, error = %e, "graph capture failed: {e}");
                return Err(e);
            }
        };
        let (keep, graph) = graph;
        if super::sanitizer::enabled() {
            super::sanitizer::capture_ended(p.capture.id, Some(graph));
        }
        let nodes = rt.driver.graph_node_count(graph).unwrap_or(0);
        tracing::debug!(target: "cudasem::graph", device, capture = p.capture.id, nodes, "graph capture ended on cuda:{device}");
        self.state = State::Captured(Captured { device, graph, nodes, keep, pool_use: p.pool_use, rng });
        Ok(())
    }

    /// Ends a capture without keeping a graph (after an error in the captured code).
    fn abandon(&mut self) {
        let State::Capturing(mut p) = std::mem::replace(&mut self.state, State::Empty) else { return };
        if let Ok(rt) = rt() {
            if let Ok(g) = rt.driver.end_capture(p.stream.driver_id()) {
                rt.driver.graph_destroy(g);
            }
        }
        let _ = p.pool_use.end_routing();
        capture::end(&p.capture);
        super::sanitizer::capture_ended(p.capture.id, None);
        let _ = p.pool_use.release();
    }

    /// Queues the captured work on the current stream of the graph's device (any stream, the
    /// default one included); the host does not wait.
    pub fn replay(&self) -> Result<()> {
        let State::Captured(c) = &self.state else {
            return Err(state_error("CUDAGraph::replay", "nothing captured yet; capture first (cuda::graph)"));
        };
        let _range = super::nvtx::op_range(|| "CUDAGraph::replay".into());
        let stream = current_stream(c.device)?;
        if let Some(cap) = capture::of_stream(stream.driver_id()) {
            return Err(state_error(
                "CUDAGraph::replay",
                format!("{stream:?} is capturing (id {}); replay the graph outside the capture", cap.id),
            ));
        }
        if super::sanitizer::enabled() {
            super::sanitizer::replay(c.graph, &stream).map_err(|report| Error::UnsynchronizedAccess { report })?;
        }
        // The generators' seeds and offsets go into the graph's slots first, in stream order,
        // and each generator advances by the blocks the graph's draws take.
        for (prologue, blocks) in &c.rng {
            prologue(&stream, *blocks)?;
        }
        rt()?.driver.graph_launch(c.graph, stream.driver_id())
    }

    /// Drops the captured graph (or ends a capture underway without a graph) and gives back its
    /// use of the pool: once no graph or tensor uses the pool, `empty_cache` returns its memory.
    pub fn reset(&mut self) -> Result<()> {
        match std::mem::replace(&mut self.state, State::Empty) {
            State::Empty => Ok(()),
            s @ State::Capturing(_) => {
                self.state = s;
                self.abandon();
                Ok(())
            }
            State::Captured(c) => {
                super::sanitizer::graph_destroyed(c.graph);
                rt()?.driver.graph_destroy(c.graph);
                // Blocks of the pool it kept (workspaces, the generators' slots) go back to the
                // pool first.
                drop(c.rng);
                drop(c.keep);
                c.pool_use.release()
            }
        }
    }

    /// The id of the memory pool the graph's capture allocates from (pass it to another
    /// capture to share the pool).
    pub fn pool(&self) -> Result<MemPoolId> {
        self.pool.ok_or_else(|| state_error("CUDAGraph::pool", "called before capture_begin"))
    }

    /// Writes the captured graph as a Graphviz DOT file (`cudaGraphDebugDotPrint`).
    pub fn debug_dump(&self, path: impl AsRef<std::path::Path>) -> Result<()> {
        let State::Captured(c) = &self.state else {
            return Err(state_error("CUDAGraph::debug_dump", "nothing captured yet"));
        };
        rt()?.driver.graph_debug_dot(c.graph, path.as_ref())
    }

    /// How many nodes (kernels, copies, fills) the captured graph has (0 before a capture).
    pub fn node_count(&self) -> usize {
        match &self.state {
            State::Captured(c) => c.nodes,
            _ => 0,
        }
    }

    /// Whether a capture is underway.
    pub fn is_capturing(&self) -> bool {
        matches!(self.state, State::Capturing(_))
    }
}

impl Drop for CUDAGraph {
    fn drop(&mut self) {
        let _ = self.reset();
    }
}

/// What `torch.cuda.graph(g, pool=…, stream=…, capture_error_mode=…)` takes.
#[derive(Debug, Clone, Default)]
pub struct GraphOptions {
    /// The pool to allocate from (`None`: the graph's own).
    pub pool: Option<MemPoolId>,
    /// The stream to capture on (`None`: a side stream of cudasem's, one per device). Never
    /// the default stream.
    pub stream: Option<Stream>,
    /// Which calls the capture refuses.
    pub capture_error_mode: CaptureErrorMode,
    /// Let host (CPU) tensor ops run inside the capture. They run once, now; a replay skips
    /// them (PyTorch's behaviour, and its silent error). Off: they are a typed error.
    pub allow_host_ops: bool,
}

/// The per-device side streams [`graph`] captures on when given none (PyTorch keeps one too).
fn capture_stream(device: usize) -> Result<Stream> {
    static STREAMS: OnceLock<Vec<OnceLock<Stream>>> = OnceLock::new();
    let rt = rt()?;
    let slots = STREAMS.get_or_init(|| (0..rt.devices.len()).map(|_| OnceLock::new()).collect());
    let slot = slots.get(device).ok_or_else(|| rt.bad_index(device))?;
    if let Some(s) = slot.get() {
        return Ok(s.clone());
    }
    // A stream of its own, not one of the pool's: other code handed the same pool stream would
    // have its work captured.
    let s = Stream::from_parts(device, rt.driver.create_stream(device, 0)?, 0, false);
    Ok(slot.get_or_init(|| s).clone())
}

/// `with torch.cuda.graph(g, …):` — synchronizes the device, frees the cache, and captures what
/// `f` queues on the current device, on `options.stream` or a side stream of its own, into `g`.
/// The capture ends also when `f` fails (its error is returned, no graph is kept) or panics (the
/// panic continues after the capture has ended).
///
/// The closure may return any error type `E` with `From<cudasem::Error>` (your own error enum,
/// `Box<dyn std::error::Error>`, `anyhow::Error`), so `?` works inside it on cudasem's errors and
/// on yours; cudasem's own errors of the call come back converted. In a function returning
/// cudasem's [`Result`], `E` is `cudasem::Error` without saying so; elsewhere a closure that ends in
/// `Ok(..)` names it once: `Ok::<_, MyError>(value)`.
pub fn graph<R, E: From<Error>>(
    g: &mut CUDAGraph,
    options: GraphOptions,
    f: impl FnOnce() -> Result<R, E>,
) -> Result<R, E> {
    let device = current_device()?;
    synchronize(device)?;
    empty_cache()?;
    let stream = match options.stream {
        Some(s) => s,
        None => capture_stream(device)?,
    };
    with_stream(&stream, || {
        g.begin(options.pool, options.capture_error_mode, options.allow_host_ops)?;
        match catch_unwind(AssertUnwindSafe(f)) {
            Ok(Ok(value)) => Ok(g.capture_end().map(|()| value)?),
            Ok(Err(e)) => {
                g.abandon();
                Err(e)
            }
            Err(panic) => {
                g.abandon();
                resume_unwind(panic)
            }
        }
    })
}

/// `torch.cuda.is_current_stream_capturing()`: whether the current stream of the current
/// device is capturing (it began a capture or joined one).
pub fn is_current_stream_capturing() -> Result<bool> {
    let stream = current_stream(None)?;
    Ok(capture::of_stream(stream.driver_id()).is_some())
}
