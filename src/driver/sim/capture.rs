//! Stream capture and graphs on the simulated machine.
//!
//! A capturing stream keeps each job it is given ([`SimCapture::push`]) instead of running it;
//! a stream that waits on an event recorded in the capture joins it, and its work is kept in
//! the same list. The list is in the order the host queued the work, which respects every
//! dependency the capture has (a stream's own order and the events between streams), so a
//! replay runs it in that order as one job on the replaying stream: the graph's work, its
//! modelled duration the sum of its nodes'. The runtime above checks the capture rules (which
//! calls are refused, that forked streams are joined back); this layer only records and replays.

use super::memory::lock;
use super::sim_driver::SimDriver;
use super::stream::{Job, Node, SimCapture, SimGraph};
use super::time::SimTime;
use crate::driver::{CaptureMode, EventId, GraphId, StreamId};
use crate::error::{Error, Result};
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl SimDriver {
    pub(super) fn sim_begin_capture(&self, stream: StreamId, _mode: CaptureMode) -> Result<()> {
        let s = self.stream(stream)?;
        if s.capture().is_some() {
            return Err(Error::Internal { op: "begin_capture", reason: format!("stream {} is capturing", stream.0) });
        }
        s.set_capture(Some(Arc::new(SimCapture::new(stream))));
        Ok(())
    }

    /// Joins `stream` to the capture `event` was last recorded in, if one is underway; then the
    /// wait orders only captured work and queues nothing. `false`: not a captured event.
    pub(super) fn join_capture(&self, stream: StreamId, event: EventId) -> Result<bool> {
        let Some(recording) = self.event(event)?.current() else { return Ok(false) };
        let Some(capture) = recording.open_capture() else { return Ok(false) };
        let s = self.stream(stream)?;
        if s.capture().is_none() {
            s.set_capture(Some(capture.clone()));
        }
        Ok(true)
    }

    pub(super) fn sim_end_capture(&self, stream: StreamId) -> Result<GraphId> {
        let s = self.stream(stream)?;
        let capture = match s.capture() {
            Some(c) if c.origin() == stream => c,
            _ => {
                return Err(Error::Internal {
                    op: "end_capture",
                    reason: format!("stream {} did not begin a capture", stream.0),
                })
            }
        };
        capture.close();
        let streams: Vec<_> = self.streams.read().unwrap_or_else(|e| e.into_inner()).values().cloned().collect();
        for other in streams {
            if other.capture().is_some_and(|c| Arc::ptr_eq(&c, &capture)) {
                other.set_capture(None);
            }
        }
        let nodes = capture.take_nodes();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let graph = SimGraph { device: s.device, nodes: Arc::new(nodes) };
        lock(&self.graphs).insert(id, Arc::new(graph));
        Ok(GraphId(id))
    }

    fn graph(&self, graph: GraphId) -> Result<Arc<SimGraph>> {
        lock(&self.graphs)
            .get(&graph.0)
            .cloned()
            .ok_or_else(|| Error::Internal { op: "graph", reason: format!("unknown graph handle {}", graph.0) })
    }

    pub(super) fn sim_graph_launch(&self, graph: GraphId, stream: StreamId) -> Result<()> {
        let (g, s) = (self.graph(graph)?, self.stream(stream)?);
        if g.device != s.device {
            return Err(Error::Internal {
                op: "graph_launch",
                reason: format!("a graph of cuda:{} launched on a stream of cuda:{}", g.device, s.device),
            });
        }
        let cost = g.nodes.iter().map(Node::cost).fold(0, SimTime::saturating_add);
        let nodes = g.nodes.clone();
        s.submit(Job::run("graph", cost, move || nodes.iter().for_each(|n| n.run())));
        Ok(())
    }

    pub(super) fn sim_graph_destroy(&self, graph: GraphId) {
        lock(&self.graphs).remove(&graph.0);
    }

    pub(super) fn sim_graph_node_count(&self, graph: GraphId) -> Result<usize> {
        Ok(self.graph(graph)?.nodes.len())
    }

    pub(super) fn sim_graph_debug_dot(&self, graph: GraphId, path: &std::path::Path) -> Result<()> {
        let g = self.graph(graph)?;
        let mut dot = format!("digraph cudasem_sim_graph_{} {{\n  rankdir=TB;\n", graph.0);
        for (i, n) in g.nodes.iter().enumerate() {
            let _ = writeln!(dot, "  n{i} [shape=box label=\"{i}: {} ({} ns)\"];", n.label(), n.cost());
            if i > 0 {
                let _ = writeln!(dot, "  n{} -> n{i};", i - 1);
            }
        }
        dot.push_str("}\n");
        std::fs::write(path, dot).map_err(|e| Error::InvalidArgument {
            op: "CUDAGraph::debug_dump",
            reason: format!("could not write {}: {e}", path.display()),
        })
    }
}
