//! [`Driver`] for [`CudaDriver`]: each method checks its handles and forwards to the file of
//! its trade (`events.rs`, `memory.rs`, `host.rs`, `vmm.rs`, `graph.rs`, `nccl.rs`, and the
//! kernel wing's `launch.rs`), and [`Drop`] gives everything back.

use super::driver::{CudaDriver, StreamEntry};
use super::handles::RawStream;
use super::kernels::launch;
use super::status::{driver_error, lock, ready, write, DRIVER};
use super::{capture, events, host, memory, nccl, vmm};
use crate::driver::{CaptureMode, DeviceProperties, DevicePtr, Driver, EventId, GraphId, HostPtr, StreamId, Telemetry};
use crate::error::{Error, Result};
use crate::kernel::KernelOp;
use cudarc::driver::result::{self as cu, DriverError};
use cudarc::driver::sys::{self, CUresult};
use std::sync::atomic::Ordering;
use std::sync::PoisonError;
use std::time::Duration;

impl Driver for CudaDriver {
    fn name(&self) -> &'static str {
        DRIVER
    }

    fn device_count(&self) -> usize {
        self.devices.len()
    }

    fn unavailable_reason(&self) -> Option<String> {
        self.unavailable.clone()
    }

    fn properties(&self, device: usize) -> Result<DeviceProperties> {
        super::telemetry::properties(self, device)
    }

    fn telemetry(&self) -> &dyn Telemetry {
        self
    }

    fn mem_get_info(&self, device: usize) -> Result<(usize, usize)> {
        self.enter(device)?;
        cu::mem_get_info().map_err(|e| driver_error("cuMemGetInfo", e))
    }

    fn can_access_peer(&self, device: usize, peer: usize) -> Result<bool> {
        let dev = self.enter(device)?;
        let other = self.device(peer)?;
        if device == peer {
            return Ok(false);
        }
        let mut can = 0;
        // SAFETY: both ordinals came from `cuDeviceGet`; `can` is a valid out-pointer.
        unsafe { sys::cuDeviceCanAccessPeer(&mut can, dev.cu, other.cu) }
            .result()
            .map_err(|e| driver_error("cuDeviceCanAccessPeer", e))?;
        Ok(can != 0)
    }

    fn enable_peer_access(&self, device: usize, peer: usize) -> Result<()> {
        if device == peer {
            self.device(device)?;
            return Ok(());
        }
        if !self.can_access_peer(device, peer)? {
            return Err(Error::PeerAccessUnsupported { from: device, to: peer });
        }
        let peer_ctx = self.device(peer)?.ctx;
        self.enter(device)?;
        // SAFETY:
        // - `device`'s context is current and `peer_ctx` is a live retained primary context;
        // - flags must be 0.
        match unsafe { sys::cuCtxEnablePeerAccess(peer_ctx.0, 0) } {
            // Mapped ranges of expandable segments need their own grant (`cuMemSetAccess`).
            CUresult::CUDA_SUCCESS | CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {
                vmm::peer_enabled(self, device, peer)
            }
            CUresult::CUDA_ERROR_PEER_ACCESS_UNSUPPORTED => {
                Err(Error::PeerAccessUnsupported { from: device, to: peer })
            }
            other => Err(driver_error("cuCtxEnablePeerAccess", DriverError(other))),
        }
    }

    fn synchronize_device(&self, device: usize) -> Result<()> {
        self.enter(device)?;
        cu::ctx::synchronize().map_err(|e| driver_error("cuCtxSynchronize", e))
    }

    fn stream_priority_range(&self, device: usize) -> Result<(i32, i32)> {
        self.enter(device)?;
        cu::stream::get_priority_range().map_err(|e| driver_error("cuCtxGetStreamPriorityRange", e))
    }

    fn default_stream(&self, device: usize) -> Result<StreamId> {
        Ok(self.device(device)?.default_stream)
    }

    fn create_stream(&self, device: usize, priority: i32) -> Result<StreamId> {
        self.enter(device)?;
        let raw = cu::stream::create_with_priority(cu::stream::StreamKind::NonBlocking, priority)
            .map_err(|e| driver_error("cuStreamCreateWithPriority", e))?;
        let id = self.next_id();
        let raw = RawStream(raw);
        write(&self.streams).insert(id, StreamEntry { device, raw, owned: true });
        Ok(StreamId(id))
    }

    fn raw_stream(&self, stream: StreamId) -> Result<u64> {
        Ok(self.stream(stream, "Stream::cuda_stream")?.raw.0 as usize as u64)
    }

    fn raw_context(&self, device: usize) -> Result<u64> {
        Ok(self.device(device)?.ctx.0 as usize as u64)
    }

    unsafe fn import_stream(&self, device: usize, raw: u64) -> Result<(StreamId, i32)> {
        let dev = self.enter(device)?;
        let op = "Stream::from_external";
        // 0 is the legacy default stream, as is `CU_STREAM_LEGACY` (0x1).
        if raw <= 1 {
            return Ok((dev.default_stream, 0));
        }
        let handle = raw as usize as sys::CUstream;
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: the caller guarantees `handle` is a live stream; `ctx` is a valid out-pointer.
        unsafe { sys::cuStreamGetCtx(handle, &mut ctx) }.result().map_err(|e| driver_error("cuStreamGetCtx", e))?;
        if ctx != dev.ctx.0 {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("stream {raw:#x} belongs to another CUDA context than cuda:{device}'s primary context"),
            });
        }
        let mut priority: std::ffi::c_int = 0;
        // SAFETY: as above; `priority` is a valid out-pointer.
        unsafe { sys::cuStreamGetPriority(handle, &mut priority) }
            .result()
            .map_err(|e| driver_error("cuStreamGetPriority", e))?;
        let mut streams = write(&self.streams);
        if let Some((&id, _)) = streams.iter().find(|(_, e)| e.raw.0 == handle) {
            return Ok((StreamId(id), priority));
        }
        let id = self.next_id();
        streams.insert(id, StreamEntry { device, raw: RawStream(handle), owned: false });
        Ok((StreamId(id), priority))
    }

    fn stream_query(&self, stream: StreamId) -> Result<bool> {
        let s = self.stream(stream, "stream_query")?;
        self.enter(s.device)?;
        // SAFETY: the stream belongs to the current context and lives until the driver drops.
        ready("cuStreamQuery", unsafe { sys::cuStreamQuery(s.raw.0) })
    }

    fn stream_synchronize(&self, stream: StreamId) -> Result<()> {
        let s = self.stream(stream, "stream_synchronize")?;
        self.enter(s.device)?;
        // SAFETY: the stream belongs to the current context and lives until the driver drops.
        unsafe { cu::stream::synchronize(s.raw.0) }.map_err(|e| driver_error("cuStreamSynchronize", e))
    }

    fn stream_wait_event(&self, stream: StreamId, event: EventId) -> Result<()> {
        let s = self.stream(stream, "stream_wait_event")?;
        let ev = self.event(event, "stream_wait_event")?;
        self.enter(s.device)?;
        let flags = sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT;
        // SAFETY:
        // - both handles are live (the runtime destroys an event only when unused);
        // - the event may belong to another device's context, which CUDA allows.
        unsafe { cu::stream::wait_event(s.raw.0, ev.raw.0, flags) }.map_err(|e| driver_error("cuStreamWaitEvent", e))
    }

    fn event_create(&self, device: usize, enable_timing: bool, blocking: bool) -> Result<EventId> {
        events::create(self, device, enable_timing, blocking)
    }

    fn event_destroy(&self, event: EventId) {
        events::destroy(self, event)
    }

    fn event_record(&self, event: EventId, stream: StreamId) -> Result<()> {
        events::record(self, event, stream)
    }

    fn event_query(&self, event: EventId) -> Result<bool> {
        events::query(self, event)
    }

    fn event_synchronize(&self, event: EventId) -> Result<()> {
        events::synchronize(self, event)
    }

    fn event_elapsed_ms(&self, start: EventId, end: EventId) -> Result<f32> {
        events::elapsed_ms(self, start, end)
    }

    fn check_foreign_range(&self, device: usize, ptr: DevicePtr, bytes: usize) -> Result<()> {
        memory::check_foreign_range(self, device, ptr, bytes)
    }

    fn malloc(&self, device: usize, bytes: usize) -> Result<DevicePtr> {
        capture::maybe_relaxed(|| memory::malloc(self, device, bytes))
    }

    unsafe fn free(&self, device: usize, ptr: DevicePtr) -> Result<()> {
        memory::free(self, device, ptr)
    }

    fn memset_d8(&self, dst: DevicePtr, value: u8, bytes: usize, stream: StreamId) -> Result<()> {
        memory::memset_d8(self, dst, value, bytes, stream)
    }

    fn memcpy_htod(&self, dst: DevicePtr, src: &[u8], stream: StreamId) -> Result<()> {
        memory::htod(self, dst, src, stream)
    }

    fn memcpy_dtoh(&self, dst: &mut [u8], src: DevicePtr, stream: StreamId) -> Result<()> {
        memory::dtoh(self, dst, src, stream)
    }

    fn memcpy_dtod(&self, dst: DevicePtr, src: DevicePtr, bytes: usize, stream: StreamId) -> Result<()> {
        memory::dtod(self, dst, src, bytes, stream)
    }

    fn memcpy_peer(
        &self,
        dst_device: usize,
        dst: DevicePtr,
        src_device: usize,
        src: DevicePtr,
        bytes: usize,
        stream: StreamId,
    ) -> Result<()> {
        memory::peer(self, dst_device, dst, src_device, src, bytes, stream)
    }

    fn host_alloc(&self, bytes: usize) -> Result<HostPtr> {
        host::alloc(self, bytes)
    }

    fn host_free(&self, ptr: HostPtr) -> Result<()> {
        host::free(self, ptr)
    }

    unsafe fn memcpy_htod_async(&self, dst: DevicePtr, src: HostPtr, bytes: usize, stream: StreamId) -> Result<()> {
        // SAFETY: the caller upholds this method's contract, which is `htod_async`'s.
        unsafe { host::htod_async(self, dst, src, bytes, stream) }
    }

    unsafe fn memcpy_dtoh_async(&self, dst: HostPtr, src: DevicePtr, bytes: usize, stream: StreamId) -> Result<()> {
        // SAFETY: the caller upholds this method's contract, which is `dtoh_async`'s.
        unsafe { host::dtoh_async(self, dst, src, bytes, stream) }
    }

    fn vmm_granularity(&self, device: usize) -> Option<usize> {
        vmm::granularity(self, device)
    }

    fn vmm_reserve(&self, device: usize, bytes: usize) -> Result<DevicePtr> {
        capture::maybe_relaxed(|| vmm::reserve(self, device, bytes))
    }

    fn vmm_map(&self, device: usize, at: DevicePtr, bytes: usize) -> Result<()> {
        capture::maybe_relaxed(|| vmm::map(self, device, at, bytes))
    }

    fn vmm_unmap(&self, device: usize, at: DevicePtr, bytes: usize) -> Result<()> {
        vmm::unmap(self, device, at, bytes)
    }

    fn vmm_release(&self, device: usize, base: DevicePtr, bytes: usize) -> Result<()> {
        vmm::release(self, device, base, bytes)
    }

    fn launch(&self, stream: StreamId, op: &KernelOp) -> Result<()> {
        op.validate()?;
        let s = self.stream(stream, "launch")?;
        let dev = self.enter(s.device)?;
        capture::maybe_relaxed(|| launch::launch(&dev.ops, dev.cu, &dev.dropped, s.raw.0, stream.0, op))
    }

    fn launch_dense_binary(&self, stream: StreamId, op: &crate::kernel::DenseBinary) -> Result<()> {
        op.validate()?;
        let s = self.stream(stream, "launch")?;
        let dev = self.enter(s.device)?;
        capture::maybe_relaxed(|| launch::dense_binary(&dev.ops, dev.cu, &dev.dropped, s.raw.0, stream.0, op))
    }

    fn jit_launch(&self, stream: StreamId, op: &crate::kernel::JitOp) -> Result<()> {
        op.validate()?;
        let s = self.stream(stream, "jiterator")?;
        let dev = self.enter(s.device)?;
        capture::maybe_relaxed(|| launch::jit(&dev.ops, dev.cu, &dev.dropped, s.raw.0, stream.0, op))
    }

    fn launch_dense_jit(&self, stream: StreamId, op: &crate::kernel::DenseJit<'_>) -> Result<()> {
        op.validate()?;
        let s = self.stream(stream, "jiterator")?;
        let dev = self.enter(s.device)?;
        capture::maybe_relaxed(|| launch::dense_jit(&dev.ops, dev.cu, &dev.dropped, s.raw.0, stream.0, op))
    }

    fn begin_capture(&self, stream: StreamId, mode: CaptureMode) -> Result<()> {
        self.cu_begin_capture(stream, mode)
    }

    fn end_capture(&self, stream: StreamId) -> Result<GraphId> {
        self.cu_end_capture(stream)
    }

    fn graph_launch(&self, graph: GraphId, stream: StreamId) -> Result<()> {
        self.cu_graph_launch(graph, stream)
    }

    fn graph_destroy(&self, graph: GraphId) {
        self.cu_graph_destroy(graph)
    }

    fn graph_node_count(&self, graph: GraphId) -> Result<usize> {
        self.cu_graph_node_count(graph)
    }

    fn graph_debug_dot(&self, graph: GraphId, path: &std::path::Path) -> Result<()> {
        self.cu_graph_debug_dot(graph, path)
    }

    fn user_module_load(
        &self,
        device: usize,
        image: crate::driver::UserImage<'_>,
        name: &str,
    ) -> Result<crate::driver::UserFunctionId> {
        self.load_user_kernel(device, image, name)
    }

    fn user_param_sizes(&self, func: crate::driver::UserFunctionId) -> Result<Option<Vec<usize>>> {
        self.user_kernel_param_sizes(func)
    }

    fn user_launch(
        &self,
        stream: StreamId,
        func: crate::driver::UserFunctionId,
        shape: crate::driver::LaunchShape,
        args: &[crate::driver::UserArg],
    ) -> Result<()> {
        self.launch_user_kernel(stream, func, shape, args)
    }

    fn delay(&self, stream: StreamId, duration: Duration) -> Result<()> {
        capture::maybe_relaxed(|| self.delay_on(stream, duration))
    }

    fn fail_next_malloc(&self, device: usize) -> Result<()> {
        self.device(device)?.fail_next_malloc.store(true, Ordering::SeqCst);
        Ok(())
    }

    fn fail_next_free(&self, device: usize) -> Result<()> {
        self.device(device)?.fail_next_free.store(true, Ordering::SeqCst);
        Ok(())
    }

    fn record_error(&self, device: usize, error: Error) {
        if let Some(d) = self.devices.get(device) {
            d.dropped.record(error);
        }
    }

    fn take_error(&self, device: usize) -> Result<()> {
        self.device(device)?.dropped.take()
    }

    fn comm_unique_id(&self) -> Result<Vec<u8>> {
        nccl::unique_id(self.nccl_lib.as_deref())
    }

    fn comm_init_rank(
        &self,
        device: usize,
        world: usize,
        rank: usize,
        id: &[u8],
    ) -> Result<Box<dyn crate::driver::comm::Comm>> {
        nccl::init_rank(self.nccl_lib.as_deref(), self.device(device)?.ctx, world, rank, id)
    }

    fn comm_init_all(&self, devices: &[usize]) -> Result<Vec<Box<dyn crate::driver::comm::Comm>>> {
        let with_ctx = devices.iter().map(|&d| Ok((d, self.device(d)?.ctx))).collect::<Result<Vec<_>>>()?;
        nccl::init_all(self.nccl_lib.as_deref(), &with_ctx)
    }

    fn set_launch_tuning(&self, tuning: crate::config::LaunchTuning) {
        self.retune(tuning);
    }

    fn profiler(&self, device: usize, start: bool) -> Result<()> {
        self.enter(device)?;
        if start {
            // SAFETY: no arguments; acts on the context `enter` made current on this thread.
            unsafe { sys::cuProfilerStart() }.result().map_err(|e| driver_error("cuProfilerStart", e))
        } else {
            // SAFETY: as above.
            unsafe { sys::cuProfilerStop() }.result().map_err(|e| driver_error("cuProfilerStop", e))
        }
    }
}

impl Drop for CudaDriver {
    /// Best effort: waits for this driver's streams, frees what is left of expandable segments,
    /// destroys events and streams, gives back the spin kernel, then releases the primary contexts
    /// (the last release frees the context's memory).
    ///
    /// It waits for its own streams, not with `cuCtxSynchronize`: the primary contexts are shared
    /// with the other drivers of the process, whose work is none of this driver's business.
    fn drop(&mut self) {
        if self.devices.is_empty() {
            return;
        }
        self.destroy_graphs();
        let events = std::mem::take(self.events.get_mut().unwrap_or_else(PoisonError::into_inner));
        let streams = std::mem::take(self.streams.get_mut().unwrap_or_else(PoisonError::into_inner));
        // Streams made elsewhere may be gone by now: only this driver's own are waited for.
        for s in streams.values().filter(|s| s.owned || s.raw.0.is_null()) {
            if self.enter(s.device).is_ok() {
                // SAFETY: a live stream of the current context (null: its legacy default stream).
                let _ = unsafe { cu::stream::synchronize(s.raw.0) };
            }
        }
        // Peers' streams may have used a device's mapped ranges: all streams are idle by now.
        vmm::release_all(self);
        for (index, dev) in self.devices.iter().enumerate() {
            let current = self.enter(index).is_ok();
            if current {
                for ev in events.values().filter(|ev| ev.device == index) {
                    // SAFETY:
                    // - made by `cuEventCreate` in this context;
                    // - the table is gone, so this is its only destruction.
                    let _ = unsafe { cu::event::destroy(ev.raw.0) };
                }
                for s in streams.values().filter(|s| s.device == index && s.owned) {
                    // SAFETY: made by `cuStreamCreateWithPriority` in this context; destroyed once.
                    let _ = unsafe { cu::stream::destroy(s.raw.0) };
                }
            }
            if let Some(kernel) = lock(&dev.spin).take() {
                kernel.release(dev.cu, current);
            }
            if current {
                dev.ops.release();
            }
        }
        // Every thread's cache may name a context released below.
        for dev in &self.devices {
            // SAFETY: retained exactly once in `new`; released exactly once here.
            let _ = unsafe { cu::primary_ctx::release(dev.cu) };
        }
        // SAFETY:
        // a null context is documented to unbind the thread's current context, which may have been one just
        // released.
        let _ = unsafe { cu::ctx::set_current(std::ptr::null_mut()) };
    }
}
