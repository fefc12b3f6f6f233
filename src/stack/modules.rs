//! The loaded modules' unwind tables, for the walk ([`super::walk`]): for the executable or
//! shared library whose code holds an address, its `.eh_frame_hdr` (the `PT_GNU_EH_FRAME`
//! segment: a sorted index of the functions) and its `.eh_frame` (each function's unwind
//! program), copied out of the loaded image once per process and shared by every thread.
//!
//! Modules are found lazily, as their code first shows up on a captured stack (the program itself
//! first; libc's thread start rarely), so the large libraries a process loads but never calls back
//! from (the CUDA driver, cuBLASLt) are never copied. The copies stay valid when a library is
//! unloaded; a later library loaded at the same addresses would be unwound with the earlier one's
//! tables, which at worst gives wrong addresses past that frame (the walk reads only the thread's
//! own stack).

use findshlibs::{IterationControl, Segment, SharedLibrary, TargetSharedLibrary};
use framehop::{ExplicitModuleSectionInfo, Module};
use std::ops::Range;
use std::sync::Mutex;

/// A module as framehop unwinds with it: its tables copied into owned bytes.
pub(super) type Tables = Module<Vec<u8>>;

/// Every module loaded so far, by any thread.
static LOADED: Mutex<Vec<Tables>> = Mutex::new(Vec::new());

/// The module whose code holds `addr`, its tables copied on first use; `None` where no loaded
/// module holds it (generated code, the vDSO's) or the module has no `.eh_frame_hdr`.
pub(super) fn containing(addr: u64) -> Option<Tables> {
    let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(m) = loaded.iter().find(|m| m.avma_range().contains(&addr)) {
        return Some(m.clone());
    }
    let mut found = None;
    TargetSharedLibrary::each(|lib| {
        let bias = lib.virtual_memory_bias().0 as u64;
        let holds = lib.segments().any(|s| s.is_code() && avma(&s, bias).contains(&addr));
        if !holds {
            return IterationControl::Continue;
        }
        found = tables(lib, bias);
        IterationControl::Break
    });
    let m = found?;
    loaded.push(m.clone());
    Some(m)
}

/// The addresses a segment is loaded at.
fn avma(s: &impl Segment, bias: u64) -> Range<u64> {
    let start = s.stated_virtual_memory_address().0 as u64 + bias;
    start..start + s.len() as u64
}

/// `lib`'s unwind tables, copied while the dynamic loader holds it (inside its `each`).
fn tables(lib: &TargetSharedLibrary<'_>, bias: u64) -> Option<Tables> {
    let loads: Vec<Range<u64>> = lib.segments().filter(|s| s.is_load()).map(|s| avma(&s, bias)).collect();
    let within = |r: &Range<u64>| loads.iter().find(|l| l.start <= r.start && r.end <= l.end).cloned();
    let hdr_at = avma(&lib.segments().find(|s| s.name() == "GNU_EH_FRAME")?, bias);
    within(&hdr_at)?;
    let hdr = copy(&hdr_at);
    let eh_frame_start = eh_frame_address(&hdr, hdr_at.start)?;
    // `.eh_frame` ends where its terminator is; its segment's end bounds it (the copy may take the
    // exception tables after it too).
    let segment = within(&(eh_frame_start..eh_frame_start + 4))?;
    let eh_frame_at = eh_frame_start..segment.end;
    let eh_frame = copy(&eh_frame_at);
    let code = lib.segments().filter(|s| s.is_code()).map(|s| avma(&s, bias));
    let text = code.reduce(|a, b| a.start.min(b.start)..a.end.max(b.end))?;
    let svma = |r: &Range<u64>| r.start - bias..r.end - bias;
    let info = ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma: Some(svma(&text)),
        eh_frame_svma: Some(svma(&eh_frame_at)),
        eh_frame: Some(eh_frame),
        eh_frame_hdr_svma: Some(svma(&hdr_at)),
        eh_frame_hdr: Some(hdr),
        ..Default::default()
    };
    let all = loads.iter().cloned().reduce(|a, b| a.start.min(b.start)..a.end.max(b.end))?;
    Some(Module::new(lib.name().to_string_lossy().into_owned(), all, bias, info))
}

/// Where `.eh_frame` starts, as its header at `hdr_address` records it.
fn eh_frame_address(hdr: &[u8], hdr_address: u64) -> Option<u64> {
    let bases = gimli::BaseAddresses::default().set_eh_frame_hdr(hdr_address);
    let parsed = gimli::EhFrameHdr::new(hdr, gimli::LittleEndian).parse(&bases, 8).ok()?;
    match parsed.eh_frame_ptr() {
        gimli::Pointer::Direct(a) => Some(a),
        gimli::Pointer::Indirect(_) => None,
    }
}

/// The bytes of a loaded module at `at`.
fn copy(at: &Range<u64>) -> Vec<u8> {
    let len = usize::try_from(at.end - at.start).unwrap_or(0);
    // SAFETY: `at` lies within one of the module's `PT_LOAD` segments (the callers check), which
    // the dynamic loader maps readable (zero-filled past the file's bytes) for as long as the
    // module stays loaded; the callers run inside findshlibs' `each` (`dl_iterate_phdr`), whose
    // lock keeps it loaded until the bytes are copied.
    let bytes = unsafe { std::slice::from_raw_parts(std::ptr::with_exposed_provenance::<u8>(at.start as usize), len) };
    bytes.to_vec()
}
