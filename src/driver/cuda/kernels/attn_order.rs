//! The order in which the tensor-core attention kernels take their query tiles, a block each:
//! the code `attn_task` of `cu/attention_params.cu` reads from `AttnP::order`, computed here from
//! the [`AttentionOrder`] chosen, the launch's shape and the device's L2 cache.
//!
//! The code's low [`ORDER_BITS`] bits name the order ([`ORDER_HEAVY`], [`ORDER_HEAD`],
//! [`ORDER_NATURAL`], [`ORDER_SWIZZLE`]); the bits above them hold the swizzle's section, in
//! (batch, head)s (1 to [`MAX_SECTION`]; 0 for the other orders). The struct keeps its layout: one
//! `int` carries both.
//!
//! The swizzle (FlashAttention 3's L2 swizzle of its tile scheduler, with its longest-processing-
//! time-first order inside each section): the B·Hq (batch, head)s split into sections of `G`
//! consecutive ones whose keys and values fill at most half the L2, and whose tiles span at least
//! two waves of blocks ([`swizzle_section`]); the grid runs the sections one after another, and
//! inside a section the heaviest tiles first (every head's last query tile, then the tiles before
//! them). When B·Hq is not a multiple of `G`, the short section runs first, so the grid ends on a
//! whole section's lightest tiles; when all of K/V fits, one section: the
//! [`AttentionOrder::Heavy`] order.
//!
//! Why this arrangement — from the greedy list-scheduling simulation of `attn_order_tests.rs`
//! (blocks taken in grid order by the first free slot, a tile's work its key tiles plus one; 80
//! shapes on an H100-like device of 132 SMs, makespans and the keys and values the resident blocks
//! read, each over the heaviest-first order's, geometric means): a work-conserving schedule's
//! makespan is decided by its tail, so the heavy tiles that start a section after the light ones
//! of the section before cost nothing (a freed slot takes them at once); only the last section's
//! light tiles must be numerous enough to even out the end. FlashAttention 3's arrangement puts
//! the short section last, whose few light tiles cannot (makespan 1.045, up to 1.46); sections of
//! balanced sizes end on a smaller section (1.003, and 140 units against 136 on the E128 bench
//! row); alternating the sections' directions (a serpentine ending heaviest first) smooths the
//! boundaries (0.998) but runs two sections' heavy tiles side by side (resident K/V 0.57, against
//! 0.46 here: 48 MiB against 31.5 on the E128 row); the short section first: 1.0004, worst 1.036,
//! resident K/V 0.46. The two-wave floor: a section smaller than a wave does not bound what the
//! resident blocks read (they span several sections anyway) and leaves the last section too few
//! tiles to even out the end.

use crate::config::AttentionOrder;

/// Bits of the order code below the swizzle's section.
pub(super) const ORDER_BITS: u32 = 8;
/// The heaviest tiles first across the grid.
pub(super) const ORDER_HEAVY: i32 = 0;
/// Each (batch, head)'s tiles together, its last first.
pub(super) const ORDER_HEAD: i32 = 1;
/// Each (batch, head)'s tiles together, in order.
pub(super) const ORDER_NATURAL: i32 = 2;
/// Sections of (batch, head)s, the heaviest tiles first inside each.
pub(super) const ORDER_SWIZZLE: i32 = 3;
/// The largest section the code holds (a positive `int` above [`ORDER_BITS`] bits).
pub(super) const MAX_SECTION: u64 = crate::config::MAX_SWIZZLE_HEADS as u64;

/// A tensor-core attention grid: `heads` (batch, head)s (B·Hq) of `qtiles` query tiles each, a
/// block a tile, on a device that holds `slots` blocks at once (SMs × blocks an SM).
#[derive(Debug, Clone, Copy)]
pub(in crate::driver::cuda) struct TileGrid {
    pub heads: u64,
    pub qtiles: u64,
    pub slots: u64,
}

/// Waves of blocks (`slots` each) a swizzle section's tiles span at least.
pub(super) const SECTION_WAVES: u64 = 2;

/// The (batch, head)s of one swizzle section of `grid`: as many whose keys and values
/// (`head_kv_bytes` each: S·(E + Ev)·the element's bytes, over the query heads sharing a key head)
/// fill at most half of an L2 of `l2_bytes` (the other half for the queries, the outputs and the
/// keys the blocks of the section before still read), but enough that the section's tiles span
/// [`SECTION_WAVES`] waves of blocks (fewer would not bound what the resident blocks read, which
/// then span several sections anyway, and would leave the last section too few light tiles to
/// even out the grid's end); at most all of them (one section: the heaviest-first order), at
/// least 1.
pub(in crate::driver::cuda) fn swizzle_section(grid: TileGrid, head_kv_bytes: u64, l2_bytes: u64) -> u64 {
    let fit = (l2_bytes / 2) / head_kv_bytes.max(1);
    let waves = (SECTION_WAVES * grid.slots).div_ceil(grid.qtiles.max(1));
    fit.max(waves).min(grid.heads).clamp(1, MAX_SECTION)
}

/// `attn_task`'s order code (`cu/attention_params.cu`) of `order` with swizzle sections of
/// `section` (batch, head)s ([`swizzle_section`]): non-causal blocks all do the same work and
/// keep each (batch, head)'s tiles together ([`AttentionOrder::Head`]).
pub(in crate::driver::cuda) fn attn_order(order: AttentionOrder, causal: bool, section: u64) -> i32 {
    match order {
        _ if !causal => ORDER_HEAD,
        AttentionOrder::Heavy => ORDER_HEAVY,
        AttentionOrder::Head => ORDER_HEAD,
        AttentionOrder::Natural => ORDER_NATURAL,
        AttentionOrder::Swizzle => ORDER_SWIZZLE | ((section.clamp(1, MAX_SECTION) as i32) << ORDER_BITS),
    }
}

/// The host's mirror of `attn_task`: the query tile and the (batch, head) of block `task` of a
/// grid of `qtiles` × `heads` under order `code`.
#[cfg(test)]
pub(super) fn attn_task(code: i32, heads: u64, qtiles: u64, task: u64) -> (u64, u64) {
    match code & ((1 << ORDER_BITS) - 1) {
        ORDER_HEAVY => (qtiles - 1 - task / heads, task % heads),
        ORDER_SWIZZLE => {
            let g = (code >> ORDER_BITS) as u64;
            let first = heads % g;
            let (h0, n, r) = if task < first * qtiles {
                (0, first, task)
            } else {
                let t = task - first * qtiles;
                (first + t / (g * qtiles) * g, g, t % (g * qtiles))
            };
            (qtiles - 1 - r / n, h0 + r % n)
        }
        c => {
            let r = task % qtiles;
            (if c == ORDER_HEAD { qtiles - 1 - r } else { r }, task / qtiles)
        }
    }
}
