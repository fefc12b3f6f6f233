//! Expandable segments: one large reserved virtual range per (stream, pool), backed by pages
//! mapped on demand, so a segment grows instead of a new one being made and freed neighbours
//! merge across what would have been segment borders.

use super::block::{Block, BlockId, Blocks, PoolKind, NIL};
use super::cache::Cache;
use super::history::TraceAction;
use super::settings::{LARGE_BUFFER, SMALL_BUFFER};
use super::stats::{Count, Metric};
use super::RawMemory;
use crate::driver::{DevicePtr, StreamId};
use crate::error::{Error, Result};

/// A reserved virtual range.
#[derive(Debug, Clone)]
struct ExpandableSegment {
    base: u64,
    len: usize,
    /// Mapping unit: 2 MiB (small pool) or 20 MiB (large pool), rounded up to the granularity.
    page: usize,
}

/// An allocator's expandable segments: the memory's virtual-memory granularity and the reserved
/// ranges, by the index their blocks name ([`Block::expandable`]).
#[derive(Debug, Default)]
pub(crate) struct ExpandableSegments {
    /// Virtual-memory granularity, `None` when the memory has none.
    granularity: Option<usize>,
    segments: Vec<Option<ExpandableSegment>>,
}

fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to).saturating_mul(to)
}

impl ExpandableSegments {
    /// Segments of a memory whose granularity is `granularity` (`None` or 0: it has none).
    pub fn new(granularity: Option<usize>) -> ExpandableSegments {
        ExpandableSegments { granularity: granularity.filter(|&g| g > 0), segments: Vec::new() }
    }

    /// Whether the memory supports them.
    #[inline]
    pub fn supported(&self) -> bool {
        self.granularity.is_some()
    }

    fn page_size(&self, pool: PoolKind) -> usize {
        let base = if pool == PoolKind::Small { SMALL_BUFFER } else { LARGE_BUFFER };
        round_up(base, self.granularity.unwrap_or(1))
    }

    fn segment(&self, blocks: &Blocks, b: BlockId) -> &ExpandableSegment {
        match self.segments.get(blocks[b].expandable as usize) {
            Some(Some(s)) => s,
            // A block names its segment for as long as it exists.
            _ => unreachable!("expandable block without a segment"),
        }
    }

    /// Serves a request of `size` bytes from mapped free memory plus newly mapped pages.
    pub fn try_allocate(
        &mut self,
        mem: &dyn RawMemory,
        c: &mut Cache,
        pool: PoolKind,
        stream: StreamId,
        size: usize,
    ) -> Result<Option<BlockId>> {
        let Some(mut at) = self.find_expandable_block(mem, c, pool, stream, size)? else {
            return Ok(None);
        };
        if !c.blocks[at].mapped {
            let n = size.min(c.blocks[at].size);
            if !self.map_block(mem, c, at, n)? {
                return Ok(None);
            }
        }
        // Now `at` is free and mapped, followed by unmapped room: map until it is large enough.
        while c.blocks[at].size < size {
            let next = c.blocks[at].next;
            if next == NIL || c.blocks[next].mapped || !c.blocks[next].is_available() {
                // `find_expandable_block` checked the room.
                return Err(Error::Internal {
                    op: "malloc",
                    reason: "an expandable segment's free room ended before the request was mapped".into(),
                });
            }
            let n = (size - c.blocks[at].size).min(c.blocks[next].size);
            if !self.map_block(mem, c, next, n)? {
                return Ok(None);
            }
            at = next;
        }
        c.blocks.pool_remove(at);
        Ok(Some(at))
    }

    /// The start of enough contiguous free or unmapped room on `stream`'s expandable segments
    /// (trying the smallest unmapped ranges first), or a new segment.
    fn find_expandable_block(
        &mut self,
        mem: &dyn RawMemory,
        c: &mut Cache,
        pool: PoolKind,
        stream: StreamId,
        size: usize,
    ) -> Result<Option<BlockId>> {
        let candidates: Vec<BlockId> = c.blocks.unmapped_list(pool).at_least(stream, 0).map(|(_, id)| id).collect();
        for id in candidates {
            let prev = c.blocks[id].prev;
            let start = if prev != NIL && c.blocks[prev].is_available() { prev } else { id };
            let (mut room, mut b) = (0usize, start);
            while room < size && b != NIL && c.blocks[b].is_available() {
                room += c.blocks[b].size;
                b = c.blocks[b].next;
            }
            if room >= size {
                return Ok(Some(start));
            }
        }
        // PyTorch reserves 1⅛ × the device's memory per segment, so it never has to move.
        let (_, total) = mem.mem_info()?;
        if size > total {
            return Ok(None); // no mapping can ever hold it: out of memory
        }
        let page = self.page_size(pool);
        let len = round_up(total.saturating_add(total / 8), page).max(round_up(size, page));
        let base = match mem.vmm_reserve(len) {
            Ok(p) => p,
            Err(Error::OutOfMemory { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let index = match self.segments.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.segments.push(None);
                self.segments.len() - 1
            }
        };
        self.segments[index] = Some(ExpandableSegment { base: base.0, len, page });
        let mut b = Block::new(base.0, len, stream, pool);
        b.mapped = false;
        b.expandable = index as u32;
        let id = c.blocks.insert(b);
        c.blocks.pool_insert(id);
        Ok(Some(id))
    }

    /// Maps the pages covering the first `size` bytes of the unmapped block `id` (one driver
    /// call per page, undone if one fails); the mapped part joins its free neighbours. Returns
    /// `false` when memory (or the memory fraction) ran out.
    fn map_block(&self, mem: &dyn RawMemory, c: &mut Cache, id: BlockId, size: usize) -> Result<bool> {
        let page = self.segment(&c.blocks, id).page;
        let b = &c.blocks[id];
        let (addr, bsize, stream, pool, prev, next) = (b.addr, b.size, b.stream, b.pool, b.prev, b.next);
        let bytes = round_up(size, page).min(bsize);
        if c.would_exceed_fraction(bytes) {
            return Ok(false);
        }
        let mut done = 0;
        while done < bytes {
            if let Err(e) = mem.vmm_map(DevicePtr(addr + done as u64), page) {
                let mut undo = 0;
                while undo < done {
                    let _ = mem.vmm_unmap(DevicePtr(addr + undo as u64), page);
                    undo += page;
                }
                return match e {
                    Error::OutOfMemory { .. } => Ok(false),
                    e => Err(e),
                };
            }
            done += page;
        }
        c.blocks.pool_remove(id);
        let joins_prev = prev != NIL && c.blocks[prev].mapped;
        let joins_next = bytes == bsize && next != NIL && c.blocks[next].mapped;
        c.blocks[id].mapped = true;
        if bytes < bsize {
            let mut rest = Block::new(addr + bytes as u64, bsize - bytes, stream, pool);
            rest.mapped = false;
            rest.expandable = c.blocks[id].expandable;
            rest.prev = id;
            rest.next = next;
            let rest_id = c.blocks.insert(rest);
            if next != NIL {
                c.blocks[next].prev = rest_id;
            }
            c.blocks[id].next = rest_id;
            c.blocks[id].size = bytes;
            c.blocks.pool_insert(rest_id);
        }
        c.blocks.try_merge(id, c.blocks[id].prev);
        c.blocks.try_merge(id, c.blocks[id].next);
        c.blocks[id].free_stamp = c.blocks.clock();
        c.blocks.pool_insert(id);
        c.stats.increase(Metric::ReservedBytes, pool, bytes);
        // Beyond PyTorch: the `segment` statistic counts an expandable segment's contiguous mapped
        // ranges, which is what snapshots list as its segments (PyTorch leaves the statistic
        // alone here, so its statistics and snapshots disagree with expandable segments).
        match (joins_prev, joins_next) {
            (false, false) => c.stats.increase(Metric::Segment, pool, 1),
            (true, true) => c.stats.decrease(Metric::Segment, pool, 1),
            _ => {}
        }
        c.stats.count(Count::DeviceAlloc);
        c.history.record(TraceAction::SegmentMap, addr, bytes, stream);
        Ok(true)
    }

    /// Unmaps the whole pages inside the free mapped block `id`.
    pub fn unmap_block(&self, mem: &dyn RawMemory, c: &mut Cache, id: BlockId) -> Result<()> {
        let seg = self.segment(&c.blocks, id);
        let (base, page) = (seg.base, seg.page);
        let b = &c.blocks[id];
        let (addr, size, stream, pool, prev, next, stamp) =
            (b.addr, b.size, b.stream, b.pool, b.prev, b.next, b.free_stamp);
        let offset = (addr - base) as usize;
        let begin = round_up(offset, page);
        let end = (offset + size) / page * page;
        if begin >= end {
            return Ok(());
        }
        let start = base + begin as u64;
        let (mut len, mut failure) = (0, None);
        while len < end - begin {
            if let Err(e) = mem.vmm_unmap(DevicePtr(start + len as u64), page) {
                failure = Some(e);
                break;
            }
            len += page;
        }
        if len > 0 {
            c.blocks.pool_remove(id);
            let before = (start - addr) as usize;
            let after = size - before - len;
            let left_mapped = before > 0 || (prev != NIL && c.blocks[prev].mapped);
            let right_mapped = after > 0 || (next != NIL && c.blocks[next].mapped);
            let expandable = c.blocks[id].expandable;
            let piece = |blocks: &mut Blocks, at: u64, n: usize, p: BlockId, q: BlockId| {
                let mut f = Block::new(at, n, stream, pool);
                f.expandable = expandable;
                f.prev = p;
                f.next = q;
                f.free_stamp = stamp;
                let fid = blocks.insert(f);
                if p != NIL {
                    blocks[p].next = fid;
                }
                if q != NIL {
                    blocks[q].prev = fid;
                }
                blocks.pool_insert(fid);
            };
            if before > 0 {
                piece(&mut c.blocks, addr, before, prev, id);
            }
            if after > 0 {
                piece(&mut c.blocks, start + len as u64, after, id, next);
            }
            let b = &mut c.blocks[id];
            b.addr = start;
            b.size = len;
            b.mapped = false;
            c.blocks.try_merge(id, c.blocks[id].prev);
            c.blocks.try_merge(id, c.blocks[id].next);
            c.blocks.pool_insert(id);
            c.stats.decrease(Metric::ReservedBytes, pool, len);
            match (left_mapped, right_mapped) {
                (false, false) => c.stats.decrease(Metric::Segment, pool, 1),
                (true, true) => c.stats.increase(Metric::Segment, pool, 1),
                _ => {}
            }
            c.stats.count(Count::DeviceFree);
            c.history.record(TraceAction::SegmentUnmap, start, len, stream);
        }
        failure.map_or(Ok(()), Err)
    }

    /// Releases the reservations of `pool`'s expandable segments that are wholly unmapped.
    pub fn release_unmapped(&mut self, mem: &dyn RawMemory, c: &mut Cache, pool: PoolKind) -> Result<()> {
        let empty: Vec<BlockId> = c
            .blocks
            .unmapped_list(pool)
            .ids()
            .filter(|&id| !c.blocks[id].is_split() && c.blocks[id].is_available())
            .collect();
        for id in empty {
            let index = c.blocks[id].expandable as usize;
            let seg = self.segment(&c.blocks, id);
            mem.vmm_release(DevicePtr(seg.base), seg.len)?;
            c.blocks.pool_remove(id);
            c.blocks.remove(id);
            self.segments[index] = None;
        }
        Ok(())
    }
}
