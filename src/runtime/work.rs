//! The one door to device work: every operation the layers above queue on a device — kernel
//! launches, memsets, copies (host ↔ device, within a device, between devices, pinned and
//! asynchronous), event records and waits — is a crate-internal method of [`Stream`] here, so a
//! later stream capture or collective hooks in one place. Each method is one driver call on the
//! stream's handle (`#[inline]`: the small-op host cost stays one direct call).
//!
//! The caller validates what it passes (the driver validates nothing): addresses are live memory
//! of the stream's device (or of a peer it may access), kept alive in the stream's order.

use super::capture::{self, KeepAlive};
use super::memory::DeviceBlock;
use super::rt;
use super::stream::Stream;
use crate::driver::comm::{Collective, Comm, HostJob};
use crate::driver::{DevicePtr, EventId, HostPtr};
use crate::error::Result;
use crate::kernel::{DenseBinary, KernelOp, Workspace, GEMM_WORKSPACE_BYTES};
use std::sync::Arc;
use std::time::Duration;

/// The blocking copies as a capture's refusal names them.
const HTOD: &str = "a blocking host-to-device copy (Tensor::from_slice or to() onto a device, a CPU operand)";
const DTOH: &str = "a blocking device-to-host copy (Tensor::to_vec, item, cpu, to(Device::Cpu))";

impl Stream {
    /// Tells a capture this stream belongs to that work was queued on it (one relaxed load when
    /// no capture is underway).
    #[inline]
    fn note_work(&self) {
        if capture::active() {
            capture::on_work(self.driver_id());
        }
    }

    /// Queues `op` (a kernel by op and dtype); [`crate::Error::Unsupported`] where the driver
    /// has no kernel for it.
    #[inline]
    pub(crate) fn launch(&self, op: &KernelOp) -> Result<()> {
        if capture::active() {
            return self.launch_during_capture(op);
        }
        rt()?.driver.launch(self.driver_id(), op)
    }

    /// [`Stream::launch`] while a capture is underway. A matrix product queued on a capturing
    /// stream gets the capture's workspace for this stream (a block of its private pool, made by
    /// its first product here, kept by the graph) instead of the driver's own per-stream one,
    /// which eager work on the stream shares; as PyTorch's cuBLAS workspaces, which come from the
    /// caching allocator, it then counts in the pool's statistics and snapshots.
    #[cold]
    fn launch_during_capture(&self, op: &KernelOp) -> Result<()> {
        let id = self.driver_id();
        if let KernelOp::Gemm { lhs, rhs, dst, workspace: None } = op {
            let needs_one = dst.numel() > 0 && lhs.shape.last().is_some_and(|&k| k > 0);
            if let Some(c) = capture::of_stream(id).filter(|_| needs_one) {
                let workspace = Some(c.gemm_workspace(id, || self.gemm_workspace_block())?);
                let op = KernelOp::Gemm { lhs: lhs.clone(), rhs: rhs.clone(), dst: dst.clone(), workspace };
                capture::on_work(id);
                return rt()?.driver.launch(id, &op);
            }
        }
        capture::on_work(id);
        rt()?.driver.launch(id, op)
    }

    /// A new matrix-product workspace for work on this stream, from the caching allocator (the
    /// capture's pool, for a capturing stream), and the block that holds it.
    fn gemm_workspace_block(&self) -> Result<(Workspace, KeepAlive)> {
        let block = DeviceBlock::new(GEMM_WORKSPACE_BYTES, self)?;
        Ok((Workspace { ptr: block.ptr(), bytes: GEMM_WORKSPACE_BYTES }, Arc::new(block)))
    }

    /// Queues a binary elementwise op over dense operands: the small-op fast lane.
    #[inline]
    pub(crate) fn launch_dense_binary(&self, op: &DenseBinary) -> Result<()> {
        self.note_work();
        rt()?.driver.launch_dense_binary(self.driver_id(), op)
    }

    /// Queues a fill of `bytes` bytes at `dst` with `value`.
    #[inline]
    pub(crate) fn memset_d8(&self, dst: DevicePtr, value: u8, bytes: usize) -> Result<()> {
        self.note_work();
        rt()?.driver.memset_d8(dst, value, bytes, self.driver_id())
    }

    /// Copies host bytes to `dst` in the stream's order; returns once `src` may be reused.
    #[inline]
    pub(crate) fn memcpy_htod(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        if capture::active() {
            capture::check_blocking(HTOD, Some(self.driver_id()))?;
        }
        rt()?.driver.memcpy_htod(dst, src, self.driver_id())
    }

    /// Copies device bytes at `src` to the host in the stream's order; returns once `dst`
    /// holds them.
    #[inline]
    pub(crate) fn memcpy_dtoh(&self, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        if capture::active() {
            capture::check_blocking(DTOH, Some(self.driver_id()))?;
        }
        let rt = rt()?;
        rt.driver.memcpy_dtoh(dst, src, self.driver_id())?;
        // A host read is a synchronization point: errors pending on the device are returned.
        super::errors::check(self.device())
    }

    /// Queues a copy of `bytes` bytes within the stream's device.
    #[inline]
    pub(crate) fn memcpy_dtod(&self, dst: DevicePtr, src: DevicePtr, bytes: usize) -> Result<()> {
        self.note_work();
        rt()?.driver.memcpy_dtod(dst, src, bytes, self.driver_id())
    }

    /// Queues a copy of `bytes` bytes from `src` on `src_device` to `dst` on `dst_device` (the
    /// stream is one of the two devices'); over the peer link where enabled.
    #[inline]
    pub(crate) fn memcpy_peer(
        &self,
        (dst_device, dst): (usize, DevicePtr),
        (src_device, src): (usize, DevicePtr),
        bytes: usize,
    ) -> Result<()> {
        self.note_work();
        rt()?.driver.memcpy_peer(dst_device, dst, src_device, src, bytes, self.driver_id())
    }

    /// Queues a copy of `bytes` bytes from pinned host memory at `src` to `dst` and returns at once.
    ///
    /// # Safety
    /// As [`crate::driver::Driver::memcpy_htod_async`]: `[src, src + bytes)` lies inside one
    /// live pinned allocation of this runtime's driver, which stays allocated and unwritten by
    /// the host until the stream has passed the copy.
    #[inline]
    pub(super) unsafe fn memcpy_htod_async(&self, dst: DevicePtr, src: HostPtr, bytes: usize) -> Result<()> {
        let driver = &rt()?.driver;
        self.note_work();
        // SAFETY: the caller upholds this function's contract, which is the driver call's.
        unsafe { driver.memcpy_htod_async(dst, src, bytes, self.driver_id()) }
    }

    /// Queues a copy of `bytes` bytes from `src` to pinned host memory at `dst` and returns at once.
    ///
    /// # Safety
    /// As [`crate::driver::Driver::memcpy_dtoh_async`]: `[dst, dst + bytes)` lies inside one
    /// live pinned allocation of this runtime's driver, which stays allocated and is neither read
    /// nor written by the host until the stream has passed the copy.
    #[inline]
    pub(super) unsafe fn memcpy_dtoh_async(&self, dst: HostPtr, src: DevicePtr, bytes: usize) -> Result<()> {
        let driver = &rt()?.driver;
        self.note_work();
        // SAFETY: the caller upholds this function's contract, which is the driver call's.
        unsafe { driver.memcpy_dtoh_async(dst, src, bytes, self.driver_id()) }
    }

    /// Records the driver event `event` (of this stream's device) after the work queued so far.
    #[inline]
    pub(super) fn record_raw(&self, event: EventId) -> Result<()> {
        if capture::active() {
            capture::on_record(self.driver_id(), event);
        }
        rt()?.driver.event_record(event, self.driver_id())
    }

    /// Makes later work on this stream wait for the driver event's last recording.
    #[inline]
    pub(super) fn wait_raw(&self, event: EventId) -> Result<()> {
        if capture::active() {
            capture::on_wait(self.driver_id(), event)?;
        }
        rt()?.driver.stream_wait_event(self.driver_id(), event)
    }

    /// Test hook: queues work that keeps the stream busy for `duration`.
    pub(crate) fn delay(&self, duration: Duration) -> Result<()> {
        self.note_work();
        rt()?.driver.delay(self.driver_id(), duration)
    }

    /// Queues `op` of the communicator `comm` (made for this stream's device).
    #[inline]
    pub(crate) fn collective(&self, comm: &dyn Comm, op: &Collective) -> Result<()> {
        comm.run(op, rt()?.driver.raw_stream(self.driver_id())?)
    }

    /// Queues a host job over device memory (the simulated machine's collectives).
    pub(crate) fn host_job(&self, job: HostJob) -> Result<()> {
        rt()?.driver.host_job(self.driver_id(), job)
    }
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
