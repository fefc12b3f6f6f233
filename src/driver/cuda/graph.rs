//! Stream capture and CUDA graphs: `cuStreamBeginCapture_v2` / `cuStreamEndCapture`, graphs
//! instantiated with auto-free-on-launch and node priorities, uploaded, launched with
//! `cuGraphLaunch`.
//!
//! Two things keep a capture valid whatever else the process does:
//! * While any capture is underway ([`capturing`](super::capture::capturing)), the driver calls that may allocate device
//!   memory or load a module (`cuMemAlloc`, `cuMemCreate`, kernel modules on first use, scratch
//!   memory) run in the thread's *relaxed* capture mode ([`relaxed`]), as PyTorch's
//!   `cudaMallocMaybeCapturing` does: in global mode they would invalidate the capture.
//! * A capturing stream's kernels get scratch memory of their own capture (`ctx.rs` keys it by
//!   the capture id), which the graph owns and frees when it is destroyed: a replay never
//!   shares scratch with eager work on the stream that captured it. A matrix product's cuBLASLt
//!   workspace comes with the op instead: the runtime gives a captured product a block of the
//!   capture's private pool (one per capturing stream), which the graph keeps.

use super::capture::{capture_id, relaxed, CAPTURING};
use super::driver::CudaDriver;
use super::graph_table::{Entry, RawExec, RawGraph};
use super::status::{driver_error, lock, DRIVER};
use crate::driver::{CaptureMode, GraphId, StreamId};
use crate::error::{Error, Result};
use cudarc::driver::result as cu;
use cudarc::driver::sys;
use std::sync::atomic::Ordering;

fn mode_of(mode: CaptureMode) -> sys::CUstreamCaptureMode {
    use sys::CUstreamCaptureMode::*;
    match mode {
        CaptureMode::Global => CU_STREAM_CAPTURE_MODE_GLOBAL,
        CaptureMode::ThreadLocal => CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        CaptureMode::Relaxed => CU_STREAM_CAPTURE_MODE_RELAXED,
    }
}

/// Frees scratch memory a graph owned (in relaxed mode: another capture may be underway).
fn free_scratch(scratch: &[u64]) {
    relaxed(|| {
        for &p in scratch {
            // SAFETY: allocated by `cuMemAlloc` for this graph's capture and owned by it alone;
            // the graph's launches are done (the caller synchronized or destroys it after them).
            let _ = unsafe { cu::free_sync(p) };
        }
    })
}

impl CudaDriver {
    pub(super) fn cu_begin_capture(&self, stream: StreamId, mode: CaptureMode) -> Result<()> {
        let s = self.stream(stream, "begin_capture")?;
        self.enter(s.device)?;
        // SAFETY: a live stream of the current context, not the legacy default stream (the runtime
        // refuses that), with a valid mode.
        unsafe { sys::cuStreamBeginCapture_v2(s.raw.0, mode_of(mode)) }
            .result()
            .map_err(|e| driver_error("cuStreamBeginCapture", e))?;
        let id = capture_id(s.raw.0).unwrap_or(0);
        lock(&self.graphs.captures).insert(stream.0, id);
        CAPTURING.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    pub(super) fn cu_end_capture(&self, stream: StreamId) -> Result<GraphId> {
        let s = self.stream(stream, "end_capture")?;
        let dev = self.enter(s.device)?;
        let Some(capture) = lock(&self.graphs.captures).remove(&stream.0) else {
            return Err(Error::Internal { op: "end_capture", reason: format!("stream {} is not capturing", stream.0) });
        };
        let mut graph: sys::CUgraph = std::ptr::null_mut();
        // SAFETY: the stream began a capture on this thread's context; `graph` receives its graph.
        let ended = unsafe { sys::cuStreamEndCapture(s.raw.0, &mut graph) }.result();
        CAPTURING.fetch_sub(1, Ordering::Relaxed);
        let scratch = dev.ops.launcher.take_capture_scratch(capture);
        if let Err(e) = ended {
            free_scratch(&scratch);
            if !graph.is_null() {
                // SAFETY: the graph the failed capture returned, owned here and destroyed once.
                let _ = unsafe { sys::cuGraphDestroy(graph) };
            }
            return Err(driver_error("cuStreamEndCapture", e));
        }
        match Self::instantiate(graph, s.raw.0) {
            Ok(exec) => {
                let id = self.next_id();
                let entry = Entry { device: s.device, graph: RawGraph(graph), exec: RawExec(exec), scratch };
                lock(&self.graphs.entries).insert(id, entry);
                Ok(GraphId(id))
            }
            Err(e) => {
                free_scratch(&scratch);
                // SAFETY: the captured graph, owned here and destroyed once.
                let _ = unsafe { sys::cuGraphDestroy(graph) };
                Err(e)
            }
        }
    }

    /// Instantiates `graph` (auto-free on launch, node priorities) and uploads it on `stream`.
    fn instantiate(graph: sys::CUgraph, stream: sys::CUstream) -> Result<sys::CUgraphExec> {
        let flags = sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH.0
            | sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY.0;
        let mut exec: sys::CUgraphExec = std::ptr::null_mut();
        // SAFETY: `graph` is a live graph of the current context; `exec` receives the executable.
        unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, flags as u64) }
            .result()
            .map_err(|e| driver_error("cuGraphInstantiateWithFlags", e))?;
        // SAFETY: a live executable graph and a live stream of the current context.
        if let Err(e) = unsafe { sys::cuGraphUpload(exec, stream) }.result() {
            // SAFETY: the executable just made, destroyed once.
            let _ = unsafe { sys::cuGraphExecDestroy(exec) };
            return Err(driver_error("cuGraphUpload", e));
        }
        Ok(exec)
    }

    fn graph_entry<R>(&self, graph: GraphId, f: impl FnOnce(&Entry) -> R) -> Result<R> {
        let entries = lock(&self.graphs.entries);
        let e = entries
            .get(&graph.0)
            .ok_or_else(|| Error::Internal { op: "graph", reason: format!("unknown graph handle {}", graph.0) })?;
        Ok(f(e))
    }

    pub(super) fn cu_graph_launch(&self, graph: GraphId, stream: StreamId) -> Result<()> {
        let s = self.stream(stream, "graph_launch")?;
        let (device, exec) = self.graph_entry(graph, |e| (e.device, e.exec))?;
        if device != s.device {
            return Err(Error::Unsupported {
                op: "CUDAGraph::replay",
                driver: DRIVER,
                reason: format!("the graph was captured on cuda:{device}; replay it on a stream of that device"),
            });
        }
        self.enter(device)?;
        // SAFETY: a live executable graph of this context and a live stream of the same context.
        unsafe { sys::cuGraphLaunch(exec.0, s.raw.0) }.result().map_err(|e| driver_error("cuGraphLaunch", e))
    }

    pub(super) fn cu_graph_destroy(&self, graph: GraphId) {
        let Some(e) = lock(&self.graphs.entries).remove(&graph.0) else { return };
        if self.enter(e.device).is_err() {
            return;
        }
        // SAFETY: removed from the table, so destroyed exactly once; launches already queued
        // complete (CUDA keeps an executable graph alive until its launches are done).
        unsafe {
            let _ = sys::cuGraphExecDestroy(e.exec.0);
            let _ = sys::cuGraphDestroy(e.graph.0);
        }
        if !e.scratch.is_empty() {
            // Scratch is freed synchronously: first let the graph's launches finish.
            let _ = relaxed(cu::ctx::synchronize);
            free_scratch(&e.scratch);
        }
    }

    pub(super) fn cu_graph_node_count(&self, graph: GraphId) -> Result<usize> {
        let (device, g) = self.graph_entry(graph, |e| (e.device, e.graph))?;
        self.enter(device)?;
        let mut n = 0usize;
        // SAFETY: a live graph; a null node array asks only for the count.
        unsafe { sys::cuGraphGetNodes(g.0, std::ptr::null_mut(), &mut n) }
            .result()
            .map_err(|e| driver_error("cuGraphGetNodes", e))?;
        Ok(n)
    }

    pub(super) fn cu_graph_debug_dot(&self, graph: GraphId, path: &std::path::Path) -> Result<()> {
        let (device, g) = self.graph_entry(graph, |e| (e.device, e.graph))?;
        self.enter(device)?;
        let bad = |reason: String| Error::InvalidArgument { op: "CUDAGraph::debug_dump", reason };
        let text = path.to_str().ok_or_else(|| bad(format!("{} is not UTF-8", path.display())))?;
        let c = std::ffi::CString::new(text).map_err(|_| bad(format!("{text:?} holds a NUL byte")))?;
        let verbose = sys::CUgraphDebugDot_flags::CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE as u32;
        // SAFETY: a live graph and a NUL-terminated path that outlives the call.
        unsafe { sys::cuGraphDebugDotPrint(g.0, c.as_ptr(), verbose) }
            .result()
            .map_err(|e| driver_error("cuGraphDebugDotPrint", e))
    }
}

impl CudaDriver {
    /// Destroys every graph left (the driver is being dropped; its streams are idle).
    pub(super) fn destroy_graphs(&self) {
        let ids: Vec<u64> = lock(&self.graphs.entries).keys().copied().collect();
        for id in ids {
            self.cu_graph_destroy(GraphId(id));
        }
    }
}
