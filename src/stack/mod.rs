//! Where an access or an allocation was made ([`Stack`]): the stream sanitizer's reports
//! (`src/race.rs`) and the memory history's frames (`src/alloc/frames.rs`) take one per operation,
//! so a capture has to be cheap. It keeps only the instruction pointers of the innermost frames;
//! names, files and lines are looked up when a report is printed or a snapshot is written.
//!
//! On x86_64 Linux the walk is [`walk`]'s: framehop over the loaded modules' `.eh_frame` tables,
//! each frame's unwind rule cached per thread by its return address ([`modules`] finds and copies
//! the tables), so a stack seen before costs a table lookup and a read or two per frame instead of
//! libgcc's search and interpretation of the frame's unwind program. Wherever that walk cannot run
//! (other targets, a thread's stack it cannot bound, a thread being torn down) the `backtrace`
//! crate walks with the system's unwinder, giving the same addresses.

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod modules;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod walk;

use std::cell::RefCell;
use std::ffi::c_void;
use std::fmt;
use std::sync::Arc;

/// The most frames a [`Stack`] keeps: the innermost ones (the capture itself, the runtime's path
/// to it, then the caller's code). Deeper frames (the caller's callers up to `main` or the
/// thread's start) are dropped: the reports and the memory pictures show the first few frames
/// from the caller on, and a fixed bound keeps the stack inline, without a heap allocation.
pub(crate) const MAX_FRAMES: usize = 24;

/// How many of a thread's latest shared captures [`Stack::capture_shared`] compares a new one with.
const RECENT: usize = 4;

thread_local! {
    /// The thread's latest shared captures (a ring, oldest replaced first).
    static RECENT_STACKS: RefCell<(usize, [Option<Arc<Stack>>; RECENT])> = const { RefCell::new((0, [None, None, None, None])) };
}

/// Where an access or an allocation was made: the instruction pointers of the innermost frames
/// of the thread's stack (at most 24), kept inline without a heap allocation and without names.
/// `Display` resolves them to functions, files and lines (as `std::backtrace::Backtrace` prints
/// them); an executable stripped of its symbols shows only addresses.
#[derive(Clone)]
pub struct Stack {
    len: u8,
    ips: [usize; MAX_FRAMES],
}

impl Stack {
    /// The current thread's stack (its innermost frames).
    #[inline(never)]
    pub(crate) fn capture() -> Stack {
        let mut s = Stack { len: 0, ips: [0; MAX_FRAMES] };
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        if walk::capture(|ip| s.push(ip)) {
            return s;
        }
        s.len = 0;
        backtrace::trace(|frame| s.push(frame.ip() as usize));
        s
    }

    /// The current thread's stack, shared: the same allocation as one of the thread's few latest
    /// shared captures when it equals it (a loop allocating and freeing from the same lines keeps
    /// a handful of stacks, not one per event).
    pub(crate) fn capture_shared() -> Arc<Stack> {
        let s = Stack::capture();
        let shared = RECENT_STACKS.try_with(|r| {
            let mut r = r.try_borrow_mut().ok()?;
            let (next, recent) = &mut *r;
            if let Some(same) = recent.iter().flatten().find(|a| a.ips() == s.ips()) {
                return Some(Arc::clone(same));
            }
            let a = Arc::new(s.clone());
            recent[*next] = Some(Arc::clone(&a));
            *next = (*next + 1) % RECENT;
            Some(a)
        });
        shared.ok().flatten().unwrap_or_else(|| Arc::new(s))
    }

    /// Appends the next outer frame's address; false once the stack is full.
    fn push(&mut self, ip: usize) -> bool {
        self.ips[usize::from(self.len)] = ip;
        self.len += 1;
        usize::from(self.len) < MAX_FRAMES
    }

    /// The instruction pointers of the frames, innermost first: the capture's own instruction,
    /// then return addresses (each just after its call; symbolizers look up the byte before).
    pub fn ips(&self) -> &[usize] {
        &self.ips[..usize::from(self.len)]
    }
}

impl fmt::Debug for Stack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.ips().iter().map(|&ip| Hex(ip))).finish()
    }
}

/// An address, as `Debug` shows it in hexadecimal.
struct Hex(usize);

impl fmt::Debug for Hex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

impl fmt::Display for Stack {
    /// One numbered line per function (inlined ones share their frame's number), each followed by
    /// `at file:line:column` where the debug information names it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = Ok(());
        for (i, &ip) in self.ips().iter().enumerate() {
            let mut named = false;
            backtrace::resolve(ip as *mut c_void, |sym| {
                named = true;
                out = out.and_then(|()| write_symbol(f, i, sym));
            });
            if !named {
                out = out.and_then(|()| writeln!(f, "{i:4}: {ip:#x} (unknown)"));
            }
        }
        out
    }
}

fn write_symbol(f: &mut fmt::Formatter<'_>, i: usize, sym: &backtrace::Symbol) -> fmt::Result {
    match sym.name() {
        Some(name) => writeln!(f, "{i:4}: {name:#}")?,
        None => writeln!(f, "{i:4}: <unknown>")?,
    }
    if let (Some(file), Some(line)) = (sym.filename(), sym.lineno()) {
        writeln!(f, "             at {}:{line}:{}", file.display(), sym.colno().unwrap_or(0))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
