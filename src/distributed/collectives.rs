//! The collectives of a [`ProcessGroup`] on tensors, with ProcessGroupNCCL's stream semantics:
//!
//! 1. the tensors are checked (this rank's device, contiguous, a dtype the backends take, the
//!    sizes each collective needs) and, with `check_collectives`, compared through the store
//!    with every other rank's call, so that a mismatch is an error on every rank, not a hang;
//! 2. an event recorded on the device's *current stream* is waited for by the group's
//!    communication stream, so the collective sees all work queued before it;
//! 3. the collective is queued on the communication stream, and every tensor is
//!    `record_stream`ed there, so its memory is not reused before the collective is done even
//!    when the caller drops it at once; the [`Work`] keeps them too;
//! 4. an end event is recorded on the communication stream; `async_op = false` makes the
//!    current stream wait for it at once, `async_op = true` leaves that to [`Work::wait`].
//!    Neither blocks the host. The group's watchdog (`watchdog.rs`) follows the end event: a
//!    collective that misses its deadline, or a communicator error, aborts the group.
//! 5. a collective that fails after it was queued (by itself on the simulated backend, or by the
//!    group's abort) poisons the tensor it was to write — host reads of it (`to_vec`, `item`,
//!    `cpu`) return the error, not stale data — and leaves the error on its device, where every
//!    synchronization point returns it until `cuda::get_last_error` takes it; [`Work::wait`]
//!    returns it once it happened.

use super::agree::Exchange;
use super::group::ProcessGroup;
use super::reduce::check_dtype;
use super::watchdog::{OnFail, Outcome, Pending};
use super::{sim, Backend, ReduceOp};
use crate::device::Device;
use crate::driver::comm::{Collective, HostJob};
use crate::driver::DevicePtr;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::runtime::{current_stream, record_device_error, Event, EventFlags};
use crate::tensor::PoisonHandle;
use crate::Tensor;
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// An issued collective (`torch.distributed.Work`).
pub struct Work {
    op: &'static str,
    device: usize,
    end: Event,
    outcome: Arc<Outcome>,
    /// The tensors the collective uses, kept until the work is dropped (PyTorch's stashed tensors).
    _tensors: Vec<Tensor>,
    /// The group (its communicator's asynchronous errors).
    group: Arc<super::group::Inner>,
}

impl fmt::Debug for Work {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<Work {} on cuda:{}>", self.op, self.device)
    }
}

impl Work {
    fn failed(&self) -> Result<()> {
        match self.outcome.error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Makes the device's *current* stream wait for the collective (`work.wait()`); the host
    /// does not block. Returns an error the collective already met; one it meets later is
    /// returned by the host reads of the tensors it was to write (`to_vec`, `item`, `cpu`) and
    /// by the device's synchronization points (`cuda::synchronize`, stream and event
    /// `synchronize`/`query`) until `cuda::get_last_error` takes it.
    pub fn wait(&self) -> Result<()> {
        self.failed()?;
        self.end.wait(Some(&current_stream(self.device)?))
    }

    /// Whether the collective has finished (`work.is_completed()`); its error if it failed
    /// (also when its group's watchdog aborted it: see [`Work::wait_blocking`]).
    pub fn is_completed(&self) -> Result<bool> {
        self.failed()?;
        self.group.watch.poll(Instant::now());
        self.group.watch.settled();
        self.failed()?;
        let done = self.end.query()?;
        self.failed()?;
        Ok(done)
    }

    /// Blocks the host until the collective has finished, and returns its error if it failed
    /// (`work.get_future().wait()`). Never longer than the group's watchdog allows: a collective
    /// that does not finish within the group's timeout, or a communicator error (NCCL's
    /// `ncclCommGetAsyncError`: a peer that died mid-collective), aborts the group (NCCL:
    /// `ncclCommAbort`) and is this work's error ([`Error::DistributedTimeout`], or NCCL's).
    pub fn wait_blocking(&self) -> Result<()> {
        self.group.watch.block_until(|| self.end.completed())?;
        self.failed()
    }

    /// The collective's name (`all_reduce`, ...).
    pub fn op(&self) -> &'static str {
        self.op
    }
}

/// What one call asks: its collective, what all ranks must agree on, its tensors.
struct Call<'a> {
    name: &'static str,
    op: Collective,
    fingerprint: String,
    tensors: Vec<&'a Tensor>,
    /// For point-to-point messages: the peer and whether this rank sends.
    message: Option<(usize, bool)>,
}

impl ProcessGroup {
    /// The device address of `t`, checked to be a contiguous tensor of a supported dtype on this
    /// rank's device.
    fn buffer(&self, op: &'static str, t: &Tensor) -> Result<DevicePtr> {
        if t.device() != Device::cuda(self.device()) {
            return Err(Error::WrongDeviceForRank {
                op,
                rank: self.rank(),
                expected: self.device(),
                found: t.device(),
            });
        }
        if !t.is_contiguous() {
            return Err(Error::InvalidArgument {
                op,
                reason: "tensors must be contiguous (as in torch.distributed); call .contiguous() first".into(),
            });
        }
        check_dtype(op, t.dtype())?;
        Ok(DevicePtr(t.data_ptr()))
    }

    fn same_dtype(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
        if a.dtype() != b.dtype() {
            return Err(Error::DTypeMismatch { op, expected: a.dtype(), found: b.dtype() });
        }
        Ok(())
    }

    fn sizes(op: &'static str, reason: String) -> Error {
        Error::InvalidArgument { op, reason }
    }

    fn check_root(&self, op: &'static str, root: usize, what: &str) -> Result<()> {
        if root >= self.world_size() || (what == "peer" && root == self.rank()) {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("{what} {root} is not another rank of this group of {}", self.world_size()),
            });
        }
        Ok(())
    }

    /// Reduces `tensor` over the ranks with `op`, in place on every rank (`dist.all_reduce`).
    pub fn all_reduce(&self, tensor: &Tensor, op: ReduceOp, async_op: bool) -> Result<Work> {
        let name = "all_reduce";
        let at = self.buffer(name, tensor)?;
        let (count, dtype) = (tensor.numel(), tensor.dtype());
        let collective = Collective::AllReduce { send: at, recv: at, count, dtype, op };
        let fingerprint = format!("{name}(dtype={dtype}, numel={count}, op={})", op.name());
        self.issue(Call { name, op: collective, fingerprint, tensors: vec![tensor], message: None }, async_op)
    }

    /// Copies rank `src`'s `tensor` into every rank's `tensor` (`dist.broadcast`; `src` is a
    /// rank of this group).
    pub fn broadcast(&self, tensor: &Tensor, src: usize, async_op: bool) -> Result<Work> {
        let name = "broadcast";
        let at = self.buffer(name, tensor)?;
        self.check_root(name, src, "src")?;
        let (count, dtype) = (tensor.numel(), tensor.dtype());
        let collective = Collective::Broadcast { send: at, recv: at, count, dtype, root: src };
        let fingerprint = format!("{name}(dtype={dtype}, numel={count}, src={src})");
        self.issue(Call { name, op: collective, fingerprint, tensors: vec![tensor], message: None }, async_op)
    }

    /// Gathers every rank's `input` into `output`, rank after rank (`dist.all_gather_into_tensor`:
    /// `output` holds `world_size × input.numel()` elements).
    pub fn all_gather_into_tensor(&self, output: &Tensor, input: &Tensor, async_op: bool) -> Result<Work> {
        let name = "all_gather_into_tensor";
        let (recv, send) = (self.buffer(name, output)?, self.buffer(name, input)?);
        Self::same_dtype(name, output, input)?;
        let (count, dtype) = (input.numel(), input.dtype());
        if output.numel() != count * self.world_size() {
            let reason = format!(
                "output has {} elements, but {} ranks × {count} input elements need {}",
                output.numel(),
                self.world_size(),
                count * self.world_size()
            );
            return Err(Self::sizes(name, reason));
        }
        let collective = Collective::AllGather { send, recv, count, dtype };
        let fingerprint = format!("{name}(dtype={dtype}, numel={count})");
        self.issue(Call { name, op: collective, fingerprint, tensors: vec![output, input], message: None }, async_op)
    }

    /// Reduces every rank's `input` with `op` and gives rank `r` the `r`-th part in `output`
    /// (`dist.reduce_scatter_tensor`: `input` holds `world_size × output.numel()` elements).
    pub fn reduce_scatter_tensor(&self, output: &Tensor, input: &Tensor, op: ReduceOp, async_op: bool) -> Result<Work> {
        let name = "reduce_scatter_tensor";
        let (recv, send) = (self.buffer(name, output)?, self.buffer(name, input)?);
        Self::same_dtype(name, output, input)?;
        let (count, dtype) = (output.numel(), output.dtype());
        if input.numel() != count * self.world_size() {
            let reason = format!(
                "input has {} elements, but {} ranks × {count} output elements need {}",
                input.numel(),
                self.world_size(),
                count * self.world_size()
            );
            return Err(Self::sizes(name, reason));
        }
        let collective = Collective::ReduceScatter { send, recv, count, dtype, op };
        let fingerprint = format!("{name}(dtype={dtype}, numel={count}, op={})", op.name());
        self.issue(Call { name, op: collective, fingerprint, tensors: vec![output, input], message: None }, async_op)
    }

    /// Splits `input` into `world_size` equal parts, sends part `r` to rank `r`, and gathers the
    /// parts received into `output` in rank order (`dist.all_to_all_single` with equal splits:
    /// [`all_to_all_single_splits`](ProcessGroup::all_to_all_single_splits) with `None, None`).
    pub fn all_to_all_single(&self, output: &Tensor, input: &Tensor, async_op: bool) -> Result<Work> {
        self.all_to_all_single_splits(output, input, None, None, async_op)
    }

    /// `dist.all_to_all_single(output, input, output_split_sizes, input_split_sizes)`: rank `r`
    /// sends the `r`-th part of `input` to rank `r` and receives into `output` the part every
    /// rank sends it, in rank order. Parts are counted along dim 0, as in PyTorch:
    /// `input_split_sizes[s]` rows of `input` (a row: the product of the other dims) go to rank
    /// `s`, `output_split_sizes[s]` rows of `output` come from rank `s`; `None` splits dim 0
    /// equally. Each list has one entry per rank and sums to its tensor's dim 0; rank `r`'s
    /// `output_split_sizes[s]` must match rank `s`'s `input_split_sizes[r]` (in elements), which
    /// the store check finds ([`Error::SplitMismatch`] on every rank). With both `None` the
    /// tensors are taken whole (`numel` a multiple of the group's size, as before any split).
    pub fn all_to_all_single_splits(
        &self,
        output: &Tensor,
        input: &Tensor,
        output_split_sizes: Option<&[usize]>,
        input_split_sizes: Option<&[usize]>,
        async_op: bool,
    ) -> Result<Work> {
        let name = "all_to_all_single";
        let (recv, send) = (self.buffer(name, output)?, self.buffer(name, input)?);
        Self::same_dtype(name, output, input)?;
        let world = self.world_size();
        let (send_counts, recv_counts) = if output_split_sizes.is_none() && input_split_sizes.is_none() {
            if input.numel() != output.numel() || !input.numel().is_multiple_of(world) {
                let reason = format!(
                    "input ({}) and output ({}) must have the same number of elements, a multiple of the {world} \
                     ranks (equal splits)",
                    input.numel(),
                    output.numel()
                );
                return Err(Self::sizes(name, reason));
            }
            (vec![input.numel() / world; world], vec![input.numel() / world; world])
        } else {
            (
                split_counts("input", input, input_split_sizes, world)?,
                split_counts("output", output, output_split_sizes, world)?,
            )
        };
        let dtype = input.dtype();
        let exchange =
            Exchange { common: format!("{name}(dtype={dtype}"), send: send_counts.clone(), recv: recv_counts.clone() };
        let collective = Collective::AllToAll { send, recv, dtype, send_counts, recv_counts };
        let fingerprint = exchange.fingerprint();
        self.issue(Call { name, op: collective, fingerprint, tensors: vec![output, input], message: None }, async_op)
    }

    /// Sends `tensor` to rank `dst` (`dist.send` / `dist.isend`); the receiver's `recv` must
    /// take the same dtype and number of elements.
    pub fn send(&self, tensor: &Tensor, dst: usize, async_op: bool) -> Result<Work> {
        let name = "send";
        let buf = self.buffer(name, tensor)?;
        self.check_root(name, dst, "peer")?;
        let (count, dtype) = (tensor.numel(), tensor.dtype());
        let collective = Collective::Send { buf, count, dtype, peer: dst };
        let fingerprint = format!("{name}(dtype={dtype}, numel={count}, peer={dst})");
        self.issue(
            Call { name, op: collective, fingerprint, tensors: vec![tensor], message: Some((dst, true)) },
            async_op,
        )
    }

    /// Receives into `tensor` what rank `src` sends (`dist.recv` / `dist.irecv`).
    pub fn recv(&self, tensor: &Tensor, src: usize, async_op: bool) -> Result<Work> {
        let name = "recv";
        let buf = self.buffer(name, tensor)?;
        self.check_root(name, src, "peer")?;
        let (count, dtype) = (tensor.numel(), tensor.dtype());
        let collective = Collective::Recv { buf, count, dtype, peer: src };
        let fingerprint = format!("{name}(dtype={dtype}, numel={count}, peer={src})");
        self.issue(
            Call { name, op: collective, fingerprint, tensors: vec![tensor], message: Some((src, false)) },
            async_op,
        )
    }

    /// Steps 1–4 of the module docs for a checked call.
    fn issue(&self, call: Call<'_>, async_op: bool) -> Result<Work> {
        // ProcessGroupNCCL's name for the collective's range (`emit_nvtx`, `CUDASEM_NVTX`).
        let _range = crate::runtime::nvtx::op_range(|| format!("nccl:{}", call.name).into());
        let inner = &self.inner;
        inner.watch.refuse_if_aborted(call.name)?;
        // Collectives are numbered in the group; messages per pair and direction.
        let seq = match call.message {
            None => inner.seq.fetch_add(1, Ordering::Relaxed) + 1,
            Some((peer, sending)) => {
                let book = if sending { &inner.sent } else { &inner.received };
                let mut counts = book.lock().unwrap_or_else(|e| e.into_inner());
                counts[peer] += 1;
                counts[peer]
            }
        };
        if call.message.is_none() && inner.check_collectives && inner.world > 1 {
            self.check_fingerprint(seq, &call.fingerprint)?;
        }
        let current = current_stream(inner.device)?;
        let start = Event::new(EventFlags::default());
        start.record(Some(&current))?;
        start.wait(Some(&inner.stream))?;
        // The stream sanitizer (while on) checks the collective on the group's stream, now
        // ordered after the current stream, once every other check has passed (an access it
        // accepts is kept as done). A refusal on one rank of several leaves the others' matching
        // collective waiting for this rank: the watchdog's timeout ends it, as for any rank
        // that does not arrive.
        inner.stream.check_collective(call.name, &call.op, inner.world, &call.tensors)?;
        for t in &call.tensors {
            t.record_stream(&inner.stream)?;
        }
        let outcome = Outcome::new(on_fail(inner.device, &call));
        let what = match call.message {
            None => format!("{} (collective #{seq})", call.name),
            Some((peer, _)) => format!("{} (message #{seq} with rank {peer})", call.name),
        };
        match inner.backend {
            Backend::Nccl => inner.watch.with_comm(call.name, |comm| inner.stream.collective(comm, &call.op))?,
            Backend::Sim => {
                let (slot, watch) = (outcome.clone(), inner.watch.clone());
                let done = move |r: Result<()>| {
                    if let Err(e) = r {
                        slot.fail(&e);
                    }
                };
                let job = sim::job(self.sim_rank(), seq, call.op, call.fingerprint, done);
                // An aborted group's collectives do nothing when the stream reaches them (NCCL's
                // kernels exit); their outcome is the abort's cause.
                let job: HostJob = Box::new(move |mem| {
                    if watch.aborted().is_none() {
                        job(mem)
                    }
                });
                inner.stream.host_job(job)?;
            }
        }
        let end = Event::new(EventFlags::default());
        end.record(Some(&inner.stream))?;
        let query = end.clone();
        inner.watch.track(Pending {
            what,
            since: Instant::now(),
            done: Arc::new(move || query.completed()),
            outcome: outcome.clone(),
        });
        let tensors = call.tensors.into_iter().cloned().collect();
        let work = Work { op: call.name, device: inner.device, end, outcome, _tensors: tensors, group: inner.clone() };
        if !async_op {
            work.end.wait(Some(&current))?;
        }
        Ok(work)
    }
}

/// What a failed collective of `call` on `device` does besides keeping its error: the tensor it
/// was to write (the first, unless it sends) is poisoned, so host reads of it return the error
/// instead of data that is not the result, and the error is kept for the device's
/// synchronization points (sticky until `cuda::get_last_error`).
fn on_fail(device: usize, call: &Call<'_>) -> OnFail {
    let sends = matches!(call.message, Some((_, true)));
    let written: Vec<PoisonHandle> =
        if sends { Vec::new() } else { call.tensors.first().map(|t| t.poison_handle()).into_iter().collect() };
    Box::new(move |e: &Error| {
        for t in &written {
            t.poison(e);
        }
        record_device_error(device, e.clone());
    })
}

/// The elements `t` (`which` of an `all_to_all_single`) holds for each rank: `splits` rows of
/// dim 0 (`None`: equal parts), each row the product of the other dims (PyTorch's
/// `computeLengthsAndOffsets`), checked to be one per rank and to sum to dim 0.
fn split_counts(which: &str, t: &Tensor, splits: Option<&[usize]>, world: usize) -> Result<Vec<usize>> {
    let bad = |reason: String| Error::InvalidArgument { op: "all_to_all_single", reason };
    let Some(&rows) = t.shape().first() else {
        return Err(bad(format!("{which} is a 0-dim tensor: split sizes count rows of dim 0")));
    };
    let row = t.numel().checked_div(rows).unwrap_or(1);
    let Some(splits) = splits else {
        if !rows.is_multiple_of(world) {
            let hint = format!("give {which}_split_sizes");
            return Err(bad(format!("{which}'s dim 0 ({rows}) does not split equally over {world} ranks; {hint}")));
        }
        return Ok(vec![rows / world * row; world]);
    };
    if splits.len() != world {
        let n = splits.len();
        return Err(bad(format!("{which}_split_sizes has {n} entries, but the group has {world} ranks")));
    }
    let sum: usize = splits.iter().sum();
    if sum != rows {
        return Err(bad(format!("{which}_split_sizes {splits:?} sums to {sum}, but {which}'s dim 0 is {rows}")));
    }
    Ok(splits.iter().map(|&n| n * row).collect())
}

/// Dtypes the collectives take, for tests and tables.
pub const COLLECTIVE_DTYPES: [DType; 7] =
    [DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8];
