//! The stack traces of a snapshot file: the `frames` (`[{filename, line, name}]`, first frames
//! first) that PyTorch's `_record_memory_history(stacks=...)` puts on every trace entry and every
//! active block, read beside the snapshot so that the interactive page can say who allocated what.
//!
//! Frames are interned: a trace of millions of entries shares a few thousand stacks. In a pickle,
//! PyTorch shares one list of frames between a block and its `alloc` entry (and more); the
//! loader's serde-pickle loses such a list's dicts after its first copy (see `load.rs`), so
//! pickles are read here by `pickle_tree`, which keeps shared objects shared. Where that reader
//! cannot (an opcode it does not know) serde-pickle reads the file, and a stack that lost a frame
//! is taken from its partner (the block at the same address, or the last `alloc` of it).

use super::bounds::{check_json_depth, check_pickle_depth, MAX_SNAPSHOT_BYTES};
use super::load::known_action;
use super::pickle_tree::{self, Node, Tree};
use crate::cuda::TraceAction;
use crate::error::{Error, Result};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;

/// One frame of a stack trace, as PyTorch's snapshots write it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
pub struct StackFrame {
    /// The source file.
    #[serde(default)]
    pub filename: String,
    /// The line in it.
    #[serde(default)]
    pub line: i64,
    /// The function.
    #[serde(default)]
    pub name: String,
}

impl std::fmt::Display for StackFrame {
    /// `name  file:line`, as the page shows a frame.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}  {}:{}", self.name, self.filename, self.line)
    }
}

/// The stacks of a snapshot: one per trace entry (those [`load_snapshot`](super::load_snapshot)
/// keeps, in its order) and one per active block. Empty where the snapshot has none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stacks {
    frames: Vec<StackFrame>,
    /// Each stack's frames (indices into `frames`); stack 0 is the empty one.
    stacks: Vec<Vec<u32>>,
    /// Per device, per kept trace entry: its stack.
    traces: Vec<Vec<u32>>,
    /// `(device, address)` of an active block: its stack.
    blocks: HashMap<(usize, u64), u32>,
}

/// A stack as the file has it: a list of frames, where serde-pickle's memo may have put `None`
/// for the list or for its frames (see the module's docs).
#[derive(Deserialize)]
#[serde(untagged)]
enum RawFrames {
    List(Vec<RawFrame>),
    Lost,
    /// One list of a pickle's tree, used by every reference to it (interned once).
    #[serde(skip_deserializing)]
    Shared(Rc<[StackFrame]>),
}

impl Default for RawFrames {
    fn default() -> Self {
        RawFrames::List(Vec::new())
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawFrame {
    Frame(StackFrame),
    Lost,
}

#[derive(Deserialize)]
struct RawSnapshot {
    #[serde(default)]
    segments: Vec<RawSegment>,
    #[serde(default)]
    device_traces: Vec<Vec<RawEntry>>,
}

#[derive(Deserialize)]
struct RawSegment {
    #[serde(default)]
    device: usize,
    #[serde(default)]
    address: u64,
    #[serde(default)]
    blocks: Vec<RawBlock>,
}

#[derive(Deserialize)]
struct RawBlock {
    /// Older PyTorch versions leave it out: the blocks tile the segment in order.
    #[serde(default)]
    address: Option<u64>,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    frames: RawFrames,
}

#[derive(Deserialize)]
struct RawEntry {
    action: String,
    #[serde(default)]
    addr: u64,
    #[serde(default)]
    frames: RawFrames,
}

/// A stack as read: its frames, or `None` where the pickle lost some of them.
fn whole(frames: RawFrames) -> Option<Vec<StackFrame>> {
    match frames {
        RawFrames::List(list) => list
            .into_iter()
            .map(|f| match f {
                RawFrame::Frame(f) => Some(f),
                RawFrame::Lost => None,
            })
            .collect(),
        RawFrames::Lost => None,
        RawFrames::Shared(frames) => Some(frames.to_vec()),
    }
}

/// The parts of a pickle's tree that hold stacks, as the deserializers would read them; a shared
/// list of frames is read once and copied.
fn raw_of_tree(t: &Tree, root: usize) -> RawSnapshot {
    let mut cache: HashMap<usize, RawFrames> = HashMap::new();
    let int = |id: Option<usize>| match id.map(|i| t.node(i)) {
        Some(&Node::Int(v)) => Some(v),
        _ => None,
    };
    let mut frames = |id: Option<usize>| -> RawFrames {
        let Some(id) = id else { return RawFrames::default() };
        if !matches!(t.node(id), Node::List(_)) {
            return RawFrames::Lost;
        }
        let list = cache.entry(id).or_insert_with(|| {
            let frames: Option<Rc<[StackFrame]>> = t
                .items(id)
                .iter()
                .map(|&f| {
                    if !matches!(t.node(f), Node::Dict(_)) {
                        return None;
                    }
                    let text = |key| match t.get(f, key).map(|i| t.node(i)) {
                        Some(Node::Str(s)) => s.clone(),
                        _ => String::new(),
                    };
                    let line = int(t.get(f, "line")).and_then(|l| i64::try_from(l).ok()).unwrap_or(0);
                    Some(StackFrame { filename: text("filename"), line, name: text("name") })
                })
                .collect();
            frames.map_or(RawFrames::Lost, RawFrames::Shared)
        });
        match list {
            RawFrames::Shared(rc) => RawFrames::Shared(rc.clone()),
            _ => RawFrames::Lost,
        }
    };
    let field = |id: usize, key: &str| t.get(id, key);
    let segments = field(root, "segments").map_or(&[][..], |l| t.items(l)).iter().map(|&seg| RawSegment {
        device: int(field(seg, "device")).and_then(|d| usize::try_from(d).ok()).unwrap_or(0),
        address: int(field(seg, "address")).and_then(|a| u64::try_from(a).ok()).unwrap_or(0),
        blocks: Vec::new(),
    });
    let mut segments: Vec<RawSegment> = segments.collect();
    let segment_ids = field(root, "segments").map_or(&[][..], |l| t.items(l));
    for (raw, &seg) in segments.iter_mut().zip(segment_ids) {
        raw.blocks = field(seg, "blocks")
            .map_or(&[][..], |l| t.items(l))
            .iter()
            .map(|&b| RawBlock {
                address: int(field(b, "address")).and_then(|a| u64::try_from(a).ok()),
                size: int(field(b, "size")).and_then(|s| u64::try_from(s).ok()).unwrap_or(0),
                frames: frames(field(b, "frames")),
            })
            .collect();
    }
    let device_traces = field(root, "device_traces")
        .map_or(&[][..], |l| t.items(l))
        .iter()
        .map(|&trace| {
            t.items(trace)
                .iter()
                .map(|&e| RawEntry {
                    action: match field(e, "action").map(|i| t.node(i)) {
                        Some(Node::Str(s)) => s.clone(),
                        _ => String::new(),
                    },
                    addr: int(field(e, "addr")).and_then(|a| u64::try_from(a).ok()).unwrap_or(0),
                    frames: frames(field(e, "frames")),
                })
                .collect()
        })
        .collect();
    RawSnapshot { segments, device_traces }
}

impl Stacks {
    /// The stacks of a snapshot file's bytes (JSON or pickle, as [`load_snapshot`](super::load_snapshot)
    /// reads them); a file it would refuse is [`Error::InvalidSnapshot`].
    pub fn load(bytes: &[u8]) -> Result<Stacks> {
        let invalid = |what: &str, e: &dyn std::fmt::Display| Error::InvalidSnapshot {
            reason: crate::alloc::trace::quote_prefix(&format!("not a snapshot's {what}: {e}"), 300),
        };
        let raw: RawSnapshot = if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
            check_json_depth(bytes)?;
            serde_json::from_slice(bytes).map_err(|e| invalid("JSON", &e))?
        } else {
            check_pickle_depth(bytes)?;
            match pickle_tree::parse(bytes) {
                Ok((tree, root)) => raw_of_tree(&tree, root),
                // Opcodes the tree reader does not know: serde-pickle (shared frames may be lost).
                Err(_) => {
                    let options = serde_pickle::DeOptions::new().replace_recursive_structures();
                    serde_pickle::from_slice(bytes, options).map_err(|e| invalid("pickle", &e))?
                }
            }
        };
        Ok(Stacks::from_raw(raw))
    }

    /// The stacks of the snapshot file at `path` (see [`Stacks::load`]).
    pub fn read(path: impl AsRef<Path>) -> Result<Stacks> {
        let path = path.as_ref();
        let invalid = |reason: String| Error::InvalidSnapshot { reason };
        let unreadable = |e: std::io::Error| invalid(format!("cannot read {}: {e}", path.display()));
        let len = std::fs::metadata(path).map_err(unreadable)?.len();
        if len > MAX_SNAPSHOT_BYTES {
            return Err(invalid(format!(
                "{} has {len} bytes, more than the cap of {MAX_SNAPSHOT_BYTES}",
                path.display()
            )));
        }
        Stacks::load(&std::fs::read(path).map_err(unreadable)?).map_err(|e| match e {
            Error::InvalidSnapshot { reason } => invalid(format!("{}: {reason}", path.display())),
            e => e,
        })
    }

    fn from_raw(raw: RawSnapshot) -> Stacks {
        let mut s = Stacks { stacks: vec![Vec::new()], ..Stacks::default() };
        let mut interned: HashMap<Vec<StackFrame>, u32> = HashMap::new();
        let mut frame_ids: HashMap<StackFrame, u32> = HashMap::new();
        let mut intern = |s: &mut Stacks, frames: Vec<StackFrame>| -> u32 {
            if frames.is_empty() {
                return 0;
            }
            if let Some(&id) = interned.get(&frames) {
                return id;
            }
            let ids = frames
                .iter()
                .map(|f| {
                    *frame_ids.entry(f.clone()).or_insert_with(|| {
                        s.frames.push(f.clone());
                        (s.frames.len() - 1) as u32
                    })
                })
                .collect();
            s.stacks.push(ids);
            let id = (s.stacks.len() - 1) as u32;
            interned.insert(frames, id);
            id
        };
        // A shared list of a pickle's tree: its stack, by the list's address (one hash of it).
        let mut shared: HashMap<*const StackFrame, u32> = HashMap::new();
        let mut id_of = |s: &mut Stacks, frames: RawFrames| -> Option<u32> {
            match frames {
                RawFrames::Shared(rc) => Some(match shared.get(&rc.as_ptr()) {
                    Some(&id) => id,
                    None => {
                        let id = intern(s, rc.to_vec());
                        shared.insert(rc.as_ptr(), id);
                        id
                    }
                }),
                other => whole(other).map(|frames| intern(s, frames)),
            }
        };
        let mut lost_blocks = Vec::new();
        for seg in raw.segments {
            let mut at = seg.address;
            for b in seg.blocks {
                let address = b.address.unwrap_or(at);
                at = address.saturating_add(b.size);
                let key = (seg.device, address);
                match id_of(&mut s, b.frames) {
                    Some(0) => {}
                    Some(id) => {
                        s.blocks.insert(key, id);
                    }
                    None => lost_blocks.push(key),
                }
            }
        }
        let mut last_alloc: HashMap<(usize, u64), u32> = HashMap::new();
        for (device, entries) in raw.device_traces.into_iter().enumerate() {
            let mut ids = Vec::with_capacity(entries.len());
            for e in entries {
                let Some(action) = known_action(&e.action) else { continue };
                let id = match id_of(&mut s, e.frames) {
                    Some(id) => id,
                    None => s.blocks.get(&(device, e.addr)).copied().unwrap_or(0),
                };
                if action == TraceAction::Alloc {
                    last_alloc.insert((device, e.addr), id);
                }
                ids.push(id);
            }
            s.traces.push(ids);
        }
        for key in lost_blocks {
            if let Some(&id) = last_alloc.get(&key).filter(|&&id| id != 0) {
                s.blocks.insert(key, id);
            }
        }
        s
    }

    /// Whether no entry or block has a stack.
    pub fn is_empty(&self) -> bool {
        self.stacks.len() <= 1
    }

    /// The frames of trace entry `index` of `device` (empty where it has none).
    pub fn of_entry(&self, device: usize, index: usize) -> impl Iterator<Item = &StackFrame> {
        let id = self.traces.get(device).and_then(|t| t.get(index)).copied().unwrap_or(0);
        self.frames_of(id)
    }

    /// The frames of the active block at `address` of `device` (empty where it has none).
    pub fn of_block(&self, device: usize, address: u64) -> impl Iterator<Item = &StackFrame> {
        self.frames_of(self.blocks.get(&(device, address)).copied().unwrap_or(0))
    }

    /// The stack id of trace entry `index` of `device` (0: none), for pages that share stacks.
    pub(crate) fn entry_id(&self, device: usize, index: usize) -> u32 {
        self.traces.get(device).and_then(|t| t.get(index)).copied().unwrap_or(0)
    }

    /// The stack id of the active block at `address` of `device` (0: none).
    pub(crate) fn block_id(&self, device: usize, address: u64) -> u32 {
        self.blocks.get(&(device, address)).copied().unwrap_or(0)
    }

    /// The frames of stack `id`.
    pub(crate) fn frames_of(&self, id: u32) -> impl Iterator<Item = &StackFrame> {
        let ids = self.stacks.get(id as usize).map(Vec::as_slice).unwrap_or(&[]);
        ids.iter().map(|&f| &self.frames[f as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_frames_are_read_per_entry_and_block() {
        let json = br#"{"segments": [{"device": 0, "address": 4096, "total_size": 8192, "blocks": [
            {"address": 4096, "size": 512, "state": "active_allocated",
             "frames": [{"filename": "a.rs", "line": 3, "name": "make"}, {"filename": "m.rs", "line": 9, "name": "main"}]},
            {"address": 4608, "size": 7680, "state": "inactive", "frames": []}]}],
          "device_traces": [[
            {"action": "alloc", "addr": 4096, "size": 500, "frames": [{"filename": "a.rs", "line": 3, "name": "make"}, {"filename": "m.rs", "line": 9, "name": "main"}]},
            {"action": "something_new", "addr": 1},
            {"action": "free", "addr": 4096, "size": 500, "frames": [{"filename": "d.rs", "line": 1, "name": "drop"}]}]]}"#;
        let s = Stacks::load(json).unwrap();
        let text = |it: &mut dyn Iterator<Item = &StackFrame>| it.map(|f| f.to_string()).collect::<Vec<_>>();
        assert_eq!(text(&mut s.of_entry(0, 0)), ["make  a.rs:3", "main  m.rs:9"]);
        assert_eq!(text(&mut s.of_entry(0, 1)), ["drop  d.rs:1"], "the unknown action is left out, as the loader does");
        assert_eq!(text(&mut s.of_block(0, 4096)), ["make  a.rs:3", "main  m.rs:9"]);
        assert_eq!(s.entry_id(0, 0), s.block_id(0, 4096), "one stack, interned once");
        assert!(s.of_block(0, 4608).next().is_none() && s.of_entry(1, 0).next().is_none());
        assert!(matches!(Stacks::load(b"{\"segments\": 3}"), Err(Error::InvalidSnapshot { .. })));
    }

    #[test]
    fn pickles_read_alike_and_lost_stacks_come_from_their_partner() {
        let frame = |name: &str| json!({"filename": "f.py", "line": 7, "name": name});
        let snapshot = json!({"segments": [{"device": 0, "address": 0, "total_size": 1024, "blocks": [
            {"address": 0, "size": 512, "state": "active_allocated", "frames": [frame("a")]},
            {"address": 512, "size": 512, "state": "active_allocated", "frames": [null]}]}],
          "device_traces": [[{"action": "alloc", "addr": 0, "frames": [null]},
                             {"action": "alloc", "addr": 512, "frames": [frame("b"), frame("main")]}]]});
        let pickle = serde_pickle::to_vec(&snapshot, serde_pickle::SerOptions::new()).unwrap();
        let s = Stacks::load(&pickle).unwrap();
        assert_eq!(s, Stacks::load(snapshot.to_string().as_bytes()).unwrap(), "a pickle reads as its JSON");
        let names = |it: &mut dyn Iterator<Item = &StackFrame>| it.map(|f| f.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&mut s.of_entry(0, 0)), ["a"], "the alloc's lost frames are its block's");
        assert_eq!(names(&mut s.of_block(0, 512)), ["b", "main"], "the block's lost frames are its alloc's");
        // PyTorch's fixture shares one list of frames everywhere (serde-pickle keeps it only for its
        // first use): every entry and active block has it.
        let fixture = include_bytes!("../../tests/fixtures/pytorch_snapshot.pickle");
        let s = Stacks::load(fixture).unwrap();
        let snapshot = super::super::load_snapshot(fixture).unwrap();
        let want = ["forward  train.py:41", "_call_impl  torch/nn/modules/module.py:1751"];
        for i in 0..snapshot.device_traces[0].len() {
            assert_eq!(s.of_entry(0, i).map(|f| f.to_string()).collect::<Vec<_>>(), want, "entry {i}");
        }
        for b in snapshot.blocks_in(crate::cuda::BlockState::ActiveAllocated) {
            assert_eq!(s.of_block(0, b.address).count(), 2, "block {:#x}", b.address);
        }
    }
}
