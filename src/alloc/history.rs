//! The allocation history (`torch.cuda.memory._record_memory_history`): a bounded ring of events.

use crate::driver::StreamId;
use serde::{Serialize, Serializer};
use std::collections::VecDeque;
use std::time::{SystemTime, UNIX_EPOCH};

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
}

/// PyTorch's trace dict.
#[derive(Serialize)]
struct TraceDict {
    action: &'static str,
    addr: u64,
    size: usize,
    stream: u64,
    time_us: u64,
    /// No stack frames are recorded: an empty list.
    frames: &'static [u8],
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
            frames: &[],
            device_free: (self.action == TraceAction::Oom).then_some(self.addr),
        }
        .serialize(s)
    }
}

/// The ring of recent events (off by default).
#[derive(Debug, Default)]
pub(crate) struct History {
    enabled: bool,
    max_entries: usize,
    ring: VecDeque<TraceEntry>,
}

impl History {
    /// Turns recording on (keeping at most `max_entries`, the oldest dropped first) or off
    /// (which clears the ring, like PyTorch).
    pub fn set(&mut self, enabled: bool, max_entries: usize) {
        self.enabled = enabled;
        self.max_entries = max_entries;
        if !enabled {
            self.ring = VecDeque::new();
        }
        while self.ring.len() > max_entries {
            self.ring.pop_front();
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    #[inline]
    pub fn record(&mut self, action: TraceAction, addr: u64, size: usize, stream: StreamId) {
        if self.enabled {
            self.push(action, addr, size, stream);
        }
    }

    #[cold]
    fn push(&mut self, action: TraceAction, addr: u64, size: usize, stream: StreamId) {
        if self.max_entries == 0 {
            return;
        }
        if self.ring.len() >= self.max_entries {
            self.ring.pop_front();
        }
        let time_us = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0);
        self.ring.push_back(TraceEntry { action, addr, size, stream, time_us });
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
