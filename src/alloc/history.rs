//! The allocation history (`torch.cuda.memory._record_memory_history`): a bounded ring of events,
//! and the stacks of the calls that made them and of the blocks still active.

use super::frames::Frames;
use crate::driver::StreamId;
use crate::race::Stack;
use serde::{Serialize, Serializer};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// What `_record_memory_history` records (its `enabled` argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HistoryEnabled {
    /// The ring of events and the stacks of active blocks (`"all"`).
    All,
    /// Only the stacks of active blocks, no ring of events (`"state"`).
    State,
}

/// Which stacks are kept (`_record_memory_history`'s `context`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HistoryContext {
    /// Those of active blocks (`"state"`).
    State,
    /// Those, and those of the allocation events in the ring (`"alloc"`).
    Alloc,
    /// Those, and those of the free events too (`"all"`).
    All,
}

/// Which stack traces are captured (`_record_memory_history`'s `stacks`): Rust has no Python
/// stack, so PyTorch's `"python"` and `"all"` (Python and C++) both map to [`Stacks::All`], the
/// Rust backtrace of the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stacks {
    /// A backtrace per allocation and free event (bare addresses, at most 24 frames,
    /// resolved to file, line and function only when a snapshot is serialized).
    All,
    /// No stack traces: events and blocks carry empty `frames`.
    None,
}

/// The options of `torch.cuda.memory._record_memory_history(enabled, context, stacks,
/// max_entries)`, for [`record_memory_history_with`](crate::cuda::record_memory_history_with).
/// [`MemoryHistory::new`] gives PyTorch's defaults: events and stacks of everything, no bound.
///
/// ```
/// use cudasem::cuda::{HistoryContext, MemoryHistory, Stacks};
/// let h = MemoryHistory::new().context(Some(HistoryContext::Alloc)).max_entries(100_000);
/// assert_eq!(h.stacks, Stacks::All);
/// assert!(MemoryHistory::off().enabled.is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryHistory {
    /// What is recorded; `None` stops recording and clears what was recorded.
    pub enabled: Option<HistoryEnabled>,
    /// Which stacks are kept; `None` keeps none.
    pub context: Option<HistoryContext>,
    /// Which stack traces are captured.
    pub stacks: Stacks,
    /// The most events the ring keeps per device (the oldest are dropped).
    pub max_entries: usize,
}

impl Default for MemoryHistory {
    fn default() -> Self {
        MemoryHistory {
            enabled: Some(HistoryEnabled::All),
            context: Some(HistoryContext::All),
            stacks: Stacks::All,
            max_entries: usize::MAX,
        }
    }
}

impl MemoryHistory {
    /// PyTorch's defaults: `enabled="all", context="all", stacks="all", max_entries=sys.maxsize`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Recording off (`enabled=None`): applying it clears the ring and the stacks.
    pub fn off() -> Self {
        MemoryHistory { enabled: None, ..Self::default() }
    }

    /// With `enabled` set.
    pub fn enabled(self, enabled: Option<HistoryEnabled>) -> Self {
        MemoryHistory { enabled, ..self }
    }

    /// With `context` set.
    pub fn context(self, context: Option<HistoryContext>) -> Self {
        MemoryHistory { context, ..self }
    }

    /// With `stacks` set.
    pub fn stacks(self, stacks: Stacks) -> Self {
        MemoryHistory { stacks, ..self }
    }

    /// With `max_entries` set.
    pub fn max_entries(self, max_entries: usize) -> Self {
        MemoryHistory { max_entries, ..self }
    }

    /// The stacks kept, once `enabled` and `stacks` are taken into account.
    pub(crate) fn kept(&self) -> Option<HistoryContext> {
        match (self.enabled, self.stacks) {
            (Some(_), Stacks::All) => self.context,
            _ => None,
        }
    }
}

/// What happened, with PyTorch's action names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TraceAction {
    /// A block was handed out (`alloc`).
    Alloc,
    /// The program freed a block (`free_requested`).
    FreeRequested,
    /// The block is back in its pool, recorded streams done (`free_completed`).
    FreeCompleted,
    /// A segment was asked from the driver (`segment_alloc`).
    SegmentAlloc,
    /// A segment was given back to the driver (`segment_free`).
    SegmentFree,
    /// Pages of an expandable segment were mapped (`segment_map`).
    SegmentMap,
    /// Pages of an expandable segment were unmapped (`segment_unmap`).
    SegmentUnmap,
    /// A malloc failed for lack of memory (`oom`; `addr` holds the device's free bytes).
    Oom,
    /// A snapshot was taken (`snapshot`; in PyTorch's traces, never recorded by cudasem).
    Snapshot,
}

impl TraceAction {
    /// Every action.
    pub const ALL: [TraceAction; 9] = [
        TraceAction::Alloc,
        TraceAction::FreeRequested,
        TraceAction::FreeCompleted,
        TraceAction::SegmentAlloc,
        TraceAction::SegmentFree,
        TraceAction::SegmentMap,
        TraceAction::SegmentUnmap,
        TraceAction::Oom,
        TraceAction::Snapshot,
    ];

    /// PyTorch's name (`"alloc"`, `"free_requested"`, …).
    pub fn name(self) -> &'static str {
        match self {
            TraceAction::Alloc => "alloc",
            TraceAction::FreeRequested => "free_requested",
            TraceAction::FreeCompleted => "free_completed",
            TraceAction::SegmentAlloc => "segment_alloc",
            TraceAction::SegmentFree => "segment_free",
            TraceAction::SegmentMap => "segment_map",
            TraceAction::SegmentUnmap => "segment_unmap",
            TraceAction::Oom => "oom",
            TraceAction::Snapshot => "snapshot",
        }
    }

    /// The action with PyTorch's name `name`.
    pub fn from_name(name: &str) -> Option<TraceAction> {
        TraceAction::ALL.into_iter().find(|a| a.name() == name)
    }
}

/// One recorded event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEntry {
    /// What happened.
    pub action: TraceAction,
    /// The block's or segment's address (for `oom`: the device's free bytes, as in PyTorch).
    pub addr: u64,
    /// Bytes (for `alloc`/`free_*`: the size asked for, before rounding, as in PyTorch's traces;
    /// for segments: their size; for `oom`: the bytes the allocator tried to get).
    pub size: usize,
    /// The stream of the block or segment.
    pub stream: StreamId,
    /// Microseconds since the Unix epoch.
    pub time_us: u64,
    /// The stack of the call that made the event (empty unless stacks are recorded).
    pub frames: Frames,
}

/// PyTorch's trace dict.
#[derive(Serialize)]
struct TraceDict<'a> {
    action: &'static str,
    addr: u64,
    size: usize,
    stream: u64,
    time_us: u64,
    frames: &'a Frames,
    #[serde(skip_serializing_if = "Option::is_none")]
    device_free: Option<u64>,
}

impl Serialize for TraceEntry {
    /// As PyTorch's trace dict (`action, addr, size, stream, time_us, frames`, and `device_free`
    /// for `oom`).
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        TraceDict {
            action: self.action.name(),
            addr: self.addr,
            size: self.size,
            stream: self.stream.0,
            time_us: self.time_us,
            frames: &self.frames,
            device_free: (self.action == TraceAction::Oom).then_some(self.addr),
        }
        .serialize(s)
    }
}

/// The ring of recent events and the stacks kept (off by default).
#[derive(Debug, Default)]
pub(crate) struct History {
    /// The ring is recorded.
    enabled: bool,
    max_entries: usize,
    ring: VecDeque<TraceEntry>,
    /// The stacks kept (`None`: none, and nothing is captured).
    context: Option<HistoryContext>,
    /// The stack of the allocator call underway, set by the allocator around the call.
    current: Option<Arc<Stack>>,
    /// The allocation stacks of active blocks, by address.
    blocks: HashMap<u64, Arc<Stack>>,
    /// The stacks of the calls that made the segments, by address.
    segments: HashMap<u64, Arc<Stack>>,
}

impl TraceAction {
    /// Whether the event frees (its stack is kept only with [`HistoryContext::All`]).
    fn frees(self) -> bool {
        matches!(
            self,
            TraceAction::FreeRequested
                | TraceAction::FreeCompleted
                | TraceAction::SegmentFree
                | TraceAction::SegmentUnmap
        )
    }
}

impl History {
    /// Turns recording on (keeping at most `max_entries`, the oldest dropped first) or off
    /// (which clears the ring, like PyTorch), without stacks.
    #[cfg(test)]
    pub fn set(&mut self, enabled: bool, max_entries: usize) {
        let h = MemoryHistory::new().stacks(Stacks::None).max_entries(max_entries);
        self.configure(if enabled { h } else { MemoryHistory::off() });
    }

    /// Applies `_record_memory_history`'s options. Turning it off clears the ring and the
    /// stacks; without stacks kept, the stacks of blocks and segments are dropped.
    pub fn configure(&mut self, h: MemoryHistory) {
        self.enabled = h.enabled == Some(HistoryEnabled::All);
        self.max_entries = h.max_entries;
        self.context = h.kept();
        if !self.enabled {
            self.ring = VecDeque::new();
        }
        if self.context.is_none() {
            self.blocks = HashMap::new();
            self.segments = HashMap::new();
        }
        while self.ring.len() > self.max_entries {
            self.ring.pop_front();
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The stacks kept.
    pub fn context(&self) -> Option<HistoryContext> {
        self.context
    }

    /// Sets (or with `None` clears) the stack of the allocator call underway.
    #[inline]
    pub fn set_current(&mut self, stack: Option<Arc<Stack>>) {
        self.current = stack;
    }

    #[inline]
    pub fn record(&mut self, action: TraceAction, addr: u64, size: usize, stream: StreamId) {
        if self.enabled || self.context.is_some() {
            self.push(action, addr, size, stream);
        }
    }

    #[cold]
    fn push(&mut self, action: TraceAction, addr: u64, size: usize, stream: StreamId) {
        if self.context.is_some() {
            self.keep_state(action, addr);
        }
        if !self.enabled || self.max_entries == 0 {
            return;
        }
        if self.ring.len() >= self.max_entries {
            self.ring.pop_front();
        }
        let kept = match self.context {
            Some(HistoryContext::All) => true,
            Some(HistoryContext::Alloc) => !action.frees(),
            _ => false,
        };
        let frames = match (&self.current, kept) {
            (Some(s), true) => Frames::captured(s.clone()),
            _ => Frames::default(),
        };
        let time_us = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0);
        self.ring.push_back(TraceEntry { action, addr, size, stream, time_us, frames });
    }

    /// Keeps the stacks of active blocks and of segments up to date.
    fn keep_state(&mut self, action: TraceAction, addr: u64) {
        match action {
            TraceAction::Alloc => match &self.current {
                Some(s) => drop(self.blocks.insert(addr, s.clone())),
                None => drop(self.blocks.remove(&addr)),
            },
            TraceAction::FreeCompleted => drop(self.blocks.remove(&addr)),
            TraceAction::SegmentAlloc => match &self.current {
                Some(s) => drop(self.segments.insert(addr, s.clone())),
                None => drop(self.segments.remove(&addr)),
            },
            TraceAction::SegmentFree => drop(self.segments.remove(&addr)),
            _ => {}
        }
    }

    /// The allocation stack of the active block at `addr`.
    pub fn block_frames(&self, addr: u64) -> Frames {
        self.blocks.get(&addr).map_or_else(Frames::default, |s| Frames::captured(s.clone()))
    }

    /// The stack of the call that made the segment at `addr`.
    pub fn segment_frames(&self, addr: u64) -> Frames {
        self.segments.get(&addr).map_or_else(Frames::default, |s| Frames::captured(s.clone()))
    }

    pub fn entries(&self) -> Vec<TraceEntry> {
        self.ring.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_is_bounded_and_off_by_default() {
        let mut h = History::default();
        h.record(TraceAction::Alloc, 1, 512, StreamId(0));
        assert!(h.entries().is_empty());
        h.set(true, 3);
        for i in 0..5 {
            h.record(TraceAction::Alloc, i, 512, StreamId(0));
        }
        let addrs: Vec<u64> = h.entries().iter().map(|e| e.addr).collect();
        assert_eq!(addrs, [2, 3, 4], "the oldest are dropped");
        h.set(true, 1);
        assert_eq!(h.entries().len(), 1);
        h.set(false, 10);
        assert!(h.entries().is_empty(), "turning it off clears it");
        for a in TraceAction::ALL {
            assert_eq!(TraceAction::from_name(a.name()), Some(a));
        }
    }
}
