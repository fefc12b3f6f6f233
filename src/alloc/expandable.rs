//! Expandable segments: one large reserved virtual range per (stream, pool), backed by pages
//! mapped on demand, so a segment grows instead of a new one being made and freed neighbours
//! merge across what would have been segment borders.

use super::block::{Block, BlockId, PoolKind, NIL};
use super::history::TraceAction;
use super::settings::{LARGE_BUFFER, SMALL_BUFFER};
use super::state::State;
use super::stats::Metric;
use super::RawMemory;
use crate::driver::{DevicePtr, StreamId};
use crate::error::{Error, Result};

/// A reserved virtual range.
#[derive(Debug, Clone)]
pub(crate) struct ExpandableSegment {
    pub base: u64,
    pub len: usize,
    /// Mapping unit: 2 MiB (small pool) or 20 MiB (large pool), rounded up to the granularity.
    pub page: usize,
}

fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to).saturating_mul(to)
}

impl State {
    fn page_size(&self, pool: PoolKind) -> usize {
        let base = if pool == PoolKind::Small { SMALL_BUFFER } else { LARGE_BUFFER };
        round_up(base, self.granularity.unwrap_or(1))
    }

    fn segment(&self, b: BlockId) -> &ExpandableSegment {
        match self.expandable.get(self.blocks[b].expandable as usize) {
            Some(Some(s)) => s,
            // A block names its segment for as long as it exists.
            _ => unreachable!("expandable block without a segment"),
        }
    }

    /// Serves a request of `size` bytes from mapped free memory plus newly mapped pages.
    pub(crate) fn try_allocate_expandable(
        &mut self,
        mem: &dyn RawMemory,
        pool: PoolKind,
        stream: StreamId,
        size: usize,
    ) -> Result<Option<BlockId>> {
        let Some(mut c) = self.find_expandable_block(mem, pool, stream, size)? else {
            return Ok(None);
        };
        if !self.blocks[c].mapped {
            let n = size.min(self.blocks[c].size);
            if !self.map_block(mem, c, n)? {
                return Ok(None);
            }
        }
        // Now `c` is free and mapped, followed by unmapped room: map until it is large enough.
        while self.blocks[c].size < size {
            let next = self.blocks[c].next;
            if next == NIL || self.blocks[next].mapped || !self.blocks[next].is_available() {
                return Ok(None); // cannot happen: find_expandable_block checked the room
            }
            let n = (size - self.blocks[c].size).min(self.blocks[next].size);
            if !self.map_block(mem, next, n)? {
                return Ok(None);
            }
            c = next;
        }
        self.pool_remove(c);
        Ok(Some(c))
    }

    /// The start of enough contiguous free or unmapped room on `stream`'s expandable segments
    /// (trying the smallest unmapped ranges first), or a new segment.
    fn find_expandable_block(
        &mut self,
        mem: &dyn RawMemory,
        pool: PoolKind,
        stream: StreamId,
        size: usize,
    ) -> Result<Option<BlockId>> {
        let candidates: Vec<BlockId> =
            self.pools[pool.index()].unmapped.at_least(stream, 0).map(|(_, id)| id).collect();
        for id in candidates {
            let prev = self.blocks[id].prev;
            let start = if prev != NIL && self.blocks[prev].is_available() { prev } else { id };
            let (mut room, mut b) = (0usize, start);
            while room < size && b != NIL && self.blocks[b].is_available() {
                room += self.blocks[b].size;
                b = self.blocks[b].next;
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
        let index = match self.expandable.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.expandable.push(None);
                self.expandable.len() - 1
            }
        };
        self.expandable[index] = Some(ExpandableSegment { base: base.0, len, page });
        let mut b = Block::new(base.0, len, stream, pool);
        b.mapped = false;
        b.expandable = index as u32;
        let id = self.blocks.insert(b);
        self.pool_insert(id);
        Ok(Some(id))
    }

    /// Maps the pages covering the first `size` bytes of the unmapped block `id` (one driver
    /// call per page, undone if one fails); the mapped part joins its free neighbours. Returns
    /// `false` when memory (or the memory fraction) ran out.
    fn map_block(&mut self, mem: &dyn RawMemory, id: BlockId, size: usize) -> Result<bool> {
        let page = self.segment(id).page;
        let b = &self.blocks[id];
        let (addr, bsize, stream, pool, prev, next) = (b.addr, b.size, b.stream, b.pool, b.prev, b.next);
        let bytes = round_up(size, page).min(bsize);
        if self.would_exceed_fraction(bytes) {
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
        self.pool_remove(id);
        let joins_prev = prev != NIL && self.blocks[prev].mapped;
        let joins_next = bytes == bsize && next != NIL && self.blocks[next].mapped;
        self.blocks[id].mapped = true;
        if bytes < bsize {
            let mut rest = Block::new(addr + bytes as u64, bsize - bytes, stream, pool);
            rest.mapped = false;
            rest.expandable = self.blocks[id].expandable;
            rest.prev = id;
            rest.next = next;
            let rest_id = self.blocks.insert(rest);
            if next != NIL {
                self.blocks[next].prev = rest_id;
            }
            self.blocks[id].next = rest_id;
            self.blocks[id].size = bytes;
            self.pool_insert(rest_id);
        }
        self.try_merge(id, self.blocks[id].prev);
        self.try_merge(id, self.blocks[id].next);
        self.blocks[id].free_stamp = self.clock;
        self.pool_insert(id);
        self.reserved += bytes;
        self.stats.increase(Metric::ReservedBytes, pool, bytes);
        // Beyond PyTorch: the `segment` statistic counts an expandable segment's contiguous mapped
        // ranges, which is what snapshots list as its segments (PyTorch leaves the statistic
        // alone here, so its statistics and snapshots disagree with expandable segments).
        match (joins_prev, joins_next) {
            (false, false) => self.stats.increase(Metric::Segment, pool, 1),
            (true, true) => self.stats.decrease(Metric::Segment, pool, 1),
            _ => {}
        }
        self.stats.num_device_alloc += 1;
        self.history.record(TraceAction::SegmentMap, addr, bytes, stream);
        Ok(true)
    }

    /// Unmaps the whole pages inside the free mapped block `id`.
    pub(crate) fn unmap_block(&mut self, mem: &dyn RawMemory, id: BlockId) -> Result<()> {
        let seg = self.segment(id);
        let (base, page) = (seg.base, seg.page);
        let b = &self.blocks[id];
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
            self.pool_remove(id);
            let before = (start - addr) as usize;
            let after = size - before - len;
            let left_mapped = before > 0 || (prev != NIL && self.blocks[prev].mapped);
            let right_mapped = after > 0 || (next != NIL && self.blocks[next].mapped);
            let expandable = self.blocks[id].expandable;
            let piece = |s: &mut State, at: u64, n: usize, p: BlockId, q: BlockId| {
                let mut f = Block::new(at, n, stream, pool);
                f.expandable = expandable;
                f.prev = p;
                f.next = q;
                f.free_stamp = stamp;
                let fid = s.blocks.insert(f);
                if p != NIL {
                    s.blocks[p].next = fid;
                }
                if q != NIL {
                    s.blocks[q].prev = fid;
                }
                s.pool_insert(fid);
            };
            if before > 0 {
                piece(self, addr, before, prev, id);
            }
            if after > 0 {
                piece(self, start + len as u64, after, id, next);
            }
            let b = &mut self.blocks[id];
            b.addr = start;
            b.size = len;
            b.mapped = false;
            self.try_merge(id, self.blocks[id].prev);
            self.try_merge(id, self.blocks[id].next);
            self.pool_insert(id);
            self.reserved -= len;
            self.stats.decrease(Metric::ReservedBytes, pool, len);
            match (left_mapped, right_mapped) {
                (false, false) => self.stats.decrease(Metric::Segment, pool, 1),
                (true, true) => self.stats.increase(Metric::Segment, pool, 1),
                _ => {}
            }
            self.stats.num_device_free += 1;
            self.history.record(TraceAction::SegmentUnmap, start, len, stream);
        }
        failure.map_or(Ok(()), Err)
    }

    /// Releases the reservations of `pool`'s expandable segments that are wholly unmapped.
    pub(crate) fn release_unmapped_segments(&mut self, mem: &dyn RawMemory, pool: PoolKind) -> Result<()> {
        let empty: Vec<BlockId> = self.pools[pool.index()]
            .unmapped
            .ids()
            .filter(|&id| !self.blocks[id].is_split() && self.blocks[id].is_available())
            .collect();
        for id in empty {
            let index = self.blocks[id].expandable as usize;
            let seg = self.segment(id);
            mem.vmm_release(DevicePtr(seg.base), seg.len)?;
            self.pool_remove(id);
            self.blocks.remove(id);
            self.expandable[index] = None;
        }
        Ok(())
    }
}
