//! The stream captures underway and the rules they impose, checked once for both drivers at the
//! door (`work.rs`, `stream.rs`, `event.rs`): which streams belong to a capture (the one that
//! began it, and every stream that waited on an event recorded in it), which calls are refused
//! while it is underway, whether forked streams were joined back, and what the captured work
//! must keep alive (the storages its work uses, and its matrix products' workspaces).
//!
//! The rules are CUDA's (`cudaStreamCaptureMode`), decided here before the driver sees the call,
//! so a refused call is a typed error that names itself and never reaches the driver:
//! * work queued on a capture's stream is captured; waiting on an event recorded outside the
//!   capture would cross its boundary and is refused;
//! * a blocking call that would wait for, query or read a capturing stream or a captured event
//!   is refused in every mode;
//! * in [`CaptureMode::Global`] every blocking call of any thread is refused while the capture
//!   is underway, in [`CaptureMode::ThreadLocal`] those of the thread that began it.
//!
//! A refused call invalidates its capture, as in CUDA: `capture_end` then reports it and
//! records nothing. The fast path, no capture at all, is one relaxed atomic load.

use crate::alloc::MemPoolId;
use crate::driver::{CaptureMode, EventId, StreamId};
use crate::error::{Error, Result};
use crate::kernel::Workspace;
use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::thread::ThreadId;

/// Captures underway (the fast path's check).
static ACTIVE: AtomicUsize = AtomicUsize::new(0);
/// The captures underway.
static CAPTURES: RwLock<Vec<Arc<Capture>>> = RwLock::new(Vec::new());
/// Capture ids (1, 2, …).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Whether any capture is underway.
#[inline]
pub(crate) fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed) > 0
}

/// Something the captured work uses and a replay needs alive (a tensor's storage).
pub(crate) type KeepAlive = Arc<dyn Any + Send + Sync>;

/// One stream of a capture: how much work it queued in it, and how much of that another
/// stream of the capture has waited for.
#[derive(Debug, Default, Clone, Copy)]
struct Member {
    work: u64,
    joined: u64,
}

#[derive(Default)]
struct State {
    members: HashMap<StreamId, Member>,
    /// Events recorded in the capture: the recording stream and its work count then.
    events: HashMap<EventId, (StreamId, u64)>,
    /// The first refused call, which invalidated the capture.
    invalid: Option<(&'static str, String)>,
    keep: Vec<KeepAlive>,
    /// The matrix products' workspace of each stream of the capture that queued one (its block
    /// is in `keep`).
    workspaces: HashMap<StreamId, Workspace>,
    /// The generators the capture's random draws read, by generator id.
    rng: HashMap<u64, RngUse>,
}

/// What a replay does first for a generator a graph draws from: given the replay's stream and
/// the Philox blocks the graph's draws take, write the generator's seed and offset into the
/// graph's slot and advance the generator by those blocks (PyTorch's `replay_prologue`).
pub(crate) type RngReplay = Arc<dyn Fn(&super::Stream, u64) -> Result<()> + Send + Sync>;

/// A generator a capture draws from: the device slot its kernels read `(seed, offset)` from,
/// the blocks its draws took so far, and the replay's prologue.
struct RngUse {
    slot: crate::kernel::DevicePtr,
    blocks: u64,
    replay: RngReplay,
}

/// A capture underway.
pub(crate) struct Capture {
    pub id: u64,
    pub device: usize,
    /// The stream that began it (and must end it).
    pub origin: StreamId,
    pub mode: CaptureMode,
    pub thread: ThreadId,
    /// Host tensor work is allowed inside (it will not be part of a replay).
    pub allow_host_ops: bool,
    /// The private pool its allocations go to.
    pub pool: MemPoolId,
    state: Mutex<State>,
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture").field("id", &self.id).field("device", &self.device).finish_non_exhaustive()
    }
}

fn captures() -> std::sync::RwLockReadGuard<'static, Vec<Arc<Capture>>> {
    CAPTURES.read().unwrap_or_else(|e| e.into_inner())
}

impl Capture {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `stream` belongs to the capture.
    pub fn is_member(&self, stream: StreamId) -> bool {
        self.state().members.contains_key(&stream)
    }

    /// Marks the capture invalid (the first reason wins) and returns the refusal.
    fn refuse(&self, call: &'static str, reason: String) -> Error {
        let mut st = self.state();
        if st.invalid.is_none() {
            st.invalid = Some((call, reason.clone()));
        }
        Error::IllegalDuringCapture { call, capture: self.id, reason }
    }

    /// How the capture stands at `capture_end`: invalidated, a stream not joined back, or
    /// complete (then what it keeps alive).
    pub fn finish(&self) -> Result<Vec<KeepAlive>> {
        let mut st = self.state();
        if let Some((call, reason)) = st.invalid.clone() {
            return Err(Error::CaptureInvalidated { capture: self.id, call, reason });
        }
        let mut unjoined: Vec<_> =
            st.members.iter().filter(|(s, m)| **s != self.origin && m.joined < m.work).map(|(s, _)| s.0).collect();
        unjoined.sort_unstable();
        if let Some(&stream) = unjoined.first() {
            return Err(Error::CaptureUnjoined { capture: self.id, stream });
        }
        Ok(std::mem::take(&mut st.keep))
    }

    /// Work was queued on `stream` (a member) that uses `keep`'s memory, which the graph then
    /// keeps alive as long as it lives.
    pub fn on_work(&self, stream: StreamId, keep: impl Iterator<Item = KeepAlive>) {
        let mut st = self.state();
        st.members.entry(stream).or_default().work += 1;
        st.keep.extend(keep);
    }

    /// The workspace of the capture's matrix products on `stream` (PyTorch's cuBLAS workspace
    /// per handle and stream, from the caching allocator): the one its first product there got,
    /// else one `make` allocates now — from the capture's pool, the stream being a member — which
    /// the graph keeps as long as it lives. Each stream of the capture gets its own, since their
    /// work may run at once on a replay; one stream's products run in order and share it.
    pub fn gemm_workspace(
        &self,
        stream: StreamId,
        make: impl FnOnce() -> Result<(Workspace, KeepAlive)>,
    ) -> Result<Workspace> {
        if let Some(&w) = self.state().workspaces.get(&stream) {
            return Ok(w);
        }
        // Allocated without the state's lock: the allocator's routing filter takes it.
        let (w, block) = make()?;
        let mut st = self.state();
        if let Some(&had) = st.workspaces.get(&stream) {
            // Another thread queued a product on the stream meanwhile: its workspace serves, and
            // this block goes back to the pool (freed once the lock is released).
            drop(st);
            drop(block);
            return Ok(had);
        }
        st.workspaces.insert(stream, w);
        st.keep.push(block);
        Ok(w)
    }
}

impl Capture {
    /// A random draw of `blocks` Philox blocks from generator `id` queued in the capture: the
    /// generator's slot (made by `make` on its first draw: the slot's address, what the graph
    /// keeps alive, and the replay's prologue) and the blocks the capture's earlier draws from it
    /// took (the draw's offset from the slot's base).
    pub fn rng_draw(
        &self,
        id: u64,
        blocks: u64,
        make: impl FnOnce() -> Result<(crate::kernel::DevicePtr, KeepAlive, RngReplay)>,
    ) -> Result<(crate::kernel::DevicePtr, u64)> {
        if !self.state().rng.contains_key(&id) {
            // Allocated without the state's lock (the allocator's routing filter takes it).
            let (slot, keep, replay) = make()?;
            let mut st = self.state();
            if let std::collections::hash_map::Entry::Vacant(e) = st.rng.entry(id) {
                e.insert(RngUse { slot, blocks: 0, replay });
                st.keep.push(keep);
            }
        }
        let mut st = self.state();
        let u = st.rng.get_mut(&id).ok_or_else(|| Error::Internal { op: "rng_draw", reason: "no slot".into() })?;
        let offset = u.blocks;
        u.blocks = u.blocks.wrapping_add(blocks);
        Ok((u.slot, offset))
    }

    /// The replay prologues of the capture's generators, with the blocks each graph replay takes.
    pub fn take_rng(&self) -> Vec<(RngReplay, u64)> {
        self.state().rng.drain().map(|(_, u)| (u.replay, u.blocks)).collect()
    }
}

/// Registers a capture begun on `origin` (a stream of `device`) by this thread.
pub(crate) fn begin(
    device: usize,
    origin: StreamId,
    mode: CaptureMode,
    allow_host_ops: bool,
    pool: MemPoolId,
) -> Arc<Capture> {
    let mut state = State::default();
    state.members.insert(origin, Member::default());
    let c = Arc::new(Capture {
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        device,
        origin,
        mode,
        thread: std::thread::current().id(),
        allow_host_ops,
        pool,
        state: Mutex::new(state),
    });
    CAPTURES.write().unwrap_or_else(|e| e.into_inner()).push(c.clone());
    ACTIVE.fetch_add(1, Ordering::Relaxed);
    c
}

/// Unregisters a capture (ended, or abandoned after an error).
pub(crate) fn end(capture: &Arc<Capture>) {
    let mut all = CAPTURES.write().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = all.iter().position(|c| Arc::ptr_eq(c, capture)) {
        all.swap_remove(i);
        ACTIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The capture `stream` belongs to, if any.
pub(crate) fn of_stream(stream: StreamId) -> Option<Arc<Capture>> {
    if !active() {
        return None;
    }
    captures().iter().find(|c| c.is_member(stream)).cloned()
}

/// Refuses `call` on `stream` when a capture underway holds the stream (work CUDA cannot record
/// into a graph), invalidating the capture as CUDA does; `Ok` otherwise.
pub(crate) fn refuse_on_member(call: &'static str, stream: StreamId, reason: &str) -> Result<()> {
    match of_stream(stream) {
        Some(c) => Err(c.refuse(call, reason.to_string())),
        None => Ok(()),
    }
}

/// The capture this thread began that is still underway, if any.
pub(crate) fn of_this_thread() -> Option<Arc<Capture>> {
    if !active() {
        return None;
    }
    let me = std::thread::current().id();
    captures().iter().find(|c| c.thread == me).cloned()
}

/// `event` is being recorded on `stream` (slow path).
#[cold]
pub(crate) fn on_record(stream: StreamId, event: EventId) {
    for c in captures().iter() {
        let mut st = c.state();
        match st.members.get(&stream).copied() {
            Some(m) => {
                st.events.insert(event, (stream, m.work));
            }
            // Recorded again outside: it no longer stands for captured work.
            None => {
                st.events.remove(&event);
            }
        }
    }
}

/// `stream` is about to wait on `event` (slow path): joins the stream to the capture the event
/// was recorded in, or refuses a wait that would cross a capture's boundary.
#[cold]
pub(crate) fn on_wait(stream: StreamId, event: EventId) -> Result<()> {
    let all: Vec<_> = captures().clone();
    let mine = all.iter().find(|c| c.is_member(stream));
    let source = all.iter().find(|c| c.state().events.contains_key(&event));
    match (mine, source) {
        (Some(m), Some(s)) if !Arc::ptr_eq(m, s) => Err(m.refuse(
            "Stream::wait_event",
            format!("the event was recorded in another capture (id {}); captures cannot depend on each other", s.id),
        )),
        (Some(m), None) => Err(m.refuse(
            "Stream::wait_event",
            "the event was recorded outside the capture, and a captured stream may only wait on events recorded \
             in its capture; wait for outside work before capture_begin"
                .into(),
        )),
        (_, Some(s)) => {
            let mut st = s.state();
            if let Some(&(src, work)) = st.events.get(&event) {
                if let Some(m) = st.members.get_mut(&src) {
                    m.joined = m.joined.max(work);
                }
            }
            st.members.entry(stream).or_default();
            Ok(())
        }
        (None, None) => Ok(()),
    }
}

/// Refuses a blocking call (`call`) while a capture it would break is underway: one that waits
/// for, queries or reads `stream` when the stream is capturing, and in global mode (any thread)
/// or thread-local mode (the capturing thread) any blocking call at all.
#[cold]
pub(crate) fn check_blocking(call: &'static str, stream: Option<StreamId>) -> Result<()> {
    let me = std::thread::current().id();
    for c in captures().iter() {
        if let Some(s) = stream.filter(|&s| c.is_member(s)) {
            return Err(c.refuse(call, format!("stream {:#x} is capturing, so its work has not run", s.0)));
        }
        let strict = match c.mode {
            CaptureMode::Global => true,
            CaptureMode::ThreadLocal => c.thread == me,
            CaptureMode::Relaxed => false,
        };
        if strict {
            return Err(c.refuse(
                call,
                format!(
                    "a capture in {:?} mode is underway on cuda:{}, which refuses blocking calls{}; use \
                     CaptureErrorMode::Relaxed to allow calls that do not touch the capture",
                    c.mode,
                    c.device,
                    if c.mode == CaptureMode::Global { " from every thread" } else { " from its thread" }
                ),
            ));
        }
    }
    Ok(())
}

/// [`check_blocking`] for a call that waits for all of `device`'s work, which is also refused
/// while any capture on the device is underway, whatever its mode.
#[cold]
pub(crate) fn check_device(call: &'static str, device: usize) -> Result<()> {
    if let Some(c) = captures().iter().find(|c| c.device == device) {
        return Err(c.refuse(call, format!("it would wait for the capturing streams of cuda:{device}")));
    }
    check_blocking(call, None)
}

/// [`check_blocking`] for a call on `event` (query, synchronize, timing), which is also refused
/// when the event's last recording is captured work.
#[cold]
pub(crate) fn check_event(call: &'static str, event: EventId) -> Result<()> {
    for c in captures().iter() {
        if c.state().events.contains_key(&event) {
            return Err(
                c.refuse(call, "the event was recorded in the capture, so it stands for work that has not run".into())
            );
        }
    }
    check_blocking(call, None)
}

/// Refuses host tensor work on a thread that is capturing (a replay would not redo it),
/// unless the capture allows it.
#[cold]
pub(crate) fn check_host_work(call: &'static str) -> Result<()> {
    match of_this_thread() {
        Some(c) if !c.allow_host_ops => Err(c.refuse(
            call,
            "it runs on the host, and a replay of the graph would skip it; do it outside the capture, or set \
             GraphOptions::allow_host_ops"
                .into(),
        )),
        _ => Ok(()),
    }
}
