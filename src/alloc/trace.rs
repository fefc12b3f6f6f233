//! Allocator traces in CSV: `action,addr,size,stream` rows, as recorded from PyTorch with
//! `torch.cuda.memory._record_memory_history()` (see `bench/traces/README.md`).

use super::history::{TraceAction, TraceEntry};
use crate::driver::StreamId;
use crate::error::{Error, Result};
use std::fmt::Write;
use std::path::Path;

/// The header row.
pub const HEADER: &str = "action,addr,size,stream";

/// One row of a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceEvent {
    /// 1-based line number in the text it was read from (0 when made otherwise).
    pub line: usize,
    /// What happened.
    pub action: TraceAction,
    /// The block's (or segment's) address in the traced program.
    pub addr: u64,
    /// Bytes (for `alloc`: as asked for, before rounding).
    pub size: usize,
    /// The stream (0: the default stream).
    pub stream: StreamId,
}

/// A parsed trace.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Trace {
    /// The rows in order.
    pub events: Vec<TraceEvent>,
}

fn parse_number(field: &str) -> Option<u64> {
    let f = field.trim();
    match f.strip_prefix("0x").or_else(|| f.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => f.parse().ok(),
    }
}

impl Trace {
    /// Parses CSV text: an optional `action,addr,size,stream` header, then one row per event
    /// (blank lines are skipped; numbers are decimal or `0x` hex). A malformed row is
    /// [`Error::InvalidTrace`] with its line number.
    pub fn parse(text: &str) -> Result<Trace> {
        let mut events = Vec::new();
        let mut first = true;
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let row = raw.trim();
            if row.is_empty() {
                continue;
            }
            if std::mem::take(&mut first) && row.starts_with("action") {
                if row.replace(' ', "") != HEADER {
                    return Err(Error::InvalidTrace { line, reason: format!("header `{row}` is not `{HEADER}`") });
                }
                continue;
            }
            let fields: Vec<&str> = row.split(',').collect();
            if fields.len() != 4 {
                return Err(Error::InvalidTrace { line, reason: format!("{} fields in `{row}`", fields.len()) });
            }
            let action = TraceAction::from_name(fields[0].trim()).ok_or_else(|| Error::InvalidTrace {
                line,
                reason: format!("unknown action `{}`", fields[0].trim()),
            })?;
            let number = |i: usize, what: &str| {
                parse_number(fields[i]).ok_or_else(|| Error::InvalidTrace {
                    line,
                    reason: format!("{what} `{}` is not a non-negative integer", fields[i].trim()),
                })
            };
            let (addr, size, stream) = (number(1, "addr")?, number(2, "size")?, number(3, "stream")?);
            let size = usize::try_from(size)
                .map_err(|_| Error::InvalidTrace { line, reason: format!("size {size} is too large") })?;
            events.push(TraceEvent { line, action, addr, size, stream: StreamId(stream) });
        }
        Ok(Trace { events })
    }

    /// Reads and parses a trace file: CSV, or gzip-compressed CSV when the name ends in `.gz`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Trace> {
        let path = path.as_ref();
        let unreadable = |e: std::io::Error| Error::InvalidArgument {
            op: "Trace::from_file",
            reason: format!("cannot read {}: {e}", path.display()),
        };
        let bytes = std::fs::read(path).map_err(unreadable)?;
        if path.extension().is_some_and(|x| x == "gz") {
            return Trace::from_gzip(&bytes).map_err(|e| match e {
                Error::InvalidArgument { reason, .. } => {
                    Error::InvalidArgument { op: "Trace::from_file", reason: format!("{}: {reason}", path.display()) }
                }
                e => e,
            });
        }
        let text = String::from_utf8(bytes).map_err(|e| Error::InvalidArgument {
            op: "Trace::from_file",
            reason: format!("{} is not UTF-8 text: {e}", path.display()),
        })?;
        Trace::parse(&text)
    }

    /// Parses gzip-compressed CSV (how the repository keeps its larger traces).
    pub fn from_gzip(bytes: &[u8]) -> Result<Trace> {
        use std::io::Read;
        let mut text = String::new();
        flate2::read::GzDecoder::new(bytes).read_to_string(&mut text).map_err(|e| Error::InvalidArgument {
            op: "Trace::from_gzip",
            reason: format!("not gzip-compressed UTF-8 text: {e}"),
        })?;
        Trace::parse(&text)
    }

    /// A trace of an allocator's recorded history (see `CachingAllocator::record_history`).
    pub fn from_entries(entries: &[TraceEntry]) -> Trace {
        let events = entries
            .iter()
            .map(|e| TraceEvent { line: 0, action: e.action, addr: e.addr, size: e.size, stream: e.stream })
            .collect();
        Trace { events }
    }

    /// The trace as CSV text with the header.
    pub fn to_csv(&self) -> String {
        let mut out = format!("{HEADER}\n");
        for e in &self.events {
            let _ = writeln!(out, "{},{},{},{}", e.action.name(), e.addr, e.size, e.stream.0);
        }
        out
    }

    /// The highest sum of requested bytes of live blocks (between `alloc` and `free_completed`):
    /// the floor no allocator can go under.
    pub fn peak_live_requested(&self) -> usize {
        let mut live = std::collections::HashMap::new();
        let (mut now, mut peak) = (0usize, 0usize);
        for e in &self.events {
            match e.action {
                TraceAction::Alloc => {
                    if let Some(old) = live.insert(e.addr, e.size) {
                        now -= old;
                    }
                    now += e.size;
                    peak = peak.max(now);
                }
                TraceAction::FreeCompleted => now -= live.remove(&e.addr).unwrap_or(0),
                _ => {}
            }
        }
        peak
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_reports_lines() {
        let t = Trace::parse("action,addr,size,stream\nalloc,4096,100,0\n\nfree_completed,0x1000,100,7\r\n").unwrap();
        assert_eq!(t.events.len(), 2);
        assert_eq!(t.events[1].line, 4);
        assert_eq!(t.events[1].addr, 4096);
        assert_eq!(t.events[1].stream, StreamId(7));
        assert_eq!(t.peak_live_requested(), 100);
        assert_eq!(Trace::parse(&t.to_csv()).unwrap().events.len(), 2);
        for (text, line) in [
            ("alloc,1,2\n", 1),
            ("action,addr,size,stream\nalloc,1,2,0\nallok,1,2,0\n", 3),
            ("alloc,1,-2,0", 1),
            ("action,addr,size\n", 1),
            ("alloc,1,2,x", 1),
        ] {
            match Trace::parse(text) {
                Err(Error::InvalidTrace { line: l, .. }) => assert_eq!(l, line, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
    }
}
