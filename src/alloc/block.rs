//! Blocks (pieces of segments) in a slab with index links, and the free lists of the two pools.

use super::mem_pools::{Slot, DEFAULT_SLOT};
use super::sorted::{Pos, SortedMap};
use crate::driver::StreamId;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Index of a block in the slab.
pub(crate) type BlockId = u32;
/// "No block" (end of a segment's chain).
pub(crate) const NIL: BlockId = u32::MAX;

/// The pool a block belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PoolKind {
    /// Blocks of at most 1 MiB, carved from 2 MiB segments.
    Small,
    /// Larger blocks, in 20 MiB segments or segments of their own.
    Large,
}

impl PoolKind {
    /// The pool of a rounded request size.
    pub(crate) fn of(size: usize) -> PoolKind {
        if size <= super::settings::SMALL_SIZE {
            PoolKind::Small
        } else {
            PoolKind::Large
        }
    }

    /// Index in `[small, large]` arrays.
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// PyTorch's `segment_type` string.
    pub fn name(self) -> &'static str {
        match self {
            PoolKind::Small => "small",
            PoolKind::Large => "large",
        }
    }
}

/// A piece of a segment: allocated, pending free (waiting for recorded streams), free in a
/// pool, or (in an expandable segment) not backed by memory.
#[derive(Debug, Clone)]
pub(crate) struct Block {
    pub addr: u64,
    pub size: usize,
    /// The size the program asked for (while active).
    pub requested: usize,
    pub stream: StreamId,
    /// Neighbours in the segment (address order), or [`NIL`].
    pub prev: BlockId,
    pub next: BlockId,
    /// Index of the expandable segment, or [`NIL`] for an ordinary segment.
    pub expandable: u32,
    pub pool: PoolKind,
    /// The pool whose free lists hold the block when free: [`DEFAULT_SLOT`] or a private pool's.
    pub slot: Slot,
    pub allocated: bool,
    /// Backed by memory (always, outside expandable segments).
    pub mapped: bool,
    /// Recorded events not yet completed.
    pub event_count: u32,
    /// Other streams that used the block (`record_stream`).
    pub stream_uses: Vec<StreamId>,
    /// Value of the allocator's clock when the block last became free (garbage collection age).
    pub free_stamp: u64,
}

impl Block {
    pub(crate) fn new(addr: u64, size: usize, stream: StreamId, pool: PoolKind) -> Block {
        Block {
            addr,
            size,
            requested: 0,
            stream,
            prev: NIL,
            next: NIL,
            expandable: NIL,
            pool,
            slot: DEFAULT_SLOT,
            allocated: false,
            mapped: true,
            event_count: 0,
            stream_uses: Vec::new(),
            free_stamp: 0,
        }
    }

    /// Part of a segment that also holds other blocks.
    pub(crate) fn is_split(&self) -> bool {
        self.prev != NIL || self.next != NIL
    }

    pub(crate) fn is_expandable(&self) -> bool {
        self.expandable != NIL
    }

    /// Free and waiting for nothing: may be merged with, or handed out.
    pub(crate) fn is_available(&self) -> bool {
        !self.allocated && self.event_count == 0 && self.stream_uses.is_empty()
    }
}

/// All blocks, addressed by index; freed slots are reused.
#[derive(Debug, Default)]
struct Slab {
    blocks: Vec<Block>,
    vacant: Vec<BlockId>,
}

impl Slab {
    pub fn insert(&mut self, block: Block) -> BlockId {
        if let Some(id) = self.vacant.pop() {
            self.blocks[id as usize] = block;
            id
        } else {
            self.blocks.push(block);
            (self.blocks.len() - 1) as BlockId
        }
    }

    pub fn remove(&mut self, id: BlockId) {
        let b = &mut self.blocks[id as usize];
        b.size = 0;
        b.stream_uses = Vec::new();
        self.vacant.push(id);
    }

    /// Live blocks (slots that are not vacant have a non-zero size).
    pub fn iter(&self) -> impl Iterator<Item = (BlockId, &Block)> {
        self.blocks.iter().enumerate().filter(|(_, b)| b.size != 0).map(|(i, b)| (i as BlockId, b))
    }
}

impl std::ops::Index<BlockId> for Slab {
    type Output = Block;
    #[inline]
    fn index(&self, id: BlockId) -> &Block {
        &self.blocks[id as usize]
    }
}

impl std::ops::IndexMut<BlockId> for Slab {
    #[inline]
    fn index_mut(&mut self, id: BlockId) -> &mut Block {
        &mut self.blocks[id as usize]
    }
}

/// `(size, address)` packed so that integer order is (size, address) order.
fn key(size: usize, addr: u64) -> u128 {
    ((size as u128) << 64) | addr as u128
}

/// A pool's free blocks of one kind, per stream, in (size, address) order: best fit for `size`
/// on a stream is the first entry at or after `(size, 0)` in that stream's map.
#[derive(Debug, Default)]
pub(crate) struct FreeList {
    streams: Vec<(StreamId, SortedMap)>,
}

impl FreeList {
    fn stream(&self, stream: StreamId) -> Option<&SortedMap> {
        self.streams.iter().find(|(s, _)| *s == stream).map(|(_, m)| m)
    }

    pub fn insert(&mut self, b: &Block, id: BlockId) {
        let i = self.streams.iter().position(|(s, _)| *s == b.stream).unwrap_or_else(|| {
            self.streams.push((b.stream, SortedMap::default()));
            self.streams.len() - 1
        });
        self.streams[i].1.insert(key(b.size, b.addr), id);
    }

    pub fn remove(&mut self, b: &Block) {
        if let Some((_, m)) = self.streams.iter_mut().find(|(s, _)| *s == b.stream) {
            m.remove(key(b.size, b.addr));
        }
    }

    /// The best fit: `stream`'s smallest block of at least `size` bytes, lowest address first.
    pub fn best_fit(&self, stream: StreamId, size: usize) -> Option<Found> {
        let s = self.streams.iter().position(|(st, _)| *st == stream)?;
        let (pos, (k, id)) = self.streams[s].1.first_at_least(key(size, 0))?;
        Some(Found { stream: s, pos, size: (k >> 64) as usize, id })
    }

    /// Takes out a block found by [`FreeList::best_fit`] (nothing changed since).
    pub fn take(&mut self, found: Found) {
        self.streams[found.stream].1.remove_at(found.pos);
    }

    /// `stream`'s blocks of at least `size` bytes, smallest first: `(size, id)`.
    pub fn at_least(&self, stream: StreamId, size: usize) -> impl Iterator<Item = (usize, BlockId)> + '_ {
        self.stream(stream).into_iter().flat_map(move |m| m.from(key(size, 0))).map(|(k, id)| ((k >> 64) as usize, id))
    }

    /// `stream`'s blocks of less than `size` bytes, largest first: `(size, id)`.
    pub fn below(&self, stream: StreamId, size: usize) -> impl Iterator<Item = (usize, BlockId)> + '_ {
        self.stream(stream).into_iter().flat_map(move |m| m.below(key(size, 0))).map(|(k, id)| ((k >> 64) as usize, id))
    }

    /// Every block, all streams.
    pub fn ids(&self) -> impl Iterator<Item = BlockId> + '_ {
        self.streams.iter().flat_map(|(_, m)| m.values())
    }
}

/// A block found in a [`FreeList`], and where.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Found {
    stream: usize,
    pos: Pos,
    pub size: usize,
    pub id: BlockId,
}

/// A pool's free blocks.
#[derive(Debug, Default)]
struct BlockPool {
    /// Free, mapped blocks.
    free: FreeList,
    /// Unmapped pieces of expandable segments.
    unmapped: FreeList,
}

/// A multiplicative hasher for addresses (512-aligned `u64`s): cheap, and it spreads the high
/// bits down so the table's low index bits differ between neighbouring blocks.
#[derive(Default, Clone, Copy)]
pub(crate) struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, x: u64) {
        let h = (self.0 ^ x).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = h ^ (h >> 29);
    }
}

/// Live (allocated) blocks by address.
type LiveMap = HashMap<u64, BlockId, BuildHasherDefault<AddrHasher>>;

/// The block graph: every block (linked to its segment neighbours), the two pools' free lists
/// (the default pools' and each private pool's, by slot) and the live blocks by address, and the
/// clock that stamps blocks as they become free.
///
/// A free block is in the free list of its pool (mapped) or its unmapped list, by its current
/// size and address: change a block's size, address or stream only while it is out of them
/// ([`Blocks::pool_remove`] first, [`Blocks::pool_insert`] after).
#[derive(Debug, Default)]
pub(crate) struct Blocks {
    slab: Slab,
    /// The default pools, `[small, large]`.
    pools: [BlockPool; 2],
    /// Private pools by slot (slot `i + 1` is `private[i]`), `[small, large]`.
    private: Vec<[BlockPool; 2]>,
    live: LiveMap,
    /// Cache lookups so far: the garbage collector's clock.
    clock: u64,
}

impl Blocks {
    /// Makes sure the free lists of `slot` exist.
    pub fn ensure_slot(&mut self, slot: Slot) {
        while self.private.len() < slot as usize {
            self.private.push(Default::default());
        }
    }

    /// The free, mapped blocks of `pool` in the private pool at `slot`.
    pub fn private_list(&self, slot: Slot, pool: PoolKind) -> &FreeList {
        &self.private[slot as usize - 1][pool.index()].free
    }

    /// Takes out of a private pool's free list a block found by [`FreeList::best_fit`].
    pub fn take_found_in(&mut self, slot: Slot, pool: PoolKind, found: Found) {
        self.private[slot as usize - 1][pool.index()].free.take(found);
    }

    /// A new block (in no list).
    #[inline]
    pub fn insert(&mut self, block: Block) -> BlockId {
        self.slab.insert(block)
    }

    /// Drops a block that is in no list.
    #[inline]
    pub fn remove(&mut self, id: BlockId) {
        self.slab.remove(id)
    }

    /// Every block.
    pub fn iter(&self) -> impl Iterator<Item = (BlockId, &Block)> {
        self.slab.iter()
    }

    /// Puts the free block `id` in its pool's free (mapped) or unmapped list.
    #[inline]
    pub fn pool_insert(&mut self, id: BlockId) {
        let b = &self.slab[id];
        let pools = if b.slot == DEFAULT_SLOT { &mut self.pools } else { &mut self.private[b.slot as usize - 1] };
        let pool = &mut pools[b.pool.index()];
        if b.mapped {
            pool.free.insert(b, id);
        } else {
            pool.unmapped.insert(b, id);
        }
    }

    /// Takes the free block `id` out of its list.
    #[inline]
    pub fn pool_remove(&mut self, id: BlockId) {
        let b = &self.slab[id];
        let pools = if b.slot == DEFAULT_SLOT { &mut self.pools } else { &mut self.private[b.slot as usize - 1] };
        let pool = &mut pools[b.pool.index()];
        if b.mapped {
            pool.free.remove(b);
        } else {
            pool.unmapped.remove(b);
        }
    }

    /// `pool`'s free, mapped blocks (of the default pools).
    #[inline]
    pub fn free_list(&self, pool: PoolKind) -> &FreeList {
        &self.pools[pool.index()].free
    }

    /// `pool`'s unmapped pieces of expandable segments (only the default pools have them).
    pub fn unmapped_list(&self, pool: PoolKind) -> &FreeList {
        &self.pools[pool.index()].unmapped
    }

    /// Takes out of `pool`'s free list a block found by [`FreeList::best_fit`] (nothing changed
    /// since).
    #[inline]
    pub fn take_found(&mut self, pool: PoolKind, found: Found) {
        self.pools[pool.index()].free.take(found);
    }

    /// Merges the free block `id` (out of the lists) with its free neighbours, the previous one
    /// first.
    pub fn merge_neighbours(&mut self, id: BlockId) {
        let prev = self[id].prev;
        self.try_merge(id, prev);
        let next = self[id].next;
        self.try_merge(id, next);
    }

    /// Merges the free block `src` into its neighbour `dst` (out of the lists); returns the
    /// bytes gained (0: none).
    pub fn try_merge(&mut self, dst: BlockId, src: BlockId) -> usize {
        if src == NIL {
            return 0;
        }
        let s = &self.slab[src];
        if !s.is_available() || s.mapped != self.slab[dst].mapped {
            return 0;
        }
        let (s_addr, s_size, s_prev, s_next) = (s.addr, s.size, s.prev, s.next);
        self.pool_remove(src);
        let d = &mut self.slab[dst];
        if d.prev == src {
            d.addr = s_addr;
            d.prev = s_prev;
            d.size += s_size;
            if s_prev != NIL {
                self.slab[s_prev].next = dst;
            }
        } else {
            d.next = s_next;
            d.size += s_size;
            if s_next != NIL {
                self.slab[s_next].prev = dst;
            }
        }
        self.slab.remove(src);
        s_size
    }

    /// Marks the block `id` at `addr` live.
    #[inline]
    pub fn live_insert(&mut self, addr: u64, id: BlockId) {
        self.live.insert(addr, id);
    }

    /// The live block at `addr`, which is no longer live.
    #[inline]
    pub fn live_remove(&mut self, addr: u64) -> Option<BlockId> {
        self.live.remove(&addr)
    }

    /// The live block at `addr`.
    #[inline]
    pub fn live_get(&self, addr: u64) -> Option<BlockId> {
        self.live.get(&addr).copied()
    }

    /// The clock now.
    #[inline]
    pub fn clock(&self) -> u64 {
        self.clock
    }

    /// Counts one cache lookup; the clock after it.
    #[inline]
    pub fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }
}

impl std::ops::Index<BlockId> for Blocks {
    type Output = Block;
    #[inline]
    fn index(&self, id: BlockId) -> &Block {
        &self.slab[id]
    }
}

impl std::ops::IndexMut<BlockId> for Blocks {
    #[inline]
    fn index_mut(&mut self, id: BlockId) -> &mut Block {
        &mut self.slab[id]
    }
}
