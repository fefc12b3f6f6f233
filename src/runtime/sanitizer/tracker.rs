//! The sanitizer's bookkeeping, without locks or the runtime: vector clocks of streams, events
//! and the host, and the last accesses to each byte range of device memory.
//!
//! Every access is `(stream, seq)`: `seq` is the sanitizer's global count of operations when it
//! was queued. Stream `Y` is ordered after an access `(X, s)` when `X == Y` (one stream runs in
//! order) or `Y`'s clock, or the host's (what the host has waited for is done before anything it
//! queues later), holds `X ≥ s`. Waits merge clocks (pointwise maximum), records copy them.

use crate::driver::{EventId, StreamId};
use crate::race::Stack;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// How far each stream's work is known to be done, by stream.
pub(super) type Clock = HashMap<StreamId, u64>;

/// Bytes `[start, end)` of a device's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Span {
    pub device: usize,
    pub start: u64,
    pub end: u64,
}

/// One access recorded against a span.
#[derive(Clone)]
pub(super) struct Access {
    pub stream: StreamId,
    pub device: usize,
    pub seq: u64,
    pub op: Arc<str>,
    pub write: bool,
    pub backtrace: Option<Stack>,
    /// The memory was freed since, without `record_stream` for this access's stream.
    pub freed: bool,
}

/// The last write to a span and the reads since (at most one per stream: a later read on a
/// stream is ordered after its earlier ones).
#[derive(Default)]
struct Segment {
    write: Option<Access>,
    reads: Vec<Access>,
}

impl Segment {
    fn is_empty(&self) -> bool {
        self.write.is_none() && self.reads.is_empty()
    }
}

/// The state of one order of work: the eager one, or a capture's (its graph's order).
#[derive(Default)]
pub(super) struct Tracker {
    streams: HashMap<StreamId, (usize, Clock)>,
    events: HashMap<EventId, Clock>,
    host: Clock,
    segments: BTreeMap<Span, Segment>,
    /// The longest span ever recorded: overlapping segments start at most this far before.
    max_len: u64,
}

fn join(into: &mut Clock, from: &Clock) {
    for (&s, &v) in from {
        let e = into.entry(s).or_insert(0);
        *e = (*e).max(v);
    }
}

impl Tracker {
    /// Whether work queued on `stream` now is ordered after `a`.
    fn ordered(&self, a: &Access, stream: StreamId) -> bool {
        a.stream == stream
            || self.host.get(&a.stream).is_some_and(|&v| v >= a.seq)
            || self.streams.get(&stream).and_then(|(_, c)| c.get(&a.stream)).is_some_and(|&v| v >= a.seq)
    }

    fn overlapping(&self, span: Span) -> impl Iterator<Item = (&Span, &Segment)> {
        let from = Span { device: span.device, start: span.start.saturating_sub(self.max_len), end: 0 };
        let to = Span { device: span.device, start: span.end, end: 0 };
        self.segments.range(from..to).filter(move |(s, _)| s.end > span.start && s.start < span.end)
    }

    /// The first earlier access that `(span, write)` on `stream` would race with, and the first
    /// byte both touch.
    pub fn conflict(&self, stream: StreamId, span: Span, write: bool) -> Option<(Access, u64)> {
        for (s, seg) in self.overlapping(span) {
            let earlier = seg.write.iter().chain(seg.reads.iter().filter(|_| write));
            if let Some(a) = earlier.into_iter().find(|a| !self.ordered(a, stream)) {
                return Some((a.clone(), s.start.max(span.start)));
            }
        }
        None
    }

    /// Registers `stream` (of `device`) and makes `seq` its latest operation.
    pub fn tick(&mut self, stream: StreamId, device: usize, seq: u64) {
        self.streams.entry(stream).or_insert_with(|| (device, Clock::new())).1.insert(stream, seq);
    }

    /// Records `a` (already checked) against `span`.
    pub fn record(&mut self, span: Span, a: Access) {
        self.max_len = self.max_len.max(span.end - span.start);
        if a.write {
            // Every earlier access inside the span is ordered before this write: forget them.
            self.forget(span);
            self.segments.insert(span, Segment { write: Some(a), reads: Vec::new() });
        } else {
            let seg = self.segments.entry(span).or_default();
            seg.reads.retain(|r| r.stream != a.stream || r.freed);
            seg.reads.push(a);
        }
    }

    /// `event` is recorded on `stream`: it stands for the stream's work so far.
    pub fn record_event(&mut self, stream: StreamId, device: usize, event: EventId) {
        let mut c = self.streams.entry(stream).or_insert_with(|| (device, Clock::new())).1.clone();
        join(&mut c, &self.host);
        self.events.insert(event, c);
    }

    /// `stream` waits for `event`'s last recording (nothing for an event never recorded).
    pub fn wait_event(&mut self, stream: StreamId, device: usize, event: EventId) {
        if let Some(e) = self.events.get(&event) {
            let e = e.clone();
            join(&mut self.streams.entry(stream).or_insert_with(|| (device, Clock::new())).1, &e);
        }
    }

    /// The event was destroyed: a later wait on its id waits for nothing.
    pub fn forget_event(&mut self, event: EventId) {
        self.events.remove(&event);
    }

    /// The host waited for `stream`'s work so far.
    pub fn host_waits_stream(&mut self, stream: StreamId) {
        if let Some((_, c)) = self.streams.get(&stream) {
            let c = c.clone();
            join(&mut self.host, &c);
        }
    }

    /// The host waited for `event`'s last recording.
    pub fn host_waits_event(&mut self, event: EventId) {
        if let Some(e) = self.events.get(&event) {
            let e = e.clone();
            join(&mut self.host, &e);
        }
    }

    /// The host waited for all work of `device`.
    pub fn host_waits_device(&mut self, device: usize) {
        let all: Vec<Clock> = self.streams.values().filter(|(d, _)| *d == device).map(|(_, c)| c.clone()).collect();
        for c in all {
            join(&mut self.host, &c);
        }
    }

    /// The memory `span`, allocated on `stream`, was freed; the streams in `recorded` were given
    /// to `record_stream` (the allocator waits for them before reusing it). Accesses of other
    /// streams that `stream` is not ordered after stay, marked freed (a later access to the
    /// reused memory races with them); the rest are forgotten. Returns one that stays.
    pub fn free(&mut self, span: Span, stream: StreamId, recorded: &[StreamId]) -> Option<Access> {
        let inside: Vec<Span> = self.overlapping(span).map(|(s, _)| *s).collect();
        let mut pending = None;
        for s in inside {
            let mut seg = self.segments.remove(&s).unwrap_or_default();
            let keep = |a: &Access| !(recorded.contains(&a.stream) || self.ordered(a, stream));
            seg.write = seg.write.filter(keep);
            seg.reads.retain(keep);
            for a in seg.write.iter_mut().chain(seg.reads.iter_mut()) {
                a.freed = true;
                pending.get_or_insert_with(|| a.clone());
            }
            if !seg.is_empty() {
                self.segments.insert(s, seg);
            }
        }
        pending
    }

    /// Forgets every access inside `span` (memory whose uses the sanitizer cannot judge).
    pub fn forget(&mut self, span: Span) {
        let inside: Vec<Span> = self
            .overlapping(span)
            .filter(|(s, _)| s.start >= span.start && s.end <= span.end)
            .map(|(s, _)| *s)
            .collect();
        for s in inside {
            self.segments.remove(&s);
        }
    }

    /// Each span the tracker saw and whether it was written (a capture's graph, as a replay
    /// uses it).
    pub fn summary(&self) -> Vec<(Span, bool)> {
        self.segments.iter().map(|(s, seg)| (*s, seg.write.is_some())).collect()
    }
}
