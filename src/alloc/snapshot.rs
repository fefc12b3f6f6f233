//! Snapshots (`torch.cuda.memory_snapshot()` / `memory._snapshot()`): every segment and block at
//! one moment, plus the history ring, exported as JSON or as the pickle PyTorch's `memory_viz` reads.
//!
//! Every type here serializes (serde) as PyTorch's dicts, so `serde_json` gives the JSON and
//! `serde-pickle` the pickle of the same content.

use super::block::{BlockId, PoolKind, NIL};
use super::cache::Cache;
use super::frames::Frames;
use super::history::TraceEntry;
use super::mem_pools::MemPoolId;
use super::stats::{MemoryStats, StatPool};
use crate::driver::StreamId;
use serde::{Serialize, Serializer};

/// A block's state, with PyTorch's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
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

/// One block of a segment (serializes as PyTorch's block dict).
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
    /// The stack of the call that allocated it (active blocks, while stacks are recorded).
    pub frames: Frames,
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
    /// The private pool holding it (PyTorch's `segment_pool_id`), [`MemPoolId::DEFAULT`] for the
    /// default pools.
    pub segment_pool_id: MemPoolId,
    /// Its blocks in address order; their sizes add up to `total_size`.
    pub blocks: Vec<BlockInfo>,
    /// The stack of the call that made the segment (while stacks are recorded).
    pub frames: Frames,
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

    /// The snapshot as JSON text (compact): PyTorch's dict
    /// `{"segments": [...], "device_traces": [[...]]}`.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a snapshot has only string keys")
    }

    /// The snapshot as a pickle (protocol 2) of the same dict: save it as `snapshot.pickle` and
    /// open it with <https://pytorch.org/memory_viz> or `python -m torch.cuda._memory_viz`.
    pub fn to_pickle(&self) -> Vec<u8> {
        serde_pickle::to_vec(self, serde_pickle::SerOptions::new().proto_v2()).expect("a snapshot has only string keys")
    }
}

/// PyTorch's snapshot dict.
#[derive(Serialize)]
struct SnapshotDict<'a> {
    segments: &'a [SegmentInfo],
    device_traces: &'a [Vec<TraceEntry>],
}

/// PyTorch's segment dict.
#[derive(Serialize)]
struct SegmentDict<'a> {
    device: usize,
    address: u64,
    total_size: usize,
    allocated_size: usize,
    active_size: usize,
    requested_size: usize,
    stream: u64,
    segment_type: &'static str,
    segment_pool_id: (u64, u64),
    is_expandable: bool,
    frames: &'a Frames,
    blocks: &'a [BlockInfo],
}

/// PyTorch's block dict.
#[derive(Serialize)]
struct BlockDict<'a> {
    address: u64,
    size: usize,
    requested_size: usize,
    state: BlockState,
    frames: &'a Frames,
}

impl Serialize for Snapshot {
    /// As PyTorch's dict `{"segments": [...], "device_traces": [[...]]}`.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        SnapshotDict { segments: &self.segments, device_traces: &self.device_traces }.serialize(s)
    }
}

impl Serialize for SegmentInfo {
    /// As PyTorch's segment dict, its blocks as block dicts.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        SegmentDict {
            device: self.device,
            address: self.address,
            total_size: self.total_size,
            allocated_size: self.allocated_size,
            active_size: self.active_size,
            requested_size: self.requested_size,
            stream: self.stream.0,
            segment_type: self.segment_type.name(),
            segment_pool_id: self.segment_pool_id.pair(),
            is_expandable: self.is_expandable,
            frames: &self.frames,
            blocks: &self.blocks,
        }
        .serialize(s)
    }
}

impl Serialize for BlockInfo {
    /// As PyTorch's block dict.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let b = self;
        BlockDict {
            address: b.address,
            size: b.size,
            requested_size: b.requested_size,
            state: b.state,
            frames: &b.frames,
        }
        .serialize(s)
    }
}

impl Cache {
    /// Every segment (every contiguous mapped range, for expandable segments) of `device` in
    /// address order.
    pub(crate) fn snapshot(&self, device: usize) -> Snapshot {
        let mut heads: Vec<(u64, BlockId)> = self
            .blocks()
            .iter()
            .filter(|(_, b)| b.mapped && (b.prev == NIL || !self.blocks()[b.prev].mapped))
            .map(|(id, b)| (b.addr, id))
            .collect();
        heads.sort_unstable();
        let segments = heads
            .into_iter()
            .map(|(address, head)| {
                let h = &self.blocks()[head];
                let mut seg = SegmentInfo {
                    device,
                    address,
                    total_size: 0,
                    allocated_size: 0,
                    active_size: 0,
                    requested_size: 0,
                    stream: h.stream,
                    segment_type: h.pool,
                    is_expandable: h.is_expandable(),
                    segment_pool_id: self.pools().id_of(h.slot).unwrap_or_default(),
                    blocks: Vec::new(),
                    frames: self.history().segment_frames(address),
                };
                let mut id = head;
                while id != NIL && self.blocks()[id].mapped {
                    let b = &self.blocks()[id];
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
                    let frames =
                        if state.is_active() { self.history().block_frames(b.addr) } else { Frames::default() };
                    seg.blocks.push(BlockInfo { address: b.addr, size: b.size, requested_size, state, frames });
                    id = b.next;
                }
                seg
            })
            .collect();
        Snapshot { segments, device_traces: vec![self.history().entries()] }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialized_state_names_are_pytorchs() {
        for s in [BlockState::ActiveAllocated, BlockState::ActivePendingFree, BlockState::Inactive] {
            assert_eq!(serde_json::to_value(s).unwrap(), s.name());
        }
    }
}
