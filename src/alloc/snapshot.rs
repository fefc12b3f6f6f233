//! Snapshots (`torch.cuda.memory_snapshot()` / `memory._snapshot()`): every segment and block at
//! one moment, plus the history ring, exported as JSON or as the pickle PyTorch's `memory_viz` reads.

use super::block::{BlockId, PoolKind, NIL};
use super::history::TraceEntry;
use super::pickle::to_pickle;
use super::state::State;
use super::stats::{MemoryStats, StatPool};
use super::value::Value;
use crate::driver::StreamId;

/// A block's state, with PyTorch's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockState {
    /// Handed out (`active_allocated`).
    ActiveAllocated,
    /// Freed by the program, waiting for streams it was recorded on (`active_pending_free`).
    ActivePendingFree,
    /// Free in its pool (`inactive`).
    Inactive,
}

impl BlockState {
    /// PyTorch's name.
    pub fn name(self) -> &'static str {
        match self {
            BlockState::ActiveAllocated => "active_allocated",
            BlockState::ActivePendingFree => "active_pending_free",
            BlockState::Inactive => "inactive",
        }
    }

    /// Allocated or pending free.
    pub fn is_active(self) -> bool {
        self != BlockState::Inactive
    }
}

/// One block of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockInfo {
    /// Device address.
    pub address: u64,
    /// Bytes (after rounding).
    pub size: usize,
    /// Bytes the program asked for (0 for inactive blocks).
    pub requested_size: usize,
    /// Its state.
    pub state: BlockState,
}

/// One segment: memory from one driver allocation, or one contiguous mapped range of an
/// expandable segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    /// Device index.
    pub device: usize,
    /// Start address.
    pub address: u64,
    /// Bytes held from the driver.
    pub total_size: usize,
    /// Bytes of allocated blocks.
    pub allocated_size: usize,
    /// Bytes of active (allocated or pending free) blocks.
    pub active_size: usize,
    /// Bytes requested by active blocks.
    pub requested_size: usize,
    /// The stream the segment serves.
    pub stream: StreamId,
    /// Its pool (`segment_type` `"small"` / `"large"`).
    pub segment_type: PoolKind,
    /// Whether it is (part of) an expandable segment.
    pub is_expandable: bool,
    /// Its blocks in address order; their sizes add up to `total_size`.
    pub blocks: Vec<BlockInfo>,
}

/// Every segment at one moment, and the recorded history (`device_traces`, one list per device).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Snapshot {
    /// Segments in address order.
    pub segments: Vec<SegmentInfo>,
    /// The history ring of each device, oldest first (empty lists when history is off).
    pub device_traces: Vec<Vec<TraceEntry>>,
}

impl Snapshot {
    /// Adds another device's snapshot (for a whole-process snapshot).
    pub fn merge(&mut self, other: Snapshot) {
        self.segments.extend(other.segments);
        self.device_traces.extend(other.device_traces);
    }

    /// Sum of segment sizes (equals `reserved_bytes.all.current` taken at the same moment).
    pub fn reserved_bytes(&self) -> usize {
        self.segments.iter().map(|s| s.total_size).sum()
    }

    /// Sum of allocated block sizes (equals `allocated_bytes.all.current`).
    pub fn allocated_bytes(&self) -> usize {
        self.segments.iter().map(|s| s.allocated_size).sum()
    }

    /// Sum of active block sizes (equals `active_bytes.all.current`).
    pub fn active_bytes(&self) -> usize {
        self.segments.iter().map(|s| s.active_size).sum()
    }

    /// Sum of requested sizes of active blocks (equals `requested_bytes.all.current`).
    pub fn requested_bytes(&self) -> usize {
        self.segments.iter().map(|s| s.requested_size).sum()
    }

    /// Blocks in the given state, over all segments.
    pub fn blocks_in(&self, state: BlockState) -> impl Iterator<Item = &BlockInfo> {
        self.segments.iter().flat_map(|s| s.blocks.iter()).filter(move |b| b.state == state)
    }

    /// Where this snapshot disagrees with statistics taken at the same moment, and where a segment
    /// is not exactly tiled by its blocks (an empty list when all is consistent). Checks every
    /// `current` value of `segment`, `allocation`, `active`, `inactive_split`, `*_bytes` in every
    /// pool.
    pub fn mismatches(&self, stats: &MemoryStats) -> Vec<String> {
        let mut out = Vec::new();
        for s in &self.segments {
            let mut at = s.address;
            for b in &s.blocks {
                if b.address != at {
                    out.push(format!("segment {:#x}: block at {:#x}, expected {at:#x}", s.address, b.address));
                }
                at = b.address + b.size as u64;
            }
            if at != s.address + s.total_size as u64 {
                out.push(format!("segment {:#x}: blocks end at {at:#x}, not at its end", s.address));
            }
        }
        for (pool, which) in [
            (None, StatPool::All),
            (Some(PoolKind::Small), StatPool::SmallPool),
            (Some(PoolKind::Large), StatPool::LargePool),
        ] {
            let segs: Vec<&SegmentInfo> =
                self.segments.iter().filter(|s| pool.is_none_or(|p| s.segment_type == p)).collect();
            let blocks = || segs.iter().flat_map(|s| s.blocks.iter());
            let split_inactive = || {
                segs.iter()
                    .filter(|s| !s.is_expandable && s.blocks.len() > 1)
                    .flat_map(|s| s.blocks.iter())
                    .filter(|b| b.state == BlockState::Inactive)
            };
            let expected = [
                ("segment", segs.len()),
                ("reserved_bytes", segs.iter().map(|s| s.total_size).sum()),
                ("allocation", blocks().filter(|b| b.state == BlockState::ActiveAllocated).count()),
                ("allocated_bytes", segs.iter().map(|s| s.allocated_size).sum()),
                ("active", blocks().filter(|b| b.state.is_active()).count()),
                ("active_bytes", segs.iter().map(|s| s.active_size).sum()),
                ("requested_bytes", segs.iter().map(|s| s.requested_size).sum()),
                ("inactive_split", split_inactive().count()),
                ("inactive_split_bytes", split_inactive().map(|b| b.size).sum()),
            ];
            for (metric, want) in expected {
                let got = stats.stat(metric, which).map_or(-1, |s| s.current);
                if got != want as i64 {
                    out.push(format!("{metric}.{which:?}: stats say {got}, the snapshot {want}"));
                }
            }
        }
        out
    }

    /// The snapshot as PyTorch's dict: `{"segments": [...], "device_traces": [[...]]}`.
    pub fn to_value(&self) -> Value {
        let segments = self.segments.iter().map(SegmentInfo::to_value).collect();
        let traces =
            self.device_traces.iter().map(|t| Value::List(t.iter().map(TraceEntry::to_value).collect())).collect();
        Value::Dict(vec![("segments".into(), Value::List(segments)), ("device_traces".into(), Value::List(traces))])
    }

    /// JSON text of [`Snapshot::to_value`].
    pub fn to_json(&self) -> String {
        self.to_value().to_json()
    }

    /// A pickle (protocol 2) of [`Snapshot::to_value`]: save it as `snapshot.pickle` and open it
    /// with <https://pytorch.org/memory_viz> or `python -m torch.cuda._memory_viz`.
    pub fn to_pickle(&self) -> Vec<u8> {
        to_pickle(&self.to_value())
    }
}

impl SegmentInfo {
    /// PyTorch's segment dict.
    pub fn to_value(&self) -> Value {
        let blocks = self
            .blocks
            .iter()
            .map(|b| {
                Value::Dict(vec![
                    ("address".into(), b.address.into()),
                    ("size".into(), b.size.into()),
                    ("requested_size".into(), b.requested_size.into()),
                    ("state".into(), b.state.name().into()),
                    ("frames".into(), Value::List(Vec::new())),
                ])
            })
            .collect();
        Value::Dict(vec![
            ("device".into(), self.device.into()),
            ("address".into(), self.address.into()),
            ("total_size".into(), self.total_size.into()),
            ("allocated_size".into(), self.allocated_size.into()),
            ("active_size".into(), self.active_size.into()),
            ("requested_size".into(), self.requested_size.into()),
            ("stream".into(), self.stream.0.into()),
            ("segment_type".into(), self.segment_type.name().into()),
            ("segment_pool_id".into(), Value::Tuple(vec![Value::Int(0), Value::Int(0)])),
            ("is_expandable".into(), self.is_expandable.into()),
            ("frames".into(), Value::List(Vec::new())),
            ("blocks".into(), Value::List(blocks)),
        ])
    }
}

impl State {
    /// Every segment (every contiguous mapped range, for expandable segments) in address order.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let mut heads: Vec<(u64, BlockId)> = self
            .blocks
            .iter()
            .filter(|(_, b)| b.mapped && (b.prev == NIL || !self.blocks[b.prev].mapped))
            .map(|(id, b)| (b.addr, id))
            .collect();
        heads.sort_unstable();
        let segments = heads
            .into_iter()
            .map(|(address, head)| {
                let h = &self.blocks[head];
                let mut seg = SegmentInfo {
                    device: self.device,
                    address,
                    total_size: 0,
                    allocated_size: 0,
                    active_size: 0,
                    requested_size: 0,
                    stream: h.stream,
                    segment_type: h.pool,
                    is_expandable: h.is_expandable(),
                    blocks: Vec::new(),
                };
                let mut id = head;
                while id != NIL && self.blocks[id].mapped {
                    let b = &self.blocks[id];
                    let state = if b.allocated {
                        BlockState::ActiveAllocated
                    } else if b.event_count > 0 || !b.stream_uses.is_empty() {
                        BlockState::ActivePendingFree
                    } else {
                        BlockState::Inactive
                    };
                    let requested_size = if state.is_active() { b.requested } else { 0 };
                    seg.total_size += b.size;
                    if state == BlockState::ActiveAllocated {
                        seg.allocated_size += b.size;
                    }
                    if state.is_active() {
                        seg.active_size += b.size;
                        seg.requested_size += requested_size;
                    }
                    seg.blocks.push(BlockInfo { address: b.addr, size: b.size, requested_size, state });
                    id = b.next;
                }
                seg
            })
            .collect();
        Snapshot { segments, device_traces: vec![self.history.entries()] }
    }
}
