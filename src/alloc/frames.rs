//! Stack frames of the memory history (`_record_memory_history(stacks="all")`): each event and
//! each active block carries the stack of the call that made it, captured as bare instruction
//! pointers ([`crate::race::Stack`]) and resolved to PyTorch's frame dicts
//! `{filename, line, name}` only when asked (a snapshot serialized, [`Frames::resolve`]).
//!
//! Resolved symbols are cached per instruction pointer for the life of the process, so a
//! snapshot of many events resolves each distinct address once. The frames of cudasem itself
//! (the allocator, the runtime, the tensor code that allocated) are trimmed from the top, so the
//! first frame is the caller's, as PyTorch shows the user's Python line first.

use crate::race::Stack;
use serde::ser::{Serialize, SerializeSeq, SerializeStruct, Serializer};
use std::collections::HashMap;
use std::ffi::c_void;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

/// One frame of a stack trace, as PyTorch's snapshots record it (`{"filename", "line", "name"}`).
/// An address the debug information does not name has `filename` `"??"`, `line` 0 and the
/// address in hexadecimal as `name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Frame {
    /// The source file.
    pub filename: String,
    /// The line in it (1-based; 0 when unknown).
    pub line: u32,
    /// The function (demangled, without its hash).
    pub name: String,
}

/// One resolved frame, shared by every stack holding its address.
#[derive(Clone)]
struct Cached {
    filename: Arc<str>,
    line: u32,
    name: Arc<str>,
    /// A frame of cudasem itself, or of the machinery beneath it (trimmed from a stack's top).
    internal: bool,
    /// A frame of cudasem itself (the capture is one: trimming starts there).
    ours: bool,
}

impl Serialize for Cached {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut d = s.serialize_struct("Frame", 3)?;
        d.serialize_field("filename", &*self.filename)?;
        d.serialize_field("line", &self.line)?;
        d.serialize_field("name", &*self.name)?;
        d.end()
    }
}

/// The stack of an event or a block: none, captured (resolved when asked), or given resolved
/// (as read from a snapshot). Cheap to clone. Serializes as PyTorch's list of frame dicts.
#[derive(Clone, Default)]
pub struct Frames(Repr);

#[derive(Clone, Default)]
enum Repr {
    #[default]
    None,
    Captured(Arc<Stack>),
    Resolved(Arc<[Frame]>),
}

impl Frames {
    /// Frames already resolved (for snapshots read back, or made by hand).
    pub fn new(frames: Vec<Frame>) -> Frames {
        if frames.is_empty() {
            return Frames::default();
        }
        Frames(Repr::Resolved(frames.into()))
    }

    /// A captured stack.
    pub(crate) fn captured(stack: Arc<Stack>) -> Frames {
        Frames(Repr::Captured(stack))
    }

    /// Whether no stack was recorded (history off, or `stacks` off).
    pub fn is_empty(&self) -> bool {
        matches!(self.0, Repr::None)
    }

    /// The frames, innermost (the caller's line) first, cudasem's own frames trimmed.
    pub fn resolve(&self) -> Vec<Frame> {
        match &self.0 {
            Repr::None => Vec::new(),
            Repr::Resolved(f) => f.to_vec(),
            Repr::Captured(s) => resolved(s)
                .iter()
                .map(|c| Frame { filename: c.filename.to_string(), line: c.line, name: c.name.to_string() })
                .collect(),
        }
    }
}

impl PartialEq for Frames {
    /// Equal when both resolve to the same frames (captured stacks: the same addresses).
    fn eq(&self, o: &Frames) -> bool {
        match (&self.0, &o.0) {
            (Repr::None, Repr::None) => true,
            (Repr::Captured(a), Repr::Captured(b)) => a.ips() == b.ips(),
            _ => self.resolve() == o.resolve(),
        }
    }
}
impl Eq for Frames {}

impl fmt::Debug for Frames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::None => f.write_str("[]"),
            Repr::Captured(s) => write!(f, "Frames(captured {} addresses)", s.ips().len()),
            Repr::Resolved(r) => f.debug_list().entries(r.iter()).finish(),
        }
    }
}

impl Serialize for Frames {
    /// PyTorch's `frames`: a list of `{"filename", "line", "name"}` dicts.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            Repr::None => s.serialize_seq(Some(0))?.end(),
            Repr::Resolved(r) => s.collect_seq(r.iter()),
            Repr::Captured(st) => {
                let frames = resolved(st);
                let mut seq = s.serialize_seq(Some(frames.len()))?;
                for c in &frames {
                    seq.serialize_element(c)?;
                }
                seq.end()
            }
        }
    }
}

/// The process-wide cache: instruction pointer → its frames (several where functions were
/// inlined), innermost first.
fn cache() -> &'static Mutex<HashMap<usize, Arc<[Cached]>>> {
    static CACHE: OnceLock<Mutex<HashMap<usize, Arc<[Cached]>>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The frames of `stack`, innermost first, the leading internal ones trimmed (all kept when
/// every frame is internal, or none is named: a stripped executable).
fn resolved(stack: &Stack) -> Vec<Cached> {
    let mut all = Vec::with_capacity(stack.ips().len() * 2);
    {
        let mut cache = cache().lock().unwrap_or_else(|e| e.into_inner());
        // (`backtrace::resolve` looks up the byte before each address: the call of a return
        // address.)
        for &ip in stack.ips() {
            let frames = cache.entry(ip).or_insert_with(|| symbolize(ip));
            all.extend(frames.iter().cloned());
        }
    }
    // The system unwinder's own frames come first where it made the capture (`Stack::capture`'s
    // fallback), then the capture's (cudasem's): from there on, every internal frame goes.
    let Some(ours) = all.iter().position(|c| c.ours) else { return all };
    let first_user = all[ours..].iter().position(|c| !c.internal).map_or(0, |i| ours + i);
    all.drain(..first_user);
    all
}

/// The frames at `ip` (inlined functions first), or one unnamed frame.
fn symbolize(ip: usize) -> Arc<[Cached]> {
    let mut out = Vec::new();
    backtrace::resolve(ip as *mut c_void, |sym| {
        let name = sym.name().map(|n| format!("{n:#}"));
        let filename = sym.filename().map(|p| p.display().to_string());
        let (internal, ours) = classify(name.as_deref(), filename.as_deref());
        out.push(Cached {
            filename: filename.map_or_else(|| "??".into(), Into::into),
            line: sym.lineno().unwrap_or(0),
            name: name.unwrap_or_else(|| format!("{ip:#x}")).into(),
            internal,
            ours,
        });
    });
    if out.is_empty() {
        let name = format!("{ip:#x}").into();
        out.push(Cached { filename: "??".into(), line: 0, name, internal: false, ours: false });
    }
    out.into()
}

/// Whether a frame is internal (see [`is_internal`]) and whether it is cudasem's own. Inlined
/// functions are named without their path, so their file tells: cudasem's sources (the path
/// they were built from, as the debug information records it) and the standard library's.
fn classify(name: Option<&str>, filename: Option<&str>) -> (bool, bool) {
    let in_tests = name.is_some_and(|n| n.contains("::tests::"));
    let our_file = filename.is_some_and(|f| f.starts_with(concat!(env!("CARGO_MANIFEST_DIR"), "/src/")));
    let std_file = filename.is_some_and(|f| f.starts_with("/rustc/"));
    let ours = !in_tests && (our_file || name.is_some_and(|n| n.trim_start_matches('<').starts_with("cudasem::")));
    let internal = ours || (!in_tests && std_file) || name.is_some_and(is_internal);
    (internal, ours)
}

/// A frame of cudasem (not of its own tests), of the backtrace capture, or of the standard
/// library between them (closures, `OnceLock`, trait shims), by its full name: trimmed from a
/// stack's top.
fn is_internal(name: &str) -> bool {
    let path = name.strip_prefix('<').unwrap_or(name);
    const PREFIXES: [&str; 5] = ["cudasem::", "backtrace::", "core::", "std::", "alloc::"];
    PREFIXES.iter().any(|p| path.starts_with(p)) && !name.contains("::tests::")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn here() -> Frames {
        Frames::captured(Arc::new(Stack::capture()))
    }

    #[test]
    fn internal_frames_are_named_by_their_path() {
        assert!(is_internal("cudasem::alloc::allocator::CachingAllocator::malloc"));
        assert!(is_internal("<cudasem::tensor::Tensor as core::ops::arith::Add>::add"));
        assert!(is_internal("core::ops::function::FnOnce::call_once"));
        assert!(!is_internal("my_app::train_step"));
        assert!(!is_internal("<my_app::Net as cudasem::nn::Module>::forward"));
        assert!(!is_internal("cudasem::alloc::frames::tests::here"));
    }

    #[test]
    fn a_captured_stack_resolves_to_this_test_and_serializes_as_frame_dicts() {
        let f = here();
        assert!(!f.is_empty());
        let frames = f.resolve();
        assert!(!frames.is_empty());
        let json = serde_json::to_value(&f).unwrap();
        assert_eq!(json.as_array().unwrap().len(), frames.len());
        assert_eq!(json[0]["name"], frames[0].name.as_str());
        assert_eq!(json[0]["line"], frames[0].line);
        // Resolvable where the test runs with debug information (not in stripped builds).
        if frames.iter().any(|fr| fr.name.contains("tests::here")) {
            assert!(frames[0].name.contains("tests::here"), "{frames:?}");
            assert!(frames[0].filename.ends_with("frames.rs"), "{frames:?}");
        }
        assert_eq!(Frames::new(frames.clone()).resolve(), frames);
        assert_eq!(f, Frames::new(frames));
        assert!(Frames::new(Vec::new()).is_empty());
        assert_eq!(serde_json::to_string(&Frames::default()).unwrap(), "[]");
    }
}
