//! Expandable segments: one large reserved virtual range per (stream, pool), backed by pages
//! mapped on demand, so a segment grows instead of a new one being made and freed neighbours
//! merge across what would have been segment borders.
//!
//! Beyond PyTorch (whose pages are 2 MiB in the small pool and 20 MiB in the large, and which
//! unmaps free pages only in `empty_cache` and before running out of memory):
//! - **Free pages move to where a segment must grow.** A growth that would take the device past
//!   the most memory it ever held first unmaps whole free pages from the holes of every
//!   expandable segment (any stream, either pool), largest runs first, one driver call per run,
//!   after one wait for the device (`State::alloc_expandable`): physical memory is reused
//!   wherever virtual room is, so peak reserved memory stays within the pages' rounding of the
//!   live bytes (PyTorch's traces: 1.004–1.012 × the live floor, PyTorch's own run 1.013–1.071).
//!   Below that mark a growth maps without waiting, as PyTorch's does: a program that repeats
//!   its steps moves no pages once it has reached its peak.
//! - **Large pages follow the growth.** A large-pool growth maps pages of a sixteenth of its
//!   size, 4 to 16 MiB: small enough that the holes freed blocks leave hold whole pages, and
//!   about sixteen driver calls per growth (uniform 2 MiB pages reach 1.003–1.006 × the floor
//!   but make growth 3–8 × more driver calls; uniform 20 MiB pages leave up to 1.053).

use super::block::{Block, BlockId, Blocks, PoolKind, NIL};
use super::cache::Cache;
use super::history::TraceAction;
use super::settings::SMALL_BUFFER;
use super::stats::{Count, Metric};
use super::RawMemory;
use crate::driver::{DevicePtr, StreamId};
use crate::error::{Error, Result};
use std::collections::BTreeMap;

/// A reserved virtual range and the pages mapped into it.
#[derive(Debug, Clone)]
struct ExpandableSegment {
    base: u64,
    len: usize,
    /// The smallest page: 2 MiB rounded up to the granularity. Every page is a multiple of it.
    unit: usize,
    /// Whether pages grow with the request (the large pool) or are all one unit (the small pool).
    large: bool,
    /// The mapped pages: address → bytes (each one driver mapping, unmapped whole).
    pages: BTreeMap<u64, usize>,
}

/// Free pages moved to where a segment had to grow (see the module docs).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PageMoves {
    /// Times a segment's growth moved pages (each waits for the device once).
    pub events: usize,
    /// Driver unmap calls that moved pages (one per contiguous run of free pages).
    pub unmaps: usize,
    /// Bytes of pages moved.
    pub bytes: usize,
}

/// Where a request will go in an expandable segment ([`ExpandableSegments::find_room`]).
#[derive(Debug)]
pub(crate) struct Room {
    /// The free and unmapped blocks, in address order, from the one the request starts in.
    chain: Vec<BlockId>,
    /// Bytes of pages to map for it.
    pub need: usize,
}

/// An allocator's expandable segments: the memory's virtual-memory granularity and the reserved
/// ranges, by the index their blocks name ([`Block::expandable`]).
#[derive(Debug, Default)]
pub(crate) struct ExpandableSegments {
    /// Virtual-memory granularity, `None` when the memory has none.
    granularity: Option<usize>,
    segments: Vec<Option<ExpandableSegment>>,
    moves: PageMoves,
}

/// The largest page of the large pool (the small pool's pages are 2 MiB, [`SMALL_BUFFER`]).
const LARGE_PAGE: usize = 16 << 20;
/// The smallest page of the large pool.
const SMALLEST_LARGE_PAGE: usize = 4 << 20;
/// A growth of the large pool maps about this many pages (fewer when they would be under
/// [`SMALLEST_LARGE_PAGE`]).
const PAGES_PER_GROWTH: usize = 16;

/// The large pool's page for a growth of `bytes`: a sixteenth of it, rounded down to a power of
/// two, from 4 to 16 MiB (and at least `unit`).
fn page_for(bytes: usize, unit: usize) -> usize {
    let share = bytes / PAGES_PER_GROWTH;
    let pow2 = if share == 0 { 0 } else { 1usize << (usize::BITS - 1 - share.leading_zeros()) };
    pow2.clamp(SMALLEST_LARGE_PAGE, LARGE_PAGE).max(unit)
}

fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to).saturating_mul(to)
}

impl ExpandableSegments {
    /// Segments of a memory whose granularity is `granularity` (`None` or 0: it has none).
    pub fn new(granularity: Option<usize>) -> ExpandableSegments {
        ExpandableSegments {
            granularity: granularity.filter(|&g| g > 0),
            segments: Vec::new(),
            moves: PageMoves::default(),
        }
    }

    /// The free pages moved so far.
    pub fn moves(&self) -> PageMoves {
        self.moves
    }

    /// Whether the memory supports them.
    #[inline]
    pub fn supported(&self) -> bool {
        self.granularity.is_some()
    }

    fn unit(&self) -> usize {
        round_up(SMALL_BUFFER, self.granularity.unwrap_or(1))
    }

    fn segment(&self, blocks: &Blocks, b: BlockId) -> &ExpandableSegment {
        match self.segments.get(blocks[b].expandable as usize) {
            Some(Some(s)) => s,
            // A block names its segment for as long as it exists.
            _ => unreachable!("expandable block without a segment"),
        }
    }

    fn segment_mut(&mut self, blocks: &Blocks, b: BlockId) -> &mut ExpandableSegment {
        match self.segments.get_mut(blocks[b].expandable as usize) {
            Some(Some(s)) => s,
            _ => unreachable!("expandable block without a segment"),
        }
    }

    /// Where a request of `size` bytes on `stream` will be served from mapped free memory plus
    /// newly mapped pages (a new segment if none of the stream's has the room), `None` when no
    /// room can be had.
    pub fn find_room(
        &mut self,
        mem: &dyn RawMemory,
        c: &mut Cache,
        pool: PoolKind,
        stream: StreamId,
        size: usize,
    ) -> Result<Option<Room>> {
        let Some(at) = self.find_expandable_block(mem, c, pool, stream, size)? else {
            return Ok(None);
        };
        let unit = self.segment(c.blocks(), at).unit;
        let (mut chain, mut room, mut need, mut b) = (Vec::new(), 0usize, 0usize, at);
        while room < size && b != NIL {
            let block = &c.blocks()[b];
            if !block.mapped {
                need += round_up((size - room).min(block.size), unit).min(block.size);
            }
            room += block.size;
            chain.push(b);
            b = block.next;
        }
        Ok(Some(Room { chain, need }))
    }

    /// Maps the pages `room` needs and returns its first block, grown to at least `size` bytes
    /// and taken out of its pool; `None` when memory (or the memory fraction) ran out.
    pub fn map_room(
        &mut self,
        mem: &dyn RawMemory,
        c: &mut Cache,
        room: &Room,
        size: usize,
    ) -> Result<Option<BlockId>> {
        let mut at = room.chain[0];
        if !c.blocks()[at].mapped {
            let n = size.min(c.blocks()[at].size);
            if !self.map_block(mem, c, at, n)? {
                return Ok(None);
            }
        }
        // Now `at` is free and mapped, followed by unmapped room: map until it is large enough.
        while c.blocks()[at].size < size {
            let next = c.blocks()[at].next;
            if next == NIL || c.blocks()[next].mapped || !c.blocks()[next].is_available() {
                // `find_room` checked the room.
                return Err(Error::Internal {
                    op: "malloc",
                    reason: "an expandable segment's free room ended before the request was mapped".into(),
                });
            }
            let n = (size - c.blocks()[at].size).min(c.blocks()[next].size);
            if !self.map_block(mem, c, next, n)? {
                return Ok(None);
            }
            at = next;
        }
        c.blocks_mut().pool_remove(at);
        Ok(Some(at))
    }

    /// The free blocks of every expandable segment (any stream, either pool) with whole pages
    /// that can move, but those next to `room` (its pieces would change under it): `(bytes of
    /// whole pages, block)`, largest first.
    pub fn movable(&self, c: &Cache, room: &Room) -> Vec<(usize, BlockId)> {
        let unit = self.unit();
        let near = |id: BlockId| room.chain.contains(&id);
        let mut runs: Vec<(usize, BlockId)> = [PoolKind::Large, PoolKind::Small]
            .into_iter()
            .flat_map(|pool| c.blocks().free_list(pool).ids())
            .filter(|&id| {
                let b = &c.blocks()[id];
                b.size >= unit && b.is_expandable() && !near(id) && !near(b.prev) && !near(b.next)
            })
            .map(|id| (self.whole_pages(c.blocks(), id).1, id))
            .filter(|&(bytes, _)| bytes > 0)
            .collect();
        runs.sort_unstable_by(|a, b| b.cmp(a));
        runs
    }

    /// Unmaps at least `want` bytes of the whole free pages in `runs` (from [`Self::movable`]),
    /// if there are that many, largest runs first, one driver call per run, so that `room` can
    /// be mapped without the device holding more. The caller waited for the device (the pages'
    /// last work may still have been queued).
    pub fn move_free_pages(
        &mut self,
        mem: &dyn RawMemory,
        c: &mut Cache,
        runs: &[(usize, BlockId)],
        want: usize,
    ) -> Result<()> {
        self.moves.events += 1;
        let mut moved = 0;
        for &(_, id) in runs {
            if moved >= want {
                break;
            }
            let n = self.unmap_block(mem, c, id, want - moved)?;
            moved += n;
            self.moves.unmaps += 1;
            self.moves.bytes += n;
        }
        Ok(())
    }

    /// The pages wholly inside block `b` (contiguous, as a free block's are): `(address,
    /// bytes)`.
    fn whole_pages(&self, blocks: &Blocks, b: BlockId) -> (u64, usize) {
        let (addr, end) = (blocks[b].addr, blocks[b].addr + blocks[b].size as u64);
        let pages = &self.segment(blocks, b).pages;
        let mut run = pages.range(addr..end).take_while(|(&a, &n)| a + n as u64 <= end);
        let Some((&first, &n)) = run.next() else {
            return (addr, 0);
        };
        (first, n + run.map(|(_, &n)| n).sum::<usize>())
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
        let blocks = c.blocks();
        let fits = |id: BlockId| {
            let prev = blocks[id].prev;
            let start = if prev != NIL && blocks[prev].is_available() { prev } else { id };
            let (mut room, mut b) = (0usize, start);
            while room < size && b != NIL && blocks[b].is_available() {
                room += blocks[b].size;
                b = blocks[b].next;
            }
            (room >= size).then_some(start)
        };
        if let Some(start) = blocks.unmapped_list(pool).at_least(stream, 0).find_map(|(_, id)| fits(id)) {
            return Ok(Some(start));
        }
        // PyTorch reserves 1⅛ × the device's memory per segment, so it never has to move.
        let (_, total) = mem.mem_info()?;
        if size > total {
            return Ok(None); // no mapping can ever hold it: out of memory
        }
        let unit = self.unit();
        let len = round_up(total.saturating_add(total / 8), unit).max(round_up(size, unit));
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
        let large = pool == PoolKind::Large;
        self.segments[index] = Some(ExpandableSegment { base: base.0, len, unit, large, pages: BTreeMap::new() });
        let mut b = Block::new(base.0, len, stream, pool);
        b.mapped = false;
        b.expandable = index as u32;
        let id = c.blocks_mut().insert(b);
        c.blocks_mut().pool_insert(id);
        Ok(Some(id))
    }

    /// Maps pages covering the first `size` bytes of the unmapped block `id` (one driver call per
    /// page, undone if one fails); the mapped part joins its free neighbours. Returns `false`
    /// when memory (or the memory fraction) ran out.
    ///
    /// Pages: 2 MiB units in the small pool; in the large pool, a sixteenth of the bytes mapped,
    /// rounded down to a power of two, from 4 to 16 MiB, the last one what is left: at most
    /// sixteen driver calls per growth under 256 MiB, and pages that a freed block of that growth
    /// holds whole.
    fn map_block(&mut self, mem: &dyn RawMemory, c: &mut Cache, id: BlockId, size: usize) -> Result<bool> {
        let seg = self.segment(c.blocks(), id);
        let (unit, large) = (seg.unit, seg.large);
        let b = &c.blocks()[id];
        let (addr, bsize, stream, pool, prev, next) = (b.addr, b.size, b.stream, b.pool, b.prev, b.next);
        let bytes = round_up(size, unit).min(bsize);
        if c.would_exceed_fraction(bytes) {
            return Ok(false);
        }
        let page = if large { page_for(bytes, unit) } else { unit };
        let mut mapped: Vec<(u64, usize)> = Vec::new();
        let mut done = 0;
        while done < bytes {
            let n = if bytes - done >= 2 * page { page } else { bytes - done };
            let at = addr + done as u64;
            if let Err(e) = mem.vmm_map(DevicePtr(at), n) {
                for &(a, n) in &mapped {
                    let _ = mem.vmm_unmap(DevicePtr(a), n);
                }
                return match e {
                    Error::OutOfMemory { .. } => Ok(false),
                    e => Err(e),
                };
            }
            mapped.push((at, n));
            done += n;
        }
        self.segment_mut(c.blocks(), id).pages.extend(mapped);
        c.blocks_mut().pool_remove(id);
        let joins_prev = prev != NIL && c.blocks()[prev].mapped;
        let joins_next = bytes == bsize && next != NIL && c.blocks()[next].mapped;
        c.blocks_mut()[id].mapped = true;
        if bytes < bsize {
            let mut rest = Block::new(addr + bytes as u64, bsize - bytes, stream, pool);
            rest.mapped = false;
            rest.expandable = c.blocks()[id].expandable;
            rest.prev = id;
            rest.next = next;
            let rest_id = c.blocks_mut().insert(rest);
            if next != NIL {
                c.blocks_mut()[next].prev = rest_id;
            }
            c.blocks_mut()[id].next = rest_id;
            c.blocks_mut()[id].size = bytes;
            c.blocks_mut().pool_insert(rest_id);
        }
        c.blocks_mut().merge_neighbours(id);
        c.blocks_mut()[id].free_stamp = c.blocks().clock();
        c.blocks_mut().pool_insert(id);
        c.reserve(pool, bytes);
        // Beyond PyTorch: the `segment` statistic counts an expandable segment's contiguous mapped
        // ranges, which is what snapshots list as its segments (PyTorch leaves the statistic
        // alone here, so its statistics and snapshots disagree with expandable segments).
        match (joins_prev, joins_next) {
            (false, false) => c.stats_mut().increase(Metric::Segment, pool, 1),
            (true, true) => c.stats_mut().decrease(Metric::Segment, pool, 1),
            _ => {}
        }
        c.stats_mut().count(Count::DeviceAlloc);
        c.history_mut().record(TraceAction::SegmentMap, addr, bytes, stream);
        Ok(true)
    }

    /// Unmaps whole pages inside the free mapped block `id`, at least `limit` bytes of them
    /// (all, if fewer), those at its end, in one driver call; returns the bytes unmapped.
    pub fn unmap_block(&mut self, mem: &dyn RawMemory, c: &mut Cache, id: BlockId, limit: usize) -> Result<usize> {
        let (first, whole) = self.whole_pages(c.blocks(), id);
        if whole == 0 {
            return Ok(0);
        }
        // The last pages of the run, enough for `limit`.
        let end = first + whole as u64;
        let seg = self.segment_mut(c.blocks(), id);
        let (mut start, mut len) = (end, 0usize);
        for (&a, &n) in seg.pages.range(first..end).rev() {
            if len >= limit {
                break;
            }
            start = a;
            len += n;
        }
        mem.vmm_unmap(DevicePtr(start), len)?;
        let gone: Vec<u64> = seg.pages.range(start..end).map(|(&a, _)| a).collect();
        for a in gone {
            seg.pages.remove(&a);
        }
        let b = &c.blocks()[id];
        let (addr, size, stream, pool, prev, next, stamp) =
            (b.addr, b.size, b.stream, b.pool, b.prev, b.next, b.free_stamp);
        c.blocks_mut().pool_remove(id);
        let before = (start - addr) as usize;
        let after = size - before - len;
        let left_mapped = before > 0 || (prev != NIL && c.blocks()[prev].mapped);
        let right_mapped = after > 0 || (next != NIL && c.blocks()[next].mapped);
        let expandable = c.blocks()[id].expandable;
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
            piece(c.blocks_mut(), addr, before, prev, id);
        }
        if after > 0 {
            piece(c.blocks_mut(), start + len as u64, after, id, next);
        }
        let b = &mut c.blocks_mut()[id];
        b.addr = start;
        b.size = len;
        b.mapped = false;
        c.blocks_mut().merge_neighbours(id);
        c.blocks_mut().pool_insert(id);
        c.stats_mut().decrease(Metric::ReservedBytes, pool, len);
        match (left_mapped, right_mapped) {
            (false, false) => c.stats_mut().decrease(Metric::Segment, pool, 1),
            (true, true) => c.stats_mut().increase(Metric::Segment, pool, 1),
            _ => {}
        }
        c.stats_mut().count(Count::DeviceFree);
        c.history_mut().record(TraceAction::SegmentUnmap, start, len, stream);
        Ok(len)
    }

    /// Releases the reservations of `pool`'s expandable segments that are wholly unmapped.
    pub fn release_unmapped(&mut self, mem: &dyn RawMemory, c: &mut Cache, pool: PoolKind) -> Result<()> {
        let empty: Vec<BlockId> = c
            .blocks()
            .unmapped_list(pool)
            .ids()
            .filter(|&id| !c.blocks()[id].is_split() && c.blocks()[id].is_available())
            .collect();
        for id in empty {
            let index = c.blocks()[id].expandable as usize;
            let seg = self.segment(c.blocks(), id);
            mem.vmm_release(DevicePtr(seg.base), seg.len)?;
            c.blocks_mut().pool_remove(id);
            c.blocks_mut().remove(id);
            self.segments[index] = None;
        }
        Ok(())
    }
}
