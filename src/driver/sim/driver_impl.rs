//! [`Driver`] for [`SimDriver`]: streams and events, memory and copies, expandable segments,
//! launches (`launch.rs`), captures and graphs (`capture.rs`), pinned host memory (`host.rs`).

use super::memory::{self, lock, VMM_GRANULARITY};
use super::sim_driver::{SimDriver, PRIORITY_RANGE};
use super::stream::{Job, SimEvent};
use super::time;
use crate::driver::{CaptureMode, DeviceProperties, DevicePtr, Driver, EventId, GraphId, HostPtr, StreamId, Telemetry};
use crate::error::{Error, Result};
use crate::kernel::KernelOp;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

impl Driver for SimDriver {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn device_count(&self) -> usize {
        self.devices.len()
    }

    fn unavailable_reason(&self) -> Option<String> {
        self.devices.is_empty().then(|| match &self.hidden_by {
            Some(v) => format!(
                "CUDA_VISIBLE_DEVICES={v:?} hides every simulated device (a comma list of indices such as \"0,1\" selects them; reading stops at the first entry that is not a device, and a repeated index hides all)"
            ),
            None => "CUDASEM_SIM_DEVICES is 0".to_string(),
        })
    }

    fn properties(&self, device: usize) -> Result<DeviceProperties> {
        self.dev(device)?;
        Ok(super::telemetry::properties(&self.config, self.physical[device]))
    }

    fn telemetry(&self) -> &dyn Telemetry {
        self
    }

    fn mem_get_info(&self, device: usize) -> Result<(usize, usize)> {
        Ok(self.dev(device)?.memory.info())
    }

    fn can_access_peer(&self, device: usize, peer: usize) -> Result<bool> {
        self.dev(device)?;
        self.dev(peer)?;
        Ok(self.config.peer.allows(device, peer))
    }

    fn enable_peer_access(&self, device: usize, peer: usize) -> Result<()> {
        if device == peer {
            self.dev(device)?;
            return Ok(());
        }
        if !self.can_access_peer(device, peer)? {
            return Err(Error::PeerAccessUnsupported { from: device, to: peer });
        }
        lock(&self.dev(device)?.peers_enabled)[peer] = true;
        Ok(())
    }

    fn synchronize_device(&self, device: usize) -> Result<()> {
        let d = self.dev(device)?;
        let streams: Vec<_> = lock(&d.streams).clone();
        for s in streams {
            s.synchronize();
        }
        Ok(())
    }

    fn stream_priority_range(&self, device: usize) -> Result<(i32, i32)> {
        self.dev(device)?;
        Ok(PRIORITY_RANGE)
    }

    fn default_stream(&self, device: usize) -> Result<StreamId> {
        Ok(self.dev(device)?.default_stream)
    }

    fn create_stream(&self, device: usize, _priority: i32) -> Result<StreamId> {
        // Every simulated stream has its own thread, so priorities do not change scheduling.
        self.dev(device)?;
        let id = StreamId(self.next_id.fetch_add(1, Ordering::Relaxed));
        self.register_stream(id, device)?;
        Ok(id)
    }

    fn stream_query(&self, stream: StreamId) -> Result<bool> {
        Ok(self.stream(stream)?.idle())
    }

    fn stream_synchronize(&self, stream: StreamId) -> Result<()> {
        self.stream(stream)?.synchronize();
        Ok(())
    }

    fn stream_wait_event(&self, stream: StreamId, event: EventId) -> Result<()> {
        if self.join_capture(stream, event)? {
            return Ok(());
        }
        let (s, e) = (self.stream(stream)?, self.event(event)?);
        if let Some(recording) = e.current() {
            s.submit(Job::wait(recording));
        }
        Ok(())
    }

    fn raw_stream(&self, stream: StreamId) -> Result<u64> {
        self.stream(stream)?;
        Ok(stream.0)
    }

    fn raw_context(&self, device: usize) -> Result<u64> {
        self.dev(device)?;
        Err(Error::Unsupported {
            op: "primary_context",
            driver: "sim",
            reason: "the simulated machine has no CUDA contexts; use CUDASEM_DRIVER=cuda on a GPU".into(),
        })
    }

    unsafe fn import_stream(&self, device: usize, raw: u64) -> Result<(StreamId, i32)> {
        self.dev(device)?;
        let s = self.stream(StreamId(raw)).map_err(|_| Error::Unsupported {
            op: "Stream::from_external",
            driver: "sim",
            reason: format!(
                "{raw:#x} is not a stream of the simulated machine: it can only wrap its own streams' \
                 handles (Stream::cuda_stream); streams made outside cudasem need CUDASEM_DRIVER=cuda"
            ),
        })?;
        if s.device != device {
            return Err(Error::InvalidArgument {
                op: "Stream::from_external",
                reason: format!("stream {raw:#x} belongs to cuda:{}, not cuda:{device}", s.device),
            });
        }
        // Every simulated stream has its own thread: priorities do not change scheduling.
        Ok((StreamId(raw), 0))
    }

    fn check_foreign_range(&self, device: usize, ptr: DevicePtr, bytes: usize) -> Result<()> {
        self.dev(device)?;
        match memory::device_of(ptr) {
            Some(d) if d == device => self.span(ptr, bytes).map(|_| ()),
            Some(d) if d < self.devices.len() => Err(Error::InvalidPointer {
                device,
                ptr: ptr.0,
                reason: format!("the address is memory of simulated cuda:{d}, not of cuda:{device}"),
            }),
            _ => Err(Error::InvalidPointer {
                device,
                ptr: ptr.0,
                reason: "not an address of any simulated device (on the simulated machine a device pointer \
                         must come from cudasem: a tensor's data_ptr or caching_allocator_alloc)"
                    .into(),
            }),
        }
    }

    fn event_create(&self, device: usize, enable_timing: bool, _blocking: bool) -> Result<EventId> {
        self.dev(device)?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let ev = Arc::new(SimEvent::new(enable_timing));
        self.events.write().unwrap_or_else(|e| e.into_inner()).insert(id, ev);
        Ok(EventId(id))
    }

    fn event_destroy(&self, event: EventId) {
        self.events.write().unwrap_or_else(|e| e.into_inner()).remove(&event.0);
    }

    fn event_record(&self, event: EventId, stream: StreamId) -> Result<()> {
        let (e, s) = (self.event(event)?, self.stream(stream)?);
        e.record(&s);
        Ok(())
    }

    fn event_query(&self, event: EventId) -> Result<bool> {
        Ok(self.event(event)?.query())
    }

    fn event_synchronize(&self, event: EventId) -> Result<()> {
        self.event(event)?.synchronize();
        Ok(())
    }

    fn event_elapsed_ms(&self, start: EventId, end: EventId) -> Result<f32> {
        let (a, b) = (self.event(start)?, self.event(end)?);
        if !a.timing || !b.timing {
            return Err(Error::EventTimingDisabled);
        }
        if !a.was_recorded() || !b.was_recorded() {
            return Err(Error::EventNotRecorded);
        }
        match (a.completed_at(), b.completed_at()) {
            (Some(t0), Some(t1)) => Ok(time::signed_ms(t0, t1)),
            _ => Err(Error::EventNotReady),
        }
    }

    fn malloc(&self, device: usize, bytes: usize) -> Result<DevicePtr> {
        let d = self.dev(device)?;
        if d.fail_next_malloc.swap(false, Ordering::AcqRel) {
            return Err(Error::Injected { device, op: "malloc" });
        }
        d.memory.malloc(bytes)
    }

    unsafe fn free(&self, device: usize, ptr: DevicePtr) -> Result<()> {
        // Like cudaFree, freeing waits for the device's queued work, which may still use the memory.
        self.synchronize_device(device)?;
        self.dev(device)?.memory.free(ptr)
    }

    fn memset_d8(&self, dst: DevicePtr, value: u8, bytes: usize, stream: StreamId) -> Result<()> {
        let (mem, s) = (self.span(dst, bytes)?, self.stream(stream)?);
        let cost = time::transfer(bytes, time::DEVICE_BYTES_PER_S);
        s.submit(Job::run("memset", cost, move || mem.fill(dst, bytes, value)));
        Ok(())
    }

    fn memcpy_htod(&self, dst: DevicePtr, src: &[u8], stream: StreamId) -> Result<()> {
        let (mem, s) = (self.span(dst, src.len())?, self.stream(stream)?);
        // The source is borrowed: stage it, queue the copy, and return once the stream has run it
        // (a pageable copy in CUDA likewise returns only when the source has been consumed).
        let staged = src.to_vec();
        let cost = time::transfer(staged.len(), time::PAGEABLE_BYTES_PER_S);
        s.submit(Job::run("memcpy HtoD", cost, move || mem.write(dst, &staged)));
        s.synchronize();
        Ok(())
    }

    fn memcpy_dtoh(&self, dst: &mut [u8], src: DevicePtr, stream: StreamId) -> Result<()> {
        let (mem, s) = (self.span(src, dst.len())?, self.stream(stream)?);
        let out = Arc::new(Mutex::new(vec![0u8; dst.len()]));
        let sink = out.clone();
        let cost = time::transfer(dst.len(), time::PAGEABLE_BYTES_PER_S);
        s.submit(Job::run("memcpy DtoH", cost, move || mem.read(src, &mut lock(&sink))));
        s.synchronize();
        dst.copy_from_slice(&lock(&out));
        Ok(())
    }

    fn memcpy_dtod(&self, dst: DevicePtr, src: DevicePtr, bytes: usize, stream: StreamId) -> Result<()> {
        self.queue_copy(dst, src, bytes, stream, time::device_copy(bytes))
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
        let linked = lock(&self.dev(dst_device)?.peers_enabled)[src_device]
            || lock(&self.dev(src_device)?.peers_enabled)[dst_device];
        let cost = if dst_device == src_device { time::device_copy(bytes) } else { time::peer_copy(bytes, linked) };
        self.queue_copy(dst, src, bytes, stream, cost)
    }

    fn host_alloc(&self, bytes: usize) -> Result<HostPtr> {
        self.host.alloc(bytes)
    }

    fn host_free(&self, ptr: HostPtr) -> Result<()> {
        self.host.free(ptr)
    }

    unsafe fn memcpy_htod_async(&self, dst: DevicePtr, src: HostPtr, bytes: usize, stream: StreamId) -> Result<()> {
        let (mem, s) = (self.span(dst, bytes)?, self.stream(stream)?);
        // The job holds the region, so it stays allocated until the copy ran.
        let region = self.host.region(src, bytes)?;
        let offset = (src.0 - region.host_ptr().0) as usize;
        s.submit(Job::run("memcpy HtoD pinned", time::transfer(bytes, time::PINNED_BYTES_PER_S), move || {
            // SAFETY:
            // - `[src, src + bytes)` lies inside `region` (checked above), which this job keeps allocated;
            // - the caller guarantees (the method's contract) that the host does not write these bytes until
            //   the stream has passed this copy.
            let data = unsafe { std::slice::from_raw_parts(region.ptr().as_ptr().wrapping_add(offset), bytes) };
            mem.write(dst, data);
        }));
        Ok(())
    }

    unsafe fn memcpy_dtoh_async(&self, dst: HostPtr, src: DevicePtr, bytes: usize, stream: StreamId) -> Result<()> {
        let (mem, s) = (self.span(src, bytes)?, self.stream(stream)?);
        let region = self.host.region(dst, bytes)?;
        let offset = (dst.0 - region.host_ptr().0) as usize;
        s.submit(Job::run("memcpy DtoH pinned", time::transfer(bytes, time::PINNED_BYTES_PER_S), move || {
            // SAFETY:
            // - `[dst, dst + bytes)` lies inside `region` (checked above), which this job keeps allocated;
            // - the caller guarantees (the method's contract) that the host neither reads nor writes these
            //   bytes until the stream has passed this copy, so this is the only reference to them.
            let out = unsafe { std::slice::from_raw_parts_mut(region.ptr().as_ptr().wrapping_add(offset), bytes) };
            mem.read(src, out);
        }));
        Ok(())
    }

    fn vmm_granularity(&self, device: usize) -> Option<usize> {
        self.dev(device).ok().map(|_| VMM_GRANULARITY)
    }

    fn vmm_reserve(&self, device: usize, bytes: usize) -> Result<DevicePtr> {
        self.dev(device)?.memory.reserve(bytes)
    }

    fn vmm_map(&self, device: usize, at: DevicePtr, bytes: usize) -> Result<()> {
        let d = self.dev(device)?;
        if d.fail_next_malloc.swap(false, Ordering::AcqRel) {
            return Err(Error::Injected { device, op: "vmm_map" });
        }
        d.memory.map(at, bytes)
    }

    fn vmm_unmap(&self, device: usize, at: DevicePtr, bytes: usize) -> Result<()> {
        self.synchronize_device(device)?;
        self.dev(device)?.memory.unmap(at, bytes)
    }

    fn vmm_release(&self, device: usize, base: DevicePtr, bytes: usize) -> Result<()> {
        self.dev(device)?.memory.release(base, bytes)
    }

    fn launch(&self, stream: StreamId, op: &KernelOp) -> Result<()> {
        self.launch_op(stream, op)
    }

    fn begin_capture(&self, stream: StreamId, mode: CaptureMode) -> Result<()> {
        self.sim_begin_capture(stream, mode)
    }

    fn end_capture(&self, stream: StreamId) -> Result<GraphId> {
        self.sim_end_capture(stream)
    }

    fn graph_launch(&self, graph: GraphId, stream: StreamId) -> Result<()> {
        self.sim_graph_launch(graph, stream)
    }

    fn graph_destroy(&self, graph: GraphId) {
        self.sim_graph_destroy(graph)
    }

    fn graph_node_count(&self, graph: GraphId) -> Result<usize> {
        self.sim_graph_node_count(graph)
    }

    fn graph_debug_dot(&self, graph: GraphId, path: &std::path::Path) -> Result<()> {
        self.sim_graph_debug_dot(graph, path)
    }

    fn delay(&self, stream: StreamId, duration: Duration) -> Result<()> {
        // Real time too, so that the host can see the stream busy; simulated time exactly `duration`.
        self.stream(stream)?.submit(Job::run("delay", time::delay(duration), move || std::thread::sleep(duration)));
        Ok(())
    }

    fn fail_next_malloc(&self, device: usize) -> Result<()> {
        self.dev(device)?.fail_next_malloc.store(true, Ordering::Release);
        Ok(())
    }

    fn fail_next_free(&self, device: usize) -> Result<()> {
        self.dev(device)?.memory.fail_next_free();
        Ok(())
    }

    fn record_error(&self, device: usize, error: Error) {
        if let Ok(d) = self.dev(device) {
            d.memory.dropped.record(error);
        }
    }

    fn take_error(&self, device: usize) -> Result<()> {
        self.dev(device)?.memory.dropped.take()
    }

    fn host_job(&self, stream: StreamId, job: crate::driver::comm::HostJob) -> Result<()> {
        self.queue_host_job(stream, job)
    }

    fn host_kernel(&self, stream: StreamId, kernel: crate::driver::comm::HostKernel) -> Result<()> {
        self.queue_host_kernel(stream, kernel)
    }

    fn jit_launch(&self, stream: StreamId, op: &crate::kernel::JitOp) -> Result<()> {
        self.sim_jit_launch(stream, op)
    }

    /// The simulated machine has no profiler to start or stop: the call is accepted (the
    /// runtime records it in the calling thread's NVTX log).
    fn profiler(&self, device: usize, start: bool) -> Result<()> {
        let _ = (device, start);
        Ok(())
    }
}
