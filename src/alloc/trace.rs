//! Allocator traces in CSV: `action,addr,size,stream` rows, as recorded from PyTorch with
//! `torch.cuda.memory._record_memory_history()` (see `bench/traces/README.md`).

use super::history::{TraceAction, TraceEntry};
use crate::driver::StreamId;
use crate::error::{Error, Result};
use std::fmt::Write;
use std::path::Path;

/// The header row.
pub const HEADER: &str = "action,addr,size,stream";

/// The most text a trace may have, decompressed (1 GiB): more is [`Error::InvalidTrace`] naming
/// the cap, so a small gzip bomb cannot fill the host's memory.
pub const MAX_TRACE_BYTES: usize = 1 << 30;
/// The most rows a trace may have (2^25, about 33 million).
pub const MAX_TRACE_ROWS: usize = 1 << 25;
/// An error message quotes at most this many characters of an offending row.
const QUOTE_CHARS: usize = 80;

/// At most [`QUOTE_CHARS`] characters of `text`, with `…` where it was cut.
fn quote(text: &str) -> String {
    quote_prefix(text, QUOTE_CHARS)
}

pub(crate) use crate::error::quote_prefix;

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
    /// Text over `MAX_TRACE_BYTES` (1 GiB) or with more than `MAX_TRACE_ROWS` (2^25) rows is
    /// refused the same way; a message quotes at most 80 characters of a row.
    pub fn parse(text: &str) -> Result<Trace> {
        Trace::parse_capped(text, MAX_TRACE_BYTES, MAX_TRACE_ROWS)
    }

    /// [`Trace::parse`] with the caps given.
    fn parse_capped(text: &str, max_bytes: usize, max_rows: usize) -> Result<Trace> {
        if text.len() > max_bytes {
            return Err(too_long(0, max_bytes));
        }
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
                    let reason = format!("header `{}` is not `{HEADER}`", quote(row));
                    return Err(Error::InvalidTrace { line, reason });
                }
                continue;
            }
            if events.len() == max_rows {
                return Err(Error::InvalidTrace {
                    line,
                    reason: format!("more than {max_rows} rows (the cap); split the trace"),
                });
            }
            let fields: Vec<&str> = row.splitn(5, ',').collect();
            if fields.len() != 4 {
                let count = if fields.len() == 5 { "more than 4".to_string() } else { fields.len().to_string() };
                return Err(Error::InvalidTrace { line, reason: format!("{count} fields in `{}`", quote(row)) });
            }
            let action = TraceAction::from_name(fields[0].trim()).ok_or_else(|| Error::InvalidTrace {
                line,
                reason: format!("unknown action `{}`", quote(fields[0].trim())),
            })?;
            let number = |i: usize, what: &str| {
                parse_number(fields[i]).ok_or_else(|| Error::InvalidTrace {
                    line,
                    reason: format!("{what} `{}` is not a non-negative integer below 2^64", quote(fields[i].trim())),
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
        // The file's own size is checked first: a trace past the cap is never read in.
        let len = std::fs::metadata(path).map_err(unreadable)?.len();
        if len > MAX_TRACE_BYTES as u64 {
            return Err(too_long(0, MAX_TRACE_BYTES));
        }
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

    /// Parses gzip-compressed CSV (how the repository keeps its larger traces). Every member of a
    /// multi-member gzip is read (as `gunzip` and Python's `gzip` do); text past
    /// `MAX_TRACE_BYTES` is [`Error::InvalidTrace`] naming the cap.
    pub fn from_gzip(bytes: &[u8]) -> Result<Trace> {
        Trace::parse(&gunzip(bytes, MAX_TRACE_BYTES)?)
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
    /// Saturates at `usize::MAX` (live sizes past 2^64 bytes).
    pub fn peak_live_requested(&self) -> usize {
        let mut live = std::collections::HashMap::new();
        let (mut now, mut peak) = (0u128, 0u128);
        for e in &self.events {
            match e.action {
                TraceAction::Alloc => {
                    if let Some(old) = live.insert(e.addr, e.size) {
                        now -= old as u128;
                    }
                    now += e.size as u128;
                    peak = peak.max(now);
                }
                TraceAction::FreeCompleted => now -= live.remove(&e.addr).unwrap_or(0) as u128,
                _ => {}
            }
        }
        usize::try_from(peak).unwrap_or(usize::MAX)
    }
}

fn too_long(line: usize, cap: usize) -> Error {
    Error::InvalidTrace { line, reason: format!("more than {cap} bytes of text (the cap); split the trace") }
}

/// The text of gzip-compressed `bytes`, all members, at most `cap` bytes of it.
pub(crate) fn gunzip(bytes: &[u8], cap: usize) -> Result<String> {
    use std::io::Read;
    let mut out = Vec::new();
    let limit = u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1);
    let read = flate2::read::MultiGzDecoder::new(bytes).take(limit).read_to_end(&mut out);
    read.map_err(|e| Error::InvalidArgument {
        op: "Trace::from_gzip",
        reason: format!("not gzip-compressed text: {e}"),
    })?;
    if out.len() > cap {
        return Err(Error::InvalidTrace {
            line: 0,
            reason: format!("more than {cap} bytes of text decompressed (the cap); split the trace"),
        });
    }
    String::from_utf8(out)
        .map_err(|e| Error::InvalidArgument { op: "Trace::from_gzip", reason: format!("not UTF-8 text: {e}") })
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

    fn gzip(text: &str) -> Vec<u8> {
        use std::io::Write;
        let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(text.as_bytes()).unwrap();
        z.finish().unwrap()
    }

    #[test]
    fn every_gzip_member_is_read_and_the_text_is_capped() {
        let (a, b) = ("action,addr,size,stream\nalloc,4096,100,0\n", "free_completed,4096,100,0\nalloc,8192,7,1\n");
        let mut two = gzip(a);
        two.extend(gzip(b));
        let t = Trace::from_gzip(&two).unwrap();
        assert_eq!(t.events.len(), 3, "both members");
        assert_eq!(t, Trace::parse(&format!("{a}{b}")).unwrap());
        let bomb = gzip(&"alloc,4096,100,0\n".repeat(1000));
        assert!(bomb.len() < 1000);
        match gunzip(&bomb, 16_999) {
            Err(Error::InvalidTrace { reason, .. }) => assert!(reason.contains("16999 bytes"), "{reason}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(gunzip(&bomb, 17_000).unwrap().len(), 17_000);
    }

    #[test]
    fn rows_and_bytes_are_capped() {
        let text =
            "action,addr,size,stream\n".to_string() + &"alloc,4096,100,0\nfree_completed,4096,100,0\n".repeat(50);
        assert_eq!(Trace::parse_capped(&text, text.len(), 100).unwrap().events.len(), 100);
        match Trace::parse_capped(&text, text.len(), 99) {
            Err(Error::InvalidTrace { line: 101, reason }) => assert!(reason.contains("more than 99 rows"), "{reason}"),
            other => panic!("{other:?}"),
        }
        match Trace::parse_capped(&text, text.len() - 1, 100) {
            Err(Error::InvalidTrace { reason, .. }) => assert!(reason.contains(&format!("{} bytes", text.len() - 1))),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn errors_quote_a_bounded_prefix_of_the_row() {
        let long = format!("alloc,{},1,0", "9".repeat(1 << 20));
        for text in
            [long.clone(), format!("{long},{long}"), "x".repeat(1 << 20), format!("action{}", "y".repeat(1 << 20))]
        {
            let e = Trace::parse(&text).unwrap_err().to_string();
            assert!(e.len() < 400, "{} bytes: {}", e.len(), &e[..200]);
        }
    }
}
