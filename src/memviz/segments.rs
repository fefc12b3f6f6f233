//! The segments of one device at a chosen moment of its history, as memory_viz's "allocator state
//! history" rebuilds them: the snapshot's segments at the end, and the trace's entries undone
//! from the last one back to that moment.
//!
//! Blocks of the snapshot are exact. A block the walk back brings back (one freed after the
//! moment) takes its requested size rounded up to PyTorch's 512 bytes, cut at the next live block
//! or the segment's end; a segment brought back (freed after the moment) is in the small pool
//! when it has 2 MiB (PyTorch's small segments), in the large pool otherwise. Free bytes are what
//! no live block covers.

use crate::cuda::{BlockInfo, BlockState, PoolKind, SegmentInfo, Snapshot, StreamId, TraceAction, TraceEntry};
use std::collections::BTreeMap;

/// PyTorch's rounding of block sizes (`kMinBlockSize`).
const MIN_BLOCK: usize = 512;
/// PyTorch's small-pool segment (`kSmallBuffer`).
const SMALL_SEGMENT: usize = 2 << 20;

#[derive(Debug, Clone, Copy)]
struct Live {
    size: usize,
    requested: usize,
    pending: bool,
}

#[derive(Debug, Clone)]
struct Seg {
    size: usize,
    stream: StreamId,
    pool: PoolKind,
    expandable: bool,
    /// Live (allocated or pending free) blocks by address.
    blocks: BTreeMap<u64, Live>,
}

/// The device's segments at `moment` (`0..=events.len()`, see `history`), in address order, each
/// tiled by its blocks (free ones filling what live ones leave).
pub(crate) fn segments_at(
    snapshot: &Snapshot,
    device: usize,
    events: &[TraceEntry],
    moment: usize,
) -> Vec<SegmentInfo> {
    let mut segs: BTreeMap<u64, Seg> = BTreeMap::new();
    for s in snapshot.segments.iter().filter(|s| s.device == device) {
        let blocks = s
            .blocks
            .iter()
            .filter(|b| b.state.is_active())
            .map(|b| {
                let pending = b.state == BlockState::ActivePendingFree;
                (b.address, Live { size: b.size, requested: b.requested_size, pending })
            })
            .collect();
        let seg =
            Seg { size: s.total_size, stream: s.stream, pool: s.segment_type, expandable: s.is_expandable, blocks };
        segs.insert(s.address, seg);
    }
    for e in events.iter().skip(moment).rev() {
        undo(&mut segs, e);
    }
    segs.into_iter().map(|(address, s)| info(device, address, s)).collect()
}

/// The segment holding `addr`.
fn holding(segs: &mut BTreeMap<u64, Seg>, addr: u64) -> Option<(u64, &mut Seg)> {
    let (&start, seg) = segs.range_mut(..=addr).next_back()?;
    (addr < start + seg.size as u64).then_some((start, seg))
}

/// Puts back a block freed after the moment, unless something live is already there.
fn revive(segs: &mut BTreeMap<u64, Seg>, e: &TraceEntry, pending: bool) {
    let Some((start, seg)) = holding(segs, e.addr) else { return };
    if let Some(b) = seg.blocks.get_mut(&e.addr) {
        b.pending = pending;
        return;
    }
    if seg.blocks.range(..e.addr).next_back().is_some_and(|(&a, b)| a + b.size as u64 > e.addr) {
        return;
    }
    let limit = seg.blocks.range(e.addr..).next().map_or(start + seg.size as u64, |(&a, _)| a);
    let size = e.size.max(1).div_ceil(MIN_BLOCK).saturating_mul(MIN_BLOCK);
    let size = size.min((limit - e.addr) as usize);
    seg.blocks.insert(e.addr, Live { size, requested: e.size.min(size), pending });
}

/// Takes `[at, at + size)` out of the segments (pages mapped after the moment).
fn unmap(segs: &mut BTreeMap<u64, Seg>, at: u64, size: usize) {
    let end = at + size as u64;
    let hit: Vec<u64> = segs.range(..end).filter(|(&a, s)| a + s.size as u64 > at).map(|(&a, _)| a).collect();
    for a in hit {
        let s = segs.remove(&a).expect("listed");
        let s_end = a + s.size as u64;
        if a < at {
            segs.insert(a, part(&s, a, at));
        }
        if s_end > end {
            segs.insert(end, part(&s, end, s_end));
        }
    }
}

/// The piece `[from, to)` of `s`, with its blocks there.
fn part(s: &Seg, from: u64, to: u64) -> Seg {
    let blocks = s.blocks.range(from..to).map(|(&a, &b)| (a, b)).collect();
    Seg { size: (to - from) as usize, blocks, ..s.clone() }
}

/// Puts back `[at, at + size)` of an expandable segment (pages unmapped after the moment), joined
/// to the mapped ranges it touches.
fn remap(segs: &mut BTreeMap<u64, Seg>, at: u64, size: usize, stream: StreamId) {
    let mut start = at;
    let mut seg = Seg { size, stream, pool: PoolKind::Large, expandable: true, blocks: BTreeMap::new() };
    if let Some((&a, prev)) = segs.range(..at).next_back() {
        if prev.expandable && a + prev.size as u64 == at {
            let mut prev = segs.remove(&a).expect("found");
            prev.size += size;
            (start, seg) = (a, prev);
        }
    }
    let end = start + seg.size as u64;
    if segs.get(&end).is_some_and(|next| next.expandable) {
        let next = segs.remove(&end).expect("found");
        seg.size += next.size;
        seg.blocks.extend(next.blocks);
    }
    segs.insert(start, seg);
}

fn undo(segs: &mut BTreeMap<u64, Seg>, e: &TraceEntry) {
    match e.action {
        TraceAction::Alloc => {
            if let Some((_, seg)) = holding(segs, e.addr) {
                seg.blocks.remove(&e.addr);
            }
        }
        TraceAction::FreeRequested => revive(segs, e, false),
        TraceAction::FreeCompleted => revive(segs, e, true),
        TraceAction::SegmentAlloc => {
            segs.remove(&e.addr);
        }
        TraceAction::SegmentFree => {
            if holding(segs, e.addr).is_none() {
                let pool = if e.size == SMALL_SEGMENT { PoolKind::Small } else { PoolKind::Large };
                let seg = Seg { size: e.size, stream: e.stream, pool, expandable: false, blocks: BTreeMap::new() };
                segs.insert(e.addr, seg);
            }
        }
        TraceAction::SegmentMap => unmap(segs, e.addr, e.size),
        TraceAction::SegmentUnmap => remap(segs, e.addr, e.size, e.stream),
        TraceAction::Oom | TraceAction::Snapshot => {}
    }
}

fn info(device: usize, address: u64, s: Seg) -> SegmentInfo {
    let mut out = SegmentInfo {
        device,
        address,
        total_size: s.size,
        allocated_size: 0,
        active_size: 0,
        requested_size: 0,
        stream: s.stream,
        segment_type: s.pool,
        is_expandable: s.expandable,
        segment_pool_id: Default::default(),
        blocks: Vec::with_capacity(2 * s.blocks.len() + 1),
        frames: Default::default(),
    };
    let end = address + s.size as u64;
    let mut at = address;
    let free = |from: u64, to: u64| BlockInfo {
        address: from,
        size: (to - from) as usize,
        requested_size: 0,
        state: BlockState::Inactive,
        frames: Default::default(),
    };
    for (a, b) in s.blocks {
        let b_end = (a + b.size as u64).min(end);
        if a < at || a >= end {
            continue; // overlaps the one before: an inconsistent trace, drawn without it
        }
        if a > at {
            out.blocks.push(free(at, a));
        }
        let state = if b.pending { BlockState::ActivePendingFree } else { BlockState::ActiveAllocated };
        let size = (b_end - a) as usize;
        out.blocks.push(BlockInfo {
            address: a,
            size,
            requested_size: b.requested.min(size),
            state,
            frames: Default::default(),
        });
        out.active_size += size;
        out.requested_size += b.requested.min(size);
        if !b.pending {
            out.allocated_size += size;
        }
        at = b_end;
    }
    if at < end {
        out.blocks.push(free(at, end));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(action: TraceAction, addr: u64, size: usize) -> TraceEntry {
        TraceEntry { action, addr, size, stream: StreamId(3), time_us: 0, frames: Default::default() }
    }

    /// A segment of the snapshot at the end, with these live blocks.
    fn segment(address: u64, size: usize, live: Vec<BlockInfo>, expandable: bool) -> SegmentInfo {
        let blocks =
            live.iter().map(|b| (b.address, Live { size: b.size, requested: b.requested_size, pending: false }));
        let seg = Seg { size, stream: StreamId(3), pool: PoolKind::Large, expandable, blocks: blocks.collect() };
        info(0, address, seg)
    }

    fn states(s: &SegmentInfo) -> Vec<(u64, usize, BlockState)> {
        s.blocks.iter().map(|b| (b.address - s.address, b.size, b.state)).collect()
    }

    #[test]
    fn walking_back_restores_blocks_and_segments() {
        use BlockState::*;
        use TraceAction::*;
        let base = 1u64 << 32;
        let events = vec![
            e(SegmentAlloc, base, 20 << 20),
            e(Alloc, base, 3 << 20),
            e(Alloc, base + (3 << 20), 1000),
            e(FreeRequested, base, 3 << 20),
            e(FreeCompleted, base, 3 << 20),
            e(SegmentAlloc, base << 1, 2 << 20),
            e(SegmentFree, base << 1, 2 << 20),
        ];
        // The snapshot at the end: the large segment, its 1000-byte block live (rounded to 1024).
        let live = BlockInfo {
            address: base + (3 << 20),
            size: 1024,
            requested_size: 1000,
            state: ActiveAllocated,
            frames: Default::default(),
        };
        let end_state = vec![segment(base, 20 << 20, vec![live], false)];
        let snapshot = crate::cuda::Snapshot { segments: end_state, device_traces: vec![events.clone()] };
        let at = |m| segments_at(&snapshot, 0, &events, m);
        assert_eq!(
            states(&at(7)[0]),
            [(0, 3 << 20, Inactive), (3 << 20, 1024, ActiveAllocated), ((3 << 20) + 1024, (17 << 20) - 1024, Inactive)]
        );
        assert_eq!(at(6).len(), 2, "the small segment is back before its segment_free");
        assert_eq!(at(6)[1].segment_type, PoolKind::Small);
        assert_eq!(states(&at(4)[0])[0], (0, 3 << 20, ActivePendingFree));
        assert_eq!(states(&at(3)[0])[0], (0, 3 << 20, ActiveAllocated));
        assert_eq!(at(2)[0].allocated_size, 3 << 20, "the 1000-byte block is not yet allocated");
        assert_eq!(states(&at(1)[0]), [(0, 20 << 20, Inactive)]);
        assert!(at(0).is_empty());
    }

    #[test]
    fn expandable_ranges_shrink_and_grow_back() {
        use TraceAction::*;
        let base = 1u64 << 40;
        let events = vec![e(SegmentMap, base + (4 << 20), 4 << 20), e(SegmentUnmap, base, 2 << 20)];
        let end_state = vec![segment(base + (2 << 20), 6 << 20, vec![], true)]; // [2, 8) MiB mapped
        let snapshot = crate::cuda::Snapshot { segments: end_state, device_traces: vec![events.clone()] };
        let ranges = |m| {
            segments_at(&snapshot, 0, &events, m).iter().map(|s| (s.address - base, s.total_size)).collect::<Vec<_>>()
        };
        assert_eq!(ranges(2), [(2 << 20, 6 << 20)]);
        assert_eq!(ranges(1), [(0, 8 << 20)], "the unmapped 2 MiB join the range");
        assert_eq!(ranges(0), [(0, 4 << 20)], "the pages mapped later are cut off");
    }
}
