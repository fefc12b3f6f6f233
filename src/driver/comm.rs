//! Collective communication in the driver layer: the vocabulary of a collective over raw device
//! memory ([`Collective`], [`ReduceOp`]), the communicator a driver makes ([`Comm`], NCCL's
//! `ncclComm_t` on the CUDA driver) and the host job a stream can run ([`HostJob`], what the
//! simulated machine's collectives are made of).
//!
//! As everywhere in the driver, nothing here is validated: the distributed layer checks devices,
//! sizes, dtypes and ranks (and, through its store, that every rank agrees) before a collective
//! reaches a communicator.

use super::DevicePtr;
use crate::dtype::DType;
use crate::error::Result;

/// How a reduction combines the ranks' values (`torch.distributed.ReduceOp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// The sum (integers wrap, as NCCL's do).
    Sum,
    /// The product (integers wrap).
    Product,
    /// The least value.
    Min,
    /// The greatest value.
    Max,
    /// The sum divided by the number of ranks (integers: the quotient toward zero, NCCL's `ncclAvg`).
    Avg,
}

impl ReduceOp {
    /// Every op, for tests and tables.
    pub const ALL: [ReduceOp; 5] = [ReduceOp::Sum, ReduceOp::Product, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg];

    /// The name PyTorch prints (`ReduceOp.SUM` is `sum`).
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Product => "product",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Avg => "avg",
        }
    }
}

/// One collective over device memory, as NCCL states it: counts are elements, `count` of a
/// gather or scatter is the per-rank part, ranks are ranks of the communicator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Collective {
    /// `recv[i] = op over ranks of send[i]`, `count` elements (`ncclAllReduce`).
    AllReduce {
        /// Input.
        send: DevicePtr,
        /// Output (may equal `send`).
        recv: DevicePtr,
        /// Elements.
        count: usize,
        /// Element type.
        dtype: DType,
        /// Reduction.
        op: ReduceOp,
    },
    /// `recv = root's send` (`ncclBroadcast`).
    Broadcast {
        /// Input (read on the root only).
        send: DevicePtr,
        /// Output (may equal `send`).
        recv: DevicePtr,
        /// Elements.
        count: usize,
        /// Element type.
        dtype: DType,
        /// The rank whose data is sent.
        root: usize,
    },
    /// `recv[r * count ..][..count] = rank r's send` (`ncclAllGather`).
    AllGather {
        /// Input, `count` elements.
        send: DevicePtr,
        /// Output, `count × world` elements.
        recv: DevicePtr,
        /// Elements per rank.
        count: usize,
        /// Element type.
        dtype: DType,
    },
    /// `recv = (op over ranks of send)[rank * count ..][..count]` (`ncclReduceScatter`).
    ReduceScatter {
        /// Input, `count × world` elements.
        send: DevicePtr,
        /// Output, `count` elements.
        recv: DevicePtr,
        /// Elements per rank.
        count: usize,
        /// Element type.
        dtype: DType,
        /// Reduction.
        op: ReduceOp,
    },
    /// Rank `r`'s part of `send` goes to rank `r`'s `recv`, every rank's parts in rank order
    /// (PyTorch's `all_to_all_single`; on NCCL a group of sends and receives). Part `p` of
    /// `send` holds `send_counts[p]` elements and starts after the parts before it; likewise for
    /// `recv`. Rank `r`'s `send_counts[s]` equals rank `s`'s `recv_counts[r]`.
    AllToAll {
        /// Input, `send_counts`' sum of elements.
        send: DevicePtr,
        /// Output, `recv_counts`' sum of elements.
        recv: DevicePtr,
        /// Element type.
        dtype: DType,
        /// Elements sent to each rank, in rank order.
        send_counts: Vec<usize>,
        /// Elements received from each rank, in rank order.
        recv_counts: Vec<usize>,
    },
    /// Sends `count` elements to `peer` (`ncclSend`).
    Send {
        /// Input.
        buf: DevicePtr,
        /// Elements.
        count: usize,
        /// Element type.
        dtype: DType,
        /// The receiving rank.
        peer: usize,
    },
    /// Receives `count` elements from `peer` (`ncclRecv`).
    Recv {
        /// Output.
        buf: DevicePtr,
        /// Elements.
        count: usize,
        /// Element type.
        dtype: DType,
        /// The sending rank.
        peer: usize,
    },
}

/// A communicator: one rank's membership in a group of devices (NCCL's `ncclComm_t`). Dropping it
/// finalizes and destroys it (the normal path); [`Comm::abort`] is for a group that cannot finish.
pub trait Comm: Send + Sync {
    /// Queues `op` on the native stream `stream` (a [`Driver::raw_stream`](super::Driver::raw_stream)
    /// of the communicator's device: NCCL takes a `cudaStream_t`); returns once queued.
    fn run(&self, op: &Collective, stream: u64) -> Result<()>;
    /// An error the communicator met asynchronously (a peer gone, a network failure), if any
    /// (`ncclCommGetAsyncError`; may be asked from another thread while collectives are queued).
    fn async_error(&self) -> Result<()>;
    /// Aborts the communicator's outstanding work (`ncclCommAbort`: kernels waiting for a peer
    /// exit); it is unusable afterwards. The caller makes sure no other call on it is in progress.
    fn abort(&self);
}

/// Work a stream's worker runs when the stream reaches it, on the host, with the machine's device
/// memory by address (the simulated machine only: CUDA host functions may not touch device
/// memory). The collectives of the simulated backend are such jobs.
pub type HostJob = Box<dyn FnOnce(&dyn DeviceBytes) + Send + 'static>;

/// A kernel's host twin as a stream's worker runs it (the simulated machine): like a
/// [`HostJob`], but replayable (a captured graph runs it at each replay); an error it returns is
/// kept as the device's asynchronous error, as a kernel fault is.
pub type HostKernel = std::sync::Arc<dyn Fn(&dyn DeviceBytes) -> Result<()> + Send + Sync + 'static>;

/// The machine's device memory by address, as a [`HostJob`] sees it.
pub trait DeviceBytes {
    /// Reads `out.len()` bytes at `at`.
    fn read(&self, at: DevicePtr, out: &mut [u8]) -> Result<()>;
    /// Writes `data` at `at`.
    fn write(&self, at: DevicePtr, data: &[u8]) -> Result<()>;
    /// Reads `out.len()` bytes of pinned host memory at `at` (a kernel's pinned argument); an
    /// error where the job cannot reach host memory.
    fn read_host(&self, at: crate::driver::HostPtr, out: &mut [u8]) -> Result<()> {
        let _ = out;
        Err(no_host_access(at))
    }
    /// Writes `data` to pinned host memory at `at`.
    fn write_host(&self, at: crate::driver::HostPtr, data: &[u8]) -> Result<()> {
        let _ = data;
        Err(no_host_access(at))
    }
}

fn no_host_access(at: crate::driver::HostPtr) -> crate::error::Error {
    crate::error::Error::Internal {
        op: "host twin",
        reason: format!("this job cannot reach pinned host memory ({:#x})", at.0),
    }
}

/// Where each part of a buffer split into parts of `counts` elements starts, in elements.
pub fn offsets(counts: &[usize]) -> Vec<usize> {
    counts
        .iter()
        .scan(0, |at, &n| {
            let start = *at;
            *at += n;
            Some(start)
        })
        .collect()
}
