//! The segment view: every segment a bar (length by size, one scale for all), split into its
//! blocks — allocated (the requested bytes dark, rounding light), pending free, free — grouped by
//! stream and pool, so fragmentation shows as holes.
//!
//! Blocks narrower than a pixel are gathered per pixel, which takes the colour of the state
//! holding most of its bytes; a bar never gets more rectangles than it has pixels.

use super::svg::{Svg, BACKGROUND, FREE, OUTLINE, PENDING, REQUESTED, ROUNDING};
use super::timeline::WIDTH;
use crate::cuda::memory::format_bytes;
use crate::cuda::{BlockState, PoolKind, SegmentInfo};

const MARGIN: f64 = 20.0;
const BAR: f64 = 18.0;
const GAP: f64 = 6.0;
const ROW: f64 = BAR + 8.0;
const HEADER: f64 = 22.0;
/// The narrowest bar, however small its segment.
const MIN_BAR: f64 = 3.0;
/// Live blocks at least this wide are set off from the block before by a line.
const SEPARATED: f64 = 4.0;
/// Blocks at least this wide get their own tooltip.
const TITLED: f64 = 8.0;

/// What a stretch of a bar shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Requested,
    Rounding,
    Pending,
    Free,
}

impl Kind {
    fn color(self) -> &'static str {
        match self {
            Kind::Requested => REQUESTED,
            Kind::Rounding => ROUNDING,
            Kind::Pending => PENDING,
            Kind::Free => FREE,
        }
    }
}

/// Stretches of one bar, merged where they touch and share a kind.
#[derive(Debug, Default)]
struct Runs {
    runs: Vec<(f64, f64, Kind)>,
    /// A pixel's worth of narrow blocks: (pixel, bytes per kind).
    pixel: Option<(i64, [usize; 4])>,
}

impl Runs {
    fn push(&mut self, from: f64, to: f64, kind: Kind) {
        if to <= from {
            return;
        }
        if let Some(last) = self.runs.last_mut() {
            if last.2 == kind && last.1 >= from - 1e-6 {
                last.1 = last.1.max(to);
                return;
            }
        }
        self.runs.push((from, to, kind));
    }

    fn flush_pixel(&mut self) {
        if let Some((p, bytes)) = self.pixel.take() {
            let most = (0..4).max_by_key(|&k| (bytes[k], std::cmp::Reverse(k))).expect("four kinds");
            let kind = [Kind::Requested, Kind::Rounding, Kind::Pending, Kind::Free][most];
            self.push(p as f64, p as f64 + 1.0, kind);
        }
    }

    /// Adds `bytes` of `kind` over `[from, to)`.
    fn add(&mut self, from: f64, to: f64, kind: Kind, bytes: usize) {
        if to - from >= 1.0 {
            self.flush_pixel();
            self.push(from, to, kind);
            return;
        }
        let p = from.floor() as i64;
        if self.pixel.is_some_and(|(q, _)| q != p) {
            self.flush_pixel();
        }
        let (_, acc) = self.pixel.get_or_insert((p, [0; 4]));
        acc[kind as usize] += bytes;
    }
}

/// The runs of a bar drawn from `x` at `scale` pixels per byte.
fn runs(seg: &SegmentInfo, x: f64, scale: f64) -> Vec<(f64, f64, Kind)> {
    let mut r = Runs::default();
    for b in &seg.blocks {
        let from = x + (b.address - seg.address) as f64 * scale;
        let to = from + b.size as f64 * scale;
        match b.state {
            BlockState::ActiveAllocated if to - from >= 1.0 => {
                let split = from + b.requested_size as f64 * scale;
                r.add(from, split, Kind::Requested, b.requested_size);
                r.add(split, to, Kind::Rounding, b.size - b.requested_size);
            }
            BlockState::ActiveAllocated => r.add(from, to, Kind::Requested, b.size),
            BlockState::ActivePendingFree => r.add(from, to, Kind::Pending, b.size),
            BlockState::Inactive => r.add(from, to, Kind::Free, b.size),
        }
    }
    r.flush_pixel();
    r.runs
}

/// Totals of a set of segments.
#[derive(Debug, Default, Clone, Copy)]
struct Totals {
    reserved: usize,
    allocated: usize,
    pending: usize,
    free: usize,
}

fn totals<'a>(segs: impl Iterator<Item = &'a SegmentInfo>) -> Totals {
    let mut t = Totals::default();
    for s in segs {
        t.reserved += s.total_size;
        t.allocated += s.allocated_size;
        t.pending += s.active_size - s.allocated_size;
        t.free += s.total_size - s.active_size;
    }
    t
}

fn segment_title(s: &SegmentInfo) -> String {
    let t = totals(std::iter::once(s));
    let largest = s.blocks.iter().filter(|b| b.state == BlockState::Inactive).map(|b| b.size).max().unwrap_or(0);
    format!(
        "segment {:#x}: {}{}, {} blocks; allocated {} (requested {}), pending free {}, free {} (largest hole {})",
        s.address,
        format_bytes(s.total_size),
        if s.is_expandable { " (expandable, mapped range)" } else { "" },
        s.blocks.len(),
        format_bytes(t.allocated),
        format_bytes(s.requested_size),
        format_bytes(t.pending),
        format_bytes(t.free),
        format_bytes(largest),
    )
}

fn block_title(s: &SegmentInfo, i: usize) -> String {
    let b = &s.blocks[i];
    let what = match b.state {
        BlockState::ActiveAllocated => format!("allocated, {} requested", format_bytes(b.requested_size)),
        BlockState::ActivePendingFree => "freed, pending (recorded streams not done)".to_string(),
        BlockState::Inactive => "free".to_string(),
    };
    format!("block {:#x}: {}, {what}", b.address, format_bytes(b.size))
}

/// Draws one bar at `(x, y)`, `w` wide; each block with its own tooltip gets the next
/// `data-k` attribute, its index in `keys` (which gets `(seg, block index)`).
#[allow(clippy::too_many_arguments)]
fn bar(svg: &mut Svg, s: &SegmentInfo, seg: usize, x: f64, y: f64, w: f64, keys: &mut Vec<(usize, usize)>) {
    svg.rect_titled(x - 1.0, y - 1.0, w + 2.0, BAR + 2.0, OUTLINE, &segment_title(s));
    svg.rect(x, y, w, BAR, FREE, "");
    let scale = w / s.total_size.max(1) as f64;
    for (from, to, kind) in runs(s, x, scale) {
        if kind != Kind::Free {
            svg.rect(from, y, to - from, BAR, kind.color(), "");
        }
    }
    let mut at = x;
    for (i, b) in s.blocks.iter().enumerate() {
        let bw = b.size as f64 * scale;
        if i > 0 && bw >= SEPARATED && b.state != BlockState::Inactive {
            svg.rect(at, y, 1.0, BAR, BACKGROUND, ""); // where one block ends and the next begins
        }
        if bw >= TITLED {
            let key = format!("data-k=\"{}\" pointer-events=\"all\"", keys.len());
            keys.push((seg, i));
            svg.rect_titled_with(at, y, bw, BAR, "none", &block_title(s, i), &key);
        }
        at += bw;
    }
}

pub(crate) fn pool_name(p: PoolKind) -> &'static str {
    match p {
        PoolKind::Small => "small pool",
        PoolKind::Large => "large pool",
    }
}

/// The segment view's SVG (a group) and its height, for `segs` at the moment named `when`, and
/// the `(segment, block)` indices of the blocks with their own tooltip, in `data-k` order.
pub(crate) fn draw(segs: &[SegmentInfo], when: &str) -> (String, f64, Vec<(usize, usize)>) {
    let mut keys = Vec::new();
    let mut svg = Svg::default();
    svg.text(MARGIN, 22.0, 15.0, "start", &format!("Segments {when}"));
    legend(&mut svg, 44.0);
    let mut groups: Vec<(u64, PoolKind)> = segs.iter().map(|s| (s.stream.0, s.segment_type)).collect();
    groups.sort_unstable_by_key(|&(stream, pool)| (stream, pool as u8));
    groups.dedup();
    let largest = segs.iter().map(|s| s.total_size).max().unwrap_or(1).max(1);
    let scale = (WIDTH - 2.0 * MARGIN) / largest as f64;
    let mut y = 64.0;
    if segs.is_empty() {
        svg.text(MARGIN, y + 14.0, 12.0, "start", "no segments: nothing held from the driver");
        y += ROW;
    }
    for (stream, pool) in groups {
        let members: Vec<(usize, &SegmentInfo)> =
            segs.iter().enumerate().filter(|(_, s)| s.stream.0 == stream && s.segment_type == pool).collect();
        let t = totals(members.iter().map(|m| m.1));
        let head = format!(
            "stream {stream:#x}, {}: {} segments, {} reserved, {} allocated, {} pending free, {} free",
            pool_name(pool),
            members.len(),
            format_bytes(t.reserved),
            format_bytes(t.allocated),
            format_bytes(t.pending),
            format_bytes(t.free)
        );
        svg.text(MARGIN, y + 14.0, 12.0, "start", &head);
        y += HEADER;
        let mut x = MARGIN;
        for (i, s) in members {
            let w = (s.total_size as f64 * scale).max(MIN_BAR);
            if x > MARGIN && x + w > WIDTH - MARGIN {
                x = MARGIN;
                y += ROW;
            }
            bar(&mut svg, s, i, x, y + 1.0, w, &mut keys);
            x += w + GAP;
        }
        y += ROW + 6.0;
    }
    let height = y + 10.0;
    (svg.group(0.0, &format!("data-segments=\"{}\"", segs.len())), height, keys)
}

fn legend(svg: &mut Svg, y: f64) {
    let mut x = MARGIN;
    for (color, label) in [
        (REQUESTED, "allocated: requested"),
        (ROUNDING, "allocated: rounding"),
        (PENDING, "pending free (recorded streams)"),
        (FREE, "free"),
    ] {
        svg.rect(x, y - 10.0, 14.0, 12.0, color, &format!("stroke=\"{OUTLINE}\" stroke-width=\"0.5\""));
        svg.text(x + 20.0, y, 11.0, "start", label);
        x += 60.0 + 6.5 * label.len() as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::{BlockInfo, StreamId};

    fn seg(blocks: &[(usize, usize, BlockState)]) -> SegmentInfo {
        let mut at = 0u64;
        let blocks: Vec<BlockInfo> = blocks
            .iter()
            .map(|&(size, requested_size, state)| {
                at += size as u64;
                BlockInfo { address: at - size as u64, size, requested_size, state, frames: Default::default() }
            })
            .collect();
        let total_size = blocks.iter().map(|b| b.size).sum();
        SegmentInfo {
            device: 0,
            address: 0,
            total_size,
            allocated_size: 0,
            active_size: 0,
            requested_size: 0,
            stream: StreamId(0),
            segment_type: PoolKind::Large,
            is_expandable: false,
            segment_pool_id: Default::default(),
            blocks,
            frames: Default::default(),
        }
    }

    #[test]
    fn narrow_blocks_gather_per_pixel() {
        use BlockState::*;
        // 8 bytes a pixel: a wide allocated block, then 32 one-byte blocks over four pixels
        // (mostly pending), then a wide free block.
        let mut blocks = vec![(496, 400, ActiveAllocated)];
        blocks.extend((0..32).map(|i| (1, 1, if i % 3 == 0 { ActiveAllocated } else { ActivePendingFree })));
        blocks.push((472, 0, Inactive));
        let r = runs(&seg(&blocks), 0.0, 0.125);
        assert_eq!(
            r,
            [
                (0.0, 50.0, Kind::Requested),
                (50.0, 62.0, Kind::Rounding),
                (62.0, 66.0, Kind::Pending),
                (66.0, 125.0, Kind::Free)
            ]
        );
    }
}
