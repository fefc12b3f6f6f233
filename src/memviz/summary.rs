//! The figures of a picture ([`Summary`]): peaks, the segments at the moment shown,
//! fragmentation, driver allocations, OOMs; and how a moment of the history is written.

use super::history::History;
use crate::cuda::memory::format_bytes;
use crate::cuda::{BlockState, SegmentInfo, TraceAction};
use std::fmt;

/// The figures of a picture.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Summary {
    /// The device drawn.
    pub device: usize,
    /// Entries of its history (trace).
    pub events: usize,
    /// The highest live bytes over the history (requested sizes, as traces record them).
    pub peak_allocated: usize,
    /// The trace entry just after which that peak is first reached (`None`: before the trace).
    pub peak_at: Option<usize>,
    /// The highest reserved bytes (held from the driver) over the history.
    pub peak_reserved: usize,
    /// The trace entry just after which the segment view is taken (`None`: before the trace).
    pub shown_at: Option<usize>,
    /// Segments at that moment.
    pub segments: usize,
    /// Reserved bytes at that moment.
    pub reserved: usize,
    /// Bytes of allocated blocks at that moment (rounded sizes).
    pub allocated: usize,
    /// Bytes of blocks freed but waiting for their recorded streams at that moment.
    pub pending_free: usize,
    /// Bytes of free blocks in the segments at that moment.
    pub free: usize,
    /// The largest free block at that moment.
    pub largest_free: usize,
    /// `free / reserved` at that moment: the share of reserved memory in free blocks.
    pub fragmentation: f64,
    /// Driver allocations in the history (`segment_alloc` and `segment_map` entries).
    pub driver_allocations: usize,
    /// Driver frees in the history (`segment_free` and `segment_unmap` entries).
    pub driver_frees: usize,
    /// Allocations that ran out of memory in the history (`oom` entries).
    pub ooms: usize,
}

pub(super) fn moment_text(at: Option<usize>, events: usize) -> String {
    match at {
        None => "before the trace".to_string(),
        Some(e) if e + 1 == events => format!("after event {e}, the last"),
        Some(e) => format!("after event {e}"),
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = format_bytes;
        writeln!(f, "cuda:{}, {} events in the history", self.device, self.events)?;
        writeln!(f, "peak allocated     {} {}", b(self.peak_allocated), moment_text(self.peak_at, self.events))?;
        writeln!(f, "peak reserved      {}", b(self.peak_reserved))?;
        writeln!(
            f,
            "segments {:<10} {} segments, {} reserved, {} allocated, {} pending free, {} free",
            moment_text(self.shown_at, self.events),
            self.segments,
            b(self.reserved),
            b(self.allocated),
            b(self.pending_free),
            b(self.free)
        )?;
        writeln!(
            f,
            "fragmentation      {:.3} (free / reserved), largest free block {}",
            self.fragmentation,
            b(self.largest_free)
        )?;
        write!(f, "driver allocs      {} (frees {}), OOMs {}", self.driver_allocations, self.driver_frees, self.ooms)
    }
}

pub(super) fn summarize(
    h: &History,
    segs: &[SegmentInfo],
    device: usize,
    peak_at: Option<usize>,
    peak_allocated: usize,
    shown_at: Option<usize>,
) -> Summary {
    let count = |actions: &[TraceAction]| h.events.iter().filter(|e| actions.contains(&e.action)).count();
    let reserved: usize = segs.iter().map(|s| s.total_size).sum();
    let allocated: usize = segs.iter().map(|s| s.allocated_size).sum();
    let active: usize = segs.iter().map(|s| s.active_size).sum();
    let free = reserved - active;
    let largest_free = segs
        .iter()
        .flat_map(|s| s.blocks.iter())
        .filter(|b| b.state == BlockState::Inactive)
        .map(|b| b.size)
        .max()
        .unwrap_or(0);
    Summary {
        device,
        events: h.events.len(),
        peak_allocated,
        peak_at,
        peak_reserved: h.reserved.iter().copied().max().unwrap_or(0),
        shown_at,
        segments: segs.len(),
        reserved,
        allocated,
        pending_free: active - allocated,
        free,
        largest_free,
        fragmentation: if reserved == 0 { 0.0 } else { free as f64 / reserved as f64 },
        driver_allocations: count(&[TraceAction::SegmentAlloc, TraceAction::SegmentMap]),
        driver_frees: count(&[TraceAction::SegmentFree, TraceAction::SegmentUnmap]),
        ooms: count(&[TraceAction::Oom]),
    }
}
