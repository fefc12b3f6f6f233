//! The walk of a thread's stack on x86_64 Linux, with framehop: from the capture's own
//! instruction, stack pointer and frame pointer, each frame's unwind rule (where its caller's stack
//! pointer, return address and frame pointer are) is looked up by the frame's address in a
//! per-thread cache and applied; only an address not seen before (or pushed out of the cache)
//! has its rule read from the module's `.eh_frame` ([`super::modules`]). The walk reads nothing but
//! the thread's own stack between the capture's stack pointer and the stack's top.

use super::modules::{self, Tables};
use framehop::{CacheNative, FrameAddress, MayAllocateDuringUnwind, UnwindRegsNative, Unwinder, UnwinderNative};
use std::cell::RefCell;
use std::ops::Range;

/// The most pages outside every module (generated code) a thread remembers, not to look them up
/// again.
const UNKNOWN_MAX: usize = 64;

/// A thread's unwinder: the modules it has met, its rule cache, its stack.
struct Walker {
    unwinder: UnwinderNative<Vec<u8>, MayAllocateDuringUnwind>,
    cache: CacheNative<MayAllocateDuringUnwind>,
    /// The address ranges of the modules added to `unwinder`; the last one met first.
    known: Vec<Range<u64>>,
    /// Pages (address / 4096) no loaded module holds.
    unknown: Vec<u64>,
    /// The thread's stack (empty where the thread's attributes do not tell it).
    stack: Range<u64>,
}

thread_local! {
    static WALKER: RefCell<Option<Walker>> = const { RefCell::new(None) };
}

/// Passes the addresses of the calling frame's stack to `push`, innermost first, until it
/// returns false or the stack ends; false where this walk cannot run (the thread's
/// stack is unknown or the capture runs on another one, as a signal handler may; the thread is
/// being torn down; the first frame's module has no unwind tables), leaving the capture to the
/// system's unwinder.
#[inline(always)]
pub(super) fn capture(mut push: impl FnMut(usize) -> bool) -> bool {
    let (ip, sp, bp): (u64, u64, u64);
    // SAFETY: copies the instruction pointer (of the next instruction), the stack pointer and the
    // frame pointer into three registers of the compiler's choice; reads no memory and changes
    // neither the stack nor the flags. The frame they describe is this function's (or its
    // caller's, where it is inlined), which stays live until the walk, called from here, ends.
    unsafe {
        std::arch::asm!(
            "lea {ip}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            ip = out(reg) ip,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags),
        );
    }
    WALKER
        .try_with(|w| {
            let Ok(mut w) = w.try_borrow_mut() else { return false };
            w.get_or_insert_with(Walker::new).walk(&mut push, UnwindRegsNative::new(ip, sp, bp))
        })
        .unwrap_or(false)
}

impl Walker {
    fn new() -> Walker {
        Walker {
            unwinder: UnwinderNative::new(),
            cache: CacheNative::new(),
            known: Vec::new(),
            unknown: Vec::new(),
            stack: thread_stack().unwrap_or(0..0),
        }
    }

    /// Pushes the frames from `regs` outwards until the stack is full, its root is reached or a
    /// frame cannot be unwound.
    fn walk(&mut self, push: &mut impl FnMut(usize) -> bool, mut regs: UnwindRegsNative) -> bool {
        if !self.stack.contains(&regs.sp()) {
            return false;
        }
        let stack = regs.sp()..self.stack.end;
        let mut read = |addr: u64| read_word(&stack, addr);
        let mut frame = FrameAddress::from_instruction_pointer(regs.ip());
        let mut frames = 0;
        loop {
            frames += 1;
            if !push(frame.address() as usize) {
                return true;
            }
            self.know_module(frame.address_for_lookup());
            match self.unwinder.unwind_frame(frame, &mut regs, &mut self.cache, &mut read) {
                Ok(Some(ra)) => match FrameAddress::from_return_address(ra) {
                    Some(next) => frame = next,
                    None => return true,
                },
                // The root (the thread's start) was reached, or a frame could not be unwound: the
                // stack ends there. A first frame that cannot be unwound (its module has no
                // tables) leaves the capture to the system's unwinder.
                Ok(None) | Err(_) => return frames > 1,
            }
        }
    }

    /// Makes sure the unwinder has the tables of the module holding `addr` (added the first time
    /// the thread meets it); an address no module holds is unwound by framehop's fallback rule.
    fn know_module(&mut self, addr: u64) {
        if let Some(i) = self.known.iter().position(|r| r.contains(&addr)) {
            if i > 0 {
                self.known.swap(0, i);
            }
            return;
        }
        let page = addr / 4096;
        if self.unknown.contains(&page) {
            return;
        }
        match modules::containing(addr) {
            Some(m) => self.add(m),
            None => {
                if self.unknown.len() == UNKNOWN_MAX {
                    self.unknown.remove(0);
                }
                self.unknown.push(page);
            }
        }
    }

    fn add(&mut self, m: Tables) {
        self.known.insert(0, m.avma_range());
        self.unwinder.add_module(m);
    }
}

/// The 8 bytes at `addr` of the thread's stack, where `stack` (from the capture's stack pointer to
/// the stack's top) holds them.
fn read_word(stack: &Range<u64>, addr: u64) -> Result<u64, ()> {
    let end = addr.checked_add(8).ok_or(())?;
    if addr < stack.start || end > stack.end || !addr.is_multiple_of(8) {
        return Err(());
    }
    // SAFETY: `addr..addr + 8` lies in this thread's stack between the capture's stack pointer and
    // the stack's top: the frames of the capture and of its callers, mapped and readable while the
    // walk runs (below them); the address is aligned for a u64. Only plain words are read (saved
    // return addresses and frame pointers), never a value the frames' owners would see changed.
    Ok(unsafe { std::ptr::read_volatile(std::ptr::with_exposed_provenance::<u64>(addr as usize)) })
}

/// The calling thread's stack, lowest to highest address, as its attributes give it.
fn thread_stack() -> Option<Range<u64>> {
    let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::uninit();
    let (mut base, mut size) = (std::ptr::null_mut(), 0usize);
    // SAFETY: `pthread_getattr_np` initializes `attr` for the calling thread when it returns 0;
    // only then is it read (`pthread_attr_getstack` into two locals) and destroyed, once.
    let rc = unsafe {
        if libc::pthread_getattr_np(libc::pthread_self(), attr.as_mut_ptr()) != 0 {
            return None;
        }
        let rc = libc::pthread_attr_getstack(attr.as_ptr(), &mut base, &mut size);
        libc::pthread_attr_destroy(attr.as_mut_ptr());
        rc
    };
    let base = base as u64;
    (rc == 0 && size > 0).then(|| base..base + size as u64)
}
