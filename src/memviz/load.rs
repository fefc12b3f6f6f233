//! Reading snapshots: cudasem's JSON ([`Snapshot::to_json`]) and pickles, both cudasem's
//! ([`Snapshot::to_pickle`]) and PyTorch's (`torch.cuda.memory._dump_snapshot`). All three hold
//! PyTorch's dict `{"segments": [...], "device_traces": [[...], ...]}`; keys cudasem does not use
//! (stack `frames`, `segment_pool_id`, `allocator_settings`, …) are ignored.

use super::bounds::{check_json_depth, check_pickle_depth, MAX_DEVICES, MAX_SNAPSHOT_BYTES};
use crate::alloc::trace::quote_prefix;
use crate::cuda::{BlockInfo, BlockState, PoolKind, SegmentInfo, Snapshot, StreamId, TraceAction, TraceEntry};
use crate::error::{Error, Result};
use serde::Deserialize;
use std::path::Path;

#[derive(Deserialize)]
struct SnapshotDict {
    #[serde(default)]
    segments: Vec<SegmentDict>,
    #[serde(default)]
    device_traces: Vec<Vec<TraceDict>>,
}

#[derive(Deserialize)]
struct SegmentDict {
    #[serde(default)]
    device: usize,
    address: u64,
    total_size: usize,
    #[serde(default)]
    stream: u64,
    #[serde(default)]
    segment_type: Option<String>,
    #[serde(default)]
    is_expandable: bool,
    #[serde(default)]
    blocks: Vec<BlockDict>,
}

#[derive(Deserialize)]
struct BlockDict {
    /// Older PyTorch versions leave it out: the blocks tile the segment in order.
    #[serde(default)]
    address: Option<u64>,
    size: usize,
    #[serde(default)]
    requested_size: Option<usize>,
    state: String,
}

#[derive(Deserialize)]
struct TraceDict {
    action: String,
    #[serde(default)]
    addr: u64,
    #[serde(default)]
    size: usize,
    #[serde(default)]
    stream: u64,
    #[serde(default)]
    time_us: u64,
}

/// The error, its reason cut to 300 characters (serde's messages and a snapshot's strings quote
/// values of any length from the file).
fn invalid(reason: impl Into<String>) -> Error {
    Error::InvalidSnapshot { reason: quote_prefix(&reason.into(), 300) }
}

/// Reads a snapshot from the bytes of a file: JSON when the first non-blank byte is `{`, a pickle
/// (any protocol) otherwise.
///
/// Trace entries whose action cudasem does not know are left out (PyTorch's `memory_viz`
/// ignores them too); `free` (PyTorch's older name) reads as `free_requested`. Anything else
/// that is not PyTorch's snapshot dict — a block outside its segment, an unknown block state or
/// `segment_type` — is [`Error::InvalidSnapshot`].
///
/// ```
/// use cudasem::cuda::Snapshot;
/// # fn main() -> cudasem::Result<()> {
/// let snapshot = cudasem::memviz::load_snapshot(br#"{"segments": [], "device_traces": [[]]}"#)?;
/// assert_eq!(snapshot, Snapshot { segments: vec![], device_traces: vec![vec![]] });
/// assert!(cudasem::memviz::load_snapshot(b"not a snapshot").is_err());
/// # Ok(()) }
/// ```
pub fn load_snapshot(bytes: &[u8]) -> Result<Snapshot> {
    let dict: SnapshotDict = if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
        check_json_depth(bytes)?;
        serde_json::from_slice(bytes).map_err(|e| invalid(format!("not a snapshot's JSON: {e}")))?
    } else {
        // PyTorch shares one list of frames between the blocks and trace entries of a stack, and
        // serde-pickle's memo (reference counts for speed) loses the frame dicts inside such a
        // list after its first copy (serde-pickle's open pull request 24). Replacing what it
        // lost by `None` touches only the frames, which are not read here.
        let options = serde_pickle::DeOptions::new().replace_recursive_structures();
        check_pickle_depth(bytes)?;
        serde_pickle::from_slice(bytes, options).map_err(|e| invalid(format!("not a snapshot's pickle: {e}")))?
    };
    if dict.device_traces.len() > MAX_DEVICES {
        let n = dict.device_traces.len();
        return Err(invalid(format!("{n} device traces, more than the cap of {MAX_DEVICES} devices")));
    }
    let segments = dict.segments.into_iter().map(segment).collect::<Result<Vec<_>>>()?;
    let device_traces = dict.device_traces.into_iter().map(|t| t.into_iter().filter_map(entry).collect()).collect();
    let snapshot = Snapshot { segments, device_traces };
    check(&snapshot)?;
    Ok(snapshot)
}

/// Checks what the views compute with, for a snapshot read from a file or made by hand: device
/// indices under the cap, every segment, block and trace entry ending below 2^64, blocks inside
/// their segment, and all sizes together under 2^64 (so every sum the views make fits).
pub(crate) fn check(snapshot: &Snapshot) -> Result<()> {
    if snapshot.device_traces.len() > MAX_DEVICES {
        let n = snapshot.device_traces.len();
        return Err(invalid(format!("{n} device traces, more than the cap of {MAX_DEVICES} devices")));
    }
    for s in &snapshot.segments {
        if s.device >= MAX_DEVICES {
            return Err(invalid(format!(
                "segment {:#x} on device {}, past the cap of {MAX_DEVICES} devices",
                s.address, s.device
            )));
        }
        let end = s.address.checked_add(s.total_size as u64).ok_or_else(|| invalid("a segment past 2^64"))?;
        if s.blocks
            .iter()
            .any(|b| b.address < s.address || b.address.checked_add(b.size as u64).is_none_or(|e| e > end))
        {
            return Err(invalid(format!("segment {:#x}: a block lies outside it", s.address)));
        }
    }
    let traces = || snapshot.device_traces.iter().flatten();
    let mut sizes = snapshot.segments.iter().map(|s| s.total_size).chain(traces().map(|e| e.size));
    sizes.try_fold(0usize, |sum, n| sum.checked_add(n)).ok_or_else(|| invalid("the sizes add up past 2^64 bytes"))?;
    match traces().find(|e| e.addr.checked_add(e.size as u64).is_none()) {
        Some(e) => Err(invalid(format!(
            "trace entry `{}` at {:#x} of {} bytes ends past 2^64",
            e.action.name(),
            e.addr,
            e.size
        ))),
        None => Ok(()),
    }
}

/// Reads the snapshot file at `path` (see [`load_snapshot`]); a file that cannot be read is
/// [`Error::InvalidSnapshot`] naming it.
pub fn read_snapshot(path: impl AsRef<Path>) -> Result<Snapshot> {
    let path = path.as_ref();
    let unreadable = |e: std::io::Error| invalid(format!("cannot read {}: {e}", path.display()));
    let len = std::fs::metadata(path).map_err(unreadable)?.len();
    if len > MAX_SNAPSHOT_BYTES {
        return Err(invalid(format!("{} has {len} bytes, more than the cap of {MAX_SNAPSHOT_BYTES}", path.display())));
    }
    let bytes = std::fs::read(path).map_err(unreadable)?;
    load_snapshot(&bytes).map_err(|e| match e {
        Error::InvalidSnapshot { reason } => invalid(format!("{}: {reason}", path.display())),
        e => e,
    })
}

fn segment(s: SegmentDict) -> Result<SegmentInfo> {
    let segment_type = match s.segment_type.as_deref() {
        Some("small") => PoolKind::Small,
        Some("large") | None => PoolKind::Large,
        Some(other) => return Err(invalid(format!("segment {:#x}: segment_type `{other}`", s.address))),
    };
    let end = s.address.checked_add(s.total_size as u64).ok_or_else(|| invalid("a segment past 2^64"))?;
    let mut info = SegmentInfo {
        device: s.device,
        address: s.address,
        total_size: s.total_size,
        allocated_size: 0,
        active_size: 0,
        requested_size: 0,
        stream: StreamId(s.stream),
        segment_type,
        is_expandable: s.is_expandable,
        segment_pool_id: Default::default(),
        blocks: Vec::with_capacity(s.blocks.len()),
        frames: Default::default(),
    };
    let mut at = s.address;
    for b in s.blocks {
        let state = match b.state.as_str() {
            "active_allocated" => BlockState::ActiveAllocated,
            "active_pending_free" => BlockState::ActivePendingFree,
            "inactive" => BlockState::Inactive,
            other => return Err(invalid(format!("segment {:#x}: block state `{other}`", s.address))),
        };
        let address = b.address.unwrap_or(at);
        let block_end = address.checked_add(b.size as u64).filter(|&e| address >= at && e <= end);
        let Some(block_end) = block_end else {
            return Err(invalid(format!(
                "block {address:#x} of {} bytes overlaps another or lies outside segment {:#x} of {} bytes",
                b.size, s.address, s.total_size
            )));
        };
        at = block_end;
        let requested_size = if state.is_active() { b.requested_size.unwrap_or(b.size).min(b.size) } else { 0 };
        if state == BlockState::ActiveAllocated {
            info.allocated_size += b.size;
        }
        if state.is_active() {
            info.active_size += b.size;
            info.requested_size += requested_size;
        }
        info.blocks.push(BlockInfo { address, size: b.size, requested_size, state, frames: Default::default() });
    }
    Ok(info)
}

/// The action of a trace entry's name, `None` for one cudasem does not know (such entries are
/// left out); `free` (PyTorch's older name) is `free_requested`.
pub(crate) fn known_action(name: &str) -> Option<TraceAction> {
    match name {
        "free" => Some(TraceAction::FreeRequested),
        name => TraceAction::from_name(name),
    }
}

fn entry(t: TraceDict) -> Option<TraceEntry> {
    let action = known_action(&t.action)?;
    Some(TraceEntry {
        action,
        addr: t.addr,
        size: t.size,
        stream: StreamId(t.stream),
        time_us: t.time_us,
        frames: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy() -> Snapshot {
        let seg = SegmentInfo {
            device: 0,
            address: 1 << 20,
            total_size: 2 << 20,
            allocated_size: 1024,
            active_size: 1536,
            requested_size: 1300,
            stream: StreamId(7),
            segment_type: PoolKind::Small,
            is_expandable: false,
            segment_pool_id: Default::default(),
            blocks: vec![
                BlockInfo {
                    address: 1 << 20,
                    size: 1024,
                    requested_size: 1000,
                    state: BlockState::ActiveAllocated,
                    frames: Default::default(),
                },
                BlockInfo {
                    address: (1 << 20) + 1024,
                    size: 512,
                    requested_size: 300,
                    state: BlockState::ActivePendingFree,
                    frames: Default::default(),
                },
                BlockInfo {
                    address: (1 << 20) + 1536,
                    size: (2 << 20) - 1536,
                    requested_size: 0,
                    state: BlockState::Inactive,
                    frames: Default::default(),
                },
            ],
            frames: Default::default(),
        };
        let e = |action, addr, size| TraceEntry {
            action,
            addr,
            size,
            stream: StreamId(7),
            time_us: 5,
            frames: Default::default(),
        };
        Snapshot {
            segments: vec![seg],
            device_traces: vec![vec![
                e(TraceAction::SegmentAlloc, 1 << 20, 2 << 20),
                e(TraceAction::Alloc, 1 << 20, 1000),
                e(TraceAction::Alloc, (1 << 20) + 1024, 300),
                e(TraceAction::FreeRequested, (1 << 20) + 1024, 300),
            ]],
        }
    }

    #[test]
    fn cudasem_json_and_pickle_read_back_equal() {
        let s = busy();
        assert_eq!(load_snapshot(s.to_json().as_bytes()).unwrap(), s);
        assert_eq!(load_snapshot(&s.to_pickle()).unwrap(), s);
    }

    #[test]
    fn bad_files_are_typed_errors() {
        for bytes in [&b""[..], b"{\"segments\": 3}", b"\x80\x02K\x01.", b"{\"segments\": [{\"address\": 0}]}"] {
            assert!(matches!(load_snapshot(bytes), Err(Error::InvalidSnapshot { .. })), "{bytes:?}");
        }
        let mut s = busy();
        s.segments[0].blocks[1].address += 4096;
        let e = load_snapshot(s.to_json().as_bytes()).unwrap_err();
        assert!(matches!(e, Error::InvalidSnapshot { .. }) && e.to_string().contains("overlaps"), "{e}");
        let e = read_snapshot("/nonexistent/snapshot.pickle").unwrap_err();
        assert!(e.to_string().contains("/nonexistent/snapshot.pickle"), "{e}");
    }
}
