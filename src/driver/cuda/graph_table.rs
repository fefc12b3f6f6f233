//! The CUDA driver's graphs and captures underway, as [`CudaDriver`](super::CudaDriver) holds them
//! (`graph.rs` captures, launches and destroys them).

use super::fxmap::FxMap;
use cudarc::driver::sys;
use std::sync::Mutex;

raw_handle!(
    /// A captured graph (`CUgraph`).
    pub(super) RawGraph(sys::CUgraph)
);
raw_handle!(
    /// An instantiated graph (`CUgraphExec`).
    pub(super) RawExec(sys::CUgraphExec)
);

/// A graph, its executable form and the scratch memory its kernels use.
pub(super) struct Entry {
    pub device: usize,
    pub graph: RawGraph,
    pub exec: RawExec,
    pub scratch: Vec<u64>,
}

/// The driver's graphs and the captures underway (stream handle → capture id).
#[derive(Default)]
pub(super) struct Graphs {
    pub entries: Mutex<FxMap<u64, Entry>>,
    pub captures: Mutex<FxMap<u64, u64>>,
}
