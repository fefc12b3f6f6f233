//! The one door to device work: every operation the layers above queue on a device — kernel
//! launches, memsets, copies (host ↔ device, within a device, between devices, pinned and
//! asynchronous), event records and waits — is a crate-internal method of [`Stream`] here, so a
//! later stream capture or collective hooks in one place. Each method is one driver call on the
//! stream's handle (`#[inline]`: the small-op host cost stays one direct call).
//!
//! The caller validates what it passes (the driver validates nothing): addresses are live memory
//! of the stream's device (or of a peer it may access), kept alive in the stream's order.
//!
//! Every method that queues work on memory also receives that memory's owners, its operands
//! ([`Operand`]: the tensors whose storages the addresses point into), borrowed. While a capture
//! is underway the door itself hands the captured graph an owned handle of each (those of the
//! capture's own pool excepted), so a replay never touches freed memory whatever path queued the
//! work; with no capture the operands are not touched (one relaxed load, then the driver call).
//! The blocking copies to and from pageable host memory take none: a capture refuses them, and
//! they return only once done.

use super::capture::{self, KeepAlive};
use super::memory::DeviceBlock;
use super::nvtx;
use super::rt;
use super::sanitizer::{self, Span};
use super::stream_handle::Stream;
use super::sync_debug;
use crate::alloc::MemPoolId;
use crate::driver::comm::{Collective, Comm, HostJob, HostKernel};
use crate::driver::{DevicePtr, EventId, HostPtr};
use crate::driver::{LaunchShape, UserArg, UserFunctionId, UserImage};
use crate::error::{Error, Result};
use crate::kernel::{DenseBinary, KernelOp, Workspace, GEMM_WORKSPACE_BYTES};
use crate::race::RaceTensor;
use std::sync::Arc;
use std::time::Duration;

/// The blocking copies as a capture's refusal names them.
const HTOD: &str = "a blocking host-to-device copy (Tensor::from_slice or to() onto a device, a CPU operand)";
const PEER: &str = "a copy between devices (memcpy_peer)";
const PEER_REASON: &str = "CUDA cannot record a peer copy (cuMemcpyPeerAsync) into a graph; copy across devices \
     before the capture or after it";
const DTOH: &str = "a blocking device-to-host copy (Tensor::to_vec, item, cpu, to(Device::Cpu))";

/// The owner of memory that device work queued through the door uses (a tensor, for its
/// storage). The door borrows operands; only while a capture is underway does it take an owned
/// handle of each ([`Operand::keep_alive`]), which the captured graph keeps.
pub(crate) trait Operand {
    /// The private pool the memory came from (`None`: a default pool, or host memory). A
    /// capture keeps no handle to memory of its own pool: the pool outlives the graph's uses,
    /// and blocks freed during the capture are reused by it, as PyTorch's are.
    fn pool(&self) -> Option<MemPoolId>;
    /// An owned handle that keeps the memory alive (cloned only while capturing).
    fn keep_alive(&self) -> KeepAlive;
    /// For the stream sanitizer: the bytes of device memory the operand covers and the tensor
    /// it is (`None`: memory without a name). Asked only while the sanitizer is on.
    fn describe(&self) -> Option<(Span, RaceTensor)> {
        None
    }
    /// Whether the work may write the operand's memory: asked only for work whose accesses the
    /// door takes from its operands (user kernels, host kernels). `true` unless declared
    /// read-only (a user kernel's `KernelArg::read`).
    fn writes(&self) -> bool {
        true
    }
}

/// The spans a kernel reads (`false`) and writes (`true`), on `device`.
fn op_accesses(device: usize, op: &KernelOp) -> Vec<(Span, bool)> {
    view_accesses(device, op.inputs(), op.outputs())
}

/// The byte ranges of device memory that views `reads` and `writes` of `device` cover.
fn view_accesses<'v>(
    device: usize,
    reads: impl IntoIterator<Item = &'v crate::kernel::BufferView>,
    writes: impl IntoIterator<Item = &'v crate::kernel::BufferView>,
) -> Vec<(Span, bool)> {
    let span = |v: &crate::kernel::BufferView, w| {
        v.byte_span().filter(|(p, _)| p.0 != 0).map(|(p, n)| (Span { device, start: p.0, end: p.0 + n as u64 }, w))
    };
    let reads = reads.into_iter().filter_map(|v| span(v, false));
    reads.chain(writes.into_iter().filter_map(|v| span(v, true))).collect()
}

/// The accesses of work that declares them through its operands.
fn operand_accesses<T: Operand + ?Sized>(uses: &[&T]) -> Vec<(Span, bool)> {
    uses.iter().filter_map(|u| u.describe().map(|(s, _)| (s, u.writes()))).collect()
}

/// The spans collective `op` of a group of `world` ranks reads (`false`) and writes (`true`) on
/// `device`: its input and its output (the same span for an in-place all-reduce); a send only
/// reads, a receive only writes.
fn collective_accesses(device: usize, op: &Collective, world: usize) -> Vec<(Span, bool)> {
    let span = |p: DevicePtr, count: usize, dtype: crate::DType, write| {
        let bytes = count.saturating_mul(dtype.size()) as u64;
        (count > 0 && p.0 != 0).then(|| (Span { device, start: p.0, end: p.0.saturating_add(bytes) }, write))
    };
    let sum = |counts: &[usize]| counts.iter().sum::<usize>();
    let all = match op {
        Collective::AllReduce { send, recv, count, dtype, .. }
        | Collective::Broadcast { send, recv, count, dtype, .. } => {
            [span(*send, *count, *dtype, false), span(*recv, *count, *dtype, true)]
        }
        Collective::AllGather { send, recv, count, dtype } => {
            [span(*send, *count, *dtype, false), span(*recv, count.saturating_mul(world), *dtype, true)]
        }
        Collective::ReduceScatter { send, recv, count, dtype, .. } => {
            [span(*send, count.saturating_mul(world), *dtype, false), span(*recv, *count, *dtype, true)]
        }
        Collective::AllToAll { send, recv, dtype, send_counts, recv_counts } => {
            [span(*send, sum(send_counts), *dtype, false), span(*recv, sum(recv_counts), *dtype, true)]
        }
        Collective::Send { buf, count, dtype, .. } => [span(*buf, *count, *dtype, false), None],
        Collective::Recv { buf, count, dtype, .. } => [span(*buf, *count, *dtype, true), None],
    };
    all.into_iter().flatten().collect()
}

/// The name a sanitizer report gives collective `name` (`"all_reduce"`) doing `op`: with its
/// reduction (`"all_reduce sum"`) or its peer (`"send to rank 1"`).
fn collective_name(name: &str, op: &Collective) -> String {
    match op {
        Collective::AllReduce { op, .. } | Collective::ReduceScatter { op, .. } => format!("{name} {}", op.name()),
        Collective::Broadcast { root, .. } => format!("{name} from rank {root}"),
        Collective::Send { peer, .. } => format!("{name} to rank {peer}"),
        Collective::Recv { peer, .. } => format!("{name} from rank {peer}"),
        Collective::AllGather { .. } | Collective::AllToAll { .. } => name.to_string(),
    }
}

/// No operands: work that touches no memory (a delay), or raw memory its caller keeps alive
/// (`testing::RawBuffer`, as a raw `cudaMalloc` buffer in a CUDA graph).
pub(crate) const NO_OPERANDS: &[&dyn Operand] = &[];

impl Stream {
    /// `bytes` bytes at `ptr` of this stream's device.
    fn span(&self, ptr: DevicePtr, bytes: usize) -> Span {
        Span { device: self.device(), start: ptr.0, end: ptr.0.saturating_add(bytes as u64) }
    }

    /// The stream sanitizer's check of work about to be queued (only while it is on): refuses
    /// an access that races with an earlier one, naming the tensor from `uses`.
    #[cold]
    fn sanitize<T: Operand + ?Sized>(
        &self,
        op: &dyn Fn() -> String,
        accesses: &[(Span, bool)],
        uses: &[&T],
    ) -> Result<()> {
        sanitizer::access(self, op, accesses).map_err(|mut report| {
            let at = (report.device, report.address);
            report.tensor = uses
                .iter()
                .filter_map(|u| u.describe())
                .find(|(s, _)| s.device == at.0 && s.start <= at.1 && at.1 < s.end)
                .map(|(_, t)| t);
            Error::UnsynchronizedAccess { report }
        })
    }

    /// Tells a capture this stream belongs to that work using `uses` was queued on it (one
    /// relaxed load when no capture is underway).
    #[inline]
    fn note_work<T: Operand + ?Sized>(&self, uses: &[&T]) {
        if capture::active() {
            self.note_captured_work(uses);
        }
    }

    /// [`Stream::note_work`] while a capture is underway: counts the work in the capture this
    /// stream belongs to, if any, and hands it the operands to keep alive as long as its graph.
    #[cold]
    fn note_captured_work<T: Operand + ?Sized>(&self, uses: &[&T]) {
        let id = self.driver_id();
        if let Some(c) = capture::of_stream(id) {
            let keep = uses.iter().filter(|u| u.pool() != Some(c.pool)).map(|u| u.keep_alive());
            c.on_work(id, keep);
        }
    }

    /// Queues `op` (a kernel by op and dtype), whose views point into `uses`' memory;
    /// [`crate::Error::Unsupported`] where the driver has no kernel for it.
    #[inline]
    pub(crate) fn launch<T: Operand + ?Sized>(&self, op: &KernelOp, uses: &[&T]) -> Result<()> {
        let _range = nvtx::op_range(|| nvtx::kernel_name(op));
        if sanitizer::enabled() {
            self.sanitize(&|| op.name(), &op_accesses(self.device(), op), uses)?;
        }
        if capture::active() {
            return self.launch_during_capture(op, uses);
        }
        rt()?.driver.launch(self.driver_id(), op)
    }

    /// [`Stream::launch`] while a capture is underway. A matrix product queued on a capturing
    /// stream gets the capture's workspace for this stream (a block of its private pool, made by
    /// its first product here, kept by the graph) instead of the driver's own per-stream one,
    /// which eager work on the stream shares; as PyTorch's cuBLAS workspaces, which come from the
    /// caching allocator, it then counts in the pool's statistics and snapshots.
    #[cold]
    fn launch_during_capture<T: Operand + ?Sized>(&self, op: &KernelOp, uses: &[&T]) -> Result<()> {
        let id = self.driver_id();
        self.note_captured_work(uses);
        if let KernelOp::Gemm { lhs, rhs, dst, bias, workspace: None } = op {
            let needs_one = dst.numel() > 0 && lhs.shape.last().is_some_and(|&k| k > 0);
            if let Some(c) = capture::of_stream(id).filter(|_| needs_one) {
                let workspace = Some(c.gemm_workspace(id, || self.gemm_workspace_block())?);
                let (lhs, rhs, dst, bias) = (lhs.clone(), rhs.clone(), dst.clone(), bias.clone());
                let op = KernelOp::Gemm { lhs, rhs, dst, bias, workspace };
                return rt()?.driver.launch(id, &op);
            }
        }
        rt()?.driver.launch(id, op)
    }

    /// A new matrix-product workspace for work on this stream, from the caching allocator (the
    /// capture's pool, for a capturing stream), and the block that holds it.
    fn gemm_workspace_block(&self) -> Result<(Workspace, KeepAlive)> {
        let block = DeviceBlock::new(GEMM_WORKSPACE_BYTES, self)?;
        Ok((Workspace { ptr: block.ptr(), bytes: GEMM_WORKSPACE_BYTES }, Arc::new(block)))
    }

    /// Queues a binary elementwise op over dense operands (in `uses`' memory): the small-op
    /// fast lane.
    #[inline]
    pub(crate) fn launch_dense_binary<T: Operand + ?Sized>(&self, op: &DenseBinary, uses: &[&T]) -> Result<()> {
        let _range = nvtx::op_range(|| nvtx::aten(op.op.name()));
        if sanitizer::enabled() {
            let bytes = |(p, d): (DevicePtr, crate::dtype::DType)| self.span(p, op.n * d.size());
            let mut accesses = vec![(bytes(op.dst), true), (bytes(op.lhs), false)];
            accesses.extend(op.rhs_value.is_none().then(|| (bytes(op.rhs), false)));
            self.sanitize(&|| format!("binary {}", op.op.name()), &accesses, uses)?;
        }
        self.note_work(uses);
        rt()?.driver.launch_dense_binary(self.driver_id(), op)
    }

    /// Queues a fill of `bytes` bytes at `dst` (in `uses`' memory) with `value`.
    #[inline]
    pub(crate) fn memset_d8<T: Operand + ?Sized>(
        &self,
        dst: DevicePtr,
        value: u8,
        bytes: usize,
        uses: &[&T],
    ) -> Result<()> {
        let _range = nvtx::op_range(|| (if value == 0 { "aten::zero_" } else { "aten::fill_" }).into());
        if sanitizer::enabled() {
            self.sanitize(&|| "memset".into(), &[(self.span(dst, bytes), true)], uses)?;
        }
        self.note_work(uses);
        rt()?.driver.memset_d8(dst, value, bytes, self.driver_id())
    }

    /// Copies host bytes to `dst` in the stream's order; returns once the stream has run it.
    #[inline]
    #[track_caller]
    pub(crate) fn memcpy_htod(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        let _range = nvtx::op_range(|| nvtx::COPY.into());
        if capture::active() {
            capture::check_blocking(HTOD, Some(self.driver_id()))?;
        }
        sync_debug::on_sync(HTOD)?;
        if sanitizer::enabled() {
            let op = || "blocking copy host to device".to_string();
            self.sanitize(&op, &[(self.span(dst, src.len()), true)], NO_OPERANDS)?;
        }
        rt()?.driver.memcpy_htod(dst, src, self.driver_id())?;
        // Both drivers synchronize the stream before returning (PyTorch's blocking copy does too).
        if sanitizer::enabled() {
            sanitizer::host_waits_stream(self.driver_id());
        }
        Ok(())
    }

    /// Copies device bytes at `src` to the host in the stream's order; returns once `dst`
    /// holds them.
    #[inline]
    #[track_caller]
    pub(crate) fn memcpy_dtoh(&self, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        let _range = nvtx::op_range(|| nvtx::COPY.into());
        if capture::active() {
            capture::check_blocking(DTOH, Some(self.driver_id()))?;
        }
        sync_debug::on_sync(DTOH)?;
        if sanitizer::enabled() {
            let op = || "blocking copy device to host".to_string();
            self.sanitize(&op, &[(self.span(src, dst.len()), false)], NO_OPERANDS)?;
        }
        let rt = rt()?;
        rt.driver.memcpy_dtoh(dst, src, self.driver_id())?;
        if sanitizer::enabled() {
            sanitizer::host_waits_stream(self.driver_id());
        }
        // A host read is a synchronization point: errors pending on the device are returned.
        super::errors::check(self.device())
    }

    /// Queues a copy of `bytes` bytes within the stream's device (both sides in `uses`' memory).
    #[inline]
    pub(crate) fn memcpy_dtod<T: Operand + ?Sized>(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        uses: &[&T],
    ) -> Result<()> {
        let _range = nvtx::op_range(|| nvtx::COPY.into());
        if sanitizer::enabled() {
            let accesses = [(self.span(src, bytes), false), (self.span(dst, bytes), true)];
            self.sanitize(&|| "copy device to device".into(), &accesses, uses)?;
        }
        self.note_work(uses);
        rt()?.driver.memcpy_dtod(dst, src, bytes, self.driver_id())
    }

    /// Queues a copy of `bytes` bytes from `src` on `src_device` to `dst` on `dst_device` (the
    /// stream is one of the two devices'); over the peer link where enabled. Both sides are in
    /// `uses`' memory.
    #[inline]
    pub(crate) fn memcpy_peer<T: Operand + ?Sized>(
        &self,
        (dst_device, dst): (usize, DevicePtr),
        (src_device, src): (usize, DevicePtr),
        bytes: usize,
        uses: &[&T],
    ) -> Result<()> {
        let _range = nvtx::op_range(|| nvtx::COPY.into());
        if capture::active() {
            // CUDA refuses `cuMemcpyPeerAsync` on a capturing stream; refused here the same way on
            // every driver, as a typed error.
            capture::refuse_on_member(PEER, self.driver_id(), PEER_REASON)?;
        }
        if sanitizer::enabled() {
            let span = |device, p: DevicePtr| Span { device, start: p.0, end: p.0.saturating_add(bytes as u64) };
            let accesses = [(span(src_device, src), false), (span(dst_device, dst), true)];
            self.sanitize(&|| format!("copy cuda:{src_device} to cuda:{dst_device}"), &accesses, uses)?;
        }
        self.note_work(uses);
        rt()?.driver.memcpy_peer(dst_device, dst, src_device, src, bytes, self.driver_id())
    }

    /// Queues a copy of `bytes` bytes from pinned host memory at `src` to `dst` and returns at once
    /// (`uses`: the owners of both sides).
    ///
    /// # Safety
    /// As [`crate::driver::Driver::memcpy_htod_async`]: `[src, src + bytes)` lies inside one
    /// live pinned allocation of this runtime's driver, which stays allocated and unwritten by
    /// the host until the stream has passed the copy.
    #[inline]
    pub(super) unsafe fn memcpy_htod_async<T: Operand + ?Sized>(
        &self,
        dst: DevicePtr,
        src: HostPtr,
        bytes: usize,
        uses: &[&T],
    ) -> Result<()> {
        let _range = nvtx::op_range(|| nvtx::COPY.into());
        let driver = &rt()?.driver;
        if sanitizer::enabled() {
            let op = || "non_blocking copy pinned host to device".to_string();
            self.sanitize(&op, &[(self.span(dst, bytes), true)], uses)?;
        }
        self.note_work(uses);
        // SAFETY: the caller upholds this function's contract, which is the driver call's.
        unsafe { driver.memcpy_htod_async(dst, src, bytes, self.driver_id()) }
    }

    /// Queues a copy of `bytes` bytes from `src` to pinned host memory at `dst` and returns at once
    /// (`uses`: the owners of both sides).
    ///
    /// # Safety
    /// As [`crate::driver::Driver::memcpy_dtoh_async`]: `[dst, dst + bytes)` lies inside one
    /// live pinned allocation of this runtime's driver, which stays allocated and is neither read
    /// nor written by the host until the stream has passed the copy.
    #[inline]
    pub(super) unsafe fn memcpy_dtoh_async<T: Operand + ?Sized>(
        &self,
        dst: HostPtr,
        src: DevicePtr,
        bytes: usize,
        uses: &[&T],
    ) -> Result<()> {
        let _range = nvtx::op_range(|| nvtx::COPY.into());
        let driver = &rt()?.driver;
        if sanitizer::enabled() {
            let op = || "non_blocking copy device to pinned host".to_string();
            self.sanitize(&op, &[(self.span(src, bytes), false)], uses)?;
        }
        self.note_work(uses);
        // SAFETY: the caller upholds this function's contract, which is the driver call's.
        unsafe { driver.memcpy_dtoh_async(dst, src, bytes, self.driver_id()) }
    }

    /// Records the driver event `event` (of this stream's device) after the work queued so far.
    #[inline]
    pub(super) fn record_raw(&self, event: EventId) -> Result<()> {
        if capture::active() {
            capture::on_record(self.driver_id(), event);
        }
        rt()?.driver.event_record(event, self.driver_id())?;
        if sanitizer::enabled() {
            sanitizer::record_event(self, event);
        }
        Ok(())
    }

    /// Makes later work on this stream wait for the driver event's last recording.
    #[inline]
    pub(super) fn wait_raw(&self, event: EventId) -> Result<()> {
        if capture::active() {
            capture::on_wait(self.driver_id(), event)?;
        }
        rt()?.driver.stream_wait_event(self.driver_id(), event)?;
        if sanitizer::enabled() {
            sanitizer::wait_event(self, event);
        }
        Ok(())
    }

    /// Test hook: queues work that keeps the stream busy for `duration`.
    pub(crate) fn delay(&self, duration: Duration) -> Result<()> {
        self.note_work(NO_OPERANDS);
        rt()?.driver.delay(self.driver_id(), duration)
    }

    /// The stream sanitizer's check of collective `op` (PyTorch's name `name`, of a group of
    /// `world` ranks) about to be queued on this stream over `uses`' memory: its input read, its
    /// output written, refused where that races with work of another stream. Called by the
    /// process group before it queues the collective by either backend ([`Stream::collective`],
    /// [`Stream::host_job`]); one relaxed load while the sanitizer is off.
    #[inline]
    pub(crate) fn check_collective<T: Operand + ?Sized>(
        &self,
        name: &str,
        op: &Collective,
        world: usize,
        uses: &[&T],
    ) -> Result<()> {
        if sanitizer::enabled() {
            let accesses = collective_accesses(self.device(), op, world);
            return self.sanitize(&|| collective_name(name, op), &accesses, uses);
        }
        Ok(())
    }

    /// Queues `op` of the communicator `comm` (made for this stream's device), checked first by
    /// [`Stream::check_collective`].
    #[inline]
    pub(crate) fn collective(&self, comm: &dyn Comm, op: &Collective) -> Result<()> {
        comm.run(op, rt()?.driver.raw_stream(self.driver_id())?)
    }

    /// Queues the user kernel `func` with `args`, whose addresses point into the memory of the
    /// operands `uses` lists (called only while a capture is underway, so an eager launch
    /// gathers nothing).
    #[inline]
    pub(crate) fn user_launch<'u, T: Operand + ?Sized + 'u>(
        &self,
        func: UserFunctionId,
        shape: LaunchShape,
        args: &[UserArg],
        uses: impl FnOnce() -> Vec<&'u T>,
    ) -> Result<()> {
        let _range = nvtx::op_range(|| nvtx::USER_KERNEL.into());
        if sanitizer::enabled() {
            let uses = uses();
            self.sanitize(&|| format!("user kernel {}", func.0), &operand_accesses(&uses), &uses)?;
            self.note_work(&uses);
        } else if capture::active() {
            self.note_captured_work(&uses());
        }
        rt()?.driver.user_launch(self.driver_id(), func, shape, args)
    }

    /// Queues a kernel's host twin over `uses`' memory (the simulated machine); a capture keeps
    /// it, and each replay runs it again.
    pub(crate) fn host_kernel<T: Operand + ?Sized>(&self, kernel: HostKernel, uses: &[&T]) -> Result<()> {
        let _range = nvtx::op_range(|| nvtx::USER_KERNEL.into());
        if sanitizer::enabled() {
            self.sanitize(&|| "user kernel (host twin)".into(), &operand_accesses(uses), uses)?;
        }
        self.note_work(uses);
        rt()?.driver.host_kernel(self.driver_id(), kernel)
    }

    /// Queues a jiterator call, whose views point into `uses`' memory.
    pub(crate) fn jit_launch<T: Operand + ?Sized>(&self, op: &crate::kernel::JitOp, uses: &[&T]) -> Result<()> {
        let _range = nvtx::op_range(|| format!("jiterator::{}", op.code.name).into());
        if sanitizer::enabled() {
            let accesses = view_accesses(self.device(), &op.ins, &op.outs);
            self.sanitize(&|| format!("jiterator {}", op.code.name), &accesses, uses)?;
        }
        self.note_work(uses);
        rt()?.driver.jit_launch(self.driver_id(), op)
    }

    /// Queues a one-output jiterator call over dense operands (in `uses`' memory): the jiterator's
    /// small-call fast lane, as [`Stream::launch_dense_binary`] is the built-in ops'.
    #[inline]
    pub(crate) fn launch_dense_jit<T: Operand + ?Sized>(
        &self,
        op: &crate::kernel::DenseJit<'_>,
        uses: &[&T],
    ) -> Result<()> {
        let _range = nvtx::op_range(|| format!("jiterator::{}", op.code.name).into());
        if sanitizer::enabled() {
            let bytes = |p: DevicePtr, d: crate::dtype::DType| self.span(p, op.n.saturating_mul(d.size()));
            let mut accesses: Vec<(Span, bool)> = op.ins.iter().map(|&(p, d)| (bytes(p, d), false)).collect();
            accesses.push((bytes(op.out, op.common), true));
            self.sanitize(&|| format!("jiterator {}", op.code.name), &accesses, uses)?;
        }
        self.note_work(uses);
        rt()?.driver.launch_dense_jit(self.driver_id(), op)
    }

    /// Queues a host job over device memory (the simulated machine's collectives, checked first
    /// by [`Stream::check_collective`]).
    pub(crate) fn host_job(&self, job: HostJob) -> Result<()> {
        rt()?.driver.host_job(self.driver_id(), job)
    }
}

/// Loads a user kernel for `device` (a checked index): CUDA C through the driver's NVRTC path,
/// PTX or a cubin.
pub(crate) fn user_module_load(device: usize, image: UserImage<'_>, name: &str) -> Result<UserFunctionId> {
    let rt = rt()?;
    rt.driver.user_module_load(rt.check(device)?, image, name)
}

/// The byte sizes of a loaded user kernel's parameters, where the driver can tell.
pub(crate) fn user_param_sizes(func: UserFunctionId) -> Result<Option<Vec<usize>>> {
    rt()?.driver.user_param_sizes(func)
}

/// A new communicator's unique id, from the driver's collectives library.
pub(crate) fn comm_unique_id() -> Result<Vec<u8>> {
    rt()?.driver.comm_unique_id()
}

/// Joins communicator `id` as `rank` of `world` on `device` (a checked index).
pub(crate) fn comm_init_rank(device: usize, world: usize, rank: usize, id: &[u8]) -> Result<Box<dyn Comm>> {
    let rt = rt()?;
    rt.driver.comm_init_rank(rt.check(device)?, world, rank, id)
}

/// One communicator per device of `devices` (checked indices), rank `i` on `devices[i]`.
pub(crate) fn comm_init_all(devices: &[usize]) -> Result<Vec<Box<dyn Comm>>> {
    let rt = rt()?;
    for &d in devices {
        rt.check(d)?;
    }
    rt.driver.comm_init_all(devices)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::CaptureMode;
    use crate::dtype::DType;
    use crate::kernel::{BinaryOp, BufferView};
    use crate::runtime::{with_stream, CUDAGraph};
    use crate::scalar::Scalar;

    /// Device memory owned as a tensor's storage is: the door's operand in these tests.
    struct Probe(Arc<DeviceBlock>);

    impl Operand for Probe {
        fn pool(&self) -> Option<MemPoolId> {
            self.0.pool()
        }
        fn keep_alive(&self) -> KeepAlive {
            self.0.clone()
        }
    }

    const BYTES: usize = 4096;

    fn f32_view(p: &Probe) -> BufferView {
        let n = BYTES / 4;
        BufferView { ptr: p.0.ptr(), dtype: DType::F32, shape: [n][..].into(), strides: [1][..].into(), offset: 0 }
    }

    /// Each door method that queues work over memory, called while its stream captures, hands
    /// the capture an owned handle of every operand it was given (the graph then holds them until
    /// it is reset), and none without a capture: no tensor-layer path has to remember it.
    #[test]
    fn the_door_hands_a_capture_every_operand_of_the_work_it_queues() -> Result<()> {
        let Ok(rt) = rt() else { return Ok(()) };
        if rt.devices.is_empty() {
            return Ok(());
        }
        // The last device: other unit tests of the crate mostly use device 0, and a capture
        // refuses a synchronize of its device from any thread.
        let device = rt.devices.len() - 1;
        let stream = Stream::new(device, 0)?;
        let (a, b) =
            (Probe(Arc::new(DeviceBlock::new(BYTES, &stream)?)), Probe(Arc::new(DeviceBlock::new(BYTES, &stream)?)));
        let dense = DenseBinary {
            op: BinaryOp::Add,
            compute: DType::F32,
            n: BYTES / 4,
            dst: (a.0.ptr(), DType::F32),
            lhs: (a.0.ptr(), DType::F32),
            rhs: (b.0.ptr(), DType::F32),
            rhs_value: None,
        };
        let fill = KernelOp::Fill { dst: f32_view(&a), value: Scalar::from(1.5f32) };
        // Every door method over memory, with the operands it is given.
        let peer = || stream.memcpy_peer((device, a.0.ptr()), (device, b.0.ptr()), BYTES, &[&a, &b]);
        let calls: [(&str, &dyn Fn() -> Result<()>); 4] = [
            ("launch", &|| stream.launch(&fill, &[&a, &b])),
            ("launch_dense_binary", &|| stream.launch_dense_binary(&dense, &[&a, &b])),
            ("memset_d8", &|| stream.memset_d8(a.0.ptr(), 0, BYTES, &[&a, &b])),
            ("memcpy_dtod", &|| stream.memcpy_dtod(a.0.ptr(), b.0.ptr(), BYTES, &[&a, &b])),
        ];
        let counts = || (Arc::strong_count(&a.0), Arc::strong_count(&b.0));
        for (what, call) in calls.iter().chain([("memcpy_peer", &peer as &dyn Fn() -> Result<()>)].iter()) {
            call()?;
            assert_eq!(counts(), (1, 1), "{what} without a capture took a handle");
        }
        stream.synchronize()?;
        let mut g = CUDAGraph::new();
        with_stream(&stream, || {
            g.capture_begin(None, CaptureMode::Relaxed)?;
            for (i, (what, call)) in calls.iter().enumerate() {
                call()?;
                assert_eq!(counts(), (i + 2, i + 2), "{what} in a capture did not hand over both operands");
            }
            g.capture_end()
        })?;
        assert_eq!(counts(), (1 + calls.len(), 1 + calls.len()), "the graph holds what its capture kept");
        g.reset()?;
        assert_eq!(counts(), (1, 1), "a reset graph holds nothing");
        // A peer copy on a capturing stream is refused at the door on every driver (CUDA refuses
        // `cuMemcpyPeerAsync` there), keeps nothing, and invalidates the capture as CUDA does.
        let mut g = CUDAGraph::new();
        let refused = with_stream(&stream, || {
            g.capture_begin(None, CaptureMode::Relaxed)?;
            let r = peer();
            let end = g.capture_end();
            Ok::<_, crate::Error>((r, end))
        })?;
        assert!(matches!(refused.0, Err(crate::Error::IllegalDuringCapture { .. })), "{:?}", refused.0);
        assert!(matches!(refused.1, Err(crate::Error::CaptureInvalidated { .. })), "{:?}", refused.1);
        assert_eq!(counts(), (1, 1), "a refused peer copy keeps nothing");
        Ok(())
    }

    /// A collective reads its input and writes its output, sized by the group (a gather's
    /// output and a reduce-scatter's input hold `world` parts); a send only reads, a receive
    /// only writes; an empty buffer is no access; the report names the reduction or the peer.
    #[test]
    fn a_collective_reads_its_input_and_writes_its_output() {
        use crate::driver::comm::ReduceOp;
        let (a, b, d) = (DevicePtr(0x1000), DevicePtr(0x8000), DType::F32);
        let span = |p: DevicePtr, n: u64, w| (Span { device: 2, start: p.0, end: p.0 + n * 4 }, w);
        let gather = Collective::AllGather { send: a, recv: b, count: 10, dtype: d };
        assert_eq!(collective_accesses(2, &gather, 3), vec![span(a, 10, false), span(b, 30, true)]);
        let scatter = Collective::ReduceScatter { send: a, recv: b, count: 10, dtype: d, op: ReduceOp::Max };
        assert_eq!(collective_accesses(2, &scatter, 3), vec![span(a, 30, false), span(b, 10, true)]);
        let reduce = Collective::AllReduce { send: a, recv: a, count: 7, dtype: d, op: ReduceOp::Sum };
        assert_eq!(collective_accesses(2, &reduce, 4), vec![span(a, 7, false), span(a, 7, true)]);
        let split =
            Collective::AllToAll { send: a, recv: b, dtype: d, send_counts: vec![1, 2], recv_counts: vec![3, 0] };
        assert_eq!(collective_accesses(2, &split, 2), vec![span(a, 3, false), span(b, 3, true)]);
        let send = Collective::Send { buf: a, count: 5, dtype: d, peer: 1 };
        assert_eq!(collective_accesses(2, &send, 2), vec![span(a, 5, false)]);
        let recv = Collective::Recv { buf: b, count: 5, dtype: d, peer: 0 };
        assert_eq!(collective_accesses(2, &recv, 2), vec![span(b, 5, true)]);
        let empty = Collective::Broadcast { send: a, recv: b, count: 0, dtype: d, root: 0 };
        assert!(collective_accesses(2, &empty, 2).is_empty());
        assert_eq!(collective_name("all_reduce", &reduce), "all_reduce sum");
        assert_eq!(collective_name("reduce_scatter_tensor", &scatter), "reduce_scatter_tensor max");
        assert_eq!(collective_name("send", &send), "send to rank 1");
        assert_eq!(collective_name("recv", &recv), "recv from rank 0");
        assert_eq!(collective_name("all_gather_into_tensor", &gather), "all_gather_into_tensor");
    }
}
