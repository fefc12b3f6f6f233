//! [`ProcessGroup`]: one rank's membership in a group — its rank, the group's size, its device,
//! the store the ranks share, the communicator (NCCL's, or the simulated backend's) and the
//! group's communication stream. Collectives are in `collectives.rs`.

use super::agree::agree;
use super::sim::{wait_ranks, SimRank};
use super::store::{HashStore, Store};
use super::watchdog::Watch;
use super::{Backend, InitOptions};
use crate::driver::comm::Comm;
use crate::error::{Error, Result};
use crate::runtime::{capture_underway, comm_init_all, comm_init_rank, comm_unique_id, Event, EventFlags, Stream};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How a group's collectives reach the other ranks (while it is made).
pub(super) enum Channel {
    /// A driver communicator (NCCL).
    Driver(Box<dyn Comm>),
    /// The simulated backend: host jobs exchanging bytes through the store.
    Sim,
}

pub(super) struct Inner {
    pub rank: usize,
    pub world: usize,
    pub device: usize,
    /// The key prefix of this group in the store.
    pub tag: String,
    pub store: Arc<dyn Store>,
    pub backend: Backend,
    /// The watchdog, which also holds the communicator (NCCL's; none on the simulated backend).
    pub watch: Arc<Watch>,
    /// The stream the group's collectives run on (PyTorch's NCCL stream).
    pub stream: Stream,
    pub timeout: Duration,
    pub check_collectives: bool,
    /// Collectives issued so far.
    pub seq: AtomicU64,
    /// Messages sent to and received from each rank so far.
    pub sent: Mutex<Vec<u64>>,
    pub received: Mutex<Vec<u64>>,
    /// Subgroups made from this group so far.
    pub subgroups: AtomicU64,
    /// Whether leaving is announced in the store (the groups of a rendezvous), and whether this
    /// rank serves the store and so waits for the others to leave first.
    pub farewell: Farewell,
}

/// What a rank does with the store when its group goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Farewell {
    /// Nothing (groups of one process, subgroups).
    Silent,
    /// Counts itself out.
    Leave,
    /// Counts itself out and waits (at most the timeout) for every other rank to have left: its
    /// process serves the store, which must outlive their last calls.
    LeaveLast,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Let the last collectives finish before the communicator goes (NCCL's finalize does
        // the same on the device; the host must not free what they use first), but no longer
        // than the watchdog allows: a collective that cannot finish aborts the group instead.
        if self.watch.aborted().is_none() {
            let end = Event::new(EventFlags::default());
            let waited = end.record(Some(&self.stream)).and_then(|()| self.watch.block_until(|| end.completed()));
            if let Err(e) = waited {
                crate::runtime::record_device_error(self.device, e);
            }
        }
        // Finalized and destroyed here, unless aborted (then NCCL freed it already).
        drop(self.watch.shutdown());
        if self.farewell != Farewell::Silent {
            let (left, all) = (format!("{}/left", self.tag), format!("{}/all_left", self.tag));
            if self.store.add(&left, 1).is_ok_and(|n| n == self.world as i64) {
                let _ = self.store.set(&all, b"1");
            }
            if self.farewell == Farewell::LeaveLast {
                let _ = self.store.wait(&[&all], self.timeout);
            }
        }
    }
}

/// One rank of a group of ranks that run collectives together (`torch.distributed.ProcessGroup`).
///
/// Cheap to clone (handles share the group). Dropping the last handle waits for the group's
/// queued collectives and destroys its communicator (NCCL: `ncclCommFinalize` then
/// `ncclCommDestroy`, no abort on this path; after a watchdog abort, it waits for the abort to
/// return and joins the watchdog thread). Ranks of a rendezvous count themselves out in the
/// store; rank 0, whose process serves it, waits (at most the group's timeout) until every other
/// rank has, so that their last calls still find the store.
#[derive(Clone)]
pub struct ProcessGroup {
    pub(super) inner: Arc<Inner>,
}

impl fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "<ProcessGroup {:?} rank={} world_size={} device=cuda:{} tag={}>",
            self.inner.backend, self.inner.rank, self.inner.world, self.inner.device, self.inner.tag
        )
    }
}

/// Groups made by `from_devices` so far (their store keys' prefixes).
static LOCAL_GROUPS: AtomicU64 = AtomicU64::new(0);

impl ProcessGroup {
    /// One group over `devices` of this process, rank `i` on `devices[i]` (NCCL's
    /// `ncclCommInitAll`), with default options. Each rank's collectives must be called from its
    /// own thread (they wait for each other on the host when `check_collectives` is on, and on
    /// the device always).
    pub fn from_devices(devices: &[usize]) -> Result<Vec<ProcessGroup>> {
        ProcessGroup::from_devices_with(devices, &InitOptions::default())
    }

    /// [`ProcessGroup::from_devices`] with `options`' backend, timeout and checks (its
    /// rendezvous fields are not used: the ranks are this process's).
    pub fn from_devices_with(devices: &[usize], options: &InitOptions) -> Result<Vec<ProcessGroup>> {
        let op = "ProcessGroup::from_devices";
        if devices.is_empty() {
            return Err(Error::InvalidArgument { op, reason: "no devices given".into() });
        }
        for (i, d) in devices.iter().enumerate() {
            crate::runtime::resolve_device(Some(*d))?;
            if devices[..i].contains(d) {
                return Err(Error::InvalidArgument {
                    op,
                    reason: format!("cuda:{d} is given twice; one rank per device"),
                });
            }
        }
        let backend = options.resolved_backend()?;
        let store: Arc<dyn Store> = Arc::new(HashStore::new(options.timeout));
        let tag = format!("local{}", LOCAL_GROUPS.fetch_add(1, Ordering::Relaxed));
        let mut channels: Vec<Channel> = match backend {
            Backend::Nccl => comm_init_all(devices)?.into_iter().map(Channel::Driver).collect(),
            Backend::Sim => devices.iter().map(|_| Channel::Sim).collect(),
        };
        let mut groups = Vec::with_capacity(devices.len());
        for (rank, &device) in devices.iter().enumerate() {
            let channel = channels.remove(0);
            let parts = Parts {
                rank,
                world: devices.len(),
                device,
                tag: tag.clone(),
                store: store.clone(),
                farewell: Farewell::Silent,
            };
            groups.push(ProcessGroup::assemble(parts, channel, backend, options)?);
        }
        Ok(groups)
    }

    /// Joins the group `parts` describes through its store: NCCL's unique id made by rank 0 and
    /// read by the others, then `ncclCommInitRank`.
    pub(super) fn join(parts: Parts, backend: Backend, options: &InitOptions) -> Result<ProcessGroup> {
        let channel = match backend {
            Backend::Sim => Channel::Sim,
            Backend::Nccl => {
                let key = format!("{}/nccl_id", parts.tag);
                let id = if parts.rank == 0 {
                    let id = comm_unique_id()?;
                    parts.store.set(&key, &id)?;
                    id
                } else {
                    parts.store.get(&key)?
                };
                Channel::Driver(comm_init_rank(parts.device, parts.world, parts.rank, &id)?)
            }
        };
        ProcessGroup::assemble(parts, channel, backend, options)
    }

    fn assemble(parts: Parts, channel: Channel, backend: Backend, options: &InitOptions) -> Result<ProcessGroup> {
        let stream = Stream::new(parts.device, 0)?;
        let (comm, deadline) = match channel {
            // ProcessGroupNCCL's watchdog: a collective gets the group's timeout on the device.
            Channel::Driver(comm) => (Some(comm), options.timeout),
            // The simulated collectives time out by themselves (their store waits); the watchdog
            // is the backstop for work that never reaches them (a stream that never gets there).
            Channel::Sim => (None, options.timeout.saturating_mul(2)),
        };
        Ok(ProcessGroup {
            inner: Arc::new(Inner {
                rank: parts.rank,
                world: parts.world,
                device: parts.device,
                tag: parts.tag,
                store: parts.store,
                backend,
                watch: Watch::new(parts.rank, options.timeout, deadline, capture_underway, comm),
                stream,
                timeout: options.timeout,
                check_collectives: options.check_collectives,
                seq: AtomicU64::new(0),
                sent: Mutex::new(vec![0; parts.world]),
                received: Mutex::new(vec![0; parts.world]),
                subgroups: AtomicU64::new(0),
                farewell: parts.farewell,
            }),
        })
    }

    /// Why the group was aborted (by its watchdog: a collective that did not finish within the
    /// timeout, or an error the communicator met), if it was; every call on it then fails with
    /// [`Error::ProcessGroupAborted`].
    pub fn abort_cause(&self) -> Option<Error> {
        self.inner.watch.aborted().cloned()
    }

    /// This rank's number in the group, `0..world_size()` (`dist.get_rank(group)`).
    pub fn rank(&self) -> usize {
        self.inner.rank
    }

    /// How many ranks the group has (`dist.get_world_size(group)`).
    pub fn world_size(&self) -> usize {
        self.inner.world
    }

    /// The CUDA device this rank's collectives run on.
    pub fn device(&self) -> usize {
        self.inner.device
    }

    /// The backend moving the data.
    pub fn backend(&self) -> Backend {
        self.inner.backend
    }

    /// The stream the group's collectives run on (each first waits for the current stream).
    pub fn comm_stream(&self) -> &Stream {
        &self.inner.stream
    }

    /// The store the group's ranks share.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// A group of the ranks `ranks` of this group (`dist.new_group(ranks)`), ranked in the order
    /// given. Every rank of this group must call it with the same `ranks` (as in PyTorch); the
    /// ranks outside get `None`.
    pub fn new_group(&self, ranks: &[usize]) -> Result<Option<ProcessGroup>> {
        let n = self.inner.subgroups.fetch_add(1, Ordering::Relaxed);
        for (i, &r) in ranks.iter().enumerate() {
            if r >= self.inner.world || ranks[..i].contains(&r) {
                return Err(Error::InvalidArgument {
                    op: "new_group",
                    reason: format!("ranks {ranks:?} must be distinct ranks of a group of {}", self.inner.world),
                });
            }
        }
        let Some(rank) = ranks.iter().position(|&r| r == self.inner.rank) else { return Ok(None) };
        let parts = Parts {
            rank,
            world: ranks.len(),
            device: self.inner.device,
            tag: format!("{}/g{n}", self.inner.tag),
            store: self.inner.store.clone(),
            farewell: Farewell::Silent,
        };
        let options = InitOptions {
            backend: Some(self.inner.backend),
            timeout: self.inner.timeout,
            check_collectives: self.inner.check_collectives,
            ..InitOptions::default()
        };
        ProcessGroup::join(parts, self.inner.backend, &options).map(Some)
    }

    /// Waits until every rank reached the barrier and the group's work queued before it is done
    /// (`dist.barrier()`: an all-reduce of one byte on the device that the host waits for).
    pub fn barrier(&self) -> Result<()> {
        let flag = crate::Tensor::zeros([1], crate::DType::U8, crate::Device::cuda(self.inner.device))?;
        self.all_reduce(&flag, super::ReduceOp::Max, true)?.wait_blocking()
    }

    /// The simulated backend's view of this rank.
    pub(super) fn sim_rank(&self) -> SimRank {
        let i = &self.inner;
        SimRank { store: i.store.clone(), tag: i.tag.clone(), rank: i.rank, world: i.world, timeout: i.timeout }
    }

    /// Checks through the store that every rank called collective `seq` as `fingerprint` (so
    /// that a mismatch is an error on every rank instead of a hang in NCCL).
    pub(super) fn check_fingerprint(&self, seq: u64, fingerprint: &str) -> Result<()> {
        let me = self.sim_rank();
        let keys: Vec<String> = (0..me.world).map(|r| format!("{}/fp/{seq}/{r}", me.tag)).collect();
        me.store.set(&keys[me.rank], fingerprint.as_bytes())?;
        let ranks: Vec<usize> = (0..me.world).collect();
        wait_ranks(&me, &keys, &ranks, &format!("collective #{seq} ({fingerprint})"))?;
        let mut theirs = Vec::with_capacity(me.world);
        for key in &keys {
            theirs.push(String::from_utf8_lossy(&me.store.get(key)?).into_owned());
        }
        let refs: Vec<&str> = theirs.iter().map(String::as_str).collect();
        let verdict = agree(seq, me.rank, &refs);
        let read = format!("{}/fp/{seq}/read", me.tag);
        if me.store.add(&read, 1)? == me.world as i64 {
            for key in keys.iter().chain([&read]) {
                me.store.delete_key(key)?;
            }
        }
        verdict
    }
}

/// What a rank of a new group knows before it joins.
pub(super) struct Parts {
    pub rank: usize,
    pub world: usize,
    pub device: usize,
    pub tag: String,
    pub store: Arc<dyn Store>,
    pub farewell: Farewell,
}
