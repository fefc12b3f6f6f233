//! One device's history as memory_viz reads it: the life of every allocation (from its `alloc`
//! to its `free_completed`), the live bytes and the reserved bytes at every moment.
//!
//! Moments are numbered `0..=n` for `n` trace entries: moment 0 is before the first entry,
//! moment `i + 1` just after entry `i`. As in PyTorch's `memory_viz`, a block freed in the trace
//! without its `alloc` was live from the start, and a block the snapshot holds without an `alloc`
//! in the trace was live from the start to the end.

use crate::cuda::{Snapshot, TraceAction, TraceEntry};
use std::collections::HashMap;

/// One allocation's life: live at the moments `start..end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Life {
    /// Requested bytes (as the trace gives them).
    pub size: usize,
    /// The block's stream.
    pub stream: u64,
    /// The block's address.
    pub addr: u64,
    /// First moment it is live (0: before the trace).
    pub start: usize,
    /// First moment it is no longer live (`n + 1`: still live at the end).
    pub end: usize,
}

/// One device's trace, read.
#[derive(Debug, Clone)]
pub(crate) struct History {
    /// The device's trace entries (those cudasem knows).
    pub events: Vec<TraceEntry>,
    /// Every allocation in stack order: those live from the start first, then by `start`.
    pub lives: Vec<Life>,
    /// Live requested bytes at each moment `0..=n`.
    pub live: Vec<usize>,
    /// Bytes held from the driver at each moment `0..=n`.
    pub reserved: Vec<usize>,
}

impl History {
    /// The history of `device` in `snapshot` (empty when the snapshot has no trace for it).
    pub fn of(snapshot: &Snapshot, device: usize) -> History {
        let events = snapshot.device_traces.get(device).cloned().unwrap_or_default();
        let lives = lives(snapshot, device, &events);
        let moments = events.len() + 1;
        let mut delta = vec![0i128; moments + 1];
        for l in &lives {
            delta[l.start] += l.size as i128;
            delta[l.end] -= l.size as i128;
        }
        let live = running(&delta[..moments], 0).into_iter().map(|v| v.clamp(0, usize::MAX as i128) as usize).collect();
        let reserved = reserved(snapshot, device, &events);
        History { events, lives, live, reserved }
    }

    /// Number of moments (`n + 1`).
    pub fn moments(&self) -> usize {
        self.live.len()
    }

    /// The first moment of the highest live bytes, and those bytes.
    pub fn peak(&self) -> (usize, usize) {
        argmax(&self.live, 0..self.live.len())
    }
}

/// `(first index of the maximum of v[range], that maximum)`; `(range.start, 0)` when empty.
pub(crate) fn argmax(v: &[usize], range: std::ops::Range<usize>) -> (usize, usize) {
    let mut best = (range.start, 0);
    for i in range {
        if v[i] > best.1 || i == best.0 {
            best = (i, v[i]);
        }
    }
    best
}

/// Prefix sums of `delta` starting from `start`.
fn running(delta: &[i128], start: i128) -> Vec<i128> {
    let mut now = start;
    delta
        .iter()
        .map(|d| {
            now += d;
            now
        })
        .collect()
}

fn lives(snapshot: &Snapshot, device: usize, events: &[TraceEntry]) -> Vec<Life> {
    let end = events.len() + 1;
    let mut lives: Vec<Life> = Vec::new();
    let mut open: HashMap<u64, usize> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        let life = Life { size: e.size, stream: e.stream.0, addr: e.addr, start: i + 1, end };
        match e.action {
            TraceAction::Alloc => {
                if let Some(j) = open.insert(e.addr, lives.len()) {
                    lives[j].end = i + 1; // an alloc over a live block: the trace lost its free
                }
                lives.push(life);
            }
            TraceAction::FreeCompleted => match open.remove(&e.addr) {
                Some(j) => lives[j].end = i + 1,
                None => lives.push(Life { start: 0, end: i + 1, ..life }),
            },
            _ => {}
        }
    }
    for s in snapshot.segments.iter().filter(|s| s.device == device) {
        for b in s.blocks.iter().filter(|b| b.state.is_active() && !open.contains_key(&b.address)) {
            let size = if b.requested_size > 0 { b.requested_size } else { b.size };
            lives.push(Life { size, stream: s.stream.0, addr: b.address, start: 0, end });
        }
    }
    lives.retain(|l| l.size > 0 && l.start < l.end);
    lives.sort_by_key(|l| l.start); // stable: pushed in trace order
    lives
}

/// Reserved bytes at each moment: the snapshot's segments at the end, the trace's segment
/// entries before. Where the trace frees more than the snapshot and its own allocations account
/// for, the start is raised so that no moment is negative.
fn reserved(snapshot: &Snapshot, device: usize, events: &[TraceEntry]) -> Vec<usize> {
    let mut delta = vec![0i128; events.len() + 1];
    for (i, e) in events.iter().enumerate() {
        delta[i + 1] = match e.action {
            TraceAction::SegmentAlloc | TraceAction::SegmentMap => e.size as i128,
            TraceAction::SegmentFree | TraceAction::SegmentUnmap => -(e.size as i128),
            _ => 0,
        };
    }
    let at_end: i128 = snapshot.segments.iter().filter(|s| s.device == device).map(|s| s.total_size as i128).sum();
    let net: i128 = delta.iter().sum();
    let series = running(&delta, 0);
    let lowest = series.iter().copied().min().unwrap_or(0);
    let start = (at_end - net).max(-lowest);
    series.into_iter().map(|v| (v + start).clamp(0, usize::MAX as i128) as usize).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::{BlockInfo, BlockState, PoolKind, SegmentInfo, StreamId};

    fn e(action: TraceAction, addr: u64, size: usize) -> TraceEntry {
        TraceEntry { action, addr, size, stream: StreamId(0), time_us: 0, frames: Default::default() }
    }

    #[test]
    fn lives_follow_memory_viz() {
        use TraceAction::*;
        let block =
            |address, state| BlockInfo { address, size: 512, requested_size: 500, state, frames: Default::default() };
        let snapshot = crate::cuda::Snapshot {
            segments: vec![SegmentInfo {
                device: 0,
                address: 0,
                total_size: 2 << 20,
                allocated_size: 1024,
                active_size: 1024,
                requested_size: 1000,
                stream: StreamId(0),
                segment_type: PoolKind::Small,
                is_expandable: false,
                segment_pool_id: Default::default(),
                blocks: vec![
                    block(0, BlockState::ActiveAllocated),   // allocated before the trace
                    block(512, BlockState::ActiveAllocated), // allocated in it
                    BlockInfo {
                        address: 1024,
                        size: (2 << 20) - 1024,
                        requested_size: 0,
                        state: BlockState::Inactive,
                        frames: Default::default(),
                    },
                ],
                frames: Default::default(),
            }],
            device_traces: vec![vec![
                e(FreeCompleted, 4096, 100), // freed, never allocated in the trace
                e(Alloc, 512, 500),
                e(Alloc, 8192, 300),
                e(FreeRequested, 8192, 300),
                e(FreeCompleted, 8192, 300),
            ]],
        };
        let h = History::of(&snapshot, 0);
        let spans: Vec<(usize, usize, usize)> = h.lives.iter().map(|l| (l.size, l.start, l.end)).collect();
        assert_eq!(spans, [(100, 0, 1), (500, 0, 6), (500, 2, 6), (300, 3, 5)]);
        assert_eq!(h.live, [600, 500, 1000, 1300, 1300, 1000]);
        assert_eq!(h.peak(), (3, 1300));
        assert_eq!(h.reserved, [2 << 20; 6], "the segment was there all along");
        assert_eq!(History::of(&snapshot, 1).moments(), 1, "no trace for device 1");
    }

    #[test]
    fn reserved_runs_backwards_from_the_snapshot() {
        use TraceAction::*;
        let events = vec![e(SegmentAlloc, 0, 20 << 20), e(SegmentFree, 0, 20 << 20), e(SegmentFree, 1 << 30, 2 << 20)];
        let s = crate::cuda::Snapshot { segments: vec![], device_traces: vec![events] };
        // 2 MiB was held before the trace started (it frees it), nothing at the end.
        assert_eq!(History::of(&s, 0).reserved, [2 << 20, 22 << 20, 2 << 20, 0]);
    }
}
