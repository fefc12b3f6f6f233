//! [`make_graphed`]: `torch.cuda.make_graphed_callables` for a forward function — warm it up on
//! a side stream, capture it once into a graph over static inputs, and call it by copying new
//! inputs into those and replaying.

use super::Tensor;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::runtime::{graph, synchronize, with_device, with_stream, CUDAGraph, GraphOptions, Stream};

/// A function captured by [`make_graphed`]: each [`call`](GraphedCallable::call) copies its
/// inputs into the captured (static) inputs, replays the graph on the current stream and returns
/// the captured (static) outputs, which the next call overwrites (as PyTorch's do).
pub struct GraphedCallable {
    graph: CUDAGraph,
    device: usize,
    static_inputs: Vec<Tensor>,
    static_outputs: Vec<Tensor>,
}

impl std::fmt::Debug for GraphedCallable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphedCallable")
            .field("device", &self.device)
            .field("inputs", &self.static_inputs.len())
            .field("outputs", &self.static_outputs.len())
            .field("nodes", &self.graph.node_count())
            .finish()
    }
}

fn mismatch(reason: String) -> Error {
    Error::GraphState { op: "GraphedCallable::call", reason }
}

/// `torch.cuda.make_graphed_callables(f, sample_args)` (forward only): runs `f` on
/// `sample_inputs` `warmup_iters` times on a side stream (PyTorch uses 3), then captures one
/// call into a graph whose inputs are copies of the samples. Every input must be on one CUDA
/// device; `f` must queue only device work there (the capture's rules apply to it).
pub fn make_graphed<F>(f: F, sample_inputs: &[Tensor], warmup_iters: usize) -> Result<GraphedCallable>
where
    F: Fn(&[Tensor]) -> Result<Vec<Tensor>>,
{
    let device = match sample_inputs.first().map(Tensor::device) {
        Some(Device::Cuda(Some(d))) => d,
        _ => {
            return Err(Error::InvalidArgument {
                op: "make_graphed",
                reason: "the sample inputs must be CUDA tensors (at least one)".into(),
            })
        }
    };
    if let Some(t) = sample_inputs.iter().find(|t| t.device() != Device::cuda(device)) {
        return Err(Error::DeviceMismatch { op: "make_graphed", lhs: Device::cuda(device), rhs: t.device() });
    }
    with_device(device, || {
        let static_inputs = sample_inputs
            .iter()
            .map(|t| {
                let s = Tensor::empty(t.shape(), t.dtype(), Device::cuda(device))?;
                s.copy_(t, false)?;
                Ok(s)
            })
            .collect::<Result<Vec<_>>>()?;
        synchronize(device)?;
        let side = Stream::new(device, 0)?;
        with_stream(&side, || (0..warmup_iters).try_for_each(|_| f(&static_inputs).map(drop)))?;
        synchronize(device)?;
        let mut g = CUDAGraph::new();
        let static_outputs = graph(&mut g, GraphOptions::default(), || f(&static_inputs))?;
        Ok(GraphedCallable { graph: g, device, static_inputs, static_outputs })
    })
}

impl GraphedCallable {
    /// Copies `inputs` (shapes, dtypes and device as the samples') into the static inputs on
    /// the current stream, replays, and returns the static outputs.
    pub fn call(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        if inputs.len() != self.static_inputs.len() {
            return Err(mismatch(format!(
                "expected {} inputs (as the samples), got {}",
                self.static_inputs.len(),
                inputs.len()
            )));
        }
        for (i, (x, s)) in inputs.iter().zip(&self.static_inputs).enumerate() {
            if x.shape() != s.shape() || x.dtype() != s.dtype() || x.device() != s.device() {
                return Err(mismatch(format!(
                    "input {i} is {:?} {} on {}, but the graph was captured for {:?} {} on {}",
                    x.shape(),
                    x.dtype(),
                    x.device(),
                    s.shape(),
                    s.dtype(),
                    s.device()
                )));
            }
        }
        with_device(self.device, || {
            for (x, s) in inputs.iter().zip(&self.static_inputs) {
                if !x.shares_storage(s) || x.data_ptr() != s.data_ptr() {
                    s.copy_(x, false)?;
                }
            }
            self.graph.replay()?;
            Ok(self.static_outputs.clone())
        })
    }

    /// The captured inputs: writing them and calling [`replay`](Self::replay) is a call.
    pub fn static_inputs(&self) -> &[Tensor] {
        &self.static_inputs
    }

    /// The captured outputs, which each call overwrites.
    pub fn static_outputs(&self) -> &[Tensor] {
        &self.static_outputs
    }

    /// Replays the graph on the current stream (over whatever the static inputs hold).
    pub fn replay(&self) -> Result<()> {
        with_device(self.device, || self.graph.replay())
    }

    /// The captured graph.
    pub fn graph(&self) -> &CUDAGraph {
        &self.graph
    }
}
