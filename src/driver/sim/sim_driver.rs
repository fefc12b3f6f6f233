//! The simulated machine's driver: [`SimDriver`] (its devices, streams, events, pinned host
//! memory and graphs) and the lookups its operations start with. The
//! [`Driver`](crate::driver::Driver) methods are in `driver_impl.rs`.

use super::busy::DeviceClocks;
use super::host::SimPinnedTable;
use super::memory::{self, lock, DeviceMemory};
use super::stream::{Job, SimEvent, SimGraph, SimStream};
use super::time;
use crate::config::SimConfig;
use crate::driver::{DevicePtr, EventId, StreamId};
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Priorities a simulated device offers, like an H100/H200: 0 (least) to -5 (greatest).
pub(super) const PRIORITY_RANGE: (i32, i32) = (0, -5);

pub(super) struct SimDevice {
    pub memory: Arc<DeviceMemory>,
    pub default_stream: StreamId,
    pub streams: Mutex<Vec<Arc<SimStream>>>,
    pub peers_enabled: Mutex<Vec<bool>>,
    pub fail_next_malloc: AtomicBool,
    pub starting_default: Mutex<()>,
    /// How busy the device's streams have been (its utilization readings).
    pub clocks: Arc<DeviceClocks>,
}

/// The simulated machine's driver.
pub struct SimDriver {
    pub(super) config: SimConfig,
    /// `CUDA_VISIBLE_DEVICES` when it hid every device of the machine (for the reason of
    /// [`Driver::unavailable_reason`](crate::driver::Driver::unavailable_reason)).
    pub(super) hidden_by: Option<String>,
    /// Each visible device's index in the whole machine (its UUID and PCI address come from it).
    pub(super) physical: Vec<usize>,
    pub(super) devices: Vec<SimDevice>,
    pub(super) streams: RwLock<HashMap<u64, Arc<SimStream>>>,
    pub(super) events: RwLock<HashMap<u64, Arc<SimEvent>>>,
    pub(super) next_id: AtomicU64,
    /// Pinned host memory (ordinary host memory, flagged pinned by being in this table).
    pub(super) host: SimPinnedTable,
    /// Captured graphs.
    pub(super) graphs: Mutex<HashMap<u64, Arc<SimGraph>>>,
    /// Where compiled jiterator libraries are kept between processes (the kernel cache's
    /// directory; none: a directory of this process's own).
    pub(super) jit_cache: Option<std::path::PathBuf>,
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
            host: SimPinnedTable::default(),
            graphs: Mutex::new(HashMap::new()),
            hidden_by: None,
            physical: (0..config.devices).collect(),
            jit_cache: None,
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
                clocks: Arc::new(DeviceClocks::new()),
            });
        }
        d
    }

    /// The part of the machine `config` that `CUDA_VISIBLE_DEVICES = visible` selects
    /// ([`SimConfig::visible`] gives the rules): its devices renumbered in the list's order.
    pub fn with_visible_devices(config: SimConfig, visible: Option<&str>) -> SimDriver {
        let seen = config.visible(visible);
        let hidden_by = (seen.devices == 0 && config.devices > 0).then(|| visible.unwrap_or_default().to_string());
        let physical = match visible {
            Some(list) => crate::config::sim::visible_devices(list, config.devices),
            None => (0..config.devices).collect(),
        };
        SimDriver { hidden_by, physical, ..SimDriver::new(seen) }
    }

    /// This driver, keeping compiled jiterator libraries in `dir` (the process's kernel cache
    /// directory; `None`: in a directory of the process's own, not kept).
    pub fn with_jit_cache(mut self, dir: Option<std::path::PathBuf>) -> SimDriver {
        self.jit_cache = dir;
        self
    }

    /// The machine's configuration (the visible devices).
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Bytes of host memory backing `device`'s allocations now (only what was written or read).
    pub fn materialized_bytes(&self, device: usize) -> usize {
        self.devices.get(device).map_or(0, |d| d.memory.materialized_bytes())
    }

    pub(super) fn dev(&self, device: usize) -> Result<&SimDevice> {
        self.devices.get(device).ok_or(Error::InvalidDevice { index: device, count: self.devices.len(), driver: "sim" })
    }

    pub(super) fn register_stream(&self, id: StreamId, device: usize) -> Result<Arc<SimStream>> {
        let s =
            Arc::new(SimStream::spawn(device, id.0, self.dev(device)?.clocks.clone()).map_err(|e| Error::Driver {
                op: "create_stream",
                code: e.raw_os_error().unwrap_or(-1),
                name: "SIM_THREAD_SPAWN".into(),
                message: format!("the simulated stream's worker thread could not start: {e}"),
            })?);
        lock(&self.dev(device)?.streams).push(s.clone());
        self.streams.write().unwrap_or_else(|e| e.into_inner()).insert(id.0, s.clone());
        Ok(s)
    }

    pub(super) fn stream(&self, id: StreamId) -> Result<Arc<SimStream>> {
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

    pub(super) fn event(&self, id: EventId) -> Result<Arc<SimEvent>> {
        self.events
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id.0)
            .cloned()
            // The runtime passes only events it made and has not destroyed.
            .ok_or_else(|| Error::Internal { op: "event", reason: format!("unknown event handle {}", id.0) })
    }

    /// The memory holding `[ptr, ptr + bytes)`, checked to be live.
    pub(super) fn span(&self, ptr: DevicePtr, bytes: usize) -> Result<Arc<DeviceMemory>> {
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
    pub(super) fn queue_copy(
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
    pub(super) fn stream_time(&self, stream: StreamId) -> Result<time::SimTime> {
        Ok(self.stream(stream)?.now())
    }
}
