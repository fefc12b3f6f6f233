//! The trace a `cudasem replay` command replays, read from a file: a CSV trace (`.csv`,
//! `.csv.gz`), or the allocator history of a snapshot pickle. Shared by the report
//! (`replay.rs`) and the plot (`replay_plot.rs`).

use cudasem::cuda::memory::Trace;
use cudasem::cuda::{Snapshot, TraceAction};
use std::collections::HashSet;
use std::path::Path;

/// Whether `path` is a snapshot pickle (`torch.cuda.memory._dump_snapshot`, or cudasem's
/// `to_pickle`): named `*.pickle` / `*.pkl`, or starting with a pickle's PROTO opcode.
fn is_snapshot(path: &Path) -> bool {
    use std::io::Read;
    if path.extension().is_some_and(|x| x == "pickle" || x == "pkl") {
        return true;
    }
    let mut first = [0u8; 1];
    let read = std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut first));
    read.is_ok() && first[0] == 0x80
}

/// The trace to replay from `path`: a CSV trace (`.csv`, `.csv.gz`), or the history of a snapshot
/// pickle (see [`trace_of_snapshot`]).
pub(super) fn load_trace(path: &Path) -> cudasem::Result<Trace> {
    if !is_snapshot(path) {
        return Trace::from_file(path);
    }
    let snapshot = cudasem::memviz::read_snapshot(path)?;
    trace_of_snapshot(&snapshot).ok_or_else(|| cudasem::Error::InvalidSnapshot {
        reason: format!(
            "{} has no allocator history (device_traces is empty): record it with \
             torch.cuda.memory._record_memory_history(max_entries=...) before the allocations",
            path.display()
        ),
    })
}

/// The allocator history of the first device of `snapshot` that has one, as a trace (`line`: the
/// entry's 1-based number; `None` when no device has a history). The history is a ring of the
/// last `max_entries` events, so it may start mid-run: frees of blocks allocated before its first
/// entry are left out, as are allocations at an address still live (their free fell out of the
/// ring too), so that what is replayed is the part the ring holds whole.
fn trace_of_snapshot(snapshot: &Snapshot) -> Option<Trace> {
    let entries = snapshot.device_traces.iter().find(|t| !t.is_empty())?;
    let mut live = HashSet::new();
    let mut trace = Trace::from_entries(entries);
    for (i, e) in trace.events.iter_mut().enumerate() {
        e.line = i + 1;
    }
    trace.events.retain(|e| match e.action {
        TraceAction::Alloc => live.insert(e.addr),
        TraceAction::FreeCompleted => live.remove(&e.addr),
        _ => true,
    });
    Some(trace)
}
