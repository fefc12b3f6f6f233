//! The simulated multi-GPU machine.
//!
//! A faithful model of what the runtime relies on: every stream is a worker thread that runs its
//! queue in order, so queued work is really asynchronous; each stream keeps its own simulated time
//! (`time.rs`: copies take their bytes at modelled bandwidths, kernels their memory traffic), and
//! events complete when their stream reaches them, stamped with that simulated time, so timings
//! do not depend on how busy the host is; memory has a capacity (out-of-memory is real) and host
//! bytes only for what was written; a peer matrix decides which pairs may access each other.
//! Test hooks delay a stream or fail the next allocation, to prove ordering and error paths.

mod capture;
mod config;
mod host;
mod launch;
mod memory;
mod stream;
#[cfg(test)]
mod tests;
mod time;

pub use config::{parse_bytes, PeerSpec, SimConfig};

use super::{CaptureMode, DeviceProperties, DevicePtr, Driver, EventId, GraphId, HostPtr, StreamId};
use crate::error::{Error, Result};
use crate::kernel::KernelOp;
use memory::{lock, DeviceMemory, VMM_GRANULARITY};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use stream::{Job, SimEvent, SimStream};

/// Priorities a simulated device offers, like an H100/H200: 0 (least) to -5 (greatest).
const PRIORITY_RANGE: (i32, i32) = (0, -5);

struct SimDevice {
    memory: Arc<DeviceMemory>,
    default_stream: StreamId,
    streams: Mutex<Vec<Arc<SimStream>>>,
    peers_enabled: Mutex<Vec<bool>>,
    fail_next_malloc: AtomicBool,
    starting_default: Mutex<()>,
}

/// The simulated machine's driver.
pub struct SimDriver {
    config: SimConfig,
    /// `CUDA_VISIBLE_DEVICES` when it hid every device of the machine (for the reason of
    /// [`Driver::unavailable_reason`]).
    hidden_by: Option<String>,
    devices: Vec<SimDevice>,
    streams: RwLock<HashMap<u64, Arc<SimStream>>>,
    events: RwLock<HashMap<u64, Arc<SimEvent>>>,
    next_id: AtomicU64,
    /// Pinned host memory (ordinary host memory, flagged pinned by being in this table).
    host: host::HostMemory,
    /// Captured graphs.
    graphs: Mutex<HashMap<u64, Arc<capture::SimGraph>>>,
}

impl std::fmt::Debug for SimDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimDriver").field("config", &self.config).finish_non_exhaustive()
    }
}

impl SimDriver {
    /// Builds the machine that `config` describes.
    ///
    /// Stream worker threads start lazily, so this never fails; a thread the OS refuses to start
    /// is reported by the call that needed it.
    pub fn new(config: SimConfig) -> SimDriver {
        let mut d = SimDriver {
            devices: Vec::with_capacity(config.devices),
            streams: RwLock::new(HashMap::new()),
            events: RwLock::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            host: host::HostMemory::default(),
            graphs: Mutex::new(HashMap::new()),
            hidden_by: None,
            config,
        };
        for i in 0..d.config.devices {
            // The default stream's worker starts on first use (see `stream()`), so an idle
            // simulated machine costs no threads.
            let id = StreamId(d.next_id.fetch_add(1, Ordering::Relaxed));
            d.devices.push(SimDevice {
                memory: Arc::new(DeviceMemory::new(i, d.config.memory)),
                default_stream: id,
                streams: Mutex::new(Vec::new()),
                peers_enabled: Mutex::new(vec![false; d.config.devices]),
                fail_next_malloc: AtomicBool::new(false),
                starting_default: Mutex::new(()),
            });
        }
        d
    }

    /// The part of the machine `config` that `CUDA_VISIBLE_DEVICES = visible` selects
    /// ([`SimConfig::visible`] gives the rules): its devices renumbered in the list's order.
    pub fn with_visible_devices(config: SimConfig, visible: Option<&str>) -> SimDriver {
        let seen = config.visible(visible);
        let hidden_by = (seen.devices == 0 && config.devices > 0).then(|| visible.unwrap_or_default().to_string());
        SimDriver { hidden_by, ..SimDriver::new(seen) }
    }

    /// The machine's configuration (the visible devices).
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Bytes of host memory backing `device`'s allocations now (only what was written or read).
    pub fn materialized_bytes(&self, device: usize) -> usize {
        self.devices.get(device).map_or(0, |d| d.memory.materialized_bytes())
    }

    fn dev(&self, device: usize) -> Result<&SimDevice> {
        self.devices.get(device).ok_or(Error::InvalidDevice { index: device, count: self.devices.len(), driver: "sim" })
    }

    fn register_stream(&self, id: StreamId, device: usize) -> Result<Arc<SimStream>> {
        let s = Arc::new(SimStream::spawn(device, id.0).map_err(|e| Error::Driver {
            op: "create_stream",
            code: e.raw_os_error().unwrap_or(-1),
            name: "SIM_THREAD_SPAWN".into(),
            message: format!("the simulated stream's worker thread could not start: {e}"),
        })?);
        lock(&self.dev(device)?.streams).push(s.clone());
        self.streams.write().unwrap_or_else(|e| e.into_inner()).insert(id.0, s.clone());
        Ok(s)
    }

    fn stream(&self, id: StreamId) -> Result<Arc<SimStream>> {
        if let Some(s) = self.streams.read().unwrap_or_else(|e| e.into_inner()).get(&id.0) {
            return Ok(s.clone());
        }
        // A default stream on its first use; the device's stream list lock serializes its start.
        if let Some(device) = self.devices.iter().position(|d| d.default_stream == id) {
            let _starting = lock(&self.devices[device].starting_default);
            if let Some(s) = self.streams.read().unwrap_or_else(|e| e.into_inner()).get(&id.0) {
                return Ok(s.clone());
            }
            return self.register_stream(id, device);
        }
        Err(Error::UnknownStream { stream: id.0 })
    }

    fn event(&self, id: EventId) -> Result<Arc<SimEvent>> {
        self.events
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id.0)
            .cloned()
            // The runtime passes only events it made and has not destroyed.
            .ok_or_else(|| Error::Internal { op: "event", reason: format!("unknown event handle {}", id.0) })
    }

    /// The memory holding `[ptr, ptr + bytes)`, checked to be live.
    fn span(&self, ptr: DevicePtr, bytes: usize) -> Result<Arc<DeviceMemory>> {
        let device = memory::device_of(ptr).filter(|&d| d < self.devices.len()).ok_or(Error::InvalidPointer {
            device: usize::MAX,
            ptr: ptr.0,
            reason: "not an address of any simulated device".into(),
        })?;
        let mem = &self.devices[device].memory;
        mem.check_span(ptr, bytes)?;
        Ok(mem.clone())
    }

    /// Queues a copy of `bytes` from `src` to `dst` (of any devices) that takes `cost`.
    fn queue_copy(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        stream: StreamId,
        cost: time::SimTime,
    ) -> Result<()> {
        let (to, from, s) = (self.span(dst, bytes)?, self.span(src, bytes)?, self.stream(stream)?);
        s.submit(Job::run("memcpy", cost, move || {
            let mut tmp = vec![0u8; bytes];
            from.read(src, &mut tmp);
            to.write(dst, &tmp);
        }));
        Ok(())
    }

    /// The simulated time of `stream`: when the work it completed so far ended (test hook).
    #[cfg(test)]
    fn stream_time(&self, stream: StreamId) -> Result<time::SimTime> {
        Ok(self.stream(stream)?.now())
    }
}

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
        Ok(DeviceProperties {
            name: "cudasem simulated GPU".into(),
            total_memory: self.config.memory,
            multi_processor_count: 132,
            major: 9,
            minor: 0,
        })
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

    fn free(&self, device: usize, ptr: DevicePtr) -> Result<()> {
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

    fn host_job(&self, stream: StreamId, job: super::comm::HostJob) -> Result<()> {
        self.queue_host_job(stream, job)
    }
}
